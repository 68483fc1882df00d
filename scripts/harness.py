#!/usr/bin/env python3
"""The benchmark harness every script in scripts/ times with.

Why processes: thread pools that share a process corrupt each other's figures (with
ours, OpenBLAS and torch in one process, 2-thread runs measured 1-22 GFLOP/s where
each alone reaches 180-330). So every peer is timed in its own fresh interpreter,
one at a time: no other peer's workers exist while it runs.

How a run goes: a benchmark module (a script in scripts/) names its peers and its
tasks (JSON-able dicts, e.g. a matmul shape) and defines
``prepare(peer, task, threads) -> Prepared``: builds the inputs and the call outside
the timed region (and checks the result), and ``versions(peer) -> dict``; optionally
``environment(peer, threads) -> dict`` of variables for the peer's process. `measure` then starts, for each round and
each peer (the order rotating from round to round), ``python harness.py --worker``
with the peer's thread count set through the peer's own controls (OMP and MKL
environment variables before import, torch.set_num_threads, our thread budget, OpenBLAS's
variable where a benchmark times OpenBLAS: one thread elsewhere, HELPER_THREADS),
pinned to the first `threads` CPUs when pinning is asked for, the same CPUs for every
peer; ``interpreter(peer) -> str`` may name another Python for a peer whose library
lives in an environment of its own (TVM: scripts/tvm_peer.py). The worker times each task: warm-up by time
(the module's ``WARMUP_SECONDS`` if it sets one, else this one's), then repetitions; the harness
reports per (peer, task) the median over all rounds' repetitions with the
interquartile spread, prints a table naming the host, profile, thread count and
versions, and writes everything as JSON for comparison across hosts.

Usage (from a benchmark script): ``harness.measure(module, peers, tasks, threads, ...)``;
``harness.Report`` for the table and JSON.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for annotations; the functions import numpy where they use it
    import numpy as np

SCRIPTS = Path(__file__).resolve().parent

WARMUP_SECONDS = 0.05
"""Calls before timing, by time rather than count: after a pause a halted vCPU and
sleeping workers take milliseconds to come back (one warm-up call left 256³ at 2
threads measuring 63 GFLOP/s for us and 90 for OpenBLAS, 125 and 122 when warm)."""

MIN_SAMPLE_SECONDS = 2e-4
"""A sample repeats a short call until it lasts this long: perf_counter's own cost
and jitter (~0.1 µs) stay below 0.1% of a sample."""

PINNING = """Runs are pinned to the first `threads` CPUs, every peer alike, when asked:
unpinned, the scheduler moved a one-thread run between the two vCPUs of the
development machine and the same 256³ kernel measured 69-82 GFLOP/s from one process
to the next (each move leaves the working set in the other core's L2); pinned, 82-83
in six processes.

Pinning inside the guest does not pin the host: on the development VM a 2-thread run
sometimes has both threads at half speed for a whole process, or until a wake-up
moves them (both vCPUs on one physical core, it seems). Seen for every peer alike
after the second vCPU sat idle (784x256x256: OpenBLAS 500 -> 970-1020 µs, ours 460 ->
910), in about one process in six; the samples of all rounds are pooled, so a round
so disturbed moves the median only when most rounds are."""

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Each peer's own thread control, read once when its library loads: set in the
worker's environment before it starts."""

HELPER_THREADS = {"OPENBLAS_NUM_THREADS": "1"}
"""numpy's OpenBLAS runs one thread in a worker unless the benchmark times OpenBLAS
itself (its `environment` says so): in a peer's process numpy only builds inputs and
checks results, and OpenBLAS's idle threads spin for a while after each call, taking
a core from the peer timed. With it at the run's thread count, our Winograd layers,
whose filter transform is a numpy product at build time, measured at 2 threads
2-5x their time alone in bench_conv (YOLO-V4's 256->256 on 26²: 5162 µs, 940 with one
OpenBLAS thread)."""


@dataclass
class Prepared:
    """A task made ready to time: the call, and facts about it for the table (our
    configuration, its build time)."""

    call: Callable[[], object]
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Timing:
    """Seconds per call: the median and the quartiles over all samples."""

    median: float
    q1: float
    q3: float
    samples: int

    @property
    def spread(self) -> float:
        """Half the interquartile range as a fraction of the median."""
        return (self.q3 - self.q1) / 2 / self.median


def time_call(call: Callable[[], object], reps: int, warmup: float = WARMUP_SECONDS,
              min_sample: float = MIN_SAMPLE_SECONDS) -> list[float]:  # fmt: skip
    """`reps` samples of seconds per call, each at least `min_sample` seconds of calls,
    after `warmup` seconds of calls."""
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < warmup or calls == 0:
        call()
        calls += 1
    once = (time.perf_counter() - start) / calls
    repeat = max(1, math.ceil(min_sample / max(once, 1e-9)))
    samples = []
    for _ in range(reps):
        begin = time.perf_counter()
        for _ in range(repeat):
            call()
        samples.append((time.perf_counter() - begin) / repeat)
    return samples


def summarize(samples: Sequence[float]) -> Timing:
    """Median and quartiles of `samples`."""
    q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive") if len(samples) > 1 else [samples[0]] * 3
    return Timing(median, q1, q3, len(samples))


# ---------------------------------------------------------------- host and versions


def host() -> dict:
    """What the figures were taken on: lscpu's model name, CPUs, kernel, Python."""
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    except OSError:
        pass
    return {
        "model_name": model or platform.processor(),
        "cpus": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": _git_commit(),
        "overrides": {k: os.environ[k] for k in KERNEL_OVERRIDES if k in os.environ},
    }


KERNEL_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
"""Variables that force a peer's kernel choice instead of its own detection: some hosts
set OPENBLAS_CORETYPE=Haswell (older OpenBLAS builds misdetect their CPUs), which on a
Zen 5 core held OpenBLAS to AVX2 at 133 GFLOP/s where its own choice (SkylakeX) ran
252 at 1024³. A run records them; a table with an OpenBLAS peer says so in its heading."""


def _git_commit() -> str:
    out = subprocess.run(["git", "-C", str(SCRIPTS), "describe", "--always", "--dirty"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    return out.stdout.strip()


def library_versions() -> dict:
    """numpy and its BLAS (threadpoolctl's view: OpenBLAS version and kernel family)."""
    import numpy as np
    from threadpoolctl import threadpool_info

    versions = {"numpy": np.__version__}
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            versions[pool["internal_api"]] = f"{pool.get('version')} ({pool.get('architecture')})"
    return versions


# ---------------------------------------------------------------- processes


def on_a_line(array: np.ndarray) -> np.ndarray:
    """`array` if it starts on a cache line, else a copy that does: a benchmark's
    operands as a framework holds them (torch's allocator, TVM's runtime and ours place
    tensors on 64-byte boundaries; numpy starts a large array 16 bytes off one), the same
    arrays for every peer. On numpy's, our kernels split vector loads across lines or
    copy an operand read many times to an aligned buffer on every call."""
    import numpy as np

    from autoconfig.runtime import AlignedStaging

    return AlignedStaging(array.shape)(array) if array.dtype == np.float32 else array


def worker_cpus(threads: int, pin: bool) -> list[int] | None:
    """The CPUs a `threads`-thread run is pinned to: the first `threads` of ours (see
    PINNING), or None for no pinning."""
    if not pin:
        return None
    return sorted(os.sched_getaffinity(0))[:threads]


def add_run_options(parser, name: str) -> None:
    """The options every benchmark script takes: profile, thread counts, repetitions,
    rounds, pinning, and where the JSON and plot go (`name`.json / .png by default)."""
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts to run (default: 1 and the profile's cores)")  # fmt: skip
    parser.add_argument("--reps", type=int, default=5, help="timed samples per round")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per peer (samples pooled)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin runs to CPUs (see harness.PINNING)")
    parser.add_argument("--json", default=f"{name}.json", help="results file")
    parser.add_argument("--plot", default=f"{name}.png")


def require_plotting(benchmark: str) -> None:
    """Stop before anything runs when the plot could not be drawn at the end."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit(f"{benchmark}: its plot needs matplotlib (pip install -e '.[bench]'); nothing was run")


def start(args, benchmark: str):
    """After `add_run_options`: the profile (this machine's if none was given), its
    path for the workers (None: theirs too), and the run's Report; stops at once
    without matplotlib (`require_plotting`)."""
    from autoconfig.resolve import resolve_profile

    require_plotting(benchmark)
    profile = resolve_profile(args.profile)
    path = str(Path(args.profile).resolve()) if args.profile else None
    report = Report(benchmark, profile.name,
                    settings={"rounds": args.rounds, "reps": args.reps, "pinned": not args.no_pin})  # fmt: skip
    return profile, path, report


class PeerFailed(Exception):
    """A peer's worker failed; the message is its one-line reason."""


def measure(module: str, peers: Sequence[str], tasks: Sequence[dict], threads: int, *,
            rounds: int, reps: int, pin: bool, progress: bool = True,
            tolerate: bool = False) -> dict[str, list[dict]]:  # fmt: skip
    """Per peer, per task: {'timing', 'rounds', 'info', 'versions'}; each peer timed in
    `rounds` fresh processes of its own (peers alternating), the samples of all rounds
    pooled ('rounds': each round's median, for ratios between peers round by round).
    A peer whose worker fails ends the run, or with `tolerate` is {'failed': reason}
    for every task (and not run again)."""
    samples: dict[str, list[list[float]]] = {p: [[] for _ in tasks] for p in peers}
    medians: dict[str, list[list[float]]] = {p: [[] for _ in tasks] for p in peers}
    infos: dict[str, list[dict]] = {p: [{} for _ in tasks] for p in peers}
    versions: dict[str, dict] = {}
    failed: dict[str, str] = {}
    for number in range(rounds):
        order = list(peers[number % len(peers):]) + list(peers[: number % len(peers)])
        for peer in (p for p in order if p not in failed):
            if progress:
                print(f"  round {number + 1}/{rounds}: {peer}, {threads} thread(s), {len(tasks)} tasks",
                      file=sys.stderr, flush=True)  # fmt: skip
            try:
                out = run_worker(module, peer, tasks, threads, reps, pin)
            except PeerFailed as err:
                if not tolerate:
                    sys.exit(str(err))
                failed[peer] = str(err)
                continue
            versions[peer] = out["versions"]
            for i, row in enumerate(out["rows"]):
                samples[peer][i] += row["samples"]
                medians[peer][i].append(statistics.median(row["samples"]))
                infos[peer][i] = infos[peer][i] or row["info"]
    return {
        peer: [{"failed": failed[peer]} if peer in failed else
               {"timing": asdict(summarize(samples[peer][i])), "rounds": medians[peer][i], "info": infos[peer][i],
                "versions": versions[peer]}
               for i in range(len(tasks))]
        for peer in peers
    }  # fmt: skip


PEERS_PYTHON = SCRIPTS.parent / ".peers" / "bin" / "python"
PEERS_ENV = "AUTOCONFIG_PEERS_PYTHON"
"""Where the workers of the peers kept apart from the project (`make peers`) find the
peers' Python (set by `peers_python`)."""


def peers_python(path: str | None = None) -> str | None:
    """The peers' Python (set for the workers too), or None when `make peers` was not run."""
    python = Path(path) if path else PEERS_PYTHON
    if not python.exists():
        return None
    os.environ[PEERS_ENV] = str(python)
    return str(python)


def run_worker(module: str, peer: str, tasks: Sequence[dict], threads: int, reps: int, pin: bool) -> dict:
    """Time `tasks` for one peer in a fresh interpreter; its JSON answer."""
    env = dict(os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads)), **HELPER_THREADS)
    env.update(getattr(importlib.import_module(module), "environment", lambda *_: {})(peer, threads))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), env.get("PYTHONPATH", "")]))
    job = {"module": module, "peer": peer, "tasks": list(tasks), "threads": threads, "reps": reps,
           "cpus": worker_cpus(threads, pin)}  # fmt: skip
    python = getattr(importlib.import_module(module), "interpreter", lambda _: sys.executable)(peer)
    done = subprocess.run([python, str(Path(__file__).resolve()), "--worker"], input=json.dumps(job),
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["no output"]
        why = next((line for line in reversed(lines) if "error" in line.lower()), lines[-1])  # a compiler's last words are often advice
        raise PeerFailed(f"{peer} worker failed (exit {done.returncode}): {why.strip()[:300]}")
    return json.loads(done.stdout)


def worker_main() -> int:
    """The worker: read a job on stdin, pin, import the benchmark module, time each task."""
    job = json.loads(sys.stdin.read())
    if job["cpus"] is not None:
        os.sched_setaffinity(0, job["cpus"])
    bench = importlib.import_module(job["module"])
    rows = []
    for task in job["tasks"]:
        prepared = bench.prepare(job["peer"], task, job["threads"])
        warmup = getattr(bench, "WARMUP_SECONDS", WARMUP_SECONDS)
        rows.append({"samples": time_call(prepared.call, job["reps"], warmup), "info": prepared.info})
        del prepared  # free the task's inputs before the next one's
    versions = bench.versions(job["peer"])
    json.dump({"rows": rows, "versions": versions}, sys.stdout)
    return 0


# ---------------------------------------------------------------- reporting


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def round_by_round(ratios: Sequence[float]) -> str:
    """Ratios of two peers' latencies (other over dp), one per round: their median, in
    how many rounds dp was faster, their range."""
    return (f"median {statistics.median(ratios):.3f}, dp faster in {sum(r > 1 for r in ratios)} of {len(ratios)} "
            f"rounds, {min(ratios):.3f} to {max(ratios):.3f}")


@dataclass
class Report:
    """A benchmark's results with where they were taken; printed and saved as JSON."""

    benchmark: str
    profile: str
    host: dict = field(default_factory=host)
    settings: dict = field(default_factory=dict)
    tables: list[dict] = field(default_factory=list)  # {'title', 'threads', 'rows'}
    versions: dict[str, dict] = field(default_factory=dict)  # per thread count: each peer's versions
    summary: list[str] = field(default_factory=list)

    def heading(self, threads: int, versions: dict[str, dict]) -> str:
        """The lines naming the host, profile, threads and the peers' versions (kept for
        the JSON too), and any variable forcing the kernel of an OpenBLAS peer (KERNEL_OVERRIDES)."""
        self.versions[str(threads)] = versions
        names = "; ".join(f"{peer}: " + ", ".join(f"{k} {v}" for k, v in sorted(vs.items()))
                          for peer, vs in versions.items())  # fmt: skip
        settings = ", ".join(f"{k} {v}" for k, v in self.settings.items())
        forced = " ".join(f"{k}={v}" for k, v in self.host.get("overrides", {}).items())
        blas = any("openblas" in name.lower() for vs in versions.values() for name in vs)
        note = f"\nnote: {forced} in the environment forces OpenBLAS's kernel (unset for its own)" if forced and blas else ""
        return (f"host {self.host['model_name']!r} ({self.host['cpus']} CPUs), profile {self.profile}, "
                f"{threads} thread(s); {settings}\nversions: {names}{note}")  # fmt: skip

    def save(self, path: str | Path) -> None:
        """Write the report as JSON."""
        write_json(path, asdict(self))


def write_json(path: str | Path, data: dict) -> None:
    """`data` as JSON at `path`: written to a temp file, then renamed into place."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    tmp.replace(path)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit(__doc__)
