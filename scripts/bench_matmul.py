#!/usr/bin/env python3
"""Generated matmul vs numpy/OpenBLAS vs torch CPU (oneDNN/MKL path), side by side.

For each shape (square 64-2048, and the Gemm and 1x1-convolution shapes of VGG-16,
MobileNet-V1, EfficientNet-B0 and YOLO-V4 at batch 1, as M=pixels, N=out channels,
K=in channels) and each thread budget (1 and all cores; each runtime may use fewer,
as torch and our model both do for small shapes), every peer is timed by the harness
(scripts/harness.py): in its own fresh process per round, thread count through its own
control, pinned alike, on the same operands, each starting on a cache line as a framework's
allocator places them (`harness.on_a_line`). Our kernel is compiled by the model and
checked against numpy before timing (build time reported, not timed); so is every
peer's result.

Prints GFLOP/s with the spread, each as a fraction of the profile's measured peak
for that thread count, the ratios ours/peer and ours/(the better peer), geomeans over
squares 256-2048 and over the zoo shapes, and, with both thread counts, each peer's
2-thread / 1-thread ratio; writes the results as JSON and a plot.

Usage: python scripts/bench_matmul.py [--profile P] [--threads 1 2] [--rounds 3] [--reps 5]
       [--quick] [--json F] [--plot F] [--no-pin]
Needs: pip install -e '.[bench]' (matplotlib, threadpoolctl); torch==2.13.0 optional.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import harness

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

OTHER_PEERS = ("openblas", "torch")


def available_peers() -> list[str]:
    """Ours, OpenBLAS (numpy), and torch when installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return ["ours", "openblas"]
    return ["ours", *OTHER_PEERS]


def environment(peer: str, threads: int) -> dict:
    """The OpenBLAS peer's thread count (elsewhere numpy's OpenBLAS only checks results,
    on one thread: harness.HELPER_THREADS)."""
    return {"OPENBLAS_NUM_THREADS": str(threads)} if peer == "openblas" else {}


