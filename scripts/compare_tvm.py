#!/usr/bin/env python3
"""Side by side with TVM: its real fusion, MetaSchedule-tuned operators, a whole model.

Needs the peers' environment (`make peers`: apache-tvm 0.27, MetaSchedule, xgboost-cpu
in .peers/, apart from the project's); TVM's side runs there (scripts/tvm_peer.py),
ours in this one. Three parts, each run once per invocation:

1. fusion: kernels per inference on the zoo models (and any ONNX file given with
   --onnx): TVM's Relax pipelines — ``default`` (what ``tvm.compile`` does on a CPU:
   batch normalization stays an op of its own) and ``tuning`` (DecomposeOpsForInference
   first, as its MetaSchedule pipeline does) — against our build with greedy and with
   DP fusion (the kernels the built library calls, the layout transforms between
   channel-blocked and NCHW kernels among them: TVM's pipelines add none). Fusion
   ratio = the ONNX file's node count / fused groups (kernels less those transforms),
   one numerator for every column. A squeeze-excitation scale (x · sigmoid(conv(s)))
   is fused by TVM into the gate convolution's group (a 1×1 result broadcast over the
   whole tensor; checked by listing its groups), by our greedy rules (TVM's, restricted
   to what our code generator emits) into the 1×1 convolution after it, as its
   prologue: one kernel fewer either way; our DP takes the prologues its cost model
   says pay. Where greedy and TVM's tuning pipeline differ on the zoo, the reason: in
   YOLO-V4 TVM fuses each Resize into the Concat after it, while our build removes
   the Concats themselves: their producers write into their slice of the output.
2. operators: matmuls (squares and zoo shapes) and about eight zoo convolutions,
   depthwise included: TVM's TE/TOPI operator tuned by MetaSchedule at each trial
   budget on all cores, against our generated kernel; latency of each (harness: each
   peer in its own process, pinned alike; each reading operands and writing an output
   made once on cache-line boundaries, `harness.on_a_line`: the .npz file's arrays start
   16-48 bytes off a line, where a tiled 256³ matmul at 2 threads measured 83-90 µs, against
   72-74 from aligned copies on the Zen 5 VM), TVM's tuning time against our build time
   (the median of `BUILD_REPS` builds, each from an empty kernel cache) and our
   decision time (the analytic model alone).
3. model: MobileNet-V1 end to end — TVM untuned, TVM tuned by MetaSchedule (trials per
   task as given), onnxruntime, ours (DP fusion); latency and build/tuning times.

Every output is checked against a reference (numpy in float64 for matmuls,
onnxruntime otherwise) before it is timed. Prints tables with the host, profile,
thread count and trial budgets; writes JSON and a plot.

Usage: python scripts/compare_tvm.py [--quick] [--parts fusion operators model]
       [--trials 64 256] [--model-trials 64] [--models ...] [--onnx F ...]
       [--peers .peers/bin/python] [--profile P] [--threads N] [--rounds 3] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import harness
from bench_matmul import describe

ROOT = harness.SCRIPTS.parent
PEERS_ENV = harness.PEERS_ENV
PEERS_PYTHON = harness.PEERS_PYTHON

MATMULS = ["256", "512", "1024", "vgg16 fc7", "mobilenet pw13 7²", "effnet expand 14²", "yolov4 csp 52²",
           "yolov4 head 52²"]  # fmt: skip
CONVS = ["conv 3x3/2 3->32 224²", "conv 3x3/1 128->128 52²", "conv 3x3/1 512->512 14²", "conv 3x3/2 256->512 26²",
         "conv 1x1/1 128->128 56²", "dw 3x3/1 32 112²", "dw 3x3/2 64 112²", "dw 5x5/1 672 14²"]  # fmt: skip
QUICK = {"matmuls": ["256"], "convs": ["dw 3x3/1 32 112²"], "trials": [8, 16], "model_trials": 2,
         "models": ["mobilenet_v1"]}  # fmt: skip
"""--quick: one of each kind at tiny budgets, to see that every part runs (its figures mean little)."""
WHOLE_MODEL = "mobilenet_v1"


# ---------------------------------------------------------------- the workers' side


def interpreter(peer: str) -> str:
    """TVM's peers run under the peers' Python; ours and onnxruntime under this one."""
    return os.environ[PEERS_ENV] if peer.startswith("tvm") else sys.executable


def environment(peer: str, threads: int) -> dict:
    """TVM's thread pool size; the project on the path for the shared error measure."""
    return {"TVM_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)} if peer.startswith("tvm") else {}


def prepare(peer: str, task: dict, threads: int) -> harness.Prepared:
    """The peer's call on the task's inputs, its output checked against the reference."""
    if task["kind"] == "model" and not peer.startswith("tvm"):
        import bench_models

        return bench_models.prepare("onnxruntime" if peer == "onnxruntime" else "autoconfig-dp", task, threads)
    if task["kind"] == "model":  # its first output against onnxruntime's
        data = {"x": np.load(task["input"])}
        expected = next(iter(np.load(task["reference"]).values()))
    else:
        data = dict(np.load(task["data"]))
        expected = data.pop("expected")
    if peer.startswith("tvm"):
        call = _tvm_call(task, task["libs"][peer], data)
        return _checked(peer, task, call, expected)
    from autoconfig.runtime import aligned_array  # ours: not in the peers' environment

    out = aligned_array(int(np.prod(task["output"]))).reshape(task["output"])  # made once, as TVM's output is
    if task["kind"] == "matmul":
        from autoconfig import compile_matmul

        kernel = compile_matmul(task["m"], task["n"], task["k"], profile=task["profile"], threads=threads)
        a, b = harness.on_a_line(data["a"]), harness.on_a_line(data["b"])

        def call() -> np.ndarray:
            return kernel(a, b, out=out)
    else:
        import bench_conv

        call, _ = bench_conv.ours_call(task, {name: harness.on_a_line(x) for name, x in data.items()}, threads, out=out)
    return _checked(peer, task, call, expected)


def _checked(peer: str, task: dict, call, expected: np.ndarray) -> harness.Prepared:
    """`call` for the harness, once its output is checked against `expected`."""
    from autoconfig.accuracy import ERROR_BOUND, output_error

    result = call()
    error, spread = output_error(result.numpy() if hasattr(result, "numpy") else np.asarray(result), expected)
    if error > ERROR_BOUND * spread:
        raise SystemExit(f"{task['name']}: {peer}'s output is wrong (max error {error:.3g} over range {spread:.3g})")
    return harness.Prepared(call)


def _tvm_call(task: dict, library: str, data: dict[str, np.ndarray]):
    """A call of TVM's exported operator (inputs and output tensors made once) or of the
    whole model through Relax's virtual machine; returns TVM's output tensor."""
    import tvm

    module = tvm.runtime.load_module(library)
    device = tvm.cpu()
    if task["kind"] == "model":
        from tvm import relax

        vm = relax.VirtualMachine(module, device)
        x = tvm.runtime.tensor(data["x"], device)
        return lambda: vm["main"](x)
    inputs = [tvm.runtime.tensor(data[name], device) for name in task["inputs"]]
    out = tvm.runtime.tensor(np.zeros(task["output"], np.float32), device)
    function = module["main"]

    def call() -> object:
        function(*inputs, out)
        return out

    return call


def versions(peer: str) -> dict:
    if peer.startswith("tvm"):
        import tvm

        return {"tvm": tvm.__version__}
    if peer == "onnxruntime":
        import onnxruntime

        return {"onnxruntime": onnxruntime.__version__}
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


# ---------------------------------------------------------------- TVM's process


class TvmFailed(Exception):
    """A TVM job that stopped: its first error line (an ONNX frontend that cannot
    import a model says which operator)."""


def run_tvm(job: dict, log: Path) -> dict:
    """One job of scripts/tvm_peer.py under the peers' Python; its output goes to `log`
    (MetaSchedule logs every trial), its answer is the last line."""
    start = log.stat().st_size if log.exists() else 0
    with open(log, "a") as out:
        done = subprocess.run([os.environ[PEERS_ENV], str(harness.SCRIPTS / "tvm_peer.py")],
                              input=json.dumps(job), stdout=subprocess.PIPE, stderr=out, text=True, check=False)  # fmt: skip
        out.write(done.stdout)
    if done.returncode != 0:
        lines = log.read_text()[start:].strip().splitlines() or ["no output"]
        first = next((ln for ln in lines if re.match(r"(Error converting operator|\w*Error:)", ln)), lines[-1])
        raise TvmFailed(f"TVM's {job['job']} job failed (exit {done.returncode}; log {log}): {first.strip()[:160]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def tvm_fusion(onnx_path: Path, log: Path) -> dict:
    """TVM's kernels per inference under its default and tuning pipelines."""
    return run_tvm({"job": "fusion", "onnx": str(onnx_path)}, log)




# ---------------------------------------------------------------- part 1: fusion


def fusion_part(models: list[Path], profile_arg: str | None, log: Path) -> list[dict]:
    """Per model: ONNX nodes, TVM's kernels (both pipelines), ours (greedy, dp)."""
    import onnx

    from autoconfig.build import build_model
    from autoconfig.graph.onnx_import import load_onnx
    from autoconfig.resolve import resolve_profile, resolve_target

    profile = resolve_profile(profile_arg)
    target = resolve_target(None, profile)
    rows = []
    for path in models:
        print(f"  fusion: {path.stem}", file=sys.stderr, flush=True)
        nodes = len(onnx.load(path, load_external_data=False).graph.node)
        try:
            tvm, failed = tvm_fusion(path, log), None
        except TvmFailed as err:
            tvm, failed = {p: {"kernels": None, "functions": None} for p in ("default", "tuning")}, str(err)
        graph = load_onnx(path)
        built = {f: build_model(graph, profile, target, f).kernels for f in ("greedy", "dp")}
        kernels = {"tvm default": tvm["default"]["kernels"], "tvm tuning": tvm["tuning"]["kernels"],
                   "ours greedy": len(built["greedy"]), "ours dp": len(built["dp"])}  # fmt: skip
        transforms = {f"ours {f}": sum(k.kind == "layout" for k in built[f]) for f in built}
        rows.append({"model": path.stem, "nodes": nodes, "kernels": kernels, "layout_transforms": transforms,
                     "tvm_functions": tvm["tuning"]["functions"], "tvm_error": failed})  # fmt: skip
    return rows


def fused_groups(row: dict, column: str) -> int:
    """A column's kernels that compute the model's operators: ours less the layout
    transforms our build adds between channel-blocked and NCHW kernels (TVM's pipelines
    keep every tensor NCHW and add none), so fusion is compared group for group."""
    return row["kernels"][column] - row["layout_transforms"].get(column, 0)


def fusion_table(rows: list[dict]) -> list[str]:
    """Kernels per inference (ours: with the layout transforms among them) and the fusion
    ratio over fused groups, per model and as a mean."""
    columns = list(rows[0]["kernels"])
    lines = [f"{'model':<18}{'nodes':>6}" + "".join(f"{c:>16}" for c in columns) + f"{'dp/tvm tuning':>15}"]
    for r in rows:
        cells = []
        for c in columns:
            moved = r["layout_transforms"].get(c)
            count = f"{r['kernels'][c]}" + (f"-{moved}" if moved else "")
            cells.append(f"{'failed':>15} " if r["kernels"][c] is None else
                         f"{count:>8} ({r['nodes'] / fused_groups(r, c):4.2f})")  # fmt: skip
        ratio = f"{fused_groups(r, 'tvm tuning') / fused_groups(r, 'ours dp'):>14.2f}x" if not r.get("tvm_error") \
            else f"{'-':>15}"  # fmt: skip
        lines.append(f"{r['model']:<18}{r['nodes']:>6}" + "".join(cells) + ratio)
    lines.append("  kernels per inference (ours: all - layout transforms) "
                 "(fusion ratio = ONNX nodes / fused groups)")
    for c in columns:
        known = [r for r in rows if r["kernels"][c] is not None]
        mean = sum(r["nodes"] / fused_groups(r, c) for r in known) / max(1, len(known))
        lines.append(f"  mean fusion ratio {c}: {mean:.2f} over {len(known)} model(s)")
    lines += [f"  {r['model']}: {r['tvm_error']}" for r in rows if r.get("tvm_error")]
    return lines


# ---------------------------------------------------------------- part 2: operators


def operator_tasks(names: list[str], conv_labels: list[str], profile_arg: str | None, work: Path) -> list[dict]:
    """The matmul and convolution tasks with their inputs and reference outputs on disk."""
    import bench_conv
    import bench_matmul

    tasks = []
    for name in names:
        m, n, k = (int(name),) * 3 if name.isdigit() else bench_matmul.ZOO[name]
        a, b, expected = bench_matmul.operands(m, n, k)
        tasks.append({"kind": "matmul", "name": f"matmul {name}" if not name.isdigit() else f"matmul {m}³",
                      "m": m, "n": n, "k": k, "flops": 2.0 * m * n * k, "inputs": ["a", "b"], "output": [m, n],
                      "arrays": {"a": a, "b": b, "expected": expected.astype(np.float32)}})  # fmt: skip
    layers = {bench_conv.label(t): t for t in bench_conv.zoo_layers(["vgg16", "mobilenet_v1", "efficientnet_b0",
                                                                       "yolov4"])}  # fmt: skip
    for name in conv_labels:
        if name not in layers:
            sys.exit(f"no zoo layer {name!r}; known: {', '.join(sorted(layers))}")
        task = dict(layers[name], kind="conv", name=name)
        data = bench_conv.layer_data(task)
        expected = bench_conv.onnx_session(task, data, 1)()
        task |= {"flops": bench_conv.work(task), "inputs": list(data), "output": list(expected.shape),
                 "arrays": dict(data, expected=expected)}  # fmt: skip
        tasks.append(task)
    for i, task in enumerate(tasks):
        task["profile"] = profile_arg
        task["data"] = str(work / f"operator-{i}.npz")
        np.savez(task["data"], **task.pop("arrays"))
    return tasks


BUILD_REPS = 5
"""Builds of ours timed per kernel, each from an empty kernel cache; the median is
reported (MetaSchedule's tuning, minutes long, runs once). One build's time varied by
up to 25% from build to build on the Zen 5 VM (Winograd 128->128 on 52²: 145-183 ms
in 7 builds)."""


def our_build_times(task: dict, threads: int, work: Path) -> dict:
    """Our decision time (the analytic model alone) and build time (decision, code
    generation, compilation, linking) for the task: medians of `BUILD_REPS`, each build
    from an empty kernel cache in `work`. Untimed first, as TVM's import and target
    set-up are not in its tuning time: our imports, reading the profile, and a tiny
    kernel compiled, so the LLVM children a build keeps for all its kernels
    (`backend_count()`) are running."""
    import autoconfig
    import bench_conv
    from kernels.cache import CACHE_ENV
    from kernels.lower import backend_count, start_backends

    start_backends(backend_count())
    autoconfig.compile_matmul(8, 8, 8, profile=task["profile"], threads=threads)
    autoconfig.plan_conv2d((1, 8, 8, 8), (8, 8, 3, 3), profile=task["profile"], threads=threads)
    data = dict(np.load(task["data"])) if task["kind"] != "matmul" else None
    decisions, builds, callers_cache = [], [], os.environ.get(CACHE_ENV)
    try:
        for _ in range(BUILD_REPS):
            os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="cold-cache-", dir=work)
            start = time.perf_counter()
            if task["kind"] == "matmul":
                choice = autoconfig.plan_matmul(task["m"], task["n"], task["k"], profile=task["profile"],
                                                threads=threads)  # fmt: skip
            else:
                choice = autoconfig.plan_conv2d(task["input"], task["weight"], strides=task["strides"],
                                              pads=task["pads"], dilations=task["dilations"], group=task["group"],
                                              profile=task["profile"], threads=threads).at_nchw_boundary()  # fmt: skip
            decisions.append(time.perf_counter() - start)  # above: what compile_conv2d runs, NCHW in and out
            start = time.perf_counter()
            if task["kind"] == "matmul":
                autoconfig.compile_matmul(task["m"], task["n"], task["k"], profile=task["profile"], threads=threads)
            else:
                bench_conv.ours_call(task, data, threads)
            builds.append(time.perf_counter() - start)
    finally:
        if callers_cache is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = callers_cache
    return {"decision_s": float(np.median(decisions)), "build_s": float(np.median(builds)), "build_samples_s": builds,
            "config": describe(choice.best.plan)}  # fmt: skip


def operators_part(tasks: list[dict], trials: list[int], threads: int, work: Path, log: Path, args) -> list[dict]:
    """Tune each task at each budget, build ours from an empty cache, time every peer."""
    from kernels.cache import CACHE_ENV

    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="cold-cache-", dir=work)  # ours from an empty cache
    peers = ["ours"] + [f"tvm-{n}" for n in trials]
    for i, task in enumerate(tasks):
        task["libs"], task["tuning_s"] = {}, {}
        for n in trials:
            print(f"  tuning {task['name']} ({i + 1}/{len(tasks)}): {n} trials, {threads} threads",
                  file=sys.stderr, flush=True)  # fmt: skip
            library = work / f"operator-{i}-{threads}-{n}.so"
            spec = {key: task[key] for key in ("kind", "name", "m", "n", "k", "input", "weight", "strides", "pads",
                                               "dilations", "group", "bias") if key in task}  # fmt: skip
            answer = run_tvm({"job": "tune", "task": spec, "trials": n, "threads": threads, "out": str(library)}, log)
            task["libs"][f"tvm-{n}"], task["tuning_s"][f"tvm-{n}"] = str(library), answer["tuning_s"]
        task["ours"] = our_build_times(task, threads, work)
    timed = harness.measure("compare_tvm", peers, tasks, threads, rounds=args.rounds, reps=args.reps,
                            pin=not args.no_pin)  # fmt: skip
    rows = []
    for i, task in enumerate(tasks):
        us = {p: timed[p][i]["timing"]["median"] * 1e6 for p in peers}
        rows.append({"name": task["name"], "gflops": {p: task["flops"] / us[p] / 1e3 for p in peers}, "us": us,
                     "tuning_s": task["tuning_s"], "ours": task["ours"],
                     "versions": {p: timed[p][i]["versions"] for p in peers}})  # fmt: skip
    return rows


