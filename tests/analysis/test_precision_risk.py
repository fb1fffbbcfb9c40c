"""precision_risk: the static fp16 risk model, calibrated against the emulator.

The key test draws random rows (three seeds; N(0, 1): signed with mean 0, N(1, 1):
signed with a nonzero mean, U(0, 1): non-negative) for flagged and unflagged graphs and
measures the emulator's error against the float64 reference (``af.reference``).

Error metric: the tuner's normwise relative error of one output,
``max|emu - ref| / max|ref|`` over all its elements, the median over the seeds. A
measured error above 1 counts as 1, the top of the proxy's scale (no digit left).

Contract held here:
- every listed narrow_sum node's proxy is within a factor 10 of the measured error;
- unflagged graphs stay within an order of magnitude of fp16 noise (<= 10 * 1e-3; the
  spec's own 256-term floor leaves sums measuring 2-6e-3 unflagged), and the
  wide-accumulator sums (``x @ ones``, ``af.reduce_sum_to_matmul``) at fp16 noise
  (<= 1e-3);
- hotspots (the default signal) measure well beyond the tuner's 5e-3 noise, except the
  signed sums just past the spec's floor.
Run with ``-s`` to see the calibration table.
"""

from __future__ import annotations

import math
import warnings
from functools import cache

import numpy as np
import pytest

import aneforge as af
from aneforge.analysis.precision import (
    _DRIFT_LENGTH,
    _FP16_CLEAN,
    _NARROW_SUM_FLOOR,
    MODES,
    PrecisionError,
    PrecisionReport,
    check_precision,
    effective_length,
    narrow_sum_proxy,
    precision_risk,
)
from aneforge.errors import AneforgeError, OptionError, PrecisionWarning
from aneforge.graph.registry import all_ops
from aneforge.testing.calibration_grid import DISTS
from aneforge.testing.calibration_grid import GRAPHS as CAL_GRAPHS

U16 = 2.0**-11
# The numerics source (docs/sources.md): "the default tolerance is fp16 noise (5e-3)".
TUNER_NOISE = 5e-3
ROWS = 32
SEEDS = (0, 1, 2)
KS = (64, 256, 1024, 4096, 16384)

# The calibration grid without rms_norm / l2_norm (the bench runs those; same proxy path
# as layer_norm), to keep the suite fast.
GRAPHS = {g: f for g, f in CAL_GRAPHS.items() if g not in ("rms_norm", "l2_norm")}
WIDE = ("x@ones", "sum->matmul")

# The split reduction routes: M1 (A13, 192 terms) and M5 (A16, 384 terms).
ROUTE_GRAPHS = ("sum", "exp.sum", "softmax", "layer_norm")
ROUTE_CELLS = [
    (g, d, k, t)
    for t in ("M1", "M5")
    for g in ROUTE_GRAPHS
    for d in ("N(0,1)", "N(1,1)")
    for k in (1024, 16384)
]
GENERIC_CELLS = [(g, d, k, None) for g in GRAPHS for d in DISTS for k in KS]


