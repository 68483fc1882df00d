"""The excitation kernel's model (`kernels.excite`: a squeeze-excitation's gates by a
1×1 convolution of one pixel, then its tensor scaled by them, in one kernel).

Its one choice is the gates computed together (`nv` vectors): enough independent sums
to cover the FMA latency (the profile's FMAs in flight), no more than the registers
hold, and few enough that every thread gets channel groups of its own. Its time, as
named terms: the gates' FMAs and what their dependent chains wait, their weights read
from where the model's constants lie (each inference passes over all of them), the
scaled tensor read and written once at the bandwidth of the level holding it, the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoconfig.machine import F32, Machine
from autoconfig.models.cost import (
    SCALE_PASS_TERM, Prediction, Term, busiest_share, call_term, epilogue_term, microkernel_ns, total_ns,
)  # fmt: skip
from autoconfig.profile import HardwareProfile
from autoconfig.runtime import split
from kernels import epilogue as ep
from kernels.excite import ExciteConfig
from kernels.nchwc import Layout
from kernels.sizes import ceil_div
from kernels.target import Target


@dataclass(frozen=True)
class ExciteShape:
    """`batch` images' `channels` gates from `depth` values each, scaling `pixels` per channel."""

    batch: int
    channels: int
    depth: int
    pixels: int


@dataclass(frozen=True)
class ExcitePlan:
    """A config and the threads its channel groups are divided among (each thread
    computing its channels' gates and scaling them: their gates would be computed on
    every thread if pixels were divided)."""

    config: ExciteConfig
    threads: int

    @property
    def shape(self) -> ExciteConfig:
        return self.config

    def ranges(self) -> list[tuple[int, int]]:
        """Each thread's (group_begin, group_end)."""
        return split(self.config.groups(), self.threads)


def choose(shape: ExciteShape, profile: HardwareProfile, target: Target, threads: int, epilogue: ep.Epilogue = (),
           layout: Layout = "nchw", model_bytes: int = 0) -> Prediction:  # fmt: skip
    """The plan of an excitation at up to `threads` on `target`'s widest vectors, inside a
    model passing over `model_bytes` bytes per inference (`Machine.in_model`)."""
    machine = Machine.of(profile).in_model(model_bytes)
    lanes = target.f32_lanes
    m = machine.at(lanes, 1)
    threads = max(1, min(threads, machine.cores))
    registers = (m.registers - 1) // 2  # a sum and a weight vector per gate vector, and the broadcast value
    nv = max(1, min(math.ceil(m.fma.in_flight), registers, ceil_div(ceil_div(shape.channels, lanes), threads)))
    config = ExciteConfig(shape.batch, shape.channels, shape.depth, shape.pixels, lanes, nv, epilogue, layout)
    return predict(ExcitePlan(config, min(threads, config.groups())), machine)


def predict(plan: ExcitePlan, machine: Machine) -> Prediction:
    """`plan`'s time as named terms (see the module docstring)."""
    c = plan.config
    m = machine.at(c.lanes, plan.threads)
    share = busiest_share(c.groups(), plan.threads, c.width, c.channels)  # of the channels
    steps = ceil_div(c.groups(), plan.threads) * c.batch * c.depth  # the busiest thread's k steps
    issue, waits, loads = microkernel_ns(c.nv, c.nv, 1, m)
    scaled = 2 * F32 * c.batch * c.channels * c.pixels * share
    weights = F32 * c.depth * c.channels * share
    terms = [
        Term("fma", steps * issue, f"{c.nv} gate vectors per k step at {m.fma_per_ns():.2f} vector FMAs/ns per thread"),
        Term("latency", steps * waits, f"{c.nv} independent sums against {m.fma.in_flight:.1f} FMAs in flight"),
        Term("loads", steps * loads, f"{c.nv} weight loads and a broadcast per k step beyond the FMA time"),
        epilogue_term(c.epilogue, c.batch * ceil_div(c.channels, c.lanes), c.batch * c.channels, m, share),
        Term("memory weights", m.constants_read_ns(weights),
             f"{weights / 1e3:.1f} kB of weights a thread, its channels', from where the model's constants lie"),
        Term(SCALE_PASS_TERM, max(m.traffic_ns(scaled), scaled / (2 * F32 * c.lanes) / m.fma_per_ns()),
             f"{scaled / 1e3:.1f} kB a thread read and written at the bandwidth of the level holding them, after "
             "the gates"),
        call_term(plan.threads, m),
    ]  # fmt: skip
    parameters = (("nv", f"{c.nv} vectors of {c.lanes} gates together: {m.fma.in_flight:.1f} FMAs in flight, "
                         f"{ceil_div(c.channels, c.lanes)} vectors over {plan.threads} thread(s)"),
                  ("threads", f"{plan.threads}: {c.groups()} groups of {c.width} channels"))  # fmt: skip
    return Prediction(plan, tuple(terms), total_ns(terms), parameters)
