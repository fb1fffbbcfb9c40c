"""``af.special``: special functions as fp16 graphs (docs/numerics.md, "Special functions").

Every function here builds a graph from ordinary fused fp16 ops (mul, add/sub, clip,
abs, comparisons, select, round/floor, and the native unaries exp, log, sqrt/rsqrt,
div), so it compiles, emulates bit-faithfully, estimates per target and exports like
any graph. None uses the engine's own ``erf``/``sin``/``cos`` node. How
(docs/numerics.md, "Special functions"):

- Approximations are long chains of fp16 mul/add: Horner evaluation of minimax
  polynomials. Every coefficient comes from ``scripts/fit_special.py`` (a Remez exchange
  in float64, then rounded to fp16 one coefficient at a time, each rounding absorbed by
  refitting the lower ones, or plainly where that re-checks better) through
  ``aneforge/data/special_coefficients.json``; none is typed in here.
  :func:`coefficients` returns them.
- Only fixed, smooth range reduction: every branch is computed for every element on a
  clipped argument and :func:`~aneforge.select` picks one; no step count depends on the
  data.
- Every polynomial variable is scaled into about [-1, 1] by an exact power of two or a
  bounded map (``(x/2)^2``, ``(x - 4.5)/4``, ``1/(1 + p x)``), so every Horner partial
  stays within a small multiple of the function's own size (at most 11.3, I0's at
  |x| = 4): no large alternating terms that cancel. Each branch is fed a clipped
  argument, so no intermediate overflows; each docstring gives its bounds. The smallest
  coefficients (down to 2.3e-5) are fp16 subnormals; they multiply powers <= 1 and cost
  at most 2^-25 absolute.
- Where the true result leaves fp16 (gamma past x = 9.22, I0 past |x| = 13.29), that is
  a wall, not a coefficient problem: the value is +inf, set explicitly, and
  ``return_wall=True`` also returns the 0/1 mask of the elements past it.

Constants. Numerics (``docs/sources.md``) says the engine has no scalar-add op and adds
a constant c as ``exp(0) * c`` (a ones tensor scaled by c). aneforge's ``add`` takes a
weight operand (a broadcast fp16 constant), so by default (``constants="weight"``) a
constant is that scalar weight operand, as the rest of aneforge (and the preflight's
sin/cos lowering) does: fewer ops, and no NaN for an infinite input. ``constants="ones"``
builds the spec's form instead: one ``ones = exp(x * 0)`` per call, and every added,
subtracted or selected constant c becomes ``ones * c``. Both give the same bits on finite
inputs (``fp16(1 * fp16(c)) == fp16(c)``; the tests check every function); with "ones"
an infinite or NaN input gives NaN (``inf * 0``). Multiplications by constants and
comparisons keep scalar weights in both modes.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics import special
    >>> x = af.input((5,), name="x")
    >>> prog = af.compile([special.erf(x), special.erfc(x)])
    >>> e, ec = prog(np.array([-1.0, 0.0, 0.5, 2.5, 3.0]))
    >>> e.tolist()[:2], float(e[1]), bool(abs(ec[-1] / 2.209e-5 - 1) < 0.02)
    ([-0.84228515625, 0.0], 0.0, True)
"""

from __future__ import annotations

import math

import numpy as np

from ..data import load
from ..errors import OptionError, ShapeError
from ..graph import api
from ..graph.tensor import Tensor, as_tensor, weight

__all__ = [
    "GAMMA_X_MAX",
    "I0_X_MAX",
    "ERFC_X_MAX",
    "PI_HI",
    "PI_LO",
    "coefficients",
    "cos",
    "cumsum",
    "erf",
    "erfc",
    "exp_wide",
    "expm1",
    "gamma",
    "half_period",
    "i0",
    "lgamma",
    "log1p",
    "log_wide",
    "ones_like",
    "sin",
]

