"""``estimate``: the default (measured, M5-class) structural cost model of spec 000.

A pruner, not ground truth: it orders variants so the tuner can skip measuring ones
predicted far worse. Composition mirrors segmentation:

- a fused node costs ``max(bytes / BW, flops / COMPUTE)`` (no floor of its own);
- the program pays one dispatch floor per fused region plus every fused node's
  above-floor work ``max(0, node - floor)`` (the fusion discount);
- each cut (bridge op) pays ``cut_us`` plus the bridge op's own cost, from the measured
  table (or its roofline when its family has no data);
- ``int8=True`` streams weights at 1 byte and subtracts a tie-breaker proportional to
  the weight bytes saved, far below a floor, so int8 is never predicted slower.

Biases: FLOPs are known only for contractions, so other ops are bytes-bound by
construction; fused intermediates are charged as if they went to memory (an upper
bias for long fused chains); bridge ops are nearest-anchor scaled (magnitude only).

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((1, 4096))
    >>> round(af.estimate(x @ np.ones((4096, 4096))))
    311
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from ..errors import DispatchFloorWarning
from ..graph.tensor import Tensor
from .bridge import bridge_cost_us
from .calibration import Constants, constants
from .roofline import node_bytes, node_flops, node_time_us

# A program is floor-dominated when its dispatch floors are at least this share of it.
FLOOR_DOMINATED_SHARE = 0.5
# int8 tie-breaker: microseconds per weight byte saved, capped well below one floor.
INT8_TIE_US_PER_BYTE = 1e-6
INT8_TIE_MAX_FLOOR_SHARE = 0.01


@dataclass
class NodeCost:
    """One node's part of an estimate."""

    node: Tensor
    region: int
    kind: str  # "fused" or "bridge"
    time_us: float  # roofline time (fused) or measured/roofline cost (bridge)
    bound: str  # "compute", "bandwidth" or "measured"
    bytes: int
    flops: int


@dataclass
class Estimate:
    """An estimate with its breakdown. ``float(est)`` is the total in microseconds."""

    total_us: float
    floor_us: float  # dispatch floors paid (one per fused region)
    fused_us: float  # above-floor work of the fused nodes
    cut_us: float  # cut penalties plus bridge ops' own costs
    n_regions: int
    n_cuts: int
    nodes: list[NodeCost] = field(default_factory=list)
    int8: bool = False

    def __float__(self) -> float:
        return self.total_us

    @property
    def floor_share(self) -> float:
        """Share of the total spent in dispatch floors."""
        return self.floor_us / self.total_us if self.total_us else 0.0

    @property
    def bound(self) -> str:
        """What dominates: 'floor', 'cuts', 'compute' or 'bandwidth'."""
        parts = {"floor": self.floor_us, "cuts": self.cut_us}
        for nc in self.nodes:
            if nc.kind == "fused":
                parts[nc.bound] = parts.get(nc.bound, 0.0) + max(0.0, nc.time_us)
        return max(parts, key=parts.get)

    def top_nodes(self, n: int = 3) -> list[NodeCost]:
        """The ``n`` most expensive nodes."""
        return sorted(self.nodes, key=lambda c: -c.time_us)[:n]


def _program(out):
    from ..compiler.program import Program

    if isinstance(out, Program):
        return out
    from ..compiler.compile import build_program

    return build_program([out] if not isinstance(out, (list, tuple)) else out)


