"""One view of the machine for every model: what the operator models and the fusion
planner read, built from a hardware profile once.

It holds the cache geometry (with the L2's and L3's effective capacities from the probe's
bandwidth knee), the load bandwidth of every level for one thread and for all, the
FMA figures of every vector width, the vector registers, and the runtime's own
costs (a kernel call, handing parts to the thread pool). `at(lanes, threads)` is the
same view for one vector width and one thread count: FMA figures of that width,
bandwidth per thread when that many stream at once.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from autoconfig.errors import AutoconfigError
from autoconfig.profile import Cache, Figure, FmaFigures, HardwareProfile

F32 = 4  # bytes per element

CALL_NS = 3_500.0
"""Cost of one kernel call from Python (argument checks, output allocation, the native
call), measured on a 1x1x1 matmul."""

PROGRAM_STEP_NS = 5.0
"""Cost of one more kernel in a program already called (the native loop in pool.c
reads its code and calls it), measured as the difference between a program of many
one-vector kernels and one of one. A layout transform around a layer, or between two
layers of a model, is such a step, not a call from Python."""

THREAD_DISPATCH_NS = 1_000.0
"""Handing parts to the native pool (autoconfig/pool.c) and joining, plus the workers'
first touches of the operands."""

LEVELS = ("L1", "L2", "L3", "DRAM")

LOAD_RATE_SAME = 0.85
"""Load rates within 15% count as the same instruction rate (the probe's figures vary
by a few percent from run to run; a width issued as two operations measures ~50%)."""


Result = TypeVar("Result")


def _effective_ways(cache: Cache, knee: Figure | None) -> int:
    """The ways of `cache` that one thread's data keeps, from the probe's bandwidth knee
    where one was measured (at least two). The nominal size overstates what a virtual
    machine gets of a shared L3, whose one-thread bandwidth may fall to DRAM's long
    before its reported size."""
    ways = int(cache.ways)
    if knee is None:
        return ways
    return max(2, min(ways, math.floor(ways * float(knee) / int(cache.size))))


def _per_view(method: Callable[..., Result]) -> Callable[..., Result]:
    """Compute a view's derived figure once per argument: the models ask a view for the
    same few figures ~10^5 times while one model is built (memoized, EfficientNet-B0's
    build went from 13.4 to 11.9 s, before the models' answers were cached)."""

    @functools.wraps(method)
    def memoized(self: Machine, *args: object) -> Result:
        key = (method.__name__, *args)
        if key not in self._memo:
            self._memo[key] = method(self, *args)
        return self._memo[key]

    return memoized


def _curve_at(curve: tuple[tuple[float, float], ...], size: float) -> float:
    """A bandwidth curve's figure (bytes/ns) at working set `size`: linear in the log of
    the size between the probe's points, its ends beyond them."""
    if len(curve) == 1:
        return curve[0][1]
    sizes = [s for s, _ in curve]
    i = min(max(1, bisect.bisect_left(sizes, size)), len(curve) - 1)
    (s0, b0), (s1, b1) = curve[i - 1], curve[i]
    t = min(1.0, max(0.0, math.log(size / s0) / math.log(s1 / s0)))
    return b0 + (b1 - b0) * t


@dataclass(frozen=True)
class Machine:
    """The profile's figures as the models use them, at one vector width and thread count."""

    name: str
    fma_by_lanes: dict[int, FmaFigures]
    widest_lanes: int  # of the probe's streaming loads
    registers: int
    scalable: bool  # vectors whose length is known at run time only (RVV)
    cores: int
    l1_ways: int
    l1_sets: int
    line: int
    l2_ways_effective: int
    l2_sets: int
    l3: tuple[int, int, int] | None  # (ways, sets, cores sharing)
    bandwidth_one: dict[str, float]  # GB/s = bytes/ns per level, one thread
    bandwidth_all: dict[str, float]  # all hardware threads together
    all_threads: int  # how many threads the all-thread figures ran
    call_ns: float = CALL_NS
    dispatch_ns: float = THREAD_DISPATCH_NS
    lanes: int = 0  # the vector width of this view (0: the widest)
    threads: int = 1  # threads running at once in this view
    constants_level: str | None = None  # where constant operands wait: None, the level holding them
    scratch_level: str | None = None  # where a kernel's scratch lines were left: None, warm where they fit
    curves: tuple[tuple[tuple[float, float], ...], ...] = ((), ())  # (working set B, GB/s): one thread, all
    inference_bytes: int = 0  # what one inference passes over: `Graph.inference_bytes` (0: a layer alone)
    fresh_input: bool = False  # the kernel is the first to read its input since the threads of the
    # kernel before it wrote it: its lines sit in their caches (`Builder.unread`)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_memo", {})  # _per_view's figures of this view

    @classmethod
    def of(cls, profile: HardwareProfile) -> Machine:
        """The view of `profile` (widest vectors, one thread)."""
        l1, l2, l3 = profile.cache(1), profile.cache(2), profile.cache(3)
        if l1 is None or l2 is None or profile.bandwidth is None:
            raise AutoconfigError(f"profile {profile.name} lacks L1/L2 geometry or bandwidth")
        single, many = profile.bandwidth.single_thread, profile.bandwidth.all_threads
        levels = [k for k in LEVELS if k in single.levels]
        widest = profile.widest_fma().lanes
        return cls(
            name=profile.name,
            fma_by_lanes={f.lanes: f for f in profile.fma},
            widest_lanes=widest,
            registers=int(profile.vector.registers),
            scalable=bool(profile.vector.scalable),
            cores=int(profile.cores),
            l1_ways=int(l1.ways),
            l1_sets=int(l1.sets),
            line=int(l1.line),
            l2_ways_effective=_effective_ways(l2, single.knees.get("L2")),
            l2_sets=int(l2.sets),
            l3=(_effective_ways(l3, single.knees.get("L3")), int(l3.sets), int(l3.shared_by)) if l3 else None,
            bandwidth_one={k: float(single.levels[k]) for k in levels},
            bandwidth_all={k: float(many.levels.get(k, single.levels[k])) for k in levels},
            all_threads=int(many.threads),
            curves=tuple(tuple((float(p.working_set), float(p.bandwidth)) for p in b.curve) for b in (single, many)),
            lanes=widest,
        )

    @_per_view
    def at(self, lanes: int, threads: int) -> Machine:
        """This view at another vector width and thread count."""
        if lanes not in self.fma_by_lanes:
            widths = ", ".join(str(w * 32) for w in self.fma_by_lanes)
            raise AutoconfigError(f"profile {self.name} has no {lanes * 32}-bit FMA figures ({widths})")
        return replace(self, lanes=lanes, threads=threads)

    @property
    def fma(self) -> FmaFigures:
        return self.fma_by_lanes[self.lanes]

    @_per_view
    def fma_per_ns(self) -> float:
        """Vector FMAs per ns of one thread of this view, with `threads` running at once:
        their measured total shared out (two threads on two cores issue less than twice
        one core's rate where the all-core figure says so), so no prediction exceeds the
        profile's measured peak for that many threads."""
        return self.fma_total_per_ns(self.fma, self.threads) / self.threads

    def fma_total_per_ns(self, figures: FmaFigures, threads: int) -> float:
        """Vector FMAs per ns of `threads` threads together at one width: one core's
        figure for one thread, the all-thread figure for all of them, linear in between,
        never above `threads` single cores."""
        threads = max(1, min(threads, self.all_threads))
        one, every = float(figures.throughput), float(figures.throughput_all)
        extra = (threads - 1) / max(1, self.all_threads - 1)
        return min(threads * one, one + (every - one) * extra)

    def peak_gflops(self, threads: int) -> float:
        """The profile's measured f32 peak for `threads` threads, best over vector widths."""
        return max(self.fma_total_per_ns(f, threads) * f.lanes * 2 for f in self.fma_by_lanes.values())

    def elementwise_per_ns(self) -> float:
        """f32 element operations per ns on one core: a vector op per FMA slot."""
        return self.fma_per_ns() * self.lanes

    @property
    def bandwidth(self) -> dict[str, float]:
        """Each level's bandwidth per thread with `threads` streaming at once: the probe's
        totals interpolated between one and all hardware threads, divided among them (a
        shared level gives each less; the total was once used per thread, which halved
        the DRAM time of 2-thread plans)."""
        return self._bandwidth()

    @_per_view
    def _bandwidth(self) -> dict[str, float]:
        if self.threads == 1:
            return self.bandwidth_one
        return {k: self._per_thread(one, self.bandwidth_all[k]) for k, one in self.bandwidth_one.items()}

    def _per_thread(self, one: float, every: float) -> float:
        """A thread's bandwidth with `threads` streaming at once, from one thread's figure
        and all hardware threads' total: the total interpolated between, shared out."""
        extra = (self.threads - 1) / max(1, self.all_threads - 1)
        return (one + (every - one) * extra) / self.threads

    def constants_read_ns(self, size: float) -> float:
        """Reading `size` bytes of a layer's weights in a pass of their own: inside a model,
        at the probe's bandwidth for a working set of all an inference passes over (it reads
        every constant once, as the probe passes over its buffer; between an L3's plateau
        and DRAM, the curve's figure where the levels' are both wrong), each thread its
        share; a layer alone finds them where they fit."""
        if not self.inference_bytes or not all(self.curves):  # a profile without curves: its levels
            return self.traffic_ns(size)
        one, every = (_curve_at(curve, self.inference_bytes) for curve in self.curves)
        return size / self._per_thread(one, every)

    @_per_view
    def vector_loads_per_ns(self) -> float:
        """L1 loads of this view's width per ns: the probe's figure for the width where
        it measured one (load ports count instructions up to some width and bytes
        beyond it); else the widest streaming bandwidth counted in instructions (scaled
        by width instead, narrow loads looked more frequent than they are)."""
        return self._loads_per_ns(self.fma)

    @_per_view
    def load_op_bytes(self) -> int:
        """Bytes one L1 load operation moves: the widest measured width whose loads still
        issue as often as the narrowest's (a core may issue wide loads as two narrow
        operations each). Without load figures, the widest."""
        measured = sorted((f.lanes, float(f.loads)) for f in self.fma_by_lanes.values() if f.loads is not None)
        if not measured:
            return self.widest_lanes * F32
        narrowest_rate = measured[0][1]
        return max(lanes for lanes, rate in measured if rate >= LOAD_RATE_SAME * narrowest_rate) * F32

    @_per_view
    def broadcast_loads_per_ns(self) -> float:
        """Scalar broadcast loads (a register tile's A elements) per ns: the probe's rate
        of broadcasts into this view's width where it measured one (a core may complete
        wide broadcasts more slowly than narrow loads); else as many as the narrowest
        measured vector loads (one load slot each, no wider than any vector)."""
        if self.fma.broadcasts is not None:
            return float(self.fma.broadcasts)
        return self._loads_per_ns(min(self.fma_by_lanes.values(), key=lambda f: f.lanes))

    def _loads_per_ns(self, figures: FmaFigures) -> float:
        if figures.loads is not None:
            return float(figures.loads)
        return self.bandwidth_one["L1"] / (self.widest_lanes * F32)

    def in_model(self, passed: int, threads: int = 1) -> Machine:
        """This view for a layer inside a model whose inference passes over `passed` bytes
        (`Graph.inference_bytes`), built for `threads`: when they outgrow the L3, the rest
        of the inference has evicted a layer's weights by the time it runs again, so they
        come from DRAM; with several threads, so does the memory a kernel writes first (the
        arena reuses memory only once the cores' caches have cooled, `Builder.cooling`; at
        one thread it reuses it at once, warm). A layer called again and again
        (`in_model(0)`) finds everything where it fits."""
        evicted = "DRAM" if self.holding_level(passed, whole_problem=True) == "DRAM" else None
        return replace(self, constants_level=evicted, scratch_level=evicted if threads > 1 else None,
                       inference_bytes=passed)  # fmt: skip

    def first_touch_ns(self, size: float) -> float:
        """What writing `size` bytes of a kernel's scratch (its split planes, transformed
        tiles, copied windows) costs beyond the traffic priced where they fit: where its
        lines were left in DRAM (`in_model`), the cache reads each before writing it."""
        return size / self.bandwidth[self.scratch_level] if self.scratch_level else 0.0

    def constants_at(self, size: float) -> str:
        """The level a kernel reads `size` bytes of constant operands from."""
        return self.constants_level or self.holding_level(size, whole_problem=True)

    @_per_view
    def capacities(self, whole_problem: bool = False) -> list[tuple[str, int]]:
        """(level, bytes it holds for one thread): L1 less one way for everything else,
        the L2's effective ways, and a thread's share of a shared L3 — or all of it for
        data all threads hold together (`whole_problem`)."""
        out = [("L1", (self.l1_ways - 1) * self.l1_sets * self.line),
               ("L2", self.l2_ways_effective * self.l2_sets * self.line)]  # fmt: skip
        if self.l3 is not None:
            ways, sets, sharing = self.l3
            sharers = 1 if whole_problem else max(1, min(self.threads, sharing))
            out.append(("L3", ways * sets * self.line // sharers))
        return [(level, size) for level, size in out if level in self.bandwidth_one]

    def holding_level(self, size: float, whole_problem: bool = False) -> str:
        """The innermost level whose (effective) capacity holds `size` bytes."""
        return next((level for level, cap in self.capacities(whole_problem) if size <= cap), "DRAM")

    def traffic_ns(self, size: float, whole_problem: bool = True) -> float:
        """Moving `size` bytes once at the bandwidth of the level that holds them."""
        return size / self.bandwidth[self.holding_level(size, whole_problem)]
