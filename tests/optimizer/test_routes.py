"""The equivalence-route registry: coverage, reasons, and the measured evidence of each alt."""

from __future__ import annotations

import re

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.facts import Decomposition, SingleRoute
from aneforge.graph.ops.bridge import BRIDGE_OPS, flatten, lrn, minmax_norm, sdpa
from aneforge.graph.registry import all_ops, get_op
from aneforge.graph.rewrite import EXACTNESS
from aneforge.graph.walk import topological_order
from aneforge.optimizer.routes import (
    Route,
    decompose,
    decomposers,
    route_registry,
    routes_for,
    select_routes,
)

LOSS_CLASSES = EXACTNESS
REARRANGES = ("space_to_channel", "channel_to_space", "space_to_batch", "batch_to_space")
SEEDS = (0, 1, 2)


def _kinds(outputs):
    return {get_op(n.op).kind for n in topological_order(list(outputs))}


def _run(outputs, feeds):
    return af.compile(list(outputs), opt=0).run(*feeds)


# ---- coverage and reconciliation --------------------------------------------------------


def test_the_registry_covers_every_bridge_op_and_nothing_else():
    reg = route_registry()
    assert sorted(reg) == sorted(BRIDGE_OPS)
    assert len(reg) == 19
    assert all(isinstance(r, Route) and r.op == op for op, r in reg.items())


def test_alts_are_the_decompositions_on_the_records():
    reg = route_registry()
    alts = {op for op, r in reg.items() if r.alt is not None}
    assert alts == set(decomposers()) == {"sdpa", "minmax_norm", "flatten", "lrn"}
    for op in alts:
        assert reg[op].alt is decomposers()[op] is get_op(op).route.build
        assert reg[op].evidence == get_op(op).route.evidence


def test_alts_are_lossless_with_evidence():
    for op, r in route_registry().items():
        if r.alt is None:
            continue
        assert r.loss_class in LOSS_CLASSES, op
        assert r.evidence.strip(), op
        assert not r.single_route and r.reason == "", op


def test_single_route_entries_carry_their_reason():
    for op, r in route_registry().items():
        if r.alt is not None:
            continue
        assert r.single_route and r.loss_class is None, op
        assert r.reason.strip() and r.reason != "only lowering", op


def test_every_bridge_record_declares_its_route_and_fused_ones_have_none():
    for op, r in route_registry().items():
        route = get_op(op).route
        assert isinstance(route, Decomposition) == (r.alt is not None), op
        if isinstance(route, SingleRoute):
            assert r.reason == route.reason, op
    fused = [n for n, op in all_ops().items() if op.kind == "fused"]
    assert all(get_op(n).route == SingleRoute("only lowering") for n in fused)


@pytest.mark.parametrize("op", REARRANGES)
def test_the_four_rearranges_cite_the_rank_5_wall(op):
    reason = route_registry()[op].reason
    assert "rank-6" in reason
    assert "Rank of the shape parameter must be between 0 and 5" in reason


@pytest.mark.parametrize(
    ("ops", "words"),
    [
        (("argmax", "topk", "sort"), (r"no (fused|in-graph)",)),
        (("input_view", "dynamic_slice"), ("slice",)),
        (("fps", "radius_search"), ("inexpressible",)),
    ],
)
def test_notable_single_route_reasons(ops, words):
    for op in ops:
        reason = route_registry()[op].reason
        for word in words:
            assert re.search(word, reason), (op, reason)


def test_fused_and_unknown_ops_are_single_route():
    for op in ("relu", "matmul", "no_such_op"):
        r = routes_for(op)
        assert r.single_route and r.alt is None and r.reason == "only lowering"
    assert routes_for("lrn") == route_registry()["lrn"]


def test_the_public_registry_is_the_same_function():
    assert af.route_registry is route_registry


# ---- the evidence, measured on the emulator -----------------------------------------------


def _sdpa_cases(rng):
    for qs, t, dv, mask, scale in [
        ((2, 5, 8), 7, 3, None, None),
        ((1, 2, 6, 16), 9, 16, None, 0.3),
        ((3, 16, 4), 16, 4, "tensor", None),
        ((2, 4, 8), 4, 8, "array", 0.5),
    ]:
        q = af.input(qs)
        k = af.input(qs[:-2] + (t, qs[-1]))
        v = af.input(qs[:-2] + (t, dv))
        ins = [q, k, v]
        m = None
        if mask == "tensor":
            m = af.input(qs[:-1] + (t,))
            ins.append(m)
        elif mask == "array":
            m = np.where(rng.random((qs[-2], t)) < 0.3, -30000.0, 0.0)
        yield sdpa(q, k, v, scale=scale, mask=m), ins, 2.0


def _minmax_cases(rng):
    for shape, axes, eps in [
        ((4, 6), None, 1e-5),
        ((2, 3, 5), None, 0.1),
        ((7,), None, 1e-5),
        ((2, 3, 5), (0, 2), 1e-3),
        ((3, 4), 1, 0.0),
    ]:
        x = af.input(shape)
        yield minmax_norm(x, axes=axes, eps=eps), [x], 3.0


def _flatten_cases(rng):
    for shape, axis in [
        ((2, 3, 4), 0),
        ((2, 3, 4), 1),
        ((2, 3, 4), -1),
        ((5,), 0),
        ((1, 2, 2, 3), 2),
    ]:
        x = af.input(shape)
        yield flatten(x, axis), [x], 1.0


