"""Range rules of the elementwise ops (unary, binary, comparisons, select) and gather.

Soundness: for inputs drawn inside the declared ranges, every value the emulator
produces lies in its node's interval (``RangeReport.violations`` runs the emulator and
returns what escapes). Unary ops are fed every fp16 value of a short interval (and -0.0),
so there the check is exhaustive; binary ops get the cross product of adversarial
candidates (both ends, +-0, the ends' neighbours, integers and random values) through
broadcasting. Tightness: the rules evaluate the kernel at the extremes, so most bounds
are exact; the tests assert that, and the brief's ratio (bound max |v| over the largest
|v| seen on random inputs) where they are not.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.ops.elementwise import (
    BINARY,
    COMPARE,
    GELU_MINIMUM,
    GELU_TANH_MINIMUM,
    SILU_MINIMUM,
    UNARY,
)
from aneforge.graph.ranges import Interval, RangeEnv
from aneforge.graph.registry import get_op

TARGETS = (None, "M1", "M4")
FP16_MAX = 65504.0
# Every non-NaN fp16 value, ascending, +-inf included and one zero.
GRID = np.unique(np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float64))
GRID = GRID[~np.isnan(GRID)]
GRID[GRID == 0] = 0.0  # the zero np.unique kept may be -0.0; between() adds -0.0
FINITE = GRID[np.isfinite(GRID)]
# Ends that random ranges are built from: the places where the ops change behaviour.
ENDS = np.array(
    [0.0, 2.0**-24, 2.0**-14, 1e-3, 0.1, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 3.14, 4.0,
     6.0, 7.0, 11.0, 12.0, 16.0, 100.0, 256.0, 1000.0, 2048.0, 8192.0, 30000.0, 65504.0]
)  # fmt: skip


def fp16(v):
    return float(np.float16(v))


def between(lo, hi):
    """Every fp16 value in ``[lo, hi]``, with -0.0 when 0 is inside."""
    v = GRID[(lo <= GRID) & (hi >= GRID)]
    return np.concatenate([v, [-0.0]]) if lo <= 0.0 <= hi else v


def random_range(rng):
    """A random fp16 range: short ones (listed exhaustively), wide ones, one-sided ones,
    single points, and ends at 0 and at the ops' special points."""
    lo, hi = _random_range(rng)
    return fp16(lo), fp16(hi)


def _random_range(rng):
    kind = rng.integers(6)
    if kind == 0:  # a short run of consecutive fp16 values anywhere
        i = int(rng.integers(0, FINITE.size))
        j = min(i + int(rng.integers(0, 3000)), FINITE.size - 1)
        return FINITE[i], FINITE[j]
    if kind == 1:  # a single point
        v = FINITE[int(rng.integers(0, FINITE.size))] if rng.random() < 0.5 else rng.choice(ENDS)
        return v, v
    if kind == 2:  # two special ends with random signs
        a, b = rng.choice(ENDS, 2) * rng.choice([-1.0, 1.0], 2)
        return min(a, b), max(a, b)
    if kind == 3:  # one end at 0
        m = rng.choice(ENDS[1:])
        return (0.0, m) if rng.random() < 0.5 else (-m, 0.0)
    # log-uniform magnitudes with random signs
    a, b = (rng.choice([-1.0, 1.0], 2) * 10.0 ** rng.uniform(-6, 4.8, 2)).tolist()
    return min(a, b), max(a, b)


def candidates(rng, lo, hi, k):
    """``k`` adversarial fp16 values inside ``[lo, hi]``: both ends, +-0, the ends' fp16
    neighbours, integers and half-integers, then random values (uniform and log-uniform)."""
    inside = GRID[(lo <= GRID) & (hi >= GRID)]
    fixed = [lo, hi, inside[:3], inside[-3:]]
    if lo <= 0.0 <= hi:
        fixed.append([0.0, -0.0])
    ints = np.arange(max(math.ceil(lo), -6), min(math.floor(hi), 6) + 1, dtype=np.float64)
    fixed += [ints, ints + 0.5]
    v = np.concatenate([np.ravel(f) for f in fixed])
    v = v[(v >= lo) & (v <= hi)]
    rest = max(k - v.size, 0)
    uniform = rng.uniform(lo, hi, rest)
    mags = 10.0 ** rng.uniform(-8, math.log10(max(abs(lo), abs(hi), 1e-8)), rest)
    logs = np.clip(mags * rng.choice([-1.0, 1.0], rest), lo, hi)
    pool = np.where(rng.random(rest) < 0.5, uniform, logs)
    out = np.concatenate([v, pool])[:k]
    rng.shuffle(out)
    return out.astype(np.float16)


