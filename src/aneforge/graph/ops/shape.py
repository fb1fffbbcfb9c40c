"""Shape ops: reshape, transpose, concat, slice, squeeze, expand_dims, pixel_shuffle,
pixel_unshuffle and cast. They move values without arithmetic, so the emulator and the
float64 executor share one kernel (cast's fp16 kernel also rounds a wider value, which
only a policy that carries float32 values hands it).
"""

from __future__ import annotations

import numpy as np

from ...errors import AttributeValueError, DTypeError, ShapeError
from ..facts import Flag, LoopNest, all_sources
from ..fp16 import round_fp16
from ..ranges import hull_of_sources, rows_kept, same, transposed_rows
from ..registry import (
    Attr,
    arg_name,
    describe,
    int_attr,
    ints_attr,
    is_integer,
    register,
)
from ..tensor import make
from .common import fused_op, norm_axes, norm_axis

# Ops that only relabel a tensor's shape: the engine reads the same buffer, so the cost
# model charges them no pass of their own.
VIEWS = frozenset({"reshape", "squeeze", "expand_dims"})


# Views that can keep the input's rows (and so their norms); concat joins sources.
_RANGE_RULES = {
    "reshape": rows_kept,
    "transpose": transposed_rows,
    "squeeze": rows_kept,
    "expand_dims": rows_kept,
    "cast": rows_kept,
    "concat": hull_of_sources,
}


def _movement(name, arity, attrs, shape_rule, fn, doc, width_begin=None, to_fp16=False):
    """Register a movement op: one kernel for both executors, non-negative when its
    sources are (it moves their values). ``to_fp16``: the fp16 kernel rounds its result
    (cast: a no-op on fp16 values)."""

    def emulate(inputs, attrs, arith=None):
        out = fn(inputs, **attrs)
        return round_fp16(out) if to_fp16 else out

    register(
        fused_op(
            name,
            arity,
            attrs,
            shape_rule,
            emulate,
            lambda inputs, attrs: fn(inputs, **attrs),
            doc=doc,
            sign=all_sources,
            range=_RANGE_RULES.get(name, same),
            flags=(Flag.MOVEMENT, Flag.VIEW) if name in VIEWS else (Flag.MOVEMENT,),
            width_begin=width_begin,
            nest=_nest(name),
        )
    )


# ---- index maps (the loop nests of the affine movements) ---------------------------


def _same_cell(index, in_shapes, out_shape, attrs):
    return tuple(index)


def _transposed_cell(index, in_shapes, out_shape, attrs):
    n = len(in_shapes[0])
    perm = attrs["perm"] if attrs["perm"] is not None else tuple(range(n))[::-1]
    src = [None] * n
    for d, p in enumerate(perm):
        src[p % n] = index[d]
    return tuple(src)


def _split_axes_cell(index, in_shapes, out_shape, attrs):
    """reshape, squeeze, expand_dims whose every source axis is split into consecutive
    output axes (size-1 axes added or dropped included): source entry ``a`` is
    ``sum(index[d] * stride)`` over its group; None for a reshape that merges axes."""
    src, cell, d = in_shapes[0], [], 0
    for n in src:
        group, size = [], 1
        while size < n and d < len(out_shape):
            group.append(d)
            size *= out_shape[d]
            d += 1
        if size != n:
            return None
        entry, stride = 0, 1
        for g in reversed(group):
            entry = index[g] * stride + entry
            stride *= out_shape[g]
        cell.append(entry)
    if any(out_shape[k] != 1 for k in range(d, len(out_shape))):
        return None
    return tuple(cell)


def _sliced_cell(index, in_shapes, out_shape, attrs):
    bounds = _slice_bounds(in_shapes[0], attrs)
    return tuple(start + step * i for (start, _, step), i in zip(bounds, index))


def _merged_axes_cell(index, in_shapes, out_shape, attrs):
    """A reshape's output cell of a source cell, where output axes merge source axes."""
    return _split_axes_cell(index, [out_shape], in_shapes[0], attrs)


def _nest(name):
    if name not in _INDEX_RULES:
        return None
    scatter = _merged_axes_cell if name == "reshape" else None
    return LoopNest("index", index=_INDEX_RULES[name], scatter=scatter)


