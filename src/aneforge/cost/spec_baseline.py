"""The spec's own analytic formula and constants, kept as the accuracy baseline.

``t = overhead + max(flops / peak, bytes / bw)`` per fused program, with the three
silicon anchors of spec 000: h13 (M1) peak 3.25 TFLOP/s, BW 9.0 GB/s, overhead 0.22 ms;
h14 (M2 Pro) peak 7.24 TFLOP/s with the ramp ``peak * min(1, (flops / 1.8e10) ** 0.38)``,
its BW and overhead scaled from h13 by the spec's rules (BW by core count, overhead by
clock); h17s (M5) BW 57 GB/s, floor 110 us, peak 8.9 TFLOP/s. Bytes are the generic
(inputs + weights + output) x 2 of every node. Every other architecture takes its
anchor (:func:`aneforge.targets.anchor_for`) scaled by the spec's rules: overhead by the
operating clock, bandwidth by the core count, peak (and the ramp's F) by cores x
effective clock.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.cost.spec_baseline import spec_estimate_us
    >>> x = af.input((1, 4096))
    >>> round(spec_estimate_us(x @ np.zeros((4096, 4096), np.float16), "h13") / 1000, 2)
    3.95
"""

from __future__ import annotations

from ..compiler.program import Program
from ..targets.projection import anchor_for
from ..targets.table import get_target
from .roofline import node_bytes, node_flops

# arch -> (overhead us, peak flop/us, bw bytes/us, ramp (F, q) or None)
_M1 = get_target("h13")
SPEC_ANCHORS = {
    "h13": (220.0, 3.25e6, 9.0e3, None),
    "h14": (
        220.0 * _M1.clock_hz / get_target("h14").clock_hz,
        7.24e6,
        9.0e3 * get_target("h14").cores / _M1.cores,
        (1.8e10, 0.38),
    ),
    "h17s": (110.0, 8.9e6, 5.7e4, None),
}


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
