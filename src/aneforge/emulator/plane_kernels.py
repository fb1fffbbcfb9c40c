"""Compiled window kernels over one channel plane at a time: the depthwise convolution
and the pools, bit for bit the ops' own kernels under the generic numerics.

Both decode a channel's padded plane to float32 once, split into ``sh * sw`` phases
(phase (rh, ph) holds rows rh, rh + sh, ... and columns ph, ph + sw, ...), so output
(ho, j) reads tap (i, t) from phase ((i * dh) % sh, (t * dw) % sw) at row
ho + (i * dh) // sh, cell j + (t * dw) // sw: consecutive outputs read consecutive cells
of one phase at any stride. A tap is then one long run over a block of output rows laid
out on the phase's row pitch (the few cells between output rows are computed too, then
dropped), and the runs vectorize. The padding cells hold the op's fill: +0.0 for a sum,
-inf for a max.

- depthwise convolution: each output's float32 sum takes its taps in (kh, kw) order,
  padding zeros included, each product rounded to fp16, as the GEMM does; then the
  bias in fp16;
- ``avg_pool``: each window's narrow fp16 sum in (row, column) order, padding zeros
  included, divided by the count of its cells inside the input (or the whole window's
  with ``count_include_pad``) and rounded once. The count is a whole number of at most
  :data:`MAX_POOL_WINDOW` cells, an fp16 value, so float32's quotient rounds to fp16
  exactly;
- ``max_pool``: IEEE 754-2019's maximum of each window (NaN propagates, +0 wins a tie
  with -0: :func:`aneforge.graph.fp16.extreme`), which no order of the taps changes.

Each kernel compiles on first use and is checked once against the op's own kernel on a
probe (signed zeros, NaN, inf, subnormals, padding, strides); where that fails, the op's
own kernel serves and one :class:`~aneforge.emulator.gemm.FastPathWarning` says why.

Example:
    >>> import numpy as np
    >>> run = prepare_pool((1, 1, 4, 4), "max_pool", {"kernel": (2,), "stride": None, "pad": (0,)})
    >>> x = np.arange(16, dtype=np.float16).reshape(1, 1, 4, 4)
    >>> run is None or not pool_ready() or run(x)[0, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    True
"""

from __future__ import annotations

import threading

import numpy as np

from ..graph.arith import Arith
from ..graph.ops.contraction import _conv_emulate, _conv_geometry
from ..graph.ops.spatial import _pool_geometry
from ..graph.registry import get_op
from . import gemm as _gemm

__all__ = [
    "MAX_POOL_WINDOW",
    "depthwise_conv_fast",
    "depthwise_ready",
    "ieee_max",
    "ieee_min",
    "pool_ready",
    "prepare_depthwise",
    "prepare_pool",
    "serves_pool",
]

#: The largest window an average pool runs here: its counts stay fp16 values.
MAX_POOL_WINDOW = 2048
_BLOCK = 2048  # cells a tap's run covers: 8 KiB of float32, in L1 with its plane
_load_lock = threading.Lock()

# numba and the kernels, set by _load once numba has imported (None until then);
# ieee_max / ieee_min, the compiled forms of _ieee_max_py / _ieee_min_py, are also the
# generated kernels' reduction steps (kernel.jitlib's rmax / rmin)
numba = None
_h2f = _r16 = _f32_to_f16_bits = _phases = _decode = _dw_jit = _pool_jit = None
ieee_max = ieee_min = None


