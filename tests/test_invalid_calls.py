"""Invalid calls over the whole op registry raise an AneforgeError naming the culprit.

A generator (plain loops over fixed catalogues, so every run makes the same cases)
starts from one valid call per registered op and breaks it in every way a user can:

- each attribute in turn takes every value that is wrong for its kind: non-integers
  (2.5, "3", True, inf, nan) and out-of-range integers where integers are expected,
  bools, strings, arrays and values past the fp16 range where floats are expected,
  dicts, sets, strings and ragged or nested lists where sequences are expected, None
  where None means nothing, and objects, complex numbers and tensors everywhere;
- each operand in turn becomes None, a ragged list, a string, an object, an integer or
  complex array, an int past float64, a rank-6 array;
- the op gets one input too few or too many (``make`` directly);
- ``af.input`` gets shapes holding non-integer, negative, zero or huge dims;
- indexing gets arrays, lists, None, floats, bools, tensors, zero and negative steps;
- every public op function gets None (and a dict) for each of its positional arguments.

Each case must raise an :class:`aneforge.AneforgeError` subclass (never a ValueError,
TypeError, IndexError or OverflowError from inside NumPy or Python, never a silent
acceptance) whose message names the attribute (by its key or by the public argument that
sets it, NumPy's ``axis`` for ``axes``), the op or the input. Then one regression test per
defect fuzzing found in argument handling, and a table of messages that must name the
argument as the user wrote it.
"""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.devices import get_device
from aneforge.errors import SizeLimitError
from aneforge.graph.registry import all_ops, arg_name, get_op
from aneforge.numerics.paired import Paired


def x23():
    return af.input((2, 3))


def w(*shape):
    return af.weight(np.full(shape, 0.5))


# One valid call per op: (operands, attributes), built with make(name, *operands, **attrs).
def base_calls():
    img = af.input((1, 2, 4, 4))
    seq = af.input((1, 4, 8))
    return {
        **{n: ((x23(),), {}) for n in _UNARY},
        "gelu": ((x23(),), {"approximate": "tanh"}),
        "elu": ((x23(),), {"alpha": 0.5}),
        "leaky_relu": ((x23(),), {"alpha": 0.1}),
        "clip": ((x23(),), {"lo": -1.0, "hi": 1.0}),
        **{n: ((x23(), x23()), {}) for n in _BINARY},
        "select": ((x23(), x23(), x23()), {}),
        "matmul": ((x23(), w(3, 4)), {}),
        "bmm": ((x23(), af.input((3, 4))), {}),
        "linear": ((x23(), w(4, 3), w(4)), {}),
        "conv": (
            (img, w(3, 2, 3, 3), w(3)),
            {"stride": 1, "pad": 1, "dilation": 1, "groups": 1},
        ),
        "conv_transpose": (
            (img, w(2, 3, 2, 2)),
            {"stride": 2, "pad": 0, "output_padding": 0, "dilation": 1, "groups": 1},
        ),
        "layer_norm": ((x23(),), {"axis": -1, "eps": 1e-5}),
        "rms_norm": ((x23(),), {"axis": -1, "eps": 1e-5}),
        "l2_norm": ((x23(),), {"axis": -1, "eps": 1e-4}),
        "group_norm": ((img,), {"groups": 2, "eps": 1e-5}),
        "batch_norm": ((img, w(2), w(2)), {"eps": 1e-5}),
        **{
            n: ((x23(),), {"axes": (1,), "keepdims": False})
            for n in ("sum", "mean", "amax", "amin")
        },
        "softmax": ((x23(),), {"axis": -1}),
        "cumsum": ((x23(),), {}),
        "reshape": ((x23(),), {"shape": (3, 2)}),
        "transpose": ((x23(),), {"perm": (1, 0)}),
        "concat": ((x23(), x23()), {"axis": 0}),
        "slice": ((x23(),), {"begins": (0, 0), "ends": (2, 2), "steps": (1, 1)}),
        "squeeze": ((af.input((1, 3)),), {"axes": (0,)}),
        "expand_dims": ((x23(),), {"axes": (0,)}),
        "pixel_shuffle": ((af.input((1, 4, 2, 2)),), {"factor": 2}),
        "pixel_unshuffle": ((img,), {"factor": 2}),
        "cast": ((x23(),), {"dtype": "float16"}),
        "gather": ((x23(),), {"indices": (1, 0), "axis": 0}),
        "embedding": ((w(5, 3), af.input((2, 3), dtype="uint16")), {}),
        "embedding_fp16_ids": ((w(5, 3), x23()), {}),
        "int_to_fp16": ((af.input((2, 3), dtype="int16"),), {}),
        "max_pool": ((img,), {"kernel": 2, "stride": 2, "pad": 0}),
        "avg_pool": ((img,), {"kernel": 2, "stride": 2, "pad": 0, "count_include_pad": False}),
        "upsample": ((img,), {"scale": 2, "mode": "nearest", "align_corners": False}),
        "sdpa": ((seq, seq, seq), {"scale": 0.5, "has_mask": False}),
        "argmax": ((x23(),), {"axis": -1, "keepdims": False}),
        "topk": ((x23(),), {"k": 2, "axis": -1, "largest": True, "output": "values"}),
        "sort": ((x23(),), {"axis": -1, "descending": False}),
        "minmax_norm": ((x23(),), {"axes": (1,), "eps": 1e-4}),
        "flatten": ((af.input((2, 3, 4)),), {"axis": 1}),
        "lrn": ((af.input((1, 4, 3, 3)),), {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}),
        "space_to_channel": ((img,), {"factor": 2}),
        "channel_to_space": ((af.input((1, 8, 2, 2)),), {"factor": 2}),
        "space_to_batch": ((img,), {"factor": 2}),
        "batch_to_space": ((af.input((4, 2, 2, 2)),), {"factor": 2}),
        "input_view": ((af.input((4, 6)),), {"begins": (1, 2), "sizes": (2, 3)}),
        "dynamic_slice": ((af.input((6,)), af.input((1,))), {"sizes": (2,)}),
        "cross_product": ((af.input((4, 3)), af.input((4, 3))), {"axis": -1}),
        "cross_correlation": ((af.input((1, 3, 8, 8)), af.input((3, 3, 2))), {}),
        "cost_volume": ((img, img), {"max_disp": 2}),
        "fps": ((af.input((8, 3)),), {"k": 3}),
        "radius_search": (
            (af.input((8, 3)), af.input((2, 3))),
            {"radius": 1.0, "max_neighbors": 3},
        ),
        "scaled_elementwise": ((x23(), x23()), {"op": "add", "scale": 0.5}),
    }


