"""The explicit arithmetic policy (graph/arith.py): what each constructor computes."""

from __future__ import annotations

import numpy as np
import pytest

import aneforge as af
from aneforge.emulator.chips import chip_numerics
from aneforge.emulator.gemm import gemm_reference
from aneforge.emulator.interpreter import execute_fp16
from aneforge.graph.arith import GENERIC, Arith, as_arith
from aneforge.graph.fp16 import narrow_sum, round_fp16
from aneforge.graph.registry import get_op
from aneforge.optimizer.precision_tune import FP32_FAITHFUL_ARITH, wide_gemm


def test_the_policy_narrow_sum_is_the_pure_function_with_its_options(rng):
    x = round_fp16(rng.standard_normal((3, 1000)) * 8)
    for arith in (GENERIC, Arith(route=192), Arith(wide="fp16"), Arith(wide="float32")):
        want = narrow_sum(x, -1, keepdims=True, route=arith.route, wide=arith.wide)
        assert arith.narrow_sum(x, -1, keepdims=True).tobytes() == want.tobytes()
    # the reference for the route: chunks of 192 summed narrowly, then their partials
    chunks = [narrow_sum(x[:, i : i + 192], -1) for i in range(0, 1000, 192)]
    routed = narrow_sum(np.stack(chunks, axis=-1), -1)
    assert Arith(route=192).narrow_sum(x, -1).tobytes() == routed.tobytes()


def test_a_chip_policy_saturates_its_matmul_and_routes_its_sums():
    arith = chip_numerics("M1").arith(gemm_reference)
    a = np.full((1, 1, 2), 128.0, np.float16)
    b = np.full((1, 2, 1), 130.0, np.float16)  # 2 * 128 * 130 = 33280 > 32752
    assert float(gemm_reference(a, b)[0, 0, 0]) == 33280.0
    assert float(arith.matmul(a, b)[0, 0, 0]) == np.inf
    assert arith.route == 192
    assert float(arith.narrow_sum(np.ones(4096, np.float16), 0)) == 4096.0


def test_kernels_take_a_policy_a_bare_backend_or_none_alike(rng):
    x = round_fp16(rng.standard_normal((4, 300)))
    w = round_fp16(rng.standard_normal((300, 5)))
    matmul = get_op("matmul")
    want = matmul.emulate([x, w], {}, Arith.generic(gemm_reference))
    assert matmul.emulate([x, w], {}, gemm_reference).tobytes() == want.tobytes()
    softmax = get_op("softmax")
    want = softmax.emulate([x], {"axis": -1}, GENERIC)
    assert softmax.emulate([x], {"axis": -1}).tobytes() == want.tobytes()
    assert as_arith(gemm_reference).backend is gemm_reference
    with pytest.raises(TypeError, match="no contraction backend"):
        matmul.emulate([x, w], {}, None)
    with pytest.raises(TypeError):
        as_arith(3)
    with pytest.raises(ValueError):
        Arith(wide="float64")


def test_the_executor_passes_the_chip_policy_to_every_kernel():
    x = af.input((4096,))
    prog = af.compile(x.sum(), opt=0)
    ones = [np.ones(4096, np.float16)]
    assert float(execute_fp16(prog, ones, target=None)[0]) == 2048.0
    assert float(execute_fp16(prog, ones, target="M1")[0]) == 4096.0
    assert float(execute_fp16(prog, ones, target=None)[0]) == 2048.0


def test_the_fp32_faithful_policy_is_the_wide_matmul_and_the_unrounded_wide_sum():
    assert FP32_FAITHFUL_ARITH.backend is wide_gemm
    total = FP32_FAITHFUL_ARITH.narrow_sum(np.ones(4096, np.float16), 0)
    assert total.dtype == np.float32 and float(total) == 4096.0
