"""QR by Gram-Schmidt, and the dominant singular / eigen pairs by power iteration."""

from __future__ import annotations

import numpy as np

from ...errors import OptionError, ShapeError
from ...graph import api
from ._core import (
    amax_abs,
    cat,
    const,
    count,
    dot,
    eye,
    fused,
    matrix,
    mm,
    neg,
    normalize,
    pow2,
    pow2_exponent,
    row,
    tr,
)

_METHODS = ("cgs2", "mgs")


def _global_exponent(a):
    """(1, 1) exponent e with ``max|A| / 2**e <= 2`` (exact power-of-two scaling)."""
    return pow2_exponent(api.amax(amax_abs(a), axis=-2, keepdims=True))


def _gram_schmidt(rows, method):
    """Orthonormalize the rows of ``rows`` (c, m) in order.

    Returns ``(q_rows (c, m), r_t (c, c))`` with ``rows = r_t @ q_rows`` (r_t lower
    triangular: row j holds the coefficients of row j). ``cgs2``: classical
    Gram-Schmidt twice, each pass one matmul for the coefficients ``Q w`` and one fused
    matmul for ``w - Q^T h``. ``mgs``: modified Gram-Schmidt, one dot and one fused
    update per previous vector. Each vector is normalized by :func:`normalize`
    (overflow-free 2-norm); a dependent row gives a zero vector and a zero diagonal.
    """
    c, m = rows.shape
    qs, negs, rts = [], [], []
    for j in range(c):
        w = row(rows, j)
        h = None
        if j and method == "cgs2":
            qm, nq = cat(qs, -2), cat(negs, -2)
            h1 = mm(w, tr(qm))
            w = fused([(w, eye(m)), (h1, nq)])
            h2 = mm(w, tr(qm))
            w = fused([(w, eye(m)), (h2, nq)])
            h = h1 + h2
        elif j:
            hs = []
            for i in range(j):
                hi = dot(w, qs[i])
                w = fused([(w, eye(m)), (hi, negs[i])])
                hs.append(hi)
            h = cat(hs, -1)
        nrm, q = normalize(w)
        parts = [nrm] if h is None else [h, nrm]
        if j + 1 < c:
            parts.append(const(np.zeros((1, c - j - 1))))
        rts.append(cat(parts, -1))
        qs.append(q)
        negs.append(neg(q))
    return cat(qs, -2), cat(rts, -2)


def qr(a, method: str = "cgs2"):
    """Reduced QR factorization ``A = Q @ R`` of A (m x n, m >= n) by Gram-Schmidt.

    Method: ``method='cgs2'`` (default) is classical Gram-Schmidt with one
    reorthogonalization: the projection coefficients of a column are ONE matmul and the
    projected column ``a - Q h`` one fused matmul (float32 accumulator, one rounding),
    which keeps Q orthogonal to working precision independently of cond(A).
    ``method='mgs'`` is modified Gram-Schmidt with matmul dots (one dot and one fused
    update per previous column; its loss of orthogonality grows like u16 * cond(A)).
    Columns are read as rows of A^T (no width-offset slice). Range: A is scaled by an
    exact power of two to max|A| <= 2 first, so column norms are at most 2 sqrt(m);
    every column is normalized through an overflow-free 2-norm; R is scaled back
    exactly. R's diagonal is non-negative.

    Envelope: rank-deficient columns give a zero column of Q and a zero on R's diagonal.
    Returns ``(Q (m, n), R (n, n))``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> q, r = linalg.qr(af.input((4, 3)))
        >>> q.shape, r.shape
        ((4, 3), (3, 3))
    """
    if method not in _METHODS:
        raise OptionError(f"qr: method must be one of {_METHODS}, got {method!r}")
    a = matrix(a, "qr: a")
    if a.shape[0] < a.shape[1]:
        raise ShapeError(f"qr: needs m >= n (a tall or square matrix), got {a.shape}")
    e0 = _global_exponent(a)
    qrows, rt = _gram_schmidt(tr(a * pow2(neg(e0))), method)
    return tr(qrows), tr(rt) * pow2(e0)


