"""Lower one fused region of a Program to a loop-nest code, under a placement.

The region's sources from outside it (program inputs, weights, other regions' results)
become input buffers, the nodes read outside it (or program outputs) output buffers.
Every other node of the region is an *intermediate*, and the placement vector says, per
intermediate in region order, whether it is materialized (its own buffer, written by its
own loop nest) or inlined (its template recomputed at every read site).

Each op lowers by its record's :class:`~aneforge.graph.facts.LoopNest`:

- elementwise: a :class:`~aneforge.kernel.ir.Call` of the record's fp16 kernel on one
  cell of each source (NumPy broadcasting);
- reduce: a :class:`~aneforge.kernel.ir.LocalScope` accumulating the reduced cells in C
  order in an fp16 local (``mean`` then divides by the exact count);
- contract (matmul, bmm, linear): a float32 :class:`~aneforge.kernel.ir.LocalScope`
  over ``k`` of fp16 products, rounded once (``linear`` adds its bias in fp16);
- index: the source cell the record's index map gives.

An op without a loop nest (or whose map is not affine here: a reshape that moves
elements between axes, a matmul with a vector operand) lowers as
:class:`~aneforge.kernel.ir.Opaque` code running its record's fp16 kernel on whole
buffers; its sources and itself are then materialized whatever the placement says.
The numerics are the emulator's: the reference interpreter of the code gives the
generic emulator's bits on every lowered region.

Example:
    >>> import aneforge as af
    >>> from aneforge.kernel.lower import lower
    >>> x = af.input((2, 3), name="x")
    >>> prog = af.compile((x.exp() + 1.0).sum(axis=-1), opt=0)
    >>> low = lower(prog, prog.fused_regions[0], ["inline", "inline"])
    >>> [b.kind for b in low.code.buffers]
    ['input', 'input', 'output']
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..compiler.program import Program
from ..compiler.segment import Region
from ..emulator.gemm import gemm_reference
from ..errors import OptionError
from ..graph.arith import Arith
from ..graph.ops.contraction import conv_geometry
from ..graph.ops.spatial import pool_geometry
from ..graph.registry import get_op
from ..graph.tensor import Tensor
from .ir import (
    Affine,
    Buffer,
    Call,
    Code,
    Const,
    DeclareLocal,
    For,
    Get,
    GetLocal,
    InRange,
    LocalScope,
    Op,
    Opaque,
    Set,
    SetLocal,
    Where,
    fixed,
    it,
)

__all__ = [
    "Lowered",
    "Lowerer",
    "Placement",
    "lower",
    "opaque_reason",
    "region_nodes",
    "resolve",
    "scatters",
]

_ARITH = Arith.generic(gemm_reference)

#: Why a node given in ``lower(host=...)`` lowers as opaque code.
HOST = "runs on the host"


class Placement(str, enum.Enum):
    """Where an intermediate node lives."""

    MATERIALIZE = "materialize"  # its own buffer, written once
    INLINE = "inline"  # recomputed at every read site

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RegionNodes:
    """A region's nodes by role: its ``inputs`` (sources from outside it), ``outputs``
    (read outside it or program outputs) and ``intermediates`` (the rest), each in
    region order."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    intermediates: tuple[Tensor, ...]


@dataclass(frozen=True)
class Lowered:
    """A lowered region: the ``code``, the buffer name of each region input and output
    (``names[id(node)]``), the placement applied (forced materializations included),
    the ops that lowered as opaque code, with why, and the ``steps``: each
    materialized node with the statements of ``code.body`` that write it, in order."""

    code: Code
    nodes: RegionNodes
    names: dict
    placement: tuple[Placement, ...]
    opaque: tuple[tuple[str, str], ...]
    steps: tuple[tuple[Tensor, tuple], ...] = ()

    def feeds(self, values: dict) -> dict:
        """The code's input feeds from ``values`` (``id(node)`` -> array) of the
        region's input nodes."""
        return {
            self.names[id(n)]: values[id(n)].reshape(n.shape or (1,)) for n in self.nodes.inputs
        }


