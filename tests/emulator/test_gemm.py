"""Tests of the emulator matmul: the NumPy oracle against an independent float64 model of
the contract, and the compiled fast path bit for bit against the oracle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import aneforge.emulator.gemm as gemm_module
from aneforge.emulator import windows
from aneforge.emulator.gemm import gemm, gemm_fast, gemm_reference
from conftest import PORTABLE_ENVS, PORTABLE_IDS, assert_same_bits, run_python_with_env

SIZES = (1, 7, 33, 255)

# ---- helpers ------------------------------------------------------------------------


def round_to_format(x, significand_bits, min_exponent, max_finite):
    """Round float64 values to a binary format: RNE, subnormals, overflow to +-inf.

    Independent of NumPy's casts: the quantum 2**q of each value comes from frexp, the
    rounding from rint (ties to even) on the exactly scaled value.
    """
    x = np.array(x, dtype=np.float64)
    sel = np.isfinite(x) & (x != 0)
    v = x[sel]
    _, e = np.frexp(v)  # v = f * 2**e with 0.5 <= |f| < 1
    q = np.maximum(e - significand_bits, min_exponent - significand_bits + 1)
    r = np.ldexp(np.rint(np.ldexp(v, -q)), q)
    x[sel] = np.where(np.abs(r) > max_finite, np.copysign(np.inf, v), r)
    return x


def to_fp16(x):
    return round_to_format(x, 11, -14, 65504.0)


def to_fp32(x):
    return round_to_format(x, 24, -126, float(np.finfo(np.float32).max))


def float64_model(a, b):
    """The contract computed in float64 with explicit roundings (exact products; the
    float64 add before rounding to float32 is harmless since 53 >= 2 * 24 + 2)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((a.shape[0], a.shape[1], b.shape[2]))
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(a.shape[2]):
            acc = to_fp32(acc + to_fp16(a64[:, :, k, None] * b64[:, None, k, :]))
        return to_fp16(acc).astype(np.float16)  # exactly representable: an exact cast


def normal_fp16(rng, shape, scale=1.0):
    x = rng.standard_normal(shape) * scale
    return np.clip(x, -65504, 65504).astype(np.float16)


def random_bits(rng, shape):
    """Every fp16 bit pattern: zeros, subnormals, normals, inf and NaN."""
    return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16).view(np.float16)


def subnormals(rng, shape):
    bits = rng.integers(1, 0x400, size=shape, dtype=np.uint16)
    return (bits | (rng.integers(0, 2, size=shape, dtype=np.uint16) << 15)).view(np.float16)


def tie_operands(rng, b_, m, k, n):
    """a with odd significands 1025..1365, b = +-1.5 * 2**e: every product is an exact tie
    halfway between two fp16 values, half of them rounding up, half down (to even)."""
    sig = rng.integers(512, 683, size=(b_, m, k)) * 2 + 1
    a = sig / 1024.0 * 2.0 ** rng.integers(-8, 8, size=(b_, m, k))
    b = 1.5 * rng.choice([-1.0, 1.0], size=(b_, k, n)) * 2.0 ** rng.integers(-8, 8, (b_, k, n))
    return a.astype(np.float16), b.astype(np.float16)


def check_fast(a, b):
    want = gemm_reference(a, b)
    assert_same_bits(gemm_fast(a, b), want)
    return want


# ---- the fast path is really there --------------------------------------------------


def test_fast_path_available_whenever_numba_imports():
    try:
        import numba  # noqa: F401
    except ImportError:
        has_numba = False
    else:
        has_numba = True
    if has_numba:
        gemm_fast(np.ones((1, 2, 3), np.float16), np.ones((1, 3, 2), np.float16))
    assert gemm_module.FAST_PATH_AVAILABLE is has_numba


# ---- the oracle against the float64 model ------------------------------------------


def test_reference_wide_accumulator_counts_past_2048():
    a = np.ones((1, 1, 16384), np.float16)
    b = np.ones((1, 16384, 1), np.float16)
    assert float(gemm_reference(a, b)[0, 0, 0]) == 16384.0  # an fp16 sum stalls at 2048
    assert_same_bits(gemm_reference(a, b), float64_model(a, b))


