"""Structural checks of graphs, Programs and passes, for tests and benchmarks.

- :func:`verify_graph`: every node is a well-formed instance of its op record: a
  registered op, an arity it takes, attributes its schema gives back unchanged, the shape
  its shape rule infers, and sources that are themselves nodes. A weight holds a
  read-only fp16 array of its shape; an input has no sources.
- :func:`verify_program`: a :class:`~aneforge.compiler.program.Program`'s node list is
  exactly the graph of its outputs, in an order where every source comes first, and its
  derived views agree with it: the inputs, the output names, the values freed after each
  node, and the regions, which hold every computing node once.
- :func:`check_pass`: a pass keeps the graph's interface (its number of outputs, their
  shapes and names, no new inputs) and gives a well-formed graph. A lossless pass must
  also give the same emulator bits on seeded random inputs.

Each check raises :class:`VerifyError`, an ``AssertionError`` naming the node (by its
index in execution order and op) and what is wrong. A failure is an aneforge bug, never a
user mistake.

Example:
    >>> import aneforge as af
    >>> from aneforge.optimizer import canonicalize
    >>> x = af.input((2, 3), name="x")
    >>> y = (x * 1.0).relu()
    >>> new, report = check_pass(canonicalize, [y])
    >>> [n.op for n in new[0].srcs]
    ['input']
"""

from __future__ import annotations

import warnings

import numpy as np

from ..compiler.program import Program
from ..compiler.segment import segment
from ..emulator.interpreter import execute_fp16
from ..graph.registry import get_op
from ..graph.tensor import MAX_RANK, Tensor, random_feed
from ..graph.walk import as_outputs, topological_order


class VerifyError(AssertionError):
    """A graph, Program or pass broke a structural invariant (an aneforge bug)."""


def _where(i: int, node: Tensor) -> str:
    label = f" '{node.name}'" if node.name else ""
    return f"%{i} {node.op}{label} {node.shape}"


def verify_graph(outputs) -> list[Tensor]:
    """Check every node reachable from ``outputs`` (a Tensor or a list of them) against
    its op record; return the nodes in execution order.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4,), name="x")
        >>> [n.op for n in verify_graph(x.exp())]
        ['input', 'exp']
    """
    nodes = topological_order(as_outputs(outputs, "verify_graph"))
    position = {id(n): i for i, n in enumerate(nodes)}
    for i, node in enumerate(nodes):
        _verify_node(i, node, position)
    return nodes


