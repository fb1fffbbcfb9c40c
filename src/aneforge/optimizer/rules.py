"""The rewrite rules, as data, grouped into rule sets, each rule with its exactness class.

- :data:`CANONICAL` (bit-identical, always on): drop identity casts, reshapes and
  transposes, merge reshape and transpose chains, ``x*1``, ``x+(-0)``, ``x-(+0)``,
  ``--x``. (``x+(+0)`` and ``x-(-0)`` stay: they turn ``-0`` into ``+0``.)
- :data:`NUMERIC` (lossy; only a tuner admits them): scalar-chain folding in fp16 and
  constant folding of small constant subgraphs with the emulator's kernels.
- :data:`REDUCE_TO_MATMUL`: ``sum`` over one axis as ``x @ ones`` (the wide
  accumulator: equal or better, not bit-identical: ``sum`` of 4096 ones is 2048 in the
  narrow accumulator and 4096 here); ``cumsum`` as ``x @ triu_ones`` (bit-identical: the
  ``cumsum`` kernel is that matmul).

The classes (:data:`~aneforge.graph.rewrite.EXACTNESS`) are measured by
``tests/optimizer/test_exactness.py``, which walks :data:`RULE_SETS`.

Example:
    >>> import aneforge as af
    >>> x = af.input((4, 8))
    >>> y = af.reduce_sum_to_matmul(x.sum(axis=0))
    >>> [n.op for n in af.compile(y).compute_nodes]
    ['transpose', 'matmul', 'reshape']
    >>> [r.exactness for r in REDUCE_TO_MATMUL]
    ['equal-or-better', 'bit-identical']
"""

from __future__ import annotations

import numpy as np

from ..emulator.fold import fold_constant  # the emulator's fp16 kernels, never float64
from ..graph.facts import Flag
from ..graph.fp16 import round_fp16
from ..graph.naming import user_name
from ..graph.registry import all_ops, get_op
from ..graph.rewrite import BIT_IDENTICAL, EQUAL_OR_BETTER, LOSSY, Rule, rewrite
from ..graph.tensor import Tensor, make, weight, with_srcs

# Constant subgraphs up to this many elements are folded (bigger ones stay weights
# computed on the device, so folding never bloats the weight file).
CONST_FOLD_MAX_ELEMS = 4096


def _weight_equal_to(t: Tensor, value: float) -> bool:
    """True for a weight every element of which is ``value`` (sign of zero included)."""
    if t.op != "weight":
        return False
    v = t.value
    if value == 0.0:
        return bool(np.all(v == 0) and np.all(np.signbit(v) == np.signbit(value)))
    return bool(np.all(v == value))


def _operand_if(node: Tensor, neutral: float) -> Tensor | None:
    """The non-neutral operand of a binary node whose other side is ``neutral``; the
    left side counts only when the op's record says it is commutative."""
    a, b = node.srcs
    if _weight_equal_to(b, neutral) and a.shape == node.shape:
        return a
    commutative = Flag.COMMUTATIVE in get_op(node.op).flags
    if commutative and _weight_equal_to(a, neutral) and b.shape == node.shape:
        return b
    return None


# ---- canonical (lossless) ------------------------------------------------------------


def _drop_cast(node):
    return node.srcs[0]


def _identity_reshape(node):
    return node.srcs[0] if node.srcs[0].shape == node.shape else None


def _merge_reshapes(node):
    src = node.srcs[0]
    if src.op == "reshape":
        return make("reshape", src.srcs[0], shape=node.shape)
    return None


def _perm(node):
    perm = node.attrs["perm"]
    return tuple(range(node.ndim))[::-1] if perm is None else tuple(perm)


def _identity_transpose(node):
    return node.srcs[0] if _perm(node) == tuple(range(node.ndim)) else None


def _merge_transposes(node):
    src = node.srcs[0]
    if src.op != "transpose":
        return None
    inner, outer = _perm(src), _perm(node)
    return make("transpose", src.srcs[0], perm=tuple(inner[p] for p in outer))


def _mul_by_one(node):
    return _operand_if(node, 1.0)


def _add_zero(node):
    # x + (-0) is x for every x, bit for bit; x + (+0) turns -0 into +0, so it stays.
    return _operand_if(node, -0.0)


def _sub_zero(node):
    # x - (+0) is x + (-0); x - (-0) is x + (+0), which turns -0 into +0, so it stays.
    return _operand_if(node, 0.0)


