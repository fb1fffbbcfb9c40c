"""Integer graph inputs of ONNX models (token ids, attention masks), for
:mod:`.onnx_import`.

An integer ONNX graph input that is not bound with ``constants=`` becomes an integer
aneforge input (:func:`aneforge.input` with ``dtype=``), which the engine's I/O takes as
int8, uint8, int16 or uint16. While the graph is converted it is carried as an
:class:`IntView` (the input, seen in some shape), and only these nodes may read it:

- ``Gather(table, ids)`` on axis 0 of a float table (a constant or a tensor): the
  ``embedding`` op, the rows of the table at the run-time ids;
- ``Cast`` / ``CastLike`` to a float type: ``int_to_fp16`` (exact for ``|v| <= 2048``,
  rounded to 11 significant bits beyond); to bool: ``int_to_fp16 != 0`` (exact); to
  int32 / int64: the same values;
- ``Identity``, ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``: the same values
  in a new shape (the conversion runs on the input and its fp16 result is reshaped);
- ``Shape`` and ``Size``: constants (shapes are static), so position ids from
  ``Range`` and masks derived from shapes fold at import;
- ``Equal`` with an integer constant of magnitude below 2048: the start of integers
  computed on the engine (:mod:`.int_values`, which states why they are exact).

Integers computed on the engine (an :class:`~.int_values.IntValue`: RoBERTa's position
ids ``CumSum(Cast(Not(Equal(ids, pad)))) * mask + pad``) may be read by ``Equal``,
``Not``, ``Cast`` / ``CastLike`` (to an integer type that holds them, to float, to
bool), ``CumSum`` (any axis, exclusive, reverse), ``Add`` / ``Sub`` / ``Mul`` with an
integer constant or another computed value, ``Identity`` and the views above,
``Shape`` / ``Size``, an embedding ``Gather`` (``embedding_fp16_ids``, which checks the
ids when it runs) and a ``GatherElements`` of a constant that is the same along its
axis (a constant). Each keeps a static interval; one that leaves ``[-2048, 2048]`` is
refused naming the interval.

Any other node reading one (``Add``, ``CumSum``... of the input's own values, a
comparison with a constant of 2048 or more, a ``Transpose`` of computed integers) is
refused naming the input, the node and what it needs; such inputs are listed in
``UnsupportedModelError.bind_inputs`` (``constants=`` folds them).

**Engine type.** Each input is declared with the narrowest engine type its uses allow:
embedding ids with a table of ``R`` rows lie in ``[0, R)`` (uint8 up to 256 rows, else
uint16; more than 65536 rows is refused), and the input's range is declared as such; a
value read only through a cast or a comparison takes its ``input_ranges=`` range when
given, else int16 (uint16 for an unsigned ONNX type), whose bounds a program then
enforces. The graph's ``warnings`` say which type each input got and why.

Example:
    >>> IntView.__name__, CONVERTS
    ('IntView', ('Cast', 'CastLike'))
"""

from __future__ import annotations

import math

import numpy as np

from ..graph.tensor import INTEGER_DTYPES, input
from . import int_values as iv
from .int_values import IntInput, IntValue, IntView
from .onnx_errors import NotExpressible
from .onnx_graph import node_label
from .onnx_ops import reshape
from .onnx_values import Host, host_eval

__all__ = ["CONVERTS", "IntInput", "IntView", "choose_dtype", "integer_node", "typed_inputs"]

#: The nodes that convert an integer input's values (the others move or measure it).
CONVERTS = ("Cast", "CastLike")
_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
_ARITH = {"Add": "add", "Sub": "sub", "Mul": "mul"}
#: Movements that would reorder, repeat or drop values (refused on integer inputs).
_MOVES = ("Transpose", "Slice", "Concat", "Expand", "Tile", "Split", "Pad", "GatherElements",
          "GatherND", "Compress", "ReverseSequence", "DepthToSpace", "SpaceToDepth")  # fmt: skip
