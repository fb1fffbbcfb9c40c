"""The arithmetic part of the ONNX op table (handlers as in :mod:`.onnx_ops`).

MatMul and Gemm (``linear`` when B is a weight and alpha is 1), the reductions (ReduceL2,
ReduceLogSumExp and friends spelled as the few ops of their definition, max-shifted
where that keeps fp16 in range), Softmax / LogSoftmax / Hardmax, ArgMax / ArgMin, TopK,
CumSum (the engine's ``x @ triangle``, other triangles for exclusive / reverse), and the
normalizations (BatchNormalization, InstanceNormalization as group_norm with one group
per channel, GroupNormalization, LayerNormalization, RMSNormalization, LpNormalization,
LRN as the bridge op), and Einsum of one or two operands (sums, a transpose and one
batched matmul).
"""

from __future__ import annotations

import numpy as np

from .onnx_errors import NotExpressible
from .onnx_ops import (
    handles,
    keep_shape,
    matmul,
    norm_axis,
    reduce_axes,
    reshape,
    slice_axis,
    take,
)
from .onnx_values import Host

# ---- contractions ---------------------------------------------------------------------


@handles("MatMul")
def _matmul(cx, node, ins, at):
    return [matmul(cx, ins[0], ins[1])]


@handles("Gemm")
def _gemm(cx, node, ins, at):
    a, b = cx.t(ins[0]), cx.t(ins[1])
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if at.get("transA", 0):
        a = cx.op("transpose", a, perm=(1, 0))
    if b.op == "weight" and alpha == 1.0:
        w = b if at.get("transB", 0) else cx.op("transpose", b, perm=(1, 0))
        bias = None
        if c is not None and beta == 1.0 and cx.t(c).shape in ((w.shape[0],), (1, w.shape[0])):
            bias = reshape(cx, c, (w.shape[0],))
        y = cx.op("linear", a, w, *([bias] if bias is not None else []))
        if c is not None and bias is None:
            y = cx.op("add", y, c if beta == 1.0 else cx.op("mul", c, beta))
        return [y]
    if at.get("transB", 0):
        b = cx.op("transpose", b, perm=(1, 0))
    y = matmul(cx, a, b)
    if alpha != 1.0:
        y = cx.op("mul", y, alpha)
    if c is not None:
        y = cx.op("add", y, c if beta == 1.0 else cx.op("mul", c, beta))
    return [y]


# ---- reductions, softmax, index ops -------------------------------------------------------


def _reduce(cx, node, ins, at, kind):
    x = cx.t(ins[0])
    from_input = cx.opset >= 18 or node.op_type == "ReduceSum"
    axes, keep = reduce_axes(cx, node, ins, at, x, from_input)
    if axes == ():
        return None, x, axes, keep
    return kind, x, axes, keep


@handles(
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceProd",
)
def _reduction(cx, node, ins, at):
    op = node.op_type
    kind, x, axes, keep = _reduce(cx, node, ins, at, op)
    if kind is None:
        return [x]
    plain = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "amax", "ReduceMin": "amin"}
    if op in plain:
        return [cx.op(plain[op], x, axes=axes, keepdims=keep)]
    if op == "ReduceProd":
        return [_reduce_prod(cx, x, axes, keep)]
    if op == "ReduceLogSumExp":  # max-shifted: m + log(sum(exp(x - m)))
        m = cx.op("amax", x, axes=axes, keepdims=True)
        s = cx.op("sum", cx.op("exp", cx.op("sub", x, m)), axes=axes, keepdims=keep)
        m = m if keep else reshape(cx, m, s.shape)
        return [cx.op("add", cx.op("log", s), m)]
    pre = {"ReduceSumSquare": "square", "ReduceL1": "abs", "ReduceL2": "square"}.get(op)
    y = cx.op("sum", cx.op(pre, x) if pre else x, axes=axes, keepdims=keep)
    post = {"ReduceL2": "sqrt", "ReduceLogSum": "log"}.get(op)
    return [cx.op(post, y) if post else y]


