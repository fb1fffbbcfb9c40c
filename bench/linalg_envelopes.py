"""Accuracy envelopes of aneforge.numerics.linalg on the emulator, against NumPy/LAPACK.

Matrices of controlled condition number, seeded: ``A = U diag(s) V^T`` with Haar-random
orthogonal U, V (QR of Gaussian matrices) and ``s = geomspace(1, 1/cond, n)``; SPD
matrices are ``V diag(s) V^T``; least-squares problems are (3n x n) with
``b = A x + e``, e orthogonal to range(A) and ``||e|| = 0.1 ||A x||``. Each problem has
two right-hand sides from ``x ~ N(0, 1)``. Inputs are rounded to fp16 first and the
reference is LAPACK (``numpy.linalg``) in float64 on those fp16 values, so the error is
the fp16 engine's arithmetic plus the method's truncation, never the input rounding.

Error = ``||x - x_ref|| / ||x_ref||`` per right-hand side; the table gives the median
over ``trials`` matrices x 2 right-hand sides, with the worst case in parentheses.
Cholesky: ``||L L^T - A|| / ||A||`` (Frobenius); QR: ``||Q^T Q - I||_2``
(orthogonality) and ``||Q R - A|| / ||A||``; dominant_svd / power_iteration: relative
error of sigma_1 / lambda_1 (for sigma_1 = 1000 too, where an unnormalized A^T A v
overflows fp16). Plus the floor: the error of fp16(x_ref) itself.
The emulator runs with one numba thread (the matmuls here are tiny; results are
bit-identical for any thread count).

    python bench/linalg_envelopes.py [--n 16] [--trials 3]

Prints a markdown table (docs/numerics.md, "Linear algebra", is generated from it) and
ends with machine-readable lines:
    RESULT linalg <method> cond=<c> median=<e> max=<e>
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.numerics import linalg as la
from aneforge.numerics.linalg.problems import as_fp16_values, conditioned_problem

CONDS = (1e1, 1e2, 1e3)
LS_NOISE = 0.1


def problem(kind, n, cond, seed, sigma1=1.0):
    """(A, b, x_ref) of one seeded problem; A and b already fp16 values."""
    return conditioned_problem(kind, n, cond, seed, sigma1=sigma1, noise=LS_NOISE)


def rel_err(x, ref):
    return np.linalg.norm(x - ref, axis=0) / np.linalg.norm(ref, axis=0)


def solver_rows(n):
    """(label, problem kind, builder(A, b) -> x) of every solver configuration."""
    fp = "fp16"
    return [
        ("solve, no refinement", "gen", lambda a, b: la.solve(a, b, refine=0)),
        ("solve, 2 refinements, fp16 residual", "gen", lambda a, b: la.solve(a, b, 2, fp)),
        ("solve, 2 refinements, exact residual", "gen", lambda a, b: la.solve(a, b, 2)),
        ("least_squares, no refinement", "ls", lambda a, b: la.least_squares(a, b, 0)),
        ("least_squares, 2 ref., fp16 residual", "ls",
         lambda a, b: la.least_squares(a, b, 2, fp)),
        ("least_squares, 2 ref., exact residual", "ls", lambda a, b: la.least_squares(a, b, 2)),
        ("conjugate_gradient (2n), fp16 residual", "spd",
         lambda a, b: la.conjugate_gradient(a, b, residual=fp)),
        ("conjugate_gradient (2n), exact residual", "spd", la.conjugate_gradient),
        ("gmres (restart n, 3 cycles), fp16 residual", "gen",
         lambda a, b: la.gmres(a, b, restart=n, residual=fp)),
        ("gmres (restart n, 3 cycles), exact residual", "gen",
         lambda a, b: la.gmres(a, b, restart=n)),
        ("lsqr (n steps, 2 cycles), fp16 residual", "ls",
         lambda a, b: la.lsqr(a, b, residual=fp)),
        ("lsqr (n steps, 2 cycles), exact residual", "ls", la.lsqr),
        ("lsqr, 1 cycle, no reorthogonalization", "ls",
         lambda a, b: la.lsqr(a, b, cycles=1, reorth=False)),
    ]  # fmt: skip


def measure_floor(n, trials, results):
    """The error of fp16(x_ref) itself: no solution stored in fp16 can do better."""
    for c, cond in enumerate(CONDS):
        errs = []
        for t in range(trials):
            _, _, ref = problem("gen", n, cond, seed=1000 * t + c)
            errs.extend(rel_err(as_fp16_values(ref), ref))
        results.append(("x_ref rounded to fp16 (the floor)", cond, errs))


def measure_solvers(n, trials, results):
    for label, kind, build in solver_rows(n):
        m = 3 * n if kind == "ls" else n
        prog = af.compile(build(af.input((m, n)), af.input((m, 2))))
        for c, cond in enumerate(CONDS):
            errs = []
            for t in range(trials):
                a, b, ref = problem(kind, n, cond, seed=1000 * t + c)
                errs.extend(rel_err(prog(a, b).astype(np.float64), ref))
            results.append((label, cond, errs))


def measure_factorizations(n, trials, results):
    ai, li = af.input((n, n)), af.input((3 * n, n))
    chol = af.compile(la.cholesky(ai))
    qr2, mgs = af.compile(list(la.qr(li))), af.compile(list(la.qr(li, method="mgs")))
    svd = af.compile(la.dominant_svd(li, iters=30)[1])
    power = af.compile(la.power_iteration(ai, iters=40)[0])
    for c, cond in enumerate(CONDS):
        rows = {k: [] for k in ("chol", "qr2o", "qr2b", "mgso", "svd", "svdbig", "pow")}
        for t in range(trials):
            seed = 1000 * t + c
            a, _, _ = problem("spd", n, cond, seed)
            low = chol(a).astype(np.float64)
            rows["chol"].append(np.linalg.norm(low @ low.T - a) / np.linalg.norm(a))
            g, _, _ = problem("ls", n, cond, seed)
            q, r = (v.astype(np.float64) for v in qr2(g))
            rows["qr2o"].append(np.linalg.norm(q.T @ q - np.eye(n), 2))
            rows["qr2b"].append(np.linalg.norm(q @ r - g) / np.linalg.norm(g))
            q, _ = (v.astype(np.float64) for v in mgs(g))
            rows["mgso"].append(np.linalg.norm(q.T @ q - np.eye(n), 2))
            for key, sig in (("svd", 1.0), ("svdbig", 1000.0)):
                g, _, _ = problem("ls", n, cond, seed, sigma1=sig)
                exact = np.linalg.svd(g, compute_uv=False)[0]
                rows[key].append(abs(float(svd(g)[0]) - exact) / exact)
            a, _, _ = problem("spd", n, cond, seed)
            lam = np.linalg.eigvalsh(a)[-1]
            rows["pow"].append(abs(float(power(a)) - lam) / lam)
        labels = {
            "chol": "cholesky, backward error norm(LL^T - A) / norm(A)",
            "qr2o": "qr (cgs2), orthogonality norm(Q^T Q - I)",
            "qr2b": "qr (cgs2), backward error norm(QR - A) / norm(A)",
            "mgso": "qr (mgs), orthogonality norm(Q^T Q - I)",
            "svd": "dominant_svd sigma_1 (30 steps)",
            "svdbig": "dominant_svd sigma_1 = 1000 (30 steps)",
            "pow": "power_iteration lambda_1 (40 steps)",
        }
        for key, errs in rows.items():
            results.append((labels[key], cond, errs))


def naive_overflow():
    """A^T (A v) without normalization for sigma_1 = 1000: does it overflow fp16?"""
    g, _, _ = problem("ls", 16, 10.0, seed=7, sigma1=1000.0)
    a = af.input(g.shape)
    v = af.input((1, g.shape[1]))
    out = af.compile(af.bmm(af.bmm(v, af.transpose(a)), a))(g, np.full((1, g.shape[1]), 0.25))
    return bool(np.isinf(out).any())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=16, help="unknowns per problem (16)")
    parser.add_argument("--trials", type=int, default=3, help="matrices per cond (3)")
    args = parser.parse_args(argv)
    try:
        import numba

        numba.set_num_threads(1)
    except (ImportError, ValueError):
        pass
    warnings.simplefilter("ignore", af.DispatchFloorWarning)
    start = time.time()
    results: list = []
    measure_floor(args.n, args.trials, results)
    measure_solvers(args.n, args.trials, results)
    measure_factorizations(args.n, args.trials, results)
    print(f"n = {args.n}, {args.trials} matrices x 2 right-hand sides per cell; "
          "median (worst) relative error\n")  # fmt: skip
    print("| method | " + " | ".join(f"cond 1e{int(np.log10(c))}" for c in CONDS) + " |")
    print("|---|" + "---|" * len(CONDS))
    table: dict = {}
    for label, cond, errs in results:
        table.setdefault(label, {})[cond] = errs
    for label, cells in table.items():
        cols = [f"{np.median(cells[c]):.1e} ({np.max(cells[c]):.1e})" for c in CONDS]
        print(f"| {label} | " + " | ".join(cols) + " |")
    print(f"\nunnormalized A^T (A v) at sigma_1 = 1000 overflows fp16: {naive_overflow()}")
    print(f"({time.time() - start:.0f} s)")
    for label, cells in table.items():
        key = "_".join("".join(ch if ch.isalnum() else " " for ch in label).split())
        for c in CONDS:
            errs = np.asarray(cells[c], dtype=np.float64)
            print(
                f"RESULT linalg {key} cond={c:.0e} median={np.median(errs):.3g} "
                f"max={np.max(errs):.3g}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
