"""The complete Core ML lowering table: the fused ops' lowerings (:mod:`.coreml_ops`)
and the bridge ops' (:mod:`.coreml_bridge_ops`), loaded together, with its coverage
report and the generated table of docs/export.md.

Run ``python -m aneforge.io.coreml_table docs/export.md`` to refresh that table (a test
checks that it is current).

Example:
    >>> from aneforge.io.coreml_table import LOWERINGS
    >>> LOWERINGS["topk"].status
    'lowered'
"""

from __future__ import annotations

import sys

from ..graph.registry import all_ops
from . import coreml_bridge_ops  # noqa: F401  (adds the bridge ops' lowerings to LOWERINGS)
from .coreml_ops import LOWERED, LOWERINGS, STATUSES

__all__ = ["LOWERINGS", "coverage", "refresh_doc", "render_lowering_table"]


def coverage() -> dict[str, list[str]]:
    """Fused and bridge op names by status (and ``"missing"``), in registry order."""
    out: dict[str, list[str]] = {s: [] for s in (*STATUSES, "missing")}
    for name, op in all_ops().items():
        if op.kind != "source":
            entry = LOWERINGS.get(name)
            out[entry.status if entry else "missing"].append(name)
    return out


def render_lowering_table() -> str:
    """The lowering table as Markdown, one row per fused and bridge op."""
    rows = [
        "| op | kind | status | Core ML MIL ops | min. iOS | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("fused", "bridge"):
        for name, op in all_ops().items():
            if op.kind != kind:
                continue
            e = LOWERINGS.get(name)
            if e is None:
                rows.append(f"| {name} | {kind} | MISSING | | | |")
                continue
            ios = str(e.min_ios) if e.status == LOWERED else ""
            rows.append(f"| {name} | {kind} | {e.status} | {e.mil} | {ios} | {e.note} |")
    return "\n".join(rows) + "\n"


BEGIN, END = "<!-- lowering-table:begin -->", "<!-- lowering-table:end -->"


def refresh_doc(path: str) -> bool:
    """Rewrite the generated table between the markers of ``path``; True if it changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{render_lowering_table()}{END}{tail}"
    if new != text:
        with open(path, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


if __name__ == "__main__":  # pragma: no cover  (python -m aneforge.io.coreml_table DOC)
    if len(sys.argv) > 1:
        print("updated" if refresh_doc(sys.argv[1]) else "up to date")
    else:
        print(render_lowering_table())
