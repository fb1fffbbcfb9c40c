"""How tight the static range analysis is, and how often it cries wolf on clean models.

Tightness of a node = the largest magnitude its interval allows / the largest magnitude
seen over random in-range inputs (1.0 is exact; a sound bound is never below 1).

1. **Per op**: every op of the registry on a small random instance (contractions with
   He-normal weights, norms with weights near 1), ``--samples`` (default 100) inputs
   drawn uniformly in the declared range (``[-3, 3]``, or ``[0.1, 3]`` for ops defined on
   positives). The median per op family, against the project's targets: <= 10x on the
   elementwise and norm families, <= 100x on contractions.
2. **Whole models**: the light ONNX CNNs with seeded weights (``aneforge.models.light``)
   and all-MiniLM-L6-v2, with realistic input ranges (images in ``[-3, 3]``; MiniLM's
   embeddings within the min/max its embedding tables can sum to, its mask in
   ``[0, 1]``): the share of nodes flagged "may overflow" (a hazard of their own,
   where an overflow can start; target: < 5% on a clean model), the share whose
   interval reaches past 65504 for any reason (downstream of a hazard included), and
   the per-node tightness (median over nodes with a finite bound, all and
   contractions) over ``--model-samples`` (default 3) inputs.

The last lines are machine-readable::

    RESULT tightness_<family>=<median>
    RESULT flagged_<model>=<share of nodes flagged>

Run from the repository root:

    PYTHONPATH=src python3 bench/range_tightness.py [--samples 100] [--models squeezenet]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.graph.ops.bridge import BRIDGE_FUNCTIONS
from aneforge.graph.registry import all_ops, get_op

TARGETS = {"elementwise": 10.0, "norm": 10.0, "contraction": 100.0}
POSITIVE = {"log", "sqrt", "rsqrt", "inverse", "pow", "div"}  # defined (or bounded) on positives
LIGHT = ("squeezenet", "resnet50", "densenet121", "inception_v1", "shufflenet")


def family(op: str) -> str:
    """The op family a node's tightness is reported under."""
    flags = get_op(op).flags
    for name in ("contraction", "norm", "reduction", "movement", "elementwise"):
        if name in flags:
            return name
    return {"softmax": "norm", "sdpa": "contraction"}.get(op, "other")


def _he(rng, *shape):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)


