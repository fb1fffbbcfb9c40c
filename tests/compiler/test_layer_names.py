"""Names through compile: every opt level keeps them; Program.layer_names / output_names.

A pass that replaces a named node by a new node computing the same value gives it the
name (src/aneforge/optimizer/rewrite.py); a node replaced by an existing one takes that
one's name; the structural hash (and so the tune cache) ignores names.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.ops.bridge import flatten, lrn, sdpa
from aneforge.graph.rewrite import rewrite
from aneforge.optimizer.routes import decompose
from aneforge.optimizer.rules import CANONICAL, REDUCE_TO_MATMUL

R = np.random.default_rng(0)
OPT_LEVELS = ["routes", 0, 1, 2, "max"]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(tmp_path))  # opt=2 writes a tune cache


def _compile(out, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return af.compile(out, **kwargs)


def _names(prog):
    return {n.name for n in prog.compute_nodes if n.name}


def _conv_relu():
    x = af.input((1, 3, 8, 8), name="image")
    c = af.conv(x, R.standard_normal((4, 3, 3, 3)) * 0.3, padding=1, name="conv1")
    return af.relu(c, name="relu1")


def _softmax():
    x = af.input((2, 16), name="x")
    return af.softmax(af.matmul(x, R.standard_normal((16, 8)), name="fc"), name="probs")


def _layer_norm():
    x = af.input((2, 4, 16), name="x")
    ln = af.layer_norm(x, np.ones(16), np.zeros(16), name="ln1")
    return af.gelu(ln, name="act")


def _bridges():
    """Named bridge nodes the route pass (and opt=1/2) may decompose."""
    x = af.input((1, 8, 5, 5), name="x")
    norm = lrn(x, size=4, name="norm")  # the conv-by-ones route is cheaper
    return flatten(norm, name="flat").relu(name="act")


@pytest.mark.parametrize("opt", OPT_LEVELS)
@pytest.mark.parametrize(
    ("build", "want"),
    [
        (_conv_relu, {"conv1", "relu1"}),
        (_softmax, {"fc", "probs"}),
        (_layer_norm, {"ln1", "act"}),
        (_bridges, {"norm", "flat", "act"}),
    ],
)
def test_names_survive_compile_at_every_opt_level(build, want, opt):
    out = build()
    prog = _compile(out, opt=opt)
    assert want <= _names(prog), (opt, _names(prog))
    assert prog.outputs[0].name == out.name and prog.output_names == (out.name,)
    assert set(prog.layer_names.values()) >= want


def test_a_decomposed_bridge_node_hands_its_name_to_the_node_computing_its_value():
    y = _bridges()
    (routed,), count = decompose([y])  # the route pass's swap, for every bridge node
    assert count == 2
    prog = _compile(routed, opt=0)  # the lrn became fused ops ending in a div
    (norm,) = [n for n in prog.nodes if n.name == "norm"]
    assert norm.op == "div" and "lrn" not in [n.op for n in prog.nodes]
    (flat,) = [n for n in prog.nodes if n.name == "flat"]
    assert flat.op == "reshape"
    feed = R.standard_normal((1, 8, 5, 5))
    assert np.array_equal(prog(feed), _compile(y, opt=0)(feed))


def test_rewrites_keep_names_of_rebuilt_and_replaced_nodes():
    x = af.input((4, 8), name="x")
    s = af.sum(af.exp(x, name="e"), axis=1, name="total")
    (out,), report = rewrite([s], REDUCE_TO_MATMUL)
    assert report.matches == {"reduce_sum_to_matmul": 1}
    assert out.op == "reshape" and out.name == "total"  # the new last node takes the name
    assert out.srcs[0].srcs[0].name == "e"
    # An identity rewrite returns an existing node: that node keeps its own name.
    h = af.exp(x, name="h")
    (same,), _ = rewrite([af.reshape(h, (4, 8), name="view")], CANONICAL)
    assert same is h and same.name == "h"
    # A node replaced by a rule keeps the rule's own name when the rule gave one.
    (merged,), _ = rewrite([af.reshape(af.reshape(h, (32,)), (8, 4), name="r")], CANONICAL)
    assert merged.op == "reshape" and merged.srcs == (h,) and merged.name == "r"


def test_sdpa_route_keeps_the_attention_name():
    q = af.input((1, 6, 8), name="q")
    att = sdpa(q, q, q, name="attn")
    (out,), n = decompose([att])
    assert n == 1 and out.op == "bmm" and out.name == "attn"


def test_tune_cache_hits_across_renamed_layers_and_keeps_the_new_names():
    def build(name):
        x = af.input((4, 16), name="x")
        return af.exp(lrn(af.reshape(x.relu(), (1, 4, 16)), name="norm"), name=name)

    first = _compile(build("out_a"), opt=2)
    second = _compile(build("out_b"), opt=2)
    assert first.tune_report["cached"] is False and second.tune_report["cached"] is True
    assert first.outputs[0].name == "out_a" and second.outputs[0].name == "out_b"
    assert second.output_names == ("out_b",)


# ---- Program.layer_names, layer_name, output_names ---------------------------------------


def test_program_layer_names_cover_every_node_uniquely_and_are_cached():
    x = af.input((2, 8), name="x")
    h = af.matmul(x, np.ones((8, 8)), name="fc")
    y = af.relu(af.matmul(h.relu(), np.ones((8, 4))), name="fc")  # a duplicate name
    prog = _compile(y, opt=0)
    names = prog.layer_names
    assert list(names) == [id(n) for n in prog.nodes]
    assert len(set(names.values())) == len(prog.nodes)
    assert [prog.layer_name(n) for n in prog.compute_nodes] == ["fc", "relu_0", "matmul_1",
                                                                "fc_1"]  # fmt: skip
    assert prog.layer_names is names  # computed once
    with pytest.raises(af.OptionError, match="not a node of this program"):
        prog.layer_name(x.exp())


def test_output_names_default_to_the_outputs_and_can_be_given():
    x = af.input((3,), name="x")
    a, b = af.relu(x, name="act"), x.exp()
    prog = _compile([a, b])
    assert prog.output_names == ("act", None)
    assert "output 0 'act'" in prog.summary() and "%1 = relu(%0) -> (3,)  'act'" in prog.summary()
    given = _compile([a, b], output_names=["y0", None])
    assert given.output_names == ("y0", None)
    # The optimizer may replace an output node; the program keeps the name it was given.
    r = _compile(af.reshape(a, (3,), name="same"))
    assert r.outputs[0] is not None and r.output_names == ("same",)


@pytest.mark.parametrize(
    ("names", "match"),
    [
        (["a"], "1 name"),
        ("ab", "list of names"),
        (["a", ""], "non-empty string"),
        (["a", 3], "non-empty string"),
    ],
)
def test_bad_output_names_raise(names, match):
    x = af.input((3,), name="x")
    with pytest.raises(af.AneforgeError, match=match):
        af.compile([x.relu(), x.exp()], output_names=names)
