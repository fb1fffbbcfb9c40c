"""The bundled data files and their one loader (aneforge.data)."""

from __future__ import annotations

from importlib import resources
from types import MappingProxyType

import pytest

from aneforge import data
from aneforge.errors import BundledDataError


def _bundled(suffix: str) -> set[str]:
    return {p.name for p in resources.files("aneforge.data").iterdir() if p.name.endswith(suffix)}


def test_every_bundled_file_has_one_entry():
    assert _bundled(".json") == set(data.SCHEMAS)
    assert _bundled(".csv") == set(data.TABLES)


@pytest.mark.parametrize("name", sorted(data.SCHEMAS))
def test_every_json_file_loads_once_read_only_with_its_source(name):
    loaded = data.load(name)
    assert loaded is data.load(name)
    assert loaded[data.SCHEMAS[name].source_key]
    assert set(data.SCHEMAS[name].keys) <= set(loaded)
    assert isinstance(loaded, MappingProxyType)
    with pytest.raises(TypeError):
        loaded["_extra"] = 1


def test_nested_values_are_read_only_too():
    frozen = data.parse("anchors.json", '{"_source": {"a": 1}, "reference": {}, "anchors": {}}')
    assert isinstance(frozen["_source"], MappingProxyType)
    frozen = data.parse(
        "families.json", '{"_source": "hand", "fields": {}, "families": [{"members": ["h1"]}]}'
    )
    assert frozen["families"] == ({"members": ("h1",)},)


@pytest.mark.parametrize("name", data.TABLES)
def test_every_table_reads_once_with_a_source_column(name):
    text = data.text(name)
    assert text is data.text(name)
    assert "source" in text.splitlines()[0].split(",")


def test_an_unknown_name_is_refused():
    with pytest.raises(KeyError, match="not a bundled JSON file"):
        data.load("nothing.json")
    with pytest.raises(KeyError, match="not a bundled table"):
        data.text("nothing.csv")


@pytest.mark.parametrize(
    ("text", "why"),
    [("[1, 2]", "does not hold a JSON object"), ('{"_source": {}}', "no '_source' record")],
)
def test_a_malformed_file_is_an_install_error(text, why):
    with pytest.raises(BundledDataError, match=why) as info:
        data.parse("chip_curves.json", text)
    assert "reinstall aneforge" in str(info.value)
    assert "scripts/build_targets.py" in str(info.value)
