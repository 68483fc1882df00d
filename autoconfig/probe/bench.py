"""Timing of the generated micro-benchmarks (kernels.microbench) on this host.

Each figure is the best of several timed calls, each call long enough (a target
duration) that the Python call overhead is negligible. Best, not median, as STREAM
reports: a figure here is what the machine can do, and interference from other work
on a shared machine only ever slows a call (medians moved between probes, and
single-point dips distorted the curve). All-thread figures start one
call per hardware thread at a barrier (ctypes releases the GIL) and divide the total
work by the wall time of the slowest.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from autoconfig.runtime import aligned_array
from kernels import microbench
from autoconfig.probe.host import this_host
from kernels.library import build_library
from kernels.target import Target

FMA_X, FMA_Y = 0.999, 0.001
"""acc = acc*x + y converges to y/(1-x) = 1: no overflow, no denormals, no shortcut."""


@dataclass(frozen=True)
class Settings:
    """How long and how finely the probe measures."""

    repetitions: int  # timed calls per figure (the best is kept)
    call_seconds: float  # target duration of one timed call
    points_per_octave: int  # bandwidth-curve resolution
    dram_factor: int  # largest working set = this × the largest cache
    sweeps: int  # passes over the bandwidth curve; each point keeps its best pass

    @classmethod
    def default(cls) -> Settings:
        return cls(repetitions=3, call_seconds=0.02, points_per_octave=3, dram_factor=8, sweeps=3)

    @classmethod
    def quick(cls) -> Settings:
        return cls(repetitions=2, call_seconds=0.006, points_per_octave=2, dram_factor=4, sweeps=2)


def _best_seconds(call: Callable[[], object], repetitions: int) -> float:
    call()  # warm-up: page faults, caches, frequency ramp
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def _parallel_seconds(calls: list[Callable[[], object]], repetitions: int) -> float:
    """Best wall time of running all `calls` at once, one per thread."""
    barrier = threading.Barrier(len(calls))

    def timed(call: Callable[[], object]) -> tuple[float, float]:
        barrier.wait()
        start = time.perf_counter()
        call()
        return start, time.perf_counter()

    with ThreadPoolExecutor(len(calls)) as pool:
        list(pool.map(lambda c: c(), calls))  # warm-up
        walls = []
        for _ in range(repetitions):
            spans = list(pool.map(timed, calls))
            walls.append(max(end for _, end in spans) - min(start for start, _ in spans))
    return min(walls)


def _calibrated(run: Callable[[int], object], seconds: float, start: int = 1) -> int:
    """The work count for `run(count)` to last about `seconds`."""
    count = start
    while True:
        began = time.perf_counter()
        run(count)
        elapsed = time.perf_counter() - began
        if elapsed >= seconds / 4:
            return max(1, math.ceil(count * seconds / elapsed))
        count *= 4


@dataclass(frozen=True)
class FmaMeasurement:
    vector_bits: int
    latency_ns: float  # per dependent vector FMA
    throughput_per_ns: float  # vector FMAs completed per ns, one thread
    throughput_all_per_ns: float  # the same, all threads together
    chains: int  # independent chains that gave the throughput


def chain_counts(target: Target) -> list[int]:
    """Chains to try for throughput: 8 (enough for a 4-cycle, 2-unit FMA) and up to
    the register file minus the two operands in steps of 4 (wider or slower units)."""
    top = target.vector_registers - 2
    return sorted({min(8, top), *range(12, top + 1, 4)})


def fma_steps(target: Target) -> int:
    """Progress steps `measure_fma` reports: latency, each chain count, all threads."""
    return len(chain_counts(target)) + 2


def measure_fma(
    target: Target, vector_bits: int, threads: int, settings: Settings, tick: Callable[[], None]
) -> FmaMeasurement:
    """Latency (one chain) and throughput (best chain count, 1 and all threads)."""
    lanes = vector_bits // 32
    xy = np.array([FMA_X, FMA_Y], np.float32)

    def rate(chains: int, threads: int = 1) -> float:  # vector FMAs per ns
        config = microbench.FmaChainConfig(lanes, chains, unroll=4)
        library = build_library(microbench.generate_fma_chain(config, target), this_host())
        kernel = library.kernel(config.symbol)
        outs = [np.zeros(1, np.float32) for _ in range(threads)]
        iters = _calibrated(lambda i: kernel(outs[0], xy, i), settings.call_seconds, 256)
        calls = [lambda o=o: kernel(o, xy, iters) for o in outs]
        seconds = _timed(calls, settings.repetitions)
        tick()
        return threads * iters * config.fmas_per_iteration / (seconds * 1e9)

    latency = 1 / rate(1)
    rates = {chains: rate(chains) for chains in chain_counts(target)}
    best = max(rates, key=rates.__getitem__)
    return FmaMeasurement(vector_bits, latency, rates[best], rate(best, threads), best)


def l1_loads_per_ns(target: Target, vector_bits: int, l1_bytes: int, settings: Settings) -> float:
    """Vector loads of `vector_bits` completed per ns by one thread streaming half of L1:
    load ports count instructions up to some width and bytes beyond it, which one
    width cannot show."""
    return _l1_gbps(target, vector_bits, l1_bytes, settings, broadcast=False) / (vector_bits // 8)


def l1_broadcasts_per_ns(target: Target, vector_bits: int, l1_bytes: int, settings: Settings) -> float:
    """Scalar loads broadcast into `vector_bits` vectors and FMA'd, per ns, by one thread
    streaming half of L1: what a register tile's A elements cost. Cores differ: some
    complete wide broadcasts more slowly than FMAs or narrow loads, others as fast as
    one narrow load."""
    return _l1_gbps(target, vector_bits, l1_bytes, settings, broadcast=True) / 4


def _l1_gbps(target: Target, vector_bits: int, l1_bytes: int, settings: Settings, broadcast: bool) -> float:
    """GB/s of one thread streaming half of L1 with the stream kernel (best of the sweeps)."""
    bench = BandwidthBench(target, settings, vector_bits // 32, broadcast)
    size = max(bench.block_bytes, l1_bytes // 2 // bench.block_bytes * bench.block_bytes)
    return max(bench.gbps(size, 1) for _ in range(settings.sweeps))


def _timed(calls: list[Callable[[], object]], repetitions: int) -> float:
    """Best seconds of one call, or of all calls at once on their own threads."""
    if len(calls) == 1:
        return _best_seconds(calls[0], repetitions)
    return _parallel_seconds(calls, repetitions)


def working_sets(smallest: int, largest: int, points_per_octave: int, block_bytes: int) -> list[int]:
    """Geometric working-set sizes in bytes, each a multiple of one kernel block."""
    octaves = math.log2(largest / smallest)
    count = int(round(octaves * points_per_octave)) + 1
    sizes = {
        max(block_bytes, round(smallest * 2 ** (i / points_per_octave) / block_bytes) * block_bytes)
        for i in range(count)
    }
    return sorted(sizes)


class BandwidthBench:
    """Load bandwidth over a working set, one thread or all threads (each its own copy)."""

    def __init__(self, target: Target, settings: Settings, lanes: int | None = None, broadcast: bool = False):
        self.settings = settings
        accumulators = 8 if target.vector_registers <= 16 else 16
        self.config = microbench.StreamConfig(lanes or target.f32_lanes, accumulators, broadcast)
        library = build_library(microbench.generate_stream(self.config, target), this_host())
        self.kernel = library.kernel(self.config.symbol)

    @property
    def block_bytes(self) -> int:
        return self.config.block * 4

    def gbps(self, working_set: int, threads: int) -> float:
        """GB/s loaded by `threads` threads each streaming its own `working_set` bytes."""
        n = working_set // 4
        buffers = [aligned_array(n, 1.0) for _ in range(threads)]
        outs = [np.zeros(1, np.float32) for _ in range(threads)]
        reps = _calibrated(
            lambda r: self.kernel(outs[0], buffers[0], n, r), self.settings.call_seconds
        )
        calls = [lambda b=b, o=o: self.kernel(o, b, n, reps) for b, o in zip(buffers, outs)]
        seconds = _timed(calls, self.settings.repetitions)
        return threads * working_set * reps / seconds / 1e9
