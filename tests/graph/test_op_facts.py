"""The op records' typed facts, each checked against what the kernels do.

Each fact another layer reads (sign, narrow-sum terms, contraction role, weight operand,
family floor, route, work scalar, crop-DMA begin) is a field of the op's record
(:mod:`aneforge.graph.facts`); tests/graph/test_registry.py checks that every record
declares each one. These tests walk the registry with a sample of every op: a kernel
that does something its record does not say fails here.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.gemm import gemm_reference
from aneforge.graph import fp16
from aneforge.graph.arith import Arith
from aneforge.graph.facts import (
    EVERY_FAMILY,
    Flag,
    Role,
)
from aneforge.graph.registry import all_ops, get_op
from aneforge.graph.tensor import make, random_feed
from aneforge.optimizer.precision_tune import wide_gemm

RNG = np.random.default_rng(7)
OPS = {n: op for n, op in all_ops().items()}
NON_SOURCE = sorted(n for n, op in OPS.items() if op.kind != "source")


def _w(shape, scale=0.5):
    return af.weight(RNG.standard_normal(shape) * scale)


def _samples() -> dict[str, list]:
    """Small nodes of every non-source op, with varied shapes and attributes."""
    x = af.input((2, 3, 6, 6), name="x")
    v = af.input((3, 40), name="v")
    c = af.input((1, 8, 5), name="c")
    s: dict[str, list] = {}
    for name, op in OPS.items():
        if Flag.ELEMENTWISE in op.flags and Flag.UNARY in op.flags:
            s[name] = [make(name, v)]
        elif Flag.ELEMENTWISE in op.flags and Flag.BINARY in op.flags:
            s[name] = [make(name, v, _w((40,))), make(name, c, c)]
    s["clip"] = [make("clip", v, lo=0.0), make("clip", v, lo=-0.5, hi=0.5)]
    s["select"] = [make("select", make("greater", v, 0.0), v, _w((3, 40)))]
    s["matmul"] = [make("matmul", v, _w((40, 4))), make("matmul", c, _w((5,)))]
    s["bmm"] = [make("bmm", af.input((3, 2, 4)), af.input((3, 4, 5)))]
    s["linear"] = [make("linear", v, _w((4, 40)), _w((4,))), make("linear", c, _w((2, 5)))]
    s["conv"] = [make("conv", x, _w((4, 3, 3, 3)), stride=2, pad=1), make("conv", c, _w((4, 8, 3)))]
    s["conv_transpose"] = [make("conv_transpose", x, _w((3, 2, 2, 2)), stride=2)]
    for name in ("sum", "mean", "amax", "amin"):
        s[name] = [
            make(name, x, axes=(1, 3), keepdims=True),
            make(name, v, axes=None),
            make(name, c, axes=(-1,)),
        ]
    s["softmax"] = [make("softmax", x, axis=1), make("softmax", v)]
    s["cumsum"] = [make("cumsum", v)]
    s["layer_norm"] = [make("layer_norm", x, axis=-2), make("layer_norm", v)]
    s["rms_norm"] = [make("rms_norm", x, axis=1), make("rms_norm", v, _w((40,)), has_weight=True)]
    s["group_norm"] = [make("group_norm", af.input((2, 4, 3, 3)), groups=2)]
    var = af.weight(RNG.uniform(0.5, 1.5, 3))
    s["batch_norm"] = [make("batch_norm", x, _w((3,)), var)]
    s["l2_norm"] = [make("l2_norm", x, axis=1), make("l2_norm", v)]
    s["max_pool"] = [make("max_pool", x, kernel=(3,), stride=(2,), pad=(1,))]
    s["avg_pool"] = [
        make("avg_pool", x, kernel=(2, 3)),
        make("avg_pool", x, kernel=(3,), pad=(1,)),
        make("avg_pool", c, kernel=(2,)),
    ]
    s["upsample"] = [make("upsample", x, scale=(2,)), make("upsample", c, scale=(2,))]
    s["reshape"] = [make("reshape", x, shape=(6, 36))]
    s["transpose"] = [make("transpose", x, perm=(0, 2, 3, 1))]
    s["concat"] = [make("concat", v, _w((2, 40)), axis=0)]
    s["slice"] = [
        make("slice", x, begins=(0, 1, 0, 1), ends=(2, 3, 6, 5), steps=(1, 1, 2, 3)),
        make("slice", v, begins=(0, 0), ends=(3, 7)),
    ]
    s["squeeze"] = [make("squeeze", af.input((1, 3, 1)))]
    s["expand_dims"] = [make("expand_dims", v, axes=(0,))]
    s["pixel_shuffle"] = [make("pixel_shuffle", af.input((1, 8, 3, 3)), factor=2)]
    s["pixel_unshuffle"] = [make("pixel_unshuffle", x, factor=2)]
    s["cast"] = [make("cast", v)]
    s["gather"] = [make("gather", x, indices=(2, 0, 2), axis=1)]
    ids = af.input((2, 3), dtype="uint16", range=(0, 6))
    rows = af.input((4,), dtype="uint8", range=(0, v.shape[0] - 1))
    s["embedding"] = [make("embedding", _w((7, 4)), ids), make("embedding", v, rows)]
    # fp16 ids computed on the engine are whole numbers: constant ones here (a random
    # fp16 feed would be fractions, which the op refuses when it runs)
    whole = af.weight(np.array([[0.0, 3.0, 6.0], [2.0, 2.0, 5.0]]))
    s["embedding_fp16_ids"] = [
        make("embedding_fp16_ids", _w((7, 4)), whole),
        make("embedding_fp16_ids", v, af.weight(np.array([2.0, 0.0, 1.0, 2.0]))),
    ]
    s["int_to_fp16"] = [
        make("int_to_fp16", af.input((2, 9), dtype="uint8")),
        make("int_to_fp16", af.input((5,), dtype="int16", range=(-3000, 3000))),
    ]
    q, k, vv = af.input((2, 5, 4)), af.input((2, 7, 4)), af.input((2, 7, 3))
    s["sdpa"] = [make("sdpa", q, k, vv), make("sdpa", q, k, vv, _w((5, 7)), has_mask=True)]
    s["argmax"] = [make("argmax", x, axis=1)]
    s["topk"] = [make("topk", v, k=3), make("topk", v, k=2, output="indices")]
    s["sort"] = [make("sort", v, descending=True)]
    s["minmax_norm"] = [make("minmax_norm", x), make("minmax_norm", v, axes=(0,))]
    s["flatten"] = [make("flatten", x, axis=2)]
    s["lrn"] = [make("lrn", x, size=3), make("lrn", af.input((1, 9, 4)), size=4)]
    s["space_to_channel"] = [make("space_to_channel", x, factor=2)]
    s["channel_to_space"] = [make("channel_to_space", af.input((1, 8, 2, 3)), factor=2)]
    s["space_to_batch"] = [make("space_to_batch", x, factor=3)]
    s["batch_to_space"] = [make("batch_to_space", af.input((8, 2, 2, 3)), factor=2)]
    s["input_view"] = [make("input_view", x, begins=(0, 1, 2, 1), sizes=(2, 2, 3, 4))]
    s["dynamic_slice"] = [make("dynamic_slice", v, af.input((2,)), sizes=(1, 3))]
    s["cross_product"] = [make("cross_product", af.input((4, 3)), _w((3,)))]
    s["cross_correlation"] = [make("cross_correlation", x, af.input((3, 2, 3)))]
    s["cost_volume"] = [make("cost_volume", x, af.input((2, 3, 6, 6)), max_disp=3)]
    s["fps"] = [make("fps", af.input((10, 3)), k=4)]
    s["radius_search"] = [
        make("radius_search", af.input((6, 3)), af.input((2, 3)), radius=1.0, max_neighbors=4)
    ]
    s["scaled_elementwise"] = [make("scaled_elementwise", v, _w((40,)), op="mul", scale=0.5)]
    return s


SAMPLES = _samples()


def _feed(node, magnitude=None):
    """fp16 values of ``node``'s sources: weights as they are, inputs random (signed, or
    ``|.|`` of them when ``magnitude``)."""
    fed: dict[int, np.ndarray] = {}  # one value per source: x * x sees the same x twice
    for src in node.srcs:
        if src.op == "weight":
            fed[id(src)] = np.asarray(src.value, np.float16)
        elif src.dtype != "float16":  # ids, masks: whole numbers of the declared range
            fed[id(src)] = random_feed(src, RNG)
        elif id(src) not in fed:
            value = RNG.standard_normal(src.shape) * 2.0
            fed[id(src)] = (np.abs(value) if magnitude else value).astype(np.float16)
    return [fed[id(src)] for src in node.srcs]


def test_every_non_source_op_has_samples():
    assert sorted(SAMPLES) == NON_SOURCE


# ---- the facts match what the kernels do ---------------------------------------------------


def _axes(axis, ndim) -> tuple[int, ...]:
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(sorted({int(a) % ndim for a in items}))


@pytest.fixture
def narrow_calls(monkeypatch):
    """Every call of :func:`aneforge.graph.fp16.narrow_sum` (through any module that
    imported it), recorded as its term count."""
    real = fp16.narrow_sum
    calls: list[int] = []

    def spy(x, axis, keepdims=False, **policy):
        shape = np.shape(x)
        calls.append(math.prod(shape[a] for a in _axes(axis, len(shape))))
        return real(x, axis, keepdims=keepdims, **policy)

    for name, module in list(sys.modules.items()):
        if name.startswith("aneforge") and getattr(module, "narrow_sum", None) is real:
            monkeypatch.setattr(module, "narrow_sum", spy)
    return calls


@pytest.mark.parametrize("name", NON_SOURCE)
def test_narrow_terms_match_the_narrow_sums_the_kernel_runs(name, narrow_calls):
    op = get_op(name)
    for node in SAMPLES[name]:
        narrow_calls.clear()
        with np.errstate(all="ignore"):
            op.emulate(_feed(node), dict(node.attrs), gemm_reference)
        declared = op.narrow_terms([s.shape for s in node.srcs], node.attrs)
        if declared is None:
            assert narrow_calls == [], (name, node.shape)
        else:
            assert narrow_calls and set(narrow_calls) == {declared}, (name, narrow_calls)
            assert af.analysis.divergence.narrow_terms(node) == declared


@pytest.mark.parametrize("name", NON_SOURCE)
def test_a_sign_claim_holds_on_the_kernel(name):
    """Where the sign rule claims >= 0 (from non-negative sources, or always), the
    kernel's outputs are >= 0 or NaN on such inputs."""
    op = get_op(name)
    for node in SAMPLES[name]:
        for magnitude in (False, True):
            nonneg = [
                bool(np.all(np.asarray(s.value) >= 0)) if s.op == "weight" else magnitude
                for s in node.srcs
            ]
            if not op.sign(node, nonneg):
                continue
            with np.errstate(all="ignore"):
                y = np.asarray(op.emulate(_feed(node, magnitude), dict(node.attrs), gemm_reference))
            assert np.all((y >= 0) | np.isnan(y)), (name, magnitude)


