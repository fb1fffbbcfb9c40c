"""Paired fp16 (double-fp16): the error-free transforms, the pair arithmetic, its gain over
plain fp16 and its cost, all measured on the emulator (docs/numerics.md, "Compensated /
paired-fp16 arithmetic"; docs/numerics.md section 10)."""

from __future__ import annotations

import math
import warnings
from collections import Counter

import numpy as np
import pytest

import aneforge as af
from aneforge.errors import DTypeError, ShapeError, WeightRangeError
from aneforge.graph.fp16 import fp16_values as f16
from aneforge.graph.rewrite import rewrite
from aneforge.graph.walk import topological_order
from aneforge.numerics.paired import (
    PRESCALED_SPLIT_LIMIT,
    SPEC_OPS_PER_ELEMENT,
    SPLIT_FACTOR,
    SPLIT_LIMIT,
    Paired,
    fast_two_sum,
    paired,
    paired_subtract,
    split,
    two_diff,
    two_product,
    two_sum,
)
from aneforge.optimizer.rules import CANONICAL, NUMERIC

N = 50_000  # elements per exhaustive-style check (one graph run each)
MOVEMENT = {"concat", "reshape", "transpose"}
CONTRACTIONS = {"matmul", "bmm"}
REQUIRED_GAIN = 10.0  # the bar: paired relative error >= 10x lower than plain
COST_TOLERANCE = 0.30  # the bar: op counts within +-30% of the spec's table


