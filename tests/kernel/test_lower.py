"""Lowering fused regions: the reference interpreter of the lowered code gives the
emulator's bits on every op's samples and on random regions, materialized, inlined and
mixed; opaque ops say why; bad placements are refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.interpreter import execute_fp16
from aneforge.errors import OptionError
from aneforge.graph.registry import all_ops, get_op
from aneforge.graph.tensor import random_feed
from aneforge.kernel.analyze import analyze
from aneforge.kernel.interpret import execute
from aneforge.kernel.lower import Placement, lower, reads_integers, region_nodes
from aneforge.kernel.printer import to_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graph"))
from random_regions import random_region  # noqa: E402
from test_op_facts import SAMPLES  # noqa: E402  (every op's sample nodes)


def _values(prog, feeds):
    """Every node's emulator value (the generic numerics, the reference matmul)."""
    vals = {}
    execute_fp16(prog, feeds, fast=False, observe=lambda i, n, v: vals.__setitem__(id(n), v))
    return vals


def _bits(a) -> np.ndarray:
    return np.asarray(a, np.float16).view(np.uint16)


def _check_region(prog, region, placement, vals):
    """The lowered code's outputs are the emulator's bits, and its exact counts are
    what the interpreter executes and touches."""
    low = lower(prog, region, placement)
    run = execute(low.code, low.feeds(vals), trace=True)
    summary = analyze(low.code)
    if not (summary.flops_approx or summary.opaque):
        assert run.flops == summary.flops, placement
    for name, fp in summary.footprints.items():
        item = low.code.buffer(name).itemsize
        touched = (len(run.reads[name]) * item, len(run.writes[name]) * item)
        if not fp.approx:
            assert touched == (fp.read_bytes, fp.write_bytes), (name, placement)
    for n in low.nodes.outputs:
        got = run.outputs[low.names[id(n)]].reshape(n.shape)
        want = np.asarray(vals[id(n)], np.float16)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), (n.op, placement)
        assert np.array_equal(_bits(got)[~nan], _bits(want)[~nan]), (n.op, placement)
    return low


def _feeds(prog, rng):
    return [
        rng.standard_normal(t.shape).astype(np.float16)
        if t.dtype == "float16"
        else random_feed(t, rng)
        for t in prog.inputs
    ]


FUSED = sorted(n for n in SAMPLES if get_op(n).kind == "fused")


@pytest.mark.parametrize("name", FUSED)
def test_every_fused_op_lowers_to_the_emulators_bits(name):
    rng = np.random.default_rng(5)
    for node in SAMPLES[name]:
        prog = af.compile(node, opt=0)
        vals = _values(prog, _feeds(prog, rng))
        for region in prog.fused_regions:
            if reads_integers(region):  # fp16 buffers only: refused, and run op by op
                with pytest.raises(OptionError, match="reads an integer input"):
                    lower(prog, region)
                continue
            middle = region_nodes(prog, region).intermediates
            for p in ("materialize", "inline"):
                low = _check_region(prog, region, [p] * len(middle), vals)
                if get_op(name).nest is None:
                    assert (name, "no loop-nest rule") in low.opaque


@pytest.mark.parametrize("seed", range(80))
def test_random_regions_give_the_emulators_bits_under_every_placement(seed):
    rng = np.random.default_rng(seed)
    prog = af.compile(random_region(seed), opt=0)
    vals = _values(prog, _feeds(prog, rng))
    for region in prog.fused_regions:
        middle = region_nodes(prog, region).intermediates
        placements = [["materialize"] * len(middle), ["inline"] * len(middle)]
        placements += [list(rng.choice(["materialize", "inline"], len(middle))) for _ in range(2)]
        for p in placements:
            _check_region(prog, region, p, vals)


def test_inlining_moves_traffic_into_recompute(golden):
    x = af.input((4, 8), name="x")
    prog = af.compile((x.exp() * 2.0).sum(axis=-1), opt=0)
    (region,) = prog.fused_regions
    texts = [to_text(lower(prog, region, [p] * 2).code) for p in ("materialize", "inline")]
    golden("kernel/lower_exp_scale_sum.txt", "\n\n".join(texts))


