"""The Hugging Face zoo end to end (``aneforge.testing.hf_zoo``): one small random-weight
model per family, exported to ONNX by torch, must

- import, with the network in the program (not folded away on the host);
- emulate within fp16's accuracy of the float64 model (cosine >= 0.999), or the range
  analysis names the fp16 hazard that explains the gap;
- export to a Core ML package;
- import through ``torch.export`` (:func:`aneforge.from_torch`) with the same interface
  (input names, shapes and engine types) and an output that agrees with the ONNX
  path's within fp16's accuracy, bit for bit where both paths decompose the model into
  the same ops. They do not always: torch's ONNX exporter folds each batch norm into the
  conv before it in float32, where torch.export keeps the two ops, and some attention
  and GELU spellings differ (docs/torch_import.md).

Every family runs here: the CNNs and encoders take float inputs, BERT and GPT-2 int64
``input_ids`` and ``attention_mask``, which import as the engine's integer inputs
(uint8 ids feeding an embedding, an int16 mask cast to fp16).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
from aneforge.io import from_onnx, from_torch
from aneforge.io.coreml_export import export_coreml
from aneforge.testing.hf_zoo import FAMILIES, build

IMPORTED = FAMILIES

COSINE_FP16 = 0.999  # an fp16 emulation of a well-scaled network agrees this well


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
    same_ops = [n.op for n in torch_prog.nodes] == [n.op for n in prog.nodes]
    if same_ops and all(
        np.array_equal(a.value, b.value)
        for a, b in zip(torch_prog.nodes, prog.nodes)
        if a.op == "weight"
    ):
        assert np.array_equal(torch_out, out), f"{name}: the same program, other bits"


@pytest.mark.parametrize("name", IMPORTED)
def test_zoo_model_exports_to_coreml(name, tmp_path):
    _, _, prog, _ = _imported(name)
    path = export_coreml(prog, tmp_path / f"{name}.mlpackage")
    assert (path / "Manifest.json").is_file()
