"""Model formats in and out: ONNX import (:func:`from_onnx`).

``from_onnx(model, shapes=None, constants=None)`` reads an ONNX model (ModelProto, path
or bytes, opset 13+) into an :class:`OnnxGraph` of aneforge tensors; see
:mod:`aneforge.io.onnx_import` for the contract (constants, folding, fp16 saturation,
the one error that lists everything unsupported). Needs the ``onnx`` package.
"""

from .onnx_import import (
    ConstantSaturationWarning,
    OnnxGraph,
    OnnxImportError,
    OnnxImportWarning,
    UnsupportedModelError,
    from_onnx,
)

__all__ = [
    "ConstantSaturationWarning",
    "OnnxGraph",
    "OnnxImportError",
    "OnnxImportWarning",
    "UnsupportedModelError",
    "from_onnx",
]
