"""The op registry: every op is declared once, as one :class:`OpDef` record.

A record carries everything the rest of aneforge needs to know about an op: its kind,
its attribute schema, its shape rule, its fp16 emulator kernel, its float64 reference
kernel, its FLOP count, its value-range rule and the typed facts of
:mod:`aneforge.graph.facts` (flags, sign rule, narrow-sum terms, contraction role, weight
operand, family floor, route, work scalar, crop-DMA begin). The registry refuses
duplicate names and incomplete records: every fact is declared, "none" on purpose.

Example:
    >>> from aneforge.graph.registry import get_op
    >>> get_op("relu").kind
    'fused'
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..errors import AttributeValueError, PrecisionWarning, ShapeError
from .facts import (
    FACT_FIELDS,
    UNSET,
    Decomposition,
    Flag,
    FlagSet,
    LoopNest,
    NarrowSum,
    Role,
    SignRule,
    SingleRoute,
    TiledReduction,
    WeightOperand,
    WidthRule,
    Work,
    flag_set,
    nonnegative,
)
from .fp16 import FP16_MAX

# kind of an op: "source" (input / weight, no computation), "fused" (runs inside a
# fused engine program). Bridge ops arrive with the optimizer issue.
KINDS = ("source", "fused", "bridge")

#: How an op uses a float attribute (``Attr.fp16``): "held" as an fp16 constant (kernels
#: round it, ``Steps.const``: it must fit fp16, and turning into 0 or a coarse subnormal
#: is reported), "value" unrounded inside one rounded step (it must fit fp16, the rule of
#: a weight ``x * a``), "bound" only compared against values (``clip``: rounding it gives
#: the same results, so any finite value is accepted).
FP16_USES = ("held", "value", "bound")
#: What an attribute holds (``Attr.kind``): an integer, integers (an int or a sequence),
#: a float, a bool, one of a set of strings, or something an op checks its own way.
ATTR_KINDS = ("int", "ints", "float", "bool", "choice", "other")
#: The smallest normal fp16 value; below it a value keeps fewer than 11 bits.
FP16_MIN_NORMAL = 2.0**-14
#: A held subnormal attribute further than this (relative) from its value is reported:
#: it has fewer than 8 correct bits where a normal fp16 constant is within 2**-11.
SUBNORMAL_REPORT = 2.0**-8

ShapeRule = Callable[[list[tuple[int, ...]], dict[str, Any]], tuple[int, ...]]
Kernel = Callable[..., Any]
FlopRule = Callable[[list[tuple[int, ...]], tuple[int, ...], dict[str, Any]], int]
# (node, source intervals, env) -> Interval; see aneforge.graph.ranges
RangeRule = Callable[[Any, list[Any], Any], Any]
# (input shapes, output shape, attrs) -> elements read of each source
ReadsRule = Callable[[list[tuple[int, ...]], tuple[int, ...], dict[str, Any]], Any]
#: How an op uses an integer operand (``OpDef.int_inputs``): "index" (its values pick
#: elements of the other operands) or "value" (its values are converted to fp16).
INT_USES = ("index", "value")


def no_flops(in_shapes, out_shape, attrs) -> int:
    """FLOP rule of ops the cost model treats as bytes-bound (everything but contractions)."""
    return 0


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its default and a check that normalizes the given value.

    ``check(value, op_name) -> value`` raises :class:`AttributeValueError` for bad input.
    ``required`` attributes have no default. ``fp16`` says how the op uses a float value
    (:data:`FP16_USES`) and ``underflow`` what happens when a held value becomes 0 in
    fp16 (the consequence the build-time warning names). ``kind`` names the value's
    type for tools and tests (:data:`ATTR_KINDS`); the check alone decides what passes.
    ``label`` is the name messages give the value: the public function's argument that
    sets it (NumPy's ``axis`` for the reductions' ``axes``, PyTorch's ``padding`` for
    ``pad``...), which the check names too; empty means the key (see :func:`arg_name`).
    """

    check: Callable[[Any, str], Any]
    default: Any = None
    required: bool = False
    fp16: str = "held"
    underflow: str = ""
    kind: str = "other"
    label: str = ""


