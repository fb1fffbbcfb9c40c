"""The ``check`` report: compile, emulate, compare with float64, estimate, per target.

:func:`check_report` is what ``aneforge check`` prints: a :class:`CheckReport`, a plain
dict (JSON-ready through :func:`aneforge.tables.json_safe`; docs/cli.md lists every
field) that also renders as a table in a notebook and a terminal.

The generic run compiles the graph without a target and runs it with the generic
numerics. Each target gets its own run: the graph compiled for that chip
(``compile(outputs, target=T)``) and emulated with its family's numerics (reduction
route, saturations; docs/numerics.md, "Per-chip numerics"). Every run is compared with
one float64 reference of the generic program on the same inputs (computed once): the
exact answer of the graph as built, so a lowering a target needs (sin/cos below A15)
counts as that target's error. A target the graph does not compile for reports its
preflight findings and no latency and no error figures.

Latencies are the analytic per-chip model's (``estimate_breakdown(prog, target=T)``):
per target for its own program, and for the generic program on ``DEFAULT_CHIP``
(:data:`aneforge.cost.estimate.DEFAULT_CHIP`, the M5 Pro the default model was measured
on). Their ``parts_us`` add up to ``estimate_us``. The target-free default model's
total stays as ``pruning_estimate_us``: the optimizer's pruning figure, not a latency.

Example:
    >>> import aneforge as af
    >>> from aneforge.report import check_report
    >>> x, y = af.nn.small_cnn()
    >>> rep = check_report("cnn", [x], [y], targets=["M1"])
    >>> rep["targets"][0]["arch"], rep["targets"][0]["outputs"][0]["cosine"] > 0.999
    ('h13', True)
    >>> rep["estimate"]["target"], rep["estimate"]["arch"]
    ('M5 Pro', 'h17s')
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from .analysis import fp16_divergence, range_analysis
from .compiler.preflight import preflight
from .cost.estimate import DEFAULT_CHIP, estimate_breakdown
from .driver import compile as compile_graph
from .errors import DispatchFloorWarning, OptionError, PreflightError
from .graph.ranges import check_range
from .graph.tensor import random_feed
from .limits import check_elements
from .metrics import compare
from .reference import reference
from .tables import TableMixin
from .targets.names import chip_key, resolve_target, tier_chips
from .targets.projection import measured_accuracy

#: Version of the JSON report's layout (docs/cli.md); bumped when a field changes meaning.
SCHEMA_VERSION = 1
#: The stages :func:`check_report` announces, in order (then two per target).
STAGES = ("compile", "emulate", "float64 reference", "estimate")


def describe_target(name) -> str:
    """A target with its architecture, tier and the chips of that tier, in words.

    Example:
        >>> describe_target("M1")
        'M1 (h13, A13 tier: M1 / A14 Bionic generation)'
        >>> describe_target("h14")
        'h14 (A14 tier: M2 / A15 Bionic generation)'
    """
    t = resolve_target(name)
    tier = f"{t.tier} tier: {tier_chips(t.family)}"
    label = str(name)
    return f"{label} ({tier})" if chip_key(label) == t.arch else f"{label} ({t.arch}, {tier})"


def _chip_fields(target) -> dict:
    t = resolve_target(target)
    return {
        "target": str(target),
        "description": describe_target(target),
        "arch": t.arch,
        "family": t.family,
        "tier": t.tier,
        "tier_chips": tier_chips(t.family),
    }


def _no_latency(target, findings: list[str]) -> dict:
    """A chip's estimate entry before (or without) a latency: compiles False."""
    error, chips = _published_error(target, resolve_target(target).arch)
    return {
        **_chip_fields(target),
        "compiles": False,
        "estimate_us": None,
        "bound": None,
        "parts_us": None,
        "dominant_nodes": [],
        "layers": [],
        "preflight": findings,
        "model_error": error,
        "model_error_chips": chips,
    }


