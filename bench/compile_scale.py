"""Benchmark compile + estimate on chain graphs of 1k, 10k and 100k nodes.

A chain alternates cheap fused ops (mul by a scalar, relu, add of a scalar) on a small
tensor, so every node is on the critical path. For each size it times
``af.compile(out)`` (the default ``opt='routes'`` pass, floor check included) plus
``af.estimate(prog)``, median of several runs, and prints the time per node. The
scaling figure is the per-node time at the largest size over the per-node time at the
smallest (1.0 = perfectly linear).

    python bench/compile_scale.py [--sizes 1000 10000 100000] [--runs 3]

Last lines (machine-readable):
    RESULT compile_100k_seconds=<s>
    RESULT compile_per_node_ratio_100k_vs_1k=<ratio>
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import warnings
from pathlib import Path

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af


def chain(n: int):
    """A chain of ``n`` fused nodes on a [64, 64] input."""
    x = af.input((64, 64), name="x")
    y = x
    ops = (lambda t: t * 1.5, lambda t: t.relu(), lambda t: t + 0.25)
    for i in range(n):
        y = ops[i % 3](y)
    return y


def time_once(n: int) -> float:
    out = chain(n)
    gc.collect()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.DispatchFloorWarning)
        prog = af.compile(out)
    af.estimate(prog)
    elapsed = time.perf_counter() - start
    assert prog.op_count >= n
    return elapsed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    per_node = {}
    totals = {}
    for n in args.sizes:
        times = [time_once(n) for _ in range(args.runs)]
        totals[n] = statistics.median(times)
        per_node[n] = totals[n] / n
        print(f"n={n:>7}: {totals[n]:8.3f} s  ({per_node[n] * 1e6:6.2f} us/node)")
    small, large = min(args.sizes), max(args.sizes)
    print(f"RESULT compile_{large // 1000}k_seconds={totals[large]:.3f}")
    ratio = per_node[large] / per_node[small]
    print(f"RESULT compile_per_node_ratio_{large // 1000}k_vs_{small // 1000}k={ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
