"""The complete ATen handler table: every family's handlers, loaded together.

:data:`ATEN` maps an ATen overload (``"aten.convolution.default"``) to its
:class:`~.torch_ops.Entry` (:mod:`.torch_ops` defines the registry and the elementwise,
contraction, normalization and reduction ops; :mod:`.torch_shape` adds the movement and
spatial ones when imported, here).

Example:
    >>> from aneforge.io.torch_table import ATEN
    >>> {"aten.addmm.default", "aten.native_layer_norm.default"} <= set(ATEN)
    True
"""

from __future__ import annotations

from . import torch_shape  # noqa: F401  (registers the movement and spatial handlers)
from .torch_ops import ATEN, Deferred, HighRank, TorchCx, Unavailable, dtype_kind

__all__ = ["ATEN", "Deferred", "HighRank", "TorchCx", "Unavailable", "dtype_kind"]
