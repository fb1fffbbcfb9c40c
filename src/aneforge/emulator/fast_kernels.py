"""Compiled kernels for hot elementwise ops, bit-identical to the ops' own emulate kernels,
and the registry of every op-by-op compiled kernel.

``FAST_KERNELS`` maps an op name to ``fn(inputs, attrs)``, which returns the op's fp16
result, or ``None`` when it does not apply (numba missing, the compiled kernel failed to
compile or its first-use check, an input it does not handle); the caller then runs the
op's own kernel. A kernel that cannot load says why once per process with a
:class:`~aneforge.emulator.gemm.FastPathWarning`. The depthwise convolution's kernel
lives with the pools' in :mod:`aneforge.emulator.plane_kernels`.

batch_norm follows :func:`aneforge.graph.ops.norm._batch_norm_emulate` step for step:
per channel ``r = fp16(rsqrt(fp16(var + fp16(eps))))`` is computed on the host exactly as
there (float64), then every element runs, in float32 on fp16-decoded values::

    y = fp16(x - mean); y = fp16(y * r); y = fp16(y * w); y = fp16(y + b)

with ``w = 1`` without a weight and ``b = -0.0`` without a bias (both leave an fp16 value's
bits unchanged, signed zeros included). fp16() is LLVM ``fptrunc float -> half`` (RNE,
subnormals, overflow to inf: NumPy's ``astype(float16)``) where numba's target does that
without library calls (see :func:`aneforge.emulator.gemm._native_half`), else the portable
integer rounding of the gemm kernel. Non-finite inputs or parameters (NaN payloads are not
reproduced) and non-finite ``r`` return ``None``.

Example:
    >>> import numpy as np
    >>> x = np.ones((1, 2, 3), np.float16)
    >>> s = np.zeros(2, np.float16)
    >>> out = FAST_KERNELS["batch_norm"]([x, s, s + 1], {"eps": 0.0})
    >>> out is None or bool((out == 1).all())
    True
"""

from __future__ import annotations

import threading

import numpy as np

from ..graph.fp16 import round_fp16
from ..graph.ops.norm import _batch_norm_emulate
from . import gemm as _gemm
from .plane_kernels import depthwise_conv_fast

# numba as the gemm module imports it (_gemm.load_numba(), on first use; None until then
# and when it cannot): one import decision for every compiled kernel, so this module
# never defines kernels on top of a gemm module that has none.
numba = llir = nbtypes = intrinsic = None

__all__ = [
    "FAST_KERNELS",
    "GENERIC_ONLY",
    "batch_norm_fast",
    "bias_add_fast",
    "depthwise_conv_fast",
]

_SERIAL_ELEMENTS = 1 << 14  # below this, waking the thread pool costs more (as PARALLEL_WORK)
_load_lock = threading.Lock()


# Set by _define_kernels once numba has imported: the compiled (parallel) _bn_kernel_py
# and _bias_kernel_py; a small problem runs them on one thread
# (gemm.parallel_launch), so no serial twin is compiled.
_h2f = _r16 = _f32_to_f16_bits = _bn_jit = _bias_jit = None


def _bn(*args, serial=False):
    """Run the compiled batch_norm kernel (:func:`_bn_kernel_py`)."""
    _gemm.parallel_launch(_bn_jit, *args, serial=serial)


def _load() -> bool:
    """Import numba through the gemm module and define this module's kernels, once;
    True when numba is there."""
    global numba, llir, nbtypes, intrinsic
    with _load_lock:
        if _gemm.load_numba() is None:
            return False
        if numba is None:
            g = _gemm
            numba, llir, nbtypes, intrinsic = g.numba, g.llir, g.nbtypes, g.intrinsic
            _define_kernels()
    return True


def _define_kernels() -> None:
    """Define the numba intrinsics and the kernels (each compiled on its first call)."""
    global _h2f, _r16, _f32_to_f16_bits, _bn_jit, _bias_jit

    # the fp16 conversions are the gemm module's intrinsics (it defined them first)
    _h2f, _r16, _f32_to_f16_bits = _gemm._h2f, _gemm._r16, _gemm._f32_to_f16_bits

    _bn_jit = _gemm.jit_kernel(_bn_kernel_py, parallel=True)
    _bias_jit = _gemm.jit_kernel(_bias_kernel_py, parallel=True)


def _bias_kernel_py(y, b, out, along_rows):
    """out[k] = fp16(y[k] + b[k % C]) for the (N*C, S) uint16 rows ``y`` and the (C,)
    float32 ``b`` holding fp16 values; with ``along_rows``, ``y`` is (N, C) and
    out[k, i] = fp16(y[k, i] + b[i]) (one value per channel and row: a linear's
    features). NumPy's fp16 add (float32 sum, one rounding; the sum of two fp16 values
    is exact in float32), branch-free inner loops so LLVM vectorizes them."""
    nblk, size = y.shape
    nc = b.shape[0]
    for k in numba.prange(nblk):
        src = y[k]
        dst = out[k]
        if along_rows:
            for i in range(size):
                dst[i] = _f32_to_f16_bits(_h2f(src[i]) + b[i])
        else:
            bc = b[k % nc]
            for i in range(size):
                dst[i] = _f32_to_f16_bits(_h2f(src[i]) + bc)


