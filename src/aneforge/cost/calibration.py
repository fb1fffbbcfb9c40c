"""The default cost model's constants: the bundled fit, or documented defaults.

``data/cost_model.json`` is written by ``scripts/fit_cost_model.py`` from the measured
ANE latency corpus; when it is absent (or unreadable) the defaults below apply, each
the mid value spec 000 documents.

Example:
    >>> from aneforge.cost.calibration import constants
    >>> constants().floor_us > 0
    True
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from ..errors import AneforgeWarning

DEFAULTS = {
    "floor_us": 63.3,  # smallest fused-op min latency (M5 corpus)
    "cut_us": 200.0,  # composition probe ~150-300 us; 200 documented mid
    "bw_bytes_per_us": 1.1e5,  # K=4096 GEMV streams 32 MiB in ~293 us
    "flops_per_us": 1.45e7,  # conv C=512: 4.83 GFLOP in ~334 us
    "act_bw_bytes_per_us": 2.1e4,  # relu (256, 1024): 1 MiB in and out in ~50 us
    "layer_us": 2.0,  # fixed cost of one engine pass (not in the spec; a small guess)
}


@dataclass(frozen=True)
class Constants:
    """Calibrated constants of the default (measured, M5-class) cost model."""

    floor_us: float
    cut_us: float
    bw_bytes_per_us: float
    flops_per_us: float
    act_bw_bytes_per_us: float = DEFAULTS["act_bw_bytes_per_us"]  # activation I/O path
    layer_us: float = DEFAULTS["layer_us"]  # fixed cost of one engine pass
    bridge_ops: tuple = field(default=())
    source: str = "defaults (spec 000)"


@lru_cache(maxsize=1)
def constants() -> Constants:
    """Load the bundled calibration once; fall back to :data:`DEFAULTS` if it is absent."""
    try:
        text = resources.files("aneforge.data").joinpath("cost_model.json").read_text()
        data = json.loads(text)
        values = {k: float(data[k]) for k in DEFAULTS}
        if any(v <= 0 for v in values.values()):
            raise ValueError("non-positive constant")
        rows = tuple(
            (str(r["family"]), str(r["key"]), float(r["min_us"])) for r in data["bridge_ops"]
        )
        return Constants(**values, bridge_ops=rows, source=data["_source"]["fitted_by"])
    except FileNotFoundError:
        return Constants(**DEFAULTS)
    except (ValueError, KeyError, TypeError) as err:
        warnings.warn(
            f"aneforge: bundled cost_model.json is unreadable ({err}); using defaults",
            AneforgeWarning,
            stacklevel=2,
        )
        return Constants(**DEFAULTS)
