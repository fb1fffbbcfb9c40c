"""Hostile ONNX input: every malformed model, file or byte string gets a clear error.

Contract (src/aneforge/io/onnx_load.py, onnx_sizes.py, onnx_import.py): ``from_onnx``
either imports a model, and the import then runs and matches onnxruntime, or raises an
``AneforgeError`` subclass whose message is one line naming the culprit
(``UnsupportedModelError`` alone spans lines: it lists every unsupported node). Never
another exception, never a hang. Invalid models are refused with ``onnx.checker``'s
reason (full check); external data is read only from the model's folder or
``base_dir=``, never the current folder; sizes past ``$ANEFORGE_MAX_ELEMENTS`` are
refused before anything is allocated; paths must be regular files.

Yardsticks: ``onnx.checker`` and onnxruntime (which refuse the same invalid models, and
give the float32 outputs an import is compared with at the fp16 tolerance).

The generated cases (tests/io/hostile_onnx.py) run 4 seeds x 80 cases.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import onnx
import pytest
from hostile_onnx import (
    base_affine,
    base_chain,
    base_conv,
    base_function,
    base_grow,
    hostile_cases,
)
from onnx import TensorProto, helper, numpy_helper

import aneforge as af
from aneforge.errors import AneforgeError, SizeLimitError
from aneforge.io import OnnxImportError, UnsupportedModelError, from_onnx
from conftest import FP16_UNIT_ROUNDOFF
from guards import deadline

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")

FP16_TOL = 8 * FP16_UNIT_ROUNDOFF  # a few fp16 roundings per output, as test_onnx_import
FP16_MAX = 65504.0
HANG_S = 60  # a case still running after this long is a hang (generous: detection only)
SEEDS = range(4)
CASES_PER_SEED = 80


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort_session(model):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _ort_refuses(model) -> bool:
    try:
        _ort_session(model)
    except Exception:
        return True
    return False


def _close(got, want, tol=FP16_TOL) -> bool:
    """|got - want| <= tol * (|want| + max|want|) elementwise over the fp16 range, equal
    shapes; beyond it (a mutated weight of 1e16 saturates to 65504 with a
    ConstantSaturationWarning) the emulation must saturate or overflow the same way."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return False
    inside = np.abs(want) <= FP16_MAX
    beyond = ~inside & ~np.isnan(want)
    if not np.all(
        (np.sign(got[beyond]) == np.sign(want[beyond])) & (np.abs(got[beyond]) >= FP16_MAX)
    ):
        return False
    got, want = got[inside], want[inside]
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return bool(np.all(np.abs(got - want) <= tol * (np.abs(want) + scale) + 1e-30))


def assert_clean_error(err: AneforgeError, name: str) -> None:
    """The message names the culprit on one line (UnsupportedModelError: a headline
    and one line per problem)."""
    text = str(err)
    assert text.strip(), f"{name}: empty message from {type(err).__name__}"
    if isinstance(err, UnsupportedModelError):
        assert text.splitlines()[0].endswith("cannot be imported:"), f"{name}: {text}"
    else:
        assert "\n" not in text, f"{name}: {type(err).__name__} spans lines: {text!r}"


def import_or_refuse(case) -> str:
    """'refused' or 'imported' (and then matched onnxruntime where it accepts the model);
    anything else fails naming the case."""
    with deadline(HANG_S, case.name):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = from_onnx(case.model, **case.kwargs)
                prog = graph.compile()
        except AneforgeError as err:
            assert_clean_error(err, case.name)
            return "refused"
        except Exception as err:  # outside the contract
            raise AssertionError(f"{case.name}: {type(err).__name__}: {err}") from err
        try:
            session = _ort_session(case.model)
        except Exception:
            return "imported"  # onnxruntime refuses what the checker accepts (rare)
        want = session.run(None, {k: np.asarray(v, np.float32) for k, v in case.feeds.items()})
        got = prog(*[case.feeds[t.name] for t in prog.inputs])
        got = got if isinstance(got, (list, tuple)) else [got]
        for g, w in zip(got, want):
            assert _close(g, w), f"{case.name}: emulation {g} against onnxruntime {w}"
        return "imported"


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_hostile_models_import_cleanly_or_refuse_cleanly(seed):
    outcomes = [import_or_refuse(c) for c in hostile_cases(seed, CASES_PER_SEED)]
    # the generator reaches both sides of the contract
    assert outcomes.count("refused") > CASES_PER_SEED // 4
    assert outcomes.count("imported") > 0