def observed(rep, out, *feeds):
    """The emulator's values of ``out`` for ``feeds`` (run through the report's program)."""
    prog = rep.program
    assert len(prog.outputs) == 1 and prog.outputs[0] is out
    return execute_fp16(prog, list(feeds), target=rep.target)[0]


def hull_of(values):
    v = np.asarray(values, np.float64)
    v = v[~np.isnan(v)]
    return (float(v.min()), float(v.max())) if v.size else None


def build(fn, *shapes, names=("a", "b", "c")):
    ins = [af.input(s, name=n) for s, n in zip(shapes, names)]
    out = fn(*ins)
    return af.compile(out), out


# ---- unary ops ------------------------------------------------------------------------

UNARY_CASES = [(name, {}) for name in sorted(UNARY)] + [
    ("gelu", {"approximate": "tanh"}),
    ("elu", {"alpha": -0.5}),
    ("elu", {"alpha": 2.5}),
    ("leaky_relu", {"alpha": -0.3}),
    ("leaky_relu", {"alpha": 0.0}),
    ("leaky_relu", {"alpha": 3.0}),
    ("clip", {"lo": -1.5, "hi": 2.0}),
    ("clip", {"lo": 0.1}),
    ("clip", {"hi": -3.0}),
    ("clip", {"lo": 2.0, "hi": -1.0}),
]
UNARY_IDS = [name + "".join(f"-{k}={v}" for k, v in attrs.items()) for name, attrs in UNARY_CASES]
UNARY_FEED = 4096


@pytest.mark.parametrize(("name", "attrs"), UNARY_CASES, ids=UNARY_IDS)
def test_unary_rule_is_sound_and_exact(name, attrs):
    """300 random ranges; a range of at most 4096 fp16 values is fed all of them, and
    the bound must then equal the hull of the emulated values exactly."""
    rng = np.random.default_rng(zlib.crc32(repr((name, attrs)).encode()))
    prog, out = build(lambda x: getattr(af, name)(x, **attrs), (UNARY_FEED,))
    for case in range(300):
        lo, hi = random_range(rng)
        every = between(lo, hi)
        exhaustive = every.size <= UNARY_FEED
        if exhaustive:
            feed = np.resize(every, UNARY_FEED).astype(np.float16)
        else:
            feed = candidates(rng, lo, hi, UNARY_FEED)
        rep = af.range_analysis(prog, {"a": (lo, hi)}, target=TARGETS[case % 3])
        bad = rep.violations(feed)
        iv = rep.interval(out)
        assert bad == [], (name, attrs, lo, hi, iv, bad[0][1])
        got = observed(rep, out, feed)
        if exhaustive:
            assert hull_of(got) in (None, (iv.lo, iv.hi)), (name, lo, hi, iv, hull_of(got))
            assert iv.nan == bool(np.isnan(got).any()), (name, lo, hi, iv)


@pytest.mark.parametrize(("name", "attrs"), UNARY_CASES, ids=UNARY_IDS)
def test_unary_rule_on_unknown_input(name, attrs):
    """An input without a range: every fp16 value, inf and NaN included, stays inside."""
    prog, out = build(lambda x: getattr(af, name)(x, **attrs), (GRID.size + 2,))
    rep = af.range_analysis(prog)
    feed = np.concatenate([GRID, [-0.0, np.nan]]).astype(np.float16)
    assert rep.violations(feed) == []
    iv = rep.interval(out)
    got = observed(rep, out, feed)
    assert hull_of(got) == (iv.lo, iv.hi) and iv.nan
    assert not rep.hazards