def compile_quietly(out, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return af.compile(out, opt=0, **kwargs)


@cache
def measure(graph, dist, k, target):
    """(listed proxy or 0, hotspot?, measured normwise error) of one calibration cell."""
    x = af.input((ROWS, k), name="x")
    prog = compile_quietly(GRAPHS[graph](x), target=target)
    rep = precision_risk(prog, verbose=True)
    proxy = max((e.proxy for e in rep.by_mode("narrow_sum")), default=0.0)
    errors = []
    for seed in SEEDS:
        data = DISTS[dist](np.random.default_rng(seed), (ROWS, k))
        got = np.asarray(prog(data), np.float64)
        ref = np.asarray(af.reference(prog, data), np.float64)
        errors.append(float(np.max(np.abs(got - ref)) / np.max(np.abs(ref))))
    return proxy, bool(rep.hotspots), float(np.median(errors))


def table(cells) -> list[tuple]:
    rows = [(c, *measure(*c)) for c in cells]
    print(f"\n{'graph':12s} {'data':7s} {'K':>6s} {'target':7s} {'proxy':>8s} {'measured':>9s}")
    for (g, d, k, t), proxy, hot, err in rows:
        tag = " hotspot" if hot else (" listed" if proxy else "")
        print(f"{g:12s} {d:7s} {k:6d} {t or 'generic':7s} {proxy:8.2e} {err:9.2e}{tag}")
    return rows


# ---- the calibration ---------------------------------------------------------------


@pytest.mark.parametrize("cells", [GENERIC_CELLS, ROUTE_CELLS], ids=["generic", "routes"])
def test_the_proxy_is_within_an_order_of_magnitude_where_it_flags(cells):
    rows = table(cells)
    listed = [(c, p, min(e, 1.0)) for c, p, _, e in rows if p > 0]
    assert listed
    off = [(c, p, e) for c, p, e in listed if not 0.1 <= p / e <= 10]
    assert not off, f"proxy more than 10x from the measured error: {off}"


@pytest.mark.parametrize("cells", [GENERIC_CELLS, ROUTE_CELLS], ids=["generic", "routes"])
def test_unflagged_graphs_stay_at_fp16_noise(cells):
    quiet = [(c, e) for c, p, _, e in table(cells) if p == 0]
    assert quiet
    loud = [(c, e) for c, e in quiet if e > 10 * _FP16_CLEAN]
    assert not loud, f"unflagged but beyond fp16 noise: {loud}"
    wide = [(c, e) for c, e in quiet if c[0] in WIDE and e > _FP16_CLEAN]
    assert not wide, f"wide-accumulator sums beyond fp16 noise: {wide}"


def test_flags_follow_the_structure_not_the_data():
    for graph in GRAPHS:
        for k in KS:
            flags = {measure(graph, d, k, None)[:2] for d in DISTS}
            assert len(flags) == 1, (graph, k, flags)
    assert all(measure(g, "N(0,1)", k, None)[0] == 0 for g in WIDE for k in KS)
    assert all(measure(g, d, 256, None)[0] == 0 for g in GRAPHS for d in DISTS)
    assert all(measure(g, "N(0,1)", 1024, None)[0] > 0 for g in GRAPHS if g not in WIDE)


def test_hotspots_are_real_losses():
    rows = table(GENERIC_CELLS)
    hot = [(c, e) for c, _, h, e in rows if h]
    assert hot
    # signed sums past the floor: beyond clean-op noise; drifting same-sign sums: far past
    # the tuner's noise
    assert all(e > 2 * _FP16_CLEAN for _, e in hot)
    same_sign = [(c, e) for c, e in hot if c[0] not in ("sum", "mean")]
    assert same_sign and all(e > 2 * TUNER_NOISE for _, e in same_sign)


def test_the_fix_recovers_the_accuracy():
    for dist in DISTS:
        proxy, hot, err = measure("sum", dist, 16384, None)
        fixed_proxy, fixed_hot, fixed = measure("sum->matmul", dist, 16384, None)
        assert hot and not fixed_hot and fixed_proxy == 0
        assert fixed < err / 10 and fixed <= _FP16_CLEAN


# ---- the narrow-sum rule -----------------------------------------------------------


def test_a_signed_sum_is_flagged_past_256_terms():
    assert _NARROW_SUM_FLOOR == 256
    assert not precision_risk(af.input((2, 256)).sum(-1), verbose=True).nodes
    (node,) = precision_risk(af.input((2, 257)).sum(-1)).hotspots
    assert node.mode == "narrow_sum" and node.terms == 257 and not node.informational
    assert node.proxy == pytest.approx(math.sqrt(257) * U16)


@pytest.mark.parametrize("k", [300, 1024, 2048, 4096, 16384, 10**6])
def test_the_proxy_formula(k):
    same = min(1.0, math.sqrt(k) * U16 * max(1.0, k / 2048))
    signed = math.sqrt(min(1.0, math.sqrt(k) * U16) * same)
    assert narrow_sum_proxy(k, same_sign=True) == pytest.approx(same)
    assert narrow_sum_proxy(k) == pytest.approx(signed)
    assert 0 < narrow_sum_proxy(k) <= narrow_sum_proxy(k, same_sign=True) <= 1.0
    x = af.input((1, k))
    assert precision_risk(x.sum(-1)).signal == pytest.approx(signed)


def test_mean_is_the_same_narrow_sum():
    x = af.input((3, 4096))
    (s,) = precision_risk(x.sum(-1)).hotspots
    (m,) = precision_risk(x.mean(-1)).hotspots
    assert (m.op, m.proxy, m.terms) == ("mean", s.proxy, s.terms)
    assert "1/K" in m.fix and "reduce_sum_to_matmul" in s.fix


def test_multi_axis_sums_count_every_reduced_term():
    x = af.input((4, 20, 30))
    (node,) = precision_risk(x.sum((1, 2))).hotspots
    assert node.terms == 600
    assert not precision_risk(x.sum(1)).nodes  # 20 terms


NONNEGATIVE = sorted(n for n, op in all_ops().items() if op.always_nonnegative)


def _producer(name, x):
    op = all_ops()[name]
    if op.arity == 2:
        return af.graph.tensor.make(name, x, x * 0.5)
    return af.graph.tensor.make(name, x)


@pytest.mark.parametrize("name", NONNEGATIVE)
def test_nonnegative_producers_are_exempt_from_the_default_signal(name):
    x = af.input((2, 1024))
    y = _producer(name, x).sum(-1)
    rep = precision_risk(y, verbose=True)
    assert rep.signal == 0.0 and not rep.hotspots
    *inner, node = rep.by_mode("narrow_sum")  # softmax has a narrow sum of its own
    assert node.op == "sum" and [e.op for e in inner] == (["softmax"] if inner else [])
    assert all(e.informational for e in inner + [node]) and "same-sign" in node.detail
    assert node.proxy == pytest.approx(math.sqrt(1024) * U16)
    assert not precision_risk(y).nodes  # not listed by default


def test_the_spec_list_of_nonnegative_producers_is_covered():
    assert {"square", "abs", "relu", "sigmoid", "exp", "softplus"} <= set(NONNEGATIVE)


@pytest.mark.parametrize(
    "build",
    [
        lambda x: (x * x).sum(-1),
        lambda x: x.square().reshape((2, 32, 64)).transpose((0, 2, 1)).sum((1, 2)),
        lambda x: af.concat([x.exp(), x.relu()], axis=-1)[:, :2048].sum(-1),
        lambda x: (x.exp() + x.sigmoid() * 2.0).sum(-1),
        lambda x: af.maximum(x, 0.0).sum(-1),
        lambda x: af.clip(x, lo=0.0).sum(-1),
        lambda x: (x.abs() / (x.square() + 1.0)).mean(-1),
    ],
)
def test_nonnegativity_propagates_through_simple_ops(build):
    x = af.input((2, 2048))
    (node,) = precision_risk(build(x), verbose=True).by_mode("narrow_sum")
    assert "same-sign" in node.detail


@pytest.mark.parametrize(
    "build",
    [
        lambda x, y: (x * y).sum(-1),
        lambda x, y: (x.exp() - y.exp()).sum(-1),
        lambda x, y: (x.relu() + y).sum(-1),
        lambda x, y: (x.exp() * -1.0).sum(-1),
        lambda x, y: x.gelu().sum(-1),
    ],
)
def test_signed_terms_stay_possibly_signed(build):
    x, y = af.input((2, 2048)), af.input((2, 2048))
    (node,) = precision_risk(build(x, y)).hotspots
    assert "possibly-signed" in node.detail and not node.informational


def test_same_sign_sums_become_hotspots_once_their_run_drifts():
    assert _DRIFT_LENGTH == 1024
    for k, hot in ((1024, False), (1025, True), (4096, True)):
        rep = precision_risk(af.softmax(af.input((2, k))), verbose=True)
        (node,) = rep.by_mode("narrow_sum")
        assert node.informational is not hot
        assert bool(rep.hotspots) is hot


@pytest.mark.parametrize(
    "build, terms",
    [
        (lambda x: af.softmax(x), 2048),
        (lambda x: af.layer_norm(x), 2048),
        (lambda x: af.rms_norm(x), 2048),
        (lambda x: af.l2_norm(x), 2048),
        (lambda x: af.group_norm(x.reshape((2, 8, 16, 16)), num_groups=1), 2048),
    ],
)
def test_softmax_and_norm_sums_count_as_same_sign(build, terms):
    x = af.input((2, 2048))
    (node,) = precision_risk(build(x)).hotspots
    assert node.terms == terms and "same-sign" in node.detail
    assert "target" in node.fix


def test_avg_pool_windows_are_narrow_sums():
    x = af.input((1, 2, 40, 40))
    (node,) = precision_risk(af.avg_pool(x, kernel_size=17)).hotspots
    assert node.terms == 289 and "possibly-signed" in node.detail
    assert not precision_risk(af.avg_pool(x, kernel_size=16), verbose=True).nodes


# ---- routes ----------------------------------------------------------------------------


def test_the_split_route_shortens_the_effective_length():
    assert effective_length(300, None, False) == (300.0, 300)
    assert effective_length(300, 384, True) == (300.0, 300)
    length, run = effective_length(16384, 384, True)
    n = 43
    assert run == 384 and length == pytest.approx((math.sqrt(384 / n) + math.sqrt(n)) ** 2)
    assert effective_length(16384, 192, False) == (192.0 + 86, 192)


def test_a_programs_target_sets_the_route():
    x = af.input((2, 16384))
    y = af.softmax(x)
    assert precision_risk(y).hotspots
    assert not precision_risk(compile_quietly(y, target="M5"), verbose=True).nodes
    assert not precision_risk(y, verbose=True, target="M1").nodes
    rep = precision_risk(compile_quietly(y, target="M5"), target="generic")
    assert rep.hotspots and rep.target is None
    assert precision_risk(y, target="M5").target == "h17s"


def test_a_sequential_run_under_the_route_is_still_flagged():
    x = af.input((2, 384))
    assert precision_risk(x.sum(-1), target="M5").hotspots  # 384 <= route: sequential
    assert not precision_risk(x.sum(-1), target="M1", verbose=True).nodes  # split


# ---- compile cliffs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, groups, longest",
    [
        ((1, 32, 300, 300), 32, 90000),
        ((1, 131072, 1, 1), 1, 131072),
        ((1, 4, 70000), 2, 70000),
    ],
)
def test_group_norm_past_the_axis_limit_is_a_cliff(shape, groups, longest):
    rep = precision_risk(af.group_norm(af.input(shape), num_groups=groups))
    (cliff,) = [e for e in rep.hotspots if e.mode == "compile_cliff"]
    assert cliff.terms == longest and cliff.proxy == 1.0 and rep.signal == 1.0
    assert "65536" in cliff.detail


