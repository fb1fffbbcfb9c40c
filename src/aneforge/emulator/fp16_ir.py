"""LLVM IR emitters for the emulator's compiled kernels: fp16 conversions and rounded
products, written so that no library call (``__extendhfsf2``, ``fmaf``...) is needed.

Every emitter takes an llvmlite ``IRBuilder`` and scalar or vector values and returns the
new value; they are used by the numba intrinsics of :mod:`aneforge.emulator.gemm` and
:mod:`aneforge.emulator.fast_kernels`. llvmlite is imported on first use (it comes with
numba), never by ``import aneforge``.

Two ways to round the exact float32 product ``p = x * y`` of two fp16 values to fp16:

- :func:`rounded_product`: through the fp16 format (``fptrunc``/``fpext``, which x86 with
  F16C runs as ``vcvtps2ph`` + ``vcvtph2ps``), or by bit surgery (:func:`round_to_f16_grid`).
- :func:`magic_rounded_product`: float32 arithmetic only, for products known not to
  overflow fp16 (the caller checks, see :mod:`aneforge.emulator.gemm`). It returns the
  rounded product times ``2**-13`` (:data:`MAGIC_SCALE`); its docstring gives the proof.

Example:
    >>> from llvmlite import ir
    >>> fn = ir.Function(ir.Module(), ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    >>> b = ir.IRBuilder(fn.append_basic_block())
    >>> _ = b.ret(round_to_f16_grid(b, fn.args[0]))
    >>> "bitcast" in str(fn)
    True
"""

from __future__ import annotations

import contextlib
import importlib

__all__ = [
    "MAGIC_SCALE",
    "allow_wide_vectors",
    "bits_to_f32",
    "byte_address",
    "f16_grid_to_bits",
    "like",
    "magic_rounded_product",
    "operand",
    "round_to_f16_grid",
    "rounded_product",
    "splat",
]

#: :func:`magic_rounded_product` returns fp16(x * y) times this power of two; a sum of
#: such terms is the sum of the products times it, exactly (see there).
MAGIC_SCALE = 2.0**-13


def _llir():
    """llvmlite's IR module (imported here on first use: it is numba's dependency)."""
    return importlib.import_module("llvmlite.ir")


def splat(ty, value):
    """A constant of scalar or vector type ``ty`` with every lane equal to ``value``."""
    llir = _llir()
    if isinstance(ty, llir.VectorType):
        return llir.Constant(ty, [value] * ty.count)
    return llir.Constant(ty, value)


def like(ty, element):
    """``element`` type, or a vector of it with as many lanes as ``ty``."""
    llir = _llir()
    if isinstance(ty, llir.VectorType):
        return llir.VectorType(element, ty.count)
    return element


def bits_to_f32(builder, bits):
    """Portable exact fp16 -> float32 of i16 bits (scalar or vector), integers only."""
    llir = _llir()
    i32 = like(bits.type, llir.IntType(32))
    f32 = like(bits.type, llir.FloatType())
    h = builder.zext(bits, i32)
    sign = builder.shl(builder.and_(h, splat(i32, 0x8000)), splat(i32, 16))
    mag = builder.and_(h, splat(i32, 0x7FFF))
    shifted = builder.shl(mag, splat(i32, 13))
    normal = builder.add(shifted, splat(i32, 112 << 23))  # rebias exponent 15 -> 127
    special = builder.or_(shifted, splat(i32, 0x7F800000))  # inf / nan
    tiny = builder.fmul(builder.uitofp(mag, f32), splat(f32, 2.0**-24))  # subnormal, 0
    out = builder.select(builder.icmp_unsigned(">=", mag, splat(i32, 0x7C00)), special, normal)
    out = builder.select(
        builder.icmp_unsigned("<", mag, splat(i32, 0x0400)), builder.bitcast(tiny, i32), out
    )
    return builder.bitcast(builder.or_(out, sign), f32)


