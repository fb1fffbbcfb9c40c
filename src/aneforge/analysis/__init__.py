"""Static analyses of a graph that need no device and no data.

- :func:`~aneforge.analysis.divergence.fp16_divergence`: where a graph's fp16 results
  can differ between engine generations, and how (docs/numerics.md, "Per-chip numerics").
- :func:`~aneforge.analysis.ranges.range_analysis`: every node's fp16 value range from
  the declared input ranges, and where it can overflow or underflow.
"""

from .divergence import CLASSES, DivergenceReport, NodeDivergence, fp16_divergence
from .ranges import NodeInterval, RangeHazard, RangeReport, range_analysis

__all__ = [
    "CLASSES",
    "DivergenceReport",
    "NodeDivergence",
    "NodeInterval",
    "RangeHazard",
    "RangeReport",
    "fp16_divergence",
    "range_analysis",
]
