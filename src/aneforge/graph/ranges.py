"""Value ranges of fp16 tensors, and the building blocks of every op's range rule.

An op record's ``range`` field is its transfer rule
``rule(node, srcs, env) -> Interval``: from the :class:`Interval` of each source it
returns one that holds **every value the emulator can produce** for the node, in the
engine's fp16 arithmetic (rounding, narrow sums, overflow to inf). The analysis that
walks a graph with these rules is :func:`aneforge.analysis.range_analysis`; a property
test holds every rule against the emulator.

Most rules are built from three sound mechanisms, which evaluate the op's *own* fp16
kernel so that the bound follows its arithmetic exactly:

- :func:`corners`: ops monotone in each input separately (for a fixed value of the
  others, in either direction): add, sub, mul, maximum... The extremes over a box lie at
  its corners, and rounding to fp16 is monotone, so the kernel at the corners bounds it.
- :func:`monotone`: ops non-decreasing in every input *element* (sums, pools, concat,
  a reduction over a probe of the reduced shape): the kernel on a probe filled with
  every source's low end bounds the output from below, and on the high ends from above.
- :func:`critical`: unary ops monotone between known critical points (gelu, silu,
  square, sin): the kernel at the ends and at the critical points inside.

Example:
    >>> from aneforge.graph.ranges import Interval
    >>> Interval(-3.0, 3.0).max_abs, Interval.of([0.5, -2.0, 0.0]).lo
    (3.0, -2.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import AttributeValueError
from .arith import Arith
from .fp16 import FP16_MAX, narrow_sum, round_fp16
from .registry import get_op

INF = math.inf
#: The smallest positive fp16 value (a subnormal): every non-zero fp16 |v| is at least it.
SMALLEST_SUBNORMAL = 2.0**-24
#: The smallest positive normal fp16 value; below it fp16 loses precision.
SMALLEST_NORMAL = 2.0**-14


@dataclass(frozen=True)
class Interval:
    """Every value a tensor can hold: ``lo <= v <= hi`` (``+-inf`` allowed), NaN only
    when ``nan``, and every non-zero ``|v| >= tiny``.

    Attributes:
        lo, hi: the bounds, fp16 values or ``+-inf``; ``lo <= hi``.
        nan: whether NaN can appear.
        tiny: a lower bound on the magnitude of the non-zero values (at least the
            smallest fp16 subnormal, 2**-24, which every non-zero fp16 value meets).
        l1, l2: bounds on the 1- and 2-norm of every vector along the last axis (inf:
            none known beyond what ``lo``/``hi`` imply). A softmax's rows sum to about
            1 and a layer norm's rows have a 2-norm of about ``sqrt(n)``, while their
            elements may each reach far more than ``1/n`` or 1: contractions that read
            such rows use these bounds (``|w . x| <= ||w||_2 ||x||_2``).
        col_l2: the same 2-norm bound along the second-to-last axis (the rows of a
            tensor whose last two axes were swapped: ``k.T`` in ``q @ k.T``).
    """

    lo: float
    hi: float
    nan: bool = False
    tiny: float = SMALLEST_SUBNORMAL
    l1: float = INF
    l2: float = INF
    col_l2: float = INF

    def __post_init__(self):
        lo, hi = float(self.lo), float(self.hi)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"Interval: need lo <= hi, got [{self.lo}, {self.hi}]")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        gap = min(abs(lo), abs(hi)) if lo > 0 or hi < 0 else 0.0
        object.__setattr__(self, "tiny", max(float(self.tiny), gap, SMALLEST_SUBNORMAL))

    # ---- construction ------------------------------------------------------------
    @classmethod
    def unknown(cls) -> Interval:
        """An input nothing is known about: any fp16 value, inf and NaN included."""
        return cls(-INF, INF, nan=True)

    @classmethod
    def of(cls, values) -> Interval:
        """The tightest interval of the fp16 ``values`` (a weight's actual values).

        Example:
            >>> Interval.of([1.0, 3.0]).tiny
            1.0
        """
        v = np.asarray(round_fp16(values), dtype=np.float64).ravel()
        nan = bool(np.isnan(v).any())
        v = v[~np.isnan(v)]
        if v.size == 0:
            return cls(0.0, 0.0, nan=nan)
        nonzero = np.abs(v[v != 0])
        tiny = float(nonzero.min()) if nonzero.size else SMALLEST_SUBNORMAL
        return cls(float(v.min()), float(v.max()), nan=nan, tiny=tiny)

    @classmethod
    def declared(cls, lo: float, hi: float) -> Interval:
        """The interval of an input declared to lie in ``[lo, hi]``: the fp16 values
        the engine's input cast can make of such numbers."""
        return cls(float(round_fp16(lo)), float(round_fp16(hi)))

    # ---- queries -------------------------------------------------------------------
    @property
    def max_abs(self) -> float:
        """The largest magnitude any value can have."""
        return max(abs(self.lo), abs(self.hi))

    @property
    def finite(self) -> bool:
        """Whether every value is finite (no inf, no NaN)."""
        return not self.nan and math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def is_zero(self) -> bool:
        """Whether every value is zero."""
        return self.lo == 0.0 and self.hi == 0.0 and not self.nan

    def contains(self, values) -> bool:
        """Whether every element of ``values`` lies inside (the soundness check).

        Example:
            >>> Interval(0.0, 1.0).contains([0.0, 0.5]), Interval(0.0, 1.0).contains([2.0])
            (True, False)
        """
        v = np.asarray(values, dtype=np.float64).ravel()
        isnan = np.isnan(v)
        if isnan.any() and not self.nan:
            return False
        v = v[~isnan]
        if v.size == 0:
            return True
        if v.min() < self.lo or v.max() > self.hi:
            return False
        nonzero = np.abs(v[v != 0])
        return not (nonzero.size and nonzero.min() < self.tiny)

    def rows_hold(self, values) -> bool:
        """Whether every vector of ``values`` (its shape as the node's) along the last
        axis keeps the ``l1``/``l2`` bounds (NaNs count as 0: the ``nan`` flag covers
        them).

        Example:
            >>> Interval(0.0, 1.0, l1=1.0).rows_hold([[0.5, 0.5], [1.0, 0.0]])
            True
        """
        values = np.asarray(values, dtype=np.float64)
        if not any(map(math.isfinite, (self.l1, self.l2, self.col_l2))) or values.ndim == 0:
            return True
        rows = np.nan_to_num(values, nan=0.0)
        with np.errstate(all="ignore"):
            l1 = np.abs(rows).sum(axis=-1)
            l2 = np.sqrt(np.square(rows).sum(axis=-1))
            cols = np.sqrt(np.square(rows).sum(axis=-2)) if rows.ndim > 1 else 0.0
        return bool(np.all(l1 <= self.l1) and np.all(l2 <= self.l2) and np.all(cols <= self.col_l2))

    def hull(self, *others: Interval) -> Interval:
        """The smallest interval holding this one and ``others``."""
        items = (self, *others)
        return Interval(
            min(i.lo for i in items),
            max(i.hi for i in items),
            nan=any(i.nan for i in items),
            tiny=min(i.tiny for i in items),
        )

    def with_nan(self, nan: bool = True) -> Interval:
        """The same bounds, NaN allowed when ``nan``."""
        return replace(self, nan=self.nan or nan)

    def elements(self) -> Interval:
        """The same element bounds without the row norms (for values moved to other
        rows: a transpose, a reshape, a gather)."""
        return Interval(self.lo, self.hi, self.nan, self.tiny)

    def __str__(self) -> str:
        text = f"[{_fmt(self.lo)}, {_fmt(self.hi)}]"
        return text + (" or nan" if self.nan else "")


def _fmt(v: float) -> str:
    return f"{v:.4g}" if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def round_bound(lo: float, hi: float, nan: bool = False, tiny: float = 0.0) -> Interval:
    """The interval of fp16 results of a value known (exactly) to lie in ``[lo, hi]``:
    rounding to fp16 is monotone, so ``fp16(lo) <= fp16(v) <= fp16(hi)``.

    Example:
        >>> round_bound(0.0, 70000.0).hi
        inf
    """
    return Interval(float(round_fp16(lo)), float(round_fp16(hi)), nan, tiny)


def widened(lo: float, hi: float, rel: float, nan: bool = False) -> Interval:
    """``[lo, hi]`` widened outward by ``rel`` of its magnitude, then rounded to fp16
    (a float64 bound of a result that carries accumulated rounding error)."""
    pad = rel * max(abs(lo), abs(hi)) if math.isfinite(max(abs(lo), abs(hi))) else 0.0
    return round_bound(lo - pad, hi + pad, nan)


def check_range(value, where: str, error=AttributeValueError) -> tuple[float, float]:
    """``(lo, hi)`` from a pair or a max-|value| number, or ``error`` naming ``where``.

    Example:
        >>> check_range(3, "x"), check_range((-1, 2.5), "x")
        ((-3.0, 3.0), (-1.0, 2.5))
    """
    try:
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            m = float(value)
            if not m >= 0:
                raise ValueError
            lo, hi = -m, m
        else:
            lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise error(
            f"{where}: a range is (lo, hi) with lo <= hi or a max |value| >= 0, got {value!r}"
        ) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise error(f"{where}: a range needs finite lo <= hi, got ({lo:g}, {hi:g})")
    if max(abs(lo), abs(hi)) > FP16_MAX:
        raise error(
            f"{where}: range ({lo:g}, {hi:g}) reaches past fp16's 65504; scale the input "
            "down before it reaches the engine"
        )
    return lo, hi


# ---- the environment a rule runs in ---------------------------------------------------


@dataclass
class RangeEnv:
    """What a range rule may ask of the analysis running it.

    Attributes:
        mm: the fp16 matmul backend (the executor's, with the target's output stage).
        plain_mm: the same backend without the output stage (a rule that applies
            :meth:`contraction` itself).
        matmul_limit: the target's contraction output limit (``|y| >`` it becomes inf),
            or ``None``.
        route: the target's reduction route (narrow sums over more terms split), or
            ``None`` for the generic model; rules pass it to their narrow sums.
        steps: the internal steps the current node recorded with :meth:`step`.
    """

    mm: Callable | None = None
    plain_mm: Callable | None = None
    matmul_limit: float | None = None
    route: int | None = None
    steps: list = field(default_factory=list)
    _cliffs: list = field(default_factory=list)

    @property
    def arith(self) -> Arith:
        """The arithmetic policy the rules run kernels with: ``mm`` and ``route``."""
        return Arith(self.mm, self.route)

    def step(self, label: str, interval: Interval) -> Interval:
        """Record the range of an internal step of a composite op (``x*x`` of a norm,
        ``exp`` before a max subtraction...) so its hazards can be reported."""
        self.steps.append((label, interval))
        return interval

    def contraction(self, interval: Interval) -> Interval:
        """A contraction's rounded output after the target's output stage: values past
        the matmul output limit become +-inf."""
        limit = self.matmul_limit
        if limit is None or interval.max_abs <= limit:
            return interval
        if interval.max_abs <= FP16_MAX:
            will = interval.lo > limit or interval.hi < -limit
            self._cliffs.append(
                ("matmul_saturation", "will" if will else "may", interval.max_abs, limit)
            )
        lo = -INF if interval.lo < -limit else interval.lo
        hi = INF if interval.hi > limit else interval.hi
        return Interval(lo, hi, interval.nan, interval.tiny)  # saturated rows: no norms

    def cliffs(self) -> list:
        """``(kind, certainty, bound, limit)`` of the target cliffs the node crossed."""
        return list(self._cliffs)


RangeRule = Callable[[object, Sequence[Interval], RangeEnv], Interval]


def weight_value(node) -> np.ndarray | None:
    """The fp16 value of ``node`` as float64 when it is a weight, else ``None``."""
    if getattr(node, "op", None) == "weight":
        return np.asarray(node.value, dtype=np.float64)
    return None


# ---- narrow sums ---------------------------------------------------------------------

#: fp16's unit roundoff: ``|fp16(y) - y| <= U16 * |y|`` outside the subnormal range.
U16 = 2.0**-11
#: The largest fp16 rounding error in the subnormal range (half its spacing 2**-24).
ETA16 = 2.0**-25
#: Every non-negative finite fp16 value, ascending (rules that enumerate an fp16 step).
NONNEGATIVE_FP16 = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)


