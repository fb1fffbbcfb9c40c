"""Elementwise ops against independent float64 references.

Contract (src/aneforge/graph/ops/elementwise.py): each op widens its fp16 operands to
float64, computes the exact function there and rounds the result to fp16 once. So the
emulator output must lie within one fp16 rounding of the true function of the
fp16-rounded operands: |got - ref| <= FP16_UNIT_ROUNDOFF * |ref| + FP16_TINY, with
overflow past the fp16 range giving +-inf. For + - * / and sqrt, float64 carries enough
bits that the result is the correctly rounded fp16 value, bit for bit.

The references here are written with Python's ``math`` module element by element (or
plain float64 NumPy for the arithmetic), never with the op's own kernel.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.ops.elementwise import BINARY, COMPARE, UNARY
from conftest import FP16_TINY, FP16_UNIT_ROUNDOFF, fp16_values

FP16_MAX = 65504.0
SMALLEST_SUBNORMAL = 2.0**-24
SMALLEST_NORMAL = 2.0**-14


# ---- helpers -----------------------------------------------------------------------


def run_unary(fn, x, **attrs):
    """Run ``fn(input, **attrs)`` through the emulator on the fp16 values ``x``."""
    t = af.input(x.shape, name="x")
    prog = af.compile(fn(t, **attrs))
    out = prog(x)
    assert out.dtype == np.float32
    return out.astype(np.float64)


def run_binary(fn, a, b):
    """Run ``fn(a_input, b_input)`` with two program inputs of the arrays' shapes."""
    ta, tb = af.input(a.shape, name="a"), af.input(b.shape, name="b")
    prog = af.compile(fn(ta, tb))
    return prog(a, b).astype(np.float64)


def elementwise_ref(fn, *arrays):
    """Apply the scalar float64 function ``fn`` to every (broadcast) element."""
    bcast = np.broadcast_arrays(*[np.asarray(a, np.float64) for a in arrays])
    out = np.empty(bcast[0].shape, dtype=np.float64)
    for idx in np.ndindex(out.shape):
        out[idx] = fn(*[float(a[idx]) for a in bcast])
    return out


def assert_one_rounding(got, ref):
    """``got`` is ``ref`` rounded to fp16 once: within half an ulp, overflow to inf.

    Where ``ref`` is nan, ``got`` must be nan. Where ``ref`` is beyond the largest
    value that rounds to a finite fp16 (65520), ``got`` is the matching signed inf.
    """
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(got), nan)
    overflow = ~nan & (np.abs(ref) >= 65520.0)
    np.testing.assert_array_equal(got[overflow], np.sign(ref[overflow]) * np.inf)
    rest = ~nan & ~overflow
    err = np.abs(got[rest] - ref[rest])
    bound = FP16_UNIT_ROUNDOFF * np.abs(ref[rest]) + FP16_TINY
    bad = err > bound
    assert not bad.any(), (
        f"{int(bad.sum())} element(s) off by more than one fp16 rounding; first: "
        f"got {got[rest][bad][:5]}, ref {ref[rest][bad][:5]}"
    )


def bits(a):
    """fp16 bit patterns of an array (so -0 and +0 differ)."""
    return np.asarray(a).astype(np.float16).view(np.uint16)


def _sigmoid(v):
    if v >= 0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


def _softplus(v):
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


def _gelu_erf(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))


def _sign(v):
    return 0.0 if v == 0 else math.copysign(1.0, v)


def _signed_zero(r, v):
    """IEEE rounding functions keep the sign of the operand on a zero result."""
    r = float(r)
    return math.copysign(0.0, v) if r == 0 else r


def _floor(v):
    return _signed_zero(math.floor(v), v)


def _ceil(v):
    return _signed_zero(math.ceil(v), v)


def _round_half_even(v):
    return _signed_zero(round(v), v)  # Python's round() is round-half-to-even


