"""``af.fft``: fp16 FFTs as graphs of matmuls (docs/numerics.md, "FFT").

The engine has no complex dtype, so a complex value is a pair ``(re, im)`` of fp16
tensors of one shape; functions that take a complex input accept such a pair, or a plain
Tensor for a real input. Every transform runs along the **last axis** (``fft2`` and
``ifft2`` along the last two) and returns graph tensors: compile and run them like any
graph, estimate them per target, compare them with :func:`aneforge.reference`.

How (docs/numerics.md, "FFT"):

- A DFT is a matmul against an fp16 twiddle table: the sum over the transform axis runs
  in the wide float32 accumulator and is rounded once. Complex matmuls are the straight
  four-real-matmul form (``fft_kernels.complex_matmul``); never Karatsuba and never
  ``reduce_sum``.
- ``method="dense"``: one DFT-as-matmul, O(N^2) MACs. ``method="staged"``: Cooley–Tukey
  with two or three stages, each a matmul, with an elementwise twiddle multiply between
  them, O(N·ΣN_i) MACs. ``method="auto"`` (default) asks :func:`plan`, which builds both
  graphs and keeps the one the cost model (``af.estimate``) prices lower.
- Normalization follows ``numpy.fft``: ``norm="backward"`` (default: forward
  unscaled, inverse 1/n), ``"ortho"`` (1/sqrt(n) both ways), ``"forward"`` (1/n on the
  forward transform). The factor is never a separate op: it is folded into the twiddle
  tables, split across the stages (N_i^-1 or N_i^-1/2 per stage; for ``fft2``/``ifft2``
  1/N on the row pass and 1/M on the column pass), so no intermediate is larger than
  the normalized result allows.

Range (the 65504 wall; 32752 on targets whose matmul output saturates): an unnormalized
length-n transform of data with |x| <= A is bounded by n·A, and so is every intermediate
of it (each stage's partial sum is a partial DFT; twiddles have modulus 1). Stay inside
by bounding the data (A <= 65504/n) or by choosing ``norm="ortho"`` (bound sqrt(n)·A;
the spec's 1/sqrt(N) for power spectra) or ``"forward"`` (bound A).

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics import fft as F
    >>> x = af.input((2, 64))
    >>> re, im = F.rfft(x)
    >>> re.shape
    (2, 33)
    >>> data = np.random.default_rng(0).standard_normal((2, 64))
    >>> got = af.compile([re, im])(data)
    >>> ref = np.fft.rfft(data.astype(np.float16).astype(np.float64))
    >>> bool(np.linalg.norm(got[0] + 1j * got[1] - ref) / np.linalg.norm(ref) < 1e-3)
    True
"""

from __future__ import annotations

import math

import numpy as np

from ..compiler.preflight import preflight, raise_if_blocked
from ..compiler.program import Program
from ..errors import ShapeError
from ..graph import api
from ..graph.tensor import Tensor, input, weight
from ..targets.names import resolve_target
from .fft_kernels import complex_matmul, complex_multiply
from .fft_plan import FFTPlan, check, plan, power_of, resolve, sign_of, transform

__all__ = [
    "FFTPlan",
    "complex_matmul",
    "complex_multiply",
    "convolve",
    "fft",
    "fft2",
    "fft_convolve",
    "ifft",
    "ifft2",
    "irfft",
    "magnitude",
    "plan",
    "power",
    "rfft",
    "spectral_convolve",
]

# Convolution spectra are pre-scaled so the spectral product peaks at most here.
CONV_PEAK = 30000.0
_TINY = 2.0**-24  # the smallest fp16 subnormal: magnitude's guard against 0 / 0


def _as_pair(x, what: str):
    if isinstance(x, Tensor):
        return x, None
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], Tensor):
        re, im = x
        if im is not None and (not isinstance(im, Tensor) or im.shape != re.shape):
            raise ShapeError(
                f"{what}: the (re, im) pair must be two Tensors of one shape, "
                f"got {re.shape} and {getattr(im, 'shape', type(im).__name__)}"
            )
        return re, im
    raise ShapeError(
        f"{what}: expected a Tensor or an (re, im) pair of Tensors, got {type(x).__name__}"
    )


