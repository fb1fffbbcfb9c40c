"""Helpers shared by the op definitions: the fused family's record factory, shape rules,
axis handling, kernel wrappers."""

from __future__ import annotations

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..arith import as_arith
from ..facts import EVERY_FAMILY, ONLY_LOWERING, Role
from ..fp16 import exact, round_fp16
from ..registry import OpDef, arg_name, get_op, no_flops


def fused_op(
    name,
    arity,
    attrs,
    shape,
    emulate,
    exact,
    *,
    doc,
    sign,
    range,  # noqa: A002
    flags=(),
    flops=no_flops,
    narrow=None,
    role=Role.NONE,
    weight_operand=None,
    min_family=EVERY_FAMILY,
    below_floor=None,
    width_begin=None,
    overflow_fix=None,
    tiled=None,
    nest=None,
    min_arity=1,
    max_arity=None,
) -> OpDef:
    """The record of one fused op (kind ``"fused"``), every fact declared.

    ``sign`` and ``range`` have no family default: each op states them. The other facts
    default to "none": no narrow sum, not a contraction, no weight operand, native on
    every family, no crop-DMA read. A fused op is its own lowering
    (``route=ONLY_LOWERING``) and is priced by the analytic model (``work=None``).
    See :class:`~aneforge.graph.registry.OpDef` for each field.
    """
    return OpDef(
        name,
        "fused",
        arity,
        attrs,
        shape,
        emulate,
        exact,
        flops,
        doc=doc,
        flags=flags,
        range=range,
        min_arity=min_arity,
        max_arity=max_arity,
        sign=sign,
        narrow=narrow,
        role=role,
        weight_operand=weight_operand,
        min_family=min_family,
        below_floor=below_floor,
        route=ONLY_LOWERING,
        work=None,
        width_begin=width_begin,
        overflow_fix=overflow_fix,
        tiled=tiled,
        nest=nest,
    )


def broadcast_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``; a clash names the op and the shapes."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(
            f"{op}: shapes {', '.join(map(str, shapes))} do not broadcast together; "
            "reshape or expand_dims one operand so trailing dimensions match or are 1"
        ) from None


def norm_axis(op: str, axis: int, ndim: int) -> int:
    """Normalize one axis index into ``[0, ndim)``."""
    if not -ndim <= axis < ndim:
        raise AttributeValueError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def norm_axes(op: str, axes, ndim: int, key: str = "axes") -> tuple[int, ...]:
    """Normalize ``axes`` (None = all) into a sorted tuple; duplicates raise. Messages
    name op ``op``'s attribute ``key`` as its public argument (:func:`arg_name`).

    Example:
        >>> norm_axes("sum", (-1, 0), 3)
        (0, 2)
        >>> norm_axes("sum", (3,), 2)
        Traceback (most recent call last):
        ...
        aneforge.errors.AttributeValueError: sum: axis 3 is out of range for rank 2
    """
    if axes is None:
        return tuple(range(ndim))
    axes = tuple(axes)
    bad = [a for a in axes if not -ndim <= a < ndim]
    if bad:
        given = f"{arg_name(op, key)} {axes[0] if len(axes) == 1 else axes}"
        what = "" if len(axes) == 1 else f": axis {bad[0]}"
        raise AttributeValueError(f"{op}: {given}{what} is out of range for rank {ndim}")
    out = [norm_axis(op, a, ndim) for a in axes]
    if len(set(out)) != len(out):
        raise AttributeValueError(f"{op}: {arg_name(op, key)} {axes} repeats an axis")
    return tuple(sorted(out))


def rounded(fn, float32_exact: bool = False):
    """Turn a float64 function of float64 arrays into an fp16 kernel rounded once.

    ``float32_exact=True`` evaluates ``fn`` in float32 instead, for the ops where that
    gives the same bits: + - * / and sqrt of fp16 operands rounded to float32 and then
    to fp16 equal the correctly rounded fp16 result (float32's 24 bits >= 2*11 + 2, so
    the double rounding is innocuous), and max, min, abs, negation, comparisons,
    selection and rounding to integers are exact. It halves the memory traffic.
    """
    widen = (lambda x: np.asarray(x, dtype=np.float32)) if float32_exact else exact

    def emulate(inputs, attrs, arith=None):
        with np.errstate(all="ignore"):
            return round_fp16(fn(*[widen(x) for x in inputs], **attrs))

    return emulate


def in_float64(fn):
    """Turn a float64 function of float64 arrays into an exact-executor kernel."""

    def run(inputs, attrs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(*inputs, **attrs), dtype=np.float64)

    return run


def same_shape(in_shapes, attrs):
    """Shape rule of unary elementwise ops."""
    return in_shapes[0]


def spatial_tuple(op: str, value, nd: int, key: str) -> tuple[int, ...]:
    """Broadcast op ``op``'s int-or-tuple attribute ``key`` to ``nd`` spatial dims; a
    message names it as the public argument (:func:`arg_name`)."""
    if len(value) == 1:
        return value * nd
    if len(value) != nd:
        raise AttributeValueError(
            f"{op}: {arg_name(op, key)} {value} needs 1 or {nd} values for {nd} spatial dim(s)"
        )
    return value


