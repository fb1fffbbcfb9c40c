"""Core ML export: the lowering table, round trips through saved packages, the device.

On Linux coremltools builds, converts, saves and reads packages back but cannot run
them, so the checks here are structural (op for op, weight for weight, feature names
and types, deployment targets) plus a check of each lowering's meaning through
coremltools' own value inference (the program's inputs fed as constants). Running the
package is the Core ML device's job; those tests need macOS and say so.
"""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.compression import quantize_graph_int8
from aneforge.graph.ops import bridge as br
from aneforge.graph.ops.elementwise import BINARY, COMPARE, UNARY
from aneforge.graph.registry import all_ops
from aneforge.graph.tensor import make, random_feed
from aneforge.io import coreml_device, coreml_ops, coreml_table
from aneforge.io.coreml_export import (
    DEFAULT_IOS,
    ExportError,
    export_coreml,
    load_mil_program,
    load_spec,
    lower_program,
    parse_deployment,
)
from aneforge.optimizer.routes import decomposers

devices_module = importlib.import_module("aneforge.devices")
ROOT = Path(__file__).resolve().parents[2]
MACOS_ONLY = pytest.mark.skipif(
    sys.platform != "darwin",
    reason="Core ML prediction needs macOS: coremltools cannot load or run models here",
)
# coremltools' value inference evaluates MIL ops in NumPy on fp16 arrays, with its own
# rounding points and summation order; a correct lowering agrees with the emulator to a
# few fp16 ulps of the output's scale (2**-10 is one ulp at 1.0).
VALUE_INFERENCE_TOL = 8 * 2.0**-10

R = np.random.default_rng(0)


def _w(shape, scale=0.5):
    return af.weight(R.standard_normal(shape) * scale)


