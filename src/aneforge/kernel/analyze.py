"""FLOPs and bytes of a loop-nest code: an upper bound and its dual lower bound.

:func:`analyze` charges what one concrete code may do, every approximation biased up:

- FLOPs by a loop walk (each scalar op its :data:`~aneforge.kernel.ir.SCALAR_OPS` count,
  FMA 2, an accumulating store its op's; loops multiply by their trips). A guarded
  (``If``) body is charged as if taken, a ``Where`` its condition and its dearer arm,
  ``And`` / ``Or`` both operands; each sets ``flops_approx`` where the charge may exceed
  what runs. The discarded operand of a projection (``arg1`` / ``arg2``) is never
  rendered, so it is not counted. Work in hoisted :class:`~aneforge.kernel.ir.LocalScope`
  bodies is kept apart (``flops_hoisted``) from inline work.
- Bytes per buffer and direction from the access images (:mod:`aneforge.kernel.images`):
  one access's image is exact or an upper bound; several accesses' images add up, exact
  when they are pairwise provably disjoint (or one covers the buffer), else capped at the
  buffer's size and approximate. An accumulation's cells count once in each direction
  (``rmw_bytes``). Accesses that may not run (guarded, in a ``Where`` arm, the right of
  ``And`` / ``Or``) count and make the footprint approximate.
- :class:`~aneforge.kernel.ir.Opaque` code counts no FLOPs, reads and writes its whole
  buffers, and sets ``opaque``: its counts are not evidence.

:func:`completion_floor` is the dual, every approximation biased down, for every
completion of a partial placement: guarded bodies count 0, a ``Where`` its condition
and its cheaper arm, ``And`` / ``Or`` their left operand, hoisted bodies always;
the open nodes' own traffic counts 0, and so do the statements that produce them,
except where every completion computes an open node whole (its producer's certain reads
and FLOPs then count: :func:`completion_floor`);
per buffer and direction, the certain exact images count by the largest sum of a
pairwise disjoint sub-family (their sum when all are disjoint, the largest when all
overlap). ``exact`` is False whenever anything was floored. It is evaluated on the
all-materialized lowering with the open set as a predicate, so committing a decision
(narrowing the open set) only raises it.

:func:`roofline_seconds` turns either into a time under an envelope's peaks.

Example:
    >>> from aneforge.kernel.ir import Buffer, Code, DeclareLocal, For, Get, GetLocal, Op
    >>> from aneforge.kernel.ir import Set, SetLocal, it
    >>> m, n, k = it("m"), it("n"), it("k")
    >>> prod = Op("mul", (Get("a", (m, k)), Get("b", (k, n))))
    >>> inner = (DeclareLocal("acc", "fp32"),
    ...          For("k", 0, 7, (SetLocal("acc", prod, accumulate="add"),)),
    ...          Set("c", (m, n), GetLocal("acc")))
    >>> bufs = (Buffer("a", (4, 8), kind="input"), Buffer("b", (8, 3), kind="input"),
    ...         Buffer("c", (4, 3), kind="output"))
    >>> s = analyze(Code("mm", bufs, (For("m", 0, 3, (For("n", 0, 2, inner),)),)))
    >>> s.flops, s.read_bytes, s.write_bytes, s.exact  # 2MNK; (MK + KN) * 2, MN * 2
    (192, 112, 24, True)
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from . import envelope
from .images import canonical_key, disjoint, image_size
from .ir import (
    SCALAR_OPS,
    And,
    Call,
    Code,
    Cond,
    Const,
    DeclareLocal,
    For,
    Get,
    GetLocal,
    If,
    InRange,
    LocalScope,
    Op,
    Opaque,
    Or,
    Set,
    SetLocal,
    Where,
    Zero,
    it,
)

__all__ = [
    "Floor",
    "Footprint",
    "Summary",
    "analyze",
    "completion_floor",
    "read_counts",
    "roofline_seconds",
]


@dataclass(frozen=True)
class Footprint:
    """One buffer's traffic: bytes read, written, and the accumulated cells' bytes
    (counted in both), and whether any is an upper bound."""

    read_bytes: int
    write_bytes: int
    rmw_bytes: int
    approx: bool


@dataclass(frozen=True)
class Summary:
    """What :func:`analyze` found (upper bounds; the ``*_approx`` flags say which legs
    are exact)."""

    flops: int
    flops_inline: int
    flops_hoisted: int
    flops_approx: bool
    footprints: dict = field(compare=False)
    read_bytes: int
    write_bytes: int
    bytes_approx: bool
    opaque: bool

    @property
    def bytes(self) -> int:
        """``read_bytes + write_bytes``, the bytes moved."""
        return self.read_bytes + self.write_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved, ``flops / max(1, bytes)``."""
        return self.flops / max(1, self.bytes)

    @property
    def exact(self) -> bool:
        """Both legs exact and no opaque code."""
        return not (self.flops_approx or self.bytes_approx or self.opaque)


