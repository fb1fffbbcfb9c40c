"""The ``light_*`` CNNs shipped in the ``onnx`` wheel, end to end on aneforge.

``onnx/backend/test/data/light/`` holds nine ImageNet classifiers (AlexNet, DenseNet-121,
Inception v1 and v2, ResNet-50, ShuffleNet, SqueezeNet, VGG-19, ZFNet-512) at opset 9
with their full topology but **no real weights**: every conv and gemm weight (and most
batch-norm parameters) is a ``ConstantOfShape`` node filling its tensor with 0.02; that
is what makes them light. The ONNX backend runner feeds each one ``arange(n) / n`` and
compares with the stored ``light_*_output_0.pb``.

Those stub weights are a numerics trap. With every weight 0.02 each conv multiplies the
activation scale by about ``0.02 * fan_in`` (11.5 for 3x3x64 inputs), so without
normalization the activations grow geometrically: on the runner's input the float32
logits reach 3.6e12 (AlexNet), 1.3e19 (ResNet-50) and 3.7e31 (VGG-19), far beyond
fp16's 65504 (the softmax of those equal logits is the uniform 0.001 stored as the
expected output). On the engine those models overflow to inf and end in NaN, a failure
of fp16's range, not of the emulator; the report classifies it as ``fp16_range`` with
the largest float32 intermediate (onnxruntime) as evidence. DenseNet-121, Inception v2
and ShuffleNet stay in range with the stub weights.

``weights="seeded"`` replaces every stub (and the few real batch-norm statistics, which
do not fit random convolutions) by seeded, fan-in-scaled random values chosen by the
role of the consumer (conv/gemm weights He-normal, batch-norm statistics near 1 and 0,
scale/bias layers near 1 and 0): the largest intermediate of the nine models is then
504 (Inception v1's logits), well inside fp16, as in a trained network. That variant
measures what the engine's arithmetic does to a real-sized network.

``run_light_model`` imports a model with ``aneforge.io.onnx_import.from_onnx`` (after
``onnx.version_converter`` lifts it from opset 9 to 13, the importer's floor, through
:func:`aneforge.io.onnx_upgrade.upgrade_opset`, as ``from_onnx`` would), compiles
it, preflights and estimates it on one target per capability family (family 1 has no
MIL path, so nothing compiles there), runs it on the emulator with a seeded input, and
compares every output with the float64 reference executor and with onnxruntime in
float32. A final ``Softmax``'s input (the logits) is exposed as an extra output, since
the probabilities alone hide scale errors.

Example:
    >>> from aneforge.models.light import light_models
    >>> sorted(light_models())[:3]
    ['alexnet', 'densenet121', 'inception_v1']
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from ..compiler.preflight import preflight
from ..cost.estimate import estimate
from ..errors import AneforgeError, OptionError
from ..io.onnx_import import from_onnx
from ..io.onnx_load import inference_skeleton
from ..io.onnx_upgrade import upgrade_opset
from ..metrics import compare
from ..reference import reference
from ..targets import resolve_target

FILES = {
    "alexnet": "light_bvlc_alexnet.onnx",
    "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx",
    "inception_v2": "light_inception_v2.onnx",
    "resnet50": "light_resnet50.onnx",
    "shufflenet": "light_shufflenet.onnx",
    "squeezenet": "light_squeezenet.onnx",
    "vgg19": "light_vgg19.onnx",
    "zfnet512": "light_zfnet512.onnx",
}
# One target per capability family (1..5): the family-1 one shows that nothing compiles.
FAMILY_TARGETS = ("h11", "h13", "h14", "h15", "h17s")
IMPORT_OPSET = 13  # the importer's floor (opsets 13 and newer)
FP16_MAX = 65504.0
# Acceptance of an emulated output against float64 (seeded weights): cosine >= 0.999, the
# bar the issue sets for MiniLM, and a relative L2 error below 5%: about sqrt(depth)
# times the 2**-11 rounding of each op, times the fan-in growth of a conv's error.
COSINE_BAR = 0.999
REL_L2_BAR = 0.05


def light_dir() -> Path:
    """The ``light`` directory of the installed ``onnx`` package (its code is not run)."""
    spec = importlib.util.find_spec("onnx")
    if spec is None or spec.origin is None:
        raise OptionError("light models: the 'onnx' package is not installed (pip install onnx)")
    return Path(spec.origin).resolve().parent / "backend" / "test" / "data" / "light"


def light_models() -> dict[str, Path]:
    """``{name: path}`` of the light models present in the installed ``onnx`` wheel.

    Example:
        >>> light_models()["resnet50"].name
        'light_resnet50.onnx'
    """
    root = light_dir()
    return {name: root / f for name, f in sorted(FILES.items()) if (root / f).is_file()}


def _path(name) -> Path:
    models = light_models()
    if name not in models:
        raise OptionError(
            f"light model '{name}' not found; the installed onnx wheel has "
            f"{', '.join(models) or 'none'}"
        )
    return models[name]


# ---- model preparation -------------------------------------------------------------------
def _constants(model) -> dict:
    """Values of initializers and Constant nodes, by name."""
    from onnx import numpy_helper

    values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute:
            attr = node.attribute[0]
            if attr.name == "value":
                values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _consumers(model) -> dict:
    found: dict[str, list] = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            found.setdefault(name, []).append((node, i))
    return found


PASS_THROUGH = ("Unsqueeze", "Reshape", "Identity", "Squeeze", "Cast")
WEIGHT_CONSUMERS = ("Conv", "Gemm", "BatchNormalization", "Mul", "Add")


def _role(name, consumers) -> tuple[str, int, object]:
    """(op, input index, node) of the first consumer that is not a pass-through."""
    seen = set()
    while name not in seen:
        seen.add(name)
        uses = consumers.get(name, [])
        if not uses:
            return ("", -1, None)
        node, i = uses[0]
        if node.op_type in PASS_THROUGH and i == 0:
            name = node.output[0]
            continue
        return (node.op_type, i, node)
    return ("", -1, None)


def _is_residual_join(node, consumers, constant) -> bool:
    """Does ``node``'s output meet another computed tensor in a Sum/Add (a residual)?"""
    for user, _ in consumers.get(node.output[0], []):
        if user.op_type in ("Sum", "Add"):
            computed = [name for name in user.input if name not in constant]
            if len(computed) >= 2:
                return True
    return False


