"""What every bridge module shares: the record builder and the rank check."""

from __future__ import annotations

from ....errors import ShapeError
from ...registry import OpDef
from ..common import step_kernels


def bridge_op(
    name,
    arity,
    attrs,
    shape_rule,
    body,
    doc,
    flops=None,
    flags=(),
    range=None,  # noqa: A002
    arities=(1, None),
) -> OpDef:
    """The record of one bridge op (kind ``"bridge"``) with kernels run by ``body``.

    ``body(steps, inputs, attrs) -> float64`` is one kernel body for both executors
    (:func:`~aneforge.graph.ops.common.step_kernels`). The record is registered by the
    package, in the order of :data:`~aneforge.graph.ops.bridge.BRIDGE_OPS`. ``arities``
    bounds the input count of a variable-arity op (``arity=None``).
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
        flags=frozenset(flags),
        range=range,
        min_arity=arities[0],
        max_arity=arities[1],
        **extra,
    )


def need_rank(op: str, shape, ranks, layout: str) -> None:
    """Refuse ``shape`` unless its rank is one of ``ranks``; ``layout`` names the form."""
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(f"{op}: input must be {layout} (rank {want}), got shape {shape}")