# (op, attrs, range): a representative range per op, every fp16 value of it fed.
REPRESENTATIVE = [
    ("neg", {}, (-3, 2)),
    ("relu", {}, (-1, 2)),
    ("gelu", {}, (-3, 3)),
    ("gelu", {"approximate": "tanh"}, (-3, 3)),
    ("silu", {}, (-3, 3)),
    ("sigmoid", {}, (-3, 3)),
    ("tanh", {}, (-3, 3)),
    ("exp", {}, (-3, 3)),
    ("log", {}, (0.5, 4)),
    ("sqrt", {}, (0, 4)),
    ("rsqrt", {}, (0.25, 4)),
    ("inverse", {}, (0.25, 4)),
    ("abs", {}, (-3, 2)),
    ("square", {}, (-3, 2)),
    ("sin", {}, (-3, 3)),
    ("cos", {}, (-3, 3)),
    ("erf", {}, (-3, 3)),
    ("softplus", {}, (-3, 3)),
    ("relu6", {}, (-3, 8)),
    ("elu", {}, (-3, 3)),
    ("leaky_relu", {}, (-3, 3)),
    ("clip", {"lo": -1.0, "hi": 1.0}, (-3, 3)),
    ("sign", {}, (-3, 3)),
    ("floor", {}, (-3, 3)),
    ("ceil", {}, (-3, 3)),
    ("round", {}, (-3, 3)),
]


@pytest.mark.parametrize(("name", "attrs", "rng_"), REPRESENTATIVE, ids=lambda v: str(v))
def test_unary_tightness_on_a_representative_range(name, attrs, rng_):
    """Exact over every fp16 input of the range; on random inputs the brief's ratio
    (bound over the largest |v| of 100 random draws) stays far under 10."""
    lo, hi = rng_
    prog, out = build(lambda x: getattr(af, name)(x, **attrs), (GRID.size,))
    rep = af.range_analysis(prog, {"a": rng_})
    iv = rep.interval(out)
    every = between(lo, hi)
    got = observed(rep, out, np.resize(every, GRID.size).astype(np.float16))
    assert (iv.lo, iv.hi) == hull_of(got) and not iv.nan
    rng = np.random.default_rng(1)
    seen = max(
        np.abs(observed(rep, out, rng.uniform(lo, hi, GRID.size).astype(np.float16))).max()
        for _ in range(3)
    )
    assert iv.max_abs <= 1.01 * seen


def test_exact_bounds_of_named_cases():
    x = af.input((4,), name="x")
    cases = [
        (af.relu(x), (-1, 2), (0.0, 2.0)),
        (af.sigmoid(x), (-1, 1), (fp16(1 / (1 + math.e)), fp16(1 / (1 + math.exp(-1))))),
        (af.square(x), (-3, 2), (0.0, 9.0)),
        (af.abs(x), (-3, 2), (0.0, 3.0)),
        (af.log(x), (0, 1), (-math.inf, 0.0)),
        (af.sqrt(x), (-1, 4), (0.0, 2.0)),
        (af.inverse(x), (-1, 2), (-math.inf, math.inf)),
        (af.inverse(x), (0.5, 2), (0.5, 2.0)),
        (af.inverse(x), (-2, -0.5), (-2.0, -0.5)),
        (af.sin(x), (-10, 10), (-1.0, 1.0)),
        (af.cos(x), (0, 0), (1.0, 1.0)),
        (af.leaky_relu(x, alpha=-0.5), (-4, 1), (0.0, 2.0)),
        (af.elu(x, alpha=-1.0), (-30, 1), (0.0, 1.0)),
    ]
    for y, rng_, want in cases:
        iv = af.range_analysis(y, {"x": rng_}).interval(y)
        assert (iv.lo, iv.hi) == want, (y.op, rng_, iv)
    # 1 / -0.0 = -inf: an interval that holds 0 holds -0.0
    y = af.inverse(x)
    iv = af.range_analysis(y, {"x": (0, 2)}).interval(y)
    assert (iv.lo, iv.hi) == (-math.inf, math.inf)
    assert af.range_analysis(y, {"x": (0, 2)}).violations(np.array([-0.0, 0, 1, 2])) == []


