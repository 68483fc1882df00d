"""The recurrent model: a layer's steps (`kernels.recurrent`) priced term by term from
the profile, its register tile and threading chosen: directions run one after the other
or side by side (a thread each), each direction's units whole or split across threads;
a part holding all of a direction's units runs every step in one call (`looped`),
split units take a call per step.

Terms (ns, the busiest thread's share, over all its steps): the recurrent products'
register tiles (`models.cost.microkernel_ns`: FMA issue, latency, loads) over the
hidden state's length; the packed weights of the thread's units read once per block of
batch rows per step, from the level holding them (a layer's weights stay where they fit
from one step to the next); the cell's arithmetic as vector ops per unit vector; the
calls, with a dispatch to the threads where several run. Compute and memory overlap as
in every model (`models.cost.total_ns`).
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
    """`steps` steps of `stage` in each of `directions` directions over `batch` rows of
    `hidden` units; `stages` kinds of step per step (a GRU's two, or one)."""

    stage: str
    steps: int
    batch: int
    hidden: int
    directions: int = 1
    stages: int = 1

    @property
    def flops(self) -> int:
        return 2 * self.directions * self.steps * self.batch * self.hidden * self.hidden * len(STAGES[self.stage])


@dataclass(frozen=True)
class RecurrentPlan:
    """A config run on `together` directions at once, each one's unit vectors split into
    `splits` ranges; `looped`: a call runs every step (one range per direction only)."""

    config: RecurrentConfig
    shape: RecurrentShape
    together: int = 1
    splits: int = 1
    looped: bool = False

    @property
    def threads(self) -> int:
        return self.together * self.splits

    @property
    def calls(self) -> int:
        """Calls of the kernel: per group of directions run together, one (looped) or one
        per step and stage."""
        groups = -(-self.shape.directions // self.together)
        return groups * (1 if self.looped else self.shape.steps * self.shape.stages)


def predict(plan: RecurrentPlan, machine: Machine) -> Prediction:
    """The plan's time as named terms (see the module docstring)."""
    c, s = plan.config, plan.shape
    m, gates = machine.at(c.lanes, plan.threads), len(c.gates)
    vectors = math.ceil(c.vectors / plan.splits)
    steps = s.steps * math.ceil(s.directions / plan.together)  # the busiest thread's
    row_blocks = s.batch // c.rows + s.batch % c.rows
    tiles = row_blocks * (vectors // c.units + vectors % c.units)
    issue, latency, loads = microkernel_ns(c.rows * c.units * gates, c.units * gates, c.rows, m)
    weights = vectors * s.hidden * gates * c.lanes * F32
    level = m.holding_level(weights * math.ceil(s.directions / plan.together))
    ops = CELL_OPS[c.stage] + sum(ep.vector_ops((c.activations[i],)) for i in USES[c.stage])
    call = PROGRAM_STEP_NS + (m.dispatch_ns if plan.threads > 1 else 0.0)
    terms = [
        Term("fma", steps * tiles * s.hidden * issue,
             f"{c.rows}x{c.units}x{gates} accumulators of {c.lanes} lanes at {m.fma_per_ns():.2f} vector FMAs/ns"),
        Term("latency", steps * tiles * s.hidden * latency, "tiles with too few accumulators wait on FMA latency"),
        Term("loads", steps * tiles * s.hidden * loads, f"{c.units * gates} vector + {c.rows} broadcast loads "
                                                        "per k step"),  # fmt: skip
        Term("epilogue", steps * vectors * s.batch * ops / m.fma_per_ns(),
             f"the cell's arithmetic: {ops} vector ops per unit vector"),
        Term("memory weights", steps * row_blocks * weights / m.bandwidth[level],
             f"a thread's packed weights ({weights / 1e3:.0f} kB a direction) from {level} per block of rows"),
        Term("call", m.call_ns + plan.calls * call,
             f"{plan.calls} call(s), each a step of the program" + (" and a dispatch" if plan.threads > 1 else "")),
    ]
    parameters = (("tile", f"{c.rows} batch rows x {c.units} unit vectors x {gates} gates"),
                  ("threads", f"{plan.threads}: {plan.together} direction(s) at once, the units in {plan.splits} "
                              f"range(s), " + ("every step in one call" if plan.looped else "a call per step")))
    return Prediction(plan, tuple(terms), total_ns(terms), parameters)


def choose(shape: RecurrentShape, machine: Machine, lanes: int, threads: int, activations: tuple[ep.EpilogueOp, ...],
           clip: float, peephole: bool, input_forget: bool,
           threading: tuple[int, int] | None = None) -> Prediction:  # fmt: skip
    """The fastest predicted tile and threading (ties: fewer threads, every step in one
    call, then the larger tile) among tiles whose accumulators and weight vectors fit
    the registers; `threading`: (together, splits) fixed. Looped calls need each
    direction's units whole, and one kind of step."""
    gates, vectors = len(STAGES[shape.stage]), -(-shape.hidden // lanes)
    predictions = []
    for together in sorted({1, min(threads, shape.directions)}):
        for splits, looped, rows, units in itertools.product(range(1, min(threads // together, vectors) + 1),
                                                             (False, True), ROWS, UNITS):  # fmt: skip
            if threading is not None and (together, splits) != threading:
                continue
            if looped and (splits > 1 or shape.stages > 1):
                continue
            if rows > shape.batch or units > vectors or (rows + 1) * units * gates + 1 > machine.registers:
                continue
            config = RecurrentConfig(shape.stage, shape.batch, shape.hidden, lanes, activations, clip, peephole,
                                     input_forget, rows, units, shape.steps, shape.directions)  # fmt: skip
            predictions.append(predict(RecurrentPlan(config, shape, together, splits, looped), machine))
    return best_of(predictions, lambda p: (p.plan.threads, not p.plan.looped, -p.config.rows * p.config.units))


def explain(best: Prediction, profile_name: str, target_name: str) -> str:
    """The report's lines for a recurrent layer: shape, choice, parameters, terms."""
    s = best.shape
    return best.report(f"{s.stage} steps: {s.steps} in each of {s.directions} direction(s), {s.batch} rows x "
                       f"{s.hidden} units (gates {STAGES[s.stage]})", target_name, profile_name, "",
                       "terms (ns; total = softmax4(fma+latency+loads+epilogue, memory) + call):")  # fmt: skip
