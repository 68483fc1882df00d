"""The cost framework every operator model shares: a prediction is a configuration's
time as named terms, each with its reason; how the terms add up (compute and memory
overlap, stalls and copies add); the micro-kernel, thread-share, output-pass and
epilogue terms; and the scoring of candidates by branch and bound (`Group`). `models.matmul` and
`models.conv` price their configurations with it."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from autoconfig.machine import F32, PROGRAM_STEP_NS, Machine
from kernels import epilogue as ep
from kernels.gemm import chain_steps
from kernels.target import Target


OVERLAP = 4.0
"""Exponent of the soft maximum of kernel and memory time, (k^p + m^p)^(1/p): a plain
max hid the kernel under memory entirely; p=4 adds 19% of the smaller term when the
two are equal."""


RESOLUTION = 0.02
"""Predictions closer than 2% are ties (the model is not finer than that): `best_of`
breaks them by the model's own preference."""


LATENCY_OVERLAP = 4.0
"""Exponent of the soft maximum of a k step's FMA issue time and the FMA latency: with
exactly latency×throughput accumulators the FMA units are not kept busy."""


@dataclass(frozen=True)
class Term:
    """One named part of a prediction, with the reason behind it."""

    name: str
    ns: float
    why: str


@dataclass(frozen=True)
class Prediction:
    """A configuration with its predicted time broken into named terms; the plan is a
    matmul's or a convolution's (both have .config and .shape with .flops)."""

    plan: Any  # a MatmulPlan or a ConvPlan: .config, .shape (with .flops), .threads
    terms: tuple[Term, ...]
    total_ns: float
    parameters: tuple[tuple[str, str], ...]  # (parameter, reason)

    @property
    def config(self) -> Any:
        return self.plan.config

    @property
    def shape(self) -> Any:
        return self.plan.shape

    @property
    def gflops(self) -> float:
        return self.shape.flops / self.total_ns

    def term(self, name: str) -> float:
        return next(t.ns for t in self.terms if t.name == name)

    def parameter_lines(self) -> list[str]:
        """Each parameter with its reason, one per line, indented."""
        return [f"  {name:<10} {why}" for name, why in self.parameters]

    def term_lines(self) -> list[str]:
        """Each term's time and reason, one per line, indented."""
        return [f"  {t.name:<12} {t.ns:>14,.0f}  {t.why}" for t in self.terms]

    def lines(self) -> list[str]:
        return self.parameter_lines() + self.term_lines()

    def report(self, what: str, target_name: str, profile_name: str, choice: str, formula: str) -> str:
        """A kernel's report: what it computes on which target and profile at how many
        threads, the choice with its predicted time and rate, the parameters, and the
        terms under the `formula` that sums them."""
        return "\n".join([f"{what} on {target_name} (profile {profile_name}, {self.plan.threads} thread(s))",
                          f"choice: {choice}predicted {self.total_ns / 1e3:.1f} µs = {self.gflops:.1f} GFLOP/s",
                          "parameters:", *self.parameter_lines(), formula, *self.term_lines()])  # fmt: skip


def compute_and_memory_ns(terms: Sequence[Term]) -> tuple[float, float]:
    """The compute terms' sum and the largest memory term: what overlaps in a kernel."""
    kernel = sum(t.ns for t in terms if t.name in KERNEL_TERMS)
    return kernel, max((t.ns for t in terms if t.name.startswith("memory")), default=0.0)


def total_ns(terms: list[Term]) -> float:
    """The time of a kernel's terms: the compute terms and the largest memory term
    overlap (their OVERLAP soft maximum); stalls, packing, transforms and calls add."""
    kernel, memory = compute_and_memory_ns(terms)
    rest = sum(t.ns for t in terms if t.name in SERIAL_TERMS)
    return (kernel**OVERLAP + memory**OVERLAP) ** (1 / OVERLAP) + rest


