#!/usr/bin/env python3
"""Validate the matmul model against measurement, one thread.

For each shape, a grid of configurations spanning every algorithm (broadcast at two
widths and two unrolls; tiled and packed with a range of register tiles, block sizes
from the model's cache formulas) plus the model's own pick is built, checked against
numpy, and timed. Per shape: the model's regret (its pick's time over the grid's best, minus 1)
and the Spearman rank correlation between predicted and measured times.

Each configuration's time is the median over several fresh processes (--processes) of
its best sample in each. A process's buffers land on its own physical pages, and the
order of near-equal configurations follows them: on the Zen 5 VM, broadcast at 16
lanes on 1x1000x1024 measured 1.02-1.13x the best of its grid in 6 processes, and
the fastest configuration changed between processes; the median is what a user meets.
Within a process the grid is timed round-robin, one sample (>= 2 ms of calls) per
configuration per round, in --passes passes over all shapes: interference on a shared
machine only ever slows a run and comes in bursts of a second or more; round-robin
keeps one burst from sinking one configuration, and the median over processes minutes
apart keeps a long one from sinking a whole shape. The process is pinned to one core
(as in bench_matmul.py: a thread moved to the other core leaves its working set in that
core's L2). The grid's members are compared with each other, not with a peer.

With --save FILE the measurements are also written as JSON (host, profile, target,
every configuration's time); with --measured FILE nothing is timed: the model, under
the file's profile or --profile P, is scored against those measurements, so it can be
checked against a host one does not have.

Usage: python scripts/validate_matmul_model.py [--profile P] [--processes 5] [--passes 1] [--reps 5]
       [--quick] [--shape M N K]   (one shape, every configuration's predicted and measured time)
       [--save FILE] | --measured FILE [--profile P]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

import harness
from autoconfig.accuracy import spearman
from autoconfig.profile import profile_from_dict, profile_to_dict
from autoconfig.resolve import resolve_profile, target_for_profile
from autoconfig.machine import Machine
from autoconfig.runtime import aligned_array
from autoconfig.models.cost import best_of
from autoconfig.models.matmul import BROADCAST_ROWS, MatmulPlan, block_sizes, blockings, choose, k_unroll, predict, preference
from kernels import matmul as mm
from autoconfig.probe.host import this_host
from kernels.library import build_library
from kernels.target import get_target

SHAPES = {
    "square 64": (64, 64, 64), "square 128": (128, 128, 128), "square 256": (256, 256, 256),
    "square 512": (512, 512, 512), "square 1024": (1024, 1024, 1024),
    "skinny 1x1000x1000": (1, 1000, 1000), "skinny 4x512x512": (4, 512, 512),
    "skinny 16x1024x256": (16, 1024, 256),
    "tall 4096x16x64": (4096, 16, 64), "tall 2048x32x128": (2048, 32, 128),
    "tall 1000x1x1000": (1000, 1, 1000),
    "large K 64x64x4096": (64, 64, 4096), "large K 128x128x8192": (128, 128, 8192),
    "tiny 1x1x1": (1, 1, 1), "tiny 3x5x7": (3, 5, 7), "tiny 8x8x8": (8, 8, 8),
    "primes 97x101x103": (97, 101, 103), "primes 251x241x239": (251, 241, 239),
    "primes 13x997x31": (13, 997, 31),
    "conv 3136x64x64": (3136, 64, 64), "conv 196x512x512": (196, 512, 512),
    "conv 49x1024x1024": (49, 1024, 1024), "fc 1x1000x1024": (1, 1000, 1024),
}  # fmt: skip
TILES = [(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (4, 2), (6, 2), (3, 3), (4, 3), (2, 4)]
SAMPLE_SECONDS = 2e-3  # one round-robin sample: long enough to span timer and call jitter
FORMAT = "autoconfig-matmul-validation/1"  # the --save file's format tag
DOT_TILES = [(1, 1), (1, 4), (1, 8), (2, 4), (4, 1), (4, 2), (8, 1)]  # (rows, partial sums)


def grid(shape: mm.MatmulShape, profile, target) -> list[mm.MatmulConfig]:
    """Configurations spanning all algorithms, valid for the target."""
    widest = target.f32_lanes
    configs = [mm.MatmulConfig(shape, "broadcast", lanes, unroll=rows)
               for lanes in sorted({widest, max(4, widest // 2)}) for rows in (1, BROADCAST_ROWS)]  # fmt: skip
    m = Machine.of(profile).at(widest, 1)
    for mr, nv in TILES:
        for kc, kinds in blockings(shape, mr, nv * widest, m):
            _, mc, nc, _ = block_sizes(shape, mr, nv * widest, m, kc)
            configs += [mm.MatmulConfig(shape, algorithm, widest, mr, nv, kc, mc, nc, k_unroll(mr, nv))
                        for algorithm in kinds]  # fmt: skip
    if shape.n == 1:  # matrix times vector: rows x partial sums along K
        configs += [mm.MatmulConfig(shape, "dot", widest, mr=mr, unroll=u) for mr, u in DOT_TILES]
    return [c for c in configs if c.registers_needed()[0] <= target.vector_registers]


@dataclass
class Operands:
    """One shape's buffers, shared by all its configurations: the same physical pages
    for every configuration (L2 sets are physically indexed: the same code on a 1 MB
    B in other pages measured up to 44% slower, differently in each process), each
    starting on a cache line, as the runtime gives a kernel its operands (numpy's, 16
    bytes off a line, split 64-byte loads: on the Zen 5 VM they turned 1x1000x1000's
    order of broadcast widths around)."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    work: np.ndarray

    @classmethod
    def of(cls, shape: mm.MatmulShape, configs: list[mm.MatmulConfig]) -> Operands:
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal(dims, dtype=np.float32) for dims in ((shape.m, shape.k), (shape.k, shape.n)))
        return cls(
            harness.on_a_line(a),
            harness.on_a_line(b),
            aligned_array(shape.m * shape.n).reshape(shape.m, shape.n),
            aligned_array(max(1, *(c.workspace() for c in configs))),
        )


