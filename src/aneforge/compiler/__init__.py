"""Compilation: graph -> :class:`Program` (nodes in execution order)."""

from .compile import compile  # noqa: A004  (the public name)
from .program import Program

__all__ = ["compile", "Program"]
