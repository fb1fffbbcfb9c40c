"""The errors and warnings of PyTorch import (:mod:`.torch_import` re-exports them).

- :class:`TorchImportError`: the module or file cannot be read as given (torch missing,
  ``torch.export`` refuses the module, a ``.pt2`` file that is not a clean exported
  program, bad arguments).
- :class:`~.onnx_errors.UnsupportedModelError` (shared with ONNX import): a program that
  exports but uses ATen ops aneforge cannot express; one error lists all of them.
- :class:`TorchImportWarning`: something changed on import and the message says what
  (constants beyond the fp16 range warn with :class:`~.onnx_errors.ConstantSaturationWarning`,
  as in ONNX import).

Example:
    >>> issubclass(TorchImportError, ValueError)
    True
"""

from __future__ import annotations

from ..errors import AneforgeError, AneforgeWarning

__all__ = ["TORCH_PIN", "TorchImportError", "TorchImportWarning"]

#: The torch requirement aneforge is tested with (the CPU build; a bare ``torch``
#: requirement pulls a CUDA build of several GB).
TORCH_PIN = "torch==2.13.0"


class TorchImportError(AneforgeError, ValueError):
    """The module or ``.pt2`` file cannot be imported as given (the message says why)."""


class TorchImportWarning(AneforgeWarning):
    """Something in the program changed on import (see the message)."""
