"""The geometry bridge ops: cross_product, cross_correlation, cost_volume, fps and
radius_search.

Range rules: cross_product bounds each rounded product by its corners (per element
when an operand is a weight) and then their difference; cross_correlation is a
contraction (row sums of a known template); cost_volume bounds the products, their
narrow sum over the channels (the sum of C copies of an end, which is exact since the
narrow sum is monotone in every term) and the division; fps and radius_search give
indices in [0, N-1] (radius_search pads with -1).

Example:
    >>> import aneforge as af
    >>> a, b = af.input((4, 3), range=(-2, 2)), af.input((4, 3), range=(0, 3))
    >>> str(af.range_analysis(cross_product(a, b, name="c"))["c"].interval)
    '[-12, 12]'
"""

from __future__ import annotations

import numpy as np

from ....errors import AttributeValueError, ShapeError
from ...facts import WINDOW_SUM_FIX, Flag, NarrowSum, SingleRoute, TermSign, Work, prod, signed
from ...fp16 import narrow_sum, round_fp16
from ...ranges import INF, Interval, weight_value
from ...registry import Attr, check_float, int_attr
from ...tensor import Tensor, make
from ..common import broadcast_shape, norm_axis
from ..contraction_bounds import (
    add_bounds,
    contraction_interval,
    fp16_outward,
    interval_sum_bounds,
    product_bounds,
    weighted_sum_bounds,
)
from ._common import bridge_op, need_rank
from .selection import as_indices, check_index_range, first_max


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


def _components(tensor, iv, shape, axis):
    """(lo, hi) of an operand's components on the last axis: a weight's own values
    broadcast to ``shape`` (per element), else its interval for every component."""
    value = weight_value(tensor)
    if value is not None:
        value = np.moveaxis(np.broadcast_to(value, shape), axis, -1)
        return value, value
    lo, hi = fp16_outward(iv.lo, iv.hi)
    return np.full(3, lo), np.full(3, hi)


def _cross_range(node, srcs, env):
    """Each component ``fp16(fp16(a_i b_j) - fp16(a_j b_i))``: the products by their
    corners (a step), then the difference of independent products."""
    shape = node.shape
    axis = node.attrs["axis"] % len(shape)
    alo, ahi = _components(node.srcs[0], srcs[0], shape, axis)
    blo, bhi = _components(node.srcs[1], srcs[1], shape, axis)
    los, his, nans = [], [], []
    prods = []
    for i, j in ((1, 2), (2, 0), (0, 1)):
        p = product_bounds(alo[..., i], ahi[..., i], blo[..., j], bhi[..., j])
        m = product_bounds(alo[..., j], ahi[..., j], blo[..., i], bhi[..., i])
        lo, hi, dnan = add_bounds(p[0], p[1], -m[1], -m[0])
        prods += [p, m]
        los.append(np.min(lo))
        his.append(np.max(hi))
        nans.append(bool(np.any(p[2]) or np.any(m[2]) or np.any(dnan)))
    env.step(
        "a*b",
        Interval(
            min(float(np.min(p[0])) for p in prods),
            max(float(np.max(p[1])) for p in prods),
            any(bool(np.any(p[2])) for p in prods) or srcs[0].nan or srcs[1].nan,
        ),
    )
    return Interval(min(los), max(his), any(nans) or srcs[0].nan or srcs[1].nan)


_CROSS_PRODUCT = bridge_op(
    "cross_product",
    2,
    {"axis": int_attr(-1, None, "axis")},
    _cross_shape,
    _cross_body,
    "3-vector cross product a x b along axis",
    sign=signed,
    range=_cross_range,
    route=SingleRoute("no decomposition validated on silicon yet (slice/mul/sub candidate)"),
)


def cross_product(a, b, axis=-1, *, name=None) -> Tensor:
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
    return make("cross_product", a, b, axis=axis, name=name)


def _xcorr_shape(in_shapes, attrs):
    x, t = in_shapes
    need_rank("cross_correlation", x, (4,), "[N, C, H, W] (x)")
    need_rank("cross_correlation", t, (3,), "[C, th, tw] (template)")
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