def _crop(t, length):
    if t is None or t.shape[-1] <= length:
        return t
    return api.slice(t, (0,) * t.ndim, t.shape[:-1] + (length,))


def _one_d(x, n, kind, inverse, norm, method, form, what, real_out=False):
    """Fold the batch, crop, transform the last axis, unfold."""
    check(norm=norm, kind=kind, form=form)
    re, im = _as_pair(x, what)
    if kind == "r2c" and im is not None:
        raise ShapeError(f"{what}: takes a real Tensor, not an (re, im) pair")
    length = re.shape[-1]
    if n is None:
        n = 2 * (length - 1) if kind == "c2r" else length
    n = int(n)
    if n < 1:
        raise ShapeError(f"{what}: invalid transform length n={n}")
    keep = n // 2 + 1 if kind == "c2r" else n
    re, im = _crop(re, keep), _crop(im, keep)
    length = re.shape[-1]
    lead = re.shape[:-1]
    batch = math.prod(lead)
    re = api.reshape(re, (batch, length))
    im = None if im is None else api.reshape(im, (batch, length))
    factors = resolve(method, n, kind, batch, length, norm, form)
    out = transform(
        (re, im), n, kind, sign_of(kind, inverse), power_of(norm, kind, inverse), factors, form
    )
    shaped = tuple(None if t is None else api.reshape(t, lead + (t.shape[-1],)) for t in out)
    return shaped[0] if real_out else shaped


# ---- public transforms ---------------------------------------------------------------------
def fft(x, n=None, norm="backward", method="auto", form="stacked"):
    """Complex DFT of the last axis, like ``numpy.fft.fft``: ``X_k = Σ x_j e^(-2πi jk/n)``.

    Args:
        x: a real Tensor [..., L] or an ``(re, im)`` pair.
        n: transform length (crops or zero-pads the input like NumPy; default L).
        norm: ``'backward'`` (unscaled), ``'ortho'`` (1/sqrt(n)) or ``'forward'`` (1/n),
            folded into the twiddles.
        method: ``'auto'`` (:func:`plan`), ``'dense'``, ``'staged'``, a plan or factors.
        form: ``'stacked'`` or ``'four'`` (module ``fft_kernels``).

    Returns:
        ``(re, im)`` [..., n].

    Range: every intermediate and output is bounded by n·max|x| (backward),
    sqrt(n)·max|x| (ortho) or max|x| (forward); keep that under 65504.

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import fft
        >>> [t.shape for t in fft((af.input((3, 16)), af.input((3, 16))))]
        [(3, 16), (3, 16)]
    """
    return _one_d(x, n, "c2c", False, norm, method, form, "fft")


def ifft(x, n=None, norm="backward", method="auto", form="stacked"):
    """Inverse complex DFT of the last axis, like ``numpy.fft.ifft``.

    Same arguments as :func:`fft`; ``norm='backward'`` scales by 1/n, split as 1/N_i
    over the stages, so every intermediate is bounded by max|X| (the stage sums are
    averages) and the result too.

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import ifft
        >>> ifft((af.input((16,)), af.input((16,))))[0].shape
        (16,)
    """
    return _one_d(x, n, "c2c", True, norm, method, form, "ifft")


def rfft(x, n=None, norm="backward", method="auto", form="stacked"):
    """DFT of a real last axis, bins 0..n//2, like ``numpy.fft.rfft``.

    Dense: one matmul pair against the [L, n//2 + 1] table (half the MACs of a complex
    input). Staged: the first stage is real (two matmuls), the output is the leading
    n//2 + 1 bins of the full transform. Range: as :func:`fft`.

    Returns:
        ``(re, im)`` [..., n//2 + 1].

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import rfft
        >>> rfft(af.input((4, 100)))[1].shape
        (4, 51)
    """
    return _one_d(x, n, "r2c", False, norm, method, form, "rfft")


