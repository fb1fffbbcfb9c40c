"""The ``aneforge`` command: ``check`` reports, user errors and the installed script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import aneforge as af
from aneforge.cli import main

EXAMPLES = ("cnn", "transformer")

# Accuracy of the bundled examples against float64. Each fp16 op adds a relative error of
# at most u = 2**-11 ~ 4.9e-4 of its output; the examples run 14 (cnn) and 24
# (transformer) ops, but the roundings are independent and mostly normalized away (batch
# and layer norms, softmax), so their contributions add like a random walk: about
# sqrt(24) * u ~ 2.4e-3 in relative L2 for the deeper model. 1e-2 is four times that, and
# still twenty units of roundoff: a real defect (a wrong accumulator, a dropped rounding
# model, a swapped weight) moves rel_l2 to O(1e-2..1). cosine >= 1 - rel_l2**2 / 2 for
# small errors, so rel_l2 < 1e-2 already implies cosine > 0.99995; 0.999 is the coarse
# "same direction" check the report is meant for.
REL_L2_MAX = 1e-2
COSINE_MIN = 0.999


def check_json(capsys, *args) -> dict:
    assert main(["check", *args, "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out)


def test_check_prints_a_table_per_example(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # rich wraps headers to the terminal width
    assert main(["check"]) == 0
    captured = capsys.readouterr()
    for name in EXAMPLES:
        assert f"{name}:" in captured.out
    for column in ("max abs error", "relative L2", "cosine"):
        assert column in captured.out
    assert "MFLOP" in captured.out
    assert captured.err == ""


def test_check_json_reports_both_examples(capsys):
    doc = check_json(capsys)
    assert doc["aneforge"] == af.__version__
    reports = {r["model"]: r for r in doc["reports"]}
    assert set(reports) == set(EXAMPLES)
    assert [r["model"] for r in doc["reports"]] == list(EXAMPLES)
    for name, rep in reports.items():
        assert rep["ops"] > 0, name
        assert rep["flops"] > 0, name
        assert rep["outputs"], name
        for out in rep["outputs"]:
            assert {"max_abs", "rel_l2", "cosine", "shape", "index"} <= set(out)
            assert 0.0 < out["rel_l2"] < REL_L2_MAX, (name, out)
            assert COSINE_MIN < out["cosine"] <= 1.0 + 1e-12, (name, out)
            assert 0.0 < out["max_abs"] < 1.0, (name, out)
        assert set(rep["seconds"]) == {"compile", "emulate", "reference"}


def test_check_json_matches_the_models_it_names(capsys):
    doc = check_json(capsys, "transformer")
    (rep,) = doc["reports"]
    x, y = af.nn.transformer_block(seed=0)
    prog = af.compile(y)
    assert rep["model"] == "transformer"
    assert rep["ops"] == prog.op_count
    assert rep["flops"] == prog.flops
    assert rep["outputs"][0]["shape"] == list(y.shape)


def test_check_is_deterministic_per_seed(capsys):
    def metrics(seed):
        doc = check_json(capsys, "cnn", "--seed", str(seed))
        return [(o["max_abs"], o["rel_l2"], o["cosine"]) for o in doc["reports"][0]["outputs"]]

    first = metrics(3)
    assert metrics(3) == first
    assert metrics(4) != first  # the seed reaches the inputs and weights


def test_unknown_model_is_a_user_error(capsys):
    assert main(["check", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert "nosuch" in captured.err
    for name in EXAMPLES:
        assert name in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_a_missing_onnx_file_is_a_user_error(capsys):
    assert main(["check", "m.onnx"]) == 2
    captured = capsys.readouterr()
    assert "m.onnx" in captured.err
    assert "no such file" in captured.err
    assert "Traceback" not in captured.err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"aneforge {af.__version__}"


def test_no_command_prints_help(capsys):
    assert main([]) == 0
    assert "check" in capsys.readouterr().out


def test_help_lists_check(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "check" in capsys.readouterr().out


# ---- the installed console script ----------------------------------------------------------


def console_script() -> str:
    """The ``aneforge`` script installed beside this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "aneforge"
    found = str(beside) if beside.exists() else shutil.which("aneforge")
    assert found, "the aneforge console script is not installed (pip install -e .)"
    return found


def run_script(*args):
    env = dict(os.environ, COLUMNS="120")
    return subprocess.run(
        [console_script(), *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_console_script_check_json():
    proc = run_script("check", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [r["model"] for r in doc["reports"]] == list(EXAMPLES)
    assert "Traceback" not in proc.stderr


def test_console_script_unknown_model_exits_2():
    proc = run_script("check", "nosuch")
    assert proc.returncode == 2
    assert "nosuch" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_report_announces_each_stage_for_the_progress_bar():
    from aneforge.report import STAGES, check_report

    x, y = af.nn.small_cnn()
    seen = []
    check_report("cnn", [x], [y], progress=seen.append)
    assert seen == list(STAGES)


def test_check_exports_a_core_ml_package(tmp_path, capsys):
    out = tmp_path / "cnn.mlpackage"
    assert main(["check", "cnn", "--json", "--export", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)["reports"][0]
    assert report["export"]["path"] == str(out) and out.exists()
