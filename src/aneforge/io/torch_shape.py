"""The movement and spatial part of the ATen op table (handlers as in :mod:`.torch_ops`).

Movement is exact. Views, permutes, expands, slices, selects, splits, concatenation
and constant padding map to the aneforge ops of the same meaning. Indexing with indices
known at import (``index.Tensor``, ``gather``, ``flip``, ``roll``, ``repeat``) runs the
ATen op itself on the element positions of its input (an iota) and gathers by the result:
one exact gather per axis when the map is separable, else one gather over the flattened
input. The writes (``index_put``, ``slice_scatter``, ``select_scatter``, ``scatter``) go
through ONNX import's flat scatter. A view or permute past rank 5 (pixel shuffle, window
partitions) stays symbolic (:class:`~.torch_ops.HighRank`) until a view brings it back:
dims that stay adjacent and in order are merged, so a chain whose permutation fits rank
5 is expressed; one that does not is refused with its shapes.

Convolution and pooling reuse ONNX import's Conv / ConvTranspose / MaxPool /
AveragePool handlers (padding, ``ceil_mode`` and ``count_include_pad`` as torch defines
them); upsampling its Resize (nearest: ``asymmetric`` + ``floor``; nearest-exact:
``half_pixel`` + ``round_prefer_ceil``; bilinear: ``pytorch_half_pixel`` or
``align_corners``; bicubic: ``half_pixel``, a = -0.75); adaptive average pooling is an
``avg_pool`` when the sizes divide, else per-window means.

Example:
    >>> from aneforge.io.torch_ops import ATEN
    >>> {"aten.view.default", "aten.convolution.default"} <= set(ATEN)
    True
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.tensor import MAX_RANK, Tensor
from .onnx_errors import NotExpressible
from .onnx_ops import broadcast_to, norm_axis, pad_constant, reshape, slice_axis, take
from .onnx_shape import scatter_flat
from .onnx_values import Host
from .torch_ops import HighRank, Unavailable, aten

# ---- views and permutes, past rank 5 included ---------------------------------------------


def _dims_of(value) -> tuple:
    return value.out_shape if isinstance(value, HighRank) else value.shape


def _resolve(shape, total: int) -> tuple:
    """A view's target shape with its ``-1`` resolved."""
    dims = [int(d) for d in shape]
    if dims.count(-1) > 1:
        raise NotExpressible(f"shape {dims} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise NotExpressible(f"shape {dims} does not fit {total} elements")
        dims[dims.index(-1)] = total // known
    if math.prod(dims) != total:
        raise NotExpressible(f"shape {dims} does not hold {total} elements")
    return tuple(dims)


def lower_rank(value: HighRank):
    """``value`` as (a rank <= 5 source view, its permutation) with the dims that stay
    adjacent merged and size-1 dims dropped; None when it needs more than rank 5."""
    keep = [a for a, d in enumerate(value.shape) if d != 1]
    order = [keep.index(p) for p in value.perm if p in keep]
    sizes = [value.shape[a] for a in keep]
    groups: list[list[int]] = []
    for p in order:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    firsts = sorted(g[0] for g in groups)
    merged = {g[0]: math.prod(sizes[i] for i in g) for g in groups}
    src_shape = tuple(merged[f] for f in firsts) or (1,)
    perm = tuple(firsts.index(g[0]) for g in groups)
    if len(src_shape) > MAX_RANK:
        return None
    return src_shape, perm


def _materialize(cx, value: HighRank, shape) -> Tensor | HighRank:
    """``value`` viewed as ``shape`` (rank <= 5 or kept symbolic again)."""
    lowered = lower_rank(value)
    if lowered is None:
        raise NotExpressible(
            f"a view of shape {value.shape} permuted by {list(value.perm)} needs rank "
            f"{len(value.shape)}: its permutation does not fit the engine's rank 5"
        )
    src_shape, perm = lowered
    y = reshape(cx, value.src, src_shape)
    if perm != tuple(range(len(perm))):
        y = cx.op("transpose", y, perm=perm)
    if len(shape) > MAX_RANK:
        return HighRank(reshape(cx, y, (y.size,)), tuple(shape), tuple(range(len(shape))))
    return reshape(cx, y, shape)


@aten("view.default", "_unsafe_view.default", "reshape.default", host="torch")
def _view(cx, x, size):
    if not isinstance(x, HighRank):
        x = cx.t(x)
    shape = _resolve(size, math.prod(_dims_of(x)))
    if isinstance(x, HighRank):
        return _materialize(cx, x, shape)
    if len(shape) > MAX_RANK:
        return HighRank(x, shape, tuple(range(len(shape))))
    return reshape(cx, x, shape)


@aten("permute.default", host="torch")
def _permute(cx, x, dims):
    rank = len(_dims_of(x) if isinstance(x, HighRank) else cx.t(x).shape)
    perm = tuple(norm_axis(int(d), rank, "dims") for d in dims)
    if isinstance(x, HighRank):
        return HighRank(x.src, x.shape, tuple(x.perm[p] for p in perm))
    return cx.t(x) if perm == tuple(range(rank)) else cx.op("transpose", x, perm=perm)


@aten("expand.default", host="torch")
def _expand(cx, x, size, *, implicit=False):
    x = cx.t(x)
    lead = len(size) - x.ndim
    want = [int(d) if int(d) != -1 else x.shape[i - lead] for i, d in enumerate(size)]
    return broadcast_to(cx, x, want)


@aten("unsqueeze.default", host="torch")
def _unsqueeze(cx, x, dim):
    x = cx.t(x)
    d = norm_axis(int(dim), x.ndim + 1, "dim")
    return reshape(cx, x, x.shape[:d] + (1,) + x.shape[d:])


@aten("squeeze.dim", "squeeze.dims", "squeeze.default", host="torch")
def _squeeze(cx, x, dim=None):
    x = cx.t(x)
    if dim is None:
        dims = set(range(x.ndim))
    else:
        dims = {norm_axis(int(d), max(x.ndim, 1), "dim") for d in np.atleast_1d(dim)}
    return reshape(cx, x, tuple(d for i, d in enumerate(x.shape) if not (i in dims and d == 1)))


@aten("cat.default", host="torch")
def _cat(cx, tensors, dim=0):
    parts = [cx.t(v) for v in tensors if not (isinstance(v, Host) and v.value.size == 0)]
    if len(parts) == 1:
        return parts[0]
    return cx.op("concat", *parts, axis=norm_axis(int(dim), parts[0].ndim, "dim"))


def _range(d: int, start, end, step) -> range:
    if step is None:
        step = 1
    if step < 1:
        raise NotExpressible(f"step={step} is not expressible (torch slices step forward)")
    return range(d)[slice(start, end, step)]


@aten("slice.Tensor", host="torch")
def _slice(cx, x, dim=0, start=None, end=None, step=1):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    r = _range(x.shape[axis], start, end, step)
    if len(r) == 0:
        raise NotExpressible(f"the slice [{start}:{end}:{step}] of axis {axis} is empty")
    if len(r) == x.shape[axis]:
        return x
    return slice_axis(cx, x, axis, r.start, r.stop, r.step)


@aten("select.int", host="torch")
def _select(cx, x, dim, index):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    i = norm_axis(int(index), x.shape[axis], "index")
    y = slice_axis(cx, x, axis, i, i + 1)
    return reshape(cx, y, x.shape[:axis] + x.shape[axis + 1 :])


@aten("split_with_sizes.default", "split.Tensor", host="torch")
def _split(cx, x, split_sizes=None, dim=0, split_size=None):
    x = cx.t(x)
    split_sizes = split_size if split_sizes is None else split_sizes
    axis = norm_axis(int(dim), x.ndim, "dim")
    d = x.shape[axis]
    if isinstance(split_sizes, int):
        sizes = [min(split_sizes, d - s) for s in range(0, d, max(split_sizes, 1))]
    else:
        sizes = [int(s) for s in split_sizes]
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_axis(cx, x, axis, start, start + s) if s else Unavailable("empty split"))
        start += s
    return tuple(x if len(sizes) == 1 else o for o in outs)


