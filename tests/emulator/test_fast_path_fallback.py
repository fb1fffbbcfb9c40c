"""The fast path falls back to the reference interpreter, warning once, when it cannot load:
numba cannot be imported at all, numba's import fails once and then
works (the interpreter used to die with AttributeError on every run after that), or a
compiled kernel fails to build. In every case the programs still run, with the reference
interpreter's bits, and one FastPathWarning per cause (the import, or each kernel) says why.

Import failures are simulated in a fresh interpreter (an import hook refusing ``numba``);
compile failures in this process, by swapping each kernel for one that raises the way a
numba compile error does (a many-line TypingError).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import aneforge as af
import aneforge.emulator.fast_kernels as fk
import aneforge.emulator.gemm as gemm_module
from aneforge.emulator.gemm import FastPathWarning
from aneforge.emulator.interpreter import execute_fp16
from aneforge.errors import AneforgeWarning
from conftest import assert_same_bits, run_python_with_env

# Builds a program with a matmul (the gemm kernel) and a batch_norm (the compiled
# batch_norm), runs it on the fast path three times and compares with the reference
# interpreter. ``REFUSE`` is "always" (numba missing) or "once" (numba's first import
# fails, later ones work).
_SCENARIO = """
import sys
import warnings

class RefuseNumba:
    def __init__(self, always):
        self.always, self.refused = always, 0

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] not in ("numba", "llvmlite"):
            return None
        if not self.always and self.refused:
            return None
        self.refused += 1
        raise ImportError(f"simulated for the test: {name} is broken here")

sys.meta_path.insert(0, RefuseNumba(REFUSE == "always"))

import numpy as np
import aneforge as af
from aneforge.emulator.gemm import FastPathWarning
from aneforge.emulator.interpreter import execute_fp16

rng = np.random.default_rng(5)
x = af.input((2, 3, 4, 8), name="x")
c = np.arange(3, dtype=np.float64)
y = af.batch_norm(x, c * 0.1, c + 1.0, c - 1.0, c * 0.5) @ rng.standard_normal((8, 5))
feed = (rng.standard_normal((2, 3, 4, 8)) * 3).astype(np.float16)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    prog = af.compile(y)
    runs = [np.asarray(prog(feed)) for _ in range(3)]
    runs.append(execute_fp16(prog, [feed], fast=True)[0])
ref = execute_fp16(prog, [feed], fast=False)[0]
want = ref.astype(np.float16).view(np.uint16)
for got in runs:
    assert np.array_equal(got.astype(np.float16).view(np.uint16), want), "bits differ"
ours = [w for w in seen if issubclass(w.category, FastPathWarning)]
assert len(ours) == 1, [str(w.message) for w in ours]
text = str(ours[0].message)
assert "simulated for the test: numba is broken here" in text, text
assert "numba" in text and "reference" in text, text
print("ok:", text)
"""


@pytest.mark.parametrize("refuse", ["always", "once"])
def test_numba_that_cannot_import_warns_once_and_the_reference_serves(refuse):
    run_python_with_env(f"REFUSE = {refuse!r}\n" + _SCENARIO, {})


def _program(rng):
    x = af.input((2, 3, 4, 8), name="x")
    c = np.arange(3, dtype=np.float64)
    y = af.batch_norm(x, c * 0.1, c + 1.0, c - 1.0, c * 0.5) @ rng.standard_normal((8, 5))
    feed = (rng.standard_normal((2, 3, 4, 8)) * 3).astype(np.float16)
    return af.compile(y), feed


class TypingError(Exception):
    """Stands for numba's TypingError (its report runs over many lines)."""


def _compile_failure(*_args, **_kwargs):
    raise TypingError("simulated compile failure\nsecond line of numba's report")


@pytest.fixture
def broken_kernels(monkeypatch):
    """Both compiled kernels fail to build; nothing has been checked or warned yet."""
    monkeypatch.setattr(gemm_module, "_kernel", _compile_failure)
    monkeypatch.setattr(gemm_module, "_state", {"ready": False, "error": None})
    monkeypatch.setattr(gemm_module, "FAST_PATH_AVAILABLE", True)
    monkeypatch.setattr(fk, "_bn", _compile_failure)
    monkeypatch.setattr(fk, "_state", {"ok": None, "error": None})
    monkeypatch.setattr(gemm_module, "_warned", set())


def test_kernels_that_fail_to_compile_warn_once_each_and_the_reference_serves(broken_kernels, rng):
    prog, feed = _program(rng)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        runs = [execute_fp16(prog, [feed], fast=True)[0] for _ in range(3)]
    want = execute_fp16(prog, [feed], fast=False)[0]
    for got in runs:
        assert_same_bits(got, want)
    ours = [str(w.message) for w in seen if issubclass(w.category, FastPathWarning)]
    assert len(ours) == 2, ours  # one per kernel, not one per call
    gemm_msg, bn_msg = sorted(ours, key=lambda m: "batch_norm" in m)
    for msg in ours:
        assert "TypingError: simulated compile failure" in msg, msg
        assert "second line" not in msg, msg  # the reason's first line, not numba's dump
        assert "reference" in msg, msg
    assert "gemm" in gemm_msg and "batch_norm" in bn_msg
    assert gemm_module.FAST_PATH_AVAILABLE is False
    with pytest.raises(RuntimeError, match="simulated compile failure"):
        gemm_module.gemm_fast(np.ones((1, 2, 3), np.float16), np.ones((1, 3, 2), np.float16))


def test_the_warning_is_an_aneforge_warning():
    assert issubclass(FastPathWarning, AneforgeWarning)
    assert issubclass(FastPathWarning, RuntimeWarning)  # what gemm used to raise


def test_gemm_alone_warns_once_over_many_calls(broken_kernels, rng):
    a = rng.standard_normal((1, 5, 9)).astype(np.float16)
    b = rng.standard_normal((1, 9, 3)).astype(np.float16)
    with pytest.warns(FastPathWarning, match="gemm") as seen:
        for _ in range(4):
            assert_same_bits(gemm_module.gemm(a, b), gemm_module.gemm_reference(a, b))
    assert len([w for w in seen if issubclass(w.category, FastPathWarning)]) == 1
