"""Precision-aware tuning: the cheapest variant whose measured error meets a target.

``tune_precision(out, target_error=E)`` (also ``af.tune(out, target_error=E)``) builds
the numerics-aware candidates of a graph, measures each one's error on the device
against a reference, prices each with :func:`~aneforge.estimate`, and returns the
cheapest candidate whose error is at most ``E`` (docs/numerics.md, "Precision-aware tuning").

Candidates (:data:`CANDIDATE_PIPELINES`, each a pipeline of pass ids; a candidate that
would be structurally identical to an earlier one, or one of whose passes has nothing
to rewrite, is skipped and listed in ``report["skipped"]`` with the reason):

- ``fp16`` (no pass): the graph as built (the ``opt=0`` program);
- ``reduce_sum_to_matmul`` (``accuracy::reduce_sum_to_matmul``):
  :func:`~aneforge.reduce_sum_to_matmul`, auto-detected: only when the graph has a
  ``sum`` over one axis (the rule leaves multi-axis sums alone);
- ``int8`` (``compress::int8``): the whole-graph per-channel int8 variant
  (:func:`~aneforge.compression.quantize_graph_int8`), only when the graph has
  a contraction weight; lossy;
- ``reduce_sum_to_matmul+int8``: both (int8 first, so the rewrite's ones stay fp16);
- ``paired`` and ``reduce_sum_to_matmul+paired`` (``accuracy::paired_cancellation``
  last), only with ``allow_paired=True`` (near cancellation depends on the data, so it
  cannot be confirmed from the graph): the cancellation fix of
  :func:`paired_cancellation`.

The paired cancellation fix matches exactly a ``sub(a, b)`` node whose two operands are
each a contraction with a weight: ``matmul(x, W)`` with ``W`` a 2-D weight node (``x @
W``), or ``linear(x, W[, bias])`` with ``W`` a weight node (``bias`` any tensor), where
``a``, ``b`` and the ``sub`` have one shape (no broadcasting). Each operand's float32
accumulator ``S`` is kept as a pair through the wide accumulator, as
:meth:`~aneforge.numerics.paired.Paired.dot` does with its streams: ``hi = x @ W``
(``fp16(S)``, the original node) and ``lo = concat(x, hi) @ [[W], [-I]]`` (the same
ascending float32 sum, then ``- hi`` exactly: ``fp16(S - hi)``); a bias is added in
paired arithmetic (Dekker's pair add). The ``sub`` becomes
:func:`~aneforge.paired_subtract` of the two pairs: the best fp16 value of ``S_a -
S_b``, where plain fp16 subtracts the two rounded ``fp16(S)`` and loses up to
``ulp(S)`` to cancellation (the CFG-style ``cond - uncond`` of two large nearly-equal
terms). Everything else is left alone.

Error: ``max|out - ref| / max|ref|`` per output (``ref``'s finite values; an output
whose non-finite values match the reference bit for bit counts them as 0), the worst
over the outputs; the tuner's metric. Inputs: ``inputs`` or seeded standard normals.

The reference (``report["reference"]``):

- ``"fp32_faithful"``: the same graph on the emulator's fp16 kernels with every
  accumulation wide: products rounded to fp16 as on the engine, contractions (matmul,
  bmm, linear, conv, conv_transpose, cumsum) and narrow sums (``sum``, ``mean`` and the
  sums inside softmax, the norms and pooling, through the policy
  :data:`FP32_FAITHFUL_ARITH`) accumulated in float32 in the engine's
  order, and the float32 accumulator value of a contraction, ``sum`` or ``cumsum``
  carried unrounded into its consumers (through movement ops too, but not an explicit
  ``cast``); every other op (``mean`` included: it divides the wide sum and rounds)
  rounds to fp16 as on the engine, and the outputs are rounded to fp16 once. So it is
  what the engine's own arithmetic gives when no accumulator output is narrowed: the
  achievable target, not a float64 ideal. (Without the carry, ``x @ W1 - x @ W2``
  would measure the same as the fp16 baseline, bit for bit, and no cancellation fix
  could be credited.) It uses the generic, chip-independent model (no reduction route,
  no per-chip saturation), whatever the device's target.
- ``"fp16_baseline"``: the fp16 candidate's own output on the device, used when the
  fp32-faithful reference cannot be built: an op's kernel raises on the wide values, or
  a reference output holds inf or NaN (a relative error against it is undefined).
  ``report["reference_note"]`` says which. Against it the baseline's error is 0.

Choice: the cheapest candidate by ``af.estimate`` (default cost model) among those with
``error <= target_error`` (ties: lossless first, then lower error, then candidate
order); when none meets the target, the most accurate (ties: cheaper), with
``report["met"] = False``, a message, and a ``PrecisionWarning``. ``lossless`` in the
report means no lossy weight encoding (the int8 candidates are the lossy ones; the
reduce_sum and paired rewrites change values only toward the reference).

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.optimizer.precision_tune import tune_precision
    >>> x = af.input((4, 2048), name="x")
    >>> prog, report = tune_precision(x.sum(axis=-1), target_error=1e-3)
    >>> report["chosen"], report["reference"]
    ('reduce_sum_to_matmul', 'fp32_faithful')
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ..compiler.program import PassRecord, PassReport, Program
from ..cost.estimate import estimate
from ..devices import get_device
from ..emulator.interpreter import execute
from ..errors import OptionError, PrecisionWarning
from ..graph.arith import Arith
from ..graph.facts import Flag
from ..graph.fp16 import round_fp16
from ..graph.hashing import structural_hash
from ..graph.registry import get_op
from ..graph.rewrite import EQUAL_OR_BETTER, LOSSY
from ..graph.tensor import Tensor, make, weight, with_srcs
from ..graph.walk import topological_order
from ..numerics.paired import Paired, paired_subtract
from .measure import device_id, relative_deviation, seeded_inputs
from .passes import (
    REQUIRED,
    Option,
    PassResult,
    PassState,
    pipeline,
    register_pass,
    run_pipeline,
)
from .rules import reduce_sum_to_matmul

FP32_FAITHFUL = "fp32_faithful"
FP16_BASELINE = "fp16_baseline"
METRIC = "max|out - ref| / max|ref| per output, worst over the outputs"
R2M = "reduce_sum_to_matmul"
# The candidates, in the order they are built and listed.
CANDIDATES = ("fp16", R2M, "int8", f"{R2M}+int8", "paired", f"{R2M}+paired")

__all__ = [
    "CANDIDATES",
    "FP16_BASELINE",
    "FP32_FAITHFUL",
    "METRIC",
    "fp32_faithful_reference",
    "paired_cancellation",
    "tune_precision",
    "wide_gemm",
]


# ---- the fp32-faithful reference ------------------------------------------------------


def wide_gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(B, M, K) @ (B, K, N) like the engine's matmul, but the float32 sum is returned
    unrounded: each product rounded to fp16, added in ascending k into a float32
    accumulator from +0. Operands may be fp16 or float32 (a carried accumulator value);
    the product of two such values is exact in float64 before its one fp16 rounding.
    ``round_fp16(wide_gemm(a, b))`` equals the emulator's matmul bit for bit.

    Example:
        >>> import numpy as np
        >>> a = np.array([[[2048.0, 1.0, 1.0]]], np.float16)
        >>> float(wide_gemm(a, np.ones((1, 3, 1), np.float16))[0, 0, 0])
        2050.0
    """
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    nb, m, k = a64.shape
    n = b64.shape[-1]
    acc = np.zeros((nb, m, n), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for kk in range(k):
            products = round_fp16(a64[:, :, kk, None] * b64[:, kk, None, :])
            acc += products.astype(np.float32)  # float32 add, rounded once
    return acc


#: The fp32-faithful reference's arithmetic policy: the unrounded :func:`wide_gemm` and
#: narrow sums taken by the float32 accumulator, left unrounded.
FP32_FAITHFUL_ARITH = Arith(wide_gemm, wide="float32")


#: The record flags whose float32 result the fp32-faithful reference carries unrounded:
#: an accumulator's value, and the ops that move it.
_CARRIES_WIDE = frozenset({Flag.CONTRACTION, Flag.WIDE_RESULT, Flag.MOVEMENT})


def fp32_faithful_reference(program: Program, inputs) -> list[np.ndarray]:
    """The fp32-faithful reference outputs of ``program`` (fp16 arrays): module docstring.

    Raises whatever an op's kernel raises on the wide values.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.compiler.program import Program
        >>> x = af.input((4096,))
        >>> float(fp32_faithful_reference(Program.from_outputs([x.sum()]), [np.ones(4096)])[0])
        4096.0
    """

    def kernel(node, args):
        op = get_op(node.op)
        value = np.asarray(op.emulate(args, node.attrs, FP32_FAITHFUL_ARITH)).reshape(node.shape)
        if value.dtype == np.float32 and _CARRIES_WIDE & op.flags:
            return value
        return round_fp16(value)  # every other result is fp16, as on the engine

    feeds = [np.asarray(x, dtype=np.float16) for x in inputs]
    return [round_fp16(v) for v in execute(program, feeds, kernel, lambda node: node.value)]


# ---- the paired cancellation fix ------------------------------------------------------


def _contraction(t: Tensor):
    """``(x, W as (K, N) array, bias or None)`` when ``t`` is ``x @ W`` with a 2-D weight
    or ``linear(x, W[, bias])`` with a weight; else None."""
    if len(t.srcs) < 2 or t.srcs[1].op != "weight":
        return None
    if t.op == "matmul" and t.srcs[1].ndim == 2:
        return t.srcs[0], np.asarray(t.srcs[1].value, np.float16), None
    if t.op == "linear":
        bias = t.srcs[2] if len(t.srcs) == 3 else None
        return t.srcs[0], np.asarray(t.srcs[1].value, np.float16).T, bias
    return None


def _as_pair(t: Tensor):
    """The contraction ``t`` as a Paired ``(fp16(S), fp16(S - hi))`` (+ its bias)."""

    x, w, bias = _contraction(t)
    n = w.shape[1]
    hi = t if bias is None and t.op == "matmul" else make("matmul", x, weight(w))
    # [x, hi] @ [[W], [-I]]: the same ascending float32 sum S, then S - hi (exact).
    w_lo = np.concatenate([w, -np.eye(n, dtype=np.float16)], axis=0)
    lo = make("matmul", make("concat", x, hi, axis=-1), weight(w_lo))
    pair = Paired(hi, lo)
    return pair if bias is None else pair + bias


def paired_cancellation(out):
    """Replace each ``sub`` of two weight contractions by a paired-fp16 subtract.

    Matches exactly what the module docstring says (``sub(a, b)``, each operand ``x @
    W`` with a 2-D weight or ``linear(x, W[, bias])`` with a weight, one shape); returns
    ``(new outputs, number of subs rewritten)``, outputs in the structure given.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2, 8))
        >>> y, n = paired_cancellation(x @ np.ones((8, 4)) - x @ np.eye(8, 4))
        >>> n, y.op
        (1, 'add')
    """

    single = isinstance(out, Tensor)
    outs = [out] if single else list(out)
    memo: dict[int, Tensor] = {}
    count = 0
    for node in topological_order(outs):
        new = with_srcs(node, [memo[id(s)] for s in node.srcs])
        if node.op == "sub":
            a, b = node.srcs
            same = a.shape == b.shape == node.shape
            if same and _contraction(a) is not None and _contraction(b) is not None:
                new = paired_subtract(_as_pair(memo[id(a)]), _as_pair(memo[id(b)]))
                if node.name is not None and new.name is None:
                    new = new.named(node.name)  # the same value: the layer keeps its name
                count += 1
        memo[id(node)] = new
    result = [memo[id(t)] for t in outs]
    return (result[0] if single else result), count


# ---- the candidates -------------------------------------------------------------------


def _has_single_axis_sum(outs) -> bool:

    for node in topological_order(outs):
        if node.op == "sum":
            axes = node.attrs["axes"]
            x = node.srcs[0]
            axes = range(x.ndim) if axes is None else {a % max(x.ndim, 1) for a in axes}
            if len(set(axes)) == 1:
                return True
    return False


@register_pass(
    "accuracy::reduce_sum_to_matmul",
    "every single-axis sum (and cumsum) through the wide matmul accumulator, when the "
    "graph has a single-axis sum",
)
def _reduce_sum_pass(state: PassState) -> PassResult:
    if not _has_single_axis_sum(state.outputs):
        return PassResult(noop="no narrow single-axis sum to rewrite")
    outs = reduce_sum_to_matmul(list(state.outputs))
    return PassResult(tuple(outs), exactness=EQUAL_OR_BETTER)


@register_pass(
    "accuracy::paired_cancellation",
    "each sub of two weight contractions as a paired-fp16 subtract (values move toward "
    "the wide reference)",
)
def _paired_pass(state: PassState) -> PassResult:
    fixed, count = paired_cancellation(list(state.outputs))
    if not count:
        return PassResult(noop="no sub of two weight contractions to fix")
    entries = {"paired_cancellation": {"rewrites": count}}
    return PassResult(tuple(fixed), entries, exactness=EQUAL_OR_BETTER)


_R2M_PASS, _PAIRED_PASS = "accuracy::reduce_sum_to_matmul", "accuracy::paired_cancellation"
#: Each candidate's pipeline, in the order they are built and listed.
CANDIDATE_PIPELINES = {
    "fp16": pipeline("fp16"),
    R2M: pipeline(R2M, _R2M_PASS),
    "int8": pipeline("int8", "compress::int8"),
    f"{R2M}+int8": pipeline(f"{R2M}+int8", "compress::int8", _R2M_PASS),
    "paired": pipeline("paired", _PAIRED_PASS),
    f"{R2M}+paired": pipeline(f"{R2M}+paired", _R2M_PASS, _PAIRED_PASS),
}
assert tuple(CANDIDATE_PIPELINES) == CANDIDATES
#: The candidates a candidate combines: it is built only when they all are.
_COMBINES = {f"{R2M}+int8": (R2M, "int8"), "paired": ("fp16",), f"{R2M}+paired": (R2M,)}
_OPT_IN = ("paired", f"{R2M}+paired")  # only with allow_paired=True


def _candidates(outs, allow_paired: bool):
    """``(name -> (outputs, lossless, rewrites, pass report), name -> reason skipped)``.

    ``lossless`` means no lossy pass (the int8 weights); ``rewrites`` counts the paired
    subtractions."""

    built: dict[str, tuple] = {}
    skipped: dict[str, str] = {}
    for name, pipe in CANDIDATE_PIPELINES.items():
        missing = [n for n in _COMBINES.get(name, ()) if n not in built]
        if name in _OPT_IN and not allow_paired:
            skipped[name] = "opt-in: allow_paired=False"
            continue
        if missing:
            needs = _COMBINES[name]
            skipped[name] = (
                f"needs both {' and '.join(needs)}" if len(needs) > 1 else f"needs {needs[0]}"
            )
            continue
        state, report = run_pipeline(pipe, list(outs), warn=False)
        noop = next((r.noop for r in report.records if r.noop is not None), None)
        if noop is not None:
            skipped[name] = noop
            continue
        lossless = all(r.exactness != LOSSY for r in report.records)
        rewrites = state.entries.get("paired_cancellation", {}).get("rewrites", 0)
        built[name] = (list(state.outputs), lossless, rewrites, report)
    seen: dict[str, str] = {}
    unique: dict[str, tuple] = {}
    for name in CANDIDATES:
        if name not in built:
            continue
        digest = structural_hash(built[name][0])
        if digest in seen:
            skipped[name] = f"identical to {seen[digest]}"
            continue
        seen[digest] = name
        unique[name] = built[name]
    return unique, {n: skipped[n] for n in CANDIDATES if n in skipped}


# ---- the tuner ------------------------------------------------------------------------


def _check_target(target_error) -> float:
    if isinstance(target_error, bool) or not isinstance(target_error, numbers.Real):
        raise OptionError(
            f"tune_precision: target_error must be a real number, got {target_error!r} "
            "(the accepted max|out - ref| / max|ref|, e.g. 1e-3)"
        )
    value = float(target_error)
    if not (math.isfinite(value) and value >= 0):
        raise OptionError(
            f"tune_precision: target_error must be finite and >= 0, got {target_error!r}"
        )
    return value


def _reference(baseline: Program, feeds, baseline_out):
    """``(kind, outputs, note)``: the fp32-faithful reference, else the baseline's."""
    try:
        ref = fp32_faithful_reference(baseline, feeds)
    except Exception as err:  # an op kernel that cannot take the wide values
        note = f"the fp32-faithful reference failed ({type(err).__name__}: {err})"
        return FP16_BASELINE, baseline_out, note + "; measured against the fp16 baseline"
    if not all(np.all(np.isfinite(np.asarray(r, np.float64))) for r in ref):
        note = "the fp32-faithful reference holds inf or NaN (fp16 overflow)"
        return FP16_BASELINE, baseline_out, note + "; measured against the fp16 baseline"
    return FP32_FAITHFUL, ref, ""


def tune_precision(out, target_error, inputs=None, allow_paired: bool = False, device=None):
    """The cheapest candidate whose measured error is at most ``target_error``.

    Args:
        out: a Tensor or a list of Tensors.
        target_error: the accepted ``max|out - ref| / max|ref|`` (finite, >= 0).
        inputs: arrays to measure with, in program-input order (default: seeded
            standard normals).
        allow_paired: also try the paired-fp16 cancellation fix (opt-in).
        device: where candidates run (a name or Device; default: the emulator).

    Returns:
        ``(program, report)``. ``report`` has ``target_error``, ``metric``,
        ``reference`` (``"fp32_faithful"`` or ``"fp16_baseline"``) and
        ``reference_note``, ``candidates`` (per name: ``error``, ``estimate_us``,
        ``lossless``, ``chosen``, ``rewrites``), ``skipped`` (name -> reason),
        ``chosen``, ``met``, ``message``, ``allow_paired`` and ``device``; the program
        carries it as ``tune_report`` and ``passes["precision_tune"]``, and its
        ``report`` holds the chosen candidate's pipeline records. Warns
        ``PrecisionWarning`` when no candidate meets the target. Deterministic for a
        deterministic device.
    """

    target = _check_target(target_error)
    if not isinstance(allow_paired, bool):
        raise OptionError(f"tune_precision: allow_paired must be a bool, got {allow_paired!r}")
    outs = [out] if isinstance(out, Tensor) else list(out)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise OptionError("tune_precision: out must be a Tensor or a non-empty list of Tensors")
    dev = get_device(device)
    baseline = Program.from_outputs(outs)
    if inputs is None:
        feeds = seeded_inputs(baseline)
    else:
        given = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        feeds = baseline.prepare_inputs(given, {})
    baseline_out = dev.run(baseline, feeds)
    kind, ref, note = _reference(baseline, feeds, baseline_out)

    candidates, skipped = _candidates(outs, allow_paired)
    table: dict[str, dict] = {}
    programs: dict[str, Program] = {}
    for name, (graph, lossless, rewrites, _) in candidates.items():
        prog = baseline if name == "fp16" else Program.from_outputs(graph)
        got = baseline_out if name == "fp16" else dev.run(prog, feeds)
        programs[name] = prog
        table[name] = {
            "error": relative_deviation(got, ref),
            "estimate_us": float(estimate(list(prog.outputs))),
            "lossless": lossless,
            "chosen": False,
            "rewrites": rewrites,
        }
    order = list(table)
    meeting = [n for n in order if table[n]["error"] <= target]
    if meeting:
        choice = min(meeting, key=lambda n: (
            table[n]["estimate_us"], not table[n]["lossless"], table[n]["error"], order.index(n)
        ))  # fmt: skip
        message = (
            f"'{choice}' meets target_error={target:g} (error {table[choice]['error']:.3g}) "
            f"at {table[choice]['estimate_us']:.1f} us, the cheapest of {len(meeting)} "
            f"candidate(s) that do"
        )
    else:
        choice = min(order, key=lambda n: (
            table[n]["error"], table[n]["estimate_us"], order.index(n)
        ))  # fmt: skip
        message = (
            f"no candidate meets target_error={target:g}; returning the most accurate, "
            f"'{choice}' (error {table[choice]['error']:.3g}, reference {kind})"
        )
        if not allow_paired and "paired" in skipped:
            message += "; allow_paired=True may help where a subtraction cancels"
        warnings.warn(f"tune_precision: {message}", PrecisionWarning, stacklevel=2)
    table[choice]["chosen"] = True
    report = {
        "target_error": target,
        "metric": METRIC,
        "reference": kind,
        "reference_note": note,
        "candidates": table,
        "skipped": skipped,
        "chosen": choice,
        "met": bool(meeting),
        "message": message,
        "allow_paired": allow_paired,
        "device": device_id(dev),
    }
    records = candidates[choice][3].records + (PassRecord(TUNE_PASS, {"precision_tune": report}),)
    passes = PassReport(CANDIDATE_PIPELINES[choice].name, records, report)
    return programs[choice].replace(opt=2, report=passes), report


TUNE_PASS = "tune::precision"


@register_pass(
    TUNE_PASS,
    "tune_precision: the cheapest candidate whose measured error meets target_error",
    {
        "target_error": Option(REQUIRED, "the accepted max|out - ref| / max|ref|"),
        "inputs": Option(None, "arrays to measure with"),
        "allow_paired": Option(False, "also try the paired-fp16 cancellation fix",
                               lambda v: isinstance(v, bool), "True or False"),
        "device": Option(None, "where candidates run"),
    },
)  # fmt: skip
def _tune_precision_pass(state: PassState, **options) -> PassResult:
    prog, report = tune_precision(list(state.outputs), **options)  # it warns itself
    lossless = report["candidates"][report["chosen"]]["lossless"]
    exactness = EQUAL_OR_BETTER if lossless else LOSSY
    entries = {"precision_tune": report}
    return PassResult(prog.outputs, entries, exactness=exactness, tune=report)
