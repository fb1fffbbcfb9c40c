"""Elementwise ops: unary, binary (NumPy broadcasting), comparisons and select.

Emulator contract: each op widens its fp16 operands to float64, computes the exact
function there and rounds the result to fp16 once (so + - * / and sqrt are correctly
rounded; transcendental functions are rounded from a float64 value).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ..registry import OpDef, choice_attr, float_attr, register
from .common import broadcast_shape, in_float64, rounded, same_shape


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + special.erf(x / np.sqrt(2.0)))


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _leaky_relu(x, alpha=0.01):
    return np.where(x >= 0, x, alpha * x)


def _clip(x, lo=None, hi=None):
    if lo is not None:
        x = np.where(x < lo, lo, x)
    if hi is not None:
        x = np.where(x > hi, hi, x)
    return x


# name -> (float64 function, attributes, flags, one-line doc)
UNARY = {
    "neg": (np.negative, {}, {"odd"}, "-x"),
    "relu": (lambda x: np.maximum(x, 0.0), {}, {"nonnegative"}, "max(x, 0)"),
    "gelu": (
        _gelu,
        {"approximate": choice_attr(("none", "tanh"), "none", "approximate")},
        set(),
        "x * Phi(x) (erf form; approximate='tanh' for the tanh form)",
    ),
    "silu": (lambda x: x * special.expit(x), {}, set(), "x * sigmoid(x)"),
    "sigmoid": (special.expit, {}, {"nonnegative"}, "1 / (1 + exp(-x))"),
    "tanh": (np.tanh, {}, {"odd"}, "hyperbolic tangent"),
    "exp": (np.exp, {}, {"nonnegative"}, "e**x"),
    "log": (np.log, {}, set(), "natural logarithm (nan below 0, -inf at 0)"),
    "sqrt": (np.sqrt, {}, {"nonnegative"}, "square root"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), {}, {"nonnegative"}, "1 / sqrt(x)"),
    "inverse": (lambda x: 1.0 / x, {}, set(), "1 / x"),
    "abs": (np.abs, {}, {"nonnegative"}, "|x|"),
    "square": (np.square, {}, {"nonnegative"}, "x * x"),
    "sin": (np.sin, {}, {"odd"}, "sine"),
    "cos": (np.cos, {}, set(), "cosine"),
    "erf": (special.erf, {}, {"odd"}, "error function"),
    "softplus": (lambda x: np.logaddexp(0.0, x), {}, {"nonnegative"}, "log(1 + e**x)"),
    "relu6": (lambda x: np.clip(x, 0.0, 6.0), {}, {"nonnegative"}, "min(max(x, 0), 6)"),
    "elu": (_elu, {"alpha": float_attr(1.0, "alpha")}, set(), "x if x > 0 else alpha*(e**x-1)"),
    "leaky_relu": (
        _leaky_relu,
        {"alpha": float_attr(0.01, "alpha")},
        set(),
        "x if x >= 0 else alpha * x",
    ),
    "clip": (
        _clip,
        {"lo": float_attr(None, "lo"), "hi": float_attr(None, "hi")},
        set(),
        "min(max(x, lo), hi)",
    ),
    "sign": (np.sign, {}, set(), "-1, 0 or 1"),
    "floor": (np.floor, {}, set(), "round toward -inf"),
    "ceil": (np.ceil, {}, set(), "round toward +inf"),
    "round": (np.round, {}, set(), "round half to even"),
}

BINARY = {
    "add": (np.add, {"commutative", "associative"}, "a + b"),
    "sub": (np.subtract, set(), "a - b"),
    "mul": (np.multiply, {"commutative", "associative"}, "a * b"),
    "div": (np.divide, set(), "a / b"),
    "maximum": (np.maximum, {"commutative"}, "elementwise max (nan propagates)"),
    "minimum": (np.minimum, {"commutative"}, "elementwise min (nan propagates)"),
    "pow": (np.power, set(), "a ** b"),
}

COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
}


# Ops whose float32 evaluation rounds to the same fp16 bits as float64 (see
# common.rounded): exact ops and the correctly rounded + - * / sqrt.
FLOAT32_EXACT = {
    "neg", "relu", "abs", "square", "sqrt", "relu6", "sign", "floor", "ceil",
    "round", "add", "sub", "mul", "div", "maximum", "minimum",
}  # fmt: skip


def _binary_shape(name):
    return lambda in_shapes, attrs: broadcast_shape(name, in_shapes)


for _name, (_fn, _attrs, _flags, _doc) in UNARY.items():
    register(
        OpDef(
            _name,
            "fused",
            1,
            _attrs,
            same_shape,
            rounded(_fn, _name in FLOAT32_EXACT),
            in_float64(_fn),
            doc=_doc,
            flags=frozenset(_flags | {"elementwise", "unary"}),
        )
    )

for _name, (_fn, _flags, _doc) in BINARY.items():
    register(
        OpDef(
            _name,
            "fused",
            2,
            {},
            _binary_shape(_name),
            rounded(_fn, _name in FLOAT32_EXACT),
            in_float64(_fn),
            doc=_doc,
            flags=frozenset(_flags | {"elementwise", "binary"}),
        )
    )


def _comparison(fn):
    return lambda a, b: fn(a, b).astype(np.float64)


for _name, _fn in COMPARE.items():
    register(
        OpDef(
            _name,
            "fused",
            2,
            {},
            _binary_shape(_name),
            rounded(_comparison(_fn), True),
            in_float64(_comparison(_fn)),
            doc=f"1.0 where {_name}(a, b) else 0.0 (nan compares false)",
            flags=frozenset({"elementwise", "binary", "nonnegative"}),
        )
    )


def _select(cond, a, b):
    return np.where(cond != 0, a, b)


register(
    OpDef(
        "select",
        "fused",
        3,
        {},
        _binary_shape("select"),
        rounded(_select, True),
        in_float64(_select),
        doc="a where cond != 0 else b (all three broadcast)",
        flags=frozenset({"elementwise"}),
    )
)
