"""The lazy, immutable fp16 tensor graph.

A :class:`Tensor` is a node of a DAG: an op name, its source tensors, its attributes and
its shape, computed and checked when the node is built. Nothing is evaluated until the
graph is compiled and run. Values are fp16 throughout; rank is at most 5 (the engine's
dimension model).

Example:
    >>> import numpy as np
    >>> import aneforge as af
    >>> x = af.input((2, 3), name="x")
    >>> y = (x * 2.0 + 1.0).relu()
    >>> y.shape, y.op
    ((2, 3), 'relu')

Inputs are fp16 unless declared integer (``af.input(shape, dtype="uint16")``: the engine's
I/O also takes int8, uint8, int16 and uint16). An integer input feeds only the ops whose
record takes an integer operand there (``OpDef.int_inputs``: :func:`aneforge.embedding`'s
ids, and :func:`aneforge.cast` to fp16); every other op refuses it when it is built.

    >>> ids = af.input((1, 8), name="ids", dtype="uint16")
    >>> ids.dtype, af.cast(ids).op
    ('uint16', 'int_to_fp16')

Names are metadata: every op takes ``name=`` (and ``t.named(name)`` relabels a node),
which reports, layer tables and the Core ML export show. A name never changes what a
node computes, so it stays out of the structural hash of non-input nodes (see
:mod:`aneforge.graph.hashing`).

    >>> (x * 2.0).relu(name="act").named("fc1").name
    'fc1'
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from ..errors import AttributeValueError, DTypeError, InputError, ShapeError, WeightRangeError
from ..limits import check_elements
from .fp16 import round_fp16
from .frozen import freeze
from .ranges import check_range
from .registry import describe, get_op, int_items, is_integer

MAX_RANK = 5
#: The integer types of engine inputs and the values each holds (inclusive bounds).
INTEGER_DTYPES = {
    "uint8": (0, 255),
    "int8": (-128, 127),
    "uint16": (0, 65535),
    "int16": (-32768, 32767),
}
_FP16_NAMES = ("fp16", "float16", "half")
_ACCEPTED_FLOATS = (np.float16, np.float32, np.float64)
_creation = itertools.count()


class Tensor:
    """One node of the graph. Build tensors with :func:`input`, weights and ops.

    Attributes:
        op: name of the op that produces it (``"input"``, ``"weight"``, ``"relu"``...).
        srcs: the input tensors of that op, in order.
        attrs: the op's normalized attributes (read-only mapping).
        shape: the output shape, a tuple of ints.
        name: optional user-facing name (``name=`` of every op, :meth:`named`); weights
            built without one carry an automatic ``w<k>`` label.
    """

    __slots__ = ("op", "srcs", "attrs", "shape", "name", "value", "size", "_order")
    __array_priority__ = 1000  # make ndarray @ Tensor defer to Tensor.__rmatmul__

    def __init__(self, op, srcs, attrs, shape, name=None, value=None):
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "srcs", tuple(srcs))
        object.__setattr__(self, "attrs", attrs)
        object.__setattr__(self, "shape", tuple(shape))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "size", math.prod(self.shape))  # number of elements
        object.__setattr__(self, "_order", next(_creation))

    def __setattr__(self, key, value):
        raise AttributeError("Tensor is immutable; build a new tensor instead")

    def __delattr__(self, key):
        raise AttributeError("Tensor is immutable; build a new tensor instead")

    # ---- introspection -------------------------------------------------------------
    @property
    def ndim(self) -> int:
        """Rank of the tensor."""
        return len(self.shape)

    @property
    def dtype(self) -> str:
        """``'float16'``, the engine's dataplane type, for every node but an integer
        input, whose declared type it is (``'uint16'``, ``'int8'``...)."""
        if self.op == "input":
            return self.attrs.get("dtype", "float16")
        return "float16"

    def named(self, name: str) -> Tensor:
        """The same computation under the name ``name`` (a new node; ``self`` is kept).

        Names are metadata: the copy has the same op, sources, attributes and value.
        Inputs are refused (a renamed copy would be a second input): name them with
        ``af.input(shape, name=...)``.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((2, 4), name="x")
            >>> (x @ np.ones((4, 3))).relu().named("fc1").name
            'fc1'
        """
        name = check_name(name, self.op)
        if self.op == "input":
            raise AttributeValueError(
                f"input {_quoted(self.name)}: named({name!r}) would declare a second input; "
                f"name an input where it is declared: af.input({self.shape}, name={name!r})"
            )
        if name == self.name:
            return self
        return Tensor(self.op, self.srcs, self.attrs, self.shape, name=name, value=self.value)

    def __repr__(self) -> str:
        label = f" '{self.name}'" if self.name else ""
        return f"Tensor({self.op}{label}, shape={self.shape})"

    def __bool__(self):
        raise TypeError("a Tensor has no truth value until it runs; use af.select instead")

    __hash__ = object.__hash__

    # ---- operators (the rest of the methods, indexing included, are attached by api) --
    def __add__(self, other):
        if _defers(other):
            return NotImplemented
        return make("add", self, other)

    def __radd__(self, other):
        if _defers(other):
            return NotImplemented
        return make("add", other, self)

    def __sub__(self, other):
        if _defers(other):
            return NotImplemented
        return make("sub", self, other)

    def __rsub__(self, other):
        if _defers(other):
            return NotImplemented
        return make("sub", other, self)

    def __mul__(self, other):
        if _defers(other):
            return NotImplemented
        return make("mul", self, other)

    def __rmul__(self, other):
        if _defers(other):
            return NotImplemented
        return make("mul", other, self)

    def __truediv__(self, other):
        if _defers(other):
            return NotImplemented
        return make("div", self, other)

    def __rtruediv__(self, other):
        if _defers(other):
            return NotImplemented
        return make("div", other, self)

    def __pow__(self, other):
        if _defers(other):
            return NotImplemented
        return make("pow", self, other)

    def __rpow__(self, other):
        if _defers(other):
            return NotImplemented
        return make("pow", other, self)

    def __neg__(self):
        return make("neg", self)

    def __matmul__(self, other):
        if _defers(other):
            return NotImplemented
        return _matmul(self, other)

    def __rmatmul__(self, other):
        if _defers(other):
            return NotImplemented
        return _matmul(other, self)

    def __lt__(self, other):
        return make("less", self, other)

    def __le__(self, other):
        return make("less_equal", self, other)

    def __gt__(self, other):
        return make("greater", self, other)

    def __ge__(self, other):
        return make("greater_equal", self, other)


def _defers(other) -> bool:
    """True for operand types that ask binary operators to defer to them, by NumPy's
    convention ``__array_ufunc__ = None`` (e.g. ``aneforge.numerics.paired.Paired``)."""
    return getattr(type(other), "__array_ufunc__", 0) is None


def _matmul(a, b) -> Tensor:
    """``a @ b``: a weight on the right is the weight matmul, else a tensor bmm."""
    a, b = as_tensor(a, "matmul lhs"), as_tensor(b, "matmul rhs")
    return make("matmul" if b.op == "weight" else "bmm", a, b)


def make(op_name: str, *srcs, name: str | None = None, **attrs) -> Tensor:
    """Build a node of op ``op_name``: validate attributes, infer and check the shape.

    Non-tensor sources (NumPy arrays, Python scalars) become weights. ``name`` (a
    non-empty string, or None) labels the node; see :func:`check_name`. The input count,
    every attribute (:meth:`~aneforge.graph.registry.OpDef.normalize_attrs`) and the
    output shape are checked here, so every op refuses a bad call the same way, with an
    :class:`~aneforge.errors.AneforgeError` naming the op. A node that grows past its
    inputs (``upsample(x, 10**9)``, a huge pad) must stay within
    :func:`aneforge.limits.max_elements` elements, or it is a
    :class:`~aneforge.errors.SizeLimitError` here rather than a MemoryError at run time;
    graphs whose inputs are declared that large still build (preflight, estimates).

    Example:
        >>> import aneforge as af
        >>> make("add", af.input((2,)), 1.0, name="bias").name
        'bias'
    """
    if not isinstance(op_name, str):
        raise AttributeValueError(f"make: the op name must be a string, got {describe(op_name)}")
    if name is not None:
        name = check_name(name, op_name)
    op = get_op(op_name)
    if op.kind == "source":
        raise AttributeValueError(
            f"make: '{op_name}' nodes are not built by make; declare them with af.{op_name}(...)"
        )
    op.check_arity(len(srcs))
    tensors = [as_tensor(s, f"{op_name} input {i}") for i, s in enumerate(srcs)]
    _check_integer_sources(op, tensors)
    norm = op.normalize_attrs(attrs)
    shape = tuple(int(d) for d in op.shape([t.shape for t in tensors], norm))
    _check_shape(shape, op_name)
    if math.prod(shape) > max((t.size for t in tensors), default=0):
        check_elements(shape, f"{op_name} output")
    return Tensor(op_name, tensors, FrozenAttrs(norm), shape, name=name)


def _check_integer_sources(op, tensors) -> None:
    """Refuse an integer tensor where ``op`` takes fp16, and fp16 where it takes ids."""
    for i, t in enumerate(tensors):
        integer = t.op == "input" and "dtype" in t.attrs
        if integer == (i in op.int_inputs):
            continue
        label = _quoted(t.name)
        if integer:
            raise DTypeError(
                f"{op.name}: input {i} is the integer input {label} ({t.dtype}); integer "
                "inputs feed only af.embedding (as its ids) and af.cast (to fp16): look "
                "rows up with af.embedding(table, ids) or convert with af.cast(ids) first, "
                "and reshape the fp16 result"
            )
        raise DTypeError(
            f"{op.name}: input {i} must be an integer input (af.input(shape, "
            f"dtype='uint16')), got {t!r} (float16); constant ids go through "
            "af.gather(table, ids) instead"
        )


def check_name(name, what: str) -> str:
    """``name`` if it is a valid node name (a non-empty, not all-blank ``str``), else an
    :class:`~aneforge.errors.AttributeValueError` naming ``what`` and the value.

    Example:
        >>> check_name("fc1", "relu")
        'fc1'
    """
    if not isinstance(name, str) or not name.strip():
        raise AttributeValueError(
            f"{what}: name must be a non-empty string, got {name!r}; pass e.g. "
            "name='fc1', or leave it out for an automatic layer name"
        )
    return name


def _quoted(name) -> str:
    return f"'{name}'" if name else "(unnamed)"


def creation_mark() -> int:
    """A number below the creation order of every tensor built after this call.

    ``t._order > mark`` tells that ``t`` was built after the mark was taken: how passes
    recognise the nodes a rule or an importer has just made (and may name).

    Example:
        >>> import aneforge as af
        >>> mark = creation_mark()
        >>> af.input((2,))._order > mark
        True
    """
    return next(_creation)


def with_srcs(node: Tensor, srcs) -> Tensor:
    """A copy of ``node`` reading ``srcs`` instead (same op, attributes and shape).

    Returns ``node`` itself when the sources are the same objects, so rewriting a graph
    that does not change allocates nothing.
    """
    srcs = tuple(srcs)
    if all(a is b for a, b in zip(srcs, node.srcs)) and len(srcs) == len(node.srcs):
        return node
    return Tensor(node.op, srcs, node.attrs, node.shape, name=node.name, value=node.value)


def check_dims(shape, what: str) -> tuple[int, ...]:
    """``shape`` (an integer, or a list/tuple/1-D array of them) as a tuple of Python
    ints, or a :class:`~aneforge.errors.ShapeError` naming ``what``: only integers and
    NumPy integers are dims (not 2.5, "3", True or inf). Sizes are checked apart.

    Example:
        >>> check_dims([2, 3], "input"), check_dims(4, "input")
        ((2, 3), (4,))
    """
    items = int_items(shape)
    bad = [d for d in items if not is_integer(d)] if items is not None else [shape]
    if bad:
        raise ShapeError(
            f"{what}: shape must be integers, got {describe(shape)}; {describe(bad[0])} "
            "is not a dimension (give ints, e.g. (2, 3))"
        )
    return tuple(int(d) for d in items)


def _check_shape(shape: tuple[int, ...], what: str) -> None:
    if len(shape) > MAX_RANK:
        raise ShapeError(
            f"{what}: shape {shape} has rank {len(shape)}; the engine holds rank <= "
            f"{MAX_RANK}. Merge adjacent axes with reshape first."
        )
    if any(d < 1 for d in shape):
        raise ShapeError(f"{what}: shape {shape} has an empty or negative dimension")


class FrozenAttrs(dict):
    """A read-only dict for node attributes."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("node attributes are read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly

    def __hash__(self):  # attributes are plain values: hashable by content
        return hash(tuple(sorted((k, repr(v)) for k, v in self.items())))


