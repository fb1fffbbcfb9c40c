"""Compiled regions: generated kernels give the reference interpreter's and the op-by-op
emulator's bits on random codes, random regions (default, materialized and mixed
placements, every chip family's numerics, signed zeros, NaN and inf in the data, and data
full of ties between -0.0 and +0.0), and the emulator's default path runs them, checked
and cached."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from random_codes import random_code
from random_regions import random_region

import aneforge as af
from aneforge.emulator.chips import chip_numerics
from aneforge.emulator.interpreter import execute_fp16, fp16_kernel
from aneforge.errors import FastPathWarning
from aneforge.graph.registry import all_ops, get_op
from aneforge.kernel import compiled, jitlib
from aneforge.kernel.codegen import Unsupported, generate, table
from aneforge.kernel.interpret import execute
from aneforge.kernel.ir import Buffer, Code, For, Get, Op, Opaque, Set, it
from aneforge.kernel.lower import region_nodes

#: One target per capability family with a MIL path (2..5), and the generic model.
CHIPS = (None, "h13", "h14", "h15", "h17s")
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, -65504, 6e-8, -6e-8], np.float16)


def _same(x, y) -> bool:
    """Equal bits, every NaN equal to every NaN."""
    x, y = np.asarray(x), np.asarray(y, dtype=np.asarray(x).dtype)
    width = np.uint16 if x.dtype == np.float16 else np.uint32
    nx, ny = np.isnan(x), np.isnan(y)
    return np.array_equal(nx, ny) and np.array_equal(x.view(width)[~nx], y.view(width)[~ny])


def _with_specials(shape, rng, scale=3.0) -> np.ndarray:
    v = (rng.standard_normal(shape) * scale).astype(np.float16)
    flat = v.reshape(-1)
    k = min(flat.size, 3)
    flat[rng.integers(0, flat.size, k)] = rng.choice(SPECIALS, k)
    return v


def _with_signed_zeros(shape, rng) -> np.ndarray:
    """Data where ties of -0.0 and +0.0 are everywhere (four values in ten are zeros)."""
    v = _with_specials(shape, rng)
    zeros = rng.random(shape) < 0.4
    v[zeros] = rng.choice(np.array([0.0, -0.0], np.float16), int(zeros.sum()))
    return v


def _run_code(code, kernel, feeds):
    """Run a generated kernel of a whole code on ``feeds``; its output buffers."""
    bufs = {}
    for b in code.buffers:
        if b.kind == "input":
            value = np.asarray(feeds[b.name]).astype(
                np.float16 if b.dtype == "fp16" else np.float32
            )
            bufs[b.name] = value.view(np.uint16) if b.dtype == "fp16" else value
        else:  # unwritten cells stay NaN, as the interpreter starts them
            bufs[b.name] = compiled._storage(b)
            bufs[b.name][...] = 0x7E00 if b.dtype == "fp16" else np.nan
    fn = compiled._compile(kernel)
    fn(*[bufs[n] for n in kernel.buffers], kernel.ints, kernel.consts, *map(table, kernel.tables))
    return {
        b.name: bufs[b.name].view(np.float16) if b.dtype == "fp16" else bufs[b.name]
        for b in code.outputs
    }


def test_generated_kernels_give_the_interpreters_bits_on_random_codes():
    compiled_codes = 0
    for seed in range(40):
        code = random_code(seed)
        rng = np.random.default_rng(seed)
        try:
            kernel = generate(code, code.body)
        except Unsupported as exc:  # only transcendental ops of float32 values
            assert "of a f value" in str(exc), exc
            continue
        for data in (_with_specials, _with_signed_zeros):
            feeds = {b.name: data(b.shape, rng) for b in code.inputs}
            want = execute(code, feeds).outputs
            got = _run_code(code, kernel, feeds)
            for name in want:
                assert _same(want[name], got[name]), (seed, name, data.__name__)
        compiled_codes += 1
    assert compiled_codes >= 36


def _env(prog, xs) -> dict:
    """``id(node)`` -> value of the program's inputs and weights."""
    env = dict(zip((id(t) for t in prog.inputs), xs))
    env.update({id(n): n.value for n in prog.nodes if n.op == "weight"})
    return env


