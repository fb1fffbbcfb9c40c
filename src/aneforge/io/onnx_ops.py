"""The ONNX op table: one handler per ONNX op type, written with aneforge ops.

A handler ``fn(cx, node, ins, at) -> outputs`` gets the importer context ``cx`` (see
:class:`~aneforge.io.onnx_import._Cx`), the ONNX node, its input values (graph Tensors,
host constants, or None for absent optional inputs) and its attributes; it returns one
value per node output. Data operands go through ``cx.t`` (constants become fp16
weights); parameter operands (shapes, axes, pads, scales, clip bounds) through
``cx.arr`` / ``cx.ints``, which refuse values computed on the device. A handler raises
:class:`~aneforge.io.onnx_import.NotExpressible` for attribute combinations the engine
cannot express, naming the attribute and value.

Numerics: each ONNX op maps to the aneforge op of the same meaning (one fp16 rounding
per elementwise op, wide accumulators in contractions, narrow ones in reductions);
composite ONNX ops (HardSwish, LogSoftmax, Selu, ...) are spelled as the few aneforge
ops of their definition, each rounded once. Pure movement (Gather with constant indices,
Expand, Tile, reversed slices, reflect padding, nearest resizing) is exact. Convolution,
pooling and resizing live in :mod:`.onnx_spatial`, shape and movement ops (and the
scatters, Range, DequantizeLinear) in :mod:`.onnx_shape`, contractions, reductions,
softmax, index ops and normalizations in :mod:`.onnx_math`, and :mod:`.onnx_sequence`
the sequence ops; this module holds the registry, the shared helpers and the elementwise
ops, and :mod:`.onnx_table` loads every family into one table.
"""

from __future__ import annotations

import math

import numpy as np

from .onnx_errors import NotExpressible
from .onnx_values import Host

HANDLERS: dict = {}
#: Ops whose evaluation on host constants moves values without arithmetic, so a float
#: constant passing through them needs no fp16 recipe.
EXACT_ON_HOST = {
    "Identity", "Reshape", "Flatten", "Transpose", "Concat", "Slice", "Squeeze",
    "Unsqueeze", "Expand", "Tile", "Split", "Gather", "GatherElements", "GatherND",
    "Cast", "CastLike", "Shape", "Size", "Constant", "ConstantOfShape", "Dropout",
    "Pad", "DepthToSpace", "SpaceToDepth", "Compress", "Trilu", "EyeLike", "OneHot",
}  # fmt: skip


#: Why ONNX ops without a handler cannot be expressed (shown in the import error).
UNSUPPORTED_REASONS = {
    **dict.fromkeys(
        ("Acos", "Asin", "Atan", "Acosh", "Asinh", "Atanh"),
        "the engine has no inverse trigonometric or hyperbolic functions, and forms built "
        "from exp/log/sqrt lose their relative accuracy in fp16 near 0",
    ),
    "Det": "a determinant needs pivoting (data-dependent control flow)",
    "DeformConv": "sampling at offsets computed on the device is a data-dependent gather",
    "NonZero": "its output shape depends on the data",
    "NonMaxSuppression": "its output shape depends on the data",
    "Unique": "its output shape depends on the data",
    "Bernoulli": "random sampling is not expressible",
    "Multinomial": "random sampling is not expressible",
    **dict.fromkeys(
        ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"),
        "random sampling is not expressible",
    ),
}


def handles(*names):
    """Register the decorated function as the handler of ONNX ops ``names``."""

    def deco(fn):
        for name in names:
            if name in HANDLERS:
                raise RuntimeError(f"ONNX op {name} has two handlers")
            HANDLERS[name] = fn
        return fn

    return deco


