"""The selection bridge ops: argmax, topk and sort, and the fp16 index helpers.

Index outputs are carried as fp16 integers, exact up to :data:`MAX_INDEX`; an indexed
axis longer than ``MAX_INDEX + 1`` elements is refused when the node is built.
"""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ...facts import Flag, SingleRoute, signed
from ...ranges import Interval, same
from ...registry import bool_attr, choice_attr, int_attr
from ...tensor import Tensor, make
from ..common import norm_axis
from ._common import bridge_op

#: Largest index an fp16 integer holds exactly (2048 = 2**11; 2049 is not an fp16 value).
MAX_INDEX = 2048


def check_index_range(op: str, length: int, what: str) -> None:
    """Refuse an index output whose largest index is not an exact fp16 integer."""
    if length > MAX_INDEX + 1:
        raise ShapeError(
            f"{op}: {what} has {length} elements, but indices are carried as fp16 integers, "
            f"exact only up to {MAX_INDEX}; split that axis into chunks of at most "
            f"{MAX_INDEX + 1} elements"
        )


def first_max(x, axis: int):
    """Index of the first maximum along ``axis``; NaN counts as the maximum (NumPy)."""
    return np.argmax(x, axis=axis)


def _ranking(x, axis: int, descending: bool):
    """Stable ranking along ``axis``: NaN is larger than every number, ties keep index
    order (lower index first) in both directions."""
    nan = np.isnan(x)
    filled = np.where(nan, 0.0, x)
    if descending:
        return np.lexsort((-filled, ~nan), axis=axis)
    return np.lexsort((filled, nan), axis=axis)


def as_indices(idx):
    """Integer indices as float64 values (exact fp16 integers up to MAX_INDEX)."""
    return np.asarray(idx, dtype=np.float64)


def index_interval(length: int, count: int = 1, constant: bool = False) -> Interval:
    """The interval of indices into an axis of ``length`` elements: ``[0, length - 1]``,
    whole numbers (so every non-zero index is at least 1), never NaN whatever the input.

    ``constant``: every input value along the axis is the same number (a point interval
    without NaN), so ties keep index order and the ``count`` indices selected are
    ``0 .. count - 1``.

    Example:
        >>> str(index_interval(6)), str(index_interval(6, 2, constant=True))
        ('[0, 5]', '[0, 1]')
    """
    top = (min(count, length) if constant else length) - 1
    return Interval(0.0, float(max(top, 0)), tiny=1.0)


def _is_constant(iv: Interval) -> bool:
    return iv.lo == iv.hi and not iv.nan


def _argmax_range(node, srcs, env) -> Interval:
    # NaN counts as the maximum but its index is still an index; ties pick the first.
    axis = node.attrs["axis"] % len(node.srcs[0].shape)
    return index_interval(node.srcs[0].shape[axis], 1, _is_constant(srcs[0]))


def _topk_range(node, srcs, env) -> Interval:
    if node.attrs["output"] == "values":
        return same(node, srcs, env)  # selected values of the input, moved
    axis = node.attrs["axis"] % len(node.srcs[0].shape)
    return index_interval(node.srcs[0].shape[axis], node.attrs["k"], _is_constant(srcs[0]))


def _argmax_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) < 1:
        raise ShapeError(f"argmax: input must have rank >= 1, got shape {x}")
    axis = norm_axis("argmax", attrs["axis"], len(x))
    check_index_range("argmax", x[axis], f"axis {attrs['axis']} of {x}")
    if attrs["keepdims"]:
        return x[:axis] + (1,) + x[axis + 1 :]
    return x[:axis] + x[axis + 1 :]


def _argmax_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    idx = first_max(x, axis)
    if attrs["keepdims"]:
        idx = np.expand_dims(idx, axis)
    return as_indices(idx)


_ARGMAX = bridge_op(
    "argmax",
    1,
    {"axis": int_attr(-1, None, "axis"), "keepdims": bool_attr(False, "keepdims")},
    _argmax_shape,
    _argmax_body,
    "index of the first maximum along axis (fp16 integer)",
    flags=(Flag.INDEX_OUTPUT,),
    sign=signed,
    range=_argmax_range,
    route=SingleRoute("no fused reduction/selection lowering (gather/argmax arch-gated)"),
)


def argmax(x, axis=-1, keepdims=False, *, name=None) -> Tensor:
    """Index of the first maximum of ``x`` along ``axis`` (NaN counts as the maximum,
    as in ``numpy.argmax``).

    Inputs: ``x`` of any rank >= 1. Attributes: ``axis`` (default -1), ``keepdims``.
    Output: ``x``'s shape without ``axis`` (kept as size 1 with ``keepdims``). Indices
    are fp16 integers, exact up to 2048, so ``axis`` may hold at most 2049 elements
    (longer raises ShapeError at build time).
    Emulator numerics: exact (a comparison, no rounding).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import argmax
        >>> x = af.input((4,))
        >>> af.compile(argmax(x, keepdims=True))(np.array([1.0, 3.0, 3.0, 2.0]))
        array([1.], dtype=float32)
    """
    return make("argmax", x, axis=axis, keepdims=keepdims, name=name)


