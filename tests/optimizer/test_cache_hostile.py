"""The tune cache under hostile files and folders.

The generated test runs :mod:`hostile_cache`'s scenarios through ``af.tune``; the tests
after it pin each defect of the issue with one plain case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from hostile_cache import (
    FAMILIES,
    FEED,
    LOSSY_NAMES,
    Harness,
    build_graph,
    chmod_stops,
    deadline,
    device,
    scenarios,
)

import aneforge as af
from aneforge.compression.codecs import LOSSY_ENCODINGS
from aneforge.errors import AneforgeWarning, OptionError
from aneforge.optimizer import cache as cache_module
from aneforge.optimizer import variants as variants_module
from aneforge.optimizer.cache import MAX_ENTRY_BYTES, STALE_TMP_S, TuneCache, entry_problem
from aneforge.optimizer.tune import DEFAULT_ATOL
from aneforge.optimizer.variants import build_variant

N_SCENARIOS = 264  # 12 of each of the 22 families; a few seconds


def test_generated_hostile_cache_scenarios_keep_the_contract(tmp_path):
    harness = Harness(tmp_path)
    cases = scenarios(N_SCENARIOS, seed=13)
    assert {sc.family for sc in cases} == {f.__name__[4:] for f in FAMILIES}
    for i, sc in enumerate(cases):
        harness.run(i, sc)


# ---- point 3: an entry is checked against the call's own gate ------------------------------


def _tune(y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", af.DispatchFloorWarning)
        return af.tune(y, inputs=FEED, device=device(), **kwargs)


def _tamper(folder, **data):
    (path,) = folder.glob("tune-*.json")
    entry = json.loads(path.read_text())
    entry["data"].update(data)
    path.write_text(json.dumps(entry))
    return path


def _lossy_weights(prog):
    return [n for n in prog.nodes if n.attrs.get("encoding") in LOSSY_ENCODINGS]


@pytest.mark.parametrize("name", LOSSY_NAMES)
def test_a_lossy_variant_tampered_into_a_default_entry_is_refused(name, tmp_path):
    y = build_graph("ranged")
    first = _tune(y, cache_dir=tmp_path)
    path = _tamper(tmp_path, variant=name, lossless=True)
    with pytest.warns(AneforgeWarning) as rec:
        prog = _tune(y, cache_dir=tmp_path)
    (msg,) = [str(w.message) for w in rec if "tuning cache" in str(w.message)]
    assert str(path) in msg and repr(name) in msg and "lossless variants only" in msg
    rep = prog.tune_report
    assert rep["cached"] is False and rep["lossless"] is True and rep["variant"] != name
    assert not _lossy_weights(prog)
    assert np.asarray(prog(FEED)).tobytes() == np.asarray(first(FEED)).tobytes()
    assert json.loads(path.read_text())["data"]["variant"] == rep["variant"]  # re-written


def test_a_lossy_entry_is_refused_where_the_ranges_do_not_admit_it(tmp_path):
    y = build_graph("unranged")
    _tune(y, atol=0.1, cache_dir=tmp_path)
    _tamper(tmp_path, variant="int8")
    with pytest.warns(AneforgeWarning, match="declared ranges"):
        prog = _tune(y, atol=0.1, cache_dir=tmp_path)
    assert prog.tune_report["cached"] is False and not _lossy_weights(prog)


def _deviation(prog, y):
    base = np.asarray(af.compile(y, opt=0)(FEED), np.float64)
    return float(np.max(np.abs(np.asarray(prog(FEED), np.float64) - base)) / np.max(np.abs(base)))


def test_a_lossy_entry_of_a_lossy_call_is_re_validated_against_its_atol(tmp_path):
    y = build_graph("ranged")
    _tune(y, atol=0.02, cache_dir=tmp_path)
    int8, int4 = (
        af.compile(list(build_variant([y], name).outputs), opt=0) for name in ("int8", "int4")
    )
    assert DEFAULT_ATOL < _deviation(int8, y) <= 0.02 < _deviation(int4, y)  # float64
    _tamper(tmp_path, variant="int8", errors={"int8": 0.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error", AneforgeWarning)
        prog = _tune(y, atol=0.02, cache_dir=tmp_path)
    rep = prog.tune_report
    assert rep["cached"] is True and rep["variant"] == "int8" and rep["lossless"] is False
    assert rep["errors"]["int8"] == pytest.approx(_deviation(prog, y), rel=1e-3)  # not 0.0
    path = _tamper(tmp_path, variant="int4", lossless=True)
    with pytest.warns(AneforgeWarning, match="exceeds atol=0.02") as rec:
        prog = _tune(y, atol=0.02, cache_dir=tmp_path)
    assert str(path) in str(rec[0].message)
    assert prog.tune_report["cached"] is False and _deviation(prog, y) <= 0.02


def test_an_entry_naming_a_variant_outside_the_known_ones_is_refused(tmp_path):
    y = build_graph("ranged")
    _tune(y, cache_dir=tmp_path)
    _tamper(tmp_path, variant="routes+int4")  # build_variant would make it: not a candidate
    with pytest.warns(AneforgeWarning, match="unknown variant 'routes\\+int4'"):
        prog = _tune(y, cache_dir=tmp_path)
    assert prog.tune_report["cached"] is False and not _lossy_weights(prog)


def test_a_lossless_name_that_builds_a_lossy_program_is_refused(tmp_path, monkeypatch):
    # Lossless is what the rebuilt variant is, not what its name promises: a name whose
    # build is not bit-identical on this graph is lossy for the gate.
    y = build_graph("ranged")
    first = _tune(y, cache_dir=tmp_path)
    real = variants_module.build_variant

    def lossy_decomposed(outputs, name):
        if name != "decomposed":
            return real(outputs, name)
        int8 = real(outputs, "int8")
        return SimpleNamespace(name=name, outputs=int8.outputs, lossless=False, report=None)

    monkeypatch.setattr(variants_module, "build_variant", lossy_decomposed)
    _tamper(tmp_path, variant="decomposed", lossless=True)
    with pytest.warns(AneforgeWarning, match="not bit-identical on this graph"):
        prog = _tune(y, cache_dir=tmp_path)
    assert prog.tune_report["cached"] is False and not _lossy_weights(prog)
    assert np.asarray(prog(FEED)).tobytes() == np.asarray(first(FEED)).tobytes()


def test_a_lossless_entry_is_used_and_its_lossless_claim_is_not_believed(tmp_path):
    y = build_graph("ranged")
    _tune(y, cache_dir=tmp_path)
    _tamper(tmp_path, variant="native", lossless=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AneforgeWarning)
        rep = _tune(y, cache_dir=tmp_path).tune_report
    assert rep["cached"] is True and rep["variant"] == "native" and rep["lossless"] is True


# ---- point 14: files and folders ------------------------------------------------------------


def test_the_schema_check_takes_any_json_number_without_an_exception():
    huge = json.loads("1" * 4000)  # past float range, within Python's digit limit
    assert entry_problem({"variant": "native", "times_s": {"native": huge}}) is None
    assert "times_s" in entry_problem({"variant": "native", "times_s": {"native": -huge}})
    assert "errors" in entry_problem({"variant": "native", "errors": {"a": float("nan")}})
    assert entry_problem({"variant": "native", "errors": {"a": float("inf")}}) is None


def _entry_of(tmp_path):
    """A cache folder holding one valid entry, and that entry's path and key."""
    y = build_graph("ranged")
    _tune(y, cache_dir=tmp_path)
    (path,) = tmp_path.glob("tune-*.json")
    return y, path, json.loads(path.read_text())["key"]


