"""Generate a numba kernel from loop-nest statements, bit for bit with the interpreter.

:func:`generate` renders statements of a :class:`~aneforge.kernel.ir.Code` (no
:class:`~aneforge.kernel.ir.Opaque` among them) as the source of one Python function,
``run(buffers..., P, K, tables...)``, that numba compiles. Its numerics are those of the
reference interpreter (:mod:`aneforge.kernel.interpret`), obtained in float32:

- every value is a float32; each expression knows whether it holds an fp16 value (a
  buffer read, a rounded op, a held constant), a float32 one (a wide local) or an exact
  float64 (a count);
- ``+ - * /`` of two fp16 values run in float32 and round to fp16 (float32's 24 bits
  >= 2 * 11 + 2 make the double rounding innocuous); any other operand mix runs in
  float64 and rounds once (:func:`~aneforge.kernel.jitlib.load`'s ``r16d``);
- a unary op of an fp16 value is a lookup in a 65536-entry table of the op itself (the
  scalar op, or the record's kernel for a :class:`~aneforge.kernel.ir.Call`), built
  from the very function the interpreter calls, so transcendental functions need no
  reimplementation (``relu``, exact in float32, is rendered as a max instead);
- perfectly nested loops whose accesses allow it run as one loop over reshaped views
  (:mod:`aneforge.kernel.collapse`), so short rows do not keep the loop from vectorizing;
- an expression that reads no iterator of the innermost loop (a per-channel statistic,
  a constant's square root) is computed once at the head of the deepest loop it reads,
  unless it sits under a condition or reads a buffer the kernel writes
  (:meth:`_Gen.value`);
- an elementwise :class:`~aneforge.kernel.ir.Call` of several operands expands by its
  record's ``LoopNest.scalar`` form; a call with neither a table nor a form raises
  :class:`Unsupported`;
- comparisons give exact 1.0 / 0.0, ``max`` / ``min`` NumPy's scalar semantics
  (:mod:`aneforge.kernel.jitlib`), stores round to the buffer's dtype, an accumulating
  store applies its op in the destination's precision (a max or min by IEEE 754-2019's
  order-free rule, as amax, amin and max_pool define it);
- scope bodies are hoisted before their statement (they always run, as the IR says),
  ``Where`` / ``And`` / ``Or`` evaluate only the arm they take.

Every integer of the statements (loop bounds, index coefficients and offsets other than
0 and 1) and every constant becomes an entry of the ``P`` / ``K`` parameter arrays, so
regions of one structure and different sizes share one source and one compiled kernel.

Example:
    >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
    >>> i = it("i")
    >>> body = (For("i", 0, 7, (Set("y", (i,), Op("exp", (Get("x", (i,)),))),)),)
    >>> code = Code("e", (Buffer("x", (8,), kind="input"), Buffer("y", (8,), kind="output")), body)
    >>> k = generate(code, code.body)
    >>> k.buffers, k.ints.tolist(), k.tables
    (('y', 'x'), [8], (('op', 'exp', ()),))
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..graph.registry import get_op
from .collapse import collapse
from .ir import (
    SCALAR_OPS,
    Affine,
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
    walk,
)
from .parallel import parallel_loop

__all__ = ["GeneratedKernel", "Unsupported", "generate", "table"]

_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}

# Unary ops whose float64 value numba computes exactly as NumPy does (IEEE operations).
_EXACT_UNARY = {
    "neg": "(-{0})", "abs": "abs({0})", "sqrt": "np.sqrt({0})", "recip": "(1.0 / {0})",
    "rsqrt": "(1.0 / np.sqrt({0}))", "relu": "J.vmax({0}, 0.0)",
}  # fmt: skip

# Unary ops of an fp16 value whose float32 result is exact and already an fp16 value,
# rendered directly (a table lookup keeps the loop from vectorizing).
_DIRECT_UNARY = {"relu": "J.vmax({0}, _ZERO)"}

H, F, D = "h", "f", "d"  # an fp16 value in float32, a float32 value, an exact float64


class Unsupported(Exception):
    """The statements use something the generator does not render (the caller runs
    that node on the host instead)."""


@dataclass(frozen=True)
class GeneratedKernel:
    """A generated kernel: its ``source`` (a module defining ``run``), the ``key``
    naming it (a hash of the source), the buffers it takes in order, the ``ints`` and
    ``consts`` parameter arrays and the ``tables`` (keys for :func:`table`), and whether
    its outer loop runs in parallel."""

    source: str
    key: str
    buffers: tuple[str, ...]
    ints: np.ndarray
    consts: np.ndarray
    tables: tuple
    parallel: bool


@dataclass
class _Frame:
    """A scope invariant expressions may be computed in: the function (``index`` None)
    or a loop's body, whose ``lines`` are rendered before the rest of that body."""

    index: str | None
    depth: int
    lines: list


