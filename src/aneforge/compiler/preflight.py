"""Preflight: will a graph compile for a target? Every violation, at once.

:func:`preflight` checks a graph against the capability family of a target (docs/targets.md,
"What each family can do") and reports every violation together, each naming the node
(execution index, op and shape), the limit and the offending value. The limits are the
target's capability record (``Target.capability``, read from ``data/families.json``,
which names each number's source); the rank limit is the graph's own:

- family 1 (h11, h12, m9, t0) has no MIL path: nothing compiles there;
- rank <= 5 for every tensor;
- extents, read in the engine's N C H W layout with lower ranks right-aligned as Core
  ML pads them (rank 5 is N C D H W, rank 4 N C H W, rank 3 C H W, rank 2 H W, rank 1
  W): spatial extents (D, H, W) and the contraction length of matmul / bmm / linear
  <= 16384 through the A15 tier (families 2-4) and <= 65536 at A16 (family 5);
  channels <= 65536; the batch axis is not limited;
- conv / conv_transpose kernel width (the weight's last axis) <= 13, <= 15 at A16;
- ops below their family floor (the record's ``min_family``): ``sin`` / ``cos`` need
  A15 (family 4) and have a lowering (the record's ``below_floor``); ``topk``, ``sort``
  and ``dynamic_slice`` need A14 (family 3) and have none. Which ops are contractions
  (matmul-like or conv-like) is the record's ``role``.

``compile(..., target=...)`` runs it: where every violation has a lowering it applies
them, records the report in ``prog.passes['preflight']`` and warns
:class:`~aneforge.errors.PreflightWarning`; otherwise it raises one
:class:`~aneforge.errors.PreflightError` listing every violation.

The sin/cos lowering (docs/numerics.md, section 9.6) is the half-period polynomial form
of :mod:`aneforge.graph.ops.half_period`, built only from fused ops every family has.

Example:
    >>> import aneforge as af
    >>> from aneforge.compiler.preflight import preflight
    >>> x = af.input((4, 20000), name="x")
    >>> rep = preflight(af.sort(x.sin()), "M1")
    >>> [(v.check, v.op, v.limit, v.value) for v in rep.violations if v.op == "sin"]
    [('spatial', 'sin', 16384, 20000), ('op_floor', 'sin', 4, 2)]
    >>> [v.op for v in rep.blocking], [v.op for v in rep.lowerable]
    (['input', 'sin', 'sort', 'sort'], ['sin'])
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import PreflightError
from ..graph.facts import Role
from ..graph.ops.half_period import (  # noqa: F401  (lives with sin/cos; its tests read it here)
    COS_COEFFS,
    PI_HI,
    PI_LO,
    SIN_COEFFS,
    half_period,
)
from ..graph.registry import get_op
from ..graph.rewrite import Rule, rewrite
from ..graph.tensor import MAX_RANK, Tensor
from ..targets.capability import capabilities
from ..targets.names import resolve_target
from .program import Program

# The rank limit is the graph's own (graph.tensor.MAX_RANK); every other limit is the
# target's capability record (Target.capability, data/families.json).
_NEWEST = capabilities()[-1]  # the family with the widest limits, named in the messages
_FIRST_MIL = min(c.family for c in capabilities() if c.has_mil)


@dataclass(frozen=True)
class Violation:
    """One reason a graph does not compile as built for a target.

    Attributes:
        check: 'no_mil', 'rank', 'spatial', 'channels', 'contraction', 'kernel_width'
            or 'op_floor'.
        node: execution index of the node (None for the whole program).
        op, shape: the node's op and output shape (None for the whole program).
        limit: the family's limit (for 'op_floor': the lowest family with the op).
        value: the graph's value (for 'op_floor': the target's family).
        message: one sentence naming all of the above and what to do.
        lowering: the lowering compile applies, or None when there is none.
    """

    check: str
    node: int | None
    op: str | None
    shape: tuple[int, ...] | None
    limit: int
    value: int
    message: str
    lowering: str | None = None

    def __str__(self) -> str:
        return self.message


@dataclass
class PreflightReport:
    """The result of :func:`preflight` for one target.

    Attributes:
        target: the architecture checked.
        family: its capability family.
        violations: every violation found, in execution order.
        lowered: what compile replaced (filled in by compile), op -> count.
    """

    target: str
    family: int
    violations: list[Violation]
    lowered: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the graph compiles for the target as built."""
        return not self.violations

    @property
    def blocking(self) -> list[Violation]:
        """The violations no lowering can fix."""
        return [v for v in self.violations if v.lowering is None]

    @property
    def lowerable(self) -> list[Violation]:
        """The violations compile fixes by a lowering."""
        return [v for v in self.violations if v.lowering is not None]

    def as_dict(self) -> dict:
        """A plain summary (for ``prog.passes``)."""
        return {
            "target": self.target,
            "family": self.family,
            "violations": [v.message for v in self.violations],
            "lowered": dict(self.lowered),
        }

    def __str__(self) -> str:
        head = f"preflight for {self.target} (family {self.family}): "
        if self.ok:
            return head + "ok"
        lines = [head + f"{len(self.violations)} violation(s)"]
        lines += [f"  - {v.message}" for v in self.violations]
        return "\n".join(lines)


