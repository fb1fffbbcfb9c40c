"""Fit the polynomial coefficients of ``aneforge.numerics.special`` (docs/sources.md, Numerics).

Every coefficient the special functions use comes from here; none is typed in. Each fit
approximates a function g(v) of the polynomial variable v (the variable the graph feeds
to its Horner chain, e.g. v = (x/2)^2 for erf) by a polynomial of fixed degree on a
fixed interval, minimax by a Remez exchange in float64 (relative or absolute error,
spec by spec). The float64 coefficients are then rounded to fp16 (what the graph bakes
as weights), both plainly and sequentially (round the highest coefficient, refit the
lower ones to absorb its error, repeat; the better of the two is kept), and re-checked
on a dense grid, three ways:

- ``err_fit``: the float64 minimax polynomial against g (the approximation error);
- ``err_fp16_coeffs``: the fp16-rounded coefficients, evaluated exactly (float64);
- ``err_fp16_horner``: the fp16-rounded coefficients in an fp16 Horner chain on
  fp16-rounded v (NumPy float16 rounds each mul and add once, exactly as the emulator
  does), against g at that fp16 v.

erfc also fits the A&S 7.1.26 scale ``p`` of ``t = 1 / (1 + p x)``: a bounded Brent
search minimizes the float64 minimax error over p, then p is rounded to fp16 and the
polynomial refitted for that fp16 p. The fp16 range walls (the largest fp16 x whose
gamma / I0 still rounds to a finite fp16 value) are computed here too.

    python scripts/fit_special.py            # write src/aneforge/data/special_coefficients.json
    python scripts/fit_special.py --check    # refit and compare with the stored file
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.polynomial import Chebyshev, Polynomial
from scipy import special as sp
from scipy.optimize import minimize_scalar

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "aneforge" / "data" / "special_coefficients.json"
SOURCE = "scripts/fit_special.py"
GRID = 6001  # dense check grid (Chebyshev-distributed, endpoints included)


def f16(v):
    """Round to fp16 and back to float64 (round to nearest even)."""
    with np.errstate(over="ignore"):  # past 65504 is inf, as in the engine
        return np.asarray(v, dtype=np.float64).astype(np.float16).astype(np.float64)


# ---- the functions, each as g(v) of its polynomial variable ---------------------------


def _erf_over_x(v):
    """erf(x)/x at x = 2 sqrt(v) (the graph feeds v = (x/2)^2)."""
    x = 2.0 * np.sqrt(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = sp.erf(x) / x
    return np.where(x == 0, 2.0 / math.sqrt(math.pi), out)


def _erfc_core(p):
    """erfc(x) exp(x^2) / t at t = 1/(1 + p x): the A&S 7.1.26 polynomial P(t)."""

    def g(t):
        x = (1.0 / t - 1.0) / p
        return sp.erfcx(x) / t

    return g


def _sin_over_r(v):
    """sin(r)/r at r = sqrt(v)."""
    r = np.sqrt(v)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.sin(r) / r
    return np.where(r == 0, 1.0, out)


def _cos_r(v):
    return np.cos(np.sqrt(v))


def _lgamma_centered(v):
    """lgamma(x) at x = 4.5 + 4 v (the graph feeds v = (x - 4.5) / 4, exact)."""
    return sp.gammaln(4.5 + 4.0 * v)


def _gamma_centered(v):
    """gamma(x) at x = 1.5 + v."""
    return sp.gamma(1.5 + v)


def _i0_small(v):
    """I0(x) at x = 4 sqrt(v) (the graph feeds v = (x/4)^2, exact scaling)."""
    return sp.i0(4.0 * np.sqrt(v))


def _i0_large(v):
    """sqrt(x) exp(-x) I0(x) at x = 4 / v."""
    x = 4.0 / v
    return np.sqrt(x) * sp.i0e(x)


def _expm1_over_x(v):
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.expm1(v) / v
    return np.where(v == 0, 1.0, out)


def _log1p_over_x(v):
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.log1p(v) / v
    return np.where(v == 0, 1.0, out)


@dataclass(frozen=True)
class FitSpec:
    """One polynomial: g(v) - head(v) ~ sum c_j v^j on [lo, hi], minimax.

    ``head`` (ascending monomial coefficients, default none) is a part of g the graph
    adds exactly, outside the Horner chain; ``error`` "rel" weights by 1/|g| (the whole
    function, head included), "abs" does not weight.
    """

    name: str
    g: object
    lo: float
    hi: float
    degree: int
    error: str  # "rel" or "abs"
    variable: str  # what the graph feeds the polynomial, in words
    approximates: str
    head: tuple = ()


HALF_PI = math.pi / 2 + 0.01  # the reduced argument's reach (round(x/pi) slack)

SPECS = [
    FitSpec(
        "erf",
        _erf_over_x,
        0.0,
        1.0,
        5,
        "rel",
        "v = (x/2)^2, |x| <= 2",
        "erf(x)/x - 1  (erf = x + x * P(v))",
        head=(1.0,),
    ),
    FitSpec(
        "sin",
        _sin_over_r,
        0.0,
        HALF_PI**2,
        3,
        "rel",
        "v = r^2, |r| <= pi/2 + 0.01",
        "sin(r)/r  (sin = r * P(v), odd degree 7)",
    ),
    FitSpec(
        "cos",
        _cos_r,
        0.0,
        HALF_PI**2,
        4,
        "abs",
        "v = r^2, |r| <= pi/2 + 0.01",
        "cos(r)  (even degree 8)",
    ),
    FitSpec(
        "lgamma",
        _lgamma_centered,
        -0.875,
        0.875,
        10,
        "abs",
        "v = (x - 4.5) / 4, x in [1, 8]",
        "lgamma(x) - (x - 4.5)  (lgamma = ((x - 4.5) + c0) + v * P1(v))",
        head=(0.0, 4.0),
    ),
    FitSpec("gamma", _gamma_centered, -0.5, 0.5, 8, "rel", "v = x - 1.5, x in [1, 2]", "gamma(x)"),
    FitSpec("i0_small", _i0_small, 0.0, 1.0, 8, "rel", "v = (x/4)^2, |x| <= 4", "I0(x)"),
    FitSpec(
        "i0_large",
        _i0_large,
        0.25,
        1.0,
        6,
        "rel",
        "v = 4/x, 4 <= |x| <= 16",
        "sqrt(x) exp(-x) I0(x)",
    ),
    FitSpec(
        "expm1",
        _expm1_over_x,
        -1.0,
        1.0,
        7,
        "rel",
        "v = x, |x| <= 1",
        "expm1(x)/x  (expm1 = x * P(x))",
    ),
    FitSpec(
        "log1p",
        _log1p_over_x,
        -0.5,
        1.0,
        10,
        "rel",
        "v = x, -0.5 <= x <= 1",
        "log1p(x)/x  (log1p = x * P(x))",
    ),
]
ERFC_DEGREE = 4  # P(t) of degree 4: erfc = t P(t) exp(-x^2), five coefficients as A&S
ERFC_XMAX = 4.5  # erfc(4.5) = 2e-10: past fp16's smallest subnormal (6e-8)


# ---- Remez exchange --------------------------------------------------------------------


def _cheb_grid(lo, hi, n=GRID):
    k = np.arange(n)
    return lo + (hi - lo) * (1 - np.cos(np.pi * k / (n - 1))) / 2


def _weight(gv, error):
    return 1.0 / np.abs(gv) if error == "rel" else np.ones_like(gv)


def _alternating_extrema(e, count):
    """Indices of ``count`` alternating-sign extrema of e, keeping the largest."""
    inner = np.arange(1, len(e) - 1)
    peak = (np.abs(e[inner]) >= np.abs(e[inner - 1])) & (np.abs(e[inner]) >= np.abs(e[inner + 1]))
    idx = [0, *inner[peak].tolist(), len(e) - 1]
    merged: list[int] = []
    for i in idx:
        if merged and np.sign(e[i]) == np.sign(e[merged[-1]]):
            if abs(e[i]) > abs(e[merged[-1]]):
                merged[-1] = i
        else:
            merged.append(i)
    while len(merged) > count:
        if len(merged) == count + 1:  # drop the smaller end
            merged.pop(0 if abs(e[merged[0]]) < abs(e[merged[-1]]) else -1)
            continue
        j = min(range(len(merged)), key=lambda m: abs(e[merged[m]]))
        if j == 0 or j == len(merged) - 1:
            merged.pop(j)
        else:  # removing an inner point leaves same-sign neighbours: drop a pair
            k = j - 1 if abs(e[merged[j - 1]]) < abs(e[merged[j + 1]]) else j + 1
            for m in sorted((j, k), reverse=True):
                merged.pop(m)
    return np.array(merged)


def remez(g, lo, hi, degree, error, weight_of=None, iters=60, tol=1e-9):
    """Minimax polynomial coefficients (monomial, ascending) of g on [lo, hi].

    The error is weighted by 1/|weight_of| (``weight_of`` defaults to g) when ``error``
    is "rel", else unweighted. Works in the Chebyshev basis on [lo, hi] for conditioning
    and converts at the end. Returns (coefficients, max weighted error on the grid).
    """
    n = degree + 1
    grid = _cheb_grid(lo, hi)
    gg = g(grid)
    w = _weight(gg if weight_of is None else weight_of(grid), error)
    s_grid = (2 * grid - lo - hi) / (hi - lo)
    basis_grid = np.polynomial.chebyshev.chebvander(s_grid, degree)
    ref = np.unique(np.searchsorted(grid, _cheb_grid(lo, hi, n + 1)).clip(0, len(grid) - 1))
    best = None
    for _ in range(iters):
        a = np.concatenate(
            [basis_grid[ref], ((-1.0) ** np.arange(n + 1) / w[ref])[:, None]], axis=1
        )
        sol = np.linalg.solve(a, gg[ref])
        coef = sol[:n]
        err = (gg - basis_grid @ coef) * w
        emax = float(np.max(np.abs(err)))
        if best is None or emax < best[1]:
            best = (coef, emax)
        level = abs(sol[n])
        if emax - level <= tol * emax:
            break
        new = _alternating_extrema(err, n + 1)
        if len(new) < n + 1:
            break
        ref = new
    cheb = Chebyshev(best[0], domain=[lo, hi])
    mono = cheb.convert(kind=Polynomial).coef
    return np.pad(mono, (0, n - len(mono))), best[1]


# ---- checks ----------------------------------------------------------------------------


def _weighted(gv, approx, ref, error):
    return float(np.max(np.abs((gv - approx) * _weight(ref, error))))


def poly_error(coef, g, lo, hi, error, weight_of=None):
    """Max weighted error of sum coef_j v^j (float64) against g on the dense grid."""
    v = _cheb_grid(lo, hi)
    ref = g(v) if weight_of is None else weight_of(v)
    return _weighted(g(v), Polynomial(coef)(v), ref, error)


def horner_fp16(coef16, v):
    """The graph's Horner chain in NumPy float16: p = c_n; p = p*v + c_j, each op rounded."""
    v = np.asarray(v).astype(np.float16)
    c = [np.float16(c) for c in coef16]
    p = c[-1] * v + c[-2]
    for cj in reversed(c[:-2]):
        p = p * v + cj
    return p.astype(np.float64)


