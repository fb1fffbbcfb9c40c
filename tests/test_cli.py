"""The ``aneforge`` command: ``check`` reports, user errors and the installed script."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

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


def reject(name):
    raise AssertionError(f"the JSON holds a bare {name}")


def check_json(capsys, *args, code=0) -> dict:
    assert main(["check", *args, "--json"]) == code
    out = capsys.readouterr().out
    return json.loads(out, parse_constant=reject)


def onnx_file(path, nodes, shape_in, shape_out, inits=()) -> str:
    """An ONNX model x -> y of ``nodes``, saved at ``path``."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape_in)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape_out)],
        initializer=[numpy_helper.from_array(np.asarray(v), name=k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def long_sum(tmp_path_factory):
    """y = sum(x * x, -1) over 8192 terms: a narrow fp16 sum whose error depends on the
    chip's reduction route (192 terms on M1, 384 on M5, one long run generically)."""
    path = tmp_path_factory.mktemp("onnx") / "longsum.onnx"
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["y"], keepdims=0),
    ]
    return onnx_file(path, nodes, [8, 8192], [8], [("axes", np.array([-1], np.int64))])


@pytest.fixture(scope="module")
def overflow(tmp_path_factory):
    """y = (x * 1e4) ** 2: beyond fp16's 65504 for every |x| > 0.026, so inf."""
    path = tmp_path_factory.mktemp("onnx") / "overflow.onnx"
    nodes = [helper.make_node("Mul", ["x", "k"], ["s"]), helper.make_node("Mul", ["s", "s"], ["y"])]
    return onnx_file(path, nodes, [4, 64], [4, 64], [("k", np.array(1e4, np.float32))])


def test_check_prints_a_table_per_example(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")  # rich wraps headers to the terminal width
    assert main(["check"]) == 0
    captured = capsys.readouterr()
    for name in EXAMPLES:
        assert f"{name}:" in captured.out
    for column in ("max abs error", "relative L2", "cosine", "latency us"):
        assert column in captured.out
    assert "MFLOP" in captured.out
    assert captured.err == ""


def test_check_names_the_default_chip_and_labels_the_heuristic(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["check", "cnn"]) == 0
    lines = capsys.readouterr().out.splitlines()
    x, y = af.nn.small_cnn(seed=0)
    prog = af.compile(y)
    latency = af.estimate(prog, target="M5 Pro")
    assert (
        "estimated latency on M5 Pro (h17s, A16 tier: M4, M5 / A17 Pro, A18, A19 "
        f"generations): {latency:.0f} us"
    ) in "\n".join(lines)
    pruning = [ln for ln in lines if ln.startswith("pruning estimate")]
    assert pruning == [
        f"pruning estimate (optimizer heuristic, not a latency): {af.estimate(prog):.0f} us"
    ]


def test_check_json_reports_both_examples(capsys):
    doc = check_json(capsys)
    assert doc["schema_version"] == 1 and doc["default_chip"] == "M5 Pro"
    assert doc["ok"] is True and doc["failures"] == [] and doc["max_error"] is None
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
        assert set(rep["seconds"]) == {"compile", "emulate", "reference", "targets"}
        assert rep["targets"] == [] and rep["divergence"]["measured"] is None
        est = rep["estimate"]
        assert est["target"] == "M5 Pro" and est["compiles"] is True
        assert math.fsum(est["parts_us"].values()) == pytest.approx(est["estimate_us"])


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


# ---- per-target runs, the JSON contract, exit codes, warnings -------------------------------

M1_TEXT = "M1 (h13, A13 tier: M1 / A14 Bionic generation)"
M5_TEXT = "M5 (h17s, A16 tier: M4, M5 / A17 Pro, A18, A19 generations)"


def test_each_target_reports_its_own_error(capsys, long_sum):
    doc = check_json(capsys, long_sum, "--target", "M1,M5")
    (rep,) = doc["reports"]
    graph = af.from_onnx(long_sum)
    feed = np.random.default_rng(0).standard_normal(graph.inputs[0].shape)
    want = af.reference(graph.outputs[0], feed)
    errors = {}
    for t in rep["targets"]:
        direct = af.compare(af.compile(graph.outputs, target=t["target"])(feed), want)
        assert t["outputs"][0]["rel_l2"] == pytest.approx(direct["rel_l2"], rel=1e-9)
        assert t["compiles"] is True and t["outputs"][0]["name"] == "y"
        assert math.fsum(t["parts_us"].values()) == pytest.approx(t["estimate_us"])
        errors[t["target"]] = t["outputs"][0]["rel_l2"]
    assert rep["outputs"][0]["rel_l2"] > 10 * max(errors.values())  # the generic run stalls
    assert errors["M1"] != pytest.approx(errors["M5"], rel=0.1)
    assert [t["description"] for t in rep["targets"]] == [M1_TEXT, M5_TEXT]
    assert rep["divergence"]["worst"] == "reorder"
    assert rep["divergence"]["measured"]["identical"] is False


def test_the_text_output_names_each_targets_tier(capsys, monkeypatch, long_sum):
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["check", long_sum, "--target", "M1,M5,h11"]) == 0
    out = capsys.readouterr().out
    assert M1_TEXT in out and M5_TEXT in out
    assert "h11 (no MIL tier: A12 Bionic, A13 Bionic generations)" in out
    assert "does not compile" in out
    assert "measured: the outputs on M1, M5 differ by up to" in out


