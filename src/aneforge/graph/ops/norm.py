"""Normalizations: layer_norm, rms_norm, group_norm, batch_norm (inference), l2_norm.

Emulator contract: every step is one rounded fp16 op and every sum is the narrow fp16
accumulator, in this order (n = number of normalized elements, eps rounded to fp16):

- layer_norm / group_norm: mu = fp16(nsum(x)/n); d = fp16(x - mu);
  var = fp16(nsum(fp16(d*d))/n); r = fp16(rsqrt(fp16(var + eps))); y = fp16(d*r);
  then y = fp16(y*weight), y = fp16(y + bias) when given.
- rms_norm: ms = fp16(nsum(fp16(x*x))/n); r = fp16(rsqrt(fp16(ms + eps)));
  y = fp16(x*r), then fp16(y*weight).
- batch_norm: d = fp16(x - mean); r = fp16(rsqrt(fp16(var + eps))); y = fp16(d*r), then
  weight and bias as above; statistics broadcast along axis 1.
- l2_norm: ss = nsum(fp16(x*x)); y = fp16(x * fp16(rsqrt(max(ss, eps)))).

So x*x overflows fp16 for |x| > 256, exactly as on the engine; the float64 executor
computes the same formulas without rounding.
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..fp16 import round_fp16
from ..registry import OpDef, bool_attr, float_attr, int_attr, register
from .common import norm_axis, step_kernels


def _f(x):
    return np.asarray(x, dtype=np.float64)


def _affine(a, y, inputs, attrs, shape):
    i = 1
    if attrs.get("has_weight"):
        y = a.step(_f(y) * _f(inputs[i]).reshape(shape))
        i += 1
    if attrs.get("has_bias"):
        y = a.step(_f(y) + _f(inputs[i]).reshape(shape))
    return y


def _standardize(a, x, axes, eps):
    mu = a.mean(x, axes)
    d = a.step(_f(x) - _f(mu))
    var = a.mean(a.step(_f(d) * _f(d)), axes)
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(var) + a.const(eps)))))
    return a.step(_f(d) * _f(r))


def _layer_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("layer_norm", attrs["axis"], x.ndim)
    axes = tuple(range(axis, x.ndim))
    y = _standardize(a, x, axes, attrs["eps"])
    return _affine(a, y, inputs, attrs, x.shape[axis:])


def _rms_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("rms_norm", attrs["axis"], x.ndim)
    axes = tuple(range(axis, x.ndim))
    ms = a.mean(a.step(_f(x) * _f(x)), axes)
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(ms) + a.const(attrs["eps"])))))
    y = a.step(_f(x) * _f(r))
    return _affine(a, y, inputs, attrs, x.shape[axis:])


def _group_norm(a, inputs, attrs):
    x = inputs[0]
    g = attrs["groups"]
    grouped = x.reshape(x.shape[0], g, -1)
    y = _standardize(a, grouped, (2,), attrs["eps"]).reshape(x.shape)
    return _affine(a, y, inputs, attrs, (x.shape[1],) + (1,) * (x.ndim - 2))


def _batch_norm(a, inputs, attrs):
    x, mean, var = inputs[:3]
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    d = a.step(_f(x) - _f(mean).reshape(shape))
    r = a.step(1.0 / np.sqrt(_f(a.step(_f(var).reshape(shape) + a.const(attrs["eps"])))))
    y = a.step(_f(d) * _f(r))
    return _affine(a, y, [x] + list(inputs[3:]), attrs, shape)


def _batch_norm_emulate(inputs, attrs, mm=None):
    """batch_norm's fp16 steps (those of :func:`_batch_norm`) in float32: the per-element
    steps are - and * of fp16 values, whose float32 results round to the same fp16 bits
    (float32's 24 bits >= 2*11 + 2); only the per-channel rsqrt runs in float64. It is
    the hot op of convolutional networks, so it avoids float64 round trips."""
    x, mean, var = inputs[:3]
    shape = (x.shape[1],) + (1,) * (x.ndim - 2)
    f16, f32 = np.float16, np.float32
    with np.errstate(all="ignore"):
        eps = _f(round_fp16(attrs["eps"]))
        r = round_fp16(1.0 / np.sqrt(_f(round_fp16(_f(var) + eps)))).astype(f32).reshape(shape)
        y = (x.astype(f32) - mean.astype(f32).reshape(shape)).astype(f16)
        y = (y.astype(f32) * r).astype(f16)
        params = list(inputs[3:])
        if attrs.get("has_weight"):
            y = (y.astype(f32) * params.pop(0).astype(f32).reshape(shape)).astype(f16)
        if attrs.get("has_bias"):
            y = (y.astype(f32) + params.pop(0).astype(f32).reshape(shape)).astype(f16)
    return y


def _l2_norm(a, inputs, attrs):
    x = inputs[0]
    axis = norm_axis("l2_norm", attrs["axis"], x.ndim)
    ss = a.total(a.step(_f(x) * _f(x)), (axis,), keepdims=True)
    r = a.step(1.0 / np.sqrt(np.maximum(_f(ss), a.const(attrs["eps"]))))
    return a.step(_f(x) * _f(r))


def _params_shape(name, n_stats=0):
    """Shape rule: x, then ``n_stats`` statistics, then optional weight and bias."""

    def rule(in_shapes, attrs):
        x = in_shapes[0]
        if name in ("group_norm", "batch_norm"):
            if len(x) < 2:
                raise ShapeError(f"{name}: input must be [N, C, ...], got {x}")
            want = (x[1],)
            if name == "group_norm" and x[1] % attrs["groups"]:
                raise ShapeError(
                    f"group_norm: groups={attrs['groups']} does not divide {x[1]} channels"
                )
        else:
            axis = norm_axis(name, attrs["axis"], len(x))
            want = x[axis:]
        n_params = n_stats + int(attrs.get("has_weight", False))
        n_params += int(attrs.get("has_bias", False))
        if len(in_shapes) != 1 + n_params:
            raise ShapeError(f"{name}: expected {1 + n_params} inputs, got {len(in_shapes)}")
        for i, s in enumerate(in_shapes[1:]):
            if tuple(s) != tuple(want):
                raise ShapeError(f"{name}: parameter {i} must have shape {want}, got {s}")
        return x

    return rule


_AFFINE = {"has_weight": bool_attr(False, "has_weight"), "has_bias": bool_attr(False, "has_bias")}

_NORMS = {
    "layer_norm": (
        _layer_norm,
        dict(_AFFINE, axis=int_attr(-1, None, "axis"), eps=float_attr(1e-5, "eps")),
        0,
        "normalize over axes [axis, ndim) to zero mean and unit variance",
    ),
    "rms_norm": (
        _rms_norm,
        {
            "has_weight": bool_attr(False, "has_weight"),
            "axis": int_attr(-1, None, "axis"),
            "eps": float_attr(1e-5, "eps"),
        },
        0,
        "x / sqrt(mean(x**2) + eps) over axes [axis, ndim)",
    ),
    "group_norm": (
        _group_norm,
        dict(_AFFINE, groups=int_attr(None, 1, "groups", True), eps=float_attr(1e-5, "eps")),
        0,
        "layer norm over each group of channels and all spatial positions",
    ),
    "batch_norm": (
        _batch_norm,
        dict(_AFFINE, eps=float_attr(1e-5, "eps")),
        2,
        "(x - mean) / sqrt(var + eps) per channel (axis 1), inference statistics",
    ),
    "l2_norm": (
        _l2_norm,
        {"axis": int_attr(-1, None, "axis"), "eps": float_attr(1e-6, "eps")},
        0,
        "x / sqrt(max(sum(x**2), eps)) along axis",
    ),
}

# Norms whose statistics are constants (inference batch_norm): a per-channel affine map,
# so each output element depends on one input element and the engine folds it into the
# pass that produced its input.
_POINTWISE = frozenset({"batch_norm"})

# Fast emulation kernels with the same bits as the step-by-step ones (tests compare them).
_FAST_EMULATE = {"batch_norm": _batch_norm_emulate}

for _name, (_fn, _attrs, _stats, _doc) in _NORMS.items():
    _emu, _ex = step_kernels(_fn)
    _emu = _FAST_EMULATE.get(_name, _emu)
    register(
        OpDef(
            _name,
            "fused",
            None,
            _attrs,
            _params_shape(_name, _stats),
            _emu,
            _ex,
            doc=_doc,
            flags=frozenset({"norm", "pointwise"} if _name in _POINTWISE else {"norm"}),
        )
    )
