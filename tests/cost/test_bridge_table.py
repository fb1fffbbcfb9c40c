"""The measured bridge-op table: key parsing, node work and nearest-anchor interpolation."""

from __future__ import annotations

import dataclasses

import pytest

import aneforge as af
from aneforge.cost import bridge, estimate
from aneforge.cost.bridge import bridge_cost_us, node_work, parse_work
from aneforge.cost.calibration import constants
from aneforge.graph.ops import bridge as ops
from aneforge.graph.ops.bridge import BRIDGE_OPS

C = constants()


def _measured(key):
    (row,) = [r for r in C.bridge_ops if r[1] == key]
    return row[2]


# ---- parse_work: the key formats of the table ---------------------------------------------


@pytest.mark.parametrize(
    ("family", "key", "work"),
    [
        ("bridge_sdpa", "sdpa H=8 S=128 D=64", 8 * 128**2 * 64),
        ("bridge_sdpa", "sdpa H=4 S=32 D=64", 4 * 32**2 * 64),
        ("bridge_argmax", "argmax [4,512]", 4 * 512),
        ("bridge_topk", "topk k=5 [8,1024]", 8 * 1024),
        ("bridge_sort", "sort [1,128]", 128),
        ("bridge_minmax_norm", "minmax_norm [16,32,32]", 16 * 32 * 32),
        ("bridge_lrn", "lrn [15,64,64]", 15 * 64 * 64),
        ("bridge_space_to_channel", "space_to_channel [4,16,16] r=2", 4 * 16 * 16),
        ("bridge_batch_to_space", "batch_to_space [4,16,32,32] b=2x2", 4 * 16 * 32 * 32),
        ("bridge_cross_correlation", "cross_correlation [32,32] t=3x3", 32 * 32 * 9),
        ("bridge_fps", "fps N=512 k=128", 512 * 128),
        ("bridge_radius_search", "radius_search N=1024 Nc=256", 1024 * 256),
        ("bridge_input_view", "input_view W=2048 size=1024", 1024),
        ("bridge_dynamic_slice", "dynamic_slice W=4 size=2", 2),
        ("bridge_scaled_elementwise", "scaled_elementwise W=512 op=Add", 512),
        ("bridge_cost_volume", "cost_volume Wa=256 R=2", 256 * 2),
    ],
)
def test_parse_work_of_each_key_format(family, key, work):
    assert parse_work(family, key) == float(work)


def test_a_key_without_a_size_has_no_work():
    assert parse_work("bridge_cross_product", "cross_product") is None


def test_every_bundled_key_parses_to_a_positive_work_or_none():
    assert len(C.bridge_ops) == 69
    families = set()
    for family, key, min_us in C.bridge_ops:
        families.add(family.removeprefix("bridge_"))
        w = parse_work(family, key)
        assert w is None or w > 0, key
        assert min_us > 0
    assert families == set(BRIDGE_OPS)  # every bridge op has measured data


def test_work_is_monotone_in_the_measured_sdpa_sizes():
    keys = [k for f, k, _ in C.bridge_ops if f == "bridge_sdpa"]
    works = [parse_work("bridge_sdpa", k) for k in keys]
    assert works == sorted(works) and len(set(works)) == len(works)


# ---- node_work is on the same scale as parse_work ---------------------------------------


def test_node_work_matches_the_key_scale():
    q = af.input((8, 128, 64))
    assert node_work(ops.sdpa(q, af.input((8, 128, 64)), af.input((8, 128, 64)))) == 8 * 128**2 * 64
    q4 = af.input((2, 4, 128, 64))
    k4 = af.input((2, 4, 128, 64))
    assert node_work(ops.sdpa(q4, k4, af.input((2, 4, 128, 64)))) == 8 * 128**2 * 64
    assert node_work(ops.argmax(af.input((4, 512)))) == 2048
    assert node_work(ops.fps(af.input((512, 3)), 128)) == 512 * 128
    pts, centers = af.input((1024, 3)), af.input((256, 3))
    assert node_work(ops.radius_search(pts, centers, 0.5, 8)) == 1024 * 256
    left = af.input((1, 8, 16, 256))
    assert node_work(ops.cost_volume(left, af.input((1, 8, 16, 256)), 2)) == 256 * 2
    x = af.input((1, 3, 32, 32))
    assert node_work(ops.cross_correlation(x, af.input((3, 3, 3)))) == 32 * 32 * 9


# ---- interpolation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: ops.sdpa(af.input((8, 128, 64)), af.input((8, 128, 64)), af.input((8, 128, 64))),
         "sdpa H=8 S=128 D=64"),
        (lambda: ops.argmax(af.input((1, 128))), "argmax [1,128]"),
        (lambda: ops.topk(af.input((8, 1024)), 5)[0], "topk k=5 [8,1024]"),
        (lambda: ops.sort(af.input((1, 512))), "sort [1,512]"),
        (lambda: ops.lrn(af.input((1, 15, 32, 32))), "lrn [15,32,32]"),
        (lambda: ops.fps(af.input((2048, 3)), 256), "fps N=2048 k=256"),
        (lambda: ops.radius_search(af.input((512, 3)), af.input((128, 3)), 1.0, 4),
         "radius_search N=512 Nc=128"),
    ],
)  # fmt: skip
def test_a_node_at_a_measured_config_costs_its_measured_min(build, key):
    assert bridge_cost_us(build()) == _measured(key)