def run(outputs, *feeds, opt=0):
    """Compile at ``opt`` and run, returning float64 arrays."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.AneforgeWarning)
        prog = af.compile(list(outputs), opt=opt)
        return [np.asarray(o, np.float64) for o in prog.run(*feeds)]


def rel(got, want) -> float:
    return af.compare(got, want)["rel_l2"]


def significant_bits(v):
    """Number of significant bits of each value (0 for zero)."""
    m, _ = np.frexp(np.abs(np.asarray(v, np.float64)))
    out = np.zeros(m.shape, int)
    for k in range(1, 14):
        scaled = m * 2.0**k
        out = np.where((out == 0) & (m != 0) & (scaled == np.round(scaled)), k, out)
    return out


def compute_ops(outputs) -> Counter:
    outs = [outputs] if isinstance(outputs, af.Tensor) else list(outputs)
    return Counter(n.op for n in topological_order(outs) if n.op not in ("input", "weight"))


def wide_fp16(rng, n, lo_exp=-14, hi_exp=14):
    """fp16 values spread over many binades, both signs."""
    v = f16(rng.standard_normal(n) * np.exp2(rng.integers(lo_exp, hi_exp, n)))
    return np.where(np.isfinite(v), v, 1.0)


# ---- the error-free transforms ----------------------------------------------------------


def test_split_constant_is_two_to_ceil_half_precision_plus_one():
    assert SPLIT_FACTOR == 2 ** math.ceil(11 / 2) + 1 == 65
    assert SPLIT_LIMIT == 1008.0 and f16(65 * 1007.5) == 65472 and f16(65 * 1008.0) == np.inf
    assert f16(PRESCALED_SPLIT_LIMIT * (1 + 2.0**-6)) == np.inf


def test_two_sum_and_two_diff_are_exact(rng):
    a, b = wide_fp16(rng, N), wide_fp16(rng, N)
    x, y = af.input((N,)), af.input((N,))
    s, e, d, de = run([*two_sum(x, y), *two_diff(x, y)], a, b)
    with np.errstate(over="ignore"):
        assert np.array_equal(s, f16(a + b)) and np.array_equal(d, f16(a - b))
    ok, okd = np.isfinite(s), np.isfinite(d)
    assert ok.mean() > 0.99 and okd.mean() > 0.99
    assert np.array_equal((s + e)[ok], (a + b)[ok])
    assert np.array_equal((d + de)[okd], (a - b)[okd])


def test_fast_two_sum_exact_when_first_is_larger(rng):
    a, b = wide_fp16(rng, N), wide_fp16(rng, N)
    big, small = np.where(np.abs(a) >= np.abs(b), a, b), np.where(np.abs(a) >= np.abs(b), b, a)
    x, y = af.input((N,)), af.input((N,))
    s, e = run(fast_two_sum(x, y), big, small)
    ok = np.isfinite(s)
    assert np.array_equal((s + e)[ok], (big + small)[ok])


@pytest.mark.parametrize("prescale, limit", [(False, 1007.5), (True, 64480.0)])
def test_split_parts_have_five_bits_and_sum_exactly(rng, prescale, limit):
    lo_mag = 2.0**-8 if prescale else 2.0**-14
    a = f16(rng.uniform(lo_mag, limit, N) * rng.choice([-1, 1], N))
    a[:2] = [limit, -limit]
    x = af.input((N,))
    hi, lo = run(split(x, prescale), a)
    assert np.array_equal(hi + lo, a)
    assert significant_bits(hi).max() <= 5 and significant_bits(lo).max() <= 5


def test_weight_split_is_exact_over_every_fp16_value():
    every = np.arange(0, 0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    hi, lo = split(af.weight(every))
    h, lo_v = hi.value.astype(np.float64), lo.value.astype(np.float64)
    assert np.array_equal(h + lo_v, every)
    assert significant_bits(h).max() <= 5
    near_max = every >= 64512  # rounding to 5 bits would reach 65536 there
    assert significant_bits(lo_v[~near_max]).max() <= 5


@pytest.mark.parametrize("prescale", [False, True])
def test_two_product_is_exact_inside_the_range(rng, prescale):
    a = f16(rng.uniform(0.25, 250, N) * rng.choice([-1, 1], N))
    b = f16(rng.uniform(0.25, 250, N) * rng.choice([-1, 1], N))
    x, y = af.input((N,)), af.input((N,))
    p, e = run(two_product(x, y, prescale), a, b)
    assert np.array_equal(p, f16(a * b))
    assert np.array_equal(p + e, a * b)  # float64 holds the 22-bit products exactly


def test_two_product_prescaled_covers_the_wide_range(rng):
    a = f16(rng.uniform(2.0**-8, 64480, N) * rng.choice([-1, 1], N))
    b = f16(rng.uniform(2.0**-4, 1, N) * rng.choice([-1, 1], N))
    x, y = af.input((N,)), af.input((N,))
    p, e = run(two_product(x, y, prescale=True), a, b)
    big = np.abs(a * b) >= 2.0**-2  # error term above the subnormal floor
    assert np.array_equal((p + e)[big], (a * b)[big])


def test_two_product_with_a_weight_splits_at_build_time(rng):
    a = f16(rng.uniform(0.5, 900, 4096))
    w = f16(rng.uniform(0.5, 60000, 4096))  # far past the graph split's wall: no matter
    x = af.input((4096,))
    p, e = two_product(x, af.weight(w))
    assert compute_ops([p, e])["mul"] == 1 + 1 + 4  # p, 65 * x, four partial products
    pv, ev = run([p, e], a)
    ok = np.abs(a * w) < 60000
    assert np.array_equal(pv[ok] + ev[ok], (a * w)[ok])


def test_range_wall_is_loud_nan_and_prescale_moves_it():
    a = np.array([1000.0, 1007.5, 1008.0, 2000.0, 30000.0])
    b = np.array([0.75, 0.75, 0.75, 0.75, 0.75])
    x, y = af.input((5,)), af.input((5,))
    p0, e0 = run(two_product(x, y), a, b)
    p1, e1 = run(two_product(x, y, prescale=True), a, b)
    assert np.array_equal(p0[:2] + e0[:2], a[:2] * b[:2])
    assert np.isnan(e0[2:]).all()  # past 1008: NaN, never a wrong finite value
    assert np.array_equal(p1 + e1, a * b)


# ---- the Paired value ------------------------------------------------------------------


def test_constructors():
    x = af.input((2, 3), name="x")
    p = paired(x)
    assert isinstance(p, Paired) and p.shape == (2, 3) and p.hi is x
    assert p.lo.op == "weight" and not np.any(p.lo.value)
    lo = af.input((2, 3), name="lo")
    q = paired(x, lo)
    assert q.limbs == (x, lo) and paired(q) is q
    with pytest.raises(ShapeError):
        paired(x, af.input((3,)))
    v = np.array([1000.3, -0.1, 1.0 / 3.0])
    w = Paired.from_array(v, name="v")
    hi, lo_v = w.hi.value.astype(np.float64), w.lo.value.astype(np.float64)
    assert np.array_equal(hi, f16(v)) and np.array_equal(lo_v, f16(v - hi))
    assert np.all(np.abs(hi + lo_v - v) <= 2.0**-22 * np.abs(v))
    assert w.hi.name == "v.hi" and isinstance(paired(v), Paired)
    with pytest.raises(DTypeError):
        Paired.from_array(np.arange(3))
    with pytest.raises(WeightRangeError):
        Paired.from_array([70000.0])


def test_to_tensor_is_an_explicit_add_of_both_limbs():
    hi, lo = af.input((4,)), af.input((4,))
    t = paired(hi, lo).to_tensor()
    assert t.op == "add" and t.srcs == (hi, lo)


def test_pair_arithmetic_matches_float64(rng):
    n = 20_000
    xa = rng.uniform(1, 30, n) * rng.choice([-1, 1], n)
    xb = rng.uniform(1, 30, n) * rng.choice([-1, 1], n)
    limbs = [af.input((n,), name=k) for k in ("a_hi", "a_lo", "b_hi", "b_lo")]
    a, b = paired(*limbs[:2]), paired(*limbs[2:])
    results = {"add": a + b, "sub": a - b, "mul": a * b, "rsub": 3.1 - a, "scaled": a * 0.1}
    feeds = [f16(xa), xa - f16(xa), f16(xb), xb - f16(xb)]
    outs = run([t for r in results.values() for t in r.limbs], *feeds)
    want = {"add": xa + xb, "sub": xa - xb, "mul": xa * xb, "rsub": 3.1 - xa, "scaled": xa * 0.1}
    for i, (name, truth) in enumerate(want.items()):
        hi, lo = outs[2 * i], outs[2 * i + 1]
        err = np.abs(hi + lo - truth) / np.abs(truth)
        assert np.quantile(err, 0.99) < 2.0**-18, name  # plain fp16 is ~2**-12
        assert np.all(np.abs(lo) <= np.spacing(np.abs(hi).astype(np.float16)) / 2), name


def test_pair_add_renormalizes_exactly_under_cancellation(rng):
    """FastTwoSum's exponent condition holds for (s, e) even when the hi limbs cancel."""
    va = rng.standard_normal(N) * np.exp2(rng.integers(-2, 12, N))
    near = -va * (1 + rng.standard_normal(N) * np.exp2(rng.integers(-20, -2, N)))
    vb = np.where(rng.random(N) < 0.5, near, rng.standard_normal(N) * 100)
    limbs = [af.input((N,)) for _ in range(4)]
    a, b = paired(*limbs[:2]), paired(*limbs[2:])
    s, e = two_sum(a.hi, b.hi)
    e = e + (a.lo + b.lo)
    r = a + b
    feeds = [f16(va), f16(va - f16(va)), f16(vb), f16(vb - f16(vb))]
    hi, lo, sv, ev = run([*r.limbs, s, e], *feeds)
    assert np.array_equal(hi + lo, sv + ev)  # the renormalization lost nothing
    assert np.all(np.abs(lo) <= np.spacing(np.abs(hi).astype(np.float16)) / 2)
    exact = sum(feeds)
    bound = 2.0**-11 * (np.abs(feeds[1] + feeds[3]) + np.abs(ev)) + 2.0**-24
    assert np.all(np.abs(hi + lo - exact) <= bound)  # the pair addition's error bound


