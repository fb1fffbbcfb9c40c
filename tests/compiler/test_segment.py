"""Segmentation into fused regions and cuts, which the cost model's composition mirrors."""

from __future__ import annotations

import numpy as np

import aneforge as af
from aneforge.compiler.segment import segment
from aneforge.graph.ops.bridge import argmax, flatten, lrn, minmax_norm
from aneforge.graph.registry import get_op


def _conv(x, rng, cout=8):
    return af.conv(x, rng.standard_normal((cout, x.shape[1], 3, 3)) * 0.3, padding=1)


def _layout(prog):
    return [(r.kind, [n.op for n in r.nodes]) for r in prog.regions]


def _assert_execution_order(prog):
    """Every computed source of a node lives in an earlier region or earlier in its own."""
    where = {}
    for r in prog.regions:
        for i, n in enumerate(r.nodes):
            where[id(n)] = (r.index, i)
    for r in prog.regions:
        for i, n in enumerate(r.nodes):
            for s in n.srcs:
                if get_op(s.op).kind == "source":
                    continue
                assert where[id(s)] < (r.index, i), (s.op, n.op)
    assert [r.index for r in prog.regions] == list(range(len(prog.regions)))
    computed = [n for n in prog.nodes if get_op(n.op).kind != "source"]
    assert sorted(where) == sorted(id(n) for n in computed)


def test_a_graph_without_bridge_ops_is_one_fused_region(rng):
    x = af.input((1, 3, 8, 8))
    y = (_conv(x, rng).relu() + 1.0).sigmoid()
    prog = af.compile(y, opt=0)
    assert _layout(prog) == [("fused", ["conv", "relu", "add", "sigmoid"])]
    assert prog.cuts == [] and len(prog.fused_regions) == 1


def test_conv_lrn_relu_has_two_fused_regions_and_one_cut(rng):
    x = af.input((1, 3, 8, 8))
    y = lrn(_conv(x, rng)).relu()
    prog = af.compile(y, opt=0)
    assert _layout(prog) == [("fused", ["conv"]), ("bridge", ["lrn"]), ("fused", ["relu"])]
    assert len(prog.fused_regions) == 2
    assert [n.op for n in prog.cuts] == ["lrn"]
    assert prog.cuts[0] is y.srcs[0]
    _assert_execution_order(prog)


def test_two_bridge_ops_in_sequence(rng):
    x = af.input((1, 3, 8, 8))
    y = minmax_norm(lrn(_conv(x, rng))).relu()
    prog = af.compile(y, opt=0)
    assert _layout(prog) == [
        ("fused", ["conv"]),
        ("bridge", ["lrn"]),
        ("bridge", ["minmax_norm"]),
        ("fused", ["relu"]),
    ]
    assert len(prog.cuts) == 2 and len(prog.fused_regions) == 2
    _assert_execution_order(prog)


def test_two_bridge_ops_in_sequence_with_work_between(rng):
    x = af.input((1, 3, 8, 8))
    y = flatten(lrn(_conv(x, rng)).exp()).relu()
    prog = af.compile(y, opt=0)
    kinds = [k for k, _ in _layout(prog)]
    assert kinds == ["fused", "bridge", "fused", "bridge", "fused"]
    assert len(prog.fused_regions) == 3 == len(prog.cuts) + 1
    _assert_execution_order(prog)


def test_two_bridge_ops_in_parallel(rng):
    x = af.input((1, 3, 8, 8))
    h = _conv(x, rng)
    y = lrn(h) + minmax_norm(h)
    prog = af.compile(y, opt=0)
    assert _layout(prog) == [
        ("fused", ["conv"]),
        ("bridge", ["lrn"]),
        ("bridge", ["minmax_norm"]),
        ("fused", ["add"]),
    ]
    assert len(prog.cuts) == 2 and len(prog.fused_regions) == 2
    _assert_execution_order(prog)


def test_fused_work_independent_of_a_cut_runs_in_the_earliest_region(rng):
    x = af.input((1, 3, 8, 8))
    h = _conv(x, rng)
    side = x.exp()  # needs no bridge result
    y = lrn(h).relu() + _conv(side, rng)
    prog = af.compile(y, opt=0)
    layout = _layout(prog)
    assert layout[0] == ("fused", ["conv", "exp", "conv"])
    assert layout[1:] == [("bridge", ["lrn"]), ("fused", ["relu", "add"])]
    _assert_execution_order(prog)


def test_a_bridge_op_on_an_input_starts_the_program(rng):
    x = af.input((1, 4, 3, 3))
    prog = af.compile(lrn(x).relu(), opt=0)
    assert _layout(prog) == [("bridge", ["lrn"]), ("fused", ["relu"])]
    assert len(prog.fused_regions) == 1


def test_fused_regions_never_exceed_cuts_plus_one(rng):
    x = af.input((2, 16))
    a = argmax(x.exp(), axis=-1)
    b = minmax_norm(x.relu())
    c = flatten(b * 2.0)
    y = [a + 1.0, c.sigmoid(), lrn(af.reshape(b, (1, 2, 16))).exp()]
    prog = af.compile(y, opt=0)
    assert len(prog.fused_regions) <= len(prog.cuts) + 1
    assert len(prog.cuts) == 4
    _assert_execution_order(prog)


def test_regions_are_the_segment_of_the_program_nodes(rng):
    x = af.input((1, 3, 8, 8))
    prog = af.compile(lrn(_conv(x, rng)).relu(), opt=0)
    assert [(r.kind, r.nodes) for r in segment(prog.nodes)] == [
        (r.kind, r.nodes) for r in prog.regions
    ]


def test_summary_shows_regions_and_cuts(rng):
    x = af.input((1, 3, 8, 8))
    prog = af.compile(lrn(_conv(x, rng)).relu(), opt=0)
    text = prog.summary()
    assert "regions: 2 fused, 1 cut(s) (bridge ops)" in text
    lines = text.splitlines()
    heads = [ln.strip() for ln in lines if ln.strip().startswith("[")]
    assert heads == ["[0] fused region", "[1] bridge (cut)", "[2] fused region"]
    body = lines[lines.index("  [1] bridge (cut)") + 1]
    assert "= lrn(" in body and "(1, 8, 8, 8)" in body


def test_summary_of_a_cut_free_program_has_one_region():
    x = af.input((4,))
    text = af.compile(x.relu(), opt=0).summary()
    assert "regions: 1 fused, 0 cut(s)" in text
    assert "[0] fused region" in text and "bridge (cut)" not in text


def test_the_opt_0_program_of_a_cut_graph_runs(rng):
    x = af.input((1, 3, 8, 8))
    prog = af.compile(lrn(_conv(x, rng)).relu(), opt=0)
    out = prog(rng.standard_normal((1, 3, 8, 8)))
    assert out.shape == (1, 8, 8, 8) and np.all(out >= 0)
