"""Planning and the 1-D core of ``af.fft``: dense or staged, chosen by the cost model.

:func:`plan` builds every candidate graph of one transform (the dense DFT-as-matmul and
the most balanced two- and three-stage Cooley–Tukey) with shape-only weights, prices
each with :func:`aneforge.estimate` and records the choice with every estimate in an
:class:`FFTPlan`. :func:`transform` is the one builder every public transform folds to:
a ``[batch, length]`` pair in, the ``c2c``, ``r2c`` or ``c2r`` result out.

Example:
    >>> from aneforge.numerics.fft_plan import plan
    >>> p = plan(64)
    >>> p.method, [label for label, _ in p.estimates]
    ('dense', ['dense', 'staged 8x8', 'staged 4x4x4'])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..cost.estimate import estimate
from ..errors import OptionError, ShapeError
from ..graph import api
from ..graph.tensor import input, weight
from .fft_kernels import FORMS, Table, dense_dft, factorizations, staged_dft

NORMS = ("backward", "ortho", "forward")
KINDS = ("c2c", "r2c", "c2r")
METHODS = ("auto", "dense", "staged")


# ---- planning ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FFTPlan:
    """How one length-``n`` transform is built, and why.

    Attributes:
        n: transform length. kind: ``'c2c'``, ``'r2c'`` (rfft) or ``'c2r'`` (irfft).
        batch, length: the folded batch and the input length the plan was priced for.
        method: ``'dense'`` or ``'staged'``. factors: the stage lengths (``(n,)`` for
        dense). estimates: ``(label, microseconds)`` of every candidate priced.
        model: the cost model (``'default'`` or the target's name).
    """

    n: int
    kind: str
    batch: int
    length: int
    form: str
    model: str
    method: str
    factors: tuple[int, ...]
    estimates: tuple[tuple[str, float], ...]

    @property
    def label(self) -> str:
        """``'dense'`` or ``'staged 64x64'``."""
        return _label(self.factors)

    def describe(self) -> str:
        """One line: the choice and every candidate's estimate."""
        cands = ", ".join(f"{lab} {us:.1f} us" for lab, us in self.estimates)
        return (
            f"{self.kind} n={self.n} batch={self.batch}: {self.label} (model {self.model}; {cands})"
        )


def _label(factors: tuple[int, ...]) -> str:
    return "dense" if len(factors) == 1 else "staged " + "x".join(map(str, factors))


def plan(
    n: int,
    kind: str = "c2c",
    batch: int = 1,
    length: int | None = None,
    norm: str = "backward",
    form: str = "stacked",
    target=None,
) -> FFTPlan:
    """Pick dense or staged for a length-``n`` transform by the cost model.

    Builds the dense graph and the most balanced two- and three-stage graphs for a
    ``[batch, length]`` input (``length`` defaults to ``n``, or ``n//2 + 1`` for
    ``'c2r'``) with shape-only weights, prices each with :func:`aneforge.estimate`
    (the default model, or ``target``'s analytic model) and keeps the cheapest; ties go
    to dense (fewer roundings). The estimates of every candidate are recorded.

    Example:
        >>> from aneforge.numerics.fft import plan
        >>> p = plan(4096, batch=8)
        >>> p.method, p.factors
        ('staged', (64, 64))
    """
    check(norm=norm, kind=kind, form=form)
    if length is None:
        length = n // 2 + 1 if kind == "c2r" else n
    target_key = None if target is None else str(getattr(target, "name", target))
    return _plan(int(n), kind, int(batch), int(length), norm, form, target_key)


@lru_cache(maxsize=256)
def _plan(n, kind, batch, length, norm, form, target):

    if n < 1 or batch < 1 or length < 1:
        raise ShapeError(f"fft plan: n, batch and length must be >= 1, got {n}, {batch}, {length}")
    priced = []
    for factors in [(n,), *factorizations(n)]:
        re = input((batch, length))
        im = None if kind == "r2c" else input((batch, length))
        outs = transform(
            (re, im),
            n,
            kind,
            sign_of(kind, False),
            power_of(norm, kind, False),
            factors,
            form,
            placeholder=True,
        )
        graph = [t for t in outs if t is not None]
        us = estimate(graph) if target is None else estimate(graph, target=target)
        priced.append((factors, float(us)))
    best = min(priced, key=lambda p: p[1])
    return FFTPlan(
        n,
        kind,
        batch,
        length,
        form,
        target or "default",
        "dense" if len(best[0]) == 1 else "staged",
        best[0],
        tuple((_label(f), us) for f, us in priced),
    )


def resolve(method, n, kind, batch, length, norm, form) -> tuple[int, ...]:
    """The stage lengths for ``method`` (``'auto'``, ``'dense'``, ``'staged'``, an
    :class:`FFTPlan` or a tuple of factors)."""
    if isinstance(method, FFTPlan):
        if method.n != n or method.kind != kind:
            raise OptionError(
                f"fft: the plan is for a {method.kind} transform of n={method.n}, "
                f"not {kind} n={n}; make one with plan({n}, kind={kind!r})"
            )
        return method.factors
    if isinstance(method, (tuple, list)):
        factors = tuple(int(f) for f in method)
        if math.prod(factors) != n or len(factors) > 3 or (len(factors) > 1 and min(factors) < 2):
            raise OptionError(
                f"fft: factors {factors} must be 1 to 3 lengths >= 2 whose product is {n}"
            )
        return factors
    if method not in METHODS:
        raise OptionError(
            f"fft: method must be one of {METHODS}, a plan or factors, got {method!r}"
        )
    if method == "dense" or n == 1:
        return (n,)
    p = plan(n, kind, batch, length, norm, form)
    if method == "auto":
        return p.factors
    staged = [lab for lab, _ in p.estimates if lab != "dense"]
    if not staged:
        raise OptionError(f"fft: n={n} has no factorization into stages; use method='dense'")
    best = min((e for e in p.estimates if e[0] != "dense"), key=lambda e: e[1])[0]
    return tuple(int(f) for f in best.split()[1].split("x"))


# ---- the 1-D core --------------------------------------------------------------------------
def check(norm="backward", kind="c2c", form="stacked"):
    if norm not in NORMS:
        raise OptionError(f"fft: norm must be one of {NORMS}, got {norm!r}")
    if kind not in KINDS:
        raise OptionError(f"fft: kind must be one of {KINDS}, got {kind!r}")
    if form not in FORMS:
        raise OptionError(f"fft: form must be one of {FORMS}, got {form!r}")


def sign_of(kind: str, inverse: bool) -> int:
    return 1 if inverse or kind == "c2r" else -1


def power_of(norm: str, kind: str, inverse: bool) -> float:
    """The exponent p of the scale n^-p (split as N_i^-p over the stages)."""
    backward = inverse or kind == "c2r"
    return {
        "backward": 1.0 if backward else 0.0,
        "ortho": 0.5,
        "forward": 0.0 if backward else 1.0,
    }[norm]


def transform(pair, n, kind, sign, power, factors, form, placeholder=False):
    """[B, L] pair -> the transform's [B, out] pair (``c2r``: real, im None)."""
    re, im = pair
    length = re.shape[-1]
    if kind == "c2r":
        if len(factors) == 1:
            table = Table(length, n, n, sign, n**-power, hermitian=True)  # rows, cols, n
            return dense_dft(pair, table, form, True, placeholder)
        # Real part of the inverse of the zero-padded half spectrum, weighted
        # c' = (1/2, 1, ..., 1, 1/2) (exact halvings); the 2 rides the last stage.
        half = np.ones(length)
        half[0] = 0.5
        if n % 2 == 0 and length > n // 2:
            half[n // 2] = 0.5
        w = weight(half)
        pair = (re * w, None if im is None else im * w)
        return staged_dft(pair, n, factors, sign, power, 2.0, form, True, placeholder)
    if len(factors) == 1:
        cols = n // 2 + 1 if kind == "r2c" else n
        return dense_dft(pair, Table(length, cols, n, sign, n**-power), form, False, placeholder)
    out = staged_dft(pair, n, factors, sign, power, 1.0, form, False, placeholder)
    if kind == "r2c":  # the first n//2 + 1 bins: a slice from column 0 (no crop-DMA)
        batch = out[0].shape[0]
        out = tuple(api.slice(t, (0, 0), (batch, n // 2 + 1)) for t in out)
    return out
