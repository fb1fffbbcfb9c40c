"""``compile``: the driver that turns output tensors into a
:class:`~aneforge.compiler.program.Program` (the top of the compiler stack).

The optimization levels (docs/optimizer.md):

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

Each level is a named pipeline of registered passes
(:mod:`aneforge.optimizer.pipelines`); :func:`compile` resolves the level to its
pipeline, puts compression (``compress=``, the pass ``compress::weights``) in front and
the shared epilogue behind — preflight on ``target`` (``check::preflight`` and
``lower::half_period``; opt=2 runs them before tuning, so the tuner measures the program
that runs), the cross-chip divergence check (``check::divergence``, on A13/A14-tier
targets), the dispatch-floor warning (``warn::dispatch_floor``) and the precision signal
(``check::precision``; ``strict`` raises ``PrecisionError``) — runs it with one loop
(:func:`~aneforge.optimizer.passes.run_pipeline`) and builds the Program once, with the
report of every pass that ran (``prog.report``; its entries are ``prog.passes``).

Example:
    >>> import aneforge as af
    >>> x = af.input((4,))
    >>> af.compile([x.relu(), x.exp()]).op_count
    2
"""

from __future__ import annotations

from .compiler.program import Program
from .compression import COMPRESS_MODES
from .errors import OptionError
from .gcpause import paused_gc
from .graph.tensor import check_name
from .graph.walk import as_outputs
from .optimizer.passes import run_pipeline
from .optimizer.pipelines import compile_pipeline
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
        graph twice gives the same program. ``prog.report`` records what ran at every
        level (``prog.report.ran``: the pass ids in order; ``prog.report.pipeline``:
        the level's pipeline), and ``prog.passes`` what the passes reported: the
        optimizer's work (``'routes'`` decisions, the chosen ``'variant'``, with
        ``prog.tune_report`` at opt=2), ``'compression'``, ``'preflight'`` and
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
        tgt = None if target is None else resolve_target(target)
        compress = _compress_mode(compress, compress_atol, int8)
        pipe = compile_pipeline(opt, compress, float(compress_atol), strict or validate)
        level = 2 if opt == "max" else opt
        # stacklevel 2: each pass's warnings point at the line that called compile
        state, report = run_pipeline(pipe, outs, tgt, level, names, stacklevel=2)
        prog = state.program.replace(report=report)
        placed = (report.tune or {}).get("placements")
        if placed:  # the tuner's placement vectors (the passes after it only check)
            prog = prog.with_placements([tuple(pair) for pair in placed])
        return prog


def _compress_mode(compress, atol, int8):
    """The compression mode (or None), ``compress`` and its ``int8=True`` alias checked,
    and ``compress_atol`` checked whether or not it is used."""
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
    if compress is not None and compress not in COMPRESS_MODES:
        raise OptionError(f"compile: compress must be one of {COMPRESS_MODES}, got {compress!r}")
    return compress
