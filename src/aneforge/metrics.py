"""Accuracy metrics for comparing an emulated output with an exact one.

Example:
    >>> import numpy as np
    >>> from aneforge.metrics import compare
    >>> compare(np.array([1.0, 2.0]), np.array([1.0, 2.5]))["max_abs"]
    0.5
"""

from __future__ import annotations

import numpy as np


def compare(got, want) -> dict[str, float]:
    """max abs error, relative L2 error and cosine similarity of ``got`` vs ``want``.

    Non-finite values in ``got`` make every figure inf/nan rather than hiding them.
    """
    g = np.asarray(got, dtype=np.float64).ravel()
    w = np.asarray(want, dtype=np.float64).ravel()
    with np.errstate(all="ignore"):
        diff = g - w
        max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
        norm_w = float(np.linalg.norm(w))
        rel_l2 = float(np.linalg.norm(diff) / norm_w) if norm_w else float(np.linalg.norm(diff))
        denom = float(np.linalg.norm(g)) * norm_w
        cosine = float(np.dot(g, w) / denom) if denom else (1.0 if not diff.any() else 0.0)
    return {"max_abs": max_abs, "rel_l2": rel_l2, "cosine": cosine}


def max_relative_error(got, truth) -> float:
    """max |got - truth| / |truth| elementwise; where they are equal (zeros included) 0.

    Example:
        >>> import numpy as np
        >>> max_relative_error(np.array([0.0, 1.01]), np.array([0.0, 1.0]))
        0.01...
    """
    got = np.asarray(got, dtype=np.float64)
    truth = np.asarray(truth, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(got - truth) / np.abs(truth)
    return float(np.max(np.where(got == truth, 0.0, r)))


def ulp_distance(a, b) -> np.ndarray:
    """Elementwise distance between fp16 values in ulps: how many representable fp16
    values lie between them (0 for equal values, +0 and -0 included; 1 for neighbours).

    Both arguments are rounded to fp16 first. NaNs are not handled (their distance is
    meaningless); +-inf count as the values one step past +-65504.

    Example:
        >>> import numpy as np
        >>> ulp_distance(np.float16(1.0), np.float16(1.0) + np.float16(2**-10)).item()
        1
        >>> ulp_distance(np.float16(-0.0), np.float16(2**-24)).item()  # to the first subnormal
        1
    """

    def ordinal(v):
        bits = np.asarray(v, dtype=np.float16).view(np.int16).astype(np.int64)
        return np.where(bits < 0, -(bits & 0x7FFF), bits)

    return np.abs(ordinal(a) - ordinal(b))
