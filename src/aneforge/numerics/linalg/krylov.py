"""Krylov solvers with fixed iteration counts: conjugate gradient, GMRES, LSQR.

No convergence test stops a loop early: every solver runs the documented number of
steps (the loops run while the graph is built). What keeps the iterates finite instead:
every Krylov vector is normalized (exact power-of-two scaling, then a wide-accumulator
2-norm) before it is fed to A or A^T again, denominators are clamped at their rounding
noise floor, and the returned iterate is chosen by residual (a select, not a branch).
Each solver can return its relative residual, a finite number that reports a failure.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...graph import api
from ._core import (
    TINY,
    accumulate,
    amax_abs,
    as_rows,
    cat,
    const,
    count,
    dot,
    eye,
    fused,
    hypot,
    lead,
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
)
from .direct import _jacobi_exponents, _tri_solve, column_scaling, ls_optimality

#: Rounding-noise floor of a quadratic form p^T A p relative to p^T p (2**-11 = u16).
_NOISE = 2.0**-11

# ---- conjugate gradient ----------------------------------------------------------------------


def conjugate_gradient(
    a, b, iters: int | None = None, residual: str = "exact", return_residual: bool = False
):
    """Solve ``A x = b`` for a symmetric positive definite A by conjugate gradient.

    Method: symmetric Jacobi preconditioning ``S A S x' = S b`` with ``S ~ diag(A)^-1/2``
    rounded to powers of two (exact: the scaled system is the same system; its diagonal
    lies in [1/2, 2] and, A being SPD, every entry within 2), then ``iters`` CG steps
    (default ``2 n``: fp16 rounding delays CG's n-step termination). Each step uses the
    normalized direction ``p`` (``max|p|`` in (1/2, 2] by a power of two), so
    ``alpha = (r.p) / (p.Ap)`` and the A-conjugacy coefficient
    ``beta = -(r.Ap) / (p.Ap)`` are ratios of O(1) dot products (wide accumulator) and
    the residual ``r = b - A x`` is recomputed every step (no drifting recurrence;
    ``residual='exact'`` or ``'fp16'`` as in :func:`~aneforge.numerics.linalg.solve`).
    ``p.Ap`` is clamped at its rounding floor ``2**-11 p.p``, so a loss of positive
    definiteness in fp16 (high cond) yields a large but finite step. The iterate with
    the smallest residual (x0 = 0 included) is returned: a select per step, not a stop,
    and an iterate whose residual is inf or nan is never selected.

    Accuracy (n = 16, bench/linalg_envelopes.py): 3e-4 at cond 10 and about 1e-3 at
    cond 1e2 (2e-3 with the fp16 residual); near cond 1e3 it fails (error ~0.1), and the
    failure is a large, finite error with a finite residual, never a nan.

    Returns x (b's shape), or ``(x, residual)``: ``||b' - A' x'|| / ||b'||`` of the
    Jacobi-scaled system, per right-hand side.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> x = linalg.conjugate_gradient(af.input((3, 3)), af.input((3,)))
        >>> x.shape
        (3,)
    """
    a = matrix(a, "conjugate_gradient: a", square=True)
    n = a.shape[0]
    rows, restore, report = as_rows(b, n, "conjugate_gradient: b")
    iters = count(2 * n if iters is None else iters, "iters", "conjugate_gradient")
    s = pow2(neg(_jacobi_exponents(a)))
    aj = a * s * tr(s)
    bj, bup = pow2_scale(rows * tr(s))
    resid = residual_op(aj, residual, "conjugate_gradient")
    p, _ = pow2_scale(bj)
    r, x = bj, None
    best, best_res = 0.0, normalize(bj)[0]  # x0 = 0 and its residual ||b||
    for _ in range(iters):
        q = mm(p, aj)
        pq = api.maximum(dot(p, q), api.maximum(dot(p, p) * _NOISE, TINY))
        rs, rup = pow2_scale(r)
        step = dot(rs, p) / pq * rup * p
        x = step if x is None else x + step
        r = resid(bj, x)
        res, _ = normalize(r)
        best = api.select(api.less(res, best_res), x, best)  # nan/inf never selected
        best_res = api.minimum(res, best_res)
        rs, _ = pow2_scale(r)
        beta = neg(dot(rs, q)) / pq
        p, _ = pow2_scale(rs + beta * p)
    out = restore(saturate(best * tr(s) * bup))
    if not return_residual:
        return out
    return out, report(rel_residual(resid(bj, best), bj))


# ---- GMRES ----------------------------------------------------------------------------------


def _project_out(w, basis, negs, coefficients=False):
    """One classical Gram-Schmidt pass: ``w - V^T (V w)`` for the unit rows ``basis``
    (each (k, 1, p)); the coefficients are one matmul, the update one fused matmul."""
    vs = cat(basis, -2)
    h = mm(w, tr(vs))
    out = fused([(w, eye(w.shape[-1])), (h, cat(negs, -2))])
    return (out, h) if coefficients else out


def _arnoldi(v0, at, m):
    """m Arnoldi steps from the unit rows v0 (k, 1, n): (basis list, H^T (k, m, m+1)).

    Orthogonalization is classical Gram-Schmidt applied twice (CGS2): the coefficients
    ``V w`` come from one matmul and ``w - V^T h`` from one fused matmul, so every
    projection sum is accumulated wide; the second pass restores orthogonality to
    working precision. The new vector is normalized before A is applied again.
    """
    basis, negs, hrows = [v0], [neg(v0)], []
    k = v0.shape[0]
    for j in range(m):
        w, h1 = _project_out(mm(basis[j], at), basis, negs, coefficients=True)
        w, h2 = _project_out(w, basis, negs, coefficients=True)
        hn, vn = normalize(w)
        parts = [h1 + h2, hn]
        if j + 1 < m:
            parts.append(const(np.zeros((k, 1, m - j - 1))))
        hrows.append(cat(parts, -1))
        basis.append(vn)
        negs.append(neg(vn))
    return basis[:m], cat(hrows, -2)


def _givens_lstsq(ht, beta, m):
    """Solve ``min || beta e_1 - H y ||`` for the (m+1, m) Hessenberg H given as H^T.

    m fixed Givens rotations, each a matmul of every column (and of the right-hand side)
    with the rotation matrix, whose c and s come from a normalized (overflow-free) pair;
    a zero pair gives the identity. Then back substitution on the triangle (a zero
    diagonal, possible only after an exact breakdown, leaves that unknown at 0).
    """
    e0 = np.zeros((1, m + 1))
    e0[0, 0] = 1.0
    g = beta * const(e0)
    for i in range(m):
        pick = np.zeros((m + 1, 2))
        pick[i, 0] = pick[i + 1, 1] = 1.0
        _, cs = normalize(mm(row(ht, i), const(pick)))
        cs = api.select(api.greater(amax_abs(cs), 0.0), cs, const([[1.0, 0.0]]))
        c, s = mm(cs, const([[1.0], [0.0]])), mm(cs, const([[0.0], [1.0]]))
        m1, m2, rest = np.zeros((m + 1, m + 1)), np.zeros((m + 1, m + 1)), np.eye(m + 1)
        m1[i, i] = m1[i + 1, i + 1] = 1.0
        m2[i + 1, i], m2[i, i + 1] = 1.0, -1.0
        rest[i, i] = rest[i + 1, i + 1] = 0.0
        rot = c * const(m1) + s * const(m2) + const(rest)
        ht, g = mm(ht, rot), mm(g, rot)
    return _tri_solve(tr(lead(ht, m)), lead(g, m), lower=False, safe=True)


def gmres(
    a,
    b,
    restart: int | None = None,
    cycles: int = 3,
    residual: str = "exact",
    return_residual: bool = False,
):
    """Solve ``A x = b`` (A square, nonsymmetric allowed) by restarted GMRES(m).

    Method: rows equilibrated by exact powers of two (``max|row| <= 2``, so
    ``||A v|| <= 2 sqrt(n)`` for a unit v); ``cycles`` fixed restarts of ``restart``
    (default ``min(n, 20)``) Arnoldi steps. Each cycle starts from the true residual
    ``b - A x`` (``residual='exact'`` or ``'fp16'``, as in
    :func:`~aneforge.numerics.linalg.solve`), scaled by a power of two, and normalizes
    every new Krylov vector before A is applied to it, so H's entries stay below
    ``||A||``; the small least-squares problem is solved by Givens rotations
    (:func:`_givens_lstsq`); the correction ``V y`` is one matmul and a non-finite
    correction is dropped. Each restart is thus a refinement step.

    Accuracy (n = 16 square systems, restart n, bench/linalg_envelopes.py): with the
    fp16 residual (the spec's setting) 5e-4 at cond 10 and 3e-3 at cond 1e2 (spec:
    ~1e-3 and ~1e-2); with the exact residual 2e-4 (the fp16 rounding of x) through cond
    1e3. A restart shorter than n can stagnate on hard nonsymmetric matrices (a property
    of GMRES(m), in exact arithmetic too).

    Returns x, or ``(x, residual)``: ``||D b - D A x|| / ||D b||`` (D the row scaling).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> a = np.array([[3.0, 1.0], [-1.0, 2.0]])
        >>> af.compile(linalg.gmres(a, af.input((2,)), cycles=2))([5.0, 3.0])
        array([1., 2.], dtype=float32)
    """
    a = matrix(a, "gmres: a", square=True)
    n = a.shape[0]
    rows, restore, report = as_rows(b, n, "gmres: b")
    k = rows.shape[0]
    m = count(min(n, 20) if restart is None else restart, "restart", "gmres")
    cycles = count(cycles, "cycles", "gmres")
    e = pow2_exponent(amax_abs(a))
    at = tr(a * pow2(neg(e)))
    be, bup = pow2_scale(rows * pow2(neg(tr(e))))
    b3 = api.reshape(be, (k, 1, n))
    x = None
    resid = residual_op(at, residual, "gmres")
    for _ in range(cycles):
        r = b3 if x is None else resid(b3, x)
        rs, rup = pow2_scale(r)
        beta, v0 = normalize(rs)
        basis, ht = _arnoldi(v0, at, m)
        y = _givens_lstsq(ht, beta, m)
        x = accumulate(x, mm(y, cat(basis, -2)) * rup)
    x2 = api.reshape(x, (k, n))
    out = restore(saturate(x2 * bup))
    if not return_residual:
        return out
    return out, report(rel_residual(resid(be, x2), be))


# ---- LSQR -----------------------------------------------------------------------------------


def _lsqr_steps(asc, ast, b, iters, reorth):
    """Paige-Saunders LSQR on ``min ||asc y - b||`` for ``iters`` fixed steps.

    Golub-Kahan bidiagonalization with each ``u`` normalized after the A application
    and each ``v`` after the A^T application (``A v - alpha u`` and ``A^T u - beta v``
    are each one fused matmul), so alpha, beta <= ||A|| and nothing grows like sigma**2;
    with ``reorth`` each new u and v is also projected off all previous ones (one
    classical Gram-Schmidt pass, a matmul and a fused matmul), which restores the
    n-step termination that fp16 rounding destroys. The QR update of the bidiagonal
    uses an overflow-free hypot. ``b`` is (k, m); returns (k, n).
    """
    m, n = asc.shape
    k = b.shape[0]
    beta, u = normalize(api.reshape(b, (k, 1, m)))
    alpha, v = normalize(mm(u, asc))
    us, nus, vs, nvs = [u], [neg(u)], [v], [neg(v)]
    w, phibar, rhobar, x = v, beta, alpha, None
    for _ in range(iters):
        wu = fused([(v, ast), (alpha * u, neg(eye(m)))])
        beta, u = normalize(_project_out(wu, us, nus) if reorth else wu)
        wv = fused([(u, asc), (beta * v, neg(eye(n)))])
        alpha, v = normalize(_project_out(wv, vs, nvs) if reorth else wv)
        us.append(u)
        nus.append(neg(u))
        vs.append(v)
        nvs.append(neg(v))
        rho, c, s = hypot(rhobar, beta)
        rho = api.maximum(rho, TINY)
        theta, rhobar = s * alpha, neg(c * alpha)
        phi, phibar = c * phibar, s * phibar
        step = (phi / rho) * w
        x = step if x is None else x + step
        w = v - (theta / rho) * w
    return api.reshape(x, (k, n))


def lsqr(
    a,
    b,
    iters: int | None = None,
    cycles: int = 2,
    reorth: bool = True,
    residual: str = "exact",
    return_residual: bool = False,
):
    """Least-squares solution of ``min ||A x - b||`` (A is m x n, m >= n) by LSQR.

    Method: columns scaled to unit-ish 2-norms by exact powers of two
    (:func:`~aneforge.numerics.linalg.direct.column_scaling`; the same problem in a
    scaled variable), then ``cycles`` restarts of ``iters`` (default ``n``) LSQR steps
    (:func:`_lsqr_steps`, with reorthogonalization unless ``reorth=False``), each
    restart on the true residual ``b - A x`` (``residual='exact'`` or ``'fp16'``, as in
    :func:`~aneforge.numerics.linalg.solve`; scaled by a power of two), which is the
    refinement step for least squares.

    Accuracy (n = 16, 3n rows, 10% inconsistent b; bench/linalg_envelopes.py): 2e-4 to
    3e-4 at cond 10 and 5e-3 at cond 1e2 (spec: ~1e-3 and ~1e-2); at cond 1e3 about 0.2.
    The exact residual does not lift the cond 1e2 figure: refinement cannot shrink the
    cond**2 * ||r|| term of an inconsistent problem. Without reorthogonalization one
    cycle gives 1e-2 / 0.4 (the loss of orthogonality of Golub-Kahan in fp16).

    Returns x ((n,) or (n, k)), or ``(x, residual)``: the optimality measure
    ``||A^T r|| / (sqrt(n) ||r||)`` of the scaled problem (0 at the solution).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
        >>> af.compile(linalg.lsqr(a, af.input((3,))))([1.0, 2.0, 3.0])
        array([1., 2.], dtype=float32)
    """
    a = matrix(a, "lsqr: a")
    if a.shape[0] < a.shape[1]:
        raise ShapeError(f"lsqr: needs m >= n (an overdetermined system), got {a.shape}")
    m, n = a.shape
    rows, restore, report = as_rows(b, m, "lsqr: b")
    iters = count(n if iters is None else iters, "iters", "lsqr")
    cycles = count(cycles, "cycles", "lsqr")
    asc, unscale = column_scaling(a)
    ast = tr(asc)
    bs, bup = pow2_scale(rows)
    x = None
    resid = residual_op(ast, residual, "lsqr")
    for _ in range(cycles):
        r = bs if x is None else resid(bs, x)
        rs, rup = pow2_scale(r)
        x = accumulate(x, _lsqr_steps(asc, ast, rs, iters, reorth) * rup)
    out = restore(saturate(unscale(x) * bup))
    if not return_residual:
        return out
    return out, report(ls_optimality(asc, resid(bs, x)))