@pytest.mark.parametrize(
    "shape, groups",
    [((1, 640, 64, 64), 32), ((1, 512, 128, 128), 32), ((1, 32, 256, 256), 32)],
)
def test_group_norm_within_the_axis_limit_is_no_cliff(shape, groups):
    assert af.get_op("group_norm").tiled.limit == 65536
    rep = precision_risk(af.group_norm(af.input(shape), num_groups=groups), verbose=True)
    assert not rep.by_mode("compile_cliff")


# ---- cancellation subtracts ---------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda x, y: 1.0 - x.erf(),
        lambda x, y: x.tanh() - 1.0,
        lambda x, y: (x @ np.full((8, 8), 0.5)) - (x @ np.full((8, 8), 0.49)),
        lambda x, y: x.exp() - (x * 1.01).exp(),
    ],
)
def test_cancellation_subtracts_are_informational(build):
    x, y = af.input((4, 8)), af.input((4, 8))
    out = build(x, y)
    quiet = precision_risk(out)
    assert quiet.signal == 0.0 and not quiet.nodes and quiet.clean
    (node,) = precision_risk(out, verbose=True).by_mode("cancel_sub")
    assert node.informational and node.op == "sub" and node.terms is None
    assert 0 < node.proxy <= 1


@pytest.mark.parametrize(
    "build",
    [
        lambda x, y: x - y,
        lambda x, y: x - 1.0,
        lambda x, y: x - x.mean(-1, keepdims=True),
        lambda x, y: x - x.amax(-1, keepdims=True),
        lambda x, y: x.exp() - y.exp(),
    ],
)
def test_benign_subtracts_are_not_flagged(build):
    x, y = af.input((4, 8)), af.input((4, 8))
    assert not precision_risk(build(x, y), verbose=True).nodes


