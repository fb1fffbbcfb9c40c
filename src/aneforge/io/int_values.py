"""Integer inputs during import, and integers computed on the engine from them: the
values both importers (:mod:`.onnx_integers`, :mod:`.torch_table`) carry for a run-time
integer input (token ids, attention masks) and for what they derive from it.

Three kinds of value:

- :class:`IntInput`: one integer graph input, its provisional aneforge input and the
  uses its engine type is chosen from (:func:`~.onnx_integers.choose_dtype`);
- :class:`IntView`: that input's own values in some shape (row-major order kept);
- :class:`IntValue`: integers **computed on the engine** from it, such as RoBERTa's
  position ids ``cumsum(ids != pad) * (ids != pad) + pad``: an fp16 tensor each of whose
  values is a whole number in a statically known interval ``[lo, hi]``.

**Exactness.** fp16 holds every integer of magnitude ``<= 2048`` exactly (11
significant bits), and an engine add, sub or mul rounds the exact result of its fp16
operands once, so one whose exact result is such an integer returns it exactly. cumsum
is ``x @ triangle`` (0/1 weights: exact products, a float32 running sum, the result
rounded once), so it is exact while every partial sum is such an integer; a sum in any
order is bounded by ``[n * min(lo, 0), n * max(hi, 0)]`` for ``n`` terms in
``[lo, hi]``, and that bound is what is checked. So every derived value whose interval,
and every intermediate's, stays within ``[-2048, 2048]`` is computed exactly, bit for
bit what integer arithmetic gives; anything whose interval leaves that range is refused
(:class:`~.onnx_errors.NotExpressible` naming the input, the node, the interval and
the reason), never rounded.

The chain starts at a comparison of the input with an integer constant ``c``: the input
is converted by ``int_to_fp16`` (recorded on the :class:`IntInput`, so its engine type
is chosen as for a cast) and compared in fp16. That is exact for ``|c| < 2048``: a
value of magnitude ``<= 2048`` converts exactly, and a larger one converts to a value
of magnitude ``>= 2048`` (rounding is monotone and 2048 is representable), so neither
equals ``c`` unless the value is ``c``. ``c = 2048`` itself is not safe: 2049 rounds
to 2048 (ties to even) and would compare equal. A comparison gives ``[0, 1]``.

The producers (each with its interval rule):

- :func:`compare`: ``x == c`` / ``x != c`` of the input or a derived value with an
  integer constant (and of two derived values): ``[0, 1]``; :func:`logical_not` of a 0/1
  value: ``[0, 1]``;
- :func:`cast`: to an integer type whose bounds hold the interval: the same values; to
  a float type: the plain fp16 tensor (the values leave the integer world, exactly);
  to bool: ``x != 0``, ``[0, 1]``;
- :func:`cumsum` along one axis of ``n`` entries (inclusive or exclusive, forward or
  reverse): ``[min(lo, n*lo), max(hi, n*hi)]`` (exclusive: ``n - 1`` terms and 0);
- :func:`arith`: add, sub, mul with an integer constant (``|c| <= 2048``) or another
  derived value: interval arithmetic (``x + 0`` and ``x * 1`` are ``x``; a product that
  could be ``-0`` gets ``+ 0``, so no derived value is ``-0``, which a cast to float
  would show and integers do not have);
- :func:`view`: the same values in a new shape;
- :func:`rows`: the rows of a float table at derived ids (``embedding_fp16_ids``, whose
  run-time check refuses an id outside the table; an interval that is not inside the
  rows is allowed, with a note);
- :func:`uniform_gather`: a gather of a constant that is the same along the gathered
  axis (RoBERTa's all-zero token types at its position ids): a constant, when the
  interval is inside that axis.

Example:
    >>> LIMIT, IntValue.__mro__[1].__name__
    (2048, 'IntView')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph.tensor import Tensor, input
from .onnx_errors import NotExpressible
from .onnx_ops import reshape
from .onnx_table import HANDLERS
from .onnx_values import Host

__all__ = [
    "LIMIT",
    "IntInput",
    "IntValue",
    "IntView",
    "arith",
    "cast",
    "compare",
    "converted",
    "cumsum",
    "logical_not",
    "refusal",
    "rows",
    "uniform_gather",
    "view",
]

#: fp16 holds every integer of magnitude up to this exactly (2**11).
LIMIT = 2048


@dataclass(eq=False)
class IntInput:
    """One integer graph input during import.

    Attributes:
        name, shape: the input's name and (static) shape.
        elem, elem_name: its ONNX element type and that type's name.
        tensor: the provisional aneforge input the graph is built on; the importer
            replaces it by the input of the chosen type at the end.
        tables: ``(node label, rows)`` of each embedding reading it.
        casts: the labels of the nodes converting its values.
        compares: the labels of the nodes comparing it with an integer constant.
        converted: its ``int_to_fp16`` node, shared by every conversion.
        reader: what the notes call a node reading ids (``"Gather"``; PyTorch import
            says ``"lookup"``).

    Example:
        >>> src = IntInput.declare("ids", (1, 4), 7, "TensorProto.INT64")
        >>> src.elem_name, src.tensor.dtype
        ('int64', 'uint16')
    """

    name: str
    shape: tuple
    elem: int
    elem_name: str
    tensor: Tensor
    tables: list = field(default_factory=list)
    casts: list = field(default_factory=list)
    compares: list = field(default_factory=list)
    converted: Tensor | None = None
    reader: str = "Gather"

    @classmethod
    def declare(cls, name, shape, elem, elem_name, reader="Gather") -> IntInput:
        """A new integer input, provisionally uint16 (``elem``: its ONNX element type)."""
        kind = elem_name.replace("TensorProto.", "").lower()
        t = input(shape, name=name, dtype="uint16")
        return cls(name, tuple(shape), elem, kind, t, reader=reader)


@dataclass(eq=False)
class IntView:
    """An integer input's values in some shape (row-major order kept)."""

    source: IntInput
    shape: tuple

    def __repr__(self) -> str:
        return f"IntView({self.source.name!r}, shape={self.shape})"


