"""Reductions, softmax, cumsum and normalizations against float64 references.

Contracts (src/aneforge/graph/ops/reduce.py and norm.py):
- sum / mean and the sums inside softmax and the norms use the NARROW fp16 accumulator:
  reduced axes flattened in C order, terms added one at a time from +0, every partial
  sum rounded to fp16. mean = fp16(narrow_sum / count). amax / amin are exact.
- softmax: d = fp16(x - max), e = fp16(exp(d)), y = fp16(e / narrow_sum(e)).
- cumsum runs through the WIDE matmul accumulator (float32 running sum, each output
  rounded once).
- the norms are sequences of single rounded fp16 steps (written out in norm.py's
  docstring), with eps rounded to fp16.

Each op is compared with a float64 formula written here, within a bound derived in the
test, and (where the contract fixes every step) bit for bit with a step-by-step
emulation of the contract written here with its own narrow accumulator.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.fp16 import fp16_values as f16
from conftest import (
    FP16_OP_NOISE,
    FP16_TINY,
    FP16_UNIT_ROUNDOFF,
    FP32_UNIT_ROUNDOFF,
    fp16_values,
    narrow_sum_error_bound,
)

U16 = FP16_UNIT_ROUNDOFF

# ---- contract emulation written for the tests ------------------------------------------


def to_end(x, axes):
    """Move ``axes`` to the end (in ascending order) and flatten them in C order."""
    axes = sorted(a % x.ndim for a in axes)
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + axes)
    return moved.reshape(moved.shape[: len(rest)] + (-1,))


def nsum(x, axes):
    """The narrow fp16 accumulator over ``axes`` (C order), keepdims=True, float64 out."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    flat = to_end(x, axes)
    acc = np.zeros(flat.shape[:-1])
    for k in range(flat.shape[-1]):
        acc = f16(acc + flat[..., k])
    keep = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return acc.reshape(keep)


def drop_axes(y, x_shape, axes, keepdims):
    axes = tuple(range(len(x_shape))) if axes is None else tuple(a % len(x_shape) for a in axes)
    if keepdims:
        return y
    return y.reshape(tuple(d for i, d in enumerate(x_shape) if i not in axes))


def sum_bound(x, axes):
    """conftest.narrow_sum_error_bound over several axes (flattened to one)."""
    axes = tuple(range(x.ndim)) if axes is None else axes
    return narrow_sum_error_bound(to_end(x, axes), axis=-1)


def run(node, *arrays):
    out = af.compile(node)(*arrays)
    return out.astype(np.float64)


def bits(a):
    return np.asarray(a).astype(np.float16).view(np.uint16)


# ---- sum / mean / amax / amin ----------------------------------------------------------

AXES_CASES = [
    ((4, 5, 6), None, False),
    ((4, 5, 6), None, True),
    ((4, 5, 6), (0,), False),
    ((4, 5, 6), (-1,), True),
    ((4, 5, 6), (0, 2), False),
    ((4, 5, 6), (-3, -2), True),
    ((2, 3, 4, 5, 6), (1, 3), False),
    ((2, 3, 4, 5, 6), (-1, 0, 2), True),
    ((300,), (0,), False),
]


@pytest.mark.parametrize(("shape", "axes", "keepdims"), AXES_CASES)
def test_sum(shape, axes, keepdims, rng):
    x = fp16_values(rng, shape, 3.0)
    node = af.sum(af.input(shape), axis=axes, keepdims=keepdims)
    got = run(node, x)
    ax = None if axes is None else tuple(axes)
    exact = np.sum(x, axis=ax, keepdims=keepdims)
    assert node.shape == exact.shape and got.shape == exact.shape
    bound = drop_axes(sum_bound(x, axes), shape, axes, True)
    bound = bound.reshape(exact.shape)
    assert (np.abs(got - exact) <= bound).all()
    want = drop_axes(nsum(x, axes), shape, axes, keepdims)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("shape", "axes", "keepdims"), AXES_CASES)
