"""What each capability family can do: one record per family, read from one data file.

``data/families.json`` holds one record per family (1..5) and, under ``fields``, the
meaning and the source of every field (docs/targets.md, "What each family can do",
tabulates them). It is read once into frozen :class:`Capability` records; every module that
needs a family fact (the target table, the emulator's per-chip numerics, the preflight,
the weight compression, the Core ML exporter) asks :func:`capability` or
``Target.capability`` and types no number of its own. A field that has no meaning
without a MIL path (every limit, the reduction route, the deployment target) is
``None`` on family 1.

Example:
    >>> from aneforge.targets.capability import capability
    >>> m1 = capability(2)
    >>> m1.tier, m1.reduction_route, m1.crop_dma_limit, m1.max_extent, m1.min_ios
    ('A13', 192, 4094.0, 16384, 15)
    >>> sorted(m1.native_streams), capability(1).has_mil
    (['int4', 'sparse'], False)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from numbers import Integral

from ..data import SCHEMAS, load
from ..errors import BundledDataError, OptionError

FILE = "families.json"


@dataclass(frozen=True)
class Capability:
    """The capabilities of one engine family (``data/families.json`` gives each field's
    source).

    Attributes:
        family: the capability family, 1..5.
        tier: its tier label ('no MIL', 'A13', 'A14', 'A15', 'A16').
        members: its architectures, in the order :func:`aneforge.targets` lists them.
        representative: the die whose curve a member without one of its own uses.
        has_mil: whether ML programs compile for it (family 1: no).
        reduction_route: narrow fp16 sums over more terms than this take the split route.
        crop_dma_limit: width-offset slices saturate ``|v| >`` this (None: clean route).
        matmul_limit: contraction outputs saturate ``|y| >`` this.
        max_channels: the channel-axis limit.
        max_extent: the spatial and contraction-length limit.
        max_kernel_width: the conv kernel-width limit.
        native_streams: the weight encodings its kernel DMA streams natively.
        min_ios: the iOS version a Core ML export deploys to by default (macOS = iOS - 3).
    """

    family: int
    tier: str
    members: tuple[str, ...]
    representative: str
    has_mil: bool
    reduction_route: int | None
    crop_dma_limit: float | None
    matmul_limit: float | None
    max_channels: int | None
    max_extent: int | None
    max_kernel_width: int | None
    native_streams: frozenset[str]
    min_ios: int | None


#: The fields a family without a MIL path leaves ``None`` (crop_dma_limit may be None on
#: any family: the clean route).
MIL_ONLY = (
    "reduction_route",
    "matmul_limit",
    "max_channels",
    "max_extent",
    "max_kernel_width",
    "min_ios",
)
_TYPES = {
    "family": int,
    "tier": str,
    "representative": str,
    "has_mil": bool,
    "reduction_route": int,
    "crop_dma_limit": float,
    "matmul_limit": float,
    "max_channels": int,
    "max_extent": int,
    "max_kernel_width": int,
    "min_ios": int,
}


def _bad(what: str) -> BundledDataError:
    return BundledDataError(
        f"aneforge's bundled data file {FILE} {what}: the installation is broken; "
        f"reinstall aneforge (the file is {SCHEMAS[FILE].origin})"
    )


def _record(raw) -> Capability:
    """One checked :class:`Capability` from one record of the file."""
    names = [f.name for f in fields(Capability)]
    where = f"family record {dict(raw).get('family', '?')}"
    if set(raw) != set(names):
        missing, extra = sorted(set(names) - set(raw)), sorted(set(raw) - set(names))
        raise _bad(f"has a {where} with missing fields {missing} / unknown fields {extra}")
    for name, kind in _TYPES.items():
        value = raw[name]
        nullable = name == "crop_dma_limit" or (name in MIL_ONLY and not raw["has_mil"])
        if value is None and nullable:
            continue
        kinds = (int, float) if kind is float else kind
        if not isinstance(value, kinds) or (kind is not bool and isinstance(value, bool)):
            raise _bad(f"has a {where} whose {name} is {value!r}, not a {kind.__name__}")
    if not raw["has_mil"] and any(raw[n] is not None for n in (*MIL_ONLY, "crop_dma_limit")):
        raise _bad(f"gives {where}, which has no MIL path, a MIL limit")
    for name in ("members", "native_streams"):
        if not all(isinstance(v, str) for v in raw[name]) or isinstance(raw[name], str):
            raise _bad(f"has a {where} whose {name} is not a list of names")
    if raw["representative"] not in raw["members"]:
        raise _bad(f"names a {where} representative outside its members")
    return Capability(
        family=raw["family"],
        tier=raw["tier"],
        members=tuple(raw["members"]),
        representative=raw["representative"],
        has_mil=raw["has_mil"],
        reduction_route=raw["reduction_route"],
        crop_dma_limit=None if raw["crop_dma_limit"] is None else float(raw["crop_dma_limit"]),
        matmul_limit=None if raw["matmul_limit"] is None else float(raw["matmul_limit"]),
        max_channels=raw["max_channels"],
        max_extent=raw["max_extent"],
        max_kernel_width=raw["max_kernel_width"],
        native_streams=frozenset(raw["native_streams"]),
        min_ios=raw["min_ios"],
    )


def _build(data) -> dict[int, Capability]:
    """``{family: Capability}`` from the file's contents, checked whole."""
    records = [_record(r) for r in data["families"]]
    table = {c.family: c for c in records}
    if list(table) != list(range(1, len(records) + 1)):
        raise _bad(f"lists the families {[c.family for c in records]}, not 1..n in order")
    archs = [a for c in records for a in c.members]
    if len(set(archs)) != len(archs):
        raise _bad("puts an architecture in two families")
    undocumented = [f.name for f in fields(Capability) if f.name not in data["fields"]]
    if undocumented:
        raise _bad(f"gives no source for the field(s) {undocumented}")
    return table


_TABLE = _build(load(FILE))

#: Every family number, ascending.
FAMILY_NUMBERS: tuple[int, ...] = tuple(_TABLE)


def capability(family: int) -> Capability:
    """The :class:`Capability` of capability family ``family`` (1..5).

    An unknown family raises :class:`~aneforge.errors.OptionError`.

    Example:
        >>> capability(5).max_kernel_width, capability(4).crop_dma_limit is None
        (15, True)
    """
    if isinstance(family, Integral) and not isinstance(family, bool) and family in _TABLE:
        return _TABLE[int(family)]
    raise OptionError(
        f"unknown capability family {family!r}; families are "
        f"{FAMILY_NUMBERS[0]}..{FAMILY_NUMBERS[-1]} (af.targets() lists them)"
    )


def capabilities() -> tuple[Capability, ...]:
    """Every family's :class:`Capability`, family 1 first.

    Example:
        >>> [c.tier for c in capabilities()]
        ['no MIL', 'A13', 'A14', 'A15', 'A16']
    """
    return tuple(_TABLE.values())


def field_source(name: str) -> str:
    """Where the numbers of :class:`Capability` field ``name`` come from.

    Example:
        >>> "Numerics" in field_source("reduction_route")
        True
    """
    return load(FILE)["fields"][name]["source"]
