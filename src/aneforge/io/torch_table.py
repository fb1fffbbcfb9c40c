"""The complete ATen handler table, and the rules for ATen nodes reading an integer input.

:data:`ATEN` maps an ATen overload (``"aten.convolution.default"``) to its
:class:`~.torch_ops.Entry` (:mod:`.torch_ops` defines the registry and the elementwise,
contraction, normalization and reduction ops; :mod:`.torch_shape` adds the movement and
spatial ones when imported, here).

**Integer inputs** (token ids, attention masks: an int64 / int32 / int16 / int8 / uint8
forward argument) become integer aneforge inputs, carried during the walk as an
:class:`~.int_values.IntView` (the input, seen in some shape) and given their engine
type at the end by :func:`~.onnx_integers.choose_dtype`, as in ONNX import. Only these
nodes may read one (:func:`integer_call`):

- ``embedding(table, ids)`` of a float table, ``table[ids]`` (``index.Tensor`` with one
  index) and ``index_select(table, 0, ids)``: the ``embedding`` op, the table's rows at
  the run-time ids;
- ``_to_copy`` / ``to`` to a float dtype: ``int_to_fp16`` (exact for ``|v| <= 2048``);
  to bool: ``int_to_fp16 != 0``; to int32 / int64 or its own dtype: the same values;
- movements that keep every value in row-major order (``view``, ``reshape``,
  ``flatten``, ``squeeze``, ``unsqueeze``, an ``expand`` or ``permute`` that only adds
  or moves size-1 dims; checked by running the op on an iota), copies (``clone``...)
  and metadata checks;
- ``sym_size`` / ``sym_numel``: constants (shapes are static);
- ``eq`` / ``ne`` (``.Scalar`` / ``.Tensor``) with an integer constant of magnitude
  below 2048: the start of integers computed on the engine (:mod:`.int_values`, which
  states why they are exact).

Integers computed on the engine (an :class:`~.int_values.IntValue`: RoBERTa's position
ids ``(cumsum(ids.ne(pad).int(), 1).type_as(mask) * mask).long() + pad``) may be read
by ``eq`` / ``ne``, ``logical_not`` / ``bitwise_not`` of a bool, the casts above and
``type_as`` (to an integer dtype that holds them, to float, to bool), ``cumsum``,
``add`` / ``sub`` (with ``alpha``) / ``mul`` with an integer constant or another
computed value, the order-keeping movements above, copies and checks, an embedding
(``embedding_fp16_ids``, which checks the ids when it runs) and a ``gather`` of a
constant that is the same along its dim (a constant, as RoBERTa's all-zero token types
at its position ids). An op whose result torch makes float (``pos * 0.5``, ``pos + x``)
reads their fp16 tensor as it reads any float. Each keeps a static interval; one that
leaves ``[-2048, 2048]`` is refused naming the interval.

Any other node reading one (arithmetic or ``cumsum`` on the input's own values, a
comparison with a constant of 2048 or more, indexing by it along another axis...) is
refused naming the input and what the node needs.

Example:
    >>> from aneforge.io.torch_table import ATEN, integer_input
    >>> {"aten.addmm.default", "aten.native_layer_norm.default"} <= set(ATEN)
    True
    >>> view = integer_input("input_ids", (1, 8), "torch.int64")
    >>> view.source.elem_name, view.shape
    ('int64', (1, 8))
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.tensor import Tensor
from . import int_values as iv
from . import torch_shape  # noqa: F401  (registers the movement and spatial handlers)
from .int_values import IntInput, IntValue, IntView
from .onnx_errors import NotExpressible
from .onnx_integers import ONNX_INT_BOUNDS
from .onnx_ops import norm_axis, reshape
from .onnx_values import Host
from .torch_ops import ATEN, Deferred, HighRank, TorchCx, Unavailable, dtype_kind

__all__ = [
    "ATEN",
    "INT_ELEMS",
    "Deferred",
    "HighRank",
    "TorchCx",
    "Unavailable",
    "dtype_kind",
    "flat_values",
    "integer_call",
    "integer_input",
]

#: torch's integer dtypes and the ONNX element types of the same bounds
#: (:data:`~.onnx_integers.ONNX_INT_BOUNDS`), which the engine type is chosen from.
INT_ELEMS = {"torch.uint8": 2, "torch.int8": 3, "torch.int16": 5, "torch.int32": 6,
             "torch.int64": 7}  # fmt: skip
_WIDE = (6, 7)  # int32, int64: hold every engine integer
_SAME = {"clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
         "contiguous.default"}  # fmt: skip
_CHECKS = {"_assert_tensor_metadata.default"}
_CASTS = {"_to_copy.default", "to.dtype", "to.dtype_layout"}
#: Movements kept when they keep every value in row-major order (checked on an iota).
_MOVES = {"view.default", "_unsafe_view.default", "reshape.default", "unsqueeze.default",
          "squeeze.dim", "squeeze.dims", "squeeze.default", "flatten.using_ints",
          "unflatten.int", "expand.default", "permute.default", "transpose.int",
          "t.default", "slice.Tensor", "select.int"}  # fmt: skip
_LOOKUPS = {"embedding.default", "index.Tensor", "index_select.default"}
#: Comparisons that start integers computed on the engine (:mod:`.int_values`).
_COMPARES = {"eq.Scalar", "eq.Tensor", "ne.Scalar", "ne.Tensor"}
_NOTS = {"logical_not.default", "bitwise_not.default"}
_ARITH = {"add.Tensor": "add", "add.Scalar": "add", "sub.Tensor": "sub", "sub.Scalar": "sub",
          "mul.Tensor": "mul", "mul.Scalar": "mul"}  # fmt: skip
#: Movements that reorder, repeat or drop values (refused on an integer input).
_REORDERS = {"flip.default", "roll.default", "repeat.default", "cat.default", "stack.default",
             "index.Tensor", "gather.default", "take.default", "index_select.default",
             "constant_pad_nd.default", "split.Tensor", "split_with_sizes.default",
             "unbind.int", "narrow.default", "as_strided.default"}  # fmt: skip
#: Ops reading an integer tensor as indices.
_INDEXING = _LOOKUPS | {"gather.default", "take.default", "index_put.default", "scatter.src",
                        "scatter.value", "scatter_add.default", "scatter.reduce",
                        "index_add.default", "index_copy.default"}  # fmt: skip
_MOVED = ("its values moved (reordered, repeated or dropped); only movements that keep them in "
          "order (view, reshape, flatten, squeeze, unsqueeze) are expressible")  # fmt: skip
_AS_IDS = ("read it only as the ids of an embedding (nn.Embedding, table[ids] or "
           "index_select on axis 0 of a float table), or compute the op outside the model "
           "and pass its result as an input")  # fmt: skip


def integer_input(name: str, shape, dtype) -> IntView:
    """A new integer input ``name`` of torch dtype ``dtype`` (one of :data:`INT_ELEMS`),
    provisionally uint16 until :func:`~.onnx_integers.choose_dtype` picks its type."""
    kind = str(dtype)
    src = IntInput.declare(name, shape, INT_ELEMS[kind], kind.replace("torch.", ""), "lookup")
    return IntView(src, src.shape)


def integer_call(cx, args, kwargs):
    """The value of the ATen node ``cx.fx``, which reads an integer input (an
    :class:`~.onnx_integers.IntView` among ``args`` / ``kwargs``), or
    :class:`~.onnx_errors.NotExpressible` naming the input and what the node needs."""
    key = cx.key.removeprefix("aten.")
    view = next(v for v in flat_values((args, kwargs)) if isinstance(v, IntView))
    if key in _COMPARES or any(isinstance(v, IntValue) for v in flat_values((args, kwargs))):
        return _derived(cx, key, args, kwargs, view)
    first = args[0] if args and isinstance(args[0], IntView) else None
    rest = flat_values((args[1:], kwargs))
    params = not any(isinstance(v, (IntView, Tensor, HighRank)) for v in rest)
    if first is not None and params:
        if key in _SAME:
            return first
        if key in _CHECKS:
            return None
        if key == "sym_size.int":
            return int(first.shape[norm_axis(int(args[1]), len(first.shape), "dim")])
        if key == "sym_numel.default":
            return math.prod(first.shape)
        if key in _CASTS:
            dtype = args[1] if key == "to.dtype" and len(args) > 1 else kwargs.get("dtype")
            return _cast(cx, first, dtype)
        if key in _MOVES:
            return _move(cx, first, args, kwargs)
    ids = _lookup_ids(key, args) if first is None else None
    if ids is not None:
        return _embedding(cx, args[0], ids)
    moved = args and any(isinstance(v, IntView) for v in flat_values(args[0]))
    if moved and (key in _MOVES or key in _REORDERS):
        raise _refusal(view, _MOVED)
    if key in _INDEXING:
        raise _refusal(view, "its values as run-time indices of this kind", _AS_IDS)
    raise _refusal(view, "integer arithmetic (or a comparison) on its values")


def _refusal(view: IntView, needs: str, fix: str = "") -> NotExpressible:
    name = view.source.name
    fix = fix or (
        f"cast it to float in forward first ({name}.float(); fp16 holds integers exactly "
        "up to 2048), or compute the op outside the model and pass its result as an input"
    )
    return NotExpressible(
        f"input '{name}' ({view.source.elem_name}) is a run-time integer input, which the "
        "engine reads only as the ids of an embedding (rows of a float table) or through a "
        f"cast to float or bool; this op needs {needs}: {fix}"
    )


def _label(cx) -> str:
    """The node's name for the notes: its module's path and FX name."""
    stack = cx.fx.meta.get("nn_module_stack") or {}
    path = str(list(stack.values())[-1][0]) if stack else ""
    return f"{path}/{cx.fx.name}" if path and not path.startswith("_empty") else cx.fx.name


def _cast(cx, view: IntView, dtype):
    src = view.source
    if dtype is None:
        return view
    kind, name = dtype_kind(dtype), str(dtype).replace("torch.", "")
    if kind == "i" and (INT_ELEMS[str(dtype)] in _WIDE or INT_ELEMS[str(dtype)] == src.elem):
        return view  # every engine integer fits: the same values
    if kind not in "fb":
        raise _refusal(view, f"a cast to {name}, which wraps the values outside its range")
    src.casts.append(_label(cx))
    out = iv.converted(cx, view)
    return cx.op("not_equal", out, 0.0) if kind == "b" else out


def _derived(cx, key: str, args, kwargs, view: IntView):
    """The ATen node ``cx.fx`` computing integers on the engine (:mod:`.int_values`): a
    comparison of the input or a derived value, or any node reading a derived value."""
    where = f"{key} '{cx.fx.name}'"
    first = args[0] if args else None
    out_dtype = cx.dtype()
    raw = any(isinstance(v, IntView) and not isinstance(v, IntValue)
              for v in flat_values((args, kwargs)))  # fmt: skip
    if key in _COMPARES:
        return iv.compare(cx, first, args[1], where, _label(cx), negate=key.startswith("ne."))
    ids = _lookup_ids(key, args)
    if isinstance(ids, IntValue):
        return iv.rows(cx, args[0], ids)
    if key == "gather.default" and isinstance(first, Host) and isinstance(args[2], IntValue):
        return iv.uniform_gather(first, args[2], int(args[1]), where)
    if not raw and out_dtype is not None and dtype_kind(out_dtype) == "f" and cx.key in ATEN:
        # a float result (type promotion: ids * 0.5, pos + x): the values as fp16 data
        swap = _as_tensors((args, kwargs))
        return ATEN[cx.key].fn(cx, *swap[0], **swap[1])
    if key in _ARITH and len(args) > 1:
        other, alpha = args[1], kwargs.get("alpha", 1)
        if alpha != 1:
            other = (
                iv.arith(cx, "mul", other, alpha, where)
                if isinstance(other, IntView)
                else (np.asarray(other.value if isinstance(other, Host) else other) * alpha)
            )
        return iv.arith(cx, _ARITH[key], first, other, where)
    if isinstance(first, IntValue) and not _contains_run_time(args[1:], kwargs):
        if key in _SAME:
            return first
        if key in _CHECKS:
            return None
        if key in ("sym_size.int", "sym_numel.default"):
            return integer_call(cx, (IntView(first.source, first.shape), *args[1:]), kwargs)
        if key in _NOTS and out_dtype is not None and dtype_kind(out_dtype) == "b":
            return iv.logical_not(cx, first, where)
        if key in _CASTS or key == "type_as.default":
            return _cast_value(cx, first, out_dtype, where)
        if key == "cumsum.default":
            return iv.cumsum(cx, first, int(args[1]), where)
        if key in _MOVES:
            return iv.view(cx, first, _move(cx, first, args, kwargs).shape)
    if key == "type_as.default" and isinstance(first, IntValue):
        return _cast_value(cx, first, out_dtype, where)
    raise iv.refusal(
        view.source, where, "is not among the operations on computed integers (eq, ne, "
        "logical_not, casts, cumsum, add, sub, mul, views, an embedding of a float table, "
        "a gather of a constant that is the same along its axis)",
    )  # fmt: skip


def _cast_value(cx, value: IntValue, dtype, where: str):
    if dtype is None:
        return value
    kind, name = dtype_kind(dtype), str(dtype).replace("torch.", "")
    if kind == "i" and str(dtype) in INT_ELEMS:
        return iv.cast(cx, value, "i", where, ONNX_INT_BOUNDS[INT_ELEMS[str(dtype)]], name)
    if kind in "fb":
        return iv.cast(cx, value, kind, where)
    raise iv.refusal(value.source, where, f"casts computed integers to {name}")


def _contains_run_time(*values) -> bool:
    return any(isinstance(v, (IntView, Tensor, HighRank)) for v in flat_values(values))


def _as_tensors(value):
    """``value`` (nested arguments) with each :class:`~.int_values.IntValue` replaced
    by its fp16 tensor."""
    if isinstance(value, IntValue):
        return value.tensor
    if isinstance(value, (list, tuple)):
        return type(value)(_as_tensors(v) for v in value)
    if isinstance(value, dict):
        return {k: _as_tensors(v) for k, v in value.items()}
    return value


def _move(cx, view: IntView, args, kwargs):
    torch = cx.importer.torch
    n = math.prod(view.shape)
    iota = torch.arange(n, dtype=torch.int64).reshape(view.shape)
    rest = [torch.as_tensor(np.array(v.value)) if isinstance(v, Host) else v for v in args[1:]]
    try:
        out = cx.fx.target(iota, *rest, **kwargs)
    except (RuntimeError, IndexError, ValueError, TypeError) as err:
        raise NotExpressible(f"it does not fit the input's shape {view.shape} ({err})") from None
    if out.numel() == n and torch.equal(out.reshape(-1), iota.reshape(-1)):
        return IntView(view.source, tuple(int(d) for d in out.shape))
    raise _refusal(view, _MOVED)


def _lookup_ids(key: str, args) -> IntView | None:
    """The ids of a lookup of a float table's rows (None: not such a lookup)."""
    if key == "embedding.default" and len(args) > 1:
        ids = args[1]
    elif key == "index.Tensor" and len(args) > 1 and len(args[1]) == 1:
        ids = args[1][0]
    elif key == "index_select.default" and len(args) > 2 and args[1] in (0, -len(_shape(args[0]))):
        ids = args[2]
    else:
        return None
    return ids if isinstance(ids, IntView) and not isinstance(args[0], IntView) else None


def _shape(value) -> tuple:
    if isinstance(value, Host):
        return tuple(value.value.shape)
    return tuple(getattr(value, "shape", ())) or (1,)


def _embedding(cx, weight, ids: IntView):
    if isinstance(weight, Host) and weight.value.dtype.kind != "f":
        raise _refusal(ids, "a lookup in an integer table (integer results)")
    table = cx.t(weight)
    if table.ndim == 0:
        raise _refusal(ids, "a lookup in a scalar (a table has its rows on axis 0)")
    ids.source.tables.append((_label(cx), table.shape[0]))
    rows = cx.op("embedding", table, ids.source.tensor)
    return reshape(cx, rows, ids.shape + table.shape[1:])


def flat_values(value):
    """The leaves of nested lists, tuples and dicts (an ATen node's arguments).

    Example:
        >>> list(flat_values([1, (2, {"a": 3})]))
        [1, 2, 3]
    """
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from flat_values(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from flat_values(v)
    else:
        yield value
