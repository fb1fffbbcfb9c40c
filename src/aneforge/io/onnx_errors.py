"""The errors and warnings of ONNX import (:mod:`.onnx_import` re-exports them).

- :class:`OnnxImportError`: the model cannot be read as given (not ONNX, refused by
  ``onnx.checker``, an opset outside what aneforge imports, external data it may not
  read, dynamic dims, integer inputs left unbound).
- :class:`UnsupportedModelError`: a valid model that uses ops or attributes aneforge
  cannot express; one error lists all of them.
- :class:`OnnxImportWarning` / :class:`ConstantSaturationWarning`: something changed on
  import and the message says what.
- :class:`NotExpressible`: raised by op handlers; the importer turns it into one line of
  :class:`UnsupportedModelError`.

Example:
    >>> issubclass(OnnxImportError, ValueError), issubclass(UnsupportedModelError, ValueError)
    (True, True)
"""

from __future__ import annotations

from ..errors import AneforgeError, AneforgeWarning, PrecisionWarning
from ..graph.fp16 import FP16_MAX

__all__ = [
    "ConstantSaturationWarning",
    "NotExpressible",
    "OnnxImportError",
    "OnnxImportWarning",
    "UnsupportedModelError",
]


class OnnxImportError(AneforgeError, ValueError):
    """The model cannot be read as given: opset, dynamic dims, integer inputs, ..."""


class UnsupportedModelError(AneforgeError, ValueError):
    """The model uses ops or attributes aneforge cannot express (all of them listed).

    Attributes:
        op_counts: unsupported op type -> number of nodes.
        problems: one line per node whose attributes or inputs cannot be expressed.
        bind_inputs: graph inputs that feed parameters (scales, pads, indices...) which
            must be known at import; ``constants={name: value}`` binds them.
    """

    def __init__(self, message: str, op_counts=None, problems=None, bind_inputs=None):
        super().__init__(message)
        self.op_counts = dict(op_counts or {})
        self.problems = list(problems or [])
        self.bind_inputs = list(bind_inputs or [])


class OnnxImportWarning(AneforgeWarning):
    """Something in the model changed on import (see the message)."""


class ConstantSaturationWarning(OnnxImportWarning, PrecisionWarning):
    """Constants beyond the fp16 range were saturated to +-65504."""


class NotExpressible(Exception):
    """Raised by an op handler: this node's attributes or inputs cannot be expressed."""


def unsupported_model(caller: str, name: str, op_lines, problems, skipped: int, **error):
    """The one :class:`UnsupportedModelError` an importer raises: ``op_lines`` (the
    heading and one line per unsupported op), then every node that cannot be expressed
    (``problems``) and how many later nodes were not checked; ``error`` holds its
    ``op_counts`` and ``bind_inputs``.

    Example:
        >>> err = unsupported_model("from_onnx", "g", [], ["Pad 'p': mode 'wrap'"], 0)
        >>> print(err)
        from_onnx: 'g' cannot be imported:
        nodes that cannot be expressed (1):
          Pad 'p': mode 'wrap'
    """
    lines = list(op_lines)
    if problems:
        lines.append(f"nodes that cannot be expressed ({len(problems)}):")
        lines.extend(f"  {p}" for p in problems)
    if skipped:
        lines.append(f"({skipped} node(s) after them were not checked)")
    text = f"{caller}: '{name}' cannot be imported:\n" + "\n".join(lines)
    return UnsupportedModelError(text, problems=problems, **error)


def saturation_message(caller: str, saturated: dict) -> str:
    """The warning naming every constant saturated to fp16's range (``{name: max |x|}``).

    Example:
        >>> print(saturation_message("from_onnx", {"mask": 1e9}).split("range, ")[1])
        saturated to +-65504: 'mask' (|x| up to 1e+09)
    """
    shown = ", ".join(f"'{k}' (|x| up to {v:g})" for k, v in saturated.items())
    return (
        f"{caller}: {len(saturated)} constant(s) hold finite values beyond the fp16 range, "
        f"saturated to +-{FP16_MAX:g}: {shown}"
    )
