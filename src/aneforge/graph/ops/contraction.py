"""Contractions: matmul (weight on the right), bmm (two tensors), linear, conv,
conv_transpose. These are the ops with a closed-form FLOP count.

Emulator contract (docs/numerics.md): every product of two fp16 operands is rounded to
fp16, the products are added one at a time in ascending contraction order into a float32
accumulator, and the sum is rounded to fp16. A bias is a separate fp16 add after that
rounding. The contraction order of a convolution is (input channel, kernel row, kernel
column) in C order. The kernels receive the matmul backend ``mm(a[B,M,K], b[B,K,N])``
from the executor, so the reference interpreter and the fast path share everything else.

Range rules (:mod:`aneforge.graph.ranges`): with a known weight, each output column is
bounded by its own row sums, ``sum_k max(fp16(W_kj*lo), fp16(W_kj*hi))``, plus the
float32 accumulation error of a length-K sum in any order; with two activations, by K
times the corner products. The bound is rounded to fp16, passed through the target's
output stage (``RangeEnv.contraction``) and then the bias is added per channel. Padding
zeros (conv) and the zero-stuffed input of conv_transpose are exact zero terms: each
distinct set of taps the outputs read is bounded on its own, so zeros enter only there.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 3), name="x", range=(-1.0, 2.0))
    >>> y = af.linear(x, np.array([[1.0, -1.0, 0.5], [2.0, 0.0, 0.0]]), np.array([0.0, 1.0]))
    >>> str(af.range_analysis(y).nodes[-1].interval)
    '[-3.5, 5]'
"""

from __future__ import annotations

from functools import reduce

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..fp16 import FP16_MAX, round_fp16
from ..ranges import ETA16, INF, U16, Interval, RangeEnv, weight_value
from ..registry import OpDef, int_attr, ints_attr, register
from .common import broadcast_shape, pads, spatial_tuple

# ---- range rules: the bounds every contraction shares -----------------------------------

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
    w = np.asarray(w, dtype=np.float64)
    lo, hi = fp16_outward(x.lo, x.hi)
    tlo, thi, pnan = product_bounds(w, w, lo, hi)
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


def output_l2(x: Interval, w, bias=None) -> float:
    """A bound on the 2-norm of every output row of ``x @ w`` (``w`` a known (K, N)
    weight; ``bias`` a known (N,) one) from ``x``'s row 2-norm, or inf.

    The accumulator's error per column is at most ``(u (1 + g) + g) sum_k |w_kj x_k| +
    K 2**-25 (1 + g)`` (each product rounds once, then the float32 sum, ``g =
    gamma_{K-1}``), and ``||(sum_k |w_kj| |x_k|)_j||_2 <= || |W| ||_2 ||x||_2``; so
    ``||y||_2 <= ||W||_2 l2 + (u (1 + g) + g) || |W| ||_2 l2 + sqrt(N) K 2**-25 (1 + g)``,
    then each fp16 rounding (the output, the bias add) multiplies by ``1 + u`` and adds
    ``sqrt(N) 2**-25``. Spectral norms come from the SVD, with a relative margin."""
    if not np.isfinite(x.l2):
        return INF
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or not np.isfinite(w).all():
        return INF
    k, n = w.shape
    g = slack_rate(k)
    spec, spec_abs = (float(np.linalg.norm(m, 2)) * (1 + 2.0**-30) for m in (w, np.abs(w)))
    y = spec * x.l2 + (U16 * (1 + g) + g) * spec_abs * x.l2 + np.sqrt(n) * k * ETA16 * (1 + g)
    y = (1 + U16) * y + np.sqrt(n) * ETA16
    if bias is not None:
        b = np.asarray(bias, dtype=np.float64)
        y = (1 + U16) * (y + float(np.linalg.norm(b))) + np.sqrt(n) * ETA16
    return float(y * (1 + _MARGIN)) if np.isfinite(y) else INF


def _with_l2(iv: Interval, l2: float) -> Interval:
    return Interval(iv.lo, iv.hi, iv.nan, iv.tiny, l2=l2) if np.isfinite(l2) else iv