def _double_neg(node):
    src = node.srcs[0]
    return src.srcs[0] if src.op == "neg" else None


def _pow_two(node):
    # pow(x, 2) -> square(x): x ** 2 is exact before its one rounding either way (an fp16
    # square needs 22 bits), so the bits agree for every fp16 x (tests check all 65536)
    x, e = node.srcs
    return make("square", x) if _weight_equal_to(e, 2.0) and x.shape == node.shape else None


def _bmm_batch_view(node):
    # reshape(bmm(reshape(a), reshape(b))) -> bmm(a, b) when the reshapes only merge the
    # same batch dims of a and b into one and split them again: each batch element's
    # product is computed alone (the kernel flattens the batch dims itself), so it is
    # the same product of the same values, in the same order.
    y = node.srcs[0]
    if y.op != "bmm" or any(s.op != "reshape" for s in y.srcs):
        return None
    (ra, rb), (a,), (b,) = y.srcs, y.srcs[0].srcs, y.srcs[1].srcs
    if min(a.ndim, b.ndim, ra.ndim, rb.ndim) < 2:
        return None  # a vector operand is not a batch of matrices
    batch = a.shape[:-2]
    if (a.shape[-2:], b.shape[-2:]) != (ra.shape[-2:], rb.shape[-2:]):
        return None  # a reshape that moves rows or columns, not batch dims
    if b.shape[:-2] != batch or rb.shape[:-2] != ra.shape[:-2]:
        return None  # broadcast batch dims: not one batch laid out two ways
    return make("bmm", a, b) if node.shape == batch + y.shape[-2:] else None


def _plus_zero_operand(t: Tensor) -> Tensor | None:
    """``x`` when ``t`` is ``x + (+0)`` (either side) or ``x - (-0)`` with ``x`` of
    ``t``'s shape: the same value as ``x`` but for a ``-0``, which becomes ``+0``."""
    if t.op == "add":
        for x, zero in (t.srcs, t.srcs[::-1]):
            if _weight_equal_to(zero, 0.0) and x.shape == t.shape:
                return x
    if t.op == "sub" and _weight_equal_to(t.srcs[1], -0.0) and t.srcs[0].shape == t.shape:
        return t.srcs[0]
    return None


def _blind_plus_zero(node):
    # f(x + (+0)) -> f(x) for an op f whose record says it cannot see the sign of a zero
    # (Flag.ZERO_SIGN_BLIND): x + (+0) differs from x only in turning -0 into +0.
    srcs = [_plus_zero_operand(s) for s in node.srcs]
    return with_srcs(node, [s if x is None else x for s, x in zip(node.srcs, srcs)])


def _is_predicate(t: Tensor) -> bool:
    """Whether every value of ``t`` is +0.0 or 1.0: a ``Flag.PREDICATE`` op's output, a
    weight of only those values, or a movement (``Flag.MOVEMENT``) of such values."""
    stack = [t]
    while stack:
        t = stack.pop()
        if t.op == "weight":
            v = np.asarray(t.value)
            if not np.all((v == 1) | ((v == 0) & ~np.signbit(v))):
                return False
            continue
        flags = get_op(t.op).flags
        if Flag.PREDICATE in flags:
            continue
        if Flag.MOVEMENT not in flags or not t.srcs:
            return False
        stack.extend(t.srcs)  # every value of a movement is a value of a source
    return True


def _predicate_not_zero(node):
    # not_equal(p, +-0) -> p for a predicate p: 1 != 0 is 1, +0 != 0 is +0, bit for bit.
    for p, zero in (node.srcs, node.srcs[::-1]):
        is_zero = _weight_equal_to(zero, 0.0) or _weight_equal_to(zero, -0.0)
        if is_zero and p.shape == node.shape and _is_predicate(p):
            return p
    return None


def _uniform(value) -> bool:
    """Whether every element of ``value`` has the same bits (NaN never does)."""
    v = np.asarray(value)
    first = v.flat[0]
    return bool(np.all(v == first) and np.all(np.signbit(v) == np.signbit(first)))


