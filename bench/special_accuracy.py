"""Accuracy of ``af.special`` on the emulator against scipy.special / mpmath.

Every domain is swept exhaustively over its fp16 values (the engine's inputs are fp16,
so this is every input the function can see there); the truth is scipy.special (numpy
for sin/cos) at those fp16 inputs in float64, with mpmath for erfc(3). For each function
the table gives the emulator's error and, beside it, the error of the same graph
evaluated exactly in float64 (``af.reference``): the approximation's own error, so the
difference is what fp16 arithmetic costs. Then the naive forms the spec warns about
(``1 - erfc`` near 0, ``1 - erf(3)``, ``exp(x) - 1``, ``log(1 + x)``, a full-period sin
polynomial, a raw Horner in x for lgamma), the exp_wide / log_wide recipes against the
native exp / log, gamma's and I0's fp16 walls, cumsum, the fit residuals and the op
counts.

    python bench/special_accuracy.py              # tables + RESULT lines
    python bench/special_accuracy.py --markdown   # also the docs table (docs/numerics.md)

Last lines (machine-readable), e.g.:
    RESULT special_erf_rel_1e-3_1=<max rel>   RESULT special_erf_naive_rel_1e-3_1=<...>
    RESULT special_erf_odd_bitwise=<bool>     RESULT special_erfc3_rel=<...>
    RESULT special_sin_abs_pi=<...>  RESULT special_lgamma_abs_1_8=<...>
    RESULT special_gamma_wall_x=<x>  RESULT special_exp_wide_beats_native=<bool>
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from pathlib import Path

import mpmath
import numpy as np
from scipy import special as sp

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.graph.fp16 import fp16_values as f16
from aneforge.graph.walk import topological_order
from aneforge.metrics import max_relative_error as rel
from aneforge.numerics import special as S

ROOT = Path(__file__).resolve().parents[1]

warnings.filterwarnings("ignore", category=af.AneforgeWarning)
LEAVES = {"input", "weight"}


def fp16_values(lo, hi):
    """Every finite fp16 value in [lo, hi], ascending, as float64."""
    bits = np.arange(0, 0x7C00, dtype=np.uint16)
    pos = bits.view(np.float16).astype(np.float64)
    vals = np.concatenate([-pos[:0:-1], pos])  # -max .. -tiny, +0, tiny .. max
    return vals[(vals >= lo) & (vals <= hi)]


def run(build, xs, **kw):
    """(emulator output, float64 reference output) of build(x) at the fp16 inputs xs."""
    x = af.input(np.shape(xs), name="x")
    y = build(x, **kw)
    emu = np.asarray(af.compile(y)(xs), dtype=np.float64)
    return emu, np.asarray(af.reference(y, xs), dtype=np.float64)


def absolute(got, truth):
    return float(np.max(np.abs(got - truth)))


def node_count(build):
    y = build(af.input((4,), name="x"))
    y = y[0] if isinstance(y, tuple) else y
    return sum(1 for n in topological_order([y]) if n.op not in LEAVES)


ROWS = []  # (function, domain, metric, emulator, float64 graph, spec figure)


def row(fn, domain, metric, emu, ref, spec=""):
    ROWS.append((fn, domain, metric, emu, ref, spec))


def measure(name, build, lo, hi, truth_fn, metric, spec="", xs=None, label=None, **kw):
    xs = fp16_values(lo, hi) if xs is None else xs
    emu, ref = run(build, xs, **kw)
    truth = truth_fn(xs)
    err = rel if metric == "rel" else absolute
    row(name, label or f"[{lo:g}, {hi:g}]", metric, err(emu, truth), err(ref, truth), spec)
    return emu, truth


def accuracy():
    out = {}
    # erf: direct form near 0, the naive 1 - erfc, exact oddness
    emu, truth = measure("erf", S.erf, 1e-3, 1.0, sp.erf, "rel", "<= 0.2% (0.10%)")
    out["erf_rel_1e-3_1"] = rel(emu, truth)
    geo = f16(np.geomspace(1e-3, 1.0, 1000))
    emu_geo, _ = run(S.erf, geo)
    out["erf_rel_geomspace"] = rel(emu_geo, sp.erf(geo))
    naive = lambda x: 1.0 - S.erfc(x)  # noqa: E731
    emu_n, ref_n = run(naive, geo)
    row(
        "1 - erfc (naive)",
        "geomspace(1e-3, 1)",
        "rel",
        rel(emu_n, sp.erf(geo)),
        rel(ref_n, sp.erf(geo)),
        "~187%",
    )
    out["erf_naive_rel_1e-3_1"] = rel(emu_n, sp.erf(geo))
    out["erf_naive_at_0"] = float(run(naive, np.zeros(1))[0][0])
    measure("erf", S.erf, -4.5, 4.5, sp.erf, "abs")
    measure("erf", S.erf, 1e-3, 4.5, sp.erf, "rel")
    pos = fp16_values(0.0, 65504.0)
    both = np.concatenate([pos, -pos])
    e_both, _ = run(S.erf, both)
    half = len(pos)
    out["erf_odd_bitwise"] = bool(
        np.array_equal(
            e_both[:half].astype(np.float16).view(np.uint16) ^ np.uint16(0x8000),
            e_both[half:].astype(np.float16).view(np.uint16),
        )
    )
    out["erf_at_0"] = float(e_both[0])
    # erfc: the small tail
    e3, r3 = run(S.erfc, np.array([3.0]))
    truth3 = float(mpmath.erfc(3))
    out["erfc3"] = float(e3[0])
    out["erfc3_rel"] = abs(float(e3[0]) / truth3 - 1)
    row("erfc", "x = 3", "rel", out["erfc3_rel"], abs(r3[0] / truth3 - 1), "<= 2% (2.2e-5)")
    for label, build in (
        ("1 - erf (naive)", lambda x: 1.0 - S.erf(x)),
        ("1 - af.erf (native erf, naive)", lambda x: 1.0 - af.erf(x)),
    ):
        emu, ref = run(build, np.array([3.0]))
        row(label, "x = 3", "rel", abs(emu[0] / truth3 - 1), abs(ref[0] / truth3 - 1), "0 (100%)")
        out.setdefault("erfc3_naive", float(emu[0]))
    measure("erfc", S.erfc, 0.0, 3.0, sp.erfc, "rel")  # erfc >= 2.2e-5 (fp16 steps <= 0.3%)
    measure("erfc", S.erfc, -4.5, 4.5, sp.erfc, "abs")
    # sin / cos
    for name, build, fn in (("sin", S.sin, np.sin), ("cos", S.cos, np.cos)):
        emu, truth = measure(
            name, build, -np.pi, np.pi, fn, "abs", "<= 2e-3 (~1e-3)", label="[-pi, pi]"
        )
        out[f"{name}_abs_pi"] = absolute(emu, truth)
        measure(name, build, -200.0, 200.0, fn, "abs")
    # lgamma / gamma
    emu, truth = measure("lgamma", S.lgamma, 1.0, 8.0, sp.gammaln, "abs", "<= 1e-2 (~3e-3)")
    out["lgamma_abs_1_8"] = absolute(emu, truth)
    measure("lgamma", S.lgamma, 2.0**-14, 1.0, sp.gammaln, "abs", label="[2^-14, 1]")
    measure("lgamma", S.lgamma, 8.0, 7000.0, sp.gammaln, "rel")
    emu, truth = measure(
        "gamma", S.gamma, 1.0, S.GAMMA_X_MAX, sp.gamma, "rel", "to the wall (9.21875)"
    )
    out["gamma_rel_to_wall"] = rel(emu, truth)
    measure("gamma", S.gamma, 2.0**-14, 1.0, sp.gamma, "rel", label="[2^-14, 1]")
    # i0, expm1, log1p
    emu, truth = measure(
        "i0",
        S.i0,
        -S.I0_X_MAX,
        S.I0_X_MAX,
        sp.i0,
        "rel",
        "to the wall (13.289)",
        label="[-13.289, 13.289]",
    )
    out["i0_rel_to_wall"] = rel(emu, truth)
    emu, truth = measure("expm1", S.expm1, -1.0, 1.0, sp.expm1, "rel")
    out["expm1_rel_1"] = rel(emu, truth)
    measure("expm1", S.expm1, -17.0, 11.0, sp.expm1, "rel")
    xs = fp16_values(-1.0, 1.0)
    xs = xs[xs != 0]
    naive = lambda x: af.exp(x) - 1.0  # noqa: E731
    emu_n, ref_n = run(naive, xs)
    row("exp(x) - 1 (naive)", "[-1, 1]", "rel", rel(emu_n, sp.expm1(xs)), rel(ref_n, sp.expm1(xs)))
    emu, truth = measure("log1p", S.log1p, -0.5, 1.0, sp.log1p, "rel")
    out["log1p_rel"] = rel(emu, truth)
    xs = fp16_values(-0.999, 60000.0)
    xs = xs[xs != 0]
    measure("log1p", S.log1p, -0.999, 60000.0, sp.log1p, "rel", xs=xs)
    xs = fp16_values(-0.5, 1.0)
    xs = xs[xs != 0]
    emu_n, ref_n = run(lambda x: af.log(x + 1.0), xs)
    row(
        "log(1 + x) (naive)", "[-0.5, 1]", "rel", rel(emu_n, sp.log1p(xs)), rel(ref_n, sp.log1p(xs))
    )
    return out


def walls():
    out = {}
    for name, build, x_max, fn in (
        ("gamma", S.gamma, S.GAMMA_X_MAX, sp.gamma),
        ("i0", S.i0, S.I0_X_MAX, sp.i0),
    ):
        nxt = float(np.nextafter(np.float16(x_max), np.float16(np.inf)))
        xs = np.array([x_max, nxt, 20.0, 1000.0])
        x = af.input((4,), name="x")
        y, over = build(x, return_wall=True)
        got, mask = af.compile([y, over])(xs)
        out[f"{name}_wall_x"] = x_max
        out[f"{name}_at_wall"] = float(got[0])
        out[f"{name}_at_wall_rel"] = abs(float(got[0]) / fn(x_max) - 1)
        out[f"{name}_past_wall_inf"] = bool(np.all(np.isposinf(got[1:])))
        out[f"{name}_wall_mask_ok"] = mask.tolist() == [0.0, 1.0, 1.0, 1.0]
        print(
            f"{name}: last finite fp16 x = {x_max} ({name}(x) = {fn(x_max):.1f}), emulator "
            f"{got[0]:.1f}; next x = {nxt}: {got[1]} (mask {mask.tolist()})"
        )
    return out


def recipes():
    """exp_wide / log_wide against the native exp / log (steps 0 is the native op)."""
    out = {}
    xs = fp16_values(-9.0, 11.0)  # results in the fp16 normal range
    print("\nexp_wide(x, steps) on [-9, 11]: max / rms relative error (steps 0 = native exp)")
    errs = {}
    for steps in range(5):
        emu, _ = run(S.exp_wide, xs, steps=steps)
        r = np.abs(emu / np.exp(xs) - 1)
        errs[steps] = (float(r.max()), float(np.sqrt(np.mean(r**2))))
        print(f"  steps={steps}: max {errs[steps][0]:.2e}  rms {errs[steps][1]:.2e}")
    out["exp_wide_beats_native"] = any(
        errs[s][0] < errs[0][0] or errs[s][1] < errs[0][1] for s in range(1, 5)
    )
    row(
        "exp_wide (steps=2)",
        "[-9, 11]",
        "rel",
        errs[2][0],
        float("nan"),
        f"native exp: {errs[0][0]:.1e}",
    )
    print(
        "log_wide(x, steps): max abs error on [2^-14, 60000] and on [0.5, 2] (steps 0 = native log)"
    )
    xs = fp16_values(2.0**-14, 60000.0)
    near = (xs >= 0.5) & (xs <= 2.0)
    errs = {}
    for steps in range(5):
        emu, _ = run(S.log_wide, xs, steps=steps)
        a = np.abs(emu - np.log(xs))
        errs[steps] = (float(a.max()), float(a[near].max()))
        print(f"  steps={steps}: max abs {errs[steps][0]:.2e}  near 1 {errs[steps][1]:.2e}")
    out["log_wide_beats_native"] = any(
        errs[s][0] < errs[0][0] or errs[s][1] < errs[0][1] for s in range(1, 5)
    )
    row(
        "log_wide (steps=2)",
        "[2^-14, 60000]",
        "abs",
        errs[2][0],
        float("nan"),
        f"native log: {errs[0][0]:.1e}",
    )
    return out


def cumsum_check():
    rng = np.random.default_rng(0)
    data = f16(rng.standard_normal((8, 512)))
    x = af.input(data.shape, name="x")
    mine, native = af.compile([S.cumsum(x), af.cumsum(x)])(data)
    exact = np.cumsum(data, axis=-1)
    out = {
        "cumsum_bitwise_vs_af_cumsum": bool(np.array_equal(mine, native)),
        "cumsum_max_rel_vs_float64": float(np.max(np.abs(mine - exact) / np.abs(exact).max())),
        "cumsum_narrow_sum_abs_err": float(
            np.max(np.abs(af.compile(x.sum(-1))(data) - exact[:, -1]))
        ),
        "cumsum_wide_last_abs_err": float(np.max(np.abs(mine[:, -1] - exact[:, -1]))),
    }
    row(
        "cumsum (x @ triu_ones)",
        "N(0,1), 8x512",
        "abs",
        float(np.max(np.abs(mine - exact))),
        float("nan"),
        "exact + 1 rounding",
    )
    return out


def demonstrations():
    """The spec's "why": a full-period sin polynomial and a raw Horner in x for lgamma,
    fitted on the fly with the same Remez code as scripts/fit_special.py."""
    spec = importlib.util.spec_from_file_location(
        "fit_special", ROOT / "scripts" / "fit_special.py"
    )
    fit = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = fit  # dataclasses look their module up
    spec.loader.exec_module(fit)
    out = {}
    # sin over the full period: odd degree 11, sin(r)/r in r^2 on [0, pi^2]
    g = fit._sin_over_r
    coef, _ = fit.remez(g, 0.0, np.pi**2, 5, "rel")
    c16 = fit.f16(coef)
    xs = fp16_values(-np.pi, np.pi)

    def full(x):
        v = x * x
        p = v * float(c16[-1]) + float(c16[-2])
        for c in reversed(c16[:-2]):
            p = p * v + float(c)
        return x * p

    emu, ref = run(full, xs)
    out["sin_full_period_abs"] = absolute(emu, np.sin(xs))
    row(
        "sin, full-period poly (deg 11)",
        "[-pi, pi]",
        "abs",
        out["sin_full_period_abs"],
        absolute(ref, np.sin(xs)),
        "~0.2 at +-pi",
    )
    # lgamma as a raw Horner in x on [1, 8], degree 10
    coef, _ = fit.remez(sp.gammaln, 1.0, 8.0, 10, "abs")
    c16 = fit.f16(coef)
    xs = fp16_values(1.0, 8.0)

    def raw(x):
        p = x * float(c16[-1]) + float(c16[-2])
        for c in reversed(c16[:-2]):
            p = p * x + float(c)
        return p

    emu, ref = run(raw, xs)
    out["lgamma_raw_x_abs"] = absolute(emu, sp.gammaln(xs))
    out["lgamma_raw_x_max_coef"] = float(np.max(np.abs(c16)))
    row(
        "lgamma, raw Horner in x (deg 10)",
        "[1, 8]",
        "abs",
        out["lgamma_raw_x_abs"],
        absolute(ref, sp.gammaln(xs)),
        "~8",
    )
    return out


def fit_table():
    data = S._DATA
    print(f"\nfits ({data['source']}; {data['method']}):")
    print(
        f"  {'fit':<9} {'deg':>3} {'kind':>4} {'float64':>9} {'fp16 coef':>9} {'fp16 Horner':>11}"
    )
    for name, rec in data["fits"].items():
        print(
            f"  {name:<9} {rec['degree']:>3} {rec['error_kind']:>4} {rec['err_fit']:9.2e} "
            f"{rec['err_fp16_coeffs']:9.2e} {rec['err_fp16_horner']:11.2e}"
        )


def op_counts():
    builds = {
        "erf": S.erf,
        "erfc": S.erfc,
        "sin": S.sin,
        "cos": S.cos,
        "lgamma": S.lgamma,
        "gamma": S.gamma,
        "i0": S.i0,
        "expm1": S.expm1,
        "log1p": S.log1p,
        "exp_wide(2)": S.exp_wide,
        "log_wide(2)": S.log_wide,
    }
    counts = {k: node_count(b) for k, b in builds.items()}
    ones = {
        k: node_count(lambda x, b=b: b(x, constants="ones"))
        for k, b in builds.items()
        if "wide" not in k
    }
    print("\nops per element (graph nodes, constants as weights / as ones * c):")
    print(
        "  " + ", ".join(f"{k} {counts[k]}" + (f"/{ones[k]}" if k in ones else "") for k in counts)
    )
    return counts


def markdown():
    lines = [
        "| function | domain (every fp16 input) | metric | emulator | float64 graph "
        "| spec / gate |",
        "|---|---|---|---|---|---|",
    ]
    for fn, dom, metric, emu, ref, spec in ROWS:
        refs = "-" if ref != ref else f"{ref:.2e}"
        lines.append(f"| {fn} | {dom} | {metric} | {emu:.2e} | {refs} | {spec} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the docs table")
    args = ap.parse_args(argv)
    results = accuracy()
    results.update(demonstrations())
    print()
    results.update(walls())
    results.update(recipes())
    results.update(cumsum_check())
    fit_table()
    op_counts()
    print(
        f"\n{'function':<32} {'domain':<22} {'metric':<6} {'emulator':>9} {'float64':>9}"
        "  spec / gate"
    )
    for fn, dom, metric, emu, ref, spec in ROWS:
        print(f"{fn:<32} {dom:<22} {metric:<6} {emu:9.2e} {ref:9.2e}  {spec}")
    if args.markdown:
        print("\n" + markdown())
    print()
    for key, value in results.items():
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        print(f"RESULT special_{key}={text}")


if __name__ == "__main__":
    main()
