"""The ``aneforge`` command.

``aneforge check [MODEL]`` compiles a model, runs it on the fp16 emulator with seeded
inputs (or ``--input NAME=FILE.npy``'s arrays; ``--shape NAME=1x3x224x224`` fixes an
ONNX input's dynamic dims), runs the float64 reference and reports the error per output
and the estimated latency; ``--target A,B`` does the same for each chip, with its
numerics. With no MODEL it checks the bundled examples (a small CNN and a small
transformer block). ``--layers N`` lists each target's N slowest layers and ``--plot
PATH`` draws their roofline (:mod:`aneforge.plot`). docs/cli.md describes the options,
the output and every JSON field.

Exit codes: 0 ok; 1 a check failed (an output is inf/nan, or beyond ``--max-error``) or
an internal error (with a traceback); 2 a user error (one line, no traceback: a bad
option, a missing or unreadable model, a path it will not write); 141 stdout was closed
by its reader (``| head``), quietly. Every option is checked before any work. While a
command runs, warnings print as one line each: ``warning: <Category>: <message>``.

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
import os
import sys
import tempfile
import warnings
from pathlib import Path

from ._version import __version__
from .cli_models import input_files, load_models, match_inputs, shapes_option
from .driver import compile as compile_graph
from .errors import AneforgeError, DispatchFloorWarning, OptionError
from .graph.ranges import check_range
from .io.coreml_export import export_coreml
from .io.coreml_package import check_package_path
from .kernel.calibration import append_rows, read_log
from .kernel.envelope import check_margin, check_output_path, fit_envelope, save_envelopes
from .kernel.stream import bandwidth_rows
from .plot import check_plot_path, plot_reports
from .report import (
    DEFAULT_CHIP,
    SCHEMA_VERSION,
    CheckReport,
    check_failures,
    check_report,
    short_label,
)
from .tables import columns, format_cell, json_safe, rich_table
from .targets.names import resolve_target

#: How many of the slowest layers ``--plot`` shows without ``--layers``.
PLOT_TOP = 20
#: The exit code when stdout's reader went away (128 + SIGPIPE, as a shell reports it).
EXIT_BROKEN_PIPE = 141
#: Seeds are integers in [0, SEED_LIMIT).
SEED_LIMIT = 2**64


class UsageError(OptionError):
    """A command line argparse refused (unknown command or option, missing value)."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors raised as :class:`UsageError` (one line, exit 2)
    instead of a usage block and ``sys.exit``."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _seed(text: str) -> int:
    """``--seed``: a whole number in [0, 2**64), written in decimal digits."""
    value = int(text) if text.isascii() and text.isdigit() and len(text) <= 20 else -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from 0 to 2**64 - 1 (e.g. 0), got {text!r}"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="aneforge",
        description="Compile, estimate and emulate fp16 graphs for the Apple Neural Engine.",
    )
    parser.add_argument("--version", action="version", version=f"aneforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = sub.add_parser(
        "check",
        help="compile a model, emulate it in fp16 and compare with float64",
        description="Compile MODEL, run it on the fp16 emulator with seeded inputs and "
        "report its error against the float64 reference, and its estimated latency. "
        "MODEL is an .onnx file, a torch.export .pt2 file or a bundled example name "
        "(cnn, transformer); without MODEL every bundled example is checked. Exit "
        "status: 0 ok, 1 an output is inf/nan or exceeds --max-error (or an internal "
        "error), 2 a user error.",
    )
    check.add_argument(
        "model", nargs="?", help="an .onnx or .pt2 file or a bundled example name (default: all)"
    )
    check.add_argument(
        "--export",
        metavar="PATH",
        help="also write a Core ML .mlpackage (one model); an existing PATH is replaced "
        "only if it is a package aneforge wrote, unless --force",
    )
    check.add_argument("--force", action="store_true", help=FORCE_HELP)
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--seed", type=_seed, default=0, help="seed of inputs and weights, 0 to 2**64 - 1"
    )
    check.add_argument(
        "--target",
        help="comma-separated targets to compile, emulate and estimate for, e.g. M1,M4,M5 "
        "or h13,h17s (each with its chip's numerics)",
    )
    check.add_argument(
        "--layers",
        metavar="N",
        help="also list the N slowest layers per target (on the default chip without "
        "--target): name, op, shape, time, share, bound, FLOPs, bytes; --json always "
        "carries every layer",
    )
    check.add_argument(
        "--plot",
        metavar="PATH",
        help="write a roofline and the slowest layers per target to PATH (.png, .svg, "
        ".pdf, ...; the N of --layers, else 20); needs matplotlib: "
        "pip install 'aneforge[plot]'",
    )
    check.add_argument(
        "--max-error",
        metavar="E",
        help="fail (exit 1) when an output's relative L2 error exceeds E, in the generic "
        "run or any target's run",
    )
    check.add_argument(
        "--input-range",
        metavar="[NAME=]LO:HI",
        action="append",
        default=[],
        help="the values an input will be fed, e.g. x=-3:3 (repeatable); LO:HI alone "
        "(written --input-range=-3:3 when LO is negative) "
        "sets every input. Inputs are then drawn inside it, and the static range "
        "analysis prints where the model can overflow or underflow fp16, per target",
    )
    check.add_argument("--shape", **SHAPE_OPTION)
    check.add_argument("--input", metavar="NAME=FILE.npy", action="append", default=[],
                       help="feed input NAME the array in FILE.npy (repeatable; NumPy's .npy, "
                       "no pickles) instead of seeded random values; its shape must be the "
                       "input's")  # fmt: skip
    export = sub.add_parser(
        "export",
        help="write a model as a Core ML .mlpackage (fp16 ML Program)",
        description="Compile MODEL (an .onnx or .pt2 file or a bundled example) and write it as "
        "an fp16 Core ML ML Program package.",
    )
    export.add_argument("model", help="an .onnx or .pt2 file or a bundled example name")
    export.add_argument(
        "-o",
        "--output",
        required=True,
        help="the .mlpackage to write; an existing one is replaced only if aneforge wrote "
        "it, unless --force",
    )
    export.add_argument("--target", help="target chip (sets the OS floor)")
    export.add_argument("--shape", **SHAPE_OPTION)
    export.add_argument("--force", action="store_true", help=FORCE_HELP)
    fit = sub.add_parser(
        "fit-envelope",
        help="fit each backend's peak FLOP rate and bandwidth to a calibration log",
        description="Read the calibration log LOG (tab-separated rows, docs/kernel.md), "
        "fit per backend the peak FLOP rate and bandwidth the exact rows achieve (with the "
        "fission slack of multi-kernel rows) and write them where the kernel cost model "
        "reads them ($ANEFORGE_ENVELOPE_FILE, else ~/.config/aneforge/envelope.json).",
    )
    fit.add_argument("log", help="the calibration log (.tsv)")
    fit.add_argument("--backend", help="fit this backend only (default: every one)")
    fit.add_argument(
        "--margin", type=float, default=1.0, help="scale both peaks by M >= 1 (default 1)"
    )
    fit.add_argument("--output", metavar="PATH", help="write the envelope file here instead")
    probe = sub.add_parser(
        "calibrate-bandwidth",
        help="time STREAM-style bytes-exact kernels and append calibration rows to LOG",
        description="Time the copy, scale and add probes (exact byte counts, no guards) at "
        "power-of-two sizes 2**MIN..2**MAX and append one calibration row per probe and "
        "size to LOG (created if missing), for aneforge fit-envelope.",
    )
    probe.add_argument("log", help="the calibration log to append to (.tsv)")
    probe.add_argument("--min-exp", type=int, default=12, help="smallest size 2**N (default 12)")
    probe.add_argument("--max-exp", type=int, default=24, help="largest size 2**N (default 24)")
    probe.add_argument("--repeats", type=int, default=5, help="timings per probe, best kept")
    probe.add_argument("--backend", default="cpu", help="the rows' backend name (default cpu)")
    return parser


