"""ONNX import rewrites the chains torch.onnx.export writes for one ATen op
(:mod:`aneforge.io.onnx_fuse`): exact and tanh GELU become ``gelu``, a Linear on an
N-D input ``reshape``, ``linear``, ``reshape`` as core ATen spells it, so both imports
of a module give the same program, weights and output bits; a chain that does not
provably compute that function (a wrong constant, an intermediate read twice) is kept."""

from __future__ import annotations

import copy
import io
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from torch import nn  # noqa: E402

from aneforge.io import from_onnx, from_torch  # noqa: E402
from aneforge.testing.program_diff import program_diff, weight_diffs  # noqa: E402


def _export(module, x) -> bytes:
    """As the zoo exports (``hf_zoo.ZooModel.onnx_bytes``): TorchScript exporter, opset 17."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            copy.deepcopy(module),
            (x,),
            buf,
            input_names=["x"],
            output_names=["output"],
            opset_version=17,
            dynamo=False,
        )
    return buf.getvalue()


class RmsNorm(nn.Module):
    """T5's layer norm: ``x * rsqrt(mean(x ** 2) + eps)`` times a weight."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 8))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))


class GeluNew(nn.Module):
    """GPT-2's ``gelu_new``: ``x ** 3`` by ``pow``, elementwise on both paths."""

    def forward(self, x):
        c = math.sqrt(2.0 / math.pi)
        return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * torch.pow(x, 3.0))))


def _module(kind):
    torch.manual_seed(0)
    return {
        "gelu": lambda: nn.GELU(),
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
        "gelu_new": GeluNew,
        "rms_norm": RmsNorm,
        "linear_3d": lambda: nn.Linear(8, 4),
        "linear_4d": lambda: nn.Linear(8, 4),
        "linear_no_bias": lambda: nn.Linear(8, 4, bias=False),
        "mlp": lambda: nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8)),
    }[kind]().eval()


SHAPES = {"linear_4d": (1, 2, 3, 8), "mlp": (1, 5, 8)}
KINDS = [
    "gelu",
    "gelu_tanh",
    "gelu_new",
    "rms_norm",
    "linear_3d",
    "linear_4d",
    "linear_no_bias",
    "mlp",
]


def _both(kind):
    module = _module(kind)
    x = torch.from_numpy(np.random.default_rng(1).standard_normal(SHAPES.get(kind, (2, 3, 8))))
    x = x.float()
    onnx_prog = from_onnx(_export(module, x)).compile()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_prog = from_torch(module, (x,)).compile()
    with torch.no_grad():
        ref = module(x).numpy()
    return onnx_prog, torch_prog, x.numpy().astype(np.float16), ref


@pytest.mark.parametrize("kind", KINDS)
def test_both_imports_give_the_same_program_and_bits(kind):
    onnx_prog, torch_prog, x, ref = _both(kind)
    assert program_diff(torch_prog, onnx_prog) == []
    assert weight_diffs(torch_prog, onnx_prog) == []
    out, torch_out = np.asarray(onnx_prog(x)), np.asarray(torch_prog(x))
    assert np.array_equal(out, torch_out)
    assert np.allclose(out, ref, atol=1e-2, rtol=1e-2)
    ops = [n.op for n in onnx_prog.nodes]
    if kind.startswith("gelu") and kind != "gelu_new":
        (gelu,) = [n for n in onnx_prog.nodes if n.op == "gelu"]
        assert gelu.attrs["approximate"] == ("tanh" if kind == "gelu_tanh" else "none")
        assert not {"erf", "tanh", "mul", "div"} & set(ops)
    if kind == "gelu_new":
        assert "gelu" not in ops and "tanh" in ops  # the chain both ways
    if kind == "rms_norm":  # Pow(x, 2) and Div(1, Sqrt(v)) in the file
        assert {"square", "rsqrt"} <= set(ops) and not {"pow", "sqrt", "div"} & set(ops)
    if kind.startswith("linear") or kind == "mlp":
        assert "add" not in ops
        product = "matmul" if kind == "linear_no_bias" else "linear"
        assert ops.count(product) == ops.count("reshape") // 2  # reshape, product, reshape
    if kind == "mlp":
        assert ops.count("linear") == 2 and ops.count("gelu") == 1


def test_linear_weight_is_the_torch_layout_bit_for_bit():
    onnx_prog, torch_prog, _, _ = _both("linear_3d")
    (w,) = [n for n in onnx_prog.nodes if n.op == "weight" and n.ndim == 2]
    module = _module("linear_3d")
    assert w.shape == (4, 8)
    want = module.weight.detach().numpy().astype(np.float16)
    assert np.array_equal(np.asarray(w.value).view(np.uint16), want.view(np.uint16))


# ---- chains that are not rewritten ----------------------------------------------------


def _const(name, value):
    return helper.make_node(
        "Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [value])
    )


