"""af.tune on the emulator tunes each fused region's placement vector: the choice is
applied to the Program's plans, changes no bit, is cached and restored without
measuring, pruned under a dishonest envelope (while the violation warning fires), never
pruned without an envelope, and logged one calibration row per timing.

Timings are a deterministic stand-in (``time_plan`` replaced by bytes moved at 1 GB/s),
so no test depends on the machine's speed."""

from __future__ import annotations

import dataclasses
import itertools
import json
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import PLACEMENT_CHOICES, Program
from aneforge.devices import EmulatorDevice
from aneforge.emulator.interpreter import execute_fp16, fp16_kernel
from aneforge.errors import (
    AneforgeWarning,
    BoundViolationWarning,
    DispatchFloorWarning,
    OptionError,
)
from aneforge.kernel import compiled
from aneforge.kernel.analyze import analyze
from aneforge.kernel.calibration import read_log
from aneforge.kernel.envelope import Envelope, reset_agreement_warnings, save_envelopes
from aneforge.kernel.lower import Placement, lower, region_nodes
from aneforge.kernel.placement import free_intermediates
from aneforge.optimizer import placement_tune
from aneforge.optimizer.cache import TuneCache
from conftest import same_bits

BANDWIDTH = 1e9  # the stand-in device: bytes moved at 1 GB/s


class OpCountEmulator(EmulatorDevice):
    """The emulator whose whole-program ``measure`` is deterministic (the op count), so
    the variant chosen never depends on the machine."""

    def measure(self, program, inputs, repeat=5):
        return float(program.op_count)


@pytest.fixture(autouse=True)
def _stand_in(monkeypatch, tmp_path):
    monkeypatch.delenv("ANEFORGE_CALIBRATION_FILE", raising=False)
    monkeypatch.setenv("ANEFORGE_ENVELOPE_FILE", str(tmp_path / "no-envelope.json"))
    monkeypatch.setattr(placement_tune, "time_plan", _bytes_seconds)
    reset_agreement_warnings()


def _bytes_seconds(plan, values, repeats=placement_tune.REPEATS):
    return analyze(plan.lowered.code).bytes / BANDWIDTH


def _graph():
    """One fused region, two components around a host matmul: ``t`` is read twice (the
    default materializes it; the bytes prefer recomputing it), then a scale, shift
    and ReLU the default already fuses."""
    x = af.input((128, 512), name="x")
    t = (x * 0.5).exp()
    a = t * t + t.tanh()
    w = np.random.default_rng(0).standard_normal((512, 128)) * 0.05
    return ((a @ w) * 2.0 + 1.0).relu()


