"""Core ML export: a Program as an fp16 ML Program package (``.mlpackage``).

:func:`export_coreml` lowers every node of a :class:`~aneforge.compiler.program.Program`
to Core ML MIL ops through coremltools' MIL builder (the table is
:data:`~aneforge.io.coreml_ops.LOWERINGS`), converts the MIL program with
``ct.convert(convert_to="mlprogram", compute_precision=FLOAT16)`` and saves it.

Contract:

- **fp16 throughout.** Every MIL value is fp16 and every constant is the aneforge
  weight's fp16 bytes. A compressed weight (``attrs["encoding"]``: int8, int4 or sparse,
  from :mod:`aneforge.compression`) is stored in its compressed form in the
  matching constexpr op (:data:`ENCODED_WEIGHT_OPS`), which Core ML decodes at load time
  to the same fp16 values aneforge emulates. Inputs and outputs are fp16
  tensors (fp32 with ``io_dtype="float32"``, cast to fp16 at the entry and back at the
  exit). An integer input (token ids, a mask: ``af.input(shape, dtype="uint16")``) is an
  int32 feature (Core ML's multiarrays hold fp16, fp32 or int32, no narrower integers),
  read by the MIL ``gather`` of an embedding or ``cast`` to fp16.
- **Names.** Inputs keep the program's input names; outputs take the program's
  ``output_names`` (``compile(output_names=...)``, the ONNX output names of
  ``from_onnx``, else the output tensors' names), ``output_<i>`` where there is none,
  and an explicit ``output_names=`` argument wins. Each node's MIL op is named by its
  layer name (:attr:`~aneforge.compiler.program.Program.layer_names`: the node's name,
  else ``{op}_{k}``); its helper ops are ``{that name}_{suffix}``. Every name is made
  identifier-safe (other characters become ``_``) and unique (a clash gets ``_``
  appended), so the Core ML user sees the aneforge layer names.
- **Op for op.** The exported program is aneforge's program, node by node, in its
  execution order: coremltools' optimization passes are off unless ``optimize=True``
  (the engine's compiler fuses on device anyway). Bridge ops Core ML cannot express
  natively are replaced by their fused route (the op record's ``route``,
  :func:`~aneforge.optimizer.routes.decomposers`); an op with neither a lowering nor a
  route raises one :class:`ExportError` naming every such op.
- **Deployment target.** ``minimum_deployment_target`` when given (an iOS or macOS
  version: ``"iOS17"``, ``"macOS14"``, ``ct.target.iOS17`` or the int ``17``), else the
  OS generation of the target's family (``Target.capability.min_ios``, from
  ``data/families.json``), else iOS 17 / macOS 14. A
  chosen target is raised to what the program needs (compressed weights, fp16 inputs
  and ``pixel_unshuffle`` need iOS 16) and the reason is recorded; a given target that
  is too old raises :class:`ExportError` instead.
- **Deterministic.** The same Program gives the same MIL program (names included); the
  package differs only in coremltools' conversion-date metadata.
- **Files.** An existing ``path`` is replaced only when it is a package aneforge wrote
  (:mod:`aneforge.io.coreml_package` says how it knows); anything else there raises
  :class:`ExportError` unless ``force=True``. The path is checked before any work.
- **Numerics.** Core ML picks its own kernels: accumulator widths, transcendental
  functions and tie orders are the device's, not the emulator's (docs/export.md).

Example:
    >>> import tempfile, numpy as np, aneforge as af
    >>> from aneforge.io.coreml_export import export_coreml, load_mil_program
    >>> x = af.input((1, 8), name="x")
    >>> prog = af.compile((x @ np.ones((8, 4))).relu())
    >>> path = export_coreml(prog, tempfile.mkdtemp() + "/tiny.mlpackage")
    >>> [op.op_type for op in load_mil_program(path).functions["main"].operations
    ...  if op.op_type != "const"]
    ['matmul', 'relu']
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._version import __version__
from ..compiler.program import Program
from ..compression import weight_payload
from ..compression.codecs import LUT_BITS, unpack_bits
from ..graph.hashing import structural_hash
from ..graph.naming import layer_names, user_name
from ..graph.registry import get_op
from ..graph.tensor import Tensor
from ..graph.walk import topological_order
from ..optimizer.routes import decompose, decomposers
from ..targets import resolve_target
from .coreml_ops import DECOMPOSED, NOT_EXPRESSIBLE, LoweringContext
from .coreml_package import MARK, ExportError, check_package_path, write_package
from .coreml_table import LOWERINGS

DEFAULT_IOS = 17  # no target: iOS 17 / macOS 14
MIN_IOS = 15  # ML Programs start at iOS 15 / macOS 12
ENCODED_IOS = 16  # constexpr ops: int8, int4 and sparse weights decoded at load time
FP16_IO_IOS = 16  # fp16 multiarray inputs and outputs


def deployment_label(ios: int) -> str:
    """``17 -> 'iOS17 / macOS14'``."""
    return f"iOS{ios} / macOS{ios - 3}"


def parse_deployment(value) -> int:
    """The iOS version of a deployment target: ``'iOS17'``, ``'macOS14'``, a
    ``ct.target`` member or an int; older than iOS 15 / macOS 12 raises."""
    if isinstance(value, bool):
        raise ExportError(f"minimum_deployment_target: expected an OS version, got {value!r}")
    name = getattr(value, "name", value)
    if isinstance(name, (int, np.integer)):
        ios = int(name)
    else:
        m = re.fullmatch(r"\s*(ios|macos)\s*(\d+)\s*", str(name), flags=re.IGNORECASE)
        if m is None:
            raise ExportError(
                f"minimum_deployment_target {value!r} is not an OS version; use e.g. "
                "'iOS17', 'macOS14' or ct.target.iOS17"
            )
        ios = int(m.group(2)) + (3 if m.group(1).lower() == "macos" else 0)
    if ios < MIN_IOS:
        raise ExportError(
            f"minimum_deployment_target {value!r}: ML Programs need iOS 15 / macOS 12 or "
            "newer; choose 'iOS15' or later"
        )
    return ios


def _ct():
    """coremltools, imported quietly (off macOS it logs that it cannot run models)."""
    quiet = logging.getLogger("coremltools")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import coremltools as ct
    except ImportError:
        raise ExportError(
            "Core ML export needs coremltools: pip install 'coremltools>=8' "
            "(or the aneforge extra 'coreml')"
        ) from None
    finally:
        quiet.setLevel(level)
    return ct


# ---- planning ------------------------------------------------------------------------


def _needs_route(node: Tensor, ios: int) -> bool:
    """Whether ``node`` must be replaced by its fused route at opset ``ios``."""

    entry = LOWERINGS.get(node.op)
    if entry is None or node.op not in decomposers():
        return False
    if entry.status == DECOMPOSED:
        return True
    if entry.status == NOT_EXPRESSIBLE:
        return False
    return ios < entry.min_ios or (entry.native_if is not None and bool(entry.native_if(node, ios)))


def _requirements(nodes, io_dtype) -> dict[str, int]:
    """What needs a newer opset than iOS 15: reason -> iOS version."""

    need: dict[str, int] = {}
    for node in nodes:
        entry = LOWERINGS.get(node.op)
        enc = node.attrs.get("encoding", "fp16") if node.op == "weight" else "fp16"
        if enc != "fp16":
            need[f"{enc} weights (constexpr decoding)"] = ENCODED_IOS
        elif entry is not None and entry.min_ios > MIN_IOS and node.op not in decomposers():
            need[node.op] = entry.min_ios
    if io_dtype == "float16":
        need["fp16 inputs and outputs"] = FP16_IO_IOS
    return need


def _problems(nodes, ios) -> list[str]:
    """One line per op that cannot be exported at opset ``ios``."""

    counts: Counter = Counter()
    why: dict[str, str] = {}
    for node in nodes:
        if get_op(node.op).kind == "source" or _needs_route(node, ios):
            continue
        entry = LOWERINGS.get(node.op)
        if entry is None:
            reason = "no Core ML lowering is registered"
        elif entry.status == NOT_EXPRESSIBLE:
            reason = entry.note
        elif ios < entry.min_ios:
            reason = f"needs iOS {entry.min_ios} (deployment target is iOS {ios})"
        elif entry.native_if is not None and entry.native_if(node, ios):
            reason = entry.native_if(node, ios) + " and it has no fused route"
        else:
            continue
        counts[node.op] += 1
        why[node.op] = reason
    return [f"{op} (x{n}): {why[op]}" for op, n in counts.items()]


#: The Core ML op each weight encoding becomes: (iOS 16-17 form, iOS 18+ form).
ENCODED_WEIGHT_OPS = {
    "int8": ("constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"),
    "int4": ("constexpr_lut_to_dense", "constexpr_lut_to_dense"),
    "sparse": ("constexpr_sparse_to_dense", "constexpr_sparse_to_dense"),
}


def _payload(w: Tensor) -> dict:
    """The arrays an encoded weight streams (:func:`~aneforge.compression.
    weight_payload`), or ExportError naming what is wrong."""

    enc = w.attrs.get("encoding", "fp16")
    if enc not in ENCODED_WEIGHT_OPS:
        raise ExportError(
            f"weight '{w.name}': encoding {enc!r} has no Core ML form (fp16, "
            f"{', '.join(ENCODED_WEIGHT_OPS)} do); decode it to fp16 before exporting"
        )
    try:
        return weight_payload(w)
    except (KeyError, ValueError) as err:
        raise ExportError(
            f"weight '{w.name}': its {enc} metadata is incomplete ({err}); encode it "
            "with aneforge.compression"
        ) from None


def _encoded_weight(mb, types, ios: int, w: Tensor, name: str):
    """The constexpr op that decodes weight ``w`` at load time to its fp16 values."""

    enc, p, shape = w.attrs["encoding"], _payload(w), tuple(w.shape)
    if enc == "int8":
        if ios >= 18:
            scale = p["scale"].reshape([-1 if i == p["axis"] else 1 for i in range(w.ndim)])
            return mb.constexpr_blockwise_shift_scale(data=p["quantized_data"], scale=scale,
                                                      name=name)  # fmt: skip
        return mb.constexpr_affine_dequantize(
            quantized_data=p["quantized_data"], zero_point=p["zero_point"],
            scale=p["scale"], axis=p["axis"], name=name,
        )  # fmt: skip
    if enc == "int4":
        if ios >= 18:
            idx = unpack_bits(p["indices"], LUT_BITS, w.size).reshape(shape)
            lut = p["lut"].reshape((1,) * w.ndim + (-1, 1))
            return mb.constexpr_lut_to_dense(indices=idx.astype(types.np_uint4_dtype),
                                              lut=lut, name=name)  # fmt: skip
        dims = np.asarray(shape, np.uint32)
        return mb.constexpr_lut_to_dense(indices=p["indices"], lut=p["lut"], shape=dims,
                                          name=name)  # fmt: skip
    if not p["nonzero_data"].size:  # an all-zero weight: nothing to decode
        return mb.const(val=np.zeros(shape, np.float16), name=name)
    if ios >= 18:
        mask = unpack_bits(p["mask"], 1, w.size).reshape(shape).astype(types.np_uint1_dtype)
        return mb.constexpr_sparse_to_dense(nonzero_data=p["nonzero_data"], mask=mask,
                                            name=name)  # fmt: skip
    return mb.constexpr_sparse_to_dense(nonzero_data=p["nonzero_data"], mask=p["mask"],
                                        shape=np.asarray(shape, np.uint32), name=name)  # fmt: skip


# ---- lowering ------------------------------------------------------------------------


@dataclass
class NodeRecord:
    """What one aneforge node became: its MIL ops (constants left out), in order."""

    index: int
    op: str
    mil_ops: tuple[str, ...]
    name: str


@dataclass
class CoreMLLowering:
    """A lowered program and the facts of its lowering.

    Attributes:
        program: the coremltools MIL ``Program`` (function ``main``).
        ios: the opset and minimum deployment target, as an iOS version.
        deployment: ``'iOS17 / macOS14'``.
        reasons: why the deployment target is what it is.
        io_dtype: ``'float16'`` or ``'float32'``.
        input_names, output_names: the Core ML feature names, in program order.
        nodes: one :class:`NodeRecord` per computing node of the lowered graph.
        decomposed: bridge op -> how many nodes went through their fused route.
        weights: MIL constant name -> the aneforge weight node it holds.
    """

    program: object
    ios: int
    deployment: str
    reasons: list[str]
    io_dtype: str
    input_names: list[str]
    output_names: list[str]
    nodes: list[NodeRecord] = field(default_factory=list)
    decomposed: dict[str, int] = field(default_factory=dict)
    weights: dict[str, Tensor] = field(default_factory=dict)

    def mil_op_types(self) -> list[str]:
        """Every emitted MIL op type (constants left out), in program order."""
        return [t for rec in self.nodes for t in rec.mil_ops]


def _identifier(name: str, fallback: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name or "")
    if not safe or safe[0].isdigit():
        safe = f"{fallback}_{safe}" if safe else fallback
    return safe


def _as_program(program):
    if isinstance(program, Program):
        return program
    outs = [program] if isinstance(program, Tensor) else program
    if isinstance(outs, (list, tuple)) and outs and all(isinstance(t, Tensor) for t in outs):
        return Program.from_outputs(outs)
    raise ExportError(
        f"export_coreml: expected a Program (af.compile(...)) or output tensors, got "
        f"{type(program).__name__}"
    )


def _choose_target(prog, target, minimum_deployment_target, io_dtype):
    """(ios, reasons, io_dtype, problems) for ``prog``; see the module docstring.

    ``problems`` lists what a given target is too old for (ops are left to
    :func:`_problems`, which names them)."""
    reasons = []
    if minimum_deployment_target is not None:
        ios = parse_deployment(minimum_deployment_target)
        reasons.append(f"{deployment_label(ios)}: given")
    else:
        t = target if target is not None else getattr(prog, "target", None)
        if t is not None:
            t = resolve_target(t)
            ios = t.capability.min_ios  # the OS its family's first chips shipped with
            if ios is None:
                raise ExportError(
                    f"target {t.arch} (family {t.family}) has no ML Program path on its "
                    "engine; export for a family 2+ target (M1 or newer) or none"
                )
            reasons.append(f"{deployment_label(ios)}: OS generation of {t.arch} (family "
                           f"{t.family})")  # fmt: skip
        else:
            ios = DEFAULT_IOS
            reasons.append(f"{deployment_label(ios)}: the default (no target)")
    if io_dtype not in (None, "float16", "float32"):
        raise ExportError(f"io_dtype must be 'float16' or 'float32', got {io_dtype!r}")
    needs = _requirements(prog.nodes, io_dtype)
    late = {why: v for why, v in needs.items() if v > ios}
    if minimum_deployment_target is not None:
        problems = [
            f"{why} need iOS {v} (deployment target is iOS {ios})"
            for why, v in sorted(late.items())
            if why not in LOWERINGS
        ]
        default_io = "float16" if ios >= FP16_IO_IOS else "float32"
        return ios, reasons, io_dtype or default_io, problems
    for why, v in sorted(late.items(), key=lambda kv: kv[1]):
        if v > ios:
            ios = v
            reasons.append(f"raised to {deployment_label(ios)}: {why}")
    if io_dtype is None:
        io_dtype = "float16" if ios >= FP16_IO_IOS else "float32"
    return ios, reasons, io_dtype, []


def lower_program(
    program,
    target=None,
    minimum_deployment_target=None,
    *,
    io_dtype=None,
    output_names=None,
    feeds=None,
) -> CoreMLLowering:
    """Lower ``program`` to a coremltools MIL program (no conversion, nothing written).

    Arguments as for :func:`export_coreml`. ``feeds`` (input arrays in program-input
    order) turns the inputs into constants, so that coremltools' value inference
    computes every op that supports it: a check of the lowering's meaning without a
    Mac. Raises :class:`ExportError` listing every op that cannot be exported.
    """

    prog = _as_program(program)
    ios, reasons, io_dtype, problems = _choose_target(
        prog, target, minimum_deployment_target, io_dtype
    )
    problems += _problems(prog.nodes, ios)
    if problems:
        raise ExportError(
            "cannot export to Core ML: " + "; ".join(problems) + ". Remove or replace "
            "these ops, or raise the deployment target (docs/export.md lists what each "
            "op lowers to)"
        )
    outs, _ = decompose(list(prog.outputs), lambda node: _needs_route(node, ios))
    nodes = topological_order(outs)
    before = Counter(n.op for n in prog.nodes)
    after = Counter(n.op for n in nodes)
    decomposed = {op: before[op] - after[op] for op in before
                  if before[op] > after[op] and LOWERINGS.get(op) is not None
                  and _is_bridge(op)}  # fmt: skip
    names = _feature_names(prog, outs, output_names)
    low = CoreMLLowering(None, ios, deployment_label(ios), reasons, io_dtype, *names)
    low.decomposed = decomposed
    low.program = _build(low, prog, outs, nodes, feeds)
    return low


def _is_bridge(op: str) -> bool:

    return get_op(op).kind == "bridge"


def _feature_names(prog, outs, output_names):
    inputs, seen = [], set()
    for i, t in enumerate(prog.inputs):
        name = _identifier(t.name, f"input_{i}")
        while name in seen:
            name += "_"
        seen.add(name)
        inputs.append(name)
    if output_names is None:
        return inputs, _default_output_names(prog, len(outs), seen)
    output_names = [str(n) for n in output_names]
    if len(output_names) != len(outs):
        raise ExportError(f"output_names: {len(output_names)} name(s) for {len(outs)} output(s)")
    bad = [n for n in output_names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
    clash = sorted(set(output_names) & seen) + sorted(
        n for n, c in Counter(output_names).items() if c > 1
    )
    if bad or clash:
        raise ExportError(
            f"output_names: {bad or clash} must be distinct identifiers, distinct from "
            f"the input names {inputs}"
        )
    return inputs, list(output_names)


def _default_output_names(prog, count: int, taken: set) -> list[str]:
    """The program's output names made identifier-safe and unique (after the inputs and
    the earlier outputs), ``output_<i>`` for an output without one."""
    given = list(getattr(prog, "output_names", ())) + [None] * count
    out, taken = [], set(taken)
    for i, name in enumerate(given[:count]):
        fallback = f"output_{i}"
        name = _identifier(name, fallback) if name else fallback
        while name in taken:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def _mil_names(prog, nodes) -> dict[int, str]:
    """Layer names of the lowered ``nodes``: the program's for the nodes it holds, fresh
    ones (same rules) for the nodes a Core ML route added."""
    return layer_names(nodes, keep=prog.layer_names)


def _build(low: CoreMLLowering, prog, outs, nodes, feeds):
    ct = _ct()
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program, types
    from coremltools.converters.mil.mil.program import Placeholder

    opset = getattr(ct.target, f"iOS{low.ios}")
    io_type = types.fp16 if low.io_dtype == "float16" else types.fp32
    placeholders = {}
    if feeds is None:
        for name, t in zip(low.input_names, prog.inputs):
            kind = io_type if t.dtype == "float16" else types.int32  # ids, masks
            placeholders[name] = Placeholder(t.shape or (1,), dtype=kind)
    elif len(feeds) != len(prog.inputs):
        raise ExportError(f"feeds: {len(feeds)} array(s) for {len(prog.inputs)} input(s)")
    values: dict[int, object] = {}
    weight_names: dict[int, str] = {}
    used = set(low.input_names) | set(low.output_names)
    layers = _mil_names(prog, nodes)

    def var_of(node: Tensor):
        """The MIL value of a node; a weight becomes its constant on first use."""
        key = id(node)
        if key in values:
            return values[key]
        base = layers.get(key) or user_name(node) or ""
        name = _identifier(base, f"weight_{len(weight_names)}")
        while name in used:
            name += "_"
        used.add(name)
        weight_names[key] = name
        low.weights[name] = node
        if node.attrs.get("encoding", "fp16") == "fp16":
            var = mb.const(val=np.asarray(node.value, dtype=np.float16), name=name)
        else:
            var = _encoded_weight(mb, types, low.ios, node, name)
        values[key] = var
        return var

    def emitted_since(start, ops=None):
        ops = list(func.operations)[start:] if ops is None else ops
        return tuple(op.op_type for op in ops if not op.op_type.startswith("const"))

    quiet = logging.getLogger("coremltools")
    level = quiet.level
    if feeds is not None:  # value inference logs each float64 result it rounds to fp16
        quiet.setLevel(logging.ERROR)
    try:
        with Function(placeholders, opset_version=opset) as func:
            for i, (name, t) in enumerate(zip(low.input_names, prog.inputs)):
                integer = t.dtype != "float16"
                if feeds is not None:
                    kind = np.int32 if integer else np.float16
                    values[id(t)] = mb.const(val=np.asarray(feeds[i], kind), name=name)
                    continue
                v = func.inputs[name]
                if low.io_dtype == "float32" and not integer:
                    v = mb.cast(x=v, dtype="fp16", name=f"{name}_fp16")
                if not t.shape:
                    v = mb.reshape(x=v, shape=[], name=f"{name}_scalar")
                values[id(t)] = v
            if emitted_since(0):
                low.nodes.append(NodeRecord(-1, "input", emitted_since(0), "inputs"))
            cx = LoweringContext(mb, low.ios, var_of)
            for index, node in enumerate(nodes):
                if node.op in ("input", "weight"):
                    continue
                start = len(func.operations)
                name = _identifier(layers[id(node)], f"{node.op}_{index}")
                while name in used:  # an input, output, weight or earlier op has that name
                    name += "_"
                var = LOWERINGS[node.op].fn(cx, node, name)
                _check(node, var)
                values[id(node)] = var
                new_ops = list(func.operations)[start:]
                used.update(v.name for op in new_ops for v in op.outputs)
                low.nodes.append(NodeRecord(index, node.op, emitted_since(start, new_ops), name))
            for t in outs:  # a weight that is itself an output has had no consumer
                if id(t) not in values:
                    var_of(t)
            start = len(func.operations)
            func.set_outputs(_outputs(mb, low, outs, values, feeds is not None))
            if emitted_since(start):
                low.nodes.append(NodeRecord(len(nodes), "output", emitted_since(start), "outputs"))
    finally:
        quiet.setLevel(level)
    _make_unique(func)
    program = Program()
    program.add_function("main", func)
    return program


def _check(node: Tensor, var) -> None:
    shape = tuple(int(d) for d in var.shape)
    if shape != node.shape:
        raise RuntimeError(
            f"Core ML lowering of {node.op} produced shape {shape}, expected {node.shape} "
            "(an aneforge bug: please report it)"
        )


def _outputs(mb, low, outs, values, fed):
    """The output values, named ``low.output_names`` (rank 0 carried as shape (1,))."""
    result = []
    for t, name in zip(outs, low.output_names):
        v = values[id(t)]
        if not t.shape:
            v = mb.reshape(x=v, shape=[1], name=f"{name}_1d")
        if low.io_dtype == "float32" and not fed:
            v = mb.cast(x=v, dtype="fp32", name=name)
        elif v.name != name:
            op = v.op
            renamable = op is not None and op.op_type != "const" and len(op.outputs) == 1
            if renamable and not any(v is s for s in result):
                v.name = name  # the op keeps its layer name; its value is the feature
            else:
                v = mb.identity(x=v, name=name)
        result.append(v)
    return result


def _make_unique(func) -> None:
    """Rename the later of two MIL values that share a name (a helper op's
    ``{layer}_{suffix}`` can meet a weight or layer name): ``_`` appended until free.
    Inputs and outputs keep their feature names. Deterministic (program order)."""
    outputs = {id(v) for v in func.outputs}
    seen = set(func.inputs) | {v.name for v in func.outputs}
    for op in func.operations:
        for v in op.outputs:
            if id(v) in outputs:
                continue
            if v.name in seen:
                old = v.name
                while v.name in seen:
                    v.name += "_"
                if op.name == old:
                    op.name = v.name
            seen.add(v.name)


# ---- conversion and files ------------------------------------------------------------


def convert(low: CoreMLLowering, optimize: bool = False):
    """The coremltools ``MLModel`` of a lowering (fp16 ML Program, not loaded)."""
    ct = _ct()
    pipeline = ct.PassPipeline.DEFAULT if optimize else ct.PassPipeline.EMPTY
    with contextlib.redirect_stderr(io.StringIO()):  # coremltools' progress bars
        model = ct.convert(
            low.program,
            convert_to="mlprogram",
            compute_precision=ct.precision.FLOAT16,
            minimum_deployment_target=getattr(ct.target, f"iOS{low.ios}"),
            pass_pipeline=pipeline,
            skip_model_load=True,
        )
    return model


def export_coreml(
    program,
    path,
    target=None,
    minimum_deployment_target=None,
    *,
    io_dtype=None,
    output_names=None,
    optimize: bool = False,
    return_lowering: bool = False,
    force: bool = False,
):
    """Write ``program`` as an fp16 Core ML ML Program package at ``path``.

    Args:
        program: a :class:`~aneforge.compiler.program.Program`, or output tensors (taken
            as built, ``opt=0``).
        path: the package to write; must end in ``.mlpackage``. An existing path is
            replaced only if it is a package aneforge wrote (:mod:`aneforge.io.
            coreml_package`); anything else raises, unless ``force``. Written to a
            staging folder beside it first, then renamed.
        target: an engine target (name or Target) whose OS generation sets the
            deployment target; default the program's own target.
        minimum_deployment_target: overrides ``target`` (``'iOS17'``, ``'macOS14'``,
            ``ct.target.iOS17``, ``17``).
        io_dtype: ``'float16'`` (default from iOS 16) or ``'float32'``.
        output_names: Core ML names of the outputs (default ``output_0``, ...).
        optimize: also run coremltools' default MIL passes (fusions, constant
            folding); the package is then no longer op for op the aneforge program.
        return_lowering: return ``(path, CoreMLLowering)`` instead of the path.
        force: replace whatever exists at ``path`` (a file, a folder and everything in
            it, a package another tool wrote).

    Returns:
        The package's :class:`~pathlib.Path`.

    Raises:
        ExportError: coremltools is missing, an op cannot be lowered (all listed), the
            deployment target is too old for the program, ``path`` is not a package
            path, cannot be written, or holds something aneforge did not write.
    """
    path = check_package_path(path, force)  # before any work
    low = lower_program(program, target, minimum_deployment_target, io_dtype=io_dtype,
                        output_names=output_names)  # fmt: skip
    model = convert(low, optimize=optimize)

    model.short_description = f"aneforge {__version__} export ({low.deployment})"
    meta = model.user_defined_metadata
    meta[MARK] = __version__  # what marks the package as aneforge's to replace
    meta["com.aneforge.deployment"] = low.deployment
    meta["com.aneforge.program_hash"] = _program_hash(program)
    path = write_package(model, path, force)
    return (path, low) if return_lowering else path


def _program_hash(program) -> str:

    return structural_hash(list(_as_program(program).outputs))


def load_mil_program(path):
    """The MIL program of a saved ``.mlpackage`` (works without a Mac): the inverse of
    the export, for checking what was written."""
    ct = _ct()
    from coremltools.converters.mil.frontend.milproto.load import load

    path = Path(path)
    spec = ct.utils.load_spec(str(path))
    weights = path / "Data" / "com.apple.CoreML" / "weights"
    return load(spec, spec.specificationVersion, file_weights_dir=str(weights))


def load_spec(path):
    """The protobuf ``Model`` spec of a saved package (feature names, types, metadata)."""
    return _ct().utils.load_spec(str(path))
