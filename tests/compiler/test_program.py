"""compile() and Program: node order, counts, summary, freeing, outputs and devices."""

from __future__ import annotations

import gc
import importlib
import re

import numpy as np
import pytest

import aneforge as af
from aneforge.compiler.program import NO_PASSES, PassRecord, PassReport, Program

# the modules (af.devices and aneforge.cost.estimate are also functions of the same name)
devices_module = importlib.import_module("aneforge.devices")
estimate_module = importlib.import_module("aneforge.cost.estimate")

F16 = np.float16


def ids(tensors):
    return [id(t) for t in tensors]


def fp16(x):
    """Round to fp16 once (the reference of one emulated elementwise step)."""
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=np.float64).astype(F16)


# ---- node order ------------------------------------------------------------------------


def test_sources_come_first_in_argument_order():
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    z = x + y
    assert ids(af.compile(z).nodes) == ids([x, y, z])
    z2 = y + x
    assert ids(af.compile(z2).nodes) == ids([y, x, z2])
    a = x * 2.0
    nodes = af.compile(a).nodes
    assert [n.op for n in nodes] == ["input", "weight", "mul"]
    assert nodes[0] is x and nodes[2] is a


def diamond():
    x = af.input((4,), name="x")
    a = x.exp()
    b = a + 1.0
    c = a * 2.0
    d = b + c
    return x, a, b, c, d


def test_every_source_precedes_its_users_and_appears_once():
    x, a, b, c, d = diamond()
    y = af.input((4,), name="unused")  # not reachable from the outputs
    e = d.relu() + x
    prog = af.compile([e, c])
    pos = {id(n): i for i, n in enumerate(prog.nodes)}
    assert len(pos) == len(prog.nodes)
    for i, node in enumerate(prog.nodes):
        for src in node.srcs:
            assert pos[id(src)] < i, f"{src} is used by node {i} before it is computed"
    assert id(y) not in pos
    assert {id(t) for t in (x, a, b, c, d, e)} <= set(pos)
    assert ids(prog.inputs) == [id(x)]


def test_node_order_is_deterministic():
    x, a, b, c, d = diamond()
    orders = [ids(af.compile([d, b]).nodes) for _ in range(3)]
    assert orders[0] == orders[1] == orders[2]
    # the depth-first post-order visits a's users in source order: b before c
    nodes = af.compile(d).nodes
    assert ids(n for n in nodes if n.op != "weight") == ids([x, a, b, c, d])


def test_inputs_follow_creation_order_not_visit_order():
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    z = y - x  # visits y first
    prog = af.compile(z)
    assert prog.nodes[0] is y
    assert ids(prog.inputs) == ids([x, y])
    got = prog(np.array([1.0, 2.0]), np.array([10.0, 20.0]))
    np.testing.assert_array_equal(got, [9.0, 18.0])


def test_deep_chains_compile_and_run():
    x = af.input((3,), name="x")
    y = x
    for _ in range(3000):
        y = y + 1.0
    prog = af.compile(y)
    assert prog.op_count == 3000
    # 0 + 1 + 1 ... is exact up to 2048, then stalls: 2048 + 1 is a tie -> 2048
    np.testing.assert_array_equal(prog(np.zeros(3)), [2048.0] * 3)


# ---- counts ------------------------------------------------------------------------------


def test_op_count_excludes_inputs_and_weights():
    x = af.input((2, 3), name="x")
    assert af.compile(x).op_count == 0
    assert af.compile(((x * 2.0) + 1.0).relu()).op_count == 3
    prog = af.compile([x.relu(), x.exp()])
    assert prog.op_count == 2
    assert len(prog.nodes) == 3
    assert [n.op for n in prog.compute_nodes] == ["relu", "exp"]


