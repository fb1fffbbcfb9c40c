"""``compile``: turn output tensors into a :class:`~aneforge.compiler.program.Program`."""

from __future__ import annotations

from ..errors import OptionError
from ..graph.tensor import Tensor
from .program import Program

OPT_LEVELS = ("routes", 0, 1, 2, "max")


def topological_order(outputs) -> list[Tensor]:
    """Every node reachable from ``outputs``, sources first, deterministic.

    Iterative depth-first post-order over sources in argument order, so deep chains
    do not hit Python's recursion limit.
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


def compile(outputs, opt=0, target=None) -> Program:  # noqa: A001  (public API name)
    """Compile one tensor or a sequence of tensors into a :class:`Program`.

    Args:
        outputs: a Tensor or a list/tuple of Tensors (the program's outputs, in order).
        opt: optimization level. ``0`` (and ``'routes'``, which equals ``0`` on graphs
            without bridge ops) keep the graph as built; ``1`` and ``2``/``'max'`` arrive
            with the optimizer (issue 3).
        target: an ANE target for per-chip checks; arrives with issue 4.

    Returns:
        A Program whose nodes are in a deterministic execution order. Compiling the
        same graph twice gives the same node order.

    Example:
        >>> import aneforge as af
        >>> x = af.input((4,))
        >>> af.compile([x.relu(), x.exp()]).op_count
        2
    """
    if isinstance(outputs, Tensor):
        outs = (outputs,)
    elif isinstance(outputs, (list, tuple)):
        outs = tuple(outputs)
    else:
        outs = ()
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise OptionError(
            "compile: outputs must be a Tensor or a non-empty list of Tensors, got "
            f"{type(outputs).__name__}"
        )
    if opt not in OPT_LEVELS or isinstance(opt, bool):
        raise OptionError(f"compile: opt must be one of {OPT_LEVELS}, got {opt!r}")
    if opt in (1, 2, "max"):
        raise NotImplementedError(
            f"compile(opt={opt!r}): the optimizer levels arrive with issue 3; use opt=0"
        )
    if target is not None:
        raise NotImplementedError(
            "compile(target=...): per-chip targets arrive with issue 4; use target=None"
        )
    return Program(outs, topological_order(outs), opt=opt, target=target)
