"""The ONNX backend node tests as a peer's test suite for ``aneforge.io.from_onnx``.

Cases: ``onnx.backend.test.loader.load_model_tests(kind="node")`` whose outputs are all
float32/float16 tensors and whose inputs are float32/float16 (the data), bool (fed as
fp16 0/1) or integer (shapes, axes, indices, positions: bound as constants at import
with ``constants=``, so they fold away), with at least one float input. Each case is
imported, compiled at the default opt level, run on the fp16 emulator and compared with
the expected outputs. Models older than opset 13 are first converted with
``onnx.version_converter.convert_version(model, 13)``, as the importer's error message
tells users to (a case whose conversion fails counts as unsupported).

Tolerance (fp16, derived, not tuned): with u = 2**-11 the fp16 unit roundoff, an output
element passes when ``|got - want| <= RTOL * |want| + ATOL * max|want|`` (NaN where NaN
is expected, infinities equal), with ``RTOL = ATOL = 8u = 2**-8``. Why: the inputs are
rounded to fp16 on the way in (u relative, amplified by the op's condition number, a
few for these inputs) and every op rounds once more (u each); 8u covers an input
rounding amplified up to ~5x plus a couple of op roundings. Sums inside reductions,
norms and contractions err in proportion to the magnitude of their terms, not to the
(possibly cancelled) result, hence the absolute part relative to the output's scale.

Classes: ``pass``; ``unsupported`` (the import refuses the model: an op, attribute or
opset aneforge cannot express; the reason is kept); ``fp16`` (the emulator misses the
tolerance but the same graph passes in float64: the float64 executor fed the unrounded
inputs matches the expected outputs within the test's own float tolerance, rtol 1e-3,
so the mapping is right and fp16 itself (range or precision) is the cause; the
evidence string says which: values beyond 65504, or precision, with the error of the
float64 reference executor on fp16-rounded inputs telling input rounding from
arithmetic); ``fail`` (everything else, including a wrong float64 result).

    python bench/onnx_conformance.py [-v]

Last lines (machine-readable):
    RESULT onnx_cases=<eligible cases>
    RESULT onnx_importable=<cases the importer accepts>
    RESULT onnx_pass_rate=<passes / importable cases not classified fp16>
    RESULT onnx_pass_rate_all_importable=<passes / importable cases>
"""

from __future__ import annotations

import re
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import aneforge as af
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import aneforge as af

from aneforge.emulator.interpreter import execute_float64
from aneforge.io import from_onnx

U16 = 2.0**-11
RTOL = 8 * U16
ATOL = 8 * U16
FP16_MAX = 65504.0


@dataclass
class Result:
    name: str
    op: str
    status: str  # pass / fail / fp16 / unsupported
    detail: str = ""
    error: float = 0.0


def _float_types():
    from onnx import TensorProto

    return (TensorProto.FLOAT, TensorProto.FLOAT16)


def eligible(case) -> bool:
    """Float outputs; float, bool or integer inputs; at least one float input."""
    from onnx import TensorProto

    graph = case.model.graph
    floats = _float_types()
    ints = (
        TensorProto.INT64,
        TensorProto.INT32,
        TensorProto.INT8,
        TensorProto.UINT8,
        TensorProto.INT16,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
    )
    kinds = []
    for vi in list(graph.input) + list(graph.output):
        if not vi.type.HasField("tensor_type"):
            return False
        kinds.append(vi.type.tensor_type.elem_type)
    outs = kinds[len(graph.input) :]
    ins = kinds[: len(graph.input)]
    if not all(k in floats for k in outs):
        return False
    if not all(k in floats or k in ints or k == TensorProto.BOOL for k in ins):
        return False
    return any(k in floats for k in ins) and bool(case.data_sets)


def load_cases(names=None):
    """The eligible node test cases (all of them, or those named), sorted by name."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    picked = [c for c in cases if eligible(c) and (names is None or c.name in names)]
    return sorted(picked, key=lambda c: c.name)


def op_label(case) -> str:
    """The op a case tests: its single node's type, else the node type named in it."""
    ops = [n.op_type for n in case.model.graph.node]
    if len(set(ops)) == 1:
        return ops[0]
    flat = case.name.replace("_", "").lower()
    named = [op for op in set(ops) if op.lower() in flat]
    base = max(named, key=len) if named else Counter(ops).most_common(1)[0][0]
    return base + (" (expanded)" if "expanded" in case.name else "")


def _split_inputs(case, inputs):
    """(constants for integer inputs, feeds by name for the rest)."""
    floats = _float_types()
    from onnx import TensorProto

    constants, feeds = {}, {}
    for vi, value in zip(case.model.graph.input, inputs):
        elem = vi.type.tensor_type.elem_type
        if elem in floats or elem == TensorProto.BOOL:
            feeds[vi.name] = np.asarray(value)
        else:
            constants[vi.name] = np.asarray(value)
    return constants, feeds