def region_nodes(program: Program, region: Region) -> RegionNodes:
    """The inputs, outputs and intermediates of ``region`` in ``program``."""
    inside = {id(n) for n in region.nodes}
    inputs: dict[int, Tensor] = {}
    read_outside = {id(t) for t in program.outputs}
    for node in program.nodes:
        for s in node.srcs:
            if id(node) in inside and id(s) not in inside:
                inputs.setdefault(id(s), s)
            if id(node) not in inside and id(s) in inside:
                read_outside.add(id(s))
    outputs = tuple(n for n in region.nodes if id(n) in read_outside)
    middle = tuple(n for n in region.nodes if id(n) not in read_outside)
    return RegionNodes(tuple(inputs.values()), outputs, middle)


class Lowerer:
    """Builds the IR of a region's nodes: ``buffers`` holds the nodes read from memory
    (``id(node)`` -> :class:`~aneforge.kernel.ir.Buffer`), and :meth:`template` the value
    of any other node at a cell, its sources inlined unless buffered."""

    def __init__(self, program: Program, nodes: RegionNodes):
        self.nodes = nodes
        self.order = {id(n): i for i, n in enumerate(program.nodes)}
        self.buffers: dict[int, Buffer] = {}
        self.fresh = 0
        self.opaque: list[tuple[str, str]] = []

    def name(self, node: Tensor) -> str:
        return f"v{self.order[id(node)]}"

    def iterator(self, hint: str) -> str:
        self.fresh += 1
        return f"{hint}{self.fresh}"

    # -- the value of a node at a cell ----------------------------------------------------

    def value(self, node: Tensor, index: tuple[Affine, ...]):
        if id(node) in self.buffers:  # a 0-d node lives in a one-cell buffer
            return Get(self.buffers[id(node)].name, index if node.shape else (fixed(0),))
        return self.template(node, index)

    def template(self, node: Tensor, index: tuple[Affine, ...]):
        nest = get_op(node.op).nest
        kind = nest.kind
        if kind == "elementwise" and nest.per_channel:  # x[n, c, ...] with params [c]
            x, *params = node.srcs
            args = [self.value(x, index), *(self.value(p, (index[1],)) for p in params)]
            shapes = ((1, 1), *(((1,),) * len(params)))
            return Call(node.op, tuple(args), tuple(sorted(node.attrs.items())), shapes)
        if kind == "elementwise":
            args = [self.value(s, _broadcast(index, s.shape)) for s in node.srcs]
            return Call(node.op, tuple(args), tuple(sorted(node.attrs.items())))
        if kind == "index":
            src = node.srcs[0]
            cell = nest.index(index, [src.shape], node.shape, node.attrs)
            return self.value(src, tuple(_affine(c) for c in cell))
        if kind == "reduce":
            return self._reduce(node, nest, index)
        if kind == "window":
            return self._window(node, nest, index)
        if kind == "row":
            return self._row_cell(node, index)
        return self._contract(node, nest, index)

    def _reduce(self, node, nest, index):
        x = node.srcs[0]
        axes = set(_norm_axes(node.attrs["axes"], x.ndim))
        kept = iter(index)
        cell, loops = [], []
        for d, n in enumerate(x.shape):
            if d in axes:
                name = self.iterator("r")
                loops.append((name, n))
                cell.append(it(name))
                if node.attrs["keepdims"]:
                    next(kept)
            else:
                cell.append(next(kept))
        acc = self.iterator("acc")
        body: tuple = (SetLocal(acc, self.value(x, tuple(cell)), accumulate=nest.combine),)
        for name, n in reversed(loops):
            body = (For(name, 0, n - 1, body),)
        total = LocalScope(acc, body, "fp16", nest.init)
        if nest.finish == "mean":
            count = math.prod(n for _, n in loops)
            return Op("div", (total, Const(float(count), held=False)))
        return total

    # -- row ops: statistics of a row, then each cell from them ---------------------------

    def _row_plan(self, node, index):
        """``(axes, stats, cell)`` of row op ``node`` (``nest.form``) at ``index``:
        its row axes, its statistics in order as ``(local, dtype, init, statements)``
        (each may read the earlier ones), and ``cell(entries)`` the value of the cell
        whose row axes hold ``entries``, reading the statistics as locals."""
        x, form = node.srcs[0], get_op(node.op).nest.form
        axis = node.attrs["axis"] % x.ndim
        axes = tuple(range(axis, x.ndim)) if form in ("layer_norm", "rms_norm") else (axis,)

        def at(entries, src=x, only_row=False):
            cell = [] if only_row else list(index)
            for a, e in zip(axes, entries):
                if only_row:
                    cell.append(e)
                else:
                    cell[a] = e
            return self.value(src, tuple(cell))

        stats, cell = self._row_stats(node, form, at, [x.shape[a] for a in axes])
        return axes, stats, cell

    def _row_stats(self, node, form, at, extents):
        """``(stats, cell)`` of a row op whose row has ``extents`` and whose cell of
        row entries ``e`` is ``at(e)`` (``at(e, param, only_row=True)`` a per-row-cell
        parameter's): :meth:`_row_plan`."""

        def over_row(local, term, combine="add"):
            """Statements folding ``term(entries)`` over the row into ``local``."""
            names = [self.iterator("k") for _ in extents]
            body: tuple = (SetLocal(local, term(tuple(it(n) for n in names)), combine),)
            for name, n in reversed(list(zip(names, extents))):
                body = (For(name, 0, n - 1, body),)
            return body

        def local(hint):
            return self.iterator(hint)

        count = Const(float(math.prod(extents)), held=False)
        eps = Const(float(node.attrs.get("eps", 0.0)))
        if form == "softmax":
            top, total = local("max"), local("sum")
            stats = [
                (top, -math.inf, over_row(top, at, "max")),
                (total, 0.0, over_row(total, lambda e: _shifted_exp(at(e), GetLocal(top)))),
            ]
            return stats, lambda e: Op("div", (_shifted_exp(at(e), GetLocal(top)), GetLocal(total)))
        square = lambda e: Op("mul", (at(e), at(e)))  # noqa: E731
        if form == "l2_norm":
            ss, r = local("ss"), local("r")
            inv = Op("rsqrt", (Op("max", (GetLocal(ss), eps)),))
            stats = [(ss, 0.0, over_row(ss, square)), (r, 0.0, (SetLocal(r, inv),))]
            return stats, lambda e: Op("mul", (at(e), GetLocal(r)))
        if form == "rms_norm":
            total, ms, r = local("sum"), local("ms"), local("r")
            stats = [
                (total, 0.0, over_row(total, square)),
                (ms, 0.0, (SetLocal(ms, Op("div", (GetLocal(total), count))),)),
                (r, 0.0, (SetLocal(r, Op("rsqrt", (Op("add", (GetLocal(ms), eps)),))),)),
            ]
            scaled = lambda e: Op("mul", (at(e), GetLocal(r)))  # noqa: E731
            return stats, lambda e: self._norm_affine(node, scaled(e), at, e)
        # layer_norm: mean, centred squares' mean, reciprocal deviation
        s1, mu, s2, var, r = (local(h) for h in ("sum", "mu", "sum", "var", "r"))
        centred = lambda e: Op("sub", (at(e), GetLocal(mu)))  # noqa: E731
        stats = [
            (s1, 0.0, over_row(s1, at)),
            (mu, 0.0, (SetLocal(mu, Op("div", (GetLocal(s1), count))),)),
            (s2, 0.0, over_row(s2, lambda e: Op("mul", (centred(e), centred(e))))),
            (var, 0.0, (SetLocal(var, Op("div", (GetLocal(s2), count))),)),
            (r, 0.0, (SetLocal(r, Op("rsqrt", (Op("add", (GetLocal(var), eps)),))),)),
        ]
        scaled = lambda e: Op("mul", (centred(e), GetLocal(r)))  # noqa: E731
        return stats, lambda e: self._norm_affine(node, scaled(e), at, e)

    def _norm_affine(self, node, y, at, entries):
        """``y * weight + bias`` over the row axes, each step rounded, where present."""
        i = 1
        if node.attrs.get("has_weight"):
            y = Op("mul", (y, at(entries, node.srcs[i], only_row=True)))
            i += 1
        if node.attrs.get("has_bias"):
            y = Op("add", (y, at(entries, node.srcs[i], only_row=True)))
        return y

    def _row_cell(self, node, index):
        """One cell of a row op inline: each statistic recomputed in a hoisted scope."""
        axes, stats, cell = self._row_plan(node, index)
        done: tuple = ()
        scoped = {}
        for name, init, stmts in stats:
            scoped[name] = LocalScope(name, done + stmts, "fp16", init)
            done += (DeclareLocal(name, "fp16", init), *stmts)
        value = cell(tuple(index[a] for a in axes))
        return _substitute(value, scoped)

    def row_nest(self, node, buf) -> tuple:
        """A materialized row op: per row, its statistics once, then every cell."""
        names = [self.iterator("i") for _ in node.shape]
        index = tuple(it(m) for m in names)
        axes, stats, cell = self._row_plan(node, index)
        body: tuple = ()
        for name, init, stmts in stats:
            body += (DeclareLocal(name, "fp16", init), *stmts)
        inner: tuple = (Set(buf.name, index, cell(tuple(index[a] for a in axes))),)
        for a in reversed(axes):
            inner = (For(names[a], 0, node.shape[a] - 1, inner),)
        body += inner
        for d in reversed(range(len(names))):
            if d not in axes:
                body = (For(names[d], 0, node.shape[d] - 1, body),)
        return body

    def group_nest(self, node, buf) -> tuple:
        """A materialized group norm: per image and group, layer_norm's statistics over
        the group's (channel, spatial...) cells in C order, then every cell (each
        group's channels are contiguous, so every access is affine)."""
        x = node.srcs[0]
        groups = node.attrs["groups"]
        per = x.shape[1] // groups
        n, g = self.iterator("i"), self.iterator("g")

        def at(entries, src=x, only_row=False):
            channel = it(g) * per + entries[0]
            cell = (channel,) if only_row else (it(n), channel, *entries[1:])
            return self.value(src, cell)

        extents = [per, *x.shape[2:]]
        stats, cell = self._row_stats(node, "layer_norm", at, extents)
        body: tuple = ()
        for name, init, stmts in stats:
            body += (DeclareLocal(name, "fp16", init), *stmts)
        names = [self.iterator("k") for _ in extents]
        entries = tuple(it(m) for m in names)
        inner: tuple = (
            Set(buf.name, (it(n), it(g) * per + entries[0], *entries[1:]), cell(entries)),
        )
        for name, extent in reversed(list(zip(names, extents))):
            inner = (For(name, 0, extent - 1, inner),)
        body += inner
        return (For(n, 0, x.shape[0] - 1, (For(g, 0, groups - 1, body),)),)

    def _window(self, node, nest, index):
        x = node.srcs[0]
        geo = pool_geometry(node)
        taps = [self.iterator("t") for _ in geo.kernel]
        n, c, *out = index
        spatial = tuple(y * s + it(t) - p[0] for y, t, s, p in zip(out, taps, geo.stride, geo.pads))
        read = self.value(x, (n, c, *spatial))
        if _padded(geo.pads):  # the padding reads the fill
            read = Where(InRange(spatial, x.shape[2:]), read, Const(nest.init))
        acc = self.iterator("acc")
        body: tuple = (SetLocal(acc, read, accumulate=nest.combine),)
        for t, k in reversed(list(zip(taps, geo.kernel))):
            body = (For(t, 0, k - 1, body),)
        total = LocalScope(acc, body, "fp16", nest.init)
        if nest.finish != "mean":
            return total
        if node.attrs.get("count_include_pad", True) or not _padded(geo.pads):
            return Op("div", (total, Const(float(math.prod(geo.kernel)), held=False)))
        # the count of real cells, an exact integer in a float32 local
        count = self.iterator("count")
        body = (SetLocal(count, InRange(spatial, x.shape[2:]), accumulate="add"),)
        for t, k in reversed(list(zip(taps, geo.kernel))):
            body = (For(t, 0, k - 1, body),)
        return Op("div", (total, LocalScope(count, body, "fp32", 0.0)))

    def _contract(self, node, nest, index):
        """The float32 sum of fp16 products of one output cell (``nest.form``), rounded
        once, plus the bias in fp16."""
        terms, loops = getattr(self, f"_{nest.form}_terms")(node, index)
        acc = self.iterator("acc")
        body: tuple = (SetLocal(acc, Op("mul", terms), accumulate="add"),)
        for name, n in reversed(loops):
            body = (For(name, 0, n - 1, body),)
        total = Op("fp16", (LocalScope(acc, body, "fp32", 0.0),))
        bias = node.srcs[2] if len(node.srcs) == 3 else None
        if bias is None:
            return total
        channel = index[1] if nest.form == "conv" else index[-1]
        return Op("add", (total, self.value(bias, (channel,))))

    def _matmul_terms(self, node, index):
        a, b = node.srcs
        k = self.iterator("k")
        batch, m, n = index[:-2], index[-2], index[-1]
        a_cell = (*_broadcast(batch, a.shape[:-2]), m, it(k))
        b_cell = (*_broadcast(batch, b.shape[:-2]), it(k), n)
        return (self.value(a, a_cell), self.value(b, b_cell)), [(k, a.shape[-1])]

    def _linear_terms(self, node, index):
        x, w = node.srcs[:2]
        k = self.iterator("k")
        terms = (self.value(x, (*index[:-1], it(k))), self.value(w, (index[-1], it(k))))
        return terms, [(k, x.shape[-1])]

    def _conv_terms(self, node, index):
        x, w = node.srcs[:2]
        geo = conv_geometry(node)
        c = self.iterator("c")
        taps = [self.iterator("t") for _ in geo.kernel]
        n, o, *out = index
        # groups > 1 lower here with one output channel per group (depthwise and the
        # like): input channel o * Cin/groups + c (see opaque_reason)
        channel = it(c) if geo.groups == 1 else o * w.shape[1] + it(c)
        spatial = tuple(
            y * s + it(t) * d - p[0]
            for y, t, s, d, p in zip(out, taps, geo.stride, geo.dilation, geo.pads)
        )
        read = self.value(x, (n, channel, *spatial))
        if _padded(geo.pads):  # the padding reads +0, as np.pad gives
            read = Where(InRange(spatial, x.shape[2:]), read, Const(0.0))
        terms = (read, self.value(w, (o, it(c), *(it(t) for t in taps))))
        return terms, [(c, w.shape[1]), *zip(taps, geo.kernel)]


