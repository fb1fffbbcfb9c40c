"""Elementwise ops: unary, binary (NumPy broadcasting), comparisons and select.

Emulator contract: each op widens its fp16 operands to float64, computes the exact
function there and rounds the result to fp16 once (so + - * / and sqrt are correctly
rounded; transcendental functions are rounded from a float64 value).

Range rules (:mod:`aneforge.graph.ranges`) evaluate each op's own fp16 kernel at the
points where its extremes lie, so they follow its rounding exactly: the ends of the
input interval for monotone ops (``corners``), plus +-0 where the sign of a zero
matters (``1 / -0.0 = -inf``) and the critical points of gelu and silu; sin and cos at
every fp16 value of a short interval; pow and the comparisons by their own case
analysis (NaN compares false; a negative base needs an integer exponent).

Example:
    >>> import aneforge as af
    >>> x = af.input((8,), name="x", range=(-3.0, 2.0))
    >>> rep = af.range_analysis([af.gelu(x, name="g"), af.inverse(x + 4.0, name="r")])
    >>> str(rep["g"].interval), str(rep["r"].interval)
    ('[-0.1699, 1.954]', '[0.1666, 1]')
"""

from __future__ import annotations

import math

import numpy as np

from ..facts import (
    ELEMENTWISE_NEST,
    Flag,
    LoopNest,
    all_sources,
    any_source,
    nonnegative,
    signed,
)
from ..fp16 import FP16_MAX
from ..ranges import ETA16, INF, U16, Interval, corners, hull_of_values, weight_value
from ..registry import OpDef, choice_attr, float_attr, get_op, register
from .common import broadcast_shape, fused_op, in_float64, rounded, same_shape
from .half_period import COS_LOWERING, SIN_LOWERING


# scipy.special is imported on first use: importing it costs more than the rest of
# `import aneforge` together, and most programs never evaluate erf or the sigmoid.
def _erf(x):
    """The float64 error function (scipy.special.erf)."""
    from scipy import special

    return special.erf(x)


def _expit(x):
    """The float64 logistic sigmoid 1 / (1 + exp(-x)) (scipy.special.expit)."""
    from scipy import special

    return special.expit(x)


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))


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


# ---- range rules ----------------------------------------------------------------------

# Every non-NaN fp16 value, ascending, +-inf included and one zero (+0.0): the inputs a
# unary op can see, up to the sign of zero.
_FP16_GRID = np.unique(np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float64))
_FP16_GRID = _FP16_GRID[~np.isnan(_FP16_GRID)] + 0.0  # + 0.0 turns -0.0 into +0.0

# The minima of gelu and silu, each the root of its derivative (scipy.optimize.brentq,
# xtol=1e-15; the range tests recompute them):
#   erf form   d/dx x*Phi(x) = Phi(x) + x*phi(x) = 0
#   tanh form  d/dx x/2*(1 + tanh(u)), u = sqrt(2/pi)*(x + 0.044715*x**3):
#              (1 + tanh(u))/2 + x/2*(1 - tanh(u)**2)*sqrt(2/pi)*(1 + 3*0.044715*x**2) = 0
#   silu       d/dx x*s(x) = s(x)*(1 + x*(1 - s(x))) = 0, s the logistic sigmoid
# Each function decreases before its minimum and increases after it.
GELU_MINIMUM = -0.7517915246935646
GELU_TANH_MINIMUM = -0.7524614220710163
SILU_MINIMUM = -1.278464542761074

# Above this many fp16 inputs a periodic op's interval is bounded by +-1 (when it spans
# a period) instead of evaluating the kernel at every one of them.
_ENUMERATE_LIMIT = 4096


def _with_tiny(rule, tiny):
    """``rule`` with ``tiny(srcs)`` as its smallest non-zero magnitude: for ops whose
    non-zero outputs are proven at least that large (integers, copies of inputs)."""

    def wrapped(node, srcs, env):
        iv = rule(node, srcs, env)
        return Interval(iv.lo, iv.hi, iv.nan, max(iv.tiny, tiny(srcs)))

    wrapped.__doc__ = rule.__doc__
    return wrapped


def _src_tiny(srcs):
    return min(s.tiny for s in srcs)


def _integer_tiny(srcs):
    return 1.0


