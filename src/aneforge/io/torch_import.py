"""PyTorch import: ``from_torch(module, example_inputs) -> OnnxGraph`` through
``torch.export``, and ``load_torch_file(path)`` for a ``torch.export.save``d program.

The module is exported (``torch.export.export(module.eval(), example_inputs,
dynamic_shapes=...)``), decomposed to core ATen (``run_decompositions()``) and its FX
graph walked node by node into aneforge tensors, through the ATen table of
:mod:`.torch_table`. The result is the same :class:`~.onnx_import.OnnxGraph` that
:func:`~.onnx_import.from_onnx` returns. torch is optional: it is imported on the first
call (``pip install 'aneforge[torch]'``, which pins the CPU build).

How values are handled (the contract the tests check):

- User inputs become inputs named like the forward's arguments, in its order: float
  ones fp16, bool ones fp16 0/1. Every dim is static: dims exported as dynamic take the
  example inputs' sizes (for a loaded program, the sizes torch recorded as hints, or
  ``shapes=``).
- Integer inputs (int64 / int32 / int16 / int8 / uint8: token ids, attention masks)
  become the engine's integer inputs, as in ONNX import: only embeddings (``embedding``,
  ``table[ids]``, ``index_select`` on axis 0 of a float table) and casts to float
  (``int_to_fp16``) or bool (``int_to_fp16 != 0``) may read them, through views that
  keep their order; their shapes are constants (:mod:`.torch_table`). Each gets the
  narrowest engine type its uses allow (:func:`~.onnx_integers.choose_dtype`): ids of a
  table of ``R`` rows are uint8 up to 256 rows, else uint16, with the range
  ``(0, R - 1)`` declared; a value only cast is int16 unless ``input_ranges=`` narrows
  it; ``graph.warnings`` say which type each got. ``eq`` / ``ne`` with a constant below
  2048 start exact integer chains on the engine (RoBERTa's position ids:
  :mod:`.int_values`); other integer arithmetic, reorders or indexing by them at run
  time are refused, each naming the input, the op and its source line.
- Parameters, buffers and lifted constants are host constants named by their module
  path (``layer1.0.conv1.weight``); used as data they become fp16 weights, and finite
  values past the fp16 range saturate to +-65504 with one
  :class:`~.onnx_errors.ConstantSaturationWarning` naming every such constant, as in
  ONNX import. An op whose inputs are all constants is folded exactly by torch when it
  only moves values or its result is not float (index and mask arithmetic); float
  arithmetic between constants folds with the emulator's fp16 kernels.
- Each eval-mode batch norm whose input is a conv's only use, with constant
  parameters, is folded into that conv in float32 exactly as ``torch.onnx.export``
  folds it (:mod:`.torch_fuse`; a note says how many), so both imports give one program.
- Names: the node that computes a module call's result is named by the module's path
  (``layer1.0.conv1``, ``encoder.attn``); its other nodes are ``{path}/{fx node}``, new
  inner nodes of a multi-op mapping ``{name}/{op}`` (:mod:`.onnx_graph`), and nodes of
  the top-level forward keep their FX names. Outputs are named by the keys of a returned
  dict or named tuple, else ``output``, ``output_1``, ...
- A program that cannot be expressed raises one
  :class:`~.onnx_errors.UnsupportedModelError` listing every unsupported ATen op with
  its count and the source line (``file:line``, the innermost frame outside torch) of
  its first use, and every node whose arguments cannot be expressed, not only the first.
- A module that writes its buffers in ``forward`` (in-place updates) imports as one call
  from the exported values; the writes are dropped and a warning says so.

Deterministic: the same program gives the same graph (same structural hash).

Example:
    >>> import numpy as np, torch
    >>> from aneforge.io import from_torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())
    >>> graph = from_torch(net, (torch.ones(1, 4),))
    >>> graph.input_names, graph.output_names, graph.outputs[0].op
    (['input'], ['output'], 'relu')
    >>> bool(np.allclose(graph.compile()(np.ones((1, 4))), net(torch.ones(1, 4)).detach(),
    ...                  atol=2e-3))
    True
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import AneforgeError
from ..graph.tensor import MAX_RANK, Tensor, creation_mark, input
from ..limits import check_elements
from .onnx_errors import (
    ConstantSaturationWarning,
    NotExpressible,
    saturation_message,
    unsupported_model,
)
from .onnx_fold import Partition
from .onnx_graph import NodeNames, finish_outputs
from .onnx_import import OnnxGraph, _given_shape, _Importer
from .onnx_integers import IntInput, IntView, typed_inputs
from .onnx_load import one_line
from .onnx_values import BROKEN, Broken, Host, Unsupported
from .torch_errors import TORCH_PIN, TorchImportError, TorchImportWarning
from .torch_fuse import Folds, plan_folds
from .torch_load import read_exported_program
from .torch_table import (
    ATEN,
    INT_ELEMS,
    HighRank,
    TorchCx,
    Unavailable,
    dtype_kind,
    flat_values,
    integer_call,
    integer_input,
)

__all__ = ["TorchImportError", "TorchImportWarning", "from_torch", "load_torch_file"]

#: aneforge ops that only move values: a module call's name goes to the last node
#: computing something else (a Linear's ``linear``, not the view after it).
_MOVEMENT = {"reshape", "transpose", "squeeze", "expand_dims", "slice", "gather", "concat"}
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def from_torch(module, example_inputs=None, dynamic_shapes=None, *, input_ranges=None):
    """Import a PyTorch module (or a ``torch.export.ExportedProgram``) as an aneforge graph.

    Args:
        module: a ``torch.nn.Module`` (exported in eval mode; its training flag is
            restored afterwards) or an ``ExportedProgram``.
        example_inputs: the positional arguments of ``forward`` (a tuple of tensors, or
            one tensor); they fix every input's shape. Optional for an ExportedProgram.
        dynamic_shapes: passed to ``torch.export.export``. The imported graph is still
            static: dynamic dims take the example inputs' sizes.
        input_ranges: ``{input_name: (lo, hi) or max_abs}``, the values each input will
            be fed, declared as ``af.input(..., range=...)`` does; an integer input's
            range (whole numbers) also picks its engine type.

    Returns:
        An :class:`~aneforge.io.OnnxGraph`. Raises :class:`TorchImportError` when torch is
        missing or cannot export the module, and one
        :class:`~aneforge.io.UnsupportedModelError` listing every op that cannot be
        expressed (integer arithmetic on integer inputs included).

    Example (token ids into an embedding: a uint8 input, 10 rows):
        >>> import torch, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # the note saying which type 'input' got
        ...     graph = from_torch(torch.nn.Embedding(10, 4), (torch.tensor([[3, 1, 4]]),))
        >>> graph.inputs[0].dtype, graph.inputs[0].attrs["range"], graph.outputs[0].shape
        ('uint8', (0, 9), (1, 3, 4))
    """
    torch = _torch("from_torch")
    if isinstance(module, torch.export.ExportedProgram):
        ep, name = module, "ExportedProgram"
        examples = None if example_inputs is None else _examples(torch, example_inputs)
    elif isinstance(module, torch.nn.Module):
        name = type(module).__name__
        if example_inputs is None:
            raise TorchImportError(
                f"from_torch: '{name}' needs example_inputs (a tuple of tensors, one per "
                "forward argument) to fix its input shapes"
            )
        examples = _examples(torch, example_inputs)
        with _torch_quiet():
            ep = _export(torch, module, examples, dynamic_shapes, name)
    else:
        raise TorchImportError(
            f"from_torch: expected a torch.nn.Module or ExportedProgram, got "
            f"{type(module).__name__}"
        )
    with _torch_quiet():
        ep = _decompose(ep, name, "from_torch")
    leaves = None if examples is None else torch.utils._pytree.tree_leaves((examples, {}))
    return _Walker(torch, ep, name, "from_torch", leaves, {}, input_ranges).run()


def load_torch_file(path, shapes=None, input_ranges=None):
    """Import a ``torch.export.save``d program (a ``.pt2`` file) as an aneforge graph.

    The file is untrusted: it must be a regular file within
    ``$ANEFORGE_MAX_FILE_BYTES``, and nothing in it is unpickled or run
    (:mod:`.torch_load`). Input shapes are the ones the program recorded (dynamic dims
    take their recorded example sizes); ``shapes={name: shape}`` overrides them.
    ``input_ranges`` is as in :func:`from_torch`.

    Example:
        >>> import os, tempfile, torch
        >>> ep = torch.export.export(torch.nn.Tanh(), (torch.zeros(2, 3),))
        >>> path = os.path.join(tempfile.mkdtemp(), "tanh.pt2")
        >>> torch.export.save(ep, path)
        >>> graph = load_torch_file(path)
        >>> graph.name, graph.inputs[0].shape, graph.outputs[0].op
        ('tanh', (2, 3), 'tanh')
    """
    torch = _torch("load_torch_file")
    name = Path(os.fsdecode(os.fspath(path))).stem
    with _torch_quiet():
        ep = _decompose(read_exported_program(torch, path), name, "load_torch_file")
    return _Walker(torch, ep, name, "load_torch_file", None, dict(shapes or {}), input_ranges).run()


@contextlib.contextmanager
def _torch_quiet():
    """Keep the deprecation notices torch and its helpers (typing_extensions) raise while
    exporting, loading or decomposing a program out of the user's warnings: they are
    about torch's internals, not the model."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def _torch(caller: str):
    try:
        import torch
    except ImportError:
        raise TorchImportError(
            f"{caller} needs PyTorch: pip install '{TORCH_PIN}' (the CPU build, e.g. with "
            "--index-url https://download.pytorch.org/whl/cpu), or pip install "
            "'aneforge[torch]'"
        ) from None
    return torch


