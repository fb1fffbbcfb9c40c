"""The default cost model against hand computations of its formula.

Per fused region: ``floor + sum over nodes of pass + max(flops / COMPUTE, weight bytes /
BW + activation bytes / ACT_BW)``, where activation bytes are the region's inputs read
and outputs written (intermediates stay on chip) and ``pass = layer_us`` for every node
but views and pointwise ops fed from inside the region; a cut costs ``cut_us`` plus the
bridge op's own (measured-table) cost.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.compression import quantize_graph_int8
from aneforge.cost.calibration import Constants, constants
from aneforge.cost.estimate import (
    FLOOR_DOMINATED_SHARE,
    INT8_TIE_MAX_FLOOR_SHARE,
    INT8_TIE_US_PER_BYTE,
    estimate_breakdown,
    warn_if_floor_dominated,
)
from aneforge.cost.roofline import node_flops
from aneforge.errors import AneforgeWarning, DispatchFloorWarning
from aneforge.graph.ops.bridge import flatten, lrn

C = constants()


def _node(weights=0.0, acts=0.0, flops=0.0, passes=True, c=C):
    """One node by hand, as (pass, compute, memory) in us: elements of weights and
    activations, fp16 (2 bytes each)."""
    memory = 2 * weights / c.bw_bytes_per_us + 2 * acts / c.act_bw_bytes_per_us
    return (c.layer_us if passes else 0.0, flops / c.flops_per_us, memory)


def _alone(node) -> float:
    """A node's time as a region of its own (no floor)."""
    return node[0] + max(node[1], node[2])


def _region(nodes, c=C):
    """A region: one floor, every pass, and the overlapped work max(sum compute, sum
    memory)."""
    passes, compute, memory = (sum(col) for col in zip(*nodes))
    return c.floor_us + passes + max(compute, memory)


def _measured(key):
    (row,) = [r for r in C.bridge_ops if r[1] == key]
    return row[2]


def _close(got, want):
    assert got == pytest.approx(want, rel=1e-9, abs=0.0)


def _w(rng, shape, scale=0.05):
    return rng.standard_normal(shape) * scale


# ---- hand computations ------------------------------------------------------------------


@pytest.mark.parametrize(("m", "k", "n"), [(1, 4096, 4096), (2048, 2048, 2048), (8, 64, 32)])
def test_matmul_by_hand(m, k, n, rng):
    x = af.input((m, k))
    y = x @ _w(rng, (k, n))
    t = _node(k * n, m * k + m * n, 2 * m * k * n)
    _close(af.estimate(y), _region([t]))
    est = estimate_breakdown(y)
    assert est.n_regions == 1 and est.n_cuts == 0
    (node,) = est.nodes
    _close(node.time_us, _alone(t))  # the node's own time carries no floor
    assert node.flops == 2 * m * k * n and node.bytes == (m * k + k * n + m * n) * 2


def test_compute_weights_activations_and_overhead_bounds(rng):
    big = af.conv(af.input((1, 512, 32, 32)), _w(rng, (512, 512, 3, 3)), padding=1)
    gemv = af.input((1, 4096)) @ _w(rng, (4096, 4096))
    wide = af.input((512, 4096)).relu()
    tiny = af.input((4,)).relu()
    assert [estimate_breakdown(y).nodes[0].bound for y in (big, gemv, wide, tiny)] == [
        "compute",
        "weights",
        "activations",
        "overhead",
    ]
    assert estimate_breakdown(big).bound == "compute"
    assert estimate_breakdown(gemv).bound == "bandwidth"
    assert estimate_breakdown(tiny).bound == "floor"


def test_conv_with_bias_by_hand(rng):
    x = af.input((1, 512, 32, 32))
    y = af.conv(x, _w(rng, (512, 512, 3, 3)), _w(rng, (512,)), padding=1)
    flops = 2 * (512 * 9) * (512 * 32 * 32)
    t = _node(512 * 512 * 9 + 512, 2 * 512 * 32 * 32, flops)
    assert flops / C.flops_per_us > C.floor_us  # above the floor: the formula is visible
    _close(af.estimate(y), _region([t]))


