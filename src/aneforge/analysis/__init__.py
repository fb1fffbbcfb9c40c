"""Static analyses of a graph that need no device and no data.

- :func:`~aneforge.analysis.divergence.fp16_divergence`: where a graph's fp16 results
  can differ between engine generations, and how (docs/numerics.md, "Per-chip numerics").
"""

from .divergence import CLASSES, DivergenceReport, NodeDivergence, fp16_divergence

__all__ = ["CLASSES", "DivergenceReport", "NodeDivergence", "fp16_divergence"]
