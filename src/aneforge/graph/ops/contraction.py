"""Contractions: matmul (weight on the right), bmm (two tensors), linear, conv,
conv_transpose. These are the ops with a closed-form FLOP count.

Emulator contract (docs/numerics.md): every product of two fp16 operands is rounded to
fp16, the products are added one at a time in ascending contraction order into a float32
accumulator, and the sum is rounded to fp16. A bias is a separate fp16 add after that
rounding. The contraction order of a convolution is (input channel, kernel row, kernel
column) in C order. The kernels receive the executor's arithmetic policy ``arith``
(:class:`~aneforge.graph.arith.Arith`) and contract through ``arith.matmul(a[B,M,K],
b[B,K,N])``, so the reference interpreter and the fast path share everything else.

Range rules (:mod:`aneforge.graph.ranges`): with a known weight, each output column is
bounded by its own row sums, ``sum_k max(fp16(W_kj*lo), fp16(W_kj*hi))``, plus the
float32 accumulation error of a length-K sum in any order; with two activations, by K
times the corner products. The bound is rounded to fp16, passed through the target's
output stage (``RangeEnv.contraction``) and then the bias is added per channel. Padding
zeros (conv) and the zero-stuffed input of conv_transpose are exact zero terms: each
distinct set of taps the outputs read is bounded on its own, so zeros enter only there.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 3), name="x", range=(-1.0, 2.0))
    >>> y = af.linear(x, np.array([[1.0, -1.0, 0.5], [2.0, 0.0, 0.0]]), np.array([0.0, 1.0]))
    >>> str(af.range_analysis(y).nodes[-1].interval)
    '[-3.5, 5]'
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..arith import as_arith
from ..facts import Flag, LoopNest, Role, WeightOperand, signed
from ..ranges import ETA16, INF, U16, Interval, weight_value
from ..registry import arg_name, int_attr, ints_attr, register
from .common import broadcast_shape, fused_op, pads, spatial_tuple
from .contraction_bounds import (
    bias_bounds,
    clamped,
    contraction_interval,
    interval_sum_bounds,
    output_l2,
    row_norm_bound,
    slack_rate,
    weighted_sum_bounds,
    with_l2,
)

# ---- matmul / bmm ------------------------------------------------------------------


def _matmul_shape(op):
    def rule(in_shapes, attrs):
        a, b = in_shapes
        if len(a) < 1 or len(b) < 1:
            raise ShapeError(f"{op}: operands must have rank >= 1, got {a} and {b}")
        a2 = (1,) + a if len(a) == 1 else a
        b2 = b + (1,) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise ShapeError(
                f"{op}: contraction sizes differ: {a} @ {b} ({a2[-1]} vs {b2[-2]}); "
                "the last axis of the left operand must equal the second-to-last of the right"
            )
        batch = broadcast_shape(op, [a2[:-2], b2[:-2]])
        out = batch + (a2[-2], b2[-1])
        if len(a) == 1:
            out = out[:-2] + out[-1:]
        if len(b) == 1:
            out = out[:-1]
        return out

    return rule


def _as_batched(a, b):
    """Bring matmul operands to (B, M, K) and (B, K, N); return them and the out shape."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    a3 = np.broadcast_to(a2, batch + (m, k)).reshape(-1, m, k)
    b3 = np.broadcast_to(b2, batch + (k, n)).reshape(-1, k, n)
    out = batch + (m, n)
    if a.ndim == 1:
        out = out[:-2] + out[-1:]
    if b.ndim == 1:
        out = out[:-1]
    return a3, b3, out


def _matmul_emulate(inputs, attrs, arith):
    a3, b3, out = _as_batched(*inputs)
    return as_arith(arith).matmul(a3, b3).reshape(out)


def _matmul_exact(inputs, attrs):
    return np.matmul(inputs[0], inputs[1])


def _matmul_flops(in_shapes, out_shape, attrs):
    k = in_shapes[0][-1]
    return 2 * k * int(np.prod(out_shape, dtype=np.int64))


