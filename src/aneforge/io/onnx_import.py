"""ONNX import: ``from_onnx(model) -> OnnxGraph``, an aneforge graph of the same model.

Inputs: an ``onnx.ModelProto``, a path to a ``.onnx`` file or its bytes, default-domain
opset 13 or newer. Output: an :class:`OnnxGraph` whose ``inputs`` and ``outputs`` are
aneforge Tensors in ONNX order; ``.compile()`` turns it into a Program.

How values are handled (the contract the tests check):

- Float graph inputs become fp16 inputs named like the ONNX inputs; bool inputs become
  fp16 inputs holding 0/1. Integer graph inputs cannot enter the fp16 dataplane: bind
  them with ``constants={name: array}``. Every dimension must be static: pass
  ``shapes={name: shape}`` for symbolic or unknown ones.
- Initializers and ``Constant`` outputs are host constants. Integer tensors (shapes,
  indices, axes, sizes) never reach the device: every node whose inputs are all host
  constants is evaluated at import by ``onnx.reference`` (exact ONNX semantics), so
  Shape / Gather / Concat / Unsqueeze / Cast / Range / ConstantOfShape subgraphs fold
  away. A float constant that an op reads as a *parameter* (Clip bounds, Resize scales,
  Pad values) is read from that exact host value; a float constant that an op reads as
  *data* becomes an fp16 weight, and float arithmetic between constants is rebuilt from
  its recipe with the emulator's fp16 kernels (constant folding in fp16, never float64).
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

from ..errors import AneforgeError, AneforgeWarning, PrecisionWarning
from ..graph.fp16 import FP16_MAX
from ..graph.tensor import Tensor, creation_mark, input, make, weight
from .onnx_graph import NodeNames, apply_names, node_label, topological

MIN_OPSET = 13
_DEFAULT_DOMAINS = ("", "ai.onnx")
_RANDOM_OPS = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
}


class OnnxImportError(AneforgeError, ValueError):
    """The model cannot be read as given: opset, dynamic dims, integer inputs, ..."""


class UnsupportedModelError(AneforgeError, ValueError):
    """The model uses ops or attributes aneforge cannot express (all of them listed).

    Attributes:
        op_counts: unsupported op type -> number of nodes.
        problems: one line per node whose attributes or inputs cannot be expressed.
        bind_inputs: graph inputs that feed parameters (scales, pads, indices...) which
            must be known at import; ``constants={name: value}`` binds them.
    """

    def __init__(self, message: str, op_counts=None, problems=None, bind_inputs=None):
        super().__init__(message)
        self.op_counts = dict(op_counts or {})
        self.problems = list(problems or [])
        self.bind_inputs = list(bind_inputs or [])


class OnnxImportWarning(AneforgeWarning):
    """Something in the model changed on import (see the message)."""


class ConstantSaturationWarning(OnnxImportWarning, PrecisionWarning):
    """Constants beyond the fp16 range were saturated to +-65504."""


class NotExpressible(Exception):
    """Raised by an op handler: this node's attributes or inputs cannot be expressed."""


class _Unsupported(Exception):
    """Raised by the dispatcher: no handler and no function body for this op type."""


@dataclass(eq=False)
class Host:
    """A value known at import: a NumPy array (any dtype), never sent as such to the
    device. ``recipe`` (node, inputs, opset, index) rebuilds a float value computed from
    constants with fp16 graph ops when it is used as data; ``label`` names it."""

    value: np.ndarray
    label: str = ""
    recipe: tuple | None = None


class _Broken:
    """Stands for the outputs of a node that failed, so later nodes are skipped."""