# ---- the report and the check ---------------------------------------------------------


def _risky():
    x = af.input((2, 4096), name="x")
    return [x.sum(-1), x.mean(-1), 1.0 - x.erf(), x.relu().sum(-1)]


def test_the_report():
    rep = precision_risk(_risky(), verbose=True)
    assert isinstance(rep, PrecisionReport) and rep.verbose
    assert [e.op for e in rep.nodes] == ["sum", "mean", "sub", "sum"]
    assert [e.index for e in rep.nodes] == sorted(e.index for e in rep.nodes)
    assert [e.proxy for e in rep.hotspots] == sorted(e.proxy for e in rep.hotspots)[::-1]
    assert rep.signal == max(e.proxy for e in rep.hotspots)
    assert {e.mode for e in rep.nodes} <= set(MODES)
    text = str(rep)
    assert "exceeds fp16 noise" in text and "cancel_sub (informational)" in text
    assert "%" in str(rep.nodes[0]) and "fix:" in str(rep.nodes[0])
    assert rep.as_dict()["signal"] == rep.signal
    assert len(rep.as_dict()["nodes"]) == 4
    with pytest.raises(OptionError):
        rep.by_mode("overflow")
    default = precision_risk(_risky())
    assert [e.op for e in default.nodes] == ["sum", "mean", "sum"]
    assert default.signal == rep.signal


