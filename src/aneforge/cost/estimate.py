"""``estimate``: a program's latency, by the default model or a chip's analytic model.

Both paths price a program the same way, with different constants:

- a fused region (one engine program) costs one dispatch floor plus, for each of its
  nodes in turn, ``pass + max(compute, weights + activations)``: ``compute`` is
  ``flops / COMPUTE`` (contractions; other ops carry no FLOPs), ``weights`` the weight
  bytes over the weight bandwidth, ``activations`` the region's input and output bytes
  over the activation bandwidth (a region's intermediates stay on chip), and ``pass``
  a fixed cost per engine pass, which views and pointwise ops fed from inside the
  region do not pay (they ride their producer's pass;
  :func:`aneforge.cost.analytic.is_pass`). So no program is priced below the sum of
  its compute legs;
- each cut (bridge op) pays ``cut_us`` plus the bridge op's own cost, from the measured
  table (or its roofline when its family has no data).

``target=None`` uses the **default model**, the optimizer's pruning heuristic: constants
measured on an M5 Pro (``data/cost_model.json``, ``scripts/fit_cost_model.py``), no
utilization ramp. ``int8=True`` streams contraction weights at 1 byte and subtracts a
tie-breaker proportional to the weight bytes saved, far below a floor, so int8 is never
predicted slower. With ``target`` the **analytic per-chip model**
(:mod:`aneforge.cost.analytic`) answers; a target the program cannot compile for (a
blocking preflight finding, such as family 1) raises
:class:`~aneforge.errors.PreflightError` instead of returning a latency.

Biases: the default model has no utilization ramp, so small contractions are priced
faster than the engine runs them; norms, pools and softmax carry no FLOPs, so they are
priced by their traffic and pass cost only; bridge ops are nearest-anchor scaled
(magnitude only).

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((1, 4096))
    >>> est = af.estimate_breakdown(x @ np.ones((4096, 4096)))
    >>> est.nodes[0].bound, round(est.total_us) == round(af.estimate(x @ np.ones((4096, 4096))))
    ('weights', True)
"""

from __future__ import annotations

import math
import warnings
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..compiler.preflight import preflight, raise_if_blocked
from ..compiler.program import Program
from ..compression import quantize_graph_int8
from ..errors import DispatchFloorWarning
from ..gcpause import paused_gc
from ..graph.tensor import Tensor
from ..tables import TableMixin
from ..targets.names import resolve_target
from .analytic import (
    DEFAULT_TRAFFIC,
    ChipConstants,
    RegionLoad,
    check_traffic,
    chip_constants,
    load_parts,
    node_times,
    program_loads,
    program_time_us,
    spill_bytes,
)
from .calibration import Constants, constants

#: The chip the default model was measured on, and whose analytic estimate ``check``
#: reports when no target is named.
DEFAULT_CHIP = "M5 Pro"
# A program is floor-dominated when its dispatch floors are at least this share of it.
FLOOR_DOMINATED_SHARE = 0.5
# int8 tie-breaker: microseconds per weight byte saved, capped well below one floor.
INT8_TIE_US_PER_BYTE = 1e-6
INT8_TIE_MAX_FLOOR_SHARE = 0.01


@dataclass
class NodeCost:
    """One node's (layer's) part of an estimate.

    ``time_us = overhead_us + max(compute_us, weights_us + activations_us)`` for a fused
    node; a bridge node's ``time_us`` is its cut plus its own cost. ``bound`` is the
    largest term: 'compute', 'weights', 'activations' or 'overhead' (fused), 'measured'
    or a roofline term (bridge), 'shared' for a second output of one native call.
    """

    node: Tensor
    region: int
    kind: str  # "fused" or "bridge"
    time_us: float
    bound: str
    bytes: float
    flops: int
    name: str = ""
    compute_us: float = 0.0
    weights_us: float = 0.0
    activations_us: float = 0.0
    overhead_us: float = 0.0

    @property
    def op(self) -> str:
        return self.node.op

    def to_record(self) -> dict:
        """This layer as plain data (JSON-ready)."""
        return {
            "name": self.name,
            "op": self.op,
            "shape": list(self.node.shape),
            "region": self.region,
            "kind": self.kind,
            "time_us": self.time_us,
            "bound": self.bound,
            "flops": int(self.flops),
            "bytes": float(self.bytes),
            "compute_us": self.compute_us,
            "weights_us": self.weights_us,
            "activations_us": self.activations_us,
            "overhead_us": self.overhead_us,
        }


