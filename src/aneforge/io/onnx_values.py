"""The values ONNX import passes around, and what an op handler sees (:class:`Cx`).

- :class:`Host`: a value known at import (a NumPy array of any dtype); a float one
  computed from constants keeps its ``recipe`` so that, used as data, it is rebuilt
  with fp16 graph ops (constant folding in fp16, never float64).
- ``BROKEN``: stands for the outputs of a node that failed, so later nodes are skipped.
- :class:`Cx`: a handler's view of the importer: data operands as graph tensors
  (``cx.t``), parameter operands as exact host values (``cx.arr`` / ``cx.ints``), new
  aneforge nodes (``cx.op``, folded in fp16 when every source is a weight).
- :func:`host_eval`: one node on host arrays by ``onnx.reference``, the exact ONNX
  semantics.

Example:
    >>> import numpy as np
    >>> from onnx import helper
    >>> node = helper.make_node("Add", ["a", "b"], ["c"])
    >>> host_eval(node, [np.array([1, 2]), np.array([3, 4])], 17)[0].tolist()
    [4, 6]
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..emulator.fold import fold_constant
from ..graph.tensor import Tensor, make
from .onnx_errors import NotExpressible
from .onnx_graph import node_label

__all__ = ["BROKEN", "Broken", "Cx", "Host", "Unsupported", "attrs", "host_eval", "is_float"]


class Unsupported(Exception):
    """Raised by the dispatcher: no handler and no function body for this op type."""


@dataclass(eq=False)
class Host:
    """A value known at import: a NumPy array (any dtype), never sent as such to the
    device. ``recipe`` (node, inputs, opset, index) rebuilds a float value computed from
    constants with fp16 graph ops when it is used as data; ``label`` names it."""

    value: np.ndarray
    label: str = ""
    recipe: tuple | None = None

    def __repr__(self) -> str:  # shallow: a recipe chain may be thousands of links deep
        arr = np.asarray(self.value)
        how = ", recipe" if self.recipe is not None else ""
        return f"Host({self.label!r}, shape={arr.shape}, dtype={arr.dtype}{how})"


class Broken:
    """Stands for the outputs of a node that failed, so later nodes are skipped."""


BROKEN = Broken()


def attrs(onnx, node) -> dict:
    """A node's attributes as Python values (strings decoded)."""
    out = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode(errors="replace") for v in value]
        out[a.name] = value
    return out


class Cx:
    """What an op handler sees: the importer's value helpers and the opset."""

    def __init__(self, importer, node, opset: int, env=None, fold: bool = True):
        self.importer = importer
        self.node = node
        self.opset = opset
        self.env = env if env is not None else {}  # the enclosing scope (subgraphs)
        self.fold = fold  # False: a node of constants past the folding budget

    def attrs(self, node) -> dict:
        """A node's attributes as Python values."""
        return attrs(self.importer.onnx, node)

    def subgraph(self, graph, bindings: dict) -> list:
        """Convert the nodes of ``graph`` in the enclosing scope plus ``bindings``;
        returns its outputs (a failed one raises NotExpressible)."""
        sub = dict(self.env)
        for init in graph.initializer:  # a subgraph's own constants shadow outer names
            sub[init.name] = Host(self.importer.initializer(init), label=init.name)
        sub.update(bindings)
        self.importer.convert(graph.node, sub, self.opset)
        outs = [sub.get(o.name, BROKEN) for o in graph.output]
        if any(isinstance(v, Broken) for v in outs):
            raise NotExpressible(f"its subgraph '{graph.name}' cannot be expressed")
        return outs

    def t(self, value) -> Tensor:
        """A data operand as a graph tensor (constants become fp16 weights)."""
        return self.importer.t(value)

    def arr(self, value, what: str) -> np.ndarray:
        """A parameter operand as its exact host value; a graph tensor is refused, naming
        the graph inputs it comes from (bind them with ``constants=``)."""
        if isinstance(value, Host):
            return np.asarray(value.value)
        if isinstance(value, Tensor) and value.op == "weight":
            return np.asarray(value.value, dtype=np.float64)
        names = source_inputs(value) if isinstance(value, Tensor) else []
        self.importer.bind_hints.update(names)
        hint = ""
        if names:
            shown = ", ".join(f"'{n}'" for n in names)
            hint = f"; it comes from graph input(s) {shown}: bind them with constants="
        raise NotExpressible(
            f"{what} must be a constant (known at import), but it is computed on the device{hint}"
        )

    def ints(self, value, what: str) -> list[int]:
        """A constant integer list (scalars become one-element lists)."""
        values = self.arr(value, what).reshape(-1)
        if values.dtype.kind not in "biuf" or (
            values.dtype.kind == "f" and not np.all(np.isfinite(values))
        ):
            raise NotExpressible(f"{what} {values.tolist()} must hold integers")
        return [int(v) for v in values]

    def is_const(self, value) -> bool:
        """Whether ``value`` is known at import."""
        return isinstance(value, Host) or (isinstance(value, Tensor) and value.op == "weight")

    def op(self, name: str, *srcs, **attrs) -> Tensor:
        """Build an aneforge node; one whose sources are all weights folds in fp16
        (unless this node is past the folding budget: then it runs on the engine)."""
        srcs = [self.t(s) if not isinstance(s, (int, float)) else s for s in srcs]
        node = make(name, *srcs, **attrs)
        if not self.fold:
            return node
        folded = fold_constant(node)  # a node of weights folds in fp16
        return node if folded is None else folded

    def note(self, msg: str) -> None:
        """An import warning naming this node."""
        self.importer.note(f"{self.node.op_type} '{node_label(self.node)}': {msg}")

    def type_of(self, name: str):
        """The ONNX element type of value ``name`` when shape inference knows it."""
        return self.importer.types.get(name)


def host_eval(node, arrays, opset: int) -> list[np.ndarray]:
    """Outputs of ``node`` on host arrays (None for absent inputs), by ``onnx.reference``:
    the exact ONNX semantics, used for constants and for index maps of movement ops."""
    from onnx.reference import ReferenceEvaluator

    feeds = {n: a for n, a in zip(node.input, arrays) if n and a is not None}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        evaluator = ReferenceEvaluator(node, opsets={"": opset})
        return [np.asarray(v) for v in evaluator.run(None, feeds)]


def source_inputs(t: Tensor) -> list[str]:
    """Names of the graph inputs ``t`` is computed from."""
    seen, stack, names = set(), [t], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "input" and node.name and not node.name.startswith("<"):
            names.add(node.name)
        stack.extend(node.srcs)
    return sorted(names)


def is_float(onnx, elem: int) -> bool:
    """Whether ONNX element type ``elem`` is a float type the importer feeds as fp16."""
    tp = onnx.TensorProto
    return elem in (tp.FLOAT, tp.FLOAT16, tp.DOUBLE, tp.BFLOAT16)
