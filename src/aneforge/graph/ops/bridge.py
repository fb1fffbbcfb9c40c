"""The native bridge ops: the 19 ops the engine runs as separate native sub-programs.

A bridge op cuts a graph into fused regions (see the optimizer spec): sdpa, argmax, topk,
sort, minmax_norm, flatten, lrn, space_to_channel, channel_to_space, space_to_batch,
batch_to_space, input_view, dynamic_slice, cross_product, cross_correlation, cost_volume,
fps, radius_search and scaled_elementwise. Every one is registered with
``kind="bridge"``; the public functions are collected in :data:`BRIDGE_FUNCTIONS`.

Emulator contract (docs/numerics.md): each arithmetic step is one fp16 rounding of the
exact float64 result, every constant attribute (scale, eps, alpha/size, bias, beta,
radius) is rounded to fp16 before use, sums written "narrow" use the fp16 accumulator
(:func:`~aneforge.graph.fp16.narrow_sum`: every partial sum rounded, ascending order) and
the two contractions (``sdpa``, ``cross_correlation``) go through the executor's matmul
backend ``mm`` (fp16 products, float32 accumulator). Each public function's docstring
spells out its steps. The float64 executor runs the same formulas without any rounding,
with the constants as given.

Index outputs (argmax, topk indices, fps, radius_search) are carried as fp16 integers,
which are exact up to 2048; a node whose indexed axis is longer than 2049 elements is
refused with a :class:`~aneforge.errors.ShapeError` when it is built. Index ops follow
the same algorithm on fp16 values (emulator) and float64 values (reference).

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.ops.bridge import argmax
    >>> argmax(af.input((2, 7))).shape
    (2,)
"""

from __future__ import annotations

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..fp16 import narrow_sum, round_fp16
from ..registry import (
    Attr,
    OpDef,
    bool_attr,
    check_float,
    check_int_tuple,
    choice_attr,
    float_attr,
    get_op,
    int_attr,
    ints_attr,
    register,
)
from ..tensor import Tensor, make
from .common import broadcast_shape, norm_axes, norm_axis

#: Largest index an fp16 integer holds exactly (2048 = 2**11; 2049 is not an fp16 value).
MAX_INDEX = 2048

# ---- numerics: one kernel body, run with fp16 steps or exact float64 steps -------------


class _Steps:
    """The arithmetic a kernel body runs with: rounded fp16 steps or exact float64.

    Values are always carried as float64 arrays; with ``fp16=True`` each :meth:`step`
    rounds to fp16 (the values stay exactly representable in fp16), :meth:`total` is the
    narrow accumulator and :meth:`matmul` the executor's wide-accumulator backend.
    """

    def __init__(self, fp16: bool, mm=None):
        self.fp16 = fp16
        self.mm = mm

    def step(self, value):
        """One elementwise op: rounded once to fp16, or kept exact."""
        value = np.asarray(value, dtype=np.float64)
        return round_fp16(value).astype(np.float64) if self.fp16 else value

    def const(self, value: float) -> float:
        """A constant attribute as the engine holds it (fp16) or as given."""
        return float(round_fp16(value)) if self.fp16 else float(value)

    def total(self, x, axis, keepdims=False):
        """Sum over ``axis``: the narrow fp16 accumulator, or an exact float64 sum."""
        if self.fp16:
            return narrow_sum(round_fp16(x), axis, keepdims=keepdims).astype(np.float64)
        return np.sum(x, axis=axis, keepdims=keepdims)

    def matmul(self, a3, b3):
        """(B, M, K) @ (B, K, N): the wide-accumulator backend, or float64 matmul."""
        if self.fp16:
            a16 = np.ascontiguousarray(round_fp16(a3))
            b16 = np.ascontiguousarray(round_fp16(b3))
            return np.asarray(self.mm(a16, b16), dtype=np.float64)
        return np.matmul(a3, b3)

    def softmax_last(self, x):
        """Softmax over the last axis, by the registered softmax op's own kernels."""
        softmax = get_op("softmax")
        if self.fp16:
            y = softmax.emulate([round_fp16(x)], {"axis": -1}, self.mm)
            return np.asarray(y, dtype=np.float64)
        return softmax.exact([x], {"axis": -1})


def _kernels(body):
    """(emulate, exact) kernels of a body ``body(steps, inputs, attrs) -> float64``."""

    def emulate(inputs, attrs, mm):
        with np.errstate(all="ignore"):
            args = [np.asarray(x, dtype=np.float64) for x in inputs]
            return round_fp16(body(_Steps(True, mm), args, attrs))

    def exact(inputs, attrs):
        with np.errstate(all="ignore"):
            args = [np.asarray(x, dtype=np.float64) for x in inputs]
            return np.asarray(body(_Steps(False), args, attrs), dtype=np.float64)

    return emulate, exact


def _bridge(name, arity, attrs, shape_rule, body, doc, flops=None, flags=()):
    emulate, exact = _kernels(body)
    extra = {} if flops is None else {"flops": flops}
    register(
        OpDef(
            name,
            "bridge",
            arity,
            attrs,
            shape_rule,
            emulate,
            exact,
            doc=doc,
            flags=frozenset(flags),
            **extra,
        )
    )


# ---- shared checks -----------------------------------------------------------------


def _check_index_range(op: str, length: int, what: str) -> None:
    """Refuse an index output whose largest index is not an exact fp16 integer."""
    if length > MAX_INDEX + 1:
        raise ShapeError(
            f"{op}: {what} has {length} elements, but indices are carried as fp16 integers, "
            f"exact only up to {MAX_INDEX}; split that axis into chunks of at most "
            f"{MAX_INDEX + 1} elements"
        )


