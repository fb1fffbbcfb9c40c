"""Merged loop nests (aneforge.kernel.collapse): which nests merge, and generated kernels
of merged nests against the reference interpreter, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from test_compiled import _run_code, _same, _with_specials

from aneforge.kernel.codegen import generate
from aneforge.kernel.collapse import collapse
from aneforge.kernel.interpret import execute
from aneforge.kernel.ir import (
    Buffer,
    Code,
    Const,
    For,
    Get,
    InRange,
    Op,
    Set,
    Where,
    it,
)

OPS = ("add", "sub", "mul", "max", "min")


def _nest(shape, body):
    names = [f"a{d}" for d in range(len(shape))]
    for d in reversed(range(len(shape))):
        body = (For(names[d], 0, shape[d] - 1, body),)
    return body


def _random_elementwise(seed: int) -> Code:
    """A nest over a random shape storing an expression of full, broadcast (some axes
    fixed at 0, as a per-channel operand reads) and guarded reads."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    shape = tuple(int(d) for d in rng.integers(1, 9, rank))
    iters = [it(f"a{d}") for d in range(rank)]
    buffers, reads = [], []
    for n in range(int(rng.integers(1, 4))):
        keep = rng.random(rank) < 0.7  # the axes this operand varies along
        bshape = tuple(d if k else 1 for d, k in zip(shape, keep))
        index = tuple(a if k else iters[0] * 0 for a, k in zip(iters, keep))
        buffers.append(Buffer(f"x{n}", bshape, kind="input"))
        reads.append(Get(f"x{n}", index))
    value = reads[0]
    for read in reads[1:]:
        value = Op(str(rng.choice(OPS)), (value, read))
    if rng.random() < 0.5:
        value = Op("relu", (value,))
    if rng.random() < 0.3:  # a guard on the outermost iterator only
        value = Where(InRange((iters[0] - 1,), (shape[0],)), value, Const(0.5))
    buffers.append(Buffer("y", shape, kind="output"))
    return Code(f"ew{seed}", tuple(buffers), _nest(shape, (Set("y", tuple(iters), value),)))


@pytest.mark.parametrize("seed", range(20))
def test_merged_nests_give_the_interpreters_bits(seed):
    code = _random_elementwise(seed)
    kernel = generate(code, code.body)
    feeds = {b.name: _with_specials(b.shape, np.random.default_rng(seed)) for b in code.inputs}
    want = execute(code, feeds).outputs["y"]
    assert _same(want, _run_code(code, kernel, feeds)["y"])


def test_most_random_nests_merge_some_loops():
    merged = sum(bool(collapse(c, c.body)[1]) for c in map(_random_elementwise, range(20)))
    assert merged >= 6  # 8 of these 20 draws (the rest vary along non-adjacent axes)


def _two_loops(store, x_shape=(6, 5), y_shape=(6, 5)):
    buffers = (Buffer("x", x_shape, kind="input"), Buffer("y", y_shape, kind="output"))
    body = (For("i", 0, 5, (For("j", 0, 4, (store,)),)),)
    return Code("c", buffers, body), body


def test_a_full_elementwise_nest_merges_into_one_loop_over_views():
    i, j = it("i"), it("j")
    code, body = _two_loops(Set("y", (i, j), Op("exp", (Get("x", (i, j)),))))
    merged, views = collapse(code, body)
    assert len(merged) == 1 and merged[0].trips == 30 and not isinstance(merged[0].body[0], For)
    assert views == {"x#30": ("x", (30,)), "y#30": ("y", (30,))}


@pytest.mark.parametrize(
    ("why", "store", "x_shape"),
    [
        ("accumulates", Set("y", (it("i"), it("j")), Get("x", (it("i"), it("j"))), "add"), (6, 5)),
        ("transposed read", Set("y", (it("i"), it("j")), Get("x", (it("j"), it("i")))), (5, 6)),
        ("wider row", Set("y", (it("i"), it("j")), Get("x", (it("i"), it("j")))), (6, 7)),
        ("shifted read", Set("y", (it("i"), it("j")), Get("x", (it("i"), it("j") + 1))), (6, 6)),
        (
            "guard on j",
            Set(
                "y",
                (it("i"), it("j")),
                Where(InRange((it("j") - 1,), (5,)), Get("x", (it("i"), it("j"))), Const(0.0)),
            ),
            (6, 5),
        ),
    ],
)
def test_nests_whose_accesses_do_not_allow_it_stay_apart(why, store, x_shape):
    code, body = _two_loops(store, x_shape)
    merged, views = collapse(code, body)
    assert merged == body and views == {}, why
    kernel = generate(code, code.body)
    feeds = {"x": _with_specials(x_shape, np.random.default_rng(1))}
    want = execute(code, feeds).outputs["y"]
    assert _same(want, _run_code(code, kernel, feeds)["y"]), why