def operands(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A, B (each on a cache line, `harness.on_a_line`) and the float64 reference
    product, the same for every peer."""
    rng = np.random.default_rng(0)
    a = harness.on_a_line(rng.standard_normal((m, k), dtype=np.float32))
    b = harness.on_a_line(rng.standard_normal((k, n), dtype=np.float32))
    return a, b, a.astype(np.float64) @ b


def check(peer: str, task: dict, got: np.ndarray, expected: np.ndarray) -> None:
    """Exit with one line if a peer's product is wrong: a wrong kernel is not timed."""
    error = float(np.max(np.abs(got - expected)))
    if error > 1e-3 * math.sqrt(task["k"]) * max(1.0, float(np.max(np.abs(expected)))):
        sys.exit(f"{task['name']}: {peer}'s matmul is wrong (max error {error:.3g}); not timing it")


def prepare(peer: str, task: dict, threads: int) -> harness.Prepared:
    """The peer's call on the task's operands, checked; ours compiled by the model."""
    m, n, k = task["m"], task["n"], task["k"]
    a, b, expected = operands(m, n, k)
    if peer == "ours":
        from autoconfig import compile_matmul

        start = time.perf_counter()
        ours = compile_matmul(m, n, k, profile=task["profile"], threads=threads)
        info = {"config": describe(ours.plan), "build_s": time.perf_counter() - start}
        call, result = (lambda: ours(a, b)), ours(a, b)
    elif peer == "openblas":
        call, info = (lambda: a @ b), {}
        result = call()
    else:
        import torch

        torch.set_num_threads(threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        call, info = (lambda: torch.mm(ta, tb)), {}
        result = call().numpy()
    check(peer, task, result, expected)
    return harness.Prepared(call, info)


def versions(peer: str) -> dict:
    """The peer's library versions (threadpoolctl's view of numpy's BLAS; torch's)."""
    if peer == "torch":
        import torch

        return {"torch": torch.__version__, "threads": torch.get_num_threads()}
    if peer == "openblas":
        return harness.library_versions()
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


def describe(plan) -> str:
    """'packed 6x2/8', 'broadcast u8/8', 'dot 8x1 sums/8', with the threads used and
    ' cols' when they divide columns."""
    c = plan.config
    split = " cols" if plan.parts() > 1 and plan.split == "columns" else ""
    return f"{c.algorithm} {c.tile}/{c.lanes} t{plan.parts()}{split}"


def table(rows: list[dict], peers: list[str], peak: float) -> list[str]:
    """The printed table: GFLOP/s ± spread and % of peak per peer, then the ratios."""
    others = [p for p in peers if p != "ours"]
    head = [f"{'shape':<20}", f"{'M x N x K':<18}", f"{'our config':<22}"]
    head += [f"{p:>15}" for p in peers] + [f"{'vs ' + p:>10}" for p in others]
    head += [f"{'vs best':>8}", f"{'build':>6}"]
    lines = [" ".join(head)]
    for r in rows:
        m, n, k = r["shape"]
        cells = [f"{r['name']:<20}", f"{m:>6}x{n:<5}x{k:<5}", f"{r['config']:<22}"]
        cells += [f"{r['gflops'][p]:>7.1f}±{r['spread'][p] * 100:2.0f}%{r['gflops'][p] / peak * 100:3.0f}%" for p in peers]
        cells += [f"{r['gflops']['ours'] / r['gflops'][p]:>9.2f}x" for p in others]
        if others:
            cells.append(f"{r['vs_best']:>7.2f}x")
        cells.append(f"{r['build_s']:>5.1f}s")
        lines.append(" ".join(cells))
    return lines


def results(tasks: list[dict], timed: dict[str, list[dict]], threads: int) -> list[dict]:
    """One row per task: GFLOP/s and spread per peer, ours over the better other peer."""
    rows = []
    for i, task in enumerate(tasks):
        flops = 2 * task["m"] * task["n"] * task["k"]
        ours = timed["ours"][i]["info"]
        row = {"name": task["name"], "shape": (task["m"], task["n"], task["k"]), "threads": threads,
               "config": ours["config"], "build_s": ours["build_s"],
               "gflops": {p: flops / t[i]["timing"]["median"] / 1e9 for p, t in timed.items()},
               "spread": {p: harness.Timing(**t[i]["timing"]).spread for p, t in timed.items()},
               "timing": {p: t[i]["timing"] for p, t in timed.items()}}  # fmt: skip
        others = [g for p, g in row["gflops"].items() if p != "ours"]
        row["vs_best"] = row["gflops"]["ours"] / max(others) if others else float("nan")
        rows.append(row)
    return rows


def geomeans(rows: list[dict], peers: list[str]) -> list[str]:
    """Geomean of ours over each peer and over the better peer, squares 256+ and zoo."""
    groups = {"squares 256-2048": [r for r in rows if r["name"].startswith("square") and r["shape"][0] >= 256],
              "zoo shapes": [r for r in rows if not r["name"].startswith("square")]}  # fmt: skip
    lines = []
    for group, members in groups.items():
        if not members:
            continue
        ratios = [f"ours/{p} {harness.geomean([r['gflops']['ours'] / r['gflops'][p] for r in members]):.2f}x"
                  for p in peers if p != "ours"]  # fmt: skip
        best = harness.geomean([r["vs_best"] for r in members])
        lines.append(f"geomean over {group}: " + ", ".join(ratios) + f", ours/better peer {best:.2f}x")
    return lines


def scaling(by_threads: dict[int, list[dict]], peers: list[str]) -> list[str]:
    """Each peer's many-thread / one-thread GFLOP/s on shapes of at least 1 MFLOP; the
    shapes where a peer got slower with more threads are named."""
    low, high = min(by_threads), max(by_threads)
    lines = [f"{high}-thread / {low}-thread GFLOP/s, shapes >= 1 MFLOP (slower marked *):"]
    for one, many in zip(by_threads[low], by_threads[high]):
        mflop = 2 * math.prod(one["shape"]) / 1e6
        if mflop < 1:
            continue
        cells = []
        for p in peers:
            ratio = many["gflops"][p] / one["gflops"][p]
            cells.append(f"{p} {ratio:4.2f}{'*' if ratio < 1 else ' '}")
        lines.append(f"  {one['name']:<20} {mflop:>9.1f} MFLOP  " + "  ".join(cells))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_options(parser, "bench-matmul")
    parser.add_argument("--quick", action="store_true", help="squares up to 1024, every third zoo shape")
    args = parser.parse_args()
    harness.require_plotting("bench_matmul")

    from autoconfig.machine import Machine
    from autoconfig.resolve import resolve_profile

    profile = resolve_profile(args.profile)
    profile_path = str(Path(args.profile).resolve()) if args.profile else None
    machine = Machine.of(profile)
    squares = [s for s in SQUARES if not args.quick or s <= 1024]
    shapes = {f"square {s}": (s, s, s) for s in squares} | dict(list(ZOO.items())[:: 3 if args.quick else 1])
    tasks = [{"name": name, "m": m, "n": n, "k": k, "profile": profile_path} for name, (m, n, k) in shapes.items()]
    peers = available_peers()
    report = harness.Report("bench_matmul", profile.name,
                            settings={"rounds": args.rounds, "reps": args.reps, "pinned": not args.no_pin})  # fmt: skip
    by_threads: dict[int, list[dict]] = {}
    for threads in args.threads or sorted({1, int(profile.cores)}):
        timed = harness.measure("bench_matmul", peers, tasks, threads, rounds=args.rounds, reps=args.reps,
                                pin=not args.no_pin)  # fmt: skip
        rows = by_threads[threads] = results(tasks, timed, threads)
        peak = machine.peak_gflops(threads)
        print("\n" + report.heading(threads, {p: timed[p][0]["versions"] for p in peers}))
        print(f"GFLOP/s ± half the interquartile range, then % of the profile's {threads}-thread peak "
              f"({peak:.0f} GFLOP/s); median of {args.rounds} processes x {args.reps} samples per peer")
        lines = table(rows, peers, peak) + geomeans(rows, peers)
        print("\n".join(lines), flush=True)
        report.tables.append({"threads": threads, "peak_gflops": peak, "rows": rows})
        report.summary += lines[-2:]
    if len(by_threads) > 1:
        lines = scaling(by_threads, peers)
        print("\n" + "\n".join(lines))
        report.summary += lines
    report.save(args.json)
    plot(by_threads, peers, args.plot)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


def plot(by_threads: dict[int, list[dict]], peers: list[str], path: str) -> None:
    """GFLOP/s bars per shape, one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(by_threads), 1, figsize=(12, 4.5 * len(by_threads)), squeeze=False)
    for ax, (threads, rows) in zip(axes[:, 0], sorted(by_threads.items())):
        x = np.arange(len(rows))
        width = 0.8 / len(peers)
        for i, peer in enumerate(peers):
            ax.bar(x + i * width, [r["gflops"][peer] for r in rows], width, label=peer)
        ax.set_xticks(x + 0.4 - width / 2, [r["name"] for r in rows], rotation=60, ha="right", fontsize=7)
        ax.set(ylabel="GFLOP/s", title=f"matmul, {threads} thread(s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