def _clamped(lo, hi, bound):
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


# ---- matmul / bmm ------------------------------------------------------------------


def _matmul_shape(op):
    def rule(in_shapes, attrs):
        a, b = in_shapes
        if len(a) < 1 or len(b) < 1:
            raise ShapeError(f"{op}: operands must have rank >= 1, got {a} and {b}")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ShapeError(
                f"{op}: contraction sizes differ: {a} @ {b} ({a2[-1]} vs {b2[-2]}); "
                "the last axis of the left operand must equal the second-to-last of the right"
            )
        batch = broadcast_shape(op, [a2[:-2], b2[:-2]])
        out = batch + (a2[-2], b2[-1])
        if len(a) == 1:
            out = out[:-2] + out[-1:]
        if len(b) == 1:
            out = out[:-1]
        return out

    return rule


def _as_batched(a, b):
    """Bring matmul operands to (B, M, K) and (B, K, N); return them and the out shape."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    a3 = np.broadcast_to(a2, batch + (m, k)).reshape(-1, m, k)
    b3 = np.broadcast_to(b2, batch + (k, n)).reshape(-1, k, n)
    out = batch + (m, n)
    if a.ndim == 1:
        out = out[:-2] + out[-1:]
    if b.ndim == 1:
        out = out[:-1]
    return a3, b3, out


def _matmul_emulate(inputs, attrs, mm):
    a3, b3, out = _as_batched(*inputs)
    return mm(a3, b3).reshape(out)


def _matmul_exact(inputs, attrs):
    return np.matmul(inputs[0], inputs[1])


def _matmul_flops(in_shapes, out_shape, attrs):
    k = in_shapes[0][-1]
    return 2 * k * int(np.prod(out_shape, dtype=np.int64))


def _matmul_range(node, srcs, env):
    """Row sums of a known operand (right ``x @ W`` or left ``W @ x``), else K corner
    products of the two intervals."""
    a, b = node.srcs
    wa, wb = weight_value(a), weight_value(b)
    k = a.shape[-1]
    if wb is not None:
        w = wb[:, None] if wb.ndim == 1 else wb
        lo, hi, nan = weighted_sum_bounds(w, srcs[0])
        lo, hi = _clamped(lo, hi, row_norm_bound(srcs[0], k, w=w))
        out = contraction_interval(env, lo, hi, nan)
        return _with_l2(out, output_l2(srcs[0], w) if out.finite or out.nan else INF)
    elif wa is not None:
        w = wa[None, :] if wa.ndim == 1 else wa
        lo, hi, nan = weighted_sum_bounds(np.swapaxes(w, -1, -2), srcs[1])
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], k)
        lo, hi = _clamped(lo, hi, row_norm_bound(srcs[0], k, other=srcs[1]))
    return contraction_interval(env, lo, hi, nan)


for _name, _doc in (
    ("matmul", "x @ W with W a weight (NumPy matmul semantics)"),
    ("bmm", "a @ b between two tensors, batch dims broadcast (NumPy matmul semantics)"),
):
    register(
        OpDef(
            _name,
            "fused",
            2,
            {},
            _matmul_shape(_name),
            _matmul_emulate,
            _matmul_exact,
            _matmul_flops,
            doc=_doc,
            flags=frozenset({"contraction"}),
            range=_matmul_range,
        )
    )

# ---- linear ------------------------------------------------------------------------


def _linear_shape(in_shapes, attrs):
    x, w = in_shapes[:2]
    if len(w) != 2:
        raise ShapeError(f"linear: weight must be [out_features, in_features], got {w}")
    if x[-1] != w[1]:
        raise ShapeError(f"linear: input has {x[-1]} features but the weight {w} expects {w[1]}")
    if len(in_shapes) == 3 and in_shapes[2] != (w[0],):
        raise ShapeError(f"linear: bias must have shape ({w[0]},), got {in_shapes[2]}")
    return x[:-1] + (w[0],)


def _linear_emulate(inputs, attrs, mm):
    x, w = inputs[:2]
    lead = x.shape[:-1]
    y = mm(x.reshape(1, -1, x.shape[-1]), w.T[None]).reshape(lead + (w.shape[0],))
    if len(inputs) == 3:
        with np.errstate(all="ignore"):
            y = y + inputs[2]  # fp16 + fp16 in NumPy: computed in float32, rounded once
    return y


def _linear_exact(inputs, attrs):
    y = inputs[0] @ inputs[1].T
    return y + inputs[2] if len(inputs) == 3 else y


def _linear_range(node, srcs, env):
    """Row sums of the weight per output feature, then the bias per feature."""
    x, w = node.srcs[:2]
    wv = weight_value(w)
    k = x.shape[-1]
    if wv is not None:
        lo, hi, nan = weighted_sum_bounds(wv.T, srcs[0])
        lo, hi = _clamped(lo, hi, row_norm_bound(srcs[0], k, w=wv.T))
        bias = bias_bounds(node, srcs, 2, w.shape[0])
        out = contraction_interval(env, lo, hi, nan, bias)
        b = weight_value(node.srcs[2]) if len(node.srcs) > 2 else None
        if len(node.srcs) > 2 and b is None:
            return out
        return _with_l2(out, output_l2(srcs[0], wv.T, b) if np.isfinite(out.max_abs) else INF)
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], k)
        lo, hi = _clamped(lo, hi, row_norm_bound(srcs[0], k, other=srcs[1]))
    return contraction_interval(env, lo, hi, nan, bias_bounds(node, srcs, 2, w.shape[0]))


def _linear_flops(in_shapes, out_shape, attrs):
    return 2 * in_shapes[0][-1] * int(np.prod(out_shape, dtype=np.int64))


register(
    OpDef(
        "linear",
        "fused",
        None,
        {},
        _linear_shape,
        _linear_emulate,
        _linear_exact,
        _linear_flops,
        doc="x @ W.T + b with W [out_features, in_features] (PyTorch layout), bias optional",
        flags=frozenset({"contraction"}),
        range=_linear_range,
    )
)

# ---- conv / conv_transpose ---------------------------------------------------------

_CONV_ATTRS = {
    "stride": ints_attr((1,), 1, "stride"),
    "pad": ints_attr((0,), None, "pad"),
    "dilation": ints_attr((1,), 1, "dilation"),
    "groups": int_attr(1, 1, "groups"),
}


def _conv_geometry(op, in_shapes, attrs, transpose=False):
    """Check a conv's operands; return (nd, stride, pads, dilation, kernel)."""
    x, w = in_shapes[:2]
    if len(x) not in (3, 4):
        raise ShapeError(f"{op}: input must be NCW or NCHW (rank 3 or 4), got {x}")
    nd = len(x) - 2
    if len(w) != nd + 2:
        raise ShapeError(f"{op}: weight must have rank {nd + 2} for a {nd}-D input, got {w}")
    g = attrs["groups"]
    stride = spatial_tuple(op, attrs["stride"], nd, "stride")
    dil = spatial_tuple(op, attrs["dilation"], nd, "dilation")
    pad = pads(op, attrs["pad"], nd)
    if any(p < 0 for pp in pad for p in pp):
        raise AttributeValueError(f"{op}: pad must be >= 0, got {attrs['pad']}")
    cin = x[1]
    if transpose:
        cin_w, cout = w[0], w[1] * g
    else:
        cin_w, cout = w[1] * g, w[0]
    if cin % g or cout % g:
        raise ShapeError(f"{op}: groups={g} must divide both {cin} in and {cout} out channels")
    if cin_w != cin:
        raise ShapeError(
            f"{op}: input has {cin} channels but weight {w} with groups={g} expects {cin_w}"
        )
    if len(in_shapes) == 3 and in_shapes[2] != (cout,):
        raise ShapeError(f"{op}: bias must have shape ({cout},), got {in_shapes[2]}")
    return nd, stride, pad, dil, tuple(w[2:]), cout


