"""Paired fp16 ("double-fp16"): compensated arithmetic built from plain fp16 graph ops.

A :class:`Paired` value is the unevaluated sum ``hi + lo`` of two fp16 tensors, with
``|lo| <= ulp(hi) / 2`` after every operation here (the pair is *normalized*), so it holds
about 22 significant bits. Every operation is written as ordinary graph nodes (add, sub,
mul, concat, matmul against a ones weight, reshape), each rounded once to fp16 by the
emulator's contract (docs/numerics.md): a paired graph compiles, emulates, estimates and
exports like any other graph, with no fp32 value in flight. The building blocks are the
classic error-free transforms, written from their definitions:

- :func:`two_sum` (Knuth): ``s = fl(a + b)`` and ``err`` with ``s + err == a + b``
  exactly, in 6 ops; :func:`two_diff` is the same for ``a - b``; :func:`fast_two_sum`
  (Dekker, 3 ops) renormalizes a pair whose first part has the larger exponent.
- :func:`split` (Veltkamp): ``a = hi + lo`` with both parts at most 5 significant bits,
  via ``c = 65 * a``. The constant is ``2**s + 1`` with ``s = ceil(11 / 2) = 6`` for
  fp16's 11-bit significand: ``hi`` keeps ``11 - 6 = 5`` bits and ``lo`` fits ``6 - 1 =
  5`` bits (its sign absorbs one), so every partial product of two split parts has at
  most 10 bits and is exact in fp16.
- :func:`two_product` (Dekker): ``p = fl(a * b)`` and ``err`` with ``p + err == a * b``
  exactly, in 17 ops (two 4-op splits, the product, 8 ops for the error).

The range walls of fp16 (read them before using a product):

- ``65 * a`` overflows for ``|a| >= 1008`` (65504 / 65 is about 1007.75): past it the
  split and every product built on it are NaN, loudly, never a wrong finite number.
  ``prescale=True`` splits ``a * 2**-6`` instead (6 ops per split, 21 per product) and
  moves the wall to ``|a| < 64512``; it is error-free for ``|a| >= 2**-8`` (below, the
  scaled operand is subnormal and the split degrades gracefully). Weights need neither:
  they are split in NumPy at build time, exactly, for free.
- An error term below the subnormal grid (``2**-24``) is lost: products are error-free
  when ``|a * b|`` is at least about ``2**-4`` (the error's last bit is ``ulp(a) *
  ulp(b)``), and a ``lo`` limb next to ``|hi| < 2**-2`` has fewer than 11 bits. Scale the
  values into ``[2**-2, 1008)`` with :meth:`Paired.scale` (exact, powers of two).
- A product needs ``|a * b|`` below about 63000: the partial product ``a_hi * b_hi``
  may exceed ``|a * b|`` by ``2**-5`` and overflow (the error term is then inf).
- ``s = a + b`` overflowing to inf makes the error NaN; the contractions of
  :meth:`Paired.dot` / :meth:`Paired.sum` are wide (float32) but their fp16 outputs
  overflow past 65504 (and, on a target with the matmul output limit, past 32752).

Costs in graph nodes per element (``tests/numerics/test_paired.py`` counts them from the
built graphs; the specification's table says TwoSum ~6, TwoProduct ~17, dot ~17 + 2 matmuls;
docs/numerics.md 10.4):

==============================  ====================  ======================
operation                       fp16 operands         paired operands
==============================  ====================  ======================
add / sub                       6 (TwoSum)            11 (10 with one pair)
mul                             17 (TwoProduct)       24 (22 with one pair)
dot of length K                 17 + 2 matmuls        19 + 2 matmuls
sum of length K                 2 matmuls             2 matmuls
:func:`paired_subtract`         7                     9 (8 with one pair)
==============================  ====================  ======================

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics.paired import Paired, paired_subtract
    >>> c, u = Paired.from_array(1000.3), Paired.from_array(999.9)
    >>> float(af.compile(paired_subtract(c, u))())   # plain fp16: 1000.5 - 1000.0 = 0.5
    0.39990234375
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..errors import AttributeValueError, ShapeError
from ..graph.fp16 import FP16_MAX, round_fp16
from ..graph.registry import describe
from ..graph.tensor import Tensor, _as_float_array, as_tensor, make, weight

FP16_PRECISION = 11  # significand bits of binary16, the hidden bit included
SPLIT_SHIFT = math.ceil(FP16_PRECISION / 2)  # s = 6
SPLIT_FACTOR = 2**SPLIT_SHIFT + 1  # Veltkamp's constant 2**s + 1 = 65
SPLIT_BITS = FP16_PRECISION - SPLIT_SHIFT  # hi (and lo, with its sign) keep 5 bits
# fp16(65 * a) stays finite only below this (65 * 1008 = 65520 rounds to inf).
SPLIT_LIMIT = 1008.0
# With prescale=True: fp16(a * (1 + 2**-6)) stays finite only below this (65520 / 1.015625).
PRESCALED_SPLIT_LIMIT = 64512.0
PRESCALE = 2.0**-SPLIT_SHIFT
# The specification's op-cost table (docs/numerics.md, section 10.4).
SPEC_OPS_PER_ELEMENT = {"two_sum": 6, "two_product": 17, "dot": 17, "dot_matmuls": 2}

__all__ = [
    "Paired",
    "paired",
    "paired_subtract",
    "two_sum",
    "two_diff",
    "fast_two_sum",
    "split",
    "two_product",
]


# ---- error-free transforms on fp16 tensors ---------------------------------------------


def two_sum(a, b) -> tuple[Tensor, Tensor]:
    """Knuth's TwoSum in 6 fp16 ops: ``(s, err)`` with ``s = fl(a + b)`` and
    ``s + err == a + b`` exactly (no precondition; only an overflowing ``s`` breaks it).

    ``bb = s - a`` is the part of ``b`` that made it into ``s``; ``a - (s - bb)`` and
    ``b - bb`` are what each operand lost, and their sum is exact.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x, y = af.input((1,)), af.input((1,))
        >>> s, e = two_sum(x, y)
        >>> [float(v[0]) for v in af.compile([s, e])(np.array([2048.0]), np.array([1.0]))]
        [2048.0, 1.0]
    """
    a, b = as_tensor(a, "two_sum a"), as_tensor(b, "two_sum b")
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def two_diff(a, b) -> tuple[Tensor, Tensor]:
    """TwoSum of ``a`` and ``-b`` without a negation node: ``s = fl(a - b)`` and
    ``s + err == a - b`` exactly, in 6 fp16 ops.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x, y = af.input((1,)), af.input((1,))
        >>> s, e = two_diff(x, y)
        >>> [float(v[0]) for v in af.compile([s, e])(np.array([2048.0]), np.array([0.5]))]
        [2048.0, -0.5]
    """
    a, b = as_tensor(a, "two_diff a"), as_tensor(b, "two_diff b")
    s = a - b
    bb = s - a  # the part of -b that made it into s
    err = (a - (s - bb)) - (b + bb)
    return s, err


def fast_two_sum(a, b) -> tuple[Tensor, Tensor]:
    """Dekker's FastTwoSum in 3 fp16 ops: exact ``(s, err)`` when the exponent of ``a``
    is at least that of ``b`` (e.g. ``|a| >= |b|``); used to renormalize pairs.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x, y = af.input((1,)), af.input((1,))
        >>> s, e = fast_two_sum(x, y)
        >>> [float(v[0]) for v in af.compile([s, e])(np.array([1024.0]), np.array([0.25]))]
        [1024.0, 0.25]
    """
    a, b = as_tensor(a, "fast_two_sum a"), as_tensor(b, "fast_two_sum b")
    s = a + b
    err = b - (s - a)
    return s, err


def _split_array(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split fp16 values exactly into (hi, lo) of at most 5 significant bits each.

    ``hi`` is the value rounded to 5 bits (nearest, ties to even), so ``lo = v - hi`` is
    a multiple of ulp(v) with ``|lo| <= 32 ulp(v)``: 5 bits. Near 65504, where that
    rounding would reach 65536, ``hi`` is rounded down instead (``lo`` then needs 6 bits;
    only products with such a part may lose their last bit). Too small a ``hi`` step for
    the subnormal grid is absorbed by rounding ``hi`` to fp16: ``lo`` stays exact.
    """
    v = np.asarray(values, dtype=np.float64)
    mant, expo = np.frexp(v)
    scale = float(2**SPLIT_BITS)
    hi = np.ldexp(np.round(mant * scale) / scale, expo)
    down = np.ldexp(np.trunc(mant * scale) / scale, expo)
    hi = np.where(np.abs(hi) > FP16_MAX, down, hi)
    hi = round_fp16(hi).astype(np.float64)
    return hi, v - hi