def horner_error(coef16, g, lo, hi, error, weight_of=None):
    """Max weighted error of the fp16 Horner chain at fp16 grid points, against g there."""
    v = np.unique(f16(_cheb_grid(lo, hi)))
    v = v[(v >= lo) & (v <= hi)]
    ref = g(v) if weight_of is None else weight_of(v)
    return _weighted(g(v), horner_fp16(coef16, v), ref, error)


def round_sequentially(coef, g, lo, hi, error, weight_of=None):
    """fp16 coefficients: round the highest one, refit the lower ones (minimax) to absorb
    its rounding error, and repeat down to the constant term."""
    coef = np.array(coef, dtype=np.float64)
    weight_of = g if weight_of is None else weight_of
    for j in range(len(coef) - 1, 0, -1):
        coef[j] = f16(coef[j])
        high = Polynomial(np.concatenate([np.zeros(j), coef[j:]]))
        lower, _ = remez(
            lambda v, high=high: g(v) - high(v), lo, hi, j - 1, error, weight_of=weight_of
        )
        coef[:j] = lower
    coef[0] = f16(coef[0])
    return coef


def fit_poly(g, lo, hi, degree, error, weight_of=None, fields=None) -> dict:
    """Remez fit, sequential fp16 rounding and the three error checks, as one record."""
    coef, err = remez(g, lo, hi, degree, error, weight_of=weight_of)
    plain = f16(coef)
    sequential = round_sequentially(coef, g, lo, hi, error, weight_of)
    err_plain = poly_error(plain, g, lo, hi, error, weight_of)
    err_seq = poly_error(sequential, g, lo, hi, error, weight_of)
    coef16, how = (sequential, "sequential") if err_seq <= err_plain else (plain, "plain")
    return {
        **(fields or {}),
        "degree": degree,
        "interval": [lo, hi],
        "error_kind": error,
        "coefficients_float64": [float(c) for c in coef],
        "coefficients": [float(c) for c in coef16],
        "err_fit": err,
        "rounding": how,
        "err_fp16_rounded_plainly": err_plain,
        "err_fp16_coeffs": min(err_plain, err_seq),
        "err_fp16_horner": horner_error(coef16, g, lo, hi, error, weight_of),
    }