def test_neg_and_scale_are_exact(rng):
    v = rng.uniform(-100, 100, 64)
    p = Paired.from_array(v)
    h, lo, h2, lo2, h3, lo3 = run([*(-p).limbs, *p.scale(4.0).limbs, *p.scale(2.0**-3).limbs])
    base = p.hi.value.astype(np.float64) + p.lo.value.astype(np.float64)
    assert np.array_equal(h + lo, -base) and np.array_equal(h2 + lo2, base * 4)
    # scaling down may push a tiny lo limb under the subnormal grid (2**-24): nearly exact
    assert np.all(np.abs(h3 + lo3 - base / 8) <= 2.0**-25)
    with pytest.raises(ValueError):
        p.scale(3.0)


def test_sum_and_dot_use_two_matmuls_never_reduce_sum(rng):
    x, y = af.input((3, 128)), af.input((3, 128))
    d = paired(x).dot(paired(y))
    s = paired(x, y).sum(axis=0)
    for r in (d, s):
        ops = compute_ops(list(r.limbs))
        assert ops["matmul"] == 2 and "sum" not in ops and "mean" not in ops
    assert d.shape == (3,) and s.shape == (128,)
    a, b = rng.standard_normal((3, 128)), rng.standard_normal((3, 128))
    dh, dl, sh, sl = run([*d.limbs, *s.limbs], a, b)
    a16, b16 = f16(a), f16(b)
    assert np.all(np.abs(dh + dl - np.sum(a16 * b16, -1)) <= 2.0**-20 * np.sum(np.abs(a16 * b16)))
    assert np.all(np.abs(sh + sl - (a16 + b16).sum(0)) <= 2.0**-20 * np.abs(a16 + b16).sum(0))


