"""The ``aneforge`` command.

``aneforge check [MODEL]`` compiles a model, runs it on the fp16 emulator with seeded
inputs, runs the float64 reference and reports the error per output. With no MODEL it
checks the bundled examples (a small CNN and a small transformer block).

Exit codes: 0 ok, 2 user error (message, no traceback), 1 internal error.

Example:
    >>> from aneforge.cli import main
    >>> main(["check", "cnn", "--json"])  # doctest: +ELLIPSIS
    {...
    0
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .errors import AneforgeError, OptionError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aneforge",
        description="Compile, estimate and emulate fp16 graphs for the Apple Neural Engine.",
    )
    parser.add_argument("--version", action="version", version=f"aneforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser(
        "check",
        help="compile a model, emulate it in fp16 and compare with float64",
        description="Compile MODEL, run it on the fp16 emulator with seeded inputs and "
        "report its error against the float64 reference. MODEL is a bundled example "
        "name (cnn, transformer); without MODEL every bundled example is checked.",
    )
    check.add_argument("model", nargs="?", help="bundled example name (default: all)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--seed", type=int, default=0, help="seed of inputs and weights")
    check.add_argument(
        "--target",
        default="",
        help="comma-separated targets to estimate for, e.g. M1,M4,M5 or h13,h17s",
    )
    return parser


def _resolve_models(name: str | None):
    from .graph.nn import EXAMPLES

    if name is None:
        return list(EXAMPLES.items())
    if name in EXAMPLES:
        return [(name, EXAMPLES[name])]
    if name.endswith(".onnx"):
        raise OptionError(
            f"check: '{name}' is an ONNX file; ONNX import arrives with issue 5. "
            f"Bundled examples: {', '.join(EXAMPLES)}"
        )
    raise OptionError(f"check: unknown model '{name}'; bundled examples: {', '.join(EXAMPLES)}")


def check_model(name: str, builder, seed: int = 0, targets=()) -> dict:
    """Build one bundled model and return its check report (see ``aneforge.report``)."""
    from .report import check_report

    x, y = builder(seed=seed)
    return check_report(name, [x], [y], seed=seed, targets=targets)


def _print_tables(reports: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for rep in reports:
        secs = rep["seconds"]
        table = Table(
            title=f"{rep['model']}: {rep['ops']} ops, {rep['flops'] / 1e6:.1f} MFLOP, "
            f"{rep['regions']} region(s), {rep['cuts']} cut(s)",
            caption=f"estimated latency {rep['estimate_us']:.0f} us ({rep['bound']}-bound, "
            f"default cost model)\ncompile {secs['compile'] * 1e3:.0f} ms, emulate "
            f"{secs['emulate'] * 1e3:.0f} ms, float64 reference "
            f"{secs['reference'] * 1e3:.0f} ms",
        )
        for col in ("output", "shape", "max abs error", "relative L2", "cosine"):
            table.add_column(col, justify="right")
        for out in rep["outputs"]:
            table.add_row(
                str(out["index"]),
                "x".join(map(str, out["shape"])),
                f"{out['max_abs']:.3g}",
                f"{out['rel_l2']:.3g}",
                f"{out['cosine']:.6f}",
            )
        console.print(table)
        if rep["targets"]:
            console.print(_targets_table(rep))
            for t in rep["targets"]:
                for finding in t["preflight"]:
                    console.print(f"[yellow]preflight {t['target']} ({t['arch']})[/]: {finding}")
            div = rep["divergence"]
            if div["worst"] != "none":
                console.print(
                    f"[yellow]cross-chip fp16 divergence across {', '.join(div['targets'])}: "
                    f"{div['worst']}[/]"
                )
                for line in div["nodes"][:8]:
                    console.print(f"  {line}")


def _targets_table(rep: dict):
    from rich.table import Table

    table = Table(title=f"{rep['model']}: estimated latency per target (analytic model)")
    for col in ("target", "arch", "family", "latency", "bound", "dominant nodes"):
        table.add_column(col, justify="left" if col == "dominant nodes" else "right")
    for t in rep["targets"]:
        nodes = ", ".join(
            f"{n['op']} {'x'.join(map(str, n['shape']))}" for n in t["dominant_nodes"]
        )
        table.add_row(
            t["target"], t["arch"], f"F{t['family']}", f"{t['estimate_us']:.0f} us",
            t["bound"], nodes,
        )  # fmt: skip
    return table


def _check(args) -> int:
    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    reports = [
        check_model(name, build, args.seed, targets) for name, build in _resolve_models(args.model)
    ]
    if args.json:
        print(json.dumps({"aneforge": __version__, "reports": reports}, indent=2))
    else:
        _print_tables(reports)
    return 0


def main(argv=None) -> int:
    """Entry point of the ``aneforge`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _check(args)
    except AneforgeError as err:
        print(f"aneforge: error: {err}", file=sys.stderr)
        return 2


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