def pads(op: str, value, nd: int, key: str = "pad") -> tuple[tuple[int, int], ...]:
    """Padding as ((before, after), ...) per spatial dim from 1, nd or 2*nd ints: op
    ``op``'s attribute ``key``, named in a message as its public argument.

    Example:
        >>> pads("conv", (1, 2), 2)
        ((1, 1), (2, 2))
        >>> try:
        ...     pads("conv", (1, 2, 3), 2)
        ... except AttributeValueError as err:
        ...     print(err)
        conv: padding (1, 2, 3) needs 1, 2 or 4 values (begins then ends)
    """
    if len(value) == 1:
        return ((value[0], value[0]),) * nd
    if len(value) == nd:
        return tuple((p, p) for p in value)
    if len(value) == 2 * nd:
        return tuple((value[i], value[i + nd]) for i in range(nd))
    raise AttributeValueError(
        f"{op}: {arg_name(op, key)} {value} needs 1, {nd} or {2 * nd} values (begins then ends)"
    )


class Steps:
    """The arithmetic a kernel body runs with: rounded fp16 steps or exact float64.

    One body serves both executors: :func:`step_kernels` runs it with ``Steps(True, arith)``
    for the emulator and ``Steps(False)`` for the float64 reference. Values are always
    carried as float64 arrays; with ``fp16=True`` each :meth:`step` rounds to fp16 (the
    values stay exactly representable in fp16), constants are held in fp16, :meth:`total`
    and :meth:`mean` use the narrow accumulator and :meth:`matmul` the wide-accumulator
    backend, both those of the executor's arithmetic policy ``arith`` (an
    :class:`~aneforge.graph.arith.Arith`). With ``fp16=False`` every method is exact.

    Example:
        >>> import numpy as np
        >>> from aneforge.graph.ops.common import Steps
        >>> x = np.array([0.5, 2049.0])
        >>> Steps(True).step(x).tolist(), Steps(False).step(x).tolist()
        ([0.5, 2048.0], [0.5, 2049.0])
        >>> float(Steps(True).total(np.ones(4096), 0)), Steps(True).const(0.1)
        (2048.0, 0.0999755859375)
    """

    def __init__(self, fp16: bool, arith=None):
        self.fp16 = fp16
        self.arith = as_arith(arith)

    def step(self, value):
        """One elementwise op: rounded once to fp16, or kept exact."""
        value = np.asarray(value, dtype=np.float64)
        return round_fp16(value).astype(np.float64) if self.fp16 else value

    def const(self, value: float) -> float:
        """A constant attribute as the engine holds it (fp16) or as given."""
        return float(round_fp16(value)) if self.fp16 else float(value)

    def total(self, x, axis, keepdims=False):
        """Sum over ``axis``: the narrow fp16 accumulator (of ``x`` rounded to fp16, the
        identity on fp16 values), or an exact float64 sum."""
        if self.fp16:
            total = self.arith.narrow_sum(round_fp16(x), axis, keepdims=keepdims)
            return total.astype(np.float64)
        return np.sum(x, axis=axis, keepdims=keepdims)

    def mean(self, x, axes):
        """Mean over ``axes``, kept as size-1 dims: the narrow sum divided by the count
        and rounded once, or the exact float64 mean."""
        if self.fp16:
            n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
            return self.step(self.total(x, axes, keepdims=True) / n)
        return np.mean(x, axis=axes, keepdims=True)

    def matmul(self, a3, b3):
        """(B, M, K) @ (B, K, N): the wide-accumulator backend, or float64 matmul."""
        if self.fp16:
            a16 = np.ascontiguousarray(round_fp16(a3))
            b16 = np.ascontiguousarray(round_fp16(b3))
            return np.asarray(self.arith.matmul(a16, b16), dtype=np.float64)
        return np.matmul(a3, b3)

    def softmax_last(self, x):
        """Softmax over the last axis, by the registered softmax op's own kernels."""
        softmax = get_op("softmax")
        if self.fp16:
            y = softmax.emulate([round_fp16(x)], {"axis": -1}, self.arith)
            return np.asarray(y, dtype=np.float64)
        return softmax.exact([x], {"axis": -1})


def step_kernels(body):
    """(emulate, exact) kernels of a body ``body(steps, inputs, attrs) -> float64``.

    Inputs reach the body as float64 arrays and ``steps`` is a :class:`Steps`; the
    emulator's result is rounded to fp16 once more (the identity after a final step).
    """

    def emulate(inputs, attrs, arith=None):
        with np.errstate(all="ignore"):
            args = [np.asarray(x, dtype=np.float64) for x in inputs]
            return round_fp16(body(Steps(True, arith), args, attrs))

    def exact(inputs, attrs):
        with np.errstate(all="ignore"):
            args = [np.asarray(x, dtype=np.float64) for x in inputs]
            return np.asarray(body(Steps(False), args, attrs), dtype=np.float64)

    return emulate, exact
