"""The memo of what the GEMM derives from weights (aneforge.emulator.operand_memo): derived
once for frozen operands, afresh for anything that may change, capped in bytes, and
never a change in the GEMM's bits."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import aneforge as af
import aneforge.emulator.gemm as gemm_module
import aneforge.emulator.panels as panels_module
from aneforge.emulator.gemm import gemm, gemm_reference
from aneforge.emulator.operand_memo import OperandMemo, budget_bytes
from aneforge.errors import OptionError
from aneforge.graph.frozen import freeze
from conftest import assert_same_bits


class Counter:
    """``derive``: a copy, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return np.array(x)


def test_a_frozen_operand_is_derived_once_per_view():
    w = freeze(np.arange(24, dtype=np.float16).reshape(4, 6))
    memo, derive = OperandMemo(budget=1 << 20), Counter()
    for view in (w.T, w[1:], w[1:, ::2]):
        first = memo.get(view, "copy", derive)
        assert memo.get(view, "copy", derive) is first
        np.testing.assert_array_equal(first, view)
    assert derive.calls == 3 and len(memo) == 3
    memo.get(w.T, "other", derive)  # what is derived is part of the key
    assert derive.calls == 4


def test_operands_that_may_change_are_derived_every_time():
    memo, derive = OperandMemo(budget=1 << 20), Counter()
    x = np.ones((4, 4), np.float16)
    y = np.ones((4, 4), np.float16)
    writer = y[:]
    y.setflags(write=False)  # read-only, but writer still changes it
    for operand in (x, x.T, y, np.broadcast_to(x, (2, 4, 4))):
        memo.get(operand, "copy", derive)
        memo.get(operand, "copy", derive)
    assert derive.calls == 8 and len(memo) == 0
    writer[0, 0] = 3
    assert memo.get(y, "copy", derive)[0, 0] == 3


def test_the_budget_evicts_least_recently_used_first():
    arrays = [freeze(np.full(64, i, np.float16)) for i in range(3)]  # 128 bytes each
    memo = OperandMemo(budget=300)
    memo.get(arrays[0], "copy", Counter())
    memo.get(arrays[1], "copy", Counter())
    memo.get(arrays[0], "copy", Counter())  # 0 is now the most recent
    derive = Counter()
    memo.get(arrays[2], "copy", derive)  # 384 bytes > 300: 1 goes
    assert memo.held_bytes == 256 and len(memo) == 2
    memo.get(arrays[0], "copy", derive)
    memo.get(arrays[1], "copy", derive)
    assert derive.calls == 2  # 2 derived, 0 remembered, 1 derived again
    big = freeze(np.zeros(1000, np.float16))
    memo.get(big, "copy", derive)  # larger than the whole budget: never held
    assert big.nbytes > 300 and memo.held_bytes <= 300
    memo.clear()
    assert memo.held_bytes == 0 and len(memo) == 0


def test_entries_leave_with_their_array():
    memo = OperandMemo(budget=1 << 20)
    w = freeze(np.ones((8, 8), np.float16))
    memo.get(w.T, "copy", Counter())
    memo.get(w, "copy", Counter())
    assert len(memo) == 2 and memo.held_bytes == 256
    del w
    gc.collect()
    assert len(memo) == 0 and memo.held_bytes == 0


@pytest.mark.parametrize(("raw", "expected"), [("", 512 << 20), ("0", 0), ("1.5", 3 << 19)])
def test_budget_from_the_environment(monkeypatch, raw, expected):
    monkeypatch.setenv("ANEFORGE_PANEL_CACHE_MB", raw)
    assert budget_bytes() == expected


@pytest.mark.parametrize("raw", ["-1", "lots", "nan"])
def test_a_bad_budget_is_an_option_error(monkeypatch, raw):
    monkeypatch.setenv("ANEFORGE_PANEL_CACHE_MB", raw)
    with pytest.raises(OptionError, match="ANEFORGE_PANEL_CACHE_MB"):
        budget_bytes()


def _counting_packer(monkeypatch, shape):
    calls = []
    real = panels_module.pack_panels

    def pack(b16, panels, tiled=None):
        calls.extend([b16.shape] if b16.shape == shape else [])  # not the first-use check's
        return real(b16, panels, tiled)

    monkeypatch.setattr(panels_module, "pack_panels", pack)
    return calls


def test_a_weights_panels_are_packed_once_with_the_same_bits(monkeypatch):
    rng = np.random.default_rng(3)
    w = af.weight(rng.standard_normal((600, 700)) * 4).value  # a linear layer's (out, in)
    calls = _counting_packer(monkeypatch, (1, 700, 600))
    for rows in (5, 9, 5):  # x @ W^T, the transposed view packed by the compiled tiles
        x = (rng.standard_normal((1, rows, 700)) * 4).astype(np.float16)
        assert_same_bits(gemm(x, w.T[None]), gemm_reference(x, w.T[None]))
    assert len(calls) == 1
    writable = np.array(w)  # the same values, but anything may change them
    for sign in (1, -1):
        writable *= sign
        assert_same_bits(gemm(x, writable.T[None]), gemm_reference(x, writable.T[None]))
    assert len(calls) == 3


def test_a_weight_cannot_be_made_writeable():
    value = af.weight(np.ones((4, 4))).value
    with pytest.raises(ValueError):
        value.flags.writeable = True


def test_a_weights_magnitude_scan_is_remembered_with_the_same_answer():
    rng = np.random.default_rng(5)
    w = af.weight(rng.standard_normal((64, 32)) * 100).value
    view = w.T[None].view(np.uint16)
    want = panels_module.magnitude_top(view)
    assert gemm_module._magnitude_top(view) == want
    assert gemm_module._magnitude_top(view) == want  # the second from the memo
    x = (rng.standard_normal((1, 3, 64)) * 100).astype(np.float16).view(np.uint16)
    for top in (panels_module.magnitude_top, gemm_module._magnitude_top):
        assert panels_module.products_stay_finite(x, view, top) == bool(
            np.abs(x.view(np.float16).astype(np.float64)).max() * np.abs(w.astype(np.float64)).max()
            < 65520.0
        )
