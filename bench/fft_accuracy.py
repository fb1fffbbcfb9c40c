"""Accuracy of af.fft on the emulator against numpy.fft, and the plan's choices.

For every length N = 64 ... 4096 and every method (dense, the most balanced two- and
three-stage Cooley–Tukey) it measures the relative L2 error ``||got - ref|| / ||ref||``
of the complex FFT, rfft, irfft, 2-D FFT (N x N up to 512) and FFT convolution over
several seeds of random normal data already representable in fp16 (so numpy.fft sees
the engine's inputs), and prints Markdown tables (docs/numerics.md, "FFT", is generated
from them). For the dense FFT it also splits the error: the fp16 rounding of the exact
output alone (the floor of any fp16 result), and the error of the graph evaluated
exactly in float64 (``af.reference``: the twiddles' fp16 quantization alone).

The last lines are machine-readable ``RESULT name=value``; the ratios compare the worst
measured error with the figures of Numerics (docs/sources.md): dense ~2.5e-4, staged
5e-4..8e-4.

Run from the repository root:

    PYTHONPATH=src python3 bench/fft_accuracy.py [--seeds 3] [--rows 4] [--max-n 4096]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
    from aneforge.numerics import fft as F
    from aneforge.numerics.fft_kernels import factorizations
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af
    from aneforge.numerics import fft as F
    from aneforge.numerics.fft_kernels import factorizations

SPEC_DENSE = 2.5e-4
SPEC_STAGED = (5e-4, 8e-4)


def q16(a):
    return np.asarray(a).astype(np.float16).astype(np.float64)


def relerr(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def run(outs, *arrays):
    prog = af.compile(list(outs) if isinstance(outs, tuple) else outs)
    res = prog(*arrays)
    if isinstance(res, tuple):
        return tuple(np.asarray(r, np.float64) for r in res)
    return np.asarray(res, np.float64)


def per_seed(got, ref, seeds, rows):
    return [
        relerr(got[i * rows : (i + 1) * rows], ref[i * rows : (i + 1) * rows]) for i in range(seeds)
    ]


def data(n, seeds, rows, salt=0):
    """Complex normal rows, fp16-representable: seeds x rows rows, one generator each."""
    re, im = [], []
    for s in range(seeds):
        rng = np.random.default_rng(1000 * salt + s)
        re.append(q16(rng.standard_normal((rows, n))))
        im.append(q16(rng.standard_normal((rows, n))))
    return np.concatenate(re), np.concatenate(im)


def methods(n):
    """Dense and the most balanced two- and three-stage factorizations."""
    return [("dense", "dense")] + [
        ("staged " + "x".join(map(str, f)), f) for f in factorizations(n)
    ]


def one_d(n, method, seeds, rows):
    """Errors (mean over seeds, max over seeds) of fft, ifft, rfft, irfft."""
    a, b = data(n, seeds, rows, salt=n)
    out = {}
    x = (af.input(a.shape), af.input(b.shape))
    got = run(F.fft(x, method=method), a, b)
    out["fft"] = per_seed(got[0] + 1j * got[1], np.fft.fft(a + 1j * b), seeds, rows)
    got = run(F.ifft(x, method=method), a, b)
    out["ifft"] = per_seed(got[0] + 1j * got[1], np.fft.ifft(a + 1j * b), seeds, rows)
    got = run(F.rfft(af.input(a.shape), method=method), a)
    out["rfft"] = per_seed(got[0] + 1j * got[1], np.fft.rfft(a), seeds, rows)
    half = np.fft.rfft(a)  # a round trip: outputs O(1)
    hr, hi = q16(half.real), q16(half.imag)
    got = run(F.irfft((af.input(hr.shape), af.input(hi.shape)), n, method=method), hr, hi)
    out["irfft"] = per_seed(got, np.fft.irfft(hr + 1j * hi, n), seeds, rows)
    return out


def budget(n, seeds, rows):
    """Dense FFT error sources: output rounding floor, twiddle quantization."""
    a, b = data(n, seeds, rows, salt=n)
    ref = np.fft.fft(a + 1j * b)
    floor = per_seed(q16(ref.real) + 1j * q16(ref.imag), ref, seeds, rows)
    x = (af.input(a.shape), af.input(b.shape))
    exact = af.reference(list(F.fft(x, method="dense")), a, b)
    twiddle = per_seed(exact[0] + 1j * exact[1], ref, seeds, rows)
    return floor, twiddle


def two_d(n, method, seeds, scale=1.0):
    imgs, spec_errs, back_errs = [], [], []
    for s in range(seeds):
        rng = np.random.default_rng(7000 + s)
        imgs.append(q16(rng.standard_normal((n, n))))
    img = np.stack(imgs)
    got = run(F.fft2(af.input(img.shape), method=method), img)
    ref = np.fft.fft2(img)
    spec = ref * scale  # scale 1: a round trip, outputs O(1)
    re, im = q16(spec.real), q16(spec.imag)
    back = run(F.ifft2((af.input(re.shape), af.input(im.shape)), method=method), re, im)
    ref_back = np.fft.ifft2(re + 1j * im)
    for s in range(seeds):
        spec_errs.append(relerr(got[0][s] + 1j * got[1][s], ref[s]))
        back_errs.append(relerr(back[0][s] + 1j * back[1][s], ref_back[s]))
    return spec_errs, back_errs


def conv(n, method, seeds, rows):
    """Linear convolution of two length-n/2 signals (FFT length n) via convolve()."""
    errs = []
    for s in range(seeds):
        rng = np.random.default_rng(9000 + s)
        x = q16(rng.standard_normal((rows, n // 2)))
        h = q16(rng.standard_normal((rows, n // 2)))
        y = F.convolve(x, h, n=n, method=method)
        ref = np.array([np.convolve(r, k) for r, k in zip(x, h)])
        errs.append(relerr(y, ref))
    return errs


def fmt(errs):
    return f"{np.mean(errs):.2e}" if errs else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=4, help="rows per seed")
    parser.add_argument("--max-n", type=int, default=4096)
    parser.add_argument("--max-2d", type=int, default=512)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", af.DispatchFloorWarning)
    sizes = [n for n in (64, 128, 256, 512, 1024, 2048, 4096) if n <= args.max_n]
    worst: dict[str, float] = {}

    def note(key, errs):
        worst[key] = max(worst.get(key, 0.0), max(errs))

    print(
        f"af.fft accuracy on the emulator vs numpy.fft: relative L2, mean over "
        f"{args.seeds} seeds x {args.rows} rows of N(0, 1) data (fp16-representable)\n"
    )
    print("| N | method | fft | ifft | rfft | irfft | conv (2 x N/2) |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        for label, method in methods(n):
            errs = one_d(n, method, args.seeds, args.rows)
            c = conv(n, method, args.seeds, args.rows)
            kind = "dense" if label == "dense" else "staged"
            for key in ("fft", "ifft", "rfft", "irfft"):
                note(f"{kind}_1d", errs[key])
            note(f"conv_{kind}", c)
            cells = " | ".join(fmt(errs[k]) for k in ("fft", "ifft", "rfft", "irfft"))
            print(f"| {n} | {label} | {cells} | {fmt(c)} |", flush=True)

    print(
        "\nDense FFT error budget (mean relative L2): the fp16 rounding of the exact "
        "output alone, the graph in exact float64 arithmetic (twiddle quantization "
        "alone), and the emulator (all roundings)\n"
    )
    print("| N | output rounding | twiddles only | emulator |")
    print("|---|---|---|---|")
    for n in sizes:
        floor, twiddle = budget(n, args.seeds, args.rows)
        full = one_d(n, "dense", args.seeds, args.rows)["fft"]
        print(f"| {n} | {fmt(floor)} | {fmt(twiddle)} | {fmt(full)} |", flush=True)

    print(
        "\n2-D (N x N), fft2 of N(0, 1) images and ifft2 of their spectra (round trip); staged "
        "is the cheaper of the two- and three-stage forms per pass\n"
    )
    print("| N x N | method | fft2 | ifft2 |")
    print("|---|---|---|---|")
    for n in [n for n in (64, 128, 256, 512) if n <= args.max_2d]:
        for label, method in (("dense", "dense"), ("staged", "staged")):
            fwd, back = two_d(n, method, args.seeds)
            note(f"{label}_2d", fwd + back)
            print(f"| {n} | {label} | {fmt(fwd)} | {fmt(back)} |", flush=True)

    print("\nThe lower wall: products below 2^-14 are subnormal and keep fewer digits\n")
    print("| case | relative L2 |")
    print("|---|---|")
    n2 = min(512, args.max_2d)
    for scale, what in ((1.0, "round trip, outputs O(1)"), (1 / n2, "spectrum / N, outputs ~1/N")):
        back = two_d(n2, "dense", args.seeds, scale)[1]
        print(f"| ifft2 dense {n2}x{n2}, {what} | {fmt(back)} |", flush=True)
    rng = np.random.default_rng(11000)
    x, h = q16(rng.standard_normal((4, 300)) * 1e-3), q16(rng.standard_normal((4, 200)) * 1e-3)
    ref = np.array([np.convolve(a, b) for a, b in zip(x, h)])
    plain = run(F.fft_convolve(af.input(x.shape), af.input(h.shape)), x, h)
    print(f"| fft_convolve graph, data ~1e-3, no pre-scale | {relerr(plain, ref):.2e} |")
    print(f"| convolve() (host pre-scale), same data | {relerr(F.convolve(x, h), ref):.2e} |")

    print("\nPlan choices (af.estimate of every candidate graph, microseconds)\n")
    print("| kind | N | batch | model | choice | dense | 2-stage | 3-stage |")
    print("|---|---|---|---|---|---|---|---|")
    for model in (None, "M1"):
        for kind in ("c2c", "r2c", "c2r"):
            for batch in (1, 1024):
                for n in sizes:
                    if model and batch == 1:
                        continue
                    p = F.plan(n, kind, batch=batch, target=model)
                    est = [f"{us:.0f} ({lab.split()[-1]})" for lab, us in p.estimates]
                    est += ["-"] * (3 - len(est))
                    print(
                        f"| {kind} | {n} | {batch} | {p.model} | {p.label} | "
                        + " | ".join(est)
                        + " |"
                    )

    print()
    for key in sorted(worst):
        print(f"RESULT fft_worst_relerr_{key}={worst[key]:.3e}")
    print(f"RESULT fft_dense_1d_vs_spec_2.5e-4={worst['dense_1d'] / SPEC_DENSE:.2f}")
    print(f"RESULT fft_staged_1d_vs_spec_8e-4={worst['staged_1d'] / SPEC_STAGED[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
