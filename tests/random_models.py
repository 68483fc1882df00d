"""Small ONNX models for the build tests: random CNNs and MLPs drawn from a seed over
the operators the build supports (so shapes and combinations nobody wrote down by
hand get built), and one model of every data movement op."""

from __future__ import annotations

import numpy as np
import onnx

from autoconfig.graph import zoo

ACTIVATIONS = ("relu", "leaky", "silu", "mish", "sigmoid", "tanh", "hardswish", "hardsigmoid", "clip", "none")


def activation(b: zoo.Builder, x: str, kind: str) -> str:
    """`kind` applied to `x` as exporters write it."""
    if kind in ("relu", "leaky", "silu", "mish"):
        return b.act(x, kind)
    if kind == "clip":
        return b.op("Clip", [x, b.const("lo", np.float32(0)), b.const("hi", np.float32(6))])
    if kind == "none":
        return x
    return b.op({"sigmoid": "Sigmoid", "tanh": "Tanh", "hardswish": "HardSwish", "hardsigmoid": "HardSigmoid"}[kind],
                [x])  # fmt: skip


def random_cnn(seed: int) -> onnx.ModelProto:
    """A CNN of 4-7 random blocks on a small odd-sized image, then a classifier head.

    Blocks: convolution (1×1/3×3/5×5, stride 1 or 2, grouped or depthwise, with or
    without bias and BatchNorm) and an activation; a residual Add; pooling (max or
    average, ceil_mode and count_include_pad drawn); a channel Concat of two branches;
    squeeze-excitation; a data movement op (Pad, Slice, Transpose twice, Resize)."""
    b = zoo.Builder(f"random_cnn_{seed}", seed)
    rng = np.random.default_rng(seed + 100)
    c, h, w = 3, int(rng.integers(9, 24)), int(rng.integers(9, 24))
    x, image = "input", (h, w)
    for _ in range(int(rng.integers(4, 8))):
        kind = rng.choice(["conv", "conv", "residual", "pool", "concat", "squeeze", "move"])
        if kind == "conv" or c == 3:
            k = int(rng.choice([1, 3, 5]))
            stride = int(rng.choice([1, 1, 2])) if min(h, w) > 6 else 1
            cout = int(rng.choice([4, 8, 12, 16, 24]))
            group = 1
            if rng.random() < 0.3 and c > 3:
                group, cout = c, c  # depthwise
            y = b.conv(x, c, cout, k, stride, group, bias=bool(rng.random() < 0.5))
            if rng.random() < 0.5:
                y = b.bn(y, cout)
            x = activation(b, y, str(rng.choice(ACTIVATIONS)))
            c, h, w = cout, (h + 2 * (k // 2) - k) // stride + 1, (w + 2 * (k // 2) - k) // stride + 1
        elif kind == "residual":
            y = activation(b, b.conv(x, c, c, 3, bias=True), str(rng.choice(ACTIVATIONS)))
            x = b.op("Add", [y, x] if rng.random() < 0.5 else [x, y])
        elif kind == "pool":
            k, stride, ceil = int(rng.choice([2, 3])), int(rng.choice([1, 2])), int(rng.integers(0, 2))
            pad = int(rng.integers(0, k // 2 + 1))
            if ceil and (pooled(h, k, stride, pad, 1), pooled(w, k, stride, pad, 1)) != \
                    (-(-(h + 2 * pad - k) // stride) + 1, -(-(w + 2 * pad - k) // stride) + 1):
                ceil = 0  # onnx's shape inference keeps a window onnxruntime drops: the build refuses those
            attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4, "ceil_mode": ceil}
            if rng.random() < 0.5:
                x = b.op("MaxPool", [x], **attrs)
            else:
                x = b.op("AveragePool", [x], count_include_pad=int(rng.integers(0, 2)), **attrs)
            h, w = pooled(h, k, stride, pad, ceil), pooled(w, k, stride, pad, ceil)
        elif kind == "concat":
            left = b.cba(x, c, 4, 1, act="relu")
            right = activation(b, b.conv(x, c, 8, 3), str(rng.choice(ACTIVATIONS)))
            x, c = b.op("Concat", [left, right], axis=1), 12
        elif kind == "squeeze":
            gate = b.op("GlobalAveragePool", [x]) if rng.random() < 0.5 else \
                b.op("ReduceMean", [x], axes=[2, 3], keepdims=1)  # fmt: skip
            gate = b.op("Sigmoid", [b.conv(b.op("Relu", [b.conv(gate, c, 4, 1, bias=True)]), 4, c, 1, bias=True)])
            x = b.op("Mul", [x, gate])
        else:
            x, (c, h, w) = movement(b, x, (c, h, w), rng)
    y = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    y = b.op("Softmax", [b.gemm(y, c, 10)], axis=-1)
    return b.model("input", [1, 3, *image], [(y, [1, 10])])


def pooled(size: int, k: int, stride: int, pad: int, ceil: int) -> int:
    """ONNX's pooled size: a window may start in the padding at the end only if it
    starts inside the image or the leading padding."""
    span = size + 2 * pad - k
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    return out - 1 if ceil and (out - 1) * stride >= size + pad else out


def movement(b: zoo.Builder, x: str, chw: tuple[int, int, int], rng: np.random.Generator) -> tuple[str, tuple]:
    """One random data movement op on `x` (channels, height, width); its output and shape."""
    c, h, w = chw
    kind = rng.choice(["pad", "slice", "transpose", "resize"])
    if kind == "pad":
        top, left, bottom, right = (int(v) for v in rng.integers(0, 3, 4))
        mode = str(rng.choice(["constant", "edge", "reflect"]))
        y = b.op("Pad", [x, b.const("pads", np.array([0, 0, top, left, 0, 0, bottom, right], np.int64)),
                         b.const("value", np.float32(rng.standard_normal()))], mode=mode)  # fmt: skip
        return y, (c, h + top + bottom, w + left + right)
    if kind == "slice":
        start, step = int(rng.integers(0, 2)), int(rng.choice([1, 2]))
        y = b.op("Slice", [x, b.const("starts", np.array([start, 0], np.int64)),
                           b.const("ends", np.array([h, w - 1], np.int64)), b.const("axes", np.array([2, 3], np.int64)),
                           b.const("steps", np.array([step, 1], np.int64))])  # fmt: skip
        return y, (c, len(range(start, h, step)), w - 1)
    if kind == "transpose":  # there and back: the second a gather of runs, the first of elements
        return b.op("Transpose", [b.op("Transpose", [x], perm=[0, 1, 3, 2])], perm=[0, 1, 3, 2]), chw
    mode = str(rng.choice(["asymmetric", "half_pixel", "align_corners", "pytorch_half_pixel"]))
    rounding = str(rng.choice(["floor", "round_prefer_floor", "round_prefer_ceil", "ceil"]))
    scale = float(rng.choice([1.5, 2.0]))
    y = b.op("Resize", [x, "", b.const("scales", np.array([1, 1, scale, scale], np.float32))], mode="nearest",
             coordinate_transformation_mode=mode, nearest_mode=rounding)  # fmt: skip
    return y, (c, int(h * scale), int(w * scale))


def random_mlp(seed: int) -> onnx.ModelProto:
    """An MLP of 2-4 layers: MatMul (+ bias Add) or Gemm (transB drawn), a random
    activation after each hidden layer, a random batch, then Softmax."""
    b = zoo.Builder(f"random_mlp_{seed}", seed)
    rng = np.random.default_rng(seed + 200)
    batch, width = int(rng.integers(1, 9)), int(rng.integers(5, 70))
    x, start = "input", width
    for layer in range(int(rng.integers(2, 5))):
        out = int(rng.integers(3, 80))
        if rng.random() < 0.5:
            weight = b.const("w", b.rng.standard_normal((width, out), dtype=np.float32) / np.sqrt(width))
            x = b.op("MatMul", [x, weight])
            if rng.random() < 0.7:
                x = b.op("Add", [x, b.const("bias", 0.1 * b.rng.standard_normal(out))])
        else:
            x = b.gemm(x, width, out)
        x = activation(b, x, str(rng.choice(ACTIVATIONS)))
        width = out
    y = b.op("Softmax", [x], axis=-1)
    return b.model("input", [batch, start], [(y, [batch, width])])


def movement_net(seed: int = 4) -> onnx.ModelProto:
    """Every data movement op once, each a graph output: Pad (constant, reflect), Resize
    (three coordinate modes and roundings, by scales and by sizes), Transpose, Slice
    with a negative step, Split along channels (a view and a gather), ReduceMean."""
    b = zoo.Builder("movement", seed)
    x = b.cba("input", 3, 8, 3, act="relu")  # 8×13×15
    outs = [
        b.op("Pad", [x, b.const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)), b.const("v", np.float32(0.5))]),
        b.op("Pad", [x, b.const("pads", np.array([0, 0, 2, 0, 0, 0, 1, 3], np.int64))], mode="reflect"),
        b.op("Resize", [x, "", b.const("scales", np.array([1, 1, 2, 1.5], np.float32))], mode="nearest"),
        b.op("Resize", [x, "", "", b.const("sizes", np.array([1, 8, 7, 29], np.int64))], mode="nearest",
             coordinate_transformation_mode="align_corners", nearest_mode="round_prefer_ceil"),
        b.op("Resize", [x, "", b.const("scales", np.array([1, 1, 2, 2], np.float32))], mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        b.op("Transpose", [x], perm=[0, 2, 3, 1]),
        b.op("Slice", [x, b.const("starts", np.array([1, -1], np.int64)), b.const("ends", np.array([7, -100], np.int64)),
                       b.const("axes", np.array([1, 3], np.int64)), b.const("steps", np.array([2, -2], np.int64))]),
        b.op("ReduceMean", [x], axes=[2, 3], keepdims=0),
    ]  # fmt: skip
    halves = [b.fresh("split"), b.fresh("split")]
    b.nodes.append(onnx.helper.make_node("Split", [x, b.const("sizes", np.array([3, 5], np.int64))], halves, axis=1,
                                         name="split"))  # fmt: skip
    across = [b.fresh("split"), b.fresh("split")]
    b.nodes.append(onnx.helper.make_node("Split", [x, b.const("sizes", np.array([6, 7], np.int64))], across, axis=2,
                                         name="split_height"))  # fmt: skip
    outs += [b.cba(halves[0], 3, 4, 1, act="relu"), b.op("Relu", [halves[1]]), *across]
    return b.model("input", [1, 3, 13, 15], [(v, None) for v in outs])


def prologue_model(shared: bool = False, kernel: int = 1, channels: int = 8, size: int = 6,
                   batch: int = 1) -> onnx.ModelProto:  # fmt: skip
    """BatchNorm → ReLU → a `kernel`-sized layer (DenseNet's order: the BatchNorm on the
    input, no layer to fold into), a squeeze-excitation scale (a computed [N, C, 1, 1])
    and a 1x1 layer; with `shared`, the ReLU's output is read twice."""
    b = zoo.Builder("prologue_net", 4)
    relu = b.act(b.bn("input", channels), "relu")
    y = b.conv(relu, channels, channels, kernel)
    gate = b.op("Sigmoid", [b.op("GlobalAveragePool", [y])])
    y = b.conv(b.op("Mul", [y, gate]), channels, channels, 1)
    if shared:
        y = b.op("Add", [y, relu])
    return b.model("input", [batch, channels, size, size], [(y, [batch, channels, size, size])])
