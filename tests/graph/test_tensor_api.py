"""The public graph API: validation errors, weights, program calls and outputs.

src/aneforge/errors.py: every mistake raises an AneforgeError subclass whose message
names the op or input, the offending value and what to do instead; the subclasses also
derive from the matching built-in (ValueError, TypeError).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import aneforge as af
from conftest import fp16_values


def raises(exc, *fragments):
    """pytest.raises(exc) whose message must contain every fragment (literally)."""
    pattern = "".join(f"(?=.*{re.escape(f)})" for f in fragments)
    return pytest.raises(exc, match=re.compile(pattern, re.S))


# ---- the error hierarchy -----------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "builtin"),
    [
        (af.ShapeError, ValueError),
        (af.AttributeValueError, ValueError),
        (af.DTypeError, TypeError),
        (af.WeightRangeError, ValueError),
        (af.InputError, ValueError),
        (af.OptionError, ValueError),
    ],
)
def test_error_classes_derive_from_builtins(exc, builtin):
    assert issubclass(exc, af.AneforgeError)
    assert issubclass(exc, builtin)


# ---- rank ----------------------------------------------------------------------------


def test_rank_above_five_at_input_names_the_input_and_shape():
    with raises(af.ShapeError, "'big'", "(1, 2, 3, 4, 5, 6)", "rank 6", "5"):
        af.input((1, 2, 3, 4, 5, 6), name="big")
    assert af.input((1, 2, 3, 4, 5)).ndim == 5


@pytest.mark.parametrize(
    ("build", "op", "shape"),
    [
        (lambda x: af.expand_dims(x, 0), "expand_dims", "(1, 2, 1, 3, 1, 2)"),
        (lambda x: af.reshape(x, (2, 1, 1, 1, 3, 2)), "reshape", "(2, 1, 1, 1, 3, 2)"),
    ],
)
def test_rank_above_five_at_an_op_output_names_the_op_and_shape(build, op, shape):
    x = af.input((2, 1, 3, 1, 2))
    with raises(af.ShapeError, op, shape, "rank 6"):
        build(x)


def test_empty_and_non_integer_input_shapes():
    with raises(af.ShapeError, "(2, 0)"):
        af.input((2, 0))
    with pytest.raises(af.ShapeError):
        af.input((2, "a"))
    assert af.input(7).shape == (7,)


# ---- broadcasting and shape clashes --------------------------------------------------


def test_broadcast_clash_names_both_shapes():
    with raises(af.ShapeError, "add", "(3, 4)", "(5, 4)"):
        af.input((3, 4)) + af.input((5, 4))
    with raises(af.ShapeError, "select", "(2, 3)", "(4, 3)"):
        af.select(af.input((2, 3)), af.input((4, 3)), 0.0)
    with raises(af.ShapeError, "mul", "(2, 3)", "(4,)"):
        af.input((2, 3)) * np.ones(4)


@pytest.mark.parametrize(
    ("build", "exc", "fragments"),
    [
        (lambda: af.input((2, 3)) @ np.zeros((4, 2)), af.ShapeError, ("matmul", "3", "4")),
        (lambda: af.bmm(af.input((2, 3, 4)), af.input((3, 4, 2))), af.ShapeError, ("bmm",)),
        (lambda: af.linear(af.input((2, 4)), np.zeros((3, 5))), af.ShapeError, ("linear",)),
        (
            lambda: af.concat([af.input((2, 3)), af.input((3, 3))], axis=1),
            af.ShapeError,
            ("concat", "(2, 3)", "(3, 3)"),
        ),
        (lambda: af.reshape(af.input((2, 3)), (4, 2)), af.ShapeError, ("reshape", "(2, 3)")),
        (lambda: af.squeeze(af.input((2, 3)), 0), af.ShapeError, ("squeeze",)),
        (lambda: af.input((3, 4))[3], af.ShapeError, ("index", "3")),
        (lambda: af.input((3, 4))[2:1], af.ShapeError, ("slice",)),
        (lambda: af.pixel_shuffle(af.input((1, 6, 2, 2)), 2), af.ShapeError, ("6",)),
        (lambda: af.pixel_unshuffle(af.input((1, 2, 5, 4)), 2), af.ShapeError, ("5",)),
        (lambda: af.layer_norm(af.input((2, 8)), np.ones(4)), af.ShapeError, ("layer_norm",)),
        (
            lambda: af.group_norm(af.input((1, 6, 4)), 4),
            af.ShapeError,
            ("group_norm", "groups=4", "6"),
        ),
    ],
)
def test_shape_errors(build, exc, fragments):
    with raises(exc, *fragments):
        build()


# ---- attribute validation --------------------------------------------------------------

X4 = (1, 3, 8, 8)
W4 = np.zeros((4, 3, 3, 3))


@pytest.mark.parametrize(
    ("build", "exc", "fragments"),
    [
        (lambda x: af.conv(x, W4, stride=-1), af.AttributeValueError, ("conv", "stride", "-1")),
        (lambda x: af.conv(x, W4, stride=0), af.AttributeValueError, ("stride",)),
        (lambda x: af.conv(x, W4, dilation=0), af.AttributeValueError, ("dilation",)),
        (lambda x: af.conv(x, W4, padding=(1, 2, 3)), af.AttributeValueError, ("pad", "(1, 2, 3)")),
        (lambda x: af.conv(x, W4, padding=-1), af.AttributeValueError, ("pad",)),
        (
            lambda x: af.conv(x, W4, stride=(1, 2, 1)),
            af.AttributeValueError,
            ("stride", "(1, 2, 1)"),
        ),
        (lambda x: af.conv(x, W4, groups=0), af.AttributeValueError, ("groups",)),
        (lambda x: af.conv(x, W4, stride=1.5), af.AttributeValueError, ("stride",)),
        (
            lambda x: af.conv(x, np.zeros((4, 1, 3, 3)), groups=3),
            af.ShapeError,
            ("groups=3", "4"),
        ),
        (
            lambda x: af.conv(af.input((1, 6, 8, 8)), np.zeros((4, 3, 3, 3)), groups=4),
            af.ShapeError,
            ("groups=4", "6"),
        ),
        (
            lambda x: af.conv(af.input((1, 1, 3, 3)), np.zeros((1, 1, 5, 5))),
            af.ShapeError,
            ("kernel 5", "3"),
        ),
        (
            lambda x: af.conv(x, np.zeros((4, 3, 3, 3)), np.zeros(5)),
            af.ShapeError,
            ("bias", "(4,)"),
        ),
        (lambda x: af.conv(af.input((2, 3)), np.zeros((1, 3, 1))), af.ShapeError, ("NCW",)),
        (
            lambda x: af.conv_transpose(x, np.zeros((3, 2, 2, 2)), stride=2, output_padding=2),
            af.AttributeValueError,
            ("output_padding",),
        ),
        (lambda x: af.max_pool(x, 2, stride=0), af.AttributeValueError, ("max_pool", "stride")),
        (lambda x: af.max_pool(x, 9), af.ShapeError, ("max_pool",)),
        (lambda x: af.avg_pool(x, 2, padding=2), af.ShapeError, ("avg_pool", "pad")),
        (lambda x: af.avg_pool(x, (2, 2, 2)), af.AttributeValueError, ("kernel",)),
        (lambda x: af.upsample(x, 0), af.AttributeValueError, ("scale",)),
        (lambda x: af.upsample(x, 2, mode="cubic"), af.AttributeValueError, ("mode", "cubic")),
        (lambda x: af.softmax(x, axis=4), af.AttributeValueError, ("softmax", "axis 4")),
        (lambda x: af.softmax(x, axis=-5), af.AttributeValueError, ("axis -5",)),
        (lambda x: af.sum(x, axis=(0, 4)), af.AttributeValueError, ("sum", "axis 4")),
        (lambda x: af.sum(x, axis=(1, -3)), af.AttributeValueError, ("sum", "repeat")),
        (lambda x: af.sum(x, keepdims=1), af.AttributeValueError, ("keepdims",)),
        (lambda x: af.layer_norm(x, axis=7), af.AttributeValueError, ("layer_norm", "7")),
        (lambda x: af.concat([x, x], axis=4), af.AttributeValueError, ("concat", "4")),
        (lambda x: af.transpose(x, (0, 1, 1, 2)), af.AttributeValueError, ("axes", "(3, 2, 1, 0)")),
        (lambda x: af.relu(x, alpha=0.1), af.AttributeValueError, ("relu", "unknown", "alpha")),
        (lambda x: af.gelu(x, approximate="fast"), af.AttributeValueError, ("fast",)),
        (lambda x: af.elu(x, alpha=float("nan")), af.AttributeValueError, ("alpha", "finite")),
        (lambda x: af.clip(x, lo="low"), af.AttributeValueError, ("lo",)),
        (lambda x: af.slice(x, (0, 0), (1, 1)), af.AttributeValueError, ("slice",)),
        (
            lambda x: af.slice(x, (0, 0, 0, 0), (1, 1, 1, 1), (1, 0, 1, 1)),
            af.AttributeValueError,
            ("steps",),
        ),
        (lambda x: x[..., ::-1], af.AttributeValueError, ("negative",)),
        (lambda x: x[..., 0, ...], af.AttributeValueError, ("Ellipsis",)),
        (lambda x: af.group_norm(x, 0), af.AttributeValueError, ("groups",)),
        (lambda x: af.pixel_shuffle(x, 0), af.AttributeValueError, ("factor",)),
        (lambda x: af.make("no_such_op", x), af.AttributeValueError, ("no_such_op",)),
    ],
)
def test_bad_attributes(build, exc, fragments):
    x = af.input(X4)
    with raises(exc, *fragments) as info:
        build(x)
    assert isinstance(info.value, af.AneforgeError)
    assert isinstance(info.value, ValueError)


def test_cumsum_on_other_axis_is_rejected():
    with raises(af.ShapeError, "cumsum", "axis=0"):
        af.cumsum(af.input((3, 4)), axis=0)


# ---- weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_float_weights_are_accepted_and_cast(dtype):
    value = np.array([[0.1, -2.5], [1e-7, 65504.0]], dtype=dtype)
    w = af.weight(value, name="w")
    assert w.op == "weight" and w.name == "w" and w.shape == (2, 2)
    assert w.value.dtype == np.float16
    np.testing.assert_array_equal(w.value, value.astype(np.float16))
    with pytest.raises(ValueError):
        w.value[0, 0] = 1.0  # the stored fp16 copy is read-only


def test_weight_copies_the_array():
    value = np.ones(3)
    w = af.weight(value)
    value[0] = 7.0
    np.testing.assert_array_equal(w.value, [1.0, 1.0, 1.0])


def test_python_scalars_become_weights():
    assert af.weight(2).shape == () and af.weight(2).value == 2.0
    assert af.weight(0.5).value == 0.5


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (np.array([1, 2]), "integer"),
        (np.array([1, 2], np.uint8), "unsigned integer"),
        (np.array([True, False]), "bool"),
        (True, "bool"),
        (np.array([1 + 2j]), "complex"),
        (np.array([None, 1.0], dtype=object), "object"),
        (np.array(["a"]), "string"),
    ],
)
def test_non_float_weights_raise_dtype_error(value, why):
    with raises(af.DTypeError, "'bad'", why) as info:
        af.weight(value, name="bad")
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, af.AneforgeError)


def test_integer_array_operand_raises_dtype_error():
    with raises(af.DTypeError, "add", "integer"):
        af.input((2,)) + np.array([1, 2])


@pytest.mark.parametrize("value", [1e6, -70000.0, 65520.0])
def test_out_of_range_weight_raises_naming_weight_and_value(value):
    with raises(af.WeightRangeError, "'big'", f"{abs(value):g}", "65504") as info:
        af.weight(np.array([1.0, value], np.float32), name="big")
    assert isinstance(info.value, ValueError)


def test_out_of_range_operand_raises_weight_range_error():
    with raises(af.WeightRangeError, "1e+06"):
        af.input((2,)) * np.float32(1e6)


def test_weights_holding_inf_or_nan_on_purpose_are_kept():
    w = af.weight(np.array([np.inf, -np.inf, np.nan]))
    assert np.isinf(w.value[:2]).all() and np.isnan(w.value[2])


# ---- program inputs --------------------------------------------------------------------


def two_input_program():
    a = af.input((2,), name="a")
    b = af.input((3,), name="b")
    # b is used first in the graph, but the program takes inputs in creation order.
    return af.compile(af.concat([b, a * 10.0]))


def test_inputs_are_taken_in_creation_order_and_by_name():
    prog = two_input_program()
    assert [t.name for t in prog.inputs] == ["a", "b"]
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    want = [3.0, 4.0, 5.0, 10.0, 20.0]
    np.testing.assert_array_equal(prog(a, b), want)
    np.testing.assert_array_equal(prog(b=b, a=a), want)
    np.testing.assert_array_equal(prog(a, b=b), want)


def test_wrong_shape_names_input_expected_and_given():
    prog = two_input_program()
    with raises(af.InputError, "'a'", "expected shape (2,)", "given (3,)"):
        prog(np.ones(3), np.ones(3))
    with raises(af.InputError, "'b'", "(3,)", "(2, 3)"):
        prog(np.ones(2), np.ones((2, 3)))


def test_missing_extra_and_unknown_inputs():
    prog = two_input_program()
    with raises(af.InputError, "missing", "'b'"):
        prog(np.ones(2))
    with raises(af.InputError, "missing", "'a'", "'b'"):
        prog()
    with raises(af.InputError, "2 input(s)", "got 3"):
        prog(np.ones(2), np.ones(3), np.ones(1))
    with raises(af.InputError, "no input named 'c'", "'a'", "'b'"):
        prog(np.ones(2), c=np.ones(3))
    with raises(af.InputError, "'a'", "both"):
        prog(np.ones(2), a=np.ones(2))


def test_non_numeric_input_raises_dtype_error():
    prog = two_input_program()
    with raises(af.DTypeError, "'a'"):
        prog(np.array([1j, 2j]), np.ones(3))


def test_inputs_are_rounded_to_fp16_and_overflow_warns():
    x = af.input((3,), name="x")
    prog = af.compile(x * 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in-range values must not warn
        got = prog(np.array([0.1, 1.0, -3.0]))
    np.testing.assert_array_equal(got, np.array([0.1, 1.0, -3.0], np.float16))
    with pytest.warns(af.PrecisionWarning, match="'x'.*1e\\+06"):
        got = prog(np.array([1e6, 1.0, 1.0]))
    assert got[0] == np.inf


def test_integer_and_list_inputs_are_cast():
    x = af.input((3,), name="x")
    prog = af.compile(x * 0.5)
    np.testing.assert_array_equal(prog(np.array([1, 2, 3], np.int32)), [0.5, 1.0, 1.5])
    np.testing.assert_array_equal(prog([1.0, 2.0, 4.0]), [0.5, 1.0, 2.0])


# ---- tensors are immutable -------------------------------------------------------------


def test_tensor_attributes_cannot_be_assigned():
    x = af.input((2, 3), name="x")
    y = af.softmax(x, axis=0)
    with pytest.raises(AttributeError, match="immutable"):
        x.shape = (3, 2)
    with pytest.raises(AttributeError):
        y.op = "relu"
    with pytest.raises(AttributeError):
        y.new_field = 1
    with pytest.raises(TypeError, match="read-only"):
        y.attrs["axis"] = 1
    with pytest.raises(TypeError):
        y.attrs.update(axis=1)
    assert x.shape == (2, 3) and y.op == "softmax" and y.attrs["axis"] == 0


def test_tensor_attributes_cannot_be_deleted():
    # tensor.py: "The lazy, immutable fp16 tensor graph". Deleting a field mutates the
    # node as much as assigning it (a program built from it then fails to run).
    x = af.input((2, 3), name="x")
    with pytest.raises(AttributeError):
        del x.shape
    with pytest.raises(AttributeError):
        del x.name
    assert x.shape == (2, 3) and x.name == "x"


def test_tensor_has_no_truth_value():
    x = af.input((2,))
    with pytest.raises(TypeError, match="select"):
        bool(x > 0)


def test_tensor_introspection():
    x = af.input((2, 3, 4), name="img")
    assert x.ndim == 3 and x.size == 24 and x.dtype == "float16"
    assert "img" in repr(x) and "(2, 3, 4)" in repr(x)
    y = x.relu()
    assert y.op == "relu" and y.srcs == (x,) and y.shape == x.shape


# ---- compile options and outputs -------------------------------------------------------


@pytest.mark.parametrize("opt", ["bogus", 3, True, None])
def test_compile_unknown_option_raises_option_error(opt):
    with raises(af.OptionError, "opt", repr(opt)):
        af.compile(af.input((2,)).relu(), opt=opt)


def test_compile_rejects_non_tensors():
    with pytest.raises(af.OptionError):
        af.compile([])
    with pytest.raises(af.OptionError):
        af.compile([af.input((2,)), np.ones(2)])


def test_opt_zero_and_routes_run_the_same_graph():
    x = af.input((3,))
    node = (x * 3.0).exp()
    arr = np.array([0.1, 0.2, 0.3])
    np.testing.assert_array_equal(af.compile(node)(arr), af.compile(node, opt="routes")(arr))


def test_outputs_are_float32_and_a_tuple_for_several(rng):
    x = af.input((4,))
    arr = fp16_values(rng, (4,))
    one = af.compile(x.relu())(arr)
    assert isinstance(one, np.ndarray) and one.dtype == np.float32 and one.shape == (4,)
    several = af.compile([x.relu(), x.sum(), x @ np.ones((4, 2))])(arr)
    assert isinstance(several, tuple) and len(several) == 3
    assert all(o.dtype == np.float32 for o in several)
    assert [o.shape for o in several] == [(4,), (), (2,)]


def test_reference_gives_float64_of_fp16_rounded_inputs():
    x = af.input((2,))
    ref = af.reference(x * 3.0, np.array([0.1, 1.0]))
    assert ref.dtype == np.float64
    np.testing.assert_array_equal(ref, [3 * float(np.float16(0.1)), 3.0])
    pair = af.reference([x + 1.0, x - 1.0], np.array([0.5, 2.0]))
    assert isinstance(pair, tuple) and len(pair) == 2


def test_unknown_device_raises_option_error():
    x = af.input((2,))
    with raises(af.OptionError, "tpu"):
        af.compile(x.relu())(np.ones(2), device="tpu")


def mixed_graph(rng):
    img = af.input((2, 4, 9, 9), name="img")
    tok = af.input((2, 6, 16), name="tok")
    h = af.conv(img, rng.standard_normal((8, 2, 3, 3)), rng.standard_normal(8), padding=1, groups=2)
    h = af.batch_norm(h, np.zeros(8), np.ones(8) * 2.0, np.ones(8), np.zeros(8)).relu()
    h = af.max_pool(h, 2, stride=2, padding=1)
    h = af.conv_transpose(h, rng.standard_normal((8, 4, 2, 2)) * 0.3, stride=2)
    h = af.upsample(af.avg_pool(h, 2), 2, mode="bilinear")
    t = af.layer_norm(tok, np.ones(16), np.zeros(16))
    att = af.softmax(af.bmm(t, af.transpose(t, (0, 2, 1))) * 0.25)
    t2 = af.bmm(att, t) @ (rng.standard_normal((16, 33)) * 0.25)
    t2 = af.linear(af.gelu(t2), rng.standard_normal((16, 33)) * 0.2, rng.standard_normal(16))
    return [h, t2.cumsum(), af.rms_norm(t2).sum(axis=-1)]


def test_reference_device_is_bit_identical_to_the_default(rng):
    outs = mixed_graph(rng)
    prog = af.compile(outs)
    img = fp16_values(rng, (2, 4, 9, 9))
    tok = fp16_values(rng, (2, 6, 16))
    default = prog(img, tok)
    ref_dev = prog(img, tok, device="reference")
    emu = prog(tok=tok, img=img, device="emulator")
    for a, b, c, node in zip(default, ref_dev, emu, outs):
        assert a.shape == node.shape
        assert np.isfinite(a).all()
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
        np.testing.assert_array_equal(a.view(np.uint32), c.view(np.uint32))
    # and the emulator is close to (but not the same as) the float64 answer
    exact = af.reference(prog, img, tok)
    assert not all(np.array_equal(a, e) for a, e in zip(default, exact))
    for a, e in zip(default, exact):
        assert af.compare(a, e)["cosine"] > 0.999


def test_compiling_twice_gives_the_same_node_order(rng):
    outs = mixed_graph(rng)
    first = [n.op for n in af.compile(outs).nodes]
    second = [n.op for n in af.compile(outs).nodes]
    assert first == second
    assert first.index("conv") < first.index("batch_norm") < first.index("conv_transpose")
