"""Rank-6 reshape/transpose chains (Swin's window partition) import at rank <= 5.

Contract (src/aneforge/io/onnx_shape.py): a Reshape / Unsqueeze past rank 5 yields a view
(the same elements in row-major order, the logical shape beside them); a Transpose of it
merges the axes that stay adjacent and in order (size-1 axes dropped), and when at most
5 groups remain, it is a reshape/transpose/reshape at that rank. When more remain, the
Transpose is refused naming the Reshape the view came from and the merged rank. The
graph's own rank cap (MAX_RANK = 5) is unchanged.

Yardsticks: NumPy's own reshape/transpose for :func:`merge_axes`; onnxruntime and torch
for the exported window partition and reverse (movement is exact: equal bits on fp16
inputs); onnxruntime for a hand-built chain.
"""

from __future__ import annotations

import io
import itertools
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aneforge.graph.tensor import MAX_RANK
from aneforge.io import UnsupportedModelError, from_onnx
from aneforge.io.onnx_shape import merge_axes
from conftest import FP16_UNIT_ROUNDOFF

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")
torch = pytest.importorskip("torch", reason="torch exports the Swin window modules")

U = FP16_UNIT_ROUNDOFF
R = np.random.default_rng(0)
F = TensorProto.FLOAT


def f16(a):
    return np.asarray(a, np.float16).astype(np.float32)


