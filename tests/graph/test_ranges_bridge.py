"""Range rules of the selection, normalization, layout and scaled-elementwise bridge ops.

For every op of those four modules: soundness against the emulator over random small
graphs and adversarial inputs (with and without a target, declared and unknown inputs),
the rule called directly on infinite and NaN source intervals, tightness on a
representative case (exact where the rule is exact), and the internal-step hazards of
the composite ops (minmax_norm, lrn, scaled_elementwise).
"""

from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.gemm import gemm_reference
from aneforge.graph.ops.bridge import (
    argmax,
    batch_to_space,
    channel_to_space,
    dynamic_slice,
    flatten,
    input_view,
    lrn,
    minmax_norm,
    scaled_elementwise,
    sort,
    space_to_batch,
    space_to_channel,
    topk,
)
from aneforge.graph.ranges import Interval, RangeEnv
from aneforge.graph.registry import get_op
from range_cases import assert_runs_inside

OPS = (
    "argmax",
    "topk",
    "sort",
    "minmax_norm",
    "lrn",
    "flatten",
    "space_to_channel",
    "channel_to_space",
    "space_to_batch",
    "batch_to_space",
    "input_view",
    "dynamic_slice",
    "scaled_elementwise",
)
GRAPHS_PER_CASE = 12
FEEDS_PER_GRAPH = 10
SCALES = (1.0, 8.0, 300.0, 2.0**-12, 3000.0, 30000.0, 65504.0)
SPECIAL = np.array([np.inf, -np.inf, np.nan, 65504.0, -65504.0, 0.0, 2.0**-24], np.float16)


def draw_range(rng) -> tuple[float, float] | None:
    """A declared range (straddling zero, one-sided, a point, symmetric) or None for an
    unknown input."""
    kind = int(rng.integers(6))
    if kind == 5:
        return None
    scale = float(rng.choice(SCALES))
    a, b = sorted(rng.uniform(-1.0, 1.0, 2) * scale)
    if kind == 1:
        a, b = abs(a), min(abs(a) + abs(b), 65504.0)
    elif kind == 2:
        a, b = -abs(b), -abs(b) + abs(a) * 0.5
    elif kind == 3:
        a = b = float(rng.uniform(-1, 1) * scale)
    elif kind == 4:
        a, b = -scale, scale
    return float(a), float(b)


def feeds(rng, shape, rng_range, n):
    """``n`` fp16 arrays inside the range (or anything fp16, inf and NaN included, for
    an unknown input): the ends, alternating ends, zeros with sparse ends, uniform
    draws and values clustered at the ends."""
    if rng_range is None:
        out = []
        for _ in range(n):
            v = (rng.standard_normal(shape) * float(rng.choice(SCALES))).astype(np.float16)
            mask = rng.random(shape) < 0.3
            v[mask] = rng.choice(SPECIAL, size=int(mask.sum()))
            out.append(v)
        return out
    lo, hi = np.float16(rng_range[0]), np.float16(rng_range[1])
    mid = np.clip(np.float16(0.0), lo, hi)
    alt = np.where(np.indices(shape).sum(0) % 2 == 0, lo, hi).astype(np.float16)
    out = [np.full(shape, lo), np.full(shape, hi), alt]
    while len(out) < n:
        pick = rng.integers(4)
        if pick == 0:
            u = rng.uniform(float(lo), float(hi), shape)
        elif pick == 1:
            u = np.where(rng.random(shape) < 0.5, lo, hi)
        elif pick == 2:
            u = np.full(shape, mid, np.float64)
            hit = rng.random(shape) < 0.2
            u[hit] = rng.choice([lo, hi], size=int(hit.sum()))
        else:
            ends = np.array([lo, hi, mid, np.nextafter(lo, hi), np.nextafter(hi, lo)])
            u = rng.choice(ends, size=shape)
        out.append(np.clip(np.asarray(u).astype(np.float16), lo, hi))
    return out[:n]


