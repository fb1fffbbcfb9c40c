"""The rule sets: CANONICAL (each rule), NUMERIC and REDUCE_TO_MATMUL, checked on the emulator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aneforge as af
from aneforge.graph.rewrite import rewrite
from aneforge.graph.tensor import weight
from aneforge.graph.walk import topological_order
from aneforge.optimizer.rules import (
    CANONICAL,
    CONST_FOLD_MAX_ELEMS,
    NUMERIC,
    REDUCE_TO_MATMUL,
    canonicalize,
    reduce_sum_to_matmul,
)
from conftest import matmul_error_bound


def _ops(outputs):
    outs = [outputs] if isinstance(outputs, af.Tensor) else list(outputs)
    return [n.op for n in topological_order(outs) if n.op not in ("input", "weight")]


def _run(outputs, *feeds):
    outs = [outputs] if isinstance(outputs, af.Tensor) else list(outputs)
    return af.compile(outs, opt=0).run(*feeds)


def _bits(a):
    return np.asarray(a, np.float16).view(np.uint16)


def _fp16(values):
    return np.asarray(values, np.float64).astype(np.float16).astype(np.float64)


# ---- the rule sets as data -------------------------------------------------------------


def test_rule_sets_are_tagged_with_their_loss_class():
    assert all(r.lossless for r in CANONICAL)
    assert not any(r.lossless for r in NUMERIC)
    assert [r.exactness for r in REDUCE_TO_MATMUL] == ["equal-or-better", "bit-identical"]
    names = [r.name for r in (*CANONICAL, *NUMERIC, *REDUCE_TO_MATMUL)]
    assert len(names) == len(set(names))
    assert all(r.doc for r in (*CANONICAL, *NUMERIC, *REDUCE_TO_MATMUL))


# ---- canonical, rule by rule -------------------------------------------------------------


def test_drop_cast():
    x = af.input((2, 3))
    assert canonicalize(af.cast(x)) is x
    assert canonicalize(af.cast(af.cast(x)).relu()).srcs[0] is x


def test_identity_reshape_is_dropped_and_a_real_one_kept():
    x = af.input((2, 3))
    assert canonicalize(x.reshape((2, 3))) is x
    real = canonicalize(x.reshape((3, 2)))
    assert real.op == "reshape" and real.shape == (3, 2) and real.srcs[0] is x


def test_reshape_chain_becomes_one_reshape(rng):
    x = af.input((2, 3, 4))
    y = x.reshape((6, 4)).reshape((24,)).reshape((4, 6))
    out = canonicalize(y)
    assert out.op == "reshape" and out.srcs[0] is x and out.shape == (4, 6)
    feed = rng.standard_normal((2, 3, 4))
    np.testing.assert_array_equal(_run(out, feed)[0], _run(y, feed)[0])


def test_reshape_chain_back_to_the_original_shape_vanishes():
    x = af.input((2, 3, 4))
    assert canonicalize(x.reshape((24,)).reshape((6, 4)).reshape((2, 3, 4))) is x


@pytest.mark.parametrize("ndim", [2, 3, 4])
def test_transpose_chains_compose_their_permutations(ndim, rng):
    shape = (2, 3, 4, 5)[:ndim]
    x = af.input(shape)
    feed = rng.standard_normal(shape)
    for p1, p2 in itertools.product(itertools.permutations(range(ndim)), repeat=2):
        y = af.transpose(af.transpose(x, p1), p2)
        out = canonicalize(y)
        composed = tuple(p1[j] for j in p2)
        want = np.transpose(np.transpose(feed, p1), p2).astype(np.float16)
        if composed == tuple(range(ndim)):
            assert out is x, (p1, p2)
        else:
            assert out.op == "transpose" and out.srcs[0] is x, (p1, p2)
            assert tuple(out.attrs["perm"]) == composed, (p1, p2)
        if ndim <= 3:
            np.testing.assert_array_equal(_run(out, feed)[0], want)


def test_default_reversing_transposes_cancel():
    x = af.input((2, 3, 4))
    assert canonicalize(af.transpose(af.transpose(x))) is x
    mixed = canonicalize(af.transpose(af.transpose(x, (1, 0, 2))))
    assert mixed.op == "transpose" and tuple(mixed.attrs["perm"]) == (2, 0, 1)


def test_identity_transpose_is_dropped():
    x = af.input((2, 3, 4))
    assert canonicalize(af.transpose(x, (0, 1, 2))) is x
    y = af.input((5,))
    assert canonicalize(af.transpose(y)) is y  # rank 1: the reversal is the identity


@pytest.mark.parametrize("one", [1.0, np.ones(()), np.ones((3,)), np.ones((1, 3)), np.ones((2, 3))])
def test_mul_by_one_on_either_side_when_the_shape_is_kept(one):
    x = af.input((2, 3))
    assert canonicalize(x * one) is x
    assert canonicalize(one * x) is x


@pytest.mark.parametrize(
    ("x_shape", "one_shape"), [((2, 3), (4, 2, 3)), ((3,), (2, 3)), ((2, 1), (2, 5))]
)
def test_a_broadcasting_one_stays(x_shape, one_shape):
    x = af.input(x_shape)
    for y in (x * np.ones(one_shape), np.ones(one_shape) * x):
        assert y.shape != x.shape
        out = canonicalize(y)
        assert out is y and out.op == "mul"


def test_a_broadcasting_one_stays_and_keeps_its_values(rng):
    x = af.input((3,))
    y = x * np.ones((2, 3))
    out = canonicalize(y)
    assert out is y and out.shape == (2, 3)
    feed = rng.standard_normal(3)
    np.testing.assert_array_equal(_run(out, feed)[0], np.tile(feed.astype(np.float16), (2, 1)))


def test_a_weight_that_is_not_all_ones_stays():
    x = af.input((3,))
    y = x * np.array([1.0, 1.0, 2.0])
    assert canonicalize(y) is y


@pytest.mark.parametrize("zero", [0.0, np.zeros(3), np.zeros((1, 3))])
def test_add_plus_zero_stays_since_it_turns_minus_zero_into_plus_zero(zero):
    # x + (+0) is not x bit for bit (-0 + 0 is +0, and 1/-0 is -inf)
    x = af.input((2, 3))
    for y in (x + zero, zero + x):
        out = canonicalize(y)  # a zero operand of any shape may become a rank-0 zero
        assert out.op == "add" and out.shape == y.shape and x in out.srcs
        (zero_weight,) = (s for s in out.srcs if s is not x)
        assert np.all(zero_weight.value == 0) and not np.signbit(zero_weight.value).any()


def test_add_minus_zero():
    x = af.input((2, 3))
    assert canonicalize(x + (-0.0)) is x
    assert canonicalize(np.full(3, -0.0) + x) is x


def test_sub_zero():
    x = af.input((2, 3))
    assert canonicalize(x - 0.0) is x
    assert canonicalize(x - np.zeros((1, 3))) is x


def test_sub_minus_zero_stays():
    x = af.input((2, 3))
    y = x - (-0.0)  # x + (+0): turns -0 into +0
    assert canonicalize(y) is y


def test_zero_minus_x_is_not_x():
    x = af.input((3,))
    y = 0.0 - x
    assert canonicalize(y) is y


def test_a_broadcasting_zero_and_mixed_signed_zeros_stay():
    x = af.input((3,))
    y = x + np.zeros((2, 3))
    assert canonicalize(y) is y
    z = x + np.array([0.0, -0.0, 0.0])
    assert canonicalize(z) is z


def test_x_plus_zero_only_changes_the_sign_of_a_zero():
    x = af.input((4,))
    feed = np.array([-0.0, 0.0, -1.5, np.inf])
    got = _run(x + 0.0, feed)[0]
    np.testing.assert_array_equal(got, feed)  # == : -0 and +0 compare equal
    assert np.signbit(got[0]) == np.False_  # the graph itself turns -0 into +0


def test_double_negation():
    x = af.input((3,))
    assert canonicalize(-(-x)) is x
    assert canonicalize(-(-(-x))).op == "neg"
    assert canonicalize(-(-(-(-x)))) is x


def test_canonicalize_keeps_the_output_structure():
    x = af.input((3,))
    outs = canonicalize([x * 1.0, af.cast(x).exp()])
    assert isinstance(outs, list) and outs[0] is x and outs[1].srcs[0] is x


# ---- canonical: a property over random graphs ----------------------------------------

_INPUT_SHAPES = [(2, 3, 4), (6,), (2, 6), (1, 4, 3)]
_STEPS = (
    "relu",
    "exp",
    "neg",
    "scale",
    "cast",
    "mul1",
    "rmul1",
    "mul1_full",
    "add0",
    "radd0",
    "add_m0",
    "sub0",
    "sub_m0",
    "negneg",
    "id_reshape",
    "reshape_chain",
    "id_transpose",
    "transpose_chain",
    "bcast_one",
    "bcast_zero",
    "add_earlier",
)


def _shapes_of(size):
    out = [(size,)]
    out += [(a, size // a) for a in range(2, size) if size % a == 0]
    return out


def _apply(step, t, pool, draw):
    nd = t.ndim
    if step in ("relu", "exp"):
        return getattr(t, step)()
    if step == "neg":
        return -t
    if step == "scale":
        return t * 0.5
    if step == "cast":
        return af.cast(t)
    if step == "mul1":
        return t * 1.0
    if step == "rmul1":
        return 1.0 * t
    if step == "mul1_full":
        return t * np.ones(t.shape)
    if step == "add0":
        return t + 0.0
    if step == "radd0":
        return np.zeros(t.shape[-1:]) + t
    if step == "add_m0":
        return t + (-0.0)
    if step == "sub0":
        return t - 0.0
    if step == "sub_m0":
        return t - (-0.0)
    if step == "negneg":
        return -(-t)
    if step == "id_reshape":
        return t.reshape(t.shape)
    if step == "reshape_chain":
        first = draw(st.sampled_from(_shapes_of(t.size)))
        second = draw(st.sampled_from([*_shapes_of(t.size), t.shape]))
        return t.reshape(first).reshape(second)
    if step == "id_transpose":
        return af.transpose(t, tuple(range(nd)))
    if step == "transpose_chain":
        perms = list(itertools.permutations(range(nd)))
        return af.transpose(
            af.transpose(t, draw(st.sampled_from(perms))), draw(st.sampled_from(perms))
        )
    if step == "bcast_one":
        return t * np.ones((2,) + t.shape) if nd < 4 else t * 2.0
    if step == "bcast_zero":
        return t + np.zeros((2,) + t.shape) if nd < 4 else t + 1.0
    if step == "add_earlier":
        same = [p for p in pool if p.shape == t.shape]
        return t + draw(st.sampled_from(same))
    raise AssertionError(step)


@st.composite
def _canonical_graphs(draw):
    shape = draw(st.sampled_from(_INPUT_SHAPES))
    x = af.input(shape)
    t, pool = x, [x]
    for step in draw(st.lists(st.sampled_from(_STEPS), min_size=1, max_size=8)):
        t = _apply(step, t, pool, draw)
        pool.append(t)
    extra = draw(st.sampled_from(pool))  # a second output shares the graph
    return x, [t, extra], draw(st.integers(0, 2**32 - 1))


def _feed(shape, seed):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape) * 4
    flat = v.reshape(-1)
    specials = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 65504.0, 6e-8])
    where = rng.choice(flat.size, size=min(3, flat.size), replace=False)
    flat[where] = rng.choice(specials, size=where.size)
    return v


@settings(max_examples=80, derandomize=True, deadline=None, database=None)
@given(_canonical_graphs())
def test_canonicalized_random_graphs_compute_the_same_values(case):
    x, outs, seed = case
    new = canonicalize(outs)
    feed = _feed(x.shape, seed)
    with np.errstate(all="ignore"):
        want = _run(outs, feed)
        got = _run(new, feed)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_array_equal(g, w)  # ==: -0 equals +0, NaN matches NaN
    assert len(_ops(new)) <= len(_ops(outs))
    assert "cast" not in _ops(new)
    again, report = rewrite(new, CANONICAL)  # a fixed point
    assert not report.changed and all(a is b for a, b in zip(again, new))


# ---- numeric: scalar-chain folding ---------------------------------------------------


@pytest.mark.parametrize(
    ("op", "a", "b"),
    [("mul", 0.1, 0.3), ("mul", 3.7, -1.9), ("add", 0.1, 0.2), ("add", 1000.3, 0.7)],
)
def test_scalar_chain_folds_to_the_fp16_of_the_exact_result(op, a, b, rng):
    x = af.input((4, 8))
    y = (x * a) * b if op == "mul" else (x + a) + b
    (out,), report = rewrite([y], NUMERIC)
    assert report.matches == {f"fold_{op}_chain": 1}
    assert out.op == op and out.srcs[0] is x
    fa, fb = float(np.float16(a)), float(np.float16(b))
    want = np.float16(fa * fb if op == "mul" else fa + fb)
    assert out.srcs[1].value.reshape(()).view(np.uint16) == want.view(np.uint16)
    feed = rng.standard_normal((4, 8)) * 10
    orig = _run(y, feed)[0].astype(np.float64)
    fold = _run(out, feed)[0].astype(np.float64)
    # a couple of ulps of the largest magnitude the chain went through
    scale = np.maximum(np.abs(_fp16(feed)), np.abs(orig))
    ulp = np.spacing(scale.astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(fold - orig) <= 2 * ulp)


def test_scalar_chain_folding_differs_from_the_unfolded_chain_somewhere(rng):
    x = af.input((64,))
    y = (x * 0.1) * 0.3
    (out,), _ = rewrite([y], NUMERIC)
    feed = rng.standard_normal(64) * 10
    assert not np.array_equal(_run(y, feed)[0], _run(out, feed)[0])  # lossy: tuner-gated


def test_a_chain_whose_folded_constant_overflows_is_left_alone():
    x = af.input((3,))
    y = (x * 300.0) * 300.0  # 90000 is beyond fp16
    (out,), report = rewrite([y], NUMERIC)
    assert out is y and report.matches == {}


def test_non_scalar_chains_are_not_folded():
    x = af.input((3,))
    y = (x * np.array([1.5, 2.0, 3.0])) * 0.5
    (out,), report = rewrite([y], NUMERIC)
    assert out is y and not report.changed


# ---- numeric: constant folding -----------------------------------------------------------


def test_constant_folding_matches_the_emulator_bit_for_bit(rng):
    a = weight(rng.standard_normal((8, 16)))
    b = weight(rng.standard_normal((16, 8)))
    c = weight(rng.standard_normal((8, 8)))
    const = ((a @ b).tanh() * c + 0.25).exp()
    (folded,), report = rewrite([const], NUMERIC)
    assert folded.op == "weight" and folded.shape == (8, 8)
    assert report.matches["const_fold"] >= 4
    emulated = _run(const)[0]  # the same constant subgraph run by the emulator
    np.testing.assert_array_equal(_bits(folded.value), _bits(emulated))


def test_constant_folding_inside_a_graph_with_inputs(rng):
    x = af.input((4, 4))
    w = weight(rng.standard_normal((4, 4)))
    const = (w @ w).sigmoid()
    y = x + const
    (out,), _ = rewrite([y], NUMERIC)
    assert out.op == "add" and out.srcs[0] is x and out.srcs[1].op == "weight"
    np.testing.assert_array_equal(_bits(out.srcs[1].value), _bits(_run(const)[0]))
    feed = rng.standard_normal((4, 4))
    np.testing.assert_array_equal(_bits(_run(out, feed)[0]), _bits(_run(y, feed)[0]))


def test_constant_folding_stops_above_the_size_cap():
    side = int(np.sqrt(CONST_FOLD_MAX_ELEMS))
    assert side * side == CONST_FOLD_MAX_ELEMS
    small = weight(np.ones((side, 8))) @ weight(np.ones((8, side)))
    (out,), _ = rewrite([small], NUMERIC)
    assert out.op == "weight" and out.size == CONST_FOLD_MAX_ELEMS
    big = weight(np.ones((side + 1, 8))) @ weight(np.ones((8, side)))
    (out,), report = rewrite([big.exp()], NUMERIC)
    assert out.op == "exp" and out.srcs[0] is big and report.matches == {}


def test_a_node_with_an_input_is_not_folded():
    x = af.input((3,))
    y = x.exp()
    (out,), report = rewrite([y], NUMERIC)
    assert out is y and not report.changed


# ---- reduce_sum -> matmul ----------------------------------------------------------------


def test_sum_over_the_last_axis_is_a_matmul_against_ones(rng):
    x = af.input((4, 8))
    out = reduce_sum_to_matmul(x.sum(axis=-1))
    assert _ops(out) == ["matmul", "reshape"]
    mm = out.srcs[0]
    assert mm.srcs[0] is x
    np.testing.assert_array_equal(mm.srcs[1].value, np.ones((8, 1), np.float16))
    feed = _fp16(rng.standard_normal((4, 8)))
    got = _run(out, feed)[0].astype(np.float64)
    assert got.shape == (4,)
    exact = feed.sum(axis=-1)
    bound = matmul_error_bound(feed, np.ones((8, 1)))[:, 0]
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.parametrize(
    ("shape", "axis", "perm"),
    [((4, 8), 0, (1, 0)), ((2, 3, 5), 1, (0, 2, 1)), ((2, 3, 5), -3, (1, 2, 0))],
)
def test_sum_over_another_axis_transposes_it_to_the_end(shape, axis, perm, rng):
    x = af.input(shape)
    y = x.sum(axis=axis)
    out = reduce_sum_to_matmul(y)
    assert _ops(out) == ["transpose", "matmul", "reshape"]
    t = out.srcs[0].srcs[0]
    assert t.op == "transpose" and tuple(t.attrs["perm"]) == perm
    assert out.shape == y.shape
    feed = _fp16(rng.standard_normal(shape))
    got = _run(out, feed)[0].astype(np.float64)
    exact = feed.sum(axis=axis)
    moved = np.moveaxis(feed, axis, -1)
    bound = matmul_error_bound(moved, np.ones((moved.shape[-1], 1)))[..., 0]
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.parametrize("axis", [0, 1])
def test_keepdims_keeps_the_reduced_axis(axis, rng):
    x = af.input((3, 5))
    y = x.sum(axis=axis, keepdims=True)
    out = reduce_sum_to_matmul(y)
    assert out.shape == y.shape
    assert "sum" not in _ops(out) and "matmul" in _ops(out)
    feed = _fp16(rng.standard_normal((3, 5)))
    got = _run(out, feed)[0].astype(np.float64)
    np.testing.assert_allclose(got, feed.sum(axis=axis, keepdims=True), rtol=2e-3, atol=1e-3)


def test_a_full_sum_of_a_vector_is_rewritten():
    x = af.input((16,))
    out = reduce_sum_to_matmul(x.sum())
    assert out.shape == () and _ops(out) == ["matmul", "reshape"]


@pytest.mark.parametrize("axes", [(0, 1), None, (-1, 0)])
def test_multi_axis_sums_are_left_alone(axes):
    x = af.input((3, 4))
    y = x.sum(axis=axes)
    assert reduce_sum_to_matmul(y) is y


def test_4096_ones_sum_to_4096_through_the_matmul_and_2048_narrow():
    x = af.input((4096,))
    narrow = x.sum()
    wide = reduce_sum_to_matmul(narrow)
    ones = np.ones(4096)
    assert float(_run(narrow, ones)[0]) == 2048.0
    assert float(_run(wide, ones)[0]) == 4096.0


def test_the_rewritten_sum_is_closer_to_the_float64_sum(rng):
    x = af.input((8, 2048))
    y = x.sum(axis=-1)
    feed = _fp16(rng.uniform(0.0, 1.0, (8, 2048)))
    exact = feed.sum(axis=-1)
    narrow_err = np.abs(_run(y, feed)[0].astype(np.float64) - exact)
    wide_err = np.abs(_run(reduce_sum_to_matmul(y), feed)[0].astype(np.float64) - exact)
    assert np.all(wide_err <= narrow_err)
    assert wide_err.max() < narrow_err.max()
    # the wide result is the fp16 rounding of the exact sum (up to the f32 accumulator)
    assert np.all(wide_err <= np.spacing(exact.astype(np.float16)).astype(np.float64))


@pytest.mark.parametrize("shape", [(7,), (3, 16), (2, 3, 33)])
def test_cumsum_becomes_x_at_triu_ones_bit_identical(shape, rng):
    x = af.input(shape)
    y = x.cumsum()
    out = reduce_sum_to_matmul(y)
    assert out.op == "matmul" and out.srcs[0] is x
    k = shape[-1]
    np.testing.assert_array_equal(out.srcs[1].value, np.triu(np.ones((k, k), np.float16)))
    feed = rng.standard_normal(shape) * 3
    a, b = _run(y, feed)[0], _run(out, feed)[0]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_bits(a[a != 0]), _bits(b[a != 0]))


def test_cumsum_rewrite_stays_bit_identical_with_non_finite_values():
    # REDUCE_TO_MATMUL's docstring: cumsum -> x @ triu_ones is bit-identical (lossless)
    x = af.input((1, 4))
    y = x.cumsum()
    out = reduce_sum_to_matmul(y)
    feed = np.array([[1.0, np.inf, 2.0, 3.0]])
    with np.errstate(all="ignore"):
        a, b = _run(y, feed)[0], _run(out, feed)[0]
    np.testing.assert_array_equal(a, b)


def test_reduce_sum_to_matmul_keeps_the_output_structure():
    x = af.input((2, 8))
    outs = reduce_sum_to_matmul([x.sum(axis=1), x.cumsum(), x.exp()])
    assert isinstance(outs, list) and len(outs) == 3
    assert outs[0].op == "reshape" and outs[1].op == "matmul" and outs[2].op == "exp"
