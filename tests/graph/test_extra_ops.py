"""The extra movement op ``gather`` against NumPy's ``take``.

Contract (src/aneforge/graph/ops/extra.py): the slices of x at constant indices along an
axis, in order, repeats and negative indices allowed; pure movement, so the emulator,
the reference interpreter and the float64 executor all return exactly ``np.take``.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.errors import AttributeValueError, ShapeError
from aneforge.graph.registry import get_op, no_flops


@pytest.mark.parametrize(
    "shape, indices, axis",
    [
        ((5,), [4, 0, 0, -1], 0),
        ((2, 3, 4), [3, 2, 1, 0], -1),
        ((2, 3, 4), [1, 1, 1], 1),
        ((1, 2, 3, 2, 2), [0, 0], 0),
    ],
)
def test_gather_equals_numpy_take_on_every_executor(rng, shape, indices, axis):
    x = af.input(shape)
    y = af.gather(x, indices, axis=axis)
    data = rng.standard_normal(shape).astype(np.float16)
    want = np.take(data, indices, axis=axis)
    prog = af.compile(y)
    assert y.shape == want.shape
    for device in ("emulator", "reference"):
        got = prog(data, device=device)
        assert np.array_equal(got, want.astype(np.float32))
    assert np.array_equal(af.reference(y, data), want.astype(np.float64))


def test_gather_moves_special_values_unchanged():
    x = af.input((4,))
    data = np.array([np.inf, -0.0, np.nan, 65504.0], np.float16)
    got = af.compile(af.gather(x, [3, 2, 1, 0]))(data)
    assert got[0] == 65504.0 and np.isnan(got[1])
    assert got[2] == 0.0 and np.signbit(got[2]) and got[3] == np.inf


def test_gather_accepts_numpy_indices_and_is_a_tensor_method():
    x = af.input((3, 2))
    assert x.gather(np.array([2, 0]), axis=0).shape == (2, 2)
    assert af.gather(x, np.int64(1), axis=1).shape == (3, 1)


@pytest.mark.parametrize(
    "indices, axis, error, match",
    [
        ([3], 0, ShapeError, "out of range"),
        ([-4], 0, ShapeError, "out of range"),
        ([], 0, AttributeValueError, "at least one"),
        ([0], 2, AttributeValueError, "axis 2 is out of range"),
        ([0.5], 0, AttributeValueError, "integer"),
    ],
)
def test_gather_rejects_bad_attributes(indices, axis, error, match):
    with pytest.raises(error, match=match):
        af.gather(af.input((3, 2)), indices, axis=axis)


def test_gather_record_is_a_fused_movement_op_without_flops():
    op = get_op("gather")
    assert op.kind == "fused" and "movement" in op.flags
    assert op.flops is no_flops
    assert op.doc


def test_gather_refuses_nested_indices():
    with pytest.raises(AttributeValueError, match="flat list"):
        af.gather(af.input((3, 2)), np.zeros((2, 2), np.int64))