# name -> (scalar float64 reference, domain of test inputs: "any" | "positive" | "nonzero")
UNARY_REFS = {
    "neg": (lambda v: -v, "any"),
    "relu": (lambda v: v if v > 0 else 0.0, "any"),
    "gelu": (_gelu_erf, "any"),
    "silu": (lambda v: v * _sigmoid(v), "any"),
    "sigmoid": (_sigmoid, "any"),
    "tanh": (math.tanh, "any"),
    "exp": (math.exp, "any"),
    "log": (math.log, "positive"),
    "sqrt": (math.sqrt, "positive"),
    "rsqrt": (lambda v: 1.0 / math.sqrt(v), "positive"),
    "inverse": (lambda v: 1.0 / v, "nonzero"),
    "abs": (abs, "any"),
    "square": (lambda v: v * v, "any"),
    "sin": (math.sin, "any"),
    "cos": (math.cos, "any"),
    "erf": (math.erf, "any"),
    "softplus": (_softplus, "any"),
    "relu6": (lambda v: min(max(v, 0.0), 6.0), "any"),
    "elu": (lambda v: v if v > 0 else math.expm1(v), "any"),
    "leaky_relu": (lambda v: v if v >= 0 else 0.01 * v, "any"),
    "clip": (lambda v: v, "any"),  # no bounds given: the identity
    "sign": (_sign, "any"),
    "floor": (_floor, "any"),
    "ceil": (_ceil, "any"),
    "round": (_round_half_even, "any"),
}


def unary_inputs(rng, domain):
    """fp16 test values for a domain: random spreads plus a few fixed points."""
    spread = np.concatenate(
        [fp16_values(rng, 200, 1.0), fp16_values(rng, 200, 4.0), fp16_values(rng, 40, 0.01)]
    )
    fixed = np.array([0.5, 1.0, 1.5, 2.5, 3.0, 7.0, -0.5, -1.5, -2.5, -3.0, -7.0])
    x = np.concatenate([spread, fixed])
    if domain == "positive":
        x = np.abs(x)
        x = x[x > 0]
    elif domain == "nonzero":
        x = x[x != 0]
    return x


# ---- unary ops ---------------------------------------------------------------------


def test_reference_table_covers_every_unary_op():
    assert set(UNARY) == set(UNARY_REFS), set(UNARY) ^ set(UNARY_REFS)


@pytest.mark.parametrize("name", sorted(UNARY_REFS))
def test_unary_within_one_rounding(name, rng):
    ref_fn, domain = UNARY_REFS[name]
    x = unary_inputs(rng, domain)
    got = run_unary(getattr(af, name), x)
    assert_one_rounding(got, elementwise_ref(ref_fn, x))


@pytest.mark.parametrize("name", sorted(UNARY_REFS))
def test_unary_method_matches_function(name, rng):
    x = unary_inputs(rng, UNARY_REFS[name][1])[:32]
    t = af.input(x.shape)
    as_method, as_function = af.compile([getattr(t, name)(), getattr(af, name)(t)])(x)
    np.testing.assert_array_equal(bits(as_method), bits(as_function))


@pytest.mark.parametrize("name", ["neg", "abs", "sqrt", "square", "floor", "ceil", "round"])
def test_exact_unary_ops_are_correctly_rounded_bit_for_bit(name, rng):
    ref_fn, domain = UNARY_REFS[name]
    x = unary_inputs(rng, domain)
    got = run_unary(getattr(af, name), x)
    want = elementwise_ref(ref_fn, x).astype(np.float16)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_round_is_half_to_even():
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 1023.5, 0.25, 0.75])
    got = run_unary(af.round, x)
    np.testing.assert_array_equal(got, [0, 2, 2, 4, -0.0, -2, -2, 1024, 0, 1])


def test_unary_edge_values():
    tiny, sub = SMALLEST_SUBNORMAL, 2.0**-20
    x = np.array([0.0, -0.0, FP16_MAX, -FP16_MAX, tiny, -tiny, sub, SMALLEST_NORMAL])
    np.testing.assert_array_equal(bits(run_unary(af.neg, x)), bits(-x))
    np.testing.assert_array_equal(run_unary(af.abs, x), np.abs(x))
    np.testing.assert_array_equal(run_unary(af.relu, x), [0, 0, FP16_MAX, 0, tiny, 0, sub, 2**-14])
    # x*x overflows past 255.9..., and the square of a tiny subnormal underflows to zero.
    np.testing.assert_array_equal(run_unary(af.square, x), [0, 0, np.inf, np.inf, 0, 0, 0, 0])
    np.testing.assert_array_equal(run_unary(af.sign, x), [0, 0, 1, -1, 1, -1, 1, 1])
    # 1/x of a subnormal overflows; 1/(+-0) is +-inf.
    np.testing.assert_array_equal(
        run_unary(af.inverse, x[[0, 1, 4, 5]]), [np.inf, -np.inf, np.inf, -np.inf]
    )
    got = run_unary(af.inverse, np.array([FP16_MAX, -FP16_MAX]))
    assert_one_rounding(got, [1 / FP16_MAX, -1 / FP16_MAX])
    np.testing.assert_array_equal(run_unary(af.sqrt, np.array([0.0, tiny, 4.0])), [0, 2**-12, 2])


