"""The text reports as golden files: what a user reads stays what it was unless a change
means it (``pytest --update-golden`` rewrites ``tests/golden/``; review that diff).

One representative graph per report, each built so its report has something to say.
"""

from __future__ import annotations

import warnings

import numpy as np

import aneforge as af
from aneforge.graph.ops.bridge import flatten, lrn


def _norm_graph():
    x = af.input((2, 384), name="x", range=(-3.0, 3.0))
    return af.layer_norm(x * 100.0, name="norm").relu(name="act")


def _sum_graph():
    x = af.input((4, 4096), name="x")
    return (x.sum(-1, name="total") * 0.5).named("half")


def test_precision_report(golden):
    report = af.precision_risk(_sum_graph())
    golden("precision/narrow_sum.txt", str(report))


def test_range_report(golden):
    report = af.range_analysis(_norm_graph())
    golden("ranges/scaled_layer_norm.txt", str(report))


def test_divergence_report(golden):
    x = af.input((1, 8, 4, 32), name="x")
    y = (x[:, :, :, 1:] * 2.0).exp().sum(-1, name="s")
    report = af.fp16_divergence(y, ["M1", "A15", "M4"], input_bounds={"x": 6000.0})
    golden("divergence/width_offset_slice.txt", str(report))


def test_preflight_report(golden):
    x = af.input((1, 4, 8, 8), name="x")
    y = flatten(lrn(af.conv(x, np.ones((4, 4, 3, 3)) * 0.1, padding=1).sin()))
    for target in ("M1", "A15"):
        golden(f"preflight/{target}.txt", str(af.preflight(y, target)))


def test_program_summary(golden):
    x = af.input((1, 4, 8, 8), name="x")
    y = flatten(lrn(af.conv(x, np.ones((4, 4, 3, 3)) * 0.1, padding=1).relu(name="act")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = af.compile(y, opt=0)
    golden("program/conv_lrn_flatten.txt", prog.summary())
