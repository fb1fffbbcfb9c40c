"""The compiled float32 -> fp16 input conversion against NumPy's ``astype``, bit for bit,
and the program inputs it serves: overflow still warns, NaN and inf still pass."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator import gemm
from aneforge.emulator.convert import MIN_ELEMENTS, to_fp16
from aneforge.errors import PrecisionWarning


@pytest.fixture(autouse=True)
def _numba_loaded():
    assert gemm.load_numba() is not None  # the pass serves once numba is loaded


def _astype(x):
    with np.errstate(over="ignore"):
        return x.astype(np.float16)


@pytest.mark.parametrize("seed", range(6))
def test_finite_values_at_every_scale_give_numpys_bits(seed):
    """Normal values, ties between fp16 neighbours, the subnormal grid and values that
    round to zero, at a serial and a parallel size."""
    rng = np.random.default_rng(seed)
    n = (MIN_ELEMENTS, 300_000)[seed % 2]
    x = np.clip(rng.standard_normal(n) * 2.0 ** rng.integers(-30, 16, n), -65504, 65504)
    x = x.astype(np.float32)
    ties = (rng.integers(1, 2048, n // 4) * 2 + 1) * 2.0 ** rng.integers(-36, 4, n // 4)
    x[: n // 4] = np.minimum(ties, 65504).astype(np.float32)
    x[n // 4 : n // 2] *= -1
    got = to_fp16(x.reshape(-1, 4))
    assert got is not None and got.shape == (n // 4, 4) and got.dtype == np.float16
    assert np.array_equal(got.view(np.uint16).ravel(), _astype(x).view(np.uint16))


@pytest.mark.parametrize("bad", [65520.0, -1e9, np.inf, np.nan])
def test_a_value_that_is_or_becomes_non_finite_is_left_to_numpy(bad):
    x = np.linspace(-3, 3, MIN_ELEMENTS, dtype=np.float32)
    x[1234] = bad
    assert to_fp16(x) is None


def test_other_dtypes_and_small_arrays_are_left_to_numpy():
    assert to_fp16(np.ones(MIN_ELEMENTS, np.float64)) is None
    assert to_fp16(np.ones(MIN_ELEMENTS, np.float16)) is None
    assert to_fp16(np.ones(MIN_ELEMENTS - 1, np.float32)) is None
    assert to_fp16(np.ones(MIN_ELEMENTS, np.float32)) is not None


def test_a_non_contiguous_input_converts_in_its_logical_order():
    x = np.arange(4 * MIN_ELEMENTS, dtype=np.float32).reshape(2, -1)[:, ::2] / 7
    got = to_fp16(x)
    assert got is not None and np.array_equal(got.view(np.uint16), _astype(x).view(np.uint16))


def test_program_inputs_convert_the_same_and_overflow_still_warns():
    x = af.input((64, 64), name="x")
    prog = af.compile(x * 2.0, opt=0)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((64, 64)) * 100).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        assert np.array_equal(prog(a).view(np.uint16), prog(_astype(a)).view(np.uint16))
    a[5, 7] = 70000.0  # beyond fp16: inf on the engine, with a warning naming the input
    with pytest.warns(PrecisionWarning, match="'x'.*70000 is beyond fp16"):
        out = prog(a)
    assert np.isinf(out[5, 7]) and np.isfinite(np.delete(out.ravel(), 5 * 64 + 7)).all()
