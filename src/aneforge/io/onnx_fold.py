"""Bounded import-time folding for :mod:`.onnx_import`, and where the model runs.

The importer evaluates every node whose inputs are all known at import (constants,
shapes of inputs) with ``onnx.reference`` (:func:`.onnx_values.host_eval`), and a float
result used as data is rebuilt in fp16 from its recipe. That must never evaluate a whole
network (a language model whose ids were bound with ``constants=`` would fold into a
program of 0 ops, slowly), so float folding is capped:

- **integer and bool nodes always fold**: shape arithmetic, masks and position ids
  derived from shapes are small, and the engine could not compute them anyway;
- **exact movement of float constants folds** (Transpose, Gather, Reshape... of a
  weight: values move, nothing is computed; :data:`~.onnx_ops.EXACT_ON_HOST`);
- **float arithmetic folds within a budget**: a node's work is its output elements
  plus its multiply-adds (matmul, Gemm, Conv, Einsum). A node whose output holds more
  than :data:`NODE_ELEMENTS` elements, or whose work would take the import past its
  budget (:data:`DEFAULT_BUDGET`, ``from_onnx(fold_budget=...)`` or
  ``$ANEFORGE_FOLD_BUDGET``), is left in the program: its constant inputs become
  weights and its ops run on the engine, and a warning says so.

:class:`Partition` (``OnnxGraph.partition``) reports the outcome: how many ONNX nodes
were folded at import (integer and float), the float work folded against the budget,
the constant nodes left in the program and why, the integer inputs and their engine
types, and the ops that run on the engine.

Example:
    >>> b = FoldBudget(1000)
    >>> b.charge("MatMul", "mm", 600), b.charge("MatMul", "mm2", 600)
    (None, 'folding it (600 work) would pass the import budget of 1000 (600 spent)')
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..graph.walk import topological_order
from .onnx_errors import OnnxImportError

__all__ = [
    "DEFAULT_BUDGET",
    "ENV_BUDGET",
    "NODE_ELEMENTS",
    "FoldBudget",
    "LeftNode",
    "Partition",
    "fold_work",
]

#: Work (output elements + multiply-adds) the float folding of one import may do.
DEFAULT_BUDGET = 10**8
#: A float node folds only if its output holds at most this many elements.
NODE_ELEMENTS = 10**7
#: The environment variable that sets the budget (an integer >= 0; 0: no float folding).
ENV_BUDGET = "ANEFORGE_FOLD_BUDGET"


def resolve_budget(given) -> int:
    """The folding budget: ``given`` (from_onnx's ``fold_budget``), else
    ``$ANEFORGE_FOLD_BUDGET``, else :data:`DEFAULT_BUDGET`; a value that is not an
    integer >= 0 is an :class:`~.onnx_errors.OnnxImportError`.

    Example:
        >>> resolve_budget(5000)
        5000
    """
    where = "fold_budget"
    if given is None:
        text = os.environ.get(ENV_BUDGET)
        if text is None or not text.strip():
            return DEFAULT_BUDGET
        where, given = f"${ENV_BUDGET}", text.strip()
        if given.lstrip("-").isdigit():
            given = int(given)
    ok = isinstance(given, (int, np.integer)) and not isinstance(given, bool) and given >= 0
    if not ok:
        raise OnnxImportError(
            f"from_onnx: {where}={given!r} must be an integer >= 0 (the work, output "
            "elements plus multiply-adds, that import may spend folding float constants; "
            f"0 folds none, the default is {DEFAULT_BUDGET:.0e})"
        )
    return int(given)


class FoldBudget:
    """The float folding budget of one import.

    ``charge(op, label, work, elements)`` returns None and books ``work`` when a node
    may fold, else the reason it may not (nothing is booked).
    """

    def __init__(self, budget: int, node_elements: int = NODE_ELEMENTS):
        self.budget = int(budget)
        self.node_elements = min(int(node_elements), self.budget)
        self.spent = 0

    def charge(self, op: str, label: str, work: int, elements: int = 0) -> str | None:
        if elements > self.node_elements:
            return (
                f"its output holds {elements} elements, more than the {self.node_elements} "
                "a folded node may hold"
            )
        if self.spent + work > self.budget:
            return (
                f"folding it ({work} work) would pass the import budget of {self.budget} "
                f"({self.spent} spent)"
            )
        self.spent += work
        return None


def _size(a) -> int:
    return int(np.asarray(a).size)


def out_elements(op: str, arrays, static_shape=None, attrs=None) -> int:
    """The output elements of node ``op`` on host ``arrays`` (None for absent inputs):
    its inferred static shape when known, else computed from the inputs for the ops that
    grow (ConstantOfShape, Expand, Tile, Range, MatMul, Gemm: its ``attrs``), else its
    largest input."""
    if static_shape is not None:
        return math.prod(static_shape)
    given = [np.asarray(a) for a in arrays if a is not None]
    largest = max((a.size for a in given), default=1)
    try:
        if op == "ConstantOfShape":
            return math.prod(int(d) for d in given[0].reshape(-1))
        if op == "Expand":
            want = [int(d) for d in given[1].reshape(-1)]
            return math.prod(np.broadcast_shapes(given[0].shape, tuple(want)))
        if op == "Tile":
            return given[0].size * math.prod(int(r) for r in given[1].reshape(-1))
        if op == "Range":
            start, limit, delta = (float(a.reshape(-1)[0]) for a in given[:3])
            return max(math.ceil((limit - start) / delta), 0) if delta else largest
        if op == "Gemm":
            attrs = attrs or {}
            a, b = given[0], given[1]
            rows = a.shape[1] if attrs.get("transA", 0) else a.shape[0]
            return rows * (b.shape[0] if attrs.get("transB", 0) else b.shape[1])
        if op == "MatMul":
            a, b = given[0], given[1]
            rows = a.shape[-2] if a.ndim > 1 else 1
            cols = b.shape[-1] if b.ndim > 1 else 1
            batch = (
                np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) if min(a.ndim, b.ndim) > 1 else ()
            )
            return math.prod(batch) * rows * cols
    except (IndexError, ValueError, TypeError, OverflowError, ZeroDivisionError):
        return largest
    return largest


def _macs(op: str, arrays, attrs, out: int) -> int:
    """Multiply-adds of the contractions (0 for the other ops)."""
    given = [None if a is None else np.asarray(a) for a in arrays]
    try:
        if op == "MatMul":
            return out * given[0].shape[-1]
        if op == "Gemm":
            a = given[0]
            return out * (a.shape[0] if attrs.get("transA", 0) else a.shape[-1])
        if op in ("Conv", "ConvInteger"):
            w = given[1]
            return out * (w.size // max(w.shape[0], 1))
        if op == "ConvTranspose":
            w = given[1]
            return given[0].size * (w.size // max(w.shape[0], 1))
        if op == "Einsum":
            return _einsum_macs(attrs.get("equation", ""), given, out)
    except (IndexError, AttributeError, TypeError):
        return out * max((a.size for a in given if a is not None), default=1)
    return 0


def _einsum_macs(equation, given, out: int) -> int:
    """The product of every index's size (the multiply-adds of a contraction)."""
    if isinstance(equation, bytes):
        equation = equation.decode()
    terms = re.split(r",|->", str(equation).replace(" ", ""))
    sizes: dict[str, int] = {}
    for term, a in zip(terms, given):
        if a is None or "..." in term or len(term) != a.ndim:
            return out * max(a.size for a in given if a is not None)
        for letter, d in zip(term, a.shape):
            sizes[letter] = int(d)
    return max(math.prod(sizes.values()), out)


def fold_work(op: str, arrays, attrs, static_shape=None) -> tuple[int, int]:
    """``(work, output elements)`` of folding node ``op`` on host ``arrays``: work is
    its output elements (at least its largest input's: it reads them) plus its
    multiply-adds.

    Example:
        >>> a, b = np.ones((4, 8), np.float32), np.ones((8, 2), np.float32)
        >>> fold_work("MatMul", [a, b], {})
        (96, 8)
    """
    out = out_elements(op, arrays, static_shape, attrs)
    largest = max((_size(a) for a in arrays if a is not None), default=0)
    return max(out, largest) + _macs(op, arrays, attrs, out), out


@dataclass(frozen=True)
class LeftNode:
    """A node of constants left in the program (its ops run on the engine): its ONNX
    name and op, its work and why it was not folded."""

    node: str
    op: str
    work: int
    reason: str


@dataclass
class Partition:
    """Where an imported model runs: what import folded on the host and what the
    engine computes (``OnnxGraph.partition``).

    Attributes:
        onnx_nodes: the model's nodes converted (ONNX: those of expanded functions and
            of inlined or unrolled subgraphs included; torch.export: the ATen calls).
        source: what those nodes are, ``'ONNX'`` or ``'ATen'``.
        folded: of them, the nodes evaluated at import (their values are constants).
        folded_integer: of those, integer and bool nodes (shapes, masks, positions),
            which always fold.
        folded_work: the float work folded (output elements + multiply-adds).
        budget: the float folding budget (``fold_budget``).
        left: the constant float nodes left in the program, as :class:`LeftNode`.
        integer_inputs: graph input name -> its engine type (``'uint16'``...).
        engine_ops: the aneforge ops of the imported graph: what runs on the engine.
        weights: the weights those ops read.

    Example:
        >>> Partition(onnx_nodes=3, folded=1, engine_ops=2).lines()[0]
        'ONNX nodes: 3; folded at import: 1 (0 integer); engine ops: 2, weights: 0'
    """

    onnx_nodes: int = 0
    source: str = "ONNX"
    folded: int = 0
    folded_integer: int = 0
    folded_work: int = 0
    budget: int = DEFAULT_BUDGET
    left: list = field(default_factory=list)
    integer_inputs: dict = field(default_factory=dict)
    engine_ops: int = 0
    weights: int = 0

    def count_program(self, outputs) -> None:
        """Record the engine ops and weights of the imported graph's ``outputs``."""
        nodes = topological_order(list(outputs))
        self.engine_ops = sum(n.op not in ("input", "weight") for n in nodes)
        self.weights = sum(n.op == "weight" for n in nodes)

    def lines(self) -> list[str]:
        """The partition as report lines (what ``aneforge check`` shows)."""
        out = [
            f"{self.source} nodes: {self.onnx_nodes}; folded at import: {self.folded} "
            f"({self.folded_integer} integer); engine ops: {self.engine_ops}, weights: "
            f"{self.weights}"
        ]
        if self.folded_work or self.left:
            out.append(f"float folding: {self.folded_work} of {self.budget} work")
        for name, dtype in self.integer_inputs.items():
            out.append(f"integer input '{name}': {dtype} on the engine")
        for n in self.left:
            out.append(f"left in the program: {n.op} '{n.node}' ({n.work} work): {n.reason}")
        return out
