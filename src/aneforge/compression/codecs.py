"""The weight codecs: encode, decode, exact byte counts and the per-weight error.

Each codec maps a weight's fp16 values to what the device streams and back. The decoded
fp16 array is what the device materialises at load time; a compressed weight's
``value`` holds exactly that array, so the emulator runs compressed programs as they
run on the engine, with no special case.

- ``int8``: per output channel ``c``, ``scale_c = fp16(max|w_c| / 127)`` (1 when the
  channel is all zeros), ``q = clip(round_half_even(w / scale_c), -127, 127)``, decoded
  as ``fp16(q * scale_c)`` (one rounding: ``q * scale_c`` is exact in float32). Streams
  ``n`` bytes plus one fp16 scale per channel.
- ``int4``: one 16-entry fp16 lookup table per tensor, fitted by Lloyd's algorithm
  (1-D k-means, :func:`lloyd_lut`); each element stores the 4-bit index of its nearest
  entry. Streams ``ceil(n / 2)`` bytes of indices plus 32 bytes of table.
- ``sparse``: a bitmask (one bit per element, set where the value is nonzero) plus
  the nonzero values in fp16, row-major. Streams ``ceil(n / 8) + 2 * nnz`` bytes.
  Lossless except that a ``-0.0`` decodes as ``+0.0``. Only offered for weights that
  are at least half zeros (:data:`SPARSE_MIN_ZEROS`).

Example:
    >>> import numpy as np
    >>> from aneforge.compression.codecs import encode, stream_bytes
    >>> enc = encode(np.arange(64.0).reshape(8, 8), "int4", axis=0)
    >>> stream_bytes("int4", (8, 8))
    64
    >>> len(enc.meta["lut"])
    16
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..graph.fp16 import round_fp16
from ..graph.frozen import freeze

ENCODINGS = ("fp16", "int8", "int4", "sparse")
LOSSY_ENCODINGS = ("int4", "int8")
LUT_SIZE = 16  # int4: 2**4 table entries
LUT_BITS = 4
LLOYD_MAX_ITERS = 100  # Lloyd stops earlier once the cell boundaries stop moving
SPARSE_MIN_ZEROS = 0.5  # sparse applies only to weights at least half zeros
INT8_QMAX = 127


@dataclass(frozen=True)
class Encoded:
    """One encoded weight: its decoded fp16 values and the small metadata kept in attrs.

    ``meta`` holds what cannot be recovered from the decoded values alone: the int8
    per-channel scales and axis, the int4 table. Everything else (int8 codes, int4
    indices, the sparse mask) is a deterministic function of ``decoded`` and ``meta``;
    :func:`payload` rebuilds it.
    """

    encoding: str
    decoded: np.ndarray  # fp16, read-only, the weight's shape
    meta: dict = field(default_factory=dict)


def stream_bytes(encoding: str, shape, channels: int | None = None, nnz: int | None = None):
    """Exact bytes a weight of ``shape`` streams under ``encoding`` (an int).

    ``channels`` is needed for int8 (one fp16 scale each), ``nnz`` for sparse.
    """
    n = math.prod(shape)
    if encoding == "fp16":
        return 2 * n
    if encoding == "int8":
        return n + 2 * int(channels)
    if encoding == "int4":
        return -(-n * LUT_BITS // 8) + 2 * LUT_SIZE
    if encoding == "sparse":
        return -(-n // 8) + 2 * int(nnz)
    raise ValueError(f"unknown weight encoding '{encoding}'")


# ---- int8 ------------------------------------------------------------------------------


def quantize_int8(values, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel symmetric int8 along ``axis``: (decoded fp16 values, fp16 scales)."""
    w = np.asarray(values, dtype=np.float64)
    axis %= w.ndim
    reduce_axes = tuple(a for a in range(w.ndim) if a != axis)
    peak = np.max(np.abs(w), axis=reduce_axes, keepdims=True) if reduce_axes else np.abs(w)
    scale = round_fp16(peak / INT8_QMAX).astype(np.float64)
    scale[scale == 0] = 1.0
    # + 0.0: an int8 code has no sign of zero, so -0.0 decodes as +0.0 on the device.
    q = np.clip(np.round(w / scale), -INT8_QMAX, INT8_QMAX) + 0.0
    return round_fp16(q * scale), round_fp16(scale).reshape(-1)


