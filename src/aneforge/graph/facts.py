"""The typed facts an op record carries besides its shape rule and kernels.

Every fact about an op that another layer reads is a field of its
:class:`~aneforge.graph.registry.OpDef`, of one of the types below, declared where the
op is declared (its family module, through the family's factory). The registry refuses a
record that leaves a field unset (:data:`UNSET`): "no such fact" is said on purpose,
with ``None``, :attr:`Role.NONE` or :data:`EVERY_FAMILY`, never by leaving an entry out
of a table somewhere else.

- :class:`Flag`: the algebraic and structural facts (commutative, elementwise, view...),
  an enum, so a typo fails; ``OpDef.flags`` is a :class:`FlagSet`, whose ``in`` refuses
  a string that names no flag.
- sign rules (``OpDef.sign``): ``rule(node, nonneg) -> bool``, whether every value of
  ``node`` is >= 0 (or NaN) by construction, given the same fact of each source
  (``nonneg``, in source order). Read by :func:`aneforge.precision_risk`.
- :class:`NarrowSum` (``OpDef.narrow``): the op's kernel sums in the narrow fp16
  accumulator (:func:`~aneforge.graph.fp16.narrow_sum`), over how many terms, of which
  sign, and the fix. Read by the precision and divergence analyses and the chips'
  reduction route.
- :class:`Role` (``OpDef.role``): matmul-like or conv-like contractions, whose
  contraction length or kernel width the family limits (preflight), and whose peak the
  cost model prices.
- :class:`WeightOperand` (``OpDef.weight_operand``): which source is the streamed
  weight and its output-channel axis (compression, the cost model's GEMV swap).
- ``OpDef.min_family`` and ``OpDef.below_floor``: the lowest capability family that
  runs the op natively, and the :class:`Decomposition` compile applies below it.
- ``OpDef.route``: a bridge op's fused :class:`Decomposition` (the alt that removes its
  graph cut) or the :class:`SingleRoute` reason it has none.
- :class:`Work` (``OpDef.work``): the bridge cost table's work scalar.
- ``OpDef.width_begin``: ``rule(in_shapes, attrs) -> int``, the last-axis begin of an op
  that reads through the crop-DMA (``slice``, ``input_view``); None for the others.
- ``OpDef.overflow_fix``: the op's own remedy for an fp16 overflow at it (a format string
  with ``{op}`` and ``{by}``), or None for the generic "scale the inputs down". Read by
  :func:`aneforge.range_analysis`.
- :class:`LoopNest` (``OpDef.nest``): how the op lowers to a loop nest (an elementwise
  map, a reduction, a contraction, an affine index map), or None: it lowers as opaque
  code. Read by :func:`aneforge.kernel.lower`.
- :class:`TiledReduction` (``OpDef.tiled``): a lowering that tiles the op's reduction
  into a fixed layout whose axes the compiler limits (``group_norm``'s compile cliff).
  Read by :func:`aneforge.precision_risk`.

Example:
    >>> from aneforge.graph.registry import get_op
    >>> from aneforge.graph.facts import Flag, Role
    >>> Flag.COMMUTATIVE in get_op("mul").flags, get_op("linear").role is Role.MATMUL
    (True, True)
    >>> get_op("sum").narrow_terms([(4, 300)], {"axes": (1,)})
    300
    >>> "comutative" in get_op("mul").flags
    Traceback (most recent call last):
    ...
    ValueError: 'comutative' is not a valid Flag
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

Shapes = list[tuple[int, ...]]
#: ``rule(node, nonneg) -> bool``: every value >= 0 (or NaN), given the sources' facts.
SignRule = Callable[[Any, Sequence[bool]], bool]
#: ``rule(in_shapes, attrs) -> int``: the terms of one narrow sum.
TermsRule = Callable[[Shapes, dict[str, Any]], int]
#: ``rule(in_shapes, attrs) -> int``: the begin on the last axis of a crop-DMA read.
WidthRule = Callable[[Shapes, dict[str, Any]], int]
#: ``rule(out_index, in_shapes, out_shape, attrs) -> source index or None``: a movement's
#: index map; entries are integer-affine in the output's (``int``-like) index entries.
IndexRule = Callable[[Sequence[Any], Shapes, tuple[int, ...], dict[str, Any]], Any]
#: ``rule(in_shapes, attrs) -> ((label, length), ...)``: the lengths of a tiled layout.
AxesRule = Callable[[Shapes, dict[str, Any]], tuple[tuple[str, int], ...]]


class _Unset:
    """The default of every fact field: the registry refuses a record holding it."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


