"""The analytic per-chip cost model: ``estimate(out, target=...)`` for every target.

Per fused program (region) on chip ``T``::

    t = overhead_T + layer_T * passes + max(sum of compute_n, sum of memory_n)

- a region's DMA (weights streaming in, activations in and out) overlaps its compute
  across nodes (the engine prefetches the next pass's weights while one computes), so
  the work is the larger of the two sums, never below the sum of the compute legs;
- ``layer_T`` is a fixed cost per pass of the engine: every node but a view (reshape,
  squeeze, expand_dims: no data moves) and a pointwise op (elementwise ops, inference
  batch_norm) that reads a value produced inside the region, which runs in the epilogue
  of its producer's pass and overlaps it;
- ``compute_n = flops / (peak_T * u)`` for contractions,
  with the utilization
  ramp ``u = min(1, (flops / F_T) ** q)``: an op too small to fill every unit and
  pipeline runs below peak (the specification's h14 ramp, applied to every chip). matmul, linear
  and bmm run at a fitted fraction of the convolution peak (the engine is a
  convolution engine and lowers a matmul less efficiently).
- ``memory_T``: weights stream through the kernel DMA path at ``bw_kernel_T`` (at their
  encoded bytes where the chip's family streams the encoding natively, else fp16), region
  inputs and outputs through the data path at ``bw_data_T``. Intermediates of a fused
  region stay on chip (they are never charged). A matmul whose activation is a few rows
  (a GEMV) runs with the roles swapped: the small activation becomes the kernel and the
  weight streams as data, whichever the compiler finds cheaper. "matmul" is the record's
  ``role`` (``Role.MATMUL``: matmul, linear, bmm); the swap needs a streamed weight
  operand too (the record's ``weight_operand``: matmul and linear).
- Weights larger than the on-chip kernel buffer ``S_T`` are processed in buffer-sized
  slices, and the input activation is streamed again for every further slice through
  the shared fabric at ``restream_bw`` (large-GEMM falloff).
- Where the traffic comes from (``traffic=``): ``"nodes"`` charges each node the
  external activations it reads and the output it writes, from shapes; fused
  intermediates are assumed resident on chip, optimistic for intermediates larger than
  the engine's buffers. ``"kernel"`` reads the region's compulsory traffic off its
  lowered kernel (:mod:`aneforge.cost.traffic`: inputs, outputs and weights, each
  counted once, where that analysis is exact) and charges an intermediate whose live
  set exceeds the on-chip buffer ``S_T`` its spill: written out and read back through
  the shared fabric at ``restream_bw``, the path re-streamed slices take.

Chip scaling from the M1 (h13) constants, by the spec's rules with the core count taken
as the chip's parallel units (``Target.units``, cores / the curve's multiplier) and
entering through fitted powers: the overhead scales with 1 / operating clock and
``units ** -c``, compute (and the ramp's F) with ``units ** a`` x effective clock,
bandwidth and the kernel buffer with ``units ** b``; the re-stream path is
chip-independent. Cuts cost the
chip-independent ``cut_us`` plus the bridge op's measured cost. The constants are fitted
by ``scripts/fit_analytic.py`` against published silicon timings of twelve chips
(docs/cost_model.md).

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((1, 4096))
    >>> m1 = af.estimate(x @ np.ones((4096, 4096)), target="h13")
    >>> m5 = af.estimate(x @ np.ones((4096, 4096)), target="h17s")
    >>> m1 > m5
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..data import load as load_data
from ..errors import OptionError
from ..graph.facts import Flag, Role
from ..graph.registry import get_op
from ..targets.table import Target, get_target
from .bridge import bridge_cost_us
from .calibration import constants
from .roofline import node_bytes, node_flops, weight_bytes
from .traffic import KernelTraffic, kernel_traffic

M1_ARCH = "h13"
FP16 = 2
#: Where a region's memory leg comes from: ``"nodes"`` (per-node bytes from shapes) or
#: ``"kernel"`` (the region kernel's analysis, :mod:`aneforge.cost.traffic`).
TRAFFIC = ("nodes", "kernel")
#: The leg ``estimate`` uses unless told (docs/cost_model.md, "The traffic leg").
DEFAULT_TRAFFIC = "nodes"


@dataclass(frozen=True)
class AnalyticParams:
    """The fitted constants, all at the M1 (h13) anchor (4 units). ``units`` below is a
    chip's ``Target.units`` over the M1's; the defaults reproduce the spec's rules."""

    overhead_us: float  # per-program dispatch + firmware round trip
    peak_flops_per_us: float  # fp16 convolution peak
    bw_data_bytes_per_us: float  # data (activation) DMA bandwidth
    bw_kernel_bytes_per_us: float  # kernel (weight) DMA bandwidth
    bw_core_exponent: float  # bandwidth and buffer scale as units ** this
    ramp_flops: float  # F: flops at which one op reaches peak utilization
    ramp_exponent: float  # q of the utilization ramp
    kernel_buffer_bytes: float  # on-chip weight (kernel) buffer S
    compute_core_exponent: float = 1.0  # peak scales as units ** this x eff clock
    restream_bytes_per_us: float | None = None  # re-streamed slices' path (None: bw_data)
    overhead_unit_exponent: float = 0.0  # overhead also scales as units ** -this
    matmul_peak_fraction: float = 1.0  # matmul/linear/bmm run at this fraction of the peak
    layer_overhead_us: float = 0.0  # fixed cost of one engine pass (scales as 1 / clock)
    memory_share: float | None = None  # DMA reaches at most this share of the chip's memory
    swap_rows: int = 16  # a matmul with at most this many rows may swap roles