BIG = [32768.0] * 512  # 512 products of 2**15 sum exactly to 2**24, where float32 has ulp 2
NEG = [-32768.0] * 512


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ([16000.0] + [1.0] * 8, 16008.0),  # each +1 is below an fp16 ulp of 16000
        ([1.0] * 2049, 2048.0),  # 2049 rounds to even at the end
        ([1.0] * 2051, 2052.0),  # 2051 rounds to even, upwards
        (BIG + [1.0] + NEG, 0.0),  # 2**24 + 1 rounds (to even) back to 2**24: lost
        ([1.0] + BIG + NEG, 0.0),  # 2**24 - 2**15 + 1 is exact, + 2**15 loses the 1
        (BIG + NEG + [1.0], 1.0),  # the same terms in another order
    ],
)
def test_reference_exact_integer_sums(column, expected):
    a = np.array(column, np.float16).reshape(1, 1, -1)
    b = np.ones((1, a.shape[2], 1), np.float16)
    got = gemm_reference(a, b)
    assert float(got[0, 0, 0]) == expected
    assert not np.signbit(got[0, 0, 0])
    assert_same_bits(got, float64_model(a, b))


def test_reference_rounds_each_product_to_fp16():
    # (1 + 2**-10)**2 = 1 + 2**-9 + 2**-20 rounds to 1 + 2**-9, which the next product
    # cancels exactly; without the product rounding 2**-20 (an fp16 subnormal) would remain
    a = np.array([[[1 + 2**-10, -(1 + 2**-9)]]], np.float16)
    b = np.array([[[1 + 2**-10], [1.0]]], np.float16)
    assert gemm_reference(a, b).view(np.uint16)[0, 0, 0] == 0
    assert_same_bits(gemm_reference(a, b), float64_model(a, b))


@pytest.mark.parametrize("kind", ["normal", "tiny", "huge", "bits", "ties", "subnormal"])
def test_reference_matches_float64_model(rng, kind):
    shape_a, shape_b = (2, 5, 40), (2, 40, 6)
    if kind == "normal":
        a, b = normal_fp16(rng, shape_a), normal_fp16(rng, shape_b, 3.0)
    elif kind == "tiny":
        a, b = normal_fp16(rng, shape_a, 1e-3), normal_fp16(rng, shape_b, 1e-3)
    elif kind == "huge":
        a, b = normal_fp16(rng, shape_a, 3e3), normal_fp16(rng, shape_b, 3e3)
    elif kind == "bits":
        a, b = random_bits(rng, shape_a), random_bits(rng, shape_b)
    elif kind == "ties":
        a, b = tie_operands(rng, 2, 5, 40, 6)
    else:
        a, b = subnormals(rng, shape_a), normal_fp16(rng, shape_b, 30.0)
    assert_same_bits(gemm_reference(a, b), float64_model(a, b))


# ---- the fast path against the oracle ------------------------------------------------


@pytest.mark.parametrize(("m", "k", "n"), list(itertools.product(SIZES, SIZES, SIZES)))
def test_fast_sizes(m, k, n):
    rng = np.random.default_rng(m * 1_000_000 + k * 1000 + n)
    check_fast(normal_fp16(rng, (1, m, k)), normal_fp16(rng, (1, k, n), 2.0))


def test_fast_batched_and_non_contiguous(rng):
    base_a = normal_fp16(rng, (3, 70, 2 * 33))
    base_b = normal_fp16(rng, (3, 45, 2 * 40))
    a = base_a[:, ::2, ::2]  # (3, 35, 33): step slices
    b = base_b.transpose(0, 2, 1)[:, 1:67:2, :]  # (3, 33, 45): a sliced transposed view
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    want = check_fast(a, b)
    assert_same_bits(want, gemm_reference(a.copy(), np.asfortranarray(b)))
    # a transposed view on the left, a read-only broadcast on the right
    at = normal_fp16(rng, (4, 50, 37)).transpose(0, 2, 1)  # (4, 37, 50)
    bb = np.broadcast_to(normal_fp16(rng, (1, 50, 70)), (4, 50, 70))
    check_fast(at, bb)