#: A fact left undeclared (refused by :func:`~aneforge.graph.registry.register`).
UNSET: Any = _Unset()

#: The lowest capability family with a MIL path: an op every such family runs natively.
EVERY_FAMILY = 2


class Flag(str, enum.Enum):
    """The algebraic and structural facts an op may have (``OpDef.flags``).

    A ``str`` enum (Python 3.10 has no ``enum.StrEnum``): ``Flag("view")`` looks a flag
    up by name and refuses a typo; ``str(flag)`` is its name.
    """

    def __str__(self) -> str:
        return self.value

    #: each output element comes from the same-index elements of the (broadcast) inputs
    ELEMENTWISE = "elementwise"
    UNARY = "unary"  # one input
    BINARY = "binary"  # two inputs
    COMMUTATIVE = "commutative"  # f(a, b) == f(b, a), bit for bit
    ASSOCIATIVE = "associative"  # f(f(a, b), c) == f(a, f(b, c)) in exact arithmetic
    ODD = "odd"  # f(-x) == -f(x)
    #: moves values without arithmetic (every output is one of the input's values)
    MOVEMENT = "movement"
    #: relabels the shape only: the engine reads the same buffer (no pass of its own)
    VIEW = "view"
    #: a contraction through the wide (float32) accumulator (:class:`Role` says which)
    CONTRACTION = "contraction"
    NORM = "norm"  # a normalization
    #: a per-element affine map the engine folds into the pass producing its input
    POINTWISE = "pointwise"
    REDUCTION = "reduction"  # reduces axes of its input
    INDEX_OUTPUT = "index_output"  # its output holds indices, carried as fp16 integers
    DATA_DEPENDENT = "data_dependent"  # its control flow depends on the values
    #: multiplies: a result can fall below its operands' magnitudes (an underflow; a
    #: difference that comes out 0 is an exact cancellation instead)
    MULTIPLIES = "multiplies"
    #: produces unit-range values, whose complement ``1 - f(x)`` cancels where f saturates
    SATURATES = "saturates"
    #: a statistic of its input: ``x - stat(x)`` is a benign centering, not a cancellation
    STATISTIC = "statistic"
    #: ``f(c * x) == f(x)`` for every ``c > 0`` in exact arithmetic (eps aside): scaling
    #: its input by a power of two removes an overflow inside it and changes nothing else
    SCALE_INVARIANT = "scale_invariant"
    #: its result is a float32 accumulator's value that the output stage rounds once (a
    #: narrow sum, cumsum's matmul): a policy that keeps wide values keeps it unrounded
    WIDE_RESULT = "wide_result"
    #: every value is +0.0 or 1.0, whatever its inputs (a comparison's truth value)
    PREDICATE = "predicate"
    #: its output bits do not depend on the sign of any zero among its inputs' values
    #: (``-0`` and ``+0`` read alike: comparisons, softmax's ``exp(x - max)``)
    ZERO_SIGN_BLIND = "zero_sign_blind"


class FlagSet(frozenset):
    """A frozen set of :class:`Flag`; ``name in flags`` refuses a string naming none.

    Example:
        >>> flags = FlagSet({Flag.VIEW})
        >>> "view" in flags, Flag.MOVEMENT in flags
        (True, False)
    """

    def __contains__(self, item) -> bool:
        return super().__contains__(Flag(item))


def flag_set(op: str, flags) -> FlagSet:
    """``flags`` as a :class:`FlagSet`; anything but a :class:`Flag` is a bug of the
    declaring module (a string would let a typo through)."""
    items = tuple(flags)
    bad = [f for f in items if not isinstance(f, Flag)]
    if bad:
        raise RuntimeError(f"op '{op}': flags must be Flag members, got {bad!r}")
    return FlagSet(items)


# ---- sign rules -------------------------------------------------------------------------


def signed(node, nonneg) -> bool:
    """Sign rule of an op with no claim: its values may have either sign."""
    return False


def nonnegative(node, nonneg) -> bool:
    """Sign rule of an op whose every value is >= 0 (or NaN) whatever its inputs."""
    return True


def all_sources(node, nonneg) -> bool:
    """Non-negative when every source is (add, div, minimum, a movement...)."""
    return all(nonneg)


def any_source(node, nonneg) -> bool:
    """Non-negative when some source is (maximum)."""
    return any(nonneg)


def first_source(node, nonneg) -> bool:
    """Non-negative when the first source is (sums, pools, a slice at runtime offsets)."""
    return bool(nonneg[0])


# ---- narrow sums ------------------------------------------------------------------------


