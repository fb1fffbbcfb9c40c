"""Timing two engines against each other on a shared, noisy machine (bench scripts).

:func:`best_blocks` times each engine in blocks of runs, the blocks of the two engines
taking turns, and keeps each engine's best block median. Not alternated run by run:
both engines' worker threads spin a while after each run (onnxruntime's intra-op pool,
the OpenMP layer under numba), and on a small machine the spinning pool of the one just
run steals the cores of the other (run alternately, SqueezeNet's emulation took 60 ms
against 31 ms alone, and onnxruntime's time moved 3.3-10 ms). Several turns, each engine
its best block: a burst of load from other tenants of the host then slows one block of
one engine, not the ratio (single blocks moved ResNet-50's ratio from 3.7x to 5.2x
between two runs of the same code).

Example (from a bench script, whose folder is on ``sys.path``)::

    from timing import best_blocks
    emu_s, ort_s = best_blocks(emulate, infer, repeats=3)
"""

from __future__ import annotations

import statistics
import time


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best_blocks(first, second, repeats: int, rounds: int = 3) -> tuple[float, float]:
    """Seconds of ``first()`` and of ``second()``: of ``rounds`` turns, each a warm-up
    and a block of ``repeats`` timed runs of one then the other, each engine's smallest
    block median."""
    first_blocks, second_blocks = [], []
    for _ in range(rounds):
        first()
        first_blocks.append(statistics.median(_timed(first) for _ in range(repeats)))
        second()
        second_blocks.append(statistics.median(_timed(second) for _ in range(repeats)))
    return min(first_blocks), min(second_blocks)
