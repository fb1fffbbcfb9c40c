"""The normalization bridge ops: minmax_norm and lrn."""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ...registry import Attr, check_int_tuple, float_attr, int_attr
from ...tensor import Tensor, make
from ..common import norm_axes
from ._common import bridge_op, need_rank


def _axes_attr():
    return Attr(lambda value, op: check_int_tuple(value, op, None, "axes"), None)


def _minmax_axes(shape, axes):
    if axes is None:
        return tuple(range(1, len(shape))) if len(shape) >= 2 else (0,)
    return norm_axes("minmax_norm", axes, len(shape))


def _minmax_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) < 1:
        raise ShapeError(f"minmax_norm: input must have rank >= 1, got shape {x}")
    _minmax_axes(x, attrs["axes"])
    return x


def _minmax_body(st, inputs, attrs):
    x = inputs[0]
    axes = _minmax_axes(x.shape, attrs["axes"])
    mn = np.min(x, axis=axes, keepdims=True)
    mx = np.max(x, axis=axes, keepdims=True)
    d = st.step(x - mn)
    r = st.step(st.step(mx - mn) + st.const(attrs["eps"]))
    return st.step(d / r)


_MINMAX_NORM = bridge_op(
    "minmax_norm",
    1,
    {"axes": _axes_attr(), "eps": float_attr(1e-5, "eps")},
    _minmax_shape,
    _minmax_body,
    "(x - amin) / (amax - amin + eps) over axes",
    flags=("route",),
)


def minmax_norm(x, axes=None, eps=1e-5, *, name=None) -> Tensor:
    """Min-max normalization ``(x - amin) / (amax - amin + eps)`` over ``axes``.

    Inputs: ``x`` of any rank >= 1. Attributes: ``axes`` (int or ints; None = every axis
    but 0 when rank >= 2, else all), ``eps`` (default 1e-5). Output: ``x``'s shape.
    Emulator numerics: ``mn``, ``mx`` exact; ``d = fp16(x - mn)``;
    ``r = fp16(fp16(mx - mn) + fp16(eps))``; ``y = fp16(d / r)`` (the same steps as the
    fused decomposition, so the two are bit-identical).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import minmax_norm
        >>> af.compile(minmax_norm(af.input((3,)), eps=0.0))(np.array([1.0, 2.0, 5.0]))
        array([0.  , 0.25, 1.  ], dtype=float32)
    """
    if isinstance(axes, int):
        axes = (axes,)
    return make("minmax_norm", x, axes=axes, eps=eps, name=name)


def _lrn_shape(in_shapes, attrs):
    x = in_shapes[0]
    need_rank("lrn", x, (3, 4, 5), "[N, C, ...] with channels on axis 1")
    return x


def _lrn_body(st, inputs, attrs):
    x = inputs[0]
    size, c = attrs["size"], x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    sq = st.step(x * x)
    pad = [(0, 0)] * x.ndim
    pad[1] = (lo, hi)
    padded = np.pad(sq, pad)  # zero terms: adding +0 to a sum of squares changes nothing
    acc = np.zeros_like(sq)
    for j in range(size):
        acc = st.step(acc + padded[:, j : j + c])
    t = st.step(st.const(attrs["alpha"] / size) * acc)
    t = st.step(t + st.const(attrs["bias"]))
    p = st.step(t ** st.const(attrs["beta"]))
    return st.step(x / p)


_LRN = bridge_op(
    "lrn",
    1,
    {
        "size": int_attr(5, 1, "size"),
        "alpha": float_attr(1e-4, "alpha"),
        "beta": float_attr(0.75, "beta"),
        "bias": float_attr(1.0, "bias"),
    },
    _lrn_shape,
    _lrn_body,
    "local response normalization across channels (ONNX LRN)",
    flags=("route",),
)


def lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0, *, name=None) -> Tensor:
    """Local response normalization across channels (the ONNX ``LRN`` definition).

    Inputs: ``x`` [N, C, ...] (rank 3 to 5, channels on axis 1). Attributes: ``size``
    (window, >= 1), ``alpha``, ``beta``, ``bias``. Output: ``x``'s shape, with
    ``square_sum[c] = sum of x[c']**2`` over ``c'`` in
    ``[c - floor((size-1)/2), c + ceil((size-1)/2)]`` within ``[0, C)`` and
    ``y = x / (bias + alpha/size * square_sum) ** beta``.
    Emulator numerics: ``sq = fp16(x*x)``; ``ss`` = narrow fp16 sum over the window in
    ascending channel order; ``t = fp16(fp16(alpha/size) * ss)``;
    ``t = fp16(t + fp16(bias))``; ``p = fp16(t ** fp16(beta))``; ``y = fp16(x / p)``.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import lrn
        >>> lrn(af.input((1, 8, 4, 4)), size=3).shape
        (1, 8, 4, 4)
    """
    return make("lrn", x, size=size, alpha=alpha, beta=beta, bias=bias, name=name)


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_MINMAX_NORM, _LRN)
