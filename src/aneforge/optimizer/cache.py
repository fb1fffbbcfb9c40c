"""The tuning cache: JSON files keyed by a structural hash, written atomically.

Location: ``$ANEFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/aneforge``, else
``~/.cache/aneforge``. Entries are plain JSON with a schema version (never pickles).

The cache is untrusted and never fatal. Every problem with it is one
:class:`~aneforge.errors.AneforgeWarning` naming the file and the reason, and the tune
goes on uncached:

- reading: only regular files of at most :data:`MAX_ENTRY_BYTES` are read (a folder,
  FIFO or device, or a symlink to one, is refused before any read); an entry that is not
  UTF-8, not JSON (deep nesting included) or not of the schema (:func:`entry_problem`)
  is ignored and re-tuned;
- writing: a cache folder that cannot be created, is a file or is read-only loses
  the entry, not the result. A write goes to a temp file (``.tune-*.tmp``) in the
  cache folder, renamed over the entry; the temp file is removed if the write fails,
  and one left by a killed writer is removed by the next write once it is older than
  :data:`STALE_TMP_S` (a live writer's younger one is left alone).

What an entry names is checked against the call's own gate by ``tune`` itself (a lossy
variant is re-validated, never trusted; placements are checked against the program's
regions before they are applied).

Schema 1 took the emulator's placements (``placements``, ``placement_search``) as
optional fields: an entry without them is still read (on the emulator the placements
are then tuned and the entry rewritten), and an older reader ignores them, so the
version stays 1.

Example:
    >>> import os, tempfile
    >>> from aneforge.optimizer.cache import TuneCache
    >>> cache = TuneCache(tempfile.mkdtemp())
    >>> cache.put("k" * 64, {"variant": "routes", "times_s": {"routes": 1e-4}})
    True
    >>> cache.get("k" * 64)["variant"]
    'routes'
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
import time
import warnings
from pathlib import Path

from ..cachedir import default_cache_dir
from ..errors import AneforgeWarning, FileReadError, OptionError
from ..limits import read_regular_file

SCHEMA_VERSION = 1
MAX_ENTRY_BYTES = 2**20  # an entry is a few KiB; anything past 1 MiB is not one of ours
STALE_TMP_S = 300.0  # a temp file this old belongs to a writer that died
_TMP_PREFIX, _TMP_SUFFIX = ".tune-", ".tmp"


def _is_number(value, allow_inf: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):  # JSON ints run to 4300 digits: no float conversion
        return value >= 0
    return value >= 0 and (math.isfinite(value) or (allow_inf and value == math.inf))


def entry_problem(data) -> str | None:
    """Why ``data`` (an entry's payload) is not a tuning result, or None when it is one.

    ``variant`` is a name; the report fields ``tune`` writes, where present, have their
    types: times and predictions finite and >= 0, errors >= 0 (``inf`` allowed: a
    variant whose output was not finite), name lists of strings.

    Example:
        >>> entry_problem({"variant": "native", "times_s": {"native": -1.0}})
        "times_s['native'] is -1.0, not a number >= 0"
    """
    if not isinstance(data, dict):
        return f"data is a {type(data).__name__}, not an object"
    if not isinstance(data.get("variant"), str):
        return "no variant name"
    for field in ("lossless",):
        if field in data and not isinstance(data[field], bool):
            return f"{field} is {data[field]!r:.40}, not true/false"
    if "device" in data and not isinstance(data["device"], str):
        return f"device is {data['device']!r:.40}, not a string"
    for field in ("measured", "pruned"):
        value = data.get(field, [])
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            return f"{field} is not a list of variant names"
    problem = _placements_problem(data)
    if problem is not None:
        return problem
    for field, allow_inf in (("times_s", False), ("predicted_us", False), ("errors", True)):
        value = data.get(field, {})
        if not isinstance(value, dict):
            return f"{field} is a {type(value).__name__}, not an object"
        for name, number in value.items():
            if not _is_number(number, allow_inf):
                return f"{field}[{name!r:.40}] is {number!r:.40}, not a number >= 0"
    return None


_PLACEMENTS = ("inline", "materialize")


def _placements_problem(data: dict) -> str | None:
    """Why ``data``'s ``placements`` (``[[region index, [placement, ...]], ...]``) or
    ``placement_search`` (one object of numbers per region) are malformed, or None."""
    pairs = data.get("placements", [])
    if not isinstance(pairs, list):
        return f"placements is a {type(pairs).__name__}, not a list"
    for pair in pairs:
        ok = isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int
        ok = ok and pair[0] >= 0 and isinstance(pair[1], list)
        if not ok or not all(isinstance(p, str) and p in _PLACEMENTS for p in pair[1]):
            return f"placements holds {pair!r:.60}, not [region index, ['inline' | ...]]"
    search = data.get("placement_search", [])
    if not isinstance(search, list):
        return f"placement_search is a {type(search).__name__}, not a list"
    for item in search:
        if not isinstance(item, dict) or not all(
            _is_number(v, allow_inf=True) for v in item.values()
        ):
            return f"placement_search holds {item!r:.60}, not an object of numbers >= 0"
    return None


def _read_problem(path: Path, err: FileReadError) -> str:
    """The reason of ``read_regular_file``'s refusal, without its path (the warning names
    it)."""
    if os.path.islink(path):
        try:
            os.stat(path)
        except FileNotFoundError:
            return f"a symlink to {os.readlink(path)}, which does not exist"
        except OSError:
            pass  # a loop: the refusal says so
    return str(err).removeprefix(f"path {str(path)!r}").lstrip(": ")


def _folder_problem(folder: Path, err: OSError) -> str:
    """Why ``folder`` cannot be created: the nearest existing path on the way that is not
    a folder (a file, FIFO, device or dangling link), else the system's reason."""
    for step in (folder, *folder.parents):
        if os.path.lexists(step):
            if not os.path.isdir(step):
                return f"{'it' if step == folder else step} exists and is not a folder"
            break
    return err.strerror or str(err)


