"""ONNX models with integer graph inputs (token ids, attention masks): io/onnx_integers.py.

The language models are built here with torch (tiny BERT-like and GPT-2-like modules:
token + position nn.Embedding, a padding or causal mask built from the inputs, one
encoder layer), exported by torch.onnx (TorchScript exporter, opset 17, int64
``input_ids`` and ``attention_mask``, dynamic axes so that masks and position ids are
Shape / Range / Where chains), imported with the ids as run-time inputs and emulated.
Yardstick: onnxruntime in float32 on the same int64 feeds.
"""

from __future__ import annotations

import io
import math

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.ops.extra import IdRangeError, IdValueError
from aneforge.graph.tensor import integer_feed
from aneforge.io import from_onnx
from aneforge.io.coreml_export import export_coreml, load_mil_program, load_spec, lower_program
from aneforge.io.onnx_import import UnsupportedModelError

#: An fp16 forward pass of a small float32 network keeps the direction of its output to
#: within a cosine of 0.999 (each op rounds once to 11 bits; a layer stacks a few dozen).
FP16_COSINE = 0.999
#: The change two fp16 passes make (a difference of outputs within 10x of their noise)
#: keeps its direction to within a cosine of 0.99.
DIFFERENCE_COSINE = 0.99
VOCAB, SEQ, WIDTH = 300, 8, 16