def operators_table(rows: list[dict], trials: list[int]) -> list[str]:
    tvm = [f"tvm-{n}" for n in trials]
    lines = [f"{'kernel':<26}{'ours µs':>9}" + "".join(f"{p + ' µs':>12}{'ratio':>7}" for p in tvm)
             + f"{'our build s':>12}{'decide ms':>10}" + "".join(f"{'tune s ' + p[4:]:>10}{'tune/build':>11}" for p in tvm)
             + "  our config"]  # fmt: skip
    for r in rows:
        o = r["ours"]
        lines.append(f"{r['name']:<26}{r['us']['ours']:>9.1f}"
                     + "".join(f"{r['us'][p]:>12.1f}{r['us'][p] / r['us']['ours']:>7.2f}" for p in tvm)
                     + f"{o['build_s']:>12.2f}{o['decision_s'] * 1e3:>10.1f}"
                     + "".join(f"{r['tuning_s'][p]:>10.0f}{r['tuning_s'][p] / o['build_s']:>11.0f}" for p in tvm)
                     + f"  {o['config']}")  # fmt: skip
    lines.append("ratio = TVM's latency / ours (> 1: ours faster)")
    for p in tvm:
        ratios = [r["us"][p] / r["us"]["ours"] for r in rows]
        lines.append(f"  vs {p}: ours at least as fast on {sum(x >= 1 for x in ratios)}/{len(ratios)} kernels, "
                     f"geomean {harness.geomean(ratios):.2f}x; tuning/our build geomean "
                     f"{harness.geomean([r['tuning_s'][p] / r['ours']['build_s'] for r in rows]):.0f}x "
                     f"(at least 1000x on {sum(r['tuning_s'][p] >= 1000 * r['ours']['build_s'] for r in rows)}/"
                     f"{len(rows)}), "
                     f"tuning/our decision geomean "
                     f"{harness.geomean([r['tuning_s'][p] / r['ours']['decision_s'] for r in rows]):.0f}x")  # fmt: skip
    return lines


