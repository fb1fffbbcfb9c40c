"""Structural hashes of graphs: stable across processes and machines.

The hash covers, per node in a deterministic topological order: the op, the shape, the
sorted attributes, the positions of its sources, input names, and the bytes of every
weight (with its encoding). It never uses ``id()`` or Python's salted ``hash()``, so the
same graph built twice, in two processes, hashes the same.

Names: an **input's** name enters the hash (a program is called by its input names, so
renaming an input changes its interface). Every other node's name (``name=`` of an op,
``t.named(...)``, a weight's label, ONNX node names) does not: renaming a layer does not
change what it computes, so the tune cache keeps hitting and variants that differ only
in names count as one.

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.hashing import structural_hash
    >>> a = af.input((2, 3), name="x")
    >>> b = af.input((2, 3), name="x")
    >>> structural_hash([a.relu()]) == structural_hash([b.relu()])
    True
    >>> structural_hash([a.relu(name="act")]) == structural_hash([a.relu()])
    True
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..graph.walk import topological_order
from .tensor import Tensor

HASH_VERSION = 1


def _canonical(value) -> str:
    """A stable text form of an attribute value."""
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, (np.integer, np.floating)):
        return repr(value.item())
    return repr(value)


def structural_hash(outputs, extra: str = "") -> str:
    """Hex sha256 of the graph of ``outputs`` (a Tensor or a sequence) plus ``extra``."""

    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    nodes = topological_order(outs)
    index = {id(n): i for i, n in enumerate(nodes)}
    h = hashlib.sha256(f"aneforge-graph-v{HASH_VERSION}|{extra}".encode())
    for n in nodes:
        attrs = ";".join(f"{k}={_canonical(v)}" for k, v in sorted(n.attrs.items()))
        srcs = ",".join(str(index[id(s)]) for s in n.srcs)
        h.update(f"|{n.op}|{n.shape}|{attrs}|{srcs}".encode())
        if n.op == "input":
            h.update(f"|name={n.name}".encode())
        elif n.op == "weight":
            h.update(np.ascontiguousarray(n.value).tobytes())
    h.update(("|out=" + ",".join(str(index[id(t)]) for t in outs)).encode())
    inputs = sorted((n for n in nodes if n.op == "input"), key=lambda t: t._order)
    h.update(("|in=" + ",".join(str(index[id(t)]) for t in inputs)).encode())
    return h.hexdigest()