def test_gelu_and_silu_minima_are_the_roots_of_their_derivatives():
    from scipy import optimize, special

    def d_gelu(x):
        return 0.5 * (1 + special.erf(x / math.sqrt(2))) + x * math.exp(-x * x / 2) / math.sqrt(
            2 * math.pi
        )

    def gelu_tanh(x):
        return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    def d_silu(x):
        s = special.expit(x)
        return s * (1 + x * (1 - s))

    assert optimize.brentq(d_gelu, -3, -0.1, xtol=1e-15) == pytest.approx(GELU_MINIMUM, abs=1e-12)
    assert optimize.brentq(d_silu, -3, -0.1, xtol=1e-15) == pytest.approx(SILU_MINIMUM, abs=1e-12)
    found = optimize.minimize_scalar(gelu_tanh, bracket=(-2, -1, 0), tol=1e-12).x
    assert found == pytest.approx(GELU_TANH_MINIMUM, abs=1e-6)
    # one minimum each: the float64 functions fall before it and rise after it
    xs = np.linspace(-12, 12, 200001)
    for name, attrs, c in (
        ("gelu", "none", GELU_MINIMUM),
        ("gelu", "tanh", GELU_TANH_MINIMUM),
        ("silu", None, SILU_MINIMUM),
    ):
        kw = {"approximate": attrs} if attrs else {}
        f = get_op(name).exact([xs], kw)
        d = np.diff(f)
        assert (d[xs[1:] < c - 1e-4] <= 1e-15).all() and (d[xs[:-1] > c + 1e-4] >= -1e-15).all()


def test_periodic_ops_with_huge_arguments_are_exact():
    """Near 30000 only a few fp16 values lie in a period: the rule lists them."""
    x = af.input((64,), name="x")
    for fn in (af.sin, af.cos):
        y = fn(x)
        rep = af.range_analysis(y, {"x": (30000, 30100)})
        iv = rep.interval(y)
        every = between(30000, 30100)
        got = observed(rep, y, np.resize(every, 64).astype(np.float16))
        assert (iv.lo, iv.hi) == hull_of(got) and iv.max_abs < 1.0


# ---- binary ops -----------------------------------------------------------------------

BINARY_FEED = 40  # candidates per operand: 1600 pairs by broadcasting (40, 1) with (1, 40)
EXACT_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")


def binary_case(rng, name, lo_a, hi_a, lo_b, hi_b, prog, out, target):
    a = candidates(rng, lo_a, hi_a, BINARY_FEED).reshape(-1, 1)
    b = candidates(rng, lo_b, hi_b, BINARY_FEED).reshape(1, -1)
    rep = af.range_analysis(prog, {"a": (lo_a, hi_a), "b": (lo_b, hi_b)}, target=target)
    bad = rep.violations(a, b)
    iv = rep.interval(out)
    assert bad == [], (name, (lo_a, hi_a), (lo_b, hi_b), iv, bad[0][1])
    return iv, observed(rep, out, a, b)


def pow_range(rng):
    """Ranges for pow's exponent: integers (odd, even), small reals, wide ones."""
    kind = rng.integers(4)
    if kind == 0:
        k = float(rng.integers(-5, 6))
        return k, k
    if kind == 1:
        k = float(rng.integers(-5, 6))
        return k, k + float(rng.integers(0, 3))
    if kind == 2:
        return fp16(rng.uniform(-3, 0)), fp16(rng.uniform(0, 3))
    return random_range(rng)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_rule_is_sound(name):
    rng = np.random.default_rng(sorted(BINARY).index(name))
    prog, out = build(getattr(af, name), (BINARY_FEED, 1), (1, BINARY_FEED))
    for case in range(320):
        lo_a, hi_a = random_range(rng)
        lo_b, hi_b = pow_range(rng) if name == "pow" else random_range(rng)
        iv, got = binary_case(rng, name, lo_a, hi_a, lo_b, hi_b, prog, out, TARGETS[case % 3])
        if name in EXACT_BINARY:  # both ends and +-0 are among the candidates
            assert hull_of(got) in (None, (iv.lo, iv.hi)), (name, lo_a, hi_a, lo_b, hi_b, iv)
            assert iv.nan == bool(np.isnan(got).any())
        if name == "pow" and lo_a >= 0 and 0 not in (lo_a, hi_a):
            assert hull_of(got) == (iv.lo, iv.hi)  # corners, exact on positive bases


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_rule_with_a_weight_operand(name):
    """One operand a constant (broadcast per channel), as in x * w or x ** 2."""
    rng = np.random.default_rng(7)
    for case in range(100):
        lo, hi = random_range(rng)
        if name == "pow":
            w = rng.choice([2.0, 3.0, -1.0, 0.5, -2.0, 0.0, 1.0], int(rng.integers(1, 4)))
        else:
            w = candidates(rng, *random_range(rng), int(rng.integers(1, 4)))
        x = af.input((BINARY_FEED, 1), name="x")
        wt = af.weight(np.asarray(w, np.float16).reshape(1, -1))
        y = getattr(af, name)(x, wt) if case % 2 == 0 else getattr(af, name)(wt, x)
        rep = af.range_analysis(y, {"x": (lo, hi)}, target=TARGETS[case % 3])
        feed = candidates(rng, lo, hi, BINARY_FEED).reshape(-1, 1)
        assert rep.violations(feed) == [], (name, lo, hi, w)


