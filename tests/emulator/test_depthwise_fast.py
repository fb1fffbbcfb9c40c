"""The compiled depthwise convolution against the conv op's own kernel (the reference
GEMM through im2col), bit for bit, and only where it applies."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.fast_kernels import FAST_KERNELS, GENERIC_ONLY
from aneforge.emulator.gemm import gemm_reference
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.arith import Arith
from aneforge.graph.ops.contraction import _conv_emulate
from conftest import assert_same_bits

dw_fast = FAST_KERNELS["conv"]
REFERENCE = Arith.generic(gemm_reference)


def _attrs(c, stride=(1, 1), dilation=(1, 1), pad=(0, 0, 0, 0)):
    return {"groups": c, "stride": stride, "dilation": dilation, "pad": pad}


def _bits(rng, shape):
    """Random fp16 bit patterns: every exponent, signed zeros, inf and NaN."""
    return rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(np.float16)


@pytest.mark.parametrize("seed", range(24))
def test_random_depthwise_convolutions_give_the_reference_bits(seed):
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(1, 3)), int(rng.integers(2, 6))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    h, w = int(rng.integers(3 * kh, 14)), int(rng.integers(3 * kw, 14))
    attrs = _attrs(
        c,
        (int(rng.integers(1, 4)), int(rng.integers(1, 4))),  # up to 3 x 3 phases
        (int(rng.integers(1, 4)), int(rng.integers(1, 4))),  # taps in every phase
        tuple(int(p) for p in rng.integers(0, 4, 4)),  # pads wider than the stride
    )
    scale = 2.0 ** int(rng.integers(-8, 9))
    x = (rng.standard_normal((n, c, h, w)) * scale).astype(np.float16)
    if seed % 3 == 0:
        x = _bits(rng, x.shape)
    wt = (rng.standard_normal((c, 1, kh, kw)) * 4).astype(np.float16)
    inputs = [x, wt] + ([rng.standard_normal(c).astype(np.float16)] if seed % 2 else [])
    got = dw_fast(inputs, attrs)
    assert got is not None
    assert_same_bits(got, _conv_emulate(inputs, attrs, REFERENCE))


@pytest.mark.parametrize("stride", [(1, 1), (1, 2), (2, 1), (3, 3), (2, 3)])
def test_large_planes_run_in_row_blocks_with_the_reference_bits(stride):
    """A 45 x 150 plane: a tap's run covers a block of output rows on its phase's
    pitch, several blocks here at any stride."""
    rng = np.random.default_rng(sum(stride))
    x = (rng.standard_normal((1, 2, 45, 150)) * 8).astype(np.float16)
    wt = (rng.standard_normal((2, 1, 3, 5)) * 4).astype(np.float16)
    inputs = [x, wt, rng.standard_normal(2).astype(np.float16)]
    attrs = _attrs(2, stride, (1, 2), (1, 2, 3, 0))
    assert_same_bits(dw_fast(inputs, attrs), _conv_emulate(inputs, attrs, REFERENCE))


def test_it_declines_what_is_not_a_depthwise_convolution():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float16)
    assert dw_fast([x, rng.standard_normal((4, 4, 3, 3)).astype(np.float16)], _attrs(1)) is None
    grouped = rng.standard_normal((8, 2, 3, 3)).astype(np.float16)  # two channels per group
    assert dw_fast([x, grouped], _attrs(2)) is None
    one_d = rng.standard_normal((1, 4, 9)).astype(np.float16)
    attrs = {"groups": 4, "stride": (1,), "dilation": (1,), "pad": (0, 0)}
    assert dw_fast([one_d, rng.standard_normal((4, 1, 3)).astype(np.float16)], attrs) is None


def test_chips_run_the_reference_conv_since_they_saturate_its_output():
    assert "conv" in GENERIC_ONLY
    x = af.input((1, 3, 8, 8), name="x")
    y = af.conv(x, np.full((3, 1, 3, 3), 2000.0), groups=3, padding=1)  # 36000 > 32752
    prog = af.compile(y, opt=0)
    data = [np.full((1, 3, 8, 8), 2.0, np.float16)]
    generic = execute_fp16(prog, data, regions=False)[0]
    chip = execute_fp16(prog, data, target="h15", regions=False)[0]
    assert np.isfinite(generic).all() and np.isinf(chip).any()
    assert_same_bits(chip, execute_fp16(prog, data, target="h15", fast=False)[0])