def _fp16_near(c: float, lo: float, hi: float, k: int = 2) -> np.ndarray:
    """The ``k`` fp16 values on each side of ``c``, kept inside ``[lo, hi]``."""
    i = int(np.searchsorted(_FP16_GRID, c))
    near = _FP16_GRID[max(i - k, 0) : i + k]
    return near[(near >= lo) & (near <= hi)]


def _at_ends_and_zero(points=None):
    """Rule of unary ops monotone on each side of 0 and between ``points(attrs)`` (their
    critical points): the kernel at both ends, at +0 and -0 when 0 is inside (``1/-0.0``
    is -inf, ``sqrt`` and ``log`` change domain there) and at each critical point with
    its fp16 neighbours (the exact extreme over fp16 inputs). An infinite end adds the
    finite end +-65504: silu(-inf) is NaN, but silu tends to 0 there.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4,), name="x", range=(0.0, 4.0))
        >>> str(af.range_analysis(af.rsqrt(x)).nodes[-1].interval)
        '[-inf, inf]'
    """

    def rule(node, srcs, env):
        (s,) = srcs
        xs = [np.array([s.lo, s.hi])]
        for end in (-FP16_MAX, FP16_MAX):
            if s.lo <= end <= s.hi:
                xs.append(np.array([end]))
        if s.lo <= 0.0 <= s.hi:
            xs.append(np.array([0.0, -0.0]))
        for c in points(node.attrs) if points else ():
            if s.lo < c < s.hi:
                xs += [np.array([c]), _fp16_near(c, s.lo, s.hi)]
        out = get_op(node.op).emulate([np.concatenate(xs)], dict(node.attrs), env.arith)
        return hull_of_values(out, s.nan)

    return rule


def _gelu_minimum(attrs):
    return [GELU_TANH_MINIMUM if attrs.get("approximate") == "tanh" else GELU_MINIMUM]


def _silu_minimum(attrs):
    return [SILU_MINIMUM]


def _periodic(node, srcs, env) -> Interval:
    """Rule of sin and cos: the kernel at every fp16 value of the interval (exact; with
    huge arguments only a few fp16 values lie in a period), or +-1 when the interval
    spans a period and holds too many values to list. sin(+-inf) is NaN."""
    (s,) = srcs
    if not (math.isfinite(s.lo) and math.isfinite(s.hi)):
        return Interval(-1.0, 1.0, nan=True)
    i = int(np.searchsorted(_FP16_GRID, s.lo, side="left"))
    j = int(np.searchsorted(_FP16_GRID, s.hi, side="right"))
    if j - i > _ENUMERATE_LIMIT and s.hi - s.lo >= 2.0 * math.pi:
        return Interval(-1.0, 1.0, s.nan)
    xs = np.concatenate([_FP16_GRID[i:j], [s.lo, s.hi]])
    return hull_of_values(get_op(node.op).emulate([xs], dict(node.attrs), env.arith), s.nan)


def _has_inf(s: Interval) -> bool:
    return math.isinf(s.lo) or math.isinf(s.hi)


def _holds_zero(s: Interval) -> bool:
    return s.lo <= 0.0 <= s.hi


def _mul_range(node, srcs, env) -> Interval:
    """Rule of mul: ``corners`` (mul is monotone in each factor), and NaN from 0 * inf,
    whose zero can lie inside a factor's interval rather than at a corner."""
    a, b = srcs
    iv = corners(node, srcs, env)
    nan = (_has_inf(a) and _holds_zero(b)) or (_has_inf(b) and _holds_zero(a))
    return iv.with_nan(nan)


def _sum_range(node, srcs, env) -> Interval:
    """Rule of add and sub: ``corners``, and the row 2-norm of the result (a residual
    stream's): ``||fp16(a +- b)||_2 <= (1 + u) (||a||_2 + ||b||_2) + sqrt(n) 2**-25`` per
    row of ``n`` values, each operand's row norm being its own bound when it spans the
    last axis, else ``sqrt(n) max|.|``."""
    iv = corners(node, srcs, env)
    if not node.shape or iv.nan or not math.isfinite(iv.max_abs):
        return iv
    n = node.shape[-1]
    norms = []
    for t, s in zip(node.srcs, srcs):
        own = s.l2 if t.shape and t.shape[-1] == n else INF
        norms.append(min(own, math.sqrt(n) * s.max_abs))
    l2 = (1 + U16) * sum(norms) + math.sqrt(n) * ETA16
    return Interval(iv.lo, iv.hi, iv.nan, iv.tiny, l2=l2) if math.isfinite(l2) else iv