def test_doubling_the_work_doubles_the_cost_from_the_same_anchor():
    # the largest measured points: their nearest anchor in log-work stays themselves
    sdpa = ops.sdpa(af.input((32, 128, 128)), af.input((32, 128, 128)), af.input((32, 128, 128)))
    assert bridge_cost_us(sdpa) == pytest.approx(2 * _measured("sdpa H=16 S=128 D=128"))
    topk = ops.topk(af.input((16, 1024)), 5)[1]
    assert bridge_cost_us(topk) == pytest.approx(2 * _measured("topk k=5 [8,1024]"))
    quad = ops.topk(af.input((32, 1024)), 5)[0]
    assert bridge_cost_us(quad) == pytest.approx(4 * _measured("topk k=5 [8,1024]"))


def test_the_nearest_anchor_is_chosen_in_log_work_space():
    # work 3072: log-distance to 2048 is 0.41, to 8192 is 0.98 -> the 2048 anchors
    x = ops.topk(af.input((3, 1024)), 5)[0]
    anchors = [t for f, k, t in C.bridge_ops if f == "bridge_topk" and
               parse_work(f, k) == 2048.0]  # fmt: skip
    assert bridge_cost_us(x) == pytest.approx(anchors[0] * 3072 / 2048)


def test_small_configs_clamp_to_the_floor():
    x = ops.argmax(af.input((1, 8)))
    assert _measured("argmax [1,128]") * 8 / 128 < C.floor_us
    assert bridge_cost_us(x) == C.floor_us
    tiny = ops.sdpa(af.input((1, 2, 4)), af.input((1, 2, 4)), af.input((1, 2, 4)))
    assert bridge_cost_us(tiny) == C.floor_us


def test_an_unsized_measurement_is_flat_in_size():
    small = ops.cross_product(af.input((3,)), af.input((3,)))
    big = ops.cross_product(af.input((512, 3)), af.input((512, 3)))
    assert bridge_cost_us(small) == bridge_cost_us(big) == _measured("cross_product")


def test_cost_volume_and_every_bridge_family_have_data():
    cv = ops.cost_volume(af.input((1, 4, 8, 64)), af.input((1, 4, 8, 64)), 1)
    assert bridge_cost_us(cv) == _measured("cost_volume Wa=64 R=1")
    assert all(op in bridge._table() for op in BRIDGE_OPS)


def test_a_fused_op_has_no_table_cost():
    assert bridge_cost_us(af.input((4,)).relu()) is None


# ---- a family without data falls back to the roofline -------------------------------------


@pytest.fixture
def table_without(monkeypatch):
    """Swap in constants whose table lacks some families; restore the caches after."""

    def install(*dropped):
        rows = tuple(r for r in C.bridge_ops if r[0].removeprefix("bridge_") not in dropped)
        patched = dataclasses.replace(C, bridge_ops=rows)
        monkeypatch.setattr(bridge, "constants", lambda: patched)
        bridge._table.cache_clear()
        return patched

    yield install
    monkeypatch.undo()
    bridge._table.cache_clear()


def test_a_family_without_data_falls_back_to_the_roofline(table_without, rng):
    table_without("lrn")
    x = af.input((1, 8, 32, 32))
    node = ops.lrn(x)
    assert bridge_cost_us(node) is None
    y = node.relu()
    roof = (8192 + 8192) * 2 / C.bw_bytes_per_us  # lrn: no FLOPs, bytes-bound
    relu = C.layer_us + (8192 + 8192) * 2 / C.act_bw_bytes_per_us  # its own pass and I/O
    want = C.cut_us + roof + C.floor_us + relu
    assert estimate(y) == pytest.approx(want, rel=1e-12)
    est = af.estimate_breakdown(y)
    (b,) = [n for n in est.nodes if n.kind == "bridge"]
    assert b.bound != "measured" and b.time_us == pytest.approx(C.cut_us + roof, rel=1e-12)
    # other families keep their data
    assert bridge_cost_us(ops.argmax(af.input((1, 128)))) == _measured("argmax [1,128]")


def test_an_empty_table_prices_every_cut_by_its_roofline(table_without):
    table_without(*BRIDGE_OPS)
    q = af.input((16, 256, 64))
    s = ops.sdpa(q, af.input((16, 256, 64)), af.input((16, 256, 64)))
    assert bridge_cost_us(s) is None
    flops = 16 * (2 * 256 * 256 * 64 * 2)
    nbytes = 4 * 16 * 256 * 64 * 2
    roof = max(nbytes / C.bw_bytes_per_us, flops / C.flops_per_us)
    assert estimate(s) == pytest.approx(C.cut_us + roof, rel=1e-12)


def test_the_table_cache_is_restored_after_patching():
    # runs after the patched tests: the real data is back
    assert bridge_cost_us(ops.lrn(af.input((1, 15, 32, 32)))) == _measured("lrn [15,32,32]")
    assert len(bridge._table()) == len(BRIDGE_OPS)