def test_opaque_ops_force_their_sources_to_materialize():
    x = af.input((2, 8), name="x")
    prog = af.compile(af.cumsum(x.exp()) + 1.0, opt=0)
    (region,) = prog.fused_regions
    low = lower(prog, region, ["inline", "inline"])
    assert low.placement == (Placement.MATERIALIZE, Placement.MATERIALIZE)
    assert low.opaque == (("cumsum", "no loop-nest rule"),)


def test_bad_placements_are_refused():
    x = af.input((2, 3), name="x")
    prog = af.compile(x.exp() + 1.0, opt=0)
    (region,) = prog.fused_regions
    with pytest.raises(OptionError, match="one entry per intermediate"):
        lower(prog, region, ["inline", "inline", "inline"])
    with pytest.raises(OptionError, match="'sideways' is not one of"):
        lower(prog, region, ["sideways"])
    other = af.compile(x.relu(), opt=0)
    with pytest.raises(OptionError, match="not a fused region of this program"):
        lower(prog, other.fused_regions[0])


@pytest.mark.parametrize(
    "shape, weight, attrs",
    [
        ((1, 3, 7, 6), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
        ((2, 2, 6, 6), (3, 2, 2, 3), {"dilation": (2, 1), "padding": (1, 0, 2, 1)}),
        ((1, 4, 5, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}),  # depthwise
        ((1, 4, 9), (2, 4, 3), {"stride": 2}),  # 1-D, no padding
        ((1, 4, 5, 5), (4, 2, 3, 3), {"groups": 2}),  # two channels per group: opaque
    ],
)
def test_convolutions_lower_with_their_padding_and_groups(shape, weight, attrs):
    rng = np.random.default_rng(11)
    x = af.input(shape, name="x")
    w = rng.standard_normal(weight) * 0.5
    y = af.conv(x.tanh(), w, rng.standard_normal(weight[0]), **attrs)
    prog = af.compile(y, opt=0)
    vals = _values(prog, _feeds(prog, rng))
    (region,) = prog.fused_regions
    for p in ("materialize", "inline"):
        low = _check_region(prog, region, [p], vals)
        grouped = attrs.get("groups", 1) > 1 and weight[0] != attrs["groups"]
        assert bool(low.opaque) == grouped


@pytest.mark.parametrize(
    "pool, attrs, opaque",
    [
        (af.max_pool, {"kernel_size": 3, "stride": 2, "padding": 1}, False),
        (af.max_pool, {"kernel_size": (2, 3)}, False),
        (af.avg_pool, {"kernel_size": 2}, False),
        (af.avg_pool, {"kernel_size": 3, "padding": 1, "count_include_pad": True}, False),
        (af.avg_pool, {"kernel_size": 3, "padding": 1}, False),  # the count varies per cell
        (af.avg_pool, {"kernel_size": (3, 2), "stride": 2, "padding": (1, 1)}, False),
    ],
)
def test_pools_lower_with_their_windows(pool, attrs, opaque):
    rng = np.random.default_rng(13)
    x = af.input((2, 3, 7, 6), name="x")
    prog = af.compile(pool(x.exp(), **attrs), opt=0)
    vals = _values(prog, _feeds(prog, rng))
    (region,) = prog.fused_regions
    for p in ("materialize", "inline"):
        assert bool(_check_region(prog, region, [p], vals).opaque) == opaque


def test_the_fused_ops_without_a_loop_nest_are_these():
    """Each of these lowers as opaque code and says so; giving one a LoopNest moves it
    out of this list (and into the bit-identity tests above)."""
    opaque = sorted(n for n, op in all_ops().items() if op.kind == "fused" and op.nest is None)
    assert opaque == [
        "concat",
        "conv_transpose",
        "cumsum",
        "embedding",  # reads integer ids: its regions run op by op
        "embedding_fp16_ids",  # a gather at run-time fp16 ids, checked as it runs
        "gather",
        "int_to_fp16",
        "pixel_shuffle",
        "pixel_unshuffle",
        "upsample",
    ]
