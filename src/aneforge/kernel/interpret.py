"""The reference interpreter of the loop-nest IR: one scalar at a time, in NumPy.

Slow and obviously right, it is the IR's semantics (:mod:`aneforge.kernel.ir`, its
numerics paragraph) and the witness the analyses are tested against: it counts the FLOPs
it executes and, with ``trace=True``, the distinct cells it reads and writes per buffer.

- A scalar op evaluates its operands (only those its :class:`~aneforge.kernel.ir.Cond`
  says run), applies its float64 function and rounds the result once to fp16; a
  constant is held in fp16.
- A store rounds to the destination's dtype; an accumulating store applies its op to the
  old and the new value in float64 and rounds once to the destination's dtype, which is
  exactly the destination-precision operation (float64 holds more than twice the bits
  of float32 plus two, so the double rounding is innocuous).
- ``Where`` takes its ``then`` arm where the condition is nonzero (NaN is nonzero);
  ``And`` / ``Or`` give 1.0 or 0.0 and run their right operand only when it decides.
  The scope bodies of an operand not evaluated still run (renderers hoist them), so
  every scope runs once per evaluation of its statement.
- Output and temporary buffers start as NaN, so a cell read before it is written shows.

Example:
    >>> import numpy as np
    >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
    >>> i = it("i")
    >>> body = (For("i", 0, 2, (Set("y", (i,), Op("mul", (Get("x", (i,)), Get("x", (i,))))),)),)
    >>> bufs = (Buffer("x", (3,), kind="input"), Buffer("y", (3,), kind="output"))
    >>> code = Code("square", bufs, body)
    >>> run = execute(code, {"x": np.array([1.0, 2.0, 3.0])})
    >>> run.outputs["y"].tolist(), run.flops
    ([1.0, 4.0, 9.0], 3)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, ShapeError
from ..graph.fp16 import extreme
from ..graph.registry import get_op
from .ir import (
    DTYPES,
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
)

__all__ = ["Execution", "execute"]


@dataclass
class Execution:
    """What one run of a code did: every buffer's final values, the outputs among them,
    the FLOPs executed, and (``trace=True``) the distinct cells read and written per
    buffer (flat indices; an accumulating store both reads and writes its cell)."""

    buffers: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    flops: int = 0
    reads: dict[str, set] = field(default_factory=lambda: defaultdict(set))
    writes: dict[str, set] = field(default_factory=lambda: defaultdict(set))
    opaque: bool = False


def _fp16(value) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.float16(value))


class _Machine:
    def __init__(self, code: Code, feeds, trace: bool):
        self.code = code
        self.trace = trace
        self.env: dict[str, int] = {}
        self.locals: dict[str, tuple[str, float]] = {}
        self.bufs: dict[str, np.ndarray] = {}
        for b in code.buffers:
            dtype = DTYPES[b.dtype]
            if b.kind == "input":
                if b.name not in feeds:
                    raise InputError(f"{code.name}: input buffer {b.name!r} is not fed")
                value = np.asarray(feeds[b.name])
                if value.shape != b.shape:
                    raise InputError(
                        f"{code.name}: input {b.name!r} has shape {value.shape}, the buffer "
                        f"{b.shape}"
                    )
                with np.errstate(over="ignore", invalid="ignore"):
                    self.bufs[b.name] = value.astype(dtype)
            else:
                self.bufs[b.name] = np.full(b.shape, np.nan, dtype)
        self.run = Execution(self.bufs, {b.name: self.bufs[b.name] for b in code.outputs})

    # -- scalars ------------------------------------------------------------------------

    def value(self, s) -> float:
        if isinstance(s, Const):
            return _fp16(s.value) if s.held else float(s.value)
        if isinstance(s, Call):
            shapes = s.shapes or ((),) * len(s.args)
            args = [np.full(sh, self.value(a), np.float16) for a, sh in zip(s.args, shapes)]
            self.run.flops += s.flops
            with np.errstate(all="ignore"):
                out = get_op(s.op).emulate(args, dict(s.attrs), None)
            return float(np.asarray(out).reshape(()))
        if isinstance(s, Get):
            cell = self._cell(s.node, s.index)
            if self.trace:
                self.run.reads[s.node].add(self._flat(s.node, cell))
            return float(self.bufs[s.node][cell])
        if isinstance(s, GetLocal):
            return self._local(s.name)[1]
        if isinstance(s, InRange):
            cell = [a.evaluate(self.env) for a in s.index]
            return 1.0 if all(0 <= c < n for c, n in zip(cell, s.shape)) else 0.0
        if isinstance(s, Op):
            spec = s.spec
            if spec.cond is Cond.FIRST:
                args = (self.value(s.args[0]), 0.0)
            elif spec.cond is Cond.SECOND:
                args = (0.0, self.value(s.args[1]))
            else:
                args = tuple(self.value(a) for a in s.args)
            self.run.flops += spec.flops
            with np.errstate(all="ignore"):
                return _fp16(spec.fn(*(np.float64(a) for a in args)))
        if isinstance(s, Where):
            taken, skipped = (s.then, s.other) if self.value(s.cond) != 0 else (s.other, s.then)
            self._hoisted(skipped)
            return self.value(taken)
        if isinstance(s, (And, Or)):
            left = self.value(s.a) != 0
            if left == isinstance(s, Or):  # decided: the right operand is not evaluated
                self._hoisted(s.b)
                return 1.0 if left else 0.0
            return 1.0 if self.value(s.b) != 0 else 0.0
        if isinstance(s, LocalScope):
            saved = self.locals.get(s.name)
            self.locals[s.name] = (s.dtype, self._round(s.init, s.dtype))
            self.body(s.body)
            result = self.locals[s.name][1]
            self._restore(s.name, saved)
            return result
        raise ShapeError(f"{self.code.name}: {type(s).__name__} is not a scalar expression")

    def _hoisted(self, s) -> None:
        """Run the scope bodies of an operand that is not evaluated: renderers hoist
        them, so they execute anyway (a discarded projection operand is never
        rendered, its scopes included)."""
        if isinstance(s, LocalScope):
            self.value(s)
        elif isinstance(s, Call):
            for a in s.args:
                self._hoisted(a)
        elif isinstance(s, Op):
            cond = s.spec.cond
            args = (
                s.args[:1] if cond is Cond.FIRST else s.args[1:] if cond is Cond.SECOND else s.args
            )
            for a in args:
                self._hoisted(a)
        elif isinstance(s, Where):
            for a in (s.cond, s.then, s.other):
                self._hoisted(a)
        elif isinstance(s, (And, Or)):
            self._hoisted(s.a)
            self._hoisted(s.b)

    # -- statements ---------------------------------------------------------------------

    def body(self, stmts) -> None:
        for st in stmts:
            self.statement(st)

    def statement(self, st) -> None:
        if isinstance(st, For):
            saved = self.env.get(st.index)
            for v in range(st.lo, st.hi + 1):
                self.env[st.index] = v
                self.body(st.body)
            if saved is None:
                self.env.pop(st.index, None)
            else:
                self.env[st.index] = saved
        elif isinstance(st, Set):
            cell = self._cell(st.node, st.index)
            buf = self.bufs[st.node]
            new = self.value(st.value)
            if st.accumulate is not None:
                if self.trace:
                    self.run.reads[st.node].add(self._flat(st.node, cell))
                new = self._accumulate(st.accumulate, float(buf[cell]), new)
            with np.errstate(over="ignore", invalid="ignore"):
                buf[cell] = new
            if self.trace:
                self.run.writes[st.node].add(self._flat(st.node, cell))
        elif isinstance(st, Zero):
            self.bufs[st.node][...] = 0
            if self.trace:
                self.run.writes[st.node].update(range(self.bufs[st.node].size))
        elif isinstance(st, If):
            if self.value(st.cond) != 0:
                self.body(st.body)
        elif isinstance(st, DeclareLocal):
            self.locals[st.name] = (st.dtype, self._round(st.init, st.dtype))
        elif isinstance(st, SetLocal):
            dtype, old = self._local(st.name)
            new = self.value(st.value)
            if st.accumulate is not None:
                new = self._accumulate(st.accumulate, old, new)
            self.locals[st.name] = (dtype, self._round(new, dtype))
        elif isinstance(st, Opaque):
            self._opaque(st)
        else:
            raise ShapeError(f"{self.code.name}: {type(st).__name__} is not a statement")

    def _opaque(self, st: Opaque) -> None:
        results = st.fn(*(self.bufs[n] for n in st.inputs))
        results = (results,) if len(st.outputs) == 1 else tuple(results)
        for name, value in zip(st.outputs, results):
            with np.errstate(over="ignore", invalid="ignore"):
                self.bufs[name][...] = np.asarray(value).reshape(self.bufs[name].shape)
            if self.trace:
                self.run.writes[name].update(range(self.bufs[name].size))
        if self.trace:
            for name in st.inputs:
                self.run.reads[name].update(range(self.bufs[name].size))
        self.run.opaque = True

    # -- helpers ------------------------------------------------------------------------

    def _accumulate(self, op: str, old: float, new: float) -> float:
        spec = SCALAR_OPS[op]
        self.run.flops += spec.flops
        if op in ("max", "min"):  # a reduction's step: the order-free rule of amax / amin
            return float(extreme(np.array([old, new]), 0, largest=op == "max"))
        with np.errstate(all="ignore"):
            return float(spec.fn(np.float64(old), np.float64(new)))

    @staticmethod
    def _round(value: float, dtype: str) -> float:
        with np.errstate(over="ignore", invalid="ignore"):
            return float(DTYPES[dtype](value))

    def _local(self, name: str) -> tuple[str, float]:
        if name not in self.locals:
            raise ShapeError(f"{self.code.name}: local {name!r} is read before it is declared")
        return self.locals[name]

    def _restore(self, name: str, saved) -> None:
        if saved is None:
            self.locals.pop(name, None)
        else:
            self.locals[name] = saved

    def _cell(self, node: str, index) -> tuple[int, ...]:
        shape = self.bufs[node].shape
        try:
            cell = tuple(a.evaluate(self.env) for a in index)
        except KeyError as err:
            raise ShapeError(
                f"{self.code.name}: {node}[...] uses iterator {err.args[0]!r} outside its loop"
            ) from None
        if len(cell) != len(shape) or any(not 0 <= c < d for c, d in zip(cell, shape)):
            raise ShapeError(f"{self.code.name}: {node}{list(cell)} is outside its shape {shape}")
        return cell

    def _flat(self, node: str, cell) -> int:
        return int(np.ravel_multi_index(cell, self.bufs[node].shape))


def execute(code: Code, feeds: dict, *, trace: bool = False) -> Execution:
    """Run ``code`` on ``feeds`` (input buffer name -> array, cast to the buffer's
    dtype) and return what it did (:class:`Execution`).

    Raises :class:`~aneforge.errors.InputError` for a missing or misshapen input and
    :class:`~aneforge.errors.ShapeError` for a code that reads outside a buffer, an
    undeclared local or an iterator outside its loop.
    """
    machine = _Machine(code, feeds, trace)
    machine.body(code.body)
    return machine.run