def _examples(torch, example_inputs) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)):
        raise TorchImportError(
            f"from_torch: example_inputs must be a tuple of forward arguments, got "
            f"{type(example_inputs).__name__}"
        )
    return tuple(example_inputs)


def _export(torch, module, examples, dynamic_shapes, name):
    was_training = module.training
    try:
        module.eval()
        return torch.export.export(module, examples, dynamic_shapes=dynamic_shapes)
    except Exception as err:  # torch's reason: data-dependent control flow, bad args...
        raise TorchImportError(
            f"from_torch: torch.export.export cannot export '{name}': {one_line(err)[:2000]}"
        ) from err
    finally:
        module.train(was_training)


def _decompose(ep, name: str, caller: str):
    try:
        return ep.run_decompositions()
    except Exception as err:
        raise TorchImportError(
            f"{caller}: '{name}' does not decompose to core ATen: {one_line(err)[:2000]}"
        ) from err


def _live_nodes(graph) -> set:
    """The FX nodes the graph's outputs depend on. The rest is dead code that
    torch.export keeps (a pooled output the module computes but does not return, shape
    assertions): it is not imported, so it can neither fail the import nor run."""
    stack = [n for n in graph.nodes if n.op == "output"]
    live: set = set()
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend(node.all_input_nodes)
    return live