def mixed_l2(a: Interval, b: Interval, k: int, n: int, out: Interval) -> float:
    """The row 2-norm of ``a @ b`` for rows of ``a`` with a 1-norm bound (softmax
    weights) and rows of ``b`` with a 2-norm bound (values): each output row is
    ``sum_k a_k b_k`` with products rounded once, so ``||y||_2 <= ((1 + u) l1(a) l2(b) +
    K sqrt(N) 2**-25) (1 + gamma_{K-1})``, then ``(1 + u)`` and ``sqrt(N) 2**-25`` for
    the output's rounding; inf when a bound is missing or the output may saturate."""
    if not (np.isfinite(a.l1) and np.isfinite(b.l2) and np.isfinite(out.max_abs)):
        return INF
    y = ((1 + U16) * a.l1 * b.l2 + k * np.sqrt(n) * ETA16) * (1 + slack_rate(k))
    return float(((1 + U16) * y + np.sqrt(n) * ETA16) * (1 + 2.0**-40))


def _matmul_range(node, srcs, env):
    """Row sums of a known operand (right ``x @ W`` or left ``W @ x``), else K corner
    products of the two intervals."""
    a, b = node.srcs
    wa, wb = weight_value(a), weight_value(b)
    k = a.shape[-1]
    if wb is not None:
        w = wb[:, None] if wb.ndim == 1 else wb
        lo, hi, nan = weighted_sum_bounds(w, srcs[0])
        lo, hi = clamped(lo, hi, row_norm_bound(srcs[0], k, w=w))
        out = contraction_interval(env, lo, hi, nan)
        return with_l2(out, output_l2(srcs[0], w) if np.isfinite(out.max_abs) else INF)
    elif wa is not None:
        w = wa[None, :] if wa.ndim == 1 else wa
        lo, hi, nan = weighted_sum_bounds(np.swapaxes(w, -1, -2), srcs[1])
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], k)
        lo, hi = clamped(lo, hi, row_norm_bound(srcs[0], k, other=srcs[1]))
        out = contraction_interval(env, lo, hi, nan)
        return with_l2(out, mixed_l2(srcs[0], srcs[1], k, b.shape[-1], out))
    return contraction_interval(env, lo, hi, nan)


_CONTRACTION = (Flag.CONTRACTION,)

# matmul streams its right operand as the weight, channels on its last axis; bmm's two
# operands are activations (nothing to compress, no GEMV role swap).
for _name, _doc, _weight in (
    ("matmul", "x @ W with W a weight (NumPy matmul semantics)", WeightOperand(1, -1)),
    ("bmm", "a @ b between two tensors, batch dims broadcast (NumPy matmul semantics)", None),
):
    register(
        fused_op(
            _name,
            2,
            {},
            _matmul_shape(_name),
            _matmul_emulate,
            _matmul_exact,
            doc=_doc,
            sign=signed,
            range=_matmul_range,
            flags=_CONTRACTION,
            flops=_matmul_flops,
            role=Role.MATMUL,
            weight_operand=_weight,
            nest=LoopNest("contract", form="matmul"),
        )
    )

# ---- linear ------------------------------------------------------------------------


def _linear_shape(in_shapes, attrs):
    x, w = in_shapes[:2]
    if len(x) < 1:
        raise ShapeError(f"linear: input must have rank >= 1 (features last), got shape {x}")
    if len(w) != 2:
        raise ShapeError(f"linear: weight must be [out_features, in_features], got {w}")
    if x[-1] != w[1]:
        raise ShapeError(f"linear: input has {x[-1]} features but the weight {w} expects {w[1]}")
    if len(in_shapes) == 3 and in_shapes[2] != (w[0],):
        raise ShapeError(f"linear: bias must have shape ({w[0]},), got {in_shapes[2]}")
    return x[:-1] + (w[0],)


def _linear_emulate(inputs, attrs, arith):
    x, w = inputs[:2]
    a = as_arith(arith)
    lead, n = x.shape[:-1], w.shape[0]
    y = a.matmul(x.reshape(1, -1, x.shape[-1]), w.T[None])
    if len(inputs) == 3:  # the features as channels: (rows, n, 1) + (n, 1), rounded once
        y = _bias_adder(a)(y.reshape(-1, n, 1), inputs[2].reshape(n, 1))
    return y.reshape(lead + (n,))