def _shifted_exp(x, top):
    """``exp(x - top)``, each step rounded to fp16."""
    return Op("exp", (Op("sub", (x, top)),))


def _substitute(value, scoped: dict):
    """``value`` with every read of a local in ``scoped`` replaced by its scope."""
    if isinstance(value, GetLocal):
        return scoped.get(value.name, value)
    if isinstance(value, (Op, Call)):
        return type(value)(
            value.op,
            tuple(_substitute(a, scoped) for a in value.args),
            *((value.attrs, value.shapes) if isinstance(value, Call) else ()),
        )
    return value


def _gathers(node: Tensor) -> bool:
    """Whether movement ``node``'s output cells map affinely to source cells."""
    probe = tuple(fixed(0) for _ in node.shape)
    nest = get_op(node.op).nest
    return nest.index(probe, [node.srcs[0].shape], node.shape, node.attrs) is not None


def _scatter_cell(node: Tensor, index):
    """The output cell of source cell ``index`` (a probe when None) of a movement that
    only scatters affinely, or None."""
    nest, src = get_op(node.op).nest, node.srcs[0]
    if nest.scatter is None:
        return None
    probe = tuple(fixed(0) for _ in src.shape) if index is None else index
    return nest.scatter(probe, [src.shape], node.shape, node.attrs)