_DATA = load("special_coefficients.json")
_COEF = {name: tuple(rec["coefficients"]) for name, rec in _DATA["fits"].items()}
ERFC_P = float(_DATA["fits"]["erfc"]["p"])  # t = 1 / (1 + ERFC_P x), fitted
#: The largest fp16 x whose gamma(x) is finite in fp16 (gamma(9.21875) = 64580).
GAMMA_X_MAX = float(_DATA["walls"]["gamma_x_max"])
#: The largest fp16 |x| whose I0(x) is finite in fp16 (I0(13.289) = 65280).
I0_X_MAX = float(_DATA["walls"]["i0_x_max"])
#: erfc's argument clip: erfc(4.5) = 2e-10 rounds to 0 in fp16, as does all beyond.
ERFC_X_MAX = float(_DATA["walls"]["erfc_x_max"])
#: pi split for the Cody-Waite reduction: PI_HI = 3.125 has 5 significant bits, so
#: n * PI_HI and x - n * PI_HI are exact for |n| <= 64; PI_LO is the rest.
PI_HI = math.floor(math.pi * 8) / 8
PI_LO = math.pi - PI_HI
_CONSTANT_MODES = ("weight", "ones")


def coefficients(name: str) -> tuple[float, ...]:
    """The fp16 coefficients (ascending powers) of fit ``name`` from the JSON file.

    Names: erf, erfc, sin, cos, lgamma, gamma, i0_small, i0_large, expm1, log1p.

    Example:
        >>> from aneforge.numerics.special import coefficients
        >>> coefficients("sin")[0]
        1.0
    """
    try:
        return _COEF[name]
    except KeyError:
        msg = f"special.coefficients: no fit {name!r}; have {sorted(_COEF)}"
        raise OptionError(msg) from None


# ---- building blocks --------------------------------------------------------------------


def ones_like(x) -> Tensor:
    """``exp(x * 0)``: a ones tensor of x's shape (NaN where x is inf or NaN).

    The spec's way to add a constant without a scalar-add op: ``t + ones_like(x) * c``.
    ``exp`` is a native unary on every ANE family.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import ones_like
        >>> x = af.input((3,))
        >>> af.compile(ones_like(x))(np.array([-7.0, 0.0, 300.0])).tolist()
        [1.0, 1.0, 1.0]
    """
    return api.exp(as_tensor(x) * 0.0)


class _Consts:
    """Constants for added, subtracted and selected values (the module's "Constants")."""

    def __init__(self, x: Tensor, mode: str):
        if mode not in _CONSTANT_MODES:
            raise OptionError(f"constants: expected one of {_CONSTANT_MODES}, got {mode!r}")
        self.x, self.mode, self._ones = x, mode, None

    def __call__(self, c: float):
        if self.mode == "weight":
            return float(c)
        if self._ones is None:
            self._ones = ones_like(self.x)
        return self._ones * float(c)


def _horner(v: Tensor, coeffs, k: _Consts) -> Tensor:
    """sum c_j v^j by Horner: p = c_n v + c_(n-1); p = p v + c_j; two rounded ops a step."""
    p = v * coeffs[-1] + k(coeffs[-2])
    for c in reversed(coeffs[:-2]):
        p = p * v + k(c)
    return p


def _start(x, constants: str) -> tuple[Tensor, _Consts]:
    x = as_tensor(x, "special input")
    return x, _Consts(x, constants)


def _past_wall(y: Tensor, over: Tensor, k: _Consts, return_wall: bool):
    y = api.select(over, k(math.inf), y)
    return (y, over) if return_wall else y


# ---- erf / erfc ---------------------------------------------------------------------------


def _erfc_positive(a: Tensor, k: _Consts) -> Tensor:
    """erfc(a) for a in [0, ERFC_X_MAX]: t P(t) exp(-a^2), t = 1/(1 + p a) (A&S 7.1.26)."""
    t = api.inverse(a * ERFC_P + k(1.0))
    e = api.exp(-(a * a))
    return (t * _horner(t, coefficients("erfc"), k)) * e


