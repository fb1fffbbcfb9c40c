"""Reading an ONNX model as untrusted input, for :mod:`.onnx_import`: bytes, a path or
an ``onnx.ModelProto`` in, a model that ``onnx.checker`` accepts out.

Rules (the contract tests/io/test_onnx_hostile.py checks; every refusal is an
:class:`~.onnx_errors.OnnxImportError` with a one-line message):

- A path must name a regular file of at most ``$ANEFORGE_MAX_FILE_BYTES`` bytes
  (:func:`aneforge.limits.read_regular_file`): a FIFO, a device such as ``/dev/zero``
  behind a symlink, or a folder is refused before anything is read.
- Bytes that do not parse as a ModelProto (truncated, corrupt) are refused, naming
  protobuf's reason.
- External data (a tensor whose bytes live in another file) is read from the model's
  folder when the model came from a path, else from ``base_dir=``. Bytes and ModelProtos
  have no folder: their external data is refused unless ``base_dir`` is given, never
  looked up in the current folder. A location that is absolute, climbs with ``..`` or
  leads (through a symlink) out of that folder is refused; each file is read like a
  model file (regular, size-capped), and ``offset``/``length`` must lie inside it.
- Opset: the default domain must be no newer than the installed ``onnx`` package knows.
  An older one than 13 is upgraded to 13 in memory by ``onnx.version_converter``
  (:mod:`.onnx_upgrade`: the original is checked structurally first, the IR version is
  raised to what opset 13 needs); a model the converter cannot upgrade is refused with
  the converter's reason, and an upgraded one carries the note "upgraded from opset N to
  13 by onnx.version_converter" (appended to ``notes=``, else warned as
  :class:`~.onnx_errors.OnnxImportWarning`).
- Then ``onnx.checker.check_model(model, full_check=True)``: structure, single
  assignment of every name, attribute types, tensor sizes and strict shape and type
  inference (run as its two steps, so that the inferred model serves the importer).
  Its reason becomes the error's message (for an upgraded model the check runs on the
  converter's output, and the message says so). Where strict inference fails only inside a
  function body because a node omits an attribute with a schema default (ONNX's
  MeanVarianceNormalization body needs ``axes`` spelled out), it is repeated on a copy
  with the defaults filled in.

Example:
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
    ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> model, opset, _ = load_model(onnx, m.SerializeToString())
    >>> opset, model.graph.node[0].op_type
    (17, 'Relu')
    >>> try:
    ...     load_model(onnx, m.SerializeToString()[:-3])
    ... except OnnxImportError as err:
    ...     print(str(err)[:54])
    from_onnx: the given bytes are not an ONNX model: prot
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import FileReadError
from ..limits import read_regular_file
from .onnx_errors import OnnxImportError, OnnxImportWarning
from .onnx_upgrade import upgrade_note, upgrade_opset

__all__ = ["DEFAULT_DOMAINS", "MIN_OPSET", "load_model", "one_line"]

MIN_OPSET = 13
DEFAULT_DOMAINS = ("", "ai.onnx")
_PROTOBUF_MAX = 2**31 - 1  # protobuf cannot serialize or parse a larger message


def one_line(err) -> str:
    """An exception's text on one line (onnx's messages span several)."""
    text = " ".join(str(err).split())
    return text or type(err).__name__


def load_model(onnx, model, base_dir=None, notes=None):
    """``(proto, opset, inferred)``: ``model`` (ModelProto, path or bytes) read, its
    external data inlined, upgraded to opset 13 when older, and checked by
    ``onnx.checker`` (full check); its default-domain opset (13 after an upgrade); and
    the model with ONNX's inferred shapes (None for a model past 2 GiB, which only its
    file could check).

    ``notes``: a list the upgrade's note is appended to, for the caller to put on the
    graph it returns; without one the note is warned as an ``OnnxImportWarning``.
    The caller's ModelProto is never changed (external data goes into a copy, the
    upgrade makes a new model).

    Example:
        >>> import onnx
        >>> from onnx import TensorProto, helper
        >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
        >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        >>> old = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
        >>> said = []
        >>> proto, opset, _ = load_model(onnx, old, notes=said)
        >>> opset, said
        (13, ['from_onnx: the model was upgraded from opset 9 to 13 by onnx.version_converter'])
    """
    path, serialized, owned = None, None, False
    if isinstance(model, onnx.ModelProto):
        proto, label = model, "the ModelProto"
    elif isinstance(model, (bytes, bytearray, memoryview)):
        serialized, label = bytes(model), "the given bytes"
        proto, owned = _parse(onnx, serialized, label), True
    elif isinstance(model, str) or hasattr(model, "__fspath__"):
        path = Path(os.fsdecode(os.fspath(model)))
        try:
            serialized = read_regular_file(path, "from_onnx: model")
        except FileReadError as err:
            raise OnnxImportError(str(err)) from None
        label = f"'{path}'"
        proto, owned = _parse(onnx, serialized, label), True
    else:
        raise OnnxImportError(
            f"from_onnx: expected an onnx.ModelProto, a path or bytes, got {type(model).__name__}"
        )
    base = _base_dir(base_dir, path)
    external = _external(onnx, proto)
    if external:
        _refuse_without_folder(external, base, label)
        if not owned:
            proto = _copy(onnx, proto)
            external = _external(onnx, proto)
        files: dict = {}
        for tensor in external:
            _read_into(onnx, tensor, base, files)
        serialized = None  # the bytes no longer describe the model
    opset = check_opset(onnx, proto)
    if opset >= MIN_OPSET:
        return proto, opset, _check(onnx, proto, serialized, path if base_dir is None else None)
    upgraded = upgrade_opset(onnx, proto, opset, MIN_OPSET)
    inferred = _check(onnx, upgraded, None, None, original=(proto, opset))
    note = upgrade_note(opset, MIN_OPSET)
    if notes is None:
        warnings.warn(note, OnnxImportWarning, stacklevel=3)  # from_onnx's caller
    else:
        notes.append(note)
    return upgraded, MIN_OPSET, inferred


def _parse(onnx, data: bytes, label: str):
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError, or its recursion limit
        raise OnnxImportError(
            f"from_onnx: {label} are not an ONNX model: protobuf cannot parse them "
            f"({one_line(err)}); give an .onnx file or ModelProto.SerializeToString() bytes"
            if label == "the given bytes"
            else f"from_onnx: {label} is not an ONNX model: protobuf cannot parse it "
            f"({one_line(err)}); is it truncated or another format?"
        ) from None
    return proto


def _copy(onnx, proto):
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _base_dir(base_dir, path):
    """The folder external data is read from: ``base_dir``, else the model's folder."""
    if base_dir is None:
        return None if path is None else path.parent
    if not (isinstance(base_dir, str) or hasattr(base_dir, "__fspath__")):
        raise OnnxImportError(
            f"from_onnx: base_dir must be a folder path, got {type(base_dir).__name__}"
        )
    base = Path(os.fsdecode(os.fspath(base_dir)))
    if not base.is_dir():
        raise OnnxImportError(
            f"from_onnx: base_dir={str(base)!r} is not a folder; give the folder that holds "
            "the model's external data files"
        )
    return base


