"""The family capability records (data/families.json): complete, sourced, documented, and
what every consumer reads.

The expected numbers come from the documents that stated them before the records
existed (docs/numerics.md section 9, docs/compression.md, docs/export.md,
docs/targets.md), parsed here, never typed again in this file; then each consumer (the
emulator's numerics, the preflight, the compression, the exporter) is checked to act on
the record's values.
"""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.preflight import preflight
from aneforge.compression import ENCODINGS, native_streams
from aneforge.data import SCHEMAS, load
from aneforge.emulator.chips import chip_numerics
from aneforge.errors import BundledDataError, OptionError, PreflightError
from aneforge.graph.fp16 import FP16_MAX
from aneforge.io.coreml_export import _choose_target
from aneforge.targets import FAMILIES, Capability, all_targets, capabilities
from aneforge.targets import capability as capability_module
from aneforge.targets.capability import capability
from aneforge.targets.table import FAMILY_REPRESENTATIVE, FAMILY_TIER

DOCS = Path(__file__).resolve().parents[2] / "docs"
FIELDS = [f.name for f in dataclasses.fields(Capability)]
MIL = [c for c in capabilities() if c.has_mil]


def doc_table(doc: str, header: str) -> list[list[str]]:
    """The body rows of the markdown table in ``docs/<doc>`` whose header line starts with
    ``header`` (escaped pipes inside a cell are kept)."""
    lines = (DOCS / doc).read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(header)]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = line.replace("\\|", "\0").strip().strip("|").split("|")
        rows.append([c.replace("\0", "|").strip() for c in cells])
    return rows


def _number(cell: str) -> int | None:
    """The one number a cell states ('192', '|v| > 4094 -> ±inf'), None for '-' or 'clean'."""
    found = re.findall(r"\d+", cell)
    return int(found[-1]) if found else None


# ---- the records are complete and sourced --------------------------------------------------


def test_every_family_has_every_field():
    raw = json.loads(resources.files("aneforge.data").joinpath("families.json").read_text())
    assert [r["family"] for r in raw["families"]] == [1, 2, 3, 4, 5]
    for record in raw["families"]:
        assert sorted(record) == sorted(FIELDS), record["family"]
    for c in capabilities():
        assert capability(c.family) is c
        for name in ("family", "tier", "members", "representative", "has_mil"):
            assert getattr(c, name) not in (None, "", ()), (c.family, name)
        limits = ("reduction_route", "matmul_limit", "max_channels", "max_extent")
        limits += ("max_kernel_width", "min_ios")
        for name in limits:
            value = getattr(c, name)
            assert (value is None) == (not c.has_mil), (c.family, name)
            assert value is None or value > 0, (c.family, name)
        assert c.native_streams <= set(ENCODINGS) - {"fp16"}, c.family
    assert [c.has_mil for c in capabilities()] == [False, True, True, True, True]


def test_every_field_names_its_source():
    data = load("families.json")
    assert data["_source"]["documents"] and data["_source"]["kept_by"]
    for name in FIELDS:
        entry = data["fields"][name]
        assert len(entry["meaning"]) > 10 and len(entry["source"]) > 10, name
        assert capability_module.field_source(name) == entry["source"]
    assert "Numerics" in data["fields"]["reduction_route"]["source"]
    assert "docs/export.md" in data["fields"]["min_ios"]["source"]


def test_every_bundled_file_names_its_source():
    for name, schema in SCHEMAS.items():
        assert load(name)[schema.source_key], name


def test_the_families_partition_the_25_architectures():
    archs = [a for c in capabilities() for a in c.members]
    assert len(archs) == len(set(archs)) == 25
    assert archs == [t.arch for t in all_targets()]
    for c in capabilities():
        assert c.representative in c.members
        assert FAMILIES[c.family] == c.members
        assert FAMILY_TIER[c.family] == c.tier
        assert FAMILY_REPRESENTATIVE[c.family] == c.representative
        for arch in c.members:
            assert af.resolve_target(arch).capability is c


def test_capabilities_only_grow_across_families():
    for older, newer in zip(MIL, MIL[1:]):
        assert older.native_streams <= newer.native_streams
        assert older.reduction_route <= newer.reduction_route
        assert older.max_extent <= newer.max_extent
        assert older.max_kernel_width <= newer.max_kernel_width
        assert older.min_ios <= newer.min_ios


@pytest.mark.parametrize("family", [0, 6, "2", None, True, 2.0])
def test_an_unknown_family_raises(family):
    with pytest.raises(OptionError, match="unknown capability family"):
        capability(family)


def test_a_broken_record_is_an_install_error():
    data = json.loads(resources.files("aneforge.data").joinpath("families.json").read_text())
    broken = json.loads(json.dumps(data))
    del broken["families"][2]["max_extent"]
    with pytest.raises(BundledDataError, match=r"missing fields \['max_extent'\]"):
        capability_module._build(broken)
    broken = json.loads(json.dumps(data))
    broken["families"][0]["reduction_route"] = 192
    with pytest.raises(BundledDataError, match="no MIL path"):
        capability_module._build(broken)
    broken = json.loads(json.dumps(data))
    broken["families"][1]["max_extent"] = "16384"
    with pytest.raises(BundledDataError, match="max_extent is '16384'"):
        capability_module._build(broken)
    broken = json.loads(json.dumps(data))
    del broken["fields"]["min_ios"]
    with pytest.raises(BundledDataError, match="no source"):
        capability_module._build(broken)


