"""The bounds every contraction's range rule shares (:mod:`aneforge.graph.ranges`).

The emulator's contractions round each product of fp16 operands to fp16, add them in a
float32 accumulator (any order) and round the sum once to fp16; a target's output
stage then saturates, and a bias is a separate rounded add. These helpers bound each
stage soundly: corner products, the float32 accumulation error (Higham's
``gamma_{K-1}``), row-norm refinements, the rounding to fp16 and the bias.
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from ..fp16 import FP16_MAX, round_fp16
from ..ranges import ETA16, INF, U16, Interval, RangeEnv, weight_value

_U32 = 2.0**-24  # float32's unit roundoff
# Relative outward margin for the float64 evaluation of a bound (errors ~1e-16).
_MARGIN = 2.0**-40


def fp16_outward(lo: float, hi: float) -> tuple[float, float]:
    """``[lo, hi]`` widened to fp16 values: every fp16 value inside stays inside.

    Example:
        >>> fp16_outward(0.1, 0.1)
        (0.0999755859375, 0.10003662109375)
    """
    lo16, hi16 = np.float16(lo), np.float16(hi)
    if float(lo16) > lo:
        lo16 = np.nextafter(lo16, np.float16(-INF))
    if float(hi16) < hi:
        hi16 = np.nextafter(hi16, np.float16(INF))
    return float(lo16), float(hi16)


def product_bounds(alo, ahi, blo, bhi):
    """Elementwise bounds of ``fp16(a * b)`` for ``a`` in ``[alo, ahi]`` and ``b`` in
    ``[blo, bhi]`` (fp16 values or +-inf; arrays broadcasting together).

    Returns ``(lo, hi, nan)`` arrays: the rounded products at the corners (a product is
    monotone in each factor and rounding is monotone), and where ``0 * inf`` (or a NaN
    bound) can make NaN. A NaN corner is left out; only NaN results give 0.

    Example:
        >>> lo, hi, nan = product_bounds(-2.0, 3.0, 0.5, 0.5)
        >>> float(lo), float(hi), bool(nan)
        (-1.0, 1.5, False)
    """
    alo, ahi, blo, bhi = (np.asarray(v, dtype=np.float64) for v in (alo, ahi, blo, bhi))
    with np.errstate(all="ignore"):
        corners = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
        nan = reduce(np.logical_or, [np.isnan(c) for c in corners])
        a_inf, b_inf = (alo == -INF) | (ahi == INF), (blo == -INF) | (bhi == INF)
        a_zero, b_zero = (alo <= 0) & (ahi >= 0), (blo <= 0) & (bhi >= 0)
        nan = nan | (a_inf & b_zero) | (b_inf & a_zero)
        lo, hi = reduce(np.fmin, corners), reduce(np.fmax, corners)
    lo = np.where(np.isnan(lo), 0.0, lo)
    hi = np.where(np.isnan(hi), 0.0, hi)
    return _rounded(lo), _rounded(hi), nan


def add_bounds(alo, ahi, blo, bhi):
    """Elementwise bounds of the fp16 add ``fp16(a + b)`` (monotone in both): ``(lo, hi,
    nan)``, NaN where ``inf - inf`` can occur. Arrays broadcast together.

    Example:
        >>> lo, hi, nan = add_bounds(1.0, 2.0, -np.inf, 0.5)
        >>> float(lo), float(hi), bool(nan)
        (-inf, 2.5, False)
    """
    alo, ahi, blo, bhi = (np.asarray(v, dtype=np.float64) for v in (alo, ahi, blo, bhi))
    with np.errstate(all="ignore"):
        corners = [alo + blo, alo + bhi, ahi + blo, ahi + bhi]
        nan = reduce(np.logical_or, [np.isnan(c) for c in corners])
        lo, hi = reduce(np.fmin, corners), reduce(np.fmax, corners)
    lo = np.where(np.isnan(lo), 0.0, lo)
    hi = np.where(np.isnan(hi), 0.0, hi)
    return _rounded(lo), _rounded(hi), nan


def _rounded(v):
    return np.asarray(round_fp16(v), dtype=np.float64)


def slack_rate(k: int) -> float:
    """A bound on ``|computed - exact| / sum|terms|`` of a length-``k`` float32 sum in
    any order (gamma_{k-1} with float32's unit roundoff, Higham), plus the float64
    rounding of evaluating the bound itself."""
    n = max(k - 1, 0) * _U32
    if n >= 0.5:
        return INF
    return n / (1.0 - n) + (k + 2) * 2.0**-52


def _sum_ends(k, lo, hi, mag_lo, mag_hi, npos, nneg, nboth):
    """Float64 bounds from the sums of the terms' ends (and their magnitudes, and the
    counts of infinite ends) over a contraction of ``k`` terms.

    In a fixed order the float32 running sum is non-decreasing in every term (each add
    rounds monotonically), so it lies between its values on all low ends and on all
    high ends; each of those is within ``gamma_{k-1}`` of its ends' magnitudes of the
    exact sum. That holds for every order, so for whatever order the backend takes.
    """
    rate = slack_rate(k)
    with np.errstate(invalid="ignore"):
        slack_lo = np.where(mag_lo > 0, rate * mag_lo, 0.0)
        slack_hi = np.where(mag_hi > 0, rate * mag_hi, 0.0)
    hi = np.where(npos > 0, INF, hi + slack_hi)
    lo = np.where(nneg > 0, -INF, lo - slack_lo)
    # +inf + -inf needs two different terms: one term that may be either cannot alone
    nan = (npos > 0) & (nneg > 0) & ~((npos == 1) & (nneg == 1) & (nboth == 1))
    return lo, hi, nan


def _finite_ends(tlo, thi):
    """Terms' ends as a realization with finite terms sees them (an infinite term makes
    the sum infinite or NaN, which the counts of infinite ends cover)."""
    tlo, thi = np.asarray(tlo, dtype=np.float64), np.asarray(thi, dtype=np.float64)
    pos, neg = thi == INF, tlo == -INF
    return np.clip(tlo, -FP16_MAX, FP16_MAX), np.clip(thi, -FP16_MAX, FP16_MAX), pos, neg


def sum_bounds(tlo, thi, axis: int = -2):
    """Bounds of the matmul accumulator over ``axis``: a float32 sum, in any order, of
    one term per index with term ``k`` in ``[tlo_k, thi_k]`` (fp16 values, +-inf
    allowed). Returns float64 ``(lo, hi, nan)`` with ``axis`` removed, not yet rounded to
    fp16: the exact sums of the ends, each widened by the float32 rounding error
    ``gamma_{K-1} * sum_k |end_k|``; an infinite term makes that end infinite, and NaN
    is possible where one term can be +inf and another -inf.

    Example:
        >>> lo, hi, nan = sum_bounds(np.array([[0.0], [0.0]]), np.array([[2.0], [3.0]]))
        >>> float(lo[0]), 5.0 < float(hi[0]) < 5.000001, bool(nan[0])
        (0.0, True, False)
    """
    tl, th, pos, neg = _finite_ends(tlo, thi)
    return _sum_ends(
        tl.shape[axis],
        tl.sum(axis),
        th.sum(axis),
        np.abs(tl).sum(axis),
        np.abs(th).sum(axis),
        pos.sum(axis),
        neg.sum(axis),
        (pos & neg).sum(axis),
    )


def masked_sum_bounds(tlo, thi, masks):
    """:func:`sum_bounds` over the terms each row of ``masks`` (P, K) keeps, for terms
    (K, N): the other terms are exact zeros (padding taps), which add nothing. Returns
    (P, N) arrays. The sums run as float64 matrix products, whose own rounding the
    slack covers."""
    tl, th, pos, neg = _finite_ends(tlo, thi)
    m = np.asarray(masks, dtype=np.float64)
    return _sum_ends(
        tl.shape[0],
        m @ tl,
        m @ th,
        m @ np.abs(tl),
        m @ np.abs(th),
        m @ pos,
        m @ neg,
        m @ (pos & neg),
    )


def _weight_products(w, lo: float, hi: float):
    """``product_bounds`` of a known weight (a point per element) against ``[lo, hi]``:
    two products instead of four corners, in float32, where a product of two fp16
    values is exact (11 + 11 significant bits), so its rounding to fp16 is the kernel's.
    """
    w32 = np.asarray(w, dtype=np.float32)
    with np.errstate(all="ignore"):
        a, b = w32 * np.float32(lo), w32 * np.float32(hi)
        nan = np.isnan(a) | np.isnan(b)  # a NaN weight, or 0 * inf at an end
        if lo <= 0.0 <= hi:  # x = 0 lies inside: an infinite weight times it
            nan |= np.isinf(w32)
        if not (np.isfinite(lo) and np.isfinite(hi)):  # a zero weight times the inf end
            nan |= w32 == 0
        tlo, thi = np.fmin(a, b), np.fmax(a, b)
    tlo = np.where(np.isnan(tlo), 0.0, tlo)
    thi = np.where(np.isnan(thi), 0.0, thi)
    return (np.asarray(round_fp16(tlo), np.float64), np.asarray(round_fp16(thi), np.float64), nan)


def weighted_sum_bounds(w, x: Interval, masks=None):
    """Bounds per output column of ``mm(x, w)`` before its fp16 rounding: ``w`` is a known
    (..., K, N) weight, every element of ``x`` lies in ``x``.
    Returns float64 ``(lo, hi, nan)`` of shape (..., N); with ``masks`` (P, K) (a 2-D
    ``w``; the terms each output pattern reads, the rest being zeros) of shape (P, N).

    Per column ``j``: ``sum_k max(fp16(w_kj * lo), fp16(w_kj * hi))`` and the float32
    slack (:func:`sum_bounds`). NaN where ``x`` may be NaN, ``0 * inf`` can occur or an
    inf can meet a -inf.

    Example:
        >>> lo, hi, nan = weighted_sum_bounds(np.array([[1.0], [-2.0]]), Interval(0.0, 1.0))
        >>> round(float(lo[0]), 4), round(float(hi[0]), 4)
        (-2.0, 1.0)
    """
    lo, hi = fp16_outward(x.lo, x.hi)
    if lo == -INF and hi == INF:  # an unknown input: nothing to bound, NaN possible
        shape = np.asarray(w).shape[:-2] + np.asarray(w).shape[-1:]
        if masks is not None:
            shape = (np.asarray(masks).shape[0], np.asarray(w).shape[-1])
        return np.full(shape, -INF), np.full(shape, INF), np.ones(shape, bool)
    tlo, thi, pnan = _weight_products(w, lo, hi)
    if masks is None:
        slo, shi, snan = sum_bounds(tlo, thi, axis=-2)
        return slo, shi, snan | pnan.any(axis=-2) | x.nan
    slo, shi, snan = masked_sum_bounds(tlo, thi, masks)
    pnan = np.asarray(masks, dtype=np.float64) @ pnan > 0
    return slo, shi, snan | pnan | x.nan


def interval_sum_bounds(a: Interval, b: Interval, k: int):
    """Bounds of ``mm`` over ``k`` products of an ``a`` value and a ``b`` value, before
    the fp16 rounding (two activations): float64 scalars ``(lo, hi, nan)``.

    Example:
        >>> lo, hi, nan = interval_sum_bounds(Interval(-1.0, 2.0), Interval(0.0, 3.0), 4)
        >>> round(float(lo), 4), round(float(hi), 4)
        (-12.0, 24.0)
    """
    alo, ahi = fp16_outward(a.lo, a.hi)
    blo, bhi = fp16_outward(b.lo, b.hi)
    tlo, thi, pnan = product_bounds(alo, ahi, blo, bhi)
    slo, shi, snan = sum_bounds(np.full(k, tlo), np.full(k, thi), axis=0)
    return slo, shi, bool(snan | pnan) or a.nan or b.nan


def row_norm_bound(x: Interval, k: int, w=None, other: Interval | None = None):
    """A bound on ``|mm(x, .)|`` from the norms of ``x``'s rows along the contracted last
    axis (``Interval.l1``/``l2``: a softmax's rows, a layer norm's), or None.

    With a known weight ``w`` (..., K, N), per column ``j``: ``|sum_k fp16(x_k w_kj)| <=
    (1 + u) min(||w_j||_2 ||x||_2, max|w_j| ||x||_1) + K 2**-25`` (each product rounds
    once, by at most ``u`` of itself or half a subnormal step; then Cauchy-Schwarz or
    Hoelder), times ``1 + gamma_{K-1}`` for the float32 accumulation. With an activation
    ``other`` on the right, ``max|other|`` stands for every ``|w_kj|``, or its column
    norms (``other.col_l2``) for ``||w_j||_2``.

    Example:
        >>> b = row_norm_bound(Interval(-1.0, 1.0, l1=1.0), 64, other=Interval(-5.0, 5.0))
        >>> bool(5.0 < b < 5.01)
        True
    """
    # a row holding a NaN makes its outputs NaN (the interval's flag); the rest obey this
    if w is None and np.isfinite(x.l2) and np.isfinite(other.col_l2):
        col = ((1 + U16) * x.l2 * other.col_l2 + k * ETA16) * (1 + slack_rate(k))
        return col * (1 + _MARGIN)
    if not (np.isfinite(x.l1) or np.isfinite(x.l2)):
        return None
    if w is not None:
        wa = np.abs(np.asarray(w, dtype=np.float64))
        with np.errstate(all="ignore"):
            l2_term = np.sqrt(np.square(wa).sum(axis=-2)) * x.l2
            l1_term = wa.max(axis=-2) * x.l1
    else:
        m = other.max_abs
        with np.errstate(all="ignore"):
            l2_term, l1_term = m * np.sqrt(k) * x.l2, m * x.l1
    with np.errstate(all="ignore"):
        best = np.fmin(np.nan_to_num(l2_term, nan=INF), np.nan_to_num(l1_term, nan=INF))
        return ((1 + U16) * best + k * ETA16) * (1 + slack_rate(k)) * (1 + _MARGIN)


def spectral_norm_bound(m) -> float:
    """An upper bound on the spectral norm of the float64 matrix ``m``, within about
    1e-10 of it: the largest eigenvalue of the smaller Gram matrix (``m^T m`` or ``m
    m^T``), four times faster than the SVD for a transformer's weights (384 x 1536: 13
    against 59 ms). Its rounding: the Gram product's error is at most ``gamma_K`` times
    ``|m|^T |m|``, whose norm is at most ``min(M, N)`` times the Gram's (``|| |m| ||_2 <=
    ||m||_F``), and the symmetric eigensolver is backward stable; the quotient below
    covers both, and the SVD serves where that margin would be coarse.

    Example:
        >>> import numpy as np
        >>> spectral_norm_bound(np.array([[3.0, 0.0], [0.0, -4.0]])) >= 4.0
        True
    """
    if m.size == 0:
        return 0.0
    big, small = max(m.shape), min(m.shape)
    rel = (big + 4 * small + 8) * small * 2.0**-52
    if rel >= 2.0**-20:  # the margin would be coarse: the SVD, with its own small margin
        return float(np.linalg.norm(m, 2)) * (1 + 2.0**-40)
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    top = max(float(np.linalg.eigvalsh(gram)[-1]), 0.0)
    return float(np.sqrt(top / (1 - rel)))


def output_l2(x: Interval, w, bias=None) -> float:
    """A bound on the 2-norm of every output row of ``x @ w`` (``w`` a known (K, N)
    weight; ``bias`` a known (N,) one) from ``x``'s row 2-norm, or inf.

    The accumulator's error per column is at most ``(u (1 + g) + g) sum_k |w_kj x_k| +
    K 2**-25 (1 + g)`` (each product rounds once, then the float32 sum, ``g =
    gamma_{K-1}``), and ``||(sum_k |w_kj| |x_k|)_j||_2 <= || |W| ||_2 ||x||_2``; so
    ``||y||_2 <= ||W||_2 l2 + (u (1 + g) + g) || |W| ||_2 l2 + sqrt(N) K 2**-25 (1 + g)``,
    then each fp16 rounding (the output, the bias add) multiplies by ``1 + u`` and adds
    ``sqrt(N) 2**-25``. Spectral norms are :func:`spectral_norm_bound`'s, with a relative
    margin."""
    if not np.isfinite(x.l2):
        return INF
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or not np.isfinite(w).all():
        return INF
    k, n = w.shape
    g = slack_rate(k)
    spec, spec_abs = (spectral_norm_bound(m) * (1 + 2.0**-30) for m in (w, np.abs(w)))
    y = spec * x.l2 + (U16 * (1 + g) + g) * spec_abs * x.l2 + np.sqrt(n) * k * ETA16 * (1 + g)
    y = (1 + U16) * y + np.sqrt(n) * ETA16
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64)
        y = (1 + U16) * (y + float(np.linalg.norm(b))) + np.sqrt(n) * ETA16
    return float(y * (1 + _MARGIN)) if np.isfinite(y) else INF


def with_l2(iv: Interval, l2: float) -> Interval:
    """``iv`` with the row 2-norm bound ``l2`` when it is finite."""
    return Interval(iv.lo, iv.hi, iv.nan, iv.tiny, l2=l2) if np.isfinite(l2) else iv


def clamped(lo, hi, bound):
    """``[lo, hi]`` cut to ``[-bound, bound]`` where a row-norm bound is known."""
    if bound is None:
        return lo, hi
    return np.maximum(lo, -bound), np.minimum(hi, bound)


def _fp16_ends(lo, hi):
    """Float64 bounds rounded to fp16 after a tiny outward margin for their evaluation."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    with np.errstate(all="ignore"):
        lo = np.where(np.isfinite(lo), lo - _MARGIN * np.abs(lo), lo)
        hi = np.where(np.isfinite(hi), hi + _MARGIN * np.abs(hi), hi)
    return _rounded(lo), _rounded(hi)