def op_case(name: str, rng):
    """(output, [(input, (lo, hi))]) of one small instance of op ``name``, or None."""
    lo, hi = (0.1, 3.0) if name in POSITIVE else (-3.0, 3.0)
    x = af.input((4, 32), name="x")
    img = af.input((1, 8, 12, 12), name="img")
    flags = get_op(name).flags
    ins = [(x, (lo, hi))]
    if name in ("input", "weight"):
        return None
    if "unary" in flags:
        return getattr(af, name)(x), ins
    if name == "pow":
        return af.pow(x, af.weight(np.full((32,), 2.0))), ins
    if "binary" in flags:
        y = af.input((4, 32), name="y")
        return getattr(af, name)(x, y), ins + [(y, (lo, hi))]
    if name == "select":
        c, y = af.input((4, 32), name="c"), af.input((4, 32), name="y")
        return af.select(c, x, y), ins + [(c, (0.0, 1.0)), (y, (lo, hi))]

    def near(n, mid, spread):
        return mid + spread * rng.standard_normal(n)

    cases = {
        "matmul": lambda: x @ _he(rng, 32, 16).astype(np.float32),
        "linear": lambda: af.linear(x, _he(rng, 16, 32), rng.standard_normal(16) * 0.1),
        "conv": lambda: af.conv(img, _he(rng, 8, 8, 3, 3), padding=1),
        "conv_transpose": lambda: af.conv_transpose(img, _he(rng, 8, 4, 2, 2), stride=2),
        "sum": lambda: af.sum(x, axis=-1),
        "mean": lambda: af.mean(x, axis=-1),
        "amax": lambda: af.amax(x, axis=-1),
        "amin": lambda: af.amin(x, axis=-1),
        "softmax": lambda: af.softmax(x * 2.0, axis=-1),
        "cumsum": lambda: af.cumsum(x),
        "layer_norm": lambda: af.layer_norm(x, near(32, 1, 0.1), near(32, 0, 0.1)),
        "rms_norm": lambda: af.rms_norm(x, near(32, 1, 0.1)),
        "l2_norm": lambda: af.l2_norm(x, axis=-1),
        "group_norm": lambda: af.group_norm(img, 4, near(8, 1, 0.1), near(8, 0, 0.1)),
        "batch_norm": lambda: af.batch_norm(
            img, near(8, 0, 0.1), 0.5 + rng.random(8), near(8, 1, 0.1), near(8, 0, 0.1)
        ),
        "max_pool": lambda: af.max_pool(img, 2, stride=2),
        "avg_pool": lambda: af.avg_pool(img, 3, stride=1, padding=1),
        "upsample": lambda: af.upsample(img, 2, mode="bilinear"),
    }  # fmt: skip
    if name == "bmm":
        b = af.input((2, 32, 8), name="b")
        a = af.input((2, 4, 32), name="a")
        return af.bmm(a, b), [(a, (lo, hi)), (b, (lo, hi))]
    if name in cases:
        out = cases[name]()
        return out, [(t, r) for t, r in ins + [(img, (lo, hi))] if _uses(out, t)]
    if name == "sdpa":
        q, k, v = (af.input((1, 16, 32), name=n) for n in "qkv")
        return BRIDGE_FUNCTIONS["sdpa"](q, k, v), [(t, (lo, hi)) for t in (q, k, v)]
    if name in ("minmax_norm", "sort", "argmax"):
        return BRIDGE_FUNCTIONS[name](x), ins
    if name == "lrn":
        return BRIDGE_FUNCTIONS["lrn"](img), [(img, (lo, hi))]
    if name == "scaled_elementwise":
        y = af.input((4, 32), name="y")
        return BRIDGE_FUNCTIONS[name](x, y, op="mul", scale=0.5), ins + [(y, (lo, hi))]
    return None  # movement and index ops: exact by construction, not a tightness question


def _uses(out, t) -> bool:
    stack, seen = [out], set()
    while stack:
        n = stack.pop()
        if n is t:
            return True
        if id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.srcs)
    return False


def observed_max(prog, feeds_list) -> dict[int, float]:
    """Per node index, the largest finite |value| over the runs."""
    seen: dict[int, float] = defaultdict(float)
    for feeds in feeds_list:
        for n in prog.trace(*feeds).nodes:
            if n.max_abs is not None:
                seen[n.index] = max(seen[n.index], n.max_abs)
    return seen


def tightness(rep, seen) -> list[tuple[str, str, float]]:
    """(op, family, bound / observed) of every compute node that held a non-zero value."""
    rows = []
    for n in rep.nodes:
        if n.op in ("input", "weight") or seen.get(n.index, 0.0) <= 0:
            continue
        rows.append((n.op, family(n.op), n.interval.max_abs / seen[n.index]))
    return rows


