"""LSTM, GRU and RNN as what the build generates: the input projections of every step
and direction at once (one MatMul of the whole sequence by all the gates' weights, their
biases added), then one `Recurrence` node running the steps (`families.recurrent`: the
recurrent products and the cell's arithmetic in one kernel); Y_h is Y at each
direction's last step.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.families.elementwise import UNARY
from autoconfig.graph.ir import Graph, Node
from kernels import epilogue as ep
from kernels.recurrent import ACTIVATIONS, CELLS

RECURRENCE = "Recurrence"
"""The operator of a layer's steps, made here and never imported: (P [seq, batch,
directions x gates x hidden]: the projections with their biases, R [directions, gates x
hidden, hidden], h0, c0 [directions, batch, hidden], peepholes [directions, 3 x hidden],
a GRU's Rbh [directions, hidden]) -> (Y [seq, directions, batch, hidden], the last cell
states [directions, batch, hidden]); attributes: cell, hidden_size, direction, clip,
input_forget, linear_before_reset, and the activations with one alpha and beta each."""

DEFAULTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
"""Each cell's activations where the node names none (per direction)."""

PARAMETERS = {"LeakyRelu": ("alpha",), "ThresholdedRelu": ("alpha",), "Elu": ("alpha",),
              **{name: ("alpha", "beta") for name in ("HardSigmoid", "Affine", "ScaledTanh")}}  # fmt: skip
"""The activations that take alpha (and beta): each consumes the next of the node's
`activation_alpha` (`activation_beta`) in order, as onnxruntime reads them; the others
none. Their defaults are their operators' (Affine and ScaledTanh, operators no more,
must be given theirs)."""

FUNCTIONS = {"Affine": "affine", "ScaledTanh": "scaled_tanh"}
"""The activations that are no ONNX operator, as the epilogue ops they are."""

GENERATED = ("Sigmoid", "Tanh", "Relu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "Elu", "Softsign", "Softplus",
             *FUNCTIONS)  # fmt: skip
"""The activations generated: every one ONNX names."""


class Maker(Protocol):
    """What the rewrite makes nodes with (`graph.simplify`'s builder of new nodes)."""

    nodes: list[Node]

    def value(self, what: str, shape: tuple[int, ...]) -> str: ...
    def constant(self, what: str, array: np.ndarray) -> str: ...
    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], out: str = "", **attrs) -> str: ...
    def reshape(self, x: str, shape: tuple[int, ...], out: str = "") -> str: ...
    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int], shape: tuple[int, ...]) -> str: ...


def stepped(graph: Graph, node: Node, made: Maker) -> list[Node]:
    """`node` (LSTM, GRU or RNN) as its directions' projections (one product) and one
    Recurrence node, its outputs (Y, Y_h, and an LSTM's Y_c) taken from that node's."""
    functions = _activations(graph, node)
    a, x = node.attrs, node.inputs[0]
    seq, batch, width = graph.types[x].shape
    if a.get("layout", 0):  # batch first
        seq, batch = batch, seq
        x = made.op("Transpose", [x], (seq, batch, width), perm=[1, 0, 2])
    rows = made.reshape(x, (seq * batch, width))
    y, c = _recurrence(graph, node, made, rows, (seq, batch), functions)
    _outputs(node, made, y, c, (seq, batch, int(a["hidden_size"])))
    return made.nodes


def _activations(graph: Graph, node: Node) -> list[tuple[str, float | None, float | None]]:
    """Each activation of every direction with its alpha and beta (None: its default),
    after checking the node is one the build generates (one line naming it if not)."""
    a, inputs = node.attrs, node.inputs + [""] * 8

    def refuse(why: str) -> AutoconfigError:
        return AutoconfigError(f"node {node.name!r} ({node.op}): {why}")

    if not all(graph.is_constant(i) for i in inputs[1:4] if i):
        raise refuse("computed weights or biases are not generated")
    seq = graph.types[node.inputs[0]].shape[1 if a.get("layout", 0) else 0]
    lengths = inputs[4]
    if lengths and not (graph.is_constant(lengths) and (np.asarray(graph.constants[lengths]) == seq).all()):
        raise refuse("sequence_lens shorter than the sequence are not generated")
    if node.op == "LSTM" and inputs[7] and not graph.is_constant(inputs[7]):
        raise refuse("computed peephole weights are not generated")
    names = [s.decode() if isinstance(s, bytes) else s for s in a.get("activations", [])]
    directions = 2 if a.get("direction", "forward") == "bidirectional" else 1
    names = names or DEFAULTS[node.op] * directions
    generated = {n.lower(): n for n in GENERATED}
    if len(names) != ACTIVATIONS[node.op] * directions or any(n.lower() not in generated for n in names):
        raise refuse(f"activations {names} are not generated ({', '.join(GENERATED)}: "
                     f"{ACTIVATIONS[node.op]} per direction)")  # fmt: skip
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    functions = []
    for name in (generated[n.lower()] for n in names):
        takes = PARAMETERS.get(name, ())
        alpha = alphas.pop(0) if "alpha" in takes and alphas else None
        beta = betas.pop(0) if "beta" in takes and betas else None
        if name in FUNCTIONS and None in (alpha, beta):
            raise refuse(f"the {name} activation needs its alpha and beta given")
        functions.append((name, alpha, beta))
    return functions


