"""Passes under namespaced ids, pipelines of them, and the one loop that runs a pipeline.

A pass is a :class:`Pass` record: an id ``namespace::name`` (the namespace says what
kind of work it does: ``canon``, ``route``, ``compress``, ``accuracy``, ``lower``,
``check``, ``warn``, ``variant``, ``tune``), its function, the schema of its options, a
one-line doc, the passes it ``requires`` earlier in a pipeline and whether it
``needs_target`` (without a target the loop skips it). The function takes the
:class:`PassState` and its options and returns a :class:`PassResult`: the new outputs (or
None), the ``prog.passes`` entries it writes, the warnings it has to give, the
exactness class of what it applied and, for a tuner, its report. Passes never warn
themselves: the loop issues their warnings at the caller's line, so a pass need not
know how deep it runs.

A :class:`Pipeline` is a name and a sequence of steps (a pass id and its options),
validated when it is built: an unknown id, an unknown or ill-typed option, a missing
required option or a pass placed before one it ``requires`` raises
:class:`~aneforge.errors.OptionError` naming it and listing the valid ones.
:func:`run_pipeline` runs one and returns the final :class:`PassState` and the
:class:`~aneforge.compiler.program.PassReport`. The opt levels' pipelines are in
:mod:`aneforge.optimizer.pipelines`; variants (:mod:`~aneforge.optimizer.variants`) and
precision candidates (:mod:`~aneforge.optimizer.precision_tune`) are pipelines too.

Example:
    >>> import aneforge as af
    >>> p = pipeline("demo", "canon::rules")
    >>> x = af.input((3,), name="x")
    >>> state, report = run_pipeline(p, [(x * 1.0).relu()])
    >>> [n.op for n in state.program.compute_nodes], report.ran
    (['relu'], ('canon::rules',))
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..analysis.divergence import fp16_divergence
from ..analysis.precision import PrecisionError, precision_message, precision_risk
from ..compiler.preflight import lower_below_floor, preflight, raise_if_blocked
from ..compiler.program import PassRecord, PassReport, Program
from ..compression import (
    COMPRESS_MODES,
    DEFAULT_COMPRESS_ATOL,
    compress_graph,
    lossy_message,
    quantize_graph_int8,
)
from ..cost.estimate import estimate, floor_dominated_message
from ..emulator.chips import chip_numerics
from ..errors import (
    AneforgeWarning,
    CrossChipFP16Warning,
    DispatchFloorWarning,
    OptionError,
    PrecisionWarning,
    PreflightError,
    PreflightWarning,
)
from ..graph.rewrite import BIT_IDENTICAL, LOSSY, rewrite, weakest
from .routes import route_rules, select_routes
from .rules import CANONICAL

# ---- records ----------------------------------------------------------------------------

#: The default of an option that has none: a pipeline must give it.
REQUIRED = object()


@dataclass(frozen=True)
class Option:
    """One option of a pass: its default (:data:`REQUIRED` for none), what it means and
    a check of a value (``check(value) -> bool``) with the words for a valid one."""

    default: object
    doc: str
    check: Callable[[object], bool] = lambda value: True
    expect: str = "any value"


def _is_bool(value) -> bool:
    return isinstance(value, bool)


def _is_budget(value) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, numbers.Real)
        and math.isfinite(value)
        and value >= 0
    )


@dataclass(frozen=True)
class Pass:
    """A registered pass (module docstring)."""

    id: str
    fn: Callable
    doc: str
    options: Mapping = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    needs_target: bool = False


@dataclass(frozen=True)
class PassResult:
    """What a pass returns.

    Attributes:
        outputs: the new output tensors (None: the graph is unchanged).
        entries: the ``prog.passes`` entries it writes (key -> report).
        warnings: ``(category, message)`` pairs for the loop to issue.
        exactness: the weakest class of what it applied (:data:`~aneforge.graph.rewrite.
            EXACTNESS`).
        tune: a tuner's report (``prog.tune_report``).
        noop: why it changed nothing, when it had nothing to do (a precision candidate
            that needs it is then skipped with this reason).
        facts: objects later passes may read (``state.facts``) while the graph stays
            the same; the loop drops them when a pass changes the outputs.
    """

    outputs: tuple | None = None
    entries: Mapping = field(default_factory=dict)
    warnings: tuple = ()
    exactness: str = BIT_IDENTICAL
    tune: Mapping | None = None
    noop: str | None = None
    facts: Mapping = field(default_factory=dict)


class PassState:
    """What a pass sees: the graph so far (``outputs``), the compile context
    (``target``, ``opt``, ``output_names``), the entries written so far, the facts of
    earlier passes on this graph and :attr:`program`, a Program of the current outputs
    (built once per graph). Only :func:`run_pipeline` advances it."""

    def __init__(self, outputs, target=None, opt=0, output_names=None):
        self._outputs = tuple(outputs)
        self._target = target
        self._opt = opt
        self._names = None if output_names is None else tuple(output_names)
        self._entries: dict = {}
        self._facts: dict = {}
        self._tune = None
        self._program: Program | None = None

    outputs = property(lambda self: self._outputs, doc="The current output tensors.")
    target = property(lambda self: self._target, doc="The compile target (or None).")
    opt = property(lambda self: self._opt, doc="The opt level recorded on the program.")
    output_names = property(lambda self: self._names, doc="The outputs' names (or None).")
    tune = property(lambda self: self._tune, doc="A tuner's report, once one ran.")
    entries = property(lambda self: MappingProxyType(self._entries), doc="Entries so far.")
    facts = property(lambda self: MappingProxyType(self._facts), doc="Facts on this graph.")

    @property
    def program(self) -> Program:
        """A Program of the current outputs, opt, target and output names (no report)."""
        if self._program is None:
            self._program = Program.from_outputs(
                self._outputs, self._opt, self._target, self._names
            )
        return self._program

    def _advance(self, result: PassResult) -> None:
        if result.outputs is not None:
            new = tuple(result.outputs)
            if len(new) != len(self._outputs) or any(
                a is not b for a, b in zip(new, self._outputs)
            ):
                self._outputs, self._program, self._facts = new, None, {}
        self._entries.update(result.entries)
        self._facts.update(result.facts)
        if result.tune is not None:
            self._tune = result.tune


# ---- the registry -----------------------------------------------------------------------

#: Every registered pass by id.
PASSES: dict[str, Pass] = {}


def register_pass(
    pass_id: str,
    doc: str,
    options: Mapping | None = None,
    requires: tuple[str, ...] = (),
    needs_target: bool = False,
):
    """Register the decorated function as pass ``pass_id`` (``namespace::name``);
    duplicates and malformed ids are refused.

    Example:
        >>> "route::select" in PASSES and PASSES["check::preflight"].needs_target
        True
    """
    namespace, sep, name = pass_id.partition("::")
    if not (sep and namespace.isidentifier() and name.isidentifier()):
        raise OptionError(f"pass id {pass_id!r} is not of the form namespace::name")

    def add(fn):
        if pass_id in PASSES:
            raise OptionError(f"pass {pass_id!r} is already registered")
        for need in requires:
            if need not in PASSES:
                raise OptionError(f"pass {pass_id!r} requires {need!r}, which is not registered")
        PASSES[pass_id] = Pass(pass_id, fn, doc, dict(options or {}), tuple(requires),
                               needs_target)  # fmt: skip
        return fn

    return add


def get_pass(pass_id: str) -> Pass:
    """The :class:`Pass` of ``pass_id``; an unknown id raises ``OptionError`` listing the
    registered ones.

    Example:
        >>> get_pass("canon::rules").doc
        'the bit-identical canonical rewrites (identity casts, reshapes, x*1, ...)'
    """
    try:
        return PASSES[pass_id]
    except (KeyError, TypeError):
        raise OptionError(
            f"unknown pass {pass_id!r}; the registered passes are {', '.join(sorted(PASSES))}"
        ) from None


# ---- pipelines --------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of a pipeline: a pass id and its options (defaults filled in)."""

    id: str
    options: Mapping

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


