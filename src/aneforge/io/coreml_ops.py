"""The Core ML lowering table: how every aneforge op becomes Core ML MIL ops.

:data:`LOWERINGS` holds one :class:`Lowering` per fused and bridge op of the registry,
keyed by op name, with one of three statuses:

- ``"lowered"``: a function emits MIL ops for the node (``mil`` names them). A lowering
  may need a newer opset (``min_ios``) or hold only for some attributes (``native_if``);
  where it does not hold and the op has a fused route (its record's ``route``,
  :func:`~aneforge.optimizer.routes.decomposers`), the node is decomposed instead.
- ``"decomposed"``: the node is always replaced by its fused route first, whose ops are
  then lowered (Core ML has no single op for it).
- ``"not expressible"``: no Core ML program computes it here; ``note`` says why. Exporting
  a graph that holds such a node raises one error listing every one of them.

The lowering functions take ``(cx, node, name)``: ``cx`` is a :class:`LoweringContext`
(the MIL builder, the opset and the MIL values of the node's sources), ``node`` the
aneforge node, ``name`` the name its final MIL op must carry. Every emitted value is
fp16; constants are fp16 (the engine's dataplane), shapes and axes int32. The bridge
ops' lowerings are in :mod:`.coreml_bridge_ops`; :mod:`.coreml_table` loads both and
renders the table. This module does not import coremltools: the builder arrives
through the context, so the table and its documentation load without it.

Run ``python -m aneforge.io.coreml_table docs/export.md`` to refresh the generated table
in the documentation (a test checks that it is current).

Example:
    >>> from aneforge.io.coreml_ops import LOWERINGS
    >>> LOWERINGS["relu"].status, LOWERINGS["relu"].mil
    ('lowered', 'relu')
    >>> LOWERINGS["minmax_norm"].status
    'decomposed'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..graph.ops.common import norm_axes, norm_axis, spatial_tuple
from ..graph.ops.contraction import conv_geometry
from ..graph.ops.spatial import pool_geometry
from ..graph.tensor import Tensor

LOWERED, DECOMPOSED, NOT_EXPRESSIBLE = "lowered", "decomposed", "not expressible"
STATUSES = (LOWERED, DECOMPOSED, NOT_EXPRESSIBLE)


@dataclass(frozen=True)
class Lowering:
    """How one aneforge op reaches Core ML.

    Attributes:
        op: the aneforge op name.
        status: one of :data:`STATUSES`.
        mil: the MIL op types it emits, in words (documentation; the exporter records
            what it really emitted per node).
        fn: the lowering function ``(cx, node, name) -> Var`` (``"lowered"`` only).
        min_ios: the oldest iOS opset the lowering needs (15 = iOS 15 / macOS 12).
        native_if: ``(node, ios) -> reason or None``; a reason means this node cannot
            use ``fn`` (it is decomposed when a route exists, else reported).
        note: the condition, the numerics caveat, or why it is not expressible.
    """

    op: str
    status: str
    mil: str
    fn: Callable | None = None
    min_ios: int = 15
    native_if: Callable[[Tensor, int], str | None] | None = None
    note: str = ""


LOWERINGS: dict[str, Lowering] = {}


def _add(op, mil, fn=None, status=LOWERED, min_ios=15, native_if=None, note=""):
    if op in LOWERINGS:
        raise RuntimeError(f"Core ML lowering of '{op}' is registered twice")
    LOWERINGS[op] = Lowering(op, status, mil, fn, min_ios, native_if, note)


def lowers(op, mil, min_ios=15, native_if=None, note=""):
    """Decorator: register ``fn`` as the lowering of ``op``."""

    def wrap(fn):
        _add(op, mil, fn, LOWERED, min_ios, native_if, note)
        return fn

    return wrap


class LoweringContext:
    """What a lowering function builds with.

    Attributes:
        mb: coremltools' MIL ``Builder``.
        ios: the opset's iOS version (15, 16, 17, 18, ...).
    """

    def __init__(self, mb, ios: int, var_of: Callable[[Tensor], object]):
        self.mb = mb
        self.ios = ios
        self._var_of = var_of
        self.memo: dict = {}

    def arg(self, node: Tensor, i: int):
        """The MIL value of source ``i`` of ``node``."""
        return self._var_of(node.srcs[i])

    def const(self, value, name: str):
        """An fp16 constant."""
        return self.mb.const(val=np.asarray(value, dtype=np.float16), name=name)

    def fp16_value(self, src: Tensor) -> np.ndarray | None:
        """The values of a plain fp16 weight (None for tensors and encoded weights)."""
        if src.op == "weight" and src.attrs.get("encoding", "fp16") == "fp16":
            return np.asarray(src.value, dtype=np.float16)
        return None

    def is_const(self, node: Tensor, i: int) -> bool:
        """Whether source ``i`` is a weight (a const or constexpr MIL value)."""
        return node.srcs[i].op == "weight"

    def param(self, node: Tensor, i: int, shape, name: str):
        """Source ``i`` viewed as ``shape``: a reshaped const for an fp16 weight (same
        bytes, so the weight stays one constant), else a MIL reshape."""
        value = self.fp16_value(node.srcs[i])
        if value is not None:
            return self.const(value.reshape(shape), name)
        return self.mb.reshape(x=self.arg(node, i), shape=list(shape), name=name)

    def unary(self, mil: str, x, name: str, **kw):
        """One MIL op of one tensor input."""
        return getattr(self.mb, mil)(x=x, name=name, **kw)


def _zero_eps():
    return np.float16(0.0)


# ---- elementwise ---------------------------------------------------------------------

_SAME_UNARY = (
    "relu", "sigmoid", "tanh", "exp", "sqrt", "abs", "square", "sin", "cos", "erf",
    "softplus", "relu6", "silu", "sign", "floor", "ceil", "round",
)  # fmt: skip


def _same_unary(mil):
    def fn(cx, node, name):
        return cx.unary(mil, cx.arg(node, 0), name)

    return fn


for _op in _SAME_UNARY:
    _add(_op, _op, _same_unary(_op))


@lowers("neg", "mul (by -1, exact)")
def _neg(cx, node, name):
    return cx.mb.mul(x=cx.arg(node, 0), y=cx.const(-1.0, f"{name}_m1"), name=name)


def _eps0_unary(mil):
    def fn(cx, node, name):
        return cx.unary(mil, cx.arg(node, 0), name, epsilon=_zero_eps())

    return fn


for _op, _note in (
    ("log", "epsilon=0, so log(0) = -inf as in aneforge"),
    ("rsqrt", "epsilon=0 (Core ML's default adds 1e-12)"),
    ("inverse", "epsilon=0 (Core ML's default adds 1e-4)"),
):
    _add(_op, _op, _eps0_unary(_op), note=_note)


@lowers("gelu", "gelu (mode EXACT or TANH_APPROXIMATION)")
def _gelu(cx, node, name):
    mode = "TANH_APPROXIMATION" if node.attrs["approximate"] == "tanh" else "EXACT"
    return cx.mb.gelu(x=cx.arg(node, 0), mode=mode, name=name)


def _alpha_unary(mil):
    def fn(cx, node, name):
        return cx.unary(mil, cx.arg(node, 0), name, alpha=np.float16(node.attrs["alpha"]))

    return fn


_add("elu", "elu", _alpha_unary("elu"))
_add("leaky_relu", "leaky_relu", _alpha_unary("leaky_relu"))


@lowers("clip", "clip, or maximum / minimum for a one-sided clip")
def _clip(cx, node, name):
    x, lo, hi = cx.arg(node, 0), node.attrs["lo"], node.attrs["hi"]
    if lo is not None and hi is not None:
        return cx.mb.clip(x=x, alpha=np.float16(lo), beta=np.float16(hi), name=name)
    if lo is not None:
        return cx.mb.maximum(x=x, y=cx.const(lo, f"{name}_lo"), name=name)
    if hi is not None:
        return cx.mb.minimum(x=x, y=cx.const(hi, f"{name}_hi"), name=name)
    return cx.mb.identity(x=x, name=name)


_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "real_div",
    "maximum": "maximum", "minimum": "minimum", "pow": "pow",
}  # fmt: skip


def _binary(mil):
    def fn(cx, node, name):
        return getattr(cx.mb, mil)(x=cx.arg(node, 0), y=cx.arg(node, 1), name=name)

    return fn


for _op, _mil in _BINARY.items():
    _add(_op, _mil, _binary(_mil))


def _compare(mil):
    def fn(cx, node, name):
        flag = getattr(cx.mb, mil)(x=cx.arg(node, 0), y=cx.arg(node, 1), name=f"{name}_b")
        return cx.mb.cast(x=flag, dtype="fp16", name=name)

    return fn


for _op in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
    _add(_op, f"{_op} + cast (bool to 1.0 / 0.0)", _compare(_op))


@lowers("select", "not_equal (cond != 0) + select",
        note="values tiled where only the condition has the output's shape")  # fmt: skip
def _select(cx, node, name):
    cond = cx.mb.not_equal(x=cx.arg(node, 0), y=cx.const(0.0, f"{name}_zero"), name=f"{name}_c")
    a = cx.arg(node, 1)
    values = np.broadcast_shapes(node.srcs[1].shape, node.srcs[2].shape)
    if values != node.shape:  # MIL's select takes its shape from a and b, not cond
        a = _tiled(cx, a, node.srcs[1].shape, node.shape, f"{name}_a")
    return cx.mb.select(cond=cond, a=a, b=cx.arg(node, 2), name=name)


def _tiled(cx, v, shape, out_shape, name):
    """``v`` (of ``shape``) repeated to ``out_shape`` (NumPy broadcasting), exactly: a
    reshape to the output's rank, then ``tile``."""
    full = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    v = cx.mb.reshape(x=v, shape=list(full), name=f"{name}_r")
    reps = [d // s for d, s in zip(out_shape, full)]
    return cx.mb.tile(x=v, reps=reps, name=f"{name}_t")


# ---- contractions --------------------------------------------------------------------


def _matmul_of(cx, node, name, a, b):
    """NumPy matmul of the node's sources ``a`` @ ``b`` (Core ML refuses a 1-D right side)."""
    if node.srcs[1].ndim > 1:
        return cx.mb.matmul(x=a, y=b, name=name)
    col = cx.param(node, 1, node.srcs[1].shape + (1,), f"{name}_col")
    out = cx.mb.matmul(x=a, y=col, name=f"{name}_mm")
    return cx.mb.squeeze(x=out, axes=[-1], name=name)


@lowers("matmul", "matmul (weight as a const)", note="a 1-D right operand becomes a column")
def _matmul(cx, node, name):
    return _matmul_of(cx, node, name, cx.arg(node, 0), cx.arg(node, 1))


_add("bmm", "matmul", _matmul, note="a 1-D right operand becomes a column")


@lowers("linear", "linear (const weight and bias), else matmul + add")
def _linear(cx, node, name):
    x, w = node.srcs[:2]
    has_bias = len(node.srcs) == 3
    if not (cx.is_const(node, 1) and (not has_bias or cx.is_const(node, 2))):
        y = cx.mb.matmul(x=cx.arg(node, 0), y=cx.arg(node, 1), transpose_y=True,
                         name=f"{name}_mm" if has_bias else name)  # fmt: skip
        return cx.mb.add(x=y, y=cx.arg(node, 2), name=name) if has_bias else y
    # without a bias, a named zero bias: coremltools' default one is named by a counter
    # that runs over the process, so two lowerings of one graph would differ
    zeros = np.zeros(w.shape[0], np.float16)
    bias = cx.arg(node, 2) if has_bias else cx.mb.const(val=zeros, name=f"{name}_bias")
    bias = {"bias": bias}
    if x.ndim <= 3:  # Core ML's linear takes rank 1 to 3
        return cx.mb.linear(x=cx.arg(node, 0), weight=cx.arg(node, 1), name=name, **bias)
    flat = cx.mb.reshape(x=cx.arg(node, 0), shape=[-1, x.shape[-1]], name=f"{name}_in")
    y = cx.mb.linear(x=flat, weight=cx.arg(node, 1), name=f"{name}_lin", **bias)
    return cx.mb.reshape(x=y, shape=list(node.shape), name=name)


def _conv_geometry(node):
    g = conv_geometry(node)
    return len(g.stride), list(g.stride), [list(p) for p in g.pads], list(g.dilation)


def _bias_after(cx, node, y, name):
    """Add a non-const bias of shape (C,) along axis 1."""
    nd = len(node.shape) - 2
    b = cx.param(node, 2, (-1,) + (1,) * nd, f"{name}_bias")
    return cx.mb.add(x=y, y=b, name=name)


@lowers("conv", "conv (custom pad; a runtime bias is a separate add)")
def _conv(cx, node, name):
    nd, stride, pad, dil = _conv_geometry(node)
    const_bias = len(node.srcs) == 3 and cx.is_const(node, 2)
    late_bias = len(node.srcs) == 3 and not const_bias
    kw = {"bias": cx.arg(node, 2)} if const_bias else {}
    y = cx.mb.conv(
        x=cx.arg(node, 0), weight=cx.arg(node, 1), strides=stride, pad_type="custom",
        pad=[p for pp in pad for p in pp], dilations=dil, groups=node.attrs["groups"],
        name=f"{name}_conv" if late_bias else name, **kw,
    )  # fmt: skip
    return _bias_after(cx, node, y, name) if late_bias else y


@lowers(
    "conv_transpose",
    "conv_transpose (+ pad and add when output_padding passes the end pad)",
    note="output_padding is taken from the end crop; beyond it, zero rows and the bias",
)
def _conv_transpose(cx, node, name):
    nd, stride, pad, dil = _conv_geometry(node)
    opad = spatial_tuple(node.op, node.attrs["output_padding"], nd, "output_padding")
    extra = [max(o - p[1], 0) for o, p in zip(opad, pad)]
    crop = [[p[0], max(p[1] - o, 0)] for o, p in zip(opad, pad)]
    has_bias = len(node.srcs) == 3
    direct_bias = has_bias and cx.is_const(node, 2) and not any(extra)
    kw = {"bias": cx.arg(node, 2)} if direct_bias else {}
    last = not (has_bias and not direct_bias) and not any(extra)
    y = cx.mb.conv_transpose(
        x=cx.arg(node, 0), weight=cx.arg(node, 1), strides=stride, pad_type="custom",
        pad=[p for pp in crop for p in pp], dilations=dil, groups=node.attrs["groups"],
        name=name if last else f"{name}_convt", **kw,
    )  # fmt: skip
    if any(extra):
        widths = [0, 0, 0, 0] + [w for e in extra for w in (0, e)]
        y = cx.mb.pad(x=y, pad=widths, mode="constant", constant_val=np.float16(0.0),
                      name=name if not has_bias or direct_bias else f"{name}_pad")  # fmt: skip
    if has_bias and not direct_bias:
        y = _bias_after(cx, node, y, name)
    return y


# ---- reductions, softmax, cumsum -----------------------------------------------------


def _reduction(mil):
    def fn(cx, node, name):
        x = node.srcs[0]
        axes = list(norm_axes(node.op, node.attrs["axes"], x.ndim))
        return getattr(cx.mb, mil)(
            x=cx.arg(node, 0), axes=axes, keep_dims=node.attrs["keepdims"], name=name
        )

    return fn


for _op, _mil, _note in (
    ("sum", "reduce_sum", "Core ML's accumulator width is its own (aneforge: narrow fp16)"),
    ("mean", "reduce_mean", "Core ML's accumulator width is its own (aneforge: narrow fp16)"),
    ("amax", "reduce_max", ""),
    ("amin", "reduce_min", ""),
):
    _add(_op, _mil, _reduction(_mil), note=_note)


@lowers("softmax", "softmax")
def _softmax(cx, node, name):
    return cx.mb.softmax(x=cx.arg(node, 0), axis=node.attrs["axis"], name=name)


@lowers("cumsum", "matmul by a const upper-triangular ones matrix",
        note="the engine's own lowering (x @ triu_ones), the wide accumulator")  # fmt: skip
def _cumsum(cx, node, name):
    k = node.shape[-1]
    triu = cx.const(np.triu(np.ones((k, k))), f"{name}_triu")
    return cx.mb.matmul(x=cx.arg(node, 0), y=triu, name=name)


# ---- normalizations ------------------------------------------------------------------


def _affine_params(node):
    """(index of weight or None, index of bias or None) of a norm node."""
    i, out = 1, [None, None]
    if node.op == "batch_norm":
        i = 3
    if node.attrs.get("has_weight"):
        out[0], i = i, i + 1
    if node.attrs.get("has_bias"):
        out[1] = i
    return out


def _scale_shift(cx, node, y, name, shape, skip=()):
    """Multiply by the weight, then add the bias (those not in ``skip``), as aneforge does."""
    wi, bi = _affine_params(node)
    steps = [(i, k) for i, k in ((wi, "mul"), (bi, "add")) if i is not None and i not in skip]
    for n, (i, kind) in enumerate(steps):
        p = cx.param(node, i, shape, f"{name}_{kind}p")
        last = n == len(steps) - 1
        y = getattr(cx.mb, kind)(x=y, y=p, name=name if last else f"{name}_{kind}")
    return y


def _standardize(cx, x, axes, eps, name):
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps), as aneforge's steps."""
    mb = cx.mb
    mu = mb.reduce_mean(x=x, axes=axes, keep_dims=True, name=f"{name}_mu")
    d = mb.sub(x=x, y=mu, name=f"{name}_d")
    var = mb.reduce_mean(x=mb.mul(x=d, y=d, name=f"{name}_d2"), axes=axes, keep_dims=True,
                         name=f"{name}_var")  # fmt: skip
    t = mb.add(x=var, y=cx.const(eps, f"{name}_eps"), name=f"{name}_ve")
    r = mb.rsqrt(x=t, epsilon=_zero_eps(), name=f"{name}_r")
    return d, r


