"""The attention bridge op: sdpa (scaled dot-product attention).

Range rule: the scores ``q @ k^T`` are bounded like any contraction (through the
target's output stage), then scaled and masked as recorded steps; the softmax weights
``p`` lie in [0, 1] and sum to at most ``(1 + u) / (1 - u)**(T-1)`` (the narrow sum of
the exponentials can only lose that much), so the output, ``mm(p, v)``, is bounded by
that sum times ``v``'s range, far tighter than ``T * max|v|``.

Example:
    >>> import aneforge as af
    >>> q, k = af.input((1, 4, 8), range=(-3, 3)), af.input((1, 6, 8), range=(-3, 3))
    >>> v = af.input((1, 6, 2), range=(-1, 2))
    >>> rep = af.range_analysis(sdpa(q, k, v, name="att"))
    >>> str(rep["att"].interval), [label for label, _ in rep["att"].steps]
    ('[-1.004, 2.008]', ['q@k*scale', 'sum(exp)'])
"""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ...facts import (
    LOGITS_OVERFLOW_FIX,
    SOFTMAX_FIX,
    Decomposition,
    NarrowSum,
    TermSign,
    Work,
    signed,
)
from ...fp16 import narrow_sum, round_fp16
from ...ranges import ETA16, INF, U16, Interval, softmax_sum_bounds, weight_value
from ...registry import bool_attr, float_attr
from ...rewrite import BIT_IDENTICAL
from ...tensor import Tensor, make
from ..contraction_bounds import (
    add_bounds,
    contraction_interval,
    interval_sum_bounds,
    product_bounds,
    slack_rate,
    weighted_sum_bounds,
)
from ._common import bridge_op, need_rank, scalar_weight


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


def _scores_range(node, srcs, env) -> Interval:
    """``mm(q, k^T)`` through the output stage, then ``* fp16(scale)`` (a step)."""
    q, k = node.srcs[:2]
    qw, kw = weight_value(q), weight_value(k)
    if kw is not None:
        lo, hi, nan = weighted_sum_bounds(np.swapaxes(kw, -1, -2), srcs[0])
    elif qw is not None:
        lo, hi, nan = weighted_sum_bounds(np.swapaxes(qw, -1, -2), srcs[1])
    else:
        lo, hi, nan = interval_sum_bounds(srcs[0], srcs[1], q.shape[-1])
    s = contraction_interval(env, lo, hi, nan)
    scale = node.attrs["scale"]
    c = float(round_fp16(scale if scale is not None else q.shape[-1] ** -0.5))
    plo, phi, pnan = product_bounds(s.lo, s.hi, c, c)
    return env.step("q@k*scale", Interval(float(plo), float(phi), s.nan or bool(pnan)))


def _sdpa_range(node, srcs, env):
    """The scores' steps, then the softmax weights' sum bound times ``v``'s range."""
    q, k, v = node.srcs[:3]
    t = k.shape[-2]
    s = _scores_range(node, srcs, env)
    # NaN leaves the softmax where a score is +inf (inf - inf) or a whole row is -inf
    row_ok = s.lo > -INF
    if node.attrs["has_mask"]:
        mw = weight_value(node.srcs[3])
        scores_shape = q.shape[:-1] + (t,)
        if mw is not None:
            m = np.broadcast_to(mw, scores_shape)
            lo, hi, anan = add_bounds(s.lo, s.hi, m, m)
            row_ok = bool(np.all(np.any(lo > -INF, axis=-1)))
        else:
            im = srcs[3]
            lo, hi, anan = add_bounds(s.lo, s.hi, im.lo, im.hi)
            row_ok = bool(lo > -INF)
            anan = anan | im.nan
        s = env.step(
            "q@k*scale+mask",
            Interval(float(np.min(lo)), float(np.max(hi)), s.nan or bool(np.any(anan))),
        )
    nan = s.nan or s.hi == INF or not row_ok
    top = float(narrow_sum(np.ones(t, np.float16), 0, route=env.route))  # every e <= 1
    env.step("sum(exp)", Interval(1.0, top, nan))
    s_lo, s_hi = softmax_sum_bounds(t)
    vw = weight_value(v)
    if vw is not None:
        vlo, vhi = np.fmin.reduce(vw, axis=-2), np.fmax.reduce(vw, axis=-2)
        vlo, vhi = (
            np.nan_to_num(vlo, nan=0.0, posinf=INF, neginf=-INF),
            np.nan_to_num(vhi, nan=0.0, posinf=INF, neginf=-INF),
        )
        vnan = bool(np.isnan(vw).any())
    else:
        vlo, vhi, vnan = srcs[2].lo, srcs[2].hi, srcs[2].nan
    lo, hi = _weighted_mean_bounds(vlo, vhi, s_lo, s_hi, t)
    nan = nan or vnan or (t > 1 and bool(np.any(np.isinf(vlo) | np.isinf(vhi))))
    return contraction_interval(env, lo, hi, nan)


