"""The rewrite engine: rules as data, applied bottom-up to a fixed point.

A :class:`Rule` names one algebraic fact: ``fn(node)`` returns a replacement tensor (of
the same shape) or ``None`` when the fact does not apply. :func:`rewrite` walks the graph
once in topological order, memoized per node so shared subgraphs are rewritten once and
stay shared, rebuilds a node only when one of its sources changed, and applies the rules
to every node until none matches. It returns the very same output objects when nothing
changed.

Names survive: a rebuilt node keeps its name, and a replacement a rule has just built
(fresh, unnamed) takes over the name of the node it replaces, since it computes the same
value. A rule that returns an existing node (``x * 1 -> x``) returns it with its own
name: the replaced node's name goes with the node. (There is no common-subexpression
merge here: structurally equal nodes stay separate, each with its name.)

Example:
    >>> import aneforge as af
    >>> from aneforge.optimizer.rewrite import rewrite
    >>> from aneforge.optimizer.rules import CANONICAL
    >>> x = af.input((2, 3))
    >>> (out,), report = rewrite([x.reshape((2, 3)) * 1.0], CANONICAL)
    >>> out is x, report.matches
    (True, {'identity_reshape': 1, 'mul_by_one': 1})
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..graph.naming import user_name
from ..graph.tensor import Tensor, creation_mark, with_srcs

# Rewriting one node more often than this means two rules undo each other.
MAX_REWRITES_PER_NODE = 64


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``fn(node) -> replacement | None`` for nodes of ``ops``.

    Attributes:
        name: unique id, used in reports.
        ops: the op names the rule looks at (the engine only calls it on those).
        fn: the rewrite itself; must return a tensor of ``node.shape`` or ``None``.
        lossless: True when the replacement computes the same values on the emulator
            (bit-identical, up to the sign of a zero), False for accuracy-affecting
            rewrites that only a tuner may admit.
        doc: one line saying what the rule does.
    """

    name: str
    ops: tuple[str, ...]
    fn: Callable[[Tensor], Tensor | None]
    lossless: bool
    doc: str


@dataclass
class RewriteReport:
    """What a rewrite did: per-rule match counts and how many nodes were rebuilt."""

    matches: dict[str, int] = field(default_factory=dict)
    rebuilt: int = 0

    @property
    def changed(self) -> bool:
        """Whether any rule fired or any node was rebuilt."""
        return bool(self.matches) or self.rebuilt > 0


def _index(rules: Sequence[Rule]) -> dict[str, list[Rule]]:
    names = [r.name for r in rules]
    dupes = sorted(n for n, c in Counter(names).items() if c > 1)
    if dupes:
        raise ValueError(f"rewrite: rule names repeat: {dupes}")
    by_op: dict[str, list[Rule]] = {}
    for rule in rules:
        for op in rule.ops:
            by_op.setdefault(op, []).append(rule)
    return by_op


def rewrite(outputs: Sequence[Tensor], rules: Sequence[Rule]):
    """Apply ``rules`` to the graph of ``outputs``; return (new outputs, report).

    Bottom-up and memoized: each original node is visited once, after its sources. A
    replacement is itself rewritten again (its new nodes included) until no rule
    matches, with :data:`MAX_REWRITES_PER_NODE` as the cycle guard.
    """
    by_op = _index(rules)
    counts: Counter[str] = Counter()
    memo: dict[int, Tensor] = {}
    alive: list[Tensor] = []  # keeps every memo key's object alive, so ids stay unique
    rebuilt = 0

    def settle(node: Tensor, depth: int = 0) -> Tensor:
        """Rewrite ``node`` (whose sources are settled) until no rule applies."""
        for _ in range(MAX_REWRITES_PER_NODE):
            for rule in by_op.get(node.op, ()):
                mark = creation_mark()
                out = rule.fn(node)
                if out is not None and out is not node:
                    if out.shape != node.shape:
                        raise RuntimeError(
                            f"rule {rule.name} changed shape {node.shape} -> {out.shape}"
                        )
                    counts[rule.name] += 1
                    node = visit(_inherit_name(out, node, mark), depth + 1)
                    break
            else:
                return node
        raise RuntimeError(f"rewrite: rules keep rewriting a {node.op} node (a rule cycle)")

    def visit(root: Tensor, depth: int = 0) -> Tensor:
        nonlocal rebuilt
        if depth > MAX_REWRITES_PER_NODE:
            raise RuntimeError("rewrite: replacements nest too deeply (a rule cycle)")
        stack = [(root, False)]
        while stack:
            node, ready = stack.pop()
            if id(node) in memo:
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((s, False) for s in reversed(node.srcs) if id(s) not in memo)
                continue
            new = with_srcs(node, [memo[id(s)] for s in node.srcs])
            if new is not node:
                rebuilt += 1
            result = settle(new, depth)
            alive.append(node)
            memo[id(node)] = result
            memo.setdefault(id(result), result)
        return memo[id(root)]

    new_outputs = [visit(t) for t in outputs]
    return new_outputs, RewriteReport(dict(counts), rebuilt)


def _inherit_name(out: Tensor, node: Tensor, mark: int) -> Tensor:
    """``out`` under ``node``'s name when the rule has just built it (after ``mark``) and
    left it unnamed: nothing else holds ``out`` yet, so the renamed copy is its only use."""
    name = user_name(node)
    if name is None or user_name(out) is not None or out._order <= mark or out.op == "input":
        return out
    return out.named(name)