def _scalar_weight_operand(node):
    # A uniform weight operand (size 1, or every element the same bits: ATen's
    # zeros_like) of a broadcasting elementwise op is a rank-0 weight: it broadcasts to
    # the same values; only its dims could add output dims, and the rewrite applies
    # only where the output keeps its shape.
    if len(node.srcs) < 2:
        return None
    srcs = [
        weight(np.asarray(s.value).reshape(-1)[:1].reshape(()), name=user_name(s))
        if s.op == "weight" and s.ndim > 0 and (s.size == 1 or _uniform(s.value))
        else s
        for s in node.srcs
    ]
    if all(a is b for a, b in zip(srcs, node.srcs)):
        return None
    new = make(node.op, *srcs, **node.attrs)
    return new if new.shape == node.shape else None


def _tight_slice(node):
    # A slice as its Python bounds resolved: begins in [0, dim), each end one past the
    # last index taken (ends past the dim, or between two taken indices, select the
    # same elements); a slice of the whole tensor is the tensor itself.
    x = node.srcs[0]
    if node.shape == x.shape:
        return x  # steps >= 1: as many elements as the dim means all of them, in order
    steps = node.attrs["steps"] or (1,) * x.ndim
    bounds = [slice(b, e, s).indices(d) for d, b, e, s in
              zip(x.shape, node.attrs["begins"], node.attrs["ends"], steps)]  # fmt: skip
    begins = tuple(b for b, _, _ in bounds)
    ends = tuple(b + (n - 1) * s + 1 for (b, _, s), n in zip(bounds, node.shape))
    if (begins, ends) == (tuple(node.attrs["begins"]), tuple(node.attrs["ends"])):
        return None
    return make("slice", x, begins=begins, ends=ends, steps=node.attrs["steps"])


#: The elementwise ops (broadcasting their operands), for the rank-0 weight rule.
_ELEMENTWISE = tuple(sorted(n for n, op in all_ops().items() if Flag.ELEMENTWISE in op.flags))
#: The ops that cannot see the sign of a zero (Flag.ZERO_SIGN_BLIND).
_SIGN_BLIND = tuple(sorted(n for n, op in all_ops().items() if Flag.ZERO_SIGN_BLIND in op.flags))


_BIT = BIT_IDENTICAL
CANONICAL = (
    Rule("drop_cast", ("cast",), _drop_cast, _BIT, "cast to fp16 is the identity"),
    Rule("identity_reshape", ("reshape",), _identity_reshape, _BIT, "reshape to own shape"),
    Rule("merge_reshapes", ("reshape",), _merge_reshapes, _BIT, "reshape(reshape(x))"),
    Rule("identity_transpose", ("transpose",), _identity_transpose, _BIT, "identity perm"),
    Rule("merge_transposes", ("transpose",), _merge_transposes, _BIT, "compose the perms"),
    Rule("mul_by_one", ("mul",), _mul_by_one, _BIT, "x * 1 -> x"),
    Rule("add_zero", ("add",), _add_zero, _BIT, "x + (-0) -> x"),
    Rule("sub_zero", ("sub",), _sub_zero, _BIT, "x - (+0) -> x"),
    Rule("double_neg", ("neg",), _double_neg, _BIT, "-(-x) -> x"),
    Rule("pow_two", ("pow",), _pow_two, _BIT, "pow(x, 2) -> square(x)"),
    Rule("bmm_batch_view", ("reshape",), _bmm_batch_view, _BIT,
         "reshape(bmm(reshape(a), reshape(b))) -> bmm(a, b) when they only merge batch dims"),
    Rule("blind_plus_zero", _SIGN_BLIND, _blind_plus_zero, _BIT,
         "f(x + (+0)) -> f(x) for an f blind to the sign of zero"),
    Rule("predicate_not_zero", ("not_equal",), _predicate_not_zero, _BIT,
         "not_equal(p, 0) -> p for a 0/1 predicate p"),
    Rule("scalar_weight_operand", _ELEMENTWISE, _scalar_weight_operand, _BIT,
         "a uniform weight operand of an elementwise op as a rank-0 weight"),
    Rule("tight_slice", ("slice",), _tight_slice, _BIT,
         "slice bounds resolved (ends one past the last index); a whole-tensor slice -> x"),
)  # fmt: skip

# ---- numeric (tuner-gated) ------------------------------------------------------------


def _scalar(t: Tensor) -> float | None:
    if t.op == "weight" and t.value.size == 1:
        return float(t.value.reshape(()))
    return None