def _scaled(values, scale):
    """``values * scale`` in place: the same numbers without a second array (VGG-19's
    first fully connected layer draws 103M of them)."""
    values *= scale
    return values


def _seeded_value(rng, shape, role, fill, residual=False):
    op, i, node = role
    shape = tuple(int(d) for d in shape)
    if op == "Conv" and i == 1:
        fan_in = int(np.prod(shape[1:]))
        return _scaled(rng.standard_normal(shape), np.sqrt(2.0 / fan_in))
    if op == "Gemm" and i == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans_b and len(shape) == 2 else shape[0]
        return _scaled(rng.standard_normal(shape), np.sqrt(2.0 / fan_in))
    if op in ("Conv", "Gemm") and i == 2:
        return rng.standard_normal(shape) * 0.05
    if op == "BatchNormalization":
        if i == 1:  # scale: small where the branch joins a residual sum (as trained)
            return rng.uniform(0.1, 0.3, shape) if residual else rng.uniform(0.6, 1.2, shape)
        if i == 4:  # variance
            return rng.uniform(0.6, 1.2, shape)
        return rng.standard_normal(shape) * 0.1  # bias, mean
    if op in ("Mul", "Div"):
        return rng.uniform(0.8, 1.2, shape)
    if op in ("Add", "Sub", "Sum"):
        return rng.standard_normal(shape) * 0.1
    return np.full(shape, fill)