class _Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, x):
        return x.view(x.size()[:-1] + (self.heads, self.dh)).permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + mask
        c = torch.matmul(torch.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
        return self.o(c.view(c.size()[:-2] + (self.heads * self.dh,)))


class TinyBert(nn.Module):
    """BERT's embeddings (token, position from a buffer sliced by the length, token
    type zeros) and one post-norm encoder layer with the extended padding mask."""

    def __init__(self, d=WIDTH, heads=2, maxpos=32):
        super().__init__()
        self.tok, self.pos, self.typ = (
            nn.Embedding(VOCAB, d),
            nn.Embedding(maxpos, d),
            nn.Embedding(2, d),
        )
        self.ln0, self.ln1, self.ln2 = (nn.LayerNorm(d, eps=1e-12) for _ in range(3))
        self.att, self.ff1, self.ff2 = (
            _Attention(d, heads),
            nn.Linear(d, 4 * d),
            nn.Linear(4 * d, d),
        )
        self.register_buffer("position_ids", torch.arange(maxpos).expand((1, -1)), persistent=False)

    def forward(self, input_ids, attention_mask):
        b, t = input_ids.size()
        types = torch.zeros((b, t), dtype=torch.long)
        x = self.tok(input_ids) + self.typ(types) + self.pos(self.position_ids[:, :t])
        x = self.ln0(x)
        ext = attention_mask[:, None, None, :].to(dtype=x.dtype)
        ext = (1.0 - ext) * torch.finfo(x.dtype).min
        x = self.ln1(x + self.att(x, ext))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class TinyGpt(nn.Module):
    """GPT-2's forward: ids viewed to (-1, t), positions from Range, a causal mask from a
    bool buffer by Where, the padding mask added, one pre-norm block and the final norm."""

    def __init__(self, d=WIDTH, heads=2, maxpos=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, d), nn.Embedding(maxpos, d)
        self.ln1, self.ln2, self.lnf = (nn.LayerNorm(d) for _ in range(3))
        self.att, self.fc, self.proj = (
            _Attention(d, heads),
            nn.Linear(d, 4 * d),
            nn.Linear(4 * d, d),
        )
        causal = torch.tril(torch.ones(maxpos, maxpos, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, maxpos, maxpos), persistent=False)

    def forward(self, input_ids, attention_mask):
        shape = input_ids.size()
        input_ids = input_ids.view(-1, shape[-1])
        pos = torch.arange(0, shape[-1], dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        t = x.size(1)
        low = torch.finfo(x.dtype).min
        pad = (1.0 - attention_mask.view(shape[0], -1)[:, None, None, :].to(x.dtype)) * low
        mask = torch.where(self.bias[:, :, :t, :t], pad, torch.full([], low))
        x = x + self.att(self.ln1(x), mask)
        x = x + self.proj(nn.functional.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return self.lnf(x)


def _export(module) -> bytes:
    torch.manual_seed(0)
    for p in module.parameters():  # keep the float32 reference within fp16's range
        nn.init.normal_(p, std=0.3)
    module.eval()
    ids = torch.randint(0, VOCAB, (1, SEQ))
    mask = torch.ones(1, SEQ, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    f = io.BytesIO()
    torch.onnx.export(
        module, (ids, mask), f, dynamo=False, opset_version=17,
        input_names=["input_ids", "attention_mask"], output_names=["hidden"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes},
    )  # fmt: skip
    return f.getvalue()


SHAPES = {"input_ids": (1, SEQ), "attention_mask": (1, SEQ)}


@pytest.fixture(scope="module")
def bert() -> bytes:
    return _export(TinyBert())


@pytest.fixture(scope="module")
def gpt() -> bytes:
    return _export(TinyGpt())


def _feeds():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, VOCAB, (1, SEQ))
    ids[0, :2] = [VOCAB - 1, 257]  # past uint8, and ids fp16 cannot tell apart
    mask = np.ones((1, SEQ), np.int64)
    mask[0, -2:] = 0  # two padding positions
    return {"input_ids": ids, "attention_mask": mask}


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _emulate(prog, feeds, fast=True):
    arrays = [integer_feed(feeds[t.name], t) if t.dtype != "float16" else feeds[t.name]
              for t in prog.inputs]  # fmt: skip
    return execute_fp16(prog, arrays, fast=fast)[0]


@pytest.mark.parametrize("which", ["bert", "gpt"])
def test_a_language_model_runs_its_ids_on_the_engine_and_matches_onnxruntime(which, request):
    model = request.getfixturevalue(which)
    with pytest.warns(af.AneforgeWarning):  # the types chosen, the saturated -3.4e38
        graph = from_onnx(model, shapes=SHAPES)
    ids, mask = graph.inputs
    assert (ids.name, ids.dtype, ids.attrs["range"]) == ("input_ids", "uint16", (0, VOCAB - 1))
    assert (mask.name, mask.dtype) == ("attention_mask", "int16")
    prog = graph.compile()
    ops = {n.op for n in prog.compute_nodes}
    assert {"embedding", "int_to_fp16", "layer_norm", "softmax", "bmm"} <= ops
    assert sum(n.op in ("matmul", "linear") for n in prog.compute_nodes) >= 6
    assert [t.name for t in prog.inputs] == ["input_ids", "attention_mask"]
    feeds = _feeds()
    want = ort.InferenceSession(model).run(None, feeds)[0]
    got = _emulate(prog, feeds)
    assert got.shape == want.shape == (1, SEQ, WIDTH)
    assert _cosine(got, want) >= FP16_COSINE
    assert np.array_equal(got, _emulate(prog, feeds, fast=False))
    part = graph.partition
    assert part.integer_inputs == {"input_ids": "uint16", "attention_mask": "int16"}
    assert part.engine_ops == Program.from_outputs(graph.outputs).op_count > 20
    assert part.folded_integer > 0 and not part.left  # shapes, positions, masks folded


def test_the_padding_mask_is_read_at_run_time(bert):
    graph = from_onnx(bert, shapes=SHAPES)
    prog = graph.compile()
    sess = ort.InferenceSession(bert)
    feeds = _feeds()
    full = dict(feeds, attention_mask=np.ones((1, SEQ), np.int64))
    a, b = _emulate(prog, feeds), _emulate(prog, full)
    ra, rb = sess.run(None, feeds)[0], sess.run(None, full)[0]
    assert _cosine(a, ra) >= FP16_COSINE and _cosine(b, rb) >= FP16_COSINE
    noise = np.abs(a - ra).max()
    assert np.abs(ra - rb).max() > 10 * noise  # the mask changes the output, well past...
    # ...fp16's noise, and the emulated change follows it (a difference of two passes
    # carries the rounding of both: DIFFERENCE_COSINE)
    assert _cosine(a.astype(np.float64) - b, ra - rb) >= DIFFERENCE_COSINE


def test_the_notes_say_which_type_each_integer_input_got_and_why(bert):
    graph = from_onnx(bert, shapes=SHAPES)
    notes = " | ".join(graph.warnings)
    assert "'input_ids' (int64) is a uint16 input on the engine: the ids of embedding" in notes
    assert f"({VOCAB} rows: ids 0..{VOCAB - 1})" in notes
    assert "'attention_mask' (int64) is an int16 input on the engine: converted to fp16" in notes
    assert "input_ranges={'attention_mask': (lo, hi)}" in notes


def test_a_declared_range_narrows_the_type_and_a_wrong_one_is_refused(bert):
    graph = from_onnx(bert, shapes=SHAPES, input_ranges={"attention_mask": (0, 1)})
    mask = graph.inputs[1]
    assert (mask.dtype, mask.attrs["range"]) == ("uint8", (0, 1))
    graph = from_onnx(bert, shapes=SHAPES, input_ranges={"input_ids": (0, 200)})
    assert graph.inputs[0].dtype == "uint8" and graph.inputs[0].attrs["range"] == (0, 200)
    with pytest.raises(UnsupportedModelError, match=r"\(0, 400\) is not within the 300 rows"):
        from_onnx(bert, shapes=SHAPES, input_ranges={"input_ids": (0, 400)})
    with pytest.raises(UnsupportedModelError, match="whole numbers"):
        from_onnx(bert, shapes=SHAPES, input_ranges={"attention_mask": (0, 0.5)})


def test_ids_outside_the_table_or_the_type_are_refused_when_it_runs(gpt):
    prog = from_onnx(gpt, shapes=SHAPES).compile()
    feeds = _feeds()
    feeds["input_ids"][0, 3] = VOCAB
    with pytest.raises(IdRangeError, match=rf"input 'input_ids'.*id {VOCAB} at index \(0, 3\)"):
        _emulate(prog, feeds)
    feeds["input_ids"][0, 3] = 70000
    with pytest.raises(af.InputError, match="value 70000 at index .* outside uint16"):
        _emulate(prog, feeds)
    feeds = _feeds()
    feeds["attention_mask"][0, 0] = 40000
    with pytest.raises(af.InputError, match="'attention_mask'.*value 40000.*outside int16"):
        _emulate(prog, feeds)


def test_the_program_with_integer_inputs_exports_to_core_ml(bert, tmp_path):
    prog = from_onnx(bert, shapes=SHAPES).compile()
    path = export_coreml(prog, tmp_path / "bert.mlpackage")
    inputs = {f.name: f.type.multiArrayType for f in load_spec(path).description.input}
    int32 = 131104  # ArrayFeatureType.INT32
    assert {n: t.dataType for n, t in inputs.items()} == {
        "input_ids": int32,
        "attention_mask": int32,
    }
    assert list(inputs["input_ids"].shape) == [1, SEQ]
    ops = [op.op_type for op in load_mil_program(path).functions["main"].operations]
    assert "gather" in ops and "cast" in ops and ops.count("matmul") + ops.count("linear") >= 6
    feeds = _feeds()
    arrays = [integer_feed(feeds[t.name], t) for t in prog.inputs]
    fed = lower_program(prog, feeds=arrays)  # coremltools' value inference of the MIL
    got = np.asarray(fed.program.functions["main"].outputs[0].val, np.float64)
    want = ort.InferenceSession(bert).run(None, feeds)[0]
    assert _cosine(got, want) >= FP16_COSINE


# ---- hand-made graphs: the rules one node at a time ----------------------------------


def _model(nodes, inputs, outputs, inits=()):
    def vi(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, list(shape))

    g = helper.make_graph(
        nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits],
    )  # fmt: skip
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _run_both(model, feeds):
    graph = from_onnx(model)
    prog = graph.compile()
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    return graph, prog, want, _emulate(prog, feeds)


def test_views_casts_and_shapes_of_an_integer_input():
    table = np.random.default_rng(2).standard_normal((5000, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["ids", "flat"], ["f"]),  # (6,)
        helper.make_node("Unsqueeze", ["f", "ax"], ["u"]),  # (6, 1)
        helper.make_node("Gather", ["table", "u"], ["e"]),  # (6, 1, 3)
        helper.make_node("Cast", ["ids"], ["b"], to=TensorProto.BOOL),
        helper.make_node("Cast", ["b"], ["bf"], to=F32),
        helper.make_node("CastLike", ["ids"], ["asf"], ) if False else
        helper.make_node("CastLike", ["ids", "like"], ["asf"]),
        helper.make_node("Shape", ["ids"], ["s"]),  # folds: (2, 3)
        helper.make_node("ConstantOfShape", ["s"], ["ones"],
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Add", ["asf", "ones"], ["m"]),
        helper.make_node("Mul", ["m", "bf"], ["y"]),
    ]  # fmt: skip
    inits = [("table", table), ("flat", np.array([6])), ("ax", np.array([1])),
             ("like", np.array([0.0], np.float32))]  # fmt: skip
    model = _model(
        nodes, [("ids", I64, (2, 3))], [("e", F32, (6, 1, 3)), ("y", F32, (2, 3))], inits
    )
    ids = np.array([[4999, 0, 2049], [7, 0, 4097]])
    graph = from_onnx(model)
    assert graph.inputs[0].dtype == "uint16"
    prog = graph.compile()
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": ids})
    got = execute_fp16(prog, [integer_feed(ids, prog.inputs[0])])
    assert np.array_equal(got[0], want[0].astype(np.float16))  # rows copied exactly
    # y = (fp16(ids) + 1) * (ids != 0): 2049 and 4097 are rounded, the zeros stay zeros
    expect = ((ids.astype(np.float16).astype(np.float64) + 1) * (ids != 0)).astype(np.float16)
    assert np.array_equal(got[1], expect)
    assert np.allclose(got[1], want[1], rtol=2**-10)
    assert [n.op for n in prog.compute_nodes].count("int_to_fp16") == 1  # one conversion


@pytest.mark.parametrize(
    ("node", "needs", "shape"),
    [
        (helper.make_node("Add", ["ids", "one"], ["z"]), "integer arithmetic", (2, 4)),
        (helper.make_node("Equal", ["ids", "big"], ["z"]), "below 2048", (2, 4)),
        (helper.make_node("CumSum", ["ids", "ax"], ["z"]), "integer arithmetic", (2, 4)),
        (helper.make_node("Gather", ["ids", "one"], ["z"], axis=1), "values moved", (2,)),
        (helper.make_node("Transpose", ["ids"], ["z"]), "values moved", (4, 2)),
        (helper.make_node("Gather", ["table", "ids"], ["z"], axis=1), "along axis 1", (4, 2, 4)),
        (helper.make_node("Cast", ["ids"], ["z"], to=TensorProto.UINT8), "wraps values", (2, 4)),
    ],
)
def test_integer_arithmetic_on_run_time_data_is_refused_with_the_reason(node, needs, shape):
    inits = [("one", np.array(1)), ("ax", np.array(1)), ("big", np.array(2048)),
             ("table", np.ones((4, 4), np.float32))]  # fmt: skip
    follow = helper.make_node("Cast", ["z"], ["y"], to=F32)
    model = _model([node, follow], [("ids", I64, (2, 4))], [("y", F32, shape)], inits)
    with pytest.raises(UnsupportedModelError) as err:
        from_onnx(model)
    msg = str(err.value)
    assert "input 'ids' (int64) is a run-time integer input" in msg and needs in msg
    assert "constants={'ids': ...}" in msg
    assert err.value.bind_inputs == ["ids"]
    graph = from_onnx(model, constants={"ids": np.arange(8).reshape(2, 4) % 4})
    assert graph.input_names == []  # bound: it folds, as before


def test_an_integer_input_as_a_parameter_is_refused():
    nodes = [helper.make_node("Tile", ["t", "reps"], ["y"])]
    model = _model(nodes, [("reps", I64, (2,))], [("y", F32, ("a", "b"))],
                   [("t", np.ones((2, 2), np.float32))])  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="needs its values as a parameter"):
        from_onnx(model)
    graph = from_onnx(model, constants={"reps": np.array([2, 1])})
    assert graph.outputs[0].shape == (4, 2)


def test_a_table_past_uint16_and_an_integer_output_are_refused():
    big = np.zeros((70000, 1), np.float32)
    model = _model([helper.make_node("Gather", ["t", "ids"], ["y"])], [("ids", I64, (3,))],
                   [("y", F32, (3, 1))], [("t", big)])  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="70000 rows, so its ids reach beyond uint16"):
        from_onnx(model)
    model = _model([helper.make_node("Identity", ["ids"], ["y"])], [("ids", I64, (3,))],
                   [("y", I64, (3,))])  # fmt: skip
    with pytest.raises(UnsupportedModelError, match="returns no integer values"):
        from_onnx(model)


def test_an_unsigned_mask_and_an_input_read_only_for_its_shape():
    nodes = [
        helper.make_node("Cast", ["m"], ["mf"], to=F32),
        helper.make_node("Shape", ["n"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=F32),
        helper.make_node("Mul", ["mf", "sf"], ["y"]),
    ]
    model = _model(nodes, [("m", TensorProto.UINT8, (1, 2)), ("n", I64, (1, 2))],
                   [("y", F32, (1, 2))])  # fmt: skip
    graph = from_onnx(model)
    assert [t.dtype for t in graph.inputs] == ["uint8", "int16"]
    prog = graph.compile()
    assert [t.name for t in prog.inputs] == ["m"]  # n's shape folded; its values unused
    got = execute_fp16(prog, [integer_feed(np.array([[3, 255]]), prog.inputs[0])])[0]
    assert got.tolist() == [[3.0, 510.0]]


# ---- integers computed on the engine: RoBERTa's position ids (io/int_values.py) ----------

PAD = 1


def _positions_model(seq=8, rows=40, pad=PAD, exclusive=0, reverse=0, cast_to=TensorProto.INT32):
    """RoBERTa's position ids as torch's exporter writes them, ``Equal, Not, Cast,
    CumSum, Mul, Cast, Add``, then the position and token embeddings; outputs the rows,
    the positions as float, and their sum."""
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["eq"]),
        helper.make_node("Not", ["eq"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["mask"], to=cast_to),
        helper.make_node("CumSum", ["mask", "ax"], ["cs"], exclusive=exclusive, reverse=reverse),
        helper.make_node("Mul", ["cs", "mask"], ["inc"]),
        helper.make_node("Cast", ["inc"], ["inc64"], to=I64),
        helper.make_node("Add", ["inc64", "pad"], ["pos"]),
        helper.make_node("Gather", ["pos_table", "pos"], ["rows"]),
        helper.make_node("Cast", ["pos"], ["posf"], to=F32),
        helper.make_node("Gather", ["tok_table", "ids"], ["tok"]),
        helper.make_node("Add", ["tok", "rows"], ["x"]),
    ]
    rng = np.random.default_rng(3)
    # fp16 tables: a row copied exactly is the same number in float32 and fp16
    pos_table = rng.standard_normal((rows, 4)).astype(np.float16).astype(np.float32)
    tok_table = rng.standard_normal((VOCAB, 4)).astype(np.float16).astype(np.float32)
    inits = [("pad", np.array(pad)), ("ax", np.array(1)), ("pos_table", pos_table),
             ("tok_table", tok_table)]  # fmt: skip
    outs = [("rows", F32, (2, seq, 4)), ("posf", F32, (2, seq)), ("x", F32, (2, seq, 4))]
    return _model(nodes, [("ids", I64, (2, seq))], outs, inits)


def _padded_ids(seq=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (2, seq))
    ids[0, -3:] = PAD  # right padding
    ids[1, :2] = PAD  # and padding first
    ids[1, 3] = PAD  # and inside
    ids[0, 0] = VOCAB - 1  # past 2048 would need a larger vocabulary: the last row
    return ids


def _run(prog, ids, fast=True):
    return execute_fp16(prog, [integer_feed(ids, prog.inputs[0])], fast=fast)


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_position_ids_computed_from_the_ids_match_onnxruntime_exactly(exclusive, reverse):
    model = _positions_model(exclusive=exclusive, reverse=reverse)
    with pytest.warns(af.AneforgeWarning, match="compared with integer constants by"):
        graph = from_onnx(model)
    prog = graph.compile()
    ops = [n.op for n in prog.compute_nodes]
    # Not(Equal(ids, pad)) is one not_equal, as ATen's ne gives it
    assert {"embedding_fp16_ids", "embedding", "int_to_fp16", "not_equal"} <= set(ops)
    assert "equal" not in ops
    session = ort.InferenceSession(model.SerializeToString())
    for seed in range(3):
        ids = _padded_ids(seed=seed)
        want = session.run(None, {"ids": ids})
        for fast in (True, False):
            rows, posf, x = _run(prog, ids, fast)
            assert np.array_equal(posf, want[1].astype(np.float16))  # the positions, exactly
            assert np.array_equal(rows, want[0].astype(np.float16))  # their rows, bit for bit
            # one fp16 add of two fp16 rows: float32's sum rounded once
            assert np.array_equal(x, want[2].astype(np.float16))


def test_the_positions_follow_the_padding_as_roberta_numbers_them():
    prog = from_onnx(_positions_model()).compile()
    ids = _padded_ids()
    keep = ids != PAD
    expect = np.cumsum(keep, axis=1) * keep + PAD  # fairseq's make_positions in NumPy
    assert np.array_equal(_run(prog, ids)[1], expect.astype(np.float16))
    assert _run(prog, ids)[1][1, :2].tolist() == [PAD, PAD]


def _refused(model):
    with pytest.raises(UnsupportedModelError) as err:
        from_onnx(model)
    return str(err.value), err.value


def test_computed_integers_past_2048_are_refused_naming_the_interval():
    # a cumsum along 3000 tokens: its partial sums reach 3000
    msg, err = _refused(_positions_model(seq=3000, rows=4000))
    assert "input 'ids' (int64) is a run-time integer input" in msg
    assert "CumSum" in msg and "gives values in [0, 3000]" in msg and "past 2048" in msg
    assert "constants={'ids': ...}" in msg and err.bind_inputs == ["ids"]
    # big values: the 0/1 mask times 2000, summed along 8 tokens
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["m"], to=I64),
        helper.make_node("Mul", ["m", "k"], ["big"]),  # [0, 2000]: still exact
        helper.make_node("CumSum", ["big", "ax"], ["cs"]),  # [0, 16000]: refused
        helper.make_node("Cast", ["cs"], ["y"], to=F32),
    ]
    inits = [("pad", np.array(PAD)), ("k", np.array(2000)), ("ax", np.array(1))]
    msg, _ = _refused(_model(nodes, [("ids", I64, (2, 8))], [("y", F32, (2, 8))], inits))
    assert "gives values in [0, 16000] (partial sums of up to 8 terms in [0, 2000])" in msg
    # a Mul leaving the range: positions along 64 tokens squared
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["m"], to=I64),
        helper.make_node("CumSum", ["m", "ax"], ["cs"]),  # [0, 64]
        helper.make_node("Mul", ["cs", "cs"], ["sq"]),  # [0, 4096]: refused
        helper.make_node("Cast", ["sq"], ["y"], to=F32),
    ]
    inits = [("pad", np.array(PAD)), ("ax", np.array(1))]
    msg, _ = _refused(_model(nodes, [("ids", I64, (1, 64))], [("y", F32, (1, 64))], inits))
    assert "Mul" in msg and "gives values in [0, 4096] (mul of [0, 64] and [0, 64])" in msg


