"""The loop-nest analyses: hand-built codes with hand-checkable counts (golden files), and
properties over random codes: the floor below the upper bound on every leg, the floor
monotone under refinement, the roofline monotone, and every exact count equal to what
the reference interpreter executes and touches."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from random_codes import feeds, random_code

from aneforge.kernel.analyze import Floor, analyze, completion_floor, roofline_seconds
from aneforge.kernel.interpret import execute
from aneforge.kernel.ir import (
    Buffer,
    Code,
    Const,
    For,
    Get,
    If,
    LocalScope,
    LoopKind,
    Op,
    Set,
    SetLocal,
    Where,
    Zero,
    it,
)
from aneforge.kernel.printer import to_text

i, j, k, m, n = (it(name) for name in "ijkmn")


def _inp(name, *shape):
    return Buffer(name, shape, kind="input")


def _out(name, *shape, dtype="fp16"):
    return Buffer(name, shape, dtype, kind="output")


def _matmul(M=4, N=3, K=8):
    prod = Op("mul", (Get("a", (m, k)), Get("b", (k, n))))
    acc = Set("c", (m, n), prod, accumulate="add")
    body = (Zero("c"), For("m", 0, M - 1, (For("n", 0, N - 1, (For("k", 0, K - 1, (acc,)),)),)))
    return Code("matmul", (_inp("a", M, K), _inp("b", K, N), _out("c", M, N)), body)


def _loop(index, trips, *body, kind=LoopKind.SERIAL):
    return For(index, 0, trips - 1, tuple(body), kind)


CASES = {
    "matmul": _matmul(),
    "strided": Code(
        "strided",
        (_inp("x", 16), _out("y", 8)),
        (_loop("i", 8, Set("y", (i,), Get("x", (i * 2,)))),),
    ),
    "overlapping": Code(  # a window sum: y[i] = x[i] + x[i+1] + x[i+2]
        "window",
        (_inp("x", 8), _out("y", 6)),
        (Zero("y"), _loop("i", 6, _loop("k", 3, Set("y", (i,), Get("x", (i + k,)), "add")))),
    ),
    "parity": Code(  # even and odd cells: provably disjoint (gcd test)
        "parity",
        (_inp("x", 16), _out("y", 8)),
        (_loop("i", 8, Set("y", (i,), Op("sub", (Get("x", (i * 2,)), Get("x", (i * 2 + 1,)))))),),
    ),
    "guarded": Code(
        "relu_twice",
        (_inp("x", 8), _out("y", 8)),
        (
            _loop(
                "i",
                8,
                If(
                    Op("gt", (Get("x", (i,)), Const(0.0))),
                    (Set("y", (i,), Op("mul", (Get("x", (i,)), Const(2.0)))),),
                ),
            ),
        ),
    ),
    "accumulating": Code(  # a row sum into a float32 buffer, zeroed first
        "rowsum",
        (_inp("x", 4, 8), _out("y", 4, dtype="fp32")),
        (Zero("y"), _loop("i", 4, _loop("j", 8, Set("y", (i,), Get("x", (i, j)), "add")))),
    ),
    "vectorized": Code(
        "axpy",
        (_inp("x", 64), _inp("y", 64), _out("z", 64)),
        (
            _loop(
                "i",
                64,
                Set("z", (i,), Op("fma", (Get("x", (i,)), Const(0.5), Get("y", (i,))))),
                kind=LoopKind.VECTORIZED,
            ),
        ),
    ),
    "where_hoisted": Code(  # y = x > 0 ? exp(x) (hoisted scope) : -x
        "where_hoisted",
        (_inp("x", 8), _out("y", 8)),
        (
            _loop(
                "i",
                8,
                Set(
                    "y",
                    (i,),
                    Where(
                        Op("gt", (Get("x", (i,)), Const(0.0))),
                        LocalScope("e", (SetLocal("e", Op("exp", (Get("x", (i,)),))),)),
                        Op("neg", (Get("x", (i,)),)),
                    ),
                ),
            ),
        ),
    ),
}


def _report(code: Code) -> str:
    s, f = analyze(code), completion_floor(code)
    lines = [to_text(code), "", "analyze:"]
    lines.append(
        f"  flops {s.flops} (inline {s.flops_inline}, hoisted {s.flops_hoisted})"
        f"{' approx' if s.flops_approx else ''}"
    )
    for name, fp in s.footprints.items():
        lines.append(
            f"  {name}: read {fp.read_bytes} B, write {fp.write_bytes} B, rmw {fp.rmw_bytes} B"
            f"{' approx' if fp.approx else ''}"
        )
    lines.append(f"  bytes {s.bytes}, intensity {s.intensity:.4g}, exact {s.exact}")
    lines.append(f"floor: flops {f.flops}, bytes {f.bytes}, exact {f.exact}")
    return "\n".join(lines)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, golden):
    golden(f"kernel/{case}.txt", _report(CASES[case]))


def test_matmul_counts_2mnk_flops_and_mk_kn_2mn_halves():
    M, N, K = 5, 3, 7
    s = analyze(_matmul(M, N, K))
    assert s.flops == 2 * M * N * K and s.exact
    assert s.bytes == (M * K + K * N + 2 * M * N) * 2
    assert s.footprints["c"].rmw_bytes == M * N * 2  # charged once in each direction
    f = completion_floor(_matmul(M, N, K))
    assert (f.flops, f.bytes, f.exact) == (s.flops, s.bytes, True)


def test_hand_checked_counts():
    assert analyze(CASES["strided"]).footprints["x"] == analyze(CASES["strided"]).footprints["x"]
    strided = analyze(CASES["strided"]).footprints["x"]
    assert (strided.read_bytes, strided.approx) == (16, False)  # 8 even cells of 16
    window = analyze(CASES["overlapping"])
    assert window.footprints["x"].read_bytes == 16 and not window.footprints["x"].approx
    assert window.flops == 18
    assert analyze(CASES["parity"]).footprints["x"].read_bytes == 32
    assert completion_floor(CASES["parity"]).read_bytes == 32  # disjoint: the sum
    guarded, floor = analyze(CASES["guarded"]), completion_floor(CASES["guarded"])
    assert (guarded.flops, guarded.flops_approx) == (16, True)  # the body as if taken
    assert (floor.flops, floor.write_bytes, floor.exact) == (8, 0, False)  # never taken
    assert analyze(CASES["vectorized"]).flops == 128  # FMA counts 2
    where = analyze(CASES["where_hoisted"])
    assert (where.flops_hoisted, where.flops_inline) == (8, 16)  # exp always; gt + neg
    assert completion_floor(CASES["where_hoisted"]).flops == 16  # gt + exp, cheaper arm 0
    assert analyze(CASES["accumulating"]).footprints["y"].write_bytes == 16  # fp32 cells


def _producer_and_reader(reader_hi, reads_x=False):
    """t[i] = exp(x[i]) over 8 cells; y[i] = t[i] (+ x[i]) for i <= reader_hi."""
    t = Set("t", (i,), Op("exp", (Get("x", (i,)),)))
    value = Get("t", (i,))
    if reads_x:
        value = Op("add", (value, Get("x", (i,))))
    y = Set("y", (i,), value)
    bufs = (_inp("x", 8), Buffer("t", (8,)), Buffer("y", (8,), kind="output"))
    return Code("r", bufs, (For("i", 0, 7, (t,)), For("i", 0, reader_hi, (y,))))


def test_an_open_producer_read_whole_charges_its_reads_and_work():
    # every completion computes all of t from all of x: x in, y out, t's exps
    f = completion_floor(_producer_and_reader(7), {"t"})
    assert (f.flops, f.read_bytes, f.write_bytes, f.exact) == (8, 16, 16, False)
    inlined = analyze(_producer_and_reader(7, reads_x=True))
    assert completion_floor(_producer_and_reader(7, reads_x=True), {"t"}).bytes <= inlined.bytes


def test_an_open_producer_read_in_part_charges_nothing():
    # y reads t[0:4]: inlined, only x[0:4] is read and 4 exps run
    f = completion_floor(_producer_and_reader(3), {"t"})
    assert (f.flops, f.read_bytes, f.write_bytes) == (0, 0, 8)


def test_a_chain_of_open_producers_is_needed_link_by_link():
    t1 = Set("t1", (i,), Op("exp", (Get("x", (i,)),)))
    t2 = Set("t2", (i,), Op("neg", (Get("t1", (i,)),)))
    y = Set("y", (i,), Get("t2", (i,)))
    bufs = (_inp("x", 8), Buffer("t1", (8,)), Buffer("t2", (8,)), Buffer("y", (8,), kind="output"))
    code = Code("r", bufs, tuple(For("i", 0, 7, (st,)) for st in (t1, t2, y)))
    f = completion_floor(code, {"t1", "t2"})
    assert (f.flops, f.read_bytes, f.write_bytes) == (16, 16, 16)


def test_an_open_node_written_twice_charges_nothing():
    # the second loop overwrites t: the first loop's reads are not every completion's
    t = Set("t", (i,), Op("exp", (Get("x", (i,)),)))
    y = Set("y", (i,), Get("t", (i,)))
    bufs = (_inp("x", 8), Buffer("t", (8,)), Buffer("y", (8,), kind="output"))
    loops = (For("i", 0, 7, (t,)), For("i", 0, 7, (t,)), For("i", 0, 7, (y,)))
    assert completion_floor(Code("r", bufs, loops), {"t"}).read_bytes == 0


SEEDS = range(300)


@pytest.mark.parametrize("seed", SEEDS)
def test_floor_below_analyze_and_exact_counts_match_the_interpreter(seed):
    code = random_code(seed)
    s = analyze(code)
    temps = [b.name for b in code.buffers if b.kind == "temp"]
    for size in range(len(temps) + 1):
        for open_nodes in itertools.combinations(temps, size):
            f = completion_floor(code, open_nodes)
            assert f.flops <= s.flops and f.read_bytes <= s.read_bytes, (seed, open_nodes)
            assert f.write_bytes <= s.write_bytes, (seed, open_nodes)
    run = execute(code, feeds(code, seed), trace=True)
    if not s.flops_approx:
        assert run.flops == s.flops, seed
    else:
        assert run.flops <= s.flops, seed
    for name, fp in s.footprints.items():
        item = code.buffer(name).itemsize
        read, write = len(run.reads[name]) * item, len(run.writes[name]) * item
        if fp.approx:
            assert read <= fp.read_bytes and write <= fp.write_bytes, (seed, name)
        else:
            assert (read, write) == (fp.read_bytes, fp.write_bytes), (seed, name)
    floor = completion_floor(code)
    assert floor.flops <= run.flops, seed
    if floor.exact:
        assert (floor.flops, floor.bytes) == (s.flops, s.bytes), seed


@pytest.mark.parametrize("seed", SEEDS)
def test_the_floor_only_rises_as_decisions_are_committed(seed):
    code = random_code(seed)
    temps = [b.name for b in code.buffers if b.kind == "temp"]
    for size in range(1, len(temps) + 1):
        for open_nodes in itertools.combinations(temps, size):
            wide = completion_floor(code, open_nodes)
            for committed in open_nodes:
                narrow = completion_floor(code, set(open_nodes) - {committed})
                assert narrow.flops >= wide.flops and narrow.bytes >= wide.bytes, seed


def test_roofline_is_monotone_and_none_without_peaks():
    rng = np.random.default_rng(3)
    for _ in range(200):
        f = Floor(int(rng.integers(0, 10**9)), int(rng.integers(0, 10**7)), 0, True)
        p, b = float(rng.uniform(1e9, 1e12)), float(rng.uniform(1e9, 1e11))
        t = roofline_seconds(f, p, b)
        assert t == max(f.flops / p, f.bytes / b)
        assert roofline_seconds(f, p * 2, b) <= t and roofline_seconds(f, p, b * 2) <= t
    assert roofline_seconds(Floor(1, 1, 1, True)) is None
