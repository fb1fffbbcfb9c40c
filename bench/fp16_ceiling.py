"""The faithful GEMM's ceiling on this CPU: how fast its per-product work can run at all.

The emulator's GEMM multiplies fp16 values in float32, rounds every product to fp16
and adds it to a float32 sum. This script times that work alone, in registers (no
loads, no stores), on 12 independent vector accumulators, one thread, with LLVM at
``-O3`` for this CPU, in two forms of the rounding:

- ``conversions``: ``fpext(fptrunc(p to half))``, the conversion round trip the AVX2
  tile uses (F16C's ``vcvtps2ph`` / ``vcvtph2ps``);
- ``magic``: the AVX-512 tile's magic-number rounding
  (:func:`aneforge.emulator.fp16_ir.magic_rounded_product`'s operations);

and a plain float32 FMA loop of the same shape, NumPy's BLAS's inner work. Each ceiling
times two threads, against the measured NumPy float32 ``@`` of ``bench/emu_gemm.py``,
bounds the ratio that bench can reach here: a kernel that loads nothing and waits for
nothing reaches it, a real one a little below. On a 2-core Zen 3 (AVX2) the
conversions ran 12.4 GMAC/s a thread (two cycles a round trip: ``vcvtps2ph``'s
throughput), magic 9.5-10.2 and the FMA 51.3 GMAC/s (its peak, two FMAs a cycle), while
the GEMM kernel ran 10.5-11 a thread: against NumPy's 76-93 GMAC/s on two cores the
ceiling is 0.27-0.33x, and the kernel's 0.25-0.28x is 85-90 % of it.

Run from the repository root (needs llvmlite, which numba brings):

    python bench/fp16_ceiling.py [--lanes 8] [--iterations 20000000]

Last lines: ``RESULT fp16_ceiling_<form>_gmacs=<GMAC/s, one thread>`` per form.
"""

from __future__ import annotations

import argparse
import ctypes
import time

import llvmlite.binding as llvm
import llvmlite.ir as ir

ACCUMULATORS = 12  # the AVX2 tile's 4 x 3 vectors
MAGIC_MASK, MAGIC_MANTISSA, MAGIC_SMALLEST = 0x7F800000, 0x00400000, 0x38C00000


def _module(form: str, lanes: int, accumulators: int) -> str:
    """LLVM IR of ``run(n) -> float``: ``n`` iterations of ``accumulators`` products of
    ``form`` into independent sums; the b vector moves each iteration, so nothing is
    loop-invariant."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, lanes)
    ivec = ir.VectorType(ir.IntType(32), lanes)
    module = ir.Module(name=form)
    module.triple = llvm.get_process_triple()
    fma = ir.Function(module, ir.FunctionType(vec, [vec] * 3), name=f"llvm.fma.v{lanes}f32")
    fn = ir.Function(module, ir.FunctionType(f32, [i64]), name="run")
    entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)

    def splat(value, ty=vec):
        return ir.Constant(ty, [value] * lanes)

    rows = [
        ir.Constant(vec, [1e-3 * (r + 1) + 1e-4 * j for j in range(lanes)])
        for r in range(accumulators)
    ]
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    col = b.phi(vec)
    col.add_incoming(ir.Constant(vec, [0.5 + 0.01 * j for j in range(lanes)]), entry)
    sums = []
    for _ in range(accumulators):
        s = b.phi(vec)
        s.add_incoming(splat(0.0), entry)
        sums.append(s)
    updated = []
    for row, s in zip(rows, sums):
        if form == "fma":
            updated.append(b.call(fma, [row, col, s]))
            continue
        if form == "conversions":
            half = b.fptrunc(b.fmul(row, col), ir.VectorType(ir.HalfType(), lanes))
            term = b.fpext(half, vec)
        else:  # magic: 1.5 * 2**e of the product (at least the subnormal step's), then one FMA
            bits = b.bitcast(b.fmul(row, col), ivec)
            m = b.or_(b.and_(bits, splat(MAGIC_MASK, ivec)), splat(MAGIC_MANTISSA, ivec))
            small = splat(MAGIC_SMALLEST, ivec)
            m = b.bitcast(b.select(b.icmp_unsigned(">", m, small), m, small), vec)
            scaled = b.fmul(row, splat(2.0**-13))  # loop-invariant: a's scaled copy
            term = b.fsub(b.call(fma, [scaled, col, m]), m)
        updated.append(b.fadd(s, term))
    next_col = b.fadd(col, splat(1e-7))
    next_i = b.add(i, ir.Constant(i64, 1))
    for s, u in zip(sums, updated):
        s.add_incoming(u, loop)
    col.add_incoming(next_col, loop)
    i.add_incoming(next_i, loop)
    b.cbranch(b.icmp_signed("<", next_i, fn.args[0]), loop, done)
    b.position_at_end(done)
    total = updated[0]
    for u in updated[1:]:
        total = b.fadd(total, u)
    b.ret(b.extract_element(total, ir.Constant(ir.IntType(32), 0)))
    return str(module)


_engines: list = []  # each compiled function's engine (it owns its target machine)


def compiled(form: str, lanes: int):
    """``run(n)`` of :func:`_module`'s IR for ``form``, compiled for this CPU at -O3."""
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    module = llvm.parse_assembly(_module(form, lanes, ACCUMULATORS))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _engines.append(engine)
    return ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(engine.get_function_address("run"))


def ceilings(forms, lanes: int, iterations: int, rounds: int = 7) -> dict:
    """GMAC/s of each form on one thread: the forms take turns, ``rounds`` times, each
    its best, so a burst of load from other processes slows one turn, not one form."""
    runs = {form: compiled(form, lanes) for form in forms}
    best = dict.fromkeys(forms, float("inf"))
    for run in runs.values():
        run(1000)
    for _ in range(rounds):
        for form, run in runs.items():
            start = time.perf_counter()
            run(iterations)
            best[form] = min(best[form], time.perf_counter() - start)
    return {form: iterations * ACCUMULATORS * lanes / t / 1e9 for form, t in best.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=8, help="float32 lanes a vector (16: AVX-512)")
    parser.add_argument("--iterations", type=int, default=20_000_000)
    opts = parser.parse_args(argv)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    print(f"CPU {llvm.get_host_cpu_name()}, {opts.lanes} lanes, {ACCUMULATORS} accumulators")
    results = ceilings(("conversions", "magic", "fma"), opts.lanes, opts.iterations)
    for form, gmacs in results.items():
        print(f"  {form:12s} {gmacs:6.1f} GMAC/s one thread")
    share = max(results["conversions"], results["magic"]) / results["fma"]
    print(f"  the faithful work's best form runs at {share:.2f}x the FMA loop")
    for form, gmacs in results.items():
        print(f"RESULT fp16_ceiling_{form}_gmacs={gmacs:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
