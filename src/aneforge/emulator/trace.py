"""Where it happened: a run of the emulator that records every node's value range.

:func:`trace` runs a program on the fp16 emulator (the reference interpreter or the fast
path, which give the same bits) and keeps, per node in execution order, its layer name,
op, shape, smallest and largest finite value, and how many of its values are inf, nan
and zero. :meth:`Trace.first_nonfinite` names the first node whose output holds an inf
or a nan, with the ranges of the values that fed it: the place a model overflowed.

Values are summarized as they are made and then dropped, as in a plain run, so a trace
costs one pass over each intermediate, not memory for all of them.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((4,), name="x")
    >>> y = (x * 300.0).named("scaled").square(name="energy")
    >>> tr = af.compile(y).trace(np.ones(4))
    >>> hit = tr.first_nonfinite()
    >>> hit.name, hit.op, hit.n_inf, [s.name for s in tr.sources(hit)]
    ('energy', 'square', 4, ['scaled'])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.registry import get_op
from ..tables import TableMixin
from .interpreter import execute_fp16


@dataclass(frozen=True)
class NodeRange:
    """One node's values in a traced run (finite ones only in ``lo``/``hi``/``max_abs``;
    None when the node has no finite value)."""

    index: int
    name: str
    op: str
    shape: tuple
    lo: float | None
    hi: float | None
    max_abs: float | None
    n_inf: int
    n_nan: int
    n_zero: int
    size: int

    @property
    def finite(self) -> bool:
        return self.n_inf == 0 and self.n_nan == 0

    def to_record(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "op": self.op,
            "shape": list(self.shape),
            "min": self.lo,
            "max": self.hi,
            "max_abs": self.max_abs,
            "inf": self.n_inf,
            "nan": self.n_nan,
            "zeros": self.n_zero,
        }


def _summarize(index: int, name: str, node, value) -> NodeRange:
    v = np.asarray(value, dtype=np.float32)
    finite = np.isfinite(v)
    n_inf = int(np.count_nonzero(np.isinf(v)))
    n_nan = int(np.count_nonzero(np.isnan(v)))
    if finite.any():
        fin = v[finite]
        lo, hi = float(fin.min()), float(fin.max())
        max_abs = max(abs(lo), abs(hi))
    else:
        lo = hi = max_abs = None
    n_zero = int(np.count_nonzero(v == 0))
    return NodeRange(index, name, node.op, tuple(node.shape), lo, hi, max_abs, n_inf, n_nan,
                     n_zero, int(v.size))  # fmt: skip


class Trace(TableMixin):
    """The node ranges of one traced run (:func:`trace`), in execution order; renders as
    a table (``to_records``) in a notebook and a terminal."""

    def __init__(self, program, nodes: list[NodeRange], outputs: list[np.ndarray]):
        self.program = program
        self.nodes = nodes
        self.outputs = outputs
        self._by_index = {n.index: n for n in nodes}

    @property
    def title(self) -> str:
        bad = sum(not n.finite for n in self.nodes)
        return f"trace: {len(self.nodes)} node(s), {bad} with inf or nan"

    def to_records(self) -> list[dict]:
        return [n.to_record() for n in self.nodes]

    def __getitem__(self, name: str) -> NodeRange:
        """The range of the node named ``name`` (its layer name)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"trace: no node named {name!r}; names: {[n.name for n in self.nodes]}")

    def first_nonfinite(self) -> NodeRange | None:
        """The first node, in execution order, whose output holds an inf or a nan (None
        when the run stayed finite)."""
        return next((n for n in self.nodes if not n.finite), None)

    def first_collapse(self) -> NodeRange | None:
        """The first node whose output is all zeros although a source held a non-zero
        value: where an overflow inside a composite op (a norm's x*x, a softmax's sum)
        or an underflow wiped the values out without leaving an inf. Ops whose all-zero
        output is ordinary (``nonnegative`` ones: relu, comparisons...) are not counted.
        None when no node collapsed.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((2, 16), name="x")
            >>> y = af.layer_norm(x * 100.0, name="norm")  # x*x inside passes 65504
            >>> af.compile(y).trace(np.ones((2, 16)) * np.arange(16)).first_collapse().name
            'norm'
        """
        for n in self.nodes:
            if n.op == "input" or n.n_zero < n.size or get_op(n.op).always_nonnegative:
                continue
            if any(s.n_zero < s.size for s in self.sources(n)):
                return n
        return None

    def sources(self, node: NodeRange) -> list[NodeRange]:
        """The ranges of the values that fed ``node`` (its sources' records; weights,
        known before the run, are not traced)."""
        order = {id(t): i for i, t in enumerate(self.program.nodes)}
        srcs = self.program.nodes[node.index].srcs
        return [self._by_index[order[id(s)]] for s in srcs if order[id(s)] in self._by_index]

    def describe_first_nonfinite(self) -> str | None:
        """One line naming the first non-finite node and what fed it, or None.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((2,), name="x")
            >>> tr = af.compile((x * 1e4).named("big").exp(name="e")).trace(np.ones(2))
            >>> for part in tr.describe_first_nonfinite().split("; "):
            ...     print(part)
            first non-finite value at node %3 'e' (exp (2,)): 2 inf, 0 nan
            fed by 'big' in [1e+04, 1e+04]
        """
        hit = self.first_nonfinite()
        if hit is None:
            return None
        fed = ", ".join(f"'{s.name}' in {_interval(s)}" for s in self.sources(hit))
        return (
            f"first non-finite value at node %{hit.index} '{hit.name}' ({hit.op} {hit.shape}): "
            f"{hit.n_inf} inf, {hit.n_nan} nan" + (f"; fed by {fed}" if fed else "")
        )


def _interval(n: NodeRange) -> str:
    if n.lo is None:
        return "(no finite value)"
    extra = "" if n.finite else f" plus {n.n_inf} inf / {n.n_nan} nan"
    return f"[{n.lo:.4g}, {n.hi:.4g}]{extra}"


def trace(program, inputs, fast: bool = True, target=None) -> Trace:
    """Run ``program`` on fp16 ``inputs`` (as :func:`execute_fp16` takes them) and
    record every node's range; weights are left out (they are known before the run).

    ``target`` selects the per-chip numerics as for :func:`execute_fp16`.
    """
    names = program.layer_names
    records: list[NodeRange] = []

    def observe(index, node, value):
        if node.op != "weight":
            records.append(_summarize(index, names[id(node)], node, value))

    with np.errstate(all="ignore"):
        outs = execute_fp16(program, inputs, fast=fast, target=target, observe=observe)
    return Trace(program, records, outs)