def test_read_only_and_writable_operands_share_one_compiled_kernel(rng):
    # a program's weights are read-only arrays, padded copies are not: both reach the
    # kernel as one array type, so a cold process compiles it once (docs/kernel.md)
    gemm_module._ensure_kernel()
    for writable in (True, False):
        a = normal_fp16(rng, (1, 2 * gemm_module._MR, 40))
        a.flags.writeable = writable
        b = normal_fp16(rng, (1, 40, gemm_module._NR))
        panels = np.ascontiguousarray(b.view(np.uint16).reshape(1, 40, 1, gemm_module._NR)
                                      .transpose(0, 2, 1, 3))  # fmt: skip
        got = gemm_module._launch(a.view(np.uint16), panels, a.shape[1], b.shape[2])
        assert_same_bits(got, gemm_reference(a, b))
    assert len(gemm_module._jit.signatures) == 1


def test_fast_orientations_agree(rng):
    # narrow outputs run transposed (C^T = B^T A^T); both must give the reference bits
    for m, n in ((200, 3), (3, 200), (65, 1), (1, 65)):
        check_fast(normal_fp16(rng, (2, m, 29)), normal_fp16(rng, (2, 29, n)))


def test_fast_rounds_each_product_to_fp16():
    # the cancellation of test_reference_rounds_each_product_to_fp16 on a whole tile: an
    # FMA (or any missing product rounding) would leave 2**-20 in every output
    a = np.tile(np.array([1 + 2**-10, -(1 + 2**-9)], np.float16), (1, 8, 1))
    b = np.tile(np.array([[1 + 2**-10], [1.0]], np.float16), (1, 1, 64))
    got = gemm_fast(a, b)
    assert (got.view(np.uint16) == 0).all()


def test_fast_exact_sums_in_k_order():
    # the order-sensitive sums of test_reference_exact_integer_sums on whole tiles; K = 1025
    # spans five k-blocks and the lone +1 of row 0 sits at k = 512, a block boundary
    rows = [BIG + [1.0] + NEG, BIG + NEG + [1.0], [16000.0] + [1.0] * 8 + [0.0] * 1016]
    a = np.array(rows * 3, np.float16)[None]
    b = np.ones((1, 1025, 40), np.float16)
    got = check_fast(a, b)
    assert (got[0, 0::3] == 0).all() and (got[0, 1::3] == 1).all()
    assert (got[0, 2::3] == 16008).all()


def test_fast_long_k_crosses_k_blocks(rng):
    a = np.ones((1, 5, 16384), np.float16)
    b = np.ones((1, 16384, 40), np.float16)
    assert (check_fast(a, b) == np.float16(16384.0)).all()
    check_fast(normal_fp16(rng, (2, 6, 1000)), normal_fp16(rng, (2, 1000, 33)))


def test_fast_overflow_near_fp16_max(rng):
    a = (rng.choice([-1.0, 1.0], (2, 9, 50)) * rng.uniform(200, 65504, (2, 9, 50))).astype(
        np.float16
    )
    b = (rng.choice([-1.0, 1.0], (2, 50, 35)) * rng.uniform(0.001, 400, (2, 50, 35))).astype(
        np.float16
    )
    a[0, 0, :] = 65504.0
    b[0, :, 0] = 1.0  # 50 * 65504 overflows only in the final rounding
    want = check_fast(a, b)
    assert np.isinf(want[0, 0, 0]) and np.isinf(want).any() and np.isnan(want).any()
    # sums just below and above the fp16 overflow threshold 65520
    a = np.array([[[65504.0, 8.0], [65504.0, 16.0], [65504.0, 15.0]]], np.float16)
    b = np.ones((1, 2, 32), np.float16)
    got = check_fast(a, b)
    assert got[0, 0, 0] == np.float16(65504.0) and np.isposinf(got[0, 1, 0])
    assert got[0, 2, 0] == np.float16(65504.0)
    check_fast(-a, b)
    # products exactly at the threshold: 45 * 1456 = 65520 ties to inf, 44 * 1456 does not
    a = np.array([45.0, -45.0, 44.0], np.float16).reshape(1, 3, 1)
    got = check_fast(a, np.full((1, 1, 40), 1456.0, np.float16))
    assert np.isposinf(got[0, 0]).all() and np.isneginf(got[0, 1]).all()
    assert (got[0, 2] == np.float16(64064.0)).all()
    b = np.array([[[1456.0], [-1000.0]]], np.float16)
    over = check_fast(np.array([[[45.0, 1.0]]], np.float16), b)
    assert np.isposinf(over[0, 0, 0])  # the product is inf before the -1000 arrives


