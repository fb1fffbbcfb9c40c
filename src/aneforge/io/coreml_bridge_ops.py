"""Core ML lowerings of the bridge ops (see :mod:`aneforge.io.coreml_ops`).

Each native bridge op is lowered to Core ML MIL ops where Core ML can express it, or
decomposed through its fused route; importing this module adds its entries to
:data:`aneforge.io.coreml_ops.LOWERINGS`.
"""

from __future__ import annotations

import numpy as np

from ..graph.ops.common import norm_axis
from .coreml_ops import (
    DECOMPOSED,
    NOT_EXPRESSIBLE,
    _add,
    _pixel_shuffle,
    _pixel_unshuffle,
    _slice_index,
    lowers,
)


def _sdpa_native(node, ios):
    if ios < 18:
        return "scaled_dot_product_attention needs iOS 18 / macOS 15"
    if node.attrs["scale"] is not None:
        return "Core ML's scaled_dot_product_attention has no scale (it uses D**-0.5)"
    return None


@lowers("sdpa", "scaled_dot_product_attention", min_ios=18, native_if=_sdpa_native,
        note="iOS 18+ and the default scale; else its fused route (bmm, softmax, bmm)")  # fmt: skip
def _sdpa(cx, node, name):
    mask = {"attn_mask": cx.arg(node, 3)} if node.attrs["has_mask"] else {}
    return cx.mb.scaled_dot_product_attention(
        query=cx.arg(node, 0), key=cx.arg(node, 1), value=cx.arg(node, 2), name=name, **mask
    )


@lowers("argmax", "reduce_argmax + cast (int32 to fp16)",
        note="Core ML's tie and NaN order is its own (aneforge: first maximum)")  # fmt: skip
def _argmax(cx, node, name):
    idx = cx.mb.reduce_argmax(x=cx.arg(node, 0), axis=node.attrs["axis"],
                              keep_dims=node.attrs["keepdims"], name=f"{name}_i")  # fmt: skip
    return cx.mb.cast(x=idx, dtype="fp16", name=name)


def _topk_pair(cx, node, k, axis, ascending, name):
    """One MIL topk per (source, k, axis, order), shared by the values and indices nodes."""
    key = ("topk", id(node.srcs[0]), k, axis, ascending)
    if key not in cx.memo:
        cx.memo[key] = cx.mb.topk(x=cx.arg(node, 0), k=k, axis=axis, ascending=ascending,
                                  name=name)  # fmt: skip
    return cx.memo[key]


@lowers("topk", "topk (+ cast of the indices to fp16); values and indices share one topk",
        note="Core ML's tie order is its own (aneforge: lower index first)")  # fmt: skip
def _topk(cx, node, name):
    a = node.attrs
    values, indices = _topk_pair(cx, node, a["k"], a["axis"], not a["largest"], f"{name}_tk")
    if a["output"] == "values":
        return cx.mb.identity(x=values, name=name)
    return cx.mb.cast(x=indices, dtype="fp16", name=name)


@lowers("sort", "topk over the whole axis (values)",
        note="Core ML's order of equal values and NaN is its own (aneforge: stable)")  # fmt: skip
def _sort(cx, node, name):
    x = node.srcs[0]
    axis = norm_axis(node.op, node.attrs["axis"], x.ndim)
    asc = not node.attrs["descending"]
    values, _ = _topk_pair(cx, node, x.shape[axis], axis, asc, f"{name}_tk")
    return cx.mb.identity(x=values, name=name)


_add("minmax_norm", "its fused route: reduce_min, reduce_max, sub, add, real_div",
     status=DECOMPOSED, note="Core ML has no min-max normalization op")  # fmt: skip
_add("flatten", "its fused route: reshape", status=DECOMPOSED,
     note="a reshape to the static output shape")  # fmt: skip


def _lrn_native(node, ios):
    if node.attrs["size"] % 2 == 0:
        return "Core ML's local_response_norm window is defined for odd sizes only"
    if node.srcs[0].ndim > 4:
        return "Core ML's local_response_norm takes rank 3 or 4"
    return None


@lowers("lrn", "local_response_norm", native_if=_lrn_native,
        note="odd size, rank 3-4; else its fused route (square, conv by ones, div)")  # fmt: skip
