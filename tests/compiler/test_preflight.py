"""Preflight (compiler/preflight.py): every family limit, reported all at once.

Each limit is checked on both sides (the value at the limit passes, one past fails) and
on the families it does and does not apply to; compile raises one PreflightError naming
every violation, or applies the sin/cos lowering and says so. The lowering is checked
against float64 sin/cos with the spec's fp16-limited accuracy (~1e-3).
"""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.preflight import (
    COS_COEFFS,
    PI_HI,
    PI_LO,
    SIN_COEFFS,
    _check,
    axis_role,
    half_period,
    preflight,
)
from aneforge.errors import PreflightError, PreflightWarning
from aneforge.graph.ops.bridge import dynamic_slice, sort, topk
from aneforge.targets.names import resolve_target as resolve

# The spec's claim for the half-period forms: fp16-rounding-limited, about 1e-3.
HALF_PERIOD_ABS_ERR = 1.5e-3


def checks(out, target):
    return [(v.check, v.op, v.limit, v.value) for v in preflight(out, target).violations]


# ---- the limits ------------------------------------------------------------------------


def test_axis_roles_follow_the_right_aligned_nchw_layout():
    assert [axis_role(5, a) for a in range(5)] == [
        "batch",
        "channels",
        "spatial",
        "spatial",
        "spatial",
    ]
    assert [axis_role(4, a) for a in range(4)] == ["batch", "channels", "spatial", "spatial"]
    assert [axis_role(3, a) for a in range(3)] == ["channels", "spatial", "spatial"]
    assert [axis_role(2, a) for a in range(2)] == ["spatial", "spatial"]
    assert axis_role(1, 0) == "spatial"


@pytest.mark.parametrize(
    "target, limit", [("M1", 16384), ("h14", 16384), ("h15", 16384), ("M4", 65536)]
)
def test_spatial_extent_limit_is_16384_through_a15_and_65536_at_a16(target, limit):
    at = af.input((2, limit))
    past = af.input((2, limit + 1))
    assert checks(at * 2.0, target) == []
    assert checks(past * 2.0, target) == [
        ("spatial", "input", limit, limit + 1),
        ("spatial", "mul", limit, limit + 1),
    ]


def test_channel_limit_is_65536_on_every_family_and_batch_is_free():
    x = af.input((70000, 65537, 1, 1))
    for target in ("M1", "M4"):
        assert checks(x, target) == [("channels", "input", 65536, 65537)]
    assert checks(af.input((3, 65536, 1, 1)), "M1") == []
    assert checks(af.input((65537, 4, 4)), "M1") == [("channels", "input", 65536, 65537)]


def test_contraction_length_is_limited_like_a_spatial_extent():
    x = af.input((4, 2, 20000))  # channels 4, H 2, W 20000
    y = x @ np.zeros((20000, 2), np.float32)
    found = checks(y, "M1")
    assert ("contraction", "matmul", 16384, 20000) in found
    assert ("spatial", "input", 16384, 20000) in found
    assert checks(y, "M5") == []
    a = af.input((17000, 3))
    found = checks(af.bmm(af.transpose(a), a), "h15")
    assert ("contraction", "bmm", 16384, 17000) in found


@pytest.mark.parametrize("target, limit", [("M1", 13), ("h14", 13), ("h15", 13), ("M5", 15)])
def test_conv_kernel_width_limit(target, limit):
    x = af.input((1, 2, 4, 40))
    ok = af.conv(x, np.ones((3, 2, 1, limit)))
    bad = af.conv(x, np.ones((3, 2, 1, limit + 1)))
    tall = af.conv(x, np.ones((3, 2, 3, limit)))  # only the width is limited
    assert checks([ok, tall], target) == []
    assert checks(bad, target) == [("kernel_width", "conv", limit, limit + 1)]
    up = af.conv_transpose(x, np.ones((2, 3, 1, limit + 1)))
    assert checks(up, target) == [("kernel_width", "conv_transpose", limit, limit + 1)]


def test_rank_above_five_is_a_violation():
    # the graph API already refuses rank 6, so the check is exercised on a stand-in node
    node = SimpleNamespace(op="reshape", shape=(1, 2, 1, 2, 1, 2), srcs=())
    found = _check(3, node, resolve("M4"))
    assert [(v.check, v.limit, v.value, v.node) for v in found] == [("rank", 5, 6, 3)]


# ---- ops below their family floor ---------------------------------------------------------


def test_op_floors_and_which_have_a_lowering():
    x = af.input((3, 16))
    start = af.input((2,))
    vals, idx = topk(x, 2)
    outs = [x.sin(), x.cos(), sort(x), vals, idx, dynamic_slice(x, start, (2, 4))]
    m1 = preflight(outs, "M1")
    assert [(v.op, v.limit, v.value, v.lowering is not None) for v in m1.violations] == [
        ("sin", 4, 2, True),
        ("cos", 4, 2, True),
        ("sort", 3, 2, False),
        ("topk", 3, 2, False),
        ("topk", 3, 2, False),
        ("dynamic_slice", 3, 2, False),
    ]
    a14 = preflight(outs, "h14")  # family 3: selection ops run, trig still lowers
    assert [v.op for v in a14.violations] == ["sin", "cos"]
    assert a14.blocking == [] and len(a14.lowerable) == 2
    assert preflight(outs, "h15").ok and preflight(outs, "M5").ok


