#!/usr/bin/env python3
"""Generated matmul vs numpy/OpenBLAS vs torch CPU (oneDNN/MKL path), side by side.

For each shape (square 64-2048, and the Gemm and 1x1-convolution shapes of VGG-16,
MobileNet-V1, EfficientNet-B0 and YOLO-V4 at batch 1, as M=pixels, N=out channels,
K=in channels) and each thread budget (1 and all cores; each runtime may use fewer,
as torch and our model both do for small shapes): our kernel is compiled by the
model (build time reported, not timed), checked against numpy, then all peers are
timed in interleaved rounds, a pause before each peer so the previous one's
spin-waiting workers go to sleep (50 ms of warm-up calls, then the median of the
repetitions). The peers' runtimes are left as they ship: making their idle workers
sleep at once (OPENBLAS_THREAD_TIMEOUT=4) cut OpenBLAS's 2-thread 128³ to 0.4
GFLOP/s.
Prints GFLOP/s and ratios (ours / peer), the geomean over squares 256-2048, and
writes a plot.

Usage: python scripts/bench_matmul.py [--profile P] [--reps 7] [--quick] [--plot F]
Needs: pip install -e '.[bench]' (matplotlib, threadpoolctl); torch==2.13.0 optional.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from autoconfig import compile_matmul
from autoconfig.resolve import resolve_profile

SQUARES = [64, 128, 256, 512, 1024, 2048]
ZOO = {  # (M, N, K) at batch 1: Gemm layers and 1x1 convolutions as GEMM
    "vgg16 fc6": (1, 4096, 25088),
    "vgg16 fc7": (1, 4096, 4096),
    "vgg16 fc8": (1, 1000, 4096),
    "mobilenet pw2 112²": (12544, 64, 32),
    "mobilenet pw4 56²": (3136, 128, 128),
    "mobilenet pw6 28²": (784, 256, 256),
    "mobilenet pw8 14²": (196, 512, 512),
    "mobilenet pw13 7²": (49, 1024, 1024),
    "mobilenet fc": (1, 1000, 1024),
    "effnet expand 112²": (12544, 96, 16),
    "effnet project 56²": (3136, 24, 144),
    "effnet expand 28²": (784, 240, 40),
    "effnet expand 14²": (196, 672, 112),
    "effnet expand 7²": (49, 1152, 192),
    "effnet head 7²": (49, 1280, 320),
    "yolov4 csp 208²": (43264, 64, 64),
    "yolov4 csp 104²": (10816, 64, 128),
    "yolov4 csp 52²": (2704, 128, 256),
    "yolov4 csp 26²": (676, 256, 512),
    "yolov4 csp 13²": (169, 512, 1024),
    "yolov4 head 52²": (2704, 255, 256),
}


WARMUP_SECONDS = 0.05
"""Calls before timing, by time rather than count: after the pause a halted vCPU and
sleeping workers take milliseconds to come back (one warm-up call left 256³ at 2
threads measuring 63 GFLOP/s for us and 90 for OpenBLAS, 125 and 122 when warm)."""


PINNING = """One-thread runs are pinned to one core (the calling thread, where every peer
computes at one thread): unpinned, the scheduler moved the thread between the two
vCPUs and the same 256³ kernel measured 69-82 GFLOP/s from one process to the next
(each move leaves the working set in the other core's L2); pinned, 82-83 in six
processes. Pinned runs still see the odd slow round (another tenant), hence medians."""


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < WARMUP_SECONDS:
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peers(a: np.ndarray, b: np.ndarray, threads: int) -> dict[str, tuple[Callable, Callable]]:
    """Each peer as (set-up, call): the set-up fixes its thread count outside the timed
    region (threadpool_limits costs hundreds of µs per entry); torch only if installed."""
    out = {"openblas": (lambda: threadpool_limits(limits=threads, user_api="blas"), lambda: a @ b)}
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch"] = (lambda: torch.set_num_threads(threads), lambda: torch.mm(ta, tb))
    except ImportError:
        pass
    return out


def run(shapes: dict[str, tuple[int, int, int]], threads: int, args, profile) -> list[dict]:
    rows = []
    for name, (m, n, k) in shapes.items():
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        start = time.perf_counter()
        ours = compile_matmul(m, n, k, profile=profile, threads=threads)
        build = time.perf_counter() - start
        expected = a.astype(np.float64) @ b
        error = float(np.max(np.abs(ours(a, b) - expected)))
        if error > 1e-3 * math.sqrt(k) * max(1.0, float(np.max(np.abs(expected)))):
            sys.exit(f"{name}: generated matmul is wrong (max error {error:.3g}); not timing it")
        calls = {"ours": (lambda: None, lambda: ours(a, b)), **peers(a, b, threads)}
        times: dict[str, list[float]] = {p: [] for p in calls}
        for _ in range(args.rounds):  # interleaved rounds: the machine is shared
            for peer, (setup, fn) in calls.items():
                setup()
                time.sleep(args.pause)  # let the previous peer's spinning workers sleep
                times[peer].append(median_seconds(fn, args.reps))
        flops = 2 * m * n * k
        row = {"name": name, "shape": (m, n, k), "build": build,
               "config": describe(ours.plan)}  # fmt: skip
        for peer, ts in times.items():
            row[peer] = flops / statistics.median(ts) / 1e9
        rows.append(row)
        print(format_row(row, list(calls)), flush=True)
    return rows


def describe(plan) -> str:
    """'packed 6x2/8', 'broadcast u8/8', 'dot 8x1 sums/8', plus the split when threads
    divide columns."""
    c = plan.config
    split = " cols" if plan.threads > 1 and plan.split == "columns" else ""
    return f"{c.algorithm} {c.tile}/{c.lanes}{split}"


def format_row(row: dict, peer_names: list[str]) -> str:
    m, n, k = row["shape"]
    cells = [f"{row['name']:<22}", f"{m:>6}x{n:<5}x{k:<6}", f"{row['config']:<20}"]
    cells += [f"{row[p]:>8.1f}" for p in peer_names]
    cells += [f"{row['ours'] / row[p]:>7.2f}x" for p in peer_names if p != "ours"]
    cells.append(f"{row['build']:>6.1f}s")
    return " ".join(cells)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per round (median)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--pause", type=float, default=0.3,
                        help="seconds between peers (OpenBLAS and torch workers spin-wait)")
    parser.add_argument("--quick", action="store_true", help="squares up to 1024, fewer zoo shapes")
    parser.add_argument("--no-pin", action="store_true",
                        help="let one-thread runs migrate between cores (see PINNING)")
    parser.add_argument("--plot", default="bench-matmul.png")
    args = parser.parse_args()
    profile = resolve_profile(args.profile)
    cores = int(profile.cores)
    squares = [s for s in SQUARES if not args.quick or s <= 1024]
    zoo = dict(list(ZOO.items())[:: 3 if args.quick else 1])
    results = {}
    peer_names = ["ours", *peers(np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), 1)]
    header = " ".join([f"{'shape':<22}", f"{'M x N x K':<19}", f"{'our config':<20}",
                       *[f"{p:>8}" for p in peer_names],
                       *[f"{'vs ' + p:>8}" for p in peer_names[1:]], f"{'build':>7}"])  # fmt: skip
    all_cpus = os.sched_getaffinity(0)
    for threads in sorted({1, cores}):
        pinned = threads == 1 and not args.no_pin
        print(f"\nprofile {profile.name}; {threads} thread(s){' pinned to one core' if pinned else ''}; "
              f"GFLOP/s, median of {args.rounds} interleaved rounds x {args.reps} reps")
        print(header)
        shapes = {f"square {s}": (s, s, s) for s in squares} | zoo
        os.sched_setaffinity(0, {min(all_cpus)} if pinned else all_cpus)
        results[threads] = run(shapes, threads, args, profile)
        os.sched_setaffinity(0, all_cpus)
        big = [r for r in results[threads] if r["name"].startswith("square") and r["shape"][0] >= 256]
        for peer in peer_names[1:]:
            print(f"geomean ours/{peer}, squares 256-{max(squares)}: "
                  f"{geomean([r['ours'] / r[peer] for r in big]):.2f}x; zoo shapes: "
                  f"{geomean([r['ours'] / r[peer] for r in results[threads] if not r['name'].startswith('square')]):.2f}x")
    plot(results, peer_names, args.plot)
    print(f"\nwrote {args.plot}")
    return 0


def plot(results: dict[int, list[dict]], peer_names: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(12, 4.5 * len(results)), squeeze=False)
    for ax, (threads, rows) in zip(axes[:, 0], sorted(results.items())):
        x = np.arange(len(rows))
        width = 0.8 / len(peer_names)
        for i, peer in enumerate(peer_names):
            ax.bar(x + i * width, [r[peer] for r in rows], width, label=peer)
        ax.set_xticks(x + 0.4 - width / 2, [r["name"] for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set(ylabel="GFLOP/s", title=f"matmul, {threads} thread(s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