def input(  # noqa: A001  (public API name)
    shape,
    name: str | None = None,
    max_abs: float | None = None,
    range=None,  # noqa: A002
    dtype="fp16",
) -> Tensor:
    """Declare an input of ``shape``. Programs take inputs in creation order.

    ``dtype`` is ``"fp16"`` (the default) or one of the engine's integer input types
    ``"uint8"``, ``"int8"``, ``"uint16"``, ``"int16"`` (:data:`INTEGER_DTYPES`), for token
    ids and masks. An integer input feeds only :func:`aneforge.embedding` (its ids) and
    :func:`aneforge.cast` (to fp16); a program takes an integer array for it and refuses
    values outside the type. Its ``range`` must be whole numbers within the type.

    ``range=(lo, hi)`` (or ``max_abs=m``, meaning ``(-m, m)``) declares the values the
    input will be fed: :func:`aneforge.range_analysis`, ``compile`` and ``check`` then
    find where the graph can overflow or underflow for such inputs. An input without a
    declared range is unknown, and nothing is assumed about it. The range is part of
    the input's identity (its structural hash).

    Example:
        >>> import aneforge as af
        >>> af.input((1, 3, 32, 32), name="image").shape
        (1, 3, 32, 32)
        >>> af.input((8,), name="x", max_abs=3).attrs["range"]
        (-3.0, 3.0)
        >>> af.input((1, 16), name="ids", dtype="uint16").dtype
        'uint16'
    """
    if name is not None:
        name = check_name(name, "input")
    where = f"input '{name}'" if name else "input"
    dims = check_dims(shape, where)
    _check_shape(dims, where)
    if max_abs is not None and range is not None:
        raise AttributeValueError(f"{where}: give range=(lo, hi) or max_abs=m, not both")
    kind = input_dtype(dtype, where)
    given = range if range is not None else max_abs
    attrs = {}
    if kind != "float16":  # fp16 inputs carry no dtype: their hashes stay as they were
        attrs["dtype"] = kind
        if given is not None:
            attrs["range"] = integer_range(given, kind, f"{where} range")
    elif given is not None:
        attrs["range"] = check_range(given, f"{where} range")
    return Tensor("input", (), FrozenAttrs(attrs), dims, name=name)


