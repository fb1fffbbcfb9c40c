"""``fp16_divergence``: predict, per node, how a graph's fp16 results differ across chips.

The numerics source's "Cross-chip fp16 divergence" (docs/sources.md): the accumulator
width and the compiler are the same on every chip, so fp16 values are chip-independent
except where a family selects a different codegen route. The emulator reproduces those
routes (docs/numerics.md, "Per-chip numerics"); this pass predicts them statically,
without data, into:

- ``saturation``: a width-offset ``slice``/``input_view`` on an A13/A14-tier target
  (families 2, 3) among ``targets`` rides the x16 crop-DMA, which turns sliced values
  with ``|v| > 4094`` into +-inf. Magnitude-gated: flagged only when the sliced tensor's
  bound can exceed 4094. Bounds are :func:`aneforge.range_analysis`'s, from the
  inputs' declared ranges (``af.input(..., range=...)``) or ``input_bounds``, and
  the weights' actual values; an input with neither is unbounded (may exceed). It is
  a hazard of the saturating chip itself, so a single such target is enough.
- ``reorder``: a narrow fp16 reduction (sum, mean, softmax, layer/rms/group/l2 norm,
  avg_pool window, sdpa's softmax, cost_volume's channel mean) over more than the
  smaller route threshold of the targets (192 on families 2/3, 384 on 4/5) when the
  targets' thresholds differ: the chips add the same terms in a different order.
  The numerics source calls this class ``ulp1`` and quotes "<= 1 ULP"; the emulator's
  narrow-accumulator model does not support that bound (each route's partial sums round
  differently, so outputs differ by several ULPs, and a sum of signed terms can differ
  by far more relative to its small result; docs/numerics.md gives the measured
  figures). aneforge therefore reports ``reorder`` and never ``ulp1``.
- ``ulp1``: kept as a class name for the spec's vocabulary; never returned (above).
- ``round1``: the spec's reduce-then-square fusion difference; never returned, since
  A13, A14 and A16 silicon all compute fp16(sum)^2 (measured: a no-op; docs/numerics.md 9.2).
- ``none``: no family among ``targets`` selects a differing route for the node.

Per-node classes say where a divergence starts; it then flows to every consumer, so
:attr:`DivergenceReport.outputs` carries the worst class reaching each output and
:attr:`DivergenceReport.worst` the program's. The matmul output saturation near 32752
is the same on every family, so it never makes chips differ and is not reported here.

Contract (tested against the emulator): ``worst == 'none'`` means bit-identical outputs
on every target in ``targets``; ``reorder`` means the outputs differ at most by the
reordering of narrow sums; ``saturation`` means +-inf appears on the saturating chips
exactly when sliced values exceed 4094, and never while the declared bounds hold.

Example:
    >>> import aneforge as af
    >>> from aneforge.analysis import fp16_divergence
    >>> x = af.input((4, 512), name="x")
    >>> y = af.softmax(x)[:, 1:]
    >>> rep = fp16_divergence(y, ["M1", "M4"], input_bounds={"x": 10.0})
    >>> [(e.op, e.cls) for e in rep.flagged], rep.worst
    ([('softmax', 'reorder')], 'reorder')
    >>> z = (x * 500.0)[:, 1:]
    >>> fp16_divergence(z, ["M1"], input_bounds={"x": 10.0}).worst
    'saturation'
    >>> fp16_divergence(z, ["M1"], input_bounds={"x": 8.0}).worst  # |z| <= 4000
    'none'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..compiler.program import Program
from ..emulator.chips import (
    CROP_DMA_LIMIT,
    chip_numerics,
    is_width_offset,
    width_begin,
)
from ..errors import OptionError
from ..graph.registry import get_op
from ..targets.names import resolve_target
from .ranges import range_analysis

#: Every class, least severe first.
CLASSES = ("none", "round1", "ulp1", "reorder", "saturation")
_RANK = {c: i for i, c in enumerate(CLASSES)}

INF = math.inf


@dataclass(frozen=True)
class NodeDivergence:
    """One compute node's predicted cross-chip behaviour.

    Attributes:
        index: the node's position in the program's execution order.
        op, shape: the node's op and output shape.
        cls: one of :data:`CLASSES`.
        targets: the architectures on which it deviates (saturation: the saturating
            ones; reorder: every target, each with its own route), empty for ``none``.
        detail: one sentence saying why.
        bound: the max-|value| bound of the node's output used for magnitude gating.
    """

    index: int
    op: str
    shape: tuple[int, ...]
    cls: str
    targets: tuple[str, ...]
    detail: str
    bound: float

    def __str__(self) -> str:
        return f"%{self.index} {self.op} {self.shape}: {self.cls} - {self.detail}"


@dataclass(frozen=True)
class DivergenceReport:
    """The result of :func:`fp16_divergence`.

    Attributes:
        targets: the architectures compared, in the order given.
        entries: one :class:`NodeDivergence` per compute node, in execution order.
        outputs: the worst class reaching each program output.
        worst: the worst class of the whole program.
    """

    targets: tuple[str, ...]
    entries: tuple[NodeDivergence, ...]
    outputs: tuple[str, ...]
    worst: str

    @property
    def flagged(self) -> list[NodeDivergence]:
        """The entries whose class is not ``none``."""
        return [e for e in self.entries if e.cls != "none"]

    def by_class(self, cls: str) -> list[NodeDivergence]:
        """The entries of class ``cls``."""
        if cls not in _RANK:
            raise OptionError(f"unknown divergence class {cls!r}; classes are {CLASSES}")
        return [e for e in self.entries if e.cls == cls]

    def __str__(self) -> str:
        head = f"fp16 divergence across {', '.join(self.targets)}: {self.worst}"
        return "\n".join([head] + [f"  {e}" for e in self.flagged])


def fp16_divergence(out, targets, input_bounds=None) -> DivergenceReport:
    """Predict where ``out``'s fp16 results differ across ``targets``, node by node.

    Args:
        out: a Tensor, a list of Tensors or a compiled Program.
        targets: architecture or chip names (or Targets), e.g. ``["M1", "M4", "M5"]``; a
            single name is accepted. Family-1 targets have no MIL path and are refused.
        input_bounds: ``{input name or index: max |value| or (lo, hi)}`` for the inputs
            whose range is known, on top of the ranges they declare; the rest are
            unbounded.

    Returns:
        A :class:`DivergenceReport` (module docstring: the classes and the contract).
    """
    program = Program.coerce(out, "fp16_divergence")
    archs, chips = _targets(targets)
    ranges = range_analysis(program, input_ranges=input_bounds)
    bounds = {id(n): _bound(ranges, n) for n in program.nodes}
    routes = sorted({c.route for c in chips})
    saturating = tuple(a for a, c in zip(archs, chips) if c.crop_dma_limit is not None)
    entries = []
    reach: dict[int, int] = {}
    for i, node in enumerate(program.nodes):
        if node.op in ("input", "weight"):
            reach[id(node)] = 0
            continue
        cls, who, detail = "none", (), "no family among the targets routes it differently"
        src_bound = max((bounds[id(s)] for s in node.srcs[:1]), default=0.0)
        if saturating and is_width_offset(node) and src_bound > CROP_DMA_LIMIT:
            cls, who = "saturation", saturating
            shown = "unbounded" if src_bound == INF else f"bounded by {src_bound:g}"
            detail = (
                f"width-offset {node.op} (last-axis begin {width_begin(node)}) rides the x16 "
                f"crop-DMA on {', '.join(saturating)}: sliced |values| > 4094 become "
                f"+-inf there; its input is {shown}"
            )
        else:
            terms = narrow_terms(node)
            if terms is not None and len(routes) > 1 and terms > routes[0]:
                cls, who = "reorder", tuple(archs)
                detail = (
                    f"narrow sum over {terms} terms with route thresholds "
                    + ", ".join(f"{a} {c.route}" for a, c in zip(archs, chips))
                    + ": the chips round their partial sums in different orders"
                )
        entries.append(NodeDivergence(i, node.op, node.shape, cls, who, detail, bounds[id(node)]))
        reach[id(node)] = max([_RANK[cls]] + [reach[id(s)] for s in node.srcs])
    outputs = tuple(CLASSES[reach[id(t)]] for t in program.outputs)
    worst = CLASSES[max((_RANK[c] for c in outputs), default=0)]
    return DivergenceReport(tuple(archs), tuple(entries), outputs, worst)


# ---- inputs --------------------------------------------------------------------------


def _targets(targets):
    if isinstance(targets, str) or not hasattr(targets, "__iter__"):
        targets = [targets]
    targets = list(targets)
    if not targets:
        raise OptionError("fp16_divergence: give at least one target, e.g. ['M1', 'M4']")
    resolved = [resolve_target(t) for t in targets]
    chips = [chip_numerics(t) for t in resolved]  # family 1 raises PreflightError
    return [t.arch for t in resolved], chips


def _bound(ranges, node) -> float:
    """The largest magnitude ``node`` can reach by the range analysis (an input without
    a declared bound reaches inf; a NaN saturates nothing, so it is not counted)."""
    return ranges.interval(node).max_abs


# ---- which nodes reduce narrowly, over how many terms ----------------------------------


def narrow_terms(node) -> int | None:
    """How many terms ``node``'s narrow fp16 reduction adds (None: it has none), by its
    record's ``narrow`` (:meth:`~aneforge.graph.registry.OpDef.narrow_terms`).

    These are the ops whose emulator kernels call the narrow accumulator; lrn's window
    sum is a chain of elementwise adds and cumsum runs through the wide accumulator, so
    neither takes a reduction route.

    Example:
        >>> import aneforge as af
        >>> narrow_terms(af.input((4, 6)).mean()), narrow_terms(af.input((4, 6)).cumsum())
        (24, None)
    """
    if not node.srcs:
        return None
    return get_op(node.op).narrow_terms([s.shape for s in node.srcs], node.attrs)