@dataclass
class Estimate(TableMixin):
    """An estimate with its breakdown. ``float(est)`` is the total in microseconds.

    It renders as a per-layer table in a notebook (``_repr_html_``) and in a rich
    terminal (``__rich__``); :meth:`to_records` gives the rows as plain dicts.

    ``total_us == floor_us + fused_us + cut_us`` (less the int8 tie-breaker), and
    ``fused_us`` is the sum of the fused nodes' ``time_us``. ``target`` is the
    architecture priced (None: the default model), ``chip`` the chip when one was named
    (its memory caps the DMA streams).
    """

    total_us: float
    floor_us: float  # dispatch floors paid (one per fused region)
    fused_us: float  # the fused nodes' times
    cut_us: float  # cut penalties plus bridge ops' own costs
    n_regions: int
    n_cuts: int
    nodes: list[NodeCost] = field(default_factory=list)
    int8: bool = False
    target: str | None = None
    chip: str | None = None  # the chip named, when the target was a chip name

    def __float__(self) -> float:
        return self.total_us

    @property
    def floor_share(self) -> float:
        """Share of the total spent in dispatch floors."""
        return self.floor_us / self.total_us if self.total_us else 0.0

    @property
    def parts_us(self) -> dict:
        """The total split by what each microsecond is spent on: 'floor' (dispatch),
        'overhead' (pass costs), 'compute', 'bandwidth' (each fused node's larger term)
        and 'cuts'. The parts add up to ``total_us`` (before the int8 tie-breaker)."""
        parts = {"floor": self.floor_us, "overhead": 0.0, "compute": 0.0, "bandwidth": 0.0}
        for nc in self.nodes:
            if nc.kind == "fused":
                parts["overhead"] += nc.overhead_us
                memory = nc.weights_us + nc.activations_us
                key = "compute" if nc.compute_us >= memory else "bandwidth"
                parts[key] += nc.time_us - nc.overhead_us
        parts["cuts"] = self.cut_us
        return parts

    @property
    def bound(self) -> str:
        """What dominates: the largest of :attr:`parts_us`."""
        parts = self.parts_us
        return max(parts, key=parts.get)

    def top_nodes(self, n: int = 3) -> list[NodeCost]:
        """The ``n`` most expensive nodes (layers)."""
        return sorted(self.nodes, key=lambda c: -c.time_us)[:n]

    def to_records(self) -> list[dict]:
        """Every layer as a dict (name, op, shape, time_us, bound, flops, bytes, ...)."""
        return [nc.to_record() for nc in self.nodes]

    @property
    def title(self) -> str:
        if self.target is None:
            where = "by the default model (pruning)"
        elif self.chip:
            where = f"on {self.chip} ({self.target})"
        else:
            where = f"on {self.target}"
        return (
            f"estimate {where}: {self.total_us:.1f} us, {self.bound}-bound, "
            f"{self.n_regions} region(s), {self.n_cuts} cut(s)"
        )


def default_chip_constants(c: Constants) -> ChipConstants:
    """The default model's constants in the analytic model's form: full utilization,
    no kernel buffer limit, weights on the weight path, activations on the data path."""
    return ChipConstants(
        arch="default",
        overhead_us=c.floor_us,
        peak_flops_per_us=c.flops_per_us,
        bw_data=c.act_bw_bytes_per_us,
        bw_kernel=c.bw_bytes_per_us,
        ramp_flops=1.0,
        ramp_exponent=1.0,
        kernel_buffer_bytes=math.inf,
        swap_rows=0,
        layer_us=c.layer_us,
    )


