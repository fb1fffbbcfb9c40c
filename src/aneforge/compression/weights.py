"""Graph-level weight compression: which weights, which encoding, the gate, the report.

Only the weight operand of a contraction is compressed (``x @ W``, ``linear``, ``conv``,
``conv_transpose``: the ops whose record declares a ``weight_operand``, with the
output-channel axis the per-channel encodings scale along): the weights the kernel DMA
streams. Biases, norm parameters and
scalar constants stay fp16. A compressed weight is a new ``weight`` node whose
``value`` holds the decoded fp16 values and whose attrs carry ``encoding`` and the
metadata of :mod:`.codecs`.

Modes (``compile(compress=...)``):

- ``'int8'``: per-channel int8 where its error is within ``atol``, else fp16;
- ``'int4'``: the int4 table, falling back to int8, then fp16, by the same gate;
- ``'sparse'``: bitmask + nonzeros for weights at least half zeros, else fp16;
- ``'auto'``: sparse if at least half zeros, else int4 within ``atol``, else int8
  within ``atol``, else fp16 - among the encodings the target family streams natively
  (:data:`NATIVE_STREAMS`). Explicit modes ignore the family (honoured everywhere, and
  reported as non-native where the target folds them back to fp16).

An encoding that would stream no fewer bytes than fp16 (a tiny weight under a 32-byte
table) is never chosen. The gate's error is :func:`.codecs.channel_error`.
"""

from __future__ import annotations

import numpy as np

from ..graph.registry import all_ops, get_op
from ..graph.rewrite import Rule, rewrite
from ..graph.tensor import FrozenAttrs, Tensor
from ..targets.capability import capabilities, capability
from .codecs import (
    ENCODINGS,
    LOSSY_ENCODINGS,
    SPARSE_MIN_ZEROS,
    Encoded,
    channel_error,
    encode,
    encoded_size,
    payload,
    sparse_applicable,
    stream_bytes,
    zero_fraction,
)

COMPRESS_MODES = ("int8", "int4", "sparse", "auto")
DEFAULT_COMPRESS_ATOL = 0.05

_ALL = frozenset({"int8", "int4", "sparse"})
#: family -> the encodings it streams natively through the kernel DMA: a view of each
#: family's capability record (``Capability.native_streams``, data/families.json, which
#: gives the source; docs/compression.md, "Per-family native encodings").
NATIVE_STREAMS: dict[int, frozenset] = {c.family: c.native_streams for c in capabilities()}


def native_streams(family: int | None) -> frozenset:
    """Encodings ``family`` streams natively (all of them without a target)."""
    if family is None:
        return _ALL
    return capability(family).native_streams


def weight_stream_bytes_exact(w: Tensor, family: int | None = None) -> int:
    """Exact bytes weight ``w`` streams; an encoding ``family`` does not stream natively
    is folded back to dense fp16 by the device and costs fp16 bytes."""
    enc = w.attrs.get("encoding", "fp16")
    if enc != "fp16" and family is not None and enc not in native_streams(family):
        enc = "fp16"
    return stream_bytes(enc, w.shape, w.attrs.get("channels"), w.attrs.get("nnz"))


def weight_stream_bytes(w: Tensor, family: int | None = None) -> float:
    """:func:`weight_stream_bytes_exact` as a float (what the roofline sums)."""
    return float(weight_stream_bytes_exact(w, family))


def weight_payload(w: Tensor) -> dict:
    """The arrays an encoded weight streams (for exporters); see :func:`.codecs.payload`."""
    return payload(w.attrs["encoding"], w.value, w.attrs)


def encoded_weight(w: Tensor, enc: Encoded) -> Tensor:
    """A weight node holding ``enc`` (decoded values; encoding and metadata in attrs)."""
    attrs = FrozenAttrs(encoding=enc.encoding, **enc.meta)
    return Tensor("weight", (), attrs, w.shape, name=w.name, value=enc.decoded)


def int8_weight(w: Tensor, axis: int) -> Tensor:
    """An int8-encoded copy of weight ``w`` (no gate: the whole-graph int8 variant)."""
    return encoded_weight(w, encode(w.value, "int8", axis))