def _div_range(node, srcs, env) -> Interval:
    """Rule of div: ``corners`` when the divisor's interval excludes 0 (div is then
    monotone in each argument). A divisor that can be 0 can be -0.0 too, so a non-zero
    dividend gives both infinities; 0 / 0 is NaN."""
    a, b = srcs
    if not _holds_zero(b):
        return corners(node, srcs, env)
    if a.lo == 0.0 == a.hi:
        return Interval(0.0, 0.0, nan=True)
    nan = a.nan or b.nan or _holds_zero(a) or (_has_inf(a) and _has_inf(b))
    return Interval(-INF, INF, nan)


def _has_integer(lo: float, hi: float, limit: float, parity: int) -> bool:
    """Whether ``[lo, hi]`` holds an integer of ``parity`` (0 even, 1 odd) within
    ``+-limit``."""
    lo, hi = max(lo, -limit), min(hi, limit)
    if not lo <= hi:
        return False
    first, last = math.ceil(lo), math.floor(hi)
    return first < last or (first == last and first % 2 == parity)


def _exponent_kinds(node, b: Interval) -> tuple[bool, bool, bool, bool]:
    """Which exponents can occur: (odd integer, even integer, non-integer, +-inf).

    A weight exponent answers from its actual values, any other from its interval:
    every fp16 value of magnitude >= 1024 is an integer, >= 2048 an even one."""
    values = weight_value(node.srcs[1])
    if values is not None:
        v = values[~np.isnan(values)].ravel()
        fin = v[np.isfinite(v)]
        whole = fin[fin == np.floor(fin)]
        odd = bool((np.mod(whole, 2.0) == 1.0).any())
        even = bool((np.mod(whole, 2.0) == 0.0).any())
        return odd, even, whole.size < fin.size, fin.size < v.size
    odd = _has_integer(b.lo, b.hi, 2047.0, 1)
    even = _has_integer(b.lo, b.hi, FP16_MAX, 0)
    lo, hi = max(b.lo, -1024.0), min(b.hi, 1024.0)
    nonint = lo < hi or (lo == hi and lo != math.floor(lo))
    return odd, even, nonint, _has_inf(b)


def _pow_range(node, srcs, env) -> Interval:
    """Rule of pow. On non-negative bases pow is monotone in each argument (increasing
    in the base for a positive exponent, in the exponent for a base above 1), so the
    kernel at the corners bounds it. A negative base (-0.0 included, which any interval
    holding 0 may contain) gives ``|a|**b`` signed by the exponent's parity: negative for
    odd integers, positive for even ones, +-inf exponents and, from -0 and -inf, for
    non-integers, which give NaN from finite negative bases. ``x ** 2`` with a constant 2
    therefore bounds like ``square``.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4,), name="x", range=(-3.0, 2.0))
        >>> str(af.range_analysis(x ** 2).nodes[-1].interval)
        '[0, 9]'
    """
    a, b = srcs
    kernel = get_op(node.op).emulate

    def at(bases):
        grid = np.meshgrid(np.array(bases), np.array([b.lo, b.hi]), indexing="ij")
        out = kernel([g.ravel() for g in grid], dict(node.attrs), env.arith)
        return float(np.nanmin(out)), float(np.nanmax(out))

    parts, nan = [], a.nan or b.nan
    if a.hi >= 0.0:
        parts.append(at([a.lo if a.lo > 0.0 else 0.0, a.hi]))
    if a.lo <= 0.0:
        odd, even, nonint, infinite = _exponent_kinds(node, b)
        m, big = at([abs(min(a.hi, 0.0)), abs(a.lo)])  # +0.0, never -0.0, at the bottom
        if odd:
            parts.append((-big, -m))
        if even or infinite or (nonint and (a.hi >= 0.0 or a.lo == -INF)):
            parts.append((m, big))
        nan = nan or (nonint and a.lo < 0.0 and a.hi > -INF)
    if not parts:  # finite negative bases with non-integer exponents only: all NaN
        return Interval(0.0, 0.0, nan=True)
    return Interval(min(p[0] for p in parts), max(p[1] for p in parts), nan)


