"""The Hugging Face zoo: one small random-weight model per architecture family.

Each entry builds a ``transformers`` model from a small config (a few layers, narrow
widths, small images or short sequences), re-draws its weights so activations keep an
O(1) scale through the network (the libraries' own init, N(0, 0.02), makes a CNN's
output vanish below fp16's range in a few layers), and wraps it so the forward takes
the graph inputs as arguments of the same names (in order; ``torch.export`` then names
its inputs like the ONNX graph's) and returns one tensor. The zoo test
(``tests/models/test_hf_zoo.py``) and ``bench/models.py --zoo`` use the same set.

Families (:data:`FAMILIES`): ``resnet``, ``mobilenet_v2``, ``efficientnet``,
``convnext``, ``vit``, ``swin``, ``bert`` (int64 ``input_ids`` and ``attention_mask``),
``roberta`` and ``mpnet`` (the same inputs, the last three tokens padding: position ids
computed from the ids), the other text encoders with the same two inputs (``electra``,
``albert``, ``distilbert``, ``clip_text``, ``t5_encoder``, ``bart_encoder``: their last
hidden states), ``gpt2`` (one forward pass over the same two inputs),
``whisper_encoder``, ``clip_vision``.

Needs ``torch`` and ``transformers`` (test extras); nothing else in aneforge imports this
module.

Example:
    >>> from aneforge.testing.hf_zoo import build
    >>> m = build("vit")
    >>> list(m.inputs), m.inputs["pixel_values"].shape
    (['pixel_values'], (1, 3, 32, 32))
"""

from __future__ import annotations

import copy
import io
import math
from dataclasses import dataclass

import numpy as np

from ..errors import OptionError

FAMILIES = (
    "resnet",
    "mobilenet_v2",
    "efficientnet",
    "convnext",
    "vit",
    "swin",
    "bert",
    "roberta",
    "mpnet",
    "electra",
    "albert",
    "distilbert",
    "clip_text",
    "t5_encoder",
    "bart_encoder",
    "gpt2",
    "whisper_encoder",
    "clip_vision",
)
VOCAB = 100  # the language models' vocabulary: ids are drawn in [0, VOCAB)
SEQUENCE = 16  # tokens per language-model input


@dataclass
class ZooModel:
    """One zoo entry.

    Attributes:
        name: the family name.
        module: a ``torch.nn.Module`` in eval mode whose forward takes the inputs in
            order, as arguments named like them, and returns one float tensor (the last
            hidden state or the pooled output).
        inputs: the example inputs by graph-input name, as NumPy arrays (float32 images
            and features, int64 token ids).
    """

    name: str
    module: object
    inputs: dict

    def torch_inputs(self, dtype=None) -> tuple:
        """The inputs as torch tensors (float inputs cast to ``dtype`` when given)."""
        torch = _torch()
        out = []
        for value in self.inputs.values():
            t = torch.from_numpy(np.ascontiguousarray(value))
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            out.append(t)
        return tuple(out)

    def onnx_bytes(self, opset: int = 17) -> bytes:
        """The model exported by ``torch.onnx.export`` (TorchScript exporter), named
        inputs, one output ``output``. The module exported is a copy: tracing leaves
        state in some models (Swin) that a later ``torch.export`` trips on."""
        torch = _torch()
        buf = io.BytesIO()
        torch.onnx.export(
            copy.deepcopy(self.module),
            self.torch_inputs(),
            buf,
            input_names=list(self.inputs),
            output_names=["output"],
            opset_version=opset,
            dynamo=False,
        )
        return buf.getvalue()

    def reference(self) -> np.ndarray:
        """The output in float64 (the module run in double precision on a copy)."""
        torch = _torch()
        module = copy.deepcopy(self.module).double()
        with torch.no_grad():
            return module(*self.torch_inputs(torch.float64)).numpy()


def build(name: str, seed: int = 0) -> ZooModel:
    """The zoo model ``name`` (one of :data:`FAMILIES`), its weights and inputs drawn
    from ``seed``. Deterministic for a given seed and library versions."""
    if name not in FAMILIES:
        raise OptionError(f"hf_zoo: unknown model {name!r}; choose one of {', '.join(FAMILIES)}")
    torch = _torch()
    transformers = _transformers()
    torch.manual_seed(seed)
    model, inputs, pooled = _BUILDERS[name](transformers, np.random.default_rng(seed))
    model.eval()
    _redraw(torch, model, seed)
    return ZooModel(name, _Output(model, list(inputs), pooled).eval(), inputs)


