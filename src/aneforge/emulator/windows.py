"""A convolution's GEMM with its patches gathered straight into the kernel's panels.

:func:`gemm_windows` is the fast path's ``windows`` backend of
:class:`~aneforge.graph.arith.Arith`: ``w3 @ patches(xp)`` with the bits of
:func:`aneforge.emulator.gemm.gemm`, but the (Cin/G, kh, kw) x output-position panels the
kernel reads are filled from the padded input in one numba pass, so no patch matrix is
built and packed. The same micro-kernel then runs (:mod:`aneforge.emulator.gemm`).
"""

from __future__ import annotations

import threading

import numpy as np

from . import gemm as _gemm

__all__ = ["gemm_windows", "prepare_windows", "windows_ready"]

numba = None  # set by _load, from the gemm module's one import of it
_windows_jit = None


def _load() -> None:
    """Define the compiled packer, once (numba has imported: the caller checked)."""
    global numba, _windows_jit
    if _windows_jit is not None:
        return
    numba = _gemm.numba
    _windows_jit = _gemm.jit_kernel(_pack_windows_py, parallel=True)


def _pack_windows_py(xp, panels, geo):
    """The panels of a convolution's patches, gathered straight from its input.

    ``xp`` is the padded (N, C, Hp, Wp) input as uint16, ``panels`` (N*G, P, K, NR)
    receives for image-group z, row k = (c, i, t) of the (Cin/G, kh, kw) patch and
    column q = p * NR + j (output position (q // Wo, q % Wo)) the input cell that
    patch reads, and zeros past the last position: what packing
    ``patches[z][k, q]`` gives. ``geo`` holds ``(kh, kw, sh, sw, dh, dw, groups, ho,
    wo)``.

    Both arrays are read as flat C-order buffers with unsigned indices: a panel's
    columns are one offset table, each row one base added to it (no division per
    row), and a panel whose columns read adjacent cells (a 1x1 convolution, a
    panel inside one output row) is copied as one run that vectorizes.
    """
    nz, npan, kdim, nr = panels.shape
    kh, kw, sh, sw, dh, dw, groups, ho, wo = (
        geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6], geo[7], geo[8]
    )  # fmt: skip
    n_img, nc, hp, wp = xp.shape
    plane = hp * wp
    src = xp.reshape(n_img * nc * plane)
    dst = panels.reshape(nz * npan * kdim * nr)
    cg = nc // groups
    positions = ho * wo
    for task in numba.prange(nz * npan):
        z = task // npan
        p = task - z * npan
        img = z // groups
        g = z - img * groups
        offsets = np.empty(nr, np.uintp)  # column j's cell, from the patch row's base
        width = min(nr, positions - p * nr)
        for j in range(width):
            q = p * nr + j
            row = q // wo
            offsets[j] = row * sh * wp + (q - row * wo) * sw
        # offsets rise by at least 1 a column, so a span of nr - 1 means all steps are 1
        run = width == nr and offsets[nr - 1] - offsets[0] == nr - 1
        out = np.uintp(task * kdim * nr)
        for c in range(g * cg, g * cg + cg):
            for i in range(kh):
                for t in range(kw):
                    base = np.uintp((img * nc + c) * plane + i * dh * wp + t * dw)
                    if run:
                        first = base + offsets[0]
                        for j in range(nr):
                            dst[out + np.uintp(j)] = src[first + np.uintp(j)]
                    else:
                        for j in range(width):
                            dst[out + np.uintp(j)] = src[base + offsets[j]]
                        for j in range(width, nr):
                            dst[out + np.uintp(j)] = 0
                    out += np.uintp(nr)


_windows_state: dict = {"ok": None, "error": None}
_windows_lock = threading.Lock()


