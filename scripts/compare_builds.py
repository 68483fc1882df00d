#!/usr/bin/env python3
"""Two builds of one model (say `--fusion dp` and `--fusion greedy`) timed against each
other in one process: blocks of calls of each in turn, the order alternating, with a
pause between blocks longer than the native pool's spin (`autoconfig/pool.c`,
SPIN_NS), so one library's idle workers never hold a core while the other runs. Both
see the host in the same state within a block pair, which separate processes minutes
apart do not; what it prints is the ratio block by block.

Usage: python scripts/compare_builds.py DIR_A DIR_B [--blocks 60] [--block-ms 80]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import autoconfig
from autoconfig.accuracy import sample_inputs

PAUSE_S = 0.03
"""Between blocks: longer than the pool workers' 20 ms spin after their last job."""

WARM_CALLS = 2
"""Calls of a block not timed: the first wakes the pool's workers from their sleep."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", help="a built model's directory (`autoconfig build --out`)")
    parser.add_argument("b", help="another build of the same model")
    parser.add_argument("--blocks", type=int, default=60, help="block pairs (default 60)")
    parser.add_argument("--block-ms", type=float, default=80.0, help="time of a block's calls (default 80 ms)")
    args = parser.parse_args()
    models = {name: autoconfig.load(path) for name, path in (("A", args.a), ("B", args.b))}
    if models["A"].inputs != models["B"].inputs:
        sys.exit(f"compare_builds: the builds take different inputs: {models['A'].inputs} and {models['B'].inputs}")
    feeds = sample_inputs(models["A"].manifest["inputs"])
    calls = max(5, round(args.block_ms * 1e6 / models["A"].run(feeds, 3)[1]))
    medians: dict[str, list[float]] = {"A": [], "B": []}
    for block in range(args.blocks):
        for name in ("A", "B") if block % 2 == 0 else ("B", "A"):
            time.sleep(PAUSE_S)
            models[name].run(feeds, WARM_CALLS)
            medians[name].append(models[name].run(feeds, calls)[1])
    ratios = [b / a for a, b in zip(medians["A"], medians["B"])]
    print(f"A {args.a}: median {statistics.median(medians['A']) / 1e6:.3f} ms; "
          f"B {args.b}: median {statistics.median(medians['B']) / 1e6:.3f} ms ({args.blocks} blocks of {calls} calls each)")
    print(f"B/A block by block: median {statistics.median(ratios):.4f}, A faster in {sum(r > 1 for r in ratios)} of "
          f"{len(ratios)}, quartiles {np.percentile(ratios, 25):.4f} to {np.percentile(ratios, 75):.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
