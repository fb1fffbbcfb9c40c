"""The check report's per-target part: latency, the model's published error, bounds."""

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.compile import build_program
from aneforge.report import target_report
from aneforge.targets.projection import measured_accuracy


@pytest.fixture(scope="module")
def program():
    x = af.input((1, 64, 16, 16), name="x")
    return build_program([af.conv(x, np.zeros((64, 64, 3, 3)), pad=1).relu()])


def test_a_chip_with_published_timings_reports_its_held_out_error(program):
    rep = target_report(program, "M4")
    m4 = next(m for m in measured_accuracy("h16s") if m["chip"] == "M4")
    assert rep["model_error_chips"] == ["M4"]
    assert rep["model_error"] == pytest.approx(m4["held_out_geomean_error"])
    assert rep["model_error"] > 1.0 and m4["geomean_error"] > 1.0


def test_a_name_without_timings_takes_its_architectures_chips(program):
    rep = target_report(program, "h17s")
    assert rep["model_error_chips"] == ["M5", "M5 Max", "M5 Pro"]
    logs = [np.log(m["held_out_geomean_error"]) for m in measured_accuracy("h17s")]
    assert rep["model_error"] == pytest.approx(float(np.exp(np.mean(logs))))


def test_an_architecture_without_published_timings_says_so(program):
    rep = target_report(program, "A17 Pro")
    assert rep["arch"] == "h16"
    assert rep["model_error"] is None and rep["model_error_chips"] == []
