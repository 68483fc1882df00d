#!/usr/bin/env python3
"""Whole models: autoconfig (dp, greedy and no fusion) vs onnxruntime and OpenVINO, side by side.

For each model (the zoo's VGG-16, MobileNet-V1, EfficientNet-B0, YOLO-V4 at batch 1 by
default, or any ONNX files with static shapes) and
each thread count, the script first builds the model with `autoconfig build` once per
fusion strategy (the build time is measured here, outside any timing; with --cold the
first build of each model starts from an empty kernel cache), computes
onnxruntime's outputs on a fixed random input as the reference, then times every peer
with the harness (scripts/harness.py): each peer in its own fresh process per round,
its thread count through its own control (our build's thread budget; onnxruntime's
intra-op threads, all graph optimizations on; OpenVINO's inference threads, f32
inference and the latency hint, run in the peers' environment of `make peers` and left
out when it is missing), pinned alike. Each peer's outputs are
checked against the reference before timing (max error <= 1e-4 of the range).

Per model and thread count: latency (median ± half the IQR), each peer's peak RSS (the
process' maximum resident set after its first run, one model per process: Python,
the library, the weights, the arena), our build times, kernels per inference, predicted latency over
measured (pred/dp) and Spearman's rank correlation of each kernel's predicted and
measured time (rho: medians of 10 runs, dp); the ratios onnxruntime/ours and
none/greedy/dp, marked where the build is dp's program byte for byte (the same fusion
plan: then the ratio measures only the run-to-run noise). JSON and a plot of the
latencies.

Usage: python scripts/bench_models.py [--profile P] [--threads 1 2] [--rounds 3] [--reps 5]
       [--models mobilenet_v1 model.onnx ...] [--cold] [--json F] [--plot F] [--no-pin]
Needs: pip install -e '.[test,bench]' (onnxruntime, matplotlib).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import harness
from autoconfig.accuracy import ERROR_BOUND, onnxruntime_session, output_error, spearman

FUSIONS = ("dp", "greedy", "none")
PEERS = [f"autoconfig-{f}" for f in FUSIONS] + ["onnxruntime"]
KERNEL_RUNS = 10
"""Runs whose per-kernel times' medians are held against the predictions."""

WARMUP_SECONDS = 0.5
"""Calls before timing, for every peer: a fresh process' first ~150 ms of whole-model
calls ran 10-20% slow. Measured (Zen 5, MobileNet-V1, 2 threads, medians of 20-call
windows): ours 2.72-2.91 ms over the first 60 calls of some processes, 2.47 after;
with the harness' 0.05 s (about 20 calls) bench_models gave ours 2.76-2.88 ms and
onnxruntime 2.58-2.62, with 0.5 s 2.48 and 2.30."""


# ---------------------------------------------------------------- the worker's side


def prepare(peer: str, task: dict, threads: int) -> harness.Prepared:
    """Load the peer's model, check one run against the reference outputs, and return
    the call to time with the process' peak RSS so far."""
    reference = np.load(task["reference"])
    feeds = dict(np.load(task["inputs"]))
    if peer == "onnxruntime":
        session = onnxruntime_session(task["onnx"], threads)
        outputs = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds)))

        def call() -> object:
            return session.run(None, feeds)
    elif peer == "openvino":
        from autoconfig.bench import openvino_request

        request, compiled, precision = openvino_request(task["onnx"], threads)
        result = request.infer(feeds)
        outputs = {port.get_any_name(): np.array(result[port]) for port in compiled.outputs}
        accuracy = {"precision": precision}

        def call() -> object:
            return request.infer(feeds)
    else:
        import autoconfig

        model = autoconfig.load(task["dirs"][peer][str(threads)])
        outputs = model(feeds)
        kernel_ns = model.kernel_medians(feeds, KERNEL_RUNS)
        accuracy = {"spearman": spearman([k["predicted_ns"] for k in model.manifest["kernels"]], kernel_ns)}

        def call() -> object:
            return model(feeds)

    for name, expected in reference.items():
        error, spread = output_error(outputs[name], expected)
        if error > ERROR_BOUND * spread:
            raise SystemExit(f"{peer} {task['model']} {name}: max error {error:.3g} over range {spread:.3g}")
    info = {"peak_rss_mb": round(peak_rss_mb(), 1)}
    return harness.Prepared(call, info if peer == "onnxruntime" else info | accuracy)


def interpreter(peer: str) -> str:
    """OpenVINO runs under the peers' Python (`make peers`); the others under this one."""
    return os.environ[harness.PEERS_ENV] if peer == "openvino" else sys.executable


def environment(peer: str, threads: int) -> dict:
    """The project on the peers' path, for the shared error measure and OpenVINO's settings."""
    return {"PYTHONPATH": str(harness.SCRIPTS.parent)} if peer == "openvino" else {}


