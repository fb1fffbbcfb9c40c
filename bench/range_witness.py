"""Which of MiniLM's "may overflow" flags are real: a search for in-range inputs that overflow.

The static range analysis (``af.range_analysis``) is sound: a node it does not flag
cannot overflow for inputs inside the declared ranges. A flag, though, only says that
the analysis could not prove the node safe. This script looks for *witnesses*: inputs
inside the declared ranges on which the emulator really overflows at a flagged node.

For all-MiniLM-L6-v2 at 32 tokens, with the ranges ``bench/range_tightness.py`` declares
(embeddings within the min/max its tables can sum to, the mask in ``[0, 1]``):

1. **Corners and real text**: the emulator runs on the ranges' corners (every input at
   its low or high end) and on real sentences; a hazard is witnessed when its node's
   output is non-finite, or, for a layer norm, when a row collapses to the norm's bias
   (its variance sum passed 65504, so ``rsqrt`` gave 0).
2. **Gradient ascent** (needs torch): for each flagged layer norm, a float64 PyTorch
   copy of the encoder guides projected gradient ascent over the embeddings (kept in
   their box through a sigmoid, the mask all ones) towards the largest sum of squared
   deviations, ``sum((x - mean(x))**2)``, of one row at that norm's input, from two real
   sentences and ``--restarts`` random points of the box. Every candidate is then run on the
   aneforge emulator, which alone decides whether it is a witness.

Per hazard it prints the largest sum of squares reached on the emulator against the
limit (65504) and whether the hazard was witnessed. The machine-readable last lines::

    RESULT witnessed=<count>  RESULT hazards=<count>  RESULT unresolved_share=<share>

``unresolved_share`` is the share of the program's nodes flagged by a hazard that no
input reached even half-way (sum of squares < 32752): the bound on the false alarms.

Run from the repository root (about 10 minutes on two cores with torch installed):

    PYTHONPATH=src python3 bench/range_witness.py [--steps 400] [--restarts 2]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aneforge.emulator.trace import execute_fp16  # noqa: E402
from range_tightness import model_cases  # noqa: E402  (one owner of MiniLM's ranges)

LIMIT = 65504.0
SENTENCES = (
    "The weather is lovely today.",
    "Neural engines run fp16 matrix multiplies.",
    "A quick brown fox jumps over the lazy dog near the river bank at dawn.",
    "Stock markets rallied after the central bank held interest rates steady.",
)


def emulate(prog, feeds) -> dict[int, np.ndarray]:
    """Every node's fp16 value (float64 arrays) by id of the node."""
    values: dict[int, np.ndarray] = {}

    def observe(_index, node, value):
        values[id(node)] = np.asarray(value, dtype=np.float64)

    with np.errstate(all="ignore"):
        execute_fp16(prog, [np.asarray(f, dtype=np.float32) for f in feeds], observe=observe)
    return values


def hazard_reached(prog, hazard, values) -> tuple[float, bool]:
    """``(sum of squares, witnessed)`` of ``hazard`` on one run: for a layer norm the
    largest row's ``sum((x - mean)**2)`` of its fp16 input (in float64) and whether a
    row collapsed to the bias or went non-finite; otherwise ``(max |value|, non-finite)``."""
    node = prog.nodes[hazard.index]
    y = values[id(node)]
    bad = not np.isfinite(y).all()
    if node.op != "layer_norm":
        finite = np.abs(y[np.isfinite(y)])
        return (float(finite.max()) if finite.size else 0.0), bad
    x = values[id(node.srcs[0])]
    d = x - x.mean(axis=-1, keepdims=True)
    ss = float((d * d).sum(axis=-1).max())
    beta = values[id(node.srcs[2])] if node.attrs.get("has_bias") else 0.0
    moving = np.ptp(x, axis=-1) > 0
    collapsed = bool(((np.abs(y - beta).max(axis=-1) == 0) & moving).any())
    return ss, bad or collapsed


class Search:
    """Keeps, per hazard, the best value reached and whether it was witnessed."""

    def __init__(self, prog, hazards):
        self.prog, self.hazards = prog, hazards
        self.best = {h.index: (0.0, False, "") for h in hazards}

    def run(self, feeds, how: str) -> None:
        values = emulate(self.prog, feeds)
        for h in self.hazards:
            got, hit = hazard_reached(self.prog, h, values)
            old = self.best[h.index]
            if (hit, got) > (old[1], old[0]):
                self.best[h.index] = (got, hit, how)


def corner_feeds(prog, ranges):
    """Feeds with every input at one end of its range (all combinations)."""
    ends = [(ranges[t.name][0], ranges[t.name][1]) for t in prog.inputs]
    for combo in itertools.product(*ends):
        yield [np.full(t.shape, v) for t, v in zip(prog.inputs, combo)], str(combo)


