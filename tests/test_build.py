"""`autoconfig build` and the runtime: whole models compiled into one library, run
through its single C entry point, against onnxruntime; what the code generator can
emit and what the fusion planner proposes agree; bad input is one error line."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import autoconfig
from autoconfig.bench import bench
from autoconfig.build import build_model
from autoconfig.builder import COOLED_ARENA_GROWTH, VIRTUAL, Builder, aligned
from autoconfig.cli import main
from autoconfig.demo import run_model_demo
from autoconfig.errors import AutoconfigError
from autoconfig.fusion import plan
from autoconfig.graph import zoo
from autoconfig.families import matmul as matmul_family
from autoconfig.families import pool as pool_family
from autoconfig.graph.onnx_import import import_model
from autoconfig.machine import Machine
from autoconfig.models import conv as conv_model
from autoconfig.probe.host import this_host
from autoconfig.profile import load_profile
from kernels.cache import default_cache
from kernels.matmul import MatmulShape
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.random_models import movement_net, prologue_model, random_cnn, random_mlp

HWPROFILES = Path(__file__).parent.parent / "hwprofiles"
PROFILES = {"avx2": HWPROFILES / "amd-epyc.yaml", "avx512": HWPROFILES / "intel-xeon-platinum-8380.yaml",
            "neon": HWPROFILES / "aws-graviton2-neoverse-n1.yaml", "rvv": HWPROFILES / "spacemit-k1-x60.yaml"}  # fmt: skip


def depthwise_squeeze_excite(b: zoo.Builder, x: str, channels: int, reduced: int) -> str:
    """A 3x3 depthwise layer with folded BatchNorm and Relu6, scaled by its own
    squeeze-excitation (global pool, 1x1 down with Relu, 1x1 up with Sigmoid): the
    scale a runtime per-channel operand of an elementwise kernel of its own."""
    d = b.op("Clip", [b.bn(b.conv(x, channels, channels, 3, group=channels), channels), b.const("lo", np.float32(0)),
                      b.const("hi", np.float32(6))])  # fmt: skip
    pooled = b.conv(b.op("GlobalAveragePool", [d]), channels, reduced, 1, bias=True)
    squeeze = b.op("Sigmoid", [b.conv(b.op("Relu", [pooled]), reduced, channels, 1, bias=True)])
    return b.op("Mul", [d, squeeze])


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """A CNN with every kind of group the build lowers: a strided stem with folded
    BatchNorm and SiLU, a depthwise block with Relu6, squeeze-excitation (a runtime
    per-channel scale on its own), a residual Add, Mish, a max-pool, a channel
    Concat, LeakyRelu, global pooling, Flatten, Gemm, Softmax."""
    b = zoo.Builder("small_cnn", seed)
    x = b.cba("input", 3, 16, 3, stride=2, act="silu")
    y = depthwise_squeeze_excite(b, x, 16, 4)
    y = b.op("Add", [b.bn(b.conv(y, 16, 16, 1), 16), x])
    y = b.act(b.conv(y, 16, 24, 3, bias=True), "mish")
    y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    left, right = b.cba(y, 24, 8, 1, act="leaky"), b.cba(y, 24, 12, 3, act="relu")
    y = b.op("Concat", [left, right], axis=1)
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.op("Softmax", [b.gemm(y, 20, 10)], axis=-1)
    return b.model("input", [1, 3, 29, 31], [(y, [1, 10])])


def blocked_cnn(seed: int = 5) -> onnx.ModelProto:
    """A CNN whose channels fill vector blocks (multiples of 16), so the build holds
    activations channel-blocked: a stem from the NCHW image, a depthwise layer, a
    squeeze-excitation scale (an elementwise kernel on blocks), a 1x1 layer adding the
    stem's output after a Relu (an epilogue whose operand follows an op without one), a
    dense 3x3 with Mish, two layers concatenated (their blocks written into place);
    then a max-pool on the blocks."""
    b = zoo.Builder("blocked_cnn", seed)
    x = b.cba("input", 3, 32, 3, stride=2, act="relu")
    y = depthwise_squeeze_excite(b, x, 32, 8)
    y = b.op("Add", [b.op("Relu", [b.bn(b.conv(y, 32, 32, 1), 32)]), x])
    y = b.act(b.conv(y, 32, 48, 3, bias=True), "mish")
    y = b.op("Concat", [b.cba(y, 48, 16, 1, act="leaky"), b.cba(y, 48, 32, 3, act="relu")], axis=1)
    y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.op("Softmax", [b.gemm(y, 48, 10)], axis=-1)
    return b.model("input", [1, 3, 58, 58], [(y, [1, 10])])


def narrow_cnn(seed: int = 6) -> onnx.ModelProto:
    """EfficientNet's inverted residuals with 24 channels between them, which fill no
    block of AVX-512's 16 lanes: a 1x1 projection to 24, a residual Add of two such
    tensors, expansions to 96 with a depthwise layer and its squeeze-excitation between
    (a global pool and an elementwise scale), a max-pool at the end."""
    b = zoo.Builder("narrow_cnn", seed)
    x = b.cba("input", 3, 32, 3, stride=2, act="silu")
    y = b.bn(b.conv(x, 32, 24, 1), 24)
    for _ in range(2):
        expanded = b.cba(y, 24, 96, 1, act="silu")
        y = b.op("Add", [b.bn(b.conv(depthwise_squeeze_excite(b, expanded, 96, 6), 96, 24, 1), 24), y])
    y = b.op("MaxPool", [b.cba(y, 24, 32, 1, act="relu")], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
    y = b.op("Softmax", [b.gemm(y, 32, 10)], axis=-1)
    return b.model("input", [1, 3, 50, 50], [(y, [1, 10])])


def downsampling_block(seed: int = 8) -> onnx.ModelProto:
    """ResNet's downsampling block on channel blocks, at odd map sizes: a stem, a 3x3
    stride-2 layer and a 1x1 one, and the 1x1 stride-2 projection of the stem's output
    added to theirs; a 3x3 layer after."""
    b = zoo.Builder("downsampling_block", seed)
    x = b.cba("input", 3, 64, 3)
    y = b.bn(b.conv(b.cba(x, 64, 64, 3, stride=2), 64, 128, 1), 128)
    y = b.op("Relu", [b.op("Add", [y, b.bn(b.conv(x, 64, 128, 1, stride=2), 128)])])
    return b.model("input", [1, 3, 29, 27], [(b.cba(y, 128, 32, 3), [1, 32, 15, 14])])


def squeezed_net(channels: int, squeeze: str, batch: int, seed: int = 9, shown: bool = False,
                 size: tuple[int, int] = (19, 17)) -> onnx.ModelProto:  # fmt: skip
    """An expansion, a strided 5x5 depthwise layer with SiLU, its squeeze (`squeeze`:
    GlobalAveragePool, ReduceMean over (2, 3) keeping the axes, or dropping them and
    reshaped back), excitation and scale, a projection; the squeeze's means are an
    output of the model too, and the depthwise layer's output where `shown` (NCHW,
    as any reader taking no channel blocks reads it). The input: 3 x `size`."""
    b = zoo.Builder(f"squeezed_{squeeze}_{channels}", seed)
    d = b.act(b.bn(b.conv(b.cba("input", 3, channels, 1, act="relu"), channels, channels, 5, 2, channels), channels),
              "silu")  # fmt: skip
    if squeeze == "pool":
        means = b.op("GlobalAveragePool", [d])
    else:
        means = b.op("ReduceMean", [d], axes=[2, 3], keepdims=int(squeeze == "kept"))
    shaped = b.op("Reshape", [means, b.const("s", np.array([batch, channels, 1, 1]))]) if squeeze == "dropped" else means
    scale = b.op("Sigmoid", [b.conv(b.op("Relu", [b.conv(shaped, channels, 4, 1, bias=True)]), 4, channels, 1)])
    y = b.conv(b.op("Mul", [d, scale]), channels, 8, 1)
    kept = [batch, channels, 1, 1] if squeeze != "dropped" else [batch, channels]
    out = [(side - 1) // 2 + 1 for side in size]
    shown_output = [(d, [batch, channels, *out])] if shown else []
    return b.model("input", [batch, 3, *size], [(y, [batch, 8, *out]), (means, kept), *shown_output])


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize(("channels", "squeeze", "batch"), [(16, "pool", 2), (32, "kept", 1), (48, "dropped", 2),
                                                            (24, "pool", 1), (20, "kept", 1)])  # fmt: skip
def test_a_depthwise_layer_sums_the_squeeze_that_reads_it(tmp_path, target, channels, squeeze, batch):
    """Where the depthwise layer's channels fill the target's vector blocks, the DP
    plans its squeeze (the mean over each channel's plane) in its kernel, summed as the
    output is stored, a second output; elsewhere (24 channels at 16 lanes, 20 at any)
    the squeeze is a kernel of its own. TVM's rules (greedy) never fuse a reduction
    after a convolution. Both match onnxruntime, means and all."""
    require_runnable(get_target(target))
    fits = channels % get_target(target).f32_lanes == 0
    for fusion in ("dp", "greedy"):
        manifest = build_and_compare(squeezed_net(channels, squeeze, batch), target, tmp_path / fusion, fusion)
        summed = [k for k in manifest["kernels"] if "channel means" in k["choice"]]
        assert len(summed) == (fits and fusion == "dp"), [k["choice"] for k in manifest["kernels"]]
        if summed:
            assert summed[0]["ops"][-1].endswith(("(GlobalAveragePool)", "(ReduceMean)")), summed[0]["ops"]


@pytest.mark.parametrize("target", ["avx2", "avx512", "neon", "rvv"])
@pytest.mark.parametrize(("channels", "squeeze"), [(16, "pool"), (48, "kept"), (20, "dropped")])
def test_an_excitation_scales_the_tensor_in_the_kernel_of_its_gates(tmp_path, target, channels, squeeze):
    """Two images, each with its own gates (no prologue of the projection's shared
    weights): the DP runs the gates' 1x1 convolution, their Sigmoid and the Mul scaling
    the depthwise layer's output as one excitation kernel (channel blocks where the
    channels fill them, NCHW at 20 and on RVV), which onnxruntime's outputs hold to;
    TVM's rules (greedy) run the Mul apart or as the projection's prologue."""
    require_runnable(get_target(target))
    for fusion in ("dp", "greedy"):
        manifest = build_and_compare(squeezed_net(channels, squeeze, 2), target, tmp_path / fusion, fusion)
        excited = [k for k in manifest["kernels"] if k["choice"].startswith("excitation")]
        assert len(excited) == (fusion == "dp"), [k["choice"] for k in manifest["kernels"]]
        if excited:
            assert [op.split(" (")[1] for op in excited[0]["ops"]] == ["Conv)", "Sigmoid)", "Mul)"], excited[0]["ops"]
            blocked = channels % get_target(target).f32_lanes == 0 and not get_target(target).scalable
            assert ("nchwc" in excited[0]["choice"]) is blocked, excited[0]["choice"]


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_a_layer_writing_channel_means_may_have_nchw_readers(tmp_path, target):
    """The depthwise layer's output is also an output of the model (NCHW): the layer
    still sums the squeeze, in channel blocks only, and its output is transformed back."""
    require_runnable(get_target(target))
    channels = 2 * get_target(target).f32_lanes
    manifest = build_and_compare(squeezed_net(channels, "pool", 1, shown=True), target, tmp_path / "dp", "dp")
    assert any("channel means" in k["choice"] for k in manifest["kernels"]), [k["choice"] for k in manifest["kernels"]]


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_a_depthwise_layer_in_bands_averages_the_bands_means(tmp_path, target):
    """Where the depthwise layer's input outgrows a core's L2, each of two threads takes
    a band of its output rows (the rows the expansion before it wrote on that thread),
    sums each band's means as it stores them, and one more small kernel averages them
    over the bands: onnxruntime's means and outputs."""
    require_runnable(get_target(target))
    two_cores = {"avx2": PROFILES["avx2"], "avx512": HWPROFILES / "amd-epyc-zen4-avx512.yaml"}[target]
    manifest = build_and_compare(squeezed_net(32, "pool", 1, size=(128, 128)), target, tmp_path / "dp", "dp",
                                 profile=two_cores)  # fmt: skip
    summed = [k for k in manifest["kernels"] if "channel means" in k["choice"]]
    assert len(summed) == 1 and "2 thread(s)" in summed[0]["choice"], [k["choice"] for k in manifest["kernels"]]
    assert "the mean of the 2 bands' means" in (tmp_path / "dp" / "report.md").read_text()


