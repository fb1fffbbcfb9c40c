"""Branch and bound over placements: the exhaustive optimum under an honest envelope,
pruning everything under a dishonest one (while the violation warning fires), no
pruning without peaks, ties to the default, one calibration row per timing."""

from __future__ import annotations

import itertools
import warnings

import pytest
from random_regions import random_region

import aneforge as af
from aneforge.errors import BoundViolationWarning
from aneforge.kernel.analyze import analyze
from aneforge.kernel.calibration import read_log
from aneforge.kernel.envelope import Envelope, reset_agreement_warnings
from aneforge.kernel.lower import Placement, lower, resolve
from aneforge.kernel.placement import search_placements

PEAK_FLOPS, PEAK_BANDWIDTH = 1e9, 1e8  # the stand-in device's true rates


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("ANEFORGE_CALIBRATION_FILE", raising=False)
    reset_agreement_warnings()


def _device(prog, region):
    """A deterministic device: the roofline legs under the true rates, added (so never
    faster than either)."""

    def measure(placement):
        s = analyze(lower(prog, region, list(placement)).code)
        return s.flops / PEAK_FLOPS + s.bytes / PEAK_BANDWIDTH

    return measure


def _free(prog, region) -> list[int]:
    middle = resolve(prog, region, None)[0].intermediates
    out = []
    for i, n in enumerate(middle):
        ask = [Placement.MATERIALIZE] * len(middle)
        ask[i] = Placement.INLINE
        if resolve(prog, region, ask)[1][id(n)] is Placement.INLINE:
            out.append(i)
    return out


def _exhaustive(prog, region, measure) -> float:
    n = len(resolve(prog, region, None)[0].intermediates)
    free = _free(prog, region)
    best = float("inf")
    for bits in itertools.product((Placement.MATERIALIZE, Placement.INLINE), repeat=len(free)):
        vector = [Placement.MATERIALIZE] * n
        for i, p in zip(free, bits):
            vector[i] = p
        best = min(best, measure(tuple(vector)))
    return best


@pytest.mark.parametrize("seed", range(25))
def test_an_honest_envelope_finds_the_exhaustive_optimum(seed):
    prog = af.compile(random_region(seed), opt=0)
    honest = Envelope("cpu", PEAK_FLOPS, PEAK_BANDWIDTH)
    for region in prog.fused_regions:
        measure = _device(prog, region)
        with warnings.catch_warnings():
            warnings.simplefilter("error", BoundViolationWarning)  # never beaten
            r = search_placements(prog, region, measure, honest)
        assert r.seconds == pytest.approx(_exhaustive(prog, region, measure), rel=1e-12)
        assert r.measured + r.pruned == 2 ** len(_free(prog, region)) and r.violations == 0


def _chain():
    x = af.input((32, 64), name="x")
    prog = af.compile(((x.exp() * 2.0).tanh() + 1.0).sum(axis=-1), opt=0)
    return prog, prog.fused_regions[0]


def test_the_bound_prunes_on_a_chain():
    prog, region = _chain()
    r = search_placements(prog, region, _device(prog, region), Envelope("cpu", 1e9, 1e8))
    assert r.pruned > 0 and r.measured + r.pruned == 2**4  # exp, mul, tanh, add
    assert r.placement == (Placement.INLINE,) * 4  # recompute is cheaper than traffic here


def test_a_dishonest_envelope_prunes_every_candidate_and_the_warning_fires():
    prog, region = _chain()
    dishonest = Envelope("cpu", PEAK_FLOPS / 1000, PEAK_BANDWIDTH / 1000)
    with pytest.warns(BoundViolationWarning, match="implies"):
        r = search_placements(prog, region, _device(prog, region), dishonest)
    assert r.measured == 1 and r.pruned == 2**4 - 1 and r.violations == 1
    assert r.placement == (Placement.MATERIALIZE,) * 4  # the default, measured first


def test_without_peaks_nothing_is_pruned_and_ties_keep_the_default():
    prog, region = _chain()
    r = search_placements(prog, region, lambda p: 1.0, Envelope("cpu", None, None))
    assert r.measured == 2**4 and r.pruned == 0
    assert r.placement == (Placement.MATERIALIZE,) * 4


def test_every_timing_is_one_calibration_row(tmp_path, monkeypatch):
    prog, region = _chain()
    log = tmp_path / "cal.tsv"
    monkeypatch.setenv("ANEFORGE_CALIBRATION_FILE", str(log))
    r = search_placements(prog, region, _device(prog, region), Envelope("cpu", 1e9, 1e8))
    rows = read_log(log)
    assert len(rows.rows) == r.measured and rows.skipped == 0
    assert {row.label for row in rows.rows} >= {"m,m,m,m"} and all(row.exact for row in rows.rows)