def test_the_weight_operand_is_a_source_and_its_channel_axis_holds_the_outputs():
    for name, op in OPS.items():
        if op.weight_operand is None:
            continue
        index, axis = op.weight_operand
        for node in SAMPLES[name]:
            w = node.srcs[index]
            assert w.op == "weight", name
            if w.ndim < 2:  # x @ vector: no output-channel axis to scale along
                continue
            channels = w.shape[axis]
            out_channels = node.shape[1 if op.role is Role.CONV else -1]
            if name == "conv_transpose":
                out_channels //= node.attrs["groups"]
            assert channels == out_channels, (name, w.shape, node.shape)


def test_the_work_scalar_is_positive_on_every_bridge_sample():
    for name, op in OPS.items():
        if op.kind != "bridge":
            continue
        for node in SAMPLES[name]:
            work = op.work.of_node([s.shape for s in node.srcs], node.shape, node.attrs)
            assert isinstance(work, float) and work > 0, name


def test_only_the_crop_dma_readers_have_a_width_begin():
    readers = sorted(n for n, op in OPS.items() if op.width_begin is not None)
    assert readers == ["input_view", "slice"]
    assert [af.emulator.chips.width_begin(n) for n in SAMPLES["slice"]] == [1, 0]
    assert af.emulator.chips.width_begin(SAMPLES["input_view"][0]) == 1