def _select_range(node, srcs, env) -> Interval:
    """Rule of select: values of ``a`` or ``b``; only ``a`` when ``cond`` can never be 0
    (NaN is non-zero), only ``b`` when it is always 0."""
    cond, a, b = srcs
    if cond.lo > 0.0 or cond.hi < 0.0:
        return a
    if cond.is_zero:
        return b
    return a.hull(b)


def _below(a: Interval, b: Interval) -> bool:
    """Every non-NaN value of ``a`` is below every one of ``b``."""
    return a.hi < b.lo


def _at_most(a: Interval, b: Interval) -> bool:
    return a.hi <= b.lo


def _one_point(a: Interval, b: Interval) -> bool:
    """Both hold one and the same value, and no NaN."""
    return a.lo == a.hi == b.lo == b.hi and not (a.nan or b.nan)


def _clean(a: Interval, b: Interval) -> bool:
    return not (a.nan or b.nan)


def _compare_range(always, never):
    """Rule of a comparison: 1 where ``always(a, b)`` proves it true for every pair of
    values (NaN compares false, except in not_equal), 0 where ``never(a, b)`` proves it
    false, else {0, 1}. The output is never NaN."""

    def rule(node, srcs, env):
        a, b = srcs
        if always(a, b):
            return Interval(1.0, 1.0)
        if never(a, b):
            return Interval(0.0, 0.0)
        return Interval(0.0, 1.0, tiny=1.0)

    return rule


# ---- the records ---------------------------------------------------------------------

# Ops whose float32 evaluation rounds to the same fp16 bits as float64 (see
# common.rounded): exact ops and the correctly rounded + - * / sqrt.
FLOAT32_EXACT = {
    "neg", "relu", "abs", "square", "sqrt", "relu6", "sign", "floor", "ceil",
    "round", "add", "sub", "mul", "div", "maximum", "minimum",
}  # fmt: skip


def unary_op(name, fn, doc, range, sign, attrs=None, flags=(), **facts) -> OpDef:  # noqa: A002
    """The record of a unary elementwise op computing the float64 function ``fn`` (its
    attributes as keywords), rounded once to fp16 (in float32 for :data:`FLOAT32_EXACT`
    ops). ``facts``: the other fields of :func:`~aneforge.graph.ops.common.fused_op`.

    Example:
        >>> import numpy as np
        >>> from aneforge.graph.facts import signed
        >>> from aneforge.graph.ranges import corners
        >>> op = unary_op("my_cube", lambda x: x**3, "x**3", corners, signed)
        >>> op.emulate([np.float16([2.0])], {}).tolist(), op.kind
        ([8.0], 'fused')
    """
    return fused_op(
        name,
        1,
        dict(attrs or {}),
        same_shape,
        rounded(fn, name in FLOAT32_EXACT),
        in_float64(fn),
        doc=doc,
        sign=sign,
        range=range,
        flags=(*flags, Flag.ELEMENTWISE, Flag.UNARY),
        **{"nest": ELEMENTWISE_NEST, **facts},
    )


def binary_op(name, fn, doc, range, sign, flags=(), scalar=None) -> OpDef:  # noqa: A002
    """The record of a binary elementwise op (NumPy broadcasting) computing ``fn``;
    ``scalar`` names the loop-nest scalar op with the same bits, where one does."""
    return fused_op(
        name,
        2,
        {},
        _binary_shape(name),
        rounded(fn, name in FLOAT32_EXACT),
        in_float64(fn),
        doc=doc,
        sign=sign,
        range=range,
        flags=(*flags, Flag.ELEMENTWISE, Flag.BINARY),
        nest=_scalar_nest(scalar),
    )


def _scalar_nest(scalar: str | None) -> LoopNest:
    """The elementwise loop nest of a binary op equal to scalar op ``scalar`` (or None)."""
    if scalar is None:
        return ELEMENTWISE_NEST
    return LoopNest("elementwise", scalar=lambda attrs: (scalar, 0, 1))


def _binary_shape(name):
    return lambda in_shapes, attrs: broadcast_shape(name, in_shapes)


