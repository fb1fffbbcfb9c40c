"""``tune``: measured autotuning over the graph's variants (opt=2 / 'max').

1. Build the distinct variants (lossless ones always; the lossy int8 ones and the
   weight-compression ones, ``int4`` / ``auto``, only when ``atol`` could admit them,
   i.e. above the fp16-noise default).
2. Order them by the cost model and prune those predicted worse than ``prune_factor`` x
   the best prediction; keep at most ``budget``.
3. Run the ``opt=0`` baseline and every kept variant on the device; a variant is valid
   when ``max|out - baseline| / max|baseline| <= atol`` on every output.
4. Choose the fastest valid lossless variant; a lossy one wins only when it is valid and
   at least ``min_lossy_speedup`` x faster than that (among equally fast lossy ones, the
   most accurate).
5. Cache the choice under a structural hash of (graph, input shapes, device, options):
   a cache hit rebuilds the variant by name with no measurement. The entry is checked
   against this call's own gate first (the cache is untrusted): a lossless variant is
   taken as is; a lossy one only when this call admits lossy variants (``atol`` above
   the default, declared ranges that admit int8) and, re-run against the baseline, it
   still meets ``atol``. An entry that fails is a warning and the graph is re-tuned, so
   a default call never returns a lossy program.

6. On the emulator (its compiled fused regions), the chosen program's placement vectors
   are tuned too (:mod:`~aneforge.optimizer.placement_tune`: branch and bound per
   region, pruned under this machine's envelope, ties to the default placement); they
   are cached in the entry (``placements``) and re-applied on a hit without measuring.
   An entry written before placements were tuned gets them tuned and is rewritten.
   With ``calibration_file=`` (or ``$ANEFORGE_CALIBRATION_FILE``) every placement
   timing is appended to that log as one calibration row.

With ``target_error=E`` it is precision-aware tuning instead
(:func:`~aneforge.optimizer.precision_tune.tune_precision`): the cheapest candidate whose
measured error meets ``E``. Either way ``tune`` returns a Program, its report in
``prog.tune_report``; the tuned program's ``prog.report`` holds the records of the
chosen variant's pipeline. ``compile(opt=2)`` runs it as the pass ``tune::measure``.

Example:
    >>> import numpy as np, tempfile, aneforge as af
    >>> x = af.input((4, 16))
    >>> prog = af.tune(x @ np.ones((16, 8)), device=af.SimulatedANE(), cache_dir=tempfile.mkdtemp())
    >>> prog.tune_report["variant"]
    'native'
"""

from __future__ import annotations

import inspect

from ..compiler.program import PassReport, Program
from ..cost.estimate import estimate
from ..devices import get_device, numerics_target
from ..errors import OptionError
from ..graph.hashing import structural_hash
from ..graph.rewrite import BIT_IDENTICAL, LOSSY
from ..graph.tensor import Tensor
from . import variants as variant_lib
from .cache import TuneCache
from .measure import DEFAULT_ATOL, MIN_LOSSY_SPEEDUP, device_id, relative_deviation, seeded_inputs
from .passes import Option, PassResult, PassState, register_pass
from .placement_tune import applies, tune_placements
from .precision_tune import tune_precision


def _from_cache(store, key, hit, outs, atol, dev, baseline_prog, feeds):
    """The program of cache entry ``hit`` if it passes this call's gate (module
    docstring, step 5), else None with one warning naming the entry and the reason.
    What is lossy is decided by the rebuilt variant, never by the entry's claims."""
    name = hit["variant"]
    lossless_names = variant_lib.LOSSLESS
    lossless_only = (
        f"and this call admits lossless variants only (atol={atol!r}, lossy needs > {DEFAULT_ATOL})"
    )
    problem = variant = error = None
    if name not in lossless_names + variant_lib.LOSSY + variant_lib.COMPRESSED:
        problem = f"names unknown variant {name!r:.40}"
    elif name not in lossless_names and not atol > DEFAULT_ATOL:
        problem = f"names the lossy variant {name!r}, {lossless_only}"
    elif name not in lossless_names and not variant_lib.int8_admissible(outs):
        problem = (
            f"names the weight-quantized variant {name!r}, which the inputs' declared "
            "ranges do not admit"
        )
    else:
        variant = variant_lib.build_variant(outs, name)
        prog = Program.from_outputs(variant.outputs)
        if not variant.lossless and not atol > DEFAULT_ATOL:
            problem = f"names {name!r}, which is not bit-identical on this graph, {lossless_only}"
        elif not variant.lossless:  # re-validated, never trusted
            error = relative_deviation(dev.run(prog, feeds), dev.run(baseline_prog, feeds))
            if not error <= atol:
                problem = f"names {name!r}, whose error {error:.3g} now exceeds atol={atol!r}"
    if problem is not None:
        path = store.path(key)
        store.warn(path, f"ignoring tuning cache entry {path}: it {problem}; re-tuning", 4)
        return None
    report = dict(hit, lossless=variant.lossless, cached=True)
    if error is not None:
        report["errors"] = {**hit.get("errors", {}), name: error}
    return _tuned(prog, variant, report)


