"""Shared building blocks of the fp16 linear-algebra graphs.

Conventions used by every builder in :mod:`aneforge.numerics.linalg`:

- Vectors travel as **rows**: k right-hand sides of length n are a (k, n) tensor (batch
  axes, when present, lead). A matrix-vector product ``A x`` is ``X @ A^T``.
- Every dot product, norm and accumulation is a contraction: :func:`dot` is
  ``(u * v) @ ones``, :func:`fused` puts a whole sum of products (a residual
  ``b - A x`` included) into **one** matmul, so the subtraction happens in the float32
  accumulator and the result is rounded to fp16 once. Nothing here uses ``sum``.
- Scale factors are **powers of two** (:func:`pow2_exponent`), so scaling and unscaling
  are exact in fp16 (barring underflow into subnormals or overflow at the ends): a
  scaled problem is the same problem, not a perturbed one. Their magnitudes come from
  ``amax(|x|)``, an exact comparison reduction (no accumulation).
- Column accesses never use a width-offset slice (the A13/A14 crop-DMA clamps such
  slices at |v| > 4094, docs/numerics.md 9.1): a column of ``M`` is a row of ``M^T``
  taken by a height-axis slice, and every slice here begins at 0 on the last axis.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import OptionError, ShapeError
from ...graph import api
from ...graph.tensor import Tensor, as_tensor, weight

#: Smallest positive fp16 value (a subnormal): the guard against 0/0 in normalizations.
TINY = 2.0**-24
#: Range of the power-of-two exponents: 2**-14..2**15 and their inverses are all fp16.
EXP_LO, EXP_HI = -14, 15
#: A power-of-two-scaled row has norm >= 1/4 unless its exponent clipped at EXP_LO.
_ZERO_NORM = 2.0**-4
_INV_LN2 = 1.0 / math.log(2.0)


# ---- constants ------------------------------------------------------------------------


def const(value) -> Tensor:
    """A fresh fp16 weight holding ``value``."""
    return weight(np.asarray(value, dtype=np.float64))


def eye(n: int) -> Tensor:
    """The identity (n, n) (:func:`cat` broadcasts it over batch axes where needed)."""
    return const(np.eye(n))


def unit_row(n: int, i: int) -> Tensor:
    """The (1, n) row with a 1 at ``i``."""
    e = np.zeros((1, n))
    e[0, i] = 1.0
    return const(e)


def mask_row(n: int, lo: int, hi: int | None = None) -> Tensor:
    """The (1, n) row with ones at ``lo <= j < hi``."""
    m = np.zeros((1, n))
    m[0, lo:hi] = 1.0
    return const(m)


def ones_col(n: int) -> Tensor:
    """The (n, 1) column of ones that turns a product into a wide-accumulator sum."""
    return const(np.ones((n, 1)))


# ---- shapes and arguments --------------------------------------------------------------------


def count(value, name: str, who: str, minimum: int = 1) -> int:
    """A fixed step count from the arguments (an int >= ``minimum``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise OptionError(f"{who}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def matrix(a, what: str, square: bool = False) -> Tensor:
    """``a`` as a rank-2 tensor (arrays become weights)."""
    t = as_tensor(a, what)
    if t.ndim != 2:
        raise ShapeError(f"{what}: expected a matrix, got shape {t.shape}")
    if square and t.shape[0] != t.shape[1]:
        raise ShapeError(f"{what}: expected a square matrix, got shape {t.shape}")
    return t


def as_rows(b, n: int, what: str):
    """Right-hand side(s) ``b`` of shape (n,) or (n, k) as a (k, n) row tensor.

    Returns ``(rows, restore, report)``: ``restore`` maps a (k, n) row tensor back to
    ``b``'s layout and ``report`` a (k, 1) per-right-hand-side scalar to () or (k,).
    """
    t = as_tensor(b, what)
    if t.ndim not in (1, 2) or t.shape[0] != n:
        raise ShapeError(f"{what}: expected shape ({n},) or ({n}, k), got {t.shape}")
    if t.ndim == 1:
        rows = api.reshape(t, (1, n))
        return rows, (lambda x: api.reshape(x, (x.shape[-1],))), (lambda s: api.reshape(s, ()))
    k = t.shape[1]
    return tr(t), tr, (lambda s: api.reshape(s, (k,)))


# ---- movement, folded for weights ------------------------------------------------------


def tr(x: Tensor) -> Tensor:
    """Swap the last two axes (folded into a new weight when ``x`` is a weight)."""
    if x.op == "weight":
        return const(np.swapaxes(np.asarray(x.value, np.float64), -1, -2))
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return api.transpose(x, perm)


def neg(x: Tensor) -> Tensor:
    """``-x`` (exact; folded for weights)."""
    if x.op == "weight":
        return const(-np.asarray(x.value, np.float64))
    return api.neg(x)


def cat(parts, axis: int) -> Tensor:
    """Concatenate along ``axis``; weights are broadcast to the tensors' batch axes and
    an all-weight concatenation folds into one weight."""
    parts = [as_tensor(p) for p in parts]
    if len(parts) == 1:
        return parts[0]
    rank = max(p.ndim for p in parts)
    batch = ()
    for p in parts:
        if p.ndim == rank and p.op != "weight":
            batch = p.shape[:-2]
            break
    fixed = []
    for p in parts:
        if p.op == "weight" and p.shape[:-2] != batch:
            v = np.broadcast_to(np.asarray(p.value, np.float64), (*batch, *p.shape[-2:]))
            p = const(v.copy())
        fixed.append(p)
    if all(p.op == "weight" for p in fixed):
        return const(np.concatenate([np.asarray(p.value, np.float64) for p in fixed], axis))
    return api.concat(fixed, axis=axis)


def row(x: Tensor, i: int) -> Tensor:
    """Row ``i`` of ``x`` as (..., 1, n): a height-axis slice (clean on every chip)."""
    begins = [0] * x.ndim
    ends = list(x.shape)
    begins[-2], ends[-2] = i, i + 1
    return api.slice(x, begins, ends)


def col_as_row(x: Tensor, j: int) -> Tensor:
    """Column ``j`` of ``x`` as a (..., 1, m) row: row ``j`` of ``x^T``. The accessor
    stays off the width axis, so the A13/A14 crop-DMA never sees it."""
    return row(tr(x), j)


def lead(x: Tensor, count: int) -> Tensor:
    """The first ``count`` entries of the last axis (a slice beginning at 0)."""
    if count == x.shape[-1]:
        return x
    ends = list(x.shape)
    ends[-1] = count
    return api.slice(x, [0] * x.ndim, ends)


# ---- contractions ------------------------------------------------------------------------


def mm(a: Tensor, b) -> Tensor:
    """``a @ b`` (a weight on the right is a weight matmul)."""
    return api.matmul(a, b)


def fused(pairs) -> Tensor:
    """``sum_i left_i @ right_i`` as ONE matmul: ``[left_0, left_1, ...] @ [right_0;
    right_1; ...]``. Every product is rounded to fp16 and the whole sum, subtractions
    included, runs in the float32 accumulator and is rounded once."""
    lefts = [as_tensor(a) for a, _ in pairs]
    rights = [as_tensor(b) for _, b in pairs]
    return mm(cat(lefts, -1), cat(rights, -2))


def minus(b: Tensor, x: Tensor, m: Tensor) -> Tensor:
    """``b - x @ m`` in one matmul (the residual form): ``[b, x] @ [I; -m]``."""
    n = b.shape[-1]
    return fused([(b, eye(n)), (x, neg(m))])


def _veltkamp(a: Tensor, s: int):
    """Veltkamp's split ``a = hi + lo`` in fp16: hi keeps ``11 - s`` leading bits.

    ``c = fp16(a * (2**s + 1))``, ``hi = fp16(c - fp16(c - a))``, ``lo = fp16(a - hi)``;
    all exact under round-to-nearest while ``a * (2**s + 1)`` stays finite.
    """
    c = a * float(2**s + 1)
    hi = c - (c - a)
    return hi, a - hi


class ExactResidual:
    """``b - x @ m`` with every product exact: the compensated residual.

    A plain fused residual rounds each product ``m_ij x_j`` to fp16 (relative error
    2**-11 of ``|m| |x|``), and that rounding, not the subtraction, is the cancellation
    wall of iterative refinement. Here ``m`` (entries below 1000; the solvers pass
    scaled matrices with entries <= 2) and ``x`` are each split by Veltkamp's method
    (s = 6) into two pieces of at most 5 significant bits (the low piece's sign absorbs
    a bit), so every piece product has at most 10 bits and the matmul's fp16 product
    rounding is exact (barring underflow below 2**-14, an absolute error under 2**-25
    per product). The four piece products and ``b`` run through ONE matmul, so the whole
    residual is a float32 sum rounded to fp16 once. The tests check the splits on every
    fp16 value in range. An x beyond 512 is first scaled down by a power of two (with
    ``b`` and the result scaled to match), so ``65 x`` never overflows.
    """

    def __init__(self, m: Tensor):
        hi, lo = _veltkamp(m, 6)
        n = m.shape[-1]
        self.right = cat([eye(n), neg(hi), neg(lo), neg(hi), neg(lo)], -2)

    def __call__(self, b: Tensor, x: Tensor) -> Tensor:
        e = api.maximum(pow2_exponent(amax_abs(x)) - 8.0, 0.0)
        down = pow2(neg(e))
        x1, x2 = _veltkamp(x * down, 6)
        return mm(cat([b * down, x1, x1, x2, x2], -1), self.right) * pow2(e)


RESIDUALS = ("exact", "fp16")


def residual_op(m: Tensor, kind: str, who: str):
    """The residual ``(b, x) -> b - x @ m`` of a solver: ``'exact'`` is
    :class:`ExactResidual` (every product exact, one rounding at the end), ``'fp16'`` the
    plain fused matmul :func:`minus` (each product rounded to fp16: the spec's wall)."""
    if kind not in RESIDUALS:
        raise OptionError(f"{who}: residual must be one of {RESIDUALS}, got {kind!r}")
    if kind == "exact":
        return ExactResidual(m)
    return lambda b, x: minus(b, x, m)


def dot(u: Tensor, v: Tensor) -> Tensor:
    """Row-wise dot product ``(u * v) @ ones`` -> (..., 1): the wide accumulator."""
    return mm(u * v, ones_col(u.shape[-1]))


def diag_row(m: Tensor) -> Tensor:
    """The diagonal of a square (..., n, n) tensor as a (..., 1, n) row.

    ``(m * I) @ ones``: each output is one exact product plus zeros, so it is exact
    while the diagonal stays within the matmul output range."""
    n = m.shape[-1]
    return tr(mm(m * eye(n), ones_col(n)))


# ---- exact power-of-two scaling ---------------------------------------------------------


def amax_abs(x: Tensor) -> Tensor:
    """``max |x|`` over the last axis, kept as (..., 1) (an exact reduction)."""
    return api.amax(api.abs(x), axis=-1, keepdims=True)


def pow2_exponent(m: Tensor, half: bool = False) -> Tensor:
    """An integer e with ``2**e`` near ``m`` (``m**0.5`` when ``half``), in fp16.

    ``ceil(log2 m)`` (``round(log2(m) / 2)`` for ``half``) evaluated in fp16, so it may
    be one off near a power of two; callers only rely on ``m / 2**e <= 2``. Clipped to
    [-14, 15] so that both ``2**e`` and ``2**-e`` are fp16 numbers; ``m = 0`` gives -14.
    """
    lg = api.log(api.maximum(m, TINY)) * (_INV_LN2 * (0.5 if half else 1.0))
    e = api.round(lg) if half else api.ceil(lg)
    return api.clip(e, lo=EXP_LO, hi=EXP_HI)


def pow2(e: Tensor) -> Tensor:
    """``2**e`` (exact for the integer exponents of :func:`pow2_exponent`)."""
    return api.pow(const(2.0), e)


def pow2_scale(x: Tensor):
    """Scale the rows of ``x`` by a power of two so that ``max|row| <= 2`` exactly.

    Returns ``(x * 2**-e, 2**e)``; multiplying by the second undoes the first exactly.
    """
    e = pow2_exponent(amax_abs(x))
    return x * pow2(neg(e)), pow2(e)


def normalize(x: Tensor):
    """Row-wise 2-norm and unit vector: ``(norm (..., 1), x / norm)``.

    Overflow- and underflow-safe: the row is first scaled exactly by a power of two to
    ``max|x|`` in [1/4, 2], so the squares in ``(xs * xs) @ ones`` lie in [2**-24, 4]
    for the entries that matter and the sum is at most 4n. A row too small for that
    scaling (``max|x| < 2**-16``, where the exponent clips) counts as zero: norm ~0 and
    a zero unit vector, never 0/0 and never a noise vector blown up past unit length.
    """
    xs, up = pow2_scale(x)
    r = api.sqrt(dot(xs, xs))
    unit = api.select(api.greater(r, _ZERO_NORM), xs / api.maximum(r, TINY), 0.0)
    return r * up, unit


def hypot(a: Tensor, b: Tensor):
    """``sqrt(a**2 + b**2)`` and ``(a, b) / sqrt(...)`` for (..., 1) scalars.

    Through :func:`normalize` of the pair, so it neither overflows nor underflows.
    Returns ``(r, c, s)`` with ``c = a / r`` and ``s = b / r`` (both 0 when a = b = 0).
    """
    r, cs = normalize(cat([a, b], -1))
    return r, mm(cs, const([[1.0], [0.0]])), mm(cs, const([[0.0], [1.0]]))


FP16_MAX = 65504.0


def finite_or_zero(x: Tensor) -> Tensor:
    """``x`` with every inf or nan entry replaced by 0 (a select, exact)."""
    return api.select(api.less_equal(api.abs(x), FP16_MAX), x, 0.0)


def accumulate(x: Tensor | None, d: Tensor) -> Tensor:
    """``x + d`` for a refinement correction ``d``, safeguarded: a non-finite entry of
    the correction (an overflowed solve) is dropped, so the iterate stays finite and the
    failure shows in the residual instead of as inf/nan."""
    d = finite_or_zero(d)
    return d if x is None else x + d


def saturate(x: Tensor) -> Tensor:
    """Clip to the fp16 range: a result scaled back past 65504 saturates instead of inf."""
    return api.clip(x, lo=-FP16_MAX, hi=FP16_MAX)


def rel_residual(r: Tensor, b: Tensor) -> Tensor:
    """``||r|| / ||b||`` row-wise, overflow-free: both rows are scaled by powers of two
    before their norms are formed and the ratio of the scales is applied last; a ratio
    past the fp16 range saturates at 65504. Finite always; 0 when r = 0."""
    rs, up_r = pow2_scale(r)
    bs, up_b = pow2_scale(b)
    ratio = api.sqrt(dot(rs, rs)) / api.maximum(api.sqrt(dot(bs, bs)), TINY)
    return saturate(ratio * (up_r / up_b))
