"""compile's opt levels: 'routes' (default), 0 and 1 (opt=2 / 'max' are in test_tune.py), and
the checks every level ends with."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.analysis.precision import PrecisionError
from aneforge.compression import quantize_graph_int8
from aneforge.cost.bridge import bridge_cost_us
from aneforge.cost.calibration import constants
from aneforge.cost.estimate import estimate_breakdown
from aneforge.errors import (
    AneforgeWarning,
    CrossChipFP16Warning,
    DispatchFloorWarning,
    OptionError,
    PrecisionWarning,
)
from aneforge.graph.hashing import structural_hash
from aneforge.graph.ops.bridge import flatten, lrn, minmax_norm, sdpa
from aneforge.graph.registry import get_op
from aneforge.optimizer.routes import route_registry
from aneforge.optimizer.tune import MIN_LOSSY_SPEEDUP
from aneforge.optimizer.variants import build_variants

C = constants()


def _conv_lrn_relu(rng, shape=(1, 3, 32, 32), cout=16):
    x = af.input(shape, name="x", range=(-1, 1))
    w = rng.standard_normal((cout, shape[1], 3, 3)) * 0.3
    return x, lrn(af.conv(x, w, padding=1)).relu()


def _cut_free(rng):
    x = af.input((2, 16), name="x")
    h = (x @ (rng.standard_normal((16, 32)) * 0.2)).relu() * 1.0  # x*1 stays at 'routes'
    return x, [af.reshape(h, (2, 32)).sigmoid(), h + 0.0]


def _ops(prog):
    return [n.op for n in prog.nodes]


def _bridges(prog):
    return [n.op for n in prog.nodes if get_op(n.op).kind == "bridge"]


def _compile_quietly(out, opt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        return af.compile(out, opt=opt)


# ---- 'routes' ------------------------------------------------------------------------------


def test_routes_is_the_default_level(rng):
    _, y = _conv_lrn_relu(rng)
    assert af.compile(y).opt == "routes"
    assert af.compile(y, opt=0).opt == 0


def test_routes_on_a_cut_free_graph_is_exactly_the_opt_0_program(rng):
    _, outs = _cut_free(rng)
    p0 = af.compile(outs, opt=0)
    pr = af.compile(outs, opt="routes")
    assert structural_hash(list(pr.outputs)) == structural_hash(list(p0.outputs))
    assert _ops(pr) == _ops(p0)
    assert all(a is b for a, b in zip(pr.nodes, p0.nodes))
    assert pr.passes["routes"] == []  # no candidate: the graph is left as built
    assert "mul" in _ops(pr) and "add" in _ops(pr)  # no canonical rewrites either


def test_routes_removes_the_lrn_cut_and_the_estimate_drops(rng, capsys):
    x, y = _conv_lrn_relu(rng)
    p0 = af.compile(y, opt=0)
    pr = af.compile(y)
    assert _bridges(p0) == ["lrn"] and len(p0.cuts) == 1
    assert _bridges(pr) == [] and pr.cuts == [] and len(pr.fused_regions) == 1
    native, routed = af.estimate(p0), af.estimate(pr)
    factor = native / routed
    with capsys.disabled():
        print(f"\nconv->lrn->relu {x.shape}: estimate {native:.1f} us -> {routed:.1f} us, "
              f"factor {factor:.1f}x")  # fmt: skip
    (decision,) = pr.passes["routes"]
    assert decision["op"] == "lrn" and decision["choice"] == "fused"
    assert decision["native_us"] == native and decision["fused_us"] == routed
    assert factor == decision["native_us"] / decision["fused_us"]
    # the model's own prediction, term by term: two regions (a floor each, their work),
    # a cut and the measured lrn, against one region
    lrn_node = p0.cuts[0]
    est0, est_r = estimate_breakdown(p0), estimate_breakdown(pr)
    assert (est0.n_regions, est_r.n_regions) == (2, 1)
    fused0 = 2 * C.floor_us + est0.fused_us
    assert native == pytest.approx(fused0 + C.cut_us + bridge_cost_us(lrn_node))
    assert routed == pytest.approx(C.floor_us + est_r.fused_us)
    assert est_r.fused_us < C.floor_us  # the routed program is one small region
    assert factor > 100


def test_routes_keeps_the_lrn_outputs_bit_identical(rng):
    _, y = _conv_lrn_relu(rng)
    feed = rng.standard_normal((1, 3, 32, 32)) * 3
    a = af.compile(y, opt=0)(feed)
    b = af.compile(y)(feed)
    assert route_registry()["lrn"].loss_class == "bit-identical"
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("builder", ["flatten", "minmax_norm", "sdpa"])
def test_routes_swaps_bit_identical_alts_without_changing_a_bit(builder, rng):
    x = af.input((4, 8, 16), name="x")
    if builder == "flatten":
        y = flatten(x.relu(), 1).exp()
    elif builder == "minmax_norm":
        y = minmax_norm(x * 2.0).sigmoid()
    else:
        y = sdpa(x, x * 0.5, x.relu()).tanh()
    pr = af.compile(y)
    assert _bridges(pr) == []
    feed = rng.standard_normal((4, 8, 16))
    a = af.compile(y, opt=0).run(feed)[0]
    b = pr.run(feed)[0]
    np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))


def test_routes_decides_every_candidate_node(rng):
    x, y = _conv_lrn_relu(rng, shape=(1, 3, 16, 16), cout=8)
    z = minmax_norm(flatten(y, 1))
    pr = af.compile(z)
    assert [d["op"] for d in pr.passes["routes"]] == ["lrn", "flatten", "minmax_norm"]
    assert all(d["fused_us"] < d["native_us"] for d in pr.passes["routes"])
    assert _bridges(pr) == []


def test_routes_leaves_single_route_bridges_in_place(rng):
    from aneforge.graph.ops.bridge import argmax

    x = af.input((4, 64), name="x")
    y = argmax(x.exp())
    pr = af.compile(y)
    assert _bridges(pr) == ["argmax"] and pr.passes["routes"] == []


# ---- opt=0 ---------------------------------------------------------------------------------------


def test_opt_0_keeps_the_bridge_node_and_the_graph_as_built(rng):
    _, y = _conv_lrn_relu(rng)
    p0 = af.compile(y, opt=0)
    assert _ops(p0)[-2:] == ["lrn", "relu"]
    assert p0.outputs[0] is y and "routes" not in p0.passes


def test_opt_0_honours_int8_as_given(rng):
    x = af.input((1, 256), name="x")
    y = quantize_graph_int8(x @ rng.standard_normal((256, 64)))
    p0 = af.compile(y, opt=0)
    (w,) = [n for n in p0.nodes if n.op == "weight"]
    assert w.attrs["encoding"] == "int8"


# ---- opt=1 ---------------------------------------------------------------------------------------


def _expected_pick(outs):
    """The cheapest variant, a lossy one only by the tuner's margin over the best
    lossless one."""
    variants = build_variants(outs, lossy=True)
    order = list(variants)
    cost = {n: af.estimate(list(variants[n].outputs)) for n in order}
    name = min(order, key=lambda n: (cost[n], order.index(n)))
    lossless = min((n for n in order if variants[n].lossless), key=lambda n: (cost[n], n))
    if not variants[name].lossless and cost[lossless] < MIN_LOSSY_SPEEDUP * cost[name]:
        name = lossless
    return name, variants


def test_opt_1_picks_the_lowest_estimate_variant(rng):
    _, y = _conv_lrn_relu(rng)
    name, variants = _expected_pick([y])
    assert len(variants) >= 3
    p1 = _compile_quietly(y, 1)
    assert p1.passes["variant"] == {"variant": name, "lossless": variants[name].lossless}
    want = structural_hash(list(variants[name].outputs))
    assert structural_hash(list(p1.outputs)) == want
    lossless = [af.estimate(list(v.outputs)) for v in variants.values() if v.lossless]
    assert af.estimate(p1) == min(lossless)  # int8 would save < 10%: not worth the loss


def test_opt_1_prefers_the_lossless_variant_on_a_near_tie(rng):
    # routes+int8 saves 432 weight bytes of a program of about 80 us: far below the
    # margin a lossy variant must win by
    _, y = _conv_lrn_relu(rng)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        p1 = af.compile(y, opt=1)
    assert p1.passes["variant"] == {"variant": "routes", "lossless": True}
    assert not [w for w in rec if not issubclass(w.category, DispatchFloorWarning)]


def test_opt_1_picks_int8_on_a_bandwidth_bound_graph_and_warns(rng):
    x = af.input((1, 2048), name="x", range=(-1, 1))
    y = x @ (rng.standard_normal((2048, 2048)) * 0.02)
    name, variants = _expected_pick([y])
    assert name == "int8"
    assert af.estimate(list(variants["int8"].outputs)) < af.estimate(y)
    with pytest.warns(AneforgeWarning, match="lossy 'int8'"):
        p1 = af.compile(y, opt=1)
    assert p1.passes["variant"] == {"variant": "int8", "lossless": False}
    (w,) = [n for n in p1.nodes if n.op == "weight"]
    assert w.attrs["encoding"] == "int8"


def test_the_lossy_warning_points_at_the_caller(rng):
    x = af.input((1, 2048), name="x", range=(-1, 1))
    y = x @ (rng.standard_normal((2048, 2048)) * 0.02)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        af.compile(y, opt=1)
    lossy = [w for w in rec if "lossy" in str(w.message)]
    assert len(lossy) == 1 and lossy[0].filename == __file__


def test_opt_1_keeps_lossless_when_the_activations_are_not_proven_bounded(rng):
    w = rng.standard_normal((2048, 2048)) * 0.02
    free = af.input((1, 2048), name="x") @ w  # no declared range: nothing is proven
    assert _compile_quietly(free, 1).passes["variant"]["lossless"]
    big = af.input((1, 2048), name="x", range=(-1000, 1000)) @ w  # may pass 4094
    assert _compile_quietly(big, 1).passes["variant"]["lossless"]


def test_opt_1_handles_a_graph_with_canonical_patterns():
    x = af.input((3, 5), name="x")
    y = af.cast(x - 0.0).reshape((3, 5)) * 1.0
    p1 = _compile_quietly(y, 1)
    assert p1.passes["variant"] == {"variant": "canonical", "lossless": True}
    assert p1.op_count == 0 and p1.outputs[0] is x


# ---- determinism ---------------------------------------------------------------------------------


@pytest.mark.parametrize("opt", ["routes", 0, 1])
def test_compiling_twice_gives_the_same_program(opt, rng):
    seed = int(rng.integers(1 << 30))
    progs = []
    for _ in range(2):
        _, y = _conv_lrn_relu(np.random.default_rng(seed), shape=(1, 3, 16, 16), cout=8)
        progs.append(_compile_quietly(y, opt))
        progs.append(_compile_quietly(y, opt))
    hashes = {structural_hash(list(p.outputs)) for p in progs}
    assert len(hashes) == 1
    assert len({tuple(_ops(p)) for p in progs}) == 1


# ---- every level ends with the same checks -----------------------------

ALL_LEVELS = ["routes", 0, 1, 2, "max"]


@pytest.fixture
def tune_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path))  # opt=2 writes a tune cache


def _long_sum():
    """A narrow sum the precision signal flags (4096 terms: it stalls at 2048)."""
    return af.input((2, 4096), name="x").sum(axis=-1)


@pytest.mark.parametrize("opt", ALL_LEVELS)
def test_strict_raises_the_precision_error_at_every_level(opt, tune_cache):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AneforgeWarning)
        with pytest.raises(PrecisionError, match="precision risk signal"):
            af.compile(_long_sum(), opt=opt, strict=True)
        with pytest.raises(PrecisionError):
            af.compile(_long_sum(), opt=opt, validate=True)


@pytest.mark.parametrize("opt", ALL_LEVELS)
def test_every_level_warns_the_same_and_records_the_checks(opt, tune_cache):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        prog = af.compile(_long_sum(), opt=opt)
    kinds = {w.category for w in rec}
    assert PrecisionWarning in kinds and DispatchFloorWarning in kinds, kinds
    assert prog.passes["precision"]["signal"] > 0
    assert prog.opt == (2 if opt == "max" else opt)
    if opt in (1, 2, "max"):
        assert prog.passes["variant"] == {"variant": "native", "lossless": True}
    assert (prog.tune_report is not None) == (opt in (2, "max"))


@pytest.mark.parametrize("opt", ALL_LEVELS)
def test_every_level_runs_preflight_and_the_divergence_check_on_a_target(opt, tune_cache):
    x = af.input((2, 64), name="x")
    y = af.slice(x.exp(), (0, 8), (2, 64)).relu()  # a width-offset slice on an A14 tier
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        prog = af.compile(y, opt=opt, target="M1")
    assert CrossChipFP16Warning in {w.category for w in rec}
    assert set(prog.passes) >= {"preflight", "divergence", "precision"}, prog.passes
    assert prog.passes["divergence"]["saturation"]
    assert prog.target.arch == "h13"


def test_a_bad_compress_atol_is_refused_without_compress():
    # compress_atol=-1 passed silently when compress was unset
    x = af.input((2, 3), name="x")
    for bad in (-1, float("nan"), "0.1", True):
        with pytest.raises(OptionError, match="compress_atol"):
            af.compile(x.relu(), compress_atol=bad)
    af.compile(x.relu(), compress_atol=0.1)  # a valid budget with nothing to compress


def test_strict_and_validate_must_be_booleans():
    x = af.input((2, 3), name="x")
    for label in ("strict", "validate"):
        with pytest.raises(OptionError, match=label):
            af.compile(x.relu(), **{label: "no"})  # a truthy string is not a yes