def fit_spec(spec: FitSpec) -> dict:
    head = Polynomial(spec.head or (0.0,))

    def g(v):
        return spec.g(v) - head(v)

    fields = {"variable": spec.variable, "approximates": spec.approximates, "head": list(spec.head)}
    return fit_poly(g, spec.lo, spec.hi, spec.degree, spec.error, weight_of=spec.g, fields=fields)


def _erfc_interval(p):
    return 1.0 / (1.0 + p * ERFC_XMAX), 1.0


def fit_erfc() -> dict:
    """A&S 7.1.26 form: erfc(x) = t P(t) exp(-x^2), t = 1/(1 + p x), p fitted too."""

    def minimax_for(p):
        lo, hi = _erfc_interval(p)
        return remez(_erfc_core(p), lo, hi, ERFC_DEGREE, "rel")[1]

    best = minimize_scalar(
        minimax_for, bounds=(0.2, 0.8), method="bounded", options={"xatol": 1e-6}
    )
    p16 = float(f16(best.x))
    lo, hi = _erfc_interval(p16)
    fields = {
        "variable": f"t = 1/(1 + p x), 0 <= x <= {ERFC_XMAX}",
        "approximates": "erfc(x) exp(x^2) / t  (erfc = t P(t) exp(-x^2))",
        "head": [],
        "p_float64": float(best.x),
        "p": p16,
    }
    return fit_poly(_erfc_core(p16), lo, hi, ERFC_DEGREE, "rel", fields=fields)


