"""Loop-invariant code motion in generated kernels (aneforge.kernel.codegen): what reads
only outer loops' iterators is computed once per outer iteration, what sits under a
condition or reads a buffer the kernel writes stays where it was, and the bits are the
interpreter's either way."""

from __future__ import annotations

import numpy as np
from test_compiled import _run_code, _same, _with_specials

from aneforge.kernel.codegen import generate, table
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


def _innermost_body(source: str) -> list[str]:
    """The lines of the last loop's body (the deepest ``for`` and what it indents)."""
    lines = source.splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.lstrip().startswith("for "))
    indent = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for ln in lines[start + 1 :]:
        if len(ln) - len(ln.lstrip()) <= indent:
            break
        body.append(ln)
    return body


def _check(code, seed=0):
    kernel = generate(code, code.body)
    rng = np.random.default_rng(seed)
    feeds = {b.name: _with_specials(b.shape, rng) for b in code.inputs}
    want = execute(code, feeds).outputs
    got = _run_code(code, kernel, feeds)
    for name in want:
        assert _same(want[name], got[name]), name
    return kernel


def test_per_channel_reads_and_steps_move_to_the_channel_loop():
    c, s = it("c"), it("s")
    norm = Op(
        "mul",
        (
            Op("sub", (Get("x", (c, s)), Get("mean", (c,)))),
            Op("rsqrt", (Op("add", (Get("var", (c,)), Const(1e-3))),)),
        ),
    )
    body = (For("c", 0, 7, (For("s", 0, 99, (Set("y", (c, s), Op("relu", (norm,))),)),)),)
    buffers = (
        Buffer("x", (8, 100), kind="input"),
        Buffer("mean", (8,), kind="input"),
        Buffer("var", (8,), kind="input"),
        Buffer("y", (8, 100), kind="output"),
    )
    kernel = _check(Code("bn", buffers, body))
    inner = "\n".join(_innermost_body(kernel.source))
    names = dict(zip(kernel.buffers, (f"_b{i}" for i in range(len(kernel.buffers)))))
    assert names["x"] in inner and names["y"] in inner
    assert names["mean"] not in inner and names["var"] not in inner
    assert kernel.tables == (("op", "rsqrt", ()),)  # relu is a max, not a table
    assert "_t0" not in inner  # rsqrt(var + eps): once per channel


def test_a_read_under_a_condition_stays_under_it():
    i, j = it("i"), it("j")
    # x[i - 1] exists only where i >= 1: the guard must run before the read, every time
    guarded = Where(InRange((i - 1,), (6,)), Get("x", (i - 1,)), Const(0.0))
    store = Set("y", (i, j), Op("add", (guarded, Get("z", (i, j)))))
    buffers = (
        Buffer("x", (6,), kind="input"),
        Buffer("z", (6, 50), kind="input"),
        Buffer("y", (6, 50), kind="output"),
    )
    kernel = _check(Code("shifted", buffers, (For("i", 0, 5, (For("j", 0, 49, (store,)),)),)))
    x = dict(zip(kernel.buffers, (f"_b{k}" for k in range(len(kernel.buffers)))))["x"]
    assert x in "\n".join(_innermost_body(kernel.source))


def test_a_buffer_the_kernel_writes_is_read_where_it_was():
    i, j = it("i"), it("j")
    first = For("i", 0, 9, (Set("t", (i,), Op("mul", (Get("x", (i,)), Const(2.0)))),))
    # t[0] reads no iterator, but it holds a value only after the first loop
    second = For("j", 0, 9, (Set("y", (j,), Op("add", (Get("t", (i * 0,)), Get("x", (j,))))),))
    buffers = (
        Buffer("x", (10,), kind="input"),
        Buffer("t", (10,), kind="temp"),
        Buffer("y", (10,), kind="output"),
    )
    _check(Code("ordered", buffers, (first, second)))


def test_relu_rendered_as_a_max_gives_its_tables_bits_on_every_fp16_value():
    body = (For("i", 0, 65535, (Set("y", (it("i"),), Op("relu", (Get("x", (it("i"),)),))),)),)
    buffers = (Buffer("x", (65536,), kind="input"), Buffer("y", (65536,), kind="output"))
    code = Code("relu", buffers, body)
    kernel = generate(code, code.body)
    assert kernel.tables == () and "J.vmax" in kernel.source
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = _run_code(code, kernel, {"x": every})["y"]
    assert _same(got, table(("op", "relu", ())).astype(np.float16))
    assert _same(got, execute(code, {"x": every}).outputs["y"])
