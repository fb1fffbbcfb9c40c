"""The emulator matmul's oracle: :func:`gemm_reference`, the contract of
:mod:`aneforge.emulator.gemm` in plain NumPy (a Python loop over k), and the operand
checks every entry point shares.

Example:
    >>> import numpy as np
    >>> check_operands(np.ones((2, 3, 4), np.float16), np.ones((2, 4, 5), np.float16))
    (2, 3, 4, 5)
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_operands", "gemm_reference"]


def check_operands(a, b) -> tuple[int, int, int, int]:
    """Check dtypes and shapes; return (B, M, K, N)."""
    for name, x, dims in (("a", a, "(B, M, K)"), ("b", b, "(B, K, N)")):
        if not isinstance(x, np.ndarray):
            raise ValueError(f"gemm: {name} must be a numpy.ndarray, got {type(x).__name__}")
        if x.dtype != np.float16:
            raise ValueError(f"gemm: {name} must have dtype float16 (native), got {x.dtype}")
        if x.ndim != 3:
            raise ValueError(f"gemm: {name} must have shape {dims}, got shape {x.shape}")
    nb, m, k = a.shape
    nb_b, k_b, n = b.shape
    if nb != nb_b:
        raise ValueError(f"gemm: batch sizes differ: a is {a.shape}, b is {b.shape}")
    if k != k_b:
        raise ValueError(
            f"gemm: contraction sizes differ: a is {a.shape} (K={k}), "
            f"b is {b.shape} (K={k_b}); need a (B, M, K) and b (B, K, N)"
        )
    return nb, m, k, n


def gemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batched fp16 matmul under the emulator contract, in plain NumPy.

    ``a`` is float16 (B, M, K), ``b`` float16 (B, K, N); returns float16 (B, M, N). Each
    product is rounded to fp16, added in ascending k order into a float32 sum starting at
    +0.0, and the sum is rounded to fp16. Raises ValueError on wrong dtypes or shapes.

    Example:
        >>> import numpy as np
        >>> a = np.array([[[16000.0] + [1.0] * 8]], np.float16)
        >>> b = np.ones((1, 9, 1), np.float16)
        >>> float(gemm_reference(a, b)[0, 0, 0])  # the eight +1 survive in float32
        16008.0
    """
    nb, m, k, n = check_operands(a, b)
    a32 = np.ascontiguousarray(a.transpose(0, 2, 1), dtype=np.float32)  # (B, K, M)
    b32 = np.ascontiguousarray(b, dtype=np.float32)  # (B, K, N)
    acc = np.zeros((nb, m, n), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        for kk in range(k):
            exact = a32[:, kk, :, None] * b32[:, kk, None, :]  # exact in float32
            acc += exact.astype(np.float16).astype(np.float32)  # fp16(), then fp32 add
        return acc.astype(np.float16)
