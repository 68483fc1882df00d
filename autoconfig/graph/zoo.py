"""The model zoo: VGG-16, MobileNet-V1, EfficientNet-B0 and YOLO-V4 as ONNX files with
deterministic random weights at batch 1, architectures as published.

- VGG-16 (Simonyan & Zisserman 2015, configuration D), 224×224: 13 3×3 convolutions
  with ReLU and five max-pools, then three fully connected layers.
- MobileNet-V1 (Howard et al. 2017, width 1.0), 224×224: a 3×3 stride-2 convolution,
  13 depthwise-separable blocks (3×3 depthwise + BN + ReLU, 1×1 + BN + ReLU), global
  average pooling, a fully connected layer, softmax.
- EfficientNet-B0 (Tan & Le 2019), 224×224: MBConv blocks (expand 1×1, depthwise
  k×k, squeeze-and-excitation with ratio 0.25, project 1×1, residual) with SiLU,
  stages (expansion, kernel, stride, channels, repeats) as in the paper's Table 1.
- YOLO-V4 (Bochkovskiy et al. 2020), 416×416: CSPDarknet53 with Mish, SPP (max-pools
  5, 9, 13), PANet with leaky ReLU (0.1), three heads of 255 channels at 52², 26², 13².

SiLU is written Sigmoid·x and Mish x·tanh(softplus(x)), as exporters of opsets below
18 write them. Weights are scaled by 1/√fan-in so activations stay in range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from autoconfig.errors import AutoconfigError
from autoconfig.fileio import check_output, write_atomically

OPSET = 17
IR_VERSION = 10  # onnxruntime 1.31 reads IR versions up to 13; onnx 1.23 writes 14


class Builder:
    """Appends ONNX nodes with deterministic random weights; names are sequential."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem: str, array: np.ndarray) -> str:
        """A named initializer; floating values are stored as float32."""
        name = self.fresh(stem)
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float32)
        self.weights.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = False) -> str:  # fmt: skip
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k), dtype=np.float32) / np.sqrt(fan_in)
        inputs = [x, self.const("w", w)]
        if bias:
            inputs.append(self.const("b", 0.1 * self.rng.standard_normal(cout, dtype=np.float32)))
        pad = k // 2
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, group=group)  # fmt: skip

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [
            1 + 0.1 * r.standard_normal(c, dtype=np.float32),  # gamma
            0.1 * r.standard_normal(c, dtype=np.float32),  # beta
            0.1 * r.standard_normal(c, dtype=np.float32),  # running mean
            (1 + 0.1 * np.abs(r.standard_normal(c))).astype(np.float32),  # running var
        ]
        return self.op("BatchNormalization", [x, *(self.const("bn", p) for p in params)], epsilon=1e-5)

    def act(self, x: str, kind: str) -> str:
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "leaky":
            return self.op("LeakyRelu", [x], alpha=0.1)
        if kind == "silu":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "mish":
            return self.op("Mul", [x, self.op("Tanh", [self.op("Softplus", [x])])])
        raise ValueError(kind)

    def cba(self, x: str, cin: int, cout: int, k: int, stride: int = 1, act: str = "relu",
            group: int = 1) -> str:  # fmt: skip
        """Conv, BatchNormalization, activation."""
        return self.act(self.bn(self.conv(x, cin, cout, k, stride, group), cout), act)

    def gemm(self, x: str, cin: int, cout: int) -> str:
        w = self.rng.standard_normal((cout, cin), dtype=np.float32) / np.sqrt(cin)
        b = 0.1 * self.rng.standard_normal(cout, dtype=np.float32)
        return self.op("Gemm", [x, self.const("fc_w", w), self.const("fc_b", b)], transB=1)

    def imagenet_head(self, x: str, channels: int) -> onnx.ModelProto:
        """Global average pool, fully connected to 1000 classes, softmax: the model."""
        y = self.op("Flatten", [self.op("GlobalAveragePool", [x])], axis=1)
        y = self.op("Softmax", [self.gemm(y, channels, 1000)], axis=1)
        return self.model("input", [1, 3, 224, 224], [(y, [1, 1000])])

    def model(self, x: str, shape: list[int], outputs: list[tuple[str, list[int]]], opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, s) for o, s in outputs],
            self.weights,
        )  # fmt: skip
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = IR_VERSION
        return model


def vgg16() -> onnx.ModelProto:
    b = Builder("vgg16", seed=16)
    x = y = "input"
    cin = 3
    for width, repeats in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(repeats):
            y = b.act(b.conv(y, cin, width, 3, bias=True), "relu")
            cin = width
        y = b.op("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.op("Flatten", [y], axis=1)
    y = b.act(b.gemm(y, 512 * 7 * 7, 4096), "relu")
    y = b.act(b.gemm(y, 4096, 4096), "relu")
    y = b.op("Softmax", [b.gemm(y, 4096, 1000)], axis=1)
    return b.model(x, [1, 3, 224, 224], [(y, [1, 1000])])


def mobilenet_v1() -> onnx.ModelProto:
    b = Builder("mobilenet_v1", seed=1)
    x = "input"
    y = b.cba(x, 3, 32, 3, stride=2)
    cin = 32
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5, (1024, 2), (1024, 1)]
    for cout, stride in blocks:
        y = b.cba(y, cin, cin, 3, stride, group=cin)  # depthwise
        y = b.cba(y, cin, cout, 1)  # pointwise
        cin = cout
    return b.imagenet_head(y, 1024)


