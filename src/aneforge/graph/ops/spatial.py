"""Pooling (max_pool, avg_pool) and upsampling (nearest, bilinear) over N-C-(H)-W.

Emulator contract: max_pool is exact, IEEE 754-2019's ``maximum`` over each window (NaN
propagates, +0 wins a tie with -0: :func:`~aneforge.graph.fp16.extreme`). avg_pool adds
each window's values in (row, column) order with the narrow fp16 accumulator and
divides by the count of non-pad elements (or the full window with
``count_include_pad=True``), rounded once. Nearest upsampling copies. Bilinear
upsampling computes each output as the weighted sum of its neighbours in float64 and
rounds once; ``align_corners=False`` is the half-pixel rule.

Range rules (:mod:`aneforge.graph.ranges`): max_pool and nearest upsampling return input
values (every max_pool window holds at least one input element, as the padding is
smaller than the kernel). avg_pool and bilinear upsampling are non-decreasing in every
input element (a narrow sum, or a float64 sum with weights >= 0, then monotone rounding),
so their kernels on a probe of one channel filled with each end of the input's range
bound them, padding included.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...errors import ShapeError
from ..arith import as_arith
from ..facts import (
    SUM_OVERFLOW_FIX,
    WINDOW_SUM_FIX,
    LoopNest,
    NarrowSum,
    TermSign,
    first_source,
    prod,
)
from ..fp16 import FP16_MAX, extreme, round_fp16
from ..ranges import Interval, copies_sum, monotone, same
from ..registry import arg_name, bool_attr, choice_attr, ints_attr, register
from .common import fused_op, pads, spatial_tuple

INF = math.inf

# Labels: PyTorch's argument names, which af.max_pool / af.avg_pool take (see arg_name).
_POOL_ATTRS = {
    "kernel": ints_attr(None, 1, "kernel_size", required=True),
    "stride": ints_attr(None, 1, "stride"),
    "pad": ints_attr((0,), 0, "padding"),
}


def _pool_geometry(op, shape, attrs):
    if len(shape) not in (3, 4):
        raise ShapeError(f"{op}: input must be NCW or NCHW (rank 3 or 4), got {shape}")
    nd = len(shape) - 2
    kern = spatial_tuple(op, attrs["kernel"], nd, "kernel")
    stride = spatial_tuple(op, attrs["stride"] or kern, nd, "stride")
    pad = pads(op, attrs["pad"], nd)
    out = []
    for i in range(nd):
        if max(pad[i]) >= kern[i]:
            raise ShapeError(
                f"{op}: {arg_name(op, 'pad')} {pad[i]} must be smaller than the "
                f"{arg_name(op, 'kernel')} {kern[i]}"
            )
        size = (shape[2 + i] + sum(pad[i]) - kern[i]) // stride[i] + 1
        if size < 1:
            raise ShapeError(
                f"{op}: {arg_name(op, 'kernel')} {kern} does not fit input {shape} with "
                f"{arg_name(op, 'pad')} {pad}"
            )
        out.append(size)
    return nd, kern, stride, pad, tuple(out)


class PoolGeometry(NamedTuple):
    """A pool node's attributes broadcast to its spatial dims."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]  # (begin, end) per spatial dim


def pool_geometry(node) -> PoolGeometry:
    """The validated geometry of pool node ``node``.

    Example:
        >>> import aneforge as af
        >>> pool_geometry(af.max_pool(af.input((1, 2, 8, 8)), 3, stride=2, padding=1))
        PoolGeometry(kernel=(3, 3), stride=(2, 2), pads=((1, 1), (1, 1)))
    """
    _, kern, stride, pad, _ = _pool_geometry(node.op, node.srcs[0].shape, node.attrs)
    return PoolGeometry(tuple(kern), tuple(stride), tuple(pad))


def _pool_shape(name):
    def rule(in_shapes, attrs):
        x = in_shapes[0]
        return x[:2] + _pool_geometry(name, x, attrs)[4]

    return rule


