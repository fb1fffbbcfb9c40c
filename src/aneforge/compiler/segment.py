"""Segmentation: cut a program into fused regions interleaved with bridge sub-programs.

A graph without bridge ops is one fused region. Each bridge op runs as its own native
sub-program (a graph cut). Fused nodes are grouped by their *bridge depth*, the largest
number of bridge ops on any path from an input to them, so every fused node runs in
the earliest region its data allows and the number of fused regions is the smallest
possible: at most ``n_cuts + 1``. Regions are listed in execution order: fused region 0,
the bridge ops of depth 1, fused region 1, and so on.

Example:
    >>> import aneforge as af
    >>> x = af.input((1, 8, 4, 4))
    >>> prog = af.compile(x.relu(), opt=0)
    >>> [r.kind for r in prog.regions]
    ['fused']
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph.registry import get_op
from ..graph.tensor import Tensor


@dataclass(frozen=True)
class Region:
    """One dispatch unit: a fused region (many nodes) or one bridge op (a cut)."""

    kind: str  # "fused" or "bridge"
    index: int  # position in execution order
    nodes: tuple[Tensor, ...]  # a bridge region holds the outputs of one native call

    def __repr__(self) -> str:
        ops = ", ".join(n.op for n in self.nodes[:4]) + (", ..." if len(self.nodes) > 4 else "")
        return f"Region({self.kind} #{self.index}: {len(self.nodes)} node(s): {ops})"


def _call_key(node: Tensor):
    """Nodes with equal keys are outputs of one native call (topk's values and indices)."""
    attrs = tuple(sorted((k, repr(v)) for k, v in node.attrs.items() if k != "output"))
    return (node.op, tuple(id(s) for s in node.srcs), attrs)


def _native_calls(nodes: list[Tensor]) -> list[tuple[Tensor, ...]]:
    """Group the bridge nodes of one depth into native calls, in first-seen order."""
    calls: dict[tuple, list[Tensor]] = {}
    for node in nodes:
        calls.setdefault(_call_key(node), []).append(node)
    return [tuple(group) for group in calls.values()]


def segment(nodes: list[Tensor]) -> list[Region]:
    """Group computing ``nodes`` (in topological order) into regions; see module doc."""
    depth: dict[int, int] = {}
    fused: dict[int, list[Tensor]] = {}
    bridges: dict[int, list[Tensor]] = {}
    for node in nodes:
        kind = get_op(node.op).kind
        d = max((depth[id(s)] for s in node.srcs), default=0)
        if kind == "bridge":
            d += 1
            bridges.setdefault(d, []).append(node)
        elif kind == "fused":
            fused.setdefault(d, []).append(node)
        depth[id(node)] = d
    regions: list[Region] = []
    for d in range(0, max([*fused, *bridges], default=0) + 1):
        for call in _native_calls(bridges.get(d, [])):
            regions.append(Region("bridge", len(regions), call))
        if fused.get(d):
            regions.append(Region("fused", len(regions), tuple(fused[d])))
    return regions