def _linear_exact(inputs, attrs):
    y = inputs[0] @ inputs[1].T
    return y + inputs[2] if len(inputs) == 3 else y


def _linear_range(node, srcs, env):
    """Row sums of the weight per output feature, then the bias per feature."""
    x, w = node.srcs[:2]
    wv = weight_value(w)
    k = x.shape[-1]
    if wv is not None:
        lo, hi, nan = weighted_sum_bounds(wv.T, srcs[0])
        lo, hi = clamped(lo, hi, row_norm_bound(srcs[0], k, w=wv.T))
        bias = bias_bounds(node, srcs, 2, w.shape[0])
        out = contraction_interval(env, lo, hi, nan, bias)
        b = weight_value(node.srcs[2]) if len(node.srcs) > 2 else None
        if len(node.srcs) > 2 and b is None:
            return out
        return with_l2(out, output_l2(srcs[0], wv.T, b) if np.isfinite(out.max_abs) else INF)
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], k)
        lo, hi = clamped(lo, hi, row_norm_bound(srcs[0], k, other=srcs[1]))
    return contraction_interval(env, lo, hi, nan, bias_bounds(node, srcs, 2, w.shape[0]))


def _linear_flops(in_shapes, out_shape, attrs):
    return 2 * in_shapes[0][-1] * int(np.prod(out_shape, dtype=np.int64))


register(
    fused_op(
        "linear",
        None,
        {},
        _linear_shape,
        _linear_emulate,
        _linear_exact,
        doc="x @ W.T + b with W [out_features, in_features] (PyTorch layout), bias optional",
        sign=signed,
        range=_linear_range,
        flags=_CONTRACTION,
        flops=_linear_flops,
        role=Role.MATMUL,
        weight_operand=WeightOperand(1, 0),
        nest=LoopNest("contract", form="linear"),
        min_arity=2,
        max_arity=3,
    )
)

# ---- conv / conv_transpose ---------------------------------------------------------

_CONV_ATTRS = {
    "stride": ints_attr((1,), 1, "stride"),
    "pad": ints_attr((0,), None, "padding"),  # labelled as af.conv's argument (PyTorch's)
    "dilation": ints_attr((1,), 1, "dilation"),
    "groups": int_attr(1, 1, "groups"),
}


def _conv_geometry(op, in_shapes, attrs, transpose=False):
    """Check a conv's operands; return (nd, stride, pads, dilation, kernel)."""
    x, w = in_shapes[:2]
    if len(x) not in (3, 4):
        raise ShapeError(f"{op}: input must be NCW or NCHW (rank 3 or 4), got {x}")
    nd = len(x) - 2
    if len(w) != nd + 2:
        raise ShapeError(f"{op}: weight must have rank {nd + 2} for a {nd}-D input, got {w}")
    g = attrs["groups"]
    stride = spatial_tuple(op, attrs["stride"], nd, "stride")
    dil = spatial_tuple(op, attrs["dilation"], nd, "dilation")
    pad = pads(op, attrs["pad"], nd)
    if any(p < 0 for pp in pad for p in pp):
        raise AttributeValueError(f"{op}: {arg_name(op, 'pad')} must be >= 0, got {attrs['pad']}")
    cin = x[1]
    if transpose:
        cin_w, cout = w[0], w[1] * g
    else:
        cin_w, cout = w[1] * g, w[0]
    if cin % g or cout % g:
        raise ShapeError(f"{op}: groups={g} must divide both {cin} in and {cout} out channels")
    if cin_w != cin:
        raise ShapeError(
            f"{op}: input has {cin} channels but weight {w} with groups={g} expects {cin_w}"
        )
    if len(in_shapes) == 3 and in_shapes[2] != (cout,):
        raise ShapeError(f"{op}: bias must have shape ({cout},), got {in_shapes[2]}")
    return nd, stride, pad, dil, tuple(w[2:]), cout