def run_ort(model_bytes, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def compile_quietly(graph):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graph.compile()


# ---- merge_axes against NumPy -----------------------------------------------------------


def test_merged_transposes_move_data_exactly_as_the_original():
    """For random shapes (rank 2..7, sizes 1..3) and permutations, the merged transpose
    of the same row-major data gives NumPy's result element for element."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        rank = int(rng.integers(2, 8))
        shape = tuple(int(d) for d in rng.integers(1, 4, rank))
        perm = tuple(int(a) for a in rng.permutation(rank))
        data = np.arange(int(np.prod(shape)))
        want = data.reshape(shape).transpose(perm).ravel()
        sizes, merged = merge_axes(shape, perm)
        assert int(np.prod(sizes, dtype=np.int64)) == data.size
        assert all(d > 1 for d in sizes)
        got = data.reshape(sizes).transpose(merged).ravel()
        assert np.array_equal(got, want), (shape, perm, sizes, merged)


def test_merging_is_minimal_no_two_groups_could_merge_further():
    for perm in itertools.permutations(range(6)):
        sizes, merged = merge_axes((2, 3, 2, 3, 2, 3), perm)
        assert len(sizes) == len(merged)
        assert all(b != a + 1 for a, b in zip(merged, merged[1:]))


# ---- torch-exported window partition / reverse ------------------------------------------


class WindowPartition(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, x):
        b, h, w_, c = x.shape
        x = x.view(b, h // self.w, self.w, w_ // self.w, self.w, c)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, self.w, self.w, c)


class WindowReverse(torch.nn.Module):
    def __init__(self, w, h, w_):
        super().__init__()
        self.w, self.h, self.w_ = w, h, w_

    def forward(self, windows):
        w, h, w_ = self.w, self.h, self.w_
        b = int(windows.shape[0] / (h * w_ / w / w))
        x = windows.view(b, h // w, w_ // w, w, w, -1)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, h, w_, -1)


class WindowBlock(torch.nn.Module):
    """Partition, a per-window linear map mixing the w*w tokens, reverse."""

    def __init__(self, w, h, w_, c):
        super().__init__()
        self.part, self.rev = WindowPartition(w), WindowReverse(w, h, w_)
        self.mix = torch.nn.Linear(c, c)
        self.w = w

    def forward(self, x):
        win = self.part(x)
        n, w, _, c = win.shape
        tokens = self.mix(win.reshape(n, w * w, c)).softmax(dim=1)
        return self.rev(tokens.reshape(n, w, w, c)) + x


def export(module, x) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (torch.from_numpy(x),), buf, dynamo=False,
                          opset_version=17)  # fmt: skip
    return buf.getvalue()


@pytest.mark.parametrize(
    "module, shape",
    [
        (WindowPartition(4), (2, 8, 12, 5)),
        (WindowReverse(4, 8, 12), (12, 4, 4, 5)),
        (WindowPartition(2), (1, 4, 6, 3)),
    ],
    ids=["partition", "reverse", "partition_b1"],
)
def test_exported_swin_windows_import_at_rank_4_with_equal_bits(module, shape):
    x = f16(R.standard_normal(shape))
    data = export(module, x)
    model = onnx.load_from_string(data)
    ranks = [len(v.type.tensor_type.shape.dim) for v in
             onnx.shape_inference.infer_shapes(model).graph.value_info]  # fmt: skip
    assert max(ranks) == 6  # the export does go through rank 6
    prog = compile_quietly(from_onnx(data))
    assert max(len(n.shape) for n in prog.nodes) <= 4
    assert sum(n.op == "transpose" for n in prog.nodes) == 1
    got = np.asarray(prog(x))
    (want,) = run_ort(data, {model.graph.input[0].name: x})
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    assert np.array_equal(want, ref)
    assert got.shape == want.shape and np.array_equal(got, want)  # movement is exact


def test_a_window_block_matches_onnxruntime():
    torch.manual_seed(0)
    module = WindowBlock(4, 8, 8, 6)
    x = f16(R.standard_normal((1, 8, 8, 6)))
    data = export(module, x)
    (want,) = run_ort(data, {onnx.load_from_string(data).graph.input[0].name: x})
    got = np.asarray(compile_quietly(from_onnx(data))(x), np.float64)
    # a 6-term linear (rule 3), a 16-term softmax (rule 4) and an add: a few dozen U
    assert np.abs(got - want).max() <= 32 * U * float(np.abs(want).max())


# ---- hand-built chains ------------------------------------------------------------------


def chain(nodes, in_shape, out_name, out_shape, inits=()):
    x = helper.make_tensor_value_info("x", F, list(in_shape))
    y = helper.make_tensor_value_info(out_name, F, list(out_shape))
    g = helper.make_graph(nodes, "chain", [x], [y], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def shape_init(name, dims):
    return numpy_helper.from_array(np.array(dims, np.int64), name)


def test_a_hand_built_rank_7_chain_with_two_transposes_matches_onnxruntime():
    """(2, 3, 4, 10) -> Unsqueeze to rank 5 -> Reshape to rank 7 -> Transpose -> Transpose
    -> Squeeze of a rank-7 unit axis -> Flatten: every step past rank 5 is a view."""
    nodes = [
        helper.make_node("Unsqueeze", ["x", "ax0"], ["u"]),
        helper.make_node("Reshape", ["u", "s7"], ["r7"], name="to7"),
        helper.make_node("Transpose", ["r7"], ["t1"], perm=[0, 1, 2, 4, 3, 5, 6], name="t1"),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1, 3, 4, 5, 6], name="t2"),
        helper.make_node("Squeeze", ["t2", "ax0"], ["sq"]),
        helper.make_node("Flatten", ["sq"], ["y"], axis=2),
    ]
    inits = [shape_init("ax0", [0]), shape_init("s7", [1, 2, 3, 2, 2, 5, 2])]
    m = chain(nodes, (2, 3, 4, 10), "y", (6, 40), inits)
    x = f16(R.standard_normal((2, 3, 4, 10)))
    (want,) = run_ort(m.SerializeToString(), {"x": x})
    prog = compile_quietly(from_onnx(m))
    assert max(len(n.shape) for n in prog.nodes) <= MAX_RANK
    assert np.array_equal(np.asarray(prog(x)), want)


def test_a_rank_6_unsqueeze_and_back_is_a_reshape():
    nodes = [
        helper.make_node("Unsqueeze", ["x", "axes"], ["u"]),
        helper.make_node("Relu", ["x"], ["unused"]),
        helper.make_node("Squeeze", ["u", "axes"], ["y"]),
    ]
    m = chain(nodes, (2, 3, 4, 5, 6), "y", (2, 3, 4, 5, 6), [shape_init("axes", [2])])
    x = f16(R.standard_normal((2, 3, 4, 5, 6)))
    prog = compile_quietly(from_onnx(m))
    assert np.array_equal(np.asarray(prog(x)), x)


def test_a_transpose_that_truly_needs_rank_6_is_refused_naming_both_nodes():
    """perm (1, 0, 3, 2, 5, 4) keeps no two axes adjacent: 6 groups after merging."""
    nodes = [
        helper.make_node("Reshape", ["x", "s6"], ["r6"], name="to6"),
        helper.make_node("Transpose", ["r6"], ["t"], perm=[1, 0, 3, 2, 5, 4], name="swap3"),
        helper.make_node("Reshape", ["t", "s4"], ["y"], name="back"),
    ]
    inits = [shape_init("s6", [2, 3, 2, 3, 2, 3]), shape_init("s4", [6, 6, 6])]
    m = chain(nodes, (6, 6, 6), "y", (6, 6, 6), inits)
    with pytest.raises(UnsupportedModelError) as err:
        from_onnx(m)
    text = str(err.value)
    assert "Transpose 'swap3'" in text and "from Reshape 'to6'" in text
    assert "merges only to rank 6" in text and "rank <= 5" in text


def test_another_op_given_a_rank_6_value_is_refused_naming_where_it_came_from():
    nodes = [
        helper.make_node("Reshape", ["x", "s6"], ["r6"], name="to6"),
        helper.make_node("Relu", ["r6"], ["rl"], name="relu"),
        helper.make_node("Reshape", ["rl", "s3"], ["y"], name="back"),
    ]
    inits = [shape_init("s6", [2, 3, 2, 3, 2, 3]), shape_init("s3", [6, 6, 6])]
    m = chain(nodes, (6, 6, 6), "y", (6, 6, 6), inits)
    with pytest.raises(UnsupportedModelError) as err:
        from_onnx(m)
    text = str(err.value)
    assert "Relu 'relu'" in text
    assert "rank-6 tensor (2, 3, 2, 3, 2, 3) from Reshape 'to6'" in text


def test_a_rank_6_graph_output_is_refused():
    nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="up")]
    m = chain(nodes, (2, 3, 4, 5, 6), "y", (2, 3, 4, 5, 6, 1), [shape_init("axes", [5])])
    with pytest.raises(UnsupportedModelError, match="output 'y'"):
        from_onnx(m)