def _samples() -> dict[str, list]:
    """Every fused and bridge op Core ML expresses -> small graphs using it."""
    x = af.input((2, 3, 6, 6), name="x")
    v = af.input((2, 8), name="v")
    s: dict[str, list] = {}
    for op in UNARY:
        s[op] = [make(op, v)]
    s["clip"] = [make("clip", v, lo=-0.5, hi=0.5), make("clip", v, lo=0.0), make("clip", v, hi=0.1)]
    for op in (*BINARY, *COMPARE):
        s[op] = [make(op, v, _w((8,)))]
    s["select"] = [
        af.select(v > 0, v, _w((2, 8))),
        af.select(v > 0, _w((1,)), np.full(1, -np.inf)),  # only the condition is full size
    ]
    s["matmul"] = [v @ _w((8, 4)), v @ _w((8,))]
    s["bmm"] = [af.bmm(af.input((3, 2, 4)), af.input((3, 4, 5)))]
    s["linear"] = [
        af.linear(v, _w((4, 8)), _w((4,))),
        af.linear(af.input((2, 2, 2, 8)), _w((4, 8))),
    ]
    s["conv"] = [
        af.conv(x, _w((4, 3, 3, 3)), _w((4,)), stride=2, padding=(1, 0, 1, 1)),
        af.conv(af.input((1, 4, 9)), _w((4, 2, 3)), groups=2, dilation=2),
    ]
    s["conv_transpose"] = [
        af.conv_transpose(x, _w((3, 2, 2, 2)), _w((2,)), stride=2, padding=1, output_padding=1),
        af.conv_transpose(x, _w((3, 2, 3, 3)), _w((2,)), stride=2, output_padding=1),
    ]
    for op in ("sum", "mean", "amax", "amin"):
        s[op] = [make(op, x, axes=(1, 2), keepdims=True), make(op, v, axes=None, keepdims=False)]
    s["softmax"] = [af.softmax(x, axis=1)]
    s["cumsum"] = [af.cumsum(v)]
    s["layer_norm"] = [af.layer_norm(af.input((2, 4, 8)), _w((4, 8)), _w((4, 8)), axis=-2)]
    s["rms_norm"] = [af.rms_norm(v, _w((8,)))]
    s["group_norm"] = [af.group_norm(af.input((2, 4, 3, 3)), 2, _w((4,)), _w((4,)))]
    var = af.weight(R.uniform(0.5, 1.5, 3))
    s["batch_norm"] = [
        af.batch_norm(x, _w((3,)), var, _w((3,)), _w((3,))),
        af.batch_norm(v, _w((8,)), af.weight(R.uniform(0.5, 1.5, 8))),
    ]
    s["l2_norm"] = [af.l2_norm(x, axis=1)]
    s["max_pool"] = [af.max_pool(x, 3, stride=2, padding=1), af.max_pool(af.input((1, 2, 9)), 2)]
    s["avg_pool"] = [
        af.avg_pool(x, 3, stride=1, padding=1),
        af.avg_pool(x, 2, padding=1, count_include_pad=True),
    ]
    s["upsample"] = [
        af.upsample(x, 2),
        af.upsample(x, (2, 3), mode="bilinear"),
        af.upsample(x, 2, mode="bilinear", align_corners=True),
        af.upsample(af.input((1, 2, 5)), 3, mode="bilinear"),
    ]
    s["reshape"] = [af.reshape(x, (6, -1))]
    s["transpose"] = [af.transpose(x, (0, 2, 3, 1)), v.T]
    s["concat"] = [af.concat([v, _w((3, 8))], axis=0)]
    s["slice"] = [x[:, 1:, ::2, 1:5:3], v[1]]
    s["squeeze"] = [af.squeeze(af.input((1, 3, 1)))]
    s["expand_dims"] = [af.expand_dims(v, (0, 3))]
    s["pixel_shuffle"] = [af.pixel_shuffle(af.input((1, 8, 3, 3)), 2)]
    s["pixel_unshuffle"] = [af.pixel_unshuffle(x, 2)]
    s["cast"] = [af.cast(v)]
    s["gather"] = [af.gather(x, [2, 0, 1, 2], axis=1), af.gather(v, [-1, 3], axis=1),
                   af.gather(v, list(range(7, -1, -1)) * 3, axis=1)]  # fmt: skip
    ids = af.input((2, 3), name="ids", dtype="uint16", range=(0, 8))
    s["embedding"] = [af.embedding(_w((9, 4)), ids)]
    s["int_to_fp16"] = [af.cast(af.input((2, 5), name="mask", dtype="int16"))]
    # fp16 whole-number ids, as the importers compute position ids on the engine
    pos = af.cast(af.input((2, 3), name="pos", dtype="uint8", range=(0, 8)))
    s["embedding_fp16_ids"] = [make("embedding_fp16_ids", _w((9, 4)), pos)]
    q, k, vv = af.input((2, 5, 4)), af.input((2, 7, 4)), af.input((2, 7, 3))
    s["sdpa"] = [br.sdpa(q, k, vv), br.sdpa(q, k, vv, scale=0.3, mask=_w((5, 7)))]
    s["argmax"] = [br.argmax(x, axis=1, keepdims=True)]
    s["topk"] = list(br.topk(v, 3))
    s["sort"] = [br.sort(v, descending=True)]
    s["minmax_norm"] = [br.minmax_norm(x)]
    s["flatten"] = [br.flatten(x, axis=2)]
    s["lrn"] = [br.lrn(x, size=3), br.lrn(x, size=2)]
    s["space_to_channel"] = [br.space_to_channel(x, 2)]
    s["channel_to_space"] = [br.channel_to_space(af.input((1, 8, 2, 3)), 2)]
    s["space_to_batch"] = [br.space_to_batch(x, 3)]
    s["batch_to_space"] = [br.batch_to_space(af.input((8, 2, 2, 3)), 2)]
    s["input_view"] = [br.input_view(x, (0, 1, 2, 0), (2, 2, 3, 4))]
    s["dynamic_slice"] = [br.dynamic_slice(v, af.input((2,), name="at"), (1, 3))]
    s["cross_product"] = [br.cross_product(af.input((4, 3)), _w((3,)))]
    s["cross_correlation"] = [br.cross_correlation(x, af.input((3, 2, 3)))]
    s["cost_volume"] = [br.cost_volume(x, af.input((2, 3, 6, 6)), 8)]
    s["radius_search"] = [
        br.radius_search(af.input((6, 3)), af.input((2, 3)), 1.0, 4),
        br.radius_search(af.input((3, 3)), af.input((2, 3)), 1.5, 5),
    ]
    s["scaled_elementwise"] = [br.scaled_elementwise(v, _w((8,)), op="sub", scale=0.5)]
    return s


SAMPLES = _samples()

# Ops whose every emitted MIL op has value inference in coremltools 9, so their meaning
# is checked against the emulator here (the rest: conv, pools, resampling, batch_norm,
# block moves, silu and local_response_norm are checked on a Mac by the device tests).
VALUE_CHECKED = (
    set(UNARY) - {"silu"} | set(BINARY) | set(COMPARE)
    | {"select", "matmul", "bmm", "linear", "sum", "mean", "amax", "amin", "softmax",
       "cumsum", "layer_norm", "rms_norm", "group_norm", "l2_norm", "reshape", "transpose",
       "concat", "slice", "squeeze", "expand_dims", "cast", "gather", "embedding",
       "embedding_fp16_ids", "int_to_fp16", "sdpa", "argmax", "topk", "sort", "minmax_norm",
       "flatten", "input_view", "dynamic_slice", "cross_product", "cost_volume",
       "radius_search", "scaled_elementwise"}
)  # fmt: skip


def _program(outs):
    return Program.from_outputs(outs if isinstance(outs, list) else [outs])


def _feeds(prog, rng):
    feeds = [
        rng.standard_normal(t.shape).astype(np.float16)
        if t.dtype == "float16"
        else random_feed(t, rng)  # ids within their range, mask values of the type
        for t in prog.inputs
    ]
    for i, t in enumerate(prog.inputs):
        if t.name == "at":  # dynamic_slice offsets: one rounded up, one clamped
            feeds[i] = np.array([0.6, 9.0], np.float16)
    return feeds


def _non_const_ops(mil_program) -> list[str]:
    ops = mil_program.functions["main"].operations
    return [op.op_type for op in ops if not op.op_type.startswith("const")]