def _need_rank(op: str, shape, ranks, layout: str) -> None:
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{op}: input must be {layout} (rank {want}), got shape {shape}")


def _first_max(x, axis: int):
    """Index of the first maximum along ``axis``; NaN counts as the maximum (NumPy)."""
    return np.argmax(x, axis=axis)


def _ranking(x, axis: int, descending: bool):
    """Stable ranking along ``axis``: NaN is larger than every number, ties keep index
    order (lower index first) in both directions."""
    nan = np.isnan(x)
    filled = np.where(nan, 0.0, x)
    if descending:
        return np.lexsort((-filled, ~nan), axis=axis)
    return np.lexsort((filled, nan), axis=axis)


def _as_indices(idx):
    return np.asarray(idx, dtype=np.float64)


# ---- 1. sdpa -----------------------------------------------------------------------


def _sdpa_shape(in_shapes, attrs):
    want = 4 if attrs["has_mask"] else 3
    if len(in_shapes) != want:
        raise ShapeError(
            f"sdpa: expected {want} inputs (q, k, v{', mask' if want == 4 else ''}), "
            f"got {len(in_shapes)}"
        )
    q, k, v = in_shapes[:3]
    for label, s in (("q", q), ("k", k), ("v", v)):
        _need_rank("sdpa", s, (3, 4), f"[..., seq, features] ({label})")
    if not len(q) == len(k) == len(v) or not q[:-2] == k[:-2] == v[:-2]:
        raise ShapeError(
            f"sdpa: q {q}, k {k} and v {v} must share their batch dims (all but the last "
            "two); reshape or expand them to one batch layout"
        )
    if q[-1] != k[-1]:
        raise ShapeError(
            f"sdpa: q {q} and k {k} have feature sizes {q[-1]} and {k[-1]}; the last axis "
            "of q and k must be equal"
        )
    if k[-2] != v[-2]:
        raise ShapeError(
            f"sdpa: k {k} and v {v} have {k[-2]} and {v[-2]} positions; k and v need the "
            "same sequence length (second-to-last axis)"
        )
    scores = q[:-1] + (k[-2],)
    if attrs["has_mask"]:
        mask = in_shapes[3]
        ok = len(mask) <= len(scores)
        if ok:
            try:
                ok = tuple(np.broadcast_shapes(mask, scores)) == scores
            except ValueError:
                ok = False
        if not ok:
            raise ShapeError(
                f"sdpa: mask {mask} does not broadcast to the score shape {scores} "
                "([..., S, T]); give it size 1 or the full size on each axis"
            )
    return q[:-1] + (v[-1],)


def _sdpa_body(st, inputs, attrs):
    q, k, v = inputs[:3]
    batch, (s_len, d), t_len, dv = q.shape[:-2], q.shape[-2:], k.shape[-2], v.shape[-1]
    scale = attrs["scale"] if attrs["scale"] is not None else d**-0.5
    q3 = q.reshape(-1, s_len, d)
    kt3 = np.swapaxes(k.reshape(-1, t_len, d), 1, 2)
    s = st.matmul(q3, kt3).reshape(batch + (s_len, t_len))
    s = st.step(s * st.const(scale))
    if attrs["has_mask"]:
        s = st.step(s + inputs[3])
    p = st.softmax_last(s)
    out = st.matmul(p.reshape(-1, s_len, t_len), v.reshape(-1, t_len, dv))
    return out.reshape(batch + (s_len, dv))


def _sdpa_flops(in_shapes, out_shape, attrs):
    q, k, v = in_shapes[:3]
    batch = int(np.prod(q[:-2], dtype=np.int64))
    s_len, d, t_len, dv = q[-2], q[-1], k[-2], v[-1]
    return batch * (2 * s_len * t_len * d + 2 * s_len * t_len * dv)


_bridge(
    "sdpa",
    None,
    {"scale": float_attr(None, "scale"), "has_mask": bool_attr(False, "has_mask")},
    _sdpa_shape,
    _sdpa_body,
    "scaled dot-product attention softmax((q @ k^T) * scale [+ mask]) @ v",
    flops=_sdpa_flops,
    flags=("route",),
)


def sdpa(q, k, v, scale=None, mask=None) -> Tensor:
    """Scaled dot-product attention ``softmax((q @ k^T) * scale [+ mask], -1) @ v``.

    Inputs: ``q`` [..., S, D], ``k`` [..., T, D], ``v`` [..., T, Dv], all rank 3 or 4
    with equal batch dims; ``mask`` (optional) is an additive tensor or array that
    broadcasts to the scores [..., S, T] (use ``-inf`` or a large negative to hide).
    Attributes: ``scale`` (default ``D**-0.5``). Output: [..., S, Dv].

    Emulator numerics, exactly the fp16 steps of the fused decomposition
    ``((q @ k^T) * scale [+ mask]).softmax(-1) @ v``, so both are bit-identical:
    ``s = mm(q, k^T)`` (wide accumulator); ``s = fp16(s * fp16(scale))``;
    ``s = fp16(s + mask)``; softmax as the softmax op (``d = fp16(s - max)``,
    ``e = fp16(exp(d))``, ``p = fp16(e / narrow_sum(e))``); ``out = mm(p, v)``.
    The float64 reference uses the unrounded scale. FLOPs: 2*S*T*D + 2*S*T*Dv per batch.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import sdpa
        >>> sdpa(af.input((2, 5, 8)), af.input((2, 7, 8)), af.input((2, 7, 3))).shape
        (2, 5, 3)
    """
    srcs = (q, k, v) if mask is None else (q, k, v, mask)
    return make("sdpa", *srcs, scale=scale, has_mask=mask is not None)


