"""Range rules of the reductions, softmax, cumsum, the norms and the spatial ops.

Each rule is held against the emulator only (and float64 NumPy for the expected
bounds written here):

- soundness: for every op, random small graphs with random attributes, declared
  ranges of every scale (and undeclared, unknown inputs fed inf, nan and huge values),
  with and without a target, and inputs at the range's ends, alternating, one-hot,
  clustered and uniform; every emulated value of every node must lie in its interval.
  Intervals no declared input can give (half-infinite, a point at inf) are held by
  calling the rule and the kernel directly;
- tightness: the bound against the largest value seen on a representative case, exact
  where the rule is exact;
- the internal steps of the composite ops (a norm's ``d*d`` or ``x*x``, a mean's
  ``sum(x)``, an average's window sum) report their overflow where inputs are large,
  and stay quiet for small ones; the issue's ``layer_norm`` of inputs scaled by 100.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.chips import chip_numerics
from aneforge.emulator.gemm import gemm_reference
from aneforge.graph.ranges import Interval, RangeEnv
from aneforge.graph.registry import get_op
from range_cases import draw_range as shared_draw_range

OPS = (
    "sum",
    "mean",
    "amax",
    "amin",
    "softmax",
    "cumsum",
    "layer_norm",
    "rms_norm",
    "group_norm",
    "batch_norm",
    "l2_norm",
    "avg_pool",
    "max_pool",
    "upsample",
)
TARGETS = (None, "M1", "M4")
SCALES = (1.0, 8.0, 300.0, 2.0**-12, 3000.0, 30000.0, 65504.0)
GRAPHS_PER_OP = 60
SPECIALS = np.array([np.inf, -np.inf, np.nan, 65504, -65504, 0.0, 6e-8, 300.0], np.float16)

# compiling the hazardous graphs warns, by design
pytestmark = pytest.mark.filterwarnings("ignore::aneforge.errors.PrecisionWarning")


# ---- drawing cases --------------------------------------------------------------------


def draw_range(rng) -> tuple[float, float]:
    """A declared range at one of this file's scales (range_cases.draw_range)."""
    return shared_draw_range(rng, SCALES, negative=False)


def feeds(rng, shape, lo, hi, unknown=False, n=8):
    """fp16 inputs inside [lo, hi]: both ends, alternating ends, one-hot either way,
    then clustered at the ends, mostly one end, zeros mixed in, uniform. For an unknown
    input, a few with inf, nan, +-65504 and subnormals too."""
    lo16, hi16 = np.float16(lo), np.float16(hi)
    out = [np.full(shape, lo16), np.full(shape, hi16)]
    out.append(np.where(np.indices(shape).sum(0) % 2 == 0, lo16, hi16).astype(np.float16))
    for base, spike in ((lo16, hi16), (hi16, lo16)):
        one = np.full(shape, base)
        one.reshape(-1)[rng.integers(one.size)] = spike
        out.append(one)
    while len(out) < n:
        u = rng.uniform(lo, hi, shape)
        pick = rng.random()
        if pick < 0.3:
            u = np.where(rng.random(shape) < 0.5, lo, hi)
        elif pick < 0.5:
            u = np.where(rng.random(shape) < 0.1, hi, lo)
        elif pick < 0.6:
            u = np.where(rng.random(shape) < 0.5, u, 0.0)
        out.append(u.astype(np.float16))
    out = [np.clip(v, lo16, hi16) for v in out]  # fp16 rounding may step past an end
    if unknown:
        for _ in range(3):
            v = rng.uniform(-1, 1, shape) * float(rng.choice(SCALES))
            wild = rng.random(shape) < 0.3
            out.append(np.where(wild, rng.choice(SPECIALS, shape), v).astype(np.float16))
    return out


def draw_param(rng, shape):
    """A weight: ones, normal, large, sparse with zeros, or with a NaN or subnormal."""
    kind = rng.integers(6)
    if kind == 0:
        return np.ones(shape)
    w = rng.standard_normal(shape)
    if kind == 2:
        w = w * 100.0
    elif kind == 3:
        w[rng.random(shape) < 0.4] = 0.0
    elif kind == 4:
        w.reshape(-1)[0] = float(rng.choice([np.nan, 1e-7, -0.0]))
    return w


def small_shape(rng, rank_lo=1, rank_hi=3, size=8):
    return tuple(int(v) for v in rng.integers(1, size + 1, rng.integers(rank_lo, rank_hi + 1)))


