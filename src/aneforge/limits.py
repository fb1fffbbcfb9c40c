"""Size limits on what aneforge allocates for a user and on the files it reads.

Files and models aneforge reads are untrusted: a few hundred bytes of ONNX can ask for a
``Tile`` by 2**33, and a path can name a FIFO or ``/dev/zero``. Every allocation that
import-time folding, ``check``'s random inputs or an emulator run would make on a user's
behalf is checked against :func:`max_elements`, and every file is read through
:func:`read_regular_file`, which takes regular files only and refuses one past its cap.

Limits (configurable through the environment, read at each call):

- ``ANEFORGE_MAX_ELEMENTS``: the most elements one tensor may hold (default 2**28,
  512 MiB of fp16 or 2 GiB of float64).
- ``ANEFORGE_MAX_FILE_BYTES``: the largest model or external-data file read (default
  2**32, 4 GiB); smaller files such as tune-cache entries take their own cap.

Example:
    >>> from aneforge.limits import check_elements
    >>> check_elements((1024, 1024), "Tile output")
    1048576
    >>> try:
    ...     check_elements((2**20, 2**20), "Expand output")
    ... except SizeLimitError as err:
    ...     print(str(err)[:60])
    Expand output: 1099511627776 elements (shape (1048576, 10485
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

from .errors import FileReadError, OptionError, SizeLimitError

__all__ = ["check_elements", "max_elements", "max_file_bytes", "read_regular_file"]

DEFAULT_MAX_ELEMENTS = 2**28
DEFAULT_MAX_FILE_BYTES = 2**32
_ELEMENTS_ENV = "ANEFORGE_MAX_ELEMENTS"
_FILE_ENV = "ANEFORGE_MAX_FILE_BYTES"


def _env_limit(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise OptionError(f"${name}={raw!r} must be a positive integer (default {default})")
    return value


def max_elements() -> int:
    """The most elements one tensor may hold (``$ANEFORGE_MAX_ELEMENTS``, default 2**28)."""
    return _env_limit(_ELEMENTS_ENV, DEFAULT_MAX_ELEMENTS)


def max_file_bytes() -> int:
    """The largest model file read (``$ANEFORGE_MAX_FILE_BYTES``, default 2**32)."""
    return _env_limit(_FILE_ENV, DEFAULT_MAX_FILE_BYTES)


def _human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} PiB"  # unreachable


def check_elements(shape, what: str, limit: int | None = None) -> int:
    """The element count of ``shape`` (a tuple of ints, or a count), or a
    :class:`SizeLimitError` naming ``what`` when it passes ``limit`` (default
    :func:`max_elements`). Python ints, so the count never overflows."""
    if isinstance(shape, (int,)) and not isinstance(shape, bool):
        count, dims = int(shape), None
    else:
        dims = tuple(int(d) for d in shape)
        count = math.prod(dims)
    cap = max_elements() if limit is None else int(limit)
    if count > cap:
        where = f" (shape {dims}, {_human(2.0 * count)} as fp16)" if dims else ""
        raise SizeLimitError(
            f"{what}: {count} elements{where} pass the limit of {cap}; raise "
            f"${_ELEMENTS_ENV} if this size is meant"
        )
    return count


def read_regular_file(path, what: str, limit: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file (symlinks followed) of at most
    ``limit`` bytes (default :func:`max_file_bytes`); else a :class:`FileReadError`
    saying why. FIFOs, devices and folders are refused before any read, and a file
    that grows past the limit while being read is refused too.

    Example:
        >>> import tempfile, os
        >>> fd, name = tempfile.mkstemp(); _ = os.write(fd, b"abc"); os.close(fd)
        >>> read_regular_file(name, "model")
        b'abc'
    """
    p = Path(path)
    cap = max_file_bytes() if limit is None else int(limit)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        raise FileReadError(f"{what} {str(p)!r}: no such file") from None
    except OSError as err:
        raise FileReadError(f"{what} {str(p)!r}: cannot read it ({err.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise FileReadError(f"{what} {str(p)!r} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise FileReadError(
            f"{what} {str(p)!r} is not a regular file (a FIFO, socket or device); "
            "give the path of a file"
        )
    # only the default cap is the user's to raise; an explicit one belongs to the caller
    advice = f"; raise ${_FILE_ENV} if it is meant" if limit is None else ""
    if info.st_size > cap:
        raise FileReadError(
            f"{what} {str(p)!r} holds {info.st_size} bytes, past the limit of {cap}{advice}"
        )
    try:
        with open(p, "rb") as fh:
            data = fh.read(cap + 1)
    except OSError as err:
        raise FileReadError(f"{what} {str(p)!r}: cannot read it ({err.strerror})") from None
    if len(data) > cap:
        raise FileReadError(
            f"{what} {str(p)!r} grew past the limit of {cap} bytes while read{advice}"
        )
    return data
