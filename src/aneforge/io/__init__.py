"""Model formats in and out: ONNX import and Core ML export.

- :func:`from_onnx` (``aneforge.io.onnx_import``) reads an ONNX model into aneforge
  tensors; needs the ``onnx`` package.
- :func:`from_torch` / :func:`load_torch_file` (``aneforge.io.torch_import``) read a
  PyTorch module through ``torch.export`` (or a saved ``.pt2`` program); need ``torch``.
- :func:`export_coreml` (``aneforge.io.coreml_export``) writes an fp16 Core ML ML
  Program; needs ``coremltools``.

All are imported lazily, on first use, so ``import aneforge`` needs none of these packages.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "ConstantSaturationWarning": "onnx_import",
    "OnnxGraph": "onnx_import",
    "OnnxImportError": "onnx_import",
    "OnnxImportWarning": "onnx_import",
    "UnsupportedModelError": "onnx_import",
    "from_onnx": "onnx_import",
    "from_torch": "torch_import",
    "load_torch_file": "torch_import",
    "TorchImportError": "torch_import",
    "TorchImportWarning": "torch_import",
    "export_coreml": "coreml_export",
    "ExportError": "coreml_export",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
