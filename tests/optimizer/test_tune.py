"""tune (opt=2 / 'max'): measured selection, lossy gating, pruning, budget and the cache."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.errors import AneforgeWarning, DispatchFloorWarning, OptionError
from aneforge.graph.hashing import structural_hash
from aneforge.graph.ops.bridge import lrn
from aneforge.graph.registry import get_op
from aneforge.optimizer import tune as tune_module
from aneforge.optimizer.cache import SCHEMA_VERSION, TuneCache, default_cache_dir
from aneforge.optimizer.tune import DEFAULT_ATOL
from aneforge.optimizer.variants import build_variant


class CountingDevice:
    """A Device that delegates to another and counts its calls."""

    def __init__(self, inner=None, name=None):
        self.inner = inner if inner is not None else af.SimulatedANE()
        self.name = name or self.inner.name
        self.capabilities = self.inner.capabilities
        self.measured = []
        self.runs = 0

    def run(self, program, inputs):
        self.runs += 1
        return self.inner.run(program, inputs)

    def measure(self, program, inputs, repeat=5):
        self.measured.append(program)
        return self.inner.measure(program, inputs, repeat)


class BridgeFastDevice(CountingDevice):
    """Emulator outputs; 'measures' programs with a bridge op as 1000x faster."""

    def __init__(self):
        super().__init__(af.SimulatedANE(noise=0.0), name="bridge-fast")

    def measure(self, program, inputs, repeat=5):
        self.measured.append(program)
        has_cut = any(get_op(n.op).kind == "bridge" for n in program.nodes)
        return 1e-6 if has_cut else 1e-3


def _conv_lrn_relu(rng):
    x = af.input((1, 3, 16, 16), name="x", range=(-1, 1))
    w = rng.standard_normal((8, 3, 3, 3)) * 0.3
    return lrn(af.conv(x, w, padding=1)).relu()


def _gemv(rng):
    """Weight-heavy and bandwidth-bound: int8 halves the bytes streamed."""
    x = af.input((1, 2048), name="x", range=(-1, 1))
    return x @ (rng.standard_normal((2048, 2048)) * 0.02)


def _quietly(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        return fn(*args, **kwargs)


def _tune(out, **kwargs):
    return _quietly(af.tune, out, **kwargs)


# ---- choice --------------------------------------------------------------------------------


def test_the_choice_is_the_fastest_valid_lossless_variant(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    dev = CountingDevice(af.SimulatedANE(noise=0.05, seed=3))
    prog = _tune(y, device=dev, prune_factor=1e9, cache_dir=tmp_path)
    rep = prog.tune_report
    assert rep["measured"] == ["native", "routes"] and rep["pruned"] == []
    valid = [n for n in rep["measured"] if rep["errors"][n] <= DEFAULT_ATOL]
    assert rep["variant"] == min(valid, key=lambda n: rep["times_s"][n])
    assert rep["variant"] == "routes" and rep["lossless"] and not rep["cached"]
    assert prog.opt == 2 and rep["device"] == "simulated-ane"
    want = structural_hash(list(build_variant([y], "routes").outputs))
    assert structural_hash(list(prog.outputs)) == want


def test_the_choice_follows_the_measurement_not_the_prediction(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    dev = BridgeFastDevice()  # native predicted ~1000x slower, measured 1000x faster
    rep = _tune(y, device=dev, prune_factor=1e9, cache_dir=tmp_path).tune_report
    assert rep["predicted_us"]["native"] > 100 * rep["predicted_us"]["routes"]
    assert rep["variant"] == "native"


def test_tune_output_matches_the_baseline_within_atol(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    prog = _tune(y, device=af.SimulatedANE(), cache_dir=tmp_path)
    feed = rng.standard_normal((1, 3, 16, 16))
    a = af.compile(y, opt=0)(feed).astype(np.float64)
    b = prog(feed).astype(np.float64)
    assert np.max(np.abs(a - b)) <= DEFAULT_ATOL * np.max(np.abs(a))


# ---- lossy gating --------------------------------------------------------------------------------


def test_int8_is_not_a_candidate_at_the_default_atol(rng, tmp_path):
    dev = CountingDevice(af.SimulatedANE(noise=0.0))
    rep = _tune(_gemv(rng), device=dev, cache_dir=tmp_path).tune_report
    assert not any("int8" in n for n in rep["predicted_us"])
    assert rep["variant"] == "native" and rep["lossless"]


def test_int8_is_admitted_when_valid_and_at_least_1_10x_faster(rng, tmp_path):
    dev = CountingDevice(af.SimulatedANE(noise=0.0))
    prog = _tune(_gemv(rng), device=dev, atol=0.1, cache_dir=tmp_path)
    rep = prog.tune_report
    assert "int8" in rep["measured"]
    assert DEFAULT_ATOL < rep["errors"]["int8"] <= 0.1  # the default would reject it
    assert rep["times_s"]["native"] >= 1.10 * rep["times_s"]["int8"]
    assert rep["variant"] == "int8" and rep["lossless"] is False
    (w,) = [n for n in prog.nodes if n.op == "weight"]
    assert w.attrs["encoding"] == "int8"


def test_int8_below_the_required_speedup_is_rejected(rng, tmp_path):
    dev = CountingDevice(af.SimulatedANE(noise=0.0))
    rep = _tune(
        _gemv(rng), device=dev, atol=0.1, min_lossy_speedup=1.3, cache_dir=tmp_path
    ).tune_report
    ratio = rep["times_s"]["native"] / rep["times_s"]["int8"]
    assert 1.10 <= ratio < 1.3 and rep["errors"]["int8"] <= 0.1
    assert rep["variant"] == "native"


def test_int8_outside_atol_is_rejected(rng, tmp_path):
    dev = CountingDevice(af.SimulatedANE(noise=0.0))
    rep = _tune(_gemv(rng), device=dev, atol=6e-3, cache_dir=tmp_path).tune_report
    assert "int8" in rep["measured"] and rep["errors"]["int8"] > 6e-3
    assert rep["variant"] == "native"


# ---- pruning and budget -----------------------------------------------------------------------


def test_pruned_variants_are_reported_and_not_measured(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    dev = CountingDevice()
    rep = _tune(y, device=dev, cache_dir=tmp_path).tune_report
    assert rep["predicted_us"]["native"] > 1.5 * rep["predicted_us"]["routes"]
    assert rep["pruned"] == ["native"] and rep["measured"] == ["routes"]
    assert len(dev.measured) == len(rep["measured"])
    assert "native" not in rep["times_s"]


def test_a_wide_prune_factor_measures_everything(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    dev = CountingDevice()
    rep = _tune(y, device=dev, prune_factor=1e9, cache_dir=tmp_path).tune_report
    assert rep["pruned"] == [] and len(dev.measured) == 2


def test_budget_caps_the_measured_variants(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    dev = CountingDevice()
    rep = _tune(y, device=dev, atol=0.1, prune_factor=1e9, budget=2, cache_dir=tmp_path)
    rep = rep.tune_report
    assert len(rep["predicted_us"]) == 4  # native, routes, int8, routes+int8
    assert len(rep["measured"]) == 2 and len(rep["pruned"]) == 2
    assert len(dev.measured) <= 2


def test_budget_one_measures_one_variant(rng, tmp_path):
    dev = CountingDevice(af.SimulatedANE(noise=0.0))
    rep = _tune(_gemv(rng), device=dev, atol=0.1, budget=1, cache_dir=tmp_path).tune_report
    # int8 is predicted best, but a lossy variant is only admitted against a measured
    # lossless one, so a budget of one goes to the best-predicted lossless variant.
    assert rep["measured"] == ["native"] and "int8" in rep["pruned"]
    assert rep["variant"] == "native"
    assert len(dev.measured) == 1


# ---- the cache ---------------------------------------------------------------------------------


def test_a_second_call_is_a_cache_hit_with_no_measurement(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    first = _tune(y, device=CountingDevice(), cache_dir=tmp_path)
    dev = CountingDevice()
    second = _tune(y, device=dev, cache_dir=tmp_path)
    assert first.tune_report["cached"] is False and second.tune_report["cached"] is True
    assert dev.measured == []
    assert second.tune_report["variant"] == first.tune_report["variant"]
    assert structural_hash(list(second.outputs)) == structural_hash(list(first.outputs))
    assert second.opt == 2


def test_the_same_graph_built_again_hits_the_cache(tmp_path):
    _tune(_conv_lrn_relu(np.random.default_rng(5)), device=CountingDevice(), cache_dir=tmp_path)
    dev = CountingDevice()
    prog = _tune(_conv_lrn_relu(np.random.default_rng(5)), device=dev, cache_dir=tmp_path)
    assert prog.tune_report["cached"] and dev.measured == []


@pytest.mark.parametrize(
    "change",
    [{"atol": 0.1}, {"budget": 3}, {"min_lossy_speedup": 1.5}, {"device": "other-name"}],
)
def test_the_cache_key_covers_the_options(change, rng, tmp_path):
    y = _conv_lrn_relu(rng)
    _tune(y, device=CountingDevice(), cache_dir=tmp_path)
    kwargs = dict(change)
    dev = CountingDevice(name=kwargs.pop("device", None))
    rep = _tune(y, device=dev, cache_dir=tmp_path, **kwargs).tune_report
    assert rep["cached"] is False and dev.measured
    assert len(list(tmp_path.glob("tune-*.json"))) == 2


def test_the_cache_key_covers_prune_factor(rng, tmp_path):
    y = _conv_lrn_relu(rng)
    control = _tune(y, device=BridgeFastDevice(), prune_factor=1e9, cache_dir=tmp_path / "b")
    assert control.tune_report["variant"] == "native"
    narrow = _tune(y, device=BridgeFastDevice(), prune_factor=1.0, cache_dir=tmp_path / "a")
    assert narrow.tune_report["variant"] == "routes"  # native was pruned
    wide = _tune(y, device=BridgeFastDevice(), prune_factor=1e9, cache_dir=tmp_path / "a")
    assert wide.tune_report["variant"] == "native"


def test_a_different_graph_misses_the_cache(rng, tmp_path):
    _tune(_conv_lrn_relu(rng), device=CountingDevice(), cache_dir=tmp_path)
    dev = CountingDevice()
    rep = _tune(_conv_lrn_relu(rng), device=dev, cache_dir=tmp_path).tune_report
    assert rep["cached"] is False and dev.measured


def _only_entry(root):
    (path,) = list(root.glob("tune-*.json"))
    return path


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda entry: "{ this is not json",
        lambda entry: "",
        lambda entry: json.dumps([1, 2, 3]),
        lambda entry: json.dumps(dict(entry, schema=SCHEMA_VERSION + 98)),
        lambda entry: json.dumps(dict(entry, key="0" * 64)),
        lambda entry: json.dumps(dict(entry, data={"times_s": {}})),
        lambda entry: json.dumps(dict(entry, data={"variant": 7})),
        lambda entry: json.dumps({k: v for k, v in entry.items() if k != "data"}),
    ],
)
def test_a_corrupt_entry_is_ignored_with_a_warning_and_re_tuned(corrupt, rng, tmp_path):
    y = _conv_lrn_relu(rng)
    _tune(y, device=CountingDevice(), cache_dir=tmp_path)
    path = _only_entry(tmp_path)
    path.write_text(corrupt(json.loads(path.read_text())))
    dev = CountingDevice()
    with pytest.warns(AneforgeWarning, match="corrupt tuning cache entry"):
        rep = _tune(y, device=dev, cache_dir=tmp_path).tune_report
    assert rep["cached"] is False and dev.measured
    entry = json.loads(path.read_text())  # re-tuning rewrote a valid entry
    assert entry["schema"] == SCHEMA_VERSION and entry["data"]["variant"] == rep["variant"]
    again = CountingDevice()
    assert _tune(y, device=again, cache_dir=tmp_path).tune_report["cached"]
    assert again.measured == []


def test_writes_leave_no_temporary_files(rng, tmp_path):
    for seed in range(3):
        _tune(_conv_lrn_relu(np.random.default_rng(seed)), device=CountingDevice(),
              cache_dir=tmp_path)  # fmt: skip
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 3 and all(n.startswith("tune-") and n.endswith(".json") for n in names)


def test_a_failed_write_keeps_the_old_entry_and_leaves_nothing_behind(tmp_path):
    cache = TuneCache(tmp_path)
    key = "a" * 64
    cache.put(key, {"variant": "routes"})
    with pytest.raises(TypeError):
        cache.put(key, {"variant": "native", "bad": object()})
    assert [p.name for p in tmp_path.iterdir()] == [f"tune-{key}.json"]
    assert cache.get(key) == {"variant": "routes"}


def test_cache_false_writes_nothing(rng, tmp_path):
    rep = _tune(_conv_lrn_relu(rng), device=CountingDevice(), cache=False, cache_dir=tmp_path)
    assert rep.tune_report["cached"] is False and list(tmp_path.iterdir()) == []


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("ANEFORGE_CACHE_DIR")
    assert default_cache_dir() == tmp_path / "xdg" / "aneforge"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "aneforge"


# ---- options and determinism -------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"budget": 0},
        {"budget": -2},
        {"atol": -1e-3},
        {"atol": float("nan")},
        {"prune_factor": 0.5},
    ],
)
def test_invalid_options_raise_option_errors(bad, rng, tmp_path):
    dev = CountingDevice()
    with pytest.raises(OptionError, match=next(iter(bad))):
        af.tune(_conv_lrn_relu(rng), device=dev, cache_dir=tmp_path, **bad)
    assert dev.measured == [] and dev.runs == 0 and list(tmp_path.iterdir()) == []


def test_tune_is_deterministic_for_a_deterministic_device(tmp_path):
    reps = []
    for _ in range(2):
        y = _conv_lrn_relu(np.random.default_rng(11))
        prog = _tune(y, device=af.SimulatedANE(seed=4), prune_factor=1e9, cache=False)
        reps.append({k: v for k, v in prog.tune_report.items() if k != "cached"})
    assert reps[0] == reps[1]


# ---- compile(opt=2) and opt='max' -------------------------------------------------------------


@pytest.mark.parametrize("opt", [2, "max"])
def test_compile_opt_2_and_max_go_through_tune(opt, rng, tmp_path, monkeypatch):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path))
    calls = []
    real = tune_module.tune  # compile calls tune through the tune::measure pass

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_module, "tune", spy)
    x = af.input((4, 16), name="x")
    y = lrn(af.reshape(x.relu(), (1, 4, 16))).exp()
    prog = _quietly(af.compile, y, opt=opt)
    assert len(calls) == 1
    assert prog.report.pipeline == "O2" and "tune::measure" in prog.report.ran
    assert prog.opt == 2 and prog.tune_report["device"] == "emulator"
    assert prog.tune_report["variant"] in prog.tune_report["measured"]
    assert len(list(tmp_path.glob("tune-*.json"))) == 1
    again = _quietly(af.compile, y, opt=opt)
    assert again.tune_report["cached"] is True
