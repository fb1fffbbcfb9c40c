"""Hostile ONNX models and bytes, for tests/io/test_onnx_hostile.py.

``hostile_cases(seed, count)`` returns ``count`` :class:`Case` s, deterministic in
``seed``: each is one of a few small valid models built with ``onnx.helper`` (a Relu,
an affine map with initializers, a Conv, a MaxPool, a shape subgraph that folds, a
Tile / Expand / Range / ConstantOfShape / Pad feeding an Add, a chain of constant
arithmetic, a model-local function, an If on a constant) put through one mutation:

- bytes: truncated, bytes flipped, random garbage, empty;
- tensors: negative, huge or miscounted dims, ``raw_data`` shorter than its dims, data
  types UNDEFINED / 999 / random, external-data references (bytes have no folder);
- graph: input element type 0 / 999 / integer / string, input dims negative, zero or
  2**31, duplicate output names (two writers), duplicate input names, dangling names;
- model: opset 99 / 12 / 0, IR version 0 / 99, op types and domains that do not exist;
- attributes: ``kernel_shape="abc"``, strides 0 or negative, huge or negative pads,
  dilations 0, group 0, axis 99, wrong attribute types, non-UTF-8 strings;
- functions: a local function calling itself, two calling each other, a deep nest;
- sizes: Tile by 2**33, Range of 2**40, Expand to (2**20, 2**20, 3), ConstantOfShape
  (2**16, 2**16), pads of 2**30, OneHot depth 2**40;
- depth: chains of 150 to 170 constant nodes, and of 150 to 200 graph ops;
- hidden: a Conv with strides 0 in a function body, a huge Tile in an If branch, a
  constant Loop of 2**40 iterations;
- valid variants (other strides, shapes, values), which must import and match
  onnxruntime.

A case's ``model`` is a ModelProto or bytes; ``feeds`` are the float inputs for the
onnxruntime comparison of a case that imports.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
from onnx import AttributeProto, ModelProto, TensorProto, helper, numpy_helper

OPSET = 17
F = TensorProto.FLOAT


@dataclass
class Case:
    """One hostile input: ``model`` (ModelProto or bytes) and how it was made."""

    name: str
    model: object
    feeds: dict = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), functions=(), domains=()):
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", OPSET)] + [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    m.ir_version = 8
    return m


def _f16(rng, shape):
    return rng.uniform(-2, 2, shape).astype(np.float16).astype(np.float32)


def _init(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


# ---- the valid base models ------------------------------------------------------------


def base_relu(rng):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    return m, {"x": _f16(rng, (2, 3))}


def base_affine(rng):
    nodes = [helper.make_node("Mul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    inits = [_init("w", _f16(rng, (3, 4))), _init("b", _f16(rng, (4,)))]
    m = _model(nodes, [_vi("x", [3, 4])], [_vi("y", [3, 4])], inits)
    return m, {"x": _f16(rng, (3, 4))}


def base_conv(rng, strides=(1, 1), pads=(1, 1, 1, 1)):
    node = helper.make_node(
        "Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], strides=list(strides), pads=list(pads)
    )
    size = [(5 + pads[i] + pads[i + 2] - 3) // strides[i] + 1 for i in range(2)]
    m = _model(
        [node],
        [_vi("x", [1, 1, 5, 5])],
        [_vi("y", [1, 2, *size])],
        [_init("w", _f16(rng, (2, 1, 3, 3)) / 4)],
    )
    return m, {"x": _f16(rng, (1, 1, 5, 5))}


def base_pool(rng):
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    m = _model([node], [_vi("x", [1, 1, 4, 4])], [_vi("y", [1, 1, 2, 2])])
    return m, {"x": _f16(rng, (1, 1, 4, 4))}


def base_shape_math(rng):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [_init("zero", np.array([0], np.int64)), _init("tail", np.array([3, 2], np.int64))]
    m = _model(nodes, [_vi("x", [2, 6])], [_vi("y", [2, 3, 2])], inits)
    return m, {"x": _f16(rng, (2, 6))}


def base_grow(rng, op="Tile", big=False):
    """``op`` makes a small constant from a few numbers; its sum is added to x. ``big``
    asks for a huge output instead."""
    c = _init("c", _f16(rng, (1, 3)))
    if op == "Tile":
        nodes = [helper.make_node("Tile", ["c", "r"], ["g"])]
        inits = [c, _init("r", np.array([2**33 if big else 2, 1], np.int64))]
    elif op == "Expand":
        nodes = [helper.make_node("Expand", ["c", "s"], ["g"])]
        inits = [c, _init("s", np.array([2**20, 2**20, 3] if big else [2, 3], np.int64))]
    elif op == "ConstantOfShape":
        value = numpy_helper.from_array(np.array([0.5], np.float32))
        nodes = [helper.make_node("ConstantOfShape", ["s"], ["g"], value=value)]
        inits = [_init("s", np.array([2**16, 2**16] if big else [2, 3], np.int64))]
    elif op == "Range":
        nodes = [helper.make_node("Range", ["a", "l", "d"], ["g"])]
        limit = 2.0**40 if big else 3.0
        inits = [_init(n, np.array(v, np.float32)) for n, v in (("a", 0), ("l", limit), ("d", 1))]
    elif op == "Pad":
        nodes = [helper.make_node("Pad", ["c", "p"], ["g"])]
        inits = [c, _init("p", np.array([2**30 if big else 1, 0, 0, 0], np.int64))]
    elif op == "OneHot":
        nodes = [helper.make_node("OneHot", ["i", "depth", "v"], ["g"], axis=-1)]
        inits = [
            _init("i", np.array([0, 2], np.int64)),
            _init("depth", np.array(2**40 if big else 3, np.int64)),
            _init("v", np.array([0.0, 1.0], np.float32)),
        ]
    else:  # pragma: no cover - the generator names only the ops above
        raise ValueError(op)
    nodes.append(helper.make_node("ReduceSum", ["g"], ["total"], keepdims=0))
    nodes.append(helper.make_node("Add", ["x", "total"], ["y"]))
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], inits)
    return m, {"x": _f16(rng, (2, 3))}


def base_chain(rng, n=20, op="Add"):
    """``n`` constant nodes folding into one constant, added to x."""
    nodes = [
        helper.make_node("Constant", [], ["c0"], value=_init("v", np.full(2, 0.25, np.float32)))
    ]
    for i in range(n):
        nodes.append(helper.make_node(op, [f"c{i}", "c0"], [f"c{i + 1}"]))
    nodes.append(helper.make_node("Add", ["x", f"c{n}"], ["y"]))
    m = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    return m, {"x": _f16(rng, (2,))}


def base_deep_ops(rng, n=300):
    """``n`` graph ops in a row (Neg twice is the identity, so values stay bounded)."""
    nodes = [helper.make_node("Neg", [f"h{i}" if i else "x"], [f"h{i + 1}"]) for i in range(n)]
    nodes.append(helper.make_node("Identity", [f"h{n}"], ["y"]))
    m = _model(nodes, [_vi("x", [2])], [_vi("y", [2])])
    return m, {"x": _f16(rng, (2,))}


def _function(name, body_op, domain="local"):
    body = [helper.make_node(body_op, ["a"], ["b"], domain=domain if body_op[0] == "F" else "")]
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid(domain, 1)]
    return helper.make_function(domain, name, ["a"], ["b"], body, opsets)


def base_function(rng, kind="plain", depth=3):
    """A model-local function: plain (Relu), self-recursive, mutually recursive, or a
    chain of ``depth`` functions each calling the next."""
    if kind == "plain":
        functions = [_function("F0", "Relu")]
    elif kind == "self":
        functions = [_function("F0", "F0")]
    elif kind == "mutual":
        functions = [_function("F0", "F1"), _function("F1", "F0")]
    else:  # a nest
        functions = [_function(f"F{i}", f"F{i + 1}") for i in range(depth)]
        functions.append(_function(f"F{depth}", "Relu"))
    node = helper.make_node("F0", ["x"], ["y"], domain="local")
    m = _model(
        [node], [_vi("x", [2, 3])], [_vi("y", [2, 3])], functions=functions, domains=["local"]
    )
    return m, {"x": _f16(rng, (2, 3))}


def base_if(rng, cond=True):
    def branch(op, out):
        return helper.make_graph([helper.make_node(op, ["x"], [out])], op, [], [_vi(out, [3])])

    node = helper.make_node(
        "If", ["c"], ["y"], then_branch=branch("Relu", "t"), else_branch=branch("Neg", "e")
    )
    m = _model([node], [_vi("x", [3])], [_vi("y", [3])], [_init("c", np.array(cond))])
    return m, {"x": _f16(rng, (3,))}


def base_inner(rng, kind="function_conv"):
    """A hostile node hidden inside a function body, an If branch or a Loop body:
    a Conv with strides 0 in a local function, a huge Tile in an If branch, a Loop of
    2**40 constant iterations."""
    x = _vi("x", [1, 1, 4, 4])
    if kind == "function_conv":
        w = helper.make_node(
            "Constant", [], ["w"], value=_init("wv", np.ones((1, 1, 2, 2), np.float32))
        )
        conv = helper.make_node("Conv", ["a", "w"], ["b"], strides=[0, 0])
        body = helper.make_function(
            "local", "F0", ["a"], ["b"], [w, conv], [helper.make_opsetid("", OPSET)]
        )
        node = helper.make_node("F0", ["x"], ["y"], domain="local")
        m = _model([node], [x], [_vi("y", [1, 1, 3, 3])], functions=[body], domains=["local"])
    elif kind == "if_tile":
        reps = helper.make_node(
            "Constant", [], ["r"], value=_init("rv", np.array([1, 1, 2**17, 2**17]))
        )
        then_g = helper.make_graph(
            [reps, helper.make_node("Tile", ["x", "r"], ["t"])],
            "then",
            [],
            [_vi("t", [1, 1, "h", "w"])],
        )
        else_g = helper.make_graph(
            [helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e", None)]
        )
        node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
        m = _model([node], [x], [_vi("y", [1, 1, "h", "w"])], [_init("c", np.array(True))])
    else:  # a counted Loop whose trip count and values are all constants
        body = helper.make_graph(
            [
                helper.make_node("Identity", ["c_in"], ["c_out"]),
                helper.make_node("Add", ["v_in", "one"], ["v_out"]),
            ],
            "body",
            [_vi("i", [], TensorProto.INT64), _vi("c_in", [], TensorProto.BOOL), _vi("v_in", [2])],
            [_vi("c_out", [], TensorProto.BOOL), _vi("v_out", [2])],
            initializer=[_init("one", np.ones(2, np.float32))],
        )
        loop = helper.make_node("Loop", ["M", "cond", "v0"], ["v"], body=body)
        inits = [
            _init("M", np.array(2**40, np.int64)),
            _init("cond", np.array(True)),
            _init("v0", np.zeros(2, np.float32)),
        ]
        nodes = [loop, helper.make_node("ReduceSum", ["v"], ["s"], keepdims=0)]
        nodes.append(helper.make_node("Add", ["x", "s"], ["y"]))
        m = _model(nodes, [x], [_vi("y", [1, 1, 4, 4])], inits)
    return m, {"x": _f16(rng, (1, 1, 4, 4))}


BASES = [base_relu, base_affine, base_conv, base_pool, base_shape_math, base_grow, base_chain]


# ---- mutations ------------------------------------------------------------------------
# Each takes (rng, model, feeds) and returns (name, model or bytes, feeds, kwargs).


def _first_init(m: ModelProto):
    return m.graph.initializer[0] if m.graph.initializer else None


def mut_bytes(rng, m, feeds):
    data = bytearray(m.SerializeToString())
    kind = rng.choice(["truncate", "flip", "garbage", "empty", "prefix"])
    if kind == "truncate":
        data = data[: int(rng.integers(0, len(data)))]
    elif kind == "flip":
        for _ in range(int(rng.integers(1, 5))):
            i = int(rng.integers(0, len(data)))
            data[i] ^= int(rng.integers(1, 256))
    elif kind == "garbage":
        data = bytearray(rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes())
    elif kind == "empty":
        data = bytearray()
    else:
        data = bytearray(b"\x00\xff\x10") + data
    return f"bytes:{kind}", bytes(data), feeds, {}


def mut_tensor(rng, m, feeds):
    t = _first_init(m)
    if t is None:
        return mut_graph(rng, m, feeds)
    kind = rng.choice(["neg_dims", "huge_dims", "dim_count", "short_raw", "dtype", "external"])
    if kind == "neg_dims":
        t.dims[0] = -int(rng.integers(1, 5))
    elif kind == "huge_dims":
        t.dims[0] = int(2 ** rng.integers(31, 62))
    elif kind == "dim_count":
        t.dims.append(int(rng.integers(1, 4)))
    elif kind == "short_raw":
        raw = t.raw_data or numpy_helper.from_array(numpy_helper.to_array(t)).raw_data
        t.ClearField("float_data")
        t.raw_data = raw[: int(rng.integers(0, max(len(raw), 1)))]
    elif kind == "dtype":
        t.data_type = int(rng.choice([0, 999, 8, 11, 16, int(rng.integers(0, 30))]))
    else:
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("int64_data")
        t.data_location = TensorProto.EXTERNAL
        entry = t.external_data.add()
        entry.key, entry.value = (
            "location",
            str(rng.choice(["secret.bin", "/etc/passwd", "../up.bin", "", "a/../../b.bin"])),
        )
    return f"tensor:{kind}", m, feeds, {}


def mut_graph(rng, m, feeds):
    g = m.graph
    kind = rng.choice(
        ["elem_type", "input_dims", "dup_output", "dup_input", "dangling_in", "dangling_out"]
    )
    if kind == "elem_type":
        g.input[0].type.tensor_type.elem_type = int(
            rng.choice([0, 999, TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE])
        )
    elif kind == "input_dims":
        dim = g.input[0].type.tensor_type.shape.dim[0]
        dim.dim_value = int(rng.choice([-1, 0, 2**31, 2**40]))
    elif kind == "dup_output":
        last = g.node[-1]
        g.node.append(helper.make_node("Neg", [last.input[0]], [last.output[0]]))
    elif kind == "dup_input":
        g.input.append(g.input[0])
    elif kind == "dangling_in":
        g.node[-1].input[0] = "nowhere"
    else:
        g.output[0].name = "nowhere"
    return f"graph:{kind}", m, feeds, {}


def mut_model(rng, m, feeds):
    kind = rng.choice(["opset", "ir", "op_type", "domain"])
    if kind == "opset":
        m.opset_import[0].version = int(rng.choice([99, 12, 0, -5, 2**31 - 1]))
    elif kind == "ir":
        m.ir_version = int(rng.choice([0, 1, 99]))
    elif kind == "op_type":
        m.graph.node[-1].op_type = str(rng.choice(["Relux", "", "conv", "\u00e9t\u00e9", "If"]))
    else:
        m.graph.node[-1].domain = str(rng.choice(["com.nowhere", "ai.onnx.ml", "local"]))
    return f"model:{kind}", m, feeds, {}


_CONV_ATTRS = [
    ("kernel_shape", "abc"),
    ("kernel_shape", [3]),
    ("kernel_shape", [9, 9]),
    ("strides", [0, 0]),
    ("strides", [-1, -1]),
    ("pads", [-2, -2, -2, -2]),
    ("pads", [2**40] * 4),
    ("dilations", [0, 0]),
    ("group", 0),
    ("group", 7),
    ("auto_pad", "BOGUS"),
    ("auto_pad", b"\xff\xfe"),
    ("strides", 1.5),
    ("strides", [2, 2]),
    ("pads", [0, 0, 0, 0]),
]


def mut_attr(rng, m, feeds):
    node = m.graph.node[-1]
    if node.op_type in ("Conv", "MaxPool"):
        name, value = _CONV_ATTRS[int(rng.integers(len(_CONV_ATTRS)))]
    else:
        name, value = [("axis", 99), ("to", 999), ("perm", [5, 5]), ("bogus", 1)][
            int(rng.integers(4))
        ]
    keep = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(keep)
    attr = helper.make_attribute(name, value)
    if rng.random() < 0.2:  # claim a type the value does not have
        attr.type = int(
            rng.choice([AttributeProto.FLOAT, AttributeProto.GRAPH, AttributeProto.STRINGS])
        )
    node.attribute.append(attr)
    return f"attr:{name}={value!r}", m, feeds, {}


def valid_variant(rng, m, feeds):
    """A valid model that must import and match onnxruntime."""
    kind = rng.choice(["conv_strides", "relu_shape", "affine_values", "grow"])
    if kind == "conv_strides":
        strides = tuple(int(s) for s in rng.integers(1, 3, 2))
        pads = tuple(int(p) for p in rng.integers(0, 2, 4))
        m, feeds = base_conv(rng, strides, pads)
    elif kind == "relu_shape":
        shape = [int(d) for d in rng.integers(1, 5, int(rng.integers(1, 4)))]
        m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", shape)], [_vi("y", shape)])
        feeds = {"x": _f16(rng, tuple(shape))}
    elif kind == "affine_values":
        m, feeds = base_affine(rng)
    else:
        m, feeds = base_grow(rng, str(rng.choice(["Tile", "Expand", "ConstantOfShape", "Pad"])))
    return f"valid:{kind}", m, feeds, {}


def special(rng, m, feeds):
    """The named size, depth and function cases."""
    kind = rng.choice(["big", "chain", "deep_ops", "function", "if", "inner"])
    if kind == "inner":
        inner = str(rng.choice(["function_conv", "if_tile", "loop"]))
        m, feeds = base_inner(rng, inner)
        return f"inner:{inner}", m, feeds, {}
    if kind == "big":
        op = str(rng.choice(["Tile", "Expand", "ConstantOfShape", "Range", "Pad", "OneHot"]))
        m, feeds = base_grow(rng, op, big=True)
        return f"big:{op}", m, feeds, {}
    if kind == "chain":
        n = int(rng.integers(150, 171))
        m, feeds = base_chain(rng, n, str(rng.choice(["Add", "Mul", "Max"])))
        return f"chain:{n}", m, feeds, {}
    if kind == "deep_ops":
        m, feeds = base_deep_ops(rng, int(rng.integers(75, 101)) * 2)
        return "deep_ops", m, feeds, {}
    if kind == "function":
        fk = str(rng.choice(["plain", "self", "mutual", "nest"]))
        m, feeds = base_function(rng, fk, depth=int(rng.choice([3, 40])))
        return f"function:{fk}", m, feeds, {}
    m, feeds = base_if(rng, bool(rng.integers(2)))
    return "if", m, feeds, {}


MUTATIONS = [mut_bytes, mut_tensor, mut_graph, mut_model, mut_attr, valid_variant, special]


def hostile_cases(seed: int, count: int) -> list[Case]:
    """``count`` cases drawn from ``seed`` (the same seed, the same cases)."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(count):
        base = BASES[int(rng.integers(len(BASES)))]
        if base is base_grow:
            m, feeds = base(rng, str(rng.choice(["Tile", "Expand", "ConstantOfShape", "Pad"])))
        else:
            m, feeds = base(rng)
        mutate = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
        name, model, feeds, kwargs = mutate(rng, m, feeds)
        if isinstance(model, ModelProto) and rng.random() < 0.5:
            with contextlib.suppress(Exception):  # some mutations cannot be serialized
                model = model.SerializeToString()
        cases.append(Case(f"{seed}/{i}:{base.__name__}:{name}", model, feeds, kwargs))
    return cases
