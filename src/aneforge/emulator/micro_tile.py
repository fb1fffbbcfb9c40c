"""The GEMM's micro-kernel, generated as LLVM vector IR (:func:`make_tile`).

One call of a tile adds the rounded products of ``mr`` rows of ``a`` and ``nv`` vectors of
a packed panel of ``b`` into a float32 accumulator block, over a range of k's or over a
list of them (the kernel lists a panel's k's when it leaves out rows of zeros). The
accumulators stay in registers for the whole walk over k. :mod:`aneforge.emulator.gemm`
owns the contract, the tile's geometry and the kernel that calls it.
"""

from __future__ import annotations

from . import fp16_ir

__all__ = ["is_array", "make_tile"]


def is_array(ty, dtype, ndim) -> bool:
    """Whether the numba type ``ty`` is an array of ``dtype`` with ``ndim`` dimensions."""
    from numba.core import types as nbtypes

    return isinstance(ty, nbtypes.Array) and ty.dtype == dtype and ty.ndim == ndim


def make_tile(mr, vw, nv, *, magic, f32_rows, listed, native_half):
    """The micro-kernel as a numba intrinsic, for tiles of ``mr`` rows by ``nv`` vectors
    of ``vw`` float32 lanes.

    Its products are rounded by magic numbers (``magic``) or through fp16; ``a`` comes as
    float32 rows (``f32_rows``, implied by ``magic``) or fp16 bits. Called as
    ``tile(a, panel, c, ia, ic, jc, k0, k1)`` it runs k over [k0, k1); with ``listed``,
    ``tile(a, panel, c, ia, ic, jc, ks, n0, n1)`` runs k over ``ks[n0:n1]`` (int32,
    ascending). ``native_half(context)`` says whether the target converts fp16 without
    library calls. numba must have imported (the gemm module's ``load_numba``).

    The tile computes ``c[ic:ic+mr, jc:jc+nv*vw] += a[ia:ia+mr, k] * panel[k, :nv*vw]``
    for each k in turn: ``a`` the (M, K) uint16 matrix, ``panel`` the packed (K, NR)
    uint16 columns of b, ``c`` a float32 accumulator, all with unit inner stride. No bounds
    checks: whole tiles only. With ``magic``, ``a`` is a (2, M, K) float32 array, the values
    and ``MAGIC_SCALE`` times them (two broadcast loads, no conversion), and the sums are
    ``MAGIC_SCALE`` times the products' (none may overflow).

    Example:
        >>> from aneforge.emulator import gemm
        >>> gemm.load_numba() is None or gemm._micro_tile is not None
        True
    """
    from llvmlite import ir as llir
    from numba.core import cgutils
    from numba.core import types as nbtypes
    from numba.extending import intrinsic

    f32_rows = f32_rows or magic

    def operands_ok(a, panel, c):
        a_ok = is_array(a, nbtypes.float32, 3) if f32_rows else is_array(a, nbtypes.uint16, 2)
        return a_ok and is_array(panel, nbtypes.uint16, 2) and is_array(c, nbtypes.float32, 2)

    def emit(context, builder, signature, args, loop):
        """The tile's IR; ``loop(builder, step)`` calls ``step(k)`` for each k in turn."""
        native = native_half(context)
        fp16_ir.allow_wide_vectors(builder)
        arr_a = context.make_array(signature.args[0])(context, builder, args[0])
        arr_p = context.make_array(signature.args[1])(context, builder, args[1])
        arr_c = context.make_array(signature.args[2])(context, builder, args[2])
        a_strides = cgutils.unpack_tuple(builder, arr_a.strides, 3 if f32_rows else 2)
        a_plane, a_row = (a_strides[0], a_strides[1]) if f32_rows else (None, a_strides[0])
        p_row = cgutils.unpack_tuple(builder, arr_p.strides, 2)[0]
        c_row = cgutils.unpack_tuple(builder, arr_c.strides, 2)[0]
        t_ia, t_ic, t_jc = args[3:6]
        i64 = a_row.type
        i16, f32 = llir.IntType(16), llir.FloatType()
        vbits = llir.VectorType(i16, vw)
        vf32 = llir.VectorType(f32, vw)
        lane0 = llir.Constant(llir.IntType(32), 0)
        zeros_mask = llir.Constant(llir.VectorType(llir.IntType(32), vw), [0] * vw)

        def c_address(r, v):
            row = builder.mul(builder.add(t_ic, i64(r)), c_row)
            col = builder.mul(builder.add(t_jc, i64(v * vw)), i64(4))
            return fp16_ir.byte_address(builder, arr_c.data, builder.add(row, col), vf32)

        def broadcast(offset, scalar, vector):  # a[...] at a byte offset, in all lanes
            ptr = fp16_ir.byte_address(builder, arr_a.data, offset, scalar)
            undef = llir.Constant(vector, None)
            lane = builder.insert_element(undef, builder.load(ptr), lane0)
            return builder.shuffle_vector(lane, undef, zeros_mask)

        def as_f32(bits):  # exact float32 of fp16 bits
            op = fp16_ir.operand(builder, bits, native)
            return builder.fpext(op, vf32) if native else op

        # accumulators live in allocas that LLVM promotes to registers
        slots = {}
        for r in range(mr):
            for v in range(nv):
                slot = cgutils.alloca_once(builder, vf32)
                builder.store(builder.load(c_address(r, v), align=4), slot)
                slots[r, v] = slot

        def step(k):  # one k: mr x nv vectors of rounded products into the slots
            p_base = builder.mul(k, p_row)
            b_ops = []
            for v in range(nv):
                off = builder.add(p_base, i64(v * vw * 2))
                ptr = fp16_ir.byte_address(builder, arr_p.data, off, vbits)
                bits = builder.load(ptr, align=2)
                b_ops.append(as_f32(bits) if f32_rows else fp16_ir.operand(builder, bits, native))
            for r in range(mr):
                row = builder.mul(builder.add(t_ia, i64(r)), a_row)
                if f32_rows:  # a[0] and a[1]: float32 a and a * MAGIC_SCALE
                    off = builder.add(row, builder.mul(k, i64(4)))
                    a_op = broadcast(off, f32, vf32)
                    if magic:
                        a_scaled = broadcast(builder.add(off, a_plane), f32, vf32)
                else:
                    off = builder.add(row, builder.mul(k, i64(2)))  # a[ia + r, k]
                    a_op = fp16_ir.operand(builder, broadcast(off, i16, vbits), native)
                for v in range(nv):
                    if magic:
                        prod = fp16_ir.magic_rounded_product(builder, a_op, a_scaled, b_ops[v])
                    elif f32_rows:
                        prod = fp16_ir.rounded_f32_product(builder, a_op, b_ops[v], native)
                    else:
                        prod = fp16_ir.rounded_product(builder, a_op, b_ops[v], native)
                    slot = slots[r, v]
                    builder.store(builder.fadd(builder.load(slot), prod), slot)

        loop(builder, step)
        for (r, v), slot in slots.items():
            builder.store(builder.load(slot), c_address(r, v), align=4)
        return context.get_dummy_value()

    intp = nbtypes.intp
    if listed:

        @intrinsic
        def listed_tile(typingctx, a, panel, c, ia, ic, jc, ks, n0, n1):
            if not (operands_ok(a, panel, c) and is_array(ks, nbtypes.int32, 1)):
                return None

            def codegen(context, builder, signature, args):
                arr_k = context.make_array(signature.args[6])(context, builder, args[6])

                def loop(builder, step):
                    with cgutils.for_range(builder, args[8], start=args[7]) as k_loop:
                        k_at = builder.gep(arr_k.data, [k_loop.index])
                        step(builder.sext(builder.load(k_at), k_loop.index.type))

                return emit(context, builder, signature, args, loop)

            return nbtypes.void(a, panel, c, intp, intp, intp, ks, intp, intp), codegen

        return listed_tile

    @intrinsic
    def range_tile(typingctx, a, panel, c, ia, ic, jc, k0, k1):
        if not operands_ok(a, panel, c):
            return None

        def codegen(context, builder, signature, args):
            def loop(builder, step):
                with cgutils.for_range(builder, args[7], start=args[6]) as k_loop:
                    step(k_loop.index)

            return emit(context, builder, signature, args, loop)

        return nbtypes.void(a, panel, c, intp, intp, intp, intp, intp), codegen

    return range_tile