@dataclass(eq=False)
class IntValue(IntView):
    """Integers computed on the engine from ``source``: ``tensor`` (fp16, of ``shape``)
    holds whole numbers in ``[lo, hi]``, within ``[-LIMIT, LIMIT]``, exactly."""

    tensor: Tensor
    lo: int
    hi: int

    def __repr__(self) -> str:
        return f"IntValue({self.source.name!r}, shape={self.shape}, [{self.lo}, {self.hi}])"


def _value(src: IntInput, tensor: Tensor, lo: int, hi: int) -> IntValue:
    return IntValue(src, tuple(tensor.shape), tensor, int(lo), int(hi))


def refusal(src: IntInput, where: str, what: str) -> NotExpressible:
    """The refusal of node ``where`` computing with integers derived from ``src``:
    ``what`` it would do, and what to do instead.

    Example:
        >>> src = IntInput.declare("ids", (2,), 7, "INT64")
        >>> str(refusal(src, "Mul 'm'", "gives [0, 4096]")).split(": ")[1].split(";")[0]
        "this Mul 'm' gives [0, 4096]"
    """
    return NotExpressible(
        f"input '{src.name}' ({src.elem_name}) is a run-time integer input; the engine "
        f"computes integers from it only while each value is a whole number within "
        f"[-{LIMIT}, {LIMIT}] (fp16 holds those exactly): this {where} {what}; compute "
        "these values outside the model and pass them as an input"
    )


def _checked(src, where: str, lo: int, hi: int, how: str) -> tuple[int, int]:
    if lo < -LIMIT or hi > LIMIT:
        raise refusal(
            src, where, f"gives values in [{lo}, {hi}] ({how}), past {LIMIT} in magnitude, "
            "where fp16 no longer holds every integer",
        )  # fmt: skip
    return int(lo), int(hi)


