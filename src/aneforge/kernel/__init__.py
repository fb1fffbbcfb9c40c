"""The kernel layer: loop nests, their bounds, the calibration log and the envelope its
measurements fit.

- :mod:`~aneforge.kernel.ir`: the loop-nest IR (buffers, affine indices, scalars,
  statements), with the engine's fp16 numerics;
- :mod:`~aneforge.kernel.interpret`: its reference interpreter;
- :mod:`~aneforge.kernel.printer`: its stable text form;
- :mod:`~aneforge.kernel.lower`: a Program's fused region lowered under a placement
  (materialize or inline per intermediate), by each op record's ``LoopNest``;
- :mod:`~aneforge.kernel.images`: the cardinality of affine access images;
- :mod:`~aneforge.kernel.analyze`: FLOPs and bytes, the upper bound ``analyze`` and its
  dual ``completion_floor``, and ``roofline_seconds``;
- :mod:`~aneforge.kernel.recompute`: the price of one cell of a node's template;
- :mod:`~aneforge.kernel.calibration`: the calibration log's schema (its one owner);
- :mod:`~aneforge.kernel.envelope`: a backend's peaks fitted to the log, the envelope
  file, and the agreement check of a measurement against its bound;
- :mod:`~aneforge.kernel.placement`: branch and bound over a region's placements, pruned
  by the completion floor under an envelope;
- :mod:`~aneforge.kernel.stream`: STREAM-style bandwidth probes as calibration rows.

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
from .calibration import CalibrationRow, read_log
from .envelope import Envelope, check_agreement, fit_envelope, load_envelopes
from .interpret import Execution, execute
from .lower import Lowered, Placement, lower, region_nodes
from .placement import SearchResult, search_placements
from .printer import to_text
from .recompute import CellCost, producer_cost, recompute_cost, template_cost

__all__ = [
    "CalibrationRow",
    "CellCost",
    "Envelope",
    "Execution",
    "Floor",
    "Footprint",
    "Lowered",
    "Placement",
    "SearchResult",
    "Summary",
    "analyze",
    "check_agreement",
    "completion_floor",
    "execute",
    "fit_envelope",
    "load_envelopes",
    "lower",
    "producer_cost",
    "read_log",
    "recompute_cost",
    "region_nodes",
    "roofline_seconds",
    "search_placements",
    "template_cost",
    "to_text",
]