def roofs(target=None) -> dict:
    """The ceilings a layer can reach on ``target`` (None: the default model), for
    roofline plots: 'peak_flops_per_us' (convolution peak; matmuls reach
    'matmul_peak_flops_per_us'), 'weight_bytes_per_us' and 'activation_bytes_per_us'
    (the two DMA paths), 'floor_us' (one dispatch) and 'pass_us' (one engine pass).

    Example:
        >>> from aneforge.cost.estimate import roofs
        >>> r = roofs("M1")
        >>> r["peak_flops_per_us"] > r["matmul_peak_flops_per_us"] > 0
        True
    """
    if target is None:
        c = default_chip_constants(constants())
    else:
        c = chip_constants(resolve_target(target))
    return {
        "target": None if target is None else c.arch,
        "peak_flops_per_us": c.peak_flops_per_us,
        "matmul_peak_flops_per_us": c.peak_flops_per_us * c.matmul_peak_fraction,
        "weight_bytes_per_us": c.bw_kernel,
        "activation_bytes_per_us": c.bw_data,
        "floor_us": c.overhead_us,
        "pass_us": c.layer_us,
    }


#: The estimates of each Program, by (int8, constants, target, traffic): outside the
#: Program, and dropped with it (an estimate is a function of the immutable program and
#: those keys).
_ESTIMATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@paused_gc()  # one record per layer: see aneforge.gcpause
def estimate_breakdown(
    out,
    int8: bool = False,
    calibration: Constants | None = None,
    target=None,
    traffic: str = DEFAULT_TRAFFIC,
) -> Estimate:
    """Like :func:`estimate`, returning the :class:`Estimate` with its per-layer parts.

    ``target`` (an architecture or chip name) prices the program with that chip's
    analytic model; ``calibration`` replaces the default model's constants; ``traffic``
    picks the memory leg (:data:`aneforge.cost.analytic.TRAFFIC`). Each layer
    (:class:`NodeCost`) carries its name (``Program.layer_name``), op, time, what bounds
    it, FLOPs and bytes.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((1, 3, 64, 64))
        >>> y = af.conv(x, np.zeros((32, 3, 3, 3)), padding=1).relu()
        >>> [(n.name, n.op, n.bound) for n in af.estimate_breakdown(y, target="M1").nodes]
        [('conv_0', 'conv', 'compute'), ('relu_0', 'relu', 'activations')]
    """
    given = Program.coerce(out, "estimate")
    tgt = None if target is None else resolve_target(target)
    c = calibration or constants()
    memo_key = (bool(int8), c, tgt, check_traffic(traffic))  # M4, M4 Max: two keys
    memo = _ESTIMATES.setdefault(given, {})
    cached = memo.get(memo_key)
    if cached is not None:
        return cached
    prog = given
    if tgt is None:
        chip, family = default_chip_constants(c), None
    else:
        raise_if_blocked(preflight(prog, tgt))
        if int8:  # price the whole-graph int8 variant on that chip
            prog = Program.from_outputs(quantize_graph_int8(list(prog.outputs)))
        chip, family = chip_constants(tgt), tgt.family
    result = _price(prog, chip, family, int8 and tgt is None, c, traffic)
    result.target = None if tgt is None else tgt.arch
    result.chip = None if tgt is None else tgt.chip
    memo[memo_key] = result  # a Program is immutable: its estimate never goes stale
    return result


def _price(
    prog: Program, chip: ChipConstants, family, int8: bool, c: Constants, traffic: str
) -> Estimate:
    loads = program_loads(prog, family, chip.swap_rows, int8, traffic)
    names = prog.layer_names
    nodes: list[NodeCost] = []
    floors = fused = cuts = 0.0
    n_regions = 0
    for region, load in zip(prog.regions, loads):
        if not isinstance(load, RegionLoad):
            _, t, bound, nbytes, flops = load
            cuts += t
            first = region.nodes[0]
            nodes.append(_bridge_cost(first, region.index, t, bound, nbytes, flops, names))
            for extra in region.nodes[1:]:  # further outputs of the same native call
                nodes.append(NodeCost(extra, region.index, "bridge", 0.0, "shared", 0, 0,
                                      names[id(extra)]))  # fmt: skip
            continue
        n_regions += 1
        floors += chip.overhead_us
        compute, weights, acts, passes = load_parts(load, chip)
        times = node_times(compute, weights, acts, passes)
        fused += float(times.sum())
        nbytes = load.weight_bytes + load.acts_in + load.out_bytes + spill_bytes(load, chip)
        for i, node in enumerate(load.nodes):
            terms = (float(compute[i]), float(weights[i]), float(acts[i]), float(passes[i]))
            nodes.append(NodeCost(node, region.index, "fused", float(times[i]), _bound(*terms),
                                  float(nbytes[i]), int(load.flops[i]), names[id(node)],
                                  *terms))  # fmt: skip
    total = floors + fused + cuts
    if int8:
        saved = sum(
            float(np.sum(full.weight_bytes - enc.weight_bytes))
            for full, enc in zip(program_loads(prog, None, 0, traffic=traffic), loads)
            if isinstance(enc, RegionLoad)
        )
        total -= min(INT8_TIE_US_PER_BYTE * saved, INT8_TIE_MAX_FLOOR_SHARE * c.floor_us)
    return Estimate(total, floors, fused, cuts, n_regions, len(prog.cuts), nodes, int8)