def test_wide_sum_keeps_what_the_narrow_sum_loses():
    x = af.input((4096,))
    s = paired(x).sum()
    hi, lo, narrow = run([*s.limbs, x.sum()], np.full(4096, 1.0 + 2.0**-10))
    assert hi + lo == 4100.0 and narrow[()] != 4100.0


# ---- the gain over plain fp16 (the issue's >= 10x bar) -------------------------------


def cfg_case(rng, shape=(4, 32, 32), scale=200.0, gap=0.5):
    """Classifier-free guidance: two large, nearly equal predictions from float64."""
    uncond = rng.standard_normal(shape) * scale
    cond = uncond + rng.standard_normal(shape) * gap
    return cond, uncond


def test_cfg_difference_gains_at_least_10x(rng):
    cond, uncond = cfg_case(rng)
    shape = cond.shape
    c_hi, c_lo, u_hi, u_lo = (af.input(shape, name=n) for n in ("ch", "cl", "uh", "ul"))
    compensated = paired_subtract(paired(c_hi, c_lo), paired(u_hi, u_lo))
    plain = c_hi - u_hi
    feeds = [f16(cond), cond - f16(cond), f16(uncond), uncond - f16(uncond)]
    got, base = run([compensated, plain], *feeds)
    truth = cond - uncond
    gain = rel(base, truth) / rel(got, truth)
    assert gain >= REQUIRED_GAIN, gain
    assert rel(got, truth) < 2 * 2.0**-11  # the best fp16 value: one rounding


def test_cfg_from_weights_and_mixed_operands(rng):
    cond, uncond = cfg_case(rng, shape=(256,))
    u_hi = af.input((256,), name="u_hi")
    d_pp = paired_subtract(Paired.from_array(cond), Paired.from_array(uncond))
    d_pt = paired_subtract(Paired.from_array(cond), u_hi)  # uncond as plain fp16
    got, mixed = run([d_pp, d_pt], f16(uncond))
    truth = cond - uncond
    assert rel(f16(cond) - f16(uncond), truth) / rel(got, truth) >= REQUIRED_GAIN
    assert rel(mixed, pair_value(cond) - f16(uncond)) < 2 * 2.0**-11


def pair_value(v):
    """The exact value hi + lo of Paired.from_array(v)."""
    hi = f16(v)
    return hi + f16(v - hi)