def build_checked(shape: mm.MatmulShape, config: mm.MatmulConfig, target, x: Operands) -> Callable[[], None]:
    """The kernel as a no-argument call, after checking its result against numpy."""
    kernel = build_library(mm.generate(config, target), this_host()).kernel(config.symbol)
    args = [x.c, x.a, x.b] + ([x.work[: config.workspace()]] if config.workspace() else [])
    tiles = (0, config.row_tiles(), 0, config.col_tiles())
    x.c.fill(np.nan)
    kernel(*args, *tiles)
    if not np.allclose(x.c, x.a.astype(np.float64) @ x.b, rtol=1e-3, atol=1e-3 * math.sqrt(shape.k)):
        sys.exit(f"{config} is wrong on {shape}; not timing it")
    # timed without the argument checks: they cost more than a small kernel, vary
    # by several µs from call to call, and are the same for every configuration
    native, pointers = kernel.native_function, [v.ctypes.data for v in args]

    def call(buffers: Operands = x) -> None:  # holds the buffers alive
        native(*pointers, *tiles)

    return call


def measure_round_robin(calls: dict, rounds: int) -> dict:
    """Seconds per call of each entry: the best of `rounds` round-robin samples of at
    least SAMPLE_SECONDS each (the harness's timing, one sample at a time)."""
    best = dict.fromkeys(calls, math.inf)
    for _ in range(rounds):
        for key, call in calls.items():
            sample = harness.time_call(call, 1, warmup=0, min_sample=SAMPLE_SECONDS)[0]
            best[key] = min(best[key], sample)
    return best


Measurements = dict[str, tuple[mm.MatmulShape, dict[mm.MatmulConfig, float]]]
"""Per shape name: the shape and the measured seconds of each configuration."""


def measure_in_processes(args) -> Measurements:
    """Each configuration's median over `args.processes` fresh runs of this script (one
    after another, each timing every shape's grid in its own process)."""
    runs: list[Measurements] = []
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(args.processes):
            saved = Path(scratch) / f"{number}.json"
            command = [sys.executable, __file__, "--processes", "1", "--passes", str(args.passes),
                       "--reps", str(args.reps), "--save", str(saved)]  # fmt: skip
            command += (["--profile", args.profile] if args.profile else []) + (["--quick"] if args.quick else [])
            command += ["--shape", *map(str, args.shape)] if args.shape else []
            done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode:
                sys.exit(f"process {number + 1} of {args.processes} failed: {done.stderr.strip()}")
            runs.append(load(str(saved))[0])
            print(f"  process {number + 1} of {args.processes} timed", file=sys.stderr, flush=True)
    return {name: (shape, {c: float(np.median([run[name][1][c] for run in runs])) for c in times})
            for name, (shape, times) in runs[0].items()}  # fmt: skip