def test_family_one_has_no_mil_path_at_all():
    x = af.input((2,))
    rep = preflight(x * 2.0, "h11")
    assert [(v.check, v.node) for v in rep.violations] == [("no_mil", None)]
    assert "no MIL path" in str(rep)
    with pytest.raises(PreflightError, match="no MIL path"):
        af.compile(x * 2.0, target="t0")


# ---- reporting -------------------------------------------------------------------------


def test_compile_raises_once_listing_every_violation_with_node_limit_and_value():
    x = af.input((1, 2, 8, 20000))
    y = af.conv(x, np.ones((3, 2, 1, 14)))
    out = sort(y.sin())
    with pytest.raises(PreflightError) as err:
        af.compile(out, target="M1")
    text = str(err.value)
    for piece in ("node %0 input (1, 2, 8, 20000)", "20000", "16384", "kernel width 14 > 13"):
        assert piece in text
    assert "sin needs capability family 4" in text and "compile lowers it" in text
    assert "sort needs capability family 3" in text and "no lowering exists" in text
    report = err.value.report
    assert len(report.violations) == len(text.splitlines()) - 1
    assert {v.check for v in report.violations} == {"spatial", "kernel_width", "op_floor"}
    assert isinstance(err.value, ValueError) and isinstance(err.value, af.AneforgeError)


def test_preflight_accepts_a_program_and_reports_ok():
    x = af.input((4, 8))
    prog = af.compile(af.softmax(x), opt=0)
    rep = preflight(prog, "M1")
    assert rep.ok and rep.target == "h13" and rep.family == 2
    assert str(rep).endswith("ok")


def test_unknown_target_is_an_option_error_with_close_matches():
    with pytest.raises(af.OptionError, match="Close matches"):
        preflight(af.input((2,)) * 2.0, "M1 Maxx")


# ---- the sin / cos lowering ----------------------------------------------------------------


def test_compile_lowers_sin_and_cos_below_a15_and_says_so():
    x = af.input((3, 50), name="x")
    out = [x.sin() * 2.0, x.cos()]
    with pytest.warns(PreflightWarning, match="half-period"):
        prog = af.compile(out, target="M1")
    ops = {n.op for n in prog.compute_nodes}
    assert "sin" not in ops and "cos" not in ops
    assert ops <= {"mul", "add", "sub", "round", "floor", "neg", "select"}
    assert prog.passes["preflight"]["lowered"] == {"cos": 1, "sin": 1}
    assert len(prog.passes["preflight"]["violations"]) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", PreflightWarning)
        native = af.compile(out, target="h15")
    assert {"sin", "cos"} <= {n.op for n in native.compute_nodes}


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_half_period_form_is_accurate_to_the_fp16_floor(fn):
    n = 20001
    x = af.input((n,))
    prog = af.compile(half_period(x, fn), opt=0)
    for span in (math.pi, 8 * math.pi, 200.0):
        xs = np.linspace(-span, span, n).astype(np.float16)
        y = prog(xs).astype(np.float64)
        exact = getattr(np, fn)(xs.astype(np.float64))
        assert np.max(np.abs(y - exact)) <= HALF_PERIOD_ABS_ERR
    assert float(prog(np.zeros(n, np.float16))[0]) == (0.0 if fn == "sin" else 1.0)


def test_lowered_program_runs_on_the_target_and_matches_native_closely(rng):
    x = af.input((4, 64))
    xs = rng.uniform(-20, 20, (4, 64))
    with pytest.warns(PreflightWarning):
        lowered = af.compile(x.sin() + x.cos(), target="h13")
    native = af.compile(x.sin() + x.cos())
    assert np.max(np.abs(lowered(xs) - native(xs))) <= 2 * HALF_PERIOD_ABS_ERR + 2**-9


def test_coefficients_are_fitted_not_typed():
    r = np.linspace(0, math.pi / 2, 1001)
    sin_fit = r * sum(c * r ** (2 * i) for i, c in enumerate(SIN_COEFFS))
    cos_fit = sum(c * r ** (2 * i) for i, c in enumerate(COS_COEFFS))
    assert np.max(np.abs(sin_fit - np.sin(r))) < 1e-5  # far below the fp16 floor
    assert np.max(np.abs(cos_fit - np.cos(r))) < 1e-5
    assert abs(SIN_COEFFS[1] + 1 / 6) < 1e-3 and abs(COS_COEFFS[1] + 1 / 2) < 1e-3
    assert PI_HI == 3.125 and math.pi == PI_HI + PI_LO
    assert float(np.float16(PI_HI) * np.float16(64)) == 64 * PI_HI  # n * PI_HI exact


def test_compile_records_the_target_and_the_opt2_path_preflights_too():
    x = af.input((2, 16))
    prog = af.compile(af.softmax(x), target="M2")
    assert prog.target.arch == "h14" and "target=h14" in repr(prog)
    with pytest.raises(PreflightError):
        af.compile(sort(x), target="M1", opt=2)