def _step(where: str, spec) -> Step:
    """A validated :class:`Step` of ``spec`` (an id, or ``(id, {option: value})``)."""
    pass_id, given = (spec, {}) if isinstance(spec, str) else tuple(spec)
    p = get_pass(pass_id)
    if not isinstance(given, Mapping):
        raise OptionError(f"{where}: the options of {pass_id} must be a dict, got {given!r}")
    unknown = [k for k in given if k not in p.options]
    if unknown:
        valid = ", ".join(sorted(p.options)) or "none"
        raise OptionError(
            f"{where}: pass {pass_id} has no option {', '.join(map(repr, unknown))}; "
            f"its options are {valid}"
        )
    options = {}
    for name, opt in p.options.items():
        value = given.get(name, opt.default)
        if value is REQUIRED:
            raise OptionError(f"{where}: pass {pass_id} needs the option {name!r} ({opt.doc})")
        if not opt.check(value):
            raise OptionError(
                f"{where}: pass {pass_id} option {name}={value!r} is not {opt.expect}"
            )
        options[name] = value
    return Step(pass_id, options)


@dataclass(frozen=True)
class Pipeline:
    """A named sequence of validated steps (build it with :func:`pipeline`)."""

    name: str
    steps: tuple[Step, ...]
    doc: str = ""

    @property
    def ids(self) -> tuple[str, ...]:
        """The pass ids, in order."""
        return tuple(s.id for s in self.steps)

    def then(self, *specs, name: str | None = None) -> Pipeline:
        """This pipeline followed by ``specs`` (ids or ``(id, options)``), validated.

        Example:
            >>> pipeline("a", "route::select").then("canon::rules").ids
            ('route::select', 'canon::rules')
        """
        return pipeline(name or self.name, *self.steps, *specs, doc=self.doc)


