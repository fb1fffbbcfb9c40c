"""A stable text form of loop-nest codes, for golden files and error messages.

Names are deterministic: iterators print as ``i0, i1, ...`` and locals as ``l0, l1,
...`` in the order the code binds them, so two codes that differ only in those names
print the same; buffers keep their names. A :class:`~aneforge.kernel.ir.LocalScope`
prints hoisted, as renderers emit it: its body as a ``scope`` block before the
statement that reads it, and its local in the expression. An exact (not fp16-held)
constant prints with a ``!`` suffix, a registry op's :class:`~aneforge.kernel.ir.Call`
with its attributes in brackets.

Example:
    >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
    >>> k = it("k")
    >>> body = (For("k", 0, 3, (Set("y", (k,), Op("add", (Get("x", (k,)), Get("x", (k,))))),)),)
    >>> ins, outs = Buffer("x", (4,), kind="input"), Buffer("y", (4,), kind="output")
    >>> print(to_text(Code("double", (ins, outs), body)))
    kernel double(x: fp16[4] input, y: fp16[4] output)
      for i0 in 0..3 serial:
        y[i0] = x[i0] + x[i0]
"""

from __future__ import annotations

from .ir import (
    SCALAR_OPS,
    Affine,
    And,
    Call,
    Code,
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
)

__all__ = ["to_text"]

_ACC_SYMBOL = {"add": "+=", "mul": "*=", "sub": "-="}


class _Printer:
    def __init__(self):
        self.iters: dict[str, str] = {}
        self.locals: dict[str, str] = {}
        self.lines: list[str] = []

    def _name(self, table: dict, prefix: str, name: str) -> str:
        return table.setdefault(name, f"{prefix}{len(table)}")

    def index(self, a: Affine) -> str:
        renamed = Affine.of({self.iters.get(k, k): c for k, c in a.terms}, a.offset)
        return str(renamed)

    def cell(self, node: str, index) -> str:
        return f"{node}[{', '.join(self.index(a) for a in index)}]"

    def expr(self, s, indent: str, nested: bool = False) -> str:
        if isinstance(s, Const):
            return format(float(s.value), ".9g") + ("" if s.held else "!")
        if isinstance(s, Call):
            attrs = ", ".join(f"{k}={v!r}" for k, v in s.attrs)
            args = ", ".join(self.expr(x, indent) for x in s.args)
            return f"{s.op}{'[' + attrs + ']' if attrs else ''}({args})"
        if isinstance(s, Get):
            return self.cell(s.node, s.index)
        if isinstance(s, GetLocal):
            return self.locals.get(s.name, s.name)
        if isinstance(s, InRange):
            cells = ", ".join(self.index(a) for a in s.index)
            return f"inrange[{', '.join(map(str, s.shape))}]({cells})"
        if isinstance(s, Op):
            spec = SCALAR_OPS[s.op]
            if spec.symbol:
                a, b = (self.expr(x, indent, True) for x in s.args)
                text = f"{a} {spec.symbol} {b}"
                return f"({text})" if nested else text
            return f"{s.op}({', '.join(self.expr(x, indent) for x in s.args)})"
        if isinstance(s, Where):
            c, t, o = (self.expr(x, indent, True) for x in (s.cond, s.then, s.other))
            return f"({c} ? {t} : {o})" if nested else f"{c} ? {t} : {o}"
        if isinstance(s, (And, Or)):
            sym = "&&" if isinstance(s, And) else "||"
            text = f"{self.expr(s.a, indent, True)} {sym} {self.expr(s.b, indent, True)}"
            return f"({text})" if nested else text
        if isinstance(s, LocalScope):
            name = self._name(self.locals, "l", s.name)
            self.lines.append(f"{indent}scope {name}: {s.dtype} = {format(s.init, '.9g')}:")
            self.body(s.body, indent + "  ")
            return name
        raise TypeError(f"not a scalar expression: {s!r}")

    def body(self, stmts, indent: str) -> None:
        for st in stmts:
            self.statement(st, indent)

    def statement(self, st, indent: str) -> None:
        out = self.lines
        if isinstance(st, For):
            name = self._name(self.iters, "i", st.index)
            out.append(f"{indent}for {name} in {st.lo}..{st.hi} {st.kind}:")
            self.body(st.body, indent + "  ")
        elif isinstance(st, (Set, SetLocal)):
            value = self.expr(st.value, indent)
            if isinstance(st, Set):
                target = self.cell(st.node, st.index)
            else:
                target = self.locals.get(st.name, st.name)
            op = "=" if st.accumulate is None else _ACC_SYMBOL.get(st.accumulate)
            op = op or f"{st.accumulate}="
            out.append(f"{indent}{target} {op} {value}")
        elif isinstance(st, Zero):
            out.append(f"{indent}zero {st.node}")
        elif isinstance(st, If):
            cond = self.expr(st.cond, indent)
            out.append(f"{indent}if {cond}:")
            self.body(st.body, indent + "  ")
        elif isinstance(st, DeclareLocal):
            name = self._name(self.locals, "l", st.name)
            out.append(f"{indent}local {name}: {st.dtype} = {format(st.init, '.9g')}")
        elif isinstance(st, Opaque):
            ins, outs = ", ".join(st.inputs), ", ".join(st.outputs)
            out.append(f"{indent}opaque {st.op}({ins}) -> {outs}  # {st.reason}")
        else:
            raise TypeError(f"not a statement: {st!r}")


def to_text(code: Code) -> str:
    """The stable text of ``code`` (no trailing newline)."""
    p = _Printer()
    params = ", ".join(
        f"{b.name}: {b.dtype}[{', '.join(map(str, b.shape))}] {b.kind}" for b in code.buffers
    )
    p.lines.append(f"kernel {code.name}({params})")
    p.body(code.body, "  ")
    return "\n".join(p.lines)
