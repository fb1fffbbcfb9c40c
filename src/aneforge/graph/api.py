"""The public op functions (``af.relu``, ``af.conv``, ...) and the Tensor methods.

Unary and binary elementwise functions are generated from the op registry, so their
docstrings come from the op records; the rest are written out for their signatures.
Every function takes a keyword-only ``name=`` (a non-empty string) that labels the node
it returns: metadata for layer tables and the Core ML export, never part of what the
node computes. The Tensor methods are these functions, so ``x.relu(name="act")`` works.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 8), name="x")
    >>> af.softmax(af.matmul(x, np.ones((8, 4)), name="fc"), name="probs").name
    'probs'
"""

from __future__ import annotations

import numpy as np

from ..errors import AttributeValueError, ShapeError
from .ops.elementwise import BINARY, COMPARE, UNARY
from .ops.shape import getitem
from .registry import check_int, describe, get_op
from .tensor import Tensor, as_tensor, make


def _unary_function(name: str):
    op = get_op(name)
    attrs = ", ".join(f"{k}={v.default!r}" for k, v in op.attrs.items())

    def fn(x, *, name=None, **kwargs):
        return make(op.name, x, name=name, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Elementwise {name}: {op.doc}.\n\n"
        f"Signature: ``{name}(x{', ' + attrs if attrs else ''}, *, name=None)``; fp16 in, "
        "fp16 out, rounded once. ``name`` labels the node (layer tables, Core ML).\n\n"
        f"Example:\n    >>> import aneforge as af\n    >>> af.{name}(af.input((4,))).shape\n"
        "    (4,)\n"
    )
    return fn


def _binary_function(name: str):
    op = get_op(name)

    def fn(a, b, *, name=None):
        return make(op.name, a, b, name=name)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (
        f"Elementwise {name}: {op.doc}, with NumPy broadcasting; scalars and arrays "
        "become fp16 weights. ``name=`` labels the node.\n\n"
        f"Example:\n    >>> import aneforge as af\n    >>> af.{name}(af.input((2, 3)), 2.0).shape\n"
        "    (2, 3)\n"
    )
    return fn


ELEMENTWISE = {n: _unary_function(n) for n in UNARY}
ELEMENTWISE.update({n: _binary_function(n) for n in (*BINARY, *COMPARE)})
globals().update(ELEMENTWISE)


def select(cond, a, b, *, name=None) -> Tensor:
    """``a`` where ``cond != 0`` else ``b``; all three broadcast.

    Example:
        >>> import aneforge as af
        >>> x = af.input((3,))
        >>> af.select(x > 0, x, 0.0).shape
        (3,)
    """
    return make("select", cond, a, b, name=name)


def matmul(a, b, *, name=None) -> Tensor:
    """``a @ b`` with NumPy matmul semantics; a weight on the right is a weight matmul.

    Example:
        >>> import numpy as np, aneforge as af
        >>> (af.input((2, 8)) @ np.ones((8, 4))).shape
        (2, 4)
    """
    a, b = as_tensor(a, "matmul lhs"), as_tensor(b, "matmul rhs")
    return make("matmul" if b.op == "weight" else "bmm", a, b, name=name)


def bmm(a, b, *, name=None) -> Tensor:
    """Batched ``a @ b`` between two tensors (batch dims broadcast).

    Example:
        >>> import aneforge as af
        >>> af.bmm(af.input((4, 2, 8)), af.input((4, 8, 3))).shape
        (4, 2, 3)
    """
    return make("bmm", a, b, name=name)


def linear(x, weight, bias=None, *, name=None) -> Tensor:
    """``x @ weight.T + bias`` with ``weight`` of shape [out_features, in_features].

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.linear(af.input((2, 8)), np.zeros((4, 8)), np.zeros(4)).shape
        (2, 4)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make("linear", *srcs, name=name)


def conv(x, weight, bias=None, stride=1, pad=0, dilation=1, groups=1, *, name=None) -> Tensor:
    """1-D (NCW) or 2-D (NCHW) convolution; weight [Cout, Cin/groups, (kh), kw].

    ``pad`` is one int, one per spatial dim, or begins-then-ends (ONNX order).

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.conv(af.input((1, 3, 8, 8)), np.zeros((4, 3, 3, 3)), pad=1).shape
        (1, 4, 8, 8)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make("conv", *srcs, stride=stride, pad=pad, dilation=dilation, groups=groups, name=name)


