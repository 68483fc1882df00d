"""LSTM, GRU and RNN unrolled over their static sequence (short ones: `STEPS`) into the
operators the build generates: each gate's input projection for every step at once
(one MatMul of the whole sequence, its biases added), then per step the recurrent
products (MatMul of the previous hidden state, the gate's projection added as its
epilogue) and the gates' elementwise arithmetic, in ONNX's equations (default
activations, no clip).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ir import Graph, Node

GATES = {"LSTM": "iofc", "GRU": "zrh", "RNN": "i"}
"""Each operator's gates, in the order its weights stack them."""

STEPS = 32
"""Steps (sequence length × directions) unrolled per layer: each adds about 25 ops, and
the fusion planner's search grows faster than the ops (docs/coverage.md says how much);
longer layers are refused."""

ACTIVATIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
"""The activations generated: the defaults (per direction)."""


class Maker(Protocol):
    """What the unrolling makes nodes with (`graph.simplify`'s builder of new nodes)."""

    nodes: list[Node]

    def constant(self, what: str, array: np.ndarray) -> str: ...
    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], out: str = "", **attrs) -> str: ...
    def reshape(self, x: str, shape: tuple[int, ...], out: str = "") -> str: ...
    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int], shape: tuple[int, ...]) -> str: ...


def unrolled(graph: Graph, node: Node, made: Maker) -> list[Node]:
    """`node` (LSTM, GRU or RNN) as the steps of each direction, its outputs (Y, Y_h,
    and an LSTM's Y_c) assembled from the steps' hidden and cell states."""
    _check(graph, node)
    a, x = node.attrs, node.inputs[0]
    seq, batch, width = graph.types[x].shape
    if a.get("layout", 0):  # batch first
        seq, batch = batch, seq
        x = made.op("Transpose", [x], (seq, batch, width), perm=[1, 0, 2])
    rows = made.reshape(x, (seq * batch, width))
    directions = 2 if a.get("direction", "forward") == "bidirectional" else 1
    states = [_direction(graph, node, made, rows, (seq, batch), d) for d in range(directions)]
    _outputs(node, made, states, (seq, batch, int(a["hidden_size"])))
    return made.nodes


