"""The check report: per-target runs, their estimates, the published error, rendering."""

import json
import math

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.cost.estimate import DEFAULT_CHIP
from aneforge.metrics import compare
from aneforge.report import (
    STAGES,
    CheckReport,
    check_failures,
    check_report,
    describe_target,
    target_report,
)
from aneforge.tables import json_safe
from aneforge.targets.names import tier_chips
from aneforge.targets.projection import measured_accuracy

# Float64 rounding between two evaluations of the same exact reference (the report's
# shared one and a direct one): a few ulps of 1e-16, far below any error reported.
SAME_FIGURE = 1e-9
# The long same-sign sum below: 8192 squares summed narrowly. The generic model runs one
# sequential fp16 accumulator, which stalls (rel L2 ~0.19); the chips split it into
# chunks of 192 (M1) or 384 (M5) terms, far more accurate and different from each other.
STALLED_SUM = 0.1


@pytest.fixture(scope="module")
def program():
    x = af.input((1, 64, 16, 16), name="x")
    return Program.from_outputs([af.conv(x, np.zeros((64, 64, 3, 3)), padding=1).relu()])


@pytest.fixture(scope="module")
def long_sum():
    x = af.input((8, 8192), name="x")
    y = (x * x).sum(-1)
    rep = check_report("sum", [x], [y], seed=1, targets=["M1", "M5", "h11"])
    return x, y, rep


def test_a_chip_with_published_timings_reports_its_held_out_error(program):
    rep = target_report(program, "M4")
    m4 = next(m for m in measured_accuracy("h16s") if m["chip"] == "M4")
    assert rep["model_error_chips"] == ["M4"]
    assert rep["model_error"] == pytest.approx(m4["held_out_geomean_error"])
    assert rep["model_error"] > 1.0 and m4["geomean_error"] > 1.0


def test_a_name_without_timings_takes_its_architectures_chips(program):
    rep = target_report(program, "h17s")
    chips = [m["chip"] for m in measured_accuracy("h17s")]  # the published h17s chips
    assert len(chips) >= 2 and "h17s" not in chips
    assert rep["model_error_chips"] == chips
    logs = [np.log(m["held_out_geomean_error"]) for m in measured_accuracy("h17s")]
    assert rep["model_error"] == pytest.approx(float(np.exp(np.mean(logs))))


def test_an_architecture_without_published_timings_says_so(program):
    rep = target_report(program, "A17 Pro")
    assert rep["arch"] == "h16"
    assert rep["model_error"] is None and rep["model_error_chips"] == []


@pytest.mark.parametrize("target", ["M1", "M4", "h17s", "A17 Pro"])
def test_the_parts_of_an_estimate_add_up_to_it(program, target):
    rep = target_report(program, target)
    assert rep["estimate_us"] == pytest.approx(af.estimate(program, target=target))
    assert math.fsum(rep["parts_us"].values()) == pytest.approx(rep["estimate_us"], rel=1e-12)
    assert rep["bound"] == max(rep["parts_us"], key=rep["parts_us"].get)
    assert all(v >= 0 for v in rep["parts_us"].values())


def test_parts_add_up_with_cuts_and_several_regions():
    x = af.input((4, 64), name="x")
    y = af.sort(x.exp() * 2.0) + 1.0  # sort is a bridge op: two regions and a cut
    prog = af.compile(y)
    assert prog.cuts
    for target in ("M4", "M5"):
        rep = target_report(prog, target)
        assert rep["parts_us"]["cuts"] > 0
        assert math.fsum(rep["parts_us"].values()) == pytest.approx(rep["estimate_us"])
        # every layer, fused and bridge, and the floors make up the estimate
        layers = rep["layers"]
        assert {r["kind"] for r in layers} == {"fused", "bridge"}
        assert len({r["name"] for r in layers}) == len(layers)
        floors = rep["parts_us"]["floor"]
        assert math.fsum(r["time_us"] for r in layers) + floors == pytest.approx(
            rep["estimate_us"], rel=1e-12
        )
        assert layers == af.estimate_breakdown(prog, target=target).to_records()


