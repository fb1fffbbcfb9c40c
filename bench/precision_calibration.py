"""Calibrate the precision risk proxy against the emulator's measured error.

For narrow sums (sum, mean, sums of non-negative producers), softmax, layer/rms/l2 norm
rows and two wide-accumulator sums (``x @ ones`` and ``af.reduce_sum_to_matmul``) over
K in {64, 256, 512, 1024, 2048, 4096, 16384} terms, with rows drawn from N(0, 1),
N(1, 1) and U(0, 1) (three seeds each), it measures the emulator's error against the
float64 reference (``af.reference``) and prints it beside the static proxy of
``precision_risk``, on the generic model and on the M1 (route 192) and M5 (route 384)
reduction routes.

Error metric: the tuner's normwise relative error of the output,
``max|emu - ref| / max|ref|`` over all its elements, the median over the seeds (the
relative L2 error, ``aneforge.metrics.compare``'s ``rel_l2``, is printed beside it). For
the factor-10 check a measured error is capped at 1, the top of the proxy's scale (no
correct digits left). "listed" means a narrow_sum node in ``precision_risk(prog,
verbose=True)``; "hot" means a default hotspot (what compile warns about).

    python bench/precision_calibration.py            # the full grid (about a minute)
    python bench/precision_calibration.py --quick    # generic model, K <= 4096

Last lines (machine-readable):
    RESULT precision_flagged_cells=<n> within_10x=<n> worst_ratio=<proxy/measured ...>
    RESULT precision_unflagged_cells=<n> max_error=<largest measured error> at=<cell>
    RESULT precision_hotspot_cells=<n> min_error=<smallest measured error> at=<cell>
    RESULT precision_sum K=<K> data=<dist> proxy=<p> measured=<e>   (generic, per K)
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af
from aneforge.analysis.precision import precision_risk
from aneforge.metrics import compare
from aneforge.testing.calibration_grid import DISTS, GRAPHS

ROWS = 32
SEEDS = (0, 1, 2)
KS = (64, 256, 512, 1024, 2048, 4096, 16384)
NOISE = 5e-3  # the tuner's fp16-noise tolerance (Numerics, docs/sources.md; DEFAULT_ATOL)


def measure(graph, dist, k, target=None):
    """(proxy, listed, hotspot, median max-normwise error, median rel L2) of one cell."""
    x = af.input((ROWS, k), name="x")
    y = GRAPHS[graph](x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile(y, opt=0, target=target)
    rep = precision_risk(prog, verbose=True)
    sums = rep.by_mode("narrow_sum")
    proxy = max((e.proxy for e in sums), default=0.0)
    l2, mx = [], []
    for seed in SEEDS:
        data = DISTS[dist](np.random.default_rng(seed), (ROWS, k))
        got = np.asarray(prog(data), np.float64)
        ref = np.asarray(af.reference(prog, data), np.float64)
        l2.append(compare(got, ref)["rel_l2"])
        mx.append(float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))))
    return proxy, bool(sums), bool(rep.hotspots), float(np.median(mx)), float(np.median(l2))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="generic model, K <= 4096")
    args = parser.parse_args()
    targets = (None,) if args.quick else (None, "M1", "M5")
    ks = [k for k in KS if k <= 4096] if args.quick else list(KS)
    print(
        f"{'graph':12s} {'data':7s} {'K':>6s} {'target':7s} {'list':4s} {'hot':3s} "
        f"{'proxy':>8s} {'maxrel':>8s} {'relL2':>8s} {'ratio':>7s}"
    )
    cells = []
    for target in targets:
        for graph in GRAPHS:
            for dist in DISTS:
                for k in ks:
                    proxy, listed, hot, err, l2 = measure(graph, dist, k, target)
                    ratio = proxy / min(err, 1.0) if listed else float("nan")
                    print(
                        f"{graph:12s} {dist:7s} {k:6d} {target or 'generic':7s} "
                        f"{'yes' if listed else '-':4s} {'yes' if hot else '-':3s} "
                        f"{proxy:8.2e} {err:8.2e} {l2:8.2e} {ratio:7.2f}",
                        flush=True,
                    )
                    cells.append((graph, dist, k, target, listed, hot, proxy, err, ratio))
    _results(cells)
    return 0


def _where(cell) -> str:
    graph, dist, k, target = cell[:4]
    return f"{graph}/{dist}/K{k}/{target or 'generic'}"


def _results(cells) -> None:
    listed = [c for c in cells if c[4]]
    within = sum(0.1 <= c[8] <= 10 for c in listed)
    worst = sorted(listed, key=lambda c: -abs(np.log10(c[8])))[:3]
    shown = ",".join(f"{_where(c)}:{c[8]:.2f}" for c in worst)
    print(f"RESULT precision_flagged_cells={len(listed)} within_10x={within} worst_ratio={shown}")
    quiet = [c for c in cells if not c[4]]
    loud = max(quiet, key=lambda c: c[7])
    print(
        f"RESULT precision_unflagged_cells={len(quiet)} max_error={loud[7]:.2e} "
        f"at={_where(loud)} (tuner noise {NOISE:g})"
    )
    hot = [c for c in cells if c[5]]
    if hot:
        low = min(hot, key=lambda c: c[7])
        print(f"RESULT precision_hotspot_cells={len(hot)} min_error={low[7]:.2e} at={_where(low)}")
    for c in cells:
        if c[0] == "sum" and c[3] is None:
            print(f"RESULT precision_sum K={c[2]} data={c[1]} proxy={c[6]:.2e} measured={c[7]:.2e}")


if __name__ == "__main__":
    sys.exit(main())
