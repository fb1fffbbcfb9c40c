"""Add an op in one file: every layer sees it with no other file touched.

The op, ``test_scaled_softsign`` (``scale * x / (1 + |x|)``), is declared in
``tests/graph/extra_op.py`` and nowhere else. Registered, it runs on the emulator and
the float64 reference, the cost models price it, the analyses read its range and sign
rules, and the Core ML coverage lists it as missing (it has no lowering). Unregistered,
the registry is as before.
"""

from __future__ import annotations

import numpy as np
import pytest
from extra_op import NAME, SCALED_SOFTSIGN, registered

import aneforge as af
from aneforge.graph.registry import all_ops
from aneforge.graph.tensor import make
from aneforge.io.coreml_table import coverage

X = np.linspace(-6.0, 6.0, 4 * 64).reshape(4, 64)


@pytest.fixture
def op():
    assert NAME not in all_ops()
    with registered():
        yield SCALED_SOFTSIGN
    assert NAME not in all_ops()


def _want(x, scale):
    """The op's value in float64, from its definition (independent of the kernels)."""
    x = np.asarray(x, np.float16).astype(np.float64)
    return scale * x / (1.0 + np.abs(x))


def test_the_emulator_and_the_reference_run_it(op):
    x = af.input((4, 64), name="x")
    y = make(NAME, x, scale=2.0)
    got = af.compile(y)(X)
    np.testing.assert_array_equal(got, np.float16(_want(X, 2.0)))  # rounded once
    np.testing.assert_allclose(af.reference(y, X), _want(X, 2.0), rtol=1e-15)


def test_the_cost_models_price_it_as_an_elementwise_op(op):
    x = af.input((64, 512), name="x")
    y, like = make(NAME, x), af.tanh(x)  # same bytes, same kind of op
    assert af.estimate(y) == af.estimate(like) > 0
    assert af.estimate(y, target="M1") == af.estimate(like, target="M1") > 0


def test_the_range_analysis_uses_its_rule(op):
    x = af.input((8,), name="x", range=(-3.0, 2.0))
    iv = af.range_analysis(make(NAME, x, scale=2.0, name="s"))["s"].interval
    assert (iv.lo, iv.hi) == (float(np.float16(-1.5)), float(np.float16(4.0 / 3.0)))


def test_precision_risk_reads_its_sign_rule(op):
    x = af.input((4, 8192), name="x")
    signed = af.precision_risk(make(NAME, x).sum(axis=(-1,))).by_mode("narrow_sum")
    same = af.precision_risk(make(NAME, af.relu(x)).sum(axis=(-1,))).by_mode("narrow_sum")
    assert "possibly-signed" in signed[0].detail
    assert "same-sign" in same[0].detail  # relu >= 0 and a positive scale keep the sign


def test_fp16_divergence_bounds_it_by_its_range(op):
    x = af.input((4, 64), name="x")
    small = make(NAME, x, scale=2.0)[:, 1:]  # |y| < 2: no crop-DMA saturation
    large = make(NAME, x, scale=8000.0)[:, 1:]  # |y| up to 8000 > 4094
    assert af.fp16_divergence(small, ["M1"], input_bounds={"x": 1e4}).worst == "none"
    assert af.fp16_divergence(large, ["M1"], input_bounds={"x": 1e4}).worst == "saturation"


def test_the_core_ml_coverage_lists_it_as_missing(op):
    assert coverage()["missing"] == [NAME]


def test_compile_for_a_target_accepts_it_on_every_family(op):
    y = make(NAME, af.input((4, 64), name="x"))
    np.testing.assert_array_equal(af.compile(y, target="M1")(X), np.float16(_want(X, 1.0)))


def test_unregistered_it_is_gone():
    assert NAME not in all_ops()
    assert coverage()["missing"] == []
    with pytest.raises(af.AneforgeError, match="unknown op"):
        make(NAME, af.input((2,)))