# ---------------------------------------------------------------- part 3: a whole model


def model_part(name: str, trials: int, threads: int, profile_arg: str | None, work: Path, log: Path,
               args) -> dict:  # fmt: skip
    """Build ours (empty cache), compile TVM untuned and tuned, time all four peers."""
    import autoconfig
    import bench_models
    from kernels.cache import CACHE_ENV

    files = bench_models.model_files(name, work)
    path = Path(files["onnx"])
    times, libs = {}, {}
    for peer, n in (("tvm-untuned", 0), ("tvm-tuned", trials)):
        print(f"  {name}: TVM {'untuned' if not n else f'tuned, {n} trials per task'}", file=sys.stderr, flush=True)
        libs[peer] = str(work / f"{name}-{peer}-{threads}.so")
        answer = run_tvm({"job": "model", "onnx": str(path), "trials": n, "threads": threads, "out": libs[peer]}, log)
        times[peer] = answer["build_s"]
        tuned_tasks = answer["tasks"]
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="cold-cache-", dir=work)
    out = work / f"{name}-ours-{threads}"
    start = time.perf_counter()
    autoconfig.compile_model(path, out, profile=profile_arg, fusion="dp", threads=threads)
    times["ours"] = time.perf_counter() - start
    task = files | {"kind": "model", "name": name, "dirs": {"autoconfig-dp": {str(threads): str(out)}}, "libs": libs}
    peers = ["ours", "onnxruntime", "tvm-untuned", "tvm-tuned"]
    timed = harness.measure("compare_tvm", peers, [task], threads, rounds=args.rounds, reps=args.reps,
                            pin=not args.no_pin)  # fmt: skip
    return {"model": name, "trials_per_task": trials, "tuned_tasks": tuned_tasks,
            "ms": {p: timed[p][0]["timing"]["median"] * 1e3 for p in peers},
            "build_s": times, "versions": {p: timed[p][0]["versions"] for p in peers}}  # fmt: skip