def _model(nodes, outputs=("y",), shape=(2, 3, 8), inputs=("x",), initializers=()):
    def vi(n, s=shape):
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))

    g = helper.make_graph(
        nodes, "g", [vi(n) for n in inputs], [vi(n) for n in outputs], list(initializers)
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _gelu_nodes(sqrt2=1.4142135, one=1.0, half=0.5):
    return [
        _const("r2", sqrt2),
        _const("one", one),
        _const("half", half),
        helper.make_node("Div", ["x", "r2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]


def _ops(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = from_onnx(model)
    return [n.op for n in graph.compile().nodes]


def test_the_exporters_gelu_chain_and_its_variants_are_gelu():
    assert "gelu" in _ops(_model(_gelu_nodes()))
    variant = [  # x * 0.5 * (1 + erf(x * sqrt(0.5))): the other product order
        _const("r", 0.70710677),
        _const("one", 1.0),
        _const("half", 0.5),
        helper.make_node("Mul", ["x", "half"], ["xh"]),
        helper.make_node("Mul", ["r", "x"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["one", "e"], ["a"]),
        helper.make_node("Mul", ["xh", "a"], ["y"]),
    ]
    assert "gelu" in _ops(_model(variant))


@pytest.mark.parametrize(
    "nodes",
    [
        _gelu_nodes(sqrt2=1.4142),  # not float32's sqrt(2)
        _gelu_nodes(sqrt2=float(np.nextafter(np.float32(1.4142135), np.float32(2)))),  # 1 ulp
        _gelu_nodes(half=0.25),
        _gelu_nodes(one=2.0),
    ],
    ids=["sqrt2", "sqrt2_ulp", "half", "one"],
)
def test_a_gelu_chain_with_another_constant_is_kept(nodes):
    ops = _ops(_model(nodes))
    assert "gelu" not in ops and "erf" in ops


def test_a_gelu_chain_whose_intermediate_has_another_user_is_kept():
    ops = _ops(_model(_gelu_nodes(), outputs=("y", "e")))  # erf's output is read too
    assert "gelu" not in ops and "erf" in ops
    nodes = _gelu_nodes() + [helper.make_node("Add", ["a", "x"], ["z"])]
    assert "gelu" not in _ops(_model(nodes, outputs=("y", "z")))


def test_a_gelu_chain_on_another_value_is_kept():
    nodes = _gelu_nodes()
    nodes[-2] = helper.make_node("Mul", ["x2", "a"], ["m"])  # x * ... of another input
    ops = _ops(_model(nodes, inputs=("x", "x2")))
    assert "gelu" not in ops and "erf" in ops


def _rsqrt_nodes(one=1.0):
    return [
        _const("one", one),
        helper.make_node("Sqrt", ["x"], ["r"]),
        helper.make_node("Div", ["one", "r"], ["y"]),
    ]


def test_one_over_sqrt_is_rsqrt_rounded_once():
    model = _model(_rsqrt_nodes())
    assert _ops(model)[1:] == ["rsqrt"]
    x = np.arange(65536, dtype=np.uint16).view(np.float16).reshape(2, 32, 1024)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = np.asarray(from_onnx(_model(_rsqrt_nodes(), shape=x.shape)).compile()(x))
        want = (1.0 / np.sqrt(x.astype(np.float64))).astype(np.float16)  # one rounding
    got = got.astype(np.float16)  # the file's float32 output holds the fp16 values
    assert np.array_equal(np.isnan(got), np.isnan(want))  # the negatives
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint16), want[ok].view(np.uint16))


def test_a_division_that_is_not_one_over_sqrt_is_kept():
    assert "rsqrt" not in _ops(_model(_rsqrt_nodes(one=2.0)))
    assert "rsqrt" not in _ops(_model(_rsqrt_nodes(), outputs=("y", "r")))  # sqrt read too
    nodes = [helper.make_node("Sqrt", ["x"], ["r"]), helper.make_node("Div", ["x", "r"], ["y"])]
    assert "rsqrt" not in _ops(_model(nodes))  # x / sqrt(x): not a reciprocal


def _linear_model(x_shape=(2, 3, 8), bias_input=False, second_user=False):
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"]),
        helper.make_node("Add", ["p", "b"], ["y"]),
    ]
    outputs, inputs, inits = ["y"], ["x"], [w]
    if second_user:
        outputs.append("p")
    if bias_input:
        inputs.append("b")
    else:
        inits.append(b)

    def vi(n, s):
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))

    g = helper.make_graph(
        nodes,
        "g",
        [vi("x", x_shape)] + ([vi("b", (4,))] if bias_input else []),
        [vi(n, tuple(x_shape[:-1]) + (4,)) for n in outputs],
        inits,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_matmul_add_on_a_3d_input_is_reshape_linear_reshape():
    assert _ops(_linear_model()) == ["input", "reshape", "weight", "weight", "linear", "reshape"]


@pytest.mark.parametrize(
    "kwargs",
    [{"x_shape": (3, 8)}, {"bias_input": True}, {"second_user": True}],
    ids=["2d_input", "bias_not_constant", "product_read_twice"],
)
def test_matmul_add_that_is_not_a_linear_is_kept(kwargs):
    ops = _ops(_linear_model(**kwargs))
    assert "linear" not in ops and "add" in ops