@lowers("layer_norm", "layer_norm (gamma, beta when they are weights)")
def _layer_norm(cx, node, name):
    x = node.srcs[0]
    axis = norm_axis(node.op, node.attrs["axis"], x.ndim)
    wi, bi = _affine_params(node)
    kw, folded = {}, []
    for key, i in (("gamma", wi), ("beta", bi)):
        if i is not None and cx.is_const(node, i):
            kw[key] = cx.arg(node, i)
            folded.append(i)
    rest = [i for i in (wi, bi) if i is not None and i not in folded]
    y = cx.mb.layer_norm(x=cx.arg(node, 0), axes=list(range(axis, x.ndim)),
                         epsilon=np.float16(node.attrs["eps"]),
                         name=f"{name}_ln" if rest else name, **kw)  # fmt: skip
    return _scale_shift(cx, node, y, name, x.shape[axis:], skip=folded) if rest else y


@lowers("rms_norm", "mul + reduce_mean + add + rsqrt + mul (+ mul weight)",
        note="no Core ML rms_norm op: aneforge's steps written out")  # fmt: skip
def _rms_norm(cx, node, name):
    x, mb = node.srcs[0], cx.mb
    axis = norm_axis(node.op, node.attrs["axis"], x.ndim)
    xv = cx.arg(node, 0)
    ms = mb.reduce_mean(x=mb.mul(x=xv, y=xv, name=f"{name}_sq"), axes=list(range(axis, x.ndim)),
                        keep_dims=True, name=f"{name}_ms")  # fmt: skip
    t = mb.add(x=ms, y=cx.const(node.attrs["eps"], f"{name}_eps"), name=f"{name}_me")
    r = mb.rsqrt(x=t, epsilon=_zero_eps(), name=f"{name}_r")
    has_w = node.attrs["has_weight"]
    y = mb.mul(x=xv, y=r, name=f"{name}_y" if has_w else name)
    return _scale_shift(cx, node, y, name, x.shape[axis:]) if has_w else y


