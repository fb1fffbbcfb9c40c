"""Fused regions run as compiled kernels: the emulator's default execution.

A region's :class:`RegionPlan` lowers it (:func:`aneforge.kernel.lower.lower`) with:

- **host nodes**: what runs best, or only, as a whole-array kernel — the contractions
  (the blocked fp16 GEMM, the depthwise convolution kernel), the pools under the
  generic numerics (:mod:`aneforge.emulator.plane_kernels`), ops without a loop nest
  or a generated rendering (cumsum, a binary op without a scalar form), and under a
  chip the nodes its numerics change (width-offset slices on the crop-DMA families,
  narrow sums longer than its reduction route). They run by the emulator's own
  per-node kernel, chip finish included;
- **the default placement**: an elementwise or movement intermediate read exactly once,
  by an elementwise, movement or reduction node that is not a host node, is inlined
  into its reader; every other intermediate is materialized (a window, a contraction
  or a row op would recompute it at every tap, product or pass). A ResNet block's
  batch norm and ReLU thus run as one pass over the convolution's output.

Each materialized node's loop nest becomes one numba kernel
(:func:`aneforge.kernel.codegen.generate`); the generated source is written to
``<cache>/kernels/k_<hash>.py`` (:func:`aneforge.cachedir.default_cache_dir`) and
compiled with numba's on-disk cache, so a later process loads it instead of compiling.
Regions of one structure share kernels whatever their sizes. A region with less than
:data:`MIN_WORK` output elements in nodes of :data:`MIN_NODE_WORK` elements or more
(:func:`region_work`) runs op by op (compiling would cost more than it saves).

Compiling costs seconds, so kernels are compiled only when they are used twice: a plan
whose kernels this machine has not yet checked, and that no plan of this process has
used, runs op by op on its first call (a one-shot run, such as ``aneforge check``,
compiles nothing); its second call, or the first call of another plan of the same
structure (a program for another batch size), compiles and runs compiled. That first
compiled run is checked against the op-by-op emulator on its actual inputs, and a
passed check is remembered on disk, so later processes run compiled from their first
call. A plan that fails to build, to compile or that check
runs op by op from then on, and a :class:`~aneforge.errors.FastPathWarning` says why
once per process. ``ANEFORGE_COMPILED_REGIONS=0`` turns the compiled regions off.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.emulator.interpreter import execute_fp16
    >>> x = af.input((2, 3), name="x")
    >>> prog = af.compile((x * 2.0).relu().sum(axis=-1), opt=0)
    >>> out = execute_fp16(prog, [np.arange(6, dtype=np.float16).reshape(2, 3) - 2])
    >>> out[0].tolist()
    [0.0, 12.0]
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._version import __version__
from ..cachedir import default_cache_dir
from ..emulator import gemm as _gemm
from ..emulator import plane_kernels
from ..emulator.chips import is_width_offset
from ..graph.ops.spatial import pool_geometry
from ..graph.registry import get_op
from ..graph.tensor import Tensor
from . import jitlib
from .codegen import GeneratedKernel, Unsupported, generate, table
from .ir import Opaque
from .lower import (
    HOST,
    Lowered,
    Placement,
    lower,
    opaque_reason,
    reads_integers,
    region_nodes,
    scatters,
)

__all__ = [
    "RegionPlan",
    "default_placement",
    "execute_regions",
    "host_nodes",
    "plan_region",
    "region_work",
]

_ENV = "ANEFORGE_COMPILED_REGIONS"
#: A region with less :func:`region_work` than this runs op by op: compiling its kernels
#: would cost more than it saves (and a one-off small program pays nothing).
MIN_WORK = 1 << 16
#: A node with fewer output elements than this adds nothing to :func:`region_work`.
MIN_NODE_WORK = 1 << 11
# what generated kernels call: jitlib and the emulator kernels' helpers it hands on
_JITLIB_HASH = hashlib.sha256(
    b"".join(Path(m.__file__).read_bytes() for m in (jitlib, plane_kernels))
).hexdigest()[:12]


def region_work(region) -> int:
    """The output elements of ``region``'s nodes of at least :data:`MIN_NODE_WORK`
    elements: what compiling the region saves per run grows with them. Nodes below that
    cost the emulator more per call than per element, compiled or not, while each still
    costs a compile: an unrolled Krylov solve on 16 x 16 (5000 such nodes) ran in 0.08 s
    compiled against 0.09 s op by op, after 12 s of first compiles.

    Example:
        >>> import aneforge as af
        >>> x = af.input((64, 64))
        >>> region_work(af.compile(af.relu(x * 2.0)).fused_regions[0])
        8192
    """
    sizes = (math.prod(n.shape) for n in region.nodes)
    return sum(size for size in sizes if size >= MIN_NODE_WORK)


def enabled() -> bool:
    """Whether compiled regions may run (``$ANEFORGE_COMPILED_REGIONS`` is not ``0``)
    and numba is there."""
    return os.environ.get(_ENV, "1") != "0" and _gemm.NUMBA_IMPORT_ERROR is None


# ---- what runs where -----------------------------------------------------------------


def _reduced_terms(node: Tensor) -> int:
    """How many terms one narrow combination of ``node`` folds (1 for none)."""
    nest = get_op(node.op).nest
    x = node.srcs[0] if node.srcs else None
    if nest.kind == "reduce":
        axes = node.attrs["axes"]
        axes = range(x.ndim) if axes is None else [a % x.ndim for a in axes]
        return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    if nest.kind == "window":
        return int(np.prod(pool_geometry(node).kernel, dtype=np.int64))
    if nest.form == "group_norm":
        return math.prod(x.shape[1:]) // node.attrs["groups"]
    if nest.kind == "row":
        axis = node.attrs["axis"] % x.ndim
        if nest.form in ("layer_norm", "rms_norm"):
            return int(np.prod(x.shape[axis:], dtype=np.int64))
        return x.shape[axis]
    return 1


def _compilable(node: Tensor, chip) -> bool:
    """Whether ``node`` runs inside a generated kernel (else on the host)."""
    if opaque_reason(node) is not None:
        return False
    nest = get_op(node.op).nest
    if nest.kind == "contract":  # the blocked GEMM, or the depthwise kernel
        return False
    if nest.kind == "window" and chip is None:  # the pool kernel, where it serves
        return not plane_kernels.serves_pool(node.op, node.srcs[0].shape, node.attrs)
    if nest.kind == "elementwise":
        return len(node.srcs) == 1 and not nest.per_channel or nest.scalar is not None
    if chip is not None:
        if chip.crop_dma_limit is not None and is_width_offset(node):
            return False
        if nest.kind in ("reduce", "window", "row") and _reduced_terms(node) > chip.route:
            return False
    return True


def host_nodes(region, chip=None) -> set[int]:
    """``id`` of the nodes of ``region`` that run on the host (module docstring)."""
    return {id(n) for n in region.nodes if not _compilable(n, chip)}


#: The readers that read each source cell once: an intermediate inlined into a window,
#: a contraction or a row op would be recomputed at every tap, every product or pass.
_READS_ONCE = ("elementwise", "index", "reduce")


def default_placement(program, region, host: set[int]) -> list[Placement]:
    """The execution placement of ``region``'s intermediates (module docstring)."""
    nodes = region_nodes(program, region)
    reads: dict[int, list[Tensor]] = {}
    for n in region.nodes:
        for s in n.srcs:
            reads.setdefault(id(s), []).append(n)
    out = []
    for n in nodes.intermediates:
        readers = reads.get(id(n), [])
        kind = get_op(n.op).nest.kind if get_op(n.op).nest is not None else None
        reader = get_op(readers[0].op).nest if len(readers) == 1 else None
        inline = (
            kind in ("elementwise", "index")
            and id(n) not in host
            and reader is not None
            and reader.kind in _READS_ONCE
            and id(readers[0]) not in host
            and not scatters(n)
        )
        out.append(Placement.INLINE if inline else Placement.MATERIALIZE)
    return out


