"""Output sizes known before a node runs, for :mod:`.onnx_import`'s size limits.

Import evaluates constant subgraphs on the host and builds host index maps for movement
ops, so a model of a few hundred bytes can ask for a ``Tile`` by 2**33, a ``Range`` of
2**40 or an ``Expand`` to (2**20, 2**20). Before a node is folded or converted,
:func:`check_node_outputs` asks ONNX shape inference for its output shapes (its small
constant inputs passed as data, so shapes computed from them are known) and refuses an
output past :func:`aneforge.limits.max_elements` with a
:class:`~aneforge.errors.SizeLimitError` naming the node, the output and the size it
would take. Where inference cannot tell, the ops that grow from a few numbers (Tile,
Expand, Range, ConstantOfShape) are sized from their inputs directly.

Example:
    >>> import numpy as np, onnx
    >>> from onnx import helper
    >>> from aneforge.errors import SizeLimitError
    >>> node = helper.make_node("Tile", ["x", "r"], ["y"])
    >>> x, r = np.ones(4, np.float32), np.array([2**33], np.int64)
    >>> try:
    ...     check_node_outputs(onnx, node, [x, r], 17, "tile")
    ... except SizeLimitError as err:
    ...     print(str(err)[:55])
    from_onnx: Tile 'tile' output 'y': 34359738368 elements
    >>> check_node_outputs(onnx, node, [x, np.array([3], np.int64)], 17, "tile")
"""

from __future__ import annotations

import math

import numpy as np

from ..limits import check_elements, max_elements

__all__ = ["GROWING_OPS", "check_node_outputs"]

#: Constant inputs up to this many elements are given to shape inference as data.
_DATA_LIMIT = 4096

#: Ops whose output can be larger than both the sum and the product of their input sizes
#: (its size comes from parameters, attributes or padding); every other op's output is
#: bounded by one of those, which spares shape inference on small inputs.
GROWING_OPS = frozenset({
    "Tile", "Expand", "Range", "ConstantOfShape", "Pad", "Resize", "Upsample", "OneHot",
    "EyeLike", "CenterCropPad", "Col2Im", "ConvTranspose", "MaxUnpool", "AffineGrid",
    "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "DFT", "STFT",
    "RoiAlign", "MaxRoiPool", "Einsum", "MatMul", "Gemm", "Gather", "GatherND",
    "MatMulInteger", "QLinearMatMul", "Attention", "Conv", "ConvInteger", "QLinearConv",
    "AveragePool", "MaxPool", "LpPool", "TfIdfVectorizer", "ImageDecoder", "Constant",
})  # fmt: skip


def check_node_outputs(onnx, node, inputs, opset: int, label: str) -> None:
    """Refuse ``node`` when one of its outputs would pass the element limit.

    ``inputs`` follows ``node.input``: None for an absent input, a NumPy array for a
    value known at import, ``(shape, onnx_elem_type)`` for a graph tensor. Raises
    :class:`~aneforge.errors.SizeLimitError`; returns None when every size that can be
    known is within the limit."""
    if node.op_type not in GROWING_OPS:
        sizes = [_size(v) for v in inputs if v is not None]
        if max(sum(sizes), math.prod(sizes)) <= max_elements():
            return
    shapes = _inferred(onnx, node, inputs, opset)
    for name, shape in zip(node.output, shapes):
        if shape is not None:
            check_elements(shape, f"from_onnx: {node.op_type} '{label}' output '{name}'")
    if not node.output or shapes[0] is None:
        count = _direct(node.op_type, inputs)
        if count is not None:
            out = node.output[0] if node.output else "0"
            check_elements(count, f"from_onnx: {node.op_type} '{label}' output '{out}'")


def _size(value) -> int:
    return int(value.size) if isinstance(value, np.ndarray) else math.prod(value[0])


def _inferred(onnx, node, inputs, opset: int) -> list:
    """Each output's static shape by ONNX shape inference (None where unknown)."""
    unknown = [None] * len(node.output)
    helper = onnx.helper
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except Exception:  # no such op at this opset: the importer reports it
        return unknown
    types, data = {}, {}
    for name, value in zip(node.input, inputs):
        if not name or value is None:
            continue
        if isinstance(value, np.ndarray):
            try:
                elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            except Exception:  # an object or string array: no tensor type to give
                return unknown
            types[name] = helper.make_tensor_type_proto(elem, value.shape)
            if value.size <= _DATA_LIMIT and value.dtype.kind in "biuf":
                data[name] = onnx.numpy_helper.from_array(value, name)
        else:
            shape, elem = value
            types[name] = helper.make_tensor_type_proto(elem, shape)
    try:
        out = onnx.shape_inference.infer_node_outputs(
            schema, node, types, data, opset_imports=[helper.make_opsetid("", opset)]
        )
    except Exception:  # inference refuses the node: evaluation or the handler reports it
        return unknown
    shapes = []
    for name in node.output:
        t = out.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            shapes.append(None)
            continue
        dims = t.tensor_type.shape.dim
        known = all(d.HasField("dim_value") for d in dims)
        shapes.append(tuple(int(d.dim_value) for d in dims) if known else None)
    return shapes


def _direct(op: str, inputs) -> int | None:
    """The output element count of the ops that grow from a few numbers, from their
    inputs (None when it cannot be told or the op is another)."""
    arrays = [v if isinstance(v, np.ndarray) else None for v in inputs]
    shapes = [
        v.shape if isinstance(v, np.ndarray) else (tuple(v[0]) if v is not None else None)
        for v in inputs
    ]
    arrays += [None] * 3
    shapes += [None] * 3
    try:
        if op == "Tile" and shapes[0] is not None and arrays[1] is not None:
            reps = [max(int(r), 0) for r in arrays[1].reshape(-1)]
            return math.prod(shapes[0]) * math.prod(reps)
        if op == "Expand" and shapes[0] is not None and arrays[1] is not None:
            src, want = list(shapes[0]), [int(d) for d in arrays[1].reshape(-1)]
            n = max(len(src), len(want))
            src, want = [1] * (n - len(src)) + src, [1] * (n - len(want)) + want
            return math.prod(max(a, b, 0) for a, b in zip(src, want))
        if op == "ConstantOfShape" and arrays[0] is not None:
            return math.prod(max(int(d), 0) for d in arrays[0].reshape(-1))
        if op == "Range" and all(a is not None and a.size == 1 for a in arrays[:3]):
            return _range_count(*(a.reshape(-1)[0] for a in arrays[:3]))
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def _range_count(start, limit, delta) -> int | None:
    """``max(ceil((limit - start) / delta), 0)``, exactly for integers."""
    if all(isinstance(v, (np.integer, int)) for v in (start, limit, delta)):
        start, limit, delta = int(start), int(limit), int(delta)
        return None if delta == 0 else max(-((start - limit) // delta), 0)
    start, limit, delta = float(start), float(limit), float(delta)
    if delta == 0 or not all(math.isfinite(v) for v in (start, limit, delta)):
        return None
    return max(math.ceil((limit - start) / delta), 0)