def op_key(target) -> str:
    """The table key of an FX call target: ``"aten.relu.default"``, ``"operator.mul"``."""
    if hasattr(target, "_schema") or type(target).__name__ == "OpOverload":
        return str(target)
    module = getattr(target, "__module__", None) or ""
    module = "operator" if module == "_operator" else module
    name = getattr(target, "__name__", None) or type(target).__name__
    return f"{module}.{name}" if module else name


class _Walker:
    """One import: the value environment, constants, the node loop and the names.

    It also serves :class:`~.onnx_values.Cx` as its importer (``t``, ``note``,
    ``bind_hints``, ``types``), so the ONNX handlers the ATen table reuses work on it."""

    def __init__(self, torch, ep, name, caller, examples, shapes, ranges):
        self.torch = torch
        self.ep = ep
        self.name = name
        self.caller = caller
        self.examples = examples
        self.shapes = shapes
        self.ranges = dict(ranges or {})
        self.torch_dir = os.path.dirname(torch.__file__)
        self.saturated: dict[str, float] = {}  # read by _Importer._materialize
        self.weights: dict = {}  # id(Host) -> (Host, its fp16 weight)
        self.notes: list[str] = []
        self.bind_hints: set[str] = set()
        self.types: dict = {}
        self.unsupported: Counter = Counter()
        self.first_use: dict[str, str] = {}
        self.problems: list[str] = []
        self.skipped = 0
        self.tainted: set[str] = set()
        self.names = NodeNames()
        self.int_inputs: list[IntInput] = []
        self.partition = Partition()
        self.folds = Folds()

    # ---- what the handler context calls -------------------------------------------------
    def t(self, value) -> Tensor:
        """``value`` as a graph tensor: host constants become fp16 weights (saturated)."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Host):
            cached = self.weights.get(id(value))
            if cached is None:
                cached = (value, _Importer._materialize(self, value))
                self.weights[id(value)] = cached
            return cached[1]
        if isinstance(value, IntView):
            raise NotExpressible(
                f"input '{value.source.name}' is a run-time integer input; the engine "
                "returns no integer values (cast it to float in forward to return it)"
            )
        raise NotExpressible(f"expected a tensor, got {type(value).__name__}")

    def note(self, msg: str) -> None:
        """Record an import warning (issued once the import succeeds)."""
        if msg not in self.notes:
            self.notes.append(msg)

    # ---- the import ----------------------------------------------------------------------
    def run(self) -> OnnxGraph:
        env: dict = {}
        inputs, names = self._inputs(env)
        records, out_node = [], None
        live = _live_nodes(self.ep.graph)
        self._plan_folds(env, live)
        for node in self.ep.graph.nodes:
            if node.op == "call_function" and node in live:
                self._call(node, env, records)
            elif node.op == "output":
                out_node = node
            elif node.op == "get_attr":  # a control-flow op's subgraph: the op is counted
                env[node.name] = Unavailable(f"submodule '{node.target}'")
        self._name_nodes(records)
        outputs, out_names = self._outputs(out_node, env)
        final = self._integer_types()
        self._raise_if_unsupported()
        for msg in self.notes:
            warnings.warn(msg, TorchImportWarning, stacklevel=3)
        self._warn_saturated()
        outputs = finish_outputs(outputs, self.names, final)
        part = self.partition
        part.source, part.onnx_nodes = "ATen", len(records)
        part.folded = sum(isinstance(value, Host) for _, value, _ in records)
        part.count_program(outputs)
        return OnnxGraph(
            [final.get(id(t), t) for t in inputs],
            outputs,
            names,
            out_names,
            list(self.notes),
            name=self.name,
            partition=self.partition,
        )

    def _plan_folds(self, env, live) -> None:
        """Fold each eval-mode batch norm into the conv before it where torch.onnx.export
        does, with its float32 arithmetic (:mod:`.torch_fuse`)."""
        self.folds = plan_folds(self.torch, self.ep.graph, env)
        n = sum(1 for node in live if node.name in self.folds.norms)
        if n:
            self.note(
                f"{self.caller}: folded {n} batch norm(s) into the convolutions before them "
                "in float32, as torch.onnx.export does"
            )

    def _inputs(self, env):
        specs = {s.arg.name: s for s in self.ep.graph_signature.input_specs}
        placeholders = [n for n in self.ep.graph.nodes if n.op == "placeholder"]
        users = [n for n in placeholders if specs[n.name].kind.name == "USER_INPUT"]
        examples = self.examples if self.examples and len(self.examples) == len(users) else None
        inputs, names = [], []
        for node in placeholders:
            spec = specs[node.name]
            kind = spec.kind.name
            if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                state = (
                    self.ep.state_dict if spec.target in self.ep.state_dict else self.ep.constants
                )
                env[node.name] = Host(self._numpy(state[spec.target], spec.target), spec.target)
            elif kind == "USER_INPUT":
                example = examples[users.index(node)] if examples else None
                value = self._user_input(node, example)
                env[node.name] = value
                if isinstance(value, (Tensor, IntView)):
                    inputs.append(value.source.tensor if isinstance(value, IntView) else value)
                    names.append(node.name)
            elif kind == "TOKEN":
                env[node.name] = None
            else:  # a custom object (torchbind class) cannot enter the graph
                env[node.name] = BROKEN
                self._count(f"{kind.lower()} input", node)
        unknown = sorted(set(self.ranges) - set(names))
        if unknown:
            raise TorchImportError(
                f"{self.caller}: input_ranges= names no input: {unknown}; the inputs are {names}"
            )
        unknown = sorted(set(self.shapes) - set(names))
        if unknown:
            raise TorchImportError(f"{self.caller}: shapes= names no input: {unknown}")
        return inputs, names

    def _numpy(self, value, what: str) -> np.ndarray:
        torch = self.torch
        if not isinstance(value, torch.Tensor) or value.is_quantized or value.is_complex():
            raise TorchImportError(
                f"{self.caller}: constant '{what}' ({type(value).__name__}, "
                f"{getattr(value, 'dtype', '')}) is not a real tensor the engine can hold"
            )
        check_elements(tuple(value.shape), f"{self.caller}: constant '{what}'")
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.numpy()

    def _user_input(self, node, example):
        val = node.meta.get("val")
        if not isinstance(val, self.torch.Tensor):  # a number export specialized
            return example if example is not None else val
        kind = dtype_kind(val.dtype)
        if kind not in "fb" and str(val.dtype) not in INT_ELEMS:
            raise TorchImportError(
                f"{self.caller}: input '{node.name}' has dtype {val.dtype}; the engine takes "
                "float inputs (bool as 0/1) and integer ones of int8, uint8, int16, int32 or "
                "int64 (token ids, masks); convert it in the caller"
            )
        shape = self._input_shape(node.name, val, example)
        if kind == "i":  # its engine type is chosen from its uses (_integer_types)
            view = integer_input(node.name, shape, val.dtype)
            self.int_inputs.append(view.source)
            return view
        return input(shape, name=node.name, range=self.ranges.get(node.name))

    def _integer_types(self) -> dict[int, Tensor]:
        """{id(provisional input): the input of its engine type} of every integer input,
        each choice noted (a use no engine type holds becomes a problem)."""
        final, notes, problems, types = typed_inputs(self.int_inputs, self.ranges, self.caller)
        for msg in notes:
            self.note(msg)
        self.problems += problems
        self.partition.integer_inputs.update(types)
        return final

    def _input_shape(self, name, val, example) -> tuple:
        if name in self.shapes:
            shape = _given_shape(name, self.shapes[name])
            if len(shape) != len(val.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(val.shape, shape)
            ):
                raise TorchImportError(
                    f"{self.caller}: shapes['{name}'] = {shape} does not fit the program's "
                    f"input shape {tuple(val.shape)}"
                )
        elif example is not None and hasattr(example, "shape"):
            shape = tuple(int(d) for d in example.shape)
        else:
            shape = tuple(_hint(d, name, i, self.caller) for i, d in enumerate(val.shape))
        check_elements(shape, f"{self.caller}: input '{name}'")
        return shape

    # ---- one node ------------------------------------------------------------------------
    def _call(self, node, env, records) -> None:
        key = op_key(node.target)
        args, kwargs = _lookup(node.args, env), _lookup(node.kwargs, env)
        args = self.folds.conv_args(node, args)
        if any(a.name in self.tainted for a in node.all_input_nodes):
            self.tainted.add(node.name)
        if _contains(args, Broken) or _contains(kwargs, Broken):
            self.skipped += 1
            env[node.name] = BROKEN
            return
        mark = creation_mark()
        try:
            value = self.folds.norm_value(node, env)  # a batch norm folded into its conv
            if value is None:
                value = self._evaluate(node, key, args, kwargs)
        except Unsupported:
            self._count(key, node)
            value = self._placeholder(node)
        except (NotExpressible, AneforgeError) as err:
            if node.name in self.tainted:
                self.skipped += 1
            else:
                self.problems.append(f"{key} '{node.name}' ({self._where(node)}): {err}")
            self.tainted.add(node.name)
            value = self._placeholder(node)
        env[node.name] = value
        records.append((node, value, mark))

    def _evaluate(self, node, key, args, kwargs):
        entry = ATEN.get(key)
        on_device = _contains(args, (Tensor, HighRank)) or _contains(kwargs, (Tensor, HighRank))
        seeded = self.torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ())
        if seeded or key.startswith("torch.ops.higher_order") or "higher_order" in key:
            raise Unsupported(key)
        if _contains(args, IntView) or _contains(kwargs, IntView):  # its own rules
            value = integer_call(TorchCx(self, node, key), args, kwargs)
        elif not on_device and self._foldable(node, entry, args, kwargs):
            return self._host_eval(node, key, entry, args, kwargs)
        elif entry is None:
            raise Unsupported(key)
        else:
            value = entry.fn(TorchCx(self, node, key), *args, **kwargs)
        _check_shape(node, key, value)
        return value

    def _foldable(self, node, entry, args, kwargs) -> bool:
        if entry is not None and entry.host != "auto":
            return entry.host == "torch"
        if not (_contains(args, Host) or _contains(kwargs, Host)):
            return True  # creation from literals (full, arange) or size arithmetic
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        return all(not isinstance(v, self.torch.Tensor) or dtype_kind(v.dtype) != "f" for v in vals)

    def _host_eval(self, node, key, entry, args, kwargs):
        """``node`` on constants, computed exactly by torch (or Python for size math)."""
        torch = self.torch
        if not isinstance(node.target, torch._ops.OpOverload):
            return node.target(*args, **kwargs)
        shape = getattr(node.meta.get("val"), "shape", None)
        if shape is not None and all(isinstance(d, int) for d in shape):
            check_elements(tuple(shape), f"{self.caller}: {key} '{node.name}' output")
        hosts = [a for a in flat_values(args) if isinstance(a, Host)]
        label = hosts[0].label if entry is not None and len(hosts) == 1 else node.name
        try:
            with torch.no_grad():
                out = node.target(*_to_torch(torch, args), **_to_torch(torch, kwargs))
        except Exception as err:  # torch refuses the constants: the model's own error
            raise NotExpressible(
                f"torch cannot evaluate it on its constants: {one_line(err)}"
            ) from None
        return _from_torch(torch, out, label, self)

    def _placeholder(self, node):
        """Stand-ins of a failed node's outputs, so that later nodes still get checked."""
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        outs = []
        for i, v in enumerate(vals):
            shape = getattr(v, "shape", None)
            if shape is None or not all(isinstance(d, int) for d in shape) or len(shape) > MAX_RANK:
                outs.append(BROKEN)
                continue
            try:
                outs.append(input(tuple(shape) or (1,), name=f"<{node.name}:{i}>"))
            except AneforgeError:
                outs.append(BROKEN)
        return tuple(outs) if isinstance(val, (list, tuple)) else outs[0]

    def _count(self, key: str, node) -> None:
        self.unsupported[key] += 1
        self.tainted.add(node.name)
        if key not in self.first_use:
            self.first_use[key] = f"first at {self._where(node)}, node '{node.name}'"

    def _where(self, node) -> str:
        """The source line of ``node``: the innermost stack frame outside torch."""
        frames = _FRAME.findall(node.meta.get("stack_trace") or "")
        if not frames:
            return "no source line recorded"
        own = [f for f in frames if not f[0].startswith((self.torch_dir, "<"))]
        path, line = (own or frames)[-1]
        return f"{path}:{line}"

    # ---- names and outputs ---------------------------------------------------------------
    def _name_nodes(self, records) -> None:
        """Name each module call's result by the module's path (see the module doc)."""
        principal: dict[str, int] = {}
        computing: dict[str, bool] = {}
        for i, (node, value, mark) in enumerate(records):
            call, _ = _module_of(node)
            fresh = [v for v in flat_values(value) if isinstance(v, Tensor) and v._order > mark]
            if not call or not fresh:
                continue
            busy = any(v.op not in _MOVEMENT for v in fresh)
            if busy or not computing.get(call, False):
                principal[call], computing[call] = i, busy or computing.get(call, False)
        for i, (node, value, mark) in enumerate(records):
            call, path = _module_of(node)
            if not call:
                label = node.name
            else:
                label = path if principal.get(call) == i else f"{path}/{node.name}"
            values = list(value) if isinstance(value, (tuple, list)) else [value]
            outs = [node.name] + [str(k) for k in range(1, len(values))]
            self.names.record(label, outs, values, mark)

    def _outputs(self, out_node, env):
        user, mutated = [], []
        for spec, arg in zip(self.ep.graph_signature.output_specs, out_node.args[0]):
            kind = spec.kind.name
            if kind == "USER_OUTPUT":
                user.append(env.get(arg.name, BROKEN) if hasattr(arg, "name") else arg)
            elif kind in ("BUFFER_MUTATION", "USER_INPUT_MUTATION", "PARAMETER_MUTATION"):
                mutated.append(spec.target)
        if mutated:
            self.note(
                f"{self.caller}: '{self.name}' writes {', '.join(map(str, mutated))} in place "
                "each call; the imported graph computes one call and drops those writes"
            )
        names = _output_names(self.torch, self.ep, len(user))
        outputs = []
        for name, value in zip(names, user):
            if isinstance(value, Broken):
                outputs.append(None)
                continue
            try:
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    value = Host(np.asarray(float(value)), label=name)
                outputs.append(self.t(value))
            except (NotExpressible, AneforgeError) as err:
                self.problems.append(f"output '{name}': {err}")
                outputs.append(None)
        return outputs, names

    def _raise_if_unsupported(self) -> None:
        if not self.unsupported and not self.problems:
            return
        lines = []
        if self.unsupported:
            total = sum(self.unsupported.values())
            lines.append(f"unsupported ATen ops ({total} node(s)):")
            for op, n in sorted(self.unsupported.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {op} x{n} ({self.first_use[op]}){_reason(op)}")
        raise unsupported_model(
            self.caller, self.name, lines, self.problems, self.skipped, op_counts=self.unsupported
        )

    def _warn_saturated(self) -> None:
        if self.saturated:
            msg = saturation_message(self.caller, self.saturated)
            self.notes.insert(0, msg)
            warnings.warn(msg, ConstantSaturationWarning, stacklevel=4)


# ---- helpers ------------------------------------------------------------------------------


def _reason(op: str) -> str:
    if "higher_order" in op:
        return ": control flow (torch.cond, while_loop) is not expressible in a static graph"
    if "_native_batch_norm_legit" in op and "no_training" not in op:
        return ": batch norm in training mode (batch statistics); export the module in eval mode"
    if any(w in op for w in ("rand", "bernoulli", "normal", "multinomial")):
        return ": random sampling is not expressible"
    return ""


def _hint(d, name: str, axis: int, caller: str) -> int:
    if isinstance(d, int):
        return d
    hint = getattr(getattr(d, "node", None), "hint", None)
    if hint is None:
        raise TorchImportError(
            f"{caller}: input '{name}' has the dynamic dim {d} on axis {axis} and no "
            f"recorded size; pass shapes={{'{name}': (...)}}"
        )
    return int(hint)


def _module_of(node) -> tuple[str, str]:
    """(the innermost module call's key, its path), or ('', '') for the top level."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "", ""
    key, (path, _) = list(stack.items())[-1]
    if not path or str(path).startswith("_empty"):
        return "", ""
    return key, str(path)


def _output_names(torch, ep, n: int) -> list[str]:
    pytree = torch.utils._pytree
    parts: list[list[str]] = [[] for _ in range(n)]
    try:
        tree = pytree.tree_unflatten(list(range(n)), ep.call_spec.out_spec)
        for path, i in pytree.tree_flatten_with_path(tree)[0]:
            parts[i] = [
                str(getattr(k, "key", getattr(k, "name", "")))
                for k in path
                if isinstance(k, (pytree.MappingKey, pytree.GetAttrKey))
            ]
    except Exception:  # no out spec (a hand-built program): positional names
        pass
    names, used = [], set()
    for i, p in enumerate(parts):
        name = "_".join(x for x in p if x) or ("output" if i == 0 else f"output_{i}")
        if name in used:
            name = f"{name}_{i}"
        used.add(name)
        names.append(name)
    return names


def _lookup(value, env):
    """FX arguments with their nodes replaced by the values built for them."""
    if hasattr(value, "op") and hasattr(value, "name") and hasattr(value, "meta"):
        return env.get(value.name, BROKEN)
    if isinstance(value, (list, tuple)):
        return type(value)(_lookup(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _lookup(v, env) for k, v in value.items()}
    return value


def _contains(value, kinds) -> bool:
    return any(isinstance(v, kinds) for v in flat_values(value))


def _to_torch(torch, value):
    if isinstance(value, Host):
        return torch.from_numpy(np.ascontiguousarray(value.value))
    if isinstance(value, (list, tuple)):
        return type(value)(_to_torch(torch, v) for v in value)
    if isinstance(value, dict):
        return {k: _to_torch(torch, v) for k, v in value.items()}
    return value


def _from_torch(torch, value, label: str, walker):
    if isinstance(value, torch.Tensor):
        return Host(walker._numpy(value, label), label=label)
    if isinstance(value, (list, tuple)):
        return tuple(_from_torch(torch, v, label, walker) for v in value)
    return value


def _check_shape(node, key: str, value) -> None:
    """A handler's result must have the shape torch recorded (else it is a bug here)."""
    val = node.meta.get("val")
    pairs = (
        zip(value, val)
        if isinstance(val, (list, tuple)) and isinstance(value, tuple)
        else [(value, val)]
    )
    for got, want in pairs:
        shape = getattr(want, "shape", None)
        have = got.out_shape if isinstance(got, HighRank) else getattr(got, "shape", None)
        if isinstance(got, Host):
            have = tuple(np.shape(got.value))
        if shape is None or have is None or not all(isinstance(d, int) for d in shape):
            continue
        if tuple(have) != tuple(shape):
            raise RuntimeError(
                f"internal error: {key} '{node.name}' was built with shape {tuple(have)} "
                f"but torch records {tuple(shape)}"
            )
