"""The envelope fit, its file, the agreement check and ``aneforge fit-envelope``."""

from __future__ import annotations

import json
import logging
import warnings

import numpy as np
import pytest

from aneforge.cli import main
from aneforge.errors import BoundViolationWarning, ConfigFileError, OptionError
from aneforge.kernel.calibration import CalibrationRow, append_rows, make_digest
from aneforge.kernel.envelope import (
    Envelope,
    check_agreement,
    fit_envelope,
    load_envelopes,
    reset_agreement_warnings,
    roofline_seconds,
    save_envelopes,
)


def _row(label, ms, flops, nbytes, kernels=1, fa=False, ba=False, opaque=False, backend="cpu"):
    digest = make_digest(label, label)
    return CalibrationRow(
        backend, digest, "", label, ms, None, kernels, flops, nbytes, fa, ba, opaque
    )


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("ANEFORGE_ENVELOPE_FILE", str(tmp_path / "envelope.json"))
    reset_agreement_warnings()


def test_the_peaks_are_the_best_exact_rates_with_their_witnesses():
    rows = [
        _row("gemm", 1.0, 2_000_000_000, 6_000_000),  # 2e12 FLOP/s, 6e9 B/s
        _row("copy", 2.0, 1000, 40_000_000),  # 2e10 B/s
        _row("guarded", 0.1, 2_000_000_000, 100, fa=True),  # approximate FLOPs: no evidence
        _row("opaque", 0.01, 10**12, 10**12, opaque=True),
    ]
    env = fit_envelope(rows)["cpu"]
    assert env.peak_flops == 2e12 and env.flops_witness.label == "gemm"
    assert env.peak_bandwidth == 2e10 and env.bandwidth_witness.label == "copy"
    # the guarded row's exact bytes do count: 100 B in 0.1 ms is 1e6 B/s, not a peak
    assert env.slack == 1.0


def test_fission_slack_scales_both_peaks_so_no_exact_multi_kernel_row_is_violated():
    single = [_row("gemm", 1.0, 10**9, 10**6), _row("copy", 1.0, 1, 10**7)]  # 1e12, 1e10
    fused = _row("fused", 0.5, 10**9, 10**6, kernels=2)  # needs 2e12 FLOP/s: slack 2
    env = fit_envelope([*single, fused])["cpu"]
    assert env.slack == pytest.approx(2.0)
    assert env.peak_flops == pytest.approx(2e12) and env.peak_bandwidth == pytest.approx(2e10)
    bound = roofline_seconds(fused.flops, fused.bytes, env.peak_flops, env.peak_bandwidth)
    assert bound <= fused.measured_s * (1 + 1e-12)


def test_after_a_fit_no_exact_row_is_violated():
    rng = np.random.default_rng(0)
    for _ in range(50):
        rows = [
            _row(
                f"r{i}",
                float(rng.uniform(0.01, 10)),
                int(rng.integers(1, 10**10)),
                int(rng.integers(1, 10**8)),
                kernels=int(rng.integers(1, 4)),
            )
            for i in range(int(rng.integers(1, 12)))
        ]
        env = fit_envelope(rows)["cpu"]
        for r in rows:
            bound = roofline_seconds(r.flops, r.bytes, env.peak_flops, env.peak_bandwidth)
            assert bound <= r.measured_s * (1 + 1e-9)


def test_margin_and_backend_selection_and_their_errors():
    rows = [_row("a", 1.0, 10**9, 10**6), _row("b", 1.0, 10**9, 10**6, backend="gpu")]
    assert sorted(fit_envelope(rows)) == ["cpu", "gpu"]
    env = fit_envelope(rows, backend="gpu", margin=1.5)["gpu"]
    assert env.peak_flops == pytest.approx(1.5e12) and env.margin == 1.5
    with pytest.raises(OptionError, match="no row of backend 'tpu'"):
        fit_envelope(rows, backend="tpu")
    for bad in (0.5, float("nan"), float("inf"), "2"):
        with pytest.raises(OptionError, match="margin"):
            fit_envelope(rows, margin=bad)
    with pytest.raises(OptionError, match="no well-formed row"):
        fit_envelope([])