def test_unary_infinities():
    x = np.array([np.inf, -np.inf])
    np.testing.assert_array_equal(run_unary(af.exp, x), [np.inf, 0.0])
    np.testing.assert_array_equal(run_unary(af.tanh, x), [1.0, -1.0])
    np.testing.assert_array_equal(run_unary(af.sigmoid, x), [1.0, 0.0])
    np.testing.assert_array_equal(run_unary(af.relu, x), [np.inf, 0.0])
    np.testing.assert_array_equal(run_unary(af.relu6, x), [6.0, 0.0])
    np.testing.assert_array_equal(run_unary(af.abs, x), [np.inf, np.inf])
    np.testing.assert_array_equal(run_unary(af.inverse, x), [0.0, -0.0])
    np.testing.assert_array_equal(run_unary(af.erf, x), [1.0, -1.0])
    np.testing.assert_array_equal(run_unary(af.sqrt, np.array([np.inf])), [np.inf])
    np.testing.assert_array_equal(run_unary(af.rsqrt, np.array([np.inf])), [0.0])


def test_log_domain_edges():
    got = run_unary(af.log, np.array([0.0, -0.0, -1.0, 1.0, np.inf]))
    assert got[0] == -np.inf and got[1] == -np.inf
    assert np.isnan(got[2])
    assert got[3] == 0.0 and got[4] == np.inf


def test_rsqrt_of_zero_and_tiny():
    got = run_unary(af.rsqrt, np.array([0.0, SMALLEST_SUBNORMAL, SMALLEST_NORMAL]))
    # rsqrt(2**-24) = 2**12 and rsqrt(2**-14) = 2**7 exactly.
    np.testing.assert_array_equal(got, [np.inf, 4096.0, 128.0])


def test_exp_overflows_to_inf():
    x = np.array([11.0, 11.09375, 12.0, 20.0, -20.0])
    got = run_unary(af.exp, x)
    # e**11 = 59874 fits fp16; e**11.09375 = 65744 and e**12 = 162755 are past 65520.
    assert np.isfinite(got[0]) and got[0] == np.float16(math.exp(11.0))
    assert got[1] == np.inf and got[2] == np.inf and got[3] == np.inf
    # e**-20 = 2.06e-9 is below half the smallest subnormal: it rounds to zero.
    assert got[4] == 0.0


def test_square_overflow_boundary():
    got = run_unary(af.square, np.array([255.875, 256.0, -300.0]))
    assert got[0] == np.float16(255.875**2)  # 65472.02 rounds to 65472, finite
    assert got[1] == np.inf and got[2] == np.inf


# ---- attribute ops -----------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 1.5, 0.125])
def test_elu_alpha(alpha, rng):
    x = unary_inputs(rng, "any")
    got = run_unary(af.elu, x, alpha=alpha)
    assert_one_rounding(got, elementwise_ref(lambda v: v if v > 0 else alpha * math.expm1(v), x))


@pytest.mark.parametrize("alpha", [0.25, 0.01, 2.0])
def test_leaky_relu_alpha(alpha, rng):
    x = unary_inputs(rng, "any")
    got = run_unary(af.leaky_relu, x, alpha=alpha)
    assert_one_rounding(got, elementwise_ref(lambda v: v if v >= 0 else alpha * v, x))


def test_leaky_relu_default_alpha_is_one_percent():
    got = run_unary(af.leaky_relu, np.array([-100.0, -1.0, 3.0]))
    assert_one_rounding(got, [-1.0, -0.01, 3.0])


