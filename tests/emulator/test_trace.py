"""prog.trace: every node's range in a run, the first non-finite node, collapses."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.interpreter import execute_fp16
from aneforge.models.zoo import encoder


def test_ranges_match_the_emulated_values(rng):
    x = af.input((8, 32), name="x")
    h = (x @ (rng.standard_normal((32, 16)) * 0.3)).named("proj")
    y = af.softmax(h.relu(name="act"), name="probs")
    prog = af.compile(y)
    feed = rng.standard_normal((8, 32))
    tr = prog.trace(feed)
    assert [n.name for n in tr.nodes] == ["x", "proj", "act", "probs"]
    (out,) = tr.outputs
    np.testing.assert_array_equal(np.asarray(out, np.float32), prog(feed))
    probs = tr["probs"]
    assert probs.lo == float(np.min(out)) and probs.hi == float(np.max(out))
    assert probs.finite and probs.n_zero == 0
    assert tr["act"].lo == 0.0 and tr["act"].n_zero > 0
    assert tr.first_nonfinite() is None and tr.first_collapse() is None


def test_the_fast_path_and_the_reference_interpreter_trace_the_same(rng):
    x = af.input((4, 64), name="x")
    y = af.layer_norm((x @ (rng.standard_normal((64, 64)) * 0.2)).gelu(), name="ln")
    prog = af.compile(y)
    feed = rng.standard_normal((4, 64)) * 3
    fast, ref = prog.trace(feed), prog.trace(feed, fast=False)
    assert fast.to_records() == ref.to_records()


def test_the_first_overflow_is_named_with_what_fed_it():
    x = af.input((2, 8), name="x")
    h = (x * 300.0).named("scaled")
    y = h.square(name="energy").sum(-1)
    tr = af.compile(y).trace(np.ones((2, 8)))
    hit = tr.first_nonfinite()
    assert (hit.name, hit.op, hit.n_inf) == ("energy", "square", 16)
    (fed,) = tr.sources(hit)
    assert fed.name == "scaled" and fed.hi == 300.0
    assert "'energy'" in tr.describe_first_nonfinite() and "'scaled'" in (
        tr.describe_first_nonfinite()
    )


def test_a_layer_norm_of_inputs_times_100_collapses_by_name(rng):
    # The case: x*x inside the norm passes 65504, the output is all zeros.
    x = af.input((4, 64), name="x")
    y = af.layer_norm(x * 100.0, name="norm")
    tr = af.compile(y).trace(rng.standard_normal((4, 64)))
    assert tr.first_nonfinite() is None  # nothing inf at the outputs of nodes
    assert tr.first_collapse().name == "norm"


def test_an_encoder_fed_inputs_times_30_is_found_by_name(rng):
    # The 12-layer encoder (d = 384, 128 tokens; 2 layers and 32 tokens here to
    # keep the test fast) fed inputs scaled by 30: the first norm's statistics overflow.
    x, y = encoder("minilm_l6", seq=32, seed=0)
    prog = af.compile(y)
    tr = prog.trace(rng.standard_normal(x.shape) * 30)
    first = tr.first_nonfinite() or tr.first_collapse()
    assert first is not None and first.op == "layer_norm"
    assert first.name == prog.layer_name(prog.nodes[first.index])


def test_trace_takes_inputs_like_a_call_and_uses_the_programs_target():
    # 8192 ones summed in fp16: the generic narrow sum stalls at 2048; the M1's reduction
    # route (runs of 192) keeps every partial sum exact and reaches 8192.
    x = af.input((1, 8192), name="x")
    y = af.sum(x, axis=-1)
    feed = np.ones((1, 8192))
    on_m1 = af.compile(y, target="M1")
    generic = af.compile(y)
    assert on_m1.trace(x=feed)["sum_0"].hi == 8192.0
    assert generic.trace(feed)["sum_0"].hi == 2048.0
    assert generic.trace(feed, target="M1")["sum_0"].hi == 8192.0
    want = execute_fp16(on_m1, on_m1.prepare_inputs([feed], {}), target=on_m1.target)[0]
    assert float(want[0]) == 8192.0
    with pytest.raises(af.AneforgeError):
        on_m1.trace(np.ones((2, 2)))
