"""Accuracy of the analytic per-chip cost model against published silicon timings.

For every row of ``src/aneforge/data/silicon_calibration.csv`` (a copy of
``../shared/reference/silicon/calibration.csv``), builds the workload with the graph
API, estimates it for its chip with ``af.estimate(..., target=arch)`` and with the
spec's own formula and constants (the baseline, scaled from its anchors by the spec's
rules), and prints predicted vs measured. The summary figures are the geometric-mean
error factor ``exp(mean |ln(pred / meas)|)`` and the worst factor, for both. Then the
same for ``src/aneforge/data/silicon_published.csv`` (published timings on nine more
chips), summarized per chip.

    python bench/cost_accuracy.py [--csv other_timings.csv]

``--csv`` scores a file of your own (same columns) instead of the two bundled ones.

Last lines (machine-readable; ``published_*`` only without ``--csv``):
    RESULT model_geomean_error=...             RESULT model_worst_error=...
    RESULT spec_geomean_error=...              RESULT spec_worst_error=...
    RESULT published_model_geomean_error=...   RESULT published_model_worst_error=...
    RESULT published_spec_geomean_error=...    RESULT published_spec_worst_error=...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.cost.silicon import PUBLISHED, build_workload, chip_arch, error_factors, load_rows
from aneforge.cost.spec_baseline import spec_estimate_us


def score(rows, verbose: bool) -> tuple[list, list]:
    """(model, spec) lists of (predicted, measured) pairs, printing rows or per-chip lines."""
    model, spec = [], []
    if verbose:
        print(f"{'workload':<42} {'arch':>5} {'measured':>10} {'model':>10} {'spec':>10}  (us)")
    for row in rows:
        arch = chip_arch(row.chip)
        out = build_workload(row)
        model.append((af.estimate(out, target=arch), row.latency_us))
        spec.append((spec_estimate_us(out, arch), row.latency_us))
        if verbose:
            pred, base = model[-1][0], spec[-1][0]
            print(f"{row.label:<42} {arch:>5} {row.latency_us:10.1f} {pred:10.1f} {base:10.1f}")
    if not verbose:
        head = ("chip", "arch", "rows", "model geo", "worst", "spec geo", "worst")
        print("{:<10} {:>5} {:>5} {:>10} {:>7} {:>9} {:>7}".format(*head))
        for chip in dict.fromkeys(r.chip for r in rows):
            idx = [i for i, r in enumerate(rows) if r.chip == chip]
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="timings in the calibration.csv format")
    args = parser.parse_args(argv)
    if args.csv:
        results = summarize(*score(load_rows(args.csv.read_text()), verbose=True), "")
    else:
        print("Calibration timings (the spec's reference file):")
        results = summarize(*score(load_rows(), verbose=True), "")
        print("\nPublished timings on other chips (data/silicon_published.csv):")
        results += summarize(*score(load_rows(bundled=PUBLISHED), verbose=False), "published_")
    print("\n".join(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
