"""Immutable arrays (aneforge.graph.frozen): which arrays count as never changing."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.compression.codecs import encode
from aneforge.graph.frozen import freeze, frozen_owner


def test_freeze_copies_into_memory_nothing_can_write():
    src = np.arange(12, dtype=np.float16).reshape(3, 4)
    w = freeze(src)
    np.testing.assert_array_equal(w, src)
    assert w.dtype == src.dtype and w.shape == src.shape
    src[0, 0] = 7  # a copy: the source stays the caller's
    assert w[0, 0] == 0
    for view in (w, w.T, w[1:], w.view(np.uint16)):
        with pytest.raises(ValueError):
            view.flags.writeable = True
    assert freeze(np.zeros((0, 5), np.float16)).shape == (0, 5)
    assert freeze(np.float16(2.5)).shape == ()


def test_views_of_a_frozen_array_lead_back_to_one_owner():
    w = freeze(np.arange(12, dtype=np.float16).reshape(3, 4))
    owner = frozen_owner(w)
    assert owner is not None
    for view in (w.T, w.T[None], w[1:], w.view(np.uint16), w.reshape(2, 6)[:, ::2]):
        assert frozen_owner(view) is owner


def test_weights_and_compressed_weights_are_frozen():
    rng = np.random.default_rng(0)
    assert frozen_owner(af.weight(rng.standard_normal((8, 8))).value) is not None
    enc = encode(np.float16(rng.standard_normal((8, 8))), "int8")
    assert frozen_owner(enc.decoded) is not None


def test_arrays_that_may_change_are_not_frozen():
    x = np.ones((3, 3), np.float16)
    y = np.ones((3, 3), np.float16)
    writer = y[:]  # a writeable view taken before the flag is cleared still writes y
    y.setflags(write=False)
    for arr in (x, y, y.T, np.broadcast_to(x, (2, 3, 3))):
        assert frozen_owner(arr) is None
    writer[0, 0] = 5  # what a memo keyed on y would have missed
    assert y[0, 0] == 5
