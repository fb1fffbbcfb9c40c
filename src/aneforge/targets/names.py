"""Marketing names (M1, M4 Max, A17 Pro, ...) resolved to engine architectures.

:data:`MARKETING` is the mapping table, as data: one row per chip name, with the
architecture it is modelled as, the evidence for that choice and a ``doubtful`` flag.
Only the rows the specification's silicon anchors back (docs/targets.md, "Anchors and
provenance": M1 = h13, M2 Pro = h14, the
M5 Pro host = h17s) are not doubtful; every other row is a best-evidenced inference,
argued in its ``evidence`` text and in ``docs/targets.md``.

:func:`resolve_target` accepts an architecture (``'h13'``, ``'H17s'``) or a marketing
name (``'M1'``, ``'m4 max'``, ``'A17-Pro'``), case-, space- and hyphen-insensitive;
:func:`targets` lists every architecture with its names.

Example:
    >>> from aneforge.targets.names import resolve_target
    >>> resolve_target("m4 max").arch, resolve_target("H17s").arch
    ('h16s', 'h17s')
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from typing import NamedTuple

from ..errors import OptionError
from .memory import memory_bandwidth
from .table import FAMILIES, Target, all_targets, get_target


class MarketingName(NamedTuple):
    """One row of the mapping table: a chip name and the architecture it resolves to."""

    name: str  # as Apple writes it
    arch: str
    doubtful: bool  # True unless a silicon anchor backs the row
    basis: str  # a key of EVIDENCE: the argument the row rests on
    note: str = ""  # what is particular to this row

    @property
    def evidence(self) -> str:
        """The full evidence text: the basis, then the row's own note."""
        return f"{EVIDENCE[self.basis]} {self.note}".strip()


class TargetRow(NamedTuple):
    """One architecture as :func:`targets` lists it."""

    arch: str
    family: int
    tier: str
    names: tuple[str, ...]  # marketing names resolving to this architecture
    curve_from: str  # the architecture whose curve it uses (itself, or the one it folds to)
    doubtful: bool  # True when no name on the row is backed by the spec
    cores: int


# The arguments a mapping row rests on (MarketingName.basis).
EVIDENCE: dict[str, str] = {
    "spec": "The optimizer and the cost model (docs/sources.md), 'Silicon anchors':",
    "m-ladder": (
        "Generation ladder: the M(n) engine is generation H(n+12). M1 = h13 and the M5 "
        "(Pro) = h17s are measured (silicon anchors); M2 = h14 by the h14_ane_fw firmware the "
        "Asahi Linux ANE notes list for the M2 (T8112)."
    ),
    "a-ladder": (
        "A-series ladder hN = A(N+1): Apple rates the A14's and M1's engines alike (16 "
        "cores, 11 TOPS) and the A15's as the M2's (15.8 TOPS); the AppleH11ANE driver "
        "arrived with the A12, the first Core ML-usable engine; one generation a year."
    ),
    "t600x": (
        "M1 Pro/Max/Ultra (T6000/1/2) share one ANE board type (96, Asahi Linux ANE "
        "notes); ANEForge's reverse engineering reads Apple's boardType->arch ladder as "
        "h13g, validated live on an M1 Max. Caveat: h13g's 8-core curve projects 2x an "
        "M1, while Apple rates the M1 Pro/Max engine at the M1's 11 TOPS (Ultra 22) and "
        "ANEMLL-bench measures all three at ~1x an M1."
    ),
    "m2-big": (
        "The spec puts the M2 Pro on the bare h14; Apple rates the M2 Pro/Max engine at "
        "the M2's 15.8 TOPS and ANEMLL-bench measures M2 Max and Ultra at ~1.1x an M1, "
        "close to an M2. h14g/h14c have no curve of their own and fold to h14 anyway."
    ),
    "same-engine": (
        "Apple gives the Pro and Max chips of a generation the base chip's 16-core engine and"
        " TOPS rating, so they are modelled on the base chip's architecture; the die ladder "
        "would put them on a larger rung whose curve projects several times the base chip's "
        "speed, which the published ratings do not show."
    ),
    "measured-m3": (
        "Published timings put the M3 Pro and M3 Ultra with the M4 family: deep 1x1-conv "
        "chains peak at 10.0 TFLOP/s on an M3 Pro against 10.9-12.6 on M4 Pro and Max, and "
        "the M3 Ultra's chain sweep runs within 1.5x of the M4 Max's "
        "(data/silicon_published.csv). Generation 15's Mac-class curve is h15c: 32 cores "
        "with the curves' only multiplier of 2, read as two 16-unit halves, so it models "
        "like the 16-unit h16s. With the fitted model their 12 rows score a geometric-mean "
        "error of 1.46x on h15c and 2.36x on the 4-core h15."
    ),
    "measured-m4": (
        "Published timings put the M4 family with the M5, not with a 4-core rung: in the "
        "same GEMM sweeps an M4 Max runs 2048^3 in 1.94 ms and 4096^3 in 20.6 ms, an M5 in "
        "1.99 and 19.0 ms; deep 1x1-conv chains peak at 10.9-12.6 TFLOP/s on the M4 Pro "
        "and Max and 12.2-12.4 on the M5 (data/silicon_published.csv). h16s carries "
        "h17s's curve (16 cores, 2.364 GHz). With the fitted model their 68 rows score a "
        "geometric-mean error of 1.31x on h16s and 2.76x on the 4-core h16."
    ),
    "suffix": (
        "Suffix ladder of the compiler targets (cores: bare 4, g 8, s 16, c 32, d 64); "
        "with the M5 Pro measured as s, c is read as the Max die and d as the two-die "
        "Ultra."
    ),
}