_BROKEN = _Broken()


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
    """

    inputs: list
    outputs: list
    input_names: list
    output_names: list
    warnings: list = field(default_factory=list)
    name: str = ""

    def compile(self, **kwargs):
        """``af.compile(self.outputs, **kwargs)``: a Program whose inputs are the graph
        inputs the outputs use, in ONNX order (call it positionally or by name), and
        whose ``output_names`` are the ONNX output names (unless given)."""
        from ..compiler.compile import compile as _compile

        kwargs.setdefault("output_names", list(self.output_names))
        return _compile(list(self.outputs), **kwargs)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}{t.shape}" for n, t in zip(self.input_names, self.inputs))
        outs = ", ".join(f"{n}{t.shape}" for n, t in zip(self.output_names, self.outputs))
        return f"<OnnxGraph {self.name!r}: ({ins}) -> ({outs})>"


def from_onnx(model, shapes=None, constants=None, input_ranges=None) -> OnnxGraph:
    """Import an ONNX model (ModelProto, path or bytes) as an aneforge graph.

    Args:
        model: an ``onnx.ModelProto``, a path to a ``.onnx`` file, or serialized bytes.
        shapes: ``{input_name: shape}`` fixing inputs with symbolic or unknown dims.
        constants: ``{input_name: array}`` binding graph inputs to fixed values at import
            (integer inputs such as token positions or indices must be bound).
        input_ranges: ``{input_name: (lo, hi) or max_abs}``, the values each input will
            be fed, declared on the graph's inputs as ``af.input(..., range=...)`` does
            (:func:`aneforge.range_analysis` and ``compile`` then find where it can
            overflow); inputs not named stay unknown.

    Returns:
        An :class:`OnnxGraph`. Raises :class:`OnnxImportError` for unreadable models,
        opsets older than 13 and unresolved dynamic dims, and one
        :class:`UnsupportedModelError` listing everything that cannot be expressed.
    """
    onnx = _onnx()
    proto = _load(onnx, model)
    importer = _Importer(onnx, proto, dict(shapes or {}), dict(constants or {}))
    importer.ranges = dict(input_ranges or {})
    return importer.run()


def _onnx():
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a declared extra
        raise OnnxImportError(
            "from_onnx needs the 'onnx' package: pip install 'aneforge[onnx]'"
        ) from None
    return onnx


def _load(onnx, model):
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        try:
            return onnx.load(model)
        except FileNotFoundError:
            raise OnnxImportError(f"from_onnx: no such file: {model}") from None
        except Exception as err:  # a truncated or foreign file
            raise OnnxImportError(f"from_onnx: cannot read {model} as ONNX: {err}") from None
    raise OnnxImportError(
        f"from_onnx: expected an onnx.ModelProto, a path or bytes, got {type(model).__name__}"
    )


def _attrs(onnx, node) -> dict:
    out = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode()
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode() for v in value]
        out[a.name] = value
    return out


class _Importer:
    """One import: the value environment, constant handling and the node loop."""

    def __init__(self, onnx, model, shapes, constants):
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
        self.opset = self._check_opset()

    # ---- set-up ----------------------------------------------------------------------
    def _check_opset(self) -> int:
        versions = {o.domain: o.version for o in self.model.opset_import}
        version = versions.get("", versions.get("ai.onnx"))
        if version is None:  # only other domains: their ops are listed as unsupported
            return int(self.onnx.defs.onnx_opset_version())
        if version < MIN_OPSET:
            raise OnnxImportError(
                f"from_onnx: the model uses ONNX opset {version}; aneforge imports opset "
                f"{MIN_OPSET} and newer. Convert it first: "
                f"onnx.version_converter.convert_version(model, {MIN_OPSET})"
            )
        return version

    def _input_shape(self, vi) -> tuple[int, ...]:
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"from_onnx: input '{name}' is not a tensor")
        tt = vi.type.tensor_type
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        if name in self.shapes:
            shape = tuple(int(d) for d in self.shapes[name])
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
        return tuple(int(d.dim_value) for d in dims)

    def _infer_types(self) -> None:
        """Element types of every value ONNX shape inference can name (best effort)."""
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
            env[init.name] = Host(onnx.numpy_helper.to_array(init), label=init.name)
        inputs, names = [], []
        int_inputs = []
        for vi in graph.input:
            if vi.name in env and vi.name not in self.constants:
                continue  # an initializer listed as an input: its default value
            if vi.name in self.constants:
                env[vi.name] = Host(np.asarray(self.constants[vi.name]), label=vi.name)
                continue
            elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
            if not (_is_float(onnx, elem) or elem == onnx.TensorProto.BOOL):
                int_inputs.append(f"'{vi.name}' ({onnx.helper.tensor_dtype_to_string(elem)})")
                env[vi.name] = _BROKEN
                continue
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
                f"from_onnx: input_ranges= names no float graph input: {unranged}; "
                f"the inputs are {names}"
            )
        if int_inputs:
            raise OnnxImportError(
                f"from_onnx: input(s) {', '.join(int_inputs)} are not float: the engine's "
                "dataplane is fp16; bind them at import with constants={name: array}"
            )
        self.convert(graph.node, env, self.opset)
        outputs = []
        for vi in graph.output:
            value = env.get(vi.name, _BROKEN)
            if isinstance(value, _Broken) or value is None:
                outputs.append(None)
                continue
            try:
                outputs.append(self.t(value))
            except NotExpressible as err:  # e.g. an empty output
                self.problems.append(f"output '{vi.name}': {err}")
                outputs.append(None)
        self._raise_if_unsupported()
        if any(o is None for o in outputs):  # pragma: no cover - failures raise above
            raise OnnxImportError("from_onnx: some outputs were not produced")
        for msg in self.notes:
            warnings.warn(msg, OnnxImportWarning, stacklevel=3)
        self._warn_saturated()
        return OnnxGraph(
            inputs,
            apply_names(outputs, self.names),
            names,
            [vi.name for vi in graph.output],
            list(self.notes),
            name=graph.name,
        )

    def note(self, msg: str) -> None:
        """Record an import warning (issued once the import succeeds)."""
        if msg not in self.notes:
            self.notes.append(msg)

    def _warn_saturated(self) -> None:
        if not self.saturated:
            return
        shown = ", ".join(f"'{k}' (|x| up to {v:g})" for k, v in self.saturated.items())
        msg = (
            f"from_onnx: {len(self.saturated)} constant(s) hold finite values beyond the "
            f"fp16 range, saturated to +-{FP16_MAX:g}: {shown}"
        )
        self.notes.insert(0, msg)
        warnings.warn(msg, ConstantSaturationWarning, stacklevel=4)

    def _raise_if_unsupported(self) -> None:
        from .onnx_ops import UNSUPPORTED_REASONS

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
        if self.problems:
            lines.append(f"nodes that cannot be expressed ({len(self.problems)}):")
            lines.extend(f"  {p}" for p in self.problems)
        if self.skipped:
            lines.append(f"({self.skipped} node(s) after them were not checked)")
        name = self.model.graph.name or "model"
        raise UnsupportedModelError(
            f"from_onnx: '{name}' cannot be imported:\n" + "\n".join(lines),
            self.unsupported,
            self.problems,
            sorted(self.bind_hints),
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
                    ins.append(_BROKEN)
                    self.problems.append(
                        f"{node.op_type} '{node_label(node)}': input '{name}' is never produced"
                    )
            if any(isinstance(v, _Broken) for v in ins):
                self.skipped += 1
                outs = [_BROKEN] * len(node.output)
            else:
                mark = creation_mark()
                outs = self._convert_node(node, ins, opset, env)
                self.names.record(node_label(node), node.output, outs, mark)
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = value

    def _convert_node(self, node, ins, opset, env):
        op = node.op_type
        key = op if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{op}"
        try:
            if node.domain in _DEFAULT_DOMAINS and op in _RANDOM_OPS:
                raise _Unsupported(key)
            if all(v is None or isinstance(v, Host) for v in ins):
                folded = self._fold(node, ins, opset)
                if folded is not None:
                    return folded
            return self.dispatch(node, ins, opset, env)
        except _Unsupported as err:
            self.unsupported[str(err)] += 1
            names = self.unsupported_nodes.setdefault(str(err), [])
            if len(names) < 3:
                names.append(node_label(node))
        except (NotExpressible, AneforgeError) as err:
            self.problems.append(f"{op} '{node_label(node)}': {err}")
        return self._placeholders(node)

    def _placeholders(self, node) -> list:
        """Stand-ins for a failed node's outputs, so later nodes still get checked."""
        outs = []
        for name in node.output:
            elem = self.types.get(name) if not self.depth else None
            shape = self.static_shapes.get(name) if not self.depth else None
            if shape is None or elem is None or not _is_float(self.onnx, elem):
                outs.append(_BROKEN)
            else:
                try:
                    outs.append(input(shape, name=f"<{name}>"))
                except AneforgeError:  # e.g. a rank the engine cannot hold
                    outs.append(_BROKEN)
        return outs

    def dispatch(self, node, ins, opset, env=None):
        """Convert one node with graph tensors among its inputs (or rebuild a recipe)."""
        from .onnx_ops import HANDLERS

        op = node.op_type
        default = node.domain in _DEFAULT_DOMAINS
        handler = HANDLERS.get(op) if default else None
        if handler is not None:
            cx = _Cx(self, node, opset, env)
            outs = handler(cx, node, ins, _attrs(self.onnx, node))
            outs = list(outs) + [None] * (len(node.output) - len(outs))
            for name, value in zip(node.output, outs):
                if name and value is None:
                    raise NotExpressible(f"output '{name}' is not supported")
            return outs
        body = self._function_body(node, ins, opset)
        if body is None:
            raise _Unsupported(op if default else f"{node.domain}.{op}")
        return self._expand(node, ins, body)

    # ---- host folding ----------------------------------------------------------------
    def _fold(self, node, ins, opset):
        """Evaluate a node whose inputs are all host constants with ``onnx.reference``;
        None when it cannot (the node then goes through its handler)."""
        from .onnx_ops import EXACT_ON_HOST, HANDLERS

        if node.domain not in _DEFAULT_DOMAINS or node.op_type == "If":
            return None
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

    def _function_body(self, node, ins, opset):
        onnx = self.onnx
        local = self.local_functions.get((node.domain, node.op_type))
        if local is not None:
            return local
        domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
        if domain:  # another standard domain (ai.onnx.preview, ...): its own opset
            versions = {o.domain: o.version for o in self.model.opset_import}
            opset = versions.get(domain, 1)
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, domain)
        except Exception:
            return None
        if schema.has_function:
            versions = [v for v in schema.function_opset_versions if v <= opset]
            if versions:
                body = schema.get_function_with_opset_version(max(versions))
                if isinstance(body, bytes):
                    parsed = onnx.FunctionProto()
                    parsed.ParseFromString(body)
                    body = parsed
                return body
        if schema.has_context_dependent_function:
            versions = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
            if not versions:
                return None
            types = [
                self._type_proto(v, name).SerializeToString()
                for v, name in zip(ins, node.input)
                if v is not None
            ]
            try:
                raw = schema.get_context_dependent_function_with_opset_version(
                    max(versions), node.SerializeToString(), types
                )
            except Exception:
                return None
            body = onnx.FunctionProto()
            body.ParseFromString(raw)
            return body
        return None

    def _type_proto(self, value, name):
        onnx = self.onnx
        if isinstance(value, Host):
            elem = onnx.helper.np_dtype_to_tensor_dtype(value.value.dtype)
            return onnx.helper.make_tensor_type_proto(elem, value.value.shape)
        elem = self.types.get(name) if not self.depth else None
        return onnx.helper.make_tensor_type_proto(elem or onnx.TensorProto.FLOAT, value.shape)

    def _expand(self, node, ins, body):
        """Convert ``node`` as the nodes of its function ``body``."""
        onnx = self.onnx
        caller = {a.name: a for a in node.attribute}
        defaults = {a.name: a for a in body.attribute_proto}
        try:  # a schema function's attribute defaults live in the schema
            schema = onnx.defs.get_schema(node.op_type, self.opset, node.domain)
            for name, spec in schema.attributes.items():
                if spec.default_value.name and name not in defaults:
                    defaults[name] = spec.default_value
        except Exception:  # a model-local function: defaults are in attribute_proto
            pass
        sub: dict = {}
        for formal, value in zip(body.input, ins):
            if value is not None:
                sub[formal] = value
        nodes = []
        for inner in body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(inner)
            del copy.attribute[:]
            for a in inner.attribute:
                if a.ref_attr_name:
                    src = caller.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue
                    b = onnx.AttributeProto()
                    b.CopyFrom(src)
                    b.name = a.name
                    copy.attribute.append(b)
                else:
                    copy.attribute.append(a)
            if not copy.name:
                copy.name = f"{node_label(node)}/{inner.op_type}"
            nodes.append(copy)
        versions = {o.domain: o.version for o in body.opset_import}
        opset = versions.get("", versions.get("ai.onnx", self.opset))
        saved = (list(self.problems), Counter(self.unsupported), self.skipped)
        self.depth += 1
        try:
            self.convert(nodes, sub, opset)
        finally:
            self.depth -= 1
        if (self.problems, self.unsupported) != saved[:2]:
            inner = [p for p in self.problems if p not in saved[0]]
            inner += [f"{op} (unsupported)" for op in self.unsupported - saved[1]]
            self.problems, self.unsupported, self.skipped = saved
            default = node.domain in _DEFAULT_DOMAINS
            key = node.op_type if default else f"{node.domain}.{node.op_type}"
            self.details.setdefault(key, inner[:2])
            raise _Unsupported(key)
        return [
            sub.get(formal, _BROKEN) if name else None
            for formal, name in zip(body.output, node.output)
        ]

    # ---- values ----------------------------------------------------------------------
    def t(self, value) -> Tensor:
        """``value`` as a graph tensor: host constants become fp16 weights."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, Host):
            cached = self.weights.get(id(value))
            if cached is None:  # keep the Host alive with its weight: ids stay unique
                cached = (value, self._materialize(value))
                self.weights[id(value)] = cached
            return cached[1]
        raise NotExpressible(f"expected a tensor, got {type(value).__name__}")

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
        finite_big = np.isfinite(arr) & (np.abs(arr.astype(np.float64)) > FP16_MAX)
        if finite_big.any():
            worst = float(np.max(np.abs(arr[finite_big])))
            self.saturated[host.label or "constant"] = worst
            arr = np.where(finite_big, np.sign(arr) * FP16_MAX, arr)
        if arr.size == 0:
            raise NotExpressible(f"constant '{host.label}' is empty")
        return weight(arr.astype(np.float16), name=host.label or None)


class _Cx:
    """What an op handler sees: the importer's value helpers and the opset."""

    def __init__(self, importer: _Importer, node, opset: int, env=None):
        self.importer = importer
        self.node = node
        self.opset = opset
        self.env = env if env is not None else {}  # the enclosing scope (subgraphs)

    def attrs(self, node) -> dict:
        """A node's attributes as Python values."""
        return _attrs(self.importer.onnx, node)

    def subgraph(self, graph, bindings: dict) -> list:
        """Convert the nodes of ``graph`` in the enclosing scope plus ``bindings``;
        returns its outputs (a failed one raises NotExpressible)."""
        sub = dict(self.env)
        sub.update(bindings)
        self.importer.convert(graph.node, sub, self.opset)
        outs = [sub.get(o.name, _BROKEN) for o in graph.output]
        if any(isinstance(v, _Broken) for v in outs):
            raise NotExpressible(f"its subgraph '{graph.name}' cannot be expressed")
        return outs

    def t(self, value) -> Tensor:
        """A data operand as a graph tensor (constants become fp16 weights)."""
        return self.importer.t(value)

    def arr(self, value, what: str) -> np.ndarray:
        """A parameter operand as its exact host value; a graph tensor is refused, naming
        the graph inputs it comes from (bind them with ``constants=``)."""
        if isinstance(value, Host):
            return np.asarray(value.value)
        if isinstance(value, Tensor) and value.op == "weight":
            return np.asarray(value.value, dtype=np.float64)
        names = _source_inputs(value) if isinstance(value, Tensor) else []
        self.importer.bind_hints.update(names)
        hint = ""
        if names:
            shown = ", ".join(f"'{n}'" for n in names)
            hint = f"; it comes from graph input(s) {shown}: bind them with constants="
        raise NotExpressible(
            f"{what} must be a constant (known at import), but it is computed on the device{hint}"
        )

    def ints(self, value, what: str) -> list[int]:
        """A constant integer list (scalars become one-element lists)."""
        return [int(v) for v in self.arr(value, what).reshape(-1)]

    def is_const(self, value) -> bool:
        """Whether ``value`` is known at import."""
        return isinstance(value, Host) or (isinstance(value, Tensor) and value.op == "weight")

    def op(self, name: str, *srcs, **attrs) -> Tensor:
        """Build an aneforge node; one whose sources are all weights folds in fp16."""
        srcs = [self.t(s) if not isinstance(s, (int, float)) else s for s in srcs]
        node = make(name, *srcs, **attrs)
        if node.srcs and all(s.op == "weight" for s in node.srcs):
            return _fold_fp16(node)
        return node

    def note(self, msg: str) -> None:
        """An import warning naming this node."""
        self.importer.note(f"{self.node.op_type} '{node_label(self.node)}': {msg}")

    def type_of(self, name: str):
        """The ONNX element type of value ``name`` when shape inference knows it."""
        return self.importer.types.get(name)


