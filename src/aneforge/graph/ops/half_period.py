"""The half-period forms of sin and cos: the lowering compile applies below their floor.

``sin`` and ``cos`` run natively from capability family 4 (A15); on families 2 and 3
compile replaces them by these forms (their records' ``below_floor``), built only from
fused ops every family has (mul, add/sub, round, floor, select)::

    n = round(x * fp16(1/pi))                          # nearest multiple of pi
    r = (x - n * PI_HI) - n * PI_LO                     # Cody-Waite, r in [-pi/2, pi/2]
    odd = n - 2 * floor(n * 0.5)                        # parity of n (exact, |n| <= 2048)
    sin: p = r * S(r*r)     cos: p = C(r*r)             # Horner in fp16
    y = select(odd, -p, p)                              # sin/cos(r + n*pi) = (-1)^n ...

``PI_HI`` is pi truncated to 5 significant bits (3.125), so ``n * PI_HI`` and the first
subtraction are exact for ``|n| <= 64`` (``|x|`` up to about 200); ``PI_LO`` is the rest.
``S`` (degree 3 in r^2, an odd degree-7 form) and ``C`` (degree 4 in r^2) are fitted
at import by least squares in float64 on Chebyshev nodes of [0, pi/2 + 0.01] (the margin
covers the rounding of ``x/pi``). Accuracy: about 1e-3 absolute for ``|x| <= 200``
(fp16-rounding-limited, as the spec says); beyond, ``x * (1/pi)`` and ``n * PI_HI``
round and the error grows with ``|x|``.

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.ops.half_period import half_period
    >>> sorted({n.op for n in af.compile(half_period(af.input((4,)), "sin")).compute_nodes})
    ['add', 'floor', 'mul', 'neg', 'round', 'select', 'sub']
"""

from __future__ import annotations

import math

import numpy as np

from ..facts import Decomposition
from ..rewrite import LOSSY
from ..tensor import Tensor, make

PI_HI = math.floor(math.pi * 8) / 8  # 3.125: 5 significant bits
PI_LO = math.pi - PI_HI


def _fit(powers: tuple[int, ...], fn, nodes: int = 64) -> tuple[float, ...]:
    """Least-squares coefficients of sum c_i r^p_i ~ fn(r) on [0, pi/2 + 0.01]."""
    hi = math.pi / 2 + 0.01
    k = np.arange(nodes)
    r = hi * (1 + np.cos((2 * k + 1) * np.pi / (2 * nodes))) / 2  # Chebyshev nodes
    basis = np.stack([r**p for p in powers], axis=1)
    coef, *_ = np.linalg.lstsq(basis, fn(r), rcond=None)
    return tuple(float(c) for c in coef)


#: sin(r) ~ r * (S0 + S1 r^2 + S2 r^4 + S3 r^6); cos(r) ~ C0 + C1 r^2 + ... + C4 r^8.
SIN_COEFFS = _fit((1, 3, 5, 7), np.sin)
COS_COEFFS = _fit((0, 2, 4, 6, 8), np.cos)


def _horner(r2: Tensor, coeffs: tuple[float, ...]) -> Tensor:
    p = r2 * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        p = p * r2 + c
    return p


def half_period(x: Tensor, fn: str) -> Tensor:
    """``sin(x)`` or ``cos(x)`` (``fn``) as the half-period polynomial form."""
    n = make("round", x * (1.0 / math.pi))
    r = (x - n * PI_HI) - n * PI_LO
    odd = n - make("floor", n * 0.5) * 2.0
    r2 = r * r
    p = r * _horner(r2, SIN_COEFFS) if fn == "sin" else _horner(r2, COS_COEFFS)
    return make("select", odd, -p, p)


_EVIDENCE = "about 1e-3 absolute for |x| <= 200 (tests/compiler/test_preflight.py)"


def _lowering(fn: str) -> Decomposition:
    def build(node):
        return half_period(node.srcs[0], fn)

    build.__doc__ = f"{fn}(x) as the half-period polynomial form."
    return Decomposition(build, "half-period polynomial", LOSSY, _EVIDENCE)


#: The ``below_floor`` lowerings of the sin and cos records.
SIN_LOWERING = _lowering("sin")
COS_LOWERING = _lowering("cos")