def test_layer_tables_list_the_slowest_layers_per_target(long_sum):
    x, y, rep = long_sum
    tables = rep.layer_tables(1)
    assert len(tables) == 3  # M1, M5 and h11 (which does not compile)
    for (title, rows), t in zip(tables[:2], rep["targets"][:2]):
        assert title.startswith(f"sum: the 1 slowest of {len(t['layers'])} layers on M")
        (row,) = rows
        slowest = max(t["layers"], key=lambda r: r["time_us"])
        assert (row["layer"], row["op"], row["time us"]) == (
            slowest["name"], slowest["op"], slowest["time_us"])  # fmt: skip
        assert row["% of total"] == pytest.approx(
            100 * slowest["time_us"] / t["estimate_us"], rel=0.05
        )
    title, rows = tables[2]
    assert "does not compile" in title and rows == []
    x = af.input((4, 64), name="x")
    alone = check_report("m", [x], [x.exp() + 1.0])
    ((title, rows),) = alone.layer_tables(5)  # no targets: the default chip's run
    assert f"on {describe_target(DEFAULT_CHIP)}" in title
    assert [r["layer"] for r in rows] == [r["name"] for r in sorted(
        alone["estimate"]["layers"], key=lambda r: -r["time_us"])]  # fmt: skip


def test_each_target_runs_its_own_compile_and_numerics(long_sum):
    x, y, rep = long_sum
    feed = np.random.default_rng(1).standard_normal(x.shape)
    want = af.reference(y, feed)
    generic = compare(af.compile(y)(feed), want)
    assert rep["outputs"][0]["rel_l2"] == pytest.approx(generic["rel_l2"], rel=SAME_FIGURE)
    by_name = {t["target"]: t for t in rep["targets"]}
    for target in ("M1", "M5"):
        direct = compare(af.compile(y, target=target)(feed), want)
        got = by_name[target]["outputs"][0]
        for key in ("max_abs", "rel_l2", "cosine"):
            assert got[key] == pytest.approx(direct[key], rel=SAME_FIGURE), (target, key)
        assert by_name[target]["estimate_us"] == pytest.approx(
            af.estimate(af.compile(y, target=target), target=target)
        )
    m1, m5 = (by_name[t]["outputs"][0]["rel_l2"] for t in ("M1", "M5"))
    assert rep["outputs"][0]["rel_l2"] > STALLED_SUM > max(m1, m5)
    assert abs(m1 - m5) > 0.1 * min(m1, m5)  # the routes of 192 and 384 terms differ


def test_a_target_without_mil_reports_no_latency_and_no_errors(long_sum):
    _, _, rep = long_sum
    (h11,) = [t for t in rep["targets"] if t["target"] == "h11"]
    assert h11["compiles"] is False
    assert h11["estimate_us"] is None and h11["bound"] is None and h11["parts_us"] is None
    assert h11["outputs"] == [] and h11["dominant_nodes"] == []
    assert any("no MIL" in f for f in h11["preflight"])
    assert h11["tier"] == "no MIL"


def test_the_divergence_is_predicted_and_measured(long_sum):
    _, _, rep = long_sum
    div = rep["divergence"]
    assert div["targets"] == ["h13", "h17s"] and div["worst"] == "reorder"
    assert div["measured"]["targets"] == ["M1", "M5"]
    assert div["measured"]["identical"] is False and div["measured"]["max_abs"] > 0


def test_a_model_without_chip_differences_is_measured_identical():
    x, y = af.nn.small_cnn()
    rep = check_report("cnn", [x], [y], targets=["M1", "M5"])
    assert rep["divergence"]["worst"] == "none"
    assert rep["divergence"]["measured"]["identical"] is True
    assert rep["divergence"]["measured"]["max_abs"] == 0.0


def test_the_default_chip_is_estimated_and_the_heuristic_is_labelled(long_sum):
    _, y, rep = long_sum
    prog = af.compile(y)
    assert rep["estimate"]["target"] == DEFAULT_CHIP == "M5 Pro"
    assert rep["estimate"]["arch"] == "h17s"
    assert rep["estimate"]["estimate_us"] == pytest.approx(af.estimate(prog, target="M5 Pro"))
    assert rep["pruning_estimate_us"] == pytest.approx(af.estimate(prog))
    assert "estimate_us" not in rep  # no unlabelled latency at the top


