"""Fit the default cost model's constants from measured M5 Pro latencies.

Data (nothing else is fitted on):

- ``ane_cost_model.json``: ANEForge's per-op corpus, min latencies of single-op programs
  on an M5 Pro (``../shared/reference/ane/README.md``): the GEMV and GEMM sweeps, the
  convolution sweeps and the fused-op sweep (elementwise, norms, pools, softmax);
- the ``fit`` rows of ``src/aneforge/data/silicon_models.csv`` measured on the same
  chip: ANEForge's own published whole-model latencies. Every other whole-model row is
  validation (``bench/cost_accuracy.py`` scores them) and never enters this fit.

The model (``aneforge.cost.estimate``): a fused region costs ``floor`` plus, per node,
``pass`` (``layer_us`` for every node that takes an engine pass of its own) plus the
region's overlapped work ``max(sum of flops / COMPUTE, sum of weight_bytes / BW +
activation_bytes / ACT_BW)``. Single-op
programs pin ``floor + layer_us``, the bandwidths and the compute rate; the whole
models, with tens to hundreds of passes each, split ``floor`` from ``layer_us``. The
five constants minimize the mean |ln(predicted / measured)|, half the weight on the
per-op rows and half on the whole-model rows, inside physical bounds (Nelder-Mead in
log space from several starts, then a coordinate polish).

``cut_us`` is the smallest measured bridge-op latency (a native sub-program with a
trivial body is all cut) and ``bridge_ops`` every measured bridge-op latency, kept as
measured for ``aneforge.cost.bridge``'s nearest-anchor interpolation.

    python scripts/fit_cost_model.py [--write] [--corpus path/to/ane_cost_model.json]

Without ``--write`` it prints the fit and its errors and writes nothing; ``--write``
refreshes ``src/aneforge/data/cost_model.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from fitting import coordinate_polish  # noqa: E402

import aneforge as af  # noqa: E402
from aneforge.compiler.program import Program  # noqa: E402
from aneforge.cost.analytic import RegionLoad, program_loads  # noqa: E402
from aneforge.cost.silicon import load_model_rows  # noqa: E402
from aneforge.models.zoo import build  # noqa: E402

DEFAULT_SOURCE = ROOT / "scripts" / "reference" / "ane_cost_model.json"
OUT = ROOT / "src" / "aneforge" / "data" / "cost_model.json"
CORPUS_CHIP = "M5 Pro"
NAMES = (
    "floor_us",
    "layer_us",
    "bw_bytes_per_us",
    "act_bw_bytes_per_us",
    "flops_per_us",
)
BOUNDS = {
    "floor_us": (20.0, 200.0),  # a dispatch floor of 20-200 us
    "layer_us": (0.05, 50.0),  # per pass
    # Weight and activation DMA: at most the M5 Pro's 307 GB/s of unified memory.
    "bw_bytes_per_us": (1e4, 3.07e5),
    "act_bw_bytes_per_us": (1e3, 3.07e5),
    # Compute: at most 20 TFLOP/s, above the fastest deep convolution chain published
    # for an engine of this generation (18.6 TFLOP/s on an M4, docs/cost_model.md).
    "flops_per_us": (1e6, 2e7),
}
STARTS = (
    (60.0, 2.0, 1e5, 2e4, 1.5e7),
    (40.0, 10.0, 2e5, 5e4, 2e7),
    (50.0, 0.5, 5e4, 1e4, 1e7),
)
LOG_BOUNDS = [(math.log(BOUNDS[n][0]), math.log(BOUNDS[n][1])) for n in NAMES]
# The fused-op sweep names ops, not their attributes; these are the sizes assumed.
POOL_KERNEL, GROUPS, SHUFFLE = 2, 8, 2


def corpus_graph(group: str, r: dict):
    """The graph of one corpus record (weights are zeros: only shapes matter)."""
    if group in ("matmul", "matmul_rect"):
        x = af.input((r.get("M", 1), r["K"]))
        return x @ np.zeros((r["K"], r.get("N", r["K"])), np.float16)
    if group == "conv":
        c, k = r["C"], r["k"]
        x = af.input((1, c, r["H"], r["H"]))
        return af.conv(x, np.zeros((c, c, k, k), np.float16), stride=r["stride"], padding=k // 2)
    x = af.input(tuple(r["shape"]))
    op = r["label"].split()[0]
    if op in ("max_pool", "avg_pool"):
        return getattr(af, op)(x, POOL_KERNEL)
    if op == "group_norm":
        return af.group_norm(x, GROUPS)
    if op == "pixel_shuffle":
        return af.pixel_shuffle(x, SHUFFLE)
    if op == "softmax":
        return af.softmax(x)
    return getattr(af, op)(x)


class Problem:
    """One measured program, reduced to the arrays the default model prices."""

    def __init__(self, label: str, prog, measured_us: float, kind: str):
        self.label, self.measured_us, self.kind = label, measured_us, kind
        loads = program_loads(prog, None, swap_rows=0)
        fused = [ld for ld in loads if isinstance(ld, RegionLoad)]
        self.regions = len(fused)
        self.cuts = sum(ld[1] for ld in loads if not isinstance(ld, RegionLoad))
        cat = (lambda f: np.concatenate([f(ld) for ld in fused])) if fused else None
        self.flops = cat(lambda ld: ld.flops)
        self.weights = cat(lambda ld: ld.weight_bytes)
        self.acts = cat(lambda ld: ld.acts_in + ld.out_bytes)
        self.passes = cat(lambda ld: ld.passes.astype(float))
        self.region = cat(lambda ld: np.full(len(ld.nodes), fused.index(ld)))

    def predict(self, floor, layer, bw, act_bw, compute) -> float:
        busy = np.bincount(self.region, self.flops / compute)
        memory = np.bincount(self.region, self.weights / bw + self.acts / act_bw)
        work = float(np.sum(np.maximum(busy, memory)))
        return self.regions * floor + float(np.sum(self.passes)) * layer + work + self.cuts


def problems(corpus: dict) -> list[Problem]:
    probs = []
    meas = corpus["measurements"]
    for group in ("matmul", "matmul_rect", "conv", "fused"):
        for r in meas[group]:
            if r.get("ok", True):
                prog = Program.from_outputs([corpus_graph(group, r)])
                probs.append(Problem(f"{group} {r['label']}", prog, r["min_us"], "op"))
    for row in load_model_rows():
        if row.role == "fit" and row.chip == CORPUS_CHIP and not row.excluded:
            _, out = build(row.model, batch=row.batch, size=row.size)
            probs.append(Problem(row.label, Program.from_outputs([out]), row.latency_us, "model"))
    return probs


def log_errors(vec, probs) -> np.ndarray:
    p = np.exp(vec)
    return np.array([math.log(q.predict(*p) / q.measured_us) for q in probs])


def objective(vec, probs) -> float:
    e = np.abs(log_errors(vec, probs))
    kinds = np.array([q.kind for q in probs])
    parts = [float(np.mean(e[kinds == k])) for k in ("op", "model") if (kinds == k).any()]
    return sum(parts) / len(parts)


def fit(probs) -> np.ndarray:
    best = None
    for start in STARTS:
        r = minimize(objective, np.log(start), args=(probs,), method="Nelder-Mead",
                     bounds=LOG_BOUNDS, options={"maxiter": 4000, "xatol": 1e-5,
                                                 "fatol": 1e-9})  # fmt: skip
        if best is None or r.fun < best.fun:
            best = r
    return coordinate_polish(best.x, lambda v: objective(v, probs), LOG_BOUNDS)


def errors_by_kind(vec, probs) -> dict:
    e = log_errors(vec, probs)
    out = {}
    for kind in ("op", "model"):
        sel = np.abs(e[[q.kind == kind for q in probs]])
        if sel.size:
            out[kind] = {"rows": int(sel.size), "geomean_error": math.exp(float(sel.mean())),
                         "worst_error": math.exp(float(sel.max()))}  # fmt: skip
    return out


def fit_constants(corpus: dict) -> tuple[dict, list, np.ndarray]:
    probs = problems(corpus)
    vec = fit(probs)
    values = dict(zip(NAMES, (float(v) for v in np.exp(vec))))
    bridges = corpus["model"]["bridge_ops"]
    values["cut_us"] = min(v["min_us"] for v in bridges.values())
    values["fit_errors"] = errors_by_kind(vec, probs)
    values["bridge_ops"] = [
        {"key": k, "family": v["family"], "min_us": v["min_us"]} for k, v in bridges.items()
    ]
    return values, probs, vec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--write", action="store_true", help=f"refresh {OUT.name}")
    args = parser.parse_args(argv)
    raw = args.corpus.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the bundled constants may be the ones refitted
        values, probs, vec = fit_constants(json.loads(raw))
    for q, e in zip(probs, log_errors(vec, probs)):
        pred = q.predict(*np.exp(vec))
        print(f"  {q.label:<44} measured {q.measured_us:9.1f}  model {pred:9.1f}  "
              f"x{math.exp(e):.2f}")  # fmt: skip
    for key in (*NAMES, "cut_us"):
        print(f"{key} = {values[key]:.6g}")
    for kind, err in values["fit_errors"].items():
        print(f"{kind} rows: {err['rows']}, geometric-mean error {err['geomean_error']:.3f}x, "
              f"worst {err['worst_error']:.3f}x")  # fmt: skip
    if args.write:
        values["_source"] = {
            "file": "ane_cost_model.json (ANEForge, MIT; measured on an M5 Pro)",
            "sha256": hashlib.sha256(raw).hexdigest(),
            "models": "data/silicon_models.csv (fit rows on the M5 Pro)",
            "fitted_by": "scripts/fit_cost_model.py",
        }
        OUT.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
