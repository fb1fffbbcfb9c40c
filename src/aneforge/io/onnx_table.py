"""The complete ONNX handler table: every family's handlers, loaded together.

:data:`HANDLERS` maps an ONNX op type to its handler (:mod:`.onnx_ops` defines the
registry and the elementwise ops; :mod:`.onnx_math`, :mod:`.onnx_shape`,
:mod:`.onnx_spatial` and :mod:`.onnx_sequence` add theirs when imported, here).

Example:
    >>> from aneforge.io.onnx_table import HANDLERS
    >>> {"Conv", "Gemm", "Relu", "Reshape"} <= set(HANDLERS)
    True
"""

from __future__ import annotations

from . import onnx_math, onnx_sequence, onnx_shape, onnx_spatial  # noqa: F401  (register)
from .onnx_ops import EXACT_ON_HOST, HANDLERS, UNSUPPORTED_REASONS

__all__ = ["EXACT_ON_HOST", "HANDLERS", "UNSUPPORTED_REASONS"]