def _reduce_prod(cx, x, axes, keep):
    axes = tuple(range(x.ndim)) if axes is None else axes
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = cx.op("transpose", x, perm=tuple(rest + list(axes))) if rest else x
    k = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    flat = reshape(cx, moved, tuple(x.shape[a] for a in rest) + (k,))
    if k > 256:
        raise NotExpressible(f"a product over {k} elements (more than 256) is not expressible")
    y = slice_axis(cx, flat, flat.ndim - 1, 0, 1)
    for i in range(1, k):
        y = cx.op("mul", y, slice_axis(cx, flat, flat.ndim - 1, i, i + 1))
    out = keep_shape(x, axes) if keep else tuple(x.shape[a] for a in rest)
    return reshape(cx, y, out)


def _softmax_axis(cx, x, at):
    return norm_axis(at.get("axis", -1), x.ndim)


@handles("Softmax")
def _softmax(cx, node, ins, at):
    x = cx.t(ins[0])
    return [cx.op("softmax", x, axis=_softmax_axis(cx, x, at))]


@handles("LogSoftmax")
def _log_softmax(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = _softmax_axis(cx, x, at)
    d = cx.op("sub", x, cx.op("amax", x, axes=(axis,), keepdims=True))
    s = cx.op("sum", cx.op("exp", d), axes=(axis,), keepdims=True)
    return [cx.op("sub", d, cx.op("log", s))]


@handles("Hardmax")
def _hardmax(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = _softmax_axis(cx, x, at)
    idx = cx.op("argmax", x, axis=axis, keepdims=True)
    iota = np.arange(x.shape[axis], dtype=np.float64).reshape(
        [-1 if i == axis else 1 for i in range(x.ndim)]
    )
    return [cx.op("equal", cx.t(Host(iota, label="hardmax positions")), idx)]


@handles("ArgMax", "ArgMin")
def _argmax(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    keep = bool(at.get("keepdims", 1))
    src = x if node.op_type == "ArgMax" else cx.op("neg", x)
    if at.get("select_last_index", 0):
        n = x.shape[axis]
        flipped = take(cx, src, list(range(n - 1, -1, -1)), axis)
        idx = cx.op("argmax", flipped, axis=axis, keepdims=keep)
        return [cx.op("sub", float(n - 1), idx)]
    return [cx.op("argmax", src, axis=axis, keepdims=keep)]


@handles("TopK")
def _topk(cx, node, ins, at):
    x = cx.t(ins[0])
    k = int(cx.arr(ins[1], "K").reshape(-1)[0])
    common = {"k": k, "axis": at.get("axis", -1), "largest": bool(at.get("largest", 1))}
    return [
        cx.op("topk", x, output="values", **common),
        cx.op("topk", x, output="indices", **common),
    ]


@handles("CumSum")
def _cumsum(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(int(cx.arr(ins[1], "axis").reshape(-1)[0]), x.ndim)
    exclusive, reverse = at.get("exclusive", 0), at.get("reverse", 0)
    last = axis == x.ndim - 1
    if last and not exclusive and not reverse:
        return [cx.op("cumsum", x)]
    # The engine's cumsum is x @ triangle; other variants use another 0/1 triangle.
    n = x.shape[axis]
    i, j = np.indices((n, n))
    keep = {(0, 0): i <= j, (1, 0): i < j, (0, 1): i >= j, (1, 1): i > j}[
        (bool(exclusive), bool(reverse))
    ]
    perm = [a for a in range(x.ndim) if a != axis] + [axis]
    moved = x if last else cx.op("transpose", x, perm=tuple(perm))
    y = matmul(cx, moved, Host(keep.astype(np.float64), label="cumsum triangle"))
    if last:
        return [y]
    return [cx.op("transpose", y, perm=tuple(int(p) for p in np.argsort(perm)))]


# ---- normalization ----------------------------------------------------------------------


@handles("BatchNormalization")
def _batch_norm(cx, node, ins, at):
    x, scale, bias, mean, var = ins[:5]
    eps = at.get("epsilon", 1e-5)
    if at.get("training_mode", 0):
        return _batch_norm_training(cx, cx.t(x), scale, bias, mean, var, eps, at)
    return [cx.op("batch_norm", x, mean, var, scale, bias, eps=eps, has_weight=True, has_bias=True)]


def _batch_norm_training(cx, x, scale, bias, mean, var, eps, at):
    """Batch statistics (population variance) and the running-statistics update."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    mu = cx.op("mean", x, axes=axes, keepdims=True)
    d = cx.op("sub", x, mu)
    sigma2 = cx.op("mean", cx.op("square", d), axes=axes, keepdims=True)
    y = cx.op("mul", d, cx.op("rsqrt", cx.op("add", sigma2, eps)))
    y = _affine(cx, y, reshape(cx, scale, shape), reshape(cx, bias, shape))
    m = at.get("momentum", 0.9)
    outs = [y]
    for running, batch in ((mean, mu), (var, sigma2)):
        batch = reshape(cx, batch, (x.shape[1],))
        outs.append(cx.op("add", cx.op("mul", running, m), cx.op("mul", batch, 1.0 - m)))
    return outs


def _affine(cx, y, scale, bias):
    """``y * scale + bias`` as separate fp16 steps (the norms' own affine order)."""
    if scale is not None:
        y = cx.op("mul", y, scale)
    if bias is not None:
        y = cx.op("add", y, bias)
    return y


@handles("InstanceNormalization")
def _instance_norm(cx, node, ins, at):
    x = cx.t(ins[0])
    eps = at.get("epsilon", 1e-5)
    c = x.shape[1]
    return [
        cx.op("group_norm", x, ins[1], ins[2], groups=c, eps=eps, has_weight=True, has_bias=True)
    ]


@handles("GroupNormalization")
def _group_norm(cx, node, ins, at):
    x = cx.t(ins[0])
    g, eps = at["num_groups"], at.get("epsilon", 1e-5)
    c = x.shape[1]
    scale, bias = cx.t(ins[1]), cx.t(ins[2])
    if scale.shape == (g,) and g != c:  # opset 18: per-group parameters
        per = [i // (c // g) for i in range(c)]
        scale, bias = take(cx, scale, per, 0), take(cx, bias, per, 0)
    return [cx.op("group_norm", x, scale, bias, groups=g, eps=eps, has_weight=True, has_bias=True)]


@handles("LayerNormalization")
def _layer_norm(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    scale = cx.t(ins[1])
    bias = cx.t(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    want = x.shape[axis:]
    if scale.shape == want and (bias is None or bias.shape == want):
        srcs = [x, scale] + ([bias] if bias is not None else [])
        y = cx.op(
            "layer_norm", *srcs, axis=axis, eps=eps, has_weight=True, has_bias=bias is not None
        )
    else:
        y = _affine(cx, cx.op("layer_norm", x, axis=axis, eps=eps), scale, bias)
    outs = [y]
    if len(node.output) > 1:
        axes = tuple(range(axis, x.ndim))
        mean = cx.op("mean", x, axes=axes, keepdims=True)
        d = cx.op("sub", x, mean)
        var = cx.op("mean", cx.op("square", d), axes=axes, keepdims=True)
        outs += [mean, cx.op("rsqrt", cx.op("add", var, eps))]
    return outs


@handles("RMSNormalization")
def _rms_norm(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    scale = cx.t(ins[1])
    if scale.shape == x.shape[axis:]:
        return [cx.op("rms_norm", x, scale, axis=axis, eps=eps, has_weight=True)]
    return [cx.op("mul", cx.op("rms_norm", x, axis=axis, eps=eps), scale)]


@handles("LpNormalization")
def _lp_norm(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", -1), x.ndim)
    p = at.get("p", 2)
    if p == 2:
        return [cx.op("l2_norm", x, axis=axis, eps=2.0**-24)]
    if p == 1:
        s = cx.op("sum", cx.op("abs", x), axes=(axis,), keepdims=True)
        return [cx.op("div", x, cx.op("maximum", s, 2.0**-24))]
    raise NotExpressible(f"p={p} is not expressible (p is 1 or 2)")


@handles("LRN")
def _lrn(cx, node, ins, at):
    return [
        cx.op(
            "lrn",
            ins[0],
            size=at["size"],
            alpha=at.get("alpha", 1e-4),
            beta=at.get("beta", 0.75),
            bias=at.get("bias", 1.0),
        )
    ]


# ---- Einsum -------------------------------------------------------------------------------


def _einsum_terms(equation, shapes):
    """(input letter strings, output letters) with '...' spelled as capital letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes) or len(terms) > 2:
        raise NotExpressible(f"equation {equation!r}: one or two operands are expressible")
    spelled = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            extra = len(shape) - (len(term) - 3)
            term = term.replace("...", "ABCDEFGH"[8 - extra :] if extra else "")
        if len(term) != len(shape) or len(set(term)) != len(term):
            raise NotExpressible(f"equation {equation!r}: repeated or missing indices")
        spelled.append(term)
    if arrow:
        width = max(len(s) - len(t.replace("...", "")) for s, t in zip(shapes, terms))
        out = rhs.replace("...", "ABCDEFGH"[8 - width :] if width else "")
    else:
        letters = "".join(spelled)
        caps = sorted({c for c in letters if c.isupper()})
        out = "".join(caps) + "".join(
            sorted(c for c in set(letters) if letters.count(c) == 1 and c.islower())
        )
    return spelled, out


def _sum_out(cx, x, term, keep):
    """Sum the axes of ``x`` whose letters are not in ``keep``."""
    axes = tuple(i for i, c in enumerate(term) if c not in keep)
    if not axes:
        return x, term
    y = cx.op("sum", x, axes=axes, keepdims=False)
    return y, "".join(c for c in term if c in keep)


def _permute(cx, x, term, order):
    perm = tuple(term.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else cx.op("transpose", x, perm=perm)


@handles("Einsum")
def _einsum(cx, node, ins, at):
    xs = [cx.t(v) for v in ins]
    terms, out = _einsum_terms(at["equation"], [x.shape for x in xs])
    if len(xs) == 1:
        y, term = _sum_out(cx, xs[0], terms[0], out)
        return [_permute(cx, y, term, out)]
    (a, ta), (b, tb) = (
        _sum_out(cx, xs[0], terms[0], out + terms[1]),
        _sum_out(cx, xs[1], terms[1], out + terms[0]),
    )
    sizes = {c: d for t, x in ((ta, a), (tb, b)) for c, d in zip(t, x.shape)}
    batch = [c for c in out if c in ta and c in tb]
    left = [c for c in out if c in ta and c not in tb]
    right = [c for c in out if c in tb and c not in ta]
    inner = [c for c in ta if c in tb and c not in out]
    if any(sizes[c] != d for t, x in ((ta, a), (tb, b)) for c, d in zip(t, x.shape)):
        raise NotExpressible("operands disagree on the size of an index (broadcasting)")

    def flat(letters):
        return int(np.prod([sizes[c] for c in letters], dtype=np.int64))

    a3 = reshape(
        cx, _permute(cx, a, ta, batch + left + inner), (flat(batch), flat(left), flat(inner))
    )
    b3 = reshape(
        cx, _permute(cx, b, tb, batch + inner + right), (flat(batch), flat(inner), flat(right))
    )
    y = reshape(cx, matmul(cx, a3, b3), [sizes[c] for c in batch + left + right])
    return [_permute(cx, y, "".join(batch + left + right), out)]