def test_the_generator_is_deterministic():
    a = [(c.name, bytes(c.model) if isinstance(c.model, bytes) else c.model.SerializeToString())
         for c in hostile_cases(7, 20)]  # fmt: skip
    b = [(c.name, bytes(c.model) if isinstance(c.model, bytes) else c.model.SerializeToString())
         for c in hostile_cases(7, 20)]  # fmt: skip
    assert a == b


# ---- point 9: invalid models are refused with the checker's reason --------------------


def _relu_model(**kw):
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], **kw)


def _invalid_models():
    two_writers = _model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
        [_vi("x", [2])],
        [_vi("y", [2])],
    )
    two_inputs = _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2]), _vi("x", [2])], [_vi("y", [2])]
    )
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    w.dims[:] = [-3, 4]
    neg_dims = _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [3, 4])], [_vi("y", [3, 4])], [w]
    )
    conv, _ = base_conv(np.random.default_rng(0))
    conv.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("kernel_shape", "abc"))
    return {
        "two_writers": (two_writers, "SSA.*'y'.*output names multiple times"),
        "two_inputs": (two_inputs, "SSA.*'x'.*graph input names multiple times"),
        "neg_dims": (neg_dims, "Negative dimension.*w"),
        "kernel_shape": (conv, "kernel_shape.*INTS.*STRING"),
        "opset_99": (_relu_model(opset=99), "opset 99.*knows opsets up to"),
    }


@pytest.mark.parametrize("name", sorted(_invalid_models()))
def test_models_the_checker_and_onnxruntime_refuse_are_refused(name):
    model, reason = _invalid_models()[name]
    assert _ort_refuses(model)  # the independent yardstick refuses it too
    with pytest.raises(OnnxImportError, match=reason) as err:
        from_onnx(model)
    assert "\n" not in str(err.value)


def test_an_omitted_schema_default_does_not_trip_the_checker():
    """ONNX's inference of MeanVarianceNormalization's body fails without ``axes``;
    the model is valid (onnxruntime runs it) and imports."""
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    m = _model([node], [_vi("x", [2, 3, 2, 2])], [_vi("y", [2, 3, 2, 2])])
    x = np.random.default_rng(1).uniform(-2, 2, (2, 3, 2, 2)).astype(np.float16)
    want = _ort_session(m).run(None, {"x": x.astype(np.float32)})[0]
    assert _close(from_onnx(m).compile()(x), want)


# ---- point 10: external data never from the current folder ----------------------------


def _external_model(location="weights.bin", offset=None, length=None):
    m, _ = base_affine(np.random.default_rng(2))
    w = m.graph.initializer[0]
    value = numpy_helper.to_array(w)
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(v)
    return m, value


def _expected(m, weights):
    """onnxruntime's output on the model with its weight inlined (the reference)."""
    inline = onnx.ModelProto()
    inline.CopyFrom(m)
    inline.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, "w"))
    x = np.random.default_rng(3).uniform(-2, 2, (3, 4)).astype(np.float16).astype(np.float32)
    return x, _ort_session(inline).run(None, {"x": x})[0]


def test_bytes_never_read_external_data_from_the_current_folder(tmp_path, monkeypatch):
    m, value = _external_model("secret.bin")
    (tmp_path / "secret.bin").write_bytes(value.tobytes())
    monkeypatch.chdir(tmp_path)
    for source in (m, m.SerializeToString()):
        with pytest.raises(OnnxImportError, match="'secret.bin'.*no folder.*base_dir="):
            from_onnx(source)
    # given a folder, the same bytes import with the file's values
    x, want = _expected(m, value)
    got = from_onnx(m.SerializeToString(), base_dir=tmp_path).compile()(x)
    assert _close(got, want)
    assert m.graph.initializer[0].data_location == TensorProto.EXTERNAL  # caller's proto kept


