"""Prepared host kernels against the generic fast kernel and the reference kernel, bit
for bit, and only where they apply."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.interpreter import fp16_kernel
from aneforge.emulator.prepared import prepare
from conftest import assert_same_bits


def _conv_node(rng, n, c, cout, hw, kern, groups, stride, pad, dil, bias):
    x = af.input((n, c, *hw), name="x")
    w = (rng.standard_normal((cout, c // groups, *kern)) * 0.3).astype(np.float16)
    b = rng.standard_normal(cout).astype(np.float16) if bias else None
    y = af.conv(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)
    return y, [s.value for s in y.srcs[1:]]


@pytest.mark.parametrize("seed", range(12))
def test_random_convolutions_give_the_generic_and_reference_bits(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 2, 4]))
    c, cout = groups * int(rng.integers(1, 9)), groups * int(rng.integers(1, 12))
    kern = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    node, weights = _conv_node(
        rng,
        n=int(rng.integers(1, 3)),
        c=c,
        cout=cout,
        hw=(int(rng.integers(8, 30)), int(rng.integers(8, 30))),
        kern=kern,
        groups=groups,
        stride=(int(rng.integers(1, 3)), int(rng.integers(1, 3))),
        pad=tuple(int(p) for p in rng.integers(0, 3, 4)),
        dil=(int(rng.integers(1, 3)), int(rng.integers(1, 3))),
        bias=seed % 2 == 0,
    )
    run = prepare(node)
    if run is None:  # the windows GEMM declines (the transposed run serves it better)
        return
    x = (rng.standard_normal(node.srcs[0].shape) * 2).astype(np.float16)
    x[x < -1] = 0  # rows of zeros for the kernel to skip
    got = run(x, *weights)
    assert got.shape == node.shape and got.dtype == np.float16
    assert_same_bits(got, fp16_kernel()(node, [x, *weights]))
    assert_same_bits(got, fp16_kernel(fast=False)(node, [x, *weights]))


def test_a_shufflenet_layer_is_prepared_and_runs_twice_alike():
    rng = np.random.default_rng(7)
    node, weights = _conv_node(rng, 1, 136, 136, (28, 28), (1, 1), 4, 1, 0, 1, False)
    run = prepare(node)
    assert run is not None
    x = rng.standard_normal((1, 136, 28, 28)).astype(np.float16)
    first = run(x, *weights)
    assert_same_bits(first, run(x, *weights))
    assert_same_bits(first, fp16_kernel()(node, [x, *weights]))


@pytest.mark.parametrize("stride", [1, 2])
def test_a_depthwise_convolution_is_prepared_on_its_own_kernel(stride):
    rng = np.random.default_rng(stride)
    node, weights = _conv_node(rng, 2, 24, 24, (15, 13), (3, 3), 24, stride, 1, 1, True)
    run = prepare(node)
    assert run is not None
    x = rng.standard_normal(node.srcs[0].shape).astype(np.float16)
    got = run(x, *weights)
    assert_same_bits(got, fp16_kernel()(node, [x, *weights]))
    assert_same_bits(got, fp16_kernel(fast=False)(node, [x, *weights]))


def test_it_declines_one_d_convolutions_computed_weights_and_other_ops():
    x1 = af.input((1, 4, 32), name="x")
    assert prepare(af.conv(x1, np.ones((8, 4, 3), np.float16))) is None
    x, w = af.input((1, 4, 16, 16), name="x"), af.input((8, 4, 3, 3), name="w")
    assert prepare(af.conv(x, w)) is None  # weights computed at run time
    assert prepare(af.relu(x)) is None


def test_only_the_generic_fast_kernel_offers_prepared_runners():
    assert fp16_kernel().prepare is prepare
    assert not hasattr(fp16_kernel(fast=False), "prepare")
    assert not hasattr(fp16_kernel(target="h13"), "prepare")  # a chip saturates outputs