def seed_weights(model, seed: int = 0):
    """A copy of ``model`` whose weights are seeded, role-aware random values.

    Every ``ConstantOfShape`` stub becomes an initializer, and every float initializer
    that feeds a Conv, Gemm, BatchNormalization or scale layer is redrawn too (some
    light models carry a few real batch-norm statistics that do not fit random convs).
    Roles: conv/gemm weights He-normal (``sqrt(2 / fan_in)``), biases ~0.05, batch-norm
    scale U(0.6, 1.2) (U(0.1, 0.3) where the branch joins a residual sum, like a trained
    ResNet's last gamma), variance U(0.6, 1.2), mean and shift ~0.1, scale layers
    U(0.8, 1.2). Deterministic in ``seed``.

    Example:
        >>> import onnx
        >>> m = seed_weights(onnx.load(light_models()["squeezenet"]))
        >>> sum(n.op_type == "ConstantOfShape" for n in m.graph.node)
        0
    """
    from onnx import numpy_helper

    out = type(model)()
    out.CopyFrom(model)
    values, consumers = _constants(out), _consumers(out)
    constant = set(values) | {
        o for n in out.graph.node if n.op_type == "ConstantOfShape" for o in n.output
    }
    constant |= {  # pass-throughs of constants (Unsqueeze of a weight, ...)
        n.output[0] for n in out.graph.node if n.op_type in PASS_THROUGH and n.input[0] in constant
    }
    rng = np.random.default_rng(seed)

    def redraw(name, shape, fill):
        role = _role(name, consumers)
        bn = role[2]
        residual = bn is not None and role[0] == "BatchNormalization"
        residual = residual and _is_residual_join(bn, consumers, constant)
        return _seeded_value(rng, shape, role, fill, residual).astype(np.float32)

    keep, new_inits, replaced = [], {}, set()
    for node in out.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in values:
            keep.append(node)
            continue
        fill = 0.0
        for attr in node.attribute:
            if attr.name == "value":
                fill = float(numpy_helper.to_array(attr.t).ravel()[0])
        new_inits[node.output[0]] = redraw(node.output[0], values[node.input[0]], fill)
    for init in out.graph.initializer:
        arr = values[init.name]
        weight_like = _role(init.name, consumers)[0] in WEIGHT_CONSUMERS
        if arr.dtype.kind == "f" and arr.size > 1 and weight_like:
            new_inits[init.name] = redraw(init.name, arr.shape, 0.0)
            replaced.add(init.name)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    live = [i for i in out.graph.initializer if i.name not in replaced]
    live += [numpy_helper.from_array(v, k) for k, v in new_inits.items()]
    used = {name for n in out.graph.node for name in n.input}
    used |= {o.name for o in out.graph.output}
    del out.graph.initializer[:]
    out.graph.initializer.extend(i for i in live if i.name in used)
    graph_inputs = [i for i in out.graph.input if i.name in used and i.name not in new_inits]
    del out.graph.input[:]
    out.graph.input.extend(graph_inputs)
    return out


def prepare_model(name, weights: str = "stub", seed: int = 0, expose_logits: bool = True):
    """The ModelProto that :func:`run_light_model` imports: opset lifted to 13, stubs
    optionally seeded, and a final Softmax's input added as an output named ``logits``.

    Returns ``(model, info)`` with ``info`` the original opset and the exposed names.
    """
    import onnx

    if weights not in ("stub", "seeded"):
        raise OptionError(f"light models: weights must be 'stub' or 'seeded', got {weights!r}")
    model = onnx.load(str(_path(name)))
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    info = {"opset": opset, "ops": dict(Counter(n.op_type for n in model.graph.node))}
    if opset < IMPORT_OPSET:  # the importer's own upgrade (it would do the same at import)
        model = upgrade_opset(onnx, model, opset, IMPORT_OPSET)
    if weights == "seeded":
        model = seed_weights(model, seed)
    last = model.graph.node[-1] if model.graph.node else None
    info["logits"] = None
    if expose_logits and last is not None and last.op_type == "Softmax":
        have = {o.name for o in model.graph.output}
        if last.input[0] not in have:
            model.graph.output.append(
                onnx.helper.make_tensor_value_info(last.input[0], onnx.TensorProto.FLOAT, None)
            )
            info["logits"] = last.input[0]
            _infer_output_types(onnx, model)
    return model, info  # checked in full by from_onnx (and by onnxruntime) when imported


def _infer_output_types(onnx, model) -> None:
    """Fill in the types of ``model``'s outputs from ONNX shape inference (run on the
    model without its weights' bytes: :func:`~aneforge.io.onnx_load.inference_skeleton`)."""
    inferred = onnx.shape_inference.infer_shapes(inference_skeleton(onnx, model))
    for out, known in zip(model.graph.output, inferred.graph.output):
        out.type.CopyFrom(known.type)


def model_inputs(
    model, kind: str = "seeded", seed: int = 0, round_fp16: bool = True
) -> dict[str, np.ndarray]:
    """Input arrays by ONNX name: ``'seeded'`` standard normal (an ImageNet-normalized
    image's scale) or ``'dummy'`` (``arange(n) / n``, the ONNX backend runner's input).
    With ``round_fp16`` values are rounded to fp16 (the engine's input cast) and returned
    as float32, so that every executor sees the same numbers."""
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        if kind == "dummy":
            x = np.arange(n, dtype=np.float64).reshape(shape) / n
        elif kind == "seeded":
            x = rng.standard_normal(shape)
        else:
            raise OptionError(f"light models: input must be 'seeded' or 'dummy', got {kind!r}")
        feeds[vi.name] = (x.astype(np.float16) if round_fp16 else x).astype(np.float32)
    return feeds