# ---- the families ---------------------------------------------------------------------


def _image(rng, size):
    return {"pixel_values": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def _ids(rng):
    return {
        "input_ids": rng.integers(0, VOCAB, (1, SEQUENCE)).astype(np.int64),
        "attention_mask": np.ones((1, SEQUENCE), np.int64),
    }


def _resnet(T, rng):
    cfg = T.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="bottleneck"
    )
    return T.ResNetModel(cfg), _image(rng, 64), True


def _mobilenet_v2(T, rng):
    return (
        T.MobileNetV2Model(T.MobileNetV2Config(image_size=64, depth_multiplier=0.35)),
        (_image(rng, 64)),
        True,
    )


def _efficientnet(T, rng):
    cfg = T.EfficientNetConfig(
        image_size=64, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320
    )
    return T.EfficientNetModel(cfg), _image(rng, 64), True


def _convnext(T, rng):
    cfg = T.ConvNextConfig(hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    return T.ConvNextModel(cfg), _image(rng, 64), True


# the ViT-style encoders' sizes (ViT and CLIP vision share them)
_VISION_ENCODER = {
    "image_size": 32,
    "patch_size": 8,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}


def _vit(T, rng):
    cfg = T.ViTConfig(**_VISION_ENCODER)
    return T.ViTModel(cfg, add_pooling_layer=False), _image(rng, 32), False


def _swin(T, rng):
    cfg = T.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4
    )
    return T.SwinModel(cfg), _image(rng, 32), False


def _bert(T, rng):
    cfg = T.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return T.BertModel(cfg, add_pooling_layer=False), _ids(rng), False


def _roberta(T, rng):
    # position ids from the token ids at run time (cumsum of ids != pad): computed on
    # the engine (aneforge.io.int_values); some ids are the padding id
    cfg = T.RobertaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=1,
    )  # fmt: skip
    return T.RobertaModel(cfg, add_pooling_layer=False), _padded_ids(rng, cfg), False


def _mpnet(T, rng):
    # RoBERTa's position ids, and a relative position bias computed from constants
    cfg = T.MPNetConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, pad_token_id=1,
        relative_attention_num_buckets=32,
    )  # fmt: skip
    return T.MPNetModel(cfg, add_pooling_layer=False), _padded_ids(rng, cfg), False


#: the text encoders' common size: two layers of width 32, two heads
_TEXT = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=64, max_position_embeddings=64,
)  # fmt: skip


def _electra(T, rng):
    return T.ElectraModel(T.ElectraConfig(embedding_size=16, **_TEXT)), _ids(rng), False


def _albert(T, rng):
    cfg = T.AlbertConfig(embedding_size=16, **_TEXT)  # one layer's weights, shared
    return T.AlbertModel(cfg, add_pooling_layer=False), _ids(rng), False


def _distilbert(T, rng):
    cfg = T.DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
        max_position_embeddings=64,
    )  # fmt: skip
    return T.DistilBertModel(cfg), _ids(rng), False


def _clip_text(T, rng):
    cfg = T.CLIPTextConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, bos_token_id=0, eos_token_id=2,
    )  # fmt: skip
    return T.CLIPTextModel(cfg), _ids(rng), False


def _t5_encoder(T, rng):
    cfg = T.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2)
    return T.T5EncoderModel(cfg), _ids(rng), False


def _bart_encoder(T, rng):
    cfg = T.BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64,
    )  # fmt: skip
    return T.BartModel(cfg).get_encoder(), _ids(rng), False


def _padded_ids(rng, cfg):
    """:func:`_ids` with the last three tokens padding (the pad id, masked out)."""
    inputs = _ids(rng)
    inputs["input_ids"][0, -3:] = cfg.pad_token_id
    inputs["attention_mask"][0, -3:] = 0
    return inputs


def _gpt2(T, rng):
    cfg = T.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=0,
        eos_token_id=0, use_cache=False,
    )  # fmt: skip
    return T.GPT2Model(cfg), _ids(rng), False