def test_residual_dot_gains_at_least_10x(rng):
    k, m = 256, 32
    w = rng.standard_normal(k)
    x = rng.standard_normal((m, k))
    x -= np.outer(x @ w / (w @ w), w)  # nearly orthogonal to w: the dot cancels
    x += np.outer(rng.standard_normal(m), w) * 0.05 / np.linalg.norm(w)
    truth = x @ w
    x_hi, x_lo = af.input((m, k), name="x_hi"), af.input((m, k), name="x_lo")
    d = paired(x_hi, x_lo).dot(Paired.from_array(w, name="w"))
    plain = (x_hi @ af.weight(w.reshape(k, 1))).reshape((m,))
    t, hi, lo, base = run([d.to_tensor(), *d.limbs, plain], f16(x), x - f16(x))
    assert rel(base, truth) / rel(t, truth) >= REQUIRED_GAIN
    assert rel(base, truth) / rel(hi + lo, truth) >= REQUIRED_GAIN


def test_residual_carried_as_lo_survives_a_product_chain(rng):
    # y = x * x - 1 for x = 1 + delta given in float64: the residual holds delta's bits
    x = 1.0 + rng.uniform(1e-4, 1e-2, 4096)
    truth = x * x - 1.0
    x_hi, x_lo = af.input((4096,), name="x_hi"), af.input((4096,), name="x_lo")
    p = paired(x_hi, x_lo)
    got, base = run([(p * p - 1.0).to_tensor(), x_hi * x_hi - 1.0], f16(x), x - f16(x))
    assert rel(base, truth) / rel(got, truth) >= REQUIRED_GAIN


# ---- cost: ops per element against the spec's table ------------------------------------


def per_element_ops(outputs, n):
    """(elementwise ops on n-element tensors, contractions, movement nodes)."""
    outs = list(outputs)
    nodes = [t for t in topological_order(outs) if t.op not in ("input", "weight")]
    elementwise = sum(1 for t in nodes if t.size == n and t.op not in MOVEMENT | CONTRACTIONS)
    return (
        elementwise,
        sum(t.op in CONTRACTIONS for t in nodes),
        sum(t.op in MOVEMENT for t in nodes),
    )


def within(measured, spec):
    return abs(measured - spec) <= COST_TOLERANCE * spec


def test_op_counts_match_the_spec_table():
    n = 64
    x, y = af.input((n,)), af.input((n,))
    add = per_element_ops((paired(x) + paired(y)).limbs, n)
    mul = per_element_ops((paired(x) * paired(y)).limbs, n)
    dot = per_element_ops(paired(x).dot(paired(y)).limbs, n)
    assert add == (6, 0, 0) and within(add[0], SPEC_OPS_PER_ELEMENT["two_sum"])
    assert mul == (17, 0, 0) and within(mul[0], SPEC_OPS_PER_ELEMENT["two_product"])
    assert dot[:2] == (17, 2) and within(dot[0], SPEC_OPS_PER_ELEMENT["dot"])
    assert dot[1] == SPEC_OPS_PER_ELEMENT["dot_matmuls"]
    assert per_element_ops([paired_subtract(x, y)], n)[0] == 7  # TwoSum + fl(s + e)
    pre = per_element_ops(two_product(x, y, prescale=True), n)[0]
    assert pre == 21 and within(pre, SPEC_OPS_PER_ELEMENT["two_product"])


def test_op_counts_with_lo_limbs():
    """Full pairs pay the limb bookkeeping on top of the table's transforms."""
    n = 64
    a = paired(af.input((n,)), af.input((n,)))
    b = paired(af.input((n,)), af.input((n,)))
    t = af.input((n,))
    assert per_element_ops((a + b).limbs, n)[0] == 11  # TwoSum + 2 + FastTwoSum
    assert per_element_ops((a + t).limbs, n)[0] == 10
    assert per_element_ops((a * b).limbs, n)[0] == 24  # TwoProduct + 4 + FastTwoSum
    assert per_element_ops((a * t).limbs, n)[0] == 22
    assert per_element_ops(a.dot(b).limbs, n)[:2] == (19, 2)  # + 2 cross-term streams
    assert per_element_ops([paired_subtract(a, b)], n)[0] == 9
    assert per_element_ops(a.sum().limbs, n)[:2] == (0, 2)