def test_strided_grouped_conv_by_hand(rng):
    x = af.input((2, 64, 56, 56))
    y = af.conv(x, _w(rng, (128, 16, 3, 3)), stride=2, padding=1, groups=4)
    out = 2 * 128 * 28 * 28
    t = _node(128 * 16 * 9, 2 * 64 * 56 * 56 + out, 2 * 16 * 9 * out)
    _close(af.estimate(y), _region([t]))


def test_a_fused_chain_pays_one_floor_and_keeps_intermediates_on_chip(rng):
    x = af.input((1, 4096))
    h = (x @ _w(rng, (4096, 4096))).relu()
    y = ((h @ _w(rng, (4096, 2048))) + _w(rng, (2048,))).sigmoid()
    times = [
        _node(4096 * 4096, 4096, 2 * 4096 * 4096),  # matmul 1 reads the input
        _node(passes=False),  # relu rides matmul 1's pass
        _node(4096 * 2048, 0, 2 * 4096 * 2048),  # matmul 2 reads relu's on-chip result
        _node(2048, passes=False),  # add bias: streams its weight, no pass
        _node(0, 2048, passes=False),  # sigmoid writes the output
    ]
    want = _region(times)
    _close(af.estimate(y), want)
    est = estimate_breakdown(y)
    _close(est.floor_us, C.floor_us)
    _close(est.fused_us, want - C.floor_us)
    assert want <= C.floor_us + sum(_alone(t) for t in times)  # DMA overlaps compute
    assert [n.overhead_us > 0 for n in est.nodes] == [True, False, True, False, False]


def test_views_and_epilogues_pay_no_pass_but_a_first_pointwise_op_does():
    x = af.input((64, 256))
    y = af.reshape(x.relu(), (256, 64)).exp()
    est = estimate_breakdown(y)
    assert [(n.op, n.overhead_us > 0) for n in est.nodes] == [
        ("relu", True),  # reads the program input: a pass of its own
        ("reshape", False),  # a view
        ("exp", False),  # fed from inside the region: rides the pass
    ]
    parts = [_node(0, 64 * 256), _node(passes=False), _node(0, 64 * 256, passes=False)]
    _close(est.total_us, _region(parts))


def test_no_program_is_priced_below_the_sum_of_its_compute_legs(rng):
    x = af.input((1, 64, 56, 56))
    h = x
    for _ in range(6):  # small convolutions, each far below the floor
        h = af.conv(h, _w(rng, (64, 64, 3, 3)), padding=1).relu()
    prog = af.compile(h, opt=0)
    compute = sum(node_flops(n) for n in prog.compute_nodes) / C.flops_per_us
    assert compute > C.floor_us
    assert af.estimate(prog) >= C.floor_us + compute


def test_a_graph_with_two_cuts_by_hand(rng):
    x = af.input((1, 4, 32, 32))
    a = af.conv(x, _w(rng, (8, 4, 3, 3)), padding=1)  # region 0
    b = lrn(a)  # cut 1: exactly the measured "lrn [8,32,32]"
    c = af.conv(b.relu(), _w(rng, (16, 8, 1, 1)))  # region 1
    d = flatten(c)  # cut 2: exactly the measured "flatten [16,32,32]"
    y = af.reshape(d, (1, 16384)) @ _w(rng, (16384, 1024))  # region 2
    prog = af.compile(y, opt=0)
    assert len(prog.cuts) == 2 and len(prog.fused_regions) == 3
    fused = [
        _node(288, 4096 + 8192, 2 * 36 * 8192),  # conv 3x3 (its output feeds the cut)
        _node(0, 8192),  # relu reads the cut's output: a pass of its own
        _node(128, 16384, 2 * 8 * 16384),  # conv 1x1 writes for the cut
        _node(0, 16384, passes=False),  # reshape, a view, reads the cut's output
        _node(16384 * 1024, 1024, 2 * 16384 * 1024),  # matmul writes the output
    ]
    bridges = _measured("lrn [8,32,32]") + _measured("flatten [16,32,32]")
    regions = _region(fused[:1]) + _region(fused[1:3]) + _region(fused[3:])
    want = regions + 2 * C.cut_us + bridges
    _close(af.estimate(prog), want)
    est = estimate_breakdown(prog)
    assert (est.n_regions, est.n_cuts) == (3, 2)
    _close(est.cut_us, 2 * C.cut_us + bridges)
    _close(est.floor_us, 3 * C.floor_us)
    assert [n.bound for n in est.nodes if n.kind == "bridge"] == ["measured", "measured"]


