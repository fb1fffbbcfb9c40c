"""The envelope: a backend's peak FLOP rate and bandwidth, fitted to its calibration log.

:func:`fit_envelope` reads measured rows (:mod:`aneforge.kernel.calibration`) per backend:

- ``peak_flops`` is the largest achieved FLOP rate (``flops / measured``) over the rows
  that are not opaque and whose FLOPs are exact; ``peak_bandwidth`` likewise over the
  rows whose bytes are exact. Single-kernel rows set the peaks (a multi-kernel
  candidate's time holds several launches); only where a backend has none does a leg
  take its multi-kernel rows. The row that gives each peak is its *witness*.
- Fission slack: a fully exact multi-kernel row whose roofline bound under those peaks
  exceeds its measured time proves the peaks too low; both scale up by the smallest
  factor under which no such row is violated (``slack``).
- ``margin`` (>= 1) then scales both, a headroom for later measurements.

:func:`save_envelopes` writes the fit where the kernel cost model reads it,
:func:`envelope_path`: ``$ANEFORGE_ENVELOPE_FILE``, else
``$XDG_CONFIG_HOME/aneforge/envelope.json``, else ``~/.config/aneforge/envelope.json``.

:func:`check_agreement` holds one measurement against its bound: an exact leg whose
implied rate beats its peak, or a fully exact bound above the measured time, warns
:class:`~aneforge.errors.BoundViolationWarning` once per (backend, device, digest),
naming the peaks the measurement implies; an approximate leg only logs (its counts are
not evidence about the hardware).

Example:
    >>> from aneforge.kernel.calibration import CalibrationRow
    >>> rows = [CalibrationRow("cpu", "gemm____/00000000", "", "gemm", 1.0, None, 1,
    ...                        2_000_000_000, 6_000_000, False, False, False)]
    >>> env = fit_envelope(rows)["cpu"]
    >>> env.peak_flops, env.peak_bandwidth  # 2e9 FLOPs and 6 MB in 1 ms
    (2000000000000.0, 6000000000.0)
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import BoundViolationWarning, ConfigFileError, FileReadError, OptionError
from ..limits import read_regular_file
from .calibration import CalibrationRow

__all__ = [
    "Envelope",
    "Witness",
    "bound_seconds",
    "check_agreement",
    "check_margin",
    "check_output_path",
    "envelope_path",
    "fit_envelope",
    "load_envelopes",
    "reset_agreement_warnings",
    "roofline_seconds",
    "save_envelopes",
]

LOG = logging.getLogger("aneforge.kernel")
SCHEMA_VERSION = 1
_MAX_FILE_BYTES = 1 << 20  # an envelope file is a few KiB
_WARNED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Witness:
    """The row that set a peak: its label, digest, time and achieved rate (per second)."""

    label: str
    digest: str
    measured_ms: float
    achieved: float


@dataclass(frozen=True)
class Envelope:
    """A backend's peaks (FLOP/s, bytes/s; None where no row was evidence), their
    witnesses, the fission slack and the margin applied."""

    backend: str
    peak_flops: float | None
    peak_bandwidth: float | None
    flops_witness: Witness | None = None
    bandwidth_witness: Witness | None = None
    slack: float = 1.0
    margin: float = 1.0

    def bound(self, flops, nbytes) -> float | None:
        """The roofline lower-bound seconds of ``flops`` and ``nbytes`` under these
        peaks (None when the envelope has neither)."""
        return roofline_seconds(flops, nbytes, self.peak_flops, self.peak_bandwidth)


def bound_seconds(result, backend: str, path=None) -> float | None:
    """The roofline bound of an analysis ``result`` (anything with ``flops`` and
    ``bytes``: :func:`aneforge.kernel.analyze`'s summary, a floor) under ``backend``'s
    fitted envelope (:func:`load_envelopes`); None where no envelope is fitted.

    Example:
        >>> from aneforge.kernel.analyze import Floor
        >>> bound_seconds(Floor(10, 10, 0, True), "no-such-backend") is None
        True
    """
    env = load_envelopes(path).get(backend)
    return None if env is None else env.bound(result.flops, result.bytes)


def roofline_seconds(flops, nbytes, peak_flops=None, peak_bandwidth=None) -> float | None:
    """``max(flops / peak_flops, nbytes / peak_bandwidth)`` over the peaks given, None
    when neither is (:func:`aneforge.kernel.roofline_seconds` takes a summary).

    Example:
        >>> roofline_seconds(2e9, 1e6, peak_flops=1e12, peak_bandwidth=1e9)
        0.002
    """
    legs = [w / p for w, p in ((flops, peak_flops), (nbytes, peak_bandwidth)) if p is not None]
    return max(legs) if legs else None


def _peak(rows, work, exact) -> tuple[float | None, Witness | None]:
    usable = [r for r in rows if exact(r) and not r.opaque and work(r) > 0 and r.measured_ms > 0]
    single = [r for r in usable if r.kernels == 1] or usable
    if not single:
        return None, None
    best = max(single, key=lambda r: work(r) / r.measured_s)
    rate = work(best) / best.measured_s
    return rate, Witness(best.label, best.digest, best.measured_ms, rate)


def _fit_one(backend: str, rows, margin: float) -> Envelope:
    pf, wf = _peak(rows, lambda r: r.flops, lambda r: not r.flops_approx)
    pb, wb = _peak(rows, lambda r: r.bytes, lambda r: not r.bytes_approx)
    slack = 1.0
    for r in rows:
        if r.kernels > 1 and r.exact and r.measured_ms > 0:
            bound = roofline_seconds(r.flops, r.bytes, pf, pb)
            if bound is not None and bound > r.measured_s:
                slack = max(slack, bound / r.measured_s)
    scale = slack * margin
    return Envelope(
        backend,
        None if pf is None else pf * scale,
        None if pb is None else pb * scale,
        wf,
        wb,
        slack,
        margin,
    )


def fit_envelope(rows, backend: str | None = None, margin: float = 1.0) -> dict[str, Envelope]:
    """The envelope of each backend in ``rows`` (or of ``backend`` alone): module
    docstring.

    Raises :class:`~aneforge.errors.OptionError` for a margin below 1 or not finite, a
    backend with no row, or no rows at all.
    """
    check_margin(margin)
    by_backend: dict[str, list[CalibrationRow]] = {}
    for r in rows:
        by_backend.setdefault(r.backend, []).append(r)
    if not by_backend:
        raise OptionError("fit-envelope: the log has no well-formed row to fit")
    if backend is not None:
        if backend not in by_backend:
            raise OptionError(
                f"fit-envelope: no row of backend {backend!r}; the log has {sorted(by_backend)}"
            )
        by_backend = {backend: by_backend[backend]}
    return {b: _fit_one(b, rs, float(margin)) for b, rs in sorted(by_backend.items())}


def check_margin(margin) -> float:
    """``margin`` if it is a finite number >= 1, else an :class:`OptionError`."""
    if isinstance(margin, bool) or not isinstance(margin, (int, float)):
        raise OptionError(f"fit-envelope: margin must be a number >= 1, got {margin!r}")
    if not math.isfinite(margin) or margin < 1:
        raise OptionError(f"fit-envelope: margin must be a finite number >= 1, got {margin!r}")
    return float(margin)


def check_output_path(path, what: str = "fit-envelope: --output") -> Path:
    """``path`` as a place to write a file: a new name in an existing folder, or an
    existing regular file (replaced, or appended to). Anything else (a folder, a link, a
    FIFO, a missing folder) is an :class:`OptionError` naming ``what``, before any work.

    Example:
        >>> try:
        ...     check_output_path("")
        ... except OptionError as err:
        ...     print(err)
        fit-envelope: --output is empty; give a file path such as envelope.json
    """
    if not str(path).strip():
        raise OptionError(f"{what} is empty; give a file path such as envelope.json")
    p = Path(path)
    if p.is_symlink() or (p.exists() and not p.is_file()):
        raise OptionError(
            f"{what} {str(p)!r} exists and is not a regular file; give a new file name or "
            "a regular file"
        )
    if not p.parent.is_dir():
        raise OptionError(f"{what} {str(p)!r}: the folder {str(p.parent)!r} does not exist")
    return p


def envelope_path() -> Path:
    """Where the envelope file is read and written (module docstring)."""
    if os.environ.get("ANEFORGE_ENVELOPE_FILE"):
        return Path(os.environ["ANEFORGE_ENVELOPE_FILE"])
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "aneforge" / "envelope.json"


def save_envelopes(envelopes: dict[str, Envelope], path=None) -> Path:
    """Write ``envelopes`` (merged over the backends the file already holds) and return
    the path written. Raises :class:`~aneforge.errors.FileReadError` when it cannot."""
    target = Path(path) if path is not None else envelope_path()
    merged = load_envelopes(target) if target.exists() else {}
    merged.update(envelopes)
    doc = {"version": SCHEMA_VERSION, "envelopes": {b: asdict(e) for b, e in merged.items()}}
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".envelope-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except OSError as err:
        raise FileReadError(
            f"envelope file {str(target)!r}: cannot write ({err.strerror})"
        ) from None
    return target


def _number(value, where: str, path) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigFileError(
            f"envelope file {str(path)!r}: {where} is {value!r}, not a number > 0 or null; "
            "rerun aneforge fit-envelope to rewrite it"
        )
    return float(value)


def _witness(value, where: str, path) -> Witness | None:
    if value is None:
        return None
    keys = {"label", "digest", "measured_ms", "achieved"}
    if not isinstance(value, dict) or set(value) != keys:
        raise ConfigFileError(f"envelope file {str(path)!r}: {where} is not a witness record")
    return Witness(
        str(value["label"]),
        str(value["digest"]),
        _number(value["measured_ms"], f"{where}.measured_ms", path),
        _number(value["achieved"], f"{where}.achieved", path),
    )


def load_envelopes(path=None) -> dict[str, Envelope]:
    """The envelopes of the file at ``path`` (default :func:`envelope_path`), by
    backend; ``{}`` when there is no file. The file is untrusted: anything malformed
    raises :class:`~aneforge.errors.ConfigFileError` naming the file and the problem."""
    target = Path(path) if path is not None else envelope_path()
    if not target.exists():
        return {}
    raw = read_regular_file(target, "envelope file", _MAX_FILE_BYTES)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigFileError(
            f"envelope file {str(target)!r} is not JSON ({err}); rerun aneforge fit-envelope"
        ) from None
    if not isinstance(doc, dict) or doc.get("version") != SCHEMA_VERSION:
        raise ConfigFileError(
            f"envelope file {str(target)!r}: not a version-{SCHEMA_VERSION} envelope file"
        )
    envs = doc.get("envelopes")
    if not isinstance(envs, dict):
        raise ConfigFileError(f"envelope file {str(target)!r}: 'envelopes' is not an object")
    out = {}
    for backend, e in envs.items():
        where = f"envelopes[{backend!r}]"
        if not isinstance(e, dict) or e.get("backend") != backend:
            raise ConfigFileError(f"envelope file {str(target)!r}: {where} is malformed")
        out[backend] = Envelope(
            backend,
            _number(e.get("peak_flops"), f"{where}.peak_flops", target),
            _number(e.get("peak_bandwidth"), f"{where}.peak_bandwidth", target),
            _witness(e.get("flops_witness"), f"{where}.flops_witness", target),
            _witness(e.get("bandwidth_witness"), f"{where}.bandwidth_witness", target),
            _number(e.get("slack", 1.0), f"{where}.slack", target),
            _number(e.get("margin", 1.0), f"{where}.margin", target),
        )
    return out


def check_agreement(row: CalibrationRow, envelope: Envelope, device: str = "") -> bool:
    """Whether ``row``'s measured time respects its bound under ``envelope`` (module
    docstring); warns once per (backend, device, digest) where it does not.

    Example:
        >>> env = Envelope("cpu", 1e12, 1e10)
        >>> fast = CalibrationRow("cpu", "gemm____/00000001", "", "gemm", 1.0, None, 1,
        ...                       4_000_000_000, 1000, False, False, False)
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as seen:
        ...     warnings.simplefilter("always")
        ...     check_agreement(fast, env)
        False
        >>> "implies peak_flops >= 4e+12" in str(seen[0].message)
        True
    """
    t = row.measured_s
    if t <= 0 or row.opaque:
        return True
    legs = (
        ("peak_flops", "FLOP/s", row.flops, envelope.peak_flops, row.flops_approx),
        ("peak_bandwidth", "B/s", row.bytes, envelope.peak_bandwidth, row.bytes_approx),
    )
    broken = []
    for name, unit, work, peak, approx in legs:
        if peak is None or work <= 0 or work / t <= peak * (1 + 1e-9):
            continue
        if approx:  # an upper-bound count above the peak says nothing about the hardware
            LOG.debug(
                "%s %s: approximate %s %.3g %s above the envelope",
                row.backend,
                row.digest,
                name,
                work / t,
                unit,
            )
            continue
        broken.append(f"implies {name} >= {work / t:.4g} {unit}, the envelope has {peak:.4g}")
    if not broken:
        return True
    key = (row.backend, device, row.digest)
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(
            BoundViolationWarning(
                f"{row.backend}{'/' + device if device else ''} {row.digest} ({row.label}) ran "
                f"in {row.measured_ms:.6g} ms, under its exact bound: it "
                f"{'; '.join(broken)}; rerun aneforge fit-envelope on a log with this row"
            ),
            stacklevel=2,
        )
    return False


def reset_agreement_warnings() -> None:
    """Forget which violations were warned about (each warns once per process)."""
    _WARNED.clear()