def peak_rss_mb() -> float:
    """This process' peak resident set (VmHWM: reset by exec, unlike getrusage's
    ru_maxrss, which keeps the parent's peak across exec and showed the builder's)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("no VmHWM in /proc/self/status: peak RSS needs Linux")


def versions(peer: str) -> dict:
    if peer == "onnxruntime":
        import onnxruntime

        return {"onnxruntime": onnxruntime.__version__}
    if peer == "openvino":
        import openvino

        return {"openvino": openvino.__version__}
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


# ---------------------------------------------------------------- the main side


def model_files(model: str, work: Path) -> dict:
    """The model — a zoo name, written to `work`, or an ONNX file's path — with fixed
    random inputs of both signs and onnxruntime's outputs on them (the reference): the
    task fields every whole-model peer reads."""
    import onnxruntime as ort

    from autoconfig.graph import zoo

    if model.endswith(".onnx"):
        path, name = Path(model), Path(model).stem
    else:
        path, name = work / f"{model}.onnx", model
        zoo.write(model, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape, dtype=np.float32) for i in session.get_inputs()}
    np.savez(work / f"{name}-inputs.npz", **feeds)
    reference = dict(zip((o.name for o in session.get_outputs()), session.run(None, feeds)))
    np.savez(work / f"{name}-reference.npz", **reference)
    return {"model": name, "onnx": str(path), "inputs": str(work / f"{name}-inputs.npz"),
            "reference": str(work / f"{name}-reference.npz")}  # fmt: skip


def build_all(models: list[str], thread_counts: list[int], profile: str | None, work: Path,
              cold: bool) -> list[dict]:  # fmt: skip
    """Per model: the ONNX file, inputs, reference outputs and one build per (fusion,
    threads) with its time; `cold` empties the kernel cache before each model's first."""
    import autoconfig
    from kernels.cache import CACHE_ENV

    tasks = []
    for model in models:
        files = model_files(model, work)
        path, name = Path(files["onnx"]), files["model"]
        if cold:
            os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="autoconfig-cold-cache-", dir=work)
        dirs: dict[str, dict[str, str]] = {f"autoconfig-{fusion}": {} for fusion in FUSIONS}
        builds = {}
        for threads in thread_counts:
            for fusion in FUSIONS:
                out = work / f"{name}-{fusion}-{threads}"
                start = time.perf_counter()
                manifest = autoconfig.compile_model(path, out, profile=profile, fusion=fusion, threads=threads)
                seconds = time.perf_counter() - start
                peer = f"autoconfig-{fusion}"
                dirs[peer][str(threads)] = str(out)
                builds[f"{fusion}/{threads}"] = {"seconds": round(seconds, 2), "kernels": len(manifest["kernels"]),
                                                 "compiled": manifest["kernel_objects"]["compiled"],
                                                 "predicted_ms": manifest["predicted_ns"] / 1e6,
                                                 "program": program_digest(manifest)}  # fmt: skip
                print(f"  built {name} {fusion} {threads}T: {seconds:.1f} s, {len(manifest['kernels'])} kernels, "
                      f"{manifest['kernel_objects']['compiled']} compiled", file=sys.stderr, flush=True)  # fmt: skip
        tasks.append(files | {"dirs": dirs, "builds": builds})
    return tasks


def program_digest(manifest: dict) -> str:
    """The built files' hashes but the report's (which names the fusion strategy): two
    builds with the same digest are the same program, byte for byte."""
    return "".join(f"{name}:{digest};" for name, digest in sorted(manifest["files"].items()) if name != "report.md")


def results(tasks: list[dict], timed: dict[str, list[dict]], threads: int) -> list[dict]:
    """One row per model: each peer's latency (ms), spread, peak RSS; builds; ratios."""
    rows = []
    for i, task in enumerate(tasks):
        ms = {p: timed[p][i]["timing"]["median"] * 1e3 for p in PEERS}
        dp = task["builds"][f"dp/{threads}"]
        rows.append({
            "model": task["model"], "ms": ms,
            "spread": {p: timed[p][i]["timing"]["q3"] / timed[p][i]["timing"]["median"] - 1 for p in PEERS},
            "rss_mb": {p: timed[p][i]["info"]["peak_rss_mb"] for p in PEERS},
            "kernels": {f: task["builds"][f"{f}/{threads}"]["kernels"] for f in FUSIONS},
            "build_s": {f: task["builds"][f"{f}/{threads}"]["seconds"] for f in FUSIONS},
            "same_as_dp": {f: task["builds"][f"{f}/{threads}"]["program"] == dp["program"] for f in FUSIONS[1:]},
            "predicted_ms": dp["predicted_ms"],
            "spearman": timed["autoconfig-dp"][i]["info"]["spearman"],
        })  # fmt: skip
    return rows


SHORT = {"onnxruntime": "ORT", "openvino": "OV"}
"""The other peers' names in the printed table."""