def activation_ops(attrs: dict) -> tuple[ep.EpilogueOp, ...]:
    """A Recurrence node's activations as the epilogue ops the kernel applies."""
    return tuple(ep.EpilogueOp(FUNCTIONS[name], alpha=alpha, beta=beta) if name in FUNCTIONS else
                 UNARY[name].op({k: v for k, v in (("alpha", alpha), ("beta", beta)) if v is not None})
                 for name, alpha, beta in zip(attrs["activations"], attrs["activation_alpha"],
                                              attrs["activation_beta"], strict=True))  # fmt: skip


def _recurrence(graph: Graph, node: Node, made: Maker, rows: str, sizes: tuple[int, int],
                functions: list[tuple[str, float | None, float | None]]) -> tuple[str, str]:  # fmt: skip
    """The layer's Recurrence node, after the product of `rows` (the steps' inputs) by
    every direction's input weights: its Y [seq, directions, batch, hidden] and (LSTM,
    where Y_c is asked for) its last cell states [directions, batch, hidden] ("" if not)."""
    kind, a, inputs = node.op, node.attrs, node.inputs + [""] * 8
    (seq, batch), hidden, gates = sizes, int(a["hidden_size"]), len(CELLS[node.op])
    w, r = (np.asarray(graph.constants[i], np.float32) for i in inputs[1:3])
    dirs = w.shape[0]
    b = np.asarray(graph.constants[inputs[3]] if inputs[3] else np.zeros((dirs, 2 * gates * hidden)), np.float32)
    wb, rb = b[:, : gates * hidden], b[:, gates * hidden :]
    reset_after = kind == "GRU" and bool(a.get("linear_before_reset", 0))
    bias = wb + (np.concatenate([rb[:, : 2 * hidden], np.zeros((dirs, hidden), np.float32)], 1) if reset_after else rb)
    width = dirs * gates * hidden
    weights = made.constant("w", np.ascontiguousarray(w.reshape(width, -1).T))
    product = made.op("MatMul", [rows, weights], (seq * batch, width))
    projected = made.reshape(made.op("Add", [product, made.constant("b", bias.ravel())], (seq * batch, width)),
                             (seq, batch, width))  # fmt: skip
    h0, c0 = (_initial(graph, made, inputs[i], (dirs, batch, hidden), a.get("layout", 0)) for i in (5, 6))
    peepholes = ""
    if kind == "LSTM" and inputs[7] and graph.constants[inputs[7]].any():  # Pi, Po, Pf on the cell state
        peepholes = made.constant("p", np.asarray(graph.constants[inputs[7]], np.float32))
    reset_bias = made.constant("rbh", rb[:, 2 * hidden :]) if reset_after else ""
    asks_cell = kind == "LSTM" and len(node.outputs) > 2 and bool(node.outputs[2])
    outputs = [made.value("y", (seq, dirs, batch, hidden))]
    outputs += [made.value("c", (dirs, batch, hidden))] if asks_cell else []
    names, alphas, betas = (list(column) for column in zip(*functions))
    made.nodes.append(Node(outputs[0], RECURRENCE, [projected, made.constant("r", r), h0, c0, peepholes, reset_bias],
                           outputs, {"cell": kind, "hidden_size": hidden, "direction": a.get("direction", "forward"),
                                     "clip": float(a.get("clip", 0.0)), "input_forget": int(a.get("input_forget", 0)),
                                     "linear_before_reset": int(reset_after), "activations": names,
                                     "activation_alpha": alphas, "activation_beta": betas}))  # fmt: skip
    return outputs[0], outputs[1] if asks_cell else ""


def _initial(graph: Graph, made: Maker, value: str, shape: tuple[int, int, int], batch_first: int) -> str:
    """An initial state as [directions, batch, hidden] ("": zeros)."""
    if not value or (graph.is_constant(value) and not np.asarray(graph.constants[value]).any()):
        return ""
    return made.op("Transpose", [value], shape, perm=[1, 0, 2]) if batch_first else value


