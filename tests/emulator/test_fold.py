"""The one constant folder: the emulator's fp16 bits, never float64; a size cap."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import Program
from aneforge.emulator.fold import fold_constant
from aneforge.emulator.interpreter import execute_fp16
from aneforge.optimizer import rules
from conftest import assert_same_bits, fp16_values

BUILDERS = {
    "narrow sum": lambda a, b: a.sum(axis=-1),
    "matmul": lambda a, b: a @ b,
    "softmax": lambda a, b: af.softmax(a, axis=-1),
    "layer_norm": lambda a, b: af.layer_norm(a),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_folding_gives_the_emulators_bits(name, rng):
    a, b = fp16_values(rng, (3, 300), 20.0), fp16_values(rng, (300, 5))
    folded = fold_constant(BUILDERS[name](af.weight(a), af.weight(b)))
    x, y = af.input(a.shape, name="a"), af.input(b.shape, name="b")
    prog = Program.from_outputs([BUILDERS[name](x, y)])
    feeds = [a.astype(np.float16), b.astype(np.float16)][: len(prog.inputs)]
    (want,) = execute_fp16(prog, feeds)
    assert folded.op == "weight"
    assert_same_bits(folded.value, np.asarray(want, np.float16))


def test_the_narrow_accumulator_is_kept_not_float64():
    assert float(fold_constant(af.weight(np.ones(4096)).sum()).value) == 2048.0


def test_what_does_not_fold():
    x = af.input((4,), name="x")
    assert fold_constant(x) is None
    assert fold_constant(x + af.weight(np.ones(4))) is None
    big = af.weight(np.ones(64)) * 2.0
    assert fold_constant(big, max_elements=63) is None
    assert fold_constant(big, max_elements=64).op == "weight"


def test_the_rule_folds_through_it_with_its_cap():
    small = af.weight(np.ones(8)).exp()
    assert rules._const_fold(small).value.tobytes() == fold_constant(small).value.tobytes()
    huge = af.weight(np.ones(rules.CONST_FOLD_MAX_ELEMS + 1)).exp()
    assert rules._const_fold(huge) is None