def epilogue_term(epilogue: ep.Epilogue, vectors: int, outputs: int, m: Machine, share: float) -> Term:
    """The epilogue's vector ops on each of the `vectors` output vectors, once, at the FMA
    issue rate (a vector op per FMA slot), and its operands read alongside: a channel
    operand stays in L1, a residual of the output's `outputs` values streams from
    where it lies."""
    residual_bytes = sum(outputs * F32 for op in epilogue if op.operand == "output")
    ops_ns = vectors * ep.vector_ops(epilogue) / m.fma_per_ns()
    read_ns = m.traffic_ns(residual_bytes) if residual_bytes else 0.0
    return Term("epilogue", (ops_ns + read_ns) * share,
                f"{ep.describe(epilogue)}: {ep.vector_ops(epilogue)} vector ops per output vector"
                + (f", {residual_bytes / 1e6:.2f} MB of residual read" if residual_bytes else ""))  # fmt: skip


STALL_TERM = "l1 misses"
"""Traffic that does not overlap the kernel: an evicted B micro-panel's reloads; a
blocked direct convolution's input read again per channel tile; an attention block's
score rows passed over beyond the L1."""


C_PASSES_TERM = "c passes"
"""C brought back for every K block after the first, from wherever C's column block
lies by then, and written back: priced as a stall, not as traffic overlapping the
FMAs (as overlapping traffic it changed no prediction)."""


KERNEL_TERMS = ("fma", "latency", "loads", "edges", "c tile", "epilogue", "prologue", "rescale")
SCALED_TERM = "weights scaled"
"""A transposed product's prologue: its weights copied, each row scaled, before it runs."""

CROSS_CORE_TERM = "other cores"
"""What a thread pays for lines other threads hold: reading what they wrote in an
earlier pass of the same kernel, and writing again what they read."""

CROSS_CORE_LEVEL = "DRAM"
"""Whose bandwidth prices `CROSS_CORE_TERM`: such a line moves between the cores' private
caches, and writing it again takes it back, at about memory's rate on the 2-vCPU hosts
measured (docs/calibration.md)."""

SHARED_LINE_NS = 50.0
"""What a cache line two threads store into at about the same time costs: it moves
between their cores for each store, 28-185 ns a line in the direct convolutions
measured (docs/calibration.md); a ping-pong's latency, not a bandwidth."""


def mid_line(count: int, stride: int, first: int, line: int) -> int:
    """How many of the element offsets first + i·stride (i < count) fall inside a line
    of `line` elements rather than at its start: where two threads' runs meet."""
    period = line // math.gcd(stride, line)
    aligned = [(first + i * stride) % line == 0 for i in range(min(period, count))]
    whole, rest = divmod(count, period)
    return count - whole * sum(aligned) - sum(aligned[:rest])


SCALE_PASS_TERM = "scale pass"
"""An excitation's pass scaling its tensor, after its gates (`models.excite`)."""

SERIAL_TERMS = ("packing", "transform", "transform in", "transform out", "reblock in", "reblock out", "im2col",
                "filters", "call", STALL_TERM, C_PASSES_TERM, SCALED_TERM, CROSS_CORE_TERM, SCALE_PASS_TERM)  # fmt: skip
"""Terms that do not overlap the kernel: a copy done before or after it (packing, a
layout transform, an excitation's scaling pass), a stall on its critical path (evicted B
panels, C brought back per K block, Winograd filters fetched from farther than priced,
lines from other cores), the call itself."""


ROWS_TOGETHER = 4
"""Rows a row-wise kernel (layer normalization, a softmax, alone or in an attention)
takes side by side: each row's sums, horizontal reductions, division and square root
are a chain of dependent steps that the other rows' overlap; more rows gave time back
where measured (docs/calibration.md)."""

SOFTMAX_VECTOR_OPS = 24
"""Vector instructions per score vector of the softmax's three passes: its load and max,
the exponent (a subtraction, range reduction and a degree-6 polynomial) with its store
and sum, and the scaling pass's load, multiply and store."""

SCALING_PASS_OPS = 3
"""The scaling pass's share of those: the fused attention kernel skips it where no
cleanup follows (it scales each output row by its sum's inverse instead)."""