def _whisper_encoder(T, rng):
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = T.WhisperConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, encoder_attention_heads=2,
        encoder_ffn_dim=64, decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=64,
        num_mel_bins=16, max_source_positions=32, pad_token_id=0, bos_token_id=0,
        eos_token_id=0, decoder_start_token_id=0,
    )  # fmt: skip
    features = rng.standard_normal((1, 16, 64)).astype(np.float32)
    return WhisperEncoder(cfg), {"input_features": features}, False


def _clip_vision(T, rng):
    return T.CLIPVisionModel(T.CLIPVisionConfig(**_VISION_ENCODER)), _image(rng, 32), False


_BUILDERS = {
    "resnet": _resnet,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet": _efficientnet,
    "convnext": _convnext,
    "vit": _vit,
    "swin": _swin,
    "bert": _bert,
    "roberta": _roberta,
    "mpnet": _mpnet,
    "electra": _electra,
    "albert": _albert,
    "distilbert": _distilbert,
    "clip_text": _clip_text,
    "t5_encoder": _t5_encoder,
    "bart_encoder": _bart_encoder,
    "gpt2": _gpt2,
    "whisper_encoder": _whisper_encoder,
    "clip_vision": _clip_vision,
}


# ---- weights and the output wrapper ---------------------------------------------------


def _redraw(torch, model, seed: int) -> None:
    """Re-draw every weight so activations keep their scale: convolutions and linear
    maps N(0, 2 / fan_in) (He) in CNNs' ReLU stacks would grow, so every matrix gets
    N(0, 1 / fan_in); batch norms get running statistics near (0, 1) and affine
    parameters near (1, 0); embeddings N(0, 1)."""
    gen = torch.Generator().manual_seed(seed + 1)
    nn = torch.nn
    with torch.no_grad():
        for module in model.modules():
            kind = type(module).__name__
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                c = module.num_features
                module.running_mean.copy_(torch.randn(c, generator=gen) * 0.1)
                module.running_var.copy_(torch.rand(c, generator=gen) + 0.5)
                if module.affine:
                    module.weight.copy_(1 + torch.randn(c, generator=gen) * 0.1)
                    module.bias.copy_(torch.randn(c, generator=gen) * 0.1)
            elif isinstance(module, nn.Embedding):
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Linear)) or kind == "Conv1D":
                w = module.weight
                # transformers' Conv1D stores (in, out); the others (out, in, ...)
                fan_in = w.shape[0] if kind == "Conv1D" else math.prod(w.shape[1:])
                w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(fan_in))
                if getattr(module, "bias", None) is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=gen) * 0.1)


def _output_class(names: tuple):
    """The wrapper class whose ``forward`` takes the arguments ``names`` (the model's
    input names, so that ``torch.export`` names its inputs like the ONNX graph's)."""
    torch = _torch()

    class Output(torch.nn.Module):
        """forward(**inputs) -> the pooled output or the last hidden state."""

        def __init__(self, model, pooled: bool):
            super().__init__()
            self.model = model
            self.pooled = pooled

        def run(self, **inputs):
            out = self.model(**inputs)
            if self.pooled and getattr(out, "pooler_output", None) is not None:
                return out.pooler_output
            return out.last_hidden_state

    class Images(Output):
        def forward(self, pixel_values):
            return self.run(pixel_values=pixel_values)

    class Tokens(Output):
        def forward(self, input_ids, attention_mask):
            return self.run(input_ids=input_ids, attention_mask=attention_mask)

    class Features(Output):
        def forward(self, input_features):
            return self.run(input_features=input_features)

    classes = {("pixel_values",): Images, ("input_ids", "attention_mask"): Tokens,
               ("input_features",): Features}  # fmt: skip
    if names not in classes:  # pragma: no cover - a new family needs its wrapper here
        raise OptionError(f"hf_zoo: no wrapper takes the inputs {list(names)}")
    return classes[names]


def _Output(model, names, pooled):  # noqa: N802 - builds the nn.Module subclass lazily
    return _output_class(tuple(names))(model, pooled)


def _torch():
    try:
        import torch
    except ImportError:
        raise OptionError("hf_zoo needs torch: pip install torch==2.13.0 (the CPU build)") from None
    return torch


def _transformers():
    try:
        import transformers
    except ImportError:
        raise OptionError("hf_zoo needs transformers: pip install transformers") from None
    return transformers