def within(got, want, rtol=RTOL, atol_scale=ATOL, atol_floor=2.0**-24):
    """(ok, worst excess ratio): elementwise ``|got - want| <= rtol|want| + atol``."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return False, np.inf
    nan_w, nan_g = np.isnan(want), np.isnan(got)
    if not np.array_equal(nan_w, nan_g):
        return False, np.inf
    inf_w = np.isinf(want)
    if not np.array_equal(got[inf_w], want[inf_w]) or np.isinf(got[~inf_w]).any():
        return False, np.inf
    ok = ~(nan_w | inf_w)
    if not ok.any():
        return True, 0.0
    scale = float(np.max(np.abs(want[ok])))
    bound = rtol * np.abs(want[ok]) + atol_scale * scale + atol_floor
    excess = float(np.max(np.abs(got[ok] - want[ok]) / bound))
    return excess <= 1.0, excess


def _graph_inputs_in_order(graph, feeds):
    return [feeds[n] for n in graph.input_names if n in feeds]


def _arrays(values):
    """Data-set values as arrays (some cases store TensorProtos)."""
    from onnx import TensorProto, numpy_helper

    out = []
    for v in values:
        out.append(numpy_helper.to_array(v) if isinstance(v, TensorProto) else np.asarray(v))
    return out


def run_case(case) -> Result:
    """Import, compile, run and classify one case (every data set must pass)."""
    label = op_label(case)
    results = []
    for inputs, expected in case.data_sets:
        results.append(_run_data_set(case, label, _arrays(inputs), _arrays(expected)))
    for wanted in ("unsupported", "fail", "fp16"):
        for r in results:
            if r.status == wanted:
                return r
    return results[0]


def _run_data_set(case, label, inputs, expected) -> Result:
    constants, feeds = _split_inputs(case, inputs)
    proto = case.model
    while True:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = from_onnx(proto, constants=constants)
            break
        except af.AneforgeError as err:
            if "version_converter" in str(err) and proto is case.model:
                # Older opsets: convert first, as the importer's message tells users to.
                proto = _converted(proto)
                if proto is None:
                    return Result(case.name, label, "unsupported", _first_reason(err))
                continue
            # Float inputs that feed parameters (resize scales, pad values, ...) fold at
            # import like the integer ones: bind them and try again.
            hints = [n for n in getattr(err, "bind_inputs", []) if n in feeds]
            if not hints:
                return Result(case.name, label, "unsupported", _first_reason(err))
            for name in hints:
                constants[name] = feeds.pop(name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = graph.compile()
            args = {t.name: feeds[t.name] for t in prog.inputs}
            got = prog(**args)
    except af.InputError as err:
        if proto is not case.model:  # the converter changed the interface (opset < 9)
            why = f"opset conversion changed the inputs: {err}"
            return Result(case.name, label, "unsupported", why[:160])
        tb = traceback.format_exception_only(type(err), err)[-1].strip()
        return Result(case.name, label, "fail", f"compile/run raised {tb}")
    except Exception as err:  # a compile or run error on an imported graph is a bug
        tb = traceback.format_exception_only(type(err), err)[-1].strip()
        return Result(case.name, label, "fail", f"compile/run raised {tb}")
    got = list(got) if isinstance(got, tuple) else [got]
    checks = [within(g, w) for g, w in zip(got, expected)]
    worst = max(c[1] for c in checks)
    if all(c[0] for c in checks):
        bound = "" if prog.inputs else "every input bound at import: a constant graph"
        return Result(case.name, label, "pass", bound, error=worst)
    return _classify(case, label, prog, feeds, expected, got, worst)


def _converted(model):
    """``model`` converted to opset 13 by ``onnx.version_converter`` (None if it fails)."""
    import onnx.version_converter

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return onnx.version_converter.convert_version(model, 13)
    except Exception:
        return None


def _first_reason(err) -> str:
    text = str(err).replace("from_onnx: ", "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].endswith("cannot be imported:"):
        lines = lines[1:]
    if lines and lines[0].startswith(("unsupported op types", "nodes that cannot")):
        lines = lines[1:]
    return re.sub(r"\s+", " ", lines[0] if lines else text)[:160]


def _classify(case, label, prog, feeds, expected, got, worst) -> Result:
    """fp16 when the float64 executor on unrounded inputs passes the test's own float
    tolerance (the mapping is right); else fail. The evidence names range/precision."""
    ordered = [feeds[t.name] for t in prog.inputs]
    with np.errstate(all="ignore"):
        f64 = execute_float64(prog, [np.asarray(v, np.float64) for v in ordered])
        ref16 = af.reference(prog, *ordered)
    ref16 = list(ref16) if isinstance(ref16, tuple) else [ref16]
    rtol, atol = max(case.rtol, 1e-3), max(case.atol, 1e-7)
    exact_ok = all(
        np.shape(a) == np.shape(w) and np.allclose(a, w, rtol=rtol, atol=atol, equal_nan=True)
        for a, w in zip(f64, expected)
    )
    if not exact_ok:
        return Result(
            case.name,
            label,
            "fail",
            f"emulator error {worst:.2g}x the fp16 tolerance; the float64 executor "
            "also misses the expected output",
            worst,
        )
    big_in = max((float(np.max(np.abs(v))) for v in feeds.values() if v.size), default=0.0)
    big_out = max(float(np.nanmax(np.abs(np.where(np.isinf(w), 0, w)))) for w in expected)
    overflow = any(np.isinf(g).any() and not np.isinf(w).any() for g, w in zip(got, expected))
    if big_in > FP16_MAX or big_out > FP16_MAX or overflow:
        why = (
            f"range: max |input| {big_in:.3g}, max |expected| {big_out:.3g}, "
            f"emulator inf={overflow} (fp16 max 65504)"
        )
    else:
        ref_ok = all(within(r, w)[0] for r, w in zip(ref16, expected))
        source = "arithmetic rounding" if ref_ok else "input rounding to fp16"
        why = (
            f"precision ({source}): emulator {worst:.2g}x the fp16 tolerance; float64 "
            f"executor on unrounded inputs within rtol {rtol:g}; float64 reference on "
            f"fp16-rounded inputs {'passes' if ref_ok else 'also misses'}"
        )
    return Result(case.name, label, "fp16", why, worst)


def main(argv) -> int:
    verbose = "-v" in argv
    start = time.perf_counter()
    cases = load_cases()
    results = []
    for case in cases:
        try:
            results.append(run_case(case))
        except Exception as err:  # an importer bug: count it, keep going
            tb = traceback.format_exception_only(type(err), err)[-1].strip()
            results.append(Result(case.name, op_label(case), "fail", f"raised {tb}"))
        if verbose:
            r = results[-1]
            print(f"{r.status:12s} {r.name:60s} {r.detail[:100]}")
    elapsed = time.perf_counter() - start
    _report(results, elapsed)
    return 0


def _report(results, elapsed) -> None:
    by_op = defaultdict(Counter)
    for r in results:
        by_op[r.op][r.status] += 1
    print(f"{'op':40s} {'cases':>5s} {'pass':>5s} {'fail':>5s} {'fp16':>5s} {'unsup':>5s}")
    for op in sorted(by_op):
        c = by_op[op]
        print(
            f"{op:40s} {sum(c.values()):5d} {c['pass']:5d} {c['fail']:5d} {c['fp16']:5d} "
            f"{c['unsupported']:5d}"
        )
    total = Counter(r.status for r in results)
    importable = len(results) - total["unsupported"]
    print(
        f"\n{len(results)} eligible cases in {elapsed:.0f} s: {total['pass']} pass, "
        f"{total['fail']} fail, {total['fp16']} fp16, {total['unsupported']} unsupported"
    )
    constant = [r.name for r in results if r.status == "pass" and r.detail]
    print(
        f"{len(constant)} of the passes bind every input at import (constant graphs): "
        f"{', '.join(constant)}"
    )
    ops = {r.op.replace(" (expanded)", "") for r in results}
    covered = {r.op.replace(" (expanded)", "") for r in results if r.status != "unsupported"}
    print(f"ops with an importable case: {len(covered)} of {len(ops)}")
    print(f"ops without one: {', '.join(sorted(ops - covered))}")
    for status in ("fail", "fp16"):
        rows = [r for r in results if r.status == status]
        if rows:
            print(f"\n{status} ({len(rows)}):")
            for r in rows:
                print(f"  {r.name}: {r.detail}")
    reasons = Counter(r.detail for r in results if r.status == "unsupported")
    print(f"\nunsupported ({total['unsupported']}), by reason:")
    for why, n in reasons.most_common():
        print(f"  {n:4d}  {why}")
    rate = total["pass"] / max(importable - total["fp16"], 1)
    rate_all = total["pass"] / max(importable, 1)
    print(f"\nRESULT onnx_cases={len(results)}")
    print(f"RESULT onnx_importable={importable}")
    print(f"RESULT onnx_pass_rate={rate:.4f}")
    print(f"RESULT onnx_pass_rate_all_importable={rate_all:.4f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