SHAPE_OPTION = {"metavar": "NAME=D1xD2x...", "action": "append", "default": [],
                "help": "fix the shape of an .onnx or .pt2 model's input NAME, e.g. "
                "x=1x3x224x224 (repeatable; needed for inputs with dynamic dims)"}  # fmt: skip
FORCE_HELP = (
    "replace whatever exists at the export path (a file, a folder and all it holds, a "
    "package another tool wrote); without it such a path is refused"
)


def check_model(name: str, builder, seed: int = 0, targets=()) -> dict:
    """Build one bundled model and return its check report (see ``aneforge.report``)."""
    x, y = builder(seed=seed)
    return check_report(name, [x], [y], seed=seed, targets=targets)


def _line(console, text: str) -> None:
    """One line that is never wrapped (tests and users grep these)."""
    console.print(text, soft_wrap=True, highlight=False, markup=False)


def _print_tables(reports: list[CheckReport], layers: int | None = None) -> None:
    from rich.console import Console

    console = Console()
    for rep in reports:
        _table(console, rep.to_records(), rep.title)
        est = rep["estimate"]
        if est["compiles"]:
            _line(
                console,
                f"estimated latency on {est['description']}: {est['estimate_us']:.0f} us "
                f"({est['bound']}-bound, analytic model)",
            )
        else:
            _line(console, f"estimated latency on {est['description']}: none, it does not "
                  "compile there: " + "; ".join(est["preflight"]))  # fmt: skip
        _line(
            console,
            f"pruning estimate (optimizer heuristic, not a latency): "
            f"{rep['pruning_estimate_us']:.0f} us",
        )
        secs = rep["seconds"]
        _line(
            console,
            f"compile {secs['compile'] * 1e3:.0f} ms, emulate {secs['emulate'] * 1e3:.0f} ms, "
            f"float64 reference {secs['reference'] * 1e3:.0f} ms"
            + (f", targets {secs['targets'] * 1e3:.0f} ms" if rep["targets"] else ""),
        )
        runs = [rep["outputs"]] + [t["outputs"] for t in rep["targets"]]
        if any(out["nonfinite_values"] for outs in runs for out in outs):
            _line(
                console,
                "some emulated outputs are inf or nan: values left the fp16 range "
                "(|x| > 65504) somewhere in the graph; see af.precision_risk and rescale "
                "the weights or inputs",
            )
        for line in rep.get("partition") or ():
            _line(console, f"import: {line}")
        wheres = [("generic", rep.get("where"))]
        wheres += [(short_label(t), t.get("where")) for t in rep["targets"]]
        for run, where in wheres:
            if where and where["line"]:
                _line(console, f"{run}: {where['line']} (prog.trace shows every node)")
        _print_hazards(console, rep)
        if rep["targets"]:
            _print_targets(console, rep)
        if layers:
            _print_layers(console, rep, layers)


