"""ONNX of every opset: models older than opset 13 are upgraded at import.

Contract (src/aneforge/io/onnx_load.py, onnx_upgrade.py): a default-domain opset below 13
is lifted to 13 in memory by ``onnx.version_converter`` (IR version raised to what opset
13 needs), the upgraded model passes the full check, and the graph carries the note
"upgraded from opset N to 13 by onnx.version_converter" (also an OnnxImportWarning). A
model the converter cannot upgrade is refused with the converter's own reason; an opset
newer than the installed onnx knows stays refused; the caller's ModelProto is untouched.

Yardstick: onnxruntime in float32 on the *original* (old-opset) model, so a conversion
that changed the meaning of a node (Softmax's pre-13 flatten-to-2D axis, Upsample's
scales, attribute axes that became inputs) would show. Models: hand-built chains of the
ops whose definition changed between opsets 7, 9 and 11 and 13, and the light models the
onnx wheel ships (opset 9, IR 3).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aneforge.io import OnnxImportError, from_onnx
from aneforge.io.onnx_errors import OnnxImportWarning
from aneforge.io.onnx_load import load_model
from aneforge.models.light import light_models, seed_weights
from conftest import FP16_UNIT_ROUNDOFF

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")

U = FP16_UNIT_ROUNDOFF
# The chain has about a dozen fp16 roundings on the way to each output (input cast,
# BatchNorm's two steps, Softmax's exp, sum and divide, a mean, a Gemm), relative to the
# output's scale.
CHAIN_TOL = 16 * U
# A seeded CNN (SqueezeNet, 26 layers of fp16 GEMMs) against float32: the bar the light
# models' report sets for it (models/light.py COSINE_BAR).
COSINE_BAR = 0.999
F = TensorProto.FLOAT
R = np.random.default_rng(0)


def f16(a):
    return np.asarray(a, np.float16).astype(np.float32)


def _init(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def chain_model(opset: int):
    """x (1, 2, 3, 4) through the ops whose signature changed before opset 13, each in
    its form at ``opset``: Upsample (attr scales at 7, input at 9) / Resize (11),
    BatchNormalization, Clip (attrs < 11), Pad (attrs < 11), Slice (attrs < 10),
    Softmax over axis 2 (flattened to 2-D before 13), ReduceMean, Squeeze / Unsqueeze
    (attr axes), Split (attr split), Reshape, Gemm and Dropout."""
    nodes, inits = [], []
    if opset < 9:
        nodes.append(helper.make_node("Upsample", ["x"], ["u"], scales=[1.0, 1.0, 2.0, 2.0]))
    elif opset < 11:
        inits.append(_init("scales", [1, 1, 2, 2]))
        nodes.append(helper.make_node("Upsample", ["x", "scales"], ["u"], mode="nearest"))
    else:
        inits += [_init("roi", []), _init("scales", [1, 1, 2, 2])]
        nodes.append(helper.make_node("Resize", ["x", "roi", "scales"], ["u"], mode="nearest"))
    c = 2
    inits += [
        _init("bn_s", R.uniform(0.5, 1.5, c)),
        _init("bn_b", R.uniform(-0.5, 0.5, c)),
        _init("bn_m", R.uniform(-0.5, 0.5, c)),
        _init("bn_v", R.uniform(0.5, 1.5, c)),
    ]
    nodes.append(
        helper.make_node("BatchNormalization", ["u", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"])
    )
    if opset < 11:
        nodes.append(helper.make_node("Clip", ["bn"], ["cl"], min=-1.5, max=2.0))
        nodes.append(
            helper.make_node("Pad", ["cl"], ["pd"], pads=[0, 0, 1, 1, 0, 0, 1, 1], value=0.5)
        )
    else:
        inits += [_init("lo", -1.5), _init("hi", 2.0)]
        nodes.append(helper.make_node("Clip", ["bn", "lo", "hi"], ["cl"]))
        inits += [_init("pads", [0, 0, 1, 1, 0, 0, 1, 1], np.int64), _init("pv", 0.5)]
        nodes.append(helper.make_node("Pad", ["cl", "pads", "pv"], ["pd"]))
    if opset < 10:
        nodes.append(helper.make_node("Slice", ["pd"], ["sl"], starts=[1], ends=[7], axes=[2]))
    else:
        for k, v in (("st", [1]), ("en", [7]), ("ax", [2])):
            inits.append(_init(k, v, np.int64))
        nodes.append(helper.make_node("Slice", ["pd", "st", "en", "ax"], ["sl"]))
    # (1, 2, 6, 10): softmax over axis 2 means over the 60 values per (n, c) before 13
    nodes.append(helper.make_node("Softmax", ["sl"], ["sm"], axis=2))
    nodes.append(helper.make_node("ReduceMean", ["sm"], ["rm"], axes=[3], keepdims=1))
    nodes.append(helper.make_node("Squeeze", ["rm"], ["sq"], axes=[3]))
    nodes.append(helper.make_node("Unsqueeze", ["sq"], ["us"], axes=[0]))
    nodes.append(helper.make_node("Split", ["us"], ["a", "b"], axis=3, split=[2, 4]))
    inits += [_init("shape", [2, 4], np.int64), _init("w", R.standard_normal((4, 3)) * 20)]
    inits.append(_init("bias", R.standard_normal(3)))
    nodes.append(helper.make_node("Reshape", ["b", "shape"], ["r"]))
    nodes.append(helper.make_node("Gemm", ["r", "w", "bias"], ["gm"], alpha=0.5))
    nodes.append(helper.make_node("Dropout", ["gm"], ["y"], ratio=0.25))
    outputs = [
        helper.make_tensor_value_info("sm", F, [1, 2, 6, 10]),
        helper.make_tensor_value_info("a", F, [1, 1, 2, 2]),
        helper.make_tensor_value_info("y", F, [2, 3]),
    ]
    x = helper.make_tensor_value_info("x", F, [1, 2, 3, 4])
    graph = helper.make_graph(nodes, f"chain{opset}", [x], outputs, inits)
    if opset < 9:  # IR 3: every initializer is also a graph input
        graph.input.extend(
            helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits
        )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3 if opset < 9 else 4 if opset < 11 else 6
    onnx.checker.check_model(model, full_check=True)
    return model


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def _import(model):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graph = from_onnx(model)
    return graph, [str(w.message) for w in caught if issubclass(w.category, OnnxImportWarning)]


@pytest.mark.parametrize("opset", [7, 9, 11])
def test_old_opset_chains_are_upgraded_and_match_onnxruntime_on_the_original(opset):
    model = chain_model(opset)
    before = model.SerializeToString()
    graph, said = _import(model)
    note = f"upgraded from opset {opset} to 13 by onnx.version_converter"
    assert any(note in w for w in said)
    assert any(note in w for w in graph.warnings)
    assert model.SerializeToString() == before  # the caller's model is untouched
    assert graph.input_names == ["x"] and graph.output_names == ["sm", "a", "y"]
    x = f16(R.standard_normal((1, 2, 3, 4)))
    want = _ort(model, {"x": x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = graph.compile()(x)
    for name, g, w in zip(graph.output_names, got, want):
        assert g.shape == w.shape, name
        scale = float(np.abs(w).max())
        err = float(np.abs(np.asarray(g, np.float64) - w).max())
        assert err <= CHAIN_TOL * scale, f"{name}: max error {err:g} at scale {scale:g}"


def test_the_softmax_axis_keeps_its_pre_13_meaning():
    """Before opset 13 Softmax(axis=2) of (1, 2, 6, 10) normalizes the 60 values of each
    channel together; from 13 it would normalize each column of 6. The upgraded import
    must sum to 1 per channel, as onnxruntime does on the original."""
    graph, _ = _import(chain_model(9))
    x = f16(R.standard_normal((1, 2, 3, 4)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sm = np.asarray(graph.compile()(x)[0], np.float64)
    per_channel = sm.sum(axis=(2, 3))
    assert np.allclose(per_channel, 1.0, atol=60 * U)  # 60 terms, each rounded once
    assert not np.allclose(sm.sum(axis=2), 1.0, atol=0.1)  # not the opset-13 meaning


def test_load_model_returns_the_note_to_a_caller_that_collects_it():
    notes: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # collected, not warned
        proto, opset, inferred = load_model(onnx, chain_model(7), notes=notes)
    assert opset == 13 and notes == [
        "from_onnx: the model was upgraded from opset 7 to 13 by onnx.version_converter"
    ]
    assert {(o.domain, o.version) for o in proto.opset_import} == {("", 13)}
    assert proto.ir_version >= 7  # opset 13's IR; the original was IR 3
    assert inferred is not None
    assert {n.op_type for n in proto.graph.node} >= {"Resize", "Softmax"}


def test_opset_13_models_carry_no_note():
    model = chain_model(11)
    up = onnx.version_converter.convert_version(model, 13)
    up.ir_version = 7
    graph, said = _import(up)
    assert not any("upgraded" in w for w in said + graph.warnings)


# ---- the light models of the onnx wheel (opset 9, IR 3) ---------------------------------

SMALL_LIGHT = ["inception_v1", "resnet50", "shufflenet", "squeezenet"]  # quick to import


@pytest.mark.parametrize("name", SMALL_LIGHT)
def test_the_wheels_light_models_import_from_their_files(name):
    path = light_models()[name]
    original = onnx.load(str(path))
    assert {(o.domain, o.version) for o in original.opset_import} == {("", 9)}
    assert original.ir_version == 3
    graph, said = _import(path)
    assert any("upgraded from opset 9 to 13" in w for w in said)
    weights = {i.name for i in original.graph.initializer}
    assert graph.input_names == [i.name for i in original.graph.input if i.name not in weights]
    assert graph.output_names == [o.name for o in original.graph.output]
    declared = original.graph.output[0].type.tensor_type.shape.dim
    assert graph.outputs[0].shape == tuple(d.dim_value for d in declared)


def test_seeded_squeezenet_at_opset_9_matches_onnxruntime_on_the_original():
    """SqueezeNet with seeded weights, still opset 9: its fp16 emulation after the
    upgrade against onnxruntime on the opset-9 model (logits exposed as an output)."""
    model = seed_weights(onnx.load(str(light_models()["squeezenet"])), seed=0)
    model.ir_version = 4  # seeding drops the initializers from the inputs: IR 4 allows it
    softmax = model.graph.node[-1]
    assert softmax.op_type == "Softmax"
    model.graph.output.append(helper.make_tensor_value_info(softmax.input[0], F, [1, 1000, 1, 1]))
    graph, said = _import(model)
    assert any("upgraded from opset 9 to 13" in w for w in said)
    x = f16(np.random.default_rng(1).standard_normal(graph.inputs[0].shape))
    want = _ort(model, {graph.input_names[0]: x})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = graph.compile()(x)
    for name, g, w in zip(graph.output_names, got, want):  # probabilities, then logits
        g, w = np.asarray(g, np.float64).ravel(), w.astype(np.float64).ravel()
        cosine = g @ w / (np.linalg.norm(g) * np.linalg.norm(w))
        assert cosine >= COSINE_BAR, f"{name}: cosine {cosine:.6f}"


# ---- refusals ---------------------------------------------------------------------------


def _bn_spatial0(opset=7):
    x = helper.make_tensor_value_info("x", F, [1, 2, 1, 1])
    y = helper.make_tensor_value_info("y", F, [1, 2, 1, 1])
    p = [_init(k, np.ones((2, 1, 1))) for k in ("s", "b", "m", "v")]
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)
    g = helper.make_graph([bn], "bn", [x], [y], p)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_a_model_the_converter_cannot_upgrade_is_refused_with_its_reason():
    model = _bn_spatial0()
    onnx.checker.check_model(model, full_check=True)  # valid at opset 7
    with pytest.raises(OnnxImportError) as err:
        from_onnx(model)
    text = str(err.value)
    assert "opset 7" in text and "onnx.version_converter cannot upgrade it to opset 13" in text
    assert "Attribute spatial must have value 1" in text  # the converter's own words
    assert "\n" not in text and ".h:" not in text  # one line, no C++ source location


def test_training_mode_dropout_is_refused_with_the_converters_reason():
    x = helper.make_tensor_value_info("x", F, [2])
    g = helper.make_graph(
        [helper.make_node("Dropout", ["x"], ["y"], is_test=0)],
        "d",
        [x],
        [helper.make_tensor_value_info("y", F, [2])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    with pytest.raises(OnnxImportError, match="opset 6.*is_test must not have value 0"):
        from_onnx(model)


def scan8_model():
    """A running sum by an opset-8 Scan, whose inputs carry a batch axis (opset 9 drops
    it): state (1, 2), sequence (1, 3, 2)."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
            helper.make_node("Identity", ["acc_out"], ["seen"]),
        ],
        "body",
        [vi("acc_in", F, [2]), vi("step", F, [2])],
        [vi("acc_out", F, [2]), vi("seen", F, [2])],
    )
    scan = helper.make_node(
        "Scan", ["", "init", "xs"], ["total", "partial"], num_scan_inputs=1, body=body
    )
    graph = helper.make_graph(
        [scan],
        "scan8",
        [vi("init", F, [1, 2]), vi("xs", F, [1, 3, 2])],
        [vi("total", F, [1, 2]), vi("partial", F, [1, 3, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 3
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_conversion_that_changes_the_interface_is_refused():
    """The converter drops an opset-8 Scan's batch axis, so the upgraded model would
    take inputs of other shapes than the user's (onnxruntime runs the original)."""
    model = scan8_model()
    feeds = {"init": np.zeros((1, 2), np.float32), "xs": np.ones((1, 3, 2), np.float32)}
    assert _ort(model, feeds)[0].tolist() == [[3.0, 3.0]]
    with pytest.raises(OnnxImportError) as err:
        from_onnx(model)
    text = str(err.value)
    assert "changed the model's interface while upgrading it from opset 8 to 13" in text
    assert "input 'init' (1, 2) of element type 1 became (2,) of element type 1" in text


def test_a_malformed_old_model_gets_the_checkers_reason_before_any_conversion():
    model = chain_model(9)
    model.graph.node[-1].output[0] = "sm"  # two writers of 'sm'
    with pytest.raises(OnnxImportError, match=r"opset 9, before any upgrade.*'sm'"):
        from_onnx(model)


@pytest.mark.parametrize("version", [0, -5])
def test_opsets_below_one_are_refused(version):
    model = chain_model(9)
    model.opset_import[0].version = version
    with pytest.raises(OnnxImportError, match=f"opset {version}; opsets start at 1"):
        from_onnx(model)


def test_an_opset_newer_than_onnx_knows_stays_refused():
    model = chain_model(11)
    newest = onnx.defs.onnx_opset_version()
    model.opset_import[0].version = newest + 1
    with pytest.raises(OnnxImportError, match=f"opset {newest + 1}.*knows opsets up to"):
        from_onnx(model)
