"""The float64 reference executor: the exact answer of the same fp16-valued graph."""

from __future__ import annotations

import numpy as np

from .compiler.program import Program
from .emulator.interpreter import execute_float64


def reference(out, *inputs, **named):
    """Evaluate ``out`` (Tensor(s) or a Program) exactly in float64.

    Inputs are rounded to fp16 first and weights are the graph's fp16 values, so the
    difference from the emulator is the engine's arithmetic alone. Returns float64
    arrays (a tuple for several outputs).

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((4096,))
        >>> float(af.reference(x.sum(), np.ones(4096)))
        4096.0
    """

    prog = Program.coerce(out, "reference")
    feeds = prog.prepare_inputs(inputs, named)
    outs = execute_float64(prog, feeds)
    return outs[0] if len(outs) == 1 else tuple(np.asarray(o) for o in outs)