@lru_cache(maxsize=1)
def fitted_params() -> AnalyticParams:
    """The bundled fit (``data/analytic_model.json``, read by :func:`aneforge.data.load`)."""
    return AnalyticParams(**load_data("analytic_model.json")["params"])


@dataclass(frozen=True)
class ChipConstants:
    """The analytic constants of one target, scaled from the M1 anchor."""

    arch: str
    overhead_us: float
    peak_flops_per_us: float
    bw_data: float
    bw_kernel: float
    ramp_flops: float
    ramp_exponent: float
    kernel_buffer_bytes: float
    swap_rows: int
    matmul_peak_fraction: float = 1.0
    restream_bw: float = math.inf
    layer_us: float = 0.0


def chip_constants(target: Target, p: AnalyticParams | None = None) -> ChipConstants:
    """Scale the M1-anchored constants to ``target`` (see the module docstring)."""
    p = p or fitted_params()
    m1 = get_target(M1_ARCH)
    units = target.units / m1.units
    compute = units**p.compute_core_exponent * (target.eff_clock_hz / m1.eff_clock_hz)
    clock = target.clock_hz / m1.clock_hz
    bw = units**p.bw_core_exponent
    # A chip's memory caps both DMA paths; an architecture alone has no memory system.
    ceiling = math.inf
    if p.memory_share is not None and target.memory_bytes_per_us is not None:
        ceiling = p.memory_share * target.memory_bytes_per_us
    return ChipConstants(
        target.arch,
        p.overhead_us / clock / units**p.overhead_unit_exponent,
        p.peak_flops_per_us * compute,
        min(p.bw_data_bytes_per_us * bw, ceiling),
        min(p.bw_kernel_bytes_per_us * bw, ceiling),
        p.ramp_flops * compute,
        p.ramp_exponent,
        p.kernel_buffer_bytes * bw,
        p.swap_rows,
        p.matmul_peak_fraction,
        p.restream_bytes_per_us or p.bw_data_bytes_per_us * bw,
        p.layer_overhead_us / clock,
    )


def _rows(node) -> int:
    """Rows of a matmul/linear activation (all but its last axis)."""
    return math.prod(node.srcs[0].shape[:-1]) if node.srcs[0].ndim > 1 else 1


def is_pass(node, inside) -> bool:
    """Whether ``node`` costs the engine a pass of its own inside a region whose node ids
    are ``inside``: views never do; a pointwise op (``elementwise`` or ``pointwise``
    flag) does only when none of its activation inputs is produced in the region."""
    flags = get_op(node.op).flags
    if Flag.VIEW in flags:
        return False
    if Flag.ELEMENTWISE in flags or Flag.POINTWISE in flags:
        return not any(id(s) in inside for s in node.srcs if s.op != "weight")
    return True


