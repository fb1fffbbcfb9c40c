"""Merge perfectly nested loops into one where every access allows it, so a generated
kernel runs one long inner loop (which vectorizes) instead of short ones: a 7 x 7
feature map's elementwise work runs as 49 iterations, not 7 loops of 7.

Loops ``for i: for j: body`` merge into ``for k in 0..Ti*Tj-1: body'`` when the outer
body is the inner loop alone, both start at 0, the inner body is plain stores (no
accumulation, local or scope), no guard reads ``i`` or ``j``, and every read and store
either reads neither iterator or reads ``i`` and ``j`` as whole adjacent axes ``[...,
i, j, ...]`` of a buffer whose second axis is ``Tj`` long. Those accesses then read the
one axis ``k`` of a view of the buffer with the two axes merged (a C-order reshape, so
each access reaches the same cell). The merged loop runs the same iterations in the same
order: the results are the same, bit for bit.

Example:
    >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
    >>> i, j = it("i"), it("j")
    >>> store = Set("y", (i, j), Op("exp", (Get("x", (i, j)),)))
    >>> buffers = (Buffer("x", (7, 7), kind="input"), Buffer("y", (7, 7), kind="output"))
    >>> body = (For("i", 0, 6, (For("j", 0, 6, (store,)),)),)
    >>> merged, views = collapse(Code("e", buffers, body), body)
    >>> merged[0].trips, views["x#49"]
    (49, ('x', (49,)))
"""

from __future__ import annotations

from .ir import And, Call, Code, For, Get, GetLocal, InRange, LocalScope, Op, Or, Set, Where, it

__all__ = ["collapse"]

# the fields of each composite scalar that hold scalars (tuples of them for "args")
_FIELDS = {
    Op: ("args",),
    Call: ("args",),
    Where: ("cond", "then", "other"),
    And: ("a", "b"),
    Or: ("a", "b"),
}


def collapse(code: Code, stmts: tuple) -> tuple[tuple, dict[str, tuple[str, tuple[int, ...]]]]:
    """``stmts`` with every mergeable nest merged, and the views the merged loops use:
    ``view name -> (buffer, shape)``, a C-order reshape of the buffer."""
    nest = _Views({b.name: b.shape for b in code.buffers})
    return tuple(nest.statement(st) for st in stmts), nest.views


class _Views:
    def __init__(self, shapes: dict):
        self.shapes = dict(shapes)  # buffers and views
        self.views: dict[str, tuple[str, tuple[int, ...]]] = {}

    def statement(self, st):
        if not isinstance(st, For):
            return st
        loop = For(st.index, st.lo, st.hi, tuple(self.statement(s) for s in st.body), st.kind)
        merged = self.merge(loop)
        return loop if merged is None else merged

    def merge(self, outer: For) -> For | None:
        """``outer`` and the one loop inside it as one loop, or None."""
        if len(outer.body) != 1 or not isinstance(outer.body[0], For):
            return None
        inner = outer.body[0]
        if outer.lo != 0 or inner.lo != 0 or outer.trips < 1 or inner.trips < 1:
            return None
        if any(not isinstance(s, Set) or s.accumulate is not None for s in inner.body):
            return None
        pair = (outer.index, inner.index, f"{outer.index}.{inner.index}", inner.trips)
        found: dict = {}
        stores = []
        for store in inner.body:
            target = self.access(store.node, store.index, pair, found)
            value = self.rewrite(store.value, pair, found)
            if target is None or value is None:
                return None
            stores.append(Set(*target, value))
        for name, view in found.items():
            self.views[name] = view
            self.shapes[name] = view[1]
        return For(pair[2], 0, outer.trips * inner.trips - 1, tuple(stores), inner.kind)

    def rewrite(self, value, pair, found):
        """``value`` reading the merged iterator, or None where some part cannot."""
        i, j = pair[:2]
        if isinstance(value, Get):
            access = self.access(value.node, value.index, pair, found)
            return None if access is None else Get(*access)
        if isinstance(value, InRange):
            return None if any(i in a.coeffs or j in a.coeffs for a in value.index) else value
        if isinstance(value, (GetLocal, LocalScope)):
            return None
        fields = _FIELDS.get(type(value))
        if fields is None:
            return value  # a constant
        parts = {}
        for field in fields:
            part = getattr(value, field)
            if field == "args":
                new = tuple(self.rewrite(a, pair, found) for a in part)
                if any(a is None for a in new):
                    return None
            else:
                new = self.rewrite(part, pair, found)
                if new is None:
                    return None
            parts[field] = new
        kept = {f: getattr(value, f) for f in value.__dataclass_fields__}
        return type(value)(**{**kept, **parts})

    def access(self, node, index, pair, found):
        """``(buffer or view, index)`` reaching ``node[index]`` through the merged
        iterator, or None where the access does not allow the merge."""
        i, j, k, tj = pair
        axes_i = [d for d, a in enumerate(index) if i in a.coeffs]
        axes_j = [d for d, a in enumerate(index) if j in a.coeffs]
        if not axes_i and not axes_j:
            return node, index
        if len(axes_i) != 1 or axes_j != [axes_i[0] + 1]:
            return None
        d = axes_i[0]
        shape = self.shapes[node]
        if index[d] != it(i) or index[d + 1] != it(j) or shape[d + 1] != tj:
            return None
        base = self.views[node][0] if node in self.views else node
        merged = (*shape[:d], shape[d] * shape[d + 1], *shape[d + 2 :])
        name = f"{base}#{'x'.join(map(str, merged))}"
        found[name] = (base, merged)
        self.shapes.setdefault(name, merged)
        return name, (*index[:d], it(k), *index[d + 2 :])
