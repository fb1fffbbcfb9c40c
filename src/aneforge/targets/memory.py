"""Each chip's unified-memory bandwidth, the ceiling under every DMA stream of its engine.

``data/chip_memory.csv`` holds the bandwidth Apple states for each chip (one row a chip,
with its source); an engine architecture alone has no memory system, so only a chip
name carries one (:func:`aneforge.targets.names.resolve_target` attaches it).

Example:
    >>> from aneforge.targets.memory import memory_bandwidth
    >>> memory_bandwidth("M4 Max") > memory_bandwidth("M4")
    True
    >>> memory_bandwidth("h16s") is None
    True
"""

from __future__ import annotations

import csv
import io
from functools import lru_cache

from ..data import text

FILE = "chip_memory.csv"


def _key(name: str) -> str:
    return name.lower().replace(" ", "").replace("-", "").removeprefix("apple")


@lru_cache(maxsize=1)
def _table() -> dict[str, float]:
    table = {}
    for row in csv.DictReader(io.StringIO(text(FILE))):
        gb_s = float(row["memory_bandwidth_gb_s"])
        if not gb_s > 0:
            raise ValueError(f"{FILE}: {row['chip']}: bandwidth must be positive, got {gb_s}")
        table[_key(row["chip"]).replace("bionic", "")] = gb_s * 1e3  # GB/s -> bytes/us
    return table


def memory_bandwidth(chip: str) -> float | None:
    """The unified-memory bandwidth of ``chip`` in bytes per microsecond, or None for a
    name without one (an architecture, or a chip the table lacks)."""
    return _table().get(_key(chip).replace("bionic", ""))