def _channel_axis(node: Tensor) -> tuple[int, int] | None:
    """(weight source index, output-channel axis) of ``node``'s record, or None."""
    return get_op(node.op).weight_operand


def weight_ops() -> tuple[str, ...]:
    """The ops with a streamed weight operand (their records' ``weight_operand``)."""
    return tuple(name for name, op in all_ops().items() if op.weight_operand is not None)


def quantizable_weight_index(node: Tensor) -> int | None:
    """Which source of ``node`` the compression passes encode (a contraction's weight)."""
    where = _channel_axis(node)
    if where is None or len(node.srcs) <= where[0] or node.srcs[where[0]].op != "weight":
        return None
    return where[0]


def rewrite_contraction_weights(out, choose, name: str = "contraction_weights"):
    """Rewrite every fp16 contraction weight by ``choose(node, w, axis)`` (a Tensor or
    None to keep it); one decision per (weight, axis), so shared weights stay shared.
    Returns the new output(s), in the structure given."""
    memo: dict[tuple[int, int], Tensor | None] = {}
    keep: list[Tensor] = []  # keeps memo keys' objects alive, so ids stay unique

    def fn(node):
        index = quantizable_weight_index(node)
        if index is None:
            return None
        w = node.srcs[index]
        if w.attrs.get("encoding", "fp16") != "fp16" or w.ndim < 1:
            return None
        axis = _channel_axis(node)[1] % w.ndim
        key = (id(w), axis)
        if key not in memo:
            keep.append(w)
            memo[key] = choose(node, w, axis)
        new = memo[key]
        if new is None or new is w:
            return None
        keep.append(new)
        memo[(id(new), axis)] = None  # a replacement is final: never rewritten again
        srcs = list(node.srcs)
        srcs[index] = new
        return Tensor(node.op, srcs, node.attrs, node.shape)

    rule = Rule(name, weight_ops(), fn, False, "contraction weights compressed")
    single = isinstance(out, Tensor)
    outs, _ = rewrite([out] if single else list(out), [rule])
    return outs[0] if single else outs


def quantize_graph_int8(out):
    """The whole-graph int8 variant: every contraction weight per-channel int8.

    Returns the rewritten output(s) (same structure as given); weights used elsewhere
    (biases, norm parameters) stay fp16. Lossy: about 1% relative error per weight.
    No accuracy gate (the tuner measures the whole graph instead).
    """

    def choose(node, w, axis):
        return int8_weight(w, axis)

    return rewrite_contraction_weights(out, choose, "int8_weights")


def _ladder(mode: str, allowed: frozenset) -> tuple[str, ...]:
    """The lossy encodings tried in order, best compression first."""
    if mode == "int8":
        return ("int8",)
    if mode == "int4":
        return ("int4", "int8")
    if mode == "auto":
        return tuple(e for e in ("int4", "int8") if e in allowed)
    return ()


def choose_encoding(values, axis: int, mode: str, atol: float, allowed=_ALL):
    """The encoding of one weight under ``mode`` and the gate: (Encoded, decision).

    ``decision`` has ``encoding``, ``error`` (the chosen encoding's gate metric),
    ``tried`` (every encoding evaluated and its error), ``zeros`` and ``reason``.
    """
    w = np.asarray(values)
    fp16 = stream_bytes("fp16", w.shape)
    tried: dict[str, float] = {}
    notes: list[str] = []

    def attempt(enc_name):
        enc = encode(w, enc_name, axis)
        err = channel_error(w, enc.decoded, axis)
        tried[enc_name] = err
        if encoded_size(enc) >= fp16:
            notes.append(f"{enc_name} saves no bytes")
            return None
        if err > atol:
            notes.append(f"{enc_name} error {err:.3g} > {atol:g}")
            return None
        return enc

    zeros = zero_fraction(w)
    chosen = None
    if mode == "sparse" or (mode == "auto" and "sparse" in allowed):
        if sparse_applicable(w):
            chosen = attempt("sparse")
        elif mode == "sparse":
            notes.append(f"sparse not applicable ({zeros:.0%} zeros < {SPARSE_MIN_ZEROS:.0%})")
    if chosen is None and mode != "sparse":
        for enc_name in _ladder(mode, allowed):
            chosen = attempt(enc_name)
            if chosen is not None:
                break
    if chosen is None:
        chosen = encode(w, "fp16")
    reason = "; ".join(notes) or ("within budget" if chosen.encoding != "fp16" else "")
    return chosen, {
        "encoding": chosen.encoding,
        "error": tried.get(chosen.encoding, 0.0),
        "tried": tried,
        "zeros": zeros,
        "reason": reason,
    }


