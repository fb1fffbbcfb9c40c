"""The bandwidth probes: exact counts, well-formed rows, and aneforge calibrate-bandwidth."""

from __future__ import annotations

import pytest

from aneforge.cli import main
from aneforge.errors import OptionError
from aneforge.kernel.analyze import analyze
from aneforge.kernel.calibration import read_log
from aneforge.kernel.envelope import fit_envelope
from aneforge.kernel.stream import PROBES, bandwidth_rows, probe_code


@pytest.mark.parametrize("name, nbytes, flops", [("copy", 4, 0), ("scale", 4, 1), ("add", 6, 1)])
def test_each_probe_moves_exactly_its_bytes(name, nbytes, flops):
    s = analyze(probe_code(name, 1 << 10))
    assert s.exact and s.bytes == nbytes * (1 << 10) and s.flops == flops * (1 << 10)


def test_the_rows_are_exact_witnesses_for_the_envelope():
    rows = bandwidth_rows(sizes=(1 << 8, 1 << 10), repeats=1)
    assert len(rows) == 2 * len(PROBES)
    assert all(r.exact and r.kernels == 1 and r.measured_ms > 0 for r in rows)
    env = fit_envelope(rows)["cpu"]
    assert env.peak_bandwidth > 0 and env.bandwidth_witness.label.split()[0] in PROBES


@pytest.mark.parametrize("sizes, repeats", [((3,), 1), ((0,), 1), ((1 << 27,), 1), ((8,), 0)])
def test_bad_sizes_and_repeats_are_refused(sizes, repeats):
    with pytest.raises(OptionError, match="calibrate-bandwidth"):
        bandwidth_rows(sizes=sizes, repeats=repeats)


def test_the_command_appends_rows_that_fit_envelope_reads(tmp_path, capsys):
    log = tmp_path / "bw.tsv"
    argv = ["calibrate-bandwidth", str(log), "--min-exp", "4", "--max-exp", "6", "--repeats", "1"]
    assert main(argv) == 0
    assert f"appended 9 row(s) to {log}" in capsys.readouterr().out
    assert main(argv) == 0  # appends
    assert len(read_log(log).rows) == 18 and read_log(log).skipped == 0
    assert main(["calibrate-bandwidth", str(log), "--min-exp", "7", "--max-exp", "5"]) == 2
    assert "--min-exp" in capsys.readouterr().err
