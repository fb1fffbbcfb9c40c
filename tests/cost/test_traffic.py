"""The kernel traffic leg (``traffic="kernel"``) against hand-counted bytes.

Every figure here is counted by hand from the shapes: fp16 is 2 bytes a cell, a region's
compulsory traffic is its inputs read once, its weights and its outputs written, and
an intermediate that spills is written once and read back once.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.cost.analytic import (
    TRAFFIC,
    analytic_estimate,
    chip_constants,
    fitted_params,
    load_parts,
    program_loads,
    spill_bytes,
)
from aneforge.cost.estimate import estimate_breakdown
from aneforge.cost.traffic import kernel_traffic
from aneforge.errors import OptionError
from aneforge.graph.tensor import weight
from aneforge.targets.table import get_target

FP16 = 2
M1 = get_target("h13")


def _chain():
    """conv 3x3 (4 -> 8, padded) -> relu -> conv 1x1 (8 -> 8) -> relu on 1x4x8x8."""
    x = af.input((1, 4, 8, 8), name="x")
    h = af.conv(x, np.ones((8, 4, 3, 3)), padding=1).relu()
    return Program.from_outputs([af.conv(h, np.ones((8, 8, 1, 1))).relu()])


CHAIN_INPUT = FP16 * 1 * 4 * 8 * 8  # 512 B read
CHAIN_WEIGHTS = FP16 * (8 * 4 * 3 * 3 + 8 * 8 * 1 * 1)  # 704 B streamed
CHAIN_OUTPUT = FP16 * 1 * 8 * 8 * 8  # 1024 B written
CHAIN_MIDDLE = FP16 * 1 * 8 * 8 * 8  # each of the three intermediates: 1024 B


def _loads(prog, traffic):
    (load,) = program_loads(prog, M1.family, traffic=traffic)
    return load


def test_a_conv_relu_chain_moves_its_compulsory_bytes():
    load = _loads(_chain(), "kernel")
    assert [n.op for n in load.nodes] == ["conv", "relu", "conv", "relu"]
    assert load.acts_in.tolist() == [CHAIN_INPUT, 0, 0, 0]
    assert load.out_bytes.tolist() == [0, 0, 0, CHAIN_OUTPUT]
    assert load.weight_bytes.sum() == CHAIN_WEIGHTS
    # each intermediate, if it spills, is written once and read back once
    assert load.spill.tolist() == [2 * CHAIN_MIDDLE] * 3 + [0]
    # conv1 lives beside relu1, relu1 beside conv2: two intermediates at a time at most
    assert load.live.tolist() == [2 * CHAIN_MIDDLE] * 3 + [0]
    # on this region the per-node rule counts the same compulsory bytes
    nodes = _loads(_chain(), "nodes")
    for leg in ("acts_in", "out_bytes", "weight_bytes"):
        assert getattr(nodes, leg).tolist() == getattr(load, leg).tolist()


def test_spill_is_charged_only_when_the_live_set_exceeds_the_buffer():
    load = _loads(_chain(), "kernel")
    c = chip_constants(M1)
    fits = dataclasses.replace(c, kernel_buffer_bytes=2 * CHAIN_MIDDLE)
    spills = dataclasses.replace(c, kernel_buffer_bytes=2 * CHAIN_MIDDLE - 1)
    assert spill_bytes(load, fits).sum() == 0
    assert spill_bytes(load, spills).sum() == 3 * 2 * CHAIN_MIDDLE
    _, _, acts_fit, _ = load_parts(load, fits)
    _, _, acts_spill, _ = load_parts(load, spills)
    extra = np.array([2 * CHAIN_MIDDLE] * 3 + [0]) / c.restream_bw  # the shared fabric
    np.testing.assert_allclose(acts_spill - acts_fit, extra)


def test_an_input_read_twice_is_loaded_once():
    x = af.input((64, 64), name="x")
    prog = Program.from_outputs([x.exp() * x])
    cells = 64 * 64
    assert _loads(prog, "nodes").acts_in.sum() == 2 * FP16 * cells  # exp and mul each
    assert _loads(prog, "kernel").acts_in.tolist() == [FP16 * cells, 0]  # exp loads it


def test_a_strided_convolution_reads_only_the_cells_it_touches():
    x = af.input((1, 8, 16, 16), name="x")
    prog = Program.from_outputs([af.conv(x, np.ones((8, 8, 1, 1)), stride=2)])
    assert _loads(prog, "nodes").acts_in.sum() == FP16 * 8 * 16 * 16
    assert _loads(prog, "kernel").acts_in.sum() == FP16 * 8 * 8 * 8  # every other row, col


def test_a_weight_read_by_two_nodes_streams_once():
    w = weight(np.ones((16, 16), np.float16))
    a = af.input((4, 16), name="a")
    prog = Program.from_outputs([(a @ w) @ w])
    assert _loads(prog, "nodes").weight_bytes.tolist() == [FP16 * 256, FP16 * 256]
    assert _loads(prog, "kernel").weight_bytes.tolist() == [FP16 * 256, 0]


def test_an_opaque_op_keeps_the_per_node_rule():
    a = af.input((4, 16), name="a")
    prog = Program.from_outputs([af.concat([a, a.exp()], axis=0)])  # concat has no nest
    region = prog.fused_regions[0]
    traffic = kernel_traffic(prog, region)
    assert not traffic.exact
    kernel, nodes = _loads(prog, "kernel"), _loads(prog, "nodes")
    # a is read by the opaque concat: both readers charge it whole, as per node
    assert kernel.acts_in.tolist() == nodes.acts_in.tolist() == [FP16 * 64, FP16 * 64]
    assert kernel.out_bytes.tolist() == nodes.out_bytes.tolist() == [0, FP16 * 128]
    # exp's value feeds opaque code: if it spills, its whole buffer goes out and back
    assert kernel.spill.tolist() == [2 * FP16 * 64, 0]


def test_the_kernel_traffic_is_computed_once_per_program():
    prog = _chain()
    region = prog.fused_regions[0]
    assert kernel_traffic(prog, region) is kernel_traffic(prog, region)


def test_the_estimate_falls_as_the_buffer_grows_and_meets_the_per_node_leg():
    prog = _chain()
    totals = []
    for buffer in (1e3, 2 * CHAIN_MIDDLE - 1, 2 * CHAIN_MIDDLE, 1e9):
        p = dataclasses.replace(fitted_params(), kernel_buffer_bytes=buffer)
        totals.append(analytic_estimate(prog, M1, p, traffic="kernel")["total_us"])
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    p = dataclasses.replace(fitted_params(), kernel_buffer_bytes=1e9)
    nodes = analytic_estimate(prog, M1, p, traffic="nodes")["total_us"]
    assert totals[-1] == pytest.approx(nodes, rel=1e-12)  # same compulsory bytes, no spill


def test_estimate_takes_the_leg_as_an_option_and_keeps_its_parts_consistent():
    x = af.input((1, 32, 256, 256), name="x")  # 4 MiB intermediates: past the buffer
    h = af.conv(x, np.ones((32, 32, 3, 3)), padding=1).relu()
    prog = Program.from_outputs([af.conv(h, np.ones((32, 32, 3, 3)), padding=1).relu()])
    est = {t: estimate_breakdown(prog, target="M1", traffic=t) for t in TRAFFIC}
    for e in est.values():
        assert e.total_us == pytest.approx(e.floor_us + e.fused_us + e.cut_us)
        assert e.fused_us == pytest.approx(sum(n.time_us for n in e.nodes))
    (load,) = program_loads(prog, M1.family, traffic="kernel")
    spilled = spill_bytes(load, chip_constants(M1))
    assert spilled.sum() > 0  # the spills are in the layers' bytes
    kernel_bytes = [n.bytes for n in est["kernel"].nodes]
    nodes_bytes = [n.bytes for n in est["nodes"].nodes]
    np.testing.assert_allclose(np.array(kernel_bytes) - nodes_bytes, spilled)
    assert est["kernel"].total_us >= est["nodes"].total_us
    assert af.estimate(prog, target="M1", traffic="nodes") == est["nodes"].total_us
    with pytest.raises(OptionError, match="traffic"):
        af.estimate(prog, target="M1", traffic="bytes")