def _is_zero(t: Tensor) -> bool:
    """A weight known at build time to be all zeros (an absent ``lo`` limb)."""
    return t.op == "weight" and not np.any(t.value)


def _zeros(shape) -> Tensor:
    return weight(np.zeros(shape, np.float16))


def split(a, prescale: bool = False) -> tuple[Tensor, Tensor]:
    """Veltkamp's split: ``(hi, lo)`` with ``hi + lo == a`` exactly, each at most 5 bits.

    ``c = 65 * a; hi = c - (c - a); lo = a - hi``: 4 fp16 ops, for ``|a| < 1008`` (past
    it ``65 * a`` is inf and the parts NaN). ``prescale=True`` computes the same split on
    ``a * 2**-6`` and scales ``hi`` back (6 ops): finite for ``|a| < 64512``, error-free
    for ``|a| >= 2**-8``. A weight is split in NumPy at build time (0 ops, any range).

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((1,))
        >>> hi, lo = split(x)
        >>> [float(v[0]) for v in af.compile([hi, lo])(np.array([1000.5]))]
        [992.0, 8.5]
    """
    a = as_tensor(a, "split a")
    if a.op == "weight":
        hi, lo = _split_array(a.value)
        return weight(hi), weight(lo)
    if prescale:
        small = a * PRESCALE  # exact for |a| >= 2**-8
        c = a * (1.0 + PRESCALE)  # = 65 * small, rounded once, finite below 64512
        hi = (c - (c - small)) * (1.0 / PRESCALE)
    else:
        c = a * float(SPLIT_FACTOR)
        hi = c - (c - a)
    return hi, a - hi