def _conv_out(op, size, k, s, p, d):
    out = (size + p[0] + p[1] - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise ShapeError(
            f"{op}: kernel {k} (dilation {d}) does not fit input size {size} with pad {p}"
        )
    return out


def _conv_shape(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout = _conv_geometry("conv", in_shapes, attrs)
    x = in_shapes[0]
    spatial = tuple(
        _conv_out("conv", x[2 + i], kern[i], stride[i], pad[i], dil[i]) for i in range(nd)
    )
    return (x[0], cout) + spatial


def _im2col(x, kern, stride, dil, groups):
    """(N, C, H, W) padded input -> patches (G, N*Ho*Wo, C/G*kh*kw) in (c, kh, kw) order."""
    n, c, h, w = x.shape
    kh, kw = kern
    win = np.lib.stride_tricks.sliding_window_view(
        x, ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1), axis=(2, 3)
    )[:, :, :: stride[0], :: stride[1], :: dil[0], :: dil[1]]
    ho, wo = win.shape[2], win.shape[3]
    cg = c // groups
    win = win.reshape(n, groups, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    return win.reshape(groups, n * ho * wo, cg * kh * kw), (n, ho, wo)


def _conv2d(x, w, stride, pad, dil, groups, matmul):
    """Grouped 2-D convolution of NCHW ``x`` by ``w`` through ``matmul(a3, b3)``."""
    x = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    cout = w.shape[0]
    cols, (n, ho, wo) = _im2col(x, w.shape[2:], stride, dil, groups)
    wmat = w.reshape(groups, cout // groups, -1).transpose(0, 2, 1)
    y = matmul(cols, wmat)  # (G, N*Ho*Wo, Cout/G)
    y = y.reshape(groups, n, ho, wo, cout // groups).transpose(1, 0, 4, 2, 3)
    return y.reshape(n, cout, ho, wo)


def _as_2d(x, w, stride, pad, dil):
    """View 1-D conv operands as 2-D with a unit height."""
    if x.ndim == 4:
        return x, w, stride, pad, dil
    return x[:, :, None], w[:, :, None], (1,) + stride, ((0, 0),) + pad, (1,) + dil


def _conv_run(inputs, attrs, matmul, add_bias):
    x, w = inputs[:2]
    nd, stride, pad, dil, _, _ = _conv_geometry(
        "conv", [x.shape, w.shape] + [b.shape for b in inputs[2:]], attrs
    )
    x2, w2, s2, p2, d2 = _as_2d(x, w, stride, pad, dil)
    y = _conv2d(x2, w2, s2, p2, d2, attrs["groups"], matmul)
    if nd == 1:
        y = y[:, :, 0]
    if len(inputs) == 3:
        y = add_bias(y, inputs[2].reshape((-1,) + (1,) * nd))
    return y


def _add_fp16(y, b):
    with np.errstate(all="ignore"):
        return y + b


def _conv_emulate(inputs, attrs, mm):
    return _conv_run(inputs, attrs, mm, _add_fp16)


def _conv_exact(inputs, attrs):
    return _conv_run(inputs, attrs, np.matmul, np.add)


def _distinct_taps(padded, kern, stride, dil) -> np.ndarray:
    """(P, kh*kw) 0/1: the distinct sets of taps that read a 1 of the indicator image
    ``padded`` (one channel, through the kernel's own windows) at some output."""
    cols, _ = _im2col(padded, kern, stride, dil, 1)
    return np.unique(cols[0] > 0, axis=0).astype(np.float64)


def _conv_taps(node) -> np.ndarray:
    """The tap sets of a conv's outputs: padding zeros replace the others."""
    x, w = node.srcs[0].shape, node.srcs[1].shape
    nd, stride, pad, dil, kern, _ = _conv_geometry("conv", [x, w], node.attrs)
    ind = np.ones((1, 1) + tuple(x[2:]))
    x2, w2, s2, p2, d2 = _as_2d(ind, np.zeros((1, 1) + kern), stride, pad, dil)
    return _distinct_taps(np.pad(x2, ((0, 0), (0, 0)) + tuple(p2)), w2.shape[2:], s2, d2)


def _conv_like_range(node, srcs, env, matrix, taps, cin_g, cout):
    """A convolution's rule. ``matrix(w)`` is the known weight as (K, Cout), each column
    one output channel's taps (its group's slice) in the kernel's (c, kh, kw) order;
    ``taps`` (P, kh*kw) the distinct sets of taps that read real input (the rest read
    padding or stuffed zeros, exact zero terms). Each set is bounded by its own sums,
    and the hull taken per channel, so zeros enter only where they do."""
    masks = np.tile(taps, (1, cin_g))
    k = masks.shape[1]
    partial = bool((masks.sum(axis=1) < k).any())  # some output reads a zero
    wv = weight_value(node.srcs[1])
    if wv is not None:
        m = matrix(wv)
        lo, hi, nan = weighted_sum_bounds(m, srcs[0], masks=masks)
        # a non-finite tap times a padding zero is NaN
        bad = (~np.isfinite(m)).any(axis=1).astype(np.float64)
        nan = np.any(nan) or bool(((1.0 - masks) @ bad > 0).any())
    else:
        w = srcs[1]
        parts = [interval_sum_bounds(srcs[0], w, int(n)) for n in masks.sum(axis=1)]
        lo = np.array([p[0] for p in parts])[:, None]
        hi = np.array([p[1] for p in parts])[:, None]
        w_inf = w.nan or w.lo == -INF or w.hi == INF
        nan = any(p[2] for p in parts) or (partial and w_inf)
    return contraction_interval(env, lo, hi, nan, bias_bounds(node, srcs, 2, cout))


def _conv_range(node, srcs, env):
    """Row sums of each output channel's taps, per set of taps the padding leaves."""
    w = node.srcs[1].shape
    cout = w[0]
    return _conv_like_range(
        node, srcs, env, lambda v: v.reshape(cout, -1).T, _conv_taps(node), w[1], cout
    )


def _conv_flops(in_shapes, out_shape, attrs):
    w = in_shapes[1]
    per_out = int(np.prod(w[1:], dtype=np.int64))  # Cin/G * kernel elements
    return 2 * per_out * int(np.prod(out_shape, dtype=np.int64))


register(
    OpDef(
        "conv",
        "fused",
        None,
        dict(_CONV_ATTRS),
        _conv_shape,
        _conv_emulate,
        _conv_exact,
        _conv_flops,
        doc="N-C-(H)-W convolution (cross-correlation), weight [Cout, Cin/groups, (kh), kw]",
        flags=frozenset({"contraction"}),
        range=_conv_range,
    )
)

_CONVT_ATTRS = dict(_CONV_ATTRS, output_padding=ints_attr((0,), 0, "output_padding"))


def _convt_dims(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout = _conv_geometry(
        "conv_transpose", in_shapes, attrs, transpose=True
    )
    opad = spatial_tuple("conv_transpose", attrs["output_padding"], nd, "output_padding")
    for i in range(nd):
        if opad[i] >= max(stride[i], dil[i]):
            raise AttributeValueError(
                f"conv_transpose: output_padding {opad} must be < stride or dilation"
            )
    return nd, stride, pad, dil, kern, cout, opad


def _convt_shape(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(in_shapes, attrs)
    x = in_shapes[0]
    spatial = []
    for i in range(nd):
        size = (x[2 + i] - 1) * stride[i] - pad[i][0] - pad[i][1]
        size += dil[i] * (kern[i] - 1) + opad[i] + 1
        if size < 1:
            raise ShapeError(f"conv_transpose: output size {size} < 1 along spatial dim {i}")
        spatial.append(size)
    return (x[0], cout) + tuple(spatial)


def _convt_stuff(x2, s2, d2, k2, p2, op2):
    """The input of the stride-1 conv a conv_transpose runs: ``x2`` (NCHW) zero-stuffed
    by the strides and cropped where the padding is negative; and the padding to add."""
    n, c, h, wd = x2.shape
    stuffed = np.zeros((n, c, (h - 1) * s2[0] + 1, (wd - 1) * s2[1] + 1), dtype=x2.dtype)
    stuffed[:, :, :: s2[0], :: s2[1]] = x2
    # Full padding d*(k-1) minus the user's pad; a negative amount crops instead.
    edges = []
    for i in range(2):
        full = d2[i] * (k2[i] - 1)
        edges.append((full - p2[i][0], full - p2[i][1] + op2[i]))
    crop = tuple(
        slice(max(-b, 0), stuffed.shape[2 + i] - max(-a, 0) or None)
        for i, (b, a) in enumerate(edges)
    )
    pad_pos = tuple((max(b, 0), max(a, 0)) for b, a in edges)
    return stuffed[:, :, crop[0], crop[1]], pad_pos


def _convt_run(inputs, attrs, matmul, add_bias):
    """conv_transpose as a stride-1 conv over the zero-stuffed input, kernel flipped."""
    x, w = inputs[:2]
    shapes = [x.shape, w.shape] + [b.shape for b in inputs[2:]]
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(shapes, attrs)
    g = attrs["groups"]
    x2, w2, s2, p2, d2 = _as_2d(x, w, stride, pad, dil)
    k2 = w2.shape[2:]
    op2 = (0,) + opad if nd == 1 else opad
    stuffed, pad_pos = _convt_stuff(x2, s2, d2, k2, p2, op2)
    c = x2.shape[1]
    cin_g, cout_g = c // g, w2.shape[1]
    flipped = w2[:, :, ::-1, ::-1].reshape(g, cin_g, cout_g, *k2)
    wconv = flipped.transpose(0, 2, 1, 3, 4).reshape(g * cout_g, cin_g, *k2)
    y = _conv2d(stuffed, np.ascontiguousarray(wconv), (1, 1), pad_pos, d2, g, matmul)
    if nd == 1:
        y = y[:, :, 0]
    if len(inputs) == 3:
        y = add_bias(y, inputs[2].reshape((-1,) + (1,) * nd))
    return y


def _convt_emulate(inputs, attrs, mm):
    return _convt_run(inputs, attrs, mm, _add_fp16)


def _convt_exact(inputs, attrs):
    return _convt_run(inputs, attrs, np.matmul, np.add)


def _convt_range(node, srcs, env):
    """The stride-1 convolution over the zero-stuffed input that the kernel runs: each
    output channel's taps are its group's input channels of the flipped weight, and
    each output reads only the taps its position's stuffing and padding leave real."""
    shapes = [s.shape for s in node.srcs[:2]]
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(shapes, node.attrs)
    g = node.attrs["groups"]
    w = shapes[1]
    cin_g, cout_g = w[0] // g, w[1]
    ind = np.ones((1, 1) + tuple(shapes[0][2:]))
    x2, w2, s2, p2, d2 = _as_2d(ind, np.zeros((1, 1) + kern), stride, pad, dil)
    k2 = w2.shape[2:]
    stuffed, pad_pos = _convt_stuff(x2, s2, d2, k2, p2, (0,) + opad if nd == 1 else opad)
    taps = _distinct_taps(np.pad(stuffed, ((0, 0), (0, 0)) + pad_pos), k2, (1, 1), d2)

    def matrix(v):
        v = v[:, :, None] if nd == 1 else v
        flipped = v[:, :, ::-1, ::-1].reshape(g, cin_g, cout_g, -1).transpose(0, 2, 1, 3)
        return flipped.reshape(g * cout_g, -1).T

    return _conv_like_range(node, srcs, env, matrix, taps, cin_g, cout)


def _convt_flops(in_shapes, out_shape, attrs):
    x, w = in_shapes[:2]
    per_in = int(np.prod(w[1:], dtype=np.int64))  # Cout/G * kernel elements
    return 2 * per_in * int(np.prod(x, dtype=np.int64))


register(
    OpDef(
        "conv_transpose",
        "fused",
        None,
        _CONVT_ATTRS,
        _convt_shape,
        _convt_emulate,
        _convt_exact,
        _convt_flops,
        doc="transposed convolution, weight [Cin, Cout/groups, (kh), kw]",
        flags=frozenset({"contraction"}),
        range=_convt_range,
    )
)