# The movements whose cells map affinely (concat and the pixel shuffles lower as opaque).
_INDEX_RULES = {
    "cast": _same_cell,
    "transpose": _transposed_cell,
    "reshape": _split_axes_cell,
    "squeeze": _split_axes_cell,
    "expand_dims": _split_axes_cell,
    "slice": _sliced_cell,
}


# ---- reshape -----------------------------------------------------------------------


def _reshape_shape(in_shapes, attrs):
    src = in_shapes[0]
    want = list(attrs["shape"])
    n = int(np.prod(src, dtype=np.int64))
    if want.count(-1) > 1 or any(d < -1 or d == 0 for d in want):
        raise ShapeError(f"reshape: target {tuple(want)} may hold one -1 and positive sizes")
    known = int(np.prod([d for d in want if d != -1], dtype=np.int64))
    if -1 in want:
        if n % known:
            raise ShapeError(f"reshape: cannot infer -1 reshaping {src} to {tuple(want)}")
        want[want.index(-1)] = n // known
    if int(np.prod(want, dtype=np.int64)) != n:
        raise ShapeError(
            f"reshape: {src} has {n} elements but {tuple(attrs['shape'])} holds "
            f"{int(np.prod(want, dtype=np.int64))}"
        )
    return tuple(want)


def _reshape(inputs, shape):
    return inputs[0].reshape(shape)


_movement(
    "reshape",
    1,
    {"shape": ints_attr(None, None, "shape", required=True)},
    _reshape_shape,
    _reshape,
    "same elements in a new shape (C order, one -1 inferred)",
)

# ---- transpose ---------------------------------------------------------------------


def _transpose_shape(in_shapes, attrs):
    src = in_shapes[0]
    perm = attrs["perm"]
    if perm is None:
        return src[::-1]
    if sorted(perm) != list(range(len(src))):
        swap = " (PyTorch's swap of two axes is a full permutation here)" if len(perm) == 2 else ""
        raise AttributeValueError(
            f"transpose: {arg_name('transpose', 'perm')} {perm} are not a permutation of the "
            f"{len(src)} axes of {src}; "
            f"name every axis once, e.g. {tuple(range(len(src)))[::-1]}{swap}"
        )
    return tuple(src[p] for p in perm)


_movement(
    "transpose",
    1,
    {"perm": ints_attr(None, 0, "axes")},  # labelled as NumPy's (and af.transpose's) name
    _transpose_shape,
    lambda inputs, perm: np.transpose(inputs[0], perm),
    "permute axes (reverse them when perm is None)",
)

# ---- concat ------------------------------------------------------------------------


def _concat_shape(in_shapes, attrs):
    if not in_shapes:
        raise ShapeError("concat: needs at least one tensor")
    first = in_shapes[0]
    axis = norm_axis("concat", attrs["axis"], len(first))
    for s in in_shapes[1:]:
        if len(s) != len(first) or any(
            a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis
        ):
            raise ShapeError(f"concat: shapes {first} and {s} differ outside axis {attrs['axis']}")
    return first[:axis] + (sum(s[axis] for s in in_shapes),) + first[axis + 1 :]


_movement(
    "concat",
    None,
    {"axis": int_attr(0, None, "axis")},
    _concat_shape,
    lambda inputs, axis: np.concatenate(inputs, axis=axis),
    "join tensors along axis",
)

# ---- slice -------------------------------------------------------------------------


def _slice_bounds(shape, attrs):
    """Per-axis (start, stop, step) clamped like Python slicing; steps are positive."""
    n = len(shape)
    begins, ends, steps = attrs["begins"], attrs["ends"], attrs["steps"] or (1,) * n
    if not (len(begins) == len(ends) == len(steps) == n):
        raise AttributeValueError(
            f"slice: begins/ends/steps need {n} values each for rank {n}, got "
            f"{len(begins)}/{len(ends)}/{len(steps)}"
        )
    out = []
    for d, b, e, s in zip(shape, begins, ends, steps):
        if s < 1:
            raise AttributeValueError(f"slice: steps must be >= 1, got {steps}")
        out.append(slice(b, e, s).indices(d))
    return out


