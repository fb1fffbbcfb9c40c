"""The executors: the fp16 emulator (reference or fast matmul backend) and float64.

Both walk a program's nodes in order and call each op's kernel from the registry, so
the only difference between the reference interpreter and the fast path is the matmul
backend (``gemm_reference`` vs ``gemm_fast``), which are bit-identical by contract.
Intermediate values are dropped after their last use.

Integer inputs (token ids, masks: ``af.input(shape, dtype="uint16")``) are fed as
integer arrays and reach only the ops that take them (embedding, int_to_fp16); an id
outside its table is an :class:`~aneforge.graph.ops.extra.IdRangeError` naming the
input that fed it. A fused region that reads an integer input runs node by node: the
compiled regions hold fp16 buffers only.

``target`` selects the per-chip numerics (:mod:`aneforge.emulator.chips`): ``None`` is
the generic model; a target applies its family's crop-DMA clamp, reduction route and
matmul output saturation, identically on both matmul backends.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.emulator.interpreter import execute_fp16
    >>> x = af.input((3,))
    >>> prog = af.compile(x + 1.0)
    >>> execute_fp16(prog, [np.zeros(3, np.float16)], fast=False)[0]
    array([1., 1., 1.], dtype=float16)
"""

from __future__ import annotations

import numpy as np

from ..graph.arith import Arith
from ..graph.ops.extra import IdRangeError
from ..graph.registry import get_op
from .chips import chip_numerics
from .fast_kernels import FAST_KERNELS, GENERIC_ONLY, bias_add_fast
from .gemm import gemm, gemm_reference
from .prepared import prepare
from .windows import gemm_windows


def execute(program, inputs, kernel, weight_value, observe=None) -> list:
    """The one interpreter loop: run ``program``'s nodes in order, each computing node by
    ``kernel(node, source values)``, each weight by ``weight_value(node)``, and free each
    value once no later node reads it. ``inputs`` are in program-input order; returns
    the outputs' values. Every executor (fp16, float64, the tuner's fp32-faithful
    reference) is this loop with its own kernel.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.compiler.program import Program
        >>> x = af.input((2,), name="x")
        >>> prog = Program.from_outputs([x.exp()])
        >>> execute(prog, [np.zeros(2)], lambda node, args: args[0] + 1, lambda n: n.value)
        [array([1., 1.])]
    """
    env: dict[int, np.ndarray] = {}
    feeds = dict(zip((id(t) for t in program.inputs), inputs))
    for i, node in enumerate(program.nodes):
        if node.op == "input":
            env[id(node)] = feeds[id(node)]
        elif node.op == "weight":
            env[id(node)] = weight_value(node)
        else:
            env[id(node)] = kernel(node, [env[id(s)] for s in node.srcs])
        if observe is not None:
            observe(i, node, env[id(node)])
        for dead in program.dead_after[i]:
            env.pop(id(dead), None)
    return [env[id(t)] for t in program.outputs]


#: The runner of whole fused regions as compiled kernels, registered by the package's
#: composition root (:mod:`aneforge.kernel.compiled`); None runs every node in turn.
_region_runner = None


def set_region_runner(runner) -> None:
    """Register ``runner(program, inputs, node_kernel, chip)`` (or None): the fast
    path's execution of whole fused regions, bit-identical to running node by node."""
    global _region_runner
    _region_runner = runner


def execute_fp16(
    program, inputs, fast: bool = True, target=None, observe=None, regions: bool = True
) -> list[np.ndarray]:
    """Run ``program`` in the engine's fp16 arithmetic; inputs are fp16 arrays.

    ``fast`` selects the compiled kernels: each fused region as generated loop-nest
    kernels (:mod:`aneforge.kernel.compiled`; ``regions=False`` runs node by node
    instead), the matmul and batch_norm; ``fast=False`` is the plain NumPy
    reference interpreter. All give the same bits. A compiled kernel that cannot load
    here (numba does not import, the kernel does not compile or fails its first-use check)
    hands every call to the reference, with one ``FastPathWarning`` per process saying
    why (:mod:`aneforge.emulator.gemm`). ``target`` (a name, Target or
    ChipNumerics) emulates that chip's family; ``None`` is the generic model (the
    program's own ``target`` is the device's business, not the executor's).
    ``observe(index, node, value)``, when given, sees every node's value as it is made
    (:mod:`aneforge.emulator.trace` records them).
    """
    chip = chip_numerics(target)
    kernel = fp16_kernel(fast, chip)
    if fast and regions and observe is None and _region_runner is not None:
        out = _region_runner(program, inputs, kernel, chip)
        if out is not None:
            return out
    return execute(program, inputs, kernel, lambda node: node.value, observe)


def fp16_kernel(fast: bool = True, target=None):
    """The per-node fp16 kernel ``kernel(node, source values) -> value`` of
    :func:`execute_fp16`: the op's compiled kernel where there is one (``fast``), else
    its own, on the matmul backend and with the chip numerics of ``target``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2,))
        >>> y = x + 1.0
        >>> fp16_kernel()(y, [np.zeros(2, np.float16), np.float16(1.0)])
        array([1., 1.], dtype=float16)
    """
    chip = chip_numerics(target)
    mm = gemm if fast else gemm_reference
    if chip is not None:
        arith = chip.arith(mm)  # its output saturation wraps the matmul: patches needed
    else:
        arith = Arith.generic(mm, gemm_windows if fast else None, bias_add_fast if fast else None)
    fast_ops = {}
    if fast:
        fast_ops = {k: f for k, f in FAST_KERNELS.items() if chip is None or k not in GENERIC_ONLY}

    def emulate(node, args):
        fn = fast_ops.get(node.op)
        out = fn(args, node.attrs) if fn is not None else None
        if out is None:  # no compiled kernel, or it does not apply: the op's own kernel
            out = named_ids(node, lambda: get_op(node.op).emulate(args, node.attrs, arith))
        return np.asarray(out, dtype=np.float16).reshape(node.shape)

    if chip is None:
        if fast:  # a compiled plan's host nodes, their static work done once
            emulate.prepare = prepare
        return emulate

    def kernel(node, args):
        return chip.finish(node, emulate(node, args))

    return kernel


def named_ids(node, run):
    """``run()``, with an :class:`IdRangeError` of ``node``'s kernel re-raised naming the
    integer input that fed the bad id."""
    try:
        return run()
    except IdRangeError as err:
        ids = [s for s in node.srcs if s.dtype != "float16"]
        who = f"input '{ids[0].name}'" if ids and ids[0].name else "an integer input"
        raise IdRangeError(f"{who} ({ids[0].dtype if ids else 'ids'}): {err}") from None


def execute_float64(program, inputs) -> list[np.ndarray]:
    """Run ``program`` exactly in float64 on the same (fp16-valued) inputs and weights
    (integer inputs as their whole numbers)."""

    def kernel(node, args):
        out = named_ids(node, lambda: get_op(node.op).exact(args, node.attrs))
        return np.asarray(out, dtype=np.float64).reshape(node.shape)

    inputs = [
        np.asarray(x) if t.dtype != "float16" else np.asarray(x, dtype=np.float64)
        for x, t in zip(inputs, program.inputs)
    ]
    return execute(program, inputs, kernel, lambda node: node.value.astype(np.float64))