_UNARY = [
    "neg", "relu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "inverse", "abs",
    "square", "sin", "cos", "erf", "softplus", "relu6", "sign", "floor", "ceil", "round",
]  # fmt: skip
_BINARY = [
    "add", "sub", "mul", "div", "maximum", "minimum", "pow", "equal", "not_equal", "less",
    "less_equal", "greater", "greater_equal",
]  # fmt: skip
SOURCES = ("input", "weight")


class _Opaque:
    """A value of no type aneforge knows."""

    def __repr__(self):
        return "<opaque>"


# Wrong for an attribute of any kind.
ANY_BAD = [
    _Opaque(),
    1 + 2j,
    b"abc",
    np.ones((2, 2)),
    {"a": 1},
    frozenset({1}),
    float("nan"),
    af.input((2,)),
]
# fmt: off
BAD_BY_KIND = {
    "int": [2.5, 2.0, "3", True, np.True_, float("inf"), np.array(2), np.array([2]), [2],
            -(10**9), 10**9, np.float64(1.0)],
    "ints": [[2.5], ["3"], [True], [None], [[1]], {1: 2}, {0}, "12", np.ones((2, 2), int),
             [np.array([1])], float("inf"), [float("inf")], -(10**9), 10**9, (2.0,)],
    "float": [True, np.False_, "1.0", np.array([0.5]), np.array(0.5), [0.5], (0.5,),
              float("inf"), -float("inf"), 10**400],
    "float_fp16": [1e5, -7e4, 65520.0],
    "bool": [1, 0, 1.0, "True", np.array([True]), [True]],
    "choice": [1, 2.5, "bogus", np.array(["nearest"]), ["nearest"], True],
    "other": [True, 2.5, "bogus", [[1]]],
}
# fmt: on
# Where 10**9 is a valid value: a stride past the input takes one window. Everywhere else
# it is out of range or, where it makes the output grow (a pad, a scale, a count), past
# the size limit. (lrn's size=10**9, a window wider than the channels, is meaningful too,
# but its kernel pads the channels by size // 2 and dies allocating: until it does not, it
# must be refused when built, as upsample(x, 10**9) is.)
HUGE_IS_VALID = {
    ("conv", "stride"),
    ("max_pool", "stride"),
    ("avg_pool", "stride"),
    ("lrn", "size"),
}

BAD_OPERANDS = [
    None,
    [[1.0], [1.0, 2.0]],
    "abc",
    _Opaque(),
    np.array([1, 2]),
    np.array([1 + 1j]),
    10**400,
    np.ones((1, 1, 1, 1, 1, 2)),
    {1: 2.0},
]


