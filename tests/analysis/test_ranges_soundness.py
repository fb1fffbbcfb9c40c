"""Soundness of the range analysis against the emulator, over the registry.

The property: for inputs drawn inside their declared ranges, every value the emulator
produces for every node lies inside the node's interval (NaN only where allowed). It is
checked on random graphs of every fused op (the strategy of ``test_properties``, with
wild weights: inf, nan, subnormals, huge values) and on every bridge op, with and
without a target, for inputs drawn uniformly, at the range's ends and in adversarial
patterns. Case counts: 520 graphs x 20 feeds + 19 bridge ops x 3 ranges x 2 targets x 20
feeds = 12,680 emulator runs, each checked node by node.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aneforge as af
from aneforge.graph.ops.bridge import BRIDGE_FUNCTIONS, BRIDGE_OPS
from aneforge.graph.registry import all_ops
from aneforge.graph.tensor import INTEGER_DTYPES
from range_cases import assert_runs_inside, draw_range
from test_properties import PROFILE, graphs

FEEDS_PER_CASE = 20


def in_range_feeds(rng, shape, lo, hi, n):
    """``n`` fp16 arrays inside [lo, hi]: the ends, alternating ends, uniform, and
    values clustered at the ends (where worst cases live)."""
    lo16, hi16 = np.float16(lo), np.float16(hi)
    out = [np.full(shape, lo16), np.full(shape, hi16)]
    alt = np.where(np.indices(shape).sum(0) % 2 == 0, lo16, hi16) if shape else np.array(hi16)
    out.append(alt.astype(np.float16))
    while len(out) < n:
        u = rng.uniform(lo, hi, shape)
        if rng.random() < 0.4:
            u = np.where(rng.random(shape) < 0.5, lo, hi)
        out.append(np.clip(u, lo, hi).astype(np.float16))
    # fp16 rounding of a uniform draw can step past a non-fp16 end: clamp in fp16
    return [np.clip(v, lo16, hi16) for v in out[:n]]


def in_range_ids(rng, shape, lo, hi, n, dtype):
    """``n`` integer arrays of ``dtype`` inside [lo, hi]: the ends, alternating ends and
    uniform whole numbers (an integer input's feeds)."""
    out = [np.full(shape, lo), np.full(shape, hi)]
    out.append(np.where(np.indices(shape).sum(0) % 2 == 0, lo, hi) if shape else np.array(hi))
    while len(out) < n:
        out.append(rng.integers(lo, hi, size=shape, endpoint=True))
    return [np.asarray(v).astype(dtype) for v in out[:n]]


def input_range(t, rng):
    """A declared range for input ``t``: drawn at random (fp16), or whole numbers inside
    the integer input's own declared range (or its type's)."""
    if t.dtype == "float16":
        return draw_range(rng)
    lo, hi = t.attrs.get("range") or INTEGER_DTYPES[t.dtype]
    a, b = sorted(int(v) for v in rng.integers(lo, hi, size=2, endpoint=True))
    return a, b


def assert_sound(outputs, ranges, rng, target=None):
    """Analyse ``outputs`` with ``ranges`` ({input tensor: (lo, hi)}) and check every
    node of ``FEEDS_PER_CASE`` in-range runs; returns the number of runs checked."""
    prog = af.compile(outputs, opt=0)
    given_ranges = {t.name: ranges[t] for t in prog.inputs}
    rep = af.range_analysis(prog, input_ranges=given_ranges, target=target)
    per_input = [
        in_range_feeds(rng, t.shape, *ranges[t], FEEDS_PER_CASE)
        if t.dtype == "float16"
        else in_range_ids(rng, t.shape, *ranges[t], FEEDS_PER_CASE, t.dtype)
        for t in rep.program.inputs
    ]
    graph = "; graph: " + ", ".join(f"{n.op}{n.shape}" for n in rep.nodes)
    return assert_runs_inside(rep, per_input, graph)


# ---- random graphs of every fused op ----------------------------------------------------


def _check_graph(g, seed, target):
    rng = np.random.default_rng(seed)
    ranges = {t: input_range(t, rng) for t in g.inputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_sound(g.outputs, ranges, rng, target)


@given(graphs(), st.integers(0, 2**31))
@settings(PROFILE, max_examples=320)
def test_random_graphs_stay_inside_their_intervals(g, seed):
    _check_graph(g, seed, None)


@given(graphs(), st.integers(0, 2**31), st.sampled_from(["M1", "A14", "M4"]))
@settings(PROFILE, max_examples=200)
def test_random_graphs_stay_inside_their_intervals_on_targets(g, seed, target):
    _check_graph(g, seed, target)


# ---- every bridge op ----------------------------------------------------------------------


def _bridge_case(name, rng):
    """(outputs, input tensors) of one small instance of bridge op ``name``."""
    x = af.input((1, 4, 6, 6), name="x")
    v = af.input((2, 5, 8), name="v")
    f = BRIDGE_FUNCTIONS[name]
    if name == "sdpa":
        q, k = af.input((2, 5, 8), name="q"), af.input((2, 7, 8), name="k")
        vv = af.input((2, 7, 8), name="vv")
        return [f(q, k, vv, scale=float(rng.choice([0.35, 1.0, 4.0])))], [q, k, vv]
    if name == "argmax":
        return [f(v, axis=-1)], [v]
    if name == "topk":
        vals, idx = f(v, 3, axis=-1)
        return [vals, idx], [v]
    if name == "sort":
        return [f(v, axis=-1, descending=bool(rng.integers(2)))], [v]
    if name == "minmax_norm":
        return [f(v, axes=(-1,))], [v]
    if name == "flatten":
        return [f(x, axis=1)], [x]
    if name == "lrn":
        return [f(x, size=3, alpha=float(rng.choice([1e-4, 1.0])), beta=0.75, bias=1.0)], [x]
    if name in ("space_to_channel", "space_to_batch"):
        return [f(x, 2)], [x]
    if name in ("channel_to_space", "batch_to_space"):
        y = af.input((4, 4, 3, 3), name="y")
        return [f(y, 2)], [y]
    if name == "input_view":
        return [f(x, (0, 1, 0, 2), (1, 2, 4, 4))], [x]
    if name == "dynamic_slice":
        start = af.input((4,), name="start")
        return [f(x, start, (1, 2, 3, 3))], [x, start]
    if name == "cross_product":
        a, b = af.input((4, 3), name="a"), af.input((4, 3), name="b")
        return [f(a, b)], [a, b]
    if name == "cross_correlation":
        t = af.input((4, 3, 3), name="t")
        return [f(x, t)], [x, t]
    if name == "cost_volume":
        r = af.input((1, 4, 6, 6), name="r")
        return [f(x, r, 2)], [x, r]
    if name == "fps":
        p = af.input((1, 12, 3), name="p")
        return [f(p, 4)], [p]
    if name == "radius_search":
        p, c = af.input((12, 3), name="p"), af.input((4, 3), name="c")
        return [f(p, c, 1.5, 5)], [p, c]
    if name == "scaled_elementwise":
        a, b = af.input((3, 5), name="a"), af.input((3, 5), name="b")
        op = str(rng.choice(["add", "sub", "mul"]))
        return [f(a, b, op=op, scale=float(rng.choice([0.5, 3.0, -2.0])))], [a, b]
    raise AssertionError(f"no case for bridge op {name}")


def test_every_bridge_op_has_a_case():
    bridge = {n for n, op in all_ops().items() if op.kind == "bridge"}
    assert bridge == set(BRIDGE_OPS)


@pytest.mark.parametrize("target", [None, "M1"])
@pytest.mark.parametrize("name", BRIDGE_OPS)
def test_bridge_ops_stay_inside_their_intervals(name, target):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for _ in range(3):
        outputs, inputs = _bridge_case(name, rng)
        ranges = {t: draw_range(rng) for t in inputs}
        if name == "dynamic_slice":
            ranges[inputs[1]] = (0.0, 3.0)  # begins: small whole numbers in range
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_sound(outputs, ranges, rng, target)
