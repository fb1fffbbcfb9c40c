"""The canonical rules that make two spellings of one computation one graph (a bmm's
batch dims, x + (+0) before an op blind to the sign of zero, a predicate compared with 0,
size-1 weight operands, slice bounds) and :func:`merge_duplicates`: each on small
hand-built graphs, against the reference interpreter on the unrewritten graph, over
inputs holding signed zeros, infinities and NaN, and where each must not fire.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.tensor import make, weight
from aneforge.graph.walk import topological_order
from aneforge.optimizer import canonicalize, merge_duplicates
from conftest import same_bits

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**-24, 65504.0, -65504.0, 1.0])


def _feed(shape, rng):
    v = rng.standard_normal(shape) * rng.choice([0.1, 1.0, 100.0, 3000.0])
    where = rng.random(shape) < 0.3
    v[where] = rng.choice(SPECIALS, int(where.sum()))
    with np.errstate(all="ignore"):
        return v.astype(np.float16)


def _ops(out):
    return [n.op for n in topological_order([out]) if n.op not in ("input", "weight")]


def _assert_same_bits(new, old, inputs, rng, runs=20):
    """``new`` and ``old`` give the same bits on the reference interpreter (``old``
    unrewritten), and the compiled fast path of ``new`` agrees, over random feeds."""
    for _ in range(runs):
        feeds = [_feed(t.shape, rng) for t in inputs]
        with np.errstate(all="ignore"):
            (want,) = execute_fp16(Program.from_outputs([old]), feeds)
            (got,) = execute_fp16(Program.from_outputs([new]), feeds)
        assert same_bits(got, want)
        fast = af.compile(new, opt=0)(*feeds)
        assert same_bits(np.asarray(fast, np.float16), want)


# ---- bmm_batch_view -----------------------------------------------------------------------


@pytest.mark.parametrize("batch", [(2, 3), (1, 4), (3,), ()])
def test_a_bmm_between_batch_merging_reshapes_is_one_bmm(batch, rng):
    a, b = af.input((*batch, 4, 5)), af.input((*batch, 5, 3))
    n = int(np.prod(batch, dtype=np.int64))
    y = af.bmm(a.reshape((n, 4, 5)), b.reshape((n, 5, 3))).reshape((*batch, 4, 3))
    out = canonicalize(y)
    assert out.op == "bmm" and out.srcs == (a, b) and out.shape == y.shape
    _assert_same_bits(out, y, [a, b], rng)


def test_a_bmm_whose_reshapes_move_rows_or_broadcast_is_left_alone():
    a, b = af.input((2, 3, 4, 5)), af.input((2, 3, 5, 3))
    rows = af.bmm(a.reshape((2, 12, 5)), af.input((2, 5, 3)))  # rows merged into batch
    assert "bmm" in _ops(canonicalize(rows.reshape((2, 3, 4, 3))))
    assert _ops(canonicalize(rows.reshape((2, 3, 4, 3))))[0] == "reshape"
    w = af.input((5, 3))  # one matrix for every batch element: broadcast, not a view
    bcast = af.bmm(a.reshape((6, 4, 5)), w.reshape((1, 5, 3))).reshape((2, 3, 4, 3))
    assert canonicalize(bcast).op == "reshape"
    regroup = af.bmm(a.reshape((6, 4, 5)), b.reshape((6, 5, 3))).reshape((3, 2, 4, 3))
    assert canonicalize(regroup).op == "reshape"  # a different batch layout out


# ---- blind_plus_zero ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda z: af.softmax(z, axis=1),
        lambda z: af.softmax(z, axis=0),
        lambda z: make("equal", z, -np.inf),
        lambda z: make("less", np.where(np.arange(4) % 2, 0.0, -0.0), z),
        lambda z: make("not_equal", z, z),
    ],
)
@pytest.mark.parametrize("zero", ["add", "radd", "sub_minus"])
def test_x_plus_zero_before_an_op_blind_to_the_sign_of_zero_is_x(build, zero, rng):
    x = af.input((3, 4))
    z = {"add": x + 0.0, "radd": np.zeros((3, 4)) + x, "sub_minus": x - (-0.0)}[zero]
    y = build(z)
    out = canonicalize(y)
    assert "add" not in _ops(out) and "sub" not in _ops(out)
    _assert_same_bits(out, y, [x], rng)


def test_x_plus_zero_stays_before_an_op_that_sees_the_sign_of_zero():
    x = af.input((4,))
    for y in (af.inverse(x + 0.0), (x + 0.0).max(axis=0), af.softmax(x + 0.0) * (x + 0.0)):
        assert "add" in _ops(canonicalize(y))
    # the add matters there: 1 / (-0 + 0) is +inf, 1 / -0 is -inf
    feed = np.array([-0.0, 1.0, 2.0, 3.0], np.float16)
    y = af.inverse(x + 0.0)
    (got,) = execute_fp16(Program.from_outputs([canonicalize(y)]), [feed])
    assert got[0] == np.inf
    # a zero that broadcasts x to a bigger shape is not x
    big = af.softmax(x + np.zeros((2, 4)))
    assert "add" in _ops(canonicalize(big))
    # -0 is added by add_zero (always exact); +0 - ... and x - (+0) are other rules
    assert "add" not in _ops(canonicalize(af.inverse(x + (-0.0))))


# ---- predicate_not_zero -------------------------------------------------------------------


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_a_predicate_compared_with_zero_is_the_predicate(zero, rng):
    x = af.input((2, 6))
    p = make("greater", x, 0.5)
    for q in (p, p.reshape((12,)).reshape((2, 6)), af.transpose(p, (1, 0))):
        for y in (make("not_equal", q, zero), make("not_equal", zero, q)):
            out = canonicalize(y)
            assert out.op == "greater" or out.op in ("reshape", "transpose")
            assert "not_equal" not in _ops(out)
            _assert_same_bits(out, y, [x], rng)


def test_a_value_that_is_not_a_predicate_keeps_its_comparison_with_zero():
    x = af.input((4,))
    assert canonicalize(make("not_equal", x, 0.0)).op == "not_equal"
    p = make("less", x, 0.0)
    assert canonicalize(make("not_equal", p * x, 0.0)).op == "not_equal"  # mul: any value
    assert canonicalize(make("not_equal", p, 1.0)).op == "not_equal"  # not a zero
    signed = weight(np.array([-0.0, 1.0, 0.0, 1.0]))  # -0 != 0 is +0: not the same bits
    assert canonicalize(make("not_equal", p + signed, 0.0)).op == "not_equal"
    assert canonicalize(make("not_equal", af.select(p, signed, p), 0.0)).op == "not_equal"


# ---- scalar_weight_operand ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "select", "less"])
def test_a_size_one_weight_operand_is_a_rank_zero_weight(op, rng):
    x = af.input((2, 3))
    if op == "select":
        y = make("select", x, weight(np.array([2.5])), weight(np.full((1, 1), -0.0)))
    else:
        y = make(op, weight(np.full((1, 1), 3.0)), x)
    out = canonicalize(y)
    assert out.op == op
    assert all(s.shape == () for s in out.srcs if s.op == "weight")
    _assert_same_bits(out, y, [x], rng)


def test_a_uniform_weight_operand_is_a_rank_zero_weight(rng):
    x = af.input((2, 3))
    for value in (np.zeros((2, 3)), np.full((1, 3), -0.0), np.full((2, 3), np.inf)):
        y = make("select", make("greater", x, 0.0), weight(value), x)
        out = canonicalize(y)
        assert [s.shape for s in out.srcs] == [(2, 3), (), (2, 3)]
        _assert_same_bits(out, y, [x], rng)
    for value in (np.array([[0.0, -0.0, 0.0]]), np.array([[1.0, 2.0, 1.0]]), np.full((3,), np.nan)):
        y = x + weight(value)  # zeros of both signs, two values, NaN: not uniform bits
        assert canonicalize(y).srcs[1].shape == value.shape


def test_a_size_one_weight_that_adds_an_output_dim_keeps_its_rank():
    x = af.input((3,))
    y = x * weight(np.full((1, 1), 3.0))  # (1, 3): the weight's rank is part of the result
    out = canonicalize(y)
    assert out.shape == (1, 3) and out.srcs[1].shape == (1, 1)


# ---- pow_two -------------------------------------------------------------------------------


def test_pow_two_is_square_on_every_fp16_value():
    x = af.input((65536,))
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    y = make("pow", x, 2.0)
    out = canonicalize(y)
    assert out.op == "square" and out.srcs == (x,)
    (want,) = execute_fp16(Program.from_outputs([y]), [every])
    (got,) = execute_fp16(Program.from_outputs([out]), [every])
    assert same_bits(got, want)
    assert same_bits(np.asarray(af.compile(y, opt=0)(every), np.float16), want)
    assert same_bits(np.asarray(af.compile(out, opt=0)(every), np.float16), want)
    for other in (make("pow", x, 3.0), make("pow", x, af.input((65536,))), make("pow", 2.0, x)):
        assert canonicalize(other).op == "pow"


# ---- tight_slice ---------------------------------------------------------------------------


def test_slice_bounds_are_resolved_to_the_indices_taken(rng):
    x = af.input((8, 6))
    y = make("slice", x, begins=(0, -4), ends=(8, 100), steps=(2, 1))
    out = canonicalize(y)
    assert (out.attrs["begins"], out.attrs["ends"]) == ((0, 2), (7, 6))
    assert out.attrs["steps"] == (2, 1)
    _assert_same_bits(out, y, [x], rng)
    # two spellings of x[0::2] (ends 7 and 8) are one slice
    a = make("slice", x, begins=(0, 0), ends=(7, 6), steps=(2, 1))
    b = make("slice", x, begins=(0, 0), ends=(8, 6), steps=(2, 1))
    assert canonicalize(a).attrs == canonicalize(b).attrs


def test_a_resolved_slice_is_left_alone_and_a_whole_slice_is_its_input():
    x = af.input((8, 6))
    tight = make("slice", x, begins=(1, 0), ends=(8, 5), steps=(2, 1))
    assert canonicalize(tight) is tight
    assert canonicalize(make("slice", x, begins=(0, -6), ends=(99, 6), steps=(1, 1))) is x


# ---- merge_duplicates ---------------------------------------------------------------------


def test_repeated_nodes_are_computed_once(rng):
    x = af.input((8, 4))
    a = make("slice", x, begins=(0, 0), ends=(7, 4), steps=(2, 1))
    b = make("slice", x, begins=(0, 0), ends=(7, 4), steps=(2, 1))
    y = af.concat([a.exp(), b.exp() * 2.0], axis=1)
    out = merge_duplicates(y)
    assert len(topological_order([out])) < len(topological_order([y]))
    assert out.srcs[0] is out.srcs[1].srcs[0]
    _assert_same_bits(out, y, [x], rng)
    assert merge_duplicates(out) is out  # nothing repeats any more


def test_nodes_that_differ_in_anything_stay_apart():
    x, x2 = af.input((4,)), af.input((4,))
    assert merge_duplicates(x.relu() + x2.relu()).srcs[0].srcs[0] is x
    y = merge_duplicates(x.relu() + x2.relu())
    assert y.srcs[0] is not y.srcs[1]  # two inputs, two values
    w1, w2 = weight(np.ones(4)), weight(np.ones(4))
    y = merge_duplicates((x + w1) * (x + w2))
    assert y.srcs[0] is not y.srcs[1]  # two weights (two parameters) stay two
    y = merge_duplicates(make("leaky_relu", x, alpha=0.0) + make("leaky_relu", x, alpha=-0.0))
    assert y.srcs[0] is not y.srcs[1]  # attributes compare by their bits
    z = af.input((2, 3))
    y = merge_duplicates(af.softmax(z, axis=0) + af.softmax(z, axis=1))
    assert y.srcs[0] is not y.srcs[1]