def long_or_small(rng, p=0.12):
    """Mostly small shapes; sometimes a row longer than the M1/M4 reduction routes."""
    if rng.random() < p:
        return (2, int(rng.integers(193, 420)))
    return small_shape(rng)


def build(op, rng):
    """(input, output) of one random graph of ``op``."""
    if op in ("sum", "mean", "amax", "amin"):
        shape = long_or_small(rng)
        axes = None
        if rng.random() < 0.7:
            k = int(rng.integers(1, len(shape) + 1))
            axes = tuple(sorted(int(a) for a in rng.choice(len(shape), k, replace=False)))
        x = af.input(shape, name="x")
        return x, getattr(af, op)(x, axis=axes, keepdims=bool(rng.integers(2)))
    if op == "softmax":
        shape = long_or_small(rng)
        x = af.input(shape, name="x")
        return x, af.softmax(x, axis=int(rng.integers(-len(shape), len(shape))))
    if op == "cumsum":
        x = af.input(small_shape(rng, size=9), name="x")
        return x, af.cumsum(x)
    if op in ("layer_norm", "rms_norm", "l2_norm"):
        shape = long_or_small(rng, 0.15)
        x = af.input(shape, name="x")
        axis = int(rng.integers(-len(shape), len(shape)))
        eps = float(rng.choice([1e-5, 1e-6, 1e-3, 1.0, 0.0, 1e-9, -1e-4]))
        if op == "l2_norm":
            return x, af.l2_norm(x, axis=axis, eps=eps)
        pshape = shape[axis % len(shape) :]
        w = draw_param(rng, pshape) if rng.random() < 0.5 else None
        if op == "rms_norm":
            return x, af.rms_norm(x, w, axis=axis, eps=eps)
        b = draw_param(rng, pshape) if rng.random() < 0.5 else None
        return x, af.layer_norm(x, w, b, axis=axis, eps=eps)
    if op == "group_norm":
        groups = int(rng.integers(1, 4))
        c = groups * int(rng.integers(1, 4))
        shape = (int(rng.integers(1, 3)), c) + small_shape(rng, 0, 2, 4)
        x = af.input(shape, name="x")
        w = draw_param(rng, (c,)) if rng.random() < 0.5 else None
        b = draw_param(rng, (c,)) if rng.random() < 0.5 else None
        eps = float(rng.choice([1e-5, 1e-3, 0.0]))
        return x, af.group_norm(x, groups, w, b, eps=eps)
    if op == "batch_norm":
        c = int(rng.integers(1, 5))
        shape = (int(rng.integers(1, 3)), c) + small_shape(rng, 0, 2, 3)
        x = af.input(shape, name="x")
        mean = rng.standard_normal(c) * float(rng.choice([1.0, 100.0, 10000.0]))
        var = np.abs(rng.standard_normal(c)) * float(rng.choice([1.0, 1e-3, 100.0]))
        if rng.random() < 0.2:
            var[0] = 0.0
        w = draw_param(rng, (c,)) if rng.random() < 0.5 else None
        b = draw_param(rng, (c,)) if rng.random() < 0.5 else None
        eps = float(rng.choice([1e-5, 1e-3, 0.0]))
        return x, af.batch_norm(x, mean, var, w, b, eps=eps)
    if op in ("avg_pool", "max_pool"):
        spatial = small_shape(rng, 1, 2, 6)
        shape = (1, int(rng.integers(1, 3))) + tuple(max(s, 2) for s in spatial)
        k = int(rng.integers(1, min(shape[2:]) + 1))
        pad, stride = int(rng.integers(0, k)), int(rng.integers(1, 3))
        x = af.input(shape, name="x")
        if op == "max_pool":
            return x, af.max_pool(x, k, stride=stride, padding=pad)
        include = bool(rng.integers(2))
        return x, af.avg_pool(x, k, stride=stride, padding=pad, count_include_pad=include)
    if op == "upsample":
        shape = (1, int(rng.integers(1, 3))) + small_shape(rng, 1, 2, 4)
        x = af.input(shape, name="x")
        mode = str(rng.choice(["nearest", "bilinear"]))
        corners = bool(rng.integers(2))
        return x, af.upsample(x, int(rng.integers(1, 4)), mode=mode, align_corners=corners)
    raise KeyError(op)