def pipeline(name: str, *specs, doc: str = "") -> Pipeline:
    """A :class:`Pipeline` of ``specs`` (each a pass id, ``(id, {option: value})`` or a
    :class:`Step`), validated: unknown ids and options raise ``OptionError``, and so
    does a pass placed before a pass it ``requires``.

    Example:
        >>> pipeline("bad", "lower::half_period")
        Traceback (most recent call last):
        ...
        aneforge.errors.OptionError: pipeline 'bad': lower::half_period requires ...
    """
    where = f"pipeline {name!r}"
    steps = tuple(
        _step(where, (s.id, s.options)) if isinstance(s, Step) else _step(where, s) for s in specs
    )
    for i, step in enumerate(steps):
        earlier = {s.id for s in steps[:i]}
        for need in PASSES[step.id].requires:
            if need not in earlier:
                raise OptionError(f"{where}: {step.id} requires {need} before it")
    return Pipeline(name, steps, doc)


def run_pipeline(
    pipe: Pipeline,
    outputs,
    target=None,
    opt=0,
    output_names=None,
    warn: bool = True,
    stacklevel: int = 2,
    after: Callable | None = None,
) -> tuple[PassState, PassReport]:
    """Run ``pipe`` on ``outputs``: every step in order (a ``needs_target`` pass only with
    a ``target``); return the final :class:`PassState` and the
    :class:`~aneforge.compiler.program.PassReport` (one record per pass that ran, and
    the tuner's report if one ran).

    ``warn``: issue each pass's warnings as it finishes, at ``stacklevel`` as seen from
    the caller of ``run_pipeline`` (2: the caller's caller); with ``warn=False`` they
    are only recorded. ``after(pass_id, state)`` is called after every pass (the
    tests verify the graph there).

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 3), name="x")
        >>> state, rep = run_pipeline(pipeline("p", "check::precision"), [x.relu()])
        >>> rep.ran, state.entries["precision"]["signal"]
        (('check::precision',), 0.0)
    """
    state = PassState(outputs, target, opt, output_names)
    records = []
    for step in pipe.steps:
        p = PASSES[step.id]
        if p.needs_target and target is None:
            continue
        result = p.fn(state, **step.options)
        state._advance(result)
        records.append(
            PassRecord(p.id, result.entries, result.warnings, result.exactness, result.noop)
        )
        if warn:
            for category, message in result.warnings:
                warnings.warn(message, category, stacklevel=stacklevel + 1)
        if after is not None:
            after(p.id, state)
    return state, PassReport(pipe.name, tuple(records), state.tune)


