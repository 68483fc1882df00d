"""Hypothesis strategies for random small ONNX graphs over the operators the build
supports: each step draws an operator and its attributes for the value at hand
(shapes tracked as the graph grows), so shapes, attribute mixes and fusion groups
nobody wrote down get built and compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
from hypothesis import strategies as st

from autoconfig.graph import zoo

OPSET = 21
"""The graphs' opset: pooling dilations for AveragePool came with 19."""

MAX_SIDE = 14
"""Largest image side drawn: small images keep a build's kernels quick to compile."""


class Drawn:
    """A graph under construction: its builder, the values made so far with their
    shapes, and the value at hand."""

    def __init__(self, draw, seed: int, shape: tuple[int, ...]):
        self.draw, self.b = draw, zoo.Builder("random_graph", seed)
        self.rng = np.random.default_rng(seed)
        self.shapes: dict[str, tuple[int, ...]] = {"input": shape}
        self.x = "input"

    @property
    def shape(self) -> tuple[int, ...]:
        return self.shapes[self.x]

    def put(self, value: str, shape: tuple[int, ...]) -> None:
        self.shapes[value] = tuple(int(d) for d in shape)
        self.x = value

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    def weights(self, shape: tuple[int, ...], scale: float = 1.0) -> str:
        return self.b.const("w", scale * self.rng.standard_normal(shape).astype(np.float32))


