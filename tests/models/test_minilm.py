"""all-MiniLM-L6-v2 with its real weights: the aneforge graph against float64 forwards.

Three yardsticks, from the outside in:

- published similarities (sbert.net's quick-start, all-MiniLM-L6-v2 in float32 torch);
- an independent float64 BERT forward written here in NumPy from the safetensors
  weights (original float32 weights, the config's eps 1e-12: the true model);
- ``af.reference`` of the same graph (float64, fp16 weights): the NumPy forward fed the
  same fp16 values must agree with it to float64 rounding, which validates the graph's
  wiring independently of the emulator.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import special

import aneforge as af
from aneforge.errors import OptionError
from aneforge.models.minilm import FP16_TINY, minilm

SENTENCES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "A man is playing a guitar on the stage, and the crowd sings along.",
]
# sbert.net quick start ("Usage"), model.similarity of the first three sentences, printed
# to 4 decimals from float32 torch.
PUBLISHED = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}
PUBLISHED_DECIMALS = 0.5e-4  # the table's own rounding
FLOAT32_NOISE = 1e-4  # float32 torch vs float64 on a cosine of O(1) terms
COSINE_TARGET = 0.999  # the acceptance bar for fp16 emulation
FLOAT64_AGREEMENT = 1e-9  # two float64 evaluations of the same arithmetic, different order


@pytest.fixture(scope="module")
def model():
    return minilm()


def numpy_bert(weights, emb, mask, eps, heads=12, layers=6, fp16_weights=False):
    """all-MiniLM-L6-v2 in float64 NumPy: BERT encoder, masked mean pooling, L2 norm.

    ``emb`` is the host embedding sum [n, S, H]; with ``fp16_weights`` every weight is
    first rounded to fp16 as aneforge holds it (the query projection after folding the
    score scale into it in float64, as the graph does).
    """
    h = emb.shape[-1]
    hd = h // heads
    scale = hd**-0.5

    def w(name, factor=1.0):
        arr = weights[name].astype(np.float64) * factor
        return arr.astype(np.float16).astype(np.float64) if fp16_weights else arr

    def layer_norm(x, prefix):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w(prefix + ".weight") + w(prefix + ".bias")

    def dense(x, prefix, factor=1.0):
        return x @ w(prefix + ".weight", factor).T + w(prefix + ".bias", factor)

    n, s, _ = emb.shape
    x = layer_norm(emb.astype(np.float64), "embeddings.LayerNorm")
    bias = ((mask.astype(np.float64) - 1.0) * 30000.0)[:, None, None, :]
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def split(y):
            return y.reshape(n, s, heads, hd).transpose(0, 2, 1, 3)

        q_factor = 1.0 if not fp16_weights else scale
        q = split(dense(x, p + "attention.self.query", q_factor))
        k = split(dense(x, p + "attention.self.key"))
        v = split(dense(x, p + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) * (1.0 if fp16_weights else scale) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(n, s, h)
        x = layer_norm(
            dense(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm"
        )
        mid = dense(x, p + "intermediate.dense")
        mid = 0.5 * mid * (1.0 + special.erf(mid / np.sqrt(2.0)))
        x = layer_norm(dense(mid, p + "output.dense") + x, p + "output.LayerNorm")
    m = mask.astype(np.float64)[:, :, None]
    pooled = (x * m).sum(1) / m.sum(1)
    norm = np.sqrt(np.maximum((pooled**2).sum(-1, keepdims=True), FP16_TINY))
    return pooled / norm


def cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_tokenizer_pads_and_truncates_at_the_encoders_256(model):
    with open(model.path / "tokenizer.json", encoding="utf-8") as f:
        shipped = json.load(f)
    assert shipped["truncation"]["max_length"] == 128  # the trap: the file says 128
    ids, mask = model.tokenize(["Hello world!", "word " * 400])
    assert ids.shape == mask.shape == (2, 256)
    assert mask[0].tolist() == [1] * 5 + [0] * 251
    assert ids[0, :5].tolist() == [101, 7592, 2088, 999, 102]  # [CLS] hello world ! [SEP]
    assert mask[1].all() and ids[1, -1] == 102  # truncated at 256, [SEP] kept
    assert model.max_length == 256


def test_numpy_forward_agrees_with_the_float64_reference_of_the_graph(model):
    emb, mask = model.features(SENTENCES, seq_len="longest")
    emb16 = emb.astype(np.float16).astype(np.float64)  # the engine's input cast
    want = numpy_bert(model.weights, emb16, mask, model.eps, fp16_weights=True)
    got = model.encode_reference(SENTENCES, seq_len="longest")
    assert np.max(np.abs(got - want)) <= FLOAT64_AGREEMENT


def test_fp16_emulation_matches_float64_at_cosine_0999(model):
    emb, mask = model.features(SENTENCES, seq_len="longest")
    true_model = numpy_bert(model.weights, emb, mask, model.layer_norm_eps)
    emulated = model.encode(SENTENCES, seq_len="longest")
    reference = model.encode_reference(SENTENCES, seq_len="longest")
    assert emulated.dtype == np.float32 and emulated.shape == (4, 384)
    assert np.all(cosines(emulated, true_model) >= COSINE_TARGET)
    assert np.all(cosines(emulated, reference) >= COSINE_TARGET)
    # the graph's eps and fp16 weights move the float64 answer by far less than fp16
    assert np.all(cosines(reference, true_model) >= 1 - 1e-6)
    assert np.allclose(np.linalg.norm(emulated, axis=1), 1.0, atol=2e-3)


def test_published_similarities(model):
    emulated = model.encode(SENTENCES[:3], seq_len="longest").astype(np.float64)
    emb, mask = model.features(SENTENCES[:3], seq_len="longest")
    exact = numpy_bert(model.weights, emb, mask, model.layer_norm_eps)
    for (i, j), want in PUBLISHED.items():
        assert abs(exact[i] @ exact[j] - want) <= PUBLISHED_DECIMALS + FLOAT32_NOISE
        got = emulated[i] @ emulated[j] / np.linalg.norm(emulated[i]) / np.linalg.norm(emulated[j])
        assert abs(got - want) <= 1 - COSINE_TARGET


def test_padding_changes_no_bit(model):
    short = model.encode(SENTENCES[:2], seq_len="longest")
    longer = model.encode(SENTENCES[:2], seq_len=24)
    assert np.array_equal(short, longer)
    # whatever the padded positions hold, the embedding is the same bits
    emb, mask = model.features(SENTENCES[1:2], seq_len=16)
    prog = model.program(16, 1)
    tokens = int(mask.sum())
    assert tokens == 9  # [CLS] it ' s so sunny outside ! [SEP]
    noisy = emb.copy()
    noisy[0, tokens:] = np.random.default_rng(0).standard_normal((16 - tokens, 384)) * 3
    assert np.array_equal(prog(emb, mask), prog(noisy, mask))
    assert np.array_equal(prog(emb, mask)[0], short[1])


def test_full_length_256_graph_gives_the_same_bits(model):
    assert np.array_equal(model.encode(["Hello world!"]), model.encode(["Hello world!"], seq_len=5))


def test_layer_norm_eps_underflow_is_handled():
    assert float(np.float16(1e-12)) == 0.0  # the config's eps vanishes in fp16
    x = af.input((1, 8))
    bias = np.arange(8.0) / 8
    for eps, finite in ((1e-12, False), (FP16_TINY, True)):
        y = af.layer_norm(x, np.ones(8), bias, eps=eps)
        out = af.compile(y)(np.full((1, 8), 3.0))  # a zero-variance row
        assert np.isfinite(out).all() == finite
        if finite:
            assert np.array_equal(out[0], bias.astype(np.float16).astype(np.float32))


def test_graph_compiles_and_estimates_on_every_family(model):
    ins, outs = model.graph(32, batch=2)
    assert [t.shape for t in ins] == [(2, 32, 384), (2, 32)]
    assert outs[0].shape == (2, 384)
    prog = af.compile(outs)
    assert prog.flops > 2 * 6 * 2 * 32 * 384 * 384 * 4  # at least the projections
    times = [af.estimate(prog, target=t) for t in ("h13", "h14", "h15", "h17s")]
    assert all(np.isfinite(times)) and all(t > 0 for t in times)


def test_bad_paths_and_lengths(tmp_path):
    with pytest.raises(OptionError, match="config.json"):
        minilm(path=tmp_path)
    with pytest.raises(OptionError, match="max_length"):
        minilm(max_length=600)
    m = minilm(max_length=8)
    with pytest.raises(OptionError, match="seq_len"):
        m.encode(["Hello world!"], seq_len=3)