def irfft(x, n=None, norm="backward", method="auto", form="stacked"):
    """Real inverse of a half spectrum [..., K], like ``numpy.fft.irfft``.

    ``n`` defaults to 2(K - 1); the imaginary parts of bin 0 (and of bin n/2 for even
    n) are ignored, as in NumPy. Dense: one real-output matmul against the Hermitian-
    folded table ``c_k·e^(2πi kj/n)/n`` (c_k = 2 except bins 0 and n/2). Staged: the
    real part of the inverse of the zero-padded half spectrum weighted (1/2, 1, ..., 1/2),
    the factor 2 folded into the last stage; only the input rows that hold bins take
    part in the first stage. Range: every intermediate is bounded by max|X| with the
    default 1/n (the stage sums are weighted averages).

    Returns:
        a real Tensor [..., n].

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import irfft
        >>> irfft((af.input((4, 51)), af.input((4, 51)))).shape
        (4, 100)
    """
    return _one_d(x, n, "c2r", True, norm, method, form, "irfft", real_out=True)


def _two_d(x, inverse, norm, method, form, what):
    check(norm=norm, form=form)
    re, im = _as_pair(x, what)
    if re.ndim < 2:
        raise ShapeError(f"{what}: needs at least 2 axes, got shape {re.shape}")
    rows, cols = re.shape[-2:]
    lead = re.shape[:-2]
    batch = math.prod(lead)
    pair = tuple(None if t is None else api.reshape(t, (batch, rows, cols)) for t in (re, im))
    # Row pass (last axis, 1/N-type scale) then column pass (1/M-type scale).
    pair = _one_d(pair, cols, "c2c", inverse, norm, method, form, what)
    pair = tuple(api.transpose(t, (0, 2, 1)) for t in pair)
    pair = _one_d(pair, rows, "c2c", inverse, norm, method, form, what)
    return tuple(api.reshape(api.transpose(t, (0, 2, 1)), re.shape) for t in pair)


def fft2(x, norm="backward", method="auto", form="stacked"):
    """2-D DFT of the last two axes [..., M, N], like ``numpy.fft.fft2``.

    A row pass (length N) then a column pass (length M, through a transpose), each a
    1-D transform planned on its own. The normalization is folded into the twiddles per
    pass: ``norm='forward'`` puts 1/N on the row pass and 1/M on the column pass (bound
    max|x| everywhere), ``'ortho'`` 1/sqrt(N) and 1/sqrt(M). With the default
    ``'backward'`` (unscaled, NumPy's default) the spectrum of data bounded by A reaches
    M·N·A (a real image's DC bin is M·N·mean): keep M·N·A < 65504 or use ``'forward'``.

    Returns:
        ``(re, im)`` [..., M, N].

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import fft2
        >>> fft2(af.input((2, 8, 16)))[0].shape
        (2, 8, 16)
    """
    return _two_d(x, False, norm, method, form, "fft2")


def ifft2(x, norm="backward", method="auto", form="stacked"):
    """2-D inverse DFT of the last two axes, like ``numpy.fft.ifft2``.

    The default 1/(M·N) is never applied as one scale at the end: 1/N rides the row
    pass's twiddles and 1/M the column pass's (split again over each pass's stages), so
    every intermediate is bounded by max|X|, although the unscaled first-axis sums of a
    real spectrum would be O(M·N·max|X|).

    Example:
        >>> import aneforge as af
        >>> from aneforge.numerics.fft import ifft2
        >>> ifft2((af.input((8, 16)), af.input((8, 16))))[1].shape
        (8, 16)
    """
    return _two_d(x, True, norm, method, form, "ifft2")


# ---- magnitudes ------------------------------------------------------------------------------
def magnitude(re, im) -> Tensor:
    """``|z| = sqrt(re² + im²)`` without squaring the raw parts.

    Computed as ``hi·sqrt(1 + (lo/hi)²)`` with ``hi = max(|re|, |im|)`` and
    ``lo = min(|re|, |im|)`` (``hi`` guarded by 2^-24 so 0 gives 0). The ratio is in
    [0, 1], so every intermediate is at most |z| (2 under the root): finite whenever
    |z| <= 65504, and small parts never go subnormal. The direct form overflows once a
    part passes 255.9 (its square passes 65504) and loses digits below 2^-7 (its square
    is subnormal). Five rounded steps (abs, max and min are exact): relative error
    within about 3.5·2^-11.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.fft import magnitude
        >>> a, b = af.input((2,)), af.input((2,))
        >>> af.compile(magnitude(a, b))(np.array([3000.0, 0.0]), np.array([4000.0, 0.0]))
        array([5000.,    0.], dtype=float32)
    """
    ar, ai = api.abs(re), api.abs(im)
    hi, lo = api.maximum(ar, ai), api.minimum(ar, ai)
    r = lo / api.maximum(hi, _TINY)
    return hi * api.sqrt(r * r + 1.0)