def table(rows: list[dict]) -> list[str]:
    """The printed table: latencies, ratios, memory, builds."""
    others = [p for p in PEERS if p in SHORT]
    head = (f"{'model':<16}{'dp ms':>9}{'greedy':>9}{'none':>9}"
            + "".join(f"{SHORT[p] + ' ms':>9}{SHORT[p] + '/dp':>8}" for p in others) + f"{'greedy/dp':>10}"
            f"{'none/dp':>8}{'pred/dp':>8}{'rho':>6}{'RSS dp':>8}{'RSS ORT':>8}{'kernels d/g/n':>15}{'build s d/g/n':>16}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = r["ms"]
        dp = ms["autoconfig-dp"]

        def same(fusion: str) -> str:  # '=' marks a program byte-identical to dp's: its ratio is noise
            return f"{ms[f'autoconfig-{fusion}'] / dp:.2f}{'=' if r['same_as_dp'][fusion] else ' '}"

        lines.append(
            f"{r['model']:<16}{dp:>9.2f}{ms['autoconfig-greedy']:>9.2f}{ms['autoconfig-none']:>9.2f}"
            + "".join(f"{ms[p]:>9.2f}{ms[p] / dp:>8.2f}" for p in others) + f"{same('greedy'):>10}{same('none'):>8}"
            f"{r['predicted_ms'] / dp:>8.2f}{r['spearman']:>6.2f}"
            f"{r['rss_mb']['autoconfig-dp']:>8.0f}"
            f"{r['rss_mb']['onnxruntime']:>8.0f}{'/'.join(str(r['kernels'][f]) for f in FUSIONS):>15}"
            f"{'/'.join(format(r['build_s'][f], '.1f') for f in FUSIONS):>16}"
        )  # fmt: skip
    return lines


def plot(by_threads: dict[int, list[dict]], path: str) -> None:
    """Latency per model and peer, one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(by_threads), figsize=(7 * len(by_threads), 4.5), squeeze=False)
    for ax, (threads, rows) in zip(axes[0], by_threads.items()):
        x = np.arange(len(rows))
        width = 0.8 / len(PEERS)
        for i, p in enumerate(PEERS):
            ax.bar(x + i * width, [r["ms"][p] for r in rows], width, label=p)
        ax.set_yscale("log")  # VGG-16 takes ~20x MobileNet-V1's time
        ax.set_xticks(x + width * (len(PEERS) - 1) / 2, [r["model"] for r in rows])
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{threads} thread(s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def openvino_installed(python: str | None) -> bool:
    """Whether the peers' Python (`make peers`) exists and imports OpenVINO."""
    found = harness.peers_python(python)
    return found is not None and subprocess.run([found, "-c", "import openvino"], capture_output=True,
                                                check=False).returncode == 0  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_options(parser, "bench-models")
    parser.add_argument("--models", nargs="+", default=None,
                        help="zoo model names or ONNX files (static shapes, float32; default: the four zoo models)")
    parser.add_argument("--cold", action="store_true", help="each model's first build from an empty kernel cache")
    parser.add_argument("--peers-python", default=None,
                        help=f"the peers' Python, for OpenVINO (default {harness.PEERS_PYTHON}, from `make peers`)")
    args = parser.parse_args()
    if openvino_installed(args.peers_python):
        PEERS.append("openvino")
    else:
        print("OpenVINO: not in the peers' environment (run `make peers`); its column is left out", file=sys.stderr)

    from autoconfig.graph import zoo

    profile, profile_arg, report = harness.start(args, "bench_models")
    thread_counts = args.threads or sorted({1, int(profile.cores)})
    by_threads: dict[int, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="autoconfig-bench-models-") as tmp:
        tasks = build_all(args.models or list(zoo.MODELS), thread_counts, profile_arg, Path(tmp), args.cold)
        for threads in thread_counts:
            timed = {p: [] for p in PEERS}
            for task in tasks:  # a process per model too: a peak RSS is one model's
                one = harness.measure("bench_models", PEERS, [task], threads, rounds=args.rounds, reps=args.reps,
                                      pin=not args.no_pin)  # fmt: skip
                for p in PEERS:
                    timed[p] += one[p]
            rows = by_threads[threads] = results(tasks, timed, threads)
            print("\n" + report.heading(threads, {p: timed[p][0]["versions"] for p in PEERS}))
            print(f"latency: median of {args.rounds} processes x {args.reps} samples per peer; RSS: peak resident "
                  "MB of the peer's process; build s: this run's builds (the first of a model "
                  f"{'from an empty kernel cache' if args.cold else 'with the kernel cache as found'}); "
                  "'=': the same program as dp's, byte for byte (its ratio is run-to-run noise)")  # fmt: skip
            print("\n".join(table(rows)), flush=True)
            report.tables.append({"threads": threads, "rows": rows})
            for r in rows:
                report.summary.append(f"{threads}T {r['model']}: " + ", ".join(
                    f"{p}/dp {r['ms'][p] / r['ms']['autoconfig-dp']:.2f}" for p in PEERS if p in SHORT))  # fmt: skip
    report.save(args.json)
    plot(by_threads, args.plot)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
