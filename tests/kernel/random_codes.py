"""Random loop-nest codes for the property tests: every access in bounds by construction.

A code is a few top-level loop nests (one to three loops of one to four trips), each
setting one cell of an output or temporary buffer per iteration from an expression over
inputs and earlier temporaries: random affine indices (coefficients 0 to 3, small
offsets), scalar ops of every conditionality class, ``Where`` arms with hoisted scope
bodies, guards, accumulating stores and zeroed buffers. Buffer shapes are fitted to the
accesses afterwards, with some slack so that images do not always fill them.
"""

from __future__ import annotations

import numpy as np

from aneforge.kernel.images import span
from aneforge.kernel.ir import (
    Affine,
    And,
    Buffer,
    Code,
    Const,
    DeclareLocal,
    For,
    Get,
    GetLocal,
    If,
    LocalScope,
    LoopKind,
    Op,
    Or,
    Set,
    SetLocal,
    Where,
    Zero,
)

UNARY = ("neg", "abs", "exp", "tanh", "relu")
BINARY = ("add", "sub", "mul", "max", "min", "gt", "arg1", "arg2")


class _Gen:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.rank: dict[str, int] = {}
        self.extent: dict[str, list[int]] = {}
        self.locals = 0

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def index(self, node: str, ranges: dict) -> tuple[Affine, ...]:
        iters = list(ranges)
        out = []
        for d in range(self.rank.setdefault(node, int(self.rng.integers(1, 3)))):
            coeffs = {k: int(self.rng.integers(0, 4)) for k in iters if self.rng.random() < 0.6}
            a = Affine.of(coeffs, int(self.rng.integers(0, 3)))
            hi = span(a, ranges)[1]
            ext = self.extent.setdefault(node, [1] * self.rank[node])
            ext[d] = max(ext[d], hi + 1)
            out.append(a)
        return tuple(out)

    def expr(self, ranges: dict, sources: list[str], depth: int = 0):
        roll = self.rng.random()
        if depth >= 2 or roll < 0.3:
            if self.rng.random() < 0.15:
                return Const(float(self.rng.integers(-2, 3)) / 2)
            node = self.pick(sources)
            return Get(node, self.index(node, ranges))
        sub = lambda: self.expr(ranges, sources, depth + 1)  # noqa: E731
        if roll < 0.45:
            return Op(self.pick(UNARY), (sub(),))
        if roll < 0.75:
            return Op(self.pick(BINARY), (sub(), sub()))
        if roll < 0.82:
            return Op("fma", (sub(), sub(), sub()))
        if roll < 0.9:
            then = sub()
            if self.rng.random() < 0.5:  # a hoisted arm
                name = f"s{self.locals}"
                self.locals += 1
                then = LocalScope(name, (SetLocal(name, sub(), accumulate="add"),), "fp32")
            return Where(Op("gt", (sub(), Const(0.0))), then, sub())
        return (And if self.rng.random() < 0.5 else Or)(sub(), sub())

    def nest(self, target: str, sources: list[str], n: int):
        depth = int(self.rng.integers(1, 4))
        names = [f"n{n}_{d}" for d in range(depth)]
        ranges = {}
        for name in names:
            lo = int(self.rng.integers(0, 2))
            ranges[name] = (lo, lo + int(self.rng.integers(0, 4)))
        accumulate = "add" if self.rng.random() < 0.3 else None
        value = self.expr(ranges, sources)
        if self.rng.random() < 0.2:  # a local accumulator, stored once
            local = f"l{n}"
            inner = names[-1]
            outer = {k: v for k, v in ranges.items() if k != inner}
            body = (
                DeclareLocal(local, "fp32"),
                For(inner, *ranges[inner], (SetLocal(local, value, accumulate="add"),)),
                Set(target, self.index(target, outer), GetLocal(local)),
            )
            loops = names[:-1]
        else:
            stmt = Set(target, self.index(target, ranges), value, accumulate)
            if self.rng.random() < 0.2:
                stmt = If(Op("gt", (self.expr(ranges, sources, 1), Const(0.0))), (stmt,))
            body = (stmt,)
            loops = names
        for name in reversed(loops):
            kind = self.pick(list(LoopKind))
            body = (For(name, *ranges[name], body, kind),)
        prologue = (Zero(target),) if accumulate and self.rng.random() < 0.7 else ()
        return prologue + body


def random_code(seed: int) -> Code:
    """One random code; deterministic in ``seed``."""
    g = _Gen(seed)
    inputs = [f"x{j}" for j in range(int(g.rng.integers(1, 3)))]
    temps = [f"t{j}" for j in range(int(g.rng.integers(0, 3)))]
    body: tuple = ()
    sources = list(inputs)
    for n, target in enumerate([*temps, "y"]):
        body += g.nest(target, sources, n)
        sources.append(target)
    slack = {name: int(g.rng.integers(0, 3)) for name in g.extent}
    buffers = [
        Buffer(
            name,
            tuple(e + (slack[name] if d == 0 else 0) for d, e in enumerate(g.extent[name])),
            kind=kind,
        )
        for name, kind in [(x, "input") for x in inputs]
        + [(t, "temp") for t in temps]
        + [("y", "output")]
        if name in g.extent
    ]
    return Code(f"random{seed}", tuple(buffers), body)


def feeds(code: Code, seed: int) -> dict[str, np.ndarray]:
    """Random fp16 inputs of ``code``."""
    rng = np.random.default_rng(seed)
    return {b.name: rng.standard_normal(b.shape).astype(np.float16) for b in code.inputs}
