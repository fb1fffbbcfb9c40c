"""Lifting an old ONNX model to the importer's opset with ``onnx.version_converter``.

The importer maps ONNX ops as opset 13 and later define them. A model whose default
domain declares an older opset (the ``light_*`` models in the onnx wheel are opset 9) is
upgraded in memory, never refused for its age:

1. opsets start at 1: a version below that is refused;
2. the original passes ``onnx.checker``'s structural check first, so the converter (C++)
   only ever sees a well-formed model, and a broken one is refused with the checker's
   reason at its own opset;
3. ``onnx.version_converter.convert_version(model, target)`` rewrites every node of the
   default domain (``Upsample`` becomes ``Resize``, attribute axes become inputs, ...).
   Where it cannot (``BatchNormalization`` with ``spatial=0``, training-mode
   ``Dropout``), its own reason is the error's message;
4. the graph inputs and outputs must keep their names, element types and dims (the
   caller feeds the original's): the converter drops the batch axis of an opset-8 Scan,
   for one, and such a model is refused;
5. the IR version is raised to the least one that the new opsets need (the converter
   keeps the original's, e.g. IR 3 for opset 9, which opset 13 does not allow).

The caller re-runs the full check on the result and records :func:`upgrade_note`.
The caller's ModelProto is never changed (the converter returns a new one).

Example:
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> old = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    >>> new = upgrade_opset(onnx, old, 9, 13)
    >>> [(o.domain, o.version) for o in new.opset_import], new.ir_version >= 7
    ([('', 13)], True)
    >>> upgrade_note(9, 13)
    'from_onnx: the model was upgraded from opset 9 to 13 by onnx.version_converter'
"""

from __future__ import annotations

import re

from .onnx_errors import OnnxImportError

__all__ = ["upgrade_note", "upgrade_opset"]

_PROTOBUF_MAX = 2**31 - 1  # the converter works on the serialized model
# The converter's C++ assertions start with the source location: "/path/file.h:35: fn(): "
_SOURCE_PREFIX = re.compile(r"^\S+\.(?:h|cc|cpp):\d+: [^:]*\(\): ")


def upgrade_note(version: int, target: int) -> str:
    """The note an upgraded model's graph carries (its ``warnings``)."""
    return (
        f"from_onnx: the model was upgraded from opset {version} to {target} by "
        "onnx.version_converter"
    )


def _one_line(err) -> str:
    text = " ".join(str(err).split())
    return _SOURCE_PREFIX.sub("", text) or type(err).__name__


def upgrade_opset(onnx, proto, version: int, target: int):
    """``proto`` (default-domain opset ``version`` < ``target``) as an opset-``target``
    ModelProto from ``onnx.version_converter``, its IR version raised to what the new
    opsets need. An :class:`~.onnx_errors.OnnxImportError` names the reason when the
    model is malformed at its own opset, too big to convert, or not convertible.

    Example:
        >>> import numpy as np, onnx
        >>> from onnx import TensorProto, helper, numpy_helper
        >>> x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 1, 1])
        ...         for n in "xy")
        >>> p = [numpy_helper.from_array(np.ones((2, 1, 1), np.float32), k) for k in "sbmv"]
        >>> bn = helper.make_node("BatchNormalization", ["x", *"sbmv"], ["y"], spatial=0)
        >>> g = helper.make_graph([bn], "g", [x], [y], p)
        >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 7)])
        >>> try:
        ...     upgrade_opset(onnx, m, 7, 13)
        ... except OnnxImportError as err:
        ...     print(str(err).partition("floor): ")[2])  # doctest: +ELLIPSIS
        Assertion ... failed: Attribute spatial must have value 1; re-export the model ...
    """
    if version < 1:
        raise OnnxImportError(
            f"from_onnx: the model declares ONNX opset {version}; opsets start at 1 "
            "(fix the model's opset_import)"
        )
    try:
        too_big = proto.ByteSize() > _PROTOBUF_MAX
    except Exception:  # a message protobuf cannot size
        too_big = True
    if too_big:
        raise OnnxImportError(
            f"from_onnx: the model uses ONNX opset {version} and is over 2 GiB, which "
            f"onnx.version_converter cannot upgrade to opset {target}; re-export it at "
            f"opset {target} or newer"
        )
    try:
        onnx.checker.check_model(proto)
    except Exception as err:  # ValidationError and the like
        raise OnnxImportError(
            f"from_onnx: onnx.checker refuses the model (opset {version}, before any "
            f"upgrade): {_one_line(err).rstrip('.')}; fix the model or the exporter that "
            "wrote it"
        ) from None
    try:
        upgraded = onnx.version_converter.convert_version(proto, int(target))
    except Exception as err:  # the converter's RuntimeError/ValueError: its reason
        raise OnnxImportError(
            f"from_onnx: the model uses ONNX opset {version}, and onnx.version_converter "
            f"cannot upgrade it to opset {target} (the importer's floor): "
            f"{_one_line(err).rstrip('.')}; re-export the model at opset {target} or newer"
        ) from None
    changed = _interface_change(proto, upgraded)
    if changed:
        raise OnnxImportError(
            f"from_onnx: onnx.version_converter changed the model's interface while "
            f"upgrading it from opset {version} to {target}: {changed} (a Scan of opset 8 "
            f"loses its batch axis, for one); re-export the model at opset {target} or newer"
        )
    needed = onnx.helper.find_min_ir_version_for(list(upgraded.opset_import), ignore_unknown=True)
    upgraded.ir_version = max(int(upgraded.ir_version), int(needed))
    return upgraded


def _interface_change(before, after) -> str:
    """The first graph input or output whose name, element type or dims the conversion
    changed, described ('' when none did): the caller feeds the original's shapes."""
    for kind in ("input", "output"):
        old, new = _interface(before, kind), _interface(after, kind)
        if [v.name for v in old] != [v.name for v in new]:
            return f"its {kind}s {[v.name for v in old]} became {[v.name for v in new]}"
        for a, b in zip(old, new):
            if _type_text(a) != _type_text(b):
                return f"{kind} '{a.name}' {_type_text(a)} became {_type_text(b)}"
    return ""


def _interface(model, kind: str) -> list:
    """The graph inputs (initializers listed as inputs, as IR 3 lists them, left out) or
    outputs of ``model``."""
    if kind == "output":
        return list(model.graph.output)
    weights = {i.name for i in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def _type_text(vi) -> str:
    """A value's element type and dims as text (what the interface check compares)."""
    if not vi.type.HasField("tensor_type"):
        return "(not a tensor)"
    tt = vi.type.tensor_type
    dims = tuple(
        d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tt.shape.dim
    )
    return f"{dims} of element type {tt.elem_type}"
