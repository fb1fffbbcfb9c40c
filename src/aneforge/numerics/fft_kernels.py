"""fp16 FFT building blocks: complex pairs, twiddle tables, the dense and staged DFTs.

Everything here builds graph nodes; nothing runs. A complex value is a pair ``(re, im)``
of fp16 tensors of one shape (``im`` may be ``None`` for a real value). Every sum over a
transform axis is a matmul against an fp16 twiddle constant, so it runs in the wide
float32 accumulator (docs/numerics.md, section 3); nothing here uses ``reduce_sum``.

Complex matmul is the straight four-real-matmul form, ``Cre = Are@Bre - Aim@Bim`` and
``Cim = Are@Bim + Aim@Bre`` (never Karatsuba), in one of two layouts:

- ``form="stacked"`` (default): the four real products of each output run in one
  contraction, ``concat([Are, Aim]) @ [[Bre], [-Bim]]`` and
  ``concat([Are, Aim]) @ [[Bim], [Bre]]``: the minus and the plus happen inside the
  float32 accumulator and the result is rounded once. Two matmuls of depth 2K.
- ``form="four"``: four matmuls of depth K, each rounded to fp16, then an fp16 subtract
  and an fp16 add (two more roundings). Same MACs, about 15-20% more error.

Both layouts produce the same four real products, so the MAC count is 4·K·J per row
either way (2·K·J for a real left operand). Outputs are never sliced at a column offset,
so no value rides the A13/A14 width-offset crop-DMA (docs/numerics.md, section 9.1).

Example:
    >>> import numpy as np, aneforge as af
    >>> from aneforge.numerics.fft_kernels import complex_matmul
    >>> re, im = complex_matmul((af.input((2, 8)), af.input((2, 8))), np.eye(8) * 1j)
    >>> re.shape, im.shape
    ((2, 8), (2, 8))
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import OptionError, ShapeError
from ..graph import api
from ..graph.fp16 import round_fp16
from ..graph.tensor import Tensor, weight

FORMS = ("stacked", "four")
# Weight tensors up to this many elements (512 KiB of fp16) are kept for reuse; bigger
# dense tables are rebuilt each time rather than held in memory.
_CACHE_MAX_ELEMENTS = 1 << 18
_CACHE_ENTRIES = 64


@dataclass(frozen=True)
class Table:
    """A twiddle table ``T[a, k] = scale · c_a · exp(sign·2πi·(a·k mod n)/n)``.

    ``rows`` x ``cols`` entries; ``c_a`` is 1 unless ``hermitian`` (then ``c_a = 2``
    except ``a = 0`` and ``a = n/2``: the fold of a real inverse onto its half spectrum).
    The phase ``a·k mod n`` is an exact integer, so the only error of an entry is its one
    rounding to fp16 when it becomes a weight.
    """

    rows: int
    cols: int
    n: int
    sign: int
    scale: float = 1.0
    hermitian: bool = False

    def values(self) -> np.ndarray:
        """The complex128 table (for small tables and tests)."""
        return self.part("re", 0, self.rows) + 1j * self.part("im", 0, self.rows)

    def part(self, part: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of the real (``'re'``) or imaginary (``'im'``) part, float64."""
        wide = self.rows * self.cols >= 2**31 or self.n >= 2**31
        a = np.arange(start, stop, dtype=np.int64 if wide else np.int32)[:, None]
        k = np.arange(self.cols, dtype=a.dtype)[None, :]
        # cos and sin of 2π r/n for the n phases r, gathered at r = a·k mod n (exact)
        t = _unit_circle(self.n)[0 if part == "re" else 1][(a * k) % self.n]
        if part == "im" and self.sign < 0:
            t = -t
        gain = np.full((stop - start, 1), self.scale)
        if self.hermitian:
            gain *= 2.0
            gain[a[:, 0] == 0] = self.scale
            if self.n % 2 == 0:
                gain[a[:, 0] == self.n // 2] = self.scale
        return t * gain


@lru_cache(maxsize=32)
def _unit_circle(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos(2π r/n)`` and ``sin(2π r/n)`` for r = 0..n-1 (read-only float64)."""
    phase = 2.0 * np.pi * np.arange(n) / n
    ring = (np.cos(phase), np.sin(phase))
    for part in ring:
        part.setflags(write=False)
    return ring


_cache: OrderedDict = OrderedDict()
_CHUNK_ROWS = 256
# A weight block: its row blocks top to bottom, as (part, sign).
_BLOCKS = {
    "re": (("re", 1),),
    "im": (("im", 1),),
    "stack_re": (("re", 1), ("im", -1)),  # [[Re], [-Im]]: real output of concat([re, im])
    "stack_im": (("im", 1), ("re", 1)),  # [[Im], [Re]]: imaginary output
}


def _block(table: Table, name: str) -> np.ndarray:
    """The fp16 block ``name`` of ``table``, built in row chunks (bounded temporaries)."""
    pieces = _BLOCKS[name]
    out = np.empty((table.rows * len(pieces), table.cols), np.float16)
    for i, (part, sign) in enumerate(pieces):
        for start in range(0, table.rows, _CHUNK_ROWS):
            stop = min(start + _CHUNK_ROWS, table.rows)
            out[i * table.rows + start : i * table.rows + stop] = round_fp16(
                sign * table.part(part, start, stop)
            )
    return out


def _array_block(arr: np.ndarray, name: str) -> np.ndarray:
    parts = {"re": arr.real, "im": arr.imag}
    return np.concatenate([sign * parts[p] for p, sign in _BLOCKS[name]], axis=0)


def table_weight(table: Table, part: str, placeholder: bool = False) -> Tensor:
    """The fp16 weight of one real block of ``table`` (cached when small).

    ``placeholder=True`` gives a zero weight of the same shape, for cost estimates that
    need only shapes (planning a large dense DFT must not compute 16M cosines).
    """
    key = (table, part, placeholder)
    hit = _cache.get(key)
    if hit is not None:
        _cache.move_to_end(key)
        return hit
    rows = table.rows * len(_BLOCKS[part])
    if placeholder:
        w = weight(np.zeros((rows, table.cols), np.float16), name=f"fft_{part}_shape")
    else:
        w = weight(_block(table, part), name=f"fft_{part}_{table.rows}x{table.cols}")
    if rows * table.cols <= _CACHE_MAX_ELEMENTS:
        _cache[key] = w
        while len(_cache) > _CACHE_ENTRIES:
            _cache.popitem(last=False)
    return w


def _check_form(form: str) -> None:
    if form not in FORMS:
        raise OptionError(f"fft: form must be one of {FORMS}, got {form!r}")


def complex_matmul(a, b, form: str = "stacked", real_only: bool = False, placeholder=False):
    """``a @ b`` for a complex pair ``a = (re, im)`` and a complex constant ``b``.

    ``b`` is a complex NumPy array [K, J] (rounded to fp16 weights, real and imaginary
    parts separately) or a :class:`Table`. ``a[1]`` may be ``None`` (a real operand:
    two matmuls). Returns ``(re, im)``; ``im`` is ``None`` when ``real_only``.
    ``placeholder`` (a Table only) uses zero weights of the right shapes, for estimates.

    Range: each output is a float32 sum rounded once, ``|C| <= Σ_k |A_k|·|B_k|``, so an
    output is inside fp16 whenever that bound is; the accumulator itself never overflows.
    """
    _check_form(form)
    re, im = a
    if isinstance(b, Table):

        def w(part):
            return table_weight(b, part, placeholder)

    else:
        arr = np.asarray(b)
        if arr.ndim != 2:
            raise ShapeError(f"complex_matmul: b must be a 2-D array, got shape {arr.shape}")
        arr = arr.astype(np.complex128)

        def w(part):
            return weight(_array_block(arr, part))

    if im is None:
        out_re = re @ w("re")
        return out_re, (None if real_only else re @ w("im"))
    if form == "stacked":
        z = api.concat([re, im], axis=-1)
        return z @ w("stack_re"), (None if real_only else z @ w("stack_im"))
    out_re = (re @ w("re")) - (im @ w("im"))
    if real_only:
        return out_re, None
    return out_re, (re @ w("im")) + (im @ w("re"))


def complex_multiply(a, b):
    """Elementwise ``a · b`` of two complex pairs (``b`` may be a complex NumPy array).

    ``re = a_re·b_re - a_im·b_im`` and ``im = a_re·b_im + a_im·b_re``: six fp16 ops, each
    rounded once. Range: every product and both results are at most ``|a|·|b|`` (moduli;
    ``|Re(ab)|, |Im(ab)| <= |ab|``) up to their roundings, so a unit twiddle ``b`` never
    grows a value past the modulus of ``a``.
    """
    are, aim = a
    if isinstance(b, np.ndarray):
        b = (weight(b.real), weight(b.imag))
    bre, bim = b
    if aim is None and bim is None:
        return are * bre, None
    if aim is None:
        return are * bre, are * bim
    if bim is None:
        return are * bre, aim * bre
    return are * bre - aim * bim, are * bim + aim * bre


def _twiddle(table: Table, placeholder: bool):
    return table_weight(table, "re", placeholder), table_weight(table, "im", placeholder)


def dense_dft(pair, table: Table, form: str, real_only: bool = False, placeholder=False):
    """One DFT as one complex matmul of ``pair`` [B, rows] against ``table``.

    Range: the entries have modulus ``scale`` (``2·scale`` in a Hermitian fold), so
    every output is at most ``rows · scale · max|pair|`` (twice that folded); the table's
    scale is the normalization, folded in so that this bound is the normalized one.
    """
    return complex_matmul(pair, table, form, real_only, placeholder)


def staged_dft(
    pair,
    n: int,
    factors: tuple[int, ...],
    sign: int,
    power: float,
    gain: float = 1.0,
    form: str = "stacked",
    real_only: bool = False,
    placeholder: bool = False,
):
    """Cooley–Tukey DFT of length ``n = Π factors`` along the last axis of [B, L].

    ``L <= n`` (the input is read as zero-padded to ``n``). Stage ``i`` is one complex
    matmul against the ``factors[i]``-point table scaled by ``factors[i] ** -power``
    (``power`` 0: unnormalized, 1: the 1/n of an inverse, 0.5: orthonormal), the last one
    also by ``gain``. Between stages an elementwise twiddle multiply. With
    ``n = N1·M`` and ``x[n1·M + m]``:

    1. pad with zeros to a whole number of rows (only the rows that hold input data take
       part in the first contraction: a half spectrum costs half a stage), reshape
       [B, rows, M], transpose to [B, M, rows];
    2. matmul with the N1-point table: ``A[m, k1] = Σ_n1 x[n1, m] W_N1^(n1·k1)``;
    3. twiddle: ``A[m, k1] ·= W_n^(m·k1)``;
    4. transpose to [B·N1, M] and transform the M axis the same way (recursively);
    5. ``X[k1 + N1·k']`` is at [k1, k']: transpose to [B, M, N1], reshape [B, n].

    Returns ``(re, im)`` [B, n] (``im`` None when ``real_only``).

    Range: with ``power = 0`` the modulus after stage i is at most N1···Ni·max|x| (each
    stage sums N_i terms of unit-modulus twiddles; the twiddle multiply keeps moduli),
    so every intermediate is bounded by the output bound n·max|x|; with ``power = 1``
    every intermediate is bounded by max|x|, with 0.5 by sqrt(n)·max|x|.
    """
    re, im = pair
    batch, length = re.shape
    if length > n:
        raise ShapeError(f"staged_dft: input length {length} exceeds the transform length {n}")
    if math.prod(factors) != n or (len(factors) > 1 and min(factors) < 2):
        raise ShapeError(f"staged_dft: factors {factors} do not multiply to {n}")
    if len(factors) == 1:
        table = Table(length, n, n, sign, gain * n**-power)
        return dense_dft(pair, table, form, real_only, placeholder)
    n1 = factors[0]
    m = n // n1
    rows = -(-length // m)
    pad = rows * m - length

    def split(t):
        if t is None:
            return None
        if pad:
            t = api.concat([t, weight(np.zeros((batch, pad), np.float16))], axis=-1)
        return api.transpose(api.reshape(t, (batch, rows, m)), (0, 2, 1))

    table = Table(rows, n1, n1, sign, n1**-power)
    a = dense_dft((split(re), split(im)), table, form, False, placeholder)
    a = complex_multiply(a, _twiddle(Table(m, n1, n, sign), placeholder))

    def regroup(t):
        return api.reshape(api.transpose(t, (0, 2, 1)), (batch * n1, m))

    inner = staged_dft(
        (regroup(a[0]), regroup(a[1])),
        m,
        factors[1:],
        sign,
        power,
        gain,
        form,
        real_only,
        placeholder,
    )

    def natural(t):
        if t is None:
            return None
        t = api.transpose(api.reshape(t, (batch, n1, m)), (0, 2, 1))
        return api.reshape(t, (batch, n))

    return natural(inner[0]), natural(inner[1])


def factorizations(n: int, max_stages: int = 3) -> list[tuple[int, ...]]:
    """The most balanced factorization of ``n`` into 2 and into 3 factors (each >= 2).

    Balanced means the smallest factor sum (the stage MACs per output are Σ N_i).
    Factors are in descending order: the first stage is the largest, which is where a
    real input or a half spectrum saves the most. Empty for primes.
    """
    found: list[tuple[int, ...]] = []
    best2 = None
    for a in range(2, math.isqrt(n) + 1):
        if n % a == 0 and (best2 is None or a + n // a < sum(best2)):
            best2 = (n // a, a)
    if best2:
        found.append(best2)
    if max_stages >= 3:
        best3 = None
        for c in range(2, round(n ** (1 / 3)) + 2):
            if n % c:
                continue
            for b in range(c, math.isqrt(n // c) + 1):
                if (n // c) % b == 0:
                    cand = (n // (b * c), b, c)
                    if cand[0] >= b and (best3 is None or sum(cand) < sum(best3)):
                        best3 = cand
        if best3:
            found.append(best3)
    return found
