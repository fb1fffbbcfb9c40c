"""The compiled fast kernels against the ops' own emulate kernels, bit for bit."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
import aneforge.emulator.fast_kernels as fk
import aneforge.emulator.gemm as gemm_module
from aneforge.emulator.fast_kernels import FAST_KERNELS
from aneforge.emulator.gemm import FastPathWarning
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.ops.norm import _batch_norm_emulate
from conftest import PORTABLE_ENVS, PORTABLE_IDS, assert_same_bits, run_python_with_env

bn_fast = FAST_KERNELS["batch_norm"]
AFFINE = [(False, False), (True, False), (False, True), (True, True)]


def attrs_for(has_w, has_b, eps=1e-5):
    return {"eps": eps, "has_weight": has_w, "has_bias": has_b}


def make_inputs(x, mean, var, w=None, b=None):
    f16 = np.float16
    inputs = [np.asarray(x, f16), np.asarray(mean, f16), np.asarray(var, f16)]
    inputs += [np.asarray(p, f16) for p in (w, b) if p is not None]
    return inputs


def assert_kernel_bits(got, want):
    """The fast kernel handled the case and gave the reference's bits."""
    assert got is not None, "fast kernel declined a case it should handle"
    assert_same_bits(got, want)


def check(inputs, attrs):
    want = _batch_norm_emulate(inputs, attrs)
    got = bn_fast(inputs, attrs)
    assert_kernel_bits(got, want)
    return got


def finite_bits(rng, shape):
    """Random fp16 bit patterns with every inf / NaN replaced by a finite value."""
    u = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
    bad = (u & 0x7C00) == 0x7C00
    u[bad] &= 0xBFFF  # clear the exponent's top bit: a finite value
    return u.view(np.float16)


# ---- availability ---------------------------------------------------------------------


def test_the_compiled_kernel_is_in_use():
    x = np.ones((1, 2, 3), np.float16)
    s = np.zeros(2, np.float16)
    got = bn_fast([x, s, s + 1], {"eps": 0.0})
    # numba is a core dependency, so the compiled kernel must be in use here
    assert got is not None
    assert fk._state["ok"] is True


# ---- bit identity -----------------------------------------------------------------------


@pytest.mark.parametrize(("has_w", "has_b"), AFFINE)
@pytest.mark.parametrize("scale", [1e-4, 0.05, 1.0, 100.0, 3000.0])
@pytest.mark.parametrize(
    "shape", [(2, 5, 67), (1, 8, 9, 11), (3, 4), (1, 64, 32, 33)], ids=str
)  # the last runs the parallel launch
def test_random_normal(shape, scale, has_w, has_b):
    rng = np.random.default_rng(hash((shape, scale, has_w, has_b)) & 0xFFFF)
    c = shape[1]
    x = rng.standard_normal(shape) * scale
    mean = rng.standard_normal(c) * scale
    var = np.minimum(np.abs(rng.standard_normal(c)) * scale**2, 60000.0)
    w = rng.standard_normal(c) * 2 if has_w else None
    b = rng.standard_normal(c) * scale if has_b else None
    check(make_inputs(x, mean, var, w, b), attrs_for(has_w, has_b))


@pytest.mark.parametrize(("has_w", "has_b"), AFFINE)
@pytest.mark.parametrize("shape", [(3, 7, 41), (2, 16, 5, 9)], ids=str)
def test_random_bit_patterns(shape, has_w, has_b):
    """Every finite fp16 value class: overflow, subnormals, signed zeros, huge and tiny."""
    rng = np.random.default_rng(sum(shape) + 2 * has_w + has_b)
    c = shape[1]
    for _ in range(4):
        x = finite_bits(rng, shape)
        mean = finite_bits(rng, c)
        var = np.abs(finite_bits(rng, c))
        w = finite_bits(rng, c) if has_w else None
        b = finite_bits(rng, c) if has_b else None
        check(make_inputs(x, mean, var, w, b), attrs_for(has_w, has_b))


@pytest.mark.parametrize(("has_w", "has_b"), AFFINE)
def test_overflow_to_inf(has_w, has_b):
    x = np.array([60000, -60000, 65504, -65504, 1, 0], np.float16).reshape(1, 1, 6)
    x = np.concatenate([x, x], axis=1)
    inputs = make_inputs(
        x,
        [-60000, 60000],
        [1e-3, 0.0],
        [3.0, 0.0] if has_w else None,
        [65504, -65504] if has_b else None,
    )
    got = check(inputs, attrs_for(has_w, has_b))
    assert np.isinf(got).any()


def test_inf_times_zero_and_zero_r():
    """Finite inputs whose steps make inf * 0 (NaN) or r = 0 (var + eps overflows)."""
    x = np.array([[[60000, -60000, 1, 0, -0.0]]], np.float16)
    check(make_inputs(x, [-60000], [1], [0.0]), attrs_for(True, False))
    check(make_inputs(x, [-60000], [65504]), {"eps": 70000.0})


