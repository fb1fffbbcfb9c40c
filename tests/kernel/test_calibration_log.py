"""The calibration log's schema: one owner, round trips, legacy rows, malformed lines."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aneforge.errors import FileReadError
from aneforge.kernel.calibration import (
    CalibrationRow,
    append_rows,
    make_digest,
    of_line,
    read_log,
    to_line,
)

PROFILE = settings(max_examples=300, derandomize=True, deadline=None)
DIGEST = make_digest(b"code", "matmul")


def _row(**changes) -> CalibrationRow:
    base = dict(
        backend="emulator",
        digest=DIGEST,
        routine="region0",
        label="a label",
        measured_ms=1.5,
        model_ms=0.25,
        kernels=1,
        flops=2_000_000,
        bytes=4096,
        flops_approx=False,
        bytes_approx=True,
        opaque=False,
    )
    return CalibrationRow(**{**base, **changes})


def _floor6(x: float) -> float:
    return float(Decimal(repr(x)).quantize(Decimal("0.000001"), rounding=ROUND_FLOOR))


text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
times = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@PROFILE
@given(
    backend=text.filter(lambda t: t.strip("\t\r\n") != ""),
    prefix=text,
    routine=text,
    label=text,
    measured=times,
    model=st.none() | times,
    kernels=st.integers(1, 64),
    flops=st.integers(0, 10**15),
    nbytes=st.integers(0, 10**12),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_a_row_round_trips_through_its_line(
    backend, prefix, routine, label, measured, model, kernels, flops, nbytes, flags
):
    row = CalibrationRow(
        backend,
        make_digest(label, prefix),
        routine,
        label,
        measured,
        model,
        kernels,
        flops,
        nbytes,
        *flags,
    )
    line = to_line(row)
    assert "\n" not in line and "\r" not in line and line.count("\t") == 11
    back = of_line(line)
    spaced = lambda t: t.replace("\t", " ").replace("\r", " ").replace("\n", " ")  # noqa: E731
    assert back == CalibrationRow(
        spaced(backend),
        row.digest,
        spaced(routine),
        spaced(label),
        _floor6(measured),
        None if model is None else _floor6(model),
        kernels,
        flops,
        nbytes,
        *flags,
    )
    assert to_line(back) == line  # idempotent


@pytest.mark.parametrize(
    "value, text",
    [
        (0.1234567, "0.123456"),
        (2.0000004, "2.000000"),
        (0.3, "0.300000"),
        (1e-7, "0.000000"),
        (0.0000019999, "0.000001"),
        (123.4567891, "123.456789"),
    ],
)
def test_times_print_six_decimals_rounded_down(value, text):
    assert to_line(_row(measured_ms=value)).split("\t")[4] == text


def test_legacy_eleven_column_rows_read_without_a_routine():
    parts = to_line(_row()).split("\t")
    assert of_line("\t".join(parts[:2] + parts[3:])) == _row(routine="")


def test_flags_read_as_words_too():
    parts = to_line(_row()).split("\t")
    assert of_line("\t".join(parts[:9] + ["false", "TRUE", "false"])) == _row()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p[:10],  # 10 columns
        lambda p: p + ["x"],  # 13 columns
        lambda p: p[:4] + ["abc"] + p[5:],  # a time that is no number
        lambda p: p[:4] + ["-1.0"] + p[5:],  # a negative time
        lambda p: p[:4] + ["nan"] + p[5:],
        lambda p: p[:4] + ["inf"] + p[5:],
        lambda p: p[:5] + ["-0.5"] + p[6:],  # a negative model time
        lambda p: p[:1] + ["matmul/1234"] + p[2:],  # a malformed digest
        lambda p: p[:1] + ["matmul__/1234ABCD"] + p[2:],  # upper-case hex
        lambda p: p[:6] + ["0"] + p[7:],  # no kernel
        lambda p: p[:7] + ["1e9"] + p[8:],  # FLOPs written as a float
        lambda p: p[:9] + ["yes"] + p[10:],  # a flag that is neither
        lambda p: [""] + p[1:],  # no backend
    ],
)
def test_malformed_lines_read_as_none(mutate):
    assert of_line("\t".join(mutate(to_line(_row()).split("\t")))) is None


def test_a_log_skips_and_counts_its_malformed_lines(tmp_path):
    path = tmp_path / "log.tsv"
    append_rows(path, [_row(), _row(label="second")])
    with path.open("ab") as f:
        f.write(b"garbage line\n\n\xff\xfe\x00 binary\n")
    append_rows(path, [_row(label="third")])
    log = read_log(path)
    assert [r.label for r in log.rows] == ["a label", "second", "third"] and log.skipped == 2


def test_an_unreadable_or_oversized_log_names_its_path(tmp_path):
    with pytest.raises(FileReadError, match="no such file"):
        read_log(tmp_path / "missing.tsv")
    big = tmp_path / "big.tsv"
    big.write_text(to_line(_row()) * 10)
    with pytest.raises(FileReadError, match="big.tsv"):
        read_log(big, limit=100)


def test_a_digest_is_a_padded_prefix_and_eight_hex():
    d = make_digest("abc", "a/b\tc")
    assert len(d) == 17 and d[:8] == "a_b_c___" and d[8] == "/"
    assert all(c in "0123456789abcdef" for c in d[9:])