def test_flops_of_each_contraction():
    x = af.input((2, 8), name="x")
    assert af.compile(x @ np.ones((8, 4))).flops == 2 * 8 * (2 * 4)
    v = af.input((8,), name="v")
    assert af.compile(v @ np.ones((8, 4))).flops == 2 * 8 * 4
    a, b = af.input((4, 2, 8)), af.input((4, 8, 3))
    assert af.compile(af.bmm(a, b)).flops == 2 * 8 * (4 * 2 * 3)
    assert af.compile(af.linear(x, np.ones((4, 8)), np.zeros(4))).flops == 2 * 8 * (2 * 4)
    img = af.input((1, 3, 8, 8), name="img")
    conv = af.conv(img, np.ones((4, 3, 3, 3)), padding=1)
    assert af.compile(conv).flops == 2 * (3 * 3 * 3) * (1 * 4 * 8 * 8)
    grouped = af.conv(af.input((1, 4, 8, 8)), np.ones((6, 2, 3, 3)), groups=2)
    assert af.compile(grouped).flops == 2 * (2 * 3 * 3) * (1 * 6 * 6 * 6)
    up = af.conv_transpose(af.input((1, 4, 8, 8)), np.ones((4, 2, 2, 2)), stride=2)
    assert up.shape == (1, 2, 16, 16)
    assert af.compile(up).flops == 2 * (2 * 2 * 2) * (1 * 4 * 8 * 8)


def test_flops_add_up_and_ignore_non_contractions():
    x = af.input((2, 8), name="x")
    h = (x @ np.ones((8, 4))).relu().softmax()
    y = h @ np.ones((4, 5))
    prog = af.compile([y, x.exp().sum()])
    assert prog.flops == 2 * 8 * 8 + 2 * 4 * 10
    assert af.compile(x.exp().sum()).flops == 0


def test_weight_bytes_count_fp16_weights():
    x = af.input((2, 8), name="x")
    prog = af.compile(x @ np.ones((8, 4)) + np.zeros(4))
    assert prog.weight_bytes == 2 * (32 + 4)


# ---- summary -----------------------------------------------------------------------------


def test_summary_names_inputs_outputs_and_the_op_histogram():
    x = af.input((2, 3), name="image")
    t = af.input((3,))  # unnamed
    y = (x + t).relu() + (x * 2.0).relu()
    prog = af.compile([y, x.sum()])
    text = prog.summary()
    lines = text.splitlines()
    assert lines[0] == "Program: 6 ops, 2 input(s), 2 output(s), opt='routes'"
    assert "input  image: (2, 3)" in text
    assert "input  ?: (3,)" in text
    assert "output 0: (2, 3) (add)" in text
    assert "output 1: () (sum)" in text
    assert "ops: add x2, mul x1, relu x2, sum x1" in text
    assert "weights: " in text and "KiB" in text and "MFLOP" in text
    node_lines = [ln for ln in lines if re.match(r"\s+%\d+ = ", ln)]
    assert len(node_lines) == prog.op_count
    for ln in node_lines:
        m = re.match(r"\s+%(\d+) = (\w+)\(([^)]*)\) -> (\(.*\))$", ln)
        assert m, ln
        own = int(m.group(1))
        refs = [int(r) for r in re.findall(r"%(\d+)", m.group(3))]
        assert refs and all(r < own for r in refs)
        assert prog.nodes[own].op == m.group(2)
        assert str(prog.nodes[own].shape) == m.group(4)
    assert repr(prog) == "<Program 6 ops, opt='routes'>"


# ---- running: freeing dead values, outputs -----------------------------------------------


def test_diamond_graph_shares_its_subexpression():
    x, a, b, c, d = diamond()
    feed = np.array([0.0, 0.5, -1.0, 2.0])
    ea = fp16(np.exp(feed.astype(F16).astype(np.float64)))
    want = fp16(fp16(ea.astype(np.float64) + 1.0) + fp16(ea.astype(np.float64) * 2.0))
    for device in ("emulator", "reference"):
        (got,) = af.compile(d).run(feed, device=device)
        np.testing.assert_array_equal(got, want)
    exact = np.exp(feed.astype(F16).astype(np.float64)) * 3.0 + 1.0
    np.testing.assert_allclose(af.reference(d, feed), exact, rtol=1e-14)