#: How many range hazards per run the text report lists (--json carries all).
HAZARDS_SHOWN = 8


def _print_hazards(console, rep: CheckReport) -> None:
    """The static range analysis per run: the declared ranges and the hazards."""
    runs = [("generic", rep["ranges"])]
    runs += [(short_label(t), t["ranges"]) for t in rep["targets"] if t.get("ranges")]
    declared = rep["ranges"]["inputs"]
    if all(r is None for r in declared.values()):
        return
    shown = ", ".join(f"{n} in [{r[0]:g}, {r[1]:g}]" if r else f"{n} unknown"
                      for n, r in declared.items())  # fmt: skip
    for run, found in runs:
        hazards = found["hazards"]
        if not hazards:
            _line(console, f"range analysis ({run}, {shown}): no overflow or underflow")
            continue
        share = found["flagged_share"]
        _line(console, f"range analysis ({run}, {shown}): {len(hazards)} hazard(s), "
              f"at {share:.0%} of the nodes")  # fmt: skip
        for h in hazards[:HAZARDS_SHOWN]:
            _line(console, f"  {_hazard_line(h)}")
        if len(hazards) > HAZARDS_SHOWN:
            _line(console, f"  ... and {len(hazards) - HAZARDS_SHOWN} more (--json lists all)")
        k = found["input_scale"]
        if k:
            _line(console, f"  scaling the inputs by 2**-{k} removes every overflow")


def _hazard_line(h: dict) -> str:
    step = f" step {h['step']}" if h["step"] else ""
    bound = f"{h['bound']:.4g}" if math.isfinite(h["bound"]) else "inf"
    return (f"%{h['index']} '{h['name']}' ({h['op']}){step}: {h['certainty']} "
            f"{h['kind']} (bound {bound}, limit {h['limit']:g}); fix: {h['fix']}")  # fmt: skip