# ---- external data ----------------------------------------------------------------------


def _tensors(model) -> list:
    """Every TensorProto in ``model``: initializers, sparse initializers and attribute
    tensors of the main graph, its subgraphs, training graphs and local functions.
    Iterative, so nesting depth does not matter."""
    found = []
    graphs = [model.graph]
    for info in model.training_info:
        graphs += [info.initialization, info.algorithm]
    node_lists = [f.node for f in model.functions]
    while graphs or node_lists:
        if graphs:
            g = graphs.pop()
            found.extend(g.initializer)
            for s in g.sparse_initializer:
                found += [s.values, s.indices]
            node_lists.append(g.node)
            continue
        for node in node_lists.pop():
            for a in node.attribute:
                if a.HasField("t"):
                    found.append(a.t)
                found.extend(a.tensors)
                if a.HasField("sparse_tensor"):
                    found += [a.sparse_tensor.values, a.sparse_tensor.indices]
                for s in a.sparse_tensors:
                    found += [s.values, s.indices]
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)
    return found


def _external(onnx, proto) -> list:
    return [t for t in _tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]


def _entries(tensor) -> dict:
    info: dict = {}
    for entry in tensor.external_data:
        if entry.key in info:
            raise OnnxImportError(
                f"from_onnx: tensor '{tensor.name}' names its external-data key "
                f"'{entry.key}' twice ({info[entry.key]!r} and {entry.value!r})"
            )
        info[entry.key] = entry.value
    return info


def _refuse_without_folder(external: list, base, label: str) -> None:
    if base is not None:
        return
    first = external[0]
    where = _entries(first).get("location", "")
    raise OnnxImportError(
        f"from_onnx: tensor '{first.name}' keeps its data in the external file "
        f"{where!r} ({len(external)} tensor(s) do), and {label} has no folder to read "
        "it from: pass base_dir= naming the folder that holds it, or load the model "
        "from its path (external data is never looked up in the current folder)"
    )