def test_mean(shape, axes, keepdims, rng):
    x = fp16_values(rng, shape, 3.0)
    node = af.mean(af.input(shape), axis=axes, keepdims=keepdims)
    got = run(node, x)
    ax = None if axes is None else tuple(axes)
    exact = np.mean(x, axis=ax, keepdims=keepdims)
    count = x.size // max(exact.size, 1)
    # narrow sum error / count, then one more rounding of the quotient.
    bound = sum_bound(x, axes).reshape(exact.shape) / count
    bound = bound + U16 * (np.abs(exact) + bound) + FP16_TINY
    assert got.shape == exact.shape
    assert (np.abs(got - exact) <= bound).all()
    want = drop_axes(f16(nsum(x, axes) / count), shape, axes, keepdims)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("shape", "axes", "keepdims"), AXES_CASES)
@pytest.mark.parametrize("name", ["amax", "amin"])
def test_amax_amin_are_exact(name, shape, axes, keepdims, rng):
    x = fp16_values(rng, shape, 100.0)
    node = getattr(af, name)(af.input(shape), axis=axes, keepdims=keepdims)
    ax = None if axes is None else tuple(axes)
    want = (np.max if name == "amax" else np.min)(x, axis=ax, keepdims=keepdims)
    got = run(node, x)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_reduction_methods_and_int_axis(rng):
    x = fp16_values(rng, (3, 4))
    t = af.input(x.shape)
    s1, s2, m, mx, mn = af.compile(
        [t.sum(axis=1), af.sum(t, axis=-1), t.mean(axis=0), t.amax(axis=1), t.amin()]
    )(x)
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_array_equal(s1, nsum(x, (1,))[:, 0])
    np.testing.assert_array_equal(m, f16(nsum(x, (0,))[0] / 3))
    np.testing.assert_array_equal(mx, x.max(axis=1))
    assert mn.shape == () and mn == x.min()


def test_narrow_sum_of_4096_ones_stalls_at_2048():
    x = af.input((4096,))
    ones = np.ones(4096)
    assert run(x.sum(), ones) == 2048.0  # 2048 + 1 ties to even: the accumulator stalls
    assert run(x.mean(), ones) == 0.5
    assert af.reference(x.sum(), ones) == 4096.0


def test_narrow_sum_loses_a_one_next_to_16000():
    x = af.input((2,))
    # fp16 spacing at 16000 is 8: 16001 rounds back to 16000.
    assert run(x.sum(), np.array([16000.0, 1.0])) == 16000.0
    assert af.reference(x.sum(), np.array([16000.0, 1.0])) == 16001.0


def test_narrow_sum_adds_in_ascending_index_order():
    x = af.input((3,))
    # 16000 + 4 = 16004 ties between 16000 and 16008 and rounds to even (16000), twice;
    # 4 + 4 = 8 first, then 16008 is exact. Only ascending order gives these two answers.
    assert run(x.sum(), np.array([16000.0, 4.0, 4.0])) == 16000.0
    assert run(x.sum(), np.array([4.0, 4.0, 16000.0])) == 16008.0


def test_narrow_sum_over_two_axes_flattens_in_c_order():
    x = af.input((2, 2))
    # C order reads 4, 4, 16000, 0 -> 16008; column order (4, 16000, 4, 0) gives 16000.
    assert run(x.sum(), np.array([[4.0, 4.0], [16000.0, 0.0]])) == 16008.0
    # C order reads 4, 16000, 4, 0 -> 16000; column order (4, 4, 16000, 0) gives 16008.
    assert run(x.sum(), np.array([[4.0, 16000.0], [4.0, 0.0]])) == 16000.0


def test_sum_overflow_gives_inf():
    x = af.input((3,))
    assert run(x.sum(), np.array([40000.0, 30000.0, -30000.0])) == np.inf
    assert af.reference(x.sum(), np.array([40000.0, 30000.0, -30000.0])) == 40000.0


# ---- cumsum ------------------------------------------------------------------------------


def test_cumsum_uses_the_wide_accumulator():
    got = run(af.cumsum(af.input((4096,))), np.ones(4096))
    assert got[-1] == 4096.0
    # Each prefix k is exact in float32 and rounded once: fp16(k).
    np.testing.assert_array_equal(got, f16(np.arange(1, 4097)))


