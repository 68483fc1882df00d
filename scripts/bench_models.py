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
inference and the latency hint; IREE's task pool, llvm-cpu for this CPU, the fastest of
a few flag presets measured in the same run (`iree_peer.py`, compile times reported);
TVM's Relax build of the model, untuned (`tvm_peer.py`; MetaSchedule tuning takes hours
per model: `compare_tvm.py` tunes); OpenVINO, IREE and TVM run in the peers' environment of `make peers` and are left out when
it is missing), pinned alike. Each peer's outputs are checked against the reference
before timing (max error <= 1e-4 of the range); a peer that fails on a model (or
answers wrong) is a cell with its one-line reason, not the end of the run.

Per model and thread count: latency (median ± half the IQR), each peer's peak RSS (the
process' maximum resident set after its first run, one model per process: Python,
the library, the weights, the arena), our build times, kernels per inference, predicted latency over
measured (pred/dp) and Spearman's rank correlation of each kernel's predicted and
measured time (rho: medians of 10 runs, dp); the ratios onnxruntime/ours and
none/greedy/dp, marked where the build is dp's program byte for byte (the same fusion
plan: then the ratio measures only the run-to-run noise). Below the table, greedy/dp
and none/dp round by round (a round's processes run one after another, so the ratio
of two of them escapes the host's slower drifts): the median over rounds,
in how many dp was faster, the range. JSON and a plot of the latencies.

Usage: python scripts/bench_models.py [--profile P] [--threads 1 2] [--rounds 3] [--reps 5]
       [--models mobilenet_v1 model.onnx ...] [--fusions dp greedy none]
       [--peers onnxruntime openvino iree tvm] [--cold] [--json F] [--plot F] [--no-pin]
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
from autoconfig.accuracy import ERROR_BOUND, onnxruntime_session, output_error, sample_inputs, spearman

FUSIONS = ["dp", "greedy", "none"]
"""Our builds timed, dp first (every ratio is over dp's latency); --fusions narrows them."""
OTHERS = ("onnxruntime", "openvino", "iree", "tvm")
"""The other peers; --peers narrows them (those of the peers' environment need it)."""
PEERS: list[str] = []
"""The columns of this run: our builds', then the other peers' (set in main)."""
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
    elif peer == "tvm":
        import tvm_peer

        call, outputs, accuracy = tvm_peer.prepared(task["onnx"], Path(task["inputs"]).parent, feeds, threads)
    elif peer == "iree":
        import iree_peer

        call, outputs, accuracy = iree_peer.prepared(task["onnx"], Path(task["inputs"]).parent, feeds, threads)
    elif peer == "openvino":
        from autoconfig.bench import openvino_request

        request, compiled, precision = openvino_request(task["onnx"], threads)
        result = request.infer(feeds)
        outputs = {next((n for n in port.get_names() if n in reference), port.get_any_name()): np.array(result[port])
                   for port in compiled.outputs}  # a port may carry several tensor names
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


APART = ("openvino", "iree", "tvm")
"""Peers run under the peers' Python (`make peers`), apart from the project's."""


def interpreter(peer: str) -> str:
    return os.environ[harness.PEERS_ENV] if peer in APART else sys.executable


def environment(peer: str, threads: int) -> dict:
    """The project on the peers' path, for the shared error measure and OpenVINO's
    settings; TVM's thread pool size."""
    return ({"PYTHONPATH": str(harness.SCRIPTS.parent)} if peer in APART else {}) | (
        {"TVM_NUM_THREADS": str(threads)} if peer == "tvm" else {})


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
    if peer == "iree":
        from importlib import metadata

        return {"iree": metadata.version("iree-base-runtime")}
    if peer == "tvm":
        import tvm

        return {"tvm": tvm.__version__}
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


# ---------------------------------------------------------------- the main side


def model_files(model: str, work: Path) -> dict:
    """The model — a zoo name, written to `work`, or an ONNX file's path — with fixed
    random inputs (`accuracy.sample_input`: floats of both signs, ids in range, masks
    with padding) and onnxruntime's outputs on them (the reference): the task fields
    every whole-model peer reads."""
    import onnxruntime as ort

    from autoconfig.graph import zoo
    from autoconfig.graph.onnx_import import load_onnx

    if model.endswith(".onnx"):
        path, name = Path(model), Path(model).stem
    else:
        path, name = work / f"{model}.onnx", model
        zoo.write(model, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    graph = load_onnx(path)
    feeds = sample_inputs([{"name": name, "shape": graph.types[name].shape, "dtype": graph.types[name].dtype,
                            "ids_below": graph.ids_below.get(name, 0)} for name in graph.inputs])  # fmt: skip
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
    """One row per model: each peer's latency (ms), spread, peak RSS (None where the peer
    failed, with its reason); builds; ratios."""
    rows = []
    for i, task in enumerate(tasks):
        ran = [p for p in PEERS if "timing" in timed[p][i]]
        ms = {p: timed[p][i]["timing"]["median"] * 1e3 if p in ran else None for p in PEERS}
        dp = task["builds"][f"dp/{threads}"]
        rounds = {p: timed[p][i]["rounds"] for p in ran}
        rows.append({
            "model": task["model"], "ms": ms, "failed": {p: timed[p][i]["failed"] for p in PEERS if p not in ran},
            "spread": {p: timed[p][i]["timing"]["q3"] / timed[p][i]["timing"]["median"] - 1 for p in ran},
            "rss_mb": {p: timed[p][i]["info"]["peak_rss_mb"] for p in ran},
            "peer_info": {p: timed[p][i]["info"] for p in ran if p in APART},
            "kernels": {f: task["builds"][f"{f}/{threads}"]["kernels"] for f in FUSIONS},
            "build_s": {f: task["builds"][f"{f}/{threads}"]["seconds"] for f in FUSIONS},
            "same_as_dp": {f: task["builds"][f"{f}/{threads}"]["program"] == dp["program"] for f in FUSIONS[1:]},
            "by_round": {f: [x / d for x, d in zip(rounds[f"autoconfig-{f}"], rounds["autoconfig-dp"])]
                         for f in FUSIONS[1:] if {f"autoconfig-{f}", "autoconfig-dp"} <= set(ran)},
            "predicted_ms": dp["predicted_ms"],
            "spearman": timed["autoconfig-dp"][i].get("info", {}).get("spearman", float("nan")),
        })  # fmt: skip
    return rows


SHORT = {"onnxruntime": "ORT", "openvino": "OV", "iree": "IREE", "tvm": "TVM"}
"""The other peers' names in the printed table."""


def _cell(value: float | None, width: int, digits: int = 2, mark: str = "") -> str:
    return f"{format(value, f'.{digits}f') + mark:>{width}}" if value is not None else f"{'fail':>{width}}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b is not None else None


def table(rows: list[dict]) -> list[str]:
    """The printed table: latencies, ratios, memory, builds; then each failed peer's
    reason, IREE's preset per model, and the geometric means of the ratios."""
    others = [p for p in PEERS if p in SHORT]
    width = max([16, *(len(r["model"]) + 1 for r in rows)])
    short = "/".join(f[0] for f in FUSIONS)
    head = (f"{'model':<{width}}{'dp ms':>9}" + "".join(f"{f:>9}" for f in FUSIONS[1:])
            + "".join(f"{SHORT[p] + ' ms':>9}{SHORT[p] + '/dp':>8}" for p in others)
            + "".join(f"{f + '/dp':>10}" for f in FUSIONS[1:]) + f"{'pred/dp':>8}{'rho':>6}{'RSS dp':>8}"
            f"{'RSS ORT':>8}{'kernels ' + short:>15}{'build s ' + short:>16}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = r["ms"]
        dp = ms["autoconfig-dp"]

        def same(fusion: str) -> str:  # '=' marks a program byte-identical to dp's: its ratio is noise
            return _cell(_ratio(ms[f"autoconfig-{fusion}"], dp), 0, mark="=" if r["same_as_dp"][fusion] else " ")

        lines.append(
            f"{r['model']:<{width}}{_cell(dp, 9)}" + "".join(_cell(ms[f"autoconfig-{f}"], 9) for f in FUSIONS[1:])
            + "".join(f"{_cell(ms[p], 9)}{_cell(_ratio(ms[p], dp), 8)}" for p in others)
            + "".join(f"{same(f):>10}" for f in FUSIONS[1:])
            + f"{_cell(_ratio(r['predicted_ms'], dp), 8)}{r['spearman']:>6.2f}"
            f"{_cell(r['rss_mb'].get('autoconfig-dp'), 8, 0)}{_cell(r['rss_mb'].get('onnxruntime'), 8, 0)}"
            f"{'/'.join(str(r['kernels'][f]) for f in FUSIONS):>15}"
            f"{'/'.join(format(r['build_s'][f], '.1f') for f in FUSIONS):>16}"
        )  # fmt: skip
    lines += [f"  {r['model']} {p}: {why}" for r in rows for p, why in r["failed"].items()]
    lines += [f"  {r['model']} {f}/dp round by round: {harness.round_by_round(x)}"
              for r in rows for f, x in r["by_round"].items() if x]
    lines += [f"  {r['model']} IREE: preset {i['preset']} (ms per preset {i['trial_ms']}, compile s {i['compile_s']})"
              + (f"; not compiled: {i['failed_presets']}" if i.get("failed_presets") else "")
              for r in rows if (i := r["peer_info"].get("iree"))]  # fmt: skip
    for p in others:
        ratios = [x for r in rows if (x := _ratio(r["ms"][p], r["ms"]["autoconfig-dp"])) is not None]
        lines.append(f"  geomean {SHORT[p]}/dp: {harness.geomean(ratios):.2f} over {len(ratios)} model(s), "
                     f"lowest {min(ratios, default=float('nan')):.2f}")  # fmt: skip
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
            ax.bar(x + i * width, [r["ms"][p] or 0 for r in rows], width, label=p)  # a failed peer: no bar
        ax.set_yscale("log")  # VGG-16 takes ~20x MobileNet-V1's time
        ax.set_xticks(x + width * (len(PEERS) - 1) / 2, [r["model"] for r in rows])
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{threads} thread(s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def installed_apart(python: str | None, module: str) -> bool:
    """Whether the peers' Python (`make peers`) exists and imports `module`."""
    found = harness.peers_python(python)
    return found is not None and subprocess.run([found, "-c", f"import {module}"], capture_output=True,
                                                check=False).returncode == 0  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_options(parser, "bench-models")
    parser.add_argument("--models", nargs="+", default=None,
                        help="zoo model names or ONNX files (static shapes; float32, int64 ids and masks; default: the four zoo models)")
    parser.add_argument("--cold", action="store_true", help="each model's first build from an empty kernel cache")
    parser.add_argument("--peers-python", default=None,
                        help=f"the peers' Python, for OpenVINO (default {harness.PEERS_PYTHON}, from `make peers`)")
    parser.add_argument("--fusions", nargs="+", default=list(FUSIONS), choices=FUSIONS,
                        help="our builds to time (dp always: the ratios are over it)")
    parser.add_argument("--peers", nargs="+", default=OTHERS, choices=OTHERS, help="the other peers to time")
    args = parser.parse_args()
    FUSIONS[:] = ["dp", *(f for f in args.fusions if f != "dp")]
    PEERS[:] = [f"autoconfig-{f}" for f in FUSIONS] + (["onnxruntime"] if "onnxruntime" in args.peers else [])
    for peer, module in (("openvino", "openvino"), ("iree", "iree.runtime"), ("tvm", "tvm")):
        if peer not in args.peers:
            continue
        if installed_apart(args.peers_python, module):
            PEERS.append(peer)
        else:
            print(f"{peer}: not in the peers' environment (run `make peers`); its column is left out", file=sys.stderr)

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
                                      pin=not args.no_pin, tolerate=True)  # fmt: skip
                for p in PEERS:
                    timed[p] += one[p]
            rows = by_threads[threads] = results(tasks, timed, threads)
            print("\n" + report.heading(threads, {p: next((t["versions"] for t in timed[p] if "versions" in t), {})
                                                    for p in PEERS}))  # fmt: skip
            print(f"latency: median of {args.rounds} processes x {args.reps} samples per peer; RSS: peak resident "
                  "MB of the peer's process; build s: this run's builds (the first of a model "
                  f"{'from an empty kernel cache' if args.cold else 'with the kernel cache as found'}); "
                  "'=': the same program as dp's, byte for byte (its ratio is run-to-run noise)")  # fmt: skip
            print("\n".join(table(rows)), flush=True)
            report.tables.append({"threads": threads, "rows": rows})
            for r in rows:
                report.summary.append(f"{threads}T {r['model']}: " + ", ".join(
                    f"{p}/dp {x:.2f}" if (x := _ratio(r["ms"][p], r["ms"]["autoconfig-dp"])) is not None
                    else f"{p} failed" for p in PEERS if p in SHORT))  # fmt: skip
    report.save(args.json)
    plot(by_threads, args.plot)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
