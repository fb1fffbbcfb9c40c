"""The calibration log: one row per timed candidate, its model inputs next to its time.

This module is the schema's one owner: rows are written with :func:`to_line` (the tuner,
the bandwidth probe) and read back with :func:`of_line` (``aneforge fit-envelope``), so
writer and reader cannot drift apart. A log is a text file of tab-separated lines, one
row each, twelve columns in this order:

==============  =========================================================================
column          meaning and format
==============  =========================================================================
backend         the device that ran it (``emulator``, ``coreml``, ...)
digest          8 characters of a name, ``/``, 8 lowercase hex of the code's sha256
routine         the routine measured (a region, a kernel), may be empty
label           a free-text label
measured_ms     the measured time, ms, ``%.6f`` rounded down
model_ms        the cost model's time, ms, ``%.6f`` rounded down; empty when none
kernels         how many kernels the candidate launched (>= 1)
flops           the analysed FLOPs (an integer)
bytes           the analysed bytes moved (an integer)
flops_approx    ``1`` when ``flops`` is only a bound, else ``0``
bytes_approx    ``1`` when ``bytes`` is only a bound, else ``0``
opaque          ``1`` when the code held opaque parts (its counts are not evidence)
==============  =========================================================================

Text fields have their tabs, carriage returns and newlines turned into spaces. Booleans
are written ``1``/``0``; ``true``/``false`` read too. An 11-column line is the legacy
form without ``routine`` and reads with ``routine=""``. Anything else (another column
count, a number that does not parse, a negative or non-finite time, a malformed digest)
is malformed: :func:`of_line` returns None and :func:`read_log` counts it as skipped.

Example:
    >>> row = CalibrationRow("emulator", make_digest("code", "matmul"), "region0", "a b",
    ...                      1.25, None, 1, 2_000_000, 160, False, False, False)
    >>> line = to_line(row)
    >>> line.split("\\t")[:6]
    ['emulator', 'matmul__/5694d08a', 'region0', 'a b', '1.250000', '']
    >>> of_line(line) == row
    True
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, fields
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from pathlib import Path
from typing import NamedTuple

from ..errors import FileReadError
from ..limits import read_regular_file

__all__ = [
    "CalibrationRow",
    "LogRead",
    "append_rows",
    "make_digest",
    "of_line",
    "read_log",
    "to_line",
]

_DIGEST = re.compile(r"[^\t\n\r/]{8}/[0-9a-f]{8}")
_TRUE, _FALSE = ("1", "true"), ("0", "false")


@dataclass(frozen=True)
class CalibrationRow:
    """One timed candidate (the module docstring gives each column)."""

    backend: str
    digest: str
    routine: str
    label: str
    measured_ms: float
    model_ms: float | None
    kernels: int
    flops: int
    bytes: int
    flops_approx: bool
    bytes_approx: bool
    opaque: bool

    @property
    def measured_s(self) -> float:
        return self.measured_ms / 1e3

    @property
    def exact(self) -> bool:
        """Both legs exact and no opaque code: the row is evidence on both peaks."""
        return not (self.flops_approx or self.bytes_approx or self.opaque)


COLUMNS = tuple(f.name for f in fields(CalibrationRow))


def make_digest(content, prefix: str) -> str:
    """The digest of ``content`` (text or bytes): ``prefix`` cut or padded with ``_``
    to 8 characters (tabs, newlines and ``/`` become ``_``), ``/``, then the first 8
    hex digits of its sha256.

    Example:
        >>> make_digest(b"x", "conv2d_3x3")
        'conv2d_3/2d711642'
    """
    data = content.encode() if isinstance(content, str) else bytes(content)
    head = re.sub(r"[\t\n\r/]", "_", prefix)[:8].ljust(8, "_")
    return f"{head}/{hashlib.sha256(data).hexdigest()[:8]}"


def _ms(value: float) -> str:
    """``%.6f`` rounded down, exactly (through the shortest decimal of the float)."""
    return str(Decimal(repr(float(value))).quantize(Decimal("0.000001"), rounding=ROUND_FLOOR))


def _text(value: str) -> str:
    return re.sub(r"[\t\r\n]", " ", str(value))


def to_line(row: CalibrationRow) -> str:
    """The log line of ``row`` (no trailing newline)."""
    parts = [
        _text(row.backend),
        _text(row.digest),
        _text(row.routine),
        _text(row.label),
        _ms(row.measured_ms),
        "" if row.model_ms is None else _ms(row.model_ms),
        str(int(row.kernels)),
        str(int(row.flops)),
        str(int(row.bytes)),
        *("1" if flag else "0" for flag in (row.flops_approx, row.bytes_approx, row.opaque)),
    ]
    return "\t".join(parts)


def _time(text: str) -> float | None:
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite() or value < 0:
        return None
    return float(value)


def _count(text: str, low: int) -> int | None:
    if not re.fullmatch(r"[0-9]{1,30}", text):
        return None
    value = int(text)
    return value if value >= low else None


def _flag(text: str) -> bool | None:
    word = text.lower()
    return True if word in _TRUE else False if word in _FALSE else None


def of_line(line: str) -> CalibrationRow | None:
    """The row of one log line, or None when it is malformed (module docstring)."""
    parts = line.rstrip("\r\n").split("\t")
    if len(parts) == 11:  # the legacy form, before the routine column
        parts.insert(2, "")
    if len(parts) != 12:
        return None
    backend, digest, routine, label, measured, model, kernels, flops, nbytes = parts[:9]
    values = (
        _time(measured),
        None if model == "" else _time(model),
        _count(kernels, 1),
        _count(flops, 0),
        _count(nbytes, 0),
        *(_flag(p) for p in parts[9:]),
    )
    if (
        not backend
        or not _DIGEST.fullmatch(digest)
        or any(v is None for i, v in enumerate(values) if i != 1)
        or (model != "" and values[1] is None)
    ):
        return None
    return CalibrationRow(backend, digest, routine, label, *values)


class LogRead(NamedTuple):
    """A read log: its rows in file order, and how many lines were skipped as
    malformed (blank lines are neither)."""

    rows: list[CalibrationRow]
    skipped: int


def read_log(path, limit: int | None = None) -> LogRead:
    """The rows of the calibration log at ``path`` (untrusted: size-capped like every
    file aneforge reads, bytes that are not UTF-8 make their line malformed).

    Raises :class:`~aneforge.errors.FileReadError` naming the path when it cannot be
    read.
    """
    data = read_regular_file(path, "calibration log", limit)
    rows, skipped = [], 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            row = of_line(raw.decode("utf-8"))
        except UnicodeDecodeError:
            row = None
        if row is None:
            skipped += 1
        else:
            rows.append(row)
    return LogRead(rows, skipped)


def append_rows(path, rows) -> int:
    """Append ``rows`` to the log at ``path`` (created if missing); returns how many.

    Raises :class:`~aneforge.errors.FileReadError` naming the path when it cannot be
    written.
    """
    lines = [to_line(r) + "\n" for r in rows]
    try:
        with Path(path).open("a", encoding="utf-8", newline="\n") as f:
            f.writelines(lines)
    except OSError as err:
        raise FileReadError(
            f"calibration log {str(path)!r}: cannot append ({err.strerror})"
        ) from None
    return len(lines)