@pytest.mark.parametrize("has_b", [False, True])
def test_subnormal_results(has_b):
    rng = np.random.default_rng(5)
    c = 6
    mean = (rng.standard_normal(c) * 1e-3).astype(np.float16)
    tiny = rng.integers(-40, 40, (2, c, 50)) * 2.0**-24  # exact fp16 subnormal steps
    x = (mean.astype(np.float64)[None, :, None] + tiny).astype(np.float16)
    var = np.array([1, 4, 16, 1e4, 6e4, 0.25], np.float16)
    w = np.array([1, 0.5, 1e-3, 3, -1, 6e-5], np.float16)
    b = np.array([0, 6e-8, -6e-8, 1e-6, 0, -0.0], np.float16) if has_b else None
    got = check(
        make_inputs(x, mean, var, w, b), {"eps": 0.0, "has_weight": True, "has_bias": has_b}
    )
    mag = np.abs(got[np.isfinite(got)])
    assert ((mag > 0) & (mag < 2.0**-14)).any()


def test_ties():
    """Exact ties at every step: x - mean, y * w (r = 1 exactly), y + b."""
    k = np.arange(1, 200, 2, dtype=np.float64)  # odd
    x = np.stack([1024 + k, (1024 + k) / 2048]).reshape(1, 2, -1)  # two channels
    inputs = make_inputs(x, [0.5, 0.0], [1, 1], [1, 1.5], [0.5, 2.0**-12])
    check(inputs, {"eps": 0.0, "has_weight": True, "has_bias": True})
    sig = np.arange(1025, 2048, 2, dtype=np.float64) / 1024  # odd significands in [1, 2)
    x = sig.reshape(1, 1, -1)
    check(make_inputs(x, [0.0], [1], [1.5]), {"eps": 0.0, "has_weight": True})


def test_non_contiguous_and_rank2():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 6, 5, 3)).astype(np.float16).transpose(0, 1, 3, 2)
    vec = rng.standard_normal(6).astype(np.float16)
    check([x, vec, np.abs(vec)], attrs_for(False, False))
    check([x[:, :, 0, 0].copy(), vec, np.abs(vec), vec], attrs_for(False, True))


# ---- when the fast kernel declines ---------------------------------------------------


def _base():
    x = np.ones((1, 3, 4), np.float16)
    v = np.ones(3, np.float16)
    return [x, v, v.copy(), v.copy(), v.copy()], attrs_for(True, True)


@pytest.mark.parametrize("slot", range(5))
@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
def test_non_finite_input_returns_none(slot, value):
    inputs, attrs = _base()
    assert bn_fast(inputs, attrs) is not None
    if slot == 0:
        inputs[0][0, 1, 2] = value
    else:
        inputs[slot][1] = value
    assert bn_fast(inputs, attrs) is None


@pytest.mark.parametrize("var", [-1e-5, -1.0])  # r = rsqrt(0) = inf, rsqrt(<0) = NaN
def test_non_finite_r_returns_none(var):
    inputs, _ = _base()
    assert bn_fast(inputs[:3], {"eps": 1e-5}) is not None
    inputs[2][0] = var
    assert bn_fast(inputs[:3], {"eps": 1e-5}) is None


def test_unhandled_dtype_returns_none():
    inputs, attrs = _base()
    assert bn_fast([inputs[0].astype(np.float32), *inputs[1:]], attrs) is None
    assert bn_fast([inputs[0], inputs[1].astype(np.float32), *inputs[2:]], attrs) is None


def test_returns_none_without_numba(monkeypatch):
    monkeypatch.setattr(fk, "numba", None)
    monkeypatch.setattr(fk, "_state", {"ok": None, "error": None})
    monkeypatch.setattr(gemm_module, "NUMBA_IMPORT_ERROR", "ImportError: no numba (test)")
    # load_numba() tries once per process: if this test is the worker's first caller, that
    # one try must not outlive it (later tests would see numba as missing for good)
    monkeypatch.setattr(gemm_module, "_numba_tried", gemm_module._numba_tried)
    monkeypatch.setattr(gemm_module, "_warned", set())
    inputs, attrs = _base()
    with pytest.warns(FastPathWarning, match=r"numba could not be imported \(ImportError"):
        assert bn_fast(inputs, attrs) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", FastPathWarning)  # warned once already
        assert bn_fast(inputs, attrs) is None


def test_returns_none_when_self_check_failed(monkeypatch):
    monkeypatch.setattr(fk, "_state", {"ok": False, "error": "mismatch"})
    monkeypatch.setattr(gemm_module, "_warned", set())
    inputs, attrs = _base()
    with pytest.warns(FastPathWarning, match="batch_norm kernel is disabled: mismatch"):
        assert bn_fast(inputs, attrs) is None


def test_self_check_mismatch_disables(monkeypatch):
    monkeypatch.setattr(fk, "_state", {"ok": None, "error": None})
    monkeypatch.setattr(fk, "_probe", lambda: (_base()[0], {"eps": 1e-5, "has_weight": True}))
    monkeypatch.setattr(gemm_module, "_warned", set())
    assert fk._ensure_batch_norm() is False  # the probe's input count does not match
    with pytest.warns(FastPathWarning, match="disagrees with the reference"):
        assert bn_fast(*_base()) is None