def torch_encoder(enc, seq_len: int):
    """``forward(emb) -> [inputs of each layer norm]``, MiniLM in float64 PyTorch with
    the mask all ones (it mirrors ``aneforge.models.minilm``'s graph)."""
    import torch

    w = {k: torch.tensor(np.asarray(v, dtype=np.float64)) for k, v in enc.weights.items()}
    heads, hidden = enc.heads, enc.hidden
    hd = hidden // heads

    def norm(x, p):
        d = x - x.mean(-1, keepdim=True)
        r = torch.rsqrt((d * d).mean(-1, keepdim=True) + enc.eps)
        return d * r * w[p + ".weight"] + w[p + ".bias"]

    def linear(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    def forward(emb):
        n = emb.shape[0]

        def split(y):
            return y.reshape(n, seq_len, heads, hd).transpose(1, 2)

        norm_inputs = [emb]
        x = norm(emb, "embeddings.LayerNorm")
        for i in range(enc.layers):
            p = f"encoder.layer.{i}."
            q = split(linear(x, p + "attention.self.query")) * hd**-0.5
            k, v = (split(linear(x, p + "attention.self." + t)) for t in ("key", "value"))
            probs = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
            ctx = (probs @ v).transpose(1, 2).reshape(n, seq_len, hidden)
            x = x + linear(ctx, p + "attention.output.dense")
            norm_inputs.append(x)
            x = norm(x, p + "attention.output.LayerNorm")
            mid = torch.nn.functional.gelu(linear(x, p + "intermediate.dense"))
            x = x + linear(mid, p + "output.dense")
            norm_inputs.append(x)
            x = norm(x, p + "output.LayerNorm")
        return norm_inputs

    return forward


def ascend(forward, which: int, start, lo, hi, steps: int):
    """Projected gradient ascent of the largest row's squared deviation at layer norm
    ``which`` from ``start``; yields the candidates worth emulating (float64 arrays)."""
    import torch

    u = (torch.tensor(start, dtype=torch.float64) - lo) / (hi - lo)
    theta = torch.logit(u.clamp(1e-4, 1 - 1e-4)).requires_grad_()
    opt = torch.optim.Adam([theta], lr=0.05)
    best, best_emb = -1.0, None
    for _ in range(steps):
        emb = lo + (hi - lo) * torch.sigmoid(theta)
        x = forward(emb)[which]
        ss = ((x - x.mean(-1, keepdim=True)) ** 2).sum(-1)
        if float(ss.max()) > best:
            best, best_emb = float(ss.max()), emb.detach().numpy().copy()
        loss = -torch.logsumexp(20.0 * torch.log(ss), dim=-1).sum() / 20.0
        opt.zero_grad()
        loss.backward()
        opt.step()
    return best_emb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seq-len", type=int, default=32)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from aneforge.models import minilm

    cases = list(model_cases([], 1, args.seed))
    if not cases:
        print("all-MiniLM-L6-v2 is not available: nothing to search")
        return 1
    _, prog, ranges, _ = cases[0]
    enc = minilm()
    rep = af.range_analysis(prog, input_ranges=ranges)
    hazards = list(rep.hazards)
    search = Search(prog, hazards)
    for feeds, how in corner_feeds(prog, ranges):
        search.run(feeds, "corner " + how)
    mask_on = np.ones((1, args.seq_len))
    sentences = []
    for s in SENTENCES:
        emb, mask = enc.features([s], seq_len=args.seq_len)
        search.run([emb, mask], "sentence")
        sentences.append(emb)
    lo, hi = ranges["embeddings"]
    rng = np.random.default_rng(args.seed)
    starts = sentences[:2] + [rng.uniform(lo, hi, emb.shape) for _ in range(args.restarts)]
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: corners and sentences only (pip install torch==2.13.0)")
        starts = []
    forward = torch_encoder(enc, args.seq_len) if starts else None
    norms = [n for n in prog.nodes if n.op == "layer_norm"]
    t0 = time.perf_counter()
    print(f"{'node':14s} {'op':11s} {'step':8s} {'reached':>10s} {'of limit':>9s}  witnessed by")
    witnessed = unresolved = 0
    for h in hazards:
        node = prog.nodes[h.index]
        if node.op == "layer_norm" and forward is not None:
            for k, start in enumerate(starts):
                if search.best[h.index][1]:
                    break
                emb = ascend(forward, norms.index(node), start, lo, hi, args.steps)
                search.run([emb, mask_on], f"ascent from start {k}")
        got, hit, how = search.best[h.index]
        limit = LIMIT if node.op == "layer_norm" else h.limit
        witnessed += hit
        unresolved += (not hit) and got < limit / 2
        print(f"{h.name:14s} {h.op:11s} {h.step or '-':8s} {got:10.4g} {got / limit:9.1%}  "
              f"{how if hit else '-'}  ({time.perf_counter() - t0:.0f} s)", flush=True)  # fmt: skip
    print()
    print(f"RESULT witnessed={witnessed}")
    print(f"RESULT hazards={len(hazards)}")
    print(f"RESULT unresolved_share={unresolved / len(rep.nodes):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