def _consts(mil_program) -> dict:
    ops = mil_program.functions["main"].operations
    return {op.name: op for op in ops if op.op_type.startswith("const")}


def _const_value(op):
    if op.op_type == "const":
        return np.asarray(op.outputs[0].val)
    return np.asarray(op.materialized_val_inference())


def _check_weights(prog, low, loaded):
    """Every aneforge weight is a constant of the package holding its fp16 values."""
    consts = _consts(loaded)
    by_node = {id(node): name for name, node in low.weights.items()}
    fp16 = [np.asarray(_const_value(op)) for op in consts.values() if op.op_type == "const"]
    checked = 0
    for w in (n for n in prog.nodes if n.op == "weight"):
        want = np.asarray(w.value, np.float16)
        name = by_node.get(id(w))
        if name in consts:
            got = _const_value(consts[name])
            assert got.dtype == np.float16, name
            assert got.size == want.size and np.array_equal(got.ravel(), want.ravel()), name
        else:  # a reshaped copy (norm parameters) or merged with an equal constant
            assert any(g.size == want.size and np.array_equal(g.ravel(), want.ravel())
                       for g in fp16 if g.dtype == np.float16), w.name  # fmt: skip
        checked += 1
    return checked


def _round_trip(prog, tmp_path, **kw):
    path, low = export_coreml(prog, tmp_path / "m.mlpackage", return_lowering=True, **kw)
    loaded = load_mil_program(path)
    assert _non_const_ops(loaded) == low.mil_op_types()
    return path, low, loaded


# ---- the table -----------------------------------------------------------------------


def test_every_fused_and_bridge_op_is_lowered_decomposed_or_refused_with_a_reason():
    ops = {n: op for n, op in all_ops().items() if op.kind != "source"}
    assert set(coreml_ops.LOWERINGS) == set(ops)
    for name, entry in coreml_ops.LOWERINGS.items():
        assert entry.status in coreml_ops.STATUSES, name
        assert entry.mil, name
        if entry.status == coreml_ops.LOWERED:
            assert callable(entry.fn), name
            if entry.native_if is not None:
                assert name in decomposers() and entry.note, name
        elif entry.status == coreml_ops.DECOMPOSED:
            assert name in decomposers() and entry.fn is None, name
        else:
            assert ops[name].kind == "bridge" and len(entry.note) > 40, name
    cover = coreml_table.coverage()
    assert cover["missing"] == []
    assert cover[coreml_ops.NOT_EXPRESSIBLE] == ["fps"]
    assert set(cover[coreml_ops.DECOMPOSED]) == {"minmax_norm", "flatten"}


def test_the_samples_exercise_every_expressible_op():
    cover = coreml_table.coverage()
    assert set(SAMPLES) == set(cover[coreml_ops.LOWERED]) | set(cover[coreml_ops.DECOMPOSED])