# ---- the pipeline ------------------------------------------------------------------------
def import_model(model):
    """``aneforge.io.onnx_import.from_onnx(model)``, the other helper's importer."""

    return from_onnx(model)


def ort_session(model, threads: int | None = None):
    """An onnxruntime CPU session of ``model`` (float32), or None without onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if threads:
        opts.intra_op_num_threads = int(threads)
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def max_activation(model, feeds) -> tuple[float, str] | None:
    """Largest |value| of any float tensor of ``model`` in float32 (onnxruntime), with
    its name: the evidence for an fp16 range failure. None without onnxruntime."""
    scan = type(model)()
    scan.CopyFrom(model)
    have = {o.name for o in scan.graph.output}
    for vi in scan.graph.value_info:
        if vi.type.tensor_type.elem_type == 1 and vi.name not in have:
            scan.graph.output.append(vi)
    sess = ort_session(scan)
    if sess is None:
        return None
    names = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, feeds)
    best = (0.0, "")
    for name, value in zip(names, outs):
        if value.size:
            with np.errstate(invalid="ignore"):
                m = float(np.nanmax(np.abs(value)))
            best = max(best, (m, name))
    return best


def _program_args(prog, graph, feeds):
    by_tensor = {id(t): n for t, n in zip(graph.inputs, graph.input_names)}
    try:
        return [feeds[by_tensor[id(t)]] for t in prog.inputs]
    except KeyError:  # the program's inputs are matched by name instead
        return [feeds[t.name] for t in prog.inputs]


def _family_rows(prog, targets):

    rows = {}
    for arch in targets:
        tgt = resolve_target(arch)
        report = preflight(list(prog.outputs), tgt)
        blocking = [str(v) for v in report.blocking]
        row = {"family": tgt.family, "compiles": not blocking, "estimate_us": None}
        if blocking:
            row["why_not"] = blocking[0] if len(blocking) == 1 else "; ".join(blocking[:3])
        else:
            row["estimate_us"] = float(estimate(prog, target=tgt))
        rows[tgt.arch] = row
    return rows


def _classify(outputs) -> str:
    """'ok', 'fp16_range' (emulated non-finite where float64 leaves fp16's range) or
    'mismatch'."""
    status = "ok"
    for o in outputs.values():
        if not o["finite"]:
            if o["float64_max_abs"] > FP16_MAX or o.get("activation_max_abs", 0) > FP16_MAX:
                status = "fp16_range"
                continue
            return "mismatch"
        c = o["vs_float64"]
        if c["cosine"] < COSINE_BAR or c["rel_l2"] > REL_L2_BAR:
            return "mismatch"
    return status


class LightBuild:
    """A light model prepared, imported and compiled (what :func:`build_light` returns).

    Attributes: ``name``, ``model`` (the ModelProto imported), ``info`` (original opset,
    op counts, the exposed logits name), ``graph`` (the importer's result), ``program``
    (compiled), ``import_seconds``, ``compile_seconds``, ``import_warnings``.
    """

    def __init__(self, name, model, info):
        self.name, self.model, self.info = name, model, info
        self.graph = self.program = None
        self.import_seconds = self.compile_seconds = 0.0
        self.import_warnings: list[str] = []

    def args(self, feeds) -> list[np.ndarray]:
        """``feeds`` (by ONNX input name) in the program's input order."""
        return _program_args(self.program, self.graph, feeds)


def build_light(name, weights: str = "stub", seed: int = 0) -> LightBuild:
    """Prepare (:func:`prepare_model`), import and compile one light model, timed.

    Import errors (``AneforgeError``) propagate, listing what the importer lacks.
    """
    model, info = prepare_model(name, weights=weights, seed=seed)
    b = LightBuild(name, model, info)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b.graph = import_model(model)
    b.import_seconds = time.perf_counter() - t0
    b.import_warnings = [str(w) for w in getattr(b.graph, "warnings", [])]
    b.import_warnings += [str(w.message) for w in caught]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b.program = b.graph.compile()
    b.compile_seconds = time.perf_counter() - t0
    return b


def run_light_model(
    name,
    target_families=FAMILY_TARGETS,
    weights: str = "stub",
    inputs: str = "seeded",
    seed: int = 0,
    use_ort: bool = True,
    build: LightBuild | None = None,
) -> dict:
    """Import, compile, preflight/estimate per family, emulate and compare one model.

    Args:
        name: a key of :func:`light_models` (``'resnet50'``, ...).
        target_families: targets to preflight and estimate on (default one per family).
        weights: ``'stub'`` (the shipped 0.02 fills) or ``'seeded'`` (module docstring).
        inputs: ``'seeded'`` (normal) or ``'dummy'`` (the ONNX runner's ``arange/n``).
        use_ort: also run onnxruntime in float32 where it is installed.
        build: a :func:`build_light` result to reuse (same name and weights).

    Returns:
        A dict: ``model``, ``weights``, ``inputs``, ``opset``, ``ops`` (ONNX op counts),
        ``import`` (ok, seconds, warnings, error), ``compile`` (seconds, op_count,
        regions, cuts, flops), ``targets`` (per arch: family, compiles, estimate_us,
        why_not), ``estimate_seconds``, ``emulate_seconds``, ``reference_seconds``,
        ``ort_seconds``, ``outputs`` (per output: shape, finite, float64_max_abs,
        ``vs_float64`` / ``vs_ort`` / ``ort_vs_float64`` as :func:`aneforge.compare`
        dicts, top-1 agreement), ``activation_max_abs`` (largest float32 intermediate,
        when an output is non-finite), ``status`` ('ok', 'fp16_range', 'mismatch' or
        'import_failed') and, for stub weights, ``ort_vs_stored`` (onnxruntime on the
        runner's input against the wheel's expected output).
    """

    report = {"model": name, "weights": weights, "inputs": inputs, "status": "ok"}
    if build is None:
        try:
            build = build_light(name, weights, seed)
        except AneforgeError as exc:
            _, info = prepare_model(name, weights=weights, seed=seed)
            report.update(opset=info["opset"], ops=info["ops"], status="import_failed")
            report["import"] = {"ok": False, "error": str(exc)}
            return report
    model, info, prog = build.model, build.info, build.program
    report.update(opset=info["opset"], ops=info["ops"])
    report["import"] = {
        "ok": True,
        "seconds": build.import_seconds,
        "warnings": build.import_warnings,
        "error": None,
    }
    report["compile"] = {
        "seconds": build.compile_seconds,
        "op_count": prog.op_count,
        "regions": len(prog.fused_regions),
        "cuts": len(prog.cuts),
        "flops": prog.flops,
    }
    t0 = time.perf_counter()
    report["targets"] = _family_rows(prog, target_families)
    report["estimate_seconds"] = time.perf_counter() - t0
    feeds = model_inputs(model, inputs, seed)
    args = build.args(feeds)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        emulated = prog(*args)
    report["emulate_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = reference(prog, *args)
    report["reference_seconds"] = time.perf_counter() - t0
    if len(prog.outputs) == 1:
        emulated, exact = (emulated,), (exact,)
    ort_outs, sess = None, ort_session(model) if use_ort else None
    if sess is not None:
        t0 = time.perf_counter()
        ort_outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        report["ort_seconds"] = time.perf_counter() - t0
    names = list(getattr(build.graph, "output_names", []) or [])
    names = names or [o.name for o in model.graph.output]
    outputs = {}
    for out_name, got, want in zip(names, emulated, exact):
        row = {
            "shape": tuple(np.shape(got)),
            "finite": bool(np.isfinite(got).all()),
            "float64_max_abs": float(np.max(np.abs(want))) if np.size(want) else 0.0,
            "vs_float64": compare(got, want),
        }
        if np.size(got) > 1 and np.shape(got)[0] == 1:
            same = np.argmax(got) == np.argmax(want)
            row["top1_agrees_float64"] = bool(row["finite"] and same)
        if ort_outs is not None and out_name in ort_outs:
            row["vs_ort"] = compare(got, ort_outs[out_name])
            row["ort_vs_float64"] = compare(ort_outs[out_name], want)
        outputs["logits" if out_name == info["logits"] else out_name] = row
    report["outputs"] = outputs
    if any(not o["finite"] for o in outputs.values()) and sess is not None:
        peak = max_activation(model, feeds)
        if peak is not None:
            report["activation_max_abs"] = {"value": peak[0], "tensor": peak[1]}
            for o in outputs.values():
                o["activation_max_abs"] = peak[0]
    report["status"] = _classify(outputs)
    if weights == "stub" and sess is not None:
        stored = _stored_output(name)
        first = sess.run(None, model_inputs(model, "dummy", seed, round_fp16=False))[0]
        if stored is not None and stored.shape == first.shape:
            report["ort_vs_stored"] = compare(first, stored)
    return report


def _stored_output(name):
    from onnx import TensorProto, numpy_helper

    path = _path(name).with_name(_path(name).stem + "_output_0.pb")
    if not path.is_file():
        return None
    tensor = TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)