def _broadcast(vector: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(vector, np.float64).reshape(shape)


def int8_codes(decoded: np.ndarray, scales, axis: int) -> np.ndarray:
    """The int8 codes behind int8-decoded values (exact: the rounding error of
    ``fp16(q * s)`` is below ``s / 2`` for every ``|q| <= 127``)."""
    d = np.asarray(decoded, np.float64)
    s = _broadcast(np.asarray(scales, np.float16), d.ndim, axis % d.ndim)
    return np.clip(np.round(d / s), -INT8_QMAX, INT8_QMAX).astype(np.int8)


def int8_decode(codes, scales, axis: int) -> np.ndarray:
    """``fp16(q * scale)`` along ``axis``: constexpr_affine_dequantize with zero point 0."""
    q = np.asarray(codes, np.float64)
    s = _broadcast(np.asarray(scales, np.float16), q.ndim, axis % q.ndim)
    return round_fp16(q * s)


# ---- int4 lookup table -------------------------------------------------------------------


def lloyd_lut(values, k: int = LUT_SIZE, max_iters: int = LLOYD_MAX_ITERS) -> np.ndarray:
    """A deterministic ``k``-entry table for ``values`` (sorted fp16, length ``k``).

    Lloyd's algorithm in one dimension, on the sorted values in float64:

    - at most ``k`` distinct values: the table is those values (padded by repeating the
      largest), and int4 is exact;
    - init: the values at quantiles ``(j + 1/2) / k``; when ties put two of them on the
      same value, the quantiles of the distinct values instead (so no entry starts as
      a duplicate);
    - iterate: cells are split at the midpoints between neighbouring centroids (a value
      on a midpoint joins the lower cell), each centroid moves to the mean of its cell
      (an empty cell keeps its centroid); stop when no centroid moves or after
      ``max_iters`` rounds;
    - the centroids are rounded to fp16 and sorted.

    No randomness, no data-order dependence: the same values give the same table.
    """
    v = np.sort(np.asarray(values, np.float64).ravel())
    distinct = np.unique(v)
    if distinct.size <= k:
        pad = np.full(k - distinct.size, distinct[-1] if distinct.size else 0.0)
        return round_fp16(np.concatenate([distinct, pad]))
    n = v.size
    centroids = v[((np.arange(k) + 0.5) * n / k).astype(np.int64)]
    if np.unique(centroids).size < k:
        m = distinct.size
        centroids = distinct[((np.arange(k) + 0.5) * m / k).astype(np.int64)]
    prefix = np.concatenate([[0.0], np.cumsum(v)])
    for _ in range(max_iters):
        mids = (centroids[:-1] + centroids[1:]) / 2
        edges = np.concatenate([[0], np.searchsorted(v, mids, side="right"), [n]])
        counts = np.diff(edges)
        sums = prefix[edges[1:]] - prefix[edges[:-1]]
        moved = np.where(counts > 0, sums / np.maximum(counts, 1), centroids)
        moved = np.sort(moved)
        if np.array_equal(moved, centroids):
            break
        centroids = moved
    return np.sort(round_fp16(centroids))


def lut_indices(values, lut) -> np.ndarray:
    """Index of the nearest table entry per element (a tie goes to the lower entry)."""
    table = np.asarray(lut, np.float64)
    mids = (table[:-1] + table[1:]) / 2
    v = np.asarray(values, np.float64)
    return np.searchsorted(mids, v, side="left").astype(np.uint8)


def pack_bits(fields, nbits: int) -> np.ndarray:
    """Pack unsigned ``nbits``-bit fields row-major, least significant bit first.

    The layout of Core ML's ``constexpr_lut_to_dense`` indices and (``nbits=1``)
    ``constexpr_sparse_to_dense`` mask: ``ceil(nbits * n / 8)`` bytes.
    """
    f = np.asarray(fields, np.uint8).ravel()
    bits = ((f[:, None] >> np.arange(nbits, dtype=np.uint8)) & 1).astype(np.uint8)
    return np.packbits(bits.ravel(), bitorder="little")


def unpack_bits(packed, nbits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``count`` fields of ``nbits`` bits."""
    bits = np.unpackbits(np.asarray(packed, np.uint8), bitorder="little")[: count * nbits]
    weights = (1 << np.arange(nbits)).astype(np.uint8)
    return (bits.reshape(count, nbits) * weights).sum(axis=1).astype(np.uint8)


# ---- sparse ------------------------------------------------------------------------------


def zero_fraction(values) -> float:
    """Share of elements equal to zero (either sign)."""
    v = np.asarray(values)
    return float(np.count_nonzero(v == 0)) / v.size if v.size else 0.0


def sparse_applicable(values) -> bool:
    """Whether sparse applies: at least :data:`SPARSE_MIN_ZEROS` of the weight is zero."""
    return np.asarray(values).size > 0 and zero_fraction(values) >= SPARSE_MIN_ZEROS


def sparse_decode(mask_packed, nonzeros, shape) -> np.ndarray:
    """Dense fp16 from a packed bitmask and the row-major nonzero values."""
    n = math.prod(shape)
    mask = np.unpackbits(np.asarray(mask_packed, np.uint8), bitorder="little")[:n] != 0
    dense = np.zeros(n, np.float16)
    dense[mask] = np.asarray(nonzeros, np.float16)
    return dense.reshape(shape)


# ---- encode / payload / error -------------------------------------------------------------


def _frozen(a: np.ndarray) -> np.ndarray:
    return freeze(np.asarray(a, dtype=np.float16))  # immutable


def encode(values, encoding: str, axis: int = 0) -> Encoded:
    """Encode ``values`` (fp16-representable) as ``encoding``; ``axis``: output channels.

    Raises ValueError for sparse on a weight with fewer than half zeros.
    """
    w = round_fp16(np.asarray(values, np.float64))
    if encoding == "fp16":
        return Encoded("fp16", _frozen(w))
    if encoding == "int8":
        axis %= max(w.ndim, 1)
        decoded, scales = quantize_int8(w, axis)
        meta = {"channels": int(scales.size), "axis": axis,
                "scales": tuple(float(s) for s in scales)}  # fmt: skip
        return Encoded("int8", _frozen(decoded), meta)
    if encoding == "int4":
        lut = lloyd_lut(w)
        decoded = lut[lut_indices(w, lut)].reshape(w.shape)
        return Encoded("int4", _frozen(decoded), {"lut": tuple(float(x) for x in lut)})
    if encoding == "sparse":
        if not sparse_applicable(w):
            raise ValueError(
                f"sparse needs at least {SPARSE_MIN_ZEROS:.0%} zeros, this weight has "
                f"{zero_fraction(w):.1%}"
            )
        decoded = np.where(w == 0, np.float16(0.0), w)
        return Encoded("sparse", _frozen(decoded), {"nnz": int(np.count_nonzero(w))})
    raise ValueError(f"unknown weight encoding '{encoding}'")


def encoded_size(enc: Encoded) -> int:
    """Exact streamed bytes of an :class:`Encoded`."""
    return stream_bytes(enc.encoding, enc.decoded.shape, enc.meta.get("channels"),
                        enc.meta.get("nnz"))  # fmt: skip


def payload(encoding: str, decoded, meta) -> dict:
    """The arrays the device streams, rebuilt from the decoded values and ``meta``.

    - int8: ``quantized_data`` (int8, the weight's shape), ``scale`` (fp16, one per
      channel), ``zero_point`` (int8 zeros, one per channel), ``axis``;
    - int4: ``indices`` (uint8, 4-bit fields packed LSB first, ``ceil(n / 2)`` bytes),
      ``lut`` (fp16, 16), ``shape``;
    - sparse: ``mask`` (uint8, bits packed LSB first, ``ceil(n / 8)`` bytes),
      ``nonzero_data`` (fp16, row-major), ``shape``.
    """
    d = np.asarray(decoded, np.float16)
    if encoding == "int8":
        scales = np.asarray(meta["scales"], np.float16)
        axis = int(meta["axis"])
        return {
            "quantized_data": int8_codes(d, scales, axis),
            "scale": scales,
            "zero_point": np.zeros(scales.size, np.int8),
            "axis": axis,
        }
    if encoding == "int4":
        lut = np.asarray(meta["lut"], np.float16)
        return {
            "indices": pack_bits(lut_indices(d, lut), LUT_BITS),
            "lut": lut,
            "shape": tuple(d.shape),
        }
    if encoding == "sparse":
        flat = d.ravel()
        return {
            "mask": pack_bits(flat != 0, 1),
            "nonzero_data": flat[flat != 0].copy(),
            "shape": tuple(d.shape),
        }
    raise ValueError(f"no payload for encoding '{encoding}'")


def decode_payload(encoding: str, data: dict, shape) -> np.ndarray:
    """Decode a :func:`payload` to fp16, as the device does at load time."""
    if encoding == "int8":
        return int8_decode(data["quantized_data"], data["scale"], data["axis"])
    if encoding == "int4":
        idx = unpack_bits(data["indices"], LUT_BITS, math.prod(shape))
        return np.asarray(data["lut"], np.float16)[idx].reshape(shape)
    if encoding == "sparse":
        return sparse_decode(data["mask"], data["nonzero_data"], shape)
    raise ValueError(f"no payload for encoding '{encoding}'")


def channel_error(values, decoded, axis: int) -> float:
    """The accuracy gate's metric: ``max_c ||w_c - d_c||_2 / ||w_c||_2``.

    ``c`` runs over the output channels (``axis``). For probe inputs with independent,
    zero-mean, equal-variance entries this is exactly the RMS relative deviation of
    that channel's layer output, ``E|x.(w_c - d_c)|^2 / E|x.w_c|^2``, computed in
    closed form (no sampling); the max over channels means no single output feature may
    degrade beyond the budget, which a per-tensor table with outliers does. An all-zero
    channel counts 0 when it decodes to zeros, else infinity; any non-finite decoded
    value is infinity.
    """
    w = np.asarray(values, np.float64)
    d = np.asarray(decoded, np.float64)
    if not np.all(np.isfinite(d)):
        return float("inf")
    if w.ndim == 0:
        w, d, axis = w.reshape(1), d.reshape(1), 0
    axis %= w.ndim
    other = tuple(a for a in range(w.ndim) if a != axis)
    num = np.sqrt(np.sum((w - d) ** 2, axis=other)) if other else np.abs(w - d)
    den = np.sqrt(np.sum(w**2, axis=other)) if other else np.abs(w)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(den > 0, num / np.where(den > 0, den, 1.0),
                         np.where(num > 0, np.inf, 0.0))  # fmt: skip
    return float(np.max(ratio, initial=0.0))