# ---- the passes of the lower layers ---------------------------------------------------------


@register_pass(
    "canon::rules", "the bit-identical canonical rewrites (identity casts, reshapes, x*1, ...)"
)
def _canon_rules(state: PassState) -> PassResult:
    outs, report = rewrite(list(state.outputs), CANONICAL)
    classes = {r.name: r.exactness for r in CANONICAL}
    return PassResult(tuple(outs), exactness=weakest(classes[r] for r in report.matches))


def _route_cost(target):
    """The cost the route pass compares: the estimate, on ``target``'s analytic model
    when one is given (a route the chip cannot run is never chosen)."""
    if target is None:
        return estimate

    def cost(graph):
        try:
            return estimate(graph, target=target)
        except PreflightError:
            return math.inf

    return cost


@register_pass(
    "route::select",
    "per route-bearing bridge node, the native bridge or its bit-identical fused "
    "decomposition, whichever the cost model prices lower",
)
def _route_select(state: PassState) -> PassResult:
    outs, decisions = select_routes(list(state.outputs), _route_cost(state.target))
    applied = [d["loss_class"] for d in decisions if d["choice"] == "fused"]
    return PassResult(tuple(outs), {"routes": decisions}, exactness=weakest(applied))


@register_pass(
    "route::decompose",
    "every route-bearing bridge node replaced by its bit-identical fused decomposition",
)
def _route_decompose(state: PassState) -> PassResult:
    rules = route_rules()
    outs, report = rewrite(list(state.outputs), rules)
    return PassResult(
        tuple(outs), exactness=weakest(r.exactness for r in rules if r.name in report.matches)
    )


@register_pass(
    "compress::weights",
    "weight compression of the contraction weights, gated per weight by atol",
    {
        "mode": Option(REQUIRED, "the compression mode", lambda v: v in COMPRESS_MODES,
                       f"one of {COMPRESS_MODES}"),
        "atol": Option(DEFAULT_COMPRESS_ATOL, "the per-weight error budget", _is_budget,
                       "a finite number >= 0"),
    },
)  # fmt: skip
def _compress_weights(state: PassState, mode: str, atol: float) -> PassResult:
    outs, report = compress_graph(list(state.outputs), mode, float(atol), state.target)
    message = lossy_message(report, f"compile(compress={mode!r})")
    found = ((AneforgeWarning, message),) if message else ()
    exactness = BIT_IDENTICAL if report["lossy"] == 0 else LOSSY
    return PassResult(tuple(outs), {"compression": report}, found, exactness)


@register_pass(
    "compress::int8",
    "the whole-graph per-channel int8 weights, ungated (the tuner measures the whole "
    "graph instead)",
)
def _compress_int8(state: PassState) -> PassResult:
    outs = tuple(quantize_graph_int8(list(state.outputs)))
    same = all(a is b for a, b in zip(outs, state.outputs))
    noop = "no contraction weight to quantize" if same else None
    # lossy by definition: an int8 variant is never taken for lossless
    return PassResult(outs, exactness=LOSSY, noop=noop)


