"""ONNX's backend node tests through `autoconfig.backend` (generated kernels, parameters
bound at build time as a deployment holds them): every test whose operators are all in
the operator table passes, or is refused as listed below with its one-line reason. A
refusal that starts passing fails here too, so the list stays the truth."""

from __future__ import annotations

import functools
import re
from dataclasses import replace

import onnx
import pytest

from autoconfig import conformance
from autoconfig.backend import AutoconfigBackend
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs

pytestmark = pytest.mark.slow  # builds every float32 node test

REFUSED: dict[str, str] = {
    # test-name pattern: the reason's words (a regular expression)
    r"test_batchnorm_.*_training_mode": r"BatchNormalization in training mode is not generated",
    r"test_identity_(sequence|opt)": r"is a (sequence|optional) value, not a tensor",
    r"test_dropout_default_mask(_ratio)?": r"\(Dropout\): its mask output is not generated",
    r"test_training_dropout.*": r"\(Dropout\): training mode is not generated",
    r"test_maxpool_with_argmax_.*": r"the Indices output of MaxPool is not generated",
    r"test_causal_conv_with_state_(?!.*fp16).*": r"\(Conv\): only 2-D convolutions with constant weights",
    r"test_gridsample_volumetric_.*": r"\(GridSample\): only 2-D sampling",
    r"test_affine_grid_3d(_align_corners)?": r"\(AffineGrid\): only a constant 2-D size",
}
"""Float32 node tests refused today, by name pattern, with the reason they are refused
for; every test with a tensor of another type is refused for one of NOT_FLOAT32's."""

TYPED_PASSING = (r"test_arg(max|min)_.*", r"test_(greater|less)(_equal)?(_bcast)?(_expanded)?", r"test_isnan",
                 r"test_pow_types_float32_u?int(32|64)",
                 r"test_onehot_(negative_indices|out_of_range_indices|without_axis)",
                 r"test_mod_(int64_fmod|mixed_sign_int64)",
                 r"test_isinf(_negative|_positive)?", r"test_(min|max)_int64", r"test_top_k(_smallest|_negative_axis)?",
                 r"test_tri[lu](?!_zero).*",  # tri[lu]_zero: an empty result folds to a constant output
                 r"test_optional_has_element_empty_.*",
                 r"test_rotary_embedding(_3d_input|_interleaved|_with_rotary_dim|_with_interleaved_rotary_dim)?",
                 r"test_attention_4d_(causal_nonpad_(batch_prefill|continued_prefill|negative_offset_structural_empty)"
                 r"|diff_heads_mask4d_padded_kv|gqa_causal_nonpad_decode)(_expanded)?",
                 r"test_attention_local_window_ext_cache_rank\d(_\w+)?_mask(_expanded)?")
"""Node tests with an int64 or bool tensor that pass: int64 inputs and results the
model computes as float32 values (exact below 2^24), int64 and bool outputs delivered
in their own types; a float's power by integer exponents; one-hot rows of int64
indices; mods of int64 values; int64 positions and lengths of attention's function
bodies and rotary embedding's positions (rows of its run-time caches); an output folded to a
constant bool."""

NOT_FLOAT32 = (r"only float32 models|ONNX opset \d+ is not supported|a cast to \w+ is not generated|int64 values "
               r"computed at run time are not generated")
"""Why a test with a tensor neither float32 nor an int64 input is refused: its type, the
opset its operator's typed variants need, or a cast to a type not generated."""


@functools.cache
def table_tests() -> dict[str, conformance.NodeTest]:
    return {t.name: t for t in conformance.node_tests() if conformance.in_table(t)}


def expected_refusal(name: str) -> str | None:
    listed = next((why for pattern, why in REFUSED.items() if re.fullmatch(pattern, name)), None)
    typed = not table_tests()[name].float32() and not any(re.fullmatch(p, name) for p in TYPED_PASSING)
    return listed or (NOT_FLOAT32 if typed else None)


@pytest.mark.parametrize("name", sorted(table_tests()))
def test_node_test_passes_or_is_refused_as_listed(name):
    require_runnable(get_target("avx2"))
    test = table_tests()[name]
    if name in conformance.SPEC_OVER_REFERENCE:
        test = replace(test, data_sets=tuple((inputs, onnxruntime_outputs(test.model, dict(zip(
            [i.name for i in test.model.graph.input], inputs)))) for inputs, _ in test.data_sets))  # fmt: skip
        assert not conformance.run(table_tests()[name], profile=PROFILES["avx2"], target="avx2").status == "passed"
    outcome = conformance.run(test, profile=PROFILES["avx2"], target="avx2")
    why = expected_refusal(name)
    if why is None:
        assert outcome.status == "passed", f"{outcome.status}: {outcome.detail}"
    else:
        assert outcome.status == "refused" and re.search(why, outcome.detail), f"{outcome.status}: {outcome.detail}"
        assert "\n" not in outcome.detail


def test_most_float32_node_tests_in_the_table_pass():
    """The share of float32 node tests (in the table) that are not refused: the floor
    rises as operators' variants land, and never falls."""
    floats = [t for t in table_tests().values() if t.float32()]
    refused = [t.name for t in floats if expected_refusal(t.name)]
    assert len(floats) - len(refused) >= 0.95 * len(floats), refused


def test_parameters_are_bound_and_data_inputs_stay_inputs():
    test = table_tests()["test_clip_default_inbounds"]
    assert conformance.parameter_inputs(test.model) == []
    resize = table_tests()["test_resize_upsample_scales_nearest"]
    assert conformance.parameter_inputs(resize.model) == ["scales"]  # roi is given as ""
    rep = AutoconfigBackend.prepare(resize.model, profile=PROFILES["avx2"], target="avx2")
    assert rep.parameters == ["scales"] and rep.inputs == ["X", "scales"]


def test_onnx_backend_test_drives_the_backend():
    """onnx's own `BackendTest` runs node tests through the backend."""
    require_runnable(get_target("avx2"))
    from onnx.backend.test import BackendTest

    class Backend(AutoconfigBackend):
        @classmethod
        def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs):
            return super().prepare(model, device, profile=PROFILES["avx2"], target="avx2", **kwargs)

    suite = BackendTest(Backend, __name__)
    suite.include(r"^test_relu_cpu$").include(r"^test_conv_with_strides_padding_cpu$")
    cases = suite.test_cases
    assert sum(len([m for m in dir(c) if m.startswith("test_")]) for c in cases.values()) >= 2
    import unittest

    result = unittest.TextTestRunner(verbosity=0).run(unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromTestCase(c) for c in cases.values()))  # fmt: skip
    assert result.wasSuccessful() and result.testsRun >= 2