# ---- soundness ----------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_rule_holds_every_emulated_value(op):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    runs = 0
    for case in range(GRAPHS_PER_OP):
        x, y = build(op, rng)
        unknown = case % 8 == 7
        lo, hi = draw_range(rng)
        target = TARGETS[case % 3]
        ranges = None if unknown else {"x": (lo, hi)}
        rep = af.range_analysis(y, input_ranges=ranges, target=target)
        for feed in feeds(rng, x.shape, lo, hi, unknown):
            bad = rep.violations(feed)
            assert not bad, (
                f"{op} {dict(y.attrs)} shape {x.shape} range {ranges} target {target}: "
                f"{bad[0][0].interval} misses {bad[0][1].ravel()[:8]} for {feed.ravel()[:8]}"
            )
            runs += 1
    assert runs >= 300


# intervals no declared input gives, but an upstream op can (x * 2 of [-60000, 30000])
ODD_INTERVALS = (
    Interval(-math.inf, 60000.0),
    Interval(-60000.0, math.inf),
    Interval(math.inf, math.inf),
    Interval(-math.inf, -math.inf),
    Interval(0.0, math.inf),
    Interval(-math.inf, 0.0),
    Interval(0.0, 0.0),
    Interval(-math.inf, math.inf),
    Interval(-2.0, 3.0, nan=True),
)


def values_in(rng, iv: Interval, shape):
    """fp16 arrays of values inside ``iv`` (inf ends and NaN included when allowed)."""
    finite = [max(iv.lo, -65504.0), min(iv.hi, 65504.0)]
    pool = [v for v in (iv.lo, iv.hi, *finite, 0.0) if iv.lo <= v <= iv.hi]
    if iv.nan:
        pool.append(math.nan)
    out = [np.full(shape, v, np.float16) for v in (iv.lo, iv.hi)]
    for _ in range(4):
        out.append(np.asarray(rng.choice(pool, shape), np.float16))
    if finite[0] <= finite[1]:
        u = rng.uniform(finite[0], finite[1], shape)
        out.append(np.clip(u, finite[0], finite[1]).astype(np.float16))
    return out


def direct_check(node, iv, feeds_, target):
    """The node's rule on ``iv`` (its parameters' own intervals) and its kernel's output
    for each of ``feeds_``, with the target's numerics."""
    chip = chip_numerics(target)
    mm = chip.matmul(gemm_reference) if chip is not None else gemm_reference
    limit = chip.matmul_limit if chip is not None else None
    route = chip.route if chip is not None else None
    params = [Interval.of(s.value) for s in node.srcs[1:]]
    weights = [np.asarray(s.value, np.float16) for s in node.srcs[1:]]
    op = get_op(node.op)
    with np.errstate(all="ignore"):
        env = RangeEnv(mm=mm, plain_mm=gemm_reference, matmul_limit=limit, route=route)
        out_iv = op.range(node, [iv, *params], env)
        got = [op.emulate([f, *weights], dict(node.attrs), env.arith) for f in feeds_]
    assert isinstance(out_iv, Interval)
    assert all(isinstance(label, str) and isinstance(s, Interval) for label, s in env.steps)
    return out_iv, [np.asarray(g, np.float64) for g in got]


@pytest.mark.parametrize("op", OPS)
def test_rule_holds_for_infinite_and_half_infinite_sources(op):
    rng = np.random.default_rng(zlib.crc32(op.encode()) + 1)
    runs = 0
    for case in range(40):
        x, y = build(op, rng)
        iv = ODD_INTERVALS[case % len(ODD_INTERVALS)]
        out_iv, got = direct_check(y, iv, values_in(rng, iv, x.shape), TARGETS[case % 3])
        for g in got:
            assert out_iv.contains(g), f"{op} {dict(y.attrs)} {iv}: {out_iv} misses {g}"
            runs += 1
    assert runs >= 250


def test_an_overflowing_partial_meeting_a_minus_inf_term_is_nan():
    # [-inf, 60000]: 60000 + 60000 overflows to +inf, then + -inf is NaN, though the
    # source reaches only one infinity
    x = np.array([60000.0, 60000.0, -np.inf], np.float16)
    for t, feed in (
        (af.sum(af.input((3,))), x),
        (af.mean(af.input((3,))), x),
        (af.avg_pool(af.input((1, 1, 3)), 3), x.reshape(1, 1, 3)),
    ):
        out_iv, (got,) = direct_check(t, Interval(-math.inf, 60000.0), [feed], None)
        assert np.isnan(got).all() and out_iv.nan, t.op