def _node_kernel(chip):
    """The op-by-op emulator's per-node kernel (fast matmul, chip finish)."""
    return fp16_kernel(True, chip)


@pytest.mark.parametrize("data", [_with_specials, _with_signed_zeros])
@pytest.mark.parametrize("seed", range(16))
def test_random_regions_run_compiled_with_the_op_by_op_bits(seed, data):
    rng = np.random.default_rng(seed)
    prog = af.compile(random_region(seed), opt=0)
    xs = [data(t.shape, rng) for t in prog.inputs]
    chip = CHIPS[seed % len(CHIPS)]
    want = execute_fp16(prog, xs, target=chip, regions=False)
    kernel = _node_kernel(chip)
    numerics = chip_numerics(chip)
    values = {}
    execute_fp16(prog, xs, target=chip, observe=lambda i, n, v: values.__setitem__(id(n), v))
    for region in prog.fused_regions:
        middle = region_nodes(prog, region).intermediates
        host = compiled.host_nodes(region, numerics)
        placements = [compiled.default_placement(prog, region, host), ["materialize"] * len(middle)]
        placements.append(list(rng.choice(["materialize", "inline"], len(middle))))
        for placement in placements:
            plan = compiled.plan_region(prog, region, kernel, numerics, placement)
            got = compiled.run_plan(plan, values)
            for key, value in got.items():
                assert _same(value, values[key]), (seed, chip, placement)
    assert all(_same(a, b) for a, b in zip(want, execute_fp16(prog, xs, target=chip)))


def _scalar_form_ops() -> list[str]:
    """Every op whose record has a scalar form and no per-channel operands (batch_norm's
    form has a test of its own)."""
    return sorted(
        name
        for name, op in all_ops().items()
        if op.nest is not None and op.nest.scalar is not None and not op.nest.per_channel
    )


def test_every_scalar_form_is_tested():
    assert {"add", "sub", "mul", "div", "less", "relu"} <= set(_scalar_form_ops())


@pytest.mark.parametrize("name", _scalar_form_ops())
def test_the_records_scalar_forms_give_their_kernels_bits(name):
    op = get_op(name)
    if op.arity == 1:  # every fp16 value
        xs = [np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)]
    else:
        rng = np.random.default_rng(7)
        xs = [
            np.concatenate([_with_specials(4000, rng), SPECIALS, SPECIALS[::order]])
            for order in (1, -1)
        ]
    ins = [af.input(x.shape, name=f"x{i}") for i, x in enumerate(xs)]
    prog = af.compile(af.make(name, *ins), opt=0)
    (region,) = prog.fused_regions
    plan = compiled.plan_region(prog, region, _node_kernel(None))
    assert all(isinstance(s, tuple) for s in plan.steps), name  # generated, not host
    (got,) = compiled.run_plan(plan, _env(prog, xs)).values()
    assert _same(got, op.emulate(xs, {}, None)), name


def test_batch_norm_runs_compiled_by_its_scalar_form():
    rng = np.random.default_rng(3)
    c = 6
    x = af.input((2, c, 5, 7), name="x")
    stats = [rng.standard_normal(c), np.abs(rng.standard_normal(c)) + 1e-3]
    for w, b in ((None, None), (rng.standard_normal(c), None), (rng.standard_normal(c),) * 2):
        y = af.batch_norm(x, *stats, w, b)
        prog = af.compile(y, opt=0)
        (region,) = prog.fused_regions
        plan = compiled.plan_region(prog, region, _node_kernel(None))
        xs = [_with_specials((2, c, 5, 7), rng)]
        (got,) = compiled.run_plan(plan, _env(prog, xs)).values()
        assert _same(got, execute_fp16(prog, xs, regions=False)[0])