class TermSign(enum.Enum):
    """The sign of the terms a narrow sum adds."""

    #: always one sign (exponentials, squares)
    SAME = "same"
    #: the input's own values: one sign when the input is non-negative (sum, mean, pools)
    OF_INPUT = "of_input"
    #: possibly signed (products of signed features)
    MIXED = "mixed"


@dataclass(frozen=True)
class NarrowSum:
    """The narrow fp16 sum inside an op's kernel (the one that takes a chip's reduction
    route): ``terms(in_shapes, attrs)``, the terms' :class:`TermSign`, and ``fix``, how
    to route it through the wide accumulator instead (one sentence for reports)."""

    terms: TermsRule
    sign: TermSign
    fix: str


#: The fix of a long softmax sum (softmax's, sdpa's).
SOFTMAX_FIX = (
    "decompose it as e = exp(x - amax(x)); e / (e @ ones) (wide accumulator), or compile "
    "for a target whose split route keeps the sum short"
)
#: The fix of a narrow window or channel sum (avg_pool, cost_volume).
WINDOW_SUM_FIX = "express the window or channel sum as a matmul or convolution (wide accumulator)"

#: The overflow fix of a sum (sum, mean, cumsum, avg_pool): ``OpDef.overflow_fix``.
SUM_OVERFLOW_FIX = "sum with the wide accumulator (af.matmul against ones), or scale down{by}"
#: The overflow fix of an op whose internal steps see its logits (softmax, sdpa).
LOGITS_OVERFLOW_FIX = "scale {op}'s logits down{by} so its steps stay finite"


#: The kinds of :class:`LoopNest`.
NEST_KINDS = ("elementwise", "reduce", "window", "row", "contract", "index")


@dataclass(frozen=True)
class LoopNest:
    """How an op lowers to a loop nest over its output (:func:`aneforge.kernel.lower`).

    - ``"elementwise"``: each output cell is the record's fp16 kernel applied to one cell
      of each (broadcast) source; with ``per_channel``, the sources after the first are
      per-channel vectors read at the output's axis-1 index (inference batch_norm).
    - ``"reduce"``: the reduced axes' cells combined in C order by ``combine`` from
      ``init`` in an fp16 local (``"add"``: the narrow sum from +0; ``"max"``,
      ``"min"``), then ``finish`` (``"mean"``: divided by the count, rounded once).
    - ``"window"``: a pool: each output cell combines its window's cells (kh outer, kw
      inner) like ``"reduce"``, cells outside the input reading ``init`` (``-inf`` for
      max, +0 for the sum); ``finish="mean"`` divides by the window's size, or, for a
      padded average that does not count its padding, by the number of its cells inside
      the input (an exact count, once, in float64).
    - ``"row"``: a row op along ``attrs["axis"]`` (and the axes after it for the layer
      and RMS norms): the row's statistics, then each cell from them, every step
      rounded to fp16 as the record's kernel does; ``form`` says which: ``"softmax"``
      (the max, the narrow sum of ``exp(x - max)``), ``"layer_norm"`` (mean, mean of
      centred squares, ``rsqrt(var + eps)``), ``"rms_norm"``, ``"l2_norm"``, and
      ``"group_norm"`` (layer_norm's steps over each image's group of
      ``attrs["groups"]`` contiguous channel blocks, always materialized); the norms
      then apply their optional weight and bias.
    - ``"contract"``: fp16 products summed in a float32 local from +0 in ascending
      order of the contracted index, rounded once, then a bias added in fp16; ``form``
      says which: ``"matmul"`` (``a @ b``, NumPy batch broadcasting), ``"linear"``
      (``x @ w.T + b``) or ``"conv"`` (an NCHW / NCW correlation over ``(c, kh, kw)``,
      zeros outside the input, with stride, padding, dilation and groups).
    - ``"index"``: a movement: ``index(out_index, in_shapes, out_shape, attrs)`` gives
      the source cell of an output cell, or None where the map is not affine. Then
      ``scatter(src_index, in_shapes, out_shape, attrs)``, where given, gives the output
      cell of a source cell (a reshape merging axes): the op lowers materialized,
      writing each source cell; else it lowers as opaque.

    ``scalar``, where given (elementwise ops only), is the record's fp16 kernel at one
    cell as an expression over the loop-nest IR's scalar ops: ``scalar(attrs)`` returns
    a nested tuple ``(op, arg, ...)`` whose ``op`` names a scalar op
    (:data:`aneforge.kernel.ir.SCALAR_OPS`: each computes in float64 and rounds once
    to fp16) and whose ``arg`` is an operand's position, a nested tuple, or
    ``("const", value)`` (held in fp16). Compiled kernels evaluate the op by it; a test
    holds it to the record's kernel bit for bit. Unary ops need none (they run as a
    table of their kernel over every fp16 value).

    Example:
        >>> from aneforge.graph.registry import get_op
        >>> get_op("sum").nest.combine, get_op("cumsum").nest is None
        ('add', True)
    """

    kind: str
    combine: str | None = None
    init: float = 0.0
    finish: str | None = None
    index: IndexRule | None = None
    form: str | None = None
    per_channel: bool = False
    scatter: IndexRule | None = None
    scalar: Callable | None = None

    def __post_init__(self):
        if self.kind not in NEST_KINDS:
            raise ValueError(f"LoopNest: kind {self.kind!r} is not one of {NEST_KINDS}")


