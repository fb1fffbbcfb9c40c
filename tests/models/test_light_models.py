"""The onnx wheel's light_* CNNs: import, compile, estimate, emulate, compare.

The suite runs the small ones (SqueezeNet end to end, with seeded and with the shipped
stub weights); ``bench/models.py`` covers all nine. Yardsticks: the float64 reference
executor, onnxruntime in float32, and the wheel's stored expected output.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aneforge.graph.walk import topological_order
from aneforge.models import light_models, run_light_model
from aneforge.models.light import (
    COSINE_BAR,
    FAMILY_TARGETS,
    FILES,
    FP16_MAX,
    import_model,
    max_activation,
    model_inputs,
    prepare_model,
    seed_weights,
)

STORED_OUTPUT_ATOL = 1e-6  # ORT float32 vs the wheel's float32 expected output


def test_the_wheel_ships_all_nine_as_stubs():
    models = light_models()
    assert set(models) == set(FILES)
    for path in models.values():
        m = onnx.load(str(path))
        stubs = [n for n in m.graph.node if n.op_type == "ConstantOfShape"]
        fills = {float(numpy_helper.to_array(a.t).ravel()[0]) for n in stubs for a in n.attribute}
        assert stubs and fills == {np.float32(0.02)}  # no real conv weights anywhere


def test_seeded_weights_are_deterministic_and_keep_activations_in_fp16_range():
    base = onnx.load(str(light_models()["squeezenet"]))
    a, b = seed_weights(base, seed=3), seed_weights(base, seed=3)
    assert a.SerializeToString() == b.SerializeToString()
    assert seed_weights(base, seed=4).SerializeToString() != a.SerializeToString()
    model, info = prepare_model("squeezenet", weights="seeded")
    assert info["opset"] == 9 and max(o.version for o in model.opset_import) >= 13
    peak, _ = max_activation(model, model_inputs(model, "seeded"))
    assert 1.0 < peak < FP16_MAX / 100
    stub, _ = prepare_model("squeezenet", weights="stub")
    stub_peak, _ = max_activation(stub, model_inputs(stub, "dummy"))
    assert stub_peak > FP16_MAX  # the 0.02 fills blow past fp16


@pytest.fixture(scope="module")
def squeezenet_seeded():
    return run_light_model("squeezenet", weights="seeded")


def test_squeezenet_seeded_matches_float64_and_onnxruntime(squeezenet_seeded):
    rep = squeezenet_seeded
    assert rep["import"]["ok"] and rep["status"] == "ok"
    (out,) = rep["outputs"].values()
    assert out["finite"] and out["shape"] == (1, 1000, 1, 1)
    assert out["vs_float64"]["cosine"] >= COSINE_BAR
    assert out["vs_ort"]["cosine"] >= COSINE_BAR
    assert out["top1_agrees_float64"]
    # onnxruntime float32 sits far closer to float64 than the fp16 emulation does
    assert out["ort_vs_float64"]["rel_l2"] < out["vs_float64"]["rel_l2"]


def test_squeezenet_preflights_and_estimates_on_every_family(squeezenet_seeded):
    rows = squeezenet_seeded["targets"]
    assert sorted(r["family"] for r in rows.values()) == [1, 2, 3, 4, 5]
    assert set(rows) == set(FAMILY_TARGETS)
    assert not rows["h11"]["compiles"] and "no MIL" in rows["h11"]["why_not"]
    times = [rows[a]["estimate_us"] for a in ("h13", "h14", "h15", "h17s")]
    assert all(t is not None and t > 0 for t in times)
    assert times[0] > times[-1]  # the M1-class engine is slower than the M5-class one
    assert squeezenet_seeded["compile"]["flops"] > 1e8


def test_squeezenet_stub_weights_overflow_fp16_and_are_classified():
    rep = run_light_model("squeezenet", weights="stub", inputs="dummy")
    assert rep["status"] == "fp16_range"
    (out,) = rep["outputs"].values()
    assert not out["finite"]
    assert rep["activation_max_abs"]["value"] > FP16_MAX
    # onnxruntime reproduces the wheel's expected output: the yardstick is sound
    assert rep["ort_vs_stored"]["max_abs"] <= STORED_OUTPUT_ATOL


def test_unknown_model_names_the_available_ones():
    from aneforge.errors import OptionError

    with pytest.raises(OptionError, match="resnet50"):
        run_light_model("resnet5")


def test_squeezenet_keeps_its_onnx_node_and_output_names():
    model, _ = prepare_model("squeezenet", weights="stub", expose_logits=False)
    graph = import_model(model)
    want = {n.name: n.op_type for n in model.graph.node if n.op_type in ("Conv", "Relu")}
    assert len(want) == 26 + 26  # every conv and its relu, named by the converter
    got = {n.name: n.op for n in topological_order(graph.outputs) if n.name in want}
    assert got == {name: op.lower() for name, op in want.items()}
    assert graph.output_names == ["softmaxout_1"]
    assert graph.compile(opt=0).output_names == ("softmaxout_1",)
