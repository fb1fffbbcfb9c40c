"""Engine targets: architectures, capability families, hardware curves, names."""

from .table import FAMILIES, Target, all_targets, get_target

__all__ = ["FAMILIES", "Target", "all_targets", "get_target"]