def test_pow_with_a_constant_exponent_bounds_like_the_power():
    x = af.input((8,), name="x")
    cases = [
        (2, (-3, 2), (0.0, 9.0), False),
        (3, (-3, 2), (-27.0, 8.0), False),
        (-1, (0.5, 2), (0.5, 2.0), False),
        (-2, (-2, -0.5), (0.25, 4.0), False),
        (0.5, (0, 4), (0.0, 2.0), False),
        (0.5, (-1, 4), (0.0, 2.0), True),  # sqrt of a negative: NaN
        (0, (-5, 5), (1.0, 1.0), False),
    ]
    for k, rng_, want, nan in cases:
        y = x**k
        rep = af.range_analysis(y, {"x": rng_})
        iv = rep.interval(y)
        assert (iv.lo, iv.hi, iv.nan) == (*want, nan), (k, rng_, iv)
        assert rep.violations(candidates(np.random.default_rng(0), *rng_, 8)) == []
    # the same exponents given as ranges of an input: integers keep NaN out
    e = af.input((1, 8), name="e")
    y = af.pow(af.input((8, 1), name="x"), e)
    iv = af.range_analysis(y, {"x": (-3, 2), "e": (2, 2)}).interval(y)
    assert (iv.lo, iv.hi, iv.nan) == (0.0, 9.0, False)
    iv = af.range_analysis(y, {"x": (-3, 2), "e": (1, 3)}).interval(y)
    # 1.5 lies in [1, 3] (NaN); the magnitude bound 3**3 serves both signs
    assert (iv.lo, iv.hi) == (-27.0, 27.0) and iv.nan
    iv = af.range_analysis(y, {"x": (-3, 2), "e": (2048, 4096)}).interval(y)
    assert iv.lo == 0.0 and not iv.nan  # even integers only: positive


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_tightness_on_a_representative_range(name):
    ranges = {"a": (0.5, 4), "b": (0.5, 3)} if name == "pow" else {"a": (-3, 3), "b": (0.5, 4)}
    prog, out = build(getattr(af, name), (256,), (256,))
    rep = af.range_analysis(prog, ranges)
    iv = rep.interval(out)
    rng = np.random.default_rng(3)
    seen = max(
        np.abs(
            observed(rep, out, *[rng.uniform(*r, 256).astype(np.float16) for r in ranges.values()])
        ).max()
        for _ in range(100)
    )
    assert iv.finite and iv.max_abs <= 2.0 * seen, (iv, seen)


def test_mul_and_div_nan_and_infinity():
    x, y = af.input((4,), name="x"), af.input((4,), name="y")
    e = af.exp(x)  # [e**-1, inf]: inf at the top without NaN
    m = e * y
    rep = af.range_analysis(m, {"x": (-1, 12), "y": (-1, 1)})
    assert rep.interval(e).hi == math.inf and not rep.interval(e).nan
    assert rep.interval(m).nan  # inf * 0, with the zero inside y's interval
    assert rep.violations(np.array([12, 12, 0, -1]), np.array([0, 0.5, -0.0, 1])) == []
    d = af.div(x, y)
    rep = af.range_analysis(d, {"x": (1, 2), "y": (0, 1)})
    iv = rep.interval(d)
    assert (iv.lo, iv.hi, iv.nan) == (-math.inf, math.inf, False)  # 1 / -0.0 = -inf
    assert rep.violations(np.array([1, 2, 1, 2]), np.array([-0.0, 0, 1, 0.5])) == []
    iv = af.range_analysis(d, {"x": (0, 0), "y": (-1, 1)}).interval(d)
    assert (iv.lo, iv.hi, iv.nan) == (0.0, 0.0, True)
    assert [h.kind for h in af.range_analysis(d, {"x": (-1, 1), "y": (-1, 1)}).hazards] == [
        "overflow",
        "nan",
    ]


