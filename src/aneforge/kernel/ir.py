"""The loop-nest IR: buffers, affine indices, scalar expressions and statements.

A :class:`Code` is one kernel: its :class:`Buffer` s (the region's inputs, outputs and
the intermediates it materializes) and a body of statements. Everything is an immutable
dataclass, so codes hash, compare and print deterministically.

- Index expressions are affine: :class:`Affine` ``sum(c * i) + offset`` over loop
  iterators; :func:`fixed` and :func:`it` build the two simple ones, and ``+``, ``-``,
  ``*`` (by an integer) combine them.
- Scalars: :class:`Const`, :class:`Get` (a buffer cell), :class:`GetLocal`, :class:`Op`
  (a unary, binary or ternary op of :data:`SCALAR_OPS`), :class:`Call` (an elementwise
  op of the graph registry, through its record's fp16 kernel), :class:`InRange` (a guard
  on the iterators), :class:`Where`, the
  short-circuit :class:`And` / :class:`Or`, and :class:`LocalScope` (a scalar computed by
  a statement body, which the renderer hoists, so it always executes).
- Statements: :class:`For` (inclusive bounds, a :class:`LoopKind`), :class:`Set`
  (``accumulate=`` marks a read-modify-write), :class:`Zero` (a whole buffer),
  :class:`If` (a guarded body), :class:`DeclareLocal` / :class:`SetLocal`, and
  :class:`Opaque` (an op with no loop nest, run on whole buffers).

Numerics (the engine's; :mod:`aneforge.kernel.interpret` is the reference): every
scalar op computes in float64 and rounds once to fp16; a store rounds to its
destination's dtype, so a ``Set`` to an fp16 buffer rounds to fp16, and an accumulating
store adds in the destination's dtype: a contraction accumulates in a float32 local and
rounds once when stored, a narrow reduction accumulates in fp16.

Each scalar op has a conditionality class (:class:`Cond`): which operands a renderer
evaluates, read by both analyses (the upper bound charges what may run, the floor only
what must).

Example:
    >>> from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Set, it
    >>> x = Buffer("x", (4,), kind="input")
    >>> y = Buffer("y", (4,), kind="output")
    >>> i = it("i")
    >>> twice = Op("add", (Get("x", (i,)), Get("x", (i,))))
    >>> code = Code("double", (x, y), (For("i", 0, 3, (Set("y", (i,), twice),)),))
    >>> code.buffer("y").size
    4
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import ShapeError

__all__ = [
    "DTYPES",
    "SCALAR_OPS",
    "Affine",
    "And",
    "Buffer",
    "Call",
    "Code",
    "Cond",
    "Const",
    "DeclareLocal",
    "For",
    "Get",
    "GetLocal",
    "If",
    "InRange",
    "LocalScope",
    "LoopKind",
    "Op",
    "Opaque",
    "Or",
    "ScalarOp",
    "Set",
    "SetLocal",
    "Where",
    "Zero",
    "fixed",
    "it",
    "walk",
]

#: The storage types: the engine's fp16 and the wide accumulator's float32.
DTYPES = {"fp16": np.float16, "fp32": np.float32}


# ---- affine index expressions ------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """``sum(coeff * iterator) + offset``; ``terms`` sorted by iterator, no zero coeff.

    Example:
        >>> str(it("i") * 2 + it("j") - 1)
        '2*i + j - 1'
        >>> (it("i") * 2 + 3).evaluate({"i": 4})
        11
    """

    terms: tuple[tuple[str, int], ...] = ()
    offset: int = 0

    @staticmethod
    def of(coeffs: dict[str, int], offset: int = 0) -> Affine:
        """The expression with these coefficients (zeros dropped)."""
        terms = tuple(sorted((k, int(c)) for k, c in coeffs.items() if c))
        return Affine(terms, int(offset))

    @property
    def coeffs(self) -> dict[str, int]:
        return dict(self.terms)

    @property
    def is_fixed(self) -> bool:
        """No iterator: the same position at every iteration."""
        return not self.terms

    def evaluate(self, env: dict[str, int]) -> int:
        """The position under the iterator values ``env``."""
        return self.offset + sum(c * env[k] for k, c in self.terms)

    def _combine(self, other, sign: int) -> Affine:
        other = other if isinstance(other, Affine) else fixed(other)
        coeffs = self.coeffs
        for k, c in other.terms:
            coeffs[k] = coeffs.get(k, 0) + sign * c
        return Affine.of(coeffs, self.offset + sign * other.offset)

    def __add__(self, other) -> Affine:
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other) -> Affine:
        return self._combine(other, -1)

    def __mul__(self, factor: int) -> Affine:
        if isinstance(factor, bool) or not isinstance(factor, (int, np.integer)):
            raise ShapeError(f"Affine: an index scales by an integer only, got {factor!r}")
        return Affine.of({k: c * int(factor) for k, c in self.terms}, self.offset * int(factor))

    __rmul__ = __mul__

    def __str__(self) -> str:
        parts = [k if c == 1 else f"-{k}" if c == -1 else f"{c}*{k}" for k, c in self.terms]
        text = " + ".join(parts).replace("+ -", "- ")
        if not parts:
            return str(self.offset)
        if self.offset:
            text += f" + {self.offset}" if self.offset > 0 else f" - {-self.offset}"
        return text


def fixed(position: int) -> Affine:
    """The fixed index ``position``."""
    return Affine((), int(position))


def it(name: str) -> Affine:
    """The index of iterator ``name``."""
    return Affine(((name, 1),), 0)


# ---- scalar ops ----------------------------------------------------------------------------


class Cond(enum.Enum):
    """Which operands of a scalar op a renderer evaluates."""

    BOTH = "both operands"
    FIRST = "only the first"  # a projection onto its first operand
    SECOND = "only the second"  # a projection onto its second operand
    GATED_SECOND = "gated second"  # And / Or: the second only when the first does not decide
    SELECT = "condition plus one arm"  # Where


@dataclass(frozen=True)
class ScalarOp:
    """One scalar op: arity, FLOPs per evaluation, conditionality, float64 function."""

    name: str
    arity: int
    flops: int
    cond: Cond
    fn: Callable
    symbol: str = ""  # an infix symbol for the printer, "" for a call


def _cmp(fn):
    return lambda a, b: np.float64(fn(a, b))


def _ops() -> dict[str, ScalarOp]:
    table = [
        ScalarOp("neg", 1, 1, Cond.BOTH, np.negative),
        ScalarOp("abs", 1, 1, Cond.BOTH, np.abs),
        ScalarOp("exp", 1, 1, Cond.BOTH, np.exp),
        ScalarOp("log", 1, 1, Cond.BOTH, np.log),
        ScalarOp("sqrt", 1, 1, Cond.BOTH, np.sqrt),
        ScalarOp("rsqrt", 1, 1, Cond.BOTH, lambda x: 1.0 / np.sqrt(x)),
        ScalarOp("recip", 1, 1, Cond.BOTH, lambda x: 1.0 / x),
        ScalarOp("tanh", 1, 1, Cond.BOTH, np.tanh),
        ScalarOp("sigmoid", 1, 1, Cond.BOTH, lambda x: 1.0 / (1.0 + np.exp(-x))),
        ScalarOp("relu", 1, 1, Cond.BOTH, lambda x: np.maximum(x, 0.0)),
        ScalarOp("add", 2, 1, Cond.BOTH, np.add, "+"),
        ScalarOp("sub", 2, 1, Cond.BOTH, np.subtract, "-"),
        ScalarOp("mul", 2, 1, Cond.BOTH, np.multiply, "*"),
        ScalarOp("div", 2, 1, Cond.BOTH, np.divide, "/"),
        ScalarOp("max", 2, 1, Cond.BOTH, np.maximum),
        ScalarOp("min", 2, 1, Cond.BOTH, np.minimum),
        ScalarOp("pow", 2, 1, Cond.BOTH, np.power),
        ScalarOp("lt", 2, 1, Cond.BOTH, _cmp(np.less), "<"),
        ScalarOp("le", 2, 1, Cond.BOTH, _cmp(np.less_equal), "<="),
        ScalarOp("gt", 2, 1, Cond.BOTH, _cmp(np.greater), ">"),
        ScalarOp("ge", 2, 1, Cond.BOTH, _cmp(np.greater_equal), ">="),
        ScalarOp("eq", 2, 1, Cond.BOTH, _cmp(np.equal), "=="),
        ScalarOp("ne", 2, 1, Cond.BOTH, _cmp(np.not_equal), "!="),
        ScalarOp("arg1", 2, 0, Cond.FIRST, lambda a, b: a),
        ScalarOp("arg2", 2, 0, Cond.SECOND, lambda a, b: b),
        ScalarOp("fma", 3, 2, Cond.BOTH, lambda a, b, c: a * b + c),  # one rounding
        ScalarOp("fp16", 1, 0, Cond.BOTH, lambda x: x),  # rounds a float32 value to fp16
    ]
    return {op.name: op for op in table}


#: The scalar ops by name.
SCALAR_OPS: dict[str, ScalarOp] = _ops()


# ---- buffers -------------------------------------------------------------------------------

BUFFER_KINDS = ("input", "output", "temp")


@dataclass(frozen=True)
class Buffer:
    """A node's storage: name, shape, dtype (``fp16`` or ``fp32``) and kind (``input``,
    ``output`` or ``temp``, a materialized intermediate)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "fp16"
    kind: str = "temp"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype not in DTYPES:
            raise ShapeError(f"Buffer {self.name}: dtype {self.dtype!r} is not one of fp16, fp32")
        if self.kind not in BUFFER_KINDS:
            raise ShapeError(f"Buffer {self.name}: kind {self.kind!r} is not one of {BUFFER_KINDS}")
        if any(d < 1 for d in self.shape):
            raise ShapeError(f"Buffer {self.name}: every extent must be >= 1, got {self.shape}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return np.dtype(DTYPES[self.dtype]).itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize


# ---- scalars -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    """A constant: held in fp16 (rounded where it is used, as the engine holds data
    constants) or, with ``held=False``, exact (a count the code divides by)."""

    value: float
    held: bool = True


@dataclass(frozen=True)
class Get:
    """The cell ``index`` of buffer ``node``."""

    node: str
    index: tuple[Affine, ...]


@dataclass(frozen=True)
class GetLocal:
    """The current value of a local."""

    name: str


@dataclass(frozen=True)
class Op:
    """A scalar op of :data:`SCALAR_OPS` applied to ``args``."""

    op: str
    args: tuple

    def __post_init__(self):
        spec = SCALAR_OPS.get(self.op)
        if spec is None:
            raise ShapeError(f"Op: unknown scalar op {self.op!r}; known: {sorted(SCALAR_OPS)}")
        if len(self.args) != spec.arity:
            raise ShapeError(f"Op {self.op}: takes {spec.arity} operand(s), got {len(self.args)}")

    @property
    def spec(self) -> ScalarOp:
        return SCALAR_OPS[self.op]


@dataclass(frozen=True)
class InRange:
    """1.0 where every entry of ``index`` lies in ``[0, shape[d])``, else 0.0: a guard
    on the iterators (integer compares, no FLOPs), such as a padded window's."""

    index: tuple[Affine, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Call:
    """An elementwise op of the graph registry on one cell of each operand: its
    record's fp16 kernel (``attrs`` its attributes, as sorted ``(key, value)`` pairs),
    so its value is the emulator's bit for bit; it counts one FLOP per evaluation."""

    op: str
    args: tuple
    attrs: tuple = ()
    shapes: tuple = ()  # the shape each operand is handed to the kernel in (() for 0-d)

    #: FLOPs per evaluation: one elementwise op
    flops = 1


@dataclass(frozen=True)
class Where:
    """``then if cond != 0 else other``: the condition and one arm run."""

    cond: object
    then: object
    other: object


@dataclass(frozen=True)
class And:
    """``a != 0 and b != 0`` as 1.0 / 0.0; ``b`` runs only when ``a`` is nonzero."""

    a: object
    b: object


@dataclass(frozen=True)
class Or:
    """``a != 0 or b != 0`` as 1.0 / 0.0; ``b`` runs only when ``a`` is zero."""

    a: object
    b: object


@dataclass(frozen=True)
class LocalScope:
    """A scalar computed by ``body`` into local ``name`` (declared by the scope, from
    ``init``), whose value the expression takes. Renderers hoist the body out of the
    expression, so it always executes, even under a ``Where`` arm."""

    name: str
    body: tuple
    dtype: str = "fp16"
    init: float = 0.0


Scalar = Const | Get | GetLocal | InRange | Op | Call | Where | And | Or | LocalScope

# ---- statements ----------------------------------------------------------------------------


class LoopKind(str, enum.Enum):
    """How a loop's iterations may run; the numerics do not depend on it."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class For:
    """``for index in lo..hi`` (inclusive); a loop with ``hi < lo`` never runs."""

    index: str
    lo: int
    hi: int
    body: tuple
    kind: LoopKind = LoopKind.SERIAL

    @property
    def trips(self) -> int:
        return max(0, self.hi - self.lo + 1)


@dataclass(frozen=True)
class Set:
    """``node[index] = value``, or with ``accumulate`` (a binary op name such as
    ``"add"`` or ``"max"``) ``node[index] = accumulate(node[index], value)``, computed
    in the buffer's dtype."""

    node: str
    index: tuple[Affine, ...]
    value: object
    accumulate: str | None = None


@dataclass(frozen=True)
class Zero:
    """Every cell of ``node`` set to 0."""

    node: str


@dataclass(frozen=True)
class If:
    """``body`` only where ``cond`` is nonzero (a guarded body)."""

    cond: object
    body: tuple


@dataclass(frozen=True)
class DeclareLocal:
    """A scalar local of ``dtype``, from ``init``."""

    name: str
    dtype: str = "fp16"
    init: float = 0.0


@dataclass(frozen=True)
class SetLocal:
    """``name = value`` or, with ``accumulate``, ``name = accumulate(name, value)`` in
    the local's dtype."""

    name: str
    value: object
    accumulate: str | None = None


@dataclass(frozen=True)
class Opaque:
    """An op with no loop nest: ``fn(*input arrays) -> output arrays`` (fp16) run on
    whole buffers, FLOPs and bytes unknown to the analyses (``reason`` says why)."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    fn: Callable = field(compare=False, hash=False)
    reason: str = "no loop-nest rule"


Stmt = For | Set | Zero | If | DeclareLocal | SetLocal | Opaque


@dataclass(frozen=True)
class Code:
    """One kernel: its buffers and its body."""

    name: str
    buffers: tuple[Buffer, ...]
    body: tuple

    def __post_init__(self):
        names = [b.name for b in self.buffers]
        if len(set(names)) != len(names):
            raise ShapeError(f"Code {self.name}: buffer names repeat: {names}")

    def buffer(self, name: str) -> Buffer:
        """The buffer named ``name``."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise ShapeError(f"Code {self.name}: no buffer {name!r}")

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.kind == "input")

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.kind == "output")


def children(item) -> Iterator:
    """The statements and scalars directly inside one IR item."""
    if isinstance(item, (For, If)):
        if isinstance(item, If):
            yield item.cond
        yield from item.body
    elif isinstance(item, (Set, SetLocal)):
        yield item.value
    elif isinstance(item, (Op, Call)):
        yield from item.args
    elif isinstance(item, Where):
        yield from (item.cond, item.then, item.other)
    elif isinstance(item, (And, Or)):
        yield from (item.a, item.b)
    elif isinstance(item, LocalScope):
        yield from item.body


def walk(items) -> Iterator:
    """Every statement and scalar of ``items`` (a body or one item), pre-order."""
    stack = list(reversed(items)) if isinstance(items, tuple) else [items]
    while stack:
        item = stack.pop()
        yield item
        stack.extend(reversed(list(children(item))))