def _bn_kernel_py(x, mean, r, w, b, out, flags):
    """out[k] = batch_norm of x[k] (rows are (n, c) blocks); flags[k] = row non-finite.

    ``x``/``out`` are (N*C, S) uint16 fp16 bits; ``mean``, ``r``, ``w``, ``b`` are (C,)
    float32 holding fp16 values. Branch-free inner loop, so LLVM vectorizes it.
    """
    nblk, size = x.shape
    nc = mean.shape[0]
    for k in numba.prange(nblk):
        c = k % nc
        mc = mean[c]
        rc = r[c]
        wc = w[c]
        bc = b[c]
        src = x[k]
        dst = out[k]
        hi = np.uint16(0)
        for i in range(size):
            v = src[i]
            hi = max(hi, v & np.uint16(0x7FFF))
            y = _r16(_h2f(v) - mc)
            y = _r16(y * rc)
            y = _r16(y * wc)
            dst[i] = _f32_to_f16_bits(y + bc)
        flags[k] = hi >= np.uint16(0x7C00)


# ---- batch_norm ------------------------------------------------------------------------

_state: dict = {"ok": None, "error": None}


def _channel_params(inputs, attrs, nc):
    """(mean, r, w, b) as float32 (C,) arrays, or None if something is not handled."""
    mean, var = inputs[1], inputs[2]
    params = list(inputs[3:])
    has_w, has_b = bool(attrs.get("has_weight")), bool(attrs.get("has_bias"))
    if len(params) != int(has_w) + int(has_b):
        return None
    vecs = [mean, var, *params]
    if any(
        not isinstance(p, np.ndarray) or p.dtype != np.float16 or p.shape != (nc,) for p in vecs
    ):
        return None
    if not all(bool(np.isfinite(p).all()) for p in vecs):
        return None
    f32 = np.float32
    with np.errstate(all="ignore"):  # exactly _batch_norm_emulate's r
        eps = np.asarray(round_fp16(attrs["eps"]), dtype=np.float64)
        var64 = np.asarray(var, dtype=np.float64)
        r16 = round_fp16(1.0 / np.sqrt(np.asarray(round_fp16(var64 + eps), dtype=np.float64)))
    if not np.isfinite(r16).all():
        return None
    w = params.pop(0).astype(f32) if has_w else np.ones(nc, f32)
    b = params.pop(0).astype(f32) if has_b else np.full(nc, -0.0, f32)
    return mean.astype(f32), r16.astype(f32), w, b


def _run_batch_norm(inputs, attrs):
    """The compiled batch_norm, without the one-time check; None when not applicable."""
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.dtype != np.float16 or x.ndim < 2:
        return None
    if len(inputs) < 3:
        return None
    nc = x.shape[1]
    vecs = _channel_params(inputs, attrs, nc)
    if vecs is None:
        return None
    if x.size == 0:
        return x.copy()
    x2 = np.ascontiguousarray(x).view(np.uint16).reshape(x.shape[0] * nc, -1)
    out = np.empty(x2.shape, np.uint16)
    flags = np.empty(x2.shape[0], np.bool_)
    _bn(x2, *vecs, out, flags, serial=x.size < _SERIAL_ELEMENTS)
    if flags.any():
        return None
    return out.view(np.float16).reshape(x.shape)


def _probe():
    """A small problem: ties, subnormal results, overflow to inf, signed zeros."""
    rng = np.random.default_rng(20240612)
    nc, size = 5, 67
    x = (rng.standard_normal((2, nc, size)) * 3).astype(np.float16)
    x[0, 0, :8] = [60000, -60000, 6e-8, -6e-8, 0.0, -0.0, 65504, 1.0009765625]
    mean = (rng.standard_normal(nc) * 2).astype(np.float16)
    mean[0] = -60000
    var = np.abs(rng.standard_normal(nc) * 4).astype(np.float16)
    w = rng.standard_normal(nc).astype(np.float16)
    w[1] = 6e-5
    b = rng.standard_normal(nc).astype(np.float16)
    b[2] = 0.0
    return [x, mean, var, w, b], {"eps": 1e-5, "has_weight": True, "has_bias": True}


def _checked_once(state: dict, matches) -> bool:
    """:func:`~aneforge.emulator.gemm.checked_once` with this module's kernels."""
    return _gemm.checked_once(state, matches, _load)


