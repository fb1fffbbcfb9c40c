"""A new op declared in one file, as docs/architecture.md ("Add an op") walks through.

``test_scaled_softsign(x, scale) = scale * x / (1 + |x|)``: a unary elementwise op with
one float attribute. Its record comes from the elementwise family's factory
(:func:`aneforge.graph.ops.elementwise.unary_op`), which declares the family's facts
(no narrow sum, no contraction, native on every family, no route); this file adds the
float64 function, the range rule and the sign rule. Nothing else in aneforge names it.
The record is not registered on import: :func:`registered` registers it for a block
(tests/graph/test_add_an_op.py), so the registry-walking tests elsewhere see only
aneforge's own ops.
"""

from __future__ import annotations

import numpy as np

from aneforge.graph.facts import Flag
from aneforge.graph.ops.elementwise import unary_op
from aneforge.graph.ranges import corners
from aneforge.graph.registry import float_attr, temporary_op

NAME = "test_scaled_softsign"


def _scaled_softsign(x, scale=1.0):
    return scale * x / (1.0 + np.abs(x))


def _sign(node, nonneg) -> bool:
    """Non-negative when the input is and the scale is >= 0 (it keeps the input's sign)."""
    return node.attrs["scale"] >= 0 and bool(nonneg[0])


#: The op's record: monotone in x for a fixed scale, so its range is its kernel at the
#: ends of the input's interval (``corners``).
SCALED_SOFTSIGN = unary_op(
    NAME,
    _scaled_softsign,
    "scale * x / (1 + |x|)",
    corners,
    _sign,
    {"scale": float_attr(1.0, "scale", fp16="value")},
    flags=(Flag.ODD,),
)


def registered():
    """A context in which the op is registered (it is unregistered on leaving)."""
    return temporary_op(SCALED_SOFTSIGN)