# ---- shared helpers -------------------------------------------------------------------


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[0, rank)``; out of range is not expressible."""
    if not -rank <= axis < rank:
        raise NotExpressible(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def take(cx, x, idx, axis: int):
    """The slices of ``x`` at ``idx`` along ``axis``: nothing, a slice or a gather."""
    x = cx.t(x)
    idx = [int(i) for i in idx]
    d = x.shape[axis]
    if idx == list(range(d)):
        return x
    steps = {b - a for a, b in zip(idx, idx[1:])}
    if len(idx) == 1 or (len(steps) == 1 and min(steps) > 0):
        step = steps.pop() if steps else 1
        return slice_axis(cx, x, axis, idx[0], idx[-1] + 1, step)
    return cx.op("gather", x, indices=tuple(idx), axis=axis)


def slice_axis(cx, x, axis: int, start: int, stop: int, step: int = 1):
    """``x[..., start:stop:step, ...]`` along one axis (positive step)."""
    x = cx.t(x)
    begins, ends = [0] * x.ndim, list(x.shape)
    begins[axis], ends[axis] = start, stop
    steps = [1] * x.ndim
    steps[axis] = step
    return cx.op("slice", x, begins=tuple(begins), ends=tuple(ends), steps=tuple(steps))


def reshape(cx, x, shape):
    """``x`` in ``shape`` (no node when it already has it)."""
    x = cx.t(x)
    shape = tuple(int(d) for d in shape)
    return x if x.shape == shape else cx.op("reshape", x, shape=shape)


def broadcast_to(cx, x, shape):
    """``x`` repeated to ``shape`` (NumPy broadcasting) by exact gathers."""
    x = cx.t(x)
    shape = tuple(int(d) for d in shape)
    if x.ndim < len(shape):
        x = reshape(cx, x, (1,) * (len(shape) - x.ndim) + x.shape)
    for axis, (have, want) in enumerate(zip(x.shape, shape)):
        if have == 1 and want != 1:
            x = cx.op("gather", x, indices=(0,) * want, axis=axis)
    return x


def full_like(cx, shape, value, label):
    """A constant weight of ``shape`` filled with ``value``."""
    return cx.t(Host(np.full(shape, value, dtype=np.float64), label=label))


def pad_constant(cx, x, pads, value):
    """Pad each axis by ``pads[axis] = (before, after)`` with ``value``; negative
    amounts crop."""
    x = cx.t(x)
    for axis, (before, after) in enumerate(pads):
        if before < 0 or after < 0:
            d = x.shape[axis]
            x = slice_axis(cx, x, axis, max(-before, 0), d - max(-after, 0))
        parts = []
        for amount in (before, after):
            shape = list(x.shape)
            shape[axis] = amount
            parts.append(full_like(cx, shape, value, "pad value") if amount > 0 else None)
        if parts[0] is not None or parts[1] is not None:
            srcs = [p for p in (parts[0], x, parts[1]) if p is not None]
            x = cx.op("concat", *srcs, axis=axis)
    return x


def reduce_axes(cx, node, ins, at, x, axes_from_input: bool):
    """(axes or None for all, keepdims) of an ONNX reduction; None axes with noop
    returns ``(), keepdims``."""
    if axes_from_input and len(ins) > 1 and ins[1] is not None:
        axes = cx.ints(ins[1], "axes")
    else:
        axes = list(at.get("axes", []))
    keep = bool(at.get("keepdims", 1))
    if not axes:
        if at.get("noop_with_empty_axes", 0):
            return (), keep
        return None, keep
    return tuple(sorted(norm_axis(a, x.ndim, "axes") for a in axes)), keep


def keep_shape(x, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


# ---- elementwise ----------------------------------------------------------------------

_UNARY = {
    "Abs": "abs", "Neg": "neg", "Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "inverse", "Sin": "sin",
    "Cos": "cos", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round",
    "Sign": "sign", "Softplus": "softplus",
}  # fmt: skip
_BINARY = {
    "Add": "add", "Sub": "sub", "Mul": "mul", "Pow": "pow", "Equal": "equal",
    "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "mul", "Or": "maximum", "Xor": "not_equal",
}  # fmt: skip


@handles(*_UNARY)
def _unary(cx, node, ins, at):
    return [cx.op(_UNARY[node.op_type], ins[0])]


@handles(*_BINARY)
def _binary(cx, node, ins, at):
    return [cx.op(_BINARY[node.op_type], ins[0], ins[1])]


def trunc(cx, x):
    """Round toward zero (exact): ceil below zero, floor above."""
    return cx.op("select", cx.op("less", x, 0.0), cx.op("ceil", x), cx.op("floor", x))


@handles("Div")
def _div(cx, node, ins, at):
    y = cx.op("div", ins[0], ins[1])
    if _is_int_type(cx.type_of(node.output[0])):
        y = trunc(cx, y)  # integer division truncates
    return [y]


def _is_int_type(elem) -> bool:
    return elem in (2, 3, 4, 5, 6, 7, 12, 13)  # the ONNX integer element types


@handles("Not")
def _not(cx, node, ins, at):
    return [cx.op("equal", ins[0], 0.0)]


@handles("Where")
def _where(cx, node, ins, at):
    return [cx.op("select", ins[0], ins[1], ins[2])]


@handles("IsNaN")
def _isnan(cx, node, ins, at):
    return [cx.op("not_equal", ins[0], ins[0])]


@handles("IsInf")
def _isinf(cx, node, ins, at):
    pos, neg = at.get("detect_positive", 1), at.get("detect_negative", 1)
    x = ins[0]
    if pos and neg:
        return [cx.op("equal", cx.op("abs", x), np.inf)]
    if pos or neg:
        return [cx.op("equal", x, np.inf if pos else -np.inf)]
    return [cx.op("mul", x, 0.0)]  # NaN stays NaN here; ONNX says all false


@handles("Max", "Min", "Sum", "Mean")
def _nary(cx, node, ins, at):
    name = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}[node.op_type]
    vals = [v for v in ins if v is not None]
    y = cx.t(vals[0])
    for v in vals[1:]:
        y = cx.op(name, y, v)
    if node.op_type == "Mean" and len(vals) > 1:
        y = cx.op("div", y, float(len(vals)))
    return [y]


def _bound(cx, value, what):
    if value is None:
        return None
    if not cx.is_const(value):
        return "tensor"
    v = float(cx.arr(value, what).reshape(-1)[0])
    return v if math.isfinite(v) else None


@handles("Clip")
def _clip(cx, node, ins, at):
    x = ins[0]
    lo = _bound(cx, ins[1] if len(ins) > 1 else None, "min")
    hi = _bound(cx, ins[2] if len(ins) > 2 else None, "max")
    if lo == "tensor" or hi == "tensor":  # bounds computed on the device
        y = cx.t(x)
        if ins[1] is not None:
            y = cx.op("maximum", y, ins[1])
        if len(ins) > 2 and ins[2] is not None:
            y = cx.op("minimum", y, ins[2])
        return [y]
    if lo is None and hi is None:
        return [cx.t(x)]
    return [cx.op("clip", x, lo=lo, hi=hi)]


@handles("LeakyRelu")
def _leaky(cx, node, ins, at):
    return [cx.op("leaky_relu", ins[0], alpha=at.get("alpha", 0.01))]


@handles("Elu")
def _elu(cx, node, ins, at):
    return [cx.op("elu", ins[0], alpha=at.get("alpha", 1.0))]


@handles("Selu")
def _selu(cx, node, ins, at):
    alpha = at.get("alpha", 1.67326319217681884765625)
    gamma = at.get("gamma", 1.05070102214813232421875)
    return [cx.op("mul", cx.op("elu", ins[0], alpha=alpha), gamma)]


@handles("Celu")
def _celu(cx, node, ins, at):
    alpha = at.get("alpha", 1.0)
    x = ins[0]
    if alpha == 1.0:
        return [cx.op("elu", x)]
    neg = cx.op("mul", cx.op("elu", cx.op("div", x, alpha)), alpha)
    return [cx.op("select", cx.op("greater", x, 0.0), x, neg)]


@handles("HardSigmoid")
def _hard_sigmoid(cx, node, ins, at):
    y = cx.op("mul", ins[0], at.get("alpha", 0.2))
    return [cx.op("clip", cx.op("add", y, at.get("beta", 0.5)), lo=0.0, hi=1.0)]


@handles("HardSwish")
def _hard_swish(cx, node, ins, at):
    gate = cx.op("div", cx.op("relu6", cx.op("add", ins[0], 3.0)), 6.0)
    return [cx.op("mul", ins[0], gate)]


@handles("Gelu")
def _gelu(cx, node, ins, at):
    return [cx.op("gelu", ins[0], approximate=at.get("approximate", "none"))]


@handles("Softsign")
def _softsign(cx, node, ins, at):
    return [cx.op("div", ins[0], cx.op("add", cx.op("abs", ins[0]), 1.0))]


@handles("Mish")
def _mish(cx, node, ins, at):
    return [cx.op("mul", ins[0], cx.op("tanh", cx.op("softplus", ins[0])))]


@handles("Swish")
def _swish(cx, node, ins, at):
    alpha = at.get("alpha", 1.0)
    if alpha == 1.0:
        return [cx.op("silu", ins[0])]
    return [cx.op("mul", ins[0], cx.op("sigmoid", cx.op("mul", ins[0], alpha)))]


@handles("SwiGLU")
def _swiglu(cx, node, ins, at):
    return [cx.op("mul", _swish(cx, node, ins[:1], at)[0], ins[1])]


@handles("ThresholdedRelu")
def _thresholded(cx, node, ins, at):
    x = ins[0]
    return [cx.op("select", cx.op("greater", x, at.get("alpha", 1.0)), x, 0.0)]


@handles("Shrink")
def _shrink(cx, node, ins, at):
    x, lam, bias = ins[0], at.get("lambd", 0.5), at.get("bias", 0.0)
    upper = cx.op("select", cx.op("greater", x, lam), cx.op("sub", x, bias), 0.0)
    return [cx.op("select", cx.op("less", x, -lam), cx.op("add", x, bias), upper)]


@handles("PRelu")
def _prelu(cx, node, ins, at):
    x = ins[0]
    return [cx.op("select", cx.op("less", x, 0.0), cx.op("mul", x, ins[1]), x)]


@handles("Tan")
def _tan(cx, node, ins, at):
    return [cx.op("div", cx.op("sin", ins[0]), cx.op("cos", ins[0]))]


def _cosh(cx, x):
    return cx.op("mul", cx.op("add", cx.op("exp", x), cx.op("exp", cx.op("neg", x))), 0.5)


@handles("Cosh")
def _cosh_op(cx, node, ins, at):
    return [_cosh(cx, ins[0])]


@handles("Mod")
def _mod(cx, node, ins, at):
    x, y = ins[0], ins[1]
    fmod = at.get("fmod", 0)
    q = cx.op("div", x, y)
    # fmod=1: C fmod, x - trunc(x / y) * y, a zero takes the sign of x; fmod=0: Python's
    # mod, x - floor(x / y) * y, a zero takes the sign of y. An infinite divisor leaves
    # x (fmod, or Python's mod when x and y agree in sign or x is 0) or gives y.
    q = trunc(cx, q) if fmod else cx.op("floor", q)
    r = cx.op("sub", x, cx.op("mul", q, y))
    r = cx.op("select", cx.op("equal", r, 0.0), cx.op("mul", x if fmod else y, 0.0), r)
    keep_x = 1.0
    if not fmod:
        same = cx.op("equal", cx.op("sign", x), cx.op("sign", y))
        keep_x = cx.op("maximum", same, cx.op("equal", x, 0.0))
    at_inf = cx.op("select", keep_x, x, y)
    return [cx.op("select", cx.op("equal", cx.op("abs", y), np.inf), at_inf, r)]


@handles("Sinh")
def _sinh(cx, node, ins, at):
    # tanh(x) * cosh(x): both factors are accurate relative to their size (the
    # textbook (e^x - e^-x) / 2 cancels for small |x|).
    return [cx.op("mul", cx.op("tanh", ins[0]), _cosh(cx, ins[0]))]


# ---- control flow with a constant condition ----------------------------------------------


@handles("If")
def _if(cx, node, ins, at):
    """``If`` with a constant condition: the taken branch, inlined in the outer scope."""
    if not isinstance(ins[0], Host):
        raise NotExpressible("the condition of If must be a constant (known at import)")
    taken = bool(np.asarray(ins[0].value).reshape(-1)[0])
    return cx.subgraph(at["then_branch"] if taken else at["else_branch"], {})


# ---- identity, casts, dropout ------------------------------------------------------------


@handles("Identity")
def _identity(cx, node, ins, at):
    return [ins[0]]


@handles("Dropout")
def _dropout(cx, node, ins, at):
    training = len(ins) > 2 and ins[2] is not None and bool(cx.arr(ins[2], "training").any())
    ratio = 0.5 if len(ins) < 2 or ins[1] is None else float(cx.arr(ins[1], "ratio").item())
    if training and ratio != 0.0:
        raise NotExpressible(f"training_mode=True with ratio={ratio:g} (random dropout)")
    x = cx.t(ins[0])
    mask = Host(np.ones(x.shape, dtype=bool), label="dropout mask")
    return [x, mask]


_FLOAT_TYPES = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_BOOL = 9


def _cast_to(cx, x, to, source_type):
    if isinstance(x, Host):  # a constant stays on the host, cast exactly there
        import onnx

        dtype = onnx.helper.tensor_dtype_to_np_dtype(to)
        return Host(np.asarray(x.value).astype(dtype), label=x.label, recipe=x.recipe)
    if to in _FLOAT_TYPES:
        return cx.t(x)
    if to == _BOOL:
        return cx.op("not_equal", x, 0.0)
    if _is_int_type(to):
        if _is_int_type(source_type) or source_type == _BOOL:
            return cx.t(x)
        return trunc(cx, x)
    raise NotExpressible(f"attribute to={to} (a non-numeric type) is not expressible")


@handles("Cast")
def _cast(cx, node, ins, at):
    return [_cast_to(cx, ins[0], at["to"], cx.type_of(node.input[0]))]


@handles("CastLike")
def _castlike(cx, node, ins, at):
    target = ins[1]
    if isinstance(target, Host):
        import onnx

        to = onnx.helper.np_dtype_to_tensor_dtype(target.value.dtype)
    else:
        to = cx.type_of(node.input[1]) or 1
    return [_cast_to(cx, ins[0], to, cx.type_of(node.input[0]))]


def matmul(cx, a, b):
    """NumPy matmul: a weight on the right is the weight matmul, else bmm."""
    a, b = cx.t(a), cx.t(b)
    return cx.op("matmul" if b.op == "weight" else "bmm", a, b)