def test_fast_subnormals(rng):
    # subnormal operands, subnormal products, and products that round to (signed) zero
    a = subnormals(rng, (2, 9, 60))
    b = normal_fp16(rng, (2, 60, 40), 100.0)
    check_fast(a, b)
    check_fast(b.transpose(0, 2, 1).copy(), a.transpose(0, 2, 1).copy())
    check_fast(normal_fp16(rng, (1, 8, 60), 2e-3), normal_fp16(rng, (1, 60, 40), 2e-3))
    check_fast(subnormals(rng, (1, 8, 60)), subnormals(rng, (1, 60, 40)))
    # the smallest subnormal: 2**-24 * 0.5 is a tie that rounds to +-0
    a = np.full((1, 4, 3), 2.0**-24, np.float16)
    b = np.array([0.5, -0.5, 1.5], np.float16).reshape(1, 3, 1) * np.ones((1, 1, 32), np.float16)
    check_fast(a, b)


def test_fast_product_ties(rng):
    a, b = tie_operands(rng, 2, 13, 70, 45)
    check_fast(a, b)
    check_fast(b.transpose(0, 2, 1).copy(), a.transpose(0, 2, 1).copy())


@pytest.mark.parametrize("scale", [1e-4, 1e-2, 1.0, 1e2, 1e4])
def test_fast_random_scales(rng, scale):
    check_fast(normal_fp16(rng, (2, 21, 130), scale), normal_fp16(rng, (2, 130, 50), 1.0))


def test_fast_nan_and_inf(rng):
    check_fast(random_bits(rng, (2, 11, 40)), random_bits(rng, (2, 40, 50)))
    a = normal_fp16(rng, (1, 12, 80))
    b = normal_fp16(rng, (1, 80, 40))
    a[0, 1, 7] = np.inf
    a[0, 2, 9] = -np.inf
    a[0, 3, 11] = np.nan
    b[0, 7, 5] = 0.0  # inf * 0 = nan in one column only
    b[0, 9, :] = -b[0, 9, :]
    a[0, 4, 20], a[0, 4, 21] = np.inf, 1.0
    b[0, 20, 3], b[0, 21, 3] = 1.0, -np.inf  # inf + -inf = nan
    want = check_fast(a, b)
    assert np.isnan(want[0, 1, 5]) and np.isinf(want[0, 1, 0]) and np.isnan(want[0, 3]).all()
    assert np.isnan(want[0, 4, 3])


def test_rows_of_zeros_are_left_out_with_the_same_bits(rng):
    """A zero product never changes a sum that starts at +0.0, so the kernel leaves out
    panel rows of zeros (ReLU outputs): the oracle's bits, +0.0 where every product is
    a zero, and NaN where an inf in ``a`` meets a zero (then nothing is left out)."""
    a = normal_fp16(rng, (1, 20, 700))  # enough rows for the kernel to look for zeros
    a[0, :9] = -np.abs(a[0, :9])  # negative rows: their zero products are -0.0
    b = np.maximum(normal_fp16(rng, (1, 700, 75)), 0)
    b[0, rng.choice(700, 400, replace=False)] = 0.0
    b[0, :, 60:] = -0.0  # a whole panel of zeros
    got = gemm_fast(a, b)
    assert_same_bits(got, gemm_reference(a, b))
    assert not np.signbit(got[0, :, 60:]).any() and (got[0, :, 60:] == 0).all()
    a[0, 2, 5] = np.inf
    b[0, 5] = 0.0
    got = gemm_fast(a, b)
    assert_same_bits(got, gemm_reference(a, b))
    assert np.isnan(got[0, 2]).all()


