"""The shape and movement part of the ONNX op table (handlers as in :mod:`.onnx_ops`).

Reshape, Flatten, Transpose, Concat, Split, Slice (negative steps as exact gathers),
Squeeze, Unsqueeze, Expand and Tile (exact gathers), Gather / GatherElements / GatherND /
Compress with constant indices (one gather over the flattened data), OneHot, Trilu,
DepthToSpace / SpaceToDepth (pixel shuffles plus a channel permutation for DCR), Pad
(constant by concatenation, edge / reflect / wrap by gathers), CenterCropPad, Shape and
Size (host constants), the scatters with constant indices (ScatterElements, ScatterND,
TensorScatter), Range and DequantizeLinear of constants. All movement is exact.

Ranks past the graph's (:data:`~aneforge.graph.tensor.MAX_RANK`, 5): Reshape,
Unsqueeze, Squeeze, Flatten and Transpose pass a rank-6+ value on as a
:class:`HighRank` view, a rank <= 5 tensor holding the same elements in row-major order
with the logical shape beside it (Swin's window partition ``view(B, H/w, w, W/w, w, C)
.permute(0, 1, 3, 2, 4, 5)`` and its reverse). A Transpose of a view drops its size-1
axes and merges the axes that stay adjacent and in order through the permutation
(:func:`merge_axes`): when at most 5 groups remain, the same movement is a
reshape/transpose/reshape at that rank (rank 4 for Swin); else the Transpose is refused
naming the Reshape the view came from and the merged rank. Any other op given a view
is refused (a view reaching a graph output too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph.tensor import MAX_RANK, Tensor
from ..limits import check_elements
from .onnx_errors import NotExpressible
from .onnx_graph import node_label
from .onnx_ops import (
    broadcast_to,
    full_like,
    handles,
    norm_axis,
    pad_constant,
    reshape,
    slice_axis,
    take,
)
from .onnx_values import Host, host_eval

# ---- shape and movement -----------------------------------------------------------------


@handles("Shape")
def _shape(cx, node, ins, at):
    dims = list(cx.t(ins[0]).shape)
    start, end = at.get("start", 0), at.get("end", None)
    return [Host(np.array(dims[slice(start, end)], dtype=np.int64), label=node.output[0])]


@handles("Size")
def _size(cx, node, ins, at):
    return [Host(np.array(cx.t(ins[0]).size, dtype=np.int64), label=node.output[0])]


@handles("EyeLike")
def _eyelike(cx, node, ins, at):
    n, m = cx.t(ins[0]).shape
    return [Host(np.eye(n, m, k=at.get("k", 0)), label=node.output[0])]


# ---- rank past MAX_RANK: views, merged transposes ------------------------------------


@dataclass(eq=False)
class HighRank:
    """A value of rank > MAX_RANK: ``data`` (a graph tensor of rank <= MAX_RANK) holds
    its elements in row-major order; ``shape`` is its logical shape; ``origin`` names
    the node that made it (for errors)."""

    data: Tensor
    shape: tuple
    origin: str

    def not_a_tensor(self) -> str:
        """Why an op other than Reshape/Transpose/Squeeze/Unsqueeze/Flatten cannot take
        this value (the importer's message when one is given it)."""
        return (
            f"the value is the rank-{len(self.shape)} tensor {self.shape} from {self.origin}; "
            f"aneforge tensors have rank <= {MAX_RANK}, so a rank-{len(self.shape)} value may "
            f"only be reshaped, squeezed, unsqueezed, flattened or transposed (back to rank "
            f"<= {MAX_RANK})"
        )


def merge_axes(shape, perm) -> tuple[tuple, tuple]:
    """``(sizes, perm)`` of the smallest-rank transpose that moves data as
    ``transpose(x.reshape(shape), perm)`` does: size-1 axes dropped, and axes that follow
    each other both in ``shape`` and in ``perm`` merged into one.

    Example (Swin's window partition, rank 6 -> rank 4):
        >>> merge_axes((2, 2, 7, 2, 7, 96), (0, 1, 3, 2, 4, 5))
        ((4, 7, 2, 672), (0, 2, 1, 3))
        >>> merge_axes((2, 1, 3), (2, 1, 0))
        ((2, 3), (1, 0))
    """
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    where = {a: i for i, a in enumerate(kept)}
    order = [where[a] for a in perm if a in where]
    groups: list[list[int]] = []
    for a in order:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    sizes = tuple(math.prod(shape[kept[a]] for a in groups[g]) for g in by_input)
    rank_of = {g: i for i, g in enumerate(by_input)}
    return sizes, tuple(rank_of[g] for g in range(len(groups)))


def _as_shape(cx, node, data, shape):
    """``data`` (any rank <= MAX_RANK, row-major) as logical ``shape``: a tensor, or a
    :class:`HighRank` view when ``shape`` is past MAX_RANK."""
    shape = tuple(int(d) for d in shape)
    if len(shape) <= MAX_RANK:
        return reshape(cx, data, shape)
    return HighRank(data, shape, f"{node.op_type} '{node_label(node)}'")


def _data_and_shape(cx, value):
    """``(row-major data tensor, logical shape)`` of a tensor or view."""
    if isinstance(value, HighRank):
        return value.data, value.shape
    x = cx.t(value)
    return x, x.shape


def _high_transpose(cx, node, view: HighRank, perm):
    shape = view.shape
    if sorted(perm) != list(range(len(shape))):
        raise NotExpressible(f"perm {list(perm)} is not a permutation of rank {len(shape)}")
    sizes, merged = merge_axes(shape, perm)
    out_shape = tuple(shape[a] for a in perm)
    if len(sizes) > MAX_RANK:
        raise NotExpressible(
            f"perm {list(perm)} of the rank-{len(shape)} tensor {shape} from {view.origin} "
            f"merges only to rank {len(sizes)} (sizes {sizes}, perm {merged}): its axes do "
            f"not stay adjacent through the permutation, and aneforge tensors have rank <= "
            f"{MAX_RANK}, so no rank-{MAX_RANK} reshape/transpose/reshape moves the data the "
            "same way"
        )
    x = reshape(cx, view.data, sizes)
    if merged != tuple(range(len(merged))):
        x = cx.op("transpose", x, perm=merged)
    return _as_shape(cx, node, x, out_shape)


@handles("Reshape")
def _reshape(cx, node, ins, at):
    x, shape = _data_and_shape(cx, ins[0])
    want = cx.ints(ins[1], "shape")
    out = []
    for i, d in enumerate(want):
        if d == 0 and not at.get("allowzero", 0):
            if i >= len(shape):
                raise NotExpressible(f"shape {want} copies axis {i} of a rank-{len(shape)} input")
            d = shape[i]
        out.append(d)
    if 0 in out:
        raise NotExpressible(f"shape {want} is empty (allowzero=1)")
    return [_as_shape(cx, node, x, _infer_minus_one(out, math.prod(shape)))]


def _infer_minus_one(shape, size):
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        shape = [size // known if d == -1 else d for d in shape]
    return shape


@handles("Flatten")
def _flatten(cx, node, ins, at):
    x, shape = _data_and_shape(cx, ins[0])
    rank = len(shape)
    axis = at.get("axis", 1)
    if not -rank <= axis <= rank:
        raise NotExpressible(f"axis={axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    lead = int(np.prod(shape[:axis], dtype=np.int64))
    return [reshape(cx, x, (lead, math.prod(shape) // lead))]


@handles("Transpose")
def _transpose(cx, node, ins, at):
    if isinstance(ins[0], HighRank):
        view = ins[0]
        perm = tuple(at.get("perm", range(len(view.shape) - 1, -1, -1)))
        return [_high_transpose(cx, node, view, perm)]
    x = cx.t(ins[0])
    perm = tuple(at.get("perm", range(x.ndim - 1, -1, -1)))
    if perm == tuple(range(x.ndim)):
        return [x]
    return [cx.op("transpose", x, perm=perm)]


@handles("Concat")
def _concat(cx, node, ins, at):
    vals = [v for v in ins if v is not None]
    vals = [v for v in vals if not (isinstance(v, Host) and v.value.size == 0)]
    if not vals:
        raise NotExpressible("every input is empty")
    tensors = [cx.t(v) for v in vals]
    axis = norm_axis(at["axis"], tensors[0].ndim)
    return [tensors[0] if len(tensors) == 1 else cx.op("concat", *tensors, axis=axis)]


@handles("Split")
def _split(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    d, n = x.shape[axis], len(node.output)
    if len(ins) > 1 and ins[1] is not None:
        sizes = cx.ints(ins[1], "split")
    elif "split" in at:
        sizes = list(at["split"])
    elif "num_outputs" in at:
        chunk = -(-d // at["num_outputs"])
        sizes = [min(chunk, d - i * chunk) for i in range(at["num_outputs"])]
    else:
        if d % n:
            raise NotExpressible(f"axis {axis} of size {d} does not split into {n} outputs")
        sizes = [d // n] * n
    if sum(sizes) != d or any(s < 0 for s in sizes):
        raise NotExpressible(f"split sizes {sizes} do not partition axis {axis} of size {d}")
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_axis(cx, x, axis, start, start + s) if s else empty(x, axis))
        start += s
    return outs


def empty(x, axis):
    """An empty result (size 0 along ``axis``): a host constant that Concat skips."""
    shape = list(x.shape)
    shape[axis] = 0
    return Host(np.zeros(shape, dtype=np.float32), label="empty")


@handles("Slice")
def _slice(cx, node, ins, at):
    x = cx.t(ins[0])
    starts, ends = cx.ints(ins[1], "starts"), cx.ints(ins[2], "ends")
    axes = cx.ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
    steps = cx.ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    y = x
    for axis, b, e, s in zip(axes, starts, ends, steps):
        axis = norm_axis(axis, x.ndim, "axes")
        if s == 0:
            raise NotExpressible("a step of 0 is not allowed")
        idx = list(range(*slice(b, e, s).indices(x.shape[axis])))
        if not idx:
            return [empty(y, axis)]
        y = take(cx, y, idx, axis)
    return [y]


@handles("Squeeze")
def _squeeze(cx, node, ins, at):
    x, shape = _data_and_shape(cx, ins[0])
    if len(ins) > 1 and ins[1] is not None:
        axes = cx.ints(ins[1], "axes")
    else:
        axes = at.get("axes")
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = tuple(norm_axis(a, len(shape), "axes") for a in axes)
    return [_as_shape(cx, node, x, [d for i, d in enumerate(shape) if i not in axes])]


@handles("Unsqueeze")
def _unsqueeze(cx, node, ins, at):
    x, shape = _data_and_shape(cx, ins[0])
    axes = cx.ints(ins[1], "axes") if len(ins) > 1 else list(at["axes"])
    rank = len(shape) + len(axes)
    axes = sorted(norm_axis(a, rank, "axes") for a in axes)
    out, it = [], iter(shape)
    for i in range(rank):
        out.append(1 if i in axes else next(it))
    return [_as_shape(cx, node, x, out)]


@handles("Expand")
def _expand(cx, node, ins, at):
    x = cx.t(ins[0])
    want = cx.ints(ins[1], "shape")
    try:
        shape = np.broadcast_shapes(x.shape, tuple(want))
    except ValueError:
        raise NotExpressible(f"shape {want} does not broadcast with {x.shape}") from None
    return [broadcast_to(cx, x, shape)]


@handles("Tile")
def _tile(cx, node, ins, at):
    x = cx.t(ins[0])
    reps = cx.ints(ins[1], "repeats")
    if len(reps) != x.ndim:
        raise NotExpressible(f"repeats {reps} needs one value per axis of {x.shape}")
    for axis, r in enumerate(reps):
        if r < 1:
            raise NotExpressible(f"repeats {reps} would empty axis {axis}")
        if r > 1:
            x = cx.op("gather", x, indices=tuple(np.tile(np.arange(x.shape[axis]), r)), axis=axis)
    return [x]


def _flat_gather(cx, x, flat_index, out_shape):
    """``x.reshape(-1)[flat_index].reshape(out_shape)`` by one gather."""
    flat = reshape(cx, x, (x.size,))
    y = take(cx, flat, np.asarray(flat_index).reshape(-1), 0)
    return reshape(cx, y, out_shape)


@handles("Gather")
def _gather(cx, node, ins, at):
    x = cx.t(ins[0])
    axis = norm_axis(at.get("axis", 0), x.ndim)
    idx = cx.arr(ins[1], "indices").astype(np.int64)
    d = x.shape[axis]
    if ((idx < -d) | (idx >= d)).any():
        raise NotExpressible(f"indices out of range for axis {axis} of size {d}")
    idx = np.where(idx < 0, idx + d, idx)
    y = take(cx, x, idx.reshape(-1), axis)
    return [reshape(cx, y, x.shape[:axis] + idx.shape + x.shape[axis + 1 :])]


@handles("GatherElements")
def _gather_elements(cx, node, ins, at):
    x = cx.t(ins[0])
    idx = cx.arr(ins[1], "indices").astype(np.int64)
    axis = norm_axis(at.get("axis", 0), x.ndim)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    grid = list(np.indices(idx.shape))
    grid[axis] = idx
    return [_flat_gather(cx, x, np.ravel_multi_index(tuple(grid), x.shape), idx.shape)]


@handles("GatherND")
def _gather_nd(cx, node, ins, at):
    x = cx.t(ins[0])
    idx = cx.arr(ins[1], "indices").astype(np.int64)
    b, k = at.get("batch_dims", 0), idx.shape[-1]
    lead = x.shape[: b + k]
    rest = x.shape[b + k :]
    idx = np.where(idx < 0, idx + np.array(x.shape[b : b + k]), idx)
    batch = np.indices(idx.shape[:b]).reshape(b, -1).T if b else np.zeros((1, 0), np.int64)
    per_batch = idx.reshape(int(np.prod(idx.shape[:b], dtype=np.int64)), -1, k)
    rows = [
        np.ravel_multi_index(tuple(np.concatenate([np.tile(bi, (len(r), 1)), r], 1).T), lead)
        for bi, r in zip(batch, per_batch)
    ]
    x2 = reshape(cx, x, (int(np.prod(lead, dtype=np.int64)), int(np.prod(rest, dtype=np.int64))))
    y = take(cx, x2, np.concatenate(rows), 0)
    return [reshape(cx, y, idx.shape[:-1] + rest)]


@handles("Compress")
def _compress(cx, node, ins, at):
    x = cx.t(ins[0])
    keep = np.nonzero(cx.arr(ins[1], "condition").reshape(-1))[0]
    if "axis" not in at:
        return [_flat_gather(cx, x, keep, (len(keep),))]
    axis = norm_axis(at["axis"], x.ndim)
    return [take(cx, x, keep[keep < x.shape[axis]], axis)]


@handles("OneHot")
def _onehot(cx, node, ins, at):
    idx = cx.arr(ins[0], "indices").astype(np.int64)
    depth = int(cx.arr(ins[1], "depth").reshape(-1)[0])
    values = cx.t(ins[2])
    idx = np.where(idx < 0, idx + depth, idx)
    axis = norm_axis(at.get("axis", -1), idx.ndim + 1)
    hot = np.moveaxis(idx[..., None] == np.arange(depth), -1, axis)
    off, on = slice_axis(cx, values, 0, 0, 1), slice_axis(cx, values, 0, 1, 2)
    return [cx.op("select", cx.t(Host(hot, label="one-hot mask")), on, off)]


@handles("Trilu")
def _trilu(cx, node, ins, at):
    x = cx.t(ins[0])
    k = int(cx.arr(ins[1], "k").reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else 0
    ones = np.ones(x.shape[-2:], dtype=bool)
    mask = np.triu(ones, k) if at.get("upper", 1) else np.tril(ones, k)
    return [cx.op("select", cx.t(Host(mask, label="trilu mask")), x, 0.0)]


@handles("DepthToSpace")
def _depth_to_space(cx, node, ins, at):
    x = cx.t(ins[0])
    b = at["blocksize"]
    if x.ndim != 4 or x.shape[1] % (b * b):
        raise NotExpressible(f"input {x.shape} is not NCHW with channels divisible by {b * b}")
    if at.get("mode", "DCR") == "DCR":  # channel (i*b + j)*C' + c -> CRD's c*b*b + i*b + j
        c = x.shape[1] // (b * b)
        perm = [(r * c) + ch for ch in range(c) for r in range(b * b)]
        x = take(cx, x, perm, 1)
    return [cx.op("pixel_shuffle", x, factor=b)]


@handles("SpaceToDepth")
def _space_to_depth(cx, node, ins, at):
    x = cx.t(ins[0])
    b = at["blocksize"]
    if x.ndim != 4 or x.shape[2] % b or x.shape[3] % b:
        raise NotExpressible(f"input {x.shape} is not NCHW with H, W divisible by {b}")
    y = cx.op("pixel_unshuffle", x, factor=b)  # channel c*b*b + r: the CRD order
    if at.get("mode", "DCR") == "CRD":
        return [y]
    c = x.shape[1]  # DCR wants r*C + c
    perm = [ch * b * b + r for r in range(b * b) for ch in range(c)]
    return [take(cx, y, perm, 1)]


@handles("Pad")
def _pad(cx, node, ins, at):
    x = cx.t(ins[0])
    amounts = cx.ints(ins[1], "pads")
    axes = list(range(x.ndim))
    if len(ins) > 3 and ins[3] is not None:
        axes = [norm_axis(a, x.ndim, "axes") for a in cx.ints(ins[3], "axes")]
    if len(amounts) != 2 * len(axes):
        raise NotExpressible(f"pads {amounts} do not give 2 values per axis")
    pads = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        pads[a] = (amounts[i], amounts[i + len(axes)])
    mode = at.get("mode", "constant")
    if mode == "constant":
        value = 0.0
        if len(ins) > 2 and ins[2] is not None:
            value = float(cx.arr(ins[2], "constant_value").reshape(-1)[0])
        return [pad_constant(cx, x, pads, value)]
    for axis, (before, after) in enumerate(pads):
        if before or after:
            x = take(cx, x, _pad_indices(mode, x.shape[axis], before, after, axis), axis)
    return [x]


def _pad_indices(mode, d, before, after, axis):
    pos = np.arange(-before, d + after)
    if mode == "edge":
        return np.clip(pos, 0, d - 1)
    if mode == "wrap":
        return pos % d
    if mode == "reflect":
        if d == 1:
            return np.zeros_like(pos)
        period = 2 * (d - 1)
        r = pos % period
        return np.where(r >= d, period - r, r)
    raise NotExpressible(f"mode={mode!r} is not expressible")


@handles("CenterCropPad")
def _center_crop_pad(cx, node, ins, at):
    x = cx.t(ins[0])
    want = cx.ints(ins[1], "shape")
    axes = [norm_axis(a, x.ndim, "axes") for a in at.get("axes", range(x.ndim))]
    pads = [(0, 0)] * x.ndim
    for a, w in zip(axes, want):
        diff = w - x.shape[a]
        if diff > 0:  # pad, the odd pixel on the right
            pads[a] = (diff // 2, diff - diff // 2)
        elif diff < 0:  # crop, the window start rounded down
            start = -diff // 2
            pads[a] = (-start, -(-diff - start))
    return [pad_constant(cx, x, pads, 0.0)]


# ---- constants that need a graph input: Range, DequantizeLinear ---------------------------


@handles("Range")
def _range(cx, node, ins, at):
    names = ("start", "limit", "delta")
    start, limit, delta = (np.asarray(cx.arr(v, w)) for v, w in zip(ins, names))
    for name, v in zip(names, (start, limit, delta)):
        if v.size != 1 or v.dtype.kind not in "iuf" or not np.isfinite(v).all():
            raise NotExpressible(f"{name}={v.tolist()} must be one finite number")
    start, limit, delta = (v.reshape(()) for v in (start, limit, delta))
    if float(delta) == 0:
        raise NotExpressible("delta=0 never reaches the limit")
    count = max(int(math.ceil((float(limit) - float(start)) / float(delta))), 0)
    check_elements(count, f"from_onnx: Range '{node_label(node)}' output")
    values = start + np.arange(count, dtype=start.dtype) * delta
    return [Host(values.astype(start.dtype), label=node.output[0])]


@handles("DequantizeLinear")
def _dequantize(cx, node, ins, at):
    x = cx.arr(ins[0], "x").astype(np.float64)
    scale = cx.t(ins[1])
    block = at.get("block_size", 0)
    per_axis = scale.size > 1 or block
    axis = norm_axis(at.get("axis", 1), x.ndim) if per_axis else 0
    if len(ins) > 2 and ins[2] is not None:
        zp = cx.arr(ins[2], "x_zero_point").astype(np.float64)
        x = x - _per_axis_host(zp, x, axis, block)
    if scale.size > 1 and scale.ndim < x.ndim or block:
        index = np.arange(x.shape[axis]) // (block or 1)
        scale = take(cx, scale, index, scale.ndim - 1 if scale.ndim == 1 else axis)
        if scale.ndim == 1:
            scale = reshape(cx, scale, [-1 if i == axis else 1 for i in range(x.ndim)])
    return [cx.op("mul", cx.t(Host(x, label=node.input[0])), scale)]


def _per_axis_host(v, x, axis, block):
    """A per-axis (1-D) or blocked parameter broadcast against ``x``."""
    if v.size == 1:
        return v.reshape(())
    if block:
        return np.repeat(v, block, axis=axis)[tuple(slice(0, d) for d in x.shape)]
    return v.reshape([-1 if i == axis else 1 for i in range(x.ndim)])


# ---- scatters with constant indices ---------------------------------------------------------

_IDENTITY = {
    "add": ("add", 0.0),
    "mul": ("mul", 1.0),
    "max": ("maximum", -np.inf),
    "min": ("minimum", np.inf),
}


def scatter_flat(cx, data, updates, positions, reduction):
    """``data`` with ``updates`` (C order) written at flat ``positions``: exact gathers
    for ``reduction='none'`` (the last write wins), else one elementwise op per layer of
    repeated positions (an identity element where a position has no more writes)."""
    data, updates = cx.t(data), cx.t(updates)
    n = data.size
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    flat = reshape(cx, data, (n,))
    ups = reshape(cx, updates, (updates.size,))
    if reduction == "none":
        source = np.arange(n)
        source[positions] = n + np.arange(len(positions))
        y = take(cx, cx.op("concat", flat, ups, axis=0), source, 0)
        return reshape(cx, y, data.shape)
    if reduction not in _IDENTITY:
        raise NotExpressible(f"reduction={reduction!r} is not expressible")
    name, unit = _IDENTITY[reduction]
    ext = cx.op("concat", ups, full_like(cx, (1,), unit, "scatter identity"), axis=0)
    seen = np.zeros(n, dtype=np.int64)
    layers = []
    for slot, p in enumerate(positions):
        if seen[p] == len(layers):
            layers.append(np.full(n, len(positions), dtype=np.int64))
        layers[seen[p]][p] = slot
        seen[p] += 1
    y = flat
    for layer in layers:
        y = cx.op(name, y, take(cx, ext, layer, 0))
    return reshape(cx, y, data.shape)


@handles("ScatterElements")
def _scatter_elements(cx, node, ins, at):
    data = cx.t(ins[0])
    idx = cx.arr(ins[1], "indices").astype(np.int64)
    axis = norm_axis(at.get("axis", 0), data.ndim)
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    grid = list(np.indices(idx.shape))
    grid[axis] = idx
    positions = np.ravel_multi_index(tuple(grid), data.shape)
    return [scatter_flat(cx, data, ins[2], positions, at.get("reduction", "none"))]


@handles("ScatterND")
def _scatter_nd(cx, node, ins, at):
    data = cx.t(ins[0])
    idx = cx.arr(ins[1], "indices").astype(np.int64)
    k = idx.shape[-1]
    rows = idx.reshape(-1, k)
    rows = np.where(rows < 0, rows + np.array(data.shape[:k]), rows)
    inner = int(np.prod(data.shape[k:], dtype=np.int64))
    starts = np.ravel_multi_index(tuple(rows.T), data.shape[:k]) * inner
    positions = (starts[:, None] + np.arange(inner)[None, :]).reshape(-1)
    return [scatter_flat(cx, data, ins[2], positions, at.get("reduction", "none"))]


@handles("TensorScatter")
def _tensor_scatter(cx, node, ins, at):
    cache, update = cx.t(ins[0]), cx.t(ins[1])
    axis = norm_axis(at.get("axis", -2), cache.ndim)
    batch = cache.shape[0]
    if len(ins) > 2 and ins[2] is not None:
        starts = cx.arr(ins[2], "write_indices").astype(np.int64).reshape(-1)
    else:
        starts = np.zeros(batch, dtype=np.int64)
    grid = list(np.indices(update.shape))
    pos = grid[axis] + starts[grid[0]]
    if at.get("mode", "linear") == "circular":
        pos = pos % cache.shape[axis]
    elif (pos >= cache.shape[axis]).any():
        raise NotExpressible("write_indices run past the cache (mode='linear')")
    grid[axis] = pos
    positions = np.ravel_multi_index(tuple(grid), cache.shape)
    return [scatter_flat(cx, cache, update, positions, "none")]


# ---- movement through an index map; constants from parameters ----------------------------


@handles("ReverseSequence")
def _reverse_sequence(cx, node, ins, at):
    # Pure movement: run the op on the elements' own indices, then gather by the result.
    x = cx.t(ins[0])
    iota = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    index = host_eval(node, [iota, cx.arr(ins[1], "sequence_lens")], cx.opset)[0]
    return [_flat_gather(cx, x, index, x.shape)]


@handles("MelWeightMatrix")
def _parameters_only(cx, node, ins, at):
    """An op of parameters only: evaluated at import once they are constants."""
    arrays = [None if v is None else cx.arr(v, n) for v, n in zip(ins, node.input)]
    values = host_eval(node, arrays, cx.opset)
    return [Host(v, label=n) for v, n in zip(values, node.output)]


@handles("Col2Im")
def _col2im(cx, node, ins, at):
    x = cx.t(ins[0])  # [N, C * prod(block), L]
    image, block = cx.ints(ins[1], "image_shape"), cx.ints(ins[2], "block_shape")
    nd = len(image)
    dils = np.array(at.get("dilations", [1] * nd))
    strides = np.array(at.get("strides", [1] * nd))
    pads = list(at.get("pads", [0] * 2 * nd))
    counts = [
        (image[i] + pads[i] + pads[i + nd] - dils[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(nd)
    ]
    n, ck, length = x.shape
    kprod = int(np.prod(block))
    if ck % kprod or int(np.prod(counts)) != length:
        raise NotExpressible(f"input {x.shape} does not match blocks {block} over {image}")
    k_idx = np.indices(block).reshape(nd, -1)[:, :, None]
    l_idx = np.indices(counts).reshape(nd, -1)[:, None, :]
    pos = l_idx * strides[:, None, None] + k_idx * dils[:, None, None]
    pos = pos - np.array(pads[:nd])[:, None, None]  # (nd, kprod, L) image coordinates
    dims = np.array(image)[:, None, None]
    inside = ((pos >= 0) & (pos < dims)).all(axis=0)
    flat = np.ravel_multi_index(tuple(np.clip(pos, 0, dims - 1)), image)
    size = int(np.prod(image))
    planes = n * (ck // kprod)
    base = (np.arange(planes) * size)[:, None, None]
    positions = np.where(inside[None], base + flat[None], planes * size)  # last: a dummy
    zeros = full_like(cx, (planes * size + 1,), 0.0, "col2im image")
    y = scatter_flat(cx, zeros, x, positions.reshape(-1), "add")
    y = slice_axis(cx, y, 0, 0, planes * size)
    return [reshape(cx, y, (n, ck // kprod, *image))]