def _windows(x, kern, stride, pad, fill):
    """(N, C, Ho, Wo, kh, kw) windows of a 2-D view of ``x`` padded with ``fill``."""
    if x.ndim == 3:
        x, kern, stride, pad = x[:, :, None], (1,) + kern, (1,) + stride, ((0, 0),) + pad
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad), constant_values=fill)
    win = np.lib.stride_tricks.sliding_window_view(xp, kern, axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1]]


def _pool_run(op, x, attrs, reduce_windows):
    nd, kern, stride, pad, _ = _pool_geometry(op, x.shape, attrs)
    y = reduce_windows(x, kern, stride, pad)
    return y[:, :, 0] if nd == 1 else y


def _max_windows(x, kern, stride, pad):
    return extreme(_windows(x, kern, stride, pad, -np.inf), (-2, -1))


def _counts(x, kern, stride, pad, include_pad):
    if include_pad:
        return float(np.prod(kern))
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.float64)
    return _windows(ones, kern, stride, pad, 0.0).sum(axis=(-2, -1))


def _avg_emulate(inputs, attrs, arith=None):
    def reduce_windows(x, kern, stride, pad):
        windows = _windows(x, kern, stride, pad, 0.0)
        total = as_arith(arith).narrow_sum(windows, (-2, -1)).astype(np.float64)
        with np.errstate(all="ignore"):
            return round_fp16(total / _counts(x, kern, stride, pad, attrs["count_include_pad"]))

    return _pool_run("avg_pool", inputs[0], attrs, reduce_windows)


def _avg_exact(inputs, attrs):
    def reduce_windows(x, kern, stride, pad):
        total = _windows(x, kern, stride, pad, 0.0).sum(axis=(-2, -1))
        return total / _counts(x, kern, stride, pad, attrs["count_include_pad"])

    return _pool_run("avg_pool", inputs[0], attrs, reduce_windows)


def _channel_probe(node):
    """One batch item and one channel: every channel is the same function of its own
    values, so the extremes over the whole tensor are those of one channel."""
    return [(1, 1) + tuple(node.srcs[0].shape[2:])]


_avg_probe = monotone(_channel_probe)


def _avg_range(node, srcs, env) -> Interval:
    """Range rule of ``avg_pool``: the kernel on one channel filled with each end of the
    range (padding zeros and the per-window counts included). The window sum is recorded
    as ``sum(window)``: a window with ``m`` real elements sums like ``m`` copies (the
    padding adds exact zeros), between 0 and the full window's ``K`` copies.

    Example:
        >>> import aneforge as af
        >>> x = af.input((1, 2, 4, 4), name="x", range=(1.0, 3.0))
        >>> str(af.range_analysis(af.avg_pool(x, 3, stride=1, padding=1)).nodes[-1].interval)
        '[1, 3]'
    """
    (s,) = srcs
    _, kern, _, _, _ = _pool_geometry("avg_pool", node.srcs[0].shape, node.attrs)
    lo, hi = (float(v) for v in copies_sum([s.lo, s.hi], int(np.prod(kern)), route=env.route))
    env.step("sum(window)", Interval(min(lo, 0.0), max(hi, 0.0), s.nan or (lo, hi) == (-INF, INF)))
    return _avg_probe(node, srcs, env)


def _window_terms(in_shapes, attrs) -> int:
    """The terms of one window's sum: the kernel's elements (one int: every dim)."""
    kern, nd = tuple(attrs["kernel"]), len(in_shapes[0]) - 2
    return prod(kern * nd if len(kern) == 1 else kern)


register(
    fused_op(
        "max_pool",
        1,
        dict(_POOL_ATTRS),
        _pool_shape("max_pool"),
        lambda inputs, attrs, arith=None: _pool_run("max_pool", inputs[0], attrs, _max_windows),
        lambda inputs, attrs: _pool_run("max_pool", inputs[0], attrs, _max_windows),
        doc="max over each window (padding never wins); stride defaults to the kernel",
        sign=first_source,
        range=same,
        nest=LoopNest("window", "max", -INF),
    )
)
register(
    fused_op(
        "avg_pool",
        1,
        dict(_POOL_ATTRS, count_include_pad=bool_attr(False, "count_include_pad")),
        _pool_shape("avg_pool"),
        _avg_emulate,
        _avg_exact,
        doc="mean over each window (narrow sum); stride defaults to the kernel",
        sign=first_source,
        range=_avg_range,
        narrow=NarrowSum(_window_terms, TermSign.OF_INPUT, WINDOW_SUM_FIX),
        overflow_fix=SUM_OVERFLOW_FIX,
        nest=LoopNest("window", "add", 0.0, "mean"),
    )
)


