"""Layer names: one unique, stable, readable name per node of a graph.

A node's name is metadata (``name=`` of every op, ``t.named(...)``, an ONNX node's
name): it never changes what the node computes. :func:`layer_names` turns the optional
names of a node list into a complete, unique labelling for reports, per-layer tables and
the Core ML export:

- a node the user named keeps that name (its first holder in list order does);
- an unnamed node is ``f"{op}_{k}"``, ``k`` counting the nodes of that op in list order,
  named ones included (``conv_0``, ``conv_1``, ``relu_0``), so naming one layer never
  renames another;
- a name already taken gets the first free suffix ``_1``, ``_2``... (``fc1``, ``fc1_1``).

Weights built without a name carry an automatic label ``w<k>`` from a process-wide
counter; it is not stable across processes, so it counts as no name (such a weight is
``weight_k``). Deterministic: the same node list (same ops, names and order) gives the
same names in every process. One pass over the list (plus one over the named nodes).

Example:
    >>> import aneforge as af
    >>> x = af.input((2, 4), name="x")
    >>> h = x.relu(name="act")
    >>> nodes = [x, h, h.exp(), h.relu(), h.exp(name="act")]
    >>> list(layer_names(nodes).values())
    ['x', 'act', 'exp_0', 'relu_1', 'act_1']
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

from .tensor import Tensor

#: The label :func:`~aneforge.graph.tensor.weight` gives a weight built without a name.
AUTO_WEIGHT_NAME = re.compile(r"w\d+")


def user_name(node: Tensor) -> str | None:
    """The name ``node`` was given, or None (an automatic weight label counts as none).

    Example:
        >>> import numpy as np, aneforge as af
        >>> user_name(af.weight(np.ones(2))), user_name(af.weight(np.ones(2), name="b"))
        (None, 'b')
    """
    name = node.name
    if not name or (node.op == "weight" and AUTO_WEIGHT_NAME.fullmatch(name)):
        return None
    return name


def layer_names(nodes: Sequence[Tensor], keep: Mapping[int, str] | None = None) -> dict[int, str]:
    """``{id(node): name}`` for every node of ``nodes`` (a topological order), by the
    rules of the module docstring; the dict follows the order of ``nodes``.

    ``keep`` (``id(node) -> name``) fixes names decided earlier (a Program's names for
    the nodes a later lowering kept); those are served first, then the users' names.

    Example:
        >>> import aneforge as af
        >>> x = af.input((3,))
        >>> list(layer_names([x, x.relu(name="fc1"), x.exp(name="fc1")]).values())
        ['input_0', 'fc1', 'fc1_1']
    """
    chosen: dict[int, str] = {}
    taken: set[str] = set()

    def claim(n: Tensor, name: str | None) -> None:
        if name is not None and id(n) not in chosen and name not in taken:
            chosen[id(n)] = name
            taken.add(name)

    if keep:
        for n in nodes:
            claim(n, keep.get(id(n)))
    for n in nodes:
        claim(n, user_name(n))
    counts: Counter[str] = Counter()
    next_suffix: dict[str, int] = {}
    out: dict[int, str] = {}
    for n in nodes:
        k = counts[n.op]
        counts[n.op] += 1
        name = chosen.get(id(n))
        if name is None:
            base = user_name(n) or f"{n.op}_{k}"
            name = base if base not in taken else _suffixed(base, taken, next_suffix)
            taken.add(name)
        out[id(n)] = name
    return out


def _suffixed(base: str, taken: set[str], next_suffix: dict[str, int]) -> str:
    """``base_j`` for the first free ``j >= 1`` (remembered per base: amortized O(1))."""
    j = next_suffix.get(base, 1)
    while f"{base}_{j}" in taken:
        j += 1
    next_suffix[base] = j + 1
    return f"{base}_{j}"
