"""Range rules of the contractions and the contraction-like bridge ops.

Ops: matmul, bmm, linear, conv, conv_transpose (graph/ops/contraction.py), sdpa
(bridge/attention.py), cross_product, cross_correlation, cost_volume, fps and
radius_search (bridge/geometry.py).

For every op: soundness against the emulator over random small graphs (random shapes,
attributes, wild weights with zeros, subnormals, inf and NaN, random declared ranges)
and in-range feeds (the ends, alternating ends, values clustered at the ends, zeros,
the per-column sign patterns that reach a weight's row-sum bound, uniform draws), with
no target and with the M1 and M4 targets; tightness on a representative case (the
bound against the largest value seen, exact where the rule is exact); the internal
steps' hazards of the composite ops. Only the emulator and float64 NumPy are used as
references. Soundness runs: 30 graphs x 10 feeds x 3 targets = 900 per op, plus 24 per
op with undeclared ranges fed inf and NaN.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.ops.bridge import (
    cost_volume,
    cross_correlation,
    cross_product,
    fps,
    radius_search,
    sdpa,
)
from aneforge.graph.ops.contraction_bounds import spectral_norm_bound
from range_cases import assert_runs_inside, draw_range

TARGETS = (None, "M1", "M4")
GRAPHS_PER_TARGET = 30
FEEDS_PER_GRAPH = 10
OPS = (
    "matmul",
    "bmm",
    "linear",
    "conv",
    "conv_transpose",
    "sdpa",
    "cross_product",
    "cross_correlation",
    "cost_volume",
    "fps",
    "radius_search",
)


# ---- drawing ranges, weights and feeds -----------------------------------------------


def wild_weight(rng, shape, wild: bool = True) -> np.ndarray:
    """Random fp16 weights: normal at a random scale, sometimes small integers, sparse
    zeros, subnormals, and (when ``wild``) now and then an inf or a NaN."""
    scale = float(rng.choice([2.0**-20, 0.01, 0.3, 1.0, 30.0, 1000.0]))
    w = rng.standard_normal(shape) * scale
    if rng.random() < 0.2:
        w = np.round(rng.uniform(-4, 4, shape))
    if rng.random() < 0.3:
        w = np.where(rng.random(shape) < 0.4, 0.0, w)
    if rng.random() < 0.2:
        w = np.abs(w) * (1 if rng.random() < 0.5 else -1)
    if wild and rng.random() < 0.12:
        w = w.copy()
        w.flat[rng.integers(w.size)] = rng.choice([np.inf, -np.inf, np.nan])
    return w.astype(np.float16)


def feeds(rng, shape, lo, hi, n, signs=()):
    """``n`` fp16 arrays inside [lo, hi]: each end, alternating ends, ends in the sign
    patterns ``signs`` (arrays broadcast to ``shape``: hi where > 0, lo elsewhere, and
    the reverse), zeros when inside, then random ends and uniform draws."""
    lo16, hi16 = np.float16(lo), np.float16(hi)
    out = [np.full(shape, lo16), np.full(shape, hi16)]
    parity = np.indices(shape).sum(0) % 2 == 0
    out.append(np.where(parity, lo16, hi16))
    for s in signs:
        s = np.broadcast_to(s, shape)
        out += [np.where(s > 0, hi16, lo16), np.where(s > 0, lo16, hi16)]
    if lo16 <= 0 <= hi16:
        out.append(np.zeros(shape, np.float16))
    rng.shuffle(out[3:])
    while len(out) < n:
        u = rng.uniform(lo, hi, shape)
        if rng.random() < 0.5:
            u = np.where(rng.random(shape) < 0.5, lo, hi)
        out.append(u)
    return [np.clip(np.asarray(v, np.float16), lo16, hi16) for v in out[:n]]


def analyse(outputs, ranges, target=None):
    """The report of ``outputs`` with ``ranges`` ({input tensor: (lo, hi)})."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # precision warnings of the deliberately bad cases
        prog = af.compile(outputs, opt=0)
    given = {t.name: ranges[t] for t in prog.inputs if t in ranges}
    return af.range_analysis(prog, input_ranges=given, target=target)


