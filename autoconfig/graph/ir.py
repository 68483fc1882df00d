"""A small typed graph IR: tensors with static shapes and dtypes, ops with attributes.

Nodes are kept in topological order; constants (weights, folded values) live in
`Graph.constants`. Every value has a `TensorType`; nothing is dynamic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str  # numpy dtype name: float32, int64, ...

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def bytes(self) -> int:
        return self.elements * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    name: str
    op: str
    inputs: list[str]  # "" marks an omitted optional input
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    nodes: list[Node]
    types: dict[str, TensorType]  # every value's type
    constants: dict[str, np.ndarray]
    inputs: list[str]
    outputs: list[str]
    name: str = "graph"
    converted: dict[str, str] = field(default_factory=dict)  # a float32 value -> the int64 input it converts
    ids_below: dict[str, int] = field(default_factory=dict)  # an int64 input of ids -> the rows of its tables (fewest)
    delivered: dict[str, str] = field(default_factory=dict)  # an output held as float32 -> its ONNX type (int64, bool)

    def producers(self) -> dict[str, Node]:
        """Value name -> the node producing it."""
        return {out: n for n in self.nodes for out in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> the nodes reading it, in graph order."""
        users: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    users.setdefault(i, []).append(n)
        return users

    def is_constant(self, value: str) -> bool:
        return value in self.constants

    def constant_bytes(self) -> int:
        """Bytes of all the constants: the weights an inference reads once each."""
        return sum(value.nbytes for value in self.constants.values())

    def inference_bytes(self) -> int:
        """Bytes one inference passes over: every constant, read once, and the most
        activation bytes live at once (what any arena for it holds). When they outgrow the
        L3, the rest of an inference has evicted a layer's weights and memory by the
        time it runs again."""
        last = {v: i for i, n in enumerate(self.nodes) for v in n.inputs if v and v not in self.constants}
        live = peak = sum(self.types[v].bytes for v in self.inputs)
        for i, n in enumerate(self.nodes):
            live += sum(self.types[v].bytes for v in n.outputs if v)
            peak = max(peak, live)
            live -= sum(self.types[v].bytes for v in {*n.inputs, *n.outputs}
                        if v and last.get(v, i) == i and v not in self.outputs and v not in self.constants)
        return self.constant_bytes() + peak