@pytest.mark.parametrize("shape", [(7,), (3, 50), (2, 3, 129)])
def test_cumsum_matches_numpy(shape, rng):
    x = fp16_values(rng, shape, 2.0)
    got = run(af.input(shape).cumsum(), x)
    exact = np.cumsum(x, axis=-1)
    k = np.arange(1, shape[-1] + 1)
    # Exact terms (x*1), float32 running sum: <= k * u32 * sum|x|, then one rounding.
    bound = k * FP32_UNIT_ROUNDOFF * np.cumsum(np.abs(x), axis=-1)
    bound = bound + U16 * (np.abs(exact) + bound) + FP16_TINY
    assert got.shape == shape
    assert (np.abs(got - exact) <= bound).all()
    # And the contract itself: float32 prefix sums, each rounded once.
    acc = np.cumsum(x.astype(np.float32), axis=-1, dtype=np.float32)
    np.testing.assert_array_equal(got, f16(acc))


def test_cumsum_rejects_other_axes():
    with pytest.raises(af.ShapeError, match="last axis"):
        af.cumsum(af.input((3, 4)), axis=0)


# ---- softmax -----------------------------------------------------------------------------


def softmax64(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def softmax_contract(x, axis):
    d = f16(x - np.max(x, axis=axis, keepdims=True))
    e = f16(np.exp(d))
    return f16(e / nsum(e, (axis,)))


@pytest.mark.parametrize(("shape", "axis"), [((6, 16), -1), ((4, 33), 1), ((9, 5), 0)])
@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_softmax(shape, axis, scale, rng):
    x = fp16_values(rng, shape, scale)
    got = run(af.softmax(af.input(shape), axis=axis), x)
    k = shape[axis]
    # Rows sum to 1: y_i = fp16(e_i / s) where s is the narrow sum of the same rounded e_i,
    # so |s - sum e| <= k*u16*sum e and each quotient adds <= u16: |sum y - 1| <= (k+1)u16.
    row_sums = np.sum(got, axis=axis)
    assert (np.abs(row_sums - 1.0) <= (k + 1) * U16 * 1.01).all()
    # Against float64: d = x - max is rounded (abs error <= u16*|d|, so e_i is off by
    # a factor exp(u16*|d|) ~ 1 + u16*|d|), e_i rounded (u16), the sum (k*u16, relative to
    # its own value) and the quotient (u16); each e_j error also moves the sum.
    ref = softmax64(x, axis)
    dmax = np.max(np.abs(x - np.max(x, axis=axis, keepdims=True)))
    rel = (2 * dmax + k + 3) * U16 * 1.01
    assert (np.abs(got - ref) <= rel * ref + FP16_TINY).all()
    np.testing.assert_array_equal(got, softmax_contract(x, axis))


def test_softmax_of_huge_and_masked_inputs():
    x = np.array([[60000.0, 60000.0, -np.inf, 59999.0], [-np.inf, 1.0, -np.inf, -np.inf]])
    got = run(af.softmax(af.input(x.shape)), x)
    assert np.isfinite(got).all()  # max subtraction: exp never sees 60000
    assert got[0, 2] == 0.0 and got[1, 0] == 0.0 and got[1, 2] == 0.0
    assert got[1, 1] == 1.0
    # 59999 is not fp16 (spacing 32 there): it enters as 60000, so row 0 is [1/3]*3 + [0].
    np.testing.assert_array_equal(got[0], f16([1 / 3, 1 / 3, 0.0, 1 / 3]))


def test_softmax_narrow_sum_signature():
    # 4096 equal logits: every e is 1, the narrow sum stalls at 2048, so each output is
    # fp16(1/2048) instead of 1/4096 - the engine's narrow accumulator shows through.
    got = run(af.softmax(af.input((4096,))), np.zeros(4096))
    np.testing.assert_array_equal(got, np.full(4096, 1 / 2048))
    ref = af.reference(af.softmax(af.input((4096,))), np.zeros(4096))
    np.testing.assert_allclose(ref, 1 / 4096, rtol=1e-15)


# ---- norms -------------------------------------------------------------------------------

# Tolerance of the norms against their float64 formulas. Each output is a chain of about
# nine rounded fp16 steps (mean, subtract, square, mean, add eps, rsqrt, multiply, weight,
# bias), each off by at most u16 ~ 4.9e-4 relative, so the chain stays within a few
# FP16_OP_NOISE (1e-3). The two narrow sums over n <= 64 values add errors of random
# sign whose typical total is ~sqrt(n) * u16 relative to the row's sum of |x|; the
# subtraction x - mean turns the mean's error into an ABSOLUTE error of the output (the
# output is O(1) after scaling). So: |got - ref| <= NORM_TOL * (1 + |ref|).
NORM_TOL = 3 * FP16_OP_NOISE


def assert_norm_close(got, ref, tol=NORM_TOL):
    assert got.shape == ref.shape
    assert np.isfinite(got).all()
    err = np.abs(got - ref)
    assert (err <= tol * (1 + np.abs(ref))).all(), float(np.max(err / (1 + np.abs(ref))))


def standardize_contract(x, axes, eps):
    n = int(np.prod([x.shape[a] for a in axes]))
    mu = f16(nsum(x, axes) / n)
    d = f16(x - mu)
    var = f16(nsum(f16(d * d), axes) / n)
    r = f16(1.0 / np.sqrt(f16(var + f16(eps))))
    return f16(d * r)


def affine_contract(y, weight, bias, shape):
    if weight is not None:
        y = f16(y * weight.reshape(shape))
    if bias is not None:
        y = f16(y + bias.reshape(shape))
    return y


@pytest.mark.parametrize("affine", ["none", "weight", "bias", "both"])
@pytest.mark.parametrize(("shape", "axis"), [((6, 32), -1), ((2, 4, 8), -2), ((3, 64), 1)])
def test_layer_norm(shape, axis, affine, rng):
    x = fp16_values(rng, shape, 2.0) + 0.5
    x = f16(x)
    pshape = shape[axis:]
    w = fp16_values(rng, pshape) if affine in ("weight", "both") else None
    b = fp16_values(rng, pshape) if affine in ("bias", "both") else None
    got = run(af.layer_norm(af.input(shape), w, b, axis=axis), x)
    axes = tuple(range(axis % len(shape), len(shape)))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    ref = (x - mu) / np.sqrt(var + 1e-5)
    ref = ref * (1.0 if w is None else w) + (0.0 if b is None else b)
    assert_norm_close(got, ref)
    want = affine_contract(standardize_contract(x, axes, 1e-5), w, b, pshape)
    np.testing.assert_array_equal(got, want)


def test_layer_norm_of_a_constant_row_is_zero():
    x = np.full((2, 8), 3.0)
    got = run(af.layer_norm(af.input(x.shape), eps=1e-3), x)
    np.testing.assert_array_equal(got, np.zeros((2, 8)))


@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize(("shape", "axis"), [((5, 32), -1), ((2, 3, 16), 1)])
def test_rms_norm(shape, axis, with_weight, rng):
    x = fp16_values(rng, shape, 3.0)
    pshape = shape[axis:]
    w = fp16_values(rng, pshape) if with_weight else None
    got = run(af.rms_norm(af.input(shape), w, axis=axis), x)
    axes = tuple(range(axis % len(shape), len(shape)))
    ref = x / np.sqrt(np.mean(x * x, axis=axes, keepdims=True) + 1e-5)
    if w is not None:
        ref = ref * w
    assert_norm_close(got, ref)
    n = int(np.prod(pshape))
    ms = f16(nsum(f16(x * x), axes) / n)
    r = f16(1.0 / np.sqrt(f16(ms + f16(1e-5))))
    want = affine_contract(f16(x * r), w, None, pshape)
    np.testing.assert_array_equal(got, want)


def test_rms_norm_overflow_follows_the_contract():
    # norm.py: "x*x overflows fp16 for |x| > 256, exactly as on the engine". A row holding
    # 300 has x*x = inf, so mean(x*x) = inf, rsqrt(inf) = 0 and every output of that row
    # is x * 0 = 0 (finite, not nan). The float64 executor has no overflow.
    x = np.zeros((3, 16)) + 1.0
    x[0, 3] = 300.0
    x[1, 5] = -300.0
    x[2, 0] = 255.0  # 255**2 = 65025 fits, and 65025 + 15 ones still fits
    t = af.input(x.shape)
    got = run(af.rms_norm(t), x)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[:2], np.zeros((2, 16)))
    ref = af.reference(af.rms_norm(t), x)
    assert np.all(ref[:2] != 0)
    exact = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ref, exact, rtol=1e-12)
    assert_norm_close(got[2:], exact[2:])


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize(
    ("shape", "groups"), [((2, 8, 4, 4), 2), ((1, 6, 10), 3), ((2, 4, 3, 3), 4)]
)
def test_group_norm(shape, groups, affine, rng):
    x = f16(fp16_values(rng, shape, 2.0) - 1.0)
    c = shape[1]
    w = fp16_values(rng, (c,)) if affine else None
    b = fp16_values(rng, (c,)) if affine else None
    got = run(af.group_norm(af.input(shape), groups, w, b), x)
    g = x.reshape(shape[0], groups, -1)
    mu = g.mean(axis=2, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
    ref = ((g - mu) / np.sqrt(var + 1e-5)).reshape(shape)
    pshape = (c,) + (1,) * (len(shape) - 2)
    if affine:
        ref = ref * w.reshape(pshape) + b.reshape(pshape)
    assert_norm_close(got, ref)
    want = standardize_contract(g, (2,), 1e-5).reshape(shape)
    want = affine_contract(want, w, b, pshape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (1, 5, 7), (4, 6)])