def _read_into(onnx, tensor, base: Path, files: dict) -> None:
    info = _entries(tensor)
    path = _resolve(base, info.get("location", ""), tensor.name)
    offset = _count(info.get("offset", "0"), "offset", tensor.name)
    data = files.get(path)
    if data is None:
        try:
            data = read_regular_file(path, f"from_onnx: external data of tensor '{tensor.name}'")
        except FileReadError as err:
            raise OnnxImportError(str(err)) from None
        files[path] = data
    end = len(data)
    if "length" in info:
        end = offset + _count(info["length"], "length", tensor.name)
    if offset > len(data) or end > len(data):
        raise OnnxImportError(
            f"from_onnx: tensor '{tensor.name}' reads bytes {offset}..{end} of external "
            f"file '{path.name}', which holds {len(data)} bytes; the file is truncated or "
            "belongs to another model"
        )
    tensor.raw_data = data[offset:end]
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


def _count(text: str, key: str, tensor: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise OnnxImportError(
            f"from_onnx: tensor '{tensor}' has external-data {key}={text!r}; it must be a "
            "non-negative integer"
        )
    return value


def _resolve(base: Path, location: str, tensor: str) -> Path:
    """The file ``location`` names inside ``base``, refusing anything that leaves it."""
    said = f"from_onnx: tensor '{tensor}' names external data file {location!r}"
    if not location or "\x00" in location:
        raise OnnxImportError(
            f"{said}, which is not a file name; it must be a path relative to {str(base)!r}"
        )
    pure = PurePosixPath(location.replace("\\", "/"))
    if pure.is_absolute() or PureWindowsPath(location).drive:
        raise OnnxImportError(
            f"{said}, an absolute path; external data must lie inside the model's folder "
            f"{str(base)!r}, named relative to it"
        )
    if ".." in pure.parts:
        raise OnnxImportError(
            f"{said}, which climbs out of the model's folder {str(base)!r} with '..'; "
            "external data must lie inside it"
        )
    root = os.path.realpath(base)
    real = os.path.realpath(os.path.join(root, *pure.parts))
    if os.path.commonpath([root, real]) != root:
        raise OnnxImportError(
            f"{said}, which leads through a symlink to {real!r}, outside the model's folder "
            f"{root!r}; external data must lie inside it"
        )
    return Path(real)


# ---- opset and checker ------------------------------------------------------------------


def check_opset(onnx, proto) -> int:
    """The default-domain opset of ``proto``, refused past what onnx knows (an older
    one than 13 is for :func:`.onnx_upgrade.upgrade_opset` to lift)."""
    versions = {o.domain: o.version for o in proto.opset_import}
    version = versions.get("", versions.get("ai.onnx"))
    newest = int(onnx.defs.onnx_opset_version())
    if version is None:  # only other domains: their ops are listed as unsupported
        return newest
    if version > newest:
        raise OnnxImportError(
            f"from_onnx: the model declares ONNX opset {version}, but the installed onnx "
            f"package knows opsets up to {newest}; re-export it at opset {newest} or older, "
            "or upgrade onnx"
        )
    return int(version)


def _check(onnx, proto, serialized, path, original=None):
    """``onnx.checker.check_model(full_check=True)`` as its two steps (the structural
    check, then strict shape and type inference), so the inferred model is kept for the
    importer; a refusal becomes an OnnxImportError. Returns the inferred ModelProto, or
    None when only the file could be checked (a model past 2 GiB).

    ``original``: ``(proto, opset)`` of the model ``proto`` was upgraded from. A refusal
    of the upgraded model then names the original's own fault when the full check
    refuses the original too, else the conversion."""
    try:
        if serialized is None:
            serialized = proto.SerializeToString()
        too_big = len(serialized) > _PROTOBUF_MAX
    except Exception:  # a ModelProto past protobuf's 2 GiB cannot be serialized
        too_big = True
    try:
        if not too_big:
            onnx.checker.check_model(serialized)
            try:
                return onnx.shape_inference.infer_shapes(
                    inference_skeleton(onnx, proto), check_type=True, strict_mode=True
                )
            except onnx.shape_inference.InferenceError:
                return _inferred_with_defaults(onnx, proto)
        if path is not None:  # the checker reads the file and its external data itself
            onnx.checker.check_model(str(path), full_check=True)
            return None
        raise OnnxImportError(
            "from_onnx: the model is over 2 GiB once its external data is read in, so "
            "onnx.checker can check it only from its file: load it by path, with its "
            "external data beside it"
        )
    except OnnxImportError:
        raise
    except Exception as err:  # ValidationError, InferenceError, ValueError, ...
        reason = one_line(err).rstrip(".")
        if original is not None:
            _refuse_upgraded(onnx, original, reason)
        raise OnnxImportError(
            f"from_onnx: onnx.checker refuses the model: {reason}; fix the model or the "
            "exporter that wrote it"
        ) from None


#: Initializers of more elements go into shape inference as headers only.
_HEADER_ONLY_ELEMENTS = 1 << 14


def inference_skeleton(onnx, proto):
    """``proto`` for shape inference: each large initializer of the main graph as its
    header only (name, type, dims), marked as external data, which inference never
    reads. Shapes depend on the values of small integer tensors only (Reshape's shape,
    Slice's starts...), which stay whole, so the shapes and types inferred are the full
    model's; a 500 MB model then serializes for inference in milliseconds instead of
    seconds (the structural check has already read every byte)."""
    big = [math.prod(t.dims) > _HEADER_ONLY_ELEMENTS for t in proto.graph.initializer]
    if not any(big):
        return proto
    skeleton = onnx.ModelProto()
    _copy_fields(proto, skeleton, skip="graph")
    _copy_fields(proto.graph, skeleton.graph, skip="initializer")
    for t, header_only in zip(proto.graph.initializer, big):
        if not header_only:
            skeleton.graph.initializer.append(t)
            continue
        header = skeleton.graph.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
        header.data_location = onnx.TensorProto.EXTERNAL
        header.external_data.add(key="location", value="header-only")
    return skeleton


def _copy_fields(source, target, skip: str) -> None:
    """Every set field of protobuf message ``source`` but ``skip`` into ``target``."""
    for fd, value in source.ListFields():
        if fd.name == skip:
            continue
        if hasattr(value, "CopyFrom"):
            getattr(target, fd.name).CopyFrom(value)
        elif hasattr(value, "extend") and not isinstance(value, (str, bytes)):
            getattr(target, fd.name).extend(value)
        else:
            setattr(target, fd.name, value)


def _refuse_upgraded(onnx, original, reason: str) -> None:
    """The error for an upgraded model the checker refuses: the original's own reason
    where the full check refuses it at its opset too, else the conversion's fault."""
    proto, opset = original
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as err:  # the original is at fault, at its own opset
        raise OnnxImportError(
            f"from_onnx: onnx.checker refuses the model (opset {opset}): "
            f"{one_line(err).rstrip('.')}; fix the model or the exporter that wrote it"
        ) from None
    raise OnnxImportError(
        f"from_onnx: onnx.checker accepts the model at its opset {opset} but refuses it as "
        f"onnx.version_converter upgraded it to opset {MIN_OPSET}: {reason}; re-export "
        f"the model at opset {MIN_OPSET} or newer"
    )


def _inferred_with_defaults(onnx, proto):
    """Strict inference again on a copy whose standard nodes spell out every attribute
    that has a schema default: the same model, but ONNX's inference of some function
    bodies (MeanVarianceNormalization's ``axes``) fails on an omitted default. Its
    refusal, if any, is the model's own fault and is what the caller reports."""
    copy = _copy(onnx, proto)
    _fill_defaults(onnx, copy)
    return onnx.shape_inference.infer_shapes(copy, check_type=True, strict_mode=True)


def _fill_defaults(onnx, model) -> None:
    """Add each standard node's omitted attributes that have schema defaults, in every
    graph and local function of ``model`` (iteratively)."""
    versions = {o.domain: o.version for o in model.opset_import}
    top = versions.get("", versions.get("ai.onnx", 1))
    work = [(model.graph.node, top)]
    for f in model.functions:
        own = {o.domain: o.version for o in f.opset_import}
        work.append((f.node, own.get("", own.get("ai.onnx", top))))
    while work:
        nodes, opset = work.pop()
        for node in nodes:
            for a in node.attribute:
                if a.HasField("g"):
                    work.append((a.g.node, opset))
                work.extend((g.node, opset) for g in a.graphs)
            if node.domain not in DEFAULT_DOMAINS:
                continue
            try:
                schema = onnx.defs.get_schema(node.op_type, opset, "")
            except Exception:  # the checker reports unknown ops itself
                continue
            present = {a.name for a in node.attribute}
            for name, spec in schema.attributes.items():
                if name not in present and spec.default_value.name:
                    node.attribute.append(spec.default_value)