def _load() -> bool:
    """Import numba through the gemm module and define this module's kernels, once;
    True when numba is there."""
    global numba, _h2f, _r16, _f32_to_f16_bits, _phases, _decode, _dw_jit, _pool_jit
    global ieee_max, ieee_min
    with _load_lock:
        if _gemm.load_numba() is None:
            return False
        if numba is None:
            g = _gemm
            _h2f, _r16, _f32_to_f16_bits = g._h2f, g._r16, g._f32_to_f16_bits
            helper = g.numba.njit(inline="always", nogil=True)
            _phases, _decode = helper(_column_phases_py), helper(_decode_py)
            ieee_max, ieee_min = helper(_ieee_max_py), helper(_ieee_min_py)
            _dw_jit = g.jit_kernel(_dw_kernel_py, parallel=True)
            _pool_jit = g.jit_kernel(_pool_kernel_py, parallel=True)
            numba = g.numba
    return True


def _ieee_max_py(a, b):
    """IEEE 754-2019 maximum of two floats: NaN propagates, +0 wins a tie with -0."""
    r = a if (a > b or a != a) else b  # one select: NaN in a kept, NaN in b fails the test
    if a == 0 and b == 0:
        r = a + b  # -0 only when both are -0
    return r


def _ieee_min_py(a, b):
    """IEEE 754-2019 minimum of two floats: NaN propagates, -0 wins a tie with +0."""
    r = a if (a < b or a != a) else b
    if a == 0 and b == 0:
        r = -(-a - b)  # +0 only when both are +0
    return r


