"""Shared test helpers and the named tolerances of the fp16 model.

Each tolerance is named after what it means (docs/numerics.md derives them):
- FP16_UNIT_ROUNDOFF: half an fp16 ulp relative, 2**-11; the bound of one rounded op.
- FP32_UNIT_ROUNDOFF: 2**-24; one float32 accumulator add.
- FP16_OP_NOISE: 1e-3, the relative error a clean chain of a few fp16 ops stays under.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FP16_UNIT_ROUNDOFF = 2.0**-11
FP32_UNIT_ROUNDOFF = 2.0**-24
FP16_OP_NOISE = 1e-3
FP16_TINY = 2.0**-24  # smallest fp16 subnormal: the absolute floor of one rounding


def _bit_mismatch(got, want) -> np.ndarray:
    """Where two same-shape fp16 arrays differ in bits (any NaN equals any NaN)."""
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    return (nan_got != nan_want) | (
        ~nan_got & ~nan_want & (got.view(np.uint16) != want.view(np.uint16))
    )


def same_bits(a, b) -> bool:
    """Equal shapes and fp16 bits, NaN equal to NaN whatever its payload."""
    a, b = np.asarray(a, np.float16), np.asarray(b, np.float16)
    return a.shape == b.shape and not _bit_mismatch(a, b).any()


def assert_same_bits(got, want):
    """Both float16, the same shape and the same bits everywhere (any NaN equals any
    NaN); on failure, say how many differ and show the first as values and bits."""
    assert got.dtype == np.float16 and want.dtype == np.float16
    assert got.shape == want.shape
    bad = _bit_mismatch(got, want)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{int(bad.sum())} of {bad.size} outputs differ; first at {idx}: "
            f"got {got[idx]!r} (0x{int(got.view(np.uint16)[idx]):04x}), "
            f"want {want[idx]!r} (0x{int(want.view(np.uint16)[idx]):04x})"
        )


def fp16_values(rng, shape, scale=1.0):
    """Random normal values already representable in fp16, as float64."""
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float64)


def matmul_error_bound(a, b):
    """Bound on |emulated - exact| of a @ b under the wide-accumulator contract.

    Each product rounds with relative error <= u16, the float32 sum adds <= K*u32 of the
    absolute products, and the result rounds once more (<= u16 of its magnitude).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a.shape[-1]
    absprod = np.abs(a) @ np.abs(b)
    exact = a @ b
    return (
        (FP16_UNIT_ROUNDOFF + k * FP32_UNIT_ROUNDOFF) * absprod * (1 + FP16_UNIT_ROUNDOFF)
        + FP16_UNIT_ROUNDOFF * np.abs(exact)
        + FP16_TINY
    )


def narrow_sum_error_bound(x, axis=-1):
    """Bound on |narrow_sum(x) - sum(x)|: each of K partial roundings <= u16 * sum|x|."""
    x = np.asarray(x, np.float64)
    k = x.shape[axis] if x.ndim else 1
    return k * FP16_UNIT_ROUNDOFF * np.sum(np.abs(x), axis=axis) * 1.01 + k * FP16_TINY


@pytest.fixture
def rng():
    """A seeded generator: every test sees the same data on every run."""
    return np.random.default_rng(1234)


# Environments that make numba take the portable (integer-only) fp16 rounding:
# forced by aneforge's switch, or a generic CPU without F16C.
PORTABLE_ENVS = [
    {"ANEFORGE_EMU_GEMM_PORTABLE": "1"},
    {"NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": ""},
]
PORTABLE_IDS = ["forced", "generic-cpu"]


def run_python_with_env(script: str, env: dict) -> None:
    """Run ``script`` in a fresh interpreter with ``env`` added; fail with its output."""
    src = Path(__file__).resolve().parents[1] / "src"
    full_env = dict(os.environ, **env)
    full_env["PYTHONPATH"] = os.pathsep.join([str(src), full_env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


GOLDEN = Path(__file__).resolve().parent / "golden"


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/**/*.txt from what the printers give now",
    )


@pytest.fixture
def golden(request):
    """``golden(path, text)``: ``text`` must equal ``tests/golden/<path>``; with
    ``pytest --update-golden`` the file is (re)written instead. Review the diff of an
    update like any code change: the files are the printers' contract."""
    update = request.config.getoption("--update-golden")

    def check(path: str, text: str) -> None:
        file = GOLDEN / path
        text = text.rstrip("\n") + "\n"
        if update:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_text(text, encoding="utf-8")
            return
        assert file.exists(), f"no golden file {file}; run pytest --update-golden"
        want = file.read_text(encoding="utf-8")
        assert text == want, (
            f"{path} changed (pytest --update-golden rewrites it):\n--- golden\n{want}"
            f"--- now\n{text}"
        )

    return check