def _weighted_mean_bounds(vlo, vhi, s_lo, s_hi, t):
    """Float64 bounds of ``mm(p, v)`` before its rounding: ``sum_t fp16(p_t * v_t)`` in
    a float32 sum with ``p_t`` in [0, 1], ``sum p_t`` in [s_lo, s_hi], ``v_t`` in
    [vlo, vhi]. Each product rounds by at most ``u |p v| + 2**-25``; the float32 sum
    adds at most ``gamma_{t-1}`` of the sum of the |products|."""
    vlo, vhi = np.asarray(vlo, dtype=np.float64), np.asarray(vhi, dtype=np.float64)
    a, b = np.clip(vlo, -65504.0, 65504.0), np.clip(vhi, -65504.0, 65504.0)
    mag = np.maximum(np.abs(a), np.abs(b))
    rate = slack_rate(t)
    if rate == INF:  # over 2**23 positions: no float32 bound worth the name
        return np.full(mag.shape, -INF), np.full(mag.shape, INF)
    slack = rate * ((1 + U16) * mag * s_hi + t * ETA16)
    hi = np.maximum(b * s_lo, b * s_hi) + U16 * np.abs(b) * s_hi + t * ETA16 + slack
    lo = np.minimum(a * s_lo, a * s_hi) - U16 * np.abs(a) * s_hi - t * ETA16 - slack
    return np.where(vlo == -INF, -INF, lo), np.where(vhi == INF, INF, hi)


def _sdpa_flops(in_shapes, out_shape, attrs):
    q, k, v = in_shapes[:3]
    batch = int(np.prod(q[:-2], dtype=np.int64))
    s_len, d, t_len, dv = q[-2], q[-1], k[-2], v[-1]
    return batch * (2 * s_len * t_len * d + 2 * s_len * t_len * dv)


def _sdpa_terms(in_shapes, attrs) -> int:
    """The softmax sum runs over the key positions."""
    return int(in_shapes[1][-2])


def _sdpa_work(in_shapes, out_shape, attrs) -> float:
    """Attention MACs ``heads * S * T * D``."""
    q, k = in_shapes[0], in_shapes[1]
    heads = float(np.prod(q[:-2])) if len(q) > 2 else 1.0
    return heads * q[-2] * k[-2] * q[-1]


def _sdpa_key_work(f, elems):
    return f["H"] * f["S"] ** 2 * f["D"]


def _decompose_sdpa(node: Tensor) -> Tensor:
    """``((q @ k^T) * scale [+ mask]).softmax(-1) @ v`` from fused ops."""
    q, k, v = node.srcs[:3]
    scale = node.attrs["scale"]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    perm = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    s = make("bmm", q, make("transpose", k, perm=perm)) * scalar_weight(scale)
    if node.attrs["has_mask"]:
        s = s + node.srcs[3]
    return make("bmm", make("softmax", s, axis=-1), v)


_SDPA = bridge_op(
    "sdpa",
    None,
    {
        "scale": float_attr(None, "scale", underflow="every score is 0: uniform attention"),
        "has_mask": bool_attr(False, "has_mask"),
    },
    _sdpa_shape,
    _sdpa_body,
    "scaled dot-product attention softmax((q @ k^T) * scale [+ mask]) @ v",
    flops=_sdpa_flops,
    sign=signed,
    range=_sdpa_range,
    arities=(3, 4),
    narrow=NarrowSum(_sdpa_terms, TermSign.SAME, SOFTMAX_FIX),  # softmax's sum of exp
    work=Work(_sdpa_work, _sdpa_key_work),
    overflow_fix=LOGITS_OVERFLOW_FIX,
    route=Decomposition(
        _decompose_sdpa,
        "((q @ k^T) * scale [+ mask]).softmax(-1) @ v",
        BIT_IDENTICAL,
        "emulator: same fp16 steps (q@k^T wide, scale, softmax, @v)",
    ),
)


#: sdpa's native numeric reliability envelope (docs/numerics.md, section 9.4): the native fused
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

    Native reliability envelope (docs/numerics.md, section 9.4): the engine's native fused
    attention is
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