def _one_cache_warning(fn, *args, **kwargs):
    with deadline(30, fn.__name__), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    said = [str(w.message) for w in rec if "tuning cache" in str(w.message)]
    assert len(said) == 1, said
    return result, said[0]


def test_a_non_utf8_entry_is_a_warning(tmp_path):
    y, path, _ = _entry_of(tmp_path)
    path.write_bytes(b'{"schema": 1, "\xff": 2}')
    prog, msg = _one_cache_warning(_tune, y, cache_dir=tmp_path)
    assert str(path) in msg and "not UTF-8 at byte 15" in msg
    assert prog.tune_report["cached"] is False


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_deeply_nested_json_is_a_warning(text, tmp_path):
    y, path, _ = _entry_of(tmp_path)
    path.write_text(text)
    prog, msg = _one_cache_warning(_tune, y, cache_dir=tmp_path)
    assert str(path) in msg and "nested too deeply" in msg


def test_an_entry_past_the_size_cap_is_not_read(tmp_path, monkeypatch):
    y, path, _ = _entry_of(tmp_path)
    with open(path, "r+b") as fh:
        fh.truncate(2**40)  # sparse; reading it would take a TiB
    reads = []
    monkeypatch.setattr(cache_module, "read_regular_file", _spy(reads))
    prog, msg = _one_cache_warning(_tune, y, cache_dir=tmp_path)
    assert reads == [MAX_ENTRY_BYTES] and str(path) in msg and str(MAX_ENTRY_BYTES) in msg
    assert path.stat().st_size < MAX_ENTRY_BYTES  # replaced by the re-tuned entry


def _spy(reads):
    real = cache_module.read_regular_file

    def spy(path, what, limit=None):
        reads.append(limit)
        return real(path, what, limit)

    return spy


def test_an_entry_that_is_a_folder_is_a_warning_and_is_left_alone(tmp_path):
    y, path, _ = _entry_of(tmp_path)
    path.unlink()
    path.mkdir()
    (path / "mine.txt").write_text("keep")
    prog, msg = _one_cache_warning(_tune, y, cache_dir=tmp_path)
    assert str(path) in msg and "is a folder" in msg
    assert (path / "mine.txt").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temp file left