def _lrn(cx, node, name):
    a = node.attrs
    return cx.mb.local_response_norm(
        x=cx.arg(node, 0), size=a["size"], alpha=np.float16(a["alpha"]),
        beta=np.float16(a["beta"]), k=np.float16(a["bias"]), name=name,
    )  # fmt: skip


_add("space_to_channel", "pixel_unshuffle (PyTorch order)", _pixel_unshuffle, min_ios=16)
_add("channel_to_space", "pixel_shuffle (PyTorch order)", _pixel_shuffle)


@lowers("space_to_batch", "space_to_batch (TensorFlow block order)")
def _space_to_batch(cx, node, name):
    r = node.attrs["factor"]
    return cx.mb.space_to_batch(x=cx.arg(node, 0), block_shape=[r, r],
                                paddings=[[0, 0], [0, 0]], name=name)  # fmt: skip


@lowers("batch_to_space", "batch_to_space (TensorFlow block order)")
def _batch_to_space(cx, node, name):
    r = node.attrs["factor"]
    return cx.mb.batch_to_space(x=cx.arg(node, 0), block_shape=[r, r],
                                crops=[[0, 0], [0, 0]], name=name)  # fmt: skip


@lowers("input_view", "slice_by_index")
def _input_view(cx, node, name):
    a = node.attrs
    bounds = [(b, b + s, 1) for b, s in zip(a["begins"], a["sizes"])]
    return _slice_index(cx, cx.arg(node, 0), bounds, name)


@lowers("dynamic_slice",
        "not_equal + select (NaN to 0) + round + maximum + minimum + cast + slice_by_size",
        note="offsets rounded, clamped into range and cast to int32 in the program")  # fmt: skip
def _dynamic_slice(cx, node, name):
    mb, x, sizes = cx.mb, node.srcs[0], node.attrs["sizes"]
    start = cx.arg(node, 1)
    isnan = mb.not_equal(x=start, y=start, name=f"{name}_nan")
    start = mb.select(cond=isnan, a=cx.const(0.0, f"{name}_zero"), b=start, name=f"{name}_s0")
    start = mb.round(x=start, name=f"{name}_rnd")
    start = mb.maximum(x=start, y=cx.const(0.0, f"{name}_lo"), name=f"{name}_cl")
    hi = cx.const([d - s for d, s in zip(x.shape, sizes)], f"{name}_hi")
    start = mb.minimum(x=start, y=hi, name=f"{name}_ch")
    begin = mb.cast(x=start, dtype="int32", name=f"{name}_begin")
    return mb.slice_by_size(x=cx.arg(node, 0), begin=begin, size=list(sizes), name=name)


@lowers("cross_product", "slice_by_index x6 + mul x6 + sub x3 + concat",
        note="the same fp16 steps as aneforge: each component a_i*b_j - a_j*b_i")  # fmt: skip
def _cross_product(cx, node, name):
    mb, out_rank = cx.mb, len(node.shape)
    axis = norm_axis(node.op, node.attrs["axis"], out_rank)

    def parts(i, label):
        src = node.srcs[i]
        local = axis - (out_rank - src.ndim)
        full = [(0, d, 1) for d in src.shape]
        out = []
        for c in range(3):
            bounds = list(full)
            bounds[local] = (c, c + 1, 1)
            out.append(_slice_index(cx, cx.arg(node, i), bounds, f"{name}_{label}{c}"))
        return out

    a, b = parts(0, "a"), parts(1, "b")
    comps = []
    for n, (i, j) in enumerate(((1, 2), (2, 0), (0, 1))):
        p = mb.mul(x=a[i], y=b[j], name=f"{name}_p{n}")
        q = mb.mul(x=a[j], y=b[i], name=f"{name}_q{n}")
        comps.append(mb.sub(x=p, y=q, name=f"{name}_c{n}"))
    return mb.concat(values=comps, axis=axis, name=name)


@lowers("cross_correlation", "expand_dims (template as a [1, C, th, tw] filter) + conv",
        note="a runtime template is a dynamic conv weight")  # fmt: skip
def _cross_correlation(cx, node, name):
    t = node.srcs[1]
    filt = cx.param(node, 1, (1,) + t.shape, f"{name}_filter")
    return cx.mb.conv(x=cx.arg(node, 0), weight=filt, pad_type="valid", name=name)


@lowers("cost_volume", "per disparity: slice_by_index x2 + mul + reduce_mean + pad; concat",
        note="max_disp planes, each a shifted product averaged over channels")  # fmt: skip