@lowers("group_norm", "reshape + layer-norm steps over each group + reshape (+ mul, add)",
        note="no Core ML group_norm op: aneforge's steps over [N, groups, -1]")  # fmt: skip
def _group_norm(cx, node, name):
    x, mb = node.srcs[0], cx.mb
    grouped = mb.reshape(x=cx.arg(node, 0), shape=[x.shape[0], node.attrs["groups"], -1],
                         name=f"{name}_g")  # fmt: skip
    d, r = _standardize(cx, grouped, [2], node.attrs["eps"], name)
    y = mb.mul(x=d, y=r, name=f"{name}_n")
    affine = node.attrs["has_weight"] or node.attrs["has_bias"]
    y = mb.reshape(x=y, shape=list(x.shape), name=f"{name}_y" if affine else name)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    return _scale_shift(cx, node, y, name, shape) if affine else y


@lowers("batch_norm", "batch_norm (weights, rank 3-5), else sub + add + rsqrt + mul steps")
def _batch_norm(cx, node, name):
    x, mb = node.srcs[0], cx.mb
    params = range(1, len(node.srcs))
    eps = np.float16(node.attrs["eps"])
    if all(cx.fp16_value(node.srcs[i]) is not None for i in params) and x.ndim <= 5:
        wi, bi = _affine_params(node)
        kw = {k: cx.arg(node, i) for k, i in (("gamma", wi), ("beta", bi)) if i is not None}
        xv = cx.arg(node, 0)
        if x.ndim == 2:
            xv = mb.expand_dims(x=xv, axes=[-1], name=f"{name}_x3")
        y = mb.batch_norm(x=xv, mean=cx.arg(node, 1), variance=cx.arg(node, 2), epsilon=eps,
                          name=name if x.ndim > 2 else f"{name}_bn", **kw)  # fmt: skip
        return y if x.ndim > 2 else mb.squeeze(x=y, axes=[-1], name=name)
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    d = mb.sub(x=cx.arg(node, 0), y=cx.param(node, 1, shape, f"{name}_mean"), name=f"{name}_d")
    t = mb.add(x=cx.param(node, 2, shape, f"{name}_var"), y=cx.const(eps, f"{name}_eps"),
               name=f"{name}_ve")  # fmt: skip
    r = mb.rsqrt(x=t, epsilon=_zero_eps(), name=f"{name}_r")
    affine = node.attrs["has_weight"] or node.attrs["has_bias"]
    y = mb.mul(x=d, y=r, name=f"{name}_y" if affine else name)
    return _scale_shift(cx, node, y, name, shape) if affine else y