def test_an_output_that_is_also_an_intermediate():
    x = af.input((3,), name="x")
    a = x * 2.0
    b = a + 1.0
    feed = np.array([1.0, 2.0, 3.0])
    for outs in ([a, b], [b, a]):
        got = af.compile(outs)(feed)
        want = {id(a): [2.0, 4.0, 6.0], id(b): [3.0, 5.0, 7.0]}
        for t, g in zip(outs, got):
            np.testing.assert_array_equal(g, want[id(t)])


def test_an_input_that_is_directly_an_output():
    x = af.input((3,), name="x")
    feed = np.array([1.5, -2.0, 70.0])
    alone = af.compile(x)
    assert alone.op_count == 0
    np.testing.assert_array_equal(alone(feed), feed)
    first, second = af.compile([x, x + 1.0])(feed)
    np.testing.assert_array_equal(first, feed)
    np.testing.assert_array_equal(second, feed + 1.0)
    plus, same = af.compile([x + 1.0, x])(feed)
    np.testing.assert_array_equal(same, feed)
    np.testing.assert_array_equal(plus, feed + 1.0)
    np.testing.assert_array_equal(af.reference([x + 1.0, x], feed)[1], feed)


def test_a_value_needed_again_at_the_end_is_kept():
    x = af.input((2,), name="x")
    y = x
    for _ in range(5):
        y = y * 1.5
    out = y + x  # x is used first and last
    feed = np.array([1.0, 2.0])
    want = feed
    for _ in range(5):
        want = fp16(want * 1.5).astype(np.float64)
    np.testing.assert_array_equal(af.compile(out)(feed), fp16(want + feed))
    sq = af.compile(x * x)(np.array([3.0, -4.0]))  # the same source twice
    np.testing.assert_array_equal(sq, [9.0, 16.0])


def test_the_same_tensor_twice_as_output():
    x = af.input((2,), name="x")
    a = x + 1.0
    got = af.compile([a, a, x])(np.array([1.0, 2.0]))
    assert isinstance(got, tuple) and len(got) == 3
    np.testing.assert_array_equal(got[0], [2.0, 3.0])
    np.testing.assert_array_equal(got[1], [2.0, 3.0])
    np.testing.assert_array_equal(got[2], [1.0, 2.0])


def test_values_are_freed_after_their_last_use_and_outputs_never():
    x, a, b, c, d = diamond()
    e = d + x
    prog = af.compile([e, b])
    pos = {id(n): i for i, n in enumerate(prog.nodes)}
    freed = {}
    for i, dead in enumerate(prog.dead_after):
        for n in dead:
            assert id(n) not in freed, f"{n} freed twice"
            freed[id(n)] = i
    assert id(e) not in freed and id(b) not in freed  # outputs survive to the end
    for node in prog.nodes:
        users = [pos[id(u)] for u in prog.nodes if any(s is node for s in u.srcs)]
        if id(node) in (id(e), id(b)):
            continue
        assert freed[id(node)] == max(users), f"{node} freed at the wrong step"


def test_several_outputs_come_back_as_a_tuple_in_order():
    x = af.input((2,), name="x")
    feed = np.array([1.0, 4.0])
    outs = af.compile([x + 1.0, x * 3.0, x.sqrt()])(feed)
    assert isinstance(outs, tuple) and len(outs) == 3
    for got, want in zip(outs, ([2.0, 5.0], [3.0, 12.0], [1.0, 2.0])):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    single = af.compile(x + 1.0)(feed)
    assert isinstance(single, np.ndarray) and single.dtype == np.float32
    raw = af.compile([x + 1.0, x * 3.0]).run(feed)
    assert isinstance(raw, list) and [r.dtype for r in raw] == [F16, F16]