def target_report(prog, target) -> dict:
    """One chip's estimate of ``prog``: latency, its parts, what bounds it, the dominant
    layers, the preflight findings and the cost model's published error on the chip.

    ``parts_us`` is :attr:`aneforge.cost.Estimate.parts_us` (floor, overhead, compute,
    bandwidth, cuts), which adds up to ``estimate_us``. ``layers`` is every layer's
    record (:meth:`aneforge.cost.Estimate.to_records`, in program order): their
    ``time_us`` plus the dispatch floors (``parts_us['floor']``) add up to
    ``estimate_us``. Where preflight finds a
    violation no lowering fixes, ``compiles`` is False and there is no latency
    (``estimate_us``, ``bound`` and ``parts_us`` are None).
    """
    t = resolve_target(target)
    findings = preflight(prog, t)
    entry = _no_latency(target, [str(v) for v in findings.violations])
    if findings.blocking:
        return entry
    est = estimate_breakdown(prog, target=t)
    entry.update(
        compiles=True,
        estimate_us=est.total_us,
        bound=est.bound,
        parts_us=dict(est.parts_us),
        dominant_nodes=[
            {
                "name": nc.name,
                "op": nc.op,
                "shape": list(nc.node.shape),
                "time_us": nc.time_us,
                "bound": nc.bound,
            }
            for nc in est.top_nodes(3)
        ],
        layers=est.to_records(),
    )
    return entry


def _published_error(target, arch: str) -> tuple[float | None, list[str]]:
    """The analytic model's typical error factor on published timings for ``target``:
    the held-out geometric-mean error of the named chip when it has published timings,
    else the geometric mean over the chips that map to ``arch``; ``None`` without any."""
    acc = measured_accuracy(arch)
    picked = [m for m in acc if chip_key(m["chip"]) == chip_key(str(target))] or acc
    if not picked:
        return None, []
    logs = [np.log(m.get("held_out_geomean_error", m["geomean_error"])) for m in picked]
    return float(np.exp(np.mean(logs))), [m["chip"] for m in picked]


def divergence_report(prog, targets) -> dict:
    """Predicted cross-chip fp16 divergence among ``targets`` (two or more MIL
    architectures; else ``worst`` is 'none'), from :func:`aneforge.fp16_divergence`."""
    found = (resolve_target(t) for t in targets)
    archs = sorted({t.arch for t in found if t.has_mil})
    if len(archs) < 2:
        return {"targets": archs, "worst": "none", "nodes": []}
    rep = fp16_divergence(prog, archs)
    return {"targets": archs, "worst": rep.worst, "nodes": [str(e) for e in rep.flagged]}


def output_errors(got, want, names) -> list[dict]:
    """Per output: index, name (``names[i]``, None when unnamed), shape, max_abs,
    rel_l2, cosine (:func:`compare`) and ``nonfinite_values``, the number of inf/nan
    values the run produced."""
    rows = []
    for i, (g, w) in enumerate(zip(got, want)):
        rows.append(
            {
                "index": i,
                "name": names[i] if i < len(names) else None,
                "shape": list(np.shape(g)),
                **compare(g, w),
                "nonfinite_values": int(np.size(g) - np.count_nonzero(np.isfinite(g))),
            }
        )
    return rows


def where_it_happened(prog, feeds, got, target=None) -> dict | None:
    """When a run's outputs hold an inf or a nan, or an output is all zeros, trace the
    run (:meth:`Program.trace`) and say where: the first non-finite node and the first
    node that collapsed to zeros, each as ``{'index', 'name', 'op', 'shape', 'inf',
    'nan', 'fed_by': [{'name', 'min', 'max'}, ...]}``, with ``line``, a one-line
    summary. None when every output is finite and not all zeros (no trace is run)."""
    suspicious = any(not np.all(np.isfinite(g)) or (np.size(g) and not np.any(g)) for g in got)
    if not suspicious:
        return None
    by_id = dict(feeds)
    tr = prog.trace(*[by_id[id(t)] for t in prog.inputs], target=target)

    def record(hit):
        if hit is None:
            return None
        fed = [{"name": s.name, "min": s.lo, "max": s.hi} for s in tr.sources(hit)]
        return {"index": hit.index, "name": hit.name, "op": hit.op, "shape": list(hit.shape),
                "inf": hit.n_inf, "nan": hit.n_nan, "fed_by": fed}  # fmt: skip

    collapse = tr.first_collapse()
    line = tr.describe_first_nonfinite()
    if line is None and collapse is not None:
        line = (
            f"node %{collapse.index} '{collapse.name}' ({collapse.op}) turned non-zero "
            "inputs into all zeros: an overflow inside it, or an underflow"
        )
    return {
        "first_nonfinite": record(tr.first_nonfinite()),
        "first_collapse": record(collapse),
        "line": line,
    }