def _grouped(node: Tensor) -> bool:
    """Whether ``node`` is a group norm: it lowers materialized only (a cell's group is
    its channel divided by the group size, not an affine map)."""
    nest = get_op(node.op).nest
    return nest is not None and nest.form == "group_norm"


def scatters(node: Tensor) -> bool:
    """Whether movement ``node`` only scatters affinely (it lowers materialized, writing
    each source cell where it lands)."""
    nest = get_op(node.op).nest
    return nest is not None and nest.kind == "index" and not _gathers(node)


def _padded(pads) -> bool:
    return any(p != (0, 0) for p in pads)


def _affine(entry) -> Affine:
    return entry if isinstance(entry, Affine) else fixed(int(entry))


def _broadcast(index: Sequence[Affine], shape: tuple[int, ...]) -> tuple[Affine, ...]:
    """The cell of a source of ``shape`` that NumPy broadcasting reads for ``index``."""
    tail = index[len(index) - len(shape) :] if shape else ()
    return tuple(fixed(0) if n == 1 else a for a, n in zip(tail, shape))


def _norm_axes(axes, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axes is None else tuple(a % ndim for a in axes)


def opaque_reason(node: Tensor) -> str | None:
    """None when ``node`` has a loop nest here, else why it lowers as opaque.

    Example:
        >>> import aneforge as af
        >>> opaque_reason(af.cumsum(af.input((4,)))), opaque_reason(af.input((4,)).exp())
        ('no loop-nest rule', None)
    """
    nest = get_op(node.op).nest
    if nest is None:
        return "no loop-nest rule"
    if nest.kind == "index" and not _gathers(node) and _scatter_cell(node, None) is None:
        return "its index map is not affine for these shapes"
    if nest.form == "matmul" and min(s.ndim for s in node.srcs) < 2:
        return "a vector operand (the batched form needs rank >= 2)"
    groups = node.attrs.get("groups", 1)
    if nest.form == "conv" and groups > 1 and node.srcs[1].shape[0] != groups:
        return "grouped with several output channels per group (not affine)"
    return None


def _placements(placement, middle) -> list[Placement]:
    if placement is None:
        return [Placement.MATERIALIZE] * len(middle)
    if isinstance(placement, (str, Placement)) or len(placement) != len(middle):
        raise OptionError(
            f"lower: the placement needs one entry per intermediate ({len(middle)}), got "
            f"{placement!r}; give a list of 'materialize' / 'inline'"
        )
    out = []
    for p in placement:
        try:
            out.append(Placement(p))
        except ValueError:
            raise OptionError(
                f"lower: placement {p!r} is not one of 'materialize', 'inline'"
            ) from None
    return out


def reads_integers(region: Region) -> bool:
    """Whether a node of ``region`` reads an integer input (embedding ids, a mask): the
    kernel layer's buffers hold fp16, so such a region runs op by op.

    Example:
        >>> import aneforge as af
        >>> from aneforge.compiler.program import Program
        >>> ids = af.input((1, 4), dtype="uint16")
        >>> prog = Program.from_outputs([af.cast(ids) * 2.0])
        >>> [reads_integers(r) for r in prog.fused_regions]
        [True]
    """
    return any(s.dtype != "float16" for n in region.nodes for s in n.srcs)


def resolve(program: Program, region: Region, placement=None, host=None):
    """``(nodes, chosen, why)``: the region's :class:`RegionNodes`, the placement of
    each intermediate (``chosen[id(node)]``, after the materializations opaque code
    forces) and, per region node, why it lowers as opaque (None where it does not;
    ``"runs on the host"`` for the nodes of ``host``)."""
    if region.kind != "fused" or not any(region is r for r in program.fused_regions):
        raise OptionError(f"lower: {region!r} is not a fused region of this program")
    if reads_integers(region):
        raise OptionError(
            f"lower: {region!r} reads an integer input (ids, a mask), and the kernel "
            "layer's buffers hold fp16 only; such a region runs op by op (check "
            "reads_integers(region) before lowering)"
        )
    nodes = region_nodes(program, region)
    places = _placements(placement, nodes.intermediates)
    host = host or {}
    why = {id(n): HOST if id(n) in host else opaque_reason(n) for n in region.nodes}
    forced = {id(n) for n in region.nodes if why[id(n)] or scatters(n) or _grouped(n)}
    forced |= {id(s) for n in region.nodes if why[id(n)] for s in n.srcs}
    chosen = {
        id(n): Placement.MATERIALIZE if id(n) in forced else p
        for n, p in zip(nodes.intermediates, places)
    }
    return nodes, chosen, why


def lower(
    program: Program,
    region: Region,
    placement: Sequence | None = None,
    *,
    name: str = "",
    host: dict | None = None,
) -> Lowered:
    """Lower fused ``region`` of ``program`` with ``placement`` (one
    :class:`Placement` or its name per intermediate of :func:`region_nodes`, in region
    order; None materializes every one): module docstring.

    ``host`` maps ``id(node)`` of region nodes to a function of the node's source
    arrays giving its fp16 value: those nodes lower as opaque code running it (the
    compiled regions run contractions and chip-specific nodes so), their sources
    materialized.

    Raises :class:`~aneforge.errors.OptionError` for a region that is not one of
    ``program``'s fused regions or a placement of the wrong length or value.
    """
    host = host or {}
    nodes, chosen, why = resolve(program, region, placement, host)
    low = Lowerer(program, nodes)
    final = tuple(chosen[id(n)] for n in nodes.intermediates)
    for n in nodes.inputs:
        low.buffers[id(n)] = Buffer(low.name(n), n.shape or (1,), kind="input")
    steps = []
    outputs = {id(n) for n in nodes.outputs}
    for n in region.nodes:
        if chosen.get(id(n)) is Placement.INLINE:
            continue
        buf = Buffer(low.name(n), n.shape or (1,), kind="output" if id(n) in outputs else "temp")
        if why[id(n)]:
            low.opaque.append((n.op, why[id(n)]))
            steps.append((n, (_opaque(n, low, buf, why[id(n)], host.get(id(n))),)))
        else:
            steps.append((n, _nest(n, low, buf)))
        low.buffers[id(n)] = buf
    body = tuple(st for _, stmts in steps for st in stmts)
    code = Code(name or f"region{region.index}", tuple(low.buffers.values()), body)
    names = {i: b.name for i, b in low.buffers.items()}
    return Lowered(code, nodes, names, final, tuple(low.opaque), tuple(steps))


def _nest(node: Tensor, low: Lowerer, buf: Buffer) -> tuple:
    """The statements writing every cell of ``node`` into ``buf``."""
    if not node.shape:  # a 0-d node lives in a one-cell buffer
        return (Set(buf.name, (fixed(0),), low.template(node, ())),)
    if get_op(node.op).nest.form == "group_norm":
        return low.group_nest(node, buf)
    if get_op(node.op).nest.kind == "row":
        return low.row_nest(node, buf)
    if scatters(node):  # write each source cell where it lands
        src = node.srcs[0]
        names = [low.iterator("s") for _ in src.shape]
        cell = tuple(it(m) for m in names)
        target = tuple(_affine(c) for c in _scatter_cell(node, cell))
        stmt = Set(buf.name, target, low.value(src, cell))
        for name, n in reversed(list(zip(names, src.shape))):
            stmt = For(name, 0, n - 1, (stmt,))
        return (stmt,)
    names = [low.iterator("i") for _ in node.shape]
    index = tuple(it(n) for n in names)
    stmt: For | Set = Set(buf.name, index, low.template(node, index))
    for name, n in reversed(list(zip(names, node.shape))):
        stmt = For(name, 0, n - 1, (stmt,))
    return (stmt,)


def _opaque(node: Tensor, low: Lowerer, buf: Buffer, why: str, kernel=None) -> Opaque:
    op, attrs, shapes = get_op(node.op), dict(node.attrs), [s.shape for s in node.srcs]

    def run(*arrays):
        args = [a.reshape(shape) for a, shape in zip(arrays, shapes)]
        if kernel is not None:
            return kernel(*args)
        return op.emulate(args, attrs, _ARITH)

    ins = tuple(low.buffers[id(s)].name for s in node.srcs)
    return Opaque(node.op, ins, (buf.name,), run, why)
