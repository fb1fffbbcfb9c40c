"""project_peak, the anchors and estimate_provenance, against the silicon anchors and the data."""

from __future__ import annotations

import itertools
import json
from importlib import resources
from pathlib import Path

import pytest

from aneforge.cost.spec_baseline import SPEC_ANCHORS
from aneforge.data import load
from aneforge.errors import OptionError
from aneforge.targets import (
    ANCHORS,
    FAMILIES,
    all_targets,
    anchor_for,
    estimate_provenance,
    get_target,
    project_peak,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "targets.md"
ALL_ARCHS = [a for members in FAMILIES.values() for a in members]

# The optimizer and the cost model (docs/sources.md), "Provenance and fallbacks": the anchor
# and kind of each family.
EXPECTED = {
    1: ("h13", "extrapolated"),  # no MIL path: the nearest anchor above
    2: ("h13", "silicon-anchored"),
    3: ("h14", "silicon-anchored"),
    4: ("h14", "extrapolated"),  # A15, no spec anchor: the A14 anchor below
    5: ("h17s", "silicon-anchored"),  # the A16 tier folds H16/H17* into h17s
}


def raw_curve(arch: str) -> dict:
    """The bundled curve an architecture uses, read straight from the data file."""
    text = resources.files("aneforge.data").joinpath("chip_curves.json").read_text()
    return json.loads(text)["chips"][get_target(arch).curve_from]


def test_the_m1_point_is_the_measured_1_8_tflops():
    p = project_peak("h13")
    assert p == {"tflops": 1.8, "rel_m1": 1.0, "cores": 4, "ghz": pytest.approx(1.1424)}


def test_the_m5_anchor_projects_the_spec_peak():
    # the specification: "peak 8.9 TFLOP/s (= project_peak('h17s'))"
    assert project_peak("h17s")["tflops"] == pytest.approx(8.9, rel=0.02)
    assert project_peak("M5 Pro") == project_peak("h17s")


def test_the_generational_extremes():
    assert project_peak("m11")["rel_m1"] == pytest.approx(0.1, abs=0.03)
    assert project_peak("h17d")["rel_m1"] == pytest.approx(20, rel=0.03)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_the_peak_is_cores_times_effective_clock_relative_to_the_m1(arch):
    c, m1 = raw_curve(arch), raw_curve("h13")
    rel = c["cores"] * c["eff_clock_hz"] / (m1["cores"] * m1["eff_clock_hz"])
    p = project_peak(arch)
    assert set(p) == {"tflops", "rel_m1", "cores", "ghz"}
    assert p["rel_m1"] == pytest.approx(rel, rel=1e-12)
    assert p["tflops"] == pytest.approx(1.8 * rel, rel=1e-12)
    assert p["cores"] == c["cores"]
    assert p["ghz"] == pytest.approx(c["eff_clock_hz"] / 1e9, rel=1e-12)


def test_the_peak_is_monotone_in_cores_times_clock_within_a_family():
    for members in FAMILIES.values():
        for a, b in itertools.combinations(members, 2):
            ta, tb = get_target(a), get_target(b)
            work_a, work_b = ta.cores * ta.eff_clock_hz, tb.cores * tb.eff_clock_hz
            pa, pb = project_peak(a)["tflops"], project_peak(b)["tflops"]
            if work_a == work_b:
                assert pa == pb, (a, b)
            else:
                assert (pa < pb) == (work_a < work_b), (a, b)


def test_the_anchor_table():
    assert set(ANCHORS) == {"h13", "h14", "h17s"}
    families = [a["family"] for a in ANCHORS.values()]
    assert len(set(families)) == 3
    for arch, a in ANCHORS.items():
        assert get_target(arch).family == a["family"]
    assert ANCHORS["h13"]["chip"] == "M1"
    assert ANCHORS["h14"]["ramp"] == {"F": 1.8e10, "q": 0.38}
    assert ANCHORS["h17s"]["peak_tflops"] == pytest.approx(project_peak("h17s")["tflops"], rel=0.01)


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_provenance_of_every_architecture(arch):
    t = get_target(arch)
    anchor, kind = EXPECTED[t.family]
    p = estimate_provenance(arch)
    assert set(p) == {"arch", "family", "kind", "anchor", "reason", "measured"}
    assert (p["arch"], p["family"], p["kind"], p["anchor"]) == (arch, t.family, kind, anchor)
    assert anchor_for(arch) == (anchor, kind)
    assert anchor in p["reason"]
    if t.family == 1:
        assert "no MIL path" in p["reason"]
    if t.family == 4:
        assert "nearest anchor below" in p["reason"]
    if t.family == 5 and arch != "h17s":
        assert "folds H16/H17*" in p["reason"]
    assert (t.curve_from != arch) == ("no curve of its own" in p["reason"])


def test_provenance_takes_marketing_names():
    assert estimate_provenance("M3 Max")["arch"] == "h15c"
    assert estimate_provenance("M3 Max")["kind"] == "extrapolated"
    assert anchor_for("M4 Pro") == ("h17s", "silicon-anchored")


@pytest.mark.parametrize("fn", [project_peak, estimate_provenance, anchor_for])
def test_an_unknown_architecture_raises(fn):
    with pytest.raises(OptionError):
        fn("h99")


def test_the_docs_peak_table_matches_project_peak():
    lines = DOC.read_text().splitlines()
    start = lines.index("| arch | cores | effective (GHz) | x M1 | TFLOP/s | provenance | anchor |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    want = []
    for t in all_targets():
        p, prov = project_peak(t.arch), estimate_provenance(t.arch)
        want.append(
            [
                t.arch,
                str(p["cores"]),
                f"{p['ghz']:.3f}",
                f"{p['rel_m1']:.2f}",
                f"{p['tflops']:.2f}",
                prov["kind"],
                prov["anchor"],
            ]
        )
    assert rows == want


def test_units_divide_the_cores_by_the_curves_multiplier():
    from aneforge.targets.table import all_targets, get_target

    raw = json.loads(resources.files("aneforge.data").joinpath("chip_curves.json").read_text())
    for t in all_targets():
        curve = raw["chips"][t.curve_from]
        assert t.mult == curve["mult"] and t.units == t.cores / curve["mult"]
    assert get_target("h15c").units == 16 == get_target("h16s").units
    assert get_target("h13").units == 4


def test_provenance_carries_the_models_published_accuracy():
    rows = estimate_provenance("M5 Pro")["measured"]
    by_chip = {r["chip"]: r for r in rows}
    assert set(by_chip) == {"M5", "M5 Pro"}  # the M5 Max's one row does not compile
    assert by_chip["M5 Pro"]["rows"] == 11 + 5  # kernel rows and whole models
    for r in rows:
        assert 1.0 <= r["geomean_error"] <= r["worst_error"]
        assert r["held_out_geomean_error"] >= 1.0
    assert estimate_provenance("h11")["measured"] == []


def test_the_docs_anchor_table_matches_the_anchor_file():
    lines = DOC.read_text().splitlines()
    start = lines.index(
        "| anchor | family | chip | fitted peak (TFLOP/s) | BW (GB/s) | floor (us) | note |"
    )
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")][:6])

    def cell(v):
        return "-" if v is None else f"{v:g}"

    want = [
        [arch, str(a["family"]), a["chip"], cell(a["peak_tflops"]), cell(a["bw_gb_s"]),
         cell(a["floor_us"])]
        for arch, a in ANCHORS.items()
    ]  # fmt: skip
    assert rows == want


def test_the_anchors_are_typed_once_and_the_spec_baseline_reads_them():
    data = load("anchors.json")
    assert data["_source"]["document"] and all(a["source"] for a in data["anchors"].values())
    assert ANCHORS is data["anchors"]
    assert project_peak(data["reference"]["arch"])["tflops"] == data["reference"]["peak_tflops"]
    for arch, a in ANCHORS.items():
        overhead, peak, bw, ramp = SPEC_ANCHORS[arch]
        assert peak == a["peak_tflops"] * 1e6  # TFLOP/s -> flop/us
        if a["floor_us"] is not None:
            assert overhead == a["floor_us"]
        if a["bw_gb_s"] is not None:
            assert bw == a["bw_gb_s"] * 1e3  # GB/s -> bytes/us
        assert ramp == (None if a["ramp"] is None else (a["ramp"]["F"], a["ramp"]["q"]))
    # h14 quotes no bandwidth or floor: the spec scales the M1's by cores and by clock.
    m1, h14 = get_target("h13"), get_target("h14")
    overhead, _, bw, _ = SPEC_ANCHORS["h14"]
    assert overhead == pytest.approx(ANCHORS["h13"]["floor_us"] * m1.clock_hz / h14.clock_hz)
    assert bw == pytest.approx(ANCHORS["h13"]["bw_gb_s"] * 1e3 * h14.cores / m1.cores)
