"""The engine targets: 25 architectures in five capability families, with their curves.

Families (docs/targets.md, "Capability families"): F1 has no MIL path; F2 is the A13
tier (M1), F3 the A14 tier, F4 the A15 tier, F5 the A16 tier. Each family's members,
tier and capabilities are one record of ``data/families.json`` (:mod:`.capability`);
:data:`FAMILIES`, :data:`FAMILY_TIER` and :data:`FAMILY_REPRESENTATIVE` are views of it.
Each architecture carries its hardware curve (cores, operating clock 0.8 * fmax,
effective clock) from ``data/chip_curves.json``; an architecture without its own curve
folds to the die of its generation, else to its family's representative die, and says so
(``curve_from``).

Example:
    >>> from aneforge.targets.table import get_target
    >>> t = get_target("h14g")
    >>> t.family, t.curve_from, t.capability.max_kernel_width
    (3, 'h14', 13)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ..data import load
from .capability import Capability, capabilities, capability

#: family -> its architectures (views of data/families.json).
FAMILIES: dict[int, tuple[str, ...]] = {c.family: c.members for c in capabilities()}
#: family -> its tier label.
FAMILY_TIER: dict[int, str] = {c.family: c.tier for c in capabilities()}
#: family -> the die whose curve stands for a family member that has none of its own.
FAMILY_REPRESENTATIVE: dict[int, str] = {c.family: c.representative for c in capabilities()}


@dataclass(frozen=True)
class Target:
    """One engine architecture and the hardware figures the cost model scales by."""

    arch: str
    family: int
    cores: int
    fmax_hz: float
    clock_hz: float  # operating clock, 0.8 * fmax
    eff_clock_hz: float  # the engine's effective clock at that operating point
    curve_from: str  # the architecture whose measured curve these figures are
    mult: int = 1  # the curve's multiplier field (2 on h15c only)
    chip: str | None = None  # the chip named, when resolved from a chip name
    memory_bytes_per_us: float | None = None  # that chip's unified-memory bandwidth

    @property
    def units(self) -> float:
        """The cost model's parallel units: ``cores / mult``. The curves' one ``mult`` of 2
        (h15c, 32 cores) reads as two 16-unit halves, which is what published M3 Pro and
        M3 Ultra timings show (docs/targets.md); every other curve has ``mult`` 1."""
        return self.cores / self.mult

    @property
    def capability(self) -> Capability:
        """What the architecture's family can do (:func:`.capability.capability`)."""
        return capability(self.family)

    @property
    def tier(self) -> str:
        """The capability tier label of the family ('A13', 'A16', ...)."""
        return self.capability.tier

    @property
    def has_mil(self) -> bool:
        """Whether the architecture compiles ML programs at all (F1 does not)."""
        return self.capability.has_mil


def _curves():
    return load("chip_curves.json")["chips"]


def _curve_source(arch: str, family: int) -> str:
    curves = _curves()
    if arch in curves:
        return arch
    generation = arch[:3]  # "h17a" -> "h17"
    if generation in curves and generation in FAMILIES[family]:
        return generation
    return FAMILY_REPRESENTATIVE[family]


@cache
def get_target(arch: str) -> Target:
    """The :class:`Target` of an architecture name (``'h13'``, ``'h17s'``, ...)."""
    key = arch.lower()
    for family, members in FAMILIES.items():
        if key in members:
            src = _curve_source(key, family)
            c = _curves()[src]
            return Target(
                key,
                family,
                c["cores"],
                c["fmax_hz"],
                c["clock_hz"],
                c["eff_clock_hz"],
                src,
                c.get("mult", 1),
            )
    raise KeyError(arch)


def all_targets() -> list[Target]:
    """Every architecture, family by family."""
    return [get_target(a) for members in FAMILIES.values() for a in members]
