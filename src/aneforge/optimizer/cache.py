"""The tuning cache: JSON files keyed by a structural hash, written atomically.

Location: ``$ANEFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/aneforge``, else
``~/.cache/aneforge``. Entries are plain JSON with a schema version (never pickles); an
entry that does not parse or does not match the schema is ignored with a warning.

Example:
    >>> import os, tempfile
    >>> from aneforge.optimizer.cache import TuneCache
    >>> cache = TuneCache(tempfile.mkdtemp())
    >>> cache.put("k" * 64, {"variant": "routes", "times_s": {"routes": 1e-4}})
    >>> cache.get("k" * 64)["variant"]
    'routes'
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

from ..errors import AneforgeWarning

SCHEMA_VERSION = 1


def default_cache_dir() -> Path:
    """The cache folder per the environment (see module docstring)."""
    if os.environ.get("ANEFORGE_CACHE_DIR"):
        return Path(os.environ["ANEFORGE_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "aneforge"
    return Path.home() / ".cache" / "aneforge"


class TuneCache:
    """Tuning results on disk, one JSON file per key."""

    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def _path(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"cache key must be alphanumeric, got {key!r}")
        return self.root / f"tune-{key}.json"

    def get(self, key: str) -> dict | None:
        """The stored entry for ``key``, or None (missing, or corrupt: warned and ignored)."""
        path = self._path(key)
        try:
            text = path.read_text()
        except OSError:
            return None
        try:
            entry = json.loads(text)
            if entry.get("schema") != SCHEMA_VERSION or entry.get("key") != key:
                raise ValueError("schema or key mismatch")
            if not isinstance(entry["data"].get("variant"), str):
                raise ValueError("no variant name")
            return entry["data"]
        except (ValueError, KeyError, AttributeError, TypeError) as err:
            warnings.warn(
                f"ignoring corrupt tuning cache entry {path} ({err}); it will be re-tuned",
                AneforgeWarning,
                stacklevel=2,
            )
            return None

    def put(self, key: str, data: dict) -> None:
        """Store ``data`` for ``key`` atomically (temp file + rename)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"schema": SCHEMA_VERSION, "key": key, "data": data}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tune-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(entry, fh, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
