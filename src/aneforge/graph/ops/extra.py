"""Extra ops for the frontends: gather (constant indices along one axis), embedding
(rows of a table at run-time integer ids), embedding_fp16_ids (rows at run-time fp16
whole-number ids) and int_to_fp16 (integer input to fp16).

``gather`` copies the slices of ``x`` at a constant list of indices along ``axis``, in
the order given, repeats allowed. It expresses, without arithmetic, what model formats
write as Gather with constant indices, Expand and Tile (repeated indices), flips and
reversed slices, edge / reflect / wrap padding, nearest-neighbour resizing and channel
permutations (DepthToSpace in DCR order). The engine runs it as static copies (slices
and concatenations), so it is a fused movement op.

Emulator contract (docs/numerics.md, "Movement ops"): values move unchanged, so the
emulator and the float64 executor share one kernel and the result is exact.

``embedding(table, ids)`` is the gather whose indices arrive at run time: the rows of
an fp16 ``table`` (a weight or any fp16 tensor, rows along axis 0) at the integer ids of
an integer input (``af.input(shape, dtype="uint16")``); the output has shape
``ids.shape + table.shape[1:]``. The rows are copied bit for bit (an exact movement op).
An id outside ``[0, rows)`` is an :class:`IdRangeError` at run time naming the bad id and
where it is (the executors add the input's name): never clamped, never wrapped.

``embedding_fp16_ids(table, ids)`` is the same gather at ids computed on the engine: an
fp16 tensor of whole numbers (position ids that the importers derive from token ids,
``cumsum(ids != pad) * (ids != pad) + pad``, exact by construction:
:mod:`aneforge.io.int_values`). At run time every id must be a whole number in
``[0, rows)``; any other value (a fraction, a negative id, one past the table, inf, NaN)
is an :class:`IdValueError` naming the op, the bad id and its index: never rounded,
never clamped. The rows are copied bit for bit; the cost model counts the rows read.

``int_to_fp16(ids)`` converts an integer input to fp16, rounding to nearest even: exact
for ``|v| <= 2048``; beyond, fp16 keeps 11 significant bits (2049 becomes 2048, 40001
becomes 40000) and values from 65520 up (uint16 only) become inf. It is what
``af.cast`` builds for an integer source (attention masks, positions).

Emulator contract (docs/numerics.md, "Movement ops"): values move unchanged, so the
emulator and the float64 executor share one kernel and the result is exact.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 3))
    >>> af.compile(af.gather(x, [2, 0, 0], axis=1))(np.arange(6.0).reshape(2, 3))
    array([[2., 0., 0.],
           [5., 3., 3.]], dtype=float32)
    >>> from aneforge.emulator.interpreter import execute_fp16
    >>> ids = af.input((1, 3), name="ids", dtype="uint16")
    >>> table = np.arange(8.0).reshape(4, 2)
    >>> prog = af.compile(af.embedding(table, ids))
    >>> execute_fp16(prog, [np.array([[3, 0, 3]], np.uint16)])[0].tolist()
    [[[6.0, 7.0], [0.0, 1.0], [6.0, 7.0]]]
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...errors import AttributeValueError, InputError, ShapeError
from ..facts import Flag, all_sources
from ..fp16 import round_fp16
from ..ranges import Interval, same
from ..registry import int_attr, ints_attr, register
from ..tensor import INTEGER_DTYPES
from .common import fused_op, norm_axis


class IdRangeError(InputError):
    """An embedding id outside its table's rows, found at run time."""


class IdValueError(InputError):
    """An fp16 id of ``embedding_fp16_ids`` that is not a whole number within its
    table's rows, found at run time."""


def _gather_indices(shape, attrs) -> tuple[int, np.ndarray]:
    """(axis, indices) normalized into range; out-of-range indices raise ShapeError."""
    if len(shape) < 1:
        raise ShapeError("gather: input must have rank >= 1, got a scalar")
    axis = norm_axis("gather", attrs["axis"], len(shape))
    idx = np.asarray(attrs["indices"], dtype=np.int64)
    if idx.size == 0:
        raise AttributeValueError("gather: indices must hold at least one index")
    d = shape[axis]
    bad = idx[(idx < -d) | (idx >= d)]
    if bad.size:
        raise ShapeError(
            f"gather: index {int(bad[0])} is out of range for axis {attrs['axis']} of "
            f"{tuple(shape)} (size {d}); use indices in [-{d}, {d})"
        )
    return axis, np.where(idx < 0, idx + d, idx)


def _gather_shape(in_shapes, attrs):
    x = in_shapes[0]
    axis, idx = _gather_indices(x, attrs)
    return x[:axis] + (len(idx),) + x[axis + 1 :]


def _gather(inputs, attrs):
    x = inputs[0]
    axis, idx = _gather_indices(x.shape, attrs)
    return np.take(x, idx, axis=axis)


register(
    fused_op(
        "gather",
        1,
        {
            "indices": ints_attr(None, None, "indices", required=True),
            "axis": int_attr(0, None, "axis"),
        },
        _gather_shape,
        lambda inputs, attrs, arith=None: _gather(inputs, attrs),
        _gather,
        doc="the slices of x at constant indices along axis, in order (repeats allowed)",
        sign=all_sources,
        range=same,
        flags=(Flag.MOVEMENT,),
    )
)


# ---- embedding: rows of a table at run-time integer ids --------------------------------


def _rows_shape(op: str):
    """The shape rule of a row gather ``op``: ``ids.shape + table.shape[1:]``."""

    def shape(in_shapes, attrs):
        table, ids = in_shapes
        if len(table) < 1:
            raise ShapeError(f"{op}: the table must have rank >= 1 (rows on axis 0), got a scalar")
        return tuple(ids) + tuple(table[1:])

    return shape