def _verify_node(i: int, node: Tensor, position: dict[int, int]) -> None:
    where = _where(i, node)
    if not isinstance(node, Tensor):
        raise VerifyError(f"{where}: not a Tensor but {type(node).__name__}")
    try:
        op = get_op(node.op)
    except Exception as err:  # an unregistered op name
        raise VerifyError(f"{where}: {err}") from None
    if not all(isinstance(s, Tensor) for s in node.srcs):
        raise VerifyError(f"{where}: a source is not a Tensor")
    for s in node.srcs:
        if position[id(s)] >= i:
            raise VerifyError(f"{where}: source {s.op} does not come before it")
    if len(node.shape) > MAX_RANK or not all(isinstance(d, int) and d >= 1 for d in node.shape):
        raise VerifyError(f"{where}: shape {node.shape} is not a rank <= {MAX_RANK} shape")
    if op.kind == "source":
        _verify_source(where, node)
        return
    try:
        op.check_arity(len(node.srcs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a held-rounding warning was given at build
            attrs = op.normalize_attrs(dict(node.attrs))
        shape = tuple(op.shape([s.shape for s in node.srcs], attrs))
    except Exception as err:
        raise VerifyError(f"{where}: its record refuses it: {err}") from None
    if attrs != dict(node.attrs):
        raise VerifyError(f"{where}: attributes {dict(node.attrs)} normalize to {attrs}")
    if shape != node.shape:
        raise VerifyError(f"{where}: its shape rule gives {shape}")


def _verify_source(where: str, node: Tensor) -> None:
    if node.srcs:
        raise VerifyError(f"{where}: a source node has sources")
    if node.op == "weight":
        value = node.value
        if not isinstance(value, np.ndarray) or value.dtype != np.float16:
            raise VerifyError(f"{where}: a weight must hold an fp16 array")
        if value.shape != node.shape or value.flags.writeable:
            raise VerifyError(f"{where}: its value is {value.shape}, writeable or not")


def verify_program(prog: Program) -> Program:
    """Check ``prog`` against the graph of its outputs and its derived views; return it.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4,), name="x")
        >>> verify_program(af.compile(x.exp() + x)).op_count
        2
    """
    if not isinstance(prog, Program):
        raise VerifyError(f"verify_program: expected a Program, got {type(prog).__name__}")
    nodes = verify_graph(list(prog.outputs))
    if len(prog.nodes) != len(nodes) or {id(n) for n in prog.nodes} != {id(n) for n in nodes}:
        raise VerifyError(
            f"the program holds {len(prog.nodes)} nodes, its outputs reach {len(nodes)}"
        )
    position = {id(n): i for i, n in enumerate(prog.nodes)}
    for i, node in enumerate(prog.nodes):
        if any(position[id(s)] >= i for s in node.srcs):
            raise VerifyError(f"{_where(i, node)}: runs before one of its sources")
    inputs = sorted((n for n in prog.nodes if n.op == "input"), key=lambda t: t._order)
    if [id(t) for t in prog.inputs] != [id(t) for t in inputs]:
        raise VerifyError("prog.inputs is not the input nodes in creation order")
    if len(prog.output_names) != len(prog.outputs):
        raise VerifyError(
            f"{len(prog.output_names)} output name(s) for {len(prog.outputs)} output(s)"
        )
    _verify_dead_after(prog, position)
    _verify_regions(prog)
    return prog


def _verify_dead_after(prog: Program, position: dict[int, int]) -> None:
    outputs = {id(t) for t in prog.outputs}
    last_use = {}
    for i, node in enumerate(prog.nodes):
        for s in node.srcs:
            last_use[id(s)] = i
    freed = set()
    for i, dead in enumerate(prog.dead_after):
        for node in dead:
            if id(node) in outputs or last_use.get(id(node)) != i:
                raise VerifyError(f"{_where(position[id(node)], node)}: freed after %{i}")
            freed.add(id(node))
    for key in last_use:
        if key not in outputs and key not in freed:
            raise VerifyError("a value is never freed although no output needs it")


def _verify_regions(prog: Program) -> None:
    computing = [n for n in prog.nodes if get_op(n.op).kind != "source"]
    seen = [id(n) for r in prog.regions for n in r.nodes]
    if sorted(seen) != sorted(id(n) for n in computing) or len(set(seen)) != len(seen):
        raise VerifyError("the regions do not hold every computing node exactly once")
    if [r.kind for r in segment(prog.nodes)] != [r.kind for r in prog.regions]:
        raise VerifyError("prog.regions is not the segmentation of prog.nodes")


def check_pass(pass_fn, outputs, lossless: bool = True, trials: int = 3, seed: int = 0):
    """Apply ``pass_fn`` (outputs list -> new outputs, or ``(new outputs, report)``) to
    ``outputs`` and check it as the module docstring says; return ``(new outputs,
    report or None)``.

    ``lossless=True`` also compares the emulator's fp16 bits before and after on
    ``trials`` seeded standard-normal inputs (NaN equal to NaN).

    Example:
        >>> import aneforge as af
        >>> from aneforge.optimizer import reduce_sum_to_matmul
        >>> x = af.input((8,), name="x")
        >>> new, _ = check_pass(reduce_sum_to_matmul, [x.sum()], lossless=False)
        >>> new[0].op
        'reshape'
    """
    before = list(as_outputs(outputs, "check_pass"))
    verify_graph(before)
    result = pass_fn(list(before))
    new, report = result if isinstance(result, tuple) else (result, None)
    new = [new] if isinstance(new, Tensor) else list(new)
    if len(new) != len(before):
        raise VerifyError(f"the pass returned {len(new)} outputs for {len(before)}")
    for k, (a, b) in enumerate(zip(before, new)):
        if a.shape != b.shape:
            raise VerifyError(f"output {k}: shape {a.shape} became {b.shape}")
        if a.name is not None and b.name != a.name:
            raise VerifyError(f"output {k}: name {a.name!r} became {b.name!r}")
    verify_graph(new)
    old_prog, new_prog = Program.from_outputs(before), Program.from_outputs(new)
    old_inputs = {id(t) for t in old_prog.inputs}
    if any(id(t) not in old_inputs for t in new_prog.inputs):
        raise VerifyError("the pass added an input")
    if lossless:
        _same_bits_on_random_inputs(old_prog, new_prog, trials, seed)
    return new, report


def _same_bits_on_random_inputs(old: Program, new: Program, trials: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    kept = {id(t) for t in new.inputs}
    for trial in range(trials):
        feeds = [
            rng.standard_normal(t.shape).astype(np.float16)
            if t.dtype == "float16"
            else random_feed(t, rng)
            for t in old.inputs
        ]
        new_feeds = [f for t, f in zip(old.inputs, feeds) if id(t) in kept]
        for k, (a, b) in enumerate(zip(execute_fp16(old, feeds), execute_fp16(new, new_feeds))):
            a, b = np.asarray(a, np.float16), np.asarray(b, np.float16)
            nan = np.isnan(a) & np.isnan(b)
            differ = ~nan & (a.view(np.uint16) != b.view(np.uint16))
            if differ.any():
                raise VerifyError(
                    f"trial {trial}, output {k}: {int(differ.sum())} of {a.size} values "
                    "differ in bits after a lossless pass"
                )