def measure(shapes: dict[str, tuple[int, int, int]], profile, target, args) -> Measurements:
    """Build, check and time each shape's grid plus the model's pick, pinned to one core."""
    all_cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, harness.worker_cpus(1, pin=True))
    grids = {}
    for name, dims in shapes.items():
        shape = mm.MatmulShape(*dims)
        configs = grid(shape, profile, target)
        pick = choose(shape, profile, target, threads=1).best.config
        if pick not in configs:
            configs.append(pick)
        operands = Operands.of(shape, configs)
        grids[name] = (shape, {c: build_checked(shape, c, target, operands) for c in configs})
        print(f"  built {name}: {len(configs)} configurations", file=sys.stderr, flush=True)
    measured: Measurements = {name: (shape, {}) for name, (shape, _) in grids.items()}
    for number in range(args.passes):
        for name, (_, calls) in grids.items():
            times = measured[name][1]
            for c, seconds in measure_round_robin(calls, args.reps).items():
                times[c] = min(seconds, times.get(c, math.inf))
        print(f"  pass {number + 1} of {args.passes} timed", file=sys.stderr, flush=True)
    os.sched_setaffinity(0, all_cpus)
    return measured


def save(path: str, measured: Measurements, profile, target, args) -> None:
    """The measurements as JSON, with the host, the profile used and the settings, so
    the model can be re-scored against them on another machine (--measured)."""
    report = harness.Report("validate_matmul_model", profile.name,
                            settings={"processes": args.processes, "passes": args.passes, "rounds": args.reps,
                                      "threads": 1, "pinned": True})  # fmt: skip
    data = {"format": FORMAT, **asdict(report), "target": target.name, "profile_data": profile_to_dict(profile),
            "shapes": [{"name": name, "shape": [shape.m, shape.n, shape.k],
                        "measured": [{"config": config_to_dict(c), "seconds": t} for c, t in times.items()]}
                       for name, (shape, times) in measured.items()]}  # fmt: skip
    harness.write_json(path, data)