def test_the_family_floors_and_their_lowerings():
    floors = {n: op.min_family for n, op in OPS.items() if op.min_family != EVERY_FAMILY}
    assert floors == {"sin": 4, "cos": 4, "topk": 3, "sort": 3, "dynamic_slice": 3}
    lowered = sorted(n for n, op in OPS.items() if op.below_floor is not None)
    assert lowered == ["cos", "sin"]
    x = af.input((16,), name="x")
    for name in lowered:
        node = make(name, x)
        y = get_op(name).below_floor.build(node)
        assert y.shape == node.shape and name not in {n.op for n in af.compile(y).nodes}


def test_roles_and_weight_operands_of_the_contractions():
    roles = {n: op.role for n, op in OPS.items() if op.role is not Role.NONE}
    assert roles == {
        "matmul": Role.MATMUL,
        "bmm": Role.MATMUL,
        "linear": Role.MATMUL,
        "conv": Role.CONV,
        "conv_transpose": Role.CONV,
    }
    weights = {n: tuple(op.weight_operand) for n, op in OPS.items() if op.weight_operand}
    want = {"matmul": (1, -1), "linear": (1, 0), "conv": (1, 0), "conv_transpose": (1, 1)}
    assert weights == want


def test_a_scale_invariant_op_ignores_its_inputs_scale():
    """``Flag.SCALE_INVARIANT``: the float64 kernel, eps aside (set to 0), gives the same
    result on its first input scaled by 16."""
    flagged = sorted(n for n, op in OPS.items() if Flag.SCALE_INVARIANT in op.flags)
    assert flagged == ["group_norm", "l2_norm", "layer_norm", "minmax_norm", "rms_norm"]
    for name in flagged + ["batch_norm", "lrn", "softmax"]:  # the last three are not
        op = get_op(name)
        same = []
        for node in SAMPLES[name]:
            x, *rest = (np.asarray(v, np.float64) for v in _feed(node))
            attrs = dict(node.attrs, **({"eps": 0.0} if "eps" in node.attrs else {}))
            base = op.exact([x, *rest], attrs)
            scaled = op.exact([x * 16.0, *rest], attrs)
            same.append(np.allclose(base, scaled, rtol=1e-5, atol=1e-7))
        assert all(same) == (name in flagged), (name, same)


