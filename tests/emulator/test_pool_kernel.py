"""The compiled pool kernel (emulator.plane_kernels) against the pools' own kernels, bit
for bit, on random geometries and special values; against float64 NumPy and a plain
fp16 loop; and where it declines or cannot load."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator import plane_kernels
from aneforge.emulator.interpreter import execute_fp16, fp16_kernel
from aneforge.emulator.prepared import prepare
from aneforge.errors import FastPathWarning
from aneforge.graph.registry import get_op
from conftest import assert_same_bits

SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, -65504, 6e-8, -6e-8], np.float16)


def _data(rng, shape, specials=0.05):
    x = (rng.standard_normal(shape) * 3).astype(np.float16)
    x[rng.random(shape) < 0.2] = 0.0
    x[rng.random(shape) < 0.2] = -0.0
    pick = rng.random(shape) < specials
    x[pick] = rng.choice(SPECIALS, int(pick.sum()))
    return x


def _random_pool(rng, seed):
    op = "avg_pool" if seed % 2 else "max_pool"
    nd = 1 if seed % 5 == 0 else 2
    kern = tuple(int(k) for k in rng.integers(1, 6, nd))
    stride = tuple(int(s) for s in rng.integers(1, 4, nd))
    pad = tuple(int(rng.integers(0, k)) for _ in range(2) for k in kern)  # begins, ends
    size = tuple(int(k + rng.integers(0, 40)) for k in kern)
    if seed % 7 == 0:  # rows wider than one run's block of output rows
        size = (*size[:-1], 2100 + int(rng.integers(0, 50)))
    attrs = {"kernel": kern, "stride": stride, "pad": pad, "count_include_pad": seed % 3 == 0}
    return op, (int(rng.integers(1, 3)), int(rng.integers(1, 6)), *size), attrs


@pytest.mark.parametrize("seed", range(40))
def test_random_pools_give_the_ops_own_bits(seed):
    assert plane_kernels.pool_ready()
    rng = np.random.default_rng(seed)
    op, shape, attrs = _random_pool(rng, seed)
    run = plane_kernels.prepare_pool(shape, op, attrs)
    assert run is not None
    for _ in range(2):  # the prepared geometry serves every call
        x = _data(rng, shape)
        got = run(x)
        assert got.dtype == np.float16
        assert_same_bits(got, get_op(op).emulate([x], attrs))


def test_max_pool_is_float64_numpys_maximum_of_each_window():
    rng = np.random.default_rng(3)
    x = _data(rng, (2, 3, 17, 19), specials=0)
    attrs = {"kernel": (3, 2), "stride": (2, 1), "pad": (1, 0, 1, 1), "count_include_pad": False}
    got = plane_kernels.prepare_pool(x.shape, "max_pool", attrs)(x)
    wide = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (0, 1)), constant_values=-np.inf)
    for n, c, i, j in np.ndindex(got.shape):
        assert got[n, c, i, j] == wide[n, c, 2 * i : 2 * i + 3, j : j + 2].max()


def test_avg_pool_is_a_narrow_sum_in_row_order_over_the_inner_count():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((1, 2, 9, 8)) * 2000).astype(np.float16)  # sums that round
    attrs = {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1, 1, 1), "count_include_pad": False}
    got = plane_kernels.prepare_pool(x.shape, "avg_pool", attrs)(x)
    for n, c, i, j in np.ndindex(got.shape):
        acc, count = np.float16(0.0), 0
        for a in range(3):
            for b in range(3):
                r, s = 2 * i + a - 1, 2 * j + b - 1
                value = x[n, c, r, s] if 0 <= r < 9 and 0 <= s < 8 else np.float16(0.0)
                acc = np.float16(np.float64(acc) + np.float64(value))
                count += 0 <= r < 9 and 0 <= s < 8
        assert got[n, c, i, j].view(np.uint16) == np.float16(float(acc) / count).view(np.uint16)


def test_it_declines_what_it_does_not_run():
    attrs = {"kernel": (64, 64), "stride": None, "pad": (0,), "count_include_pad": False}
    assert plane_kernels.prepare_pool((1, 1, 64, 64), "avg_pool", attrs) is None  # 4096 cells
    assert plane_kernels.prepare_pool((1, 1, 64, 64), "max_pool", attrs) is not None
    assert plane_kernels.prepare_pool((0, 1, 64, 64), "max_pool", attrs) is None
    assert plane_kernels.prepare_pool((1, 1, 64, 64), "conv", attrs) is None


def test_a_pool_node_is_prepared_with_the_generic_kernels_bits():
    rng = np.random.default_rng(5)
    x = af.input((2, 8, 15, 15), name="x")
    node = af.avg_pool(x, 3, stride=2, padding=1)
    run = prepare(node)
    assert run is not None
    xv = _data(rng, x.shape)
    assert_same_bits(run(xv), fp16_kernel()(node, [xv]))


def test_a_kernel_that_fails_its_check_warns_and_the_ops_own_kernel_serves(monkeypatch):
    monkeypatch.setattr(plane_kernels, "_pool_state", {"ok": None, "error": None})
    monkeypatch.setattr(plane_kernels, "_pools_match", lambda: False)
    monkeypatch.setattr("aneforge.emulator.gemm._warned", set())
    x = af.input((1, 16, 64, 64), name="x")
    prog = af.compile(af.max_pool(x * 0.5, 3, stride=2, padding=1), opt=0)
    xs = [_data(np.random.default_rng(6), x.shape)]
    want = execute_fp16(prog, xs, regions=False)[0]
    with pytest.warns(FastPathWarning, match="compiled pool kernel is disabled"):
        got = [execute_fp16(prog, xs)[0] for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same_bits(execute_fp16(prog, xs)[0], want)
    for g in got:
        assert_same_bits(g, want)


def test_a_plans_first_call_does_not_compile_the_pool_kernel(monkeypatch):
    """A one-shot run compiles nothing: the plan built on a program's first call (which
    runs op by op) leaves the pool kernel's compile and check to the second."""
    from aneforge.kernel import compiled

    checks = []
    monkeypatch.setattr(plane_kernels, "_pool_state", {"ok": None, "error": None})
    monkeypatch.setattr(plane_kernels, "_pools_match", lambda: checks.append(1) or True)
    monkeypatch.setattr(compiled, "_is_verified", lambda key: False)
    monkeypatch.setattr(compiled, "_used_keys", set())
    x = af.input((1, 16, 64, 64), name="x")
    prog = af.compile(af.avg_pool((x * 0.5).relu(), 3, stride=2, padding=1), opt=0)
    xs = [_data(np.random.default_rng(8), x.shape)]
    want = execute_fp16(prog, xs, regions=False)[0]
    first = execute_fp16(prog, xs)[0]
    assert checks == []
    second = execute_fp16(prog, xs)[0]
    assert checks == [1]
    assert_same_bits(first, want)
    assert_same_bits(second, want)
