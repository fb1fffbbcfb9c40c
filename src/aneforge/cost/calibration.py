"""The default cost model's constants, from the bundled fit.

``data/cost_model.json`` is written by ``scripts/fit_cost_model.py`` from the measured
ANE latency corpus and ships with aneforge. It is read once (through
:func:`aneforge.data.load`); a missing, unparsable or incomplete file, or a constant
that is not positive, is a broken installation and raises
:class:`~aneforge.errors.BundledDataError`.

Example:
    >>> from aneforge.cost.calibration import constants
    >>> constants().floor_us > 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..data import SCHEMAS, load
from ..errors import BundledDataError

FILE = "cost_model.json"
#: The constants the file holds, each a positive number (its schema's keys, less the
#: bridge table).
CONSTANT_KEYS = tuple(k for k in SCHEMAS[FILE].keys if k != "bridge_ops")


@dataclass(frozen=True)
class Constants:
    """Calibrated constants of the default (measured, M5-class) cost model."""

    floor_us: float  # smallest fused-op latency
    cut_us: float  # the cost of one bridge cut (the smallest bridge latency)
    bw_bytes_per_us: float  # weight streaming bandwidth
    flops_per_us: float  # contraction throughput
    act_bw_bytes_per_us: float  # activation I/O path
    layer_us: float  # fixed cost of one engine pass
    bridge_ops: tuple = field(default=())
    source: str = "given by the caller"


def _broken(what: str) -> BundledDataError:
    return BundledDataError(
        f"aneforge's bundled data file {FILE} {what}: the installation is broken; "
        f"reinstall aneforge (the file is {SCHEMAS[FILE].origin})"
    )


def from_data(data) -> Constants:
    """The :class:`Constants` of the contents of a ``cost_model.json`` (as
    :func:`aneforge.data.load` returns them); a bad value raises
    :class:`~aneforge.errors.BundledDataError`.

    Example:
        >>> from aneforge.data import load
        >>> from_data(load("cost_model.json")) == constants()
        True
    """
    try:
        values = {k: float(data[k]) for k in CONSTANT_KEYS}
        rows = tuple(
            (str(r["family"]), str(r["key"]), float(r["min_us"])) for r in data["bridge_ops"]
        )
        source = str(data["_source"]["fitted_by"])
    except (ValueError, KeyError, TypeError) as err:
        raise _broken(f"holds a malformed entry ({type(err).__name__}: {err})") from None
    bad = {k: v for k, v in values.items() if not v > 0}
    if bad:
        raise _broken(f"holds non-positive constants {bad}")
    return Constants(**values, bridge_ops=rows, source=source)


@lru_cache(maxsize=1)
def constants() -> Constants:
    """The bundled calibration, read once."""
    return from_data(load(FILE))
