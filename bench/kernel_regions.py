"""The loop-nest analyses on the fused regions of real models: ResNet-50 and MiniLM.

Per model, every fused region is lowered twice (:func:`aneforge.kernel.lower`): every
intermediate materialized, and "fused" (elementwise ops and movements inlined into their
readers, the rest materialized); ``analyze`` runs on both and ``completion_floor``, with
every intermediate open, on the materialized lowering.
Printed per model:

- FLOPs of the loop walk against the graph-level count (the cost model's FLOPs, which
  count contractions' products and sums only; the loop walk also counts one per
  elementwise op, reduction step and bias add), and the contractions' share without
  their bias adds, which must agree exactly;
- bytes moved per region (materialized, fused, floor), and how many regions and legs
  are exact, and which ops lowered as opaque code;
- the time the analyses took.

The last lines are machine-readable::

    RESULT <model>_regions=<fused regions>
    RESULT <model>_flops_ratio=<loop-walk FLOPs / graph FLOPs>
    RESULT <model>_contraction_flops_equal=<1 when the contractions' FLOPs agree exactly>
    RESULT <model>_exact_regions=<regions whose materialized summary is exact>

Run from the repository root:

    PYTHONPATH=src python3 bench/kernel_regions.py [--models resnet50,minilm] [--seq-len 128]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

try:
    import aneforge  # noqa: F401
except ImportError:  # not installed: use the checkout this script lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from aneforge.cost.roofline import node_flops
from aneforge.graph.registry import get_op
from aneforge.kernel.analyze import analyze, completion_floor
from aneforge.kernel.lower import lower, region_nodes
from aneforge.kernel.recompute import template_cost


def _program(name: str, seq_len: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "minilm":
            from aneforge.models import minilm

            return minilm().program(seq_len=seq_len)
        from aneforge.models import light

        return light.build_light(name, weights="seeded").program


def _fused(nodes) -> list[str]:
    """The placement a fusing compiler starts from: elementwise ops and movements
    inlined into their readers, reductions, windows and contractions materialized."""
    light = {"elementwise", "index"}
    return [
        "inline" if (get_op(n.op).nest and get_op(n.op).nest.kind in light) else "materialize"
        for n in nodes.intermediates
    ]


def _legs(s) -> str:
    if s.exact:
        return "exact"
    flops = "~" if s.flops_approx else "="
    nbytes = "~" if s.bytes_approx else "="
    return f"flops {flops}, bytes {nbytes}{', opaque' if s.opaque else ''}"


def report(name: str, seq_len: int) -> dict:
    prog = _program(name, seq_len)
    start = time.perf_counter()
    rows, opaque = [], Counter()
    for region in prog.fused_regions:
        nodes = region_nodes(prog, region)
        mat = lower(prog, region)
        fused = lower(prog, region, _fused(nodes))
        s_mat, s_fused = analyze(mat.code), analyze(fused.code)
        temps = {b.name for b in mat.code.buffers if b.kind == "temp"}
        floor = completion_floor(mat.code, temps)
        graph = sum(node_flops(n) for n in region.nodes)
        # the graph's rule counts 2 * products; the loop walk also adds each bias once
        contract = sum(
            (template_cost(prog, region, n).flops - (len(n.srcs) == 3)) * max(1, n.size)
            for n in region.nodes
            if get_op(n.op).nest is not None and get_op(n.op).nest.kind == "contract"
        )
        rows.append((region, s_mat, s_fused, floor, graph, contract))
        opaque.update(op for op, _ in mat.opaque)
    took = time.perf_counter() - start
    flops = sum(r[1].flops for r in rows)
    graph = sum(r[4] for r in rows)
    contract = sum(r[5] for r in rows)
    print(f"== {name}: {len(rows)} fused region(s), lowered and analysed in {took:.2f} s")
    print(f"  FLOPs: loop walk {flops:.4g}, graph {graph:.4g} (ratio {flops / max(graph, 1):.4f})")
    print(
        f"  contractions' FLOPs less their bias adds: loop walk {contract}, graph {graph} "
        f"(equal: {contract == graph})"
    )
    for i, (region, s_mat, s_fused, floor, g, _) in enumerate(rows):
        print(
            f"  region {i}: {len(region.nodes)} nodes; MB moved: materialized "
            f"{s_mat.bytes / 1e6:.3f}, fused {s_fused.bytes / 1e6:.3f}, floor (all open) "
            f"{floor.bytes / 1e6:.3f}; FLOPs {s_mat.flops:.4g} (graph {g:.4g}); {_legs(s_mat)}"
        )
    exact = sum(r[1].exact for r in rows)
    print(f"  exact regions: {exact}/{len(rows)}; opaque ops: {dict(opaque) or 'none'}")
    return {
        "regions": len(rows),
        "flops_ratio": flops / max(graph, 1),
        "contraction_flops_equal": int(contract == graph),
        "exact_regions": exact,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,minilm")
    parser.add_argument("--seq-len", type=int, default=128, help="MiniLM's tokens")
    args = parser.parse_args(argv)
    results = {name: report(name, args.seq_len) for name in args.models.split(",")}
    for name, res in results.items():
        for key, value in res.items():
            print(
                f"RESULT {name}_{key}={value:.6g}"
                if isinstance(value, float)
                else f"RESULT {name}_{key}={value}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
