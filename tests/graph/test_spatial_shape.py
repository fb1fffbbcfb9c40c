"""Pooling, upsampling and the movement ops against hand-written references.

Contracts (src/aneforge/graph/ops/spatial.py and shape.py):
- max_pool is exact and padding never wins.
- avg_pool adds each window's values in (row, column) order with the narrow fp16
  accumulator and divides by the count of non-pad elements (or the whole window with
  count_include_pad=True), rounded once.
- nearest upsampling copies; bilinear computes each output in float64 and rounds once
  (align_corners=False is the half-pixel rule).
- reshape, transpose, concat, slice, indexing, squeeze, expand_dims, pixel_shuffle,
  pixel_unshuffle and cast move values without arithmetic: bit-exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import ndimage

import aneforge as af
from aneforge.graph.fp16 import fp16_values as f16
from conftest import FP16_TINY, FP16_UNIT_ROUNDOFF, fp16_values, narrow_sum_error_bound

U16 = FP16_UNIT_ROUNDOFF


def run(node, *arrays):
    return af.compile(node)(*arrays).astype(np.float64)


def bits(a):
    return np.asarray(a).astype(np.float16).view(np.uint16)


def special_values(rng, shape):
    """fp16 values with the edge cases movement must carry bit for bit (no nan)."""
    x = fp16_values(rng, shape, 10.0)
    flat = x.reshape(-1)
    extras = [0.0, -0.0, np.inf, -np.inf, 65504.0, -65504.0, 2.0**-24, -(2.0**-20)]
    flat[: min(len(extras), flat.size)] = extras[: flat.size]
    return flat.reshape(shape)


# ---- pooling references (explicit loops over outputs) --------------------------------


def pool_windows(x, kernel, stride, pads):
    """For a 2-D NCHW x: yields (oh, ow, [(ih, iw) valid in row-major order], full size)."""
    _, _, h, w = x.shape
    (pt, pb), (pl, pr) = pads
    oh_n = (h + pt + pb - kernel[0]) // stride[0] + 1
    ow_n = (w + pl + pr - kernel[1]) // stride[1] + 1
    for oh in range(oh_n):
        for ow in range(ow_n):
            cells = []
            for kh in range(kernel[0]):
                for kw in range(kernel[1]):
                    ih, iw = oh * stride[0] - pt + kh, ow * stride[1] - pl + kw
                    if 0 <= ih < h and 0 <= iw < w:
                        cells.append((ih, iw))
            yield oh, ow, oh_n, ow_n, cells


def max_pool_ref(x, kernel, stride, pads):
    out = None
    for oh, ow, oh_n, ow_n, cells in pool_windows(x, kernel, stride, pads):
        if out is None:
            out = np.full(x.shape[:2] + (oh_n, ow_n), np.nan)
        vals = np.stack([x[:, :, ih, iw] for ih, iw in cells], axis=-1)
        out[:, :, oh, ow] = vals.max(axis=-1)
    return out


def avg_pool_ref(x, kernel, stride, pads, include_pad):
    """(float64 mean, error bound, contract fp16 result) of avg_pool."""
    exact = bound = contract = None
    for oh, ow, oh_n, ow_n, cells in pool_windows(x, kernel, stride, pads):
        if exact is None:
            shape = x.shape[:2] + (oh_n, ow_n)
            exact, bound, contract = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        vals = np.stack([x[:, :, ih, iw] for ih, iw in cells], axis=-1)
        count = kernel[0] * kernel[1] if include_pad else len(cells)
        exact[:, :, oh, ow] = vals.sum(axis=-1) / count
        sbound = narrow_sum_error_bound(vals, axis=-1) / count
        bound[:, :, oh, ow] = sbound + U16 * (np.abs(exact[:, :, oh, ow]) + sbound)
        acc = np.zeros(x.shape[:2])
        for k in range(vals.shape[-1]):
            acc = f16(acc + vals[..., k])
        contract[:, :, oh, ow] = f16(acc / count)
    return exact, bound + FP16_TINY, contract


def _pads(pad, nd):
    if isinstance(pad, int):
        return ((pad, pad),) * nd
    if len(pad) == nd:
        return tuple((p, p) for p in pad)
    return tuple((pad[i], pad[i + nd]) for i in range(nd))


def _tuple(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


POOL2D_CASES = [
    # (shape, kernel, stride, pad)
    ((2, 3, 8, 8), 2, None, 0),
    ((1, 2, 7, 9), 3, 2, 1),
    ((1, 2, 7, 9), (3, 2), (1, 2), (1, 0)),
    ((1, 1, 6, 6), 3, 1, (2, 1, 0, 2)),  # begins (top, left) then ends (bottom, right)
    ((1, 3, 5, 5), 5, None, 0),  # global
]


@pytest.mark.parametrize("case", POOL2D_CASES)
def test_max_pool2d(case, rng):
    shape, kernel, stride, pad = case
    x = fp16_values(rng, shape, 5.0) - 20.0  # all negative: zero padding would win
    x = f16(x)
    node = af.max_pool(af.input(shape), kernel, stride, pad)
    kern = _tuple(kernel, 2)
    want = max_pool_ref(x, kern, _tuple(stride, 2) if stride else kern, _pads(pad, 2))
    assert node.shape == want.shape
    np.testing.assert_array_equal(run(node, x), want)


@pytest.mark.parametrize("case", POOL2D_CASES)
@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool2d(case, include_pad, rng):
    shape, kernel, stride, pad = case
    x = fp16_values(rng, shape, 3.0)
    node = af.avg_pool(af.input(shape), kernel, stride, pad, count_include_pad=include_pad)
    kern = _tuple(kernel, 2)
    exact, bound, contract = avg_pool_ref(
        x, kern, _tuple(stride, 2) if stride else kern, _pads(pad, 2), include_pad
    )
    got = run(node, x)
    assert got.shape == exact.shape
    assert (np.abs(got - exact) <= bound).all()
    np.testing.assert_array_equal(got, contract)


POOL1D_CASES = [((2, 3, 10), 2, None, 0), ((1, 2, 11), 3, 2, 1), ((1, 2, 9), 4, 3, (2, 1))]


@pytest.mark.parametrize("case", POOL1D_CASES)
def test_pool1d(case, rng):
    shape, kernel, stride, pad = case
    x = f16(fp16_values(rng, shape, 3.0) - 10.0)
    p = _pads(pad, 1)[0]
    s = stride or kernel
    t = af.input(shape)
    mx, av, av_inc = af.compile(
        [
            af.max_pool(t, kernel, stride, pad),
            af.avg_pool(t, kernel, stride, pad),
            af.avg_pool(t, kernel, stride, pad, count_include_pad=True),
        ]
    )(x)
    x2 = x[:, :, None]
    want_max = max_pool_ref(x2, (1, kernel), (1, s), ((0, 0), p))[:, :, 0]
    np.testing.assert_array_equal(mx, want_max)
    for got, inc in ((av, False), (av_inc, True)):
        exact, bound, contract = avg_pool_ref(x2, (1, kernel), (1, s), ((0, 0), p), inc)
        assert got.shape == exact[:, :, 0].shape
        assert (np.abs(got - exact[:, :, 0]) <= bound[:, :, 0]).all()
        np.testing.assert_array_equal(got, contract[:, :, 0])


def test_avg_pool_count_include_pad_on_a_corner():
    t = af.input((1, 1, 3, 3))
    ones = np.ones((1, 1, 3, 3))
    excl = run(af.avg_pool(t, 3, stride=1, padding=1), ones)
    incl = run(af.avg_pool(t, 3, stride=1, padding=1, count_include_pad=True), ones)
    np.testing.assert_array_equal(excl, np.ones((1, 1, 3, 3)))
    want = f16(np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]]) / 9)
    np.testing.assert_array_equal(incl[0, 0], want)


def test_max_pool_padding_never_wins():
    x = np.full((1, 1, 2, 2), -60000.0)
    got = run(af.max_pool(af.input(x.shape), 2, stride=1, padding=1), x)
    np.testing.assert_array_equal(got, np.full((1, 1, 3, 3), -60000.0))


def test_avg_pool_uses_the_narrow_accumulator():
    # A 64 x 64 window of ones: the narrow sum stalls at 2048, so the mean is 0.5.
    x = np.ones((1, 1, 64, 64))
    assert run(af.avg_pool(af.input(x.shape), 64), x)[0, 0, 0, 0] == 0.5


# ---- upsampling ------------------------------------------------------------------------


def bilinear_hand(x, scales, align_corners):
    """Per-output linear interpolation over the trailing spatial axes of NC(H)W."""
    nd = x.ndim - 2
    sizes_in = x.shape[2:]
    sizes_out = tuple(n * s for n, s in zip(sizes_in, scales))

    def taps(dst, n_in, n_out, s):
        if align_corners:
            src = dst * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((dst + 0.5) / s - 0.5, 0.0)
        lo = min(math.floor(src), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        return ((lo, 1.0 - (src - lo)), (hi, src - lo))

    out = np.zeros(x.shape[:2] + sizes_out)
    for idx in np.ndindex(*sizes_out):
        per_axis = [taps(idx[i], sizes_in[i], sizes_out[i], scales[i]) for i in range(nd)]
        total = np.zeros(x.shape[:2])
        for combo in np.ndindex(*(2,) * nd):
            weight = 1.0
            src = []
            for i, c in enumerate(combo):
                pos, wgt = per_axis[i][c]
                weight *= wgt
                src.append(pos)
            total = total + weight * x[(slice(None), slice(None), *src)]
        out[(slice(None), slice(None), *idx)] = total
    return out


UPSAMPLE_CASES = [((1, 2, 3, 4), 2), ((2, 1, 4, 3), (3, 2)), ((1, 3, 5), 4), ((1, 1, 1, 2), 3)]


@pytest.mark.parametrize(("shape", "scale"), UPSAMPLE_CASES)
def test_upsample_nearest_copies(shape, scale, rng):
    x = special_values(rng, shape)
    got = run(af.upsample(af.input(shape), scale), x)
    nd = len(shape) - 2
    want = x
    for i, s in enumerate(_tuple(scale, nd)):
        idx = np.arange(shape[2 + i] * s) // s  # output i reads input floor(i / s)
        want = np.take(want, idx, axis=2 + i)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize(("shape", "scale"), UPSAMPLE_CASES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_upsample_bilinear(shape, scale, align_corners, rng):
    x = fp16_values(rng, shape, 4.0)
    node = af.upsample(af.input(shape), scale, mode="bilinear", align_corners=align_corners)
    got = run(node, x)
    nd = len(shape) - 2
    scales = _tuple(scale, nd)
    ref = bilinear_hand(x, scales, align_corners)
    assert got.shape == ref.shape == node.shape
    # One rounding of a float64 convex combination (a few float64 ulps of it, far below).
    err = np.abs(got - ref)
    assert (err <= U16 * np.abs(ref) + FP16_TINY + 1e-12 * np.max(np.abs(x))).all()
    # scipy's zoom implements the same two rules: grid_mode=True with edge clamping is the
    # half-pixel rule; grid_mode=False maps the corner samples onto each other.
    z = ndimage.zoom(x, (1, 1) + scales, order=1, grid_mode=not align_corners, mode="nearest")
    np.testing.assert_allclose(ref, z, rtol=0, atol=1e-12)


def test_upsample_bilinear_align_corners_keeps_the_corners(rng):
    x = fp16_values(rng, (1, 1, 3, 4))
    got = run(af.upsample(af.input(x.shape), 3, mode="bilinear", align_corners=True), x)
    corners = got[0, 0, [0, 0, -1, -1], [0, -1, 0, -1]]
    np.testing.assert_array_equal(corners, x[0, 0, [0, 0, -1, -1], [0, -1, 0, -1]])


def test_upsample_bilinear_half_pixel_values():
    # 1-D [0, 4] upsampled by 2 with the half-pixel rule: sources -0.25 (clamped to 0),
    # 0.25, 0.75, 1.25 (clamped to the last sample) -> [0, 1, 3, 4].
    x = np.array([[[0.0, 4.0]]])
    got = run(af.upsample(af.input(x.shape), 2, mode="bilinear"), x)
    np.testing.assert_array_equal(got, [[[0.0, 1.0, 3.0, 4.0]]])
    got = run(af.upsample(af.input(x.shape), 2, mode="bilinear", align_corners=True), x)
    np.testing.assert_array_equal(got, f16([[[0.0, 4 / 3, 8 / 3, 4.0]]]))


# ---- movement ops: bit-exact ------------------------------------------------------------


def test_reshape_with_inferred_dim(rng):
    x = special_values(rng, (2, 3, 4))
    t = af.input(x.shape)
    outs = af.compile([af.reshape(t, (-1,)), af.reshape(t, (4, -1)), t.reshape((3, 2, 2, 2))])(x)
    for got, want in zip(outs, [x.reshape(-1), x.reshape(4, -1), x.reshape(3, 2, 2, 2)]):
        assert got.shape == want.shape
        np.testing.assert_array_equal(bits(got), bits(want))


def test_transpose(rng):
    x = special_values(rng, (2, 3, 4))
    t = af.input(x.shape)
    nodes = [af.transpose(t, (2, 0, 1)), af.transpose(t), t.T, t.transpose((1, 0, 2))]
    wants = [x.transpose(2, 0, 1), x.transpose(), x.T, x.transpose(1, 0, 2)]
    for node, got, want in zip(nodes, af.compile(nodes)(x), wants):
        assert node.shape == want.shape
        np.testing.assert_array_equal(bits(got), bits(want))


def test_transpose_rank5(rng):
    x = special_values(rng, (2, 1, 3, 2, 4))
    got = run(af.transpose(af.input(x.shape), (4, 2, 0, 3, 1)), x)
    np.testing.assert_array_equal(bits(got), bits(x.transpose(4, 2, 0, 3, 1)))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis, rng):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    shapes = [
        tuple(d + i if a == axis % 3 else d for a, d in enumerate(s)) for i, s in enumerate(shapes)
    ]
    xs = [special_values(rng, s) for s in shapes]
    w = fp16_values(rng, shapes[0])
    ts = [af.input(s) for s in shapes]
    node = af.concat([*ts, w], axis=axis)
    got = af.compile(node)(*xs)
    want = np.concatenate([*xs, w], axis=axis)
    assert node.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize(
    ("begins", "ends", "steps"),
    [((0, 1), (4, 6), None), ((1, 0), (100, 6), (2, 3)), ((-3, -5), (4, -1), (1, 2))],
)
def test_slice(begins, ends, steps, rng):
    x = special_values(rng, (5, 7))
    node = af.slice(af.input(x.shape), begins, ends, steps)
    steps_ = steps or (1, 1)
    want = x[tuple(slice(b, e, s) for b, e, s in zip(begins, ends, steps_))]
    got = run(node, x)
    assert node.shape == want.shape
    np.testing.assert_array_equal(bits(got), bits(want))


INDEX_KEYS = [
    1,
    -1,
    (slice(None), 2),
    (slice(1, None, 2), -2),
    (Ellipsis, 0),
    (0, Ellipsis),
    (Ellipsis, slice(None, None, 3)),
    (1, Ellipsis, slice(-3, None)),
    (slice(None), slice(None), slice(None), slice(None)),
    (-2, 1, slice(0, 5, 4), 3),
    (slice(-100, 100),),
    Ellipsis,
]


@pytest.mark.parametrize("key", INDEX_KEYS, ids=[repr(k) for k in INDEX_KEYS])
def test_getitem_matches_numpy(key, rng):
    x = special_values(rng, (3, 4, 6, 5))
    node = af.input(x.shape)[key]
    want = x[key]
    assert node.shape == want.shape
    np.testing.assert_array_equal(bits(run(node, x)), bits(want))


def test_getitem_with_numpy_integer(rng):
    x = special_values(rng, (3, 4))
    node = af.input(x.shape)[np.int64(2), np.int32(-1)]
    assert node.shape == ()
    assert run(node, x) == x[2, -1]


def test_squeeze_and_expand_dims(rng):
    x = special_values(rng, (1, 3, 1, 4))
    t = af.input(x.shape)
    nodes = [
        af.squeeze(t),
        af.squeeze(t, 0),
        af.squeeze(t, (-2,)),
        t.squeeze(axis=(0, 2)),
        af.expand_dims(t, 0),
        af.expand_dims(af.squeeze(t), (0, 3)),
        af.expand_dims(af.squeeze(t), -1),
    ]
    sq = x.reshape(3, 4)
    wants = [
        sq,
        x[0],
        x[:, :, 0],
        sq,
        x[None],
        np.expand_dims(sq, (0, 3)),
        np.expand_dims(sq, -1),
    ]
    for node, got, want in zip(nodes, af.compile(nodes)(x), wants):
        assert node.shape == want.shape
        np.testing.assert_array_equal(bits(got), bits(want))


def pixel_shuffle_hand(x, r):
    n, c, h, w = x.shape
    out = np.empty((n, c // (r * r), h * r, w * r))
    for co in range(c // (r * r)):
        for i in range(r):
            for j in range(r):
                out[:, co, i::r, j::r] = x[:, co * r * r + i * r + j]
    return out


@pytest.mark.parametrize(("shape", "r"), [((1, 8, 3, 3), 2), ((2, 18, 2, 4), 3), ((1, 4, 2, 2), 1)])
def test_pixel_shuffle_and_unshuffle(shape, r, rng):
    x = special_values(rng, shape)
    t = af.input(shape)
    shuffled = af.pixel_shuffle(t, r)
    back = af.pixel_unshuffle(shuffled, r)
    got_s, got_back = af.compile([shuffled, back])(x)
    want = pixel_shuffle_hand(x, r)
    assert shuffled.shape == want.shape
    np.testing.assert_array_equal(bits(got_s), bits(want))
    np.testing.assert_array_equal(bits(got_back), bits(x))  # unshuffle inverts shuffle
    # and the other way round: shuffle(unshuffle(y)) == y
    y = special_values(rng, want.shape)
    ty = af.input(want.shape)
    down = af.pixel_unshuffle(ty, r)
    got_down, got_y = af.compile([down, af.pixel_shuffle(down, r)])(y)
    assert down.shape == shape
    np.testing.assert_array_equal(bits(got_y), bits(y))
    np.testing.assert_array_equal(bits(pixel_shuffle_hand(got_down, r)), bits(y))


def test_cast_is_the_identity(rng):
    x = special_values(rng, (4, 5))
    t = af.input(x.shape)
    outs = af.compile([af.cast(t), t.cast("fp16"), af.cast(t, "half")])(x)
    for got in outs:
        np.testing.assert_array_equal(bits(got), bits(x))
    with pytest.raises(af.DTypeError, match="float16"):
        af.cast(t, "float32")


def test_movement_ops_carry_nan(rng):
    x = fp16_values(rng, (2, 4))
    x[1, 2] = np.nan
    t = af.input(x.shape)
    outs = af.compile([t.T, af.reshape(t, (8,)), t[1], af.concat([t, t], axis=0)])(x)
    wants = [x.T, x.reshape(8), x[1], np.concatenate([x, x])]
    for got, want in zip(outs, wants):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