_A12 = "The A12's engine (hollance/neural-engine)."
_H18 = "h18 has no curve of its own: it folds to h17s, which overstates a phone."
_M5 = (
    "The spec calls its h17s anchor 'M5', but the silicon behind it is an M5 Pro. Apple "
    "gives M5 and M5 Pro the same 16-core engine, and published GEMM sweeps of a base M5 "
    "run within 1.2x of the M5 Pro's (data/silicon_published.csv), so the base M5 shares "
    "h17s."
)

MARKETING: tuple[MarketingName, ...] = (
    # -- A-series (iPhone, iPad) -------------------------------------------------------
    MarketingName("A12 Bionic", "h11", True, "a-ladder"),
    MarketingName("A12X Bionic", "h11", True, "a-ladder", _A12),
    MarketingName("A12Z Bionic", "h11", True, "a-ladder", _A12),
    MarketingName("A13 Bionic", "h12", True, "a-ladder"),
    MarketingName("A14 Bionic", "h13", True, "a-ladder", "Apple: 11 TOPS, as the M1."),
    MarketingName("A15 Bionic", "h14", True, "a-ladder", "Apple: 15.8 TOPS, as the M2."),
    MarketingName("A16 Bionic", "h15", True, "a-ladder", "Apple: 17 TOPS vs the M3's 18."),
    MarketingName("A17 Pro", "h16", True, "a-ladder", "Apple: 35 TOPS vs the M4's 38."),
    MarketingName("A18", "h17", True, "a-ladder"),
    MarketingName("A18 Pro", "h17", True, "a-ladder"),
    MarketingName("A19", "h18", True, "a-ladder", _H18),
    MarketingName("A19 Pro", "h18", True, "a-ladder", _H18),
    # -- M1 (H13) ------------------------------------------------------------------------
    MarketingName("M1", "h13", False, "spec", "A13/h13 (M1), the measured M1 anchor."),
    MarketingName("M1 Pro", "h13", True, "same-engine", "The ladder reads h13g (t600x)."),
    MarketingName("M1 Max", "h13", True, "same-engine", "The ladder reads h13g (t600x)."),
    MarketingName("M1 Ultra", "h13g", True, "t600x"),
    # -- M2 (H14) ------------------------------------------------------------------------
    MarketingName("M2", "h14", True, "m-ladder"),
    MarketingName("M2 Pro", "h14", False, "spec", "A14/h14 (M2 Pro), the measured anchor."),
    MarketingName("M2 Max", "h14", True, "m2-big"),
    MarketingName("M2 Ultra", "h14", True, "m2-big"),
    # -- M3 (H15) ------------------------------------------------------------------------
    MarketingName("M3", "h15c", True, "measured-m3", "Apple: 18 TOPS, as the M3 Pro."),
    MarketingName("M3 Pro", "h15c", True, "measured-m3", "Apple: 18 TOPS, as the M3."),
    MarketingName("M3 Max", "h15c", True, "measured-m3", "The suffix ladder reads h15c too."),
    MarketingName(
        "M3 Ultra",
        "h15c",
        True,
        "measured-m3",
        "Two M3 Max dies; its published timings match one M4 Max, so one die's rung.",
    ),
    # -- M4 (H16) ------------------------------------------------------------------------
    MarketingName("M4", "h16s", True, "measured-m4", "Its own sweep runs 1.3-1.8x the M4 Max."),
    MarketingName("M4 Pro", "h16s", True, "measured-m4", "Apple: 38 TOPS, as the M4."),
    MarketingName("M4 Max", "h16s", True, "measured-m4", "Apple: 38 TOPS, as the M4."),
    # -- M5 (H17) ------------------------------------------------------------------------
    MarketingName("M5", "h17s", True, "spec", _M5),
    MarketingName(
        "M5 Pro",
        "h17s",
        False,
        "spec",
        "A16/h17s (M5), measured on a host named 'M5 Pro' (ane_cost_model.json _meta).",
    ),
    MarketingName("M5 Max", "h17s", True, "same-engine", "As the measured M5 Pro."),
    MarketingName(
        "M5 Ultra",
        "h17c",
        True,
        "suffix",
        "Two Max dies: h17c has 2x h17s's cores; whether an M5 Ultra ships is beyond "
        "this evidence.",
    ),
)

