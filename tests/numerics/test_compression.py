"""Weight compression: byte counts, the accuracy gate, round trips, families, tuning."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.compression import (
    LUT_SIZE,
    NATIVE_STREAMS,
    channel_error,
    choose_encoding,
    compress_graph,
    decode_payload,
    encode,
    lloyd_lut,
    payload,
    stream_bytes,
    weight_payload,
    weight_stream_bytes_exact,
)
from aneforge.cost.analytic import chip_constants, node_terms
from aneforge.cost.roofline import node_bytes
from aneforge.errors import AneforgeWarning, DispatchFloorWarning, OptionError
from aneforge.graph.hashing import structural_hash
from aneforge.optimizer.tune import DEFAULT_ATOL
from aneforge.targets.table import get_target

# ---- weights built to pass or fail the gate ------------------------------------------------


def clustered(rng, shape, levels=8, jitter=2e-3):
    """Values on a few levels with tiny jitter: int4's table fits them (error ~ jitter)."""
    grid = np.linspace(-1.0, 1.0, levels)
    return rng.choice(grid, size=shape) * (1 + jitter * rng.standard_normal(shape))


def with_outliers(rng, shape):
    """Clustered, plus 20 huge outliers of distinct magnitudes (50 .. 1000): the shared
    table cannot hold them all (int4 fails), per-channel int8 scales absorb them."""
    w = clustered(rng, shape)
    where = rng.choice(w.size, 20, replace=False)
    w.flat[where] = np.linspace(50, 1000, 20) * rng.choice([-1.0, 1.0], 20)
    return w


def wide_range(rng):
    """Every output channel: 4096 values ~N(0, 1) and one of 150 .. 300. int8's step
    (max / 127) drowns the bulk, and 32 distinct peaks overflow int4's table."""
    w = rng.standard_normal((4096, 32))
    w[0] = np.linspace(150, 300, 32)
    return w


def sparse_weight(rng, shape, zeros=0.6):
    w = rng.standard_normal(shape)
    w.flat[rng.permutation(w.size)[: round(zeros * w.size)]] = 0.0
    return w


def _compile(out, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AneforgeWarning)
        return af.compile(out, **kwargs)


def _report(prog):
    return {e["weight"]: e for e in prog.passes["compression"]["weights"]}


def _weights(prog):
    return {n.name: n for n in prog.nodes if n.op == "weight" and n.name}


# ---- exact byte counts ---------------------------------------------------------------------


def test_stream_bytes_are_exact_per_encoding():
    assert stream_bytes("fp16", (64, 48)) == 2 * 64 * 48
    assert stream_bytes("int8", (64, 48), channels=48) == 64 * 48 + 2 * 48
    assert stream_bytes("int4", (64, 48)) == 64 * 48 // 2 + 2 * 16
    assert stream_bytes("int4", (7, 5)) == 18 + 32  # 35 nibbles round up to 18 bytes
    assert stream_bytes("sparse", (10, 9), nnz=30) == 12 + 2 * 30  # ceil(90 / 8) = 12
    assert stream_bytes("sparse", (8, 8), nnz=0) == 8
    with pytest.raises(ValueError, match="unknown weight encoding"):
        stream_bytes("int3", (4,))


def test_compiled_weights_and_the_roofline_charge_the_encoded_bytes(rng):
    x = af.input((1, 10), name="x")
    w8 = af.weight(rng.standard_normal((10, 9)), name="w8")
    w4 = af.weight(clustered(rng, (9, 7)), name="w4")  # 63 elements: 32 + 32 bytes
    ws = af.weight(sparse_weight(rng, (7, 5), zeros=0.6), name="ws")
    y = ((x @ w8) @ w4) @ ws
    progs = {m: _compile(y, compress=m, compress_atol=1.0) for m in ("int8", "int4", "sparse")}
    r8, r4, rs = (_report(progs[m]) for m in ("int8", "int4", "sparse"))
    assert r8["w8"]["encoding"] == "int8" and r8["w8"]["bytes_after"] == 90 + 2 * 9
    assert r4["w4"]["encoding"] == "int4" and r4["w4"]["bytes_after"] == 32 + 32
    nnz = int(np.count_nonzero(ws.value))
    assert rs["ws"]["encoding"] == "sparse" and rs["ws"]["bytes_after"] == 5 + 2 * nnz
    assert rs["w8"]["encoding"] == "fp16" and rs["w8"]["bytes_after"] == 180
    for m, prog in progs.items():
        report = prog.passes["compression"]
        assert report["bytes_after"] == sum(e["bytes_after"] for e in report["weights"])
        for node in prog.compute_nodes:
            (w,) = [s for s in node.srcs if s.op == "weight"]
            acts = sum(2 * s.size for s in node.srcs if s.op != "weight") + 2 * node.size
            want = _report(prog)[w.name]["bytes_after"]
            assert weight_stream_bytes_exact(w) == want, m
            assert node_bytes(node) == acts + want, m