def check_sound(outputs, inputs, ranges, rng, target):
    """Analyse ``outputs`` (``ranges[i]`` for ``inputs[i]``, None = unknown) and assert
    that no node of ``FEEDS_PER_GRAPH`` runs leaves its interval; returns the runs."""
    given = {t.name: r for t, r in zip(inputs, ranges) if r is not None}
    rep = af.range_analysis(outputs, input_ranges=given, target=target)
    by_name = dict(zip((t.name for t in inputs), ranges))
    per_input = [feeds(rng, t.shape, by_name[t.name], FEEDS_PER_GRAPH) for t in rep.program.inputs]
    return assert_runs_inside(rep, per_input, f"; ranges {ranges}")


# ---- one random small instance per op -------------------------------------------------


def _case(name, rng):
    """(outputs, inputs, ranges) of a random small instance of ``name``."""
    r = draw_range(rng)
    if name in ("argmax", "topk", "sort"):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 4))))
        x = af.input(shape, name="x")
        axis = int(rng.integers(-len(shape), len(shape)))
        if name == "argmax":
            return [argmax(x, axis=axis, keepdims=bool(rng.integers(2)))], [x], [r]
        if name == "sort":
            return [sort(x, axis=axis, descending=bool(rng.integers(2)))], [x], [r]
        k = int(rng.integers(1, shape[axis] + 1))
        return list(topk(x, k, axis=axis, largest=bool(rng.integers(2)))), [x], [r]
    if name == "minmax_norm":
        shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 4))))
        x = af.input(shape, name="x")
        axes = None if rng.random() < 0.4 else int(rng.integers(len(shape)))
        eps = float(rng.choice([1e-5, 0.0, 1e-9, 0.5, 6e4, -1e-3]))
        return [minmax_norm(x, axes=axes, eps=eps)], [x], [r]
    if name == "lrn":
        c = int(rng.integers(1, 7))
        x = af.input((1, c, 2, int(rng.integers(1, 4))), name="x")
        attrs = {
            "size": int(rng.integers(1, 7)),
            "alpha": float(rng.choice([1e-4, 1.0, 0.0, -0.5, 3.0])),
            "beta": float(rng.choice([0.75, 0.5, 1.5, 2.0, -0.5, 0.0])),
            "bias": float(rng.choice([1.0, 2.0, 0.5, 0.0, -1.0, 300.0])),
        }
        return [lrn(x, **attrs)], [x], [r]
    if name == "flatten":
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
        x = af.input(shape, name="x")
        return [flatten(x, axis=int(rng.integers(-len(shape), len(shape) + 1)))], [x], [r]
    if name in ("space_to_channel", "space_to_batch", "channel_to_space", "batch_to_space"):
        f = int(rng.integers(1, 3))
        fn = {
            "space_to_channel": space_to_channel,
            "space_to_batch": space_to_batch,
            "channel_to_space": channel_to_space,
            "batch_to_space": batch_to_space,
        }[name]
        if name.startswith("space"):
            shape = (1, 2, 2 * f, 3 * f)
        elif name == "channel_to_space":
            shape = (1, 2 * f * f, 2, 3)
        else:
            shape = (f * f, 2, 2, 3)
        x = af.input(shape, name="x")
        return [fn(x, f)], [x], [r]
    if name == "input_view":
        shape = (2, 3, 6)
        x = af.input(shape, name="x")
        begins = tuple(int(rng.integers(0, d)) for d in shape)
        sizes = tuple(int(rng.integers(1, d - b + 1)) for b, d in zip(begins, shape))
        return [input_view(x, begins, sizes)], [x], [r]
    if name == "dynamic_slice":
        shape = (3, 5)
        x, at = af.input(shape, name="x"), af.input((2,), name="at")
        sizes = tuple(int(rng.integers(1, d + 1)) for d in shape)
        at_range = [None, (0.0, 4.0), (-6.0, 30.0), (-3000.0, 3000.0)][int(rng.integers(4))]
        return [dynamic_slice(x, at, sizes)], [x, at], [r, at_range]
    if name == "scaled_elementwise":
        a = af.input((2, 3), name="a")
        op = str(rng.choice(["add", "sub", "mul"]))
        scale = float(rng.choice([1.0, 0.5, 3.0, -2.0, 0.0, 6e4, 2.0**-20]))
        if rng.random() < 0.3:  # a broadcast weight as the second operand
            w = rng.choice([0.0, -1.5, 4.0, 300.0, np.inf], size=(3,))
            return [scaled_elementwise(a, w, op=op, scale=scale)], [a], [r]
        b = af.input((1, 3) if rng.random() < 0.5 else (2, 3), name="b")
        return [scaled_elementwise(a, b, op=op, scale=scale)], [a, b], [r, draw_range(rng)]
    raise AssertionError(name)


