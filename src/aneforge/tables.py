"""Tables of plain records: a report object that lists its rows renders everywhere.

An object that provides ``to_records() -> list[dict]`` (one dict per row; keys are the
column headers, values plain Python: str, int, float, bool, None, or lists of them) and,
optionally, a ``title`` attribute or property, inherits from :class:`TableMixin`:

- ``_repr_html_()``: an HTML ``<table>`` (Jupyter and other notebooks call it), every
  header and cell HTML-escaped, numbers right-aligned and formatted by
  :func:`format_cell`;
- ``__rich__()``: a ``rich.table.Table`` (``rich.print(obj)`` and a rich console call
  it), the same cells;
- ``to_records()`` itself is the plain-data form (``json.dumps`` it through
  :func:`json_safe`, which turns non-finite floats into ``null`` plus a flag).

Columns are the union of the records' keys in first-seen order; a row without a key
shows an empty cell. This module imports nothing from aneforge, so every layer may use
it; ``rich`` is imported only when ``__rich__`` is called.

Example:
    >>> class Sizes(TableMixin):
    ...     title = "sizes"
    ...     def to_records(self):
    ...         return [{"name": "<b>", "bytes": 2048, "ratio": 0.123456}]
    >>> html = Sizes()._repr_html_()
    >>> "&lt;b&gt;" in html, "<b>" in html, "0.1235" in html
    (True, False, True)
    >>> Sizes().__rich__().row_count
    1
    >>> json_safe({"rel_l2": float("inf"), "shape": [2, 3]})
    {'rel_l2': None, 'rel_l2_nonfinite': 'inf', 'shape': [2, 3]}
"""

from __future__ import annotations

import html
import math
import numbers

#: Suffix of the flag :func:`json_safe` puts beside a non-finite number's ``null``.
NONFINITE_SUFFIX = "_nonfinite"


def format_cell(value) -> str:
    """The text of one cell: ``''`` for None, ints as digits, floats to 4 significant
    digits ('inf', '-inf', 'nan' when not finite; a value near but not +-1 gets the
    digits it needs not to read as 1), lists joined by ', ', else ``str``.

    Example:
        >>> [format_cell(v) for v in (None, 3, 0.000123456, float("nan"), [1, 2.5], "a")]
        ['', '3', '0.0001235', 'nan', '1, 2.5', 'a']
        >>> format_cell(0.9999936), format_cell(1.0)
        ('0.99999', '1')
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            return repr(v)
        digits, text = 4, f"{v:.4g}"
        while text in ("1", "-1") and abs(v) != 1.0 and digits < 17:  # a cosine of 0.99999
            digits += 1
            text = f"{v:.{digits}g}"
        return text
    if isinstance(value, (list, tuple)):
        return ", ".join(format_cell(v) for v in value)
    return str(value)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def columns(records: list[dict]) -> list[str]:
    """The union of the records' keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in records:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def html_table(records: list[dict], title: str | None = None) -> str:
    """``records`` as an HTML table (headers and cells escaped; numbers right-aligned)."""
    cols = columns(records)
    parts = ["<table>"]
    if title:
        parts.append(f"<caption>{html.escape(str(title))}</caption>")
    parts.append("<thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
    parts.append("</thead><tbody>")
    for row in records:
        cells = []
        for c in cols:
            value = row.get(c)
            align = ' style="text-align: right"' if _is_number(value) else ""
            cells.append(f"<td{align}>{html.escape(format_cell(value))}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table>")
    return "".join(parts)


def rich_table(records: list[dict], title: str | None = None):
    """``records`` as a ``rich.table.Table`` (numeric columns right-aligned)."""
    from rich.markup import escape
    from rich.table import Table

    cols = columns(records)
    table = Table(title=escape(str(title)) if title else None)
    for c in cols:
        numeric = any(_is_number(row.get(c)) for row in records)
        table.add_column(escape(c), justify="right" if numeric else "left")
    for row in records:
        table.add_row(*(escape(format_cell(row.get(c))) for c in cols))
    return table


def json_safe(value):
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts.

    Dicts, lists and tuples are copied recursively; numpy scalars become Python
    numbers (anything else unknown becomes its ``str``). A non-finite float under key
    ``k`` becomes ``k: None`` plus ``k + '_nonfinite'``: ``'inf'``, ``'-inf'`` or
    ``'nan'``; a non-finite float inside a list becomes ``None``.
    """
    if hasattr(value, "tolist") and not isinstance(value, (dict, list, tuple, str)):
        value = value.tolist()  # numpy scalars and arrays
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            key = str(key)
            if _is_number(item) and not math.isfinite(float(item)):
                out[key] = None
                out[key + NONFINITE_SUFFIX] = repr(float(item))
            else:
                out[key] = json_safe(item)
        return out
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        return v if math.isfinite(v) else None
    return str(value)


class TableMixin:
    """Give a class with ``to_records()`` (and optionally ``title``) a notebook table
    (``_repr_html_``) and a terminal table (``__rich__``); see the module docstring."""

    def to_records(self) -> list[dict]:
        """The rows, as plain Python values (each subclass provides its own)."""
        raise NotImplementedError(f"{type(self).__name__} must define to_records()")

    def _repr_html_(self) -> str:
        return html_table(self.to_records(), getattr(self, "title", None))

    def __rich__(self):
        return rich_table(self.to_records(), getattr(self, "title", None))
