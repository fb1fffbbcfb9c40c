"""Engine targets: architectures, capability families, hardware curves, names.

A family's capabilities: ``Target.capability``, or
:func:`aneforge.targets.capability.capability` for a family number (the submodule keeps
its name: the function is not re-exported here, so ``aneforge.targets.capability`` is
always the module).
"""

from .capability import Capability, capabilities
from .names import resolve_target, targets
from .projection import ANCHORS, anchor_for, estimate_provenance, project_peak
from .table import FAMILIES, Target, all_targets, get_target

__all__ = [
    "ANCHORS",
    "FAMILIES",
    "Capability",
    "Target",
    "all_targets",
    "anchor_for",
    "capabilities",
    "estimate_provenance",
    "get_target",
    "project_peak",
    "resolve_target",
    "targets",
]
