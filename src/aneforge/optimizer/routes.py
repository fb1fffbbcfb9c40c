"""The equivalence-route registry of the bridge ops, and the lossless route pass.

Every bridge op is either *route-selectable* — it has an ``alt``, a fused decomposition
that removes its graph cut, with a loss class and the evidence for it — or
*single-route*, with the reason it has no alternative. Fused ops are single-route by
construction and are not listed. The decomposers live in :data:`BRIDGE_DECOMPOSERS`,
keyed like the registry; ``tests/optimizer/test_routes.py`` reconciles the two and
``tests/optimizer/test_exactness.py`` measures every alt's loss class on the emulator
(random graphs, inputs with signed zeros, infinities, NaN, subnormals and values near
65504).

Loss classes are the rewrite engine's exactness classes
(:data:`~aneforge.graph.rewrite.EXACTNESS`). Every alt is ``"bit-identical"`` (the
same fp16 bits as the native op on the emulator, signed zeros included), so the route
pass, which admits only bit-identical alts, is chosen on speed alone and never changes
a bit. An alt of a weaker class would be left out of it (``admit=``).

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

from ..errors import OptionError
from ..graph import api
from ..graph.ops.bridge import BRIDGE_OPS
from ..graph.rewrite import BIT_IDENTICAL, Rule, check_exactness, rewrite
from ..graph.tensor import Tensor, weight
from ..graph.walk import topological_order

#: The classes the lossless route pass (``opt='routes'``) and the lossless variants admit.
LOSSLESS_CLASSES = (BIT_IDENTICAL,)


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
    """``((x - amin) + 0) / ((amax - amin) + eps)`` from fused ops.

    The ``+ 0`` is the kernel's own step: ``x - amin`` is never negative, so a zero
    difference is ``+0``, whichever zero ``amin`` picked of a ``-0`` and a ``+0``
    (``-0 - (+0)`` is ``-0``, and ``1 / -0`` is ``-inf``).
    """
    x = node.srcs[0]
    axes = node.attrs["axes"]
    if axes is None:
        axes = tuple(range(1, x.ndim)) if x.ndim >= 2 else (0,)
    mn = api.amin(x, axes=axes, keepdims=True)
    mx = api.amax(x, axes=axes, keepdims=True)
    d = (x - mn) + _scalar_weight(0.0)
    return d / ((mx - mn) + _scalar_weight(node.attrs["eps"]))


def decompose_flatten(node: Tensor) -> Tensor:
    """A reshape to the same shape."""
    return api.reshape(node.srcs[0], node.shape)


def decompose_lrn(node: Tensor) -> Tensor:
    """LRN with the kernel's narrow channel-window sum, as adds of channel slices.

    The squares are padded on the channel axis like the ONNX window (zero weights
    concatenated on each side) and the window of channel ``c`` is summed in the
    kernel's order: ``padded[c] + padded[c + 1] + ...``, each add rounded to fp16. The
    kernel starts from ``0 + padded[c]``, which is ``padded[c]`` bit for bit (a square
    is never ``-0``), so the two are bit-identical. (A convolution against ones would
    sum in the wide accumulator and round once: different bits.)
    """
    x = node.srcs[0]
    size, c = node.attrs["size"], x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    # offsets past the channels add only +0 terms, which the kernel skips too (no bit
    # changes): the window spans at most 2c - 1 offsets whatever ``size`` is
    below, above = min(lo, c - 1), min(hi, c - 1)
    sq = api.square(x)

    def zeros(k):
        return [weight(np.zeros((x.shape[0], k, *x.shape[2:]), np.float16))] if k else []

    span = below + above + 1
    padded = api.concat(zeros(below) + [sq] + zeros(above), axis=1) if span > 1 else sq
    ss = None
    for j in range(span):  # channel c sums padded[c + j], j ascending, as the kernel does
        term = sq
        if span > 1:
            begins = (0, j) + (0,) * (x.ndim - 2)
            term = api.slice(padded, begins, (x.shape[0], j + c, *x.shape[2:]))
        ss = term if ss is None else ss + term
    t = ss * _scalar_weight(node.attrs["alpha"] / size) + _scalar_weight(node.attrs["bias"])
    return x / (t ** _scalar_weight(node.attrs["beta"]))


@dataclass(frozen=True)
class Route:
    """The registry entry of one bridge op.

    ``alt`` is the decomposer (node -> fused tensor) or None; ``loss_class`` (one of
    :data:`~aneforge.graph.rewrite.EXACTNESS`, with its measured ``bound`` when it
    is ``"bounded"``) and ``evidence`` describe the alt; ``single_route`` ops carry
    their ``reason``.
    """

    op: str
    alt: Callable[[Tensor], Tensor] | None
    loss_class: str | None
    evidence: str
    single_route: bool
    reason: str
    bound: float | None = None

    def rule(self, which: Callable[[Tensor], bool] = lambda node: True) -> Rule:
        """The alt as a rewrite rule of the route's class, for the nodes ``which`` picks."""
        alt = self.alt
        if alt is None:
            raise OptionError(f"route {self.op!r} is single-route: it has no alt to apply")

        def swap(node):
            return alt(node) if which(node) else None

        return Rule(f"route_{self.op}", (self.op,), swap, self.loss_class, "remove a cut",
                    self.bound)  # fmt: skip


