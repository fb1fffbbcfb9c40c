"""The op registry: every op is declared once, as one :class:`OpDef` record.

A record carries everything the rest of aneforge needs to know about an op: its kind,
its attribute schema, its shape rule, its fp16 emulator kernel, its float64 reference
kernel and its FLOP count. The registry refuses duplicate names and incomplete records.

Example:
    >>> from aneforge.graph.registry import get_op
    >>> get_op("relu").kind
    'fused'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import AttributeValueError

# kind of an op: "source" (input / weight, no computation), "fused" (runs inside a
# fused engine program). Bridge ops arrive with the optimizer issue.
KINDS = ("source", "fused", "bridge")

ShapeRule = Callable[[list[tuple[int, ...]], dict[str, Any]], tuple[int, ...]]
Kernel = Callable[..., Any]
FlopRule = Callable[[list[tuple[int, ...]], tuple[int, ...], dict[str, Any]], int]
# (node, source intervals, env) -> Interval; see aneforge.graph.ranges
RangeRule = Callable[[Any, list[Any], Any], Any]


def no_flops(in_shapes, out_shape, attrs) -> int:
    """FLOP rule of ops the cost model treats as bytes-bound (everything but contractions)."""
    return 0


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its default and a check that normalizes the given value.

    ``check(value, op_name) -> value`` raises :class:`AttributeValueError` for bad input.
    ``required`` attributes have no default.
    """

    check: Callable[[Any, str], Any]
    default: Any = None
    required: bool = False


@dataclass(frozen=True)
class OpDef:
    """The single record of one op.

    Attributes:
        name: the op's name (``Tensor.op``).
        kind: one of :data:`KINDS`.
        arity: number of tensor inputs, or ``None`` for a variable count.
        attrs: the attribute schema, name -> :class:`Attr`.
        shape: shape rule ``(input_shapes, attrs) -> output_shape``; raises
            :class:`~aneforge.errors.ShapeError` on shapes it cannot combine.
        emulate: fp16 kernel ``(inputs, attrs, mm) -> fp16 array``; ``mm`` is the
            matmul backend (reference or fast) of the executor calling it.
        exact: float64 kernel ``(inputs, attrs) -> float64 array`` (the true answer).
        flops: FLOP rule ``(input_shapes, output_shape, attrs) -> int``.
        doc: one-line description used in generated docstrings.
        flags: algebraic facts (``commutative``, ``elementwise``, ``nonnegative``...).
        range: value-range rule ``(node, source intervals, env) -> Interval`` holding
            every value the emulator can produce (:mod:`aneforge.graph.ranges`).
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
    flags: frozenset[str] = field(default_factory=frozenset)
    range: RangeRule | None = None

    def normalize_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Validate ``given`` against the schema and fill in defaults."""
        unknown = sorted(set(given) - set(self.attrs))
        if unknown:
            raise AttributeValueError(
                f"{self.name}: unknown attribute(s) {unknown}; "
                f"it takes {sorted(self.attrs) or 'none'}"
            )
        out = {}
        for key, spec in self.attrs.items():
            if key in given and given[key] is not None:
                out[key] = spec.check(given[key], self.name)
            elif spec.required:
                raise AttributeValueError(f"{self.name}: attribute '{key}' is required")
            else:
                out[key] = spec.default
        return out


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; a duplicate name or an unknown kind is a bug."""
    if op.name in _REGISTRY:
        raise RuntimeError(f"op '{op.name}' is registered twice")
    if op.kind not in KINDS:
        raise RuntimeError(f"op '{op.name}' has unknown kind '{op.kind}'")
    _REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    """Return the record of op ``name``."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise AttributeValueError(f"unknown op '{name}'") from None


def all_ops() -> dict[str, OpDef]:
    """All registered ops by name (a copy)."""
    _ensure_loaded()
    return dict(_REGISTRY)


_LOADED = []


def _ensure_loaded() -> None:
    if not _LOADED:
        from . import ops  # noqa: F401  (registers every op on import)

        _LOADED.append(True)


# ---- attribute checks shared by many ops -------------------------------------------


def check_int(value, op: str, lo: int | None = None, name: str = "value") -> int:
    """Accept a Python/NumPy integer no smaller than ``lo``."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise AttributeValueError(f"{op}: {name} must be an integer, got {value!r}")
    value = int(value)
    if lo is not None and value < lo:
        raise AttributeValueError(f"{op}: {name} must be >= {lo}, got {value}")
    return value


def check_float(value, op: str, name: str = "value") -> float:
    """Accept a finite real number."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise AttributeValueError(f"{op}: {name} must be a number, got {value!r}") from None
    if out != out or out in (float("inf"), float("-inf")):
        raise AttributeValueError(f"{op}: {name} must be finite, got {value!r}")
    return out


def check_int_tuple(value, op: str, lo: int | None = None, name: str = "value"):
    """Accept an int or a sequence of ints, returned as a tuple."""
    if isinstance(value, (int,)) or hasattr(value, "__index__"):
        value = (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise AttributeValueError(f"{op}: {name} must be int(s), got {value!r}") from None
    return tuple(check_int(v, op, lo, name) for v in items)


def int_attr(default=None, lo=None, name="value", required=False) -> Attr:
    """An integer attribute with a lower bound."""
    return Attr(lambda v, op: check_int(v, op, lo, name), default, required)


def float_attr(default=None, name="value", required=False) -> Attr:
    """A finite float attribute."""
    return Attr(lambda v, op: check_float(v, op, name), default, required)


def ints_attr(default=None, lo=None, name="value", required=False) -> Attr:
    """An int-or-tuple-of-ints attribute."""
    return Attr(lambda v, op: check_int_tuple(v, op, lo, name), default, required)


def choice_attr(choices: tuple, default=None, name="value") -> Attr:
    """An attribute restricted to ``choices``."""

    def check(value, op):
        if value not in choices:
            raise AttributeValueError(f"{op}: {name} must be one of {choices}, got {value!r}")
        return value

    return Attr(check, default)


def bool_attr(default=False, name="value") -> Attr:
    """A boolean attribute."""

    def check(value, op):
        if not isinstance(value, (bool,)):
            raise AttributeValueError(f"{op}: {name} must be True or False, got {value!r}")
        return value

    return Attr(check, default)
