"""The ATen op table of PyTorch import: one handler per core ATen overload, written with
aneforge ops (and, where ONNX import already spells the same mapping, its handler).

A handler ``fn(cx, *args, **kwargs) -> value`` gets a :class:`TorchCx` and the FX node's
arguments under their ATen schema names: graph Tensors, host constants
(:class:`~.onnx_values.Host`), Python numbers, lists and None. It returns the value (a
tuple for multi-output overloads, whose unused members may be :class:`Deferred` or
:class:`Unavailable`). Data operands go through ``cx.t`` (constants become fp16
weights, saturated with one warning as in ONNX import); parameters through ``cx.arr`` /
``cx.ints``, which refuse values computed at run time. A handler raises
:class:`~.onnx_errors.NotExpressible` for arguments the engine cannot express.

Host folding (:data:`ATEN` entries say how): an overload whose inputs are all known at
import is evaluated exactly by torch itself when it moves values without arithmetic
(``host="torch"``: views, permutes, slices, creation ops) or when its result is not
float (index and mask arithmetic); float arithmetic between constants goes through the
handler, whose aneforge ops fold with the emulator's fp16 kernels. Booleans on the
device are fp16 0/1, integers fp16 integers. This module holds the registry, the
handler context and the elementwise, contraction, normalization and reduction ops;
:mod:`.torch_shape` the movement and spatial ones.

Example:
    >>> ATEN["aten.relu.default"].host, ATEN["aten.view.default"].host
    ('auto', 'torch')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph.fp16 import FP16_MAX
from ..graph.tensor import Tensor
from .onnx_errors import NotExpressible
from .onnx_ops import matmul, norm_axis, reshape, trunc
from .onnx_table import HANDLERS
from .onnx_values import Cx, Host, source_inputs

__all__ = ["ATEN", "Deferred", "Entry", "HighRank", "TorchCx", "Unavailable", "aten"]


@dataclass(frozen=True)
class Entry:
    """One table entry: the handler and how all-constant inputs are folded (``"torch"``:
    exactly by torch; ``"auto"``: by torch when the result is not float, else by the
    handler in fp16; ``"handler"``: always the handler)."""

    fn: object
    host: str = "auto"


ATEN: dict[str, Entry] = {}


def aten(*names, host: str = "auto"):
    """Register the decorated handler for the overloads ``names`` (``"relu.default"``
    means ``aten.relu.default``; a name with a module, ``"operator.getitem"``, as is)."""

    def deco(fn):
        for name in names:
            key = name if name.startswith(("operator.", "torch.")) else f"aten.{name}"
            if key in ATEN:
                raise RuntimeError(f"ATen op {key} has two handlers")
            ATEN[key] = Entry(fn, host)
        return fn

    return deco


# ---- values other than tensors and constants ---------------------------------------------


class Deferred:
    """A member of a multi-output op built only when a ``getitem`` reads it."""

    def __init__(self, build):
        self.build = build


class Unavailable:
    """A member of a multi-output op that cannot be expressed (reading it raises)."""

    def __init__(self, reason: str):
        self.reason = reason


@dataclass(frozen=True)
class HighRank:
    """``src.reshape(shape).permute(perm)`` for a ``shape`` past the engine's rank 5:
    kept symbolic until a view brings it back to rank <= 5 (:mod:`.torch_shape`)."""

    src: Tensor
    shape: tuple
    perm: tuple

    @property
    def out_shape(self) -> tuple:
        return tuple(self.shape[p] for p in self.perm)


_NP_DTYPES = {
    "torch.float16": np.float16,
    "torch.float32": np.float32,
    "torch.float64": np.float64,
    "torch.bfloat16": np.float32,
    "torch.bool": np.bool_,
    "torch.uint8": np.uint8,
    "torch.int8": np.int8,
    "torch.int16": np.int16,
    "torch.int32": np.int32,
    "torch.int64": np.int64,
}


def dtype_kind(dtype) -> str:
    """``'f'``, ``'b'``, ``'i'`` (integers) or ``'?'`` for a torch dtype (or None)."""
    name = str(dtype)
    if name == "torch.bool":
        return "b"
    if name in _NP_DTYPES:
        return "f" if "float" in name else "i"
    return "?"


class TorchCx(Cx):
    """What an ATen handler sees: :class:`~.onnx_values.Cx` (``t``, ``op``, ``arr``,
    ``ints``) plus the FX node, its dtypes, and calls into the ONNX handlers."""

    def __init__(self, walker, fx, key: str):
        super().__init__(walker, fx, 18)
        self.fx = fx
        self.key = key

    def note(self, msg: str) -> None:
        """An import warning naming this node."""
        self.importer.note(f"{self.key} '{self.fx.name}': {msg}")

    def t(self, value) -> Tensor:
        """A data operand as a graph tensor."""
        if isinstance(value, HighRank):
            raise NotExpressible(
                f"its input has rank {len(value.shape)} (shape {value.out_shape}); the engine "
                "holds rank <= 5 and only views and permutes of such a value are expressible"
            )
        if isinstance(value, (bool, int, float)):
            value = Host(np.asarray(value, dtype=np.float64), label=f"{self.fx.name} scalar")
        return self.importer.t(value)

    def op(self, name: str, *srcs, **attrs) -> Tensor:
        """An aneforge node (folded in fp16 when all sources are weights); a Python
        number past the fp16 range becomes a saturated constant (with the warning)."""
        srcs = [
            self.t(s) if isinstance(s, float) and math.isfinite(s) and abs(s) > FP16_MAX else s
            for s in srcs
        ]
        return super().op(name, *srcs, **attrs)

    def arr(self, value, what: str) -> np.ndarray:
        """A parameter operand as its exact host value; a run-time value is refused."""
        if isinstance(value, (bool, int, float, list, tuple)):
            return np.asarray(value)
        if isinstance(value, Host) or (isinstance(value, Tensor) and value.op == "weight"):
            return super().arr(value, what)
        names = source_inputs(value) if isinstance(value, Tensor) else []
        shown = ", ".join(f"'{n}'" for n in names)
        raise NotExpressible(
            f"{what} must be known at import, but it is computed at run time"
            + (f" from input(s) {shown}" if shown else "")
        )

    def is_const(self, value) -> bool:
        """Whether ``value`` is known at import (Python numbers included)."""
        return isinstance(value, (bool, int, float)) or super().is_const(value)

    def dtype(self, index=None):
        """The torch dtype of argument ``index`` (None: of the output), when known."""
        node = self.fx if index is None else self.fx.args[index]
        val = getattr(node, "meta", {}).get("val")
        if isinstance(val, (list, tuple)) and val:
            val = val[0]
        return getattr(val, "dtype", None)

    def onnx(self, op_type: str, ins, **at) -> list:
        """The ONNX handler of ``op_type`` on ``ins`` with attributes ``at``."""
        node = _OnnxNode(op_type, self.fx.name)
        return list(HANDLERS[op_type](self, node, list(ins), at))


class _OnnxNode:
    """The few fields of an ONNX NodeProto the reused ONNX handlers read."""

    def __init__(self, op_type: str, name: str):
        self.op_type = op_type
        self.name = name
        self.domain = ""
        self.input: list = []
        self.output = [name]
        self.attribute: list = []


def as_bool(cx, x, dtype):
    """``x`` as fp16 0/1 (already so when its torch dtype is bool)."""
    return cx.t(x) if dtype_kind(dtype) == "b" else cx.op("not_equal", x, 0.0)


def axes_of(x, dim) -> tuple | None:
    """Reduction axes: None or ``[]`` for all, else normalized and sorted."""
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not dims:
        return None
    return tuple(sorted({norm_axis(int(d), x.ndim, "dim") for d in dims}))


def out_shape(cx) -> tuple | None:
    """The output shape torch.export recorded, when it is static."""
    val = cx.fx.meta.get("val")
    shape = getattr(val, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


# ---- identity, casts, assertions ---------------------------------------------------------


@aten(
    "clone.default",
    "alias.default",
    "detach.default",
    "lift_fresh_copy.default",
    "contiguous.default",
    host="torch",
)
def _identity(cx, x, *args, **kwargs):
    return x


@aten(
    "_assert_tensor_metadata.default",
    "_assert_scalar.default",
    "_assert_async.msg",
    "sym_constrain_range_for_size.default",
    "sym_constrain_range.default",
    host="handler",
)
def _assertion(cx, *args, **kwargs):
    return None  # a check on the example's dims, which the static graph satisfies


@aten("_to_copy.default")
def _to_copy(cx, x, dtype=None, **kwargs):
    if dtype is None:
        return x
    src, kind = cx.dtype(0), dtype_kind(dtype)
    if kind == "f":
        if str(dtype) == "torch.bfloat16":
            cx.note(
                "the cast to bfloat16 keeps fp16 values (bfloat16's 8-bit rounding is not applied)"
            )
        return cx.t(x)
    if kind == "b":
        return as_bool(cx, x, src)
    if kind == "i":
        return cx.t(x) if dtype_kind(src) in "bi" else trunc(cx, cx.t(x))
    raise NotExpressible(f"a cast to {dtype} is not expressible (the dataplane is fp16)")


@aten("dropout.default", "native_dropout.default")
def _dropout(cx, x, p=0.5, train=False):
    if train and p:
        raise NotExpressible(f"dropout with p={p:g} in training mode is random sampling")
    if cx.key == "aten.native_dropout.default":
        return (cx.t(x), Unavailable("the mask output of native_dropout"))
    return cx.t(x)


# ---- elementwise ---------------------------------------------------------------------------

_UNARY = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal": "inverse", "abs": "abs", "neg": "neg",
    "sin": "sin", "cos": "cos", "erf": "erf", "floor": "floor", "ceil": "ceil",
    "round": "round", "sign": "sign", "silu": "silu",
}  # fmt: skip


@aten(*(f"{name}.default" for name in _UNARY))
def _unary(cx, x):
    return cx.op(_UNARY[cx.key.split(".")[1]], x)


@aten("trunc.default")
def _trunc(cx, x):
    return trunc(cx, cx.t(x))


@aten("gelu.default")
def _gelu(cx, x, approximate="none"):
    return cx.op("gelu", x, approximate=approximate)


@aten("hardtanh.default")
def _hardtanh(cx, x, min_val=-1.0, max_val=1.0):
    # relu6 too (hardtanh(0, 6)): clip, as ONNX import spells the exporter's Clip(0, 6)
    return cx.op("clip", x, lo=float(min_val), hi=float(max_val))


@aten("clamp.default", "clamp_min.default", "clamp_max.default")
@aten("clamp.Tensor", "clamp_min.Tensor", "clamp_max.Tensor")
def _clamp(cx, x, min=None, max=None):  # noqa: A002  (the schema's names)
    if cx.key.startswith("aten.clamp_max"):
        min, max = None, min  # noqa: A001
    return cx.onnx("Clip", [x, min, max])[0]  # constant bounds: clip; computed: max / min


@aten("leaky_relu.default")
def _leaky_relu(cx, x, negative_slope=0.01):
    return cx.op("leaky_relu", x, alpha=float(negative_slope))


@aten("elu.default")
def _elu(cx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    y = cx.op("elu", cx.op("mul", x, float(input_scale)) if input_scale != 1 else x, alpha=alpha)
    return cx.op("mul", y, float(scale)) if scale != 1 else y


@aten("softplus.default")
def _softplus(cx, x, beta=1.0, threshold=20.0):
    if beta == 1:
        return cx.op("softplus", x)  # past the threshold softplus(x) rounds to x in fp16
    return cx.op("div", cx.op("softplus", cx.op("mul", x, float(beta))), float(beta))


@aten("hardsigmoid.default")
def _hardsigmoid(cx, x):
    return cx.onnx("HardSigmoid", [x], alpha=1.0 / 6.0, beta=0.5)[0]


@aten("hardswish.default")
def _hardswish(cx, x):
    return cx.onnx("HardSwish", [x])[0]


@aten("log1p.default")
def _log1p(cx, x):
    x = cx.t(x)
    if x.op == "exp":  # log1p(exp(t)): softplus, as softplus and mish decompose
        return cx.op("softplus", x.srcs[0])
    cx.note("log1p(x) is computed as log(1 + x): below |x| ~ 2**-11 it loses its relative accuracy")
    return cx.op("log", cx.op("add", x, 1.0))


@aten("expm1.default")
def _expm1(cx, x):
    cx.note("expm1(x) is computed as exp(x) - 1: near 0 it loses its relative accuracy")
    return cx.op("sub", cx.op("exp", x), 1.0)


@aten("log2.default", "log10.default")
def _log_base(cx, x):
    base = 2.0 if cx.key == "aten.log2.default" else 10.0
    return cx.op("mul", cx.op("log", x), 1.0 / math.log(base))


@aten("exp2.default")
def _exp2(cx, x):
    return cx.op("exp", cx.op("mul", x, math.log(2.0)))


@aten("pow.Tensor_Scalar")
def _pow_scalar(cx, x, exponent):
    if exponent == 1:
        return cx.t(x)
    if exponent == 2:
        return cx.op("square", x)
    return cx.op("pow", x, float(exponent))


@aten("pow.Tensor_Tensor", "pow.Scalar")
def _pow(cx, x, exponent):
    return cx.op("pow", x, exponent)


def _scaled(cx, b, alpha):
    return b if alpha == 1 else cx.op("mul", b, alpha)


@aten("add.Tensor", "add.Scalar")
def _add(cx, a, b, alpha=1):
    if dtype_kind(cx.dtype()) == "b":
        return cx.op("maximum", a, b)  # bool + bool is a logical or
    return cx.op("add", a, _scaled(cx, b, alpha))


@aten("sub.Tensor", "sub.Scalar")
def _sub(cx, a, b, alpha=1):
    return cx.op("sub", a, _scaled(cx, b, alpha))


@aten("rsub.Tensor", "rsub.Scalar")
def _rsub(cx, a, b, alpha=1):
    return cx.op("sub", b, _scaled(cx, a, alpha))


@aten("mul.Tensor", "mul.Scalar")
def _mul(cx, a, b):
    return cx.op("mul", a, b)


@aten("div.Tensor", "div.Scalar")
def _div(cx, a, b):
    return cx.op("div", a, b)


@aten("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(cx, a, b, rounding_mode=None):
    y = cx.op("div", a, b)
    if rounding_mode == "trunc":
        return trunc(cx, y)
    return cx.op("floor", y) if rounding_mode == "floor" else y


@aten("remainder.Tensor", "remainder.Scalar", "fmod.Tensor", "fmod.Scalar")
def _remainder(cx, a, b):
    return cx.onnx("Mod", [a, b], fmod=int(cx.key.startswith("aten.fmod")))[0]


@aten("maximum.default", "minimum.default")
def _extremum(cx, a, b):
    return cx.op(cx.key.split(".")[1], a, b)


_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}  # fmt: skip


@aten(*(f"{n}.{kind}" for n in _COMPARE for kind in ("Tensor", "Scalar")))
def _compare(cx, a, b):
    return cx.op(_COMPARE[cx.key.split(".")[1]], a, b)


@aten("logical_not.default", "bitwise_not.default")
def _not(cx, x):
    if cx.key.startswith("aten.bitwise") and dtype_kind(cx.dtype(0)) != "b":
        raise NotExpressible("bitwise_not of integers is not expressible (the dataplane is fp16)")
    return cx.op("equal", x, 0.0)


_LOGICAL = {"and": "mul", "or": "maximum", "xor": "not_equal"}


@aten(*(f"{p}_{n}.{k}" for n in _LOGICAL for p, k in (("logical", "default"),
        ("bitwise", "Tensor"))))  # fmt: skip
def _logical(cx, a, b):
    kinds = {_arg_kind(cx, i) for i in (0, 1)}
    if cx.key.startswith("aten.bitwise") and kinds != {"b"}:
        raise NotExpressible("bitwise ops on integers are not expressible (the dataplane is fp16)")
    name = _LOGICAL[cx.key.split(".")[1].split("_")[1]]
    return cx.op(name, as_bool(cx, a, cx.dtype(0)), as_bool(cx, b, cx.dtype(1)))


def _arg_kind(cx, i) -> str:
    arg = cx.fx.args[i]
    if hasattr(arg, "meta"):
        return dtype_kind(cx.dtype(i))
    return "b" if isinstance(arg, bool) else "i"


@aten("where.self")
def _where(cx, cond, a, b):
    return cx.op("select", cond, a, b)


@aten("isnan.default")
def _isnan(cx, x):
    return cx.op("not_equal", x, x)


@aten("isinf.default")
def _isinf(cx, x):
    return cx.onnx("IsInf", [x])[0]


# ---- constants shaped like a tensor --------------------------------------------------------


def _filled(cx, shape, value, what="") -> Host:
    dtype = _NP_DTYPES.get(str(cx.dtype()), np.float32)
    if what:
        cx.note(f"{what} has undefined values in torch; aneforge fills it with zeros")
    return Host(np.full(tuple(int(d) for d in shape), value, dtype=dtype), label=cx.fx.name)


@aten("full_like.default", host="handler")
def _full_like(cx, x, fill_value, **kwargs):
    return _filled(cx, _tensor_shape(x), fill_value)


@aten("zeros_like.default", "ones_like.default", "empty_like.default", host="handler")
def _like(cx, x, **kwargs):
    value = 1 if cx.key == "aten.ones_like.default" else 0
    undefined = "empty_like" if cx.key == "aten.empty_like.default" else ""
    return _filled(cx, _tensor_shape(x), value, undefined)


@aten("new_full.default", host="handler")
def _new_full(cx, x, size, fill_value, **kwargs):
    return _filled(cx, size, fill_value)


@aten("new_zeros.default", "new_ones.default", "new_empty.default", host="handler")
def _new_like(cx, x, size, **kwargs):
    value = 1 if cx.key == "aten.new_ones.default" else 0
    return _filled(cx, size, value, "new_empty" if "empty" in cx.key else "")


@aten("empty.memory_format", "empty_strided.default", host="handler")
def _empty(cx, size, *args, **kwargs):
    return _filled(cx, size, 0, cx.key.split(".")[1])


def _tensor_shape(x) -> tuple:
    if isinstance(x, HighRank):
        return x.out_shape
    return x.shape if isinstance(x, Tensor) else tuple(np.shape(getattr(x, "value", x)))


# ---- contractions --------------------------------------------------------------------------


@aten("addmm.default")
def _addmm(cx, bias, a, b, beta=1, alpha=1):
    if isinstance(b, Host):  # keep the parameter's name: transpose on the host, exactly
        w = cx.t(Host(np.ascontiguousarray(np.swapaxes(b.value, 0, 1)), label=b.label))
    else:
        b = cx.t(b)
        w = cx.op("transpose", b, perm=(1, 0)) if b.op == "weight" else None
    bias_t = cx.t(bias) if bias is not None else None
    n = None if w is None else w.shape[0]
    if n is not None and alpha == 1 and beta == 1 and getattr(bias_t, "shape", 0) in ((n,), (1, n)):
        return cx.op("linear", a, w, reshape(cx, bias_t, (n,)))
    y = cx.op("linear", a, w) if w is not None else matmul(cx, a, b)
    y = _scaled(cx, y, alpha)
    if bias_t is None or beta == 0:
        return y
    return cx.op("add", y, _scaled(cx, bias_t, beta))


@aten("mm.default", "bmm.default")
def _mm(cx, a, b):
    return matmul(cx, a, b)


# ---- normalization -------------------------------------------------------------------------


def _f32(eps) -> float:
    """A norm's eps rounded to float32, as an ONNX file stores it (the same attribute
    both ways)."""
    return float(np.float32(eps))


def _affine_srcs(cx, weight, bias) -> tuple[list, dict]:
    srcs = [cx.t(v) for v in (weight, bias) if v is not None]
    return srcs, {"has_weight": weight is not None, "has_bias": bias is not None}


@aten("native_layer_norm.default")
def _layer_norm(cx, x, normalized_shape, weight, bias, eps):
    x = cx.t(x)
    axis = x.ndim - len(normalized_shape)
    srcs, flags = _affine_srcs(cx, weight, bias)
    y = cx.op("layer_norm", x, *srcs, axis=axis, eps=_f32(eps), **flags)
    axes = tuple(range(axis, x.ndim))

    def mean():
        return cx.op("mean", x, axes=axes, keepdims=True)

    def rstd():
        d = cx.op("sub", x, mean())
        var = cx.op("mean", cx.op("square", d), axes=axes, keepdims=True)
        return cx.op("rsqrt", cx.op("add", var, float(eps)))

    return (y, Deferred(mean), Deferred(rstd))


@aten("native_group_norm.default")
def _group_norm(cx, x, weight, bias, n, c, hxw, group, eps):
    srcs, flags = _affine_srcs(cx, weight, bias)
    y = cx.op("group_norm", x, *srcs, groups=int(group), eps=_f32(eps), **flags)
    stats = Unavailable("the mean / rstd outputs of native_group_norm")
    return (y, stats, stats)


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm(cx, x, weight, bias, running_mean, running_var, momentum, eps):
    srcs, flags = _affine_srcs(cx, weight, bias)
    y = cx.op("batch_norm", x, running_mean, running_var, *srcs, eps=_f32(eps), **flags)
    stats = Unavailable("the saved mean / invstd outputs of batch norm")
    return (y, stats, stats)


# ---- reductions, softmax, index ops ----------------------------------------------------------


def _reduce(cx, name, x, dim=None, keepdim=False, **kwargs):
    x = cx.t(x)
    return cx.op(name, x, axes=axes_of(x, dim), keepdims=bool(keepdim))


@aten("sum.dim_IntList", "sum.default")
def _sum(cx, x, dim=None, keepdim=False, dtype=None):
    return _reduce(cx, "sum", x, dim, keepdim)


@aten("mean.dim", "mean.default")
def _mean(cx, x, dim=None, keepdim=False, dtype=None):
    return _reduce(cx, "mean", x, dim, keepdim)


@aten("amax.default", "amin.default", "max.default", "min.default")
def _amax(cx, x, dim=None, keepdim=False):
    name = "amax" if cx.key.split(".")[1] in ("amax", "max") else "amin"
    return _reduce(cx, name, x, dim, keepdim)


@aten("max.dim", "min.dim")
def _max_dim(cx, x, dim, keepdim=False):
    top = cx.key == "aten.max.dim"
    values = _reduce(cx, "amax" if top else "amin", x, dim, keepdim)
    op_type = "ArgMax" if top else "ArgMin"
    return (values, Deferred(lambda: cx.onnx(op_type, [x], axis=dim, keepdims=int(keepdim))[0]))


@aten("any.dim", "any.dims", "any.default", "all.dim", "all.dims", "all.default")
def _any(cx, x, dim=None, keepdim=False):
    name = "amax" if cx.key.startswith("aten.any") else "amin"
    return _reduce(cx, name, as_bool(cx, x, cx.dtype(0)), dim, keepdim)


@aten("prod.dim_int", "prod.default")
def _prod(cx, x, dim=None, keepdim=False, dtype=None):
    x = cx.t(x)
    axes = axes_of(x, dim)
    axes = tuple(range(x.ndim)) if axes is None else axes
    return cx.onnx("ReduceProd", [x, Host(np.asarray(axes))], keepdims=int(keepdim))[0]


def _variance(cx, x, dim, correction, keepdim):
    x = cx.t(x)
    axes = axes_of(x, dim)
    mu = cx.op("mean", x, axes=axes, keepdims=True)
    var = cx.op("mean", cx.op("square", cx.op("sub", x, mu)), axes=axes, keepdims=bool(keepdim))
    n = math.prod(x.shape[a] for a in (range(x.ndim) if axes is None else axes))
    c = 1 if correction is None else float(correction)
    if c:
        if n - c <= 0:
            raise NotExpressible(f"correction={c:g} over {n} element(s) divides by zero")
        var = cx.op("mul", var, n / (n - c))
    return var, mu if keepdim else reshape(cx, mu, var.shape)


@aten("var.correction")
def _var(cx, x, dim=None, *, correction=None, keepdim=False):
    return _variance(cx, x, dim, correction, keepdim)[0]


@aten("var_mean.correction")
def _var_mean(cx, x, dim=None, *, correction=None, keepdim=False):
    return _variance(cx, x, dim, correction, keepdim)


@aten("linalg_vector_norm.default")
def _vector_norm(cx, x, ord=2, dim=None, keepdim=False, *, dtype=None):  # noqa: A002
    x = cx.t(x)
    axes, keep = axes_of(x, dim), bool(keepdim)
    if ord == 2:
        return cx.op("sqrt", cx.op("sum", cx.op("square", x), axes=axes, keepdims=keep))
    if ord == 1:
        return cx.op("sum", cx.op("abs", x), axes=axes, keepdims=keep)
    if ord in (math.inf, -math.inf):
        return cx.op("amax" if ord > 0 else "amin", cx.op("abs", x), axes=axes, keepdims=keep)
    if ord == 0 or not math.isfinite(ord):
        raise NotExpressible(f"ord={ord!r} is not expressible")
    s = cx.op("sum", cx.op("pow", cx.op("abs", x), float(ord)), axes=axes, keepdims=keep)
    return cx.op("pow", s, 1.0 / ord)


@aten("argmax.default", "argmin.default")
def _argmax(cx, x, dim=None, keepdim=False):
    x = cx.t(x)
    op_type = "ArgMax" if cx.key == "aten.argmax.default" else "ArgMin"
    if dim is None:
        flat = reshape(cx, x, (x.size,))
        y = cx.onnx(op_type, [flat], axis=0, keepdims=0)[0]
        return reshape(cx, y, (1,) * x.ndim) if keepdim else y
    return cx.onnx(op_type, [x], axis=int(dim), keepdims=int(keepdim))[0]


@aten("_softmax.default")
def _softmax(cx, x, dim, half_to_float=False):
    x = cx.t(x)
    return cx.op("softmax", x, axis=norm_axis(int(dim), x.ndim, "dim"))


@aten("_log_softmax.default")
def _log_softmax(cx, x, dim, half_to_float=False):
    return cx.onnx("LogSoftmax", [x], axis=int(dim))[0]


@aten("cumsum.default")
def _cumsum(cx, x, dim, dtype=None):
    return cx.onnx("CumSum", [x, Host(np.asarray(int(dim)))])[0]


@aten("topk.default")
def _topk(cx, x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    values, indices = cx.onnx("TopK", [x, Host(np.asarray([int(k)]))], axis=dim, largest=largest)
    return (values, indices)


@aten("operator.getitem", host="handler")
def _getitem(cx, seq, index):
    if not isinstance(seq, (tuple, list)):
        raise NotExpressible(f"getitem of a {type(seq).__name__} is not expressible")
    value = seq[index]
    if isinstance(value, Deferred):
        return value.build()
    if isinstance(value, Unavailable):
        raise NotExpressible(f"{value.reason} is not expressible")
    return value