def _placed(prog: Program, dev, feeds, calibration_file) -> tuple[Program, dict]:
    """``prog`` with its placements tuned on ``dev`` and the report entries saying so
    (nothing for a device whose times they do not change)."""
    if not applies(dev):
        return prog, {}
    placed, search = tune_placements(
        prog, feeds, numerics_target(dev, prog), calibration_file=calibration_file
    )
    entries = {"placements": [[i, list(v)] for i, v in placed.placements]}
    return placed, dict(entries, placement_search=search)


def _placed_hit(store, key, hit, prog: Program, dev, feeds, calibration_file) -> Program:
    """The cache hit ``prog`` with the entry's placements re-applied (emulator only);
    an entry without them (or whose placements do not fit the program: a warning) has
    them tuned and is rewritten."""
    if not applies(dev):
        return prog
    if "placements" in hit:
        try:
            return prog.with_placements([tuple(pair) for pair in hit["placements"]])
        except OptionError as err:
            path = store.path(key)
            store.warn(path, f"ignoring the placements of tuning cache entry {path} ({err}); "
                             "re-tuning them", 4)  # fmt: skip
    placed, entries = _placed(prog, dev, feeds, calibration_file)
    store.put(key, dict(hit, **entries))
    report = dict(prog.tune_report, **entries)
    return placed.replace(report=PassReport(prog.report.pipeline, prog.report.records, report))


def _tuned(prog: Program, variant, report: dict) -> Program:
    """``prog`` (of ``variant``) as the tuner's result: opt=2, its report carrying the
    variant pipeline's records and the tuner's report."""
    passes = PassReport(variant.passes.pipeline, variant.passes.records, report)
    return prog.replace(opt=2, report=passes)