@pytest.mark.parametrize("target", [None, "M1", "M4"])
@pytest.mark.parametrize("name", OPS)
def test_sound_against_the_emulator(name, target):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{target}".encode()))
    runs = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(GRAPHS_PER_CASE):
            outputs, inputs, ranges = _case(name, rng)
            runs += check_sound(outputs, inputs, ranges, rng, target)
    assert runs == GRAPHS_PER_CASE * FEEDS_PER_GRAPH


# ---- the rules on infinite and NaN source intervals ----------------------------------

ODD_INTERVALS = (
    Interval.unknown(),
    Interval(-math.inf, 0.0),
    Interval(0.0, math.inf),
    Interval(math.inf, math.inf),
    Interval(-math.inf, -math.inf),
    Interval(-math.inf, math.inf),
    Interval(0.0, 0.0, nan=True),
    Interval(0.0, 0.0),
    Interval(-65504.0, 65504.0, nan=True),
    Interval(2.0**-24, 2.0**-24),
    Interval(-3.0, 5.0),
)


def _values_of(iv: Interval, rng, shape):
    """fp16 values inside ``iv``: its ends, 0 when inside, NaN when allowed, uniform."""
    lo, hi = np.float16(iv.lo), np.float16(iv.hi)
    pool = [lo, hi]
    if iv.lo <= 0 <= iv.hi:
        pool.append(np.float16(0))
    if iv.nan:
        pool.append(np.float16(np.nan))
    flo = max(float(lo), -65504.0)
    fhi = min(float(hi), 65504.0)
    if flo <= fhi:
        pool += list(np.float16(np.linspace(flo, fhi, 7)))
    pool = np.array(pool, np.float16)
    return rng.choice(pool, size=shape)


def _direct_nodes():
    x4 = af.input((1, 3, 2, 2))
    v = af.input((2, 5))
    yield argmax(v)
    yield from topk(v, 2)
    yield sort(v)
    yield minmax_norm(v, axes=1)
    yield minmax_norm(v, axes=1, eps=0.0)
    yield minmax_norm(v, axes=1, eps=-0.25)
    yield lrn(x4, size=3)
    yield lrn(x4, size=2, alpha=0.0, beta=-0.5, bias=0.0)
    yield lrn(x4, size=4, alpha=-1.0, beta=1.5, bias=-1.0)
    yield flatten(x4, axis=2)
    yield space_to_channel(af.input((1, 1, 2, 2)), 2)
    yield channel_to_space(af.input((1, 4, 1, 1)), 2)
    yield space_to_batch(af.input((1, 1, 2, 2)), 2)
    yield batch_to_space(af.input((4, 1, 1, 1)), 2)
    yield input_view(v, (1, 1), (1, 3))
    yield dynamic_slice(v, af.input((2,)), (1, 3))
    for op in ("add", "sub", "mul"):
        for scale in (0.5, 0.0, 6e4, -3.0):
            yield scaled_elementwise(v, af.input((2, 5)), op=op, scale=scale)