def _start(count, n, seed):
    """A fixed, data-independent orthonormal start block (count, n) from ``seed``."""
    g = np.random.default_rng(seed).standard_normal((n, count))
    q, _ = np.linalg.qr(g)
    return const(q.T)


def _orth(x, count):
    if count == 1:
        nrm, unit = normalize(x)
        return unit, nrm
    q, rt = _gram_schmidt(x, "cgs2")
    return q, tr(mm(rt * eye(count), const(np.ones((count, 1)))))


def dominant_svd(a, k: int = 1, iters: int = 30, seed: int = 0):
    """The k largest singular triplets of A (m x n) by normalized power iteration.

    Method: subspace (for k = 1, plain power) iteration on A^T A, ``iters`` fixed steps
    from a fixed orthonormal start block (``seed``). Range: A is scaled by an exact
    power of two to max|A| <= 2, and the block is **normalized between the A and the
    A^T application** (U = orth(A V), then V = orth(A^T U)): A^T (A v) alone grows like
    sigma**2 and overflows fp16 once sigma > ~250 (a test shows it), while each
    normalized product stays below ``||A|| <= 2 sqrt(m n)``. Orthonormalization is
    :func:`qr`'s CGS2 (a plain normalization for k = 1); the singular values are the
    norms of the final ``A^T U`` rows after orthogonalization, scaled back exactly.

    Accuracy: sigma_1 to about 1e-3 when the gap makes ``(sigma_2/sigma_1)**(2 iters)``
    negligible; trailing values of a block converge like ``(sigma_{k+1}/sigma_i)**(2
    iters)`` and carry fp16 rounding relative to sigma_1 (extra A^T A steps crush small
    values toward the dominant one, as the spec notes). A start block orthogonal to the
    dominant subspace (measure zero) would not converge.

    Returns ``(U (m, k), s (k,), Vt (k, n))`` with ``A ~ U diag(s) Vt``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> u, s, vt = linalg.dominant_svd(np.diag([3.0, 1.0]), iters=8)
        >>> float(af.compile(s)().round(3)[0])
        3.0
    """
    a = matrix(a, "dominant_svd: a")
    m, n = a.shape
    iters = count(iters, "iters", "dominant_svd")
    k = count(k, "k", "dominant_svd")
    if k > min(m, n):
        raise OptionError(f"dominant_svd: k={k} exceeds min(m, n) = {min(m, n)}")
    e0 = _global_exponent(a)
    a0 = a * pow2(neg(e0))
    a0t = tr(a0)
    v = _start(k, n, seed)
    u = svals = None
    for _ in range(iters):
        u, _ = _orth(mm(v, a0t), k)
        v, svals = _orth(mm(u, a0), k)
    return tr(u), api.reshape(svals * pow2(e0), (k,)), v


def power_iteration(a, iters: int = 30, seed: int = 0):
    """Dominant eigenpair of a square A (symmetric, or with a real dominant eigenvalue).

    Method: ``iters`` fixed steps ``v <- A v / ||A v||`` from a fixed unit start
    (``seed``) on A scaled by an exact power of two (max|A| <= 2); every product is
    normalized before A is applied again (overflow-free 2-norm), so nothing grows like
    lambda**t. The eigenvalue is the Rayleigh quotient ``(v . A v) / (v . v)`` (two
    wide-accumulator dots), scaled back exactly. Convergence like ``|lambda_2 / lambda_1|**iters``.

    Returns ``(lambda (), v (n,))``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics import linalg
        >>> lam, v = linalg.power_iteration(np.diag([4.0, 1.0]), iters=12)
        >>> float(af.compile(lam)())
        4.0
    """
    a = matrix(a, "power_iteration: a", square=True)
    n = a.shape[0]
    iters = count(iters, "iters", "power_iteration")
    e0 = _global_exponent(a)
    at = tr(a * pow2(neg(e0)))
    v = _start(1, n, seed)
    for _ in range(iters):
        _, v = normalize(mm(v, at))
    lam = dot(v, mm(v, at)) / dot(v, v) * pow2(e0)
    return api.reshape(lam, ()), api.reshape(v, (n,))
