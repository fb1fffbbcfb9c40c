"""The scalar helpers compiled region kernels call: fp16 <-> float32 and the roundings.

Generated kernels (:mod:`aneforge.kernel.codegen`) hold every value in float32: an fp16
value is exact there, and so is a float32 accumulator. They call:

- ``h2f(bits)``: the float32 value of fp16 ``bits`` (uint16);
- ``f2h(x)``: the fp16 bits of float32 ``x`` rounded to nearest, ties to even;
- ``r16(x)``: float32 ``x`` rounded to fp16, as float32;
- ``r16d(d)``: float64 ``d`` rounded to fp16 once (through float32 rounded to odd,
  which keeps the rounding exact: 24 >= 11 + 2 bits), as float32;
- ``vmax(a, b)`` / ``vmin(a, b)``: NumPy's ``maximum`` / ``minimum`` of two scalars,
  NaN propagating, and on equal operands (``-0.0`` vs ``+0.0``) the operand NumPy
  returns on this machine (:func:`numpy_tie_modes` probes it; the modes are constants
  of the generated source): the elementwise ops, which the emulator runs in float64;
- ``rmax(a, b)`` / ``rmin(a, b)``: one step of a max / min reduction (amax, amin,
  max_pool), IEEE 754-2019's ``maximum`` / ``minimum`` as
  :func:`aneforge.graph.fp16.extreme` defines it: NaN propagating, +0 winning a max's
  tie with -0 and -0 a min's, so the order of the terms does not matter. They are the
  pool kernel's own (:mod:`aneforge.emulator.plane_kernels`).

The fp16 conversions are those of the emulator's compiled kernels
(:mod:`aneforge.emulator.fast_kernels`: LLVM ``half`` where the target converts without
library calls, else the portable integer code). Nothing here imports numba until
:func:`load` runs; generated modules call it at import.

Example:
    >>> from aneforge.kernel.jitlib import numpy_tie_modes
    >>> sorted(numpy_tie_modes())
    ['max', 'min']
"""

from __future__ import annotations

import threading

import numpy as np

from ..emulator import fast_kernels as _fk
from ..emulator import gemm as _gemm
from ..emulator import plane_kernels as _pk

__all__ = ["TIE_MODES", "load", "numpy_tie_modes"]

#: What a tie mode returns for equal operands: the first, the second, +0.0 or -0.0.
TIE_MODES = ("first", "second", "positive", "negative")

h2f = f2h = r16 = r16d = vmax = vmin = rmax = rmin = None
_lock = threading.Lock()
_loaded = False


def numpy_tie_modes() -> dict[str, int]:
    """Which operand ``np.maximum`` / ``np.minimum`` of two float64 scalars return when
    they compare equal (``-0.0`` and ``+0.0``), as an index into :data:`TIE_MODES`.

    Raises RuntimeError when NumPy's answers fit no mode (or NaN does not propagate):
    a compiled kernel cannot reproduce them, so none is built.
    """
    neg, pos = np.float64(-0.0), np.float64(0.0)
    modes = {}
    for name, fn in (("max", np.maximum), ("min", np.minimum)):
        got = (np.signbit(fn(neg, pos)), np.signbit(fn(pos, neg)))
        table = {(False, True): 1, (True, False): 0, (False, False): 2, (True, True): 3}
        nan = np.float64(np.nan)
        if not (np.isnan(fn(nan, pos)) and np.isnan(fn(pos, nan))):
            raise RuntimeError(f"np.{fn.__name__} does not propagate NaN here")
        modes[name] = table[tuple(bool(g) for g in got)]
    return modes


def load() -> bool:
    """Import numba (through the emulator's one import decision) and define the
    helpers, once; False when numba is not available here."""
    global h2f, f2h, r16, r16d, vmax, vmin, rmax, rmin, _loaded
    with _lock:
        if _loaded:
            return True
        if not (_fk._load() and _pk._load()):
            return False
        numba, llir, nbtypes, intrinsic = _gemm.numba, _gemm.llir, _gemm.nbtypes, _gemm.intrinsic
        h2f, r16, f2h = _fk._h2f, _fk._r16, _fk._f32_to_f16_bits

        @intrinsic
        def f32_bits(typingctx, x):
            """The bits of float32 ``x`` as an int64 (zero-extended)."""
            if x != nbtypes.float32:
                return None

            def codegen(context, builder, signature, args):
                raw = builder.bitcast(args[0], llir.IntType(32))
                return builder.zext(raw, llir.IntType(64))

            return nbtypes.int64(nbtypes.float32), codegen

        @intrinsic
        def bits_f32(typingctx, u):
            """The float32 whose bits are the low 32 bits of int64 ``u``."""
            if u != nbtypes.int64:
                return None

            def codegen(context, builder, signature, args):
                raw = builder.trunc(args[0], llir.IntType(32))
                return builder.bitcast(raw, llir.FloatType())

            return nbtypes.float32(nbtypes.int64), codegen

        jit = numba.njit(inline="always", nogil=True)

        @jit
        def _r16d(d):
            f = np.float32(d)
            if np.float64(f) != d and f == f:  # inexact: move to the odd neighbour
                u = f32_bits(f)
                if (u & 1) == 0:
                    u = u + 1 if abs(np.float64(f)) < abs(d) else u - 1
                f = bits_f32(u)
            return r16(f)

        modes = numpy_tie_modes()

        def make(bigger: bool, mode: int):
            @jit
            def pick(a, b):
                # one select (NaN in a kept; NaN in b fails the test), so loops vectorize
                if bigger:
                    r = a if (a > b or a != a) else b
                else:
                    r = a if (a < b or a != a) else b
                if mode != 1 and a == b:  # a tie: the first operand, or a signed zero
                    if mode == 0:
                        r = a
                    elif a == 0:
                        r = abs(a) if mode == 2 else -abs(a)
                return r

            return pick

        r16d = _r16d
        vmax, vmin = make(True, modes["max"]), make(False, modes["min"])
        rmax, rmin = _pk.ieee_max, _pk.ieee_min  # the pools' own steps
        _loaded = True
    return True
