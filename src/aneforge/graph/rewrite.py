"""The rewrite engine: rules as data, applied bottom-up to a fixed point.

A :class:`Rule` names one algebraic fact: ``fn(node)`` returns a replacement tensor (of
the same shape) or ``None`` when the fact does not apply. Every rule carries its
exactness class (:data:`EXACTNESS`) as data; ``tests/optimizer/test_exactness.py``
measures each rule set's and each route's class on the emulator.

:func:`rewrite` walks the graph once in topological order, memoized per node so shared
subgraphs are rewritten once and stay shared, rebuilds a node only when one of its
sources changed, and applies the rules to every node until none matches. It returns
the very same output objects when nothing changed.

Names survive: a rebuilt node keeps its name, and a replacement a rule has just built
(fresh, unnamed) takes over the name of the node it replaces, since it computes the same
value. A rule that returns an existing node (``x * 1 -> x``) returns it with its own
name: the replaced node's name goes with the node. (There is no common-subexpression
merge here: structurally equal nodes stay separate, each with its name.)

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.rewrite import rewrite
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

from ..errors import OptionError
from .naming import user_name
from .tensor import Tensor, creation_mark, with_srcs

# Rewriting one node more often than this means two rules undo each other.
MAX_REWRITES_PER_NODE = 64

#: Same fp16 bits on the emulator for every input, signed zeros included (a NaN stays a
#: NaN; its payload is not part of the claim).
BIT_IDENTICAL = "bit-identical"
#: Every output at least as close to the exact (float64) value of the replaced node, on
#: the same fp16 inputs, as the original's, or else one of the two fp16 values around
#: that exact value (a faithful rounding: a float32 accumulator can move a sum that sits
#: within its own rounding of an fp16 midpoint to the other side). Values may change.
EQUAL_OR_BETTER = "equal-or-better"
#: Relative deviation from the original, ``max|new - old| / max|old|``, within the
#: record's measured ``bound``.
BOUNDED = "bounded"
#: No claim: accuracy-affecting, admitted only where a measurement gates it.
LOSSY = "lossy"
#: The exactness classes, strongest first.
EXACTNESS = (BIT_IDENTICAL, EQUAL_OR_BETTER, BOUNDED, LOSSY)


def check_exactness(exactness, bound, what: str):
    """``(exactness, bound)`` checked: a class of :data:`EXACTNESS`, with a positive
    ``bound`` exactly when the class is :data:`BOUNDED`. ``False`` (the old
    ``lossless=False`` flag) reads as :data:`LOSSY`, which claims nothing."""
    if exactness is False:
        exactness = LOSSY
    if isinstance(exactness, bool) or exactness not in EXACTNESS:
        raise OptionError(
            f"{what}: exactness must be one of {EXACTNESS}, got {exactness!r}; name the "
            "class the rewrite is measured to meet ('lossy' claims nothing)"
        )
    if exactness == BOUNDED:
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0:
            raise OptionError(
                f"{what}: the 'bounded' class needs a measured bound > 0, got {bound!r}"
            )
    elif bound is not None:
        raise OptionError(
            f"{what}: only the 'bounded' class takes a bound, got bound={bound!r} for {exactness!r}"
        )
    return exactness, bound


def weakest(classes) -> str:
    """The weakest of some exactness classes (:data:`BIT_IDENTICAL` for none)."""
    return max(classes, key=EXACTNESS.index, default=BIT_IDENTICAL)


@dataclass(frozen=True)
class Rule:
    """One rewrite: ``fn(node) -> replacement | None`` for nodes of ``ops``.

    Attributes:
        name: unique id, used in reports.
        ops: the op names the rule looks at (the engine only calls it on those).
        fn: the rewrite itself; must return a tensor of ``node.shape`` or ``None``.
        exactness: its class, one of :data:`EXACTNESS` (module constants), as measured
            on the generic emulator model.
        doc: one line saying what the rule does.
        bound: the measured relative-deviation bound of a :data:`BOUNDED` rule.
    """

    name: str
    ops: tuple[str, ...]
    fn: Callable[[Tensor], Tensor | None]
    exactness: str
    doc: str
    bound: float | None = None

    def __post_init__(self):
        exactness, bound = check_exactness(self.exactness, self.bound, f"rule {self.name!r}")
        object.__setattr__(self, "exactness", exactness)
        object.__setattr__(self, "bound", bound)

    @property
    def lossless(self) -> bool:
        """Whether the rule is :data:`BIT_IDENTICAL` (the only class that composes: a
        graph of bit-identical rewrites computes the same bits)."""
        return self.exactness == BIT_IDENTICAL


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
        raise OptionError(f"rewrite: rule names repeat: {dupes}; give each rule its own name")
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
