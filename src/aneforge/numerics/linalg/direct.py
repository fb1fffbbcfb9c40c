"""Direct methods: triangular solves, LU with iterative refinement, Cholesky, least squares.

Every builder takes tensors (or arrays, which become weights) and returns tensors; the
loops below run while the graph is *built*, a fixed number of times set by the shapes
and the documented arguments, so the program has no data-dependent control flow.
Helpers and conventions (rows, fused residuals, power-of-two scaling, accessors off
the width axis): :mod:`aneforge.numerics.linalg._core`.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...graph import api
from ._core import (
    accumulate,
    amax_abs,
    as_rows,
    cat,
    col_as_row,
    const,
    count,
    diag_row,
    eye,
    fused,
    mask_row,
    matrix,
    mm,
    neg,
    normalize,
    pow2,
    pow2_exponent,
    pow2_scale,
    rel_residual,
    residual_op,
    row,
    saturate,
    tr,
    unit_row,
)

#: Relative rounding floor of a Cholesky pivot (u16 = 2**-11).
_NOISE = 2.0**-11

# ---- triangular solves ---------------------------------------------------------------------


def _tri_solve(t, b, lower: bool, unit: bool = False, safe: bool = False, clip=None):
    """Rows ``x`` with ``t @ x_row^T = b_row^T`` for every row of ``b`` (..., r, n).

    Substitution, one unknown per step, in a fixed order. Step i computes
    ``b_i - sum_m t_im x_m`` as ONE matmul ``[b, x] @ [I; -t^T]`` (the unknowns not yet
    found are zero, so they add nothing), divides by ``t_ii`` (skipped when ``unit``)
    and writes the entry with a select (exact). ``safe`` replaces a zero diagonal by 1,
    which leaves the unknown at the (zero) right-hand side instead of an inf. ``clip``
    saturates every unknown at +-clip: with ``|t| <= T`` each later product stays below
    ``T * clip``, so a numerically singular system ends finite (and is reported by the
    caller's residual) instead of turning into inf - inf = nan.
    """
    n = t.shape[-1]
    m = cat([eye(n), neg(tr(t))], -2)
    d = None
    if not unit:
        d = diag_row(t)
        if safe:
            d = api.select(api.abs(d) > 0.0, d, 1.0)
    x = None
    for i in range(n) if lower else range(n - 1, -1, -1):
        step = b if x is None else mm(cat([b, x], -1), m)
        if d is not None:
            step = step / d
        if clip is not None:
            step = api.clip(step, lo=-clip, hi=clip)
        x = api.select(unit_row(n, i), step, 0.0 if x is None else x)
    return x


def solve_triangular(t, b, lower: bool = True, unit_diagonal: bool = False):
    """Solve ``t @ x = b`` for a triangular ``t`` (n, n) and ``b`` (n,) or (n, k).

    Forward (``lower``) or back substitution: n fixed steps, each unknown one fused
    matmul ``b_i - sum_m t_im x_m`` (float32 accumulator, one fp16 rounding) and one
    division. Range: the accumulated terms are the products ``t_im x_m``; they stay in
    fp16 when ``|t| |x|`` does (no scaling is applied: scale ``b`` first for extreme
    data). Only the stored triangle is read.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> t = np.array([[2.0, 0.0], [1.0, 4.0]])
        >>> af.compile(linalg.solve_triangular(t, af.input((2,))))([2.0, 9.0])
        array([1., 2.], dtype=float32)
    """
    t = matrix(t, "solve_triangular: t", square=True)
    n = t.shape[0]
    mask = api.select(const(_triangle(n, lower)), t, 0.0)
    rows, restore, _ = as_rows(b, n, "solve_triangular: b")
    return restore(_tri_solve(mask, rows, lower, unit=unit_diagonal))


def _triangle(n, lower):
    return np.tril(np.ones((n, n))) if lower else np.triu(np.ones((n, n)))


# ---- LU ----------------------------------------------------------------------------------


class _LU:
    """In-graph LU of a row-equilibrated matrix: ``P @ (D A) = L @ U``.

    Attributes: ``a`` (D A), ``p`` (row k is the one-hot of the k-th pivot row),
    ``l`` (unit lower), ``u`` (upper), ``e`` ((n, 1) exponents: D = diag(2**-e)).
    """

    def __init__(self, a):
        n = a.shape[0]
        self.e = pow2_exponent(amax_abs(a))
        self.a = a * pow2(neg(self.e))
        self.p, self.l, self.u = _crout(self.a, n)
        self.n = n

    def solve_rows(self, rows):
        """Rows x with (D A) x = rows (rows already equilibrated)."""
        y = _tri_solve(self.l, mm(rows, tr(self.p)), lower=True, unit=True)
        return _tri_solve(self.u, y, lower=False)


def _crout(a, n):
    """Left-looking (Crout-Doolittle) LU with partial pivoting in n fixed steps.

    Step k: the candidates ``v_i = a_ik - sum_{m<k} l_im u_mk`` for all rows at once (one
    fused matmul); the pivot is the first row of largest |v_i| among the rows not used
    yet (amax, an equality test and ``cumsum`` pick it as a one-hot, no control flow);
    the multipliers are ``v_i / v_p``; row k of U is ``a_pj - sum_{m<k} l_pm u_mj``
    (one fused matmul). Rows are never swapped: the multipliers keep the original row
    index and ``P`` records the pivots, so ``L = P @ [l_0 ... l_{n-1}]`` at the end. Row
    and pivot extractions are one-hot matmuls (exact); columns come from row slices of
    transposes.
    """
    at = tr(a)
    unused = const([[1.0] * n])
    neg_l, neg_u, p_rows, u_rows, l_rows = [], [], [], [], []
    for k in range(n):
        acol = row(at, k)
        if k == 0:
            v = acol
        else:
            lk, uk = cat(neg_l, -2), cat(neg_u, -2)
            v = fused([(acol, eye(n)), (col_as_row(cat(u_rows, -2), k), lk)])
        cand = api.select(unused, api.abs(v), -1.0)
        hit = api.equal(cand, api.amax(cand, axis=-1, keepdims=True))
        p = hit * api.equal(api.cumsum(hit), 1.0)
        piv = mm(v * p, const([[1.0]] * n))
        unused = unused - p
        lrow = api.select(unused, v / piv, p)
        if k == 0:
            urow = mm(p, a)
        else:
            pick = mm(p, cat([a, tr(cat(l_rows, -2))], -1))
            urow = mm(pick, cat([eye(n), uk], -2))
        urow = api.select(mask_row(n, k + 1), urow, piv * unit_row(n, k))
        p_rows.append(p)
        l_rows.append(lrow)
        u_rows.append(urow)
        neg_l.append(neg(lrow))
        neg_u.append(neg(urow))
    p = cat(p_rows, -2)
    return p, mm(p, tr(cat(l_rows, -2))), cat(u_rows, -2)


def lu(a):
    """LU factorization with scaled partial pivoting: ``A = P @ L @ U`` (SciPy's form).

    Method: the rows are first equilibrated by exact powers of two (``D A`` has
    ``max|row| <= 2``), then :func:`_crout` factors ``P' D A = L' U'`` in n fixed steps:
    each entry of L and U is one fused dot product (float32 accumulator, a single fp16
    rounding), the pivot of step k is the row of largest |candidate| (a one-hot built
    from amax / equal / cumsum, never a branch). The factors of A itself follow exactly
    (powers of two): ``L = D'^-1 L' D'``, ``U = D'^-1 U'`` with ``D' = P' D P'^T``.

    Range: in the equilibrated factorization |l| <= 1 and |u| <= growth * 2 (the growth
    factor of partial pivoting, <= 2**(n-1), in practice < 10), so every intermediate is
    O(1). The returned factors carry A's own row scales: |U| is at most growth * max|A|
    and L's entries are bounded by the ratio of row scales (1 for equilibrated A).
    Accessors: columns via row slices of transposes (no width-offset slice).

    Envelope: a singular matrix gives a zero on U's diagonal (and nan multipliers below
    it while rows remain). Returns the three (n, n) tensors ``(P, L, U)``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> p, l, u = linalg.lu(af.input((3, 3)))
        >>> p.shape, l.shape, u.shape
        ((3, 3), (3, 3), (3, 3))
    """
    a = matrix(a, "lu: a", square=True)
    f = _LU(a)
    # exponents of the pivot rows, in pivot order: e'_k = e_{p_k}
    ep = mm(f.p, f.e)
    lo = f.l * pow2(neg(tr(ep))) * pow2(ep)
    up = f.u * pow2(ep)
    return tr(f.p), lo, up


def solve(a, b, refine: int = 2, residual: str = "exact", return_residual: bool = False):
    """Solve ``A x = b`` by LU with iterative refinement; ``b`` is (n,) or (n, k).

    Method: :func:`lu`'s factorization of the row-equilibrated ``D A`` (exact powers of
    two, so ``D A x = D b`` is the same system; ``b`` is scaled by a power of two too),
    one forward and one back substitution, then ``refine`` fixed refinement steps: the
    residual ``r = D b - (D A) x``, ``r`` scaled by a power of two to ``max|r| <= 2`` so
    the correction solve runs in fp16's normal range, ``x += LU^-1 r`` with the scale
    undone exactly (a non-finite correction is dropped).

    ``residual``: ``'exact'`` (default) forms r with every product exact
    (:class:`~aneforge.numerics.linalg._core.ExactResidual`: Veltkamp-split operands, four
    piece products and b in ONE matmul, one rounding at the end), so refinement converges
    to the correctly rounded fp16 solution while the LU's own error contracts (cond up to
    ~1e3 in 2 steps, ~1e4 in about 5). ``'fp16'`` is the plain fused residual
    ``[b, x] @ [I; -A^T]`` whose fp16-rounded products are the cancellation wall the spec
    describes: r is known only to about ``u16 |D A| |x|``.

    Accuracy (n = 16, bench/linalg_envelopes.py, docs/numerics.md "Linear algebra"):
    unrefined 1e-3 / 4e-3 / 2e-2 at cond 1e1 / 1e2 / 1e3; with the exact residual
    2e-4 at all three (the fp16 rounding of x itself); with the fp16 residual only about
    2x better than unrefined (erratic at 1e3, where it "only nibbles").

    Envelope: a singular or numerically singular A makes the LU solve non-finite; that
    solve (or correction) is dropped, so x comes back finite (0, or the last finite
    iterate) and the residual reports it (1.0 for x = 0).

    Returns x (b's shape), or ``(x, residual)`` with ``return_residual``: the relative
    residual ``||D b - D A x|| / ||D b||`` per right-hand side (shape () or (k,)), a
    finite number that reports a failed solve.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> a = np.array([[4.0, 1.0], [2.0, 3.0]])
        >>> x = linalg.solve(a, af.input((2,)))
        >>> af.compile(x)([6.0, 8.0])
        array([1., 2.], dtype=float32)
    """
    a = matrix(a, "solve: a", square=True)
    n = a.shape[0]
    rows, restore, report = as_rows(b, n, "solve: b")
    refine = count(refine, "refine", "solve", minimum=0)
    f = _LU(a)
    be, bup = pow2_scale(rows * pow2(neg(tr(f.e))))
    x = accumulate(None, f.solve_rows(be))
    at = tr(f.a)
    resid = residual_op(at, residual, "solve")
    for _ in range(refine):
        rs, up = pow2_scale(resid(be, x))
        x = accumulate(x, f.solve_rows(rs) * up)
    out = restore(saturate(x * bup))
    if not return_residual:
        return out
    return out, report(rel_residual(resid(be, x), be))


# ---- Cholesky ------------------------------------------------------------------------------


def _cholesky_rows(a, n):
    """Rows of L^T (the columns of L) by the left-looking column recurrence.

    Column j: ``s = a_j - sum_{m<j} l_jm l_m`` as one fused matmul, where ``a_j`` is row
    j of A (equal to column j by symmetry: a height-axis slice) and the coefficients
    ``l_jm`` are row j of ``L^T``'s transpose (again a height-axis slice). So no
    accessor ever slices the width axis. Then ``l_jj = r = sqrt(s_j)`` and
    ``l_ij = s_i / r`` below it, with r bounded from below (a Gill-Murray-Wright style
    modification that never acts in exact arithmetic on an SPD matrix):
    ``r >= sqrt(2**-11 a_jj)`` (the pivot's rounding floor) and
    ``r >= max_{i>j} |s_i| / sqrt(max_i a_ii)`` (so ``|l_ij| <= sqrt(max a_ii)``, the SPD
    bound). Where fp16 rounding makes A numerically indefinite, L stays finite and
    bounded and factors a diagonally perturbed A.
    """
    ones = const([[1.0]] * n)
    inv_root = api.rsqrt(api.amax(a * eye(n), axis=(-2, -1), keepdims=True))
    cols, negs = [], []
    for j in range(n):
        aj = row(a, j)
        if j == 0:
            s = aj
        else:
            c = col_as_row(cat(cols, -2), j)
            s = fused([(aj, eye(n)), (c, cat(negs, -2))])
        ej = unit_row(n, j)
        d = api.maximum(mm(s * ej, ones), mm(aj * ej, ones) * _NOISE)
        below = api.amax(api.abs(s) * mask_row(n, j + 1), axis=-1, keepdims=True)
        r = api.maximum(api.sqrt(d), below * inv_root)
        lj = api.select(mask_row(n, j), api.select(ej, r, s / r), 0.0)
        cols.append(lj)
        negs.append(neg(lj))
    return cat(cols, -2)


def _jacobi_exponents(a):
    """(n, 1) exponents e with ``2**-e ~ 1/sqrt(a_ii)``; the diagonal is read with an
    exact amax of ``A * I`` (positive for a symmetric positive definite A)."""
    n = a.shape[0]
    d = api.amax(a * eye(n), axis=-1, keepdims=True)
    return pow2_exponent(d, half=True)


def cholesky(a, jacobi: bool = True):
    """Cholesky factor L (lower, ``A = L @ L^T``) of a symmetric positive definite A.

    Method: the left-looking column recurrence (:func:`_cholesky_rows`), n fixed steps,
    every entry one fused dot product (float32 accumulator, one fp16 rounding) and one
    division by the column's pivot root. Range: with ``jacobi`` (default) A is first scaled
    symmetrically by exact powers of two, ``S A S`` with ``S ~ diag(a_ii)^-1/2``, so
    its diagonal lies in [1/2, 2]; then ``|l_ij| <= sqrt(2)`` and every product and
    partial sum is O(1) (``sum_m l_im**2 = a_ii``, Cauchy-Schwarz bounds the rest).
    ``L = S^-1 L'`` is exact. Without ``jacobi`` every intermediate is bounded by
    ``max a_ii`` (keep it below 32752, the matmul output limit of the chips).

    Crop-DMA (A13/A14, docs/numerics.md 9.1): the recurrence reads row j of A and entry
    j of the previous columns through height-axis slices of A and of ``L^T``'s transpose;
    no slice begins off column 0, so entries above 4094 pass on every chip (the tests
    run ``jacobi=False`` with entries ~2e4 on ``target='M1'``).

    Envelope: A must be SPD; where fp16 rounding loses definiteness (cond(A) beyond
    ~1e3) the pivot root is raised (see :func:`_cholesky_rows`) and L is the finite,
    bounded factor of a diagonally perturbed A (``L L^T = A + E``, E diagonal, >= 0).
    A non-positive diagonal entry of A itself gives nan.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> af.compile(linalg.cholesky(af.input((2, 2))))([[4.0, 2.0], [2.0, 5.0]])
        array([[2., 0.],
               [1., 2.]], dtype=float32)
    """
    a = matrix(a, "cholesky: a", square=True)
    n = a.shape[0]
    if not jacobi:
        return tr(_cholesky_rows(a, n))
    e = _jacobi_exponents(a)
    s = pow2(neg(e))
    lt = _cholesky_rows(a * s * tr(s), n)
    return tr(lt) * pow2(e)


#: Saturation of the unknowns of a Cholesky solve (|L| <= sqrt(2) after Jacobi scaling,
#: so every product stays below 1.2e4: a singular system saturates instead of nan).
_CHOL_CLIP = 2.0**13


def _chol_solve_rows(low, rows):
    y = _tri_solve(low, rows, lower=True, clip=_CHOL_CLIP)
    return _tri_solve(tr(low), y, lower=False, clip=_CHOL_CLIP)


# ---- least squares via the normal equations ------------------------------------------------


def column_scaling(a):
    """Scale the columns of A (m, n) to 2-norms in [1/sqrt2, sqrt2] by exact powers of 2.

    Returns ``(a_scaled, unscale)`` with ``a_scaled = A * 2**-e0 * 2**-e_col``: e0
    (global, from max|A|) keeps ``A * A`` in range while the column norms are formed as
    ``(A*A)^T @ ones`` (wide accumulator). ``unscale(y)`` maps a solution of the scaled
    problem back, ``x = y * 2**-e_col * 2**-e0`` (two exact scalings).
    """
    e0 = pow2_exponent(api.amax(amax_abs(a), axis=-2, keepdims=True))
    a0 = a * pow2(neg(e0))
    sq = mm(tr(a0 * a0), const([[1.0]] * a.shape[0]))
    ec = tr(pow2_exponent(sq, half=True))
    return a0 * pow2(neg(ec)), lambda y: y * pow2(neg(ec)) * pow2(neg(e0))


def least_squares(a, b, refine: int = 2, residual: str = "exact", return_residual: bool = False):
    """Least-squares solution of ``min ||A x - b||`` (A is m x n, m >= n, full rank).

    Method: the normal equations ``G x = A^T b`` with ``G = A^T A`` formed by one matmul
    of the column-scaled A (exact powers of two: unit-ish column norms, so G has a
    diagonal in [1/2, 2] and entries <= 2: symmetric Jacobi scaling by construction),
    solved by the Cholesky recurrence (:func:`_cholesky_rows`; unknowns saturate at
    +-8192 so a numerically singular G ends finite). Then ``refine`` fixed steps of
    refinement on the *original* residual (the corrected semi-normal equations):
    ``r = b - A x`` (``residual='exact'`` or ``'fp16'``, as in :func:`solve`), ``g = A^T r``
    in one matmul, g scaled by a power of two, ``x += G^-1 g`` (a non-finite correction
    is dropped).

    Accuracy (n = 16, 3n rows, 10% inconsistent b; bench/linalg_envelopes.py): the
    normal equations square the condition number; at cond 10 refinement buys back more
    than the order of magnitude the squaring cost (5e-3 -> 2e-4); at cond 1e2 (G at
    1e4, past fp16's 1/u16) about 1e-2 with failing samples; at cond 1e3 it fails (use
    :func:`~aneforge.numerics.linalg.lsqr`), finitely and reported by the residual.

    Returns x ((n,) or (n, k)), or ``(x, residual)`` with ``return_residual``: the
    optimality measure ``||A^T r|| / (||A^T|| ||r||)`` of the scaled problem (0 at the
    exact solution), with ``||A^T||`` taken as ``sqrt(n)`` for the unit-ish columns.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> x = linalg.least_squares(a, af.input((3,)))
        >>> af.compile(x)([1.0, 2.0, 3.0])
        array([1., 2.], dtype=float32)
    """
    a = matrix(a, "least_squares: a")
    if a.shape[0] < a.shape[1]:
        raise ShapeError(f"least_squares: needs m >= n (an overdetermined system), got {a.shape}")
    m, n = a.shape
    rows, restore, report = as_rows(b, m, "least_squares: b")
    refine = count(refine, "refine", "least_squares", minimum=0)
    asc, unscale = column_scaling(a)
    bs, bup = pow2_scale(rows)
    g = mm(tr(asc), asc)
    lo = tr(_cholesky_rows(g, n))
    x = accumulate(None, _chol_solve_rows(lo, mm(bs, asc)))
    resid = residual_op(tr(asc), residual, "least_squares")
    for _ in range(refine):
        gs, up = pow2_scale(mm(resid(bs, x), asc))
        x = accumulate(x, _chol_solve_rows(lo, gs) * up)
    out = restore(saturate(unscale(x) * bup))
    if not return_residual:
        return out
    return out, report(ls_optimality(asc, resid(bs, x)))


def ls_optimality(asc, r):
    """``||A^T r|| / (sqrt(n) ||r||)`` for the residual ``r = b - A x`` (A with unit-ish
    columns, so sqrt(n) stands for ||A||): a finite optimality measure, 0 at the exact
    least-squares solution, computed on the unit vector ``r / ||r||`` so that a huge
    residual (a failed solve) cannot overflow it."""
    _, unit = normalize(r)
    ng, _ = normalize(mm(unit, asc))
    return ng * (1.0 / asc.shape[1] ** 0.5)
