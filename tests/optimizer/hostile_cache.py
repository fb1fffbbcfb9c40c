"""Hostile tune-cache scenarios: a seeded generator and the contract ``af.tune`` keeps.

:func:`scenarios` draws ``n`` scenarios, round-robin over :data:`FAMILIES` with seeded
parameters. Each plants one hostile state in a fresh folder for one ``af.tune`` call:

- the entry's bytes: not UTF-8, nested past the parser's depth, past the size cap
  (sparse files of GiBs included), cut short, not an object, a wrong envelope or field
  types (negative, NaN or infinite times, ...);
- the variant it names: a lossy one (``int8``, ``int4``, ``routes+int8``, ``auto``)
  tampered into the entry of a default lossless call, or of a lossy call that must
  re-validate it; an unknown name; a lossless name other than the one chosen;
- the entry's file: a folder, a FIFO, a symlink to ``/dev/zero``, to a folder, to
  itself, dangling, or unreadable;
- the cache folder: a file or FIFO, under a file, read-only, impossible to create, a
  write that fails (disk full, I/O error), temp files of killed writers.

Failures that ``chmod`` cannot cause when the tests run as root (which ignores
permissions) are simulated by patching the call that would fail (probed, not assumed).

:meth:`Harness.run` makes the call under a deadline and checks the contract: a Program
comes back; a cache problem is exactly one ``AneforgeWarning`` naming the file and the
reason, and no problem none; a lossless-only call returns the same lossless program
(same output bits) as an uncached tune; a lossy call returns a program within its
``atol``; nothing aneforge did not write is removed or changed, and no temp file is
left behind; a replaceable bad entry is replaced by a valid one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
import stat
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import numpy as np

import aneforge as af
from aneforge.compression.codecs import LOSSY_ENCODINGS
from aneforge.errors import AneforgeWarning
from aneforge.optimizer.cache import MAX_ENTRY_BYTES, STALE_TMP_S, TuneCache
from aneforge.optimizer.tune import DEFAULT_ATOL
from guards import deadline

LOSSLESS_NAMES = ("native", "routes", "decomposed", "canonical")
LOSSY_NAMES = ("int8", "routes+int8", "int4", "auto")
LOSSY_ATOLS = (0.01, 0.02, 0.05)  # on FEED, int8 of the ranged graph errs 0.015, int4 0.039
DEADLINE_S = 30  # a hang guard only: every scenario takes milliseconds
FEED = np.random.default_rng(7).uniform(-1, 1, (1, 16)).astype(np.float16)


def build_graph(kind: str):
    """The tuned graph: ``x * 1.0 @ W`` then relu, W with a row of outliers (so int8
    and int4 err past the default atol). ``ranged`` declares x in [-1, 1], which
    admits the weight-quantized variants; ``unranged`` does not."""
    x = af.input((1, 16), name="x", range=(-1, 1) if kind == "ranged" else None)
    w = np.random.default_rng(0).standard_normal((16, 8)) * 0.1
    w[0] = 3.0
    return ((x * 1.0) @ w).relu()


def device():
    return af.SimulatedANE(noise=0.0)


# ---- scenarios -------------------------------------------------------------------------------


@dataclass
class Ctx:
    """One scenario's state: where it lives, and what the checks compare against."""

    root: Path  # the scenario's own folder
    cache_dir: Path  # what the call gets as cache_dir
    good: str  # the text of a valid entry for the call's key
    stack: contextlib.ExitStack  # patches active during the call only
    keep: dict = field(default_factory=dict)  # planted path -> fingerprint, must survive
    gone: list = field(default_factory=list)  # planted paths the call must remove
    absent: list = field(default_factory=list)  # paths the call must not create

    @property
    def entry(self) -> Path:
        return self.cache_dir / f"tune-{json.loads(self.good)['key']}.json"

    def write(self, text) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.entry.parent.mkdir(parents=True, exist_ok=True)
        self.entry.write_bytes(data)

    def mutated(self, fn) -> str:
        entry = json.loads(self.good)
        fn(entry)
        return json.dumps(entry)

    def keep_path(self, path: Path) -> None:
        self.keep[path] = fingerprint(path)