# ---- the records match the documents -------------------------------------------------------


def _cell(c: Capability, name: str) -> str:
    value = getattr(c, name)
    if name == "crop_dma_limit" and value is None and c.has_mil:
        return "clean"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, frozenset):
        return ", ".join(sorted(value)) or "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_docs_capability_table_matches_the_records():
    rows = doc_table("targets.md", "| family | tier | MIL | reduction route |")
    columns = ("family", "tier", "has_mil", "reduction_route", "crop_dma_limit")
    columns += ("matmul_limit", "max_channels", "max_extent", "max_kernel_width")
    columns += ("native_streams", "min_ios")
    assert rows == [[_cell(c, name) for name in columns] for c in capabilities()]


def test_the_numerics_table_matches_the_records():
    rows = doc_table("numerics.md", "| family (tier) | examples | reduction route |")
    assert len(rows) == 5
    for row, c in zip(rows, capabilities()):
        assert row[0] == f"{c.family} ({c.tier})"
        assert _number(row[2]) == c.reduction_route
        assert _number(row[3]) == (None if c.crop_dma_limit is None else int(c.crop_dma_limit))
        assert (row[3] == "clean") == (c.has_mil and c.crop_dma_limit is None)
        assert _number(row[4]) == (None if c.matmul_limit is None else int(c.matmul_limit))
    # The stated derivations: fp16's maximum over the Q.4 scale, the largest fp16 < 2^15.
    assert capability(2).crop_dma_limit == FP16_MAX / 16
    below = np.nextafter(np.float16(2**15), np.float16(0))
    assert {c.matmul_limit for c in MIL} == {float(below)}


def test_the_compression_table_matches_the_records():
    rows = doc_table("compression.md", "| family | tier | streams natively |")
    assert [(int(r[0]), r[1]) for r in rows] == [(c.family, c.tier) for c in capabilities()]
    for row, c in zip(rows, capabilities()):
        names = set(re.findall(r"int4|int8|sparse", row[2]))
        assert names == c.native_streams, c.family


def test_the_export_table_matches_the_records():
    rows = doc_table("export.md", "| family | engines (examples) | deployment target |")
    by_family = {int(r[0]): r[2] for r in rows if r[0].isdigit()}
    assert sorted(by_family) == [c.family for c in capabilities()]
    for c in capabilities():
        cell = by_family[c.family]
        if not c.has_mil:
            assert cell.startswith("refused")
            continue
        assert cell == f"iOS {c.min_ios} / macOS {c.min_ios - 3}"


# ---- every consumer acts on the records ----------------------------------------------------


@pytest.mark.parametrize("c", MIL, ids=lambda c: c.tier)
def test_the_emulator_numerics_are_the_records(c):
    chip = chip_numerics(c.representative)
    assert (chip.family, chip.tier, chip.route) == (c.family, c.tier, c.reduction_route)
    assert (chip.crop_dma_limit, chip.matmul_limit) == (c.crop_dma_limit, c.matmul_limit)


def test_family_one_has_no_numerics_and_no_export():
    (f1,) = [c for c in capabilities() if not c.has_mil]
    with pytest.raises(PreflightError, match=", ".join(f1.members)):
        chip_numerics(f1.representative)
    report = preflight(af.input((4,)).relu(), f1.representative)
    assert [v.check for v in report.violations] == ["no_mil"]
    assert ", ".join(f1.members) in report.violations[0].message


@pytest.mark.parametrize("c", MIL, ids=lambda c: c.tier)
def test_the_preflight_limits_are_the_records(c):
    arch = c.representative
    inside = af.input((1, 2, 2, c.max_extent))
    assert preflight(inside.relu(), arch).ok
    over = preflight(af.input((1, 2, 2, c.max_extent + 1)).relu(), arch)
    assert {(v.check, v.limit) for v in over.violations} == {("spatial", c.max_extent)}
    chans = preflight(af.input((1, c.max_channels + 1, 1, 1)).relu(), arch)
    assert {(v.check, v.limit) for v in chans.violations} == {("channels", c.max_channels)}
    x = af.input((1, 1, 4, 32))
    kw = c.max_kernel_width
    ok = af.conv(x, np.ones((1, 1, 1, kw), np.float16))
    wide = af.conv(x, np.ones((1, 1, 1, kw + 1), np.float16))
    assert "kernel_width" not in {v.check for v in preflight(ok, arch).violations}
    found = {(v.check, v.limit) for v in preflight(wide, arch).violations}
    assert ("kernel_width", kw) in found


@pytest.mark.parametrize("c", capabilities(), ids=lambda c: c.tier)
def test_compression_and_export_read_the_records(c):
    assert native_streams(c.family) == c.native_streams
    prog = af.compile(af.input((2, 3)).relu(), opt=0)
    if c.has_mil:
        ios, reasons, _, _ = _choose_target(prog, c.representative, None, None)
        assert ios == c.min_ios and f"family {c.family}" in reasons[0]
    else:
        with pytest.raises(af.io.coreml_export.ExportError, match="no ML Program path"):
            _choose_target(prog, c.representative, None, None)
