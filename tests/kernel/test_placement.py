"""Branch and bound over placements: the exhaustive optimum under an honest envelope,
pruning everything under a dishonest one (while the violation warning fires), no
pruning without peaks, ties to the default, one calibration row per timing; host nodes
kept materialized, a caller's default, component searches over their scopes, the limit
and the margin."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from random_regions import random_region

import aneforge as af
from aneforge.emulator.interpreter import execute_fp16, fp16_kernel
from aneforge.errors import BoundViolationWarning, OptionError
from aneforge.graph.registry import get_op
from aneforge.kernel import compiled
from aneforge.kernel.analyze import analyze, completion_floor
from aneforge.kernel.calibration import read_log
from aneforge.kernel.envelope import Envelope, reset_agreement_warnings
from aneforge.kernel.lower import Placement, lower, region_nodes, resolve
from aneforge.kernel.placement import (
    components,
    free_intermediates,
    restrict,
    scope,
    search_placements,
)
from conftest import same_bits

PEAK_FLOPS, PEAK_BANDWIDTH = 1e9, 1e8  # the stand-in device's true rates


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("ANEFORGE_CALIBRATION_FILE", raising=False)
    reset_agreement_warnings()


def _device(prog, region):
    """A deterministic device: the roofline legs under the true rates, added (so never
    faster than either)."""

    def measure(placement):
        s = analyze(lower(prog, region, list(placement)).code)
        return s.flops / PEAK_FLOPS + s.bytes / PEAK_BANDWIDTH

    return measure


def _free(prog, region) -> list[int]:
    middle = resolve(prog, region, None)[0].intermediates
    out = []
    for i, n in enumerate(middle):
        ask = [Placement.MATERIALIZE] * len(middle)
        ask[i] = Placement.INLINE
        if resolve(prog, region, ask)[1][id(n)] is Placement.INLINE:
            out.append(i)
    return out


def _exhaustive(prog, region, measure) -> float:
    n = len(resolve(prog, region, None)[0].intermediates)
    free = _free(prog, region)
    best = float("inf")
    for bits in itertools.product((Placement.MATERIALIZE, Placement.INLINE), repeat=len(free)):
        vector = [Placement.MATERIALIZE] * n
        for i, p in zip(free, bits):
            vector[i] = p
        best = min(best, measure(tuple(vector)))
    return best


@pytest.mark.parametrize("seed", range(25))
def test_an_honest_envelope_finds_the_exhaustive_optimum(seed):
    prog = af.compile(random_region(seed), opt=0)
    honest = Envelope("cpu", PEAK_FLOPS, PEAK_BANDWIDTH)
    for region in prog.fused_regions:
        measure = _device(prog, region)
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundViolationWarning)  # never beaten
            r = search_placements(prog, region, measure, honest)
        assert r.seconds == pytest.approx(_exhaustive(prog, region, measure), rel=1e-12)
        assert r.measured + r.pruned == 2 ** len(_free(prog, region)) and r.violations == 0


@pytest.mark.parametrize("seed", range(25))
def test_the_root_floor_is_below_every_placement(seed):
    """Every intermediate open, the floor is at most every full placement's counts; it
    still charges the reads and work of producers that every completion runs whole."""
    prog = af.compile(random_region(seed), opt=0)
    for region in prog.fused_regions:
        middle = resolve(prog, region, None)[0].intermediates
        base = lower(prog, region, [Placement.MATERIALIZE] * len(middle))
        free = _free(prog, region)
        floor = completion_floor(base.code, {base.names[id(middle[i])] for i in free})
        for bits in itertools.product((Placement.MATERIALIZE, Placement.INLINE), repeat=len(free)):
            vector = [Placement.MATERIALIZE] * len(middle)
            for i, p in zip(free, bits):
                vector[i] = p
            s = analyze(lower(prog, region, vector).code)
            assert floor.flops <= s.flops and floor.bytes <= s.bytes, (seed, bits)


def _chain():
    x = af.input((32, 64), name="x")
    prog = af.compile(((x.exp() * 2.0).tanh() + 1.0).sum(axis=-1), opt=0)
    return prog, prog.fused_regions[0]


def test_the_bound_prunes_on_a_chain():
    prog, region = _chain()
    r = search_placements(prog, region, _device(prog, region), Envelope("cpu", 1e9, 1e8))
    assert r.pruned > 0 and r.measured + r.pruned == 2**4  # exp, mul, tanh, add
    assert r.placement == (Placement.INLINE,) * 4  # recompute is cheaper than traffic here


def test_a_dishonest_envelope_prunes_every_candidate_and_the_warning_fires():
    prog, region = _chain()
    dishonest = Envelope("cpu", PEAK_FLOPS / 1000, PEAK_BANDWIDTH / 1000)
    with pytest.warns(BoundViolationWarning, match="implies"):
        r = search_placements(prog, region, _device(prog, region), dishonest)
    assert r.measured == 1 and r.pruned == 2**4 - 1 and r.violations == 1
    assert r.placement == (Placement.MATERIALIZE,) * 4  # the default, measured first


def test_without_peaks_nothing_is_pruned_and_ties_keep_the_default():
    prog, region = _chain()
    r = search_placements(prog, region, lambda p: 1.0, Envelope("cpu", None, None))
    assert r.measured == 2**4 and r.pruned == 0
    assert r.placement == (Placement.MATERIALIZE,) * 4


def test_every_timing_is_one_calibration_row(tmp_path, monkeypatch):
    prog, region = _chain()
    log = tmp_path / "cal.tsv"
    monkeypatch.setenv("ANEFORGE_CALIBRATION_FILE", str(log))
    r = search_placements(prog, region, _device(prog, region), Envelope("cpu", 1e9, 1e8))
    rows = read_log(log)
    assert len(rows.rows) == r.measured and rows.skipped == 0
    assert {row.label for row in rows.rows} >= {"m,m,m,m"} and all(row.exact for row in rows.rows)


# ---- host nodes, a caller's default, components and their scopes ------------------------------


def _host_runners(host) -> dict:
    return {i: (lambda *arrays: None) for i in host}


def _contractions(region) -> set[int]:
    """The stand-in host nodes: every contraction (the compiled regions run them so)."""
    return {
        id(n) for n in region.nodes if get_op(n.op).nest and get_op(n.op).nest.kind == "contract"
    }


def _scoped_device(prog, region, host, keep):
    """The stand-in device timing only the kernels of ``keep`` (what ``free=`` asks)."""

    def measure(placement):
        low = restrict(lower(prog, region, list(placement), host=_host_runners(host)), keep)
        s = analyze(low.code)
        return s.flops / PEAK_FLOPS + s.bytes / PEAK_BANDWIDTH

    return measure


def _whole(prog, region, host, placement) -> float:
    s = analyze(lower(prog, region, list(placement), host=_host_runners(host)).code)
    return s.flops / PEAK_FLOPS + s.bytes / PEAK_BANDWIDTH


@pytest.mark.parametrize("seed", range(25))
def test_component_searches_find_the_exhaustive_optimum_of_the_whole_region(seed):
    prog = af.compile(random_region(seed), opt=0)
    honest = Envelope("cpu", PEAK_FLOPS, PEAK_BANDWIDTH)
    for region in prog.fused_regions:
        host = _contractions(region)
        free = free_intermediates(prog, region, host)
        groups = components(prog, region, host)
        assert sorted(i for g in groups for i in g) == free
        vector = compiled.default_placement(prog, region, host)
        for group in groups:
            keep = scope(prog, region, group)
            with warnings.catch_warnings():
                warnings.simplefilter("error", BoundViolationWarning)
                r = search_placements(
                    prog, region, _scoped_device(prog, region, host, keep), honest, host=host,
                    default=vector, free=group,
                )  # fmt: skip
            assert r.measured + r.pruned == r.candidates == 2 ** len(group)
            assert all(r.placement[i] == vector[i] for i in free if i not in group)
            vector = list(r.placement)
        n = len(region_nodes(prog, region).intermediates)
        best = float("inf")
        for bits in itertools.product(list(Placement), repeat=len(free)):
            trial = [Placement.MATERIALIZE] * n
            for i, p in zip(free, bits):
                trial[i] = p
            best = min(best, _whole(prog, region, host, trial))
        assert _whole(prog, region, host, vector) == pytest.approx(best, rel=1e-12)


def test_host_nodes_and_their_sources_are_never_searched():
    x = af.input((16, 32), name="x")
    prog = af.compile(((x.exp() * 2.0) @ (x.tanh() + 1.0).transpose()).relu(), opt=0)
    region = prog.fused_regions[0]
    host = _contractions(region)
    middle = region_nodes(prog, region).intermediates
    seen = []

    def measure(placement):
        seen.append(placement)
        return 1.0

    r = search_placements(prog, region, measure, Envelope("cpu", None, None), host=host)
    ops = [middle[i].op for i in free_intermediates(prog, region, host)]
    assert ops == ["exp", "tanh", "add"]  # not the mul and transpose the matmul reads
    assert r.measured == r.candidates == 8 and len(set(seen)) == 8
    for placement in seen:
        for i, n in enumerate(middle):
            if n.op in ("mul", "transpose", "bmm", "matmul"):
                assert placement[i] is Placement.MATERIALIZE


def test_the_callers_default_is_measured_first_and_keeps_ties():
    prog, region = _chain()
    default = ["inline", "materialize", "inline", "materialize"]
    seen = []

    def measure(placement):
        seen.append([str(p) for p in placement])
        return 1.0

    r = search_placements(prog, region, measure, Envelope("cpu", None, None), default=default)
    assert seen[0] == default and [str(p) for p in r.placement] == default
    assert r.default_seconds == 1.0 and r.measured == 16


def test_a_candidate_within_the_margin_is_a_tie():
    prog, region = _chain()

    def measure(placement):  # every non-default candidate 1% faster
        return 1.0 if all(p is Placement.MATERIALIZE for p in placement) else 0.99

    env = Envelope("cpu", None, None)
    assert search_placements(prog, region, measure, env, margin=0.02).seconds == 1.0
    assert search_placements(prog, region, measure, env).seconds == 0.99


def test_the_limit_counts_what_it_leaves_unexplored():
    prog, region = _chain()
    r = search_placements(prog, region, lambda p: 1.0, Envelope("cpu", None, None), limit=3)
    assert r.measured == 3 and r.pruned == 0 and r.unexplored == 13 and r.candidates == 16


def test_a_candidate_that_cannot_run_is_never_chosen_nor_logged(tmp_path):
    prog, region = _chain()
    log = tmp_path / "cal.tsv"

    def measure(placement):
        return float("inf") if placement[0] is Placement.INLINE else 1.0

    r = search_placements(prog, region, measure, Envelope("cpu", None, None), calibration_file=log)
    assert r.placement[0] is Placement.MATERIALIZE and r.seconds == 1.0
    assert len(read_log(log).rows) == 8  # the 8 candidates with a finite time


@pytest.mark.parametrize(
    "options",
    [{"free": [99]}, {"limit": 0}, {"margin": 1.0}, {"margin": -0.1}],
)
def test_bad_search_options_raise(options):
    x = af.input((8, 8), name="x")
    prog = af.compile((x.exp() @ x).relu(), opt=0)
    region = prog.fused_regions[0]
    host = _contractions(region)
    with pytest.raises(OptionError):
        search_placements(prog, region, lambda p: 1.0, Envelope("cpu", None, None), host=host,
                          **options)  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_a_restricted_plan_computes_its_scope_with_the_op_by_op_bits(seed):
    prog = af.compile(random_region(seed), opt=0)
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(t.shape).astype(np.float16) for t in prog.inputs]
    values = {}
    execute_fp16(prog, xs, observe=lambda i, n, v: values.__setitem__(id(n), v))
    kernel = fp16_kernel(True, None)
    for region in prog.fused_regions:
        host = compiled.host_nodes(region, None)
        for group in components(prog, region, host):
            keep = scope(prog, region, group)
            vector = list(compiled.default_placement(prog, region, host))
            for i in group:
                vector[i] = rng.choice(list(Placement))
            plan = compiled.plan_region(prog, region, kernel, None, vector)
            steps = [s for (n, _), s in zip(plan.lowered.steps, plan.steps) if id(n) in keep]
            low = restrict(plan.lowered, keep)
            assert {id(n) for n in low.nodes.outputs} <= keep
            assert all(b.kind == "input" for b in low.code.buffers if b.name in
                       {low.names[id(n)] for n in low.nodes.inputs})  # fmt: skip
            got = compiled.run_plan(compiled.RegionPlan(low, steps), values)
            assert got and all(same_bits(v, values[k]) for k, v in got.items())
