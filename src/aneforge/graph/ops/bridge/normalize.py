"""The normalization bridge ops: minmax_norm and lrn."""

from __future__ import annotations

import math

import numpy as np

from ....errors import ShapeError
from ...facts import Decomposition, Flag, signed
from ...fp16 import round_fp16
from ...ranges import Interval, hull_of_values
from ...registry import Attr, check_int_tuple, float_attr, int_attr
from ...rewrite import BIT_IDENTICAL
from ...tensor import Tensor, make, weight
from ..common import Steps, norm_axes
from ._common import bridge_op, need_rank, scalar_weight

#: Every non-negative fp16 value in ascending order, +inf last (the range rules below
#: enumerate an internal fp16 step over them: at most 31745 values).
_NONNEG = np.arange(0, 0x7C01, dtype=np.uint16).view(np.float16).astype(np.float64)
#: ``fp16(x * x)`` of each of them, non-decreasing (the lrn kernel's first step).
_NONNEG_SQ = round_fp16(_NONNEG * _NONNEG).astype(np.float64)


def _fp16_between(lo: float, hi: float) -> np.ndarray:
    """The non-negative fp16 values in ``[lo, hi]`` (``0 <= lo``), ascending."""
    return _NONNEG[np.searchsorted(_NONNEG, lo, "left") : np.searchsorted(_NONNEG, hi, "right")]


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


def _minmax_divide(st, d, dr, attrs):
    return st.step(d / st.step(dr + st.const(attrs["eps"])))


def _minmax_body(st, inputs, attrs):
    x = inputs[0]
    axes = _minmax_axes(x.shape, attrs["axes"])
    mn = np.min(x, axis=axes, keepdims=True)
    mx = np.max(x, axis=axes, keepdims=True)
    # x - mn is never negative: a zero difference is +0, whichever zero np.min picked of
    # a -0 and a +0 (that pick differs between dtypes and SIMD paths; -0 - (+0) is -0)
    d = st.step(st.step(x - mn) + 0.0)
    return _minmax_divide(st, d, st.step(mx - mn), attrs)


def minmax_range(node, srcs, env) -> Interval:
    """Range rule of ``minmax_norm``, by the kernel's own steps.

    With ``dr = fp16(max - min)`` (recorded as the step ``max-min``: it overflows once
    the input's width passes 65504), ``d = fp16(x - min)`` lies in ``[0, dr]`` (rounding
    is monotone and ``min <= x <= max``) and reaches both ends, and for a fixed ``dr``
    the output ``fp16(d / fp16(dr + fp16(eps)))`` is monotone in ``d``. So the output's
    extremes are those of ``d = 0`` and ``d = dr`` over every fp16 value ``dr`` can
    take, which the rule enumerates (at most 31745 values). For ``eps >= 0`` that is
    inside ``[0, 1]``; NaN comes from ``0 / 0`` (``eps`` rounding to 0), from
    ``inf / inf`` (an overflowed width) and from infinite inputs (``inf - inf``).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import minmax_norm
        >>> x = af.input((2, 8), name="x", range=(-40000, 40000))
        >>> rep = af.range_analysis(minmax_norm(x, name="mm"))
        >>> str(rep["mm"].interval), rep.hazards[0].step
        ('[0, 1] or nan', 'max-min')
    """
    (s,) = srcs
    shape = node.srcs[0].shape
    group = int(np.prod([shape[a] for a in _minmax_axes(shape, node.attrs["axes"])]))
    infinite = max(abs(s.lo), abs(s.hi)) == np.inf
    nan = s.nan or infinite  # inf - inf where x, min or max is infinite
    if group <= 1 or s.lo == s.hi:
        width = 0.0  # every group constant: max - min is 0 (or NaN, for infinite x)
    else:
        width = math.inf if infinite else float(round_fp16(s.hi - s.lo))
    env.step("max-min", Interval(0.0, width, nan))
    dr = _fp16_between(0.0, width)
    st = Steps(True, env.arith)
    with np.errstate(all="ignore"):
        y = np.concatenate(
            [
                _minmax_divide(st, np.zeros_like(dr), dr, node.attrs),
                _minmax_divide(st, dr, dr, node.attrs),
            ]
        )
    return hull_of_values(y, nan)


def _decompose_minmax_norm(node: Tensor) -> Tensor:
    """``((x - amin) + 0) / ((amax - amin) + eps)`` from fused ops.

    The ``+ 0`` is the kernel's own step: ``x - amin`` is never negative, so a zero
    difference is ``+0``, whichever zero ``amin`` picked of a ``-0`` and a ``+0``
    (``-0 - (+0)`` is ``-0``, and ``1 / -0`` is ``-inf``).
    """
    x = node.srcs[0]
    axes = node.attrs["axes"]
    if axes is None:
        axes = tuple(range(1, x.ndim)) if x.ndim >= 2 else (0,)
    mn = make("amin", x, axes=axes, keepdims=True)
    mx = make("amax", x, axes=axes, keepdims=True)
    d = (x - mn) + scalar_weight(0.0)
    return d / ((mx - mn) + scalar_weight(node.attrs["eps"]))