# ---- comparisons and select -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparison_rule_is_sound_and_proves_constants(name):
    rng = np.random.default_rng(11)
    prog, out = build(getattr(af, name), (BINARY_FEED, 1), (1, BINARY_FEED))
    proven = 0
    for case in range(320):
        lo_a, hi_a = random_range(rng)
        lo_b, hi_b = (lo_a, hi_a) if case % 7 == 0 else random_range(rng)
        iv, got = binary_case(rng, name, lo_a, hi_a, lo_b, hi_b, prog, out, TARGETS[case % 3])
        assert not iv.nan and 0.0 <= iv.lo <= iv.hi <= 1.0
        proven += iv.lo == iv.hi
    assert proven > 50
    for ranges, want in zip(COMPARE_CASES, COMPARE_WANT[name]):
        iv = af.range_analysis(prog, dict(zip("ab", ranges))).interval(out)
        assert (iv.lo, iv.hi) == {0: (0.0, 0.0), 1: (1.0, 1.0), None: (0.0, 1.0)}[want]


# a below b, a above b, one same point, overlapping, touching at 2
COMPARE_CASES = [
    ((1, 2), (3, 4)),
    ((3, 4), (1, 2)),
    ((2, 2), (2, 2)),
    ((1, 3), (2, 4)),
    ((1, 2), (2, 3)),
]
COMPARE_WANT = {  # 0 or 1 when proven, None for {0, 1}
    "equal": (0, 0, 1, None, None),
    "not_equal": (1, 1, 0, None, None),
    "less": (1, 0, 0, None, None),
    "less_equal": (1, 0, 1, None, 1),
    "greater": (0, 1, 0, None, 0),
    "greater_equal": (0, 1, 1, None, None),
}


def test_comparisons_with_nan():
    """NaN compares false (true for not_equal): a NaN operand keeps the output in {0, 1}."""
    x = af.input((4,), name="x")
    lg = af.log(x)  # NaN below 0
    one = af.weight(np.array([100.0], np.float16))
    less, ne = af.less(lg, one), af.not_equal(lg, one)
    rep = af.range_analysis([less, ne], {"x": (-1, 2)})
    assert (rep.interval(less).lo, rep.interval(less).hi) == (0.0, 1.0)
    assert (rep.interval(ne).lo, rep.interval(ne).hi) == (1.0, 1.0)
    assert rep.violations(np.array([-1, 0, 1, 2])) == []
    rep = af.range_analysis([less, ne], {"x": (0.5, 2)})
    assert (rep.interval(less).lo, rep.interval(less).hi) == (1.0, 1.0)


def test_select_rule_is_sound():
    rng = np.random.default_rng(5)
    k = 12
    prog, out = build(af.select, (k, 1, 1), (1, k, 1), (1, 1, k))
    for case in range(320):
        rs = [random_range(rng) for _ in range(3)]
        if case % 4 == 0:
            rs[0] = (0.0, 0.0)
        feeds = [
            candidates(rng, *r, k).reshape(s) for r, s in zip(rs, ((k, 1, 1), (1, k, 1), (1, 1, k)))
        ]
        rep = af.range_analysis(prog, dict(zip("abc", rs)), target=TARGETS[case % 3])
        assert rep.violations(*feeds) == [], rs
        iv, (c, a, b) = rep.interval(out), rs
        want = (
            a
            if c[0] > 0 or c[1] < 0
            else b
            if c == (0.0, 0.0)
            else (min(a[0], b[0]), max(a[1], b[1]))
        )
        assert (iv.lo, iv.hi) == (fp16(want[0]), fp16(want[1]))


def test_select_with_a_nan_condition_takes_a():
    x = af.input((4,), name="x")
    cond = af.log(x)  # NaN below 0, at most log(0.5) < 0 above: never 0
    a, b = af.weight(np.array([5.0], np.float16)), af.weight(np.array([-7.0], np.float16))
    y = af.select(cond, a, b)
    rep = af.range_analysis(y, {"x": (-1, 0.5)})
    iv = rep.interval(y)
    assert rep.interval(cond).nan and (iv.lo, iv.hi, iv.nan) == (5.0, 5.0, False)
    assert rep.violations(np.array([-1, -0.0, 0.25, 0.5])) == []


