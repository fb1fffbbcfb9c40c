"""The spatial part of the ONNX op table: Conv, ConvTranspose, pooling and Resize.

Handlers follow :mod:`.onnx_ops`. Mapping rules:

- Conv / ConvTranspose (1-D and 2-D) map to ``conv`` / ``conv_transpose``; ``auto_pad``
  and ``output_shape`` become explicit pads (and output padding).
- MaxPool / AveragePool map to ``max_pool`` / ``avg_pool`` when the engine's pooling
  expresses them (1-D or 2-D, no dilation, pads smaller than the kernel); ``ceil_mode``
  becomes extra end padding that never wins a max and is never counted in an average.
  Other cases (3-D, dilations, large pads) and LpPool are spelled with slices: the max
  (exact) or the running fp16 sum (the narrow accumulator's order) of the kernel's
  strided slices, divided by a constant count. Pooling indices are not expressible.
- A kernel larger than its padded input (EfficientNet's ``AvgPool2d(1280,
  ceil_mode=True)`` on 7x7) has one window per such dim where onnxruntime and ONNX
  shape inference give one (``ceil_mode``, or without it when the shortfall is under
  the stride: they round ``(in + pads - kernel) / stride`` toward zero). Where that
  window holds the whole dim, the pool is a reduction over it (``mean``, ``amax`` or
  ``sum``) divided by onnxruntime's count (the input positions, plus the declared pads
  inside the window with ``count_include_pad``; never the ceil overhang); what is left
  pools as above.
- Resize is separable: per resized axis a float64 matrix of interpolation weights,
  built from the ONNX definition (coordinate transformation, nearest rounding, linear,
  cubic, exclude_outside, antialias, tf_crop_and_resize extrapolation). A nearest axis
  is an exact gather; integer-factor linear upsampling of N-C-(H)-W in the modes the
  engine's ``upsample`` shares with ONNX uses it (rounded once); the rest is a
  matmul by the weight matrix (fp16 weights, wide accumulator).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..limits import check_elements
from .onnx_errors import NotExpressible
from .onnx_graph import node_label
from .onnx_ops import handles, matmul, pad_constant, reshape, slice_axis, take
from .onnx_values import Host, host_eval

#: The most kernel positions a window op is unrolled into (one slice each).
_MAX_WINDOW = 1024


def _spatial(at, name, nd, default, least=None):
    value = list(at.get(name, [default] * nd))
    if len(value) != nd:
        raise NotExpressible(f"{name}={value} needs {nd} values")
    if least is not None and any(v < least for v in value):
        raise NotExpressible(f"{name}={value} must hold values >= {least}")
    return value


def _window_pads(at, sizes, kernel, strides, dils, ceil_mode=False, pool=False):
    """Per spatial dim (before, after, extra_after, out): ONNX padding rules, where
    ``extra_after`` is the ceil_mode overhang beyond the declared padding. A kernel
    larger than the padded input (``pool`` only) has one window where onnxruntime
    computes one (the overhang is then ``extra_after``, in either mode); an empty output
    is refused."""
    nd = len(sizes)
    auto = at.get("auto_pad", "NOTSET")
    pads = list(at.get("pads", [0] * 2 * nd))
    if len(pads) != 2 * nd:
        raise NotExpressible(f"pads={pads} needs {2 * nd} values (begins, then ends)")
    out = []
    for i, (n, k, s, d) in enumerate(zip(sizes, kernel, strides, dils)):
        span = (k - 1) * d + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            size = -(-n // s)
            total = max((size - 1) * s + span - n, 0)
            small = total // 2
            before, after = (
                (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
            )
        elif auto == "VALID":
            before = after = 0
        elif auto in ("NOTSET", ""):
            before, after = pads[i], pads[i + nd]
        else:
            raise NotExpressible(f"auto_pad={auto!r} is not an ONNX padding mode")
        room = n + before + after - span
        if room < 0 and not pool:
            raise NotExpressible(f"the kernel {kernel} does not fit the input {sizes}")
        size = room // s + 1
        if ceil_mode and auto in ("NOTSET", ""):
            size = -(-room // s) + 1
            if (size - 1) * s >= n + before:
                size -= 1
        elif room < 0:  # room / s rounded toward zero, as onnxruntime and ONNX inference do
            size = -(-room // s) + 1
        if size < 1:
            raise NotExpressible(
                f"the kernel {kernel} (strides {strides}, pads {before}+{after} on spatial "
                f"dim {i}) does not fit the input {tuple(sizes)}: the output would be empty"
            )
        extra = max((size - 1) * s + span - (n + before + after), 0)
        out.append((before, after, extra, size))
    return out


@handles("Conv")
def _conv(cx, node, ins, at):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise NotExpressible(
            f"a {nd}-D convolution (kernel_shape={list(w.shape[2:])}) is not expressible; "
            "the engine convolves 1-D and 2-D"
        )
    strides, dils = _spatial(at, "strides", nd, 1, 1), _spatial(at, "dilations", nd, 1, 1)
    geo = _window_pads(at, x.shape[2:], w.shape[2:], strides, dils)
    pads = tuple(g[0] for g in geo) + tuple(g[1] for g in geo)
    srcs = [x, w] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [
        cx.op(
            "conv",
            *srcs,
            stride=tuple(strides),
            pad=pads,
            dilation=tuple(dils),
            groups=at.get("group", 1),
        )
    ]


@handles("ConvTranspose")
def _conv_transpose(cx, node, ins, at):
    x, w = cx.t(ins[0]), cx.t(ins[1])
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise NotExpressible(f"a {nd}-D transposed convolution is not expressible")
    strides, dils = _spatial(at, "strides", nd, 1, 1), _spatial(at, "dilations", nd, 1, 1)
    opad = _spatial(at, "output_padding", nd, 0, 0)
    kernel = w.shape[2:]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = list(at.get("output_shape", [x.shape[2 + i] * strides[i] for i in range(nd)]))
        shape = shape[-nd:]
        begins, ends = [], []
        for i in range(nd):
            full = strides[i] * (x.shape[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dils[i] + 1
            total = full - shape[i]
            half = total // 2
            b, e = (half, total - half) if auto == "SAME_UPPER" else (total - half, half)
            begins.append(b)
            ends.append(e)
    else:
        pads = list(at.get("pads", [0] * 2 * nd))
        begins, ends = pads[:nd], pads[nd:]
    for i in range(nd):
        if ends[i] < 0:  # a negative end pad grows the output: output padding
            opad[i] -= ends[i]
            ends[i] = 0
        if begins[i] < 0:
            raise NotExpressible(f"a negative begin padding {begins[i]} is not expressible")
    srcs = [x, w] + ([ins[2]] if len(ins) > 2 and ins[2] is not None else [])
    return [
        cx.op(
            "conv_transpose",
            *srcs,
            stride=tuple(strides),
            pad=tuple(begins + ends),
            output_padding=tuple(opad),
            dilation=tuple(dils),
            groups=at.get("group", 1),
        )
    ]


# ---- pooling ------------------------------------------------------------------------------


def _pool_setup(cx, node, ins, at):
    if len(node.output) > 1 and node.output[1]:
        raise NotExpressible("the Indices output of MaxPool is not expressible")
    x = cx.t(ins[0])
    nd = x.ndim - 2
    if nd < 1:
        raise NotExpressible(f"input {x.shape} has no spatial dims")
    if "kernel_shape" not in at:
        raise NotExpressible("kernel_shape is required")
    kernel = _spatial(at, "kernel_shape", nd, 1, 1)
    strides, dils = _spatial(at, "strides", nd, 1, 1), _spatial(at, "dilations", nd, 1, 1)
    ceil = bool(at.get("ceil_mode", 0))
    geo = _window_pads(at, x.shape[2:], kernel, strides, dils, ceil, pool=True)
    return x, nd, kernel, strides, dils, geo


def _native_ok(nd, kernel, dils, geo, include_extra=True):
    if nd not in (1, 2) or any(d != 1 for d in dils):
        return False
    return all(max(b, a + (e if include_extra else 0)) < k for (b, a, e, _), k in zip(geo, kernel))


def _native_pads(geo, extra=True):
    return tuple(g[0] for g in geo) + tuple(g[1] + (g[2] if extra else 0) for g in geo)


def _window_slices(cx, x, kernel, strides, dils, geo):
    """The kernel's strided slices of the padded ``x``, in kernel C order."""
    if math.prod(kernel) > _MAX_WINDOW:
        raise NotExpressible(
            f"kernel_shape={list(kernel)} unrolls into {math.prod(kernel)} window slices; "
            f"aneforge unrolls at most {_MAX_WINDOW}"
        )
    outs = []
    for offsets in itertools.product(*[range(k) for k in kernel]):
        y = x
        for i, (o, s, d, g) in enumerate(zip(offsets, strides, dils, geo)):
            start = o * d
            y = slice_axis(cx, y, 2 + i, start, start + (g[3] - 1) * s + 1, s)
        outs.append(y)
    return outs