class _Gen:
    def __init__(self, code: Code, stmts: tuple = (), views: dict | None = None):
        self.code = code
        self.views = views or {}  # view name -> (buffer, shape): merged loops' reshapes
        self.view_vars: dict[str, str] = {}
        self.lines: list[str] = []
        self.depth = 1
        # loop-invariant code motion: the open scopes, outermost first; buffers some
        # statement writes (reads of them never move); >0 inside a conditional or lanes
        self.frames = [_Frame(None, 1, [])]
        written = (st.node for st in walk(stmts) if isinstance(st, (Set, Zero)))
        self.written = {self.base(n) for n in written}
        self.guarded = 0
        self.ints: list[int] = []
        self.consts: list[float] = []
        self.tables: dict = {}
        self.buffers: dict[str, str] = {}
        self.locals: dict[str, str] = {}
        self.temps = 0
        self.parallel_loop: str | None = None
        self.names: dict[str, str] = {}  # IR iterator / local name -> canonical name
        self.laned: set[str] = set()  # scopes rendered as one value per lane

    def var(self, kind: str, name: str) -> str:
        """A canonical variable for iterator (``"i"``) or local (``"l"``) ``name``,
        numbered by first appearance, so the source does not depend on IR names."""
        key = f"{kind}:{name}"
        if key not in self.names:
            self.names[key] = f"_{kind}{sum(k[0] == kind for k in self.names)}"
        return self.names[key]

    # -- output -------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def temp(self) -> str:
        self.temps += 1
        return f"_e{self.temps}"

    def int_(self, value: int) -> str:
        self.ints.append(int(value))
        return f"_p{len(self.ints) - 1}"

    def const(self, value: float) -> str:
        self.consts.append(float(value))
        return f"_k{len(self.consts) - 1}"

    def table_slot(self, key) -> str:
        if key not in self.tables:
            self.tables[key] = f"_t{len(self.tables)}"
        return self.tables[key]

    def buf(self, name: str) -> str:
        if name in self.views:  # a reshape of a buffer, made once at the top
            if name not in self.view_vars:
                base, shape = self.views[name]
                var = self.view_vars[name] = f"_v{len(self.view_vars)}"
                dims = "".join(f"{self.int_(d)}, " for d in shape)
                self.frames[0].lines.append(f"    {var} = {self.buf(base)}.reshape(({dims}))")
            return self.view_vars[name]
        if name not in self.buffers:
            self.code.buffer(name)  # raises for an unknown buffer
            self.buffers[name] = f"_b{len(self.buffers)}"
        return self.buffers[name]

    def base(self, name: str) -> str:
        """The buffer a view shows (a buffer is its own)."""
        return self.views[name][0] if name in self.views else name

    def dtype(self, name: str) -> str:
        return self.code.buffer(self.base(name)).dtype

    # -- indices ------------------------------------------------------------------------

    def affine(self, a: Affine) -> str:
        parts = []
        for name, c in a.terms:
            var = self.var("i", name)
            parts.append(var if c == 1 else f"(-{var})" if c == -1 else f"{self.int_(c)} * {var}")
        if a.offset:
            parts.append(self.int_(a.offset))
        return " + ".join(parts) or "0"

    def position(self, a: Affine) -> str:
        """An index into a buffer: unsigned unless it is a constant or a bare iterator of
        a ``range`` loop (which numba knows is not negative: a ``prange`` iterator it
        does not), so numba emits no negative-index wraparound (which keeps loops from
        vectorizing); every evaluated access is in bounds (reads outside sit under a
        guard)."""
        text = self.affine(a)
        bare = a.terms == ((a.terms[0][0], 1),) and not a.offset if a.terms else False
        if a.is_fixed or (bare and a.terms[0][0] != self.parallel_loop):
            return text
        return f"np.uintp({text})"

    def cell(self, node: str, index) -> str:
        return f"{self.buf(node)}[{', '.join(self.position(a) for a in index)}]"

    # -- scalars: (text, class) ---------------------------------------------------------

    def value(self, s):
        """``s`` rendered: ``(text, class)``. An expression whose reads do not move in
        the innermost loop is computed once where they stop moving (the head of the
        deepest loop it depends on, or the function's), into a temporary."""
        level = self.level(s) if isinstance(s, (Get, Op, Call)) else None
        return self.at(level, lambda: self.render(s))

    def at(self, level: int | None, render):
        """``render()`` in frame ``level``'s lines, its text held in a temporary there;
        in place when ``level`` is None or the innermost frame."""
        if level is None or level >= len(self.frames) - 1:
            return render()
        frame = self.frames[level]
        saved = self.lines, self.depth
        self.lines, self.depth = frame.lines, frame.depth
        try:
            text, cls = render()
            if not text.startswith("_e"):
                text = self.assign(text)
        finally:
            self.lines, self.depth = saved
        return text, cls

    def level(self, s) -> int | None:
        """The frame where ``s`` may be computed once (its index in ``frames``): that
        of the deepest loop whose iterator it reads (0, the function's, for none). None
        when it may not move: it reads a local or a buffer some statement writes, has a
        conditional part, is rendered under a condition or in lanes, or reads an
        iterator that is no frame's."""
        if self.guarded:
            return None
        deps = set()
        for item in walk(s):
            if isinstance(item, (GetLocal, LocalScope, Where, And, Or)):
                return None
            if isinstance(item, Get) and self.base(item.node) in self.written:
                return None
            if isinstance(item, (Get, InRange)):
                for a in item.index:
                    deps.update(a.coeffs)
        depth = [i for i, f in enumerate(self.frames) if f.index in deps]
        return None if len(depth) != len(deps) else max(depth, default=0)

    def render(self, s):
        if isinstance(s, Const):
            if s.held:
                with np.errstate(over="ignore"):
                    return self.const(float(np.float16(s.value))), H
            self.consts.append(float(s.value))  # exact: read as the float64 entry
            return f"_K[{len(self.consts) - 1}]", D
        if isinstance(s, Get):
            dtype = self.dtype(s.node)
            text = self.cell(s.node, s.index)
            return (f"J.h2f({text})", H) if dtype == "fp16" else (text, F)
        if isinstance(s, GetLocal):
            if s.name not in self.locals:
                raise Unsupported(f"local {s.name!r} read before it is declared")
            return self.var("l", s.name), H if self.locals[s.name] == "fp16" else F
        if isinstance(s, LocalScope):  # hoisted before the statement
            return self.var("l", s.name), H if s.dtype == "fp16" else F
        if isinstance(s, InRange):
            tests = [f"0 <= {self.affine(a)} < {self.int_(n)}" for a, n in zip(s.index, s.shape)]
            return self.assign(f"_ONE if ({' and '.join(tests) or 'True'}) else _ZERO"), H
        if isinstance(s, Op):
            return self.op(s)
        if isinstance(s, Call):
            return self.call(s)
        if isinstance(s, Where):
            return self.where(s)
        if isinstance(s, (And, Or)):
            return self.logic(s)
        raise Unsupported(f"{type(s).__name__} is not a scalar expression")

    def assign(self, text: str) -> str:
        name = self.temp()
        self.emit(f"{name} = {text}")
        return name

    def op(self, s: Op):
        spec = s.spec
        if spec.cond is Cond.FIRST:
            return self.value(s.args[0])
        if spec.cond is Cond.SECOND:
            return self.value(s.args[1])
        return self.apply(s.op, [self.value(a) for a in s.args])

    def apply(self, name: str, args):
        """The fp16-rounded result of scalar op ``name`` on rendered ``args``."""
        if len(args) == 1:
            (x, cls) = args[0]
            if name == "fp16":
                return (x, H) if cls == H else (self.assign(self.round(x, cls)), H)
            if cls != H:  # IEEE-exact in float64 here; a table needs an fp16 operand
                if name not in _EXACT_UNARY:
                    raise Unsupported(f"scalar op {name} of a {cls} value")
                d = f"np.float64({x})"
                return self.assign(f"J.r16d({_EXACT_UNARY[name].format(d)})"), H
            if name in _DIRECT_UNARY:
                return self.assign(_DIRECT_UNARY[name].format(x)), H
            return self.assign(f"{self.table_slot(('op', name, ()))}[J.f2h({x})]"), H
        if name in _ARITH:
            (a, ca), (b, cb) = args
            sym = _ARITH[name]
            if ca == H and cb == H:
                return self.assign(f"J.r16({a} {sym} {b})"), H
            return self.assign(f"J.r16d(np.float64({a}) {sym} np.float64({b}))"), H
        if name in _COMPARE:
            (a, _), (b, _) = args
            return self.assign(f"_ONE if {a} {_COMPARE[name]} {b} else _ZERO"), H
        if name in ("max", "min"):
            (a, ca), (b, cb) = args
            pick = f"J.v{name}"
            if ca == H and cb == H:
                return self.assign(f"{pick}({a}, {b})"), H
            return self.assign(f"J.r16d({pick}(np.float64({a}), np.float64({b})))"), H
        if name == "fma":
            a, b, c = (f"np.float64({t})" for t, _ in args)
            return self.assign(f"J.r16d({a} * {b} + {c})"), H
        raise Unsupported(f"scalar op {name}")

    @staticmethod
    def round(x: str, cls: str) -> str:
        return x if cls == H else f"J.r16({x})" if cls == F else f"J.r16d({x})"

    def call(self, s: Call):
        # the interpreter hands the record's kernel fp16 arrays: operands round first
        args, levels = [], []
        for a in s.args:
            level = self.level(a)
            text, cls = self.value(a)
            if cls != H:
                text = self.at(level, lambda t=text, c=cls: (self.assign(self.round(t, c)), H))[0]
            args.append((text, H))
            levels.append(level)
        nest = get_op(s.op).nest
        form = nest.scalar if nest is not None else None
        if form is not None:  # each step moves out as far as the operands it reads
            return self.expand(form(dict(s.attrs)), args, levels)[:2]
        if len(args) == 1:
            slot = self.table_slot(("call", s.op, s.attrs))
            return self.assign(f"{slot}[J.f2h({args[0][0]})]"), H
        raise Unsupported(f"{s.op}: an elementwise op of {len(args)} operands with no scalar form")

    def expand(self, form, args, levels):
        """``(text, class, level)`` of a scalar form over rendered ``args``, each step
        rendered in the frame of the deepest operand it reads (``levels``)."""
        if isinstance(form, int):
            return (*args[form], levels[form])
        if form[0] == "const":
            with np.errstate(over="ignore"):
                return self.const(float(np.float16(form[1]))), H, 0
        if form[0] not in SCALAR_OPS:
            raise Unsupported(f"scalar form op {form[0]!r}")
        parts = [self.expand(f, args, levels) for f in form[1:]]
        subs = [p[2] for p in parts]
        level = None if None in subs else max(subs)
        text, cls = self.at(level, lambda: self.apply(form[0], [p[:2] for p in parts]))
        return text, cls, level

    def where(self, s: Where):
        cond, _ = self.value(s.cond)
        classes = {self.klass(s.then), self.klass(s.other)}
        wide = D in classes
        name = self.temp()
        self.emit(f"if {cond} != 0:")
        self.depth += 1
        self.arm_as(name, s.then, wide)
        self.depth -= 1
        self.emit("else:")
        self.depth += 1
        self.arm_as(name, s.other, wide)
        self.depth -= 1
        return name, D if wide else (H if classes == {H} else F)

    def arm_as(self, target: str, s, wide: bool) -> None:
        self.guarded += 1  # an arm runs only where its condition selects it
        try:
            text, cls = self.value(s)
        finally:
            self.guarded -= 1
        self.emit(f"{target} = np.float64({text})" if wide else f"{target} = np.float32({text})")

    def klass(self, s) -> str:
        """The class :meth:`value` gives ``s`` (without rendering it)."""
        if isinstance(s, Const):
            return H if s.held else D
        if isinstance(s, Get):
            return H if self.dtype(s.node) == "fp16" else F
        if isinstance(s, GetLocal):
            return H if self.locals.get(s.name) == "fp16" else F
        if isinstance(s, LocalScope):
            return H if s.dtype == "fp16" else F
        if isinstance(s, Op) and s.spec.cond in (Cond.FIRST, Cond.SECOND):
            return self.klass(s.args[0 if s.spec.cond is Cond.FIRST else 1])
        if isinstance(s, Where):
            classes = {self.klass(s.then), self.klass(s.other)}
            return D if D in classes else H if classes == {H} else F
        return H

    def logic(self, s):
        left, _ = self.value(s.a)
        name = self.temp()
        is_or = isinstance(s, Or)
        self.emit(f"{name} = _ONE" if is_or else f"{name} = _ZERO")
        self.emit(f"if {left} {'==' if is_or else '!='} 0:")
        self.depth += 1
        self.guarded += 1
        right, _ = self.value(s.b)
        self.guarded -= 1
        self.emit(f"{name} = _ONE if {right} != 0 else _ZERO")
        self.depth -= 1
        return name, H

    # -- statements ---------------------------------------------------------------------

    def hoist(self, s) -> None:
        """Render every scope of expression ``s`` (outside other scopes' bodies)."""
        for scope in _scopes(s):
            if scope.name in self.laned:  # rendered already, one value per lane
                continue
            self.declare(scope.name, scope.dtype, scope.init)
            self.body(scope.body)

    def laned_loop(self, st: For) -> bool:
        """Render loop ``st`` lane-wise when it is one store of scope values (a pool's
        windows, say) that read along it: each scope's local becomes an array over the
        loop's iterations, the scope's own loops run outside the lane loop, and the
        store follows; every lane accumulates its terms in the same order, so the bits
        are the same and the inner loop streams along a row. False (nothing rendered)
        when ``st`` does not have that form."""
        if st.index == self.parallel_loop or st.trips < 4 or len(st.body) != 1:
            return False
        store = st.body[0]
        if not isinstance(store, Set) or store.accumulate is not None:
            return False
        scopes = _scopes(store.value)
        chains = [_accumulation_chain(sc) for sc in scopes]
        if not scopes or any(c is None for c in chains):
            return False
        if not any(_reads_along(c[-1].value, st.index) for c in chains):
            return False
        self.guarded += 1  # its lane loops are not frames: nothing moves out of them
        try:
            self.lanes(st, store, scopes, chains)
        finally:
            self.guarded -= 1
        return True

    def lanes(self, st: For, store: Set, scopes: list, chains: list) -> None:
        """Render :meth:`laned_loop`'s form (checked there)."""
        lane = self.var("i", st.index)
        lo = "0" if st.lo == 0 else self.int_(st.lo)
        hi = self.int_(st.hi + 1)
        at = lane if lo == "0" else f"{lane} - {lo}"
        for scope, chain in zip(scopes, chains):
            arr = self.temp()
            self.emit(f"{arr} = np.empty({hi} - {lo}, np.float32)")
            self.declare(scope.name, scope.dtype, scope.init)  # the init, as a scalar
            init = self.var("l", scope.name)
            self.emit(f"for {lane} in range({lo}, {hi}):")
            self.emit(f"    {arr}[{at}] = {init}")
            self.names[f"l:{scope.name}"] = f"{arr}[{at}]"
            self.laned.add(scope.name)
            depth = self.depth
            for loop in chain[:-1]:
                start = "0" if loop.lo == 0 else self.int_(loop.lo)
                self.emit(
                    f"for {self.var('i', loop.index)} in range({start}, {self.int_(loop.hi + 1)}):"
                )
                self.depth += 1
            self.emit(f"for {lane} in range({lo}, {hi}):")
            self.depth += 1
            self.statement(chain[-1])
            self.depth = depth
        self.emit(f"for {lane} in range({lo}, {hi}):")
        self.depth += 1
        self.statement(store)
        self.depth -= 1
        for scope in scopes:
            self.laned.discard(scope.name)

    def declare(self, name: str, dtype: str, init: float) -> None:
        self.locals[name] = dtype
        if dtype == "fp16":
            with np.errstate(over="ignore"):
                init = float(np.float16(init))
        else:
            init = float(np.float32(init))
        self.emit(f"{self.var('l', name)} = {self.const(init)}")

    def body(self, stmts) -> None:
        for st in stmts:
            self.statement(st)

    def statement(self, st) -> None:
        if isinstance(st, For):
            if self.laned_loop(st):
                return
            lo = "0" if st.lo == 0 else self.int_(st.lo)
            loop = "numba.prange" if st.index == self.parallel_loop else "range"
            header = f"for {self.var('i', st.index)} in {loop}({lo}, {self.int_(st.hi + 1)}):"
            outside = self.lines
            frame = _Frame(st.index, self.depth + 1, [])
            self.frames.append(frame)
            self.lines = []
            self.depth += 1
            self.body(st.body)
            if not st.body:
                self.emit("pass")
            self.depth -= 1
            self.frames.pop()
            body, self.lines = self.lines, outside
            self.emit(header)
            self.lines.extend(frame.lines + body)
        elif isinstance(st, Set):
            self.hoist(st.value)
            dtype = self.dtype(st.node)
            cell = self.cell(st.node, st.index)
            text, cls = self.value(st.value)
            if st.accumulate is not None:
                old = f"J.h2f({cell})" if dtype == "fp16" else cell
                text, cls = self.combine(st.accumulate, old, dtype, text, cls)
            if dtype == "fp16":
                self.emit(f"{cell} = J.f2h({text if cls != D else f'J.r16d({text})'})")
            else:
                self.emit(f"{cell} = np.float32({text})")
        elif isinstance(st, SetLocal):
            self.hoist(st.value)
            if st.name not in self.locals:
                raise Unsupported(f"local {st.name!r} set before it is declared")
            dtype = self.locals[st.name]
            text, cls = self.value(st.value)
            if st.accumulate is not None:
                text, cls = self.combine(st.accumulate, self.var("l", st.name), dtype, text, cls)
            if dtype == "fp16":
                self.emit(f"{self.var('l', st.name)} = {self.round(text, cls)}")
            else:
                self.emit(f"{self.var('l', st.name)} = np.float32({text})")
        elif isinstance(st, DeclareLocal):
            self.declare(st.name, st.dtype, st.init)
        elif isinstance(st, Zero):
            b = self.buf(st.node)
            flat = self.temp()
            self.emit(f"{flat} = {b}.reshape({b}.size)")
            self.emit(f"for _z in range({flat}.size):")
            self.emit(f"    {flat}[_z] = 0")
        elif isinstance(st, If):
            self.hoist(st.cond)
            cond, _ = self.value(st.cond)
            self.emit(f"if {cond} != 0:")
            self.depth += 1
            self.guarded += 1  # what the body reads may be valid only where cond holds
            self.body(st.body)
            self.guarded -= 1
            if not st.body:
                self.emit("pass")
            self.depth -= 1
        elif isinstance(st, Opaque):
            raise Unsupported(f"opaque {st.op} (runs on the host)")
        else:
            raise Unsupported(f"{type(st).__name__} is not a statement")

    def combine(self, op: str, old: str, dtype: str, new: str, cls: str):
        """``op(old, new)`` in the destination's precision (fp16 or float32)."""
        if op in ("max", "min"):  # a reduction's step: order-free (jitlib's rmax / rmin)
            if cls == D:
                return f"J.r{op}(np.float64({old}), {new})", D
            return f"J.r{op}({old}, np.float32({new}))", F if dtype == "fp32" else cls
        if op not in _ARITH:
            raise Unsupported(f"accumulation by {op}")
        sym = _ARITH[op]
        if dtype == "fp16":
            if cls == H:
                return f"J.r16({old} {sym} {new})", H
            return f"J.r16d(np.float64({old}) {sym} np.float64({new}))", H
        if cls == D:
            return f"np.float64({old}) {sym} {new}", D
        return f"{old} {sym} {new}", F


