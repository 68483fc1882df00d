"""The recurrent family's lowering: a Recurrence node (one direction of an LSTM, GRU or
RNN: `graph.recurrent`) becomes a `kernels.recurrent` step called once per step, in the
direction's order, its units split across the threads the model chose. Each step reads
the hidden state the step before wrote into its row of Y, and the cell state from the
previous call's scratch (two buffers in turn; the last step writes Y_c's); a GRU without
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
    """The steps of one direction, one call (a GRU's two) per step."""
    a, (p, r, h0, c0, peepholes, reset_bias) = node.attrs, node.inputs
    seq, batch, _ = b.graph.types[p].shape
    hidden, cell = a["hidden_size"], a["cell"]
    stages = ["GRU.reset", "GRU.update"] if cell == "GRU" and not a["linear_before_reset"] else [cell]
    best = [recurrent_model.choose(RecurrentShape(stage, seq, batch, hidden), b.machine, b.target.f32_lanes,
                                   b.threads, activation_ops(a), float(a["clip"]), bool(peepholes),
                                   bool(a["input_forget"])) for stage in stages]  # fmt: skip
    weights = np.asarray(b.graph.constants[r], np.float32)
    packed = [b.constant(rk.pack(_stage_rows(weights, choice.config), choice.config)) for choice in best]
    zeros = b.constant(np.zeros(batch * hidden, np.float32)) if not (h0 and (c0 or cell != "LSTM")) else None
    state = {"p": b.read(p), "h": b.write(node.outputs[0]), "h_first": b.read(h0) if h0 else zeros,
             "c_first": b.read(c0) if c0 else zeros, "peephole": b.read(peepholes) if peepholes else None,
             "reset_bias": b.read(reset_bias) if reset_bias else None, "rh": b.scratch(batch * hidden),
             "z": b.scratch(batch * hidden), "cells": [b.scratch(batch * hidden) for _ in range(2)],
             "c_last": b.write(node.outputs[1]) if node.outputs[1:] and node.outputs[1] else None}  # fmt: skip
    calls = [Call(choice.config.symbol, _parts(choice, refs | {"r": weights_ref}))
             for refs in _steps(state, seq, batch * hidden, len(rk.CELLS[cell]), bool(a["reverse"]))
             for choice, weights_ref in zip(best, packed, strict=True)]  # fmt: skip
    c = best[0].config
    summary = (f"{seq} steps of {batch}x{hidden}, {' then '.join(stages)}, tiles {c.rows}x{c.units}, "
               f"{best[0].plan.threads} thread(s)")
    return KernelGroup(node.name, ops_of([node]), "recurrent", calls,
                       [module for choice in best for module in b.modules(rk.generate, choice.config)],
                       sum(choice.total_ns for choice in best),
                       "\n".join(recurrent_model.explain(choice, b.profile.name, b.target.name) for choice in best),
                       summary, sum(choice.shape.flops for choice in best))  # fmt: skip


def _stage_rows(weights: np.ndarray, config: rk.RecurrentConfig) -> np.ndarray:
    """The rows of R ([gates x hidden, hidden], ONNX's order) of the stage's gates."""
    gates, h = rk.CELLS[config.cell], config.hidden
    return np.concatenate([weights[gates.index(g) * h:(gates.index(g) + 1) * h] for g in config.gates])


def _steps(state: dict, seq: int, size: int, gates: int, reverse: bool) -> list[dict[str, Ref]]:
    """Each step's buffers by name, in the direction's order: its projections and row of
    Y, the previous step's row (h0 first) and cell state (c0 first; two scratch
    buffers in turn, the last step's Y_c where it is asked for); `size` floats per state,
    `gates` times that per step's projections."""
    order = range(seq - 1, -1, -1) if reverse else range(seq)
    steps, previous = [], None
    for s, t in enumerate(order):
        last = s == seq - 1 and state["c_last"] is not None
        c = state["c_last"] if last else state["cells"][s % 2]
        steps.append({**state, "p": at(state["p"], t * size * gates),
                      "h": at(state["h"], t * size), "c": c,
                      "h_prev": state["h_first"] if previous is None else at(state["h"], previous * size),
                      "c_prev": state["c_first"] if previous is None else steps[-1]["c"]})
        previous = t
    return steps


def _parts(choice: Prediction, refs: dict[str, Ref]) -> tuple[Part, ...]:
    """One part per thread's range of unit vectors, its buffers in the signature's order."""
    config = choice.config
    buffers = tuple(refs[name] for name, _, _ in config.params())
    return tuple(Part(buffers, units) for units in split(config.vectors, choice.plan.threads))


LOWERINGS = {RECURRENCE: Lowering(_recurrence)}
"""The recurrent family: one direction's steps."""
