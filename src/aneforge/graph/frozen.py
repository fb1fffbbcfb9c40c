"""Immutable arrays: copies whose memory is a ``bytes`` object, so that neither they nor
any view of them can ever be made writeable, and their elements never change while
they live.

A program's weights are such arrays (:func:`aneforge.weight` and the compression codecs
freeze the fp16 values they hold), which lets a kernel derive something from a weight
once (the GEMM's packed panels) and reuse it on every later call. A read-only flag alone
would not promise that: a writeable view taken before the flag was cleared still writes
the memory, and an array that owns its memory may be made writeable again.

Example:
    >>> import numpy as np
    >>> w = freeze(np.ones((2, 3), np.float16))
    >>> frozen_owner(w.T[None]) is frozen_owner(w)
    True
    >>> frozen_owner(np.ones(3)) is None  # writeable: anything may change it
    True
"""

from __future__ import annotations

import numpy as np

__all__ = ["freeze", "frozen_owner", "frozen_zeros"]


def freeze(values) -> np.ndarray:
    """An immutable copy of the array ``values``: same dtype, shape and elements, its
    memory a ``bytes`` object (NumPy refuses to make it, or any view of it, writeable).

    Example:
        >>> import numpy as np
        >>> w = freeze(np.zeros((2, 2), np.float16))
        >>> w.flags.writeable, w.dtype, w.shape
        (False, dtype('float16'), (2, 2))
    """
    arr = np.asarray(values)
    if arr.flags.c_contiguous and frozen_owner(arr) is not None:
        return arr  # already immutable: nothing to copy
    return np.frombuffer(arr.tobytes(), dtype=arr.dtype).reshape(arr.shape)  # C order


def frozen_zeros(shape, dtype=np.float16) -> np.ndarray:
    """An immutable array of zeros, as :func:`freeze` would give, without writing them:
    its ``bytes`` comes from ``calloc``, so a gigabyte costs no time until it is read (a
    cost-model workload's weights, which only give shapes).

    Example:
        >>> z = frozen_zeros((2, 3))
        >>> z.flags.writeable, z.dtype, float(z.sum())
        (False, dtype('float16'), 0.0)
    """
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(bytes(count * dtype.itemsize), dtype=dtype).reshape(shape)


def frozen_owner(x: np.ndarray) -> np.ndarray | None:
    """The array over immutable memory that ``x`` is a view of (the one array every view
    of a :func:`freeze` result leads back to), or None when ``x``'s elements may change.

    Example:
        >>> import numpy as np
        >>> w = freeze(np.arange(4, dtype=np.float16))
        >>> frozen_owner(w.view(np.uint16)[1:]) is frozen_owner(w)
        True
        >>> frozen_owner(np.arange(4.0).view()) is None
        True
    """
    owner = x
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    return owner if isinstance(owner.base, bytes) else None
