"""Hostile command lines: a generator of bad ``aneforge`` invocations.

Each generated case is a command line with one to three user mistakes (a bad value for
an option, a path that is a trap, an unknown flag or subcommand) among otherwise good
options, in random order and spelling (``--opt value`` or ``--opt=value``). Run
in-process through :func:`aneforge.cli.main`, every case must:

- return exit code 2 (not raise, not 0 or 1), before any work;
- print exactly one line on stderr, ``aneforge: error: ...``, naming one of the
  mistakes, and nothing on stdout;
- leave the folder of traps exactly as it was (nothing deleted, nothing written, no
  probe or staging folder left behind), ``--force`` included.

The traps are a folder named ``x.onnx``, a FIFO, a link to /dev/zero, a dangling link, a
file in place of a folder, an existing non-package folder with a file in it, a file
named like a package, a link to a folder, a package-shaped folder without aneforge's
mark, one whose Manifest.json nests 100,000 deep, a folder named like an image.
Deterministic: a seeded NumPy generator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

from aneforge.cli import main

CASES = 400
SEED = 13


@dataclass(frozen=True)
class Bad:
    """A mistake: the argv words it adds and the words one of which the error names."""

    words: tuple[str, ...]
    names: tuple[str, ...]
    force_proof: bool = True  # still a mistake with --force


def _opt(option: str, value: str, names: tuple[str, ...], force_proof=True) -> list[Bad]:
    both = [(option, value), (f"{option}={value}",)]
    return [Bad(w, names, force_proof) for w in both]


SEEDS = ["-1", "-0", "abc", "", " 3", "1.5", "1e3", "+1", "0x10", str(2**64), "9" * 5000,
         "\u0663", "1_000"]  # fmt: skip
TARGETS = [",,,", "", " , ", "M1,,M4", "M1,", ",M1", "nosuch", "M1,nosuch", "h99"]
EXPORTS = ["", " ", "/proc/x.mlpackage", "afile/x.mlpackage", "afile/sub/x.mlpackage",
           "x.onnx", "out.mlmodel", ".mlpackage", "out", "x.onnx/../afile/y.mlpackage"]  # fmt: skip
FOREIGN = ["keep.mlpackage", "file.mlpackage", "link.mlpackage", "fake.mlpackage",
           "fifo.mlpackage", "deep.mlpackage"]  # fmt: skip
PLOTS = ["", "/proc/x.png", "img.png", "x.unknownext", "afile/x.png", "nodir/x.png", "x"]
MAX_ERRORS = ["0", "-1", "nan", "inf", "-inf", "abc", "", "1e999"]
LAYERS = ["0", "-3", "1.5", "abc", "", "1e3"]
RANGES = ["abc", "x=", "=1:2", "1:", ":1", "nan:1", "2:1", "x=1:inf", "x=1", "1:2:3"]
SHAPES = ["x", "x=", "=1x2", "x=1x0", "x=-1", "x=1.5", "x=axb", "x=1x2,3", "image=1x3x8x8"]
INPUTS = ["x", "=a.npy", "x=", "x=missing.npy", "x=fifo.onnx", "x=zero.onnx", "x=afile",
          "x=x.onnx", "x=broken.onnx", "x=img.png"]  # fmt: skip
MODELS = ["x.onnx", "fifo.onnx", "zero.onnx", "missing.onnx", "broken.onnx", "nosuch", "",
          "afile", "keep.mlpackage"]  # fmt: skip

CHECK_MISTAKES = (
    [b for v in SEEDS for b in _opt("--seed", v, ("--seed",))]
    + [b for v in TARGETS for b in _opt("--target", v, ("--target", "target"))]
    + [b for v in EXPORTS for b in _opt("--export", v, ("--export",))]
    + [b for v in FOREIGN for b in _opt("--export", v, ("--export",), force_proof=False)]
    + [b for v in PLOTS for b in _opt("--plot", v, ("--plot", "plot file"))]
    + [b for v in MAX_ERRORS for b in _opt("--max-error", v, ("--max-error",))]
    + [b for v in LAYERS for b in _opt("--layers", v, ("--layers",))]
    + [b for v in RANGES for b in _opt("--input-range", v, ("--input-range",))]
    + [b for v in SHAPES for b in _opt("--shape", v, ("--shape",))]
    + [b for v in INPUTS for b in _opt("--input", v, ("--input",))]
    + [Bad((w,), ("unrecognized", "argument", "expected")) for w in
       ("--bogus", "-x", "--targets=M1", "--json=1", "--seed", "--export", "--plot")]
)  # fmt: skip
EXPORT_MISTAKES = (
    [b for v in TARGETS + ["M1,M4"] for b in _opt("--target", v, ("--target", "target"))]
    + [b for v in EXPORTS for b in _opt("-o", v, ("-o",))]
    + [b for v in SHAPES for b in _opt("--shape", v, ("--shape",))]
    + [b for v in FOREIGN for b in _opt("-o", v, ("-o",), force_proof=False)]
    + [Bad((w,), ("unrecognized", "argument", "expected")) for w in
       ("--bogus", "--json", "-o", "--seed=1")]
)  # fmt: skip
MARGINS = ["0.5", "0", "-1", "nan", "inf", "abc", "", "1e999"]
BACKENDS = ["nosuch", "", " cpu"]
OUTPUTS = ["", " ", "/proc/x.json", "afile/x.json", "nodir/x.json", "x.onnx", "img.png",
           "fifo.onnx", "zero.onnx", "broken.onnx", "link.mlpackage"]  # fmt: skip
LOGS = ["x.onnx", "fifo.onnx", "zero.onnx", "missing.tsv", "broken.onnx", "", "afile"]
FIT_MISTAKES = (
    [b for v in MARGINS for b in _opt("--margin", v, ("--margin", "margin"))]
    + [b for v in BACKENDS for b in _opt("--backend", v, ("--backend", "backend"))]
    + [b for v in OUTPUTS for b in _opt("--output", v, ("--output", "envelope file"))]
    + [Bad((w,), ("unrecognized", "argument", "expected")) for w in
       ("--bogus", "--json", "--seed=1", "--output")]
)  # fmt: skip
FIT_GOOD = [("--margin", "2"), ("--backend", "cpu"), ("--output", "new.json")]
EXPS = ["-1", "27", "abc", "", "1.5", "99"]
REPEATS = ["0", "-2", "abc", "", "1.5"]
PROBE_MISTAKES = (
    [b for v in EXPS for b in _opt("--min-exp", v, ("--min-exp", "min-exp"))]
    + [b for v in EXPS for b in _opt("--max-exp", v, ("--max-exp", "max-exp"))]
    + [b for v in REPEATS for b in _opt("--repeats", v, ("--repeats", "repeats"))]
    + [b for v in ["", " ", "a\tb"] for b in _opt("--backend", v, ("--backend",))]
    + [Bad((w,), ("unrecognized", "argument", "expected")) for w in ("--bogus", "--output=x")]
)  # fmt: skip
PROBE_GOOD = [("--min-exp", "4"), ("--max-exp", "6"), ("--repeats", "1"), ("--backend", "cpu")]
PROBE_LOGS = ["", " ", "/proc/x.tsv", "afile/x.tsv", "nodir/x.tsv", "x.onnx", "img.png",
              "fifo.onnx", "zero.onnx", "broken.onnx", "link.mlpackage"]  # fmt: skip
CHECK_GOOD = [("--seed", "3"), ("--target", "M1"), ("--max-error", "0.5"), ("--layers", "2"),
              ("--json",), ("--input-range=-1:1",), ("--export", "new.mlpackage"),
              ("--plot", "new.png")]  # fmt: skip
EXPORT_GOOD = [("--target", "M1")]


@pytest.fixture
def traps(tmp_path, monkeypatch):
    """A folder of traps, made the current folder; returns a snapshot function."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.onnx").mkdir()
    os.mkfifo(tmp_path / "fifo.onnx")
    os.mkfifo(tmp_path / "fifo.mlpackage")
    os.symlink("/dev/zero", tmp_path / "zero.onnx")
    os.symlink(tmp_path / "gone", tmp_path / "broken.onnx")
    (tmp_path / "afile").write_text("a file where a folder is wanted")
    (tmp_path / "keep.mlpackage").mkdir()
    (tmp_path / "keep.mlpackage" / "thesis.tex").write_text("years of work")
    (tmp_path / "file.mlpackage").write_text("not a package")
    os.symlink(tmp_path / "keep.mlpackage", tmp_path / "link.mlpackage")
    core = tmp_path / "fake.mlpackage" / "Data" / "com.apple.CoreML"
    core.mkdir(parents=True)
    (core / "model.mlmodel").write_bytes(b"\x08\x07")  # a spec without aneforge's mark
    (tmp_path / "fake.mlpackage" / "Manifest.json").write_text(
        '{"itemInfoEntries": {"a": {"path": "com.apple.CoreML/model.mlmodel"}}, '
        '"rootModelIdentifier": "a"}'
    )
    deep = tmp_path / "deep.mlpackage"  # a package-shaped folder, its manifest nested deep
    (deep / "Data" / "com.apple.CoreML").mkdir(parents=True)
    (deep / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"")
    (deep / "Manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "img.png").mkdir()
    (tmp_path / "cal.tsv").write_text(  # a well-formed calibration log of backend cpu
        "cpu\tgemm____/00000000\t\tgemm\t1.000000\t\t1\t2000000\t1000\t0\t0\t0\n"
    )

    def snapshot():
        seen = []
        for root, dirs, files in os.walk(tmp_path):
            for name in sorted(dirs + files):
                p = os.path.join(root, name)
                info = os.lstat(p)
                data = b""
                if os.path.isfile(p):  # FIFOs and devices are never opened
                    with open(p, "rb") as fh:
                        data = fh.read()
                seen.append((os.path.relpath(p, tmp_path), info.st_mode, data))
        return sorted(seen)

    return snapshot


def _key(words) -> str:
    return words[0].split("=")[0]


def _case(rng, command: str) -> tuple[list[str], list[Bad]]:
    """A command line with one to three option mistakes, good options that do not
    override them, maybe --force, and a good or bad model, shuffled."""
    mistakes = {
        "check": CHECK_MISTAKES,
        "export": EXPORT_MISTAKES,
        "fit-envelope": FIT_MISTAKES,
        "calibrate-bandwidth": PROBE_MISTAKES,
    }[command]
    good = {
        "check": CHECK_GOOD,
        "export": EXPORT_GOOD,
        "fit-envelope": FIT_GOOD,
        "calibrate-bandwidth": PROBE_GOOD,
    }[command]
    bad, taken = [], set()
    for i in rng.choice(len(mistakes), size=rng.integers(1, 4), replace=False):
        if _key(mistakes[i].words) not in taken:  # a later value of one option would win
            bad.append(mistakes[i])
            taken.add(_key(mistakes[i].words))
    good = [g for g in good if _key(g) not in taken]  # a later good value would win
    words: list[list[str]] = [list(b.words) for b in bad]
    some = rng.choice(len(good), size=rng.integers(0, min(3, len(good)) + 1), replace=False)
    words += [list(good[i]) for i in some]
    if command == "export" and "-o" not in taken:
        words.append(["-o", "new.mlpackage"])  # else its absence is the first mistake
    if command == "calibrate-bandwidth":
        if rng.random() < 0.3:
            log = str(rng.choice(PROBE_LOGS))
            bad.append(Bad((log,), ("LOG",)))
        else:
            log = "new.tsv"
        words.append([log])
    elif command == "fit-envelope":
        if rng.random() < 0.3:
            log = str(rng.choice(LOGS))
            bad.append(Bad((log,), ("calibration log", "log")))
        else:
            log = "cal.tsv"
        words.append([log])
    else:
        if rng.random() < 0.3:
            words.append(["--force"])
        if rng.random() < 0.3:
            model = str(rng.choice(MODELS))
            bad.append(Bad((model,), ("model",)))
        else:
            model = "cnn" if command == "export" or rng.random() < 0.5 else None
        if model is not None:
            words.append([model])
    rng.shuffle(words)
    valueless = ("--seed", "--export", "--plot", "-o", "--output")
    lone = [g for g in words if len(g) == 1 and g[0] in valueless]
    words = [g for g in words if not any(g is x for x in lone)] + lone  # valueless: last
    argv = [command] + [w for group in words for w in group]
    if not any(b.force_proof for b in bad):  # --force would make a foreign path good
        argv = [w for w in argv if w != "--force"]
    return argv, bad


def test_bad_command_lines_exit_2_with_one_line_and_touch_nothing(traps, capsys):
    """The generator: CASES command lines, each with 1-4 mistakes; see the module."""
    rng = np.random.default_rng(SEED)
    before = traps()
    for i in range(CASES):
        roll = rng.random()
        command = (
            "check" if roll < 0.55 else "export" if roll < 0.75
            else "fit-envelope" if roll < 0.9 else "calibrate-bandwidth"
        )  # fmt: skip
        argv, bad = _case(rng, command)
        code = main(argv)
        out, err = capsys.readouterr()
        where = f"case {i}: aneforge {argv!r}"
        assert code == 2, f"{where} -> exit {code}: {err}"
        assert out == "", where
        assert err.count("\n") == 1 and err.startswith("aneforge: error: "), (where, err)
        assert "Traceback" not in err, where
        names = [n for b in bad for n in b.names]
        assert any(n in err for n in names), (where, err)
        assert traps() == before, f"{where} changed the folder"


@pytest.mark.parametrize("command", ["check", "export"])
def test_force_is_never_reached_before_the_other_mistakes(traps, capsys, command):
    """--force with a foreign path and one force-proof mistake deletes nothing."""
    before = traps()
    out = "--export" if command == "check" else "-o"
    for path in FOREIGN:
        for mistake in (["--target", ",,,"], ["nosuch"]):
            argv = [command, *(["cnn"] if mistake[0] != "nosuch" else []), out, path,
                    "--force", *mistake]  # fmt: skip
            assert main(argv) == 2, argv
            assert capsys.readouterr().err.count("\n") == 1
    assert traps() == before


def test_the_generator_covers_every_option(traps):
    """Every option of every subcommand has mistakes in the generator."""
    from aneforge.cli import _parser

    sub = _parser()._subparsers._group_actions[0].choices
    everything = CHECK_MISTAKES + EXPORT_MISTAKES + FIT_MISTAKES + PROBE_MISTAKES
    drawn = {w.split("=")[0] for b in everything for w in b.words}
    for name, parser in sub.items():
        for action in parser._actions:
            flags = [f for f in action.option_strings if f not in ("-h", "--help")]
            if flags and action.dest not in ("json", "force"):  # flags without values
                assert set(flags) & drawn, (name, flags)
