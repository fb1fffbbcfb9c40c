"""Preflight: will a graph compile for a target? Every violation, at once.

:func:`preflight` checks a graph against the capability family of a target (issue 4,
spec 000's family table) and reports every violation together, each naming the node
(execution index, op and shape), the limit and the offending value:

- family 1 (h11, h12, m9, t0) has no MIL path: nothing compiles there;
- rank <= 5 for every tensor;
- extents, read in the engine's N C H W layout with lower ranks right-aligned as Core
  ML pads them (rank 5 is N C D H W, rank 4 N C H W, rank 3 C H W, rank 2 H W, rank 1
  W): spatial extents (D, H, W) and the contraction length of matmul / bmm / linear
  <= 16384 through the A15 tier (families 2-4) and <= 65536 at A16 (family 5);
  channels <= 65536; the batch axis is not limited;
- conv / conv_transpose kernel width (the weight's last axis) <= 13, <= 15 at A16;
- ops below their family floor: ``sin`` / ``cos`` need A15 (family 4) and have a
  lowering (below); ``topk``, ``sort`` and ``dynamic_slice`` need A14 (family 3) and have
  none.

``compile(..., target=...)`` runs it: where every violation has a lowering it applies
them, records the report in ``prog.passes['preflight']`` and warns
:class:`~aneforge.errors.PreflightWarning`; otherwise it raises one
:class:`~aneforge.errors.PreflightError` listing every violation.

The sin/cos lowering (spec 004, "Special functions"): half-period polynomial forms built
only from fused ops every family has (mul, add/sub, round, floor, select)::

    n = round(x * fp16(1/pi))                          # nearest multiple of pi
    r = (x - n * PI_HI) - n * PI_LO                     # Cody-Waite, r in [-pi/2, pi/2]
    odd = n - 2 * floor(n * 0.5)                        # parity of n (exact, |n| <= 2048)
    sin: p = r * S(r*r)     cos: p = C(r*r)             # Horner in fp16
    y = select(odd, -p, p)                              # sin/cos(r + n*pi) = (-1)^n ...

``PI_HI`` is pi truncated to 5 significant bits (3.125), so ``n * PI_HI`` and the first
subtraction are exact for ``|n| <= 64`` (``|x|`` up to about 200); ``PI_LO`` is the rest.
``S`` (degree 3 in r^2, an odd degree-7 form) and ``C`` (degree 4 in r^2) are fitted
at import by least squares in float64 on Chebyshev nodes of [0, pi/2 + 0.01] (the margin
covers the rounding of ``x/pi``). Accuracy: about 1e-3 absolute for ``|x| <= 200``
(fp16-rounding-limited, as the spec says); beyond, ``x * (1/pi)`` and ``n * PI_HI``
round and the error grows with ``|x|``.

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

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import PreflightError
from ..graph.rewrite import Rule, rewrite
from ..graph.tensor import Tensor, make
from ..targets.names import resolve_target
from .program import Program

#: Rank limit of every family.
MAX_RANK = 5
#: Channel limit (axis 1) of every family.
MAX_CHANNELS = 65536
#: Spatial / contraction extent limits: through A15 (families 2-4) and at A16 (5).
MAX_EXTENT = {2: 16384, 3: 16384, 4: 16384, 5: 65536}
#: Conv kernel-width limits.
MAX_KERNEL_WIDTH = {2: 13, 3: 13, 4: 13, 5: 15}
#: op -> the lowest family that runs it natively.
OP_FLOOR = {"sin": 4, "cos": 4, "topk": 3, "sort": 3, "dynamic_slice": 3}
#: op -> the lowering compile applies below the floor (ops absent have none).
LOWERINGS = {"sin": "half-period polynomial", "cos": "half-period polynomial"}

_CONTRACTIONS = ("matmul", "bmm", "linear")
_CONVS = ("conv", "conv_transpose")


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
    if tgt.family == 1:
        msg = (
            f"target {tgt.arch} is in capability family 1 (h11, h12, m9, t0), which has "
            "no MIL path: no program compiles for it; pick a family 2+ target such as 'M1'"
        )
        return PreflightReport(tgt.arch, 1, [Violation("no_mil", None, None, None, 2, 1, msg)])
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
    fam, found = tgt.family, []
    shape, where = node.shape, _where(i, node)

    def add(check, limit, value, text, lowering=None):
        found.append(Violation(check, i, node.op, shape, limit, value, text, lowering))

    if len(shape) > MAX_RANK:
        add("rank", MAX_RANK, len(shape), f"{where}: rank {len(shape)} > {MAX_RANK}")
    limit = MAX_EXTENT[fam]
    for axis, extent in enumerate(shape):
        role = axis_role(len(shape), axis)
        if role == "channels":
            if extent > MAX_CHANNELS:
                add(
                    "channels",
                    MAX_CHANNELS,
                    extent,
                    f"{where}: {extent} channels (axis {axis}) > {MAX_CHANNELS}; split "
                    "the channels into groups",
                )
        elif role == "spatial" and extent > limit:
            add(
                "spatial",
                limit,
                extent,
                f"{where}: spatial extent {extent} on axis {axis} > {limit} on {tgt.arch} "
                f"({tgt.tier} tier; {MAX_EXTENT[5]} from A16); tile that axis",
            )
    if node.op in _CONTRACTIONS and node.srcs:
        k = node.srcs[0].shape[-1]
        if k > limit:
            add(
                "contraction",
                limit,
                k,
                f"{where}: contraction length {k} > {limit} on {tgt.arch} ({tgt.tier} "
                "tier); split the contraction into partial products and add them",
            )
    if node.op in _CONVS and len(node.srcs) >= 2:
        kw, klim = node.srcs[1].shape[-1], MAX_KERNEL_WIDTH[fam]
        if kw > klim:
            add(
                "kernel_width",
                klim,
                kw,
                f"{where}: kernel width {kw} > {klim} on {tgt.arch} ({tgt.tier} tier; "
                f"{MAX_KERNEL_WIDTH[5]} at A16); split the kernel into narrower convs",
            )
    floor = OP_FLOOR.get(node.op)
    if floor is not None and fam < floor:
        lowering = LOWERINGS.get(node.op)
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


# ---- the sin / cos lowering -----------------------------------------------------------

PI_HI = math.floor(math.pi * 8) / 8  # 3.125: 5 significant bits
PI_LO = math.pi - PI_HI


def _fit(powers: tuple[int, ...], fn, nodes: int = 64) -> tuple[float, ...]:
    """Least-squares coefficients of sum c_i r^p_i ~ fn(r) on [0, pi/2 + 0.01]."""
    hi = math.pi / 2 + 0.01
    k = np.arange(nodes)
    r = hi * (1 + np.cos((2 * k + 1) * np.pi / (2 * nodes))) / 2  # Chebyshev nodes
    basis = np.stack([r**p for p in powers], axis=1)
    coef, *_ = np.linalg.lstsq(basis, fn(r), rcond=None)
    return tuple(float(c) for c in coef)


#: sin(r) ~ r * (S0 + S1 r^2 + S2 r^4 + S3 r^6); cos(r) ~ C0 + C1 r^2 + ... + C4 r^8.
SIN_COEFFS = _fit((1, 3, 5, 7), np.sin)
COS_COEFFS = _fit((0, 2, 4, 6, 8), np.cos)


def _horner(r2: Tensor, coeffs: tuple[float, ...]) -> Tensor:
    p = r2 * coeffs[-1] + coeffs[-2]
    for c in reversed(coeffs[:-2]):
        p = p * r2 + c
    return p


def half_period(x: Tensor, fn: str) -> Tensor:
    """``sin(x)`` or ``cos(x)`` (``fn``) as the half-period polynomial form."""
    n = make("round", x * (1.0 / math.pi))
    r = (x - n * PI_HI) - n * PI_LO
    odd = n - make("floor", n * 0.5) * 2.0
    r2 = r * r
    p = r * _horner(r2, SIN_COEFFS) if fn == "sin" else _horner(r2, COS_COEFFS)
    return make("select", odd, -p, p)


def lower_below_floor(outs, report: PreflightReport):
    """Replace the lowerable nodes of ``report`` in the graph of ``outs``.

    Returns the new outputs; fills ``report.lowered`` (op -> count).
    """
    ops = tuple(sorted({v.op for v in report.lowerable}))
    if not ops:
        return list(outs)
    rules = [
        Rule(
            f"{op}_half_period",
            (op,),
            lambda node, op=op: half_period(node.srcs[0], op),
            False,
            f"{op}(x) as the half-period polynomial form (native {op} needs A15)",
        )
        for op in ops
    ]
    new, rep = rewrite(list(outs), rules)
    report.lowered = {r.split("_")[0]: c for r, c in rep.matches.items()}
    return new