def _clip_sign(node, nonneg) -> bool:
    """clip is non-negative from a lower bound >= 0, or when its input is."""
    lo = node.attrs.get("lo")
    return (lo is not None and lo >= 0) or bool(nonneg[0])


def _mul_sign(node, nonneg) -> bool:
    """mul is non-negative for ``x * x`` or when both factors are."""
    return node.srcs[0] is node.srcs[1] or all(nonneg)


def _select_sign(node, nonneg) -> bool:
    """select is non-negative when both branches are (the condition is not a value)."""
    return all(nonneg[1:])


_ZERO = _at_ends_and_zero()
_SAME_TINY = _with_tiny(corners, _src_tiny)
_INTEGER = _with_tiny(corners, _integer_tiny)
_ODD, _SAT, _MUL = Flag.ODD, Flag.SATURATES, Flag.MULTIPLIES
_UNARY_OPS = (
    unary_op("neg", np.negative, "-x", _SAME_TINY, signed, flags=(_ODD,)),
    unary_op(
        "relu",
        lambda x: np.maximum(x, 0.0),
        "max(x, 0)",
        _SAME_TINY,
        nonnegative,
        nest=LoopNest("elementwise", scalar=lambda attrs: ("max", 0, ("const", 0.0))),
    ),
    unary_op(
        "gelu",
        _gelu,
        "x * Phi(x) (erf form; approximate='tanh' for the tanh form)",
        _at_ends_and_zero(_gelu_minimum),
        signed,
        {"approximate": choice_attr(("none", "tanh"), "none", "approximate")},
    ),
    unary_op(
        "silu",
        lambda x: x * _expit(x),
        "x * sigmoid(x)",
        _at_ends_and_zero(_silu_minimum),
        signed,
    ),
    unary_op("sigmoid", _expit, "1 / (1 + exp(-x))", corners, nonnegative, flags=(_SAT,)),
    unary_op("tanh", np.tanh, "hyperbolic tangent", corners, signed, flags=(_ODD, _SAT)),
    unary_op(
        "exp",
        np.exp,
        "e**x",
        corners,
        nonnegative,
        overflow_fix="subtract the maximum before exp (af.softmax does), or keep its input "
        "below 11.09",
    ),
    unary_op("log", np.log, "natural logarithm (nan below 0, -inf at 0)", _ZERO, signed),
    unary_op("sqrt", np.sqrt, "square root", _ZERO, nonnegative),
    unary_op("rsqrt", lambda x: 1.0 / np.sqrt(x), "1 / sqrt(x)", _ZERO, nonnegative),
    unary_op("inverse", lambda x: 1.0 / x, "1 / x", _ZERO, signed),
    unary_op("abs", np.abs, "|x|", _with_tiny(_ZERO, _src_tiny), nonnegative),
    unary_op("square", np.square, "x * x", _ZERO, nonnegative, flags=(_MUL,)),
    # native from A15 (family 4); compile lowers them below it (.half_period)
    unary_op(
        "sin",
        np.sin,
        "sine",
        _periodic,
        signed,
        flags=(_ODD,),
        min_family=4,
        below_floor=SIN_LOWERING,
    ),
    unary_op(
        "cos",
        np.cos,
        "cosine",
        _periodic,
        signed,
        flags=(_SAT,),
        min_family=4,
        below_floor=COS_LOWERING,
    ),
    unary_op("erf", _erf, "error function", corners, signed, flags=(_ODD, _SAT)),
    unary_op("softplus", lambda x: np.logaddexp(0.0, x), "log(1 + e**x)", corners, nonnegative),
    unary_op(
        "relu6",
        lambda x: np.clip(x, 0.0, 6.0),
        "min(max(x, 0), 6)",
        _with_tiny(corners, lambda srcs: min(srcs[0].tiny, 6.0)),
        nonnegative,
    ),
    unary_op(
        "elu",
        _elu,
        "x if x > 0 else alpha*(e**x-1)",
        _ZERO,
        signed,
        {"alpha": float_attr(1.0, "alpha", fp16="value")},
    ),
    unary_op(
        "leaky_relu",
        _leaky_relu,
        "x if x >= 0 else alpha * x",
        _ZERO,
        signed,
        {"alpha": float_attr(0.01, "alpha", fp16="value")},
    ),
    unary_op(
        "clip",
        _clip,
        "min(max(x, lo), hi)",
        corners,
        _clip_sign,
        {"lo": float_attr(None, "lo", fp16="bound"), "hi": float_attr(None, "hi", fp16="bound")},
    ),
    unary_op("sign", np.sign, "-1, 0 or 1", _INTEGER, signed),
    unary_op("floor", np.floor, "round toward -inf", _INTEGER, signed),
    unary_op("ceil", np.ceil, "round toward +inf", _INTEGER, signed),
    unary_op("round", np.round, "round half to even", _INTEGER, signed),
)
#: The unary elementwise records by name (each has an ``af.<name>`` function).
UNARY = {op.name: op for op in _UNARY_OPS}