@register_pass(
    "check::preflight",
    "the target's limits: raise PreflightError on a violation without a lowering",
    needs_target=True,
)
def _check_preflight(state: PassState) -> PassResult:
    report = preflight(list(state.outputs), state.target)
    raise_if_blocked(report)
    return PassResult(entries={"preflight": report.as_dict()}, facts={"preflight": report})


@register_pass(
    "lower::half_period",
    "sin/cos below A15 as half-period polynomial forms (the lowerable preflight violations)",
    requires=("check::preflight",),
    needs_target=True,
)
def _lower_half_period(state: PassState) -> PassResult:
    report = state.facts.get("preflight")
    if report is None:  # a pass between changed the graph: check it again
        report = preflight(list(state.outputs), state.target)
        raise_if_blocked(report)
    if not report.violations:
        return PassResult(noop="no violation to lower")
    outs = tuple(lower_below_floor(state.outputs, report))
    tgt = state.target
    done = ", ".join(f"{n} {op}" for op, n in sorted(report.lowered.items()))
    message = (
        f"compile(target={tgt.arch!r}): replaced {done} node(s) by half-period "
        f"polynomial forms, since native sin/cos need A15 and {tgt.arch} is "
        f"{tgt.tier}-tier (about 1e-3 absolute error for |x| <= 200); "
        "prog.passes['preflight'] has the report"
    )
    found = ((PreflightWarning, message),)
    return PassResult(outs, {"preflight": report.as_dict()}, found, LOSSY)


@register_pass(
    "check::divergence",
    "on A13/A14-tier targets, warn when a width-offset slice may meet the crop-DMA clamp",
    needs_target=True,
)
def _check_divergence(state: PassState) -> PassResult:
    """Only this hazard warns: it changes results on the target itself by far more than
    rounding. The reduction route's reordering is last-bits noise against other chips and
    is left to ``af.fp16_divergence``, which also takes declared input bounds."""
    tgt = state.target
    if chip_numerics(tgt).crop_dma_limit is None:
        return PassResult(noop="the target has no crop-DMA clamp")
    report = fp16_divergence(state.program, [tgt])
    hits = report.by_class("saturation")
    entry = {
        "targets": list(report.targets),
        "worst": report.worst,
        "saturation": [str(e) for e in hits],
    }
    if not hits:
        return PassResult(entries={"divergence": entry})
    shown = "; ".join(f"%{e.index} {e.op} {e.shape}" for e in hits[:3])
    more = f" and {len(hits) - 3} more" if len(hits) > 3 else ""
    message = (
        f"compile(target={tgt.arch!r}): {len(hits)} width-offset slice(s) ({shown}"
        f"{more}) ride the {tgt.tier}-tier x16 crop-DMA, which turns sliced "
        "|values| > 4094 into +-inf, while A15+ chips return them unchanged. Values there "
        "are not known to stay below 4094; check with af.fp16_divergence(out, targets, "
        "input_bounds=...), or start the slice at width 0 (e.g. transpose first)"
    )
    found = ((CrossChipFP16Warning, message),)
    return PassResult(entries={"divergence": entry}, warnings=found)


@register_pass(
    "warn::dispatch_floor",
    "warn when per-call dispatch floors dominate the estimate on the target",
)
def _warn_dispatch_floor(state: PassState) -> PassResult:
    message = floor_dominated_message(state.program)
    return PassResult(warnings=((DispatchFloorWarning, message),) if message else ())


@register_pass(
    "check::precision",
    "the static precision-risk signal: warn (or raise, strict) past fp16 noise",
    {"strict": Option(False, "raise PrecisionError instead of warning", _is_bool,
                      "True or False")},
)  # fmt: skip
def _check_precision(state: PassState, strict: bool) -> PassResult:
    report = precision_risk(state.program)
    entries = {"precision": report.as_dict()}
    if report.clean:
        return PassResult(entries=entries)
    message = precision_message(report)
    if strict:
        raise PrecisionError(message, report)
    return PassResult(entries=entries, warnings=((PrecisionWarning, message),))