def preflight(out, target) -> PreflightReport:
    """Check ``out`` (Tensor, list of Tensors or Program) against ``target``'s family.

    Returns the :class:`PreflightReport`; it never raises for a violation (compile
    does). An unknown target name raises :class:`~aneforge.errors.OptionError`.
    """
    tgt = resolve_target(target)
    nodes = Program.coerce(out, "preflight").nodes
    cap = tgt.capability
    if not cap.has_mil:
        msg = (
            f"target {tgt.arch} is in capability family {cap.family} "
            f"({', '.join(cap.members)}), which has no MIL path: no program compiles for "
            f"it; pick a family {_FIRST_MIL}+ target such as 'M1'"
        )
        no_mil = Violation("no_mil", None, None, None, _FIRST_MIL, cap.family, msg)
        return PreflightReport(tgt.arch, cap.family, [no_mil])
    violations: list[Violation] = []
    for i, node in enumerate(nodes):
        violations.extend(_check(i, node, tgt))
    return PreflightReport(tgt.arch, tgt.family, violations)


def raise_if_blocked(report: PreflightReport) -> None:
    """Raise one PreflightError listing every violation when any has no lowering."""
    if not report.blocking:
        return
    lines = [
        f"the graph does not compile for {report.target} (family {report.family}): "
        f"{len(report.violations)} violation(s)"
    ]
    for v in report.violations:
        fix = f" [compile lowers it: {v.lowering}]" if v.lowering else ""
        lines.append(f"  - {v.message}{fix}")
    raise PreflightError("\n".join(lines), report)


def axis_role(rank: int, axis: int) -> str:
    """'batch', 'channels' or 'spatial': an axis's role in the right-aligned NCHW layout."""
    if rank >= 4:
        return {0: "batch", 1: "channels"}.get(axis, "spatial")
    if rank == 3 and axis == 0:
        return "channels"
    return "spatial"


def _where(i: int, node: Tensor) -> str:
    return f"node %{i} {node.op} {node.shape}"


def _check(i: int, node: Tensor, tgt) -> list[Violation]:
    fam, cap, found = tgt.family, tgt.capability, []
    shape, where = node.shape, _where(i, node)

    def add(check, limit, value, text, lowering=None):
        found.append(Violation(check, i, node.op, shape, limit, value, text, lowering))

    if len(shape) > MAX_RANK:
        add("rank", MAX_RANK, len(shape), f"{where}: rank {len(shape)} > {MAX_RANK}")
    limit = cap.max_extent
    for axis, extent in enumerate(shape):
        role = axis_role(len(shape), axis)
        if role == "channels":
            if extent > cap.max_channels:
                add(
                    "channels",
                    cap.max_channels,
                    extent,
                    f"{where}: {extent} channels (axis {axis}) > {cap.max_channels}; split "
                    "the channels into groups",
                )
        elif role == "spatial" and extent > limit:
            add(
                "spatial",
                limit,
                extent,
                f"{where}: spatial extent {extent} on axis {axis} > {limit} on {tgt.arch} "
                f"({tgt.tier} tier; {_NEWEST.max_extent} from {_NEWEST.tier}); tile that axis",
            )
    op = get_op(node.op)
    if op.role is Role.MATMUL and node.srcs:
        k = node.srcs[0].shape[-1]
        if k > limit:
            add(
                "contraction",
                limit,
                k,
                f"{where}: contraction length {k} > {limit} on {tgt.arch} ({tgt.tier} "
                "tier); split the contraction into partial products and add them",
            )
    if op.role is Role.CONV and len(node.srcs) >= 2:
        kw, klim = node.srcs[1].shape[-1], cap.max_kernel_width
        if kw > klim:
            add(
                "kernel_width",
                klim,
                kw,
                f"{where}: kernel width {kw} > {klim} on {tgt.arch} ({tgt.tier} tier; "
                f"{_NEWEST.max_kernel_width} at {_NEWEST.tier}); split the kernel into "
                "narrower convs",
            )
    floor = op.min_family
    if fam < floor:
        lowering = None if op.below_floor is None else op.below_floor.name
        fix = (
            f"compile replaces it by its {lowering} form"
            if lowering
            else "no lowering exists; compute it outside the engine or pick a newer target"
        )
        add(
            "op_floor",
            floor,
            fam,
            f"{where}: {node.op} needs capability family {floor} or later; {tgt.arch} is "
            f"family {fam} ({tgt.tier} tier); {fix}",
            lowering,
        )
    return found


# ---- lowering below the floor ---------------------------------------------------------


def lower_below_floor(outs, report: PreflightReport):
    """Replace the lowerable nodes of ``report`` in the graph of ``outs``.

    Returns the new outputs; fills ``report.lowered`` (op -> count).
    """
    ops = tuple(sorted({v.op for v in report.lowerable}))
    if not ops:
        return list(outs)
    rules, rule_op = [], {}
    for name in ops:
        op = get_op(name)
        low = op.below_floor
        rule = Rule(
            f"lower_{name}",
            (name,),
            low.build,
            low.exactness,
            f"{name}(x) as the {low.name} form (native {name} needs family {op.min_family})",
            low.bound,
        )
        rules.append(rule)
        rule_op[rule.name] = name
    new, rep = rewrite(list(outs), rules)
    report.lowered = {rule_op[r]: c for r, c in rep.matches.items()}
    return new