def _constant(src, where: str, value, limit: int, why: str) -> np.ndarray:
    """``value`` (a Host, a Python or NumPy number or array) as whole numbers of
    magnitude ``<= limit``, or the refusal naming ``why`` the limit holds."""
    if not isinstance(value, (Host, int, float, np.ndarray, np.generic)):
        raise refusal(src, where, f"reads a {type(value).__name__} computed at run time where "
                      "it needs an integer constant")  # fmt: skip
    arr = np.asarray(value.value if isinstance(value, Host) else value)
    if arr.dtype.kind not in "biuf" or arr.size == 0:
        raise refusal(src, where, f"reads a constant of dtype {arr.dtype}, not integers")
    wide = arr.astype(np.float64)
    flat = wide.reshape(-1)
    with np.errstate(invalid="ignore"):
        whole = np.isfinite(flat) & (flat == np.floor(flat))
    if not whole.all() or np.abs(flat).max() > limit:
        bad = flat[~whole][0] if not whole.all() else flat[np.argmax(np.abs(flat))]
        raise refusal(src, where, f"reads the constant {bad:g}: {why}")
    return wide


def converted(cx, view: IntView) -> Tensor:
    """The input's values as fp16 (``int_to_fp16``, one node per input, shared) in the
    view's shape."""
    src = view.source
    if src.converted is None:
        src.converted = cx.op("int_to_fp16", src.tensor)
    return reshape(cx, src.converted, view.shape)


def _operand(cx, c: np.ndarray):
    return float(c) if c.ndim == 0 else Host(c, label="integer constant")


def compare(cx, a, b, where: str, label: str, negate: bool = False) -> IntValue:
    """``a == b`` (``a != b`` when ``negate``) as a 0/1 value: one operand the input
    (an :class:`IntView`) or a derived value, the other an integer constant (of
    magnitude ``< LIMIT`` against the input, ``<= LIMIT`` against a derived value) or a
    derived value. ``label`` names the node in the input's notes.

    Example:
        >>> src = IntInput.declare("ids", (3,), 7, "INT64")
        >>> from aneforge.graph.tensor import make
        >>> class Cx:  # what an importer's handler context offers
        ...     t = staticmethod(lambda x: x)
        ...     op = staticmethod(make)
        >>> v = compare(Cx(), IntView(src, (3,)), 1, "Equal 'e'", "e", negate=True)
        >>> v.tensor.op, (v.lo, v.hi), src.compares
        ('not_equal', (0, 1), ['e'])
    """
    op = "not_equal" if negate else "equal"
    if not isinstance(a, IntView):
        a, b = b, a
    src = a.source
    if isinstance(b, IntView):
        if not (isinstance(a, IntValue) and isinstance(b, IntValue)):
            raise refusal(
                src, where, "compares the input's own values with other run-time integers "
                f"(only a comparison with an integer constant of magnitude below {LIMIT} "
                "reads them exactly)",
            )  # fmt: skip
        return _value(src, cx.op(op, a.tensor, b.tensor), 0, 1)
    if isinstance(a, IntValue):
        c = _constant(src, where, b, LIMIT, f"fp16 holds whole numbers up to {LIMIT} exactly")
        return _value(src, cx.op(op, a.tensor, _operand(cx, c)), 0, 1)
    c = _constant(
        src, where, b, LIMIT - 1, f"the input's values reach fp16 rounded beyond {LIMIT} "
        f"(2049 becomes 2048), so only whole constants of magnitude below {LIMIT} compare "
        "exactly",
    )  # fmt: skip
    src.compares.append(label)
    return _value(src, cx.op(op, converted(cx, a), _operand(cx, c)), 0, 1)


def logical_not(cx, a: IntValue, where: str) -> IntValue:
    """``not a`` of a 0/1 value (``a == 0``), ``[0, 1]``; the negation of a comparison
    is the opposite comparison (``not (x == c)`` is ``x != c``: no NaN among integers),
    as ATen's ``ne`` gives it."""
    if a.lo < 0 or a.hi > 1:
        raise refusal(a.source, where, f"negates values in [{a.lo}, {a.hi}], not 0/1 truths")
    flip = _OPPOSITE.get(a.tensor.op)
    if flip is not None:
        return _value(a.source, cx.op(flip, *a.tensor.srcs), 0, 1)
    return _value(a.source, cx.op("equal", a.tensor, 0.0), 0, 1)


