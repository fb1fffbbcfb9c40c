"""``aneforge check --shape NAME=D1xD2x...`` and ``--input NAME=FILE.npy`` (and ``export
--shape``), through the CLI entry point.

Contract (src/aneforge/cli.py, src/aneforge/io/npy_input.py, docs/cli.md): ``--shape``
fixes an ONNX input's dims (repeatable; bad syntax, dims < 1, unknown names and bundled
examples are one-line user errors, exit 2, before any work). ``--input`` feeds an input
the array of a ``.npy`` file instead of seeded random values: the file is untrusted (a
regular file within the size cap, a number dtype, never unpickled, header and size
checked before any allocation), its name must be an input's and its shape the input's.

Yardsticks: what the given data must do to the report, computed independently with
NumPy: values past fp16's 65504 become inf on the engine (counted per element), and
squares of small integers are exact in fp16 (zero error), where seeded normal inputs
are not.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper, save

from aneforge.cli import main
from test_cli import user_error  # the one-line, exit-2 contract of user mistakes

FP16_MAX = 65504.0


def model_file(path, shape_in, nodes=None, inits=()) -> str:
    """x -> y = x * x (or ``nodes``), ``shape_in`` with ints or symbolic names."""
    nodes = nodes or [helper.make_node("Mul", ["x", "x"], ["y"])]
    out = [d if isinstance(d, int) else f"{d}_out" for d in shape_in]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape_in))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        initializer=[numpy_helper.from_array(np.asarray(v), name=k) for k, v in inits],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    save(model, str(path))
    return str(path)


def run_json(capsys, *args, code=0) -> dict:
    assert main(["check", *args, "--json"]) == code
    return json.loads(capsys.readouterr().out)


def npy(path, array) -> str:
    np.save(path, array)
    return str(path)


@pytest.fixture
def square(tmp_path):
    return model_file(tmp_path / "square.onnx", (3, 4))


@pytest.fixture
def dynamic(tmp_path):
    return model_file(tmp_path / "dynamic.onnx", ("N", 4))


# ---- --input: the data is what runs -----------------------------------------------------


def test_given_data_runs_exact_squares_where_random_inputs_round(capsys, tmp_path, square):
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)  # squares <= 36: exact in fp16
    given = run_json(capsys, square, "--input", f"x={npy(tmp_path / 'x.npy', x)}")
    assert given["input_files"] == {"x": str(tmp_path / "x.npy")}
    (out,) = given["reports"][0]["outputs"]
    assert out["max_abs"] == 0.0 and out["nonfinite_values"] == 0
    seeded = run_json(capsys, square)
    assert seeded["input_files"] == {}
    assert seeded["reports"][0]["outputs"][0]["max_abs"] > 0.0  # random squares round


def test_given_values_past_fp16_become_inf_and_fail_the_check(capsys, tmp_path, square):
    x = np.ones((3, 4), np.float32)
    x[0, :3] = [1e5, -2e5, 7e4]  # |x| > 65504: inf on the engine's way in
    x[2, 1] = 300.0  # 90000 > 65504: its square overflows
    want = int((np.abs(x.astype(np.float16).astype(np.float64)) ** 2 > FP16_MAX).sum())
    assert want == 4
    doc = run_json(capsys, square, "--input", f"x={npy(tmp_path / 'x.npy', x)}", code=1)
    assert doc["reports"][0]["outputs"][0]["nonfinite_values"] == want
    assert not doc["ok"]


def test_an_integer_array_feeds_a_float_input_and_text_output_names_it(capsys, tmp_path, square):
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    path = npy(tmp_path / "ints.npy", x)
    assert main(["check", square, "--input", f"x={path}"]) == 0
    out = capsys.readouterr().out
    assert f"input x: {path} (3x4 int16)" in out


def test_a_bundled_example_takes_input_data_by_its_input_name(capsys, tmp_path):
    image = np.zeros((1, 3, 32, 32), np.float32)
    doc = run_json(capsys, "cnn", "--input", f"image={npy(tmp_path / 'i.npy', image)}")
    assert doc["ok"] and doc["input_files"] == {"image": str(tmp_path / "i.npy")}


def test_input_and_shape_together_fix_a_dynamic_model(capsys, tmp_path, dynamic):
    x = np.full((5, 4), 3.0, np.float32)
    path = npy(tmp_path / "x.npy", x)
    doc = run_json(capsys, dynamic, "--shape", "x=5x4", "--input", f"x={path}")
    out = doc["reports"][0]["outputs"][0]
    assert out["max_abs"] == 0.0  # 9 exactly
    err = user_error(capsys, "check", dynamic, "--input", f"x={path}")
    assert "dynamic dims" in err and "--shape NAME=" in err


# ---- --input: refusals ------------------------------------------------------------------


@pytest.mark.parametrize("item", ["x", "x=", "=a.npy"])
def test_input_syntax_errors(capsys, square, item):
    assert "give NAME=FILE.npy" in user_error(capsys, "check", square, "--input", item)


def test_input_named_twice_or_for_no_input_or_of_another_shape(capsys, tmp_path, square):
    good = npy(tmp_path / "g.npy", np.zeros((3, 4), np.float32))
    err = user_error(capsys, "check", square, "--input", f"x={good}", "--input", f"x={good}")
    assert "once per input" in err
    err = user_error(capsys, "check", square, "--input", f"z={good}")
    assert "has no input 'z'" in err and "['x']" in err
    bad = npy(tmp_path / "b.npy", np.zeros((4, 3), np.float32))
    err = user_error(capsys, "check", square, "--input", f"x={bad}")
    assert "holds shape (4, 3)" in err and "is (3, 4)" in err


def test_input_needs_one_model(capsys, tmp_path):
    path = npy(tmp_path / "i.npy", np.zeros((1, 3, 32, 32), np.float32))
    assert "name the model" in user_error(capsys, "check", "--input", f"image={path}")


class _Marker:
    """Unpickling it would write a file: the proof that nothing was unpickled."""

    target = ""

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_object_arrays_are_refused_and_never_unpickled(capsys, tmp_path, square):
    marker = tmp_path / "unpickled"
    _Marker.target = str(marker)
    path = tmp_path / "evil.npy"
    np.save(path, np.array([_Marker()], dtype=object), allow_pickle=True)
    err = user_error(capsys, "check", square, "--input", f"x={path}")
    assert "dtype object" in err
    assert not marker.exists()
    np.load(path, allow_pickle=True)  # what loading it unsafely would have done
    assert marker.exists()


@pytest.mark.parametrize(
    "array, why",
    [
        (np.array(["a", "b"]), "dtype <U1"),
        (np.zeros(3, np.complex64), "dtype complex64"),
        (np.zeros(2, dtype=[("a", "f4"), ("b", "f4")]), "give an array of numbers"),
    ],
)
def test_non_number_dtypes_are_refused(capsys, tmp_path, square, array, why):
    path = npy(tmp_path / "a.npy", array)
    assert why in user_error(capsys, "check", square, "--input", f"x={path}")


def test_truncated_padded_and_foreign_files_are_refused(capsys, tmp_path, square):
    good = tmp_path / "g.npy"
    np.save(good, np.zeros((3, 4), np.float32))
    data = good.read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[:-5])
    (tmp_path / "pad.npy").write_bytes(data + b"\0" * 8)
    (tmp_path / "text.npy").write_bytes(b"x,y\n1,2\n")
    np.savez(tmp_path / "arch.npz", x=np.zeros((3, 4)))
    for name, why in [
        ("cut.npy", "bytes follow it; is the file truncated"),
        ("pad.npy", "bytes follow it; is the file truncated or padded"),
        ("text.npy", "not a NumPy .npy file"),
        ("arch.npz", "not a NumPy .npy file"),
        ("missing.npy", "missing.npy"),
    ]:
        err = user_error(capsys, "check", square, "--input", f"x={tmp_path / name}")
        assert why in err, (name, err)


def test_a_header_claiming_a_huge_array_is_refused_before_allocation(capsys, tmp_path, square):
    path = tmp_path / "huge.npy"
    with open(path, "wb") as f:  # a valid header for 2**40 float32s, and 16 bytes of data
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (2**20, 2**20)}
        )
        f.write(b"\0" * 16)
    err = user_error(capsys, "check", square, "--input", f"x={path}")
    assert "1099511627776 elements" in err


def test_file_and_element_caps_apply(capsys, tmp_path, square, monkeypatch):
    path = npy(tmp_path / "x.npy", np.zeros((3, 4), np.float32))
    monkeypatch.setenv("ANEFORGE_MAX_FILE_BYTES", "64")
    assert "64" in user_error(capsys, "check", square, "--input", f"x={path}")
    monkeypatch.delenv("ANEFORGE_MAX_FILE_BYTES")
    monkeypatch.setenv("ANEFORGE_MAX_ELEMENTS", "10")
    assert "12 elements" in user_error(capsys, "check", square, "--input", f"x={path}")


def test_a_folder_or_fifo_is_not_read(capsys, tmp_path, square):
    (tmp_path / "dir.npy").mkdir()
    assert "dir.npy" in user_error(capsys, "check", square, "--input", f"x={tmp_path}/dir.npy")
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    assert "fifo.npy" in user_error(capsys, "check", square, "--input", f"x={fifo}")


# ---- --shape ----------------------------------------------------------------------------


def test_shape_fixes_dynamic_dims(capsys, dynamic):
    doc = run_json(capsys, dynamic, "--shape", "x=6x4")
    layers = doc["reports"][0]["estimate"]["layers"]
    assert [layer["shape"] for layer in layers] == [[6, 4]]
    err = user_error(capsys, "check", dynamic)
    assert "dynamic dims at axis 0 (N)" in err and "--shape NAME=D1xD2x..." in err


@pytest.mark.parametrize("item", ["x", "x=", "=3x4", "x=3x0", "x=3x-4", "x=3xa", "x=3.0x4",
                                  "x=3,4", "x=3x4x", "x=٣x4"])  # fmt: skip
def test_shape_syntax_and_non_positive_dims_are_user_errors(capsys, dynamic, item):
    err = user_error(capsys, "check", dynamic, "--shape", item)
    assert "give NAME=D1xD2x... with whole dims >= 1" in err


def test_shape_for_no_input_twice_or_against_the_model_is_refused(capsys, dynamic, square):
    err = user_error(capsys, "check", dynamic, "--shape", "x=2x4", "--shape", "y=2x4")
    assert "--shape names no input of dynamic.onnx: ['y']" in err
    err = user_error(capsys, "check", dynamic, "--shape", "x=2x4", "--shape", "x=3x4")
    assert "given twice" in err
    assert "conflicts" in user_error(capsys, "check", square, "--shape", "x=3x5")
    assert "rank" in user_error(capsys, "check", square, "--shape", "x=12")


def test_shape_does_not_apply_to_bundled_examples(capsys):
    err = user_error(capsys, "check", "cnn", "--shape", "image=1x3x8x8")
    assert "applies to an .onnx or .pt2 model" in err


def test_export_takes_shape(capsys, tmp_path, dynamic):
    pytest.importorskip("coremltools", reason="the Core ML export needs coremltools")
    out = tmp_path / "m.mlpackage"
    assert main(["export", dynamic, "-o", str(out), "--shape", "x=2x4"]) == 0
    assert out.is_dir()
    capsys.readouterr()
    err = user_error(capsys, "export", dynamic, "-o", str(tmp_path / "n.mlpackage"))
    assert "--shape" in err
    assert not (tmp_path / "n.mlpackage").exists()


# ---- .pt2 files: programs saved by torch.export ---------------------------------------


class _Square(torch.nn.Module):
    def forward(self, x):
        return x * x


def pt2_file(path, dynamic=False) -> str:
    """``x * x`` exported by torch.export (dim 0 dynamic when asked) and saved."""
    shapes = {"x": {0: torch.export.Dim("n", min=2)}} if dynamic else None
    program = torch.export.export(_Square(), (torch.zeros(3, 4),), dynamic_shapes=shapes)
    torch.export.save(program, str(path))
    return str(path)


def test_check_reads_a_torch_export_file_and_its_input_data(capsys, tmp_path):
    path = pt2_file(tmp_path / "square.pt2")
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)  # squares <= 36: exact in fp16
    doc = run_json(capsys, path, "--input", f"x={npy(tmp_path / 'x.npy', x)}")
    assert doc["ok"]
    assert doc["reports"][0]["outputs"][0]["max_abs"] == 0.0


def test_shape_overrides_the_recorded_size_of_a_dynamic_dim(capsys, tmp_path):
    path = pt2_file(tmp_path / "square.pt2", dynamic=True)
    x = np.full((5, 4), 3.0, np.float32)
    data = f"x={npy(tmp_path / 'x.npy', x)}"
    err = user_error(capsys, "check", path, "--input", data)  # recorded: 3x4
    assert "holds shape (5, 4), but input 'x' is (3, 4)" in err
    doc = run_json(capsys, path, "--shape", "x=5x4", "--input", data)
    assert doc["reports"][0]["outputs"][0]["max_abs"] == 0.0  # 9 exactly


def test_a_file_that_is_not_a_saved_program_is_a_user_error(capsys, tmp_path):
    bogus = tmp_path / "model.pt2"
    bogus.write_bytes(b"not a zip archive")
    err = user_error(capsys, "check", str(bogus))
    assert "model.pt2" in err


# ---- what runs where -------------------------------------------------------------------


def test_check_reports_what_runs_where_and_the_integer_inputs_types(capsys, tmp_path):
    """Token ids into an embedding table of 5 rows: a uint8 input, its Gather on the
    engine; the table's Mul by 2 folds at import."""
    nodes = [
        helper.make_node("Mul", ["table", "two"], ["scaled"]),
        helper.make_node("Gather", ["scaled", "ids"], ["y"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 2])],
        initializer=[
            numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2), "table"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    path = str(tmp_path / "ids.onnx")
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    doc = run_json(capsys, path)
    assert doc["ok"]
    lines = doc["reports"][0]["partition"]
    assert lines[0] == "ONNX nodes: 2; folded at import: 1 (0 integer); engine ops: 1, weights: 1"
    assert "integer input 'ids': uint8 on the engine" in lines
    assert main(["check", path]) == 0
    assert "import: integer input 'ids': uint8 on the engine" in capsys.readouterr().out
    assert run_json(capsys, "cnn")["reports"][0]["partition"] == []