def test_the_wide_results_are_the_float32_values_a_wide_policy_returns():
    """``Flag.WIDE_RESULT``: under a policy that keeps the accumulator wide, the flagged
    ops (and only they, besides contractions and movements) return float32 values: the
    float32 sum, within a float32 rounding of the float64 one."""
    wide = Arith(wide_gemm, wide="float32")
    returns_float32 = []
    for name in NON_SOURCE:
        op = get_op(name)
        for node in SAMPLES[name]:
            feed = _feed(node)
            with np.errstate(all="ignore"):
                value = np.asarray(op.emulate(feed, dict(node.attrs), wide))
                exact_feed = [np.float64(f) if f.dtype == np.float16 else f for f in feed]
                true = np.asarray(op.exact(exact_feed, dict(node.attrs)))
            if value.dtype != np.float32 or {Flag.CONTRACTION, Flag.MOVEMENT} & op.flags:
                continue
            returns_float32.append(name)
            if Flag.WIDE_RESULT in op.flags:
                np.testing.assert_allclose(value, true, rtol=1e-5, atol=1e-5, err_msg=name)
    flagged = sorted(n for n, op in OPS.items() if Flag.WIDE_RESULT in op.flags)
    assert sorted(set(returns_float32)) == flagged == ["cumsum", "sum"]


def test_every_overflow_fix_names_its_op_and_formats():
    fixes = {n: op.overflow_fix for n, op in OPS.items() if op.overflow_fix is not None}
    assert sorted(fixes) == ["avg_pool", "cumsum", "exp", "mean", "sdpa", "softmax", "sum"]
    for name, fix in fixes.items():
        text = fix.format(op=name, by=" by 0.5 or less")
        assert "{" not in text and len(text) > 20, name


def test_a_tiled_reduction_describes_its_layout():
    tiled = {n: op.tiled for n, op in OPS.items() if op.tiled is not None}
    assert sorted(tiled) == ["group_norm"]
    node = make("group_norm", af.input((1, 8, 300, 300)), groups=2)
    layout = tiled["group_norm"].axes([s.shape for s in node.srcs], node.attrs)
    assert layout == (("C/groups", 4), ("H*W", 90000)) and tiled["group_norm"].limit == 65536