def efficientnet_b0() -> onnx.ModelProto:
    b = Builder("efficientnet_b0", seed=0)
    x = "input"
    y = b.cba(x, 3, 32, 3, stride=2, act="silu")
    cin = 32
    stages = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]  # fmt: skip
    for expand, k, stride, cout, repeats in stages:
        for r in range(repeats):
            s = stride if r == 0 else 1
            hidden = cin * expand
            h = b.cba(y, cin, hidden, 1, act="silu") if expand != 1 else y
            h = b.cba(h, hidden, hidden, k, s, act="silu", group=hidden)
            squeezed = max(1, cin // 4)  # SE ratio 0.25 of the block's input channels
            se = b.op("GlobalAveragePool", [h])
            se = b.act(b.conv(se, hidden, squeezed, 1, bias=True), "silu")
            se = b.op("Sigmoid", [b.conv(se, squeezed, hidden, 1, bias=True)])
            h = b.op("Mul", [h, se])
            h = b.bn(b.conv(h, hidden, cout, 1), cout)
            y = b.op("Add", [h, y]) if s == 1 and cin == cout else h
            cin = cout
    return b.imagenet_head(b.cba(y, cin, 1280, 1, act="silu"), 1280)


def yolov4() -> onnx.ModelProto:
    b = Builder("yolov4", seed=4)
    x = "input"

    def cbm(y, cin, cout, k, s=1):
        return b.cba(y, cin, cout, k, s, act="mish")

    def cbl(y, cin, cout, k, s=1):
        return b.cba(y, cin, cout, k, s, act="leaky")

    def csp_stage(y, cin, cout, blocks, first=False):
        """Downsample, split into a shortcut part and a residual part, merge."""
        y = cbm(y, cin, cout, 3, 2)
        part = cout if first else cout // 2
        shortcut = cbm(y, cout, part, 1)
        main = cbm(y, cout, part, 1)
        for _ in range(blocks):
            inner = cbm(cbm(main, part, cout // 2 if first else part, 1), cout // 2 if first else part, part, 3)
            main = b.op("Add", [main, inner])
        main = cbm(main, part, part, 1)
        return cbm(b.op("Concat", [main, shortcut], axis=1), 2 * part, cout, 1)

    y = cbm(x, 3, 32, 3)
    y = csp_stage(y, 32, 64, 1, first=True)
    y = csp_stage(y, 64, 128, 2)
    p3 = csp_stage(y, 128, 256, 8)
    p4 = csp_stage(p3, 256, 512, 8)
    p5 = csp_stage(p4, 512, 1024, 4)

    def five(y, cin, c):  # 1x1, 3x3, 1x1, 3x3, 1x1
        y = cbl(y, cin, c, 1)
        y = cbl(y, c, 2 * c, 3)
        y = cbl(y, 2 * c, c, 1)
        y = cbl(y, c, 2 * c, 3)
        return cbl(y, 2 * c, c, 1)

    # SPP on the last stage
    y = cbl(cbl(cbl(p5, 1024, 512, 1), 512, 1024, 3), 1024, 512, 1)
    pools = [b.op("MaxPool", [y], kernel_shape=[k, k], strides=[1, 1], pads=[k // 2] * 4) for k in (13, 9, 5)]
    y = b.op("Concat", [*pools, y], axis=1)
    n5 = cbl(cbl(cbl(y, 2048, 512, 1), 512, 1024, 3), 1024, 512, 1)

    scales = b.const("scales", np.array([1, 1, 2, 2], np.float32))

    def up(y):
        return b.op("Resize", [y, "", scales], mode="nearest",
                    coordinate_transformation_mode="asymmetric", nearest_mode="floor")  # fmt: skip

    # PANet top-down
    n4 = five(b.op("Concat", [cbl(p4, 512, 256, 1), up(cbl(n5, 512, 256, 1))], axis=1), 512, 256)
    n3 = five(b.op("Concat", [cbl(p3, 256, 128, 1), up(cbl(n4, 256, 128, 1))], axis=1), 256, 128)
    # bottom-up and heads
    head3 = b.conv(cbl(n3, 128, 256, 3), 256, 255, 1, bias=True)
    m4 = five(b.op("Concat", [cbl(n3, 128, 256, 3, 2), n4], axis=1), 512, 256)
    head4 = b.conv(cbl(m4, 256, 512, 3), 512, 255, 1, bias=True)
    m5 = five(b.op("Concat", [cbl(m4, 256, 512, 3, 2), n5], axis=1), 1024, 512)
    head5 = b.conv(cbl(m5, 512, 1024, 3), 1024, 255, 1, bias=True)
    return b.model(x, [1, 3, 416, 416], [(head3, [1, 255, 52, 52]), (head4, [1, 255, 26, 26]),
                                         (head5, [1, 255, 13, 13])])  # fmt: skip


MODELS = {
    "vgg16": vgg16,
    "mobilenet_v1": mobilenet_v1,
    "efficientnet_b0": efficientnet_b0,
    "yolov4": yolov4,
}


def build(name: str) -> onnx.ModelProto:
    """The zoo model `name`, checked by onnx."""
    if name not in MODELS:
        raise AutoconfigError(f"unknown zoo model {name!r}; known: {', '.join(MODELS)}")
    model = MODELS[name]()
    onnx.checker.check_model(model, full_check=True)
    return model


def write(name: str, out: Path) -> None:
    """Write the zoo model `name` to `out` atomically (the path checked before building)."""
    check_output(out)
    write_atomically(out, build(name).SerializeToString())
