"""af.special: fitted coefficients, accuracy gates, walls, recipes.

Accuracy is measured on the emulator over every fp16 input of each gated domain (the
engine's inputs are fp16, so the sweep is exhaustive) against scipy.special, numpy and
mpmath at those inputs. The gates are the issue's; bench/special_accuracy.py prints the
measured values (docs/numerics.md, "Special functions").
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from pathlib import Path

import mpmath
import numpy as np
import pytest
from numpy.polynomial import Chebyshev, Polynomial
from numpy.polynomial.chebyshev import chebvander
from scipy import special as sp

import aneforge as af
from aneforge.errors import OptionError, ShapeError
from aneforge.graph.walk import topological_order
from aneforge.metrics import max_relative_error as max_rel
from aneforge.numerics import special as S

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fit_special.py"
DATA = ROOT / "src" / "aneforge" / "data" / "special_coefficients.json"

#: Ops a special-function graph may use: fused fp16 arithmetic, selection, the native
#: unaries every family has, and the matmul (cumsum). No native erf/sin/cos/cumsum and
#: no narrow reduction.
ALLOWED_OPS = {
    "input", "weight", "add", "sub", "mul", "div", "neg", "abs", "clip", "select",
    "less", "less_equal", "greater", "greater_equal", "round", "floor", "exp", "log",
    "sqrt", "rsqrt", "inverse", "matmul",
}  # fmt: skip
BUILDERS = {
    "erf": S.erf,
    "erfc": S.erfc,
    "sin": S.sin,
    "cos": S.cos,
    "lgamma": S.lgamma,
    "gamma": S.gamma,
    "i0": S.i0,
    "expm1": S.expm1,
    "log1p": S.log1p,
}


def fp16_values(lo, hi):
    """Every finite fp16 value in [lo, hi] (+0 once), as float64."""
    pos = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    vals = np.concatenate([-pos[:0:-1], pos])
    return vals[(vals >= lo) & (vals <= hi)]


def run(build, xs, **kw):
    x = af.input(np.shape(xs), name="x")
    return np.asarray(af.compile(build(x, **kw))(xs), dtype=np.float64)


def max_abs(got, truth):
    return float(np.max(np.abs(got - truth)))


def load_fitter():
    spec = importlib.util.spec_from_file_location("fit_special", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


# ---- the fit ------------------------------------------------------------------------------


def float64_fit_tolerance(fit, name, rec) -> float:
    """Normwise relative tolerance for a refit's float64 monomial coefficients.

    The fitter solves each Remez system A (n+1 unknowns) in the Chebyshev basis and then
    converts to monomials (the change of basis T); a BLAS build or thread count changes
    only the roundings on the way. A backward-stable solve moves the Chebyshev
    coefficients by about cond(A) (n+1) eps relative; the exchange's stopping test
    (``remez(tol=...)`` on the equioscillation gap) may end one iteration earlier or later,
    which moves them by about tol times the fit's error; T multiplies both by at most
    cond(T). Both condition numbers are computed here (A at the exchange's first
    reference; its later references change cond(A) by less than 2x), none is typed in.
    Refits under other OpenBLAS kernels (OPENBLAS_CORETYPE) and thread counts stay more
    than 1000x inside this.
    """
    lo, hi = rec["interval"]
    n = rec["degree"] + 1
    if name == "erfc":
        g = fit._erfc_core(rec["p"])
    else:
        g = next(spec.g for spec in fit.SPECS if spec.name == name)
    ref = fit._cheb_grid(lo, hi, n + 1)
    scaled = (2 * ref - lo - hi) / (hi - lo)
    level = (-1.0) ** np.arange(n + 1) / fit._weight(g(ref), rec["error_kind"])
    a = np.column_stack([chebvander(scaled, n - 1), level])
    basis = [Chebyshev.basis(j, domain=[lo, hi]).convert(kind=Polynomial).coef for j in range(n)]
    to_monomial = np.column_stack([np.pad(c, (0, n - len(c))) for c in basis])
    stop = inspect.signature(fit.remez).parameters["tol"].default
    rounding = np.linalg.cond(a) * (n + 1) * np.finfo(np.float64).eps
    return float(np.linalg.cond(to_monomial) * (rounding + stop * rec["err_fit"]))


def test_refit_reproduces_the_stored_coefficients():
    fit = load_fitter()
    fitted = fit.fit_all()
    stored = json.loads(DATA.read_text())
    assert stored["source"] == "scripts/fit_special.py" == fitted["source"]
    assert stored["walls"] == fitted["walls"]
    assert sorted(stored["fits"]) == sorted(fitted["fits"])
    for name, rec in fitted["fits"].items():
        # the fp16 coefficients the graphs bake in must match exactly
        assert stored["fits"][name]["coefficients"] == rec["coefficients"], name
        assert S.coefficients(name) == tuple(rec["coefficients"])
        # The float64 ones only within what the roundings can move them (BLAS build and
        # threads), normwise: a coefficient 1e-7 the size of the largest may carry all of
        # the error (i0_small's smallest moves by 1e-7 relative, its vector by 1e-11).
        want = np.array(stored["fits"][name]["coefficients_float64"])
        got = np.array(rec["coefficients_float64"])
        tol = float64_fit_tolerance(fit, name, rec)
        assert tol < 1e-7, (name, tol)  # a meaningful check, far finer than fp16
        assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want), (name, tol)


def test_stored_coefficients_are_fp16_and_their_residuals_are_reported():
    stored = json.loads(DATA.read_text())
    for name, rec in stored["fits"].items():
        c = np.array(rec["coefficients"])
        assert np.array_equal(c.astype(np.float16).astype(np.float64), c), name
        # the float64 fit is far inside fp16; rounding and the fp16 chain cost the rest
        assert rec["err_fit"] < 1e-4, name
        assert rec["err_fit"] <= rec["err_fp16_coeffs"] < 2e-3, name
        assert rec["err_fp16_horner"] < 5e-3, name
    assert stored["fits"]["erfc"]["p"] == S.ERFC_P


def test_remez_equioscillates_on_a_known_case():
    fit = load_fitter()
    coef, err = fit.remez(np.exp, -1.0, 1.0, 3, "abs")
    grid = np.linspace(-1, 1, 20001)
    e = np.exp(grid) - np.polynomial.Polynomial(coef)(grid)
    assert abs(np.max(np.abs(e)) - err) < 1e-8  # the two grids differ
    assert 5.5e-3 < err < 5.6e-3  # the degree-3 minimax error of exp on [-1, 1]: 5.53e-3
    assert abs(e[0]) == pytest.approx(err, rel=1e-6)  # the ends are extrema
    assert abs(e[-1]) == pytest.approx(err, rel=1e-6)


def test_unknown_fit_name_raises():
    with pytest.raises(OptionError, match="no fit"):
        S.coefficients("zeta")


# ---- erf / erfc ---------------------------------------------------------------------------


def test_erf_is_accurate_near_zero_where_the_naive_form_cancels():
    xs = fp16_values(1e-3, 1.0)
    direct = max_rel(run(S.erf, xs), sp.erf(xs))
    assert direct <= 2e-3  # gate 0.2% (spec 0.10%; measured 0.083%)
    geo = np.geomspace(1e-3, 1.0, 1000).astype(np.float16).astype(np.float64)
    naive = max_rel(run(lambda x: 1.0 - S.erfc(x), geo), sp.erf(geo))
    assert naive > 0.25  # measured 73% (spec: ~187%): 1 - erfc cancels near 0
    assert naive > 100 * direct


def test_erf_is_exactly_odd_through_zero():
    pos = fp16_values(0.0, 65504.0)
    got = run(S.erf, np.concatenate([pos, -pos])).astype(np.float16).view(np.uint16)
    n = len(pos)
    assert np.array_equal(got[:n] ^ np.uint16(0x8000), got[n:])  # erf(-x) == -erf(x)
    assert got[0] == 0  # erf(+0) is +0
    assert np.all(got[:n] < 0x7C00)  # finite, non-negative for x >= 0


def test_erf_whole_range():
    xs = fp16_values(-6.0, 6.0)
    got = run(S.erf, xs)
    assert max_abs(got, sp.erf(xs)) <= 2e-3
    assert np.all(np.abs(got) <= 1.0)
    assert run(S.erf, np.array([-np.inf, np.inf])).tolist() == [-1.0, 1.0]


def test_erfc_keeps_the_small_tail_where_one_minus_erf_is_zero():
    truth = float(mpmath.erfc(3))  # 2.209e-5
    got = run(S.erfc, np.array([3.0]))[0]
    assert abs(got / truth - 1) <= 0.02  # gate 2% (measured 0.10%)
    assert run(lambda x: 1.0 - S.erf(x), np.array([3.0]))[0] == 0.0
    assert run(lambda x: 1.0 - af.erf(x), np.array([3.0]))[0] == 0.0  # native erf too


def test_erfc_accuracy():
    xs = fp16_values(0.0, 3.0)
    assert max_rel(run(S.erfc, xs), sp.erfc(xs)) <= 1e-2  # measured 4.7e-3
    xs = fp16_values(-8.0, 8.0)
    got = run(S.erfc, xs)
    assert max_abs(got, sp.erfc(xs)) <= 4e-3
    assert np.all((got >= 0) & (got <= 2))


# ---- sin / cos ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, fn", [("sin", np.sin), ("cos", np.cos)])
def test_sin_cos_half_period(name, fn):
    build = getattr(S, name)
    xs = fp16_values(-np.pi, np.pi)
    assert max_abs(run(build, xs), fn(xs)) <= 2e-3  # gate (measured 1.0e-3 / 7.2e-4)
    xs = fp16_values(-200.0, 200.0)[::7]
    assert max_abs(run(build, xs), fn(xs)) <= 2e-3  # Cody-Waite reach, |x| <= 200


def test_sin_cos_build_on_m1_without_lowering():
    x = af.input((8,), name="x")
    for y in (S.sin(x), S.cos(x)):
        assert af.preflight(y, "M1").violations == []  # no native trig below A15
    with pytest.raises(OptionError, match="sin' or 'cos"):
        S.half_period(x, "tan")


# ---- lgamma / gamma -----------------------------------------------------------------------


def test_lgamma_centered_accuracy():
    xs = fp16_values(1.0, 8.0)
    assert max_abs(run(S.lgamma, xs), sp.gammaln(xs)) <= 1e-2  # gate (measured 4.2e-3)
    xs = fp16_values(2.0**-14, 1.0)
    assert max_abs(run(S.lgamma, xs), sp.gammaln(xs)) <= 1e-2
    xs = fp16_values(8.0, 7000.0)
    assert max_rel(run(S.lgamma, xs), sp.gammaln(xs)) <= 3e-3
    got = run(S.lgamma, np.array([0.0, -1.5, 60000.0]))
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == np.inf


def test_lgamma_head_is_exact():
    """(x - 4.5) + c0 is exact for every fp16 x in [1, 8] (the docstring's claim)."""
    xs = fp16_values(1.0, 8.0).astype(np.float16)
    u = xs - np.float16(4.5)
    c0 = np.float16(S.coefficients("lgamma")[0])
    head = (u + c0).astype(np.float64)
    assert np.array_equal(head, u.astype(np.float64) + float(c0))


def test_gamma_to_its_wall_and_the_wall_is_reported():
    assert S.GAMMA_X_MAX == 9.21875
    past = float(np.nextafter(np.float16(S.GAMMA_X_MAX), np.float16(20)))
    assert sp.gamma(S.GAMMA_X_MAX) < 65504 < sp.gamma(past)
    xs = fp16_values(2.0**-14, S.GAMMA_X_MAX)
    got = run(S.gamma, xs)
    assert np.all(np.isfinite(got))  # nothing overflows below the wall
    assert max_rel(got, sp.gamma(xs)) <= 3e-3  # measured 1.8e-3
    x = af.input((6,), name="x")
    y, over = S.gamma(x, return_wall=True)
    got, mask = af.compile([y, over])(np.array([1.0, S.GAMMA_X_MAX, past, 12.0, 60000.0, -2.5]))
    assert got[0] == 1.0 and np.isfinite(got[1])
    assert np.all(np.isposinf(got[2:5])) and np.isnan(got[5])
    assert mask.tolist() == [0.0, 0.0, 1.0, 1.0, 1.0, 0.0]


def test_integer_gamma_is_the_factorial():
    got = run(S.gamma, np.arange(1.0, 10.0))
    assert max_rel(got, sp.gamma(np.arange(1.0, 10.0))) <= 3e-3


# ---- i0, expm1, log1p ---------------------------------------------------------------------


def test_i0_to_its_wall():
    xs = fp16_values(-S.I0_X_MAX, S.I0_X_MAX)
    got = run(S.i0, xs)
    assert max_rel(got, sp.i0(xs)) <= 4e-3  # measured 2.3e-3
    past = float(np.nextafter(np.float16(S.I0_X_MAX), np.float16(20)))
    assert sp.i0(S.I0_X_MAX) < 65504 < sp.i0(past)
    x = af.input((3,), name="x")
    y, over = S.i0(x, return_wall=True)
    got, mask = af.compile([y, over])(np.array([S.I0_X_MAX, -past, 1000.0]))
    assert np.isfinite(got[0]) and np.all(np.isposinf(got[1:]))
    assert mask.tolist() == [0.0, 1.0, 1.0]


def test_expm1_and_log1p_beat_the_naive_forms():
    xs = fp16_values(-1.0, 1.0)
    assert max_rel(run(S.expm1, xs), sp.expm1(xs)) <= 2e-3
    assert max_rel(run(lambda x: af.exp(x) - 1.0, xs), sp.expm1(xs)) > 0.5
    xs = fp16_values(-20.0, 11.0)
    assert max_rel(run(S.expm1, xs), sp.expm1(xs)) <= 2e-3
    assert run(S.expm1, np.array([11.2]))[0] == np.inf  # expm1's own fp16 wall
    xs = fp16_values(-0.5, 1.0)
    assert max_rel(run(S.log1p, xs), sp.log1p(xs)) <= 2e-3
    assert max_rel(run(lambda x: af.log(x + 1.0), xs), sp.log1p(xs)) > 0.5
    xs = fp16_values(-0.999, 65504.0)
    assert max_rel(run(S.log1p, xs), sp.log1p(xs)) <= 2e-3
    got = run(S.log1p, np.array([-1.0, -2.0]))
    assert got[0] == -np.inf and np.isnan(got[1])


# ---- exp_wide / log_wide: recipes that do not beat the native ops -------------------------


def test_exp_wide_does_not_beat_native_exp():
    xs = fp16_values(-9.0, 11.0)
    native = run(S.exp_wide, xs, steps=0)
    assert np.array_equal(native, run(af.exp, xs))
    err = {s: np.abs(run(S.exp_wide, xs, steps=s) / np.exp(xs) - 1) for s in range(4)}
    for s in (1, 2, 3):
        assert err[s].max() > err[0].max()
        assert np.sqrt(np.mean(err[s] ** 2)) > np.sqrt(np.mean(err[0] ** 2))


def test_log_wide_does_not_beat_native_log():
    xs = fp16_values(2.0**-14, 60000.0)
    near = (xs >= 0.5) & (xs <= 2.0)
    err = {s: np.abs(run(S.log_wide, xs, steps=s) - np.log(xs)) for s in range(4)}
    assert np.array_equal(run(S.log_wide, xs, steps=0), run(af.log, xs))
    for s in (1, 2, 3):
        assert err[s].max() > err[0].max()
        assert err[s][near].max() > 2 * err[0][near].max()
    with pytest.raises(OptionError, match="steps"):
        S.log_wide(af.input((2,)), steps=-1)


# ---- cumsum -------------------------------------------------------------------------------


def test_cumsum_is_a_matmul_against_triu_ones(rng):
    data = rng.standard_normal((4, 300)).astype(np.float16).astype(np.float64)
    x = af.input(data.shape, name="x")
    mine, native = af.compile([S.cumsum(x), af.cumsum(x)])(data)
    assert np.array_equal(mine, native)  # same bits as the engine's cumsum lowering
    ops = {n.op for n in topological_order([S.cumsum(x)])}
    assert ops == {"input", "weight", "matmul"}
    excl, rev = af.compile([S.cumsum(x, exclusive=True), S.cumsum(x, reverse=True)])(data)
    tol = 2.0**-11 * np.cumsum(np.abs(data), -1).max() + 1e-6
    assert max_abs(excl[:, 1:], np.cumsum(data, -1)[:, :-1]) <= tol
    assert np.all(excl[:, 0] == 0)
    assert max_abs(rev, np.cumsum(data[:, ::-1], -1)[:, ::-1]) <= tol
    with pytest.raises(ShapeError):
        S.cumsum(af.weight(1.0))


# ---- graph structure and the constants modes ----------------------------------------------


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_graphs_use_only_fused_fp16_ops(name):
    y = BUILDERS[name](af.input((4,), name="x"))
    ops = {n.op for n in topological_order([y])}
    assert ops <= ALLOWED_OPS, ops - ALLOWED_OPS


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_ones_constants_give_the_same_bits(name):
    xs = np.concatenate([fp16_values(-16.0, 16.0)[::5], [0.5, 1.0, 2.0, 3.0, 8.0]])
    xs = xs[xs > 0] if name in ("lgamma", "gamma") else xs
    x = af.input(xs.shape, name="x")
    build = BUILDERS[name]
    plain, ones = af.compile([build(x), build(x, constants="ones")])(xs)
    assert np.array_equal(plain, ones, equal_nan=True)
    assert "exp" in {n.op for n in topological_order([build(x, constants="ones")])}


def test_ones_like_and_bad_constants_mode():
    got = run(lambda x: S.ones_like(x), np.array([-3.0, 0.0, 60000.0, np.inf]))
    assert got[:3].tolist() == [1.0, 1.0, 1.0] and np.isnan(got[3])
    with pytest.raises(OptionError, match="constants"):
        S.erf(af.input((2,)), constants="scalar")
