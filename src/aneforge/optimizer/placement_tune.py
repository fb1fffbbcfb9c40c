"""The tuner's placement step: each fused region's placement vector measured on the
emulator's compiled regions (:mod:`aneforge.kernel.compiled`).

:func:`tune_placements` runs the program op by op once, keeping every value the tuned
regions read, so each region is timed alone on its real inputs. Per fused region with at
least :data:`~aneforge.kernel.compiled.MIN_WORK` of
:func:`~aneforge.kernel.compiled.region_work`:

1. its free intermediates (those no host node, opaque code or scatter forces to
   materialize) split into independent components
   (:func:`~aneforge.kernel.placement.components`): a choice in one changes only the
   kernels of its scope, the component's nodes and their readers;
2. per component, :func:`~aneforge.kernel.placement.search_placements` runs branch and
   bound from the compiled regions' default placement
   (:func:`~aneforge.kernel.compiled.default_placement`), the other components held
   at their choice, pruned under this machine's envelope (backend ``cpu``,
   :func:`~aneforge.kernel.envelope.load_envelopes`; without one nothing is pruned);
3. one candidate's time is the best of :data:`REPEATS` runs of its plan cut down to
   the component's scope (:func:`~aneforge.kernel.placement.restrict`), after a first
   run whose outputs must equal the op-by-op values bit for bit (a candidate that
   fails to build, run or match is never chosen, with one ``FastPathWarning``);
4. a component measures at most :data:`LEAF_LIMIT` candidates; the rest are counted as
   ``unexplored`` in the report (never silently).

Ties keep the default: a candidate replaces the best only when more than
:data:`TIE_MARGIN` faster (the bound prunes against that mark too). A vector that
differs from the default is then timed against it on the whole region, the two taking
turns :data:`CONFIRM_ROUNDS` times, each its best: it is kept only when more than
:data:`TIE_MARGIN` faster there too (components timed alone can each win by more than
the margin on a burst of the host's load, or lose to a cache effect between
components), else the default stays and the report says ``reverted``. The region's
vector goes into ``Program.placements`` only where it differs from the default. Every
timing is held against its bound and, with a calibration log, written as one row
(``search_placements``).

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.compiler.program import Program
    >>> x = af.input((256, 512), name="x")
    >>> prog = Program.from_outputs([((x * 0.5).exp() * 2.0).tanh()])
    >>> tuned, report = tune_placements(prog, [np.zeros((256, 512), np.float16)])
    >>> report[0]["region"], report[0]["candidates"], report[0]["components"]
    (0, 8, 1)
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from ..compiler.program import Program
from ..devices import EmulatorDevice
from ..emulator import gemm as _gemm
from ..emulator.chips import chip_numerics
from ..emulator.interpreter import execute_fp16, fp16_kernel
from ..errors import AneforgeWarning, ConfigFileError, FastPathWarning
from ..kernel import compiled
from ..kernel.compiled import RegionPlan, default_placement, host_nodes, plan_region, run_plan
from ..kernel.envelope import Envelope, load_envelopes
from ..kernel.lower import reads_integers
from ..kernel.placement import components, restrict, scope, search_placements

__all__ = [
    "CONFIRM_ROUNDS",
    "LEAF_LIMIT",
    "REPEATS",
    "TIE_MARGIN",
    "applies",
    "machine_envelope",
    "region_values",
    "time_plan",
    "tune_placements",
]

#: The envelope backend of this CPU (``aneforge calibrate-bandwidth``'s default).
BACKEND = "cpu"
#: A candidate's time is the best of this many runs (after one checked run).
REPEATS = 5
#: The most candidates measured per component (the others are reported unexplored).
LEAF_LIMIT = 64
#: A candidate must beat the best time by more than this fraction to replace it: closer
#: times are within the noise of a shared machine, a tie, and the default keeps them.
TIE_MARGIN = 0.03
#: Turns of the whole-region timing that confirms a tuned vector against the default.
CONFIRM_ROUNDS = 2


def applies(device) -> bool:
    """Whether ``device`` runs fused regions as compiled kernels, so that placements
    change its times: the emulator's fast path, with compiled regions on.

    Example:
        >>> import aneforge as af
        >>> applies(af.SimulatedANE()), applies(af.get_device("reference"))
        (False, False)
    """
    return isinstance(device, EmulatorDevice) and device.fast and compiled.enabled()


def machine_envelope(path=None) -> Envelope:
    """This machine's CPU envelope (:func:`~aneforge.kernel.envelope.load_envelopes`,
    backend ``cpu``), or one without peaks when none is fitted. A malformed envelope
    file is one ``AneforgeWarning`` and no peaks: the search then prunes nothing.

    Example:
        >>> machine_envelope("/no/such/envelope.json")
        Envelope(backend='cpu', peak_flops=None, peak_bandwidth=None, flops_witness=None, \
bandwidth_witness=None, slack=1.0, margin=1.0)
    """
    try:
        env = load_envelopes(path).get(BACKEND)
    except ConfigFileError as err:
        warnings.warn(f"{err}; tuning placements without pruning", AneforgeWarning, 2)
        env = None
    return env if env is not None else Envelope(BACKEND, None, None)


def time_plan(plan: RegionPlan, values: dict, repeats: int = REPEATS) -> float:
    """The best of ``repeats`` wall times of ``run_plan(plan, values)``, seconds (the
    tests replace it by a deterministic stand-in)."""
    best = math.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        run_plan(plan, values)
        best = min(best, time.perf_counter() - start)
    return best


def _same_bits(got: dict, want: dict) -> bool:
    """Every value of ``got`` has the bits of ``want``'s (any NaN equal to any NaN, as
    the compiled regions' first-use check has it)."""
    return all(
        _gemm._same_bits(np.asarray(v, np.float16), np.asarray(want[k], np.float16).reshape(
            np.shape(v)))
        for k, v in got.items()
    )  # fmt: skip