def test_a_comparison_with_2048_or_more_is_refused_and_2047_is_exact():
    def model(c):
        nodes = [helper.make_node("Equal", ["ids", "c"], ["eq"]),
                 helper.make_node("Cast", ["eq"], ["y"], to=F32)]  # fmt: skip
        return _model(nodes, [("ids", I64, (1, 4))], [("y", F32, (1, 4))], [("c", np.array(c))])

    for c in (2048, -2048, 40000):
        msg, _ = _refused(model(c))
        assert f"reads the constant {c}" in msg and "2049 becomes 2048" in msg
    m = model(2047)
    prog = from_onnx(m, input_ranges={"ids": (0, 4096)}).compile()
    ids = np.array([[2047, 2048, 2049, 4095]])  # 2049 and 4095 round in fp16, never to 2047
    want = ort.InferenceSession(m.SerializeToString()).run(None, {"ids": ids})[0]
    assert np.array_equal(_run(prog, ids)[0], want.astype(np.float16))
    assert want.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_a_position_past_the_table_is_an_error_when_it_runs():
    # 8 tokens, 6 rows: positions up to 9 cannot be proved inside the table, so a note
    with pytest.warns(af.AneforgeWarning, match=r"lie in \[1, 9\], which is not within"):
        graph = from_onnx(_positions_model(rows=6))
    prog = graph.compile()
    ids = np.full((2, 8), PAD)
    ids[:, :4] = 7  # four tokens: positions 2..5, all rows of the table
    assert np.array_equal(_run(prog, ids)[1][0], [2, 3, 4, 5, 1, 1, 1, 1])
    ids[1, :] = 9  # eight tokens: position 6 and beyond are not rows
    for fast in (True, False):
        with pytest.raises(IdValueError, match=r"id 6 at index \(1, 4\).*\[0, 6\)"):
            _run(prog, ids, fast)


