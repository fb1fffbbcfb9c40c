"""The structural checks: they pass on what aneforge builds and fail on what it must not."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.graph.nn import EXAMPLES
from aneforge.graph.ops.bridge import flatten, lrn
from aneforge.graph.tensor import FrozenAttrs, Tensor
from aneforge.models import zoo
from aneforge.optimizer import canonicalize, reduce_sum_to_matmul
from aneforge.optimizer.routes import select_routes
from aneforge.testing.verify import VerifyError, check_pass, verify_graph, verify_program


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _graphs():
    """Graphs of every family aneforge builds: the CLI examples and small zoo models."""
    out = {name: build()[1] for name, build in EXAMPLES.items()}
    out["resnet18"] = zoo.resnet(18, image=32, classes=10)[1]
    out["mobilenet_v2"] = zoo.mobilenet_v2(image=32, classes=10)[1]
    out["vit"] = zoo.vit("vit_ti16", image=32, classes=10)[1]
    return out


GRAPHS = _graphs()


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("opt", [0, "routes", 1])
def test_what_compile_builds_verifies(name, opt):
    prog = _quiet(af.compile, GRAPHS[name], opt=opt)
    assert verify_program(prog) is prog
    assert len(verify_graph(list(prog.outputs))) == len(prog.nodes)


def test_a_target_compile_verifies():
    x = af.input((1, 8, 16, 16), name="x")
    y = af.conv(x, np.ones((8, 8, 3, 3)) * 0.01, padding=1).sin().relu()
    prog = _quiet(af.compile, y, target="M1")  # sin lowered below A15
    assert "sin" not in {n.op for n in prog.nodes}
    verify_program(prog)


def _bad(op, srcs, attrs, shape, value=None):
    """A node built past the op functions, as a buggy pass could build it."""
    return Tensor(op, srcs, FrozenAttrs(attrs), shape, value=value)


def test_a_wrong_shape_is_caught():
    x = af.input((2, 3), name="x")
    with pytest.raises(VerifyError, match=r"%1 relu .*shape rule gives \(2, 3\)"):
        verify_graph(_bad("relu", (x,), {}, (3, 2)))


def test_an_unknown_op_is_caught():
    x = af.input((2,), name="x")
    with pytest.raises(VerifyError, match="unknown op 'frobnicate'"):
        verify_graph(_bad("frobnicate", (x,), {}, (2,)))


def test_attributes_outside_the_schema_are_caught():
    x = af.input((2, 4), name="x")
    with pytest.raises(VerifyError, match="its record refuses it"):
        verify_graph(_bad("softmax", (x,), {"axis": -1, "temperature": 2.0}, (2, 4)))
    with pytest.raises(VerifyError, match="normalize to"):
        verify_graph(_bad("sum", (x,), {}, (2,)))  # defaults not filled in


def test_a_wrong_arity_is_caught():
    x = af.input((2,), name="x")
    with pytest.raises(VerifyError, match="takes 2 input"):
        verify_graph(_bad("add", (x,), {}, (2,)))


def test_a_writeable_or_float32_weight_is_caught():
    value = np.ones((2,), np.float16)  # writeable
    with pytest.raises(VerifyError, match="writeable"):
        verify_graph(_bad("weight", (), {}, (2,), value=value))
    value = np.ones((2,), np.float32)
    value.setflags(write=False)
    with pytest.raises(VerifyError, match="fp16 array"):
        verify_graph(_bad("weight", (), {}, (2,), value=value))


def test_a_program_missing_a_node_or_out_of_order_is_caught():
    x = af.input((4,), name="x")
    y = x.exp().relu()
    prog = Program.from_outputs([y])
    verify_program(prog)
    short = Program((y,), prog.nodes[1:], 0)
    with pytest.raises(VerifyError, match="holds 2 nodes, its outputs reach 3"):
        verify_program(short)
    swapped = Program((y,), [prog.nodes[0], prog.nodes[2], prog.nodes[1]], 0)
    with pytest.raises(VerifyError, match="runs before one of its sources"):
        verify_program(swapped)


def test_a_value_freed_too_early_is_caught():
    x = af.input((4,), name="x")
    e = x.exp()
    prog = Program.from_outputs([e.relu() + e])
    dead = [list(d) for d in prog.dead_after]
    dead[1], dead[-1] = [e], []  # e is still read by the add
    object.__setattr__(prog, "dead_after", dead)  # what a buggy builder could leave
    with pytest.raises(VerifyError, match="freed after %1"):
        verify_program(prog)


def test_check_pass_accepts_the_lossless_rule_sets():
    x = af.input((4, 8), name="x")
    y = ((x * 1.0 + 0.0).relu() @ np.ones((8, 3))).named("y")
    new, _ = check_pass(canonicalize, [y])
    assert new[0].name == "y"
    # x * 1 goes; x + 0 stays (it turns -0 into +0, so dropping it is not bit-exact)
    assert {n.op for n in verify_graph(new)} == {"input", "weight", "add", "relu", "matmul"}


def test_check_pass_catches_a_pass_that_changes_bits():
    x = af.input((4096,), name="x")
    with pytest.raises(VerifyError, match="differ in bits after a lossless pass"):
        check_pass(reduce_sum_to_matmul, [x.sum()], trials=1)
    new, _ = check_pass(reduce_sum_to_matmul, [x.sum()], lossless=False)
    assert new[0].shape == ()


def test_check_pass_catches_a_changed_interface():
    x = af.input((2, 3), name="x")
    y = x.relu().named("y")
    with pytest.raises(VerifyError, match=r"shape \(2, 3\) became \(3, 2\)"):
        check_pass(lambda outs: [af.transpose(outs[0], (1, 0))], [y])
    with pytest.raises(VerifyError, match="name 'y' became None"):
        check_pass(lambda outs: [outs[0].srcs[0].exp()], [y])
    with pytest.raises(VerifyError, match="added an input"):
        check_pass(lambda outs: [(outs[0] + af.input((2, 3), name="z")).named("y")], [y])
    with pytest.raises(VerifyError, match="returned 2 outputs for 1"):
        check_pass(lambda outs: [outs[0], outs[0]], [y])


def test_check_pass_runs_the_route_pass_on_a_bridge_graph():
    x = af.input((1, 4, 6, 6), name="x")
    y = flatten(lrn(x.relu())).named("y")
    new, decisions = check_pass(lambda outs: select_routes(outs, lambda g: 1.0), [y])
    assert isinstance(decisions, list)
    assert new[0].name == "y"