def test_parameters_that_are_activations_are_bounded_by_their_intervals():
    rng = np.random.default_rng(5)
    x = af.input((2, 3, 2), name="x", range=(-4, 4))
    mean = af.input((3,), name="mean", range=(-1, 1))
    var = af.input((3,), name="var", range=(0.5, 2))
    w = af.input((3,), name="w", range=(-2, 0))
    b = af.input((3,), name="b", range=(0, 5))
    norms = (
        af.batch_norm(x, mean, var, w, b),
        af.group_norm(x, 3, w, b),
        af.layer_norm(af.reshape(x, (2, 2, 3)), w, b),
        af.rms_norm(af.reshape(x, (2, 2, 3)), w),
    )
    rep = af.range_analysis(list(norms))
    for _ in range(100):
        args = [
            np.where(rng.random((2, 3, 2)) < 0.5, -4.0, rng.uniform(-4, 4, (2, 3, 2))),
            rng.choice([-1.0, 0.0, 1.0], 3),
            rng.choice([0.5, 1.0, 2.0], 3),
            rng.choice([-2.0, -0.5, 0.0], 3),
            rng.choice([0.0, 5.0], 3),
        ]
        assert rep.violations(*args) == []


# ---- tightness ------------------------------------------------------------------------


def bound_and_seen(y, ranges, feeds_, target=None):
    """The output's interval and every value the emulator gives for ``feeds_``."""
    rep = af.range_analysis(y, input_ranges=ranges, target=target)
    iv = rep.nodes[-1].interval
    prog = af.compile(y, target=target)
    seen = np.concatenate([np.asarray(prog(f), np.float64).ravel() for f in feeds_])
    assert iv.contains(seen)
    return iv, seen


def ends(shape, lo, hi):
    return [np.full(shape, lo, np.float16), np.full(shape, hi, np.float16)]


def test_sum_mean_amax_amin_cumsum_bounds_are_exact():
    x = af.input((3, 5), name="x")
    for y, want in (
        (af.sum(x, axis=-1), (-5.0, 10.0)),
        (af.mean(x, axis=-1), (-1.0, 2.0)),
        (af.amax(x), (-1.0, 2.0)),
        (af.amin(x, axis=0), (-1.0, 2.0)),
        (af.cumsum(x), (-5.0, 10.0)),
    ):
        iv, seen = bound_and_seen(y, {"x": (-1, 2)}, ends((3, 5), -1, 2))
        assert (iv.lo, iv.hi) == want == (seen.min(), seen.max()) and not iv.nan


def test_a_long_sum_is_bounded_by_the_narrow_accumulator_it_stalls_in():
    x = af.input((1, 4096), name="x")
    iv, seen = bound_and_seen(af.sum(x), {"x": (0, 1)}, ends((1, 4096), 0, 1))
    assert iv.hi == seen.max() == 2048.0  # 2048 + 1 rounds back to 2048
    iv, _ = bound_and_seen(af.sum(x), {"x": (0, 1)}, ends((1, 4096), 0, 1), target="M1")
    assert iv.hi == 4096.0  # the 192-term route: 21 partials of 192 and one of 64


def test_softmax_bound_meets_the_one_hot_peak_and_the_floor():
    x = af.input((4, 8), name="x")
    one_hot = np.full((4, 8), -1.0, np.float16)
    one_hot[:, 3] = 1.0
    iv, seen = bound_and_seen(af.softmax(x), {"x": (-1, 1)}, [one_hot, -one_hot])
    peak = 1.0 / (1.0 + 7.0 * math.exp(-2.0))  # one element at 1, the others at -1
    floor = math.exp(-2.0) / (7.0 + math.exp(-2.0))  # one at -1, the others at 1
    assert seen.max() <= iv.hi <= 1.005 * peak and abs(seen.min() - floor) < 1e-4
    # the floor is e_min / (the sum of n ones): within 13% of the true floor
    assert iv.lo == float(np.float16(float(np.float16(math.exp(-2.0))) / 8.0))
    wide = af.range_analysis(af.softmax(x), input_ranges={"x": 30000}).nodes[-1].interval
    assert (wide.lo, wide.hi, wide.nan) == (0.0, 1.0, False)