# ---- 2. argmax ---------------------------------------------------------------------


def _argmax_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) < 1:
        raise ShapeError(f"argmax: input must have rank >= 1, got shape {x}")
    axis = norm_axis("argmax", attrs["axis"], len(x))
    _check_index_range("argmax", x[axis], f"axis {attrs['axis']} of {x}")
    if attrs["keepdims"]:
        return x[:axis] + (1,) + x[axis + 1 :]
    return x[:axis] + x[axis + 1 :]


def _argmax_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    idx = _first_max(x, axis)
    if attrs["keepdims"]:
        idx = np.expand_dims(idx, axis)
    return _as_indices(idx)


_bridge(
    "argmax",
    1,
    {"axis": int_attr(-1, None, "axis"), "keepdims": bool_attr(False, "keepdims")},
    _argmax_shape,
    _argmax_body,
    "index of the first maximum along axis (fp16 integer)",
    flags=("index_output",),
)


def argmax(x, axis=-1, keepdims=False) -> Tensor:
    """Index of the first maximum of ``x`` along ``axis`` (NaN counts as the maximum,
    as in ``numpy.argmax``).

    Inputs: ``x`` of any rank >= 1. Attributes: ``axis`` (default -1), ``keepdims``.
    Output: ``x``'s shape without ``axis`` (kept as size 1 with ``keepdims``). Indices
    are fp16 integers, exact up to 2048, so ``axis`` may hold at most 2049 elements
    (longer raises ShapeError at build time).
    Emulator numerics: exact (a comparison, no rounding).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import argmax
        >>> x = af.input((4,))
        >>> af.compile(argmax(x, keepdims=True))(np.array([1.0, 3.0, 3.0, 2.0]))
        array([1.], dtype=float32)
    """
    return make("argmax", x, axis=axis, keepdims=keepdims)


# ---- 3. topk -----------------------------------------------------------------------


def _topk_shape(in_shapes, attrs):
    x = in_shapes[0]
    if len(x) < 1:
        raise ShapeError(f"topk: input must have rank >= 1, got shape {x}")
    axis = norm_axis("topk", attrs["axis"], len(x))
    k = attrs["k"]
    if k > x[axis]:
        raise ShapeError(
            f"topk: k={k} is larger than axis {attrs['axis']} of {x} ({x[axis]} elements); "
            f"use k <= {x[axis]}"
        )
    if attrs["output"] == "indices":
        _check_index_range("topk", x[axis], f"axis {attrs['axis']} of {x}")
    return x[:axis] + (k,) + x[axis + 1 :]


def _topk_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    order = _ranking(x, axis, descending=attrs["largest"])
    idx = np.take(order, np.arange(attrs["k"]), axis=axis)
    if attrs["output"] == "indices":
        return _as_indices(idx)
    return np.take_along_axis(x, idx, axis=axis)


_bridge(
    "topk",
    1,
    {
        "k": int_attr(None, 1, "k", required=True),
        "axis": int_attr(-1, None, "axis"),
        "largest": bool_attr(True, "largest"),
        "output": choice_attr(("values", "indices"), "values", "output"),
    },
    _topk_shape,
    _topk_body,
    "k largest (or smallest) values or their indices along axis, sorted",
)


