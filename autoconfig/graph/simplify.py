"""Graph simplifications applied at import.

- `Constant` and `Identity` nodes disappear (their values become constants/aliases);
- constant folding: a node whose inputs are all constant is evaluated by the
  reference interpreter and replaced by its results (e.g. shape arithmetic);
- BatchNormalization after a Conv that nothing else reads is folded into the Conv:
  W' = W·γ/√(σ²+ε) per output channel, b' = (b − μ)·γ/√(σ²+ε) + β.
"""

from __future__ import annotations

import numpy as np

from autoconfig.graph.interpret import evaluate
from autoconfig.graph.ir import Graph, Node, TensorType


def simplify(graph: Graph) -> Graph:
    """Fold constants and BatchNormalization; drop Identity; keep topological order."""
    nodes: list[Node] = []
    alias: dict[str, str] = {}
    for node in graph.nodes:
        node.inputs = [alias.get(i, i) for i in node.inputs]
        if node.op == "Identity" and node.outputs[0] not in graph.outputs:
            alias[node.outputs[0]] = node.inputs[0]
            continue
        if all(i == "" or graph.is_constant(i) for i in node.inputs):
            values = evaluate(node, [graph.constants[i] if i else None for i in node.inputs])
            for name, value in zip(node.outputs, values):
                graph.constants[name] = np.asarray(value)
                graph.types[name] = TensorType(tuple(np.shape(value)), np.asarray(value).dtype.name)
            continue
        nodes.append(node)
    graph.nodes = nodes
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