def conv(d: Drawn) -> None:
    """A convolution of drawn kernel, stride, dilation, asymmetric pads and groups."""
    n, c, h, w = d.shape
    k = d.pick([k for k in (1, 2, 3, 5) if k <= min(h, w)])
    dil = d.pick([1, 1, 2]) if (k - 1) * 2 + 1 <= min(h, w) else 1
    span = (k - 1) * dil + 1
    pads = [d.draw(st.integers(0, k - 1)) for _ in range(4)]
    stride = d.pick([1, 1, 2])
    cout = d.pick([1, 3, 4, 8, 12, 16, 17, 24])
    group = d.pick([g for g in (1, 2, 3, c) if c % g == 0 and cout % g == 0] if c > 1 else [1])
    if group == c and d.draw(st.booleans()):
        cout = c  # depthwise
    inputs = [d.x, d.weights((cout, c // group, k, k), 1 / np.sqrt(c // group * k * k))]
    if d.draw(st.booleans()):
        inputs.append(d.weights((cout,), 0.1))
    y = d.b.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], dilations=[dil, dil], pads=pads,
               group=group)  # fmt: skip
    d.put(y, (n, cout, (h + pads[0] + pads[2] - span) // stride + 1, (w + pads[1] + pads[3] - span) // stride + 1))


def unary(d: Drawn) -> None:
    """An activation, as exporters write them (Clip with either bound or both)."""
    kind = d.pick(["Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Softplus", "SiLU"])
    if kind == "Clip":
        low = d.b.const("lo", np.float32(-0.5)) if d.draw(st.booleans()) else ""
        high = d.b.const("hi", np.float32(0.7)) if d.draw(st.booleans()) else ""
        y = d.b.op("Clip", [d.x, low, high])
    elif kind == "SiLU":
        y = d.b.op("Mul", [d.x, d.b.op("Sigmoid", [d.x])])
    else:
        y = d.b.op(kind, [d.x], **({"alpha": 0.1} if kind == "LeakyRelu" else {}))
    d.put(y, d.shape)


def binary(d: Drawn) -> None:
    """Add/Sub/Mul/Div with a constant or a computed operand broadcast to the value (or
    the value broadcast to it), on either side; a divisor is kept away from zero."""
    shape = d.shape
    op = d.pick(["Add", "Sub", "Mul", "Div"])
    form = d.pick([tuple(shape), (1,), (shape[-1],), (1, shape[1], 1, 1)[-len(shape):] if len(shape) == 4 else (1,),
                   tuple(1 if i % 2 else s for i, s in enumerate(shape))])  # fmt: skip
    earlier = [v for v, s in d.shapes.items() if s == tuple(shape) and v != d.x]
    if d.draw(st.booleans()) or (op == "Div"):
        magnitude = np.abs(d.rng.standard_normal(form)).astype(np.float32) + 0.5
        other = d.b.const("k", magnitude * np.where(d.rng.random(form) < 0.5, -1, 1).astype(np.float32))
    elif earlier and d.draw(st.booleans()):
        other = d.pick(earlier)  # a second reader of an earlier value
    else:
        other = d.b.op("Sigmoid", [d.x]) if form == tuple(shape) else _reduced_to(d, form)
    inputs = [d.x, other] if op == "Div" or d.draw(st.booleans()) else [other, d.x]
    d.put(d.b.op(op, inputs), np.broadcast_shapes(shape, d.shapes.get(other, form)))


def _reduced_to(d: Drawn, form: tuple[int, ...]) -> str:
    """A computed tensor of `form` (ones where the value has a size): a mean of it."""
    shape = d.shape
    padded = (1,) * (len(shape) - len(form)) + tuple(form)
    axes = [i for i, (s, f) in enumerate(zip(shape, padded)) if f == 1 and s != 1]
    mean = _mean(d, axes) if axes else d.x
    y = d.b.op("Reshape", [mean, d.b.const("shape", np.array(form, np.int64))])
    d.shapes[y] = tuple(form)
    return y


def pool(d: Drawn) -> None:
    """Max or average pooling, maybe after a Pad (constant 0, edge or reflect), with
    drawn kernel, strides, pads and dilations; ceil mode where onnx and onnxruntime
    agree on the output size."""
    n, c, h, w = d.shape
    if d.draw(st.booleans()):
        extra = [d.draw(st.integers(0, 2)) for _ in range(4)]
        mode = d.pick(["constant", "edge", "reflect"] if min(h, w) > 2 else ["constant", "edge"])
        pads = np.array([0, 0, extra[0], extra[1], 0, 0, extra[2], extra[3]], np.int64)
        d.put(d.b.op("Pad", [d.x, d.b.const("pads", pads)], mode=mode), (n, c, h + extra[0] + extra[2],
                                                                          w + extra[1] + extra[3]))  # fmt: skip
        h, w = d.shape[2:]
    kind = d.pick(["MaxPool", "AveragePool"])
    k = d.pick([kk for kk in (1, 2, 3) if kk <= min(h, w)])
    dil = d.pick([1, 2]) if 2 * (k - 1) + 1 <= min(h, w) else 1
    stride, pad = d.pick([1, 2]), d.draw(st.integers(0, k - 1))  # onnxruntime: pads below the kernel
    attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "pads": [pad] * 4, "dilations": [dil, dil]}
    if kind == "AveragePool":
        attrs["count_include_pad"] = int(d.draw(st.booleans()))
    span = (k - 1) * dil + 1
    size = [(s + 2 * pad - span) // stride + 1 for s in (h, w)]
    d.put(d.b.op(kind, [d.x], **attrs), (n, c, *size))


def movement(d: Drawn) -> None:
    """Transpose, Slice, Split (one part kept), a nearest, linear or cubic Resize, or a
    Concat of the value with a function of it along any axis."""
    shape = d.shape
    kind = d.pick(["transpose", "slice", "split", "resize", "concat"])
    if kind == "transpose":
        perm = d.draw(st.permutations(range(len(shape))))
        d.put(d.b.op("Transpose", [d.x], perm=list(perm)), tuple(shape[p] for p in perm))
    elif kind == "slice" or kind == "split" and max(shape) < 2:
        axis = d.pick([i for i, s in enumerate(shape) if s > 0])
        start = d.draw(st.integers(0, shape[axis] - 1))
        step = d.pick([1, 2])
        y = d.b.op("Slice", [d.x, *(d.b.const(n, np.array([v], np.int64)) for n, v in
                                    (("starts", start), ("ends", shape[axis]), ("axes", axis), ("steps", step)))])  # fmt: skip
        d.put(y, tuple(len(range(start, s, step)) if i == axis else s for i, s in enumerate(shape)))
    elif kind == "split":
        axis = d.pick([i for i, s in enumerate(shape) if s > 1])
        first = d.draw(st.integers(1, shape[axis] - 1))
        parts = [d.b.fresh("split"), d.b.fresh("split")]
        sizes = d.b.const("sizes", np.array([first, shape[axis] - first], np.int64))
        d.b.nodes.append(onnx.helper.make_node("Split", [d.x, sizes], parts, axis=axis, name=d.b.fresh("Split")))
        keep = d.draw(st.integers(0, 1))
        d.put(parts[keep], tuple(([first, shape[axis] - first][keep] if i == axis else s) for i, s in enumerate(shape)))
    elif kind == "resize" and len(shape) == 4 and max(shape[2:]) <= MAX_SIDE // 2:
        scale = float(d.pick([2.0, 1.5] + ([0.5] if min(shape[2:]) >= 2 else [])))
        mode = d.pick(["nearest", "linear", "cubic"])
        y = d.b.op("Resize", [d.x, "", d.b.const("scales", np.array([1, 1, scale, scale], np.float32))],
                   mode=mode, coordinate_transformation_mode=d.pick(["asymmetric", "half_pixel", "align_corners"]),
                   **({"nearest_mode": d.pick(["floor", "round_prefer_floor", "ceil"])} if mode == "nearest" else
                      {"antialias": int(d.draw(st.booleans()))} if scale < 1 else {}))  # fmt: skip
        d.put(y, (*shape[:2], int(shape[2] * scale), int(shape[3] * scale)))
    else:
        axis = d.draw(st.integers(0, len(shape) - 1))
        other = d.b.op("Tanh", [d.x])
        d.put(d.b.op("Concat", [d.x, other] if d.draw(st.booleans()) else [other, d.x], axis=axis),
              tuple(2 * s if i == axis else s for i, s in enumerate(shape)))


def product(d: Drawn) -> None:
    """MatMul by a constant matrix (any batch of rows), by the value's own transpose
    (a computed right operand), or Flatten then Gemm."""
    shape = d.shape
    kind = d.pick(["constant", "self", "gemm"])
    if kind == "constant":
        n = d.pick([1, 5, 8, 16, 19])
        d.put(d.b.op("MatMul", [d.x, d.weights((shape[-1], n), 1 / np.sqrt(shape[-1]))]), (*shape[:-1], n))
    elif kind == "self" and len(shape) >= 2:
        perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        y = d.b.op("MatMul", [d.x, d.b.op("Transpose", [d.x], perm=perm)])
        d.put(y, (*shape[:-1], shape[-2]))
    else:
        flat = d.b.op("Flatten", [d.x], axis=1)
        k, n = int(np.prod(shape[1:])), d.pick([3, 10, 16])
        y = d.b.op("Gemm", [flat, d.weights((n, k), 1 / np.sqrt(k)), d.weights((n,), 0.1)], transB=1)
        d.put(y, (shape[0], n))


def reduction(d: Drawn) -> None:
    """Softmax on a drawn axis, or a mean over drawn axes (kept)."""
    shape = d.shape
    if d.draw(st.booleans()):
        d.put(d.b.op("Softmax", [d.x], axis=d.draw(st.integers(-len(shape), len(shape) - 1))), shape)
        return
    axes = sorted(d.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    d.put(_mean(d, axes), tuple(1 if i in axes else s for i, s in enumerate(shape)))


def _mean(d: Drawn, axes: list[int]) -> str:
    """ReduceMean of the value over `axes`, kept (opset 18 on: axes as an input)."""
    return d.b.op("ReduceMean", [d.x, d.b.const("axes", np.array(axes, np.int64))], keepdims=1)


STEPS = {"conv": conv, "unary": unary, "binary": binary, "pool": pool, "movement": movement, "product": product,
         "reduction": reduction}  # fmt: skip
IMAGE_ONLY = ("conv", "pool")


@st.composite
def graphs(draw) -> onnx.ModelProto:
    """A random graph of 1-5 steps on a 1×C×H×W input (C a multiple of the vector width
    or not), its last value the output, and a second output sometimes."""
    shape = (1, draw(st.sampled_from([1, 3, 8, 16, 5, 12])), draw(st.integers(2, MAX_SIDE)),
             draw(st.integers(2, MAX_SIDE)))  # fmt: skip
    d = Drawn(draw, draw(st.integers(0, 2**16)), shape)
    extra = None
    for _ in range(draw(st.integers(1, 5))):
        options = [name for name in STEPS if len(d.shape) == 4 or name not in IMAGE_ONLY]
        if len(d.shape) == 4 and min(d.shape[2:]) < 2:
            options = [name for name in options if name not in IMAGE_ONLY]
        STEPS[d.pick(options)](d)
        if extra is None and d.x != "input" and draw(st.integers(0, 5)) == 0:
            extra = d.x
    outputs = [d.x] + ([extra] if extra not in (None, d.x) else [])
    model = d.b.model("input", list(shape), [(o, None) for o in outputs])
    model.opset_import[0].version = OPSET
    return model