def test_fast_empty_contraction_is_positive_zero():
    a = np.ones((2, 3, 0), np.float16)
    b = np.ones((2, 0, 5), np.float16)
    got = check_fast(a, b)
    assert got.shape == (2, 3, 5) and (got.view(np.uint16) == 0).all()
    assert check_fast(np.ones((1, 0, 4), np.float16), np.ones((1, 4, 6), np.float16)).size == 0


def test_gemm_dispatches_to_an_identical_backend(rng):
    a, b = normal_fp16(rng, (2, 37, 64)), normal_fp16(rng, (2, 64, 33))
    assert_same_bits(gemm(a, b), gemm_reference(a, b))


def test_gemm_falls_back_when_the_kernel_is_unusable(monkeypatch, rng):
    broken = {"ready": False, "error": RuntimeError("kernel broken for this test")}
    monkeypatch.setattr(gemm_module, "_state", broken)
    monkeypatch.setattr(gemm_module, "FAST_PATH_AVAILABLE", True)
    monkeypatch.setattr(gemm_module, "_warned", set())
    a, b = normal_fp16(rng, (1, 5, 9)), normal_fp16(rng, (1, 9, 3))
    with pytest.warns(gemm_module.FastPathWarning, match="kernel broken for this test"):
        got = gemm(a, b)
    assert_same_bits(got, gemm_reference(a, b))
    with pytest.raises(RuntimeError, match="unavailable"):
        gemm_fast(a, b)


# ---- the portable (integer) code generation -----------------------------------------

_PORTABLE_SCRIPT = """
import numpy as np
from aneforge.emulator.gemm import gemm_fast, gemm_reference, _same_bits
rng = np.random.default_rng(7)
cases = []
def bits(shape):
    return rng.integers(0, 1 << 16, shape, dtype=np.uint16).view(np.float16)
def norm(shape, scale):
    return (rng.standard_normal(shape) * scale).astype(np.float16)
for m, k, n in ((9, 300, 45), (1, 33, 1), (40, 7, 3)):
    cases.append((bits((2, m, k)), bits((2, k, n))))
    for scale in (1e-5, 1e-2, 1.0, 30.0, 2000.0):
        cases.append((norm((2, m, k), scale), norm((2, k, n), 1.0)))
sig = rng.integers(512, 683, (1, 8, 64)) * 2 + 1  # products on exact ties
cases.append(((sig / 1024.0).astype(np.float16), np.full((1, 64, 32), 1.5, np.float16)))
edge = np.array([45.0, -45.0, 44.0, 2.0**-24, -(2.0**-24)], np.float16).reshape(1, 5, 1)
cases.append((edge, np.array([1456.0, 0.5, 1.5], np.float16).reshape(1, 1, 3)))
over = np.array([[[45.0, 1.0]]], np.float16)  # 65520 must become inf before - 1000
cases.append((over, np.array([[[1456.0], [-1000.0]]], np.float16)))
sums = np.array([[65504, 16], [65504, 15], [-65504, -16], [65504, 8]], np.float16)[None]
cases.append((sums, np.ones((1, 2, 33), np.float16)))  # sums at the overflow threshold
every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
every = every[np.abs(every.astype(np.float32)) < 16384].reshape(1, -1, 1)  # no overflow:
cols = [1.5, -0.75, 3.0, 1 + 2.0**-10, -(2.0**-10), 6e-8, 0.0, -2.9]  # the magic path
cases.append((every, np.array(cols, np.float16).reshape(1, 1, -1)))  # every rounding
sparse = norm((2, 600, 50), 1.0)  # rows of zeros (+0 and -0) in k-blocks 1 and 3 only:
zero_rows = rng.choice(256, 90, replace=False)
sparse[:, zero_rows] = 0.0  # left out there, block 2 runs whole
sparse[:, 512 + rng.choice(88, 30, replace=False)] = -0.0
cases.append((norm((2, 20, 600), 1.0), sparse))  # a last panel of 2 columns: the edge tile
cases.append((norm((2, 20, 600), 1.0), np.zeros((2, 600, 50), np.float16)))  # sums of -0
with_inf = norm((2, 20, 600), 1.0)
with_inf[1, 3, zero_rows[0]] = np.inf  # inf * 0 is NaN: no row may be left out
cases.append((with_inf, sparse))
bad = [i for i, (a, b) in enumerate(cases) if not _same_bits(gemm_fast(a, b),
                                                          gemm_reference(a, b))]
print("mismatching cases:", bad)
raise SystemExit(1 if bad else 0)
"""