def estimate_breakdown(out, int8: bool = False, calibration: Constants | None = None):
    """Like :func:`estimate`, returning the :class:`Estimate` with its breakdown."""
    c = calibration or constants()
    prog = _program(out)
    memo_key = (bool(int8), c)
    cached = prog._estimates.get(memo_key)
    if cached is not None:
        return cached
    nodes: list[NodeCost] = []
    above = cut_total = 0.0
    saved_bytes = 0
    for region in prog.regions:
        for node in region.nodes:
            nbytes, flops = node_bytes(node, int8), node_flops(node)
            if int8:
                saved_bytes += node_bytes(node) - nbytes
            if region.kind == "bridge":
                if node is not region.nodes[0]:  # a second output of the same native call
                    nodes.append(NodeCost(node, region.index, "bridge", 0.0, "shared", 0, 0))
                    continue
                measured = bridge_cost_us(node)
                t = measured if measured is not None else node_time_us(node, *_rates(c), int8)
                cut_total += c.cut_us + t
                bound = "measured" if measured is not None else _bound(nbytes, flops, c)
                nodes.append(NodeCost(node, region.index, "bridge", t, bound, nbytes, flops))
                continue
            t = node_time_us(node, *_rates(c), int8)
            above += max(0.0, t - c.floor_us)
            bound = _bound(nbytes, flops, c)
            nodes.append(NodeCost(node, region.index, "fused", t, bound, nbytes, flops))
    n_regions = len(prog.fused_regions)
    floors = n_regions * c.floor_us
    total = floors + above + cut_total
    if int8 and saved_bytes:
        total -= min(INT8_TIE_US_PER_BYTE * saved_bytes, INT8_TIE_MAX_FLOOR_SHARE * c.floor_us)
    result = Estimate(total, floors, above, cut_total, n_regions, len(prog.cuts), nodes, int8)
    prog._estimates[memo_key] = result  # programs do not change after compile
    return result


def _rates(c: Constants) -> tuple[float, float]:
    return c.bw_bytes_per_us, c.flops_per_us


def _bound(nbytes: int, flops: int, c: Constants) -> str:
    return "compute" if flops / c.flops_per_us > nbytes / c.bw_bytes_per_us else "bandwidth"


def estimate(out, int8: bool = False, target=None) -> float:
    """Predicted latency in microseconds of a graph (Tensor(s)) or a compiled Program.

    ``target=None`` uses the default measured cost model (spec 000, M5-class);
    ``int8=True`` prices weights as per-channel int8. With ``target`` (an architecture
    such as ``'h13'`` or a marketing name such as ``'M1'``) the analytic per-chip model
    of :mod:`aneforge.cost.analytic` answers instead. Deterministic and
    measurement-free. See the module docstrings for the formulas and their biases.

    Example:
        >>> import aneforge as af
        >>> x = af.input((64, 256))
        >>> af.estimate(x.relu()) == af.estimate(x.sigmoid())  # both at the floor
        True
    """
    if target is not None:
        from .analytic import analytic_estimate

        prog = _program(out)
        if int8:  # price the whole-graph int8 variant on that chip
            from ..compiler.compile import build_program
            from ..numerics.compression import quantize_graph_int8

            prog = build_program(quantize_graph_int8(list(prog.outputs)))
        return analytic_estimate(prog, _resolve(target))["total_us"]
    return estimate_breakdown(out, int8).total_us


def _resolve(target):
    """A Target from an architecture or marketing name."""
    from ..targets import table

    try:
        from ..targets.names import resolve_target
    except ImportError:  # names arrive with the targets table
        resolve_target = None
    if resolve_target is not None:
        return resolve_target(target)
    try:
        return table.get_target(str(target))
    except KeyError:
        from ..errors import OptionError

        raise OptionError(f"unknown target '{target}'") from None


def warn_if_floor_dominated(prog) -> None:
    """Warn (``DispatchFloorWarning``) when dispatch floors dominate ``prog``'s estimate."""
    est = estimate_breakdown(prog)
    if est.floor_share >= FLOOR_DOMINATED_SHARE:
        warnings.warn(
            f"predicted {est.total_us:.0f} us is {est.floor_share:.0%} dispatch floor "
            f"({est.n_regions} region(s) x {est.floor_us / max(est.n_regions, 1):.0f} us): "
            "per-call overhead dominates. Batch more samples per call or chain more ops "
            "into one program; threads do not help (dispatch is single-in-flight).",
            DispatchFloorWarning,
            stacklevel=3,  # warn_if_floor_dominated <- compile <- the user's call
        )


__all__ = ["Estimate", "NodeCost", "estimate", "estimate_breakdown"]