def _fold_chain(op_name):
    def fold(node):
        x, b = node.srcs
        inner = x if x.op == op_name else None
        if inner is None or _scalar(b) is None or _scalar(inner.srcs[1]) is None:
            return None
        a, c = _scalar(inner.srcs[1]), _scalar(b)
        with np.errstate(all="ignore"):
            f = a * c if op_name == "mul" else a + c
        folded = round_fp16(f)  # folded in fp16, as the engine would hold it
        if not np.isfinite(folded):
            return None
        shape = np.broadcast_shapes(b.shape, inner.srcs[1].shape)
        return make(op_name, inner.srcs[0], weight(np.full(shape, folded, np.float16)))

    return fold


def _const_fold(node):
    return fold_constant(node, CONST_FOLD_MAX_ELEMS)


_FOLDABLE = tuple(sorted(n for n, op in all_ops().items() if op.kind == "fused"))

# const_fold gives the generic model's bits, but a target's per-chip numerics (reduction
# route, saturation) would not be applied to what it folded: no claim.
NUMERIC = (
    Rule("fold_mul_chain", ("mul",), _fold_chain("mul"), LOSSY, "(x*a)*b -> x*fp16(a*b)"),
    Rule("fold_add_chain", ("add",), _fold_chain("add"), LOSSY, "(x+a)+b -> x+fp16(a+b)"),
    Rule("const_fold", _FOLDABLE, _const_fold, LOSSY, "evaluate small constant subgraphs"),
)

# ---- reduce_sum -> matmul -------------------------------------------------------------


def _sum_to_matmul(node):
    x = node.srcs[0]
    axes = node.attrs["axes"]
    axes = tuple(range(x.ndim)) if axes is None else tuple(a % x.ndim for a in axes)
    if len(set(axes)) != 1:
        return None  # multi-axis sums are left alone
    axis = axes[0]
    if axis != x.ndim - 1:
        perm = tuple(a for a in range(x.ndim) if a != axis) + (axis,)
        x = make("transpose", x, perm=perm)
    k = x.shape[-1]
    y = make("matmul", x, weight(np.ones((k, 1), np.float16)))
    return make("reshape", y, shape=node.shape)


def _cumsum_to_matmul(node):
    x = node.srcs[0]
    k = x.shape[-1]
    return make("matmul", x, weight(np.triu(np.ones((k, k), np.float16))))


REDUCE_TO_MATMUL = (
    Rule(
        "reduce_sum_to_matmul",
        ("sum",),
        _sum_to_matmul,
        EQUAL_OR_BETTER,
        "sum over one axis -> x @ 1 (the wide accumulator)",
    ),
    Rule("cumsum_to_matmul", ("cumsum",), _cumsum_to_matmul, _BIT, "cumsum -> x @ triu(1)"),
)

#: Every rule set by name (the exactness property test walks all of them).
RULE_SETS = {"canonical": CANONICAL, "numeric": NUMERIC, "reduce_to_matmul": REDUCE_TO_MATMUL}


def _apply(out, rules):
    single = isinstance(out, Tensor)
    outs, _ = rewrite([out] if single else list(out), rules + CANONICAL)
    return outs[0] if single else outs


def reduce_sum_to_matmul(out):
    """Route every single-axis ``sum`` (and ``cumsum``) through the wide matmul accumulator.

    ``sum`` over one axis becomes ``x @ ones[K, 1]`` (a non-last axis is transposed to
    the end first; multi-axis sums are left alone); ``cumsum`` becomes ``x @ triu_ones``.
    Accuracy is equal or better, not the same bits: the matmul accumulates in float32
    where reduce_sum rounds every partial sum to fp16, so results change (4096 ones sum
    to 4096 here, to 2048 narrow); a sum within float32 rounding of an fp16 midpoint
    may round to the other of its two fp16 neighbours. No opt level applies it: call
    it, or let ``af.tune(target_error=...)`` measure it.

    Example:
        >>> import numpy as np, aneforge as af
        >>> x = af.input((4096,))
        >>> float(af.compile(af.reduce_sum_to_matmul(x.sum()))(np.ones(4096)))
        4096.0
    """
    return _apply(out, REDUCE_TO_MATMUL)


def canonicalize(out):
    """Apply the lossless canonical rules (identity casts/reshapes/transposes, x*1, ...).

    Example:
        >>> import aneforge as af
        >>> x = af.input((3,))
        >>> af.canonicalize(-(-x)) is x
        True
    """
    return _apply(out, ())