@dataclass(frozen=True)
class Floor:
    """What :func:`completion_floor` found (lower bounds of every completion)."""

    flops: int
    read_bytes: int
    write_bytes: int
    exact: bool

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclass
class _Access:
    node: str
    index: tuple
    ranges: dict
    certain: bool  # runs in every execution (not guarded, not in a conditional operand)
    write: bool
    rmw: bool = False  # the cell of an accumulating store
    clip: int = 0  # a guarded window read: its last ``clip`` entries only where in range
    via: str | None = None  # the open node whose producing statement made it (floor walk)


@dataclass(frozen=True)
class _Ctx:
    ranges: dict  # iterator -> inclusive (lo, hi) of the enclosing loops
    certain: bool  # the statement runs in every execution (no guard around it)
    trips: int  # how many times the statement runs
    hoisted: bool  # inside a LocalScope body


def _whole(buffer) -> tuple[tuple, dict]:
    """The index and loop ranges of an access to every cell of ``buffer``."""
    names = [f"{buffer.name}:{d}" for d in range(len(buffer.shape))]
    return tuple(it(n) for n in names), {n: (0, d - 1) for n, d in zip(names, buffer.shape)}


class _Walk:
    """One pass over a code, charging FLOPs and collecting accesses, in the upper
    (``floor=False``) or the lower (``floor=True``) mode."""

    def __init__(self, code: Code, floor: bool, open_nodes=frozenset()):
        self.code = code
        self.floor = floor
        self.open = frozenset(open_nodes)
        self.accesses: list[_Access] = []
        self.inline = 0
        self.hoisted = 0
        self.loose = False  # a FLOP count that is only a bound (or, floored, not tight)
        self.opaque = False
        self.via: str | None = None  # the open producer being walked (floor walk only)
        self.open_flops: dict[str, int] = defaultdict(int)  # each open producer's work

    def run(self) -> _Walk:
        self.body(self.code.body, _Ctx({}, True, 1, False))
        return self

    # -- scalars: inline FLOPs per evaluation; scope bodies are charged as they run -----

    def expr(self, s, ctx: _Ctx, conditional: bool = False) -> int:
        if isinstance(s, (Const, GetLocal, InRange)):
            return 0
        if isinstance(s, Get):
            certain = ctx.certain and not conditional
            self._add(_Access(s.node, s.index, ctx.ranges, certain, False))
            return 0
        if isinstance(s, Call):
            return s.flops + sum(self.expr(a, ctx, conditional) for a in s.args)
        if isinstance(s, Op):
            spec = SCALAR_OPS[s.op]
            args = s.args
            if spec.cond is Cond.FIRST:  # the discarded operand is never rendered
                args = args[:1]
            elif spec.cond is Cond.SECOND:
                args = args[1:]
            return spec.flops + sum(self.expr(a, ctx, conditional) for a in args)
        if isinstance(s, Where) and _window_read(s, self.code):
            # x[..., w] where inrange(w) else c: every in-range cell is read, for sure
            certain = ctx.certain and not conditional
            clip = len(s.cond.index)
            self._add(_Access(s.then.node, s.then.index, ctx.ranges, certain, False, clip=clip))
            return self.expr(s.other, ctx, True)
        if isinstance(s, Where):
            cond = self.expr(s.cond, ctx, conditional)
            arms = [self.expr(x, ctx, True) for x in (s.then, s.other)]
            self.loose = self.loose or arms[0] != arms[1]
            return cond + (min(arms) if self.floor else max(arms))
        if isinstance(s, (And, Or)):
            left = self.expr(s.a, ctx, conditional)
            right = self.expr(s.b, ctx, True)
            self.loose = self.loose or right > 0
            return left + (0 if self.floor else right)
        if isinstance(s, LocalScope):
            # hoisted: the body runs at every evaluation, whatever operand it sits in
            self.body(s.body, _Ctx(ctx.ranges, ctx.certain, ctx.trips, True))
            return 0
        raise TypeError(f"not a scalar expression: {s!r}")

    def _add(self, access: _Access) -> None:
        access.via = self.via
        self.accesses.append(access)

    def _charge(self, flops: int, ctx: _Ctx) -> None:
        if ctx.hoisted:
            self.hoisted += flops * ctx.trips
        else:
            self.inline += flops * ctx.trips

    # -- statements ---------------------------------------------------------------------

    def body(self, stmts, ctx: _Ctx) -> None:
        for st in stmts:
            self.statement(st, ctx)

    def statement(self, st, ctx: _Ctx) -> None:
        if isinstance(st, For):
            ranges = dict(ctx.ranges)
            ranges[st.index] = (st.lo, st.hi)
            self.body(st.body, _Ctx(ranges, ctx.certain, ctx.trips * st.trips, ctx.hoisted))
        elif isinstance(st, Set):
            if self.floor and st.node in self.open and self.via is None:
                # an open producer: its effect is the placement's; what it certainly does
                # is kept apart, for completion_floor to charge where every completion must
                self.loose = True
                before = (self.inline, self.hoisted)
                self.via = st.node
                self.statement(st, ctx)
                self.via = None
                self.open_flops[st.node] += self.inline + self.hoisted - sum(before)
                self.inline, self.hoisted = before
                return
            flops = self.expr(st.value, ctx)
            rmw = st.accumulate is not None
            if rmw:
                flops += SCALAR_OPS[st.accumulate].flops
                self._add(_Access(st.node, st.index, ctx.ranges, ctx.certain, False, True))
            self._add(_Access(st.node, st.index, ctx.ranges, ctx.certain, True, rmw))
            self._charge(flops, ctx)
        elif isinstance(st, SetLocal):
            flops = self.expr(st.value, ctx)
            if st.accumulate is not None:
                flops += SCALAR_OPS[st.accumulate].flops
            self._charge(flops, ctx)
        elif isinstance(st, If):
            self._charge(self.expr(st.cond, ctx), ctx)
            if self.floor:  # guards never taken
                self.loose = self.loose or bool(st.body)
                return
            before = self.inline + self.hoisted
            self.body(st.body, _Ctx(ctx.ranges, False, ctx.trips, ctx.hoisted))
            self.loose = self.loose or self.inline + self.hoisted > before  # as if taken
        elif isinstance(st, Zero):
            index, ranges = _whole(self.code.buffer(st.node))
            self._add(_Access(st.node, index, ranges, ctx.certain, True))
        elif isinstance(st, Opaque):
            self.opaque = True
            if self.floor:  # an under-count is sound in this direction
                self.loose = True
                return
            for name, write in [(n, False) for n in st.inputs] + [(n, True) for n in st.outputs]:
                index, ranges = _whole(self.code.buffer(name))
                self._add(_Access(name, index, ranges, ctx.certain, write))
        elif not isinstance(st, DeclareLocal):
            raise TypeError(f"not a statement: {st!r}")


