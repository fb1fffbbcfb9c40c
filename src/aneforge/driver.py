"""``compile``: the driver that turns output tensors into a
:class:`~aneforge.compiler.program.Program` (the top of the compiler stack).

The optimization levels (spec 000, "The optimizer and opt levels"):

- ``'routes'`` (default): the lossless route pass. Per route-bearing bridge node the cost
  model picks the native bridge (a cut) or its fused decomposition; only bit-identical
  alts are candidates, so it changes no bit of the results, and a cut-free graph
  compiles to exactly the ``opt=0`` program.
- ``0``: the graph exactly as built (byte-identical path; int8 honoured as given).
- ``1``: cost-model pick over every variant, route swaps, canonical rewrites and the
  lossy whole-graph int8 variant, without measuring; a lossy pick is warned about.
  The lossless variants are bit-identical; no equal-or-better rewrite is applied.
- ``2`` / ``'max'``: :func:`~aneforge.optimizer.tune.tune`, measured on the device.

"Lossless" means bit-identical on the emulator (signed zeros included): the classes are
data on the rules and routes (:data:`~aneforge.graph.rewrite.EXACTNESS`).

One pipeline for every level: compression (``compress=``), then the level's own passes,
then the shared checks, always in this order and recorded in ``prog.passes``: preflight
on ``target`` (``'preflight'``; opt=2 runs it before tuning, so the tuner measures the
program that runs), the cross-chip divergence check (``'divergence'``, on A13/A14-tier
targets), the dispatch-floor warning and the precision signal (``'precision'``;
``strict`` raises ``PrecisionError``).

Example:
    >>> import aneforge as af
    >>> x = af.input((4,))
    >>> af.compile([x.relu(), x.exp()]).op_count
    2
"""

from __future__ import annotations

import math
import warnings

from .analysis.divergence import fp16_divergence
from .analysis.precision import check_precision
from .compiler.preflight import lower_below_floor, preflight, raise_if_blocked
from .compiler.program import Program
from .compression import COMPRESS_MODES, compress_graph, lossy_message
from .cost.estimate import estimate, warn_if_floor_dominated
from .emulator.chips import chip_numerics
from .errors import (
    AneforgeWarning,
    CrossChipFP16Warning,
    OptionError,
    PreflightError,
    PreflightWarning,
)
from .gcpause import paused_gc
from .graph.tensor import check_name
from .graph.walk import as_outputs
from .optimizer.routes import select_routes
from .optimizer.tune import MIN_LOSSY_SPEEDUP, tune
from .optimizer.variants import build_variants
from .targets.names import resolve_target

OPT_LEVELS = ("routes", 0, 1, 2, "max")


def _output_names(outs, output_names) -> tuple:
    """The outputs' names: ``output_names`` checked, each None (or all, when it is None)
    standing for the output tensor's own name."""
    if output_names is None:
        return tuple(t.name for t in outs)
    if isinstance(output_names, str) or not isinstance(output_names, (list, tuple)):
        raise OptionError(
            f"compile: output_names must be a list of names, one per output, got {output_names!r}"
        )
    if len(output_names) != len(outs):
        raise OptionError(
            f"compile: output_names has {len(output_names)} name(s) for {len(outs)} "
            "output(s); give one name (or None) per output"
        )
    return tuple(
        t.name if n is None else check_name(n, "compile output_names")
        for t, n in zip(outs, output_names)
    )


def _pick_by_estimate(outs):
    """opt=1: the variant with the lowest estimate; a lossy one only when it is predicted
    at least ``MIN_LOSSY_SPEEDUP`` times faster than the best lossless one (the margin
    the tuner asks of a measured lossy variant)."""
    variants = build_variants(outs, lossy=True)
    order = list(variants)
    cost = {n: estimate(list(variants[n].outputs)) for n in order}
    lossless = min((n for n in order if variants[n].lossless), key=lambda n: (cost[n], n))
    name = min(order, key=lambda n: (cost[n], order.index(n)))
    if not variants[name].lossless and cost[lossless] < MIN_LOSSY_SPEEDUP * cost[name]:
        name = lossless
    chosen = variants[name]
    if not chosen.lossless:
        warnings.warn(
            f"compile(opt=1) chose the lossy '{name}' variant (about 1% weight error); "
            "use opt='routes' to stay lossless or opt=2 to validate against the baseline",
            AneforgeWarning,
            stacklevel=4,  # _pick_by_estimate <- _optimize <- compile <- the user's call
        )
    return list(chosen.outputs), {"variant": name, "lossless": chosen.lossless}