def test_a_path_reads_external_data_from_its_own_folder(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    m, value = _external_model("weights.bin", offset=16, length=48)
    (folder / "weights.bin").write_bytes(b"\x00" * 16 + np.asarray(value).tobytes())
    onnx.save(m, folder / "m.onnx")
    (tmp_path / "weights.bin").write_bytes(b"\xff" * 64)  # a decoy in the current folder
    monkeypatch.chdir(tmp_path)
    x, want = _expected(m, value)
    assert _close(from_onnx(folder / "m.onnx").compile()(x), want)


@pytest.mark.parametrize(
    "location, why",
    [
        ("/etc/passwd", "absolute path"),
        ("../outside.bin", r"climbs out.*'\.\.'"),
        ("a/../../outside.bin", r"climbs out"),
        ("", "not a file name"),
        ("link.bin", "symlink"),
        ("missing.bin", "no such file"),
        ("fifo.bin", "not a regular file"),
    ],
)
def test_external_data_leaving_the_folder_or_not_a_file_is_refused(tmp_path, location, why):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\x00" * 48)
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    os.mkfifo(folder / "fifo.bin")
    m, _ = _external_model(location)
    onnx.save(m, folder / "m.onnx")
    with pytest.raises(OnnxImportError, match=why) as err:
        from_onnx(folder / "m.onnx")
    assert "\n" not in str(err.value)


def test_external_data_offsets_must_lie_inside_the_file(tmp_path):
    m, value = _external_model("w.bin", offset=40, length=48)
    (tmp_path / "w.bin").write_bytes(value.tobytes())
    with pytest.raises(OnnxImportError, match="bytes 40..88.*holds 48 bytes"):
        from_onnx(m, base_dir=tmp_path)
    m, _ = _external_model("w.bin", offset="-1")
    with pytest.raises(OnnxImportError, match="offset='-1'"):
        from_onnx(m, base_dir=tmp_path)
    with pytest.raises(OnnxImportError, match="not a folder"):
        from_onnx(m, base_dir=tmp_path / "w.bin")


# ---- point 11: malformed tensors, types, attributes, functions ------------------------


def _with_weight(mutate):
    w = numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
    mutate(w)
    return _model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [3, 4])], [_vi("y", [3, 4])], [w]
    )


def _malformed():
    def short(w):
        w.raw_data = w.raw_data[:10]

    def undefined(w):
        w.data_type = TensorProto.UNDEFINED

    def type_999(w):
        w.data_type = 999

    conv, _ = base_conv(np.random.default_rng(0))
    strides = next(a for a in conv.graph.node[0].attribute if a.name == "strides")
    strides.CopyFrom(helper.make_attribute("strides", [0, 0]))
    return {
        "raw_data_short": (_with_weight(short), "raw_data size.*too small"),
        "dtype_undefined": (_with_weight(undefined), "UNDEFINED"),
        "dtype_999": (_with_weight(type_999), "data type 999"),
        "input_elem_0": (
            _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2], 0)], [_vi("y", [2])]),
            "Element type of input 0 unknown",
        ),
        "strides_0": (conv, "strides must only contain positive values"),
        "self_recursive": (
            base_function(np.random.default_rng(0), "self")[0],
            "Cycle.*local::F0 -> local::F0",
        ),
        "mutually_recursive": (base_function(np.random.default_rng(0), "mutual")[0], "Cycle"),
    }


@pytest.mark.parametrize("name", sorted(_malformed()))
def test_malformed_models_raise_import_errors_not_python_errors(name):
    model, reason = _malformed()[name]
    assert _ort_refuses(model)
    with pytest.raises(OnnxImportError, match=reason) as err:
        from_onnx(model)
    assert "\n" not in str(err.value)


def test_functions_nested_too_deep_are_refused_not_recursed():
    m, _ = base_function(np.random.default_rng(0), "nest", depth=80)
    with pytest.raises(OnnxImportError, match="nest more than 32 deep"):
        from_onnx(m)


# ---- point 12: sizes are capped before anything is allocated ---------------------------


