"""Reductions (sum, mean, amax, amin), softmax and cumsum.

Emulator contract: sum, mean and the sum inside softmax use the engine's NARROW fp16
accumulator (:func:`~aneforge.graph.fp16.narrow_sum`: reduced axes flattened in C order,
every partial sum rounded to fp16). mean divides that sum by the count, rounded once.
amax/amin are exact. softmax is max-subtracted: d = fp16(x - max), e = fp16(exp(d)),
y = fp16(e / narrow_sum(e)). cumsum runs through the WIDE matmul accumulator, as the
engine lowers it to ``x @ triu_ones``, and the emulator runs exactly that matmul (a
float32 running sum, each output rounded; a later inf or nan makes earlier outputs nan,
since ``inf * 0`` is nan).

Range rules (:mod:`aneforge.graph.ranges`): sum and mean bound their narrow sum by the
accumulator itself on ``n`` copies of each end of the input's range (the sum is
non-decreasing in every term, and the copies follow a target's reduction route like
the real sum); mean records that sum as its step ``sum(x)``. amax/amin return input
values. softmax is bounded through its steps (module function :func:`softmax_range`)
and cumsum by its own matmul on a probe of one row, through the target's output stage.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..arith import as_arith
from ..facts import (
    LOGITS_OVERFLOW_FIX,
    SOFTMAX_FIX,
    SUM_OVERFLOW_FIX,
    Flag,
    LoopNest,
    NarrowSum,
    TermSign,
    first_source,
    nonnegative,
    prod,
)
from ..fp16 import FP16_MAX, extreme, narrow_sum, round_fp16
from ..ranges import Interval, copies_sum, same, softmax_sum_bounds, sum_nan
from ..registry import bool_attr, int_attr, ints_attr, register
from .common import fused_op, norm_axes, norm_axis, same_shape


def _axes_attr():
    """The reductions' ``axes``, labelled as NumPy's (and af.sum's) ``axis``."""
    return ints_attr(None, None, "axis")


def _reduce_shape(name):
    def rule(in_shapes, attrs):
        shape = in_shapes[0]
        axes = norm_axes(name, attrs["axes"], len(shape))
        if attrs["keepdims"]:
            return tuple(1 if i in axes else d for i, d in enumerate(shape))
        return tuple(d for i, d in enumerate(shape) if i not in axes)

    return rule


def _reduced(x, attrs, name):
    """(axes, keepdims-shape) for a reduction of ``x``."""
    return norm_axes(name, attrs["axes"], x.ndim)


def _finish(y, x, axes, attrs):
    if attrs["keepdims"]:
        return y.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
    return y.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _count(x, axes):
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def _sum_emulate(inputs, attrs, arith=None):
    x = inputs[0]
    axes = _reduced(x, attrs, "sum")
    return _finish(as_arith(arith).narrow_sum(x, axes), x, axes, attrs)


def _mean_emulate(inputs, attrs, arith=None):
    x = inputs[0]
    axes = _reduced(x, attrs, "mean")
    with np.errstate(all="ignore"):
        total = as_arith(arith).narrow_sum(x, axes).astype(np.float64)
        return _finish(round_fp16(total / _count(x, axes)), x, axes, attrs)


def _exact_reduction(fn, name):
    def run(inputs, attrs):
        x = inputs[0]
        axes = _reduced(x, attrs, name)
        with np.errstate(all="ignore"):
            return _finish(np.asarray(fn(x, axis=axes)), x, axes, attrs)

    return run


def _largest(x, axis):
    return extreme(x, axis, largest=True)


def _smallest(x, axis):
    return extreme(x, axis, largest=False)


def _exact_emulation(fn, name):
    def run(inputs, attrs, arith=None):
        x = inputs[0]
        axes = _reduced(x, attrs, name)
        return _finish(np.asarray(fn(x, axis=axes)), x, axes, attrs)

    return run


# ---- range rules ----------------------------------------------------------------------

INF = math.inf


def _reduced_count(node) -> int:
    shape = node.srcs[0].shape
    axes = norm_axes(node.op, node.attrs["axes"], len(shape))
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def _sum_interval(s: Interval, n: int, route: int | None) -> Interval:
    lo, hi = (float(v) for v in copies_sum([s.lo, s.hi], n, route=route))
    return Interval(lo, hi, sum_nan(s.nan, lo, hi))


def _sum_range(node, srcs, env) -> Interval:
    """Range rule of ``sum``: the narrow sum of ``n`` copies of each end.

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 3000), name="x", range=(-1.0, 1.0))
        >>> str(af.range_analysis(af.sum(x, axis=-1)).nodes[-1].interval)
        '[-2048, 2048]'
    """
    return _sum_interval(srcs[0], _reduced_count(node), env.route)


def _mean_range(node, srcs, env) -> Interval:
    """Range rule of ``mean``: ``fp16(sum / n)`` of the bounds of the narrow sum, which
    is recorded as the step ``sum(x)`` (it can overflow when the mean would not)."""
    n = _reduced_count(node)
    total = env.step("sum(x)", _sum_interval(srcs[0], n, env.route))
    with np.errstate(all="ignore"):
        lo, hi = (float(v) for v in round_fp16(np.array([total.lo, total.hi]) / n))
    return Interval(lo, hi, total.nan)


_REDUCE_ATTRS = {"axes": _axes_attr(), "keepdims": bool_attr(False, "keepdims")}
_REDUCTIONS = {
    "sum": (
        _sum_emulate,
        _exact_reduction(np.sum, "sum"),
        "sum (narrow fp16 accumulator)",
        _sum_range,
    ),
    "mean": (_mean_emulate, _exact_reduction(np.mean, "mean"), "narrow sum / count", _mean_range),
    # every output is one of the input's values
    "amax": (_exact_emulation(_largest, "amax"), _exact_reduction(np.max, "amax"), "max", same),
    "amin": (_exact_emulation(_smallest, "amin"), _exact_reduction(np.min, "amin"), "min", same),
}


def _reduced_terms(in_shapes, attrs) -> int:
    """The terms of a sum or mean: the product of the reduced extents."""
    x = in_shapes[0]
    axes = attrs.get("axes")
    axes = range(len(x)) if axes is None else sorted({a % len(x) for a in axes})
    return prod(x[a] for a in axes)


# The narrow sums of sum and mean (amax and amin compare, they do not add).
_NARROW = {
    "sum": NarrowSum(
        _reduced_terms,
        TermSign.OF_INPUT,
        "af.reduce_sum_to_matmul(out) routes it through the wide matmul accumulator "
        "(x @ ones); a multi-axis sum needs a reshape to one axis first",
    ),
    "mean": NarrowSum(
        _reduced_terms,
        TermSign.OF_INPUT,
        "sum with the wide accumulator and scale once: (x @ ones[K, 1]) * (1/K)",
    ),
    "amax": None,
    "amin": None,
}
# sum's result is its float32 sum, rounded once; mean's is scaled after it.
_WIDE = {"sum": (Flag.WIDE_RESULT,)}
_NESTS = {
    "sum": LoopNest("reduce", "add", 0.0),
    "mean": LoopNest("reduce", "add", 0.0, "mean"),
    "amax": LoopNest("reduce", "max", -math.inf),
    "amin": LoopNest("reduce", "min", math.inf),
}

for _name, (_emu, _ex, _doc, _range) in _REDUCTIONS.items():
    register(
        fused_op(
            _name,
            1,
            dict(_REDUCE_ATTRS),
            _reduce_shape(_name),
            _emu,
            _ex,
            doc=_doc,
            sign=first_source,
            range=_range,
            flags=(Flag.REDUCTION, Flag.STATISTIC, *_WIDE.get(_name, ())),
            narrow=_NARROW[_name],
            overflow_fix=SUM_OVERFLOW_FIX if _NARROW[_name] else None,
            nest=_NESTS[_name],
        )
    )


def _axis_shape(name):
    def rule(in_shapes, attrs):
        norm_axis(name, attrs["axis"], len(in_shapes[0]))
        return in_shapes[0]

    return rule


def _softmax_emulate(inputs, attrs, arith=None):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    with np.errstate(all="ignore"):
        d = round_fp16(x.astype(np.float64) - np.max(x, axis=axis, keepdims=True))
        e = round_fp16(np.exp(d.astype(np.float64)))
        s = as_arith(arith).narrow_sum(e, axis, keepdims=True)
        return round_fp16(e.astype(np.float64) / s.astype(np.float64))


def _softmax_exact(inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


# Up to this many terms softmax's sum is bounded below position by position (an n x n
# probe); past it by the cheaper bound max(1, sum of n copies of the smallest term).
_SOFTMAX_POSITIONS = 2048


def _softmax_sum_low(e_min: float, n: int, route: int | None) -> float:
    """A lower bound of softmax's narrow sum ``s`` when every term is ``>= e_min`` and
    one term (the maximum's) is exactly 1: ``s`` is monotone in every term, so it is at
    least the sum with every other term at ``e_min``, for the worst position of the 1."""
    if n <= _SOFTMAX_POSITIONS:
        probe = np.full((n, n), e_min)
        np.fill_diagonal(probe, 1.0)
        with np.errstate(all="ignore"):
            return float(np.min(narrow_sum(round_fp16(probe), 1, route=route)))
    # the 1 lifts its partial sum to >= 1 and later partials never fall (terms >= 0)
    return max(1.0, float(copies_sum([e_min], n, route=route)[0]))


def softmax_range(node, srcs, env) -> Interval:
    """Range rule of ``softmax``, through its steps ``d = fp16(x - max)``,
    ``e = fp16(exp(d))`` (recorded as ``exp(x-max)``), the narrow sum ``s`` of the
    ``e`` (recorded as ``sum(exp)``) and ``y = fp16(e / s)``.

    For a finite input in ``[lo, hi]``: ``d`` lies in ``[fp16(lo - hi), 0]`` and is 0 at
    the maximum, so ``e`` lies in ``[e_min, 1]`` with ``e_min = fp16(exp(fp16(lo - hi)))``
    and one term is 1. ``s`` is monotone in every term: at most the sum of ``n`` ones,
    at least the sum with one 1 and every other term ``e_min`` (its worst position), so
    ``y`` lies in ``[fp16(e_min / s_max), fp16(1 / s_min)]`` (rounding is monotone). An
    infinite or NaN input can make ``inf - inf``: NaN, with every other value in [0, 1].

    Example:
        >>> import aneforge as af
        >>> x = af.input((4, 8), name="x", range=(-1.0, 1.0))
        >>> str(af.range_analysis(af.softmax(x)).nodes[-1].interval)
        '[0.01692, 0.5137]'
    """
    (s,) = srcs
    shape = node.srcs[0].shape
    n = int(shape[node.attrs["axis"] % len(shape)]) if shape else 1
    s_max = float(copies_sum([1.0], n, route=env.route)[0])
    last = node.attrs["axis"] % len(shape) == len(shape) - 1 if shape else False
    # rows that hold no NaN sum to about 1 whatever their inputs (softmax_sum_bounds)
    l1 = softmax_sum_bounds(n)[1] if last else INF
    if not s.finite:
        env.step("exp(x-max)", Interval(0.0, 1.0, nan=True))
        env.step("sum(exp)", Interval(1.0, max(s_max, 1.0), nan=True))
        return Interval(0.0, 1.0, nan=True, l1=l1)
    if n == 1:  # x - max(x) is exactly 0: every output is 1
        env.step("exp(x-max)", Interval(1.0, 1.0))
        env.step("sum(exp)", Interval(1.0, 1.0))
        return Interval(1.0, 1.0)
    with np.errstate(all="ignore"):
        d_min = round_fp16(np.float64(s.lo) - np.float64(s.hi))
        e_min = float(round_fp16(np.exp(np.float64(d_min))))
    s_min = _softmax_sum_low(e_min, n, env.route)
    env.step("exp(x-max)", Interval(e_min, 1.0))
    env.step("sum(exp)", Interval(s_min, s_max))
    lo, hi = (float(v) for v in round_fp16(np.array([e_min / s_max, 1.0 / s_min])))
    return Interval(lo, hi, l1=l1)


def _axis_terms(in_shapes, attrs) -> int:
    x = in_shapes[0]
    return int(x[attrs["axis"] % len(x)])


register(
    fused_op(
        "softmax",
        1,
        {"axis": int_attr(-1, None, "axis")},
        _axis_shape("softmax"),
        _softmax_emulate,
        _softmax_exact,
        doc="exp(x - max) / sum(exp(x - max)) along axis (narrow sum)",
        sign=nonnegative,
        range=softmax_range,
        flags=(Flag.SATURATES, Flag.ZERO_SIGN_BLIND),  # exp(+-0 - max) reads the same
        narrow=NarrowSum(_axis_terms, TermSign.SAME, SOFTMAX_FIX),  # a sum of exponentials
        overflow_fix=LOGITS_OVERFLOW_FIX,
        nest=LoopNest("row", form="softmax"),
    )
)


def _cumsum_shape(in_shapes, attrs):
    if len(in_shapes[0]) < 1:
        raise ShapeError("cumsum: input must have rank >= 1 (it sums along the last axis), got ()")
    return same_shape(in_shapes, attrs)


def _cumsum_emulate(inputs, attrs, arith):
    """``x @ triu(ones)``, literally: the engine's lowering (so inf * 0 gives nan)."""
    x = inputs[0]
    k = x.shape[-1]
    triu = np.triu(np.ones((k, k), np.float16))[None]
    out = as_arith(arith).matmul(np.ascontiguousarray(x.reshape(1, -1, k)), triu)
    return out.reshape(x.shape)


def _cumsum_range(node, srcs, env) -> Interval:
    """Range rule of ``cumsum``: its own matmul on a probe row filled with each end of
    the input's range (every output is non-decreasing in every input: a float32 running
    sum, then monotone rounding), through the target's output stage
    (``env.contraction``). An infinite input makes ``inf * 0`` (NaN) in the earlier
    outputs; its finite values are bounded by the probe at the clamped ends.

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 6), name="x", range=(0.0, 3.0))
        >>> str(af.range_analysis(af.cumsum(x)).nodes[-1].interval)
        '[0, 18]'
    """
    (s,) = srcs
    shape = node.srcs[0].shape
    k = int(shape[-1]) if shape else 1
    ends = np.clip(np.array([s.lo, s.hi]), -FP16_MAX, FP16_MAX)
    probe = round_fp16(np.repeat(ends[:, None], k, axis=1))
    with np.errstate(all="ignore"):
        out = np.asarray(_cumsum_emulate([probe], {}, env.plain_mm), dtype=np.float64)
    lo = -INF if s.lo == -INF else float(out.min())
    hi = INF if s.hi == INF else float(out.max())
    nan = s.nan or (k > 1 and not (math.isfinite(s.lo) and math.isfinite(s.hi)))
    return env.contraction(Interval(lo, hi, nan))


register(
    fused_op(
        "cumsum",
        1,
        {},
        _cumsum_shape,
        _cumsum_emulate,
        lambda inputs, attrs: np.cumsum(inputs[0], axis=-1),
        doc="cumulative sum over the last axis (x @ triu_ones: wide accumulator)",
        sign=first_source,
        range=_cumsum_range,
        flags=(Flag.WIDE_RESULT,),  # the matmul's float32 running sum, rounded once
        overflow_fix=SUM_OVERFLOW_FIX,
    )
)
