"""Where a Core ML package goes: the path rules of :func:`~aneforge.io.coreml_export.
export_coreml` and ``aneforge check --export`` / ``aneforge export -o``.

aneforge never deletes what it did not write. A path that already exists is replaced
only when it is a package aneforge recognizes as its own (:func:`foreign_reason` is
None): a real folder holding exactly the standard ``.mlpackage`` layout coremltools
writes (``Manifest.json``, ``Data/com.apple.CoreML/model.mlmodel`` and an optional
``weights`` folder of plain files) whose model carries aneforge's mark, the metadata key
:data:`MARK` every aneforge export sets. Anything else (a file, a link, a folder with
other files in it, a package another tool wrote) is refused with the reason, unless the
caller passes ``force=True`` (``--force``), which replaces it.

The package is written to a fresh hidden staging folder beside ``path`` and renamed into
place; a package it replaces is moved aside first and put back if the rename fails, so
an error never leaves the path half written or empty.

Example:
    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> (folder / "notes.mlpackage").mkdir()
    >>> _ = (folder / "notes.mlpackage" / "a.txt").write_text("")
    >>> foreign_reason(folder / "notes.mlpackage")
    "a folder holding other files (a.txt), not a Core ML package's 'Data' and 'Manifest.json'"
    >>> try:
    ...     check_package_path(folder / "notes.mlpackage")
    ... except ExportError as err:
    ...     print(str(err)[-62:])
    remove it yourself, or pass force=True (--force) to replace it
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ..errors import AneforgeError
from ..limits import read_regular_file

__all__ = ["MARK", "ExportError", "check_package_path", "foreign_reason", "write_package"]

#: The user-defined metadata key every aneforge export carries (its value: the version).
MARK = "com.aneforge.version"
#: The largest ``Manifest.json`` read when recognizing a package.
MANIFEST_BYTES = 1 << 20
_MODEL = "com.apple.CoreML/model.mlmodel"


class ExportError(AneforgeError, ValueError):
    """A program cannot be exported as asked (the message says what and what to do)."""


def _kind(path: Path) -> str:
    """'folder', 'file', 'link' or 'other' (FIFO, socket, device), links not followed."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "folder"
    return "file" if stat.S_ISREG(mode) else "other"


def _only(folder: Path, allowed: dict[str, str], required: set[str]) -> str | None:
    """Why ``folder`` is not exactly ``allowed`` (name -> kind) with ``required`` in it."""
    names = sorted(os.listdir(folder))
    extra = [n for n in names if n not in allowed]
    if extra:
        shown = ", ".join(extra[:3]) + (", ..." if len(extra) > 3 else "")
        want = " and ".join(repr(n) for n in sorted(allowed))
        return f"a folder holding other files ({shown}), not a Core ML package's {want}"
    missing = sorted(required - set(names))
    if missing:
        return f"a folder without {missing[0]!r} in {str(folder)!r}"
    for name in names:
        if _kind(folder / name) != allowed[name]:
            return f"{str(folder / name)!r} is not a {allowed[name]} (a link or a special file)"
    return None


def foreign_reason(path) -> str | None:
    """None when ``path`` is a Core ML package aneforge wrote (see the module
    docstring), else why not, in words. Reads regular files only, size-capped
    (:func:`aneforge.limits.read_regular_file`); never follows links."""
    p = Path(path)
    try:
        kind = _kind(p)
        if kind != "folder":
            return {"link": "a symbolic link", "file": "a file"}.get(kind, "a special file")
        why = _only(p, {"Manifest.json": "file", "Data": "folder"}, {"Manifest.json", "Data"})
        why = why or _only(p / "Data", {"com.apple.CoreML": "folder"}, {"com.apple.CoreML"})
        core = p / "Data" / "com.apple.CoreML"
        why = why or _only(core, {"model.mlmodel": "file", "weights": "folder"}, {"model.mlmodel"})
        if why:
            return why
        if (core / "weights").exists():
            for name in os.listdir(core / "weights"):
                if _kind(core / "weights" / name) != "file":
                    return f"its weights folder holds {name!r}, which is not a file"
        manifest = json.loads(read_regular_file(p / "Manifest.json", "Manifest.json",
                                                limit=MANIFEST_BYTES))  # fmt: skip
        root = manifest["itemInfoEntries"][manifest["rootModelIdentifier"]]
        if root["path"] != _MODEL:
            return f"its Manifest.json names {root['path']!r} as the model, not {_MODEL!r}"
        data = read_regular_file(core / "model.mlmodel", "model.mlmodel")
    except (OSError, ValueError, KeyError, TypeError, RecursionError, AneforgeError) as err:
        return f"not a package aneforge can read ({type(err).__name__}: {err})"
    if not _marked(data):
        return f"a Core ML package without aneforge's mark (metadata {MARK!r})"
    return None