def erfc(x, *, constants: str = "weight") -> Tensor:
    """Complementary error function, evaluated directly (never as ``1 - erf``).

    ``a = clip(|x|, 0, 4.5)``; ``erfc(a) = t P(t) exp(-a^2)`` with ``t = 1/(1 + p a)``:
    the A&S 7.1.26 form with ``p`` and the degree-4 ``P`` fitted (relative minimax).
    ``erfc(x) = 2 - erfc(|x|)`` for ``x < 0``. Direct evaluation keeps the small tail:
    erfc(3) = 2.2e-5 comes out within 0.1% (measured), where ``1 - erf(3)`` rounds to 0 in fp16.

    Range: ``t`` is in (0, 1], ``P(t)`` and ``exp(-a^2)`` in (0, 1], ``a^2 <= 20.25``;
    nothing can exceed 2. Past 4.5 the result (< 2e-10) is 0 (or 2 for x < -4.5), as
    the exact value rounds in fp16. Values below 6e-5 are fp16 subnormals (at erfc(3)
    one subnormal step is 0.27% of the value).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import erfc
        >>> x = af.input((3,))
        >>> af.compile(erfc(x))(np.array([-1.0, 0.0, 1.0])).tolist()
        [1.8427734375, 1.0, 0.157470703125]
    """
    x, k = _start(x, constants)
    y = _erfc_positive(api.clip(api.abs(x), lo=0.0, hi=ERFC_X_MAX), k)
    return api.select(x < 0.0, k(2.0) - y, y)


def erf(x, *, constants: str = "weight") -> Tensor:
    """Error function: ``x + x * Q((x/2)^2)`` for ``|x| <= 2``, ``1 - erfc(|x|)`` beyond.

    Near 0 erf is small while erfc is near 1, so ``1 - erfc`` cancels exactly where erf
    is wanted; the direct form is a degree-5 minimax of ``erf(x)/x`` in ``x^2`` on
    [0, 2] (the fit is of ``erf(x)/x - 1``: the leading 1 is added exactly as ``x + x*Q``
    so the constant 2/sqrt(pi) is not rounded to fp16). Past 2 the roles swap: erfc is
    small there and ``1 - erfc(|x|)`` is accurate. Exactly odd: every step of both
    branches is symmetric in the sign of x, so ``erf(-x) == -erf(x)`` bit for bit and
    ``erf(0) == 0``.

    Range: the polynomial branch sees ``clip(x, -2, 2)`` (so ``(x/2)^2 <= 1`` and the
    Horner partials stay below 1.75), the erfc branch ``clip(|x|, 2, 4.5)`` (its largest
    intermediate is ``a^2 <= 20.25``).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import erf
        >>> x = af.input((4,))
        >>> af.compile(erf(x))(np.array([-0.001, 0.0, 0.001, 3.0])).tolist()
        [-0.0011281967163085938, 0.0, 0.0011281967163085938, 1.0]
    """
    x, k = _start(x, constants)
    xs = api.clip(x, lo=-2.0, hi=2.0)
    h = xs * 0.5  # exact
    small = xs + xs * _horner(h * h, coefficients("erf"), k)
    big = k(1.0) - _erfc_positive(api.clip(api.abs(x), lo=2.0, hi=ERFC_X_MAX), k)
    big = api.select(x < 0.0, -big, big)
    return api.select(api.abs(x) <= 2.0, small, big)


# ---- sin / cos ----------------------------------------------------------------------------


