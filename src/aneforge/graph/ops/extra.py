"""Extra movement ops for the frontends: gather (constant indices along one axis).

``gather`` copies the slices of ``x`` at a constant list of indices along ``axis``, in
the order given, repeats allowed. It expresses, without arithmetic, what model formats
write as Gather with constant indices, Expand and Tile (repeated indices), flips and
reversed slices, edge / reflect / wrap padding, nearest-neighbour resizing and channel
permutations (DepthToSpace in DCR order). The engine runs it as static copies (slices
and concatenations), so it is a fused movement op.

Emulator contract (docs/numerics.md, "Movement ops"): values move unchanged, so the
emulator and the float64 executor share one kernel and the result is exact.

Example:
    >>> import numpy as np, aneforge as af
    >>> x = af.input((2, 3))
    >>> af.compile(af.gather(x, [2, 0, 0], axis=1))(np.arange(6.0).reshape(2, 3))
    array([[2., 0., 0.],
           [5., 3., 3.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ...errors import AttributeValueError, ShapeError
from ..facts import Flag, all_sources
from ..ranges import same
from ..registry import int_attr, ints_attr, register
from .common import fused_op, norm_axis


def _gather_indices(shape, attrs) -> tuple[int, np.ndarray]:
    """(axis, indices) normalized into range; out-of-range indices raise ShapeError."""
    if len(shape) < 1:
        raise ShapeError("gather: input must have rank >= 1, got a scalar")
    axis = norm_axis("gather", attrs["axis"], len(shape))
    idx = np.asarray(attrs["indices"], dtype=np.int64)
    if idx.size == 0:
        raise AttributeValueError("gather: indices must hold at least one index")
    d = shape[axis]
    bad = idx[(idx < -d) | (idx >= d)]
    if bad.size:
        raise ShapeError(
            f"gather: index {int(bad[0])} is out of range for axis {attrs['axis']} of "
            f"{tuple(shape)} (size {d}); use indices in [-{d}, {d})"
        )
    return axis, np.where(idx < 0, idx + d, idx)


def _gather_shape(in_shapes, attrs):
    x = in_shapes[0]
    axis, idx = _gather_indices(x, attrs)
    return x[:axis] + (len(idx),) + x[axis + 1 :]


def _gather(inputs, attrs):
    x = inputs[0]
    axis, idx = _gather_indices(x.shape, attrs)
    return np.take(x, idx, axis=axis)


register(
    fused_op(
        "gather",
        1,
        {
            "indices": ints_attr(None, None, "indices", required=True),
            "axis": int_attr(0, None, "axis"),
        },
        _gather_shape,
        lambda inputs, attrs, arith=None: _gather(inputs, attrs),
        _gather,
        doc="the slices of x at constant indices along axis, in order (repeats allowed)",
        sign=all_sources,
        range=same,
        flags=(Flag.MOVEMENT,),
    )
)