def two_product(a, b, prescale: bool = False) -> tuple[Tensor, Tensor]:
    """Dekker's TwoProduct: ``(p, err)`` with ``p = fl(a * b)`` and ``p + err == a * b``
    exactly, in 17 fp16 ops (21 with ``prescale=True``; fewer for weight operands, which
    are split at build time).

    Both operands are split (:func:`split`); the four partial products are exact, and
    ``err = ((a_hi b_hi - p) + a_hi b_lo + a_lo b_hi) + a_lo b_lo`` accumulates them
    without rounding error. Needs ``|a|, |b| < 1008`` (64512 prescaled) and ``|a b|``
    above about ``2**-4`` for an exact error term (see the module docstring).

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((1,))
        >>> p, e = two_product(x, x)
        >>> [float(v[0]) for v in af.compile([p, e])(np.array([1.0 + 2.0**-10]))]
        [1.001953125, 9.5367431640625e-07]
    """
    a, b = as_tensor(a, "two_product a"), as_tensor(b, "two_product b")
    p = a * b
    a_hi, a_lo = split(a, prescale)
    b_hi, b_lo = (a_hi, a_lo) if b is a else split(b, prescale)
    err = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, err


# ---- the paired value ------------------------------------------------------------------


class Paired:
    """An fp16 pair ``hi + lo`` (~22 bits) whose operations are fp16 graph ops.

    Build one with :func:`paired` (an fp16 tensor with a zero ``lo``, or two tensors) or
    :meth:`from_array` (a float64 array split into two weights). ``+``, ``-`` and ``*``
    take a Paired, a Tensor, or an array/scalar (split into a pair like
    :meth:`from_array`, so a constant keeps its sub-ulp bits) on either side; results
    are normalized pairs. ``to_tensor()`` gives the fp16 value; ``dot`` and ``sum``
    contract through ``@ ones`` (never reduce_sum).

    A plain Tensor on the *left* of ``+ - *`` with a Paired on the right raises (Tensor's
    operators do not yet defer); write ``paired(x) - p`` instead.

    Attributes:
        hi: the leading fp16 tensor.
        lo: the trailing fp16 tensor, same shape (a zero weight when absent).

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((3,), name="x")
        >>> y = (paired(x) * 0.1 + 1000.0).to_tensor()
        >>> af.compile(y)(np.array([1.0, 2.0, 3.0]))
        array([1000. , 1000. , 1000.5], dtype=float32)
    """

    __slots__ = ("hi", "lo")
    __array_ufunc__ = None  # ndarray (op) Paired defers to Paired's reflected operators

    def __init__(self, hi, lo=None):
        hi = as_tensor(hi, "Paired hi")
        lo = _zeros(hi.shape) if lo is None else as_tensor(lo, "Paired lo")
        if lo.shape != hi.shape:
            raise ShapeError(
                f"Paired: hi has shape {hi.shape} but lo has shape {lo.shape}; the limbs "
                "must have the same shape (broadcast lo explicitly first)"
            )
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "lo", lo)

    def __setattr__(self, key, value):
        raise AttributeError("Paired is immutable; build a new value instead")

    @classmethod
    def from_array(cls, values, name: str | None = None) -> Paired:
        """Split a float array (or scalar) into two fp16 weights: ``hi = fp16(x)``,
        ``lo = fp16(x - hi)``; ``hi + lo`` is within ``2**-22 |x|`` of ``x`` (for
        ``|x| >= 2**-2``; see the range walls). Named ``name.hi`` / ``name.lo`` when
        ``name`` is given. Integer, bool and complex arrays raise ``DTypeError`` and
        values past fp16's range ``WeightRangeError``, as :func:`~aneforge.weight` does.

        Example:
            >>> p = Paired.from_array(1000.3)
            >>> float(p.hi.value), float(p.lo.value)
            (1000.5, -0.199951171875)
        """
        x = np.asarray(_as_float_array(values, name or "paired"), dtype=np.float64)
        hi_name, lo_name = (None, None) if name is None else (f"{name}.hi", f"{name}.lo")
        hi = weight(x, name=hi_name)  # rounds to fp16; raises past its range
        rest = x - hi.value.astype(np.float64)
        with np.errstate(invalid="ignore"):
            lo = np.where(np.isfinite(rest), rest, 0.0)
        return cls(hi, weight(lo, name=lo_name))

    # ---- introspection ---------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of both limbs."""
        return self.hi.shape

    @property
    def ndim(self) -> int:
        """The rank of both limbs."""
        return self.hi.ndim

    @property
    def limbs(self) -> tuple[Tensor, Tensor]:
        """``(hi, lo)``, e.g. to compile both and read the pair back exactly."""
        return self.hi, self.lo

    def __repr__(self) -> str:
        return f"Paired(shape={self.shape}, hi={self.hi.op}, lo={self.lo.op})"

    def __bool__(self):
        raise TypeError("a Paired has no truth value until it runs")

    # ---- conversion ------------------------------------------------------------------
    def to_tensor(self) -> Tensor:
        """The fp16 value: an explicit ``hi + lo`` add node (rounded once), so nothing
        downstream can drop the ``lo`` computation."""
        return make("add", self.hi, self.lo)

    # ---- arithmetic ------------------------------------------------------------------
    def __add__(self, other):
        return _add(self, _operand(other), sign=1)

    def __radd__(self, other):
        return _add(_operand(other), self, sign=1)

    def __sub__(self, other):
        return _add(self, _operand(other), sign=-1)

    def __rsub__(self, other):
        return _add(_operand(other), self, sign=-1)

    def __mul__(self, other):
        return self.mul(other)

    def __rmul__(self, other):
        return _operand(other).mul(self)

    def __neg__(self):
        return self.neg()

    def neg(self) -> Paired:
        """``-(hi + lo)``: one neg per limb (exact)."""
        lo = self.lo if _is_zero(self.lo) else make("neg", self.lo)
        return Paired(make("neg", self.hi), lo)

    def scale(self, factor: float) -> Paired:
        """Multiply both limbs by a power of two (exact barring over/underflow): the way
        to move values into the range the products need.

        Example:
            >>> p = Paired.from_array(3000.25).scale(2.0**-4)
            >>> p.hi.op, p.lo.op
            ('mul', 'mul')
        """
        numeric = isinstance(factor, (int, float, np.integer, np.floating))
        if not numeric or isinstance(factor, (bool, np.bool_)):
            raise AttributeValueError(
                f"Paired.scale: factor must be a number (a power of two), got {describe(factor)}"
            )
        try:
            f = float(factor)
        except OverflowError:
            f = math.inf
        mant, _ = math.frexp(f) if math.isfinite(f) else (0.0, 0)
        if not (math.isfinite(f) and abs(mant) == 0.5):
            raise AttributeValueError(
                f"Paired.scale: factor must be a power of two (2.0**k), got {describe(factor)}"
            )
        lo = self.lo if _is_zero(self.lo) else self.lo * f
        return Paired(self.hi * f, lo)

    def mul(self, other, prescale: bool = False) -> Paired:
        """``self * other`` as a normalized pair: TwoProduct of the ``hi`` limbs plus
        the cross terms ``hi_a lo_b + lo_a hi_b`` (``lo_a lo_b``, about ``2**-22`` of the
        product, is dropped). ``prescale=True`` widens the split's range (see
        :func:`split`)."""
        b = _operand(other)
        p, err = two_product(self.hi, b.hi, prescale)
        cross = [t for t in (_cross(self.hi, b.lo), _cross(b.hi, self.lo)) if t is not None]
        if not cross:
            return Paired(p, err)  # TwoProduct's output is already normalized
        extra = cross[0] if len(cross) == 1 else cross[0] + cross[1]
        return Paired(*fast_two_sum(p, err + extra))

    def dot(self, other, axis: int = -1, prescale: bool = False) -> Paired:
        """Compensated dot product along ``axis`` (operands broadcast first).

        TwoProduct of every ``hi`` pair, the cross terms as extra streams, then the
        product, error and cross streams are accumulated by the wide matmul accumulator
        (``@ ones``), twice: ``hi = fp16(S)`` over the concatenated streams, and ``lo =
        fp16(S - hi)`` over the streams followed by ``hi`` against ``[1, ..., 1, -1]``
        (the same float32 sum, then the exact float32 difference). Never reduce_sum: a
        narrow sum would re-inject the error the compensation removed.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((4,), name="x")
            >>> d = paired(x).dot(np.array([1.0, -1.0, 1.0, -1.0]))
            >>> float(af.compile(d.to_tensor())(np.array([1000.5, 1000.0, 0.25, 0.125])))
            0.625
        """
        b = _operand(other)
        p, err = two_product(self.hi, b.hi, prescale)
        streams = [p, err]
        streams += [t for t in (_cross(self.hi, b.lo), _cross(b.hi, self.lo)) if t is not None]
        return _accumulate(streams, axis)

    def sum(self, axis: int = -1) -> Paired:
        """Sum along ``axis`` through the wide accumulator: ``hi`` and ``lo`` streams,
        two matmuls against ones, as in :meth:`dot`.

        Example:
            >>> import numpy as np, aneforge as af
            >>> x = af.input((4096,), name="x")
            >>> float(af.compile(paired(x).sum().to_tensor())(np.ones(4096)))
            4096.0
        """
        streams = [self.hi] if _is_zero(self.lo) else [self.hi, self.lo]
        return _accumulate(streams, axis)