def _outputs(node: Node, made: Maker, y: str, c: str, sizes: tuple[int, int, int]) -> None:
    """Y [seq, directions, batch, hidden], Y_h and Y_c [directions, batch, hidden] (with
    layout 1: batch first) from the Recurrence node's Y and last cell states `c`: Y_h
    is Y at each direction's last step (the first for a reverse one)."""
    (seq, batch, hidden), batch_first = sizes, node.attrs.get("layout", 0)
    direction = node.attrs.get("direction", "forward")
    lasts = {"forward": [seq - 1], "reverse": [0], "bidirectional": [seq - 1, 0]}[direction]
    outputs = node.outputs + [""] * 3
    if outputs[0]:
        if batch_first:
            made.op("Transpose", [y], (batch, seq, len(lasts), hidden), out=outputs[0], perm=[2, 0, 1, 3])
        else:
            made.reshape(y, (seq, len(lasts), batch, hidden), out=outputs[0])
    if outputs[1]:
        steps = [made.reshape(made.slice(y, [t, d], [t + 1, d + 1], [0, 1], (1, 1, batch, hidden)), (1, batch, hidden))
                 for d, t in enumerate(lasts)]  # fmt: skip
        last = made.op("Concat", steps, (len(lasts), batch, hidden), axis=0) if len(steps) > 1 else steps[0]
        _state(made, last, outputs[1], (len(lasts), batch, hidden), batch_first)
    if outputs[2]:
        _state(made, c, outputs[2], (len(lasts), batch, hidden), batch_first)


def _state(made: Maker, value: str, out: str, shape: tuple[int, int, int], batch_first: int) -> None:
    """`out` as `value` of `shape` [directions, batch, hidden], or its transpose with
    layout 1."""
    dirs, batch, hidden = shape
    if batch_first:
        made.op("Transpose", [value], (batch, dirs, hidden), out=out, perm=[1, 0, 2])
    else:
        made.reshape(value, (dirs, batch, hidden), out=out)


def reference(attrs: dict, p: np.ndarray, r: np.ndarray, h0: np.ndarray | None = None,
              c0: np.ndarray | None = None, peepholes: np.ndarray | None = None,
              reset_bias: np.ndarray | None = None) -> list[np.ndarray]:  # fmt: skip
    """A Recurrence node's numpy meaning (ONNX's equations step by step, in float64):
    its hidden states [seq, directions, batch, hidden] and last cell states (zeros but
    for an LSTM)."""
    dirs, ops = r.shape[0], activation_ops(attrs)
    width, each = p.shape[2] // dirs, len(ops) // dirs
    states = [_direction_reference(attrs, ops[d * each:(d + 1) * each], p[:, :, d * width:(d + 1) * width], r[d],
                                   *(None if x is None else x[d] for x in (h0, c0, peepholes, reset_bias)),
                                   reverse=attrs["direction"] == "reverse" or d == 1)
              for d in range(dirs)]  # fmt: skip
    return [np.stack([ys for ys, _ in states], 1), np.stack([c for _, c in states])]


def _direction_reference(attrs: dict, ops: tuple[ep.EpilogueOp, ...], p: np.ndarray, r: np.ndarray,
                         h0: np.ndarray | None, c0: np.ndarray | None, peepholes: np.ndarray | None,
                         reset_bias: np.ndarray | None, reverse: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """One direction's hidden states [seq, batch, hidden] and last cell state."""
    cell, hidden, gates = attrs["cell"], attrs["hidden_size"], CELLS[attrs["cell"]]
    seq, batch, _ = p.shape
    p, r = p.astype(np.float64), r.astype(np.float64)
    h, c = (np.zeros((batch, hidden)) if s is None else s.astype(np.float64) for s in (h0, c0))
    pi, po, pf = np.split(np.zeros(3 * hidden) if peepholes is None else peepholes.astype(np.float64), 3)

    def act(which: int, y: np.ndarray, clipped: bool = True) -> np.ndarray:
        y = np.clip(y, -attrs["clip"], attrs["clip"]) if attrs["clip"] and clipped else y
        return ep.reference((ops[which],), y, [None])

    def part(gate: str) -> slice:
        return slice(gates.index(gate) * hidden, (gates.index(gate) + 1) * hidden)

    ys = np.zeros((seq, batch, hidden))
    for t in range(seq - 1, -1, -1) if reverse else range(seq):
        def pre(gate: str, x: np.ndarray = h, t: int = t) -> np.ndarray:
            return p[t][:, part(gate)] + x @ r[part(gate)].T

        if cell == "RNN":
            h = act(0, pre("i"))
        elif cell == "LSTM":
            i = act(0, pre("i") + pi * c)
            f = 1 - i if attrs["input_forget"] else act(0, pre("f") + pf * c)
            c = f * c + i * act(1, pre("c"))
            h = act(0, pre("o") + po * c) * act(2, c, clipped=False)  # the gates' inputs clipped, not c
        else:
            z, reset = act(0, pre("z")), act(0, pre("r"))
            if attrs["linear_before_reset"]:
                n = act(1, p[t][:, part("h")] + reset * (h @ r[part("h")].T + reset_bias))
            else:
                n = act(1, pre("h", reset * h))
            h = n + z * (h - n)
        ys[t] = h
    return ys.astype(np.float32), c.astype(np.float32)
