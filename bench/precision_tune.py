"""Precision-aware tuning (``af.optimizer.precision_tune.tune_precision``): the candidates.

Three cases, each tuned on the emulator with seeded standard-normal inputs, errors
measured against the fp32-faithful reference (``max|out - ref| / max|ref|``), costs from
``af.estimate``:

- ``long_sum``: ``x.sum(-1)`` over K = 4096 signed terms, [8, 4096], target 1e-3: the
  narrow fp16 sum misses it, ``reduce_sum_to_matmul`` meets it;
- ``gemv``: ``x @ W``, [1, 4096] x [4096, 2048] (bandwidth-bound), a loose target
  (0.05) that admits the cheaper int8 variant and a tight one (1e-3) that rejects it;
- ``cfg``: ``x @ W1 - x @ W2`` with ``W2 = W1 + 0.01 noise`` ([1, 4096] x [4096, 2048],
  ``|S| ~ 250``, difference ~ 0.6), target 1e-3, without and with ``allow_paired``.

    python bench/precision_tune.py

Last lines (machine-readable), one per tuning:
    RESULT precision_tune <case> target=<E> chosen=<name> error=<e> estimate_us=<t>
        met=<bool> fp16_error=<e> reference=<kind>
"""

from __future__ import annotations

import time
import warnings

import numpy as np

import aneforge as af
from aneforge.errors import PrecisionWarning
from aneforge.optimizer.precision_tune import tune_precision


def _cases():
    rng = np.random.default_rng(0)
    x = af.input((8, 4096), name="x")
    yield "long_sum", x.sum(axis=-1), 1e-3, False
    x = af.input((1, 4096), name="x")
    gemv = x @ (rng.standard_normal((4096, 2048)) * 0.02)
    yield "gemv_loose", gemv, 0.05, False
    yield "gemv_tight", gemv, 1e-3, False
    w1 = rng.standard_normal((4096, 2048)) * 4.0
    w2 = w1 + rng.standard_normal((4096, 2048)) * 0.01
    cfg = x @ w1 - x @ w2
    yield "cfg", cfg, 1e-3, False
    yield "cfg_paired", cfg, 1e-3, True


def _table(label, report, seconds):
    print(f"\n{label}: target_error={report['target_error']:g}, reference "
          f"{report['reference']}, tuned in {seconds:.1f} s")  # fmt: skip
    print(f"  {'candidate':30s} {'error':>10s} {'estimate_us':>12s} {'lossless':>9s}  chosen")
    for name, c in report["candidates"].items():
        mark = "<-" if c["chosen"] else ""
        print(
            f"  {name:30s} {c['error']:10.3g} {c['estimate_us']:12.1f} "
            f"{c['lossless']!s:>9s}  {mark}"
        )
    for name, why in report["skipped"].items():
        print(f"  {name:30s} skipped: {why}")
    print(f"  {report['message']}")


def main():
    results = []
    for label, out, target, paired in _cases():
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrecisionWarning)
            _, report = tune_precision(out, target_error=target, allow_paired=paired)
        _table(label, report, time.perf_counter() - start)
        chosen = report["candidates"][report["chosen"]]
        results.append(
            f"RESULT precision_tune {label} target={target:g} chosen={report['chosen']} "
            f"error={chosen['error']:.3g} estimate_us={chosen['estimate_us']:.1f} "
            f"met={report['met']} fp16_error={report['candidates']['fp16']['error']:.3g} "
            f"reference={report['reference']}"
        )
    print()
    for line in results:
        print(line)


if __name__ == "__main__":
    main()
