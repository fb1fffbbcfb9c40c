"""The equivalence-route registry of the bridge ops, and the lossless route pass.

Every bridge op is either *route-selectable* — it has an ``alt``, a fused decomposition
that removes its graph cut, with a loss class and the evidence for it — or
*single-route*, with the reason it has no alternative. Fused ops are single-route by
construction and are not listed. The decomposers live in :data:`BRIDGE_DECOMPOSERS`,
keyed like the registry; ``tests/optimizer/test_routes.py`` reconciles the two and
re-measures every alt's loss class on the emulator.

Loss classes: ``"bit-identical"`` (same fp16 bits on the emulator) and
``"fp16-op-noise"`` (relative error within :data:`FP16_OP_NOISE`). Both are lossless:
routes are chosen on speed alone.

Example:
    >>> import aneforge as af
    >>> reg = af.route_registry()
    >>> reg["lrn"].alt is not None, reg["sort"].single_route
    (True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..graph import api
from ..graph.ops.bridge import BRIDGE_OPS
from ..graph.tensor import Tensor, weight
from .rewrite import Rule, rewrite

FP16_OP_NOISE = 1.5e-3  # relative error of a clean fused fp16 op chain


def _scalar_weight(value: float) -> Tensor:
    return weight(np.float16(value))


def decompose_sdpa(node: Tensor) -> Tensor:
    """``((q @ k^T) * scale [+ mask]).softmax(-1) @ v`` from fused ops."""
    q, k, v = node.srcs[:3]
    scale = node.attrs["scale"]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    perm = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    s = api.bmm(q, api.transpose(k, perm)) * _scalar_weight(scale)
    if node.attrs["has_mask"]:
        s = s + node.srcs[3]
    return api.bmm(api.softmax(s, axis=-1), v)


def decompose_minmax_norm(node: Tensor) -> Tensor:
    """``(x - amin) / ((amax - amin) + eps)`` from fused ops."""
    x = node.srcs[0]
    axes = node.attrs["axes"]
    if axes is None:
        axes = tuple(range(1, x.ndim)) if x.ndim >= 2 else (0,)
    mn = api.amin(x, axes=axes, keepdims=True)
    mx = api.amax(x, axes=axes, keepdims=True)
    return (x - mn) / ((mx - mn) + _scalar_weight(node.attrs["eps"]))


def decompose_flatten(node: Tensor) -> Tensor:
    """A reshape to the same shape."""
    return api.reshape(node.srcs[0], node.shape)


def decompose_lrn(node: Tensor) -> Tensor:
    """LRN with the channel-window sum as a convolution against ones (wide accumulator).

    ``x`` [N, C, ...] is viewed as [N, 1, C, rest]; a (size x 1) ones kernel, padded on
    the channel axis like the ONNX window, sums the squares of each window.
    """
    x = node.srcs[0]
    size, c = node.attrs["size"], x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    rest = int(np.prod(x.shape[2:], dtype=np.int64))
    sq = api.reshape(api.square(x), (x.shape[0], 1, c, rest))
    ones = weight(np.ones((1, 1, size, 1), np.float16))
    window = api.conv(sq, ones, pad=(lo, 0, hi, 0))
    ss = api.reshape(window, x.shape)
    t = ss * _scalar_weight(node.attrs["alpha"] / size) + _scalar_weight(node.attrs["bias"])
    return x / (t ** _scalar_weight(node.attrs["beta"]))


@dataclass(frozen=True)
class Route:
    """The registry entry of one bridge op.

    ``alt`` is the decomposer (node -> fused tensor) or None; ``loss_class`` and
    ``evidence`` describe the alt; ``single_route`` ops carry their ``reason``.
    """

    op: str
    alt: Callable[[Tensor], Tensor] | None
    loss_class: str | None
    evidence: str
    single_route: bool
    reason: str


BRIDGE_DECOMPOSERS: dict[str, Callable[[Tensor], Tensor]] = {
    "sdpa": decompose_sdpa,
    "minmax_norm": decompose_minmax_norm,
    "flatten": decompose_flatten,
    "lrn": decompose_lrn,
}

_ALTS = {
    "sdpa": ("bit-identical", "emulator: same fp16 steps (q@k^T wide, scale, softmax, @v)"),
    "minmax_norm": ("bit-identical", "emulator: same fp16 steps (spec: relerr <= 1.5e-3)"),
    "flatten": ("bit-identical", "a reshape moves no values (spec: relerr 0.0)"),
    "lrn": (
        "fp16-op-noise",
        "emulator: window sum in the wide accumulator vs the narrow one (spec: cos 1.0)",
    ),
}

_RANK5 = (
    "the reshape+transpose decomposition needs a rank-6 intermediate; the compiler rejects "
    "rank > 5 ('Rank of the shape parameter must be between 0 and 5')"
)
_SINGLE = {
    "space_to_channel": _RANK5,
    "channel_to_space": _RANK5,
    "space_to_batch": _RANK5,
    "batch_to_space": _RANK5,
    "argmax": "no fused reduction/selection lowering (gather/argmax arch-gated)",
    "topk": "no fused selection lowering; the native bridge is the only route",
    "sort": "no in-graph sort; the native bridge is the only route",
    "input_view": "no fused slice op surfaced on the engine; native bridge only",
    "dynamic_slice": "no fused slice op surfaced; a runtime offset needs the native bridge",
    "fps": "data-dependent, iterative: inexpressible as a fused feed-forward graph",
    "radius_search": "data-dependent neighbour lists: inexpressible as a fused graph",
    "cross_product": "no decomposition validated on silicon yet (slice/mul/sub candidate)",
    "cross_correlation": ("the template is a runtime tensor; a fused conv needs constant weights"),
    "cost_volume": "per-disparity width-offset slices of a runtime tensor; no validated alt",
    "scaled_elementwise": "candidate (a op b) * scale form not validated on silicon",
}


def route_registry() -> dict[str, Route]:
    """Every bridge op's route entry (see the module docstring)."""
    out = {}
    for op in BRIDGE_OPS:
        if op in _ALTS:
            loss, evidence = _ALTS[op]
            out[op] = Route(op, BRIDGE_DECOMPOSERS[op], loss, evidence, False, "")
        else:
            out[op] = Route(op, None, None, "", True, _SINGLE.get(op, "only lowering"))
    return out


