"""Marketing names resolve to architectures; af.targets(); docs/targets.md agrees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aneforge.errors import OptionError
from aneforge.targets import FAMILIES, all_targets, get_target, resolve_target, targets
from aneforge.targets.names import EVIDENCE, MARKETING, UNMAPPED
from aneforge.targets.table import FAMILY_REPRESENTATIVE, FAMILY_TIER

DOC = Path(__file__).resolve().parents[2] / "docs" / "targets.md"
ALL_ARCHS = [a for members in FAMILIES.values() for a in members]


def doc_table(header: str) -> list[list[str]]:
    """The body rows of the markdown table in docs/targets.md whose header is ``header``."""
    lines = DOC.read_text().splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def doc_bullets(heading_before: str) -> dict[str, str]:
    """The "- `key`: text" bullets that follow the line ``heading_before``."""
    lines = DOC.read_text().splitlines()
    start = lines.index(heading_before)
    out = {}
    for line in lines[start + 2 :]:
        m = re.match(r"- `([^`]+)`: (.*)", line)
        if not m:
            break
        out[m.group(1)] = m.group(2)
    return out


@pytest.mark.parametrize(
    ("name", "arch"),
    [
        ("M1", "h13"),
        ("m1", "h13"),
        ("  M1 ", "h13"),
        ("M4 Max", "h16s"),
        ("m4 max", "h16s"),
        ("M4-Max", "h16s"),
        ("m4max", "h16s"),
        ("M4  MAX", "h16s"),
        ("M3 Ultra", "h15c"),
        ("m3_ultra", "h15c"),
        ("A17 Pro", "h16"),
        ("a17pro", "h16"),
        ("Apple M2", "h14"),
        ("M2 Pro", "h14"),
        ("A14 Bionic", "h13"),
        ("a14", "h13"),
        ("M5 Pro", "h17s"),
        ("M5", "h17s"),
        ("M1 Max", "h13"),
        ("A19 Pro", "h18"),
    ],
)
def test_marketing_names_resolve_whatever_the_case_and_spacing(name, arch):
    assert resolve_target(name).arch == arch


@pytest.mark.parametrize("arch", ALL_ARCHS)
def test_every_architecture_resolves_to_itself(arch):
    assert resolve_target(arch) == get_target(arch)
    assert resolve_target(arch.upper()).arch == arch


def test_a_target_passes_through():
    t = get_target("h15c")
    assert resolve_target(t) is t


def test_every_marketing_row_resolves_to_its_architecture():
    for row in MARKETING:
        assert row.arch in ALL_ARCHS, row
        assert resolve_target(row.name).arch == row.arch, row
        assert row.basis in EVIDENCE, row
        assert row.evidence.startswith(EVIDENCE[row.basis]), row
        assert row.note in row.evidence, row


def test_only_the_spec_anchors_are_not_doubtful():
    sure = {row.name: row.arch for row in MARKETING if not row.doubtful}
    assert sure == {"M1": "h13", "M2 Pro": "h14", "M5 Pro": "h17s"}
    assert all(row.basis == "spec" for row in MARKETING if not row.doubtful)


def test_names_are_unique_and_never_shadow_an_architecture():
    keys = [re.sub(r"[\s\-_]+", "", row.name.lower()).replace("bionic", "") for row in MARKETING]
    assert len(set(keys)) == len(keys)
    assert not set(keys) & set(ALL_ARCHS)


def test_generations_follow_the_ladder():
    # M(n) -> generation H(n + 12); a wrong family here changes what compiles.
    for row in MARKETING:
        m = re.fullmatch(r"M(\d)( .*)?", row.name)
        if m:
            assert row.arch.startswith(f"h{int(m.group(1)) + 12}"), row
    assert get_target(resolve_target("M3").arch).family == 4
    assert resolve_target("A12 Bionic").has_mil is False
    assert resolve_target("A14 Bionic").family == resolve_target("M1").family


@pytest.mark.parametrize("name", ["M4 Maxx", "m4 mx", "M3 Ultre"])
def test_an_unknown_name_lists_close_matches(name):
    with pytest.raises(OptionError) as info:
        resolve_target(name)
    msg = str(info.value)
    assert repr(name) in msg
    assert "af.targets()" in msg
    close = re.search(r"Close matches: (.*?)\. ", msg).group(1)
    assert "'M4 Max'" in close or "'M3 Ultra'" in close


def test_an_unknown_name_with_nothing_close_says_so():
    with pytest.raises(OptionError, match="Close matches: none"):
        resolve_target("zzzzzz")
    with pytest.raises(ValueError):  # OptionError is also a ValueError
        resolve_target("M7")


@pytest.mark.parametrize("bad", ["", "   ", None, 13])
def test_a_non_name_raises_option_error(bad):
    with pytest.raises(OptionError, match="af.targets"):
        resolve_target(bad)


def test_targets_lists_every_architecture_with_its_names():
    rows = targets()
    assert [r.arch for r in rows] == [t.arch for t in all_targets()] == ALL_ARCHS
    assert len(rows) == 25
    for r in rows:
        t = get_target(r.arch)
        assert (r.family, r.tier, r.curve_from, r.cores) == (
            t.family,
            t.tier,
            t.curve_from,
            t.cores,
        )
        mine = [m for m in MARKETING if m.arch == r.arch]
        assert r.names == tuple(m.name for m in mine)
        assert r.doubtful == all(m.doubtful for m in mine)
        assert (r.arch in UNMAPPED) == (not r.names), r.arch
    assert {r.arch for r in rows if not r.doubtful} == {"h13", "h14", "h17s"}


def test_the_docs_family_table_matches_the_families():
    rows = doc_table("| family | tier | architectures | representative die |")
    want = [
        [str(f), FAMILY_TIER[f], ", ".join(m), FAMILY_REPRESENTATIVE[f]]
        for f, m in FAMILIES.items()
    ]
    assert rows == want


def test_the_docs_curve_table_matches_the_data():
    rows = doc_table(
        "| arch | family | tier | cores | fmax (GHz) | operating (GHz) | effective (GHz) "
        "| curve from |"
    )
    want = [
        [
            t.arch,
            str(t.family),
            t.tier,
            str(t.cores),
            f"{t.fmax_hz / 1e9:.3f}",
            f"{t.clock_hz / 1e9:.3f}",
            f"{t.eff_clock_hz / 1e9:.3f}",
            t.curve_from,
        ]
        for t in all_targets()
    ]
    assert rows == want


def test_the_docs_mapping_table_matches_the_data():
    rows = doc_table("| name | arch | family | doubtful | basis | note |")
    want = [
        [
            m.name,
            m.arch,
            str(get_target(m.arch).family),
            "yes" if m.doubtful else "no",
            m.basis,
            m.note,
        ]
        for m in MARKETING
    ]
    assert rows == want
    assert doc_bullets("The bases:") == EVIDENCE
    assert doc_bullets("Architectures with no marketing name, and why:") == UNMAPPED