@lowers("l2_norm", "mul + reduce_sum + maximum + rsqrt + mul",
        note="aneforge's formula x * rsqrt(max(sum(x^2), eps)) along one axis")  # fmt: skip
def _l2_norm(cx, node, name):
    x, mb = node.srcs[0], cx.mb
    axis = norm_axis(node.op, node.attrs["axis"], x.ndim)
    xv = cx.arg(node, 0)
    ss = mb.reduce_sum(x=mb.mul(x=xv, y=xv, name=f"{name}_sq"), axes=[axis], keep_dims=True,
                       name=f"{name}_ss")  # fmt: skip
    m = mb.maximum(x=ss, y=cx.const(node.attrs["eps"], f"{name}_eps"), name=f"{name}_m")
    r = mb.rsqrt(x=m, epsilon=_zero_eps(), name=f"{name}_r")
    return mb.mul(x=xv, y=r, name=name)


# ---- pooling and resampling ----------------------------------------------------------


def _pool(mil):
    def fn(cx, node, name):
        a = node.attrs
        kern, stride, geo_pads = pool_geometry(node)
        pad = [p for pp in geo_pads for p in pp]
        kw = {}
        if mil == "avg_pool":
            kw["exclude_padding_from_average"] = not a["count_include_pad"]
        return getattr(cx.mb, mil)(
            x=cx.arg(node, 0), kernel_sizes=list(kern), strides=list(stride),
            pad_type="custom", pad=pad, ceil_mode=False, name=name, **kw,
        )  # fmt: skip

    return fn