def _scoped(plan: RegionPlan, keep: set[int]) -> RegionPlan:
    """``plan`` cut down to the steps of the nodes ``keep``."""
    steps = [s for (n, _), s in zip(plan.lowered.steps, plan.steps) if id(n) in keep]
    return RegionPlan(restrict(plan.lowered, keep), steps, checked=True)


def _eligible(program: Program, chip) -> list:
    """``(region, host, groups)`` of the regions worth tuning: large enough to compile,
    with at least one free intermediate."""
    out = []
    for region in program.fused_regions:
        if compiled.region_work(region) < compiled.MIN_WORK:
            continue
        if reads_integers(region):  # ids, masks: the kernel layer holds fp16 only
            continue
        host = host_nodes(region, chip)
        groups = components(program, region, host)
        if groups:
            out.append((region, host, groups))
    return out


def region_values(program: Program, inputs, target, regions) -> dict:
    """``id(node)`` -> fp16 value, from one op-by-op run of ``program`` on ``inputs``
    (``target``'s numerics), of every node the fused ``regions`` hold or read: what
    :func:`~aneforge.kernel.compiled.run_plan` needs to run one region alone.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2,), name="x")
        >>> prog = Program.from_outputs([(x * 2.0).exp()])
        >>> values = region_values(prog, [np.ones(2, np.float16)], None, prog.fused_regions)
        >>> values[id(prog.outputs[0])].tolist()
        [7.390625, 7.390625]
    """
    wanted = {id(n) for region in regions for n in region.nodes}
    wanted |= {id(s) for region in regions for n in region.nodes for s in n.srcs}
    values: dict = {}

    def keep(index, node, value):
        if id(node) in wanted:
            values[id(node)] = value

    execute_fp16(program, inputs, fast=True, target=target, observe=keep)
    return values