def compile(  # noqa: A001  (public API name)
    outputs,
    opt="routes",
    target=None,
    compress=None,
    compress_atol=0.05,
    int8=False,
    strict=False,
    validate=False,
    output_names=None,
) -> Program:
    """Compile one tensor or a sequence of tensors into a :class:`Program`.

    Args:
        outputs: a Tensor or a list/tuple of Tensors (the program's outputs, in order).
        opt: ``'routes'`` (default), ``0``, ``1``, ``2`` or ``'max'`` (module docstring).
        target: an engine target (architecture or chip name such as ``'h13'``, ``'M1'``,
            or a Target). With one, compile runs :func:`~aneforge.preflight` on the
            graph it is about to build: when every violation has a lowering (sin/cos
            below A15) it applies them, records the report in ``prog.passes
            ['preflight']`` and warns ``PreflightWarning``; otherwise it raises one
            ``PreflightError`` listing every violation. The program records the
            target (``prog.target``) and runs with its per-chip numerics on the
            emulator. On an A13/A14-tier target it warns ``CrossChipFP16Warning`` when
            a width-offset slice may see values beyond 4094 (the crop-DMA clamp;
            docs/numerics.md, "Per-chip numerics").
        compress: weight compression of the contraction weights, applied first:
            ``'int8'`` (per-channel), ``'int4'`` (16-entry lookup table, falling back
            to int8 then fp16), ``'sparse'`` (bitmask + nonzeros, weights >= 50%
            zeros) or ``'auto'`` (per weight: sparse, else int4, else int8, else fp16,
            among the encodings the target family streams natively). Every lossy
            choice is gated by ``compress_atol``, recorded in ``prog.passes
            ['compression']`` and warned once (``AneforgeWarning``). docs/compression.md.
        compress_atol: the per-weight budget, ``max`` over output channels of
            ``||w_c - decoded_c|| / ||w_c||`` (default 0.05); a number >= 0, checked
            whether or not ``compress`` is given.
        int8: ``True`` is the alias of ``compress='int8'``.
        strict / validate: raise ``PrecisionError`` instead of warning
            ``PrecisionWarning`` when the static precision-risk signal
            (:func:`aneforge.precision_risk`) exceeds fp16 noise, at every opt level.
        output_names: one name (a non-empty string, or None for the output's own name)
            per output, kept as ``prog.output_names`` (the Core ML export's output
            names); default the outputs' own names. Node names survive every opt
            level: a pass that replaces a named node by a new one computing the same
            value gives it the name.

    Returns:
        A Program whose nodes are in a deterministic execution order; compiling the same
        graph twice gives the same program. ``prog.passes`` records what ran at every
        level: the optimizer's work (``'routes'`` decisions, the chosen ``'variant'``,
        with ``prog.tune_report`` at opt=2), ``'compression'``, ``'preflight'`` and
        ``'divergence'`` with a target, and ``'precision'``. Warns
        ``DispatchFloorWarning`` when the estimate is dominated by per-call dispatch
        overhead.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import flatten
        >>> x = af.input((2, 3))
        >>> [n.op for n in af.compile(flatten(x) * 2.0).compute_nodes]
        ['reshape', 'mul']
    """
    with paused_gc():  # the passes allocate many small objects (aneforge.gcpause)
        outs = as_outputs(outputs)
        names = _output_names(outs, output_names)
        if isinstance(opt, bool) or opt not in OPT_LEVELS:
            raise OptionError(f"compile: opt must be one of {OPT_LEVELS}, got {opt!r}")
        for label, flag in (("strict", strict), ("validate", validate)):
            if not isinstance(flag, bool):
                raise OptionError(f"compile: {label} must be True or False, got {flag!r}")
        tgt = None
        if target is not None:
            tgt = resolve_target(target)
        outs, compression = _compress(outs, compress, compress_atol, int8, tgt)
        # The opt level picks the passes; every level then ends with the same checks.
        outs, passes, tune_report = _optimize(outs, opt, tgt)
        passes.update(compression)  # compile's own compression, over a tuned variant's
        if tgt is not None and "preflight" not in passes:  # opt=2 preflights before tuning
            outs, found = _preflight(outs, tgt)
            passes.update(found)
        prog = Program.from_outputs(outs, 2 if opt == "max" else opt)
        prog.output_names = names
        prog.target = tgt
        prog.passes = passes
        prog.tune_report = tune_report
        if tgt is not None:
            _warn_divergence(prog)
        warn_if_floor_dominated(prog)
        # PrecisionWarning once when the risk signal exceeds fp16 noise; strict/validate raise.
        check_precision(prog, strict=strict or validate)
        return prog


