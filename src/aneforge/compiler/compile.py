"""``compile``: turn output tensors into a :class:`~aneforge.compiler.program.Program`.

The optimization levels (spec 000, "The optimizer and opt levels"):

- ``'routes'`` (default): the lossless route pass. Per route-bearing bridge node the cost
  model picks the native bridge (a cut) or its proven-equivalent fused decomposition.
  Never changes numerics beyond the registry's loss class; a cut-free graph compiles to
  exactly the ``opt=0`` program.
- ``0``: the graph exactly as built (byte-identical path; int8 honoured as given).
- ``1``: cost-model pick over every variant, route swaps, canonical rewrites and the
  lossy whole-graph int8 variant, without measuring; a lossy pick is warned about.
- ``2`` / ``'max'``: :func:`~aneforge.optimizer.tune.tune`, measured on the device.

Example:
    >>> import aneforge as af
    >>> x = af.input((4,))
    >>> af.compile([x.relu(), x.exp()]).op_count
    2
"""

from __future__ import annotations

import warnings

from ..errors import AneforgeWarning, OptionError
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


def build_program(outputs, opt=0) -> Program:
    """A Program of ``outputs`` as they are (no passes, no warnings); for internal use."""
    outs = tuple(outputs)
    return Program(outs, topological_order(outs), opt=opt)


def _as_outputs(outputs) -> tuple[Tensor, ...]:
    if isinstance(outputs, Tensor):
        outs: tuple = (outputs,)
    elif isinstance(outputs, (list, tuple)):
        outs = tuple(outputs)
    else:
        outs = ()
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise OptionError(
            "compile: outputs must be a Tensor or a non-empty list of Tensors, got "
            f"{type(outputs).__name__}"
        )
    return outs


def _pick_by_estimate(outs):
    """opt=1: the variant with the lowest estimate (lossless first on ties)."""
    from ..cost.estimate import estimate
    from ..optimizer.variants import build_variants

    variants = build_variants(outs, lossy=True)
    order = list(variants)
    name = min(order, key=lambda n: (estimate(list(variants[n].outputs)), order.index(n)))
    chosen = variants[name]
    if not chosen.lossless:
        warnings.warn(
            f"compile(opt=1) chose the lossy '{name}' variant (about 1% weight error); "
            "use opt='routes' to stay lossless or opt=2 to validate against the baseline",
            AneforgeWarning,
            stacklevel=3,
        )
    return list(chosen.outputs), {"variant": name, "lossless": chosen.lossless}


def compile(outputs, opt="routes", target=None) -> Program:  # noqa: A001  (public API name)
    """Compile one tensor or a sequence of tensors into a :class:`Program`.

    Args:
        outputs: a Tensor or a list/tuple of Tensors (the program's outputs, in order).
        opt: ``'routes'`` (default), ``0``, ``1``, ``2`` or ``'max'`` (module docstring).
        target: an ANE target for per-chip checks; arrives with issue 4.

    Returns:
        A Program whose nodes are in a deterministic execution order; compiling the same
        graph twice gives the same program. ``prog.passes`` records what the optimizer
        did (route decisions, the chosen variant). Warns ``DispatchFloorWarning`` when
        the estimate is dominated by per-call dispatch overhead.

    Example:
        >>> import numpy as np, aneforge as af
        >>> from aneforge.graph.ops.bridge import flatten
        >>> x = af.input((2, 3))
        >>> [n.op for n in af.compile(flatten(x) * 2.0).compute_nodes]
        ['reshape', 'mul']
    """
    outs = _as_outputs(outputs)
    if isinstance(opt, bool) or opt not in OPT_LEVELS:
        raise OptionError(f"compile: opt must be one of {OPT_LEVELS}, got {opt!r}")
    if target is not None:
        raise NotImplementedError(
            "compile(target=...): per-chip targets arrive with issue 4; use target=None"
        )
    passes: dict = {}
    if opt in (2, "max"):
        from ..optimizer.tune import tune

        return tune(list(outs))
    if opt == "routes":
        from ..cost.estimate import estimate
        from ..optimizer.routes import select_routes

        new, decisions = select_routes(list(outs), estimate)
        outs = tuple(new)
        passes["routes"] = decisions
    elif opt == 1:
        new, passes["variant"] = _pick_by_estimate(list(outs))
        outs = tuple(new)
    prog = build_program(outs, opt)
    prog.passes = passes
    from ..cost.estimate import warn_if_floor_dominated

    warn_if_floor_dominated(prog)
    return prog