def _bridge_cost(node, region, t, bound, nbytes, flops, names) -> NodeCost:
    return NodeCost(node, region, "bridge", t, bound, nbytes, flops, names[id(node)])


def _bound(compute: float, weights: float, acts: float, overhead: float) -> str:
    """The largest of a fused node's terms."""
    if overhead > max(compute, weights + acts):
        return "overhead"
    if compute >= weights + acts:
        return "compute"
    return "weights" if weights >= acts else "activations"


def estimate(out, int8: bool = False, target=None, traffic: str = DEFAULT_TRAFFIC) -> float:
    """Predicted latency in microseconds of a graph (Tensor(s)) or a compiled Program.

    ``target=None`` uses the default model (measured on an M5 Pro; the optimizer's
    pruning heuristic); with ``target`` (an architecture such as ``'h13'`` or a chip
    name such as ``'M1'``) the analytic per-chip model answers, and a target the
    program cannot compile for raises :class:`~aneforge.errors.PreflightError`.
    ``int8=True`` prices weights as per-channel int8. ``traffic`` picks where a
    region's memory leg comes from: ``"nodes"`` (per-node bytes from shapes) or
    ``"kernel"`` (the region kernel's compulsory traffic plus the spills of
    intermediates that overflow the chip's on-chip buffer; docs/cost_model.md, "The
    traffic leg"); anything else raises :class:`~aneforge.errors.OptionError`.
    Deterministic and measurement-free. See the module docstring for the formula and
    its biases.

    Example:
        >>> import aneforge as af
        >>> x = af.input((64, 256))
        >>> af.estimate(x.relu(), target="M1") > af.estimate(x.relu(), target="M5 Pro") > 0
        True
    """
    return estimate_breakdown(out, int8, target=target, traffic=traffic).total_us


def floor_dominated_message(prog) -> str | None:
    """The warning line when dispatch floors dominate ``prog``'s analytic estimate on its
    target (or on :data:`DEFAULT_CHIP` when it has none), else None.

    Runs at every compile, so it prices the program's totals only (no per-layer
    records, no preflight: compile has checked the target already).

    Example:
        >>> import aneforge as af
        >>> floor_dominated_message(Program.from_outputs([af.input((8,)).relu()]))[:9]
        'predicted'
    """
    tgt = resolve_target(prog.target if prog.target is not None else DEFAULT_CHIP)
    chip = chip_constants(tgt)
    loads = program_loads(prog, tgt.family, chip.swap_rows)
    total = program_time_us(loads, chip)
    n_regions = sum(isinstance(load, RegionLoad) for load in loads)
    floors = n_regions * chip.overhead_us
    share = floors / total if total else 0.0
    if share < FLOOR_DOMINATED_SHARE:
        return None
    return (
        f"predicted {total:.0f} us on {tgt.arch} is {share:.0%} "
        f"dispatch floor ({n_regions} region(s) x {chip.overhead_us:.0f} us): per-call "
        "overhead dominates. Batch more samples per call or chain more ops into one "
        "program; threads do not help (dispatch is single-in-flight)."
    )


def warn_if_floor_dominated(prog) -> None:
    """Warn (``DispatchFloorWarning``) with :func:`floor_dominated_message` when there
    is one (compile's ``warn::dispatch_floor`` pass gives the same warning)."""
    message = floor_dominated_message(prog)
    if message:
        warnings.warn(message, DispatchFloorWarning, stacklevel=2)


__all__ = ["DEFAULT_CHIP", "Estimate", "NodeCost", "estimate", "estimate_breakdown", "roofs"]