def test_payload_sizes_sum_to_the_streamed_bytes(rng):
    cases = [
        ("int8", rng.standard_normal((16, 3, 3, 3)), 0),
        ("int4", rng.standard_normal((33, 7)), -1),
        ("sparse", sparse_weight(rng, (13, 11)), 0),
    ]
    for name, values, axis in cases:
        enc = encode(values, name, axis)
        data = payload(name, enc.decoded, enc.meta)
        arrays = [v for v in data.values() if isinstance(v, np.ndarray)]
        if name == "int8":  # the zero point is implied (symmetric), not streamed
            arrays = [data["quantized_data"], data["scale"]]
        total = sum(a.nbytes for a in arrays)
        nnz = enc.meta.get("nnz")
        assert total == stream_bytes(name, values.shape, enc.meta.get("channels"), nnz)


def test_the_analytic_model_charges_native_encodings_and_folds_the_others(rng):
    x = af.input((1, 512), name="x")
    w = af.weight(rng.standard_normal((512, 512)), name="w")
    with pytest.warns(AneforgeWarning, match="not streamed natively on h13"):
        prog = af.compile(x @ w, compress="int8", target="h13")
    (node,) = prog.compute_nodes
    a13, a14 = chip_constants(get_target("h13")), chip_constants(get_target("h14"))
    t13, t14 = node_terms(node, a13), node_terms(node, a14)
    plain13 = node_terms(x @ w, a13)
    assert t13["memory_us"] == plain13["memory_us"]  # A13 folds int8 back to fp16
    assert t14["memory_us"] < node_terms(x @ w, a14)["memory_us"]
    assert weight_stream_bytes_exact(node.srcs[1], family=2) == 2 * 512 * 512
    assert weight_stream_bytes_exact(node.srcs[1], family=3) == 512 * 512 + 2 * 512


# ---- the accuracy gate -----------------------------------------------------------------------


def test_the_gate_keeps_int4_when_within_budget(rng):
    values = clustered(rng, (64, 32))
    enc, decision = choose_encoding(values, -1, "auto", 0.05)
    assert enc.encoding == "int4" and decision["error"] <= 0.05
    assert decision["tried"] == {"int4": decision["error"]}


def test_the_gate_falls_back_int4_to_int8_on_outliers(rng):
    values = with_outliers(rng, (64, 32))
    for mode in ("int4", "auto"):
        enc, decision = choose_encoding(values, -1, mode, 0.05)
        assert decision["tried"]["int4"] > 0.05  # the outliers break the shared table
        assert enc.encoding == "int8" and decision["error"] <= 0.05
        assert "int4 error" in decision["reason"]


def test_the_gate_falls_back_to_fp16_on_a_wide_dynamic_range(rng):
    values = wide_range(rng)
    for mode in ("int4", "auto", "int8"):
        enc, decision = choose_encoding(values, -1, mode, 0.05)
        assert enc.encoding == "fp16" and decision["error"] == 0.0
        assert decision["tried"]["int8"] > 0.05
        assert np.array_equal(enc.decoded, values.astype(np.float16))
    _, loose = choose_encoding(values, -1, "auto", 1.0)
    assert loose["encoding"] == "int4"  # a wide enough budget admits it


def test_compile_reports_the_ladder_per_weight_and_warns_once(rng):
    x = af.input((1, 64), name="x")
    a = af.weight(clustered(rng, (64, 32)), name="a")
    b = af.weight(with_outliers(rng, (32, 4096)), name="b")
    c = af.weight(wide_range(rng), name="c")
    y = ((x @ a) @ b) @ c
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        prog = af.compile(y, compress="auto")
    mine = [w for w in rec if issubclass(w.category, AneforgeWarning)
            and not issubclass(w.category, DispatchFloorWarning)]  # fmt: skip
    assert len(mine) == 1 and "2 weight(s) stored lossy (1 int4, 1 int8)" in str(mine[0].message)
    assert mine[0].filename == __file__  # points at the caller
    rep = _report(prog)
    assert [rep[k]["encoding"] for k in "abc"] == ["int4", "int8", "fp16"]
    assert rep["c"]["bytes_after"] == rep["c"]["bytes_before"] == 2 * 4096 * 32
    for e in rep.values():
        assert set(e) >= {"weight", "shape", "encoding", "bytes_before", "bytes_after", "error"}
        assert e["error"] <= 0.05
    full = prog.passes["compression"]
    assert full["lossy"] == 2 and full["mode"] == "auto" and full["atol"] == 0.05
    assert full["ratio"] == full["bytes_before"] / full["bytes_after"] > 1


