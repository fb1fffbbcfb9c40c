"""Per-chip numerics (emulator/chips.py, docs/numerics.md "Per-chip numerics").

Each behaviour is checked against an independent statement of the rule (literal Python
loops or hand-picked fp16 values), on the chips that have it and on those that do not;
the generic model (target=None) must stay exactly what it was; and the fast path must
equal the reference interpreter bit for bit on every family.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.chips import (
    CROP_DMA_LIMIT,
    MATMUL_LIMIT,
    ChipNumerics,
    chip_numerics,
    is_width_offset,
)
from aneforge.emulator.gemm import gemm_reference
from aneforge.emulator.interpreter import execute_fp16
from aneforge.errors import PreflightError
from aneforge.graph.arith import Arith
from aneforge.graph.fp16 import narrow_sum
from aneforge.graph.ops.bridge import input_view, sdpa
from conftest import same_bits

# One architecture per family with a MIL path: A13 (M1), A14 (M2), A15, A16 (M5) tiers.
FAMILY_ARCH = {2: "h13", 3: "h14", 4: "h15", 5: "h17s"}
ALL = list(FAMILY_ARCH.values())
SATURATING = ["h13", "h14"]
CLEAN = ["h15", "h17s"]


def run(out, inputs, target=None, fast=True):
    prog = af.compile(out, opt=0)
    feeds = [np.asarray(a, dtype=np.float16) for a in inputs]
    return execute_fp16(prog, feeds, fast=fast, target=target)


# ---- the table -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, family, route, crop",
    [
        ("M1", 2, 192, CROP_DMA_LIMIT),
        ("h13", 2, 192, CROP_DMA_LIMIT),
        ("h14g", 3, 192, CROP_DMA_LIMIT),
        ("h15", 4, 384, None),
        ("M5", 5, 384, None),
        ("h18", 5, 384, None),
    ],
)
def test_each_family_has_the_spec_route_threshold_and_crop_dma(name, family, route, crop):
    chip = chip_numerics(name)
    assert (chip.family, chip.route, chip.crop_dma_limit) == (family, route, crop)
    assert chip.matmul_limit == MATMUL_LIMIT == 32752.0


def test_crop_dma_limit_is_the_fp16_max_over_the_q4_scale():
    assert CROP_DMA_LIMIT == 65504.0 / 16 == 4094.0


def test_family_one_has_no_numerics_because_it_has_no_mil_path():
    with pytest.raises(PreflightError, match="no MIL path"):
        chip_numerics("h11")
    with pytest.raises(PreflightError, match="no MIL path"):
        af.EmulatorDevice(target="h12")


def test_none_and_generic_are_the_generic_model_and_unknown_names_are_refused():
    assert chip_numerics(None) is None
    assert chip_numerics("generic") is None
    chip = chip_numerics("h13")
    assert chip_numerics(chip) is chip
    with pytest.raises(af.OptionError):
        chip_numerics("M99 Ultra")


# ---- the generic model is unchanged -----------------------------------------------------


def test_generic_model_keeps_the_sequential_sum_no_crop_dma_and_no_matmul_limit():
    x = af.input((4096,))
    w = af.input((1, 8))
    outs = [x.sum(), af.slice(w, (0, 1), (1, 8)), w @ np.ones((8, 1))]
    ones = np.ones(4096)
    big = np.full((1, 8), 5000.0)
    total, sliced, prod = run(outs, [ones, big])
    assert float(total) == 2048.0  # the narrow accumulator stalls (docs section 4)
    assert np.all(sliced == 5000.0)
    assert float(prod[0, 0]) == 40000.0


# ---- 1. the crop-DMA ----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ALL)
def test_width_offset_slice_saturates_beyond_4094_only_on_a13_a14_tiers(arch):
    x = af.input((2, 6))
    vals = np.array([[4094, -4094, 4096, -4096, 65504, np.nan], [1, -1, 5000, -60000, 0, 3]])
    (y,) = run(x[:, 1:], [vals], target=arch)
    want = vals[:, 1:].astype(np.float16)
    if arch in SATURATING:
        big = np.abs(want) > 4094
        want = np.where(big, np.copysign(np.inf, want), want).astype(np.float16)
        assert np.isinf(y).sum() == 5  # 4096, -4096, 65504, 5000, -60000
    assert same_bits(y, want)


@pytest.mark.parametrize("arch", SATURATING)
def test_only_a_last_axis_begin_off_zero_takes_the_crop_dma(arch):
    x = af.input((3, 4))
    vals = np.full((3, 4), 5000.0)
    rows, cols, neg, whole, view = run(
        [
            af.slice(x, (1, 0), (3, 4)),  # offset on axis 0 only: clean
            af.slice(x, (0, 2), (3, 4)),  # width offset: clamps
            af.slice(x, (0, -3), (3, 4)),  # -3 is column 1: clamps
            af.slice(x, (0, -4), (3, 4)),  # -4 is column 0: clean
            input_view(x, (0, 1), (3, 2)),  # the bridge window, width offset 1: clamps
        ],
        [vals],
        target=arch,
    )
    assert np.all(rows == 5000) and np.all(whole == 5000)
    assert np.all(np.isposinf(cols)) and np.all(np.isposinf(neg)) and np.all(np.isposinf(view))


def test_width_offset_is_read_from_the_normalized_begin():
    x = af.input((3, 8))
    assert is_width_offset(x[:, 1:]) and is_width_offset(x[:, -2:])
    assert not is_width_offset(x[1:, :]) and not is_width_offset(x[:, :4])
    assert not is_width_offset(x * 2.0)


# ---- 2. the reduction route -----------------------------------------------------------------


def literal_route_sum(x: np.ndarray, route: int) -> np.float16:
    """The split route written out with Python floats rounded through np.float16."""
    terms = [np.float16(v) for v in np.ravel(x)]
    if len(terms) <= route:
        chunks = [terms]
    else:
        chunks = [terms[i : i + route] for i in range(0, len(terms), route)]
    partials = []
    for chunk in chunks:
        acc = np.float16(0.0)
        for t in chunk:
            acc = np.float16(float(acc) + float(t))
        partials.append(acc)
    if len(partials) == 1:
        return partials[0]
    acc = np.float16(0.0)
    for p in partials:
        acc = np.float16(float(acc) + float(p))
    return acc


@pytest.mark.parametrize("arch, route", [("h13", 192), ("h14", 192), ("h15", 384), ("h17s", 384)])
@pytest.mark.parametrize("n", [150, 192, 193, 384, 385, 1000])
def test_sum_follows_the_route_written_out_literally(rng, arch, route, n):
    x = af.input((n,))
    vals = (rng.standard_normal(n) * 4).astype(np.float16)
    (y,) = run(x.sum(), [vals], target=arch)
    assert same_bits(y, literal_route_sum(vals, route))


def test_sum_of_4096_ones_is_exact_on_every_chip_route_but_stalls_in_the_generic_model():
    x = af.input((4096,))
    for arch in ALL:
        (y,) = run(x.sum(), [np.ones(4096)], target=arch)
        assert float(y) == 4096.0  # 192- or 384-term chunks stay exact
    (y,) = run(x.sum(), [np.ones(4096)])
    assert float(y) == 2048.0


@pytest.mark.parametrize("arch", ALL)
def test_reductions_at_or_below_the_threshold_equal_the_generic_model(rng, arch):
    x = af.input((3, 192))
    vals = rng.standard_normal((3, 192)) * 3
    outs = [x.sum(-1), x.mean(-1), af.softmax(x), af.layer_norm(x), af.rms_norm(x)]
    for a, b in zip(run(outs, [vals], target=arch), run(outs, [vals])):
        assert same_bits(a, b)


@pytest.mark.parametrize("arch, route", [("h13", 192), ("h17s", 384)])
def test_softmax_normalizes_by_the_route_sum(rng, arch, route):
    n = 700
    x = af.input((n,))
    vals = (rng.standard_normal(n) * 2).astype(np.float16)
    (y,) = run(af.softmax(x), [vals], target=arch)
    with np.errstate(all="ignore"):
        d = (vals.astype(np.float64) - vals.max()).astype(np.float16)
        e = np.exp(d.astype(np.float64)).astype(np.float16)
    s = literal_route_sum(e, route)
    want = (e.astype(np.float64) / float(s)).astype(np.float16)
    assert same_bits(y, want)


def test_the_route_reaches_the_norms_the_pools_and_sdpa(rng):
    # every op whose kernel sums narrowly over > 384 terms differs between 192 and 384
    x4 = af.input((1, 4, 24, 24))
    x2 = af.input((2, 512))
    q = af.input((1, 2, 8))
    k = af.input((1, 400, 8))
    v = af.input((1, 400, 8))
    outs = [
        af.layer_norm(x2),
        af.rms_norm(x2),
        af.l2_norm(x2),
        af.group_norm(x4, 1),
        af.avg_pool(x4, 20),
        sdpa(q, k, v),
        x2.mean(-1),
    ]
    feeds = [rng.standard_normal(s) for s in [(1, 4, 24, 24), (2, 512), (1, 2, 8)]]
    feeds += [rng.standard_normal((1, 400, 8)) * 3, rng.standard_normal((1, 400, 8))]
    a = run(outs, feeds, target="h13")
    b = run(outs, feeds, target="h15")
    assert [same_bits(u, w) for u, w in zip(a, b)] == [False] * len(outs)


def test_the_route_is_an_explicit_argument_that_does_not_leak_out_of_a_run():
    x = af.input((4096,))
    ones = np.ones(4096, np.float16)
    assert float(run(x.sum(), [np.ones(4096)], target="h13")[0]) == 4096.0
    assert float(narrow_sum(ones, axis=0)) == 2048.0
    assert float(narrow_sum(ones, axis=0, route=192)) == 4096.0
    assert float(Arith(route=192).narrow_sum(ones, 0)) == 4096.0
    assert float(chip_numerics("h13").arith(gemm_reference).narrow_sum(ones, 0)) == 4096.0
    assert float(narrow_sum(ones, axis=0)) == 2048.0
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError):
            Arith(route=bad)


# ---- 3. matmul output saturation -------------------------------------------------------------


@pytest.mark.parametrize("arch", ALL)
def test_contraction_outputs_beyond_32752_become_inf_on_every_family(arch):
    x = af.input((1, 4))
    vals = np.array([[8188.0, 8188.0, 8188.0, 8188.0]])  # exact sum 32752
    w = np.array([[1.0, -1.0, 1.0], [1.0, -1.0, 1.0], [1.0, -1.0, 1.0], [1.0, -1.0, 1.002]])
    (y,) = run(x @ w, [vals], target=arch)
    # 32752 stays; -32752 stays; 8188 * 1.002 rounds up past 32752 -> +inf
    assert float(y[0, 0]) == 32752.0 and float(y[0, 1]) == -32752.0
    assert np.isposinf(y[0, 2])
    (g,) = run(x @ w, [vals])
    assert np.isfinite(g).all()  # the generic model has no such limit


@pytest.mark.parametrize("arch", ["h13", "h17s"])
def test_saturation_hits_every_contraction_before_the_bias(arch):
    x = af.input((1, 2, 1, 4))
    a = af.input((1, 2, 4))
    ones = np.ones((1, 2, 1, 4)) * 20000
    conv = af.conv(x, np.ones((1, 2, 1, 1)), bias=np.array([-30000.0]))
    lin = af.linear(af.reshape(x, (2, 4)), np.ones((1, 4)), bias=np.array([-60000.0]))
    mm = af.bmm(a, af.transpose(a, (0, 2, 1)))
    convt = af.conv_transpose(x, np.ones((2, 1, 1, 1)))
    outs = run([conv, lin, mm, convt], [ones, np.full((1, 2, 4), 100.0)], target=arch)
    # 40000 -> inf then + bias stays inf; 80000 overflows anyway; 40000 in bmm and convt
    assert all(np.isposinf(o).all() for o in outs)
    gen = run([conv, lin, mm, convt], [ones, np.full((1, 2, 4), 100.0)])
    assert float(gen[0].ravel()[0]) == 10000.0 and float(gen[2].ravel()[0]) == 40000.0


def test_the_matmul_limit_rounds_first_then_clamps():
    x = af.input((1, 2))
    for total, expect in [(32756.0, 32752.0), (32760.0, np.inf), (32764.0, np.inf)]:
        vals = np.array([[16384.0, total - 16384.0]])
        (y,) = run(x @ np.ones((2, 1)), [vals], target="h15")
        # fp16(32756) = 32752 (stays); fp16(32760) ties to even 32768 -> inf
        assert float(y[0, 0]) == expect


# ---- the fast path equals the reference interpreter on every family ------------------------


def mixed_graph():
    x = af.input((2, 3, 10, 40), name="x")
    s = af.input((4, 500), name="s")
    c = af.conv(x, np.full((5, 3, 3, 3), 0.7), padding=1)
    flat = af.reshape(c, (2, 5 * 10 * 40))
    lin = af.linear(flat[:, 7:507], np.random.default_rng(5).standard_normal((6, 500)))
    return [
        af.softmax(s * 3.0),
        af.layer_norm(s[:, 3:]),
        lin,
        s.sum(-1),
        af.avg_pool(c, 2),
        s @ np.full((500, 3), 90.0),
        input_view(x, (0, 0, 0, 9), (2, 3, 10, 20)),
    ]


@pytest.mark.parametrize("arch", [None, *ALL])
def test_fast_path_equals_reference_interpreter_for_every_target(rng, arch):
    prog = af.compile(mixed_graph(), opt=0)
    feeds = [
        (rng.standard_normal((2, 3, 10, 40)) * 3000).astype(np.float16),
        (rng.standard_normal((4, 500)) * 2000).astype(np.float16),
    ]
    fast = execute_fp16(prog, feeds, fast=True, target=arch)
    ref = execute_fp16(prog, feeds, fast=False, target=arch)
    assert all(same_bits(a, b) for a, b in zip(fast, ref))
    if arch in SATURATING:
        assert np.isinf(fast[-1]).any()  # the data does reach the chip behaviours


# ---- devices and programs ------------------------------------------------------------------


def test_a_program_runs_with_its_compile_target_unless_the_device_overrides():
    x = af.input((1, 8))
    big = np.full((1, 8), 5000.0)
    with pytest.warns(af.errors.CrossChipFP16Warning):
        targeted = af.compile(x[:, 1:] * 1.0, target="M1")
    plain = af.compile(x[:, 1:] * 1.0)
    assert targeted.target.arch == "h13" and plain.target is None
    assert np.isinf(targeted(big)).all()
    assert np.isfinite(plain(big)).all()
    assert np.isfinite(targeted(big, device=af.EmulatorDevice(target="generic"))).all()
    assert np.isfinite(targeted(big, device=af.EmulatorDevice(target="M4"))).all()
    assert np.isinf(plain(big, device=af.EmulatorDevice(target="h14"))).all()
    assert np.isinf(targeted(big, device="reference")).all()
    assert af.get_device("emulator").target is None


def test_simulated_ane_takes_a_target_for_numerics_and_timing():
    x = af.input((1, 8))
    prog = af.compile(x[:, 1:] * 1.0)
    dev = af.SimulatedANE(target="M1", noise=0.0)
    assert np.isinf(dev.run(prog, [np.full((1, 8), 5000.0, np.float16)])[0]).all()
    assert dev.measure(prog, []) > 0
    assert dev.measure(prog, []) == af.estimate(prog, target="h13") * 1e-6


def test_chip_numerics_record_is_frozen():
    chip = chip_numerics("h13")
    assert isinstance(chip, ChipNumerics)
    with pytest.raises(AttributeError):
        chip.route = 5


# ---- sdpa's native reliability envelope (docs/numerics.md, section 9.4) --------------------


@pytest.mark.parametrize(
    "s_len, t_len, native",
    [
        (1, 2048, True),
        (2048, 512, True),
        (512, 2048, True),
        (512, 512, True),
        (513, 513, False),  # both axes past 512
        (600, 2048, False),
        (1, 2049, False),  # past 2048 positions
        (4096, 1, False),
    ],
)
def test_sdpa_is_native_only_inside_its_reliability_envelope(s_len, t_len, native):
    q, k, v = af.input((1, s_len, 4)), af.input((1, t_len, 4)), af.input((1, t_len, 2))
    out = sdpa(q, k, v)
    assert out.shape == (1, s_len, 2)
    assert (out.op == "sdpa") == native
    if not native:
        ops = {n.op for n in af.compile(out, opt=0).compute_nodes}
        assert ops == {"bmm", "transpose", "mul", "softmax"}


@pytest.mark.parametrize("with_mask", [False, True])
def test_decomposed_sdpa_gives_the_native_bits(rng, with_mask):
    from aneforge.graph.tensor import make

    shapes = [(1, 2, 600, 8), (1, 2, 520, 8), (1, 2, 520, 3)]
    q, k, v = (af.input(s) for s in shapes)
    mask = np.where(rng.random((600, 520)) < 0.2, -30000.0, 0.0) if with_mask else None
    out = sdpa(q, k, v, scale=0.3, mask=mask)
    assert out.op == "bmm"
    srcs = (q, k, v) if mask is None else (q, k, v, mask)
    native = make("sdpa", *srcs, scale=0.3, has_mask=with_mask)
    feeds = [rng.standard_normal(s) * 2 for s in shapes]
    for arch in (None, "h13", "h17s"):
        a, b = run([out, native], feeds, target=arch)
        assert same_bits(a, b)


def test_sdpa_outside_the_envelope_still_reports_sdpa_shape_errors():
    with pytest.raises(af.ShapeError, match="sdpa"):
        sdpa(af.input((1, 600, 8)), af.input((1, 600, 4)), af.input((1, 600, 8)))