def test_outputs_keep_the_order_given_to_compile():
    x = af.input((2,), name="x")
    a, b = x + 1.0, x * 3.0
    assert ids(af.compile([b, a]).outputs) == ids([b, a])
    got_b, got_a = af.compile([b, a])(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(got_b, [3.0, 6.0])
    np.testing.assert_array_equal(got_a, [2.0, 3.0])


# ---- inputs ------------------------------------------------------------------------------


def test_inputs_by_position_and_by_name():
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    prog = af.compile(x - y)
    np.testing.assert_array_equal(prog(y=np.ones(2), x=np.full(2, 3.0)), [2.0, 2.0])
    np.testing.assert_array_equal(prog(np.full(2, 3.0), y=np.ones(2)), [2.0, 2.0])
    np.testing.assert_array_equal(prog(np.array([3, 4]), np.array([1, 1])), [2.0, 3.0])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((), {}, af.InputError, "missing"),
        ((np.ones(2),), {}, af.InputError, "missing"),
        ((np.ones(2), np.ones(2), np.ones(2)), {}, af.InputError, "takes 2"),
        ((np.ones(2),), {"z": np.ones(2)}, af.InputError, "no input named 'z'"),
        ((np.ones(2),), {"x": np.ones(2)}, af.InputError, "both"),
        ((np.ones(3), np.ones(2)), {}, af.InputError, "expected shape"),
        ((np.ones(2, complex), np.ones(2)), {}, af.DTypeError, "complex"),
    ],
)
def test_bad_inputs_raise_input_errors(args, kwargs, error, match):
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    with pytest.raises(error, match=match):
        af.compile(x + y)(*args, **kwargs)


def test_inputs_as_one_dict_by_name():
    # prog({"x": a}) raised a misleading DTypeError
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    prog = af.compile((x - y).named("d"))
    feeds = {"y": np.ones(2), "x": np.full(2, 3.0)}
    np.testing.assert_array_equal(prog(feeds), prog(**feeds))
    np.testing.assert_array_equal(prog({"x": np.full(2, 3.0)}, y=np.ones(2)), [2.0, 2.0])
    (raw,) = prog.run(feeds)
    assert raw.dtype == F16
    assert prog.trace(feeds)["d"].n_inf == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (({"x": np.ones(2), "z": np.ones(2)},), {}, r"dict name 'z', which no input has.*'x', 'y'"),
        (({"x": np.ones(2), 0: np.ones(2)},), {}, "dict name 0"),
        (({"x": np.ones(2)},), {"x": np.ones(2)}, "both in the dict and by name"),
        (({"x": np.ones(2)},), {}, "missing input.*'y'"),
        ((np.ones(2), {"y": np.ones(2)}), {}, "a dict of inputs by name must be the only"),
    ],
)
def test_a_bad_dict_of_inputs_is_an_input_error(args, kwargs, match):
    x = af.input((2,), name="x")
    y = af.input((2,), name="y")
    with pytest.raises(af.InputError, match=match):
        af.compile(x + y)(*args, **kwargs)


# ---- a frozen Program ----------------------------------------------------------------------


def test_a_program_is_immutable():
    x = af.input((2,), name="x")
    prog = af.compile((x + 1.0).relu(), target="M1")
    for field, value in [("opt", 2), ("target", None), ("passes", {}), ("tune_report", {}),
                         ("output_names", ("a",)), ("nodes", []), ("report", None)]:  # fmt: skip
        with pytest.raises(AttributeError):
            setattr(prog, field, value)
    with pytest.raises(TypeError):
        prog.passes["precision"] = {}  # a read-only view of the pass report
    assert isinstance(prog.nodes, tuple) and isinstance(prog.inputs, tuple)
    assert all(isinstance(d, tuple) for d in prog.dead_after)
    assert prog.regions is prog.regions  # derived views are computed once


