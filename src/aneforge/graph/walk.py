"""Walking a graph: the one deterministic traversal every layer uses.

``topological_order`` is the order programs run in; ``as_outputs`` is the one check of
"a Tensor or a non-empty list of Tensors" that every entry point taking outputs makes.

Example:
    >>> import aneforge as af
    >>> from aneforge.graph.walk import topological_order
    >>> x = af.input((3,), name="x")
    >>> [n.op for n in topological_order([x.exp().relu()])]
    ['input', 'exp', 'relu']
"""

from __future__ import annotations

from ..errors import OptionError
from .tensor import Tensor


def topological_order(outputs) -> list[Tensor]:
    """Every node reachable from ``outputs``, sources first, deterministic.

    Iterative depth-first post-order over sources in argument order, so deep chains
    do not hit Python's recursion limit.

    Example:
        >>> import aneforge as af
        >>> a, b = af.input((2,), name="a"), af.input((2,), name="b")
        >>> [n.name or n.op for n in topological_order([a + b])]
        ['a', 'b', 'add']
    """
    order: list[Tensor] = []
    seen: set[int] = set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for src in reversed(node.srcs):
                if id(src) not in seen:
                    stack.append((src, False))
    return order


def as_outputs(outputs, caller: str = "compile") -> tuple[Tensor, ...]:
    """``outputs`` (a Tensor, or a non-empty list or tuple of Tensors) as a tuple.

    Anything else raises :class:`~aneforge.errors.OptionError` naming ``caller``.

    Example:
        >>> import aneforge as af
        >>> len(as_outputs(af.input((2,))))
        1
        >>> try:
        ...     as_outputs([])
        ... except af.OptionError as err:
        ...     print(err)
        compile: outputs must be a Tensor or a non-empty list of Tensors, got list
    """
    if isinstance(outputs, Tensor):
        outs: tuple = (outputs,)
    elif isinstance(outputs, (list, tuple)):
        outs = tuple(outputs)
    else:
        outs = ()
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise OptionError(
            f"{caller}: outputs must be a Tensor or a non-empty list of Tensors, got "
            f"{type(outputs).__name__}"
        )
    return outs