def input_dtype(dtype, where: str = "input") -> str:
    """The canonical name of an input type: ``'float16'`` for ``'fp16'``, ``'float16'``,
    ``'half'`` or ``np.float16``, else one of :data:`INTEGER_DTYPES` (a name or a NumPy
    dtype); anything else is a :class:`~aneforge.errors.DTypeError` naming ``where``.

    Example:
        >>> input_dtype("fp16"), input_dtype(np.uint16)
        ('float16', 'uint16')
    """
    if isinstance(dtype, str):
        key = dtype.strip().lower()
    else:
        try:
            key = np.dtype(dtype).name if not isinstance(dtype, np.ndarray) else None
        except (TypeError, ValueError):
            key = None
    if key in _FP16_NAMES:
        return "float16"
    if key in INTEGER_DTYPES:
        return key
    raise DTypeError(
        f"{where}: dtype {describe(dtype)} is not an engine input type; inputs are "
        "'fp16' or the integer types 'uint8', 'int8', 'uint16', 'int16' (token ids: "
        "dtype='uint16'; wider integers do not fit the engine's I/O)"
    )


def integer_range(given, dtype: str, where: str) -> tuple[int, int]:
    """``given`` (``(lo, hi)`` or a max |value|) as whole-number bounds within integer
    type ``dtype``, else an :class:`~aneforge.errors.AttributeValueError` naming ``where``.

    Example:
        >>> integer_range((0, 1), "uint8", "input 'mask' range")
        (0, 1)
    """
    lo_t, hi_t = INTEGER_DTYPES[dtype]
    try:
        if is_integer(given) or isinstance(given, (float, np.floating)):
            pair = (-given, given)
        else:
            pair = tuple(given)
        if len(pair) != 2 or not all(_whole(v) for v in pair):
            raise ValueError
        lo, hi = (int(v) for v in pair)
    except (TypeError, ValueError):
        raise AttributeValueError(
            f"{where}: the range of a {dtype} input is (lo, hi) of whole numbers with "
            f"lo <= hi, got {describe(given)}"
        ) from None
    if lo > hi or lo < lo_t or hi > hi_t:
        raise AttributeValueError(
            f"{where}: range ({lo}, {hi}) is not within {dtype} [{lo_t}, {hi_t}]; give "
            "bounds the type holds, or declare a wider integer type"
        )
    return lo, hi


