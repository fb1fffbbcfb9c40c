"""The GEMM kernel's operands prepared in NumPy and plain loops: b's columns packed into
panels, and the scan that says whether magic-number product rounding may serve a call.

:func:`pack_transposed_py` is plain Python that :mod:`aneforge.emulator.gemm` compiles
with numba (this module imports neither); everything else runs as NumPy.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "TILED_MIN",
    "magnitude_top",
    "pack_panels",
    "pack_transposed_py",
    "products_stay_finite",
]

TILED_MIN = 1 << 18  # a transposed b this large is packed by the compiled tiles


def pack_panels(b16, panels, tiled=None) -> None:
    """Fill the zeroed ``panels`` (B, P, K, NR) with the columns of ``b16`` (B, K, N), NR
    columns a panel: by ``tiled`` (:func:`pack_transposed_py` compiled, None for never)
    when b is a large transposed view (its k stride the smaller), else by NumPy's copy,
    which is fast along rows.

    Example:
        >>> b = np.arange(6, dtype=np.uint16).reshape(1, 2, 3)
        >>> panels = np.zeros((1, 1, 2, 4), np.uint16)
        >>> pack_panels(b, panels)
        >>> panels[0, 0].tolist()
        [[0, 1, 2, 0], [3, 4, 5, 0]]
    """
    nb, k, n = b16.shape
    nr = panels.shape[3]
    if tiled is not None and b16.size >= TILED_MIN and 0 < b16.strides[1] < b16.strides[2]:
        bt = b16.transpose(0, 2, 1)
        if not bt.flags.c_contiguous:
            bt = np.ascontiguousarray(bt)
        bt = bt.view()  # read-only, as every caller's: one compiled specialization
        bt.flags.writeable = False
        tiled(bt, panels)
        return
    whole = n // nr
    panels[:, :whole] = b16[:, :, : whole * nr].reshape(nb, k, whole, nr).transpose(0, 2, 1, 3)
    if whole < panels.shape[1]:
        panels[:, whole, :, : n - whole * nr] = b16[:, :, whole * nr :]


def pack_transposed_py(bt, panels):
    """``panels[z, p, k, j] = bt[z, p * NR + j, k]``, zeros past the last column: the
    panels of ``b = bt^T`` for a ``bt`` (B, N, K) whose rows are contiguous along k (a
    linear layer's weights). Transposed in 16 x 16 tiles, each read along k and written
    along the panel's rows, so both stay in L1 (NumPy's copy of the ``W.T`` view reads
    one element per cache line: most of AlexNet's time)."""
    nb, n, kdim = bt.shape
    npan, nr = panels.shape[1], panels.shape[3]
    tile = np.empty((16, 16), dtype=np.uint16)
    for z in range(nb):
        for p in range(npan):
            col0 = p * nr
            width = min(nr, n - col0)
            dst = panels[z, p]
            for k0 in range(0, kdim, 16):
                for j0 in range(0, width, 16):
                    if k0 + 16 <= kdim and j0 + 16 <= width:  # whole tile: fixed trip counts
                        for j in range(16):
                            for kk in range(16):
                                tile[kk, j] = bt[z, col0 + j0 + j, k0 + kk]
                        for kk in range(16):
                            for j in range(16):
                                dst[k0 + kk, j0 + j] = tile[kk, j]
                    else:
                        for kk in range(k0, min(kdim, k0 + 16)):
                            for j in range(j0, min(width, j0 + 16)):
                                dst[kk, j] = bt[z, col0 + j, kk]
            for kk in range(kdim):
                for j in range(width, nr):
                    dst[kk, j] = 0


def magnitude_top(x16) -> int:
    """The largest fp16 magnitude (as bits, sign cleared) in the uint16 array ``x16``:
    the larger of the largest non-negative value (the int16 view's maximum) and the
    largest negative one (the uint16 maximum, which is negative when any value is). Two
    vectorized reductions, no temporary array.

    Example:
        >>> magnitude_top(np.float16([1.0, -3.0, 2.0]).view(np.uint16)) == 0x4200  # 3.0
        True
    """
    if x16.size == 0:
        return 0
    return max(int(x16.view(np.int16).max()), int(x16.max()) & 0x7FFF)


def products_stay_finite(a16, b16, top=magnitude_top) -> bool:
    """Whether every product of an element of ``a16`` with one of ``b16`` (uint16 fp16
    bits) is finite and below 65520 in magnitude: the domain of
    :func:`~aneforge.emulator.fp16_ir.magic_rounded_product`. Both operands must be
    finite and the product of their largest magnitudes (``top`` of each, by default
    :func:`magnitude_top`; exact in float64) below 65520.

    Example:
        >>> bits = lambda *v: np.float16(v).view(np.uint16)
        >>> products_stay_finite(bits(255.0, -2.0), bits(-256.0))  # 65280
        True
        >>> products_stay_finite(bits(256.0), bits(256.0))  # 65536: inf in fp16
        False
    """
    tops = np.array([top(a16), top(b16)], np.uint16)
    if tops.max() >= 0x7C00:  # an inf or NaN operand
        return False
    small, large = tops.view(np.float16).astype(np.float64)
    return bool(small * large < 65520.0)
