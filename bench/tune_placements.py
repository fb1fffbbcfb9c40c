"""The tuner's placement search on real regions: how much the bound prunes, the time it
saves, and what the tuned placements buy over the compiled regions' default.

Regions (each program's fused regions of at least ``MIN_WORK`` output elements):

- ``elementwise``: six elementwise ops and a row sum over a (1024, 1024) input (six
  free intermediates: its 64 candidates fit the per-component limit);
- ``minilm_block``: a MiniLM-sized pre-norm transformer block built in-graph
  (``af.nn.transformer_block``: 128 tokens, width 384, 12 heads);
- ``resnet50``: the ResNet-50 light model (``aneforge.models.light``, seeded weights),
  one fused region of 176 nodes.

Each is tuned by :func:`aneforge.optimizer.placement_tune.tune_placements` (what
``af.tune`` does on the emulator) twice, as a machine would be set up:

1. *calibrate*: under this machine's envelope when one is configured (``aneforge
   fit-envelope``), else under one fitted here to STREAM probes (``aneforge
   calibrate-bandwidth``'s, keeping their bandwidth leg: their FLOP rate is NumPy's
   fp16, no bound on compiled kernels), every timing logged as a calibration row;
2. *tune*: under the envelope fitted to those rows (``fit_envelope``, margin 1): the
   tightest honest bound these measurements give.

A third, *dishonest* pass (the fitted peaks divided by 1000) over the first region
shows the other side: it prunes every candidate after each component's default while
the violation warning fires.

Per region it prints the candidates, how many each pass measured, pruned or left
unexplored by the per-component limit, the bound violations, the time the second
search spent against the time exhaustive search would have spent (every candidate at
its mean time per measured candidate) and the whole region's time under the default
placement against the tuned one: after one untimed run of each, the two plans run
alternately ``--repeats`` times on the same inputs, medians compared (their outputs are
checked bit for bit first).

The first pass compiles the candidates' kernels (later runs load them from the kernel
cache; ``--cold`` uses an empty one). Last lines::

    RESULT tune_placements_<region>_speedup=<default region time / tuned>
    RESULT tune_placements_pruned_share=<pruned / candidates, second pass, all regions>
    RESULT tune_placements_search_saving=<exhaustive estimate / search time, second pass>

Run from the repository root:

    PYTHONPATH=src python3 bench/tune_placements.py [--regions elementwise,resnet50]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REGIONS = ("elementwise", "minilm_block", "resnet50")


def _programs(names):
    import aneforge as af
    from aneforge.compiler.program import Program
    from aneforge.models import light

    for name in names:
        if name == "elementwise":
            x = af.input((1024, 1024), name="x")
            y = ((x * 0.5 + 0.25).relu() * x.exp()).tanh().sum(axis=-1)
            yield name, Program.from_outputs([y])
        elif name == "minilm_block":
            _, y = af.nn.transformer_block(seed=0, seq=128, width=384, heads=12)
            yield name, Program.from_outputs([y])
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield name, light.build_light("resnet50", weights="seeded").program


def _envelope():
    from aneforge.kernel.envelope import Envelope, fit_envelope
    from aneforge.kernel.stream import bandwidth_rows
    from aneforge.optimizer.placement_tune import machine_envelope

    env = machine_envelope()
    if env.peak_flops is not None or env.peak_bandwidth is not None:
        return env, "this machine's envelope file"
    rows = bandwidth_rows(sizes=tuple(1 << k for k in range(12, 23, 2)), repeats=3)
    fitted = fit_envelope(rows)["cpu"]
    return Envelope("cpu", None, fitted.peak_bandwidth), "fitted here to STREAM probes"


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, np.float16), np.asarray(b, np.float16)
    return a.shape == b.shape and np.array_equal(a.view(np.uint16), b.view(np.uint16))


def _median_pair(run_a, run_b, repeats: int) -> tuple[float, float]:
    run_a(), run_b()
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((run_a, ta), (run_b, tb)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(ta), statistics.median(tb)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--regions", default=",".join(REGIONS))
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cold", action="store_true", help="use an empty kernel cache")
    opts = parser.parse_args(argv)
    names = [n.strip() for n in opts.regions.split(",") if n.strip()]
    unknown = sorted(set(names) - set(REGIONS))
    if unknown:
        parser.error(f"unknown region(s) {unknown}; choose among {', '.join(REGIONS)}")
    if opts.cold:
        os.environ["ANEFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="aneforge-cold-")
    try:
        import aneforge  # noqa: F401
    except ImportError:  # not installed: use the checkout this script lives in
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from aneforge.emulator.interpreter import fp16_kernel
    from aneforge.errors import BoundViolationWarning
    from aneforge.kernel import compiled
    from aneforge.kernel.calibration import read_log
    from aneforge.kernel.envelope import fit_envelope
    from aneforge.optimizer import placement_tune
    from aneforge.optimizer.measure import seeded_inputs

    if not compiled.enabled():
        print("compiled regions are off (numba missing or ANEFORGE_COMPILED_REGIONS=0)")
        return 1
    first, source = _envelope()
    print(f"calibrate under {source}: peak_flops={first.peak_flops}, "
          f"peak_bandwidth={first.peak_bandwidth:.4g} B/s")  # fmt: skip
    print(
        f"per component at most {placement_tune.LEAF_LIMIT} candidates; best of "
        f"{placement_tune.REPEATS} runs each; ties within {placement_tune.TIE_MARGIN:.0%}"
    )
    programs = [(name, prog, seeded_inputs(prog)) for name, prog in _programs(names)]
    log = Path(tempfile.mkdtemp(prefix="aneforge-bench-")) / "calibration.tsv"
    passes = {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", BoundViolationWarning)
        for name, prog, feeds in programs:
            start = time.perf_counter()
            _, report = placement_tune.tune_placements(
                prog, feeds, envelope=first, calibration_file=log
            )
            passes[name, 1] = report, time.perf_counter() - start
        rows = read_log(log).rows
        second = fit_envelope(rows)["cpu"]
        print(
            f"tune under the fit to the calibrate pass's {len(rows)} rows: "
            f"peak_flops={second.peak_flops:.4g} FLOP/s, "
            f"peak_bandwidth={second.peak_bandwidth:.4g} B/s, slack {second.slack:.3g}"
        )
        tuned = {}
        for name, prog, feeds in programs:
            start = time.perf_counter()
            tuned[name], report = placement_tune.tune_placements(prog, feeds, envelope=second)
            passes[name, 2] = report, time.perf_counter() - start
        dishonest = dataclasses.replace(
            second, peak_flops=second.peak_flops / 1000, peak_bandwidth=second.peak_bandwidth / 1000
        )
        _, check = placement_tune.tune_placements(*programs[0][1:], envelope=dishonest)
    warned = sum(issubclass(w.category, BoundViolationWarning) for w in seen)
    print(f"dishonest check ({programs[0][0]}, the fitted peaks / 1000): "
          + "; ".join(f"region {c['region']}: measured {c['measured']} (one per component), "
                      f"pruned {c['pruned']} of {c['candidates']}, violations {c['violations']}"
                      for c in check))  # fmt: skip
    kernel = fp16_kernel(True, None)
    speedups, pruned, candidates, searched, exhaustive = [], 0, 0, 0.0, 0.0
    for name, prog, feeds in programs:
        report, wall = passes[name, 2]
        regions = [g for g in prog.fused_regions if g.index in {r["region"] for r in report}]
        values = placement_tune.region_values(prog, feeds, None, regions)
        for region in regions:
            r1 = next(r for r in passes[name, 1][0] if r["region"] == region.index)
            r = next(r for r in report if r["region"] == region.index)
            choice = tuned[name].placement(region.index)
            default = compiled.plan_region(prog, region, kernel)
            chosen = compiled.plan_region(prog, region, kernel, None, choice)
            got_d, got_t = compiled.run_plan(default, values), compiled.run_plan(chosen, values)
            if not all(_same_bits(got_t[k], got_d[k]) for k in got_d):
                print(f"{name}: region {region.index}: tuned and default outputs differ")
                return 1
            t_default, t_tuned = _median_pair(
                lambda p=default, v=values: compiled.run_plan(p, v),
                lambda p=chosen, v=values: compiled.run_plan(p, v),
                opts.repeats,
            )  # fmt: skip
            leaf = r["search_s"] / max(1, r["measured"])
            label = name if len(regions) == 1 else f"{name}_r{region.index}"
            print(f"\n{label}: region {region.index}, {len(region.nodes)} nodes, "
                  f"{r['components']} component(s), {r['candidates']} candidates")  # fmt: skip
            for k, rr in ((1, r1), (2, r)):
                print(f"  pass {k}: measured {rr['measured']}, pruned {rr['pruned']}, "
                      f"unexplored {rr['unexplored']}, violations {rr['violations']}; "
                      f"{rr['search_s']:.1f} s")  # fmt: skip
            print(
                f"  pass 2 search {r['search_s']:.2f} s ({leaf * 1e3:.0f} ms per measured "
                f"candidate); exhaustive estimate {r['candidates'] * leaf:.2f} s"
            )
            why = "; the search's vector lost on the whole region" if r["reverted"] else ""
            print(f"  region time: default {t_default * 1e3:.2f} ms, tuned {t_tuned * 1e3:.2f} "
                  f"ms ({r['changed']} intermediate(s) changed{why})")  # fmt: skip
            speedups.append((label, t_default / t_tuned))
            pruned += r["pruned"]
            candidates += r["candidates"]
            searched += r["search_s"]
            exhaustive += r["candidates"] * leaf
    print(
        f"\nBoundViolationWarning raised {warned} time(s) in all (the dishonest check's included)"
    )
    print()
    for label, speedup in speedups:
        print(f"RESULT tune_placements_{label}_speedup={speedup:.3f}")
    print(f"RESULT tune_placements_pruned_share={pruned / max(1, candidates):.3f}")
    print(f"RESULT tune_placements_search_saving={exhaustive / max(searched, 1e-9):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
