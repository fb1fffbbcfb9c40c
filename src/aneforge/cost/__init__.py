"""The cost model: ``estimate`` (default measured model) and its calibration."""

from .calibration import Constants, constants
from .estimate import Estimate, NodeCost, estimate, estimate_breakdown

__all__ = ["Constants", "Estimate", "NodeCost", "constants", "estimate", "estimate_breakdown"]