def _whole(v) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return False
    if is_integer(v):
        return True
    return isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer()


def integer_feed(value, t: Tensor) -> np.ndarray:
    """``value`` checked as the array fed to integer input ``t``: an integer (or bool)
    array of ``t``'s shape whose every value the input's type holds, returned in that
    type. Float arrays are refused (ids are never rounded), and so is any value outside
    the type, naming the input, the value and where it is: nothing is clamped or wrapped.

    Example:
        >>> ids = input((1, 3), name="ids", dtype="uint16")
        >>> integer_feed([[1, 2, 60000]], ids)
        array([[    1,     2, 60000]], dtype=uint16)
        >>> try:
        ...     integer_feed([[1, 2, 70000]], ids)
        ... except InputError as err:
        ...     print(str(err)[:60])
        input 'ids' (1, 3) uint16: value 70000 at index (0, 2) is ou
    """
    label = f"input {_quoted(t.name)} {t.shape} {t.dtype}"
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:
        raise InputError(
            f"{label}: {describe(value)} is not an array ({_first_line(err)})"
        ) from None
    if arr.dtype.kind not in "iub":
        raise DTypeError(
            f"{label}: got a {arr.dtype} array; an integer input takes integers (e.g. "
            "token ids as np.int64): convert with .astype(np.int64) if they are whole"
        )
    if arr.shape != t.shape:
        raise InputError(f"{label}: expected shape {t.shape}, given {arr.shape}")
    lo, hi = INTEGER_DTYPES[t.dtype]
    if arr.size and arr.dtype.kind != "b":
        bad = (arr < lo) | (arr > hi)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputError(
                f"{label}: value {int(arr[where])} at index {where} is outside {t.dtype} "
                f"[{lo}, {hi}], the values this input holds on the engine; nothing is "
                "clamped: give ids within the type (or declare a wider integer type)"
            )
    return arr.astype(t.dtype)


