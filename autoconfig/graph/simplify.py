"""Graph simplifications applied at import, after the fold pass (`graph.fold`).

- `Identity` nodes disappear (their outputs become aliases);
- BatchNormalization after a Conv that nothing else reads is folded into the Conv:
  W' = W·γ/√(σ²+ε) per output channel, b' = (b − μ)·γ/√(σ²+ε) + β;
- a linear or cubic Resize with constant scales, sizes and roi becomes one matrix
  product per resized axis (`_resize_as_products`): interpolation is separable, and
  each axis' weights are a constant out × in matrix.
"""

from __future__ import annotations

import numpy as np

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
    return [node]


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

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...]) -> str:
        out = self.value(op.lower(), shape)
        self.nodes.append(Node(out, op, inputs, [out], {}))
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
