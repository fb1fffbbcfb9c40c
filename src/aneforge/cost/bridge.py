"""Measured per-config latencies of the bridge ops, interpolated by a work scalar.

Each measured key (e.g. ``"sdpa H=8 S=128 D=64"``, ``"argmax [4,512]"``) is parsed into
a *work scalar*, a monotone measure of the op's size for its family: attention MACs
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
    """The work scalar of one measured key, or None when the key carries no size."""
    op = family.removeprefix("bridge_")
    f = _fields(key)
    shape = _SHAPE.search(key)
    elems = float(np.prod([float(v) for v in shape.group(1).split(",")])) if shape else None
    if op == "sdpa":
        return f["H"] * f["S"] ** 2 * f["D"]
    if op == "cross_correlation" and elems is not None:
        return elems * f.get("t", 1.0)
    if op == "fps":
        return f["N"] * f["k"]
    if op == "radius_search":
        return f["N"] * f["Nc"]
    if op in ("input_view", "dynamic_slice"):
        return f.get("size")
    if op == "scaled_elementwise":
        return f.get("W")
    if op == "cost_volume":
        return f["Wa"] * f["R"]
    return elems


def node_work(node: Tensor) -> float | None:
    """The work scalar of a bridge node, on the same scale as :func:`parse_work`."""
    op, x = node.op, node.srcs[0] if node.srcs else node
    if op == "sdpa":
        q, k = node.srcs[0].shape, node.srcs[1].shape
        heads = float(np.prod(q[:-2])) if len(q) > 2 else 1.0
        return heads * q[-2] * k[-2] * q[-1]
    if op == "cross_correlation":
        t = node.srcs[1].shape
        return float(x.size) / max(x.shape[1], 1) * t[-2] * t[-1]
    if op == "fps":
        return float(x.shape[-2]) * node.shape[-1]
    if op == "radius_search":
        return float(node.srcs[0].shape[-2]) * node.srcs[1].shape[-2]
    if op in ("input_view", "dynamic_slice"):
        return float(node.size)
    if op == "scaled_elementwise":
        return float(node.size)
    if op == "cost_volume":
        return float(x.shape[-1]) * node.shape[1]
    return float(x.size)


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