@pytest.mark.parametrize(("lo", "hi"), [(-1.0, 2.0), (-1.0, None), (None, 2.0), (0.5, 0.5)])
def test_clip_bounds(lo, hi, rng):
    x = unary_inputs(rng, "any")
    lo_v = -math.inf if lo is None else lo
    hi_v = math.inf if hi is None else hi
    got = run_unary(af.clip, x, lo=lo, hi=hi)
    want = elementwise_ref(lambda v: min(max(v, lo_v), hi_v), x)
    np.testing.assert_array_equal(got, want)  # all values are fp16: clipping is exact


def test_gelu_tanh_approximation(rng):
    x = unary_inputs(rng, "any")
    got = run_unary(af.gelu, x, approximate="tanh")
    assert_one_rounding(got, elementwise_ref(_gelu_tanh, x))
    # The two forms differ visibly somewhere (else the attribute would be ignored).
    erf_form = run_unary(af.gelu, x)
    assert not np.array_equal(got, erf_form)


def test_gelu_default_is_erf_form():
    x = np.array([-3.0, -1.0, 0.5, 1.0, 2.0])
    np.testing.assert_array_equal(run_unary(af.gelu, x), run_unary(af.gelu, x, approximate="none"))


# ---- binary ops --------------------------------------------------------------------

BINARY_REFS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "maximum": max,
    "minimum": min,
    "pow": math.pow,
}


def test_reference_table_covers_every_binary_op():
    assert set(BINARY) == set(BINARY_REFS)


def random_fp16_bits(rng, n):
    """Finite fp16 values drawn uniformly over bit patterns (so every binade appears)."""
    raw = rng.integers(0, 2**16, size=4 * n, dtype=np.uint16).view(np.float16)
    vals = raw[np.isfinite(raw)][:n]
    assert vals.size == n
    return vals.astype(np.float64)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_arithmetic_is_correctly_rounded_over_all_binades(name, rng):
    a, b = random_fp16_bits(rng, 20000), random_fp16_bits(rng, 20000)
    if name == "div":
        b[b == 0] = 1.0
    got = run_binary(getattr(af, name), a, b)
    with np.errstate(all="ignore"):
        exact = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[name]
        want = exact.astype(np.float16)
    np.testing.assert_array_equal(bits(got), bits(want))
    assert_one_rounding(got, exact)


@pytest.mark.parametrize("name", sorted(BINARY_REFS))
def test_binary_within_one_rounding(name, rng):
    a = fp16_values(rng, (6, 40), 3.0)
    b = fp16_values(rng, (6, 40), 3.0)
    if name == "div":
        b[b == 0] = 0.5
    if name == "pow":  # real results only: positive bases, any exponent
        a = (np.abs(a) + 0.0625).astype(np.float16).astype(np.float64)
    got = run_binary(getattr(af, name), a, b)
    assert_one_rounding(got, elementwise_ref(BINARY_REFS[name], a, b))


def test_pow_negative_base_integer_exponent():
    a = np.array([-2.0, -3.0, -0.5, -1.5])
    b = np.array([3.0, 2.0, 4.0, -1.0])
    assert_one_rounding(run_binary(af.pow, a, b), [-8.0, 9.0, 0.0625, -1 / 1.5])


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((3, 1), (1, 4)), ((2, 1, 3, 1, 4), (1, 5, 1, 2, 1)), ((4,), (2, 3, 4)), ((), (3, 2))],
)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum"])
def test_binary_broadcasting(name, shape_a, shape_b, rng):
    a = fp16_values(rng, shape_a, 2.0)
    b = fp16_values(rng, shape_b, 2.0) + 8.0  # keep divisors away from zero
    b = b.astype(np.float16).astype(np.float64)
    out_shape = np.broadcast_shapes(shape_a, shape_b)
    node = getattr(af, name)(af.input(shape_a), af.input(shape_b))
    got = af.compile(node)(a, b).astype(np.float64)
    assert node.shape == out_shape
    assert got.shape == out_shape
    assert_one_rounding(got, elementwise_ref(BINARY_REFS[name], a, b))