def test_replace_copies_a_program_sharing_its_graph():
    x = af.input((2,), name="x")
    prog = af.compile(x.exp() + x)
    regions = prog.regions
    tuned = prog.replace(opt=2, output_names=("sum",))
    assert (prog.opt, tuned.opt) == ("routes", 2) and tuned.output_names == ("sum",)
    assert tuned.nodes is prog.nodes and tuned.regions is regions
    assert tuned.report is prog.report and prog.output_names == (None,)
    with pytest.raises(af.OptionError, match="cannot change nodes"):
        prog.replace(nodes=())
    with pytest.raises(af.OptionError, match="2 output name"):
        prog.replace(output_names=("a", "b"))
    with pytest.raises(af.OptionError, match="PassReport"):
        prog.replace(report={})


def test_the_pass_report_is_given_at_construction():
    x = af.input((2,), name="x")
    bare = Program.from_outputs([x.relu()])
    assert bare.report is NO_PASSES and dict(bare.passes) == {} and bare.tune_report is None
    report = PassReport("demo", (PassRecord("route::select", {"routes": []}),
                                 PassRecord("check::precision", {"precision": {"a": 1}}),
                                 PassRecord("check::precision", {"precision": {"a": 2}})),
                        tune={"variant": "native"})  # fmt: skip
    prog = Program.from_outputs([x.relu()], opt=2, report=report)
    assert prog.report.ran == ("route::select", "check::precision", "check::precision")
    assert dict(prog.passes) == {"routes": [], "precision": {"a": 2}}  # later entries win
    assert prog.tune_report == {"variant": "native"}
    with pytest.raises(af.OptionError, match="PassReport"):
        Program.from_outputs([x.relu()], report={"routes": []})


def test_the_estimate_memo_lives_outside_the_program():
    x = af.input((64, 256), name="x")
    prog = af.compile(x.relu())
    first = af.estimate_breakdown(prog, target="M1")
    assert af.estimate_breakdown(prog, target="M1") is first  # memoized per program
    assert prog in estimate_module._ESTIMATES and "_estimates" not in vars(prog)
    before = len(estimate_module._ESTIMATES)
    del prog
    gc.collect()
    assert len(estimate_module._ESTIMATES) == before - 1  # dropped with the program


# ---- compile options ---------------------------------------------------------------------


@pytest.mark.parametrize("outputs", [[], (), "x", [np.ones(2)], {"a": 1}])
def test_compile_refuses_non_tensors(outputs):
    with pytest.raises(af.OptionError, match="outputs"):
        af.compile(outputs)


@pytest.mark.parametrize("outputs", [None, 3])
def test_compile_refuses_non_iterables_with_an_option_error(outputs):
    # errors.py: every mistake a user can make raises an AneforgeError subclass, and
    # compile's own check names "outputs must be a Tensor or a non-empty list"
    with pytest.raises(af.OptionError, match="outputs"):
        af.compile(outputs)


def test_a_target_is_recorded_on_the_program():
    x = af.input((2,))
    prog = af.compile(x + 1.0, target="M1")
    assert prog.target is not None
    with pytest.raises(af.OptionError, match="nosuchchip"):
        af.compile(x + 1.0, target="nosuchchip")


@pytest.mark.parametrize("opt", [7, True, "fast", -1])
def test_compile_refuses_unknown_opt_levels(opt):
    x = af.input((2,))
    with pytest.raises(af.OptionError, match="opt"):
        af.compile(x + 1.0, opt=opt)


def test_compile_accepts_level_0_and_routes():
    x = af.input((2,))
    assert af.compile(x + 1.0, opt="routes").opt == "routes"
    assert af.compile((x + 1.0,), opt=0).opt == 0


# ---- devices -----------------------------------------------------------------------------


class RecordingDevice:
    """A device that records what it is given and computes with the reference interpreter."""

    def __init__(self, name):
        self.name = name
        self.capabilities = af.Capabilities(
            bit_faithful=True, real_hardware=False, description="records its calls"
        )
        self.calls = []

    def run(self, program, inputs):
        self.calls.append((program, [np.array(a) for a in inputs]))
        return af.EmulatorDevice(fast=False).run(program, inputs)

    def measure(self, program, inputs, repeat=5):
        return 1.0