def round_to_f16_grid(builder, x):
    """Portable fp16 rounding of float32 ``x`` (RNE, subnormals, overflow to inf).

    The result is a float32 holding exactly the fp16 value.
    """
    llir = _llir()
    i32 = like(x.type, llir.IntType(32))
    f32 = x.type
    u = builder.bitcast(x, i32)
    sign = builder.and_(u, splat(i32, 0x80000000))
    ax = builder.and_(u, splat(i32, 0x7FFFFFFF))
    # fp16 normal range: drop 13 mantissa bits, ties to even (a carry may bump the exponent)
    lsb = builder.and_(builder.lshr(ax, splat(i32, 13)), splat(i32, 1))
    normal = builder.add(builder.add(ax, splat(i32, 0x0FFF)), lsb)
    normal = builder.and_(normal, splat(i32, 0xFFFFE000))
    # fp16 subnormal range (< 2**-14): |x| + 0.5 lands in [0.5, 1), whose float32 spacing
    # is 2**-24, the fp16 subnormal step; the float32 add rounds ties to even, and
    # subtracting 0.5 back is exact
    half_c = splat(f32, 0.5)
    absx = builder.bitcast(ax, f32)
    tiny = builder.bitcast(builder.fsub(builder.fadd(absx, half_c), half_c), i32)
    out = builder.select(builder.icmp_unsigned("<", ax, splat(i32, 0x38800000)), tiny, normal)
    # 65520 = 65504 + half an ulp rounds (to even) to 65536: overflow to inf
    inf = splat(i32, 0x7F800000)
    out = builder.select(builder.icmp_unsigned(">=", ax, splat(i32, 0x477FF000)), inf, out)
    out = builder.select(builder.icmp_unsigned(">", ax, inf), ax, out)  # nan stays nan
    return builder.bitcast(builder.or_(out, sign), f32)


def f16_grid_to_bits(builder, x):
    """Portable fp16 bits (i16) of a float32 ``x`` that already holds an fp16 value."""
    llir = _llir()
    i32 = like(x.type, llir.IntType(32))
    u = builder.bitcast(x, i32)
    sign = builder.and_(builder.lshr(u, splat(i32, 16)), splat(i32, 0x8000))
    ax = builder.and_(u, splat(i32, 0x7FFFFFFF))
    normal = builder.lshr(builder.sub(ax, splat(i32, 112 << 23)), splat(i32, 13))
    scaled = builder.fmul(builder.bitcast(ax, x.type), splat(x.type, 2.0**24))
    tiny = builder.fptoui(scaled, i32)  # subnormal or zero: an exact integer 0..1023
    out = builder.select(builder.icmp_unsigned("<", ax, splat(i32, 0x38800000)), tiny, normal)
    inf = splat(i32, 0x7F800000)
    out = builder.select(builder.icmp_unsigned("==", ax, inf), splat(i32, 0x7C00), out)
    out = builder.select(builder.icmp_unsigned(">", ax, inf), splat(i32, 0x7E00), out)
    return builder.trunc(builder.or_(out, sign), like(x.type, llir.IntType(16)))


def operand(builder, bits, native):
    """Turn fp16 bits into the multiplicand form: ``half`` (native) or exact float32."""
    llir = _llir()
    if native:
        return builder.bitcast(bits, like(bits.type, llir.HalfType()))
    return bits_to_f32(builder, bits)


def rounded_product(builder, x, y, native):
    """float32 (scalar or vector) equal to fp16(x * y) for operands from :func:`operand`."""
    llir = _llir()
    if native:
        # IEEE fmul on half is the correctly rounded fp16 product; fpext is exact
        return builder.fpext(builder.fmul(x, y), like(x.type, llir.FloatType()))
    return round_to_f16_grid(builder, builder.fmul(x, y))  # float32 product: exact


def rounded_f32_product(builder, x, y, native):
    """float32 (scalar or vector) equal to fp16(x * y) for float32 ``x`` and ``y`` holding
    fp16 values: the exact float32 product rounded once, through ``half`` (native) or by
    :func:`round_to_f16_grid`."""
    llir = _llir()
    p = builder.fmul(x, y)
    if native:
        return builder.fpext(builder.fptrunc(p, like(p.type, llir.HalfType())), p.type)
    return round_to_f16_grid(builder, p)


