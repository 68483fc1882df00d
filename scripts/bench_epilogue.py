#!/usr/bin/env python3
"""What a fused epilogue costs: each shape compiled bare and with an epilogue (bias +
Relu, as a 1x1 convolution followed by its bias and activation), the same plan forced
on both; the two timed by the harness (scripts/harness.py), each in its own fresh
process per round, one thread, pinned; prints both times and the overhead, writes
JSON. Shapes: the 1x1-convolution GEMMs of the model zoo (M = pixels, N = out
channels, K = in channels).

Usage: python scripts/bench_epilogue.py [--profile P] [--rounds 3] [--reps 15] [--json F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import harness

SHAPES = {
    "mobilenet pw2 112²": (12544, 64, 32), "mobilenet pw4 56²": (3136, 128, 128),
    "mobilenet pw6 28²": (784, 256, 256), "mobilenet pw8 14²": (196, 512, 512),
    "mobilenet pw13 7²": (49, 1024, 1024), "effnet expand 112²": (12544, 96, 16),
    "effnet project 56²": (3136, 24, 144), "effnet expand 28²": (784, 240, 40),
    "effnet expand 14²": (196, 672, 112), "yolov4 csp 104²": (10816, 64, 128),
    "yolov4 csp 52²": (2704, 128, 256), "yolov4 csp 13²": (169, 512, 1024),
}  # fmt: skip


PEERS = ("bare", "fused")


def prepare(peer: str, task: dict, threads: int) -> harness.Prepared:
    """The bare matmul, or the same plan with bias + Relu fused, checked."""
    from autoconfig import compile_matmul
    from kernels import epilogue as ep

    m, n, k = task["m"], task["n"], task["k"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    bias = rng.standard_normal(n, dtype=np.float32)
    bare = compile_matmul(m, n, k, profile=task["profile"], threads=threads)
    info = {"config": f"{bare.config.algorithm} {bare.config.tile}/{bare.config.lanes}"}
    if peer == "bare":
        return harness.Prepared(lambda: bare(a, b), info)
    fused = compile_matmul(m, n, k, profile=task["profile"], config=bare.config, threads=threads,
                           epilogue=(ep.bias(), ep.relu()))  # fmt: skip
    if not np.allclose(fused(a, b, bias), np.maximum(a.astype(np.float64) @ b + bias, 0), rtol=1e-3, atol=1e-3):
        sys.exit(f"{task['name']}: the fused matmul is wrong; not timing it")
    return harness.Prepared(lambda: fused(a, b, bias), info)


def versions(peer: str) -> dict:
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per variant (samples pooled)")
    parser.add_argument("--reps", type=int, default=15, help="timed samples per round")
    parser.add_argument("--json", default="bench-epilogue.json", help="results file")
    args = parser.parse_args()
    from autoconfig.resolve import resolve_profile

    profile = resolve_profile(args.profile)
    path = str(Path(args.profile).resolve()) if args.profile else None
    tasks = [{"name": name, "m": m, "n": n, "k": k, "profile": path} for name, (m, n, k) in SHAPES.items()]
    timed = harness.measure("bench_epilogue", PEERS, tasks, 1, rounds=args.rounds, reps=args.reps, pin=True)
    report = harness.Report("bench_epilogue", profile.name, settings={"rounds": args.rounds, "reps": args.reps})
    print(report.heading(1, {p: timed[p][0]["versions"] for p in PEERS}))
    print(f"{'shape':<22}{'M x N x K':>20}  {'config':<18}{'bare µs':>10}{'bias+relu µs':>14}{'overhead':>10}")
    rows = []
    for i, task in enumerate(tasks):
        bare, fused = (timed[p][i]["timing"]["median"] for p in PEERS)
        rows.append({**task, "config": timed["bare"][i]["info"]["config"], "bare_s": bare, "fused_s": fused})
        dims = f"{task['m']}x{task['n']}x{task['k']}"
        print(f"{task['name']:<22}{dims:>20}  {rows[-1]['config']:<18}"
              f"{bare * 1e6:>10.1f}{fused * 1e6:>14.1f}{(fused / bare - 1) * 100:>9.1f}%")  # fmt: skip
    overhead = harness.geomean([r["fused_s"] / r["bare_s"] for r in rows]) - 1
    report.summary.append(f"geomean overhead of bias+relu: {overhead * 100:.1f}%")
    report.tables.append({"threads": 1, "rows": rows})
    print(report.summary[-1])
    report.save(args.json)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