@pytest.fixture
def isolated_devices(monkeypatch):
    """Register devices in a copy of the registry, dropped after the test."""
    monkeypatch.setattr(devices_module, "_FACTORIES", dict(devices_module._FACTORIES))


def test_a_registered_device_is_used_by_name(isolated_devices):
    dev = RecordingDevice("recorder")
    af.register_device("recorder", lambda: dev)
    assert "recorder" in af.devices()
    assert af.get_device("recorder") is dev
    assert isinstance(dev, af.Device)
    x = af.input((2,), name="x")
    y = af.input((3,), name="y")
    prog = af.compile([x * 2.0, y.sum()])
    with pytest.warns(af.PrecisionWarning):
        out = prog.run(np.array([1, 2]), y=np.array([0.5, 0.25, 70000.0]), device="recorder")
    assert len(dev.calls) == 1
    program, inputs = dev.calls[0]
    assert program is prog
    assert [a.dtype for a in inputs] == [F16, F16]
    np.testing.assert_array_equal(inputs[0], [1.0, 2.0])
    np.testing.assert_array_equal(inputs[1], [0.5, 0.25, np.inf])
    np.testing.assert_array_equal(out[0], [2.0, 4.0])
    assert float(out[1]) == np.inf
    doubled, total = prog(np.ones(2), np.ones(3), device="recorder")
    assert len(dev.calls) == 2
    assert doubled.dtype == np.float32 and float(total) == 3.0


def test_a_device_instance_can_be_passed_directly():
    dev = RecordingDevice("direct")
    x = af.input((2,), name="x")
    got = af.compile(x + 1.0)(np.zeros(2), device=dev)
    np.testing.assert_array_equal(got, [1.0, 1.0])
    assert len(dev.calls) == 1
    assert "direct" not in af.devices()


def test_an_object_that_is_not_a_device_is_refused():
    x = af.input((2,))
    with pytest.raises(af.OptionError, match="device"):
        af.compile(x + 1.0).run(np.zeros(2), device=object())


def test_device_names_are_unique(isolated_devices):
    with pytest.raises(af.OptionError, match="emulator"):
        af.register_device("emulator", lambda: RecordingDevice("emulator"))
    af.register_device("twice", lambda: RecordingDevice("twice"))
    with pytest.raises(af.OptionError, match="twice"):
        af.register_device("twice", lambda: RecordingDevice("twice"))


def test_an_unknown_device_lists_the_registered_ones():
    x = af.input((2,))
    prog = af.compile(x + 1.0)
    with pytest.raises(af.OptionError) as err:
        prog.run(np.zeros(2), device="nosuch")
    message = str(err.value)
    assert "nosuch" in message
    for name in af.devices():
        assert name in message
    assert {"emulator", "reference"} <= set(af.devices())
    with pytest.raises(af.OptionError):
        af.get_device("nosuch")


def test_the_default_device_is_the_fast_emulator():
    dev = af.get_device()
    assert isinstance(dev, af.EmulatorDevice) and dev.fast and dev.name == "emulator"
    ref = af.get_device("reference")
    assert isinstance(ref, af.EmulatorDevice) and not ref.fast and ref.name == "reference"
    for d in (dev, ref):
        assert d.capabilities.bit_faithful and not d.capabilities.real_hardware
        assert isinstance(d, af.Device)


@pytest.mark.parametrize("fast", [True, False])
def test_emulator_measure_returns_positive_seconds(fast):
    x = af.input((16, 32), name="x")
    prog = af.compile((x @ np.ones((32, 8))).relu())
    dev = af.EmulatorDevice(fast=fast)
    feeds = [np.ones((16, 32), F16)]
    for repeat in (1, 3, 0):
        seconds = dev.measure(prog, feeds, repeat=repeat)
        assert isinstance(seconds, float)
        assert 0.0 < seconds < 10.0