def test_the_documented_table_is_the_code_table():
    text = (ROOT / "docs" / "export.md").read_text()
    block = text.split(coreml_table.BEGIN)[1].split(coreml_table.END)[0]
    assert block.strip() == coreml_table.render_lowering_table().strip(), (
        "docs/export.md is stale: run python -m aneforge.io.coreml_table docs/export.md"
    )


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_each_op_lowers_with_aneforge_shapes_and_meaning(op):
    prog = _program(SAMPLES[op])
    low = lower_program(prog)  # each node's MIL shape is checked against aneforge's
    assert all(rec.mil_ops for rec in low.nodes)
    feeds = _feeds(prog, np.random.default_rng(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fed = lower_program(prog, feeds=feeds)
    want = prog.run(*feeds)
    got = [o.val for o in fed.program.functions["main"].outputs]
    if op not in VALUE_CHECKED:
        return
    for g, r in zip(got, want):
        assert g is not None, f"{op}: coremltools inferred no value"
        g = np.asarray(g, np.float64).reshape(r.shape)
        r = r.astype(np.float64)
        finite = np.abs(r[np.isfinite(r)])
        scale = max(float(np.max(finite, initial=0.0)), 1.0)
        assert np.array_equal(np.isnan(g), np.isnan(r)), op
        ok = ~np.isnan(r)
        assert np.array_equal(g[~np.isfinite(r)], r[~np.isfinite(r)], equal_nan=True), op
        ok = np.isfinite(r)
        assert np.max(np.abs(g - r)[ok], initial=0.0) <= VALUE_INFERENCE_TOL * scale, op


def test_every_sample_round_trips_op_for_op_at_each_opset(tmp_path):
    outs = [t for ts in SAMPLES.values() for t in ts]
    prog = _program(outs)
    for ios, spec_version in (("iOS16", 7), ("iOS17", 8), ("iOS18", 9)):
        path, low, loaded = _round_trip(prog, tmp_path / ios, minimum_deployment_target=ios)
        assert load_spec(path).specificationVersion == spec_version
        assert len(load_spec(path).description.output) == len(outs)
        assert _check_weights(prog, low, loaded) > 40
        sdpa_native = "scaled_dot_product_attention" in low.mil_op_types()
        assert sdpa_native == (ios == "iOS18")
        assert low.decomposed["sdpa"] == (1 if ios == "iOS18" else 2)  # custom scale: route


# ---- real graphs: op for op, weight for weight ---------------------------------------

# What each aneforge op of the example graphs must become (written independently of
# the lowering table).
EXPECTED_MIL = {
    "conv": ["conv"], "batch_norm": ["batch_norm"], "relu": ["relu"],
    "max_pool": ["max_pool"], "avg_pool": ["avg_pool"], "reshape": ["reshape"],
    "linear": ["linear"], "layer_norm": ["layer_norm"], "matmul": ["matmul"],
    "transpose": ["transpose"], "bmm": ["matmul"], "mul": ["mul"], "softmax": ["softmax"],
    "add": ["add"], "gelu": ["gelu"],
}  # fmt: skip


@pytest.mark.parametrize("example", ["small_cnn", "transformer_block"])
def test_examples_round_trip_op_for_op_and_weight_for_weight(example, tmp_path):
    x, y = getattr(af.nn, example)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile(y)
    path, low, loaded = _round_trip(prog, tmp_path)
    want = [m for n in prog.compute_nodes for m in EXPECTED_MIL[n.op]]
    assert _non_const_ops(loaded) == want
    assert _check_weights(prog, low, loaded) == sum(n.op == "weight" for n in prog.nodes)
    spec = load_spec(path)
    (inp,), (out,) = spec.description.input, spec.description.output
    assert inp.name == x.name and list(inp.type.multiArrayType.shape) == list(x.shape)
    assert out.name == "output_0" and list(out.type.multiArrayType.shape) == list(y.shape)
    fp16 = inp.type.multiArrayType.FLOAT16
    assert inp.type.multiArrayType.dataType == out.type.multiArrayType.dataType == fp16
    assert spec.specificationVersion == 8  # iOS 17 / macOS 14, the default
    meta = spec.description.metadata.userDefined
    assert meta["com.aneforge.deployment"] == "iOS17 / macOS14"


def test_bridge_ops_use_their_routes_where_core_ml_has_no_op(tmp_path):
    x = af.input((1, 8, 5, 5), name="x")
    odd = br.lrn(x, size=3)  # Core ML's local_response_norm
    even = br.lrn(x, size=4)  # no Core ML window for even sizes: the window-of-slices route
    q = af.reshape(even, (1, 8, 25))
    att = br.sdpa(q, q, q)  # iOS 17: the bmm/softmax route
    mm = br.minmax_norm(att)
    prog = _program([odd, mm])
    path, low, loaded = _round_trip(prog, tmp_path)
    assert low.decomposed == {"lrn": 1, "sdpa": 1, "minmax_norm": 1}
    by_op = {rec.op: Counter() for rec in low.nodes}
    for rec in low.nodes:
        by_op[rec.op].update(rec.mil_ops)
    assert by_op["lrn"] == Counter({"local_response_norm": 1})
    # the even window: zero-padded squares, then one add per channel slice, in order
    assert by_op["concat"] == Counter({"concat": 1}) and by_op["pow"] == Counter({"pow": 1})
    assert by_op["slice"] == Counter({"slice_by_index": 4}) and "conv" not in by_op
    assert by_op["softmax"] == Counter({"softmax": 1})
    assert by_op["bmm"] == Counter({"matmul": 2})
    assert by_op["amin"] == Counter({"reduce_min": 1})
    assert by_op["amax"] == Counter({"reduce_max": 1})
    assert "sdpa" not in by_op and "minmax_norm" not in by_op
    pads = sorted(
        np.asarray(c.outputs[0].val).shape
        for c in _consts(loaded).values()
        if c.op_type == "const"
        and np.asarray(c.outputs[0].val).shape in ((1, 1, 5, 5), (1, 2, 5, 5))
    )
    assert pads == [(1, 1, 5, 5), (1, 2, 5, 5)]
    consts = _consts(loaded)
    for name, w in low.weights.items():  # the routes' own weights (zero pads, scales)
        want = np.asarray(w.value, np.float16).ravel()
        assert np.array_equal(_const_value(consts[name]).ravel(), want), name
    assert len(low.weights) == 8


def test_one_op_of_each_family_round_trips(tmp_path):
    x = af.input((1, 4, 6, 6), name="image")
    e = af.gelu(x) + _w((4, 1, 1))  # elementwise
    r = af.mean(e, axis=(2, 3), keepdims=True)  # reduction
    n = af.group_norm(e - r, 2, _w((4,)), _w((4,)))  # norm
    p = af.max_pool(n, 2)  # pool
    s = af.transpose(af.reshape(p, (1, 4, 9)), (0, 2, 1))  # shape
    prog = _program([s, af.amax(e, axis=-1)])
    path, low, loaded = _round_trip(prog, tmp_path)
    families = {rec.op: Counter(rec.mil_ops) for rec in low.nodes}
    assert families["gelu"] == Counter({"gelu": 1}) and families["add"] == Counter({"add": 1})
    assert families["mean"] == Counter({"reduce_mean": 1})
    assert families["group_norm"] == Counter(
        {"reshape": 2, "reduce_mean": 2, "sub": 1, "mul": 3, "add": 2, "rsqrt": 1}
    )
    assert families["max_pool"] == Counter({"max_pool": 1})
    assert families["transpose"] == Counter({"transpose": 1})
    assert families["amax"] == Counter({"reduce_max": 1})
    assert _check_weights(prog, low, loaded) == 3
    names = [o.name for o in load_spec(path).description.output]
    assert names == ["output_0", "output_1"]


# ---- compressed weights --------------------------------------------------------------

ENCODED_OPS = {
    ("int8", 17): "constexpr_affine_dequantize",
    ("int8", 18): "constexpr_blockwise_shift_scale",
    ("int4", 17): "constexpr_lut_to_dense",
    ("int4", 18): "constexpr_lut_to_dense",
    ("sparse", 17): "constexpr_sparse_to_dense",
    ("sparse", 18): "constexpr_sparse_to_dense",
}


def _compressed_graph():
    """A graph with one weight of each encoding (built with aneforge's codecs)."""
    from aneforge.compression import encode, encoded_weight

    x = af.input((1, 4, 6, 6), name="x")
    conv_w = _w((8, 4, 3, 3))
    lin_w = _w((5, 8))
    sparse = R.standard_normal((8, 3)) * (R.random((8, 3)) < 0.3)
    mm_w = af.weight(sparse)
    enc = {
        "int8": encoded_weight(conv_w, encode(conv_w.value, "int8", axis=0)),
        "int4": encoded_weight(lin_w, encode(lin_w.value, "int4", axis=0)),
        "sparse": encoded_weight(mm_w, encode(mm_w.value, "sparse")),
    }
    h = af.relu(af.conv(x, enc["int8"], padding=1))
    h = af.linear(af.reshape(af.mean(h, axis=(2, 3)), (1, 8)), enc["int4"])
    return _program(af.linear(h, _w((8, 5))) @ enc["sparse"]), enc


@pytest.mark.parametrize("ios", [17, 18])
def test_encoded_weights_are_constexpr_ops_decoding_to_aneforge_values(ios, tmp_path):
    prog, enc = _compressed_graph()
    path, low, loaded = _round_trip(prog, tmp_path, minimum_deployment_target=ios)
    consts = _consts(loaded)
    for encoding, w in enc.items():
        name = next(k for k, v in low.weights.items() if v is w)
        op = consts[name]
        assert op.op_type == ENCODED_OPS[(encoding, ios)], encoding
        decoded = _const_value(op)
        assert decoded.dtype == np.float16 and decoded.shape == w.shape, encoding
        assert np.array_equal(decoded, w.value), encoding
    int8 = consts[next(k for k, v in low.weights.items() if v is enc["int8"])]
    data = int8.quantized_data.val if ios == 17 else int8.data.val
    assert data.dtype == np.int8 and data.shape == enc["int8"].shape
    assert _check_weights(prog, low, loaded) == sum(n.op == "weight" for n in prog.nodes)


def test_a_quantized_example_exports_its_int8_weights(tmp_path):
    _, y = af.nn.small_cnn()
    prog = _program(quantize_graph_int8(y))
    path, low, loaded = _round_trip(prog, tmp_path)
    kinds = Counter(op.op_type for op in _consts(loaded).values())
    assert kinds["constexpr_affine_dequantize"] == 4
    assert _check_weights(prog, low, loaded) == sum(n.op == "weight" for n in prog.nodes)


def test_an_encoding_without_metadata_is_refused():
    from aneforge.graph.tensor import FrozenAttrs, Tensor

    w = _w((4, 8))
    bare = Tensor("weight", (), FrozenAttrs(encoding="int8"), w.shape, name="bare",
                  value=w.value)  # fmt: skip
    with pytest.raises(ExportError, match="bare.*metadata"):
        lower_program(_program(af.linear(af.input((2, 8)), bare)))
    odd = Tensor("weight", (), FrozenAttrs(encoding="fp8"), w.shape, name="odd", value=w.value)
    with pytest.raises(ExportError, match="'fp8' has no Core ML form"):
        lower_program(_program(af.linear(af.input((2, 8)), odd)))


# ---- deployment targets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "ios"), [("M1", 15), ("M2", 15), ("M3", 16), ("M4", 17), ("M5", 17), (None, 17)]
)
def test_the_deployment_target_follows_the_target_family(target, ios):
    x = af.input((1, 8), name="x")
    low = lower_program(_program(x.relu()), target=target)
    assert low.ios == ios and low.deployment == f"iOS{ios} / macOS{ios - 3}"
    assert low.io_dtype == ("float32" if ios < 16 else "float16")
    if ios == 15:  # fp32 features, cast to fp16 at the entry and back at the exit
        assert low.mil_op_types() == ["cast", "relu", "cast"]
    assert DEFAULT_IOS == 17


def test_a_chosen_target_is_raised_to_what_the_program_needs():
    x = af.input((1, 8), name="x")
    prog = _program(quantize_graph_int8(x @ np.ones((8, 4))))
    low = lower_program(prog, target="M1")
    assert low.ios == 16 and "int8" in low.reasons[-1]
    low = lower_program(_program(af.pixel_unshuffle(af.input((1, 1, 4, 4)), 2)), target="M1")
    assert low.ios == 16 and "pixel_unshuffle" in low.reasons[-1]
    with pytest.raises(ExportError, match="int8 weights .* need iOS 16"):
        lower_program(prog, minimum_deployment_target="iOS15")
    with pytest.raises(ExportError, match="fp16 inputs"):
        lower_program(_program(x.relu()), minimum_deployment_target="macOS12", io_dtype="float16")


def test_deployment_names_and_refusals():
    assert parse_deployment("iOS17") == parse_deployment("macOS14") == 17
    assert parse_deployment(16) == 16
    for bad in ("iOS14", "watchOS9", True):
        with pytest.raises(ExportError):
            parse_deployment(bad)
    x = af.input((2,))
    with pytest.raises(ExportError, match="no ML Program path"):
        lower_program(_program(x.relu()), target="A12 Bionic")


# ---- errors, names, determinism ------------------------------------------------------


def test_inexpressible_ops_are_all_reported_in_one_error():
    pts = af.input((10, 3), name="pts")
    prog = _program([br.fps(pts, 4), br.fps(pts, 2), af.pixel_unshuffle(af.input((1, 1, 4, 4)), 2)])
    with pytest.raises(ExportError) as err:
        lower_program(prog, minimum_deployment_target="iOS15")
    message = str(err.value)
    assert "fps (x2)" in message and "host" in message
    assert "pixel_unshuffle (x1): needs iOS 16" in message


def test_export_arguments_are_checked(tmp_path):
    x = af.input((2,), name="x")
    with pytest.raises(ExportError, match=".mlpackage"):
        export_coreml(x.relu(), tmp_path / "m.mlmodel")
    with pytest.raises(ExportError, match="output_names"):
        lower_program(x.relu(), output_names=["a", "b"])
    with pytest.raises(ExportError, match="distinct"):
        lower_program(x.relu(), output_names=["x"])
    with pytest.raises(ExportError, match="io_dtype"):
        lower_program(x.relu(), io_dtype="int8")
    with pytest.raises(ExportError, match="Program"):
        lower_program("model.onnx")


def test_names_scalars_and_overwrite(tmp_path):
    a, b = af.input((3,), name="first input"), af.input((3,))
    outs = [(a + b).sum(), a * 2.0, a * 2.0]
    path = export_coreml(outs, tmp_path / "m.mlpackage", output_names=["total", "p", "q"])
    spec = load_spec(path)
    assert [i.name for i in spec.description.input] == ["first_input", "input_1"]
    assert [o.name for o in spec.description.output] == ["total", "p", "q"]
    assert list(spec.description.output[0].type.multiArrayType.shape) == [1]  # rank 0
    again = export_coreml(outs, path, io_dtype="float32")  # replaces the package
    dtype = load_spec(again).description.input[0].type.multiArrayType
    assert again == path and dtype.dataType == dtype.FLOAT32
    assert [p.name for p in tmp_path.iterdir()] == ["m.mlpackage"]
    clash = af.input((2,), name="relu 0")  # made identifier-safe: the relu's layer name
    low = lower_program(clash.relu(), output_names=["mul_2"])
    assert low.input_names == ["relu_0"] and low.nodes[0].name == "relu_0_"


def test_optimize_hands_the_program_to_core_ml_passes(tmp_path):
    _, y = af.nn.small_cnn()
    ops = _non_const_ops(load_mil_program(export_coreml(y, tmp_path / "o.mlpackage",
                                                        optimize=True)))  # fmt: skip
    assert "batch_norm" not in ops and ops.count("conv") == 3  # folded into the convs


def test_lowering_is_deterministic():
    _, y = af.nn.transformer_block()
    first, second = lower_program(y), lower_program(y)
    text = [re.sub(r"block\d+", "block", str(low.program)) for low in (first, second)]
    assert text[0] == text[1]  # coremltools numbers its blocks process-wide
    assert sorted(first.weights) == sorted(second.weights)


# ---- the Core ML device --------------------------------------------------------------


@pytest.fixture
def isolated_devices(monkeypatch):
    monkeypatch.setattr(devices_module, "_FACTORIES", dict(devices_module._FACTORIES))


def test_the_device_registers_and_says_why_it_cannot_run_here(isolated_devices):
    coreml_device.register()
    coreml_device.register()  # idempotent
    assert "coreml" in af.devices()
    reason = coreml_device.unavailable_reason()
    if sys.platform == "darwin":
        assert reason is None or "coremltools" in reason
    else:
        assert "needs macOS" in reason and sys.platform in reason
        with pytest.raises(af.DeviceUnavailable, match="needs macOS"):
            af.get_device("coreml")
        with pytest.raises(af.DeviceUnavailable):
            af.compile(af.input((2,)).relu()).run(np.zeros(2), device="coreml")
    with pytest.raises(af.OptionError, match="compute_units"):
        coreml_device.CoreMLDevice(compute_units="GPU_ONLY")


@MACOS_ONLY
def test_the_device_runs_a_program_on_core_ml_near_the_emulator():
    x, y = af.nn.small_cnn()
    prog = af.compile(y)
    feed = np.random.default_rng(0).standard_normal(x.shape).astype(np.float16)
    dev = coreml_device.CoreMLDevice()
    assert isinstance(dev, af.Device) and dev.capabilities.real_hardware
    (got,) = dev.run(prog, [feed])
    (want,) = af.get_device("emulator").run(prog, [feed])
    assert got.dtype == np.float16 and got.shape == want.shape
    scale = float(np.max(np.abs(want.astype(np.float64))))
    # Core ML's kernels round and accumulate their own way: a handful of fp16 ulps of
    # the logits' scale over three conv layers.
    assert np.max(np.abs(got.astype(np.float64) - want)) <= 0.02 * scale
    assert dev.measure(prog, [feed], repeat=3) > 0


@MACOS_ONLY
def test_tune_measures_on_core_ml(isolated_devices, tmp_path):
    coreml_device.register()
    x = af.input((64, 256), name="x")
    prog = af.tune(x @ np.ones((256, 64)), device="coreml", cache_dir=tmp_path)
    assert prog.tune_report["device"] == "coreml(CPU_AND_NE)"


def _params(op) -> dict:
    """A loaded MIL op's constant inputs as plain Python values."""
    out = {}
    for key, var in op.inputs.items():
        if var.val is not None and np.asarray(var.val).size < 16:
            val = np.asarray(var.val)
            out[key] = val.item() if val.ndim == 0 else val.tolist()
    return out


def test_ops_without_value_inference_carry_the_right_parameters(tmp_path):
    """What value inference cannot check on Linux, the op parameters can."""
    x = af.input((1, 2, 7, 7), name="x")
    w = _w((4, 2, 3, 3))
    outs = [
        af.conv(x, w, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2)),
        af.conv_transpose(x, _w((2, 2, 3, 3)), stride=2, padding=(1, 0), output_padding=1),
        af.max_pool(x, (3, 2), stride=(2, 1), padding=(1, 0)),
        af.avg_pool(x, 3, stride=2, padding=1, count_include_pad=True),
        af.upsample(x, (2, 3), mode="bilinear", align_corners=True),
        af.upsample(x, 2),
        af.batch_norm(x, _w((2,)), af.weight(np.ones(2)), eps=1e-3),
        br.lrn(x, size=5, alpha=2e-4, beta=0.5, bias=2.0),
        br.space_to_batch(af.input((1, 2, 6, 6)), 3),
        af.pixel_shuffle(af.input((1, 8, 2, 2)), 2),
    ]
    path, low, loaded = _round_trip(_program(outs), tmp_path)
    ops = [op for op in loaded.functions["main"].operations if op.op_type != "const"]
    got = {op.op_type: _params(op) for op in ops}
    assert got["conv"] == {
        "strides": [2, 1], "pad_type": "custom", "pad": [1, 2, 0, 1], "dilations": [1, 2],
        "groups": 1,
    }  # fmt: skip
    # output_padding 1 comes off the end crop: pad (1, 1) -> begin 1, end 0 per dim
    assert got["conv_transpose"]["pad"] == [1, 0, 0, 0]
    assert got["conv_transpose"]["strides"] == [2, 2]
    assert got["max_pool"] == {
        "kernel_sizes": [3, 2], "strides": [2, 1], "pad_type": "custom", "pad": [1, 1, 0, 0],
        "ceil_mode": False,
    }  # fmt: skip
    assert got["avg_pool"]["exclude_padding_from_average"] is False
    assert got["avg_pool"]["pad"] == [1, 1, 1, 1]
    assert got["resize_bilinear"] == {
        "target_size_height": 14, "target_size_width": 21, "sampling_mode": "STRICT_ALIGN_CORNERS",
    }  # fmt: skip
    assert got["upsample_nearest_neighbor"] == {"scale_factor_height": 2, "scale_factor_width": 2}
    assert got["batch_norm"]["epsilon"] == pytest.approx(1e-3, rel=1e-3)
    lrn = got["local_response_norm"]
    assert lrn["size"] == 5 and lrn["beta"] == 0.5 and lrn["k"] == 2.0
    assert lrn["alpha"] == pytest.approx(2e-4, rel=1e-3)
    assert got["space_to_batch"] == {"block_shape": [3, 3], "paddings": [[0, 0], [0, 0]]}
    assert got["pixel_shuffle"] == {"upscale_factor": 2}