def _window_read(s: Where, code: Code) -> bool:
    """Whether ``s`` reads a cell only where it lies inside its buffer: the condition is
    an ``InRange`` over the read's last entries and the buffer's last extents, and the
    other arm a constant."""
    cond, read = s.cond, s.then
    if not (isinstance(cond, InRange) and isinstance(read, Get) and isinstance(s.other, Const)):
        return False
    k = len(cond.index)
    shape = code.buffer(read.node).shape
    return 0 < k <= len(shape) and read.index[-k:] == cond.index and shape[-k:] == cond.shape


# ---- footprints ----------------------------------------------------------------------------


def _images(accesses, shape):
    """The distinct images among ``accesses``: ``[(cells, exact, access)]``."""
    seen = {}
    for a in accesses:
        key = (canonical_key(a.index, a.ranges), a.clip)
        if key not in seen:
            cells, exact = image_size(a.index, a.ranges, shape, a.clip)
            seen[key] = (cells, exact, a)
    return list(seen.values())


def _pairwise_disjoint(images) -> bool:
    return all(
        disjoint(x.index, x.ranges, y.index, y.ranges)
        for i, (_, _, x) in enumerate(images)
        for _, _, y in images[i + 1 :]
    )


def _upper_cells(accesses, size: int, shape) -> tuple[int, bool]:
    """``(cells, approx)`` of the union of the accesses, biased up."""
    images = [im for im in _images(accesses, shape) if im[0]]
    uncertain = any(not a.certain for a in accesses)
    if not images:
        return 0, uncertain
    if any(exact and cells == size for cells, exact, a in images if a.certain):
        return size, False
    total = sum(cells for cells, _, _ in images)
    exact = all(e for _, e, _ in images) and (len(images) == 1 or _pairwise_disjoint(images))
    return min(total, size), uncertain or not exact


