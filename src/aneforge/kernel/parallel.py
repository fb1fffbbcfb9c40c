"""Which loop of a generated kernel's nest runs in parallel: the outermost one whose
iterations write distinct cells and share no local, when the nest has enough work.
Results never depend on it (each iteration computes the same cells either way).

Example:
    >>> from aneforge.kernel.ir import For, Get, Op, Set, it
    >>> store = Set("y", (it("i"), it("j")), Op("exp", (Get("x", (it("i"), it("j"))),)))
    >>> parallel_loop((For("i", 0, 255, (For("j", 0, 1023, (store,)),)),))
    'i'
"""

from __future__ import annotations

from .ir import DeclareLocal, For, LocalScope, Set, SetLocal, Zero, children, walk

__all__ = ["PARALLEL_WORK", "parallel_loop"]

#: Below this many innermost iterations a kernel runs serially (waking threads costs more).
#: A parallel launch costs about 3.5 us on 2 cores (numba's OpenMP layer); 2^14 instead
#: of 2^16 ran ShuffleNet 3 % and SqueezeNet 2 % faster (paired runs, same bits).
PARALLEL_WORK = 1 << 14


def parallel_loop(stmts) -> str | None:
    """The iterator of the outermost loop whose iterations write distinct cells and
    share no local, when the statements are one loop nest with enough work."""
    if len(stmts) != 1 or not isinstance(stmts[0], For):
        return None
    loop = stmts[0]
    work = 1
    for item in walk(loop):
        if isinstance(item, For):
            work = max(work, _trips(loop, item))
    if work < PARALLEL_WORK:
        return None
    while True:
        if loop.trips >= 2 and _distinct(loop):
            return loop.index
        if len(loop.body) != 1 or not isinstance(loop.body[0], For):
            return None
        loop = loop.body[0]


def _trips(outer: For, target: For) -> int:
    """Iterations of ``target``'s body over the nest from ``outer`` (an upper bound),
    through loops inside expressions too (a row sum's scope)."""
    total = 1
    stack = [(outer, 1)]
    while stack:
        node, mult = stack.pop()
        if isinstance(node, For):
            mult *= max(node.trips, 0)
            if node is target:
                total = max(total, mult)
        stack.extend((child, mult) for child in children(node))
    return total


def _distinct(loop: For) -> bool:
    """Whether iterations of ``loop`` never write one cell and no local outlives an
    iteration: every store has an axis whose index tells ``loop``'s iterator apart
    (:func:`_separates`)."""
    declared = {s.name for s in walk(loop.body) if isinstance(s, (DeclareLocal, LocalScope))}
    trips = {f.index: f.trips for f in walk(loop) if isinstance(f, For)}
    for item in walk(loop.body):
        if isinstance(item, Zero):
            return False
        if isinstance(item, SetLocal) and item.name not in declared:
            return False
        if isinstance(item, Set) and not any(_separates(a, loop.index, trips) for a in item.index):
            return False
    return True


def _separates(index, name: str, trips: dict) -> bool:
    """Whether two cells ``index`` reaches are equal only where iterator ``name`` is too:
    ``index`` reads ``name`` and is one-to-one in the iterators of ``trips`` it reads
    (the others, outer loops, are fixed in a parallel loop's iterations). That holds
    when its terms, by ascending coefficient, form a mixed radix: each coefficient
    exceeds the span of the smaller terms (``c * (trips - 1)`` summed), as a channel
    index ``C/g * i + j`` (j < C/g) of a channel shuffle does.

    Example:
        >>> from aneforge.kernel.ir import it
        >>> _separates(it("i") * 4 + it("j"), "i", {"i": 3, "j": 4})
        True
        >>> _separates(it("i") * 4 + it("j"), "i", {"i": 3, "j": 5})  # 4*1 + 0 == 4*0 + 4
        False
    """
    coeffs = index.coeffs
    if name not in coeffs:
        return False
    span = 0
    for c, n in sorted((abs(c), trips[k]) for k, c in coeffs.items() if k in trips):
        if c <= span:
            return False
        span += c * max(n - 1, 0)
    return True