def compress_graph(out, mode: str, atol: float = DEFAULT_COMPRESS_ATOL, target=None):
    """Compress the contraction weights of ``out`` under ``mode``: (outputs, report).

    ``target`` (a :class:`~aneforge.targets.table.Target` or None) restricts ``'auto'``
    to what its family streams natively and marks explicit choices as native or not.
    The report (``prog.passes['compression']``) lists per weight its name, consuming
    op, shape, encoding, bytes before and after, gate error, the encodings tried, its
    zero share, whether the target streams it natively, and why.
    """
    if mode not in COMPRESS_MODES:
        raise ValueError(f"compress must be one of {COMPRESS_MODES}, got {mode!r}")
    family = None if target is None else target.family
    native = native_streams(family)
    allowed = native if mode == "auto" else _ALL
    entries: list[dict] = []

    def choose(node, w, axis):
        enc, decision = choose_encoding(w.value, axis, mode, atol, allowed)
        after = encoded_size(enc)
        entries.append({
            "weight": w.name or f"{node.op}_{len(entries)}",
            "op": node.op,
            "shape": tuple(w.shape),
            "bytes_before": stream_bytes("fp16", w.shape),
            "bytes_after": after,
            "native": enc.encoding == "fp16" or enc.encoding in native,
            **decision,
        })  # fmt: skip
        return None if enc.encoding == "fp16" else encoded_weight(w, enc)

    outs = rewrite_contraction_weights(out, choose, f"compress_{mode}")
    before = sum(e["bytes_before"] for e in entries)
    after = sum(e["bytes_after"] for e in entries)
    lossy = [e for e in entries if e["encoding"] in LOSSY_ENCODINGS]
    report = {
        "mode": mode,
        "atol": float(atol),
        "target": None if target is None else target.arch,
        "family": family,
        "native": sorted(native),
        "weights": entries,
        "bytes_before": before,
        "bytes_after": after,
        "ratio": before / after if after else 1.0,
        "counts": {e: sum(x["encoding"] == e for x in entries) for e in ENCODINGS},
        "lossy": len(lossy),
        "worst_error": max((e["error"] for e in lossy), default=0.0),
    }
    return outs, report


def lossy_message(report: dict, caller: str) -> str | None:
    """The one warning line for a compression report, or None when nothing is lossy and
    everything chosen streams natively."""
    lossy = [e for e in report["weights"] if e["encoding"] in LOSSY_ENCODINGS]
    folded = sorted({e["encoding"] for e in report["weights"] if not e["native"]})
    if not lossy and not folded:
        return None
    parts = []
    if lossy:
        counts = ", ".join(
            f"{n} {enc}" for enc in LOSSY_ENCODINGS
            if (n := sum(e["encoding"] == enc for e in lossy))
        )  # fmt: skip
        parts.append(
            f"{len(lossy)} weight(s) stored lossy ({counts}), worst per-channel relative "
            f"error {report['worst_error']:.3g} (budget compress_atol={report['atol']:g}); "
            f"weights {report['bytes_before']} -> {report['bytes_after']} bytes "
            f"({report['ratio']:.2f}x)"
        )
    if folded:
        parts.append(
            f"{'/'.join(folded)} is not streamed natively on {report['target']} "
            f"(family {report['family']}): the device folds it back to fp16, an accuracy "
            "cost for no bandwidth gain"
        )
    return f"{caller}: " + "; ".join(parts) + "; prog.passes['compression'] lists every weight"