def test_int8_encoded_weights_stream_one_byte_plus_channel_scales(rng):
    x = af.input((1, 4096))
    y = quantize_graph_int8(x @ _w(rng, (4096, 4096)))
    assert y.srcs[1].attrs["encoding"] == "int8" and y.srcs[1].attrs["channels"] == 4096
    weight_bytes = 4096 * 4096 * 1 + 4096 * 2
    t = (
        C.layer_us,
        2 * 4096 * 4096 / C.flops_per_us,
        weight_bytes / C.bw_bytes_per_us + 2 * 2 * 4096 / C.act_bw_bytes_per_us,
    )
    _close(af.estimate(y), _region([t]))
    _close(af.estimate(y, int8=True), af.estimate(y))  # nothing left to save: no tie-break


def test_int8_conv_scales_are_per_output_channel(rng):
    x = af.input((1, 64, 16, 16))
    y = quantize_graph_int8(af.conv(x, _w(rng, (128, 64, 3, 3)), _w(rng, (128,)), padding=1))
    w, b = y.srcs[1], y.srcs[2]
    assert w.attrs["channels"] == 128 and b.attrs.get("encoding", "fp16") == "fp16"
    nbytes = 64 * 256 * 2 + (128 * 64 * 9 + 2 * 128) + 128 * 2 + 128 * 256 * 2
    _close(estimate_breakdown(y).nodes[0].bytes, nbytes)


def test_estimate_int8_prices_fp16_weights_at_one_byte(rng):
    x = af.input((1, 4096))
    y = x @ _w(rng, (4096, 4096))
    t8 = (
        C.layer_us,
        2 * 4096 * 4096 / C.flops_per_us,
        4096 * 4096 / C.bw_bytes_per_us + 2 * 2 * 4096 / C.act_bw_bytes_per_us,
    )
    saved = 4096 * 4096
    tie = min(INT8_TIE_US_PER_BYTE * saved, INT8_TIE_MAX_FLOOR_SHARE * C.floor_us)
    _close(af.estimate(y, int8=True), _region([t8]) - tie)
    assert af.estimate(y, int8=True) < af.estimate(y)


# ---- the int8 tie-breaker ------------------------------------------------------------------


def test_int8_tie_breaker_on_a_small_graph(rng):
    x = af.input((1, 64))
    y = (x @ _w(rng, (64, 64))).relu()
    est16, est8 = estimate_breakdown(y), estimate_breakdown(y, int8=True)
    roofline_saving = est16.fused_us - est8.fused_us
    assert 0 <= roofline_saving < 0.01 * C.floor_us
    _close(est16.total_us - est8.total_us, roofline_saving + INT8_TIE_US_PER_BYTE * 64 * 64)
    assert est8.total_us < est16.total_us


def test_int8_tie_breaker_is_capped_at_a_share_of_the_floor(rng):
    x = af.input((1, 1024))
    y = (x @ _w(rng, (1024, 2048))).relu()  # 4 MiB of fp16 weights
    est16, est8 = estimate_breakdown(y), estimate_breakdown(y, int8=True)
    roofline_saving = est16.fused_us - est8.fused_us
    _close(est16.total_us - est8.total_us, roofline_saving + INT8_TIE_MAX_FLOOR_SHARE * C.floor_us)
    assert INT8_TIE_MAX_FLOOR_SHARE <= 0.01