_FLOAT = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
_BOOL = 9
_SAME_VALUES = (6, 7)  # INT32, INT64: hold every engine integer
#: ONNX integer element types and the values each holds.
ONNX_INT_BOUNDS = {
    2: (0, 2**8 - 1),  # UINT8
    3: (-(2**7), 2**7 - 1),  # INT8
    4: (0, 2**16 - 1),  # UINT16
    5: (-(2**15), 2**15 - 1),  # INT16
    6: (-(2**31), 2**31 - 1),  # INT32
    7: (-(2**63), 2**63 - 1),  # INT64
    12: (0, 2**32 - 1),  # UINT32
    13: (0, 2**64 - 1),  # UINT64
}
#: The engine types, narrowest first.
_ORDER = ("uint8", "int8", "uint16", "int16")


def _refuse(cx, view: IntView, node, needs: str):
    name = view.source.name
    cx.importer.bind_hints.add(name)
    raise NotExpressible(
        f"input '{name}' ({view.source.elem_name}) is a run-time integer input, which the "
        "engine takes only as the ids of an embedding Gather (rows of a float table, "
        f"axis 0) or through a Cast to float; this {node.op_type} needs {needs} on "
        f"run-time data: bind it with constants={{'{name}': ...}} to fold it at import"
    )


def integer_node(cx, node, ins, at) -> list:
    """Convert ``node``, which reads an integer input (an :class:`IntView` among ``ins``),
    or refuse it with the reason (:class:`~.onnx_errors.NotExpressible`)."""
    op = node.op_type
    view = next(v for v in ins if isinstance(v, IntView))
    if op == "Equal" or any(isinstance(v, IntValue) for v in ins):
        return [_derived(cx, node, ins, at, view)]
    first = ins[0] if isinstance(ins[0], IntView) else None
    if first is not None and op in CONVERTS:
        return [_convert(cx, node, first, _target_type(cx, node, ins, at))]
    params = all(isinstance(v, Host) for v in ins[1:] if v is not None)
    if first is not None and params:
        if op == "Identity":
            return [first]
        if op == "Shape":
            dims = list(first.shape)[slice(at.get("start", 0), at.get("end", None))]
            return [Host(np.array(dims, dtype=np.int64), label=node.output[0])]
        if op == "Size":
            return [Host(np.array(math.prod(first.shape), dtype=np.int64), label=node.output[0])]
        if op in _VIEWS:
            probe = np.zeros(first.shape, dtype=np.int64)
            arrays = [probe] + [None if v is None else v.value for v in ins[1:]]
            out = host_eval(node, arrays, cx.opset)[0]
            return [IntView(first.source, tuple(out.shape))]
    if op == "Gather" and first is None and isinstance(ins[1], IntView):
        return [_embedding(cx, node, ins[0], ins[1], at)]
    if first is None and op != "Gather":
        return _refuse(cx, view, node, "its values as a parameter (shape, axes, indices...)")
    if op in _MOVES or op == "Gather":
        return _refuse(cx, view, node, "the integer values moved (only Reshape, Flatten, "
                       "Squeeze and Unsqueeze keep them in order)")  # fmt: skip
    return _refuse(cx, view, node, "integer arithmetic")


def _target_type(cx, node, ins, at) -> int:
    if node.op_type == "Cast":
        return int(at["to"])
    target = ins[1]
    if isinstance(target, Host):
        dtype = np.asarray(target.value).dtype
        return int(cx.importer.onnx.helper.np_dtype_to_tensor_dtype(dtype))
    if isinstance(target, IntView):
        return target.source.elem
    return int(cx.type_of(node.input[1]) or _FLOAT[0])  # a graph tensor: a float


def _convert(cx, node, view: IntView, to: int):
    src = view.source
    if to in _SAME_VALUES or to == src.elem:
        return view  # every engine integer fits: the same values
    if to not in _FLOAT and to != _BOOL:
        return _refuse(cx, view, node, f"a cast to element type {to}, which wraps values")
    src.casts.append(node_label(node))
    out = iv.converted(cx, view)
    return cx.op("not_equal", out, 0.0) if to == _BOOL else out


def _derived(cx, node, ins, at, view: IntView):
    """``node`` computing integers on the engine (:mod:`.int_values`): an Equal of the
    input or a derived value, or any node reading a derived value."""
    try:
        return _derived_value(cx, node, ins, at)
    except NotExpressible as err:
        name = view.source.name
        cx.importer.bind_hints.add(name)
        raise NotExpressible(
            f"{err}, or bind it with constants={{'{name}': ...}} to fold it at import"
        ) from None


