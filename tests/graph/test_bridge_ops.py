"""The 19 native bridge ops against independent references written here.

Contracts (src/aneforge/graph/ops/bridge/): every arithmetic step is one fp16 rounding,
constants are rounded to fp16 first, "narrow" sums round every partial sum, sdpa and
cross_correlation go through the wide matmul accumulator. Index outputs are fp16
integers (exact up to 2048). The float64 executor runs the same math unrounded.

References: NumPy float64 formulas and loops, np.argsort / np.argmax / np.sort /
np.cross, scipy.signal.correlate, and hand loops (with a rounding function passed in) for
lrn, cost_volume, fps and radius_search. sdpa and minmax_norm must also be bit-identical
on the emulator to their fused decompositions built from af ops.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal

import aneforge as af
from aneforge.errors import AttributeValueError, ShapeError
from aneforge.graph.fp16 import fp16_values as f16
from aneforge.graph.ops import bridge as br
from aneforge.graph.registry import get_op, no_flops
from aneforge.graph.tensor import make
from conftest import FP16_TINY, FP16_UNIT_ROUNDOFF, FP32_UNIT_ROUNDOFF, fp16_values

U16 = FP16_UNIT_ROUNDOFF
U32 = FP32_UNIT_ROUNDOFF


def same(v):
    """The exact counterpart of :func:`f16` (no rounding)."""
    return np.asarray(v, np.float64)


def build(node):
    """Compile at opt=0: the native bridge nodes as built (no route swaps)."""
    return af.compile(node, opt=0)


def emu(node, *arrays, device=None):
    """Run on the fp16 emulator; float64 array(s) out."""
    out = build(node)(*arrays, device=device)
    if isinstance(out, tuple):
        return tuple(o.astype(np.float64) for o in out)
    return out.astype(np.float64)


def ref(node, *arrays):
    """Run the float64 reference executor."""
    return af.reference(build(node), *arrays)


def ints(rng, shape, hi):
    """Random small integers as float64 (exact in fp16): lots of ties."""
    return rng.integers(0, hi, size=shape).astype(np.float64)


# ---- the registry ------------------------------------------------------------------

INDEX_OPS = ("argmax", "topk", "fps", "radius_search")


def test_nineteen_bridge_ops_are_registered_and_listed():
    assert len(br.BRIDGE_OPS) == 19 and len(set(br.BRIDGE_OPS)) == 19
    assert set(br.BRIDGE_FUNCTIONS) == set(br.BRIDGE_OPS)
    for name in br.BRIDGE_OPS:
        op = get_op(name)
        assert op.kind == "bridge", name
        assert op.doc, name
        doc = " ".join(br.BRIDGE_FUNCTIONS[name].__doc__.split())
        assert "Emulator numerics" in doc and "Example" in doc, name
        # sdpa's docstring names its S = 2048 reliability envelope
        want = name in INDEX_OPS or name in ("dynamic_slice", "sdpa")
        assert ("2048" in doc) == want, name


def test_only_sdpa_and_cross_correlation_count_flops():
    counted = {n for n in br.BRIDGE_OPS if get_op(n).flops is not no_flops}
    assert counted == {"sdpa", "cross_correlation"}
    x = af.input((2, 9))
    prog = build([br.argmax(x), br.sort(x), br.minmax_norm(x)])
    assert prog.flops == 0


# ---- sdpa --------------------------------------------------------------------------


def sdpa_f64(q, k, v, scale, mask=None):
    s = (q @ np.swapaxes(k, -1, -2)) * scale
    if mask is not None:
        s = s + mask
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v


SDPA_CASES = [
    # (batch dims, S, T, D, Dv, mask shape or None, scale)
    ((2,), 5, 12, 16, 8, None, None),
    ((2, 3), 4, 9, 48, 5, None, None),
    ((2,), 6, 10, 16, 16, (6, 10), None),
    ((1, 2), 3, 7, 8, 4, (1, 1, 3, 7), 0.3),
]


def _sdpa_data(rng, batch, s, t, d, dv, mask_shape, spread=1.0):
    q = fp16_values(rng, batch + (s, d), spread)
    k = fp16_values(rng, batch + (t, d), spread)
    v = fp16_values(rng, batch + (t, dv))
    mask = None
    if mask_shape is not None:
        mask = np.where(rng.random(mask_shape) < 0.3, -30.0, fp16_values(rng, mask_shape))
    return q, k, v, mask


@pytest.mark.parametrize("case", SDPA_CASES)
def test_sdpa_matches_the_float64_formula(rng, case):
    batch, s, t, d, dv, mask_shape, scale = case
    q, k, v, mask = _sdpa_data(rng, batch, s, t, d, dv, mask_shape)
    node = br.sdpa(af.input(q.shape), af.input(k.shape), af.input(v.shape), scale, mask)
    assert node.shape == batch + (s, dv)
    sc = d**-0.5 if scale is None else scale
    exact = sdpa_f64(q, k, v, sc, mask)
    np.testing.assert_allclose(ref(node, q, k, v), exact, rtol=1e-12, atol=1e-14)
    # Error bound: score error ds (matmul bound, scale and mask roundings) perturbs the
    # probabilities by a relative 2*max|ds|; the softmax's own steps add
    # u16*(max|d| + T + 3); the output matmul adds its rounding on top.
    scores = q @ np.swapaxes(k, -1, -2)
    absprod = np.abs(q) @ np.abs(np.swapaxes(k, -1, -2))
    full = scores * sc + (0.0 if mask is None else mask)
    ds = ((U16 + d * U32) * absprod * 1.01 + U16 * np.abs(scores)) * sc
    ds = ds + 3 * U16 * np.abs(full) + FP16_TINY
    spread = full.max(-1, keepdims=True) - full.min(-1, keepdims=True)
    rel_p = 2 * ds.max(-1, keepdims=True) + U16 * (spread + t + 3)
    e = np.exp(full - full.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    pv = p @ np.abs(v)
    bound = 1.1 * rel_p * pv + (U16 + t * U32) * 1.01 * pv + U16 * np.abs(exact) + FP16_TINY
    err = np.abs(emu(node, q, k, v) - exact)
    assert np.all(err <= bound), float(np.max(err / bound))


@pytest.mark.parametrize("case", SDPA_CASES)
@pytest.mark.parametrize("device", ["emulator", "reference"])
def test_sdpa_is_bit_identical_to_its_fused_decomposition(rng, case, device):
    batch, s, t, d, dv, mask_shape, scale = case
    q, k, v, mask = _sdpa_data(rng, batch, s, t, d, dv, mask_shape, spread=2.0)
    qi, ki, vi = af.input(q.shape), af.input(k.shape), af.input(v.shape)
    native = br.sdpa(qi, ki, vi, scale=scale, mask=mask)
    perm = tuple(range(len(k.shape) - 2)) + (len(k.shape) - 1, len(k.shape) - 2)
    sc = d**-0.5 if scale is None else scale
    scores = af.bmm(qi, af.transpose(ki, perm)) * sc
    if mask is not None:
        scores = scores + mask
    fused = af.bmm(af.softmax(scores, -1), vi)
    a, b = emu([native, fused], q, k, v, device=device)
    np.testing.assert_array_equal(a, b)
    assert np.any(a != sdpa_f64(q, k, v, sc, mask))  # the data does exercise rounding


def test_sdpa_flops():
    node = br.sdpa(af.input((2, 3, 5, 16)), af.input((2, 3, 7, 16)), af.input((2, 3, 7, 4)))
    assert build(node).flops == 6 * (2 * 5 * 7 * 16 + 2 * 5 * 7 * 4)


@pytest.mark.parametrize(
    "shapes, mask, match",
    [
        (((2, 5, 8), (2, 7, 6), (2, 7, 3)), None, "feature sizes"),
        (((2, 5, 8), (3, 7, 8), (3, 7, 3)), None, "batch dims"),
        (((2, 5, 8), (2, 7, 8), (2, 6, 3)), None, "sequence length"),
        (((5, 8), (7, 8), (7, 3)), None, "rank 3 or 4"),
        (((2, 5, 8), (2, 7, 8), (2, 7, 3)), np.zeros((5, 6)), "mask"),
    ],
)
def test_sdpa_validation(shapes, mask, match):
    q, k, v = (af.input(s) for s in shapes)
    with pytest.raises(ShapeError, match=f"sdpa: .*{match}"):
        br.sdpa(q, k, v, mask=mask)


# ---- argmax / topk / sort ------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_argmax_is_the_first_maximum(rng, axis):
    x = ints(rng, (5, 7, 6), 4)
    want = np.argmax(x, axis=axis)
    node = br.argmax(af.input(x.shape), axis=axis)
    assert node.shape == want.shape
    np.testing.assert_array_equal(emu(node, x), want)
    np.testing.assert_array_equal(ref(node, x), want)
    kept = br.argmax(af.input(x.shape), axis=axis, keepdims=True)
    np.testing.assert_array_equal(emu(kept, x), np.expand_dims(want, axis))


def test_argmax_counts_nan_as_the_maximum():
    x = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 7.0, 7.0, 1.0]])
    node = br.argmax(af.input(x.shape))
    np.testing.assert_array_equal(emu(node, x), [1, 1])
    np.testing.assert_array_equal(ref(node, x), [1, 1])


def topk_ref(x, k, axis, largest):
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [-1, 0])
def test_topk_values_and_indices(rng, largest, axis):
    x = ints(rng, (6, 9), 5) - 2.0
    xi = af.input(x.shape)
    values, indices = br.topk(xi, 3, axis=axis, largest=largest)
    assert (values.op, indices.op) == ("topk", "topk")
    assert (values.attrs["output"], indices.attrs["output"]) == ("values", "indices")
    want_v, want_i = topk_ref(x, 3, axis, largest)
    for run in (emu, ref):
        got_v, got_i = run([values, indices], x)
        np.testing.assert_array_equal(got_v, want_v)
        np.testing.assert_array_equal(got_i, want_i)


def test_topk_ties_take_the_lower_index_first():
    x = np.array([2.0, 5.0, 5.0, 1.0, 5.0, 1.0])
    xi = af.input(x.shape)
    _, top = br.topk(xi, 3)
    _, bottom = br.topk(xi, 2, largest=False)
    np.testing.assert_array_equal(emu(top, x), [1, 2, 4])
    np.testing.assert_array_equal(emu(bottom, x), [3, 5])


def test_topk_ranks_nan_above_numbers():
    x = np.array([3.0, np.nan, 9.0])
    _, idx = br.topk(af.input(x.shape), 2)
    np.testing.assert_array_equal(emu(idx, x), [1, 2])


def test_topk_validation():
    x = af.input((4, 5))
    with pytest.raises(ShapeError, match="topk: k=6 .*k <= 5"):
        br.topk(x, 6)
    with pytest.raises(AttributeValueError, match="topk: k must be >= 1"):
        br.topk(x, 0)
    with pytest.raises(AttributeValueError, match="topk: output must be one of"):
        make("topk", x, k=2, output="both")
    with pytest.raises(AttributeValueError, match="topk: axis 2 is out of range"):
        br.topk(x, 2, axis=2)


@pytest.mark.parametrize("axis", [-1, 0])
def test_sort_ascending_and_descending(rng, axis):
    x = fp16_values(rng, (7, 8))
    xi = af.input(x.shape)
    up, down = br.sort(xi, axis=axis), br.sort(xi, axis=axis, descending=True)
    want = np.sort(x, axis=axis)
    for run in (emu, ref):
        got_up, got_down = run([up, down], x)
        np.testing.assert_array_equal(got_up, want)
        np.testing.assert_array_equal(got_down, np.flip(want, axis=axis))


def test_sort_is_stable_for_equal_values():
    x = np.array([0.0, -0.0, 1.0, -0.0, 0.0])  # +0 and -0 compare equal: order is kept
    xi = af.input(x.shape)
    up, down = emu([br.sort(xi), br.sort(xi, descending=True)], x)
    np.testing.assert_array_equal(np.signbit(up), [False, True, True, False, False])
    np.testing.assert_array_equal(np.signbit(down), [False, False, True, True, False])


# ---- minmax_norm -------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, axes, reduce_axes",
    [((3, 4, 5), None, (1, 2)), ((9,), None, (0,)), ((3, 4, 5), 0, (0,)), ((4, 6), (0, 1), None)],
)
def test_minmax_norm_matches_the_formula(rng, shape, axes, reduce_axes):
    x = fp16_values(rng, shape, 3.0)
    eps = 1e-3
    node = br.minmax_norm(af.input(shape), axes=axes, eps=eps)
    mn = x.min(axis=reduce_axes, keepdims=True)
    mx = x.max(axis=reduce_axes, keepdims=True)
    exact = (x - mn) / (mx - mn + eps)
    np.testing.assert_allclose(ref(node, x), exact, rtol=1e-13, atol=0)
    # d, mx - mn, fp16(eps), the add and the division each round once: <= 5 u16 relative.
    err = np.abs(emu(node, x) - exact)
    assert np.all(err <= 5.5 * U16 * np.abs(exact) + FP16_TINY)


def test_minmax_norm_steps_round_eps_and_the_range_separately(rng):
    # Small ranges next to an eps that is not an fp16 value: both roundings show.
    x = f16(rng.random((64, 6)) * 0.05)
    eps = 0.30004
    got = emu(br.minmax_norm(af.input(x.shape), eps=eps), x)
    mn, mx = x.min(axis=1, keepdims=True), x.max(axis=1, keepdims=True)
    np.testing.assert_array_equal(got, f16(f16(x - mn) / f16(f16(mx - mn) + f16(eps))))
    assert np.any(got != f16(f16(x - mn) / f16(mx - mn + eps)))  # the data can tell


def test_minmax_norm_is_bit_identical_to_its_fused_decomposition(rng):
    x = fp16_values(rng, (4, 6, 5), 7.0)
    xi = af.input(x.shape)
    native = br.minmax_norm(xi, eps=3e-3)
    lo = af.amin(xi, axis=(1, 2), keepdims=True)
    hi = af.amax(xi, axis=(1, 2), keepdims=True)
    fused = (xi - lo) / (hi - lo + 3e-3)
    a, b = emu([native, fused], x)
    np.testing.assert_array_equal(a, b)


def test_minmax_norm_rejects_a_repeated_axis():
    with pytest.raises(AttributeValueError, match="minmax_norm: axes"):
        br.minmax_norm(af.input((2, 3)), axes=(1, -1))


# ---- flatten -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "axis, shape",
    [(0, (24,)), (1, (2, 12)), (2, (6, 4)), (3, (24, 1)), (-1, (6, 4)), (-3, (24,))],
)
def test_flatten_shapes_and_values(axis, shape):
    x = np.arange(24.0).reshape(2, 3, 4)
    node = br.flatten(af.input(x.shape), axis=axis)
    assert node.shape == shape
    np.testing.assert_array_equal(emu(node, x), x.reshape(shape))
    np.testing.assert_array_equal(ref(node, x), x.reshape(shape))


@pytest.mark.parametrize("axis", [4, -4])
def test_flatten_rejects_an_axis_out_of_range(axis):
    with pytest.raises(AttributeValueError, match=f"flatten: axis {axis} .*-3 <= axis <= 3"):
        br.flatten(af.input((2, 3, 4)), axis=axis)


# ---- lrn ---------------------------------------------------------------------------


def lrn_loop(x, size, alpha, beta, bias, rnd):
    """ONNX LRN by explicit channel loops; ``rnd`` is f16 (contract steps) or same."""
    c = x.shape[1]
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    sq = rnd(x * x)
    out = np.empty_like(x)
    for ch in range(c):
        acc = np.zeros_like(x[:, 0])
        for cc in range(max(0, ch - lo), min(c, ch + hi + 1)):
            acc = rnd(acc + sq[:, cc])
        t = rnd(rnd(alpha / size) * acc)
        t = rnd(t + rnd(bias))
        p = rnd(t ** rnd(beta))
        out[:, ch] = rnd(x[:, ch] / p)
    return out


@pytest.mark.parametrize(
    "shape, size, alpha, beta, bias",
    [
        ((2, 7, 3, 4), 5, 0.5, 0.75, 1.1),
        ((1, 6, 5, 2), 4, 2.0, 0.6, 2.0),
        ((3, 5, 4), 1, 0.3, 1.0, 0.5),
    ],
)
def test_lrn_against_a_channel_loop(rng, shape, size, alpha, beta, bias):
    x = fp16_values(rng, shape, 2.0)
    node = br.lrn(af.input(shape), size=size, alpha=alpha, beta=beta, bias=bias)
    exact = lrn_loop(x, size, alpha, beta, bias, same)
    np.testing.assert_allclose(ref(node, x), exact, rtol=1e-13)
    got = emu(node, x)
    np.testing.assert_array_equal(got, lrn_loop(x, size, alpha, beta, bias, f16))
    # size narrow adds, the square, two constants, three steps and the division.
    assert np.all(np.abs(got - exact) <= (size + 8) * U16 * np.abs(exact) + FP16_TINY)


def test_lrn_needs_channels():
    with pytest.raises(ShapeError, match="lrn: .*rank 3 or 4 or 5"):
        br.lrn(af.input((4, 8)))


# ---- space / channel / batch movement ------------------------------------------------


def s2c_loop(x, r):
    n, c, h, w = x.shape
    out = np.empty((n, c * r * r, h // r, w // r))
    for ch in range(c):
        for dy in range(r):
            for dx in range(r):
                out[:, ch * r * r + dy * r + dx] = x[:, ch, dy::r, dx::r]
    return out


def s2b_loop(x, r):
    n, c, h, w = x.shape
    out = np.empty((n * r * r, c, h // r, w // r))
    for b in range(n):
        for dy in range(r):
            for dx in range(r):
                out[(dy * r + dx) * n + b] = x[b, :, dy::r, dx::r]
    return out


@pytest.mark.parametrize("shape, r", [((2, 3, 4, 6), 2), ((1, 2, 6, 3), 3), ((2, 2, 2, 2), 1)])
def test_space_to_channel_and_back(shape, r):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    xi = af.input(shape)
    down = br.space_to_channel(xi, r)
    assert down.shape == (shape[0], shape[1] * r * r, shape[2] // r, shape[3] // r)
    np.testing.assert_array_equal(emu(down, x), s2c_loop(x, r))
    np.testing.assert_array_equal(ref(down, x), s2c_loop(x, r))
    np.testing.assert_array_equal(emu(br.channel_to_space(down, r), x), x)
    y = s2c_loop(x, r)
    up = br.channel_to_space(af.input(y.shape), r)
    np.testing.assert_array_equal(emu(up, y), x)  # channel_to_space inverts the loop
    np.testing.assert_array_equal(emu(br.space_to_channel(up, r), y), y)


@pytest.mark.parametrize("shape, r", [((2, 3, 4, 6), 2), ((3, 1, 6, 3), 3)])
def test_space_to_batch_and_back(shape, r):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    xi = af.input(shape)
    down = br.space_to_batch(xi, r)
    assert down.shape == (shape[0] * r * r, shape[1], shape[2] // r, shape[3] // r)
    np.testing.assert_array_equal(emu(down, x), s2b_loop(x, r))
    np.testing.assert_array_equal(ref(down, x), s2b_loop(x, r))
    np.testing.assert_array_equal(emu(br.batch_to_space(down, r), x), x)
    y = s2b_loop(x, r)
    up = br.batch_to_space(af.input(y.shape), r)
    np.testing.assert_array_equal(emu(up, y), x)
    np.testing.assert_array_equal(emu(br.space_to_batch(up, r), y), y)


@pytest.mark.parametrize(
    "fn, shape, match",
    [
        (
            br.space_to_channel,
            (1, 2, 5, 4),
            "space_to_channel: H=5 and W=4 .*multiples of factor 2",
        ),
        (br.space_to_batch, (1, 2, 4, 3), "space_to_batch: H=4 and W=3"),
        (br.channel_to_space, (1, 6, 2, 2), "channel_to_space: C=6 .*factor\\*\\*2 = 4"),
        (br.batch_to_space, (6, 1, 2, 2), "batch_to_space: N=6 .*factor\\*\\*2 = 4"),
        (br.space_to_channel, (2, 4, 4), "space_to_channel: input must be \\[N, C, H, W\\]"),
    ],
)
def test_block_movement_validation(fn, shape, match):
    with pytest.raises(ShapeError, match=match):
        fn(af.input(shape), 2)


# ---- input_view / dynamic_slice ------------------------------------------------------


def test_input_view_is_a_static_window(rng):
    x = fp16_values(rng, (4, 6, 5))
    node = br.input_view(af.input(x.shape), (1, 2, 0), (3, 3, 5))
    np.testing.assert_array_equal(emu(node, x), x[1:4, 2:5, 0:5])
    np.testing.assert_array_equal(ref(node, x), x[1:4, 2:5, 0:5])


def test_input_view_validation():
    x = af.input((4, 6))
    with pytest.raises(ShapeError, match="input_view: window begin 3 \\+ size 2 = 5 exceeds"):
        br.input_view(x, (3, 0), (2, 6))
    with pytest.raises(AttributeValueError, match="input_view: begins .*need 2 values"):
        br.input_view(x, (0,), (2,))
    with pytest.raises(AttributeValueError, match="input_view: begins must be >= 0"):
        br.input_view(x, (-1, 0), (2, 2))


def xla_dynamic_slice(x, start, sizes):
    window = []
    for s, size, dim in zip(start, sizes, x.shape):
        b = min(max(int(np.rint(s)), 0), dim - size)
        window.append(slice(b, b + size))
    return x[tuple(window)]


@pytest.mark.parametrize(
    "start",
    [[1.0, 2.0], [0.0, 0.0], [9.0, 30.0], [-3.0, 1.0], [1.4, 2.6], [4.0, -100.0]],
)
def test_dynamic_slice_reads_and_clamps_its_offsets(rng, start):
    x = fp16_values(rng, (6, 8))
    sizes = (3, 5)
    node = br.dynamic_slice(af.input(x.shape), af.input((2,)), sizes)
    assert node.shape == sizes
    want = xla_dynamic_slice(x, start, sizes)
    np.testing.assert_array_equal(emu(node, x, np.array(start)), want)
    np.testing.assert_array_equal(ref(node, x, np.array(start)), want)


def test_dynamic_slice_clamps_to_the_last_window_not_to_the_end():
    x = np.arange(10.0)
    node = br.dynamic_slice(af.input((10,)), af.input((1,)), (4,))
    np.testing.assert_array_equal(emu(node, x, np.array([8.0])), [6, 7, 8, 9])


def test_dynamic_slice_validation():
    x = af.input((6, 8))
    with pytest.raises(ShapeError, match="dynamic_slice: start must be a tensor of shape \\(2,\\)"):
        br.dynamic_slice(x, af.input((3,)), (2, 2))
    with pytest.raises(ShapeError, match="dynamic_slice: sizes entry 9 exceeds axis 1"):
        br.dynamic_slice(x, af.input((2,)), (2, 9))
    with pytest.raises(AttributeValueError, match="dynamic_slice: sizes .*need 2 values"):
        br.dynamic_slice(x, af.input((2,)), (2,))


# ---- cross_product -----------------------------------------------------------------


def cross_steps(a, b, axis):
    a, b = np.broadcast_arrays(a, b)
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    parts = [
        f16(f16(a[..., i] * b[..., j]) - f16(a[..., j] * b[..., i]))
        for i, j in ((1, 2), (2, 0), (0, 1))
    ]
    return np.moveaxis(np.stack(parts, -1), -1, axis)


def cross_steps_abs(a, b, axis):
    """|a_i b_j| + |a_j b_i| for every component (the magnitudes the roundings see)."""
    a, b = np.moveaxis(a, axis, -1), np.moveaxis(b, axis, -1)
    parts = [a[..., i] * b[..., j] + a[..., j] * b[..., i] for i, j in ((1, 2), (2, 0), (0, 1))]
    return np.moveaxis(np.stack(parts, -1), -1, axis)


@pytest.mark.parametrize("a_shape, b_shape, axis", [((5, 3), (5, 3), -1), ((3, 6), (3, 1), 0)])
def test_cross_product_matches_np_cross(rng, a_shape, b_shape, axis):
    a = fp16_values(rng, a_shape, 4.0)
    b = fp16_values(rng, b_shape, 4.0)
    node = br.cross_product(af.input(a_shape), af.input(b_shape), axis=axis)
    bb = np.broadcast_to(b, np.broadcast_shapes(a_shape, b_shape))
    exact = np.cross(a, bb, axis=axis)
    np.testing.assert_allclose(ref(node, a, b), exact, rtol=1e-15, atol=0)
    got = emu(node, a, b)
    np.testing.assert_array_equal(got, cross_steps(a, b, axis))
    # Two rounded products and a rounded difference per component.
    terms = cross_steps_abs(np.abs(a), np.abs(bb), axis)
    assert np.all(np.abs(got - exact) <= 1.01 * U16 * terms + U16 * np.abs(exact) + FP16_TINY)


def test_cross_product_needs_three_components():
    with pytest.raises(ShapeError, match="cross_product: a \\(4, 1\\) must have 3 components"):
        br.cross_product(af.input((4, 1)), af.input((4, 3)))
    with pytest.raises(ShapeError, match="cross_product: shapes"):
        br.cross_product(af.input((4, 3)), af.input((4, 4)))


# ---- cross_correlation -------------------------------------------------------------


@pytest.mark.parametrize("x_shape, t_shape", [((2, 3, 9, 8), (3, 3, 2)), ((1, 5, 6, 6), (5, 6, 1))])
def test_cross_correlation_matches_scipy(rng, x_shape, t_shape):
    x = fp16_values(rng, x_shape)
    t = fp16_values(rng, t_shape)
    node = br.cross_correlation(af.input(x_shape), af.input(t_shape))
    exact = np.stack([scipy.signal.correlate(x[n], t, mode="valid") for n in range(len(x))])
    absprod = np.stack(
        [scipy.signal.correlate(np.abs(x[n]), np.abs(t), mode="valid") for n in range(len(x))]
    )
    assert node.shape == exact.shape
    np.testing.assert_allclose(ref(node, x, t), exact, rtol=1e-10, atol=1e-12)
    kk = int(np.prod(t_shape))
    bound = (U16 + kk * U32) * (1 + U16) * absprod * 1.001 + U16 * np.abs(exact) + FP16_TINY
    assert np.all(np.abs(emu(node, x, t) - exact) <= bound)
    assert build(node).flops == 2 * kk * int(np.prod(exact.shape))


def test_cross_correlation_uses_the_wide_accumulator():
    x = np.zeros((1, 1, 1, 4097))
    x[0, 0, 0, 0] = 2048.0
    x[0, 0, 0, 1:] = 1.0
    node = br.cross_correlation(af.input(x.shape), af.input((1, 1, 4097)))
    assert emu(node, x, np.ones((1, 1, 4097)))[0, 0, 0, 0] == 6144.0  # fp16 acc: 2048


@pytest.mark.parametrize(
    "t_shape, match", [((2, 3, 3), "2 channels but x"), ((3, 9, 2), "larger than the image")]
)
def test_cross_correlation_validation(t_shape, match):
    with pytest.raises(ShapeError, match=f"cross_correlation: .*{match}"):
        br.cross_correlation(af.input((1, 3, 8, 8)), af.input(t_shape))


# ---- cost_volume -------------------------------------------------------------------


def cost_volume_loop(left, right, max_disp, rnd):
    n, c, h, w = left.shape
    out = np.zeros((n, max_disp, h, w))
    for d in range(max_disp):
        for col in range(d, w):
            acc = np.zeros((n, h))
            for ch in range(c):
                acc = rnd(acc + rnd(left[:, ch, :, col] * right[:, ch, :, col - d]))
            out[:, d, :, col] = rnd(acc / c)
    return out


@pytest.mark.parametrize("shape, max_disp", [((2, 5, 3, 7), 4), ((1, 3, 2, 3), 5)])
def test_cost_volume_against_a_loop(rng, shape, max_disp):
    left = fp16_values(rng, shape, 3.0)
    right = fp16_values(rng, shape, 3.0)
    node = br.cost_volume(af.input(shape), af.input(shape), max_disp)
    assert node.shape == (shape[0], max_disp) + shape[2:]
    exact = cost_volume_loop(left, right, max_disp, same)
    np.testing.assert_allclose(ref(node, left, right), exact, rtol=1e-13, atol=1e-15)
    got = emu(node, left, right)
    np.testing.assert_array_equal(got, cost_volume_loop(left, right, max_disp, f16))
    for d in range(max_disp):
        assert np.all(got[:, d, :, :d] == 0.0)
    # products, C narrow adds (each <= u16 of the running |sum|) and the division.
    mean_abs = cost_volume_loop(np.abs(left), np.abs(right), max_disp, same)
    bound = (shape[1] + 2) * U16 * 1.01 * mean_abs + FP16_TINY
    assert np.all(np.abs(got - exact) <= bound)


def test_cost_volume_validation():
    with pytest.raises(ShapeError, match="cost_volume: left .* must have the same shape"):
        br.cost_volume(af.input((1, 3, 4, 5)), af.input((1, 3, 4, 6)), 2)
    with pytest.raises(AttributeValueError, match="cost_volume: max_disp must be >= 1"):
        br.cost_volume(af.input((1, 3, 4, 5)), af.input((1, 3, 4, 5)), 0)


# ---- fps / radius_search -------------------------------------------------------------


def sq_dist(p, c, rnd):
    acc = 0.0
    for j in range(3):
        d = rnd(p[j] - c[j])
        acc = rnd(acc + rnd(d * d))
    return float(acc)


def fps_loop(points, k, rnd):
    n = len(points)
    chosen = [0]
    mind = [sq_dist(points[i], points[0], rnd) for i in range(n)]
    while len(chosen) < k:
        best = 0
        for i in range(1, n):
            if mind[i] > mind[best]:
                best = i
        chosen.append(best)
        mind = [min(mind[i], sq_dist(points[i], points[best], rnd)) for i in range(n)]
    return chosen


@pytest.mark.parametrize("shape, k", [((40, 3), 9), ((2, 30, 3), 6), ((5, 3), 5)])
def test_fps_against_a_loop(rng, shape, k):
    pts = fp16_values(rng, shape, 20.0)
    node = br.fps(af.input(shape), k)
    batches = pts if pts.ndim == 3 else pts[None]
    want_emu = np.array([fps_loop(b, k, f16) for b in batches]).reshape(shape[:-2] + (k,))
    want_ref = np.array([fps_loop(b, k, same) for b in batches]).reshape(shape[:-2] + (k,))
    np.testing.assert_array_equal(emu(node, pts), want_emu)
    np.testing.assert_array_equal(ref(node, pts), want_ref)


def test_fps_ties_pick_the_lowest_index():
    pts = np.array([[0.0, 0, 0], [0, 1, 0], [1, 0, 0], [-1, 0, 0], [0, 0, 0.5]])
    # after 0: points 1, 2, 3 tie at 1 -> 1; then 2 and 3 tie at min(1, 2) = 1 -> 2.
    np.testing.assert_array_equal(emu(br.fps(af.input(pts.shape), 3), pts), [0, 1, 2])


def test_fps_validation():
    with pytest.raises(ShapeError, match="fps: k=6 is larger than the 5 points"):
        br.fps(af.input((5, 3)), 6)
    with pytest.raises(ShapeError, match="fps: points must be \\[N, 3\\]"):
        br.fps(af.input((5, 2)), 2)


def radius_loop(points, centers, radius, max_n, rnd):
    thr = rnd(rnd(radius) * rnd(radius))
    out = np.full((len(centers), max_n), -1.0)
    for m, c in enumerate(centers):
        hits = [i for i, p in enumerate(points) if sq_dist(p, c, rnd) <= thr][:max_n]
        out[m, : len(hits)] = hits
    return out


@pytest.mark.parametrize("n, max_n, radius", [(120, 8, 1.3), (6, 9, 2.5)])
def test_radius_search_against_a_loop(rng, n, max_n, radius):
    pts = f16(rng.random((n, 3)) * 4.0)
    centers = np.concatenate([pts[:4] + f16(0.1), [[50.0, 50.0, 50.0]]])
    node = br.radius_search(af.input(pts.shape), af.input(centers.shape), radius, max_n)
    assert node.shape == (len(centers), max_n)
    want = radius_loop(pts, centers, radius, max_n, f16)
    got = emu(node, pts, centers)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        ref(node, pts, centers), radius_loop(pts, centers, radius, max_n, same)
    )
    assert np.all(got[-1] == -1)  # the far center has no neighbours
    full_rows = np.all(got[:-1] >= 0, axis=1)
    if n > max_n:  # the data has both cut (full) and padded neighbourhoods
        assert full_rows.any() and not full_rows.all()
    else:
        assert np.all(got[:, n:] == -1)  # more slots than points: padded


def test_radius_search_compares_in_fp16():
    # fp16(1.0005) = 1 + 2**-10 = p, so the threshold is fp16(p*p) = fp16(|p - 0|**2):
    # point 0 is inside on the emulator, outside in float64 (p*p > 1.0005**2).
    pts = np.array([[1.0009765625, 0.0, 0.0], [0.5, 0.0, 0.0]])
    centers = np.zeros((1, 3))
    node = br.radius_search(af.input((2, 3)), af.input((1, 3)), 1.0005, 2)
    np.testing.assert_array_equal(emu(node, pts, centers), [[0, 1]])
    np.testing.assert_array_equal(ref(node, pts, centers), [[1, -1]])


def test_radius_search_sums_the_coordinates_narrowly():
    # 1 + 2**-12 + 2**-12: each partial sum rounds back to 1 in fp16, so the point is on
    # the radius-1 sphere on the emulator; its exact squared distance 1 + 2**-11 is not.
    pts = np.array([[1.0, 2.0**-6, 2.0**-6], [0.0, 0.0, 1.0009765625]])
    node = br.radius_search(af.input((2, 3)), af.input((1, 3)), 1.0, 2)
    np.testing.assert_array_equal(emu(node, pts, np.zeros((1, 3))), [[0, -1]])
    np.testing.assert_array_equal(ref(node, pts, np.zeros((1, 3))), [[-1, -1]])


def test_radius_search_validation():
    with pytest.raises(ShapeError, match="radius_search: centers must be \\[count, 3\\]"):
        br.radius_search(af.input((5, 3)), af.input((2, 2)), 1.0, 2)
    with pytest.raises(AttributeValueError, match="radius_search: radius must be >= 0"):
        br.radius_search(af.input((5, 3)), af.input((2, 3)), -1.0, 2)


# ---- the index range limit ----------------------------------------------------------

LIMIT_BUILDERS = {
    "argmax": lambda n: br.argmax(af.input((2, n))),
    "topk": lambda n: br.topk(af.input((n,)), 2)[1],
    "fps": lambda n: br.fps(af.input((n, 3)), 2),
    "radius_search": lambda n: br.radius_search(af.input((n, 3)), af.input((1, 3)), 1.0, 2),
}


@pytest.mark.parametrize("name", sorted(LIMIT_BUILDERS))
def test_indices_beyond_2048_are_refused_at_build_time(name):
    LIMIT_BUILDERS[name](2049)
    with pytest.raises(ShapeError, match=f"{name}: .*2050 elements.*exact only up to 2048"):
        LIMIT_BUILDERS[name](2050)


def test_topk_values_alone_have_no_index_limit():
    assert make("topk", af.input((4000,)), k=2).shape == (2,)


def test_the_largest_index_is_exact():
    x = np.zeros(2049)
    x[-1] = 1.0
    assert emu(br.argmax(af.input(x.shape)), x) == 2048.0


# ---- scaled_elementwise ------------------------------------------------------------


@pytest.mark.parametrize("op, fn", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_scaled_elementwise(rng, op, fn):
    a = fp16_values(rng, (4, 1), 3.0)
    b = fp16_values(rng, (1, 5), 3.0)
    node = br.scaled_elementwise(af.input(a.shape), af.input(b.shape), op=op, scale=0.3)
    assert node.shape == (4, 5)
    np.testing.assert_allclose(ref(node, a, b), 0.3 * fn(a, b), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(emu(node, a, b), f16(f16(fn(a, b)) * f16(0.3)))


def test_scaled_elementwise_validation():
    with pytest.raises(AttributeValueError, match="scaled_elementwise: op must be one of"):
        br.scaled_elementwise(af.input((2,)), af.input((2,)), op="div")
    with pytest.raises(ShapeError, match="scaled_elementwise: shapes"):
        br.scaled_elementwise(af.input((2,)), af.input((3,)))
