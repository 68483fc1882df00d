"""A numpy reference interpreter of the graph IR (ONNX semantics, opsets 11-28): each
node evaluated by its operator's reference implementation from the operator table."""

from __future__ import annotations

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import OPERATORS


def run(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate the graph on `feeds` (one array per graph input); return its outputs."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for name in graph.inputs:
        if name not in feeds:
            raise AutoconfigError(f"missing input {name!r}")
        env[name] = np.asarray(feeds[name], dtype=graph.types[name].dtype)
    for node in graph.nodes:
        for out, value in zip(node.outputs, evaluate(node, [env[i] if i else None for i in node.inputs])):
            env[out] = value
    return {name: env[name] for name in graph.outputs}


def evaluate(node: Node, args: list[np.ndarray | None]) -> list[np.ndarray]:
    """The outputs of one node given its input arrays (None for omitted inputs)."""
    info = OPERATORS.get(node.op)
    if info is None:
        raise AutoconfigError(f"node {node.name!r}: no reference for operator {node.op}")
    out = info.reference(node.attrs, *args)
    return list(out) if isinstance(out, (list, tuple)) else [out]