def tune_placements(
    program: Program, inputs, target=None, *, envelope=None, calibration_file=None,
    progress=None,
) -> tuple[Program, list[dict]]:  # fmt: skip
    """Measure the placements of ``program``'s fused regions on the emulator (module
    docstring) and return ``(program with the placements chosen, report)``.

    Args:
        program: the Program (its own placements are replaced).
        inputs: fp16 arrays in program-input order.
        target: the numerics the emulator runs it with (None: generic).
        envelope: the :class:`~aneforge.kernel.envelope.Envelope` bounding the search
            (default :func:`machine_envelope`).
        calibration_file: a calibration log to append one row per timing to (default
            ``$ANEFORGE_CALIBRATION_FILE``, else none).
        progress: optional ``progress(message)`` told as each region starts.

    Returns:
        The program and one dict per tuned region: ``region``, ``components``,
        ``candidates``, ``measured``, ``pruned``, ``unexplored``, ``violations``,
        ``default_s`` and ``tuned_s`` (the summed scope times of the default and the
        choice), ``search_s`` (wall time spent), ``changed`` (intermediates whose
        placement differs from the default) and ``reverted`` (1 where the search's
        vector lost to the default on the whole region, which stays; else 0). Nothing
        is measured, and the report is empty, when compiled regions are off or no region
        qualifies.
    """
    if not compiled.enabled():
        return program.with_placements({}), []
    chip = chip_numerics(target)
    regions = _eligible(program, chip)
    if not regions:
        return program.with_placements({}), []
    env = machine_envelope() if envelope is None else envelope
    node_kernel = fp16_kernel(True, chip)
    values = region_values(program, inputs, target, [r for r, _, _ in regions])
    chosen, report = {}, []
    for k, (region, host, groups) in enumerate(regions):
        if progress is not None:
            progress(f"placements: region {region.index} ({k + 1}/{len(regions)}), "
                     f"{len(groups)} component(s)")  # fmt: skip
        start = time.perf_counter()
        default = default_placement(program, region, host)
        vector = list(default)
        totals = dict(candidates=0, measured=0, pruned=0, unexplored=0, violations=0,
                      default_s=0.0, tuned_s=0.0)  # fmt: skip
        for group in groups:
            keep = scope(program, region, group)
            r = search_placements(
                program, region, _measure(program, region, node_kernel, chip, keep, values),
                env, device="emulator", calibration_file=calibration_file, host=host,
                default=vector, free=group, limit=LEAF_LIMIT, margin=TIE_MARGIN,
            )  # fmt: skip
            vector = list(r.placement)
            for key in ("candidates", "measured", "pruned", "unexplored", "violations"):
                totals[key] += getattr(r, key)
            totals["default_s"] += r.default_seconds
            totals["tuned_s"] += r.seconds
        changed = sum(str(a) != str(b) for a, b in zip(vector, default))
        reverted = 0
        if changed and not _faster_whole(program, region, node_kernel, chip, values,
                                         vector, default):  # fmt: skip
            vector, changed, reverted = list(default), 0, 1
            totals["tuned_s"] = totals["default_s"]
        if changed:
            chosen[region.index] = [str(p) for p in vector]
        report.append(dict(region=region.index, components=len(groups), **totals,
                           search_s=time.perf_counter() - start, changed=changed,
                           reverted=reverted))  # fmt: skip
    return program.with_placements(chosen), report


def _faster_whole(program, region, node_kernel, chip, values, vector, default) -> bool:
    """Whether the whole region runs more than :data:`TIE_MARGIN` faster under ``vector``
    than under ``default`` (closer is a tie, which the default keeps, as in the search):
    each timed :data:`CONFIRM_ROUNDS` times, taking turns, each its best."""
    plans = [plan_region(program, region, node_kernel, chip, list(p)) for p in (vector, default)]
    best = [math.inf, math.inf]
    for _ in range(CONFIRM_ROUNDS):
        for i, plan in enumerate(plans):
            best[i] = min(best[i], time_plan(plan, values))
    return best[0] < best[1] * (1 - TIE_MARGIN)


def _measure(program, region, node_kernel, chip, keep, values):
    """``measure(placement) -> seconds`` of the scope ``keep`` of ``region``."""

    def measure(placement) -> float:
        try:
            plan = _scoped(plan_region(program, region, node_kernel, chip, list(placement)), keep)
            if not _same_bits(run_plan(plan, values), values):
                raise RuntimeError("its outputs disagree with the op-by-op emulator")
        except Exception as exc:  # it cannot run here: never chosen
            label = ",".join(str(p)[0] for p in placement)
            warnings.warn(
                f"placement tuning: region {region.index} under placement {label} cannot "
                f"run as compiled kernels ({str(exc).splitlines()[0] if str(exc) else exc!r}"
                "); the tuner does not choose it",
                FastPathWarning,
                2,
            )
            return math.inf
        return time_plan(plan, values)

    return measure