def test_layer_norm_bound_is_the_true_peak_near_sqrt_n():
    n = 64
    x = af.input((2, n), name="x")
    one_hot = np.full((2, n), -3.0, np.float16)
    one_hot[:, 5] = 3.0
    iv, seen = bound_and_seen(af.layer_norm(x), {"x": 3}, [one_hot])
    assert iv.hi <= 1.2 * math.sqrt(n) and iv.lo == -iv.hi
    assert seen.max() >= 0.99 * math.sqrt(n - 1) and iv.hi / seen.max() < 1.02
    # unknown inputs: still bounded by about sqrt(n), with NaN
    free = af.range_analysis(af.layer_norm(x)).nodes[-1].interval
    assert free.nan and free.max_abs <= 1.2 * math.sqrt(n)


def test_group_rms_and_l2_norm_bounds_are_their_true_peaks():
    x = af.input((1, 4, 2, 4), name="x")
    one_hot = np.full((1, 4, 2, 4), -2.0, np.float16)
    one_hot[0, 0, 0, 0] = 2.0
    iv, seen = bound_and_seen(af.group_norm(x, 2), {"x": 2}, [one_hot])
    # groups of n = 16: the one-hot peak is sqrt(15), the bound about sqrt(16)
    assert seen.max() >= 0.99 * math.sqrt(15) and iv.hi <= 1.01 * math.sqrt(16 / 15) * seen.max()
    z = af.input((3, 32), name="z")
    spike = np.zeros((3, 32), np.float16)
    spike[:, 7] = 3.0
    iv, seen = bound_and_seen(af.rms_norm(z), {"z": 3}, [spike])
    assert seen.max() >= 0.99 * math.sqrt(32) and iv.hi <= 1.01 * seen.max()
    iv, seen = bound_and_seen(af.l2_norm(z), {"z": 3}, [spike])
    assert seen.max() == 1.0 and 1.0 <= iv.hi <= 1.02 and iv.lo == -iv.hi


def test_norm_weights_and_bias_bound_each_element():
    x = af.input((2, 16), name="x")
    w = np.full(16, 0.5)
    w[3] = 4.0
    b = np.zeros(16)
    b[9] = 2.0
    rep = af.range_analysis(af.layer_norm(x, w, b), input_ranges={"x": 3})
    peak = af.range_analysis(af.layer_norm(x), input_ranges={"x": 3}).nodes[-1].interval.hi
    iv = rep.nodes[-1].interval
    # element 3 reaches 4 * peak; element 9 only 0.5 * peak + 2 (not 4 * peak + 2)
    assert iv.hi == float(np.float16(4.0 * peak)) and iv.lo == -iv.hi


def test_batch_norm_bound_is_exact_per_channel():
    x = af.input((2, 3, 2, 2), name="x")
    mean, var = np.array([0.0, 1.0, -2.0]), np.array([1.0, 4.0, 0.25])
    w, b = np.array([1.0, -2.0, 0.5]), np.array([0.0, 3.0, -1.0])
    y = af.batch_norm(x, mean, var, w, b)
    iv, seen = bound_and_seen(y, {"x": (-1, 2)}, ends((2, 3, 2, 2), -1, 2))
    assert (iv.lo, iv.hi) == (seen.min(), seen.max()) and not iv.nan
    dead = af.batch_norm(x, mean, np.zeros(3), eps=0.0)  # var + eps = 0: r = inf
    assert af.range_analysis(dead, input_ranges={"x": 1}).nodes[-1].interval.nan


def test_pools_and_upsampling_bounds_are_exact():
    shape = (1, 2, 5, 5)
    x = af.input(shape, name="x")
    for y in (
        af.avg_pool(x, 3, stride=1, padding=1, count_include_pad=True),
        af.avg_pool(x, 3, stride=2, padding=1),
        af.max_pool(x, 3, stride=2, padding=1),
        af.upsample(x, 2, mode="bilinear"),
        af.upsample(x, 3, mode="bilinear", align_corners=True),
        af.upsample(x, 2),
    ):
        iv, seen = bound_and_seen(y, {"x": (1, 3)}, ends(shape, 1, 3))
        assert (iv.lo, iv.hi) == (seen.min(), seen.max()), y.op
    # the padding zeros count: a corner window holds 4 of its 9 values
    y = af.avg_pool(x, 3, stride=1, padding=1, count_include_pad=True)
    assert af.range_analysis(y, input_ranges={"x": (1, 3)}).nodes[-1].interval.lo == float(
        np.float16(4.0 / 9.0)
    )


# ---- internal steps and their hazards -----------------------------------------------------


def overflows(rep, step=None):
    return [(h.certainty, h.step) for h in rep.hazards if h.kind == "overflow" and h.step == step]