@pytest.mark.parametrize("env", PORTABLE_ENVS, ids=PORTABLE_IDS)
def test_portable_codegen_matches_reference(env):
    run_python_with_env(_PORTABLE_SCRIPT, env)


# ---- every tile geometry ----------------------------------------------------------------

_TILE_PREFIX = """
import aneforge.emulator.gemm as g
g._choose_tile = lambda features: g._Tile({vw}, {nv}, {magic}, {rows})
from aneforge.emulator import windows
x = np.zeros((1, 3, 9, 9), np.float16)
w3 = np.ones((1, 5, 27), np.float16)
windows.gemm_windows(w3, x, (3, 3), (1, 1), (1, 1), 1)
assert (g._VW, g._NV, g._NR, g._MAGIC, g._F32_ROWS) == ({vw}, {nv}, {vw} * {nv}, {magic}, {rows})
assert windows._windows_state["ok"], windows._windows_state["error"]
"""


@pytest.mark.parametrize(
    ("vw", "nv", "magic", "rows"),
    [
        (8, 3, False, True),
        (8, 3, False, False),
        (16, 2, False, False),
        (16, 4, True, True),
        (8, 3, True, True),
    ],
    ids=["avx2", "avx2-fp16-rows", "avx512fp16", "avx512-magic", "avx2-magic"],
)
def test_every_tile_geometry_matches_reference(tmp_path, vw, nv, magic, rows):
    """The tile the CPU picks (``_choose_tile``) changes speed, never bits: every tile
    and both product roundings, compiled here (LLVM splits vectors wider than the
    CPU's), give the oracle's bits on the same cases as the portable code generation
    (random bits with inf and NaN, overflowing products: the magic tile's exact path),
    and so do the gathered conv panels. A fresh numba cache: a cached kernel holds the
    tile it was compiled with."""
    script = _PORTABLE_SCRIPT.replace(
        "from aneforge.emulator.gemm import",
        _TILE_PREFIX.format(vw=vw, nv=nv, magic=magic, rows=rows)
        + "from aneforge.emulator.gemm import",
        1,
    )
    script = "import numpy as np\n" + script
    run_python_with_env(script, {"NUMBA_CACHE_DIR": str(tmp_path)})


def test_the_tile_follows_the_vector_registers():
    assert gemm_module._choose_tile("+avx2,-avx512f,+f16c,+fma") == (8, 3, False, True)
    assert gemm_module._choose_tile("+avx2,+avx512f,+f16c,+fma") == (16, 4, True, True)
    assert gemm_module._choose_tile("+avx2,+avx512f,+avx512fp16,+fma") == (16, 2, False, False)
    assert gemm_module._choose_tile("+neon,+fp-armv8,+fullfp16") == (8, 3, False, False)
    assert gemm_module._choose_tile("+neon,+fp-armv8") == (8, 3, False, True)


# ---- input validation ------------------------------------------------------------------


@pytest.mark.parametrize("fn", [gemm, gemm_fast, gemm_reference])
@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (np.ones((1, 2, 3), np.float32), np.ones((1, 3, 2), np.float16), "dtype float16"),
        (np.ones((1, 2, 3), np.float16), np.ones((1, 3, 2), np.int16), "dtype float16"),
        (np.ones((2, 3), np.float16), np.ones((1, 3, 2), np.float16), "shape"),
        (np.ones((1, 2, 3), np.float16), np.ones((1, 1, 3, 2), np.float16), "shape"),
        (np.ones((2, 2, 3), np.float16), np.ones((3, 3, 2), np.float16), "batch"),
        (np.ones((1, 2, 3), np.float16), np.ones((1, 4, 2), np.float16), "contraction"),
        ([[[1.0]]], np.ones((1, 1, 1), np.float16), "numpy.ndarray"),
    ],
)
def test_invalid_operands_raise_value_error(fn, a, b, message):
    with pytest.raises(ValueError, match=message):
        fn(a, b)