@pytest.mark.parametrize(
    "op, elements",
    [
        ("Tile", 3 * 2**33),  # (1, 3) tiled by (2**33, 1)
        ("Expand", 3 * 2**40),
        ("ConstantOfShape", 2**32),
        ("Range", 2**40),
        ("Pad", (2**30 + 1) * 3),
        ("OneHot", 2 * 2**40),
    ],
)
def test_import_time_folding_refuses_huge_outputs_with_their_size(op, elements):
    m, _ = base_grow(np.random.default_rng(0), op, big=True)
    with pytest.raises(SizeLimitError, match=f"{op} .*{elements} elements") as err:
        from_onnx(m)
    assert "ANEFORGE_MAX_ELEMENTS" in str(err.value) and "\n" not in str(err.value)


def test_declared_input_dims_are_capped():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2**31])], [_vi("y", [2**31])])
    with pytest.raises(SizeLimitError, match="input 'x'.*2147483648 elements"):
        from_onnx(m)
    dynamic = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n"])], [_vi("y", ["n"])])
    with pytest.raises(SizeLimitError, match=r"input 'x' \(shapes=\).*1099511627776 elements"):
        from_onnx(dynamic, shapes={"x": (2**40,)})
    with pytest.raises(OnnxImportError, match="must be a tuple of integers"):
        from_onnx(dynamic, shapes={"x": (2.5,)})


def test_the_element_limit_is_configurable(monkeypatch):
    nodes = [
        helper.make_node("Tile", ["c", "r"], ["g"]),
        helper.make_node("ReduceSum", ["g"], ["total"], keepdims=0),
        helper.make_node("Add", ["x", "total"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.full((1, 3), 0.5, np.float32), "c"),
        numpy_helper.from_array(np.array([4, 1], np.int64), "r"),
    ]
    m = _model(nodes, [_vi("x", [1])], [_vi("y", [1])], inits)  # a (4, 3) tile
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "11")
    with pytest.raises(SizeLimitError, match="Tile 'g' output 'g': 12 elements.*limit of 11"):
        from_onnx(m)
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "12")
    x = np.array([1.5], np.float32)
    want = _ort_session(m).run(None, {"x": x})[0]
    assert _close(from_onnx(m).compile()(x), want)


# ---- point 13: corrupt bytes and paths that are not regular files ----------------------


def test_corrupt_bytes_raise_import_errors_not_decode_errors():
    data = _relu_model().SerializeToString()
    for bad in (data[:-3], b"\x08\x07\x12\xff\xff\xff", b"\x00not an onnx model"):
        with pytest.raises(OnnxImportError) as err:
            from_onnx(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(OnnxImportError, match="protobuf cannot parse"):
        from_onnx(b"\x08\x07\x12\xff\xff\xff")


def test_paths_must_be_regular_files(tmp_path, monkeypatch):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.onnx"
    os.symlink("/dev/zero", zero)
    folder = tmp_path / "folder.onnx"
    folder.mkdir()
    with deadline(HANG_S, "fifo"):
        with pytest.raises(OnnxImportError, match="not a regular file"):
            from_onnx(fifo)
        with pytest.raises(OnnxImportError, match="not a regular file"):
            from_onnx(zero)
    with pytest.raises(OnnxImportError, match="is a folder"):
        from_onnx(folder)
    big = tmp_path / "big.onnx"
    onnx.save(_relu_model(), big)
    monkeypatch.setenv("ANEFORGE_MAX_FILE_BYTES", "16")
    with pytest.raises(OnnxImportError, match="past the limit of 16"):
        from_onnx(big)


# ---- point 17: long chains are walked without recursion --------------------------------


@pytest.mark.parametrize("n, op", [(150, "Add"), (1000, "Mul")])
def test_long_constant_chains_import_and_match_onnxruntime(n, op):
    m, feeds = base_chain(np.random.default_rng(0), n, op)
    want = _ort_session(m).run(None, feeds)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = from_onnx(m).compile()(feeds["x"])
    # 0.25 + 0.25 ... folds exactly in fp16 while the values stay small; Mul underflows
    # to 0 in both
    assert _close(got, want)


def test_errors_are_aneforge_errors():
    assert issubclass(OnnxImportError, af.AneforgeError)
    assert issubclass(SizeLimitError, af.AneforgeError)