#: Protobuf field numbers on the path to the user metadata of a Core ML ``Model`` spec:
#: Model.description (2) -> ModelDescription.metadata (100) -> Metadata.userDefined (100),
#: whose map entries hold the key in field 1.
_METADATA_PATH = (2, 100, 100)


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _spans(data: bytes, span: tuple[int, int], number: int):
    """The (start, end) spans of the length-delimited fields ``number`` of the protobuf
    message in ``data[start:end]``; ValueError on malformed bytes."""
    pos, end = span
    while pos < end:
        key, pos = _varint(data, pos, end)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(data, pos, end)
            continue
        if wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            size, pos = _varint(data, pos, end)
            if pos + size > end:
                raise ValueError("a field runs past its message")
            if key >> 3 == number:
                yield pos, pos + size
            pos += size
        else:
            raise ValueError(f"wire type {wire} is not used by Core ML specs")
        if pos > end:
            raise ValueError("a field runs past its message")


def _marked(data: bytes) -> bool:
    """Whether a ``model.mlmodel`` spec carries :data:`MARK` among its user metadata
    keys. Reads the protobuf wire format itself (a fixed depth of four messages), so
    that recognizing a package needs neither coremltools nor trust in the bytes."""
    mark = MARK.encode()
    spans = [(0, len(data))]
    try:
        for number in _METADATA_PATH:
            spans = [inner for outer in spans for inner in _spans(data, outer, number)]
        return any(data[a:b] == mark for entry in spans for a, b in _spans(data, entry, 1))
    except ValueError:
        return False


def _nearest_existing(folder: Path) -> Path:
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    return folder


def check_package_path(path, force: bool = False, what: str = "export path") -> Path:
    """``path`` as a Path if a package can be written there, else :class:`ExportError`
    saying why: empty, not ending in ``.mlpackage``, under a file or a folder that cannot
    be written, or an existing path aneforge did not write (unless ``force``). Writes
    nothing but a probe folder it removes at once. ``what`` names the path in messages
    (the CLI passes its option, ``--export``).

    Example:
        >>> check_package_path("out/model.mlpackage").name
        'model.mlpackage'
    """
    text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(text, str):
        raise ExportError(f"{what}: expected a path (str or Path), got {path!r}")
    if not text.strip():
        raise ExportError(f"{what} {text!r} is empty; give the package to write, e.g. "
                          "model.mlpackage")  # fmt: skip
    p = Path(text)
    if p.suffix != ".mlpackage":
        raise ExportError(f"{what} {text!r} must end in '.mlpackage'")
    where = _nearest_existing(p.parent)
    if not where.is_dir():
        raise ExportError(f"{what} {text!r}: {str(where)!r} is not a folder (a file or "
                          "a broken link); choose a path inside a folder")  # fmt: skip
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".aneforge-probe-", dir=where))
    except OSError as err:
        raise ExportError(f"{what} {text!r}: cannot write into {str(where)!r} "
                          f"({err.strerror}); choose a writable folder") from None  # fmt: skip
    if os.path.lexists(p) and not force:
        why = foreign_reason(p)
        if why is not None:
            raise ExportError(
                f"{what} {text!r} exists and is {why}; aneforge replaces only packages "
                "it wrote: choose another path, remove it yourself, or pass force=True "
                "(--force) to replace it"
            )
    return p


def write_package(model, path, force: bool = False) -> Path:
    """Save the coremltools ``model`` at ``path`` (checked by :func:`check_package_path`
    again, just before writing) through a staging folder beside it; see the module
    docstring. OSErrors become :class:`ExportError`."""
    p = check_package_path(path, force)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent))
    except OSError as err:
        raise ExportError(f"export path {str(p)!r}: cannot create its folder "
                          f"({err.strerror})") from None  # fmt: skip
    try:
        new = staging / p.name
        model.save(os.path.abspath(new))  # absolute: coremltools expands a leading '~'
        old = staging / "replaced" if os.path.lexists(p) else None
        if old is not None:
            os.rename(p, old)
        try:
            os.rename(new, p)
        except OSError:
            if old is not None:
                os.rename(old, p)
            raise
    except OSError as err:
        raise ExportError(f"export path {str(p)!r}: cannot write the package "
                          f"({err.strerror or err})") from None  # fmt: skip
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return p
