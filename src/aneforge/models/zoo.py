"""Standard architectures at their published sizes, built in-graph with seeded weights.

These are the networks published whole-model Neural Engine latencies are quoted for
(``data/silicon_models.csv``): ResNets, MobileNet v2, ViTs and BERT-style encoders. Each
builder returns ``(input_tensor, output_tensor)`` with exactly the layer shapes of the
named model (torchvision / timm / Hugging Face layouts), so the cost model prices what
the engine would run; the weights are seeded He-normal draws (batch-norm statistics
near 0 and 1), enough to emulate a realistic activation range but not trained.

- :func:`resnet` (``depth`` 18, 34, 50, 101, 152): conv-bn-relu stem, max pool, basic or
  bottleneck stages (stride on the 3x3, "v1.5"), global average pool, linear head.
- :func:`mobilenet_v2`: inverted residuals with depthwise 3x3 convolutions and ReLU6.
- :func:`densenet121`: dense blocks of BN-ReLU-conv bottlenecks joined by concatenation.
- :func:`mobileone` (presets ``mobileone_s0`` .. ``mobileone_s4``): the re-parameterized
  inference form, depthwise and pointwise convolutions with ReLU.
- :func:`vit` (presets ``vit_b16``, ``vit_s16``, ``vit_ti16``): patch embedding,
  class token, pre-norm encoder blocks with GELU MLPs, head on the class token.
- :func:`encoder` (presets ``bert_base``, ``distilbert``, ``minilm_l6``): post-norm BERT
  encoder layers over already-embedded tokens (the embedding gather is left out; it is a
  small part of the work).

:func:`build` builds any of them by name (:data:`MODELS`).

Example:
    >>> from aneforge.models.zoo import build
    >>> x, y = build("resnet18")
    >>> x.shape, y.shape
    ((1, 3, 224, 224), (1, 1000))
"""

from __future__ import annotations

import numpy as np

from ..errors import OptionError
from ..graph import api
from ..graph.nn import mha
from ..graph.tensor import Tensor, weight
from ..graph.tensor import input as graph_input

RESNET_BLOCKS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
# (expansion t, output channels c, repeats n, first stride s) of MobileNet v2's stages.
MOBILENET_V2_STAGES = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
DENSENET121 = (32, (6, 12, 24, 16), 64)  # growth rate, blocks per stage, stem width
# MobileOne (inference, re-parameterized: every block is one conv + ReLU): per-stage
# width multipliers of the 64/128/256/512 base widths; stage depths 2, 8, 10, 1.
MOBILEONE_WIDTHS = {
    "mobileone_s0": (0.75, 1.0, 1.0, 2.0),
    "mobileone_s1": (1.5, 1.5, 2.0, 2.5),
    "mobileone_s2": (1.5, 2.0, 2.5, 4.0),
    "mobileone_s3": (2.0, 2.5, 3.0, 4.0),
    "mobileone_s4": (3.0, 3.5, 3.5, 4.0),
}
MOBILEONE_DEPTHS = (2, 8, 10, 1)
VIT_PRESETS = {  # width, depth, heads (patch 16, MLP 4x width)
    "vit_b16": (768, 12, 12),
    "vit_s16": (384, 12, 6),
    "vit_ti16": (192, 12, 3),
}
ENCODER_PRESETS = {  # hidden, layers, heads, intermediate
    "bert_base": (768, 12, 12, 3072),
    "distilbert": (768, 6, 12, 3072),
    "minilm_l6": (384, 6, 12, 1536),
}


