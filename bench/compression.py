"""Weight compression on real-ish models: bytes saved and the output error it costs.

Models (seeded weights): ``af.nn.small_cnn`` (3 convs + linear head) and
``af.nn.transformer_block`` (seq 64, width 256: four 256x256 projections and a 256->1024
->256 MLP), each also magnitude-pruned to 60% zeros per contraction weight (the sparse
variants). Per model and mode it compiles ``compress=<mode>`` (default
``compress_atol=0.05``; ``int4!`` is ``compress='int4', compress_atol=inf``: int4 on
every weight, no gate) and reports:

- ratio: contraction-weight bytes fp16 / compressed (exact streamed bytes);
- gate: the worst per-weight gate error (max over channels of ||w_c - d_c|| / ||w_c||)
  among the chosen encodings;
- out: the emulator's output error against the uncompressed program on 4 seeded
  inputs, max|delta| / max|ref|;
- the encodings chosen, and the analytic estimate's speedup on A13 (h13) and A16-tier
  (h17s) where the mode is 'auto' (restricted to each family's native encodings).

    python bench/compression.py

Last lines (machine-readable), one per model and mode:
    RESULT compression <model> <mode> ratio=<x> gate=<e> out=<e> counts=<enc:n,...>
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.compression import rewrite_contraction_weights
from aneforge.graph.tensor import weight

MODES = ("int8", "int4", "int4!", "sparse", "auto")
PRUNE = 0.6


def pruned(out, share=PRUNE):
    """``out`` with each contraction weight's smallest-magnitude ``share`` set to zero."""

    def prune(node, w, axis):
        v = np.asarray(w.value, np.float64).copy()
        v.flat[np.argsort(np.abs(v), axis=None, kind="stable")[: round(share * v.size)]] = 0.0
        return weight(v, name=w.name)

    return rewrite_contraction_weights(out, prune, "prune")


def models():
    x, y = af.nn.small_cnn(seed=0)
    t, z = af.nn.transformer_block(seed=0, seq=64, width=256, heads=4)
    return [
        ("small_cnn", x, y),
        ("small_cnn_pruned60", x, pruned(y)),
        ("transformer256", t, z),
        ("transformer256_pruned60", t, pruned(z)),
    ]


def output_error(prog, base, feeds) -> float:
    worst = 0.0
    for feed in feeds:
        ref = np.asarray(base(feed), np.float64)
        got = np.asarray(prog(feed), np.float64)
        worst = max(worst, float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))))
    return worst


def compile_mode(out, mode, target=None):
    name, atol = (mode[:-1], float("inf")) if mode.endswith("!") else (mode, 0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.AneforgeWarning)
        return af.compile(out, compress=name, compress_atol=atol, target=target)


def main() -> int:
    rng = np.random.default_rng(0)
    results = []
    start = time.perf_counter()
    for label, x, y in models():
        feeds = [rng.standard_normal(x.shape) for _ in range(4)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.AneforgeWarning)
            base = af.compile(y)
        print(f"{label}: {len(feeds)} inputs {x.shape}")
        for mode in MODES:
            prog = compile_mode(y, mode)
            rep = prog.passes["compression"]
            counts = ",".join(f"{k}:{n}" for k, n in rep["counts"].items() if n)
            err = output_error(prog, base, feeds)
            gate = max((e["error"] for e in rep["weights"]), default=0.0)
            extra = ""
            if mode == "auto":
                parts = []
                for arch in ("h13", "h17s"):
                    fp16_us = af.estimate(base, target=arch)
                    chip = compile_mode(y, "auto", target=arch)
                    chip_counts = chip.passes["compression"]["counts"]
                    kinds = "+".join(k for k, n in chip_counts.items() if n and k != "fp16")
                    speed = fp16_us / af.estimate(chip, target=arch)
                    parts.append(f"{arch}:{kinds or 'none'}:{speed:.2f}x")
                extra = " est=" + ";".join(parts)
            print(
                f"  {mode:7s} weights {rep['bytes_before']:>9,d} -> {rep['bytes_after']:>9,d} B"
                f" ({rep['ratio']:.2f}x)  gate {gate:.4f}  out {err:.4f}  [{counts}]{extra}"
            )
            results.append(
                f"RESULT compression {label} {mode} ratio={rep['ratio']:.3f} gate={gate:.4f} "
                f"out={err:.4f} counts={counts}{extra}"
            )
    print(f"({time.perf_counter() - start:.1f} s)")
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
