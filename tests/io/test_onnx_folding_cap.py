"""Bounded import-time folding (io/onnx_fold.py) and deep graphs (iterative walks).

Yardsticks: onnxruntime in float32 for what a model computes; for long chains of
constant arithmetic, NumPy float16 step by step (each elementwise op rounded once to
fp16, as the emulator folds it), which both the folded constants and the ops left on
the engine must match bit for bit.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_onnx_integer_inputs import (  # the models are built there
    FP16_COSINE,
    SHAPES,
    TinyBert,
    _cosine,
    _export,
    _feeds,
)

from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.tensor import integer_feed
from aneforge.io import from_onnx
from aneforge.io.onnx_fold import (
    DEFAULT_BUDGET,
    ENV_BUDGET,
    NODE_ELEMENTS,
    FoldBudget,
    fold_work,
    resolve_budget,
)
from aneforge.io.onnx_import import OnnxImportError, OnnxImportWarning
from aneforge.io.onnx_values import Host

F32 = TensorProto.FLOAT
DEEP = 3000  # past Python's default recursion limit of 1000, thrice


def _chain(n: int, width: int = 4):
    """``x`` through ``n`` nodes cycling Add 0.5, Mul 0.75, Sub 0.25, then Relu."""
    nodes, prev = [], "x"
    ops = (("Add", "a"), ("Mul", "m"), ("Sub", "s"))
    for i in range(n):
        op, c = ops[i % 3]
        nodes.append(helper.make_node(op, [prev, c], [f"v{i}"], name=f"n{i}"))
        prev = f"v{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    inits = [
        numpy_helper.from_array(np.array([v], np.float32), k)
        for k, v in (("a", 0.5), ("m", 0.75), ("s", 0.25))
    ]
    vi = [helper.make_tensor_value_info(k, F32, [1, width]) for k in ("x", "y")]
    g = helper.make_graph(nodes, "chain", vi[:1], vi[1:], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _chain_fp16(x, n: int) -> np.ndarray:
    """The chain in NumPy float16, one rounding per op."""
    v = np.asarray(x, np.float16)
    for i in range(n):
        c = (np.float16(0.5), np.float16(0.75), np.float16(0.25))[i % 3]
        v = (v + c, v * c, v - c)[i % 3].astype(np.float16)
    return np.maximum(v, np.float16(0))


X = np.array([[1.5, -2.0, 7.25, 0.125]], np.float32)


def test_a_deep_chain_on_the_engine_imports_and_runs():
    model = _chain(DEEP)
    prog = from_onnx(model).compile(opt=0)
    assert prog.op_count == DEEP + 1
    got = prog(X)
    assert np.array_equal(got, _chain_fp16(X, DEEP).astype(np.float32))
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": X})[0]
    assert np.allclose(got, want, rtol=0.01, atol=0.01)


def test_a_deep_chain_of_constants_folds_in_fp16_without_recursing():
    graph = from_onnx(_chain(DEEP), constants={"x": X})
    (out,) = graph.outputs
    assert out.op == "weight"  # 3000 links of recipe, rebuilt with an explicit stack
    assert np.array_equal(out.value, _chain_fp16(X, DEEP))
    part = graph.partition
    assert part.folded == DEEP + 1 and part.engine_ops == 0 and not part.left
    assert part.folded_work == (DEEP + 1) * X.size  # elementwise: its output elements
    assert len(repr(Host(np.zeros(2), recipe=("deep",)))) < 80  # reprs stay shallow


def test_past_the_budget_the_rest_of_the_chain_runs_on_the_engine():
    budget = 400 * X.size  # 400 elementwise nodes of 4 elements
    with pytest.warns(OnnxImportWarning, match="left in the program") as seen:
        graph = from_onnx(_chain(DEEP), constants={"x": X}, fold_budget=budget)
    part = graph.partition
    assert part.folded == 400 and part.folded_work == budget
    assert len(part.left) == 1 and part.left[0].node == "n400"  # the first node past it
    assert "import budget of 1600 (1600 spent)" in part.left[0].reason
    prog = graph.compile(opt=0)
    assert prog.op_count == DEEP - 400 + 1 and prog.inputs == ()
    got = execute_fp16(prog, [])[0]
    assert np.array_equal(got, _chain_fp16(X, DEEP))  # the same bits, folded or not
    assert "raise fold_budget=" in str(seen[0].message)
    assert any(line.startswith("left in the program: Mul 'n400'") for line in part.lines())


def test_a_deep_chain_of_shape_arithmetic_always_folds():
    nodes, prev = [], "x"
    for i in range(DEEP // 2):
        nodes.append(helper.make_node("Shape", [prev], [f"s{i}"]))
        nodes.append(helper.make_node("Reshape", [prev, f"s{i}"], [f"v{i}"]))
        prev = f"v{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"]))
    vi = [helper.make_tensor_value_info(k, F32, [1, 4]) for k in ("x", "y")]
    g = helper.make_graph(nodes, "shapes", vi[:1], vi[1:])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    graph = from_onnx(model, fold_budget=0)
    assert [n.op for n in graph.compile().compute_nodes] == ["relu"]
    part = graph.partition
    assert part.folded == part.folded_integer == DEEP // 2 and not part.left  # the Shapes


@pytest.fixture(scope="module")
def bert() -> bytes:
    return _export(TinyBert())


def test_bound_ids_no_longer_fold_a_whole_network_past_the_budget(bert):
    feeds = _feeds()
    want = ort.InferenceSession(bert).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = from_onnx(bert, shapes=SHAPES, constants=feeds, fold_budget=2000)
    prog = small.compile()
    assert prog.inputs == () and prog.op_count > 20  # the layer runs on the engine
    assert {"layer_norm", "softmax", "bmm"} <= {n.op for n in prog.compute_nodes}
    assert small.partition.left and small.partition.folded_work <= 2000
    assert _cosine(execute_fp16(prog, [])[0], want) >= FP16_COSINE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = from_onnx(bert, shapes=SHAPES, constants=feeds)  # tiny: within 1e8
    assert whole.partition.engine_ops == 0 and whole.partition.folded_work < DEFAULT_BUDGET
    assert _cosine(whole.outputs[0].value, want) >= FP16_COSINE


def test_with_no_float_folding_a_model_with_run_time_ids_still_imports(bert):
    graph = from_onnx(bert, shapes=SHAPES, fold_budget=0)
    part = graph.partition
    assert part.folded_work == 0 and part.folded_integer > 0
    prog = graph.compile()
    feeds = _feeds()
    arrays = [integer_feed(feeds[t.name], t) for t in prog.inputs]
    want = ort.InferenceSession(bert).run(None, feeds)[0]
    assert _cosine(execute_fp16(prog, arrays)[0], want) >= FP16_COSINE


def test_the_budget_comes_from_the_argument_the_environment_or_the_default(monkeypatch):
    monkeypatch.delenv(ENV_BUDGET, raising=False)
    assert resolve_budget(None) == DEFAULT_BUDGET == 10**8
    assert resolve_budget(123) == 123
    monkeypatch.setenv(ENV_BUDGET, "4000")
    assert resolve_budget(None) == 4000
    graph = from_onnx(_chain(30), constants={"x": X})
    assert graph.partition.budget == 4000
    for bad in ("lots", "-3", "1e5"):
        monkeypatch.setenv(ENV_BUDGET, bad)
        with pytest.raises(OnnxImportError, match=f"\\${ENV_BUDGET}="):
            resolve_budget(None)
    for bad in (-1, 2.5, True, "100"):
        with pytest.raises(OnnxImportError, match="fold_budget="):
            from_onnx(_chain(3), fold_budget=bad)


def test_a_node_past_the_per_node_cap_is_not_folded():
    b = FoldBudget(10**12)
    assert b.node_elements == NODE_ELEMENTS == 10**7
    assert "more than the 10000000 a folded node may hold" in b.charge("Mul", "m", 1, 10**7 + 1)
    assert b.spent == 0 and b.charge("Mul", "m", 10**7, 10**7) is None and b.spent == 10**7
    assert FoldBudget(50).node_elements == 50  # never above the budget itself


def test_the_work_of_a_node_counts_its_multiply_adds():
    a, w = np.ones((3, 5, 7), np.float32), np.ones((7, 2), np.float32)
    assert fold_work("MatMul", [a, w], {}) == (105 + 3 * 5 * 2 * 7, 30)
    g = np.ones((4, 6), np.float32)
    assert fold_work("Gemm", [g, np.ones((6, 9)), None], {}) == (54 + 4 * 9 * 6, 36)
    assert fold_work("Gemm", [g.T, np.ones((9, 6))], {"transA": 1, "transB": 1}) == (
        54 + 4 * 9 * 6,
        36,
    )
    x, k = np.ones((1, 3, 8, 8), np.float32), np.ones((5, 3, 3, 3), np.float32)
    assert fold_work("Conv", [x, k], {}, static_shape=(1, 5, 6, 6)) == (192 + 180 * 27, 180)
    eq = {"equation": "bij,bjk->bik"}
    assert fold_work("Einsum", [a, np.ones((3, 7, 2))], eq)[0] == 105 + 3 * 5 * 7 * 2
    assert fold_work("Add", [a, a], {}) == (105, 105)
    assert fold_work("ConstantOfShape", [np.array([4, 50])], {}) == (200, 200)
