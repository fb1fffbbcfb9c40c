"""Random fused graphs for the lowering and placement tests."""

from __future__ import annotations

import numpy as np

import aneforge as af

UNARY = ("exp", "tanh", "relu", "neg", "square", "sigmoid", "abs")


def random_region(seed: int):
    """A random fused graph over one input: elementwise ops, reductions, contractions,
    movements, softmax, layer norms and an opaque cumsum; returns its outputs."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 4))))
    x = af.input(shape, name="x")
    live = [x]
    for _ in range(int(rng.integers(2, 8))):
        t = live[int(rng.integers(len(live)))]
        roll = rng.random()
        if roll < 0.25:
            t = getattr(af, UNARY[int(rng.integers(len(UNARY)))])(t)
        elif roll < 0.45:
            other = live[int(rng.integers(len(live)))]
            if other.shape != t.shape:
                other = af.weight(rng.standard_normal(t.shape[-1:]) * 0.5)
            t = [af.add, af.mul, af.sub, af.maximum][int(rng.integers(4))](t, other)
        elif roll < 0.6 and t.ndim >= 1:
            axis = int(rng.integers(t.ndim))
            fn = [af.sum, af.mean, af.amax][int(rng.integers(3))]
            t = fn(t, axis=axis, keepdims=bool(rng.integers(2)))
        elif roll < 0.72 and t.ndim >= 1:
            w = rng.standard_normal((t.shape[-1], int(rng.integers(1, 5)))) * 0.5
            t = af.linear(t, w.T, rng.standard_normal(w.shape[1])) if rng.random() < 0.5 else t @ w
        elif roll < 0.82 and t.ndim >= 2:
            t = t.transpose()
        elif roll < 0.9 and t.ndim >= 1 and t.shape[-1] >= 2:
            t = t[..., 1:]
        elif roll < 0.92 and t.ndim >= 1 and t.shape[-1] % 2 == 0:  # a split: affine
            t = t.reshape(*t.shape[:-1], 2, t.shape[-1] // 2)
        elif roll < 0.93 and t.ndim >= 2:  # a merge: materialized, scattered
            t = t.reshape(*t.shape[:-2], t.shape[-2] * t.shape[-1])
        elif roll < 0.95:
            t = af.expand_dims(t, axis=0)
        elif t.ndim >= 1 and rng.random() < 0.7:
            t = af.softmax(t, axis=int(rng.integers(t.ndim)))
        elif t.ndim >= 1 and rng.random() < 0.7:
            t = af.layer_norm(
                t, np.abs(rng.standard_normal(t.shape[-1:])), rng.standard_normal(t.shape[-1:])
            )
        elif t.ndim >= 1:
            t = af.cumsum(t)
        live.append(t)
    return [live[-1], live[len(live) // 2]] if len(live) > 2 else [live[-1]]