def test_batch_norm(shape, affine, rng):
    x = fp16_values(rng, shape, 3.0)
    c = shape[1]
    mean = fp16_values(rng, (c,))
    var = f16(rng.uniform(0.25, 4.0, c))
    w = fp16_values(rng, (c,)) if affine != "none" else None
    b = fp16_values(rng, (c,)) if affine == "both" else None
    got = run(af.batch_norm(af.input(shape), mean, var, w, b, eps=1e-3), x)
    ps = (c,) + (1,) * (len(shape) - 2)
    ref = (x - mean.reshape(ps)) / np.sqrt(var.reshape(ps) + 1e-3)
    if w is not None:
        ref = ref * w.reshape(ps)
    if b is not None:
        ref = ref + b.reshape(ps)
    # No sums here: at most 6 rounded steps, each <= u16 relative, no cancellation except
    # x - mean (itself one rounding of an exact difference): a few u16 of |ref| suffice.
    bound = 8 * U16 * (np.abs(ref) + np.abs(x - mean.reshape(ps)) / np.sqrt(var.reshape(ps)))
    assert (np.abs(got - ref) <= bound + FP16_TINY).all()
    d = f16(x - mean.reshape(ps))
    r = f16(1.0 / np.sqrt(f16(var.reshape(ps) + f16(1e-3))))
    want = affine_contract(f16(d * r), w, b, ps)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("shape", "axis"), [((4, 24), -1), ((5, 3, 6), 1), ((6, 2), 0)])
