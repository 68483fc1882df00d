#!/usr/bin/env python3
"""Validate the convolution model against measurement, one thread.

For each layer (zoo layers, and odd ones: 3 or 17 or 115 input channels, a 7x7
stride-2 stem, dilation 2, a 1x1 image, grouped, asymmetric pads) a grid of
configurations spanning every algorithm that applies (direct and depthwise at two
vector widths and several register tiles; gemm1x1 and im2col with tiled and packed
GEMMs, gemm1x1 also with output channels in the lanes; Winograd F(2,3) and F(4,3)
with the matmul model's product) plus the model's own pick for a layer on its own
(NCHW in and out; a channel-blocked pick is timed and priced with its transforms into
and out of blocks; channel-blocked plans between blocked layers are checked against
measurement inside built models by `autoconfig run DIR --per-kernel`) is compiled,
checked against onnxruntime and timed as a whole call (transforms included), pinned to
one core, round-robin in several passes, each configuration keeping its best sample
(the matmul validation's protocol: scripts/validate_matmul_model.py). Per layer: the
model's regret (its pick's time over the grid's best, minus 1) and the Spearman
correlation of predicted and measured times; then the summary and which algorithms the
model picked.

Usage: python scripts/validate_conv_model.py [--profile P] [--reps 5] [--passes 3] [--quick]
       [--layer NAME]   (one layer, every configuration's predicted and measured time)
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import Counter

import numpy as np

import harness
from autoconfig.accuracy import spearman
from kernels.conv import DirectConfig, input_layout_of, layout_of
from validate_matmul_model import measure_round_robin

LAYERS = {  # name: (input NCHW, weight shape, strides, pads (top, left, bottom, right), dilations, group)
    "vgg conv1_1 3->64 224": ((1, 3, 224, 224), (64, 3, 3, 3), 1, 1, 1, 1),
    "vgg 128->128 112": ((1, 128, 112, 112), (128, 128, 3, 3), 1, 1, 1, 1),
    "vgg 256->256 56": ((1, 256, 56, 56), (256, 256, 3, 3), 1, 1, 1, 1),
    "vgg 512->512 28": ((1, 512, 28, 28), (512, 512, 3, 3), 1, 1, 1, 1),
    "vgg 512->512 14": ((1, 512, 14, 14), (512, 512, 3, 3), 1, 1, 1, 1),
    "mobilenet stem 3->32 s2": ((1, 3, 224, 224), (32, 3, 3, 3), 2, 1, 1, 1),
    "mobilenet dw 32 112": ((1, 32, 112, 112), (32, 1, 3, 3), 1, 1, 1, 32),
    "mobilenet dw/2 64 112": ((1, 64, 112, 112), (64, 1, 3, 3), 2, 1, 1, 64),
    "mobilenet pw 32->64 112": ((1, 32, 112, 112), (64, 32, 1, 1), 1, 0, 1, 1),
    "mobilenet pw 64->128 56": ((1, 64, 56, 56), (128, 64, 1, 1), 1, 0, 1, 1),
    "mobilenet dw 512 14": ((1, 512, 14, 14), (512, 1, 3, 3), 1, 1, 1, 512),
    "mobilenet pw 1024 7": ((1, 1024, 7, 7), (1024, 1024, 1, 1), 1, 0, 1, 1),
    "effnet dw5/2 144 56": ((1, 144, 56, 56), (144, 1, 5, 5), 2, 2, 1, 144),
    "effnet pw 24->144 56": ((1, 24, 56, 56), (144, 24, 1, 1), 1, 0, 1, 1),
    "effnet pw 1152->192 7": ((1, 1152, 7, 7), (192, 1152, 1, 1), 1, 0, 1, 1),
    "effnet dw5 1152 7": ((1, 1152, 7, 7), (1152, 1, 5, 5), 1, 2, 1, 1152),
    "effnet se 480->20 1": ((1, 480, 1, 1), (20, 480, 1, 1), 1, 0, 1, 1),
    "yolo 32->64 s2 208": ((1, 32, 208, 208), (64, 32, 3, 3), 2, 1, 1, 1),
    "yolo pw 256->255 52": ((1, 256, 52, 52), (255, 256, 1, 1), 1, 0, 1, 1),
    "yolo 128->256 52": ((1, 128, 52, 52), (256, 128, 3, 3), 1, 1, 1, 1),
    "densenet 128->32 56": ((1, 128, 56, 56), (32, 128, 3, 3), 1, 1, 1, 1),
    "densenet 128->32 28": ((1, 128, 28, 28), (32, 128, 3, 3), 1, 1, 1, 1),
    "densenet 128->32 14": ((1, 128, 14, 14), (32, 128, 3, 3), 1, 1, 1, 1),
    "densenet 128->32 7": ((1, 128, 7, 7), (32, 128, 3, 3), 1, 1, 1, 1),
    "inception 32->32 149 valid": ((1, 32, 149, 149), (32, 32, 3, 3), 1, 0, 1, 1),
    "inception 32->64 147": ((1, 32, 147, 147), (64, 32, 3, 3), 1, 1, 1, 1),
    "inception 80->192 73 valid": ((1, 80, 73, 73), (192, 80, 3, 3), 1, 0, 1, 1),
    "odd stem 7x7/2 3->64": ((1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, 1),
    "odd 17->33 30": ((1, 17, 30, 30), (33, 17, 3, 3), 1, 1, 1, 1),
    "odd dilation 2 64 28": ((1, 64, 28, 28), (64, 64, 3, 3), 1, 2, 2, 1),
    "odd 1x1 image 256->128": ((1, 256, 1, 1), (128, 256, 3, 3), 1, 1, 1, 1),
    "odd grouped g4 64 28": ((1, 64, 28, 28), (64, 16, 3, 3), 1, 1, 1, 4),
    "odd 115->40 5x5 20": ((1, 115, 20, 20), (40, 115, 5, 5), 1, 2, 1, 1),
    "odd asym pads 32 33": ((1, 32, 33, 33), (48, 32, 3, 3), 2, (0, 1, 1, 0), 1, 1),
    "odd 1x1/2 64->128 56": ((1, 64, 56, 56), (128, 64, 1, 1), 2, 0, 1, 1),
}
DIRECT_TILES = [(8, 1), (6, 2), (4, 2), (2, 4), (6, 4), (5, 5)]
DEPTHWISE_TILES = [(8, 1), (4, 2), (3, 3), (2, 4), (6, 3), (1, 1)]
GEMM_TILES = [(6, 2), (4, 3), (5, 5)]
IM2COL_LIMIT = 64 << 20  # bytes: larger window matrices are left out of the grid


def shape_of(entry):
    from autoconfig.conv import conv_shape

    ish, ws, stride, pads, dilation, group = entry
    pads = pads if isinstance(pads, tuple) else (pads,) * 4
    return conv_shape(ish, ws, strides=(stride, stride), pads=pads, dilations=(dilation, dilation), group=group)


def grid(shape, profile, target) -> list:
    """Plans spanning every algorithm that applies to `shape`, one thread."""
    from autoconfig.machine import Machine
    from autoconfig.models.conv import ConvPlan, channel_blocks, winograd_plans
    from autoconfig.models.matmul import block_sizes, blockings, k_unroll
    from kernels import matmul as mm
    from kernels.conv import DepthwiseConfig, DirectConfig, GemmConvConfig, transposed_shape

    machine = Machine.of(profile)
    widths = sorted({target.f32_lanes, target.f32_lanes // 2} & set(machine.fma_by_lanes))
    plans = []
    for lanes in widths:
        m = machine.at(lanes, 1)
        for mr, nv in DIRECT_TILES:
            if mr * nv + nv + 1 <= target.vector_registers and (nv - 1) * lanes < shape.out_width:
                plans += [ConvPlan(DirectConfig(shape, lanes, mr, nv, kc))
                          for kc in channel_blocks(shape, mr, nv * lanes, m)]  # fmt: skip
        if shape.depthwise:
            plans += [ConvPlan(DepthwiseConfig(shape, lanes, mr, nv)) for mr, nv in DEPTHWISE_TILES
                      if mr * nv + 2 <= target.vector_registers and (nv - 1) * lanes < shape.out_width]  # fmt: skip
        gemm = shape.gemm_shape()
        gemm_algorithms = (["gemm1x1"] if shape.pointwise else []) + (
            ["im2col"] if gemm.k * gemm.n * 4 * shape.batch * shape.group <= IM2COL_LIMIT and shape.group < 8 else [])
        for algorithm in gemm_algorithms:
            for mr, nv in GEMM_TILES:
                if mr * nv + nv + 1 <= target.vector_registers:
                    for kc, kinds in blockings(gemm, mr, nv * lanes, m):
                        _, mc, nc, _ = block_sizes(gemm, mr, nv * lanes, m, kc)
                        for kind in kinds:
                            config = mm.MatmulConfig(gemm, kind, lanes, mr, nv, kc, mc, nc, k_unroll(mr, nv),
                                                     channel_axis="rows")  # fmt: skip
                            plans.append(ConvPlan(GemmConvConfig(shape, algorithm, config)))
                    if algorithm == "gemm1x1":  # output channels in the lanes, in one K block
                        _, mc, nc, _ = block_sizes(transposed_shape(gemm), mr, nv * lanes, m)
                        config = mm.MatmulConfig(transposed_shape(gemm), "packed", lanes, mr, nv, 0, mc, nc,
                                                 k_unroll(mr, nv), transposed=True)  # fmt: skip
                        plans.append(ConvPlan(GemmConvConfig(shape, algorithm, config)))
    return plans + winograd_plans(shape, profile, target, 1)


def describe(plan) -> str:
    """'direct 6x4/16 kc=32', 'direct 5 pixels x 64 channels/16 blocked' (channel blocks and
    their transforms), 'gemm1x1 packed 5x5/16'."""
    c = plan.config
    blocked = "nchwc" in (input_layout_of(c), layout_of(c))
    return (f"{c.algorithm} {c.tile}/{c.lanes}" + (" blocked" if blocked else "")
            + (f" kc={c.kc}" if isinstance(c, DirectConfig) else ""))  # fmt: skip


def reference(shape, x, w) -> np.ndarray:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(shape.strides), pads=list(shape.pads),
                            dilations=list(shape.dilations), group=shape.group, kernel_shape=list(shape.kernel))  # fmt: skip
    graph = helper.make_graph([node], "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--reps", type=int, default=5, help="round-robin rounds per pass")
    parser.add_argument("--passes", type=int, default=3, help="passes over all layers")
    parser.add_argument("--quick", action="store_true", help="every other layer")
    parser.add_argument("--layer", choices=sorted(LAYERS), help="only this layer, listing every configuration")
    args = parser.parse_args()

    import autoconfig
    from autoconfig.machine import Machine
    from autoconfig.models.conv import choose, nchw_boundary, predict
    from autoconfig.resolve import resolve_profile, target_for_profile

    profile = resolve_profile(args.profile)
    target = target_for_profile(profile)
    names = [args.layer] if args.layer else list(LAYERS)[:: 2 if args.quick else 1]
    print(f"host {harness.host()['model_name']!r}, profile {profile.name}, target {target.name}, 1 thread; "
          f"times: best of {args.passes} passes x {args.reps} round-robin rounds, pinned to one core", flush=True)  # fmt: skip
    all_cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, harness.worker_cpus(1, pin=True))
    rng = np.random.default_rng(0)
    layers = {}
    for name in names:
        shape = shape_of(LAYERS[name])
        x = rng.standard_normal(shape.input_shape, dtype=np.float32)
        w = rng.standard_normal(shape.weight_shape, dtype=np.float32)
        expected = reference(shape, x, w)
        pick = choose(shape, profile, target, 1).at_nchw_boundary().best.plan  # as a layer alone
        plans = grid(shape, profile, target)
        if pick not in plans:
            plans.append(pick)
        calls = {}
        for plan in plans:
            f = autoconfig.compile_conv2d(shape.input_shape, w, strides=shape.strides, pads=shape.pads,
                                          dilations=shape.dilations, group=shape.group, profile=profile,
                                          target=target, config=plan)  # fmt: skip
            error = float(np.abs(f(x) - expected).max())
            if error > 1e-4 * max(1.0, float(np.ptp(expected))):
                sys.exit(f"{name}: {describe(plan)} is wrong (max error {error:.3g}); not timing it")
            calls[plan] = (lambda f=f, x=x: f(x))
        layers[name] = (shape, pick, calls, {})
        print(f"  built {name}: {len(plans)} configurations", file=sys.stderr, flush=True)
    for number in range(args.passes):
        for name, (_, _, calls, times) in layers.items():
            for plan, seconds in measure_round_robin(calls, args.reps).items():
                times[plan] = min(seconds, times.get(plan, math.inf))
        print(f"  pass {number + 1} of {args.passes} timed", file=sys.stderr, flush=True)
    os.sched_setaffinity(0, all_cpus)

    print(f"{'layer':<26}{'model pick':<24}{'measured best':<24}{'pick µs':>10}{'best µs':>10}{'regret':>8}"
          f"{'spearman':>10}{'n':>4}")  # fmt: skip
    regrets, rhos, picked = [], [], Counter()
    for name, (shape, pick, _, times) in layers.items():
        plans = list(times)
        machine = Machine.of(profile)  # a layer alone: a channel-blocked pick pays its transforms
        predicted = {p: nchw_boundary(predict(p, profile), machine, target.f32_lanes).total_ns for p in plans}
        best = min(times, key=times.get)
        regret = times[pick] / times[best] - 1
        rho = spearman([predicted[p] for p in plans], [times[p] for p in plans])
        regrets.append(regret)
        rhos.append(rho)
        picked[pick.config.algorithm] += 1
        print(f"{name:<26}{describe(pick):<24}{describe(best):<24}{times[pick] * 1e6:>10.1f}"
              f"{times[best] * 1e6:>10.1f}{regret * 100:>7.1f}%{rho:>10.2f}{len(plans):>4}", flush=True)  # fmt: skip
        if args.layer:
            for p in sorted(plans, key=times.get):
                print(f"  {describe(p):<30} predicted {predicted[p] / 1e3:9.1f} µs  measured "
                      f"{times[p] * 1e6:9.1f} µs{' <- model' if p == pick else ''}")  # fmt: skip
    geo = math.exp(sum(math.log1p(r) for r in regrets) / len(regrets)) - 1
    finite = [r for r in rhos if not math.isnan(r)]
    print(f"\nregret: geomean {geo * 100:.1f}%, worst {max(regrets) * 100:.1f}% over {len(regrets)} layers")
    print(f"spearman per layer: median {float(np.median(finite)):.2f}, mean {float(np.mean(finite)):.2f}")
    print("model picks: " + ", ".join(f"{a} {n}" for a, n in picked.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