_add("max_pool", "max_pool (custom pad)", _pool("max_pool"))
_add("avg_pool", "avg_pool (custom pad, exclude_padding_from_average)", _pool("avg_pool"))


@lowers(
    "upsample",
    "upsample_nearest_neighbor or resize_bilinear (+ expand_dims / squeeze for NCW)",
    note="bilinear: UNALIGN_CORNERS (half-pixel) or STRICT_ALIGN_CORNERS",
)
def _upsample(cx, node, name):
    x, mb = node.srcs[0], cx.mb
    scale = spatial_tuple(node.op, node.attrs["scale"], x.ndim - 2, "scale")
    xv = cx.arg(node, 0)
    one_d = x.ndim == 3
    if one_d:
        xv, scale = mb.expand_dims(x=xv, axes=[2], name=f"{name}_x4"), (1,) + tuple(scale)
    inner = f"{name}_4d" if one_d else name
    if node.attrs["mode"] == "nearest":
        y = mb.upsample_nearest_neighbor(x=xv, scale_factor_height=scale[0],
                                         scale_factor_width=scale[1], name=inner)  # fmt: skip
    else:
        h, w = (1, x.shape[2]) if one_d else x.shape[2:]
        mode = "STRICT_ALIGN_CORNERS" if node.attrs["align_corners"] else "UNALIGN_CORNERS"
        y = mb.resize_bilinear(x=xv, target_size_height=h * scale[0], sampling_mode=mode,
                               target_size_width=w * scale[1], name=inner)  # fmt: skip
    return mb.squeeze(x=y, axes=[2], name=name) if one_d else y


