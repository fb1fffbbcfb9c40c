"""Calibration: scripts/fit_cost_model.py reproduces the bundled constants; defaults apply
when the bundled file is missing or unreadable."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from aneforge.cost import bridge, calibration
from aneforge.cost.calibration import DEFAULTS, Constants, constants
from aneforge.errors import AneforgeWarning

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fit_cost_model.py"
CORPUS = ROOT / "scripts" / "reference" / "ane_cost_model.json"  # copied from ../shared
CONSTANT_KEYS = ("floor_us", "cut_us", "bw_bytes_per_us", "flops_per_us")


def _corpus_path() -> Path:
    if not CORPUS.is_file():
        pytest.fail(
            f"the measured ANE corpus is missing: expected {CORPUS} (a copy of "
            "../shared/reference/ane/ane_cost_model.json kept with the fit scripts)"
        )
    return CORPUS


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("fit_cost_model_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=1)
def _load_corpus() -> dict:
    return json.loads(_corpus_path().read_bytes())


@pytest.fixture(scope="module")
def bundled():
    return json.loads(resources.files("aneforge.data").joinpath("cost_model.json").read_text())


# ---- the fit reproduces the bundled file ---------------------------------------------------


def test_the_shared_corpus_is_the_one_the_bundle_was_fitted_from(bundled):
    digest = hashlib.sha256(_corpus_path().read_bytes()).hexdigest()
    assert bundled["_source"]["sha256"] == digest
    assert bundled["_source"]["fitted_by"] == "scripts/fit_cost_model.py"


def test_fit_reproduces_the_bundled_constants(script, bundled):
    corpus = _load_corpus()
    fitted = script.fit(corpus)
    for key in CONSTANT_KEYS:
        assert fitted[key] == pytest.approx(bundled[key], rel=1e-12), key
    assert len(fitted["bridge_ops"]) == len(bundled["bridge_ops"]) == 69
    rows = {(r["family"], r["key"], r["min_us"]) for r in fitted["bridge_ops"]}
    assert rows == {(r["family"], r["key"], r["min_us"]) for r in bundled["bridge_ops"]}


def test_the_script_writes_exactly_the_bundled_file(script, bundled, tmp_path, monkeypatch):
    out = tmp_path / "cost_model.json"
    monkeypatch.setattr(script, "OUT", out)
    assert script.main(["fit_cost_model.py", str(_corpus_path())]) == 0
    assert json.loads(out.read_text()) == bundled


def test_constants_load_the_bundled_fit(bundled):
    c = constants()
    for key in CONSTANT_KEYS:
        assert getattr(c, key) == bundled[key], key
    assert len(c.bridge_ops) == 69
    assert c.source == "scripts/fit_cost_model.py"


# ---- each constant, re-derived independently from the corpus ---------------------------------


def test_floor_is_the_smallest_fused_latency(bundled):
    corpus = _load_corpus()
    fused = [r["min_us"] for r in corpus["measurements"]["fused"] if r.get("ok", True)]
    assert bundled["floor_us"] == min(fused) == corpus["model"]["dispatch_floor_us"] == 63.3


def _through_origin_slope(points):
    x = np.array([p[0] for p in points], float)
    t = np.array([p[1] for p in points], float)
    (slope,), *_ = np.linalg.lstsq(x[:, None], t, rcond=None)
    return slope


def test_bandwidth_is_the_gemv_sweep_above_the_knee(bundled):
    corpus = _load_corpus()
    knee = corpus["model"]["_meta"]["knee_factor"] * bundled["floor_us"]
    pts = [
        (r["weight_bytes"], r["min_us"])
        for r in corpus["measurements"]["matmul"]
        if r["min_us"] >= knee
    ]
    assert len(pts) >= 2
    assert all(r["M"] == 1 for r in corpus["measurements"]["matmul"])
    assert bundled["bw_bytes_per_us"] == pytest.approx(1.0 / _through_origin_slope(pts), rel=1e-9)
    assert 0.5e5 < bundled["bw_bytes_per_us"] < 2e5  # the spec's ~1.1e5 B/us anchor


def test_compute_is_the_conv_sweep_above_the_knee(bundled):
    corpus = _load_corpus()
    knee = corpus["model"]["_meta"]["knee_factor"] * bundled["floor_us"]
    pts = [(r["flops"], r["min_us"]) for r in corpus["measurements"]["conv"] if r["min_us"] >= knee]
    assert len(pts) >= 2
    assert bundled["flops_per_us"] == pytest.approx(1.0 / _through_origin_slope(pts), rel=1e-9)
    assert 0.5e7 < bundled["flops_per_us"] < 3e7  # the spec's ~1.45e7 flop/us anchor


def test_cut_is_the_smallest_bridge_latency(bundled):
    corpus = _load_corpus()
    mins = [v["min_us"] for v in corpus["model"]["bridge_ops"].values()]
    assert bundled["cut_us"] == min(mins)
    assert len(mins) == 69


# ---- the documented defaults -------------------------------------------------------------------


def test_defaults_are_the_spec_mid_values():
    assert DEFAULTS["cut_us"] == 200.0
    assert DEFAULTS["bw_bytes_per_us"] == 1.1e5
    assert DEFAULTS["flops_per_us"] == 1.45e7
    assert DEFAULTS["floor_us"] > 0


class _FakeFiles:
    def __init__(self, error=None, text=None):
        self.error, self.text = error, text

    def joinpath(self, name):
        assert name == "cost_model.json"
        return self

    def read_text(self, *args, **kwargs):
        if self.error is not None:
            raise self.error
        return self.text


@pytest.fixture
def fake_bundle(monkeypatch):
    """Replace the bundled file for ``constants()``; restore the caches afterwards."""

    def install(**kwargs):
        fake = _FakeFiles(**kwargs)

        class _Resources:
            @staticmethod
            def files(package):
                assert package == "aneforge.data"
                return fake

        monkeypatch.setattr(calibration, "resources", _Resources)
        calibration.constants.cache_clear()

    yield install
    monkeypatch.undo()
    calibration.constants.cache_clear()
    bridge._table.cache_clear()


def test_defaults_apply_when_the_bundled_file_is_missing(fake_bundle):
    fake_bundle(error=FileNotFoundError("cost_model.json"))
    c = constants()
    assert c == Constants(**DEFAULTS)
    assert c.bridge_ops == () and c.source == "defaults (spec 000)"


@pytest.mark.parametrize(
    "text",
    [
        "{ not json",
        json.dumps({"floor_us": 63.3}),
        json.dumps(
            {"floor_us": 0.0, "cut_us": 1.0, "bw_bytes_per_us": 1.0, "flops_per_us": 1.0,
             "bridge_ops": [], "_source": {"fitted_by": "x"}}
        ),
    ],
)  # fmt: skip
def test_an_unreadable_bundle_warns_and_uses_the_defaults(fake_bundle, text):
    fake_bundle(text=text)
    with pytest.warns(AneforgeWarning, match="unreadable"):
        c = constants()
    assert c == Constants(**DEFAULTS)


def test_the_real_bundle_is_back_after_the_fake_ones(bundled):
    assert constants().floor_us == bundled["floor_us"]
    assert constants().cut_us == bundled["cut_us"] != DEFAULTS["cut_us"]


def test_the_copied_corpus_matches_the_shared_reference_when_present():
    shared = ROOT.parent / "shared" / "reference" / "ane" / "ane_cost_model.json"
    if shared.is_file():  # CI lays shared/ beside the clone; a bare checkout has only the copy
        assert shared.read_bytes() == CORPUS.read_bytes()
    assert hashlib.sha256(CORPUS.read_bytes()).hexdigest() == (
        "20d1e2ef162bf9499cc152ff2195b9c8868c91e50e3ff0661d2c543cc54c6630"
    )