@aten("unbind.int", host="torch")
def _unbind(cx, x, dim=0):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    return tuple(_select(cx, x, axis, i) for i in range(x.shape[axis]))


@aten("constant_pad_nd.default", host="torch")
def _pad(cx, x, pad, value=0):
    x = cx.t(x)
    pads = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pads[x.ndim - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    return pad_constant(cx, x, pads, float(value))


@aten("copy.default")
def _copy(cx, dst, src, non_blocking=False):
    return broadcast_to(cx, src, _dims_of(cx.t(dst)))


@aten("sym_size.int", host="handler")
def _sym_size(cx, x, dim):
    dims = _dims_of(x) if isinstance(x, (Tensor, HighRank)) else np.shape(x.value)
    return int(dims[norm_axis(int(dim), len(dims), "dim")])


@aten("sym_numel.default", host="handler")
def _sym_numel(cx, x):
    return math.prod(_dims_of(x) if isinstance(x, (Tensor, HighRank)) else np.shape(x.value))


# ---- indexing with constant indices: through the index map ---------------------------------


def _torch_args(cx, values):
    torch = cx.importer.torch
    out = []
    for v in values:
        if isinstance(v, Host):
            out.append(torch.from_numpy(np.ascontiguousarray(v.value)))
        elif isinstance(v, (list, tuple)):
            out.append(type(v)(_torch_args(cx, v)))
        elif isinstance(v, Tensor):
            out.append(torch.from_numpy(cx.arr(v, "an index").astype(np.int64)))
        else:
            out.append(v)
    return out


def index_map(cx, shape, *args, **kwargs) -> np.ndarray:
    """The flat source position of every output element of this node's ATen op on an
    input of ``shape`` (the op run on an iota, the rest of its arguments as given)."""
    torch = cx.importer.torch
    iota = torch.arange(math.prod(shape), dtype=torch.int64).reshape(shape)
    try:
        out = cx.fx.target(iota, *_torch_args(cx, args), **kwargs)
    except (RuntimeError, IndexError, ValueError, TypeError) as err:
        raise NotExpressible(f"its indices do not fit the input {tuple(shape)} ({err})") from None
    return out.numpy()


def gather_map(cx, x, positions: np.ndarray):
    """``x.flatten()[positions]``: per-axis gathers when the map is separable (a result
    past rank 5 stays a :class:`~.torch_ops.HighRank`)."""
    x = cx.t(x)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.ndim == x.ndim and positions.size:
        coords = np.unravel_index(positions, x.shape)
        picks = []
        for axis, c in enumerate(coords):
            line = c[tuple(slice(None) if a == axis else 0 for a in range(x.ndim))]
            shape = [1] * x.ndim
            shape[axis] = -1
            if not np.array_equal(np.broadcast_to(line.reshape(shape), c.shape), c):
                break
            picks.append(line)
        else:
            y = x
            for axis, line in enumerate(picks):
                y = take(cx, y, line, axis)
            return y
    flat = take(cx, reshape(cx, x, (x.size,)), positions.reshape(-1), 0)
    if positions.ndim > MAX_RANK:  # kept symbolic until a view brings it back
        return HighRank(flat, positions.shape, tuple(range(positions.ndim)))
    return reshape(cx, flat, positions.shape)


@aten(
    "index.Tensor",
    "gather.default",
    "flip.default",
    "roll.default",
    "repeat.default",
    "take.default",
    host="torch",
)
def _indexed(cx, x, *args, **kwargs):
    x = cx.t(x)
    return gather_map(cx, x, index_map(cx, x.shape, *args, **kwargs))


@aten("index_select.default", host="torch")
def _index_select(cx, x, dim, index):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    idx = cx.arr(index, "index").astype(np.int64).reshape(-1)
    d = x.shape[axis]
    if ((idx < -d) | (idx >= d)).any():
        raise NotExpressible(f"index {idx.tolist()} is out of range for axis {axis} of size {d}")
    return take(cx, x, np.where(idx < 0, idx + d, idx), axis)


@aten("embedding.default", host="torch")
def _embedding(cx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    w = cx.t(weight)
    idx = cx.arr(indices, "indices").astype(np.int64)
    if ((idx < 0) | (idx >= w.shape[0])).any():
        raise NotExpressible(f"indices beyond the {w.shape[0]} rows of the table")
    return reshape(cx, take(cx, w, idx.reshape(-1), 0), idx.shape + w.shape[1:])


def _scatter(cx, x, positions, values, reduction="none"):
    x = cx.t(x)
    positions = np.asarray(positions, dtype=np.int64)
    values = broadcast_to(cx, values, positions.shape)
    return scatter_flat(cx, x, values, positions.reshape(-1), reduction)


@aten("index_put.default", host="torch")
def _index_put(cx, x, indices, values, accumulate=False):
    x = cx.t(x)
    torch = cx.importer.torch
    iota = torch.arange(x.size, dtype=torch.int64).reshape(x.shape)
    try:
        picked = torch.ops.aten.index.Tensor(iota, _torch_args(cx, [list(indices)])[0])
    except (RuntimeError, IndexError, ValueError, TypeError) as err:
        raise NotExpressible(f"its indices do not fit the input {x.shape} ({err})") from None
    return _scatter(cx, x, picked.numpy(), values, "add" if accumulate else "none")


@aten("slice_scatter.default", host="torch")
def _slice_scatter(cx, x, src, dim=0, start=None, end=None, step=1):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    r = _range(x.shape[axis], start, end, step)
    iota = np.arange(x.size).reshape(x.shape)
    positions = np.take(iota, list(r), axis=axis)
    return _scatter(cx, x, positions, src)


@aten("select_scatter.default", host="torch")
def _select_scatter(cx, x, src, dim, index):
    x = cx.t(x)
    axis = norm_axis(int(dim), x.ndim, "dim")
    i = norm_axis(int(index), x.shape[axis], "index")
    positions = np.take(np.arange(x.size).reshape(x.shape), i, axis=axis)
    return _scatter(cx, x, positions, src)


@aten("scatter.src", "scatter.value", "scatter_add.default", "scatter.reduce", host="torch")
def _scatter_elements(cx, x, dim, index, src, reduce=None):  # noqa: A002
    x = cx.t(x)
    idx = cx.arr(index, "index").astype(np.int64)
    if isinstance(src, (int, float)):
        src = Host(np.full(idx.shape, float(src)), label=f"{cx.fx.name} value")
    else:
        src = cx.t(src)
        for axis, n in enumerate(idx.shape):
            if src.shape[axis] != n:
                src = slice_axis(cx, src, axis, 0, n)
    reduction = "add" if cx.key == "aten.scatter_add.default" else {
        None: "none", "add": "add", "multiply": "mul"}.get(reduce)  # fmt: skip
    if reduction is None:
        raise NotExpressible(f"reduce={reduce!r} is not expressible")
    ins = [x, Host(idx), src]
    return cx.onnx("ScatterElements", ins, axis=int(dim), reduction=reduction)[0]


# ---- convolution, pooling, upsampling -------------------------------------------------------


def _per_dim(value, nd: int, name: str) -> list[int]:
    vals = [int(v) for v in np.atleast_1d(value)] if value is not None else []
    if len(vals) == 1:
        vals = vals * nd
    if len(vals) != nd:
        raise NotExpressible(f"{name}={vals} needs {nd} values")
    return vals


@aten("convolution.default")
def _convolution(cx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    x = cx.t(x)
    nd = x.ndim - 2
    pads = _per_dim(padding, nd, "padding")
    at = {
        "strides": _per_dim(stride, nd, "stride"),
        "pads": pads + pads,
        "dilations": _per_dim(dilation, nd, "dilation"),
        "group": int(groups),
    }
    if transposed:
        at["output_padding"] = _per_dim(output_padding, nd, "output_padding")
    return cx.onnx("ConvTranspose" if transposed else "Conv", [x, w, b], **at)[0]


def _pool_attrs(x, kernel_size, stride, padding, ceil_mode):
    nd = x.ndim - 2
    kernel = _per_dim(kernel_size, nd, "kernel_size")
    pads = _per_dim(padding, nd, "padding")
    return {
        "kernel_shape": kernel,
        "strides": _per_dim(stride, nd, "stride") if stride else kernel,
        "pads": pads + pads,
        "ceil_mode": int(bool(ceil_mode)),
    }


@aten("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def _max_pool(cx, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    x = cx.t(x)
    at = _pool_attrs(x, kernel_size, stride, padding, ceil_mode)
    at["dilations"] = _per_dim(dilation, x.ndim - 2, "dilation")
    y = cx.onnx("MaxPool", [x], **at)[0]
    return (y, Unavailable("the indices output of max pooling (argmax positions)"))


@aten("avg_pool2d.default", "avg_pool3d.default")
def _avg_pool(cx, x, kernel_size, stride=(), padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):  # fmt: skip
    x = cx.t(x)
    at = _pool_attrs(x, kernel_size, stride, padding, ceil_mode)
    at["count_include_pad"] = int(bool(count_include_pad or divisor_override))
    y = cx.onnx("AveragePool", [x], **at)[0]
    if divisor_override is None:
        return y
    if ceil_mode:
        raise NotExpressible("divisor_override with ceil_mode=True is not expressible")
    return cx.op("mul", y, math.prod(at["kernel_shape"]) / float(divisor_override))


def _adaptive(cx, x, output_size, reduce_name, pool_name):
    x = cx.t(x)
    nd = x.ndim - 2
    sizes = x.shape[2:]
    out = [s if o is None else int(o) for s, o in zip(sizes, _per_dim_opt(output_size, nd))]
    if all(o == 1 for o in out):
        return cx.op(reduce_name, x, axes=tuple(range(2, x.ndim)), keepdims=True)
    if all(s % o == 0 for s, o in zip(sizes, out)) and nd in (1, 2):
        kernel = tuple(s // o for s, o in zip(sizes, out))
        return cx.op(pool_name, x, kernel=kernel, stride=kernel, pad=(0,) * (2 * nd))
    y = x
    for i, (s, o) in enumerate(zip(sizes, out)):  # per axis: one window per output
        axis = 2 + i
        parts = []
        for j in range(o):
            lo, hi = (j * s) // o, -(-((j + 1) * s) // o)
            part = slice_axis(cx, y, axis, lo, hi)
            parts.append(cx.op(reduce_name, part, axes=(axis,), keepdims=True))
        y = parts[0] if len(parts) == 1 else cx.op("concat", *parts, axis=axis)
    return y


def _per_dim_opt(value, nd):
    vals = list(value) if isinstance(value, (list, tuple)) else [value]
    return vals * nd if len(vals) == 1 else vals


@aten("_adaptive_avg_pool2d.default", "_adaptive_avg_pool3d.default")
def _adaptive_avg(cx, x, output_size):
    return _adaptive(cx, x, output_size, "mean", "avg_pool")


@aten("adaptive_max_pool2d.default", "adaptive_max_pool3d.default")
def _adaptive_max(cx, x, output_size):
    y = _adaptive(cx, x, output_size, "amax", "max_pool")
    return (y, Unavailable("the indices output of adaptive max pooling"))


_RESIZE = {
    "upsample_nearest": {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                         "nearest_mode": "floor"},
    "_upsample_nearest_exact": {"mode": "nearest", "coordinate_transformation_mode":
                                "half_pixel", "nearest_mode": "round_prefer_ceil"},
    "upsample_bilinear": {"mode": "linear"},
    "upsample_linear": {"mode": "linear"},
    "upsample_bicubic": {"mode": "cubic", "cubic_coeff_a": -0.75},
}  # fmt: skip


def _resize(cx, x, output_size, align_corners, scales):
    x = cx.t(x)
    family = cx.key.split(".")[1].rstrip("123d")
    at = dict(_RESIZE[family])
    if at["mode"] != "nearest":
        default = "half_pixel" if at["mode"] == "cubic" else "pytorch_half_pixel"
        at["coordinate_transformation_mode"] = "align_corners" if align_corners else default
    nd = x.ndim - 2
    ins = [x, None, None, None]
    if scales is not None and all(s is not None for s in scales):
        ins[2] = Host(np.asarray([1.0, 1.0] + [float(s) for s in _per_dim_opt(scales, nd)]))
    elif output_size is not None:
        ins[3] = Host(np.asarray(list(x.shape[:2]) + _per_dim(output_size, nd, "output_size")))
    else:
        raise NotExpressible("neither output_size nor scale factors are given")
    return cx.onnx("Resize", ins, **at)[0]


@aten(*(f"{f}{d}d.vec" for f in ("upsample_nearest", "_upsample_nearest_exact") for d in "12"))
def _resize_nearest_vec(cx, x, output_size, scale_factors):
    return _resize(cx, x, output_size, False, scale_factors)


@aten(*(f"{f}.vec" for f in ("upsample_bilinear2d", "upsample_linear1d", "upsample_bicubic2d")))
def _resize_linear_vec(cx, x, output_size, align_corners, scale_factors):
    return _resize(cx, x, output_size, align_corners, scale_factors)


@aten("upsample_nearest2d.default", "_upsample_nearest_exact2d.default")
def _resize_nearest(cx, x, output_size, scales_h=None, scales_w=None):
    return _resize(cx, x, output_size, False, [scales_h, scales_w])


@aten("upsample_bilinear2d.default", "upsample_bicubic2d.default")
def _resize_linear(cx, x, output_size, align_corners, scales_h=None, scales_w=None):
    return _resize(cx, x, output_size, align_corners, [scales_h, scales_w])