def _derived_value(cx, node, ins, at):
    op, label = node.op_type, node_label(node)
    where = f"{op} '{label}'"
    first = ins[0]
    value = next(v for v in ins if isinstance(v, IntView))
    if op == "Equal":
        return iv.compare(cx, first, ins[1], where, label)
    if op in _ARITH:
        return iv.arith(cx, _ARITH[op], first, ins[1], where)
    if op == "Gather" and isinstance(ins[1], IntValue) and not isinstance(first, IntView):
        if isinstance(first, Host) and np.asarray(first.value).dtype.kind != "f":
            raise iv.refusal(value.source, where, "gathers integer constants (integer results)")
        if int(at.get("axis", 0)) not in (0, -len(cx.t(first).shape)):
            raise iv.refusal(value.source, where, "gathers along an axis other than 0 (an "
                             "embedding reads rows)")  # fmt: skip
        return iv.rows(cx, first, ins[1])
    if op == "GatherElements" and isinstance(ins[1], IntValue) and isinstance(first, Host):
        return iv.uniform_gather(first, ins[1], int(at.get("axis", 0)), where, negative=True)
    params = all(isinstance(v, Host) for v in ins[1:] if v is not None)
    if isinstance(first, IntValue) and params:
        if op == "Identity":
            return first
        if op == "Not":
            return iv.logical_not(cx, first, where)
        if op in CONVERTS:
            to = _target_type(cx, node, ins, at)
            if to in ONNX_INT_BOUNDS:
                return iv.cast(cx, first, "i", where, ONNX_INT_BOUNDS[to], f"element type {to}")
            if to in _FLOAT or to == _BOOL:
                return iv.cast(cx, first, "f" if to in _FLOAT else "b", where)
        if op == "CumSum":
            axis = cx.ints(ins[1], "CumSum axis")[0]
            return iv.cumsum(cx, first, axis, where, at.get("exclusive", 0), at.get("reverse", 0))
        if op in ("Shape", "Size"):
            return integer_node(cx, node, [IntView(first.source, first.shape)] + ins[1:], at)[0]
        if op in _VIEWS:
            probe = np.zeros(first.shape, dtype=np.int64)
            arrays = [probe] + [None if v is None else v.value for v in ins[1:]]
            return iv.view(cx, first, host_eval(node, arrays, cx.opset)[0].shape)
    raise iv.refusal(
        value.source, where, "is not among the operations on computed integers (Equal, Not, "
        "Cast, CumSum, Add, Sub, Mul, Reshape, Flatten, Squeeze, Unsqueeze, an embedding "
        "Gather, a GatherElements of a uniform constant)",
    )  # fmt: skip


def _embedding(cx, node, data, ids: IntView, at):
    if isinstance(data, Host) and np.asarray(data.value).dtype.kind not in "f":
        return _refuse(cx, ids, node, "a gather of integer constants (integer results)")
    table = cx.t(data)
    axis = int(at.get("axis", 0))
    if table.ndim == 0 or axis not in (0, -table.ndim):
        return _refuse(cx, ids, node, f"a gather along axis {axis} (an embedding reads axis 0)")
    ids.source.tables.append((node_label(node), table.shape[0]))
    rows = cx.op("embedding", table, ids.source.tensor)
    return reshape(cx, rows, ids.shape + table.shape[1:])


