"""Per-node roofline terms: bytes from shapes, FLOPs from the op record.

``bytes`` is generic for every op: (input elements + output elements) * 2 (fp16), where
weights are inputs too and stream at their encoded size (exact per encoding: int8 1 byte
per element + 2 per channel, int4 ceil(n/2) + 32, sparse ceil(n/8) + 2 per nonzero;
``compression.stream_bytes``). ``flops`` is the op
record's closed form (only contractions have one; everything else is bytes-bound).

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.cost.roofline import node_bytes
    >>> node_bytes(af.input((4, 8)) @ np.ones((8, 2)))
    112.0
"""

from __future__ import annotations

from ..compression import quantizable_weight_index, weight_stream_bytes
from ..graph.registry import get_op
from ..graph.tensor import Tensor

FP16_BYTES = 2
INT8_BYTES = 1


def weight_bytes(node: Tensor, int8: bool = False, family: int | None = None) -> float:
    """Bytes ``node``'s weight inputs stream: their encoded size (fp16 where ``family``
    does not stream the encoding natively; any encoding when ``family`` is None).

    ``int8=True`` prices the weight the int8 variant would quantize (the weight operand
    of a contraction) at 1 byte per element; biases and other weights stay as they are.
    """
    int8_index = quantizable_weight_index(node) if int8 else None
    total = 0.0
    for i, src in enumerate(node.srcs):
        if src.op != "weight":
            continue
        if i == int8_index and src.attrs.get("encoding", "fp16") == "fp16":
            total += src.size * INT8_BYTES
        else:
            total += weight_stream_bytes(src, family)
    return total


def node_bytes(node: Tensor, int8: bool = False) -> float:
    """Bytes a node moves: its inputs and its output, fp16 unless a weight is encoded
    (:func:`weight_bytes` for the weights).
    """
    op = get_op(node.op)
    if op.reads is not None:  # it reads part of a source: an embedding, the rows it picks
        read = op.read_elements([s.shape for s in node.srcs], node.shape, node.attrs)
        return node.size * FP16_BYTES + sum(n * _element_bytes(s) for n, s in zip(read, node.srcs))
    acts = node.size + sum(s.size for s in node.srcs if s.op != "weight")
    return acts * FP16_BYTES + weight_bytes(node, int8)


def _element_bytes(src: Tensor) -> int:
    """Bytes per element of a source: 1 for 8-bit integer inputs, else 2."""
    return INT8_BYTES if src.dtype in ("int8", "uint8") else FP16_BYTES


def node_flops(node: Tensor) -> int:
    """FLOPs of ``node`` from its op record (0 for every non-contraction)."""
    op = get_op(node.op)
    return int(op.flops([s.shape for s in node.srcs], node.shape, node.attrs))


def node_time_us(node: Tensor, bw: float, compute: float, int8: bool = False) -> float:
    """``max(bytes / BW, flops / COMPUTE)`` in microseconds (no floor)."""
    return max(node_bytes(node, int8) / bw, node_flops(node) / compute)
