"""Where two programs differ, op by op: the same model imported two ways (ONNX and
``torch.export``) should compile to the same node sequence and the same weights.

:func:`op_lines` spells each node as one line (op, shape, dtype, attributes; names and
declared ranges are left out), :func:`program_diff` lists the runs of nodes that differ
(``difflib`` over those lines) and :func:`weight_diffs` the weights whose bits differ
between two programs of the same ops.

Example:
    >>> import aneforge as af
    >>> x = af.input((1, 4))
    >>> a, b = af.compile(af.relu(x)), af.compile(af.sigmoid(x))
    >>> program_diff(a, b)
    ['nodes 1:2 -> 1:2: relu (1, 4) float16 | sigmoid (1, 4) float16']
    >>> program_diff(a, a), weight_diffs(a, a)
    ([], [])
"""

from __future__ import annotations

import difflib

import numpy as np

__all__ = ["op_lines", "program_diff", "weight_diffs"]

#: attributes that name or annotate a node rather than say what it computes
_IGNORED = {"name", "range", "source", "label"}


def op_lines(prog) -> list[str]:
    """One line per node of ``prog``: ``"op shape dtype key=value ..."``.

    Example:
        >>> import aneforge as af
        >>> op_lines(af.compile(af.relu(af.input((2, 3)))))
        ['input (2, 3) float16', 'relu (2, 3) float16']
    """
    return [_line(n) for n in prog.nodes]


def program_diff(a, b, limit: int = 40) -> list[str]:
    """The runs of nodes where programs ``a`` and ``b`` differ, one line each:
    ``"nodes i:j -> k:l: a's ops | b's ops"`` (at most ``limit`` lines; ``[]`` when the
    node sequences are the same).

    Example:
        >>> import aneforge as af
        >>> x = af.input((1, 4))
        >>> program_diff(af.compile(af.relu(x)), af.compile(af.relu(af.relu(x))))
        ['nodes 2:2 -> 2:3:  | relu (1, 4) float16']
    """
    la, lb = op_lines(a), op_lines(b)
    out = []
    matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
    for tag, i, j, k, m in matcher.get_opcodes():
        if tag == "equal":
            continue
        out.append(f"nodes {i}:{j} -> {k}:{m}: {'; '.join(la[i:j])} | {'; '.join(lb[k:m])}")
        if len(out) == limit:
            out.append("...")
            break
    return out


def weight_diffs(a, b) -> list[str]:
    """The weights of ``a`` and ``b`` (same node sequence) whose bits differ: one line
    each, with the node index, the shape and how many values differ.

    Example:
        >>> import aneforge as af, numpy as np
        >>> x = af.input((1, 2))
        >>> a = af.compile(x + af.weight(np.array([1.0, 2.0], np.float16)))
        >>> b = af.compile(x + af.weight(np.array([1.0, 3.0], np.float16)))
        >>> weight_diffs(a, b)
        ['node 1: weight (2,): 1 of 2 values differ']
    """
    out = []
    for i, (na, nb) in enumerate(zip(a.nodes, b.nodes)):
        if na.op != "weight" or nb.op != "weight":
            continue
        va, vb = np.asarray(na.value), np.asarray(nb.value)
        if va.shape != vb.shape or va.dtype != vb.dtype:
            out.append(f"node {i}: weight {va.shape} {va.dtype} vs {vb.shape} {vb.dtype}")
        elif va.tobytes() != vb.tobytes():
            bits_a, bits_b = (np.ascontiguousarray(v).reshape(v.size, -1) for v in (va, vb))
            bits_a, bits_b = bits_a.view(np.uint8), bits_b.view(np.uint8)
            n = int(np.count_nonzero((bits_a != bits_b).any(axis=1)))
            out.append(f"node {i}: weight {va.shape}: {n} of {va.size} values differ")
    return out


def _line(node) -> str:
    attrs = " ".join(
        f"{k}={_short(v)}" for k, v in sorted((node.attrs or {}).items()) if k not in _IGNORED
    )
    head = f"{node.op} {tuple(node.shape)} {node.dtype}"
    return f"{head} {attrs}" if attrs else head


def _short(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array{value.shape}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