def test_layer_norm_of_inputs_scaled_by_100_reports_d_times_d():
    x = af.input((2, 64), name="x")
    for y, ranges in (
        (af.layer_norm(x, name="ln"), {"x": 300}),
        (af.layer_norm(x * 100.0, name="ln"), {"x": 3}),
    ):
        rep = af.range_analysis(y, input_ranges=ranges)
        hit = [h for h in rep.hazards if h.step == "d*d"]
        assert hit and (hit[0].kind, hit[0].certainty, hit[0].name) == ("overflow", "may", "ln")
        assert rep["ln"].interval.max_abs <= 1.2 * 8 and not rep["ln"].interval.nan
    alternating = np.where(np.arange(128).reshape(2, 64) % 2, 300.0, -300.0)
    got = af.compile(af.layer_norm(x))(alternating)
    assert not np.any(got)  # d*d = 90000 = inf: var = inf, r = 0, y = 0
    quiet = af.range_analysis(af.layer_norm(x, name="ln"), input_ranges={"x": 3})
    assert not quiet.hazards


@pytest.mark.parametrize(
    "make, step",
    [
        (lambda x: af.rms_norm(x), "x*x"),
        (lambda x: af.l2_norm(x), "x*x"),
        (lambda x: af.group_norm(af.reshape(x, (2, 4, 16)), 2), "d*d"),
    ],
)
def test_norm_square_steps_report_their_overflow(make, step):
    x = af.input((2, 64), name="x")
    rep = af.range_analysis(make(x), input_ranges={"x": 300})
    assert ("may", step) in overflows(rep, step)
    assert not rep.nodes[-1].interval.nan
    assert not af.range_analysis(make(x), input_ranges={"x": 1}).hazards
    got = af.compile(make(x))(np.full((2, 64), 300.0))
    assert np.isfinite(got).all() and np.abs(got).max() <= 1.0  # 0 where x*x overflowed


def test_sum_of_a_norms_squares_can_overflow_where_each_square_does_not():
    x = af.input((2, 384), name="x")
    rep = af.range_analysis(af.layer_norm(x), input_ranges={"x": 30})
    assert overflows(rep, "sum(d*d)") and not overflows(rep, "d*d")
    alternating = np.where(np.arange(768).reshape(2, 384) % 2, 30.0, -30.0)
    assert not np.any(af.compile(af.layer_norm(x))(alternating))  # 384 * 900 > 65504


def test_mean_and_avg_pool_report_their_sum():
    x = af.input((2, 4), name="x")
    rep = af.range_analysis(af.mean(x, axis=-1), input_ranges={"x": (0, 30000)})
    assert ("may", "sum(x)") in overflows(rep, "sum(x)")
    assert np.isinf(af.compile(af.mean(x, axis=-1))(np.full((2, 4), 30000.0))).all()
    assert not af.range_analysis(af.mean(x, axis=-1), input_ranges={"x": 3}).hazards
    img = af.input((1, 1, 4, 4), name="img")
    pool = af.avg_pool(img, 3, stride=1)
    assert overflows(af.range_analysis(pool, input_ranges={"img": (0, 30000)}), "sum(window)")
    assert not af.range_analysis(pool, input_ranges={"img": 3}).hazards


def test_softmax_records_its_steps_which_stay_finite():
    x = af.input((2, 16), name="x")
    rep = af.range_analysis(af.softmax(x), input_ranges={"x": 30000})
    steps = dict(rep.nodes[-1].steps)
    assert set(steps) == {"exp(x-max)", "sum(exp)"}
    assert steps["exp(x-max)"].hi == 1.0 and steps["sum(exp)"].lo == 1.0
    assert steps["sum(exp)"].hi == 16.0 and not rep.hazards


def test_cumsum_crosses_the_matmul_output_limit_on_a_target():
    x = af.input((1, 4), name="x")
    y = af.cumsum(x, name="cs")
    assert not af.range_analysis(y, input_ranges={"x": (0, 10000)}).hazards
    rep = af.range_analysis(y, input_ranges={"x": (0, 10000)}, target="M1")
    (h,) = rep.hazards
    assert (h.kind, h.certainty, h.name) == ("matmul_saturation", "may", "cs")
    assert rep["cs"].interval.hi == math.inf
    got = af.compile(y, target="M1")(np.full((1, 4), 10000.0))
    assert np.isinf(got[0, -1]) and np.isfinite(got[0, :3]).all()