def allow_wide_vectors(builder):
    """Let x86 keep 512-bit vectors whole (LLVM splits them when it prefers 256 bits).

    ``"min-legal-vector-width"`` is an LLVM function attribute (clang sets it for code using
    512-bit intrinsics); other targets ignore it. llvmlite only accepts a fixed list of
    attribute names, hence the direct set insertion; if that ever fails the vectors are
    split into halves, which is slower but computes the same.
    """
    with contextlib.suppress(Exception):
        set.add(builder.function.attributes, '"min-legal-vector-width"="512"')


def byte_address(builder, base, offset, pointee):
    """Pointer to ``pointee`` at ``base`` plus ``offset`` bytes."""
    llir = _llir()
    raw = builder.bitcast(base, llir.IntType(8).as_pointer())
    return builder.bitcast(builder.gep(raw, [offset]), pointee.as_pointer())


def _fma(builder, x, y, z):
    """``x * y + z`` rounded once (``llvm.fma``; a single instruction wherever the CPU has
    FMA, which the caller of :func:`magic_rounded_product` makes sure of)."""
    llir = _llir()
    ty = x.type
    suffix = f"v{ty.count}f32" if isinstance(ty, llir.VectorType) else "f32"
    name = f"llvm.fma.{suffix}"
    module = builder.module
    fn = module.globals.get(name) or llir.Function(module, llir.FunctionType(ty, [ty] * 3), name)
    return builder.call(fn, [x, y, z])


def magic_rounded_product(builder, x, x_scaled, y):
    """``fp16(x * y) * 2**-13`` for float32 ``x`` and ``y`` holding fp16 values whose
    product is below 65520 in magnitude; ``x_scaled`` is ``x * 2**-13``. Five vector
    operations and no conversion: one multiply, one bitwise op, one max, one FMA, one
    subtract.

    Why it is exact. ``p = x * y`` is exact in float32 (11 x 11 significant bits). Let
    ``e`` be its exponent, ``max(e, -14)`` clamped, and ``M = 1.5 * 2**e`` (the bits of
    ``p`` with the mantissa replaced by ``0x400000``). The fp16 grid near ``p`` has the
    spacing ``q = 2**(e - 10)``: 11 significant bits, or the subnormal step ``2**-24``
    below ``2**-14``. The FMA forms ``p * 2**-13 + M`` exactly and rounds it once; that
    sum lies in ``[2**e, 2**(e+1))`` whatever the sign of ``p``, where float32's spacing is
    ``2**(e - 23) = q * 2**-13``. So the FMA rounds ``p * 2**-13`` to the scaled fp16 grid,
    ties to even (``M`` is an even multiple of the spacing, so the parity of the sum's last
    bit is the parity of the rounded product's), and subtracting ``M`` back is exact. A
    product rounded to zero comes out as +0 where fp16 gives -0; a float32 sum started at
    +0 cannot tell them apart. Sums of the scaled terms are the unscaled sums times
    ``2**-13`` exactly: every term is a multiple of ``2**-37``, far above float32's
    subnormals, so each addition rounds exactly as the unscaled one would.

    A product of 65520 or more would round to 65536 where fp16 overflows to inf, and an
    inf or NaN operand would give the wrong special value: the caller must rule both out.
    """
    llir = _llir()
    vf = y.type
    vi = like(vf, llir.IntType(32))
    bits = builder.bitcast(builder.fmul(x, y), vi)
    m = builder.or_(builder.and_(bits, splat(vi, 0x7F800000)), splat(vi, 0x00400000))
    smallest = splat(vi, 0x38C00000)  # 1.5 * 2**-14: the subnormal step's magic constant
    m = builder.bitcast(builder.select(builder.icmp_unsigned(">", m, smallest), m, smallest), vf)
    return builder.fsub(_fma(builder, x_scaled, y, m), m)
