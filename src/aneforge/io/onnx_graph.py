"""The ONNX graph's node order and node names, for :mod:`.onnx_import`.

Names (the contract the tests check): the aneforge node that produces an ONNX node's
first output is named like the ONNX node (its first output's name when the node has
none); a further output ``o`` of a node ``n`` is ``f"{n}/{o}"``. When one ONNX node
becomes several aneforge nodes, the one producing the output carries the name and the
other new ones are ``f"{n}/{op}"`` (``"fc/matmul"`` before ``"fc"``, an ``add``). A
node that passes an existing value through (Identity, Dropout, a no-op Reshape) names
nothing: the value keeps its producer's name. Inputs keep their ONNX names. Names are
collected while importing and put on the graph in one rebuild at the end
(:func:`apply_names`), so the graph stays immutable and shared values stay shared.

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.tensor import creation_mark
    >>> x = af.input((2,), name="x")
    >>> names, mark = NodeNames(), creation_mark()
    >>> y = (x * 2.0).relu()
    >>> names.record("act", ["y"], [y], mark)
    >>> out = apply_names([y], names)[0]
    >>> out.name, out.srcs[0].name
    ('act', 'act/mul')
"""

from __future__ import annotations

from ..graph.naming import user_name
from ..graph.tensor import Tensor, with_srcs
from ..graph.walk import topological_order
from ..optimizer.dedupe import merge_duplicates
from ..optimizer.rules import canonicalize


def node_label(node) -> str:
    """An ONNX node's name, else its first output's, else its op type."""
    return node.name or next((o for o in node.output if o), "") or node.op_type


class NodeNames:
    """The names collected during one import: aneforge node -> name.

    Keys are the tensors themselves (a Tensor hashes by identity), which keeps them alive
    until :func:`apply_names` has run.
    """

    def __init__(self):
        self.names: dict[Tensor, str] = {}

    def record(self, label: str, output_names, values, mark: int) -> None:
        """Name what one ONNX node (``label``) produced: its outputs ``values`` (ONNX
        names ``output_names``) and the new nodes behind them, built after ``mark``.

        An output name overrides an earlier one (an expanded function body names its
        last node ``label/Op`` first; the calling node's name wins); inner nodes keep
        the first name they got.
        """
        fresh = []
        seen: set[int] = set()
        for i, (out_name, value) in enumerate(zip(output_names, values)):
            if not _is_new(value, mark) or id(value) in seen:
                continue
            seen.add(id(value))
            self.names[value] = label if i == 0 else f"{label}/{out_name or i}"
            fresh.append(value)
        stack = [s for v in fresh for s in v.srcs]
        while stack:
            t = stack.pop()
            if not _is_new(t, mark) or t in self.names or user_name(t) is not None:
                continue
            self.names[t] = f"{label}/{t.op}"
            stack.extend(t.srcs)


def _is_new(value, mark: int) -> bool:
    return isinstance(value, Tensor) and value._order > mark and value.op != "input"


def apply_names(outputs, names: NodeNames, replace=None) -> list[Tensor]:
    """``outputs`` with the collected names on their nodes: one rebuild of the graph in
    topological order (unchanged subgraphs are kept as they are). ``replace`` maps
    ``id(node)`` of source nodes to the nodes that stand in for them (the integer
    inputs of their final types)."""
    memo: dict[int, Tensor] = {}
    replace = replace or {}
    for node in topological_order(list(outputs)):
        if id(node) in replace:
            memo[id(node)] = replace[id(node)]
            continue
        new = with_srcs(node, [memo[id(s)] for s in node.srcs])
        name = names.names.get(node)
        if name is not None and name != new.name:
            new = new.named(name)
        memo[id(node)] = new
    return [memo[id(t)] for t in outputs]


def finish_outputs(outputs, names: NodeNames, replace=None) -> list[Tensor]:
    """An import's outputs as its graph holds them: named (:func:`apply_names`), in
    canonical form (:func:`~aneforge.optimizer.rules.canonicalize`: the bit-identical
    CANONICAL rules) and with repeated nodes merged
    (:func:`~aneforge.optimizer.dedupe.merge_duplicates`), the same bits for every
    input. Both importers end here, so one model spelt two ways (an ONNX file, a
    torch.export graph) reaches the compiler spelt one way where these can tell:
    composed transposes, a bmm's batch dims left unmerged, resolved slice bounds, an
    expression computed once...

    Example:
        >>> import aneforge as af
        >>> x = af.input((2, 3, 4), name="x")
        >>> y = af.transpose(af.transpose(x, (1, 0, 2)), (0, 2, 1))
        >>> out = finish_outputs([y], NodeNames())[0]
        >>> out.op, out.attrs["perm"], out.srcs[0] is x
        ('transpose', (1, 2, 0), True)
    """
    return merge_duplicates(canonicalize(apply_names(outputs, names, replace)))


def topological(nodes, env) -> list:
    """``nodes`` in dependency order (stable: the file order where it is valid)."""
    nodes = list(nodes)
    produced = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    order, state = [], [0] * len(nodes)
    for start in range(len(nodes)):
        stack = [(start, False)]
        while stack:
            i, done = stack.pop()
            if done:
                state[i] = 2
                order.append(nodes[i])
                continue
            if state[i]:
                continue
            state[i] = 1
            stack.append((i, True))
            for name in reversed(all_inputs(nodes[i])):
                j = produced.get(name)
                if j is not None and not state[j]:
                    stack.append((j, False))
    return order


def all_inputs(node) -> list[str]:
    """A node's inputs, plus the outer values its subgraphs (If branches) read."""
    names = [n for n in node.input if n]
    for a in node.attribute:
        if a.type == a.GRAPH:
            names.extend(n for sub in a.g.node for n in sub.input if n)
    return names
