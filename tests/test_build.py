"""`autoconfig build` and the runtime: whole models compiled into one library, run
through its single C entry point, against onnxruntime; what the code generator can
emit and what the fusion planner proposes agree; bad input is one error line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import autoconfig
from autoconfig.build import build_model
from autoconfig.cli import main
from autoconfig.errors import AutoconfigError
from autoconfig.fusion import plan
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from autoconfig.profile import load_profile
from kernels.target import get_target
from tests.conftest import require_runnable

HWPROFILES = Path(__file__).parent.parent / "hwprofiles"
PROFILES = {"avx2": HWPROFILES / "amd-epyc.yaml", "avx512": HWPROFILES / "intel-xeon-platinum-8380.yaml",
            "neon": HWPROFILES / "aws-graviton2-neoverse-n1.yaml", "rvv": HWPROFILES / "spacemit-k1-x60.yaml"}  # fmt: skip


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """A CNN with every kind of group the build lowers: a strided stem with folded
    BatchNorm and SiLU, a depthwise block with Relu6, squeeze-excitation (a runtime
    per-channel scale on its own), a residual Add, Mish, a max-pool, a channel
    Concat, LeakyRelu, global pooling, Flatten, Gemm, Softmax."""
    b = zoo.Builder("small_cnn", seed)
    x = b.cba("input", 3, 16, 3, stride=2, act="silu")
    d = b.op("Clip", [b.bn(b.conv(x, 16, 16, 3, group=16), 16), b.const("lo", np.float32(0)),
                      b.const("hi", np.float32(6))])  # fmt: skip
    squeeze = b.op("Sigmoid", [b.conv(b.op("Relu", [b.conv(b.op("GlobalAveragePool", [d]), 16, 4, 1, bias=True)]),
                                      4, 16, 1, bias=True)])  # fmt: skip
    y = b.op("Mul", [d, squeeze])
    y = b.op("Add", [b.bn(b.conv(y, 16, 16, 1), 16), x])
    y = b.act(b.conv(y, 16, 24, 3, bias=True), "mish")
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    left, right = b.cba(y, 24, 8, 1, act="leaky"), b.cba(y, 24, 12, 3, act="relu")
    y = b.op("Concat", [left, right], axis=1)
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.op("Softmax", [b.gemm(y, 20, 10)], axis=-1)
    return b.model("input", [1, 3, 29, 31], [(y, [1, 10])])


def mlp(seed: int = 1) -> onnx.ModelProto:
    """MatMul + bias Add + Relu, Gemm + Tanh, Gemm, Softmax, on a batch of 5."""
    b = zoo.Builder("mlp", seed)
    w = b.const("w", b.rng.standard_normal((37, 64), dtype=np.float32) / 6)
    y = b.op("Relu", [b.op("Add", [b.op("MatMul", ["input", w]), b.const("bias", b.rng.standard_normal(64))])])
    y = b.op("Tanh", [b.gemm(y, 64, 48)])
    y = b.op("Softmax", [b.gemm(y, 48, 10)], axis=1)
    return b.model("input", [5, 37], [(y, [5, 10])])


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def build_and_compare(model: onnx.ModelProto, target: str, out: Path, fusion: str = "dp") -> dict:
    """Build for `target` (its datasheet profile), run, and hold every output to
    onnxruntime's within 1e-4 of its range."""
    path = out.parent / f"{model.graph.name}.onnx"
    onnx.save(model, path)
    manifest = autoconfig.compile_model(path, out, profile=PROFILES[target], target=target, fusion=fusion)
    loaded = autoconfig.load(out)
    name, shape = loaded.inputs[0]
    x = np.random.default_rng(3).standard_normal(shape, dtype=np.float32)
    ours = loaded({name: x})
    for (output, value), expected in zip(ours.items(), onnxruntime_outputs(model, {name: x}), strict=True):
        spread = float(expected.max() - expected.min()) or 1.0
        error = float(np.abs(value - expected).max())
        assert error <= 1e-4 * spread, f"{target} {output}: max error {error:.3g} over range {spread:.3g}"
    return manifest


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("fusion", ["dp", "none"])
def test_small_cnn_matches_onnxruntime_natively(tmp_path, target, fusion):
    require_runnable(get_target(target))
    manifest = build_and_compare(small_cnn(), target, tmp_path / "cnn", fusion)
    kinds = {k["kind"] for k in manifest["kernels"]}
    assert {"conv", "pool", "softmax", "matmul"} <= kinds
    if fusion == "dp":
        assert "elementwise" in kinds  # the squeeze-excitation scale
        assert len(manifest["kernels"]) < 20


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_mlp_matches_onnxruntime_natively(tmp_path, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(mlp(), target, tmp_path / "mlp")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul", "matmul", "matmul", "softmax"]


@pytest.mark.parametrize("target", ["neon", "rvv"])
def test_cross_targets_build_a_static_library_run_under_qemu(tmp_path, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(small_cnn(), target, tmp_path / "cnn")
    assert manifest["library"].endswith(".a") and (tmp_path / "cnn" / "libautoconfig_model.a").is_file()
    build_and_compare(mlp(), target, tmp_path / "mlp")


def test_mobilenet_v1_matches_onnxruntime(tmp_path):
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(zoo.mobilenet_v1(), "avx2", tmp_path / "mobilenet")
    assert manifest["arena_bytes"] < manifest["intermediate_bytes"]  # buffers are reused


@pytest.mark.parametrize("name", ["vgg16", "mobilenet_v1", "efficientnet_b0", "yolov4"])
@pytest.mark.parametrize("strategy", ["dp", "greedy"])
def test_every_group_the_planner_proposes_is_one_generated_kernel_or_none(name, strategy):
    # lowering every group of the plan (kernels generated as MLIR, nothing compiled)
    graph = import_model(zoo.build(name))
    profile = load_profile(PROFILES["avx512"])
    groups = plan(graph, profile, strategy).groups
    if name == "yolov4":  # nearest-neighbour Resize has no kernel yet: the build says so
        with pytest.raises(AutoconfigError, match=r"node 'resize_\d+' \(Resize\): no generated kernel"):
            build_model(graph, profile, get_target("avx512"), strategy)
        return
    built = build_model(graph, profile, get_target("avx512"), strategy)
    assert len(built.kernels) <= len(groups)
    assert all(k.modules for k in built.kernels)


def test_unsupported_operator_is_one_line_and_leaves_no_directory(tmp_path, capsys):
    path = tmp_path / "yolo.onnx"
    onnx.save(zoo.yolov4(), path)
    out = tmp_path / "yolo"
    assert main(["build", str(path), "--out", str(out), "--profile", str(PROFILES["avx512"]), "--target", "avx512"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(Resize)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolo.onnx"]


def test_run_checks_inputs_and_files(tmp_path, capsys):
    require_runnable(get_target("avx2"))
    out = tmp_path / "mlp"
    build_and_compare(mlp(), "avx2", out)
    model = autoconfig.load(out)
    with pytest.raises(AutoconfigError, match=r"input 'input' must have shape \(5, 37\)"):
        model({"input": np.zeros((5, 36), np.float32)})
    with pytest.raises(AutoconfigError, match="must be a float32 array, got float64"):
        model({"input": np.zeros((5, 37))})
    x = tmp_path / "x.npy"
    np.save(x, np.ones((5, 37), np.float32))
    assert main(["run", str(out), "--input", f"input={x}", "--output", str(tmp_path / "y.npz"), "--bench", "3",
                 "--per-kernel"]) == 0  # fmt: skip
    assert np.load(tmp_path / "y.npz")[model.outputs[0][0]].shape == (5, 10)
    weights = out / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    capsys.readouterr()
    assert main(["run", str(out)]) == 2
    assert "weights.bin was changed" in capsys.readouterr().err
    (out / "report.md").unlink()
    with pytest.raises(AutoconfigError, match="report.md is missing"):
        autoconfig.load(out)


def test_same_inputs_same_bytes(tmp_path):
    require_runnable(get_target("avx2"))
    first = build_and_compare(mlp(), "avx2", tmp_path / "a")
    second = build_and_compare(mlp(), "avx2", tmp_path / "b")
    assert first["files"] == second["files"]
