"""Constant folding: the one place a node of weights is evaluated at compile time.

A node whose sources are all weights is computed with its op's fp16 emulator kernel and
the reference matmul, the engine's generic arithmetic, never in float64. The result is a
weight. The optimizer's ``const_fold`` rule and the ONNX importer both fold through
:func:`fold_constant`. A target's per-chip numerics (reduction route, matmul saturation)
are not applied: a folded value is the generic model's, which is why ``const_fold`` makes
no exactness claim.

Example:
    >>> import numpy as np, aneforge as af
    >>> node = af.weight(np.ones(4096)).sum()
    >>> float(fold_constant(node).value)  # the narrow fp16 accumulator stalls at 2048
    2048.0
"""

from __future__ import annotations

import numpy as np

from ..graph.arith import Arith
from ..graph.registry import get_op
from ..graph.tensor import Tensor, weight
from .gemm import gemm_reference


def fold_constant(node: Tensor, max_elements: int | None = None) -> Tensor | None:
    """The weight holding ``node``'s fp16 value, or None when ``node`` is not foldable:
    it has no sources, a source that is not a weight, or more than ``max_elements``
    output elements (None: no limit)."""
    if not node.srcs or any(s.op != "weight" for s in node.srcs):
        return None
    if max_elements is not None and node.size > max_elements:
        return None
    arith = Arith.generic(gemm_reference)
    value = get_op(node.op).emulate([s.value for s in node.srcs], node.attrs, arith)
    return weight(np.asarray(value, np.float16).reshape(node.shape))
