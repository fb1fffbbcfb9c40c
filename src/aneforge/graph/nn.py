"""Neural-network helpers built from the op set: attention, MLP and the bundled examples.

Every weight matrix the helpers take is in PyTorch's ``nn.Linear`` layout,
``[out_features, in_features]``, applied as :func:`aneforge.linear` (``x @ w.T``), so a
PyTorch state dict's tensors go in as they are. (Before this release ``mha`` took its
projections as ``x @ w``: pass ``w.T`` to keep such weights.)

Example:
    >>> import numpy as np, aneforge as af
    >>> rng = np.random.default_rng(0)
    >>> x = af.input((1, 16, 32))
    >>> w = [rng.standard_normal((32, 32)) * 0.1 for _ in range(4)]
    >>> af.nn.mha(x, *w, heads=4).shape
    (1, 16, 32)
"""

from __future__ import annotations

import numpy as np

from ..errors import AttributeValueError, ShapeError
from . import api
from .registry import check_int, describe, get_op
from .tensor import Tensor, as_tensor, weight
from .tensor import input as graph_input


def mha(x, wq, wk, wv, wo, heads: int, kv=None, mask=None, *, name=None) -> Tensor:
    """Multi-head attention with the attention written out (no fused sdpa).

    ``x`` is [B, S, D] (queries), ``kv`` [B, T, D] (keys/values, default ``x``); the
    projections ``wq``, ``wk``, ``wv``, ``wo`` are [D, D] weights in PyTorch's layout
    ``[out_features, in_features]``, applied as ``linear(x, w)`` = ``x @ w.T`` (the layout
    of :func:`mlp` and :func:`aneforge.linear`; weights written for ``x @ w``, the layout
    before this release, go in as ``w.T``). Per head:
    ``softmax((q @ k^T) * head_dim**-0.5 + mask) @ v``, heads concatenated, then ``linear(., wo)``.
    ``name`` labels the output projection; the inner layers are then ``{name}/q``,
    ``{name}/k``, ``{name}/v``, ``{name}/scores``, ``{name}/probs`` and ``{name}/context``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((2, 8, 16))
        >>> ws = [np.eye(16) for _ in range(4)]
        >>> af.nn.mha(x, *ws, heads=2).shape
        (2, 8, 16)
    """
    heads = check_int(heads, "mha", 1, "heads")
    x = as_tensor(x, "mha x")
    kv = x if kv is None else as_tensor(kv, "mha kv")
    if x.ndim != 3 or kv.ndim != 3:
        raise ShapeError(
            f"mha: x and kv must be [batch, length, width], got {x.shape} and {kv.shape}"
        )
    b, s, d = x.shape
    t = kv.shape[1]
    if d % heads:
        raise ShapeError(f"mha: model width {d} is not divisible by heads={heads}")
    hd = d // heads

    def split(y, length):  # [B, L, D] -> [B, H, L, hd]
        return api.transpose(api.reshape(y, (b, length, heads, hd)), (0, 2, 1, 3))

    def sub(part):
        return None if name is None else f"{name}/{part}"

    q = split(api.linear(x, wq, name=sub("q")), s)
    k = split(api.linear(kv, wk, name=sub("k")), t)
    v = split(api.linear(kv, wv, name=sub("v")), t)
    scores = api.bmm(q, api.transpose(k, (0, 1, 3, 2))) * float(hd**-0.5)
    if mask is not None:
        scores = scores + mask
    if name is not None:
        scores = scores.named(sub("scores"))
    probs = api.softmax(scores, axis=-1, name=sub("probs"))
    ctx = api.bmm(probs, v, name=sub("context"))
    merged = api.reshape(api.transpose(ctx, (0, 2, 1, 3)), (b, s, d))
    return api.linear(merged, wo, name=name)


