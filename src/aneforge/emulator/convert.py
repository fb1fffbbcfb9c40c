"""float32 arrays to fp16 in one compiled pass: a program's inputs.

NumPy's ``astype(np.float16)`` rounds element by element in software (about 3 ns an
element on a Zen 3: half a millisecond for one 224 x 224 RGB image, a thirtieth of
a small network's whole emulation), and the overflow check that follows it reads both
arrays again. :func:`to_fp16` rounds in one vectorized pass with the emulator's compiled
fp16 conversion (LLVM ``half`` where the target has it, else the portable integer
rounding; NumPy's round-to-nearest-even either way, subnormals included), keeping the
largest magnitude it wrote. Where that is an inf or a NaN (an overflow the caller warns
about, an inf or NaN fed in) it answers None and NumPy converts, as before: those
arrays are rare, and NaN payloads are NumPy's to keep.

The pass is used only once numba is loaded in the process (the emulator's first compiled
kernel loads it): a program run on the NumPy reference device never imports numba for it.

Example:
    >>> import numpy as np
    >>> got = to_fp16(np.full(5000, 0.1, np.float32))
    >>> got is None or bool(got.view(np.uint16)[0] == 0x2E66)
    True
"""

from __future__ import annotations

import threading

import numpy as np

from . import fast_kernels as _fk
from . import gemm as _gemm

__all__ = ["to_fp16"]

MIN_ELEMENTS = 4096  # below this NumPy's conversion costs less than the call
_PARALLEL_ELEMENTS = 1 << 18  # from here the pass runs on every thread
_CHUNKS_PER_THREAD = 4

_jit = None
_state: dict = {"ok": None, "error": None}
_define_lock = threading.Lock()


def _convert_py(x, out, tops):
    """out[i] = fp16 bits of float32 ``x[i]`` (flat arrays); tops[c] = the largest
    magnitude bits written in chunk c of the ``tops.size`` equal chunks (0x7C00 and up:
    an inf or a NaN). One max reduction beside the conversion: the loop vectorizes."""
    n = x.size
    chunks = tops.size
    for c in numba.prange(chunks):
        top = np.uint16(0)
        lo = c * n // chunks
        for k in range((c + 1) * n // chunks - lo):
            i = np.uintp(lo + k)  # unsigned: no wraparound check, so the loop vectorizes
            h = _gemm._f32_to_f16_bits(x[i])
            out[i] = h
            top = max(top, h & np.uint16(0x7FFF))
        tops[c] = top


numba = None  # the gemm module's, once loaded


def _define() -> None:
    global numba, _jit
    with _define_lock:
        if _jit is not None:
            return
        numba = _gemm.numba
        _jit = _gemm.jit_kernel(_convert_py, parallel=True)


def _run(arr: np.ndarray) -> tuple[np.ndarray, bool]:
    """The converted array, and whether every value is finite."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    out = np.empty(flat.size, np.uint16)
    parallel = flat.size >= _PARALLEL_ELEMENTS
    tops = np.zeros(_CHUNKS_PER_THREAD * numba.get_num_threads() if parallel else 1, np.uint16)
    _gemm.parallel_launch(_jit, flat, out, tops, serial=not parallel)
    return out.view(np.float16).reshape(arr.shape), bool(tops.max() < 0x7C00)


def _probe() -> np.ndarray:
    """Ties at every scale, the subnormal grid and below it, the overflow boundary,
    signed zeros and infinities, in a block long enough for the vector loop."""
    rng = np.random.default_rng(20261207)
    special = np.array(
        [0.0, -0.0, np.inf, -np.inf, 65504.0, 65519.996, 65520.0, -65520.0, 2.0**-24,
         2.0**-25, 3 * 2.0**-25, 2.0**-26, -(2.0**-25), 6.1e-5, 1.0 + 2.0**-11,
         1.0 + 3 * 2.0**-11, 2049.0, 2051.0, 1e-30, 3.4e38],
        np.float32,
    )  # fmt: skip
    ties = (rng.integers(1, 2048, 500) * 2 + 1).astype(np.float32) * np.float32(2.0**-11)
    ties *= (2.0 ** rng.integers(-24, 16, 500)).astype(np.float32)
    noise = (rng.standard_normal(3000) * 2.0 ** rng.integers(-30, 18, 3000)).astype(np.float32)
    return np.concatenate([special, ties, -ties, noise])


def _matches() -> bool:
    """The pass gives NumPy's bits on the probe, finite and not (where it says so)."""
    _define()
    x = _probe()
    finite = x[np.isfinite(x) & (np.abs(x) < 65520)]
    with np.errstate(over="ignore"):
        want, want_finite = x.astype(np.float16), finite.astype(np.float16)
    got, all_finite = _run(x)
    got_finite, all_finite_2 = _run(finite)
    return (
        np.array_equal(got.view(np.uint16), want.view(np.uint16))
        and np.array_equal(got_finite.view(np.uint16), want_finite.view(np.uint16))
        and not all_finite
        and all_finite_2
    )


def to_fp16(arr: np.ndarray) -> np.ndarray | None:
    """``arr`` (float32) rounded to fp16 as NumPy's ``astype`` does; None where the
    compiled pass does not serve: not float32, fewer than :data:`MIN_ELEMENTS` values,
    numba not loaded yet in this process, the pass failed its first-use check, or a
    value is (or rounds to) an inf or a NaN, which the caller's NumPy path reports.

    Example:
        >>> import numpy as np
        >>> to_fp16(np.ones(3, np.float64)) is None  # not float32
        True
    """
    if not isinstance(arr, np.ndarray) or arr.dtype != np.float32 or arr.size < MIN_ELEMENTS:
        return None
    if _gemm.numba is None:  # loaded by the emulator's first compiled kernel, not here
        return None
    if not _fk._checked_once(_state, _matches):
        _gemm.warn_fallback("input conversion", _state["error"] or "it was switched off")
        return None
    out, finite = _run(arr)
    return out if finite else None