def power(re, im) -> Tensor:
    """``|z|² = re·re + im·im`` (three fp16 ops, each rounded once).

    The output itself is the wall: it is finite only while |z| <= 255.9. For a power
    spectrum of length-n data bounded by A use ``fft(x, norm='ortho')`` (the spec's
    1/sqrt(N)): then |X|² <= n·A², and for unit-variance noise E|X|² = 1 at every n.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.numerics.fft import power
        >>> a, b = af.input((1,)), af.input((1,))
        >>> af.compile(power(a, b))(np.array([3.0]), np.array([4.0]))
        array([25.], dtype=float32)
    """
    return re * re + im * im


# ---- convolution ---------------------------------------------------------------------------
def good_size(length: int) -> int:
    """The smallest 5-smooth n >= ``length`` (so it factors into balanced stages)."""
    n = max(int(length), 1)
    while True:
        m = n
        for p in (2, 3, 5):
            while m % p == 0:
                m //= p
        if m == 1:
            return n
        n += 1


def spectral_convolve(
    X, H, n, length, scale_x=1.0, scale_h=1.0, method="auto", form="stacked"
) -> Tensor:
    """``irfft((X·scale_x)·(H·scale_h), n)[..., :length]``: the inverse of a spectral product.

    ``X`` and ``H`` are half spectra ``(re, im)`` [..., n//2 + 1] (batch axes broadcast);
    the scales are numbers (fp16 weights) or Tensors broadcastable to them (run-time
    inputs). The result is ``scale_x·scale_h`` times the circular convolution.

    Range, by construction when the host picked the scales as :func:`convolve` does
    (|X·scale_x|, |H·scale_h| <= sqrt(30000)): every product and the spectral product are
    at most 30000, and the inverse with 1/n (split over its stages) keeps every
    intermediate and the output at most 30000 (each stage sum is a weighted average).
    """
    xs = complex_multiply(_as_pair(X, "spectral_convolve"), (_scale(scale_x), None))
    hs = complex_multiply(_as_pair(H, "spectral_convolve"), (_scale(scale_h), None))
    y = irfft(complex_multiply(xs, hs), n, "backward", method, form)
    return _crop(y, length)


def _scale(s):
    return s if isinstance(s, Tensor) else weight(np.asarray(s, np.float64))


def fft_convolve(x, h, n=None, scale_x=1.0, scale_h=1.0, method="auto", form="stacked") -> Tensor:
    """Linear convolution of the last axes, ``scale_x·scale_h·(x ⊛ h)``, by FFT.

    ``x`` [..., Lx] and ``h`` [..., Lh] (batch axes broadcast) give [..., Lx + Lh - 1],
    computed as ``irfft(rfft(x, n)·scale_x · rfft(h, n)·scale_h, n)`` cropped, with
    ``n = good_size(Lx + Lh - 1)`` by default.

    The pre-scales defend the 65504 wall of the spectral product (two spectra of
    peaks P_x, P_h multiply to up to P_x·P_h). Choosing them needs the spectra's peaks,
    a host step: :func:`convolve` runs the forward transforms, measures the peaks on
    the host, picks the scales (product s = 30000/peak) and undoes them on the host.
    Range here: the forward spectra are bounded by Lx·max|x| and Lh·max|h|, then as
    :func:`spectral_convolve`.
    """
    re_x, _ = _as_pair(x, "fft_convolve")
    re_h, _ = _as_pair(h, "fft_convolve")
    length = re_x.shape[-1] + re_h.shape[-1] - 1
    n = good_size(length) if n is None else int(n)
    if n < length:
        raise ShapeError(f"fft_convolve: n={n} is shorter than the output length {length}")
    X = rfft(x, n, "backward", method, form)
    H = rfft(h, n, "backward", method, form)
    return spectral_convolve(X, H, n, length, scale_x, scale_h, method, form)