def test_nothing_lossy_means_no_warning(rng):
    x = af.input((1, 64), name="x")
    y = x @ af.weight(sparse_weight(rng, (64, 64)), name="s")
    with warnings.catch_warnings():
        warnings.simplefilter("error", AneforgeWarning)
        warnings.simplefilter("ignore", DispatchFloorWarning)
        prog = af.compile(y, compress="auto")
    assert _report(prog)["s"]["encoding"] == "sparse"
    assert prog.passes["compression"]["lossy"] == 0


# ---- round trips and the device's decode ----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shape", "axis"),
    [("int8", (48, 40), -1), ("int8", (8, 4, 3, 3), 0), ("int4", (48, 40), -1),
     ("int4", (7, 5), 0), ("sparse", (48, 40), 0), ("sparse", (3, 5, 7), 0)],
)  # fmt: skip
def test_decode_of_the_payload_is_bit_exact_to_the_stored_values(rng, name, shape, axis):
    values = sparse_weight(rng, shape) if name == "sparse" else rng.standard_normal(shape) * 3
    enc = encode(values, name, axis)
    back = decode_payload(name, payload(name, enc.decoded, enc.meta), shape)
    assert back.dtype == np.float16
    assert np.array_equal(back.view(np.uint16), enc.decoded.view(np.uint16))
    if name != "int8":  # at most 16 distinct values / the same zeros: a fixed point
        again = encode(enc.decoded, name, axis)
        assert np.array_equal(again.decoded.view(np.uint16), enc.decoded.view(np.uint16))


def test_int8_decode_is_the_affine_dequantize_formula(rng):
    values = rng.standard_normal((16, 8, 3, 3)) * np.logspace(-3, 2, 16)[:, None, None, None]
    enc = encode(values, "int8", 0)
    data = payload("int8", enc.decoded, enc.meta)
    q, scale = data["quantized_data"], data["scale"]
    assert q.dtype == np.int8 and scale.dtype == np.float16 and data["axis"] == 0
    assert np.abs(q).max() <= 127 and not data["zero_point"].any()
    peak = np.abs(values.astype(np.float16).astype(np.float64)).reshape(16, -1).max(axis=1)
    assert np.array_equal(scale, (peak / 127).astype(np.float16))
    assert np.array_equal(np.abs(q).reshape(16, -1).max(axis=1), np.full(16, 127))
    # Core ML: scale * (q - zero_point) in float32, then cast to the scale's fp16.
    coreml = scale.astype(np.float32)[:, None, None, None] * q.astype(np.float32)
    assert np.array_equal(coreml.astype(np.float16), enc.decoded)


def test_int4_and_sparse_payloads_use_the_lsb_first_layouts(rng):
    enc = encode(np.arange(5.0), "int4", 0)  # 5 distinct values: an exact table
    data = payload("int4", enc.decoded, enc.meta)
    assert list(data["indices"]) == [0x10, 0x32, 0x04] and data["lut"].size == LUT_SIZE
    sp = encode(np.array([0.0, 0.0, 1.5, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0]), "sparse")
    data = payload("sparse", sp.decoded, sp.meta)
    assert list(data["mask"]) == [0b00001100, 0b00000010]
    assert list(data["nonzero_data"]) == [1.5, -2.0, 3.0]


def test_the_emulator_runs_the_decoded_weights(rng):
    x = af.input((2, 64), name="x")
    w = af.weight(rng.standard_normal((64, 32)), name="w")
    feed = rng.standard_normal((2, 64))
    for mode in ("int8", "int4"):
        prog = _compile(x @ w, compress=mode, compress_atol=1.0)
        stored = _weights(prog)["w"]
        assert stored.attrs["encoding"] == mode
        plain = af.compile(x @ af.weight(np.asarray(stored.value)), opt=0)
        assert np.array_equal(prog(feed), plain(feed))
        assert weight_payload(stored)  # the exporter's data is there


# ---- sparse applicability -------------------------------------------------------------------


