"""The ``check`` report: compile, emulate, compare with float64, estimate per target.

:func:`check_report` is what ``aneforge check`` prints, as plain data (JSON-ready), for
any graph: the bundled examples today, imported models later.

Example:
    >>> import aneforge as af
    >>> from aneforge.report import check_report
    >>> x, y = af.nn.small_cnn()
    >>> rep = check_report("cnn", [x], [y], targets=["M1"])
    >>> rep["targets"][0]["arch"], rep["outputs"][0]["cosine"] > 0.999
    ('h13', True)
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .errors import DispatchFloorWarning


def target_report(prog, target) -> dict:
    """Per-target part of the report: latency, what bounds it, the dominant nodes."""
    from .cost.analytic import analytic_estimate
    from .cost.estimate import _resolve

    t = _resolve(target)
    est = analytic_estimate(prog, t)
    fused = [r for r in est["regions"] if r["kind"] == "fused"]
    parts = {
        "floor": sum(r["overhead_us"] for r in fused),
        "compute": sum(r["compute_us"] for r in fused if r["bound"] == "compute"),
        "bandwidth": sum(r["memory_us"] for r in fused if r["bound"] == "bandwidth"),
        "cuts": sum(r["time_us"] for r in est["regions"] if r["kind"] == "bridge"),
    }
    from .compiler.preflight import preflight

    findings = preflight(prog, t)
    error, chips = _published_error(target, t.arch)
    terms = [term for r in fused for term in r["nodes"]]
    terms.sort(key=lambda term: -max(term["compute_us"], term["memory_us"]))
    return {
        "target": str(target),
        "arch": t.arch,
        "family": t.family,
        "estimate_us": est["total_us"],
        "bound": max(parts, key=parts.get),
        "parts_us": parts,
        "dominant_nodes": [
            {
                "op": term["node"].op,
                "shape": list(term["node"].shape),
                "compute_us": term["compute_us"],
                "memory_us": term["memory_us"],
            }
            for term in terms[:3]
        ],
        "preflight": [str(v) for v in findings.violations],
        "model_error": error,
        "model_error_chips": chips,
    }


def _published_error(target, arch: str) -> tuple[float | None, list[str]]:
    """The analytic model's typical error factor on published timings for ``target``:
    the held-out geometric-mean error of the named chip when it has published timings,
    else the geometric mean over the chips that map to ``arch``; ``None`` without any."""
    from .targets.names import chip_key
    from .targets.projection import measured_accuracy

    acc = measured_accuracy(arch)
    picked = [m for m in acc if chip_key(m["chip"]) == chip_key(str(target))] or acc
    if not picked:
        return None, []
    logs = [np.log(m.get("held_out_geomean_error", m["geomean_error"])) for m in picked]
    return float(np.exp(np.mean(logs))), [m["chip"] for m in picked]


def divergence_report(prog, targets) -> dict:
    """Cross-chip fp16 divergence among ``targets`` (needs two or more MIL targets)."""
    from .analysis import fp16_divergence
    from .cost.estimate import _resolve

    archs = sorted({_resolve(t).arch for t in targets if _resolve(t).family >= 2})
    if len(archs) < 2:
        return {"targets": archs, "worst": "none", "nodes": []}
    rep = fp16_divergence(prog, archs)
    return {"targets": archs, "worst": rep.worst, "nodes": [str(e) for e in rep.flagged]}


STAGES = ("compile", "emulate", "float64 reference", "estimate")


def check_report(
    name, inputs, outputs, seed: int = 0, targets=(), opt="routes", progress=None
) -> dict:
    """Compile ``outputs``, emulate on seeded inputs, compare with float64, estimate.

    Args:
        name: a label for the report.
        inputs: the graph's input tensors (their shapes seed the random feeds).
        outputs: the output tensors.
        seed: seed of the standard-normal inputs.
        targets: architectures or marketing names to estimate for.
        opt: the compile level.
        progress: optional callable ``progress(stage)`` told when each of
            :data:`STAGES` starts (the CLI draws a progress bar with it).
    """
    step = progress or (lambda stage: None)
    from .compiler import compile as compile_graph
    from .cost.estimate import estimate_breakdown
    from .metrics import compare
    from .reference import reference

    start = time.perf_counter()
    step("compile")
    with warnings.catch_warnings():  # the report shows what bounds the program instead
        warnings.simplefilter("ignore", DispatchFloorWarning)
        prog = compile_graph(list(outputs), opt=opt)
    compiled = time.perf_counter()
    rng = np.random.default_rng(seed)
    feeds = [rng.standard_normal(t.shape) for t in prog.inputs]
    step("emulate")
    got = prog(*feeds)
    emulated = time.perf_counter()
    step("float64 reference")
    want = reference(prog, *feeds)
    done = time.perf_counter()
    step("estimate")
    est = estimate_breakdown(prog)
    outs = list(got) if isinstance(got, tuple) else [got]
    wants = list(want) if isinstance(want, tuple) else [want]
    return {
        "model": name,
        "ops": prog.op_count,
        "flops": prog.flops,
        "regions": len(prog.fused_regions),
        "cuts": len(prog.cuts),
        "estimate_us": est.total_us,
        "bound": est.bound,
        "outputs": [
            dict(index=i, shape=list(o.shape), **compare(o, w))
            for i, (o, w) in enumerate(zip(outs, wants))
        ],
        "targets": [target_report(prog, t) for t in targets],
        "divergence": divergence_report(prog, targets),
        "seconds": {
            "compile": compiled - start,
            "emulate": emulated - compiled,
            "reference": done - emulated,
        },
    }