def test_rules_on_infinite_and_nan_intervals():
    """Every rule returns an Interval for any source intervals, and it holds every value
    the kernel gives for inputs drawn inside them (inf and NaN included)."""
    rng = np.random.default_rng(7)
    checked = 0
    for node in _direct_nodes():
        op = get_op(node.op)
        for first in ODD_INTERVALS:
            for other in ODD_INTERVALS if len(node.srcs) == 2 else (None,):
                srcs = [first] if other is None else [first, other]
                iv = op.range(node, srcs, RangeEnv(mm=gemm_reference))
                assert isinstance(iv, Interval)
                for _ in range(6):
                    ins = [_values_of(s, rng, t.shape) for s, t in zip(srcs, node.srcs)]
                    out = op.emulate(ins, dict(node.attrs), gemm_reference)
                    assert iv.contains(out), (node.op, node.attrs, srcs, iv, out)
                    checked += 1
    assert checked > 3000


# ---- tightness ------------------------------------------------------------------------


def _observed(outputs, inputs, ranges, rng, n=100):
    """(report, largest |value| of the last output over ``n`` in-range runs)."""
    given = {t.name: r for t, r in zip(inputs, ranges)}
    rep = af.range_analysis(outputs, input_ranges=given)
    prog = af.compile(outputs, opt=0)
    by_name = dict(zip((t.name for t in inputs), ranges))
    per = [feeds(rng, t.shape, by_name[t.name], n) for t in prog.inputs]
    seen = 0.0
    with np.errstate(all="ignore"):
        for k in range(n):
            got = prog(*[f[k] for f in per])
            last = got[-1] if isinstance(got, (list, tuple)) else got
            seen = max(seen, float(np.nanmax(np.abs(np.asarray(last, np.float64)))))
    return rep, seen


def _interval(rep, tensor):
    return rep.interval(tensor)


def test_index_outputs_are_exact_index_ranges():
    rng = np.random.default_rng(1)
    x = af.input((64, 16), name="x")
    idx = argmax(x, axis=1)
    rep, seen = _observed([idx], [x], [(-1.0, 1.0)], rng)
    iv = _interval(rep, idx)
    assert (iv.lo, iv.hi, iv.nan, iv.tiny) == (0.0, 15.0, False, 1.0)
    assert seen == 15.0
    vals, ind = topk(x, 3, axis=0, largest=False)
    rep, seen = _observed([vals, ind], [x], [(-1.0, 1.0)], rng)
    assert (_interval(rep, ind).lo, _interval(rep, ind).hi) == (0.0, 63.0)
    assert seen == 63.0
    assert str(_interval(rep, vals)) == "[-1, 1]"
    # NaN inputs: an index is still an index, never NaN
    rep = af.range_analysis(argmax(x), input_ranges={})
    assert not rep.nodes[-1].interval.nan and rep.nodes[-1].interval.hi == 15.0
    # a constant input: ties keep index order
    _, ind = topk(x, 3, axis=1)
    rep = af.range_analysis([argmax(x), ind], input_ranges={"x": (2.0, 2.0)})
    assert [str(n.interval) for n in rep.nodes[1:]] == ["[0, 0]", "[0, 2]"]


@pytest.mark.parametrize(
    "make",
    [
        lambda x: sort(x, axis=1, descending=True),
        lambda x: topk(x, 2, axis=1)[0],
        lambda x: flatten(x, axis=1),
        lambda x: space_to_channel(x, 2),
        lambda x: channel_to_space(x, 2),
        lambda x: space_to_batch(x, 2),
        lambda x: batch_to_space(x, 2),
        lambda x: input_view(x, (0, 1, 1, 0), (1, 2, 2, 4)),
        lambda x: dynamic_slice(x, af.input((4,), name="at", range=(-9, 9)), (2, 3, 2, 2)),
    ],
)
def test_movement_is_exact(make):
    """Movement and selection of values: the input's interval, reached exactly."""
    rng = np.random.default_rng(2)
    x = af.input((4, 4, 4, 4), name="x")
    y = make(x)
    inputs = [x] + [s for s in y.srcs if s.op == "input" and s is not x]
    ranges = [(-3.0, 7.5)] + [(-9.0, 9.0)] * (len(inputs) - 1)
    rep, seen = _observed([y], inputs, ranges, rng)
    iv = _interval(rep, y)
    assert (iv.lo, iv.hi, iv.nan) == (-3.0, 7.5, False)
    assert seen == 7.5