def test_l2_norm(shape, axis, rng):
    x = fp16_values(rng, shape, 2.0)
    got = run(af.l2_norm(af.input(shape), axis=axis), x)
    ss = np.sum(x * x, axis=axis, keepdims=True)
    ref = x / np.sqrt(np.maximum(ss, 1e-6))
    assert_norm_close(got, ref)
    ss16 = nsum(f16(x * x), (axis,))
    want = f16(x * f16(1.0 / np.sqrt(np.maximum(ss16, f16(1e-6)))))
    np.testing.assert_array_equal(got, want)
    # Unit length along the axis, to the accuracy of the fp16 outputs.
    norms = np.sqrt(np.sum(got * got, axis=axis))
    np.testing.assert_allclose(norms, 1.0, atol=NORM_TOL)


def test_l2_norm_of_zeros_uses_eps():
    got = run(af.l2_norm(af.input((2, 4))), np.zeros((2, 4)))
    np.testing.assert_array_equal(got, np.zeros((2, 4)))  # 0 * rsqrt(eps), no nan


def test_norm_eps_is_rounded_to_fp16_first():
    # eps = 1.4 * 2**-24 rounds to the subnormal 2**-24. With var = 2**-13 (fp16 spacing
    # 2**-23 there), var + 2**-24 is a tie that rounds to 2**-13 (even), while the
    # unrounded eps would push the sum up to 2**-13 + 2**-23. rsqrt then gives 90.5 versus
    # 90.4375 in fp16, so only the documented order (eps rounded first) yields 90.5.
    eps = 1.4 * 2.0**-24
    x = np.ones((1, 1, 1))
    node = af.batch_norm(af.input(x.shape), np.zeros(1), np.array([2.0**-13]), eps=eps)
    got = run(node, x)
    assert got[0, 0, 0] == 90.5
    assert f16(1.0 / np.sqrt(f16(2.0**-13 + eps))) == 90.4375  # the path not taken