@dataclass(frozen=True)
class RegionLoad:
    """What one fused region asks of a chip, whatever the constants: per node (arrays in
    the region's order) its flops, streamed weight bytes, input activation bytes read
    from memory, output bytes written out, whether it is a GEMV that may swap roles, a
    matmul-family op, and an engine pass of its own (:func:`is_pass`). With the kernel
    traffic leg also each intermediate's spill bytes and live set (it spills on a chip
    whose buffer the live set exceeds: :func:`spill_bytes`) and the input bytes a sliced
    weight re-streams (``stream_in``; None: ``acts_in``).
    Computed once per (program, family); :func:`region_time_us` prices it on a chip."""

    nodes: tuple
    flops: np.ndarray
    weight_bytes: np.ndarray
    acts_in: np.ndarray
    out_bytes: np.ndarray
    swappable: np.ndarray
    matmul: np.ndarray
    passes: np.ndarray
    spill: np.ndarray | None = None
    live: np.ndarray | None = None
    stream_in: np.ndarray | None = None


def region_load(
    nodes,
    family: int | None,
    outputs=frozenset(),
    swap_rows: int = 16,
    int8: bool = False,
    kernel: KernelTraffic | None = None,
) -> RegionLoad:
    """The :class:`RegionLoad` of ``nodes`` (one fused region) on a chip of ``family``.

    A node's value stays on chip (no traffic) when read inside the region and not in
    ``outputs`` (ids of nodes read after the region); weights cost their encoded bytes
    where ``family`` streams the encoding natively, else fp16 (``family=None``: their
    encoded bytes; ``int8=True`` prices fp16 contraction weights at one byte each).
    ``kernel``: the region's :func:`~aneforge.cost.traffic.kernel_traffic`, whose
    activation bytes, weight shares and spills then replace the per-node rule.
    """
    inside = {id(n) for n in nodes}
    used_inside = {id(s) for n in nodes for s in n.srcs if id(s) in inside}
    cols = []
    for n in nodes:
        resident = id(n) in used_inside and id(n) not in outputs
        op = get_op(n.op)
        matmul = op.role is Role.MATMUL
        cols.append((
            node_flops(n),
            weight_bytes(n, int8, family),
            FP16 * sum(s.size for s in n.srcs if s.op != "weight" and id(s) not in inside),
            0.0 if resident else FP16 * n.size,
            matmul and op.weight_operand is not None and _rows(n) <= swap_rows,
            matmul,
            is_pass(n, inside),
        ))  # fmt: skip
    flops, w, acts, out, swap, mm, passes = (np.array(c, float) for c in zip(*cols))
    flags = (swap > 0, mm > 0, passes > 0)
    if kernel is None:
        return RegionLoad(tuple(nodes), flops, w, acts, out, *flags)
    w = w * kernel.weight_share
    legs = (kernel.acts_in, kernel.out_bytes, *flags, kernel.spill_bytes, kernel.live_bytes)
    return RegionLoad(tuple(nodes), flops, w, *legs, stream_in=acts)


def spill_bytes(load: RegionLoad, c: ChipConstants) -> np.ndarray:
    """Per node of ``load``, the bytes its intermediate spills on chip ``c``: its write
    and read-back where its live set exceeds the on-chip buffer, else 0 (always 0 on the
    per-node traffic leg, which keeps every intermediate resident).

    Example:
        >>> import aneforge as af
        >>> from aneforge.compiler.program import Program
        >>> x, m1 = af.input((512, 512)), get_target("h13")
        >>> prog = Program.from_outputs([x.exp() + 1.0])  # exp: 512 KiB, past the buffer
        >>> (load,) = program_loads(prog, m1.family, traffic="kernel")
        >>> spill_bytes(load, chip_constants(m1)).tolist()
        [1048576.0, 0.0]
    """
    if load.spill is None:
        return np.zeros(len(load.nodes))
    return np.where(load.live > c.kernel_buffer_bytes, load.spill, 0.0)


