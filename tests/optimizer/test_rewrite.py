"""The rewrite engine: identity, sharing, memoization, counts, fixed point and guards."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.rewrite import MAX_REWRITES_PER_NODE, RewriteReport, Rule, rewrite
from aneforge.graph.tensor import make
from aneforge.graph.walk import topological_order
from aneforge.optimizer.rules import CANONICAL


def _rule(name, ops, fn, exactness="bit-identical"):
    return Rule(name, tuple(ops), fn, exactness, f"test rule {name}")


def _ops(outputs):
    return [n.op for n in topological_order(list(outputs))]


def _run(outputs, *feeds):
    return af.compile(list(outputs), opt=0).run(*feeds)


# ---- identity --------------------------------------------------------------------------


def test_a_graph_no_rule_matches_comes_back_as_the_same_objects():
    x = af.input((2, 3))
    a = (x.exp() + 2.0).relu()
    b = a.sigmoid() * 3.0
    outs, report = rewrite([a, b], CANONICAL)
    assert outs[0] is a and outs[1] is b
    assert report.matches == {} and report.rebuilt == 0 and not report.changed


def test_an_empty_rule_list_changes_nothing():
    x = af.input((4,))
    y = (x * 1.0).reshape((4,))
    (out,), report = rewrite([y], [])
    assert out is y and not report.changed


def test_the_input_graph_is_left_untouched():
    x = af.input((2, 3))
    y = (x * 1.0).exp()
    before = _ops([y])
    (out,), _ = rewrite([y], CANONICAL)
    assert _ops([y]) == before == ["input", "weight", "mul", "exp"]
    assert _ops([out]) == ["input", "exp"]
    assert y.srcs[0].op == "mul"


# ---- sharing and memoization ----------------------------------------------------------


def test_a_shared_subexpression_is_rewritten_once_and_stays_shared():
    x = af.input((3, 4))
    shared = (x * 1.0).exp()  # one node used by three consumers
    outs, report = rewrite([shared.relu(), shared.sigmoid(), shared + shared], CANONICAL)
    new_exp = {id(o.srcs[0]) for o in outs[:2]} | {id(s) for s in outs[2].srcs}
    assert len(new_exp) == 1
    (exp_node,) = [n for n in topological_order(outs) if n.op == "exp"]
    assert exp_node.srcs[0] is x
    assert report.matches == {"mul_by_one": 1}
    # the three consumers and the exp node are rebuilt once each, nothing more
    assert report.rebuilt == 4
    assert _ops(outs).count("exp") == 1


def test_a_diamond_rebuilds_to_a_diamond():
    x = af.input((5,))
    a = (x * 1.0).relu()
    y = a.exp() + a.sigmoid()
    (out,), _ = rewrite([y], CANONICAL)
    left, right = out.srcs
    assert left.srcs[0] is right.srcs[0]
    assert left.srcs[0].op == "relu" and left.srcs[0].srcs[0] is x


def test_rules_are_called_once_per_distinct_node():
    x = af.input((3,))
    e = x.exp()
    y = (e.relu() + e.sigmoid()) * (e.relu() + e.sigmoid())
    seen = []

    def spy(node):
        seen.append(node)
        return None

    outs, report = rewrite([y, e, y], [_rule("spy", ("exp", "add"), spy)])
    assert outs == [y, e, y]
    assert [n.op for n in seen].count("exp") == 1
    assert [n.op for n in seen].count("add") == 2  # two distinct add nodes
    assert len({id(n) for n in seen}) == len(seen)
    assert not report.changed


def test_the_same_output_twice_maps_to_the_same_new_object():
    x = af.input((3,))
    y = (x * 1.0).relu()
    outs, _ = rewrite([y, y], CANONICAL)
    assert outs[0] is outs[1] and outs[0] is not y


# ---- counts -----------------------------------------------------------------------------


def test_per_rule_match_counts():
    x = af.input((2, 3))
    a = af.cast(x) * 1.0
    b = af.cast(a.exp()) + (-0.0)
    c = 1.0 * af.transpose(b, (0, 1))
    outs, report = rewrite([c], CANONICAL)
    expected = {"drop_cast": 2, "mul_by_one": 2, "add_zero": 1, "identity_transpose": 1}
    assert report.matches == expected
    assert isinstance(report, RewriteReport) and report.changed
    assert _ops(outs) == ["input", "exp"]


def test_a_report_counts_rebuilt_nodes_without_matches():
    x = af.input((4,))
    y = af.cast(x).relu().exp()  # drop_cast once, then relu and exp are rebuilt
    (out,), report = rewrite([y], CANONICAL)
    assert report.matches == {"drop_cast": 1}
    assert report.rebuilt == 2
    assert out.op == "exp" and out.srcs[0].srcs[0] is x


# ---- fixed point ------------------------------------------------------------------------


def test_a_replacement_is_rewritten_again_until_no_rule_matches():
    x = af.input((3,))
    rules = [
        _rule("sigmoid_to_tanh", ("sigmoid",), lambda n: make("tanh", n.srcs[0])),
        _rule("tanh_to_relu", ("tanh",), lambda n: make("relu", n.srcs[0])),
    ]
    (out,), report = rewrite([x.sigmoid()], rules)
    assert out.op == "relu" and out.srcs[0] is x
    assert report.matches == {"sigmoid_to_tanh": 1, "tanh_to_relu": 1}


def test_a_rewritten_source_enables_a_rule_on_its_consumer():
    x = af.input((3,))
    y = -((-x) * 1.0)  # mul_by_one exposes -(-x) to double_neg
    (out,), report = rewrite([y], CANONICAL)
    assert out is x
    assert report.matches == {"mul_by_one": 1, "double_neg": 1}


def test_new_nodes_of_a_replacement_are_rewritten_too():
    x = af.input((2, 3))

    def wrap(node):  # sigmoid(x) -> relu(x * 1): the new mul must be simplified away
        return make("relu", make("mul", node.srcs[0], 1.0))

    rules = [_rule("wrap", ("sigmoid",), wrap), *CANONICAL]
    (out,), report = rewrite([x.sigmoid()], rules)
    assert report.matches == {"wrap": 1, "mul_by_one": 1}
    assert out.op == "relu" and out.srcs[0] is x


def test_transpose_chain_reaches_the_fixed_point_in_one_call():
    x = af.input((2, 3, 4))
    y = af.transpose(af.transpose(x, (1, 2, 0)), (2, 0, 1))
    (out,), report = rewrite([y], CANONICAL)
    assert out is x
    assert report.matches == {"merge_transposes": 1, "identity_transpose": 1}


def test_rewriting_a_rewritten_graph_is_a_no_op():
    x = af.input((2, 6))
    y = af.reshape(af.reshape(af.cast(x) * 1.0, (3, 4)), (12,)) + 0.0
    (once,), _ = rewrite([y], CANONICAL)
    (twice,), report = rewrite([once], CANONICAL)
    assert twice is once and not report.changed


# ---- guards -----------------------------------------------------------------------------


def test_two_rules_that_undo_each_other_hit_the_cycle_guard():
    x = af.input((4,))
    rules = [
        _rule("exp_to_sigmoid", ("exp",), lambda n: make("sigmoid", n.srcs[0])),
        _rule("sigmoid_to_exp", ("sigmoid",), lambda n: make("exp", n.srcs[0])),
    ]
    with pytest.raises(RuntimeError, match="cycle"):
        rewrite([x.exp()], rules)


def test_a_rule_that_always_rebuilds_its_node_hits_the_cycle_guard():
    x = af.input((4,))
    rules = [_rule("again", ("relu",), lambda n: make("relu", n.srcs[0]))]
    with pytest.raises(RuntimeError, match="cycle"):
        rewrite([x.relu()], rules)


def test_a_long_but_finite_rewrite_chain_is_allowed():
    x = af.input((4,))
    y = x
    for _ in range(MAX_REWRITES_PER_NODE * 2):
        y = y * 1.0  # many nodes, each rewritten once: no cycle
    (out,), report = rewrite([y], CANONICAL)
    assert out is x
    assert report.matches == {"mul_by_one": MAX_REWRITES_PER_NODE * 2}


def test_a_rule_that_changes_the_shape_raises():
    x = af.input((2, 3))
    rules = [_rule("shrink", ("relu",), lambda n: make("sum", n.srcs[0], axes=(1,)))]
    with pytest.raises(RuntimeError, match=r"shrink changed shape \(2, 3\) -> \(2,\)"):
        rewrite([x.relu()], rules)


def test_duplicate_rule_names_are_rejected():
    x = af.input((2,))
    rules = [_rule("same", ("relu",), lambda n: None), _rule("same", ("exp",), lambda n: None)]
    with pytest.raises(ValueError, match="same"):
        rewrite([x.relu()], rules)


def test_a_rule_returning_its_own_node_does_not_count():
    x = af.input((2,))
    (out,), report = rewrite([x.relu()], [_rule("self", ("relu",), lambda n: n)])
    assert out.op == "relu" and report.matches == {}


def test_a_rule_is_only_called_on_its_ops():
    x = af.input((2, 2))
    called = []
    rule = _rule("spy", ("relu",), lambda n: called.append(n.op))
    rewrite([(x.exp() + x.sigmoid()).relu()], [rule])
    assert called == ["relu"]


def test_rewritten_graphs_compute_the_same_values(rng):
    x = af.input((3, 4))
    y = af.transpose(af.transpose(-(-(x * 1.0)), (1, 0)), (1, 0)).exp() - 0.0
    (out,), _ = rewrite([y], CANONICAL)
    feed = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(_run([y], feed)[0], _run([out], feed)[0])
    assert _ops([out]) == ["input", "exp"]