_OPPOSITE = {"equal": "not_equal", "not_equal": "equal"}


def cast(cx, a: IntValue, kind: str, where: str, bounds=None, name: str = ""):
    """``a`` cast to ``kind``: ``"i"`` an integer type of ``bounds`` (``name``), the same
    values when they fit; ``"f"`` a float type, the plain fp16 tensor; ``"b"`` bool,
    ``a != 0``."""
    if kind == "f":
        return a.tensor
    if kind == "b":
        return _value(a.source, cx.op("not_equal", a.tensor, 0.0), 0, 1)
    lo, hi = bounds
    if a.lo < lo or a.hi > hi:
        raise refusal(
            a.source, where, f"casts values in [{a.lo}, {a.hi}] to {name}, which holds "
            f"[{lo}, {hi}] and would wrap the others",
        )  # fmt: skip
    return a


def cumsum(cx, a: IntValue, axis: int, where: str, exclusive=False, reverse=False) -> IntValue:
    """The cumulative sum of ``a`` along ``axis`` (ONNX ``CumSum``'s variants), exact
    while every partial sum's bound is within ``[-LIMIT, LIMIT]``."""
    axis = axis + len(a.shape) if axis < 0 else axis
    if not 0 <= axis < len(a.shape):
        raise refusal(a.source, where, f"sums along axis {axis} of a rank-{len(a.shape)} value")
    n = int(a.shape[axis])
    how = f"partial sums of up to {n} terms in [{a.lo}, {a.hi}]"
    _checked(a.source, where, n * min(a.lo, 0), n * max(a.hi, 0), how)
    k = n - 1 if exclusive else n
    first = 0 if exclusive else 1
    lo, hi = min(first * a.lo, k * a.lo), max(first * a.hi, k * a.hi)
    at = {"exclusive": int(bool(exclusive)), "reverse": int(bool(reverse))}
    (out,) = HANDLERS["CumSum"](cx, cx.node, [a.tensor, Host(np.asarray(axis))], at)
    # no -0: the running sum starts at +0, so even a sum of x * 0 products alone (an
    # exclusive sum's first entry) is +0
    return _value(a.source, out, lo, hi)


def arith(cx, op: str, a, b, where: str) -> IntValue:
    """``a op b`` for ``op`` in add, sub, mul: derived values or integer constants (of
    magnitude ``<= LIMIT``), at least one derived; exact while the result's interval is
    within ``[-LIMIT, LIMIT]``."""
    derived = a if isinstance(a, IntValue) else b
    src = derived.source
    ends, args = [], []
    for v in (a, b):
        if isinstance(v, IntValue):
            ends.append((v.lo, v.hi))
            args.append(v.tensor)
        elif isinstance(v, IntView):
            raise refusal(
                src, where, "computes with the input's own values, whose range is not known "
                f"to be within {LIMIT} (a comparison with a constant reads them exactly)",
            )  # fmt: skip
        else:
            c = _constant(src, where, v, LIMIT, f"fp16 holds whole numbers up to {LIMIT} exactly")
            ends.append((int(c.min()), int(c.max())))
            args.append(_operand(cx, c))
    (alo, ahi), (blo, bhi) = ends
    if op == "add":
        lo, hi = alo + blo, ahi + bhi
    elif op == "sub":
        lo, hi = alo - bhi, ahi - blo
    else:
        products = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        lo, hi = min(products), max(products)
    how = f"{op} of [{alo}, {ahi}] and [{blo}, {bhi}]"
    lo, hi = _checked(src, where, lo, hi, how)
    same = _identity(op, a, b)
    if same is not None:
        return same
    out = cx.op(op, *args)
    if op == "mul" and lo <= 0 <= hi and min(alo, blo) < 0:
        out = cx.op("add", out, 0.0)  # 0 * -k is -0 in fp16, 0 for integers: -0 + 0 = +0
    return _value(src, out, lo, hi)


