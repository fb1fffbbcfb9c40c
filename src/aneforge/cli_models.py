"""What the ``aneforge`` command reads: its models (the bundled examples, ``.onnx`` and
``.pt2`` files), ``--shape`` and ``--input`` (arrays from ``.npy`` files).

Every file is untrusted: a model file must be a regular file, read size-capped by its
importer; ``.npy`` files are read without pickles (:mod:`aneforge.io.npy_input`). Each
mistake is an :class:`~aneforge.errors.OptionError` naming the option, the value and the
fix, raised before any work.

Example:
    >>> shapes_option(["x=1x3x8x8"])
    {'x': (1, 3, 8, 8)}
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import OptionError
from .graph.nn import EXAMPLES
from .io.npy_input import read_npy
from .io.onnx_import import OnnxImportError, from_onnx
from .io.torch_import import load_torch_file

#: The model files the command reads, by suffix.
MODEL_SUFFIXES = (".onnx", ".pt2")


class LoadedModel(NamedTuple):
    """A model the command checks or exports.

    Attributes:
        name: the example's name or the file's.
        inputs, outputs: its graph's input and output tensors.
        output_names: the file's output names (None for the bundled examples).
        partition: what ran where at import (``OnnxGraph.partition.lines()``: folded on
            the host, on the engine, the integer inputs' types); empty for examples.
    """

    name: str
    inputs: list
    outputs: list
    output_names: list | None
    partition: list


def load_models(spec: str | None, shapes=None) -> list[LoadedModel]:
    """The bundled examples, one of them, an ONNX file or a ``torch.export``ed program
    file (``.pt2``; both name their outputs), its inputs fixed to ``shapes`` (``{name:
    dims}``, :func:`shapes_option`; model files only).

    Example:
        >>> [(m.name, len(m.inputs)) for m in load_models("cnn")]
        [('cnn', 1)]
    """
    if shapes and not (spec or "").endswith(MODEL_SUFFIXES):
        raise OptionError(f"--shape {' '.join(shapes)}: --shape applies to an .onnx or .pt2 "
                          f"model; {spec or 'the bundled examples'} have fixed shapes")  # fmt: skip
    if spec is None:
        names = list(EXAMPLES)
    elif spec in EXAMPLES:
        names = [spec]
    elif spec.endswith(".onnx"):
        path = Path(spec)
        _check_model_file(path)
        try:  # OnnxImportError names the extra when onnx is missing
            graph = from_onnx(path, shapes=shapes)
        except OnnxImportError as err:
            if type(err) is not OnnxImportError or "shapes=" not in str(err):
                raise
            raise OnnxImportError(f"{err} (on the command line: --shape NAME=D1xD2x...)") from None
        return [_model_entry(path, graph, shapes)]
    elif spec.endswith(".pt2"):
        path = Path(spec)
        _check_model_file(path)
        graph = load_torch_file(path, shapes=shapes)  # TorchImportError names the extra
        return [_model_entry(path, graph, shapes)]
    else:
        raise OptionError(
            f"unknown model '{spec}': give an .onnx file, a torch.export .pt2 file or a "
            f"bundled example ({', '.join(EXAMPLES)})"
        )
    models = []
    for name in names:
        x, y = EXAMPLES[name]()
        models.append(LoadedModel(name, [x], [y], None, []))
    return models


def _model_entry(path: Path, graph, shapes) -> LoadedModel:
    """The :func:`load_models` entry of an imported model file (``--shape`` names checked)."""
    unknown = [n for n in shapes or {} if n not in graph.input_names]
    if unknown:
        raise OptionError(f"--shape names no input of {path.name}: {unknown}; its inputs "
                          f"are {graph.input_names}")  # fmt: skip
    return LoadedModel(
        path.name,
        list(graph.inputs),
        list(graph.outputs),
        list(graph.output_names),
        graph.partition.lines(),
    )


def _check_model_file(path: Path) -> None:
    """OptionError unless ``path`` names a regular file (links followed): said before
    any work; the ONNX importer reads it, size-capped (:mod:`aneforge.limits`)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise OptionError(f"model {str(path)!r}: no such file") from None
    except OSError as err:
        raise OptionError(f"model {str(path)!r}: cannot read it ({err.strerror})") from None
    if stat.S_ISDIR(mode):
        raise OptionError(f"model {str(path)!r} is a folder, not a model file; give the "
                          "model file's path")  # fmt: skip
    if not stat.S_ISREG(mode):
        raise OptionError(f"model {str(path)!r} is not a regular file (a FIFO, socket or "
                          "device); give the model file's path")  # fmt: skip


def shapes_option(items: list[str]) -> dict[str, tuple[int, ...]]:
    """``--shape`` values as ``{name: dims}``: ``NAME=D1xD2x...`` with whole dims >= 1
    (the last ``=`` splits), each name once.

    Example:
        >>> shapes_option(["x=1x3x224x224", "mask=1x128"])
        {'x': (1, 3, 224, 224), 'mask': (1, 128)}
    """
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, text = item.rpartition("=")
        parts = text.lower().split("x")
        ok = sep and name and all(p.isascii() and p.isdigit() for p in parts)
        dims = tuple(int(p) for p in parts) if ok else (0,)
        if min(dims) < 1:
            raise OptionError(f"--shape {item!r}: give NAME=D1xD2x... with whole dims >= 1 "
                              "(an input cannot be empty), e.g. x=1x3x224x224")  # fmt: skip
        if name in out:
            raise OptionError(f"--shape {item!r}: input {name!r} is given twice")
        out[name] = dims
    return out


def input_files(items: list[str]) -> dict[str, tuple[str, np.ndarray]]:
    """``--input NAME=FILE.npy`` values as ``{name: (file, array)}``, each file read as
    untrusted (:func:`read_npy`) before any work; the first ``=`` splits."""
    out: dict[str, tuple[str, np.ndarray]] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path or name in out:
            raise OptionError(f"--input {item!r}: give NAME=FILE.npy, once per input, e.g. "
                              "x=image.npy")  # fmt: skip
        out[name] = (path, read_npy(path, f"--input {name}={path}"))
    return out


def match_inputs(given: dict, inputs: list) -> dict[str, np.ndarray]:
    """The ``--input`` arrays as ``{name: array}``, each named like a model input and of
    its shape (OptionError naming the input, both shapes and the fix otherwise)."""
    by_name = {t.name: t for t in inputs}
    out = {}
    for name, (path, array) in given.items():
        t = by_name.get(name)
        if t is None:
            raise OptionError(f"--input {name}={path}: the model has no input {name!r}; its "
                              f"inputs are {list(by_name)}")  # fmt: skip
        if array.shape != tuple(t.shape):
            raise OptionError(f"--input {name}={path} holds shape {array.shape}, but input "
                              f"{name!r} is {tuple(t.shape)}; give an array of that shape (or "
                              f"--shape {name}={'x'.join(map(str, array.shape))} where the "
                              "model's dims are dynamic)")  # fmt: skip
        out[name] = array
    return out
