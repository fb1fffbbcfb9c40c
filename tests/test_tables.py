"""Tables of plain records: HTML and rich rendering, cell formatting, strict JSON."""

import json
import math

import numpy as np
import pytest

from aneforge.tables import (
    TableMixin,
    columns,
    format_cell,
    html_table,
    json_safe,
    rich_table,
)


class Rows(TableMixin):
    def __init__(self, records, title=None):
        self.records, self.title = records, title

    def to_records(self):
        return self.records


def reject(name):
    raise AssertionError(f"bare {name} in JSON")


def test_html_escapes_every_cell_header_and_the_title():
    html = Rows([{"a<b": "x < y & z", "n": 3}], title="<t>")._repr_html_()
    assert "<caption>&lt;t&gt;</caption>" in html
    assert "<th>a&lt;b</th>" in html
    assert "<td>x &lt; y &amp; z</td>" in html
    assert '<td style="text-align: right">3</td>' in html
    assert "x < y" not in html


def test_columns_are_the_union_in_first_seen_order_and_gaps_are_blank():
    records = [{"a": 1}, {"b": 2.5, "a": None}]
    assert columns(records) == ["a", "b"]
    html = html_table(records)
    assert html.count("<tr>") == 3 and "<td></td>" in html


def test_rich_table_has_the_rows_and_escapes_markup():
    from rich.console import Console

    table = Rows([{"name": "[red]x[/]", "v": 1.5}, {"name": "y"}], title="t").__rich__()
    assert table.row_count == 2 and [c.header for c in table.columns] == ["name", "v"]
    console = Console(width=80, record=True)
    console.print(table)
    assert "[red]x[/]" in console.export_text()
    assert rich_table([]).row_count == 0


def test_a_class_without_records_says_so():
    with pytest.raises(NotImplementedError, match="to_records"):
        TableMixin()._repr_html_()


@pytest.mark.parametrize(
    "value, text",
    [
        (None, ""),
        (True, "True"),
        (np.int64(7), "7"),
        (1234567.0, "1.235e+06"),
        (0.0011194, "0.001119"),
        (np.float32(np.inf), "inf"),
        (-math.inf, "-inf"),
        (0.99999999, "0.99999999"),
        (-0.9999999, "-0.9999999"),
        (1.0, "1"),
        ((2, 3), "2, 3"),
    ],
)
def test_format_cell(value, text):
    assert format_cell(value) == text


def test_json_safe_flags_non_finite_numbers_and_parses_strictly():
    doc = json_safe(
        {
            "rel_l2": math.inf,
            "cosine": np.float64("nan"),
            "neg": -math.inf,
            "ok": np.float32(0.5),
            "n": np.int32(3),
            "flag": np.bool_(True),
            "nested": [{"x": math.nan}, (1, math.inf)],
            "arr": np.array([1.0, 2.0]),
        }
    )
    text = json.dumps(doc, allow_nan=False)
    back = json.loads(text, parse_constant=reject)
    assert back["rel_l2"] is None and back["rel_l2_nonfinite"] == "inf"
    assert back["cosine_nonfinite"] == "nan" and back["neg_nonfinite"] == "-inf"
    assert back["ok"] == 0.5 and back["n"] == 3 and back["flag"] is True
    assert back["nested"] == [{"x": None, "x_nonfinite": "nan"}, [1, None]]
    assert back["arr"] == [1.0, 2.0]