def _identity(op: str, a, b) -> IntValue | None:
    """The derived operand when the other is a constant that leaves it as it is
    (``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``; no -0 among derived values,
    and no broadcast to a larger shape), else None."""
    unit = 1.0 if op == "mul" else 0.0
    for value, other, ok in ((a, b, True), (b, a, op != "sub")):
        if isinstance(value, IntValue) and not isinstance(other, IntView) and ok:
            c = np.asarray(other.value if isinstance(other, Host) else other, np.float64)
            if np.all(c == unit) and np.broadcast_shapes(c.shape, value.shape) == value.shape:
                return value
    return None


def view(cx, a: IntValue, shape) -> IntValue:
    """``a``'s values in ``shape`` (row-major order)."""
    return _value(a.source, reshape(cx, a.tensor, shape), a.lo, a.hi)


def rows(cx, table, ids: IntValue) -> Tensor:
    """The rows (axis 0) of float ``table`` at derived ``ids``: ``embedding_fp16_ids``,
    of shape ``ids.shape + table.shape[1:]``. When the interval is not inside the table
    the import notes it (the program then checks each id when it runs)."""
    t = cx.t(table)
    if t.ndim == 0:
        raise refusal(ids.source, "lookup", "reads rows of a scalar (a table has them on axis 0)")
    n = int(t.shape[0])
    if ids.lo < 0 or ids.hi >= n:
        cx.note(
            f"its ids, computed from input '{ids.source.name}', lie in [{ids.lo}, {ids.hi}], "
            f"which is not within the table's {n} rows [0, {n - 1}]: an id outside them is "
            "an IdValueError when the program runs"
        )
    return cx.op("embedding_fp16_ids", t, ids.tensor)


def uniform_gather(data, ids: IntValue, axis: int, where: str, negative: bool = False) -> Host:
    """``take_along_axis(data, ids, axis)`` (ONNX ``GatherElements``, ATen ``gather``)
    of a constant ``data`` that is the same along ``axis``: a constant, valid when the
    ids' interval is inside that axis (``negative``: ids may count from its end).

    Example:
        >>> src = IntInput.declare("ids", (1, 3), 7, "INT64")
        >>> ids = IntValue(src, (1, 3), src.tensor, 1, 4)
        >>> uniform_gather(np.zeros((1, 8), np.int64), ids, 1, "gather").value.tolist()
        [[0, 0, 0]]
    """
    arr = np.asarray(data.value if isinstance(data, Host) else data)
    axis = axis + arr.ndim if axis < 0 else axis
    if not 0 <= axis < arr.ndim or len(ids.shape) != arr.ndim:
        raise refusal(ids.source, where, f"gathers along axis {axis} of a rank-{arr.ndim} constant "
                      f"at indices of rank {len(ids.shape)}")  # fmt: skip
    n = arr.shape[axis]
    low = -n if negative else 0
    if ids.lo < low or ids.hi >= n:
        raise refusal(
            ids.source, where, f"gathers along axis {axis} ({n} entries) of a constant at "
            f"indices in [{ids.lo}, {ids.hi}], which may fall outside it",
        )  # fmt: skip
    first = np.take(arr, [0], axis=axis)
    if not np.array_equal(arr, np.broadcast_to(first, arr.shape)):
        raise refusal(
            ids.source, where, f"gathers a constant whose values vary along axis {axis} at "
            "run-time indices (a gather of a constant that is the same along that axis, "
            "like an all-zero buffer, is a constant and expressible)",
        )  # fmt: skip
    if any(s > d for i, (s, d) in enumerate(zip(ids.shape, arr.shape)) if i != axis):
        raise refusal(ids.source, where, f"gathers indices of shape {ids.shape} from a constant "
                      f"of shape {arr.shape}")  # fmt: skip
    part = first[tuple(slice(None) if i == axis else slice(0, s) for i, s in enumerate(ids.shape))]
    return Host(np.broadcast_to(part, ids.shape).copy(), label=f"{where} (a constant)")
