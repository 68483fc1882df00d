"""Graph simplifications applied at import, after the fold pass (`graph.fold`).

- `Identity` nodes disappear (their outputs become aliases);
- BatchNormalization after a Conv that nothing else reads is folded into the Conv:
  W' = W·γ/√(σ²+ε) per output channel, b' = (b − μ)·γ/√(σ²+ε) + β;
- a linear or cubic Resize with constant scales, sizes and roi becomes one matrix
  product per resized axis (`_resize_as_products`): interpolation is separable, and
  each axis' weights are a constant out × in matrix;
- a 1-D convolution becomes a 2-D one over rows of one pixel (`_conv1d_as_2d`);
- InstanceNormalization becomes its definition (`_instance_norm_as_ops`): per image
  and channel, the mean and variance over the spatial axes (ReduceMean), then
  elementwise ops, which the fusion planner groups like any others.
"""

from __future__ import annotations

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.reference import resize_axis, resize_shape


def simplify(graph: Graph) -> Graph:
    """Fold BatchNormalization; drop Identity; keep topological order."""
    nodes: list[Node] = []
    alias: dict[str, str] = {}
    for node in graph.nodes:
        node.inputs = [alias.get(i, i) for i in node.inputs]
        if node.op == "Identity" and node.outputs[0] not in graph.outputs:
            alias[node.outputs[0]] = node.inputs[0]
            continue
        nodes.append(node)
    graph.nodes = [lowered for node in nodes for lowered in _lowered(graph, node)]
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    _fold_batchnorm(graph)
    _drop_unused_constants(graph)
    return graph