_COMM, _ASSOC = Flag.COMMUTATIVE, Flag.ASSOCIATIVE
_BINARY_OPS = (
    binary_op("add", np.add, "a + b", _sum_range, all_sources, (_COMM, _ASSOC), "add"),
    binary_op("sub", np.subtract, "a - b", _sum_range, signed, scalar="sub"),
    binary_op("mul", np.multiply, "a * b", _mul_range, _mul_sign, (_COMM, _ASSOC, _MUL), "mul"),
    binary_op("div", np.divide, "a / b", _div_range, all_sources, (_MUL,), "div"),
    binary_op(
        "maximum", np.maximum, "elementwise max (nan propagates)", _SAME_TINY, any_source, (_COMM,)
    ),
    binary_op(
        "minimum", np.minimum, "elementwise min (nan propagates)", _SAME_TINY, all_sources, (_COMM,)
    ),
    binary_op("pow", np.power, "a ** b", _pow_range, signed, (_MUL,)),
)
#: The binary elementwise records by name.
BINARY = {op.name: op for op in _BINARY_OPS}

# The loop-nest scalar op of each comparison (the same 1.0 / 0.0, nan comparing false).
_COMPARE_SCALAR = {
    "equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le",
    "greater": "gt", "greater_equal": "ge",
}  # fmt: skip

# name -> (float64 function, proof it is always true, proof it is always false)
COMPARE = {
    "equal": (np.equal, _one_point, lambda a, b: _below(a, b) or _below(b, a)),
    "not_equal": (np.not_equal, lambda a, b: _below(a, b) or _below(b, a), _one_point),
    "less": (np.less, lambda a, b: _clean(a, b) and _below(a, b), lambda a, b: _at_most(b, a)),
    "less_equal": (
        np.less_equal,
        lambda a, b: _clean(a, b) and _at_most(a, b),
        lambda a, b: _below(b, a),
    ),
    "greater": (
        np.greater,
        lambda a, b: _clean(a, b) and _below(b, a),
        lambda a, b: _at_most(a, b),
    ),
    "greater_equal": (
        np.greater_equal,
        lambda a, b: _clean(a, b) and _at_most(b, a),
        lambda a, b: _below(a, b),
    ),
}


def _comparison(fn):
    return lambda a, b: fn(a, b).astype(np.float64)


for _op in (*_UNARY_OPS, *_BINARY_OPS):
    register(_op)

for _name, (_fn, _always, _never) in COMPARE.items():
    register(
        fused_op(
            _name,
            2,
            {},
            _binary_shape(_name),
            rounded(_comparison(_fn), True),
            in_float64(_comparison(_fn)),
            doc=f"1.0 where {_name}(a, b) else 0.0 (nan compares false)",
            sign=nonnegative,
            range=_compare_range(_always, _never),
            flags=(Flag.ELEMENTWISE, Flag.BINARY, Flag.PREDICATE, Flag.ZERO_SIGN_BLIND),
            nest=_scalar_nest(_COMPARE_SCALAR[_name]),
        )
    )


def _select(cond, a, b):
    return np.where(cond != 0, a, b)


register(
    fused_op(
        "select",
        3,
        {},
        _binary_shape("select"),
        rounded(_select, True),
        in_float64(_select),
        doc="a where cond != 0 else b (all three broadcast)",
        sign=_select_sign,
        range=_select_range,
        flags=(Flag.ELEMENTWISE,),
        nest=ELEMENTWISE_NEST,
    )
)
