"""How far the 192 and 384 reduction routes land apart, and why aneforge says ``reorder``.

Numerics (docs/sources.md) classes a reduction/softmax/norm whose route threshold differs
across chips (192 on A13/A14, 384 on A15+) as ``ulp1``, "a partial-sum reorder, <= 1 ULP".
The emulator's numerics contract (docs/numerics.md, section 4) makes those sums narrow:
every partial rounded to fp16. This script measures what the two statements give together.

Part 1 runs each op on the emulator as M1 (route 192) and as A15 (route 384) on rows of
N(0, 1) data and prints the largest and the median distance between the two outputs in
fp16 ulps (``aneforge.metrics.ulp_distance``), per row length K.

Part 2 isolates the sum itself (the softmax's sum of exponentials, a norm's sum of
squares, a plain signed sum) and reorders it the same way under two accumulators: the
narrow one of the contract, and a wide (float32) one rounded to fp16 once. Only the wide
accumulator keeps the reorder within 1 ulp; the narrow one moves the result by several.
So the spec's bound and the contract's narrow sums cannot both hold: aneforge keeps the
contract (it reproduces the measured reduce_sum trap) and reports the class ``reorder``.

    python bench/route_divergence.py

Last lines (machine-readable):
    RESULT route_divergence op=<op> K=<K> max_ulps=<n> median_ulps=<n>
    RESULT route_reorder_sum accumulator=<narrow|wide> max_ulps=<n>
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.fp16 import narrow_sum, round_fp16
from aneforge.metrics import ulp_distance

ROWS = 64
KS = (256, 384, 512, 1024, 2048, 4096)
ROUTES = {"h13": 192, "h15": 384}  # M1 (A14 tier) and A15

OPS = {
    "softmax": af.softmax,
    "rms_norm": af.rms_norm,
    "l2_norm": af.l2_norm,
    "layer_norm": af.layer_norm,
    "mean": lambda x: x.mean(-1),
    "sum": lambda x: x.sum(-1),
}


def op_divergence(name: str, vals: np.ndarray) -> tuple[np.ndarray, float]:
    """ulp distances between the op's outputs on the two routes, and the largest
    difference in ulps of its row's largest |output| (the row scale)."""
    x = af.input(vals.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile(OPS[name](x), opt=0)
    a, b = (execute_fp16(prog, [vals], target=arch)[0] for arch in ROUTES)
    a, b = a.reshape(ROWS, -1), b.reshape(ROWS, -1)
    row_ulp = np.spacing(np.abs(a).max(axis=1, keepdims=True).astype(np.float16))
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return ulp_distance(a, b), float((diff / row_ulp.astype(np.float64)).max())


def wide_chunked_sum(terms: np.ndarray, chunk: int) -> np.ndarray:
    """The split route with the matmul's wide accumulator (a float32 running sum in
    order, as ``narrow_sum(..., wide="float32")`` gives): float32 partials, then the
    partials summed the same way and the result rounded to fp16 once."""
    partials = [
        narrow_sum(terms[:, i : i + chunk], axis=1, wide="float32")
        for i in range(0, terms.shape[1], chunk)
    ]
    return round_fp16(narrow_sum(np.stack(partials, axis=1), axis=1, wide="float32"))


def narrow_chunked_sum(terms: np.ndarray, chunk: int) -> np.ndarray:
    """The split route of the contract (docs/numerics.md section 9.2)."""
    return narrow_sum(terms, axis=1, route=chunk)


def sum_terms(vals: np.ndarray) -> dict[str, np.ndarray]:
    """The fp16 terms each op family sums: exponentials, squares and the raw values."""
    with np.errstate(over="ignore"):
        shifted = round_fp16(vals.astype(np.float32) - vals.max(axis=1, keepdims=True))
        return {
            "sum exp(x - max)": round_fp16(np.exp(shifted.astype(np.float64))),
            "sum x^2": round_fp16(vals.astype(np.float32) ** 2),
            "sum x": vals,
        }


def main() -> int:
    rng = np.random.default_rng(0)
    data = {k: rng.standard_normal((ROWS, k)).astype(np.float16) for k in KS}

    print(f"Part 1: op outputs, M1 (route {ROUTES['h13']}) vs A15 (route {ROUTES['h15']}),")
    print(f"{ROWS} rows of N(0, 1); distance in fp16 ulps: max / median over elements,")
    print("and [max in ulps of the row's largest |output|]")
    print(f"{'op':<12}" + "".join(f"{'K=' + str(k):>17}" for k in KS))
    results = []
    for name in OPS:
        cells = []
        for k in KS:
            d, row_scaled = op_divergence(name, data[k])
            cells.append(f"{int(d.max())} / {int(np.median(d))} [{row_scaled:.0f}]")
            results.append((name, k, int(d.max()), int(np.median(d))))
        print(f"{name:<12}" + "".join(f"{c:>17}" for c in cells))

    print("\nPart 2: the sum alone, reordered 192 vs 384, max distance in ulps")
    print(f"{'sum':<18}{'accumulator':<13}" + "".join(f"{'K=' + str(k):>8}" for k in KS))
    worst = {"narrow": 0, "wide": 0}
    for label in sum_terms(data[KS[0]]):
        for acc, fn in (("narrow", narrow_chunked_sum), ("wide", wide_chunked_sum)):
            cells = []
            for k in KS:
                terms = sum_terms(data[k])[label]
                d = int(ulp_distance(fn(terms, 192), fn(terms, 384)).max())
                cells.append(d)
                if label != "sum x":  # same-sign sums: ulps of a non-cancelled result
                    worst[acc] = max(worst[acc], d)
            print(f"{label:<18}{acc:<13}" + "".join(f"{c:>8}" for c in cells))
    print(
        "\nSame-sign sums (softmax, norms): the narrow reorder moves the result by up to "
        f"{worst['narrow']} ulps, the wide one by at most {worst['wide']}. A signed sum's "
        "result is cancelled, so its ulps are small and any reorder shows large counts."
    )

    for name, k, mx, med in results:
        print(f"RESULT route_divergence op={name} K={k} max_ulps={mx} median_ulps={med}")
    for acc, d in worst.items():
        print(f"RESULT route_reorder_sum accumulator={acc} max_ulps={d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
