"""Branch and bound over a fused region's placements, pruned by the completion floor.

A placement vector says, per intermediate of a region, materialize or inline
(:func:`~aneforge.kernel.lower.lower`). :func:`search_placements` walks the vectors depth
first, deciding one intermediate at a time in region order. The default (every
intermediate materialized) is measured first and is the incumbent; the walk then tries
inlining before materializing, so good fusions are found early and bound the rest. At
each partial vector the :func:`~aneforge.kernel.analyze.completion_floor` of the
all-materialized lowering, with the undecided and the inline-committed intermediates
open, bounds every completion; under an :class:`~aneforge.kernel.envelope.Envelope` it
is a time, and a subtree whose bound
is not below the best measured time is pruned. Leaves are measured by the caller's
``measure(placement) -> seconds``.

- A candidate the model cannot score (an envelope without peaks, a bound of None) is
  never pruned; a tie never replaces the incumbent, so the default wins a tie.
- Every measurement is held against its own bound (:func:`~aneforge.kernel.envelope.
  check_agreement`, which warns :class:`~aneforge.errors.BoundViolationWarning` once per
  digest), and, with a calibration log (``calibration_file=`` or
  ``$ANEFORGE_CALIBRATION_FILE``), appended to it as one row per timing.
- With an honest envelope (its peaks at least the rates the device reaches) the floor
  of a subtree is at most every time in it, so the search finds the exhaustive optimum;
  with a dishonest one it prunes what it should not, and the violation warning fires.

Example:
    >>> import aneforge as af
    >>> from aneforge.kernel.envelope import Envelope
    >>> x = af.input((64, 64), name="x")
    >>> prog = af.compile((x.exp() * 2.0).sum(axis=-1), opt=0)
    >>> def measure(placement):  # a stand-in device: 1 ns per byte moved
    ...     return traffic(prog, prog.fused_regions[0], placement) * 1e-9
    >>> r = search_placements(prog, prog.fused_regions[0], measure, Envelope("x", None, 1e9))
    >>> [str(p) for p in r.placement], r.measured + r.pruned
    (['inline', 'inline'], 4)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..compiler.program import Program
from ..compiler.segment import Region
from .analyze import analyze, completion_floor
from .calibration import CalibrationRow, append_rows, make_digest
from .envelope import Envelope, check_agreement
from .lower import Placement, lower, resolve
from .printer import to_text

__all__ = ["SearchResult", "search_placements", "traffic"]

CALIBRATION_ENV = "ANEFORGE_CALIBRATION_FILE"


@dataclass(frozen=True)
class SearchResult:
    """The best placement found, its measured time, and how the search went: leaves
    measured, leaves pruned by a floor, bounds computed, and measurements that beat
    their bound."""

    placement: tuple[Placement, ...]
    seconds: float
    measured: int
    pruned: int
    bounds: int
    violations: int


def traffic(program: Program, region: Region, placement) -> int:
    """The bytes ``analyze`` charges ``region`` under ``placement`` (a stand-in cost)."""
    return analyze(lower(program, region, placement).code).bytes


def search_placements(
    program: Program,
    region: Region,
    measure: Callable[[tuple[Placement, ...]], float],
    envelope: Envelope,
    *,
    device: str = "",
    calibration_file=None,
) -> SearchResult:
    """The fastest placement of ``region`` by ``measure``, pruned by ``envelope``'s
    bound on the completion floor (module docstring)."""
    nodes, chosen, _ = resolve(program, region, None)
    middle = nodes.intermediates
    forced = [chosen[id(n)] for n in middle]  # opaque code forces some to materialize
    free = [i for i, n in enumerate(middle) if not _forced(program, region, i, len(middle))]
    base = lower(program, region)
    names = [base.names[id(n)] for n in middle]
    log = calibration_file or os.environ.get(CALIBRATION_ENV) or None
    state = {"best": None, "seconds": float("inf"), "measured": 0, "pruned": 0, "bounds": 0}
    state["violations"] = 0

    def leaf(vector):
        seconds = float(measure(vector))
        state["measured"] += 1
        low = lower(program, region, list(vector))
        s = analyze(low.code)
        digest = make_digest(to_text(low.code), f"region{region.index}")
        label = ",".join("i" if p is Placement.INLINE else "m" for p in vector)
        row = CalibrationRow(
            envelope.backend, digest, f"region{region.index}", label, seconds * 1e3, None, 1,
            s.flops, s.bytes, s.flops_approx, s.bytes_approx, s.opaque,
        )  # fmt: skip
        if not check_agreement(row, envelope, device):
            state["violations"] += 1
        if log:
            append_rows(log, [row])
        if seconds < state["seconds"]:  # ties keep the earlier: the default first
            state["best"], state["seconds"] = tuple(vector), seconds

    def visit(vector, depth):
        if depth == len(free):
            if vector != default:  # measured first, below
                leaf(vector)
            return
        opened = {names[i] for i in free[depth:]}
        opened |= {names[i] for i in free[:depth] if vector[i] is Placement.INLINE}
        bound = envelope.bound(*_work(completion_floor(base.code, opened)))
        state["bounds"] += 1
        if bound is not None and bound >= state["seconds"]:
            holds_default = all(vector[i] == default[i] for i in free[:depth])
            state["pruned"] += 2 ** (len(free) - depth) - holds_default  # it was measured
            return
        for choice in (Placement.INLINE, Placement.MATERIALIZE):  # fusing first
            nxt = list(vector)
            nxt[free[depth]] = choice
            visit(nxt, depth + 1)

    default = list(forced)  # every intermediate materialized
    leaf(default)  # the incumbent: a tie never replaces it
    visit(list(forced), 0)
    return SearchResult(
        state["best"], state["seconds"], state["measured"], state["pruned"], state["bounds"],
        state["violations"],
    )  # fmt: skip


def _work(floor) -> tuple[int, int]:
    return floor.flops, floor.bytes


def _forced(program, region, i: int, n: int) -> bool:
    """Whether intermediate ``i`` stays materialized whatever is asked (opaque code
    around it)."""
    ask = [Placement.MATERIALIZE] * n
    ask[i] = Placement.INLINE
    _, chosen, _ = resolve(program, region, ask)
    middle = resolve(program, region, None)[0].intermediates
    return chosen[id(middle[i])] is Placement.MATERIALIZE
