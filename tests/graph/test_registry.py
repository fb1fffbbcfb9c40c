"""The op registry: complete records, no duplicates, and every op reachable from the API."""

import inspect

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.registry import KINDS, OpDef, all_ops, register

ISSUE_2_OPS = {
    # unary
    "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "inverse",
    "abs", "square", "sin", "cos", "erf", "softplus", "relu6", "elu", "leaky_relu", "clip",
    "sign", "floor", "ceil", "round", "neg",
    # binary, comparisons, select
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal", "select",
    # contractions
    "matmul", "bmm", "linear", "conv", "conv_transpose",
    # reductions and friends
    "sum", "mean", "amax", "amin", "softmax", "cumsum",
    # norms
    "layer_norm", "rms_norm", "group_norm", "batch_norm", "l2_norm",
    # pooling, upsampling
    "max_pool", "avg_pool", "upsample",
    # shape
    "reshape", "transpose", "concat", "slice", "squeeze", "expand_dims", "pixel_shuffle",
    "pixel_unshuffle", "cast",
}  # fmt: skip


def test_every_issue_op_is_registered():
    assert set(all_ops()) >= ISSUE_2_OPS


@pytest.mark.parametrize("name", sorted(all_ops()))
def test_record_is_complete(name):
    op = all_ops()[name]
    assert op.name == name
    assert op.kind in KINDS
    for hook in (op.shape, op.emulate, op.exact, op.flops, op.range):
        assert callable(hook), f"{name}: missing hook"
    assert op.doc, f"{name}: missing doc"
    if op.kind != "source":
        params = inspect.signature(op.emulate).parameters
        assert len(params) == 3, f"{name}: emulate must take (inputs, attrs, mm)"


def test_duplicate_registration_is_refused():
    op = all_ops()["relu"]
    with pytest.raises(RuntimeError, match="twice"):
        register(op)


def test_unknown_kind_is_refused():
    bogus = OpDef("bogus_kind_op", "strange", 1, {}, None, None, None)
    with pytest.raises(RuntimeError, match="unknown kind"):
        register(bogus)


@pytest.mark.parametrize("name", sorted(ISSUE_2_OPS))
def test_every_op_has_a_public_function(name):
    assert callable(getattr(af, name)), name


def test_contractions_alone_have_flops():
    x = af.input((2, 8))
    prog = af.compile([x.relu(), x @ np.ones((8, 4)), x.sum()])
    assert prog.flops == 2 * 2 * 8 * 4
