"""The files bundled in ``aneforge/data`` and their one loader.

Every JSON file here says where it comes from in a ``_source`` record (the script that
writes it, the upstream file and its sha256 where it is built from one, or the documents
its facts are taken from); ``special_coefficients.json`` keeps its older ``source``
key. :data:`SCHEMAS` lists each JSON file with the top-level keys its readers rely on
and what writes it. :func:`load` reads a file once, checks its source record and those
keys, and returns a read-only view of it (mappings as :class:`types.MappingProxyType`,
lists as tuples), so no reader can change what the next one sees. :func:`text` returns
the text of a bundled CSV table (:data:`TABLES`; each row carries its own source).

A missing, unparsable or incomplete bundled file is a broken installation, not a
mistake of the caller: it raises :class:`~aneforge.errors.BundledDataError` naming the
file, what is wrong and what writes it.

Example:
    >>> from aneforge.data import load
    >>> load("families.json")["families"][1]["tier"]
    'A13'
    >>> load("chip_curves.json") is load("chip_curves.json")
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from ..errors import BundledDataError


@dataclass(frozen=True)
class Schema:
    """What :func:`load` checks in one bundled JSON file.

    Attributes:
        keys: the top-level keys its readers rely on.
        origin: how the file comes to be ('written by <script>' or kept by hand).
        source_key: the key of its source record.
    """

    keys: tuple[str, ...]
    origin: str
    source_key: str = "_source"


_BY_HAND = "kept by hand from the documents its _source names"

#: Every bundled JSON file, with its schema.
SCHEMAS: dict[str, Schema] = {
    "analytic_model.json": Schema(("params", "errors"), "written by scripts/fit_analytic.py"),
    "anchors.json": Schema(("reference", "anchors"), _BY_HAND),
    "chip_curves.json": Schema(("chips", "clock_fraction"), "written by scripts/build_targets.py"),
    "cost_model.json": Schema(
        (
            "floor_us",
            "cut_us",
            "bw_bytes_per_us",
            "flops_per_us",
            "act_bw_bytes_per_us",
            "layer_us",
            "bridge_ops",
        ),
        "written by scripts/fit_cost_model.py",
    ),
    "families.json": Schema(("fields", "families"), _BY_HAND),
    "special_coefficients.json": Schema(
        ("method", "walls", "fits"), "written by scripts/fit_special.py", source_key="source"
    ),
}

#: Every bundled CSV table (one row a measurement or a chip, each with its source).
TABLES = (
    "chip_memory.csv",
    "silicon_calibration.csv",
    "silicon_models.csv",
    "silicon_published.csv",
)


def _broken(name: str, what: str, origin: str) -> BundledDataError:
    return BundledDataError(
        f"aneforge's bundled data file {name} {what}: the installation is broken; "
        f"reinstall aneforge (the file is {origin})"
    )


def _freeze(value):
    """``value`` with every dict a read-only mapping and every list a tuple."""
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _read(name: str, origin: str) -> str:
    try:
        return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _broken(name, f"cannot be read ({err})", origin) from None


def parse(name: str, text: str):
    """The checked, read-only contents of ``text`` as bundled file ``name`` (what
    :func:`load` does once the file is read; exposed so the checks can be exercised).

    Example:
        >>> from aneforge.errors import BundledDataError
        >>> try:
        ...     parse("anchors.json", '{"anchors": {}}')
        ... except BundledDataError as err:
        ...     print(str(err).split(":")[0])
        aneforge's bundled data file anchors.json has no '_source' record
    """
    schema = _schema(name)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise _broken(name, f"is not valid JSON ({err})", schema.origin) from None
    if not isinstance(data, dict):
        raise _broken(name, "does not hold a JSON object", schema.origin)
    if not data.get(schema.source_key):
        raise _broken(name, f"has no {schema.source_key!r} record", schema.origin)
    missing = [k for k in schema.keys if k not in data]
    if missing:
        raise _broken(name, f"lacks the key(s) {missing}", schema.origin)
    return _freeze(data)


def _schema(name: str) -> Schema:
    if name not in SCHEMAS:
        raise KeyError(f"{name!r} is not a bundled JSON file; they are {sorted(SCHEMAS)}")
    return SCHEMAS[name]


@cache
def load(name: str):
    """The contents of bundled JSON file ``name`` (a key of :data:`SCHEMAS`), read and
    checked once, as a read-only mapping.

    Example:
        >>> load("cost_model.json")["_source"]["fitted_by"]
        'scripts/fit_cost_model.py'
    """
    return parse(name, _read(name, _schema(name).origin))


@cache
def text(name: str) -> str:
    """The text of bundled CSV table ``name`` (one of :data:`TABLES`), read once.

    Example:
        >>> text("chip_memory.csv").splitlines()[0].split(",")[:2]
        ['chip', 'memory_bandwidth_gb_s']
    """
    if name not in TABLES:
        raise KeyError(f"{name!r} is not a bundled table; they are {list(TABLES)}")
    return _read(name, "kept by hand, each row citing its source")
