"""Measured per-config latencies of the bridge ops, interpolated by a work scalar.

Each measured key (e.g. ``"sdpa H=8 S=128 D=64"``, ``"argmax [4,512]"``) is parsed into
a *work scalar*, a monotone measure of the op's size for its family, by the op record's
``work`` rule (:class:`~aneforge.graph.facts.Work`; this module parses the key): attention MACs
``H*S^2*D`` for sdpa, elements for the shape-keyed families (``[C,W]``, ``[C,H,W]``),
``H*W*th*tw`` for cross_correlation, ``N*k`` for fps, ``N*Nc`` for radius_search, the
window ``size`` for input_view/dynamic_slice, ``W`` for scaled_elementwise and ``Wa*R``
for cost_volume. A node's cost is the nearest measured point of its family in log-work
space, scaled by the work ratio and clamped to the dispatch floor. That captures
magnitude and ordering (what a pruner needs), not a per-shape fit. A family without
data returns ``None`` and the caller falls back to the roofline.

Example:
    >>> from aneforge.cost.bridge import parse_work
    >>> parse_work("bridge_sdpa", "sdpa H=8 S=128 D=64")
    8388608.0
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

import numpy as np

from ..graph.facts import ELEMENTS, Work
from ..graph.registry import all_ops
from ..graph.tensor import Tensor
from .calibration import constants

_FIELD = re.compile(r"(\w+)=(\d+)(?:x(\d+))?")
_SHAPE = re.compile(r"\[([\d,\s]+)\]")


def _fields(key: str) -> dict[str, float]:
    out = {}
    for name, a, b in _FIELD.findall(key):
        out[name] = float(a) * (float(b) if b else 1.0)
    return out


def parse_work(family: str, key: str) -> float | None:
    """The work scalar of one measured key (the op record's ``work.of_key``), or None
    when the key carries no size."""
    op = family.removeprefix("bridge_")
    shape = _SHAPE.search(key)
    elems = float(np.prod([float(v) for v in shape.group(1).split(",")])) if shape else None
    return _work(op).of_key(_fields(key), elems)


def node_work(node: Tensor) -> float | None:
    """The work scalar of a bridge node (its record's ``work.of_node``), on the same scale
    as :func:`parse_work`."""
    in_shapes = [s.shape for s in node.srcs] or [node.shape]
    return _work(node.op).of_node(in_shapes, node.shape, node.attrs)


def _work(op: str) -> Work:
    """The work rule of ``op``: its record's, or the input's elements for an op that
    has none (a fused op, a measured family no op is registered for)."""
    ops = all_ops()
    work = ops[op].work if op in ops else None
    return ELEMENTS if work is None else work


@lru_cache(maxsize=1)
def _table() -> dict[str, list[tuple[float | None, float]]]:
    table: dict[str, list[tuple[float | None, float]]] = {}
    for family, key, min_us in constants().bridge_ops:
        op = family.removeprefix("bridge_")
        table.setdefault(op, []).append((parse_work(family, key), min_us))
    return table


def bridge_cost_us(node: Tensor) -> float | None:
    """Measured-table cost of a bridge node, or None when its family has no data."""
    points = _table().get(node.op)
    if not points:
        return None
    floor = constants().floor_us
    sized = [(w, t) for w, t in points if w]
    if not sized:  # a single unsized measurement: the op's cost, flat in size
        return max(floor, min(t for _, t in points))
    work = node_work(node)
    if not work or work <= 0:
        return max(floor, min(t for _, t in sized))
    anchor_w, anchor_t = min(sized, key=lambda p: abs(math.log(work / p[0])))
    return max(floor, anchor_t * work / anchor_w)
