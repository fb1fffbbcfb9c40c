"""Source ops: graph inputs and weights. They compute nothing; executors feed them.

An input may declare the range of the values it will be fed (``af.input(shape,
range=(lo, hi))``), kept as its ``range`` attribute, which the structural hash covers.
"""

from __future__ import annotations

import numpy as np

from ..facts import EVERY_FAMILY, ONLY_LOWERING, Role, signed
from ..ranges import Interval
from ..registry import OpDef, register


def _fed(inputs, attrs, arith=None):
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


def _weight_sign(node, nonneg) -> bool:
    """A weight is non-negative when every value is >= 0 (NaN is not); an empty one is
    not claimed."""
    value = np.asarray(node.value)  # fp16: compared in place
    return bool(value.size) and bool(np.all(value >= 0))


# An input claims nothing (its values are unknown until it is fed); the other facts do
# not apply to a source, which the executors feed rather than run.
for _name, _doc, _rule, _sign in (
    ("input", "a program input", _input_range, signed),
    ("weight", "an fp16 constant", _weight_range, _weight_sign),
):
    register(
        OpDef(
            _name,
            "source",
            0,
            {},
            _no_shape,
            _fed,
            _fed_exact,
            doc=_doc,
            range=_rule,
            sign=_sign,
            narrow=None,
            role=Role.NONE,
            weight_operand=None,
            min_family=EVERY_FAMILY,
            below_floor=None,
            route=ONLY_LOWERING,
            work=None,
            width_begin=None,
            overflow_fix=None,
            tiled=None,
            nest=None,
        )
    )
