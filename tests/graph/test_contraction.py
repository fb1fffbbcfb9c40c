"""Contractions (matmul, bmm, linear, conv, conv_transpose) against naive references.

Contract (src/aneforge/graph/ops/contraction.py): every product of two fp16 operands is
rounded to fp16, the products are added one at a time in ascending contraction order
into a float32 accumulator starting at +0, the sum is rounded to fp16, and a bias is a
separate fp16 add after that. A convolution contracts over (input channel of the group,
kernel row, kernel column) in C order.

Every test compares with a float64 answer computed here by explicit index arithmetic
(never by the op's kernel), within the bound of conftest.matmul_error_bound:
(u16 + K*u32) * sum|products| * (1 + u16) + u16 * |exact| + tiny, and, where the order is
fixed by the contract, bit for bit with a step-by-step emulation of that contract.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from conftest import (
    FP16_TINY,
    FP16_UNIT_ROUNDOFF,
    FP32_UNIT_ROUNDOFF,
    fp16_values,
    matmul_error_bound,
)

# ---- references --------------------------------------------------------------------


def contract_sum(x_terms, w_terms):
    """The documented accumulation: terms along axis 0, fp16 products, float32 sum.

    ``x_terms`` and ``w_terms`` broadcast against each other; axis 0 is the contraction
    index in its contract order. Returns the fp16 result (before any bias).
    """
    x_terms = np.asarray(x_terms, np.float64)
    w_terms = np.asarray(w_terms, np.float64)
    shape = np.broadcast_shapes(x_terms.shape[1:], w_terms.shape[1:])
    acc = np.zeros(shape, np.float32)
    with np.errstate(all="ignore"):
        for k in range(x_terms.shape[0]):
            prod = (x_terms[k] * w_terms[k]).astype(np.float16)  # exact, then rounded once
            acc = (acc + prod.astype(np.float32)).astype(np.float32)
        return acc.astype(np.float16)


def contraction_bound(exact, absprod, k):
    """conftest.matmul_error_bound, from the exact sum and the sum of |products|."""
    return (
        (FP16_UNIT_ROUNDOFF + k * FP32_UNIT_ROUNDOFF) * absprod * (1 + FP16_UNIT_ROUNDOFF)
        + FP16_UNIT_ROUNDOFF * np.abs(exact)
        + FP16_TINY
    )


def with_bias_bound(exact_no_bias, bound_no_bias, bias):
    """A bias add rounds once more: |fp16(y + b) - (s + b)| <= e + u16 * (|s + b| + e)."""
    total = exact_no_bias + bias
    return bound_no_bias + FP16_UNIT_ROUNDOFF * (np.abs(total) + bound_no_bias) + FP16_TINY


def assert_within(got, exact, bound):
    got = np.asarray(got, np.float64)
    assert got.shape == exact.shape, (got.shape, exact.shape)
    assert np.isfinite(got).all()
    err = np.abs(got - exact)
    assert (err <= bound).all(), f"worst excess {np.max(err - bound)} at {np.argmax(err - bound)}"


def bits(a):
    return np.asarray(a).astype(np.float16).view(np.uint16)


def conv_columns(x, w, stride, pads, dil, groups):
    """Hand-written im2col: the terms of every conv output, in contract order.

    x: (N, C, H, W); w: (Cout, C/G, KH, KW); pads: ((top, bottom), (left, right)).
    Returns (xcol, wcol): xcol (K, N, G, 1, OH, OW) with zeros at padded positions and
    wcol (K, 1, G, Cout/G, 1, 1), K = C/G * KH * KW ordered (channel, row, column).
    """
    n, c, h, wd = x.shape
    cout, cg, kh_n, kw_n = w.shape
    (pt, pb), (pl, pr) = pads
    oh_n = (h + pt + pb - dil[0] * (kh_n - 1) - 1) // stride[0] + 1
    ow_n = (wd + pl + pr - dil[1] * (kw_n - 1) - 1) // stride[1] + 1
    coutg = cout // groups
    k_n = cg * kh_n * kw_n
    xcol = np.zeros((k_n, n, groups, 1, oh_n, ow_n))
    wcol = np.zeros((k_n, 1, groups, coutg, 1, 1))
    for g in range(groups):
        k = 0
        for ci in range(cg):
            for kh in range(kh_n):
                for kw in range(kw_n):
                    for oh in range(oh_n):
                        ih = oh * stride[0] - pt + kh * dil[0]
                        if not 0 <= ih < h:
                            continue
                        for ow in range(ow_n):
                            iw = ow * stride[1] - pl + kw * dil[1]
                            if 0 <= iw < wd:
                                xcol[k, :, g, 0, oh, ow] = x[:, g * cg + ci, ih, iw]
                    wcol[k, 0, g, :, 0, 0] = w[g * coutg : (g + 1) * coutg, ci, kh, kw]
                    k += 1
    return xcol, wcol


def conv_reference(x, w, bias, stride, pads, dil, groups):
    """(exact float64 result, error bound, contract fp16 result) of a 2-D conv."""
    xcol, wcol = conv_columns(x, w, stride, pads, dil, groups)
    n, cout = x.shape[0], w.shape[0]
    oh_n, ow_n = xcol.shape[-2:]

    def to_nchw(a):
        return a.reshape(n, cout, oh_n, ow_n)

    exact = to_nchw(np.sum(xcol * wcol, axis=0))
    absprod = to_nchw(np.sum(np.abs(xcol * wcol), axis=0))
    k = xcol.shape[0]
    bound = contraction_bound(exact, absprod, k)
    contract = to_nchw(contract_sum(xcol, wcol))
    if bias is not None:
        b = bias.reshape(1, -1, 1, 1)
        bound = with_bias_bound(exact, bound, b)
        exact = exact + b
        with np.errstate(all="ignore"):
            contract = (contract.astype(np.float64) + b).astype(np.float16)
    return exact, bound, contract


def conv_transpose_reference(x, w, bias, stride, pads, opad, dil, groups):
    """(exact, bound) of a 2-D transposed conv by its scatter definition.

    y[n, g*Cout/G + o, ih*s - p_begin + kh*d, ...] += x[n, g*Cin/G + i, ih, ...] *
    w[g*Cin/G + i, o, kh, ...]; positions outside the output are dropped.
    """
    n, cin, h, wd = x.shape
    _, coutg, kh_n, kw_n = w.shape
    cing = cin // groups
    (pt, pb), (pl, pr) = pads
    oh_n = (h - 1) * stride[0] - pt - pb + dil[0] * (kh_n - 1) + opad[0] + 1
    ow_n = (wd - 1) * stride[1] - pl - pr + dil[1] * (kw_n - 1) + opad[1] + 1
    exact = np.zeros((n, groups * coutg, oh_n, ow_n))
    absprod = np.zeros_like(exact)
    for g in range(groups):
        xs = x[:, g * cing : (g + 1) * cing]
        for kh in range(kh_n):
            for kw in range(kw_n):
                wk = w[g * cing : (g + 1) * cing, :, kh, kw]  # (Cin/G, Cout/G)
                part = np.einsum("nihw,io->nohw", xs, wk)
                apart = np.einsum("nihw,io->nohw", np.abs(xs), np.abs(wk))
                for ih in range(h):
                    oh = ih * stride[0] - pt + kh * dil[0]
                    if not 0 <= oh < oh_n:
                        continue
                    for iw in range(wd):
                        ow = iw * stride[1] - pl + kw * dil[1]
                        if 0 <= ow < ow_n:
                            sl = slice(g * coutg, (g + 1) * coutg)
                            exact[:, sl, oh, ow] += part[:, :, ih, iw]
                            absprod[:, sl, oh, ow] += apart[:, :, ih, iw]
    bound = contraction_bound(exact, absprod, cing * kh_n * kw_n)
    if bias is not None:
        b = bias.reshape(1, -1, 1, 1)
        bound = with_bias_bound(exact, bound, b)
        exact = exact + b
    return exact, bound


def run(node, *arrays):
    return af.compile(node)(*arrays).astype(np.float64)


# ---- matmul / bmm / linear ---------------------------------------------------------


@pytest.mark.parametrize(("m", "k", "n"), [(5, 64, 7), (1, 1, 1), (3, 300, 2), (33, 17, 40)])
def test_weight_matmul(m, k, n, rng):
    a = fp16_values(rng, (m, k))
    w = fp16_values(rng, (k, n))
    x = af.input((m, k))
    node = x @ w
    assert node.op == "matmul" and node.shape == (m, n)
    got = run(node, a)
    assert_within(got, a @ w, matmul_error_bound(a, w))
    want = contract_sum(np.moveaxis(a, 1, 0)[:, :, None], w[:, None, :])
    np.testing.assert_array_equal(bits(got), bits(want))


def test_matmul_wide_accumulator_keeps_counting_past_2048():
    x = af.input((1, 4096))
    got = run(x @ np.ones((4096, 3)), np.ones((1, 4096)))
    np.testing.assert_array_equal(got, [[4096.0, 4096.0, 4096.0]])
    # 1 + 4095 * 2**-11 needs float32: each tiny product survives in the accumulator.
    got = run(x @ np.full((4096, 1), 2.0**-11), np.ones((1, 4096)))
    assert got[0, 0] == np.float16(4096 * 2.0**-11)


def test_matmul_products_are_rounded_to_fp16_before_the_sum():
    # v = 1 + 3 * 2**-10 is fp16; v*v = 1 + 6 * 2**-10 + 9 * 2**-20 rounds to
    # 1 + 6 * 2**-10. So [v, -1] @ [v, 1] is 3 * 2**-9 with rounded products, while the
    # exact 3 * 2**-9 + 9 * 2**-20 would round to 3 * 2**-9 + 2**-17 (fp16 ulp 2**-18).
    v = 1 + 3 * 2.0**-10
    a = np.array([[v, -1.0]])
    b = np.array([[v], [1.0]])
    node = af.input((1, 2)) @ b
    assert run(node, a)[0, 0] == 3 * 2.0**-9
    assert af.reference(node, a)[0, 0] == 3 * 2.0**-9 + 9 * 2.0**-20


def test_matmul_accumulates_in_ascending_k_order():
    # In float32, 65504 + 2**-10 loses the 2**-10 (ulp 2**-8 there). Products
    # [65504, -65504, 2**-10] in ascending k give 2**-10; [2**-10, 65504, -65504] give 0.
    # float64 gives 2**-10 for both, so only the accumulation order separates them.
    x = af.input((1, 3))
    a_up, w_up = np.array([[65504.0, 65504.0, 1.0]]), np.array([[1.0], [-1.0], [2.0**-10]])
    a_dn, w_dn = np.array([[1.0, 65504.0, 65504.0]]), np.array([[2.0**-10], [1.0], [-1.0]])
    assert run(x @ w_up, a_up)[0, 0] == 2.0**-10
    assert run(x @ w_dn, a_dn)[0, 0] == 0.0
    assert af.reference(x @ w_dn, a_dn)[0, 0] == 2.0**-10
    # bmm (both operands tensors) follows the same order.
    y = af.input((3, 1))
    assert run(af.bmm(x, y), a_up, w_up)[0, 0] == 2.0**-10
    assert run(af.bmm(x, y), a_dn, w_dn)[0, 0] == 0.0


def test_conv_contracts_channel_then_row_then_column():
    # Contract order (c, kh, kw): c0k0, c0k1, c1k0, c1k1 reads 65504, -65504, 2**-10, 0
    # and gives 2**-10; a kernel-major order (c0k0, c1k0, c0k1, c1k1) would lose the
    # 2**-10 against 65504 in float32 and give 0.
    x = np.array([[[[65504.0, 65504.0]], [[1.0, 0.0]]]])  # (1, 2, 1, 2)
    w = np.array([[[[1.0, -1.0]], [[2.0**-10, 0.0]]]])  # (1, 2, 1, 2)
    got = run(af.conv(af.input(x.shape), w), x)
    assert got.shape == (1, 1, 1, 1) and got[0, 0, 0, 0] == 2.0**-10
    # Rows before columns: a 2 x 2 kernel over one channel, row-major 65504, -65504, 2**-10.
    x2 = np.array([[[[65504.0, 65504.0], [1.0, 0.0]]]])
    w2 = np.array([[[[1.0, -1.0], [2.0**-10, 0.0]]]])
    assert run(af.conv(af.input(x2.shape), w2), x2)[0, 0, 0, 0] == 2.0**-10
    # The same terms in column-major order would read 65504, 2**-10, -65504: 0.
    x3 = np.array([[[[65504.0, 1.0], [65504.0, 0.0]]]])
    w3 = np.array([[[[1.0, 2.0**-10], [-1.0, 0.0]]]])
    assert run(af.conv(af.input(x3.shape), w3), x3)[0, 0, 0, 0] == 0.0


def test_matmul_batched_input_with_weight(rng):
    a = fp16_values(rng, (2, 3, 4, 16))
    w = fp16_values(rng, (16, 5))
    node = af.input(a.shape) @ w
    assert node.shape == (2, 3, 4, 5)
    got = run(node, a)
    assert_within(got, a @ w, matmul_error_bound(a, w))


def test_matmul_with_one_dimensional_weight(rng):
    a = fp16_values(rng, (4, 8))
    w = fp16_values(rng, (8,))
    node = af.matmul(af.input(a.shape), w)
    assert node.shape == (4,)
    got = run(node, a)
    assert_within(got, a @ w, matmul_error_bound(a, w[:, None])[:, 0])


@pytest.mark.parametrize(
    ("sa", "sb", "out"),
    [
        ((4, 6, 8), (4, 8, 3), (4, 6, 3)),
        ((2, 1, 4, 8), (3, 8, 5), (2, 3, 4, 5)),
        ((8,), (3, 8, 5), (3, 5)),
        ((2, 4, 8), (8,), (2, 4)),
        ((8,), (8,), ()),
        ((1, 6, 8), (5, 8, 2), (5, 6, 2)),
    ],
)
def test_bmm_broadcasting_and_vectors(sa, sb, out, rng):
    a = fp16_values(rng, sa)
    b = fp16_values(rng, sb)
    node = af.bmm(af.input(sa), af.input(sb))
    assert node.op == "bmm" and node.shape == out
    got = run(node, a, b)
    exact = np.matmul(a, b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    bound = matmul_error_bound(a2, b2).reshape(exact.shape)
    assert_within(got, exact, bound)
    # The contract, per output: ascending k over the broadcast operands.
    a3 = np.broadcast_to(a2, np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + a2.shape[-2:])
    b3 = np.broadcast_to(b2, a3.shape[:-2] + b2.shape[-2:])
    want = contract_sum(np.moveaxis(a3, -1, 0)[..., None], np.moveaxis(b3, -2, 0)[..., None, :])
    np.testing.assert_array_equal(bits(got), bits(want.reshape(exact.shape)))


def test_tensor_at_tensor_is_bmm_and_array_at_tensor_works(rng):
    a = fp16_values(rng, (3, 8))
    b = fp16_values(rng, (8, 2))
    ta, tb = af.input(a.shape), af.input(b.shape)
    assert (ta @ tb).op == "bmm"
    assert (ta @ b).op == "matmul"
    left = a @ tb  # ndarray @ Tensor defers to Tensor.__rmatmul__
    assert left.shape == (3, 2)
    got = af.compile(left)(b).astype(np.float64)
    assert_within(got, a @ b, matmul_error_bound(a, b))


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear(with_bias, rng):
    x = fp16_values(rng, (2, 3, 24))
    w = fp16_values(rng, (10, 24))
    b = fp16_values(rng, (10,), 4.0) if with_bias else None
    node = af.linear(af.input(x.shape), w, b)
    assert node.shape == (2, 3, 10)
    got = run(node, x)
    exact = x @ w.T
    bound = matmul_error_bound(x, w.T)
    contract = contract_sum(np.moveaxis(x, -1, 0)[..., None], w.T[:, None, None, :])
    if with_bias:
        bound = with_bias_bound(exact, bound, b)
        exact = exact + b
        contract = (contract.astype(np.float64) + b).astype(np.float16)
    assert_within(got, exact, bound)
    np.testing.assert_array_equal(bits(got), bits(contract))


def test_linear_bias_is_a_separate_rounding():
    # x @ w = 2049 exactly in float32, rounded to fp16 2048 (tie to even); then + 1 gives
    # 2049 -> 2048 again. A fused bias would have given 2050 (2050 is fp16).
    x = np.ones((1, 2049))
    got = run(af.linear(af.input(x.shape), np.ones((1, 2049)), np.ones(1)), x)
    assert got[0, 0] == 2048.0
    ref = af.reference(af.linear(af.input(x.shape), np.ones((1, 2049)), np.ones(1)), x)
    assert ref[0, 0] == 2050.0


# ---- conv ----------------------------------------------------------------------------

CONV2D_CASES = [
    # (x shape, w shape, stride, pad, dilation, groups, bias?)
    ((2, 3, 7, 7), (4, 3, 3, 3), 1, 0, 1, 1, False),
    ((1, 3, 8, 8), (4, 3, 3, 3), 1, 1, 1, 1, True),
    ((1, 4, 9, 8), (6, 2, 3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2, True),
    ((2, 6, 6, 7), (6, 1, 3, 3), 2, (1, 1), 1, 6, False),  # depthwise
    ((1, 4, 10, 10), (8, 1, 3, 3), 1, (2, 0, 0, 2), 2, 4, True),  # depthwise multiplier 2
    ((1, 2, 5, 5), (3, 2, 5, 5), 1, 0, 1, 1, False),  # kernel as large as the input
    ((1, 8, 4, 4), (4, 8, 1, 1), 1, 0, 1, 1, True),  # pointwise
    ((1, 3, 6, 6), (2, 3, 2, 2), 3, (3, 1), 1, 1, False),  # pad larger than the kernel
]


def _pads2(pad):
    if isinstance(pad, int):
        return ((pad, pad), (pad, pad))
    if len(pad) == 2:
        return ((pad[0], pad[0]), (pad[1], pad[1]))
    return ((pad[0], pad[2]), (pad[1], pad[3]))  # begins (top, left), then ends


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("case", CONV2D_CASES)
def test_conv2d(case, rng):
    xs, ws, stride, pad, dil, groups, has_bias = case
    x = fp16_values(rng, xs)
    w = fp16_values(rng, ws)
    b = fp16_values(rng, (ws[0],)) if has_bias else None
    node = af.conv(af.input(xs), w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    exact, bound, contract = conv_reference(x, w, b, _pair(stride), _pads2(pad), _pair(dil), groups)
    assert node.shape == exact.shape
    got = run(node, x)
    assert_within(got, exact, bound)
    np.testing.assert_array_equal(bits(got), bits(contract))


CONV1D_CASES = [
    ((2, 3, 16), (5, 3, 3), 1, 1, 1, 1, True),
    ((1, 4, 20), (4, 2, 4), 3, (2, 1), 2, 2, False),  # asymmetric pad: begin 2, end 1
    ((1, 6, 9), (6, 1, 5), 2, 2, 1, 6, True),  # depthwise
]


@pytest.mark.parametrize("case", CONV1D_CASES)
def test_conv1d(case, rng):
    xs, ws, stride, pad, dil, groups, has_bias = case
    x = fp16_values(rng, xs)
    w = fp16_values(rng, ws)
    b = fp16_values(rng, (ws[0],)) if has_bias else None
    node = af.conv(af.input(xs), w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    p = (pad, pad) if isinstance(pad, int) else pad
    exact, bound, contract = conv_reference(
        x[:, :, None], w[:, :, None], b, (1, stride), ((0, 0), p), (1, dil), groups
    )
    exact, bound, contract = exact[:, :, 0], bound[:, :, 0], contract[:, :, 0]
    assert node.shape == exact.shape
    got = run(node, x)
    assert_within(got, exact, bound)
    np.testing.assert_array_equal(bits(got), bits(contract))


def test_conv_identity_kernel_copies_the_input(rng):
    x = fp16_values(rng, (1, 3, 5, 5), 100.0)
    w = np.zeros((3, 3, 3, 3))
    for c in range(3):
        w[c, c, 1, 1] = 1.0
    got = run(af.conv(af.input(x.shape), w, padding=1), x)
    np.testing.assert_array_equal(got, x)


# ---- conv_transpose ---------------------------------------------------------------

CONVT2D_CASES = [
    # (x shape, w shape, stride, pad, output_padding, dilation, groups, bias?)
    ((1, 4, 5, 5), (4, 2, 2, 2), 2, 0, 0, 1, 1, False),
    ((2, 3, 4, 5), (3, 4, 3, 3), 2, 1, 1, 1, 1, True),
    ((1, 4, 4, 4), (4, 3, 3, 2), (2, 3), (1, 0, 2, 1), (1, 2), 1, 2, True),
    ((1, 2, 5, 4), (2, 2, 3, 3), 1, 2, 0, 2, 1, False),  # dilation 2, pad crops
    ((1, 3, 3, 3), (3, 1, 3, 3), 3, (0, 1), (2, 0), (1, 2), 3, False),  # depthwise
]


@pytest.mark.parametrize("case", CONVT2D_CASES)
def test_conv_transpose2d(case, rng):
    xs, ws, stride, pad, opad, dil, groups, has_bias = case
    x = fp16_values(rng, xs)
    w = fp16_values(rng, ws)
    b = fp16_values(rng, (ws[1] * groups,)) if has_bias else None
    node = af.conv_transpose(
        af.input(xs),
        w,
        b,
        stride=stride,
        padding=pad,
        output_padding=opad,
        dilation=dil,
        groups=groups,
    )
    exact, bound = conv_transpose_reference(
        x, w, b, _pair(stride), _pads2(pad), _pair(opad), _pair(dil), groups
    )
    assert node.shape == exact.shape
    assert_within(run(node, x), exact, bound)


CONVT1D_CASES = [
    ((1, 3, 7), (3, 2, 3), 2, 1, 1, 1, 1, True),
    ((2, 4, 6), (4, 1, 4), 3, (2, 0), 2, 2, 2, False),
]


@pytest.mark.parametrize("case", CONVT1D_CASES)
def test_conv_transpose1d(case, rng):
    xs, ws, stride, pad, opad, dil, groups, has_bias = case
    x = fp16_values(rng, xs)
    w = fp16_values(rng, ws)
    b = fp16_values(rng, (ws[1] * groups,)) if has_bias else None
    node = af.conv_transpose(
        af.input(xs),
        w,
        b,
        stride=stride,
        padding=pad,
        output_padding=opad,
        dilation=dil,
        groups=groups,
    )
    p = (pad, pad) if isinstance(pad, int) else pad
    exact, bound = conv_transpose_reference(
        x[:, :, None], w[:, :, None], b, (1, stride), ((0, 0), p), (0, opad), (1, dil), groups
    )
    assert node.shape == exact[:, :, 0].shape
    assert_within(run(node, x), exact[:, :, 0], bound[:, :, 0])


def test_conv_transpose_is_the_adjoint_of_conv(rng):
    # <conv(x), y> == <x, conv_transpose(y)> in exact arithmetic; checked on the float64
    # reference executor so the identity itself is tested, not fp16 noise.
    x = fp16_values(rng, (1, 2, 7, 6))
    y = fp16_values(rng, (1, 3, 3, 3))
    w = fp16_values(rng, (3, 2, 3, 2))
    kw = dict(stride=2, padding=(1, 0, 0, 1), dilation=1)
    cx = af.reference(af.conv(af.input(x.shape), w, **kw), x)
    assert cx.shape == y.shape
    ty = af.reference(af.conv_transpose(af.input(y.shape), w, output_padding=(1, 1), **kw), y)
    assert ty.shape == x.shape
    assert np.isclose(np.sum(cx * y), np.sum(x * ty), rtol=1e-12, atol=1e-12)


# ---- FLOP counts -------------------------------------------------------------------


def test_matmul_flops():
    x = af.input((6, 32))
    assert af.compile(x @ np.zeros((32, 5))).flops == 2 * 6 * 32 * 5
    assert af.compile((x @ np.zeros((32, 5))).relu()).flops == 2 * 6 * 32 * 5
    y = af.input((3, 6, 32))
    assert af.compile(af.bmm(y, af.input((3, 32, 7)))).flops == 2 * 3 * 6 * 32 * 7
    assert af.compile(af.linear(x, np.zeros((9, 32)), np.zeros(9))).flops == 2 * 6 * 32 * 9


def test_conv_flops():
    x = af.input((2, 8, 10, 10))
    node = af.conv(x, np.zeros((16, 4, 3, 3)), stride=2, padding=1, groups=2)
    assert node.shape == (2, 16, 5, 5)
    assert af.compile(node).flops == 2 * (8 // 2) * 3 * 3 * (2 * 16 * 5 * 5)
    x1 = af.input((1, 3, 20))
    node1 = af.conv(x1, np.zeros((4, 3, 5)))
    assert af.compile(node1).flops == 2 * 3 * 5 * (4 * 16)


def test_flops_add_up_over_a_graph():
    x = af.input((4, 16))
    h = (x @ np.zeros((16, 8))).relu()
    out = h @ np.zeros((8, 2))
    assert af.compile(out).flops == 2 * 4 * 16 * 8 + 2 * 4 * 8 * 2
    assert af.compile(x.relu() + 1.0).flops == 0
