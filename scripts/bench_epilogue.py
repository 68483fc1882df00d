#!/usr/bin/env python3
"""What a fused epilogue costs: each shape compiled bare and with an epilogue (default
bias + Relu, as a 1x1 convolution followed by its bias and activation), the same plan
forced on both, timed in interleaved rounds on one pinned core; prints both times and
the overhead. Shapes: the 1x1-convolution GEMMs of the model zoo (M = pixels, N = out
channels, K = in channels).

Usage: python scripts/bench_epilogue.py [--profile P] [--rounds 7] [--reps 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import numpy as np

from bench_matmul import median_seconds  # the same warm-up and timing as the matmul benchmark

from autoconfig import compile_matmul
from autoconfig.resolve import resolve_profile
from kernels import epilogue as ep

SHAPES = {
    "mobilenet pw2 112²": (12544, 64, 32), "mobilenet pw4 56²": (3136, 128, 128),
    "mobilenet pw6 28²": (784, 256, 256), "mobilenet pw8 14²": (196, 512, 512),
    "mobilenet pw13 7²": (49, 1024, 1024), "effnet expand 112²": (12544, 96, 16),
    "effnet project 56²": (3136, 24, 144), "effnet expand 28²": (784, 240, 40),
    "effnet expand 14²": (196, 672, 112), "yolov4 csp 104²": (10816, 64, 128),
    "yolov4 csp 52²": (2704, 128, 256), "yolov4 csp 13²": (169, 512, 1024),
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    profile = resolve_profile(args.profile)
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    epilogue = (ep.bias(), ep.relu())
    print(f"profile {profile.name}; 1 thread pinned; median of {args.rounds} interleaved rounds x {args.reps} calls")
    print(f"{'shape':<22}{'M x N x K':>20}  {'config':<16}{'bare µs':>10}{'bias+relu µs':>14}{'overhead':>10}")
    ratios = []
    for name, (m, n, k) in SHAPES.items():
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        bias = rng.standard_normal(n, dtype=np.float32)
        bare = compile_matmul(m, n, k, profile=profile, threads=1)
        fused = compile_matmul(m, n, k, profile=profile, config=bare.config, threads=1, epilogue=epilogue)
        if not np.allclose(fused(a, b, bias), np.maximum(a.astype(np.float64) @ b + bias, 0), rtol=1e-3, atol=1e-3):
            sys.exit(f"{name}: the fused matmul is wrong; not timing it")
        times = {"bare": [], "fused": []}
        for _ in range(args.rounds):
            times["bare"].append(median_seconds(lambda: bare(a, b), args.reps))
            times["fused"].append(median_seconds(lambda: fused(a, b, bias), args.reps))
        t_bare, t_fused = (statistics.median(times[key]) for key in ("bare", "fused"))
        ratios.append(t_fused / t_bare)
        c = bare.config
        print(f"{name:<22}{f'{m}x{n}x{k}':>20}  {c.algorithm + ' ' + c.tile:<16}{t_bare * 1e6:>10.1f}"
              f"{t_fused * 1e6:>14.1f}{(t_fused / t_bare - 1) * 100:>9.1f}%")  # fmt: skip
    geomean = float(np.exp(np.mean(np.log(ratios))))
    print(f"geomean overhead of bias+relu: {(geomean - 1) * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
