"""Accuracy of the analytic per-chip cost model against published silicon timings.

For every row of ``src/aneforge/data/silicon_calibration.csv`` (a copy of
``../shared/reference/silicon/calibration.csv``), builds the workload with the graph
API, estimates it for its chip with ``af.estimate(..., target=chip)`` and with the
spec's own formula and constants (the baseline, scaled from its anchors by the spec's
rules), and prints predicted vs measured. The summary figures are the geometric-mean
error factor ``exp(mean |ln(pred / meas)|)`` and the worst factor, for both. Then the
same for ``src/aneforge/data/silicon_published.csv`` (published timings on nine more
chips), summarized per chip, and the stored leave-one-chip-out errors of the kernel rows
(``python scripts/fit_analytic.py --cv`` recomputes them, about 15 minutes).

Then **whole models** (``src/aneforge/data/silicon_models.csv``): every row's network
is built in-graph at its published size (``aneforge.models.zoo``) and priced by every
path that prices it: the analytic model for the row's chip, the default model
(``target=None``, measured on an M5 Pro: only rows on M5-family chips) and the spec
formula. Rows are split by role: ``fit`` (ANEForge's own, which the fits saw) and
``validation`` (everyone else's, never fitted on).

    python bench/cost_accuracy.py [--csv other_timings.csv] [--traffic nodes|kernel]

``--csv`` scores a kernel-timing file of your own (same columns) instead of the bundled
ones (and skips the whole models). ``--traffic`` prices with that memory leg
(``af.estimate(..., traffic=)``; default the estimate's own) under the bundled
constants, which ``scripts/fit_analytic.py`` fitted on the default leg; the stored
cross-validation is that fit's.

Last lines (machine-readable; ``published_*`` only without ``--csv``):
    RESULT model_geomean_error=...             RESULT model_worst_error=...
    RESULT spec_geomean_error=...              RESULT spec_worst_error=...
    RESULT published_model_geomean_error=...   RESULT published_model_worst_error=...
    RESULT published_spec_geomean_error=...    RESULT published_spec_worst_error=...
    RESULT kernel_cv_geomean_error=...          RESULT kernel_cv_worst_error=...
    RESULT models_<path>_<role>_geomean_error=...  (and _worst_error), for path in
        analytic, default, spec and role in fit, validation
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

import warnings

from aneforge.compiler.program import Program
from aneforge.cost.analytic import DEFAULT_TRAFFIC, TRAFFIC
from aneforge.cost.silicon import (
    PUBLISHED,
    build_workload,
    chip_arch,
    error_factors,
    load_model_rows,
    load_rows,
)
from aneforge.cost.spec_baseline import spec_estimate_us
from aneforge.data import load
from aneforge.errors import PreflightError
from aneforge.models.zoo import build
from aneforge.targets.names import resolve_target

DEFAULT_FAMILY_ARCH = resolve_target(af.cost.DEFAULT_CHIP).arch


def score(rows, verbose: bool, traffic: str = DEFAULT_TRAFFIC) -> tuple[list, list]:
    """(model, spec) lists of (predicted, measured) pairs, printing rows or per-chip lines."""
    model, spec, scored = [], [], []
    if verbose:
        print(f"{'workload':<42} {'arch':>5} {'measured':>10} {'model':>10} {'spec':>10}  (us)")
    for row in rows:
        arch = chip_arch(row.chip)
        out = build_workload(row)
        try:
            predicted = af.estimate(out, target=row.chip, traffic=traffic)  # with its memory
        except PreflightError as err:  # aneforge prices no program it cannot compile
            first = str(err).splitlines()[1].strip()
            print(f"not scored, does not compile for {arch}: {row.label} ({first})")
            continue
        scored.append(row)
        model.append((predicted, row.latency_us))
        spec.append((spec_estimate_us(out, arch), row.latency_us))
        if verbose:
            pred, base = model[-1][0], spec[-1][0]
            print(f"{row.label:<42} {arch:>5} {row.latency_us:10.1f} {pred:10.1f} {base:10.1f}")
    if not verbose:
        head = ("chip", "arch", "rows", "model geo", "worst", "spec geo", "worst")
        print("{:<10} {:>5} {:>5} {:>10} {:>7} {:>9} {:>7}".format(*head))
        for chip in dict.fromkeys(r.chip for r in scored):
            idx = [i for i, r in enumerate(scored) if r.chip == chip]
            mg, mw = error_factors([model[i] for i in idx])
            sg, sw = error_factors([spec[i] for i in idx])
            arch = chip_arch(chip)
            cells = f"{mg:>9.2f}x {mw:>6.2f}x {sg:>8.2f}x {sw:>6.2f}x"
            print(f"{chip:<10} {arch:>5} {len(idx):>5} {cells}")
    return model, spec


def summarize(model, spec, prefix: str) -> list[str]:
    mg, mw = error_factors(model)
    sg, sw = error_factors(spec)
    print(f"model: geometric-mean error {mg:.3f}x, worst {mw:.3f}x")
    print(f"spec formula: geometric-mean error {sg:.3f}x, worst {sw:.3f}x")
    return [
        f"RESULT {prefix}model_geomean_error={mg:.3f}",
        f"RESULT {prefix}model_worst_error={mw:.3f}",
        f"RESULT {prefix}spec_geomean_error={sg:.3f}",
        f"RESULT {prefix}spec_worst_error={sw:.3f}",
    ]


def kernel_cv() -> list[str]:
    """The stored leave-one-chip-out errors of the kernel rows (per chip and overall)."""
    stored = load("analytic_model.json")
    cv = stored["errors"].get("leave_one_chip_out")
    if not cv:
        print("no stored cross-validation: run python scripts/fit_analytic.py --cv --write")
        return []
    print("\nKernel rows, leave-one-chip-out (stored by scripts/fit_analytic.py --cv; each")
    print("benchmark harness's rows compared through its fitted factor):")
    for name, factor in stored.get("harness_factors", {}).items():
        print(f"  harness {name}: measured / reference-method time = {factor:.3f}")
    for chip, e in sorted(cv["chips"].items()):
        print(f"  {chip:<10} {e['arch']:>5} rows {e['rows']:3d}  geo {e['geomean_error']:.2f}x"
              f"  worst {e['worst_error']:.2f}x")  # fmt: skip
    logs = [
        (e["rows"], e["geomean_error"], e["worst_error"])
        for name, e in cv.items()
        if name.endswith(".csv") and name != "silicon_models.csv"
    ]
    rows = sum(n for n, _, _ in logs)
    geo = math.exp(sum(n * math.log(g) for n, g, _ in logs) / rows)
    worst = max(w for _, _, w in logs)
    print(f"  all kernel rows: {rows}, geometric-mean {geo:.3f}x, worst {worst:.3f}x")
    return [
        f"RESULT kernel_cv_geomean_error={geo:.3f}",
        f"RESULT kernel_cv_worst_error={worst:.3f}",
    ]


def whole_models(traffic: str = DEFAULT_TRAFFIC) -> list[str]:
    """Price every whole-model row on every path; print rows and per-(path, role) errors.

    Rows with an ``excluded`` reason are listed with it and not scored; int8 rows are
    priced as the whole-graph int8 variant (``int8=True``)."""
    rows = load_model_rows()
    print("\nWhole models (data/silicon_models.csv):")
    head = ("row", "role", "arch", "measured", "analytic", "default", "spec")
    print("{:<44} {:>10} {:>5} {:>9} {:>9} {:>9} {:>9}  (us)".format(*head))
    pairs: dict = {}
    per_chip: dict = {}
    built: dict = {}
    skipped = []
    for r in rows:
        label = f"{r.label} {r.precision}"
        if r.excluded:
            skipped.append(f"  {label}: {r.excluded}")
            continue
        key = (r.model, r.batch, r.size)
        if key not in built:
            built[key] = Program.from_outputs([build(r.model, batch=r.batch, size=r.size)[1]])
        prog, arch, int8 = built[key], chip_arch(r.chip), r.precision == "int8"
        got = {"analytic": af.estimate(prog, int8=int8, target=r.chip, traffic=traffic)}
        if arch == DEFAULT_FAMILY_ARCH:
            got["default"] = af.estimate(prog, int8=int8, traffic=traffic)
        if not int8:
            got["spec"] = spec_estimate_us(prog, arch)
        for path, pred in got.items():
            pairs.setdefault((path, r.role), []).append((pred, r.latency_us))
        per_chip.setdefault(r.chip, []).append((got["analytic"], r.latency_us))
        cells = [f"{got[p]:9.0f}" if p in got else f"{'-':>9}" for p in got and PATHS]
        print(f"{label:<44} {r.role:>10} {arch:>5} {r.latency_us:9.0f} {' '.join(cells)}")
    onnx_cross_check(built.get(("resnet50", 1, 224)), traffic)
    print("not scored:")
    print("\n".join(skipped) or "  (none)")
    print("analytic model per chip:")
    for chip, ps in per_chip.items():
        geo, worst = error_factors(ps)
        print(f"  {chip:<11} rows {len(ps):3d}  geometric-mean {geo:.2f}x  worst {worst:.2f}x")
    results = []
    for (path, role), ps in sorted(pairs.items()):
        geo, worst = error_factors(ps)
        print(f"  {path:<9} {role:<10} rows {len(ps):3d}  geometric-mean {geo:.3f}x  "
              f"worst {worst:.3f}x")  # fmt: skip
        results += [
            f"RESULT models_{path}_{role}_geomean_error={geo:.3f}",
            f"RESULT models_{path}_{role}_worst_error={worst:.3f}",
        ]
    return results


PATHS = ("analytic", "default", "spec")


def onnx_cross_check(zoo_program, traffic: str = DEFAULT_TRAFFIC) -> None:
    """The ONNX light ResNet-50 (the onnx wheel's, imported) priced beside the zoo's: the
    same network through the user's import path."""
    try:
        import onnx
        from onnx import version_converter

        from aneforge.models.light import FILES, light_dir
    except ImportError:
        print("(onnx is not installed: no ONNX cross-check)")
        return
    model = version_converter.convert_version(onnx.load(str(light_dir() / FILES["resnet50"])), 13)
    light = af.from_onnx(model).compile()
    for name, prog in (("light_resnet50.onnx", light), ("zoo resnet50", zoo_program)):
        if prog is not None:
            m5, m1 = (af.estimate(prog, target=t, traffic=traffic) for t in ("M5 Pro", "M1"))
            default = af.estimate(prog, traffic=traffic)
            print(f"  {name:<20} {prog.flops / 1e9:.2f} GFLOP: M5 Pro analytic {m5:.0f} us, "
                  f"default {default:.0f} us, M1 analytic {m1:.0f} us")  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="timings in the calibration.csv format")
    parser.add_argument("--traffic", choices=TRAFFIC, default=DEFAULT_TRAFFIC,
                        help=f"the memory leg (default {DEFAULT_TRAFFIC}, estimate's)")  # fmt: skip
    args = parser.parse_args(argv)
    leg = args.traffic
    print(f"traffic leg: {leg}")
    if args.csv:
        results = summarize(*score(load_rows(args.csv.read_text()), True, leg), "")
    else:
        print("Calibration timings (the spec's reference file):")
        results = summarize(*score(load_rows(), True, leg), "")
        print("\nPublished timings on other chips (data/silicon_published.csv):")
        results += summarize(*score(load_rows(bundled=PUBLISHED), False, leg), "published_")
        results += kernel_cv()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results += whole_models(leg)
    print("\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
