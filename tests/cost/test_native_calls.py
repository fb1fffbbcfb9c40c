"""Outputs of one native call (topk's values and indices) are one cut, priced once."""

import pytest

import aneforge as af
from aneforge.cost.bridge import bridge_cost_us
from aneforge.cost.calibration import constants


def test_topk_values_and_indices_are_one_native_call():
    x = af.input((8, 1024))
    values, indices = af.topk(x, 5)
    prog = af.compile([values, indices], opt=0)
    assert len(prog.cuts) == 1
    assert [r.kind for r in prog.regions] == ["bridge"]
    assert len(prog.regions[0].nodes) == 2
    want = constants().cut_us + bridge_cost_us(values)
    assert af.estimate(prog) == pytest.approx(want)


def test_two_different_topk_calls_stay_two_cuts():
    x = af.input((8, 1024))
    a, _ = af.topk(x, 5)
    b, _ = af.topk(x, 3)
    prog = af.compile([a, b], opt=0)
    assert len(prog.cuts) == 2
