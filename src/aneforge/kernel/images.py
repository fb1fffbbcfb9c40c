"""Affine access images: how many cells an access touches, and whether two are disjoint.

An access reads or writes ``node[a_0(i), ..., a_r(i)]`` for every point ``i`` of the box
of its enclosing loops. Its image is the set of cells it touches; :func:`image_size`
gives its cardinality, exact or an upper bound:

- Iterators of one trip are pinned (a constant), iterators the index does not mention
  do not change the image, and a loop of no trip makes the image empty.
- The map is injective when the row-major flat position ``sum(stride_d * a_d)``, or
  an axis at a time with pinning, passes the mixed-radix test: with the coefficients
  sorted by magnitude, each is larger than the span the smaller ones reach. An axis
  that passes determines its iterators, which are then pinned (known) in the other
  axes. An injective map has one cell per box point (exact).
- Otherwise, when no iterator feeds two axes, the image is the product of the axes'
  images; an axis whose coefficients, divided by their gcd ``g``, leave no gap (each,
  smallest first, at most the span reached so far plus one) covers every ``g``-th
  position of one run, exactly.
- Anything else is an upper bound: the box, capped by the axes' spans and the node size.

:func:`disjoint` proves two accesses of one node touch no common cell: some axis where
their spans do not overlap, or where the gcd of the coefficients does not divide the
difference of the offsets.

Example:
    >>> from aneforge.kernel.ir import it
    >>> i, k = it("i"), it("k")
    >>> image_size((i + k,), {"i": (0, 3), "k": (0, 2)}, (8,))  # a window: contiguous
    (6, True)
    >>> image_size((i * 4 + k * 2,), {"i": (0, 3), "k": (0, 2)}, (17,))  # every 2nd cell
    (9, True)
    >>> image_size((i + k, k), {"i": (0, 3), "k": (0, 2)}, (8, 3))  # k feeds two axes
    (12, True)
    >>> image_size((i + k, i + k), {"i": (0, 3), "k": (0, 2)}, (8, 8))
    (12, False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .ir import Affine

__all__ = ["canonical_key", "disjoint", "image_size", "span"]

Ranges = dict[str, tuple[int, int]]


def _pinned(a: Affine, ranges: Ranges) -> tuple[dict[str, int], int]:
    """The coefficients of the iterators of more than one trip, and the offset with the
    one-trip iterators substituted."""
    coeffs, offset = {}, a.offset
    for k, c in a.terms:
        lo, hi = ranges[k]
        if hi == lo:
            offset += c * lo
        else:
            coeffs[k] = c
    return coeffs, offset


def span(a: Affine, ranges: Ranges) -> tuple[int, int]:
    """The least and greatest value of ``a`` over the box."""
    lo = hi = a.offset
    for k, c in a.terms:
        r_lo, r_hi = ranges[k]
        lo += min(c * r_lo, c * r_hi)
        hi += max(c * r_lo, c * r_hi)
    return lo, hi


def _trips(ranges: Ranges, k: str) -> int:
    lo, hi = ranges[k]
    return hi - lo + 1


def _injective(coeffs: dict[str, int], ranges: Ranges) -> bool:
    reach = 0
    for k, c in sorted(coeffs.items(), key=lambda kc: (abs(kc[1]), kc[0])):
        if abs(c) <= reach or c == 0:
            return False
        reach += abs(c) * (_trips(ranges, k) - 1)
    return True


def _solvable(axes: list[dict[str, int]], ranges: Ranges) -> bool:
    """Whether a cell determines every iterator: an axis whose unknown iterators pass
    the mixed-radix test determines them, which pins them in the other axes."""
    known: set[str] = set()
    progress = True
    while progress:
        progress = False
        for coeffs in axes:
            unknown = {k: c for k, c in coeffs.items() if k not in known}
            if unknown and _injective(unknown, ranges):
                known |= unknown.keys()
                progress = True
    return all(k in known for coeffs in axes for k in coeffs)


def _contiguous(coeffs: dict[str, int], ranges: Ranges) -> bool:
    """Whether the values leave no gap (coefficients already divided by their gcd)."""
    reach = 0
    for k, c in sorted(coeffs.items(), key=lambda kc: (abs(kc[1]), kc[0])):
        if abs(c) > reach + 1:
            return False
        reach += abs(c) * (_trips(ranges, k) - 1)
    return True


def _axis_image(coeffs: dict[str, int], ranges: Ranges, extent: int) -> tuple[int, bool]:
    """``(cells, exact)`` of one axis's image (``extent``: the axis size)."""
    box = math.prod(_trips(ranges, k) for k in coeffs)
    if _injective(coeffs, ranges):
        return box, True
    g = math.gcd(*coeffs.values())
    reduced = {k: c // g for k, c in coeffs.items()}
    run = sum(abs(c) * (_trips(ranges, k) - 1) for k, c in reduced.items()) + 1
    if _contiguous(reduced, ranges):  # every g-th position of a run
        return run, True
    return min(box, run, extent), False


#: Past this many box points a clipped axis is not enumerated (its count is a bound).
ENUMERATE_LIMIT = 1 << 16


def _clipped_axis(coeffs: dict[str, int], offset: int, ranges: Ranges, n: int):
    """``(cells, exact)`` of one axis's values that fall in ``[0, n)``."""
    lo = offset + sum(min(c * ranges[k][0], c * ranges[k][1]) for k, c in coeffs.items())
    if not coeffs:
        return int(0 <= lo < n), True
    g = math.gcd(*coeffs.values())
    reduced = {k: c // g for k, c in coeffs.items()}
    if _contiguous(reduced, ranges):  # lo, lo + g, ..., lo + g * (run - 1)
        run = sum(abs(c) * (_trips(ranges, k) - 1) for k, c in reduced.items()) + 1
        first = max(0, -(-(0 - lo) // g))  # the first step at or past 0
        last = min(run - 1, (n - 1 - lo) // g)  # the last step below n
        return max(0, last - first + 1), True
    box = math.prod(_trips(ranges, k) for k in coeffs)
    if box > ENUMERATE_LIMIT:
        return min(box, n), False
    values = np.full(1, offset, dtype=np.int64)
    for k, c in coeffs.items():
        values = (values[:, None] + c * np.arange(ranges[k][0], ranges[k][1] + 1)).ravel()
    values = np.unique(values)
    return int(np.count_nonzero((values >= 0) & (values < n))), True


def image_size(
    index: Sequence[Affine], ranges: Ranges, shape: Sequence[int], clip: int = 0
) -> tuple[int, bool]:
    """``(cells, exact)`` of the image of ``node[index]`` over the loops ``ranges``
    (iterator -> inclusive ``(lo, hi)``) on a node of ``shape``: module docstring.
    ``clip``: the access reads only where its last ``clip`` entries lie inside the node
    (a guarded window read), so those axes count their in-range values only.

    Example:
        >>> from aneforge.kernel.ir import it
        >>> y, t = it("y"), it("t")  # a padded 3-tap window: y + t - 1 over 8 rows
        >>> image_size((y + t - 1,), {"y": (0, 7), "t": (0, 2)}, (8,), clip=1)
        (8, True)
    """
    used = {k for a in index for k, _ in a.terms}
    if any(ranges[k][1] < ranges[k][0] for k in used):
        return 0, True
    pinned = [_pinned(a, ranges) for a in index]
    if clip:
        return _clipped_image(pinned, ranges, shape, clip)
    live = {k for coeffs, _ in pinned for k in coeffs}
    box = math.prod(_trips(ranges, k) for k in live)
    size = math.prod(shape)
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    flat: dict[str, int] = {}
    for stride, (coeffs, _) in zip(strides, pinned):
        for k, c in coeffs.items():
            flat[k] = flat.get(k, 0) + stride * c
    if _injective(flat, ranges) or _solvable([coeffs for coeffs, _ in pinned], ranges):
        return box, True
    owners = [k for coeffs, _ in pinned for k in coeffs]
    axes = [_axis_image(coeffs, ranges, n) for (coeffs, _), n in zip(pinned, shape)]
    if len(owners) == len(set(owners)):  # every iterator feeds one axis
        cells = math.prod(n for n, _ in axes)
        return min(cells, size), all(exact for _, exact in axes)
    return min(box, math.prod(n for n, _ in axes), size), False


def _clipped_image(pinned, ranges: Ranges, shape, clip: int) -> tuple[int, bool]:
    owners = [k for coeffs, _ in pinned for k in coeffs]
    first_clipped = len(shape) - clip
    axes = [
        _clipped_axis(c, o, ranges, n) if d >= first_clipped else _axis_image(c, ranges, n)
        for d, ((c, o), n) in enumerate(zip(pinned, shape))
    ]
    cells = min(math.prod(n for n, _ in axes), math.prod(shape))
    if len(owners) == len(set(owners)):  # every iterator feeds one axis
        return cells, all(exact for _, exact in axes)
    return cells, False


def disjoint(a: Sequence[Affine], a_ranges: Ranges, b: Sequence[Affine], b_ranges: Ranges) -> bool:
    """Whether the images of two accesses of one node provably share no cell (their
    iterators are separate, even where the names coincide)."""
    for x, y in zip(a, b):
        x_lo, x_hi = span(x, a_ranges)
        y_lo, y_hi = span(y, b_ranges)
        if x_hi < y_lo or y_hi < x_lo:
            return True
        cx, ox = _pinned(x, a_ranges)
        cy, oy = _pinned(y, b_ranges)
        g = math.gcd(*cx.values(), *cy.values()) if (cx or cy) else 0
        if g == 0 and ox != oy:
            return True
        if g > 1 and (oy - ox) % g:
            return True
    return False


def canonical_key(index: Sequence[Affine], ranges: Ranges) -> tuple:
    """A key equal for two accesses with the same image: iterators renamed by first
    appearance, each with its range."""
    names: dict[str, int] = {}
    key = []
    for a in index:
        coeffs, offset = _pinned(a, ranges)
        terms = []
        for k in sorted(coeffs, key=lambda n: (names.setdefault(n, len(names)), n)):
            terms.append((names[k], coeffs[k], ranges[k]))
        key.append((tuple(terms), offset))
    return tuple(key)
