"""fp16 linear algebra as graph builders (docs/numerics.md, "Linear algebra").

Every function takes tensors (``af.input``) or arrays (which become fp16 weights) and
returns tensors, so each solver compiles, runs on the emulator, is estimated per target
and exports like any graph. Three rules hold throughout:

- every dot product, norm and accumulation is a matmul (``(u * v) @ ones``, or one
  fused ``[b, x] @ [I; -A^T]`` for a residual), never ``reduce_sum``;
- iteration and refinement counts are fixed arguments (no convergence tests); pivoting
  is expressed as one-hot matrices built from amax / equal / cumsum, not as branches;
- intermediates stay inside the fp16 range by construction: exact power-of-two
  equilibration and Jacobi scaling, normalization of every Krylov / power vector
  between applications of A and A^T (each docstring says how).

Residuals ``b - A x`` default to ``residual="exact"``: operands split by Veltkamp's
method so every product is exact in fp16 and the whole residual is one float32 sum
(:class:`~aneforge.numerics.linalg._core.ExactResidual`); ``residual="fp16"`` keeps the
spec's plain form, whose rounded products are the cancellation wall. Failures are
finite: ``return_residual=True`` returns a per-right-hand-side residual that reports them.

Builders: :func:`solve` (LU + iterative refinement), :func:`lu`, :func:`cholesky`,
:func:`solve_triangular`, :func:`least_squares` (normal equations + refinement),
:func:`conjugate_gradient`, :func:`gmres`, :func:`lsqr`, :func:`qr`,
:func:`dominant_svd`, :func:`power_iteration`. Measured accuracy envelopes:
``bench/linalg_envelopes.py`` and docs/numerics.md, "Linear algebra".

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics import linalg
    >>> a = np.array([[4.0, 1.0], [1.0, 3.0]])
    >>> x = linalg.conjugate_gradient(a, af.input((2,)), iters=4)
    >>> af.compile(x)([1.0, 2.0]).round(3)
    array([0.091, 0.636], dtype=float32)
"""

from .direct import cholesky, least_squares, lu, solve, solve_triangular
from .krylov import conjugate_gradient, gmres, lsqr
from .problems import conditioned_problem
from .spectral import dominant_svd, power_iteration, qr

__all__ = [
    "cholesky",
    "conditioned_problem",
    "conjugate_gradient",
    "dominant_svd",
    "gmres",
    "least_squares",
    "lsqr",
    "lu",
    "power_iteration",
    "qr",
    "solve",
    "solve_triangular",
]