# ---- shape ops -----------------------------------------------------------------------


@lowers("reshape", "reshape (to the static output shape)")
def _reshape(cx, node, name):
    return cx.mb.reshape(x=cx.arg(node, 0), shape=list(node.shape), name=name)


@lowers("transpose", "transpose")
def _transpose(cx, node, name):
    perm = node.attrs["perm"]
    perm = list(range(node.srcs[0].ndim))[::-1] if perm is None else list(perm)
    return cx.mb.transpose(x=cx.arg(node, 0), perm=perm, name=name)


@lowers("concat", "concat")
def _concat(cx, node, name):
    axis = norm_axis(node.op, node.attrs["axis"], node.srcs[0].ndim)
    values = [cx.arg(node, i) for i in range(len(node.srcs))]
    return cx.mb.concat(values=values, axis=axis, name=name)


def _slice_index(cx, x, bounds, name):
    begin = [b[0] for b in bounds]
    return cx.mb.slice_by_index(x=x, begin=begin, end=[b[1] for b in bounds],
                                stride=[b[2] for b in bounds], name=name)  # fmt: skip


@lowers("slice", "slice_by_index")
def _slice(cx, node, name):
    x, a = node.srcs[0], node.attrs
    steps = a["steps"] or (1,) * x.ndim
    ranges = zip(x.shape, a["begins"], a["ends"], steps)
    bounds = [slice(b, e, s).indices(d) for d, b, e, s in ranges]
    return _slice_index(cx, cx.arg(node, 0), bounds, name)


