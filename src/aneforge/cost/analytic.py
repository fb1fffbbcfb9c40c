"""The analytic per-chip cost model: ``estimate(out, target=...)`` for every target.

Per fused program (region) on chip ``T``::

    t = overhead_T + max(compute_T, memory_T)

- ``compute_T = sum over contractions of flops / (peak_T * u)``, with the utilization
  ramp ``u = min(1, (flops / F_T) ** q)``: an op too small to fill every core and
  pipeline runs below peak (spec 000's h14 ramp, applied to every chip).
- ``memory_T``: weights stream through the kernel DMA path at ``bw_kernel_T`` (at their
  encoded bytes where the chip's family streams the encoding natively, else fp16), region
  inputs and outputs through the data path at ``bw_data_T``. Intermediates of a fused
  region stay on chip (they are never charged) unless larger than the on-chip buffer.
  A matmul whose activation is a few rows (a GEMV) runs with the roles swapped: the
  small activation becomes the kernel and the weight streams as data, whichever the
  compiler finds cheaper.
- Weights larger than the on-chip kernel buffer ``S_T`` are processed in buffer-sized
  slices, and the input activation is streamed once per slice (large-GEMM falloff).
  Fused intermediates are assumed resident on chip (never charged): optimistic for
  intermediates larger than the engine's buffers, which no published timing covers yet.

Chip scaling from the M1 (h13) constants, by the spec's rules: the overhead scales with
the operating clock, compute with cores x effective clock, bandwidth and on-chip
capacity with the core count (a fitted exponent). Cuts cost the chip-independent
``cut_us`` plus the bridge op's measured cost. The constants are fitted by
``scripts/fit_analytic.py`` against published silicon timings.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((1, 4096))
    >>> m1 = af.estimate(x @ np.ones((4096, 4096)), target="h13")
    >>> m5 = af.estimate(x @ np.ones((4096, 4096)), target="h17s")
    >>> m1 > m5
    True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..numerics.compression import weight_stream_bytes
from ..targets.table import Target, get_target
from .bridge import bridge_cost_us
from .calibration import constants
from .roofline import node_flops

M1_ARCH = "h13"
FP16 = 2


@dataclass(frozen=True)
class AnalyticParams:
    """The fitted constants, all at the M1 (h13) anchor."""

    overhead_us: float  # per-program dispatch + firmware round trip
    peak_flops_per_us: float  # fp16 compute peak
    bw_data_bytes_per_us: float  # data (activation) DMA bandwidth
    bw_kernel_bytes_per_us: float  # kernel (weight) DMA bandwidth
    bw_core_exponent: float  # bandwidth and buffer scale as (cores / 4) ** this
    ramp_flops: float  # F: flops at which one op reaches peak utilization
    ramp_exponent: float  # q of the utilization ramp
    kernel_buffer_bytes: float  # on-chip weight (kernel) buffer S
    swap_rows: int = 16  # a matmul with at most this many rows may swap roles


@lru_cache(maxsize=1)
def fitted_params() -> AnalyticParams:
    """The bundled fit (``data/analytic_model.json``)."""
    text = resources.files("aneforge.data").joinpath("analytic_model.json").read_text()
    return AnalyticParams(**json.loads(text)["params"])


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


def chip_constants(target: Target, p: AnalyticParams | None = None) -> ChipConstants:
    """Scale the M1-anchored constants to ``target`` (see the module docstring)."""
    p = p or fitted_params()
    m1 = get_target(M1_ARCH)
    compute = (target.cores * target.eff_clock_hz) / (m1.cores * m1.eff_clock_hz)
    clock = target.clock_hz / m1.clock_hz
    bw = (target.cores / m1.cores) ** p.bw_core_exponent
    return ChipConstants(
        target.arch,
        p.overhead_us / clock,
        p.peak_flops_per_us * compute,
        p.bw_data_bytes_per_us * bw,
        p.bw_kernel_bytes_per_us * bw,
        p.ramp_flops * compute,
        p.ramp_exponent,
        p.kernel_buffer_bytes * bw,
        p.swap_rows,
    )


def _rows(node) -> int:
    """Rows of a matmul/linear activation (all but its last axis)."""
    return math.prod(node.srcs[0].shape[:-1]) if node.srcs[0].ndim > 1 else 1


def node_terms(node, c: ChipConstants, inside=frozenset(), resident=False) -> dict:
    """One node's compute and memory time (us) on chip ``c`` within a fused region.

    ``inside``: ids of the region's nodes (their values are on chip); ``resident``: the
    node's output is only read inside the region, so it is never written out.
    """
    flops = node_flops(node)
    compute = 0.0
    if flops:
        util = min(1.0, (flops / c.ramp_flops) ** c.ramp_exponent)
        compute = flops / (c.peak_flops_per_us * util)
    family = get_target(c.arch).family  # encodings it does not stream cost fp16 bytes
    w = float(sum(weight_stream_bytes(s, family) for s in node.srcs if s.op == "weight"))
    acts_in = sum(FP16 * s.size for s in node.srcs if s.op != "weight" and id(s) not in inside)
    data = acts_in + (0.0 if resident else FP16 * node.size)
    if w > c.kernel_buffer_bytes:  # the input is streamed once per weight slice
        data += acts_in * (math.ceil(w / c.kernel_buffer_bytes) - 1)
    memory = w / c.bw_kernel + data / c.bw_data
    if w and node.op in ("matmul", "linear") and _rows(node) <= c.swap_rows:
        memory = min(memory, w / c.bw_data + data / c.bw_kernel)  # GEMV: roles swapped
    return {"node": node, "compute_us": compute, "memory_us": memory}


def region_time_us(nodes, c: ChipConstants, outputs=frozenset()) -> dict:
    """One fused region's time and its parts on chip ``c``.

    ``outputs`` holds the ids of nodes read after the region (program outputs, bridge
    inputs): those are written out even when also used inside. ``bound`` is 'floor'
    when the per-program overhead exceeds both the compute and the memory time.
    """
    inside = {id(n) for n in nodes}
    used_inside = {id(s) for n in nodes for s in n.srcs if id(s) in inside}
    terms = [node_terms(n, c, inside, id(n) in used_inside and id(n) not in outputs) for n in nodes]
    compute = sum(t["compute_us"] for t in terms)
    memory = sum(t["memory_us"] for t in terms)
    work = max(compute, memory)
    if c.overhead_us >= work:
        bound = "floor"
    else:
        bound = "compute" if compute >= memory else "bandwidth"
    return {
        "time_us": c.overhead_us + work,
        "overhead_us": c.overhead_us,
        "compute_us": compute,
        "memory_us": memory,
        "bound": bound,
        "nodes": terms,
    }


def analytic_estimate(prog, target: Target, p: AnalyticParams | None = None) -> dict:
    """Estimate of a Program on ``target``: total microseconds and per-region parts."""
    c = chip_constants(target, p)
    regions = []
    total = 0.0
    later = {id(t) for t in prog.outputs}
    for region in prog.regions:
        if region.kind == "bridge":
            later.update(id(s) for s in region.nodes[0].srcs)
    for region in prog.regions:
        if region.kind == "bridge":
            node = region.nodes[0]
            t = constants().cut_us + (bridge_cost_us(node) or 0.0)
            regions.append({"kind": "bridge", "op": node.op, "time_us": t, "bound": "cut"})
        else:
            r = region_time_us(region.nodes, c, later)
            regions.append(dict(r, kind="fused"))
            t = r["time_us"]
        total += t
    return {"total_us": total, "regions": regions, "arch": target.arch, "constants": c}