def assert_sound(outputs, ranges, rng, target, n=FEEDS_PER_GRAPH, signs=None) -> int:
    """Check every node of ``n`` in-range runs against its interval; returns ``n``."""
    rep = analyse(outputs, ranges, target)
    signs = signs or {}
    per_input = [
        feeds(rng, t.shape, *ranges[t], n, signs.get(t.name, ())) for t in rep.program.inputs
    ]
    return assert_runs_inside(rep, per_input)


def emulate(y, *inputs, target=None):
    """The emulator's fp16 output of ``y`` on ``inputs`` (float64)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile([y], opt=0)
    with np.errstate(all="ignore"):
        (out,) = execute_fp16(prog, [np.asarray(v, np.float16) for v in inputs], target=target)
    return np.asarray(out, dtype=np.float64)


# ---- one random instance of each op ---------------------------------------------------


def col_signs(w, rows):
    """Sign patterns of an input [rows, K] whose row i reaches column i's row-sum bound
    against the weight ``w`` [K, N] (and -w's)."""
    w = np.nan_to_num(np.asarray(w, np.float64))
    pats = [np.stack([w[:, i % w.shape[1]] for i in range(rows)])]
    return pats


def case_matmul(rng):
    k, n, m = (int(v) for v in rng.integers(1, 9, 3))
    w = wild_weight(rng, (k, n))
    shape = [(m, k), (k,), (2, m, k)][rng.integers(3)]
    if rng.random() < 0.2:
        w = w[:, 0]
    x = af.input(shape, name="x")
    signs = col_signs(w.reshape(k, -1), m) if len(shape) == 2 else []
    return [af.matmul(x, w)], {x: draw_range(rng)}, {"x": signs}


def case_bmm(rng):
    k, n, m = (int(v) for v in rng.integers(1, 9, 3))
    a = af.input((2, m, k), name="a")
    kind = rng.integers(3)
    if kind == 0:  # two activations
        b = af.input((2, k, n), name="b")
        return [af.bmm(a, b)], {a: draw_range(rng), b: draw_range(rng)}, {}
    w = wild_weight(rng, (k, n))
    if kind == 1:  # a weight on the right, through the bmm op
        return [af.bmm(a, w)], {a: draw_range(rng)}, {}
    xt = af.input((k, n), name="xt")  # a weight on the left: W @ x
    return [af.matmul(wild_weight(rng, (m, k)), xt)], {xt: draw_range(rng)}, {}


def case_linear(rng):
    fin, fout, m = (int(v) for v in rng.integers(1, 9, 3))
    w = wild_weight(rng, (fout, fin))
    x = af.input((m, fin) if rng.random() < 0.7 else (2, m, fin), name="x")
    ranges = {x: draw_range(rng)}
    bias = None
    if rng.random() < 0.4:
        bias = wild_weight(rng, (fout,))
    elif rng.random() < 0.3:
        bias = af.input((fout,), name="b")
        ranges[bias] = draw_range(rng)
    signs = {"x": col_signs(w.T, m)} if len(x.shape) == 2 else {}
    return [af.linear(x, w, bias)], ranges, signs


def _conv_attrs(rng):
    stride = int(rng.integers(1, 3))
    dil = int(rng.integers(1, 3))
    pad = [0, 0, 1, int(rng.integers(0, 3))][rng.integers(4)]
    return stride, dil, pad


def case_conv(rng):
    nd = int(rng.integers(1, 3))
    g = int(rng.choice([1, 2]))
    cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    kern = tuple(int(v) for v in rng.integers(1, 4, nd))
    stride, dil, pad = _conv_attrs(rng)
    size = tuple(dil * (k - 1) + 1 + int(rng.integers(0, 4)) for k in kern)
    x = af.input((1, cin) + size, name="x")
    ranges = {x: draw_range(rng)}
    if rng.random() < 0.15:  # an activation as the kernel
        w = af.input((cout, cin // g) + kern, name="w")
        ranges[w] = draw_range(rng)
    else:
        w = wild_weight(rng, (cout, cin // g) + kern)
    bias = wild_weight(rng, (cout,)) if rng.random() < 0.4 else None
    y = af.conv(x, w, bias, stride=stride, padding=pad, dilation=dil, groups=g)
    return [y], ranges, {}


def case_conv_transpose(rng):
    nd = int(rng.integers(1, 3))
    g = int(rng.choice([1, 2]))
    cin, cout_g = g * int(rng.integers(1, 3)), int(rng.integers(1, 3))
    kern = tuple(int(v) for v in rng.integers(1, 4, nd))
    stride, dil, pad = _conv_attrs(rng)
    opad = int(rng.integers(0, max(stride, dil))) if rng.random() < 0.3 else 0
    size = tuple(int(rng.integers(1, 4)) for _ in kern)
    pad = min([pad] + [((n - 1) * stride + dil * (k - 1)) // 2 for n, k in zip(size, kern)])
    x = af.input((1, cin) + size, name="x")
    ranges = {x: draw_range(rng)}
    if rng.random() < 0.15:
        w = af.input((cin, cout_g) + kern, name="w")
        ranges[w] = draw_range(rng)
    else:
        w = wild_weight(rng, (cin, cout_g) + kern)
    bias = wild_weight(rng, (g * cout_g,)) if rng.random() < 0.4 else None
    y = af.conv_transpose(
        x, w, bias, stride=stride, padding=pad, output_padding=opad, dilation=dil, groups=g
    )
    return [y], ranges, {}


def causal_mask(s, t):
    return np.where(np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s), 0.0, -np.inf)


def case_sdpa(rng):
    b, s, t, d, dv = (int(v) for v in rng.integers(1, 7, 5))
    q, k, v = af.input((b, s, d), name="q"), af.input((b, t, d), name="k"), None
    ranges = {q: draw_range(rng), k: draw_range(rng)}
    if rng.random() < 0.15:
        v = wild_weight(rng, (b, t, dv))
    else:
        v = af.input((b, t, dv), name="v")
        ranges[v] = draw_range(rng)
    if rng.random() < 0.1:
        k = wild_weight(rng, (b, t, d), wild=False)
        del ranges[list(ranges)[1]]
    scale = [None, 0.35, 1.0, 4.0, -0.5][rng.integers(5)]
    mask = None
    kind = rng.integers(5)
    if kind == 1:
        mask = causal_mask(s, t)
    elif kind == 2:
        mask = wild_weight(rng, (s, t), wild=False)
    elif kind == 3:
        mask = af.input((1, s, t), name="m")
        ranges[mask] = draw_range(rng)
    elif kind == 4:
        mask = np.where(rng.random((s, t)) < 0.5, -np.inf, 0.0)
    return [sdpa(q, k, v, scale=scale, mask=mask)], ranges, {}


def case_cross_product(rng):
    n = int(rng.integers(1, 6))
    axis = int(rng.choice([-1, 0]))
    shape = (n, 3) if axis == -1 else (3, n)
    a = af.input(shape, name="a")
    ranges = {a: draw_range(rng)}
    if rng.random() < 0.3:
        b = wild_weight(rng, shape if rng.random() < 0.5 else ((3,) if axis == -1 else (3, 1)))
    else:
        b = af.input(shape, name="b")
        ranges[b] = draw_range(rng)
    return [cross_product(a, b, axis=axis)], ranges, {}


def case_cross_correlation(rng):
    c, th, tw = (int(v) for v in rng.integers(1, 4, 3))
    x = af.input((1, c, th + int(rng.integers(0, 3)), tw + int(rng.integers(0, 3))), name="x")
    ranges = {x: draw_range(rng)}
    if rng.random() < 0.5:
        t = wild_weight(rng, (c, th, tw))
    else:
        t = af.input((c, th, tw), name="t")
        ranges[t] = draw_range(rng)
    return [cross_correlation(x, t)], ranges, {}


def case_cost_volume(rng):
    c, h, w = (int(v) for v in rng.integers(1, 6, 3))
    left, right = af.input((1, c, h, w), name="l"), af.input((1, c, h, w), name="r")
    disp = int(rng.integers(1, w + 2))
    return [cost_volume(left, right, disp)], {left: draw_range(rng), right: draw_range(rng)}, {}


def case_fps(rng):
    n = int(rng.integers(1, 10))
    p = af.input((n, 3) if rng.random() < 0.5 else (2, n, 3), name="p")
    return [fps(p, int(rng.integers(1, n + 1)))], {p: draw_range(rng)}, {}


def case_radius_search(rng):
    n, m = int(rng.integers(1, 10)), int(rng.integers(1, 4))
    p, c = af.input((n, 3), name="p"), af.input((m, 3), name="c")
    radius = float(rng.choice([0.0, 0.5, 2.0, 1e3, 300.0]))
    y = radius_search(p, c, radius, int(rng.integers(1, n + 3)))
    return [y], {p: draw_range(rng), c: draw_range(rng)}, {}


CASES = {name: globals()[f"case_{name}"] for name in OPS}


# ---- (a) soundness -------------------------------------------------------------------


def test_every_op_of_these_files_has_a_rule():
    from aneforge.graph.registry import get_op

    for name in OPS:
        assert callable(get_op(name).range), name


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", OPS)
def test_sound_on_random_graphs(name, target):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{target}".encode()))
    runs = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(GRAPHS_PER_TARGET):
            outputs, ranges, signs = CASES[name](rng)
            runs += assert_sound(outputs, ranges, rng, target, signs=signs)
    assert runs == GRAPHS_PER_TARGET * FEEDS_PER_GRAPH  # x 3 targets: 900 runs per op


@pytest.mark.parametrize("name", OPS)
def test_unknown_inputs_give_unbounded_intervals_that_hold(name):
    """Without declared ranges every fp16 value, inf and NaN included, is in range: the
    rules must not raise, and must hold for such feeds."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for _ in range(6):
        outputs, ranges, _ = CASES[name](rng)
        prog = af.compile(outputs, opt=0)
        rep = af.range_analysis(prog)
        out = rep.nodes[-1]
        if name not in ("fps", "radius_search"):
            assert out.interval.nan and not out.known
        per_input = []
        for t in prog.inputs:
            vs = rng.standard_normal((4, *t.shape)) * 1e4
            for v in vs:
                v.flat[rng.integers(v.size)] = rng.choice([np.inf, -np.inf, np.nan, 0.0])
            per_input.append(list(vs.astype(np.float16)))
        assert_runs_inside(rep, per_input)


# ---- (b) tightness ---------------------------------------------------------------------


def observed_max(y, inputs, ranges, rng, n=100, target=None):
    """The largest |value| of ``y`` over ``n`` uniform in-range feeds."""
    best = 0.0
    for _ in range(n):
        run = [rng.uniform(*ranges[t], t.shape) for t in inputs]
        best = max(best, float(np.max(np.abs(emulate(y, *run, target=target)))))
    return best


def tightness(y, inputs, ranges, rng, n=100):
    bound = analyse([y], ranges).nodes[-1].interval
    return bound.max_abs / observed_max(y, inputs, ranges, rng, n)


def test_matmul_is_tight_with_random_weights():
    rng = np.random.default_rng(1)
    x = af.input((16, 64), name="x")
    y = af.matmul(x, rng.standard_normal((64, 32)).astype(np.float16))
    assert tightness(y, [x], {x: (-1.0, 1.0)}, rng) < 10


def test_matmul_is_exact_on_a_positive_weight():
    x = af.input((2, 3), name="x")
    w = np.array([[1.0, 2.0], [3.0, 0.0], [0.5, 4.0]])
    rep = analyse([af.matmul(x, w)], {x: (1.0, 2.0)})
    iv = rep.nodes[-1].interval
    assert (iv.lo, iv.hi) == (4.5, 12.0)  # per column: [4.5, 9] and [6, 12]
    y = af.matmul(x, w)
    assert (iv.lo, iv.hi) == (
        emulate(y, np.ones((2, 3))).min(),
        emulate(y, np.full((2, 3), 2)).max(),
    )


def test_weight_on_the_left_uses_its_rows():
    xt = af.input((3, 4), name="xt")
    w = np.array([[1.0, -1.0, 0.0], [0.0, 0.0, 0.25]])
    iv = analyse([af.matmul(w, xt)], {xt: (-2.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-4.0, 4.0)


def test_bmm_of_two_activations_is_k_corner_products():
    rng = np.random.default_rng(2)
    a, b = af.input((2, 4, 16), name="a"), af.input((2, 16, 5), name="b")
    ranges = {a: (-1.0, 1.0), b: (-1.0, 2.0)}
    y = af.bmm(a, b)
    iv = analyse([y], ranges).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-32.0, 32.0)
    assert emulate(y, np.ones((2, 4, 16)), 2 * np.ones((2, 16, 5))).max() == 32.0
    assert tightness(y, [a, b], ranges, rng) < 10


def test_linear_adds_the_bias_per_channel():
    x = af.input((3, 2), name="x")
    w = np.array([[1.0, 1.0], [-1.0, 0.0]])
    y = af.linear(x, w, np.array([10.0, -10.0]))
    iv = analyse([y], {x: (0.0, 1.0)}).nodes[-1].interval
    # channel 0: [0, 2] + 10, channel 1: [-1, 0] - 10; no cross-channel mixing
    assert (iv.lo, iv.hi) == (-11.0, 12.0)


def test_conv_is_tight_and_pads_with_zero():
    rng = np.random.default_rng(3)
    x = af.input((1, 4, 8, 8), name="x")
    w = (rng.standard_normal((6, 4, 3, 3)) / 6).astype(np.float16)
    y = af.conv(x, w, padding=1)
    assert tightness(y, [x], {x: (-1.0, 1.0)}, rng, n=40) < 10
    pos = af.conv(x, np.ones((1, 4, 3, 3)), padding=1)
    iv = analyse([pos], {x: (1.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (16.0, 72.0)  # a corner reads 16 real terms, the centre 36
    assert emulate(pos, np.ones((1, 4, 8, 8))).min() == 16.0
    nopad = af.conv(x, np.ones((1, 4, 3, 3)))
    iv = analyse([nopad], {x: (1.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (36.0, 72.0)


def test_grouped_conv_uses_each_channels_slice():
    x = af.input((1, 2, 3, 3), name="x")
    w = np.array([1.0, 100.0]).reshape(2, 1, 1, 1)
    y = af.conv(x, w, groups=2)
    iv = analyse([y], {x: (0.0, 1.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (0.0, 100.0)


def test_conv_transpose_is_tight():
    rng = np.random.default_rng(4)
    x = af.input((1, 4, 5, 5), name="x")
    w = (rng.standard_normal((4, 3, 3, 3)) / 4).astype(np.float16)
    y = af.conv_transpose(x, w, stride=2, padding=1)
    assert tightness(y, [x], {x: (-1.0, 1.0)}, rng, n=40) < 10
    ones = af.conv_transpose(x, np.ones((4, 1, 2, 2)), stride=2)
    iv = analyse([ones], {x: (1.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (4.0, 8.0)  # of 16 taps each output reads 4 real ones
    assert emulate(ones, 2 * np.ones((1, 4, 5, 5))).max() == 8.0
    assert emulate(ones, np.ones((1, 4, 5, 5))).min() == 4.0


def test_sdpa_output_is_bounded_by_v():
    rng = np.random.default_rng(5)
    q, k, v = (
        af.input((2, 6, 8), name="q"),
        af.input((2, 9, 8), name="k"),
        af.input((2, 9, 4), name="v"),
    )
    ranges = {q: (-3.0, 3.0), k: (-3.0, 3.0), v: (-1.0, 2.0)}
    y = sdpa(q, k, v)
    iv = analyse([y], ranges).nodes[-1].interval
    assert -1.01 < iv.lo <= -1.0 and 2.0 <= iv.hi < 2.02 and not iv.nan
    assert emulate(y, np.ones((2, 6, 8)), np.ones((2, 9, 8)), 2 * np.ones((2, 9, 4))).max() == 2.0
    assert tightness(y, [q, k, v], ranges, rng, n=40) < 2


@pytest.mark.parametrize("target", [None, "M1"])
def test_sdpa_weights_may_sum_past_one_over_long_rows(target):
    """Scores giving 1024 exponentials of 1 then 1024 of ~0.49: the narrow sum stalls at
    1024 (each 0.49 rounds away), so the weights sum to ~1.49 and the output passes
    max|v|. The bound allows for it; on M1 the 192-term route keeps the sum close."""
    q, k = af.input((1, 2, 4), name="q"), af.input((1, 2048, 4), name="k")
    v = af.input((1, 2048, 2), name="v")
    y = sdpa(q, k, v, scale=1.0)
    rep = analyse([y], {q: (0.0, 1.0), k: (-1.0, 1.0), v: (-1.0, 1.0)}, target)
    kk = np.zeros((1, 2048, 4))
    kk[0, 1024:, 0] = np.log(0.49)
    feeds = [np.zeros((1, 2, 4)), kk, np.ones((1, 2048, 2))]
    feeds[0][..., 0] = 1.0
    out = emulate(y, *feeds, target=target)
    assert out.max() > 1.4 if target is None else out.max() < 1.1
    assert not rep.violations(*[np.asarray(f, np.float16) for f in feeds])
    assert rep.nodes[-1].op == "sdpa" and rep.nodes[-1].interval.hi < 3


def test_sdpa_with_a_causal_mask_cannot_make_nan():
    q, k, v = (
        af.input((1, 5, 4), name="q"),
        af.input((1, 5, 4), name="k"),
        af.input((1, 5, 2), name="v"),
    )
    y = sdpa(q, k, v, mask=causal_mask(5, 5))
    iv = analyse([y], {q: (-3.0, 3.0), k: (-3.0, 3.0), v: (-1.0, 1.0)}).nodes[-1].interval
    assert not iv.nan
    # a mask that hides a whole row does make NaN
    hidden = np.zeros((5, 5))
    hidden[2] = -np.inf
    y = sdpa(q, k, v, mask=hidden)
    iv = analyse([y], {q: (-3.0, 3.0), k: (-3.0, 3.0), v: (-1.0, 1.0)}).nodes[-1].interval
    assert iv.nan
    assert np.isnan(emulate(y, np.ones((1, 5, 4)), np.ones((1, 5, 4)), np.ones((1, 5, 2)))).any()


def test_cross_product_is_exact():
    a, b = af.input((4, 3), name="a"), af.input((4, 3), name="b")
    y = cross_product(a, b)
    iv = analyse([y], {a: (-2.0, 2.0), b: (0.0, 3.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-12.0, 12.0)
    seen = emulate(y, np.tile([2.0, -2.0, 2.0], (4, 1)), np.full((4, 3), 3.0))
    assert seen.max() == 12.0 or seen.min() == -12.0
    # a constant operand is used per component: a x e_y = (-a_z, 0, a_x)
    y = cross_product(a, np.array([0.0, 1.0, 0.0]))
    iv = analyse([y], {a: (-2.0, 1.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-2.0, 2.0)


def test_cross_correlation_is_tight():
    rng = np.random.default_rng(6)
    x = af.input((1, 3, 8, 8), name="x")
    t = rng.standard_normal((3, 3, 3)).astype(np.float16)
    y = cross_correlation(x, t)
    assert tightness(y, [x], {x: (-1.0, 1.0)}, rng, n=40) < 10
    tt = af.input((3, 3, 3), name="t")
    y = cross_correlation(x, tt)
    iv = analyse([y], {x: (-1.0, 1.0), tt: (0.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-54.0, 54.0)


def test_cost_volume_is_exact():
    left, right = af.input((1, 4, 3, 5), name="l"), af.input((1, 4, 3, 5), name="r")
    y = cost_volume(left, right, 3)
    iv = analyse([y], {left: (-1.0, 2.0), right: (-1.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (-2.0, 4.0)
    two = 2 * np.ones((1, 4, 3, 5))
    assert emulate(y, two, two).max() == 4.0 and emulate(y, -two / 2, two).min() == -2.0
    y = cost_volume(left, right, 1)  # no disparity past the edge: no zeros
    iv = analyse([y], {left: (1.0, 2.0), right: (1.0, 2.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi) == (1.0, 4.0)


def test_index_ops_give_the_index_range():
    p = af.input((7, 3), name="p")
    iv = analyse([fps(p, 3)], {p: (-1.0, 1.0)}).nodes[-1].interval
    assert (iv.lo, iv.hi, iv.nan, iv.tiny) == (0.0, 6.0, False, 1.0)
    pts = np.zeros((7, 3))
    pts[6] = 1.0
    assert emulate(fps(p, 3), pts).max() == 6.0
    c = af.input((2, 3), name="c")
    iv = analyse([radius_search(p, c, 0.5, 9)], {p: (-1.0, 1.0), c: (-1.0, 1.0)}).nodes[-1]
    assert (iv.interval.lo, iv.interval.hi) == (-1.0, 6.0)
    assert emulate(radius_search(p, c, 0.5, 9), np.zeros((7, 3)), np.zeros((2, 3))).max() == 6.0


# ---- a realistic MLP, and the matmul saturation cliff -------------------------------------


def test_two_layer_mlp_is_clean_and_tight():
    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((128, 64)) / 8).astype(np.float16)
    w2 = (rng.standard_normal((10, 128)) / np.sqrt(128)).astype(np.float16)
    b1, b2 = (rng.standard_normal(128) * 0.1), (rng.standard_normal(10) * 0.1)
    x = af.input((8, 64), name="x")
    y = af.linear(af.relu(af.linear(x, w1, b1)), w2, b2)
    ranges = {x: (-3.0, 3.0)}
    for target in TARGETS:
        assert analyse([y], ranges, target).hazards == ()
    ratio = tightness(y, [x], ranges, rng)
    assert ratio < 100


def test_a_bound_past_32752_is_a_matmul_saturation_hazard():
    rng = np.random.default_rng(8)
    w = rng.standard_normal((6, 64)).astype(np.float16)
    hi = float(np.float16(40000.0 / np.abs(w.astype(np.float64)).sum(1).max()))
    x = af.input((6, 64), name="x")
    y = af.linear(x, w, name="fc")
    ranges = {x: (-hi, hi)}
    assert analyse([y], ranges).hazards == ()  # under 65504 without a target
    rep = analyse([y], ranges, "M1")
    (h,) = rep.hazards
    assert (h.kind, h.certainty, h.name) == ("matmul_saturation", "may", "fc")
    assert 32752 < h.bound < 65504
    adversarial = np.sign(w) * np.float16(hi)  # row j reaches output j's row sum
    on_m1 = np.diagonal(emulate(y, adversarial, target="M1"))
    generic = np.diagonal(emulate(y, adversarial))
    j = int(np.argmax(np.abs(generic)))
    assert np.isinf(on_m1[j]) and 32752 < abs(generic[j]) < 65504
    assert not rep.violations(adversarial)


# ---- (c) the composite ops' internal steps -------------------------------------------------


def steps_hazards(y, ranges, target=None):
    return {(h.kind, h.step) for h in analyse([y], ranges, target).hazards}


def test_sdpa_scores_step_overflows_only_for_large_inputs():
    q, k, v = (
        af.input((1, 4, 8), name="q"),
        af.input((1, 6, 8), name="k"),
        af.input((1, 6, 2), name="v"),
    )
    small = {q: (-3.0, 3.0), k: (-3.0, 3.0), v: (-1.0, 1.0)}
    assert steps_hazards(sdpa(q, k, v, scale=1.0), small) == set()
    big = {q: (-100.0, 100.0), k: (-100.0, 100.0), v: (-1.0, 1.0)}
    assert ("overflow", "q@k*scale") in steps_hazards(sdpa(q, k, v, scale=1.0), big)
    # a scale > 1 overflows the step although q @ k itself stays finite
    mid = {q: (-30.0, 30.0), k: (-30.0, 30.0), v: (-1.0, 1.0)}
    assert ("overflow", "q@k*scale") in steps_hazards(sdpa(q, k, v, scale=16.0), mid)
    assert steps_hazards(sdpa(q, k, v, scale=0.25), mid) == set()
    # M1: q @ k past 32752 (under 65504) saturates before the scale
    sat = {q: (-70.0, 70.0), k: (-70.0, 70.0), v: (-1.0, 1.0)}
    assert ("matmul_saturation", None) in steps_hazards(sdpa(q, k, v, scale=0.01), sat, "M1")
    assert ("matmul_saturation", None) not in steps_hazards(sdpa(q, k, v, scale=0.01), sat)
    out = emulate(
        sdpa(q, k, v, scale=1.0),
        np.full((1, 4, 8), 100.0),
        np.full((1, 6, 8), 100.0),
        np.ones((1, 6, 2)),
    )
    assert np.isnan(out).all()  # the overflowed scores reach the output as NaN


def test_sdpa_mask_step_overflows():
    q, k, v = (
        af.input((1, 4, 8), name="q"),
        af.input((1, 6, 8), name="k"),
        af.input((1, 6, 2), name="v"),
    )
    ranges = {q: (-30.0, 30.0), k: (-30.0, 30.0), v: (-1.0, 1.0)}
    mask = np.full((4, 6), -60000.0)
    assert ("overflow", "q@k*scale+mask") in steps_hazards(sdpa(q, k, v, 1.0, mask), ranges)
    assert steps_hazards(sdpa(q, k, v, 1.0, np.full((4, 6), -100.0)), ranges) == set()


def test_cost_volume_steps_overflow():
    left, right = af.input((1, 16, 2, 4), name="l"), af.input((1, 16, 2, 4), name="r")
    y = cost_volume(left, right, 2)
    assert steps_hazards(y, {left: (-30.0, 30.0), right: (-30.0, 30.0)}) == set()
    found = steps_hazards(y, {left: (-100.0, 100.0), right: (-100.0, 100.0)})
    assert ("overflow", "sum(l*r)") in found and ("overflow", "l*r") not in found
    assert ("overflow", "l*r") in steps_hazards(y, {left: (-300.0, 300.0), right: (0.0, 300.0)})
    big = np.full((1, 16, 2, 4), 100.0)
    assert np.isinf(emulate(y, big, big)).any()


def test_cross_product_step_overflows():
    a, b = af.input((2, 3), name="a"), af.input((2, 3), name="b")
    y = cross_product(a, b)
    assert steps_hazards(y, {a: (-100.0, 100.0), b: (-100.0, 100.0)}) == set()
    assert ("overflow", "a*b") in steps_hazards(y, {a: (-300.0, 300.0), b: (-300.0, 300.0)})


@pytest.mark.parametrize(
    "kind", ["gaussian", "abs", "rank_one", "ill_conditioned", "tall", "wide", "tiny"]
)
def test_the_spectral_norm_bound_is_the_svds_norm_from_above(kind):
    """The Gram-matrix bound used for output 2-norms is never below LAPACK's SVD norm and
    at most 1e-9 above it, from rank one to condition 1e12."""
    rng = np.random.default_rng(len(kind))
    m = rng.standard_normal((96, 160)) * 0.05
    if kind == "abs":
        m = np.abs(m)
    elif kind == "rank_one":
        m = np.outer(rng.standard_normal(96), rng.standard_normal(160))
    elif kind == "ill_conditioned":
        u, _ = np.linalg.qr(rng.standard_normal((96, 96)))
        v, _ = np.linalg.qr(rng.standard_normal((160, 96)))
        m = (u * np.logspace(0, -12, 96)) @ v.T
    elif kind == "tall":
        m = rng.standard_normal((700, 40))
    elif kind == "wide":
        m = rng.standard_normal((3, 900)) * 1e3
    elif kind == "tiny":
        m = np.array([[2.0**-20]])
    svd = float(np.linalg.svd(m, compute_uv=False)[0])
    got = spectral_norm_bound(m)
    assert svd <= got <= svd * (1 + 1e-9)