def _hull(lo, hi, nan) -> Interval:
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    lo, hi = lo[~np.isnan(lo)], hi[~np.isnan(hi)]
    if lo.size == 0 or hi.size == 0:
        return Interval(0.0, 0.0, True)
    return Interval(float(lo.min()), float(hi.max()), bool(np.any(nan)))


def contraction_interval(env: RangeEnv, lo, hi, nan, bias=None) -> Interval:
    """The interval of a contraction's output from float64 bounds of its accumulator
    (per output channel on the last axis, or scalars): rounded to fp16, through the
    target's output stage (``env.contraction``), then plus ``bias`` when given.

    ``bias`` is ``(values_lo, values_hi, nan)`` per channel (arrays of the channel count,
    or scalars): the fp16 add of a bias after the rounded, saturated output is monotone,
    so each channel's ends plus its bias bound it.
    """
    lo16, hi16 = _fp16_ends(lo, hi)
    out = env.contraction(_hull(lo16, hi16, nan))
    if bias is None:
        return out
    blo, bhi, bnan = bias
    axes = tuple(range(lo16.ndim - 1))  # hull over everything but the channel axis
    clo, chi = np.min(lo16, axis=axes), np.max(hi16, axis=axes)
    limit = env.matmul_limit
    if limit is not None:  # the output stage is monotone: saturate each channel's ends
        clo, chi = _saturate(clo, limit), _saturate(chi, limit)
    alo, ahi, anan = add_bounds(clo, chi, blo, bhi)
    return _hull(alo, ahi, out.nan or bool(np.any(bnan)) or bool(np.any(anan)))


def _saturate(v, limit: float):
    v = np.asarray(v, dtype=np.float64)
    return np.where(np.abs(v) > limit, np.copysign(INF, v), v)


def bias_bounds(node, srcs, index: int, channels: int):
    """``(lo, hi, nan)`` per channel of the optional bias ``node.srcs[index]``: its
    values when it is a weight, its interval otherwise; None when there is no bias."""
    if len(node.srcs) <= index:
        return None
    value = weight_value(node.srcs[index])
    if value is not None:
        b = np.broadcast_to(value.reshape(-1), (channels,)) if value.size == 1 else value
        b = b.reshape(-1)
        return b, b, np.isnan(b)
    iv = srcs[index]
    return iv.lo, iv.hi, iv.nan
