"""Fast emulation kernels give the same bits as the step-by-step contract."""

import numpy as np
import pytest

from aneforge.graph.ops import norm
from aneforge.graph.ops.common import step_kernels


def _edge_values(rng, shape):
    x = (rng.standard_normal(shape) * rng.choice([1e-5, 1.0, 300.0], shape)).astype(np.float16)
    flat = x.reshape(-1)
    flat[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 6e-8]
    return x


@pytest.mark.parametrize("has_weight,has_bias", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_norm_fast_kernel_matches_the_steps(seed, has_weight, has_bias):
    rng = np.random.default_rng(seed)
    c = 7
    x = _edge_values(rng, (2, c, 5, 3))
    mean = (rng.standard_normal(c) * 3).astype(np.float16)
    var = rng.uniform(1e-6, 50, c).astype(np.float16)
    var[0] = 0.0
    params = [x, mean, var]
    if has_weight:
        params.append((rng.standard_normal(c) * 2).astype(np.float16))
    if has_bias:
        params.append(rng.standard_normal(c).astype(np.float16))
    attrs = {"eps": 1e-5, "has_weight": has_weight, "has_bias": has_bias}
    slow, _ = step_kernels(norm._batch_norm)
    want = np.asarray(slow(params, attrs), np.float16)
    got = norm._batch_norm_emulate(params, attrs)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