@lowers("squeeze", "squeeze (identity when nothing is squeezed)")
def _squeeze(cx, node, name):
    x = node.srcs[0]
    axes = node.attrs["axes"]
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else axes
    axes = list(norm_axes(node.op, axes, x.ndim))
    if not axes:
        return cx.mb.identity(x=cx.arg(node, 0), name=name)
    return cx.mb.squeeze(x=cx.arg(node, 0), axes=axes, name=name)


@lowers("expand_dims", "expand_dims")
def _expand_dims(cx, node, name):
    axes = list(norm_axes(node.op, node.attrs["axes"], len(node.shape)))
    return cx.mb.expand_dims(x=cx.arg(node, 0), axes=axes, name=name)


@lowers("pixel_shuffle", "pixel_shuffle (PyTorch order)")
def _pixel_shuffle(cx, node, name):
    return cx.mb.pixel_shuffle(x=cx.arg(node, 0), upscale_factor=node.attrs["factor"], name=name)


@lowers("pixel_unshuffle", "pixel_unshuffle (PyTorch order)", min_ios=16)
def _pixel_unshuffle(cx, node, name):
    factor = np.uint32(node.attrs["factor"])  # Core ML types this one uint32
    return cx.mb.pixel_unshuffle(x=cx.arg(node, 0), downscale_factor=factor, name=name)


