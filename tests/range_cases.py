"""What the range-analysis tests share: declared ranges drawn at random, and a readable
account of a value that escaped its interval."""

from __future__ import annotations

import numpy as np

#: Scales of the drawn ranges: ordinary, large, near fp16's limits, subnormal-small.
SCALES = (1.0, 3.0, 8.0, 300.0, 2.0**-12, 3000.0, 30000.0, 65504.0)


def draw_range(rng, scales=SCALES, negative: bool = True) -> tuple[float, float]:
    """A declared range at a random scale: straddling zero, positive, a single point,
    symmetric or (``negative``) negative; clamped to fp16's range."""
    scale = float(rng.choice(scales))
    kind = rng.integers(5 if negative else 4)
    a, b = sorted(rng.uniform(-1.0, 1.0, 2) * scale)
    if kind == 1:
        a, b = abs(a), abs(a) + abs(b)
    elif kind == 2:
        a = b = float(rng.uniform(-1, 1) * scale)
    elif kind == 3:
        a, b = -scale, scale
    elif kind == 4:
        a, b = -abs(b) - abs(a), -abs(a)
    return float(max(a, -65504.0)), float(min(b, 65504.0))


def describe_violation(rec, values) -> str:
    """One line on a node (a ``NodeInterval``) whose emulated ``values`` left its
    interval: the interval, the finite range seen and whether inf or NaN appeared."""
    v = np.asarray(values, dtype=np.float64)
    fin = v[np.isfinite(v)]
    seen = f"[{fin.min():.6g}, {fin.max():.6g}]" if fin.size else "no finite value"
    return (
        f"node %{rec.index} {rec.op} {rec.shape}: interval {rec.interval} but the emulator "
        f"gave {seen}, nan={bool(np.isnan(v).any())}, inf={bool(np.isinf(v).any())}"
    )


def assert_runs_inside(rep, per_input, context: str = "") -> int:
    """Run ``rep``'s program on each set of feeds (``per_input[i][k]``: the k-th feed of
    the program's i-th input) and assert no node leaves its interval; returns the runs."""
    runs = min(len(f) for f in per_input) if per_input else 1
    for k in range(runs):
        fed = [f[k] for f in per_input]
        bad = rep.violations(*fed)
        if bad:
            with np.errstate(all="ignore"):
                shown = [(float(np.min(f)), float(np.max(f))) for f in fed]
            raise AssertionError(f"{describe_violation(*bad[0])}; inputs {shown}{context}")
    return runs