def _upsample_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) not in (3, 4):
        raise ShapeError(f"upsample: input must be NCW or NCHW (rank 3 or 4), got {x}")
    scale = spatial_tuple("upsample", attrs["scale"], len(x) - 2, "scale")
    return x[:2] + tuple(d * s for d, s in zip(x[2:], scale))


def _interp_matrix(size_in, scale, align_corners):
    """(size_out, size_in) float64 matrix of 1-D linear interpolation weights."""
    size_out = size_in * scale
    dst = np.arange(size_out, dtype=np.float64)
    if align_corners:
        src = dst * ((size_in - 1) / (size_out - 1)) if size_out > 1 else dst * 0.0
    else:
        src = np.maximum((dst + 0.5) / scale - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), size_in - 1)
    hi = np.minimum(lo + 1, size_in - 1)
    frac = src - lo
    m = np.zeros((size_out, size_in))
    np.add.at(m, (np.arange(size_out), lo), 1.0 - frac)
    np.add.at(m, (np.arange(size_out), hi), frac)
    return m


def _upsample_f64(x, attrs):
    nd = x.ndim - 2
    scale = spatial_tuple("upsample", attrs["scale"], nd, "scale")
    y = np.asarray(x, dtype=np.float64)
    for i in range(nd):
        axis = 2 + i
        if attrs["mode"] == "nearest":
            y = np.repeat(y, scale[i], axis=axis)
        else:
            m = _interp_matrix(x.shape[axis], scale[i], attrs["align_corners"])
            with np.errstate(all="ignore"):
                y = np.moveaxis(np.tensordot(y, m, axes=([axis], [1])), -1, axis)
    return y


def _upsample_range(node, srcs, env) -> Interval:
    """Range rule of ``upsample``. Nearest copies input values. Bilinear is
    non-decreasing in every input (weights >= 0), so its kernel on one channel filled
    with each end bounds it; its weight matrices hold zeros, so an infinite input makes
    ``inf * 0`` (NaN) and the finite values are bounded by the clamped ends.

    Example:
        >>> import aneforge as af
        >>> x = af.input((1, 1, 3, 3), name="x", range=(-2.0, 5.0))
        >>> y = af.upsample(x, 2, mode="bilinear")
        >>> str(af.range_analysis(y).nodes[-1].interval)
        '[-2, 5]'
    """
    (s,) = srcs
    if node.attrs["mode"] == "nearest":
        return s
    ends = [float(v) for v in np.clip(np.array([s.lo, s.hi]), -FP16_MAX, FP16_MAX)]
    shape = _channel_probe(node)[0]
    with np.errstate(all="ignore"):
        out = [_upsample_f64(np.full(shape, e), node.attrs) for e in ends]
    v = np.asarray(round_fp16(np.stack(out)), dtype=np.float64)
    lo = -INF if s.lo == -INF else float(v.min())
    hi = INF if s.hi == INF else float(v.max())
    return Interval(lo, hi, s.nan or not (math.isfinite(s.lo) and math.isfinite(s.hi)))


register(
    fused_op(
        "upsample",
        1,
        {
            "scale": ints_attr(None, 1, "scale_factor", required=True),  # PyTorch's name
            "mode": choice_attr(("nearest", "bilinear"), "nearest", "mode"),
            "align_corners": bool_attr(False, "align_corners"),
        },
        _upsample_shape,
        lambda inputs, attrs, arith=None: round_fp16(_upsample_f64(inputs[0], attrs)),
        lambda inputs, attrs: _upsample_f64(inputs[0], attrs),
        doc="integer-factor upsampling, nearest or (bi)linear",
        sign=first_source,
        range=_upsample_range,
    )
)
