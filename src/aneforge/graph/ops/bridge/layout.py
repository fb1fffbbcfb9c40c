"""The layout bridge ops, pure data movement: flatten, space_to_channel,
channel_to_space, space_to_batch, batch_to_space, input_view and dynamic_slice."""

from __future__ import annotations

import numpy as np

from ....errors import AttributeValueError, ShapeError
from ...facts import (
    Decomposition,
    Flag,
    SingleRoute,
    Work,
    all_sources,
    first_source,
    prod,
)
from ...ranges import same
from ...registry import int_attr, ints_attr
from ...rewrite import BIT_IDENTICAL
from ...tensor import Tensor, make
from ._common import bridge_op, need_rank

_MOVEMENT = (Flag.MOVEMENT,)
#: The work scalar of a window op: its output elements (keys: their ``size=``).
_WINDOW_WORK = Work(lambda in_shapes, out, attrs: float(prod(out)), lambda f, e: f.get("size"))


def _flatten_shape(in_shapes, attrs):
    x = in_shapes[0]
    r, axis = len(x), attrs["axis"]
    if not -r <= axis <= r:
        raise AttributeValueError(
            f"flatten: axis {axis} is out of range for rank {r}; use -{r} <= axis <= {r}"
        )
    if axis < 0:
        axis += r
    size = int(np.prod(x, dtype=np.int64))
    if axis == 0:
        return (size,)
    lead = int(np.prod(x[:axis], dtype=np.int64))
    return (lead, size // lead)


def _flatten_body(st, inputs, attrs):
    x = inputs[0]
    return x.reshape(_flatten_shape([x.shape], attrs))


def _decompose_flatten(node: Tensor) -> Tensor:
    """A reshape to the same shape."""
    return make("reshape", node.srcs[0], shape=node.shape)


_FLATTEN = bridge_op(
    "flatten",
    1,
    {"axis": int_attr(0, None, "axis")},
    _flatten_shape,
    _flatten_body,
    "flatten to (prod(shape[:axis]), prod(shape[axis:])), or 1-D for axis 0",
    flags=_MOVEMENT,
    sign=all_sources,
    range=same,
    route=Decomposition(
        _decompose_flatten,
        "a reshape",
        BIT_IDENTICAL,
        "a reshape moves no values (spec: relerr 0.0)",
    ),
)


def flatten(x, axis=0, *, name=None) -> Tensor:
    """ONNX-style flatten: the axes before ``axis`` become one dim, the rest another.

    Inputs: ``x`` of any rank. Attributes: ``axis`` in [-rank, rank] (negative counts
    from the end). Output: ``(prod(shape[:axis]), prod(shape[axis:]))`` for axis > 0;
    for axis 0 the 1-D ``(size,)``. Emulator numerics: pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import flatten
        >>> flatten(af.input((2, 3, 4)), axis=1).shape, flatten(af.input((2, 3))).shape
        ((2, 12), (6,))
    """
    return make("flatten", x, axis=axis, name=name)


def _factor_attr():
    return {"factor": int_attr(None, 1, "factor", required=True)}


def _blocks_shape(name):
    def rule(in_shapes, attrs):
        x, r = in_shapes[0], attrs["factor"]
        need_rank(name, x, (4,), "[N, C, H, W]")
        n, c, h, w = x
        if name in ("space_to_channel", "space_to_batch"):
            if h % r or w % r:
                raise ShapeError(
                    f"{name}: H={h} and W={w} of {x} must be multiples of factor {r}; "
                    "pad or crop the spatial dims first"
                )
            if name == "space_to_channel":
                return (n, c * r * r, h // r, w // r)
            return (n * r * r, c, h // r, w // r)
        if name == "channel_to_space":
            if c % (r * r):
                raise ShapeError(
                    f"channel_to_space: C={c} of {x} must be a multiple of factor**2 = {r * r}"
                )
            return (n, c // (r * r), h * r, w * r)
        if n % (r * r):
            raise ShapeError(
                f"batch_to_space: N={n} of {x} must be a multiple of factor**2 = {r * r}"
            )
        return (n // (r * r), c, h * r, w * r)

    return rule


def _space_to_channel_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // r, r, w // r, r)  # (n, c, i, dy, j, dx)
    return blocks.transpose(0, 1, 3, 5, 2, 4).reshape(n, c * r * r, h // r, w // r)


def _channel_to_space_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c // (r * r), r, r, h, w)  # (n, c, dy, dx, i, j)
    return blocks.transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def _space_to_batch_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // r, r, w // r, r)  # (n, c, i, dy, j, dx)
    return blocks.transpose(3, 5, 0, 1, 2, 4).reshape(n * r * r, c, h // r, w // r)


def _batch_to_space_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    b, c, h, w = x.shape
    n = b // (r * r)
    blocks = x.reshape(r, r, n, c, h, w)  # (dy, dx, n, c, i, j)
    return blocks.transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * r, w * r)


# Why the block moves have no fused route.
_RANK5 = (
    "the reshape+transpose decomposition needs a rank-6 intermediate; the compiler rejects "
    "rank > 5 ('Rank of the shape parameter must be between 0 and 5')"
)
_BLOCKS = tuple(
    bridge_op(
        name,
        1,
        _factor_attr(),
        _blocks_shape(name),
        body,
        doc,
        flags=_MOVEMENT,
        sign=all_sources,
        range=same,
        route=SingleRoute(_RANK5),
    )
    for name, body, doc in (
        ("space_to_channel", _space_to_channel_body, "[N,C,H,W] -> [N,C*r*r,H/r,W/r]"),
        ("channel_to_space", _channel_to_space_body, "[N,C*r*r,H,W] -> [N,C,H*r,W*r]"),
        ("space_to_batch", _space_to_batch_body, "[N,C,H,W] -> [N*r*r,C,H/r,W/r]"),
        ("batch_to_space", _batch_to_space_body, "[N*r*r,C,H,W] -> [N,C,H*r,W*r]"),
    )
)


def space_to_channel(x, factor, *, name=None) -> Tensor:
    """Space to depth in PyTorch ``pixel_unshuffle`` order: [N, C, H, W] ->
    [N, C*r*r, H/r, W/r] with ``out[n, c*r*r + dy*r + dx, i, j] = x[n, c, i*r+dy, j*r+dx]``.

    Inputs: ``x`` [N, C, H, W] with H and W multiples of ``factor`` (r >= 1). Emulator
    numerics: pure movement (exact); :func:`channel_to_space` is its inverse.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import space_to_channel
        >>> space_to_channel(af.input((1, 3, 8, 6)), 2).shape
        (1, 12, 4, 3)
    """
    return make("space_to_channel", x, factor=factor, name=name)


def channel_to_space(x, factor, *, name=None) -> Tensor:
    """Depth to space in PyTorch ``pixel_shuffle`` order: [N, C*r*r, H, W] ->
    [N, C, H*r, W*r] with ``out[n, c, i*r+dy, j*r+dx] = x[n, c*r*r + dy*r + dx, i, j]``.

    Inputs: ``x`` [N, C, H, W] with C a multiple of ``factor**2``. Emulator numerics: pure
    movement (exact); the inverse of :func:`space_to_channel`.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import channel_to_space
        >>> channel_to_space(af.input((1, 12, 4, 3)), 2).shape
        (1, 3, 8, 6)
    """
    return make("channel_to_space", x, factor=factor, name=name)


def space_to_batch(x, factor, *, name=None) -> Tensor:
    """Space to batch in TensorFlow ``space_to_batch_nd`` block order: [N, C, H, W] ->
    [N*r*r, C, H/r, W/r] with ``out[(dy*r + dx)*N + n, c, i, j] = x[n, c, i*r+dy, j*r+dx]``.

    Inputs: ``x`` [N, C, H, W] with H and W multiples of ``factor``. Emulator numerics:
    pure movement (exact); :func:`batch_to_space` is its inverse.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import space_to_batch
        >>> space_to_batch(af.input((2, 3, 8, 6)), 2).shape
        (8, 3, 4, 3)
    """
    return make("space_to_batch", x, factor=factor, name=name)


def batch_to_space(x, factor, *, name=None) -> Tensor:
    """Batch to space, the inverse of :func:`space_to_batch`: [N*r*r, C, H, W] ->
    [N, C, H*r, W*r] with ``out[n, c, i*r+dy, j*r+dx] = x[(dy*r + dx)*N + n, c, i, j]``.

    Inputs: ``x`` [B, C, H, W] with B a multiple of ``factor**2``. Emulator numerics:
    pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import batch_to_space
        >>> batch_to_space(af.input((8, 3, 4, 3)), 2).shape
        (2, 3, 8, 6)
    """
    return make("batch_to_space", x, factor=factor, name=name)


def _input_view_shape(in_shapes, attrs):
    x = in_shapes[0]
    begins, sizes = attrs["begins"], attrs["sizes"]
    if not len(begins) == len(sizes) == len(x):
        raise AttributeValueError(
            f"input_view: begins {begins} and sizes {sizes} need {len(x)} values each "
            f"(one per axis of {x})"
        )
    for axis, (b, s, d) in enumerate(zip(begins, sizes, x)):
        if b + s > d:
            raise ShapeError(
                f"input_view: window begin {b} + size {s} = {b + s} exceeds axis {axis} "
                f"of {x} ({d}); use begin + size <= {d}"
            )
    return tuple(sizes)


def _input_view_body(st, inputs, attrs):
    x = inputs[0]
    window = tuple(slice(b, b + s) for b, s in zip(attrs["begins"], attrs["sizes"]))
    return x[window]


def _input_view_width_begin(in_shapes, attrs) -> int:
    """Where the window starts on the last axis (it rides the crop-DMA from there)."""
    begins = attrs.get("begins") or ()
    return int(begins[-1]) if begins else 0


_INPUT_VIEW = bridge_op(
    "input_view",
    1,
    {
        "begins": ints_attr(None, 0, "begins", required=True),
        "sizes": ints_attr(None, 1, "sizes", required=True),
    },
    _input_view_shape,
    _input_view_body,
    "static window x[b0:b0+s0, b1:b1+s1, ...] over every axis",
    flags=_MOVEMENT,
    sign=all_sources,
    range=same,  # the analysis applies the A13/A14 crop-DMA clamp to width offsets itself
    work=_WINDOW_WORK,
    width_begin=_input_view_width_begin,
    route=SingleRoute("no fused slice op surfaced on the engine; native bridge only"),
)


def input_view(x, begins, sizes, *, name=None) -> Tensor:
    """A static window ``x[b0:b0+s0, b1:b1+s1, ...]`` over every axis.

    Inputs: ``x`` of any rank. Attributes: ``begins`` (>= 0) and ``sizes`` (>= 1), one
    per axis; every window must fit (``begin + size <= dim``, else ShapeError).
    Output: ``sizes``. Emulator numerics: pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import input_view
        >>> input_view(af.input((4, 6)), (1, 2), (2, 3)).shape
        (2, 3)
    """
    return make("input_view", x, begins=begins, sizes=sizes, name=name)


def _dynamic_slice_shape(in_shapes, attrs):
    x, start = in_shapes
    sizes = attrs["sizes"]
    if tuple(start) != (len(x),):
        raise ShapeError(
            f"dynamic_slice: start must be a tensor of shape ({len(x)},), one offset per "
            f"axis of {x}; got shape {start}"
        )
    if len(sizes) != len(x):
        raise AttributeValueError(
            f"dynamic_slice: sizes {sizes} need {len(x)} values (one per axis of {x})"
        )
    for axis, (s, d) in enumerate(zip(sizes, x)):
        if s > d:
            raise ShapeError(
                f"dynamic_slice: sizes entry {s} exceeds axis {axis} of {x} ({d}); use size <= {d}"
            )
    return tuple(sizes)


def _dynamic_slice_body(st, inputs, attrs):
    x, start = inputs
    sizes = attrs["sizes"]
    offsets = np.rint(np.where(np.isnan(start), 0.0, start))
    window = []
    for off, s, d in zip(offsets, sizes, x.shape):
        b = int(np.clip(off, 0, d - s))
        window.append(slice(b, b + s))
    return x[tuple(window)]


_DYNAMIC_SLICE = bridge_op(
    "dynamic_slice",
    2,
    {"sizes": ints_attr(None, 1, "sizes", required=True)},
    _dynamic_slice_shape,
    _dynamic_slice_body,
    "window of static sizes at run-time offsets, clamped into range (XLA DynamicSlice)",
    flags=_MOVEMENT,
    sign=first_source,  # src 1 holds the offsets
    range=same,  # offsets are clamped (inf and NaN included), so no padding enters
    work=_WINDOW_WORK,
    min_family=3,  # A14
    route=SingleRoute("no fused slice op surfaced; a runtime offset needs the native bridge"),
)


def dynamic_slice(x, start, sizes, *, name=None) -> Tensor:
    """A window of static ``sizes`` at offsets read from the tensor ``start`` at run time.

    Inputs: ``x`` of any rank; ``start`` a tensor of shape (rank,) holding one offset per
    axis as fp16 integers (integers are exact up to 2048, beyond that fp16 spacing
    applies). Attributes: ``sizes`` (1 <= size <= dim). Output: ``sizes``.
    Offsets are rounded to the nearest integer (ties to even; NaN reads as 0) and clamped
    into ``[0, dim - size]`` like XLA's DynamicSlice, so the window always fits.
    Emulator numerics: pure movement (exact).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import dynamic_slice
        >>> x, at = af.input((6,)), af.input((1,))
        >>> af.compile(dynamic_slice(x, at, (2,)))(np.arange(6.0), np.array([9.0]))
        array([4., 5.], dtype=float32)
    """
    return make("dynamic_slice", x, start, sizes=sizes, name=name)


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_FLATTEN, *_BLOCKS, _INPUT_VIEW, _DYNAMIC_SLICE)
