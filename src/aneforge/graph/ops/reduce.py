"""Reductions (sum, mean, amax, amin), softmax and cumsum.

Emulator contract: sum, mean and the sum inside softmax use the engine's NARROW fp16
accumulator (:func:`~aneforge.graph.fp16.narrow_sum`: reduced axes flattened in C order,
every partial sum rounded to fp16). mean divides that sum by the count, rounded once.
amax/amin are exact. softmax is max-subtracted: d = fp16(x - max), e = fp16(exp(d)),
y = fp16(e / narrow_sum(e)). cumsum runs through the WIDE matmul accumulator, as the
engine lowers it to ``x @ triu_ones``, and the emulator runs exactly that matmul (a
float32 running sum, each output rounded; a later inf or nan makes earlier outputs nan,
since ``inf * 0`` is nan).
"""

from __future__ import annotations

import numpy as np

from ..fp16 import narrow_sum, round_fp16
from ..registry import Attr, OpDef, bool_attr, check_int_tuple, int_attr, register
from .common import norm_axes, norm_axis, same_shape


def _axes_attr():
    def check(value, op):
        return check_int_tuple(value, op, None, "axes")

    return Attr(check, None)


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


def _sum_emulate(inputs, attrs, mm=None):
    x = inputs[0]
    axes = _reduced(x, attrs, "sum")
    return _finish(narrow_sum(x, axes), x, axes, attrs)


def _mean_emulate(inputs, attrs, mm=None):
    x = inputs[0]
    axes = _reduced(x, attrs, "mean")
    with np.errstate(all="ignore"):
        total = narrow_sum(x, axes).astype(np.float64)
        return _finish(round_fp16(total / _count(x, axes)), x, axes, attrs)


def _exact_reduction(fn, name):
    def run(inputs, attrs):
        x = inputs[0]
        axes = _reduced(x, attrs, name)
        with np.errstate(all="ignore"):
            return _finish(np.asarray(fn(x, axis=axes)), x, axes, attrs)

    return run


def _exact_emulation(fn, name):
    def run(inputs, attrs, mm=None):
        x = inputs[0]
        axes = _reduced(x, attrs, name)
        return _finish(np.asarray(fn(x, axis=axes)), x, axes, attrs)

    return run


_REDUCE_ATTRS = {"axes": _axes_attr(), "keepdims": bool_attr(False, "keepdims")}
_REDUCTIONS = {
    "sum": (_sum_emulate, _exact_reduction(np.sum, "sum"), "sum (narrow fp16 accumulator)"),
    "mean": (_mean_emulate, _exact_reduction(np.mean, "mean"), "narrow sum / count"),
    "amax": (_exact_emulation(np.max, "amax"), _exact_reduction(np.max, "amax"), "max"),
    "amin": (_exact_emulation(np.min, "amin"), _exact_reduction(np.min, "amin"), "min"),
}

for _name, (_emu, _ex, _doc) in _REDUCTIONS.items():
    register(
        OpDef(
            _name,
            "fused",
            1,
            dict(_REDUCE_ATTRS),
            _reduce_shape(_name),
            _emu,
            _ex,
            doc=_doc,
            flags=frozenset({"reduction"}),
        )
    )


def _axis_shape(name):
    def rule(in_shapes, attrs):
        norm_axis(name, attrs["axis"], len(in_shapes[0]))
        return in_shapes[0]

    return rule


def _softmax_emulate(inputs, attrs, mm=None):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    with np.errstate(all="ignore"):
        d = round_fp16(x.astype(np.float64) - np.max(x, axis=axis, keepdims=True))
        e = round_fp16(np.exp(d.astype(np.float64)))
        s = narrow_sum(e, axis, keepdims=True)
        return round_fp16(e.astype(np.float64) / s.astype(np.float64))


def _softmax_exact(inputs, attrs):
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    with np.errstate(all="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


register(
    OpDef(
        "softmax",
        "fused",
        1,
        {"axis": int_attr(-1, None, "axis")},
        _axis_shape("softmax"),
        _softmax_emulate,
        _softmax_exact,
        doc="exp(x - max) / sum(exp(x - max)) along axis (narrow sum)",
        flags=frozenset({"nonnegative"}),
    )
)


def _cumsum_shape(in_shapes, attrs):
    return same_shape(in_shapes, attrs)


def _cumsum_emulate(inputs, attrs, mm):
    """``x @ triu(ones)``, literally: the engine's lowering (so inf * 0 gives nan)."""
    x = inputs[0]
    k = x.shape[-1]
    triu = np.triu(np.ones((k, k), np.float16))[None]
    return mm(np.ascontiguousarray(x.reshape(1, -1, k)), triu).reshape(x.shape)


register(
    OpDef(
        "cumsum",
        "fused",
        1,
        {},
        _cumsum_shape,
        _cumsum_emulate,
        lambda inputs, attrs: np.cumsum(inputs[0], axis=-1),
        doc="cumulative sum over the last axis (x @ triu_ones: wide accumulator)",
    )
)