def test_a_program_and_a_tensor_list_give_the_same_report():
    outs = _risky()
    a = precision_risk(outs, verbose=True)
    b = precision_risk(compile_quietly(outs), verbose=True)
    assert [(e.op, e.proxy) for e in a.nodes] == [(e.op, e.proxy) for e in b.nodes]
    with pytest.raises(OptionError):
        precision_risk(42)


def test_a_clean_graph_has_signal_zero():
    x = af.input((8, 64))
    rep = precision_risk([x.sum(-1), af.softmax(x), x @ np.ones((64, 3)), x.exp()])
    assert rep.signal == 0.0 and rep.clean and not rep.nodes and not rep.hotspots
    assert "clean" in str(rep)


def test_check_precision_warns_once():
    prog = compile_quietly(_risky())
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        rep = check_precision(prog, stacklevel=2)
    (w,) = [r for r in rec if issubclass(r.category, PrecisionWarning)]
    assert w.filename == __file__
    text = str(w.message)
    assert "exceeds fp16 noise" in text and "reduce_sum_to_matmul" in text
    assert "sub" not in text.split("Fix")[0]  # cancel_sub never warns
    assert prog.passes["precision"]["signal"] == rep.signal > _FP16_CLEAN


def test_check_precision_is_silent_on_clean_and_informational_graphs():
    x = af.input((4, 8))
    for out in (x.exp(), 1.0 - x.erf(), af.softmax(x)):
        prog = compile_quietly(out)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rep = check_precision(prog, strict=True)
        assert rep.clean and prog.passes["precision"]["hotspots"] == []


def test_check_precision_strict_raises():
    prog = compile_quietly(_risky())
    with pytest.raises(PrecisionError, match="exceeds fp16 noise") as info:
        check_precision(prog, strict=True)
    assert isinstance(info.value, AneforgeError) and isinstance(info.value, ValueError)
    assert info.value.report.signal > _FP16_CLEAN
    assert [e.op for e in info.value.report.hotspots][:1] == ["sum"]