OUTPUT_TRANSFERS = 2
"""Times an output's bytes cross from the level holding it on its first touch: a
write-allocating cache reads each line in for ownership and writes it back."""


def busiest_share(tiles: int, threads: int, size: int = 1, extent: int | None = None) -> float:
    """Fraction of the split tiles (rows or columns) the busiest thread computes: with
    tiles of `size` over an `extent` the last tile may not fill, its whole tiles' share
    of the extent (the first ranges are the longest, as `runtime.split` cuts them)."""
    parts = max(1, min(threads, tiles))
    extent = extent or tiles
    return min(math.ceil(tiles / parts) * size, extent) / extent


def call_term(parts: int, m: Machine) -> Term:
    """One kernel call, and with several parts their hand-off to the threads."""
    return Term("call", m.call_ns + (m.dispatch_ns if parts > 1 else 0.0),
                "kernel call" + (" + thread dispatch" if parts > 1 else ""))


def microkernel_ns(accumulators: int, loads: int, broadcasts: int, m: Machine,
                   overlapped: bool = False) -> tuple[float, float, float]:  # fmt: skip
    """Per step of one micro-kernel (one FMA into each of its independent accumulators,
    `loads` vector loads and `broadcasts` scalar broadcast loads): (FMA issue, extra
    wait on latency, extra wait on loads). `overlapped`: its chains short enough that
    other tiles' FMAs fill the latency (the caller prices what remains), so loads wait
    only beyond the issue."""
    issue = accumulators / m.fma_per_ns()
    waited = (issue**LATENCY_OVERLAP + float(m.fma.latency) ** LATENCY_OVERLAP) ** (1 / LATENCY_OVERLAP)
    busy = issue if overlapped else waited
    load_ns = loads / m.vector_loads_per_ns() + broadcasts / m.broadcast_loads_per_ns()
    return issue, busy - issue, max(0.0, load_ns - busy)


def chain_ns(outputs: float, k: int, kc: int, m: Machine, taps: int = 1, unroll: int = 1) -> tuple[float, int]:
    """(ns, chains per output): each output's sum over k steps, in K blocks of kc, is cut
    into register chains (`kernels.gemm.in_chains`), and at every chain the tile's
    running totals, which the chain's own sums displace from the registers, are stored
    and loaded back from L1."""
    steps = chain_steps(taps, unroll)
    full, rest = divmod(k, kc)
    chains = full * math.ceil(kc / steps) + math.ceil(rest / steps)
    return 2 * outputs * F32 * chains / m.bandwidth["L1"], chains


def output_passes(blocks: int, block: str, output_bytes: float, level: str, m: Machine) -> Term:
    """The output read back and written again (OUTPUT_TRANSFERS) for every `block`
    block after the first, from `level` (C_PASSES_TERM): a stall."""
    if blocks == 1:
        return Term(C_PASSES_TERM, 0.0, f"one {block} block: each output tile written once")
    moved = (blocks - 1) * OUTPUT_TRANSFERS * output_bytes
    ns = 0.0 if level == "L1" else moved / m.bandwidth[level]
    return Term(C_PASSES_TERM, ns, f"{blocks - 1} more {block} block(s) read and write the output back: "
                                   f"{moved / 1e6:.2f} MB from {level}")  # fmt: skip


def vector_widths(machine: Machine, target: Target) -> list[int]:
    """The lane counts the models try: those the profile measured that the target's
    registers hold (on RVV, multiples of vscale)."""
    return [lanes for lanes in machine.fma_by_lanes
            if lanes <= target.f32_lanes and (not target.scalable or lanes % target.vscale == 0)]  # fmt: skip


Plan = TypeVar("Plan")  # a matmul or a convolution plan: a config with lanes, and threads


