"""The fp16 value model: rounding to IEEE binary16 and the engine's two accumulators.

These primitives define what one fp16 step means; every emulator kernel is written with
them so the arithmetic contract (``docs/numerics.md``) lives in one place.

- :func:`round_fp16` rounds any float array to binary16 once (round-to-nearest-even,
  subnormals kept, overflow to +-inf). Because float64 (and float32, for + - * / sqrt)
  carries at least 2*11+2 significand bits, computing an elementwise op in float64 from
  fp16 operands and then rounding once gives the correctly rounded fp16 result.
- :func:`narrow_sum` is the reduce_sum accumulator: every partial sum rounded to fp16,
  terms added one at a time in ascending index order. Two explicit keyword arguments
  change it (a kernel passes them through its :class:`~aneforge.graph.arith.Arith`):
  ``route`` (a chip's reduction route, docs/numerics.md section 9.2) splits a sum over
  more than ``route`` terms into chunks first; ``wide`` (the precision tuner's
  fp32-faithful reference) takes the matmul's wide accumulator instead: one float32
  running sum in the same order.
- :func:`extreme` is the max / min of amax, amin and max_pool: IEEE 754-2019's
  ``maximum`` / ``minimum``, so the result does not depend on the order of the terms
  (NumPy's float16 reduction keeps the first of two equal zeros, its float32 and float64
  ones the last, and the order a reduction visits its terms is NumPy's choice).

Example:
    >>> import numpy as np
    >>> from aneforge.graph.fp16 import narrow_sum
    >>> float(narrow_sum(np.ones(4096, np.float16), axis=0))
    2048.0
"""

from __future__ import annotations

import numpy as np

FP16_MAX = 65504.0
FP16_EPS = 2.0**-10  # spacing of fp16 values in [1, 2)

#: The wide modes of :func:`narrow_sum`: None (the engine's narrow sum), "fp16" (the
#: float32 accumulator, rounded to fp16 once) or "float32" (left unrounded).
WIDE_MODES = (None, "fp16", "float32")