def _scopes(s) -> list:
    """The scopes of expression ``s`` outside other scopes' bodies, each name once."""
    seen, scopes, stack = set(), [], [s]
    while stack:
        item = stack.pop()
        if isinstance(item, LocalScope):
            if item.name not in seen:
                seen.add(item.name)
                scopes.append(item)
            continue
        if isinstance(item, (Op, Call)):
            stack.extend(reversed(item.args))
        elif isinstance(item, Where):
            stack.extend((item.other, item.then, item.cond))
        elif isinstance(item, (And, Or)):
            stack.extend((item.b, item.a))
    return scopes


def _accumulation_chain(scope: LocalScope):
    """``[For, ..., SetLocal]`` when ``scope``'s body is nested loops around one
    accumulation into its own local by a value with no scope or local of its own,
    else None."""
    chain, body = [], scope.body
    while len(body) == 1 and isinstance(body[0], For):
        chain.append(body[0])
        body = body[0].body
    if len(body) != 1 or not isinstance(body[0], SetLocal):
        return None
    acc = body[0]
    if acc.name != scope.name or acc.accumulate is None:
        return None
    if any(isinstance(item, (LocalScope, GetLocal)) for item in walk(acc.value)):
        return None
    return [*chain, acc]


def _reads_along(value, index: str) -> bool:
    """Whether some read in ``value`` moves along ``index`` on its last axis."""
    return any(
        isinstance(item, Get) and item.index and index in item.index[-1].coeffs
        for item in walk(value)
    )