def topk(x, k, axis=-1, largest=True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) entries of ``x`` along ``axis``: (values, indices).

    Inputs: ``x`` of any rank >= 1. Attributes: ``k`` (1 <= k <= size of ``axis``),
    ``axis`` (default -1), ``largest`` (default True). Output: two nodes of ``x``'s shape
    with ``axis`` resized to ``k`` (the op ``topk`` with ``output="values"`` and with
    ``output="indices"``, same attributes). Sorted descending for ``largest`` (ascending
    otherwise); equal values keep index order, lower index first; NaN ranks above every
    number. Indices are fp16 integers, exact up to 2048, so ``axis`` may hold at most
    2049 elements (longer raises ShapeError at build time).
    Emulator numerics: exact (a selection, no rounding).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import topk
        >>> x = af.input((5,))
        >>> vals, idx = af.compile(list(topk(x, 2)))(np.array([1.0, 4.0, 2.0, 4.0, 0.0]))
        >>> vals, idx
        (array([4., 4.], dtype=float32), array([1., 3.], dtype=float32))
    """
    common = {"k": k, "axis": axis, "largest": largest}
    return make("topk", x, output="values", **common), make("topk", x, output="indices", **common)


# ---- 4. sort -----------------------------------------------------------------------


def _axis_same_shape(name):
    def rule(in_shapes, attrs):
        x = in_shapes[0]
        if len(x) < 1:
            raise ShapeError(f"{name}: input must have rank >= 1, got shape {x}")
        norm_axis(name, attrs["axis"], len(x))
        return x

    return rule


def _sort_body(st, inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    order = _ranking(x, axis, descending=attrs["descending"])
    return np.take_along_axis(x, order, axis=axis)


_bridge(
    "sort",
    1,
    {"axis": int_attr(-1, None, "axis"), "descending": bool_attr(False, "descending")},
    _axis_same_shape("sort"),
    _sort_body,
    "stable sort of the values along axis",
)


def sort(x, axis=-1, descending=False) -> Tensor:
    """Stable sort of ``x`` along ``axis`` (ascending, or descending).

    Inputs: ``x`` of any rank >= 1. Attributes: ``axis`` (default -1), ``descending``.
    Output: ``x``'s shape. Equal values keep their order; NaN sorts as larger than every
    number (last ascending, first descending). Emulator numerics: exact (values move).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import sort
        >>> af.compile(sort(af.input((3,))))(np.array([2.0, -1.0, 0.5]))
        array([-1. ,  0.5,  2. ], dtype=float32)
    """
    return make("sort", x, axis=axis, descending=descending)


# ---- 5. minmax_norm ----------------------------------------------------------------


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


_bridge(
    "minmax_norm",
    1,
    {"axes": _axes_attr(), "eps": float_attr(1e-5, "eps")},
    _minmax_shape,
    _minmax_body,
    "(x - amin) / (amax - amin + eps) over axes",
    flags=("route",),
)


def minmax_norm(x, axes=None, eps=1e-5) -> Tensor:
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
    return make("minmax_norm", x, axes=axes, eps=eps)


# ---- 6. flatten --------------------------------------------------------------------


def _flatten_shape(in_shapes, attrs):
    x = in_shapes[0]
    r, axis = len(x), attrs["axis"]
    if not -r <= axis <= r:
        raise AttributeValueError(
            f"flatten: axis {axis} is out of range for rank {r}; use -{r} <= axis <= {r}"
        )
    if axis < 0:
        axis += r
    size = int(np.prod(x, dtype=np.int64))
    if axis == 0:
        return (size,)
    lead = int(np.prod(x[:axis], dtype=np.int64))
    return (lead, size // lead)


def _flatten_body(st, inputs, attrs):
    x = inputs[0]
    return x.reshape(_flatten_shape([x.shape], attrs))


_bridge(
    "flatten",
    1,
    {"axis": int_attr(0, None, "axis")},
    _flatten_shape,
    _flatten_body,
    "flatten to (prod(shape[:axis]), prod(shape[axis:])), or 1-D for axis 0",
    flags=("movement", "route"),
)


def flatten(x, axis=0) -> Tensor:
    """ONNX-style flatten: the axes before ``axis`` become one dim, the rest another.

    Inputs: ``x`` of any rank. Attributes: ``axis`` in [-rank, rank] (negative counts
    from the end). Output: ``(prod(shape[:axis]), prod(shape[axis:]))`` for axis > 0;
    for axis 0 the 1-D ``(size,)``. Emulator numerics: pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import flatten
        >>> flatten(af.input((2, 3, 4)), axis=1).shape, flatten(af.input((2, 3))).shape
        ((2, 12), (6,))
    """
    return make("flatten", x, axis=axis)


# ---- 7. lrn ------------------------------------------------------------------------


def _lrn_shape(in_shapes, attrs):
    x = in_shapes[0]
    _need_rank("lrn", x, (3, 4, 5), "[N, C, ...] with channels on axis 1")
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


_bridge(
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


def lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0) -> Tensor:
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
    return make("lrn", x, size=size, alpha=alpha, beta=beta, bias=bias)


# ---- 8/9. space_to_channel, channel_to_space, space_to_batch, batch_to_space ---------


def _factor_attr():
    return {"factor": int_attr(None, 1, "factor", required=True)}


def _blocks_shape(name):
    def rule(in_shapes, attrs):
        x, r = in_shapes[0], attrs["factor"]
        _need_rank(name, x, (4,), "[N, C, H, W]")
        n, c, h, w = x
        if name in ("space_to_channel", "space_to_batch"):
            if h % r or w % r:
                raise ShapeError(
                    f"{name}: H={h} and W={w} of {x} must be multiples of factor {r}; "
                    "pad or crop the spatial dims first"
                )
            if name == "space_to_channel":
                return (n, c * r * r, h // r, w // r)
            return (n * r * r, c, h // r, w // r)
        if name == "channel_to_space":
            if c % (r * r):
                raise ShapeError(
                    f"channel_to_space: C={c} of {x} must be a multiple of factor**2 = {r * r}"
                )
            return (n, c // (r * r), h * r, w * r)
        if n % (r * r):
            raise ShapeError(
                f"batch_to_space: N={n} of {x} must be a multiple of factor**2 = {r * r}"
            )
        return (n // (r * r), c, h * r, w * r)

    return rule


def _space_to_channel_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // r, r, w // r, r)  # (n, c, i, dy, j, dx)
    return blocks.transpose(0, 1, 3, 5, 2, 4).reshape(n, c * r * r, h // r, w // r)


def _channel_to_space_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c // (r * r), r, r, h, w)  # (n, c, dy, dx, i, j)
    return blocks.transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def _space_to_batch_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // r, r, w // r, r)  # (n, c, i, dy, j, dx)
    return blocks.transpose(3, 5, 0, 1, 2, 4).reshape(n * r * r, c, h // r, w // r)


def _batch_to_space_body(st, inputs, attrs):
    x, r = inputs[0], attrs["factor"]
    b, c, h, w = x.shape
    n = b // (r * r)
    blocks = x.reshape(r, r, n, c, h, w)  # (dy, dx, n, c, i, j)
    return blocks.transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * r, w * r)


for _name, _body, _doc in (
    ("space_to_channel", _space_to_channel_body, "[N,C,H,W] -> [N,C*r*r,H/r,W/r]"),
    ("channel_to_space", _channel_to_space_body, "[N,C*r*r,H,W] -> [N,C,H*r,W*r]"),
    ("space_to_batch", _space_to_batch_body, "[N,C,H,W] -> [N*r*r,C,H/r,W/r]"),
    ("batch_to_space", _batch_to_space_body, "[N*r*r,C,H,W] -> [N,C,H*r,W*r]"),
):
    _bridge(_name, 1, _factor_attr(), _blocks_shape(_name), _body, _doc, flags=("movement",))


def space_to_channel(x, factor) -> Tensor:
    """Space to depth in PyTorch ``pixel_unshuffle`` order: [N, C, H, W] ->
    [N, C*r*r, H/r, W/r] with ``out[n, c*r*r + dy*r + dx, i, j] = x[n, c, i*r+dy, j*r+dx]``.

    Inputs: ``x`` [N, C, H, W] with H and W multiples of ``factor`` (r >= 1). Emulator
    numerics: pure movement (exact); :func:`channel_to_space` is its inverse.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import space_to_channel
        >>> space_to_channel(af.input((1, 3, 8, 6)), 2).shape
        (1, 12, 4, 3)
    """
    return make("space_to_channel", x, factor=factor)


def channel_to_space(x, factor) -> Tensor:
    """Depth to space in PyTorch ``pixel_shuffle`` order: [N, C*r*r, H, W] ->
    [N, C, H*r, W*r] with ``out[n, c, i*r+dy, j*r+dx] = x[n, c*r*r + dy*r + dx, i, j]``.

    Inputs: ``x`` [N, C, H, W] with C a multiple of ``factor**2``. Emulator numerics: pure
    movement (exact); the inverse of :func:`space_to_channel`.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import channel_to_space
        >>> channel_to_space(af.input((1, 12, 4, 3)), 2).shape
        (1, 3, 8, 6)
    """
    return make("channel_to_space", x, factor=factor)


def space_to_batch(x, factor) -> Tensor:
    """Space to batch in TensorFlow ``space_to_batch_nd`` block order: [N, C, H, W] ->
    [N*r*r, C, H/r, W/r] with ``out[(dy*r + dx)*N + n, c, i, j] = x[n, c, i*r+dy, j*r+dx]``.

    Inputs: ``x`` [N, C, H, W] with H and W multiples of ``factor``. Emulator numerics:
    pure movement (exact); :func:`batch_to_space` is its inverse.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import space_to_batch
        >>> space_to_batch(af.input((2, 3, 8, 6)), 2).shape
        (8, 3, 4, 3)
    """
    return make("space_to_batch", x, factor=factor)


def batch_to_space(x, factor) -> Tensor:
    """Batch to space, the inverse of :func:`space_to_batch`: [N*r*r, C, H, W] ->
    [N, C, H*r, W*r] with ``out[n, c, i*r+dy, j*r+dx] = x[(dy*r + dx)*N + n, c, i, j]``.

    Inputs: ``x`` [B, C, H, W] with B a multiple of ``factor**2``. Emulator numerics:
    pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import batch_to_space
        >>> batch_to_space(af.input((8, 3, 4, 3)), 2).shape
        (2, 3, 8, 6)
    """
    return make("batch_to_space", x, factor=factor)


# ---- 10. input_view ----------------------------------------------------------------


def _input_view_shape(in_shapes, attrs):
    x = in_shapes[0]
    begins, sizes = attrs["begins"], attrs["sizes"]
    if not len(begins) == len(sizes) == len(x):
        raise AttributeValueError(
            f"input_view: begins {begins} and sizes {sizes} need {len(x)} values each "
            f"(one per axis of {x})"
        )
    for axis, (b, s, d) in enumerate(zip(begins, sizes, x)):
        if b + s > d:
            raise ShapeError(
                f"input_view: window begin {b} + size {s} = {b + s} exceeds axis {axis} "
                f"of {x} ({d}); use begin + size <= {d}"
            )
    return tuple(sizes)


def _input_view_body(st, inputs, attrs):
    x = inputs[0]
    window = tuple(slice(b, b + s) for b, s in zip(attrs["begins"], attrs["sizes"]))
    return x[window]


_bridge(
    "input_view",
    1,
    {
        "begins": ints_attr(None, 0, "begins", required=True),
        "sizes": ints_attr(None, 1, "sizes", required=True),
    },
    _input_view_shape,
    _input_view_body,
    "static window x[b0:b0+s0, b1:b1+s1, ...] over every axis",
    flags=("movement",),
)


def input_view(x, begins, sizes) -> Tensor:
    """A static window ``x[b0:b0+s0, b1:b1+s1, ...]`` over every axis.

    Inputs: ``x`` of any rank. Attributes: ``begins`` (>= 0) and ``sizes`` (>= 1), one
    per axis; every window must fit (``begin + size <= dim``, else ShapeError).
    Output: ``sizes``. Emulator numerics: pure movement (exact).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import input_view
        >>> input_view(af.input((4, 6)), (1, 2), (2, 3)).shape
        (2, 3)
    """
    return make("input_view", x, begins=tuple(begins), sizes=tuple(sizes))


# ---- 11. dynamic_slice -------------------------------------------------------------


def _dynamic_slice_shape(in_shapes, attrs):
    x, start = in_shapes
    sizes = attrs["sizes"]
    if tuple(start) != (len(x),):
        raise ShapeError(
            f"dynamic_slice: start must be a tensor of shape ({len(x)},), one offset per "
            f"axis of {x}; got shape {start}"
        )
    if len(sizes) != len(x):
        raise AttributeValueError(
            f"dynamic_slice: sizes {sizes} need {len(x)} values (one per axis of {x})"
        )
    for axis, (s, d) in enumerate(zip(sizes, x)):
        if s > d:
            raise ShapeError(
                f"dynamic_slice: size {s} exceeds axis {axis} of {x} ({d}); use size <= {d}"
            )
    return tuple(sizes)


def _dynamic_slice_body(st, inputs, attrs):
    x, start = inputs
    sizes = attrs["sizes"]
    offsets = np.rint(np.where(np.isnan(start), 0.0, start))
    window = []
    for off, s, d in zip(offsets, sizes, x.shape):
        b = int(np.clip(off, 0, d - s))
        window.append(slice(b, b + s))
    return x[tuple(window)]


_bridge(
    "dynamic_slice",
    2,
    {"sizes": ints_attr(None, 1, "sizes", required=True)},
    _dynamic_slice_shape,
    _dynamic_slice_body,
    "window of static sizes at run-time offsets, clamped into range (XLA DynamicSlice)",
    flags=("movement",),
)


def dynamic_slice(x, start, sizes) -> Tensor:
    """A window of static ``sizes`` at offsets read from the tensor ``start`` at run time.

    Inputs: ``x`` of any rank; ``start`` a tensor of shape (rank,) holding one offset per
    axis as fp16 integers (integers are exact up to 2048, beyond that fp16 spacing
    applies). Attributes: ``sizes`` (1 <= size <= dim). Output: ``sizes``.
    Offsets are rounded to the nearest integer (ties to even; NaN reads as 0) and clamped
    into ``[0, dim - size]`` like XLA's DynamicSlice, so the window always fits.
    Emulator numerics: pure movement (exact).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import dynamic_slice
        >>> x, at = af.input((6,)), af.input((1,))
        >>> af.compile(dynamic_slice(x, at, (2,)))(np.arange(6.0), np.array([9.0]))
        array([4., 5.], dtype=float32)
    """
    return make("dynamic_slice", x, start, sizes=tuple(sizes))


# ---- 12. cross_product -------------------------------------------------------------


def _cross_shape(in_shapes, attrs):
    a, b = in_shapes
    out = broadcast_shape("cross_product", [a, b])
    axis = norm_axis("cross_product", attrs["axis"], len(out))
    for label, s in (("a", a), ("b", b)):
        padded = (1,) * (len(out) - len(s)) + tuple(s)
        if padded[axis] != 3:
            raise ShapeError(
                f"cross_product: {label} {s} must have 3 components along axis "
                f"{attrs['axis']}, got {padded[axis]}; move the 3-vector axis there"
            )
    return out


def _cross_body(st, inputs, attrs):
    a, b = inputs
    shape = np.broadcast_shapes(a.shape, b.shape)
    axis = attrs["axis"] % len(shape)
    a = np.moveaxis(np.broadcast_to(a, shape), axis, -1)
    b = np.moveaxis(np.broadcast_to(b, shape), axis, -1)

    def component(i, j):
        return st.step(st.step(a[..., i] * b[..., j]) - st.step(a[..., j] * b[..., i]))

    out = np.stack([component(1, 2), component(2, 0), component(0, 1)], axis=-1)
    return np.moveaxis(out, -1, axis)


_bridge(
    "cross_product",
    2,
    {"axis": int_attr(-1, None, "axis")},
    _cross_shape,
    _cross_body,
    "3-vector cross product a x b along axis",
)


def cross_product(a, b, axis=-1) -> Tensor:
    """Cross product ``a x b`` of 3-vectors laid along ``axis``.

    Inputs: ``a``, ``b`` broadcasting together (NumPy rules), each with size 3 along
    ``axis`` of the broadcast shape. Attributes: ``axis`` (default -1). Output: the
    broadcast shape. Emulator numerics: each component
    ``fp16(fp16(a1*b2) - fp16(a2*b1))`` (and its cyclic shifts).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import cross_product
        >>> a = af.input((3,))
        >>> af.compile(cross_product(a, np.array([0.0, 1.0, 0.0])))(np.array([1.0, 0, 0]))
        array([0., 0., 1.], dtype=float32)
    """
    return make("cross_product", a, b, axis=axis)


# ---- 13. cross_correlation ---------------------------------------------------------


def _xcorr_shape(in_shapes, attrs):
    x, t = in_shapes
    _need_rank("cross_correlation", x, (4,), "[N, C, H, W] (x)")
    _need_rank("cross_correlation", t, (3,), "[C, th, tw] (template)")
    if t[0] != x[1]:
        raise ShapeError(
            f"cross_correlation: template {t} has {t[0]} channels but x {x} has {x[1]}; "
            "they must match"
        )
    if t[1] > x[2] or t[2] > x[3]:
        raise ShapeError(
            f"cross_correlation: template {t} is larger than the image {x[2:]} of x {x}; "
            "valid mode needs th <= H and tw <= W"
        )
    return (x[0], 1, x[2] - t[1] + 1, x[3] - t[2] + 1)


def _xcorr_body(st, inputs, attrs):
    x, t = inputs
    n, c, h, w = x.shape
    th, tw = t.shape[1:]
    win = np.lib.stride_tricks.sliding_window_view(x, (th, tw), axis=(2, 3))
    ho, wo = win.shape[2], win.shape[3]
    cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(1, n * ho * wo, c * th * tw)
    y = st.matmul(cols, t.reshape(1, c * th * tw, 1))
    return y.reshape(n, 1, ho, wo)


def _xcorr_flops(in_shapes, out_shape, attrs):
    per_out = int(np.prod(in_shapes[1], dtype=np.int64))
    return 2 * per_out * int(np.prod(out_shape, dtype=np.int64))


_bridge(
    "cross_correlation",
    2,
    {},
    _xcorr_shape,
    _xcorr_body,
    "valid-mode cross-correlation of [N,C,H,W] with a [C,th,tw] template tensor",
    flops=_xcorr_flops,
)


def cross_correlation(x, template) -> Tensor:
    """Valid-mode cross-correlation of images with a template tensor (summed over C).

    Inputs: ``x`` [N, C, H, W]; ``template`` [C, th, tw] (a tensor, not a weight; arrays
    become fp16 weights), th <= H, tw <= W. Output: [N, 1, H-th+1, W-tw+1] with
    ``out[n, 0, y, x0] = sum over c, i, j of x[n, c, y+i, x0+j] * template[c, i, j]``.
    Emulator numerics: a contraction through the executor's matmul backend (an im2col
    of ``x`` against the flattened template): products rounded to fp16, added into the
    wide float32 accumulator in (c, i, j) order, rounded once. FLOPs: 2*C*th*tw per
    output.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import cross_correlation
        >>> cross_correlation(af.input((1, 3, 8, 8)), af.input((3, 3, 2))).shape
        (1, 1, 6, 7)
    """
    return make("cross_correlation", x, template)


# ---- 14. cost_volume ---------------------------------------------------------------


def _cost_volume_shape(in_shapes, attrs):
    left, right = in_shapes
    _need_rank("cost_volume", left, (4,), "[N, C, H, W] (left)")
    if tuple(right) != tuple(left):
        raise ShapeError(f"cost_volume: left {left} and right {right} must have the same shape")
    n, _, h, w = left
    return (n, attrs["max_disp"], h, w)


def _cost_volume_body(st, inputs, attrs):
    left, right = inputs
    n, c, h, w = left.shape
    out = np.zeros((n, attrs["max_disp"], h, w))
    for d in range(min(attrs["max_disp"], w)):
        prod = st.step(left[..., d:] * right[..., : w - d])
        out[:, d, :, d:] = st.step(st.total(prod, 1) / c)
    return out


_bridge(
    "cost_volume",
    2,
    {"max_disp": int_attr(None, 1, "max_disp", required=True)},
    _cost_volume_shape,
    _cost_volume_body,
    "stereo correlation volume: mean over channels of left * right shifted by d",
)


def cost_volume(left, right, max_disp) -> Tensor:
    """Stereo correlation cost volume over disparities ``0 .. max_disp-1``.

    Inputs: ``left``, ``right`` [N, C, H, W] of the same shape. Attributes:
    ``max_disp`` (>= 1). Output: [N, max_disp, H, W] with
    ``out[n, d, h, w] = mean over c of left[n, c, h, w] * right[n, c, h, w - d]`` and 0
    where ``w - d < 0`` (disparities >= W give all-zero planes).
    Emulator numerics: products ``fp16(left * right)``; the sum over c by the narrow
    fp16 accumulator (ascending c); divided by C and rounded once.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import cost_volume
        >>> cost_volume(af.input((1, 4, 5, 6)), af.input((1, 4, 5, 6)), 3).shape
        (1, 3, 5, 6)
    """
    return make("cost_volume", left, right, max_disp=max_disp)


# ---- 15. fps -----------------------------------------------------------------------


def _sq_dist(st, p, c):
    """Squared distance over the last axis (3 coords): fp16(p - c), fp16(d*d), then the
    coordinates summed in order by the narrow accumulator (exact steps in float64)."""
    d = st.step(p - c)
    sq = st.step(d * d)
    acc = np.zeros(sq.shape[:-1])
    for i in range(sq.shape[-1]):
        acc = st.step(acc + sq[..., i])
    return acc


def _fps_shape(in_shapes, attrs):
    p = in_shapes[0]
    if len(p) not in (2, 3) or p[-1] != 3:
        raise ShapeError(f"fps: points must be [N, 3] or [B, N, 3], got shape {p}")
    n, k = p[-2], attrs["k"]
    if k > n:
        raise ShapeError(f"fps: k={k} is larger than the {n} points of {p}; use k <= {n}")
    _check_index_range("fps", n, f"the point axis of {p}")
    return p[:-2] + (k,)


def _fps_body(st, inputs, attrs):
    pts = inputs[0]
    batched = pts if pts.ndim == 3 else pts[None]
    nb, k = batched.shape[0], attrs["k"]
    rows = np.arange(nb)
    chosen = np.zeros((nb, k), dtype=np.int64)
    mind = _sq_dist(st, batched, batched[:, :1, :])
    for i in range(1, k):
        nxt = _first_max(mind, 1)
        chosen[:, i] = nxt
        mind = np.minimum(mind, _sq_dist(st, batched, batched[rows, nxt][:, None, :]))
    out = chosen if pts.ndim == 3 else chosen[0]
    return _as_indices(out)


_bridge(
    "fps",
    1,
    {"k": int_attr(None, 1, "k", required=True)},
    _fps_shape,
    _fps_body,
    "farthest point sampling: indices of k points, starting at point 0",
    flags=("index_output", "data_dependent"),
)


def fps(points, k) -> Tensor:
    """Farthest point sampling: the indices of ``k`` well spread points.

    Inputs: ``points`` [N, 3] or [B, N, 3]. Attributes: ``k`` (1 <= k <= N). Output:
    [k] (or [B, k]). Starts at point 0, then repeatedly picks the point with the largest
    minimum squared distance to the points chosen so far (ties: the lowest index). Data
    dependent and iterative. Indices are fp16 integers, exact up to 2048, so N may be at
    most 2049 (more raises ShapeError at build time).
    Emulator numerics: squared distances in fp16 steps ``d = fp16(p - c)``,
    ``fp16(d*d)``, summed over the 3 coordinates by the narrow fp16 accumulator; the
    running minimum is kept in fp16 (exact comparisons).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import fps
        >>> pts = np.array([[0.0, 0, 0], [1, 0, 0], [5, 0, 0], [2, 0, 0]])
        >>> af.compile(fps(af.input((4, 3)), 3))(pts)
        array([0., 2., 3.], dtype=float32)
    """
    return make("fps", points, k=k)


# ---- 16. radius_search -------------------------------------------------------------


def _radius_attr():
    def check(value, op):
        out = check_float(value, op, "radius")
        if out < 0:
            raise AttributeValueError(f"{op}: radius must be >= 0, got {value!r}")
        return out

    return Attr(check, None, required=True)


def _radius_shape(in_shapes, attrs):
    p, c = in_shapes
    for label, s in (("points", p), ("centers", c)):
        if len(s) != 2 or s[-1] != 3:
            raise ShapeError(f"radius_search: {label} must be [count, 3], got shape {s}")
    _check_index_range("radius_search", p[0], f"the point axis of points {p}")
    return (c[0], attrs["max_neighbors"])


def _radius_body(st, inputs, attrs):
    pts, centers = inputs
    m, n, kmax = centers.shape[0], pts.shape[0], attrs["max_neighbors"]
    dist = _sq_dist(st, pts[None, :, :], centers[:, None, :])  # (M, N)
    r = st.const(attrs["radius"])
    within = dist <= st.step(r * r)
    ranked = np.argsort(~within, axis=1, kind="stable")  # hits first, ascending index
    count = within.sum(axis=1)
    take = min(kmax, n)
    out = np.full((m, kmax), -1.0)
    keep = np.arange(take)[None, :] < count[:, None]
    out[:, :take] = np.where(keep, ranked[:, :take], -1)
    return out


_bridge(
    "radius_search",
    2,
    {
        "radius": _radius_attr(),
        "max_neighbors": int_attr(None, 1, "max_neighbors", required=True),
    },
    _radius_shape,
    _radius_body,
    "indices of the points within radius of each center, -1 padded",
    flags=("index_output", "data_dependent"),
)


def radius_search(points, centers, radius, max_neighbors) -> Tensor:
    """Ball query: for each center, the indices of the points within ``radius``.

    Inputs: ``points`` [N, 3], ``centers`` [M, 3]. Attributes: ``radius`` (>= 0),
    ``max_neighbors`` (>= 1). Output: [M, max_neighbors]: the first ``max_neighbors``
    indices (ascending) of the points whose squared distance to the center is
    <= radius**2, padded with -1. Indices are fp16 integers, exact up to 2048, so N may
    be at most 2049 (more raises ShapeError at build time).
    Emulator numerics: squared distances as in :func:`fps` (``d = fp16(p - c)``,
    ``fp16(d*d)``, narrow sum over the coordinates), compared exactly with
    ``fp16(fp16(radius) * fp16(radius))``; the reference compares the exact squared
    distance with ``radius**2``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import radius_search
        >>> pts = np.array([[0.0, 0, 0], [3, 0, 0], [0.5, 0, 0]])
        >>> out = radius_search(af.input((3, 3)), af.input((1, 3)), 1.0, 3)
        >>> af.compile(out)(pts, np.zeros((1, 3)))
        array([[ 0.,  2., -1.]], dtype=float32)
    """
    return make("radius_search", points, centers, radius=radius, max_neighbors=max_neighbors)


# ---- 17. scaled_elementwise --------------------------------------------------------

_SCALED_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _scaled_shape(in_shapes, attrs):
    return broadcast_shape("scaled_elementwise", list(in_shapes))


def _scaled_body(st, inputs, attrs):
    a, b = inputs
    r = st.step(_SCALED_OPS[attrs["op"]](a, b))
    return st.step(r * st.const(attrs["scale"]))


_bridge(
    "scaled_elementwise",
    2,
    {
        "op": choice_attr(tuple(_SCALED_OPS), "add", "op"),
        "scale": float_attr(1.0, "scale"),
    },
    _scaled_shape,
    _scaled_body,
    "scale * (a op b) with op add, sub or mul, broadcasting",
)


def scaled_elementwise(a, b, op="add", scale=1.0) -> Tensor:
    """``scale * (a op b)`` with ``op`` one of 'add', 'sub', 'mul' (NumPy broadcasting).

    Inputs: ``a``, ``b`` (tensors, or arrays/scalars that become fp16 weights).
    Attributes: ``op`` (default 'add'), ``scale`` (default 1.0). Output: the broadcast
    shape. Emulator numerics: ``fp16(fp16(a op b) * fp16(scale))``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import scaled_elementwise
        >>> y = scaled_elementwise(af.input((2,)), 1.0, op="sub", scale=0.5)
        >>> af.compile(y)(np.array([3.0, 5.0]))
        array([1., 2.], dtype=float32)
    """
    return make("scaled_elementwise", a, b, op=op, scale=scale)


# ---- the list the API is wired from -------------------------------------------------

BRIDGE_OPS = (
    "sdpa",
    "argmax",
    "topk",
    "sort",
    "minmax_norm",
    "flatten",
    "lrn",
    "space_to_channel",
    "channel_to_space",
    "space_to_batch",
    "batch_to_space",
    "input_view",
    "dynamic_slice",
    "cross_product",
    "cross_correlation",
    "cost_volume",
    "fps",
    "radius_search",
    "scaled_elementwise",
)

BRIDGE_FUNCTIONS = {
    "sdpa": sdpa,
    "argmax": argmax,
    "topk": topk,
    "sort": sort,
    "minmax_norm": minmax_norm,
    "flatten": flatten,
    "lrn": lrn,
    "space_to_channel": space_to_channel,
    "channel_to_space": channel_to_space,
    "space_to_batch": space_to_batch,
    "batch_to_space": batch_to_space,
    "input_view": input_view,
    "dynamic_slice": dynamic_slice,
    "cross_product": cross_product,
    "cross_correlation": cross_correlation,
    "cost_volume": cost_volume,
    "fps": fps,
    "radius_search": radius_search,
    "scaled_elementwise": scaled_elementwise,
}