def _counting_runs(monkeypatch) -> list:
    runs = []
    real = compiled.run_plan

    def counted(plan, values):
        runs.append(plan)
        return real(plan, values)

    monkeypatch.setattr(compiled, "run_plan", counted)
    return runs


def test_an_unchecked_plan_runs_op_by_op_once_then_compiled_and_checked(monkeypatch):
    """Compiling costs seconds: a one-shot run of a plan this machine has not checked
    compiles nothing; the second run compiles, checks and remembers the check."""
    rng = np.random.default_rng(11)
    x = af.input((1, 8, 96, 96), name="x")
    y = ((x * 0.5).relu() + 1.0).exp().sum(axis=-1)
    prog = af.compile(y, opt=0)
    xs = [_with_specials(x.shape, rng)]
    want = execute_fp16(prog, xs, regions=False)[0]
    monkeypatch.setattr(compiled, "_is_verified", lambda key: False)
    monkeypatch.setattr(compiled, "_used_keys", set())
    runs = _counting_runs(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FastPathWarning)
        first = execute_fp16(prog, xs)
        (plan,) = compiled._plans[prog][None].values()
        assert runs == [] and not plan.checked and plan.calls == 1
        second = execute_fp16(prog, xs)
    assert runs == [plan] and plan.checked and plan.error is None
    assert _same(first[0], want) and _same(second[0], want)
    monkeypatch.undo()
    assert all(compiled._is_verified(k) for k in plan.keys)


def test_a_checked_plan_runs_compiled_from_its_first_call(monkeypatch):
    rng = np.random.default_rng(12)
    x = af.input((1, 8, 96, 96), name="x")
    prog = af.compile(((x * 0.25).relu() + 2.0).exp().sum(axis=-1), opt=0)
    xs = [_with_specials(x.shape, rng)]
    monkeypatch.setattr(compiled, "_is_verified", lambda key: True)
    runs = _counting_runs(monkeypatch)
    got = execute_fp16(prog, xs)
    assert len(runs) == 1 and runs[0].checked
    assert _same(got[0], execute_fp16(prog, xs, regions=False)[0])


def test_small_regions_and_observed_runs_go_node_by_node():
    x = af.input((4, 4), name="x")
    prog = af.compile(x.exp() + 1.0, opt=0)
    execute_fp16(prog, [np.zeros((4, 4), np.float16)])
    assert all(p is None for p in compiled._plans[prog][None].values())


def test_many_tiny_nodes_do_not_count_as_work_but_one_large_node_does():
    """A chain of 300 ops on 16 x 16 has 76,800 output elements, past MIN_WORK, but none
    of its nodes reaches MIN_NODE_WORK: it runs op by op. One node of 64 x 64 more
    counts alone."""
    x = af.input((16, 16), name="x")
    y = x
    for _ in range(150):
        y = (y * 0.5).exp()
    prog = af.compile(y, opt=0)
    (region,) = prog.fused_regions
    assert sum(int(np.prod(n.shape)) for n in region.nodes) >= compiled.MIN_WORK
    assert compiled.region_work(region) == 0
    execute_fp16(prog, [np.zeros((16, 16), np.float16)])
    assert all(p is None for p in compiled._plans[prog][None].values())
    big = af.input((256, 256), name="big")
    (region,) = af.compile((big * 0.5).exp(), opt=0).fused_regions
    assert compiled.region_work(region) == 2 * 256 * 256


