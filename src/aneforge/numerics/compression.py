"""Weight compression: per-output-channel symmetric int8 (the whole-graph int8 variant).

An encoded weight is still a ``weight`` node whose ``value`` holds the values the device
decodes at load time (fp16); its ``attrs["encoding"]`` tells the cost model how many
bytes it streams. The emulator therefore runs compressed programs with no special case.

int8: per output channel c, ``scale_c = max|w_c| / 127`` (rounded to fp16),
``q = clip(round_half_even(w / scale_c), -127, 127)``, decoded as ``fp16(q * scale_c)``.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics.compression import quantize_graph_int8
    >>> x = af.input((2, 8))
    >>> y = quantize_graph_int8(x @ np.linspace(-1, 1, 32).reshape(8, 4))
    >>> y.srcs[1].attrs["encoding"]
    'int8'
"""

from __future__ import annotations

import numpy as np

from ..graph.fp16 import round_fp16
from ..graph.tensor import FrozenAttrs, Tensor

# Which operand of which op is a weight with output channels, and along which axis.
WEIGHT_CHANNEL_AXIS = {"matmul": (1, -1), "linear": (1, 0), "conv": (1, 0)}
CONV_TRANSPOSE_AXIS = ("conv_transpose", 1, 1)

ENCODING_BYTES = {"fp16": 2.0, "int8": 1.0}


def weight_stream_bytes(w: Tensor) -> float:
    """Bytes a weight streams under its encoding (int8 adds one fp16 scale per channel)."""
    enc = w.attrs.get("encoding", "fp16")
    total = w.size * ENCODING_BYTES[enc]
    if enc == "int8":
        total += 2 * int(w.attrs["channels"])
    return total


def quantize_int8(values: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 along ``axis``: (decoded fp16 values, fp16 scales)."""
    w = np.asarray(values, dtype=np.float64)
    axis %= w.ndim
    reduce_axes = tuple(a for a in range(w.ndim) if a != axis)
    peak = np.max(np.abs(w), axis=reduce_axes, keepdims=True) if reduce_axes else np.abs(w)
    scale = round_fp16(peak / 127.0).astype(np.float64)
    scale[scale == 0] = 1.0
    q = np.clip(np.round(w / scale), -127, 127)
    return round_fp16(q * scale), round_fp16(scale).reshape(-1)


def int8_weight(w: Tensor, axis: int) -> Tensor:
    """An int8-encoded copy of weight ``w`` (decoded values, encoding in attrs)."""
    decoded, scales = quantize_int8(w.value, axis)
    decoded.setflags(write=False)
    attrs = FrozenAttrs(encoding="int8", channels=int(scales.size))
    return Tensor("weight", (), attrs, w.shape, name=w.name, value=decoded)


def _channel_axis(node: Tensor) -> tuple[int, int] | None:
    if node.op in WEIGHT_CHANNEL_AXIS:
        return WEIGHT_CHANNEL_AXIS[node.op]
    if node.op == CONV_TRANSPOSE_AXIS[0]:
        return CONV_TRANSPOSE_AXIS[1:]
    return None


def quantizable_weight_index(node: Tensor) -> int | None:
    """Which source of ``node`` the int8 variant quantizes (a contraction's weight)."""
    where = _channel_axis(node)
    if where is None or len(node.srcs) <= where[0] or node.srcs[where[0]].op != "weight":
        return None
    return where[0]


def quantize_graph_int8(out):
    """The whole-graph int8 variant: every contraction weight per-channel int8.

    Returns the rewritten output(s) (same structure as given); weights used elsewhere
    (biases, norm parameters) stay fp16. Lossy: about 1% relative error per weight.
    """
    from ..optimizer.rewrite import Rule, rewrite

    def encode(node):
        where = _channel_axis(node)
        if where is None or len(node.srcs) <= where[0]:
            return None
        index, axis = where
        w = node.srcs[index]
        if w.op != "weight" or w.attrs.get("encoding", "fp16") != "fp16" or w.ndim < 1:
            return None
        srcs = list(node.srcs)
        srcs[index] = int8_weight(w, axis)
        return Tensor(node.op, srcs, node.attrs, node.shape)

    ops = (*WEIGHT_CHANNEL_AXIS, CONV_TRANSPOSE_AXIS[0])
    rule = Rule("int8_weights", ops, encode, False, "contraction weights as per-channel int8")
    single = isinstance(out, Tensor)
    outs, _ = rewrite([out] if single else list(out), [rule])
    return outs[0] if single else outs