def test_the_notes_and_the_partition_describe_an_input_compared_on_the_engine():
    with pytest.warns(af.AneforgeWarning) as record:
        graph = from_onnx(_positions_model())
    notes = [str(w.message) for w in record if "input 'ids'" in str(w.message)]
    assert len(notes) == 1 and "a uint16 input on the engine" in notes[0]
    assert "the ids of embedding Gather" in notes[0]
    assert "converted to fp16 and compared with integer constants by 'eq'" in notes[0]
    assert graph.partition.integer_inputs == {"ids": "uint16"}


def test_add_sub_mul_of_computed_integers_match_onnxruntime_bit_for_bit():
    nodes = [
        helper.make_node("Equal", ["ids", "five"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["m"], to=I64),  # [0, 1]
        helper.make_node("Mul", ["m", "minus3"], ["a"]),  # [-3, 0]: 0 * -3 is -0 in fp16
        helper.make_node("Add", ["a", "seven"], ["b"]),  # [4, 7]
        helper.make_node("Sub", ["b", "m"], ["c"]),  # [3, 7]
        helper.make_node("Mul", ["a", "c"], ["d"]),  # [-21, 0]
        helper.make_node("Sub", ["zero", "d"], ["e"]),  # [0, 21], a constant first
    ]
    inits = [("five", np.array(5)), ("minus3", np.array(-3)), ("seven", np.array(7)),
             ("zero", np.array(0))]  # fmt: skip
    outs = []
    for name in ("a", "d", "e"):
        nodes.append(helper.make_node("Cast", [name], [f"{name}f"], to=F32))
        outs.append((f"{name}f", F32, (2, 6)))
    model = _model(nodes, [("ids", I64, (2, 6))], outs, inits)
    prog = from_onnx(model).compile()
    ids = np.array([[5, 0, 5, 3, 2049, 5], [1, 1, 5, 4097, 5, 2]])
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": ids})
    for got, ref in zip(_run(prog, ids), want):
        # +0 where the integer is 0: the same bits as float32's value in fp16
        assert np.array_equal(got.view(np.uint16), ref.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_a_cumsum_of_negative_computed_integers_matches_onnxruntime_bit_for_bit(exclusive, reverse):
    nodes = [
        helper.make_node("Equal", ["ids", "pad"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["m"], to=I64),
        helper.make_node("Sub", ["m", "two"], ["neg"]),  # [-2, -1]
        helper.make_node("CumSum", ["neg", "ax"], ["cs"], exclusive=exclusive, reverse=reverse),
        helper.make_node("Cast", ["cs"], ["y"], to=F32),
    ]
    inits = [("pad", np.array(PAD)), ("two", np.array(2)), ("ax", np.array(1))]
    model = _model(nodes, [("ids", I64, (2, 7))], [("y", F32, (2, 7))], inits)
    prog = from_onnx(model).compile()
    ids = _padded_ids(seq=7, seed=4)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"ids": ids})[0]
    for fast in (True, False):
        got = _run(prog, ids, fast)[0]  # an exclusive sum starts at +0, as in integers
        assert np.array_equal(got.view(np.uint16), want.astype(np.float16).view(np.uint16))