def model_table(row: dict) -> list[str]:
    lines = [f"{'peer':<14}{'latency ms':>11}{'vs ours':>9}{'build/tune s':>14}"]
    for peer, ms in row["ms"].items():
        build = row["build_s"].get(peer)
        lines.append(f"{peer:<14}{ms:>11.2f}{ms / row['ms']['ours']:>9.2f}"
                     + (f"{build:>14.1f}" if build is not None else f"{'-':>14}"))  # fmt: skip
    lines.append(f"TVM tuned: {row['trials_per_task']} trials per task, {row['tuned_tasks']} tasks; ours: DP fusion, "
                 "built from an empty kernel cache; vs ours > 1: ours faster")  # fmt: skip
    return lines


# ---------------------------------------------------------------- main


def plot(operators: list[dict], trials: list[int], whole: dict | None, path: str) -> None:
    """TVM's latency over ours per kernel and budget; the whole model's latencies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [3, 1]})
    if operators:
        x = np.arange(len(operators))
        for j, n in enumerate(trials):
            axes[0].bar(x + j * 0.8 / len(trials), [r["us"][f"tvm-{n}"] / r["us"]["ours"] for r in operators],
                        0.8 / len(trials), label=f"MetaSchedule, {n} trials")  # fmt: skip
        axes[0].axhline(1.0, color="black", linewidth=0.8)
        axes[0].set_xticks(x + 0.4 - 0.4 / len(trials), [r["name"] for r in operators], rotation=60, ha="right")
        axes[0].set_ylabel("TVM latency / ours (> 1: ours faster)")
        axes[0].legend()
    if whole:
        axes[1].bar(list(whole["ms"]), list(whole["ms"].values()))
        axes[1].set_ylabel(f"{whole['model']} latency (ms)")
        axes[1].tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    from autoconfig.graph import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_options(parser, "compare-tvm")
    parser.add_argument("--parts", nargs="+", default=["fusion", "operators", "model"],
                        choices=["fusion", "operators", "model"])  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="one kernel of each kind, tiny budgets: a smoke run")
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256], help="MetaSchedule budgets per kernel")
    parser.add_argument("--model-trials", type=int, default=64, help="trials per task for the whole model")
    parser.add_argument("--models", nargs="*", default=None, choices=zoo.MODELS, metavar="MODEL",
                        help="zoo models for the fusion table (default: all; none given: only --onnx files)")
    parser.add_argument("--onnx", nargs="+", default=[], help="more ONNX files for the fusion table")
    parser.add_argument("--peers", default=None, help=f"the peers' Python (default {PEERS_PYTHON})")
    args = parser.parse_args()
    if harness.peers_python(args.peers) is None:
        sys.exit(f"no peers' environment at {args.peers or PEERS_PYTHON}: run `make peers` first")
    if args.quick:
        args.trials, args.model_trials = QUICK["trials"], QUICK["model_trials"]

    profile, profile_arg, report = harness.start(args, "compare_tvm")
    threads_list = args.threads or [int(profile.cores)]
    if "operators" in args.parts:
        report.settings["trials"] = args.trials
    if "model" in args.parts:
        report.settings["model_trials"] = args.model_trials
    operators: list[dict] = []
    whole = None
    log = Path(args.json).with_suffix(".log")
    log.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="autoconfig-compare-tvm-") as tmp:
        work = Path(tmp)
        print(f"host {report.host['model_name']!r}, profile {profile.name}; TVM's log: {log}")
        if "fusion" in args.parts:
            models = args.models if args.models is not None else QUICK["models"] if args.quick else list(zoo.MODELS)
            paths = []
            for name in models:
                paths.append(work / f"{name}.onnx")
                zoo.write(name, paths[-1])
            rows = fusion_part(paths + [Path(f) for f in args.onnx], profile_arg, log)
            print("\nkernels per inference and fusion ratio")
            print("\n".join(fusion_table(rows)), flush=True)
            report.tables.append({"title": "fusion", "rows": rows})
            report.summary += ["kernels per inference and fusion ratio", *fusion_table(rows)]
        for threads in threads_list:
            if "operators" in args.parts:
                tasks = operator_tasks(QUICK["matmuls"] if args.quick else MATMULS,
                                       QUICK["convs"] if args.quick else CONVS, profile_arg, work)  # fmt: skip
                operators = operators_part(tasks, args.trials, threads, work, log, args)
                print("\n" + report.heading(threads, operators[0]["versions"]))
                print("\n".join(operators_table(operators, args.trials)), flush=True)
                report.tables.append({"title": "operators", "threads": threads, "rows": operators})
            if "model" in args.parts:
                whole = model_part(WHOLE_MODEL, args.model_trials, threads, profile_arg, work, log, args)
                print("\n" + report.heading(threads, whole["versions"]))
                print("\n".join(model_table(whole)), flush=True)
                report.tables.append({"title": "model", "threads": threads, "rows": [whole]})
    report.save(args.json)
    plot(operators, args.trials, whole, args.plot)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TvmFailed as err:  # a tuning or model job: its part cannot go on
        sys.exit(str(err))
