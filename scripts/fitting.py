"""What the fit scripts share: a coordinate polish of a log-space fit.

Nelder-Mead and Powell can stop short of a non-smooth objective's optimum (a worst-row
term, a |log| error); this moves one log-constant at a time by +-step while the
objective falls, finest step last, and stays inside the bounds.

Example:
    >>> import numpy as np
    >>> v = coordinate_polish(np.array([0.3]), lambda v: abs(v[0] - 0.1), [(-1.0, 1.0)])
    >>> round(float(v[0]), 6)
    0.1
"""

from __future__ import annotations

import numpy as np


def coordinate_polish(vec, objective, bounds, steps=(0.05, 0.01, 0.002), tol=1e-12):
    """``vec`` moved coordinate by coordinate while ``objective(vec)`` falls by more
    than ``tol``; ``bounds`` is one ``(low, high)`` per coordinate."""
    vec = np.array(vec, dtype=float)
    best = objective(vec)
    for step in steps:
        improved = True
        while improved:
            improved = False
            for i, (lo, hi) in enumerate(bounds):
                for delta in (-step, step):
                    trial = vec.copy()
                    trial[i] = min(max(trial[i] + delta, lo), hi)
                    value = objective(trial)
                    if value < best - tol:
                        vec, best, improved = trial, value, True
    return vec
