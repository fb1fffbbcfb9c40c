"""Argument names a NumPy or PyTorch user guesses.

src/aneforge/graph/api.py: arguments are named as NumPy names them where NumPy has the
function (``axis=``, ``keepdims=``, ``axes`` of transpose, ``shape`` of reshape), else as
PyTorch does (``padding=``, ``kernel_size=``, ``scale_factor=``, ``num_groups=``,
``upscale_factor=``, ``downscale_factor=``). The old spellings work for one release with a
DeprecationWarning that names the new one and points at the caller's line; both at once
are an OptionError. Results are checked against NumPy (integer-valued inputs, which fp16
holds exactly) and the nodes against the ones the new spelling builds. ``nn.mha`` and
``nn.mlp`` both take PyTorch's ``[out_features, in_features]`` weights. ``import
aneforge`` imports neither scipy nor numba; they load on first use.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.graph.walk import topological_order
from conftest import run_python_with_env


def run(outs, *feeds):
    """Emulate ``outs`` on ``feeds`` (float32 results)."""
    return af.compile(outs)(*feeds)


def ints(rng, shape, lo=-8, hi=9):
    """Small integers: exact in fp16, and their sums (< 2048) too."""
    return rng.integers(lo, hi, shape).astype(np.float64)


def same_node(a, b) -> bool:
    return a.op == b.op and a.shape == b.shape and dict(a.attrs) == dict(b.attrs)


# ---- the deprecated aliases: same node, one warning naming the new spelling ------------

X3 = (2, 3, 4)
IMG = (1, 4, 8, 8)
W = np.ones((2, 4, 3, 3))
WT = np.ones((4, 2, 2, 2))

# (input shape, new spelling, old spelling, old keyword, new keyword)
ALIASES = [
    (X3, lambda x: af.sum(x, axis=1), lambda x: af.sum(x, axes=1), "axes", "axis"),
    (X3, lambda x: x.mean(axis=(0, 2)), lambda x: x.mean(axes=(0, 2)), "axes", "axis"),
    (X3, lambda x: af.amax(x, axis=-1), lambda x: af.amax(x, axes=-1), "axes", "axis"),
    (X3, lambda x: x.amin(axis=0, keepdims=True), lambda x: x.amin(axes=0, keepdims=True),
     "axes", "axis"),
    ((1, 3, 1), lambda x: af.squeeze(x, axis=0), lambda x: af.squeeze(x, axes=0), "axes",
     "axis"),
    (X3, lambda x: x.expand_dims(axis=(0, 2)), lambda x: x.expand_dims(axes=(0, 2)), "axes",
     "axis"),
    (X3, lambda x: af.transpose(x, axes=(1, 0, 2)), lambda x: af.transpose(x, perm=(1, 0, 2)),
     "perm", "axes"),
    (IMG, lambda x: af.conv(x, W, padding=1), lambda x: af.conv(x, W, pad=1), "pad", "padding"),
    (IMG, lambda x: af.conv_transpose(x, WT, stride=2, padding=1),
     lambda x: af.conv_transpose(x, WT, stride=2, pad=1), "pad", "padding"),
    (IMG, lambda x: af.max_pool(x, kernel_size=3, padding=1),
     lambda x: af.max_pool(x, kernel=3, padding=1), "kernel", "kernel_size"),
    (IMG, lambda x: af.max_pool(x, 3, padding=1), lambda x: af.max_pool(x, 3, pad=1), "pad",
     "padding"),
    (IMG, lambda x: af.avg_pool(x, kernel_size=2, padding=1),
     lambda x: af.avg_pool(x, 2, pad=1), "pad", "padding"),
    (IMG, lambda x: af.upsample(x, scale_factor=2), lambda x: af.upsample(x, scale=2), "scale",
     "scale_factor"),
    (IMG, lambda x: af.group_norm(x, num_groups=2), lambda x: af.group_norm(x, groups=2),
     "groups", "num_groups"),
    (IMG, lambda x: af.pixel_shuffle(x, upscale_factor=2),
     lambda x: af.pixel_shuffle(x, factor=2), "factor", "upscale_factor"),
    (IMG, lambda x: af.pixel_unshuffle(x, downscale_factor=2),
     lambda x: af.pixel_unshuffle(x, factor=2), "factor", "downscale_factor"),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "new", "old", "old_kw", "new_kw"), ALIASES)
def test_the_new_spelling_warns_nothing(shape, new, old, old_kw, new_kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new(af.input(shape))


@pytest.mark.parametrize(("shape", "new", "old", "old_kw", "new_kw"), ALIASES)
def test_a_deprecated_alias_warns_at_the_caller_and_builds_the_same_node(
    shape, new, old, old_kw, new_kw
):
    x = af.input(shape)
    with pytest.warns(DeprecationWarning) as seen:
        got = old(x)
    assert len(seen) == 1
    msg = str(seen[0].message)
    assert f"{old_kw}= is deprecated" in msg and f"pass {new_kw}=" in msg, msg
    assert seen[0].filename == __file__  # the warning points at the user's line
    assert same_node(got, new(x))


@pytest.mark.parametrize(
    ("build", "old_kw", "new_kw"),
    [
        (lambda x: af.sum(x, axis=1, axes=1), "axes", "axis"),
        (lambda x: af.sum(x, 1, axes=1), "axes", "axis"),  # the new one given positionally
        (lambda x: x.amax(axes=0, axis=0), "axes", "axis"),
        (lambda x: af.transpose(x, (1, 0, 2), perm=(1, 0, 2)), "perm", "axes"),
        (lambda x: af.transpose(x, axes=(1, 0, 2), perm=(1, 0, 2)), "perm", "axes"),
        (lambda x: af.conv(af.input(IMG), W, None, 1, 1, pad=1), "pad", "padding"),
        (lambda x: af.max_pool(af.input(IMG), 2, kernel=2), "kernel", "kernel_size"),
    ],
)
def test_both_spellings_at_once_are_an_option_error(build, old_kw, new_kw):
    with (
        warnings.catch_warnings(),
        pytest.raises(af.OptionError, match=f"both {new_kw}= and {old_kw}="),
    ):
        warnings.simplefilter("error")  # refused before any warning
        build(af.input(X3))


def test_signatures_show_the_new_names():
    params = {
        af.sum: ("x", "axis", "keepdims", "name"),
        af.squeeze: ("x", "axis", "name"),
        af.conv: ("x", "weight", "bias", "stride", "padding", "dilation", "groups", "name"),
        af.max_pool: ("x", "kernel_size", "stride", "padding", "name"),
        af.upsample: ("x", "scale_factor", "mode", "align_corners", "name"),
        af.group_norm: ("x", "num_groups", "weight", "bias", "eps", "name"),
    }
    for fn, names in params.items():
        assert tuple(inspect.signature(fn).parameters) == names, fn.__name__
        assert fn.__doc__ and ">>>" in fn.__doc__
    assert af.sum.__name__ == "sum"


# ---- reductions, max and min --------------------------------------------------------


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), (2, 1, 0)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize(
    ("ours", "numpy"), [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]
)
def test_reductions_take_numpy_axis_and_keepdims(rng, ours, numpy, axis, keepdims):
    feed = ints(rng, X3)
    if ours == "mean":  # multiples of 24: a mean over 2 to 24 of them is an integer
        feed = 24.0 * ints(rng, X3, -2, 3)
    x = af.input(X3)
    y = getattr(x, ours)(axis=axis, keepdims=keepdims)
    want = numpy(feed, axis=axis, keepdims=keepdims)
    assert y.shape == want.shape
    np.testing.assert_array_equal(run(y, feed), want)


def test_max_and_min_are_amax_and_amin():
    x = af.input(X3)
    assert af.max is af.amax and af.min is af.amin
    assert same_node(x.max(1), af.amax(x, 1)) and same_node(x.min(), af.amin(x))
    assert x.max().op == "amax" and x.min(axis=0).op == "amin"


# ---- reshape ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "shape"),
    [
        (lambda x: x.reshape(-1), (24,)),
        (lambda x: af.reshape(x, -1), (24,)),
        (lambda x: x.reshape(24), (24,)),
        (lambda x: x.reshape(4, -1), (4, 6)),
        (lambda x: x.reshape(-1, 2, 3), (4, 2, 3)),
        (lambda x: x.reshape((6, 4)), (6, 4)),
        (lambda x: x.reshape([3, 8]), (3, 8)),
        (lambda x: af.reshape(x, shape=(2, -1)), (2, 12)),
        (lambda x: x.reshape(np.array([12, 2])), (12, 2)),
    ],
)
def test_reshape_takes_numpy_spellings_and_one_minus_one(rng, build, shape):
    feed = ints(rng, X3)
    y = build(af.input(X3))
    assert y.shape == shape
    np.testing.assert_array_equal(run(y, feed), feed.reshape(shape))


@pytest.mark.parametrize(
    ("build", "exc", "fragment"),
    [
        (lambda x: x.reshape(-1, -1), af.ShapeError, "one -1"),
        (lambda x: x.reshape(5, -1), af.ShapeError, "cannot infer -1"),
        (lambda x: x.reshape(7), af.ShapeError, "24 elements"),
        (lambda x: x.reshape((2, 12), shape=(2, 12)), af.OptionError, "shape twice"),
        (lambda x: x.reshape(2, 12, newshape=(2, 12)), TypeError, "newshape"),
    ],
)
def test_bad_reshapes(build, exc, fragment):
    with pytest.raises(exc, match=fragment):
        build(af.input(X3))


# ---- transpose ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "axes"),
    [
        (lambda x: x.transpose(2, 0, 1), (2, 0, 1)),
        (lambda x: x.transpose((1, 2, 0)), (1, 2, 0)),
        (lambda x: af.transpose(x, [0, 2, 1]), (0, 2, 1)),
        (lambda x: af.transpose(x, axes=(1, 0, 2)), (1, 0, 2)),
        (lambda x: x.transpose(), None),
        (lambda x: af.transpose(x, None), None),
        (lambda x: x.T, None),
    ],
)
def test_transpose_takes_numpy_spellings(rng, build, axes):
    feed = ints(rng, X3)
    y = build(af.input(X3))
    want = np.transpose(feed, axes)
    assert y.shape == want.shape
    np.testing.assert_array_equal(run(y, feed), want)


def test_a_two_axis_swap_of_a_rank_three_tensor_is_refused_with_the_fix():
    with pytest.raises(af.AttributeValueError, match=r"axes \(0, 1\).*full permutation"):
        af.input(X3).transpose(0, 1)
    with pytest.raises(af.OptionError, match="axes twice"):
        af.input(X3).transpose(1, 0, 2, axes=(1, 0, 2))


def test_the_deprecated_perm_gives_numpys_result(rng):
    feed = ints(rng, X3)
    with pytest.warns(DeprecationWarning, match="perm= is deprecated"):
        y = af.transpose(af.input(X3), perm=(2, 1, 0))
    np.testing.assert_array_equal(run(y, feed), np.transpose(feed, (2, 1, 0)))


# ---- the renamed spatial arguments compute what the old ones did ---------------------------


def test_padding_kernel_size_and_scale_factor_run_like_the_old_names(rng):
    feed = ints(rng, IMG, 0, 4)
    x = af.input(IMG)
    w = ints(rng, (2, 4, 3, 3), -1, 2)
    new = [
        af.conv(x, w, padding=1),
        af.max_pool(x, kernel_size=3, stride=2, padding=1),
        af.avg_pool(x, kernel_size=2, padding=0),
        af.upsample(x, scale_factor=2),
        af.group_norm(x, num_groups=2),
        af.pixel_shuffle(x, upscale_factor=2),
        af.pixel_unshuffle(x, downscale_factor=2),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = [
            af.conv(x, w, pad=1),
            af.max_pool(x, kernel=3, stride=2, pad=1),
            af.avg_pool(x, kernel=2, pad=0),
            af.upsample(x, scale=2),
            af.group_norm(x, groups=2),
            af.pixel_shuffle(x, factor=2),
            af.pixel_unshuffle(x, factor=2),
        ]
    for a, b in zip(run(new, feed), run(old, feed)):
        np.testing.assert_array_equal(a, b)
    # and an independent reference for two of them: the 3x3 conv with padding 1, and
    # max pooling with a -inf border
    padded = np.pad(feed[0], ((0, 0), (1, 1), (1, 1)))
    conv = np.array(
        [
            [[np.sum(padded[:, i : i + 3, j : j + 3] * w[o]) for j in range(8)] for i in range(8)]
            for o in range(2)
        ]
    )
    np.testing.assert_array_equal(run(new[0], feed)[0], conv)
    border = np.pad(feed[0], ((0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pool = np.array(
        [
            [
                [border[c, i : i + 3, j : j + 3].max() for j in range(0, 8, 2)]
                for i in range(0, 8, 2)
            ]
            for c in range(4)
        ]
    )
    np.testing.assert_array_equal(run(new[1], feed)[0], pool)


# ---- nn.mha and nn.mlp: PyTorch's weight layout, both ----------------------------------------


def _attention(x, wq, wk, wv, wo, heads):
    """Multi-head attention in float64 with [out, in] weights (x @ w.T), as PyTorch's
    ``nn.MultiheadAttention`` applies its projections (no biases)."""
    b, s, d = x.shape
    hd = d // heads

    def split(y):
        return y.reshape(b, s, heads, hd).transpose(0, 2, 1, 3)

    q, k, v = split(x @ wq.T), split(x @ wk.T), split(x @ wv.T)
    scores = q @ k.transpose(0, 1, 3, 2) * hd**-0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return ctx @ wo.T


def test_mha_takes_out_in_weights_like_linear(rng):
    d, heads = 16, 4
    ws = [rng.standard_normal((d, d)) * 0.3 for _ in range(4)]
    assert not np.allclose(ws[0], ws[0].T)  # the layout matters
    x = af.input((2, 5, d), name="x")
    y = af.nn.mha(x, *ws, heads=heads)
    assert y.op == "linear"  # the output projection, as every projection
    feed = rng.standard_normal((2, 5, d))
    got = af.reference(y, feed)
    np.testing.assert_allclose(
        got, _attention(feed.astype(np.float16), *ws_fp16(ws), heads), rtol=1e-9, atol=1e-9
    )
    # the pre-release layout (x @ w) is reached by passing the transposes
    xw = [w.T for w in ws]
    old = af.reference(af.nn.mha(x, *xw, heads=heads), feed)
    np.testing.assert_allclose(
        old, _attention(feed.astype(np.float16), *ws_fp16(xw), heads), rtol=1e-9, atol=1e-9
    )


def ws_fp16(ws):
    """The weights as the graph holds them (fp16), back in float64."""
    return [np.asarray(w, np.float16).astype(np.float64) for w in ws]


def test_mlp_and_mha_share_the_layout_of_linear(rng):
    d, hidden = 8, 12
    w1, w2 = rng.standard_normal((hidden, d)), rng.standard_normal((d, hidden))
    b1, b2 = rng.standard_normal(hidden), rng.standard_normal(d)
    x = af.input((3, d))
    y = af.nn.mlp(x, w1, b1, w2, b2, activation="relu")
    feed = rng.standard_normal((3, d))
    f = [np.asarray(v, np.float16).astype(np.float64) for v in (feed, w1, b1, w2, b2)]
    want = np.maximum(f[0] @ f[1].T + f[2], 0) @ f[3].T + f[4]
    np.testing.assert_allclose(af.reference(y, feed), want, rtol=1e-9, atol=1e-9)
    with pytest.raises(af.ShapeError, match="linear"):
        af.nn.mlp(x, w1.T, b1, w2.T, b2)  # the x @ w layout is refused by shape


def test_the_bundled_transformer_block_keeps_its_values(rng):
    """Its projections were drawn for x @ w; stored transposed, the block computes what it
    did before mha took the [out, in] layout."""
    seq, width = 8, 16
    x, y = af.nn.transformer_block(seed=3, seq=seq, width=width, heads=2)
    gen = np.random.default_rng(3)
    drawn = [gen.standard_normal((width, width)) / np.sqrt(width) for _ in range(4)]
    square = [
        n.srcs[1].value
        for n in topological_order([y])
        if n.op == "linear" and n.srcs[1].shape == (width, width)
    ]
    assert len(square) == 4  # q, k, v and the output projection
    want = {np.asarray(w.T, np.float16).tobytes() for w in drawn}
    assert {v.tobytes() for v in square} == want


# ---- internal callers use the new names ---------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: af.nn.small_cnn(),
        lambda: af.nn.transformer_block(),
        lambda: af.models.zoo.build("resnet18"),
        lambda: af.models.zoo.build("vit_ti16"),
        lambda: af.linalg.solve(af.input((3, 3)), af.input((3, 1))),
        lambda: af.linalg.cholesky(af.input((3, 3))),
        lambda: af.linalg.lu(af.input((3, 3))),
        lambda: af.linalg.dominant_svd(af.input((4, 3))),
    ],
)
def test_internal_callers_raise_no_deprecation_warning(build):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        build()


# ---- a fast import ------------------------------------------------------------------------

_LAZY = """
import sys
import numpy as np
import aneforge as af
heavy = [m for m in ("scipy", "scipy.special", "numba", "llvmlite") if m in sys.modules]
assert not heavy, f"import aneforge imported {heavy}"
from aneforge.emulator import gemm
assert gemm.FAST_PATH_AVAILABLE  # numba is installed: not yet known to fail
x = af.input((2, 8), name="x")
y = af.gelu(x @ np.full((8, 3), 0.25)).sigmoid()
got = af.compile(y)(np.ones((2, 8)))
assert "scipy.special" in sys.modules and "numba" in sys.modules
assert gemm.FAST_PATH_AVAILABLE and gemm.NUMBA_IMPORT_ERROR is None
assert np.allclose(got, 1 / (1 + np.exp(-(2 * 0.5 * (1 + 0.9544997)))), atol=2e-3), got
print("ok")
"""


def test_import_aneforge_leaves_scipy_and_numba_for_first_use():
    run_python_with_env(_LAZY, {})