def test_estimate_prices_the_paired_graph():
    # 18 elementwise ops for 1, fused in one program: the cost model keeps their
    # intermediates on chip, so the paired product pays its extra input traffic (four
    # limbs for two operands) and the passes of its ops that read the inputs.
    x, y = af.input((1024, 4096)), af.input((1024, 4096))  # past the dispatch floor
    plain = af.estimate_breakdown(x * y)
    compensated = af.estimate_breakdown((paired(x) * paired(y)).to_tensor())
    assert compensated.total_us > 1.5 * plain.total_us
    assert compensated.parts_us["overhead"] > plain.parts_us["overhead"]


# ---- the compiler caveat: nothing collapses hi + lo -----------------------------------


@pytest.mark.parametrize("opt", ["routes", 0, 1])
def test_compile_levels_keep_the_compensation(rng, opt):
    cond, uncond = cfg_case(rng, shape=(2, 16, 16))
    shape = cond.shape
    limbs = [af.input(shape, name=n) for n in ("ch", "cl", "uh", "ul")]
    c, u = paired(*limbs[:2]), paired(*limbs[2:])
    out = (u + (c - u) * 7.5).to_tensor()  # guided = uncond + w (cond - uncond)
    diff = paired_subtract(c, u)
    feeds = [f16(cond), cond - f16(cond), f16(uncond), uncond - f16(uncond)]
    got, d = run([out, diff], *feeds, opt=opt)
    truth = uncond + 7.5 * (cond - uncond)
    assert rel(got, truth) < 2 * 2.0**-11
    assert rel(f16(cond) - f16(uncond), cond - uncond) / rel(d, cond - uncond) >= REQUIRED_GAIN


def test_canonical_and_numeric_rules_do_not_collapse_the_pair(rng):
    cond, uncond = cfg_case(rng, shape=(512,), scale=10.0, gap=0.05)  # c * c stays finite
    limbs = [af.input((512,), name=n) for n in ("ch", "cl", "uh", "ul")]
    c, u = paired(*limbs[:2]), paired(*limbs[2:])
    outs = [paired_subtract(c, u), (c * c).to_tensor(), c.dot(u).to_tensor()]
    rewritten, report = rewrite(outs, NUMERIC + CANONICAL)
    assert not report.changed  # no rule sees through the opaque fp16 chains
    feeds = [f16(cond), cond - f16(cond), f16(uncond), uncond - f16(uncond)]
    before, after = run(outs, *feeds), run(rewritten, *feeds)
    for b, a in zip(before, after):
        assert np.array_equal(b, a)
    # A zero lo limb (paired(x)) stays: x + (+0) turns -0 into +0, so folding it to x
    # would not be bit-identical.
    x = af.input((8,))
    (kept,), rep = rewrite([paired(x).to_tensor()], CANONICAL)
    assert kept is not x and kept.op == "add"  # its zero limb may become a rank-0 zero
    assert set(rep.matches) <= {"scalar_weight_operand"}
    got = run([kept], np.array([-0.0] * 8))[0]
    assert not np.signbit(got).any()


def test_reference_and_emulator_agree_on_the_pair_value(rng):
    v = rng.uniform(1, 20, 128)
    x = af.input((128,))
    out = (paired(x) * Paired.from_array(v)).to_tensor()
    emu = run([out], f16(v))[0]
    exact = af.reference(out, f16(v))
    assert rel(emu, exact) < 2.0**-11


def test_operand_types(rng):
    x = af.input((3,))
    p = paired(x)
    for r in (p + 1.0, 1.0 + p, p - np.ones(3), np.ones(3) - p, 2.0 * p, p * np.float64(0.5)):
        assert isinstance(r, Paired) and r.shape == (3,)
    with pytest.raises(TypeError):
        p + "one"
    with pytest.raises(TypeError):
        bool(p)
    with pytest.raises(ShapeError):
        paired(af.input(())).sum()