def _xcorr_range(node, srcs, env):
    """A contraction over (c, i, j): row sums of a known template, else K corners."""
    x, t = node.srcs
    tw = weight_value(t)
    if tw is not None:
        lo, hi, nan = weighted_sum_bounds(tw.reshape(-1, 1), srcs[0])
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], int(np.prod(t.shape)))
    return contraction_interval(env, lo, hi, nan)


def _xcorr_work(in_shapes, out_shape, attrs) -> float:
    """Positions times template elements: ``N*H*W * th*tw``."""
    x, t = in_shapes[0], in_shapes[1]
    return float(prod(x)) / max(x[1], 1) * t[-2] * t[-1]


def _xcorr_key_work(f, elems):
    return None if elems is None else elems * f.get("t", 1.0)


_CROSS_CORRELATION = bridge_op(
    "cross_correlation",
    2,
    {},
    _xcorr_shape,
    _xcorr_body,
    "valid-mode cross-correlation of [N,C,H,W] with a [C,th,tw] template tensor",
    flops=_xcorr_flops,
    sign=signed,
    range=_xcorr_range,
    work=Work(_xcorr_work, _xcorr_key_work),
    route=SingleRoute("the template is a runtime tensor; a fused conv needs constant weights"),
)


def cross_correlation(x, template, *, name=None) -> Tensor:
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
    return make("cross_correlation", x, template, name=name)


def _cost_volume_shape(in_shapes, attrs):
    left, right = in_shapes
    need_rank("cost_volume", left, (4,), "[N, C, H, W] (left)")
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


def _cost_volume_range(node, srcs, env):
    """``fp16(narrow_sum_c(fp16(l * r)) / C)``, every step monotone in the products: the
    ends are the narrow sums of C copies of the product's ends (under the analysis's
    reduction route); disparities past the left edge are 0."""
    c = node.srcs[0].shape[1]
    a, b = (fp16_outward(s.lo, s.hi) for s in srcs)
    plo, phi, pnan = product_bounds(a[0], a[1], b[0], b[1])
    prod = env.step("l*r", Interval(float(plo), float(phi), bool(pnan) or any(s.nan for s in srcs)))
    with np.errstate(all="ignore"):
        lo = float(narrow_sum(np.full(c, prod.lo, np.float16), 0, route=env.route))
        hi = float(narrow_sum(np.full(c, prod.hi, np.float16), 0, route=env.route))
    # a NaN sum needs a +inf and a -inf partial; by monotonicity then hi = inf, lo = -inf
    nan = prod.nan or (hi == INF and lo == -INF) or np.isnan(lo) or np.isnan(hi)
    lo = -INF if np.isnan(lo) else lo
    hi = INF if np.isnan(hi) else hi
    total = env.step("sum(l*r)", Interval(lo, hi, nan))
    out_lo, out_hi = float(round_fp16(total.lo / c)), float(round_fp16(total.hi / c))
    if node.attrs["max_disp"] > 1:  # out[:, d, :, :d] = 0 for d >= 1
        out_lo, out_hi = min(out_lo, 0.0), max(out_hi, 0.0)
    return Interval(out_lo, out_hi, nan)


def _cost_volume_terms(in_shapes, attrs) -> int:
    """The channel mean sums ``C`` products of signed features."""
    return int(in_shapes[0][1])


def _cost_volume_work(in_shapes, out_shape, attrs) -> float:
    """Width times disparities."""
    return float(in_shapes[0][-1]) * out_shape[1]


_COST_VOLUME = bridge_op(
    "cost_volume",
    2,
    {"max_disp": int_attr(None, 1, "max_disp", required=True)},
    _cost_volume_shape,
    _cost_volume_body,
    "stereo correlation volume: mean over channels of left * right shifted by d",
    sign=signed,
    range=_cost_volume_range,
    narrow=NarrowSum(_cost_volume_terms, TermSign.MIXED, WINDOW_SUM_FIX),
    work=Work(_cost_volume_work, lambda f, elems: f["Wa"] * f["R"]),
    route=SingleRoute("per-disparity width-offset slices of a runtime tensor; no validated alt"),
)