# ---- gather ---------------------------------------------------------------------------


def test_gather_rule_is_the_input_range():
    rng = np.random.default_rng(9)
    x = af.input((6, 5), name="x")
    ys = [af.gather(x, [4, 0, 0, -1], axis=1), af.gather(x, [5, 2], axis=0)]
    prog = af.compile(ys)
    for case in range(320):
        lo, hi = random_range(rng)
        rep = af.range_analysis(prog, {"x": (lo, hi)}, target=TARGETS[case % 3])
        assert rep.violations(candidates(rng, lo, hi, 30).reshape(6, 5)) == []
        for y in ys:
            iv = rep.interval(y)
            assert (iv.lo, iv.hi) == (fp16(lo), fp16(hi))


# ---- random graphs and degenerate intervals --------------------------------------------

UNARY_NAMES = sorted(UNARY)
BINARY_NAMES = sorted(BINARY) + sorted(COMPARE)


def random_graph(rng):
    """2-5 random ops of this module over two inputs of broadcastable shapes, each input
    with a random range or none; producers such as exp, log, inverse and div feed
    infinities and NaN into the later ops."""
    x, y = af.input((6, 1), name="x"), af.input((1, 6), name="y")
    nodes = [x, y]
    for _ in range(int(rng.integers(2, 6))):
        kind = rng.integers(10)
        pick = [nodes[int(i)] for i in rng.integers(0, len(nodes), 3)]
        if kind < 5:
            name = UNARY_NAMES[int(rng.integers(len(UNARY_NAMES)))]
            nodes.append(getattr(af, name)(pick[0]))
        elif kind < 9:
            name = BINARY_NAMES[int(rng.integers(len(BINARY_NAMES)))]
            nodes.append(getattr(af, name)(pick[0], pick[1]))
        else:
            nodes.append(af.select(*pick))
    used, todo = set(), list(nodes[2:])
    while todo:
        t = todo.pop()
        if t.op == "input":
            used.add(t.name)
        todo.extend(t.srcs)
    ranges = {n: random_range(rng) for n in ("x", "y") if n in used and rng.random() < 0.8}
    return nodes, ranges


UNKNOWN_FEED = np.array([-np.inf, -FP16_MAX, -1, -0.0, 0, 2.0**-24, 1, FP16_MAX, np.inf, np.nan])


def test_random_graphs_are_sound():
    rng = np.random.default_rng(2024)
    for case in range(300):
        nodes, ranges = random_graph(rng)
        rep = af.range_analysis(nodes[2:], ranges, target=TARGETS[case % 3])
        feeds = []
        for t in rep.program.inputs:
            if t.name in ranges:
                feeds.append(candidates(rng, *ranges[t.name], 6).reshape(t.shape))
            else:
                feeds.append(rng.choice(UNKNOWN_FEED, 6).reshape(t.shape))
        bad = rep.violations(*feeds)
        assert bad == [], (case, [(b[0].op, str(b[0].interval), b[1].ravel()[:6]) for b in bad])


# Values where the ops change behaviour; intervals between any two of them (with and
# without NaN) are checked against the kernel at every fp16 value (unary) or at every
# pair of these values inside (binary).
SPECIAL = [-math.inf, -FP16_MAX, -2048.0, -3.0, -1.0, -0.5, -(2.0**-24), 0.0, 2.0**-24, 0.5, 1.0,
           1.5, 2.0, 3.0, 2047.0, FP16_MAX, math.inf]  # fmt: skip
SPECIAL_INTERVALS = [
    Interval(lo, hi, nan)
    for i, lo in enumerate(SPECIAL)
    for hi in SPECIAL[i:]
    for nan in (False, True)
    if nan or (lo, hi) != (-math.inf, math.inf)
]


# A fixed sample of them for binary ops (every pair of the sample is checked).
BINARY_SPECIAL_INTERVALS = [
    SPECIAL_INTERVALS[i]
    for i in np.random.default_rng(0).choice(len(SPECIAL_INTERVALS), 56, replace=False)
]


