"""Op chains that ONNX spells out for one PyTorch op, imported as torch.export gives it.

``torch.onnx.export`` (opset 17) writes some single ATen ops as chains of ONNX nodes;
``from_torch`` sees the ATen op itself. So that both imports give one program, ONNX
import recognises these chains in the top-level graph and emits what the ATen op maps
to (:class:`Fusions`, called once per node by the importer's node loop):

- **exact GELU** ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (``Div`` by float32 ``sqrt(2)``, or
  ``Mul`` by float32 ``sqrt(0.5)``, ``Erf``, ``Add`` 1, then ``x`` times 0.5 times that
  sum in any order) is ``gelu`` (approximate ``none``), as opset-20 ``Gelu`` imports;
- **tanh GELU** as the exporter writes ``nn.GELU(approximate="tanh")``, ``x * 0.5 * (1 +
  tanh(sqrt(2/pi) * (x + 0.044715 * x * (x * x))))``, is ``gelu`` (approximate ``tanh``).
  (GPT-2's ``gelu_new`` computes ``x ** 3`` with ``Pow``: both imports keep that chain
  elementwise, so it is left as it is);
- **rsqrt**: ``Div(1, Sqrt(x))`` (the exporter's ``torch.rsqrt``, T5's RMS norm) is
  ``rsqrt``: one rounding where the chain rounds twice (the two differ on 8,402 of the
  65,536 fp16 values, by one unit in the last place);
- **Linear on an N-D input**: ``MatMul(x, W)`` (``x`` of rank >= 3, ``W`` a constant
  [in, out] matrix), then ``Add`` of a constant bias of ``out`` values, is core ATen's
  ``view``, ``addmm``, ``view``: ``reshape`` to [rows, in], ``linear`` with the weight
  transposed on the host to PyTorch's [out, in] layout (exact), ``reshape`` back. Without
  the ``Add`` it is ``view``, ``mm``, ``view``: ``reshape``, ``matmul``, ``reshape``.
  ``linear`` adds its bias in fp16 after the product's one rounding (docs/numerics.md),
  so these are the same values as ``matmul`` + ``add``, bit for bit.

A chain is rewritten only when it provably computes that function: every constant is
read from the file and equals the float32 constant exactly (a size-1 float value that
does not raise the rank), ``x`` is a run-time fp16 tensor, and every intermediate value
has the next node of the chain as its only user (not a graph output, nor read by a
subgraph). The nodes before the last one are still converted; their ops have no users
and do not reach the compiled program.

Example:
    >>> import onnx
    >>> from onnx import TensorProto, helper
    >>> from aneforge.io import from_onnx
    >>> c = lambda name, v: helper.make_node(
    ...     "Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [v]))
    >>> nodes = [c("r2", 1.4142135), c("one", 1.0), c("half", 0.5),
    ...          helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
    ...          helper.make_node("Add", ["e", "one"], ["a"]),
    ...          helper.make_node("Mul", ["x", "a"], ["m"]),
    ...          helper.make_node("Mul", ["m", "half"], ["y"])]
    >>> vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
    >>> g = helper.make_graph(nodes, "gelu", [vi("x")], [vi("y")])
    >>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    >>> out = from_onnx(m).outputs[0]
    >>> out.op, out.attrs["approximate"]
    ('gelu', 'none')
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..graph.tensor import Tensor
from .onnx_values import Cx, Host

__all__ = ["Fusions"]

_SQRT2 = float(np.float32(math.sqrt(2.0)))
_SQRT_HALF = float(np.float32(math.sqrt(0.5)))
_SQRT_2_PI = float(np.float32(math.sqrt(2.0 / math.pi)))
_CUBIC = float(np.float32(0.044715))


@dataclass(frozen=True)
class _Match:
    """One recognised chain, checked again on the values when its last node converts."""

    kind: str  # "gelu", "rsqrt", "linear" or "matmul"
    op_type: str  # the last node's op and inputs (the node it replaces)
    inputs: tuple
    x: str  # the run-time input
    consts: tuple = ()  # (value name, the float32 constant it must equal)
    weight: str = ""
    bias: str = ""
    approximate: str = "none"


class Fusions:
    """The chains of one graph's top-level nodes that import as one ATen op's mapping.

    ``Fusions(graph, env)`` finds them by structure; ``apply(importer, node, env,
    opset)`` returns the last node's outputs built as that op (or None: convert the node
    as usual) once the values in ``env`` (the graph's scope, nothing else) pass.

    Example:
        >>> from onnx import helper
        >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [], [])
        >>> Fusions(g, {}).matches
        {}
    """

    def __init__(self, graph, env: dict):
        self.env = env
        self.transposed: dict[str, Host] = {}  # weight name -> its [out, in] copy
        producers = {o: n for n in graph.node for o in n.output if o}
        uses = _uses(graph)
        self.matches: dict[str, _Match] = {}
        for node in graph.node:
            match = (
                _gelu(node, producers, uses)
                or _rsqrt(node, producers, uses)
                or _linear(node, producers, uses)
            )
            if match is not None:
                self.matches[node.output[0]] = match

    def apply(self, importer, node, env: dict, opset: int):
        """The outputs of ``node`` as the op its chain computes, or None."""
        match = self.matches.get(node.output[0]) if env is self.env and node.output else None
        if match is None or (node.op_type, tuple(node.input)) != (match.op_type, match.inputs):
            return None
        x = env.get(match.x)
        if not (isinstance(x, Tensor) and x.op != "weight" and x.dtype == "float16"):
            return None
        if not all(_is_constant(env.get(name), value, x.ndim) for name, value in match.consts):
            return None
        cx = Cx(importer, node, opset, env)
        if match.kind == "gelu":
            return [cx.op("gelu", x, approximate=match.approximate)]
        if match.kind == "rsqrt":
            return [cx.op("rsqrt", x)]
        return self._linear(cx, match, x, env)

    def _linear(self, cx, match: _Match, x: Tensor, env: dict):
        w, b = env.get(match.weight), env.get(match.bias) if match.bias else None
        if x.ndim < 3 or not _plain(w, 2) or w.value.shape[0] != x.shape[-1]:
            return None
        k, n = w.value.shape
        if match.bias and not (_plain(b, 1) and b.value.shape == (n,)):
            return None
        lead = x.shape[:-1]
        rows = cx.op("reshape", x, shape=(math.prod(lead), k))
        if match.bias:
            wt = self.transposed.get(match.weight)
            if wt is None:  # one [out, in] weight per matrix, transposed exactly
                wt = Host(np.ascontiguousarray(w.value.T), label=w.label)
                self.transposed[match.weight] = wt
            y = cx.op("linear", rows, cx.t(wt), cx.t(b))
        else:
            y = cx.op("matmul", rows, cx.t(w))
        return [cx.op("reshape", y, shape=lead + (n,))]


# ---- the structure ------------------------------------------------------------------


def _uses(graph) -> Counter:
    """How many times each value name is read: node inputs, graph outputs, and every
    name a subgraph (of any depth) reads, which counts outer values it captures."""
    uses: Counter = Counter(o.name for o in graph.output)
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            uses.update(name for name in node.input if name)
            for a in node.attribute:
                if a.type == a.GRAPH:
                    stack.append(a.g)
                elif a.type == a.GRAPHS:
                    stack.extend(a.graphs)
        if g is not graph:
            uses.update(o.name for o in g.output)
    return uses


def _only(name: str, op_type: str, producers: dict, uses: Counter):
    """The node producing ``name`` if it is an ``op_type`` node read only once."""
    node = producers.get(name)
    if node is None or node.op_type != op_type or uses[name] != 1 or len(node.output) != 1:
        return None
    return node if node.domain in ("", "ai.onnx") else None


def _gelu(node, producers, uses):
    """``x * 0.5 * (1 + F(x))`` with ``F`` erf's or tanh's GELU core, in any product
    order: the last ``Mul`` of two, one of them an inner ``Mul`` read only here."""
    if node.op_type != "Mul" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    for inner, other in (node.input, node.input[::-1]):
        mul = _only(inner, "Mul", producers, uses)
        if mul is None or len(mul.input) != 2:
            continue
        factors = [*mul.input, other]
        for i, plus in enumerate(factors):
            core = _plus_one(plus, producers, uses)
            if core is None:
                continue
            rest = factors[:i] + factors[i + 1 :]
            for x, half in (rest, rest[::-1]):
                found = _core(core, x, producers, uses)
                if found is not None:
                    approximate, consts = found
                    consts = (*consts, (half, 0.5))
                    return _Match(
                        "gelu", "Mul", tuple(node.input), x, consts, approximate=approximate
                    )
    return None


def _plus_one(name, producers, uses):
    """``(the other input, the constant's name)`` of ``Add(v, 1)`` (either order)."""
    add = _only(name, "Add", producers, uses)
    if add is None or len(add.input) != 2:
        return None
    a, b = add.input
    return [(a, b), (b, a)]


def _core(candidates, x, producers, uses):
    """``("none" | "tanh", constants)`` when one of ``candidates`` (value, constant) is
    ``erf(x / sqrt 2)`` or ``tanh(sqrt(2/pi) * (x + 0.044715 x^3))`` plus constant 1."""
    for value, one in candidates:
        erf = _only(value, "Erf", producers, uses)
        if erf is not None:
            scaled = _scaled_x(erf.input[0], x, producers, uses, _SQRT2, _SQRT_HALF)
            if scaled is not None:
                return "none", ((one, 1.0), scaled)
        tanh = _only(value, "Tanh", producers, uses)
        if tanh is not None:
            consts = _tanh_core(tanh.input[0], x, producers, uses)
            if consts is not None:
                return "tanh", ((one, 1.0), *consts)
    return None


def _scaled_x(name, x, producers, uses, divisor, factor):
    """The constant's check of ``Div(x, divisor)`` or ``Mul(x, factor)`` (either order)."""
    div = _only(name, "Div", producers, uses)
    if div is not None and len(div.input) == 2 and div.input[0] == x:
        return (div.input[1], divisor)
    mul = _only(name, "Mul", producers, uses)
    if mul is not None and len(mul.input) == 2 and x in mul.input:
        a, b = mul.input
        return (b if a == x else a, factor)
    return None


def _tanh_core(name, x, producers, uses):
    """The constants of ``Mul(sqrt(2/pi), Add(x, Mul(0.044715, Mul(x, Mul(x, x)))))``
    (each product and the sum in either order), as the exporter writes GELU's tanh."""
    outer = _only(name, "Mul", producers, uses)
    if outer is None or len(outer.input) != 2:
        return None
    for inner, k in (outer.input, outer.input[::-1]):
        add = _only(inner, "Add", producers, uses)
        if add is None or len(add.input) != 2 or x not in add.input:
            continue
        a, b = add.input
        cubic = _only(b if a == x else a, "Mul", producers, uses)
        if cubic is None or len(cubic.input) != 2:
            continue
        for cube, c in (cubic.input, cubic.input[::-1]):
            if _is_cube(cube, x, producers, uses):
                return ((k, _SQRT_2_PI), (c, _CUBIC))
    return None


def _is_cube(name, x, producers, uses) -> bool:
    """Whether ``name`` is ``Mul(x, Mul(x, x))`` (either order)."""
    outer = _only(name, "Mul", producers, uses)
    if outer is None or len(outer.input) != 2 or x not in outer.input:
        return False
    a, b = outer.input
    square = _only(b if a == x else a, "Mul", producers, uses)
    return square is not None and list(square.input) == [x, x]


def _rsqrt(node, producers, uses):
    """``Div(1, Sqrt(x))``, the ``Sqrt`` read only here; the 1 is checked when it
    converts."""
    if node.op_type != "Div" or node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    one, root = node.input
    sqrt = _only(root, "Sqrt", producers, uses)
    if sqrt is None or len(sqrt.input) != 1 or one == root:
        return None
    return _Match("rsqrt", "Div", tuple(node.input), sqrt.input[0], ((one, 1.0),))


def _linear(node, producers, uses):
    """``Add(MatMul(x, W), b)`` (either order, the MatMul read only here), else any
    ``MatMul(x, W)``; the values are checked when it converts."""
    if node.domain not in ("", "ai.onnx") or len(node.input) != 2:
        return None
    if node.op_type == "MatMul":
        return _Match("matmul", "MatMul", tuple(node.input), node.input[0], weight=node.input[1])
    if node.op_type != "Add":
        return None
    for product, bias in (node.input, node.input[::-1]):
        mm = _only(product, "MatMul", producers, uses)
        if mm is not None and len(mm.input) == 2 and bias not in mm.input:
            return _Match(
                "linear", "Add", tuple(node.input), mm.input[0], weight=mm.input[1], bias=bias
            )
    return None


# ---- the values ---------------------------------------------------------------------


def _is_constant(value, expected: float, ndim: int) -> bool:
    """Whether ``value`` is a size-1 float constant of rank <= ``ndim`` equal to
    ``expected`` exactly (compared in float64, so only the float32 value passes)."""
    if not isinstance(value, Host):
        return False
    arr = np.asarray(value.value)
    if arr.dtype.kind != "f" or arr.size != 1 or arr.ndim > ndim:
        return False
    return float(arr.reshape(())) == expected


def _plain(value, ndim: int) -> bool:
    """Whether ``value`` is a float constant of rank ``ndim`` read from the file (not
    rebuilt from a recipe of fp16 arithmetic)."""
    if not isinstance(value, Host) or value.recipe is not None:
        return False
    arr = np.asarray(value.value)
    return arr.dtype.kind == "f" and arr.ndim == ndim and arr.size > 0