def copies_sum(values, n: int, route: int | None = None) -> np.ndarray:
    """The narrow fp16 sum of ``n`` copies of each of ``values`` (float64 out).

    It runs the accumulator itself, so with a chip's reduction ``route`` it takes that
    route, as the real sum over ``n`` terms does. A narrow sum is non-decreasing in
    every term, so for terms in ``[lo, hi]`` the sum lies in
    ``copies_sum([lo, hi], n)``.

    Example:
        >>> copies_sum([1.0, 0.5], 4096).tolist()
        [2048.0, 1024.0]
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1, 1)
    with np.errstate(all="ignore"):
        probe = np.broadcast_to(round_fp16(v), (v.shape[0], max(int(n), 0)))
        return np.asarray(narrow_sum(probe, 1, route=route), dtype=np.float64)


def sum_nan(nan: bool, lo: float, hi: float) -> bool:
    """Whether a sum whose results lie in ``[lo, hi]`` can be NaN: when a term can be
    NaN, or when a +inf and a -inf can meet. A partial sum reaches +inf only if the sum
    of the high ends does (the sum is monotone, and inf stays inf), and -inf only if the
    sum of the low ends does; so the results spanning both infinities is the condition
    (the sources' ends alone miss a partial that overflows to +inf before a -inf term)."""
    return bool(nan or (lo == -INF and hi == INF))


def softmax_sum_bounds(t: int) -> tuple[float, float]:
    """Bounds of ``sum_t p_t`` for softmax weights ``p_t = fp16(e_t / S)`` over ``t``
    terms, ``S`` the narrow sum of the ``e_t``: the 1-norm of a softmax's rows.

    Every add of the narrow sum (in order, or chunked by a reduction route) rounds once
    with relative error at most u = 2**-11 (a sum of fp16 values in the subnormal range
    is exact), and each e_t goes through at most ``t - 1`` adds, so ``S`` lies within
    ``(1 -+ u)**(t-1)`` of the exact sum E. The division rounds once more, by at most
    ``u * r + 2**-25``. Hence ``sum p_t <= (1 + u) E / S + t 2**-25 <= (1 + u) / (1 -
    u)**(t-1) + t 2**-25``, and at most t (each p_t <= 1); below, likewise, unless S may
    overflow (then p = 0).

    Example:
        >>> lo, hi = softmax_sum_bounds(32)
        >>> 0.98 < lo < 1 < hi < 1.02
        True
    """
    hi = min(float(t), (1 + U16) / (1 - U16) ** (t - 1) + t * ETA16)
    if t * (1 + U16) ** (t - 1) >= FP16_MAX:
        return 0.0, hi
    return max(0.0, (1 - U16) / (1 + U16) ** (t - 1) - t * ETA16), hi


# ---- the general mechanisms -----------------------------------------------------------


def _kernel(node):
    return get_op(node.op).emulate


def hull_of_values(values, nan: bool = False) -> Interval:
    """The interval of kernel results (arrays or a list of them); a NaN among them sets
    ``nan``; all NaN gives ``[0, 0]`` with NaN (no bound to give)."""
    results = values if isinstance(values, (list, tuple)) else [values]
    v = np.concatenate([np.asarray(r, dtype=np.float64).ravel() for r in results])
    nan = nan or bool(np.isnan(v).any())
    v = v[~np.isnan(v)]
    if v.size == 0:
        return Interval(0.0, 0.0, nan=True)
    return Interval(float(v.min()) + 0.0, float(v.max()) + 0.0, nan=nan)  # no -0.0 ends


def probe_points(s: Interval) -> list[float]:
    """Where a rule evaluates a kernel on ``s``: its ends, both zeros when 0 is inside
    (not extremes, but ``0 * inf`` makes NaN and ``1 / -0.0`` is -inf there), and
    +-65504 when an end is infinite (a kernel may give NaN at inf but not next to it)."""
    points = [s.lo, s.hi]
    if s.lo <= 0.0 <= s.hi:
        points += [0.0, -0.0]
    points += [v for v in (-FP16_MAX, FP16_MAX) if s.lo < v < s.hi]
    return points


def corners(node, srcs: Sequence[Interval], env: RangeEnv) -> Interval:
    """Rule of ops monotone in each input separately: the op's kernel at every corner of
    the sources' box (each source a scalar broadcast to its rank)."""
    ends = [np.array(probe_points(s)) for s in srcs]
    grids = np.meshgrid(*ends, indexing="ij")
    args = [round_fp16(g.ravel()) for g in grids]
    out = _kernel(node)(args, dict(node.attrs), env.arith)
    return hull_of_values([out], any(s.nan for s in srcs))


def monotone(probe_shapes=None, sums: bool = True) -> RangeRule:
    """Rule of ops non-decreasing in every input element: the kernel on a probe filled
    with every source's low end bounds the output below, on the high ends above.

    ``probe_shapes(node) -> list of shapes`` gives smaller probes with the same extreme
    outputs (a reduction over the reduced axes only); default: the sources' own shapes.
    ``sums``: the op adds values, so +inf and -inf together can make NaN
    (:func:`sum_nan`).
    """

    def rule(node, srcs, env):
        shapes = probe_shapes(node) if probe_shapes else [s.shape for s in node.srcs]
        kernel = _kernel(node)
        results = []
        for end in ("lo", "hi"):
            args = [np.full(shape, getattr(s, end), np.float16) for shape, s in zip(shapes, srcs)]
            with np.errstate(all="ignore"):
                results.append(kernel(args, dict(node.attrs), env.arith))
        out = hull_of_values(results, any(s.nan for s in srcs))
        return Interval(out.lo, out.hi, sum_nan(out.nan, out.lo, out.hi) if sums else out.nan)

    return rule


def critical(points: Callable[[object, float, float], Sequence[float]]) -> RangeRule:
    """Rule of unary ops monotone between critical points: the kernel at both ends and at
    ``points(node, lo, hi)`` (the critical points inside ``[lo, hi]``)."""

    def rule(node, srcs, env):
        (s,) = srcs
        xs = probe_points(s) + [p for p in points(node, s.lo, s.hi) if s.lo < p < s.hi]
        out = _kernel(node)([np.array(xs, dtype=np.float64)], dict(node.attrs), env.arith)
        return hull_of_values([out], s.nan)

    return rule


def same(node, srcs, env) -> Interval:
    """Rule of movement ops: every output value is one of the (first) input's values
    (rows are rearranged, so their norms are not kept)."""
    return srcs[0].elements()


def transposed_rows(node, srcs, env) -> Interval:
    """Rule of ``transpose``: leaving the last two axes in place keeps every bound,
    swapping them turns row norms into column norms and back, leaving only the last axis
    last keeps the row norms; anything else keeps only the element bounds."""
    s, n = srcs[0], len(node.srcs[0].shape)
    given = node.attrs["perm"]
    perm = tuple(range(n))[::-1] if given is None else tuple(p % n for p in given)
    if perm[-1] == n - 1 and (n < 2 or perm[-2] == n - 2):
        return s
    if n >= 2 and perm[-1] == n - 2 and perm[-2] == n - 1:
        return Interval(s.lo, s.hi, s.nan, s.tiny, l2=s.col_l2, col_l2=s.l2)
    if perm[-1] == n - 1:
        return Interval(s.lo, s.hi, s.nan, s.tiny, l1=s.l1, l2=s.l2)
    return s.elements()


def rows_kept(node, srcs, env) -> Interval:
    """Rule of views that keep the input's last-axis vectors whole or cut them into
    consecutive pieces (a reshape whose last dimension divides the input's, a squeeze
    that leaves the last axis last): the element bounds and the row norms hold (a piece
    of a vector is no longer than the vector); a reshape joining ``m`` whole rows into
    one scales them by ``m`` (1-norm) and ``sqrt(m)``; anything else keeps only the
    element bounds."""
    s, x, shape = srcs[0], node.srcs[0].shape, node.shape
    if x and shape and x[-1] % shape[-1] == 0:
        return Interval(s.lo, s.hi, s.nan, s.tiny, l1=s.l1, l2=s.l2)
    if x and shape and shape[-1] % x[-1] == 0:  # each new row joins m whole old rows
        m = shape[-1] // x[-1]
        return Interval(s.lo, s.hi, s.nan, s.tiny, l1=m * s.l1, l2=math.sqrt(m) * s.l2)
    return s.elements()


def hull_of_sources(node, srcs, env) -> Interval:
    """Rule of ops whose outputs are values of any of their inputs (concat)."""
    return srcs[0].hull(*srcs[1:])


def fixed(lo: float, hi: float, nan: bool = False) -> RangeRule:
    """Rule of ops whose outputs lie in ``[lo, hi]`` whatever their inputs (comparisons,
    index outputs); NaN propagates only when ``nan``."""

    def rule(node, srcs, env):
        return Interval(lo, hi, nan and any(s.nan for s in srcs))

    return rule


def overflows(interval: Interval) -> bool:
    """Whether the interval reaches past the fp16 range (inf included)."""
    return interval.max_abs > FP16_MAX