def round_fp16(x) -> np.ndarray:
    """Round ``x`` (any real array or scalar) to fp16 once; overflow becomes +-inf.

    Example:
        >>> float(round_fp16(65520.0))
        inf
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16)


def fp16_values(x) -> np.ndarray:
    """``x`` rounded to fp16 once and widened back to float64 (the engine's input cast).

    Example:
        >>> float(fp16_values(0.1))
        0.0999755859375
    """
    return np.asarray(round_fp16(x), dtype=np.float64)


def extreme(x, axis, largest: bool = True) -> np.ndarray:
    """The largest (``largest``) or smallest value of ``x`` over ``axis`` (an int or a
    tuple), as IEEE 754-2019 ``maximum`` / ``minimum``: NaN propagates, and a zero
    result is +0 for a max when any of its zeros is +0, -0 for a min when any is -0,
    whatever the order of the terms.

    Example:
        >>> import numpy as np
        >>> x = np.array([-0.0, 0.0, -1.0], np.float16)
        >>> [float(extreme(x, 0)), float(extreme(x, 0, largest=False))]
        [0.0, -1.0]
        >>> bool(np.signbit(extreme(np.array([0.0, -0.0], np.float16), 0, largest=False)))
        True
    """
    x = np.asarray(x)
    out = np.asarray(np.max(x, axis=axis) if largest else np.min(x, axis=axis))
    zero = out == 0
    if zero.any():  # a zero result's sign: does any of its terms have the winning sign?
        axes = tuple(a % x.ndim for a in ((axis,) if np.ndim(axis) == 0 else axis))
        kept = [a for a in range(x.ndim) if a not in axes]
        terms = x.transpose(*kept, *axes)[zero]  # only the reductions that gave a zero
        wins = (terms == 0) & (np.signbit(terms) != largest)
        signed = wins.reshape(len(terms), -1).any(axis=1) != largest
        out = out.copy()
        out[zero] = np.where(signed, -np.zeros((), x.dtype), np.zeros((), x.dtype))
    return out


def exact(x: np.ndarray) -> np.ndarray:
    """Widen an fp16 array to float64 (exact) for computing one rounded step."""
    return np.asarray(x, dtype=np.float64)


def _move_to_end(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Move ``axes`` (normalized, ascending) to the end and flatten them into one."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    return moved.reshape(moved.shape[: len(rest)] + (-1,))


def narrow_sum(
    x: np.ndarray,
    axis,
    keepdims: bool = False,
    *,
    route: int | None = None,
    wide: str | None = None,
) -> np.ndarray:
    """Sum fp16 ``x`` over ``axis`` with an fp16 accumulator (each partial rounded).

    The reduced axes are flattened in C order and added one term at a time starting
    from +0. ``axis`` is an int or a tuple of ints.

    ``route`` (a positive int, or None for the generic sequential model): a sum over
    more than ``route`` terms takes the split route, consecutive chunks of ``route``
    terms each summed narrowly, then their partials summed narrowly (the per-chip
    emulator's reduction route). ``wide`` (one of :data:`WIDE_MODES`): accumulate like
    a matmul instead, a float32 running sum over the same terms in the same order (so
    it equals ``x @ ones`` bit for bit), rounded to fp16 once (``"fp16"``) or returned
    as the float32 sum (``"float32"``); terms are taken at float32, exact for fp16
    values, and ``route`` does not apply. The engine itself has no wide mode: it is the
    precision tuner's fp32-faithful reference (:mod:`aneforge.optimizer.precision_tune`).

    Example:
        >>> import numpy as np
        >>> float(narrow_sum(np.array([16000, 1, 1], np.float16), axis=0))
        16000.0
        >>> ones = np.ones(4096, np.float16)
        >>> float(narrow_sum(ones, 0)), float(narrow_sum(ones, 0, route=384))
        (2048.0, 4096.0)
        >>> float(narrow_sum(ones, 0, wide="fp16"))
        4096.0
    """
    x = np.asarray(x, dtype=np.float16 if wide is None else np.float32)
    axes = _normalize_axes(axis, x.ndim)
    flat = _move_to_end(x, axes)
    chunk = route
    if wide is not None:
        acc = _wide_sum(flat)
        if wide == "fp16":
            acc = round_fp16(acc)
    elif chunk is not None and flat.shape[-1] > chunk:
        acc = _chunked_sum(flat, chunk)
    else:
        acc = _sequential_sum(flat)
    if keepdims:
        acc = acc.reshape(tuple(1 if a in axes else n for a, n in enumerate(x.shape)))
    return acc


def _sequential_sum(flat: np.ndarray) -> np.ndarray:
    """Narrow sum over the last axis, one term at a time from +0."""
    acc = np.zeros(flat.shape[:-1], dtype=np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(flat.shape[-1]):
            acc = acc + flat[..., k]  # NumPy fp16 add: exact in fp32, rounded once
    return acc


def _wide_sum(flat: np.ndarray) -> np.ndarray:
    """The matmul's accumulator over the last axis: a float32 running sum from +0, one
    term at a time in ascending order, each add rounded to float32 (no fp16 rounding)."""
    acc = np.zeros(flat.shape[:-1], dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(flat.shape[-1]):
            acc = acc + flat[..., k]  # float32 + float32, rounded once to float32
    return acc


def _chunked_sum(flat: np.ndarray, chunk: int) -> np.ndarray:
    """The split route: consecutive chunks of ``chunk`` terms (the last one shorter) each
    narrow-summed from +0, then the chunk partials narrow-summed in order."""
    n = flat.shape[-1]
    partials = [_sequential_sum(flat[..., i : i + chunk]) for i in range(0, n, chunk)]
    return _sequential_sum(np.stack(partials, axis=-1))


def _normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    return tuple(sorted({a % ndim if ndim else 0 for a in axis}))
