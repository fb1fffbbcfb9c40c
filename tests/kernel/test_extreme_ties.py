"""amax, amin and max_pool on ties of signed zeros: IEEE 754-2019's maximum / minimum
(+0 wins a max's tie with -0, -0 a min's, NaN propagates), whatever the order of the
terms, and the same bits from the op-by-op emulator (reference and fast kernels), the
kernel IR's interpreter and the compiled region kernels.

NumPy's own reductions do not give one rule: its float16 loop keeps the first of two
equal zeros, its float32 and float64 loops the last, and a reduction over several axes
visits the terms in an order of its choosing. The reference here is a plain Python fold
over the terms in a shuffled order.
"""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.chips import chip_numerics
from aneforge.emulator.interpreter import execute_fp16, fp16_kernel
from aneforge.graph.fp16 import extreme
from aneforge.kernel import compiled, jitlib
from aneforge.kernel.interpret import execute
from aneforge.kernel.lower import lower, region_nodes

TIES = np.array([0.0, -0.0, 0.0, -0.0, -1.0, -2.0], np.float16)


def _ieee(terms, largest):
    """IEEE 754-2019 maximum / minimum of ``terms`` by a fold, in the given order."""
    out = None
    for t in terms:
        t = float(t)
        if out is None or np.isnan(t) or np.isnan(out):
            out = t if out is None or np.isnan(t) else out
            continue
        if t == out == 0.0:  # a tie of zeros: the winning sign if either has it
            signs = (np.signbit(t), np.signbit(out))
            neg = all(signs) if largest else any(signs)
            out = -0.0 if neg else 0.0
        elif (t > out) == largest and t != out:
            out = t
    return out


def _bits(a) -> np.ndarray:
    a = np.asarray(a, np.float16)
    return np.where(np.isnan(a), np.float16(np.nan), a).view(np.uint16)


@pytest.mark.parametrize("largest", [True, False])
def test_extreme_is_the_ieee_rule_in_any_order(largest):
    rng = np.random.default_rng(3)
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan], np.float16)
    for _ in range(300):
        x = rng.choice(values[: 6 + int(rng.random() < 0.2)], size=(3, 4, 5))
        axis = tuple(sorted(rng.choice(3, size=int(rng.integers(1, 4)), replace=False)))
        got = extreme(x, axis, largest)
        moved = np.moveaxis(x, axis, range(-len(axis), 0))
        flat = moved.reshape(*moved.shape[: 3 - len(axis)], -1)
        for cell in np.ndindex(flat.shape[:-1]):
            terms = rng.permutation(flat[cell])
            want = np.float16(_ieee(terms, largest))
            assert _bits(got[cell]) == _bits(want), (x, axis, cell)


def test_the_compiled_steps_follow_the_same_rule_on_every_special_pair():
    assert jitlib.load()
    specials = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan]
    for a in specials:
        for b in specials:
            for kind in (np.float32, np.float64):
                got = (jitlib.rmax(kind(a), kind(b)), jitlib.rmin(kind(a), kind(b)))
                want = (_ieee([a, b], True), _ieee([a, b], False))
                for g, w in zip(got, want):
                    assert _bits(g) == _bits(w), (a, b, kind)


CASES = [  # name, the op on an input, the terms of one output
    ("amax", lambda x: af.amax(x, axis=-1), 30),
    ("amin", lambda x: af.amin(x, axis=2), 24),
    ("max_pool", lambda x: af.max_pool(x, 3, stride=2, padding=1), 9),
    ("max_pool", lambda x: af.max_pool(x, (2, 3), stride=1), 6),
]


def _tie_data(rng, shape, terms, largest):
    """Nonzero values on the losing side of zero, and about two zeros of random signs
    per output's terms: many outputs are a zero won by one sign or a tie of both."""
    x = rng.integers(1, 3, size=shape).astype(np.float16) * (-1 if largest else 1)
    zeros = rng.random(shape) < 2.0 / terms
    x[zeros] = rng.choice(np.array([0.0, -0.0], np.float16), size=int(zeros.sum()))
    return x


@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_path_gives_the_same_signed_zeros(case):
    name, build, terms = CASES[case]
    rng = np.random.default_rng(case)
    x = af.input((2, 3, 24, 30), name="x")
    prog = af.compile(build(x * 1.0), opt=0)
    xs = [_tie_data(rng, x.shape, terms, name != "amin")]
    reference = execute_fp16(prog, xs, fast=False, regions=False)[0]
    assert (reference == 0).any() and np.signbit(reference[reference == 0]).any()
    assert (np.signbit(reference[reference == 0]) == 0).any()  # both signs of zero occur
    assert np.array_equal(_bits(execute_fp16(prog, xs, regions=False)[0]), _bits(reference))
    values = {}
    execute_fp16(prog, xs, regions=False, observe=lambda i, n, v: values.__setitem__(id(n), v))
    (region,) = prog.fused_regions
    middle = region_nodes(prog, region).intermediates
    for placement in (["materialize"] * len(middle), ["inline"] * len(middle)):
        low = lower(prog, region, placement)
        run = execute(low.code, low.feeds(values))
        out = low.nodes.outputs[0]
        got = run.outputs[low.names[id(out)]].reshape(out.shape)
        assert np.array_equal(_bits(got), _bits(reference)), ("interpreter", name, placement)
        # generic numerics (a pool runs whole in the pool kernel) and a chip's (generated)
        for chip in (None, "h17s"):
            numerics = chip_numerics(chip)
            plan = compiled.plan_region(prog, region, fp16_kernel(True, chip), numerics, placement)
            (got,) = compiled.run_plan(plan, values).values()
            assert np.array_equal(_bits(got), _bits(reference)), (name, chip, placement)


def test_max_pool_takes_the_ieee_maximum_of_each_window():
    rng = np.random.default_rng(11)
    x = rng.choice(np.append(TIES, np.float16(np.nan)), size=(1, 2, 9, 10))
    x[0, 0, 3, 3] = np.nan
    prog = af.compile(af.max_pool(af.input(x.shape, name="x"), 3, stride=2, padding=1), opt=0)
    got = execute_fp16(prog, [x], fast=False, regions=False)[0]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    for n, c, i, j in np.ndindex(got.shape):
        window = rng.permutation(padded[n, c, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].ravel())
        assert _bits(got[n, c, i, j]) == _bits(np.float16(_ieee(window, True)))