def _operand(value) -> Paired:
    """A Paired from a Paired, a Tensor (zero lo) or an array/scalar (split in NumPy)."""
    if isinstance(value, Paired):
        return value
    if isinstance(value, Tensor):
        return Paired(value)
    if isinstance(value, (numbers.Real, np.ndarray, np.generic, list, tuple)):
        return Paired.from_array(value)
    raise TypeError(f"paired arithmetic: unsupported operand type {type(value).__name__}")


def _cross(other_hi: Tensor, lo: Tensor) -> Tensor | None:
    """``other_hi * lo``, or None when ``lo`` is an absent (zero) limb."""
    return None if _is_zero(lo) else other_hi * lo


def _sum_with_error(a: Paired, b: Paired, sign: int) -> tuple[Tensor, Tensor, bool]:
    """``a + sign * b`` as (s, e) with s + e the compensated result; the flag says
    whether lo limbs entered e (then (s, e) may need renormalizing)."""
    s, err = two_sum(a.hi, b.hi) if sign > 0 else two_diff(a.hi, b.hi)
    la = None if _is_zero(a.lo) else a.lo
    lb = None if _is_zero(b.lo) else b.lo
    if la is None and lb is None:
        return s, err, False
    if la is not None and lb is not None:
        lows = la + lb if sign > 0 else la - lb
        return s, err + lows, True
    if la is not None:
        return s, err + la, True
    return s, (err + lb if sign > 0 else err - lb), True