def _lrn_cases(rng):
    for shape, attrs, scale in [
        ((1, 8, 4, 4), {}, 1.0),
        ((2, 5, 6), {"size": 3, "alpha": 1e-2}, 3.0),
        ((1, 16, 6, 6), {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 2.0}, 30.0),
        ((2, 12, 5, 5), {}, 10.0),  # C < 16: no channel cap
        ((1, 24, 3, 3), {"size": 5, "alpha": 1.0, "beta": 0.75, "bias": 2.0}, 1.0),
        ((1, 4, 2, 2, 2), {"size": 4, "alpha": 0.5, "bias": 1.0}, 3.0),
    ]:
        x = af.input(shape)
        yield lrn(x, **attrs), [x], scale


_CASES = {
    "sdpa": _sdpa_cases,
    "minmax_norm": _minmax_cases,
    "flatten": _flatten_cases,
    "lrn": _lrn_cases,
}


def test_every_alt_has_evidence_cases_here():
    assert set(_CASES) == {op for op, r in route_registry().items() if r.alt is not None}


@pytest.mark.parametrize("op", sorted(_CASES))
def test_each_alt_meets_its_loss_class_on_the_emulator(op):
    """Native op vs its decomposition on random inputs, several shapes and seeds.

    "bit-identical": the same fp16 bits; "bounded": relative error
    max|native - alt| / max|native| (tune's validation error)
    within the route's measured bound. (test_exactness.py measures every class on
    random graphs with special values.)
    """
    route = route_registry()[op]
    n_cases = 0
    worst = 0.0
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        for node, ins, scale in _CASES[op](rng):
            alt = route.alt(node)
            assert alt.shape == node.shape
            assert _kinds([alt]) <= {"source", "fused"}  # the cut is gone
            feeds = [np.clip(rng.standard_normal(t.shape), -3.5, 3.5) * scale for t in ins]
            (native,) = _run([node], feeds)
            (fused,) = _run([alt], feeds)
            assert np.all(np.isfinite(native))
            if route.loss_class == "bit-identical":
                np.testing.assert_array_equal(native.view(np.uint16), fused.view(np.uint16))
            else:
                a, b = native.astype(np.float64), fused.astype(np.float64)
                rel = np.max(np.abs(a - b)) / np.max(np.abs(a))
                assert rel <= route.bound, (node.shape, seed, rel)
                worst = max(worst, rel)
            n_cases += 1
    assert n_cases >= 3 * len(SEEDS)
    if route.loss_class == "bounded":
        assert worst > 0.0  # the cases do exercise the wide-vs-narrow difference


def test_lrn_alt_matches_the_onnx_formula_within_fp16_noise(rng):
    x = af.input((1, 7, 3, 3))
    node = lrn(x, size=3, alpha=0.2, beta=0.75, bias=1.5)
    feed = rng.standard_normal((1, 7, 3, 3))
    (got,) = _run([route_registry()["lrn"].alt(node)], [feed])
    v = feed.astype(np.float16).astype(np.float64)
    padded = np.pad(v**2, [(0, 0), (1, 1), (0, 0), (0, 0)])
    ss = sum(padded[:, j : j + 7] for j in range(3))
    want = v / (1.5 + 0.2 / 3 * ss) ** 0.75
    np.testing.assert_allclose(got, want, rtol=4e-3, atol=1e-3)


# ---- decompose / select_routes --------------------------------------------------------------


def _conv_lrn_relu(rng, c=8):
    x = af.input((1, 3, 8, 8))
    w = rng.standard_normal((c, 3, 3, 3)) * 0.3
    return x, lrn(af.conv(x, w, padding=1)).relu()


def test_decompose_replaces_every_route_bearing_node(rng):
    x, y = _conv_lrn_relu(rng)
    z = minmax_norm(flatten(y))
    outs, n = decompose([z])
    assert n == 3
    assert "bridge" not in _kinds(outs)


def test_decompose_can_pick_nodes_and_leaves_single_route_ops():
    from aneforge.graph.ops.bridge import argmax

    x = af.input((2, 3, 4))
    y = argmax(flatten(minmax_norm(x), 1))
    outs, n = decompose([y], lambda node: node.op == "flatten")
    assert n == 1
    ops = [m.op for m in topological_order(outs)]
    assert "flatten" not in ops and "minmax_norm" in ops and "argmax" in ops


def test_select_routes_returns_a_cut_free_graph_as_is(rng):
    x = af.input((2, 8))
    y = (x @ rng.standard_normal((8, 4))).relu()
    calls = []
    outs, decisions = select_routes([y], lambda o: calls.append(o) or 1.0)
    assert outs[0] is y and decisions == [] and calls == []


def test_select_routes_keeps_a_swap_only_when_the_cost_drops(rng):
    x, y = _conv_lrn_relu(rng)
    outs, decisions = select_routes([y], lambda o: 5.0)  # never cheaper: stays native
    assert outs[0] is y
    assert [d["choice"] for d in decisions] == ["native"]

    def cuts(o):
        return sum(get_op(n.op).kind == "bridge" for n in topological_order(list(o)))

    outs, decisions = select_routes([y, flatten(y)], cuts)
    assert [d["choice"] for d in decisions] == ["fused", "fused"]
    assert [d["op"] for d in decisions] == ["lrn", "flatten"]
    assert decisions[0]["native_us"] == 2 and decisions[0]["fused_us"] == 1
    assert cuts(outs) == 0
