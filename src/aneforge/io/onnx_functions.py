"""ONNX functions for :mod:`.onnx_import`: an op with no handler is converted as the
nodes of its function body, a model-local function or the ONNX spec's own (plain or
context-dependent), with the caller's attributes substituted for ``ref_attr_name``s and
the schema's defaults for the rest.

Functions nest (a body may call further functions), at most :data:`MAX_FUNCTION_DEPTH`
deep: a model nesting them deeper is refused rather than run into Python's recursion
limit, with an :class:`~.onnx_errors.OnnxImportError`. (A function calling itself is
refused earlier, by ``onnx.checker``.)

Example:
    >>> import numpy as np, onnx
    >>> from onnx import TensorProto, helper
    >>> import aneforge as af
    >>> from aneforge.graph.walk import topological_order
    >>> x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 1, 1])
    >>> y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 1, 1])
    >>> node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    >>> g = helper.make_graph([node], "g", [x], [y])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> sorted({t.op for t in topological_order(af.from_onnx(m).outputs)})
    ['add', 'div', 'input', 'mean', 'sqrt', 'square', 'sub', 'weight']
"""

from __future__ import annotations

from collections import Counter

from .onnx_errors import OnnxImportError
from .onnx_graph import node_label
from .onnx_load import DEFAULT_DOMAINS
from .onnx_values import BROKEN, Host, Unsupported

__all__ = ["MAX_FUNCTION_DEPTH", "FunctionExpansion"]

#: How deep function bodies may call further functions.
MAX_FUNCTION_DEPTH = 32


class FunctionExpansion:
    """The importer's function handling (a mixin of ``onnx_import._Importer``, which
    provides ``onnx``, ``model``, ``opset``, ``types``, ``depth``, ``problems``,
    ``unsupported``, ``skipped``, ``details``, ``local_functions`` and ``convert``)."""

    def function_body(self, node, ins, opset):
        """The FunctionProto ``node`` expands into, or None."""
        onnx = self.onnx
        local = self.local_functions.get((node.domain, node.op_type))
        if local is not None:
            return local
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
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

    def expand(self, node, ins, body):
        """Convert ``node`` as the nodes of its function ``body``."""
        if self.depth >= MAX_FUNCTION_DEPTH:
            raise OnnxImportError(
                f"from_onnx: function bodies nest more than {MAX_FUNCTION_DEPTH} deep (at "
                f"'{node_label(node)}', a {node.domain or 'ai.onnx'}.{node.op_type}); "
                "aneforge expands each call, so flatten the functions"
            )
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
            default = node.domain in DEFAULT_DOMAINS
            key = node.op_type if default else f"{node.domain}.{node.op_type}"
            self.details.setdefault(key, inner[:2])
            raise Unsupported(key)
        return [
            sub.get(formal, BROKEN) if name else None
            for formal, name in zip(body.output, node.output)
        ]