def fingerprint(path: Path):
    """What must not change about a planted path: its kind, and a file's bytes."""
    info = os.lstat(path)
    kind = stat.S_IFMT(info.st_mode)
    if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_ENTRY_BYTES:
        return kind, path.read_bytes()
    if stat.S_ISLNK(info.st_mode):
        return kind, os.readlink(path)
    return kind, info.st_size if stat.S_ISREG(info.st_mode) else None


@dataclass
class Scenario:
    family: str
    detail: str
    plant: Callable[[Ctx], None]
    graph: str = "ranged"
    atol: float = DEFAULT_ATOL
    warns: bool | None = True  # None: either (a lossy entry re-validated)
    names: str = "entry"  # the path the warning names: "entry" or "folder"
    reason: str = ""  # a regex the warning matches
    cached: bool | None = False
    stored: bool = True  # the call leaves a valid entry behind

    def __str__(self) -> str:
        return f"{self.family}[{self.detail}] graph={self.graph} atol={self.atol}"


def _call(r: random.Random) -> tuple[str, float]:
    """Mostly the default lossless call, sometimes a lossy one or the unranged graph."""
    return r.choice([("ranged", DEFAULT_ATOL)] * 3 + [("unranged", DEFAULT_ATOL), ("ranged", 0.1)])


def _sc(r, family, detail, plant, **kw) -> Scenario:
    graph, atol = kw.pop("call", None) or _call(r)
    return Scenario(family, detail, plant, graph=graph, atol=atol, **kw)


# -- the entry's bytes


