"""Real networks run as compiled regions give the op-by-op emulator's bits: all nine of
the onnx wheel's light CNNs (seeded weights) and all-MiniLM-L6-v2, each on the
emulator's default path (run twice: a plan this machine has not checked compiles on its
second call, whose check must pass: no fallback warning)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from aneforge.emulator.interpreter import execute_fp16
from aneforge.errors import FastPathWarning
from aneforge.kernel import compiled
from aneforge.models import light_models, minilm
from aneforge.models.light import build_light, model_inputs


def _same(x, y) -> bool:
    x, y = np.asarray(x, np.float16), np.asarray(y, np.float16)
    nx, ny = np.isnan(x), np.isnan(y)
    return np.array_equal(nx, ny) and np.array_equal(x.view(np.uint16)[~nx], y.view(np.uint16)[~ny])


def _runs_compiled(prog) -> bool:
    plans = compiled._plans[prog][None]
    return any(p is not None and p.error is None and p.checked for p in plans.values())


@pytest.mark.parametrize("name", sorted(light_models()))
def test_light_models_run_compiled_with_the_op_by_op_bits(name):
    build = build_light(name, weights="seeded")
    prog = build.program
    xs = [np.asarray(v, np.float16) for v in model_inputs(build.model).values()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FastPathWarning)
        execute_fp16(prog, xs)
        got = execute_fp16(prog, xs)
    assert _runs_compiled(prog), name
    want = execute_fp16(prog, xs, regions=False)
    assert all(_same(g, w) for g, w in zip(got, want)), name


def test_minilm_runs_compiled_with_the_op_by_op_bits():
    m = minilm()
    emb, mask = m.features(["A man is playing a guitar.", "Two dogs run on the beach."], 64)
    prog = m.program(emb.shape[1], emb.shape[0])
    xs = [np.asarray(emb, np.float16), np.asarray(mask, np.float16)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FastPathWarning)
        execute_fp16(prog, xs)
        got = execute_fp16(prog, xs)
    assert _runs_compiled(prog)
    want = execute_fp16(prog, xs, regions=False)
    assert all(_same(g, w) for g, w in zip(got, want))
