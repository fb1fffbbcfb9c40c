"""Per-layer plots: the roofline and slowest-layer panels, written off-screen."""

from __future__ import annotations

import sys

import matplotlib
import pytest
from PIL import Image  # a dependency of matplotlib

import aneforge as af
from aneforge.cost.estimate import roofs
from aneforge.errors import OptionError
from aneforge.plot import (
    NAME_CHARS,
    _clusters,
    _short,
    check_plot_path,
    estimate_rows,
    plot_estimates,
    plot_reports,
    report_rows,
    roofline_points,
)
from aneforge.report import check_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Two rows of two 16-inch panels at 110 dpi with axes, text and dots: a blank or broken
# figure compresses to a few KB, a real one to tens of KB.
PLAUSIBLE_PNG_BYTES = 30_000
# The roofs hold each layer alone up to float rounding of flops / time.
ROUNDING = 1e-9


@pytest.fixture(scope="module")
def cnn_estimates():
    x, y = af.nn.small_cnn()
    return [af.estimate_breakdown(af.compile(y, target=t), target=t) for t in ("M1", "M5")]


def test_two_targets_make_a_png_of_two_rows(tmp_path, cnn_estimates):
    backend = matplotlib.get_backend()
    path = plot_estimates(cnn_estimates, tmp_path / "cnn.png", top=5, names=["M1", "M5"])
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > PLAUSIBLE_PNG_BYTES
    assert matplotlib.get_backend() == backend  # drawn off-screen; pyplot untouched
    width, height = Image.open(path).size
    assert width > 1500 and height > 1200  # two rows of two panels, 16 x 6 inches each


def test_an_svg_is_written_as_well(tmp_path, cnn_estimates):
    path = plot_estimates(cnn_estimates[:1], tmp_path / "cnn.svg", top=3)
    assert "<svg" in path.read_text()[:1000]


def test_the_chip_is_named_in_each_row(cnn_estimates):
    rows = estimate_rows(cnn_estimates, names=["M1", "M5"])
    assert [r["title"] for r in rows] == ["M1 (h13)", "M5 (h17s)"]
    assert [r["title"] for r in estimate_rows(cnn_estimates)] == ["h13", "h17s"]
    assert rows[0]["total_us"] == cnn_estimates[0].total_us
    assert len(rows[0]["layers"]) == len(cnn_estimates[0].nodes)


def test_report_rows_cover_each_target_and_say_which_cannot_compile():
    x, y = af.nn.small_cnn()
    rep = check_report("cnn", [x], [y], targets=["M1", "h11"])
    ok, blocked = report_rows([rep])
    assert ok["title"] == "cnn on M1 (h13)" and ok["note"] is None and ok["layers"]
    assert blocked["note"].startswith("does not compile") and not blocked["layers"]
    assert blocked["title"] == "cnn on h11"
    # without targets, the row is the default chip's estimate
    (default,) = report_rows([check_report("cnn", [x], [y])])
    assert default["roof"] == "M5 Pro" and default["total_us"] == pytest.approx(
        rep["estimate"]["estimate_us"]
    )


def test_a_report_plot_with_a_blocked_target_still_draws(tmp_path):
    x, y = af.nn.small_cnn()
    rep = check_report("cnn", [x], [y], targets=["M1", "h11"])
    path = plot_reports([rep], tmp_path / "r.png", top=3)
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("target", ["M1", "M5", "h14"])
def test_no_layer_lies_above_the_roofs(target):
    x, y = af.nn.transformer_block()
    est = af.estimate_breakdown(af.compile(y, target=target), target=target)
    r = roofs(target)
    points = roofline_points(est.to_records())
    assert points  # the linears and matmuls carry FLOPs
    fastest_dma = max(r["weight_bytes_per_us"], r["activation_bytes_per_us"])
    for intensity, tflops, layer in points:
        assert layer["flops"] > 0
        assert tflops * 1e6 <= r["peak_flops_per_us"] * (1 + ROUNDING), layer["name"]
        assert tflops * 1e6 <= intensity * fastest_dma * (1 + ROUNDING), layer["name"]


def test_layers_on_one_spot_share_a_dot():
    rec = {"kind": "fused", "bound": "compute", "name": "a"}
    dots = [(100.0, 5.0, rec), (101.0, 5.05, rec), (1000.0, 5.0, rec), (100.0, 5.0, {
        **rec, "bound": "weights"})]  # fmt: skip
    groups = _clusters(dots)
    assert list(groups) == ["compute", "weights"]
    assert sorted(n for _, _, n in groups["compute"]) == [1, 2]
    assert [n for _, _, n in groups["weights"]] == [1]


def test_long_layer_names_are_shortened_in_the_middle():
    name = "encoder.layer.11.attention.self.query.weight_matmul"
    short = _short(name)
    assert len(short) == NAME_CHARS and "…" in short
    assert short.startswith("encoder.") and short.endswith("matmul")
    assert _short("conv_1") == "conv_1"


@pytest.mark.parametrize(
    "path, words",
    [("out.xyz", "unknown image format '.xyz'"), ("out", r"unknown image format '\(none\)'"),
     ("no/such/dir/out.png", "does not exist")],
)  # fmt: skip
def test_a_bad_path_is_refused_naming_it(tmp_path, monkeypatch, path, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match=words):
        check_plot_path(path)


def test_bad_arguments_are_option_errors(tmp_path, cnn_estimates):
    with pytest.raises(OptionError, match="top must be a whole number of layers >= 1"):
        plot_estimates(cnn_estimates, tmp_path / "a.png", top=0)
    with pytest.raises(OptionError, match="2 names for 1 estimates"):
        plot_estimates(cnn_estimates[:1], tmp_path / "a.png", names=["M1", "M5"])
    with pytest.raises(OptionError, match=r"takes Estimates \(af.estimate_breakdown"):
        plot_estimates([1.0], tmp_path / "a.png")
    with pytest.raises(OptionError, match="no estimate to plot"):
        plot_estimates([], tmp_path / "a.png")


def test_without_matplotlib_the_error_says_how_to_install_it(monkeypatch, cnn_estimates):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import raises
    with pytest.raises(OptionError, match=r"pip install 'aneforge\[plot\]'"):
        plot_estimates(cnn_estimates, "out.png")


def test_the_roofs_drawn_are_the_named_chips():
    # A chip name carries its memory ceiling; the roofline shows the chip's, not its
    # bare architecture's, DMA roofs.
    x, y = af.nn.small_cnn()
    est = af.estimate_breakdown(af.compile(y), target="M1")
    (row,) = estimate_rows([est])
    assert est.chip == "M1" and row["roof"] == "M1"
    assert roofs("M1")["weight_bytes_per_us"] < roofs("h13")["weight_bytes_per_us"]
