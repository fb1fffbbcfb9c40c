"""A fused region's memory traffic from its kernel analysis (the ``"kernel"`` traffic leg).

The per-node leg (:func:`aneforge.cost.analytic.region_load` with ``traffic="nodes"``)
charges every node the external activations it reads and the output it writes out, from
shapes alone. This module reads the same traffic off the region's lowered kernel instead:
:func:`aneforge.kernel.lower.lower` of the region under the default placement (every
intermediate materialized) and :func:`aneforge.kernel.analyze.analyze` of that code, which
counts the distinct cells each buffer's accesses touch.

- **Compulsory traffic**: the region's input buffers (activations and weights) read, its
  output buffers written, each counted once however many nodes touch it (an input read by
  two nodes is loaded once, by the first; a strided or sliced read loads only the cells it
  touches). Fused intermediates stay resident on chip.
- **Exactness**: a buffer's count replaces the per-node bytes only where the analysis is
  exact for it (its footprint is not approximate and no opaque code touches it). Anywhere
  else the node keeps the per-node rule for that operand: each reader charges the whole
  source, each written output its size. Weights keep their encoded (streamed) bytes; the
  kernel only decides which share of them a node loads.
- **Spill**: an intermediate is resident only while the set of intermediates live beside
  it fits the chip's on-chip buffer. Liveness runs in region order (an intermediate is
  live from its producer to its last reader), ``live_bytes`` is the largest live set over
  an intermediate's lifetime, and an intermediate whose ``live_bytes`` exceed the buffer
  spills: the kernel writes it and reads it back, ``spill_bytes`` (its buffer's write and
  read footprints; the whole buffer each way where those are not exact). Which buffer
  size applies, and the path the spill takes (the shared fabric of re-streamed weight
  slices), are the chip's (:func:`aneforge.cost.analytic.load_parts`), so a
  :class:`KernelTraffic` is the same for every chip and computed once per Program.

Biases: the spill rule is all-or-nothing per intermediate and ignores tiling (a real
compiler streams tiles of a large intermediate through the buffer), so it overcharges a
region whose intermediates are large but consumed tile by tile; the live set is measured
in region order, which the engine may improve on.

Example:
    >>> import aneforge as af
    >>> x = af.input((64, 64), name="x")
    >>> prog = af.compile(x.exp() * x, opt=0)  # x read by both nodes, loaded once
    >>> t = kernel_traffic(prog, prog.fused_regions[0])
    >>> t.acts_in.tolist(), t.out_bytes.tolist(), t.exact
    ([8192.0, 0.0], [0.0, 8192.0], True)
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..compiler.program import Program
from ..compiler.segment import Region
from ..kernel.analyze import analyze
from ..kernel.ir import Opaque
from ..kernel.lower import lower

FP16 = 2

__all__ = ["KernelTraffic", "kernel_traffic"]


@dataclass(frozen=True)
class KernelTraffic:
    """One fused region's traffic per node (arrays in region order), chip-independent.

    ``acts_in``: activation bytes the node loads from memory (each input once, at its
    first reader); ``out_bytes``: bytes it writes out (region outputs only);
    ``weight_share``: the share of the node's streamed weight bytes it loads (0 where an
    earlier node of the region loaded the same weight); ``spill_bytes``: an
    intermediate's write plus read-back bytes if it spills; ``live_bytes``: the largest
    live set of intermediates over its lifetime (0 for a node that is not an
    intermediate). ``exact``: every buffer was counted by the analysis (no fallback).
    """

    acts_in: np.ndarray
    out_bytes: np.ndarray
    weight_share: np.ndarray
    spill_bytes: np.ndarray
    live_bytes: np.ndarray
    exact: bool

    @property
    def resident_bytes(self) -> float:
        """The region's largest live set of intermediates (its working set on chip)."""
        return float(self.live_bytes.max(initial=0.0))


#: Per Program, the traffic of each fused region by region index (a Program is
#: immutable, so an entry never goes stale; it is dropped with the Program).
_TRAFFIC: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def kernel_traffic(program: Program, region: Region) -> KernelTraffic:
    """The :class:`KernelTraffic` of fused ``region`` of ``program`` (module docstring),
    memoized per Program.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((1, 8, 16, 16), name="x")
        >>> y = af.conv(x, np.ones((8, 8, 1, 1)), stride=2)  # reads every other row, column
        >>> prog = af.compile(y, opt=0)
        >>> t = kernel_traffic(prog, prog.fused_regions[0])
        >>> int(t.acts_in[0]), 2 * 8 * 16 * 16 // 4
        (1024, 1024)
    """
    memo = _TRAFFIC.setdefault(program, {})
    if region.index not in memo:
        memo[region.index] = _measure(program, region)
    return memo[region.index]


def _measure(program: Program, region: Region) -> KernelTraffic:
    low = lower(program, region)  # the default placement: every intermediate materialized
    summary = analyze(low.code)
    untrusted = {
        name for st in low.code.body if isinstance(st, Opaque) for name in st.inputs + st.outputs
    }
    buffers = {b.name: b for b in low.code.buffers}

    def counted(name: str):
        """The buffer's footprint where the analysis is exact for it, else None."""
        f = summary.footprints.get(name)
        return None if f is None or f.approx or name in untrusted else f

    nodes = region.nodes
    position = {id(n): i for i, n in enumerate(nodes)}
    size = len(nodes)
    acts, out, share = np.zeros(size), np.zeros(size), np.ones(size)
    spill, exact = np.zeros(size), True
    loaded: set[int] = set()  # input nodes already loaded by an earlier reader
    for i, n in enumerate(nodes):
        w_total = w_loaded = 0.0
        for s in n.srcs:
            if id(s) in position:
                continue
            f = counted(low.names[id(s)])
            exact = exact and f is not None
            whole = FP16 * s.size
            if f is None:
                got = whole
            else:
                got = 0.0 if id(s) in loaded else float(f.read_bytes)
            loaded.add(id(s))
            if s.op == "weight":
                w_total, w_loaded = w_total + whole, w_loaded + got
            else:
                acts[i] += got
        if w_total:
            share[i] = w_loaded / w_total
    outputs = {id(n) for n in low.nodes.outputs}
    for i, n in enumerate(nodes):
        f = counted(low.names[id(n)])
        exact = exact and f is not None
        buf = buffers[low.names[id(n)]]
        whole = buf.size * buf.itemsize
        if id(n) in outputs:
            out[i] = whole if f is None else f.write_bytes
        else:
            spill[i] = 2 * whole if f is None else f.read_bytes + f.write_bytes
    live = _live_bytes(nodes, position, outputs, buffers, low.names)
    return KernelTraffic(acts, out, share, spill, live, exact)


def _live_bytes(nodes, position, outputs, buffers, names) -> np.ndarray:
    """Per node, the largest sum of the intermediates live at one step of its lifetime
    (producer to last reader, in region order); 0 for a node that is not one."""
    size = len(nodes)
    last = list(range(size))
    for i, n in enumerate(nodes):
        for s in n.srcs:
            j = position.get(id(s))
            if j is not None:
                last[j] = max(last[j], i)
    held = np.zeros(size)
    middle = [i for i, n in enumerate(nodes) if id(n) not in outputs]
    for i in middle:
        buf = buffers[names[id(nodes[i])]]
        held[i : last[i] + 1] += buf.size * buf.itemsize
    live = np.zeros(size)
    for i in middle:
        live[i] = held[i : last[i] + 1].max()
    return live