def _lower_cells(accesses, shape) -> tuple[int, bool]:
    """``(cells, tight)`` of the union of the certain exact accesses, biased down: the
    largest sum over a sub-family of pairwise disjoint images (a union holds at least
    each such sum). All disjoint, it is their sum; all overlapping, the largest image;
    and adding an image never lowers it, which keeps the floor monotone."""
    images = _images(accesses, shape)
    certain = [im for im in images if im[2].certain and im[1] and im[0]]
    dropped = len(certain) < len([im for im in images if im[0]])
    if not certain:
        return 0, not dropped
    weights = [c for c, _, _ in certain]
    clash = [
        {
            j
            for j, (_, _, y) in enumerate(certain)
            if j != i and not disjoint(x.index, x.ranges, y.index, y.ranges)
        }
        for i, (_, _, x) in enumerate(certain)
    ]
    best = _heaviest_disjoint(frozenset(range(len(certain))), weights, clash, {})
    return best, not dropped and best == sum(weights)


def _heaviest_disjoint(left: frozenset, weights, clash, memo) -> int:
    """The largest total weight of a set of pairwise non-clashing members of ``left``."""
    if not left:
        return 0
    if left in memo:
        return memo[left]
    v = min(left)
    without = _heaviest_disjoint(left - {v}, weights, clash, memo)
    with_v = weights[v] + _heaviest_disjoint(left - {v} - clash[v], weights, clash, memo)
    best = max(without, with_v)
    memo[left] = best
    return best


def _by_buffer(accesses):
    out = defaultdict(lambda: ([], [], []))
    for a in accesses:
        reads, writes, rmws = out[a.node]
        (writes if a.write else reads).append(a)
        if a.rmw and a.write:
            rmws.append(a)
    return out


# ---- the public analyses -------------------------------------------------------------------


def read_counts(code: Code) -> dict[str, int]:
    """How many times ``code`` may read each buffer (every read ``Get`` times the trips
    of its loops; guarded and conditional reads counted as if they run), an upper
    bound: what an inlined producer's recompute multiplies by.

    Example:
        >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Set, it
        >>> i, k = it("i"), it("k")
        >>> acc = Set("y", (i,), Get("x", (i + k,)), "add")
        >>> bufs = (Buffer("x", (6,), kind="input"), Buffer("y", (4,), kind="output"))
        >>> read_counts(Code("w", bufs, (For("i", 0, 3, (For("k", 0, 2, (acc,)),)),)))
        {'x': 12, 'y': 12}
    """
    counts: dict[str, int] = {}
    for a in _Walk(code, floor=False).run().accesses:
        if not a.write:
            trips = math.prod(hi - lo + 1 for lo, hi in a.ranges.values() if hi >= lo)
            dead = any(hi < lo for lo, hi in a.ranges.values())
            counts[a.node] = counts.get(a.node, 0) + (0 if dead else trips)
    return counts


def analyze(code: Code) -> Summary:
    """The upper-bound summary of ``code``: module docstring."""
    walk = _Walk(code, floor=False).run()
    footprints = {}
    for name, (reads, writes, rmws) in sorted(_by_buffer(walk.accesses).items()):
        b = code.buffer(name)
        r, r_approx = _upper_cells(reads, b.size, b.shape)
        w, w_approx = _upper_cells(writes, b.size, b.shape)
        m, m_approx = _upper_cells(rmws, b.size, b.shape)
        footprints[name] = Footprint(
            r * b.itemsize, w * b.itemsize, m * b.itemsize, r_approx or w_approx or m_approx
        )
    return Summary(
        flops=walk.inline + walk.hoisted,
        flops_inline=walk.inline,
        flops_hoisted=walk.hoisted,
        flops_approx=walk.loose,
        footprints=footprints,
        read_bytes=sum(f.read_bytes for f in footprints.values()),
        write_bytes=sum(f.write_bytes for f in footprints.values()),
        bytes_approx=any(f.approx for f in footprints.values()),
        opaque=walk.opaque,
    )