def _batch_norm_matches() -> bool:
    """The compiled batch_norm gives the reference's bits at both launch sizes."""
    inputs, attrs = _probe()
    big = [np.tile(inputs[0], (1, 1, 1 + _SERIAL_ELEMENTS // 670)), *inputs[1:]]
    for case in (inputs, big):
        got = _run_batch_norm(case, attrs)
        want = _batch_norm_emulate(case, attrs)
        if got is None or not np.array_equal(got.view(np.uint16), want.view(np.uint16)):
            return False
    return True


def _ensure_batch_norm() -> bool:
    """Compile and check the kernel once (both launch sizes); True when usable."""
    return _checked_once(_state, _batch_norm_matches)


def batch_norm_fast(inputs, attrs):
    """batch_norm with the bits of ``_batch_norm_emulate``, or None when not applicable.

    ``inputs`` is ``[x, mean, var, (weight), (bias)]`` (fp16, x of shape [N, C, ...]),
    ``attrs`` holds ``eps``, ``has_weight``, ``has_bias``. When the compiled kernel
    cannot be used here (numba does not import, the kernel does not compile or does not
    match), it returns None, so the op's own kernel serves, and says why once per process
    with a :class:`~aneforge.emulator.gemm.FastPathWarning`.
    """
    if not _ensure_batch_norm():
        _gemm.warn_fallback("batch_norm", _state["error"] or "it was switched off")
        return None
    return _run_batch_norm(inputs, attrs)


# ---- a convolution's bias ---------------------------------------------------------------

_bias_state: dict = {"ok": None, "error": None}


def _run_bias_add(y, b):
    """The compiled per-channel add without the check; None when not one."""
    if not (isinstance(y, np.ndarray) and isinstance(b, np.ndarray)) or y.ndim < 2:
        return None
    c = y.shape[1]
    if y.dtype != np.float16 or b.dtype != np.float16 or b.size != c or b.ndim != y.ndim - 1:
        return None
    if any(d != 1 for d in b.shape[1:]):
        return None  # not one value per channel
    along_rows = y.size == y.shape[0] * c  # one value per channel: rows of C values
    y2 = np.ascontiguousarray(y).view(np.uint16).reshape(y.shape[0] * (1 if along_rows else c), -1)
    out = np.empty(y2.shape, np.uint16)
    b32 = b.reshape(c).astype(np.float32)
    serial = y.size < _SERIAL_ELEMENTS  # one thread: waking the pool would cost more
    _gemm.parallel_launch(_bias_jit, y2, b32, out, along_rows, serial=serial)
    return out.view(np.float16).reshape(y.shape)


def _bias_add_matches() -> bool:
    """The compiled add gives NumPy's fp16 ``y + b`` on random bits (NaN payloads, inf,
    subnormals, signed zeros) and on sums that tie, overflow or cancel."""
    rng = np.random.default_rng(20240615)
    y = rng.integers(0, 1 << 16, (2, 5, 1 + _SERIAL_ELEMENTS // 10), dtype=np.uint16)
    y = y.view(np.float16)
    y[0, :, :4] = [[65504, -0.0, 2049, 6e-8]] * 5
    b = rng.integers(0, 1 << 16, (5, 1), dtype=np.uint16).view(np.float16)
    b[:4, 0] = [65504, 0.0, 1.0, -6e-8]
    small = y[:, :, :7]  # the serial kernel
    rows = y.reshape(-1, 5, 1)[: 2 + _SERIAL_ELEMENTS // 5]  # one value per channel
    with np.errstate(all="ignore"):
        return all(
            (got := _run_bias_add(v, b)) is not None and _gemm._same_bits(got, v + b)
            for v in (y, small, rows, rows[:3])
        )


def bias_add_fast(y, b):
    """A per-channel bias add (a convolution's; a linear's, its features as channels),
    ``y + b`` in fp16 with ``b`` one value per channel (axis 1) shaped ``(C, 1, ...)``,
    compiled, with NumPy's bits; None where it does not
    apply (not one value per channel) or cannot run here (then one
    :class:`~aneforge.emulator.gemm.FastPathWarning` per process says why). The
    ``bias`` backend of :class:`~aneforge.graph.arith.Arith`.

    Example:
        >>> import numpy as np
        >>> y = np.ones((1, 2, 256, 256), np.float16)
        >>> out = bias_add_fast(y, np.array([[[0.5]], [[2.0]]], np.float16))
        >>> out is None or (float(out[0, 0, 0, 0]), float(out[0, 1, 0, 0])) == (1.5, 3.0)
        True
    """
    if not _checked_once(_bias_state, _bias_add_matches):
        _gemm.warn_fallback("bias add", _bias_state["error"] or "it was switched off")
        return None
    return _run_bias_add(y, b)


#: The compiled kernels by op name (module docstring).
FAST_KERNELS = {"batch_norm": batch_norm_fast, "conv": depthwise_conv_fast}
#: The ones valid under the generic numerics only (a chip saturates contraction outputs).
GENERIC_ONLY = frozenset({"conv"})
