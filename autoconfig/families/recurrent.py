"""The recurrent family's lowering: a Recurrence node (an LSTM, GRU or RNN layer:
`graph.recurrent`) becomes `kernels.recurrent` steps, as the recurrent model chose:
directions one after the other or side by side, a part per direction holding all its
units and running every step in one call, or the units split across threads and a
call per step (each reads the hidden state the step before wrote into its row of Y).
The cell state stays in place (Y_c's buffer, or scratch). A GRU without
linear_before_reset runs two kernels per step, z and r·h' for every unit first.
"""

from __future__ import annotations

import numpy as np

from autoconfig.builder import Builder, KernelGroup, Lowering, ops_of
from autoconfig.graph.ir import Node
from autoconfig.graph.recurrent import RECURRENCE, activation_ops
from autoconfig.lowering import at
from autoconfig.models import recurrent as recurrent_model
from autoconfig.models.cost import Prediction
from autoconfig.models.recurrent import RecurrentShape
from autoconfig.runtime import Call, Part, Ref, split
from kernels import recurrent as rk


def _recurrence(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    """The layer's steps, in the calls the model chose."""
    a, (p, r, h0, c0, peepholes, reset_bias) = node.attrs, node.inputs
    seq, batch, _ = b.graph.types[p].shape
    hidden, cell, dirs = a["hidden_size"], a["cell"], b.graph.types[r].shape[0]
    stages = ["GRU.reset", "GRU.update"] if cell == "GRU" and not a["linear_before_reset"] else [cell]
    best: list[Prediction] = []
    for stage in stages:  # a GRU's second stage runs as its first does
        threading = (best[0].plan.together, best[0].plan.splits) if best else None
        best.append(recurrent_model.choose(RecurrentShape(stage, seq, batch, hidden, dirs, len(stages)), b.machine,
                                           b.target.f32_lanes, b.threads, activation_ops(a),
                                           float(a["clip"]), bool(peepholes), bool(a["input_forget"]), threading))
    weights = np.asarray(b.graph.constants[r], np.float32)
    size = batch * hidden
    state = {"p": b.read(p), "y": b.write(node.outputs[0]), "h_first": b.read(h0) if h0 else None,
             "c_first": b.read(c0) if c0 else None, "peephole": b.read(peepholes) if peepholes else None,
             "reset_bias": b.read(reset_bias) if reset_bias else None}  # fmt: skip
    if cell == "LSTM":  # the cell state: Y_c's buffer, or scratch
        state["c"] = b.write(node.outputs[1]) if node.outputs[1:] and node.outputs[1] else b.scratch(dirs * size)
    if len(stages) > 1:  # the first stage's z and r·h' for the second
        state |= {"rh": b.scratch(dirs * size), "z": b.scratch(dirs * size)}
    if not (h0 and (c0 or cell != "LSTM")):
        state["zeros"] = b.constant(np.zeros(size, np.float32))
    packed = [b.constant(np.concatenate([rk.pack(_stage_rows(weights[d], choice.config), choice.config)
                                         for d in range(dirs)])) for choice in best]  # fmt: skip
    stage_calls = [_calls(choice, state | {"r": weights_ref}, a["direction"])
                   for choice, weights_ref in zip(best, packed, strict=True)]  # fmt: skip
    calls = [call for step in zip(*stage_calls, strict=True) for call in step]  # a GRU's two stages alternate
    plan, c = best[0].plan, best[0].config
    summary = (f"{seq} steps x {dirs} direction(s) of {batch}x{hidden}, {' then '.join(stages)}, tiles "
               f"{c.rows}x{c.units}, {plan.threads} thread(s): {plan.together} direction(s) at once, units in "
               f"{plan.splits} range(s), " + ("a call for all steps" if plan.looped else "a call per step"))
    return KernelGroup(node.name, ops_of([node]), "recurrent", calls,
                       [module for choice in best for module in b.modules(rk.generate, choice.config)],
                       sum(choice.total_ns for choice in best),
                       "\n".join(recurrent_model.explain(choice, b.profile.name, b.target.name) for choice in best),
                       summary, sum(choice.shape.flops for choice in best))  # fmt: skip


def _stage_rows(weights: np.ndarray, config: rk.RecurrentConfig) -> np.ndarray:
    """The rows of a direction's R ([gates x hidden, hidden], ONNX's order) of the
    stage's gates."""
    gates, h = rk.CELLS[config.cell], config.hidden
    return np.concatenate([weights[gates.index(g) * h:(gates.index(g) + 1) * h] for g in config.gates])


def _calls(choice: Prediction, state: dict[str, Ref], direction: str) -> list[Call]:
    """The stage's calls: per group of directions run together, one call of all steps
    (looped) or one per step, each with a part per direction and range of units."""
    plan, config = choice.plan, choice.config
    dirs = config.directions
    groups = [list(range(d, min(d + plan.together, dirs))) for d in range(0, dirs, plan.together)]
    spans = [(0, config.steps)] if plan.looped else [(s, 1) for s in range(config.steps)]
    backward = [int(direction == "reverse" or d == 1) for d in range(dirs)]
    return [Call(config.symbol, tuple(Part(_buffers(config, state, d), (first, count, backward[d], *units))
                                      for d in group for units in split(config.vectors, plan.splits)))
            for group in groups for first, count in spans]  # fmt: skip


def _buffers(config: rk.RecurrentConfig, state: dict[str, Ref], d: int) -> tuple[Ref, ...]:
    """Direction d's buffers in the signature's order: each starts at its direction's
    (Y's and P's rows hold every direction side by side; the others, one after another)."""
    sizes = {name: size for name, _, size in config.params()}
    first = {name: d * size for name, size in sizes.items()}
    first |= {"y": d * config.batch * config.hidden, "p": d * len(rk.CELLS[config.cell]) * config.hidden}

    def ref(name: str) -> Ref:
        if state.get(name, "") is None:  # an initial state not given: zeros
            return state["zeros"]
        return at(state[name], first[name])

    return tuple(ref(name) for name, _, _ in config.params())


LOWERINGS = {RECURRENCE: Lowering(_recurrence)}
"""The recurrent family: a layer's steps."""