def half_period(x, fn: str, *, constants: str = "weight") -> Tensor:
    """``sin(x)`` or ``cos(x)`` (``fn``) as the half-period polynomial form.

    The shared helper for :func:`sin`, :func:`cos` and the preflight's lowering below
    A15 (mul, add/sub, round, floor and select only)::

        n = round(x * fp16(1/pi))                  # nearest multiple of pi
        r = (x - n * PI_HI) - n * PI_LO             # Cody-Waite, |r| <= pi/2 + 0.01
        odd = n - 2 * floor(n * 0.5)                # parity of n (exact, |n| <= 2048)
        sin: p = r * S(r^2)      cos: p = C(r^2)    # Horner, minimax on the half period
        y = select(odd, -p, p)                      # sin/cos(r + n pi) = (-1)^n sin/cos(r)

    On [-pi/2, pi/2] the polynomial terms stay O(1), so the error is fp16-rounding
    limited (about 1e-3); over a full period the alternating terms reach ~5 and cancel
    (a full-period degree-11 minimax measures 7x the error: bench/special_accuracy.py).
    ``S`` is an odd degree-7 form (relative minimax of sin(r)/r in r^2), ``C`` even
    degree 8 (absolute minimax).

    Range: ``|r| <= 1.58`` and ``|n * PI_HI| <= |x| + 2``, so nothing exceeds
    max(|x|, 2.5); accuracy holds for ``|x| <= 200`` (n * PI_HI exact) and decays past it.
    """
    if fn not in ("sin", "cos"):
        raise OptionError(f"half_period: fn must be 'sin' or 'cos', got {fn!r}")
    x, k = _start(x, constants)
    n = api.round(x * (1.0 / math.pi))
    r = (x - n * PI_HI) - n * PI_LO
    odd = n - api.floor(n * 0.5) * 2.0
    v = r * r
    p = (
        r * _horner(v, coefficients("sin"), k)
        if fn == "sin"
        else _horner(v, coefficients("cos"), k)
    )
    return api.select(odd, -p, p)


def sin(x, *, constants: str = "weight") -> Tensor:
    """Sine by the half-period minimax polynomial with fixed range reduction.

    See :func:`half_period` (method and range). Absolute error <= 2e-3 on [-pi, pi]
    (measured: docs/numerics.md, "Special functions"); runs on every family (no native
    trig, which needs A15).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import sin
        >>> x = af.input((3,))
        >>> got = af.compile(sin(x))(np.array([-3.0, 0.5, 100.0]))
        >>> bool(np.max(np.abs(got - np.sin([-3.0, 0.5, 100.0]))) < 2e-3)
        True
    """
    return half_period(x, "sin", constants=constants)


def cos(x, *, constants: str = "weight") -> Tensor:
    """Cosine by the half-period minimax polynomial with fixed range reduction.

    See :func:`half_period` (method and range). Absolute error <= 2e-3 on [-pi, pi].

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import cos
        >>> x = af.input((3,))
        >>> got = af.compile(cos(x))(np.array([-3.0, 0.5, 100.0]))
        >>> bool(np.max(np.abs(got - np.cos([-3.0, 0.5, 100.0]))) < 2e-3)
        True
    """
    return half_period(x, "cos", constants=constants)


# ---- lgamma / gamma -------------------------------------------------------------------------


def _lgamma_core(z: Tensor, k: _Consts) -> Tensor:
    """lgamma(z) for z in [1, 8], centered: ``((u + c0) + v * P1(v))``, u = z - 4.5, v = u/4.

    ``u + c0`` is exact in fp16 for fp16 z in [1, 8] (u's bits and c0's fit the result's
    ulp), so only the curved remainder ``v * P1(v)`` (|.| < 2.6) carries Horner rounding.
    """
    c = coefficients("lgamma")
    u = z - k(4.5)
    return (u + k(c[0])) + (u * 0.25) * _horner(u * 0.25, c[1:], k)