def completion_floor(code: Code, open_nodes=()) -> Floor:
    """The lower bound of every completion of a partial placement whose undecided (or
    inline-committed) intermediates are ``open_nodes``, on the all-materialized
    lowering ``code``: module docstring.

    An open node's own traffic never counts (inlined, it is not stored), but where
    every completion must compute all of it (:func:`_needed_open`), its producer's
    certain reads and FLOPs do: whether materialized or inlined into its readers, each
    of its cells is computed at least once, and from the same cells.

    Example:
        >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
        >>> i = it("i")
        >>> t = Set("t", (i,), Op("exp", (Get("x", (i,)),)))
        >>> y = Set("y", (i,), Op("add", (Get("t", (i,)), Get("x", (i,)))))
        >>> bufs = (Buffer("x", (8,), kind="input"), Buffer("t", (8,)),
        ...         Buffer("y", (8,), kind="output"))
        >>> code = Code("r", bufs, (For("i", 0, 7, (t,)), For("i", 0, 7, (y,))))
        >>> f = completion_floor(code, {"t"})
        >>> f.flops, f.read_bytes, f.write_bytes, f.exact  # t's traffic open, its work not
        (16, 16, 16, False)
        >>> completion_floor(code).bytes == analyze(code).bytes
        True
    """
    walk = _Walk(code, floor=True, open_nodes=open_nodes).run()
    needed = _needed_open(code, walk)
    tight = not walk.loose
    read = write = 0
    counted = [a for a in walk.accesses if a.via is None or a.via in needed]
    for name, (reads, writes, _) in _by_buffer(counted).items():
        if name in walk.open:
            tight = tight and not (reads or writes)
            continue
        b = code.buffer(name)
        r, r_tight = _lower_cells(reads, b.shape)
        w, w_tight = _lower_cells(writes, b.shape)
        read += r * b.itemsize
        write += w * b.itemsize
        tight = tight and r_tight and w_tight
    flops = walk.inline + walk.hoisted + sum(walk.open_flops[n] for n in needed)
    return Floor(flops, read, write, tight)


def _needed_open(code: Code, walk: _Walk) -> set[str]:
    """The open nodes every completion computes whole, each cell from its producer's
    same reads: a node written by one certain, non-accumulating statement that writes
    each of its cells exactly once (an exact image of the whole buffer, as many trips
    as cells), and whose every cell is certainly read by materialized code or by the
    producer of a node already found needed (a fixed point: a chain of inlined
    elementwise producers under a full reader is needed link by link)."""
    by_buffer = _by_buffer(walk.accesses)
    candidates = {}
    for name in walk.open:
        reads, writes, _ = by_buffer.get(name, ([], [], []))
        if len(writes) != 1:
            continue
        w, b = writes[0], code.buffer(name)
        if w.rmw or not w.certain or w.via != name:
            continue
        trips = math.prod(max(0, hi - lo + 1) for lo, hi in w.ranges.values())
        cells, exact = image_size(w.index, w.ranges, b.shape, 0)
        if exact and cells == b.size == trips:
            candidates[name] = reads
    needed: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, reads in candidates.items():
            if name in needed:
                continue
            b = code.buffer(name)
            sure = [a for a in reads if a.via is None or a.via in needed]
            if _lower_cells(sure, b.shape)[0] == b.size:
                needed.add(name)
                grew = True
    return needed


def roofline_seconds(result, peak_flops=None, peak_bandwidth=None) -> float | None:
    """The roofline lower-bound time of a :class:`Summary` or :class:`Floor`:
    ``max(flops / peak_flops, bytes / peak_bandwidth)`` over the peaks given (FLOP/s,
    bytes/s), None when neither is. Monotone: a higher peak never raises it. A lower
    bound only up to the counts' own bias (rank with it, do not predict).

    Example:
        >>> roofline_seconds(Floor(2_000_000, 1000, 1000, True), peak_flops=1e9)
        0.002
    """
    return envelope.roofline_seconds(result.flops, result.bytes, peak_flops, peak_bandwidth)
