"""Source ops: graph inputs and weights. They compute nothing; executors feed them.

An input may declare the range of the values it will be fed (``af.input(shape,
range=(lo, hi))``), kept as its ``range`` attribute, which the structural hash covers.
"""

from __future__ import annotations

from ..ranges import Interval
from ..registry import OpDef, register


def _fed(inputs, attrs, mm=None):
    raise RuntimeError("source ops are fed by the executor, never executed")


def _fed_exact(inputs, attrs):
    raise RuntimeError("source ops are fed by the executor, never executed")


def _no_shape(in_shapes, attrs):
    raise RuntimeError("source ops carry their own shape")


def _input_range(node, srcs, env):
    """An input's declared range, or every fp16 value when it declares none."""
    given = node.attrs.get("range")
    return Interval.unknown() if given is None else Interval.declared(*given)


def _weight_range(node, srcs, env):
    """A weight's actual values."""
    return Interval.of(node.value)


for _name, _doc, _rule in (
    ("input", "a program input", _input_range),
    ("weight", "an fp16 constant", _weight_range),
):
    register(OpDef(_name, "source", 0, {}, _no_shape, _fed, _fed_exact, doc=_doc, range=_rule))