# ---- weights as outputs, and what an export may replace ----


def test_a_weight_that_is_an_output_exports_as_its_constant(tmp_path):
    x = af.input((2,), name="x")
    w = np.array([1.5, -2.0])
    prog = af.compile([x * 2.0, af.weight(w, name="w"), af.weight(np.array(3.0), name="k")])
    path = prog.export_coreml(tmp_path / "w.mlpackage")  # was a bare KeyError
    assert [o.name for o in load_spec(path).description.output] == ["output_0", "w", "k"]
    low = lower_program(prog, feeds=[np.array([1.0, -4.0])])
    got = [np.asarray(v.val, np.float64) for v in low.program.functions["main"].outputs]
    want = [np.array([2.0, -8.0]), w, np.array([3.0])]  # rank 0 travels as shape (1,)
    assert all(np.array_equal(g, v) for g, v in zip(got, want))


def _tree(root: Path) -> list:
    return sorted((str(p.relative_to(root)), p.is_dir()) for p in root.rglob("*"))


def test_export_replaces_only_the_packages_it_wrote(tmp_path):
    from aneforge.io.coreml_package import foreign_reason

    y = af.input((2,), name="x").relu()
    keep = tmp_path / "keep.mlpackage"
    keep.mkdir()
    (keep / "thesis.tex").write_text("years of work")
    (tmp_path / "file.mlpackage").write_text("not a package")
    (tmp_path / "link.mlpackage").symlink_to(keep)
    own = export_coreml(y, tmp_path / "own.mlpackage")
    assert foreign_reason(own) is None
    other = tmp_path / "other.mlpackage"  # a package without aneforge's mark
    shutil.copytree(own, other)
    spec = load_spec(other)
    del spec.description.metadata.userDefined["com.aneforge.version"]
    (other / "Data/com.apple.CoreML/model.mlmodel").write_bytes(spec.SerializeToString())
    before = _tree(tmp_path)
    refused = [("keep", "other files (thesis.tex)"), ("file", "a file"),
               ("link", "a symbolic link"), ("other", "without aneforge's mark")]  # fmt: skip
    for name, why in refused:
        with pytest.raises(ExportError, match=re.escape(why)):
            export_coreml(y, tmp_path / f"{name}.mlpackage")
    assert _tree(tmp_path) == before and (keep / "thesis.tex").read_text() == "years of work"
    again = export_coreml(y * 2.0, own)  # its own package: replaced without force
    assert again == own and foreign_reason(own) is None
    export_coreml(y, keep, force=True)
    assert foreign_reason(keep) is None and not (keep / "thesis.tex").exists()
    export_coreml(y, tmp_path / "link.mlpackage", force=True)  # the link goes, not its folder
    assert not (tmp_path / "link.mlpackage").is_symlink() and foreign_reason(keep) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "file.mlpackage", "keep.mlpackage", "link.mlpackage", "other.mlpackage", "own.mlpackage"
    ]  # fmt: skip