def _cost_volume(cx, node, name):
    mb = cx.mb
    n, c, h, w = node.srcs[0].shape
    planes = []
    for d in range(node.attrs["max_disp"]):
        if d >= w:
            planes.append(cx.const(np.zeros((n, 1, h, w)), f"{name}_zero{d}"))
            continue
        left = _slice_index(cx, cx.arg(node, 0), [(0, n, 1), (0, c, 1), (0, h, 1), (d, w, 1)],
                            f"{name}_l{d}")  # fmt: skip
        right = _slice_index(cx, cx.arg(node, 1), [(0, n, 1), (0, c, 1), (0, h, 1),
                             (0, w - d, 1)], f"{name}_r{d}")  # fmt: skip
        prod = mb.mul(x=left, y=right, name=f"{name}_p{d}")
        plane = mb.reduce_mean(x=prod, axes=[1], keep_dims=True, name=f"{name}_m{d}")
        if d:
            plane = mb.pad(x=plane, pad=[0, 0, 0, 0, 0, 0, d, 0], mode="constant",
                           constant_val=np.float16(0.0), name=f"{name}_z{d}")  # fmt: skip
        planes.append(plane)
    if len(planes) == 1:
        return mb.identity(x=planes[0], name=name)
    return mb.concat(values=planes, axis=1, name=name)


_add(
    "fps",
    "-",
    status=NOT_EXPRESSIBLE,
    note=(
        "farthest point sampling is a k-step loop in which each step's argmax picks the "
        "point the next distances depend on; a feed-forward Core ML program can hold it "
        "only as k unrolled gather/argmax steps, and MIL's while_loop never runs on the "
        "Neural Engine. Run fps on the host and feed its indices as an input"
    ),
)

_RADIUS_KEY = 4096.0  # any key above every index (<= 2048) marks a miss


@lowers("radius_search",
        "expand_dims x2 + sub + mul + reduce_sum + less_equal + select + topk + less + "
        "select (+ pad)",
        note="hits keyed by index, misses by 4096; the k smallest keys, misses as -1")  # fmt: skip
def _radius_search(cx, node, name):
    mb = cx.mb
    (n, _), (m, _) = node.srcs[0].shape, node.srcs[1].shape
    kmax = node.attrs["max_neighbors"]
    pts = mb.expand_dims(x=cx.arg(node, 0), axes=[0], name=f"{name}_pts")
    ctr = mb.expand_dims(x=cx.arg(node, 1), axes=[1], name=f"{name}_ctr")
    d = mb.sub(x=pts, y=ctr, name=f"{name}_d")
    dist = mb.reduce_sum(x=mb.mul(x=d, y=d, name=f"{name}_d2"), axes=[-1], keep_dims=False,
                         name=f"{name}_dist")  # fmt: skip
    r = np.float16(node.attrs["radius"])
    r2 = cx.const(np.float16(r * r), f"{name}_r2")
    within = mb.less_equal(x=dist, y=r2, name=f"{name}_in")
    idx = cx.const(np.broadcast_to(np.arange(n), (m, n)), f"{name}_idx")
    key = mb.select(cond=within, a=idx, b=cx.const(_RADIUS_KEY, f"{name}_miss"),
                    name=f"{name}_key")  # fmt: skip
    take = min(kmax, n)
    best, _ = mb.topk(x=key, k=take, axis=-1, ascending=True, name=f"{name}_tk")
    hit = mb.less(x=best, y=cx.const(_RADIUS_KEY, f"{name}_lim"), name=f"{name}_hit")
    out = mb.select(cond=hit, a=best, b=cx.const(-1.0, f"{name}_none"),
                    name=name if take == kmax else f"{name}_sel")  # fmt: skip
    if take == kmax:
        return out
    return mb.pad(x=out, pad=[0, 0, 0, kmax - take], mode="constant",
                  constant_val=np.float16(-1.0), name=name)  # fmt: skip


@lowers("scaled_elementwise", "add / sub / mul + mul by the scale")
def _scaled_elementwise(cx, node, name):
    op = node.attrs["op"]
    y = getattr(cx.mb, op)(x=cx.arg(node, 0), y=cx.arg(node, 1), name=f"{name}_{op}")
    return cx.mb.mul(x=y, y=cx.const(node.attrs["scale"], f"{name}_scale"), name=name)
