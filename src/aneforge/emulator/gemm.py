"""The emulator's matmul: fp16 products, a float32 accumulator, one final fp16 rounding.

For ``a`` of shape (B, M, K) and ``b`` of shape (B, K, N), both float16, every output is::

    S = +0.0f
    for k in 0, 1, ..., K-1:                   # ascending, one product at a time
        S = fp32(S + fp16(a[z, i, k] * b[z, k, j]))
    C[z, i, j] = fp16(S)

where fp16() and fp32() round to nearest, ties to even, keep subnormals and overflow to
+-inf; NaN and inf propagate as in IEEE 754. The exact product of two fp16 values fits in
a float32, so fp16(float32(x) * float32(y)) is the correctly rounded fp16 product.

Three entry points share that contract bit for bit:

- :func:`gemm_reference`: plain NumPy, a Python loop over k. It is the oracle.
- :func:`gemm_fast`: a numba kernel. The operands are zero-padded to whole output tiles
  (4 x 24, 4 x 32 with AVX512-FP16, 4 x 64 with other AVX-512: :func:`_choose_tile`;
  padding only ever feeds padded outputs, which are dropped), and every tile goes
  through one register-blocked micro-kernel written as LLVM vector IR. Each thread owns
  whole tiles and walks k in ascending order (k-blocks only split the walk, the float32
  sums are carried across them), so threading changes nothing. A narrow problem may run
  transposed, C^T = B^T A^T, which has the same products (IEEE multiplication commutes)
  added in the same order. Where ``a`` holds no inf or NaN, a panel row of b that is all
  zeros (a ReLU's output, often) is left out: its products are zeros, and a float32 sum
  that starts at +0.0 never becomes -0.0 in round-to-nearest, so adding a zero leaves it
  unchanged. The tile itself is :mod:`aneforge.emulator.micro_tile`.
- :func:`gemm`: ``gemm_fast`` when numba works here, else ``gemm_reference``.

How the product rounding is generated depends on the target numba compiles for:

- native: the fp16 bits are reinterpreted as LLVM ``half``, multiplied with ``fmul half``
  (IEEE: the correctly rounded fp16 product) and widened with ``fpext`` before the float32
  ``fadd``. x86 with AVX512-FP16 runs this as vmulph + vcvtph2psx; with F16C only, or on
  AArch64 without FP16 arithmetic, LLVM promotes the multiply to float32 and rounds back,
  which is exact for the same reason as above. Used on x86-64 with F16C and on AArch64.
- portable: integer and float32 operations only (fp16 bits -> float32 by bit surgery, an
  exact float32 product, round-to-fp16-grid by bit surgery). Used everywhere else, since
  without F16C LLVM would call ``__extendhfsf2``/``__truncsfhf2``, which numba's JIT
  cannot resolve (LLVM aborts the process). ``ANEFORGE_EMU_GEMM_PORTABLE=1`` forces it.
- magic numbers, on x86 with AVX-512 but not AVX512-FP16: the product is rounded by
  float32 arithmetic alone (:func:`~aneforge.emulator.fp16_ir.magic_rounded_product`,
  which proves it exact), with no conversion instruction, when a NumPy scan of the
  operands shows that no product can reach 65520 or meet an inf or NaN
  (:func:`_magic_applies`); other calls take the fp16 format's rounding above.

No fast-math flags are ever set, so LLVM may not fuse the rounded product into the add
nor reorder the sum (the magic rounding's one FMA is an explicit ``llvm.fma``). numba is
imported on the first call that needs the kernel (:func:`load_numba`), never by ``import
aneforge``. On first use the compiled kernel is checked against the reference on small
built-in problems (both product paths); a mismatch or compile failure disables it.
Whatever keeps the fast path from loading (numba does not import, the kernel does not
compile or does not match), :func:`gemm` serves every call from the reference and says
why once per process with a :class:`FastPathWarning`.

Example:
    >>> import numpy as np
    >>> from aneforge.emulator.gemm import gemm
    >>> a = np.full((1, 1, 4096), 1.0, np.float16)
    >>> b = np.ones((1, 4096, 1), np.float16)
    >>> float(gemm(a, b)[0, 0, 0])  # an fp16 accumulator would stall at 2048
    4096.0
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings
from typing import NamedTuple

import numpy as np

from ..errors import FastPathWarning
from . import fp16_ir
from . import panels as panels_mod
from .gemm_oracle import check_operands as _check_operands
from .gemm_oracle import gemm_reference
from .micro_tile import make_tile
from .operand_memo import MEMO

__all__ = ["FAST_PATH_AVAILABLE", "FastPathWarning", "gemm", "gemm_fast", "gemm_reference"]

# numba is imported once for every compiled kernel of the emulator, by load_numba() on
# the first call that needs a kernel (importing it costs a third of a second, which
# `import aneforge` and `aneforge --help` need not pay). fast_kernels takes it from this
# module, so the two can never disagree about whether it loaded.
numba = llir = nbtypes = intrinsic = None
_numba_lock = threading.Lock()
_numba_tried = False  # load_numba() has run its one import attempt


def _first_line(exc) -> str:
    """``"Type: first line of the message"`` of an exception (or a plain string)."""
    if isinstance(exc, str):
        return exc
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"


def _find_numba() -> str | None:
    """Why numba cannot be imported when that is already known without importing it (it
    is not installed, or an import hook refuses it), else None."""
    try:
        found = importlib.util.find_spec("numba") is not None
    except Exception as exc:  # a finder that raises: the import would fail the same way
        return _first_line(exc)
    return None if found else "ModuleNotFoundError: No module named 'numba'"


#: Why numba could not be imported (``"ImportError: ..."``), or None while it has not
#: failed (it is imported on the first call that needs a compiled kernel).
NUMBA_IMPORT_ERROR: str | None = _find_numba()

#: True while :func:`gemm` may use the compiled kernel: numba is installed and neither its
#: import (on first use), the kernel's compile nor its first-use check against the
#: reference has failed. Set to False when one of them does.
FAST_PATH_AVAILABLE: bool = NUMBA_IMPORT_ERROR is None


def load_numba():
    """Import numba and define the compiled kernels, once per process; the numba module,
    or None when it cannot be imported (:data:`NUMBA_IMPORT_ERROR` says why).

    Example:
        >>> load_numba() is None or NUMBA_IMPORT_ERROR is None
        True
    """
    global numba, llir, nbtypes, intrinsic, _numba_tried
    global NUMBA_IMPORT_ERROR, FAST_PATH_AVAILABLE
    with _numba_lock:
        if not _numba_tried:
            _numba_tried = True
            if NUMBA_IMPORT_ERROR is None:
                try:
                    import numba as nb
                    from llvmlite import ir
                    from numba.core import types
                    from numba.extending import intrinsic as intr
                except Exception as exc:  # optional: without it the reference serves
                    NUMBA_IMPORT_ERROR = _first_line(exc)
                    FAST_PATH_AVAILABLE = False
                else:
                    numba, llir, nbtypes, intrinsic = nb, ir, types, intr
                    _define_kernels()
    return numba if NUMBA_IMPORT_ERROR is None else None


_check_lock = threading.Lock()  # guards the one-time compile and check of every kernel


def checked_once(state: dict, matches, load) -> bool:
    """Whether a compiled kernel is usable: on the first call run ``load()`` (True when
    numba imported and the kernel's module defined its kernels) and ``matches()`` (True
    when the kernel gives the reference's bits on its probe), keep the answer in
    ``state`` (``"ok"``, and ``"error"`` saying why not) and return it."""
    if state["ok"] is not None:
        return state["ok"]
    with _check_lock:
        if state["ok"] is None:
            ok = False
            try:
                if not load():
                    raise RuntimeError(f"numba could not be imported ({NUMBA_IMPORT_ERROR})")
                ok = bool(matches())
                if not ok:
                    state["error"] = "the compiled kernel disagrees with the reference"
            except Exception as exc:  # compile failure: the op's own kernel serves
                state["error"] = exc
            state["ok"] = ok
    return state["ok"]


_warn_lock = threading.Lock()
_warned: set[str] = set()  # the causes already warned about in this process


def warn_fallback(kernel: str, error) -> None:
    """Say once per process that ``kernel``'s compiled code cannot be used, and why.

    ``error`` is the exception (or text) that disabled it. When numba itself did not
    import, one warning covers every kernel, since they all fall back for that reason.
    """
    if NUMBA_IMPORT_ERROR is not None:
        key = "numba"
        msg = (
            f"aneforge's compiled emulator kernels are disabled: numba could not be "
            f"imported ({NUMBA_IMPORT_ERROR}); the NumPy reference interpreter runs every "
            "program instead, with the same bits, only slower. Fix: install or repair "
            "numba (pip install 'numba>=0.58'), or use device='reference' to choose that path"
        )
    else:
        key = kernel
        msg = (
            f"aneforge's compiled {kernel} kernel is disabled: {_first_line(error)}; the "
            f"NumPy reference {kernel} serves every call instead, with the same bits, only "
            "slower. Fix: report it with the output of `numba -s`; "
            f"{_PORTABLE_ENV}=1 selects the portable code generation"
        )
    with _warn_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(msg, FastPathWarning, stacklevel=3)


# Micro-kernel geometry: _MR rows x (_NV vectors of _VW lanes) columns of float32
# accumulators held in registers while k runs over one k-block. _VW and _NV depend on the
# vector registers of the CPU numba compiles for (:func:`_choose_tile`, run before any
# kernel compiles); these are the values without AVX-512.
_MR = 4
_VW = 8
_NV = 3
_NR = _NV * _VW  # output columns per panel
_KC = 256  # k-block: one packed b panel block is _KC * _NR * 2 bytes (L1-sized)
_MC = 64  # rows per task (a multiple of _MR)
_PC = 8  # panels (of _NR columns) per task

# Problems below this many multiply-adds run on one thread: waking the thread pool for a
# tiny product costs milliseconds on a loaded machine (the result is the same either way:
# each output's k order does not depend on the threads). Measured on 2 cores (AVX2,
# models run alternately in one process): 2^20 ran ShuffleNet and SqueezeNet 10-15 %
# faster than 2^22 and ResNet-50 3 %; 2^18 was no faster than 2^20.
_SERIAL_WORK = 1 << 20
_SKIP_MIN_ROWS = 16  # rows of a from which the kernel looks for rows of zeros in b
_NOT_SIGNS = np.uint64(0x7FFF_7FFF_7FFF_7FFF)  # four fp16 values without their signs
_TRANSPOSE_GAIN = 0.75  # run C^T = B^T A^T when its padded work is below this share
_PORTABLE_ENV = "ANEFORGE_EMU_GEMM_PORTABLE"
_FORCE_PORTABLE = os.environ.get(_PORTABLE_ENV, "") not in ("", "0")


# ---- code generation helpers ---------------------------------------------------------


def _native_half(context) -> bool:
    """Whether the target numba compiles for does half<->float without library calls."""
    if _FORCE_PORTABLE:
        return False
    try:
        triple, _cpu, features = context.codegen().magic_tuple()
    except Exception:
        return False
    arch = str(triple).split("-", 1)[0].lower()
    if arch in ("x86_64", "amd64"):
        return "+f16c" in str(features).split(",")
    return arch in ("aarch64", "arm64")


# ---- numba intrinsics and kernels -----------------------------------------------------

# Set by _define_kernels once numba has imported; _jit is the compiled _kernel_py.
_h2f = _r16 = _f32_to_f16_bits = _micro_tile = _jit = _micro_tile_magic = _pack_jit = None
_edge_tile = _edge_tile_magic = _micro_list = _micro_list_magic = None
_edge_list = _edge_list_magic = None  # the tiles that take a list of k's
_F32_ROWS = False  # the tile reads float32 rows of a (set by _choose_tile)
_MAGIC = False  # products rounded by fp16_ir.magic_rounded_product (set by _choose_tile)
_A_SCALE = np.float32(fp16_ir.MAGIC_SCALE)
_SUM_SCALE = np.float32(1.0)  # what the tile's sums are multiplied by before rounding


def _kernel(a, panels, out, magic=False, skip_zeros=False):
    """Run the compiled kernel (:func:`_kernel_py`) on tasks of :func:`_task_shape`;
    load_numba() must have succeeded."""
    tasks = _task_shape(a.shape[0], a.shape[1], panels.shape[1])
    _jit(a, panels, panels.view(np.uint64), out, *tasks, magic, skip_zeros)


def _task_shape(nb, mp, npan) -> tuple[int, int]:
    """Rows and panels per task: :data:`_MC` x :data:`_PC`, smaller (rows first) when
    that leaves fewer than four tasks per thread, so no thread idles on a small problem.
    The split changes no sum: each output's k order is the same in any task."""
    threads = numba.get_num_threads()
    mc, pc = _MC, _PC
    while nb * -(-mp // mc) * -(-npan // pc) < 4 * threads:
        if mc > 4 * _MR:
            mc //= 2
        elif pc > 1:
            pc //= 2
        else:
            break
    return mc, pc


def _codegen_features() -> str:
    """The CPU features numba compiles for: what its cache key holds (numba's
    ``CPUCodegen.magic_tuple``), ``NUMBA_CPU_FEATURES`` or the host's."""
    from llvmlite import binding
    from numba.core import config

    return config.CPU_FEATURES or binding.get_host_cpu_features().flatten()


class _Tile(NamedTuple):
    """How the micro-kernel is generated for one CPU (:func:`_choose_tile`)."""

    vw: int  # float32 lanes per vector
    nv: int  # vectors per tile row: the tile is _MR x (nv * vw) outputs
    magic: bool  # products rounded by magic numbers when the operands allow it
    f32_rows: bool  # a's rows converted to float32 once per task, not per k


def _choose_tile(features: str) -> _Tile:
    """The tile for a CPU with LLVM feature string ``features``.

    - AVX-512 without AVX512-FP16 (32 zmm registers; Zen 4, Skylake-X, Ice Lake): 4 x 16
      lanes, magic rounding
      (:func:`~aneforge.emulator.fp16_ir.magic_rounded_product`). On a 2-core Zen 4 it
      ran 1024^3 at 24.4 GMAC/s and ResNet-50 in 241 ms, against 21.0 and 300 ms for 2 x
      16 lanes through the conversions, whose two instructions take twice the vector
      pipes' time of a plain operation there.
    - AVX512-FP16: 2 x 16 lanes, the native ``half`` multiply (``vmulph``).
    - otherwise 3 x 8 lanes (AVX2's 16 ymm registers: 12 accumulators, 3 b vectors and a
      broadcast; measured 15.0 against 12.1 GMAC/s for 2 x 16 on a Zen 3), through the
      conversions: magic rounding's constants and temporaries do not fit beside them.

    ``f32_rows`` unless the CPU multiplies ``half`` natively (AVX512-FP16, AArch64's
    FP16 arithmetic): the broadcast operand is then read as float32, with no conversion
    per k. The 3 x 8 tile on a Zen 4 ran 1024^3 at 22.6-23.1 GMAC/s with it, against
    19.8-20.5 without. Every choice gives the same bits: each output's k order does not
    depend on it.

    Example:
        >>> tuple(_choose_tile("+avx2,+f16c,+fma"))
        (8, 3, False, True)
        >>> tuple(_choose_tile("+avx2,+avx512f,+f16c,+fma"))
        (16, 4, True, True)
    """
    flags = set(features.split(","))
    f32_rows = not ({"+avx512fp16", "+fullfp16"} & flags)
    if "+avx512f" not in flags:
        return _Tile(8, 3, False, f32_rows)
    if "+avx512fp16" in flags or "+fma" not in flags:
        return _Tile(16, 2, False, f32_rows)
    return _Tile(16, 4, True, f32_rows)


def _define_kernels() -> None:
    """Define the numba intrinsics and the kernel (lazily compiled on its first call).

    Run once, by :func:`load_numba`, after numba imported. The tile is chosen first, from
    the features numba's cache key holds, so a cached kernel always has this process's
    tile."""
    global _h2f, _r16, _f32_to_f16_bits, _micro_tile, _micro_tile_magic, _jit, _pack_jit
    global _edge_tile, _edge_tile_magic, _micro_list, _micro_list_magic, _edge_list
    global _edge_list_magic
    global _VW, _NV, _NR, _MAGIC, _SUM_SCALE, _F32_ROWS
    _VW, _NV, _MAGIC, _F32_ROWS = _choose_tile(_codegen_features())
    _NR = _NV * _VW
    _SUM_SCALE = np.float32(1.0 / fp16_ir.MAGIC_SCALE if _MAGIC else 1.0)

    @intrinsic
    def _h2f(typingctx, bits):
        """Exact float32 value of fp16 ``bits`` (uint16)."""
        if bits != nbtypes.uint16:
            return None

        def codegen(context, builder, signature, args):
            if _native_half(context):
                return builder.fpext(builder.bitcast(args[0], llir.HalfType()), llir.FloatType())
            return fp16_ir.bits_to_f32(builder, args[0])

        return nbtypes.float32(nbtypes.uint16), codegen

    @intrinsic
    def _r16(typingctx, x):
        """float32 ``x`` rounded to fp16 (RNE, subnormals, overflow to inf), as float32."""
        if x != nbtypes.float32:
            return None

        def codegen(context, builder, signature, args):
            if _native_half(context):
                half = builder.fptrunc(args[0], llir.HalfType())
                return builder.fpext(half, llir.FloatType())
            return fp16_ir.round_to_f16_grid(builder, args[0])

        return nbtypes.float32(nbtypes.float32), codegen

    @intrinsic
    def _f32_to_f16_bits(typingctx, x):
        """uint16 bits of fp16(x) for a float32 x (RNE, subnormals, overflow to inf)."""
        if x != nbtypes.float32:
            return None

        def codegen(context, builder, signature, args):
            if _native_half(context):
                half = builder.fptrunc(args[0], llir.HalfType())
                return builder.bitcast(half, llir.IntType(16))
            return fp16_ir.f16_grid_to_bits(builder, fp16_ir.round_to_f16_grid(builder, args[0]))

        return nbtypes.uint16(nbtypes.float32), codegen

    def tile(magic, f32_rows, nv=_NV, listed=False):
        """The micro-kernel (:func:`~aneforge.emulator.micro_tile.make_tile`) over the
        first ``nv`` vectors of a panel (1 for a last panel whose real columns fit one
        vector), over a range of k's or a list of them (``listed``)."""
        return make_tile(
            _MR, _VW, nv, magic=magic, f32_rows=f32_rows, listed=listed, native_half=_native_half
        )

    _micro_tile = tile(False, _F32_ROWS)
    _micro_tile_magic = tile(True, True) if _MAGIC else _micro_tile
    _edge_tile = tile(False, _F32_ROWS, 1)
    _edge_tile_magic = tile(True, True, 1) if _MAGIC else _edge_tile
    _micro_list = tile(False, _F32_ROWS, listed=True)
    _micro_list_magic = tile(True, True, listed=True) if _MAGIC else _micro_list
    _edge_list = tile(False, _F32_ROWS, 1, listed=True)
    _edge_list_magic = tile(True, True, 1, listed=True) if _MAGIC else _edge_list

    _jit = jit_kernel(_kernel_py, parallel=True)
    _pack_jit = jit_kernel(panels_mod.pack_transposed_py)


def jit_kernel(fn, parallel: bool = False):
    """``fn`` as a numba kernel (nogil; ``parallel`` for prange), its machine code cached
    on disk across processes (not under the portable switch, whose code differs); without
    a writable cache location, compiled once per process instead. load_numba() must have
    succeeded."""
    try:
        return numba.njit(parallel=parallel, nogil=True, cache=not _FORCE_PORTABLE)(fn)
    except Exception:  # no writable cache location: compile per process instead
        return numba.njit(parallel=parallel, nogil=True)(fn)


def _kernel_py(a, panels, words, out, mc, pc, magic, skip_zeros):
    """out[z, :M, :N] = fp16 bits of a[z] @ b[z] under the contract.

    ``a`` is (B, Mp, K) uint16 with Mp a multiple of _MR; ``panels`` (B, P, K, _NR)
    uint16 holds b's columns in P zero-padded panels, ``words`` the same memory as
    uint64; ``out`` is (B, M, N) uint16. A task
    owns ``mc`` rows (a multiple of _MR) by ``pc`` panels. ``magic`` (only honoured where
    the CPU's tile has _MAGIC) rounds products by magic numbers, for operands whose
    products all stay below 65520 (:func:`_magic_applies`). With ``skip_zeros`` (``a``
    holds no inf or NaN) a panel row of zeros is left out: its products are zeros, and
    adding a zero never changes a sum that starts at +0.0 (in round-to-nearest no such
    sum is ever -0.0), so the bits are the same.
    """
    nb, mp, kdim = a.shape
    npan = panels.shape[1]
    m, n = out.shape[1], out.shape[2]
    row_blocks = (mp + mc - 1) // mc
    col_chunks = (npan + pc - 1) // pc
    per_batch = row_blocks * col_chunks
    scale = _SUM_SCALE if _MAGIC and magic else np.float32(1.0)
    # each panel's k's with a nonzero row, ascending, and where each k-block starts in
    # that list; without skip_zeros every k-block runs whole and no list is made
    blocks = (kdim + _KC - 1) // _KC
    ks = np.empty((nb, npan, kdim if skip_zeros else 0), dtype=np.int32)
    starts = np.empty((nb, npan, blocks + 1), dtype=np.int64)
    for zp in range(nb * npan):  # serial: a parallel loop would double the compile time
        z = zp // npan
        p = zp - z * npan
        live = 0
        for blk in range(blocks):
            starts[z, p, blk] = live
            if not skip_zeros:
                live = min(kdim, blk * _KC + _KC)
                continue
            for k in range(blk * _KC, min(kdim, blk * _KC + _KC)):
                ks[z, p, live] = k  # branch-free: a zero row's k is overwritten
                row = np.uint64(0)  # the row's bits, four fp16 values a word
                for j in range(words.shape[3]):
                    row |= words[z, p, k, j]
                live += (row & _NOT_SIGNS) != 0
        starts[z, p, blocks] = live
    for task in numba.prange(nb * per_batch):
        # a task owns padded rows [i0, i1) x panels [p0, p1) of one batch entry
        z = task // per_batch
        rb = (task - z * per_batch) // col_chunks
        ch = task - z * per_batch - rb * col_chunks
        i0 = rb * mc
        i1 = min(mp, i0 + mc)
        p0 = ch * pc
        p1 = min(npan, p0 + pc)
        az = a[z]
        rows_f32 = _F32_ROWS or (_MAGIC and magic)
        af = np.empty((2, i1 - i0, kdim if rows_f32 else 0), dtype=np.float32)
        if rows_f32:  # the task's rows of a as float32 (and scaled, for magic rounding)
            for r in range(i1 - i0):
                for kk in range(kdim):
                    af[0, r, kk] = _h2f(az[i0 + r, kk])
            if _MAGIC and magic:
                for r in range(i1 - i0):
                    for kk in range(kdim):
                        af[1, r, kk] = af[0, r, kk] * _A_SCALE
        acc = np.zeros((i1 - i0, (p1 - p0) * _NR), dtype=np.float32)  # sums, from +0.0
        # k-blocks ascend, and each tile carries its float32 sums from one to the next
        for k0 in range(0, kdim, _KC):
            k1 = min(kdim, k0 + _KC)
            for p in range(p0, p1):
                pz = panels[z, p]
                jc = (p - p0) * _NR
                n0, n1 = starts[z, p, k0 // _KC], starts[z, p, k0 // _KC + 1]
                kz = ks[z, p]
                whole = n1 - n0 == k1 - k0  # no zero row: the k-block runs as a range
                edge = n - p * _NR <= _VW  # a last panel whose real columns fit one vector
                for i in range(i0, i1, _MR):
                    if _MAGIC and magic:
                        if edge and whole:
                            _edge_tile_magic(af, pz, acc, i - i0, i - i0, jc, k0, k1)
                        elif edge:
                            _edge_list_magic(af, pz, acc, i - i0, i - i0, jc, kz, n0, n1)
                        elif whole:
                            _micro_tile_magic(af, pz, acc, i - i0, i - i0, jc, k0, k1)
                        else:
                            _micro_list_magic(af, pz, acc, i - i0, i - i0, jc, kz, n0, n1)
                    elif _F32_ROWS:
                        if edge and whole:
                            _edge_tile(af, pz, acc, i - i0, i - i0, jc, k0, k1)
                        elif edge:
                            _edge_list(af, pz, acc, i - i0, i - i0, jc, kz, n0, n1)
                        elif whole:
                            _micro_tile(af, pz, acc, i - i0, i - i0, jc, k0, k1)
                        else:
                            _micro_list(af, pz, acc, i - i0, i - i0, jc, kz, n0, n1)
                    elif edge and whole:
                        _edge_tile(az, pz, acc, i, i - i0, jc, k0, k1)
                    elif edge:
                        _edge_list(az, pz, acc, i, i - i0, jc, kz, n0, n1)
                    elif whole:
                        _micro_tile(az, pz, acc, i, i - i0, jc, k0, k1)
                    else:
                        _micro_list(az, pz, acc, i, i - i0, jc, kz, n0, n1)
        # round the real (unpadded) outputs to fp16 (magic sums scaled back: exact)
        j0 = p0 * _NR
        j1 = min(n, p1 * _NR)
        for r in range(min(i1, m) - i0):
            dst = out[z, i0 + r, j0:j1]
            src = acc[r]
            for j in range(j1 - j0):
                dst[j] = _f32_to_f16_bits(src[j] * scale)


# ---- the fast path --------------------------------------------------------------------


_lock = threading.Lock()  # guards the one-time compile and check
_launch_lock = threading.Lock()
_state: dict = {"ready": False, "error": None}


def _padded_work(m, n):
    """Multiply-adds the kernel spends on an M x N output: rows padded to whole tiles,
    columns to whole panels, but a last panel whose real columns fit one vector only to
    that vector (it runs the one-vector tile)."""
    full, rest = divmod(n, _NR)
    cols = full * _NR + (0 if rest == 0 else _VW if rest <= _VW else _NR)
    return -(-m // _MR) * _MR * cols


def _run_kernel(a, b, nb, m, k, n):
    """gemm_fast without the checks: pick the orientation, pad, pack, run the kernel."""
    # the transposed run pays two transposing copies: worth it only for a clear saving
    if _padded_work(n, m) < _TRANSPOSE_GAIN * _padded_work(m, n):
        # C^T = B^T A^T: the same products (multiplication commutes) in the same k order
        out_t = _run_oriented(b.transpose(0, 2, 1), a.transpose(0, 2, 1), nb, n, k, m)
        return np.ascontiguousarray(out_t.transpose(0, 2, 1))
    return _run_oriented(a, b, nb, m, k, n)


def _run_oriented(a, b, nb, m, k, n):
    mp = -(-m // _MR) * _MR
    a16 = a.view(np.uint16)
    if mp != m or not a16.flags.c_contiguous:
        padded = np.zeros((nb, mp, k), dtype=np.uint16)  # zero rows only feed dropped rows
        padded[:, :m] = a16
        a16 = padded
    b16 = b.view(np.uint16)
    panels = MEMO.get(b16, ("panels", _NR), _packed)  # a weight's: packed once
    return _launch(a16, panels, m, n, None, _magic_applies(a16, b16))


def _packed(b16):
    """``b16`` (B, K, N) as zero-padded panels of _NR columns, each (K, _NR) row-major."""
    nb, k, n = b16.shape
    panels = np.zeros((nb, -(-n // _NR), k, _NR), dtype=np.uint16)
    panels_mod.pack_panels(b16, panels, _pack_jit)
    return panels


def _magic_applies(a16, b16) -> bool:
    """Whether this call's products are rounded by magic numbers: the CPU's tile does
    (_MAGIC) and no product of ``a16`` and ``b16`` can reach 65520 or meet an inf or NaN
    (:func:`~aneforge.emulator.panels.products_stay_finite`; a weight's scan is
    remembered). Otherwise the products go through the fp16 format, with the same bits."""
    return _MAGIC and panels_mod.products_stay_finite(a16, b16, _magnitude_top)


def _magnitude_top(x16) -> int:
    """:func:`~aneforge.emulator.panels.magnitude_top` of ``x16``, a weight's remembered."""
    return MEMO.get(x16, "top", panels_mod.magnitude_top)


def _launch(a16, panels, m, n, pack=None, magic=False, a_top=None):
    """Run the kernel on padded ``a16`` and ``panels`` (first filled by ``pack()`` when
    given) into a new (B, m, n) fp16 array; ``magic`` as :func:`_magic_applies` says;
    ``a_top``, when given, is ``_magnitude_top(a16)``."""
    nb, mp, k = a16.shape
    npan = panels.shape[1]
    out = np.empty((nb, m, n), dtype=np.uint16)
    # no inf or NaN in a: zero rows add nothing; with few rows the scan would cost more
    if mp >= _SKIP_MIN_ROWS and a_top is None:
        a_top = _magnitude_top(a16)
    skip_zeros = mp >= _SKIP_MIN_ROWS and a_top < 0x7C00
    # always a read-only view: the kernel only reads a, and one array type means one
    # compiled specialization (a program's weights are read-only, padded copies are not)
    a16 = a16.view()
    a16.flags.writeable = False
    small = nb * mp * npan * _NR * k < _SERIAL_WORK  # threads cost more than they save

    def run():
        if pack is not None:
            pack()
        _kernel(a16, panels, out, magic, skip_zeros)

    parallel_launch(run, serial=small)
    return out.view(np.float16)


def parallel_launch(fn, *args, serial: bool = False):
    """``fn(*args)``, a call of numba parallel kernels, one at a time in the process (not
    every numba threading layer accepts concurrent launches from several threads); on
    one thread when ``serial`` (waking the pool for a small problem costs more than it
    saves). Results never depend on it. load_numba() must have succeeded."""
    with _launch_lock:
        threads = numba.get_num_threads()
        if serial and threads > 1:
            numba.set_num_threads(1)
        try:
            return fn(*args)
        finally:
            if serial and threads > 1:
                numba.set_num_threads(threads)


def _same_bits(x, y) -> bool:
    """Equal shapes and bits, every NaN equal to every NaN."""
    if x.shape != y.shape:
        return False
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    return bool(
        np.array_equal(nan_x, nan_y)
        and np.array_equal(x.view(np.uint16)[~nan_x], y.view(np.uint16)[~nan_y])
    )


def _probe_problems():
    """Two small problems with padded rows and columns, two k-blocks, ties and
    subnormals; the second also has a product that overflows and an inf operand, so
    where the tile rounds by magic numbers (the first) both product paths are checked."""
    rng = np.random.default_rng(20240611)
    m, k, n = _MR + 3, _KC + 9, _NR + 5
    a = rng.standard_normal((1, m, k)).astype(np.float16)
    b = (rng.standard_normal((1, k, n)) * 4).astype(np.float16)
    odd = rng.integers(512, 683, k) * 2 + 1  # odd significands 1025..1365
    a[0, 0, :] = (odd / 1024.0 * 2.0 ** rng.integers(-16, 8, k)).astype(np.float16)
    b[0, :, 0] = 1.5  # odd significand * 1.5 (< 2048) lands exactly on an fp16 tie
    a[0, 1, :8] = np.float16(6e-8)  # subnormal operands
    a2, b2 = a.copy(), b.copy()
    a2[0, 2, 3], b2[0, 3, :] = 2.0**14, 4.0  # 65536: inf, whatever follows
    a2[0, 4, 5] = np.inf
    return [(a, b), (a2, b2)]


def _ensure_kernel():
    """Compile and check the kernel once; raise RuntimeError if it cannot be used."""
    global FAST_PATH_AVAILABLE
    if _state["ready"]:
        return
    with _lock:
        if _state["ready"]:
            return
        if _state["error"] is None:
            try:
                if load_numba() is None:
                    raise RuntimeError(f"numba could not be imported ({NUMBA_IMPORT_ERROR})")
                for a, b in _probe_problems():
                    got = _run_kernel(a, b, *_check_operands(a, b))
                    if not _same_bits(got, gemm_reference(a, b)):
                        raise RuntimeError("compiled kernel disagrees with gemm_reference")
                _state["ready"] = True
                return
            except Exception as exc:  # a compile failure or a mismatch: disable, keep why
                _state["error"] = exc
                FAST_PATH_AVAILABLE = False
        err = _state["error"]
    raise RuntimeError(f"gemm fast path unavailable: {_first_line(err)}") from err


def gemm_fast(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Compiled batched fp16 matmul, bit-identical to :func:`gemm_reference`.

    Same arguments, result and errors as :func:`gemm_reference` (ValueError on wrong dtypes
    or shapes). The first call compiles the kernel (or loads numba's on-disk cache) and
    checks it; raises RuntimeError when numba is missing or the kernel cannot be used.

    Example:
        >>> import numpy as np
        >>> a = np.full((2, 3, 5), 0.5, np.float16)
        >>> b = np.full((2, 5, 4), 3.0, np.float16)
        >>> gemm_fast(a, b)[1]
        array([[7.5, 7.5, 7.5, 7.5],
               [7.5, 7.5, 7.5, 7.5],
               [7.5, 7.5, 7.5, 7.5]], dtype=float16)
    """
    dims = _check_operands(a, b)
    _ensure_kernel()
    return _run_kernel(a, b, *dims)


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched fp16 matmul under the emulator contract, by the fastest working backend.

    Uses :func:`gemm_fast` when numba is available and its kernel passed the first-use
    check, else :func:`gemm_reference`, with one :class:`FastPathWarning` per process
    saying why (numba does not import, or the kernel failed to compile or to match).
    Both give the same bits.

    Example:
        >>> import numpy as np
        >>> a = np.array([[[1.0, 2.0]]], np.float16)
        >>> b = np.array([[[3.0], [4.0]]], np.float16)
        >>> gemm(a, b)
        array([[[11.]]], dtype=float16)
    """
    dims = _check_operands(a, b)
    if FAST_PATH_AVAILABLE:
        try:
            _ensure_kernel()
        except RuntimeError:
            pass  # disabled now; warned about below
        else:
            return _run_kernel(a, b, *dims)
    warn_fallback("gemm", _state["error"] or "FAST_PATH_AVAILABLE was set to False")
    return gemm_reference(a, b)