class TuneCache:
    """Tuning results on disk, one JSON file per key (see module docstring)."""

    def __init__(self, root=None):
        if root is not None:
            if not isinstance(root, (str, os.PathLike)) or not isinstance(os.fspath(root), str):
                raise OptionError(
                    f"cache_dir must be a folder path, got {type(root).__name__} {root!r:.60}"
                )
            if not os.fspath(root) or "\x00" in os.fspath(root):
                raise OptionError(
                    f"cache_dir {os.fspath(root)!r:.80} is not a folder path (empty or holds "
                    "a NUL byte); give a folder, or cache=False"
                )
        self.root = Path(root) if root is not None else default_cache_dir()
        self._warned: set[str] = set()

    def path(self, key: str) -> Path:
        """The file of ``key`` (an alphanumeric structural hash)."""
        if not key.isalnum():
            raise ValueError(f"cache key must be alphanumeric, got {key!r}")
        return self.root / f"tune-{key}.json"

    def warn(self, path, message: str, stacklevel: int = 3) -> None:
        """Warn once per file and cache object: one tune gives one warning per problem
        (an entry that is a folder is refused when read, and again when written)."""
        if str(path) in self._warned:
            return
        self._warned.add(str(path))
        warnings.warn(message, AneforgeWarning, stacklevel=stacklevel)

    def get(self, key: str) -> dict | None:
        """The stored entry for ``key``, or None (missing; or unreadable or corrupt:
        warned and ignored)."""
        path = self.path(key)
        if not os.path.lexists(path):
            return None  # a miss (also when the folder is missing or is a file)
        try:
            raw = read_regular_file(path, "path", limit=MAX_ENTRY_BYTES)
        except FileReadError as err:
            if not os.path.lexists(path):
                return None  # removed by another writer meanwhile
            self.warn(
                path,
                f"ignoring unreadable tuning cache entry {path} ({_read_problem(path, err)}); "
                "it will be re-tuned",
                stacklevel=4,
            )
            return None
        try:
            entry = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            problem = f"not UTF-8 at byte {err.start}"
        except RecursionError:
            problem = "JSON nested too deeply"
        except ValueError as err:  # JSONDecodeError, and ints past Python's digit limit
            problem = f"not JSON: {err}"
        else:
            if not isinstance(entry, dict):
                problem = f"a JSON {type(entry).__name__}, not an object"
            elif not (type(entry.get("schema")) is int and entry["schema"] == SCHEMA_VERSION):
                problem = f"schema {entry.get('schema')!r:.40}, not {SCHEMA_VERSION}"
            elif entry.get("key") != key:
                problem = f"key {entry.get('key')!r:.20}, not this entry's key"
            elif "data" not in entry:
                problem = "no data"
            else:
                problem = entry_problem(entry["data"])
        if problem is not None:
            self.warn(
                path,
                f"ignoring corrupt tuning cache entry {path} ({problem}); it will be re-tuned",
                stacklevel=4,
            )
            return None
        return entry["data"]

    def put(self, key: str, data: dict) -> bool:
        """Store ``data`` for ``key`` atomically (temp file + rename); whether it was
        stored. A write that fails is a warning (the caller keeps its result) and leaves
        no temp file; stale temp files of killed writers are removed first."""
        path = self.path(key)
        text = json.dumps(
            {"schema": SCHEMA_VERSION, "key": key, "data": data}, indent=1, sort_keys=True
        )  # before touching the disk: a payload that cannot be serialized is a bug, raised
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            self.warn(
                path,
                f"cannot create the tuning cache folder {path.parent} "
                f"({_folder_problem(path.parent, err)}); the tune result is returned but "
                "not cached",
                stacklevel=4,
            )
            return False
        self._remove_stale_temp_files(path.parent)
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX, suffix=_TMP_SUFFIX)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
            tmp = None
        except OSError as err:
            self.warn(
                path,
                f"cannot write tuning cache entry {path} ({err.strerror or err}); the tune "
                "result is returned but not cached",
                stacklevel=4,
            )
            return False
        finally:
            if tmp is not None:  # failed or interrupted: leave nothing behind
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
        return True

    @staticmethod
    def _remove_stale_temp_files(folder: Path) -> None:
        """Remove the temp files a killed writer left (ours by name, older than
        :data:`STALE_TMP_S`, files or links only). A failure here costs nothing."""
        now = time.time()
        try:
            names = [n for n in os.listdir(folder) if n.startswith(_TMP_PREFIX)]
        except OSError:
            return
        for name in names:
            if not name.endswith(_TMP_SUFFIX):
                continue
            tmp = folder / name
            try:
                info = os.lstat(tmp)
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                    continue
                if now - info.st_mtime > STALE_TMP_S:
                    os.unlink(tmp)
            except OSError:
                continue  # another writer removed it first, or the folder is read-only