def row_ids(ids, rows: int) -> np.ndarray:
    """``ids`` (an integer array) as row indices of a table of ``rows`` rows, or an
    :class:`IdRangeError` naming the first id outside ``[0, rows)`` and its index. Ids
    that arrive as floats were rounded on the way (fp16 holds whole numbers exactly
    only up to 2048) and are refused: feed integer inputs as integers.

    Example:
        >>> row_ids(np.array([[0, 3]], np.uint16), 4).tolist()
        [[0, 3]]
    """
    ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise IdRangeError(
            f"embedding: ids arrived as {ids.dtype} values, which hold ids exactly only up "
            "to 2048 (fp16); feed the integer input an integer array (a program checks it "
            "with aneforge.graph.tensor.integer_feed)"
        )
    where = _first_bad((ids < 0) | (ids >= rows))
    if where is not None:
        raise IdRangeError(
            f"embedding: id {ids[where].item():g} at index {where} is outside the table's "
            f"{rows} rows [0, {rows}); ids are never clamped: give ids below {rows}"
        )
    return ids.astype(np.intp)


def _first_bad(bad: np.ndarray) -> tuple | None:
    """The index of the first id flagged in ``bad`` (row-major order), or None."""
    if not bad.any():
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0])


def _embedding(inputs, attrs):
    table, ids = inputs
    return np.take(np.asarray(table), row_ids(ids, table.shape[0]), axis=0)


def _embedding_reads(in_shapes, out_shape, attrs):
    """A gather reads the rows it picks (one per id) and every id."""
    return math.prod(out_shape), math.prod(in_shapes[1])


def _register_row_gather(name: str, kernel, doc: str, **record) -> None:
    """Register ``name(table, ids)``: the rows of ``table`` at ``ids`` by ``kernel``
    (both executors), a movement of the table's values that reads one row per id."""
    register(
        replace(
            fused_op(
                name,
                2,
                {},
                _rows_shape(name),
                lambda inputs, attrs, arith=None: kernel(inputs, attrs),
                kernel,
                doc=doc,
                sign=lambda node, nonneg: bool(nonneg[0]),
                range=same,  # every value is one of the table's
                flags=(Flag.MOVEMENT,),
            ),
            reads=_embedding_reads,
            **record,
        )
    )


_register_row_gather(
    "embedding",
    _embedding,
    "the rows of table (axis 0) at the run-time integer ids, copied exactly",
    int_inputs={1: "index"},
)


# ---- embedding_fp16_ids: rows of a table at run-time fp16 whole-number ids -------------


def fp16_row_ids(ids, rows: int) -> np.ndarray:
    """``ids`` (fp16 or float64 values computed at run time) as row indices of a table
    of ``rows`` rows, or an :class:`IdValueError` naming the first id that is not a
    whole number in ``[0, rows)`` and its index.

    Example:
        >>> fp16_row_ids(np.array([[0.0, 3.0]], np.float16), 4).tolist()
        [[0, 3]]
        >>> try:
        ...     fp16_row_ids(np.array([2.5]), 4)
        ... except IdValueError as err:
        ...     print(str(err).split(" is ")[0])
        embedding_fp16_ids: id 2.5 at index (0,)
    """
    ids = np.asarray(ids, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(ids) | (ids != np.floor(ids)) | (ids < 0) | (ids >= rows)
    where = _first_bad(bad)
    if where is not None:
        raise IdValueError(
            f"embedding_fp16_ids: id {ids[where].item():g} at index {where} is not a row of "
            f"the table (a whole number in [0, {rows})); run-time ids are never rounded or "
            f"clamped: compute whole-number ids below {rows}"
        )
    return ids.astype(np.intp)


def _embedding_fp16_ids(inputs, attrs):
    table, ids = inputs
    return np.take(np.asarray(table), fp16_row_ids(ids, table.shape[0]), axis=0)


_register_row_gather(
    "embedding_fp16_ids",
    _embedding_fp16_ids,
    "the rows of table (axis 0) at run-time fp16 whole-number ids, copied exactly",
)


# ---- int_to_fp16: an integer input converted to fp16 ------------------------------------


def _to_fp16(inputs, attrs, arith=None):
    return round_fp16(np.asarray(inputs[0], dtype=np.float64))


def _to_float64(inputs, attrs):
    return np.asarray(inputs[0], dtype=np.float64)


def _int_bounds(node) -> tuple[int, int]:
    """The values the integer source of ``node`` can hold: its declared range, else its
    type's."""
    src = node.srcs[0]
    return src.attrs.get("range") or INTEGER_DTYPES[src.dtype]


def _int_to_fp16_range(node, srcs, env):
    """The fp16 values of the source's whole numbers (its declared range, or its type's,
    met with what the analysis was told): rounding is monotone, and a non-zero integer
    is at least 1 in magnitude."""
    lo, hi = _int_bounds(node)
    s = srcs[0]
    if math.isfinite(s.lo) and math.isfinite(s.hi):
        told = max(lo, math.ceil(s.lo)), min(hi, math.floor(s.hi))
        if told[0] <= told[1]:  # else the told range holds no value of the type: keep it
            lo, hi = told
    return Interval(float(round_fp16(lo)), float(round_fp16(hi)), tiny=1.0)


register(
    replace(
        fused_op(
            "int_to_fp16",
            1,
            {},
            lambda in_shapes, attrs: in_shapes[0],
            _to_fp16,
            _to_float64,
            doc="an integer input as fp16, rounded to nearest even (exact for |v| <= 2048)",
            sign=lambda node, nonneg: _int_bounds(node)[0] >= 0,
            range=_int_to_fp16_range,
        ),
        int_inputs={0: "value"},
    )
)
