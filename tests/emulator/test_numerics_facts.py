"""The signature facts of the fp16 numerics model, through the public API.

Each test pins one consequence of the contract (docs/numerics.md, the op module
docstrings): products round to fp16, matmuls accumulate in float32 (wide), reduce_sum
accumulates in fp16 (narrow), inputs are cast to fp16 with overflow to inf, subnormals
are kept. The expected values are worked out by hand in the comments.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.fp16 import FP16_EPS, FP16_MAX, narrow_sum, round_fp16
from conftest import FP16_TINY, FP16_UNIT_ROUNDOFF

DEVICES = ["emulator", "reference"]  # the fast path and the reference interpreter


def run(outputs, *feeds, device="emulator"):
    """Compile ``outputs`` and run them; float64 arrays out (a list)."""
    prog = af.compile(outputs)
    outs = prog.run(*feeds, device=device)
    for out in outs:
        assert out.dtype == np.float16  # the dataplane is fp16 end to end
    return [np.asarray(o, dtype=np.float64) for o in outs]


# ---- wide matmul accumulator vs narrow reduce_sum -----------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_dot_with_16384_ones_is_exact(device):
    # each product 1*1 = 1 exactly; the float32 sum counts to 16384 exactly (< 2**24)
    x = af.input((16384,), name="x")
    column, flat = run([x @ np.ones((16384, 1)), x @ np.ones(16384)], np.ones(16384), device=device)
    assert column.shape == (1,)
    assert flat.shape == ()
    assert column[0] == 16384.0
    assert float(flat) == 16384.0


def test_sum_of_4096_ones_stalls_at_2048():
    # fp16 spacing at 2048 is 2: 2048 + 1 = 2049 is a tie and rounds to even, 2048
    x = af.input((2, 4096), name="x")
    (total,) = run(x.sum(-1), np.ones((2, 4096)))
    np.testing.assert_array_equal(total, [2048.0, 2048.0])
    (everything,) = run(x.sum(), np.ones((2, 4096)))
    assert float(everything) == 2048.0


def test_mean_of_4096_ones_is_one_half():
    # mean = fp16(narrow_sum / count) = 2048 / 4096
    x = af.input((4096,), name="x")
    (m,) = run(x.mean(), np.ones(4096))
    assert float(m) == 0.5
    assert float(af.reference(x.mean(), np.ones(4096))) == 1.0


def test_plus_one_beside_16000_survives_a_matmul_but_not_a_sum():
    # fp16 spacing in [8192, 16384) is 8, so 16001 itself is not an fp16 value. In the
    # float32 accumulator 16000 + 1 = 16001 is exact and the -16000 leaves the 1; in the
    # fp16 accumulator 16000 + 1 rounds back to 16000 and the 1 is gone.
    x = af.input((3,), name="x")
    feed = np.array([16000.0, 1.0, -16000.0])
    wide, narrow = run([x @ np.ones((3, 1)), x.sum()], feed)
    assert wide[0] == 1.0
    assert float(narrow) == 0.0
    assert float(af.reference(x.sum(), feed)) == 1.0


def test_eight_ones_beside_16000():
    # wide: 16000 + 8 = 16008 = 2001 * 8, an fp16 value; narrow: each +1 is lost
    x = af.input((9,), name="x")
    feed = np.array([16000.0] + [1.0] * 8)
    wide, narrow = run([x @ np.ones((9, 1)), x.sum()], feed)
    assert wide[0] == 16008.0
    assert float(narrow) == 16000.0


def test_the_narrow_sum_adds_in_ascending_index_order():
    # [2**-11, 2**-11, 1]: 2**-11 + 2**-11 = 2**-10, then 1 + 2**-10 is an fp16 value.
    # [1, 2**-11, 2**-11]: 1 + 2**-11 is a tie between 1 and 1 + 2**-10 -> even (1), twice.
    x = af.input((3,), name="x")
    tiny = 2.0**-11
    (first,) = run(x.sum(), np.array([tiny, tiny, 1.0]))
    (last,) = run(x.sum(), np.array([1.0, tiny, tiny]))
    assert float(first) == 1.0 + 2.0**-10
    assert float(last) == 1.0


def test_cumsum_of_4096_ones_reaches_4096():
    # cumsum is x @ triu_ones: float32 running sum, each prefix rounded to fp16 once
    x = af.input((4096,), name="x")
    (c,) = run(af.cumsum(x), np.ones(4096))
    np.testing.assert_array_equal(c, round_fp16(np.arange(1.0, 4097.0)).astype(np.float64))
    assert c[-1] == 4096.0
    assert c[2047] == 2048.0
    assert c[2048] == 2048.0  # 2049 -> 2048 (tie to even), but the running sum is 2049
    assert c[2049] == 2050.0  # and carries on exactly


# ---- rounding of products and results ------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_each_product_rounds_to_fp16_before_the_sum(device):
    # a = [1 + 2**-10, -1], w = [1 + 2**-10, 1 + 2**-9]
    # a0 * w0 = 1 + 2**-9 + 2**-20 -> fp16: 1 + 2**-9 (the 2**-20 is below half an ulp)
    # a1 * w1 = -(1 + 2**-9), exact.  Emulated sum: 0.  float32 (and exact) dot: 2**-20,
    # which fp16 could hold (a subnormal multiple of 2**-24), so only the product rounding
    # explains the 0.
    a = np.array([1 + 2.0**-10, -1.0])
    w = np.array([1 + 2.0**-10, 1 + 2.0**-9])
    x = af.input((2,), name="a")
    (got,) = run(x @ w, a, device=device)
    f32 = float(np.dot(a.astype(np.float32), w.astype(np.float32)))
    assert f32 == 2.0**-20
    assert float(round_fp16(f32)) == 2.0**-20
    assert float(got) == 0.0
    assert float(af.reference(x @ w, a)) == 2.0**-20
    expected = sum(float(round_fp16(p)) for p in a * w)  # the contract, term by term
    assert float(got) == expected


def test_a_product_on_an_fp16_tie_rounds_to_even():
    # 3 * (1 + 2**-10) = 3 + 1.5 * 2**-9: halfway between 3 + 2**-9 (odd significand) and
    # 3 + 2**-8 (even), so the product rounds up to 3 + 2**-8 = 3.00390625
    x = af.input((1,), name="x")
    (got,) = run(x @ np.array([[1 + 2.0**-10]]), np.array([3.0]))
    assert got[0] == 3.0 + 2.0**-8


def test_the_same_products_summed_narrow_and_wide_differ():
    # sum(x * w) rounds products AND partial sums; x @ w rounds only the products
    x = af.input((3,), name="x")
    w = np.array([1.0, 1.0, 1.0])
    feed = np.array([2048.0, 1.0, 1.0])
    wide, narrow = run([x @ w, (x * w).sum()], feed)
    assert float(wide) == 2050.0
    assert float(narrow) == 2048.0


def test_matmul_result_overflows_but_the_accumulator_does_not():
    # 300 products of 300 * 1 = 300: float32 sum 90000 > 65504 -> inf on the way out
    x = af.input((300,), name="x")
    (big,) = run(x @ np.ones((300, 1)), np.full(300, 300.0))
    assert big[0] == np.inf
    # [60000, 60000, -60000] . [1, 1, 1]: the float32 accumulator holds 120000 in the
    # middle and ends at 60000 (= 1875 * 32, an fp16 value): finite
    y = af.input((3,), name="y")
    (mid,) = run(y @ np.ones((3, 1)), np.array([60000.0, 60000.0, -60000.0]))
    assert mid[0] == 60000.0
    # the narrow sum overflows at the first partial sum: inf + -60000 stays inf
    (narrow,) = run(y.sum(), np.array([60000.0, 60000.0, -60000.0]))
    assert float(narrow) == np.inf


def test_a_single_product_can_overflow():
    # 300 * 300 = 90000 rounds to inf as a product, so the dot is inf even though the
    # other product brings the exact sum back to 90000 - 60000 = 30000
    x = af.input((2,), name="x")
    y = x @ np.array([[300.0], [-1.0]])
    feed = np.array([300.0, 60000.0])
    (got,) = run(y, feed)
    assert got[0] == np.inf
    assert af.reference(y, feed)[0] == 30000.0


def test_one_minus_erf_3_cancels_to_zero():
    # erf(3) = 0.99997791 rounds to 1 in fp16 (spacing below 1 is 2**-11 ~ 4.9e-4)
    x = af.input((1,), name="x")
    y = 1.0 - af.erf(x)
    (got,) = run(y, np.array([3.0]))
    assert got[0] == 0.0
    want = af.reference(y, np.array([3.0]))
    assert want[0] == pytest.approx(2.209049699858544e-05, rel=1e-12)


def test_elementwise_ops_round_once_from_the_exact_value():
    # 1/3 is rounded once: fp16(1/3) = 0x3555 = 0.333251953125
    x = af.input((1,), name="x")
    (third,) = run(1.0 / x, np.array([3.0]))
    assert third[0] == 0.333251953125
    assert np.float16(third[0]).view(np.uint16) == 0x3555


# ---- the way in: casts, overflow, subnormals -----------------------------------------------


def test_an_input_beyond_fp16_becomes_inf_with_a_precision_warning():
    x = af.input((2,), name="big")
    prog = af.compile(x * 1.0)
    with pytest.warns(af.PrecisionWarning, match="70000"):
        got = prog(np.array([70000.0, 1.0]))
    assert got[0] == np.inf
    assert got[1] == 1.0


def test_in_range_inputs_give_no_precision_warning():
    x = af.input((2,), name="x")
    prog = af.compile(x * 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = prog(np.array([65504.0, np.inf]))  # the max and a true inf are not overflows
    np.testing.assert_array_equal(got, [65504.0, np.inf])


def test_inputs_round_to_nearest_even_on_the_way_in():
    # 65519 is below 65504 + 16 (half an ulp): rounds to 65504; 65520 is the tie -> inf
    x = af.input((3,), name="x")
    with pytest.warns(af.PrecisionWarning):
        (got,) = run(x * 1.0, np.array([65519.0, 65520.0, 2049.0]))
    np.testing.assert_array_equal(got, [65504.0, np.inf, 2048.0])


def test_the_float64_reference_sees_the_same_fp16_inputs():
    # af.reference rounds inputs to fp16 first, so only the arithmetic differs
    x = af.input((2,), name="x")
    want = af.reference(x * 1.0, np.array([2049.0, 0.1]))
    assert want.dtype == np.float64
    np.testing.assert_array_equal(want, [2048.0, float(np.float16(0.1))])


@pytest.mark.parametrize("device", DEVICES)
def test_subnormals_survive(device):
    tiny = 2.0**-24  # the smallest fp16 subnormal
    x = af.input((3,), name="x")
    feed = np.array([tiny, 3 * tiny, 2.0**-15])
    prod, dot, half = run([x * 1.0, x @ np.eye(3), x * 0.5], feed, device=device)
    np.testing.assert_array_equal(prod, feed)
    np.testing.assert_array_equal(dot, feed)
    # 2**-25 is a tie between 0 and 2**-24 -> 0 (even); 1.5 * 2**-24 -> 2 * 2**-24 (even)
    np.testing.assert_array_equal(half, [0.0, 2 * tiny, 2.0**-16])


def test_the_tiny_tolerance_is_the_smallest_subnormal():
    assert float(np.nextafter(np.float16(0), np.float16(1))) == FP16_TINY
    assert FP16_UNIT_ROUNDOFF == FP16_EPS / 2


# ---- aneforge.graph.fp16, by hand ----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2049.0, 2048.0),  # tie -> even significand (2048)
        (2051.0, 2052.0),  # tie -> even significand (2052, not 2050)
        (2050.5, 2050.0),  # below the tie
        (1 + 2.0**-11, 1.0),  # tie at 1
        (1 + 3 * 2.0**-11, 1 + 2.0**-9),  # tie between 1 + 2**-10 (odd) and 1 + 2**-9
        (65519.0, 65504.0),
        (65520.0, np.inf),  # the overflow threshold rounds up to 2**16 -> inf
        (-65520.0, -np.inf),
        (2.0**-25, 0.0),  # half the smallest subnormal: tie -> 0
        (3 * 2.0**-25, 2.0**-23),  # 1.5 subnormal steps -> 2 (even)
        (1e-9, 0.0),
    ],
)
def test_round_fp16_ties_to_even(value, expected):
    got = round_fp16(value)
    assert got.dtype == np.float16
    assert float(got) == expected


def test_round_fp16_keeps_signs_and_nan():
    got = round_fp16(np.array([-0.0, np.nan, -(2.0**-25)]))
    assert np.signbit(got[0]) and got[0] == 0
    assert np.isnan(got[1])
    assert np.signbit(got[2]) and got[2] == 0  # -2**-25 rounds to -0
    assert float(np.finfo(np.float16).max) == FP16_MAX


def test_narrow_sum_is_an_fp16_running_sum():
    ones = np.ones(4096, np.float16)
    assert float(narrow_sum(ones, axis=0)) == 2048.0
    assert float(narrow_sum(np.array([16000, 1, 1], np.float16), axis=0)) == 16000.0
    t = np.float16(2.0**-11)
    assert float(narrow_sum(np.array([t, t, 1], np.float16), axis=0)) == 1 + 2.0**-10
    assert float(narrow_sum(np.array([1, t, t], np.float16), axis=0)) == 1.0
    assert narrow_sum(ones, axis=0).dtype == np.float16


def test_narrow_sum_flattens_several_axes_in_c_order():
    # C order over (0, 1): t, 1, t, t -> t + 1 is a tie -> 1, then 1 + t -> 1, twice.
    # (Column-major order t, t, 1, t would give 1 + 2**-10 + t -> 1 + 2**-9.)
    t = 2.0**-11
    x = np.array([[t, 1.0], [t, t]], np.float16)
    assert float(narrow_sum(x, axis=(0, 1))) == 1.0
    assert float(narrow_sum(x, axis=None)) == 1.0
    assert float(narrow_sum(x.T.copy(), axis=(0, 1))) == 1 + 2.0**-9
    # per-axis sums and keepdims
    np.testing.assert_array_equal(narrow_sum(x, axis=0), [2 * t, 1.0])  # 1 + t -> 1
    np.testing.assert_array_equal(narrow_sum(x, axis=-1, keepdims=True), [[1.0], [2 * t]])
    assert narrow_sum(x, axis=1, keepdims=True).shape == (2, 1)


def test_narrow_sum_starts_from_positive_zero():
    got = narrow_sum(np.array([-0.0, -0.0], np.float16), axis=0)
    assert got == 0 and not np.signbit(got)