# ---- loading kernels -----------------------------------------------------------------

_kernels: dict[str, object] = {}
_kernel_lock = threading.Lock()


def _module_key(k: GeneratedKernel) -> str:
    salt = f"aneforge {__version__} jitlib {_JITLIB_HASH} ties {jitlib.numpy_tie_modes()}"
    return hashlib.sha256((salt + "\n" + k.source).encode()).hexdigest()[:24]


def _write_source(folder: Path, key: str, source: str) -> Path | None:
    """The kernel's source file in ``folder`` (written atomically when missing), or
    None when the folder cannot be written."""
    path = folder / f"k_{key}.py"
    try:
        if path.is_file() and path.read_text() == source:
            return path
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".k_{key}.{os.getpid()}.tmp"
        tmp.write_text(source)
        os.replace(tmp, path)
        return path
    except OSError:
        return None


def _compile(k: GeneratedKernel):
    """The compiled dispatcher of ``k`` (from numba's disk cache when there)."""
    key = _module_key(k)
    with _kernel_lock:
        if key in _kernels:
            return _kernels[key]
        if not jitlib.load():
            raise Unsupported(f"numba could not be imported ({_gemm.NUMBA_IMPORT_ERROR})")
        numba = _gemm.numba
        options = dict(nogil=True, error_model="numpy", parallel=k.parallel)
        path = _write_source(default_cache_dir() / "kernels", key, k.source)
        if path is not None:
            name = f"aneforge_kernel_{key}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # numba's cache re-imports it by name
            spec.loader.exec_module(module)
            try:
                fn = numba.njit(cache=True, **options)(module.run)
            except Exception:  # no usable cache location: compile in memory
                fn = numba.njit(**options)(module.run)
        else:
            namespace: dict = {}
            exec(compile(k.source, f"<aneforge kernel {key}>", "exec"), namespace)
            fn = numba.njit(**options)(namespace["run"])
        _kernels[key] = fn
        return fn