def host_eval(node, arrays, opset: int) -> list[np.ndarray]:
    """Outputs of ``node`` on host arrays (None for absent inputs), by ``onnx.reference``:
    the exact ONNX semantics, used for constants and for index maps of movement ops."""
    from onnx.reference import ReferenceEvaluator

    feeds = {n: a for n, a in zip(node.input, arrays) if n and a is not None}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        evaluator = ReferenceEvaluator(node, opsets={"": opset})
        return [np.asarray(v) for v in evaluator.run(None, feeds)]


def _fold_fp16(node: Tensor) -> Tensor:
    """Evaluate a node of weights with its fp16 emulator kernel: a weight."""
    from ..emulator.gemm import gemm_reference
    from ..graph.registry import get_op

    value = get_op(node.op).emulate([s.value for s in node.srcs], node.attrs, gemm_reference)
    value = np.asarray(value, dtype=np.float16).reshape(node.shape)
    return weight(value)


def _source_inputs(t: Tensor) -> list[str]:
    """Names of the graph inputs ``t`` is computed from."""
    seen, stack, names = set(), [t], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "input" and node.name and not node.name.startswith("<"):
            names.add(node.name)
        stack.extend(node.srcs)
    return sorted(names)


def _is_float(onnx, elem: int) -> bool:
    tp = onnx.TensorProto
    return elem in (tp.FLOAT, tp.FLOAT16, tp.DOUBLE, tp.BFLOAT16)
