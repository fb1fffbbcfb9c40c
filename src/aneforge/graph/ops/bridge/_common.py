"""What every bridge module shares: the record builder, the rank check and the scalar
weights of the fused decompositions."""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from ...facts import ELEMENTS, EVERY_FAMILY, Role
from ...registry import OpDef
from ...tensor import Tensor, weight
from ..common import step_kernels


def bridge_op(
    name,
    arity,
    attrs,
    shape_rule,
    body,
    doc,
    *,
    sign,
    route,
    range,  # noqa: A002
    flops=None,
    flags=(),
    arities=(1, None),
    narrow=None,
    work=ELEMENTS,
    min_family=EVERY_FAMILY,
    width_begin=None,
    overflow_fix=None,
) -> OpDef:
    """The record of one bridge op (kind ``"bridge"``) with kernels run by ``body``.

    ``body(steps, inputs, attrs) -> float64`` is one kernel body for both executors
    (:func:`~aneforge.graph.ops.common.step_kernels`). The record is registered by the
    package, in the order of :data:`~aneforge.graph.ops.bridge.BRIDGE_OPS`. ``arities``
    bounds the input count of a variable-arity op (``arity=None``).

    ``sign``, ``range`` and ``route`` (the fused :class:`~aneforge.graph.facts.Decomposition`
    that removes the cut, or the :class:`~aneforge.graph.facts.SingleRoute` reason there
    is none) have no family default. The others default to "none" (no narrow sum, native
    on every family, no crop-DMA read); ``work`` to the input's elements. A bridge op is
    never a streamed-weight contraction (``role=Role.NONE``, no weight operand) and has
    no lowering below a floor.
    """
    emulate, exact = step_kernels(body)
    extra = {} if flops is None else {"flops": flops}
    return OpDef(
        name,
        "bridge",
        arity,
        attrs,
        shape_rule,
        emulate,
        exact,
        doc=doc,
        flags=flags,
        range=range,
        min_arity=arities[0],
        max_arity=arities[1],
        sign=sign,
        narrow=narrow,
        role=Role.NONE,
        weight_operand=None,
        min_family=min_family,
        below_floor=None,
        route=route,
        work=work,
        width_begin=width_begin,
        overflow_fix=overflow_fix,
        tiled=None,
        nest=None,
        **extra,
    )


def scalar_weight(value: float) -> Tensor:
    """A 0-d fp16 weight holding ``value`` (the constants of the fused decompositions)."""
    return weight(np.float16(value))


def need_rank(op: str, shape, ranks, layout: str) -> None:
    """Refuse ``shape`` unless its rank is one of ``ranks``; ``layout`` names the form."""
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{op}: input must be {layout} (rank {want}), got shape {shape}")