# ---- the portable (integer) code generation ---------------------------------------------

_PORTABLE_SCRIPT = """
import numpy as np
from aneforge.emulator.fast_kernels import FAST_KERNELS, _state
from aneforge.graph.ops.norm import _batch_norm_emulate
rng = np.random.default_rng(3)
bad = 0
for shape in ((2, 7, 41), (1, 32, 50, 50)):
    u = rng.integers(0, 1 << 16, shape, dtype=np.uint16)
    u[(u & 0x7C00) == 0x7C00] &= 0xBFFF
    c = shape[1]
    vec = lambda: (rng.standard_normal(c) * 4).astype(np.float16)
    for x in (u.view(np.float16), (rng.standard_normal(shape) * 300).astype(np.float16)):
        inputs = [x, vec(), np.abs(vec()), vec(), vec()]
        attrs = {"eps": 1e-5, "has_weight": True, "has_bias": True}
        got = FAST_KERNELS["batch_norm"](inputs, attrs)
        want = _batch_norm_emulate(inputs, attrs)
        ok = got is not None and np.array_equal(np.isnan(got), np.isnan(want))
        ok = ok and np.array_equal(got.view(np.uint16)[~np.isnan(got)],
                                   want.view(np.uint16)[~np.isnan(want)])
        bad += not ok
print("state", _state, "mismatches", bad)
raise SystemExit(1 if bad else 0)
"""


@pytest.mark.parametrize("env", PORTABLE_ENVS, ids=PORTABLE_IDS)
def test_portable_codegen_matches_reference(env):
    run_python_with_env(_PORTABLE_SCRIPT, env)


# ---- a convolution's (and a linear's) bias add --------------------------------------------


@pytest.mark.parametrize(
    "shape", [(1, 3, 300, 300), (2, 7, 9, 1100), (1, 64, 1024), (1, 5, 13, 13), (2, 3, 1)]
)  # the last two run on one thread (under _SERIAL_ELEMENTS)
def test_bias_add_gives_numpys_fp16_add_on_random_bits(shape):
    rng = np.random.default_rng(sum(shape))
    y = rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(np.float16)
    b = rng.integers(0, 1 << 16, (shape[1],) + (1,) * (len(shape) - 2), dtype=np.uint16)
    b = b.view(np.float16)
    with np.errstate(all="ignore"):
        want = y + b
    assert_kernel_bits(fk.bias_add_fast(y, b), want)
    assert_kernel_bits(fk.bias_add_fast(y[:, :, ::-1], b), want[:, :, ::-1])  # strided y


def test_bias_add_declines_what_is_not_one_value_per_channel():
    y = np.ones((1, 4, 256, 256), np.float16)
    assert fk.bias_add_fast(y, np.ones((4, 2, 1), np.float16)) is None
    assert fk.bias_add_fast(y, np.ones((4,), np.float16)) is None  # would broadcast on W
    assert fk.bias_add_fast(y, np.ones((4, 1, 1), np.float32)) is None


def test_a_conv_with_a_bias_gives_the_reference_bits_on_the_fast_path():
    rng = np.random.default_rng(5)
    x = af.input((1, 8, 64, 64), name="x")
    w = (rng.standard_normal((16, 8, 3, 3)) * 0.3).astype(np.float16)
    b = (rng.standard_normal(16) * 40).astype(np.float16)
    prog = af.compile(af.conv(x, w, b, padding=1), opt=0)
    feed = (rng.standard_normal((1, 8, 64, 64)) * 3).astype(np.float16)
    fast = execute_fp16(prog, [feed])[0]
    slow = execute_fp16(prog, [feed], fast=False)[0]
    assert_same_bits(fast, slow)


@pytest.mark.parametrize("shape", [(256, 384), (2, 16, 32), (3, 7)])
def test_a_linear_with_a_bias_gives_the_reference_bits_on_the_fast_path(shape):
    # the features as channels: (rows, F, 1) + (F, 1) through the compiled bias add
    rng = np.random.default_rng(sum(shape))
    f_in, f_out = shape[-1], 48
    x = af.input(shape, name="x")
    w = (rng.standard_normal((f_out, f_in)) / np.sqrt(f_in)).astype(np.float16)
    b = rng.integers(0, 1 << 16, f_out, dtype=np.uint16).view(np.float16)  # any bits
    prog = af.compile(af.linear(x, w, b), opt=0)
    feed = (rng.standard_normal(shape) * 4).astype(np.float16)
    fast = execute_fp16(prog, [feed])[0]
    slow = execute_fp16(prog, [feed], fast=False)[0]
    assert_same_bits(fast, slow)
    product = execute_fp16(af.compile(af.linear(x, w), opt=0), [feed])[0]
    with np.errstate(all="ignore"):
        assert_same_bits(fast, product + b)  # NumPy's fp16 add of the rounded product
