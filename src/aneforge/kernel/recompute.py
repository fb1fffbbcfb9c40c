"""What one cell of a node costs: its template priced on an actual instantiation.

A node inlined at a read site recomputes its template there; a materialized node pays
the same work once per cell it writes. Either way the price of one cell is the work of
one instantiation of the node's lowering (:mod:`aneforge.kernel.lower`) at one cell
(every output loop collapsed to one iteration, so a reduction or contraction loop is the
only trip count left), counted by :func:`~aneforge.kernel.analyze.analyze`, never by a
hand-written formula:

- :func:`template_cost`: the node's own template, its sources read as buffers (every
  read is traffic);
- :func:`recompute_cost`: transitively, the sources a placement inlines expanded in
  place, so their work counts as FLOPs and the cells they read (not theirs) as traffic.
  A producer read at several sites is expanded at each, so a deep chain of shared
  producers (residual blocks) would grow the expansion exponentially: past
  :data:`EXPAND_LIMIT` nodes the price is composed instead, from each inlined source's
  memoized cost times how often the template reads it (a bound: ``approx``);
- :func:`producer_cost`: the twin question for a materialized node, what each cell it
  writes costs (the same instantiation, so the same function).

The cell priced is the middle one. Where the work depends on the cell (a padded window
reads fewer cells at the border) or any count is a bound, the price says ``approx``.
An op lowered as opaque code has no template: the functions return None.

Example:
    >>> import aneforge as af
    >>> from aneforge.kernel.recompute import recompute_cost, template_cost
    >>> x = af.input((4, 8), name="x")
    >>> prog = af.compile((x.exp() * 2.0).sum(axis=-1), opt=0)
    >>> region = prog.fused_regions[0]
    >>> total = prog.outputs[0]
    >>> template_cost(prog, region, total)  # 8 adds; 8 fp16 reads of the product
    CellCost(flops=8, read_bytes=16, approx=False)
    >>> recompute_cost(prog, region, total, ["inline", "inline"])  # exp, mul, add per term
    CellCost(flops=24, read_bytes=18, approx=False)
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ..compiler.program import Program
from ..compiler.segment import Region
from ..errors import OptionError
from ..graph.tensor import Tensor
from .analyze import analyze, read_counts
from .ir import Buffer, Code, Get, InRange, Set, fixed, walk
from .lower import Lowerer, Placement, resolve

__all__ = ["CellCost", "producer_cost", "recompute_cost", "template_cost"]


class CellCost(NamedTuple):
    """The work of one cell of a node: FLOPs, bytes read, and whether either is only a
    bound (or depends on the cell)."""

    flops: int
    read_bytes: int
    approx: bool


#: Past this many expanded template nodes a recompute is priced compositionally.
EXPAND_LIMIT = 20_000


class _Pricer:
    """Prices cells of one region under one placement, memoized per node."""

    def __init__(self, program, region, placement):
        self.program = program
        self.nodes, self.chosen, self.why = resolve(program, region, placement)
        self.region = region
        self.sizes: dict[int, int] = {}
        self.composed: dict[int, CellCost] = {}

    def inlined(self, n) -> bool:
        return self.chosen.get(id(n)) is Placement.INLINE

    def instantiate(self, node, expand: bool):
        """The code of one cell of ``node``: its sources buffered, or (``expand``) only
        the ones the placement keeps in memory."""
        low = Lowerer(self.program, self.nodes)
        for n in (*self.nodes.inputs, *self.region.nodes):
            if n is not node and not (expand and self.inlined(n)):
                low.buffers[id(n)] = Buffer(low.name(n), n.shape or (1,), kind="input")
        cell = tuple(fixed(d // 2) for d in node.shape) or (fixed(0),)
        value = low.template(node, cell[: len(node.shape)])
        out = Buffer("cell", node.shape or (1,), kind="output")
        return Code(
            f"{node.op}_cell", (*low.buffers.values(), out), (Set("cell", cell, value),)
        ), low

    def price(self, code) -> CellCost:
        s = analyze(code)
        read = sum(f.read_bytes for name, f in s.footprints.items() if name != "cell")
        guarded = any(isinstance(item, InRange) for item in walk(code.body))
        return CellCost(s.flops, read, s.flops_approx or s.bytes_approx or s.opaque or guarded)

    def expanded_size(self, node) -> int:
        """How many IR nodes the fully expanded template of ``node`` would hold (a
        producer read at two sites is expanded twice)."""
        if id(node) not in self.sizes:
            self.sizes[id(node)] = EXPAND_LIMIT + 1  # a cycle (never in a DAG) stops here
            code, low = self.instantiate(node, expand=False)
            reads = Counter(item.node for item in walk(code.body) if isinstance(item, Get))
            size = sum(1 for _ in walk(code.body))
            for src in {id(s): s for s in node.srcs}.values():
                if self.inlined(src) and not self.why[id(src)]:
                    size += reads[low.name(src)] * self.expanded_size(src)
            self.sizes[id(node)] = min(size, EXPAND_LIMIT + 1)
        return self.sizes[id(node)]

    def compose(self, node) -> CellCost:
        """The recompute of ``node`` from its own template and its inlined sources'
        memoized costs, times how often it reads each (an upper bound on the bytes:
        cells a source reads at several sites count at each)."""
        if id(node) not in self.composed:
            code, low = self.instantiate(node, expand=False)
            own = self.price(code)
            counts = read_counts(code)
            footprints = analyze(code).footprints
            flops, read, approx = own.flops, own.read_bytes, own.approx
            for src in {id(s): s for s in node.srcs}.values():
                if self.inlined(src) and not self.why[id(src)]:
                    sub, times = self.compose(src), counts.get(low.name(src), 0)
                    flops += times * sub.flops
                    read += times * sub.read_bytes - footprints[low.name(src)].read_bytes
                    approx = approx or sub.approx or times > 1
            self.composed[id(node)] = CellCost(flops, read, approx)
        return self.composed[id(node)]


def _price(program, region, node, placement, expand: bool) -> CellCost | None:
    if not any(node is n for n in region.nodes):
        raise OptionError(f"recompute: the {node.op} node {node.name!r} is not in {region!r}")
    pricer = _Pricer(program, region, placement)
    if pricer.why[id(node)]:
        return None
    if expand and pricer.expanded_size(node) > EXPAND_LIMIT:
        return pricer.compose(node)
    return pricer.price(pricer.instantiate(node, expand)[0])


def template_cost(program: Program, region: Region, node: Tensor) -> CellCost | None:
    """One cell of ``node``'s own template in fused ``region``, its sources read as
    buffers; None for an op lowered as opaque code (module docstring)."""
    return _price(program, region, node, None, expand=False)


def recompute_cost(
    program: Program, region: Region, node: Tensor, placement=None
) -> CellCost | None:
    """One inlined computation of ``node``, with the sources ``placement`` (one entry
    per intermediate, as :func:`~aneforge.kernel.lower.lower` takes; None materializes
    them) inlines expanded transitively; None for an op lowered as opaque code."""
    return _price(program, region, node, placement, expand=True)


#: The work behind each cell a materialized node writes: the same instantiation as
#: :func:`recompute_cost` (its inlined sources expanded), under the name of the twin
#: question (what re-inlining a materialized producer would cost per read).
producer_cost = recompute_cost