_MINMAX_NORM = bridge_op(
    "minmax_norm",
    1,
    {"axes": _axes_attr(), "eps": float_attr(1e-5, "eps")},
    _minmax_shape,
    _minmax_body,
    "(x - amin) / (amax - amin + eps) over axes",
    sign=signed,
    range=minmax_range,
    flags=(Flag.SCALE_INVARIANT,),
    route=Decomposition(
        _decompose_minmax_norm,
        "((x - amin) + 0) / ((amax - amin) + eps)",
        BIT_IDENTICAL,
        "emulator: same fp16 steps, a zero x - min taken as +0 by both (spec: relerr <= 1.5e-3)",
    ),
)


def minmax_norm(x, axes=None, eps=1e-5, *, name=None) -> Tensor:
    """Min-max normalization ``(x - amin) / (amax - amin + eps)`` over ``axes``.

    Inputs: ``x`` of any rank >= 1. Attributes: ``axes`` (int or ints; None = every axis
    but 0 when rank >= 2, else all), ``eps`` (default 1e-5). Output: ``x``'s shape.
    Emulator numerics: ``mn``, ``mx`` exact; ``d = fp16(fp16(x - mn) + 0)`` (a zero
    difference is ``+0``, as in float64: ``x - mn`` is never negative);
    ``r = fp16(fp16(mx - mn) + fp16(eps))``; ``y = fp16(d / r)`` (the same steps as the
    fused decomposition, so the two are bit-identical, signed zeros included).

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import minmax_norm
        >>> af.compile(minmax_norm(af.input((3,)), eps=0.0))(np.array([1.0, 2.0, 5.0]))
        array([0.  , 0.25, 1.  ], dtype=float32)
    """
    if isinstance(axes, int):
        axes = (axes,)
    return make("minmax_norm", x, axes=axes, eps=eps, name=name)


def _lrn_shape(in_shapes, attrs):
    x = in_shapes[0]
    need_rank("lrn", x, (3, 4, 5), "[N, C, ...] with channels on axis 1")
    return x


def _lrn_window_sum(st, sq, size):
    """The narrow sum of ``sq`` over each channel's window, in ascending channel order."""
    c = sq.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    # Window offsets past the channels only add +0 terms, which change no bit of a sum of
    # squares (acc >= +0): skip them, so a huge ``size`` costs no more than ``2c - 1``.
    first, last = max(-lo, -(c - 1)), min(hi, c - 1)
    pad = [(0, 0)] * sq.ndim
    pad[1] = (-first, last)
    padded = np.pad(sq, pad)
    acc = np.zeros_like(sq)
    for j in range(last - first + 1):
        acc = st.step(acc + padded[:, j : j + c])
    return acc


def _lrn_power(st, acc, attrs):
    """``p = fp16(t ** beta)`` with ``t = fp16(fp16(alpha/size * acc) + bias)``."""
    t = st.step(st.const(attrs["alpha"] / attrs["size"]) * acc)
    t = st.step(t + st.const(attrs["bias"]))
    return st.step(t ** st.const(attrs["beta"]))


def _lrn_body(st, inputs, attrs):
    x = inputs[0]
    sq = st.step(x * x)
    p = _lrn_power(st, _lrn_window_sum(st, sq, attrs["size"]), attrs)
    return st.step(x / p)


