"""Names from ONNX to Core ML: node names, graph output names, MIL op names.

from_onnx names each aneforge node after the ONNX node producing its value
(src/aneforge/io/onnx_graph.py) and keeps the graph output names; compile carries them
as ``Program.output_names``; the Core ML export names its outputs by them and its MIL
ops by the layer names. The packages are read back on Linux (no prediction needed).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import aneforge as af
from aneforge.graph.walk import topological_order
from aneforge.io.coreml_export import export_coreml, load_mil_program, load_spec, lower_program

R = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _classifier():
    """MatMul -> Add -> Relu -> Softmax, the issue's example (output 'softmaxout_1')."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "B"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["a"], name="act"),
        helper.make_node("Softmax", ["a"], ["softmaxout_1"], name="probs"),
    ]
    inits = [_init("W", R.standard_normal((4, 3))), _init("B", R.standard_normal(3))]
    return _model(nodes, [_vi("x", (2, 4))], [_vi("softmaxout_1", (2, 3))], inits)


def _import(model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return af.from_onnx(model, **kw)


def _compile(graph, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graph.compile(**kw)


def _by_name(outputs):
    return {n.name: n for n in topological_order(list(outputs)) if n.op != "input"}


def _mil_ops(path):
    ops = load_mil_program(path).functions["main"].operations
    return [op for op in ops if not op.op_type.startswith("const")]


def test_onnx_node_and_output_names_reach_the_core_ml_package(tmp_path):
    graph = _import(_classifier())
    named = _by_name(graph.outputs)
    assert {k: v.op for k, v in named.items()} == {
        "W": "weight", "fc": "matmul", "B": "weight", "bias": "add", "act": "relu",
        "probs": "softmax",
    }  # fmt: skip
    assert graph.input_names == ["x"] and graph.inputs[0].name == "x"
    assert graph.output_names == ["softmaxout_1"]
    prog = _compile(graph)
    assert prog.output_names == ("softmaxout_1",)
    assert [prog.layer_name(n) for n in prog.compute_nodes] == ["fc", "bias", "act", "probs"]
    path = export_coreml(prog, tmp_path / "m.mlpackage")
    spec = load_spec(path)
    assert [o.name for o in spec.description.output] == ["softmaxout_1"]
    assert [i.name for i in spec.description.input] == ["x"]
    ops = _mil_ops(path)
    assert [(op.op_type, op.name) for op in ops] == [
        ("matmul", "fc"), ("add", "bias"), ("relu", "act"), ("softmax", "probs"),
    ]  # fmt: skip
    assert ops[-1].outputs[0].name == "softmaxout_1"  # the op keeps its layer name
    # an explicit output_names still wins
    again = export_coreml(prog, tmp_path / "n.mlpackage", output_names=["scores"])
    assert [o.name for o in load_spec(again).description.output] == ["scores"]


def test_names_survive_every_opt_level_from_onnx():
    graph = _import(_classifier())
    for opt in ("routes", 0, 1):
        prog = _compile(graph, opt=opt)
        assert {"fc", "bias", "act", "probs"} <= set(prog.layer_names.values()), opt
        assert prog.output_names == ("softmaxout_1",)


def test_an_unnamed_node_is_named_by_its_first_output():
    nodes = [helper.make_node("Relu", ["x"], ["relu_out"]), helper.make_node("Exp", ["relu_out"],
                                                                               ["y"])]  # fmt: skip
    graph = _import(_model(nodes, [_vi("x", (3,))], [_vi("y", (3,))]))
    assert graph.outputs[0].name == "y" and graph.outputs[0].srcs[0].name == "relu_out"


def test_a_multi_op_node_names_its_last_node_and_prefixes_the_inner_ones():
    nodes = [helper.make_node("Gemm", ["x", "W"], ["y"], name="gemm", transA=1, alpha=2.0)]
    model = _model(nodes, [_vi("x", (4, 2))], [_vi("y", (2, 3))], [_init("W", np.ones((4, 3)))])
    (y,) = _import(model).outputs
    assert (y.op, y.name) == ("mul", "gemm")
    inner = {n.name: n.op for n in topological_order([y]) if n.name and n.op != "weight"}
    assert inner["gemm/transpose"] == "transpose" and "gemm/matmul" in inner


def test_function_bodies_multi_output_nodes_and_pass_throughs():
    nodes = [
        helper.make_node("MeanVarianceNormalization", ["x"], ["mvn_out"], name="mvn"),
        helper.make_node("TopK", ["mvn_out", "k"], ["vals", "idx"], name="top", axis=-1),
        helper.make_node("Identity", ["vals"], ["same"], name="copy"),
    ]
    model = _model(
        nodes,
        [_vi("x", (1, 2, 3, 4))],
        [
            _vi("same", (1, 2, 3, 2)),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 2, 3, 2]),
            _vi("mvn_out", (1, 2, 3, 4)),
        ],
        [numpy_helper.from_array(np.array([2], np.int64), "k")],
    )
    graph = _import(model)
    same, idx, mvn = graph.outputs
    assert mvn.name == "mvn"  # the function body's last node carries the node's name
    inner = [n.name for n in topological_order([mvn]) if n.op not in ("input", "weight")]
    assert all(name.startswith("mvn/") for name in inner[:-1]) and inner[-1] == "mvn"
    assert (same.name, idx.name) == ("top", "top/idx")  # Identity names nothing
    assert graph.output_names == ["same", "idx", "mvn_out"]
    prog = _compile(graph)
    assert prog.output_names == ("same", "idx", "mvn_out")
    assert len(set(prog.layer_names.values())) == len(prog.nodes)