def declared_ranges(prog, input_ranges=None) -> dict:
    """{input name: (lo, hi) or None} of ``prog``'s inputs: the range each declares
    (``af.input(..., range=...)``), overridden by ``input_ranges`` (``{name: (lo, hi)}``,
    the key ``None`` for every input). An unknown name raises ``OptionError``.

    Example:
        >>> import aneforge as af
        >>> prog = af.compile(af.input((2,), name="x", range=(0, 1)) + 1.0)
        >>> declared_ranges(prog), declared_ranges(prog, {None: (-3, 3)})
        ({'x': (0.0, 1.0)}, {'x': (-3.0, 3.0)})
    """
    names = [t.name or f"input {i}" for i, t in enumerate(prog.inputs)]
    out = {n: t.attrs.get("range") for n, t in zip(names, prog.inputs)}
    given = dict(input_ranges or {})
    unknown = sorted(str(k) for k in given if k is not None and k not in out)
    if unknown:
        raise OptionError(
            f"--input-range names no input: {', '.join(unknown)}; the inputs are {', '.join(names)}"
        )
    for name in out:
        value = given.get(name, given.get(None))
        if value is not None:
            out[name] = check_range(value, f"--input-range {name}", OptionError)
    return out


def range_report(prog, ranges: dict, target=None) -> dict:
    """The range analysis of ``prog`` for the ``ranges`` of :func:`declared_ranges`:
    ``{'inputs': {name: [lo, hi] or None}, 'hazards': [...], 'flagged_share',
    'input_scale'}`` (hazards as :meth:`RangeHazard.to_record`). With no declared range
    nothing is analysed (an unknown input raises no hazard) and the lists are empty."""
    inputs = {n: None if r is None else list(r) for n, r in ranges.items()}
    if all(r is None for r in ranges.values()) and prog.inputs:
        return {"inputs": inputs, "hazards": [], "flagged_share": 0.0, "input_scale": 0}
    given = {i: r for i, r in enumerate(ranges.values()) if r is not None}
    rep = range_analysis(prog, input_ranges=given, target=target)
    return {
        "inputs": inputs,
        "hazards": [h.to_record() for h in rep.hazards],
        "flagged_share": rep.flagged_share(),
        "input_scale": rep.input_scale(),
    }