def kernel_values(name, node, arrays):
    with np.errstate(all="ignore"):
        return np.asarray(get_op(name).emulate(arrays, dict(node.attrs)), np.float64)


def assert_holds(iv, values, where):
    assert iv.contains(values), (where, iv, hull_of(values), np.isnan(values).any())


@pytest.mark.parametrize(("name", "attrs"), UNARY_CASES, ids=UNARY_IDS)
def test_unary_rules_on_intervals_between_special_values(name, attrs):
    """Infinite ends and NaN, as upstream ops make them: the kernel at every fp16 value
    inside (and -0.0, and NaN where allowed) stays in the rule's interval."""
    node = getattr(af, name)(af.input((4,), name="x"), **attrs)
    rule = get_op(name).range
    for s in SPECIAL_INTERVALS:
        xs = between(s.lo, s.hi)
        if s.nan:
            xs = np.concatenate([xs, [np.nan]])
        iv = rule(node, [s], RangeEnv())
        assert_holds(iv, kernel_values(name, node, [xs]), s)


def special_values(s: Interval) -> np.ndarray:
    v = np.array([x for x in SPECIAL + [-0.0, 2.5, -1.5, 5.0, -7.0, 0.25] if s.lo <= x <= s.hi])
    v = np.concatenate([v, [s.lo, s.hi]] + ([[np.nan]] if s.nan else []))
    return v.astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(COMPARE))
def test_binary_rules_on_intervals_between_special_values(name):
    x, y = af.input((4,), name="x"), af.input((4,), name="y")
    node = getattr(af, name)(x, y)
    rule = get_op(name).range
    for s in BINARY_SPECIAL_INTERVALS:
        a = special_values(s)
        for t in BINARY_SPECIAL_INTERVALS:
            b = special_values(t)
            iv = rule(node, [s, t], RangeEnv())
            out = kernel_values(name, node, [a.reshape(-1, 1), b.reshape(1, -1)])
            assert_holds(iv, out, (s, t))


ODD_INTERVALS = [
    Interval.unknown(),
    Interval(-math.inf, -math.inf),
    Interval(math.inf, math.inf),
    Interval(0.0, 0.0, nan=True),
    Interval(-0.0, 0.0),
    Interval(-math.inf, 0.0, nan=True),
    Interval(0.0, math.inf),
    Interval(-FP16_MAX, FP16_MAX),
]


@pytest.mark.parametrize(
    "name", sorted(UNARY) + sorted(BINARY) + sorted(COMPARE) + ["select", "gather"]
)
def test_rules_never_raise_on_degenerate_intervals(name):
    x = af.input((4,), name="x")
    arity = get_op(name).arity
    if name == "gather":
        node = af.gather(x, [0, 1])
    else:
        node = getattr(af, name)(*([x] * arity))
    rule = get_op(name).range
    for i, s in enumerate(ODD_INTERVALS):
        for t in ODD_INTERVALS[i:]:
            srcs = ([s, t] * 2)[:arity]
            iv = rule(node, srcs, RangeEnv())
            assert isinstance(iv, Interval)
            if any(v.nan for v in srcs) and name not in COMPARE and name != "select":
                assert iv.nan or name in ("pow",), (name, srcs, iv)


def test_products_of_tiny_values_underflow_exactly():
    """mul of small values: corners give the rounded products (2**-25 rounds to 0, ties
    to even), the smallest non-zero magnitude is not overstated, and the analysis reports
    the values falling into the subnormal range."""
    x, y = af.input((1, 4), name="x"), af.input((4, 1), name="y")
    p = x * y
    rep = af.range_analysis(p, {"x": (2.0**-12, 2.0**-11), "y": (2.0**-13, 2.0**-12)})
    iv = rep.interval(p)
    assert (iv.lo, iv.hi, iv.tiny) == (0.0, 2.0**-23, 2.0**-24)
    feed_x = np.array([[2.0**-12, 1.5 * 2.0**-12, 1.75 * 2.0**-12, 2.0**-11]])
    feed_y = np.array([[2.0**-13], [1.25 * 2.0**-13], [1.5 * 2.0**-13], [2.0**-12]])
    assert rep.violations(feed_x, feed_y) == []
    assert [(h.kind, h.certainty) for h in rep.hazards] == [("underflow", "subnormal")]