def _topk_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) < 1:
        raise ShapeError(f"topk: input must have rank >= 1, got shape {x}")
    axis = norm_axis("topk", attrs["axis"], len(x))
    k = attrs["k"]
    if k > x[axis]:
        raise ShapeError(
            f"topk: k={k} is larger than axis {attrs['axis']} of {x} ({x[axis]} elements); "
            f"use k <= {x[axis]}"
        )
    if attrs["output"] == "indices":
        check_index_range("topk", x[axis], f"axis {attrs['axis']} of {x}")
    return x[:axis] + (k,) + x[axis + 1 :]


def _topk_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    order = _ranking(x, axis, descending=attrs["largest"])
    idx = np.take(order, np.arange(attrs["k"]), axis=axis)
    if attrs["output"] == "indices":
        return as_indices(idx)
    return np.take_along_axis(x, idx, axis=axis)


_TOPK = bridge_op(
    "topk",
    1,
    {
        "k": int_attr(None, 1, "k", required=True),
        "axis": int_attr(-1, None, "axis"),
        "largest": bool_attr(True, "largest"),
        "output": choice_attr(("values", "indices"), "values", "output"),
    },
    _topk_shape,
    _topk_body,
    "k largest (or smallest) values or their indices along axis, sorted",
    sign=signed,
    range=_topk_range,
    min_family=3,  # A14
    route=SingleRoute("no fused selection lowering; the native bridge is the only route"),
)


def topk(x, k, axis=-1, largest=True, *, name=None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) entries of ``x`` along ``axis``: (values, indices).

    Inputs: ``x`` of any rank >= 1. Attributes: ``k`` (1 <= k <= size of ``axis``),
    ``axis`` (default -1), ``largest`` (default True). Output: two nodes of ``x``'s shape
    with ``axis`` resized to ``k`` (the op ``topk`` with ``output="values"`` and with
    ``output="indices"``, same attributes). Sorted descending for ``largest`` (ascending
    otherwise); equal values keep index order, lower index first; NaN ranks above every
    number. Indices are fp16 integers, exact up to 2048, so ``axis`` may hold at most
    2049 elements (longer raises ShapeError at build time). ``name`` labels the values
    node; the indices node is named ``f"{name}/indices"``.
    Emulator numerics: exact (a selection, no rounding).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import topk
        >>> x = af.input((5,))
        >>> vals, idx = af.compile(list(topk(x, 2)))(np.array([1.0, 4.0, 2.0, 4.0, 0.0]))
        >>> vals, idx
        (array([4., 4.], dtype=float32), array([1., 3.], dtype=float32))
    """
    common = {"k": k, "axis": axis, "largest": largest}
    index_name = None if name is None else f"{name}/indices"
    values = make("topk", x, output="values", name=name, **common)
    return values, make("topk", x, output="indices", name=index_name, **common)


def _axis_same_shape(name):
    def rule(in_shapes, attrs):
        x = in_shapes[0]
        if len(x) < 1:
            raise ShapeError(f"{name}: input must have rank >= 1, got shape {x}")
        norm_axis(name, attrs["axis"], len(x))
        return x

    return rule


def _sort_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    order = _ranking(x, axis, descending=attrs["descending"])
    return np.take_along_axis(x, order, axis=axis)


_SORT = bridge_op(
    "sort",
    1,
    {"axis": int_attr(-1, None, "axis"), "descending": bool_attr(False, "descending")},
    _axis_same_shape("sort"),
    _sort_body,
    "stable sort of the values along axis",
    sign=signed,
    range=same,
    min_family=3,  # A14
    route=SingleRoute("no in-graph sort; the native bridge is the only route"),
)


def sort(x, axis=-1, descending=False, *, name=None) -> Tensor:
    """Stable sort of ``x`` along ``axis`` (ascending, or descending).

    Inputs: ``x`` of any rank >= 1. Attributes: ``axis`` (default -1), ``descending``.
    Output: ``x``'s shape. Equal values keep their order; NaN sorts as larger than every
    number (last ascending, first descending). Emulator numerics: exact (values move).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import sort
        >>> af.compile(sort(af.input((3,))))(np.array([2.0, -1.0, 0.5]))
        array([-1. ,  0.5,  2. ], dtype=float32)
    """
    return make("sort", x, axis=axis, descending=descending, name=name)


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_ARGMAX, _TOPK, _SORT)