def per_op(samples: int, seed: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(seed)
    by_family: dict[str, list[float]] = defaultdict(list)
    print(f"{'op':22s} {'family':12s} {'bound':>10s} {'seen':>10s} {'ratio':>8s}")
    for name in sorted(all_ops()):
        case = op_case(name, rng)
        if case is None:
            continue
        out, ins = case
        prog = af.compile(out, opt=0)
        ranges = {t.name: r for t, r in ins}
        rep = af.range_analysis(prog, input_ranges=ranges)
        by_name = dict(ins)
        feeds_list = [
            [rng.uniform(*by_name[t], t.shape) for t in prog.inputs] for _ in range(samples)
        ]
        seen = observed_max(prog, feeds_list)
        last = rep.nodes[-1]
        if seen.get(last.index, 0.0) <= 0:
            continue
        ratio = last.interval.max_abs / seen[last.index]
        fam = family(name)
        by_family[fam].append(ratio)
        bound = last.interval.max_abs
        print(f"{name:22s} {fam:12s} {bound:10.4g} {seen[last.index]:10.4g} {ratio:8.3g}")
    return by_family


def model_cases(names, samples: int, seed: int):
    """(label, program, ranges {name: (lo, hi)}, feeds list) of each whole model."""
    from aneforge.models import light

    rng = np.random.default_rng(seed)
    for name in names:
        build = light.build_light(name, weights="seeded", seed=seed)
        prog = build.program
        ranges = {t.name: (-3.0, 3.0) for t in prog.inputs}
        feeds = [[rng.uniform(-3, 3, t.shape) for t in prog.inputs] for _ in range(samples)]
        yield name, prog, ranges, feeds
    try:
        from aneforge.models import minilm
    except ImportError:
        return
    enc = minilm()
    w = enc.weights
    table = w["embeddings.word_embeddings.weight"]
    pos, typ = (
        w["embeddings.position_embeddings.weight"],
        w["embeddings.token_type_embeddings.weight"],
    )
    lo = float(table.min() + pos.min() + typ.min())
    hi = float(table.max() + pos.max() + typ.max())
    prog = enc.program(32)
    ranges = {"embeddings": (lo, hi), "attention_mask": (0.0, 1.0)}
    sentences = ["The weather is lovely today.", "Neural engines run fp16 matrix multiplies."]
    feeds = []
    for k in range(samples):
        emb, mask = enc.features([sentences[k % 2]], seq_len=32)
        feeds.append([emb, mask])
    yield "minilm", prog, ranges, feeds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--model-samples", type=int, default=3)
    parser.add_argument("--models", default=",".join(LIGHT))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    by_family = per_op(args.samples, args.seed)
    print(f"\nper-op tightness over {args.samples} inputs ({time.perf_counter() - t0:.1f} s)")
    print(f"{'family':12s} {'ops':>4s} {'median':>8s} {'max':>8s} {'target':>7s}")
    results = []
    for fam, ratios in sorted(by_family.items()):
        med = statistics.median(ratios)
        goal = TARGETS.get(fam)
        mark = "" if goal is None else (" ok" if med <= goal else " MISSED")
        print(f"{fam:12s} {len(ratios):4d} {med:8.3g} {max(ratios):8.3g} {goal or '-':>7}{mark}")
        results.append(f"RESULT tightness_{fam}={med:.4g}")
    names = [n for n in args.models.split(",") if n]
    print(f"\nwhole models, {args.model_samples} input(s) each")
    print(f"{'model':14s} {'nodes':>6s} {'flagged':>8s} {'hazards':>8s} {'reach inf':>9s} "
          f"{'median tight':>12s} {'contraction':>11s} {'s':>6s}")  # fmt: skip
    for label, prog, ranges, feeds in model_cases(names, args.model_samples, args.seed):
        t1 = time.perf_counter()
        rep = af.range_analysis(prog, input_ranges=ranges)
        seen = observed_max(prog, feeds)
        rows = tightness(rep, seen)
        finite = [r for _, _, r in rows if math.isfinite(r)]
        contr = [r for _, f, r in rows if f == "contraction" and math.isfinite(r)]
        share = rep.flagged_share()
        med = statistics.median(finite) if finite else math.inf
        cmed = statistics.median(contr) if contr else math.nan
        reach = rep.unbounded_share()
        print(f"{label:14s} {len(rep.nodes):6d} {share:8.1%} {len(rep.hazards):8d} {reach:9.1%} "
              f"{med:12.3g} {cmed:11.3g} {time.perf_counter() - t1:6.1f}")  # fmt: skip
        results.append(f"RESULT flagged_{label}={share:.4f}")
        results.append(f"RESULT reach_inf_{label}={reach:.4f}")
    print()
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