def random_feed(t: Tensor, rng) -> np.ndarray:
    """Random values for input ``t`` (a sample input for checks and tuning): fp16
    inputs draw N(0, 1), or uniformly from their declared range; integer inputs draw
    whole numbers uniformly from their declared range, else from their type.

    Example:
        >>> ids = input((2, 4), dtype="uint8", range=(0, 9))
        >>> x = random_feed(ids, np.random.default_rng(0))
        >>> x.dtype, bool(x.min() >= 0 and x.max() <= 9)
        (dtype('uint8'), True)
    """
    given = t.attrs.get("range")
    if t.dtype == "float16":
        value = rng.standard_normal(t.shape) if given is None else rng.uniform(*given, t.shape)
        return round_fp16(value)
    lo, hi = given if given is not None else INTEGER_DTYPES[t.dtype]
    return rng.integers(lo, hi, size=t.shape, endpoint=True).astype(t.dtype)


_weight_ids = itertools.count()


def weight(value, name: str | None = None) -> Tensor:
    """Wrap a float array (or scalar) as an fp16 weight, checking dtype and range.

    float16/32/64 are cast to fp16; the weight holds an immutable copy (``value``, which
    nothing can make writeable), so kernels may derive from it once. Values that overflow
    fp16 raise :class:`~aneforge.errors.WeightRangeError`; integer, bool, complex, object
    and bfloat16 arrays raise :class:`~aneforge.errors.DTypeError`.

    Example:
        >>> import numpy as np
        >>> import aneforge as af
        >>> af.weight(np.eye(2, dtype=np.float32), name="I").shape
        (2, 2)
    """
    if name is not None:
        name = check_name(name, "weight")
    label = name or f"w{next(_weight_ids)}"
    arr = _as_float_array(value, label)
    # an fp16 array is its own rounding; two reductions rule out an inf in the common
    # case, with no temporaries (a 525M-element LM head is a gigabyte)
    fp16 = arr if arr.dtype == np.float16 else round_fp16(arr)
    overflow = None
    if (
        fp16 is not arr
        and fp16.size
        and not (np.isfinite(float(fp16.max())) and np.isfinite(float(fp16.min())))
    ):
        overflow = np.isinf(fp16) & np.isfinite(arr)
    if overflow is not None and overflow.any():
        worst = float(np.max(np.abs(arr[overflow])))
        raise WeightRangeError(
            f"weight '{label}': value {worst:g} is beyond the fp16 range (|x| <= 65504); "
            "rescale it (and undo the scale after the op) or clip it first"
        )
    _check_shape(fp16.shape, f"weight '{label}'")
    fp16 = freeze(fp16)  # immutable: kernels may derive from it once
    return Tensor("weight", (), FrozenAttrs(), fp16.shape, name=label, value=fp16)