class _Init:
    """Seeded weights: He-normal convolution/linear weights, identity-like norms."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def he(self, shape, fan_in: int) -> Tensor:
        return weight(self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in))

    def conv(self, x, cout: int, k: int, stride: int = 1, groups: int = 1) -> Tensor:
        cin = x.shape[1] // groups
        w = self.he((cout, cin, k, k), cin * k * k)
        return api.conv(x, w, stride=stride, padding=k // 2, groups=groups)

    def bn(self, x) -> Tensor:
        c = x.shape[1]
        mean = weight(self.rng.standard_normal(c) * 0.1)
        var = weight(self.rng.uniform(0.8, 1.2, c))
        return api.batch_norm(x, mean, var, weight(np.ones(c)), weight(np.zeros(c)))

    def linear(self, x, out: int) -> Tensor:
        fan_in = x.shape[-1]
        return api.linear(x, self.he((out, fan_in), fan_in), weight(np.zeros(out)))

    def ln(self, x) -> Tensor:
        d = x.shape[-1]
        return api.layer_norm(x, weight(np.ones(d)), weight(np.zeros(d)))


def _image_input(model: str, image, batch, seed) -> tuple[_Init, Tensor]:
    """The seeded initializer and the ``batch`` x 3 x ``image`` x ``image`` input of an
    image model, with the sizes checked."""
    image = _check_size(f"{model}: image", image, 32)
    batch = _check_size(f"{model}: batch", batch, 1)
    return _Init(seed), graph_input((batch, 3, image, image), name="image")


def _check_size(name: str, value, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise OptionError(f"{name} must be an int >= {least}, got {value!r}")
    return int(value)


def resnet(depth: int = 50, image: int = 224, batch: int = 1, classes: int = 1000, seed=0):
    """ResNet-``depth`` (torchvision layout) on ``image`` x ``image`` RGB input.

    Example:
        >>> from aneforge.models.zoo import resnet
        >>> resnet(50)[1].shape
        (1, 1000)
    """
    if depth not in RESNET_BLOCKS:
        raise OptionError(f"resnet: depth {depth!r} is not one of {sorted(RESNET_BLOCKS)}")
    kind, counts = RESNET_BLOCKS[depth]
    init, x = _image_input("resnet", image, batch, seed)
    batch = x.shape[0]
    h = api.relu(init.bn(init.conv(x, 64, 7, stride=2)))
    h = api.max_pool(h, 3, stride=2, padding=1)
    for stage, count in enumerate(counts):
        width = 64 * 2**stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            h = _resnet_block(init, h, kind, width, stride)
    h = api.avg_pool(h, h.shape[-1])
    h = api.reshape(h, (batch, h.shape[1]))
    return x, init.linear(h, classes)


def _resnet_block(init: _Init, x, kind: str, width: int, stride: int) -> Tensor:
    out_ch = width * (4 if kind == "bottleneck" else 1)
    if kind == "basic":
        h = api.relu(init.bn(init.conv(x, width, 3, stride)))
        h = init.bn(init.conv(h, width, 3))
    else:
        h = api.relu(init.bn(init.conv(x, width, 1)))
        h = api.relu(init.bn(init.conv(h, width, 3, stride)))
        h = init.bn(init.conv(h, out_ch, 1))
    skip = x
    if stride != 1 or x.shape[1] != out_ch:
        skip = init.bn(init.conv(x, out_ch, 1, stride))
    return api.relu(h + skip)


def mobilenet_v2(image: int = 224, batch: int = 1, classes: int = 1000, seed=0):
    """MobileNet v2 (width 1.0, torchvision layout) on ``image`` x ``image`` input.

    Example:
        >>> from aneforge.models.zoo import mobilenet_v2
        >>> mobilenet_v2()[1].shape
        (1, 1000)
    """
    init, x = _image_input("mobilenet_v2", image, batch, seed)
    batch = x.shape[0]
    h = api.relu6(init.bn(init.conv(x, 32, 3, stride=2)))
    for t, c, n, s in MOBILENET_V2_STAGES:
        for i in range(n):
            cin = h.shape[1]
            y = h
            if t != 1:
                y = api.relu6(init.bn(init.conv(y, cin * t, 1)))
            y = api.relu6(init.bn(init.conv(y, y.shape[1], 3, s if i == 0 else 1, y.shape[1])))
            y = init.bn(init.conv(y, c, 1))
            h = h + y if (i > 0 or s == 1) and cin == c else y
    h = api.relu6(init.bn(init.conv(h, 1280, 1)))
    h = api.reshape(api.avg_pool(h, h.shape[-1]), (batch, 1280))
    return x, init.linear(h, classes)


def densenet121(image: int = 224, batch: int = 1, classes: int = 1000, seed=0):
    """DenseNet-121 (torchvision layout: BN-ReLU-conv bottlenecks, growth 32).

    Example:
        >>> from aneforge.models.zoo import densenet121
        >>> densenet121()[1].shape
        (1, 1000)
    """
    growth, blocks, stem = DENSENET121
    init, x = _image_input("densenet121", image, batch, seed)
    batch = x.shape[0]
    h = api.relu(init.bn(init.conv(x, stem, 7, stride=2)))
    h = api.max_pool(h, 3, stride=2, padding=1)
    for stage, count in enumerate(blocks):
        for _ in range(count):
            y = init.conv(api.relu(init.bn(h)), 4 * growth, 1)
            y = init.conv(api.relu(init.bn(y)), growth, 3)
            h = api.concat([h, y], axis=1)
        if stage < len(blocks) - 1:
            h = init.conv(api.relu(init.bn(h)), h.shape[1] // 2, 1)
            h = api.avg_pool(h, 2)
    h = api.relu(init.bn(h))
    h = api.reshape(api.avg_pool(h, h.shape[-1]), (batch, h.shape[1]))
    return x, init.linear(h, classes)


def mobileone(preset: str = "mobileone_s0", image=224, batch: int = 1, classes=1000, seed=0):
    """MobileOne in its inference form (``preset`` in :data:`MOBILEONE_WIDTHS`): a 3x3
    stride-2 stem, then per block a depthwise 3x3 and a pointwise 1x1 convolution with
    ReLU. S4's squeeze-excitation blocks are left out (a small part of its work).

    Example:
        >>> from aneforge.models.zoo import mobileone
        >>> mobileone("mobileone_s0")[1].shape
        (1, 1000)
    """
    if preset not in MOBILEONE_WIDTHS:
        raise OptionError(
            f"mobileone: unknown preset {preset!r}; one of {sorted(MOBILEONE_WIDTHS)}"
        )
    widths = MOBILEONE_WIDTHS[preset]
    init, x = _image_input("mobileone", image, batch, seed)
    batch = x.shape[0]
    h = api.relu(init.conv(x, min(64, int(64 * widths[0])), 3, stride=2))
    for stage, (depth, mult) in enumerate(zip(MOBILEONE_DEPTHS, widths)):
        out_ch = int(64 * 2**stage * mult)
        for i in range(depth):
            c = h.shape[1]
            h = api.relu(init.conv(h, c, 3, stride=2 if i == 0 else 1, groups=c))
            h = api.relu(init.conv(h, out_ch, 1))
    h = api.reshape(api.avg_pool(h, h.shape[-1]), (batch, h.shape[1]))
    return x, init.linear(h, classes)


def _encoder_layer(init: _Init, x, heads: int, hidden: int, pre_norm: bool) -> Tensor:
    d = x.shape[-1]
    proj = [init.he((d, d), d) for _ in range(4)]
    if pre_norm:  # ViT
        x = x + mha(init.ln(x), *proj, heads=heads)
        return x + init.linear(api.gelu(init.linear(init.ln(x), hidden)), d)
    x = init.ln(x + mha(x, *proj, heads=heads))  # BERT (post-norm)
    return init.ln(x + init.linear(api.gelu(init.linear(x, hidden)), d))


def vit(preset: str = "vit_b16", image: int = 224, batch: int = 1, classes=1000, seed=0):
    """A Vision Transformer with 16x16 patches (``preset`` in :data:`VIT_PRESETS`).

    Example:
        >>> from aneforge.models.zoo import vit
        >>> vit("vit_ti16")[1].shape
        (1, 1000)
    """
    if preset not in VIT_PRESETS:
        raise OptionError(f"vit: unknown preset {preset!r}; one of {sorted(VIT_PRESETS)}")
    image = _check_size("vit: image", image, 16)
    batch = _check_size("vit: batch", batch, 1)
    if image % 16:
        raise OptionError(f"vit: image {image} is not a multiple of the patch size 16")
    width, depth, heads = VIT_PRESETS[preset]
    init = _Init(seed)
    x = graph_input((batch, 3, image, image), name="image")
    # The 16x16/16 patch convolution, written as the engine runs it: its kernel is wider
    # than the engine's 13-15 limit, so the patches are unshuffled into channels and
    # embedded by a 1x1 convolution (the same map, with the weight's axes reordered).
    patches = api.conv(api.pixel_unshuffle(x, 16), init.he((width, 3 * 256, 1, 1), 3 * 256))
    tokens = (image // 16) ** 2
    h = api.transpose(api.reshape(patches, (batch, width, tokens)), (0, 2, 1))
    cls = weight(np.zeros((batch, 1, width)))
    h = api.concat([cls, h], axis=1)
    h = h + weight(init.rng.standard_normal((1, tokens + 1, width)) * 0.02)
    for _ in range(depth):
        h = _encoder_layer(init, h, heads, 4 * width, pre_norm=True)
    h = init.ln(h)
    cls_out = api.reshape(api.slice(h, (0, 0, 0), (batch, 1, width)), (batch, width))
    return x, init.linear(cls_out, classes)


def encoder(preset: str = "bert_base", seq: int = 128, batch: int = 1, seed=0):
    """A BERT-style encoder stack (``preset`` in :data:`ENCODER_PRESETS`) over ``seq``
    embedded tokens; the output is the last hidden state.

    Example:
        >>> from aneforge.models.zoo import encoder
        >>> encoder("minilm_l6", seq=16)[1].shape
        (1, 16, 384)
    """
    if preset not in ENCODER_PRESETS:
        raise OptionError(f"encoder: unknown preset {preset!r}; one of {sorted(ENCODER_PRESETS)}")
    seq, batch = _check_size("encoder: seq", seq, 1), _check_size("encoder: batch", batch, 1)
    hidden, layers, heads, inter = ENCODER_PRESETS[preset]
    init = _Init(seed)
    x = graph_input((batch, seq, hidden), name="embeddings")
    h = init.ln(x)
    for _ in range(layers):
        h = _encoder_layer(init, h, heads, inter, pre_norm=False)
    return x, h


MODELS = (
    *(f"resnet{d}" for d in RESNET_BLOCKS),
    "mobilenet_v2",
    "densenet121",
    *MOBILEONE_WIDTHS,
    *VIT_PRESETS,
    *ENCODER_PRESETS,
)


def build(name: str, batch: int = 1, size: int | None = None, seed: int = 0):
    """Build model ``name`` (one of :data:`MODELS`): ``size`` is the image side for the
    vision models (default 224) and the sequence length for encoders (default 128).

    Example:
        >>> from aneforge.models.zoo import build
        >>> build("minilm_l6", size=32)[0].shape
        (1, 32, 384)
    """
    if name.startswith("resnet") and name[6:].isdigit() and int(name[6:]) in RESNET_BLOCKS:
        return resnet(int(name[6:]), image=size or 224, batch=batch, seed=seed)
    if name == "mobilenet_v2":
        return mobilenet_v2(image=size or 224, batch=batch, seed=seed)
    if name == "densenet121":
        return densenet121(image=size or 224, batch=batch, seed=seed)
    if name in MOBILEONE_WIDTHS:
        return mobileone(name, image=size or 224, batch=batch, seed=seed)
    if name in VIT_PRESETS:
        return vit(name, image=size or 224, batch=batch, seed=seed)
    if name in ENCODER_PRESETS:
        return encoder(name, seq=size or 128, batch=batch, seed=seed)
    raise OptionError(f"unknown model {name!r}; one of {', '.join(MODELS)}")


__all__ = [
    "MODELS",
    "build",
    "densenet121",
    "encoder",
    "mobilenet_v2",
    "mobileone",
    "resnet",
    "vit",
]