def lgamma(x, *, constants: str = "weight") -> Tensor:
    """log|gamma(x)| for x > 0, in the centered variable ``x - 4.5``.

    Three branches, each on a clipped argument, one chosen per element:

    - [1, 8]: a degree-10 minimax polynomial in ``v = (x - 4.5)/4`` (exact scaling):
      ``lgamma = ((x - 4.5) + c0) + v * P1(v)``. A raw Horner in x would run terms to
      ~1e7 with large alternating coefficients that cancel; centered, the terms stay
      small and the error is the final fp16 rounding (absolute <= 1e-2 on [1, 8]).
    - (0, 1): ``lgamma(x + 1) - log(x)`` (one fixed recurrence step).
    - (8, inf): Stirling, ``(x - 0.5)(log x - 1) + (log(2 pi) - 1)/2 + 1/(12 x)``.

    x = 0 gives +inf (the pole), x < 0 NaN (no reflection formula).

    Range: the polynomial sees ``clip(x, 1, 8)`` (|v| <= 0.875, every term < 9); the
    Stirling branch ``clip(x, 8, 65504)``, whose factors ``x - 0.5`` and ``log x - 1``
    are each below the result, so it overflows only where lgamma itself passes 65504
    (x > 8180; the emulator's first inf is at 8184, one fp16 step later).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import lgamma
        >>> x = af.input((4,))
        >>> got = af.compile(lgamma(x))(np.array([0.5, 1.0, 4.5, 20.0]))
        >>> bool(np.max(np.abs(got - [0.5723649, 0.0, 2.4537366, 39.3398842])) < 0.03)
        True
    """
    x, k = _start(x, constants)
    low_arg = api.select(x < 1.0, x + k(1.0), x)
    core = _lgamma_core(api.clip(low_arg, lo=1.0, hi=8.0), k)
    low = core - api.log(api.clip(x, hi=1.0))
    xs = api.clip(x, lo=8.0, hi=65504.0)
    big = (xs - k(0.5)) * (api.log(xs) - k(1.0))
    big = (big + k((math.log(2 * math.pi) - 1) / 2)) + (1.0 / 12.0) / xs
    return api.select(x < 1.0, low, api.select(x <= 8.0, core, big))


def gamma(x, *, return_wall: bool = False, constants: str = "weight"):
    """gamma(x) for x > 0 up to the fp16 wall, in the centered variable ``f - 1.5``.

    Fixed range reduction: ``f = x - floor(x) + 1`` in [1, 2) (exact) and
    ``gamma(f)`` as a degree-8 minimax polynomial in ``f - 1.5`` (relative); then the
    recurrence ``gamma(f + m) = gamma(f) f (f + 1) ... (f + m - 1)`` with m = floor(x) - 1
    as eight fixed multiplies, the j-th by ``select(m >= j, f + j - 1, 1)`` (always eight,
    whatever the data). For x in (0, 1): ``gamma(x + 1) / x``. x = 0 gives +inf (the
    pole), x < 0 NaN (no reflection formula).

    The wall: gamma(x) passes 65504 at x = 9.2266 (``GAMMA_X_MAX`` = 9.21875 is the last
    finite fp16 x; the spec's "x ~ 8" is where gamma leaves the thousands). It is a hard
    fp16 limit, reported, not overflowed silently: past it the value is set to +inf
    explicitly, and ``return_wall=True`` returns ``(y, over)`` with ``over`` 1.0 there,
    0.0 elsewhere.

    Range: gamma(f) is in [0.885, 1], every factor in [1, 10] and the partial products
    increase to the result, so no intermediate passes the result (below the wall every
    intermediate is finite).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import gamma
        >>> x = af.input((4,))
        >>> y, over = gamma(x, return_wall=True)
        >>> got, wall = af.compile([y, over])(np.array([0.5, 5.0, 9.0, 9.5]))
        >>> got.tolist()[1:], wall.tolist()
        ([24.0, 40320.0, inf], [0.0, 0.0, 0.0, 1.0])
    """
    x, k = _start(x, constants)
    fl = api.floor(x)
    f = (x - fl) + k(1.0)
    g = _horner(f - k(1.5), coefficients("gamma"), k)
    m = fl - k(1.0)
    y = g
    for j in range(1, 9):
        factor = f if j == 1 else f + k(j - 1)
        y = y * api.select(m >= float(j), factor, k(1.0))
    y = api.select(x < 1.0, g / x, y)
    y = api.select(x < 0.0, k(math.nan), y)
    return _past_wall(y, x > GAMMA_X_MAX, k, return_wall)


# ---- i0 -----------------------------------------------------------------------------------


