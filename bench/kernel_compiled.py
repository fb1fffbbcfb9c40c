"""A fused region as compiled kernels against the same region run op by op.

The region is ten ops over a 16M-element fp16 tensor: a scale, a shift and a ReLU, an
exp of a scaled value, products, a shifted division and a row sum. Both paths run in
this process on the same input: the op-by-op emulator (``execute_fp16(...,
regions=False)``: NumPy kernels per node, compiled ones where they exist) and the
default path (one generated numba kernel per materialized node,
:mod:`aneforge.kernel.compiled`). Their outputs are checked bit for bit first.

    python bench/kernel_compiled.py [--elements 16777216] [--repeats 5]

Last line: ``RESULT kernel_compiled_speedup=<op-by-op time / compiled time>`` (median of
``--repeats`` runs each, after one warm-up run that compiles or loads the kernels).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.emulator.interpreter import execute_fp16


def region(elements: int):
    """The ten-op region over a (rows, 1024) input."""
    x = af.input((elements // 1024, 1024), name="x")
    a = (x * 0.5 + 0.25).relu()
    b = (x * 0.125).exp()
    y = (a * a * b) / (b + 1.0)
    return af.compile(y.sum(axis=-1), opt=0)


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 24)
    parser.add_argument("--repeats", type=int, default=5)
    opts = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    prog = region(opts.elements)
    ops = [n.op for n in prog.nodes if n.op not in ("input", "weight")]
    x = np.random.default_rng(0).standard_normal(prog.inputs[0].shape).astype(np.float16)
    execute_fp16(prog, [x])  # a plan not yet checked here runs op by op on its first call
    t0 = time.perf_counter()
    fast = execute_fp16(prog, [x])[0]
    first = time.perf_counter() - t0
    slow = execute_fp16(prog, [x], regions=False)[0]
    if not np.array_equal(fast.view(np.uint16), slow.view(np.uint16)):
        print("compiled and op-by-op outputs differ", file=sys.stderr)
        return 1
    t_ops = timed(lambda: execute_fp16(prog, [x], regions=False), opts.repeats)
    t_kernels = timed(lambda: execute_fp16(prog, [x]), opts.repeats)
    print(f"region: {len(ops)} ops ({', '.join(ops)}) on {x.size} elements")
    print(f"first compiled run (compile or load + check): {first:.2f} s")
    print(f"op by op: {t_ops * 1e3:.1f} ms   compiled: {t_kernels * 1e3:.1f} ms")
    print(f"RESULT kernel_compiled_speedup={t_ops / t_kernels:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