def routes_for(op: str) -> Route:
    """The route entry of ``op``; fused and unknown ops are single-route."""
    reg = route_registry()
    if op in reg:
        return reg[op]
    return Route(op, None, None, "", True, "only lowering")


def decompose(outputs, which: Callable[[Tensor], bool] = lambda node: True):
    """Replace every route-bearing bridge node for which ``which(node)`` holds."""

    def swap(node):
        return BRIDGE_DECOMPOSERS[node.op](node) if which(node) else None

    rule = Rule("bridge_decompose", tuple(BRIDGE_DECOMPOSERS), swap, True, "remove a cut")
    outs, report = rewrite(list(outputs), [rule])
    return outs, report.matches.get("bridge_decompose", 0)


def select_routes(outputs, cost: Callable) -> tuple[list[Tensor], list[dict]]:
    """The lossless route pass: per route-bearing bridge node, keep the cheaper lowering.

    Greedy in execution order: each candidate swap is kept when ``cost`` (e.g.
    ``aneforge.estimate``) of the whole graph drops. Returns the new outputs and one
    decision record per candidate node. A graph without such nodes comes back as is.
    """
    from ..compiler.compile import topological_order

    outs = list(outputs)
    decisions: list[dict] = []

    def candidates(graph):
        return [n for n in topological_order(graph) if n.op in BRIDGE_DECOMPOSERS]

    if not candidates(outs):
        return outs, decisions
    best = cost(outs)
    i = 0  # ordinal of the next undecided candidate (swapped ones drop out of the list)
    while i < len(cands := candidates(outs)):
        node = cands[i]
        trial, _ = decompose(outs, lambda m, node=node: m is node)
        trial_cost = cost(trial)
        keep = trial_cost < best
        decisions.append(
            {"op": node.op, "shape": node.shape, "native_us": best, "fused_us": trial_cost,
             "choice": "fused" if keep else "native"}
        )  # fmt: skip
        if keep:
            outs, best = trial, trial_cost
        else:
            i += 1
    return outs, decisions