def conv_transpose(
    x, weight, bias=None, stride=1, pad=0, output_padding=0, dilation=1, groups=1, *, name=None
) -> Tensor:
    """Transposed convolution; weight [Cin, Cout/groups, (kh), kw] (PyTorch layout).

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.conv_transpose(af.input((1, 4, 8, 8)), np.zeros((4, 2, 2, 2)), stride=2).shape
        (1, 2, 16, 16)
    """
    srcs = (x, weight) if bias is None else (x, weight, bias)
    return make(
        "conv_transpose",
        *srcs,
        stride=stride,
        pad=pad,
        output_padding=output_padding,
        dilation=dilation,
        groups=groups,
        name=name,
    )


def _reduction(op_name):
    def fn(x, axes=None, keepdims=False, *, name=None):
        if isinstance(axes, int):
            axes = (axes,)
        return make(op_name, x, axes=axes, keepdims=keepdims, name=name)

    fn.__name__ = fn.__qualname__ = op_name
    fn.__doc__ = (
        f"{get_op(op_name).doc} over ``axes`` (all when None); ``name=`` labels the node.\n\n"
        f"Example:\n    >>> import aneforge as af\n"
        f"    >>> af.{op_name}(af.input((2, 3)), axes=-1).shape\n    (2,)\n"
    )
    return fn


sum = _reduction("sum")  # noqa: A001  (mirrors NumPy's name)
mean = _reduction("mean")
amax = _reduction("amax")
amin = _reduction("amin")


def softmax(x, axis=-1, *, name=None) -> Tensor:
    """Softmax along ``axis`` (max-subtracted, narrow fp16 sum).

    Example:
        >>> import aneforge as af
        >>> af.softmax(af.input((2, 5))).shape
        (2, 5)
    """
    return make("softmax", x, axis=axis, name=name)


def cumsum(x, axis=-1, *, name=None) -> Tensor:
    """Cumulative sum over the last axis (lowered as ``x @ triu_ones``).

    Example:
        >>> import aneforge as af
        >>> af.cumsum(af.input((2, 5))).shape
        (2, 5)
    """
    x = as_tensor(x, "cumsum input")
    axis = check_int(axis, "cumsum", None, "axis")
    if axis not in (-1, len(x.shape) - 1):
        raise ShapeError(
            f"cumsum: only the last axis is supported, got axis={axis} for shape {x.shape}; "
            "transpose the axis to the end first"
        )
    return make("cumsum", x, name=name)


def _affine_srcs(x, weight, bias):
    srcs = [x] + [p for p in (weight, bias) if p is not None]
    return srcs, {"has_weight": weight is not None, "has_bias": bias is not None}


def layer_norm(x, weight=None, bias=None, axis=-1, eps=1e-5, *, name=None) -> Tensor:
    """Layer normalization over axes ``[axis, ndim)``; weight/bias of that shape.

    Example:
        >>> import aneforge as af
        >>> af.layer_norm(af.input((2, 8))).shape
        (2, 8)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    return make("layer_norm", *srcs, axis=axis, eps=eps, **flags, name=name)


def rms_norm(x, weight=None, axis=-1, eps=1e-5, *, name=None) -> Tensor:
    """RMS normalization over axes ``[axis, ndim)``.

    Example:
        >>> import aneforge as af
        >>> af.rms_norm(af.input((2, 8))).shape
        (2, 8)
    """
    srcs = [x] if weight is None else [x, weight]
    return make("rms_norm", *srcs, axis=axis, eps=eps, has_weight=weight is not None, name=name)


def group_norm(x, groups, weight=None, bias=None, eps=1e-5, *, name=None) -> Tensor:
    """Group normalization of [N, C, ...] over channel groups; weight/bias of shape (C,).

    Example:
        >>> import aneforge as af
        >>> af.group_norm(af.input((1, 8, 4, 4)), groups=2).shape
        (1, 8, 4, 4)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    return make("group_norm", *srcs, groups=groups, eps=eps, **flags, name=name)


def batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5, *, name=None) -> Tensor:
    """Inference batch normalization of [N, C, ...] with per-channel statistics.

    Example:
        >>> import numpy as np, aneforge as af
        >>> af.batch_norm(af.input((1, 3, 4, 4)), np.zeros(3), np.ones(3)).shape
        (1, 3, 4, 4)
    """
    srcs, flags = _affine_srcs(x, weight, bias)
    srcs = [srcs[0], mean, var] + srcs[1:]
    return make("batch_norm", *srcs, eps=eps, **flags, name=name)


def l2_norm(x, axis=-1, eps=1e-6, *, name=None) -> Tensor:
    """``x / sqrt(max(sum(x**2), eps))`` along ``axis``.

    Example:
        >>> import aneforge as af
        >>> af.l2_norm(af.input((2, 8))).shape
        (2, 8)
    """
    return make("l2_norm", x, axis=axis, eps=eps, name=name)


def max_pool(x, kernel, stride=None, pad=0, *, name=None) -> Tensor:
    """Max pooling over NCW / NCHW windows (stride defaults to the kernel).

    Example:
        >>> import aneforge as af
        >>> af.max_pool(af.input((1, 3, 8, 8)), 2).shape
        (1, 3, 4, 4)
    """
    return make("max_pool", x, kernel=kernel, stride=stride, pad=pad, name=name)


def avg_pool(x, kernel, stride=None, pad=0, count_include_pad=False, *, name=None) -> Tensor:
    """Average pooling over NCW / NCHW windows (narrow fp16 sum).

    Example:
        >>> import aneforge as af
        >>> af.avg_pool(af.input((1, 3, 8, 8)), 2).shape
        (1, 3, 4, 4)
    """
    return make(
        "avg_pool",
        x,
        kernel=kernel,
        stride=stride,
        pad=pad,
        count_include_pad=count_include_pad,
        name=name,
    )


def upsample(x, scale, mode="nearest", align_corners=False, *, name=None) -> Tensor:
    """Integer-factor upsampling of NCW / NCHW, ``mode`` 'nearest' or 'bilinear'.

    Example:
        >>> import aneforge as af
        >>> af.upsample(af.input((1, 3, 4, 4)), 2).shape
        (1, 3, 8, 8)
    """
    return make("upsample", x, scale=scale, mode=mode, align_corners=align_corners, name=name)


def reshape(x, shape, *, name=None) -> Tensor:
    """Same elements in a new shape (one -1 is inferred).

    Example:
        >>> import aneforge as af
        >>> af.reshape(af.input((2, 6)), (3, -1)).shape
        (3, 4)
    """
    return make("reshape", x, shape=shape, name=name)


def transpose(x, perm=None, *, name=None) -> Tensor:
    """Permute axes (reverse them when ``perm`` is None).

    Example:
        >>> import aneforge as af
        >>> af.transpose(af.input((2, 3, 4)), (0, 2, 1)).shape
        (2, 4, 3)
    """
    return make("transpose", x, perm=perm, name=name)


def concat(tensors, axis=0, *, name=None) -> Tensor:
    """Join tensors along ``axis``.

    Example:
        >>> import aneforge as af
        >>> af.concat([af.input((2, 3)), af.input((2, 5))], axis=1).shape
        (2, 8)
    """
    if not isinstance(tensors, (list, tuple)):
        raise ShapeError(
            f"concat: tensors must be a list or tuple of tensors, got {describe(tensors)}; "
            "e.g. af.concat([a, b], axis=1)"
        )
    return make("concat", *tensors, axis=axis, name=name)


def slice(x, begins, ends, steps=None, *, name=None) -> Tensor:  # noqa: A001  (the op's name)
    """``x[b0:e0:s0, ...]`` for every axis (Python bounds, positive steps).

    Example:
        >>> import aneforge as af
        >>> af.slice(af.input((4, 6)), (0, 2), (4, 6)).shape
        (4, 4)
    """
    return make("slice", x, begins=begins, ends=ends, steps=steps, name=name)


def squeeze(x, axes=None, *, name=None) -> Tensor:
    """Drop size-1 axes (all of them when ``axes`` is None).

    Example:
        >>> import aneforge as af
        >>> af.squeeze(af.input((1, 3, 1))).shape
        (3,)
    """
    if isinstance(axes, int):
        axes = (axes,)
    return make("squeeze", x, axes=axes, name=name)


