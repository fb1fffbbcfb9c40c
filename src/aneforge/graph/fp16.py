"""The fp16 value model: rounding to IEEE binary16 and the engine's two accumulators.

These primitives define what one fp16 step means; every emulator kernel is written with
them so the arithmetic contract (``docs/numerics.md``) lives in one place.

- :func:`round_fp16` rounds any float array to binary16 once (round-to-nearest-even,
  subnormals kept, overflow to +-inf). Because float64 (and float32, for + - * / sqrt)
  carries at least 2*11+2 significand bits, computing an elementwise op in float64 from
  fp16 operands and then rounding once gives the correctly rounded fp16 result.
- :func:`narrow_sum` is the reduce_sum accumulator: every partial sum rounded to fp16,
  terms added one at a time in ascending index order.
- :func:`wide_prefix_sum` is the matmul accumulator applied to a prefix sum (cumsum as
  ``x @ triu_ones``): each term is exact (x*1), the running sum is float32, each output
  rounded to fp16.

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


def round_fp16(x) -> np.ndarray:
    """Round ``x`` (any real array or scalar) to fp16 once; overflow becomes +-inf.

    Example:
        >>> float(round_fp16(65520.0))
        inf
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(np.float16)


def exact(x: np.ndarray) -> np.ndarray:
    """Widen an fp16 array to float64 (exact) for computing one rounded step."""
    return np.asarray(x, dtype=np.float64)


def _move_to_end(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Move ``axes`` (normalized, ascending) to the end and flatten them into one."""
    rest = [a for a in range(x.ndim) if a not in axes]
    moved = np.transpose(x, rest + list(axes))
    return moved.reshape(moved.shape[: len(rest)] + (-1,))


def narrow_sum(x: np.ndarray, axis, keepdims: bool = False) -> np.ndarray:
    """Sum fp16 ``x`` over ``axis`` with an fp16 accumulator (each partial rounded).

    The reduced axes are flattened in C order and added one term at a time starting
    from +0. ``axis`` is an int or a tuple of ints.

    Example:
        >>> import numpy as np
        >>> float(narrow_sum(np.array([16000, 1, 1], np.float16), axis=0))
        16000.0
    """
    x = np.asarray(x, dtype=np.float16)
    axes = _normalize_axes(axis, x.ndim)
    flat = _move_to_end(x, axes)
    acc = np.zeros(flat.shape[:-1], dtype=np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(flat.shape[-1]):
            acc = acc + flat[..., k]  # NumPy fp16 add: exact in fp32, rounded once
    if keepdims:
        acc = acc.reshape(tuple(1 if a in axes else n for a, n in enumerate(x.shape)))
    return acc


def wide_prefix_sum(x: np.ndarray) -> np.ndarray:
    """Cumulative sum over the last axis through the wide (float32) accumulator.

    Example:
        >>> import numpy as np
        >>> float(wide_prefix_sum(np.ones(4096, np.float16))[-1])
        4096.0
    """
    x = np.asarray(x, dtype=np.float16)
    with np.errstate(over="ignore", invalid="ignore"):
        acc = np.cumsum(x.astype(np.float32), axis=-1, dtype=np.float32)
    return round_fp16(acc)


def _normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (int(axis),)
    return tuple(sorted({a % ndim if ndim else 0 for a in axis}))