def mlp(x, w1, b1, w2, b2, activation: str = "gelu", *, name=None) -> Tensor:
    """Two-layer perceptron ``linear(act(linear(x, w1, b1)), w2, b2)``.

    ``w1`` is [hidden, D] and ``w2`` [D, hidden]: PyTorch's ``nn.Linear`` layout
    ``[out_features, in_features]``, as :func:`mha` takes its projections.

    ``name`` labels the second linear; the first is then ``{name}/fc1`` and the
    activation ``{name}/act``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((4, 8))
        >>> af.nn.mlp(x, np.zeros((16, 8)), np.zeros(16), np.zeros((8, 16)), np.zeros(8)).shape
        (4, 8)
    """
    act = api.ELEMENTWISE.get(activation) if isinstance(activation, str) else None
    if act is None or get_op(activation).arity != 1:
        raise AttributeValueError(
            f"mlp: unknown activation {describe(activation)}; use a unary op name such as "
            "'gelu' or 'relu'"
        )

    def sub(part):
        return None if name is None else f"{name}/{part}"

    hidden = act(api.linear(x, w1, b1, name=sub("fc1")), name=sub("act"))
    return api.linear(hidden, w2, b2, name=name)


def _init(rng, shape, fan_in, transposed=False):
    """A seeded weight with entries N(0, 1/fan_in); ``transposed`` stores the draw's
    transpose (the examples keep the values they were drawn with in their old layout)."""
    value = rng.standard_normal(shape) / np.sqrt(fan_in)
    return weight(value.T if transposed else value)


def small_cnn(seed: int = 0, image: int = 32, classes: int = 10):
    """A small CNN (conv-bn-relu x3, pooling, linear head) with seeded weights.

    Returns ``(input_tensor, logits_tensor)``.

    Example:
        >>> import aneforge as af
        >>> x, y = af.nn.small_cnn()
        >>> y.shape
        (1, 10)
    """
    rng = np.random.default_rng(check_int(seed, "small_cnn", 0, "seed"))
    x = api_input((1, 3, image, image), "image")
    h = x
    cin = 3
    for i, cout in enumerate((16, 32, 64)):
        h = api.conv(h, _init(rng, (cout, cin, 3, 3), cin * 9), padding=1)
        h = api.batch_norm(
            h,
            weight(rng.standard_normal(cout) * 0.1),
            weight(rng.uniform(0.5, 1.5, cout)),
            weight(rng.uniform(0.8, 1.2, cout)),
            weight(rng.standard_normal(cout) * 0.1),
        )
        h = api.relu(h)
        h = api.max_pool(h, 2) if i < 2 else api.avg_pool(h, h.shape[-1])
        cin = cout
    h = api.reshape(h, (1, cin))
    logits = api.linear(h, _init(rng, (classes, cin), cin), weight(np.zeros(classes)))
    return x, logits


def transformer_block(seed: int = 0, seq: int = 32, width: int = 64, heads: int = 4):
    """A pre-norm transformer encoder block (attention + GELU MLP) with seeded weights.

    Returns ``(input_tensor, output_tensor)``.

    Example:
        >>> import aneforge as af
        >>> x, y = af.nn.transformer_block()
        >>> y.shape
        (1, 32, 64)
    """
    rng = np.random.default_rng(check_int(seed, "transformer_block", 0, "seed"))
    x = api_input((1, seq, width), "tokens")
    ln1 = api.layer_norm(x, weight(np.ones(width)), weight(np.zeros(width)))
    # drawn as x @ w matrices before mha took PyTorch's layout: stored transposed, so the
    # block computes what it always has
    proj = [_init(rng, (width, width), width, transposed=True) for _ in range(4)]
    h = x + mha(ln1, *proj, heads=heads)
    ln2 = api.layer_norm(h, weight(np.ones(width)), weight(np.zeros(width)))
    hidden = 4 * width
    out = h + mlp(
        ln2,
        _init(rng, (hidden, width), width),
        weight(np.zeros(hidden)),
        _init(rng, (width, hidden), hidden),
        weight(np.zeros(width)),
    )
    return x, out


def api_input(shape, name):
    """Declare an input (kept here so the helpers read top to bottom)."""
    return graph_input(shape, name=name)


EXAMPLES = {"cnn": small_cnn, "transformer": transformer_block}
