"""The Reduce operators, GlobalMaxPool, LogSoftmax, Hardmax, LpNormalization and the Lp
pools, built and run against
onnxruntime: over one axis and over the spatial axes, reduced axes kept or dropped, on
inputs of both signs (large ones where e^x overflows float32 unless shifted)."""

from __future__ import annotations

import numpy as np
import pytest

from autoconfig.errors import AutoconfigError
from autoconfig.graph import reference
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import onnxruntime_outputs
from tests.test_random_graphs import assert_close, built_outputs

SHAPE = [2, 6, 5, 7]


def reduced_shape(axes: list[int], keepdims: int) -> list[int]:
    return [1 if a in axes else d for a, d in enumerate(SHAPE) if keepdims or a not in axes]


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", sorted(reference.REDUCTIONS))
def test_each_reduction_over_one_axis_and_the_spatial_ones_matches_onnxruntime(op, keepdims):
    require_runnable(get_target("avx2"))
    b = zoo.Builder(f"reduce_{op}", 5)
    x = b.op("Abs", ["input"]) if op == "ReduceLogSum" else "input"  # its sum must be positive
    outputs = []
    for axes in ([1], [2, 3]):
        y = b.op(op, [x, b.const("axes", np.array(axes, np.int64))], keepdims=keepdims)
        outputs.append((y, reduced_shape(axes, keepdims)))
    model = b.model("input", SHAPE, outputs, opset=18)
    scale = 100 if op == "ReduceLogSumExp" else 3
    x = (scale * np.random.default_rng(4).standard_normal(SHAPE)).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 2), onnxruntime_outputs(model, {"input": x}))


def test_global_max_pool_after_a_convolution_matches_onnxruntime():
    require_runnable(get_target("avx2"))
    b = zoo.Builder("global_max", 5)
    y = b.op("GlobalMaxPool", [b.conv("input", 6, 16, 3)])
    model = b.model("input", SHAPE, [(y, [2, 16, 1, 1])])
    x = np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 2), onnxruntime_outputs(model, {"input": x}))


@pytest.mark.parametrize("opset, axis", [(11, 1), (17, 1), (17, -1)])
def test_log_softmax_matches_onnxruntime(opset, axis):
    """LogSoftmax on large values of both signs (e^x overflows unless shifted), along one
    axis, and before opset 13 along the axes from it flattened."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("log_softmax", 5)
    y = b.op("LogSoftmax", ["input"], axis=axis)
    model = b.model("input", SHAPE, [(y, SHAPE)], opset=opset)
    x = (100 * np.random.default_rng(6).standard_normal(SHAPE)).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))


@pytest.mark.parametrize("opset, axis", [(11, 1), (17, 1), (17, -1)])
def test_hardmax_marks_the_first_maximum_as_onnxruntime_does(opset, axis):
    """Hardmax on values rounded to tenths (ties: the first maximum wins), along one axis,
    and before opset 13 along the axes from it flattened."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("hardmax", 5)
    y = b.op("Hardmax", ["input"], axis=axis)
    model = b.model("input", SHAPE, [(y, SHAPE)], opset=opset)
    x = np.round(np.random.default_rng(7).standard_normal(SHAPE), 1).astype(np.float32)
    out, expected = built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x})
    np.testing.assert_array_equal(out[0], expected[0])


@pytest.mark.parametrize("p", [1, 2])
def test_lp_normalization_matches_onnxruntime_with_an_all_zero_slice(p):
    """LpNormalization along the channels and the last axis; one pixel's channels (and so
    one row's last axis there) all zero: its norm is 0, its output 0."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("lp_normalization", 5)
    outputs = [(b.op("LpNormalization", ["input"], axis=axis, p=p), SHAPE) for axis in (1, -1)]
    model = b.model("input", SHAPE, outputs, opset=17)
    x = (3 * np.random.default_rng(8).standard_normal(SHAPE)).astype(np.float32)
    x[1, :, 2, :] = 0
    assert_close(built_outputs(model, {"input": x}, "dp", 2), onnxruntime_outputs(model, {"input": x}))


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pools_match_onnxruntime(p):
    """LpPool with pads, strides and ceil mode, one with SAME_UPPER, and GlobalLpPool, on
    inputs of both signs (|x|^p: odd powers of negatives must not cancel)."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("lp_pool", 5)
    outputs = [(b.op("LpPool", ["input"], kernel_shape=[3, 2], pads=[1, 0, 1, 0], strides=[2, 2], ceil_mode=1, p=p),
                [2, 6, 3, 4]),
               (b.op("LpPool", ["input"], kernel_shape=[2, 2], auto_pad="SAME_UPPER", p=p), SHAPE),
               (b.op("GlobalLpPool", ["input"], p=p), [2, 6, 1, 1])]  # fmt: skip
    model = b.model("input", SHAPE, outputs, opset=18)
    x = (2 * np.random.default_rng(9).standard_normal(SHAPE)).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 2), onnxruntime_outputs(model, {"input": x}))


def test_an_lp_pool_window_onnxruntime_drops_is_refused():
    """A ceil-mode window that would start in the end padding: onnx's shape inference
    keeps it, onnxruntime drops it; the build refuses, naming the node."""
    b = zoo.Builder("lp_pool_overhang", 5)
    y = b.op("LpPool", ["input"], kernel_shape=[2], strides=[2], pads=[0, 1], ceil_mode=1)
    model = b.model("input", [1, 2, 4], [(y, [1, 2, 3])], opset=18)
    with pytest.raises(AutoconfigError, match=r"\(LpPool\): .*drop a ceil_mode window that starts in the padding"):
        import_model(model)
