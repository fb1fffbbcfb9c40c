"""Bundle the per-chip hardware curves as aneforge data.

Reads ``costmodel_curves.json`` (per-chip clock tables, effective-frequency map and
core counts, see ``../shared/reference/ane/README.md``) and writes
``src/aneforge/data/chip_curves.json`` with, per chip: cores, fmax (Hz), the operating
clock 0.8 * fmax and the effective clock the engine's own map gives there.

    python scripts/build_targets.py [path/to/costmodel_curves.json]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "scripts" / "reference" / "costmodel_curves.json"
OUT = ROOT / "src" / "aneforge" / "data" / "chip_curves.json"
CLOCK_FRACTION = 0.8  # the operating clock as a share of fmax (docs/sources.md, cost model)


def operating_point(freqs: list[float], eff_map: list[list[float]]) -> tuple[float, float]:
    """(clock, effective clock) at CLOCK_FRACTION * fmax, the effective clock linearly
    interpolated in the engine's own (clock -> effective clock) map."""
    clock = CLOCK_FRACTION * max(freqs)
    pairs = sorted((f, e) for f, e in eff_map)
    if clock <= pairs[0][0]:
        return clock, pairs[0][1] * clock / pairs[0][0]
    for (f0, e0), (f1, e1) in zip(pairs, pairs[1:]):
        if f0 <= clock <= f1:
            return clock, e0 + (e1 - e0) * (clock - f0) / (f1 - f0)
    return clock, pairs[-1][1] * clock / pairs[-1][0]


def build(curves: dict) -> dict:
    chips = {}
    for name, c in curves.items():
        clock, eff = operating_point(c["freq_0x760"], c["eff_map_0x7a8"])
        chips[name.lower()] = {
            "cores": int(c["cores_0x238"]),
            "fmax_hz": max(c["freq_0x760"]),
            "clock_hz": clock,
            "eff_clock_hz": eff,
            "mult": int(c["mult_0x75c"]),
        }
    return chips


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    raw = src.read_bytes()
    out = {
        "chips": build(json.loads(raw)),
        "clock_fraction": CLOCK_FRACTION,
        "_source": {
            "file": "costmodel_curves.json (ANEForge, MIT)",
            "sha256": hashlib.sha256(raw).hexdigest(),
            "built_by": "scripts/build_targets.py",
        },
    }
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    for name, c in out["chips"].items():
        print(f"{name:>5}: {c['cores']:2d} cores, clock {c['clock_hz'] / 1e9:.3f} GHz, "
              f"effective {c['eff_clock_hz'] / 1e9:.3f} GHz")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
