"""Source ops: graph inputs and weights. They compute nothing; executors feed them."""

from __future__ import annotations

from ..registry import OpDef, register


def _fed(inputs, attrs, mm=None):
    raise RuntimeError("source ops are fed by the executor, never executed")


def _fed_exact(inputs, attrs):
    raise RuntimeError("source ops are fed by the executor, never executed")


def _no_shape(in_shapes, attrs):
    raise RuntimeError("source ops carry their own shape")


for _name, _doc in (("input", "a program input"), ("weight", "an fp16 constant")):
    register(OpDef(_name, "source", 0, {}, _no_shape, _fed, _fed_exact, doc=_doc))
