"""The equivalence-route registry of the bridge ops, and the lossless route pass.

Every bridge op is either *route-selectable* — it has an ``alt``, a fused decomposition
that removes its graph cut, with a loss class and the evidence for it — or
*single-route*, with the reason it has no alternative. Both are the op record's
``route`` field (a :class:`~aneforge.graph.facts.Decomposition` or a
:class:`~aneforge.graph.facts.SingleRoute`), declared with the op in
:mod:`aneforge.graph.ops.bridge`: a decomposition builds graph ops, so it lives in the
graph layer with the op it replaces, and this module only selects among them. Fused ops
are single-route by construction and are not listed. ``tests/optimizer/test_exactness.py``
measures every alt's loss class on the emulator (random graphs, inputs with signed
zeros, infinities, NaN, subnormals and values near 65504).

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

from ..errors import OptionError
from ..graph.facts import Decomposition
from ..graph.registry import all_ops
from ..graph.rewrite import BIT_IDENTICAL, Rule, check_exactness, rewrite
from ..graph.tensor import Tensor
from ..graph.walk import topological_order

#: The classes the lossless route pass (``opt='routes'``) and the lossless variants admit.
LOSSLESS_CLASSES = (BIT_IDENTICAL,)


def decomposers() -> dict[str, Callable[[Tensor], Tensor]]:
    """The fused decomposition of every route-selectable op, by name (from the records).

    Example:
        >>> sorted(decomposers())
        ['flatten', 'lrn', 'minmax_norm', 'sdpa']
    """
    return {
        name: op.route.build
        for name, op in all_ops().items()
        if isinstance(op.route, Decomposition)
    }


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


def route_registry() -> dict[str, Route]:
    """Every bridge op's route entry, from its record's ``route`` (module docstring)."""
    out = {}
    for name, op in all_ops().items():
        if op.kind != "bridge":
            continue
        r = op.route
        if isinstance(r, Decomposition):
            loss, b = check_exactness(r.exactness, r.bound, f"route {name!r}")
            out[name] = Route(name, r.build, loss, r.evidence, False, "", b)
        else:
            out[name] = Route(name, None, None, "", True, r.reason)
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
    return [r.rule(which) for r in reg.values() if r.alt is not None and r.loss_class in admit]


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
    ops = {op for op, r in reg.items() if r.alt is not None and r.loss_class in admit}

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
