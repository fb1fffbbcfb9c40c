"""Seeded test problems with a chosen condition number, for measuring solver envelopes.

Example:
    >>> from aneforge.numerics.linalg.problems import conditioned_problem
    >>> a, b, x = conditioned_problem("spd", 8, cond=100.0, seed=0)
    >>> a.shape, b.shape, x.shape
    ((8, 8), (8, 2), (8, 2))
"""

from __future__ import annotations

import numpy as np

from ...graph.fp16 import fp16_values

KINDS = ("gen", "spd", "ls")


as_fp16_values = fp16_values  # round to fp16 and back to float64 (the input cast)


def orthogonal(rng, m: int, n: int) -> np.ndarray:
    """An m x n matrix with orthonormal columns (Haar-distributed)."""
    q, r = np.linalg.qr(rng.standard_normal((m, n)))
    return q * np.sign(np.diag(r))


def conditioned_problem(kind, n, cond, seed, sigma1=1.0, noise=0.1, rhs=2):
    """(A, B, X_ref) of one seeded problem; A and B hold fp16 values (float64 arrays).

    ``kind``: 'gen' (square, A = U diag(s) V^T), 'spd' (A = V diag(s) V^T) or 'ls' (a
    3n x n least-squares problem whose right-hand sides carry a ``noise`` share outside
    the range of A). The singular values run geometrically from ``sigma1`` down to
    ``sigma1 / cond``. X_ref is LAPACK's answer (solve or lstsq) for the fp16 A and B.
    """
    if kind not in KINDS:
        raise ValueError(f"conditioned_problem: kind must be one of {KINDS}, got {kind!r}")
    rng = np.random.default_rng(seed)
    s = sigma1 * np.geomspace(1.0, 1.0 / cond, n)
    v = orthogonal(rng, n, n)
    if kind == "spd":
        a = as_fp16_values((v * s) @ v.T)
    else:
        m = 3 * n if kind == "ls" else n
        a = as_fp16_values((orthogonal(rng, m, n) * s) @ v.T)
    b = a @ rng.standard_normal((n, rhs))
    if kind == "ls":
        e = rng.standard_normal(b.shape)
        e -= a @ np.linalg.lstsq(a, e, rcond=None)[0]
        b = b + noise * e * np.linalg.norm(b, axis=0) / np.linalg.norm(e, axis=0)
    b = as_fp16_values(b)
    ref = np.linalg.lstsq(a, b, rcond=None)[0] if kind == "ls" else np.linalg.solve(a, b)
    return a, b, ref