# ---- first-use checks, remembered per machine ---------------------------------------

_verified: set[str] = set()


def _machine_tag() -> str:
    """The CPU numba compiles for (name and features): a kernel checked on one CPU is
    not taken as checked on another."""
    import llvmlite.binding as llvm  # present whenever numba is

    return f"{llvm.get_host_cpu_name()} {llvm.get_host_cpu_features().flatten()}"


def _marker(key: str) -> Path:
    tag = hashlib.sha256(f"{key} {_machine_tag()}".encode()).hexdigest()[:24]
    return default_cache_dir() / "kernels" / "verified" / tag


def _is_verified(key: str) -> bool:
    if key in _verified:
        return True
    if _marker(key).is_file():
        _verified.add(key)
        return True
    return False


def _remember_verified(keys) -> None:
    for key in keys:
        _verified.add(key)
        path = _marker(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError:  # a read-only cache: checked again in the next process
            pass


# ---- plans ---------------------------------------------------------------------------


@dataclass
class RegionPlan:
    """A fused region ready to run: its lowering and its steps, each a host
    :class:`~aneforge.kernel.ir.Opaque` statement or a generated kernel with its
    compiled dispatcher. ``checked`` is true once every kernel has matched the
    op-by-op emulator on its first use (in this process, or earlier on this machine);
    ``error`` holds why the plan runs op by op instead. An unchecked plan whose kernels
    no plan has used yet runs op by op on its first call (``calls``) and compiles on
    its second."""

    lowered: Lowered
    steps: list = field(default_factory=list)
    checked: bool = False
    error: object = None
    calls: int = 0  # runs of the region so far (an unchecked plan compiles on its second)
    weights: dict | None = None  # buffer name -> a weight's fp16 bits (see _weight_bits)

    @property
    def keys(self) -> list[str]:
        """The module keys of the plan's kernels."""
        return [_module_key(step[0]) for step in self.steps if not isinstance(step, Opaque)]


def plan_region(program, region, node_kernel, chip=None, placement=None) -> RegionPlan:
    """The :class:`RegionPlan` of fused ``region`` of ``program``: host nodes run by
    ``node_kernel(node, source arrays)``; ``placement`` defaults to
    :func:`default_placement`. Raises :class:`~aneforge.kernel.codegen.Unsupported`
    (or a numba error) when a kernel cannot be generated or compiled."""
    host = host_nodes(region, chip)
    if placement is None:
        placement = default_placement(program, region, host)
    runners = {id(n): _host_runner(n, node_kernel) for n in region.nodes if id(n) in host}
    low = lower(program, region, placement, host=runners)
    plan = RegionPlan(low)
    for node, stmts in low.steps:
        if len(stmts) == 1 and isinstance(stmts[0], Opaque):
            if stmts[0].reason != HOST:  # every opaque node is given to the host
                raise Unsupported(f"{node.op} lowered as opaque without a host kernel")
            plan.steps.append(stmts[0])
            continue
        k = generate(low.code, stmts)
        plan.steps.append((k, _compile(k), tuple(table(t) for t in k.tables)))
    plan.checked = all(_is_verified(key) for key in plan.keys)
    return plan


def _host_runner(node, node_kernel):
    """``node``'s host kernel in a plan: the node kernel's prepared runner where it
    offers one (its static work done once; ``node_kernel.prepare``), else a call of it."""
    prepare = getattr(node_kernel, "prepare", None)
    prepared = prepare(node) if prepare is not None else None
    if prepared is not None:
        return prepared

    def run(*arrays):
        return node_kernel(node, list(arrays))

    return run


def _storage(buf) -> np.ndarray:
    dtype = np.uint16 if buf.dtype == "fp16" else np.float32
    return np.empty(buf.shape, dtype)


def _bits(value, shape) -> np.ndarray:
    """``value`` as a C-ordered fp16 array of ``shape`` (a scalar as one cell), its bits."""
    return np.ascontiguousarray(value.reshape(shape or (1,)), dtype=np.float16).view(np.uint16)


def _weight_bits(plan: RegionPlan) -> dict[str, np.ndarray]:
    """The buffers of the region's weights, from their nodes' frozen values: converted
    on the plan's first run, not on every run (a ShuffleNet region has 249 inputs)."""
    if plan.weights is None:
        low = plan.lowered
        plan.weights = {
            low.names[id(n)]: _bits(n.value, n.shape) for n in low.nodes.inputs if n.op == "weight"
        }
    return plan.weights


def run_plan(plan: RegionPlan, values: dict) -> dict:
    """Run ``plan`` on ``values`` (``id(node)`` -> array, the region's inputs among
    them; a weight is read from its node); returns ``id(node)`` -> fp16 array of the
    region's outputs."""
    low = plan.lowered
    bufs = dict(_weight_bits(plan))
    for n in low.nodes.inputs:
        name = low.names[id(n)]
        if name not in bufs:
            bufs[name] = _bits(values[id(n)], n.shape)
    for b in low.code.buffers:
        if b.kind != "input":
            bufs[b.name] = _storage(b)
    for step in plan.steps:
        if isinstance(step, Opaque):
            args = [bufs[n].view(np.float16) for n in step.inputs]
            out = np.asarray(step.fn(*args), dtype=np.float16)
            name = step.outputs[0]
            bufs[name] = np.ascontiguousarray(out).reshape(bufs[name].shape).view(np.uint16)
            continue
        k, fn, tables = step
        args = [bufs[n] for n in k.buffers]
        if k.parallel:
            _gemm.parallel_launch(fn, *args, k.ints, k.consts, *tables)
        else:
            fn(*args, k.ints, k.consts, *tables)
    return {
        id(n): bufs[low.names[id(n)]].view(np.float16).reshape(n.shape) for n in low.nodes.outputs
    }


def _op_by_op(region, values: dict, node_kernel) -> dict:
    env = dict(values)
    for n in region.nodes:
        env[id(n)] = node_kernel(n, [env[id(s)] for s in n.srcs])
    return env


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return _gemm._same_bits(np.asarray(x, np.float16), np.asarray(y, np.float16))


# ---- programs ------------------------------------------------------------------------

_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lasts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # program -> _last_reads
_plans_lock = threading.Lock()


def _region_plans(program, chip, node_kernel) -> dict:
    with _plans_lock:
        per_chip = _plans.setdefault(program, {})
        if chip in per_chip:
            return per_chip[chip]
    plans = {}
    for region in program.fused_regions:
        if region_work(region) < MIN_WORK or reads_integers(region):
            plans[region.index] = None  # small, or it reads ids: op by op
            continue
        try:
            placement = program.placement(region.index)  # None: the default
            plans[region.index] = plan_region(program, region, node_kernel, chip, placement)
        except Exception as exc:  # any failure: this region runs op by op
            _gemm.warn_fallback("region", exc)
            plans[region.index] = None
    with _plans_lock:
        per_chip[chip] = plans
    return plans


def execute_regions(program, inputs, node_kernel, chip=None) -> list | None:
    """Run ``program`` region by region: fused regions by their compiled plans, bridge
    regions (and any region whose plan failed) node by node with ``node_kernel``.
    ``inputs`` in program-input order; returns the outputs' values.

    Raises nothing of its own: what cannot be compiled runs op by op (with one
    :class:`~aneforge.errors.FastPathWarning` per cause and process); None when
    compiled regions are off (:func:`enabled`), so the caller runs node by node.
    """
    if not enabled():
        return None
    plans = _region_plans(program, chip, node_kernel)
    env: dict[int, np.ndarray] = dict(zip((id(t) for t in program.inputs), inputs))
    for node in program.nodes:
        if node.op == "weight":
            env[id(node)] = node.value
    last = _last_reads(program)
    keep = {id(t) for t in program.outputs}
    for i, region in enumerate(program.regions):
        plan = plans.get(region.index) if region.kind == "fused" else None
        if plan is not None:
            plan.calls += 1
            if _first_use(plan):
                plan = None  # used once so far: compiling would cost more than it saves
        if plan is not None and plan.error is None:
            try:
                got = run_plan(plan, env)
                if not plan.checked:
                    want = _op_by_op(region, env, node_kernel)
                    if not all(_same_bits(got[k], want[k]) for k in got):
                        raise RuntimeError("compiled region disagrees with the op-by-op emulator")
                    plan.checked = True
                    _remember_verified(plan.keys)
                env.update(got)
            except Exception as exc:  # a failing plan runs op by op from now on
                plan.error = exc
                _gemm.warn_fallback("region", exc)
                plan = None
        if plan is None or plan.error is not None:
            env.update(_op_by_op(region, env, node_kernel))
        for dead in last.get(i, ()):
            if dead not in keep:
                env.pop(dead, None)
    return [env[id(t)] for t in program.outputs]


_used_keys: set[str] = set()  # kernels of plans that ran op by op once in this process


def _first_use(plan: RegionPlan) -> bool:
    """Whether this call of ``plan`` runs op by op instead of compiling: the plan's first
    call, its kernels unchecked on this machine and none of them used before in this
    process (by this plan or another of the same structure, a batch of another length)."""
    if plan.checked or plan.calls > 1:
        return False
    keys = set(plan.keys)
    with _plans_lock:
        fresh = not keys & _used_keys
        _used_keys.update(keys)
    return fresh


def _last_reads(program) -> dict[int, list[int]]:
    """Per region position, the values no later region reads (computed once per
    program)."""
    with _plans_lock:
        cached = _lasts.get(program)
    if cached is not None:
        return cached
    where: dict[int, int] = {}
    for i, region in enumerate(program.regions):
        for n in region.nodes:
            where[id(n)] = i
    last: dict[int, int] = {}
    for n in program.nodes:
        for s in n.srcs:
            last[id(s)] = max(last.get(id(s), -1), where.get(id(n), -1))
    out: dict[int, list[int]] = {}
    for value, i in last.items():
        out.setdefault(i, []).append(value)
    with _plans_lock:
        _lasts[program] = out
    return out