def _slice_shape(in_shapes, attrs):
    shape = in_shapes[0]
    out = tuple(len(range(*b)) for b in _slice_bounds(shape, attrs))
    if any(d == 0 for d in out):
        raise ShapeError(f"slice: selecting {attrs['begins']}:{attrs['ends']} of {shape} is empty")
    return out


def _slice(inputs, begins, ends, steps):
    x = inputs[0]
    bounds = _slice_bounds(x.shape, {"begins": begins, "ends": ends, "steps": steps})
    return x[tuple(slice(*b) for b in bounds)]


def _slice_width_begin(in_shapes, attrs) -> int:
    """Where a slice starts on the last axis (it rides the crop-DMA from there)."""
    begins = attrs.get("begins") or ()
    if not begins:
        return 0
    steps = attrs.get("steps") or (1,) * len(begins)
    return slice(begins[-1], None, steps[-1]).indices(in_shapes[0][-1])[0]


_movement(
    "slice",
    1,
    {
        "begins": ints_attr(None, None, "begins", required=True),
        "ends": ints_attr(None, None, "ends", required=True),
        "steps": ints_attr(None, 1, "steps"),
    },
    _slice_shape,
    _slice,
    "x[b0:e0:s0, b1:e1:s1, ...] with Python bounds and positive steps",
    _slice_width_begin,
)

# ---- squeeze / expand_dims ---------------------------------------------------------


def _squeeze_shape(in_shapes, attrs):
    src = in_shapes[0]
    axes = attrs["axes"]
    if axes is None:
        axes = tuple(i for i, d in enumerate(src) if d == 1)
    axes = norm_axes("squeeze", axes, len(src))
    bad = [a for a in axes if src[a] != 1]
    if bad:
        raise ShapeError(f"squeeze: {arg_name('squeeze', 'axes')} {bad} of {src} must have size 1")
    return tuple(d for i, d in enumerate(src) if i not in axes)


def _squeeze(inputs, axes):
    x = inputs[0]
    return x.reshape(_squeeze_shape([x.shape], {"axes": axes}))


_movement(
    "squeeze",
    1,
    {"axes": ints_attr(None, None, "axis")},  # labelled as NumPy's (and af.squeeze's) name
    _squeeze_shape,
    _squeeze,
    "drop size-1 axes (all of them when axes is None)",
)


def _expand_shape(in_shapes, attrs):
    src = in_shapes[0]
    n = len(src) + len(attrs["axes"])
    axes = norm_axes("expand_dims", attrs["axes"], n)
    it = iter(src)
    return tuple(1 if i in axes else next(it) for i in range(n))


def _expand(inputs, axes):
    x = inputs[0]
    return x.reshape(_expand_shape([x.shape], {"axes": axes}))


_movement(
    "expand_dims",
    1,
    {"axes": ints_attr(None, None, "axis", required=True)},
    _expand_shape,
    _expand,
    "insert size-1 axes at the given output positions",
)

# ---- pixel shuffle -----------------------------------------------------------------