def prepare_windows(w3, x_shape, kernel, stride, dil, groups):
    """The part of :func:`gemm_windows` that depends on the weights and the padded
    input's shape only, done once: None where it declines, else ``run(xp)``, which
    gives ``gemm_windows(w3, xp, ...)``'s bits for any ``xp`` of shape ``x_shape``.
    Without the first-use check (:func:`windows_ready`)."""
    nb, m, k = w3.shape
    n_img, c = x_shape[0], x_shape[1]
    ho = (x_shape[2] - (kernel[0] - 1) * dil[0] - 1) // stride[0] + 1
    wo = (x_shape[3] - (kernel[1] - 1) * dil[1] - 1) // stride[1] + 1
    n = ho * wo
    if nb != n_img * groups or k != (c // groups) * kernel[0] * kernel[1] or ho < 1 or wo < 1:
        return None
    if _gemm._padded_work(n, m) < _gemm._TRANSPOSE_GAIN * _gemm._padded_work(m, n):
        return None  # the transposed run is better: the caller builds the patches
    mp = -(-m // _gemm._MR) * _gemm._MR
    a16 = w3.view(np.uint16)
    if mp != m or not a16.flags.c_contiguous:
        padded = np.zeros((nb, mp, k), dtype=np.uint16)
        padded[:, :m] = a16
        a16 = padded
    # what the kernel's zero skipping asks of a (a frozen weight's is remembered)
    a_top = _gemm._magnitude_top(a16) if mp >= _gemm._SKIP_MIN_ROWS else None
    npan = -(-n // _gemm._NR)
    geo = np.array([*kernel, *stride, *dil, groups, ho, wo], dtype=np.int64)

    def run(xp):
        panels = np.empty((nb, npan, k, _gemm._NR), dtype=np.uint16)
        x16 = np.ascontiguousarray(xp).view(np.uint16)
        pack = lambda: _windows_jit(x16, panels, geo)  # noqa: E731
        return _gemm._launch(a16, panels, m, n, pack, _gemm._magic_applies(a16, x16), a_top)

    return run


def _run_windows(w3, xp, kernel, stride, dil, groups):
    """:func:`gemm_windows` without the first-use check."""
    run = prepare_windows(w3, xp.shape, kernel, stride, dil, groups)
    return None if run is None else run(xp)


def _windows_matches() -> bool:
    """The gathered panels give the patches' product on a small grouped, strided,
    dilated, padded problem with two images."""
    rng = np.random.default_rng(20240614)
    x = np.pad(
        (rng.standard_normal((2, 4, 9, 11)) * 3).astype(np.float16),
        ((0, 0),) * 2 + ((1, 2), (2, 1)),
    )
    w3 = np.tile((rng.standard_normal((2, 3, 2 * 3 * 2)) * 2).astype(np.float16), (2, 1, 1))
    kernel, stride, dil, groups = (3, 2), (2, 1), (1, 2), 2
    win = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::1, ::1, ::2]
    patches = win.transpose(0, 1, 4, 5, 2, 3).reshape(4, 12, win.shape[2] * win.shape[3])
    got = _run_windows(w3, x, kernel, stride, dil, groups)
    return got is not None and _gemm._same_bits(got, _gemm.gemm_reference(w3, patches))


def gemm_windows(w3, xp, kernel, stride, dil, groups):
    """A convolution's product ``w3 @ patches(xp)`` with the bits of :func:`gemm`, its
    patches gathered straight into the kernel's panels (no patch matrix is built); the
    ``windows`` backend of :class:`~aneforge.graph.arith.Arith`. ``w3`` is the (N*G,
    Cout/G, K) fp16 weights, ``xp`` the padded NCHW fp16 input. None where it does not
    apply (a problem the transposed run serves better) or cannot run here (numba
    missing, the first-use check failed: then one ``FastPathWarning`` says why); the
    caller then builds the patches.

    Example:
        >>> import numpy as np
        >>> x = np.ones((1, 2, 10, 10), np.float16)
        >>> w3 = np.full((1, 8, 2 * 3 * 3), 0.5, np.float16)
        >>> y = gemm_windows(w3, x, (3, 3), (1, 1), (1, 1), 1)  # 8 x 8 positions
        >>> y is None or (y.shape, float(y[0, 0, 0])) == ((1, 8, 64), 9.0)
        True
    """
    if not windows_ready():
        return None
    return _run_windows(w3, xp, kernel, stride, dil, groups)


def windows_ready() -> bool:
    """Whether :func:`gemm_windows` can run here: numba loads and the gathered panels
    pass their check on a probe (both done on the first call). False (with one
    ``FastPathWarning`` per process saying why) otherwise."""
    if _windows_state["ok"] is None:
        with _windows_lock:  # not the gemm module's lock: _ensure_kernel takes that one
            if _windows_state["ok"] is None:
                try:
                    _gemm._ensure_kernel()
                    _load()
                    _windows_state["ok"] = _windows_matches()
                    if not _windows_state["ok"]:
                        _windows_state["error"] = (
                            "gathered conv panels disagree with gemm_reference"
                        )
                except Exception as exc:  # numba missing or a compile failure
                    _windows_state["ok"], _windows_state["error"] = False, exc
    if not _windows_state["ok"] and _gemm.FAST_PATH_AVAILABLE:
        _gemm.warn_fallback("conv windows", _windows_state["error"])
    return bool(_windows_state["ok"])