def check_seed(seed) -> int:
    """``seed`` if it is a whole number in [0, 2**64), else an OptionError.

    Example:
        >>> check_seed(7)
        7
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise OptionError(f"seed must be a whole number from 0 to 2**64 - 1, got {seed!r}")
    return int(seed)


def check_sizes(prog) -> None:
    """A :class:`~aneforge.errors.SizeLimitError` naming the first input or node of
    ``prog`` whose tensor would pass :func:`aneforge.limits.max_elements`: checked before
    ``check`` draws its random inputs and runs the emulator and the float64 reference,
    which hold every such tensor."""
    for t in prog.inputs:
        check_elements(t.shape, _input_label(t))
    for node in prog.nodes:
        check_elements(node.shape, f"check: node {prog.layer_name(node)!r} ({node.op})")


def _input_label(t) -> str:
    return f"check: random input {t.name or '(unnamed)'!r}"


def seeded_feeds(prog, ranges: dict, seed: int, given=None) -> list[tuple[int, np.ndarray]]:
    """(id(input), array) per input: the array ``given`` names it with (``{input name:
    array}``, of the input's shape), else uniform inside its range where one is
    declared, else standard normal; deterministic per seed (the random values of the
    other inputs do not depend on which are given). Each input's size is checked first
    (:func:`aneforge.limits.check_elements`)."""
    given = dict(given or {})
    names = [t.name for t in prog.inputs]
    unknown = [n for n in given if n not in names]
    if unknown:
        raise OptionError(f"check: input data for {unknown}, which the program does not "
                          f"take; its inputs are {names}")  # fmt: skip
    rng = np.random.default_rng(check_seed(seed))
    feeds = []
    for t, r in zip(prog.inputs, ranges.values()):
        check_elements(t.shape, _input_label(t))
        if t.dtype != "float16":  # ids, masks: whole numbers of the input's range
            value = random_feed(t, rng)
        elif r is None:
            value = rng.standard_normal(t.shape)
        else:
            value = rng.uniform(*r, size=t.shape)
        if t.name in given:
            value = np.asarray(given[t.name])
            if value.shape != tuple(t.shape):
                raise OptionError(f"check: input data for {t.name!r} has shape {value.shape}, "
                                  f"but the input is {tuple(t.shape)}")  # fmt: skip
        feeds.append((id(t), value))
    return feeds


def _as_list(result) -> list:
    return list(result) if isinstance(result, tuple) else [result]


def _measured_divergence(runs: dict[str, list]) -> dict | None:
    """How far the compiled targets' emulated outputs are apart (None below two)."""
    if len(runs) < 2:
        return None
    per_target = list(runs.values())
    identical = all(
        np.array_equal(a, b, equal_nan=True)
        for other in per_target[1:]
        for a, b in zip(per_target[0], other)
    )
    spread = 0.0
    with np.errstate(all="ignore"):
        for outs in zip(*per_target):
            stack = np.stack([np.asarray(o, dtype=np.float64) for o in outs])
            gap = np.max(stack, axis=0) - np.min(stack, axis=0)
            spread = max(spread, float(np.max(gap))) if gap.size else spread
    return {"targets": list(runs), "identical": bool(identical), "max_abs": spread}


def short_label(entry: dict) -> str:
    """A target entry's name and architecture for table cells, e.g. ``'M1 (h13)'``
    (:func:`describe_target` gives the long form with the tier, printed once per table).

    Example:
        >>> short_label({"target": "M1", "arch": "h13"}), short_label({"target": "h13",
        ...     "arch": "h13"})
        ('M1 (h13)', 'h13')
    """
    name, arch = entry["target"], entry["arch"]
    return name if chip_key(name) == arch else f"{name} ({arch})"


class CheckReport(dict, TableMixin):
    """The result of :func:`check_report`: a dict of plain data (docs/cli.md) that
    renders as a table (``to_records``: one row per run and output)."""

    @property
    def title(self) -> str:
        return (
            f"{self['model']}: {self['ops']} ops, {self['flops'] / 1e6:.1f} MFLOP, "
            f"{self['regions']} region(s), {self['cuts']} cut(s)"
        )

    def to_records(self) -> list[dict]:
        """One row per run (generic, then each target) and output: errors and latency.

        The generic run's latency is :data:`DEFAULT_CHIP`'s; a target the graph does not
        compile for gets one row with no figures."""
        chip = self["estimate"]
        runs = [(f"generic (latency on {chip['target']})", chip, self["outputs"])]
        runs += [(short_label(t), t, t["outputs"]) for t in self["targets"]]
        records = []
        for label, est, outs in runs:
            bound = est["bound"] if est["compiles"] else "does not compile"
            if not outs:
                records.append({"run": label, "bound": bound})
            for out in outs:
                records.append(
                    {
                        "run": label,
                        "output": out["index"] if out["name"] is None else out["name"],
                        "shape": "x".join(map(str, out["shape"])),
                        "max abs error": out["max_abs"],
                        "relative L2": out["rel_l2"],
                        "cosine": out["cosine"],
                        "non-finite values": out["nonfinite_values"],
                        "latency us": est["estimate_us"],
                        "bound": bound,
                    }
                )
        return records

    def target_records(self) -> list[dict]:
        """One row per target: latency, its parts, the model error, the dominant nodes."""
        rows = []
        for t in self["targets"]:
            parts = t["parts_us"] or {}
            rows.append(
                {
                    "target": short_label(t),
                    "compiles": "yes" if t["compiles"] else "no",
                    "latency us": t["estimate_us"],
                    "bound": t["bound"],
                    **{f"{k} us": v for k, v in parts.items()},
                    "model error (x)": t["model_error"],
                    "dominant nodes": ", ".join(
                        f"{n['name'] or n['op']} {'x'.join(map(str, n['shape']))}"
                        for n in t["dominant_nodes"]
                    ),
                }
            )
        return rows

    def layer_tables(self, n: int) -> list[tuple[str, list[dict]]]:
        """The ``n`` slowest layers per target (the default chip's run when the report
        has no targets): one ``(title, rows)`` per estimate, slowest first. A row has
        the layer's name, op, shape, time, share of the total (%), bound, MFLOP and MB;
        a target that does not compile gets a title saying so and no rows."""
        entries = self["targets"] or [self["estimate"]]
        tables = []
        for est in entries:
            if not est["compiles"]:
                tables.append((f"{self['model']} on {est['description']}: no layers, "
                               "it does not compile there", []))  # fmt: skip
                continue
            total, layers = est["estimate_us"], est["layers"]
            slowest = sorted(layers, key=lambda r: -r["time_us"])[:n]
            title = (
                f"{self['model']}: the {len(slowest)} slowest of {len(layers)} layers on "
                f"{est['description']}: {total:.0f} us in all, "
                f"{est['parts_us']['floor']:.0f} us of it dispatch floor"
            )
            rows = [
                {
                    "layer": r["name"],
                    "op": r["op"],
                    "shape": "x".join(map(str, r["shape"])),
                    "time us": r["time_us"],
                    "% of total": float(f"{100 * r['time_us'] / total:.2g}") if total else None,
                    "bound": r["bound"],
                    "MFLOP": r["flops"] / 1e6,
                    "MB": r["bytes"] / 1e6,
                }
                for r in slowest
            ]
            tables.append((title, rows))
        return tables


def _quiet_compile(outputs, opt, target=None, output_names=None):
    with warnings.catch_warnings():  # the report shows what bounds the program instead
        warnings.simplefilter("ignore", DispatchFloorWarning)
        return compile_graph(list(outputs), opt=opt, target=target, output_names=output_names)


def _target_run(target, outputs, opt, feeds, want, step, cache, output_names=None, ranges=None):
    """One target's entry and its emulated outputs (None where it does not compile).

    ``cache`` holds, per architecture, the program and outputs already computed (two
    names of one architecture compile and run alike). Returns the target's entry and its
    emulated outputs (None where it does not compile)."""
    arch = resolve_target(target).arch
    start = time.perf_counter()
    if arch not in cache:
        step(f"{target}: compile")
        try:
            prog = _quiet_compile(outputs, opt, target, output_names)
        except PreflightError as err:
            cache[arch] = (None, None, err)
        else:
            step(f"{target}: emulate")
            by_id = dict(feeds)
            cache[arch] = (prog, _as_list(prog(*[by_id[id(t)] for t in prog.inputs])), None)
    prog, got, err = cache[arch]
    if prog is None:
        found = [str(v) for v in getattr(err.report, "violations", [])] or [str(err)]
        entry = dict(_no_latency(target, found), lowered={}, outputs=[], ranges=None)
    else:
        entry = target_report(prog, target)
        record = prog.passes.get("preflight") or {}
        entry["preflight"] = list(record.get("violations", entry["preflight"]))
        entry["lowered"] = dict(record.get("lowered", {}))
        entry["outputs"] = output_errors(got, want, prog.output_names)
        entry["where"] = where_it_happened(prog, feeds, got, prog.target)
        entry["ranges"] = range_report(prog, ranges or {}, target=prog.target)
    entry["seconds"] = time.perf_counter() - start
    return entry, got


def check_report(
    name,
    inputs,
    outputs,
    seed: int = 0,
    targets=(),
    opt="routes",
    progress=None,
    output_names=None,
    input_ranges=None,
    input_data=None,
) -> CheckReport:
    """Compile ``outputs``, emulate on seeded inputs, compare with float64, estimate;
    then the same for each target, compiled and emulated for that chip.

    Args:
        name: a label for the report.
        inputs: the graph's input tensors (their shapes seed the random feeds).
        outputs: the output tensors.
        seed: seed of the standard-normal inputs (the same feeds for every run).
        targets: architectures or chip names; each gets its own compile and run.
        opt: the compile level.
        output_names: the outputs' names (an ONNX graph's), as ``compile`` takes them.
        input_ranges: ``{input name: (lo, hi)}`` (key ``None``: every input), on top
            of the ranges the inputs declare: inputs with a range are fed uniform values
            inside it (else standard normal) and the range analysis reports its hazards
            (``ranges``) for the generic run and each target.
        input_data: ``{input name: array}`` fed to those inputs instead of random
            values (each of the input's shape; the CLI's ``--input``).
        progress: optional callable ``progress(stage)`` told when each of
            :data:`STAGES` starts, then ``'<target>: compile'`` and
            ``'<target>: emulate'`` per target (the CLI draws a progress bar with it).

    Returns:
        A :class:`CheckReport` (docs/cli.md lists its fields). Deterministic per seed.
        An unknown target or a seed outside [0, 2**64) raises
        :class:`~aneforge.errors.OptionError` before any work; an input or node past
        :func:`aneforge.limits.max_elements` raises
        :class:`~aneforge.errors.SizeLimitError` before any allocation.
    """
    step = progress or (lambda stage: None)
    targets = list(targets)
    for t in [*targets, DEFAULT_CHIP]:
        resolve_target(t)
    seed = check_seed(seed)
    for t in inputs:
        check_elements(t.shape, _input_label(t))
    start = time.perf_counter()
    step("compile")
    prog = _quiet_compile(outputs, opt, output_names=output_names)
    check_sizes(prog)
    compiled = time.perf_counter()
    ranges = declared_ranges(prog, input_ranges)
    feeds = seeded_feeds(prog, ranges, seed, input_data)
    step("emulate")
    got = _as_list(prog(*[f for _, f in feeds]))
    emulated = time.perf_counter()
    step("float64 reference")
    want = _as_list(reference(prog, *[f for _, f in feeds]))
    done = time.perf_counter()
    step("estimate")
    default = target_report(prog, DEFAULT_CHIP)
    pruning = estimate_breakdown(prog).total_us
    cache: dict = {}
    entries, runs = [], {}
    for t in targets:
        entry, outs = _target_run(t, outputs, opt, feeds, want, step, cache, output_names, ranges)
        entries.append(entry)
        if outs is not None:
            runs.setdefault(str(t), outs)
    divergence = divergence_report(prog, targets)
    divergence["measured"] = _measured_divergence(runs)
    return CheckReport(
        model=name,
        ops=prog.op_count,
        flops=prog.flops,
        regions=len(prog.fused_regions),
        cuts=len(prog.cuts),
        outputs=output_errors(got, want, prog.output_names),
        where=where_it_happened(prog, feeds, got),
        ranges=range_report(prog, ranges),
        estimate=default,
        pruning_estimate_us=pruning,
        targets=entries,
        divergence=divergence,
        seconds={
            "compile": compiled - start,
            "emulate": emulated - compiled,
            "reference": done - emulated,
            "targets": sum(e["seconds"] for e in entries),
        },
    )


def check_failures(report: dict, max_error: float | None = None) -> list[str]:
    """Why ``report`` fails the check: one phrase per failing output and run.

    A run fails where an output holds a non-finite value (or an error figure is not
    finite), or where ``max_error`` is given and an output's ``rel_l2`` exceeds it.
    Applied to the generic run and to every target that compiles.

    Example:
        >>> rep = {"model": "m", "outputs": [{"index": 0, "name": None, "rel_l2": 0.2,
        ...        "max_abs": 1.0, "cosine": 0.9, "nonfinite_values": 0}], "targets": []}
        >>> check_failures(rep, max_error=0.1)
        ['m output 0 (generic): rel_l2 0.2 > max error 0.1']
    """
    runs = [("generic", report["outputs"])]
    runs += [(t["description"], t["outputs"]) for t in report["targets"] if t["compiles"]]
    failures = []
    for run, outs in runs:
        for out in outs:
            label = out["index"] if out["name"] is None else out["name"]
            where = f"{report['model']} output {label} ({run})"
            figures = (out["max_abs"], out["rel_l2"], out["cosine"])
            if out["nonfinite_values"]:
                failures.append(f"{where}: {out['nonfinite_values']} non-finite value(s)")
            elif not all(math.isfinite(v) for v in figures):
                failures.append(f"{where}: non-finite error figures (rel_l2 {out['rel_l2']})")
            elif max_error is not None and out["rel_l2"] > max_error:
                failures.append(f"{where}: rel_l2 {out['rel_l2']:.3g} > max error {max_error:g}")
    return failures