def _table(console, rows: list[dict], title: str) -> None:
    """``rows`` under ``title``: a rich table on a terminal, else plain aligned lines
    (piped output is not squeezed to 80 columns). The title is one line either way (a
    rich title would wrap to the table's width)."""
    if not rows or console.is_terminal:
        _line(console, title)
        if rows:
            console.print(rich_table(rows))
        return
    for text in plain_lines(rows, title):
        _line(console, text)


def _print_layers(console, rep: CheckReport, n: int) -> None:
    """The ``n`` slowest layers per target."""
    for title, rows in rep.layer_tables(n):
        _table(console, rows, title)


def plain_lines(records: list[dict], title: str) -> list[str]:
    """``records`` as a title and aligned columns of plain text (numbers right-aligned).

    Example:
        >>> for ln in plain_lines([{"layer": "conv_0", "time us": 1.5}], "t"): print(ln)
        t
          layer   time us
          conv_0      1.5
    """
    cols = columns(records)
    cells = [[format_cell(row.get(c)) for c in cols] for row in records]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(cols)]
    right = [any(isinstance(row.get(c), (int, float)) for row in records) for c in cols]

    def line(values) -> str:
        parts = [v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)]
        return ("  " + "  ".join(parts)).rstrip()

    return [title, line(cols), *(line(r) for r in cells)]


def _print_targets(console, rep: CheckReport) -> None:
    title = f"{rep['model']}: estimated latency per target (analytic model)"
    _table(console, rep.target_records(), title)
    for t in rep["targets"]:
        _line(console, f"  {t['description']}")
    for t in rep["targets"]:
        for finding in t["preflight"]:
            _line(console, f"preflight {t['description']}: {finding}")
    div = rep["divergence"]
    if div["worst"] != "none":
        _line(
            console,
            f"predicted cross-chip fp16 divergence across {', '.join(div['targets'])}: "
            f"{div['worst']}",
        )
        for line in div["nodes"][:8]:
            _line(console, f"  {line}")
    measured = div["measured"]
    if measured is not None:
        state = (
            "bit-identical"
            if measured["identical"]
            else f"differ by up to {measured['max_abs']:.3g} (max abs)"
        )
        _line(console, f"measured: the outputs on {', '.join(measured['targets'])} {state}")


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


def targets_option(text: str | None, option: str = "--target", many: bool = True) -> list[str]:
    """``--target`` as a list of target names, each checked (OptionError naming the
    first bad one); None (not given) is no target.

    Example:
        >>> targets_option("M1, h17s")
        ['M1', 'h17s']
    """
    if text is None:
        return []
    names = [t.strip() for t in text.split(",")]
    if not any(names):
        several = " (comma-separated: M1,M4)" if many else ""
        raise OptionError(f"{option} {text!r} names no target; give a chip or architecture, "
                          f"e.g. M1 or h13{several}")  # fmt: skip
    if not many and len(names) > 1:
        raise OptionError(f"{option} {text!r}: export takes one target, e.g. M1")
    if "" in names:
        raise OptionError(f"{option} {text!r}: target {names.index('') + 1} is empty (two "
                          "commas in a row, or one at an end); remove it")  # fmt: skip
    for name in names:
        resolve_target(name)
    return names


def _max_error(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise OptionError(
            f"--max-error must be a positive finite number (a relative L2 error bound, "
            f"e.g. 0.01), got {text!r}"
        )
    return value


def _layers(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(
            f"--layers must be a whole number >= 1 (how many of the slowest layers to list "
            f"per target, e.g. 10), got {text!r}"
        )
    return value


def input_ranges(items: list[str]) -> dict:
    """``--input-range`` values as ``{name or None: (lo, hi)}`` (None: every input).

    Example:
        >>> input_ranges(["x=-3:3", "0:1"])
        {'x': (-3.0, 3.0), None: (0.0, 1.0)}
    """
    out: dict = {}
    for item in items:
        name, sep, text = item.rpartition("=")
        lo, colon, hi = text.partition(":")
        try:
            pair = (float(lo), float(hi)) if colon else None
        except ValueError:
            pair = None
        if pair is None or (sep and not name):
            raise OptionError(
                f"--input-range {item!r}: give NAME=LO:HI (e.g. x=-3:3) or LO:HI for every input"
            )
        out[name if sep else None] = check_range(pair, f"--input-range {item!r}", OptionError)
    return out


def _plot_path(text: str) -> Path:
    """``--plot``: a writable file path with an image suffix (checked before any work)."""
    if not text.strip():
        raise OptionError(f"--plot {text!r} is empty; give the image file to write, e.g. "
                          "roofline.png")  # fmt: skip
    path = check_plot_path(text)
    if path.is_dir():
        raise OptionError(f"--plot {text!r} is a folder; give the image file to write, "
                          "e.g. roofline.png")  # fmt: skip
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".aneforge-probe-", dir=path.parent))
    except OSError as err:
        raise OptionError(f"--plot {text!r}: cannot write into {str(path.parent)!r} "
                          f"({err.strerror}); choose a writable folder") from None  # fmt: skip
    return path