def test_input_view_width_offset_clamp_on_a13():
    """The driver applies the crop-DMA clamp to the rule's pre-clamp interval."""
    x = af.input((2, 8), name="x", range=(-5000.0, 100.0))
    view = input_view(x, (0, 2), (2, 4))
    rep = af.range_analysis(view, target="M1")
    assert str(rep.interval(view)) == "[-inf, 100]"
    assert "crop_dma" in [h.kind for h in rep.hazards]
    assert str(af.range_analysis(view, target="M4").interval(view)) == "[-5000, 100]"


def test_minmax_norm_bound_is_exact():
    rng = np.random.default_rng(3)
    x = af.input((8, 12), name="x")
    y = minmax_norm(x)
    rep, seen = _observed([y], [x], [(-20.0, 50.0)], rng)
    iv = _interval(rep, y)
    assert (iv.lo, iv.hi, iv.nan) == (0.0, 1.0, False) and seen == 1.0
    # a width far below eps: the peak is dr / fp16(dr + eps), below 1
    rep, seen = _observed([y], [x], [(0.0, 1e-4)], rng)
    iv = _interval(rep, y)
    want = np.float16(np.float16(1e-4) / np.float16(np.float16(1e-4) + np.float16(1e-5)))
    assert iv.hi == float(want) == seen
    # eps = 0: a constant group divides 0 by 0
    assert (
        af.range_analysis(minmax_norm(x, eps=0.0), input_ranges={"x": (0, 1)})
        .nodes[-1]
        .interval.nan
    )


@pytest.mark.parametrize(
    ("attrs", "limit"),
    [
        ({"size": 5}, 1.05),  # the ONNX defaults: y is almost x
        ({"size": 3, "alpha": 1.0}, 1.5),
        ({"size": 4, "alpha": 0.5, "beta": 1.0, "bias": 2.0}, 1.5),
    ],
)
def test_lrn_tightness(attrs, limit):
    """Bound over the largest |y| seen, on sparse inputs (a value with zero neighbours
    reaches the peak) and on random ones (within the 10x target)."""
    rng = np.random.default_rng(4)
    x = af.input((1, 6, 3, 3), name="x")
    y = lrn(x, **attrs)
    rep, seen = _observed([y], [x], [(-10.0, 10.0)], rng, n=200)
    bound = _interval(rep, y).max_abs
    assert seen <= bound <= limit * seen
    assert bound <= 10.0 / float(np.float16(attrs.get("bias", 1.0))) ** attrs.get("beta", 0.75)
    u = [rng.uniform(-10, 10, (1, 6, 3, 3)).astype(np.float16) for _ in range(100)]
    prog = af.compile(y, opt=0)
    random_max = max(float(np.abs(np.asarray(prog(v), np.float64)).max()) for v in u)
    assert bound <= 10 * random_max


def test_scaled_elementwise_is_exact_at_corners():
    a = af.input((3,), name="a", range=(-1.0, 2.0))
    b = af.input((3,), name="b", range=(0.0, 4.0))
    prog_cases = {
        ("add", 0.5): "[-0.5, 3]",
        ("sub", 3.0): "[-15, 6]",
        ("mul", -0.5): "[-4, 2]",
        ("mul", 0.0): "[0, 0]",
    }
    for (op, scale), want in prog_cases.items():
        y = scaled_elementwise(a, b, op=op, scale=scale)
        rep = af.range_analysis(y)
        assert str(rep.interval(y)) == want
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # scale 0: a certain underflow, by design
            prog = af.compile(y, opt=0)
        seen = [
            prog(np.full(3, p, np.float16), np.full(3, q, np.float16))
            for p in (-1.0, 2.0)
            for q in (0.0, 4.0)
        ]
        seen = np.concatenate([np.asarray(s, np.float64) for s in seen])
        assert (seen.min(), seen.max()) == (rep.interval(y).lo, rep.interval(y).hi)