def _add(a: Paired, b: Paired, sign: int) -> Paired:
    """Dekker's pair addition: TwoSum of the hi limbs, the lo limbs added into the
    error, then FastTwoSum to renormalize (its exponent condition holds: when the hi
    limbs cancel, their sum is exact and its exponent reaches that of the error)."""
    s, e, mixed = _sum_with_error(a, b, sign)
    return Paired(*fast_two_sum(s, e)) if mixed else Paired(s, e)


def _accumulate(streams: list[Tensor], axis: int) -> Paired:
    """Sum ``streams`` (same shape) over ``axis`` with two wide matmuls (see dot)."""
    ndim = streams[0].ndim
    if ndim == 0:
        raise ShapeError("paired dot/sum: needs at least one axis to contract")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"paired dot/sum: axis {axis} is out of range for rank {ndim}")
    axis %= ndim
    if axis != ndim - 1:
        perm = tuple(d for d in range(ndim) if d != axis) + (axis,)
        streams = [make("transpose", t, perm=perm) for t in streams]
    z = streams[0] if len(streams) == 1 else make("concat", *streams, axis=-1)
    n = z.shape[-1]
    hi = z @ weight(np.ones((n, 1), np.float16))
    signs = np.ones((n + 1, 1), np.float16)
    signs[-1] = -1.0
    lo = make("concat", z, hi, axis=-1) @ weight(signs)
    out_shape = z.shape[:-1]
    return Paired(make("reshape", hi, shape=out_shape), make("reshape", lo, shape=out_shape))


