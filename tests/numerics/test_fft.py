"""af.fft on the emulator against numpy.fft.

Accuracy is relative L2, ``||got - ref|| / ||ref||``, over random normal data already
representable in fp16 (so the reference sees the same inputs as the engine). Gates are
twice the specification's figures ("FFT: complex as real pairs"): dense ~2.5e-4, staged
5e-4..8e-4. Convolution has no spec figure; its gate composes the 1-D one (see
CONV_*_GATE). docs/numerics.md, "FFT", has the measured table (bench/fft_accuracy.py).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.errors import AneforgeError, CrossChipFP16Warning, OptionError, ShapeError
from aneforge.numerics import fft as F
from aneforge.numerics.fft_kernels import complex_matmul, factorizations
from conftest import FP16_UNIT_ROUNDOFF, fp16_values, matmul_error_bound

SPEC_DENSE = 2.5e-4  # the specification: the naive single-DFT floor
SPEC_STAGED = 8e-4  # the specification: staged Cooley-Tukey, upper end of 5e-4..8e-4
DENSE_GATE = 2 * SPEC_DENSE
STAGED_GATE = 2 * SPEC_STAGED
# A convolution is four transform-sized error sources (two forward FFTs, the spectral
# product, the inverse), independent, so about sqrt(4) = 2 times the 1-D error; gated at
# twice that composed figure.
CONV_DENSE_GATE = 2 * 2 * SPEC_DENSE
CONV_STAGED_GATE = 2 * 2 * SPEC_STAGED
# 2-D has no spec figure either: it is two 1-D passes with an fp16 rounding between them,
# so about sqrt(2) times the 1-D error; gated at twice that composed figure.
FFT2_DENSE_GATE = math.sqrt(2) * DENSE_GATE
FFT2_STAGED_GATE = math.sqrt(2) * STAGED_GATE
SEEDS = (0, 1, 2)
ROWS = 4  # rows per seed
LINEAR_OPS = {"input", "weight", "matmul", "concat", "reshape", "transpose", "slice"}
LINEAR_OPS |= {"mul", "add", "sub"}


def relerr(got, ref) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def run(outs, *arrays, device=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.DispatchFloorWarning)
        prog = af.compile(list(outs) if isinstance(outs, tuple) else outs)
    res = prog(*arrays) if device is None else prog(*arrays, device=device)
    if isinstance(res, tuple):
        return tuple(np.asarray(r, np.float64) for r in res)
    return np.asarray(res, np.float64)


def as_fp16(a):
    return np.asarray(a).astype(np.float16).astype(np.float64)


def cplx(pair):
    return pair[0] + 1j * pair[1]


def complex_data(seed, n, rows=ROWS):
    rng = np.random.default_rng(seed)
    return fp16_values(rng, (rows, n)), fp16_values(rng, (rows, n))


def fft_errors(n, method, seeds=SEEDS, inverse=False):
    """Relative L2 error per seed (ROWS rows each), from one program run."""
    data = [complex_data(s, n) for s in seeds]
    a = np.concatenate([d[0] for d in data])
    b = np.concatenate([d[1] for d in data])
    x = (af.input(a.shape), af.input(b.shape))
    got = cplx(run((F.ifft if inverse else F.fft)(x, method=method), a, b))
    ref = (np.fft.ifft if inverse else np.fft.fft)(a + 1j * b)
    rows = [slice(i * ROWS, (i + 1) * ROWS) for i in range(len(seeds))]
    return [relerr(got[r], ref[r]) for r in rows]


def nodes_of(outs):
    seen, stack, order = set(), list(outs), []
    while stack:
        t = stack.pop()
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        order.append(t)
        stack.extend(t.srcs)
    return order


# ---- accuracy: 1-D ------------------------------------------------------------------------
@pytest.mark.parametrize("n", [64, 256, 1024, 2048, 4096])
def test_dense_fft_within_twice_spec_floor(n):
    errs = fft_errors(n, "dense")
    assert max(errs) < DENSE_GATE, errs


@pytest.mark.parametrize("n", [64, 256, 1024, 2048, 4096])
def test_staged_fft_two_and_three_stages_within_twice_spec(n):
    for factors in factorizations(n):
        errs = fft_errors(n, factors)
        assert max(errs) < STAGED_GATE, (factors, errs)


def test_accuracy_is_flat_in_n():
    """The wide accumulator keeps per-stage sums from compounding: from N = 64 to 4096
    (64x more terms per output) the error grows by well under sqrt(64) = 8."""
    dense = [np.mean(fft_errors(n, "dense")) for n in (64, 4096)]
    staged = [np.mean(fft_errors(n, (n // 8, 8))) for n in (64, 4096)]
    assert dense[1] / dense[0] < 1.25, dense
    assert staged[1] / staged[0] < 1.5, staged


@pytest.mark.parametrize("method", ["dense", "staged"])
@pytest.mark.parametrize("n", [100, 243, 1024])
def test_ifft_rfft_irfft(method, n):
    assert max(fft_errors(n, method, (3,), inverse=True)) < (
        DENSE_GATE if method == "dense" else STAGED_GATE
    )
    gate = DENSE_GATE if method == "dense" else STAGED_GATE
    a, _ = complex_data(4, n)
    spec = run(F.rfft(af.input(a.shape), method=method), a)
    assert spec[0].shape == (ROWS, n // 2 + 1)
    assert relerr(cplx(spec), np.fft.rfft(a)) < gate
    half = np.fft.rfft(a)  # a round trip: outputs O(1)
    hr, hi = as_fp16(half.real), as_fp16(half.imag)
    y = run(F.irfft((af.input(hr.shape), af.input(hi.shape)), n, method=method), hr, hi)
    assert y.shape == (ROWS, n)
    assert relerr(y, np.fft.irfft(hr + 1j * hi, n)) < gate


# ---- numpy conventions ------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
def test_norms_match_numpy(norm):
    a, b = complex_data(5, 96, rows=2)
    for method, gate in (("dense", DENSE_GATE), ((12, 8), STAGED_GATE)):
        x = (af.input(a.shape), af.input(b.shape))
        fwd = run(F.fft(x, norm=norm, method=method), a, b)
        assert relerr(cplx(fwd), np.fft.fft(a + 1j * b, norm=norm)) < gate
        inv = run(F.ifft(x, norm=norm, method=method), a, b)
        assert relerr(cplx(inv), np.fft.ifft(a + 1j * b, norm=norm)) < gate
        r = run(F.rfft(af.input(a.shape), norm=norm, method=method), a)
        assert relerr(cplx(r), np.fft.rfft(a, norm=norm)) < gate


def test_lengths_crop_pad_and_batch_axes_like_numpy():
    rng = np.random.default_rng(6)
    a = fp16_values(rng, (2, 3, 50))
    for n in (32, 50, 80):
        for method in ("dense", "staged"):
            out = run(F.rfft(af.input(a.shape), n, method=method), a)
            assert out[0].shape == (2, 3, n // 2 + 1)
            assert relerr(cplx(out), np.fft.rfft(a, n)) < STAGED_GATE
    spec = np.fft.rfft(a[0, 0])
    re, im = as_fp16(spec.real), as_fp16(spec.imag)
    for n in (40, 49, 51, 64):  # crop the half spectrum, odd lengths, zero-pad it
        for method in ("dense", "staged"):
            y = run(F.irfft((af.input(re.shape), af.input(im.shape)), n, method=method), re, im)
            assert relerr(y, np.fft.irfft(re + 1j * im, n)) < STAGED_GATE, (n, method)


# ---- 2-D ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 64), (256, 256)])
@pytest.mark.parametrize("method,gate", [("dense", FFT2_DENSE_GATE), ("staged", FFT2_STAGED_GATE)])
def test_fft2_ifft2(shape, method, gate):
    rng = np.random.default_rng(7)
    img = fp16_values(rng, (2, *shape))
    out = run(F.fft2(af.input(img.shape), method=method), img)
    assert relerr(cplx(out), np.fft.fft2(img)) < gate
    spec = np.fft.fft2(img)  # a round trip: outputs O(1)
    re, im = as_fp16(spec.real), as_fp16(spec.imag)
    back = run(F.ifft2((af.input(re.shape), af.input(im.shape)), method=method), re, im)
    assert relerr(cplx(back), np.fft.ifft2(re + 1j * im)) < gate
    fwd = run(F.fft2(af.input(img.shape), norm="forward", method=method), img)
    assert relerr(cplx(fwd), np.fft.fft2(img, norm="forward")) < gate


# ---- the dynamic-range walls -------------------------------------------------------------------
def test_ifft2_folds_one_over_mn_into_the_passes():
    """A constant spectrum of 300 on 256x256 is 300 times a delta. Unscaled, the row
    sums reach 256·300 = 76800 > 65504; with 1/N and 1/M on the passes nothing grows."""
    m = n = 256
    spec = np.full((m, n), 300.0)
    zeros = np.zeros((m, n))
    x = (af.input((m, n)), af.input((m, n)))
    re, im = run(F.ifft2(x), spec, zeros)
    delta = np.zeros((m, n))
    delta[0, 0] = 300.0
    assert np.isfinite(re).all() and np.isfinite(im).all()
    assert np.abs(re - delta).max() < 300 * 4 * FP16_UNIT_ROUNDOFF
    unscaled = run(F.ifft2(x, norm="forward"), spec, zeros)  # the inverse without 1/(MN)
    assert np.isinf(unscaled[0]).any()


def test_fft2_forward_norm_keeps_a_bright_image_in_range():
    ones = np.ones((256, 256))
    x = af.input(ones.shape)
    re, im = run(F.fft2(x, norm="forward"), ones)
    assert re[0, 0] == 1.0 and np.abs(re).sum() == 1.0 and np.abs(im).max() == 0.0
    assert np.isinf(run(F.fft2(x), ones)[0][0, 0])  # 65536 > 65504: the documented wall


def test_staged_intermediates_stay_within_the_output_bound():
    """Unnormalized: every intermediate <= n·max|x|; with 1/n: <= max|X|."""
    n, a = 256, 250.0  # n·a = 64000 < 65504
    x = af.input((1, n))
    out = F.fft(x, method=(16, 16))
    nodes = [t for t in nodes_of(out) if t.op not in ("input", "weight")]
    vals = run(tuple(nodes), np.full((1, n), a))
    assert all(np.isfinite(v).all() and np.abs(v).max() <= n * a for v in vals)
    assert run(out, np.full((1, n), a))[0][0, 0] == n * a
    rng = np.random.default_rng(8)
    spec = fp16_values(rng, (2, 1, n), scale=3000.0)
    xs = (af.input((1, n)), af.input((1, n)))
    inv = F.ifft(xs, method=(8, 8, 4))
    nodes = [t for t in nodes_of(inv) if t.op not in ("input", "weight")]
    peak = np.abs(spec[0] + 1j * spec[1]).max()
    for v in run(tuple(nodes), spec[0], spec[1]):
        assert np.abs(v).max() <= peak * (1 + 8 * FP16_UNIT_ROUNDOFF)


def test_convolution_prescale_defends_the_spectral_product():
    """Spectra peaking at 2048 and 512 multiply to ~1e6: without the host pre-scale the
    product is inf; convolve() scales it to <= 30000 and undoes the scale on the host."""
    rng = np.random.default_rng(9)
    x = np.ones(2048)
    h = np.ones(512)
    xi, hi = af.input(x.shape), af.input(h.shape)
    assert not np.isfinite(run(F.fft_convolve(xi, hi), x, h)).all()
    y, info = F.convolve(x, h, info=True)
    ref = np.convolve(x, h)
    assert relerr(y, ref) < CONV_DENSE_GATE
    s = float(info["scale_x"].ravel()[0] * info["scale_h"].ravel()[0])
    assert math.log2(s).is_integer() and 7500 < s * 2048 * 512 <= 30000
    xb = fp16_values(rng, (3, 1500), scale=300.0)
    hb = fp16_values(rng, (400,), scale=1000.0)
    ref = np.array([np.convolve(r, hb) for r in xb])
    for method, gate in (("dense", CONV_DENSE_GATE), ("staged", CONV_STAGED_GATE)):
        assert relerr(F.convolve(xb, hb, method=method), ref) < gate


def test_convolution_prescale_lifts_small_spectra_out_of_subnormals():
    """The lower wall: data of 1e-3 makes spectral products ~1e-4, and their 1/n-scaled
    inverse products go subnormal (below 2^-14, fewer digits). Unscaled the graph loses
    ~3e-2; the host scaling of convolve() lands the peak near 30000 instead."""
    rng = np.random.default_rng(14)
    x, h = fp16_values(rng, (2, 300), scale=1e-3), fp16_values(rng, (2, 200), scale=1e-3)
    ref = np.array([np.convolve(a, b) for a, b in zip(x, h)])
    plain = run(F.fft_convolve(af.input(x.shape), af.input(h.shape)), x, h)
    assert relerr(plain, ref) > 10 * CONV_DENSE_GATE
    assert relerr(F.convolve(x, h), ref) < CONV_DENSE_GATE


def test_fft_convolve_graph_scales():
    rng = np.random.default_rng(10)
    x, h = fp16_values(rng, (2, 60)), fp16_values(rng, (2, 20))
    xi, hi = af.input(x.shape), af.input(h.shape)
    y = run(F.fft_convolve(xi, hi, scale_x=0.5, scale_h=4.0), x, h)
    ref = 2.0 * np.array([np.convolve(a, b) for a, b in zip(x, h)])
    assert y.shape == (2, 79) and relerr(y, ref) < CONV_DENSE_GATE


def test_magnitude_and_power_walls():
    re = np.array([3000.0, 3.0, 0.0, 1e-3, -200.0])
    im = np.array([4000.0, -4.0, 0.0, 2e-3, 300.0])
    a, b = af.input(re.shape), af.input(im.shape)
    mag = run(F.magnitude(a, b), re, im)
    assert mag[0] == 5000.0 and mag[1] == 5.0 and mag[2] == 0.0
    assert np.isinf(run(af.sqrt(F.power(a, b)), re, im)[0])  # the direct form overflows
    rng = np.random.default_rng(11)
    z = fp16_values(rng, (2, 4000)) * np.exp2(rng.integers(-10, 12, (2, 4000)))
    got = run(F.magnitude(af.input((4000,)), af.input((4000,))), z[0], z[1])
    ref = np.hypot(z[0], z[1])
    assert np.max(np.abs(got - ref) / ref) < 4 * FP16_UNIT_ROUNDOFF
    p = run(F.power(a, b), re, im)
    assert p[1] == 25.0 and np.isinf(p[0])


def test_power_spectrum_with_ortho_norm():
    """The spec's 1/sqrt(N): a DC of 0.5 over 4096 samples is 2048 unscaled (power inf)
    and 32 orthonormal (power 1024)."""
    x = np.full((1, 4096), 0.5)
    xi = af.input(x.shape)
    assert np.isinf(run(F.power(*F.rfft(xi)), x)[0, 0])
    p = run(F.power(*F.rfft(xi, norm="ortho")), x)
    assert p[0, 0] == 1024.0 and np.isfinite(p).all()


# ---- structure ----------------------------------------------------------------------------------
def matmul_depth(t, memo):
    if id(t) not in memo:
        below = max((matmul_depth(s, memo) for s in t.srcs), default=0)
        memo[id(t)] = below + (t.op == "matmul")
    return memo[id(t)]


def test_only_matmuls_accumulate_and_stages_are_at_most_three():
    x = af.input((2, 4096))
    graphs = {
        "dense": F.fft(af.input((2, 256)), method="dense"),
        "staged3": F.fft(x, method=(16, 16, 16)),
        "rfft": F.rfft(x, method="staged"),
        "irfft": (F.irfft((af.input((2, 129)), af.input((2, 129))), method="staged"),),
        "fft2": F.fft2(af.input((16, 32)), method="staged"),
        "conv": (F.fft_convolve(af.input((2, 100)), af.input((30,))),),
    }
    for name, outs in graphs.items():
        ops = {t.op for t in nodes_of(outs)}
        assert ops <= LINEAR_OPS, (name, ops - LINEAR_OPS)
    memo = {}
    assert max(matmul_depth(t, memo) for t in graphs["staged3"]) == 3
    assert max(matmul_depth(t, {}) for t in graphs["dense"]) == 1
    assert max(matmul_depth(t, {}) for t in graphs["fft2"]) <= 6  # two passes of <= 3


def test_no_width_offset_slice_rides_the_crop_dma():
    outs = [
        *F.rfft(af.input((2, 1000)), method="staged"),
        F.fft_convolve(af.input((2, 300)), af.input((50,)), method="staged"),
    ]
    for t in nodes_of(outs):
        if t.op == "slice":
            assert t.attrs["begins"][-1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", CrossChipFP16Warning)
        warnings.simplefilter("ignore", af.DispatchFloorWarning)
        af.compile(outs, target="M1")


def test_complex_matmul_forms():
    rng = np.random.default_rng(12)
    ar, ai = fp16_values(rng, (3, 40)), fp16_values(rng, (3, 40))
    b = (fp16_values(rng, (40, 24)) + 1j * fp16_values(rng, (40, 24))) / 8
    xr, xi = af.input(ar.shape), af.input(ai.shape)
    four = complex_matmul((xr, xi), b, form="four")
    assert sorted(t.op for t in nodes_of(four) if t.op not in ("input", "weight")) == [
        "add",
        "matmul",
        "matmul",
        "matmul",
        "matmul",
        "sub",
    ]
    wr, wi = af.weight(b.real), af.weight(b.imag)
    literal = (xr @ wr - xi @ wi, xr @ wi + xi @ wr)  # Cre = Are@Bre - Aim@Bim, ...
    got, want = run(four, ar, ai), run(literal, ar, ai)
    assert all(np.array_equal(g, w) for g, w in zip(got, want))
    stacked = run(complex_matmul((xr, xi), b), ar, ai)
    bre, bim = as_fp16(b.real), as_fp16(b.imag)
    z = np.concatenate([ar, ai], axis=1)
    for g, w in zip(stacked, (np.vstack([bre, -bim]), np.vstack([bim, bre]))):
        assert np.all(np.abs(g - z @ w) <= matmul_error_bound(z, w))


def test_fast_path_equals_reference_interpreter():
    a, b = complex_data(13, 96, rows=2)
    out = F.fft((af.input(a.shape), af.input(b.shape)), method=(8, 4, 3))
    fast, slow = run(out, a, b), run(out, a, b, device="reference")
    assert all(np.array_equal(f, s) for f, s in zip(fast, slow))


# ---- planning -----------------------------------------------------------------------------------
def test_plan_prices_candidates_and_records_the_choice():
    small, big = F.plan(64, batch=4), F.plan(4096, batch=4)
    labels = [lab for lab, _ in big.estimates]
    assert labels == ["dense", "staged 64x64", "staged 16x16x16"]
    assert small.method == "dense"  # tie at the dispatch floor: fewer roundings win
    assert big.method == "staged" and big.factors == (64, 64)
    est = dict(big.estimates)
    assert est["dense"] > 5 * est["staged 64x64"]  # 32 MiB of DFT weights against 0.5
    x = (af.input((4, 4096)), af.input((4, 4096)))
    assert math.isclose(af.estimate(list(F.fft(x, method=(64, 64)))), est["staged 64x64"])
    auto = F.fft(x)
    shapes = {t.shape for t in nodes_of(auto) if t.op == "weight"}
    assert (128, 64) in shapes and max(s[0] for s in shapes) == 128  # 64-point stages
    assert "staged 64x64" in big.describe()
    m1 = F.plan(4096, batch=64, target="M1")
    assert m1.model == "M1" and m1.method == "staged"


def test_bad_arguments_raise_aneforge_errors():
    x = af.input((2, 16))
    with pytest.raises(OptionError):
        F.fft(x, norm="unitary")
    with pytest.raises(OptionError):
        F.fft(x, method="radix2")
    with pytest.raises(OptionError):
        F.fft(x, method=(3, 5))
    with pytest.raises(OptionError):
        F.fft(x, method=F.plan(32))
    with pytest.raises(OptionError):
        F.fft(af.input((2, 17)), method="staged")  # prime: no stages
    with pytest.raises(ShapeError):
        F.fft(np.ones(16))
    with pytest.raises(ShapeError):
        F.rfft((x, x))
    with pytest.raises(AneforgeError):
        F.fft2(af.input((16,)))