def test_sparse_needs_half_zeros(rng):
    x = af.input((1, 100), name="x")
    below = af.weight(sparse_weight(rng, (100, 10), zeros=0.49), name="below")
    at = af.weight(sparse_weight(rng, (100, 10), zeros=0.50), name="at")
    prog = _compile([x @ below, x @ at], compress="sparse")
    rep = _report(prog)
    assert rep["below"]["encoding"] == "fp16" and "not applicable" in rep["below"]["reason"]
    assert rep["at"]["encoding"] == "sparse" and rep["at"]["error"] == 0.0
    assert rep["at"]["bytes_after"] == 125 + 2 * 500
    with pytest.raises(ValueError, match="at least 50% zeros"):
        encode(below.value, "sparse")


def test_sparse_is_lossless_and_treats_negative_zero_as_zero():
    values = np.array([[-0.0, 0.0, 2.5, 0.0], [0.0, -1.0, 0.0, -0.0]])
    enc = encode(values, "sparse")
    assert enc.meta["nnz"] == 2
    assert not np.signbit(enc.decoded[values == 0]).any()
    assert np.array_equal(enc.decoded, values.astype(np.float16))
    assert channel_error(values, enc.decoded, 0) == 0.0


# ---- auto per family --------------------------------------------------------------------------


def _three_weights(rng):
    x = af.input((1, 64), name="x")
    s = af.weight(sparse_weight(rng, (64, 64)), name="sparse_w")
    c = af.weight(clustered(rng, (64, 64)), name="clustered_w")
    g = af.weight(rng.standard_normal((64, 64)), name="gauss_w")  # int4 ~0.12: too coarse
    return ((x @ s) @ c) @ g


@pytest.mark.parametrize(
    ("target", "want"),
    [("h13", ("sparse", "int4", "fp16")), ("h14", ("sparse", "int4", "int8")),
     ("h15", ("sparse", "int4", "int8")), ("h17s", ("sparse", "int4", "int8")),
     (None, ("sparse", "int4", "int8"))],
)  # fmt: skip
def test_auto_chooses_among_the_family_native_encodings(rng, target, want):
    prog = _compile(_three_weights(rng), compress="auto", target=target)
    rep = _report(prog)
    got = tuple(rep[k]["encoding"] for k in ("sparse_w", "clustered_w", "gauss_w"))
    assert got == want
    assert all(e["native"] for e in rep.values())
    if target == "h13":
        assert rep["gauss_w"]["tried"] == {"int4": rep["gauss_w"]["tried"]["int4"]}


def test_native_streams_per_family():
    assert NATIVE_STREAMS[2] == {"int4", "sparse"}
    assert NATIVE_STREAMS[3] == NATIVE_STREAMS[4] == NATIVE_STREAMS[5] == {
        "int4", "int8", "sparse"}  # fmt: skip
    assert NATIVE_STREAMS[1] == frozenset()


def test_explicit_modes_are_honoured_on_every_family(rng):
    x = af.input((1, 64), name="x")
    y = x @ af.weight(rng.standard_normal((64, 64)), name="w")
    prog = _compile(y, compress="int8", target="h13")
    (entry,) = prog.passes["compression"]["weights"]
    assert entry["encoding"] == "int8" and entry["native"] is False


# ---- determinism ----------------------------------------------------------------------------


def test_the_lut_is_deterministic_and_independent_of_element_order(rng):
    values = rng.standard_normal((96, 80)).astype(np.float16)
    lut = lloyd_lut(values)
    assert lut.dtype == np.float16 and lut.size == LUT_SIZE and np.all(np.diff(lut) >= 0)
    assert np.array_equal(lloyd_lut(values.copy()), lut)
    assert np.array_equal(lloyd_lut(rng.permutation(values.ravel())), lut)
    a = _compile(af.input((1, 96)) @ values, compress="int4", compress_atol=1.0)
    b = _compile(af.input((1, 96)) @ values.copy(), compress="int4", compress_atol=1.0)
    assert structural_hash(list(a.outputs)) == structural_hash(list(b.outputs))


def test_few_distinct_values_give_an_exact_table():
    values = np.repeat(np.array([-3.0, -0.5, 0.25, 1.0, 7.0]), 20).reshape(10, 10)
    enc = encode(values, "int4", 0)
    assert np.array_equal(enc.decoded, values.astype(np.float16))
    assert channel_error(values, enc.decoded, 0) == 0.0


def test_lloyd_reaches_the_gaussian_optimum():
    values = np.random.default_rng(0).standard_normal(200_000)
    lut = lloyd_lut(values).astype(np.float64)
    mids = (lut[:-1] + lut[1:]) / 2
    mse = np.mean((values - lut[np.searchsorted(mids, values)]) ** 2)
    assert mse == pytest.approx(0.009497, rel=0.03)  # Lloyd-Max, 16 levels, N(0, 1)


