"""What the tuners share: the seeded inputs they measure on, the error they gate by,
the identity of a device's timings, and the margins a lossy choice must clear.

Example:
    >>> import numpy as np
    >>> from aneforge.optimizer.measure import relative_deviation
    >>> relative_deviation([np.array([1.0, 2.1])], [np.array([1.0, 2.0])])
    0.050000000000000044
"""

from __future__ import annotations

import numpy as np

from ..compiler.program import Program
from ..graph.tensor import random_feed

DEFAULT_ATOL = 5e-3  # fp16 noise: rejects lossy variants unless the caller widens it
# A lossy variant must be at least this much faster than the best lossless one.
MIN_LOSSY_SPEEDUP = 1.10


def relative_deviation(outs, refs) -> float:
    """The worst over outputs of ``max|out - ref| / max|ref|`` (finite entries of ``ref``
    set the scale; a non-finite ``ref`` entry matches only the same bits; any other
    non-finite difference is ``inf``)."""
    worst = 0.0
    for o, r in zip(outs, refs):
        o = np.asarray(o, np.float64)
        r = np.asarray(r, np.float64)
        scale = float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)) or 1.0
        with np.errstate(invalid="ignore"):
            diff = np.abs(o - r)
        same_nonfinite = ~np.isfinite(r) & (o.view(np.uint64) == r.view(np.uint64))
        diff = np.where(same_nonfinite, 0.0, diff)
        if not np.all(np.isfinite(diff)):
            return float("inf")
        worst = max(worst, float(np.max(diff, initial=0.0)) / scale)
    return worst


def _device_id(dev) -> str:
    """What identifies a device's timings in the cache: its name and settings."""
    return getattr(dev, "cache_id", dev.name)


def device_id(dev) -> str:
    """What identifies a device's timings in the cache: its name and settings."""
    return getattr(dev, "cache_id", dev.name)


def seeded_inputs(prog: Program, seed: int = 0) -> list[np.ndarray]:
    """Standard-normal fp16 inputs for ``prog`` (integer inputs: whole numbers of their
    range, :func:`~aneforge.graph.tensor.random_feed`), the same for the same ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(t.shape).astype(np.float16)
        if t.dtype == "float16"
        else random_feed(t, rng)
        for t in prog.inputs
    ]
