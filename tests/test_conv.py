"""Convolution and pooling: every algorithm, forced and chosen, equals onnxruntime's
one-node model on layers covering strides, asymmetric pads, dilation, groups,
depthwise, odd channel counts, kernel sizes and spatial sizes from 1x1 to 224x224;
every epilogue op; every pooling variant; small layers on NEON and RVV under qemu;
the model's choices and their explanations; bad input as one error line."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import autoconfig
from autoconfig.cli import main as cli
from autoconfig.errors import AutoconfigError
from autoconfig.machine import F32, Machine
from autoconfig.models import conv as conv_model
from autoconfig.models.conv import ConvPlan, choose, predict
from autoconfig.models.cost import RESOLUTION, STALL_TERM, busiest_share
from autoconfig.probe.host import this_host
from autoconfig.profile import load_profile
from kernels import epilogue as ep
from kernels import matmul as mm
from kernels.conv import ConvShape, DepthwiseConfig, DirectConfig, GemmConvConfig, WinogradConfig, input_layout_of
from kernels.conv import layout_of, transposed_shape
from kernels.nchwc import BlockedDepthwiseConfig, BlockedDirectConfig
from kernels import winograd
from kernels.target import get_target
from tests.conftest import require_runnable, target_for

PROFILES = Path(__file__).parent.parent / "hwprofiles"
AVX2 = PROFILES / "amd-epyc.yaml"
AVX512 = PROFILES / "amd-epyc-zen4-avx512.yaml"
PROFILE_OF = {"avx2": AVX2, "avx512": AVX512, "neon": PROFILES / "aws-graviton2-neoverse-n1.yaml",
              "rvv128": PROFILES / "spacemit-k1-x60.yaml", "rvv256": PROFILES / "spacemit-k1-x60.yaml"}  # fmt: skip


def run_onnx(op: str, inputs: dict[str, np.ndarray], initializers: dict[str, np.ndarray], **attributes) -> np.ndarray:
    """onnxruntime's result of a one-node model (the reference)."""
    node = helper.make_node(op, [*inputs, *initializers], ["y"], **attributes)
    graph = helper.make_graph(
        [node], "reference",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(x.shape)) for name, x in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(x, name) for name, x in initializers.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def conv_reference(s: ConvShape, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    return run_onnx("Conv", {"x": x}, {"w": w, **({"b": b} if b is not None else {})},
                    strides=list(s.strides), pads=list(s.pads), dilations=list(s.dilations), group=s.group,
                    kernel_shape=list(s.kernel))  # fmt: skip


def layer_data(s: ConvShape, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(s.input_shape, dtype=np.float32),
            rng.standard_normal(s.weight_shape, dtype=np.float32),
            rng.standard_normal(s.out_channels, dtype=np.float32))  # fmt: skip


def assert_close(y: np.ndarray, expected: np.ndarray, tolerance: float = 1e-4, what: str = "") -> None:
    """Max abs error within `tolerance` × the output's range."""
    assert y.shape == expected.shape, what
    scale = max(float(np.ptp(expected)), 1e-6)
    error = float(np.abs(y.astype(np.float64) - expected).max())
    assert error <= tolerance * scale, f"{what}: max error {error:.3g} > {tolerance} x range {scale:.3g}"


def compile_layer(s: ConvShape, w, b, **options):
    return autoconfig.compile_conv2d(s.input_shape, w, b, strides=s.strides, pads=s.pads,
                                     dilations=s.dilations, group=s.group, **options)  # fmt: skip


# (N, C, H, W, Cout, kernel, strides, pads, dilations, group): strides 1-3, asymmetric
# pads, dilation 2, groups 1/2/depthwise, channels 1/3/17/115, kernels 1/3/5/7, 1x1 to 224x224
LAYERS = [
    ConvShape(1, 3, 17, 19, 8, (3, 3), (1, 1), (1, 1, 1, 1)),
    ConvShape(2, 4, 13, 11, 6, (3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 2),
    ConvShape(1, 5, 16, 40, 7, (5, 5), (1, 1), (2, 2, 2, 2), (2, 2)),
    ConvShape(1, 6, 9, 9, 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),
    ConvShape(1, 17, 7, 7, 20, (1, 1)),
    ConvShape(1, 3, 30, 30, 5, (7, 7), (3, 2), (3, 3, 3, 3)),
    ConvShape(1, 115, 6, 5, 9, (3, 3), (3, 3), (0, 1, 2, 0)),
    ConvShape(1, 1, 1, 1, 4, (1, 1)),
    ConvShape(1, 8, 1, 1, 3, (3, 3), (1, 1), (1, 1, 1, 1)),
    ConvShape(1, 3, 224, 224, 2, (3, 3), (2, 2), (0, 0, 1, 1)),
    ConvShape(1, 16, 10, 12, 32, (1, 1), (2, 2)),
    ConvShape(2, 5, 9, 11, 6, (1, 1), (2, 3)),
    ConvShape(3, 17, 5, 6, 20, (1, 1)),
    ConvShape(2, 12, 8, 8, 12, (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 12),
    ConvShape(3, 7, 13, 22, 9, (3, 3), (1, 1), (0, 1, 2, 0)),  # Winograd: edge tiles both ways, bands
    # of tile rows ending inside an image
]


def forced_plans(s: ConvShape, lanes: int, epilogue: ep.Epilogue) -> list[ConvPlan]:
    """Direct with a small and a blocked tile (two channel blocks where possible), im2col
    with tiled and packed GEMMs (the weights packed per call and once, when built), and
    with dot for one output pixel (the weights as they are and packed), gemm1x1 where it
    applies (also with output channels in the lanes); split among two threads
    (Winograd's by output channels and in bands of tile rows; gemm1x1's also by
    image-groups, each product on a thread)."""
    kc = max(1, s.in_per_group // 2)
    gemm = s.gemm_shape()
    plans = [ConvPlan(DirectConfig(s, lanes, 1, 1, 0, epilogue), 2, "columns"),
             ConvPlan(DirectConfig(s, lanes, 3, 2, kc, epilogue), 2, "groups"),
             ConvPlan(DirectConfig(s, lanes, 4, 1, 1, epilogue), 2, "rows")]  # fmt: skip
    if s.depthwise:
        plans += [ConvPlan(DepthwiseConfig(s, lanes, 3, 2, epilogue), 2, "groups"),
                  ConvPlan(DepthwiseConfig(s, lanes, 1, 1, epilogue), 1, "groups")]  # fmt: skip
    if winograd.applies(s, get_target("avx2")):
        for m, (algorithm, mr, nv) in ((2, ("tiled", 3, 2)), (4, ("packed", 2, 2))):
            rows = s.batch * -(-s.out_height // m)
            for split, bands in (("rows", 1), ("bands", 2))[:1 + (rows > 1)]:
                gemm_shape = WinogradConfig(s, m, lanes, None, bands=bands).gemm_shape()
                gemm_config = winograd.batched(mm.MatmulConfig(gemm_shape, algorithm, lanes, mr, nv, kc=5,
                                                               a_packed=algorithm == "packed"), s, m)  # fmt: skip
                plans.append(ConvPlan(WinogradConfig(s, m, lanes, gemm_config, epilogue, bands), 2, split))
    kinds = ["im2col", "gemm1x1"] if s.pointwise else ["im2col"]
    for algorithm in kinds:
        for gemm_config in (mm.MatmulConfig(gemm, "tiled", lanes, 3, 2, kc=5, epilogue=epilogue, channel_axis="rows"),
                            mm.MatmulConfig(gemm, "packed", lanes, 2, 1, kc=7, epilogue=epilogue,
                                            channel_axis="rows"),
                            mm.MatmulConfig(gemm, "packed", lanes, 3, 2, kc=4, epilogue=epilogue,
                                            channel_axis="rows", a_packed=True)):  # fmt: skip
            splits = ("columns", "groups") if algorithm == "gemm1x1" and s.batch * s.group > 1 else ("columns",)
            plans += [ConvPlan(GemmConvConfig(s, algorithm, gemm_config), 2, split) for split in splits]
    if gemm.n == 1:  # one output pixel: the weights times a column, read as they are or packed when built
        plans += [ConvPlan(GemmConvConfig(s, "im2col", mm.MatmulConfig(gemm, "dot", lanes, mr=3, unroll=2,
                                                                       epilogue=epilogue, channel_axis="rows",
                                                                       a_packed=packed)), 2, "rows")
                  for packed in (False, True)]  # fmt: skip
    if s.unpadded_1x1:  # output channels in the lanes: Yᵀ = Xᵀ·Wᵀ, split by pixels and by channels
        gemm_config = mm.MatmulConfig(transposed_shape(gemm), "packed", lanes, 3, 2, kc=5, epilogue=epilogue,
                                      transposed=True, subsample=s.subsample())  # fmt: skip
        splits = ("rows", "columns", "groups") if s.batch * s.group > 1 else ("rows", "columns")
        plans += [ConvPlan(GemmConvConfig(s, "gemm1x1", gemm_config), 2, split) for split in splits]
    return plans


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
@pytest.mark.parametrize("s", LAYERS, ids=ConvShape.describe)
def test_every_algorithm_matches_onnxruntime(case_id, s):
    target = target_for(case_id)
    require_runnable(target)
    x, w, b = layer_data(s)
    expected = conv_reference(s, x, w, b)
    profile = PROFILE_OF[case_id]
    epilogue = (ep.bias(),)
    for plan in forced_plans(s, target.f32_lanes // 2, epilogue):
        y = compile_layer(s, w, b, profile=profile, target=target, config=plan)(x)
        winograd = isinstance(plan.config, WinogradConfig)
        assert_close(y, expected, 1e-3 if winograd else 1e-4, what=f"{plan.config.algorithm} {plan.config.tile}")
    chosen = compile_layer(s, w, b, profile=profile, target=target)
    assert_close(chosen(x), expected, what=f"chosen {chosen.config.algorithm}")


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["neon", "rvv128", "rvv256"])
def test_small_layers_under_emulation(case_id):
    target = target_for(case_id)
    require_runnable(target)
    s = ConvShape(1, 3, 7, 9, 5, (3, 3), (2, 1), (1, 0, 1, 2), (1, 2), 1)
    depthwise = ConvShape(2, 3, 7, 9, 3, (3, 3), (2, 1), (1, 0, 1, 2), (1, 2), 3)
    dx, dw, db = layer_data(depthwise, 4)
    plan = ConvPlan(DepthwiseConfig(depthwise, target.f32_lanes, 2, 2, (ep.bias(),)), 2, "groups")
    y = compile_layer(depthwise, dw, db, profile=PROFILE_OF[case_id], target=target, config=plan)(dx)
    assert_close(y, conv_reference(depthwise, dx, dw, db), what=f"{case_id} depthwise")
    x, w, b = layer_data(s, 3)
    expected = conv_reference(s, x, w, b)
    lanes = target.f32_lanes
    for plan in forced_plans(s, lanes, (ep.bias(),))[1:4]:  # direct blocked, rows, im2col tiled
        y = compile_layer(s, w, b, profile=PROFILE_OF[case_id], target=target, config=plan)(x)
        assert_close(y, expected, what=f"{case_id} {plan.config.algorithm}")
    if not target.scalable:  # Winograd's interleave is a fixed-width shuffle
        square = ConvShape(1, 3, 7, 9, 5, (3, 3), pads=(1, 1, 1, 1))
        sx, sw_, sb = layer_data(square, 5)
        winograd = [p for p in forced_plans(square, lanes, (ep.bias(),)) if isinstance(p.config, WinogradConfig)]
        assert len(winograd) == 4
        for plan in winograd:
            y = compile_layer(square, sw_, sb, profile=PROFILE_OF[case_id], target=target, config=plan)(sx)
            assert_close(y, conv_reference(square, sx, sw_, sb), 1e-3, f"{case_id} {plan.config.tile}")
    pool = autoconfig.compile_pool2d(s.input_shape, "average", (3, 2), strides=(2, 2), pads=(1, 1, 1, 0),
                                     ceil_mode=True, profile=PROFILE_OF[case_id], target=target)  # fmt: skip
    assert_close(pool(x), pool_reference(pool.shape, x), 1e-5, f"{case_id} pool")


# Channel-blocked layers (NCHW[c], whole blocks of channels at lanes 4 to 16): depthwise
# with strides 1 (two images, also in bands of rows) and 2, asymmetric pads, dilation 2,
# 5x5, a 1x1 image; direct from a plain NCHW input (3 channels) and from a blocked one;
# padding wider than the image; pointwise (gemm1x1 blocked) and strided 1x1; pixel
# counts that leave a partial square for the layout transforms at the layer's NCHW
# boundary.
BLOCKED_LAYERS = [
    ConvShape(2, 16, 12, 11, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16),
    ConvShape(2, 16, 9, 17, 16, (3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 16),
    ConvShape(1, 16, 7, 7, 16, (5, 5), (1, 1), (2, 2, 2, 2), (2, 1), 16),
    ConvShape(1, 16, 1, 1, 16, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 16),
    ConvShape(1, 3, 15, 13, 32, (3, 3), (2, 2), (1, 1, 1, 1)),
    ConvShape(2, 16, 9, 10, 48, (3, 3), (1, 1), (1, 0, 2, 1), (2, 1)),
    ConvShape(1, 16, 2, 2, 16, (3, 3), (1, 1), (3, 3, 3, 3)),
    ConvShape(1, 32, 5, 7, 16, (1, 1)),
    ConvShape(1, 16, 10, 12, 32, (1, 1), (2, 2)),
    ConvShape(2, 32, 9, 11, 16, (1, 1), (2, 3)),
    ConvShape(1, 64, 7, 9, 64, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),  # grouped: 32 channels per group
    ConvShape(2, 32, 6, 5, 64, (3, 3), (2, 2), (1, 0, 1, 2), (1, 1), 4),  # 8 in, 16 out per group
]


def blocked_plans(s: ConvShape, lanes: int, epilogue: ep.Epilogue, registers: int,
                  layout: str = "nchwc") -> list[ConvPlan]:  # fmt: skip
    """Every channel-blocked kernel that applies in `layout` (NCHW[c], NHWC, or for a
    1x1 layer "mixed": NHWC on a side whose channels fill no block), with a few tiles,
    split among 2 threads."""
    configs: list = []
    if s.depthwise:
        configs = [BlockedDepthwiseConfig(s, lanes, nv, epilogue, layout) for nv in (1, 3, 5)]
        if s.out_height % 2 == 0:  # and a band of rows per thread
            configs.append(BlockedDepthwiseConfig(s, lanes, 3, epilogue, layout, bands=2))
    elif s.pointwise:
        return _blocked_products(s, lanes, epilogue, layout)
    else:
        inputs = (False, True) if s.channels % lanes == 0 or layout == "nhwc" else (False,)
        passes = [s.in_per_group // 3 + 1] if s.in_per_group > 1 else []  # passes of unequal length
        configs = [BlockedDirectConfig(s, lanes, nv, mv, blocked, epilogue, layout, kc)
                   for nv, mv, kc in ((1, 1, 0), (4, 2, 0), (3, 3, 0), *((4, 2, kc) for kc in passes))
                   for blocked in inputs]  # fmt: skip
    products = _blocked_products(s, lanes, epilogue, layout) if s.unpadded_1x1 and s.group == 1 else []
    return products + [ConvPlan(c, 2, "bands" if getattr(c, "bands", 1) > 1 else "units") for c in configs
                       if c.registers_needed()[0] <= registers]  # fmt: skip


def _blocked_products(s: ConvShape, lanes: int, epilogue: ep.Epilogue, layout: str) -> list[ConvPlan]:
    """An unpadded 1x1 layer's transposed products on blocked operands (strided: every
    stride-th pixel read in place), split by pixels, by output channels and (two images or more) by images."""
    product = transposed_shape(s.gemm_shape())
    a_nhwc, c_nhwc = ((s.channels % lanes != 0, s.out_channels % lanes != 0) if layout == "mixed"
                      else (layout == "nhwc",) * 2)  # fmt: skip
    return [ConvPlan(GemmConvConfig(s, "gemm1x1", mm.MatmulConfig(product, "packed", lanes, 3, 2, kc=kc,
                                                                  epilogue=epilogue, transposed=True, blocked=True,
                                                                  a_nhwc=a_nhwc, c_nhwc=c_nhwc,
                                                                  subsample=s.subsample())), 2, split)
            for kc, split in ((0, "rows"), (5, "columns"), (0, "groups"))[:2 + (s.batch > 1)]]  # fmt: skip


# NHWC beyond the blocked layers: the channel counts of EfficientNet's 1x1 layers, not
# multiples of any vector (24 -> 40: a masked last vector per pixel, a transform at 8
# lanes), and a direct layer reading 17 channels in NHWC.
NHWC_LAYERS = [ConvShape(1, 24, 5, 7, 40, (1, 1)), ConvShape(2, 17, 6, 9, 16, (3, 3), (1, 1), (1, 0, 1, 2))]
# 1x1 layers between a side whose channels fill blocks (NCHW[c]) and one whose do not
# (NHWC), either way, at both widths of both ISAs (20 channels: no 8- or 16-lane block).
MIXED_LAYERS = [ConvShape(1, 20, 6, 7, 32, (1, 1)), ConvShape(2, 32, 5, 5, 20, (1, 1))]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
@pytest.mark.parametrize("layout", ["nchwc", "nhwc"])
@pytest.mark.parametrize("s", BLOCKED_LAYERS, ids=ConvShape.describe)
def test_channel_blocked_layouts_match_onnxruntime(case_id, layout, s):
    """Each blocked kernel in NCHW[c] and in NHWC, its residual read in that layout,
    behind the layout transforms of a layer taking NCHW, at the target's widest lanes
    and at half."""
    check_blocked_layer(case_id, layout, s)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
@pytest.mark.parametrize("s", NHWC_LAYERS, ids=ConvShape.describe)
def test_nhwc_takes_channel_counts_no_block_divides(case_id, s):
    check_blocked_layer(case_id, "nhwc", s)


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
@pytest.mark.parametrize("s", MIXED_LAYERS, ids=ConvShape.describe)
def test_a_1x1_layer_reads_one_layout_and_writes_the_other(case_id, s):
    check_blocked_layer(case_id, "mixed", s)


def check_blocked_layer(case_id: str, layout: str, s: ConvShape, which: Callable[[ConvPlan], bool] = bool) -> None:
    """Every blocked plan of `s` in `layout` (those `which` keeps) equals onnxruntime,
    with a bias, a residual and a relu."""
    target = target_for(case_id)
    require_runnable(target)
    x, w, b = layer_data(s)
    residual = np.random.default_rng(7).standard_normal(s.output_shape, dtype=np.float32)
    epilogue = (ep.bias(), ep.residual(), ep.relu())
    expected = ep.reference(epilogue, conv_reference(s, x, w, None), [b, residual, None], channel_axis=1)
    for lanes in (target.f32_lanes // 2, target.f32_lanes):
        plans = [plan for plan in blocked_plans(s, lanes, epilogue, target.vector_registers, layout) if which(plan)]
        assert plans
        for plan in plans:
            f = compile_layer(s, w, b, epilogue=epilogue[1:], profile=PROFILE_OF[case_id], target=target, config=plan)
            assert layout in (layout_of(plan.config), "mixed")
            assert_close(f(x, residual), expected,
                         what=f"{layout} {plan.config.algorithm} {plan.config.tile} lanes={lanes}")  # fmt: skip


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
def test_a_direct_convolution_in_passes_over_its_input_channels(case_id):
    """The direct kernel summing kc input channels per pass over each output plane
    (passes of 6, 6 and 4 channels here), reading NCHW and NCHW[c], its residual and
    relu after the last pass only, equals onnxruntime; 2 threads split its (image,
    channel tile) planes."""
    s = ConvShape(2, 16, 7, 6, 48, (3, 3), (2, 1), (1, 0, 1, 2))
    check_blocked_layer(case_id, "nchwc", s, lambda plan: plan.config.kc == 6)


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
def test_layout_transform_both_ways(case_id):
    """The layout transform against numpy's reshape: [N, C, H, W] <-> [N, C/L, H, W, L]
    and <-> [N, H, W, C], with whole L×L squares and a remainder of pixels (3x7 = 21), cut
    into three ranges of units: into NHWC, runs of pixels that start mid-square and
    cross from one image into the next."""
    from kernels.library import build_library
    from kernels.emit import generate
    from kernels.nchwc import Reblock

    target = target_for(case_id)
    require_runnable(target)
    lanes = target.f32_lanes
    x = np.random.default_rng(8).standard_normal((2, 2 * lanes, 3, 7), dtype=np.float32)
    blocked = x.reshape(2, 2, lanes, 3, 7).transpose(0, 1, 3, 4, 2).copy()
    nhwc = x.transpose(0, 2, 3, 1).copy()
    for to_blocked, layout, source, expected in ((True, "nchwc", x, blocked), (False, "nchwc", blocked, x),
                                                 (True, "nhwc", x, nhwc), (False, "nhwc", nhwc, x)):  # fmt: skip
        config = Reblock(2, 2 * lanes, 21, lanes, to_blocked, layout)
        kernel = build_library(generate(config, target), this_host()).kernel(config.symbol)
        y = np.full(x.size, np.nan, np.float32)
        cuts = (0, 1, config.units() // 2 + 1, config.units())
        for begin, end in zip(cuts, cuts[1:]):
            kernel(y, np.ascontiguousarray(source).ravel(), begin, end)
        np.testing.assert_array_equal(y, expected.ravel())


def test_a_transform_into_nhwc_divides_pixels_and_its_price_counts_the_busiest_threads_runs():
    """Into NHWC the threads divide (image, pixel) pairs, so no pixel's row is stored by
    two threads; back to NCHW they divide channel vectors. The price counts the busiest
    thread's squares and gathered pixels: 49 pixels of 55 vectors of 8 channels cut into
    25 and 24 pixels (3 squares and 1 gathered pixel, 3 squares), against 28 and 27 of
    the vectors (6 squares and 1 gathered pixel each)."""
    from kernels.nchwc import Reblock

    into, back = Reblock(1, 440, 49, 8, True, "nhwc"), Reblock(1, 440, 49, 8, False, "nhwc")
    assert (into.by_pixels, into.units(), back.by_pixels, back.units()) == (True, 49, False, 55)
    assert conv_model._reblock_work(into, 2) == (3 * 55, 1 * 55 * 8)
    assert conv_model._reblock_work(back, 2) == (28 * 6, 28 * 1 * 8)
    assert conv_model._reblock_work(into, 1) == conv_model._reblock_work(back, 1) == (55 * 6, 55 * 1 * 8)
    two_images = Reblock(2, 16, 9, 8, True, "nhwc")  # 18 pixels: the first thread's 9 are one image's
    assert conv_model._reblock_work(two_images, 2) == (2, 16)


@pytest.mark.slow
def test_channel_blocked_layouts_on_neon_under_emulation():
    """The blocked kernels and 4x4 register transposes at NEON's 4 lanes (fixed-length
    vectors; RVV's scalable ones are refused, see the bad-input test)."""
    target = target_for("neon")
    require_runnable(target)
    epilogue = (ep.bias(), ep.residual(), ep.relu())
    for s in (BLOCKED_LAYERS[1], BLOCKED_LAYERS[4], BLOCKED_LAYERS[7]):
        x, w, b = layer_data(s)
        residual = np.random.default_rng(7).standard_normal(s.output_shape, dtype=np.float32)
        expected = ep.reference(epilogue, conv_reference(s, x, w, None), [b, residual, None], channel_axis=1)
        for plan in blocked_plans(s, 4, epilogue, target.vector_registers)[:2]:
            f = compile_layer(s, w, b, epilogue=epilogue[1:], profile=PROFILE_OF["neon"], target=target, config=plan)
            assert_close(f(x, residual), expected, what=f"neon {plan.config.algorithm} {plan.config.tile}")


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
def test_global_pool_and_elementwise_read_nhwc(case_id):
    """The global average and max pools and an elementwise chain (per-channel scale,
    residual, relu) on an NHWC tensor of 24 channels, at 8 lanes, against numpy."""
    from autoconfig.conv import pool_shape
    from kernels import elementwise as ew
    from kernels import pool as pl
    from kernels.library import build_library

    target = target_for(case_id)
    require_runnable(target)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 24, 5, 7), dtype=np.float32)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).ravel()
    for kind, reduce in (("global_average", np.mean), ("global_max", np.max)):
        pool = pl.PoolConfig(pool_shape(x.shape, kind), 8, layout="nhwc")
        y = np.full(48, np.nan, np.float32)
        build_library(pl.generate(pool, target), this_host()).kernel(pool.symbol)(y, nhwc, 0, pool.units())
        np.testing.assert_allclose(y, reduce(x, axis=(2, 3)).ravel(), rtol=1e-5, atol=1e-6, err_msg=kind)

    chain = (ep.scale(), ep.residual(), ep.relu())
    scale, residual = rng.standard_normal(24, dtype=np.float32), rng.standard_normal(x.shape, dtype=np.float32)
    config = ew.ElementwiseConfig(2 * 35, 24, 24, 8, 2, chain, layout="nhwc")
    out = np.full(x.size, np.nan, np.float32)
    kernel = build_library([ew.generate(config, target)], this_host()).kernel(config.symbol)
    kernel(out, nhwc, scale, np.ascontiguousarray(residual.transpose(0, 2, 3, 1)).ravel(), 0, config.planes)
    expected = ep.reference(chain, x, [scale, residual, None], channel_axis=1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(out, expected.ravel(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
@pytest.mark.parametrize("layout", ["nchw", "nchwc", "nhwc"])
def test_an_excitation_scales_each_channel_by_its_gate(case_id, layout):
    """The excitation kernel: each image's gates (bias, then hard sigmoid, of a product
    of 12 squeezed values) and the tensor scaled by them, 48 channels (40, with a partial
    last group and vector, where a layout takes any count) of 5x7 pixels, its channel
    groups divided between two calls, against numpy, gates and all."""
    from kernels import excite as ex
    from kernels.library import build_library

    target = target_for(case_id)
    require_runnable(target)
    rng = np.random.default_rng(13)
    lanes = target.f32_lanes
    for channels in (48, 40) if layout != "nchwc" else (48,):
        chain = (ep.bias(), ep.hard_sigmoid())
        config = ex.ExciteConfig(2, channels, 12, 35, lanes, 2, chain, layout)
        x = rng.standard_normal((2, channels, 5, 7), dtype=np.float32)
        squeezed, weight = rng.standard_normal((2, 12), dtype=np.float32), rng.standard_normal((channels, 12, 1, 1),
                                                                                                  dtype=np.float32)
        bias = rng.standard_normal(channels, dtype=np.float32)
        gates = ep.reference(chain, squeezed @ weight.reshape(channels, 12).T, [bias, None], channel_axis=1)
        expected = x * gates[:, :, None, None]
        stored = {"nchw": lambda a: a, "nhwc": lambda a: a.transpose(0, 2, 3, 1),
                  "nchwc": lambda a: a.reshape(2, channels // lanes, lanes, 35).transpose(0, 1, 3, 2)}[layout]
        y, g = np.full(x.size, np.nan, np.float32), np.full(gates.size, np.nan, np.float32)
        kernel = build_library([ex.generate(config, target)], this_host()).kernel(config.symbol)
        for begin, end in ((0, 1), (1, config.groups())):
            kernel(y, g, np.ascontiguousarray(stored(x)).ravel(), squeezed, config.weights(weight), bias, begin, end)
        np.testing.assert_allclose(g, gates.ravel(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, np.ascontiguousarray(stored(expected)).ravel(), rtol=1e-5, atol=1e-6)


# Every epilogue op at once on a conv with edges in every dimension: values reach ±8,
# so relu's zeros, the leaky slope, both clip bounds and sigmoid's tails all show.
CONV_CHAINS = {
    "residual+leaky+clip": (ep.residual(), ep.leaky_relu(0.1), ep.clip(-0.3, 2.0)),
    "relu+sigmoid": (ep.relu(), ep.sigmoid()),
    "scale+bias+mish+tanh": (ep.scale(), ep.bias(), ep.mish(), ep.tanh()),
    "softplus+silu+hard_swish+hard_sigmoid": (ep.softplus(), ep.silu(), ep.hard_swish(), ep.hard_sigmoid()),
}


@pytest.mark.slow
@pytest.mark.parametrize("chain", CONV_CHAINS)
def test_every_epilogue_op_on_every_algorithm(chain):
    target = get_target("avx2")
    require_runnable(target)
    square = ConvShape(1, 4, 9, 11, 10, (3, 3), pads=(1, 1, 1, 1))  # every algorithm but gemm1x1 and depthwise
    pointwise = ConvShape(1, 6, 5, 7, 19, (1, 1))  # gemm1x1 both ways, edges in every dimension
    epilogue = CONV_CHAINS[chain]
    for s in (square, pointwise):
        x, w, b = layer_data(s, 5)
        rng = np.random.default_rng(6)
        residual = rng.standard_normal(s.output_shape, dtype=np.float32)
        channel = [rng.standard_normal(s.out_channels, dtype=np.float32) for op in epilogue if op.operand == "channel"]
        lookup = iter(channel)
        operands = [residual if op.operand == "output" else next(lookup) if op.operand else None for op in epilogue]
        y = conv_reference(s, x, w, b)
        expected = ep.reference(epilogue, y, operands, channel_axis=1)
        plans = forced_plans(s, 8, (ep.bias(), *epilogue))
        for plan in plans if s is square else [p for p in plans if p.config.algorithm == "gemm1x1"]:
            f = compile_layer(s, w, b, profile=AVX2, target=target, config=plan, epilogue=epilogue,
                              channel_values=channel)  # fmt: skip
            out = f(x, residual) if any(op.operand == "output" for op in epilogue) else f(x)
            tolerance = 1e-4 if isinstance(plan.config, WinogradConfig) else 1e-5
            assert_close(out, expected, tolerance, f"{chain} {plan.config.algorithm} {plan.config.tile}")


def pool_reference(s, x: np.ndarray) -> np.ndarray:
    if s.kind in ("global_average", "global_max"):
        return run_onnx("GlobalAveragePool" if s.kind == "global_average" else "GlobalMaxPool", {"x": x}, {})
    attributes = dict(kernel_shape=list(s.kernel), strides=list(s.strides), pads=list(s.pads),
                      ceil_mode=int(s.ceil_mode))  # fmt: skip
    if s.kind == "max":
        return run_onnx("MaxPool", {"x": x}, {}, dilations=list(s.dilations), **attributes)
    return run_onnx("AveragePool", {"x": x}, {}, count_include_pad=int(s.count_include_pad), **attributes)


# (kind, kernel, strides, pads, ceil_mode, count_include_pad, dilations)
POOLS = [
    ("max", (2, 2), (2, 2), (0, 0, 0, 0), False, False, (1, 1)),
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), True, False, (1, 1)),
    ("max", (3, 3), (1, 1), (0, 0, 0, 0), False, False, (2, 2)),
    ("max", (5, 5), (1, 1), (2, 2, 2, 2), False, False, (1, 1)),
    ("average", (3, 3), (2, 2), (1, 1, 1, 1), False, False, (1, 1)),
    ("average", (3, 3), (2, 2), (1, 1, 1, 1), True, True, (1, 1)),
    ("average", (3, 3), (1, 1), (1, 1, 1, 1), False, True, (1, 1)),
    ("average", (2, 3), (3, 2), (1, 0, 0, 2), True, False, (1, 1)),
    ("average", (3, 2), (2, 3), (2, 1, 1, 0), True, True, (1, 1)),
]


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: f"{p[0]}-k{p[1][0]}{p[1][1]}-s{p[2][0]}{p[2][1]}-"
                         f"p{''.join(map(str, p[3]))}-ceil{int(p[4])}-cip{int(p[5])}-d{p[6][0]}")  # fmt: skip
@pytest.mark.parametrize("hw", [(13, 14), (8, 8), (3, 40)])
def test_every_pooling_variant_matches_onnxruntime(pool, hw):
    target = get_target("avx2")
    require_runnable(target)
    kind, kernel, strides, pads, ceil_mode, count_include_pad, dilations = pool
    x = np.random.default_rng(1).standard_normal((2, 3, *hw), dtype=np.float32)
    try:
        f = autoconfig.compile_pool2d(x.shape, kind, kernel, strides=strides, pads=pads, dilations=dilations,
                                      ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                                      profile=AVX2, target=target, threads=2)  # fmt: skip
    except AutoconfigError as err:
        assert "does not fit" in str(err)  # the window is larger than the padded input
        return
    assert_close(f(x), pool_reference(f.shape, x), 1e-5, f.shape.describe())


def test_winograd_matrices_fall_in_different_cache_sets():
    """V's and M's T² matrices start an odd number of lines apart, so one tile vector's
    T² stores land in T² different L1 sets (64 sets of 64-byte lines), even where the
    matrices back to back would be a whole number of pages apart (64 channels x 52²)."""
    shape = ConvShape(1, 64, 208, 208, 96, (3, 3), pads=(1, 1, 1, 1))
    for m in (2, 4):
        columns = (208 // m) ** 2
        for stride, rows in zip(winograd.product_strides(shape, columns), (64, 96), strict=True):
            assert stride >= rows * columns and stride % 16 == 0
            assert len({(t * stride * 4 // 64) % 64 for t in range((m + 2) ** 2)}) == (m + 2) ** 2


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
def test_a_max_is_one_instruction(case_id, tmp_path):
    """A max pool's and a Relu's max are MAXPS alone: arith.maximumf's NaN and −0 rules
    cost a compare and blends per max, in the chain of a window's taps (a 13x13 max pool
    ran 14x slower with them)."""
    from kernels.lower import compile_object, to_llvm_ir
    from kernels.pool import PoolConfig, PoolShape, generate

    target = target_for(case_id)
    pool = PoolConfig(PoolShape(1, 4, 13, 13, "max", (5, 5), pads=(2, 2, 2, 2)), target.f32_lanes, 1)
    relu = mm.MatmulConfig(mm.MatmulShape(8, 32, 8), "tiled", target.f32_lanes, 2, 1, epilogue=(ep.relu(),))
    for module in (generate(pool, target)[0].module, mm.generate(relu, target).module):
        listing = compile_object(to_llvm_ir(module), target, tmp_path, assembly=True).assembly
        assert re.search(r"vmaxps", listing) and not re.search(r"vcmpunordps|vblendv?m?ps|vpmovd2m", listing)


@pytest.mark.parametrize("hw", [(7, 7), (1, 1), (13, 3), (3, 11)])
def test_global_max_pool_takes_negatives_and_nan(hw):
    # all-negative planes (a start of 0 would win), a masked last vector, and a NaN that
    # wins, as in onnx's reference (onnxruntime's kernel skips it)
    require_runnable(get_target("avx2"))
    x = -np.abs(np.random.default_rng(2).standard_normal((2, 5, *hw), dtype=np.float32)) - 1
    x[1, 2, -1, -1] = np.nan
    f = autoconfig.compile_pool2d(x.shape, "global_max", profile=AVX2, threads=2)
    np.testing.assert_array_equal(f(x), x.max(axis=(2, 3), keepdims=True))


@pytest.mark.parametrize("hw", [(7, 7), (1, 1), (13, 3)])
def test_global_average_pool(hw):
    require_runnable(get_target("avx512"))
    x = np.random.default_rng(2).standard_normal((2, 5, *hw), dtype=np.float32)
    f = autoconfig.compile_pool2d(x.shape, "global_average", profile=AVX512, threads=2)
    assert_close(f(x), pool_reference(f.shape, x), 1e-5)


# ---------------------------------------------------------------- the model


ZOO_LAYERS = [
    ConvShape(1, 3, 224, 224, 64, (3, 3), pads=(1, 1, 1, 1)),  # VGG-16 conv1_1
    ConvShape(1, 64, 56, 56, 64, (3, 3), pads=(1, 1, 1, 1)),
    ConvShape(1, 512, 14, 14, 512, (3, 3), pads=(1, 1, 1, 1)),
    ConvShape(1, 256, 56, 56, 64, (1, 1)),  # a pointwise layer
    ConvShape(1, 32, 112, 112, 32, (3, 3), pads=(1, 1, 1, 1), group=32),  # MobileNet depthwise
    ConvShape(1, 1024, 7, 7, 1024, (1, 1)),
]


def test_the_model_picks_several_algorithms_and_says_why():
    profile = load_profile(AVX512)
    choices = [choose(s, profile, get_target("avx512"), 1) for s in ZOO_LAYERS]
    assert len({c.best.config.algorithm for c in choices}) >= 4
    for s in ZOO_LAYERS:  # every algorithm's plan carries the epilogue it was chosen for
        chosen = choose(s, profile, get_target("avx512"), 1, (ep.bias(), ep.relu()))
        assert all(p.config.epilogue == (ep.bias(), ep.relu()) for p in chosen.per_algorithm)
    for c in choices:
        text = c.explain()
        assert f"choice: {c.best.config.algorithm}" in text and "best of each algorithm" in text
        assert all(t.ns >= 0 for t in c.best.terms)


def test_depthwise_tiles_keep_a_third_of_the_registers_for_accumulators():
    """Every depthwise candidate, on 32- and 16-register targets, holds at most a third of
    the registers in accumulators (each tap's loads take about as many again)."""
    from autoconfig.machine import Machine
    from autoconfig.models.conv import DEPTHWISE_REGISTER_SHARE, depthwise_candidates

    shape = ConvShape(1, 32, 112, 112, 32, (3, 3), pads=(1, 1, 1, 1), group=32)
    for profile, target in ((AVX512, get_target("avx512")), (AVX2, get_target("avx2"))):
        machine = Machine.of(load_profile(profile))
        plans = depthwise_candidates(shape, machine, target, 1, ())
        limit = int(target.vector_registers * DEPTHWISE_REGISTER_SHARE)
        assert plans and max(p.config.mr * p.config.nv for p in plans) == limit


def test_winograd_pays_for_filters_beyond_the_level_of_one_product():
    """The transformed filters of all T² products are fetched from the level that holds
    them all, beyond what one product's prediction charged: little when they fit the L2,
    a large share of the time when they lie past the L3."""
    profile = load_profile(AVX512)
    small, large = (choose(ConvShape(1, c, side, side, c, (3, 3), pads=(1, 1, 1, 1)), profile, get_target("avx512"), 1,
                           fast_winograd=True) for c, side in ((64, 56), (512, 14)))  # F(4,3): 36 products
    small_w, large_w = (next(p for p in c.per_algorithm if p.config.algorithm == "winograd") for c in (small, large))
    assert 0.0 < small_w.term("filters") < 0.02 * small_w.total_ns  # 36 x 64 x 64 floats: from the L2
    assert large_w.term("filters") > 0.2 * large_w.total_ns  # 36 x 512 x 512 floats (37.7 MB): past the L3


def test_winograd_transforms_follow_the_split_of_its_products():
    """Each thread's transform calls cover what its share of the products reads and
    writes: in bands, its band's tile rows (numbered across the images) of every
    channel; divided by output channels, those of its products, and an even share of
    the input channels. Either way every (channel, tile row) falls to exactly one call."""
    from autoconfig.lowering import _winograd_ranges

    s = ConvShape(3, 7, 13, 22, 9, (3, 3), pads=(1, 1, 1, 1))  # 7 x 11 tiles of F(2,3) per image
    for split, bands in (("rows", 1), ("bands", 2)):
        gemm_shape = WinogradConfig(s, 2, 8, None, bands=bands).gemm_shape()
        gemm = winograd.batched(mm.MatmulConfig(gemm_shape, "tiled", 8, 3, 1), s, 2)
        inputs, outputs = _winograd_ranges(ConvPlan(WinogradConfig(s, 2, 8, gemm, (), bands), 2, split))
        for ranges, channels in ((inputs, s.channels), (outputs, s.out_channels)):
            units = [(c, r) for c0, c1, r0, r1 in ranges for c in range(c0, c1) for r in range(r0, r1)]
            assert len(ranges) == 2 and sorted(units) == [(c, r) for c in range(channels) for r in range(3 * 7)]
        if bands > 1:  # 21 tile rows in bands of 11: the second from image 1's row 4 on
            assert gemm_shape.n == 11 * 11
            assert [r[2:] for r in inputs] == [r[2:] for r in outputs] == [(0, 11), (11, 21)]
        else:  # 9 output channels in row tiles of 3, two to the first thread
            assert gemm_shape.n == 3 * 7 * 11 and [r[:2] for r in outputs] == [(0, 6), (6, 9)]
    for split, threads in (("columns", 2), ("bands", 3)):
        with pytest.raises(AutoconfigError, match="splits threads by rows or bands, not 'columns'|runs one per thread"):
            conv_model.validate_plan(ConvPlan(WinogradConfig(s, 2, 8, gemm, (), 2), threads, split), get_target("avx2"))


def test_winograd_on_two_threads_prices_what_threads_read_from_each_other():
    """Divided by output channels, each thread's products read all of V, half of it
    written by the other thread's input transform, which writes it again at the next
    call; in bands, each thread's V is its own, and only its input transform reads
    planes the other thread's phase split wrote: on DenseNet-121's 128 -> 32 layers
    (V 6.4 MB) the bands are chosen."""
    from autoconfig.models.cost import CROSS_CORE_TERM
    from autoconfig.models.conv import winograd_plan

    profile, target = load_profile(AVX512), get_target("avx512")
    s = ConvShape(1, 128, 56, 56, 32, (3, 3), pads=(1, 1, 1, 1))
    machine = Machine.of(profile)
    by = {split: conv_model.predict(winograd_plan(s, 2, profile, target, 2, split=split), machine)
          for split in ("rows", "bands")}  # fmt: skip
    rows = by["rows"].plan.config
    assert by["bands"].plan.config.bands == 2 and by["bands"].plan.config.gemm.shape.n == 14 * 28
    v = rows.v_size() * 4
    assert by["rows"].term(CROSS_CORE_TERM) == pytest.approx(v / 2 / machine.at(rows.lanes, 2).bandwidth["DRAM"])
    assert 0 < by["bands"].term(CROSS_CORE_TERM) < by["rows"].term(CROSS_CORE_TERM) / 4
    best = choose(s, profile, target, 2).best
    assert best.config.algorithm == "winograd" and best.plan.split == "bands"
    assert conv_model.winograd_plan(ConvShape(1, 8, 2, 9, 8, (3, 3), pads=(1, 1, 1, 1)), 2, profile, target, 2,
                                    split="bands") is None  # one tile row: no second band


def test_a_direct_convolution_on_two_threads_prices_the_lines_its_threads_share():
    """RegNet-X's 408-channel 3x3 layer in 17 groups on 14x14 pixels: divided by image-
    groups, each thread transforms the planes of its own groups (so reads only what it
    wrote) and writes whole output planes; divided by output pixels (rows 0-6 and 7-13),
    each thread reads 9 of 16 rows of every padded plane, half of them transformed on
    the other thread, and the threads store into the same lines where their rows meet
    (98 + 196c: mid-line in all 408 planes) and where planes meet (196c: mid-line unless
    c is a multiple of 4, 306 of 407). The image-groups split is chosen."""
    from autoconfig.models.cost import CROSS_CORE_LEVEL, CROSS_CORE_TERM, SHARED_LINE_NS

    profile, target = load_profile(AVX512), get_target("avx512")
    s = ConvShape(1, 408, 14, 14, 408, (3, 3), pads=(1, 1, 1, 1), group=17)
    machine = Machine.of(profile)
    config = DirectConfig(s, 16, 8, 1, 24, (ep.bias(),))
    groups, columns = (ConvPlan(config, 2, split) for split in ("groups", "columns"))
    assert groups.transform_planes() == [(0, 9 * 24), (9 * 24, 408)]
    assert columns.transform_planes() == [(0, 204), (204, 408)]
    assert conv_model.predict(groups, machine).term(CROSS_CORE_TERM) == 0.0
    elsewhere = 204 * 16 * 16 * 4 * 7 / 14  # planes of 16x16 padded pixels, 7 of 14 column tiles
    bandwidth = machine.at(16, 2).bandwidth[CROSS_CORE_LEVEL]
    assert conv_model.predict(columns, machine).term(CROSS_CORE_TERM) == pytest.approx(
        elsewhere / bandwidth + (408 + 306) * SHARED_LINE_NS)
    assert choose(s, profile, target, 2, (ep.bias(),)).best.plan.split == "groups"


def test_lines_where_two_threads_runs_meet():
    """Offsets 98 + 196c (c < 408) are never a multiple of 16 elements; 196c for c in
    1..407 is one for every fourth c; 4c for c < 10, at c = 0, 4 and 8."""
    from autoconfig.models.cost import mid_line

    assert mid_line(408, 196, 98, 16) == 408
    assert mid_line(407, 196, 196, 16) == 306
    assert (mid_line(10, 4, 0, 16), mid_line(3, 4, 0, 16)) == (7, 2)
    assert (mid_line(1, 0, 32, 16), mid_line(0, 4, 2, 16)) == (0, 0)


def test_a_layer_in_a_model_passes_over_a_tied_product_reading_all_its_input_in_place():
    """DeepLabV3's ASPP projection (1280 -> 256 channels, 14x14) at 2 threads: the
    transposed product dividing its output channels, each thread reading all of the
    NCHW input in place, is priced fastest, the plain product packing its input within
    2%; inside a model the plain one runs (measured 502 against 787 µs there, on the
    host of this profile)."""
    from autoconfig.models.conv import choose_layout

    profile, target = load_profile(PROFILES / "intel-xeon-emerald-rapids-avx512.yaml"), get_target("avx512")
    s = ConvShape(1, 1280, 14, 14, 256, (1, 1))
    choice = choose(s, profile, target, 2, (ep.bias(), ep.relu()))
    nchw = [p for p in choice.per_algorithm if input_layout_of(p.config) == layout_of(p.config) == "nchw"]
    fastest = min(nchw, key=lambda p: p.total_ns)
    assert conv_model._reads_elsewhere_in_place(fastest.plan)
    best, _ = choose_layout(choice, "nchw", {"nchw": 0.0}, Machine.of(profile))
    assert not conv_model._reads_elsewhere_in_place(best.plan) and best.config.algorithm == "gemm1x1"
    assert best.total_ns <= fastest.total_ns * (1 + RESOLUTION)
    alone, _ = choose_layout(conv_model.choose(s, profile, target, 1, (ep.bias(), ep.relu())), "nchw",
                             {"nchw": 0.0}, Machine.of(profile))  # fmt: skip
    assert not alone.config.gemm.transposed


def test_a_product_whose_weights_outweigh_its_input_divides_its_output_channels():
    """Among tied plans, a 1x1 layer's product divides its pixels, each thread reading
    the pixels it wrote — unless its weights outweigh its input WEIGHTS_OVER_INPUT
    times (MobileNet-V2's 960 x 160 weights on 7x7 pixels): then each thread reads
    half the weights and all the input, and divides the output channels."""
    profile, target = load_profile(AVX512), get_target("avx512")
    late, early = ConvShape(1, 160, 7, 7, 960, (1, 1)), ConvShape(1, 32, 56, 56, 192, (1, 1))
    assert 960 * 160 > conv_model.WEIGHTS_OVER_INPUT * 160 * 49 and 192 * 32 < 32 * 56 * 56
    for shape, divided in ((late, "output channels"), (early, "pixels")):
        best = choose(shape, profile, target, 2).best
        transposed = best.config.gemm.transposed
        pixels = "rows" if transposed else "columns"
        assert best.config.algorithm == "gemm1x1" and (best.plan.split == pixels) == (divided == "pixels")


def test_a_depthwise_layer_beyond_the_l2_gives_each_thread_a_band_of_rows():
    """On two threads a depthwise layer whose input outgrows a core's L2 (MobileNet-V2's
    first, 32x112x112) runs a band of output rows per thread, every channel block's
    rows of it (the pixels its pointwise neighbours' threads write and read); one whose
    input stays in the L2s (576x14x14), or whose rows do not divide evenly, or whose
    images the threads divide already (two), or on one thread, splits (channel block,
    row) units."""
    profile, target = load_profile(AVX512), get_target("avx512")

    def choice(channels: int, side: int, threads: int = 2, images: int = 1):
        shape = ConvShape(images, channels, side, side, channels, (3, 3), pads=(1, 1, 1, 1), group=channels)
        return choose(shape, profile, target, threads)

    banded = choice(32, 112)
    assert (banded.best.plan.split, banded.best.config.bands) == ("bands", 2)
    assert "a band of 56 output rows each" in banded.explain()
    for plan in (choice(576, 14).best.plan, choice(32, 111).best.plan, choice(32, 112, images=2).best.plan,
                 choice(32, 112, 1).best.plan):  # fmt: skip
        assert plan.split == "units" and plan.config.bands == 1


def test_threads_dividing_output_channels_each_read_the_whole_input():
    """A direct layer with a large input and few weights (MobileNet-V1's first) split by
    output channels (rows) reads the whole input on each thread, split by output pixels
    (columns) half of it: the rows split costs more memory time, and 2 threads pick
    another split."""
    from autoconfig.machine import Machine

    profile = load_profile(AVX512)
    shape = ConvShape(1, 3, 224, 224, 32, (3, 3), strides=(2, 2), pads=(0, 0, 1, 1))
    config = DirectConfig(shape, 16, mr=6, nv=4)
    memory = {split: sum(t.ns for t in predict(ConvPlan(config, 2, split), Machine.of(profile)).terms
                         if t.name.startswith("memory"))
              for split in ("rows", "columns")}  # fmt: skip
    assert memory["rows"] > 1.1 * memory["columns"]  # the input (0.6 MB) once more; output 1.6 MB in and out
    assert choose(shape, profile, get_target("avx512"), 2).best.plan.split != "rows"


def test_a_blocked_pointwise_layer_stalls_reading_its_input_again_per_channel_tile():
    """Through a 1x1 window on a small map (ResNet-50's last stride-2 downsample: rows of
    448 bytes per channel block), each channel tile reads the whole input again in runs
    the prefetchers never get ahead of: a stall on the FMAs, which leaves the layer to a
    product (the transposed one reading every other pixel in place); a 3x3 window reads
    each line for several taps, and its re-reads overlap."""
    from autoconfig.models.cost import STALL_TERM

    profile = load_profile(AVX2)
    pointwise = ConvShape(1, 1024, 14, 14, 2048, (1, 1), strides=(2, 2))
    window = ConvShape(1, 1024, 14, 14, 2048, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    stalls = {s.kernel: predict(ConvPlan(BlockedDirectConfig(s, 8, 2, 4), 1), profile).term(STALL_TERM)
              for s in (pointwise, window)}  # fmt: skip
    assert stalls[(1, 1)] > 0.1 * predict(ConvPlan(BlockedDirectConfig(pointwise, 8, 2, 4), 1), profile).total_ns
    assert stalls[(3, 3)] == 0.0
    assert choose(pointwise, profile, get_target("avx2"), 1).best.config.algorithm == "gemm1x1"


def test_a_strided_1x1_layer_is_a_product_on_every_other_pixel():
    """ResNet-50's first downsampling projection (256 -> 512 channels, stride 2, 56x56)
    on channel blocks is the transposed product reading every other pixel of its input
    in place; a config naming other pixels is refused."""
    from kernels.errors import KernelError

    target = get_target("avx512")
    s = ConvShape(1, 256, 56, 56, 512, (1, 1), (2, 2))
    blocked = choose(s, load_profile(AVX512), target, 1).best_in(("nchwc",), ("nchwc",))
    assert blocked.config.algorithm == "gemm1x1" and blocked.config.gemm.subsample == (56, 56, 2, 2)
    for pixels in ((0, 0, 1, 1), (56, 55, 2, 2)):
        with pytest.raises(KernelError, match="reads the pixels|pick M=784"):
            replace(blocked.config, gemm=replace(blocked.config.gemm, subsample=pixels)).validate(target)


def test_a_batch_of_1x1_products_runs_each_image_whole_on_a_thread():
    """MobileNet-V2's 14x14 projection (384 -> 64) on four images at two threads: each
    image's product whole on one thread, two side by side, rather than every image's
    pixels divided (each a call and a dispatch, and the pixels another thread's
    depthwise layer wrote); priced as the busiest thread's two products, at the rate of
    a core with the other one busy. im2col, whose window matrix the threads share,
    refuses that split."""
    target, profile = get_target("avx512"), load_profile(AVX512)
    s = ConvShape(4, 384, 14, 14, 64, (1, 1))
    best = choose(s, profile, target, 2).best_in(("nchwc",), ("nchwc",))
    assert best.plan.split == "groups" and best.plan.parts() == 2
    machine = Machine.of(profile)
    slower = machine.at(16, 1).fma_per_ns() / machine.at(16, 2).fma_per_ns()
    assert best.term("fma") == pytest.approx(predict(ConvPlan(best.config, 1), profile).term("fma") / 2 * slower)
    im2col = next(p for p in forced_plans(s, 16, ()) if p.config.algorithm == "im2col")
    with pytest.raises(AutoconfigError, match="rows or columns"):
        conv_model.validate_plan(replace(im2col, split="groups"), target)


def test_a_layer_first_to_read_its_input_passes_over_a_tiled_product_divided_by_rows():
    """GoogLeNet's 14x14 512 -> 64 layer on two threads: in NCHW its best product is
    tiled and divided by rows (each thread all of the input in place); as the first
    reader of a tensor the threads before it wrote, its row segments from the other
    core's lines make another product cheaper."""
    profile, target = load_profile(PROFILES / "intel-xeon-emerald-rapids-avx512.yaml"), get_target("avx512")
    s = ConvShape(1, 512, 14, 14, 64, (1, 1))
    plain = {fresh: choose(s, profile, target, 2, (ep.bias(),), 30_000_000, fresh_input=fresh).best_in(("nchw",),
                                                                                                      ("nchw",))
             for fresh in (False, True)}  # fmt: skip
    assert (plain[False].config.gemm.algorithm, plain[False].plan.split) == ("tiled", "rows")
    assert (plain[True].config.gemm.algorithm, plain[True].plan.split) != ("tiled", "rows")


def test_the_model_prices_channel_blocked_layouts():
    """On MobileNet-V1's first depthwise layer the model prefers channel blocks (aligned
    whole-vector loads, no input transform); a layer on its own, which takes and returns
    NCHW, counts the transforms into and out of blocks and runs NCHW; inside a model the
    layout follows the input's and what the output's readers can take, each transform
    priced."""
    from autoconfig.machine import Machine
    from autoconfig.models.conv import choose_layout

    profile, target = load_profile(AVX512), get_target("avx512")
    depthwise = ZOO_LAYERS[4]
    choice = choose(depthwise, profile, target, 1)
    assert layout_of(choice.best.config) == "nchwc" and "NCHW[16c]: every activation load" in choice.explain()
    alone = choice.at_nchw_boundary()
    blocked = [p for p in alone.per_algorithm if "nchwc" in (input_layout_of(p.config), layout_of(p.config))]
    assert blocked and all(p.term("reblock out") > 0 for p in blocked if layout_of(p.config) == "nchwc")
    assert layout_of(alone.best.config) == input_layout_of(alone.best.config) == "nchw"  # transforms cost more
    if target.execution(this_host()).mode != "unavailable":  # compiling a layer links it for this host
        x, w, b = layer_data(depthwise)
        assert layout_of(compile_layer(depthwise, w, b, profile=AVX512, threads=1).config) == "nchw"
    machine = Machine.of(profile)
    kept, _ = choose_layout(choice, "nchwc", {"nchw": 0.0, "nchwc": 0.0}, machine)
    assert input_layout_of(kept.config) == layout_of(kept.config) == "nchwc"
    forced, why = choose_layout(choice, "nchwc", {"nchw": 0.0}, machine)
    assert layout_of(forced.config) == "nchw" and "NCHW output" in why
    costly, why = choose_layout(choice, "nchw", {"nchw": 0.0, "nchwc": 1e6}, machine)
    assert layout_of(costly.config) == "nchw" and "transform its input" not in why


def test_choices_differ_between_isas():
    def picks(profile: Path, target) -> list[tuple]:
        return [(c.best.config.algorithm, c.best.config.lanes, c.best.config.tile)
                for s in ZOO_LAYERS for c in [choose(s, load_profile(profile), target, 1)]]  # fmt: skip

    # the datasheet profiles: AVX2 (Core i7-8700) vs AVX-512 (Xeon Platinum 8380), NEON vs RVV
    assert (picks(PROFILES / "intel-core-i7-8700.yaml", get_target("avx2"))
            != picks(PROFILES / "intel-xeon-platinum-8380.yaml", get_target("avx512")))  # fmt: skip
    assert picks(PROFILE_OF["neon"], get_target("neon")) != picks(PROFILE_OF["rvv256"], get_target("rvv", 256))


def test_explain_conv_command(capsys):
    assert cli(["explain", "conv", "1x64x56x56", "64x64x3x3", "--stride", "1", "--pad", "1",
                "--profile", str(AVX2), "--threads", "1"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("conv 1x64x56x56 * 64x64x3x3 s1x1 p1,1,1,1") and "choice:" in out


# ---------------------------------------------------------------- bad input


def test_bad_input_is_one_error_line(capsys):
    s = ConvShape(1, 4, 8, 8, 6, (3, 3), pads=(1, 1, 1, 1))
    x, w, b = layer_data(s)
    f = compile_layer(s, w, b, profile=AVX2, target="avx2", threads=1)
    with pytest.raises(AutoconfigError, match="x must be float32, got float64"):
        f(x.astype(np.float64))
    with pytest.raises(AutoconfigError, match=r"x must have shape \(1, 4, 8, 8\), got \(1, 4, 8, 9\)"):
        f(np.zeros((1, 4, 8, 9), np.float32))
    with pytest.raises(AutoconfigError, match="must equal the input's 4 channels"):
        autoconfig.compile_conv2d((1, 4, 8, 8), w, group=2, profile=AVX2)
    with pytest.raises(AutoconfigError, match="does not fit the padded"):
        autoconfig.compile_conv2d((1, 4, 2, 2), w, profile=AVX2)
    with pytest.raises(AutoconfigError, match="pads must be four integers"):
        autoconfig.compile_conv2d((1, 4, 8, 8), w, pads=(1, 1), profile=AVX2)
    with pytest.raises(AutoconfigError, match="1 per-channel op.* but 0 channel_values"):
        autoconfig.compile_conv2d((1, 4, 8, 8), w, epilogue=(ep.scale(),), profile=AVX2)
    with pytest.raises(AutoconfigError, match="weight must be a float32"):
        autoconfig.compile_conv2d((1, 4, 8, 8), w.astype(np.float16), profile=AVX2)
    too_big = ConvPlan(DirectConfig(s, 8, 8, 2, 0, (ep.bias(),)), 1, "groups")
    with pytest.raises(AutoconfigError, match="needs 16 accumulators .* = 19 vector registers; avx2 has 16"):
        compile_layer(s, w, b, profile=AVX2, target="avx2", config=too_big)
    wrong_split = replace(too_big, config=replace(too_big.config, mr=2), split="sideways")
    with pytest.raises(AutoconfigError, match="splits threads by"):
        compile_layer(s, w, b, profile=AVX2, target="avx2", config=wrong_split)
    winograd_on_rvv = ConvPlan(WinogradConfig(s, 2, 4, mm.MatmulConfig(WinogradConfig(s, 2, 4, None).gemm_shape(),
                                                                       "tiled", 4, batch=16)))  # fmt: skip
    with pytest.raises(AutoconfigError, match="winograd's output interleave needs fixed-width vectors"):
        compile_layer(s, w, None, profile=PROFILE_OF["rvv128"], target=get_target("rvv", 128), config=winograd_on_rvv)
    not_pointwise = ConvPlan(GemmConvConfig(s, "gemm1x1", mm.MatmulConfig(s.gemm_shape(), "tiled", 8,
                                                                          channel_axis="rows")))  # fmt: skip
    with pytest.raises(AutoconfigError, match="gemm1x1 needs a 1x1 convolution"):
        compile_layer(s, w, None, profile=AVX2, target="avx2", config=not_pointwise)
    blocked = ConvShape(1, 8, 6, 6, 8, (3, 3), pads=(1, 1, 1, 1), group=8)
    bx, bw, bb = layer_data(blocked)
    on_rvv = ConvPlan(BlockedDepthwiseConfig(blocked, 4, 2, (ep.bias(),)))
    with pytest.raises(AutoconfigError, match="channel-blocked layouts need fixed-length vectors"):
        compile_layer(blocked, bw, bb, profile=PROFILE_OF["rvv128"], target=get_target("rvv", 128), config=on_rvv)
    odd = ConvPlan(BlockedDirectConfig(s, 8, 2, 1, False, (ep.bias(),)))  # 6 output channels
    with pytest.raises(AutoconfigError, match=r"needs the output channels \(6\) to be a multiple of the 8 lanes"):
        compile_layer(s, w, b, profile=AVX2, target="avx2", config=odd)
    wide = ConvPlan(BlockedDirectConfig(blocked, 8, 6, 1, True, (ep.bias(),)))
    wide = replace(wide, config=replace(wide.config, shape=ConvShape(1, 8, 6, 6, 16, (3, 3), pads=(1, 1, 1, 1)), mv=2))
    with pytest.raises(AutoconfigError, match="needs 12 accumulators .* = 20 vector registers; avx2 has 16"):
        compile_layer(wide.shape, np.ones(wide.shape.weight_shape, np.float32), np.ones(16, np.float32),
                      profile=AVX2, target="avx2", config=wide)
    assert cli(["explain", "conv", "1x64x56", "64x64x3x3", "--profile", str(AVX2)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_a_layer_writes_into_out_when_given():
    x = np.random.default_rng(0).standard_normal((1, 4, 9, 9), dtype=np.float32)
    w = np.random.default_rng(1).standard_normal((6, 4, 3, 3), dtype=np.float32)
    conv = autoconfig.compile_conv2d(x.shape, w, pads=(1, 1, 1, 1), profile=AVX2)
    y = np.empty((1, 6, 9, 9), np.float32)
    assert conv(x, out=y) is y
    np.testing.assert_array_equal(y, conv(x))
    pool = autoconfig.compile_pool2d(x.shape, "max", (2, 2), strides=(2, 2), profile=AVX2)
    p = np.empty((1, 4, 4, 4), np.float32)
    assert pool(x, out=p) is p
    np.testing.assert_array_equal(p, pool(x))
    with pytest.raises(AutoconfigError, match=r"out must be a writeable C-contiguous float32 array of shape \(1, 4, 4, 4\)"):
        pool(x, out=np.empty((1, 4, 4, 5), np.float32))
    with pytest.raises(AutoconfigError, match="out overlaps x"):
        pool(x, out=x.reshape(-1)[:64].reshape(1, 4, 4, 4))



def test_winograd_filters_of_a_large_model_are_fetched_from_dram():
    """Inside a model whose inference outgrows the L3, a Winograd layer's transformed
    filters come from DRAM, not from the L3 that holds them for a layer on its own."""
    shape = ConvShape(1, 512, 14, 14, 512, (3, 3), pads=(1, 1, 1, 1))
    profile = load_profile(PROFILES / "intel-xeon-model167-avx512.yaml")
    machine = Machine.of(profile)
    for plan in conv_model.winograd_plans(shape, profile, get_target("avx512"), 1):
        alone = {t.name: t for t in conv_model.predict(plan, machine).terms}["filters"]
        inside = {t.name: t for t in conv_model.predict(plan, machine.in_model(528_000_000)).terms}["filters"]
        assert "from L3" in alone.why and "from DRAM (the inference outgrows the L3" in inside.why
        assert inside.ns > alone.ns


def test_direct_convolutions_in_a_model_that_outgrows_the_l3_read_their_weights_from_dram():
    """A direct convolution (plain or channel-blocked) reads its weights once from where
    the model leaves its constants: from DRAM inside a model whose inference outgrows
    the L3, from the level that holds the layer's data on its own."""
    shape = ConvShape(1, 192, 13, 13, 384, (3, 3), pads=(1, 1, 1, 1))
    profile = load_profile(PROFILES / "intel-xeon-emerald-rapids-avx512.yaml")
    machine, weights = Machine.of(profile), 384 * 192 * 9 * F32
    choice = conv_model.choose(shape, profile, get_target("avx512"), 1, model_bytes=528_000_000)
    plans = {type(p.config): p.plan for p in choice.per_algorithm if p.config.algorithm == "direct"}
    assert set(plans) == {DirectConfig, BlockedDirectConfig}
    for plan in plans.values():
        alone = {t.name: t for t in conv_model.predict(plan, machine).terms}
        inside = {t.name: t for t in conv_model.predict(plan, machine.in_model(528_000_000)).terms}
        assert "memory DRAM" not in alone and "weights once from DRAM" in inside["memory DRAM"].why
        assert inside["memory DRAM"].ns >= weights / machine.bandwidth["DRAM"]


@pytest.mark.parametrize("algorithm", ["winograd", "im2col"])
def test_scratch_is_fetched_from_dram_at_several_threads_in_a_model_that_outgrows_the_l3(algorithm):
    """Inside a model whose inference outgrows the L3, built for several threads, the
    arena reuses memory only once the cores' caches have cooled, so the scratch a plan
    writes (Winograd's V and M, im2col's windows, their split planes) is read from DRAM
    before it is written: each such term grows by those bytes at DRAM's bandwidth. At one
    thread, or in a model that fits, the scratch is warm and the terms are unchanged."""
    shape = ConvShape(1, 32, 147, 147, 64, (3, 3), pads=(1, 1, 1, 1))
    profile = load_profile(PROFILES / "intel-xeon-emerald-rapids-avx512.yaml")
    machine, large, small = Machine.of(profile), 528_000_000, 20_000_000
    choice = conv_model.choose(shape, profile, get_target("avx512"), 2, model_bytes=large)
    plan = next(p.plan for p in choice.per_algorithm if p.config.algorithm == algorithm and p.plan.threads == 2)
    terms = {}
    for name, view in {"alone": machine, "one thread": machine.in_model(large, 1),
                       "fits": machine.in_model(small, 2), "outgrows": machine.in_model(large, 2)}.items():
        terms[name] = {t.name: t for t in conv_model.predict(plan, view).terms}
    c, dram = plan.config, machine.at(plan.config.lanes, 2).bandwidth["DRAM"]
    share = busiest_share(shape.batch * shape.channels, 2)
    scratch = {"transform": c.split().size * F32 * share}
    if algorithm == "winograd":
        share_in = c.band_rows / (shape.batch * c.tiles_h) if c.bands > 1 else busiest_share(shape.channels, 2)
        scratch |= {"transform in": c.v_size() * F32 * share_in, STALL_TERM: c.m_size() * F32 / plan.parts()}
    else:
        scratch |= {"im2col": c.im2col().size * F32 * busiest_share(c.im2col().rows, 2)}
    for name, written in scratch.items():
        assert terms["outgrows"][name].ns - terms["fits"][name].ns == pytest.approx(written / dram, rel=1e-6)
        assert "first fetched from DRAM" in terms["outgrows"][name].why
        for warm in ("alone", "one thread"):
            assert terms[warm][name].ns == pytest.approx(terms["fits"][name].ns)
            assert "first fetched" not in terms[warm][name].why


@pytest.mark.parametrize("s", [ConvShape(1, 64, 56, 56, 64, (3, 3), pads=(1, 1, 1, 1)),
                               ConvShape(1, 32, 112, 112, 32, (3, 3), pads=(1, 1, 1, 1), group=32),
                               ConvShape(1, 17, 30, 30, 33, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1))],
                         ids=ConvShape.describe)  # fmt: skip
def test_the_conv_choice_skips_only_plans_that_cannot_win(s):
    """choose() leaves out direct, depthwise and blocked plans whose FMA floor exceeds
    their kind's best so far: each kind's best must be what scoring every one gives."""
    profile, target = load_profile(PROFILE_OF["avx512"]), get_target("avx512")
    machine = Machine.of(profile)
    every = [conv_model.predict(p, machine) for t in (1, 2)
             for candidates in (conv_model.direct_candidates, conv_model.depthwise_candidates,
                                conv_model.blocked_candidates)
             for p in candidates(s, machine, target, t, ())]  # fmt: skip
    kinds = {conv_model._kind(p.config) for p in every}
    chosen = {conv_model._kind(p.config): p for p in choose(s, profile, target, 2).per_algorithm}
    for kind in kinds:
        assert chosen[kind].plan == conv_model._best([p for p in every if conv_model._kind(p.config) == kind]).plan


@pytest.mark.parametrize("case_id", ["avx2", "avx512"])
def test_direct_passes_are_offered_where_a_channel_tiles_weights_outgrow_l1(case_id):
    """A 7x7 layer of 512 channels: each channel tile's weights (hundreds of kB) outgrow
    L1, and a single pass streams them again for every pixel tile; in passes of kc input
    channels, whose weights fit DIRECT_PASS_L1_SHARE of L1, each weight is read once per
    plane. The model offers passes there, each pass plan priced below its one-pass twin,
    and none where every tile's weights already fit (4 input channels)."""
    profile, target = load_profile(PROFILE_OF[case_id]), get_target(case_id)
    machine = Machine.of(profile)
    big = ConvShape(1, 512, 7, 7, 512, (3, 3), pads=(1, 1, 1, 1))
    plans = {(p.config.nv, p.config.mv, p.config.kc): conv_model.predict(p, machine).total_ns
             for p in conv_model.blocked_candidates(big, machine, target, 1, ())}  # fmt: skip
    passes = [(tile, ns) for tile, ns in plans.items() if tile[2]]
    assert passes
    l1 = dict(machine.capacities())["L1"]
    for (nv, mv, kc), ns in passes:
        per_channel = 9 * mv * target.f32_lanes * 4  # bytes of 3x3 weights per input channel
        assert kc * per_channel <= conv_model.DIRECT_PASS_L1_SHARE * l1 < (kc + 1) * per_channel
        assert ns < plans[nv, mv, 0]
    small = ConvShape(1, 4, 56, 56, 64, (3, 3), pads=(1, 1, 1, 1))
    assert not any(p.config.kc for p in conv_model.blocked_candidates(small, machine, target, 1, ()))


@pytest.mark.parametrize("prologue", [(), (ep.scale(), ep.bias(), ep.relu())], ids=["alone", "prologue"])
@pytest.mark.parametrize("s", [ConvShape(1, 160, 28, 28, 128, (1, 1)), ConvShape(1, 70, 14, 14, 24, (1, 1))],
                         ids=ConvShape.describe)  # fmt: skip
def test_the_fastest_plan_alone_ties_with_the_choice(s, prologue):
    """With `fastest` (what a fusion plan prices a prologue by), no kind's best is kept
    for the layout plan: the plan found must still tie with the full choice's, and
    with the fastest of every plan scored by the full choice."""
    profile, target = load_profile(PROFILE_OF["avx512"]), get_target("avx512")
    full = choose(s, profile, target, 2, prologue=prologue)
    fastest = choose(s, profile, target, 2, prologue=prologue, fastest=True).best
    least = min(p.total_ns for p in full.per_algorithm)
    for a, b in ((fastest.total_ns, least), (least, fastest.total_ns), (full.best.total_ns, fastest.total_ns)):
        assert a <= b * (1 + RESOLUTION)


@pytest.mark.parametrize("s, left_out", [(ConvShape(1, 128, 52, 52, 128, (3, 3), pads=(1, 1, 1, 1)),
                                           {"winograd F(2,3)", "im2col"}),
                                          (ConvShape(1, 512, 14, 14, 512, (3, 3), pads=(1, 1, 1, 1)), {"im2col"}),
                                          (ConvShape(1, 256, 26, 26, 512, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
                                           set())],
                         ids=lambda v: v.describe() if isinstance(v, ConvShape) else ",".join(sorted(v)))  # fmt: skip
def test_a_product_left_unscored_could_not_have_won(s, left_out):
    """choose() does not score a product in NCHW (a Winograd transform's, im2col's GEMM)
    whose FMA floor exceeds the best NCHW plan: scored anyway, as choose() would, a
    left-out one must lose to that plan, and the explanation must say it was left out;
    one that can win is scored."""
    profile, target = load_profile(PROFILE_OF["avx512"]), get_target("avx512")
    machine = Machine.of(profile)
    choice = choose(s, profile, target, 2, fast_winograd=True)
    gemm = conv_model.choose_matmul(s.gemm_shape(), profile, target, 2, (), a_constant=True).best.plan
    config = GemmConvConfig(s, "im2col", replace(gemm.config, channel_axis="rows"))
    plans = {"im2col": ConvPlan(config, gemm.threads, gemm.split)}
    if winograd.applies(s, target):
        plans |= {f"winograd F({m},3)": conv_model.winograd_plan(s, m, profile, target, 2) for m in (2, 4)}
    in_nchw = [p for p in choice.per_algorithm if (input_layout_of(p.config), layout_of(p.config)) == ("nchw", "nchw")]
    assert {why.split(" nchw:")[0].strip() for why in choice.unscored} == left_out
    assert all(why in choice.explain() for why in choice.unscored)
    for name, plan in plans.items():
        predicted = conv_model.predict(plan, machine).total_ns
        if name in left_out:
            assert predicted > min(p.total_ns for p in in_nchw)
        else:  # scored: its algorithm's best is at most it, or tied with it (`cost.best_of`)
            best = min(p.total_ns for p in choice.per_algorithm if p.config.algorithm == name.split()[0])
            assert best <= predicted * (1 + RESOLUTION)


def test_direct_layers_may_take_all_input_channels_in_one_block():
    """Where the L1 rule splits the input channels, the direct model also scores one
    block of all of them; each further block passes over the output again, priced."""
    machine = Machine.of(load_profile(PROFILES / "intel-xeon-model167-avx512.yaml")).at(16, 1)
    shape = ConvShape(1, 32, 208, 208, 64, (3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    split, whole = conv_model.channel_blocks(shape, 6, 64, machine)
    assert split < whole == 32

    def passes(kc: int) -> float:
        return conv_model.predict(ConvPlan(DirectConfig(shape, 16, 6, 4, kc)), machine).term("c passes")

    assert passes(whole) == 0 < passes(split)
    assert {p.config.kc for p in conv_model.direct_candidates(shape, machine, target_for("avx512"), 1, ())
            if p.config.tile == "6x4" and p.config.lanes == 16} == {split, whole}  # fmt: skip


def test_a_layer_alone_may_run_in_channel_blocks_with_its_transforms_priced():
    """A strided layer on its own (NCHW in and out) may run a channel-blocked plan when
    its transforms cost less than the blocks save: its prediction carries the output's
    transform back to NCHW, and the result is onnxruntime's."""
    require_runnable(get_target("avx512"))
    shape = ConvShape(1, 32, 30, 30, 64, (3, 3), (2, 2), (1, 1, 1, 1))
    x, w, b = layer_data(shape)
    f = compile_layer(shape, w, b, profile=AVX512, threads=1)
    assert isinstance(f.config, BlockedDirectConfig) and f.prediction.term("reblock out") > 0
    assert "reblock out" in f.explain()
    assert_close(f(x), conv_reference(shape, x, w, b), what="blocked plan at an NCHW boundary")


def test_nhwc_is_scored_where_channel_blocks_do_not_fit():
    """A 1x1 layer whose input or output channels fill no block of the widest vectors
    (EfficientNet's 24 -> 144 and 144 -> 24) gets a plan with that side NHWC and the
    other NCHW[c], its transforms at a layer's boundary at a measured width dividing
    the channels; where both fill blocks, or no measured width divides the channels
    (255), no NHWC plan."""
    profile, target = load_profile(PROFILE_OF["avx512"]), get_target("avx512")

    def plans(s: ConvShape) -> list:
        return [p for p in choose(s, profile, target, 1).at_nchw_boundary().per_algorithm
                if "nhwc" in (input_layout_of(p.config), layout_of(p.config))]  # fmt: skip

    (expand,) = plans(ConvShape(1, 24, 56, 56, 144, (1, 1)))
    assert (input_layout_of(expand.config), layout_of(expand.config)) == ("nhwc", "nchwc")
    assert expand.term("reblock in") > 0 and expand.term("reblock out") > 0
    assert "into NHWC" in next(t.why for t in expand.terms if t.name == "reblock in")
    (project,) = plans(ConvShape(1, 144, 56, 56, 24, (1, 1)))
    assert (input_layout_of(project.config), layout_of(project.config)) == ("nchwc", "nhwc")
    assert not plans(ConvShape(1, 64, 28, 28, 128, (1, 1)))
    assert not plans(ConvShape(1, 256, 13, 13, 255, (1, 1)))


def _float64_conv(s: ConvShape, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """An undilated, ungrouped, stride-1 convolution summed in float64."""
    (top, left, bottom, right), (kh, kw) = s.pads, s.kernel
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    return sum(np.einsum("nchw,oc->nohw", padded[:, :, i:i + s.out_height, j:j + s.out_width], w[:, :, i, j])
               for i in range(kh) for j in range(kw))  # fmt: skip


@pytest.mark.parametrize("s", [ConvShape(1, 256, 10, 12, 16, (3, 3), pads=(1, 1, 1, 1)),
                               ConvShape(1, 1024, 10, 12, 16, (1, 1))], ids=ConvShape.describe)  # fmt: skip
def test_long_sums_round_like_blocked_ones(s):
    """Summing thousands of products in one register chain rounds 3-5x more than
    onnxruntime's blocked sums; every kernel cuts its sums into chains
    (`kernels.gemm.SUM_CHAIN`), even where a plan takes all channels in one block: each
    plan's relative rms error against float64 stays at a blocked sum's (ReLU'd input,
    weights scaled to unit outputs), F(2,3) within twice that."""
    target = target_for("avx2")
    require_runnable(target)
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal(s.input_shape), 0).astype(np.float32)
    w = (rng.standard_normal(s.weight_shape) / np.sqrt(s.in_per_group * s.taps)).astype(np.float32)
    expected = _float64_conv(s, x, w)
    whole = s.in_per_group
    plans = [ConvPlan(DirectConfig(s, 8, 3, 2, whole)), ConvPlan(BlockedDirectConfig(s, 8, 3, 2, False)),
             ConvPlan(GemmConvConfig(s, "im2col", mm.MatmulConfig(s.gemm_shape(), "tiled", 8, 3, 2,
                                                                  channel_axis="rows")))]  # fmt: skip
    if s.pointwise:
        plans.append(ConvPlan(GemmConvConfig(s, "gemm1x1", mm.MatmulConfig(transposed_shape(s.gemm_shape()), "packed",
                                                                           8, 3, 2, transposed=True))))  # fmt: skip
    else:
        plans.append(conv_model.winograd_plan(s, 2, load_profile(PROFILE_OF["avx2"]), target, 1))
    for plan in plans:
        y = compile_layer(s, w, None, profile=PROFILE_OF["avx2"], target=target, config=plan)(x)
        error = np.sqrt(np.mean((y - expected) ** 2) / np.mean(expected**2))
        bound = 2.5e-7 * (2 if isinstance(plan.config, WinogradConfig) else 1)
        assert error < bound, f"{plan.config.algorithm} {plan.config.tile}: relative rms error {error:.2e}"


def test_winograd_f43_only_when_asked():
    """F(4,3) rounds about 7x more than a direct sum: a build leaves it unscored, and
    says why, unless it asks for speed over accuracy (`fast_winograd`)."""
    s = ConvShape(1, 64, 56, 56, 64, (3, 3), pads=(1, 1, 1, 1))
    profile, target = load_profile(PROFILE_OF["avx2"]), get_target("avx2")
    tiles = {flag: {p.config.m for p in choose(s, profile, target, 1, fast_winograd=flag).per_algorithm
                    if isinstance(p.config, WinogradConfig)} for flag in (False, True)}  # fmt: skip
    assert tiles == {False: {2}, True: {4}}
    assert "F(4,3): not scored, its rounding error" in choose(s, profile, target, 1).explain()