def load(path: str) -> tuple[Measurements, dict]:
    """Measurements saved by --save, and the file's other fields."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: cannot read saved measurements ({e})")
    if data.get("format") != FORMAT:
        sys.exit(f"{path}: format {data.get('format')!r}, expected {FORMAT!r} (a file written by --save)")
    measured: Measurements = {}
    for entry in data["shapes"]:
        shape = mm.MatmulShape(*entry["shape"])
        measured[entry["name"]] = (shape, {config_from_dict(shape, m["config"]): m["seconds"]
                                           for m in entry["measured"]})  # fmt: skip
    return measured, data


CONFIG_FIELDS = ("algorithm", "lanes", "mr", "nv", "kc", "mc", "nc", "unroll")
EDGE_FIELDS = ("full_row_edge", "full_column_edge")
"""Saved since the model may compute edge tiles as full ones; files from before lack them
(False: the grid's own configurations never set them)."""


def config_to_dict(c: mm.MatmulConfig) -> dict:
    """The fields that decide a bare matmul's code (validation configs have no epilogue)."""
    return {name: getattr(c, name) for name in CONFIG_FIELDS + EDGE_FIELDS}


def config_from_dict(shape: mm.MatmulShape, fields: dict) -> mm.MatmulConfig:
    return mm.MatmulConfig(shape, **{name: fields[name] for name in CONFIG_FIELDS},
                           **{name: fields.get(name, False) for name in EDGE_FIELDS})  # fmt: skip


def score(measured: Measurements, profile, target, list_all: bool) -> None:
    """Per shape: the model's pick against the measured best (regret) and the rank
    correlation of predicted and measured times; then the summary. Where the model's
    pick (under this profile) was not measured, the measured configuration it would
    pick among them stands in, marked '*'."""
    print(f"{'shape':<22}{'model pick':<26}{'measured best':<26}{'pick µs':>10}{'best µs':>10}{'regret':>8}"
          f"{'spearman':>10}{'n':>4}")  # fmt: skip
    regrets, rhos, pooled_pred, pooled_meas, stand_ins = [], [], [], [], 0
    for name, (shape, times) in measured.items():
        configs = list(times)
        predictions = {c: predict(MatmulPlan(c), profile) for c in configs}
        predicted = {c: p.total_ns for c, p in predictions.items()}
        pick = choose(shape, profile, target, threads=1).best.config
        mark = ""
        if pick not in times:
            pick, mark, stand_ins = best_of(list(predictions.values()), preference).config, "*", stand_ins + 1
        best = min(times, key=times.get)
        regret = times[pick] / times[best] - 1
        rho = spearman([predicted[c] for c in configs], [times[c] for c in configs])
        regrets.append(regret)
        rhos.append(rho)
        pooled_pred += [predicted[c] for c in configs]
        pooled_meas += [times[c] for c in configs]
        print(f"{name:<22}{describe(pick) + mark:<26}{describe(best):<26}{times[pick] * 1e6:>10.1f}"
              f"{times[best] * 1e6:>10.1f}{regret * 100:>7.1f}%{rho:>10.2f}{len(configs):>4}", flush=True)  # fmt: skip
        if list_all:
            for c in sorted(configs, key=times.get):
                print(f"  {describe(c):<28} predicted {predicted[c] / 1e3:9.1f} µs  "
                      f"measured {times[c] * 1e6:9.1f} µs{' <- model' if c == pick else ''}")  # fmt: skip
    geo = math.exp(sum(math.log1p(r) for r in regrets) / len(regrets)) - 1
    print(f"\nregret: geomean {geo * 100:.1f}%, worst {max(regrets) * 100:.1f}% over {len(regrets)} shapes")
    print(f"spearman per shape: median {float(np.median(rhos)):.2f}, mean {float(np.mean(rhos)):.2f}; "
          f"pooled over all {len(pooled_pred)} (shape, config) pairs: {spearman(pooled_pred, pooled_meas):.2f}")
    if stand_ins:
        print(f"* {stand_ins} shape(s): the model's pick was not among the saved configurations; "
              "the one it picks among them stood in")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None,
                        help="hardware profile (default: this machine's; with --measured, the file's)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=5, help="round-robin rounds per pass")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes timing every configuration; each one's time is their median")  # fmt: skip
    parser.add_argument("--passes", type=int, default=1, help="passes over all shapes in each process")
    parser.add_argument("--quick", action="store_true", help="every other shape")
    parser.add_argument("--shape", type=int, nargs=3, metavar=("M", "N", "K"),
                        help="only this shape, listing every configuration")  # fmt: skip
    parser.add_argument("--save", metavar="FILE", help="also write the measurements as JSON")
    parser.add_argument("--measured", metavar="FILE",
                        help="time nothing: score the model against measurements saved with --save")  # fmt: skip
    args = parser.parse_args()
    if args.measured:
        measured, data = load(args.measured)
        profile = resolve_profile(args.profile) if args.profile else profile_from_dict(data["profile_data"])
        target = get_target(data["target"])
        if target_for_profile(profile).name != target.name:
            sys.exit(f"profile {profile.name} is for {target_for_profile(profile).name}, "
                     f"the measurements for {target.name}")
        host = data["host"]
        print(f"measured on {host['model_name']!r} ({host['cpus']} CPUs, commit {host['commit']}), target "
              f"{target.name}, 1 thread; scored with profile {profile.name}", flush=True)  # fmt: skip
    else:
        profile = resolve_profile(args.profile)
        target = target_for_profile(profile)
        shapes = dict(list(SHAPES.items())[:: 2 if args.quick else 1])
        if args.shape:
            shapes = {"x".join(map(str, args.shape)): tuple(args.shape)}
        if args.processes < 1 or args.passes < 1 or args.reps < 1:
            sys.exit("--processes, --passes and --reps must be at least 1")
        print(f"host {harness.host()['model_name']!r}, profile {profile.name}, target {target.name}, 1 thread; "
              f"times: median over {args.processes} processes of the best of {args.passes} pass(es) x "
              f"{args.reps} round-robin rounds, pinned to one core", flush=True)  # fmt: skip
        measured = measure_in_processes(args) if args.processes > 1 else measure(shapes, profile, target, args)
        if args.save:
            save(args.save, measured, profile, target, args)
    score(measured, profile, target, list_all=bool(args.shape))
    if args.save and not args.measured:
        print(f"wrote {args.save}")
    return 0


def describe(c: mm.MatmulConfig) -> str:
    """'packed 6x2 L=16 kc=160', 'broadcast u8 L=8': the lanes on every line, since
    tiles of two widths compete where both give the same peak."""
    blocked = c.algorithm in ("tiled", "packed")
    return f"{c.algorithm} {c.tile} L={c.lanes}" + (f" kc={c.kc}" if blocked else "")


if __name__ == "__main__":
    sys.exit(main())