def _check(args) -> int:
    targets = targets_option(args.target)
    ranges = input_ranges(args.input_range)
    max_error = _max_error(args.max_error)
    layers = _layers(args.layers)
    plot = _plot_path(args.plot) if args.plot is not None else None
    export = None
    if args.export is not None:  # '' included: an empty path is an error, not "no export"
        export = check_package_path(args.export, args.force, "--export")
    shapes, given = shapes_option(args.shape), input_files(args.input)
    models = load_models(args.model, shapes)
    if export is not None and len(models) > 1:
        raise OptionError(f"--export writes one package: name one model to export "
                          f"({', '.join(m.name for m in models)} were asked for)")  # fmt: skip
    if given and len(models) > 1:
        raise OptionError("--input feeds one model's inputs: name the model")
    data = match_inputs(given, models[0].inputs) if given else None
    reports = []
    with _progress(enabled=not args.json) as advance:
        for name, inputs, outputs, out_names, partition in models:
            rep = check_report(
                name, inputs, outputs, seed=args.seed, targets=targets,
                progress=lambda stage, name=name: advance(f"{name}: {stage}"),
                output_names=out_names, input_ranges=ranges, input_data=data,
            )  # fmt: skip
            rep["partition"] = partition
            if export is not None:
                advance(f"{name}: export")
                target = targets[0] if targets else None
                rep["export"] = _export(outputs, export, target, out_names, args.force)
            reports.append(rep)
        if plot is not None:
            advance("plot")
            try:
                plot_reports(reports, plot, top=layers or PLOT_TOP)
            except OSError as err:
                raise OptionError(f"--plot {str(plot)!r}: cannot write it ({err})") from None
    failures = [f for rep in reports for f in check_failures(rep, max_error)]
    if args.json:
        doc = {
            "schema_version": SCHEMA_VERSION,
            "aneforge": __version__,
            "default_chip": DEFAULT_CHIP,
            "max_error": max_error,
            "ok": not failures,
            "failures": failures,
            "plot": None if plot is None else str(plot),
            "input_files": {name: path for name, (path, _) in given.items()},
            "reports": reports,
        }
        print(json.dumps(json_safe(doc), indent=2, allow_nan=False))
    else:
        for name, (path, array) in given.items():
            print(f"input {name}: {path} ({'x'.join(map(str, array.shape))} {array.dtype})")
        _print_tables(reports, layers)
        if plot is not None:
            print(f"wrote {plot}: per target a roofline and the {layers or PLOT_TOP} "
                  "slowest layers (analytic model)")  # fmt: skip
    if failures:
        print(f"aneforge: check failed: {'; '.join(failures)}", file=sys.stderr)
        return 1
    return 0


def _export(outputs, path, target, output_names=None, force=False) -> dict:

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DispatchFloorWarning)
        prog = compile_graph(list(outputs), output_names=output_names)
    written, lowering = export_coreml(prog, path, target=target, return_lowering=True, force=force)
    return {"path": str(written), "lowering": json_safe(lowering)}


def _export_command(args) -> int:
    target = (targets_option(args.target, many=False) or [None])[0]
    path = check_package_path(args.output, args.force, "-o")
    models = load_models(args.model, shapes_option(args.shape))
    if len(models) != 1:
        raise OptionError("export: name one model (an .onnx or .pt2 file or a bundled example)")
    name, _, outputs, out_names, _ = models[0]
    record = _export(outputs, path, target, out_names, args.force)
    print(f"wrote {record['path']} ({name})")
    return 0