def _fold_batchnorm(graph: Graph) -> None:
    producers, consumers = graph.producers(), graph.consumers()
    kept = []
    for node in graph.nodes:
        conv = producers.get(node.inputs[0]) if node.op == "BatchNormalization" else None
        foldable = (
            conv is not None
            and conv.op == "Conv"
            and len(consumers.get(conv.outputs[0], [])) == 1
            and conv.outputs[0] not in graph.outputs
            and all(graph.is_constant(i) for i in node.inputs[1:5])
            and all(graph.is_constant(i) for i in conv.inputs[1:] if i)
            and len(node.outputs) == 1
        )
        if not foldable:
            kept.append(node)
            continue
        scale, bias, mean, var = (graph.constants[i] for i in node.inputs[1:5])
        factor = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
        weight = graph.constants[conv.inputs[1]]
        old_bias = graph.constants[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
        w_name, b_name = f"{conv.name}.folded_weight", f"{conv.name}.folded_bias"
        graph.constants[w_name] = (weight * factor.reshape(-1, 1, 1, 1)).astype(np.float32)
        graph.constants[b_name] = ((old_bias - mean) * factor + bias).astype(np.float32)
        for name in (w_name, b_name):
            graph.types[name] = TensorType(graph.constants[name].shape, "float32")
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [node.outputs[0]]
    graph.nodes = kept


def _drop_unused_constants(graph: Graph) -> None:
    used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
    for name in [c for c in graph.constants if c not in used]:
        del graph.constants[name]


def _lowered(graph: Graph, node: Node) -> list[Node]:
    """`node`, or the nodes computing it from operators the build generates."""
    interpolating = node.op == "Resize" and node.attrs.get("mode", "nearest") != "nearest"
    if interpolating and all(i == "" or graph.is_constant(i) for i in node.inputs[1:]):
        return _resize_as_products(graph, node)
    if node.op == "InstanceNormalization":
        return _instance_norm_as_ops(graph, node)
    if node.op == "Conv" and len(graph.types[node.inputs[0]].shape) == 3 and graph.is_constant(node.inputs[1]):
        return _conv1d_as_2d(graph, node)
    return [node]


def _conv1d_as_2d(graph: Graph, node: Node) -> list[Node]:
    """A 1-D convolution (N, C, W) as a 2-D one on (N, C, 1, W): a window of one row,
    the attributes' single values along the width; views of the same memory around it."""
    x, weight = node.inputs[:2]
    (n, c, width), out_shape = graph.types[x].shape, graph.types[node.outputs[0]].shape
    a = node.attrs
    attrs = {"group": a.get("group", 1), "kernel_shape": [1, graph.constants[weight].shape[2]],
             "strides": [1, *a.get("strides", [1])], "dilations": [1, *a.get("dilations", [1])]}  # fmt: skip
    if a.get("auto_pad", "NOTSET") != "NOTSET":
        attrs["auto_pad"] = a["auto_pad"]
    else:
        begin, end = a.get("pads", [0, 0])
        attrs["pads"] = [0, begin, 0, end]
    made = _Made(graph, node.name)
    rows = made.op("Reshape", [x, made.constant("shape", np.array([n, c, 1, width], np.int64))], (n, c, 1, width))
    kernel = made.constant("weight", graph.constants[weight][:, :, None, :])
    y = made.op("Conv", [rows, kernel, *node.inputs[2:]], (*out_shape[:2], 1, out_shape[2]), **attrs)
    made.nodes.append(Node(node.name, "Reshape", [y, made.constant("shape", np.array(out_shape, np.int64))],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


def _instance_norm_as_ops(graph: Graph, node: Node) -> list[Node]:
    """(x − mean) / √(variance + ε) · scale + bias, the statistics per image and channel
    over the spatial axes; scale and bias constants of one value per channel."""
    x, scale, bias = node.inputs
    shape = graph.types[x].shape
    if not (graph.is_constant(scale) and graph.is_constant(bias)):
        raise AutoconfigError(f"node {node.name!r} (InstanceNormalization): computed scale and bias are not generated")
    axes = tuple(range(2, len(shape)))
    stats, per_channel = (*shape[:2], *(1,) * len(axes)), (shape[1], *(1,) * len(axes))
    made = _Made(graph, node.name)
    mean = made.op("ReduceMean", [x], stats, axes=list(axes), keepdims=1)
    centred = made.op("Sub", [x, mean], shape)
    variance = made.op("ReduceMean", [made.op("Mul", [centred, centred], shape)], stats, axes=list(axes), keepdims=1)
    epsilon = made.constant("epsilon", np.array(node.attrs.get("epsilon", 1e-5), np.float32))
    deviation = made.op("Sqrt", [made.op("Add", [variance, epsilon], stats)], stats)
    normed = made.op("Div", [centred, deviation], shape)
    scaled = made.op("Mul", [normed, made.constant("scale", graph.constants[scale].reshape(per_channel))], shape)
    made.nodes.append(Node(node.name, "Add", [scaled, made.constant("bias", graph.constants[bias].reshape(per_channel))],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


def _resize_as_products(graph: Graph, node: Node) -> list[Node]:
    """A linear or cubic Resize as, per resized axis in the order onnx's reference takes
    them, Reshape → MatMul by that axis' weights → Reshape (and an Add of the values
    outputs outside a tf_crop_and_resize roi take); the last value is the node's output."""
    x = node.inputs[0]
    shape = list(graph.types[x].shape)
    given = [*node.inputs[1:], "", "", ""][:3]
    roi, scales, sizes = (np.asarray(graph.constants[i]).reshape(-1) if i else None for i in given)
    out_shape, factors = resize_shape(node.attrs, tuple(shape), scales, sizes)
    axes = [int(v) % len(shape) for v in node.attrs.get("axes") or range(len(shape))]
    bounds = {}
    if roi is not None and roi.size:
        bounds = {ax: (float(roi[i]), float(roi[i + len(axes)])) for i, ax in enumerate(axes)}
    made = _Made(graph, node.name)
    current = x
    for axis in axes:
        window = bounds.get(axis)
        if out_shape[axis] == shape[axis] and np.isclose(factors[axis], 1.0) and window in (None, (0.0, 1.0)):
            continue
        weights, fill = resize_axis(node.attrs, shape[axis], out_shape[axis], factors[axis], window)
        current = made.along_axis(current, shape, axis, weights, fill)
        shape[axis] = out_shape[axis]
    made.nodes.append(Node(node.name, "Identity" if current == x else "Reshape",
                           [current, *([] if current == x else [made.constant("shape", np.array(shape, np.int64))])],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


class _Made:
    """Nodes and values made in place of one node, named after it."""

    def __init__(self, graph: Graph, stem: str):
        self.graph, self.stem, self.nodes = graph, stem, []

    def value(self, what: str, shape: tuple[int, ...]) -> str:
        name = f"{self.stem}.{what}{len(self.nodes)}"
        self.graph.types[name] = TensorType(tuple(int(d) for d in shape), "float32")
        return name

    def constant(self, what: str, array: np.ndarray) -> str:
        name = f"{self.stem}.{what}{len(self.nodes)}_{len(self.graph.constants)}"
        self.graph.constants[name] = array
        self.graph.types[name] = TensorType(tuple(array.shape), array.dtype.name)
        return name

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = self.value(op.lower(), shape)
        self.nodes.append(Node(out, op, inputs, [out], attrs))
        return out

    def along_axis(self, x: str, shape: list[int], axis: int, weights: np.ndarray, fill: np.ndarray | None) -> str:
        """`x` (of `shape`) times `weights` (out × in) along `axis`, plus `fill` per output."""
        outer, size, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
        out = weights.shape[0]
        if inner == 1:  # rows of the axis' values: x · Wᵀ
            rows = self.op("Reshape", [x, self.constant("shape", np.array([outer, size], np.int64))], (outer, size))
            y = self.op("MatMul", [rows, self.constant("weights", weights.T.astype(np.float32))], (outer, out))
            added = (out,)
        else:  # W · (each outer slice as size × inner)
            slices = self.op("Reshape", [x, self.constant("shape", np.array([outer, size, inner], np.int64))],
                             (outer, size, inner))  # fmt: skip
            y = self.op("MatMul", [self.constant("weights", weights.astype(np.float32)), slices], (outer, out, inner))
            added = (out, 1)
        if fill is not None:
            y = self.op("Add", [y, self.constant("fill", fill.astype(np.float32).reshape(added))],
                        self.graph.types[y].shape)  # fmt: skip
        return y