def test_int8_is_never_predicted_slower(rng):
    x = af.input((1, 8, 16, 16))
    graphs = [
        x.relu(),
        af.conv(x, _w(rng, (8, 8, 3, 3)), padding=1),
        lrn(af.conv(x, _w(rng, (8, 8, 3, 3)), padding=1)),
        af.reshape(x, (8, 256)) @ _w(rng, (256, 4096)),
    ]
    for y in graphs:
        assert af.estimate(y, int8=True) <= af.estimate(y)
    assert af.estimate(graphs[0], int8=True) == af.estimate(graphs[0])  # no weights


# ---- custom calibration and plumbing ---------------------------------------------------------


def test_estimate_breakdown_uses_the_given_calibration(rng):
    c = Constants(
        floor_us=10.0,
        cut_us=20.0,
        bw_bytes_per_us=1000.0,
        flops_per_us=1e4,
        act_bw_bytes_per_us=500.0,
        layer_us=3.0,
    )
    x = af.input((4, 64))
    y = (x @ _w(rng, (64, 32))).exp()
    # One region: the matmul's pass, then the overlapped work of both nodes (the exp
    # rides the matmul's pass and writes the output).
    compute = 2 * 4 * 64 * 32 / c.flops_per_us
    memory = 2 * 64 * 32 / c.bw_bytes_per_us + 2 * (256 + 128) / c.act_bw_bytes_per_us
    want = c.floor_us + c.layer_us + max(compute, memory)
    _close(estimate_breakdown(y, calibration=c).total_us, want)


def test_estimate_accepts_tensors_lists_and_programs(rng):
    x = af.input((1, 4096))
    y = x @ _w(rng, (4096, 1024))
    z = y.relu()
    prog = af.compile([y, z], opt=0)
    assert af.estimate([y, z]) == af.estimate(prog) == af.estimate((y, z))
    assert af.estimate(z) == af.estimate(af.compile(z, opt=0))
    assert float(estimate_breakdown(z)) == af.estimate(z)


def test_breakdown_parts_add_up(rng):
    x = af.input((1, 8, 32, 32))
    y = lrn(af.conv(x, _w(rng, (8, 8, 3, 3)), padding=1)).relu()
    est = estimate_breakdown(af.compile(y, opt=0))
    _close(est.total_us, est.floor_us + est.fused_us + est.cut_us)
    _close(est.floor_share, est.floor_us / est.total_us)
    assert [n.kind for n in est.nodes] == ["fused", "bridge", "fused"]
    assert est.top_nodes(1)[0].node.op == "lrn"


def test_estimate_is_deterministic(rng):
    x = af.input((1, 8, 32, 32))
    y = lrn(af.conv(x, _w(rng, (8, 8, 3, 3)), padding=1)).relu()
    assert af.estimate(y) == af.estimate(y) == af.estimate(af.compile(y, opt=0))


# ---- DispatchFloorWarning ------------------------------------------------------------------


def test_compile_warns_on_a_floor_dominated_graph():
    x = af.input((4,))
    with pytest.warns(DispatchFloorWarning, match="dispatch floor"):
        af.compile(x.relu())


def test_compile_warns_once():
    x = af.input((8,))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        af.compile([x.relu(), x.exp(), x.sigmoid()])
    assert [w.category for w in rec] == [DispatchFloorWarning]


def test_compile_does_not_warn_on_a_compute_bound_graph(rng):
    x = af.input((1, 512, 32, 32))
    y = af.conv(x, _w(rng, (512, 512, 3, 3)), padding=1)
    est = estimate_breakdown(y)
    assert est.floor_share < FLOOR_DOMINATED_SHARE and est.bound == "compute"
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        af.compile(y)
    assert not [w for w in rec if issubclass(w.category, AneforgeWarning)]


def test_the_floor_warning_is_about_the_program_given():
    x = af.input((8,))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warn_if_floor_dominated(af.compile(x.relu(), opt=0))
        n_floor = len(rec)
        warn_if_floor_dominated(af.compile(af.input((2048, 2048)) @ np.eye(2048), opt=0))
    assert n_floor >= 1
    assert len(rec) == n_floor  # the big program adds none


def test_the_floor_warning_points_at_the_compile_call():
    x = af.input((4,))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        af.compile(x.relu())
    (w,) = rec
    assert w.filename == __file__  # stacklevel: user -> compile -> warn_if_floor_dominated