def _check(graph: Graph, node: Node) -> None:
    """One line for what the unrolling does not generate."""
    a, inputs = node.attrs, node.inputs + [""] * 8

    def refuse(why: str) -> None:
        raise AutoconfigError(f"node {node.name!r} ({node.op}): {why}")

    if not all(graph.is_constant(i) for i in inputs[1:4] if i):
        refuse("computed weights or biases are not generated")
    if "clip" in a or a.get("input_forget", 0):
        refuse("clip and input_forget are not generated")
    activations = a.get("activations")
    if activations and [s.decode() if isinstance(s, bytes) else s for s in activations] != \
            ACTIVATIONS[node.op] * (len(activations) // len(ACTIVATIONS[node.op])):  # fmt: skip
        refuse(f"activations {activations} are not generated (only the defaults)")
    seq = graph.types[node.inputs[0]].shape[1 if a.get("layout", 0) else 0]
    steps = seq * (2 if a.get("direction", "forward") == "bidirectional" else 1)
    if steps > STEPS:
        refuse(f"{steps} steps (sequence × directions) are more than the {STEPS} unrolled")
    lengths = inputs[4]
    if lengths and not (graph.is_constant(lengths) and (np.asarray(graph.constants[lengths]) == seq).all()):
        refuse("sequence_lens shorter than the sequence are not generated")
    if node.op == "LSTM" and inputs[7] and not graph.is_constant(inputs[7]):
        refuse("computed peephole weights are not generated")


def _direction(graph: Graph, node: Node, made: Maker, rows: str, sizes: tuple[int, int],
               d: int) -> tuple[list[str], str, str | None]:  # fmt: skip
    """Direction d's hidden states in time order, its last hidden and (LSTM) cell state."""
    kind, a, inputs = node.op, node.attrs, node.inputs + [""] * 8
    (seq, batch), hidden, gates = sizes, int(a["hidden_size"]), GATES[node.op]
    w, r = (np.asarray(graph.constants[i][d], np.float32) for i in inputs[1:3])
    b = np.asarray(graph.constants[inputs[3]][d] if inputs[3] else np.zeros(2 * len(gates) * hidden), np.float32)
    wb, rb = b[: len(gates) * hidden], b[len(gates) * hidden :]
    reset_after = kind == "GRU" and a.get("linear_before_reset", 0)
    projected = {}
    for g, gate in enumerate(gates):
        cut = slice(g * hidden, (g + 1) * hidden)
        bias = wb[cut] + (0 if reset_after and gate == "h" else rb[cut])
        product = made.op("MatMul", [rows, made.constant("w", np.ascontiguousarray(w[cut].T))], (seq * batch, hidden))
        projected[gate] = made.reshape(made.op("Add", [product, made.constant("b", bias)], (seq * batch, hidden)),
                                       (seq, batch, hidden))  # fmt: skip
    recurrent = {gate: made.constant("r", np.ascontiguousarray(r[g * hidden:(g + 1) * hidden].T))
                 for g, gate in enumerate(gates)}  # fmt: skip
    h, c = (_initial(graph, made, inputs[i], d, (batch, hidden), a.get("layout", 0)) for i in (5, 6))
    peepholes = {}
    if kind == "LSTM" and inputs[7] and graph.constants[inputs[7]][d].any():  # Pi, Po, Pf on the cell state
        peepholes = {g: made.constant("p", np.asarray(graph.constants[inputs[7]][d][k * hidden:(k + 1) * hidden],
                                                      np.float32)) for k, g in enumerate("iof")}  # fmt: skip
    step = Step(made, (batch, hidden), recurrent, rb[2 * hidden :] if reset_after else None, peepholes)
    order = range(seq - 1, -1, -1) if a.get("direction") == "reverse" or d == 1 else range(seq)
    states = {}
    for t in order:
        now = {gate: made.reshape(made.slice(p, [t], [t + 1], [0], (1, batch, hidden)), (batch, hidden))
               for gate, p in projected.items()}  # fmt: skip
        h, c = step.lstm(now, h, c) if kind == "LSTM" else (step.gru(now, h) if kind == "GRU" else step.rnn(now, h), c)
        states[t] = h
    return [states[t] for t in range(seq)], h, c


def _initial(graph: Graph, made: Maker, value: str, d: int, shape: tuple[int, int], axis: int) -> str | None:
    """Direction d's initial state, along `axis` of `value` (None: zeros, which the first
    step leaves out)."""
    if not value or (graph.is_constant(value) and not np.asarray(graph.constants[value]).any()):
        return None
    sliced = (shape[0], 1, shape[1]) if axis else (1, *shape)
    return made.reshape(made.slice(value, [d], [d + 1], [axis], sliced), shape)


class Step:
    """One step's nodes: the recurrent products of the previous hidden state `h` (none
    where it is zero), added to each gate's projection, and the gates' arithmetic."""

    def __init__(self, made: Maker, shape: tuple[int, int], recurrent: dict[str, str],
                 reset_bias: np.ndarray | None, peepholes: dict[str, str]):  # fmt: skip
        self.made, self.shape, self.recurrent, self.reset_bias = made, shape, recurrent, reset_bias
        self.peepholes = peepholes

    def op(self, op: str, *inputs: str) -> str:
        return self.made.op(op, list(inputs), self.shape)

    def gate(self, now: dict[str, str], gate: str, h: str | None, activation: str, c: str | None = None) -> str:
        """activation(projection + h·Rᵀ (+ P ⊙ c, an LSTM's peephole on the cell state c))."""
        pre = now[gate] if h is None else self.op("Add", now[gate], self.op("MatMul", h, self.recurrent[gate]))
        if c is not None and gate in self.peepholes:
            pre = self.op("Add", pre, self.op("Mul", c, self.peepholes[gate]))
        return self.op(activation, pre)

    def lstm(self, now: dict[str, str], h: str | None, c: str | None) -> tuple[str, str]:
        i, f = (self.gate(now, g, h, "Sigmoid", c) for g in "if")
        new = self.op("Mul", i, self.gate(now, "c", h, "Tanh"))
        c = new if c is None else self.op("Add", self.op("Mul", f, c), new)
        return self.op("Mul", self.gate(now, "o", h, "Sigmoid", c), self.op("Tanh", c)), c

    def gru(self, now: dict[str, str], h: str | None) -> str:
        z, r = (self.gate(now, g, h, "Sigmoid") for g in "zr")
        if self.reset_bias is not None:  # linear_before_reset: r·(h·Rhᵀ + Rbh)
            bias = self.made.constant("rb", self.reset_bias)
            reset = bias if h is None else self.op("Add", self.op("MatMul", h, self.recurrent["h"]), bias)
            candidate = self.op("Tanh", self.op("Add", now["h"], self.op("Mul", r, reset)))
        else:
            candidate = self.gate(now, "h", None if h is None else self.op("Mul", r, h), "Tanh")
        if h is None:  # (1 − z)·ĥ
            return self.op("Sub", candidate, self.op("Mul", z, candidate))
        return self.op("Add", candidate, self.op("Mul", z, self.op("Sub", h, candidate)))

    def rnn(self, now: dict[str, str], h: str | None) -> str:
        return self.gate(now, "i", h, "Tanh")


def _outputs(node: Node, made: Maker, states: list, sizes: tuple[int, int, int]) -> None:
    """Y [seq, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden] (with
    layout 1: batch first), from each direction's states."""
    (seq, batch, hidden), dirs, batch_first = sizes, len(states), node.attrs.get("layout", 0)
    outputs = node.outputs + [""] * 3
    if outputs[0]:
        per_direction = [made.op("Concat", [made.reshape(h, (1, 1, batch, hidden)) for h in hs], (seq, 1, batch, hidden),
                                 axis=0) for hs, _, _ in states]  # fmt: skip
        y = made.op("Concat", per_direction, (seq, dirs, batch, hidden), axis=1) if dirs > 1 else per_direction[0]
        if batch_first:
            made.op("Transpose", [y], (batch, seq, dirs, hidden), out=outputs[0], perm=[2, 0, 1, 3])
        else:
            made.reshape(y, (seq, dirs, batch, hidden), out=outputs[0])
    for at, out in ((1, outputs[1]), (2, outputs[2])):
        if out:
            last = [made.reshape(s[at], (1, batch, hidden)) for s in states]
            stacked = made.op("Concat", last, (dirs, batch, hidden), axis=0) if dirs > 1 else last[0]
            if batch_first:
                made.op("Transpose", [stacked], (batch, dirs, hidden), out=out, perm=[1, 0, 2])
            else:
                made.reshape(stacked, (dirs, batch, hidden), out=out)