def lrn_range(node, srcs, env) -> Interval:
    """Range rule of ``lrn``, by the kernel's own steps, whatever the attributes.

    The steps ``x*x`` and the window sum ``sum(x*x)`` are bounded by probes (the sum
    of non-negative terms is monotone in each), and ``t**beta`` (``p``, with
    ``t = bias + alpha/size * sum``) over the sum's finite values: all three are
    recorded. The window of channel ``c`` holds ``x[c]`` itself, so its sum
    ``acc >= fp16(x*x)``: for each fp16 value ``acc`` can take, ``x`` lies in
    ``[-s, s]`` with ``s`` the largest fp16 whose square rounds to at most ``acc``,
    and ``fp16(x / p(acc))`` is monotone in ``x`` (``p`` fixed). The rule enumerates
    ``acc`` (at most 31745 values) with the kernel's own steps and takes the output at
    both ends of ``x``'s range: for ``alpha >= 0``, ``bias > 0`` and ``beta > 0`` that
    is within ``|x| / bias**beta`` (with the constants rounded to fp16) and close to
    the true peak of ``x / (bias + alpha/size * x*x)**beta``. Once ``x*x`` overflows
    the sum is inf and ``y`` is 0 (NaN for an infinite ``x``).

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import lrn
        >>> x = af.input((1, 4, 2, 2), name="x", range=(-300, 300))
        >>> rep = af.range_analysis(lrn(x, size=3, name="n"))
        >>> [h.step for h in rep.hazards]
        ['x*x']
    """
    (s,) = srcs
    attrs = dict(node.attrs)
    st = Steps(True, env.arith)
    small = 0.0 if s.lo <= 0.0 <= s.hi else min(abs(s.lo), abs(s.hi))
    sq_lo, sq_hi = (float(v) for v in round_fp16(np.array([small, s.max_abs]) ** 2))
    env.step("x*x", Interval(sq_lo, sq_hi, s.nan))
    with np.errstate(all="ignore"):
        probe = np.array([[sq_lo], [sq_hi]]) * np.ones((2, node.srcs[0].shape[1]))
        acc = _lrn_window_sum(st, probe, attrs["size"])
    acc_lo, acc_hi = float(acc[0].min()), float(acc[1].max())
    env.step("sum(x*x)", Interval(acc_lo, acc_hi, s.nan))
    accs = _fp16_between(acc_lo, acc_hi)
    with np.errstate(all="ignore"):
        p = _lrn_power(st, accs, attrs)
    finite = accs < math.inf  # an infinite sum is reported at its own step already
    if finite.any():
        env.step("t**beta", hull_of_values(p[finite], s.nan))
    # x may be any in-range value whose square rounds to at most acc
    reach = _NONNEG[np.searchsorted(_NONNEG_SQ, accs, "right") - 1]
    x_lo, x_hi = np.maximum(s.lo, -reach), np.minimum(s.hi, reach)
    ok = x_lo <= x_hi
    x_lo, x_hi, p = x_lo[ok], x_hi[ok], p[ok]
    if not p.size:  # no pair fits (not for a real input): stay sound regardless
        return Interval.unknown()
    with np.errstate(all="ignore"):
        y = np.concatenate([st.step(x_lo / p), st.step(x_hi / p)])
    zero_over_zero = bool(((p == 0) & (x_lo <= 0) & (x_hi >= 0)).any())
    return hull_of_values(y, s.nan or zero_over_zero)


def _decompose_lrn(node: Tensor) -> Tensor:
    """LRN with the kernel's narrow channel-window sum, as adds of channel slices.

    The squares are padded on the channel axis like the ONNX window (zero weights
    concatenated on each side) and the window of channel ``c`` is summed in the
    kernel's order: ``padded[c] + padded[c + 1] + ...``, each add rounded to fp16. The
    kernel starts from ``0 + padded[c]``, which is ``padded[c]`` bit for bit (a square
    is never ``-0``), so the two are bit-identical. (A convolution against ones would
    sum in the wide accumulator and round once: different bits.)
    """
    x = node.srcs[0]
    size, c = node.attrs["size"], x.shape[1]
    lo = (size - 1) // 2
    hi = size - 1 - lo
    # offsets past the channels add only +0 terms, which the kernel skips too (no bit
    # changes): the window spans at most 2c - 1 offsets whatever ``size`` is
    below, above = min(lo, c - 1), min(hi, c - 1)
    sq = make("square", x)

    def zeros(k):
        return [weight(np.zeros((x.shape[0], k, *x.shape[2:]), np.float16))] if k else []

    span = below + above + 1
    padded = make("concat", *zeros(below), sq, *zeros(above), axis=1) if span > 1 else sq
    ss = None
    for j in range(span):  # channel c sums padded[c + j], j ascending, as the kernel does
        term = sq
        if span > 1:
            begins = (0, j) + (0,) * (x.ndim - 2)
            ends = (x.shape[0], j + c, *x.shape[2:])
            term = make("slice", padded, begins=begins, ends=ends, steps=None)
        ss = term if ss is None else ss + term
    t = ss * scalar_weight(node.attrs["alpha"] / size) + scalar_weight(node.attrs["bias"])
    return x / (t ** scalar_weight(node.attrs["beta"]))


_LRN = bridge_op(
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
    sign=signed,
    range=lrn_range,
    route=Decomposition(
        _decompose_lrn,
        "squares summed over the channel window as adds of channel slices",
        BIT_IDENTICAL,
        "emulator: the kernel's narrow window sum, in its order, as adds of channel slices "
        "(spec: cos 1.0)",
    ),
)


def lrn(x, size=5, alpha=1e-4, beta=0.75, bias=1.0, *, name=None) -> Tensor:
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
    return make("lrn", x, size=size, alpha=alpha, beta=beta, bias=bias, name=name)


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_MINMAX_NORM, _LRN)
