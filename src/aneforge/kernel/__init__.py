"""The kernel layer: loop nests, their bounds, and (in later modules) the calibration log
and the envelope its measurements fit.

- :mod:`~aneforge.kernel.ir`: the loop-nest IR (buffers, affine indices, scalars,
  statements), with the engine's fp16 numerics;
- :mod:`~aneforge.kernel.interpret`: its reference interpreter;
- :mod:`~aneforge.kernel.printer`: its stable text form;
- :mod:`~aneforge.kernel.lower`: a Program's fused region lowered under a placement
  (materialize or inline per intermediate), by each op record's ``LoopNest``;
- :mod:`~aneforge.kernel.images`: the cardinality of affine access images;
- :mod:`~aneforge.kernel.analyze`: FLOPs and bytes, the upper bound ``analyze`` and its
  dual ``completion_floor``, and ``roofline_seconds``;
- :mod:`~aneforge.kernel.recompute`: the price of one cell of a node's template.

Example:
    >>> import aneforge as af
    >>> from aneforge import kernel
    >>> x = af.input((64, 64), name="x")
    >>> prog = af.compile(x.exp() @ x.tanh(), opt=0)
    >>> s = kernel.analyze(kernel.lower(prog, prog.fused_regions[0]).code)
    >>> s.flops, s.exact
    (532480, True)
"""

from .analyze import Floor, Footprint, Summary, analyze, completion_floor, roofline_seconds
from .interpret import Execution, execute
from .lower import Lowered, Placement, lower, region_nodes
from .printer import to_text
from .recompute import CellCost, producer_cost, recompute_cost, template_cost

__all__ = [
    "CellCost",
    "Execution",
    "Floor",
    "Footprint",
    "Lowered",
    "Placement",
    "Summary",
    "analyze",
    "completion_floor",
    "execute",
    "lower",
    "producer_cost",
    "recompute_cost",
    "region_nodes",
    "roofline_seconds",
    "template_cost",
    "to_text",
]