def mlp(seed: int = 1) -> onnx.ModelProto:
    """MatMul + bias Add + Relu, Gemm + Tanh, Gemm, Softmax, on a batch of 5."""
    b = zoo.Builder("mlp", seed)
    w = b.const("w", b.rng.standard_normal((37, 64), dtype=np.float32) / 6)
    y = b.op("Relu", [b.op("Add", [b.op("MatMul", ["input", w]), b.const("bias", b.rng.standard_normal(64))])])
    y = b.op("Tanh", [b.gemm(y, 64, 48)])
    y = b.op("Softmax", [b.gemm(y, 48, 10)], axis=1)
    return b.model("input", [5, 37], [(y, [5, 10])])


def one_row_mlp(seed: int = 2) -> onnx.ModelProto:
    """A batch of one through Gemms with transposed weights (built as W·aᵀ, the weights
    read as stored): bias + Relu, then alpha/beta + a residual Add + Sigmoid, Softmax."""
    b = zoo.Builder("one_row_mlp", seed)
    y = b.op("Relu", [b.gemm("input", 45, 70)])
    w = b.const("w", b.rng.standard_normal((70, 70), dtype=np.float32) / 8)
    z = b.op("Gemm", [y, w, b.const("c", b.rng.standard_normal(70))], transB=1, alpha=0.5, beta=2.0)
    y = b.op("Softmax", [b.gemm(b.op("Sigmoid", [b.op("Add", [z, y])]), 70, 9)], axis=1)
    return b.model("input", [1, 45], [(y, [1, 9])])


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs with every graph optimization off: the spec's answer (its
    optimizers rewrite some graphs wrongly: see test_random_graphs'
    test_pad_then_max_pool_keeps_the_zeros_on_negative_inputs)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def build_and_compare(model: onnx.ModelProto, target: str, out: Path, fusion: str = "dp", vlen: int | None = None,
                      profile: Path | None = None, threads: int | None = None) -> dict:  # fmt: skip
    """Build for `target` (its datasheet profile unless `profile`; RVV at `vlen`; on
    `threads`, or all its cores), run, and hold every output to onnxruntime's within
    1e-4 of its range."""
    path = out.parent / f"{model.graph.name}.onnx"
    onnx.save(model, path)
    manifest = autoconfig.compile_model(path, out, profile=profile or PROFILES[target], target=get_target(target, vlen),
                                        fusion=fusion, threads=threads)  # fmt: skip
    loaded = autoconfig.load(out)
    name, shape = loaded.inputs[0]
    x = np.random.default_rng(3).standard_normal(shape, dtype=np.float32)
    ours = loaded({name: x})
    for (output, value), expected in zip(ours.items(), onnxruntime_outputs(model, {name: x}), strict=True):
        spread = float(expected.max() - expected.min()) or 1.0
        error = float(np.abs(value - expected).max())
        assert error <= 1e-4 * spread, f"{target} {output}: max error {error:.3g} over range {spread:.3g}"
    return manifest


@pytest.mark.slow
@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("fusion", ["dp", "none"])
def test_small_cnn_matches_onnxruntime_natively(tmp_path, target, fusion):
    require_runnable(get_target(target))
    manifest = build_and_compare(small_cnn(), target, tmp_path / "cnn", fusion)
    kinds = {k["kind"] for k in manifest["kernels"]}
    assert {"conv", "pool", "softmax", "matmul"} <= kinds
    if fusion == "dp":
        assert not any(k["ops"] == [k["ops"][0]] and k["ops"][0].endswith("(Mul)") for k in manifest["kernels"])
        assert any("prologue scale" in k["choice"] or "excitation" in k["choice"] for k in manifest["kernels"])
        assert len(manifest["kernels"]) < 20


@pytest.mark.slow
@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_channel_blocked_activations_match_onnxruntime(tmp_path, target):
    """The build keeps this CNN's activations in channel blocks between its convolutions
    and transforms one back to NCHW where its reader gains by it (on two cores, a
    Winograd layer; the 40 of the AVX-512 datasheet profile keep the blocks throughout);
    the report says which layout each layer reads and writes."""
    require_runnable(get_target(target))
    two_cores = {"avx2": PROFILES["avx2"], "avx512": HWPROFILES / "amd-epyc-zen4-avx512.yaml"}
    manifest = build_and_compare(blocked_cnn(), target, tmp_path / "cnn", profile=two_cores[target])
    choices = [k["choice"] for k in manifest["kernels"]]
    assert sum("nchwc" in c for c in choices) >= 3, choices
    assert [k["kind"] for k in manifest["kernels"]].count("layout") >= 1
    assert "layout: the input is held in" in (tmp_path / "cnn" / "report.md").read_text()


POOLS = (
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 2], "dilations": [2, 2], "pads": [2, 1, 1, 0]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [1, 7], "strides": [1, 1], "pads": [0, 3, 0, 3]}),
)
"""Windowed pools as CNNs place them between convolutions (ResNet's stem, GoogLeNet's
ceil-mode pools, Inception's average branches, DenseNet's transitions), and dilated,
asymmetrically padded and one-row windows."""


def pooled_blocks_net() -> onnx.ModelProto:
    """Per pool of `POOLS`, a 3x3 convolution to 16 channels, the pool, then another 3x3
    convolution reading its output; the pooled maps' means are the model's outputs."""
    b = zoo.Builder("pooled_blocks", 11)
    x = b.cba("input", 3, 16, 3, act="leaky")
    outputs = []
    for op, attrs in POOLS:
        y = b.op(op, [b.act(b.conv(x, 16, 16, 3), "leaky")], **attrs)
        outputs.append(b.op("Flatten", [b.op("GlobalAveragePool", [b.conv(y, 16, 32, 3)])], axis=1))
    return b.model("input", [1, 3, 19, 23], [(y, [1, 32]) for y in outputs])


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_windowed_pools_on_channel_blocks_match_onnxruntime(tmp_path, target, monkeypatch):
    """Max and average pools of every kind of window (`POOLS`) read channel blocks and
    write their output in them, and the results match onnxruntime's. The models choose
    layouts by cost; here every convolution is made to write blocks and every pool to
    keep them, so that the pools' kernels on blocks are what is tested."""
    require_runnable(get_target(target))
    choose_layout = conv_model.choose_layout

    def blocks_first(choice, given, outputs, machine):
        return choose_layout(choice, given, {k: v + 1e12 * (k == "nchw") for k, v in outputs.items()}, machine)

    monkeypatch.setattr(conv_model, "choose_layout", blocks_first)
    monkeypatch.setattr(pool_family, "kept_layout", lambda b, held, value, input_shape: held)
    manifest = build_and_compare(pooled_blocks_net(), target, tmp_path / "pools")
    pools = [k["choice"] for k in manifest["kernels"] if k["kind"] == "pool" and "Global" not in k["choice"]]
    assert len(pools) == len(POOLS) and all("nchwc" in c for c in pools), pools


def test_nhwc_activations_match_onnxruntime(tmp_path):
    """On AVX-512, tensors of 24 channels fill no channel block; on the Zen 5 VM's
    profile (2 cores) the build holds them in NHWC for the 1x1 expansions, which read
    NHWC and write NCHW[c] (their report's choice: nhwc>nchwc), and the results still
    match onnxruntime's."""
    require_runnable(get_target("avx512"))
    manifest = build_and_compare(narrow_cnn(), "avx512", tmp_path / "cnn",
                                 profile=HWPROFILES / "amd-epyc-zen5-avx512.yaml")  # fmt: skip
    layers = [k["choice"] for k in manifest["kernels"] if k["kind"] == "conv"]
    assert sum("nhwc>nchwc" in c for c in layers) >= 2, layers