@pytest.mark.parametrize("kind", ["dev_zero", "fifo"])
def test_a_device_or_fifo_entry_does_not_hang(kind, tmp_path):
    y, path, key = _entry_of(tmp_path)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    prog, msg = _one_cache_warning(_tune, y, cache_dir=tmp_path)
    assert str(path) in msg and "not a regular file" in msg
    assert path.is_file() and not path.is_symlink()  # replaced by a valid entry
    assert TuneCache(tmp_path).get(key)["variant"] == prog.tune_report["variant"]


@pytest.mark.parametrize("where", ["is_file", "under_file"])
def test_a_cache_folder_that_is_a_file_is_a_warning(where, tmp_path):
    spot = tmp_path / "cache"
    spot.write_text("my notes")
    folder = spot if where == "is_file" else spot / "deeper"
    prog, msg = _one_cache_warning(_tune, build_graph("ranged"), cache_dir=folder)
    assert str(folder) in msg and "not a folder" in msg and "not cached" in msg
    assert prog.tune_report["cached"] is False and spot.read_text() == "my notes"


def _make_unwritable(folder, monkeypatch):
    """chmod where that stops writes; as root, fail the temp file's creation instead."""
    if chmod_stops(folder.parent, "write"):
        os.chmod(folder, 0o555)
        return lambda: os.chmod(folder, 0o755)
    real = cache_module.tempfile.mkstemp

    def refuse(*args, **kwargs):
        if str(kwargs.get("dir")) == str(folder):
            raise PermissionError(13, "Permission denied", str(folder))
        return real(*args, **kwargs)

    monkeypatch.setattr(cache_module.tempfile, "mkstemp", refuse)
    return lambda: None


def test_a_read_only_cache_folder_still_returns_the_result(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    restore = _make_unwritable(folder, monkeypatch)
    try:
        y = build_graph("ranged")
        prog, msg = _one_cache_warning(_tune, y, cache_dir=folder)
    finally:
        restore()
    assert "Permission denied" in msg and str(folder) in msg
    assert prog.tune_report["cached"] is False and list(folder.iterdir()) == []
    want = _tune(y, cache=False)
    assert np.asarray(prog(FEED)).tobytes() == np.asarray(want(FEED)).tobytes()


def test_a_cache_folder_that_cannot_be_created_is_a_warning(tmp_path, monkeypatch):
    parent = tmp_path / "locked"
    parent.mkdir()
    folder = parent / "cache"
    if chmod_stops(tmp_path, "write"):
        os.chmod(parent, 0o555)
    else:
        real = os.mkdir

        def refuse(path, *args, **kwargs):
            if str(path) == str(folder):
                raise PermissionError(13, "Permission denied", str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", refuse)
    try:
        prog, msg = _one_cache_warning(_tune, build_graph("ranged"), cache_dir=folder)
    finally:
        os.chmod(parent, 0o755)
    assert f"cannot create the tuning cache folder {folder}" in msg and "Permission" in msg
    assert prog.tune_report["cached"] is False and not folder.exists()


def test_a_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def full(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_module.os, "replace", full)
    with pytest.warns(AneforgeWarning, match="No space left on device"):
        stored = TuneCache(tmp_path).put("a" * 64, {"variant": "native"})
    assert stored is False and list(tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_no_temp_file_and_is_not_swallowed(tmp_path, monkeypatch):
    def interrupted(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_module.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        TuneCache(tmp_path).put("a" * 64, {"variant": "native"})
    assert list(tmp_path.iterdir()) == []


_KILLED_WRITER = """
import os, sys
from aneforge.optimizer import cache
def die(src, dst):
    os._exit(9)  # killed between the write and the rename: no cleanup runs
cache.os.replace = die
cache.TuneCache(sys.argv[1]).put("b" * 64, {"variant": "native"})
"""


def test_a_killed_writer_s_temp_file_is_removed_by_the_next_write(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], capture_output=True, timeout=120
    )
    assert done.returncode == 9, done.stderr.decode()
    (tmp,) = tmp_path.glob(".tune-*.tmp")  # what a killed writer leaves
    young = tmp_path / ".tune-live.tmp"  # a writer still at work
    young.write_text("{")
    cache = TuneCache(tmp_path)
    assert cache.put("c" * 64, {"variant": "routes"})
    assert tmp.exists()  # too young to be called stale
    old = time.time() - STALE_TMP_S - 1
    os.utime(tmp, (old, old))
    assert cache.put("c" * 64, {"variant": "routes"})
    assert not tmp.exists() and young.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tune-live.tmp", f"tune-{'c' * 64}.json"]


@pytest.mark.parametrize("bad", [5, b"/tmp/x", "", "a\x00b"])
def test_a_cache_dir_that_is_not_a_path_is_an_option_error(bad, tmp_path):
    with pytest.raises(OptionError, match="cache_dir"):
        _tune(build_graph("ranged"), cache_dir=bad)
