"""Calibration: scripts/fit_cost_model.py reproduces the bundled constants; a missing or
unreadable bundled file is an install error (BundledDataError), never silently replaced."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
import warnings
from importlib import resources
from pathlib import Path

import pytest

from aneforge import data
from aneforge.cost import calibration
from aneforge.cost.calibration import constants
from aneforge.cost.silicon import load_model_rows
from aneforge.data import parse
from aneforge.errors import BundledDataError

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


@pytest.fixture(scope="module")
def refit(script):
    """The script's fit, run once (a few seconds)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return script.fit_constants(_load_corpus())


def test_fit_reproduces_the_bundled_constants(refit, bundled):
    fitted, _, _ = refit
    for key in (*CONSTANT_KEYS, "act_bw_bytes_per_us", "layer_us"):
        assert fitted[key] == pytest.approx(bundled[key], rel=1e-9), key
    assert len(fitted["bridge_ops"]) == len(bundled["bridge_ops"]) == 69
    rows = {(r["family"], r["key"], r["min_us"]) for r in fitted["bridge_ops"]}
    assert rows == {(r["family"], r["key"], r["min_us"]) for r in bundled["bridge_ops"]}


def test_the_script_writes_exactly_the_bundled_file_only_when_asked(
    script, bundled, tmp_path, monkeypatch
):
    out = tmp_path / "cost_model.json"
    monkeypatch.setattr(script, "OUT", out)
    assert script.main(["--corpus", str(_corpus_path())]) == 0
    assert not out.exists()  # a plain run writes nothing
    assert script.main(["--corpus", str(_corpus_path()), "--write"]) == 0
    assert json.loads(out.read_text()) == bundled


def test_constants_load_the_bundled_fit(bundled):
    c = constants()
    for key in (*CONSTANT_KEYS, "act_bw_bytes_per_us", "layer_us"):
        assert getattr(c, key) == bundled[key], key
    assert len(c.bridge_ops) == 69
    assert c.source == "scripts/fit_cost_model.py"


# ---- what the fit saw and how well it meets it ------------------------------------------------


def test_the_fit_saw_only_the_corpus_and_aneforge_m5_pro_model_rows(refit):
    _, probs, _ = refit
    corpus = _load_corpus()["measurements"]
    n_ops = sum(len(corpus[g]) for g in ("matmul", "matmul_rect", "conv", "fused"))
    assert sum(q.kind == "op" for q in probs) == n_ops
    fit_rows = [
        r for r in load_model_rows() if r.role == "fit" and r.chip == "M5 Pro" and not r.excluded
    ]
    assert sum(q.kind == "model" for q in probs) == len(fit_rows) >= 4
    assert all(r.origin == "ANEForge" for r in fit_rows)  # never a validation row


def test_the_fitted_constants_are_physical_and_inside_their_bounds(script, bundled):
    for key, (lo, hi) in script.BOUNDS.items():
        assert lo <= bundled[key] <= hi, key
    # The floor sits below every measured single-op program, and floor + one pass near
    # the cheapest ones (63.3 us): a small program pays both.
    fused = [r["min_us"] for r in _load_corpus()["measurements"]["fused"]]
    assert bundled["floor_us"] + bundled["layer_us"] <= 1.25 * min(fused)
    assert bundled["floor_us"] < min(fused) * 1.1


def test_the_fit_meets_the_corpus_and_the_model_rows(bundled):
    errors = bundled["fit_errors"]
    assert errors["op"]["geomean_error"] <= 1.2  # single-op programs
    assert errors["model"]["geomean_error"] <= 1.5 and errors["model"]["worst_error"] <= 2.5


def test_cut_is_the_smallest_bridge_latency(bundled):
    corpus = _load_corpus()
    mins = [v["min_us"] for v in corpus["model"]["bridge_ops"].values()]
    assert bundled["cut_us"] == min(mins)
    assert len(mins) == 69


# ---- a broken bundle is an install error ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{ not json", "is not valid JSON"),
        (json.dumps({"floor_us": 63.3, "_source": {"fitted_by": "x"}}), "lacks the key"),
        (json.dumps({"floor_us": 63.3}), "has no '_source' record"),
    ],
)
def test_an_unreadable_bundle_is_an_install_error(text, why):
    with pytest.raises(BundledDataError, match=why) as info:
        parse("cost_model.json", text)
    assert "cost_model.json" in str(info.value) and "reinstall aneforge" in str(info.value)
    assert "scripts/fit_cost_model.py" in str(info.value)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"floor_us": 0.0}, "non-positive constants {'floor_us': 0.0}"),
        ({"cut_us": "fast"}, "malformed entry"),
        ({"bridge_ops": [{"family": "x"}]}, "malformed entry"),
    ],
)
def test_a_bad_constant_is_an_install_error(bundled, change, why):
    data = parse("cost_model.json", json.dumps({**bundled, **change}))
    with pytest.raises(BundledDataError, match=re.escape(why)):
        calibration.from_data(data)


def test_a_missing_bundle_is_an_install_error(monkeypatch):
    class _Missing:
        def joinpath(self, name):
            return self

        def read_text(self, *args, **kwargs):
            raise FileNotFoundError("cost_model.json")

    monkeypatch.setattr(data.resources, "files", lambda package: _Missing())
    with pytest.raises(BundledDataError, match="cost_model.json cannot be read"):
        data.load.__wrapped__("cost_model.json")  # the uncached loader


def test_the_bundle_is_read_once_and_read_only(bundled):
    assert constants() is constants()
    loaded = data.load("cost_model.json")
    assert loaded is data.load("cost_model.json")
    assert calibration.from_data(loaded) == constants()
    with pytest.raises(TypeError):
        loaded["floor_us"] = 1.0  # no reader can change what the next one sees
    assert constants().cut_us == bundled["cut_us"]


def test_the_copied_corpus_matches_the_shared_reference_when_present():
    shared = ROOT.parent / "shared" / "reference" / "ane" / "ane_cost_model.json"
    if shared.is_file():  # CI lays shared/ beside the clone; a bare checkout has only the copy
        assert shared.read_bytes() == CORPUS.read_bytes()
    assert hashlib.sha256(CORPUS.read_bytes()).hexdigest() == (
        "20d1e2ef162bf9499cc152ff2195b9c8868c91e50e3ff0661d2c543cc54c6630"
    )
