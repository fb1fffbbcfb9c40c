"""The elementwise bridge op: scaled_elementwise."""

from __future__ import annotations

import numpy as np

from ...registry import choice_attr, float_attr
from ...tensor import Tensor, make
from ..common import broadcast_shape
from ._common import bridge_op

_SCALED_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _scaled_shape(in_shapes, attrs):
    return broadcast_shape("scaled_elementwise", list(in_shapes))


def _scaled_body(st, inputs, attrs):
    a, b = inputs
    r = st.step(_SCALED_OPS[attrs["op"]](a, b))
    return st.step(r * st.const(attrs["scale"]))


_SCALED_ELEMENTWISE = bridge_op(
    "scaled_elementwise",
    2,
    {
        "op": choice_attr(tuple(_SCALED_OPS), "add", "op"),
        "scale": float_attr(1.0, "scale"),
    },
    _scaled_shape,
    _scaled_body,
    "scale * (a op b) with op add, sub or mul, broadcasting",
)


def scaled_elementwise(a, b, op="add", scale=1.0, *, name=None) -> Tensor:
    """``scale * (a op b)`` with ``op`` one of 'add', 'sub', 'mul' (NumPy broadcasting).

    Inputs: ``a``, ``b`` (tensors, or arrays/scalars that become fp16 weights).
    Attributes: ``op`` (default 'add'), ``scale`` (default 1.0). Output: the broadcast
    shape. Emulator numerics: ``fp16(fp16(a op b) * fp16(scale))``.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import scaled_elementwise
        >>> y = scaled_elementwise(af.input((2,)), 1.0, op="sub", scale=0.5)
        >>> af.compile(y)(np.array([3.0, 5.0]))
        array([1., 2.], dtype=float32)
    """
    return make("scaled_elementwise", a, b, op=op, scale=scale, name=name)


#: This module's op records; the package registers them in BRIDGE_OPS order.
OPS = (_SCALED_ELEMENTWISE,)