# ---- public entry points ---------------------------------------------------------------


def paired(x, lo=None) -> Paired:
    """A :class:`Paired` value: ``paired(t)`` for an fp16 tensor (zero ``lo``),
    ``paired(hi, lo)`` from two tensors (or arrays), ``paired(array)`` splits a float
    array like :meth:`Paired.from_array`; a Paired is returned as is.

    Example:
        >>> import aneforge as af
        >>> paired(af.input((2, 3))).shape
        (2, 3)
    """
    if isinstance(x, Paired):
        if lo is not None:
            raise TypeError("paired: a Paired already has its lo limb")
        return x
    if lo is not None:
        return Paired(x, lo)
    if isinstance(x, Tensor):
        return Paired(x)
    return Paired.from_array(x)


def paired_subtract(a, b) -> Tensor:
    """The best fp16 value of one compensated ``a - b`` (Paired, Tensor or array
    operands), as a plain fp16 tensor to drop into a graph at a cancellation hotspot.

    TwoSum of the ``hi`` limbs, the ``lo`` difference added into the error, then one
    rounding ``fl(s + e)``: 9 ops for two pairs, 8 for a pair and a tensor, 7 for two
    tensors. With two plain fp16 tensors the result is ``a - b`` bit for bit (already the
    best fp16 value); the gain comes from operands carrying ``lo`` limbs, e.g. two large
    nearly-equal terms computed upstream in higher precision (a CFG difference).

    Example:
        >>> import numpy as np, aneforge as af
        >>> c = paired(af.input((1,), name="c_hi"), af.input((1,), name="c_lo"))
        >>> u = paired(af.input((1,), name="u_hi"), af.input((1,), name="u_lo"))
        >>> d = af.compile(paired_subtract(c, u))
        >>> float(d(np.array([1000.5]), np.array([-0.2]), np.array([1000.0]), np.array([-0.1]))[0])
        0.39990234375
    """
    s, e, _ = _sum_with_error(_operand(a), _operand(b), sign=-1)
    return s + e