def test_a_failing_plan_warns_once_and_falls_back_to_the_same_bits(monkeypatch):
    rng = np.random.default_rng(2)
    x = af.input((1, 4, 128, 130), name="x")
    prog = af.compile((x * 2.0).tanh(), opt=0)
    xs = [_with_specials(x.shape, rng)]

    def broken(plan, values):
        out = real(plan, values)
        return {k: v + np.float16(1) for k, v in out.items()}  # wrong bits

    real = compiled.run_plan
    monkeypatch.setattr(compiled, "run_plan", broken)
    monkeypatch.setattr(compiled, "_is_verified", lambda key: False)
    monkeypatch.setattr(compiled, "_used_keys", set())
    monkeypatch.setattr(compiled.__dict__["_gemm"], "_warned", set())
    execute_fp16(prog, xs)  # op by op: the plan's first call compiles nothing
    with pytest.warns(FastPathWarning, match="disagrees with the op-by-op emulator"):
        got = execute_fp16(prog, xs)
    assert _same(got[0], execute_fp16(prog, xs, regions=False)[0])


@pytest.mark.parametrize(
    "pool, attrs",
    [
        (af.max_pool, {"kernel_size": 3, "stride": 2, "padding": 1}),
        (af.max_pool, {"kernel_size": (2, 3)}),
        (af.avg_pool, {"kernel_size": 3, "stride": 1, "padding": 1}),  # count excludes pads
        (af.avg_pool, {"kernel_size": 3, "padding": 1, "count_include_pad": True}),
        (af.avg_pool, {"kernel_size": (3, 2), "stride": 2, "padding": (1, 1)}),
    ],
)
@pytest.mark.parametrize("chip", [None, "h17s"])
def test_pools_run_with_the_op_by_op_bits(pool, attrs, chip):
    """Under the generic numerics the pool kernel runs a pool whole (a host step);
    under a chip's, a generated kernel whose window scopes run lane-wise."""
    rng = np.random.default_rng(17)
    x = af.input((2, 3, 11, 13), name="x")
    prog = af.compile(pool((x * 0.5).relu() - 0.25, **attrs), opt=0)
    (region,) = prog.fused_regions
    xs = [_with_specials(x.shape, rng)]
    numerics = chip_numerics(chip)
    plan = compiled.plan_region(prog, region, _node_kernel(chip), numerics)
    (step,) = [step for (node, _), step in zip(plan.lowered.steps, plan.steps) if "pool" in node.op]
    if chip is None:
        assert isinstance(step, Opaque)
    else:
        assert "np.empty(" in step[0].source  # the window's scopes run lane-wise
    (got,) = compiled.run_plan(plan, _env(prog, xs)).values()
    assert _same(got, execute_fp16(prog, xs, target=chip, regions=False)[0])


def test_max_and_min_follow_numpys_scalar_rules_on_every_special_pair():
    assert jitlib.load()
    specials = [0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan]
    for a, b in itertools.product(specials, specials):
        for kind in (np.float32, np.float64):
            got = (jitlib.vmax(kind(a), kind(b)), jitlib.vmin(kind(a), kind(b)))
            want = (
                np.maximum(np.float64(a), np.float64(b)),
                np.minimum(np.float64(a), np.float64(b)),
            )
            for g, w in zip(got, want):
                assert (np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w))


def test_an_unwritable_cache_folder_compiles_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("ANEFORGE_CACHE_DIR", str(blocker))
    monkeypatch.setattr(compiled, "_kernels", {})
    x = af.input((3, 5), name="x")
    prog = af.compile((x * 3.0 - 1.0).abs(), opt=0)
    (region,) = prog.fused_regions
    plan = compiled.plan_region(prog, region, _node_kernel(None))
    xs = [_with_specials(x.shape, np.random.default_rng(4))]
    (got,) = compiled.run_plan(plan, _env(prog, xs)).values()
    assert _same(got, execute_fp16(prog, xs, regions=False)[0])
    assert blocker.read_text().startswith("a file")  # nothing written over it


