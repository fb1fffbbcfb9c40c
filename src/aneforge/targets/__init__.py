"""Engine targets: architectures, capability families, hardware curves, names."""

from .names import resolve_target, targets
from .projection import ANCHORS, anchor_for, estimate_provenance, project_peak
from .table import FAMILIES, Target, all_targets, get_target

__all__ = [
    "ANCHORS",
    "FAMILIES",
    "Target",
    "all_targets",
    "anchor_for",
    "estimate_provenance",
    "get_target",
    "project_peak",
    "resolve_target",
    "targets",
]