def _shuffle_shape(name, down):
    def rule(in_shapes, attrs):
        x, r = in_shapes[0], attrs["factor"]
        if len(x) != 4:
            raise ShapeError(f"{name}: input must be NCHW, got {x}")
        n, c, h, w = x
        if down:
            if h % r or w % r:
                raise ShapeError(
                    f"{name}: H and W of {x} must be multiples of {arg_name(name, 'factor')}={r}"
                )
            return (n, c * r * r, h // r, w // r)
        if c % (r * r):
            factor = arg_name(name, "factor")
            raise ShapeError(
                f"{name}: channels {c} of {x} must be a multiple of {factor}**2 = {r * r} "
                f"({factor}={r})"
            )
        return (n, c // (r * r), h * r, w * r)

    return rule


def _pixel_shuffle(inputs, factor):
    x, r = inputs[0], factor
    n, c, h, w = x.shape
    y = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (r * r), h * r, w * r)


def _pixel_unshuffle(inputs, factor):
    x, r = inputs[0], factor
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // r, r, w // r, r).transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * r * r, h // r, w // r)


_movement(
    "pixel_shuffle",
    1,
    {"factor": int_attr(None, 1, "upscale_factor", required=True)},  # PyTorch's names
    _shuffle_shape("pixel_shuffle", False),
    _pixel_shuffle,
    "[N, C*r*r, H, W] -> [N, C, H*r, W*r] (depth to space, PyTorch order)",
)
_movement(
    "pixel_unshuffle",
    1,
    {"factor": int_attr(None, 1, "downscale_factor", required=True)},
    _shuffle_shape("pixel_unshuffle", True),
    _pixel_unshuffle,
    "[N, C, H*r, W*r] -> [N, C*r*r, H, W] (space to depth, PyTorch order)",
)

# ---- cast --------------------------------------------------------------------------


def _check_fp16(value, op):
    if isinstance(value, str):
        ok = value in ("float16", "fp16", "half")
    else:  # a NumPy dtype or scalar type (an array is neither)
        try:
            ok = not isinstance(value, np.ndarray) and np.dtype(value) == np.float16
        except (TypeError, ValueError):
            ok = False
    if not ok:
        raise DTypeError(
            f"cast: dtype {describe(value)} is not available; the engine computes in float16 "
            "only (dtype='float16')"
        )
    return "float16"


_movement(
    "cast",
    1,
    {"dtype": Attr(_check_fp16, "float16")},
    lambda in_shapes, attrs: in_shapes[0],
    lambda inputs, dtype: inputs[0],
    "cast to float16 (the only dataplane type, so the identity on it)",
    to_fp16=True,
)

# ---- indexing sugar ----------------------------------------------------------------


def getitem(x, key):
    """``x[key]`` with ints, slices (positive steps) and one Ellipsis.

    Anything else (an array or list of indices, None / newaxis, a float, a bool, a
    tensor) is refused with an :class:`~aneforge.errors.AttributeValueError`; gather
    takes a list of indices (:func:`aneforge.gather`).
    """

    if not isinstance(key, tuple):
        key = (key,)
    dots = [i for i, k in enumerate(key) if k is Ellipsis]  # by identity: keys may be arrays
    if len(dots) > 1:
        raise AttributeValueError("indexing: at most one Ellipsis")
    if dots:
        i = dots[0]
        key = key[:i] + (slice(None),) * (x.ndim - len(key) + 1) + key[i + 1 :]
    if len(key) > x.ndim:
        raise ShapeError(f"indexing: {len(key)} indices for a rank-{x.ndim} tensor {x.shape}")
    key = key + (slice(None),) * (x.ndim - len(key))
    begins, ends, steps, drop = [], [], [], []
    for axis, (k, d) in enumerate(zip(key, x.shape)):
        if isinstance(k, slice):
            start, stop, step = _slice_indices(k, d)
            begins.append(start)
            ends.append(stop)
            steps.append(step)
        elif is_integer(k):
            i = int(k)
            if not -d <= i < d:
                raise ShapeError(f"indexing: index {i} is out of range for axis {axis} of {d}")
            i %= d
            begins.append(i)
            ends.append(i + 1)
            steps.append(1)
            drop.append(axis)
        else:
            raise AttributeValueError(
                f"indexing: unsupported index {describe(k)} for axis {axis}; use integers, "
                "slices with positive steps and one Ellipsis (af.gather takes a list of "
                "indices)"
            )
    y = make("slice", x, begins=tuple(begins), ends=tuple(ends), steps=tuple(steps))
    if drop:
        y = make("squeeze", y, axes=tuple(drop))
    return y


def _slice_indices(k: slice, size: int) -> tuple[int, int, int]:
    """``k.indices(size)`` for a slice of integers (or None) with a positive step."""
    for part, value in (("start", k.start), ("stop", k.stop), ("step", k.step)):
        if value is not None and not is_integer(value):
            raise AttributeValueError(
                f"indexing: slice {part} must be an integer or None, got {describe(value)}"
            )
    if k.step is not None and k.step < 1:
        why = "a step of 0 selects nothing" if k.step == 0 else "negative steps are not supported"
        raise AttributeValueError(f"indexing: {why} (got step {k.step}); steps must be >= 1")
    return k.indices(size)
