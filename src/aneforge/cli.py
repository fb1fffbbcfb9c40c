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
import contextlib
import json
import math
import sys
import warnings

from . import __version__
from .errors import AneforgeError, DispatchFloorWarning, OptionError


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
        "report its error against the float64 reference. MODEL is an .onnx file or a "
        "bundled example name (cnn, transformer); without MODEL every bundled example "
        "is checked.",
    )
    check.add_argument(
        "model", nargs="?", help="an .onnx file or a bundled example name (default: all)"
    )
    check.add_argument("--export", metavar="PATH", help="also write a Core ML .mlpackage")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--seed", type=int, default=0, help="seed of inputs and weights")
    check.add_argument(
        "--target",
        default="",
        help="comma-separated targets to estimate for, e.g. M1,M4,M5 or h13,h17s",
    )
    export = sub.add_parser(
        "export",
        help="write a model as a Core ML .mlpackage (fp16 ML Program)",
        description="Compile MODEL (an .onnx file or a bundled example) and write it as "
        "an fp16 Core ML ML Program package.",
    )
    export.add_argument("model", help="an .onnx file or a bundled example name")
    export.add_argument("-o", "--output", required=True, help="the .mlpackage to write")
    export.add_argument("--target", default="", help="target chip (sets the OS floor)")
    return parser


def load_models(spec: str | None) -> list[tuple[str, list, list]]:
    """(name, inputs, outputs) of the bundled examples, one of them, or an ONNX file."""
    from pathlib import Path

    from .graph.nn import EXAMPLES

    if spec is None:
        names = list(EXAMPLES)
    elif spec in EXAMPLES:
        names = [spec]
    elif spec.endswith(".onnx"):
        path = Path(spec)
        if not path.is_file():
            raise OptionError(f"model '{spec}': no such file")
        try:
            from .io.onnx_import import from_onnx
        except ImportError as err:
            raise OptionError(
                f"model '{spec}': ONNX import needs the onnx package ({err}); "
                "install it with: pip install 'aneforge[onnx]'"
            ) from None
        graph = from_onnx(path)
        return [(path.name, list(graph.inputs), list(graph.outputs))]
    else:
        raise OptionError(
            f"unknown model '{spec}': give an .onnx file or a bundled example "
            f"({', '.join(EXAMPLES)})"
        )
    models = []
    for name in names:
        x, y = EXAMPLES[name]()
        models.append((name, [x], [y]))
    return models


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
        if any(not math.isfinite(out["rel_l2"]) for out in rep["outputs"]):
            console.print(
                "[yellow]some emulated outputs are inf or nan: values left the fp16 range "
                "(|x| > 65504) somewhere in the graph; see af.precision_risk and rescale the "
                "weights or inputs[/]"
            )
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
    for col in ("target", "arch", "family", "latency", "model error", "bound", "dominant nodes"):
        table.add_column(col, justify="left" if col == "dominant nodes" else "right")
    for t in rep["targets"]:
        nodes = ", ".join(
            f"{n['op']} {'x'.join(map(str, n['shape']))}" for n in t["dominant_nodes"]
        )
        error = "no data" if t["model_error"] is None else f"~{t['model_error']:.2f}x"
        table.add_row(
            t["target"], t["arch"], f"F{t['family']}", f"{t['estimate_us']:.0f} us", error,
            t["bound"], nodes,
        )  # fmt: skip
    return table


@contextlib.contextmanager
def _progress(enabled: bool):
    """A progress display on stderr for long checks; yields ``advance(label)``."""
    if not enabled or not sys.stderr.isatty():
        yield lambda label: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("loading", total=None)
        yield lambda label: bar.update(task, description=label)


def _targets(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _check(args) -> int:
    from .report import check_report

    targets = _targets(args.target)
    reports = []
    with _progress(enabled=not args.json) as advance:
        for name, inputs, outputs in load_models(args.model):
            rep = check_report(
                name, inputs, outputs, seed=args.seed, targets=targets,
                progress=lambda stage, name=name: advance(f"{name}: {stage}"),
            )  # fmt: skip
            if args.export:
                advance(f"{name}: export")
                rep["export"] = _export(outputs, args.export, targets[0] if targets else None)
            reports.append(rep)
    if args.json:
        print(json.dumps({"aneforge": __version__, "reports": reports}, indent=2))
    else:
        _print_tables(reports)
    return 0


def _export(outputs, path, target) -> dict:
    from .compiler import compile as compile_graph
    from .io.coreml_export import export_coreml

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        prog = compile_graph(list(outputs))
    written, lowering = export_coreml(prog, path, target=target, return_lowering=True)
    return {"path": str(written), "lowering": _plain(lowering)}


def _plain(value):
    """A JSON-ready copy of an export's lowering record."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _export_command(args) -> int:
    models = load_models(args.model)
    if len(models) != 1:
        raise OptionError("export: name one model (an .onnx file or a bundled example)")
    name, _, outputs = models[0]
    record = _export(outputs, args.output, args.target or None)
    print(f"wrote {record['path']} ({name})")
    return 0


def main(argv=None) -> int:
    """Entry point of the ``aneforge`` command; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return _export_command(args) if args.command == "export" else _check(args)
    except AneforgeError as err:
        print(f"aneforge: error: {err}", file=sys.stderr)
        return 2


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