def _shuffle_code(groups, per_group, stride):
    """y[stride * g + c, s] = relu(x[per_group * g + c... ]) over g < groups, c <
    per_group and s < 4096: a channel shuffle's store when ``stride == per_group``."""
    channels = stride * (groups - 1) + per_group
    x = Get("x", (it("c") * groups + it("g"), it("s")))
    store = Set("y", (it("g") * stride + it("c"), it("s")), Op("relu", (x,)))
    nest = For("g", 0, groups - 1, (For("c", 0, per_group - 1, (For("s", 0, 4095, (store,)),)),))
    buffers = (
        Buffer("x", (groups * per_group, 4096), kind="input"),
        Buffer("y", (channels, 4096), kind="output"),
    )
    return Code("shuffle", buffers, (nest,))


@pytest.mark.parametrize(
    ("stride", "parallel"),
    # stride 7 < 8 channels per group: groups overlap, so only the channels within a
    # group (not the groups) are told apart
    [(8, "_i0"), (9, "_i0"), (7, "_i1")],
)
def test_the_outermost_loop_that_writes_distinct_cells_runs_in_parallel(stride, parallel):
    code = _shuffle_code(3, 8, stride)
    kernel = generate(code, code.body)
    loops = [ln.split()[1] for ln in kernel.source.splitlines() if "numba.prange" in ln]
    assert loops == [parallel]
    feeds = {"x": _with_specials((24, 4096), np.random.default_rng(stride))}
    want = execute(code, feeds).outputs["y"]
    assert _same(want, _run_code(code, kernel, feeds)["y"])


def test_a_row_sum_counts_its_inner_loop_as_work_and_runs_rows_in_parallel():
    """The work of a row sum's loop lies inside its accumulation scope: 128 rows of 1024
    terms are enough to share out, each row still summed in order by one thread."""
    x = af.input((128, 1024), name="x")
    prog = af.compile(((x * 0.5).exp() * x).sum(axis=-1), opt=0)
    (region,) = prog.fused_regions
    plan = compiled.plan_region(prog, region, _node_kernel(None))
    sums = [k for k, *_ in plan.steps if "_l0" in k.source]
    assert sums and all(k.parallel for k in sums)
    xs = [_with_specials((128, 1024), np.random.default_rng(5), scale=1.0)]
    (got,) = compiled.run_plan(plan, _env(prog, xs)).values()
    assert _same(got, execute_fp16(prog, xs, regions=False)[0])


def test_the_emulators_measure_times_the_compiled_path(monkeypatch):
    """Two untimed runs (op by op, then compile and check), so every timed run is
    compiled."""
    x = af.input((1, 8, 96, 96), name="x")
    prog = af.compile(((x * 0.75).relu() + 3.0).exp().sum(axis=-1), opt=0)
    xs = [_with_specials(x.shape, np.random.default_rng(13))]
    monkeypatch.setattr(compiled, "_is_verified", lambda key: False)
    monkeypatch.setattr(compiled, "_used_keys", set())
    runs = _counting_runs(monkeypatch)
    assert af.EmulatorDevice().measure(prog, xs, repeat=1) > 0
    (plan,) = compiled._plans[prog][None].values()
    assert len(runs) == 2 and plan.checked and plan.calls == 3


def test_a_plan_of_a_structure_already_used_compiles_on_its_first_call(monkeypatch):
    """Kernels are shared by structure: a program for another batch size, whose kernels
    an earlier program ran op by op once, compiles at once."""
    monkeypatch.setattr(compiled, "_is_verified", lambda key: False)
    monkeypatch.setattr(compiled, "_used_keys", set())
    runs = _counting_runs(monkeypatch)
    outs = []
    for rows in (96, 112):
        x = af.input((1, 8, rows, 96), name="x")
        prog = af.compile(((x * 0.5).relu() + 1.5).exp().sum(axis=-1), opt=0)
        xs = [_with_specials(x.shape, np.random.default_rng(rows))]
        outs.append((execute_fp16(prog, xs)[0], execute_fp16(prog, xs, regions=False)[0]))
    assert len(runs) == 1 and runs[0].checked  # the second program's first call
    assert all(_same(got, want) for got, want in outs)
