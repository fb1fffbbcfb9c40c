"""The attention bridge op: sdpa (scaled dot-product attention)."""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ...registry import bool_attr, float_attr
from ...tensor import Tensor, make
from ._common import bridge_op, need_rank


def _sdpa_shape(in_shapes, attrs):
    want = 4 if attrs["has_mask"] else 3
    if len(in_shapes) != want:
        raise ShapeError(
            f"sdpa: expected {want} inputs (q, k, v{', mask' if want == 4 else ''}), "
            f"got {len(in_shapes)}"
        )
    q, k, v = in_shapes[:3]
    for label, s in (("q", q), ("k", k), ("v", v)):
        need_rank("sdpa", s, (3, 4), f"[..., seq, features] ({label})")
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


_SDPA = bridge_op(
    "sdpa",
    None,
    {"scale": float_attr(None, "scale"), "has_mask": bool_attr(False, "has_mask")},
    _sdpa_shape,
    _sdpa_body,
    "scaled dot-product attention softmax((q @ k^T) * scale [+ mask]) @ v",
    flops=_sdpa_flops,
    flags=("route",),
)


#: sdpa's native numeric reliability envelope (spec 004, "sdpa"): the native fused
#: attention is reliable (~3e-3) to 2048 positions, garbage (~1.0) at 4096 and once both
#: the query and the key axis exceed 512.
NATIVE_MAX_POSITIONS = 2048
NATIVE_MAX_BOTH_AXES = 512


def sdpa(q, k, v, scale=None, mask=None, *, name=None) -> Tensor:
    """Scaled dot-product attention ``softmax((q @ k^T) * scale [+ mask], -1) @ v``.

    Inputs: ``q`` [..., S, D], ``k`` [..., T, D], ``v`` [..., T, Dv], all rank 3 or 4
    with equal batch dims; ``mask`` (optional) is an additive tensor or array that
    broadcasts to the scores [..., S, T] (use ``-inf`` or a large negative to hide).
    Attributes: ``scale`` (default ``D**-0.5``). Output: [..., S, Dv].

    Native reliability envelope (spec 004): the engine's native fused attention is
    reliable (~3e-3) only while ``max(S, T) <= 2048`` and not both ``S`` and ``T``
    exceed 512; at S = 4096, or with both axes above 512, it returns garbage (~1.0).
    Outside that envelope this function therefore emits the decomposed form instead of
    the native ``sdpa`` bridge node: ``bmm(q, k^T)``, ``* scale``, ``+ mask``,
    ``softmax(-1)``, ``bmm(., v)`` (the wide matmul accumulator holds it to ~5e-3). On
    the emulator the two forms give the same bits. ``name`` labels the node returned
    (the final ``bmm`` of the decomposed form).

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
        >>> sdpa(af.input((1, 600, 8)), af.input((1, 600, 8)), af.input((1, 600, 8))).op
        'bmm'
    """
    srcs = (q, k, v) if mask is None else (q, k, v, mask)
    node = make("sdpa", *srcs, scale=scale, has_mask=mask is not None, name=name)
    q, k, v = node.srcs[:3]
    s_len, t_len = q.shape[-2], k.shape[-2]
    if max(s_len, t_len) <= NATIVE_MAX_POSITIONS and min(s_len, t_len) <= NATIVE_MAX_BOTH_AXES:
        return node
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    perm = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    scores = make("mul", make("bmm", q, make("transpose", k, perm=perm)), float(scale))
    if mask is not None:
        scores = make("add", scores, node.srcs[3])
    return make("bmm", make("softmax", scores, axis=-1), v, name=name)


OPS = (_SDPA,)