def test_a_target_that_cannot_compile_has_no_latency(capsys):
    doc = check_json(capsys, "cnn", "--target", "h11,M1")
    h11, m1 = doc["reports"][0]["targets"]
    assert h11["compiles"] is False and m1["compiles"] is True
    assert h11["estimate_us"] is None and "estimate_us_nonfinite" not in h11
    assert h11["outputs"] == [] and "no MIL" in h11["preflight"][0]
    assert m1["estimate_us"] > 0


def test_a_non_finite_output_exits_1_with_strict_json(capsys, overflow):
    assert main(["check", overflow, "--target", "M1", "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out, parse_constant=reject)
    (rep,) = doc["reports"]
    for out in (rep["outputs"][0], rep["targets"][0]["outputs"][0]):
        assert out["rel_l2"] is None and out["rel_l2_nonfinite"] == "inf"
        assert out["max_abs"] is None and out["max_abs_nonfinite"] == "inf"
        assert out["nonfinite_values"] > 0
    for est in (rep["estimate"], rep["targets"][0]):
        assert math.fsum(est["parts_us"].values()) == pytest.approx(est["estimate_us"])
    assert doc["ok"] is False and len(doc["failures"]) == 2
    (line,) = [ln for ln in captured.err.splitlines() if ln.startswith("aneforge:")]
    assert line.startswith("aneforge: check failed: overflow.onnx output y (generic): ")
    assert f"overflow.onnx output y ({M1_TEXT}): " in line and "non-finite" in line


def test_max_error_bounds_every_run(capsys, long_sum):
    assert main(["check", long_sum, "--target", "M1", "--max-error", "0.01", "--json"]) == 1
    captured = capsys.readouterr()
    doc = json.loads(captured.out, parse_constant=reject)
    assert doc["max_error"] == 0.01 and doc["ok"] is False
    (failure,) = doc["failures"]
    assert failure.startswith("longsum.onnx output y (generic): rel_l2 0.")
    assert failure.endswith("> max error 0.01")
    assert f"aneforge: check failed: {failure}\n" in captured.err
    assert main(["check", long_sum, "--target", "M1,M5", "--max-error", "0.5"]) == 0
    assert "check failed" not in capsys.readouterr().err
    doc = check_json(capsys, long_sum, "--target", "M1,M5", "--max-error", "1e-4", code=1)
    assert len(doc["failures"]) == 3  # generic, M1 and M5


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf"])
def test_a_bad_max_error_is_a_user_error(capsys, value):
    assert main(["check", "cnn", "--max-error", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-error" in err and repr(value) in err
    assert "Traceback" not in err


def test_warnings_print_as_one_line_each(capsys, long_sum):
    with warnings.catch_warnings():
        warnings.simplefilter("default")  # whatever filters the test run was given
        before = warnings.showwarning
        assert main(["check", long_sum, "--json"]) == 0
        assert warnings.showwarning is before  # the library's warning display is left alone
    err = capsys.readouterr().err.splitlines()
    (line,) = [ln for ln in err if "PrecisionWarning" in ln]
    assert line.startswith("warning: PrecisionWarning: precision risk signal")
    assert all(ln.startswith("warning: ") for ln in err), err  # no file:line continuation
    with pytest.warns(af.PrecisionWarning):  # outside the command, warnings are Python's
        af.compile(af.from_onnx(long_sum).outputs)


@pytest.fixture(scope="module")
def top_k(tmp_path_factory):
    """y = top 8 of exp(x): a fused exp and a bridge op (a cut) on chips that have topk."""
    path = tmp_path_factory.mktemp("onnx") / "topk.onnx"
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("TopK", ["e", "k"], ["y", "i"], axis=-1),
    ]
    return onnx_file(path, nodes, [4, 64], [4, 8], [("k", np.array([8], np.int64))])


def layer_blocks(text: str) -> dict[str, list[str]]:
    """The plain layer tables of ``check --layers``: title line -> its row lines."""
    lines = text.splitlines()
    blocks = {}
    for i, line in enumerate(lines):
        if " slowest of " in line:
            header = lines[i + 1].split()
            assert header[:3] == ["layer", "op", "shape"], header
            rows = []
            for row in lines[i + 2 :]:
                if not row.startswith("  "):
                    break
                rows.append(row)
            blocks[line] = rows
    return blocks


def test_layers_lists_the_n_slowest_per_target_by_name(capsys):
    assert main(["check", "transformer", "--target", "M1,M5", "--layers", "3"]) == 0
    out = capsys.readouterr().out
    blocks = layer_blocks(out)
    assert len(blocks) == 2
    x, y = af.nn.transformer_block(seed=0)
    for (title, rows), chip in zip(blocks.items(), ("M1", "M5")):
        est = af.estimate_breakdown(af.compile(y, target=chip), target=chip)
        assert title.startswith(
            f"transformer: the 3 slowest of {len(est.nodes)} layers on {chip} ("
        )
        assert f"{est.total_us:.0f} us in all" in title
        assert len(rows) == 3
        names = [row.split()[0] for row in rows]
        times = [float(row.split()[3]) for row in rows]
        assert times == sorted(times, reverse=True)
        slowest = sorted(est.nodes, key=lambda n: -n.time_us)[:3]
        assert times == pytest.approx([n.time_us for n in slowest], rel=1e-3)
        by_name = {n.name: n for n in est.nodes}
        assert all(by_name[n].time_us >= slowest[-1].time_us for n in names), names
        assert [by_name[n].op for n in names] == [row.split()[1] for row in rows]


def test_layers_without_targets_lists_the_default_chips_run(capsys):
    assert main(["check", "cnn", "--layers", "2"]) == 0
    ((title, rows),) = layer_blocks(capsys.readouterr().out).items()
    assert "on M5 Pro (h17s" in title and len(rows) == 2
    assert main(["check", "cnn"]) == 0
    assert layer_blocks(capsys.readouterr().out) == {}  # no --layers, no layer table


def test_json_carries_every_layer_and_they_add_up_to_the_estimate(capsys, top_k):
    doc = check_json(capsys, top_k, "--target", "M5,M1")
    (rep,) = doc["reports"]
    m5, m1 = rep["targets"]
    assert m1["compiles"] is False and m1["layers"] == []
    assert m5["parts_us"]["cuts"] > 0  # the topk runs as a bridge op
    for est in (rep["estimate"], m5):
        layers = est["layers"]
        assert [r["name"] for r in layers] == ["e", "y"]  # every layer, named, in order
        assert {r["kind"] for r in layers} == {"fused", "bridge"}
        total = math.fsum(r["time_us"] for r in layers) + est["parts_us"]["floor"]
        assert total == pytest.approx(est["estimate_us"], rel=1e-9)
        fields = {"name", "op", "shape", "region", "kind", "time_us", "bound", "flops",
                  "bytes", "compute_us", "weights_us", "activations_us", "overhead_us"}  # fmt: skip
        assert all(fields <= set(r) for r in layers)
    doc = check_json(capsys, "transformer", "--layers", "2")  # --layers leaves JSON whole
    est = doc["reports"][0]["estimate"]
    x, y = af.nn.transformer_block(seed=0)
    assert len(est["layers"]) == len(af.estimate_breakdown(af.compile(y), target="M5 Pro").nodes)
    assert len(est["layers"]) > 2 and doc["plot"] is None


@pytest.mark.parametrize("value", ["0", "-3", "abc", "2.5", ""])
def test_a_bad_layers_count_is_a_user_error(capsys, value):
    assert main(["check", "cnn", "--layers", value]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "--layers" in captured.err
    assert repr(value) in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_plot_writes_a_png_for_two_targets(tmp_path, capsys):
    path = tmp_path / "cnn.png"
    assert main(["check", "cnn", "--target", "M1,M5", "--layers", "4", "--plot", str(path)]) == 0
    assert f"wrote {path}: per target a roofline and the 4 slowest layers" in (
        capsys.readouterr().out
    )
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 30_000  # two rows of two drawn panels, not an empty canvas
    svg = tmp_path / "cnn.svg"
    doc = check_json(capsys, "cnn", "--target", "M1", "--plot", str(svg))
    assert doc["plot"] == str(svg) and "<svg" in svg.read_text()[:1000]


@pytest.mark.parametrize("name, words", [("out.xyz", "unknown image format"),
                                         ("nodir/out.png", "does not exist")])  # fmt: skip
def test_a_bad_plot_path_is_refused_before_any_work(tmp_path, capsys, monkeypatch, name, words):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("aneforge.cli.check_report", None)  # work would raise TypeError
    assert main(["check", "cnn", "--plot", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and repr(name) in err


def test_plot_without_matplotlib_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import raises
    assert main(["check", "cnn", "--plot", "out.png"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'aneforge[plot]'" in err


def test_docs_list_every_layer_field(capsys):
    doc = check_json(capsys, "cnn")
    (layer, *_) = doc["reports"][0]["estimate"]["layers"]
    text = (Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    section = text[text.index("A layer (`layers[]`") :]
    for key in layer:
        assert f"| `{key}` |" in section, key


def test_an_onnx_models_output_and_layer_names_reach_the_report(capsys, long_sum):
    rep = check_json(capsys, long_sum, "--target", "M1")
    (model,) = rep["reports"]
    assert model["outputs"][0]["name"] == "y"
    assert model["targets"][0]["outputs"][0]["name"] == "y"
    layer_names = [layer["name"] for layer in model["targets"][0]["layers"]]
    assert "y" in layer_names  # the ReduceSum node, named by its output


@pytest.fixture(scope="module")
def norm_times_100(tmp_path_factory):
    """y = layer_norm(x * 100): the norm's x*x passes 65504 and the output is all zeros."""
    path = tmp_path_factory.mktemp("onnx") / "ln100.onnx"
    nodes = [
        helper.make_node("Mul", ["x", "k"], ["scaled"], name="scale"),
        helper.make_node("LayerNormalization", ["scaled", "g", "b"], ["y"], name="norm"),
    ]
    inits = [("k", np.array(100, np.float32)), ("g", np.ones(64, np.float32)),
             ("b", np.zeros(64, np.float32))]  # fmt: skip
    return onnx_file(path, nodes, [4, 64], [4, 64], inits)


def test_check_says_where_a_run_overflowed(capsys, overflow):
    rep = check_json(capsys, overflow, "--target", "M1", code=1)
    (model,) = rep["reports"]
    for where in (model["where"], model["targets"][0]["where"]):
        hit = where["first_nonfinite"]
        assert hit["op"] == "mul" and hit["inf"] > 0 and hit["fed_by"][0]["name"] == "s"
    main(["check", overflow])
    text = capsys.readouterr().out
    assert "generic: first non-finite value at node" in text and "fed by 's'" in text


def test_check_finds_the_norm_that_collapsed_by_name(capsys, norm_times_100):
    rep = check_json(capsys, norm_times_100, "--target", "M5")
    (model,) = rep["reports"]
    assert model["where"]["first_nonfinite"] is None
    assert model["where"]["first_collapse"]["name"] == "norm"
    assert model["targets"][0]["where"]["first_collapse"]["name"] == "norm"


def test_a_healthy_run_is_not_traced(capsys):
    rep = check_json(capsys, "cnn")
    assert rep["reports"][0]["where"] is None


# ---- --input-range ------------------------------------------------------------------------


def test_input_range_feeds_inside_it_and_reports_the_analysis(capsys):
    doc = check_json(capsys, "cnn", "--input-range=-3:3")
    ranges = doc["reports"][0]["ranges"]
    assert list(ranges["inputs"].values()) == [[-3.0, 3.0]]
    assert {"hazards", "flagged_share", "input_scale"} <= set(ranges)
    # inputs that large do overflow: the run fails (exit 1) and the analysis says where
    wide = check_json(capsys, "cnn", "--input-range=-30000:30000", "--target", "M1", code=1)
    found = wide["reports"][0]["ranges"]["hazards"]
    assert found and {"kind", "certainty", "name", "op", "step", "fix"} <= set(found[0])
    assert wide["reports"][0]["targets"][0]["ranges"]["hazards"]


def test_input_range_prints_the_hazards_per_run(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert main(["check", "cnn", "--input-range=-30000:30000", "--target", "M1"]) == 1
    out = capsys.readouterr().out
    assert "range analysis (generic" in out and "range analysis (M1" in out
    assert "may overflow" in out and "fix:" in out


@pytest.mark.parametrize("bad", ["x=3", "=1:2", "a:b", "x=2:1", "nosuch=0:1", "0:1e6"])
def test_a_bad_input_range_is_a_user_error(capsys, bad):
    assert main(["check", "cnn", f"--input-range={bad}"]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("aneforge: error: ")
        and "--input-range" in err
        and len(err.splitlines()) == 1
    )


# ---- user mistakes: one line, exit 2, nothing deleted --------


def user_error(capsys, *argv) -> str:
    """The one stderr line of a command that must be a user error (exit 2)."""
    assert main(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("aneforge: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", ["check", "export"])
def test_export_never_deletes_a_folder_aneforge_did_not_write(tmp_path, capsys, command):
    keep = tmp_path / "keep.mlpackage"
    keep.mkdir()
    (keep / "thesis.tex").write_text("years of work")
    out = "--export" if command == "check" else "-o"
    err = user_error(capsys, command, "cnn", out, str(keep))
    assert "exists and is a folder holding other files (thesis.tex)" in err and "--force" in err
    assert [p.name for p in keep.iterdir()] == ["thesis.tex"]
    assert [p.name for p in tmp_path.iterdir()] == ["keep.mlpackage"]  # no probe left


def test_force_replaces_and_aneforge_replaces_its_own_package(tmp_path, capsys):
    from aneforge.io.coreml_package import foreign_reason

    keep = tmp_path / "keep.mlpackage"
    keep.mkdir()
    (keep / "notes.txt").write_text("")
    assert main(["export", "cnn", "-o", str(keep), "--force"]) == 0
    assert foreign_reason(keep) is None
    assert main(["export", "transformer", "-o", str(keep)]) == 0  # its own: no --force
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {keep} (transformer)"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.mlpackage"]


@pytest.mark.parametrize("seed", ["-1", "abc", "1.5", str(2**64)])
def test_a_bad_seed_is_a_user_error(capsys, seed):
    err = user_error(capsys, "check", "cnn", f"--seed={seed}")
    assert (
        f"argument --seed: must be a whole number from 0 to 2**64 - 1 (e.g. 0), got {seed!r}" in err
    )


def test_check_report_refuses_a_negative_seed():
    from aneforge.errors import OptionError
    from aneforge.report import check_report

    x, y = af.nn.small_cnn()
    with pytest.raises(OptionError, match="seed must be a whole number"):
        check_report("cnn", [x], [y], seed=-1)


@pytest.mark.parametrize("command", ["check", "export"])
def test_an_unwritable_export_path_is_a_user_error(capsys, command):
    err = user_error(capsys, command, "cnn", "--export" if command == "check" else "-o",
                     "/proc/x.mlpackage")  # fmt: skip
    assert "'/proc/x.mlpackage': cannot write into '/proc'" in err


def test_an_empty_export_path_is_an_error_not_skipped(capsys):
    assert "--export '' is empty" in user_error(capsys, "check", "cnn", "--export", "")


def test_export_with_every_example_is_refused(capsys, tmp_path):
    err = user_error(capsys, "check", "--export", str(tmp_path / "m.mlpackage"))
    assert "--export writes one package: name one model" in err


def test_a_folder_named_like_a_model_is_not_a_model_file(tmp_path, capsys):
    (tmp_path / "x.onnx").mkdir()
    err = user_error(capsys, "check", str(tmp_path / "x.onnx"))
    assert "is a folder, not a model file" in err


@pytest.mark.parametrize("targets, words", [(",,,", "names no target"),
                                            ("", "names no target"),
                                            ("M1,,M4", "target 2 is empty")])  # fmt: skip
def test_a_target_list_must_name_targets(capsys, targets, words):
    assert f"--target {targets!r}" in user_error(capsys, "check", "cnn", "--target", targets)
    assert words in user_error(capsys, "check", "cnn", "--target", targets)


@pytest.mark.parametrize(
    "argv, words",
    [(["bogus"], "invalid choice: 'bogus'"), (["check", "--bogus"], "unrecognized arguments"),
     (["export", "cnn"], "required: -o/--output"), (["check", "--seed"], "expected one argument")],
)  # fmt: skip
def test_argparse_errors_are_one_line(capsys, argv, words):
    assert words in user_error(capsys, *argv)


def test_a_plot_path_that_is_a_folder_is_refused(tmp_path, capsys):
    (tmp_path / "r.png").mkdir()
    assert "is a folder" in user_error(capsys, "check", "cnn", "--plot", str(tmp_path / "r.png"))


def test_a_closed_stdout_exits_quietly(tmp_path):
    """`aneforge ... | head` whose reader is gone: exit 141, nothing on stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([console_script(), "check", "cnn", "--json"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


def test_a_closed_stdout_in_process_returns_141(monkeypatch):
    class Closed:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main([]) == 141  # argparse swallows the write error; the final flush does not


def onnx_input_model(path, dims) -> str:
    """y = relu(x) for an input x declared with ``dims``."""
    return onnx_file(path, [helper.make_node("Relu", ["x"], ["y"])], dims, dims)


def test_check_refuses_a_declared_input_too_large_to_draw(tmp_path, capsys):
    """(The importer or check refuses it, whichever comes first; never a MemoryError.)"""
    err = user_error(capsys, "check", onnx_input_model(tmp_path / "big.onnx", [2**31]))
    assert "'x'" in err and "2147483648 elements" in err and "ANEFORGE_MAX_ELEMENTS" in err


def test_check_report_checks_every_size_before_allocating(monkeypatch):
    from aneforge.errors import SizeLimitError
    from aneforge.report import check_report

    x = af.input((4, 512), name="x")
    small = af.input((4,), name="s")
    wide = small + af.weight(np.ones((512, 1)))  # a (512, 4) node from small operands
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "1000")
    with pytest.raises(SizeLimitError, match="check: random input 'x': 2048 elements"):
        check_report("m", [x], [x.relu()])
    with pytest.raises(SizeLimitError, match=r"check: node '\w+' \(add\): 2048 elements"):
        check_report("m", [small], [wide])


def test_the_input_size_limit_is_configurable(tmp_path, capsys, monkeypatch):
    path = onnx_input_model(tmp_path / "m.onnx", [4, 512])
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "1000")
    assert "2048 elements" in user_error(capsys, "check", path)
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "2048")
    assert main(["check", path, "--json"]) == 0
