"""Pooling kernels larger than their input: EfficientNet's ``AvgPool2d(1280, ceil_mode=True)``.

Contract (src/aneforge/io/onnx_spatial.py): a MaxPool / AveragePool / LpPool kernel that
reaches past its padded input has one window per such dim where onnxruntime computes one
(``ceil_mode``, or without it when the shortfall is under the stride); where that window
holds the whole dim the pool is a reduction over it (``mean`` / ``amax`` / ``sum``), with
onnxruntime's count (the input positions, plus the declared pads inside the window under
``count_include_pad``, never the ceil overhang). An empty output is refused naming the
node. Nothing is unrolled into a 1280x1280 window.

Yardsticks: onnxruntime float32 on the same fp16-valued inputs; torch for the exported
EfficientNet head. A max of fp16 values is exact; an average is a running fp16 sum of
``count`` terms (each partial rounded, docs/numerics.md rule 4) and one division.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from aneforge.io import UnsupportedModelError, from_onnx
from conftest import FP16_UNIT_ROUNDOFF

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")
torch = pytest.importorskip("torch", reason="torch exports the EfficientNet head")

U = FP16_UNIT_ROUNDOFF
R = np.random.default_rng(0)


def f16(a):
    return np.asarray(a, np.float16).astype(np.float32)


def pool_model(op, shape, opset=19, **attrs):
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    dims = [f"d{i}" for i in range(len(shape))]  # the checker infers them
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    g = helper.make_graph([node], "pool", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def run_ort(model, x):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return s.run(None, {"x": x})[0]


def emulate(model, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = from_onnx(model).compile()
        return prog, np.asarray(prog(x), np.float64)


def sum_bound(x, count):
    """|error| of an fp16 running sum of ``count`` terms, divided by ``count``: each of
    the ``count`` partial sums rounds by at most U of its magnitude (<= count * max|x|),
    and the division rounds once more."""
    return (count + 1) * U * float(np.abs(x).max())


# (op, input shape, attributes, the largest count one output averages over)
CASES = [
    ("AveragePool", (1, 3, 7, 7), dict(kernel_shape=[1280, 1280], strides=[1280, 1280],
                                       ceil_mode=1, count_include_pad=1), 49),
    ("AveragePool", (1, 3, 7, 7), dict(kernel_shape=[1280, 1280], strides=[2000, 2000],
                                       ceil_mode=1, count_include_pad=0), 49),
    ("AveragePool", (1, 2, 5, 6), dict(kernel_shape=[9, 9], strides=[9, 9], pads=[1, 2, 1, 0],
                                       ceil_mode=1, count_include_pad=1), 81),
    ("AveragePool", (1, 2, 5, 6), dict(kernel_shape=[9, 9], strides=[9, 9], pads=[1, 2, 1, 0],
                                       ceil_mode=1, count_include_pad=0), 30),
    ("AveragePool", (1, 2, 5, 6), dict(kernel_shape=[9, 3], strides=[9, 2], ceil_mode=1), 15),
    ("AveragePool", (1, 2, 5, 6), dict(kernel_shape=[3, 20], strides=[2, 32], pads=[1, 0, 1, 0],
                                       ceil_mode=1, count_include_pad=1), 18),
    ("AveragePool", (1, 2, 5, 6), dict(kernel_shape=[10, 10], strides=[10, 10]), 30),
    ("AveragePool", (1, 4, 9), dict(kernel_shape=[64], strides=[64], ceil_mode=1), 9),
    ("MaxPool", (1, 3, 7, 7), dict(kernel_shape=[1280, 1280], strides=[1280, 1280],
                                   ceil_mode=1), 49),
    ("MaxPool", (1, 2, 5, 6), dict(kernel_shape=[9, 2], strides=[9, 2], pads=[2, 0, 2, 0],
                                   ceil_mode=1), 18),
    ("MaxPool", (1, 2, 5, 6), dict(kernel_shape=[3, 3], strides=[8, 8], dilations=[4, 4],
                                   ceil_mode=1), 9),
    # a unit kernel whose ceil window count drops by one (the ONNX backend's case): not
    # an identity although kernel and pads are trivial
    ("MaxPool", (1, 1, 2, 2), dict(kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1), 1),
    ("AveragePool", (1, 1, 3, 2), dict(kernel_shape=[1, 1], strides=[2, 2], ceil_mode=1), 1),
    ("LpPool", (1, 2, 5, 6), dict(kernel_shape=[9, 9], strides=[9, 9], ceil_mode=1, p=2), 30),
    ("LpPool", (1, 2, 5, 6), dict(kernel_shape=[9, 3], strides=[9, 2], ceil_mode=1, p=1), 15),
]  # fmt: skip


@pytest.mark.parametrize("op, shape, attrs, count", CASES, ids=lambda v: str(v)[:40])
def test_kernels_past_the_input_match_onnxruntime(op, shape, attrs, count):
    model = pool_model(op, shape, **attrs)
    x = f16(R.standard_normal(shape))
    want = run_ort(model, x)
    prog, got = emulate(model, x)
    assert got.shape == want.shape
    err = float(np.abs(got - want).max())
    if op == "MaxPool":
        assert err == 0.0  # the max of fp16 values is one of them
    elif op == "LpPool":
        p = attrs["p"]
        assert err <= sum_bound(np.abs(x) ** p, count) ** (1 / p) + 2 * U * np.abs(want).max()
    else:
        assert err <= sum_bound(x, count), f"max error {err:g}"
    padded = max(shape[2:]) + 2 * max(attrs.get("pads", [0]))
    for node in prog.nodes:  # nothing pools a window bigger than the padded input
        kernel = node.attrs.get("kernel")
        assert kernel is None or max(kernel) <= padded, (node.op, kernel)


def test_the_global_case_is_one_reduction_of_the_valid_input():
    """``AvgPool2d(1280, ceil_mode=True)`` on 7x7 is the mean of the 49 values:
    onnxruntime says so, and the program holds one ``mean`` (no 1280x1280 window)."""
    model = pool_model("AveragePool", (1, 3, 7, 7), kernel_shape=[1280, 1280],
                       strides=[1280, 1280], ceil_mode=1, count_include_pad=1)  # fmt: skip
    x = f16(R.standard_normal((1, 3, 7, 7)))
    want = run_ort(model, x)
    assert np.allclose(want, x.astype(np.float64).mean(axis=(2, 3), keepdims=True), atol=1e-6)
    prog, got = emulate(model, x)
    assert [n.op for n in prog.nodes if n.op != "input"] == ["mean"]


def test_count_include_pad_counts_declared_pads_inside_the_window_not_the_overhang():
    """pads (1, 2) before and (1, 0) after a 5x6 input, 9x9 kernel: the window holds
    7 x 8 counted positions (input and declared pads), not 81."""
    model = pool_model("AveragePool", (1, 1, 5, 6), kernel_shape=[9, 9], strides=[9, 9],
                       pads=[1, 2, 1, 0], ceil_mode=1, count_include_pad=1)  # fmt: skip
    x = np.ones((1, 1, 5, 6), np.float32)
    want = run_ort(model, x)
    assert np.allclose(want, 30 / 56)
    _, got = emulate(model, x)
    assert abs(float(got.ravel()[0]) - 30 / 56) <= U


class EfficientNetHead(torch.nn.Module):
    """The end of torchvision's EfficientNet as timm's exporters write it: a 1x1 conv
    to 1280 channels (here 16), AvgPool2d(1280, ceil_mode=True), flatten, linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 1)
        self.pool = torch.nn.AvgPool2d(1280, ceil_mode=True)
        self.fc = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def test_an_exported_efficientnet_head_imports_and_matches_torch_and_onnxruntime():
    torch.manual_seed(0)
    module = EfficientNetHead().eval()
    x = f16(R.standard_normal((1, 8, 7, 7)))
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17)
    model = onnx.load_from_string(buf.getvalue())
    assert any(n.op_type == "AveragePool" for n in model.graph.node)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    session = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    want = session.run(None, {model.graph.input[0].name: x})[0]
    assert np.allclose(want, ref, atol=1e-5)
    _, got = emulate(model, x)
    scale = float(np.abs(ref).max())
    # fp16 weights and products (rule 3), a 49-term narrow mean (rule 4): a few dozen U
    assert np.abs(got - ref).max() <= 64 * U * scale


def test_an_empty_pool_output_is_refused_naming_the_node():
    model = pool_model("AveragePool", (1, 2, 5, 6), kernel_shape=[10, 10], ceil_mode=1)
    with pytest.raises(UnsupportedModelError, match=r"AveragePool 'pool'.*would be empty"):
        from_onnx(model)
    with pytest.raises(Exception, match="output dimension is negative"):  # so does ORT
        run_ort(model, np.zeros((1, 2, 5, 6), np.float32))


def test_a_convolution_kernel_past_its_input_is_still_refused():
    w = onnx.numpy_helper.from_array(np.ones((1, 1, 9, 9), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", strides=[9, 9])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])
    model = helper.make_model(
        helper.make_graph([node], "c", [x], [y], [w]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    with pytest.raises(UnsupportedModelError, match=r"Conv 'conv'.*does not fit the input"):
        from_onnx(model)