def _column_phases_py(wd, left, sw, pitch):
    """Per column phase ph: its first cell inside the input, how many follow, and the
    input column of the first (the same on every row, so no division per row)."""
    cells = np.zeros((sw, 3), np.int64)
    for ph in range(sw):
        s0 = 0 if ph >= left else (left - ph + sw - 1) // sw
        s1 = min(pitch, (wd - 1 + left - ph) // sw + 1) if wd - 1 + left >= ph else 0
        cells[ph, 0], cells[ph, 1], cells[ph, 2] = s0, max(0, s1 - s0), s0 * sw + ph - left
    return cells


def _decode_py(src, plane, line, cells, top, hp, sh, sw, tall, pitch):
    """Write the (H, W) fp16 bits ``src`` into its phases of ``plane`` as float32 (the
    padding cells keep what they hold); ``line`` is (W,) scratch."""
    h, wd = src.shape
    r_first, r_last = max(0, top), min(hp, top + h)  # the padded rows that hold input
    # input column 0 lies in column phase p0, whose cells start at c0; column 1 in the
    # other phase (stride 2), whose cells start at c1
    p0 = 0
    for ph in range(sw):
        if cells[ph, 2] == 0:
            p0 = ph
    c0, c1 = np.uintp(cells[p0, 0]), np.uintp(cells[1 - p0, 0]) if sw == 2 else np.uintp(0)
    # unsigned indices throughout: no wraparound checks, so the runs vectorize
    rh, q = r_first % sh, r_first // sh  # padded row r is row q of row phase rh
    for r in range(r_first, r_last):
        row = src[r - top]
        if sw == 1:  # one column phase: decoded straight into it
            at = np.uintp((rh * tall + q) * pitch + cells[0, 0])
            u0 = np.uintp(cells[0, 2])
            for k in range(cells[0, 1]):
                plane[at + np.uintp(k)] = _h2f(row[u0 + np.uintp(k)])
        else:
            for u in range(wd):  # decoded in one contiguous pass, then dealt
                line[np.uintp(u)] = _h2f(row[np.uintp(u)])
        if sw == 2:  # both phases in one loop, whose paired loads LLVM vectorizes
            even = np.uintp(((rh * 2 + p0) * tall + q) * pitch) + c0
            odd = np.uintp(((rh * 2 + 1 - p0) * tall + q) * pitch) + c1
            for k in range(wd // 2):
                g = np.uintp(k)
                plane[even + g] = line[g + g]
                plane[odd + g] = line[g + g + np.uintp(1)]
            if wd % 2:
                plane[even + np.uintp(wd // 2)] = line[np.uintp(wd - 1)]
        elif sw > 2:
            for ph in range(sw):
                at = np.uintp(((rh * sw + ph) * tall + q) * pitch + cells[ph, 0])
                u0 = np.uintp(cells[ph, 2])
                for k in range(cells[ph, 1]):
                    plane[at + np.uintp(k)] = line[u0 + np.uintp(k * sw)]
        rh += 1
        if rh == sh:
            rh, q = 0, q + 1


def _dw_kernel_py(x, w, bias, geo, out):
    """Depthwise convolution under the matmul contract, a chunk of image channels per
    task (module docstring).

    ``x`` is the (N, C, H, W) input as uint16 fp16 bits, ``w`` the (C, kh, kw) taps and
    ``bias`` (C,) as float32 holding fp16 values, ``geo`` ``(sh, sw, dh, dw, bias, top,
    left, Hp, Wp, chunks)``: strides, dilations, 1 when there is a bias, the zero padding
    before the rows and columns, the padded size and the number of tasks; ``out``
    (N, C, Ho, Wo) uint16.
    """
    n, c, ho_n, wo_n = out.shape
    wd = x.shape[3]
    kh, kw = w.shape[1], w.shape[2]
    sh, sw, dh, dw, has_bias = geo[0], geo[1], geo[2], geo[3], geo[4]
    top, left, hp, wp = geo[5], geo[6], geo[7], geo[8]
    pitch = (wp + sw - 1) // sw  # cells per row of one phase
    tall = (hp + sh - 1) // sh  # rows of one phase
    block = max(1, _BLOCK // pitch)  # output rows a run covers
    cells = _phases(wd, left, sw, pitch)
    chunks = geo[9]  # a task takes a chunk of channels, so its buffers are allocated once
    for chunk in numba.prange(chunks):
        plane = np.zeros(sh * sw * tall * pitch, np.float32)  # the padding cells stay +0.0
        line = np.empty(wd, np.float32)
        acc = np.empty(block * pitch, np.float32)
        for task in range(chunk * (n * c) // chunks, (chunk + 1) * (n * c) // chunks):
            z = task // c
            ch = task - z * c
            _decode(x[z, ch], plane, line, cells, top, hp, sh, sw, tall, pitch)
            for r0 in range(0, ho_n, block):
                rows = min(block, ho_n - r0)
                span = (rows - 1) * pitch + wo_n
                for f in range(span):
                    acc[np.uintp(f)] = np.float32(0.0)
                for i in range(kh):
                    rh = (i * dh) % sh
                    q = r0 + (i * dh) // sh  # the phase row output row r0 reads
                    for t in range(kw):
                        wv = w[ch, i, t]
                        ph = rh * sw + (t * dw) % sw
                        base = np.uintp((ph * tall + q) * pitch + (t * dw) // sw)
                        for f in range(span):
                            g = np.uintp(f)
                            acc[g] = acc[g] + _r16(plane[base + g] * wv)
                # -0.0 without a bias: adding it leaves every value's bits, -0.0 included
                bc = bias[ch] if has_bias else np.float32(-0.0)
                for r in range(rows):
                    dst = out[z, ch, r0 + r]
                    at = np.uintp(r * pitch)
                    for j in range(wo_n):
                        dst[np.uintp(j)] = _f32_to_f16_bits(_r16(acc[at + np.uintp(j)]) + bc)


def _pool_kernel_py(x, geo, row_counts, col_counts, out):
    """max_pool or avg_pool of channel planes, a chunk of planes per task (module
    docstring).

    ``x`` is the (P, H, W) input as uint16 fp16 bits, ``out`` (P, Ho, Wo) uint16, ``geo``
    ``(kh, kw, sh, sw, top, left, Hp, Wp, average, chunks)``. An average divides output
    (ho, j) by ``row_counts[ho] * col_counts[j]``: how many of its window's rows and
    columns lie inside the input (float32 whole numbers; the kernel's extents with
    ``count_include_pad``).
    """
    planes, ho_n, wo_n = out.shape
    wd = x.shape[2]
    kh, kw, sh, sw = geo[0], geo[1], geo[2], geo[3]
    top, left, hp, wp = geo[4], geo[5], geo[6], geo[7]
    average, chunks = geo[8] != 0, geo[9]
    pitch = (wp + sw - 1) // sw
    tall = (hp + sh - 1) // sh
    block = max(1, _BLOCK // pitch)
    cells = _phases(wd, left, sw, pitch)
    fill = np.float32(0.0) if average else np.float32(-np.inf)  # what the padding holds
    for chunk in numba.prange(chunks):
        plane = np.full(sh * sw * tall * pitch, fill, np.float32)
        line = np.empty(wd, np.float32)
        acc = np.empty(block * pitch, np.float32)
        for task in range(chunk * planes // chunks, (chunk + 1) * planes // chunks):
            _decode(x[task], plane, line, cells, top, hp, sh, sw, tall, pitch)
            for r0 in range(0, ho_n, block):
                rows = min(block, ho_n - r0)
                span = (rows - 1) * pitch + wo_n
                for f in range(span):  # a sum starts at +0.0, a max at -inf
                    acc[np.uintp(f)] = fill
                for i in range(kh):
                    q = r0 + i // sh
                    for t in range(kw):
                        base = np.uintp((((i % sh) * sw + t % sw) * tall + q) * pitch + t // sw)
                        if average:
                            for f in range(span):
                                g = np.uintp(f)
                                acc[g] = _r16(acc[g] + plane[base + g])
                        else:
                            for f in range(span):
                                g = np.uintp(f)
                                acc[g] = ieee_max(acc[g], plane[base + g])
                for r in range(rows):
                    dst = out[task, r0 + r]
                    at = np.uintp(r * pitch)
                    if average:
                        per_row = row_counts[r0 + r]
                        for j in range(wo_n):
                            u = np.uintp(j)
                            dst[u] = _f32_to_f16_bits(acc[at + u] / (per_row * col_counts[u]))
                    else:
                        for j in range(wo_n):
                            dst[np.uintp(j)] = _f32_to_f16_bits(acc[at + np.uintp(j)])


def _chunks(tasks: int) -> int:
    """How many tasks a launch deals its planes into: a few per thread, for balance."""
    return min(tasks, 8 * _gemm.numba.get_num_threads())


# ---- depthwise convolution -------------------------------------------------------------

_dw_state: dict = {"ok": None, "error": None}


def prepare_depthwise(x_shape, w, bias, attrs):
    """The part of the compiled depthwise convolution that depends on the weights and
    the input's shape only, done once: None where it does not apply (not a depthwise
    2-D convolution of fp16 weights), else ``run(x)``, the result for any fp16 ``x`` of
    shape ``x_shape``. ``bias`` is None or the (C,) bias. Without the first-use check
    (:func:`depthwise_conv_fast` makes it)."""
    if not isinstance(w, np.ndarray) or len(x_shape) != 4 or w.ndim != 4:
        return None
    n, c = x_shape[0], x_shape[1]
    if w.dtype != np.float16 or attrs.get("groups", 1) != c or c < 2 or w.shape[:2] != (c, 1):
        return None
    shapes = [tuple(x_shape), w.shape] + ([np.shape(bias)] if bias is not None else [])
    nd, stride, pad, dil, kern, _ = _conv_geometry("conv", shapes, attrs)
    (top, bottom), (left, right) = pad
    hp, wp = x_shape[2] + top + bottom, x_shape[3] + left + right
    ho = (hp - (kern[0] - 1) * dil[0] - 1) // stride[0] + 1
    wo = (wp - (kern[1] - 1) * dil[1] - 1) // stride[1] + 1
    if ho < 1 or wo < 1 or 0 in x_shape:
        return None
    b32 = np.zeros(c, np.float32) if bias is None else np.asarray(bias).astype(np.float32)
    taps = np.ascontiguousarray(w.reshape(c, *kern).astype(np.float32))
    fixed = [*stride, *dil, int(bias is not None), top, left, hp, wp]

    def run(x):
        geo = np.array([*fixed, _chunks(n * c)], np.int64)
        out = np.empty((n, c, ho, wo), np.uint16)
        x16 = np.ascontiguousarray(x).view(np.uint16)
        _gemm.parallel_launch(_dw_jit, x16, taps, b32, geo, out)
        return out.view(np.float16)

    return run


def _run_depthwise(inputs, attrs):
    """The compiled depthwise convolution without the check; None when not one."""
    x = inputs[0]
    if not isinstance(x, np.ndarray) or x.ndim != 4 or x.dtype != np.float16:
        return None
    bias = inputs[2] if len(inputs) == 3 else None
    run = prepare_depthwise(x.shape, inputs[1], bias, attrs)
    return None if run is None else run(x)


def _dw_probe():
    """Padding, stride 2, dilation, a bias; ties, subnormal products, inf and NaN."""
    rng = np.random.default_rng(20240613)
    x = (rng.standard_normal((2, 3, 9, 11)) * 4).astype(np.float16)
    x[0, 0, 0, :4] = [np.inf, -0.0, 6e-8, np.nan]
    w = (rng.standard_normal((3, 1, 3, 2)) * 2).astype(np.float16)
    w[1, 0, 0, 0] = 1.5
    b = rng.standard_normal(3).astype(np.float16)
    attrs = {"groups": 3, "stride": (2, 2), "dilation": (1, 2), "pad": (1, 1, 2, 0)}
    return [x, w, b], attrs


def _depthwise_matches() -> bool:
    inputs, attrs = _dw_probe()
    want = _conv_emulate(inputs, attrs, Arith.generic(_gemm.gemm_reference))
    got = _run_depthwise(inputs, attrs)
    return got is not None and _gemm._same_bits(got, np.asarray(want, np.float16))


def depthwise_ready() -> bool:
    """Whether the compiled depthwise kernel can run here (compiled and checked on the
    first call); False, with one ``FastPathWarning`` per process saying why, else."""
    if not _gemm.checked_once(_dw_state, _depthwise_matches, _load):
        _gemm.warn_fallback("depthwise conv", _dw_state["error"] or "it was switched off")
        return False
    return True


def depthwise_conv_fast(inputs, attrs):
    """A depthwise ``conv`` (groups = channels, one output channel each, NCHW) with the
    bits of the op's own kernel under the generic numerics, or None when it is not one
    or the compiled kernel cannot be used here (then one
    :class:`~aneforge.emulator.gemm.FastPathWarning` per process says why)."""
    if attrs.get("groups", 1) < 2 or not depthwise_ready():
        return None
    return _run_depthwise(inputs, attrs)


# ---- pools -----------------------------------------------------------------------------

_pool_state: dict = {"ok": None, "error": None}


def _inside(size, kern, stride, pad, out) -> np.ndarray:
    """Per output position along one axis, how many of its window's cells lie inside
    an input of ``size`` (the rest are padding), as float32."""
    start = np.arange(out) * stride - pad
    return (np.minimum(start + kern, size) - np.maximum(start, 0)).astype(np.float32)


def prepare_pool(x_shape, op, attrs):
    """The compiled ``max_pool`` or ``avg_pool`` (``op``) of an (N, C, W) or (N, C, H, W)
    input of shape ``x_shape``, its geometry worked out once: ``run(x)``, the op's fp16
    result for any fp16 ``x`` of that shape, or None where it does not apply (another
    op, an empty input, an average over more than :data:`MAX_POOL_WINDOW` cells).
    Without the first-use check (:func:`pool_ready` makes it).

    Raises :class:`~aneforge.errors.ShapeError` for attributes the op refuses.
    """
    if op not in ("max_pool", "avg_pool") or len(x_shape) not in (3, 4) or 0 in x_shape:
        return None
    nd, kern, stride, pad, out = _pool_geometry(op, x_shape, attrs)
    if nd == 1:  # a row of one plane
        kern, stride, pad, out = (1, *kern), (1, *stride), ((0, 0), *pad), (1, *out)
    average = op == "avg_pool"
    if average and kern[0] * kern[1] > MAX_POOL_WINDOW:
        return None
    n, c, *spatial = x_shape
    h, wd = (1, *spatial) if nd == 1 else spatial
    (top, bottom), (left, right) = pad
    fixed = [*kern, *stride, top, left, h + top + bottom, wd + left + right, int(average)]
    if average and not attrs.get("count_include_pad", False):
        rows = _inside(h, kern[0], stride[0], top, out[0])
        cols = _inside(wd, kern[1], stride[1], left, out[1])
    else:
        rows = np.full(out[0], kern[0], np.float32)
        cols = np.full(out[1], kern[1], np.float32)
    shape = (n, c, out[1]) if nd == 1 else (n, c, *out)

    def run(x):
        geo = np.array([*fixed, _chunks(n * c)], np.int64)
        planes = np.ascontiguousarray(x, np.float16).view(np.uint16).reshape(n * c, h, wd)
        result = np.empty((n * c, *out), np.uint16)
        _gemm.parallel_launch(_pool_jit, planes, geo, rows, cols, result)
        return result.view(np.float16).reshape(shape)

    return run


def _pool_probes():
    """Pools with padding, strides, both counts and a 1-D one, on signed zeros, NaN, inf,
    subnormals and values whose window sums round."""
    rng = np.random.default_rng(20261207)
    x = (rng.standard_normal((2, 3, 9, 11)) * 3).astype(np.float16)
    x[0, 0, :2, :6] = [
        [np.inf, -0.0, 0.0, -0.0, 6e-8, np.nan],
        [-np.inf, 0.0, -0.0, -0.0, -6e-8, 1],
    ]
    x[1, 2] = np.where(x[1, 2] > 0, np.float16(-0.0), np.float16(0.0))
    base = {"stride": None, "pad": (0,), "count_include_pad": False}
    every = {**base, "kernel": (3, 2), "stride": (2,), "pad": (1,), "count_include_pad": True}
    return [
        (x, "max_pool", {**base, "kernel": (3,), "stride": (2,), "pad": (1,)}),
        (x, "max_pool", {**base, "kernel": (2, 3), "stride": (1, 2)}),
        (x, "avg_pool", {**base, "kernel": (3,), "stride": (1,), "pad": (1,)}),
        (x, "avg_pool", every),
        (x[:, :, 0], "avg_pool", {**base, "kernel": (4,), "stride": (3,), "pad": (2,)}),
    ]


def _pools_match() -> bool:
    for x, op, attrs in _pool_probes():
        run = prepare_pool(x.shape, op, attrs)
        want = np.asarray(get_op(op).emulate([x], attrs), np.float16)
        if run is None or not _gemm._same_bits(run(x), want):
            return False
    return True


def pool_ready() -> bool:
    """Whether the compiled pool kernel can run here (compiled and checked on the first
    call); False, with one ``FastPathWarning`` per process saying why, else.

    Example:
        >>> isinstance(pool_ready(), bool)
        True
    """
    if not _gemm.checked_once(_pool_state, _pools_match, _load):
        _gemm.warn_fallback("pool", _pool_state["error"] or "it was switched off")
        return False
    return True


def serves_pool(op, x_shape, attrs) -> bool:
    """Whether the compiled pool kernel runs ``op`` on an input of ``x_shape``: it
    applies (:func:`prepare_pool`), and numba is there and the kernel has not failed
    to compile or its check (it compiles on its first run, not here)."""
    if _gemm.NUMBA_IMPORT_ERROR is not None or _pool_state["ok"] is False:
        return False
    return prepare_pool(x_shape, op, attrs) is not None
