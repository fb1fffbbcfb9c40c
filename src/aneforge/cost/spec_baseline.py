"""The spec's own analytic formula and constants, kept as the accuracy baseline.

``t = overhead + max(flops / peak, bytes / bw)`` per fused program, with the three
silicon anchors as ``data/anchors.json`` holds them (the file
:data:`aneforge.targets.ANCHORS` is; docs/targets.md tabulates it): h13 (M1) with its
peak, bandwidth and overhead; h14 (M2 Pro) with its peak and the utilization ramp
``peak * min(1, (flops / F) ** q)``, its bandwidth and overhead scaled from h13 by the
spec's rules (bandwidth by core count, overhead by clock); h17s (M5) with all three.
Bytes are the generic (inputs + weights + output) x 2 of every node. Every other
architecture takes its anchor (:func:`aneforge.targets.anchor_for`) scaled by the spec's
rules: overhead by the operating clock, bandwidth by the core count, peak (and the
ramp's F) by cores x effective clock.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.cost.spec_baseline import spec_estimate_us
    >>> x = af.input((1, 4096))
    >>> round(spec_estimate_us(x @ np.zeros((4096, 4096), np.float16), "h13") / 1000, 2)
    3.95
"""

from __future__ import annotations

from ..compiler.program import Program
from ..targets.projection import ANCHORS, REFERENCE_ARCH, anchor_for
from ..targets.table import get_target
from .roofline import node_bytes, node_flops

TFLOPS = 1e6  # TFLOP/s in flop/us
GB_S = 1e3  # GB/s in bytes/us


def _spec_anchor(arch: str) -> tuple:
    """The spec formula's constants on anchor ``arch`` (``data/anchors.json``): its own
    figures where the spec quotes them, else the M1's (h13) scaled by the spec's rules,
    the overhead by the operating clock and the bandwidth by the core count."""
    a, m1 = ANCHORS[arch], ANCHORS[REFERENCE_ARCH]
    t, ref = get_target(arch), get_target(REFERENCE_ARCH)
    overhead = a["floor_us"]
    if overhead is None:
        overhead = m1["floor_us"] * ref.clock_hz / t.clock_hz
    bw = a["bw_gb_s"] * GB_S if a["bw_gb_s"] is not None else None
    if bw is None:
        bw = m1["bw_gb_s"] * GB_S * t.cores / ref.cores
    ramp = (a["ramp"]["F"], a["ramp"]["q"]) if a["ramp"] else None
    return (overhead, a["peak_tflops"] * TFLOPS, bw, ramp)


#: arch -> (overhead us, peak flop/us, bw bytes/us, ramp (F, q) or None) of each anchor.
SPEC_ANCHORS = {arch: _spec_anchor(arch) for arch in ANCHORS}


def spec_constants(arch: str) -> tuple:
    """(overhead us, peak flop/us, bw bytes/us, ramp or None) of the spec formula on
    ``arch``: its anchor's constants scaled to the chip by the spec's rules.

    Example:
        >>> spec_constants("h13") == SPEC_ANCHORS["h13"]
        True
    """
    t = get_target(arch)
    anchor, _ = anchor_for(t)
    overhead, peak, bw, ramp = SPEC_ANCHORS[anchor]
    a = get_target(anchor)
    compute = (t.cores * t.eff_clock_hz) / (a.cores * a.eff_clock_hz)
    return (
        overhead * a.clock_hz / t.clock_hz,
        peak * compute,
        bw * t.cores / a.cores,
        (ramp[0] * compute, ramp[1]) if ramp else None,
    )


def spec_estimate_us(out, arch: str) -> float:
    """The spec formula's estimate (microseconds) of ``out`` (a graph or a Program) on
    ``arch``."""
    overhead, peak, bw, ramp = spec_constants(arch)
    prog = Program.coerce(out, "spec_estimate")
    total = 0.0
    for region in prog.fused_regions:
        compute = 0.0
        for n in region.nodes:
            f = node_flops(n)
            if f:
                eff = peak * min(1.0, (f / ramp[0]) ** ramp[1]) if ramp else peak
                compute += f / eff
        memory = sum(node_bytes(n) for n in region.nodes) / bw
        total += overhead + max(compute, memory)
    return total