#: The loop nest of the elementwise families.
ELEMENTWISE_NEST = LoopNest("elementwise")


@dataclass(frozen=True)
class TiledReduction:
    """A lowering that reduces over a fixed tiled layout (``layout``, for reports) whose
    every axis the compiler keeps at most ``limit`` long: ``axes(in_shapes, attrs)`` gives
    the ``(label, length)`` of the layout's variable axes; past ``limit`` the op falls off
    a compile cliff, and ``fix`` (one sentence) says how to stay under it.

    Example:
        >>> from aneforge.graph.registry import get_op
        >>> tiled = get_op("group_norm").tiled
        >>> tiled.axes([(1, 64, 512, 512)], {"groups": 32}), tiled.limit
        ((('C/groups', 2), ('H*W', 262144)), 65536)
    """

    axes: AxesRule
    limit: int
    layout: str
    fix: str

    def longest(self, in_shapes, attrs) -> int:
        """The longest variable axis of the layout for these shapes."""
        return max(int(n) for _, n in self.axes(list(in_shapes), attrs))


def prod(values) -> int:
    """The product of some integers (1 for none)."""
    return math.prod(int(v) for v in values)


# ---- contraction roles, weights -----------------------------------------------------------


class Role(enum.Enum):
    """What kind of contraction an op is, for the family limits and the cost model."""

    #: not a contraction
    NONE = "none"
    #: contracts its first operand's last axis (matmul, bmm, linear): the contraction
    #: length is limited per family, and it runs at the matmul fraction of the peak
    MATMUL = "matmul"
    #: slides a weight kernel (conv, conv_transpose): the kernel width, the weight's last
    #: axis, is limited per family
    CONV = "conv"


class WeightOperand(NamedTuple):
    """The source a contraction streams as its weight and its output-channel axis (the
    axis per-channel compression scales along)."""

    index: int
    channel_axis: int


# ---- decompositions and routes --------------------------------------------------------------


@dataclass(frozen=True)
class Decomposition:
    """A replacement of a node by other ops: ``build(node) -> Tensor`` of the same shape.

    ``name`` says what it is in a few words; ``exactness`` is the class of
    :data:`aneforge.graph.rewrite.EXACTNESS` it is measured to meet (with the measured
    ``bound`` for 'bounded'), and ``evidence`` how it was measured.
    """

    build: Callable[[Any], Any]
    name: str
    exactness: str
    evidence: str
    bound: float | None = None


@dataclass(frozen=True)
class SingleRoute:
    """Why an op has no fused alternative (``OpDef.route`` of a single-route op)."""

    reason: str


#: The route of every fused op: it is its own lowering, with no cut to remove.
ONLY_LOWERING = SingleRoute("only lowering")


# ---- the bridge cost table's work scalar -------------------------------------------------


def _input_elements(in_shapes, out_shape, attrs) -> float:
    return float(prod(in_shapes[0]))


def _key_elements(fields, elems):
    return elems


@dataclass(frozen=True)
class Work:
    """A monotone measure of a bridge op's size, by which its measured latencies are
    interpolated (:mod:`aneforge.cost.bridge`): ``of_node(in_shapes, out_shape, attrs)``
    for a node, ``of_key(fields, elems)`` for a measured key, from the key's
    ``name=value`` fields and the element count of its ``[shape]`` (None without one);
    ``of_key`` returns None for a key that carries no size."""

    of_node: Callable[[Shapes, tuple[int, ...], dict[str, Any]], float]
    of_key: Callable[[dict[str, float], float | None], float | None]


#: The default work scalar: the elements of the first input (keys: of their shape).
ELEMENTS = Work(_input_elements, _key_elements)

#: The fact fields of a record, each of which must be declared.
FACT_FIELDS = (
    "sign",
    "narrow",
    "role",
    "weight_operand",
    "min_family",
    "below_floor",
    "route",
    "work",
    "width_begin",
    "overflow_fix",
    "tiled",
    "nest",
)