def _as_float_array(value, label: str) -> np.ndarray:
    if isinstance(value, (bool, np.bool_)):
        raise DTypeError(f"weight '{label}': bool values cannot enter the fp16 dataplane")
    if value is None:
        raise DTypeError(f"weight '{label}': got None; give a tensor, an array or a number")
    if isinstance(value, (int, float)):
        if isinstance(value, int) and value.bit_length() > 1000:  # past float64
            raise WeightRangeError(
                f"weight '{label}': value ~2**{value.bit_length()} is beyond the fp16 range "
                "(|x| <= 65504); rescale it (and undo the scale after the op) or clip it first"
            )
        return np.asarray(float(value), dtype=np.float64)
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as err:
        raise ShapeError(
            f"weight '{label}': {describe(value)} is not an array ({_first_line(err)}); "
            "give a rectangular nested list or an array"
        ) from None
    if arr.dtype.type in _ACCEPTED_FLOATS:
        return arr
    kind = arr.dtype.name
    why = {
        "b": "bool",
        "i": "integer",
        "u": "unsigned integer",
        "c": "complex",
        "O": "object",
        "U": "string",
        "S": "bytes",
    }.get(arr.dtype.kind, kind)
    if "bfloat16" in kind:
        why = "bfloat16"
    raise DTypeError(
        f"weight '{label}': dtype {kind} ({why}) cannot enter the engine's fp16 dataplane; "
        "convert it to a float array first (e.g. arr.astype(np.float32))"
    )


def as_tensor(value: Any, label: str = "value") -> Tensor:
    """Return ``value`` as a Tensor: tensors pass through, arrays/scalars become weights."""
    if isinstance(value, Tensor):
        return value
    if value is None:
        raise DTypeError(f"{label}: got None; give a tensor, an array or a number")
    try:
        return weight(value)
    except (DTypeError, WeightRangeError, ShapeError) as err:
        raise type(err)(f"{label}: {err}") from None


def _first_line(err: Exception) -> str:
    """The first sentence of an exception's message (NumPy's run long)."""
    return str(err).split("\n", 1)[0].split(". ", 1)[0].rstrip(".")
