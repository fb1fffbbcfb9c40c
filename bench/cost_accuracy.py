"""Accuracy of the analytic per-chip cost model against published silicon timings.

For every row of ``src/aneforge/data/silicon_calibration.csv`` (a copy of
``../shared/reference/silicon/calibration.csv``), builds the workload with the graph
API, estimates it for its chip with ``af.estimate(..., target=arch)`` and with the
spec's own formula and constants (the baseline), and prints predicted vs measured. The
summary figures are the geometric-mean error factor ``exp(mean |ln(pred / meas)|)`` and
the worst factor, for both.

    python bench/cost_accuracy.py [--csv other_timings.csv]

Last lines (machine-readable):
    RESULT model_geomean_error=...   RESULT model_worst_error=...
    RESULT spec_geomean_error=...    RESULT spec_worst_error=...
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

from aneforge.cost.silicon import build_workload, chip_arch, error_factors, load_rows
from aneforge.cost.spec_baseline import spec_estimate_us


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="timings in the calibration.csv format")
    args = parser.parse_args(argv)
    rows = load_rows(args.csv.read_text() if args.csv else None)
    model, spec = [], []
    print(f"{'workload':<42} {'arch':>5} {'measured':>10} {'model':>10} {'spec':>10}  (us)")
    for row in rows:
        arch = chip_arch(row.chip)
        out = build_workload(row)
        pred = af.estimate(out, target=arch)
        base = spec_estimate_us(out, arch)
        model.append((pred, row.latency_us))
        spec.append((base, row.latency_us))
        print(f"{row.label:<42} {arch:>5} {row.latency_us:10.1f} {pred:10.1f} {base:10.1f}")
    mg, mw = error_factors(model)
    sg, sw = error_factors(spec)
    print(f"model: geometric-mean error {mg:.3f}x, worst {mw:.3f}x")
    print(f"spec formula: geometric-mean error {sg:.3f}x, worst {sw:.3f}x")
    print(f"RESULT model_geomean_error={mg:.3f}")
    print(f"RESULT model_worst_error={mw:.3f}")
    print(f"RESULT spec_geomean_error={sg:.3f}")
    print(f"RESULT spec_worst_error={sw:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