def test_a_strided_1x1_layer_reads_every_other_pixel_of_its_blocked_input(tmp_path):
    """On two cores of the Zen 4 VM's profile both 1x1 layers of a downsampling block
    run as products on channel blocks, the strided one reading every other pixel of its
    input in place (no copy, no transform back to NCHW), and the results match
    onnxruntime's."""
    require_runnable(get_target("avx512"))
    manifest = build_and_compare(downsampling_block(), "avx512", tmp_path / "cnn",
                                 profile=HWPROFILES / "amd-epyc-zen4-avx512.yaml", threads=2)  # fmt: skip
    layers = [k["choice"] for k in manifest["kernels"] if k["kind"] == "conv"]
    assert sum(c.startswith("gemm1x1") and "nchwc" in c for c in layers) == 2, layers


def test_a_model_rebuilt_in_place_loads_anew(tmp_path):
    """Loading a directory rebuilt with another model, in the same process, runs the new
    build (a shared library opened by its path would be the old one)."""
    require_runnable(get_target("avx2"))
    build_and_compare(mlp(), "avx2", tmp_path / "model")
    build_and_compare(one_row_mlp(), "avx2", tmp_path / "model")


def huge_page_mappings() -> dict[str, int]:
    """This process's mappings offered to transparent huge pages (MADV_HUGEPAGE: 'hg'
    among their VmFlags), by address range, with their sizes in bytes."""
    found, current, size = {}, "", 0
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            current, size = line.split()[0], end - start
        elif line.startswith("VmFlags:") and "hg" in line.split()[1:]:
            found[current] = size
    return found