def load_parts(load: RegionLoad, c: ChipConstants) -> tuple[np.ndarray, ...]:
    """Per-node (compute, weight traffic, activation traffic, pass overhead) in us of
    ``load`` on chip ``c``; a node takes ``overhead + max(compute, weights + acts)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.minimum(1.0, (load.flops / c.ramp_flops) ** c.ramp_exponent)
        peak = c.peak_flops_per_us * np.where(load.matmul, c.matmul_peak_fraction, 1.0)
        compute = np.where(load.flops > 0, load.flops / (peak * util), 0.0)
    w = load.weight_bytes
    slices = np.where(w > c.kernel_buffer_bytes, np.ceil(w / c.kernel_buffer_bytes), 1.0)
    data = load.acts_in + load.out_bytes
    streamed = load.acts_in if load.stream_in is None else load.stream_in
    # Through the shared fabric: the input again for each further weight slice, and a
    # spilled intermediate out and back (both re-read activations of this program).
    restream = (streamed * (slices - 1) + spill_bytes(load, c)) / c.restream_bw
    weights, acts = w / c.bw_kernel, data / c.bw_data + restream
    # A GEMV may swap roles: the activation becomes the kernel, the weight streams as data.
    sw_weights, sw_acts = w / c.bw_data, data / c.bw_kernel + restream
    swap = load.swappable & (w > 0) & (sw_weights + sw_acts < weights + acts)
    weights, acts = np.where(swap, sw_weights, weights), np.where(swap, sw_acts, acts)
    return compute, weights, acts, np.where(load.passes, c.layer_us, 0.0)


def load_terms(load: RegionLoad, c: ChipConstants) -> tuple[np.ndarray, np.ndarray]:
    """Per-node (compute us, memory us) of ``load`` on chip ``c``."""
    compute, weights, acts, _ = load_parts(load, c)
    return compute, weights + acts


def node_times(compute, weights, acts, overhead) -> np.ndarray:
    """Each node's part of its region's time: its pass overhead plus its share of the
    region's overlapped work ``max(sum compute, sum memory)`` (weight and activation DMA
    of one pass overlaps the compute of others), in proportion to the node's own
    roofline time ``max(compute, weights + acts)``. The parts add up to the region's
    work plus its pass overheads."""
    alone = np.maximum(compute, weights + acts)
    total_alone = float(alone.sum())
    work = max(float(compute.sum()), float((weights + acts).sum()))
    scale = work / total_alone if total_alone > 0 else 0.0
    return overhead + alone * scale


def node_terms(node, c: ChipConstants) -> dict:
    """One node's compute and memory time (us) on chip ``c`` as a region of its own
    (inputs read from memory, output written back)."""
    compute, memory = load_terms(region_load([node], get_target(c.arch).family), c)
    return {"node": node, "compute_us": float(compute[0]), "memory_us": float(memory[0])}


def region_time_us(nodes, c: ChipConstants, outputs=frozenset(), load=None) -> dict:
    """One fused region's time and its parts on chip ``c``.

    ``outputs`` holds the ids of nodes read after the region (program outputs, bridge
    inputs): those are written out even when also used inside. ``load`` is the region's
    precomputed :class:`RegionLoad` (computed here when not given). ``bound`` is
    'floor' when the per-program overhead exceeds the nodes' time.
    """
    if load is None:
        load = region_load(nodes, get_target(c.arch).family, outputs, c.swap_rows)
    compute, weights, acts, passes = load_parts(load, c)
    times = node_times(compute, weights, acts, passes)
    work = float(times.sum())
    memory = weights + acts
    if c.overhead_us >= work:
        bound = "floor"
    else:
        bound = "compute" if compute.sum() >= memory.sum() else "bandwidth"
    terms = [
        {
            "node": n,
            "time_us": float(t),
            "compute_us": float(a),
            "weights_us": float(w),
            "activations_us": float(x),
            "memory_us": float(w + x),
            "overhead_us": float(o),
        }
        for n, t, a, w, x, o in zip(load.nodes, times, compute, weights, acts, passes)
    ]
    return {
        "time_us": c.overhead_us + work,
        "overhead_us": c.overhead_us,
        "work_us": work,
        "compute_us": float(compute.sum()),
        "memory_us": float(memory.sum()),
        "bound": bound,
        "nodes": terms,
    }


def bridge_load(node) -> tuple:
    """A cut's price, the same on every chip: ``(op, time_us, bound, bytes, flops)`` with
    the time ``cut_us`` plus the bridge op's measured cost, or its default-model
    roofline when its family has no measurement (bound 'measured' or that roofline's)."""
    c = constants()
    nbytes, flops = node_bytes(node), node_flops(node)
    measured = bridge_cost_us(node)
    if measured is not None:
        return node.op, c.cut_us + measured, "measured", nbytes, flops
    compute, memory = flops / c.flops_per_us, nbytes / c.bw_bytes_per_us
    bound = "compute" if compute > memory else "bandwidth"
    return node.op, c.cut_us + max(compute, memory), bound, nbytes, flops


def check_traffic(traffic: str) -> str:
    """``traffic`` if it is one of :data:`TRAFFIC`, else :class:`OptionError`.

    Example:
        >>> check_traffic("kernel")
        'kernel'
    """
    if traffic not in TRAFFIC:
        raise OptionError(f"traffic={traffic!r} is not one of {', '.join(TRAFFIC)}")
    return traffic


def program_loads(
    prog,
    family: int | None,
    swap_rows: int = 16,
    int8: bool = False,
    traffic: str = DEFAULT_TRAFFIC,
) -> list:
    """Per region of ``prog``, what it asks of a chip of ``family`` whatever the
    constants: a :class:`RegionLoad` for a fused region, a :func:`bridge_load` tuple
    (time at index 1) for a bridge. Pass it to :func:`analytic_estimate` to price many
    constants quickly. ``traffic`` picks the memory leg (:data:`TRAFFIC`).

    Example:
        >>> import aneforge as af
        >>> from aneforge.compiler.program import Program
        >>> x = af.input((256, 256))
        >>> prog = Program.from_outputs([x.exp() * x])  # x read twice, loaded once
        >>> [float(load.acts_in.sum()) for t in TRAFFIC for load in program_loads(
        ...     prog, None, traffic=t)]
        [262144.0, 131072.0]
    """
    kernel = check_traffic(traffic) == "kernel"
    later = {id(t) for t in prog.outputs}
    for region in prog.regions:
        if region.kind == "bridge":
            later.update(id(s) for s in region.nodes[0].srcs)
    loads = []
    for region in prog.regions:
        if region.kind == "bridge":
            loads.append(bridge_load(region.nodes[0]))
        else:
            traffic_of = kernel_traffic(prog, region) if kernel else None
            loads.append(region_load(region.nodes, family, later, swap_rows, int8, traffic_of))
    return loads


def program_time_us(loads, c: ChipConstants) -> float:
    """Total time (us) of a program given as its :func:`program_loads`, on chip ``c``:
    the sum of :func:`region_time_us` without the per-part bookkeeping (for fitting)."""
    total = 0.0
    for load in loads:
        if isinstance(load, RegionLoad):
            total += c.overhead_us + float(node_times(*load_parts(load, c)).sum())
        else:
            total += load[1]
    return total


def analytic_estimate(
    prog, target: Target, p: AnalyticParams | None = None, loads=None, traffic=DEFAULT_TRAFFIC
) -> dict:
    """Estimate of a Program on ``target``: total microseconds and per-region parts.

    ``loads``: the program's :func:`program_loads` for ``target``'s family, if already
    computed (the fitter prices one program under many constants); else they are
    computed with the ``traffic`` leg.
    """
    c = chip_constants(target, p)
    if loads is None:
        loads = program_loads(prog, target.family, c.swap_rows, traffic=traffic)
    regions = []
    for load in loads:
        if isinstance(load, RegionLoad):
            regions.append(dict(region_time_us(load.nodes, c, load=load), kind="fused"))
        else:
            regions.append({"kind": "bridge", "op": load[0], "time_us": load[1], "bound": "cut"})
    total = sum(r["time_us"] for r in regions)
    return {"total_us": total, "regions": regions, "arch": target.arch, "constants": c}
