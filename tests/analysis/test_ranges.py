"""The range analysis end to end: declared ranges, hazards, where they surface.

The issue's two motivating cases are held here: ``layer_norm`` on inputs scaled by 100
(all zeros at run time) and a 12-layer encoder (d = 384, 128 tokens) fed inputs scaled by
30 (cosine 0 to float64): both are flagged statically, by node name, and the run-time
trace finds the node that failed among them.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.analysis.precision import PrecisionError
from aneforge.analysis.ranges import INT8_ACTIVATION_LIMIT
from aneforge.errors import OptionError
from aneforge.graph.hashing import structural_hash
from aneforge.optimizer.variants import build_variants, int8_admissible


def overflow_names(rep) -> set[str]:
    return {h.name for h in rep.hazards if h.kind == "overflow"}


# ---- declared ranges ---------------------------------------------------------------------


def test_an_input_declares_its_range_and_the_hash_covers_it():
    a = af.input((2, 3), name="x", range=(-1, 2))
    b = af.input((2, 3), name="x", max_abs=2)
    c = af.input((2, 3), name="x")
    assert a.attrs["range"] == (-1.0, 2.0) and b.attrs["range"] == (-2.0, 2.0)
    hashes = {structural_hash([t.relu()]) for t in (a, b, c)}
    assert len(hashes) == 3
    assert structural_hash([af.input((2, 3), name="x", range=(-1, 2)).relu()]) in hashes


@pytest.mark.parametrize(
    "kwargs",
    [
        {"range": (2, 1)},
        {"range": (0, math.inf)},
        {"range": (-1e6, 1)},
        {"max_abs": -1},
        {"range": "wide"},
        {"range": (0, 1), "max_abs": 1},
    ],
)
def test_bad_declared_ranges_are_refused_with_the_input_named(kwargs):
    with pytest.raises(af.AneforgeError, match="input 'x'"):
        af.input((2,), name="x", **kwargs)


def test_an_input_without_a_range_is_unknown_and_raises_no_hazard():
    x = af.input((4,), name="x")
    rep = af.range_analysis(x * 1e4)
    assert rep.hazards == () and rep.unknown_inputs == ("x",)
    assert not rep.nodes[-1].known and math.isinf(rep.nodes[-1].interval.hi)


def test_input_ranges_override_and_name_their_mistakes():
    x = af.input((4,), name="x", range=(-1, 1))
    y = x * 3.0
    assert af.range_analysis(y).nodes[-1].interval.hi == 3.0
    assert af.range_analysis(y, input_ranges={"x": 2}).nodes[-1].interval.hi == 6.0
    assert af.range_analysis(y, input_ranges={0: (0, 0.5)}).nodes[-1].interval.hi == 1.5
    with pytest.raises(OptionError, match="no input 'z'"):
        af.range_analysis(y, input_ranges={"z": 1})
    with pytest.raises(OptionError, match="lo <= hi"):
        af.range_analysis(y, input_ranges={"x": (3, 1)})


def test_from_onnx_declares_input_ranges():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = af.from_onnx(model.SerializeToString(), input_ranges={"x": (-3, 3)})
    assert g.inputs[0].attrs["range"] == (-3.0, 3.0)
    with pytest.raises(af.AneforgeError, match="input_ranges= names no float graph input"):
        af.from_onnx(model, input_ranges={"nope": 1})
    assert onnx is not None


# ---- the cases -------------------------------------------------------------------


def test_layer_norm_of_inputs_scaled_by_100_is_flagged_and_found():
    x = af.input((2, 64), name="x", range=(-3, 3))
    y = af.layer_norm(x * 100.0, name="norm")
    rep = af.range_analysis(y)
    hit = [h for h in rep.hazards if h.kind == "overflow"]
    assert hit and hit[0].name == "norm" and hit[0].step is not None
    assert "pre-scale" in hit[0].fix
    prog = af.compile(af.layer_norm(af.input((2, 64), name="x") * 100.0, name="norm"))
    feed = np.where(np.arange(128).reshape(2, 64) % 2, 3.0, -3.0)
    tr = prog.trace(feed)
    assert not np.any(tr.outputs[0]) and tr.first_collapse().name == "norm"
    # at inputs in [-0.1, 0.1], |d| <= 20 and the sum of 64 squares stays below 65504
    assert not af.range_analysis(y, input_ranges={"x": 0.1}).hazards


def _encoder(x, layers=12, d=384, heads=6, seed=0):
    rng = np.random.default_rng(seed)

    def lin(t, n_in, n_out, name):
        w = rng.standard_normal((n_out, n_in)) / math.sqrt(n_in)
        return af.linear(t, w, np.zeros(n_out), name=name)

    s, hd = x.shape[1], d // heads
    x = af.layer_norm(x, name="embed.ln")  # BERT's embedding norm
    for i in range(layers):
        q = af.transpose(af.reshape(lin(x, d, d, f"l{i}.q"), (1, s, heads, hd)), (0, 2, 1, 3))
        k = af.transpose(af.reshape(lin(x, d, d, f"l{i}.k"), (1, s, heads, hd)), (0, 2, 3, 1))
        v = af.transpose(af.reshape(lin(x, d, d, f"l{i}.v"), (1, s, heads, hd)), (0, 2, 1, 3))
        att = af.softmax(af.bmm(q, k) * (hd**-0.5), axis=-1)
        ctx = af.reshape(af.transpose(af.bmm(att, v), (0, 2, 1, 3)), (1, s, d))
        x = af.layer_norm(x + lin(ctx, d, d, f"l{i}.o"), name=f"l{i}.ln1")
        mid = af.gelu(lin(x, d, 4 * d, f"l{i}.up"))
        x = af.layer_norm(x + lin(mid, 4 * d, d, f"l{i}.down"), name=f"l{i}.ln2")
    return x


def test_an_encoder_fed_inputs_scaled_by_30_is_flagged_and_found():
    x = af.input((1, 128, 384), name="x")
    y = _encoder(x)
    scaled = af.range_analysis(y, input_ranges={"x": 90})
    (first,) = [h for h in scaled.hazards if h.index == min(h.index for h in scaled.hazards)]
    assert (first.name, first.step) == ("embed.ln", "sum(d*d)")
    assert "embed.ln" not in overflow_names(af.range_analysis(y, input_ranges={"x": 3}))
    prog = af.compile(y)
    feed = np.random.default_rng(1).uniform(-3, 3, (1, 128, 384))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clean = prog.trace(feed)
        tr = prog.trace(feed * 30.0)
    assert clean.first_nonfinite() is None and clean.first_collapse() is None
    assert tr.first_collapse().name == "embed.ln"  # all zeros: var overflowed to inf
    assert tr.first_collapse().name in overflow_names(scaled)


# ---- hazards and their integration ----------------------------------------------------------


def test_will_overflow_is_signal_one_and_compile_warns_or_raises():
    x = af.input((4,), name="x", range=(1000, 2000))
    y = (x * 100.0).named("big")
    rep = af.range_analysis(y)
    (h,) = [h for h in rep.hazards if h.kind == "overflow"]
    assert (h.certainty, h.name, h.op) == ("will", "big", "mul") and rep.will_overflow
    risk = af.precision_risk(y)
    assert risk.signal == 1.0 and risk.hotspots[0].mode == "range"
    with pytest.warns(af.PrecisionWarning, match="range"):
        af.compile(y)
    with pytest.raises(PrecisionError):
        af.compile(y, strict=True)


def test_input_scale_finds_the_power_of_two_that_clears_the_overflow():
    x = af.input((8,), name="x", range=(-1000, 1000))
    rep = af.range_analysis(x * 100.0)
    k = rep.input_scale()
    assert k == 1  # 1000 * 100 / 2 = 50000 < 65504
    assert not af.range_analysis(x * 100.0, input_ranges={"x": 1000 * 2.0**-k}).hazards
    assert "2**-1" in str(rep)


def test_matmul_saturation_is_a_target_cliff():
    w = np.full((16, 4), 1.0)
    x = af.input((2, 16), name="x", range=(0, 2500))
    y = af.matmul(x, w, name="mm")  # up to 40000: past 32752, under 65504
    assert not af.range_analysis(y).hazards
    rep = af.range_analysis(y, target="M1")
    (h,) = rep.hazards
    assert (h.kind, h.name, h.limit) == ("matmul_saturation", "mm", 32752.0)
    got = af.compile(y, target="M1")(np.full((2, 16), 2500.0))
    assert np.isinf(got).all()


def test_crop_dma_is_a_target_cliff_of_a13_and_a14_only():
    x = af.input((2, 8), name="x", range=(-5000, 5000))
    y = x[:, 1:].named("cut")
    assert [h.kind for h in af.range_analysis(y, target="M1").hazards] == ["crop_dma"]
    assert not af.range_analysis(y, target="M4").hazards
    div = af.fp16_divergence(af.input((2, 8), name="x", range=(-4000, 4000))[:, 1:], ["M1"])
    assert div.worst == "none"


def test_underflow_is_reported_when_every_value_flushes_to_zero():
    x = af.input((4,), name="x", range=(-1e-3, 1e-3))
    rep = af.range_analysis((x * 1e-5).named("tiny"))
    (h,) = [h for h in rep.hazards if h.kind == "underflow"]
    assert h.name == "tiny" and h.certainty == "will"


def test_int8_variants_need_activations_proven_under_the_ceiling():
    w = np.random.default_rng(0).standard_normal((64, 64)) * 0.1
    free = af.input((1, 64), name="x") @ w
    assert not int8_admissible([free])
    assert sorted(build_variants([free], lossy=True)) == ["native"]
    bounded = af.input((1, 64), name="x", range=(-3, 3)) @ w
    assert int8_admissible([bounded]) and "int8" in build_variants([bounded], lossy=True)
    big = af.input((1, 64), name="x", range=(-3, 3)) @ (w * 1000.0)
    rep = af.range_analysis(big)
    assert rep.max_abs() > INT8_ACTIVATION_LIMIT and not int8_admissible([big])


def test_violations_is_empty_for_in_range_inputs_and_catches_escapes():
    x = af.input((6,), name="x", range=(-1, 1))
    rep = af.range_analysis(af.tanh(x * 2.0) + 1.0)
    assert rep.violations(np.linspace(-1, 1, 6)) == []
    bad = af.range_analysis(x * 2.0).violations(np.full(6, 3.0))
    assert bad and bad[0][0].op == "input"


def test_row_norms_stay_sound_through_an_attention_block():
    """Row norms (a layer norm's 2-norm, a softmax's 1-norm) carried through linear
    layers, head splits and merges, q @ k.T, p @ v and the residual add: every row of
    every node obeys them, for adversarial and random in-range inputs."""
    rng = np.random.default_rng(3)
    s, d, heads = 6, 16, 2

    def lin(t):
        return af.linear(t, rng.standard_normal((d, d)) / 2, 0.1 * rng.standard_normal(d))

    def split(t):
        return af.transpose(af.reshape(t, (1, s, heads, d // heads)), (0, 2, 1, 3))

    for trial in range(6):
        x = af.input((1, s, d), name="x")
        h = af.layer_norm(x, 1 + 0.3 * rng.standard_normal(d), 0.3 * rng.standard_normal(d))
        q, k, v = split(lin(h)), split(lin(h)), split(lin(h))
        p = af.softmax(af.bmm(q, af.transpose(k, (0, 1, 3, 2))), axis=-1)
        ctx = af.reshape(af.transpose(af.bmm(p, v), (0, 2, 1, 3)), (1, s, d))
        y = x + lin(ctx)
        scale = float(rng.choice([1.0, 30.0, 3000.0]))
        rep = af.range_analysis(y, input_ranges={"x": scale})
        assert any(np.isfinite(n.interval.l2) for n in rep.nodes)
        for _ in range(10):
            if rng.random() < 0.5:
                feed = np.where(rng.random((1, s, d)) < 0.5, -scale, scale)
            else:
                feed = rng.uniform(-scale, scale, (1, s, d))
            assert rep.violations(feed) == [], (trial, scale)


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_a_norm_whose_output_may_overflow_claims_no_row_bound(norm):
    # a weight of 40000 takes a normalized value of 2 past 65504: the output may be inf,
    # and a row holding inf has no finite 2-norm bound (found by the random-graph property)
    x = af.input((3, 5), name="x")
    y = getattr(af, norm)(x, np.full(5, 40000.0))
    rep = af.range_analysis(y, input_ranges={"x": (-1.0, 1.0)})
    node = rep.nodes[-1]
    assert node.op == norm and node.interval.hi == math.inf and node.interval.l2 == math.inf
    feed = np.array([[1.0, -1.0, -1.0, -1.0, -1.0]] * 3)  # normalized: 2, -0.5, ...
    assert rep.violations(feed) == []
    # without the overflow the bound stands
    small = af.range_analysis(getattr(af, norm)(x, np.full(5, 4.0)), input_ranges={"x": 1.0})
    assert math.isfinite(small.nodes[-1].interval.l2)
