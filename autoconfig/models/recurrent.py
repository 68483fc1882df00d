"""The recurrent step's model: a layer's steps (`kernels.recurrent`, one call each) priced
term by term from the profile, its register tile and threads chosen.

Terms (ns, the busiest thread's unit vectors, times the steps): the recurrent products'
register tiles (`models.cost.microkernel_ns`: FMA issue, latency, loads) over the hidden
state's length; the packed weights of the thread's units read once per block of batch
rows per step, from the level holding them (a layer's weights stay where they fit from
one step to the next); the cell's arithmetic as vector ops per unit vector; a step of
the program per step, with a dispatch to the threads where several split the units.
Compute and memory overlap as in every model (`models.cost.total_ns`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from autoconfig.machine import F32, PROGRAM_STEP_NS, Machine
from autoconfig.models.cost import Prediction, Term, best_of, microkernel_ns, total_ns
from kernels import epilogue as ep
from kernels.recurrent import STAGES, RecurrentConfig

CELL_OPS = {"LSTM": 14, "GRU": 10, "RNN": 3, "GRU.reset": 7, "GRU.update": 7}
"""Vector ops per unit vector of a step's arithmetic besides its activations: the loads
of the projections and states (peepholes, Rbh), the adds and multiplies of the cell's
equations, the stores."""

USES = {"LSTM": (0, 0, 0, 1, 2), "GRU": (0, 0, 1), "RNN": (0,), "GRU.reset": (0, 0), "GRU.update": (1,)}
"""Which activations (f, g, h) a step applies per unit vector, once each: an LSTM's
gates i, f, o, its candidate and its output; a GRU's z, r and candidate."""

ROWS = (1, 2, 3, 4)
UNITS = (1, 2, 3, 4)
"""The register tiles tried: batch rows x unit vectors (each with an accumulator per gate)."""


@dataclass(frozen=True)
class RecurrentShape:
    """`steps` steps of `stage` over `batch` rows of `hidden` units."""

    stage: str
    steps: int
    batch: int
    hidden: int

    @property
    def flops(self) -> int:
        return 2 * self.steps * self.batch * self.hidden * self.hidden * len(STAGES[self.stage])


@dataclass(frozen=True)
class RecurrentPlan:
    """A step's config, its unit vectors split across `threads`."""

    config: RecurrentConfig
    shape: RecurrentShape
    threads: int


def predict(plan: RecurrentPlan, machine: Machine) -> Prediction:
    """The plan's time as named terms (see the module docstring)."""
    c, s = plan.config, plan.shape
    m, gates = machine.at(c.lanes, plan.threads), len(c.gates)
    vectors = math.ceil(c.vectors / plan.threads)
    row_blocks = s.batch // c.rows + s.batch % c.rows
    tiles = row_blocks * (vectors // c.units + vectors % c.units)
    issue, latency, loads = microkernel_ns(c.rows * c.units * gates, c.units * gates, c.rows, m)
    weights = vectors * s.hidden * gates * c.lanes * F32
    level = m.holding_level(weights)
    ops = CELL_OPS[c.stage] + sum(ep.vector_ops((c.activations[i],)) for i in USES[c.stage])
    step = PROGRAM_STEP_NS + (m.dispatch_ns if plan.threads > 1 else 0.0)
    terms = [
        Term("fma", s.steps * tiles * s.hidden * issue,
             f"{c.rows}x{c.units}x{gates} accumulators of {c.lanes} lanes at {m.fma_per_ns():.2f} vector FMAs/ns"),
        Term("latency", s.steps * tiles * s.hidden * latency, "tiles with too few accumulators wait on FMA latency"),
        Term("loads", s.steps * tiles * s.hidden * loads, f"{c.units * gates} vector + {c.rows} broadcast loads "
                                                          "per k step"),  # fmt: skip
        Term("epilogue", s.steps * vectors * s.batch * ops / m.fma_per_ns(),
             f"the cell's arithmetic: {ops} vector ops per unit vector"),
        Term("memory weights", s.steps * row_blocks * weights / m.bandwidth[level],
             f"a thread's packed weights ({weights / 1e3:.0f} kB) from {level} per block of rows"),
        Term("call", m.call_ns + s.steps * step,
             f"{s.steps} calls, each a step of the program" + (" and a dispatch" if plan.threads > 1 else "")),
    ]
    parameters = (("tile", f"{c.rows} batch rows x {c.units} unit vectors x {gates} gates"),
                  ("threads", f"{plan.threads}: " + ("the units split" if plan.threads > 1 else "one")))
    return Prediction(plan, tuple(terms), total_ns(terms), parameters)


def choose(shape: RecurrentShape, machine: Machine, lanes: int, threads: int, activations: tuple[ep.EpilogueOp, ...],
           clip: float, peephole: bool, input_forget: bool) -> Prediction:  # fmt: skip
    """The fastest predicted tile and thread count (ties: fewer threads, then the larger
    tile) among those whose accumulators and weight vectors fit the registers."""
    gates, vectors = len(STAGES[shape.stage]), -(-shape.hidden // lanes)
    predictions = []
    for rows, units, count in itertools.product(ROWS, UNITS, sorted({1, min(threads, vectors)})):
        if rows > shape.batch or units > vectors or (rows + 1) * units * gates + 1 > machine.registers:
            continue
        config = RecurrentConfig(shape.stage, shape.batch, shape.hidden, lanes, activations, clip, peephole,
                                 input_forget, rows, units)  # fmt: skip
        predictions.append(predict(RecurrentPlan(config, shape, count), machine))
    return best_of(predictions, lambda p: (p.plan.threads, -p.config.rows * p.config.units))


def explain(best: Prediction, profile_name: str, target_name: str) -> str:
    """The report's lines for a recurrent layer: shape, choice, parameters, terms."""
    s = best.shape
    return "\n".join([f"{s.stage} steps: {s.steps} of {s.batch} rows x {s.hidden} units (gates {STAGES[s.stage]}) on "
                      f"{target_name} (profile {profile_name}, {best.plan.threads} thread(s))",
                      f"choice: predicted {best.total_ns / 1e3:.1f} µs = {best.gflops:.1f} GFLOP/s",
                      "parameters:", *best.parameter_lines(),
                      "terms (ns; total = softmax4(fma+latency+loads+epilogue, memory) + call):",
                      *best.term_lines()])  # fmt: skip