def fam_non_utf8(r):
    bad = r.choice([b"\xff", b"\x80", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"])
    at = r.random()

    def plant(ctx):
        raw = ctx.good.encode()
        cut = int(at * len(raw))
        ctx.write(raw[:cut] + bad + raw[cut:])

    return _sc(r, "non_utf8", f"{bad!r}@{at:.2f}", plant, reason="UTF-8")


def fam_deep(r):
    opener, closer, unit = r.choice([("[", "]", 2), ('{"a":', "}", 6)])
    depth = r.choice([3000, 20000, (MAX_ENTRY_BYTES - 4096) // unit])
    closed, inside = r.random() < 0.5, r.random() < 0.5

    def plant(ctx):
        deep = opener * depth + ("0" + closer * depth if closed else "")
        text = ctx.good.rstrip()[:-1] + f', "deep": {deep}}}' if inside else deep
        ctx.write(text)

    detail = f"{opener}x{depth} closed={closed} inside={inside}"
    return _sc(r, "deep", detail, plant, reason="nested too deeply")


def fam_huge(r):
    size = r.choice([MAX_ENTRY_BYTES + 1, MAX_ENTRY_BYTES + 4096, 2**31, 2**36])
    via_link = r.random() < 0.3

    def plant(ctx):
        target = ctx.root / "huge.json" if via_link else ctx.entry
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as fh:
            if size < 2 * MAX_ENTRY_BYTES:  # a valid entry padded past the cap
                fh.write(ctx.good.encode() + b" " * (size - len(ctx.good)))
            else:
                fh.truncate(size)  # sparse: costs no disk
        if via_link:
            ctx.entry.parent.mkdir(parents=True, exist_ok=True)
            ctx.entry.symlink_to(target)
            ctx.keep_path(target)

    return _sc(r, "huge", f"{size}B link={via_link}", plant, reason=f"{MAX_ENTRY_BYTES}")


def fam_truncated(r):
    at = r.random()
    return _sc(
        r,
        "truncated",
        f"@{at:.3f}",
        lambda ctx: ctx.write(ctx.good[: int(at * (len(ctx.good) - 1))]),
        reason="not JSON",
    )


def fam_not_object(r):
    text = r.choice(["[]", "[1, 2, 3]", "null", "true", "42", '"tune"', "1e999", "-0.0"])
    return _sc(r, "not_object", text, lambda ctx: ctx.write(text), reason="not an object")


def fam_envelope(r):
    what = r.choice(["schema", "key", "drop", "data"])
    if what == "schema":
        value = r.choice([0, 2, 99, "1", None, True, 1.0, [1]])

        def fn(e):
            e["schema"] = value

        reason = "schema"
    elif what == "key":
        value = r.choice(["0" * 64, "", None, 7, "upper"])

        def fn(e):
            e["key"] = e["key"].upper() if value == "upper" else value

        reason = "key"
    elif what == "drop":
        value = r.choice(["schema", "key", "data"])

        def fn(e):
            del e[value]

        reason = {"schema": "schema", "key": "key", "data": "no data"}[value]
    else:
        value = r.choice([None, [], "native", 3, [{"variant": "native"}]])

        def fn(e):
            e["data"] = value

        reason = "not an object"
    return _sc(
        r, "envelope", f"{what}={value!r}", lambda ctx: ctx.write(ctx.mutated(fn)), reason=reason
    )


_BAD_FIELDS = {
    "variant": ([7, None, [], {}, True, 1.5], "no variant name"),
    "lossless": (["yes", 1, None, 0], "lossless"),
    "device": ([5, None, [], True], "device"),
    "measured": (["native", [1, 2], {"a": 1}, [None]], "measured"),
    "pruned": ([3, [["native"]]], "pruned"),
    "times_s": (
        [[], "fast", {"native": -1e-4}, {"native": float("nan")}, {"native": float("inf")},
         {"native": "1"}, {"native": True}, {"native": None}, {"native": -0.5}],
        "times_s",
    ),
    "predicted_us": ([{"native": -1}, {"native": float("nan")}, {"routes": float("-inf")}],
                     "predicted_us"),
    "errors": ([{"native": float("nan")}, {"native": -0.5}, "x", {"native": [0]}], "errors"),
}  # fmt: skip


def fam_bad_field(r):
    name = r.choice(sorted(_BAD_FIELDS))
    values, reason = _BAD_FIELDS[name]
    value = r.choice(values)

    def fn(e):
        e["data"][name] = value

    return _sc(
        r,
        "bad_field",
        f"{name}={value!r}",
        lambda ctx: ctx.write(ctx.mutated(fn)),
        reason=re.escape(reason),
    )


# -- the variant an entry names


def _named(name, lie: bool):
    def fn(e):
        e["data"]["variant"] = name
        if lie:  # claims that must not be believed
            e["data"]["lossless"] = True
            e["data"].setdefault("errors", {})[name] = 0.0
            e["data"].setdefault("times_s", {})[name] = 1e-9

    return fn


def fam_lossy_for_default(r):
    name, lie = r.choice(LOSSY_NAMES), r.random() < 0.5
    return _sc(
        r,
        "lossy_for_default",
        f"{name} lie={lie}",
        lambda ctx: ctx.write(ctx.mutated(_named(name, lie))),
        call=(r.choice(["ranged", "unranged"]), DEFAULT_ATOL),
        reason="lossless variants only",
    )


def fam_lossy_revalidated(r):
    name, lie, atol = r.choice(LOSSY_NAMES), r.random() < 0.5, r.choice(LOSSY_ATOLS)
    return _sc(
        r,
        "lossy_revalidated",
        f"{name} lie={lie}",
        lambda ctx: ctx.write(ctx.mutated(_named(name, lie))),
        call=("ranged", atol),
        warns=None,
        cached=None,
        reason="exceeds atol",
    )


def fam_lossy_unadmitted(r):
    name = r.choice(LOSSY_NAMES)
    return _sc(
        r,
        "lossy_unadmitted",
        name,
        lambda ctx: ctx.write(ctx.mutated(_named(name, False))),
        call=("unranged", r.choice(LOSSY_ATOLS)),
        reason="declared ranges",
    )


def fam_unknown_name(r):
    junk = "".join(r.choice("abcdefint0123456789+ _-é\u2603") for _ in range(r.randint(1, 30)))
    name = r.choice(
        ["", "int16", "routes+int4", "native+int8", "canonical+", "+int8", "ROUTES",
         "routes ", "decomposed+int8", "x" * r.randint(100, 5000), junk]
    )  # fmt: skip
    if name in LOSSLESS_NAMES + LOSSY_NAMES:
        name += "?"
    lie = r.random() < 0.5
    return _sc(
        r,
        "unknown_name",
        f"{name!r:.40}",
        lambda ctx: ctx.write(ctx.mutated(_named(name, lie))),
        reason="unknown variant",
    )


def fam_lossless_name(r):
    name, lie = r.choice(LOSSLESS_NAMES), r.random() < 0.5

    def fn(e):
        e["data"]["variant"] = name
        if lie:
            e["data"]["lossless"] = False

    return _sc(
        r,
        "lossless_name",
        f"{name} lie={lie}",
        lambda ctx: ctx.write(ctx.mutated(fn)),
        warns=False,
        cached=True,
    )


# -- the entry's file


def fam_entry_folder(r):
    with_file = r.random() < 0.5

    def plant(ctx):
        ctx.entry.mkdir(parents=True)
        if with_file:
            (ctx.entry / "notes.txt").write_text("mine")
            ctx.keep_path(ctx.entry / "notes.txt")
        ctx.keep_path(ctx.entry)

    return _sc(r, "entry_folder", f"file={with_file}", plant, reason="folder", stored=False)


def fam_entry_device(r):
    target = r.choice([p for p in ("/dev/zero", "/dev/urandom", "/dev/null") if Path(p).exists()])

    def plant(ctx):
        ctx.entry.parent.mkdir(parents=True, exist_ok=True)
        ctx.entry.symlink_to(target)

    return _sc(r, "entry_device", target, plant, reason="not a regular file")


def fam_entry_fifo(r):
    via_link = r.random() < 0.5

    def plant(ctx):
        ctx.entry.parent.mkdir(parents=True, exist_ok=True)
        if via_link:
            os.mkfifo(ctx.root / "fifo")
            ctx.entry.symlink_to(ctx.root / "fifo")
            ctx.keep_path(ctx.root / "fifo")
        else:
            os.mkfifo(ctx.entry)

    return _sc(r, "entry_fifo", f"link={via_link}", plant, reason="not a regular file")


def fam_entry_link(r):
    kind = r.choice(["folder", "loop", "pair", "dangling"])

    def plant(ctx):
        ctx.entry.parent.mkdir(parents=True, exist_ok=True)
        if kind == "folder":
            (ctx.root / "target").mkdir()
            (ctx.root / "target" / "data.bin").write_bytes(b"\x00mine")
            ctx.entry.symlink_to(ctx.root / "target")
            ctx.keep_path(ctx.root / "target" / "data.bin")
        elif kind == "loop":
            ctx.entry.symlink_to(ctx.entry)
        elif kind == "pair":
            (ctx.root / "other").symlink_to(ctx.entry)
            ctx.entry.symlink_to(ctx.root / "other")
            ctx.keep_path(ctx.root / "other")
        else:
            ctx.entry.symlink_to(ctx.root / "nowhere" / "entry.json")
            ctx.absent.append(ctx.root / "nowhere")

    reason = {"folder": "folder", "dangling": "does not exist"}.get(kind, "cannot read")
    return _sc(r, "entry_link", kind, plant, reason=reason)


def fam_entry_unreadable(r):
    def plant(ctx):
        ctx.write(ctx.good)
        if chmod_stops(ctx.root, "read"):
            os.chmod(ctx.entry, 0)
        else:  # root reads anyway: the read fails as a chmod'ed one would
            entry, real_open = str(ctx.entry), open

            def fake_open(path, *args, **kwargs):
                if str(path) == entry:
                    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), entry)
                return real_open(path, *args, **kwargs)

            ctx.stack.enter_context(mock.patch("aneforge.limits.open", fake_open, create=True))

    return _sc(r, "entry_unreadable", "", plant, reason="cannot read")


# -- the cache folder


def fam_folder_not_folder(r):
    kind = r.choice(["file", "fifo", "devnull", "dangling", "under_file"])

    def plant(ctx):
        spot = ctx.root / "spot"
        if kind in ("file", "under_file"):
            spot.write_text("my notes")
        elif kind == "fifo":
            os.mkfifo(spot)
        elif kind == "devnull":
            spot.symlink_to("/dev/null")
        else:
            spot.symlink_to(ctx.root / "nowhere")
            ctx.absent.append(ctx.root / "nowhere")
        ctx.keep_path(spot)
        ctx.cache_dir = spot / "sub" / "cache" if kind == "under_file" else spot

    return _sc(
        r, "folder_not_folder", kind, plant, names="folder", reason="not a folder", stored=False
    )


def fam_folder_readonly(r):
    other = r.random() < 0.5

    def plant(ctx):
        ctx.cache_dir = ctx.root / "ro"
        ctx.cache_dir.mkdir()
        if other:  # an entry of another graph is left as it is
            (ctx.cache_dir / f"tune-{'0' * 64}.json").write_text(ctx.good)
            ctx.keep_path(ctx.cache_dir / f"tune-{'0' * 64}.json")
        if chmod_stops(ctx.root, "write"):
            os.chmod(ctx.cache_dir, 0o555)
            ctx.stack.callback(os.chmod, ctx.cache_dir, 0o755)
        else:
            folder = str(ctx.cache_dir)
            ctx.stack.enter_context(_failing("tempfile.mkstemp", errno.EACCES, folder))

    return _sc(
        r, "folder_readonly", f"other={other}", plant, reason="Permission denied", stored=False
    )


def fam_folder_uncreatable(r):
    kinds = ["locked_parent"] + (["proc"] if Path("/proc/self").exists() else [])
    kind = r.choice(kinds)

    def plant(ctx):
        if kind == "proc":
            ctx.cache_dir = Path("/proc/aneforge-no-such-folder") / "cache"
            return
        parent = ctx.root / "locked"
        parent.mkdir()
        ctx.cache_dir = parent / "cache"
        if chmod_stops(ctx.root, "write"):
            os.chmod(parent, 0o555)
            ctx.stack.callback(os.chmod, parent, 0o755)
        else:
            ctx.stack.enter_context(_failing("os.mkdir", errno.EACCES, str(ctx.cache_dir)))

    return _sc(
        r,
        "folder_uncreatable",
        kind,
        plant,
        names="folder",
        reason="cannot create|No such file|Permission denied",
        stored=False,
    )


def fam_write_fails(r):
    code = r.choice([errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EROFS])
    where = r.choice(["os.replace", "write"])

    def plant(ctx):
        ctx.cache_dir.mkdir(parents=True, exist_ok=True)
        if where == "write":
            ctx.stack.enter_context(_failing_write(code))
        else:
            ctx.stack.enter_context(_failing("os.replace", code, str(ctx.cache_dir)))

    return _sc(
        r,
        "write_fails",
        f"{where} {errno.errorcode[code]}",
        plant,
        reason=re.escape(os.strerror(code)),
        stored=False,
    )


def fam_temp_debris(r):
    stale, fresh, extra = r.randint(0, 3), r.randint(0, 2), r.random() < 0.5
    sub = random.Random(r.getrandbits(32))  # drawn now: plants run later

    def plant(ctx):
        ctx.cache_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for i in range(stale + fresh):
            tmp = ctx.cache_dir / f".tune-{sub.getrandbits(32):08x}{i}.tmp"
            tmp.write_text(ctx.good[: sub.randint(0, len(ctx.good))])  # a killed writer's
            age = (
                STALE_TMP_S + sub.uniform(5, 1e5) if i < stale else sub.uniform(0, STALE_TMP_S / 2)
            )
            os.utime(tmp, (now - age, now - age))
            if i < stale:
                ctx.gone.append(tmp)
            else:
                ctx.keep_path(tmp)
        if extra:  # not aneforge's temp files: a folder, other names
            old = now - 10 * STALE_TMP_S
            for name in (".tune-dir.tmp", "notes.tmp", "tune-x.json.tmp", ".tune-x.txt"):
                path = ctx.cache_dir / name
                path.mkdir() if name == ".tune-dir.tmp" else path.write_text("mine")
                os.utime(path, (old, old))
                ctx.keep_path(path)

    return _sc(r, "temp_debris", f"stale={stale} fresh={fresh} extra={extra}", plant, warns=False)


FAMILIES = (
    fam_non_utf8, fam_deep, fam_huge, fam_truncated, fam_not_object, fam_envelope,
    fam_bad_field, fam_lossy_for_default, fam_lossy_revalidated, fam_lossy_unadmitted,
    fam_unknown_name, fam_lossless_name, fam_entry_folder, fam_entry_device, fam_entry_fifo,
    fam_entry_link, fam_entry_unreadable, fam_folder_not_folder, fam_folder_readonly,
    fam_folder_uncreatable, fam_write_fails, fam_temp_debris,
)  # fmt: skip


def scenarios(n: int, seed: int = 0) -> list[Scenario]:
    """``n`` scenarios, every family in turn, parameters from ``seed``."""
    r = random.Random(seed)
    return [FAMILIES[i % len(FAMILIES)](r) for i in range(n)]


# ---- failure simulation -------------------------------------------------------------------------


_PROBES: dict[str, bool] = {}


def chmod_stops(base: Path, what: str) -> bool:
    """Whether chmod stops a ``what`` ("read" or "write") here: not for root (or a
    process with CAP_DAC_OVERRIDE), which the probe detects rather than assumes."""
    if what not in _PROBES:
        probe = base / f".probe-{what}"
        probe.mkdir()
        target = probe / "f"
        target.write_text("x")
        os.chmod(target if what == "read" else probe, 0 if what == "read" else 0o555)
        try:
            if what == "read":
                target.read_text()
            else:
                (probe / "g").write_text("x")
            _PROBES[what] = False
        except PermissionError:
            _PROBES[what] = True
        finally:
            os.chmod(probe, 0o755)
            os.chmod(target, 0o644)
            shutil.rmtree(probe)
    return _PROBES[what]


def _failing(target: str, code: int, under: str):
    """Patch ``target`` (os.replace, os.mkdir, tempfile.mkstemp) to fail with ``code``
    for paths under ``under``, as the system would."""
    module, name = target.rsplit(".", 1)
    real = getattr(__import__(module), name)

    def fake(*args, **kwargs):
        paths = [str(a) for a in args] + [str(kwargs.get("dir", ""))]
        if any(p.startswith(under) for p in paths):
            raise OSError(code, os.strerror(code), under)
        return real(*args, **kwargs)

    return mock.patch(target, fake)


@contextlib.contextmanager
def _failing_write(code: int):
    """Make the cache's write of the temp file fail with ``code`` (a full disk)."""
    real = os.fdopen

    class Failing:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, _text):
            raise OSError(code, os.strerror(code))

    with mock.patch("aneforge.optimizer.cache.os.fdopen", lambda *a, **k: Failing(real(*a, **k))):
        yield


# ---- the harness ---------------------------------------------------------------------------


@dataclass
class Seed:
    """An uncached tune of one call: its program, and the entry text it wrote."""

    program: object
    text: str


class Harness:
    """Runs scenarios in folders under ``base`` and checks the contract."""

    def __init__(self, base: Path):
        self.base = base
        self.graphs = {k: build_graph(k) for k in ("ranged", "unranged")}
        self.baselines = {k: af.compile(g, opt=0) for k, g in self.graphs.items()}
        self._seeds: dict = {}

    def tune(self, graph: str, atol: float, cache_dir):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", af.DispatchFloorWarning)
            return af.tune(
                self.graphs[graph], inputs=FEED, atol=atol, device=device(), cache_dir=cache_dir
            )

    def seed(self, graph: str, atol: float) -> Seed:
        """The uncached result of the call, once (the reference of every scenario)."""
        if (graph, atol) not in self._seeds:
            folder = self.base / f"seed-{graph}-{atol}"
            prog = self.tune(graph, atol, folder)
            assert prog.tune_report["cached"] is False
            (entry,) = folder.glob("tune-*.json")
            self._seeds[graph, atol] = Seed(prog, entry.read_text())
        return self._seeds[graph, atol]

    def run(self, index: int, sc: Scenario) -> Scenario:
        """Plant ``sc``, make the call, check the contract (AssertionError naming ``sc``)."""
        seed = self.seed(sc.graph, sc.atol)
        root = self.base / f"s{index:04d}-{sc.family}"
        root.mkdir()
        with contextlib.ExitStack() as stack:
            ctx = Ctx(root=root, cache_dir=root / "cache", good=seed.text, stack=stack)
            sc.plant(ctx)
            entry = ctx.entry
            with deadline(DEADLINE_S, str(sc)), warnings.catch_warnings(record=True) as rec:
                warnings.simplefilter("always")
                try:
                    prog = self.tune(sc.graph, sc.atol, ctx.cache_dir)
                except Exception as err:  # the contract is "never": say which scenario
                    raise AssertionError(f"{sc}: af.tune raised {err!r}") from err
        self.check(sc, ctx, entry, prog, rec, seed)
        return sc

    def check(self, sc, ctx, entry, prog, records, seed) -> None:
        rep = prog.tune_report
        assert isinstance(prog, af.Program), sc
        said = [
            str(w.message)
            for w in records
            if issubclass(w.category, AneforgeWarning) and "tuning cache" in str(w.message)
        ]
        expect = sc.warns if sc.warns is not None else not rep["cached"]
        assert len(said) == int(expect), f"{sc}: cache warnings {said}"
        if expect:
            named = str(entry if sc.names == "entry" else ctx.cache_dir)
            assert named in said[0], f"{sc}: the warning does not name {named}: {said[0]}"
            assert re.search(sc.reason, said[0]), f"{sc}: no /{sc.reason}/ in {said[0]}"
            assert "\n" not in said[0], f"{sc}: not one line: {said[0]!r}"
        if sc.cached is not None:
            assert rep["cached"] is sc.cached, f"{sc}: cached={rep['cached']}"
        out = np.asarray(prog(FEED))
        if sc.atol == DEFAULT_ATOL:  # lossless-only: the uncached lossless result, bit for bit
            assert rep["lossless"] is True, f"{sc}: a lossless-only call returned {rep}"
            lossy = [n for n in prog.nodes if n.attrs.get("encoding") in LOSSY_ENCODINGS]
            assert not lossy, f"{sc}: lossy weights in a lossless-only result"
            want = np.asarray(seed.program(FEED))
            assert out.tobytes() == want.tobytes(), f"{sc}: output differs from uncached"
        else:
            base = np.asarray(self.baselines[sc.graph](FEED), np.float64)
            dev = np.max(np.abs(out.astype(np.float64) - base)) / np.max(np.abs(base))
            assert dev <= sc.atol, f"{sc}: deviation {dev:.3g} past atol {sc.atol}"
        for path, print_ in ctx.keep.items():
            assert os.path.lexists(path) and fingerprint(path) == print_, f"{sc}: {path} changed"
        for path in ctx.gone:
            assert not os.path.lexists(path), f"{sc}: stale {path} not removed"
        for path in ctx.absent:
            assert not os.path.lexists(path), f"{sc}: {path} was created"
        if os.path.isdir(ctx.cache_dir):
            temps = {p for p in ctx.cache_dir.glob(".tune-*.tmp")} - set(ctx.keep)
            assert not temps, f"{sc}: temp files left: {temps}"
        if sc.stored:
            with warnings.catch_warnings():
                warnings.simplefilter("error", AneforgeWarning)
                data = TuneCache(ctx.cache_dir).get(json.loads(ctx.good)["key"])
            assert data is not None, f"{sc}: no valid entry left behind"
        else:
            assert not os.path.isfile(entry), f"{sc}: an entry was written"