class ConvGeometry(NamedTuple):
    """A conv node's attributes broadcast to its spatial dims."""

    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]  # (begin, end) per spatial dim
    kernel: tuple[int, ...]
    groups: int


def conv_geometry(node) -> ConvGeometry:
    """The validated geometry of ``conv`` or ``conv_transpose`` node ``node``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> y = af.conv(af.input((1, 3, 8, 8)), np.ones((4, 3, 3, 3)), stride=2, padding=1)
        >>> conv_geometry(y)
        ConvGeometry(stride=(2, 2), dilation=(1, 1), pads=((1, 1), (1, 1)), kernel=(3, 3), groups=1)
    """
    shapes = [s.shape for s in node.srcs]
    transpose = node.op == "conv_transpose"
    _, stride, pad, dil, kern, _ = _conv_geometry(node.op, shapes, node.attrs, transpose)
    return ConvGeometry(tuple(stride), tuple(dil), tuple(pad), tuple(kern), node.attrs["groups"])


def _conv_out(op, size, k, s, p, d):
    out = (size + p[0] + p[1] - d * (k - 1) - 1) // s + 1
    if out < 1:
        raise ShapeError(
            f"{op}: kernel {k} (dilation {d}) does not fit input size {size} with "
            f"{arg_name(op, 'pad')} {p}"
        )
    return out


