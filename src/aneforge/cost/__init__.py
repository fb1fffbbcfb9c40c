"""The cost model: ``estimate`` (the default model or a chip's analytic model), its
per-layer breakdown, the chips' roofs and the calibration.

Example:
    >>> import aneforge as af
    >>> af.cost.DEFAULT_CHIP
    'M5 Pro'
"""

from .calibration import Constants, constants
from .estimate import DEFAULT_CHIP, Estimate, NodeCost, estimate, estimate_breakdown, roofs

__all__ = [
    "DEFAULT_CHIP",
    "Constants",
    "Estimate",
    "NodeCost",
    "constants",
    "estimate",
    "estimate_breakdown",
    "roofs",
]