def test_scalar_operands_on_both_sides(rng):
    x = fp16_values(rng, (3, 5), 2.0)
    x[x == 0] = 1.0
    t = af.input(x.shape)
    outs = af.compile(
        [t + 1.5, 1.5 + t, t - 1.5, 1.5 - t, t * 3.0, 3.0 * t, t / 4.0, 4.0 / t, t**2.0, -t]
    )(x)
    with np.errstate(all="ignore"):
        wants = [x + 1.5, 1.5 + x, x - 1.5, 1.5 - x, x * 3, 3 * x, x / 4, 4 / x, x * x, -x]
    for got, want in zip(outs, wants):
        assert got.shape == (3, 5)
        np.testing.assert_array_equal(bits(got), bits(want.astype(np.float16)))


def test_ndarray_operands_on_both_sides(rng):
    x = fp16_values(rng, (3, 4), 2.0)
    w = fp16_values(rng, (4,), 2.0)
    t = af.input(x.shape)
    left, right = af.compile([w - t, t - w])(x)
    np.testing.assert_array_equal(bits(left), bits((w - x).astype(np.float16)))
    np.testing.assert_array_equal(bits(right), bits((x - w).astype(np.float16)))


def test_scalar_weights_are_rounded_to_fp16_first():
    t = af.input((1,))
    # 0.1 is not an fp16 value: the weight is fp16(0.1) = 0.0999755859375.
    got = af.compile(t * 0.1)(np.array([1.0]))
    assert got[0] == np.float16(0.1)
    assert af.reference(t * 0.1, np.array([1.0]))[0] == float(np.float16(0.1))


def test_binary_overflow_and_rounding_edges():
    a = np.array([300.0, -300.0, FP16_MAX, FP16_MAX, FP16_MAX, -FP16_MAX, 2.0**-13, 2.0**-12])
    b = np.array([300.0, 300.0, 16.0, 15.0, -FP16_MAX, -32.0, 2.0**-12, 2.0**-12])
    prod = run_binary(af.mul, a[:2], b[:2])
    np.testing.assert_array_equal(prod, [np.inf, -np.inf])  # 90000 is past fp16
    total = run_binary(af.add, a[2:6], b[2:6])
    # 65504 + 16 = 65520 is the tie between 65504 and 2**16: it rounds (to even) to inf.
    np.testing.assert_array_equal(total, [np.inf, FP16_MAX, 0.0, -np.inf])
    tiny = run_binary(af.mul, a[6:], b[6:])
    # 2**-25 ties between 0 and 2**-24 and rounds to even (0); 2**-24 is the subnormal.
    np.testing.assert_array_equal(tiny, [0.0, SMALLEST_SUBNORMAL])


def test_subnormal_arithmetic():
    sub = SMALLEST_SUBNORMAL
    a = np.array([sub, 3 * sub, SMALLEST_NORMAL, SMALLEST_NORMAL])
    b = np.array([sub, -sub, -sub, 0.75])
    np.testing.assert_array_equal(run_binary(af.add, a, b), [2 * sub, 2 * sub, 1023 * sub, 0.75])
    np.testing.assert_array_equal(
        run_binary(af.mul, a[2:], np.array([0.75, 0.5])), [0.75 * 2.0**-14, 2.0**-15]
    )


def test_maximum_minimum_propagate_nan():
    a = np.array([np.nan, 1.0, -np.inf, 2.0])
    b = np.array([1.0, np.nan, 3.0, np.inf])
    mx, mn = run_binary(af.maximum, a, b), run_binary(af.minimum, a, b)
    assert np.isnan(mx[:2]).all() and np.isnan(mn[:2]).all()
    np.testing.assert_array_equal(mx[2:], [3.0, np.inf])
    np.testing.assert_array_equal(mn[2:], [-np.inf, 2.0])


def test_inf_arithmetic():
    a = np.array([np.inf, np.inf, np.inf, 1.0, 0.0])
    b = np.array([1.0, -np.inf, 0.0, 0.0, 0.0])
    s = run_binary(af.add, a[:2], b[:2])
    assert s[0] == np.inf and np.isnan(s[1])
    p = run_binary(af.mul, a[2:3], b[2:3])
    assert np.isnan(p[0])
    q = run_binary(af.div, a[3:], b[3:])
    assert q[0] == np.inf and np.isnan(q[1])


