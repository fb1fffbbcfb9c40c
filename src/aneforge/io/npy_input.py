"""Reading a NumPy ``.npy`` file as untrusted input (``aneforge check --input``).

Rules (:func:`read_npy`; every refusal is an :class:`~aneforge.errors.OptionError` with a
one-line message naming the file): a regular file of at most ``$ANEFORGE_MAX_FILE_BYTES``
bytes (:func:`aneforge.limits.read_regular_file`: no FIFOs, devices or folders); format
1.0 or 2.0 (what ``numpy.save`` writes for arrays of numbers); a bool, integer or float
dtype (no objects, strings, records or complex numbers); at most
``$ANEFORGE_MAX_ELEMENTS`` elements; and exactly as many data bytes as the header says.
The header is checked before any allocation, and nothing is ever unpickled
(``allow_pickle=False``).
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import FileReadError, OptionError
from ..limits import check_elements, read_regular_file

__all__ = ["read_npy"]

_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def read_npy(path, what: str) -> np.ndarray:
    """The array of the ``.npy`` file ``path`` (``what`` labels it in errors), read as
    untrusted input by the rules above.

    Example:
        >>> import tempfile, os
        >>> fd, name = tempfile.mkstemp(suffix=".npy"); os.close(fd)
        >>> np.save(name, np.arange(6.0).reshape(2, 3))
        >>> read_npy(name, "--input x").shape
        (2, 3)
        >>> np.save(name, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        >>> try:
        ...     read_npy(name, "--input x")
        ... except OptionError as err:
        ...     print(str(err)[:40])
        --input x: holds dtype object; give an a
    """
    try:
        data = read_regular_file(path, what)
    except FileReadError as err:
        raise OptionError(str(err)) from None
    buf = io.BytesIO(data)
    try:
        shape, _, dtype = _HEADERS[np.lib.format.read_magic(buf)](buf)
    except (ValueError, KeyError, EOFError) as err:
        why = " ".join(str(err).split()) or type(err).__name__
        raise OptionError(
            f"{what}: not a NumPy .npy file of format 1.0 or 2.0 ({why}); write it with numpy.save"
        ) from None
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "biuf":
        raise OptionError(
            f"{what}: holds dtype {dtype}; give an array of numbers (bool, integer or float; "
            "object arrays are never read)"
        )
    count = check_elements(shape, what)
    left = len(data) - buf.tell()
    if left != count * dtype.itemsize:
        raise OptionError(
            f"{what}: its header says {shape} {dtype} ({count * dtype.itemsize} bytes), but "
            f"{left} bytes follow it; is the file truncated or padded?"
        )
    buf.seek(0)
    return np.load(buf, allow_pickle=False)
