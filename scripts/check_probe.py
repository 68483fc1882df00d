#!/usr/bin/env python3
"""Check the probe against the machine: runs the probe twice and OpenBLAS in one run.

Prints a table of
- the measured single-core f32 FMA peak vs single-thread OpenBLAS sgemm on 1024³
  (numpy, one thread, timed by scripts/harness.py): a BLAS cannot beat the peak;
- the peak vs lanes × FMA units × 2 × frequency (units: --fma-units, from the
  microarchitecture's documentation; frequency from the profile, where known);
- the bandwidth knees vs the sysfs cache sizes (the knees must lie within 2×);
- the spread between the two probes of peak and L1 bandwidth;
and writes a plot of both bandwidth curves.

Usage: python scripts/check_probe.py [--quick] [--fma-units 2] [--plot probe.png]
Needs the bench extra (matplotlib): pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import sys

import harness
from autoconfig.probe import probe
from autoconfig.profile import HardwareProfile

def openblas_gflops() -> float:
    """Single-thread numpy/OpenBLAS sgemm GFLOP/s on 1024³, timed by the harness (its
    own process, one thread through OpenBLAS's control, pinned)."""
    task = {"name": "square 1024", "m": 1024, "n": 1024, "k": 1024, "profile": None}
    timed = harness.measure("bench_matmul", ["openblas"], [task], 1, rounds=1, reps=7, pin=True, progress=False)
    return 2 * 1024**3 / timed["openblas"][0]["timing"]["median"] / 1e9


def spread(a: float, b: float) -> float:
    return abs(a - b) / min(a, b) * 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="use the quick probe")
    parser.add_argument("--fma-units", type=int, default=2, help="FMA pipes per core (Zen 4: 2)")
    parser.add_argument("--plot", default="probe-bandwidth.png", help="plot file")
    args = parser.parse_args()

    runs: list[HardwareProfile] = []
    for i in range(2):
        print(f"probe run {i + 1}/2 ...", file=sys.stderr)
        runs.append(probe(quick=args.quick, progress=True))
    blas = openblas_gflops()
    first, second = runs
    widest = first.widest_fma()
    peak = [r.widest_fma().peak_gflops for r in runs]
    l1 = [float(r.bandwidth.single_thread.levels["L1"]) for r in runs]

    print(f"\nprofile: {first.model}, {int(first.cores)} cores; threads: 1 (peak, sgemm)")
    print(f"{'figure':<44}{'run 1':>10}{'run 2':>10}{'spread':>9}")
    print(f"{f'f32 FMA peak, {widest.vector_bits}-bit, 1 core (GFLOP/s)':<44}"
          f"{peak[0]:>10.1f}{peak[1]:>10.1f}{spread(*peak):>8.1f}%")  # fmt: skip
    print(f"{'L1 load bandwidth, 1 thread (GB/s)':<44}{l1[0]:>10.1f}{l1[1]:>10.1f}{spread(*l1):>8.1f}%")
    print(f"\nOpenBLAS sgemm 1024³, 1 thread: {blas:.1f} GFLOP/s = {blas / peak[0]:.2f} × peak "
          f"({'ok: below the peak' if blas <= min(peak) else 'VIOLATION: above the peak'})")
    if first.frequency:
        nominal = widest.lanes * args.fma_units * 2 * float(first.frequency)
        ratio = peak[0] / nominal
        print(f"lanes × units × 2 × f = {widest.lanes} × {args.fma_units} × 2 × "
              f"{float(first.frequency):.3f} GHz = {nominal:.1f} GFLOP/s; measured/nominal = "
              f"{ratio:.2f} ({'within' if 0.75 <= ratio <= 1.25 else 'OUTSIDE'} ±25%)")
        print(f"implied FMA latency: {float(widest.latency) * float(first.frequency):.2f} cycles")
    print("\nknees (1 thread) vs sysfs cache sizes:")
    for r_i, r in enumerate(runs, 1):
        for level, knee in r.bandwidth.single_thread.knees.items():
            size = int(r.cache(int(level[1:])).size)
            ratio = float(knee) / size
            verdict = "within 2×" if 0.5 <= ratio <= 2 else "OUTSIDE 2×"
            print(f"  run {r_i} {level}: knee {float(knee) / 1024:>9.0f} KiB, cache "
                  f"{size / 1024:>7.0f} KiB, ratio {ratio:.2f} ({verdict})")  # fmt: skip
    print("plateaus, GB/s:")
    for r_i, r in enumerate(runs, 1):
        for kind in ("single_thread", "all_threads"):
            bw = getattr(r.bandwidth, kind)
            levels = "  ".join(f"{k} {float(v):.1f}" for k, v in bw.levels.items())
            print(f"  run {r_i}, {bw.threads} thread(s): {levels}")
    plot(runs, args.plot)
    print(f"\nwrote {args.plot}")
    return 0


def plot(runs: list[HardwareProfile], path: str) -> None:
    """Bandwidth versus working set, both runs, 1 thread and all threads, caches marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r_i, r in enumerate(runs, 1):
        for kind, style in (("single_thread", "-o"), ("all_threads", "--s")):
            bw = getattr(r.bandwidth, kind)
            xs = [float(p.working_set) / 1024 for p in bw.curve]
            ys = [float(p.bandwidth) for p in bw.curve]
            ax.plot(xs, ys, style, markersize=3, label=f"run {r_i}, {bw.threads} thread(s)")
    for c in runs[0].caches:
        if c.kind != "instruction":
            ax.axvline(int(c.size) / 1024, color="gray", linewidth=0.8)
            ax.text(int(c.size) / 1024, ax.get_ylim()[1] * 0.95, f" L{c.level}", color="gray")
    ax.set(xscale="log", yscale="log", xlabel="working set per thread (KiB)",
           ylabel="load bandwidth (GB/s)", title=f"{runs[0].model}: probe bandwidth curves")  # fmt: skip
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    sys.exit(main())