def _optimize(outs, opt, tgt):
    """The passes of opt level ``opt``: (outputs, ``prog.passes`` entries, tune report).

    ``0``: none. ``'routes'``: the route pass (bit-identical alts, priced on ``tgt``'s
    model when given). ``1``: the cost-model pick among the variants. ``2`` / ``'max'``:
    preflight on ``tgt`` first (the tuner measures the program that will run), then
    :func:`~aneforge.optimizer.tune.tune`; its pick is ``passes['variant']``.
    """
    if opt == 0:
        return outs, {}, None
    if opt == "routes":
        # With a target the routes are priced by that chip's analytic model.
        def cost(graph):
            if tgt is None:
                return estimate(graph)
            try:
                return estimate(graph, target=tgt)
            except PreflightError:  # a route the chip cannot run is never chosen
                return math.inf

        new, decisions = select_routes(list(outs), cost)
        return tuple(new), {"routes": decisions}, None
    if opt == 1:
        new, variant = _pick_by_estimate(list(outs))
        return tuple(new), {"variant": variant}, None
    passes: dict = {}
    if tgt is not None:
        outs, passes = _preflight(outs, tgt, stacklevel=4)
    prog = tune(list(outs))
    report = prog.tune_report
    passes["variant"] = {
        "variant": report.get("variant"),
        "lossless": report.get("lossless") is True,
    }
    if "compression" in prog.passes:  # an int4 / auto variant
        passes["compression"] = prog.passes["compression"]
    return prog.outputs, passes, report


def _compress(outs, compress, atol, int8, tgt):
    """Apply ``compress`` (or the ``int8=True`` alias) to ``outs``, warning once when a
    choice is lossy or not streamed natively. Returns (outputs, passes entry)."""
    if not isinstance(int8, bool):
        raise OptionError(f"compile: int8 must be True or False, got {int8!r}")
    # checked whether or not compress is given: a bad budget is never silently unused
    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not atol >= 0:
        raise OptionError(f"compile: compress_atol must be a number >= 0, got {atol!r}")
    if int8:
        if compress not in (None, "int8"):
            raise OptionError(
                f"compile: int8=True is the alias of compress='int8', but compress="
                f"{compress!r} was also given; pass one of them"
            )
        compress = "int8"
    if compress is None:
        return outs, {}
    if compress not in COMPRESS_MODES:
        raise OptionError(f"compile: compress must be one of {COMPRESS_MODES}, got {compress!r}")
    new, report = compress_graph(list(outs), compress, float(atol), tgt)
    message = lossy_message(report, f"compile(compress={compress!r})")
    if message:
        warnings.warn(message, AneforgeWarning, stacklevel=3)
    return tuple(new), {"compression": report}


def _preflight(outs, tgt, stacklevel=3):
    """Preflight ``outs`` for ``tgt``: raise on a blocking violation, else lower.

    Returns (outputs, passes entry). ``stacklevel`` points the warning at the user's
    call (3: called from compile itself).
    """
    report = preflight(list(outs), tgt)
    raise_if_blocked(report)
    if not report.violations:
        return tuple(outs), {"preflight": report.as_dict()}
    new = tuple(lower_below_floor(outs, report))
    done = ", ".join(f"{n} {op}" for op, n in sorted(report.lowered.items()))
    warnings.warn(
        f"compile(target={tgt.arch!r}): replaced {done} node(s) by half-period "
        f"polynomial forms, since native sin/cos need A15 and {tgt.arch} is "
        f"{tgt.tier}-tier (about 1e-3 absolute error for |x| <= 200); "
        "prog.passes['preflight'] has the report",
        PreflightWarning,
        stacklevel=stacklevel,
    )
    return new, {"preflight": report.as_dict()}


def _warn_divergence(prog) -> None:
    """Warn when the target's crop-DMA clamp may turn sliced values into inf.

    Only this hazard warns: it changes results on the target itself by far more than
    rounding. The reduction route's reordering is last-bits noise against other chips and
    is left to ``af.fp16_divergence``, which also takes declared input bounds.
    """
    if chip_numerics(prog.target).crop_dma_limit is None:
        return
    report = fp16_divergence(prog, [prog.target])
    hits = report.by_class("saturation")
    prog.passes["divergence"] = {
        "targets": list(report.targets),
        "worst": report.worst,
        "saturation": [str(e) for e in hits],
    }
    if not hits:
        return
    shown = "; ".join(f"%{e.index} {e.op} {e.shape}" for e in hits[:3])
    more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
    warnings.warn(
        f"compile(target={prog.target.arch!r}): {len(hits)} width-offset slice(s) ({shown}"
        f"{more}) ride the {prog.target.tier}-tier x16 crop-DMA, which turns sliced "
        "|values| > 4094 into +-inf, while A15+ chips return them unchanged. Values there "
        "are not known to stay below 4094; check with af.fp16_divergence(out, targets, "
        "input_bounds=...), or start the slice at width 0 (e.g. transpose first)",
        CrossChipFP16Warning,
        stacklevel=3,
    )