def _window_counts(sizes, kernel, strides, dils, geo, include_pad):
    """How many window positions of each output fall inside the counted region."""
    grids = []
    for n, k, s, d, (b, a, _, size) in zip(sizes, kernel, strides, dils, geo):
        lo, hi = (-b, n + a) if include_pad else (0, n)
        pos = np.arange(size)[:, None] * s - b + np.arange(k)[None, :] * d
        grids.append(((pos >= lo) & (pos < hi)).sum(axis=1))
    counts = grids[0]
    for g in grids[1:]:
        counts = np.multiply.outer(counts, g)
    return counts.astype(np.float64)


def _padded(cx, x, geo, value):
    pads = [(0, 0), (0, 0)] + [(b, a + e) for b, a, e, _ in geo]
    return pad_constant(cx, x, pads, value)


def _covering(sizes, kernel, dils, geo) -> list[int]:
    """The spatial dims (0-based) whose kernel reaches past the padded input (a ceil_mode
    window) while its single window holds every input position: there the pool is a
    reduction over the whole dim (EfficientNet's ``AvgPool2d(1280, ceil_mode=True)``)."""
    out = []
    for i, (n, k, d, (b, a, _, size)) in enumerate(zip(sizes, kernel, dils, geo)):
        if size != 1 or (k - 1) * d + 1 <= n + b + a:
            continue
        # positions -b + j*d (j < k) from -b <= 0 to past n: all of 0 .. n-1 when d = 1
        if d == 1 or (n == 1 and b % d == 0 and b // d < k):
            out.append(i)
    return out


def _fold_covering(cx, x, kernel, strides, dils, geo, kind, include=False):
    """Reduce the dims :func:`_covering` finds (``kind``: 'max', 'avg' or 'sum') and
    return ``(x, kernel, strides, dils, geo)`` for pooling what is left, those dims now
    of size 1 with a unit kernel. An average divides by onnxruntime's count: the input
    positions, plus with ``count_include_pad`` the declared pads inside the window
    (never the ceil overhang); the other dims' counts multiply, so dividing per step is
    the same average."""
    dims = _covering(x.shape[2:], kernel, dils, geo)
    if not dims:
        return x, kernel, strides, dils, geo
    axes = tuple(2 + i for i in dims)
    if kind == "max":
        x = cx.op("amax", x, axes=axes, keepdims=True)
    elif kind == "sum":
        x = cx.op("sum", x, axes=axes, keepdims=True)
    else:
        sizes = [x.shape[a] for a in axes]
        counts = list(sizes)
        if include:
            counts = [
                min(kernel[i], -(-(n + geo[i][0] + geo[i][1]) // dils[i]))
                for i, n in zip(dims, sizes)
            ]
        if counts == sizes:
            x = cx.op("mean", x, axes=axes, keepdims=True)
        else:  # declared zero pads inside the window count
            total = cx.op("sum", x, axes=axes, keepdims=True)
            count = np.full((1,) * x.ndim, float(math.prod(counts)))
            x = cx.op("div", total, cx.t(Host(count, label="pool count")))
    kernel, strides, dils, geo = list(kernel), list(strides), list(dils), list(geo)
    for i in dims:
        kernel[i], strides[i], dils[i], geo[i] = 1, 1, 1, (0, 0, 0, 1)
    return x, kernel, strides, dils, geo


def _all_unit(x, kernel, geo) -> bool:
    """Whether the pool left is the identity: unit kernel, no pads, every position kept."""
    sizes = x.shape[2:]
    return all(k == 1 for k in kernel) and all(g == (0, 0, 0, n) for g, n in zip(geo, sizes))


@handles("MaxPool")
def _max_pool(cx, node, ins, at):
    x, nd, kernel, strides, dils, geo = _pool_setup(cx, node, ins, at)
    x, kernel, strides, dils, geo = _fold_covering(cx, x, kernel, strides, dils, geo, "max")
    if _all_unit(x, kernel, geo):
        return [x]
    if _native_ok(nd, kernel, dils, geo):
        return [
            cx.op("max_pool", x, kernel=tuple(kernel), stride=tuple(strides), pad=_native_pads(geo))
        ]
    parts = _window_slices(cx, _padded(cx, x, geo, -np.inf), kernel, strides, dils, geo)
    y = parts[0]
    for p in parts[1:]:
        y = cx.op("maximum", y, p)
    return [y]


@handles("AveragePool")
def _avg_pool(cx, node, ins, at):
    x, nd, kernel, strides, dils, geo = _pool_setup(cx, node, ins, at)
    include = bool(at.get("count_include_pad", 0))
    x, kernel, strides, dils, geo = _fold_covering(
        cx, x, kernel, strides, dils, geo, "avg", include
    )
    if _all_unit(x, kernel, geo):
        return [x]
    overhang = any(g[2] for g in geo)
    common = {"kernel": tuple(kernel), "stride": tuple(strides)}
    if not include and _native_ok(nd, kernel, dils, geo):
        return [cx.op("avg_pool", x, pad=_native_pads(geo), **common)]
    if include and not overhang and _native_ok(nd, kernel, dils, geo):
        return [cx.op("avg_pool", x, pad=_native_pads(geo), count_include_pad=True, **common)]
    if include and _native_ok(nd, kernel, dils, [(0, 0, g[2], g[3]) for g in geo]):
        # Declared pads are real zeros that count; the ceil overhang does not.
        xp = pad_constant(cx, x, [(0, 0), (0, 0)] + [(b, a) for b, a, _, _ in geo], 0.0)
        pad = (0,) * nd + tuple(g[2] for g in geo)
        return [cx.op("avg_pool", xp, pad=pad, **common)]
    total = _window_sum(cx, x, kernel, strides, dils, geo, None)
    counts = _window_counts(x.shape[2:], kernel, strides, dils, geo, include)
    return [cx.op("div", total, cx.t(Host(counts, label="pool counts")))]


def _window_sum(cx, x, kernel, strides, dils, geo, power):
    """Running fp16 sum of the windows of ``x`` (or of ``|x|**power``), zero padded."""
    if power is not None:
        x = _power(cx, x, power)
    parts = _window_slices(cx, _padded(cx, x, geo, 0.0), kernel, strides, dils, geo)
    y = parts[0]
    for p in parts[1:]:
        y = cx.op("add", y, p)
    return y


def _power(cx, x, p):
    """``|x| ** p`` (``x * x`` for p = 2)."""
    if p == 2:
        return cx.op("square", x)
    if p == 1:
        return cx.op("abs", x)
    return cx.op("pow", cx.op("abs", x), float(p))


def _root(cx, y, p):
    if p == 1:
        return y
    if p == 2:
        return cx.op("sqrt", y)
    return cx.op("pow", y, 1.0 / p)


@handles("LpPool")
def _lp_pool(cx, node, ins, at):
    x, nd, kernel, strides, dils, geo = _pool_setup(cx, node, ins, at)
    p = at.get("p", 2)
    if _covering(x.shape[2:], kernel, dils, geo):
        x = _power(cx, x, p)
        x, kernel, strides, dils, geo = _fold_covering(cx, x, kernel, strides, dils, geo, "sum")
        p_left = None
    else:
        p_left = p
    y = x if _all_unit(x, kernel, geo) else _window_sum(cx, x, kernel, strides, dils, geo, p_left)
    return [_root(cx, y, p)]


def _spatial_axes(cx, ins):
    x = cx.t(ins[0])
    if x.ndim < 3:
        raise NotExpressible(f"input {x.shape} has no spatial dims")
    return x, tuple(range(2, x.ndim))


@handles("GlobalAveragePool")
def _global_avg(cx, node, ins, at):
    x, axes = _spatial_axes(cx, ins)
    return [cx.op("mean", x, axes=axes, keepdims=True)]


@handles("GlobalMaxPool")
def _global_max(cx, node, ins, at):
    x, axes = _spatial_axes(cx, ins)
    return [cx.op("amax", x, axes=axes, keepdims=True)]


@handles("GlobalLpPool")
def _global_lp(cx, node, ins, at):
    x, axes = _spatial_axes(cx, ins)
    p = at.get("p", 2)
    pre = {1: cx.op("abs", x), 2: cx.op("square", x)}.get(p)
    if pre is None:
        pre = cx.op("pow", cx.op("abs", x), float(p))
    return [_root(cx, cx.op("sum", pre, axes=axes, keepdims=True), p)]


# ---- resize -------------------------------------------------------------------------------


def _resize_plan(cx, x, ins, at):
    """Per axis (scale, out_size, roi) following the ONNX size rules."""
    r = x.ndim
    axes = [a % r for a in at.get("axes", range(r))]
    roi_in = cx.arr(ins[1], "roi") if len(ins) > 1 and ins[1] is not None else np.zeros(0)
    scales_in = cx.arr(ins[2], "scales") if len(ins) > 2 and ins[2] is not None else None
    sizes_in = cx.arr(ins[3], "sizes") if len(ins) > 3 and ins[3] is not None else None
    roi = [(0.0, 1.0)] * r
    if roi_in.size:
        n = len(roi_in) // 2
        for i, a in enumerate(axes if n == len(axes) else range(r)):
            roi[a] = (float(roi_in[i]), float(roi_in[i + n]))
    scales, sizes = [1.0] * r, list(x.shape)
    if sizes_in is not None and sizes_in.size:
        want = [int(v) for v in sizes_in]
        for a, s in zip(axes, want):
            scales[a] = s / x.shape[a]
        policy = at.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(scales[a] for a in axes)
            for a in axes:
                scales[a] = common
                sizes[a] = int(common * x.shape[a] + 0.5)
        else:
            for a, s in zip(axes, want):
                sizes[a] = s
    elif scales_in is not None and scales_in.size:
        for a, s in zip(axes, scales_in.astype(np.float64)):
            scales[a] = float(s)
            sizes[a] = int(s * x.shape[a])
    else:
        raise NotExpressible("Resize needs scales or sizes")
    if any(s < 1 for s in sizes):
        raise NotExpressible(f"output sizes {sizes} would be empty")
    return scales, sizes, roi


def _source_coords(mode, n_in, n_out, scale, roi):
    """Output positions mapped to input coordinates; and the extrapolated mask."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in
    outside = None
    if mode == "align_corners":
        x = np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            x = np.full(n_out, (hi - lo) * (n_in - 1) / 2)
        else:
            x = y * (hi - lo) * (n_in - 1) / (width - 1)
        x = x + lo * (n_in - 1)
        outside = (x < 0) | (x > n_in - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise NotExpressible(f"coordinate_transformation_mode={mode!r} is not expressible")
    return x, outside


def _cubic(t, a):
    t = np.abs(t)
    inner = ((a + 2) * t - (a + 3)) * t * t + 1
    outer = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, inner, np.where(t < 2, outer, 0.0))


def _kernel(at, ratio, scale):
    """(offsets relative to floor(x), weights) of one output; ratio in (0, 1]."""
    mode = at.get("mode", "nearest")
    if mode == "nearest":
        rounding = at.get("nearest_mode", "round_prefer_floor")
        if ratio == 1.0:
            right = True
        else:
            right = {
                "round_prefer_floor": ratio > 0.5,
                "round_prefer_ceil": ratio >= 0.5,
                "floor": False,
                "ceil": True,
            }.get(rounding)
            if right is None:
                raise NotExpressible(f"nearest_mode={rounding!r} is not expressible")
        return np.array([0, 1]), np.array([0.0, 1.0] if right else [1.0, 0.0])
    anti = bool(at.get("antialias", 0)) and scale < 1
    s = min(scale, 1.0) if anti else 1.0
    if anti and not (s > 0 and 4 / s < 2**20):  # its kernel spans about 4 / scale taps
        raise NotExpressible(f"antialias at scale {scale:g} needs a kernel that wide")
    if mode == "linear":
        start = int(math.floor(-1 / s) + 1) if anti else 0
        offs = np.arange(start, 2 - start)
        w = np.clip(1 - np.abs((offs - ratio) * s), 0, 1)
    elif mode == "cubic":
        start = int(math.floor(-2 / s) + 1) if anti else -1
        offs = np.arange(start, 3 - start if anti else 3)
        w = _cubic((offs - ratio) * s, at.get("cubic_coeff_a", -0.75))
    else:
        raise NotExpressible(f"mode={mode!r} is not expressible")
    return offs, (w / w.sum() if anti else w)


def _resize_matrix(at, n_in, n_out, scale, roi):
    """(n_out, n_in) float64 weights and the extrapolated-output mask of one axis."""
    x, outside = _source_coords(
        at.get("coordinate_transformation_mode", "half_pixel"), n_in, n_out, scale, roi
    )
    check_elements((n_out, n_in), "from_onnx: Resize weight matrix")
    m = np.zeros((n_out, n_in))
    for j, xj in enumerate(x):
        base = math.floor(xj)
        ratio = xj - base
        if ratio == 0.0:  # an exact position: the left neighbour at ratio 1
            base, ratio = base - 1, 1.0
        offs, w = _kernel(at, ratio, scale)
        idx = base + offs
        if at.get("exclude_outside", 0):
            w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
            w = w / (w.sum() or 1.0)
        np.add.at(m[j], np.clip(idx, 0, n_in - 1), w)
    return m, outside


def _upsample_factor(at, m, n_in, n_out):
    """The integer factor when ``m`` is the engine's nearest or linear upsampling."""
    if n_out % n_in:
        return None
    f = n_out // n_in
    mode = at.get("mode", "nearest")
    if mode == "nearest" and np.array_equal(m, np.repeat(np.eye(n_in), f, axis=0)):
        return f
    cmode = at.get("coordinate_transformation_mode", "half_pixel")
    if mode == "linear" and cmode in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return f
    return None


@handles("Resize")
def _resize(cx, node, ins, at):
    x = cx.t(ins[0])
    scales, sizes, roi = _resize_plan(cx, x, ins, at)
    plans = {}
    for a in range(x.ndim):
        if sizes[a] == x.shape[a] and scales[a] == 1.0 and roi[a] == (0.0, 1.0):
            continue
        plans[a] = _resize_matrix(at, x.shape[a], sizes[a], scales[a], roi[a])
    if not plans:
        return [x]
    factors = {a: _upsample_factor(at, m, x.shape[a], sizes[a]) for a, (m, _) in plans.items()}
    native = (
        x.ndim in (3, 4)
        and set(plans) <= set(range(2, x.ndim))
        and all(f is not None for f in factors.values())
        and all(o is None for _, o in plans.values())
        and at.get("mode", "nearest") in ("nearest", "linear")
    )
    if native:
        scale = tuple(factors.get(a, 1) for a in range(2, x.ndim))
        mode = "nearest" if at.get("mode", "nearest") == "nearest" else "bilinear"
        corners = at.get("coordinate_transformation_mode") == "align_corners"
        return [cx.op("upsample", x, scale=scale, mode=mode, align_corners=corners)]
    for a, (m, outside) in plans.items():
        x = _apply_axis(cx, x, a, m)
        if outside is not None and outside.any():
            shape = [1] * x.ndim
            shape[a] = len(outside)
            mask = Host(outside.reshape(shape), label="resize extrapolation mask")
            value = float(at.get("extrapolation_value", 0.0))
            x = cx.op("select", cx.t(mask), value, x)
    return [x]


def _apply_axis(cx, x, axis, m):
    """Resample ``x`` along ``axis`` by the (n_out, n_in) weights ``m``."""
    rows = [np.flatnonzero(r) for r in m]
    if all(len(r) == 1 and m[j, r[0]] == 1.0 for j, r in enumerate(rows)):
        return take(cx, x, [r[0] for r in rows], axis)  # nearest: an exact gather
    last = x.ndim - 1
    perm = [a for a in range(x.ndim) if a != axis] + [axis]
    moved = x if axis == last else cx.op("transpose", x, perm=tuple(perm))
    y = matmul(cx, moved, Host(m.T.copy(), label="resize weights"))
    if axis == last:
        return y
    return cx.op("transpose", y, perm=tuple(int(p) for p in np.argsort(perm)))


@handles("MaxUnpool")
def _max_unpool(cx, node, ins, at):
    x = cx.t(ins[0])
    idx = cx.arr(ins[1], "I").astype(np.int64).reshape(-1)
    nd = x.ndim - 2
    if "kernel_shape" not in at:
        raise NotExpressible("kernel_shape is required")
    kernel = _spatial(at, "kernel_shape", nd, 1, 1)
    strides, pads = _spatial(at, "strides", nd, 1, 1), _spatial(at, "pads", 2 * nd, 0)
    inferred = x.shape[:2] + tuple(
        (x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd] for i in range(nd)
    )
    if any(d < 1 for d in inferred):
        raise NotExpressible(f"the unpooled shape {inferred} is empty")
    size = check_elements(inferred, f"from_onnx: MaxUnpool '{node_label(node)}' output")
    if idx.size != x.size or (idx.size and (idx.min() < 0 or idx.max() >= size)):
        raise NotExpressible(f"indices I must be {x.size} positions in [0, {size})")
    source = np.full(size, x.size, dtype=np.int64)  # x.size: the appended zero
    source[idx] = np.arange(x.size)
    flat = cx.op("concat", reshape(cx, x, (x.size,)), cx.t(Host(np.zeros(1))), axis=0)
    y = reshape(cx, take(cx, flat, source, 0), inferred)
    if len(ins) > 2 and ins[2] is not None:  # a larger output: zeros after the data
        out = cx.ints(ins[2], "output_shape")
        y = pad_constant(cx, y, [(0, o - i) for o, i in zip(out, inferred)], 0.0)
    return [y]


# ---- sampling at constant positions: GridSample, RoiAlign ----------------------------------

_PROBE_LIMIT = 4_000_000  # probe elements one import may evaluate


def _probe(cx, node, x, params, what):
    """The op's linear map, found by running it (onnx.reference) on one-hot images: a
    probe with one channel per input position. Returns maps [rows, positions, outputs]."""
    n = x.shape[0]
    size = int(np.prod(x.shape[2:]))
    if n * size * size > _PROBE_LIMIT:
        raise NotExpressible(
            f"{what} over {x.shape} is too large to resolve at import ({n * size * size} "
            f"probe values, limit {_PROBE_LIMIT})"
        )
    probe = np.zeros((n, size, size))
    probe[:, np.arange(size), np.arange(size)] = 1.0
    probe = probe.reshape((n, size) + x.shape[2:]).astype(np.float32)
    out = host_eval(node, [probe, *params], cx.opset)[0]
    return out.reshape(out.shape[0], size, -1), out.shape[2:]


def _sample(cx, x, maps, rows_batch, out_shape):
    """Row r of the result: channels of ``x[rows_batch[r]]`` combined by ``maps[r]``
    ([positions, outputs] weights) as gathers times constant weights, summed in fp16."""
    n, c = x.shape[:2]
    size = maps.shape[1]
    rows, outs = maps.shape[0], maps.shape[2]
    flat = cx.op("transpose", x, perm=(1, 0) + tuple(range(2, x.ndim)))
    flat = reshape(cx, flat, (c, n * size))
    weights = np.moveaxis(maps, 1, 2)  # [rows, outputs, positions]
    count = int((weights != 0).sum(axis=2).max(initial=0))
    order = np.argsort(weights == 0, axis=2, kind="stable")[:, :, : max(count, 1)]
    picked = np.take_along_axis(weights, order, axis=2)
    base = (np.asarray(rows_batch) * size)[:, None, None]
    acc = None
    for k in range(count):
        idx = (order[:, :, k] + base[:, :, 0]).reshape(-1)
        term = take(cx, flat, idx, 1)
        w = picked[:, :, k].reshape(1, -1)
        if not np.all(w == 1.0):
            term = cx.op("mul", term, cx.t(Host(w, label="sampling weights")))
        acc = term if acc is None else cx.op("add", acc, term)
    if acc is None:
        acc = cx.t(Host(np.zeros((c, rows * outs)), label="empty sampling"))
    y = reshape(cx, acc, (c, rows) + tuple(out_shape))
    return cx.op("transpose", y, perm=(1, 0) + tuple(range(2, y.ndim)))


@handles("GridSample")
def _grid_sample(cx, node, ins, at):
    x = cx.t(ins[0])
    grid = cx.arr(ins[1], "grid").astype(np.float32)  # constant sampling positions
    maps, out_shape = _probe(cx, node, x, [grid], "GridSample")
    return [_sample(cx, x, maps, np.arange(x.shape[0]), out_shape)]


@handles("RoiAlign")
def _roi_align(cx, node, ins, at):
    if at.get("mode", "avg") != "avg":
        raise NotExpressible(f"mode={at['mode']!r} is not expressible (a data-dependent max)")
    x = cx.t(ins[0])
    rois = cx.arr(ins[1], "rois").astype(np.float32)
    batch = cx.arr(ins[2], "batch_indices").astype(np.int64)
    maps, out_shape = _probe(cx, node, x, [rois, batch], "RoiAlign")
    return [_sample(cx, x, maps, batch, out_shape)]
