"""Host kernels prepared once per node: the convolutions a compiled plan runs.

A fused region's plan (:mod:`aneforge.kernel.compiled`) calls a host kernel on every run
for each node it does not lower, a convolution above all. Through the op's generic entry
a 1 x 1 convolution of ShuffleNet spent about 40 of its 260 microseconds in Python:
checking its geometry, reshaping and padding its weights, finding their largest
magnitude, choosing its route, on every call. :func:`prepare` does that once per node
and returns a runner with the same bits, or None for a node it does not prepare (the
plan then calls the generic kernel, :func:`aneforge.emulator.interpreter.fp16_kernel`).

It prepares a 2-D convolution under the generic numerics whose weights (and bias) are
weight nodes and whose product the gathered-windows GEMM serves
(:func:`~aneforge.emulator.windows.prepare_windows`), or a depthwise one the compiled
depthwise kernel serves (:func:`~aneforge.emulator.plane_kernels.prepare_depthwise`). The
runner ignores the weight arrays it is handed: they are the nodes' values, read once
here. It prepares a ``max_pool`` or ``avg_pool`` the compiled pool kernel serves
(:func:`~aneforge.emulator.plane_kernels.prepare_pool`).

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((1, 8, 16, 16))
    >>> y = af.conv(x, np.full((16, 8, 1, 1), 0.5, np.float16))
    >>> run = prepare(y)
    >>> run is None or float(run(np.ones((1, 8, 16, 16), np.float16))[0, 0, 0, 0]) == 4.0
    True
"""

from __future__ import annotations

import numpy as np

from ..graph.arith import Arith
from ..graph.ops.contraction import _bias_adder, _conv_geometry, _zero_padded
from ..graph.registry import get_op
from .fast_kernels import bias_add_fast
from .plane_kernels import depthwise_ready, pool_ready, prepare_depthwise, prepare_pool
from .windows import prepare_windows, windows_ready

__all__ = ["prepare"]


def prepare(node):
    """A runner ``run(x, *weights) -> fp16 array`` for ``node`` with its static work done,
    bit for bit the generic fast kernel's result; None where this module does not
    prepare ``node`` (see the module docstring)."""
    if node.op in ("max_pool", "avg_pool"):
        return _prepare_pool(node)
    if node.op != "conv" or len(node.shape) != 4:
        return None
    x, w, *rest = node.srcs
    if w.op != "weight" or any(b.op != "weight" for b in rest):
        return None
    _, stride, pad, dil, kern, cout = _conv_geometry(
        "conv", [s.shape for s in node.srcs], node.attrs
    )
    groups = node.attrs["groups"]
    n, c = x.shape[:2]
    bias = np.asarray(rest[0].value, np.float16) if rest else None
    # the generic kernel's order: the depthwise kernel where it applies, else the windows
    if groups >= 2 and depthwise_ready():
        conv = prepare_depthwise(x.shape, np.asarray(w.value, np.float16), bias, node.attrs)
        if conv is not None:
            return lambda xv, *weights: conv(xv)
    if not windows_ready():
        return None
    (top, bottom), (left, right) = pad
    xp_shape = (n, c, x.shape[2] + top + bottom, x.shape[3] + left + right)
    wmat = np.asarray(w.value, np.float16).reshape(groups, cout // groups, -1)
    if n > 1:
        wmat = np.tile(wmat, (n, 1, 1))
    product = prepare_windows(wmat, xp_shape, kern, stride, dil, groups)
    if product is None:
        return None
    padded = any(p != (0, 0) for p in pad)
    bias = None if bias is None else bias.reshape(-1, 1, 1)
    add_bias = _bias_adder(Arith.generic(bias=bias_add_fast))  # the conv op's own bias add
    shape = node.shape

    def run(xv, *weights):
        y = product(_zero_padded(xv, pad) if padded else xv).reshape(shape)
        return y if bias is None else add_bias(y, bias)

    return run


def _prepare_pool(node):
    """The pool kernel's runner for pool ``node``, or None where it does not apply. The
    kernel compiles on the runner's first call, not here: a plan is built on a
    program's first call, which runs op by op (:mod:`aneforge.kernel.compiled`); where
    it cannot be used, the op's own kernel serves."""
    pool = prepare_pool(node.srcs[0].shape, node.op, node.attrs)
    if pool is None:
        return None
    own = get_op(node.op).emulate

    def run(xv):
        if pool_ready():
            return pool(xv)
        return np.asarray(own([xv], node.attrs), np.float16)

    return run
