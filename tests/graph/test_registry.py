"""The op registry: complete records, no duplicates, and every op reachable from the API.

Complete means every typed fact of :mod:`aneforge.graph.facts` is declared on every
record, "none" said on purpose (``None``, ``Role.NONE``, ``EVERY_FAMILY``...) rather
than by a missing entry; tests/graph/test_op_facts.py checks the facts against the
kernels.
"""

import dataclasses
import inspect

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.facts import (
    EVERY_FAMILY,
    FACT_FIELDS,
    UNSET,
    Decomposition,
    Flag,
    FlagSet,
    NarrowSum,
    Role,
    SingleRoute,
    TermSign,
    WeightOperand,
    Work,
)
from aneforge.graph.registry import (
    KINDS,
    OpDef,
    all_ops,
    get_op,
    register,
    temporary_op,
    unregister,
)
from aneforge.graph.rewrite import EXACTNESS

OPS = all_ops()

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


# ---- every fact declared, of its type ---------------------------------------------------


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_fact_is_declared_with_its_type(name):
    op = OPS[name]
    for fact in FACT_FIELDS:
        assert getattr(op, fact) is not UNSET, (name, fact)
    assert isinstance(op.flags, FlagSet) and all(isinstance(f, Flag) for f in op.flags)
    assert callable(op.sign) and callable(op.range)
    assert op.narrow is None or isinstance(op.narrow, NarrowSum)
    if op.narrow is not None:
        assert isinstance(op.narrow.sign, TermSign) and len(op.narrow.fix) > 30, name
    assert isinstance(op.role, Role)
    assert (op.role is not Role.NONE) == (Flag.CONTRACTION in op.flags), name
    assert op.weight_operand is None or isinstance(op.weight_operand, WeightOperand)
    assert isinstance(op.min_family, int) and op.min_family >= EVERY_FAMILY
    assert (op.below_floor is None) or op.min_family > EVERY_FAMILY, name
    for dec in (op.below_floor, op.route):
        if isinstance(dec, Decomposition):
            assert callable(dec.build) and dec.name and dec.evidence, name
            assert dec.exactness in EXACTNESS, name
    assert isinstance(op.route, (Decomposition, SingleRoute))
    if op.kind == "bridge":
        assert isinstance(op.work, Work), name
        if isinstance(op.route, SingleRoute):
            assert op.route.reason.strip() and op.route.reason != "only lowering", name
    else:
        assert op.work is None and op.route == SingleRoute("only lowering"), name
    assert op.width_begin is None or callable(op.width_begin)


def test_a_record_with_an_undeclared_fact_is_refused():
    relu = get_op("relu")
    for fact in FACT_FIELDS:
        broken = dataclasses.replace(relu, name="incomplete_relu", **{fact: UNSET})
        with pytest.raises(RuntimeError, match=f"leaves {fact} undeclared"):
            register(broken)
    assert "incomplete_relu" not in all_ops()


def test_a_contraction_role_needs_the_contraction_flag():
    linear = get_op("linear")
    with pytest.raises(RuntimeError, match="Flag.CONTRACTION"):
        register(dataclasses.replace(linear, name="odd_linear", flags=()))


def test_a_typo_in_a_flag_fails_where_it_is_declared_and_where_it_is_read():
    with pytest.raises(RuntimeError, match="Flag members"):
        dataclasses.replace(get_op("relu"), name="typo_relu", flags=("elementwsie",))
    with pytest.raises(ValueError, match="not a valid Flag"):
        "comutative" in get_op("mul").flags  # noqa: B015
    assert "commutative" in get_op("mul").flags and Flag.COMMUTATIVE in get_op("add").flags
    assert Flag.COMMUTATIVE not in get_op("sub").flags
    with pytest.raises(ValueError):
        Flag("nonnegative")  # a sign rule now (op.sign), not a flag


def test_temporary_op_replaces_in_place_and_restores_the_registry():
    order = list(all_ops())
    lrn = get_op("lrn")
    with temporary_op(dataclasses.replace(lrn, doc="changed")):
        assert get_op("lrn").doc == "changed" and list(all_ops()) == order
    assert get_op("lrn") is lrn and list(all_ops()) == order
    with temporary_op(dataclasses.replace(lrn, name="lrn_copy")):
        assert list(all_ops()) == [*order, "lrn_copy"]
    assert list(all_ops()) == order
    with pytest.raises(af.AneforgeError, match="unknown op"):
        unregister("lrn_copy")