MAX_GATHER_RUNS = 16  # more runs of consecutive indices than this: one MIL gather


def _runs(idx) -> list[tuple[int, int]]:
    """Maximal runs of consecutive ascending indices as (start, stop)."""
    runs: list[list[int]] = []
    for i in idx:
        if runs and i == runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([i, i + 1])
    return [(a, b) for a, b in runs]


@lowers("gather", "slice_by_index per run of consecutive indices + concat, or gather",
        note=f"static copies as on the engine; > {MAX_GATHER_RUNS} runs: one gather")  # fmt: skip
def _gather(cx, node, name):
    x = node.srcs[0]
    axis = norm_axis(node.op, node.attrs["axis"], x.ndim)
    d = x.shape[axis]
    idx = [i + d if i < 0 else i for i in node.attrs["indices"]]
    runs = _runs(idx)
    if len(runs) > MAX_GATHER_RUNS:
        return cx.mb.gather(x=cx.arg(node, 0), indices=np.asarray(idx, np.int32), axis=axis,
                            name=name)  # fmt: skip
    full = [(0, n, 1) for n in x.shape]
    parts = []
    for k, (a, b) in enumerate(runs):
        bounds = list(full)
        bounds[axis] = (a, b, 1)
        label = name if len(runs) == 1 else f"{name}_run{k}"
        parts.append(_slice_index(cx, cx.arg(node, 0), bounds, label))
    if len(parts) == 1:
        return parts[0]
    return cx.mb.concat(values=parts, axis=axis, name=name)


@lowers("cast", "identity (fp16 is the only dataplane type)")
def _cast(cx, node, name):
    return cx.mb.identity(x=cx.arg(node, 0), name=name)


@lowers("embedding", "gather (axis 0) of the table at the int32 ids",
        note="ids arrive as int32; Core ML does not check them against the table")  # fmt: skip
def _embedding(cx, node, name):
    return cx.mb.gather(x=cx.arg(node, 0), indices=cx.arg(node, 1), axis=0, name=name)


@lowers("embedding_fp16_ids", "cast (fp16 ids to int32), then gather (axis 0) of the table",
        note="the whole-number ids convert exactly; Core ML does not check them")  # fmt: skip
def _embedding_fp16_ids(cx, node, name):
    ids = cx.mb.cast(x=cx.arg(node, 1), dtype="int32", name=f"{name}_ids")
    return cx.mb.gather(x=cx.arg(node, 0), indices=ids, axis=0, name=name)


@lowers("int_to_fp16", "cast (int32 to fp16)", note="rounds to nearest even, as the engine")
def _int_to_fp16(cx, node, name):
    return cx.mb.cast(x=cx.arg(node, 0), dtype="fp16", name=name)
