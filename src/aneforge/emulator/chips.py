"""Per-chip numerics: the measured behaviour that differs by capability family.

The generic model (``target=None``, docs/numerics.md sections 1-7) is chip-independent.
A target adds the measured per-family cliffs (docs/numerics.md, section 9), all in one
record, :class:`ChipNumerics`, looked up by :func:`chip_numerics`. The executors apply it
at exactly three points and nowhere else; the last two travel to the kernels in the
explicit arithmetic policy :meth:`ChipNumerics.arith` (a
:class:`~aneforge.graph.arith.Arith`):

1. **Crop-DMA saturation** (families 2 and 3, the A13/A14 tiers): a width-offset slice,
   a ``slice`` or ``input_view`` (the ops whose record has a ``width_begin`` rule) whose
   begin on the last axis is not 0, rides the x16
   fixed-point (Q.4) crop-DMA, so every sliced value with ``|v| > 4094`` (= 65504/16)
   becomes +-inf, sign kept. Families 4 and 5 take a clean route. (:meth:`finish`)
2. **Reduction route** (192 terms on families 2/3, 384 on 4/5): every narrow fp16
   reduction (sum, mean, the sums inside softmax, the norms, avg_pool windows, sdpa's
   softmax, cost_volume) over more than ``route`` terms is split: consecutive chunks of
   ``route`` terms each summed narrowly in order, then the chunk partials summed
   narrowly in order. (:attr:`route`, carried by ``Arith.route``)
3. **Matmul output saturation** (every family with a MIL path): the contraction backend's
   rounded output ``y = fp16(S)`` becomes +-inf where ``|y| > 32752`` (the largest fp16
   below 2^15), before any bias add. Applies to matmul, bmm, linear, conv,
   conv_transpose and the contractions inside bridge ops. (:meth:`matmul`)

Family 1 has no MIL path: nothing compiles for it, so it has no numerics record and
:func:`chip_numerics` refuses it.

Example:
    >>> from aneforge.emulator.chips import chip_numerics
    >>> m1 = chip_numerics("M1")
    >>> m1.family, m1.route, m1.crop_dma_limit, m1.matmul_limit
    (2, 192, 4094.0, 32752.0)
    >>> chip_numerics("h17s").crop_dma_limit is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PreflightError
from ..graph.arith import Arith
from ..graph.registry import get_op
from ..targets.capability import Capability, capabilities, capability
from ..targets.names import resolve_target

#: The crop-DMA's usable magnitude on the families that clamp: fp16's maximum over the
#: Q.4 scale of 16, 4094 (``data/families.json``, ``crop_dma_limit``; docs/numerics.md 9.1).
CROP_DMA_LIMIT = next(c.crop_dma_limit for c in capabilities() if c.crop_dma_limit)
#: The contraction output stage's usable magnitude: the largest fp16 below 2^15, 32752
#: (``data/families.json``, ``matmul_limit``; docs/numerics.md 9.3).
MATMUL_LIMIT = next(c.matmul_limit for c in capabilities() if c.matmul_limit)


@dataclass(frozen=True)
class ChipNumerics:
    """The numerics of one capability family.

    Attributes:
        family: the capability family (2..5).
        tier: its tier label ('A13', 'A14', 'A15', 'A16').
        route: reductions over more than this many terms take the split route.
        crop_dma_limit: width-offset slices saturate ``|v| >`` this to +-inf; ``None``
            for the clean route.
        matmul_limit: contraction outputs with ``|y| >`` this become +-inf; ``None``
            for no limit.
    """

    family: int
    tier: str
    route: int
    crop_dma_limit: float | None
    matmul_limit: float | None

    def matmul(self, mm):
        """The contraction backend ``mm`` with this family's output saturation."""
        limit = self.matmul_limit
        if limit is None:
            return mm

        def saturating(a, b):
            return saturate(mm(a, b), limit)

        return saturating

    def arith(self, mm) -> Arith:
        """The arithmetic policy of this family on the contraction backend ``mm``: its
        matmul output saturation and its reduction route.

        Example:
            >>> import numpy as np
            >>> from aneforge.emulator.gemm import gemm_reference
            >>> a = chip_numerics("M1").arith(gemm_reference)
            >>> a.route, float(a.narrow_sum(np.ones(4096, np.float16), 0))
            (192, 4096.0)
        """
        return Arith(self.matmul(mm), self.route)

    def finish(self, node, value: np.ndarray) -> np.ndarray:
        """A node's fp16 output as this family computes it (the crop-DMA clamp)."""
        if self.crop_dma_limit is not None and is_width_offset(node):
            return saturate(value, self.crop_dma_limit)
        return value


def _numerics(c: Capability) -> ChipNumerics:
    return ChipNumerics(c.family, c.tier, c.reduction_route, c.crop_dma_limit, c.matmul_limit)


# One record per family with a MIL path, from its capability record: data/families.json
# gives each number's source (docs/numerics.md, sections 9.1-9.3).
_FAMILIES = {c.family: _numerics(c) for c in capabilities() if c.has_mil}

#: Names that ask explicitly for the generic, chip-independent model.
GENERIC_NAMES = ("generic",)


def family_numerics(family: int) -> ChipNumerics:
    """The record of a capability family (2..5).

    A family without a MIL path raises :class:`~aneforge.errors.PreflightError`; an
    unknown family :class:`~aneforge.errors.OptionError`.
    """
    cap = capability(family)
    if not cap.has_mil:
        raise PreflightError(
            f"capability family {cap.family} ({', '.join(cap.members)}) has no MIL path: no "
            "program compiles or runs there; pick a target of family 2 or later (e.g. 'M1')"
        )
    return _FAMILIES[cap.family]


def chip_numerics(target) -> ChipNumerics | None:
    """The per-chip numerics of ``target``; ``None`` (or 'generic') is the generic model.

    ``target`` is an architecture or marketing name, a Target or a ChipNumerics. A
    family-1 target raises :class:`~aneforge.errors.PreflightError` (no MIL path).
    """
    if target is None or isinstance(target, ChipNumerics):
        return target
    if isinstance(target, str) and target.strip().lower() in GENERIC_NAMES:
        return None
    return family_numerics(resolve_target(target).family)


def saturate(value: np.ndarray, limit: float) -> np.ndarray:
    """``value`` (fp16) with every ``|v| > limit`` replaced by +-inf, sign kept."""
    value = np.asarray(value, dtype=np.float16)
    with np.errstate(invalid="ignore"):
        over = np.abs(value) > limit
    if not over.any():
        return value
    return np.where(over, np.copysign(np.float16(np.inf), value), value).astype(np.float16)


def width_begin(node) -> int:
    """The begin on the last axis of a node reading through the crop-DMA (its record's
    ``width_begin`` rule: ``slice``, ``input_view``); 0 for every other node."""
    rule = get_op(node.op).width_begin
    if rule is None or not node.srcs:
        return 0
    return int(rule([s.shape for s in node.srcs], node.attrs))


def is_width_offset(node) -> bool:
    """Whether ``node`` is a width-offset slice (its last-axis begin is not 0)."""
    return width_begin(node) != 0
