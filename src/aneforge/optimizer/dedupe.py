"""Merging duplicate nodes: a node with the same op, attributes and sources as an earlier
one computes the same bits (every kernel is a function of its inputs and attributes;
docs/numerics.md), so the graph keeps the first and points the other's users at it.

Exporters differ here: ``torch.onnx.export`` merges repeated expressions (Swin's patch
merging reads ``x[:, 0::2]`` twice and the file holds one Slice), while a
``torch.export`` graph keeps one node per Python expression. The rewrite engine
(:mod:`aneforge.graph.rewrite`) never merges: :func:`merge_duplicates` is the one
place that does, and the importers run it (``onnx_graph.finish_outputs``).

Inputs and weights are leaves and stay apart (two inputs are two interfaces; two
weights of equal values may be two parameters, each with its own name). The first node
in topological order wins and keeps its name; the other's name goes with it.

Example:
    >>> import aneforge as af
    >>> x = af.input((4,), name="x")
    >>> a, b = merge_duplicates([x.relu() + 1.0, x.relu() * 2.0])
    >>> a.srcs[0] is b.srcs[0]
    True
"""

from __future__ import annotations

import numpy as np

from ..graph.tensor import Tensor, with_srcs
from ..graph.walk import topological_order

__all__ = ["merge_duplicates"]

_LEAVES = ("input", "weight")


def _attr_key(value):
    """A hashable, exact form of an attribute value (arrays by their bytes, floats by
    their bits: ``-0.0`` and ``0.0`` stay apart)."""
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_attr_key(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (float, np.floating)):
        return ("float", np.float64(value).tobytes())
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _attr_key(v)) for k, v in value.items())))
    return (type(value).__name__, value)


def _key(node: Tensor, srcs: tuple) -> tuple:
    attrs = tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items()))
    value = None if node.value is None else _attr_key(np.asarray(node.value))
    return (node.op, node.shape, attrs, tuple(id(s) for s in srcs), value)


def merge_duplicates(outputs):
    """``outputs`` (a Tensor or a sequence) with every non-leaf node that repeats an
    earlier node (same op, shape, attributes and merged sources) replaced by that
    node: the same values, bit for bit, computed once. Deterministic (the first in
    topological order wins); returns the very same objects when nothing repeats.

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 3), name="x")
        >>> y = merge_duplicates(x.exp() + x.exp())
        >>> y.srcs[0] is y.srcs[1]
        True
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    memo: dict[int, Tensor] = {}
    first: dict[tuple, Tensor] = {}
    for node in topological_order(outs):
        srcs = tuple(memo[id(s)] for s in node.srcs)
        new = with_srcs(node, srcs)
        if node.op not in _LEAVES:
            new = first.setdefault(_key(node, srcs), new)
        memo[id(node)] = new
    merged = [memo[id(t)] for t in outs]
    return merged[0] if single else merged