# ---- compile options ---------------------------------------------------------------------------


def test_int8_true_is_the_alias_of_compress_int8(rng):
    y = af.input((1, 32)) @ rng.standard_normal((32, 16))
    a, b = _compile(y, int8=True), _compile(y, compress="int8")
    assert structural_hash(list(a.outputs)) == structural_hash(list(b.outputs))
    assert a.passes["compression"]["mode"] == "int8"
    with pytest.raises(OptionError, match="alias"):
        af.compile(y, int8=True, compress="int4")
    with pytest.raises(OptionError, match="compress must be one of"):
        af.compile(y, compress="int2")
    with pytest.raises(OptionError, match="compress_atol"):
        af.compile(y, compress="auto", compress_atol=-1)
    assert "compression" not in af.compile(y).passes


def test_compress_applies_before_the_tuner(rng, tmp_path):
    x = af.input((1, 64), name="x")
    y = x @ af.weight(clustered(rng, (64, 64)), name="w")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AneforgeWarning)
        prog = af.compile(y, opt=2, compress="int4")
    assert _report(prog)["w"]["encoding"] == "int4"
    assert _weights(prog)["w"].attrs["encoding"] == "int4"


# ---- the tuner's gate -------------------------------------------------------------------------


class WeightBytesDevice:
    """Emulator outputs; a measured time proportional to the weight bytes streamed."""

    def __init__(self):
        self.inner = af.SimulatedANE(noise=0.0)
        self.name = "weight-bytes"
        self.capabilities = self.inner.capabilities

    def run(self, program, inputs):
        return self.inner.run(program, inputs)

    def measure(self, program, inputs, repeat=5):
        weights = [n for n in program.nodes if n.op == "weight"]
        return 1e-6 * (1 + sum(weight_stream_bytes_exact(w) for w in weights) / 1e4)


def _clustered_gemv(rng):
    x = af.input((1, 256), name="x", range=(-1, 1))
    return x @ af.weight(clustered(rng, (256, 256), levels=16, jitter=0.02), name="w")


def _tune_clustered(rng, tmp_path, y=None, **kwargs):
    y = _clustered_gemv(rng) if y is None else y
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        return af.tune(y, device=WeightBytesDevice(), cache_dir=tmp_path, **kwargs)


def test_tune_never_considers_compression_at_the_default_atol(rng, tmp_path):
    rep = _tune_clustered(rng, tmp_path).tune_report
    assert not {"int4", "auto", "int8"} & set(rep["predicted_us"])
    assert rep["variant"] == "native" and rep["lossless"]


def test_tune_admits_int4_within_atol_and_at_least_1_10x(rng, tmp_path):
    y = _clustered_gemv(rng)
    prog = _tune_clustered(rng, tmp_path, y, atol=0.1, prune_factor=1e9)
    rep = prog.tune_report
    assert {"int4", "int8"} <= set(rep["measured"])  # auto == int4 here: deduplicated
    assert DEFAULT_ATOL < rep["errors"]["int4"] <= 0.1
    assert rep["times_s"]["native"] >= 1.10 * rep["times_s"]["int4"]
    assert rep["variant"] == "int4" and rep["lossless"] is False
    assert prog.passes["compression"]["weights"][0]["encoding"] == "int4"
    cached = _tune_clustered(rng, tmp_path, y, atol=0.1, prune_factor=1e9)
    assert cached.tune_report["cached"] and "compression" in cached.passes


def test_tune_rejects_int4_outside_atol_or_below_the_speedup(rng, tmp_path):
    rep = _tune_clustered(rng, tmp_path / "a", atol=6e-3, prune_factor=1e9).tune_report
    assert rep["errors"]["int4"] > 6e-3 and rep["variant"] == "int8"
    rep = _tune_clustered(
        rng, tmp_path / "b", atol=0.1, prune_factor=1e9, min_lossy_speedup=100.0
    ).tune_report
    assert rep["variant"] == "native"


def test_compression_variants_are_deduplicated_when_the_gate_falls_back(rng):
    from aneforge.optimizer.variants import build_variants

    y = af.input((1, 64), range=(-1, 1)) @ rng.standard_normal((64, 64))  # int4 == int8
    names = build_variants([y], lossy=True, compress=True)
    assert "int8" in names and "int4" not in names and "auto" not in names
    outs, report = compress_graph([y], "auto")
    assert report["weights"][0]["encoding"] == "int8"
    assert math.isclose(report["ratio"], 2 * 64 * 64 / (64 * 64 + 128))
