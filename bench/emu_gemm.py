"""Benchmark the emulator's fast matmul against NumPy's own float32 matmul.

Times ``gemm_fast`` on a (1, N, N) @ (1, N, N) fp16 product (N = 1024 by default) and
NumPy's float32 ``@`` on the same values, in the same process, alternating run by run
after a warm-up, and reports the medians. The last line is machine-readable::

    RESULT emu_gemm_ratio_vs_numpy_f32=<numpy_f32_time / gemm_fast_time>

Both libraries run their own thread pools (OpenBLAS, numba's OpenMP). OpenBLAS workers
keep spinning for a while after each call, which steals a core from the next gemm_fast
call if the two are interleaved back to back (on 2 cores that halves gemm_fast's speed;
``OPENBLAS_THREAD_TIMEOUT=4`` makes them sleep at once and removes the effect). So each
run lets the machine settle, makes one untimed call, and times a short burst of calls of
one library; a run's figure is the median of its burst (steady state for both).
``--settle 0 --burst 1`` gives strict back-to-back alternation instead.

Run from the repository root:

    PYTHONPATH=src python3 bench/emu_gemm.py [--size 1024] [--runs 9] [--check]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    from aneforge.emulator import gemm as emu
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from aneforge.emulator import gemm as emu


def _timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _burst(fn, args, reps, settle):
    """Median time of ``reps`` calls, after a pause and one untimed call."""
    time.sleep(settle)
    fn(*args)
    return statistics.median(_timed(fn, *args) for _ in range(reps))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024, help="M = K = N (default 1024)")
    parser.add_argument("--runs", type=int, default=9, help="timed runs of each (>= 5)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs of each first")
    parser.add_argument("--burst", type=int, default=3, help="timed calls per run (median)")
    parser.add_argument("--settle", type=float, default=0.3, help="pause before a burst (s)")
    parser.add_argument(
        "--check", action="store_true", help="also compare with gemm_reference (slow)"
    )
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be at least 5")

    n = args.size
    rng = np.random.default_rng(0)
    a16 = rng.standard_normal((1, n, n)).astype(np.float16)
    b16 = rng.standard_normal((1, n, n)).astype(np.float16)
    a32 = a16[0].astype(np.float32)
    b32 = b16[0].astype(np.float32)
    print(f"emu_gemm: {n}x{n}x{n}, cpus={os.cpu_count()}, numpy {np.__version__}")
    print(f"FAST_PATH_AVAILABLE={emu.FAST_PATH_AVAILABLE}")

    first = _timed(emu.gemm_fast, a16, b16)
    print(f"first gemm_fast call (compile or cache load, self-check, one run): {first:.3f} s")
    if args.check:
        same = emu._same_bits(emu.gemm_fast(a16, b16), emu.gemm_reference(a16, b16))
        print(f"bit-identical to gemm_reference: {same}")
        if not same:
            return 1

    for _ in range(args.warmup):
        a32 @ b32
        emu.gemm_fast(a16, b16)

    t_np, t_fast = [], []
    for run in range(args.runs):
        t_np.append(_burst(np.matmul, (a32, b32), args.burst, args.settle))
        t_fast.append(_burst(emu.gemm_fast, (a16, b16), args.burst, args.settle))
        print(
            f"run {run}: numpy_f32 {t_np[-1] * 1e3:8.3f} ms   gemm_fast {t_fast[-1] * 1e3:8.3f} ms"
            f"   ratio {t_np[-1] / t_fast[-1]:.3f}"
        )

    med_np, med_fast = statistics.median(t_np), statistics.median(t_fast)
    macs = n**3
    print(
        f"median: numpy_f32 {med_np * 1e3:.3f} ms ({macs / med_np / 1e9:.1f} GMAC/s), "
        f"gemm_fast {med_fast * 1e3:.3f} ms ({macs / med_fast / 1e9:.1f} GMAC/s)"
    )
    print(f"RESULT emu_gemm_ratio_vs_numpy_f32={med_np / med_fast:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
