"""Normalizations: layer_norm, rms_norm, group_norm, batch_norm (inference), l2_norm.

Emulator contract: every step is one rounded fp16 op and every sum is the narrow fp16
accumulator, in this order (n = number of normalized elements, eps rounded to fp16):

- layer_norm / group_norm: mu = fp16(nsum(x)/n); d = fp16(x - mu);
  var = fp16(nsum(fp16(d*d))/n); r = fp16(rsqrt(fp16(var + eps))); y = fp16(d*r);
  then y = fp16(y*weight), y = fp16(y + bias) when given.
- rms_norm: ms = fp16(nsum(fp16(x*x))/n); r = fp16(rsqrt(fp16(ms + eps)));
  y = fp16(x*r), then fp16(y*weight).
- batch_norm: d = fp16(x - mean); r = fp16(rsqrt(fp16(var + eps))); y = fp16(d*r), then
  weight and bias as above; statistics broadcast along axis 1.
- l2_norm: ss = nsum(fp16(x*x)); y = fp16(x * fp16(rsqrt(max(ss, eps)))).

So x*x overflows fp16 for |x| > 256, exactly as on the engine; the float64 executor
computes the same formulas without rounding.

Range rules (:mod:`aneforge.graph.ranges`): layer_norm, group_norm, rms_norm and
l2_norm record their steps (``sum(x)``, ``x-mean``, ``d*d`` or ``x*x``, its sum and the
rsqrt) and bound the output by its true peak, about ``sqrt(n)`` (1 for l2_norm), with
every rounding accounted for (:func:`norm_peak`); batch_norm is a per-channel monotone
map of ``x``, bounded channel by channel. Weights and biases that are weights give a
bound per element, others their interval's corners.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..facts import Flag, LoopNest, NarrowSum, TermSign, TiledReduction, prod, signed
from ..fp16 import FP16_MAX, round_fp16
from ..ranges import ETA16, NONNEGATIVE_FP16, U16, Interval, copies_sum, weight_value
from ..registry import arg_name, bool_attr, float_attr, int_attr, register
from .common import fused_op, norm_axis, step_kernels


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _affine(a, y, inputs, attrs, shape):
    i = 1
    if attrs.get("has_weight"):
        y = a.step(_f(y) * _f(inputs[i]).reshape(shape))
        i += 1
    if attrs.get("has_bias"):
        y = a.step(_f(y) + _f(inputs[i]).reshape(shape))
    return y


def _standardize(a, x, axes, eps):
    mu = a.mean(x, axes)
    d = a.step(_f(x) - _f(mu))
    var = a.mean(a.step(_f(d) * _f(d)), axes)
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(var) + a.const(eps)))))
    return a.step(_f(d) * _f(r))


def _layer_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("layer_norm", attrs["axis"], x.ndim)
    axes = tuple(range(axis, x.ndim))
    y = _standardize(a, x, axes, attrs["eps"])
    return _affine(a, y, inputs, attrs, x.shape[axis:])


def _rms_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("rms_norm", attrs["axis"], x.ndim)
    axes = tuple(range(axis, x.ndim))
    ms = a.mean(a.step(_f(x) * _f(x)), axes)
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(ms) + a.const(attrs["eps"])))))
    y = a.step(_f(x) * _f(r))
    return _affine(a, y, inputs, attrs, x.shape[axis:])


def _group_norm(a, inputs, attrs):
    x = inputs[0]
    g = attrs["groups"]
    grouped = x.reshape(x.shape[0], g, -1)
    y = _standardize(a, grouped, (2,), attrs["eps"]).reshape(x.shape)
    return _affine(a, y, inputs, attrs, (x.shape[1],) + (1,) * (x.ndim - 2))


def _batch_norm(a, inputs, attrs):
    x, mean, var = inputs[:3]
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    d = a.step(_f(x) - _f(mean).reshape(shape))
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(var).reshape(shape) + a.const(attrs["eps"])))))
    y = a.step(_f(d) * _f(r))
    return _affine(a, y, [x] + list(inputs[3:]), attrs, shape)


def _batch_norm_scalar(attrs):
    """batch_norm's steps at one cell of ``[x, mean, var, (weight), (bias)]`` as scalar
    ops (:class:`~aneforge.graph.facts.LoopNest`), each rounded as :func:`_batch_norm`
    rounds it."""
    y = ("mul", ("sub", 0, 1), ("rsqrt", ("add", 2, ("const", attrs["eps"]))))
    nxt = 3
    if attrs.get("has_weight"):
        y, nxt = ("mul", y, nxt), nxt + 1
    if attrs.get("has_bias"):
        y = ("add", y, nxt)
    return y


def _batch_norm_emulate(inputs, attrs, arith=None):
    """batch_norm's fp16 steps (those of :func:`_batch_norm`) in float32: the per-element
    steps are - and * of fp16 values, whose float32 results round to the same fp16 bits
    (float32's 24 bits >= 2*11 + 2); only the per-channel rsqrt runs in float64. It is
    the hot op of convolutional networks, so it avoids float64 round trips."""
    x, mean, var = inputs[:3]
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    f16, f32 = np.float16, np.float32
    with np.errstate(all="ignore"):
        eps = _f(round_fp16(attrs["eps"]))
        r = round_fp16(1.0 / np.sqrt(_f(round_fp16(_f(var) + eps)))).astype(f32).reshape(shape)
        y = (x.astype(f32) - mean.astype(f32).reshape(shape)).astype(f16)
        y = (y.astype(f32) * r).astype(f16)
        params = list(inputs[3:])
        if attrs.get("has_weight"):
            y = (y.astype(f32) * params.pop(0).astype(f32).reshape(shape)).astype(f16)
        if attrs.get("has_bias"):
            y = (y.astype(f32) + params.pop(0).astype(f32).reshape(shape)).astype(f16)
    return y


def _l2_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("l2_norm", attrs["axis"], x.ndim)
    ss = a.total(a.step(_f(x) * _f(x)), (axis,), keepdims=True)
    r = a.step(1.0 / np.sqrt(np.maximum(_f(ss), a.const(attrs["eps"]))))
    return a.step(_f(x) * _f(r))


def _params_shape(name, n_stats=0):
    """Shape rule: x, then ``n_stats`` statistics, then optional weight and bias."""

    def rule(in_shapes, attrs):
        x = in_shapes[0]
        if name in ("group_norm", "batch_norm"):
            if len(x) < 2:
                raise ShapeError(f"{name}: input must be [N, C, ...], got {x}")
            want = (x[1],)
            if name == "group_norm" and x[1] % attrs["groups"]:
                raise ShapeError(
                    f"group_norm: {arg_name(name, 'groups')}={attrs['groups']} does not divide "
                    f"{x[1]} channels"
                )
        else:
            axis = norm_axis(name, attrs["axis"], len(x))
            want = x[axis:]
        n_params = n_stats + int(attrs.get("has_weight", False))
        n_params += int(attrs.get("has_bias", False))
        if len(in_shapes) != 1 + n_params:
            raise ShapeError(f"{name}: expected {1 + n_params} inputs, got {len(in_shapes)}")
        for i, s in enumerate(in_shapes[1:]):
            if tuple(s) != tuple(want):
                raise ShapeError(f"{name}: parameter {i} must have shape {want}, got {s}")
        return x

    return rule


# ---- range rules ----------------------------------------------------------------------

INF = math.inf
#: Every non-negative finite fp16 value, ascending (the bit patterns 0x0000..0x7BFF).
_NONNEG = NONNEGATIVE_FP16


def _fp16(x) -> np.ndarray:
    return np.asarray(round_fp16(x), dtype=np.float64)


def _gains(a, n, eps16, l2=False, floor=0.0):
    """``(g, bad)`` for fp16 magnitudes ``a``: ``g(a)`` bounds ``|y|`` at an element with
    ``|d| = a`` (see :func:`norm_peak`), valid where ``bad`` is False."""
    with np.errstate(all="ignore"):
        sq = np.maximum(_fp16(a * a), floor)
        if l2:
            t = np.maximum(sq, eps16)
        else:
            t = _fp16(_fp16(sq / n) + eps16)
        r = _fp16(1.0 / np.sqrt(t))
        return _fp16(a * r), ~(t > 0)


def norm_peak(a_lo: float, a_hi: float, n: int, eps: float, l2: bool = False, floor: float = 0.0):
    """``(peak, nan)``: every non-NaN ``|y|`` of a normalization at an element whose
    normalized value ``d`` (``x - mu`` for layer/group norm, ``x`` for rms_norm and
    l2_norm) has ``a_lo <= |d| <= a_hi`` is at most ``peak``; ``nan`` says NaN can appear
    there. ``n`` is the count divided by (layer/group/rms norm), ``l2`` picks l2_norm's
    ``rsqrt(max(ss, eps))``, ``floor`` is a lower bound of the sum of squares (the
    narrow sum of ``n`` copies of the smallest square: the sum is monotone in every term).

    Why it holds, with every rounding (layer_norm; the others alike). The variance's sum
    ``S = nsum(fp16(d_j*d_j))`` adds non-negative terms, so its partial sums never
    decrease, and the partial just after term ``i`` is ``fp16(acc + dd_i) >= dd_i``
    (``acc >= 0``; rounding is monotone and ``dd_i`` is an fp16 value); a chip's split
    route keeps this (a chunk's partial, then the sum of non-negative partials). So
    ``S >= dd_i = fp16(d_i*d_i)`` for every ``i``; also ``S >= floor``, so
    ``S >= m_i = max(dd_i, floor)``. By monotone rounding ``var = fp16(S/n) >=
    fp16(m_i/n)`` and ``t = fp16(var + eps) >= T(a) = fp16(fp16(m_i/n) + eps)`` with
    ``a = |d_i|`` (l2_norm: ``t = max(S, eps) >= T(a) = max(m_i, eps)``). Where
    ``T(a) > 0``, ``r = fp16(1/sqrt(t))`` is non-increasing in ``t``, so
    ``r <= fp16(1/sqrt(T(a)))`` and ``|y_i| = fp16(a*r) <= g(a) = fp16(a *
    fp16(1/sqrt(T(a))))``: a function of the single fp16 value ``a``, which the rule
    evaluates at EVERY fp16 value in ``[a_lo, a_hi]`` (at most 31744) and maximizes, so
    no analytic slack enters. ``g(a)`` is about ``a / sqrt(a*a/n + eps) < sqrt(n)``
    (l2_norm: ``a / sqrt(max(a*a, eps)) <= 1``).

    The special cases fall out: a subnormal or zero ``fp16(m_i/n)`` is computed as the
    kernel computes it; ``dd_i = inf`` (``a > 255.9``) gives ``T = inf`` and ``g = 0``,
    as indeed then ``S = inf``, ``r = 0`` and ``y_i = 0``. Where ``T(a) <= 0`` (``eps``
    rounding to 0, or negative) ``t`` may be 0 or negative, so ``r`` may be inf or NaN:
    the peak is inf, with NaN. An infinite ``d_i`` (``a_hi = inf``) makes ``S = inf``,
    ``r = 0`` and ``y_i = inf * 0``: NaN, and no value.

    Example:
        >>> norm_peak(0.0, 600.0, 64, 1e-5)  # sqrt(64) = 8, plus one rounding
        (8.0078125, False)
    """
    eps16 = float(round_fp16(eps))
    nan = a_hi == INF
    lo, hi = max(a_lo, 0.0), min(a_hi, FP16_MAX)
    a = _NONNEG[np.searchsorted(_NONNEG, lo, "left") : np.searchsorted(_NONNEG, hi, "right")]
    if a.size == 0:
        return 0.0, nan
    g, bad = _gains(a, n, eps16, l2, floor)
    if bad.any():
        return INF, True
    return float(g.max()), nan


def _normalized(d: Interval, n: int, eps: float, floor: float, l2: bool = False) -> Interval:
    """The interval of ``y = fp16(d * r)`` over the values of ``d`` (``y`` has their sign)."""
    nan = d.nan
    hi = lo = 0.0
    if d.hi >= 0.0:
        peak, bad = norm_peak(max(d.lo, 0.0), d.hi, n, eps, l2, floor)
        hi, nan = (peak if d.hi > 0.0 else 0.0), nan or bad
    if d.lo <= 0.0:
        peak, bad = norm_peak(max(-d.hi, 0.0), -d.lo, n, eps, l2, floor)
        lo, nan = (-peak if d.lo < 0.0 else 0.0), nan or bad
    return Interval(lo, hi, nan)


def _square_steps(d: Interval, name: str, n: int, eps: float, env, l2=False) -> float:
    """Record ``name*name``, its narrow sum over ``n`` terms and the rsqrt; return the
    sum's lower bound."""
    small = 0.0 if d.lo <= 0.0 <= d.hi else min(abs(d.lo), abs(d.hi))
    sq_lo, sq_hi = (float(v) for v in _fp16(np.array([small, d.max_abs]) ** 2))
    env.step(f"{name}*{name}", Interval(sq_lo, sq_hi, d.nan))
    q_lo, q_hi = (float(v) for v in copies_sum([sq_lo, sq_hi], n, route=env.route))
    env.step(f"sum({name}*{name})", Interval(q_lo, q_hi, d.nan))
    eps16 = float(round_fp16(eps))
    with np.errstate(all="ignore"):
        if l2:
            label, t = "rsqrt(max(ss,eps))", np.maximum(np.array([q_lo, q_hi]), eps16)
        else:
            label = "rsqrt(var+eps)" if name == "d" else "rsqrt(ms+eps)"
            t = _fp16(_fp16(np.array([q_lo, q_hi]) / n) + eps16)
        r = _fp16(1.0 / np.sqrt(t))
    if t[0] > 0.0:
        env.step(label, Interval(float(r[1]), float(r[0]), d.nan))
    else:  # t can be 0 (r = inf) or negative (NaN)
        env.step(label, Interval(float(r[1]) if t[1] > 0.0 else 0.0, INF, True))
    return q_lo


def _standardized(s: Interval, n: int, eps: float, env) -> Interval:
    """layer_norm / group_norm before the affine step, over groups of ``n`` values."""
    total_lo, total_hi = (float(v) for v in copies_sum([s.lo, s.hi], n, route=env.route))
    total_nan = s.nan or (total_lo == -INF and total_hi == INF)
    env.step("sum(x)", Interval(total_lo, total_hi, total_nan))
    with np.errstate(all="ignore"):
        mu_lo, mu_hi = _fp16(np.array([total_lo, total_hi]) / n)
        # x - mu >= lo - mu_hi and <= hi - mu_lo; NaN ends (inf - inf) widen to +-inf
        d_lo, d_hi = _fp16(np.array([s.lo - mu_hi, s.hi - mu_lo]))
    nan = total_nan or bool(np.isnan(d_lo) or np.isnan(d_hi))
    d = Interval(-INF if np.isnan(d_lo) else d_lo, INF if np.isnan(d_hi) else d_hi, nan)
    env.step("x-mean", d)
    floor = _square_steps(d, "d", n, eps, env)
    return _normalized(d, n, eps, floor)


def _mul_ends(alo, ahi, blo, bhi):
    """Elementwise ``fp16`` products of ``[alo, ahi] x [blo, bhi]``: ``(lo, hi, nan)``.
    The extremes lie at the corners; a corner ``0 * inf`` (NaN) counts as 0 there, which
    bounds the other values, and sets ``nan``."""
    with np.errstate(all="ignore"):
        corners = np.stack(np.broadcast_arrays(alo * blo, alo * bhi, ahi * blo, ahi * bhi)).astype(
            np.float64
        )
    corners = np.where(np.isnan(corners), 0.0, corners)
    a0 = (alo <= 0.0) & (ahi >= 0.0)
    b0 = (blo <= 0.0) & (bhi >= 0.0)
    a_inf = (alo == -INF) | (ahi == INF)
    b_inf = (blo == -INF) | (bhi == INF)
    nan = bool(np.any((a0 & b_inf) | (b0 & a_inf)))
    return _fp16(corners.min(axis=0)), _fp16(corners.max(axis=0)), nan


def _add_ends(alo, ahi, blo, bhi):
    """Elementwise ``fp16`` sums of ``[alo, ahi] + [blo, bhi]``: ``(lo, hi, nan)``."""
    with np.errstate(all="ignore"):
        lo, hi = alo + blo, ahi + bhi
    nan = bool(np.any(((ahi == INF) & (blo == -INF)) | ((alo == -INF) & (bhi == INF))))
    lo = np.where(np.isnan(lo), -INF, lo)
    hi = np.where(np.isnan(hi), INF, hi)
    return _fp16(lo), _fp16(hi), nan


def _ends(tensor, iv: Interval):
    """``(lo, hi)`` arrays of a parameter: a weight's values one by one (flattened in C
    order, so that parameters of one shape line up), else its interval's ends. A NaN
    weight makes its elements NaN whatever they hold (its interval says so): it counts
    as 0 for the bounds of the others."""
    w = weight_value(tensor)
    if w is not None:
        v = np.where(np.isnan(w), 0.0, w).ravel()
        return v, v
    return np.array([iv.lo]), np.array([iv.hi])


def _hull(lo, hi, nan: bool) -> Interval:
    """The interval of per-element ``[lo, hi]`` (never NaN: :func:`_mul_ends` and
    :func:`_add_ends` widen a NaN end)."""
    return Interval(float(np.min(lo)), float(np.max(hi)), nan)


def _affine_range(y, node, srcs, first: int = 1) -> Interval:
    """``fp16(y * weight)``, then ``fp16(y + bias)``, element by element; ``y`` is an
    Interval or per-element ``(lo, hi, nan)`` arrays lined up with the parameters."""
    if isinstance(y, Interval):
        y = (np.array([y.lo]), np.array([y.hi]), y.nan)
    lo, hi, nan = y
    i = first
    for flag, combine in (("has_weight", _mul_ends), ("has_bias", _add_ends)):
        if node.attrs.get(flag):
            p_lo, p_hi = _ends(node.srcs[i], srcs[i])
            lo, hi, bad = combine(lo, hi, p_lo, p_hi)
            nan = nan or bad or srcs[i].nan
            i += 1
    return _hull(lo, hi, nan)


def row_l2(n: int, eps: float, divided: bool = True) -> float:
    """A bound on the 2-norm of a normalized row of ``n`` values, ``y_i = fp16(d_i * r)``
    (before the affine step), whatever the row; inf when ``eps`` rounds to 0 or less.

    Why it holds, with every rounding (u = 2**-11, h = 2**-25: each fp16 rounding of a
    ``v >= 0`` gives at least ``v (1 - u) - h``). With ``Q = sum d_i**2``: the squares
    round to ``dd_i >= d_i**2 (1 - u) - h``; each of the at most ``n`` adds of the narrow
    sum (in order or by a route) multiplies what it holds by at least ``1 - u`` and
    subtracts at most ``h``, so ``S >= (1 - u)**(n+1) Q - 2 n h``; then ``var =
    fp16(S/n)`` and ``t = fp16(var + eps)`` lose ``1 - u`` and ``h`` once each, so
    ``t >= a Q + b`` with ``a = (1 - u)**(n+3) / n``; also ``t >= eps`` (``var >= 0``).
    ``r = fp16(1/sqrt(t)) <= (1 + u) / sqrt(t)`` and ``|y_i| <= (1 + u) |d_i| r + h``,
    so ``||y||_2 <= (1 + u)**2 sqrt(Q / max(a Q + b, eps)) + sqrt(n) h``. Over Q this
    is largest at ``Q -> inf`` when ``b >= 0`` (``1/a``) and at ``a Q + b = eps`` when
    ``b < 0`` (``(eps - b) / (a eps)``). An overflowed sum gives ``r = 0`` and ``y = 0``
    (or NaN, which the interval's flag carries). ``divided=False`` is l2_norm's
    ``t = max(S, eps)``: no division by ``n``.

    Example:
        >>> 8.0 < row_l2(64, 1e-5) < 8.2  # sqrt(64), plus the roundings
        True
    """
    u, h = U16, ETA16
    e = float(round_fp16(eps))
    if not e > 0:
        return INF
    if divided:
        a = (1 - u) ** (n + 3) / n
        b = (e - 2 * h * (1 - u) - h) * (1 - u) - h
    else:
        a, b = (1 - u) ** (n + 1), -2 * n * h
    peak = 1.0 / a if b >= 0 else (e - b) / (a * e)
    return (1 + u) ** 2 * math.sqrt(peak) * (1 + 2.0**-40) + math.sqrt(n) * h


def _affine_l2(l2: float, node, srcs, n: int, first: int = 1) -> float:
    """The row 2-norm bound after ``fp16(y * weight)`` and ``fp16(y + bias)``: each
    scales by at most ``1 + u`` and adds ``sqrt(n) h`` of rounding, a weight multiplies
    by its largest magnitude, a bias adds its 2-norm (at most ``sqrt(n) max|b|``)."""
    i = first
    for flag in ("has_weight", "has_bias"):
        if node.attrs.get(flag):
            w = weight_value(node.srcs[i])
            if flag == "has_weight":
                big = srcs[i].max_abs if w is None else float(np.max(np.abs(w)))
                l2 = l2 * big
            else:
                l2 = l2 + (
                    math.sqrt(n) * srcs[i].max_abs if w is None else float(np.linalg.norm(w))
                )
            l2 = (1 + U16) * l2 + math.sqrt(n) * ETA16
            i += 1
    return l2 if math.isfinite(l2) else INF


def _with_row_l2(iv: Interval, node, srcs, n: int, eps: float, divided=True) -> Interval:
    """``iv`` with the row 2-norm bound when the op normalizes exactly the last axis."""
    shape = node.srcs[0].shape
    if node.attrs["axis"] % len(shape) != len(shape) - 1:
        return iv
    if not (math.isfinite(iv.lo) and math.isfinite(iv.hi)):
        return iv  # the bound is for finite rows: one that may hold an inf has none
    l2 = _affine_l2(row_l2(n, eps, divided), node, srcs, n)
    return Interval(iv.lo, iv.hi, iv.nan, iv.tiny, l2=l2)


def _layer_norm_range(node, srcs, env) -> Interval:
    """Range rule of ``layer_norm`` (steps ``sum(x)``, ``x-mean``, ``d*d``,
    ``sum(d*d)``, ``rsqrt(var+eps)``; output by :func:`norm_peak`).

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 64), name="x", range=(-3.0, 3.0))
        >>> str(af.range_analysis(af.layer_norm(x)).nodes[-1].interval)
        '[-8.008, 8.008]'
    """
    shape = node.srcs[0].shape
    axis = node.attrs["axis"] % len(shape)
    n = int(np.prod(shape[axis:], dtype=np.int64))
    y = _standardized(srcs[0], n, node.attrs["eps"], env)
    return _with_row_l2(_affine_range(y, node, srcs), node, srcs, n, node.attrs["eps"])


def _group_norm_range(node, srcs, env) -> Interval:
    """Range rule of ``group_norm``: layer_norm's over each group of channels."""
    shape = node.srcs[0].shape
    n = int(np.prod(shape[1:], dtype=np.int64)) // node.attrs["groups"]
    y = _standardized(srcs[0], n, node.attrs["eps"], env)
    return _affine_range(y, node, srcs)


def _rms_norm_range(node, srcs, env) -> Interval:
    """Range rule of ``rms_norm`` (steps ``x*x``, ``sum(x*x)``, ``rsqrt(ms+eps)``)."""
    shape = node.srcs[0].shape
    axis = node.attrs["axis"] % len(shape)
    n = int(np.prod(shape[axis:], dtype=np.int64))
    floor = _square_steps(srcs[0], "x", n, node.attrs["eps"], env)
    y = _affine_range(_normalized(srcs[0], n, node.attrs["eps"], floor), node, srcs)
    return _with_row_l2(y, node, srcs, n, node.attrs["eps"])


def _l2_norm_range(node, srcs, env) -> Interval:
    """Range rule of ``l2_norm`` (steps ``x*x``, ``sum(x*x)``, ``rsqrt(max(ss,eps))``):
    within about 1, by :func:`norm_peak`."""
    shape = node.srcs[0].shape
    n = int(shape[node.attrs["axis"] % len(shape)])
    floor = _square_steps(srcs[0], "x", n, node.attrs["eps"], env, l2=True)
    y = _normalized(srcs[0], n, node.attrs["eps"], floor, l2=True)
    return _with_row_l2(y, node, srcs, n, node.attrs["eps"], divided=False)


def _batch_norm_range(node, srcs, env) -> Interval:
    """Range rule of ``batch_norm``, channel by channel: every step is monotone in each
    of its operands (``x - mean``, ``rsqrt`` of ``var + eps``, the products with the
    non-negative ``r`` and the weight, the bias add), so each channel's extremes are at
    the corners of its operands' ranges: exact ends per channel for statistics that are
    weights. ``var + eps <= 0`` makes ``r`` inf or NaN."""
    x_lo, x_hi = np.array([srcs[0].lo]), np.array([srcs[0].hi])
    (m_lo, m_hi), (v_lo, v_hi) = (_ends(node.srcs[i], srcs[i]) for i in (1, 2))
    nan = any(s.nan for s in srcs[:3])
    d_lo, d_hi, bad = _add_ends(x_lo, x_hi, -m_hi, -m_lo)
    nan = nan or bad
    eps16 = float(round_fp16(node.attrs["eps"]))
    with np.errstate(all="ignore"):
        t_lo, t_hi = _fp16(v_lo + eps16), _fp16(v_hi + eps16)
        r_lo, r_hi = _fp16(1.0 / np.sqrt(t_hi)), _fp16(1.0 / np.sqrt(t_lo))
    if not bool(np.all(t_lo > 0.0)):  # r = 1/sqrt(0) = inf, or of a negative: NaN
        return Interval.unknown()
    y_lo, y_hi, bad = _mul_ends(d_lo, d_hi, r_lo, r_hi)
    return _affine_range((y_lo, y_hi, nan or bad), node, srcs, first=3)


_RANGES = {
    "layer_norm": _layer_norm_range,
    "rms_norm": _rms_norm_range,
    "group_norm": _group_norm_range,
    "batch_norm": _batch_norm_range,
    "l2_norm": _l2_norm_range,
}


_AFFINE = {"has_weight": bool_attr(False, "has_weight"), "has_bias": bool_attr(False, "has_bias")}


def _eps(default, what):
    """The eps attribute; ``what`` is what an eps that fp16 turns into 0 leads to."""
    return float_attr(default, "eps", underflow=what)


_ZERO_VARIANCE = "a row of zero variance then gives NaN (0 * rsqrt(0))"
_ZERO_ROW = "an all-zero row then gives NaN (0 * rsqrt(0))"

_NORMS = {
    "layer_norm": (
        _layer_norm,
        dict(_AFFINE, axis=int_attr(-1, None, "axis"), eps=_eps(1e-5, _ZERO_VARIANCE)),
        0,
        "normalize over axes [axis, ndim) to zero mean and unit variance",
    ),
    "rms_norm": (
        _rms_norm,
        {
            "has_weight": bool_attr(False, "has_weight"),
            "axis": int_attr(-1, None, "axis"),
            "eps": _eps(1e-5, _ZERO_ROW),
        },
        0,
        "x / sqrt(mean(x**2) + eps) over axes [axis, ndim)",
    ),
    "group_norm": (
        _group_norm,
        dict(
            _AFFINE,
            groups=int_attr(None, 1, "num_groups", True),  # af.group_norm's (PyTorch's) name
            eps=_eps(1e-5, "a group of zero variance then gives NaN (0 * rsqrt(0))"),
        ),
        0,
        "layer norm over each group of channels and all spatial positions",
    ),
    "batch_norm": (
        _batch_norm,
        dict(_AFFINE, eps=_eps(1e-5, "a channel of zero variance then gives inf or NaN")),
        2,
        "(x - mean) / sqrt(var + eps) per channel (axis 1), inference statistics",
    ),
    "l2_norm": (
        _l2_norm,
        {"axis": int_attr(-1, None, "axis"), "eps": _eps(1e-6, _ZERO_ROW)},
        0,
        "x / sqrt(max(sum(x**2), eps)) along axis",
    ),
}

# Fast emulation kernels with the same bits as the step-by-step ones (tests compare them).
_FAST_EMULATE = {"batch_norm": _batch_norm_emulate}

_STATS_FIX = (
    "compute the statistics with matmuls (x @ ones / K), or compile for a target whose "
    "split route keeps the sum short"
)


def _norm_sum(terms) -> NarrowSum:
    """The narrow sums of a norm's statistics: of squares (and of x, for the mean, whose
    rounding reaches the output divided by the deviation), counted as same-sign."""
    return NarrowSum(terms, TermSign.SAME, _STATS_FIX)


def _trailing_terms(in_shapes, attrs) -> int:
    x = in_shapes[0]
    return prod(x[attrs["axis"] % len(x) :])


def _group_terms(in_shapes, attrs) -> int:
    return prod(in_shapes[0][1:]) // int(attrs["groups"])


def _axis_terms(in_shapes, attrs) -> int:
    x = in_shapes[0]
    return int(x[attrs["axis"] % len(x)])


# The norms' narrow sums (batch_norm's inference statistics are constants: none).
_NARROW = {
    "layer_norm": _norm_sum(_trailing_terms),
    "rms_norm": _norm_sum(_trailing_terms),
    "group_norm": _norm_sum(_group_terms),
    "batch_norm": None,
    "l2_norm": _norm_sum(_axis_terms),
}
# Inference batch_norm's statistics are constants: a per-channel affine map, so each
# output element depends on one input element and the engine folds it into the pass that
# produced its input (pointwise); the others divide out their input's own scale.
# l2_norm's values lie in [-1, 1]: 1 - l2_norm(x) cancels where it saturates.
_EXTRA_FLAGS = {
    "layer_norm": (Flag.SCALE_INVARIANT,),
    "rms_norm": (Flag.SCALE_INVARIANT,),
    "group_norm": (Flag.SCALE_INVARIANT,),
    "batch_norm": (Flag.POINTWISE,),
    "l2_norm": (Flag.SCALE_INVARIANT, Flag.SATURATES),
}


def _group_layout(in_shapes, attrs):
    x = in_shapes[0]
    return (("C/groups", x[1] // int(attrs["groups"])), ("H*W", prod(x[2:])))


# The loop nests: batch_norm a per-channel map; the row norms their statistics per row
# (group_norm's rows are its groups' contiguous channel blocks: it lowers materialized).
_NESTS = {
    "batch_norm": LoopNest("elementwise", per_channel=True, scalar=_batch_norm_scalar),
    "layer_norm": LoopNest("row", form="layer_norm"),
    "rms_norm": LoopNest("row", form="rms_norm"),
    "l2_norm": LoopNest("row", form="l2_norm"),
    "group_norm": LoopNest("row", form="group_norm"),
}

# group_norm's tiled lowering reduces over [1, G, C/groups, H*W]; the compiler keeps each
# axis at most 65536 long, and a longer one falls off the compile cliff.
_TILED = {
    "group_norm": TiledReduction(
        _group_layout,
        65536,
        "[1, G, C/groups, H*W]",
        "tile the spatial extent (or raise num_groups) so each axis stays <= 65536",
    )
}

for _name, (_fn, _attrs, _stats, _doc) in _NORMS.items():
    _emu, _ex = step_kernels(_fn)
    _emu = _FAST_EMULATE.get(_name, _emu)
    register(
        fused_op(
            _name,
            None,
            _attrs,
            _params_shape(_name, _stats),
            _emu,
            _ex,
            doc=_doc,
            sign=signed,
            range=_RANGES[_name],
            flags=(Flag.NORM, *_EXTRA_FLAGS.get(_name, ())),
            narrow=_NARROW[_name],
            tiled=_TILED.get(_name),
            nest=_NESTS.get(_name),
            min_arity=1 + _stats,
            max_arity=1 + _stats + sum(k in _attrs for k in ("has_weight", "has_bias")),
        )
    )
