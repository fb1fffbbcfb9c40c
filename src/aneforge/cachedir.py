"""Where aneforge keeps what it caches on disk (tuning results, compiled kernels).

``$ANEFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/aneforge``, else ``~/.cache/aneforge``.

Example:
    >>> import os
    >>> from aneforge.cachedir import default_cache_dir
    >>> default_cache_dir().name == "aneforge" or "ANEFORGE_CACHE_DIR" in os.environ
    True
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_cache_dir"]


def default_cache_dir() -> Path:
    """The cache folder per the environment (see module docstring)."""
    if os.environ.get("ANEFORGE_CACHE_DIR"):
        return Path(os.environ["ANEFORGE_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "aneforge"
    return Path.home() / ".cache" / "aneforge"
