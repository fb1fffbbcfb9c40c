"""ONNX import: ``from_onnx(model) -> OnnxGraph``, an aneforge graph of the same model.

Inputs: an ``onnx.ModelProto``, a path to a ``.onnx`` file or its bytes, of any
default-domain opset onnx knows (below 13 upgraded by :mod:`.onnx_upgrade`), that
``onnx.checker`` accepts (full check). Models are untrusted:
how files, bytes and external data are read is in :mod:`.onnx_load`, and every size
import would allocate is checked first (:mod:`.onnx_sizes`). Output: an
:class:`OnnxGraph` whose ``inputs`` and ``outputs`` are aneforge Tensors in ONNX order;
``.compile()`` turns it into a Program. The module is split by job: errors in
:mod:`.onnx_errors`, values and the handler context in :mod:`.onnx_values`, function
expansion in :mod:`.onnx_functions`, names in :mod:`.onnx_graph`, the op table in
:mod:`.onnx_ops`, the exporter's chains for one ATen op (GELU, an N-D Linear) read as
that op's mapping in :mod:`.onnx_fuse`.

How values are handled (the contract the tests check):

- Float graph inputs become fp16 inputs named like the ONNX inputs; bool inputs become
  fp16 inputs holding 0/1. Integer graph inputs (token ids, attention masks) become
  integer inputs of the engine's types (int8, uint8, int16, uint16), read only by
  embedding Gathers, Casts to float and Equal with small constants, which start exact
  integer chains on the engine such as RoBERTa's position ids (:mod:`.onnx_integers`,
  :mod:`.int_values`); ``constants={name: array}`` binds one at import instead.
  Every dimension must be static: pass ``shapes={name: shape}`` for symbolic ones.
- Initializers and ``Constant`` outputs are host constants. Integer tensors (shapes,
  indices, axes, sizes) never reach the device: every node whose inputs are all host
  constants is evaluated at import by ``onnx.reference`` (exact ONNX semantics), so
  Shape / Gather / Concat / Unsqueeze / Cast / Range / ConstantOfShape subgraphs fold
  away. A float constant that an op reads as a *parameter* (Clip bounds, Resize scales,
  Pad values) is read from that exact host value; a float constant that an op reads as
  *data* becomes an fp16 weight, and float arithmetic between constants is rebuilt from
  its recipe with the emulator's fp16 kernels (constant folding in fp16, never float64).
  Float folding is capped (:mod:`.onnx_fold`): past its budget, constant float nodes are
  left in the program to run on the engine, with a warning; ``OnnxGraph.partition``
  reports what was folded and what runs on the engine.
- A constant weight with finite values beyond the fp16 range (attention masks of -1e9,
  large epsilons) saturates to +-65504: one :class:`ConstantSaturationWarning` names
  every such constant and its largest magnitude.
- A parameter computed from a graph input (a Resize ``scales`` input, a Pad value) is
  refused naming that input; ``UnsupportedModelError.bind_inputs`` lists such inputs and
  ``constants=`` binds them.
- Names: each ONNX node's name (else its first output's) names the aneforge node that
  produces its output, and new inner nodes of a multi-op mapping are ``{name}/{op}``
  (:mod:`.onnx_graph`); inputs keep their names; ``output_names`` holds the graph output
  names, which ``.compile()`` passes on to the Program and its Core ML export.
- Each ONNX op maps onto aneforge ops through the table in :mod:`.onnx_ops` (and the
  modules it loads); an op with no entry but with a function body in the ONNX spec (or a
  model-local function) is expanded into that body; ``If`` with a constant condition is
  inlined, ``Scan`` and ``Loop`` with static trip counts are unrolled. A model that
  cannot be expressed raises one :class:`UnsupportedModelError` listing every
  unsupported op type with its count and first node names, and every node whose
  attributes cannot be expressed (name, attribute, value), not only the first.

Deterministic: the same model gives the same graph (same structural hash) every time.

Example:
    >>> import numpy as np, onnx
    >>> from onnx import TensorProto, helper
    >>> from aneforge.io import from_onnx
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> graph = from_onnx(m)
    >>> graph.input_names, graph.outputs[0].op
    (['x'], 'relu')
    >>> graph.compile()(np.array([[-1.0, 0.5, 2.0, -3.0]]))
    array([[0. , 0.5, 2. , 0. ]], dtype=float32)
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..driver import compile as _compile
from ..errors import AneforgeError, SizeLimitError
from ..graph.fp16 import FP16_MAX
from ..graph.tensor import Tensor, creation_mark, input, weight
from ..limits import check_elements
from .onnx_errors import (
    ConstantSaturationWarning,
    NotExpressible,
    OnnxImportError,
    OnnxImportWarning,
    UnsupportedModelError,
    saturation_message,
    unsupported_model,
)
from .onnx_fold import FoldBudget, LeftNode, Partition, fold_work, resolve_budget
from .onnx_functions import FunctionExpansion
from .onnx_fuse import Fusions
from .onnx_graph import NodeNames, finish_outputs, node_label, topological
from .onnx_integers import ONNX_INT_BOUNDS, IntInput, IntView, integer_node, typed_inputs
from .onnx_load import DEFAULT_DOMAINS, MIN_OPSET, load_model, one_line
from .onnx_sizes import GROWING_OPS, check_node_outputs
from .onnx_table import EXACT_ON_HOST, HANDLERS, UNSUPPORTED_REASONS
from .onnx_values import BROKEN, Broken, Cx, Host, Unsupported, attrs, host_eval, is_float

__all__ = [
    "MIN_OPSET",
    "ConstantSaturationWarning",
    "Host",
    "NotExpressible",
    "OnnxGraph",
    "OnnxImportError",
    "OnnxImportWarning",
    "UnsupportedModelError",
    "from_onnx",
    "host_eval",
]

_RANDOM_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
}


@dataclass
class OnnxGraph:
    """The aneforge graph of an ONNX model.

    Attributes:
        inputs: the graph inputs as aneforge Tensors, in ONNX input order (initializers
            and inputs bound with ``constants=`` excluded), named like the ONNX inputs.
        outputs: the output Tensors in ONNX output order (integer outputs such as
            ArgMax indices come back as fp16 integers).
        input_names, output_names: the ONNX names, in the same orders.
        warnings: every import warning, as text (also issued with ``warnings.warn``).
        partition: where the model runs (:class:`~.onnx_fold.Partition`): the ONNX
            nodes folded at import, the float work folded against the budget, constant
            nodes left in the program and why, the integer inputs' engine types and the
            ops that run on the engine (``partition.lines()`` for a report).
    """

    inputs: list
    outputs: list
    input_names: list
    output_names: list
    warnings: list = field(default_factory=list)
    name: str = ""
    partition: Partition = field(default_factory=Partition)

    def compile(self, **kwargs):
        """``af.compile(self.outputs, **kwargs)``: a Program whose inputs are the graph
        inputs the outputs use, in ONNX order (call it positionally or by name), and
        whose ``output_names`` are the ONNX output names (unless given)."""

        kwargs.setdefault("output_names", list(self.output_names))
        return _compile(list(self.outputs), **kwargs)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}{t.shape}" for n, t in zip(self.input_names, self.inputs))
        outs = ", ".join(f"{n}{t.shape}" for n, t in zip(self.output_names, self.outputs))
        return f"<OnnxGraph {self.name!r}: ({ins}) -> ({outs})>"


def from_onnx(
    model, shapes=None, constants=None, input_ranges=None, base_dir=None, fold_budget=None
) -> OnnxGraph:
    """Import an ONNX model (ModelProto, path or bytes) as an aneforge graph.

    Args:
        model: an ``onnx.ModelProto``, a path to a ``.onnx`` file, or serialized bytes.
            Files and bytes are untrusted input (:mod:`.onnx_load`): a path must be a
            regular file within ``$ANEFORGE_MAX_FILE_BYTES``, and every model must pass
            ``onnx.checker.check_model(model, full_check=True)``.
        shapes: ``{input_name: shape}`` fixing inputs with symbolic or unknown dims.
        constants: ``{input_name: array}`` binding graph inputs to fixed values at import
            (an integer input used in integer arithmetic must be bound; one read as
            embedding ids or cast to float may stay a run-time input).
        input_ranges: ``{input_name: (lo, hi) or max_abs}``, the values each input will
            be fed, declared on the graph's inputs as ``af.input(..., range=...)`` does
            (:func:`aneforge.range_analysis` and ``compile`` then find where it can
            overflow); inputs not named stay unknown. An integer input's range (whole
            numbers) also picks its engine type.
        base_dir: the folder external data files are read from. A model loaded from a
            path reads them from its own folder by default; bytes and ModelProtos have
            no folder, so their external data is refused unless ``base_dir`` is given.
            Locations leaving the folder (absolute, ``..``, symlinks out) are refused.
        fold_budget: the work (output elements plus multiply-adds) import may spend
            folding float constants (:mod:`.onnx_fold`; default ``$ANEFORGE_FOLD_BUDGET``,
            else 1e8; 0 folds no float arithmetic). Past it, constant nodes stay in the
            program and run on the engine.

    Returns:
        An :class:`OnnxGraph`. Raises :class:`OnnxImportError` for unreadable or invalid
        models (the checker's reason), opsets the converter cannot upgrade (its reason)
        or newer than onnx knows, and unresolved dynamic dims;
        :class:`~aneforge.errors.SizeLimitError` for a tensor (a declared input, an
        initializer, a folded constant) past
        ``$ANEFORGE_MAX_ELEMENTS``; and one :class:`UnsupportedModelError` listing
        everything that cannot be expressed.
    """
    onnx = _onnx()
    loaded: list[str] = []  # what loading said (an opset upgrade): notes of the graph
    proto, opset, inferred = load_model(onnx, model, base_dir, notes=loaded)
    importer = _Importer(onnx, proto, opset, dict(shapes or {}), dict(constants or {}))
    for msg in loaded:
        importer.note(msg)
    importer.inferred = inferred
    importer.ranges = dict(input_ranges or {})
    importer.budget = FoldBudget(resolve_budget(fold_budget))
    return importer.run()


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a declared extra
        raise OnnxImportError(
            "from_onnx needs the 'onnx' package: pip install 'aneforge[onnx]'"
        ) from None
    return onnx


class _Importer(FunctionExpansion):
    """One import: the value environment, constant handling and the node loop."""

    def __init__(self, onnx, model, opset, shapes, constants):
        self.onnx = onnx
        self.model = model
        self.shapes = shapes
        self.constants = constants
        self.ranges: dict = {}  # input name -> declared (lo, hi) or max_abs
        self.notes: list[str] = []
        self.saturated: dict[str, float] = {}
        self.weights: dict = {}  # id(Host) or recipe key -> (the key object, its Tensor)
        self.unsupported: Counter = Counter()
        self.unsupported_nodes: dict[str, list[str]] = {}
        self.problems: list[str] = []
        self.skipped = 0
        self.bind_hints: set[str] = set()  # graph inputs a parameter was computed from
        self.details: dict[str, list[str]] = {}  # op -> why its function body failed
        self.types: dict[str, int] = {}
        self.static_shapes: dict[str, tuple] = {}
        self.depth = 0  # > 0 inside a function body, whose names are local
        self.local_functions = {(f.domain, f.name): f for f in model.functions}
        self.names = NodeNames()  # the ONNX node names, put on the graph at the end
        self.opset = opset
        self.inferred = None  # the model with ONNX's inferred shapes, from the checker
        self.budget = FoldBudget(0)  # the float folding budget (from_onnx sets it)
        self.partition = Partition()
        self.int_inputs: list[IntInput] = []
        self.fusions: Fusions | None = None  # chains imported as one op (onnx_fuse)

    # ---- set-up ----------------------------------------------------------------------
    def _input_shape(self, vi) -> tuple[int, ...]:
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"from_onnx: input '{name}' is not a tensor")
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if name in self.shapes:
            shape = _given_shape(name, self.shapes[name])
            if dims is not None and len(dims) != len(shape):
                raise OnnxImportError(
                    f"from_onnx: shapes['{name}'] = {shape} has rank {len(shape)} but the "
                    f"model declares rank {len(dims)}"
                )
            for i, d in enumerate(dims or []):
                if d.HasField("dim_value") and d.dim_value != shape[i]:
                    raise OnnxImportError(
                        f"from_onnx: shapes['{name}'] = {shape} conflicts with the model's "
                        f"static size {d.dim_value} on axis {i}"
                    )
            check_elements(shape, f"from_onnx: input '{name}' (shapes=)")
            return shape
        if dims is None:
            raise OnnxImportError(
                f"from_onnx: input '{name}' has no declared shape; pass "
                f"shapes={{'{name}': (...)}} to from_onnx"
            )
        dynamic = [
            (i, d.dim_param or "?") for i, d in enumerate(dims) if not d.HasField("dim_value")
        ]
        if dynamic:
            where = ", ".join(f"axis {i} ({p})" for i, p in dynamic)
            raise OnnxImportError(
                f"from_onnx: input '{name}' has dynamic dims at {where}; aneforge compiles "
                f"static shapes: pass shapes={{'{name}': (...)}} to from_onnx"
            )
        shape = tuple(int(d.dim_value) for d in dims)
        check_elements(shape, f"from_onnx: input '{name}' (its declared shape)")
        return shape

    def _infer_types(self) -> None:
        """Element types of every value ONNX shape inference can name (best effort)."""
        inferred = self.inferred
        if inferred is None:
            try:
                inferred = self.onnx.shape_inference.infer_shapes(self.model)
            except Exception as err:  # inference is advisory: shapes come from aneforge
                self.note(f"ONNX shape inference failed ({err}); continuing without it")
                inferred = self.model
        g = inferred.graph
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.HasField("tensor_type"):
                tt = vi.type.tensor_type
                self.types[vi.name] = tt.elem_type
                dims = tt.shape.dim
                if all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
                    self.static_shapes[vi.name] = tuple(d.dim_value for d in dims)
        for init in g.initializer:
            self.types[init.name] = init.data_type

    def initializer(self, init) -> np.ndarray:
        """An initializer's value; its size is checked before it is unpacked."""
        check_elements(tuple(init.dims), f"from_onnx: initializer '{init.name}'")
        try:
            return np.asarray(self.onnx.numpy_helper.to_array(init))
        except Exception as err:  # a tensor the checker let through but numpy cannot read
            raise OnnxImportError(
                f"from_onnx: initializer '{init.name}' (dims {list(init.dims)}, "
                f"{_type_name(self.onnx, init.data_type)}) cannot be read: {one_line(err)}"
            ) from None

    def _range(self, name: str):
        """The declared range of input ``name`` (None: unknown); af.input checks it."""
        return self.ranges.get(name)

    # ---- the run ---------------------------------------------------------------------
    def run(self) -> OnnxGraph:
        onnx = self.onnx
        graph = self.model.graph
        self._infer_types()
        env: dict = {}
        for init in graph.initializer:
            env[init.name] = Host(self.initializer(init), label=init.name)
        inputs, names = [], []
        for vi in graph.input:
            if vi.name in env and vi.name not in self.constants:
                continue  # an initializer listed as an input: its default value
            if vi.name in self.constants:
                env[vi.name] = Host(_bound_constant(vi.name, self.constants), label=vi.name)
                continue
            elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
            if not (is_float(onnx, elem) or elem == onnx.TensorProto.BOOL):
                t = self._integer_input(vi, elem, env)
            else:
                t = input(self._input_shape(vi), name=vi.name, range=self._range(vi.name))
                env[vi.name] = t
            inputs.append(t)
            names.append(vi.name)
        unknown = sorted(set(self.constants) - {vi.name for vi in graph.input})
        if unknown:
            raise OnnxImportError(f"from_onnx: constants= names no graph input: {unknown}")
        unranged = sorted(set(self.ranges) - set(names))
        if unranged:
            raise OnnxImportError(
                f"from_onnx: input_ranges= names no float graph input (nor integer one): "
                f"{unranged}; the inputs are {names}"
            )
        self.fusions = Fusions(graph, env)
        self.convert(graph.node, env, self.opset)
        outputs = []
        for vi in graph.output:
            value = env.get(vi.name, BROKEN)
            if isinstance(value, Broken) or value is None:
                outputs.append(None)
                continue
            try:
                outputs.append(self.t(value))
            except (NotExpressible, Unsupported) as err:  # e.g. an empty output
                self.problems.append(f"output '{vi.name}': {err}")
                outputs.append(None)
        final = self._integer_types()
        self._raise_if_unsupported()
        if any(o is None for o in outputs):  # pragma: no cover - failures raise above
            raise OnnxImportError("from_onnx: some outputs were not produced")
        self._note_left()
        for msg in self.notes:
            warnings.warn(msg, OnnxImportWarning, stacklevel=3)
        self._warn_saturated()
        outputs = finish_outputs(outputs, self.names, final)
        inputs = [final.get(id(t), t) for t in inputs]
        self._count_engine(outputs)
        return OnnxGraph(
            inputs,
            outputs,
            names,
            [vi.name for vi in graph.output],
            list(self.notes),
            name=graph.name,
            partition=self.partition,
        )

    # ---- integer inputs and the partition --------------------------------------------
    def _integer_input(self, vi, elem: int, env: dict) -> Tensor:
        """Declare integer graph input ``vi`` (its type is chosen at the end, from its
        uses: :mod:`.onnx_integers`); returns its provisional tensor."""
        kind = _type_name(self.onnx, elem)
        if elem not in ONNX_INT_BOUNDS:
            raise OnnxImportError(
                f"from_onnx: input '{vi.name}' is {kind}: the engine's inputs are fp16 and "
                "int8/uint8/int16/uint16; bind it at import with constants={name: array}"
            )
        src = IntInput.declare(vi.name, self._input_shape(vi), elem, kind)
        self.int_inputs.append(src)
        env[vi.name] = IntView(src, src.shape)
        return src.tensor

    def _integer_types(self) -> dict[int, Tensor]:
        """{id(provisional input): the input of its engine type} of every integer input,
        each choice noted (a use no engine type holds becomes a problem)."""
        final, notes, problems, types = typed_inputs(self.int_inputs, self.ranges, "from_onnx")
        for msg in notes:
            self.note(msg)
        self.problems += problems
        self.partition.integer_inputs.update(types)
        return final

    def _note_left(self) -> None:
        left = self.partition.left
        if not left:
            return
        first = left[0]
        self.note(
            f"from_onnx: {len(left)} node(s) of constants were left in the program, their "
            f"ops run on the engine instead of being folded at import (first: {first.op} "
            f"'{first.node}': {first.reason}); raise fold_budget= (or $ANEFORGE_FOLD_BUDGET)"
            " to fold more"
        )

    def _count_engine(self, outputs) -> None:
        self.partition.count_program(outputs)
        self.partition.budget = self.budget.budget
        self.partition.folded_work = self.budget.spent

    def note(self, msg: str) -> None:
        """Record an import warning (issued once the import succeeds)."""
        if msg not in self.notes:
            self.notes.append(msg)

    def _warn_saturated(self) -> None:
        if not self.saturated:
            return
        msg = saturation_message("from_onnx", self.saturated)
        self.notes.insert(0, msg)
        warnings.warn(msg, ConstantSaturationWarning, stacklevel=4)

    def _raise_if_unsupported(self) -> None:
        if not self.unsupported and not self.problems:
            return
        lines = []
        if self.unsupported:
            total = sum(self.unsupported.values())
            lines.append(f"unsupported op types ({total} node(s)):")
            for op, n in sorted(self.unsupported.items(), key=lambda kv: (-kv[1], kv[0])):
                first = self.unsupported_nodes[op]
                more = ", ..." if n > len(first) else ""
                why = UNSUPPORTED_REASONS.get(op)
                lines.append(
                    f"  {op} x{n} (nodes: {', '.join(first)}{more})" + (f": {why}" if why else "")
                )
                for why in self.details.get(op, []):
                    lines.append(f"    its ONNX function body needs: {why}")
        raise unsupported_model(
            "from_onnx",
            self.model.graph.name or "model",
            lines,
            self.problems,
            self.skipped,
            op_counts=self.unsupported,
            bind_inputs=sorted(self.bind_hints),
        )

    # ---- the node loop ---------------------------------------------------------------
    def convert(self, nodes, env: dict, opset: int) -> None:
        """Convert ``nodes`` (in dependency order) into ``env`` (name -> value)."""
        for node in topological(nodes, env):
            ins = []
            for name in node.input:
                if not name:
                    ins.append(None)
                elif name in env:
                    ins.append(env[name])
                else:
                    ins.append(BROKEN)
                    self.problems.append(
                        f"{node.op_type} '{node_label(node)}': input '{name}' is never produced"
                    )
            if any(isinstance(v, Broken) for v in ins):
                self.skipped += 1
                outs = [BROKEN] * len(node.output)
            else:
                mark = creation_mark()
                outs = self._convert_node(node, ins, opset, env)
                self.names.record(node_label(node), node.output, outs, mark)
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = value

    def _convert_node(self, node, ins, opset, env):
        op = node.op_type
        default = node.domain in DEFAULT_DOMAINS
        key = op if default else f"{node.domain}.{op}"
        on_host = all(v is None or isinstance(v, Host) for v in ins)
        if default and (on_host or op in GROWING_OPS):
            self._check_sizes(node, ins, opset)  # before anything is allocated
        self.partition.onnx_nodes += 1
        try:
            if default and op in _RANDOM_OPS:
                raise Unsupported(key)
            fold = True
            if on_host:
                fold = self._may_fold(node, ins)
                folded = self._fold(node, ins, opset) if fold else None
                if folded is not None:
                    self._count_folded(folded)
                    return folded
            outs = None if self.fusions is None else self.fusions.apply(self, node, env, opset)
            if outs is None:
                outs = self.dispatch(node, ins, opset, env, fold=fold)
            self._count_folded(outs)
            for name, value in zip(node.output, outs):
                if isinstance(value, Tensor):
                    check_elements(
                        value.shape, f"from_onnx: {op} '{node_label(node)}' output '{name}'"
                    )
            return outs
        except (SizeLimitError, OnnxImportError):  # the whole model is refused
            raise
        except Unsupported as err:
            self.unsupported[str(err)] += 1
            names = self.unsupported_nodes.setdefault(str(err), [])
            if len(names) < 3:
                names.append(node_label(node))
        except (NotExpressible, AneforgeError) as err:
            self.problems.append(f"{op} '{node_label(node)}': {err}")
        return self._placeholders(node)

    def _check_sizes(self, node, ins, opset) -> None:
        """Refuse ``node`` if an output would pass the element limit (onnx_sizes)."""
        values = []
        for name, value in zip(node.input, ins):
            if value is None:
                values.append(None)
            elif isinstance(value, Host):
                values.append(np.asarray(value.value))
            elif isinstance(value, Tensor):
                elem = self.types.get(name) if not self.depth else None
                values.append((value.shape, elem or self.onnx.TensorProto.FLOAT))
            else:
                return
        check_node_outputs(self.onnx, node, values, opset, node_label(node))

    def _placeholders(self, node) -> list:
        """Stand-ins for a failed node's outputs, so later nodes still get checked."""
        outs = []
        for name in node.output:
            elem = self.types.get(name) if not self.depth else None
            shape = self.static_shapes.get(name) if not self.depth else None
            if shape is None or elem is None or not is_float(self.onnx, elem):
                outs.append(BROKEN)
            else:
                try:
                    outs.append(input(shape, name=f"<{name}>"))
                except AneforgeError:  # e.g. a rank the engine cannot hold
                    outs.append(BROKEN)
        return outs

    def dispatch(self, node, ins, opset, env=None, fold=True):
        """Convert one node with graph tensors among its inputs (or rebuild a recipe);
        ``fold=False`` builds its ops without folding them (a node past the budget)."""

        op = node.op_type
        default = node.domain in DEFAULT_DOMAINS
        handler = HANDLERS.get(op) if default else None
        if any(isinstance(v, IntView) for v in ins):  # an integer input: its own rules
            handler = integer_node if default else _not_integer
        if handler is not None:
            cx = Cx(self, node, opset, env, fold=fold)
            outs = handler(cx, node, ins, attrs(self.onnx, node))
            outs = list(outs) + [None] * (len(node.output) - len(outs))
            for name, value in zip(node.output, outs):
                if name and value is None:
                    raise NotExpressible(f"output '{name}' is not supported")
            return outs
        body = self.function_body(node, ins, opset)
        if body is None:
            raise Unsupported(op if default else f"{node.domain}.{op}")
        return self.expand(node, ins, body)

    # ---- host folding ----------------------------------------------------------------
    def _may_fold(self, node, ins) -> bool:
        """Whether all-constant ``node`` may be folded: integer and bool nodes and exact
        movement always; float arithmetic while the budget lasts (:mod:`.onnx_fold`).
        A node that may not is recorded in the partition."""
        arrays = [None if v is None else np.asarray(v.value) for v in ins]
        out_types = [self.types.get(o) if not self.depth else None for o in node.output]
        float_in = any(a is not None and a.dtype.kind in "fc" for a in arrays)
        float_out = any(t is not None and is_float(self.onnx, t) for t in out_types)
        unknown_out = any(t is None for t in out_types) and node.op_type in _MAKES_FLOATS
        if not (float_in or float_out or unknown_out) or node.op_type in EXACT_ON_HOST:
            return True
        shape = self.static_shapes.get(node.output[0]) if node.output and not self.depth else None
        work, elements = fold_work(node.op_type, arrays, attrs(self.onnx, node), shape)
        reason = self.budget.charge(node.op_type, node_label(node), work, elements)
        if reason is None:
            return True
        self.partition.left.append(LeftNode(node_label(node), node.op_type, work, reason))
        return False

    def _count_folded(self, outs) -> None:
        """Count a node whose every output is known at import (folded on the host)."""
        values = [v for v in outs if v is not None]
        if values and all(isinstance(v, Host) for v in values):
            self.partition.folded += 1
            if all(np.asarray(v.value).dtype.kind in "biu" for v in values):
                self.partition.folded_integer += 1

    def _fold(self, node, ins, opset):
        """Evaluate a node whose inputs are all host constants with ``onnx.reference``;
        None when it cannot (the node then goes through its handler)."""

        if node.domain not in DEFAULT_DOMAINS or _has_subgraph(node):
            return None  # If, Loop, Scan: their handlers convert the body node by node
        try:
            values = host_eval(node, [None if v is None else v.value for v in ins], opset)
        except Exception:
            return None
        data_recipe = any(v is not None and v.recipe is not None for v in ins)
        arithmetic = node.op_type not in EXACT_ON_HOST and node.op_type in HANDLERS
        outs = []
        for i, (name, value) in enumerate(zip(node.output, values)):
            arr = np.asarray(value)
            recipe = None
            if arr.dtype.kind == "f" and (data_recipe or arithmetic):
                recipe = (node, tuple(ins), opset, i)
            outs.append(Host(arr, label=name, recipe=recipe))
        return outs

    # ---- values ----------------------------------------------------------------------
    def t(self, value) -> Tensor:
        """``value`` as a graph tensor: host constants become fp16 weights."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Host):
            if id(value) not in self.weights:
                self._materialize_chain(value)
            return self.weights[id(value)][1]
        if isinstance(value, IntView):
            raise NotExpressible(
                f"input '{value.source.name}' is a run-time integer input; the engine "
                "returns no integer values (an output reads it as it is)"
            )
        refusal = getattr(value, "not_a_tensor", None)  # a rank-6 view (onnx_shape)
        if refusal is not None:
            raise NotExpressible(refusal())
        raise NotExpressible(f"expected a tensor, got {type(value).__name__}")

    def _materialize_chain(self, host: Host) -> None:
        """Materialize ``host`` into ``self.weights``, the recipe values it is rebuilt
        from first, with an explicit stack: a long chain of constant arithmetic must
        not recurse once per link."""
        stack = [host]
        while stack:
            h = stack[-1]
            if id(h) in self.weights:
                stack.pop()
                continue
            pending = []
            if h.recipe is not None and ("recipe", id(h.recipe[0])) not in self.weights:
                pending = [
                    v
                    for v in dict.fromkeys(h.recipe[1])
                    if isinstance(v, Host) and v.recipe is not None and id(v) not in self.weights
                ]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()  # keep the Host alive with its weight: ids stay unique
            self.weights[id(h)] = (h, self._materialize(h))

    def _materialize(self, host: Host) -> Tensor:
        if host.recipe is not None:
            node, ins, opset, index = host.recipe
            key = ("recipe", id(node))
            cached = self.weights.get(key)
            if cached is None:
                cached = (node, self.dispatch(node, list(ins), opset))
                self.weights[key] = cached
            out = cached[1][index]
            if isinstance(out, Tensor):
                return out
            host = out if isinstance(out, Host) and out.recipe is None else Host(host.value)
        arr = np.asarray(host.value)
        if arr.dtype.kind == "b":
            arr = arr.astype(np.float16)
        elif arr.dtype.kind in "iu":
            arr = arr.astype(np.float64)
        elif arr.dtype.kind != "f":
            raise NotExpressible(f"constant '{host.label}' of dtype {arr.dtype} is not numeric")
        if arr.size == 0:
            raise NotExpressible(f"constant '{host.label}' is empty")
        # two reductions, no temporaries, for the common weight within range (a NaN fails
        # both tests and takes the exact path); FP16_MAX is exact in every float format
        if not (arr.min() >= -FP16_MAX and arr.max() <= FP16_MAX):
            finite_big = np.isfinite(arr) & (np.abs(arr) > FP16_MAX)
            if finite_big.any():
                worst = float(np.max(np.abs(arr[finite_big])))
                self.saturated[host.label or "constant"] = worst
                arr = np.where(finite_big, np.sign(arr) * FP16_MAX, arr)
        return weight(arr.astype(np.float16), name=host.label or None)


def _given_shape(name: str, shape) -> tuple[int, ...]:
    """``shapes[name]`` as a tuple of ints; anything else is refused, not coerced."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) for d in dims
    ):
        raise OnnxImportError(
            f"from_onnx: shapes['{name}'] = {shape!r} must be a tuple of integers"
        )
    return tuple(int(d) for d in dims)