def fp16_wall(fn, lo, hi) -> float:
    """The largest fp16 x in [lo, hi) whose fn(x) rounds to a finite fp16 value."""
    bits = np.arange(np.float16(lo).view(np.uint16), np.float16(hi).view(np.uint16))
    xs = bits.astype(np.uint16).view(np.float16).astype(np.float64)
    finite = xs[np.isfinite(f16(fn(xs)))]
    return float(finite.max())


def fit_all() -> dict:
    """Every fit and wall, as written to the JSON file."""
    fits = {spec.name: fit_spec(spec) for spec in SPECS}
    fits["erfc"] = fit_erfc()
    return {
        "source": SOURCE,
        "method": "Remez exchange (minimax) in float64 on a dense Chebyshev grid of "
        f"{GRID} points; coefficients rounded to fp16 and re-checked",
        "walls": {
            "gamma_x_max": fp16_wall(sp.gamma, 9.0, 10.0),
            "i0_x_max": fp16_wall(sp.i0, 13.0, 14.0),
            "erfc_x_max": ERFC_XMAX,
        },
        "fits": {k: fits[k] for k in sorted(fits)},
    }


def _summary(data: dict) -> str:
    lines = [
        f"{'fit':<9} {'deg':>3} {'kind':>4} {'err_fit':>9} {'fp16 coef':>9} {'fp16 horner':>11}"
    ]
    for name, rec in data["fits"].items():
        lines.append(
            f"{name:<9} {rec['degree']:>3} {rec['error_kind']:>4} "
            f"{rec['err_fit']:9.2e} {rec['err_fp16_coeffs']:9.2e} "
            f"{rec['err_fp16_horner']:11.2e}"
        )
    lines.append(f"walls: {data['walls']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the stored file")
    args = ap.parse_args(argv)
    data = fit_all()
    print(_summary(data))
    if args.check:
        stored = json.loads(OUT.read_text())
        same = (
            all(
                stored["fits"][k]["coefficients"] == v["coefficients"]
                for k, v in data["fits"].items()
            )
            and stored["walls"] == data["walls"]
        )
        print("stored coefficients reproduced" if same else "MISMATCH with the stored file")
        return 0 if same else 1
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