def test_an_overflowing_product_in_one_task_leaves_the_others_exact():
    """One product of 120,000 (fp16: inf) in a large problem: its task takes the exact
    path where the CPU's tile rounds by magic numbers, the other tasks do not, and the
    whole result has the oracle's bits, the inf row included."""
    rng = np.random.default_rng(11)
    a = (rng.standard_normal((1, 200, 300)) * 0.5).astype(np.float16)
    b = (rng.standard_normal((1, 300, 300)) * 0.5).astype(np.float16)
    a[0, 150, 7], b[0, 7, 250] = 30000.0, 4.0
    got = gemm_fast(a, b)
    assert np.isinf(got[0, 150, 250])
    assert_same_bits(got, gemm_reference(a, b))


@pytest.mark.parametrize(("k", "n"), [(37, 1), (300, 131), (515, 600), (512, 1024)])
def test_strided_b_packs_like_a_contiguous_copy(k, n):
    """A linear layer's ``W.T`` (k the unit stride; from 2^18 elements packed by the
    compiled 16 x 16 tiles, ragged edges included), the same of a row-stepped ``W`` and
    a view stepped along both axes all give the oracle's bits."""
    rng = np.random.default_rng(k * 1000 + n)
    a = (rng.standard_normal((1, 5, k)) * 0.5).astype(np.float16)
    w = rng.standard_normal((1, 2 * n, k)).astype(np.float16)
    wide = rng.standard_normal((1, 2 * k, 3 * n)).astype(np.float16)
    for b in (w[:, :n].transpose(0, 2, 1), w[:, ::2].transpose(0, 2, 1), wide[:, ::2, ::3]):
        assert_same_bits(gemm_fast(a, b), gemm_reference(a, b))


# ---- a convolution's patches gathered into the panels ----------------------------------


def _patches(xp, kernel, stride, dil, groups):
    """The (N*G, Cin/G*kh*kw, Ho*Wo) patch matrix, built by NumPy's window views."""
    n, c = xp.shape[:2]
    span = ((kernel[0] - 1) * dil[0] + 1, (kernel[1] - 1) * dil[1] + 1)
    win = np.lib.stride_tricks.sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, :: stride[0], :: stride[1], :: dil[0], :: dil[1]]
    ho, wo = win.shape[2:4]
    k = c // groups * kernel[0] * kernel[1]
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(n * groups, k, ho * wo)


@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "dil", "groups", "cout"),
    [
        ((1, 3, 9, 60), (3, 3), (1, 1), (1, 1), 1, 8),  # rows longer than a panel
        ((2, 4, 12, 7), (3, 3), (1, 1), (1, 1), 2, 4),  # 5-wide rows: several per panel
        ((1, 2, 15, 15), (3, 3), (2, 2), (1, 1), 1, 12),  # stride 2
        ((1, 3, 20, 23), (7, 7), (3, 2), (1, 1), 1, 4),  # stem-like, uneven strides
        ((1, 4, 13, 17), (3, 2), (1, 1), (2, 3), 4, 8),  # dilated, depthwise groups
        ((1, 1, 5, 5), (5, 5), (1, 1), (1, 1), 1, 4),  # one output position
    ],
)
def test_gathered_windows_give_the_patch_matrix_bits(shape, kernel, stride, dil, groups, cout):
    rng = np.random.default_rng(sum(shape))
    xp = (rng.standard_normal(shape) * 3).astype(np.float16)
    k = shape[1] // groups * kernel[0] * kernel[1]
    w3 = np.tile((rng.standard_normal((groups, cout, k)) * 2).astype(np.float16), (shape[0], 1, 1))
    patches = _patches(xp, kernel, stride, dil, groups)
    want = gemm_reference(w3, patches)
    got = windows.gemm_windows(w3, xp, kernel, stride, dil, groups)
    assert got is not None  # few output channels: never the transposed run
    assert_same_bits(got, want)
