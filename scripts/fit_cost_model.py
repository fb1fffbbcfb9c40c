"""Fit the default cost model's constants from the measured ANE latency corpus.

Reads ``ane_cost_model.json`` (measured min latencies on an M5 Pro, see
``../shared/reference/ane/README.md``) and writes ``src/aneforge/data/cost_model.json``,
the calibration aneforge bundles. Run it again whenever the corpus changes:

    python scripts/fit_cost_model.py [path/to/ane_cost_model.json]

The fit, constant by constant (the model is spec 000, "The cost model"):

- ``floor_us``: the dispatch floor, the smallest min latency over all fused single-op
  programs (no program can beat it).
- ``bw_bytes_per_us``: the effective fp16 streaming bandwidth, from the GEMV sweep
  ``x[1,K] @ W[K,K]`` (weight streaming, 2 bytes per weight). Only points above the
  knee (min latency >= knee_factor * floor) are used, and the line goes through the
  origin (time = bytes / BW), because the model charges one floor per region and lets a
  bytes-bound node's own time replace it: least squares of ``t = b / BW`` gives
  ``1/BW = sum(b t) / sum(b^2)``.
- ``flops_per_us``: the effective fp16 compute rate, by the same through-origin least
  squares of ``t = flops / COMPUTE`` over the convolution sweeps above the knee (3x3
  convolutions at C >= 128 are compute-bound: their FLOPs per byte far exceed BW's).
- ``cut_us``: the marginal cost of a graph cut, the smallest measured bridge-op latency
  (a native sub-program with a trivial body is all cut).
- ``bridge_ops``: every measured bridge-op latency, kept as measured (family, key,
  min_us) for the per-family nearest-anchor interpolation in ``aneforge.cost.bridge``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT / "scripts" / "reference" / "ane_cost_model.json"
OUT = ROOT / "src" / "aneforge" / "data" / "cost_model.json"


def through_origin_rate(points):
    """Least-squares rate r of t = x / r over (x, t) points: 1/r = sum(x t) / sum(x^2)."""
    sxt = sum(x * t for x, t in points)
    sxx = sum(x * x for x, _ in points)
    return sxx / sxt


def fit(corpus: dict) -> dict:
    meas = corpus["measurements"]
    knee = corpus["model"]["_meta"].get("knee_factor", 1.25)
    floor = min(r["min_us"] for r in meas["fused"] if r.get("ok", True))
    gemv = [(r["weight_bytes"], r["min_us"]) for r in meas["matmul"] if r["min_us"] >= knee * floor]
    convs = [(r["flops"], r["min_us"]) for r in meas["conv"] if r["min_us"] >= knee * floor]
    bridges = corpus["model"]["bridge_ops"]
    return {
        "floor_us": floor,
        "bw_bytes_per_us": through_origin_rate(gemv),
        "flops_per_us": through_origin_rate(convs),
        "cut_us": min(v["min_us"] for v in bridges.values()),
        "fit_points": {"bandwidth": gemv, "compute": convs, "knee_factor": knee},
        "bridge_ops": [
            {"key": k, "family": v["family"], "min_us": v["min_us"]} for k, v in bridges.items()
        ],
    }


def main(argv: list[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else DEFAULT_SOURCE
    raw = src.read_bytes()
    constants = fit(json.loads(raw))
    constants["_source"] = {
        "file": "ane_cost_model.json (ANEForge, MIT; measured on an M5 Pro)",
        "sha256": hashlib.sha256(raw).hexdigest(),
        "fitted_by": "scripts/fit_cost_model.py",
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(constants, indent=1, sort_keys=True) + "\n")
    for key in ("floor_us", "bw_bytes_per_us", "flops_per_us", "cut_us"):
        print(f"{key} = {constants[key]:.6g}")
    print(f"bridge_ops: {len(constants['bridge_ops'])} measured configurations -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
