"""Hostile input: broken files, contradicting or extreme attributes, NaN and Inf, a
build stopped half way. Each gives one error line (exit status 2 from the CLI, the
project's exception from Python) or onnxruntime's own answer; never a traceback, a hang
or a half-written output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import autoconfig
from autoconfig.cli import main
from autoconfig.errors import AutoconfigError
from autoconfig.graph import zoo
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs, small_cnn
from tests.test_random_graphs import built_outputs


def build_fails(tmp_path: Path, capsys, path: Path, fragment: str) -> None:
    """`autoconfig build` of `path` prints one line holding `fragment`, exits 2 and
    leaves nothing in the output's directory but what was there."""
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["build", str(path), "--out", str(tmp_path / "out"), "--profile", str(PROFILES["avx2"]),
                 "--target", "avx2"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def saved(tmp_path: Path, model: onnx.ModelProto, name: str = "model.onnx") -> Path:
    onnx.save(model, tmp_path / name)
    return tmp_path / name


def conv_model(weight: np.ndarray, **attrs) -> onnx.ModelProto:
    b = zoo.Builder("conv", 0)
    y = b.op("Conv", ["input", b.const("w", weight)], kernel_shape=list(weight.shape[2:]), **attrs)
    return b.model("input", [1, 3, 8, 8], [(y, None)])


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "empty"])
def test_a_broken_onnx_file_is_one_line(tmp_path, capsys, damage):
    data = small_cnn().SerializeToString()
    broken = {"truncated": data[: len(data) // 2], "random bytes": np.random.default_rng(0).bytes(4096),
              "empty": b"x"}[damage]  # fmt: skip
    (tmp_path / "model.onnx").write_bytes(broken)
    build_fails(tmp_path, capsys, tmp_path / "model.onnx", "is not a valid ONNX model")


def test_weights_that_contradict_the_declared_shapes_are_named(tmp_path, capsys):
    path = saved(tmp_path, conv_model(np.ones((4, 5, 3, 3), np.float32)))
    build_fails(tmp_path, capsys, path, "model.onnx: node 'conv_2' (Conv): the weight's 5 input channels")


def test_a_reshape_to_another_size_is_named(tmp_path, capsys):
    """onnx's shape inference takes a constant shape as given; the import checks it."""
    b = zoo.Builder("reshaped", 0)
    y = b.op("Reshape", ["input", b.const("shape", np.array([1, 3, 60], np.int64))])
    path = saved(tmp_path, b.model("input", [1, 3, 8, 8], [(y, None)]))
    build_fails(tmp_path, capsys, path, "model.onnx: node 'reshape_2' (Reshape): [1, 3, 8, 8] and [1, 3, 60] differ in size")


@pytest.mark.parametrize(("attrs", "fragment"), [
    ({"pads": [-1, 0, 0, 0]}, "pads must not contain negative values"),
    ({"strides": [0, 1]}, "strides must only contain positive values"),
    ({"dilations": [100, 1]}, "has a negative size (-192)"),
])  # fmt: skip
def test_negative_or_impossible_windows_are_one_line(tmp_path, capsys, attrs, fragment):
    build_fails(tmp_path, capsys, saved(tmp_path, conv_model(np.ones((4, 3, 3, 3), np.float32), **attrs)), fragment)


@pytest.mark.parametrize("op", ["Conv", "MaxPool", "AveragePool"])
@pytest.mark.parametrize(("pads", "strides"), [([0, 0, 0, 0], [1000, 1000]), ([2, 0, 1, 2], [9, 1000])])
def test_huge_strides_give_onnxruntimes_answer(tmp_path, op, pads, strides):
    """A stride past the padded input leaves one window along that axis: the build takes
    it as the padded extent instead of making stride² input phases for it."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("strided", 1)
    inputs = ["input"] + ([b.const("w", b.rng.standard_normal((4, 3, 3, 3)).astype(np.float32))] if op == "Conv" else [])
    y = b.op(op, inputs, kernel_shape=[3, 3], pads=pads, strides=strides)
    model = b.model("input", [1, 3, 8, 8], [(y, None)])
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(built_outputs(model, {"input": x}, "dp", 1)[0], onnxruntime_outputs(model, {"input": x})[0],
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_nan_and_inf_in_weights_and_inputs_propagate_as_onnxruntimes(tmp_path):
    """NaN and ±Inf through a convolution, activations, softmax, clip, global and max
    pooling: the same NaNs and the same values elsewhere. (A max pool's window holding
    NaN and numbers answers by its taps' order, as onnxruntime's does along a row —
    onnxruntime answers otherwise along a column — so NaN meets max pooling here in
    one-row windows only.)"""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("nan", 0)
    w = b.rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[1, 0, 0, 0], w[2, 1, 1, 1] = np.nan, np.inf
    y = b.op("Conv", ["input", b.const("w", w)], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    outs = [b.op(op, [y]) for op in ("Relu", "Sigmoid", "Tanh")]
    outs += [b.op("Softmax", [y], axis=1), b.op("GlobalAveragePool", [y]),
             b.op("Clip", [y, b.const("lo", np.float32(-1)), b.const("hi", np.float32(1))]),
             b.op("MaxPool", ["input"], kernel_shape=[1, 2], strides=[1, 2]),
             b.op("MaxPool", [b.op("Relu", ["input"])], kernel_shape=[2, 2])]  # fmt: skip
    model = b.model("input", [1, 3, 6, 6], [(o, None) for o in outs])
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    x[0, 0, 2, 2], x[0, 1, 3, 3], x[0, 2, 0, 1] = np.inf, -np.inf, np.nan
    for fusion in ("dp", "none"):
        for name, ours, want in zip(outs, built_outputs(model, {"input": x}, fusion, 1), onnxruntime_outputs(model, {"input": x})):
            assert np.array_equal(np.isnan(ours), np.isnan(want)), name
            assert np.isnan(want).any() or name.startswith("maxpool") or name.startswith("globalaverage"), name
            kept = ~np.isnan(want)
            np.testing.assert_allclose(ours[kept], want[kept], rtol=1e-5, atol=1e-6, err_msg=name)


def test_an_interrupted_build_leaves_no_directory_and_a_usable_cache(tmp_path, monkeypatch):
    require_runnable(get_target("avx2"))
    path = saved(tmp_path, small_cnn())

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("autoconfig.artifact._write_weights", interrupted)
        with pytest.raises(KeyboardInterrupt):
            autoconfig.compile_model(path, tmp_path / "out", profile=PROFILES["avx2"], target="avx2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no DIR, no temporary one
    manifest = autoconfig.compile_model(path, tmp_path / "out", profile=PROFILES["avx2"], target="avx2")
    assert manifest["kernel_objects"]["compiled"] == 0  # every object the first build compiled is cached
    x = np.random.default_rng(0).standard_normal((1, 3, 29, 31)).astype(np.float32)
    out = autoconfig.load(tmp_path / "out")({"input": x})
    want = onnxruntime_outputs(small_cnn(), {"input": x})
    for ours, expected in zip(out.values(), want):
        np.testing.assert_allclose(ours, expected, atol=1e-4 * float(np.ptp(expected)))


def test_a_run_with_inputs_of_the_wrong_kind_is_refused(tmp_path):
    require_runnable(get_target("avx2"))
    path = saved(tmp_path, small_cnn())
    autoconfig.compile_model(path, tmp_path / "out", profile=PROFILES["avx2"], target="avx2")
    model = autoconfig.load(tmp_path / "out")
    for given, fragment in [({"input": [[1.0]]}, "must be a float32 array, got list"),
                            ({"input": np.zeros((1, 3, 29, 31), np.float16)}, "got float16"),
                            ({"input": np.zeros((1, 3, 28, 31), np.float32)}, "must have shape"),
                            ({}, "missing input 'input'"),
                            ({"input": np.zeros((1, 3, 29, 31), np.float32), "other": 1}, "unknown input 'other'")]:  # fmt: skip
        with pytest.raises(AutoconfigError, match=fragment):
            model(given)
