"""The in-graph model zoo against the published sizes of the networks it builds.

References: multiply-accumulates and parameter counts as their authors and the
torchvision / timm model cards publish them (batch 1, 224x224 images). Parameters are
the learned ones (batch-norm running statistics are buffers, not counted).
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.errors import OptionError
from aneforge.models.zoo import MODELS, build

# name: (GMACs, millions of parameters) as published
PUBLISHED = {
    "resnet18": (1.81, 11.69),  # torchvision
    "resnet34": (3.66, 21.80),
    "resnet50": (4.09, 25.56),
    "resnet101": (7.80, 44.55),
    "resnet152": (11.51, 60.19),
    "mobilenet_v2": (0.30, 3.50),  # torchvision; the paper: 300M MACs, 3.4M params
    "densenet121": (2.83, 7.98),
    "mobileone_s0": (0.275, 2.1),  # MobileOne paper, Table 8 (S4 lacks its SE blocks)
    "mobileone_s1": (0.825, 4.8),
    "mobileone_s2": (1.299, 7.8),
    "mobileone_s3": (1.896, 10.1),
    "vit_b16": (17.56, 86.57),  # torchvision / timm
    "vit_s16": (4.61, 22.05),
    "vit_ti16": (1.26, 5.72),
}


def _sizes(name: str) -> tuple[float, float]:
    prog = Program.from_outputs([build(name)[1]])
    stats = {id(s) for n in prog.nodes if n.op == "batch_norm" for s in n.srcs[1:3]}
    params = sum(n.size for n in prog.nodes if n.op == "weight" and id(n) not in stats)
    return prog.flops / 2e9, params / 1e6


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_zoo_builds_the_published_sizes(name):
    gmacs, mparams = _sizes(name)
    want_macs, want_params = PUBLISHED[name]
    assert gmacs == pytest.approx(want_macs, rel=0.01)
    # The MobileOne paper gives millions to one decimal (S1: 4.8 for our 4.75).
    tolerance = 0.015 if name.startswith("mobileone") else 0.01
    assert mparams == pytest.approx(want_params, rel=tolerance)


def test_bert_base_encoder_layers_hold_85m_parameters():
    # BERT-base: 110M parameters, of which 23.8M are the embeddings left out here.
    _, mparams = _sizes("bert_base")
    assert mparams == pytest.approx(110.0 - 23.8 - 0.6, rel=0.01)  # less the pooler


def test_the_zoo_resnet50_matches_the_onnx_light_resnet50():
    onnx = pytest.importorskip("onnx")
    from aneforge.models.light import FILES, light_dir

    model = onnx.version_converter.convert_version(
        onnx.load(str(light_dir() / FILES["resnet50"])), 13
    )
    light = af.from_onnx(model).compile(opt=0)
    zoo = Program.from_outputs([build("resnet50")[1]])
    assert light.flops == zoo.flops


@pytest.mark.parametrize("name", MODELS)
def test_every_model_compiles_for_the_newest_engines(name):
    size = 32 if name in ("bert_base", "distilbert", "minilm_l6") else 224
    x, y = build(name, size=size)
    assert af.preflight(y, "M5").ok


def test_a_small_resnet_emulates_close_to_float64():
    x, y = build("resnet18", size=64, seed=1)
    prog = af.compile(y)
    feed = np.random.default_rng(0).standard_normal(x.shape)
    cmp = af.compare(prog(feed), af.reference(prog, feed))
    assert cmp["cosine"] > 0.999


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        ("resnet13", {}, "unknown model"),
        ("vit_b16", {"size": 100}, "multiple of the patch size"),
        ("resnet18", {"batch": 0}, "batch must be an int >= 1"),
    ],
)
def test_bad_requests_name_the_problem(name, kwargs, match):
    with pytest.raises(OptionError, match=match):
        build(name, **kwargs)
