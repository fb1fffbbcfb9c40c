"""Recompute pricing: one cell of a node's template, counted on an instantiation."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.errors import OptionError
from aneforge.kernel.recompute import CellCost, producer_cost, recompute_cost, template_cost


def _prog(out):
    return af.compile(out, opt=0)


def test_a_matmul_cell_costs_2k_flops_and_a_row_and_a_column():
    x = af.input((6, 16), name="x")
    prog = _prog(x.exp() @ np.ones((16, 5)))
    region, mm = prog.fused_regions[0], prog.outputs[0]
    assert template_cost(prog, region, mm) == CellCost(32, 16 * 2 + 16 * 2, False)
    # exp inlined: 16 more FLOPs, and the row of x is read instead of the row of exp(x)
    assert recompute_cost(prog, region, mm, ["inline"]) == CellCost(48, 64, False)
    assert producer_cost(prog, region, mm, ["materialize"]) == template_cost(prog, region, mm)


def test_recompute_is_transitive_through_the_inlined_chain():
    x = af.input((3, 10), name="x")
    y = ((x * 2.0).tanh() + 1.0).sum(axis=-1)
    prog = _prog(y)
    region, total = prog.fused_regions[0], prog.outputs[0]
    middle = ["inline"] * 3
    # per term: mul, tanh, add, and the sum's add; reads x's row and the two constants
    assert recompute_cost(prog, region, total, middle) == CellCost(40, 10 * 2 + 2 + 2, False)
    assert template_cost(prog, region, total) == CellCost(10, 20, False)


def test_a_padded_window_is_priced_as_a_bound_and_opaque_ops_have_no_template():
    x = af.input((1, 2, 8, 8), name="x")
    prog = _prog(af.cumsum(af.conv(x, np.ones((2, 2, 3, 3)), padding=1)))
    region = prog.fused_regions[0]
    conv = next(n for n in region.nodes if n.op == "conv")
    cost = template_cost(prog, region, conv)
    assert cost.flops == 2 * 2 * 9 and cost.approx  # the border reads fewer cells
    assert template_cost(prog, region, prog.outputs[0]) is None  # cumsum: opaque


def test_a_node_outside_the_region_is_refused():
    x = af.input((4,), name="x")
    prog = _prog(x.exp())
    with pytest.raises(OptionError, match="is not in"):
        template_cost(prog, prog.fused_regions[0], af.input((4,)))


def test_past_the_expansion_limit_the_price_is_composed_from_memoized_costs(monkeypatch):
    import aneforge.kernel.recompute as rc

    x = af.input((4, 8), name="x")
    y = x
    for _ in range(40):  # residual blocks: each output read twice, 2**40 if expanded
        y = y + (y * 0.5).relu()
    prog = _prog(y.sum(axis=-1))
    region, total = prog.fused_regions[0], prog.outputs[0]
    middle = ["inline"] * len(rc.resolve(prog, region)[0].intermediates)
    cost = recompute_cost(prog, region, total, middle)  # finishes: composed, memoized
    assert cost.approx and cost.flops == 8 * (1 + 3 * (2**40 - 1))  # c_k = 3 + 2 c_{k-1}
    small = x.exp().tanh().sum(axis=-1)
    prog = _prog(small)
    region, total = prog.fused_regions[0], prog.outputs[0]
    exact = recompute_cost(prog, region, total, ["inline", "inline"])
    monkeypatch.setattr(rc, "EXPAND_LIMIT", 1)
    composed = recompute_cost(prog, region, total, ["inline", "inline"])
    assert composed.flops == exact.flops and composed.read_bytes >= exact.read_bytes