def expand_dims(x, axes, *, name=None) -> Tensor:
    """Insert size-1 axes at the given output positions.

    Example:
        >>> import aneforge as af
        >>> af.expand_dims(af.input((3,)), 0).shape
        (1, 3)
    """
    if isinstance(axes, int):
        axes = (axes,)
    return make("expand_dims", x, axes=axes, name=name)


def pixel_shuffle(x, factor, *, name=None) -> Tensor:
    """Depth to space: [N, C*r*r, H, W] -> [N, C, H*r, W*r].

    Example:
        >>> import aneforge as af
        >>> af.pixel_shuffle(af.input((1, 8, 3, 3)), 2).shape
        (1, 2, 6, 6)
    """
    return make("pixel_shuffle", x, factor=factor, name=name)


def pixel_unshuffle(x, factor, *, name=None) -> Tensor:
    """Space to depth: [N, C, H*r, W*r] -> [N, C*r*r, H, W].

    Example:
        >>> import aneforge as af
        >>> af.pixel_unshuffle(af.input((1, 2, 6, 6)), 2).shape
        (1, 8, 3, 3)
    """
    return make("pixel_unshuffle", x, factor=factor, name=name)


def cast(x, dtype="float16", *, name=None) -> Tensor:
    """Cast to fp16, the only dataplane type (other dtypes raise).

    Example:
        >>> import aneforge as af
        >>> af.cast(af.input((2,)), "float16").shape
        (2,)
    """
    return make("cast", x, dtype=dtype, name=name)


from .ops.bridge import BRIDGE_FUNCTIONS  # noqa: E402  (after the fused functions)

globals().update(BRIDGE_FUNCTIONS)

_METHODS = dict(ELEMENTWISE)
_METHODS.update(
    sum=sum,
    mean=mean,
    amax=amax,
    amin=amin,
    softmax=softmax,
    cumsum=cumsum,
    layer_norm=layer_norm,
    rms_norm=rms_norm,
    l2_norm=l2_norm,
    reshape=reshape,
    transpose=transpose,
    squeeze=squeeze,
    expand_dims=expand_dims,
    cast=cast,
    matmul=matmul,
    bmm=bmm,
    linear=linear,
    conv=conv,
    conv_transpose=conv_transpose,
    group_norm=group_norm,
    batch_norm=batch_norm,
    max_pool=max_pool,
    avg_pool=avg_pool,
    upsample=upsample,
    pixel_shuffle=pixel_shuffle,
    pixel_unshuffle=pixel_unshuffle,
    slice=slice,
    select=lambda self, a, b, *, name=None: select(self, a, b, name=name),
)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.__getitem__ = getitem  # x[key]: ints, slices and one Ellipsis (ops.shape.getitem)
Tensor.T = property(lambda self: transpose(self), doc="Axes reversed.")

__all__ = sorted(
    set(ELEMENTWISE)
    | set(BRIDGE_FUNCTIONS)
    | {
        "select",
        "matmul",
        "bmm",
        "linear",
        "conv",
        "conv_transpose",
        "sum",
        "mean",
        "amax",
        "amin",
        "softmax",
        "cumsum",
        "layer_norm",
        "rms_norm",
        "group_norm",
        "batch_norm",
        "l2_norm",
        "max_pool",
        "avg_pool",
        "upsample",
        "reshape",
        "transpose",
        "concat",
        "slice",
        "squeeze",
        "expand_dims",
        "pixel_shuffle",
        "pixel_unshuffle",
        "cast",
    }
)


def gather(x, indices, axis=0, *, name=None) -> Tensor:
    """The slices of ``x`` at the constant ``indices`` along ``axis``, in order.

    Indices may repeat and run in any order (negative ones count from the end); the
    result's ``axis`` has ``len(indices)`` entries. A pure movement op (exact).

    Example:
        >>> import aneforge as af
        >>> af.gather(af.input((4, 3)), [3, 3, 0]).shape
        (3, 3)
    """
    nested = isinstance(indices, (list, tuple)) and any(
        isinstance(i, (list, tuple, np.ndarray)) for i in indices
    )
    if nested or (isinstance(indices, np.ndarray) and indices.ndim > 1):
        raise AttributeValueError(
            f"gather: indices must be a flat list of integers, got {describe(indices)}; "
            "flatten them and reshape the result instead"
        )
    return make("gather", x, indices=indices, axis=axis, name=name)


Tensor.gather = gather
__all__ = sorted([*__all__, "gather"])
