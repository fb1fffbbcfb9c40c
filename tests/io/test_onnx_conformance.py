"""A fast, fixed subset of the ONNX backend node tests (bench/onnx_conformance.py).

Each case is imported with ``from_onnx``, compiled, run on the fp16 emulator and
compared with the outputs the ``onnx`` package ships, at the bench's fp16 tolerance
(8u relative to the value and to the output's scale, u = 2**-11; derived in the bench's
docstring). The subset spans the op families the engine expresses: elementwise math and
activations, contractions, convolution and pooling, normalizations, reductions, softmax,
movement and indexing, resizing, recurrences, spectral ops and ONNX functions expanded
into their bodies. The full run is ``python bench/onnx_conformance.py``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnx", reason="onnx is a test dependency")

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "onnx_conformance.py"
_spec = importlib.util.spec_from_file_location("onnx_conformance", _BENCH)
conformance = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("onnx_conformance", conformance)  # dataclasses look it up
_spec.loader.exec_module(conformance)

SUBSET = [
    # elementwise math and activations
    "test_abs", "test_add_bcast", "test_div_example", "test_pow_bcast_array", "test_sqrt",
    "test_exp", "test_log", "test_erf", "test_sign", "test_round", "test_clip",
    "test_clip_default_max", "test_elu", "test_selu", "test_leakyrelu", "test_hardsigmoid",
    "test_hardswish", "test_gelu_tanh_1", "test_mish", "test_softsign", "test_prelu_broadcast",
    "test_thresholdedrelu", "test_shrink_hard", "test_sinh", "test_swish", "test_where_example",
    "test_max_float32", "test_mean_two_inputs", "test_mod_mixed_sign_float32",
    # contractions, convolution, pooling
    "test_matmul_3d", "test_gemm_all_attributes", "test_conv_with_autopad_same",
    "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose_autopad_same",
    "test_convtranspose_output_shape", "test_maxpool_2d_ceil", "test_maxpool_2d_dilations",
    "test_maxpool_3d_default", "test_averagepool_2d_pads_count_include_pad",
    "test_averagepool_2d_ceil", "test_lppool_2d_default", "test_globalaveragepool",
    "test_maxunpool_export_with_output_shape", "test_col2im_pads",
    # normalizations, reductions, softmax, index ops
    "test_batchnorm_example", "test_instancenorm_example", "test_group_normalization_example",
    "test_layer_normalization_3d_axis1_epsilon", "test_rms_normalization_3d_axis1_epsilon",
    "test_l2normalization_axis_1", "test_lrn", "test_mvn", "test_reduce_l2_keep_dims_random",
    "test_reduce_log_sum_desc_axes", "test_reduce_mean_keepdims_random",
    "test_reduce_prod_do_not_keepdims_random", "test_softmax_axis_1",
    "test_logsoftmax_axis_0", "test_hardmax_axis_2", "test_maxpool_2d_pads",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    # movement and indexing
    "test_reshape_negative_extended_dims", "test_flatten_negative_axis2",
    "test_transpose_all_permutations_4", "test_slice_neg_steps", "test_split_equal_parts_2d",
    "test_expand_dim_changed", "test_tile", "test_gather_2d_indices",
    "test_gather_elements_negative_indices", "test_gathernd_example_float32",
    "test_scatter_elements_with_duplicate_indices", "test_scatternd_add",
    "test_depthtospace_example", "test_spacetodepth", "test_constant_pad_axes",
    "test_convtranspose_pads",
    "test_center_crop_pad_crop_and_pad", "test_reversesequence_time", "test_onehot_with_axis",
    # resizing, recurrences, spectral ops, functions, attention
    "test_resize_upsample_scales_linear", "test_resize_downsample_scales_cubic",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel", "test_resize_tf_crop_and_resize",
    "test_lstm_with_peepholes", "test_gru_with_initial_bias", "test_simple_rnn_batchwise",
    "test_dft_inverse", "test_stft_with_window", "test_attention_4d_gqa",
    "test_rotary_embedding", "test_affine_grid_2d", "test_sce_mean_weight",
]  # fmt: skip


@pytest.fixture(scope="module")
def cases():
    found = {c.name: c for c in conformance.load_cases(set(SUBSET))}
    missing = sorted(set(SUBSET) - set(found))
    assert not missing, f"not eligible node tests: {missing}"
    return found


@pytest.mark.parametrize("name", SUBSET)
def test_node_case_passes_at_the_fp16_tolerance(cases, name):
    result = conformance.run_case(cases[name])
    assert result.status == "pass", f"{result.status}: {result.detail}"


def test_the_tolerance_catches_a_wrong_answer():
    import numpy as np

    want = np.array([1.0, -2.0, 0.5])
    assert conformance.within(want * (1 + 2**-10), want)[0]
    assert not conformance.within(want * (1 + 2**-6), want)[0]
    assert not conformance.within(np.array([1.0, np.nan, 0.5]), want)[0]