def generate(code: Code, stmts: tuple, name: str = "run") -> GeneratedKernel:
    """The kernel running ``stmts`` (statements of ``code``, no opaque ones).

    Raises :class:`Unsupported` when something in them has no rendering here.
    """
    stmts, views = collapse(code, stmts)
    gen = _Gen(code, stmts, views)
    gen.parallel_loop = parallel_loop(stmts)
    gen.body(stmts)
    bufs = list(gen.buffers.items())
    tables = sorted(gen.tables.items(), key=lambda kv: int(kv[1][2:]))
    params = [b for _, b in bufs] + ["_P", "_K"] + [slot for _, slot in tables]
    head = [
        "import numba",
        "import numpy as np",
        "from aneforge.kernel import jitlib as J",
        "",
        "J.load()",
        "_ONE, _ZERO = np.float32(1.0), np.float32(0.0)",
        "",
        "",
        f"def {name}({', '.join(params)}):",
    ]
    unpack = [f"    _p{i} = _P[{i}]" for i in range(len(gen.ints))]
    unpack += [f"    _k{i} = np.float32(_K[{i}])" for i in range(len(gen.consts))]
    source = "\n".join(head + unpack + gen.frames[0].lines + gen.lines + ["    return 0", ""])
    key = hashlib.sha256(source.encode()).hexdigest()[:20]
    return GeneratedKernel(
        source,
        key,
        tuple(n for n, _ in bufs),
        np.asarray(gen.ints, dtype=np.int64),
        np.asarray(gen.consts, dtype=np.float64),
        tuple(k for k, _ in tables),
        gen.parallel_loop is not None,
    )


_TABLES: dict = {}


def table(key) -> np.ndarray:
    """The float32 table of a unary op over every fp16 bit pattern: ``("op", name, ())``
    for a scalar op (its float64 function on each value, rounded once, as the
    interpreter computes it) or ``("call", op, attrs)`` for a graph op (its record's
    fp16 kernel on the 65536 values). Memoized.

    Example:
        >>> t = table(("op", "exp", ()))
        >>> t.shape, float(t[0x3C00])  # exp(1.0) in fp16
        ((65536,), 2.71875)
    """
    if key in _TABLES:
        return _TABLES[key]
    kind, name, attrs = key
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    values = bits.view(np.float16)
    with np.errstate(all="ignore"):
        if kind == "op":
            fn = SCALAR_OPS[name].fn
            out = np.array([fn(np.float64(v)) for v in values.astype(np.float64)], np.float64)
            out = out.astype(np.float16)
        else:
            out = get_op(name).emulate([values.copy()], dict(attrs), None)
            out = np.asarray(out, dtype=np.float16).reshape(65536)
    result = out.astype(np.float32)
    _TABLES[key] = result
    return result