def test_the_import_is_still_deterministic_with_names():
    model = _classifier()
    a, b = _import(model), _import(model)
    pa, pb = _compile(a, opt=0), _compile(b, opt=0)
    assert list(pa.layer_names.values()) == list(pb.layer_names.values())
    text = [re.sub(r"block\d+", "block", str(lower_program(p).program)) for p in (pa, pb)]
    assert text[0] == text[1]  # coremltools numbers its blocks process-wide


# ---- Core ML names from the graph API -----------------------------------------------------


def test_output_features_take_the_output_names_made_safe_and_unique():
    x = af.input((3,), name="x")
    outs = [af.relu(x, name="probs:0"), af.exp(x, name="probs:0"), x.sigmoid(), x.tanh()]
    prog = af.compile(outs, output_names=[None, None, None, "output_2"])
    low = lower_program(prog)
    assert low.output_names == ["probs_0", "probs_0_", "output_2", "output_2_"]
    assert lower_program(outs).output_names == ["probs_0", "probs_0_", "output_2", "output_3"]


def test_mil_names_are_unique_when_layer_names_meet_helper_names(tmp_path):
    x = af.input((2, 8), name="x")
    h = af.relu(x, name="mm_mm")  # the name of the next layer's helper matmul
    y = af.matmul(h, np.ones(8), name="mm")  # a 1-D weight: helpers mm_col, mm_mm
    path, low = export_coreml(y, tmp_path / "m.mlpackage", output_names=["out"],
                              return_lowering=True)  # fmt: skip
    ops = load_mil_program(path).functions["main"].operations
    names = [v.name for op in ops for v in op.outputs]
    assert len(names) == len(set(names))
    assert [rec.name for rec in low.nodes] == ["mm_mm", "mm"]
    by_type = {op.op_type: op.name for op in ops if not op.op_type.startswith("const")}
    assert by_type == {"relu": "mm_mm", "matmul": "mm_mm_", "squeeze": "mm"}  # later renamed
    assert load_spec(path).description.output[0].name == "out"


@pytest.mark.parametrize("example", ["small_cnn", "transformer_block"])
def test_unnamed_examples_keep_generated_layer_names(example):
    _, y = getattr(af.nn, example)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile(y)
    low = lower_program(prog)
    assert low.output_names == ["output_0"]
    computed = [prog.layer_name(n) for n in prog.compute_nodes]
    assert [rec.name for rec in low.nodes] == computed
