"""Outputs that are not float32: ArgMax, ArgMin and TopK (int64), comparisons (bool), integer
arithmetic on int64 inputs (int64), each delivered in its ONNX type and equal to
onnxruntime's; an int64 input beyond what float32 keeps exact is an error, not a wrong
answer."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import autoconfig
from autoconfig.bench import bench
from autoconfig.errors import AutoconfigError
from autoconfig.graph import zoo
from autoconfig.graph.reference import top_k as ref_top_k
from autoconfig.graph.simplify import TOP_K_ROUNDS
from autoconfig.profile import load_profile
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs


def segmenter(op: str, channels: int, attrs: dict) -> onnx.ModelProto:
    """A 3x3 convolution to `channels` class scores per pixel, then `op` over them (or
    over another axis), and whether each score is positive (a bool output)."""
    b = zoo.Builder(f"{op.lower()}_{channels}", 11)
    scores = b.conv("input", 8, channels, 3, bias=True)
    index = b.op(op, [scores], **attrs)
    positive = b.op("Greater", [scores, b.const("zero", np.float32(0))])
    model = b.model("input", [1, 8, 12, 10], [(index, None), (positive, None)])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    model.graph.output[1].type.tensor_type.elem_type = TensorProto.BOOL
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(model)


def run_both(model: onnx.ModelProto, inputs: dict[str, np.ndarray], tmp_path, target: str = "avx2"):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    autoconfig.compile_model(path, tmp_path / "built", profile=PROFILES[target], target=get_target(target))
    ours = autoconfig.load(tmp_path / "built")(inputs)
    return list(ours.values()), onnxruntime_outputs(model, inputs)


CASES = [
    ("ArgMax", 21, {"axis": 1}),
    ("ArgMax", 32, {"axis": 1, "keepdims": 0}),  # channels in whole AVX blocks
    ("ArgMin", 16, {"axis": -1, "select_last_index": 1}),
    ("ArgMax", 5, {"axis": 2, "keepdims": 0, "select_last_index": 1}),
]


@pytest.mark.parametrize("op,channels,attrs", CASES)
def test_arg_extremes_match_onnxruntime(tmp_path, op, channels, attrs):
    require_runnable(get_target("avx2"))
    x = np.random.default_rng(channels).standard_normal((1, 8, 12, 10)).astype(np.float32)
    model = segmenter(op, channels, attrs)
    ours, expected = run_both(model, {"input": x}, tmp_path)
    for got, want in zip(ours, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want)


def test_ties_and_nans_pick_the_reference_index(tmp_path):
    """Equal maxima: the first (or, select_last_index, the last); a NaN counts as the
    largest, as in onnx's reference."""
    require_runnable(get_target("avx2"))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])
    nodes = [helper.make_node("ArgMax", ["x"], ["first"], axis=1),
             helper.make_node("ArgMax", ["x"], ["last"], axis=1, select_last_index=1)]  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [3, 1]) for n in ("first", "last")]
    graph = helper.make_graph(nodes, "ties", [x], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    values = np.array([[1, 3, -2, 3, 0, 3], [-5, np.nan, -1, np.nan, -2, -3], [-1, -1, -1, -1, -1, -1]], np.float32)
    ours, _ = run_both(model, {"x": values}, tmp_path)
    assert ours[0].ravel().tolist() == [1, 1, 0] and ours[1].ravel().tolist() == [5, 3, 5]


def integer_model() -> onnx.ModelProto:
    """The larger of two int64 inputs, plus one: int64 arithmetic, an int64 output."""
    a, b = (helper.make_tensor_value_info(n, TensorProto.INT64, [4, 5]) for n in ("a", "b"))
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    nodes = [helper.make_node("Max", ["a", "b"], ["m"]), helper.make_node("Add", ["m", "one"], ["y"])]
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [4, 5])
    return helper.make_model(helper.make_graph(nodes, "integers", [a, b], [y], [one]),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # fmt: skip


def test_int64_arithmetic_is_exact_or_refused_at_run_time(tmp_path):
    require_runnable(get_target("avx2"))
    rng = np.random.default_rng(2)
    a, b = (rng.integers(-(2**24), 2**24 - 1, (4, 5)) for _ in range(2))
    ours, expected = run_both(integer_model(), {"a": a, "b": b}, tmp_path)
    assert ours[0].dtype == np.int64 and np.array_equal(ours[0], expected[0])
    a[2, 3] = 2**24 + 1  # float32 would round it
    with pytest.raises(AutoconfigError, match=r"status 4 \(an int64 input beyond \+-2\^24"):
        autoconfig.load(tmp_path / "built")({"a": a, "b": b})


def test_typed_outputs_cross_a_target_run_by_its_driver(tmp_path):
    """Built for NEON and run under qemu-user: the driver writes each output's own bytes."""
    require_runnable(get_target("neon"))
    x = np.random.default_rng(4).standard_normal((1, 8, 12, 10)).astype(np.float32)
    ours, expected = run_both(segmenter("ArgMax", 21, {"axis": 1}), {"input": x}, tmp_path, "neon")
    assert [o.dtype for o in ours] == [np.int64, np.bool_]
    assert all(np.array_equal(o, e) for o, e in zip(ours, expected, strict=True))


def test_bench_checks_typed_outputs(monkeypatch, tmp_path):
    """`autoconfig bench` holds int64 and bool outputs to onnxruntime's as numbers."""
    require_runnable(get_target("avx2"))
    monkeypatch.setattr("autoconfig.probe.host_profile", lambda: load_profile(PROFILES["avx2"]))
    path = tmp_path / "segmenter.onnx"
    onnx.save(segmenter("ArgMax", 21, {"axis": 1}), path)
    lines: list[str] = []
    assert bench(path, threads=1, repeat=2, say=lines.append)
    assert sum("autoconfig max |error| 0 " in line and line.endswith("(ok)") for line in lines) == 2


def top_k_model(shape: list[int], k: int, attrs: dict) -> onnx.ModelProto:
    """TopK of a computed tensor (its values and int64 indices as outputs)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node("TopK", ["t", "k"], ["values", "indices"], **attrs)]  # fmt: skip
    outputs = [helper.make_tensor_value_info("values", TensorProto.FLOAT, None),
               helper.make_tensor_value_info("indices", TensorProto.INT64, None)]  # fmt: skip
    graph = helper.make_graph(nodes, "top_k", [x], outputs, [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)


TOP_K = [([2, 10], 3, {}), ([3, 7, 5], 4, {"axis": 1, "largest": 0}), ([4, 9], 9, {}), ([2, 3, 6], 1, {"axis": 0}),
         ([1, 1000], 5, {"sorted": 0})]  # fmt: skip


@pytest.mark.parametrize("shape,k,attrs", TOP_K)
def test_top_k_matches_onnxruntime_with_ties(tmp_path, shape, k, attrs):
    require_runnable(get_target("avx2"))
    x = np.round(np.random.default_rng(k).standard_normal(shape), 1).astype(np.float32)  # equal values
    ours, expected = run_both(top_k_model(shape, k, attrs), {"x": x}, tmp_path)
    assert [o.dtype for o in ours] == [np.float32, np.int64]
    if attrs.get("sorted", 1) == 0:  # any order: onnxruntime's is by index
        order = np.argsort(ours[1], axis=-1)
        ours = [np.take_along_axis(o, order, axis=-1) for o in ours]
    assert np.array_equal(ours[1], expected[1]) and np.allclose(ours[0], expected[0], atol=1e-6)


def test_top_k_puts_nans_where_the_reference_does(tmp_path):
    """A NaN is the largest: first of the largest, last of the smallest (onnx's reference)."""
    require_runnable(get_target("avx2"))
    values = np.array([[1, np.nan, 3, 3, -np.inf, 2]], np.float32)
    for largest in (1, 0):
        model = top_k_model([1, 6], 4, {"largest": largest})
        model.graph.node[0].op_type = "Identity"
        (tmp_path / str(largest)).mkdir()
        ours, _ = run_both(model, {"x": values}, tmp_path / str(largest))
        want = ref_top_k({"largest": largest}, values, np.array([4]))
        assert np.array_equal(ours[1], want[1]) and np.array_equal(ours[0], want[0], equal_nan=True)


def test_top_k_beyond_its_rounds_is_refused_in_one_line(tmp_path):
    path = tmp_path / "top_k.onnx"
    onnx.save(top_k_model([2, 40], TOP_K_ROUNDS + 1, {}), path)
    why = rf"top_k.onnx: node 'TopK_1' \(TopK\): K={TOP_K_ROUNDS + 1} is more than"
    with pytest.raises(AutoconfigError, match=why):
        autoconfig.compile_model(path, tmp_path / "built", profile=PROFILES["avx2"])