def test_a_leg_without_exact_rows_has_no_peak():
    env = fit_envelope([_row("g", 1.0, 10**9, 10**6, ba=True)])["cpu"]
    assert env.peak_bandwidth is None and env.peak_flops == 1e12


def test_the_envelope_file_round_trips_and_refuses_malformed_content(tmp_path):
    envs = fit_envelope([_row("gemm", 1.0, 2 * 10**9, 6 * 10**6)])
    path = save_envelopes(envs)
    assert path == tmp_path / "envelope.json" and load_envelopes() == envs
    assert load_envelopes(tmp_path / "missing.json") == {}
    bad = tmp_path / "bad.json"
    doc = json.loads(path.read_text())
    for broken in (
        "not json",
        json.dumps({"version": 99, "envelopes": {}}),
        json.dumps({**doc, "envelopes": {"cpu": {**doc["envelopes"]["cpu"], "peak_flops": -1}}}),
        json.dumps({**doc, "envelopes": {"cpu": {**doc["envelopes"]["cpu"], "backend": "x"}}}),
        json.dumps({**doc, "envelopes": []}),
    ):
        bad.write_text(broken)
        with pytest.raises(ConfigFileError, match="bad.json"):
            load_envelopes(bad)


def test_a_measurement_beating_its_exact_bound_warns_once_per_digest(caplog):
    env = Envelope("cpu", 1e12, 1e10)
    fast = _row("fast", 1.0, 4 * 10**9, 1000)  # implies 4e12 FLOP/s
    with pytest.warns(BoundViolationWarning, match=r"implies peak_flops >= 4e\+12"):
        assert not check_agreement(fast, env, device="host")
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundViolationWarning)
        assert not check_agreement(fast, env, device="host")  # warned already
        assert check_agreement(_row("slow", 1.0, 10**9, 1000), env)
    with pytest.warns(BoundViolationWarning, match="bandwidth"):
        check_agreement(_row("other", 1.0, 10, 10**8), env)  # another digest: warns
    with caplog.at_level(logging.DEBUG, logger="aneforge.kernel"), warnings.catch_warnings():
        warnings.simplefilter("error", BoundViolationWarning)
        assert check_agreement(_row("approx", 1.0, 4 * 10**9, 1000, fa=True), env)
    assert "approximate peak_flops" in caplog.text


def test_the_command_fits_prints_the_witnesses_and_writes(tmp_path, capsys):
    log = tmp_path / "log.tsv"
    append_rows(log, [_row("gemm", 1.0, 2 * 10**9, 6 * 10**6), _row("copy", 2.0, 10, 4 * 10**7)])
    with log.open("a") as f:
        f.write("not a row\n")
    assert main(["fit-envelope", str(log)]) == 0
    out = capsys.readouterr().out
    assert "peak_flops: 2e+12 FLOP/s (witness gemm" in out and "peak_bandwidth: 2e+10" in out
    assert "skipped 1 malformed line" in out and str(tmp_path / "envelope.json") in out
    assert load_envelopes()["cpu"].peak_flops == 2e12
    custom = tmp_path / "custom.json"
    assert main(["fit-envelope", str(log), "--margin", "2", "--output", str(custom)]) == 0
    assert load_envelopes(custom)["cpu"].peak_flops == 4e12


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "tpu"], "no row of backend 'tpu'"),
        (["--margin", "0.5"], "margin must be a finite number >= 1"),
        (["--margin", "x"], "invalid float value"),
    ],
)
def test_the_command_reports_user_errors_on_one_line(tmp_path, capsys, args, message):
    log = tmp_path / "log.tsv"
    append_rows(log, [_row("gemm", 1.0, 10**9, 10**6)])
    assert main(["fit-envelope", str(log), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err


def test_the_command_refuses_a_missing_or_empty_log(tmp_path, capsys):
    assert main(["fit-envelope", str(tmp_path / "none.tsv")]) == 2
    assert "no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.tsv"
    empty.write_text("junk\n")
    assert main(["fit-envelope", str(empty)]) == 2
    assert "no well-formed row" in capsys.readouterr().err
