"""Timing two engines against each other on a shared, noisy machine (bench scripts).

:func:`best_blocks` times each engine in blocks of runs, the blocks of the two engines
taking turns, and keeps each engine's best block median. Not alternated run by run:
both engines' worker threads spin a while after each run (onnxruntime's intra-op pool,
the OpenMP layer under numba), and on a small machine the spinning pool of the one just
run steals the cores of the other (run alternately, SqueezeNet's emulation took 60 ms
against 31 ms alone, and onnxruntime's time moved 3.3-10 ms). Several turns, each engine
its best block: a burst of load from other tenants of the host then slows one block of
one engine, not the ratio (single blocks moved ResNet-50's ratio from 3.7x to 5.2x
between two runs of the same code). A block lasts at least :data:`MIN_BLOCK_SECONDS`,
so a model of a few milliseconds gets as many runs as a burst needs to be outvoted in
the median (three runs of ShuffleNet's 17 ms emulation once gave 7.4x, against 3.7x to
5.6x otherwise).

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


MIN_BLOCK_SECONDS = 0.3  # a block's runs span at least this long (short models: more runs)


def _block_median(fn, repeats: int, min_seconds: float) -> float:
    """The median of at least ``repeats`` timed runs of ``fn``, more until they have
    taken ``min_seconds`` in all."""
    times: list[float] = []
    while len(times) < repeats or sum(times) < min_seconds:
        times.append(_timed(fn))
    return statistics.median(times)


def best_blocks(
    first, second, repeats: int, rounds: int = 3, min_block_s: float = MIN_BLOCK_SECONDS
) -> tuple[float, float]:
    """Seconds of ``first()`` and of ``second()``: of ``rounds`` turns, each a warm-up
    and a block of timed runs of one then the other, each engine's smallest block
    median. A block is ``repeats`` runs, or as many more as fill ``min_block_s``: a
    17 ms emulation and a 3 ms inference then each have a median of 18 and 100 runs,
    which a burst of load lasting a few runs does not move."""
    first_blocks, second_blocks = [], []
    for _ in range(rounds):
        first()
        first_blocks.append(_block_median(first, repeats, min_block_s))
        second()
        second_blocks.append(_block_median(second, repeats, min_block_s))
    return min(first_blocks), min(second_blocks)
