"""STREAM-style bandwidth probes: bytes-exact kernels at power-of-two sizes, timed, as
calibration rows (``aneforge calibrate-bandwidth``).

Each probe is a loop-nest code (:mod:`aneforge.kernel.ir`) without guards, whose
``analyze`` counts are exact, and a NumPy kernel that moves exactly those bytes (one
read of each operand, one write of the result, no temporaries):

- ``copy``: ``b[i] = a[i]`` (2 x 2N bytes);
- ``scale``: ``b[i] = a[i] * s`` (N FLOPs, 4N bytes);
- ``add``: ``c[i] = a[i] + b[i]`` (N FLOPs, 6N bytes).

The best of ``repeats`` timings of each probe is one row: backend, the code's digest, the
probe and its size, the time, one kernel, and the exact counts. Written to a log, the
rows give :func:`~aneforge.kernel.envelope.fit_envelope` exact-bandwidth witnesses for
this machine. The fp16 arithmetic of the probes is NumPy's, on this CPU.

Example:
    >>> rows = bandwidth_rows(sizes=(1024,), repeats=1)
    >>> [(r.label, r.bytes, r.exact) for r in rows]
    [('copy 2^10', 4096, True), ('scale 2^10', 4096, True), ('add 2^10', 6144, True)]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import OptionError
from .analyze import analyze
from .calibration import CalibrationRow, make_digest
from .ir import Buffer, Code, Const, For, Get, Op, Set, it
from .printer import to_text

__all__ = ["PROBES", "bandwidth_rows", "probe_code"]

#: The probes: name -> (input buffer names, NumPy kernel writing into ``out``).
PROBES: dict[str, tuple[tuple[str, ...], Callable]] = {
    "copy": (("a",), lambda a, out: np.copyto(out, a)),
    "scale": (("a",), lambda a, out: np.multiply(a, np.float16(0.5), out=out)),
    "add": (("a", "b"), lambda a, b, out: np.add(a, b, out=out)),
}
#: Largest size a probe takes (2**26 fp16 values: 128 MiB per buffer).
MAX_SIZE = 1 << 26


def probe_code(name: str, n: int) -> Code:
    """The loop-nest code of probe ``name`` on ``n`` elements.

    Example:
        >>> print(to_text(probe_code("scale", 8)))
        kernel scale(a: fp16[8] input, out: fp16[8] output)
          for i0 in 0..7 vectorized:
            out[i0] = a[i0] * 0.5
    """
    i = it("i")
    reads = [Get(b, (i,)) for b in PROBES[name][0]]
    value = {"copy": lambda: reads[0], "scale": lambda: Op("mul", (reads[0], Const(0.5)))}
    value["add"] = lambda: Op("add", (reads[0], reads[1]))
    ins = tuple(Buffer(b, (n,), kind="input") for b in PROBES[name][0])
    bufs = (*ins, Buffer("out", (n,), kind="output"))
    body = (For("i", 0, n - 1, (Set("out", (i,), value[name]()),), "vectorized"),)
    return Code(name, bufs, body)


def _best_seconds(kernel, args, out, repeats: int) -> float:
    kernel(*args, out)  # warm: page in, first touch
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        kernel(*args, out)
        best = min(best, time.perf_counter() - start)
    return best


def bandwidth_rows(
    sizes: Sequence[int] = tuple(1 << k for k in range(12, 25, 2)),
    repeats: int = 5,
    backend: str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> list[CalibrationRow]:
    """Time every probe at every size (powers of two) and return one row each.

    Raises :class:`~aneforge.errors.OptionError` for a size that is not a power of two
    in ``[1, MAX_SIZE]`` or a repeat count below 1.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise OptionError(f"calibrate-bandwidth: repeats must be an integer >= 1, got {repeats!r}")
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n & (n - 1) or n > MAX_SIZE:
            raise OptionError(
                f"calibrate-bandwidth: size {n!r} is not a power of two in [1, 2**26]"
            )
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        data = {b: rng.standard_normal(n).astype(np.float16) for b in ("a", "b")}
        out = np.empty(n, np.float16)
        for name, (inputs, kernel) in PROBES.items():
            code = probe_code(name, n)
            s = analyze(code)
            seconds = _best_seconds(kernel, [data[b] for b in inputs], out, repeats)
            label = f"{name} 2^{n.bit_length() - 1}"
            rows.append(
                CalibrationRow(
                    backend,
                    make_digest(to_text(code), name),
                    "stream",
                    label,
                    seconds * 1e3,
                    None,
                    1,
                    s.flops,
                    s.bytes,
                    s.flops_approx,
                    s.bytes_approx,
                    s.opaque,
                )  # fmt: skip
            )
            if progress is not None:
                progress(f"{label}: {s.bytes / seconds / 1e9:.3g} GB/s")
    return rows