def i0(x, *, return_wall: bool = False, constants: str = "weight"):
    """Modified Bessel function of the first kind, order 0, up to the fp16 wall.

    ``|x| <= 4``: a degree-8 minimax polynomial in ``(x/4)^2`` (exact scaling, A&S 9.8.1
    form). ``|x| > 4``: ``I0 = (e * (Q(4/|x|) / sqrt|x|)) * e`` with ``e = exp(|x|/2)`` and
    Q a degree-6 minimax of ``sqrt(x) exp(-x) I0(x)`` in ``4/x`` (A&S 9.8.2 form).

    The wall: I0 passes 65504 at |x| = 13.29 (``I0_X_MAX`` = 13.289 is the last finite
    fp16 |x|; the spec's "x ~ 12"): past it the value is set to +inf explicitly and
    ``return_wall=True`` returns ``(y, over)`` with ``over`` 1.0 there.

    Range: the polynomial sees ``clip(|x|, 0, 4)`` (variable <= 1, value <= 11.3); the
    asymptotic branch ``clip(|x|, 4, 16)``. Splitting ``exp(|x|)`` into two factors
    ``exp(|x|/2)`` keeps every intermediate below the result (``exp(|x|)`` alone would
    overflow at 11.09, before I0 does).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import i0
        >>> x = af.input((3,))
        >>> got = af.compile(i0(x))(np.array([0.0, -2.0, 14.0]))
        >>> got.tolist()
        [1.0, 2.279296875, inf]
    """
    x, k = _start(x, constants)
    a = api.abs(x)
    h = api.clip(a, lo=0.0, hi=4.0) * 0.25
    small = _horner(h * h, coefficients("i0_small"), k)
    al = api.clip(a, lo=4.0, hi=16.0)
    q = _horner(4.0 / al, coefficients("i0_large"), k)
    e = api.exp(al * 0.5)
    big = (e * (q * api.rsqrt(al))) * e
    y = api.select(a <= 4.0, small, big)
    return _past_wall(y, a > I0_X_MAX, k, return_wall)


# ---- expm1 / log1p ------------------------------------------------------------------------


def expm1(x, *, constants: str = "weight") -> Tensor:
    """``exp(x) - 1`` without the cancellation near 0.

    ``|x| <= 1``: ``x * P(x)``, P a degree-7 relative minimax of ``expm1(x)/x``; beyond,
    ``exp(x) - 1`` (no cancellation there: the relative error stays below 6e-4).

    Range: the polynomial sees ``clip(x, -1, 1)`` (|P| <= 1.72); the native branch
    overflows to +inf exactly where expm1 itself passes 65504 (x > 11.09).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import expm1
        >>> x = af.input((3,))
        >>> af.compile(expm1(x))(np.array([1e-4, 0.0, 2.0])).tolist()
        [0.00010001659393310547, 0.0, 6.390625]
    """
    x, k = _start(x, constants)
    xs = api.clip(x, lo=-1.0, hi=1.0)
    small = xs * _horner(xs, coefficients("expm1"), k)
    return api.select(api.abs(x) <= 1.0, small, api.exp(x) - k(1.0))


def log1p(x, *, constants: str = "weight") -> Tensor:
    """``log(1 + x)`` without the rounding of ``1 + x`` near 0.

    ``-0.5 <= x <= 1``: ``x * P(x)``, P a degree-10 relative minimax of ``log1p(x)/x``;
    beyond, ``log(x + 1)`` (for x < -0.5 the sum is exact; for x > 1 its rounding costs
    at most ~7e-4 relative). x = -1 gives -inf, x < -1 NaN.

    Range: the polynomial sees ``clip(x, -0.5, 1)`` (|P| <= 1.39); ``x + 1`` only
    overflows for x >= 65504, where it is rounded to the same inf as the input.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import log1p
        >>> x = af.input((3,))
        >>> af.compile(log1p(x))(np.array([1e-4, 0.0, -1.0])).tolist()
        [0.00010001659393310547, 0.0, -inf]
    """
    x, k = _start(x, constants)
    xs = api.clip(x, lo=-0.5, hi=1.0)
    small = xs * _horner(xs, coefficients("log1p"), k)
    big = api.log(x + k(1.0))
    return api.select(x < -0.5, big, api.select(x > 1.0, big, small))


