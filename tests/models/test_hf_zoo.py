"""The Hugging Face zoo end to end (``aneforge.testing.hf_zoo``): one small random-weight
model per family, exported to ONNX by torch, must

- import, with the network in the program (not folded away on the host);
- emulate within fp16's accuracy of the float64 model (cosine >= 0.999), or the range
  analysis names the fp16 hazard that explains the gap;
- export to a Core ML package;
- import through ``torch.export`` (:func:`aneforge.from_torch`) with the same interface
  (input names, shapes and engine types) and an output that agrees with the ONNX
  path's within fp16's accuracy; for the CNNs and MPNet (:data:`SAME_PROGRAM`) the same program
  (same ops, attributes and weight bits, hence the same output bits): from_torch folds
  each batch norm into its conv in float32 as torch's ONNX exporter does, and ONNX import
  reads the exporter's GELU and N-D Linear chains as ATen's ops (``onnx_fuse``). The
  others still reach aneforge as other op sequences (:data:`STILL_DIFFERENT` names how;
  docs/torch_import.md).

Every family runs here: the CNNs and audio/vision encoders take float inputs, the text
encoders and GPT-2 int64 ``input_ids`` and ``attention_mask``, which import as the
engine's integer inputs (uint8 ids feeding an embedding, an int16 mask cast to fp16;
RoBERTa's and MPNet's position ids computed from the ids on the engine).
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.io import from_onnx, from_torch
from aneforge.io.coreml_export import export_coreml
from aneforge.testing.hf_zoo import FAMILIES, build
from aneforge.testing.program_diff import program_diff, weight_diffs

IMPORTED = FAMILIES

COSINE_FP16 = 0.999  # an fp16 emulation of a well-scaled network agrees this well

#: families whose two imports compile to the same program, op for op and bit for bit
SAME_PROGRAM = ("resnet", "mobilenet_v2", "efficientnet", "convnext", "mpnet")
#: ATen's scaled_dot_product_attention decomposes to a softmax guarded against fully
#: masked rows: where(all(x == -inf), 0, softmax(x)). The two sources compute different
#: values there (NaN in the ONNX file, 0 in ATen), so no rewrite may merge them.
_SAFE_SOFTMAX = "ATen's sdpa zeroes fully masked rows (equal, amax, select); the ONNX file has none"
#: The exporter's sdpa with a mask guards every NaN instead: where(isnan(p), 0, p).
_NAN_GUARD = (
    "ATen's sdpa zeroes fully masked rows (equal, amax, select); the ONNX exporter zeroes "
    "every NaN of the softmax (not_equal(p, p), select)"
)
#: The ops of the nodes that may differ: the two guards and the softmax they read.
_GUARD_OPS = {"equal", "not_equal", "amax", "select", "weight", "softmax"}
#: what still differs between the two programs of the other families (the output bits
#: are the same for those marked ``same bits``)
STILL_DIFFERENT = {
    "vit": (_SAFE_SOFTMAX, "same bits"),
    "swin": (_SAFE_SOFTMAX, "same bits"),
    "bert": (_NAN_GUARD, "same bits"),
    "roberta": (_NAN_GUARD, "same bits"),  # its position ids: the same ops both ways
    "electra": (_NAN_GUARD, "same bits"),
    "albert": (_NAN_GUARD, "same bits"),
    "distilbert": (_NAN_GUARD, "same bits"),
    "clip_text": (_NAN_GUARD, "same bits"),
    "t5_encoder": (_SAFE_SOFTMAX, "same bits"),  # its Div(1, Sqrt) imports as rsqrt
    "bart_encoder": (_NAN_GUARD, "same bits"),
    "gpt2": (_NAN_GUARD, "same bits"),
    "whisper_encoder": (_SAFE_SOFTMAX, "same bits"),
    "clip_vision": (_SAFE_SOFTMAX, "same bits"),
}
assert set(SAME_PROGRAM) | set(STILL_DIFFERENT) == set(FAMILIES)


def _cosine(x, y) -> float:
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def _feeds(model) -> list:
    return [v.astype(np.float16) if v.dtype.kind == "f" else v for v in model.inputs.values()]


_cache: dict = {}


def _imported(name):
    """(zoo model, its ONNX graph's program, float64 reference), built once."""
    if name not in _cache:
        model = build(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's exporter warnings are not ours
            data = model.onnx_bytes()
        graph = from_onnx(data)
        _cache[name] = (model, graph, graph.compile(), model.reference())
    return _cache[name]


@pytest.mark.parametrize("name", IMPORTED)
def test_zoo_model_imports_from_onnx_and_emulates_within_fp16_accuracy(name):
    model, graph, prog, ref = _imported(name)
    assert graph.input_names == list(model.inputs)
    assert len(prog.nodes) > 20, "the network must run in the program, not fold away"
    out = np.asarray(prog(*_feeds(model)), np.float64)
    assert out.shape == ref.shape
    cosine = _cosine(out, ref)
    if cosine < COSINE_FP16:
        ranges = {k: float(np.abs(v).max()) for k, v in model.inputs.items() if v.dtype.kind == "f"}
        report = af.range_analysis(prog, input_ranges=ranges)
        assert report.hazards, f"{name}: cosine {cosine:.5f} and no fp16 hazard named"


@pytest.mark.parametrize("name", IMPORTED)
def test_zoo_model_imports_from_torch_export_as_from_onnx(name):
    model, graph, prog, ref = _imported(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the same import notes as the ONNX path's
        torch_graph = from_torch(model.module, model.torch_inputs())
    torch_prog = torch_graph.compile()
    assert torch_graph.input_names == graph.input_names
    assert [(t.shape, t.dtype) for t in torch_prog.inputs] == [
        (t.shape, t.dtype) for t in prog.inputs
    ]
    feeds = _feeds(model)
    out = np.asarray(prog(*feeds), np.float64)
    torch_out = np.asarray(torch_prog(*feeds), np.float64)
    assert _cosine(torch_out, ref) >= COSINE_FP16
    assert _cosine(torch_out, out) >= COSINE_FP16
    differences = program_diff(torch_prog, prog)
    if name in SAME_PROGRAM:
        assert differences == [], f"{name}: the two imports differ:\n" + "\n".join(differences)
        assert weight_diffs(torch_prog, prog) == []
        assert np.array_equal(torch_out, out), f"{name}: the same program, other bits"
    else:
        assert differences, f"{name}: now the same program both ways; move it to SAME_PROGRAM"
        differing = {op for line in differences for op in re.findall(r"(\w+) \(", line)}
        assert differing <= _GUARD_OPS, f"{name}: {STILL_DIFFERENT[name]}, and more:\n" + (
            "\n".join(differences)
        )
        if "same bits" in STILL_DIFFERENT[name]:
            assert np.array_equal(torch_out, out), f"{name}: {STILL_DIFFERENT[name]}"


@pytest.mark.parametrize("name", IMPORTED)
def test_zoo_model_exports_to_coreml(name, tmp_path):
    _, _, prog, _ = _imported(name)
    path = export_coreml(prog, tmp_path / f"{name}.mlpackage")
    assert (path / "Manifest.json").is_file()