def cost_volume(left, right, max_disp, *, name=None) -> Tensor:
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
    return make("cost_volume", left, right, max_disp=max_disp, name=name)


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
    check_index_range("fps", n, f"the point axis of {p}")
    return p[:-2] + (k,)


def _fps_body(st, inputs, attrs):
    pts = inputs[0]
    batched = pts if pts.ndim == 3 else pts[None]
    nb, k = batched.shape[0], attrs["k"]
    rows = np.arange(nb)
    chosen = np.zeros((nb, k), dtype=np.int64)
    mind = _sq_dist(st, batched, batched[:, :1, :])
    for i in range(1, k):
        nxt = first_max(mind, 1)
        chosen[:, i] = nxt
        mind = np.minimum(mind, _sq_dist(st, batched, batched[rows, nxt][:, None, :]))
    out = chosen if pts.ndim == 3 else chosen[0]
    return as_indices(out)


def _fps_range(node, srcs, env):
    """Indices of the point axis: whole numbers in [0, N-1] (only 0 when k = 1)."""
    n = node.srcs[0].shape[-2]
    return Interval(0.0, float(n - 1) if node.attrs["k"] > 1 else 0.0, tiny=1.0)


_FPS = bridge_op(
    "fps",
    1,
    {"k": int_attr(None, 1, "k", required=True)},
    _fps_shape,
    _fps_body,
    "farthest point sampling: indices of k points, starting at point 0",
    flags=(Flag.INDEX_OUTPUT, Flag.DATA_DEPENDENT),
    sign=signed,
    range=_fps_range,
    work=Work(
        lambda in_shapes, out, attrs: float(in_shapes[0][-2]) * out[-1],
        lambda f, elems: f["N"] * f["k"],
    ),
    route=SingleRoute("data-dependent, iterative: inexpressible as a fused feed-forward graph"),
)


def fps(points, k, *, name=None) -> Tensor:
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
    return make("fps", points, k=k, name=name)


def _radius_attr():
    def check(value, op):
        out = check_float(value, op, "radius")
        if out < 0:
            raise AttributeValueError(f"{op}: radius must be >= 0, got {value!r}")
        return out

    return Attr(
        check, None, required=True, underflow="only coincident points are neighbours", kind="float"
    )


def _radius_shape(in_shapes, attrs):
    p, c = in_shapes
    for label, s in (("points", p), ("centers", c)):
        if len(s) != 2 or s[-1] != 3:
            raise ShapeError(f"radius_search: {label} must be [count, 3], got shape {s}")
    check_index_range("radius_search", p[0], f"the point axis of points {p}")
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


def _radius_range(node, srcs, env):
    """Indices of the points, whole numbers in [0, N-1], or -1 for an empty slot."""
    n = node.srcs[0].shape[0]
    return Interval(-1.0, float(n - 1), tiny=1.0)


_RADIUS_SEARCH = bridge_op(
    "radius_search",
    2,
    {
        "radius": _radius_attr(),
        "max_neighbors": int_attr(None, 1, "max_neighbors", required=True),
    },
    _radius_shape,
    _radius_body,
    "indices of the points within radius of each center, -1 padded",
    flags=(Flag.INDEX_OUTPUT, Flag.DATA_DEPENDENT),
    sign=signed,
    range=_radius_range,
    work=Work(
        lambda in_shapes, out, attrs: float(in_shapes[0][-2]) * in_shapes[1][-2],
        lambda f, elems: f["N"] * f["Nc"],
    ),
    route=SingleRoute("data-dependent neighbour lists: inexpressible as a fused graph"),
)


def radius_search(points, centers, radius, max_neighbors, *, name=None) -> Tensor:
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
    return make(
        "radius_search", points, centers, radius=radius, max_neighbors=max_neighbors, name=name
    )


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_CROSS_PRODUCT, _CROSS_CORRELATION, _COST_VOLUME, _FPS, _RADIUS_SEARCH)
