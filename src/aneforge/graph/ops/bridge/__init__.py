"""The native bridge ops: the 19 ops the engine runs as separate native sub-programs.

A bridge op cuts a graph into fused regions (see the optimizer spec): sdpa, argmax, topk,
sort, minmax_norm, flatten, lrn, space_to_channel, channel_to_space, space_to_batch,
batch_to_space, input_view, dynamic_slice, cross_product, cross_correlation, cost_volume,
fps, radius_search and scaled_elementwise. Every one is registered with
``kind="bridge"``; the public functions are collected in :data:`BRIDGE_FUNCTIONS`.

Emulator contract (docs/numerics.md): each arithmetic step is one fp16 rounding of the
exact float64 result, every constant attribute (scale, eps, alpha/size, bias, beta,
radius) is rounded to fp16 before use, sums written "narrow" use the fp16 accumulator
(:func:`~aneforge.graph.fp16.narrow_sum`: every partial sum rounded, ascending order) and
the two contractions (``sdpa``, ``cross_correlation``) go through the executor's matmul
backend ``arith.matmul`` (fp16 products, float32 accumulator). Each public function's docstring
spells out its steps. The float64 executor runs the same formulas without any rounding,
with the constants as given.

Index outputs (argmax, topk indices, fps, radius_search) are carried as fp16 integers,
which are exact up to 2048; a node whose indexed axis is longer than 2049 elements is
refused with a :class:`~aneforge.errors.ShapeError` when it is built. Index ops follow
the same algorithm on fp16 values (emulator) and float64 values (reference).

The ops live by family in the modules :mod:`.attention` (sdpa), :mod:`.selection`
(argmax, topk, sort and the index helpers), :mod:`.normalize` (minmax_norm, lrn),
:mod:`.layout` (flatten, the four block moves, input_view, dynamic_slice),
:mod:`.geometry` (cross_product, cross_correlation, cost_volume, fps, radius_search) and
:mod:`.elementwise` (scaled_elementwise); importing this package registers all 19, in
the order of :data:`BRIDGE_OPS`.

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.ops.bridge import argmax
    >>> argmax(af.input((2, 7))).shape
    (2,)
"""

from __future__ import annotations

from ...registry import register
from . import attention, elementwise, geometry, layout, normalize, selection
from .attention import sdpa
from .elementwise import scaled_elementwise
from .geometry import cost_volume, cross_correlation, cross_product, fps, radius_search
from .layout import (
    batch_to_space,
    channel_to_space,
    dynamic_slice,
    flatten,
    input_view,
    space_to_batch,
    space_to_channel,
)
from .normalize import lrn, minmax_norm
from .selection import MAX_INDEX, argmax, sort, topk

# ---- the list the API is wired from -------------------------------------------------

BRIDGE_OPS = (
    "sdpa",
    "argmax",
    "topk",
    "sort",
    "minmax_norm",
    "flatten",
    "lrn",
    "space_to_channel",
    "channel_to_space",
    "space_to_batch",
    "batch_to_space",
    "input_view",
    "dynamic_slice",
    "cross_product",
    "cross_correlation",
    "cost_volume",
    "fps",
    "radius_search",
    "scaled_elementwise",
)

BRIDGE_FUNCTIONS = {
    "sdpa": sdpa,
    "argmax": argmax,
    "topk": topk,
    "sort": sort,
    "minmax_norm": minmax_norm,
    "flatten": flatten,
    "lrn": lrn,
    "space_to_channel": space_to_channel,
    "channel_to_space": channel_to_space,
    "space_to_batch": space_to_batch,
    "batch_to_space": batch_to_space,
    "input_view": input_view,
    "dynamic_slice": dynamic_slice,
    "cross_product": cross_product,
    "cross_correlation": cross_correlation,
    "cost_volume": cost_volume,
    "fps": fps,
    "radius_search": radius_search,
    "scaled_elementwise": scaled_elementwise,
}

__all__ = ["BRIDGE_FUNCTIONS", "BRIDGE_OPS", "MAX_INDEX", *BRIDGE_OPS]


def _register_in_order() -> None:
    """Register every module's records in the order of :data:`BRIDGE_OPS`."""
    modules = (attention, selection, normalize, layout, geometry, elementwise)
    records = {op.name: op for module in modules for op in module.OPS}
    if sorted(records) != sorted(BRIDGE_OPS):
        raise RuntimeError(f"bridge ops {sorted(records)} do not match BRIDGE_OPS")
    for name in BRIDGE_OPS:
        register(records[name])


_register_in_order()