def test_export_paths_are_checked_before_any_work(tmp_path):
    y = af.input((2,), name="x").relu()
    (tmp_path / "afile").write_text("")
    for path, why in [("", "is empty"), ("/proc/x.mlpackage", "cannot write into '/proc'"),
                      (tmp_path / "afile" / "x.mlpackage", "is not a folder")]:  # fmt: skip
        with pytest.raises(ExportError, match=re.escape(why)):
            export_coreml(y, path)


def test_a_failed_rename_puts_the_replaced_package_back(tmp_path, monkeypatch):
    from aneforge.io import coreml_package

    y = af.input((2,), name="x").relu()
    path = export_coreml(y, tmp_path / "m.mlpackage")
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    rename = coreml_package.os.rename

    def failing(src, dst):
        if Path(src).name == "m.mlpackage" and Path(dst) == path:
            raise OSError(28, "No space left on device")
        return rename(src, dst)

    monkeypatch.setattr(coreml_package.os, "rename", failing)
    with pytest.raises(ExportError, match="No space left"):
        export_coreml(y * 3.0, path)
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.mlpackage"]  # no staging left


def test_the_mark_reader_agrees_with_protobuf_on_mutated_specs(tmp_path):
    """The package mark is read from the protobuf wire format by hand: on a real spec,
    on it with each byte of the mark's key changed, and on 600 seeded mutations (bytes
    flipped, cut, spliced), it never raises and agrees with protobuf's own parser
    wherever that parses."""
    from google.protobuf.message import DecodeError

    from aneforge.io.coreml_package import MARK, _marked

    spec = load_spec(export_coreml(af.input((2,), name="x").relu(), tmp_path / "m.mlpackage"))
    data = spec.SerializeToString()
    at = data.index(MARK.encode())
    variants = [data] + [data[: at + k] + b"#" + data[at + k + 1 :] for k in range(len(MARK))]
    rng = np.random.default_rng(13)
    for i in range(600):
        b = bytearray(data)
        if i % 3 == 0:
            for k in rng.integers(0, len(b), size=rng.integers(1, 4)):
                b[k] = int(rng.integers(0, 256))
        elif i % 3 == 1:
            b = b[: int(rng.integers(0, len(b)))]
        else:
            k = int(rng.integers(0, len(b)))
            b = b[:k] + bytes(rng.integers(0, 256, size=int(rng.integers(1, 16))).tolist()) + b[k:]
        variants.append(bytes(b))
    seen = Counter()
    for i, b in enumerate(variants):
        mine = _marked(b)
        other = type(spec)()
        try:
            other.ParseFromString(b)
        except (DecodeError, RuntimeError, ValueError):
            continue
        assert mine == (MARK in other.description.metadata.userDefined), i
        seen[mine] += 1
    assert seen[True] > 10 and seen[False] >= len(MARK)
