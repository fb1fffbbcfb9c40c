"""Node names: ``name=`` on every op, ``Tensor.named``, ``layer_names``, and the hash.

src/aneforge/graph/naming.py: a name is metadata; every node gets a unique, stable
layer name (its own, else ``{op}_{k}``; clashes get ``_1``, ``_2``...).
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

import aneforge as af
from aneforge.graph import api
from aneforge.graph.hashing import structural_hash
from aneforge.graph.naming import layer_names, user_name
from aneforge.graph.ops import bridge as br
from aneforge.graph.ops.bridge import BRIDGE_FUNCTIONS
from aneforge.graph.walk import topological_order

R = np.random.default_rng(0)


def _signature_names():
    """Every public op function, by name (the API's and the bridge ops')."""
    fns = {n: getattr(api, n) for n in api.__all__}
    fns.update(BRIDGE_FUNCTIONS)
    return sorted(fns.items())


@pytest.mark.parametrize(("fn_name", "fn"), _signature_names())
def test_every_public_op_function_takes_a_keyword_only_name(fn_name, fn):
    param = inspect.signature(fn).parameters.get("name")
    assert param is not None, f"af.{fn_name} has no name= parameter"
    assert param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is None


def test_name_lands_on_the_node_each_kind_of_function_returns():
    x = af.input((1, 4, 6, 6), name="x")
    v = af.input((2, 8), name="v")
    built = {
        "act": af.relu(x, name="act"),  # generated unary
        "clipped": af.clip(v, lo=0.0, name="clipped"),  # generated unary with attributes
        "plus": af.add(v, 1.0, name="plus"),  # generated binary
        "cmp": af.greater(v, 0.0, name="cmp"),  # generated comparison
        "total": af.sum(v, axis=-1, name="total"),  # generated reduction
        "conv1": af.conv(x, R.standard_normal((2, 4, 3, 3)), padding=1, name="conv1"),
        "fc": af.linear(v, np.zeros((3, 8)), np.zeros(3), name="fc"),
        "mm": af.matmul(v, np.ones((8, 2)), name="mm"),
        "ln": af.layer_norm(v, name="ln"),
        "probs": af.softmax(v, name="probs"),
        "flat": af.reshape(x, (1, -1), name="flat"),
        "pick": af.gather(v, [1, 0], axis=1, name="pick"),
        "joined": af.concat([v, v], axis=1, name="joined"),
        "amax": br.argmax(v, name="amax"),
        "norm": br.lrn(x, size=3, name="norm"),
        "method": v.exp(name="method"),  # Tensor methods are the same functions
        "sel": v.select(v, 0.0, name="sel"),
    }
    for name, t in built.items():
        assert t.name == name, (name, t)
    values, indices = br.topk(v, 2, name="top")
    assert (values.name, indices.name) == ("top", "top/indices")
    assert af.relu(v).name is None  # no name given: none


def test_sdpa_names_the_node_it_returns_in_both_forms():
    q = af.input((1, 5, 8))
    assert br.sdpa(q, q, q, name="attn").op == "sdpa"
    assert br.sdpa(q, q, q, name="attn").name == "attn"
    long = af.input((1, 600, 8))
    out = br.sdpa(long, long, long, name="attn")
    assert out.op == "bmm" and out.name == "attn"  # the decomposed form's last node


def test_nn_helpers_name_their_layers():
    x = af.input((1, 4, 8), name="x")
    y = af.nn.mha(x, *[np.eye(8)] * 4, heads=2, name="attn")
    names = {n.name for n in topological_order([y]) if n.op != "weight"}
    assert {"attn", "attn/q", "attn/k", "attn/v", "attn/probs", "attn/context"} <= names
    z = af.nn.mlp(x, np.zeros((16, 8)), np.zeros(16), np.zeros((8, 16)), np.zeros(8),
                  name="mlp")  # fmt: skip
    assert (z.name, z.srcs[0].name, z.srcs[0].srcs[0].name) == ("mlp", "mlp/act", "mlp/fc1")


def test_named_returns_the_same_computation_under_a_name():
    x = af.input((2, 4), name="x")
    w = np.ones((4, 3))
    y = (x @ w).relu()
    fc1 = y.named("fc1")
    assert fc1.name == "fc1" and y.name is None  # a new node; the old one is untouched
    assert (fc1.op, fc1.srcs, fc1.attrs, fc1.shape) == (y.op, y.srcs, y.attrs, y.shape)
    assert fc1.named("fc1") is fc1
    assert (x @ w).relu().named("fc1").name == "fc1"  # the chain the issue asks for
    feed = R.standard_normal((2, 4))
    assert np.array_equal(af.compile(fc1)(feed), af.compile(y)(feed))
    bias = af.weight(np.ones(3)).named("bias")
    assert bias.op == "weight" and bias.name == "bias" and np.all(bias.value == 1)


@pytest.mark.parametrize("bad", ["", "   ", 3, b"fc", ("fc",)])
def test_bad_names_raise_naming_the_op_and_the_value(bad):
    x = af.input((2,), name="x")
    for build in (
        lambda: af.relu(x, name=bad),
        lambda: af.add(x, x, name=bad),
        lambda: af.sum(x, name=bad),
        lambda: af.conv(af.input((1, 1, 3)), np.ones((1, 1, 1)), name=bad),
        lambda: x.exp().named(bad),
        lambda: af.input((2,), name=bad),
        lambda: af.weight(np.ones(2), name=bad),
    ):
        with pytest.raises(af.AttributeValueError, match="name must be a non-empty string") as e:
            build()
        assert repr(bad) in str(e.value) and "name='fc1'" in str(e.value)
    with pytest.raises(af.AttributeValueError, match="relu: name"):
        af.relu(x, name="")


def test_named_refuses_inputs_and_says_where_to_name_them():
    x = af.input((2, 3), name="x")
    with pytest.raises(
        af.AttributeValueError, match=r"second input.*af.input\(\(2, 3\), name='y'\)"
    ):
        x.named("y")


# ---- layer_names -----------------------------------------------------------------------


def test_layer_names_count_ops_keep_user_names_and_suffix_duplicates():
    x = af.input((1, 2, 8, 8), name="x")
    w = R.standard_normal((2, 2, 3, 3))
    c0 = af.conv(x, w, padding=1)
    r0 = c0.relu(name="fc1")
    c1 = af.conv(r0, w, padding=1, name="stem")
    r1 = c1.relu()
    c2 = af.conv(r1, w, padding=1)
    dup = c2.relu(name="fc1")
    nodes = [n for n in topological_order([dup]) if n.op != "weight"]
    names = layer_names(nodes)
    assert [names[id(n)] for n in nodes] == ["x", "conv_0", "fc1", "stem", "relu_1", "conv_2",
                                             "fc1_1"]  # fmt: skip
    assert len(set(names.values())) == len(nodes)


def test_layer_names_never_take_a_users_name_and_suffixes_stay_free():
    x = af.input((3,), name="relu_0")  # the name the first relu would be given
    a = x.relu()
    b = a.exp(name="e")
    c = b.exp(name="e")
    d = c.exp(name="e_1")  # a user's name equal to a suffixed duplicate
    names = list(layer_names([x, a, b, c, d]).values())
    assert names == ["relu_0", "relu_0_1", "e", "e_2", "e_1"]


def test_automatic_weight_labels_are_not_names():
    w = af.weight(np.ones(2))
    assert w.name.startswith("w") and user_name(w) is None
    named = af.weight(np.ones(2), name="gamma")
    names = list(layer_names([w, named, af.weight(np.zeros(2))]).values())
    assert names == ["weight_0", "gamma", "weight_2"]


def test_layer_names_keep_fixes_earlier_choices_first():
    x = af.input((2,))
    a, b = x.relu(), x.exp()
    keep = {id(b): "relu_0"}
    assert list(layer_names([x, a, b], keep=keep).values()) == ["input_0", "relu_0_1", "relu_0"]


def _names_in_a_fresh_process() -> list[str]:
    code = (
        "import numpy as np, aneforge as af\n"
        "[af.weight(np.ones(1)) for _ in range(7)]\n"  # shift the automatic weight labels
        "from aneforge.graph.naming import layer_names\n"
        "x, y = af.nn.small_cnn()\n"
        "p = af.compile(y, opt=0)\n"
        "print(' '.join(p.layer_names.values()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_layer_names_are_the_same_in_every_process():
    x, y = af.nn.small_cnn()
    here = list(af.compile(y, opt=0).layer_names.values())
    assert here == _names_in_a_fresh_process()
    assert "conv_0" in here and "weight_0" in here and "image" in here


# ---- the structural hash -----------------------------------------------------------------


def test_op_names_stay_out_of_the_structural_hash_but_input_names_count():
    def build(name_a, name_b, input_name="x"):
        x = af.input((2, 8), name=input_name)
        h = af.matmul(x, np.ones((8, 4)), name=name_a)
        return af.softmax(h, name=name_b)

    plain = structural_hash(build(None, None))
    assert structural_hash(build("fc", "probs")) == plain
    assert structural_hash(build("other", None)) == plain
    assert structural_hash(build(None, None).named("out")) == plain
    assert structural_hash(build(None, None, input_name="tokens")) != plain
