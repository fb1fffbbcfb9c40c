"""Helpers shared by the op definitions: shape rules, axis handling, kernel wrappers."""

from __future__ import annotations

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..fp16 import exact, round_fp16


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``; a clash names the op and the shapes."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(
            f"{op}: shapes {', '.join(map(str, shapes))} do not broadcast together; "
            "reshape or expand_dims one operand so trailing dimensions match or are 1"
        ) from None


def norm_axis(op: str, axis: int, ndim: int) -> int:
    """Normalize one axis index into ``[0, ndim)``."""
    if not -ndim <= axis < ndim:
        raise AttributeValueError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def norm_axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    """Normalize ``axes`` (None = all) into a sorted tuple; duplicates raise."""
    if axes is None:
        return tuple(range(ndim))
    out = [norm_axis(op, a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise AttributeValueError(f"{op}: axes {tuple(axes)} repeat an axis")
    return tuple(sorted(out))


def rounded(fn):
    """Turn a float64 function of float64 arrays into an fp16 kernel rounded once."""

    def emulate(inputs, attrs, mm=None):
        with np.errstate(all="ignore"):
            return round_fp16(fn(*[exact(x) for x in inputs], **attrs))

    return emulate


def in_float64(fn):
    """Turn a float64 function of float64 arrays into an exact-executor kernel."""

    def run(inputs, attrs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*inputs, **attrs), dtype=np.float64)

    return run


def same_shape(in_shapes, attrs):
    """Shape rule of unary elementwise ops."""
    return in_shapes[0]


def spatial_tuple(op: str, value, nd: int, name: str) -> tuple[int, ...]:
    """Broadcast an int-or-tuple attribute to ``nd`` spatial dims."""
    if len(value) == 1:
        return value * nd
    if len(value) != nd:
        raise AttributeValueError(
            f"{op}: {name} {value} needs 1 or {nd} values for {nd} spatial dim(s)"
        )
    return value


def pads(op: str, value, nd: int) -> tuple[tuple[int, int], ...]:
    """Padding as ((before, after), ...) per spatial dim from 1, nd or 2*nd ints."""
    if len(value) == 1:
        return ((value[0], value[0]),) * nd
    if len(value) == nd:
        return tuple((p, p) for p in value)
    if len(value) == 2 * nd:
        return tuple((value[i], value[i + nd]) for i in range(nd))
    raise AttributeValueError(
        f"{op}: pad {value} needs 1, {nd} or {2 * nd} values (begins then ends)"
    )