class HeldRounding(NamedTuple):
    """A held float attribute that fp16 turns into 0 or a coarse subnormal."""

    name: str
    value: float
    held: float
    detail: str
    fix: str

    @property
    def message(self) -> str:
        """What the build-time warning says: the detail, then the fix."""
        return f"{self.detail}; {self.fix}"


@dataclass(frozen=True)
class OpDef:
    """The single record of one op.

    Attributes:
        name: the op's name (``Tensor.op``).
        kind: one of :data:`KINDS`.
        arity: number of tensor inputs, or ``None`` for a variable count, between
            ``min_arity`` and ``max_arity`` (None: no upper bound).
        attrs: the attribute schema, name -> :class:`Attr`.
        shape: shape rule ``(input_shapes, attrs) -> output_shape``; raises
            :class:`~aneforge.errors.ShapeError` on shapes it cannot combine.
        emulate: fp16 kernel ``(inputs, attrs, arith) -> fp16 array``; ``arith`` is the
            arithmetic policy of the executor calling it (an
            :class:`~aneforge.graph.arith.Arith`: its matmul backend, reduction route
            and wide mode; a bare matmul backend or None is taken as the generic one).
        exact: float64 kernel ``(inputs, attrs) -> float64 array`` (the true answer).
        flops: FLOP rule ``(input_shapes, output_shape, attrs) -> int``.
        doc: one-line description used in generated docstrings.
        flags: algebraic and structural facts, :class:`~aneforge.graph.facts.Flag`
            members (``COMMUTATIVE``, ``ELEMENTWISE``, ``VIEW``...).
        range: value-range rule ``(node, source intervals, env) -> Interval`` holding
            every value the emulator can produce (:mod:`aneforge.graph.ranges`).
        sign: sign rule ``(node, sources non-negative) -> bool``: every value >= 0.
        narrow: the kernel's narrow fp16 sum (:class:`~aneforge.graph.facts.NarrowSum`),
            or None when it has none (see :meth:`narrow_terms`).
        role: the contraction role (:class:`~aneforge.graph.facts.Role`).
        weight_operand: ``(source index, output-channel axis)`` of the streamed weight,
            or None.
        min_family: the lowest capability family that runs the op natively.
        below_floor: the decomposition compile applies below ``min_family``, or None.
        route: a bridge op's fused alternative (a
            :class:`~aneforge.graph.facts.Decomposition`) or why it has none (a
            :class:`~aneforge.graph.facts.SingleRoute`); ``ONLY_LOWERING`` for fused ops.
        work: the bridge cost table's work scalar (:class:`~aneforge.graph.facts.Work`),
            None for fused ops.
        width_begin: ``(in_shapes, attrs) -> int``, the last-axis begin of a read through
            the crop-DMA, or None for an op that does not use it.
        overflow_fix: the op's own fix for an fp16 overflow at it, a format string with
            ``{op}`` (its name) and ``{by}`` (" by <factor> or less", or ""), or None for
            the generic one.
        tiled: the :class:`~aneforge.graph.facts.TiledReduction` of a lowering with a
            compile cliff, or None.
        nest: the op's :class:`~aneforge.graph.facts.LoopNest`, or None: the kernel
            layer lowers it as opaque code.
        int_inputs: the source positions that take an integer input (and only one), each
            ``"index"`` (its values pick elements, as embedding's ids: the output's values
            are those of the other sources) or ``"value"`` (its values are converted, as
            by int_to_fp16); every other position takes fp16 (:data:`INT_USES`).
        reads: the byte rule's reads ``(in_shapes, out_shape, attrs) -> elements read of
            each source``, for an op that reads only part of a source (a gather reads the
            rows it picks, not its whole table); None: every source is read whole.

    Every fact field defaults to :data:`~aneforge.graph.facts.UNSET`, which
    :func:`register` refuses: the family factories declare each one.
    """

    name: str
    kind: str
    arity: int | None
    attrs: dict[str, Attr]
    shape: ShapeRule
    emulate: Kernel
    exact: Kernel
    flops: FlopRule = no_flops
    doc: str = ""
    flags: FlagSet = field(default_factory=FlagSet)
    range: RangeRule | None = None
    min_arity: int = 1
    max_arity: int | None = None
    sign: SignRule = UNSET
    narrow: NarrowSum | None = UNSET
    role: Role = UNSET
    weight_operand: WeightOperand | None = UNSET
    min_family: int = UNSET
    below_floor: Decomposition | None = UNSET
    route: Decomposition | SingleRoute = UNSET
    work: Work | None = UNSET
    width_begin: WidthRule | None = UNSET
    overflow_fix: str | None = UNSET
    tiled: TiledReduction | None = UNSET
    nest: LoopNest | None = UNSET
    int_inputs: dict[int, str] = field(default_factory=dict)
    reads: ReadsRule | None = None

    def __post_init__(self):
        object.__setattr__(self, "flags", flag_set(self.name, self.flags))

    def read_elements(self, in_shapes, out_shape, attrs) -> tuple[int, ...]:
        """Elements the op reads of each source: its ``reads`` rule, else every source
        whole.

        Example:
            >>> get_op("embedding").read_elements([(1000, 8), (2, 5)], (2, 5, 8), {})
            (80, 10)
            >>> get_op("add").read_elements([(2, 3), (3,)], (2, 3), {})
            (6, 3)
        """
        if self.reads is not None:
            return tuple(int(n) for n in self.reads(list(in_shapes), tuple(out_shape), attrs))
        return tuple(int(np.prod(s, dtype=np.int64)) for s in in_shapes)

    def narrow_terms(self, in_shapes, attrs) -> int | None:
        """How many terms the kernel's narrow fp16 sum adds (None: it has none).

        Example:
            >>> get_op("softmax").narrow_terms([(2, 7)], {"axis": -1})
            7
            >>> get_op("cumsum").narrow_terms([(2, 7)], {}) is None  # wide accumulator
            True
        """
        if self.narrow is None:
            return None
        return int(self.narrow.terms(list(in_shapes), attrs))

    @property
    def always_nonnegative(self) -> bool:
        """Whether every value is >= 0 (or NaN) whatever the inputs (relu, exp, ...)."""
        return self.sign is nonnegative

    def check_arity(self, count: int) -> None:
        """Refuse ``count`` tensor inputs unless the op takes that many.

        Example:
            >>> get_op("conv").check_arity(1)
            Traceback (most recent call last):
            ...
            aneforge.errors.ShapeError: conv: takes 2 to 3 input(s), got 1
        """
        lo, hi = (
            (self.arity, self.arity) if self.arity is not None else (self.min_arity, self.max_arity)
        )
        if count >= lo and (hi is None or count <= hi):
            return
        want = str(lo) if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        raise ShapeError(f"{self.name}: takes {want} input(s), got {count}")

    def normalize_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Validate ``given`` against the schema and fill in defaults.

        Every op's attributes pass the same rules here: an attribute left out takes its
        default; an explicit ``None`` is accepted only where None is the default (it
        means something documented there: "all axes", "no bound"...) and refused
        elsewhere, never quietly read as the default; each value passes its check
        (integers are ``int``/``np.integer``, never bool; numbers never arrays); every
        float must fit fp16 (the rule weights follow: the engine computes in fp16), and
        a held float that fp16 turns into 0 or a coarse subnormal is warned about once
        per node, naming its fp16 value and the consequence.
        """
        unknown = sorted(set(given) - set(self.attrs))
        if unknown:
            raise AttributeValueError(
                f"{self.name}: unknown attribute(s) {unknown}; "
                f"it takes {sorted(self.attrs) or 'none'}"
            )
        out = {}
        for key, spec in self.attrs.items():
            if key not in given:
                if spec.required:
                    raise AttributeValueError(f"{self.name}: attribute '{key}' is required")
                out[key] = spec.default
                continue
            value, label = given[key], spec.label or key
            if value is None:
                if spec.required:
                    named = f"attribute '{key}'" if label == key else label
                    raise AttributeValueError(f"{self.name}: {named} is required, got None")
                if spec.default is not None:
                    raise AttributeValueError(
                        f"{self.name}: {label}=None has no meaning here; leave it out for the "
                        f"default {label}={spec.default!r} or give a value"
                    )
                out[key] = None
                continue
            out[key] = _plain(self.name, label, spec.check(value, self.name))
            if isinstance(out[key], float) and spec.fp16 != "bound":
                check_fp16_range(out[key], self.name, label)
        losses = [r for r in held_roundings(self, out) if out[r.name] != self.attrs[r.name].default]
        if losses:
            warnings.warn(
                "; ".join(r.message for r in losses), PrecisionWarning, stacklevel=_user_level()
            )
        return out


def _plain(op: str, label: str, value):
    """``value`` if it is a plain constant (what node attributes hold: hashable, compared
    by value); a check letting anything else through is caught here."""
    plain = (type(None), bool, int, float, str)
    if isinstance(value, plain) or (
        isinstance(value, tuple) and all(isinstance(v, plain) for v in value)
    ):
        return value
    raise AttributeValueError(f"{op}: {label} must be a plain value, got {describe(value)}")


def check_fp16_range(value: float, op: str, name: str) -> float:
    """``value`` if it fits fp16 (it rounds to a finite value, |x| < 65520, the rule of
    weights), else an :class:`AttributeValueError` naming the op and attribute.

    Example:
        >>> check_fp16_range(65504.0, "sdpa", "scale")
        65504.0
        >>> try:
        ...     check_fp16_range(1e5, "sdpa", "scale")
        ... except AttributeValueError as err:
        ...     print(str(err)[:56])
        sdpa: scale=100000.0 is beyond the fp16 range (|x| <= 65
    """
    if np.isinf(_fp16(value)):
        raise AttributeValueError(
            f"{op}: {name}={value!r} is beyond the fp16 range (|x| <= {FP16_MAX:g}): the "
            "engine would hold it as inf; give a value within +-65504 (rescale the input "
            "or the output instead)"
        )
    return value


def _fp16(value: float) -> float:
    with np.errstate(over="ignore"):
        return float(np.float16(value))


def held_roundings(op: OpDef, attrs: dict[str, Any]) -> list[HeldRounding]:
    """The held float attributes of a node of ``op`` (normalized ``attrs``, defaults
    included) that fp16 turns into 0, or into a subnormal more than
    :data:`SUBNORMAL_REPORT` off: what the build-time warning and the precision report
    (:func:`aneforge.precision_risk`) name.

    Example:
        >>> (r,) = held_roundings(get_op("layer_norm"), {"eps": 1e-12})
        >>> r.name, r.held, r.message[:36]
        ('eps', 0.0, 'layer_norm: eps=1e-12 is 0 in fp16 (')
    """
    out = []
    for key, spec in op.attrs.items():
        value = attrs.get(key)
        if spec.fp16 != "held" or not isinstance(value, float) or value == 0.0:
            continue
        held, label = _fp16(value), spec.label or key
        if held == 0.0:
            why = spec.underflow or f"the op computes with 0 in place of {value!r}"
            detail = (
                f"{op.name}: {label}={value!r} is 0 in fp16 (the engine holds it as an fp16 "
                f"constant): {why}, where float64 does not"
            )
            fix = (
                f"give |{label}| >= 2**-24 (5.96e-08, the smallest fp16 subnormal, held exactly) "
                f"for a non-zero {label}"
            )
        elif abs(held) < FP16_MIN_NORMAL and abs(held - value) > SUBNORMAL_REPORT * abs(value):
            off = (held - value) / value
            detail = (
                f"{op.name}: {label}={value!r} is the fp16 subnormal {held:.6g} ({off:+.1%}; "
                "the engine holds it as an fp16 constant, and subnormals keep fewer bits)"
            )
            fix = (
                f"give a normal value (|{label}| >= 6.1e-05) or one fp16 holds exactly (a "
                "multiple of 2**-24) to compute with the value given"
            )
        else:
            continue
        out.append(HeldRounding(key, value, held, detail, fix))
    return out


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_level() -> int:
    """The ``warnings.warn`` stacklevel, for the function calling this, of the first
    frame outside the aneforge package: a warning points at the user's line."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1
    return level


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; a duplicate name, an unknown kind or an undeclared
    fact is a bug of the declaring module."""
    if op.name in _REGISTRY:
        raise RuntimeError(f"op '{op.name}' is registered twice")
    check_record(op)
    _REGISTRY[op.name] = op
    return op


def check_record(op: OpDef) -> None:
    """Refuse a record with an unknown kind, a missing hook or an undeclared fact."""
    if op.kind not in KINDS:
        raise RuntimeError(f"op '{op.name}' has unknown kind '{op.kind}'")
    missing = [f for f in FACT_FIELDS if getattr(op, f) is UNSET]
    missing += [] if callable(op.range) else ["range"]
    if missing:
        raise RuntimeError(
            f"op '{op.name}' leaves {', '.join(missing)} undeclared; declare each (None, "
            "Role.NONE, EVERY_FAMILY... say 'none' on purpose; the family factories of "
            "aneforge.graph.ops give them)"
        )
    if (op.role is not Role.NONE) != (Flag.CONTRACTION in op.flags):
        raise RuntimeError(f"op '{op.name}': a contraction role goes with Flag.CONTRACTION")
    bad = {k: v for k, v in dict(op.int_inputs).items() if v not in INT_USES or k < 0}
    if bad:
        raise RuntimeError(f"op '{op.name}': int_inputs {bad} must map positions to {INT_USES}")


def unregister(name: str) -> OpDef:
    """Remove op ``name`` from the registry and return its record (for tests that
    register an op of their own; the ops aneforge declares stay registered).

    Example:
        >>> from dataclasses import replace
        >>> with temporary_op(replace(get_op("relu"), name="my_relu")):
        ...     "my_relu" in all_ops()
        True
        >>> "my_relu" in all_ops()
        False
    """
    try:
        return _REGISTRY.pop(name)
    except KeyError:
        raise AttributeValueError(f"unknown op '{name}'") from None


@contextlib.contextmanager
def temporary_op(op: OpDef):
    """Within the block, ``op`` is registered (in place of the record of the same name,
    if there is one, keeping its position); afterwards the registry is as before. For
    tests: registry-walking tests see only aneforge's own ops."""
    check_record(op)
    before = _REGISTRY.get(op.name)
    _REGISTRY[op.name] = op
    try:
        yield op
    finally:
        if before is None:
            _REGISTRY.pop(op.name, None)
        else:
            _REGISTRY[op.name] = before


def arg_name(op: str, key: str) -> str:
    """The name messages give attribute ``key`` of op ``op``: its :class:`Attr`'s
    ``label``, the argument of the public function that sets it (NumPy's or PyTorch's
    name), else the key itself (also for an op or key the registry does not hold). Shape
    rules read it when they word an error, so each name is written once, in the schema.

    Example:
        >>> arg_name("conv", "pad"), arg_name("conv", "groups"), arg_name("sum", "axes")
        ('padding', 'groups', 'axis')
    """
    op_def = _REGISTRY.get(op)
    spec = op_def.attrs.get(key) if op_def is not None else None
    return (spec.label if spec is not None else "") or key


def get_op(name: str) -> OpDef:
    """Return the record of op ``name``."""
    if not isinstance(name, str):
        raise AttributeValueError(f"op names are strings, got {describe(name)}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AttributeValueError(f"unknown op '{name}'") from None


def all_ops() -> dict[str, OpDef]:
    """All registered ops by name (a copy)."""
    return dict(_REGISTRY)


# ---- attribute checks shared by many ops -------------------------------------------


def is_integer(value) -> bool:
    """True for Python and NumPy integers; False for bools and everything else (a float
    that happens to be whole, a string of digits, a 0-d array). The one rule for dims,
    axes, sizes and every other integer aneforge takes.

    Example:
        >>> import numpy as np
        >>> [is_integer(v) for v in (3, np.int64(3), 3.0, "3", True)]
        [True, True, False, False, False]
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def describe(value) -> str:
    """A short description of a rejected value for a message: its repr (cut to 60
    characters) and, unless it is a plain Python value, its type; an array by its shape
    and dtype.

    Example:
        >>> import numpy as np
        >>> describe(2.5), describe(True), describe(np.zeros((2, 3)))
        ('2.5', 'True (bool)', 'an array of shape (2, 3) (float64)')
    """
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    if type(value) in (int, float, str, list, tuple, dict, set, type(None)):
        return text
    return f"{text} ({type(value).__name__})"


def check_int(value, op: str, lo: int | None = None, name: str = "value") -> int:
    """Accept a Python/NumPy integer (not a bool) no smaller than ``lo``."""
    if not is_integer(value):
        raise AttributeValueError(f"{op}: {name} must be an integer, got {describe(value)}")
    value = int(value)
    if lo is not None and value < lo:
        raise AttributeValueError(f"{op}: {name} must be >= {lo}, got {value}")
    return value


def check_float(value, op: str, name: str = "value") -> float:
    """Accept a finite real number: a Python or NumPy int or float, never a bool, a
    string or an array."""
    numeric = isinstance(value, (int, float, np.integer, np.floating))
    if not numeric or isinstance(value, (bool, np.bool_)):
        raise AttributeValueError(f"{op}: {name} must be a number, got {describe(value)}")
    try:
        out = float(value)
    except OverflowError:
        raise AttributeValueError(
            f"{op}: {name}={describe(value)} is beyond the fp16 range (|x| <= {FP16_MAX:g})"
        ) from None
    if out != out or out in (float("inf"), float("-inf")):
        raise AttributeValueError(f"{op}: {name} must be finite, got {value!r}")
    return out


def int_items(value) -> tuple | None:
    """The items of an int-or-sequence value: ``(value,)`` for an integer, the items of
    a list, tuple, range or 1-D array; None for anything else (a set or dict has no
    order, a string is text, a Tensor is computed at run time). Items are not checked.

    Example:
        >>> import numpy as np
        >>> int_items(np.array([2, 3])), int_items({1: 2})
        ((2, 3), None)
    """
    if is_integer(value):
        return (value,)
    if isinstance(value, np.ndarray):
        return tuple(value.tolist()) if value.ndim == 1 else None
    if isinstance(value, (list, tuple, range)):
        return tuple(value)
    return None


def check_int_tuple(value, op: str, lo: int | None = None, name: str = "value"):
    """Accept an int or a list/tuple/range/1-D array of ints, returned as a tuple."""
    items = int_items(value)
    if items is None:
        raise AttributeValueError(
            f"{op}: {name} must be an integer or a list/tuple of integers, got {describe(value)}"
        )
    return tuple(check_int(v, op, lo, name) for v in items)


def int_attr(default=None, lo=None, name="value", required=False) -> Attr:
    """An integer attribute with a lower bound. ``name`` (here and in the other factories)
    is the ``label`` messages give it: the public argument's name."""
    check = lambda v, op: check_int(v, op, lo, name)  # noqa: E731
    return Attr(check, default, required, kind="int", label=name)


def float_attr(default=None, name="value", required=False, fp16="held", underflow="") -> Attr:
    """A finite float attribute; ``fp16`` and ``underflow`` as in :class:`Attr`."""
    if fp16 not in FP16_USES:
        raise RuntimeError(f"float attribute '{name}': fp16 must be one of {FP16_USES}")
    check = lambda v, op: check_float(v, op, name)  # noqa: E731
    return Attr(check, default, required, fp16, underflow, kind="float", label=name)


def ints_attr(default=None, lo=None, name="value", required=False) -> Attr:
    """An int-or-tuple-of-ints attribute."""
    check = lambda v, op: check_int_tuple(v, op, lo, name)  # noqa: E731
    return Attr(check, default, required, kind="ints", label=name)


def choice_attr(choices: tuple, default=None, name="value") -> Attr:
    """An attribute restricted to ``choices`` (strings)."""

    def check(value, op):
        if not isinstance(value, str) or value not in choices:
            raise AttributeValueError(
                f"{op}: {name} must be one of {choices}, got {describe(value)}"
            )
        return str(value)

    return Attr(check, default, kind="choice", label=name)


def bool_attr(default=False, name="value") -> Attr:
    """A boolean attribute (``True``/``False``, or a NumPy bool)."""

    def check(value, op):
        if not isinstance(value, (bool, np.bool_)):
            raise AttributeValueError(f"{op}: {name} must be True or False, got {describe(value)}")
        return bool(value)

    return Attr(check, default, kind="bool", label=name)
