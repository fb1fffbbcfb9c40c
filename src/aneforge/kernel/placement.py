"""Branch and bound over a fused region's placements, pruned by the completion floor.

A placement vector says, per intermediate of a region, materialize or inline
(:func:`~aneforge.kernel.lower.lower`). :func:`search_placements` walks the vectors depth
first, deciding one intermediate at a time in region order. The default is measured
first and is the incumbent: every intermediate materialized, or the caller's
``default=`` vector (the compiled regions' :func:`~aneforge.kernel.compiled.
default_placement`). The walk then tries inlining before materializing, so good fusions
are found early and bound the rest. At each partial vector the
:func:`~aneforge.kernel.analyze.completion_floor` of the lowering with every searched
intermediate materialized, the undecided and the inline-committed ones open, bounds
every completion; under an :class:`~aneforge.kernel.envelope.Envelope` it is a time, and
a subtree whose bound is not below the best measured time is pruned. Leaves are measured
by the caller's ``measure(placement) -> seconds``.

- A candidate the model cannot score (an envelope without peaks, a bound of None) is
  never pruned; a tie never replaces the incumbent, so the default wins a tie.
- Every measurement is held against its own bound (:func:`~aneforge.kernel.envelope.
  check_agreement`, which warns :class:`~aneforge.errors.BoundViolationWarning` once per
  digest), and, with a calibration log (``calibration_file=`` or
  ``$ANEFORGE_CALIBRATION_FILE``), appended to it as one row per timing. A measurement
  that is not finite (a candidate that could not run) is never chosen, checked or logged.
- With an honest envelope (its peaks at least the rates the device reaches) the floor
  of a subtree is at most every time in it, so the search finds the exhaustive optimum;
  with a dishonest one it prunes what it should not, and the violation warning fires.

Host nodes (``host=``: nodes run by whole-array kernels, as the compiled regions run
contractions) lower as opaque code, so they and their sources stay materialized, like
the nodes without a loop nest. A region's free intermediates fall into independent
:func:`components`: a choice in one changes only the kernels of its :func:`scope` (its
nodes and their readers). ``free=`` searches one component with the others held at the
default; bounds and calibration rows are then those of its scope alone
(:func:`restrict`), and ``measure`` must time that scope alone. ``limit=`` caps the
leaves measured; the leaves it leaves unvisited are counted as ``unexplored``.

Example:
    >>> import aneforge as af
    >>> from aneforge.kernel.envelope import Envelope
    >>> x = af.input((64, 64), name="x")
    >>> prog = af.compile((x.exp() * 2.0).sum(axis=-1), opt=0)
    >>> def measure(placement):  # a stand-in device: 1 ns per byte moved
    ...     return traffic(prog, prog.fused_regions[0], placement) * 1e-9
    >>> r = search_placements(prog, prog.fused_regions[0], measure, Envelope("x", None, 1e9))
    >>> [str(p) for p in r.placement], r.measured + r.pruned == r.candidates
    (['inline', 'inline'], True)
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ..compiler.program import Program
from ..compiler.segment import Region
from ..errors import OptionError
from .analyze import analyze, completion_floor
from .calibration import CalibrationRow, append_rows, make_digest
from .envelope import Envelope, check_agreement
from .ir import Code, Get, Opaque, Set, walk
from .lower import Lowered, Placement, RegionNodes, lower, region_nodes, resolve
from .printer import to_text

__all__ = [
    "SearchResult",
    "components",
    "free_intermediates",
    "restrict",
    "scope",
    "search_placements",
    "traffic",
]

CALIBRATION_ENV = "ANEFORGE_CALIBRATION_FILE"


@dataclass(frozen=True)
class SearchResult:
    """The best placement found (the whole vector), its measured time, and how the
    search went: leaves measured, leaves pruned by a floor, bounds computed,
    measurements that beat their bound, the default's measured time, the leaves the
    ``limit`` left unvisited and the candidates searched (``2 ** len(free)``: measured,
    pruned and unexplored add up to it)."""

    placement: tuple[Placement, ...]
    seconds: float
    measured: int
    pruned: int
    bounds: int
    violations: int
    default_seconds: float
    unexplored: int
    candidates: int


def traffic(program: Program, region: Region, placement) -> int:
    """The bytes ``analyze`` charges ``region`` under ``placement`` (a stand-in cost).

    Example:
        >>> import aneforge as af
        >>> x = af.input((8,), name="x")
        >>> prog = af.compile(x.exp() + 1.0, opt=0)
        >>> traffic(prog, prog.fused_regions[0], ["inline"])  # x and the 1.0 in, the sum out
        34
    """
    return analyze(lower(program, region, placement).code).bytes


def _unrun(*arrays):
    raise RuntimeError("the placement search analyses host nodes; it never runs them")


def _host(host) -> dict | None:
    """``lower``'s ``host`` of ``host`` (ids of region nodes, or already a dict of their
    runners; for the forcing and the analyses any callable does)."""
    if host is None or isinstance(host, dict):
        return host
    return {i: _unrun for i in host}


def free_intermediates(program: Program, region: Region, host: Collection[int] | None = None):
    """The indices of ``region``'s intermediates a placement may inline: those that no
    opaque code (an op without a loop nest, a ``host`` node, a reader of either) or
    scatter forces to materialize.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4, 8), name="x")
        >>> prog = af.compile((x.exp() @ x.tanh().transpose()).relu(), opt=0)
        >>> region = prog.fused_regions[0]
        >>> [n.op for n in region.nodes]
        ['exp', 'tanh', 'transpose', 'bmm', 'relu']
        >>> free_intermediates(prog, region)  # every node but the output
        [0, 1, 2, 3]
        >>> free_intermediates(prog, region, {id(region.nodes[3])})  # bmm and its sources stay
        [1]
    """
    middle = region_nodes(program, region).intermediates
    _, chosen, _ = resolve(program, region, [Placement.INLINE] * len(middle), _host(host))
    return [i for i, n in enumerate(middle) if chosen[id(n)] is Placement.INLINE]


def components(program: Program, region: Region, host: Collection[int] | None = None):
    """``region``'s free intermediates (:func:`free_intermediates`) in independent
    groups, each a sorted tuple of indices, in region order: two are in one group when
    one reads the other or one node reads both, so a choice in one group changes only
    the kernels of its :func:`scope`.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4, 8), name="x")
        >>> prog = af.compile((x.exp() @ (x * 2.0).tanh().transpose()).relu(), opt=0)
        >>> region = prog.fused_regions[0]
        >>> components(prog, region)
        [(0, 1, 2, 3, 4)]
        >>> components(prog, region, {id(n) for n in region.nodes if n.op == "bmm"})
        [(1, 2)]
    """
    middle = region_nodes(program, region).intermediates
    where = {id(middle[i]): i for i in free_intermediates(program, region, host)}
    parent = {i: i for i in where.values()}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in region.nodes:
        group = [where[id(n)] for n in (node, *node.srcs) if id(n) in where]
        for i in group[1:]:
            parent[find(i)] = find(group[0])
    groups: dict[int, list[int]] = {}
    for i in sorted(parent):
        groups.setdefault(find(i), []).append(i)
    return sorted(tuple(g) for g in groups.values())


def scope(program: Program, region: Region, free: Sequence[int]) -> set[int]:
    """``id`` of the nodes whose kernels a choice among intermediates ``free`` (indices)
    changes: those intermediates and every region node that reads one.

    Example:
        >>> import aneforge as af
        >>> x = af.input((8,), name="x")
        >>> prog = af.compile((x.exp() + 1.0).tanh(), opt=0)
        >>> region = prog.fused_regions[0]
        >>> sorted(n.op for n in region.nodes if id(n) in scope(prog, region, [1]))
        ['add', 'tanh']
    """
    middle = region_nodes(program, region).intermediates
    chosen = {id(middle[i]) for i in free}
    readers = {id(n) for n in region.nodes if any(id(s) in chosen for s in n.srcs)}
    return chosen | readers


def restrict(low: Lowered, keep: Collection[int]) -> Lowered:
    """``low`` cut down to the steps of the nodes ``keep`` (``id`` of region nodes):
    the buffers those steps read and do not write become its inputs, the nodes they
    write its outputs, every other buffer is dropped. Running it needs the values of
    its inputs, and its analysis counts the kept kernels alone.

    Example:
        >>> import aneforge as af
        >>> x = af.input((8,), name="x")
        >>> prog = af.compile((x.exp() + 1.0).tanh(), opt=0)
        >>> region = prog.fused_regions[0]
        >>> low = restrict(lower(prog, region), {id(region.nodes[-1])})
        >>> [(b.kind, b.shape) for b in low.code.buffers], [n.op for n in low.nodes.outputs]
        ([('input', (8,)), ('output', (8,))], ['tanh'])
    """
    keep = set(keep)
    steps = tuple((n, stmts) for n, stmts in low.steps if id(n) in keep)
    read, written = set(), set()
    for _, stmts in steps:
        for item in walk(stmts):
            if isinstance(item, Opaque):
                read.update(item.inputs)
                written.update(item.outputs)
            elif isinstance(item, Get):
                read.add(item.node)
            elif isinstance(item, Set):
                written.add(item.node)
    fed = read - written
    buffers = tuple(
        dataclasses.replace(b, kind="input") if b.name in fed else b
        for b in low.code.buffers
        if b.name in read | written
    )
    node_of = {
        low.names[id(n)]: n
        for n in (*low.nodes.inputs, *low.nodes.intermediates, *low.nodes.outputs)
        if id(n) in low.names
    }
    nodes = RegionNodes(
        tuple(node_of[b.name] for b in buffers if b.kind == "input"), tuple(n for n, _ in steps), ()
    )  # fmt: skip
    body = tuple(st for _, stmts in steps for st in stmts)
    kept = {b.name for b in buffers}
    return dataclasses.replace(
        low,
        code=Code(low.code.name, buffers, body),
        nodes=nodes,
        names={i: name for i, name in low.names.items() if name in kept},
        opaque=tuple((n.op, st.reason) for n, stmts in steps for st in stmts
                     if isinstance(st, Opaque)),
        steps=steps,
    )  # fmt: skip


def search_placements(
    program: Program,
    region: Region,
    measure: Callable[[tuple[Placement, ...]], float],
    envelope: Envelope,
    *,
    device: str = "",
    calibration_file=None,
    host: Collection[int] | None = None,
    default: Sequence | None = None,
    free: Sequence[int] | None = None,
    limit: int | None = None,
    margin: float = 0.0,
) -> SearchResult:
    """The fastest placement of ``region`` by ``measure``, pruned by ``envelope``'s
    bound on the completion floor (module docstring).

    ``host``: ``id`` of the nodes run on the host (kept materialized with their
    sources). ``default``: the incumbent, measured first (after the materializations
    forced on it; default every intermediate materialized). ``free``: the indices of
    the intermediates searched, the others held at ``default`` (default: every free
    one, and the scope is the whole region); it must be a subset of
    :func:`free_intermediates`. ``limit``: the most leaves measured (>= 1, default no
    limit). ``margin``: a candidate replaces the best only when faster by more than
    this fraction of it (closer times are ties, kept by the earlier; a subtree is
    pruned once its bound reaches ``(1 - margin)`` x the best). Raises
    :class:`~aneforge.errors.OptionError` for a ``free`` index that is forced or out of
    range, a ``limit`` below 1 and a ``margin`` outside ``[0, 1)``.
    """
    stubs = _host(host)
    middle = region_nodes(program, region).intermediates
    can = free_intermediates(program, region, host)
    searched = can if free is None else sorted({int(i) for i in free})
    bad = sorted(set(searched) - set(can))
    if bad:
        raise OptionError(
            f"search_placements: intermediates {bad} of region {region.index} cannot be "
            f"searched (forced to materialize, or out of range); its free ones are {can}"
        )
    if limit is not None and not (isinstance(limit, int) and limit >= 1):
        raise OptionError(f"search_placements: limit must be an integer >= 1, got {limit!r}")
    if not 0.0 <= margin < 1.0:
        raise OptionError(f"search_placements: margin must be in [0, 1), got {margin!r}")
    beats = 1.0 - margin
    keep = None if free is None else scope(program, region, searched)

    def lowered(vector) -> Lowered:
        low = lower(program, region, list(vector), host=stubs)
        return low if keep is None else restrict(low, keep)

    _, chosen, _ = resolve(program, region, default, stubs)
    incumbent = [chosen[id(n)] for n in middle]  # its forced materializations applied
    start = list(incumbent)
    for i in searched:
        start[i] = Placement.MATERIALIZE
    base = lowered(start)
    names = {i: base.names[id(middle[i])] for i in searched}
    log = calibration_file or os.environ.get(CALIBRATION_ENV) or None
    state = dict(best=None, seconds=math.inf, default=math.inf, measured=0, pruned=0,
                 bounds=0, violations=0, unexplored=0)  # fmt: skip

    def leaf(vector):
        seconds = float(measure(tuple(vector)))
        state["measured"] += 1
        if state["measured"] == 1:
            state["default"] = seconds
        if not math.isfinite(seconds):  # it could not run: never chosen, checked or logged
            return
        low = lowered(vector)
        s = analyze(low.code)
        digest = make_digest(to_text(low.code), f"region{region.index}")
        shown = range(len(vector)) if keep is None else searched
        label = ",".join("i" if vector[i] is Placement.INLINE else "m" for i in shown)
        row = CalibrationRow(
            envelope.backend, digest, f"region{region.index}", label, seconds * 1e3, None,
            max(1, len(low.steps)), s.flops, s.bytes, s.flops_approx, s.bytes_approx, s.opaque,
        )  # fmt: skip
        if not check_agreement(row, envelope, device):
            state["violations"] += 1
        if log:
            append_rows(log, [row])
        if seconds < beats * state["seconds"]:  # ties keep the earlier: the default first
            state["best"], state["seconds"] = tuple(vector), seconds

    def visit(vector, depth):
        holds_default = all(vector[i] == incumbent[i] for i in searched[:depth])
        below = 2 ** (len(searched) - depth) - holds_default  # the default was measured
        if limit is not None and state["measured"] >= limit:
            state["unexplored"] += below
            return
        if depth == len(searched):
            if vector != incumbent:  # measured first, below
                leaf(vector)
            return
        opened = {names[i] for i in searched[depth:]}
        opened |= {names[i] for i in searched[:depth] if vector[i] is Placement.INLINE}
        bound = envelope.bound(*_work(completion_floor(base.code, opened)))
        state["bounds"] += 1
        if bound is not None and bound >= beats * state["seconds"]:
            state["pruned"] += below
            return
        for choice in (Placement.INLINE, Placement.MATERIALIZE):  # fusing first
            nxt = list(vector)
            nxt[searched[depth]] = choice
            visit(nxt, depth + 1)

    leaf(incumbent)  # the incumbent: a tie never replaces it
    if state["best"] is None:  # the default could not run: any finite time beats it
        state["best"] = tuple(incumbent)
    visit(start, 0)
    return SearchResult(
        state["best"], state["seconds"], state["measured"], state["pruned"], state["bounds"],
        state["violations"], state["default"], state["unexplored"], 2 ** len(searched),
    )  # fmt: skip


def _work(floor) -> tuple[int, int]:
    return floor.flops, floor.bytes