def tune(
    out,
    budget: int = 8,
    inputs=None,
    atol: float = DEFAULT_ATOL,
    min_lossy_speedup: float = MIN_LOSSY_SPEEDUP,
    prune_factor: float = 1.5,
    device=None,
    cache: bool = True,
    cache_dir=None,
    target_error=None,
    allow_paired: bool = False,
    calibration_file=None,
):
    """Measure the graph's variants on ``device`` and return the fastest correct one.

    Args:
        out: a Tensor or a list of Tensors.
        budget: the most variants measured.
        inputs: arrays to validate and time with (default: seeded standard normals).
        atol: accepted ``max|delta| / max|ref|`` against the ``opt=0`` baseline.
        min_lossy_speedup: how much faster a lossy variant must be to be chosen.
        prune_factor: variants predicted slower than this x the best are not measured.
        device: a device name or Device (default: the emulator).
        cache / cache_dir: use the on-disk tuning cache (see ``optimizer.cache``); a
            problem with it is a warning and the tune goes on uncached. A ``cache_dir``
            that is not a path (not a str or PathLike, empty) is an ``OptionError``.
        target_error: precision-aware tuning: delegate to
            :func:`~aneforge.optimizer.precision_tune.tune_precision` with ``inputs``,
            ``device`` and ``allow_paired`` (the other options must stay at their
            defaults) and return what it returns, ``(program, report)``.
        allow_paired: with ``target_error``, also try the paired-fp16 cancellation fix.
        calibration_file: on the emulator, a calibration log the placement search
            appends one row per timing to (default ``$ANEFORGE_CALIBRATION_FILE``);
            not part of the cache key (a hit measures nothing and writes no row).

    Returns:
        The chosen Program, with ``tune_report`` (variant, measured times, errors,
        whether it came from the cache; with ``target_error``, the report of
        :func:`~aneforge.optimizer.precision_tune.tune_precision`). Deterministic for a
        deterministic device.
    """
    if target_error is not None or allow_paired:
        if target_error is None:
            raise OptionError("tune: allow_paired=True needs target_error= (precision tuning)")
        given = {
            "budget": budget,
            "atol": atol,
            "min_lossy_speedup": min_lossy_speedup,
            "prune_factor": prune_factor,
            "cache": cache,
            "cache_dir": cache_dir,
            "calibration_file": calibration_file,
        }
        extra = [n for n, v in given.items() if v != TUNE_DEFAULTS[n]]
        if extra:
            raise OptionError(
                f"tune: target_error= (precision tuning) takes only inputs, device and "
                f"allow_paired; got {', '.join(extra)}"
            )
        prog, _ = tune_precision(
            out, target_error, inputs=inputs, allow_paired=allow_paired, device=device
        )
        return prog
    for label, value, lo in (("budget", budget, 1), ("prune_factor", prune_factor, 1.0)):
        if not value >= lo:
            raise OptionError(f"tune: {label} must be >= {lo}, got {value!r}")
    if not atol >= 0:
        raise OptionError(f"tune: atol must be >= 0, got {atol!r}")
    outs = [out] if isinstance(out, Tensor) else list(out)
    dev = get_device(device)
    baseline_prog = Program.from_outputs(outs)
    feeds = (
        seeded_inputs(baseline_prog)
        if inputs is None
        else baseline_prog.prepare_inputs(inputs if isinstance(inputs, (list, tuple)) else
                                          [inputs], {})
    )  # fmt: skip
    shapes = ";".join(str(t.shape) for t in baseline_prog.inputs)
    options = (
        f"{shapes}|{device_id(dev)}|atol={atol!r}|lossy={min_lossy_speedup!r}|"
        f"budget={budget}|prune={prune_factor!r}"
    )
    key = structural_hash(outs, extra=options)
    store = TuneCache(cache_dir) if cache else None
    hit = store.get(key) if store else None
    if hit is not None:
        prog = _from_cache(store, key, hit, outs, atol, dev, baseline_prog, feeds)
        if prog is not None:
            return _placed_hit(store, key, hit, prog, dev, feeds, calibration_file)

    lossy_allowed = atol > DEFAULT_ATOL
    variants = variant_lib.build_variants(outs, lossy=lossy_allowed, compress=lossy_allowed)
    predicted = {name: estimate(list(v.outputs)) for name, v in variants.items()}
    best_pred = min(predicted.values())
    ranked = sorted(variants, key=lambda n: (predicted[n], n))
    kept = [n for n in ranked if predicted[n] <= prune_factor * best_pred][:budget]
    if not any(variants[n].lossless for n in kept):
        # A lossy variant needs a lossless one to beat; the best-predicted one takes the
        # last measured slot (the budget still holds).
        best_lossless = next(n for n in ranked if variants[n].lossless)
        kept = kept[: budget - 1] + [best_lossless]
    reference = dev.run(baseline_prog, feeds)
    times, errors, programs = {}, {}, {}
    for name in kept:
        prog = Program.from_outputs(variants[name].outputs)
        programs[name] = prog
        errors[name] = relative_deviation(dev.run(prog, feeds), reference)
        times[name] = dev.measure(prog, feeds)
    valid = [n for n in kept if errors[n] <= atol]
    # Lossless variants equal the baseline by construction; one that failed validation
    # would be an optimizer bug, so it stays a candidate only when nothing else is left.
    pool = [n for n in valid if variants[n].lossless] or [n for n in kept if variants[n].lossless]
    lossless_best = min(pool, key=lambda n: (times[n], n))
    lossy_ok = [
        n
        for n in valid
        if not variants[n].lossless and times[lossless_best] >= min_lossy_speedup * times[n]
    ]
    # Equal times (int4 and int8 both compute-bound) go to the more accurate variant.
    choice = min(lossy_ok, key=lambda n: (times[n], errors[n], n)) if lossy_ok else lossless_best
    report = {
        "variant": choice,
        "lossless": variants[choice].lossless,
        "predicted_us": predicted,
        "measured": sorted(kept),
        "pruned": sorted(set(variants) - set(kept)),
        "times_s": times,
        "errors": errors,
        "device": device_id(dev),
    }
    programs[choice], entries = _placed(programs[choice], dev, feeds, calibration_file)
    report.update(entries)
    if store:
        store.put(key, report)
    return _tuned(programs[choice], variants[choice], dict(report, cached=False))


#: tune's options and their defaults, read from its signature (the one place they are
#: written): the target_error check and the ``tune::measure`` pass's schema use them.
TUNE_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(tune).parameters.items()
    if p.default is not inspect.Parameter.empty
}
_MEASURE_OPTIONS = ("budget", "atol", "min_lossy_speedup", "prune_factor", "device", "cache",
                    "cache_dir", "calibration_file")  # fmt: skip


@register_pass(
    "tune::measure",
    "af.tune: the variants measured on the device, the fastest valid one kept",
    {name: Option(TUNE_DEFAULTS[name], f"tune's {name}") for name in _MEASURE_OPTIONS},
)
def _tune_measure(state: PassState, **options) -> PassResult:
    tuned = tune(list(state.outputs), **options)
    report = tuned.tune_report
    entries = {"variant": {"variant": report.get("variant"),
                           "lossless": report.get("lossless") is True}}  # fmt: skip
    if "compression" in tuned.passes:  # an int4 / auto variant
        entries["compression"] = tuned.passes["compression"]
    exactness = BIT_IDENTICAL if entries["variant"]["lossless"] else LOSSY
    return PassResult(tuned.outputs, entries, exactness=exactness, tune=report)