def _conv_shape(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout = _conv_geometry("conv", in_shapes, attrs)
    x = in_shapes[0]
    spatial = tuple(
        _conv_out("conv", x[2 + i], kern[i], stride[i], pad[i], dil[i]) for i in range(nd)
    )
    return (x[0], cout) + spatial


def _im2col(x, kern, stride, dil, groups):
    """(N, C, H, W) padded input -> patches (G, N*Ho*Wo, C/G*kh*kw) in (c, kh, kw) order."""
    n, c, h, w = x.shape
    kh, kw = kern
    win = np.lib.stride_tricks.sliding_window_view(
        x, ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1), axis=(2, 3)
    )[:, :, :: stride[0], :: stride[1], :: dil[0], :: dil[1]]
    ho, wo = win.shape[2], win.shape[3]
    cg = c // groups
    win = win.reshape(n, groups, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    return win.reshape(groups, n * ho * wo, cg * kh * kw), (n, ho, wo)


def _zero_padded(x, pad):
    """NCHW ``x`` with ``pad`` ((top, bottom), (left, right)) zeros around each plane:
    ``np.pad``'s result without its generic machinery, which costs a convolution tens of
    microseconds a call."""
    (top, bottom), (left, right) = pad
    n, c, h, w = x.shape
    out = np.zeros((n, c, h + top + bottom, w + left + right), x.dtype)
    out[:, :, top : top + h, left : left + w] = x
    return out


def _conv2d(x, w, stride, pad, dil, groups, matmul, windows=None):
    """Grouped 2-D convolution of NCHW ``x`` by ``w`` through ``matmul(a3, b3)``.

    Each image and group is one product ``W (Cout/G, K) @ patches (K, Ho*Wo)``, K in
    (c, kh, kw) order: the output comes out in NCHW order (no transpose), and a 1 x 1,
    stride-1, unpadded convolution reads ``x`` itself as its patches (no copy)."""
    if any(p != (0, 0) for p in pad):
        x = _zero_padded(x, pad)
    n, c, cout = x.shape[0], x.shape[1], w.shape[0]
    kh, kw = w.shape[2:]
    span = ((kh - 1) * dil[0] + 1, (kw - 1) * dil[1] + 1)
    ho = (x.shape[2] - span[0]) // stride[0] + 1
    wo = (x.shape[3] - span[1]) // stride[1] + 1
    cg = c // groups
    wmat = w.reshape(groups, cout // groups, cg * kh * kw)
    if n > 1:
        wmat = np.tile(wmat, (n, 1, 1))
    y = None if windows is None else windows(wmat, x, (kh, kw), stride, dil, groups)
    if y is None:
        win = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
        win = win[:, :, :: stride[0], :: stride[1], :: dil[0], :: dil[1]]
        patches = win.transpose(0, 1, 4, 5, 2, 3).reshape(n * groups, cg * kh * kw, ho * wo)
        y = matmul(wmat, patches)  # (N*G, Cout/G, Ho*Wo)
    return y.reshape(n, cout, ho, wo)


def _as_2d(x, w, stride, pad, dil):
    """View 1-D conv operands as 2-D with a unit height."""
    if x.ndim == 4:
        return x, w, stride, pad, dil
    return x[:, :, None], w[:, :, None], (1,) + stride, ((0, 0),) + pad, (1,) + dil


def _conv_run(inputs, attrs, matmul, add_bias, windows=None):
    x, w = inputs[:2]
    nd, stride, pad, dil, _, _ = _conv_geometry(
        "conv", [x.shape, w.shape] + [b.shape for b in inputs[2:]], attrs
    )
    x2, w2, s2, p2, d2 = _as_2d(x, w, stride, pad, dil)
    y = _conv2d(x2, w2, s2, p2, d2, attrs["groups"], matmul, windows)
    if nd == 1:
        y = y[:, :, 0]
    if len(inputs) == 3:
        y = add_bias(y, inputs[2].reshape((-1,) + (1,) * nd))
    return y


def _add_fp16(y, b):
    with np.errstate(all="ignore"):
        return y + b  # fp16 + fp16 in NumPy: computed in float32, rounded once


def _bias_adder(a):
    """``add(y, b)``: ``y + b`` for one fp16 value per channel (axis 1, ``b`` shaped
    ``(C, 1, ...)``), by the policy's compiled bias add where it applies, else NumPy's
    fp16 add: the same bits either way."""
    if a.bias is None:
        return _add_fp16

    def add(y, b):
        out = a.bias(y, b)
        return _add_fp16(y, b) if out is None else out

    return add


def _conv_emulate(inputs, attrs, arith):
    a = as_arith(arith)
    return _conv_run(inputs, attrs, a.matmul, _bias_adder(a), a.windows)


def _conv_exact(inputs, attrs):
    return _conv_run(inputs, attrs, np.matmul, np.add)


def _distinct_taps(padded, kern, stride, dil) -> np.ndarray:
    """(P, kh*kw) 0/1: the distinct sets of taps that read a 1 of the indicator image
    ``padded`` (one channel, through the kernel's own windows) at some output."""
    cols, _ = _im2col(padded, kern, stride, dil, 1)
    return np.unique(cols[0] > 0, axis=0).astype(np.float64)


def _conv_taps(node) -> np.ndarray:
    """The tap sets of a conv's outputs: padding zeros replace the others."""
    x, w = node.srcs[0].shape, node.srcs[1].shape
    nd, stride, pad, dil, kern, _ = _conv_geometry("conv", [x, w], node.attrs)
    ind = np.ones((1, 1) + tuple(x[2:]))
    x2, w2, s2, p2, d2 = _as_2d(ind, np.zeros((1, 1) + kern), stride, pad, dil)
    return _distinct_taps(np.pad(x2, ((0, 0), (0, 0)) + tuple(p2)), w2.shape[2:], s2, d2)


def _conv_like_range(node, srcs, env, matrix, taps, cin_g, cout):
    """A convolution's rule. ``matrix(w)`` is the known weight as (K, Cout), each column
    one output channel's taps (its group's slice) in the kernel's (c, kh, kw) order;
    ``taps`` (P, kh*kw) the distinct sets of taps that read real input (the rest read
    padding or stuffed zeros, exact zero terms). Each set is bounded by its own sums,
    and the hull taken per channel, so zeros enter only where they do."""
    masks = np.tile(taps, (1, cin_g))
    k = masks.shape[1]
    partial = bool((masks.sum(axis=1) < k).any())  # some output reads a zero
    wv = weight_value(node.srcs[1])
    if wv is not None:
        m = matrix(wv)
        lo, hi, nan = weighted_sum_bounds(m, srcs[0], masks=masks)
        # a non-finite tap times a padding zero is NaN
        bad = (~np.isfinite(m)).any(axis=1).astype(np.float64)
        nan = np.any(nan) or bool(((1.0 - masks) @ bad > 0).any())
    else:
        w = srcs[1]
        parts = [interval_sum_bounds(srcs[0], w, int(n)) for n in masks.sum(axis=1)]
        lo = np.array([p[0] for p in parts])[:, None]
        hi = np.array([p[1] for p in parts])[:, None]
        w_inf = w.nan or w.lo == -INF or w.hi == INF
        nan = any(p[2] for p in parts) or (partial and w_inf)
    return contraction_interval(env, lo, hi, nan, bias_bounds(node, srcs, 2, cout))


def _conv_range(node, srcs, env):
    """Row sums of each output channel's taps, per set of taps the padding leaves."""
    w = node.srcs[1].shape
    cout = w[0]
    return _conv_like_range(
        node, srcs, env, lambda v: v.reshape(cout, -1).T, _conv_taps(node), w[1], cout
    )


def _conv_flops(in_shapes, out_shape, attrs):
    w = in_shapes[1]
    per_out = int(np.prod(w[1:], dtype=np.int64))  # Cin/G * kernel elements
    return 2 * per_out * int(np.prod(out_shape, dtype=np.int64))


register(
    fused_op(
        "conv",
        None,
        dict(_CONV_ATTRS),
        _conv_shape,
        _conv_emulate,
        _conv_exact,
        doc="N-C-(H)-W convolution (cross-correlation), weight [Cout, Cin/groups, (kh), kw]",
        sign=signed,
        range=_conv_range,
        flags=_CONTRACTION,
        flops=_conv_flops,
        role=Role.CONV,
        weight_operand=WeightOperand(1, 0),
        nest=LoopNest("contract", form="conv"),
        min_arity=2,
        max_arity=3,
    )
)

_CONVT_ATTRS = dict(_CONV_ATTRS, output_padding=ints_attr((0,), 0, "output_padding"))


def _convt_dims(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout = _conv_geometry(
        "conv_transpose", in_shapes, attrs, transpose=True
    )
    opad = spatial_tuple("conv_transpose", attrs["output_padding"], nd, "output_padding")
    for i in range(nd):
        if opad[i] >= max(stride[i], dil[i]):
            raise AttributeValueError(
                f"conv_transpose: output_padding {opad} must be < stride or dilation"
            )
    return nd, stride, pad, dil, kern, cout, opad


def _convt_shape(in_shapes, attrs):
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(in_shapes, attrs)
    x = in_shapes[0]
    spatial = []
    for i in range(nd):
        size = (x[2 + i] - 1) * stride[i] - pad[i][0] - pad[i][1]
        size += dil[i] * (kern[i] - 1) + opad[i] + 1
        if size < 1:
            padding = arg_name("conv_transpose", "pad")
            raise ShapeError(
                f"conv_transpose: output size {size} < 1 along spatial dim {i} (input "
                f"{x[2 + i]}, stride={stride[i]}, {padding}={pad[i]}, dilation={dil[i]}, "
                f"kernel {kern[i]}, output_padding={opad[i]}): lower the {padding} or raise "
                "the stride"
            )
        spatial.append(size)
    return (x[0], cout) + tuple(spatial)


def _convt_stuff(x2, s2, d2, k2, p2, op2):
    """The input of the stride-1 conv a conv_transpose runs: ``x2`` (NCHW) zero-stuffed
    by the strides and cropped where the padding is negative; and the padding to add."""
    n, c, h, wd = x2.shape
    stuffed = np.zeros((n, c, (h - 1) * s2[0] + 1, (wd - 1) * s2[1] + 1), dtype=x2.dtype)
    stuffed[:, :, :: s2[0], :: s2[1]] = x2
    # Full padding d*(k-1) minus the user's pad; a negative amount crops instead.
    edges = []
    for i in range(2):
        full = d2[i] * (k2[i] - 1)
        edges.append((full - p2[i][0], full - p2[i][1] + op2[i]))
    crop = tuple(
        slice(max(-b, 0), stuffed.shape[2 + i] - max(-a, 0) or None)
        for i, (b, a) in enumerate(edges)
    )
    pad_pos = tuple((max(b, 0), max(a, 0)) for b, a in edges)
    return stuffed[:, :, crop[0], crop[1]], pad_pos


def _convt_run(inputs, attrs, matmul, add_bias):
    """conv_transpose as a stride-1 conv over the zero-stuffed input, kernel flipped."""
    x, w = inputs[:2]
    shapes = [x.shape, w.shape] + [b.shape for b in inputs[2:]]
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(shapes, attrs)
    g = attrs["groups"]
    x2, w2, s2, p2, d2 = _as_2d(x, w, stride, pad, dil)
    k2 = w2.shape[2:]
    op2 = (0,) + opad if nd == 1 else opad
    stuffed, pad_pos = _convt_stuff(x2, s2, d2, k2, p2, op2)
    c = x2.shape[1]
    cin_g, cout_g = c // g, w2.shape[1]
    flipped = w2[:, :, ::-1, ::-1].reshape(g, cin_g, cout_g, *k2)
    wconv = flipped.transpose(0, 2, 1, 3, 4).reshape(g * cout_g, cin_g, *k2)
    y = _conv2d(stuffed, np.ascontiguousarray(wconv), (1, 1), pad_pos, d2, g, matmul)
    if nd == 1:
        y = y[:, :, 0]
    if len(inputs) == 3:
        y = add_bias(y, inputs[2].reshape((-1,) + (1,) * nd))
    return y


def _convt_emulate(inputs, attrs, arith):
    return _convt_run(inputs, attrs, as_arith(arith).matmul, _add_fp16)


def _convt_exact(inputs, attrs):
    return _convt_run(inputs, attrs, np.matmul, np.add)


def _convt_range(node, srcs, env):
    """The stride-1 convolution over the zero-stuffed input that the kernel runs: each
    output channel's taps are its group's input channels of the flipped weight, and
    each output reads only the taps its position's stuffing and padding leave real."""
    shapes = [s.shape for s in node.srcs[:2]]
    nd, stride, pad, dil, kern, cout, opad = _convt_dims(shapes, node.attrs)
    g = node.attrs["groups"]
    w = shapes[1]
    cin_g, cout_g = w[0] // g, w[1]
    ind = np.ones((1, 1) + tuple(shapes[0][2:]))
    x2, w2, s2, p2, d2 = _as_2d(ind, np.zeros((1, 1) + kern), stride, pad, dil)
    k2 = w2.shape[2:]
    stuffed, pad_pos = _convt_stuff(x2, s2, d2, k2, p2, (0,) + opad if nd == 1 else opad)
    taps = _distinct_taps(np.pad(stuffed, ((0, 0), (0, 0)) + pad_pos), k2, (1, 1), d2)

    def matrix(v):
        v = v[:, :, None] if nd == 1 else v
        flipped = v[:, :, ::-1, ::-1].reshape(g, cin_g, cout_g, -1).transpose(0, 2, 1, 3)
        return flipped.reshape(g * cout_g, -1).T

    return _conv_like_range(node, srcs, env, matrix, taps, cin_g, cout)


def _convt_flops(in_shapes, out_shape, attrs):
    x, w = in_shapes[:2]
    per_in = int(np.prod(w[1:], dtype=np.int64))  # Cout/G * kernel elements
    return 2 * per_in * int(np.prod(x, dtype=np.int64))


register(
    fused_op(
        "conv_transpose",
        None,
        _CONVT_ATTRS,
        _convt_shape,
        _convt_emulate,
        _convt_exact,
        doc="transposed convolution, weight [Cin, Cout/groups, (kh), kw]",
        sign=signed,
        range=_convt_range,
        flags=_CONTRACTION,
        flops=_convt_flops,
        role=Role.CONV,
        weight_operand=WeightOperand(1, 1),
        min_arity=2,
        max_arity=3,
    )
)