def _bound_constant(name: str, constants: dict) -> np.ndarray:
    """``constants[name]`` as an array of numbers (size-checked)."""
    try:
        value = np.asarray(constants[name])
    except (ValueError, TypeError) as err:  # a ragged list, a foreign object
        raise OnnxImportError(
            f"from_onnx: constants['{name}'] is not an array ({one_line(err)})"
        ) from None
    if value.dtype.kind not in "biuf":
        raise OnnxImportError(
            f"from_onnx: constants['{name}'] has dtype {value.dtype}; bind numbers"
        )
    check_elements(value.shape, f"from_onnx: constants['{name}']")
    return value


def _type_name(onnx, elem: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_string(elem)
    except Exception:  # not an element type onnx knows
        return f"element type {elem}"


#: Ops that can make floats from integer constants (their output type decides).
_MAKES_FLOATS = frozenset({"Cast", "CastLike", "ConstantOfShape", "EyeLike", "OneHot"})


def _not_integer(cx, node, ins, at):
    """A node of another domain reading a run-time integer input: refused."""
    view = next(v for v in ins if isinstance(v, IntView))
    raise NotExpressible(
        f"input '{view.source.name}' is a run-time integer input, which only embedding "
        "Gathers and Casts to float read; bind it with constants= to fold it at import"
    )


def _has_subgraph(node) -> bool:
    return any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute)