# Why an architecture has no marketing name.
UNMAPPED: dict[str, str] = {
    "m9": "A no-MIL engine outside the H ladder; no product evidenced.",
    "t0": "A no-MIL engine outside the H ladder; no product evidenced.",
    "t1": (
        "A 16-core rung at the M1 clock (1.428 GHz); no product evidenced (the four-"
        "instance M1 Ultra layout would fit the core count, but its dies are h13g)."
    ),
    "h14g": "A rung of generation 14 with no curve of its own; no product evidenced.",
    "h14c": "A rung of generation 14 with no curve of its own; no product evidenced.",
    "m11": (
        "A 1-core, 0.5 GHz efficiency engine (A16 ops, A13-sized dims); plausibly a "
        "wearable or accessory SoC, but no product evidenced."
    ),
    "h15g": "A rung of generation 15 with no curve of its own; no product evidenced.",
    "h16c": "A rung of generation 16 with no curve of its own; no product evidenced.",
    "h16g": "A rung of generation 16 with no curve of its own; no product evidenced.",
    "h17a": "The 'a' suffix is not deciphered; no product evidenced.",
    "h17d": "A 64-core rung (two h17c dies); no product evidenced.",
    "h17g": (
        "Possibly the base M5 die (see the 'M5' row), which is kept on the spec's h17s "
        "anchor instead; no product evidenced."
    ),
}


def chip_key(name: str) -> str:
    """The lookup key of a name: lower case, no spaces, hyphens, 'apple' or 'bionic'."""
    key = re.sub(r"[\s\-_]+", "", name.lower())
    key = key.removeprefix("apple")
    return key.replace("bionic", "")


def _index() -> dict[str, tuple[str, str]]:
    """key -> (display name, arch) for every architecture and marketing name."""
    index = {a: (a, a) for members in FAMILIES.values() for a in members}
    for row in MARKETING:
        index[chip_key(row.name)] = (row.name, row.arch)
    return index


_INDEX = _index()


def resolve_target(name: str | Target) -> Target:
    """The :class:`Target` of an architecture or marketing name.

    Case, spaces, hyphens and underscores are ignored, as are a leading 'Apple' and the
    word 'Bionic' ('Apple M4 Max', 'm4-max', 'A14 Bionic' and 'a14' all resolve). A
    :class:`Target` is returned unchanged. An unknown name raises
    :class:`~aneforge.errors.OptionError` listing the close matches.

    Example:
        >>> resolve_target("M1").arch, resolve_target("a17 pro").family
        ('h13', 5)
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str) or not name.strip():
        raise OptionError(
            f"target must be an architecture or chip name string such as 'h13' or 'M1', "
            f"got {name!r}; af.targets() lists them."
        )
    hit = _INDEX.get(chip_key(name))
    if hit is not None:
        shown, arch = hit
        if shown == arch:  # an architecture: no memory system of its own
            return get_target(arch)
        return replace(get_target(arch), chip=shown, memory_bytes_per_us=memory_bandwidth(shown))
    close = difflib.get_close_matches(chip_key(name), list(_INDEX), n=5, cutoff=0.6)
    shown = ", ".join(repr(_INDEX[k][0]) for k in close) or "none"
    raise OptionError(
        f"unknown target {name!r}: not an engine architecture or chip name aneforge "
        f"knows. Close matches: {shown}. af.targets() lists every architecture with "
        f"its marketing names."
    )


def targets() -> list[TargetRow]:
    """Every architecture (25, family by family) with its marketing names and curve.

    Example:
        >>> rows = targets()
        >>> len(rows), rows[4].arch, rows[4].names[0], rows[4].doubtful
        (25, 'h13', 'A14 Bionic', False)
    """
    rows = []
    for t in all_targets():
        mine = [m for m in MARKETING if m.arch == t.arch]
        rows.append(
            TargetRow(
                arch=t.arch,
                family=t.family,
                tier=t.tier,
                names=tuple(m.name for m in mine),
                curve_from=t.curve_from,
                doubtful=all(m.doubtful for m in mine),
                cores=t.cores,
            )
        )
    return rows


def tier_chips(family: int) -> str:
    """The chips of capability family ``family`` (one tier) in words, M series first.

    Each chip generation is named once, by its shortest marketing name (M1 for M1 Pro,
    Max and Ultra; A12 Bionic for A12X and A12Z); a family without a named chip says so.

    Example:
        >>> tier_chips(2), tier_chips(5)
        ('M1 / A14 Bionic generation', 'M4, M5 / A17 Pro, A18, A19 generations')
    """
    if family not in FAMILIES:
        raise OptionError(f"tier_chips: family must be one of {sorted(FAMILIES)}, got {family!r}")
    generations: dict[str, str] = {}  # 'M1' / 'A14' -> shortest name of that generation
    for row in MARKETING:
        if row.arch not in FAMILIES[family]:
            continue
        gen = re.match(r"[AM]\d+", row.name).group(0)
        if gen not in generations or len(row.name) < len(generations[gen]):
            generations[gen] = row.name
    if not generations:
        return "no named chip"
    m_names = [n for g, n in generations.items() if g.startswith("M")]
    a_names = [n for g, n in generations.items() if g.startswith("A")]
    words = " / ".join(", ".join(names) for names in (m_names, a_names) if names)
    plural = max(len(m_names), len(a_names)) > 1  # an M and an A chip share a generation
    return f"{words} generation{'s' if plural else ''}"
