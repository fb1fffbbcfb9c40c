"""Reading a ``torch.export.save``d program (a ``.pt2`` archive) as untrusted input.

``torch.export.load`` unpickles parts of an archive (tensor subclasses, custom and
opaque objects, the legacy weight files, and the sample inputs, falling back to a full
unpickler when the restricted one refuses them) and runs AOTInductor code found in it.
aneforge never unpickles anything a user hands it, so :func:`read_exported_program`
reads the archive itself first and passes ``torch.export.load`` a rebuilt copy that
holds nothing to unpickle or run:

- the path must name a regular file within ``$ANEFORGE_MAX_FILE_BYTES``
  (:func:`aneforge.limits.read_regular_file`, as ONNX files); the bytes must be a zip
  archive whose entries share one root folder, whose ``archive_format`` says ``pt2``,
  and whose uncompressed entries together stay within the same limit;
- a weight or constant the payload configs mark as pickled (``use_pickle``), a custom
  or opaque object constant, or a legacy ``.pt`` weight file is refused, naming it;
- the copy keeps the programs (``models/*.json``), raw weights and constants and the
  archive's version entries; the sample inputs are emptied (so the program's
  ``example_inputs`` are None and input shapes come from its placeholders), and
  compiled artifacts (AOTInductor, ExecuTorch, MTIA) and extra files are left out.

Example:
    >>> import io, zipfile
    >>> buf = io.BytesIO()
    >>> with zipfile.ZipFile(buf, "w") as z:
    ...     z.writestr("m/archive_format", "onnx")
    >>> try:
    ...     safe_archive(buf.getvalue(), "'m.pt2'")
    ... except TorchImportError as err:
    ...     print(str(err)[:62])
    load_torch_file: 'm.pt2' is not a torch.export archive: its ar
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import PurePosixPath

from ..errors import FileReadError
from ..limits import max_file_bytes, read_regular_file
from .onnx_load import one_line
from .torch_errors import TorchImportError

__all__ = ["read_exported_program", "safe_archive"]

_WHAT = "load_torch_file"
#: Folders of the archive (under its root) whose files are copied as they are.
_KEPT_DIRS = ("models", "data/weights", "data/constants", ".data")
_KEPT_FILES = ("archive_format", "archive_version", "byteorder")
_SAMPLE_INPUTS = "data/sample_inputs"
_TENSOR_CONSTANT_PREFIX = "tensor_"


def read_exported_program(torch, path):
    """The ``torch.export.ExportedProgram`` saved at ``path``, read through
    :func:`safe_archive` (nothing in the file is unpickled or run)."""
    try:
        data = read_regular_file(path, f"{_WHAT}: file")
    except FileReadError as err:
        raise TorchImportError(str(err)) from None
    clean = safe_archive(data, f"'{path}'")
    try:
        return torch.export.load(io.BytesIO(clean))
    except Exception as err:  # torch's deserializer: a corrupt or foreign program
        raise TorchImportError(
            f"{_WHAT}: torch.export.load cannot read '{path}' ({one_line(err)}); was it "
            "written by torch.export.save of the same torch version?"
        ) from None


def safe_archive(data: bytes, label: str) -> bytes:
    """A copy of the ``.pt2`` archive ``data`` with nothing to unpickle or run (see the
    module docstring); :class:`TorchImportError` when it is not such an archive."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise TorchImportError(
            f"{_WHAT}: {label} is not a torch.export archive (not a zip file: "
            f"{one_line(err)}); give a file written by torch.export.save"
        ) from None
    root = _root(infos, label)
    total = sum(i.file_size for i in infos)
    cap = max_file_bytes()
    if total > cap:
        raise TorchImportError(
            f"{_WHAT}: {label} unpacks to {total} bytes, past the limit of {cap}; raise "
            "$ANEFORGE_MAX_FILE_BYTES if it is meant"
        )
    entries = {_relative(i.filename, root): i for i in infos if not i.is_dir()}
    fmt = _read(archive, entries, "archive_format", label)
    if fmt.strip() != b"pt2":
        raise TorchImportError(
            f"{_WHAT}: {label} is not a torch.export archive: its archive_format is "
            f"{fmt[:20]!r}, not 'pt2'"
        )
    for name in entries:
        if name.startswith(("data/weights/", "data/constants/")) and name.endswith(".pt"):
            raise TorchImportError(
                f"{_WHAT}: {label} keeps its tensors in the legacy pickled file '{name}'; "
                "aneforge does not unpickle files: save the program again with "
                "torch.export.save of a current torch"
            )
        if name.endswith("_config.json") and name.startswith(("data/weights/", "data/const")):
            _check_config(_read(archive, entries, name, label), name, label)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as clean:
        for name, info in entries.items():
            if name.startswith(_SAMPLE_INPUTS + "/"):
                clean.writestr(info.filename, b"")
            elif name in _KEPT_FILES or name.startswith(tuple(d + "/" for d in _KEPT_DIRS)):
                clean.writestr(info.filename, _read(archive, entries, name, label))
    return out.getvalue()


def _root(infos, label: str) -> str:
    roots = {PurePosixPath(i.filename).parts[0] for i in infos if i.filename.strip("/")}
    if len(roots) != 1:
        shown = sorted(roots)[:4]
        raise TorchImportError(
            f"{_WHAT}: {label} is not a torch.export archive: its entries do not share one "
            f"root folder (found {shown})"
        )
    return roots.pop()


def _relative(name: str, root: str) -> str:
    return name[len(root) + 1 :] if name.startswith(root + "/") else ""


def _read(archive, entries: dict, name: str, label: str) -> bytes:
    info = entries.get(name)
    if info is None:
        raise TorchImportError(
            f"{_WHAT}: {label} is not a torch.export archive: it has no '{name}' entry"
        )
    try:
        return archive.read(info)
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError) as err:
        raise TorchImportError(
            f"{_WHAT}: {label}: entry '{name}' cannot be read ({one_line(err)})"
        ) from None


def _check_config(raw: bytes, name: str, label: str) -> None:
    """Refuse a payload config that names a pickled weight or an object constant."""
    try:
        config = json.loads(raw)["config"]
        items = list(config.items())
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TorchImportError(
            f"{_WHAT}: {label}: '{name}' is not a payload config ({one_line(err)})"
        ) from None
    constants = name.startswith("data/constants/")
    for fqn, meta in items:
        if not isinstance(meta, dict):
            raise TorchImportError(f"{_WHAT}: {label}: '{name}' entry '{fqn}' is not an object")
        path = str(meta.get("path_name", ""))
        if meta.get("use_pickle") or (constants and not path.startswith(_TENSOR_CONSTANT_PREFIX)):
            raise TorchImportError(
                f"{_WHAT}: {label} stores '{fqn}' as a pickled object ({path!r}); aneforge "
                "does not unpickle files: export a program whose weights and constants are "
                "plain tensors"
            )
