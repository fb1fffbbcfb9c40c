"""Precision-aware tuning: candidates, reference, choice, validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.emulator.gemm import gemm_reference
from aneforge.errors import OptionError, PrecisionWarning
from aneforge.graph.fp16 import narrow_sum, round_fp16
from aneforge.graph.hashing import structural_hash
from aneforge.optimizer import precision_tune as pt
from aneforge.optimizer.precision_tune import (
    FP16_BASELINE,
    FP32_FAITHFUL,
    fp32_faithful_reference,
    paired_cancellation,
    tune_precision,
    wide_gemm,
)

TIGHT = 1e-3


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrecisionWarning)
        return fn(*args, **kwargs)


def _long_sum():
    """A long signed narrow sum: K = 4096 standard normals per row."""
    x = af.input((8, 4096), name="x")
    return x.sum(axis=-1)


def _gemv(rng):
    """Bandwidth-bound: int8 halves the weight bytes the estimate charges."""
    x = af.input((1, 4096), name="x")
    return x @ (rng.standard_normal((4096, 2048)) * 0.02)


def _cfg(rng, k=64, n=32):
    """``x @ W1 - x @ W2``: two large (|S| ~ 200) nearly equal contractions."""
    x = af.input((8, k), name="x")
    w1 = rng.standard_normal((k, n)) * 25.0
    w2 = w1 + rng.standard_normal((k, n)) * 0.05
    return x, w1, w2


# ---- the wide-accumulator mode of graph/fp16.py narrow_sum ----------------------------


def test_the_wide_mode_equals_matmul_and_leaves_narrow_sum_alone(rng):
    x = round_fp16(rng.standard_normal((3, 4096)))
    before = narrow_sum(x, axis=-1)
    ones = np.ones((1, 4096, 1), np.float16)
    wide = narrow_sum(x, axis=-1, wide="fp16")
    # the wide accumulator takes precedence over routes
    routed = narrow_sum(x, axis=-1, route=192, wide="fp16")
    unrounded = narrow_sum(x, axis=-1, wide="float32")
    assert wide.dtype == np.float16 and unrounded.dtype == np.float32
    for row in range(3):
        mm = gemm_reference(x[row][None, None], ones)[0, 0, 0]
        assert wide[row].tobytes() == mm.tobytes()
    assert routed.tobytes() == wide.tobytes()
    assert round_fp16(unrounded).tobytes() == wide.tobytes()
    exact = x.astype(np.float64).sum(axis=-1)
    assert np.max(np.abs(unrounded - exact)) < np.max(np.abs(before - exact))
    # Without the wide mode the narrow sum is bit-identical to before (and still narrow).
    assert narrow_sum(x, axis=-1).tobytes() == before.tobytes()
    assert float(narrow_sum(np.ones(4096, np.float16), axis=0)) == 2048.0


def test_wide_gemm_is_the_emulator_matmul_before_its_rounding(rng):
    a = round_fp16(rng.standard_normal((2, 5, 300)) * 30)
    b = round_fp16(rng.standard_normal((2, 300, 7)))
    s = wide_gemm(a, b)
    assert s.dtype == np.float32
    assert round_fp16(s).tobytes() == gemm_reference(a, b).tobytes()


def test_reference_carries_the_accumulator_into_the_subtract(rng):
    x, w1, w2 = _cfg(rng)
    prog = Program.from_outputs([x @ w1 - x @ w2])
    xv = round_fp16(rng.standard_normal((8, 64)))
    (ref,) = fp32_faithful_reference(prog, [xv])

    def accumulator(w):  # fp16 products, a sequential float32 sum (np.cumsum is in order)
        products = round_fp16(xv.astype(np.float64)[:, :, None] * round_fp16(w)[None])
        return np.cumsum(products.astype(np.float32), axis=1)[:, -1, :]

    want = round_fp16(accumulator(w1).astype(np.float64) - accumulator(w2))
    assert ref.tobytes() == want.tobytes()
    (fp16,) = af.get_device("emulator").run(prog, [xv])
    assert not np.array_equal(ref, fp16)  # the fp16 baseline narrows S before the sub


def test_reference_equals_the_emulator_without_accumulations(rng):
    x = af.input((4, 16), name="x")
    prog = Program.from_outputs([(x * 3.0 + 1.0).relu()])
    xv = round_fp16(rng.standard_normal((4, 16)))
    (ref,) = fp32_faithful_reference(prog, [xv])
    (emu,) = af.get_device("emulator").run(prog, [xv])
    assert ref.tobytes() == emu.tobytes()


def test_reference_runs_every_accumulating_op_closer_to_float64(rng):
    x = af.input((1, 8, 16, 16), name="x")
    q = af.input((1, 64, 32), name="q")
    outs = [
        af.conv(x, rng.standard_normal((8, 8, 3, 3)) * 0.2, padding=1),
        af.layer_norm(q),
        (q @ rng.standard_normal((32, 32))).softmax(-1),
        af.sdpa(q, q, q),
        af.cumsum(q),
        af.avg_pool(x, 2),
        q.mean(axis=-1),
        af.group_norm(x, 2),
        af.linear(q, rng.standard_normal((16, 32)), rng.standard_normal(16)),
    ]
    for out in outs:
        prog = Program.from_outputs([out])
        feeds = [round_fp16(rng.standard_normal(t.shape)) for t in prog.inputs]
        exact = np.asarray(af.reference(out, *feeds), np.float64)
        (ref,) = fp32_faithful_reference(prog, feeds)
        (emu,) = af.get_device("emulator").run(prog, feeds)
        assert ref.dtype == np.float16 and ref.shape == out.shape
        assert np.max(np.abs(ref - exact)) <= np.max(np.abs(emu - exact)), out.op


# ---- the three cases -------------------------------------------------------------------


def test_long_reduce_sum_fp16_misses_and_reduce_to_matmul_meets():
    out = _long_sum()
    prog, report = tune_precision(out, target_error=TIGHT)
    cands = report["candidates"]
    assert report["reference"] == FP32_FAITHFUL and report["met"]
    assert cands["fp16"]["error"] > TIGHT
    assert cands["reduce_sum_to_matmul"]["error"] <= TIGHT
    assert report["chosen"] == "reduce_sum_to_matmul"
    assert cands["reduce_sum_to_matmul"]["chosen"] and not cands["fp16"]["chosen"]
    assert "matmul" in [n.op for n in prog.compute_nodes]
    assert prog.tune_report is report and prog.passes["precision_tune"] is report
    assert set(report["skipped"]) == {"int8", "reduce_sum_to_matmul+int8", "paired",
                                      "reduce_sum_to_matmul+paired"}  # fmt: skip
    # af.tune delegates; like every tune it returns the Program, its report attached.
    prog2 = af.tune(out, target_error=TIGHT)
    assert isinstance(prog2, af.Program) and prog2.tune_report == report
    assert prog2.report.ran == ("accuracy::reduce_sum_to_matmul", "tune::precision")
    assert structural_hash(list(prog2.outputs)) == structural_hash(list(prog.outputs))


def test_int8_wins_a_loose_target_and_is_rejected_by_a_tight_one(rng):
    out = _gemv(rng)
    _, loose = tune_precision(out, target_error=0.05)
    cands = loose["candidates"]
    assert set(cands) == {"fp16", "int8"}
    assert cands["int8"]["estimate_us"] < cands["fp16"]["estimate_us"]
    assert TIGHT < cands["int8"]["error"] <= 0.05
    assert cands["fp16"]["error"] <= TIGHT
    assert loose["chosen"] == "int8" and loose["met"] and not cands["int8"]["lossless"]
    prog, tight = tune_precision(out, target_error=TIGHT)
    assert tight["chosen"] == "fp16" and tight["met"]
    assert not tight["candidates"]["int8"]["chosen"]
    assert all(n.attrs.get("encoding", "fp16") == "fp16" for n in prog.nodes if n.op == "weight")


def test_cfg_difference_needs_the_opt_in_paired_fix(rng):
    x, w1, w2 = _cfg(rng)
    out = x @ w1 - x @ w2
    with pytest.warns(PrecisionWarning, match="no candidate meets"):
        _, off = tune_precision(out, target_error=TIGHT)
    assert not off["met"] and "allow_paired=True" in off["message"]
    assert "paired" not in off["candidates"]
    errors = {n: c["error"] for n, c in off["candidates"].items()}
    assert off["chosen"] == min(errors, key=errors.get) == "fp16"
    assert errors["fp16"] > 10 * TIGHT
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        prog, on = tune_precision(out, target_error=TIGHT, allow_paired=True)
    paired = on["candidates"]["paired"]
    assert on["met"] and on["chosen"] == "paired" and paired["rewrites"] == 1
    assert paired["error"] <= TIGHT and paired["lossless"]
    assert on["candidates"]["fp16"]["error"] > 100 * paired["error"]
    # The returned program computes the fix (run it on fresh inputs).
    xv = rng.standard_normal((8, 64))
    ref = fp32_faithful_reference(Program.from_outputs([out]), [round_fp16(xv)])[0]
    got, plain = prog(xv), af.compile(out)(xv)
    assert np.max(np.abs(got - ref)) < np.max(np.abs(plain - ref)) / 100


def test_paired_fix_matches_linear_with_bias_and_nothing_else(rng):
    x = af.input((4, 32), name="x")
    w1 = rng.standard_normal((16, 32)) * 20.0
    w2 = w1 + rng.standard_normal((16, 32)) * 0.05
    bias = rng.standard_normal(16)
    out = af.linear(x, w1, bias) - af.linear(x, w2, bias)
    fixed, count = paired_cancellation(out)
    assert count == 1 and fixed.shape == out.shape
    xv = round_fp16(rng.standard_normal((4, 32)))
    ref = fp32_faithful_reference(Program.from_outputs([out]), [xv])[0].astype(np.float64)
    got = af.get_device("emulator").run(Program.from_outputs([fixed]), [xv])[0]
    plain = af.get_device("emulator").run(Program.from_outputs([out]), [xv])[0]
    assert np.max(np.abs(got - ref)) < np.max(np.abs(plain - ref)) / 10
    # Not matched: an operand that is not a weight contraction, or a broadcasting sub.
    y = af.input((4, 16), name="y")
    z = af.input((32, 16), name="z")
    for graph in (x @ w1.T - y, (x @ w1.T) - (x[:1] @ w2.T), x @ z - x @ (z * 2.0)):
        assert graph.op == "sub" and paired_cancellation(graph)[1] == 0
    _, report = _quiet(tune_precision, x @ w1.T - y, target_error=TIGHT, allow_paired=True)
    assert "no sub of two weight contractions" in report["skipped"]["paired"]


def test_every_candidate_is_built_where_it_applies(rng):
    x = af.input((4, 64), name="x")
    w1 = rng.standard_normal((64, 32)) * 10.0
    out = (x @ w1 - x @ (w1 + 0.01)).sum(axis=-1)
    _, report = _quiet(tune_precision, out, target_error=TIGHT, allow_paired=True)
    assert list(report["candidates"]) == list(pt.CANDIDATES)
    assert report["skipped"] == {}
    assert sum(c["chosen"] for c in report["candidates"].values()) == 1
    fixed = report["candidates"]["reduce_sum_to_matmul+paired"]
    assert fixed["error"] <= min(c["error"] for c in report["candidates"].values())


# ---- reference fallback, determinism, validation ---------------------------------------


def test_reference_falls_back_to_the_fp16_baseline(monkeypatch):
    x = af.input((4096,), name="x")
    big = np.full(4096, 100.0)  # the wide sum, 409600, overflows fp16
    _, report = tune_precision(x.sum(), target_error=TIGHT, inputs=[big])
    assert report["reference"] == FP16_BASELINE and "inf or NaN" in report["reference_note"]
    assert report["candidates"]["fp16"]["error"] == 0.0 and report["met"]

    def boom(program, inputs):
        raise RuntimeError("no wide kernel")

    monkeypatch.setattr(pt, "fp32_faithful_reference", boom)
    _, report = tune_precision(_long_sum(), target_error=TIGHT)
    assert report["reference"] == FP16_BASELINE and "no wide kernel" in report["reference_note"]
    assert report["candidates"]["fp16"]["error"] == 0.0 and report["chosen"] == "fp16"
    assert report["candidates"]["reduce_sum_to_matmul"]["error"] > TIGHT


def test_deterministic(rng):
    x, w1, w2 = _cfg(rng)
    out = x @ w1 - x @ w2
    runs = [tune_precision(out, target_error=TIGHT, allow_paired=True) for _ in range(2)]
    (p1, r1), (p2, r2) = runs
    assert r1 == r2
    assert structural_hash(list(p1.outputs)) == structural_hash(list(p2.outputs))
    xv = rng.standard_normal((8, 64))
    assert np.array_equal(p1(xv), p2(xv))


def test_given_inputs_are_used(rng):
    out = _long_sum()
    ones = np.ones((8, 4096))  # the narrow sum stalls at 2048, the wide one reaches 4096
    _, report = tune_precision(out, target_error=TIGHT, inputs=ones)
    assert report["candidates"]["fp16"]["error"] == pytest.approx(0.5)
    assert report["chosen"] == "reduce_sum_to_matmul"


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), float("inf"), "1e-3", None, True, [1e-3]])
def test_target_error_is_validated(bad):
    with pytest.raises(OptionError, match="target_error"):
        tune_precision(_long_sum(), target_error=bad)


def test_tune_delegation_options_are_validated():
    out = _long_sum()
    with pytest.raises(OptionError, match="allow_paired=True needs target_error"):
        af.tune(out, allow_paired=True)
    with pytest.raises(OptionError, match="atol"):
        af.tune(out, target_error=TIGHT, atol=0.1)
    with pytest.raises(OptionError, match="target_error"):
        af.tune(out, target_error=-1.0)
    with pytest.raises(OptionError, match="allow_paired"):
        tune_precision(out, target_error=TIGHT, allow_paired="yes")