def main(argv=None) -> int:
    """Entry point of the ``aneforge`` command; returns the exit code (``--help`` and
    ``--version`` exit through ``SystemExit(0)``, as argparse does).

    Every user mistake (argparse's included) prints one line, ``aneforge: error: ...``,
    on stderr and returns 2; a closed stdout returns :data:`EXIT_BROKEN_PIPE` quietly.
    """
    with warnings.catch_warnings():  # restores the caller's showwarning afterwards
        warnings.showwarning = _show_warning
        try:
            try:
                return _dispatch(argv)
            finally:  # --help's SystemExit included: a closed pipe shows here, not at exit
                if sys.stdout is not None:
                    sys.stdout.flush()
        except AneforgeError as err:
            print(f"aneforge: error: {_one_line(err)}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            _drop_stdout()
            return EXIT_BROKEN_PIPE


def _dispatch(argv) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    commands = {
        "export": _export_command,
        "fit-envelope": _fit_envelope,
        "calibrate-bandwidth": _calibrate_bandwidth,
        "check": _check,
    }
    return commands[args.command](args)


def _calibrate_bandwidth(args) -> int:
    """``aneforge calibrate-bandwidth``: time the probes, append their rows, say where."""
    check_output_path(args.log, "calibrate-bandwidth: LOG")
    if not (0 <= args.min_exp <= args.max_exp <= 26):
        raise OptionError(
            f"calibrate-bandwidth: sizes 2**{args.min_exp}..2**{args.max_exp} must satisfy "
            "0 <= --min-exp <= --max-exp <= 26"
        )
    if not args.backend.strip() or any(c in args.backend for c in "\t\r\n"):
        raise OptionError(f"calibrate-bandwidth: --backend {args.backend!r} is not a name")
    sizes = [1 << k for k in range(args.min_exp, args.max_exp + 1)]
    rows = bandwidth_rows(sizes, args.repeats, args.backend, progress=print)
    count = append_rows(args.log, rows)
    print(f"appended {count} row(s) to {args.log}; fit them with: aneforge fit-envelope {args.log}")
    return 0


def _fit_envelope(args) -> int:
    """``aneforge fit-envelope``: fit, print the peaks with their witnesses, write."""
    check_margin(args.margin)  # every option is checked before any work
    if args.output is not None:
        check_output_path(args.output)
    log = read_log(args.log)
    envelopes = fit_envelope(log.rows, backend=args.backend, margin=args.margin)
    path = save_envelopes(envelopes, args.output)  # written first: an error prints nothing
    for env in envelopes.values():
        print(f"{env.backend}:")
        for leg, peak, unit, w in (
            ("peak_flops", env.peak_flops, "FLOP/s", env.flops_witness),
            ("peak_bandwidth", env.peak_bandwidth, "B/s", env.bandwidth_witness),
        ):
            if peak is None:
                print(f"  {leg}: none (no row is exact on this leg)")
                continue
            print(
                f"  {leg}: {peak:.4g} {unit} (witness {w.label or '-'} {w.digest}: "
                f"{w.measured_ms:.6g} ms, {w.achieved:.4g} {unit})"
            )
        if env.slack > 1:
            print(f"  fission slack: both peaks x{env.slack:.4g} (a multi-kernel row beat them)")
        if env.margin > 1:
            print(f"  margin: x{env.margin:.4g}")
    if log.skipped:
        print(f"skipped {log.skipped} malformed line(s) of {args.log}")
    if args.output:
        print(f"wrote {path}; set ANEFORGE_ENVELOPE_FILE={path} for the kernel cost model")
    else:
        print(
            f"wrote {path}; the kernel cost model reads it from there "
            "(set ANEFORGE_ENVELOPE_FILE to move it)"
        )
    return 0


def _drop_stdout() -> None:
    """Point the stdout file descriptor at /dev/null, so that the interpreter's last
    flush of what is still buffered does not fail again (Python's documented recipe)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` of the command: ``warning: <Category>: <message>``, one
    line on stderr, without Python's file:line prefix."""
    print(f"warning: {category.__name__}: {_one_line(message)}", file=file or sys.stderr)


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