# ---- comparisons and select --------------------------------------------------------

COMPARE_REFS = {
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
}


def test_reference_table_covers_every_comparison():
    assert set(COMPARE) == set(COMPARE_REFS)


@pytest.mark.parametrize("name", sorted(COMPARE_REFS))
def test_comparisons_give_exact_ones_and_zeros(name, rng):
    a = np.round(fp16_values(rng, (4, 1, 6), 2.0))  # rounded: many ties between a and b
    b = np.round(fp16_values(rng, (3, 1), 2.0))
    a[0, 0, :3] = [0.0, -0.0, np.inf]
    got = run_binary(getattr(af, name), a, b)
    want = elementwise_ref(lambda p, q: float(COMPARE_REFS[name](p, q)), a, b)
    assert got.shape == (4, 3, 6)
    np.testing.assert_array_equal(got, want)
    assert set(np.unique(got)) <= {0.0, 1.0}
    assert 0.0 < got.mean() < 1.0  # both outcomes occur


@pytest.mark.parametrize("name", ["equal", "less", "less_equal", "greater", "greater_equal"])
def test_ordered_comparisons_with_nan_are_false(name):
    a = np.array([np.nan, np.nan, 1.0])
    b = np.array([np.nan, 1.0, np.nan])
    np.testing.assert_array_equal(run_binary(getattr(af, name), a, b), [0.0, 0.0, 0.0])


def test_comparison_operators_map_to_ops(rng):
    x = np.round(fp16_values(rng, (20,), 2.0))
    t = af.input(x.shape)
    nodes = [t < 0.0, t <= 0.0, t > 0.0, t >= 0.0]
    assert [n.op for n in nodes] == ["less", "less_equal", "greater", "greater_equal"]
    outs = af.compile(nodes)(x)
    for got, want in zip(outs, [x < 0, x <= 0, x > 0, x >= 0]):
        np.testing.assert_array_equal(got, want.astype(np.float32))


def test_equal_treats_signed_zeros_as_equal():
    got = run_binary(af.equal, np.array([0.0, -0.0]), np.array([-0.0, 0.0]))
    np.testing.assert_array_equal(got, [1.0, 1.0])


def test_select_with_broadcasting(rng):
    cond = np.array([[1.0], [0.0], [-0.0], [np.nan], [0.5]])  # (5, 1): nonzero picks a
    a = fp16_values(rng, (1, 4), 2.0)
    b = fp16_values(rng, (5, 4), 2.0)
    tc, ta, tb = af.input(cond.shape), af.input(a.shape), af.input(b.shape)
    node = af.select(tc, ta, tb)
    assert node.shape == (5, 4)
    got = af.compile(node)(cond, a, b)
    want = np.where(np.array([True, False, False, True, True])[:, None], a, b)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_select_with_scalar_branches(rng):
    x = fp16_values(rng, (50,), 1.0)
    t = af.input(x.shape)
    got = af.compile(af.select(t > 0, t, 0.0))(x)
    np.testing.assert_array_equal(got, np.where(x > 0, x, 0.0))
    got = af.compile(af.select(t, 2.0, -3.0))(x)
    np.testing.assert_array_equal(got, np.where(x != 0, 2.0, -3.0))


def test_relu_via_select_matches_relu(rng):
    x = fp16_values(rng, (64,), 3.0)
    t = af.input(x.shape)
    via_select, direct = af.compile([af.select(t > 0, t, 0.0), af.relu(t)])(x)
    np.testing.assert_array_equal(via_select, direct)


def test_elementwise_ops_chain_round_each_step():
    # (1 + 2**-11) rounds to 1 in fp16 (a tie, to even), so (1 + 2**-11) - 1 is 0 here,
    # while float64 gives 2**-11: every op result is rounded before the next op reads it.
    t = af.input((1,))
    node = (t + 2.0**-11) - 1.0
    assert af.compile(node)(np.array([1.0]))[0] == 0.0
    assert af.reference(node, np.array([1.0]))[0] == 2.0**-11  # float64 keeps it
    node2 = (t + 2.0**-10) - 1.0
    assert af.compile(node2)(np.array([1.0]))[0] == 2.0**-10  # 1 + 2**-10 is an fp16 value