@dataclass(frozen=True)
class Group(Generic[Plan]):
    """Plans not built yet, each of one of `kinds` (what a model keeps the best of), with
    a lower `bound` of their predicted times: `members()` builds them, or smaller groups
    of them with tighter bounds."""

    bound: float
    kinds: tuple[Hashable, ...]
    members: Callable[[], Sequence[Group[Plan] | Plan]]

    @classmethod
    def of(cls, plan: Plan, floor: float, kind: Hashable) -> Group[Plan]:
        """One plan built already, with its floor."""
        return cls(floor, (kind,), lambda: (plan,))


def every_plan(groups: Sequence[Group[Plan] | Plan]) -> list[Plan]:
    """The plans of `groups` and of the groups within them, all built."""
    return [plan for item in groups
            for plan in (every_plan(item.members()) if isinstance(item, Group) else [item])]  # fmt: skip


def promising_predictions(groups: Sequence[Group[Plan]], kind: Callable[[Plan], Hashable] | None,
                          score: Callable[[Plan], Prediction],
                          tighter: Callable[[Plan], float] | None = None) -> list[Prediction]:  # fmt: skip
    """`score` of the plans that can be the best of their `kind` (None: the fastest of
    all), by branch and bound: from the lowest bound up, a group whose bound cannot tie
    with the best so far of its kinds (`tie_bound`) is not opened, a plan (bounded by its
    group's) not scored, nor one whose `tighter` bound cannot tie, so the choice is the
    same as scoring them all, and plans are built only in groups that could hold the best."""
    predictions: list[Prediction] = []
    fastest: dict[Hashable, float] = {}
    queue: list[tuple[float, int, Group[Plan] | Plan]] = [(g.bound, i, g) for i, g in enumerate(groups)]
    heapq.heapify(queue)
    pushed = itertools.count(len(queue))
    while queue:
        low, _, item = heapq.heappop(queue)
        if isinstance(item, Group):
            if low <= max(tie_bound(fastest.get(k, math.inf)) for k in (item.kinds if kind else (None,))):
                for member in item.members():
                    heapq.heappush(queue, (member.bound if isinstance(member, Group) else low, next(pushed), member))
            continue
        mine = kind(item) if kind else None
        bound = tie_bound(fastest.get(mine, math.inf))
        if low > bound or tighter is not None and tighter(item) > bound:
            continue
        predictions.append(score(item))
        fastest[mine] = min(fastest.get(mine, math.inf), predictions[-1].total_ns)
    return predictions


def fma_floor_ns(multiply_adds: float, lanes: int, threads: int, machine: Machine) -> float:
    """`multiply_adds` as full vectors of `lanes` shared evenly by `threads` at their FMA
    issue rate: every plan's 'fma' term counts at least those, and its total is at
    least its compute terms."""
    return multiply_adds / lanes / machine.at(lanes, threads).fma_per_ns() / threads


def tie_bound(fastest_ns: float) -> float:
    """The slowest time that ties with `fastest_ns`: within RESOLUTION of it, or within
    one PROGRAM_STEP_NS, what the least kernel costs to run (the terms count work, not a
    kernel's fixed instructions)."""
    return max(fastest_ns * (1 + RESOLUTION), fastest_ns + PROGRAM_STEP_NS)


def ties(predictions: Sequence[Prediction]) -> list[Prediction]:
    """The predictions tied with the fastest, in the time they can differ in: the
    fastest's call (its 'call' term, paid by every plan) is left out, else it hid every
    difference on small shapes. So the ties depend on the fastest plan alone, and a
    bound taken with the call in (`tie_bound`) is never tighter."""
    fastest = min(predictions, key=lambda p: p.total_ns)
    call = sum(t.ns for t in fastest.terms if t.name == "call")
    bound = tie_bound(fastest.total_ns - call) + call
    return [p for p in predictions if p.total_ns <= bound]


def best_of(predictions: Sequence[Prediction], preference: Callable[[Prediction], tuple]) -> Prediction:
    """The one tie-break rule of every model: among the predictions tied with the fastest
    (`ties`), the first by the model's `preference`, then the fastest."""
    return min(ties(predictions), key=lambda p: (*preference(p), p.total_ns))