def _pow2_floor(v: np.ndarray) -> np.ndarray:
    return np.exp2(np.floor(np.log2(v)))


def convolve(x, h, n=None, method="auto", form="stacked", target=None, info=False):
    """Host driver: the linear convolution of NumPy arrays on the emulator, range-safe.

    1. Host: scale ``x`` and ``h`` by powers of two so max|x|, max|h| are in (1/2, 1]
       (exact), bounding the forward spectra by Lx and Lh.
    2. Device: the forward ``rfft`` of both (one program).
    3. Host: the peaks P_x = max|X|, P_h = max|H| per row, from the returned spectra;
       the pre-scales are ``s_x = 2^floor(log2(sqrt(30000)/P_x))`` (likewise s_h), so
       ``s = s_x·s_h`` is 30000/(P_x·P_h) rounded down to a power of two (within 4x):
       the spectral product peaks in (7500, 30000] and each scaling is exact in fp16.
    4. Device: :func:`spectral_convolve` with the scales as run-time inputs.
    5. Host: divide by s and undo step 1 (exact in float64).

    Returns:
        float64 array [..., Lx + Lh - 1]; with ``info=True`` also a dict with ``n``,
        the scales and the two programs.

    Example:
        >>> import numpy as np
        >>> from aneforge.numerics.fft import convolve
        >>> x, h = np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5])
        >>> y = convolve(x, h)
        >>> bool(np.abs(y - np.convolve(x, h)).max() < 4e-3 * np.abs(y).max())
        True
    """

    x, h = np.asarray(x, np.float64), np.asarray(h, np.float64)
    if x.ndim < 1 or h.ndim < 1 or x.shape[-1] < 1 or h.shape[-1] < 1:
        raise ShapeError(f"convolve: needs non-empty arrays, got {x.shape} and {h.shape}")
    gx, gh = _unit_scale(x), _unit_scale(h)
    length = x.shape[-1] + h.shape[-1] - 1
    n = good_size(length) if n is None else int(n)
    xi, hi = input(x.shape, name="x"), input(h.shape, name="h")
    spectra = _program(
        [*rfft(xi, n, "backward", method, form), *rfft(hi, n, "backward", method, form)],
        target,
    )
    xr, xim, hr, him = (np.asarray(a, np.float64) for a in spectra(x / gx, h / gh))
    root = math.sqrt(CONV_PEAK)
    sx = _pow2_floor(root / np.maximum(np.hypot(xr, xim).max(-1, keepdims=True), _TINY))
    sh = _pow2_floor(root / np.maximum(np.hypot(hr, him).max(-1, keepdims=True), _TINY))
    sx, sh = np.minimum(sx, 2.0**14), np.minimum(sh, 2.0**14)
    ins = [
        input(a.shape, name=nm)
        for a, nm in (
            (xr, "x_re"),
            (xim, "x_im"),
            (hr, "h_re"),
            (him, "h_im"),
            (sx, "s_x"),
            (sh, "s_h"),
        )
    ]
    y = spectral_convolve(
        (ins[0], ins[1]), (ins[2], ins[3]), n, length, ins[4], ins[5], method, form
    )
    inverse = _program([y], target)
    out = np.asarray(inverse(xr, xim, hr, him, sx, sh), np.float64) / (sx * sh) * (gx * gh)
    if info:
        return out, {"n": n, "scale_x": sx, "scale_h": sh, "programs": (spectra, inverse)}
    return out


def _program(outs, target) -> Program:
    """The Program of ``outs`` as built (fused ops only, so no optimizer pass applies),
    refused by preflight when ``target``'s family cannot run it."""
    tgt = None if target is None else resolve_target(target)
    if tgt is not None:
        raise_if_blocked(preflight(outs, tgt))
    return Program.from_outputs(outs, target=tgt)


def _unit_scale(a: np.ndarray) -> float:
    peak = float(np.max(np.abs(a)))
    return 1.0 if peak == 0 or not np.isfinite(peak) else float(2.0 ** math.ceil(math.log2(peak)))
