"""The elementwise bridge op: scaled_elementwise."""

from __future__ import annotations

import numpy as np

from ...facts import Flag, SingleRoute, Work, prod, signed
from ...ranges import Interval, hull_of_values
from ...registry import choice_attr, float_attr
from ...tensor import Tensor, make
from ..common import Steps, broadcast_shape
from ._common import bridge_op

_SCALED_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}
_STEP_LABELS = {"add": "a+b", "sub": "a-b", "mul": "a*b"}


def _scaled_shape(in_shapes, attrs):
    return broadcast_shape("scaled_elementwise", list(in_shapes))


def _combine(st, a, b, attrs):
    return st.step(_SCALED_OPS[attrs["op"]](a, b))


def _rescale(st, r, attrs):
    return st.step(r * st.const(attrs["scale"]))


def _scaled_body(st, inputs, attrs):
    a, b = inputs
    return _rescale(st, _combine(st, a, b, attrs), attrs)


def _zero_times_inf(p: Interval, q: Interval) -> bool:
    """Whether ``p * q`` can meet 0 * inf with the zero strictly inside an interval
    (the corners miss it there)."""
    return p.lo <= 0.0 <= p.hi and max(abs(q.lo), abs(q.hi)) == np.inf


def scaled_range(node, srcs, env) -> Interval:
    """Range rule of ``scaled_elementwise``, step by step with the kernel's own steps:
    ``r = fp16(a op b)`` is monotone in each input separately (for a fixed other), so its
    extremes lie at the corners of the box; ``y = fp16(r * fp16(scale))`` is monotone
    in ``r``, so its extremes lie at ``r``'s ends. ``r`` is recorded as a step.

    Example:
        >>> import aneforge as af
        >>> from aneforge.graph.ops.bridge import scaled_elementwise
        >>> a = af.input((3,), name="a", range=(-1, 2))
        >>> b = af.input((3,), name="b", range=(0, 4))
        >>> y = scaled_elementwise(a, b, op="mul", scale=-0.5, name="y")
        >>> str(af.range_analysis(y)["y"].interval)
        '[-4, 2]'
    """
    a, b = srcs
    st = Steps(True, env.arith)
    attrs = dict(node.attrs)
    ga, gb = np.meshgrid([a.lo, a.hi], [b.lo, b.hi], indexing="ij")
    with np.errstate(all="ignore"):
        rc = _combine(st, ga.ravel(), gb.ravel(), attrs)
    nan = a.nan or b.nan
    if attrs["op"] == "mul":
        nan = nan or _zero_times_inf(a, b) or _zero_times_inf(b, a)
    r = env.step(_STEP_LABELS[attrs["op"]], hull_of_values(rc, nan))
    with np.errstate(all="ignore"):
        yc = _rescale(st, np.array([r.lo, r.hi]), attrs)
    scale = Interval.of(st.const(attrs["scale"]))
    return hull_of_values(yc, r.nan or _zero_times_inf(r, scale))


_SCALED_ELEMENTWISE = bridge_op(
    "scaled_elementwise",
    2,
    {
        "op": choice_attr(tuple(_SCALED_OPS), "add", "op"),
        "scale": float_attr(1.0, "scale", underflow="every output is 0"),
    },
    _scaled_shape,
    _scaled_body,
    "scale * (a op b) with op add, sub or mul, broadcasting",
    sign=signed,
    range=scaled_range,
    flags=(Flag.MULTIPLIES,),
    work=Work(lambda in_shapes, out, attrs: float(prod(out)), lambda f, elems: f.get("W")),
    route=SingleRoute("candidate (a op b) * scale form not validated on silicon"),
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