def test_scaled_elementwise_nan_from_zero_times_inf_inside():
    """0 * inf with the zero strictly inside a source interval is not at any corner."""
    node = scaled_elementwise(af.input((2,)), af.input((2,)), op="mul", scale=1.0)
    rule = get_op("scaled_elementwise").range
    iv = rule(node, [Interval(-1.0, 2.0), Interval(1.0, math.inf)], RangeEnv())
    assert iv.nan
    # a scale past fp16 (it would round to inf) is refused where the op is built
    with pytest.raises(af.AttributeValueError, match="scale"):
        scaled_elementwise(af.input((2,)), af.input((2,)), op="add", scale=1e6)


# ---- internal-step hazards ------------------------------------------------------------


def _steps(rep, kind="overflow"):
    return [(h.kind, h.step) for h in rep.hazards if h.kind == kind]


def test_minmax_norm_width_overflow_hazard():
    x = af.input((2, 8), name="x")
    y = minmax_norm(x, name="mm")
    rep = af.range_analysis(y, input_ranges={"x": (-40000.0, 40000.0)})
    assert ("overflow", "max-min") in _steps(rep)
    assert str(rep.interval(y)) == "[0, 1] or nan"  # inf / inf at the maximum
    a = np.full((2, 8), 40000.0, np.float16)
    a[:, 0] = -40000.0
    assert np.isnan(np.asarray(af.compile(y, opt=0)(a), np.float64)).any()
    rep = af.range_analysis(y, input_ranges={"x": (-1000.0, 1000.0)})
    assert rep.hazards == () and str(rep.interval(y)) == "[0, 1]"


def test_lrn_square_overflow_hazard():
    x = af.input((1, 4, 2, 2), name="x")
    y = lrn(x, size=3, name="n")
    rep = af.range_analysis(y, input_ranges={"x": (-300.0, 300.0)})
    assert _steps(rep) == [("overflow", "x*x")]  # the first step: the sum follows it
    # once x*x is inf, y is x / inf = 0: the output itself stays finite
    assert rep.interval(y).finite
    big = np.full((1, 4, 2, 2), 300.0, np.float16)
    assert (np.asarray(af.compile(y, opt=0)(big)) == 0).all()
    rep = af.range_analysis(y, input_ranges={"x": (-10.0, 10.0)})
    assert rep.hazards == ()
    # the window sum alone can overflow: 3 squares of 200 pass 65504
    rep = af.range_analysis(y, input_ranges={"x": (-200.0, 200.0)})
    assert _steps(rep) == [("overflow", "sum(x*x)")]


def test_lrn_power_overflow_hazard():
    """t**beta overflows while the sum stays finite (a large bias with beta = 2)."""
    x = af.input((1, 4, 2, 2), name="x")
    y = lrn(x, size=3, beta=2.0, bias=300.0)
    rep = af.range_analysis(y, input_ranges={"x": (-10.0, 10.0)})
    assert _steps(rep) == [("overflow", "t**beta")]
    rep = af.range_analysis(lrn(x, size=3, beta=2.0, bias=3.0), input_ranges={"x": (-10, 10)})
    assert rep.hazards == ()


def test_scaled_elementwise_step_hazard():
    a, b = af.input((3,), name="a"), af.input((3,), name="b")
    y = scaled_elementwise(a, b, op="add", scale=0.25)
    rep = af.range_analysis(y, input_ranges={"a": (-40000, 40000), "b": (-40000, 40000)})
    assert ("overflow", "a+b") in _steps(rep)
    rep = af.range_analysis(y, input_ranges={"a": (-100, 100), "b": (-100, 100)})
    assert rep.hazards == ()
    z = scaled_elementwise(a, b, op="mul", scale=2.0**-10)
    rep = af.range_analysis(z, input_ranges={"a": (-300, 300), "b": (-300, 300)})
    assert ("overflow", "a*b") in _steps(rep)  # the product, before the small scale
    assert str(rep.interval(z)) == "[-inf, inf]"
