"""Weight compression: int8, int4 lookup-table and sparse weights, accuracy-gated.

An encoded weight is still a ``weight`` node whose ``value`` holds the values the device
decodes at load time (fp16); its ``attrs["encoding"]`` tells the cost model how many
bytes it streams. The emulator therefore runs compressed programs with no special case.
:mod:`.codecs` has the encodings and their exact byte counts, :mod:`.weights` the passes
(``compile(compress=...)``, the whole-graph int8 variant) and the accuracy gate.
See docs/compression.md.

int8: per output channel c, ``scale_c = max|w_c| / 127`` (rounded to fp16),
``q = clip(round_half_even(w / scale_c), -127, 127)``, decoded as ``fp16(q * scale_c)``.

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.compression import quantize_graph_int8
    >>> x = af.input((2, 8))
    >>> y = quantize_graph_int8(x @ np.linspace(-1, 1, 32).reshape(8, 4))
    >>> y.srcs[1].attrs["encoding"]
    'int8'
"""

from __future__ import annotations

from .codecs import (
    ENCODINGS,
    LLOYD_MAX_ITERS,
    LUT_SIZE,
    SPARSE_MIN_ZEROS,
    Encoded,
    channel_error,
    decode_payload,
    encode,
    encoded_size,
    lloyd_lut,
    payload,
    quantize_int8,
    sparse_applicable,
    stream_bytes,
    zero_fraction,
)
from .weights import (
    COMPRESS_MODES,
    DEFAULT_COMPRESS_ATOL,
    NATIVE_STREAMS,
    choose_encoding,
    compress_graph,
    encoded_weight,
    int8_weight,
    lossy_message,
    native_streams,
    quantizable_weight_index,
    quantize_graph_int8,
    rewrite_contraction_weights,
    weight_payload,
    weight_stream_bytes,
    weight_stream_bytes_exact,
)

# Bytes per element of each encoding, before per-tensor / per-channel overheads.
ENCODING_BYTES = {"fp16": 2.0, "int8": 1.0, "int4": 0.5}

__all__ = [
    "COMPRESS_MODES",
    "DEFAULT_COMPRESS_ATOL",
    "ENCODINGS",
    "ENCODING_BYTES",
    "LLOYD_MAX_ITERS",
    "LUT_SIZE",
    "NATIVE_STREAMS",
    "SPARSE_MIN_ZEROS",
    "Encoded",
    "channel_error",
    "choose_encoding",
    "compress_graph",
    "decode_payload",
    "encode",
    "encoded_size",
    "encoded_weight",
    "int8_weight",
    "lloyd_lut",
    "lossy_message",
    "native_streams",
    "payload",
    "quantizable_weight_index",
    "quantize_graph_int8",
    "quantize_int8",
    "rewrite_contraction_weights",
    "sparse_applicable",
    "stream_bytes",
    "weight_payload",
    "weight_stream_bytes",
    "weight_stream_bytes_exact",
    "zero_fraction",
]