def bad_attribute_values(spec):
    """Values that are wrong for an attribute described by ``spec``."""
    bad = list(ANY_BAD) + list(BAD_BY_KIND[spec.kind])
    if spec.kind == "float" and spec.fp16 != "bound":
        bad += BAD_BY_KIND["float_fp16"]
    if spec.default is not None or spec.required:
        bad.append(None)  # None means nothing here
    return bad


def names_culprit(err, *names) -> bool:
    """The message names an attribute or argument, or it is a size refusal, which names
    the op and the size its output would take (the culprit is then the op's call)."""
    text = str(err)
    return isinstance(err, SizeLimitError) or any(n in text for n in names)


def attempt(fn):
    """('ok', result) or ('error', exception); warnings are silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", fn()
        except af.AneforgeError as err:
            return "error", err
        except Exception as err:  # noqa: BLE001  (reported by the caller)
            return "escaped", err


def invalid_calls():
    """Every generated case: (label, thunk, names any one of which the message must
    hold, whether a valid result is acceptable)."""
    calls = base_calls()
    cases = []
    for name, (operands, attrs) in calls.items():
        op = get_op(name)
        for key, spec in op.attrs.items():
            for bad in bad_attribute_values(spec):
                given = dict(attrs, **{key: bad})
                valid = isinstance(bad, int) and bad == 10**9 and (name, key) in HUGE_IS_VALID
                names = (key, arg_name(name, key))  # the key, or the public argument's name
                cases.append(
                    (f"{name}({key}={bad!r})", _maker(name, operands, given), names, valid)
                )
        for i in range(len(operands)):
            for bad in BAD_OPERANDS:
                srcs = operands[:i] + (bad,) + operands[i + 1 :]
                cases.append(
                    (f"{name}(input {i}={bad!r:.30})", _maker(name, srcs, attrs), (name,), False)
                )
            scalar = operands[:i] + (af.input(()),) + operands[i + 1 :]
            cases.append((f"{name}(input {i} rank 0)", _maker(name, scalar, attrs), (name,), True))
        lo = op.arity if op.arity is not None else op.min_arity
        hi = op.arity if op.arity is not None else op.max_arity
        counts = {0, lo - 1} | ({hi + 1} if hi is not None else set())
        counts -= {len(operands)}
        for count in sorted(c for c in counts if c >= 0):
            srcs = (operands * 6)[:count]
            cases.append((f"{name} with {count} inputs", _maker(name, srcs, attrs), (name,), False))
        cases.append(
            (f"{name}(bogus=1)", _maker(name, operands, dict(attrs, bogus=1)), ("bogus",), False)
        )
    for name in SOURCES:
        cases.append((f"make({name!r})", lambda n=name: af.make(n), (name,), False))
    cases += _input_cases() + _index_cases() + _public_function_cases(calls)
    pair = Paired.from_array(np.array([3000.25, -1.5]))
    for bad in ("2", None, True, 3.0, 0.0, float("inf"), float("nan"), 10**400, np.ones(2)):
        cases.append(
            (f"Paired.scale({bad!r:.20})", lambda f=bad: pair.scale(f), ("factor",), False)
        )
    for bad in (object(), 3, ["emulator"], b"emulator", "no-such-device"):
        cases.append((f"get_device({bad!r:.20})", lambda d=bad: get_device(d), ("device",), False))
    return cases + _nn_cases()


def _nn_cases():
    """The helpers of ``af.nn`` with bad sizes, names and seeds."""
    x, eye = af.input((1, 4, 8)), np.eye(8)
    mlp_ws = (np.zeros((4, 8)), np.zeros(4), np.zeros((8, 4)), np.zeros(8))
    cases = []
    for bad in (0, 2.5, True, None, "2", 3):
        cases.append(
            (
                f"nn.mha(heads={bad!r})",
                lambda h=bad: af.nn.mha(x, eye, eye, eye, eye, heads=h),
                ("heads",),
                False,
            )
        )
    cases.append(
        (
            "nn.mha(rank 2)",
            lambda: af.nn.mha(af.input((4, 8)), eye, eye, eye, eye, 2),
            ("mha",),
            False,
        )
    )
    for bad in ("nope", None, "add", 3):
        cases.append(
            (
                f"nn.mlp(activation={bad!r})",
                lambda a=bad: af.nn.mlp(af.input((2, 8)), *mlp_ws, activation=a),
                ("activation",),
                False,
            )
        )
    for fn in (af.nn.small_cnn, af.nn.transformer_block):
        for bad in (-1, "x", 1.5, None):
            cases.append(
                (f"nn.{fn.__name__}(seed={bad!r})", lambda f=fn, s=bad: f(seed=s), ("seed",), False)
            )
    return cases


def _maker(name, operands, attrs):
    return lambda: af.make(name, *operands, **attrs)


def _input_cases():
    bad_dims = [2.5, "3", True, float("inf"), float("nan"), -1, 0, None, [2], np.array(2.0),
                np.float64(2.0), 1 + 0j]  # fmt: skip
    cases = []
    for rank in (1, 2, 3):
        for pos in range(rank):
            for bad in bad_dims:
                shape = [2] * rank
                shape[pos] = bad
                cases.append(
                    (f"input({shape!r})", lambda s=tuple(shape): af.input(s), ("input",), False)
                )
    for bad in ("23", {2: 3}, {2, 3}, None, np.ones((2, 2), int), _Opaque(), 2.0):
        cases.append((f"input({bad!r})", lambda s=bad: af.input(s), ("input",), False))
    return cases


def _index_cases():
    x = af.input((4, 3))
    keys = [np.array([0]), np.array(0), [0, 1], None, 1.5, True, x, "a", slice(None, None, 0),
            slice(None, None, -1), slice(0, 2.5), slice("a", None), (..., ...), (0, 0, 0),
            (slice(None), np.array([1]))]  # fmt: skip
    return [(f"x[{k!r:.30}]", lambda k=k: x[k], ("index",), False) for k in keys]


def _public_function_cases(calls):
    """None and a dict in each positional argument of every public op function."""
    cases = []
    for name in sorted(calls):
        fn = getattr(af, name)
        operands, attrs = calls[name]
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind == p.POSITIONAL_OR_KEYWORD
        ]
        args = _public_args(name, operands, attrs, params)
        for p in params:
            for bad in (None, {"k": 1}):
                if bad is None and p.default is None:
                    continue  # None is this argument's documented default
                given = dict(args, **{p.name: bad})
                cases.append(
                    (
                        f"af.{name}({p.name}={bad!r})",
                        lambda f=fn, g=given: f(**g),
                        (name, p.name),
                        False,
                    )
                )
    return cases


# Public argument names (NumPy's, PyTorch's) that differ from the attribute they set.
_ATTRIBUTE_OF = {"axis": "axes", "padding": "pad", "kernel_size": "kernel",
                 "scale_factor": "scale", "num_groups": "groups", "upscale_factor": "factor",
                 "downscale_factor": "factor"}  # fmt: skip


def _public_args(name, operands, attrs, params):
    """Keyword arguments of a valid public call."""
    if name == "concat":
        return {"tensors": list(operands), "axis": 0}
    args, srcs = {}, list(operands)
    for p in params:
        key = p.name if p.name in attrs else _ATTRIBUTE_OF.get(p.name)
        if key in attrs:
            args[p.name] = attrs[key]
        elif p.default is inspect.Parameter.empty and srcs:
            args[p.name] = srcs.pop(0)
    return args


CASES = invalid_calls()


def test_every_registered_op_has_a_valid_base_call_that_builds():
    calls = base_calls()
    assert set(calls) | set(SOURCES) == set(all_ops())
    for name, (operands, attrs) in calls.items():
        outcome, value = attempt(lambda n=name, o=operands, a=attrs: af.make(n, *o, **a))
        assert outcome == "ok", f"{name}: base call fails: {value}"


def test_the_generator_makes_hundreds_of_cases_of_every_kind():
    assert len(CASES) > 2000
    labels = " ".join(label for label, *_ in CASES)
    for fragment in ("=None", "=nan", "=True", "=inf", "input(", "x[", "af.concat", "rank 0"):
        assert fragment in labels, fragment


def run_once(out):
    """Compile ``out`` and run it on ones: a node that builds must also run."""
    prog = af.compile(out)
    return prog(*[np.ones(t.shape, np.float32) for t in prog.inputs])


def test_every_invalid_call_raises_an_aneforge_error_naming_the_culprit():
    escaped, accepted, unnamed, built = [], [], [], []
    for label, thunk, names, may_pass in CASES:
        outcome, value = attempt(thunk)
        if outcome == "escaped":
            escaped.append(f"{label}: {type(value).__name__}: {value}")
        elif outcome == "ok" and not may_pass:
            accepted.append(label)
        elif outcome == "ok":
            built.append((label, value))
        elif not names_culprit(value, *names):
            unnamed.append(f"{label}: {value}")
    for label, out in built:  # what builds (rank-0 operands) runs without escaping
        outcome, value = attempt(lambda o=out: run_once(o))
        if outcome == "escaped":
            escaped.append(f"{label} at run time: {type(value).__name__}: {value}")
    assert not escaped, f"{len(escaped)} escaped the contract:\n" + "\n".join(escaped[:40])
    assert not accepted, f"{len(accepted)} accepted silently:\n" + "\n".join(accepted[:40])
    assert not unnamed, f"{len(unnamed)} do not name the culprit:\n" + "\n".join(unnamed[:40])


# ---- point 5: attributes past the fp16 range are refused, as weights are --------------


@pytest.mark.parametrize(
    "build, op, attr",
    [
        (lambda x: af.layer_norm(x, eps=1e5), "layer_norm", "eps"),
        (lambda x: af.rms_norm(x, eps=-7e4), "rms_norm", "eps"),
        (lambda x: af.sdpa(x, x, x, scale=1e5), "sdpa", "scale"),
        (lambda x: af.leaky_relu(x, alpha=65520.0), "leaky_relu", "alpha"),
        (lambda x: af.scaled_elementwise(x, x, scale=1e9), "scaled_elementwise", "scale"),
        (lambda x: af.lrn(af.reshape(x, (1, 4, 2, 1)), bias=1e6), "lrn", "bias"),
    ],
)
def test_an_attribute_past_the_fp16_range_is_an_attribute_value_error(build, op, attr):
    x = af.input((1, 4, 2))
    with pytest.raises(af.AttributeValueError, match=f"{op}: {attr}=.*fp16 range.*65504"):
        build(x)


def test_the_attribute_range_rule_is_the_weight_rule():
    """Both accept 65504 (and 65519, which rounds to it) and refuse 65520 (rounds to inf)."""
    x = af.input((2, 8))
    for value in (65504.0, 65519.0):
        af.weight(np.array([value]))
        af.layer_norm(x, eps=value)
    with pytest.raises(af.WeightRangeError):
        af.weight(np.array([65520.0]))
    with pytest.raises(af.AttributeValueError, match="eps"):
        af.layer_norm(x, eps=65520.0)


def test_a_large_eps_in_range_matches_the_float64_formula():
    """eps=6e4 (held exactly enough in fp16) against layer norm written in float64."""
    v = np.arange(8.0).reshape(1, 8)
    got = af.compile(af.layer_norm(af.input((1, 8)), eps=6e4))(v)
    d = v - v.mean()
    want = d / np.sqrt((d * d).mean() + 6e4)
    np.testing.assert_allclose(got, want, rtol=4e-3, atol=0)


def test_clip_bounds_are_only_compared_so_any_finite_bound_is_taken():
    """clip(x, -1e9, 1e9) equals the float64 clip rounded to fp16 (here: x itself)."""
    v = np.array([-65504.0, -2.0, 0.5, 65504.0])
    got = af.compile(af.clip(af.input((4,)), lo=-1e9, hi=1e9))(v)
    np.testing.assert_array_equal(got, np.clip(v, -1e9, 1e9).astype(np.float16))


# ---- point 8: only integers are dims -----------------------------------------------------


@pytest.mark.parametrize(
    "shape, shown",
    [((2.5, 3), "2.5"), (("3",), "'3'"), ((True, 2), "True"), ((float("inf"),), "inf"),
     ((np.float64(2.0), 3), "2.0"), ("23", "'23'"), ({2, 3}, "{2, 3}"), (None, "None")],
)  # fmt: skip
def test_non_integer_dims_are_refused_naming_the_input_and_value(shape, shown):
    with pytest.raises(af.ShapeError, match="input 'x': shape must be integers") as info:
        af.input(shape, name="x")
    assert shown in str(info.value)


def test_numpy_integer_dims_are_dims_and_become_python_ints():
    x = af.input((np.int64(2), np.int32(3)))
    assert x.shape == (2, 3) and all(type(d) is int for d in x.shape)
    assert af.input(np.array([4, 1])).shape == (4, 1) and af.input(5).shape == (5,)


# ---- point 16: API calls that escaped the contract --------------------------------------


@pytest.mark.parametrize(
    "build, exc, fragment",
    [
        (lambda x: af.make("conv", x), af.ShapeError, "conv: takes 2 to 3 input(s), got 1"),
        (lambda x: af.make("input"), af.AttributeValueError, "af.input"),
        (lambda x: x + [[1.0], [1.0, 2.0]], af.ShapeError, "add input 1"),
        (lambda x: af.leaky_relu(x, alpha=np.array([0.1, 0.2])), af.AttributeValueError, "alpha"),
        (lambda x: af.softmax(x, axis=np.array([1])), af.AttributeValueError, "axis"),
        (lambda x: x[np.array([0])], af.AttributeValueError, "unsupported index"),
        (lambda x: x[::0], af.AttributeValueError, "step of 0"),
        (lambda x: x[0:1.5], af.AttributeValueError, "slice stop"),
        (lambda x: af.concat(None), af.ShapeError, "concat: tensors must be a list"),
        (lambda x: af.concat(x), af.ShapeError, "concat: tensors must be a list"),
        (lambda x: af.reshape(x, None), af.AttributeValueError, "reshape: attribute 'shape'"),
        (lambda x: af.transpose(x, "10"), af.AttributeValueError, "transpose: axes must be"),
        (lambda x: af.input((float("inf"),)), af.ShapeError, "inf"),
        (lambda x: af.linear(af.input(()), np.ones((2, 1))), af.ShapeError, "linear: input"),
        (lambda x: af.cumsum(af.input(())), af.ShapeError, "cumsum"),
        (lambda x: x + None, af.DTypeError, "add input 1: got None"),
        (lambda x: x * 10**400, af.WeightRangeError, "mul input 1"),
        (lambda x: af.make(["relu"], x), af.AttributeValueError, "op name"),
    ],
)
def test_api_calls_that_escaped_now_raise_aneforge_errors(build, exc, fragment):
    with pytest.raises(exc) as info:
        build(af.input((2, 3)))
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "factor",
    ["2", None, True, 3.0, float("inf"), 10**400],
    ids=["str", "None", "bool", "three", "inf", "huge_int"],
)
def test_paired_scale_refuses_a_bad_factor_naming_it(factor):
    with pytest.raises(af.AttributeValueError, match="Paired.scale: factor"):
        Paired.from_array(np.array([3000.25])).scale(factor)


def test_paired_scale_still_scales_by_powers_of_two():
    p = Paired.from_array(np.array([3000.25])).scale(np.float64(2.0**-4))
    got = af.compile([p.hi, p.lo])()
    assert float(got[0][0]) + float(got[1][0]) == 3000.25 / 16


def test_an_object_that_is_no_device_is_an_option_error_not_unavailable():
    with pytest.raises(af.OptionError, match="Device protocol") as info:
        get_device(object())
    assert not isinstance(info.value, af.DeviceUnavailable)


# ---- point 18: attributes fp16 rounds to zero or a coarse subnormal are reported --------


def test_eps_that_rounds_to_zero_warns_once_naming_value_and_consequence():
    x = af.input((1, 8))
    with pytest.warns(af.PrecisionWarning) as record:
        y = af.layer_norm(x, np.ones(8), np.arange(8.0) / 8, eps=1e-12)
    (w,) = [r for r in record if issubclass(r.category, af.PrecisionWarning)]
    text = str(w.message)
    assert "layer_norm: eps=1e-12 is 0 in fp16" in text and "NaN" in text
    assert w.filename == __file__  # it points at the user's line
    # The engine's rounding is kept: a zero-variance row gives NaN on the engine model,
    # where the float64 formula with eps 1e-12 gives the bias.
    row = np.full((1, 8), 3.0)
    assert np.isnan(af.compile(y)(row)).all()
    d = row - row.mean()
    want = d / np.sqrt((d * d).mean() + 1e-12) + np.arange(8.0) / 8
    np.testing.assert_array_equal(want, np.arange(8.0).reshape(1, 8) / 8)


def test_several_rounded_attributes_of_one_node_make_one_warning():
    x = af.input((1, 4, 2, 2))
    with pytest.warns(af.PrecisionWarning) as record:
        af.lrn(x, size=3, alpha=1e-9, bias=1e-7)
    (w,) = [r for r in record if issubclass(r.category, af.PrecisionWarning)]
    assert "alpha=1e-09 is 0 in fp16" in str(w.message)
    assert "bias=1e-07 is the fp16 subnormal 1.19209e-07" in str(w.message)


@pytest.mark.parametrize(
    "build",
    [
        lambda x: af.l2_norm(x),  # the default eps 1e-6: documented, not warned
        lambda x: af.layer_norm(x, eps=2.0**-24),  # a subnormal fp16 holds exactly
        lambda x: af.layer_norm(x, eps=float(np.float32(1e-5))),  # ONNX's float32 1e-5
        lambda x: af.clip(x, lo=1e-9),  # compared, not held
        lambda x: af.leaky_relu(x, alpha=1e-9),  # used unrounded inside one rounded step
    ],
)
def test_exact_close_default_and_unheld_attributes_do_not_warn(build):
    with warnings.catch_warnings():
        warnings.simplefilter("error", af.PrecisionWarning)
        build(af.input((2, 8)))


def test_the_precision_report_lists_attributes_fp16_rounds_away():
    x = af.input((2, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.PrecisionWarning)
        y = af.layer_norm(x, eps=1e-12)
    rep = af.precision_risk(y)  # listed without verbose=True; not in the signal
    (entry,) = rep.by_mode("attribute")
    assert entry.op == "layer_norm" and entry.informational and entry.proxy == 0.0
    assert "eps=1e-12 is 0 in fp16" in entry.detail and "2**-24" in entry.fix
    assert rep.signal == 0.0 and "attribute" in str(rep)
    assert not af.precision_risk(af.layer_norm(x, eps=1e-3)).by_mode("attribute")


# ---- point 19: no silent defaults ---------------------------------------------------------


@pytest.mark.parametrize(
    "build, fragment",
    [
        (lambda x: af.softmax(x, axis=None), "softmax: axis=None"),
        (lambda x: af.layer_norm(x, axis=None), "layer_norm: axis=None"),
        (lambda x: af.layer_norm(x, eps=None), "layer_norm: eps=None"),
        (lambda x: af.argmax(x, axis=None), "argmax: axis=None"),
        (lambda x: af.sum(x, axis={}), "sum: axis must be"),
        (lambda x: af.sum(x, axis={1: 0}), "sum: axis must be"),
        (lambda x: af.sum(x, axis={0, 1}), "sum: axis must be"),
        (lambda x: af.leaky_relu(x, alpha=True), "leaky_relu: alpha must be a number"),
        (lambda x: af.elu(x, alpha=np.True_), "elu: alpha must be a number"),
        (lambda x: af.cumsum(x, axis=True), "cumsum: axis must be an integer"),
        (lambda x: af.softmax(x, axis=1.0), "softmax: axis must be an integer"),
    ],
)
def test_none_dicts_sets_and_bools_are_not_quietly_read_as_defaults(build, fragment):
    with pytest.raises(af.AttributeValueError) as info:
        build(af.input((2, 3)))
    assert fragment in str(info.value)


def test_none_keeps_its_documented_meaning_where_it_is_the_default():
    x = af.input((2, 3))
    assert af.sum(x, axis=None).shape == ()
    assert af.transpose(x, None).shape == (3, 2)
    assert af.clip(x, lo=None, hi=1.0).attrs["lo"] is None


def test_upsample_past_the_size_limit_is_refused_at_build_time(monkeypatch):
    x = af.input((1, 1, 2, 2))
    with pytest.raises(af.AneforgeError, match=r"upsample output: 4000000000000000000 elements"):
        af.upsample(x, 10**9)
    assert af.upsample(x, 4).shape == (1, 1, 8, 8)
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "32")
    with pytest.raises(af.AneforgeError, match="upsample output: 64 elements"):
        af.upsample(x, 4)


# ---- messages name the argument the user wrote, not the node attribute it sets ----------

_IMG = (1, 4, 4, 4)


def _img():
    return af.input(_IMG)


# (call, the public argument's name, the attribute key the message must not name). The
# key is matched as a word: "pad" is not in "padding=", "kernel" not in "kernel_size".
_PUBLIC_NAMES = [
    (lambda: af.sum(x23(), axis=5), "sum: axis 5 is out of range", "axes"),
    (lambda: af.mean(x23(), axis=(0, 0)), "mean: axis (0, 0)", "axes"),
    (lambda: af.amax(x23(), axis=(0, -3)), "amax: axis (0, -3)", "axes"),
    (lambda: af.min(x23(), axis=2.5), "amin: axis must be an integer", "axes"),
    (lambda: af.max(x23(), axis=(0, 0)), "amax: axis (0, 0)", "axes"),
    (lambda: x23().sum(axis=-4), "sum: axis -4 is out of range", "axes"),
    (lambda: x23().mean(axis="0"), "mean: axis must be", "axes"),
    (lambda: af.squeeze(af.input((1, 3)), axis=1), "squeeze: axis", "axes"),
    (lambda: af.squeeze(af.input((1, 3)), axis=4), "squeeze: axis 4 is out of range", "axes"),
    (lambda: af.expand_dims(x23(), axis=(0, 0)), "expand_dims: axis (0, 0)", "axes"),
    (lambda: af.expand_dims(x23(), axis=2.5), "expand_dims: axis must be", "axes"),
    (lambda: af.conv(_img(), w(2, 4, 3, 3), padding=-1), "conv: padding must be >= 0", "pad"),
    (lambda: af.conv(_img(), w(2, 4, 3, 3), padding=(1, 2, 3)), "conv: padding (1, 2, 3)", "pad"),
    (lambda: af.conv(_img(), w(2, 4, 3, 3), padding=2.5), "conv: padding must be", "pad"),
    (lambda: af.conv(_img(), w(2, 4, 3, 3), padding=None), "conv: padding=None", "pad"),
    (lambda: af.conv(_img(), w(2, 4, 9, 9), padding=1), "with padding (1, 1)", "pad"),
    (lambda: af.conv_transpose(_img(), w(4, 2, 2, 2), padding=-1), "transpose: padding", "pad"),
    (lambda: af.conv_transpose(_img(), w(4, 2, 2, 2), padding=5), "padding=(5, 5)", "pad"),
    (lambda: af.max_pool(_img(), kernel_size=0), "max_pool: kernel_size must be >= 1", "kernel"),
    (lambda: af.max_pool(_img(), kernel_size=(2, 2, 2)), "max_pool: kernel_size (2, 2,", "kernel"),
    (lambda: af.max_pool(_img(), kernel_size=8), "max_pool: kernel_size (8, 8)", "kernel"),
    (lambda: af.max_pool(_img(), 2, padding=2), "max_pool: padding (2, 2)", "pad"),
    (lambda: af.avg_pool(_img(), 2, padding=-1), "avg_pool: padding must be >= 0", "pad"),
    (lambda: af.avg_pool(_img(), 2, padding=(1, 1, 1)), "avg_pool: padding (1, 1, 1)", "pad"),
    (lambda: af.avg_pool(_img(), 2, padding=2), "smaller than the kernel_size", "kernel"),
    (lambda: af.upsample(_img(), scale_factor=0), "upsample: scale_factor must be >= 1", "scale"),
    (lambda: af.upsample(_img(), scale_factor=(2, 2, 2)), "upsample: scale_factor (2,", "scale"),
    (lambda: af.upsample(_img(), scale_factor=2.5), "upsample: scale_factor must be", "scale"),
    (lambda: af.group_norm(_img(), num_groups=0), "group_norm: num_groups must be >= 1", "groups"),
    (lambda: af.group_norm(_img(), num_groups=3), "group_norm: num_groups=3 does not", "groups"),
    (lambda: af.group_norm(_img(), num_groups=2.5), "group_norm: num_groups must be", "groups"),
    (lambda: af.pixel_shuffle(_img(), 0), "pixel_shuffle: upscale_factor must be >= 1", "factor"),
    (lambda: af.pixel_shuffle(_img(), 3), "upscale_factor**2 = 9", "factor"),
    (lambda: af.pixel_unshuffle(_img(), 0), "pixel_unshuffle: downscale_factor must be", "factor"),
    (lambda: af.pixel_unshuffle(_img(), 3), "multiples of downscale_factor=3", "factor"),
    (lambda: af.transpose(x23(), (0, -1)), "transpose: axes must be >= 0", "perm"),
    (lambda: af.transpose(x23(), (0, 2.5)), "transpose: axes must be an integer", "perm"),
    (lambda: x23().transpose(0, 0), "transpose: axes (0, 0) are not a permutation", "perm"),
]  # fmt: skip


@pytest.mark.parametrize(
    "build, fragment, key",
    _PUBLIC_NAMES,
    ids=[f"{i}-{p[1][:24]}" for i, p in enumerate(_PUBLIC_NAMES)],
)
def test_a_bad_argument_is_named_as_the_user_wrote_it(build, fragment, key):
    with pytest.raises(af.AneforgeError) as info:
        build()
    text = str(info.value)
    assert fragment in text, text
    assert not re.search(rf"\b{key}\b", text), text


def test_make_names_the_public_argument_too_as_the_onnx_importer_builds_with_it():
    """make() takes the attribute keys, and its value messages give the NumPy/PyTorch
    name (the concept); unknown and missing attributes are named by their keys."""
    with pytest.raises(af.AttributeValueError, match="conv: padding must be >= 0"):
        af.make("conv", _img(), w(2, 4, 3, 3), pad=-1)
    with pytest.raises(af.AttributeValueError, match=r"max_pool: attribute 'kernel' is required"):
        af.make("max_pool", _img())
    with pytest.raises(af.AttributeValueError, match=r"unknown attribute\(s\) \['padding'\]"):
        af.make("conv", _img(), w(2, 4, 3, 3), padding=1)