# ---- exp_wide / log_wide (recipes) --------------------------------------------------------


def _check_steps(steps: int, what: str) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 8:
        raise OptionError(f"{what}: steps must be an integer in [0, 8], got {steps!r}")
    return steps


def exp_wide(x, steps: int = 2) -> Tensor:
    """A range-reduction recipe for exp: ``exp(x / 2^steps)`` squared ``steps`` times.

    A documented recipe, **not** a better exp: the reduced argument is small, but every
    squaring doubles the relative error carried so far and adds a rounding, so the error
    grows about as ``2^steps`` fp16 roundings, while the native ``exp`` is rounded once
    (measured in bench/special_accuracy.py: worse than native for every steps >= 1).

    Range: ``x * 2^-steps`` is exact (down to the subnormals) and the partial squares
    increase (or decrease) monotonically to the result, so an intermediate overflows
    only where exp(x) does.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import exp_wide
        >>> x = af.input((2,))
        >>> af.compile(exp_wide(x, 2))(np.array([0.0, 1.0])).tolist()
        [1.0, 2.720703125]
    """
    steps = _check_steps(steps, "exp_wide")
    y = api.exp(as_tensor(x, "exp_wide input") * (0.5**steps))
    for _ in range(steps):
        y = y * y
    return y


def log_wide(x, steps: int = 2) -> Tensor:
    """A range-reduction recipe for log: ``2^steps * log(x^(1/2^steps))`` by ``steps``
    square roots.

    A documented recipe, **not** a better log: each sqrt rounds (relative 2^-12), that
    becomes an absolute error in the log of the root, and the final ``* 2^steps``
    multiplies it; near x = 1 the native ``log`` is far better (measured in
    bench/special_accuracy.py).

    Range: square roots move every positive value toward 1, so nothing grows; x = 0
    gives -inf and x < 0 NaN, as log.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import log_wide
        >>> x = af.input((2,))
        >>> af.compile(log_wide(x, 2))(np.array([1.0, 100.0])).tolist()
        [0.0, 4.60546875]
    """
    steps = _check_steps(steps, "log_wide")
    y = as_tensor(x, "log_wide input")
    for _ in range(steps):
        y = api.sqrt(y)
    return api.log(y) * float(2**steps)


# ---- cumsum -------------------------------------------------------------------------------


def cumsum(x, *, exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Cumulative sum over the last axis as ``x @ triu_ones`` (docs/numerics.md,
    "reduce_sum-as-matmul"): a matmul against a baked triangular ones weight.

    The matmul's wide float32 accumulator makes every prefix sum exact up to its one
    final fp16 rounding (no narrow reduce_sum); with ``exclusive`` the diagonal is left
    out, with ``reverse`` the sums run from the end (a lower triangle). The same bits as
    ``af.cumsum`` on the generic model (the emulator also runs that one as this matmul).

    Range: a prefix sum is at most ``K * max|x|`` for a last axis of K; one that passes
    65504 (32752 on targets whose matmul output saturates) is inf, and an inf or NaN in
    a row makes that row's other outputs NaN (``inf * 0`` in the zero entries).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.special import cumsum
        >>> x = af.input((1, 4))
        >>> af.compile(cumsum(x))(np.array([[1.0, 2.0, 3.0, 4.0]])).tolist()
        [[1.0, 3.0, 6.0, 10.0]]
    """
    x = as_tensor(x, "cumsum input")
    if not x.shape:
        raise ShapeError("special.cumsum: needs at least one axis, got a scalar")
    n = x.shape[-1]
    tri = np.tril(np.ones((n, n))) if reverse else np.triu(np.ones((n, n)))
    if exclusive:
        tri = tri - np.eye(n)
    kind = "tril" if reverse else "triu"
    return x @ weight(tri, name=f"{kind}_ones_{n}{'_excl' if exclusive else ''}")
