"""The route pass on conv -> lrn -> relu: the cut it removes and what that is worth.

Builds conv(16->16, 3x3) -> lrn(size 5) -> relu on a [1, 16, 32, 32] input, compiles it
with ``opt=0`` (native lrn bridge: two fused regions and one cut) and with the default
``opt='routes'`` (lrn replaced by its fused decomposition: one region, no cut), prints
both estimates and their ratio, and compares the outputs bit for bit on seeded inputs
(the registry classes the lrn route bit-identical; tests/optimizer/test_exactness.py
measures that class over random graphs and special values).

    python bench/routes_lrn.py

Last lines (machine-readable):
    RESULT routes_lrn_estimate_drop=<opt0 estimate / routes estimate>
    RESULT routes_lrn_max_rel_dev=<max |routes - opt0| / max |opt0|>
    RESULT routes_lrn_bit_identical=<True|False>
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af


def main() -> int:
    rng = np.random.default_rng(0)
    x = af.input((1, 16, 32, 32), name="x")
    w = rng.standard_normal((16, 16, 3, 3)) * 0.1
    y = af.lrn(af.conv(x, w, padding=1), size=5).relu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.DispatchFloorWarning)
        native, routed = af.compile(y, opt=0), af.compile(y)
    for label, prog in (("opt=0", native), ("opt='routes'", routed)):
        est = af.estimate_breakdown(prog)
        print(
            f"{label:>13}: {prog.op_count:2d} ops, {est.n_regions} region(s), "
            f"{est.n_cuts} cut(s), estimate {est.total_us:10.1f} us"
        )
    print("route decisions:", routed.passes["routes"])
    feed = rng.standard_normal(x.shape)
    a, b = native(feed), routed(feed)
    dev = float(np.max(np.abs(a - b)) / np.max(np.abs(a)))
    same = bool(np.array_equal(a.view(np.uint32), b.view(np.uint32)))
    print(f"RESULT routes_lrn_estimate_drop={af.estimate(native) / af.estimate(routed):.1f}")
    print(f"RESULT routes_lrn_max_rel_dev={dev:.3g}")
    print(f"RESULT routes_lrn_bit_identical={same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