def choose_dtype(src: IntInput, declared=None) -> tuple[str, tuple | None, str]:
    """``(engine type, declared range or None, note)`` of integer input ``src`` from its
    uses and ``declared`` (its ``input_ranges=`` entry); a use the engine's types cannot
    hold raises :class:`~.onnx_errors.NotExpressible` with the reason.

    Example:
        >>> src = IntInput.declare("ids", (1, 4), 7, "INT64")
        >>> src.tables.append(("emb", 1000))
        >>> choose_dtype(src)[:2]
        ('uint16', (0, 999))
    """
    where = f"input '{src.name}' ({src.elem_name})"
    lo, hi = ONNX_INT_BOUNDS.get(src.elem, (-(2**63), 2**63 - 1))
    if declared is not None:
        dlo, dhi = _whole_pair(declared, f"input_ranges['{src.name}']")
        if dlo < lo or dhi > hi:
            raise NotExpressible(f"{where}: declared range ({dlo}, {dhi}) is outside its type")
        lo, hi = dlo, dhi
    uses = []
    if src.tables:
        rows = min(r for _, r in src.tables)
        labels = ", ".join(f"'{n}'" for n, _ in src.tables[:3])
        if rows - 1 > INTEGER_DTYPES["uint16"][1]:
            raise NotExpressible(
                f"{where}: the embedding table of {src.reader} {labels} has {rows} rows, so "
                "its ids reach beyond uint16 (65535), the widest integer the engine's inputs hold"
            )
        if declared is not None and (lo < 0 or hi > rows - 1):
            raise NotExpressible(
                f"{where}: declared range ({lo}, {hi}) is not within the {rows} rows "
                f"[0, {rows - 1}] of the table of {src.reader} {labels}"
            )
        lo, hi = max(lo, 0), min(hi, rows - 1)
        uses.append(f"the ids of embedding {src.reader} {labels} ({rows} rows: ids 0..{rows - 1})")
    if src.casts:
        labels = ", ".join(f"'{n}'" for n in src.casts[:3])
        uses.append(f"converted to fp16 by {labels} (exact for |v| <= 2048)")
    if src.compares:
        labels = ", ".join(f"'{n}'" for n in src.compares[:3])
        uses.append(
            f"converted to fp16 and compared with integer constants by {labels} (exact: "
            "the constants are below 2048 in magnitude)"
        )
    fits = [d for d in _ORDER if INTEGER_DTYPES[d][0] <= lo and hi <= INTEGER_DTYPES[d][1]]
    if fits:
        dtype, given = fits[0], (lo, hi) if (declared is not None or src.tables) else None
        if given == INTEGER_DTYPES[dtype]:
            given = None
        how = ", ".join(uses) or "read for its shape only"
        return dtype, given, f"{where} is {_an(dtype)} input on the engine: {how}"
    if declared is not None:
        raise NotExpressible(
            f"{where}: declared range ({lo}, {hi}) does not fit the engine's integer "
            "inputs (int8, uint8, int16, uint16)"
        )
    dtype = "uint16" if lo >= 0 else "int16"
    blo, bhi = INTEGER_DTYPES[dtype]
    how = ", ".join(uses) or "read for its shape only"
    note = (
        f"{where} is {_an(dtype)} input on the engine: {how}; values outside [{blo}, {bhi}] "
        f"are refused when the program runs (declare input_ranges={{'{src.name}': (lo, hi)}}"
        " for a narrower type)"
    )
    return dtype, None, note


def _an(dtype: str) -> str:
    """``'an int16'``, ``'a uint8'``."""
    return f"an {dtype}" if dtype.startswith("int") else f"a {dtype}"


def _whole_pair(value, where: str) -> tuple[int, int]:
    """``(lo, hi)`` of whole numbers from a pair or a max |value|."""
    try:
        pair = (-value, value) if np.ndim(value) == 0 else tuple(value)
        ok = len(pair) == 2 and all(
            not isinstance(v, (bool, np.bool_)) and float(v).is_integer() for v in pair
        )
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok or int(pair[0]) > int(pair[1]):
        raise NotExpressible(
            f"{where} = {value!r}: an integer input's range is (lo, hi) of whole numbers "
            "with lo <= hi"
        )
    return int(pair[0]), int(pair[1])


def typed_inputs(sources, ranges: dict, caller: str):
    """The integer inputs ``sources`` (:class:`IntInput`) declared with their engine
    types (:func:`choose_dtype`, ``ranges`` the importer's ``input_ranges``):
    ``(final, notes, problems, types)``, with ``final`` mapping ``id(provisional
    tensor)`` to the typed input, one note per choice (prefixed by ``caller``), the
    reasons of the inputs no engine type holds, and ``{name: dtype}``.

    Example:
        >>> src = IntInput.declare("ids", (1, 4), 7, "int64")
        >>> final, notes, problems, types = typed_inputs([src], {}, "from_onnx")
        >>> types, problems
        ({'ids': 'int16'}, [])
    """
    final, notes, problems, types = {}, [], [], {}
    for src in sources:
        try:
            dtype, given, note = choose_dtype(src, ranges.get(src.name))
        except NotExpressible as err:
            problems.append(str(err))
            continue
        notes.append(f"{caller}: {note}")
        final[id(src.tensor)] = input(src.shape, name=src.name, dtype=dtype, range=given)
        types[src.name] = dtype
    return final, notes, problems, types
