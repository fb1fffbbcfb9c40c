"""The compiled form: :class:`Program` (nodes in execution order), its segmentation into
fused regions and bridge cuts, and the per-family preflight check.

:func:`aneforge.compile`, which runs the optimizer to build a Program, is
:mod:`aneforge.driver`, above this package.
"""

from .program import Program

__all__ = ["Program"]
