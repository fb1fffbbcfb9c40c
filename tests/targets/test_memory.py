"""Chips' unified-memory bandwidth: the data file, name resolution and the DMA ceiling."""

from __future__ import annotations

import csv
import dataclasses
from importlib import resources

import numpy as np
import pytest

import aneforge as af
from aneforge.cost.analytic import chip_constants, fitted_params
from aneforge.targets.memory import FILE, memory_bandwidth
from aneforge.targets.names import resolve_target


def _rows():
    text = resources.files("aneforge.data").joinpath(FILE).read_text()
    return list(csv.DictReader(text.splitlines()))


def test_every_row_has_a_positive_bandwidth_and_a_source():
    rows = _rows()
    assert len(rows) >= 10
    for r in rows:
        assert float(r["memory_bandwidth_gb_s"]) > 0 and r["source"].strip(), r
        assert resolve_target(r["chip"]).chip is not None  # every row names a known chip


def test_chip_names_carry_their_memory_and_architectures_none():
    m4, m4_max, arch = resolve_target("M4"), resolve_target("Apple M4 Max"), resolve_target("h16s")
    assert m4.arch == m4_max.arch == arch.arch == "h16s"
    assert m4_max.memory_bytes_per_us > m4.memory_bytes_per_us > 0
    assert arch.memory_bytes_per_us is None and arch.chip is None
    assert memory_bandwidth("m4 max") == m4_max.memory_bytes_per_us


def test_the_memory_caps_both_dma_paths():
    p = dataclasses.replace(fitted_params(), memory_share=0.5)
    t = dataclasses.replace(resolve_target("M4"), memory_bytes_per_us=1.0e4)  # 10 GB/s
    c = chip_constants(t, p)
    assert c.bw_data == pytest.approx(5.0e3) and c.bw_kernel == pytest.approx(5.0e3)
    free = chip_constants(resolve_target("h16s"), p)  # no memory system: no ceiling
    assert free.bw_kernel > c.bw_kernel


def test_a_chip_is_never_faster_than_its_bare_architecture():
    x = af.input((1, 4096))
    y = x @ np.ones((4096, 4096), np.float16)
    for chip in ("M1", "M4", "M4 Max", "A17 Pro"):
        arch = resolve_target(chip).arch
        assert af.estimate(y, target=chip) >= af.estimate(y, target=arch) * (1 - 1e-12)