BRIDGE_DECOMPOSERS: dict[str, Callable[[Tensor], Tensor]] = {
    "sdpa": decompose_sdpa,
    "minmax_norm": decompose_minmax_norm,
    "flatten": decompose_flatten,
    "lrn": decompose_lrn,
}

# op -> (loss class, evidence[, measured bound]); the classes are measured by
# tests/optimizer/test_exactness.py.
_ALTS = {
    "sdpa": (BIT_IDENTICAL, "emulator: same fp16 steps (q@k^T wide, scale, softmax, @v)"),
    "minmax_norm": (
        BIT_IDENTICAL,
        "emulator: same fp16 steps, a zero x - min taken as +0 by both (spec: relerr <= 1.5e-3)",
    ),
    "flatten": (BIT_IDENTICAL, "a reshape moves no values (spec: relerr 0.0)"),
    "lrn": (
        BIT_IDENTICAL,
        "emulator: the kernel's narrow window sum, in its order, as adds of channel slices "
        "(spec: cos 1.0)",
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
            loss, evidence, *bound = _ALTS[op]
            loss, b = check_exactness(loss, bound[0] if bound else None, f"route {op!r}")
            out[op] = Route(op, BRIDGE_DECOMPOSERS[op], loss, evidence, False, "", b)
        else:
            out[op] = Route(op, None, None, "", True, _SINGLE.get(op, "only lowering"))
    return out


def routes_for(op: str) -> Route:
    """The route entry of ``op``; fused and unknown ops are single-route."""
    reg = route_registry()
    if op in reg:
        return reg[op]
    return Route(op, None, None, "", True, "only lowering")


def route_rules(
    admit=LOSSLESS_CLASSES, which: Callable[[Tensor], bool] = lambda node: True
) -> list[Rule]:
    """One rewrite rule per alt whose loss class is in ``admit`` (each rule of its
    route's class), applied to the nodes ``which`` picks."""
    reg = route_registry()
    return [reg[op].rule(which) for op in BRIDGE_DECOMPOSERS if reg[op].loss_class in admit]


def decompose(outputs, which: Callable[[Tensor], bool] = lambda node: True,
              admit=LOSSLESS_CLASSES):  # fmt: skip
    """Replace every route-bearing bridge node for which ``which(node)`` holds and whose
    alt's class is in ``admit``. Returns (outputs, how many nodes were replaced)."""
    outs, report = rewrite(list(outputs), route_rules(admit, which))
    return outs, sum(report.matches.values())


def select_routes(outputs, cost: Callable, admit=LOSSLESS_CLASSES):
    """The lossless route pass: per route-bearing bridge node, keep the cheaper lowering.

    Greedy in execution order: each candidate swap is kept when ``cost`` (e.g.
    ``aneforge.estimate``) of the whole graph drops. Only alts whose loss class is in
    ``admit`` are candidates (default: bit-identical ones, so the pass changes no bit).
    Returns the new outputs and one decision record per candidate node (with the alt's
    ``loss_class``). A graph without such nodes comes back as is.
    """

    outs = list(outputs)
    decisions: list[dict] = []
    reg = route_registry()
    ops = {op for op in BRIDGE_DECOMPOSERS if reg[op].loss_class in admit}

    def candidates(graph):
        return [n for n in topological_order(graph) if n.op in ops]

    if not candidates(outs):
        return outs, decisions
    best = cost(outs)
    i = 0  # ordinal of the next undecided candidate (swapped ones drop out of the list)
    while i < len(cands := candidates(outs)):
        node = cands[i]
        trial, _ = decompose(outs, lambda m, node=node: m is node, admit)
        trial_cost = cost(trial)
        keep = trial_cost < best
        decisions.append(
            {"op": node.op, "shape": node.shape, "native_us": best, "fused_us": trial_cost,
             "choice": "fused" if keep else "native", "loss_class": reg[node.op].loss_class}
        )  # fmt: skip
        if keep:
            outs, best = trial, trial_cost
        else:
            i += 1
    return outs, decisions