def test_the_tier_is_named_in_words():
    assert describe_target("M1") == "M1 (h13, A13 tier: M1 / A14 Bionic generation)"
    assert describe_target("h13") == "h13 (A13 tier: M1 / A14 Bionic generation)"
    assert describe_target("A15 Bionic") == "A15 Bionic (h14, A14 tier: M2 / A15 Bionic generation)"
    assert tier_chips(4) == "M3 / A16 Bionic generation"
    assert tier_chips(1) == "A12 Bionic, A13 Bionic generations"
    with pytest.raises(af.OptionError, match="family"):
        tier_chips(7)


def test_an_unknown_target_is_refused_before_any_work():
    x, y = af.nn.small_cnn()
    seen = []
    with pytest.raises(af.OptionError, match="M99"):
        check_report("cnn", [x], [y], targets=["M1", "M99"], progress=seen.append)
    assert seen == []


def test_stages_are_announced_per_target():
    x, y = af.nn.small_cnn()
    seen = []
    check_report("cnn", [x], [y], targets=["M1", "h11"], progress=seen.append)
    assert seen == [*STAGES, "M1: compile", "M1: emulate", "h11: compile"]


def test_failures_name_the_output_and_run(long_sum):
    _, _, rep = long_sum
    assert check_failures(rep) == []
    (generic,) = check_failures(rep, max_error=STALLED_SUM)
    assert generic.startswith("sum output 0 (generic): rel_l2 0.1")
    assert len(check_failures(rep, max_error=1e-6)) == 3  # generic, M1, M5; not h11


def test_a_non_finite_output_fails_and_is_json_safe():
    x = af.input((4, 64), name="x")
    y = x * 1e4
    y = y * y  # |x| ~ 1 -> 1e8: inf in fp16
    rep = check_report("overflow", [x], [y], targets=["M1"])
    out = rep["outputs"][0]
    assert out["nonfinite_values"] > 0 and math.isinf(out["rel_l2"])
    assert [f.rsplit(": ", 1)[0] for f in check_failures(rep)] == [
        "overflow output 0 (generic)",
        "overflow output 0 (M1 (h13, A13 tier: M1 / A14 Bionic generation))",
    ]
    doc = json_safe(rep)
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text)["outputs"][0]["rel_l2"] is None
    assert doc["outputs"][0]["rel_l2_nonfinite"] == "inf"
    assert doc["targets"][0]["outputs"][0]["cosine_nonfinite"] == "nan"


def test_the_report_renders_as_a_table(long_sum):
    _, _, rep = long_sum
    assert isinstance(rep, CheckReport) and isinstance(rep, dict)
    records = rep.to_records()
    runs = [r["run"] for r in records]
    assert runs[0] == "generic (latency on M5 Pro)"
    assert runs[1] == "M1 (h13)" and runs[3] == "h11"  # the tiers print once, below
    assert records[3]["bound"] == "does not compile" and "relative L2" not in records[3]
    assert records[1]["relative L2"] == rep["targets"][0]["outputs"][0]["rel_l2"]
    html = rep._repr_html_()
    assert html.startswith("<table>") and "sum: 2 ops" in html
    assert rep.__rich__().row_count == len(records)
    rows = rep.target_records()
    assert [r["compiles"] for r in rows] == ["yes", "yes", "no"]


def test_the_html_table_escapes_the_model_name():
    x, y = af.nn.small_cnn()
    html = check_report("<script>", [x], [y])._repr_html_()
    assert "&lt;script&gt;" in html and "<script>" not in html


def test_the_precision_report_renders_as_a_table():
    x = af.input((8, 4096), name="x")
    rep = af.precision_risk(x.sum(-1) - x.mean(-1), verbose=True)
    records = rep.to_records()
    assert [r["op"] for r in records] == [e.op for e in rep.nodes]
    assert records[0]["proxy"] == rep.nodes[0].proxy and records[0]["mode"] == "narrow_sum"
    assert records[0]["shape"] == "8"
    assert rep.title.startswith("precision risk (generic model)")
    assert rep.__rich__().row_count == len(records)
    assert "<table>" in rep._repr_html_() and "narrow_sum" in rep._repr_html_()