def test_large_weights_and_arena_are_offered_to_huge_pages(tmp_path):
    """A model's weights and arena of a huge page or more are allocated on huge-page
    boundaries and madvised, so that the kernels' walks over them miss the TLB less."""
    require_runnable(get_target("avx2"))
    if not Path("/proc/self/smaps").exists():
        pytest.skip("no /proc/self/smaps on this host")
    b = zoo.Builder("wide", 4)
    y = b.op("Relu", [b.op("MatMul", ["input", b.const("w", b.rng.standard_normal((1024, 1024), dtype=np.float32))])])
    path = tmp_path / "wide.onnx"
    onnx.save(b.model("input", [600, 1024], [(y, [600, 1024])]), path)
    autoconfig.compile_model(path, tmp_path / "wide", profile=PROFILES["avx2"], target=get_target("avx2"))
    # loaded in a fresh process: in this one, earlier tests' freed buffers leave their
    # address ranges (with their flags) in the heap for this model's to reuse unnoticed
    probe = (f"import re\nfrom pathlib import Path\nimport autoconfig\n{inspect.getsource(huge_page_mappings)}\n"
             f"before = huge_page_mappings()\nloaded = autoconfig.load({str(tmp_path / 'wide')!r})\n"
             "print([size for at, size in huge_page_mappings().items() if at not in before])")  # adjacent ones merge
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent.parent)  # fmt: skip
    new = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert sum(new) >= 1024 * 1024 * 4 + 600 * 1024 * 4, new  # the weights and the arena (the output)


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_mlp_matches_onnxruntime_natively(tmp_path, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(mlp(), target, tmp_path / "mlp")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul", "matmul", "matmul", "softmax"]


@pytest.mark.parametrize("target", ["avx2", "avx512"])
def test_one_row_times_transposed_weights_matches_onnxruntime(tmp_path, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(one_row_mlp(), target, tmp_path / "mlp")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul", "matmul", "matmul", "softmax"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("seed", range(4))
def test_random_models_match_onnxruntime_natively(tmp_path, target, seed):
    require_runnable(get_target(target))
    build_and_compare(random_cnn(seed), target, tmp_path / "cnn")
    build_and_compare(random_mlp(seed), target, tmp_path / "mlp")


@pytest.mark.parametrize("target", ["avx2", "avx512", "neon", "rvv"])
def test_prologues_match_onnxruntime(tmp_path, target):
    # BatchNorm → ReLU, and a squeeze-excitation scale, each computed by the 1x1 layer
    # after it as it reads its input; 20 channels and 7x7 pixels leave edge tiles
    require_runnable(get_target(target))
    manifest = build_and_compare(prologue_model(channels=20, size=7), target, tmp_path / "net")
    choices = [k["choice"] for k in manifest["kernels"] if k["kind"] == "conv"]
    assert [c.split("prologue ")[1].split(",")[0] for c in choices if "prologue" in c] == \
        ["scale+bias+relu", "scale"], choices


@pytest.mark.slow
@pytest.mark.parametrize("target", ["avx2", "avx512", "neon", "rvv"])
def test_data_movement_matches_onnxruntime(tmp_path, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(movement_net(), target, tmp_path / "movement")
    gathers = [k for k in manifest["kernels"] if k["kind"] == "gather"]
    assert len(gathers) == 8  # 2 Pads, 3 Resizes, Transpose, Slice, the Split along height; channels: a view


def sampled(attrs: dict, opset: int = 16, reach: float = 1.3) -> onnx.ModelProto:
    """The input image (2x4x7x9) sampled by GridSample at a grid computed from it (a 1x1
    convolution's two channels, reach·tanh: points inside and outside the image)."""
    b = zoo.Builder("sampled", 10)
    flow = b.op("Transpose", [b.op("Tanh", [b.conv("input", 4, 2, 1)])], perm=[0, 2, 3, 1])
    grid = b.op("Mul", [flow, b.const("reach", np.float32(reach))])
    return b.model("input", [2, 4, 7, 9], [(b.op("GridSample", ["input", grid], **attrs), [2, 4, 7, 9])], opset=opset)


@pytest.mark.parametrize("attrs", [{}, {"align_corners": 1}, {"padding_mode": "border"},
                                   {"mode": "nearest"}, {"mode": "nearest", "padding_mode": "border", "align_corners": 1},
                                   {"mode": "linear", "align_corners": 1}, {"mode": "bicubic"},
                                   {"mode": "cubic", "padding_mode": "border", "align_corners": 1}])  # fmt: skip
def test_grid_sample_gathers_the_pixels_around_each_point(tmp_path, attrs):
    """Bilinear (opset 16's name, and 20's), bicubic (both names) and nearest sampling,
    zeros and border padding, corners aligned or not: onnxruntime's values."""
    opset = 20 if attrs.get("mode") in ("linear", "cubic") else 16
    build_and_compare(sampled(attrs, opset), "avx2", tmp_path / "sampled")


@pytest.mark.parametrize("attrs", [{"padding_mode": "reflection"},
                                   {"padding_mode": "reflection", "align_corners": 1, "mode": "nearest"},
                                   {"padding_mode": "reflection", "mode": "bicubic"},
                                   {"padding_mode": "reflection", "mode": "bicubic", "align_corners": 1}])  # fmt: skip
def test_grid_sample_reflects_points_far_outside_into_the_image(tmp_path, attrs):
    """Reflection padding at points up to 3.2 half-widths from the centre (reflected
    more than once), each bicubic tap reflected too: onnxruntime's values."""
    build_and_compare(sampled(attrs, reach=3.2), "avx2", tmp_path / "sampled")


def test_grid_sample_refuses_volumetric_sampling(tmp_path):
    b = zoo.Builder("volume", 10)
    grid = b.op("Transpose", [b.op("Tanh", [b.op("Slice", ["input", b.const("s", np.array([0])),
                                                          b.const("e", np.array([3])), b.const("a", np.array([1]))])])],
                perm=[0, 2, 3, 4, 1])  # fmt: skip
    model = b.model("input", [1, 4, 3, 5, 6], [(b.op("GridSample", ["input", grid]), [1, 4, 3, 5, 6])], opset=20)
    onnx.save(model, tmp_path / "volume.onnx")
    with pytest.raises(AutoconfigError, match=r"\(GridSample\): only 2-D sampling"):
        autoconfig.compile_model(tmp_path / "volume.onnx", tmp_path / "built", profile=PROFILES["avx2"], target="avx2")


@pytest.mark.parametrize(("time_axis", "batch_axis"), [(0, 1), (1, 0)])
def test_reverse_sequence_by_constant_lengths_is_one_gather(tmp_path, time_axis, batch_axis):
    """ReverseSequence of a computed tensor of 5 steps of 4 entries (a Tanh of the input)
    by constant lengths (one of 1, one whole): each entry's first steps reversed, the
    rest in place, as onnxruntime gives; one gather kernel."""
    b = zoo.Builder("reversed", 12)
    lengths = b.const("lengths", np.array([5, 1, 3, 2], np.int64))  # 4 entries of 5 steps
    y = b.op("ReverseSequence", [b.op("Tanh", ["input"]), lengths], time_axis=time_axis, batch_axis=batch_axis)
    shape = [5, 4, 3] if batch_axis == 1 else [4, 5, 3]
    manifest = build_and_compare(b.model("input", shape, [(y, shape)], opset=17), "avx2", tmp_path / "built")
    assert [k["kind"] for k in manifest["kernels"]].count("gather") == 1


def transformed(align: int, batch: int) -> onnx.ModelProto:
    """A spatial transformer: the input image (batch x3x8x10) sampled at an affine grid
    of parameters computed from the image's channel means."""
    b = zoo.Builder("transformed", 11)
    means = b.op("Flatten", [b.op("GlobalAveragePool", ["input"])], axis=1)
    identity = b.const("identity", np.array([1, 0, 0, 0, 1, 0], np.float32))
    theta = b.op("Reshape", [b.op("Add", [b.gemm(means, 3, 6), identity]), b.const("s", np.array([batch, 2, 3]))])
    grid = b.op("AffineGrid", [theta, b.const("size", np.array([batch, 3, 6, 7], np.int64))], align_corners=align)
    y = b.op("GridSample", ["input", grid], align_corners=align)
    return b.model("input", [batch, 3, 8, 10], [(y, [batch, 3, 6, 7])], opset=20)


@pytest.mark.parametrize(("align", "batch"), [(0, 1), (1, 2)])
def test_a_spatial_transformer_samples_at_its_affine_grid(tmp_path, align, batch):
    """AffineGrid is the grid's points times each θᵀ (a batch of one too, which ONNX's
    function body for it squeezes away), and GridSample samples there: onnxruntime's
    values."""
    build_and_compare(transformed(align, batch), "avx2", tmp_path / "transformed")


def branched(condition: str) -> onnx.ModelProto:
    """Two Ifs on `condition` ("constant": Shape arithmetic that folds; "computed": the
    sign of the input's sum), with the same branches (their values and initializer
    named alike, as two expansions of one function body are): a scale by the
    initializer, or a Tanh; their results added."""
    b = zoo.Builder("branched", 12)
    shape = [2, 5]
    if condition == "constant":
        flag = b.op("Equal", [b.op("Size", [b.op("Shape", ["input"])]), b.const("two", np.array(2, np.int64))])
    else:
        flag = b.op("Greater", [b.op("ReduceSum", ["input"], keepdims=0), b.const("zero", np.float32(0))])
    value = onnx.helper.make_tensor_value_info
    then = onnx.helper.make_graph([onnx.helper.make_node("Mul", ["input", "scale"], ["y"])], "then", [],
                                  [value("y", onnx.TensorProto.FLOAT, shape)],
                                  [onnx.numpy_helper.from_array(np.full(shape, 3, np.float32), "scale")])  # fmt: skip
    other = onnx.helper.make_graph([onnx.helper.make_node("Tanh", ["input"], ["y"])], "else", [],
                                   [value("y", onnx.TensorProto.FLOAT, shape)])  # fmt: skip
    for name in ("first", "second"):
        b.nodes.append(onnx.helper.make_node("If", [flag], [name], name=name, then_branch=then, else_branch=other))
    return b.model("input", shape, [(b.op("Add", ["first", b.op("Sin", ["second"])]), shape)])


def test_an_if_on_a_condition_that_folds_is_its_branch(tmp_path, capsys):
    """The branch an If takes on a constant condition is inlined at import, its values
    named under the If's (two Ifs' branches use the same names); on a computed
    condition, one line names the If."""
    manifest = build_and_compare(branched("constant"), "avx2", tmp_path / "constant")
    assert not any("If" in " ".join(k["ops"]) for k in manifest["kernels"])
    onnx.save(branched("computed"), tmp_path / "computed.onnx")
    assert main(["build", str(tmp_path / "computed.onnx"), "--out", str(tmp_path / "b"), "--target", "avx2",
                 "--profile", str(PROFILES["avx2"])]) == 2  # fmt: skip
    assert "node 'first': unsupported operator If (2 nodes)" in capsys.readouterr().err


def scattered(op: str, indices: np.ndarray, reduction: str = "none", axis: int = 0) -> onnx.ModelProto:
    """Tanh of the input (2x5x6) scattered into by constant `indices` (ScatterND's rows of
    leading indices, or ScatterElements' along `axis`), the updates the input's first
    elements times -3: data and updates computed, of both signs."""
    b = zoo.Builder("scattered", 8)
    shape = (2, 5, 6)
    sizes = indices.shape[:-1] + shape[indices.shape[-1]:] if op == "ScatterND" else indices.shape
    flat = b.op("Reshape", ["input", b.const("flat", np.array([-1], np.int64))])
    first = b.op("Slice", [flat, b.const("start", np.array([0], np.int64)),
                           b.const("end", np.array([int(np.prod(sizes))], np.int64))])  # fmt: skip
    updates = b.op("Mul", [b.op("Reshape", [first, b.const("sizes", np.array(sizes, np.int64))]),
                           b.const("k", np.float32(-3))])  # fmt: skip
    attrs = {"reduction": reduction} | ({} if op == "ScatterND" else {"axis": axis})
    y = b.op(op, [b.op("Tanh", ["input"]), b.const("indices", indices), updates], **attrs)
    return b.model("input", list(shape), [(y, list(shape))], opset=18)


ALONG_ROWS = np.stack([np.random.default_rng(i).permutation(5)[:2] for i in range(12)]).reshape(2, 6, 2).transpose(
    0, 2, 1) - 2
"""ScatterElements' indices along axis 1 with no element hit twice, some negative."""


@pytest.mark.parametrize(("op", "indices", "reduction", "axis", "gathers"), [
    ("ScatterND", np.array([[0, 1], [1, 3], [0, 1]]), "none", 0, 1),  # one row twice: the last update wins
    ("ScatterND", np.array([[1], [0]]), "none", 0, 1),
    ("ScatterND", np.array([[0, 4, 5], [1, -1, 0]]), "none", 0, 1),
    ("ScatterND", np.array([[0, 1], [1, 3]]), "add", 0, 1),
    ("ScatterND", np.array([[0, 1], [1, -2], [0, 1], [0, 1]]), "add", 0, 3),  # a row's three updates, in order
    ("ScatterND", np.array([[0, 1], [1, -2]]), "max", 0, 1),
    ("ScatterElements", np.random.default_rng(5).integers(-5, 5, (2, 2, 6)), "none", 1, 1),
    ("ScatterElements", ALONG_ROWS, "mul", 1, 1),
    ("ScatterElements", ALONG_ROWS, "min", -2, 1),
    ("ScatterElements", np.zeros((2, 3, 6), np.int64), "mul", 1, 3),
])  # fmt: skip
def test_a_scatter_by_constant_indices_is_a_gather(tmp_path, op, indices, reduction, axis, gathers):
    """Each matches onnxruntime; without a reduction one gather kernel moves the data,
    with one a gather per update an element gets."""
    manifest = build_and_compare(scattered(op, indices, reduction, axis), "avx2", tmp_path / "scatter")
    kinds = [k["kind"] for k in manifest["kernels"]]
    assert kinds.count("gather") == gathers, kinds


@pytest.mark.parametrize(("indices", "axis", "low", "high", "size"), [(np.array([[0, 1], [2, 0]]), 0, 0, 2, 2),
                                                                   (np.array([[0, 1], [1, -6]]), 1, -6, 1, 5)])
def test_a_scatter_index_outside_the_data_is_refused_naming_the_node(indices, axis, low, high, size):
    with pytest.raises(AutoconfigError, match=rf"^node 'scatternd_\d+' \(ScatterND\): the indices along axis {axis} "
                                              rf"\({low} \.\. {high}\) reach outside its {size} elements$"):  # fmt: skip
        import_model(scattered("ScatterND", indices))


def old_opset_net() -> onnx.ModelProto:
    """Opset 7, as the ONNX model zoo's oldest CNNs: a convolution, BatchNormalization
    (with its spatial attribute of then), Relu, Upsample by scales given as an attribute,
    Flatten."""
    b = zoo.Builder("old_opset", 9)
    stats = [b.const(k, v) for k, v in (("gamma", b.rng.uniform(0.5, 1.5, 4)), ("beta", b.rng.standard_normal(4)),
                                         ("mean", b.rng.standard_normal(4)), ("var", b.rng.uniform(0.5, 1.5, 4)))]
    y = b.op("BatchNormalization", [b.conv("input", 3, 4, 3), *stats], epsilon=1e-5, spatial=1)
    y = b.op("Upsample", [b.op("Relu", [y])], scales=[1.0, 1.0, 2.0, 2.0], mode="nearest")
    return b.model("input", [1, 3, 6, 6], [(b.op("Flatten", [y]), None)], opset=7)


def test_a_model_of_an_older_opset_is_converted_first(tmp_path):
    """onnx's version converter raises it to the first opset the importer reads; it
    matches onnxruntime running it as written."""
    manifest = build_and_compare(old_opset_net(), "avx2", tmp_path / "old")
    assert {k["kind"] for k in manifest["kernels"]} <= {"conv", "gather", "view"}, manifest["kernels"]


def test_an_operator_onnx_does_not_define_in_an_old_opset_is_named():
    model = old_opset_net()
    model.graph.node[-1].op_type = "Crop"  # opset 1's experimental op, gone since: no converter knows it
    with pytest.raises(AutoconfigError, match=r"^model: node 'flatten_\d+': unsupported operator Crop$"):
        import_model(model)


def upsampling_head(mode: str, transform: str) -> onnx.ModelProto:
    """A segmentation head: a 1x1 convolution to 5 classes on 12x12 features, resized 8x
    to 96x96 (`mode`, `transform`), a Relu after (a consumer reading the whole output)."""
    b = zoo.Builder("upsampling", 6)
    y = b.op("Resize", [b.conv("input", 16, 5, 1, bias=True), "", "", b.const("sizes", np.array([1, 5, 96, 96], np.int64))],
             mode=mode, coordinate_transformation_mode=transform)  # fmt: skip
    return b.model("input", [1, 16, 12, 12], [(b.op("Relu", [y]), [1, 5, 96, 96])])


@pytest.mark.parametrize("mode, transform", [("linear", "half_pixel"), ("linear", "align_corners"),
                                             ("cubic", "half_pixel")])  # fmt: skip
def test_an_upsampling_multiplies_only_each_outputs_taps(tmp_path, mode, transform):
    """The resize along each axis is a product by its weights, most of them zero (along
    the height the left operand, along the width the right): the model picks kernels
    that multiply each tile's band of them alone, and they match onnxruntime."""
    manifest = build_and_compare(upsampling_head(mode, transform), "avx2", tmp_path / "head")
    choices = [k["choice"] for k in manifest["kernels"] if k["kind"] == "matmul"]
    assert len(choices) == 2 and all(" band " in c for c in choices), choices


def transposed_net(shape: list[int], perm: list[int]) -> onnx.ModelProto:
    """A Tanh (so the Transpose reads a computed tensor, of both signs), the Transpose, a
    Relu."""
    b = zoo.Builder("transposed", 4)
    y = b.op("Relu", [b.op("Transpose", [b.op("Tanh", ["input"])], perm=perm)])
    return b.model("input", shape, [(y, [shape[p] for p in perm])])


@pytest.mark.parametrize("target", ["avx2", "avx512", "neon"])
@pytest.mark.parametrize(("shape", "perm", "squares"), [
    ([2, 24, 5, 7], [0, 2, 3, 1], True), ([1, 5, 7, 12], [0, 3, 1, 2], True), ([36, 20], [1, 0], True),
    ([2, 3, 16, 9], [0, 1, 3, 2], True), ([3, 6, 10], [0, 2, 1], False), ([2, 8, 3, 4], [0, 2, 1, 3], False),
    ([1, 16, 1, 1], [0, 2, 3, 1], None),
])  # fmt: skip
def test_a_transpose_swapping_two_groups_of_axes_runs_in_squares(tmp_path, target, shape, perm, squares):
    """A Transpose of [n, a, b] to [n, b, a] (NCHW to NHWC and back, a matrix, the last
    two axes) is transposed in squares of registers where a or b has a factor of 4
    lanes or more (6 and 10 have none: a gather); one that keeps the last axis is a
    gather of runs; one that keeps the order (a group of one) is a view. Each matches
    onnxruntime."""
    require_runnable(get_target(target))
    manifest = build_and_compare(transposed_net(shape, perm), target, tmp_path / "t")
    moved = [k["choice"] for k in manifest["kernels"] if k["kind"] == "gather"]
    assert len(moved) == (squares is not None) and all(("squares" in m) == squares for m in moved), moved


@pytest.mark.slow
@pytest.mark.parametrize(("target", "vlen"), [("neon", None), ("rvv", 128), ("rvv", 256)])
def test_cross_targets_build_a_static_library_run_under_qemu(tmp_path, target, vlen):
    require_runnable(get_target(target, vlen))
    manifest = build_and_compare(zoo.mobilenet_v1(), target, tmp_path / "mobilenet", vlen=vlen)
    assert manifest["library"].endswith(".a") and (tmp_path / "mobilenet" / "libautoconfig_model.a").is_file()
    assert manifest["vector_bits"] == (vlen or 128)
    build_and_compare(mlp(), target, tmp_path / "mlp", vlen=vlen)
    build_and_compare(small_cnn(), target, tmp_path / "cnn", vlen=vlen)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("name", ["vgg16", "mobilenet_v1", "efficientnet_b0", "yolov4"])
def test_zoo_models_match_onnxruntime(tmp_path, name, target):
    require_runnable(get_target(target))
    manifest = build_and_compare(zoo.build(name), target, tmp_path / name)
    assert manifest["arena_bytes"] <= manifest["intermediate_bytes"]  # reused once cooled (threads > 1)


def test_arena_memory_is_reused_only_after_the_other_cores_caches_have_cooled():
    """Two buffers used one after the other share memory at one thread; with two, only
    once `Builder.cooling` floats of traffic (constants read, buffers written or last
    read) lie between them both ways round (through the next run): a line another
    core read and still holds costs its next writer an invalidation."""
    graph, profile = import_model(mlp()), load_profile(PROFILES["avx2"])

    def offsets(threads: int, constants: dict[int, int]) -> tuple[int, int]:
        b = Builder(graph, profile, get_target("avx2"), threads, None)
        first = b.buffers[b._buffer(1000)]  # used by kernel 0
        b.step = 2
        second = b.buffers[b._buffer(1000)]  # used by kernel 2
        for step, floats in constants.items():
            b.step = step
            b.constant(np.zeros(floats, np.float32))
        b.step = 3  # the last kernel
        b.place([], [])
        return first.offset, second.offset

    cooling = Builder(graph, profile, get_target("avx2"), 2, None).cooling()
    assert cooling > 0 and Builder(graph, profile, get_target("avx2"), 1, None).cooling() == 0
    assert offsets(1, {}) == (0, 0)
    assert len(set(offsets(2, {}))) == 2
    assert len(set(offsets(2, {1: cooling}))) == 2  # cooled between them, not before the next run's first
    assert offsets(2, {1: cooling, 3: cooling}) == (0, 0)

    b = Builder(graph, profile, get_target("avx2"), 2, None)  # ten buffers one after another, their own
    for step in range(10):  # traffic between: all apart, they would take ten times the memory
        b.step = step
        b._buffer(1000)
    assert b.place([], []) <= COOLED_ARENA_GROWTH * aligned(1000) and 0 < b.cooled < cooling  # cooled less


def test_a_build_for_threads_also_holds_a_program_reusing_memory_at_once(tmp_path, monkeypatch):
    """Beside the cooled arena, a two-thread build holds a program whose memory is reused
    at once, for cores that pass lines to each other quickly (measured as it runs, or
    told by AUTOCONFIG_CORES): smaller, its outputs where the other's are, and both
    programs give onnxruntime's answer."""
    target = get_target("avx2")
    require_runnable(target)
    model = small_cnn()
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    manifest = autoconfig.compile_model(path, tmp_path / "out", profile=PROFILES[target.name], target=target, threads=2)
    assert manifest["near_arena_bytes"] < manifest["arena_bytes"]
    loaded = autoconfig.load(tmp_path / "out")
    name, shape = loaded.inputs[0]
    x = np.random.default_rng(4).standard_normal(shape, dtype=np.float32)
    (expected,) = onnxruntime_outputs(model, {name: x})
    for cores in ("near", "apart", "measured"):
        monkeypatch.setenv("AUTOCONFIG_CORES", cores)
        (ours,) = loaded({name: x}).values()
        assert np.abs(ours - expected).max() <= 1e-4 * float(expected.max() - expected.min()), cores
        said = {"near": "at once", "apart": "only after"}.get(cores, "reused")
        assert said in loaded.placement()
    single = autoconfig.compile_model(path, tmp_path / "one", profile=PROFILES[target.name], target=target, threads=1)
    assert "near_arena_bytes" not in single and autoconfig.load(tmp_path / "one").placement() is None


def test_a_build_plans_its_fusion_for_the_threads_it_runs_on(tmp_path, monkeypatch):
    """The fusion plan prices kernels as the build runs them: on the threads asked for,
    or on every core of the profile when none are."""
    import autoconfig.fusion

    asked, planned = [], autoconfig.fusion.plan

    def recorded(graph, profile, strategy="dp", decisions=None, threads=1):
        asked.append(threads)
        return planned(graph, profile, strategy, decisions, threads)

    monkeypatch.setattr(autoconfig.fusion, "plan", recorded)
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    for threads in (1, 2, None):
        autoconfig.compile_model(path, tmp_path / f"out{threads}", profile=PROFILES["avx2"], target="avx2",
                                 threads=threads)  # fmt: skip
    assert asked == [1, 2, int(load_profile(PROFILES["avx2"]).cores)]


def test_each_parts_scratch_is_memory_of_its_own_in_every_kernel():
    """`Builder.private`: a part's scratch follows its earlier asks in the same kernel,
    starts over at the same memory in the next (which then finds it in its thread's
    caches, where arena memory other threads used costs it transfers), and shares that
    memory with no other part and no other buffer."""
    graph, profile = import_model(mlp()), load_profile(PROFILES["avx2"])
    b = Builder(graph, profile, get_target("avx2"), 2, None)
    first = [b.private(100, 0), b.private(50, 0), b.private(30, 1)]
    b.finish_step()
    b.step = 1
    again, other = b.private(1000, 0), b._buffer(5000)  # `other`: a kernel's own buffer
    b.step = 2
    b.place([], [])
    assert first[0].space == first[1].space == again.space != first[2].space
    assert (first[0].offset, first[1].offset, again.offset) == (0, aligned(100), 0)
    spans = [(b.buffers[i].offset, b.buffers[i].offset + b.buffers[i].size)
             for i in (first[0].space - VIRTUAL, first[2].space - VIRTUAL, other)]  # fmt: skip
    assert b.buffers[first[0].space - VIRTUAL].size == aligned(1000)
    assert all(x[1] <= y[0] or y[1] <= x[0] for x, y in itertools.combinations(spans, 2)), spans


def test_products_with_weights_from_memory_split_the_weights_among_tied_plans():
    """A product with a constant B splits the tokens (the rows its A's producer wrote)
    among tied plans, unless the model's weights outgrow the L3 and stream from memory
    on every run and this product's weights outweigh its computed operand: then B's
    columns, each thread fetching its share of the weights. A small constant (a resize's
    interpolation matrix) keeps the rows: each thread writes its own block of output."""
    b = Builder(import_model(mlp()), load_profile(PROFILES["avx2"]), get_target("avx2"), 2, None)
    layer, resize = MatmulShape(128, 768, 768), MatmulShape(4704, 224, 14)
    assert matmul_family._preferred_split(b, layer, True, False) == "rows"
    assert matmul_family._preferred_split(b, layer, False, True) == "columns"
    assert matmul_family._preferred_split(b, layer, False, False) is None
    b.model_bytes = 1 << 30  # 1 GB: beyond any L3
    assert matmul_family._preferred_split(b, layer, True, False) == "columns"
    assert matmul_family._preferred_split(b, MatmulShape(768, 128, 768), False, True) == "rows"
    assert matmul_family._preferred_split(b, resize, True, False) == "rows"
    assert matmul_family._preferred_split(b, MatmulShape(224, 4704, 14), False, True) == "columns"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16", "mobilenet_v1", "efficientnet_b0", "yolov4"])
@pytest.mark.parametrize("strategy", ["dp", "greedy"])
def test_every_group_the_planner_proposes_is_one_generated_kernel_or_none(name, strategy):
    # lowering every group of the plan (kernels generated as MLIR, nothing compiled)
    graph = import_model(zoo.build(name))
    profile = load_profile(PROFILES["avx512"])
    groups = plan(graph, profile, strategy).groups
    built = build_model(graph, profile, get_target("avx512"), strategy)
    assert len([k for k in built.kernels if k.kind != "layout"]) <= len(groups)  # transforms: no group's
    assert all(k.modules for k in built.kernels)


def normalized_net(spatial: tuple[int, ...], seed: int = 8) -> onnx.ModelProto:
    """A convolution (1-D or 2-D: strided, padded unevenly, dilated, grouped), then
    InstanceNormalization and ReLU, and InstanceNormalization of the input itself."""
    rng = np.random.default_rng(seed)
    rank = len(spatial)
    conv = {"kernel_shape": [3] * rank, "strides": [2] * rank, "dilations": [2] * rank, "group": 2,
            "pads": [1] * rank + [2] * rank}  # fmt: skip
    out = [(d + 3 - 2 * 2 - 1) // 2 + 1 for d in spatial]
    inits = {"w": rng.standard_normal((8, 3, *[3] * rank)), "bias": rng.standard_normal(8),
             "s1": rng.standard_normal(8), "b1": rng.standard_normal(8), "s0": rng.standard_normal(6),
             "b0": rng.standard_normal(6)}  # fmt: skip
    nodes = [onnx.helper.make_node("Conv", ["input", "w", "bias"], ["c"], **conv),
             onnx.helper.make_node("InstanceNormalization", ["c", "s1", "b1"], ["n"], epsilon=1e-3),
             onnx.helper.make_node("Relu", ["n"], ["y"]),
             onnx.helper.make_node("InstanceNormalization", ["input", "s0", "b0"], ["z"])]  # fmt: skip
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        nodes, f"normalized_{rank}d", [value("input", onnx.TensorProto.FLOAT, [1, 6, *spatial])],
        [value("y", onnx.TensorProto.FLOAT, [1, 8, *out]), value("z", onnx.TensorProto.FLOAT, [1, 6, *spatial])],
        [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime reads
    return model


@pytest.mark.parametrize("spatial", [(23,), (11, 9)], ids=["1d", "2d"])
def test_instance_normalization_and_1d_convolution_match_onnxruntime(tmp_path, spatial):
    """InstanceNormalization as its definition's ops, after a convolution and on a graph
    input; a 1-D convolution as a 2-D one over one row."""
    require_runnable(get_target("avx2"))
    build_and_compare(normalized_net(spatial), "avx2", tmp_path / "built")


def test_a_batchnorm_over_the_columns_of_token_rows_matches_onnxruntime(tmp_path):
    """LeViT's BatchNorm1d after a Linear, on its tokens flattened to rows: its channels
    are the columns of a 2-D tensor, not the planes of an elementwise kernel over rows,
    so its scale and shift are read broadcast to the rows."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("rows_batchnorm", 3)
    x = b.op("Reshape", [b.op("MatMul", ["input", b.const("w", b.rng.standard_normal((32, 24)))]),
                         b.const("rows", np.array([49, 24], np.int64))])  # fmt: skip
    stats = [b.const(n, v) for n, v in (("g", b.rng.standard_normal(24)), ("b", b.rng.standard_normal(24)),
                                        ("m", b.rng.standard_normal(24)), ("v", b.rng.random(24) + 0.5))]  # fmt: skip
    y = b.op("Reshape", [b.op("BatchNormalization", [x, *stats]), b.const("tokens", np.array([1, 49, 24], np.int64))])
    manifest = build_and_compare(b.model("input", [1, 49, 32], [(y, None)], opset=17), "avx2", tmp_path / "built")
    assert any("BatchNormalization" in " ".join(k["ops"]) for k in manifest["kernels"])


TRANSPOSED = [((5, 6), 4, 6, 1, {"strides": [2, 2]}),
              ((5, 6), 4, 6, 2, {"strides": [2, 3], "pads": [1, 0, 2, 1], "output_padding": [1, 0]}),
              ((7,), 3, 5, 1, {"strides": [2], "pads": [1, 1]}),
              ((4, 4), 8, 8, 8, {"strides": [2, 2], "kernel_shape": [4, 4], "pads": [1, 1, 1, 1]}),
              ((5, 5), 2, 3, 1, {"dilations": [2, 2], "pads": [3, 3, 3, 3]}),
              ((5, 5), 2, 3, 1, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
              ((5, 5), 2, 3, 1, {"strides": [2, 2], "output_shape": [10, 11]}),
              ((3, 4, 5), 2, 4, 2, {"strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 0]})]  # fmt: skip
"""ConvTranspose cases: (spatial size, in, out channels, groups, attributes): strides
per axis, uneven pads and output padding, 1-D, depthwise, dilation with pads beyond the
filter's reach (a crop), SAME padding, an output shape, 3-D grouped."""


@pytest.mark.parametrize("case", TRANSPOSED, ids=lambda c: "-".join(f"{k}{v}" for k, v in c[4].items()) or "plain")
def test_transposed_convolutions_match_onnxruntime(tmp_path, case):
    spatial, channels, out_channels, group, attrs = case
    rng = np.random.default_rng(9)
    kernel = attrs.get("kernel_shape", [3] * len(spatial))
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((channels, out_channels // group, *kernel), np.float32), "w"),
             onnx.numpy_helper.from_array(rng.standard_normal(out_channels, np.float32), "b")]  # fmt: skip
    nodes = [onnx.helper.make_node("ConvTranspose", ["input", "w", "b"], ["y"], group=group, **attrs),
             onnx.helper.make_node("Relu", ["y"], ["out"])]  # fmt: skip
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(nodes, "transposed", [value("input", onnx.TensorProto.FLOAT, [1, channels, *spatial])],
                                   [value("out", onnx.TensorProto.FLOAT, None)], inits)  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    require_runnable(get_target("avx2"))
    build_and_compare(onnx.shape_inference.infer_shapes(model), "avx2", tmp_path / "built")


COLUMNS = [((9, 8), (3, 3), {}),
           ((10, 9), (3, 2), {"strides": [2, 3], "pads": [1, 0, 0, 1]}),  # blocks that stop short of the end
           ((11, 7), (2, 3), {"dilations": [3, 2], "pads": [1, 1, 1, 1], "strides": [1, 2]})]  # fmt: skip
"""Col2Im cases: (image, block, attributes)."""


@pytest.mark.parametrize("image, block, attrs", COLUMNS)
def test_col2im_matches_onnxruntime(tmp_path, image, block, attrs):
    """Col2Im (torch's fold) of 3 channels' blocks, both signs, then ReLU."""
    strides, dilations = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0] * 4)
    grid = [(n + pads[i] + pads[i + 2] - d * (k - 1) - 1) // s + 1
            for i, (n, k, s, d) in enumerate(zip(image, block, strides, dilations))]  # fmt: skip
    b = zoo.Builder("col2im", 4)
    y = b.op("Col2Im", ["input", b.const("image", np.array(image, np.int64)), b.const("block", np.array(block, np.int64))],
             **attrs)  # fmt: skip
    model = b.model("input", [2, 3 * block[0] * block[1], grid[0] * grid[1]], [(b.op("Relu", [y]), None)], opset=18)
    require_runnable(get_target("avx2"))
    build_and_compare(model, "avx2", tmp_path / "built")


ODD_CHANNELS = (*range(1, 71), 440, 1000)
"""Channel counts 1..70 and the zoo's odd ones (RegNet-Y's 440, SqueezeNet's 1000)."""


def channel_counts_net(channels=ODD_CHANNELS) -> onnx.ModelProto:
    """Per channel count c, a convolution to c channels from a channel-blocked tensor,
    and ReLU, read by a global average pool (SqueezeNet's and RegNet's classifier): the
    planner may hold the tensor NCHW[c] or NHWC, whose pool must take any c."""
    b = zoo.Builder("channel_counts", 7)
    x = b.act(b.conv("input", 8, 16, 3), "relu")
    pooled = []
    for c in channels:
        y = b.act(b.conv(x, 16, c, 1, bias=True), "relu")
        pooled.append(b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1))
    return b.model("input", [1, 8, 13, 13], [(b.op("Concat", pooled, axis=1), [1, sum(channels)])])


@pytest.mark.slow
def test_a_reader_takes_any_channel_count_in_the_layout_planned(tmp_path):
    """The layout plan never picks a layout a reader cannot take: every channel count
    builds for AVX-512 (whose 16 lanes 440 and 1000 do not fill; a host without it
    links the model and refuses to load it) and runs on AVX2 against onnxruntime."""
    model = channel_counts_net()
    path = tmp_path / "channels.onnx"
    onnx.save(model, path)
    autoconfig.compile_model(path, tmp_path / "avx512", profile=HWPROFILES / "amd-epyc-zen4-avx512.yaml",
                             target=get_target("avx512"))  # a profile with 8-lane figures: NHWC offered
    if get_target("avx512").execution(this_host()).mode != "native":  # linked, but refused before it runs
        with pytest.raises(AutoconfigError, match="built for avx512, which this machine cannot run"):
            autoconfig.load(tmp_path / "avx512")
    require_runnable(get_target("avx2"))
    build_and_compare(model, "avx2", tmp_path / "avx2")


def dense_block(channels: int, growth: int, layers: int, seed: int = 4) -> onnx.ModelProto:
    """DenseNet's block as torchvision writes it: layer k concatenates the block's input
    and every earlier layer's output (layer 1 a Concat of one input), then BatchNorm,
    ReLU and a convolution; the block's output concatenates them all."""
    b = zoo.Builder("dense_block", seed)
    features = [b.cba("input", 3, channels, 3)]
    for _ in range(layers):
        joined = b.op("Concat", list(features), axis=1)
        width = channels + growth * (len(features) - 1)
        features.append(b.conv(b.act(b.bn(joined, width), "relu"), width, growth, 3))
    out = channels + growth * layers
    return b.model("input", [1, 3, 12, 12], [(b.op("Concat", features, axis=1), [1, out, 12, 12])])


@pytest.mark.slow
def test_growing_concatenations_are_placed_not_copied(tmp_path):
    """Each Concat of a dense block begins with all of the previous one's inputs: that
    Concat's output is placed as its first slice and the producers write the rest in
    place, so no input is copied (each layer used to copy all of them again), and the
    outputs are onnxruntime's."""
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(dense_block(8, 4, 4), "avx2", tmp_path / "dense")
    copies = [k["choice"] for k in manifest["kernels"] if "copied into place" in k["choice"]]
    assert copies == [], copies


def test_unsupported_operator_is_one_line_and_leaves_no_directory(tmp_path, capsys):
    b = zoo.Builder("pool_indices", 0)
    y = b.conv("input", 3, 8, 3)
    b.nodes.append(onnx.helper.make_node("MaxPool", [y], ["pooled", "indices"], name="pool", kernel_shape=[2, 2]))
    path = tmp_path / "pool_indices.onnx"
    onnx.save(b.model("input", [1, 3, 8, 8], [("pooled", [1, 8, 7, 7])]), path)
    out = tmp_path / "built"
    assert main(["build", str(path), "--out", str(out), "--profile", str(PROFILES["avx512"]), "--target", "avx512"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "node 'pool' (MaxPool): the Indices output of MaxPool is not generated" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool_indices.onnx"]


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
    capsys.readouterr()
    assert main(["run", str(out), "--input", f"input={x}", "--output", str(tmp_path / "y.npz"), "--bench", "3",
                 "--per-kernel"]) == 0  # fmt: skip
    assert np.load(tmp_path / "y.npz")[model.outputs[0][0]].shape == (5, 10)
    assert sum(k.get("flops", 0) for k in model.manifest["kernels"]) == 2 * 5 * (37 * 64 + 64 * 48 + 48 * 10)
    assert re.search(r"matrix products: 3 kernels, \d+\.\d% of the kernels' time, [\d.]+ GFLOP/s = [\d.]+x the "
                     r"profile's \d+-thread peak \([\d.]+ GFLOP/s\)", capsys.readouterr().out)
    weights = out / "weights.bin"
    data = weights.read_bytes()
    weights.write_bytes(data[:-4] + bytes(b ^ 0xFF for b in data[-4:]))  # whatever they were
    capsys.readouterr()
    assert main(["run", str(out)]) == 2
    assert "weights.bin was changed" in capsys.readouterr().err
    (out / "report.md").unlink()
    with pytest.raises(AutoconfigError, match="report.md is missing"):
        autoconfig.load(out)


def test_running_a_built_model_never_imports_the_compiler(tmp_path):
    """A fresh process that loads and runs a model has no MLIR bindings, no LLVM and
    no generator in it (they alone would add tens of MB to every deployed process):
    of `kernels`, only its exception type (which the project's error seam names), the
    target table and the file helper it imports (whether this CPU runs the build)."""
    require_runnable(get_target("avx2"))
    out = tmp_path / "mlp"
    build_and_compare(mlp(), "avx2", out)
    probe = ("import sys, numpy as np, autoconfig\n"
             f"model = autoconfig.load({str(out)!r})\n"
             "model({'input': np.ones((5, 37), np.float32)})\n"
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('mlir', 'torch_mlir', 'llvmlite', 'kernels', 'onnx') and m not in ('kernels', 'kernels.errors', 'kernels.target', 'kernels.files'))))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == []


def test_same_inputs_same_bytes(tmp_path):
    require_runnable(get_target("avx2"))
    first = build_and_compare(mlp(), "avx2", tmp_path / "a")
    second = build_and_compare(mlp(), "avx2", tmp_path / "b")
    assert first["files"] == second["files"]


@pytest.mark.slow
def test_a_warm_rebuild_asks_no_model_generates_nothing_and_gives_the_same_bytes(tmp_path, monkeypatch):
    require_runnable(get_target("avx2"))
    monkeypatch.setenv("AUTOCONFIG_CACHE_DIR", str(tmp_path / "cache"))
    first = build_and_compare(small_cnn(), "avx2", tmp_path / "a")

    def asked(*args, **kwargs):
        raise AssertionError("a model was asked again")

    monkeypatch.setattr("autoconfig.models.matmul.predict", asked)
    monkeypatch.setattr("autoconfig.models.conv.predict", asked)
    graph = import_model(small_cnn())
    built = build_model(graph, load_profile(PROFILES["avx2"]), get_target("avx2"), cache=default_cache())
    assert all(m.module is None for k in built.kernels for m in k.modules)  # all read back as text
    second = build_and_compare(small_cnn(), "avx2", tmp_path / "b")
    assert first["kernel_objects"]["compiled"] > 0 and second["kernel_objects"]["compiled"] == 0
    assert first["files"] == second["files"]


def test_the_example_c_program_runs_a_built_model(tmp_path):
    require_runnable(get_target("avx2"))
    out = tmp_path / "mlp"
    build_and_compare(mlp(), "avx2", out)
    app = tmp_path / "app"
    subprocess.run(["cc", str(Path(__file__).parent.parent / "examples" / "app.c"), f"-I{out}", str(out / "libautoconfig_model.so"),
                    f"-Wl,-rpath,{out}", "-o", str(app)], check=True)  # fmt: skip
    x = np.random.default_rng(5).standard_normal((5, 37), dtype=np.float32)
    x.tofile(tmp_path / "x.bin")
    subprocess.run([str(app), str(out / "weights.bin"), str(tmp_path / "x.bin"), str(tmp_path / "y.bin"),
                    str(x.size), "50"], check=True)  # fmt: skip
    y = np.fromfile(tmp_path / "y.bin", np.float32).reshape(5, 10)
    np.testing.assert_allclose(y, onnxruntime_outputs(mlp(), {"input": x})[0], atol=1e-6)


@pytest.mark.slow
def test_demo_builds_mobilenet_and_compares_with_onnxruntime(monkeypatch):
    require_runnable(get_target("avx2"))
    monkeypatch.setattr("autoconfig.probe.host_profile", lambda: load_profile(PROFILES["avx2"]))
    lines: list[str] = []
    assert run_model_demo("mobilenet_v1", threads=1, repeat=2, say=lines.append)
    assert lines[1].startswith("built mobilenet_v1: ") and " kernels for avx2 in " in lines[1]
    assert lines[2].startswith("latency at 1 thread(s), median of 2: autoconfig ") and "onnxruntime" in lines[2]
    assert lines[3].endswith("(ok)")


@pytest.mark.slow
def test_bench_runs_a_model_outside_the_zoo_next_to_the_peers(monkeypatch, tmp_path):
    """`autoconfig bench` on a model of its own: our latency beside onnxruntime's and
    OpenVINO's (or the line saying it is not installed), our outputs checked."""
    require_runnable(get_target("avx2"))
    monkeypatch.setattr("autoconfig.probe.host_profile", lambda: load_profile(PROFILES["avx2"]))
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    lines: list[str] = []
    assert bench(path, threads=1, peers=("onnxruntime", "openvino"), repeat=2, say=lines.append)
    assert lines[1].startswith("built cnn: ")
    assert "onnxruntime " in lines[2] and re.search(r"openvino( \d+\.\d+ ms|: not installed)", lines[2])
    assert any("autoconfig max |error|" in line and line.endswith("(ok)") for line in lines[3:])


def test_a_pool_window_onnx_and_onnxruntime_size_differently_is_refused(tmp_path):
    b = zoo.Builder("ceil_pool", 0)
    y = b.op("AveragePool", ["input"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
    path = tmp_path / "ceil_pool.onnx"
    onnx.save(b.model("input", [1, 3, 9, 9], [(y, None)]), path)
    with pytest.raises(AutoconfigError, match=r"onnx's shape inference gives \(1, 3, 6, 6\), but onnxruntime"):
        autoconfig.compile_model(path, tmp_path / "out", profile=PROFILES["avx2"], target="avx2")
    assert not (tmp_path / "out").exists()


def test_a_wide_pooling_window_is_priced_by_its_loads():
    """A 13x13 max pool of a 13² image reads each input value 169 times from L1: its
    prediction is its loads' time, not its bytes' (which a 2x2/2 pool of the same image
    moves as many of)."""
    b = zoo.Builder("spp", 0)
    wide = b.op("MaxPool", ["input"], kernel_shape=[13, 13], strides=[1, 1], pads=[6, 6, 6, 6])
    small = b.op("MaxPool", ["input"], kernel_shape=[2, 2], strides=[2, 2])
    profile = load_profile(PROFILES["avx512"])
    graph = import_model(b.model("input", [1, 64, 13, 13], [(wide, None), (small, None)]))
    pools = {k.name: k for k in build_model(graph, profile, get_target("avx512"), threads=1).kernels}
    wide_pool, small_pool = (pools[graph.producers()[value].name] for value in (wide, small))
    loads = 169 * 64 * 13  # taps × planes × rows, one 16-lane vector per 13-wide row
    assert "load-bound" in wide_pool.explain
    assert wide_pool.predicted_ns > loads / Machine.of(profile).vector_loads_per_ns()
    assert wide_pool.predicted_ns > 10 * small_pool.predicted_ns


def atrous_net() -> onnx.ModelProto:
    """DeepLab's atrous pyramid on a small map: 3x3 windows dilated past the input, so
    some taps read only padding (dilation 12 rows on 9 rows: only the middle row is
    live; 4 columns on 11: all are; 9 and 12 at stride 2: only the middle tap), one
    grouped."""
    b = zoo.Builder("atrous_net", 9)
    rng = np.random.default_rng(9)

    def atrous(dilations: list[int], stride: int = 1, group: int = 1) -> str:
        w = b.const("w", rng.standard_normal((8, 8 // group, 3, 3), dtype=np.float32))
        return b.op("Conv", ["input", w], kernel_shape=[3, 3], dilations=dilations, pads=dilations * 2,
                    strides=[stride, stride], group=group)  # fmt: skip

    branches = [atrous([12, 4]), atrous([9, 12], stride=2, group=4), atrous([1, 1])]
    pooled = [b.op("GlobalAveragePool", [y]) for y in branches]
    return b.model("input", [1, 8, 9, 11], [(b.op("Concat", pooled, axis=1), [1, 24, 1, 1])])


def test_taps_that_read_only_padding_are_dropped(tmp_path):
    graph = import_model(atrous_net())
    windows = [graph.types[n.inputs[1]].shape[2:] for n in graph.nodes if n.op == "Conv"]
    pads = [n.attrs["pads"] for n in graph.nodes if n.op == "Conv"]
    assert windows == [(1, 3), (1, 1), (3, 3)] and pads[:2] == [[0, 4, 0, 4], [0, 0, 0, 0]]
    require_runnable(get_target("avx2"))
    build_and_compare(atrous_net(), "avx2", tmp_path / "net")


PYRAMIDS = {"rows and columns": ([6, 5], [6, 4, 6, 4], 5), "columns only": ([1, 9], [0, 9, 0, 9], 11)}
"""Windows dilated nearly past a small map (grouped, 8x11 input): dilation 6 on 8 rows
and 5 at stride 2 and pad 4 on 11 columns; or every row tap inside and dilation 9 at
stride 1 on the columns (one band of regions)."""


def pyramid_net(dilations: list[int], pads: list[int], width: int) -> onnx.ModelProto:
    """Most outputs read one tap inside the input, the border ones two or more, with a
    bias, a BatchNormalization and a ReLU after."""
    b = zoo.Builder("pyramid_net", 12)
    rng = np.random.default_rng(12)
    w = b.const("w", rng.standard_normal((16, 4, 3, 3), dtype=np.float32))
    bias = b.const("bias", rng.standard_normal(16, dtype=np.float32))
    y = b.op("Conv", ["input", w, bias], kernel_shape=[3, 3], dilations=dilations, pads=pads,
             strides=[1, 2 if width == 5 else 1], group=2)  # fmt: skip
    stats = [b.const(name, values.astype(np.float32)) for name, values in
             (("gamma", rng.uniform(0.5, 2, 16)), ("beta", rng.standard_normal(16)), ("mean", rng.standard_normal(16)),
              ("var", rng.uniform(0.5, 2, 16)))]  # fmt: skip
    y = b.op("BatchNormalization", [y, *stats])
    height = 8 if dilations[0] > 1 else 6
    return b.model("input", [1, 8, 8, 11], [(b.op("Relu", [y]), [1, 16, height, width])])


@pytest.mark.parametrize("case", PYRAMIDS)
def test_outputs_that_read_few_taps_are_convolved_by_region(tmp_path, case):
    """A convolution whose outputs mostly read padding runs as one unpadded convolution
    per region of outputs reading the same taps, concatenated (on the profile's two
    cores), its BatchNormalization folded first: the same answer."""
    model = pyramid_net(*PYRAMIDS[case])
    graph = import_model(model)
    convs = [n for n in graph.nodes if n.op == "Conv"]
    assert len(convs) > 1 and all(n.attrs["pads"] == [0, 0, 0, 0] for n in convs)
    assert not [n for n in graph.nodes if n.op == "BatchNormalization"]  # folded before the split
    out = graph.types[graph.outputs[0]].shape
    taps = sum(np.prod(graph.types[n.outputs[0]].shape[2:]) * np.prod(n.attrs["kernel_shape"]) for n in convs)
    assert taps <= 0.5 * out[2] * out[3] * 9  # the regions' multiply-adds per channel pair against the padded window's
    require_runnable(get_target("avx2"))
    build_and_compare(model, "avx2", tmp_path / "net")


def dynamic_net() -> onnx.ModelProto:
    """A convolution on a [batch, 3, ?, ?] input flattened by shape arithmetic (Shape,
    Gather, Concat into Reshape), as exporters write a model with dynamic axes."""
    h = onnx.helper
    w = np.random.default_rng(5).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [h.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Shape", ["y"], ["shape"], name="shape"),
             h.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
             h.make_node("Concat", ["batch", "minus_one"], ["flat_shape"], name="concat", axis=0),
             h.make_node("Reshape", ["y", "flat_shape"], ["out"], name="flatten")]  # fmt: skip
    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch_size", 3, None, None])
    out = h.make_tensor_value_info("out", onnx.TensorProto.FLOAT, ["batch_size", None])
    inits = [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]  # fmt: skip
    graph = h.make_graph(nodes, "dynamic", [x], [out], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_dynamic_dimensions_are_fixed_by_name_or_by_input(tmp_path, capsys):
    """A model with dynamic axes builds once its sizes are given (a named dimension, an
    input's whole shape) and matches onnxruntime; without them, or with a name the model
    lacks, the build stops with one line saying which --shape to give."""
    model, path = dynamic_net(), tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    args = ["build", str(path), "--profile", str(PROFILES["avx2"]), "--target", "avx2", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 2
    assert "dynamic dimension 'batch_size': give its size with --shape batch_size=SIZE" in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "a"), "--shape", "batch_size=2"]) == 2
    assert "--shape INPUT=1x3x224x224" in capsys.readouterr().err  # the unnamed height and width
    assert main([*args, "--out", str(tmp_path / "a"), "--shape", "height=5"]) == 2
    assert "--shape height: neither an input (x) nor a named dimension (batch_size)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*args, "--out", str(tmp_path / "a"), "--shape", "x=2x3x"])
    require_runnable(get_target("avx2"))
    assert main([*args, "--out", str(tmp_path / "b"), "--shape", "x=2x3x5x7"]) == 0
    loaded = autoconfig.load(tmp_path / "b")
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 7), dtype=np.float32)
    np.testing.assert_allclose(loaded({"x": x})["out"], onnxruntime_outputs(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def rotary_net() -> onnx.ModelProto:
    """A rotary position embedding as Llama's export writes it: x·cos + rotate_half(x)·sin,
    then scaled: two chains of elementwise ops joined by an Add."""
    h, rng = onnx.helper, np.random.default_rng(9)
    consts = {"cos": rng.standard_normal((8, 16)), "sin": rng.standard_normal((8, 16)), "half": [8], "end": [16],
              "zero": [0], "axis": [3], "scale": [0.5]}  # fmt: skip
    inits = [onnx.numpy_helper.from_array(np.asarray(v, np.int64 if k in ("half", "end", "zero", "axis") else np.float32), k)
             for k, v in consts.items()]  # fmt: skip
    nodes = [h.make_node("Mul", ["x", "cos"], ["x_cos"], name="x_cos"),
             h.make_node("Slice", ["x", "half", "end", "axis"], ["upper"], name="upper"),
             h.make_node("Slice", ["x", "zero", "half", "axis"], ["lower"], name="lower"),
             h.make_node("Neg", ["upper"], ["minus_upper"], name="negate"),
             h.make_node("Concat", ["minus_upper", "lower"], ["rotated"], name="rotate", axis=3),
             h.make_node("Mul", ["rotated", "sin"], ["rotated_sin"], name="rotated_sin"),
             h.make_node("Add", ["x_cos", "rotated_sin"], ["embedded"], name="embed"),
             h.make_node("Mul", ["embedded", "scale"], ["y"], name="scaled")]  # fmt: skip
    graph = h.make_graph(nodes, "rotary", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 16])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 16])], inits)  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fusion", ["dp", "greedy"])
def test_two_elementwise_chains_joined_are_two_kernels_at_least(tmp_path, fusion):
    """A group whose second chain reads nothing the first computed (the rotated half of
    a rotary embedding, added to the first's product) is cut where it starts: the
    planner's group stayed whole and the build stopped."""
    require_runnable(get_target("avx2"))
    build_and_compare(rotary_net(), "avx2", tmp_path / "built", fusion)


def test_fast_winograd_is_asked_for_by_the_build():
    """A 3x3 layer where F(4,3) is the fastest plan runs F(2,3) unless the build passes
    fast_winograd (`autoconfig build --fast-winograd`)."""
    b = zoo.Builder("winograd", 0)
    model = b.model("input", [1, 64, 56, 56], [(b.conv("input", 64, 64, 3), [1, 64, 56, 56])])
    summaries = {fast: [k.summary for k in build_model(import_model(model), load_profile(PROFILES["avx2"]),
                                                       get_target("avx2"), threads=1, fast_winograd=fast).kernels]
                 for fast in (False, True)}  # fmt: skip
    assert any("F(2,3)" in s for s in summaries[False]) and not any("F(4,3)" in s for s in summaries[False])
    assert any("F(4,3)" in s for s in summaries[True])


def test_a_window_larger_than_the_unpadded_input(tmp_path):
    """A 1x5 depthwise layer on a 3-pixel-wide input, padded by 2 on each side: valid
    ONNX, as in small-image networks' late stages; the planner sizes layers padded."""
    b = zoo.Builder("wide_window", 3)
    w = b.const("w", b.rng.standard_normal((16, 1, 1, 5), dtype=np.float32))
    y = b.op("Conv", [b.cba("input", 16, 16, 1), w], kernel_shape=[1, 5], pads=[0, 2, 0, 2], group=16)
    build_and_compare(b.model("input", [1, 16, 6, 3], [(b.op("Relu", [y]), [1, 16, 6, 3])]), "avx2", tmp_path / "built")


@pytest.mark.parametrize(("kernel", "strides", "pads", "dilations", "group"), [
    ((3, 3, 3), (1, 1, 1), (1, 1, 1, 1, 1, 1), (1, 1, 1), 1),
    ((3, 7, 7), (1, 2, 2), (1, 3, 3, 1, 3, 3), (1, 1, 1), 1),  # a video network's stem
    ((3, 1, 1), (2, 1, 1), (1, 0, 0, 0, 0, 0), (1, 1, 1), 1),  # (2+1)-D's temporal layer, strided
    ((2, 3, 3), (1, 1, 1), (2, 1, 1, 2, 1, 1), (2, 1, 1), 2),  # dilated along the depth, grouped
    ((3, 3, 3), (2, 2, 2), "SAME_UPPER", (1, 1, 1), 1),
])  # fmt: skip
def test_a_3d_convolution_is_a_2d_one_over_stacked_depth_slices(tmp_path, kernel, strides, pads, dilations, group):
    """Conv over (D, H, W), with a bias, then BatchNormalization, ReLU and the global
    average pool of a video classifier, on a batch of two, against onnxruntime."""
    b = zoo.Builder("conv3d", 5)
    w = b.const("w", b.rng.standard_normal((8, 4 // group, *kernel), dtype=np.float32))
    padding = {"auto_pad": pads} if isinstance(pads, str) else {"pads": list(pads)}
    y = b.op("Conv", ["input", w, b.const("b", b.rng.standard_normal(8, dtype=np.float32))], kernel_shape=list(kernel),
             strides=list(strides), dilations=list(dilations), group=group, **padding)  # fmt: skip
    y = b.op("Relu", [b.bn(y, 8)])
    model = b.model("input", [2, 4, 7, 9, 10], [(y, None), (b.op("GlobalAveragePool", [y]), None)])
    build_and_compare(model, "avx2", tmp_path / "built")


def test_only_the_first_reader_of_a_tensor_finds_it_in_the_writers_caches(monkeypatch):
    """Two 1x1 layers read one tensor on two threads: the first lowered is asked for
    its plan as the first reader since the threads before it wrote the tensor
    (`fresh_input`), the second, which finds its lines shared, is not; on one thread
    neither is."""
    b = zoo.Builder("two_readers", 4)
    x = b.cba("input", 3, 32, 3)
    model = b.model("input", [1, 3, 20, 20], [(b.conv(x, 32, 48, 1), [1, 48, 20, 20]),
                                             (b.conv(x, 32, 64, 1), [1, 64, 20, 20])])  # fmt: skip
    asked: dict[tuple[int, int], set[bool]] = {}
    choose = conv_model.choose

    def recording(shape, *args, fresh_input=False, **options):
        asked.setdefault((shape.kernel[0], shape.out_channels), set()).add(fresh_input)
        return choose(shape, *args, fresh_input=fresh_input, **options)

    monkeypatch.setattr(conv_model, "choose", recording)
    profile, target = load_profile(PROFILES["avx512"]), get_target("avx512")
    build_model(import_model(model), profile, target, "none", 2)
    assert asked[(1, 48)] == {True} and False in asked[(1, 64)]
    asked.clear()
    build_model(import_model(model), profile, target, "none", 1)
    assert asked[(1, 48)] == asked[(1, 64)] == {False}