def _tune(out, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        return af.tune(out, **{"device": OpCountEmulator(), **kwargs})


def _feeds(prog, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(np.float16) for t in prog.inputs]


def _bytes(prog, region, placement) -> int:
    host = {i: (lambda *a: None) for i in compiled.host_nodes(region, None)}
    return analyze(lower(prog, region, list(placement), host=host).code).bytes


def _exhaustive_bytes(prog, region) -> int:
    host = compiled.host_nodes(region, None)
    free = free_intermediates(prog, region, host)
    n = len(region_nodes(prog, region).intermediates)
    best = None
    for bits in itertools.product(list(Placement), repeat=len(free)):
        vector = [Placement.MATERIALIZE] * n
        for i, p in zip(free, bits):
            vector[i] = p
        b = _bytes(prog, region, vector)
        best = b if best is None else min(best, b)
    return best


# ---- the choice, applied -----------------------------------------------------------------------


def test_the_tuned_placement_is_the_optimum_and_the_programs_plans_use_it(tmp_path, monkeypatch):
    monkeypatch.setattr(placement_tune, "TIE_MARGIN", 0.0)  # the stand-in has no noise
    prog = _tune(_graph(), cache_dir=tmp_path)
    region = prog.fused_regions[0]
    host = compiled.host_nodes(region, None)
    default = compiled.default_placement(prog, region, host)
    chosen = prog.placement(region.index)
    assert chosen is not None and list(chosen) != [str(p) for p in default]
    assert _bytes(prog, region, chosen) == _exhaustive_bytes(prog, region)
    assert _bytes(prog, region, chosen) < _bytes(prog, region, default)
    (search,) = prog.tune_report["placement_search"]
    assert search["components"] == 2 and search["changed"] >= 1
    assert prog.tune_report["placements"] == [[region.index, list(chosen)]]
    prog(*_feeds(prog))  # the emulator builds its plans from the program
    plan = compiled._region_plans(prog, None, fp16_kernel(True, None))[region.index]
    assert [str(p) for p in plan.lowered.placement] == list(chosen)


def test_a_vector_slower_on_the_whole_region_is_reverted_to_the_default(tmp_path, monkeypatch):
    """The search's vector wins on its components (bytes moved), but timed against the
    default on the whole region (a plan timed as ``plan_region`` built it, not cut to a
    component) it loses: the default stays and the report says so."""
    monkeypatch.setattr(placement_tune, "TIE_MARGIN", 0.0)
    built, whole = [], []  # the plans themselves: a freed plan's id could come back
    plan_region = placement_tune.plan_region

    def tracked(*args, **kwargs):
        plan = plan_region(*args, **kwargs)
        built.append(plan)
        return plan

    def timed(plan, values, repeats=placement_tune.REPEATS):
        if not any(plan is b for b in built):  # a component's scope, in the search
            return _bytes_seconds(plan, values)
        whole.append([str(p) for p in plan.lowered.placement])
        return 2.0 if len(whole) % 2 else 1.0  # each turn times the vector, then the default

    monkeypatch.setattr(placement_tune, "plan_region", tracked)
    monkeypatch.setattr(placement_tune, "time_plan", timed)
    prog = _tune(_graph(), cache_dir=tmp_path)
    region = prog.fused_regions[0]
    default = compiled.default_placement(prog, region, compiled.host_nodes(region, None))
    assert prog.placement(region.index) is None
    (search,) = prog.tune_report["placement_search"]
    assert search["reverted"] == 1 and search["changed"] == 0
    assert len(whole) == 2 * placement_tune.CONFIRM_ROUNDS
    assert whole[1] == [str(p) for p in default] != whole[0]


def test_the_tuned_program_gives_the_op_by_op_emulators_bits(tmp_path):
    prog = _tune(_graph(), cache_dir=tmp_path)
    assert prog.placements
    for seed in range(3):
        xs = _feeds(prog, seed)
        got = af.get_device("emulator").run(prog, xs)
        want = execute_fp16(prog, xs, regions=False)
        ref = af.get_device("reference").run(prog, xs)
        assert all(same_bits(a, b) and same_bits(a, c) for a, b, c in zip(got, want, ref))


def test_other_devices_tune_no_placements(tmp_path):
    prog = _tune(_graph(), cache_dir=tmp_path, device=af.SimulatedANE(noise=0.0))
    assert prog.placements == () and "placements" not in prog.tune_report


def test_regions_below_min_work_are_not_tuned(tmp_path):
    x = af.input((16, 16), name="x")
    prog = _tune(((x * 0.5).exp() * 2.0).relu(), cache_dir=tmp_path)
    assert prog.placements == () and prog.tune_report["placement_search"] == []


# ---- the cache -------------------------------------------------------------------------------


def _no_measuring(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("measured on a cache hit")

    monkeypatch.setattr(placement_tune, "time_plan", refuse)
    monkeypatch.setattr(placement_tune, "plan_region", refuse)


def test_a_cache_hit_restores_the_placements_without_measuring(tmp_path, monkeypatch):
    first = _tune(_graph(), cache_dir=tmp_path)
    assert first.placements
    _no_measuring(monkeypatch)
    again = _tune(_graph(), cache_dir=tmp_path)
    assert again.tune_report["cached"] is True and again.placements == first.placements


def _entry(tmp_path):
    (path,) = tmp_path.glob("tune-*.json")
    return path, json.loads(path.read_text())


def test_an_entry_without_placements_gets_them_tuned_and_rewritten(tmp_path, monkeypatch):
    first = _tune(_graph(), cache_dir=tmp_path)
    path, entry = _entry(tmp_path)
    del entry["data"]["placements"], entry["data"]["placement_search"]
    path.write_text(json.dumps(entry))
    again = _tune(_graph(), cache_dir=tmp_path)
    assert again.tune_report["cached"] is True and again.placements == first.placements
    assert _entry(tmp_path)[1]["data"]["placements"] == first.tune_report["placements"]
    _no_measuring(monkeypatch)
    assert _tune(_graph(), cache_dir=tmp_path).placements == first.placements


def test_placements_that_do_not_fit_are_a_warning_and_re_tuned(tmp_path):
    first = _tune(_graph(), cache_dir=tmp_path)
    path, entry = _entry(tmp_path)
    entry["data"]["placements"] = [[0, ["inline"]]]  # one entry for many intermediates
    path.write_text(json.dumps(entry))
    with pytest.warns(AneforgeWarning, match="ignoring the placements .* intermediate"):
        again = _tune(_graph(), cache_dir=tmp_path)
    assert again.placements == first.placements


@pytest.mark.parametrize(
    "bad",
    [{"placements": [[0, ["fuse"]]]}, {"placements": {"0": []}}, {"placements": [[-1, []]]},
     {"placement_search": [{"measured": -1}]}, {"placement_search": [["x"]]}],
)  # fmt: skip
def test_a_malformed_placements_entry_is_ignored_with_a_warning(bad, tmp_path):
    first = _tune(_graph(), cache_dir=tmp_path)
    path, entry = _entry(tmp_path)
    entry["data"].update(bad)
    path.write_text(json.dumps(entry))
    with pytest.warns(AneforgeWarning, match="corrupt tuning cache entry"):
        again = _tune(_graph(), cache_dir=tmp_path)
    assert again.tune_report["cached"] is False and again.placements == first.placements
    assert TuneCache(tmp_path).get(path.stem.removeprefix("tune-"))["placements"]


# ---- the bound ---------------------------------------------------------------------------------


def _envelope_file(tmp_path, monkeypatch, envelope) -> None:
    path = tmp_path / "envelope.json"
    save_envelopes({"cpu": envelope}, path)
    monkeypatch.setenv("ANEFORGE_ENVELOPE_FILE", str(path))


def test_a_dishonest_envelope_prunes_every_candidate_after_the_default(tmp_path, monkeypatch):
    _envelope_file(tmp_path, monkeypatch, Envelope("cpu", None, BANDWIDTH / 1000))
    with pytest.warns(BoundViolationWarning, match="implies peak_bandwidth"):
        prog = _tune(_graph(), cache_dir=tmp_path)
    (search,) = prog.tune_report["placement_search"]
    assert search["measured"] == search["components"] == 2  # each component's default
    assert search["pruned"] == search["candidates"] - 2 > 0
    assert search["violations"] == 2
    assert prog.placements == ()  # the defaults stand


def test_an_honest_envelope_prunes_and_still_finds_the_optimum(tmp_path, monkeypatch):
    monkeypatch.setattr(placement_tune, "TIE_MARGIN", 0.0)
    _envelope_file(tmp_path, monkeypatch, Envelope("cpu", None, BANDWIDTH))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundViolationWarning)
        prog = _tune(_graph(), cache_dir=tmp_path)
    (search,) = prog.tune_report["placement_search"]
    assert search["pruned"] > 0 and search["violations"] == 0
    assert search["measured"] + search["pruned"] == search["candidates"]
    region = prog.fused_regions[0]
    assert _bytes(prog, region, prog.placement(region.index)) == _exhaustive_bytes(prog, region)


def test_without_an_envelope_no_candidate_is_dropped(tmp_path):
    prog = _tune(_graph(), cache_dir=tmp_path)
    (search,) = prog.tune_report["placement_search"]
    assert search["pruned"] == 0 and search["unexplored"] == 0
    assert search["measured"] == search["candidates"]


def test_a_malformed_envelope_file_is_a_warning_and_prunes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "envelope.json"
    path.write_text("{not json")
    monkeypatch.setenv("ANEFORGE_ENVELOPE_FILE", str(path))
    with pytest.warns(AneforgeWarning, match="without pruning"):
        prog = _tune(_graph(), cache_dir=tmp_path)
    assert prog.tune_report["placement_search"][0]["pruned"] == 0


# ---- the calibration log -------------------------------------------------------------------------


def test_every_timing_is_one_calibration_row(tmp_path):
    log = tmp_path / "cal.tsv"
    prog = _tune(_graph(), cache_dir=tmp_path, calibration_file=log)
    (search,) = prog.tune_report["placement_search"]
    rows = read_log(log)
    assert len(rows.rows) == search["measured"] > 0 and rows.skipped == 0
    assert {r.backend for r in rows.rows} == {"cpu"} and all(r.exact for r in rows.rows)
    assert all(r.measured_ms > 0 and r.routine == "region0" for r in rows.rows)


def test_the_environment_names_the_log_too(tmp_path, monkeypatch):
    log = tmp_path / "env.tsv"
    monkeypatch.setenv("ANEFORGE_CALIBRATION_FILE", str(log))
    prog = _tune(_graph(), cache_dir=tmp_path)
    assert len(read_log(log).rows) == prog.tune_report["placement_search"][0]["measured"]


def test_calibration_file_is_refused_with_target_error():
    x = af.input((4,), name="x")
    with pytest.raises(OptionError, match="calibration_file"):
        af.tune(x.exp(), target_error=0.1, calibration_file="cal.tsv")


# ---- Program.placements -------------------------------------------------------------------------


def test_placements_are_immutable_and_survive_copies():
    prog = Program.from_outputs([_graph()])
    n = len(region_nodes(prog, prog.fused_regions[0]).intermediates)
    placed = prog.with_placements({0: ["inline"] * n})
    assert placed.placement(0) == ("inline",) * n and prog.placements == ()
    assert placed.replace(opt=2).placements == placed.placements
    assert placed.with_placements({}).placements == ()
    assert len({placed, prog, placed.replace()}) == 3  # hashable, each copy its own
    with pytest.raises(dataclasses.FrozenInstanceError):
        placed.placements = ()
    assert "placement: " in placed.summary()
    assert set(PLACEMENT_CHOICES) == {p.value for p in Placement}


@pytest.mark.parametrize(
    "placements, says",
    [({0: ["fuse"]}, "'fuse' is not one of"), ({3: []}, "region 3 is not a fused region"),
     ({0: ["inline"]}, "intermediate"), ({0: "inline"}, "not a list"), ([(0,)], "pair"),
     ("twice", "given twice"), ({True: []}, "not a fused region")],
)  # fmt: skip
def test_bad_placements_raise_option_errors(placements, says):
    prog = Program.from_outputs([_graph()])
    if placements == "twice":
        n = len(region_nodes(prog, prog.fused_regions[0]).intermediates)
        placements = [(0, ["inline"] * n)] * 2
    with pytest.raises(OptionError, match=says):
        prog.with_placements(placements)


def test_compile_opt_2_carries_the_tuned_placements(tmp_path, monkeypatch):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(placement_tune, "TIE_MARGIN", 0.0)  # the stand-in has no noise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        prog = af.compile(_graph(), opt=2)
    placed = prog.tune_report["placements"]
    assert placed and [[i, list(v)] for i, v in prog.placements] == placed
