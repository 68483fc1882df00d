"""IREE as a whole-model peer (bench_models.py): an ONNX file imported by IREE's own
importer (`iree-import-onnx`), compiled for llvm-cpu on this host's CPU with each of a
few flag presets, and run by IREE's runtime with its task pool at the thread count.

IREE's defaults are far from its best on convolutions, and which flags help differs per
model; so each preset is compiled (once per run, kept in the run's directory) and timed
briefly in the worker, and the fastest runs the benchmark; a preset IREE fails to
compile the model with is left out, with its error. Runs in the peers'
environment (`make peers`: iree-base-compiler, iree-base-runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

PRESETS = {
    "default": [],
    "im2col": ["--iree-global-opt-use-im2col-for-convs"],
    "tiling+im2col": ["--iree-opt-data-tiling", "--iree-global-opt-use-im2col-for-convs"],
}
"""The flag presets tried per model: im2col turns convolutions into matrix products
(IREE's default convolution code is slow on CNNs); data tiling packs their operands."""

TARGET_FLAGS = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=host"]  # fmt: skip

TRIAL_RUNS = 3
"""Runs per preset to pick the fastest (after one warm-up run)."""


def compiled(onnx_path: str, work: Path) -> dict[str, dict]:
    """Each preset's module (a .vmfb in the run's directory `work`) with its compile
    seconds; compiled on first use, reused by later rounds."""
    import iree.compiler as ic

    source = Path(onnx_path)
    stem = work / f"{source.stem}.iree"
    mlir = stem.with_suffix(".mlir")
    if not mlir.exists():
        importer = Path(sys.executable).with_name("iree-import-onnx")
        subprocess.run([str(importer), str(source), "-o", str(mlir), "--opset-version", "17"], check=True,
                       capture_output=True, text=True)  # fmt: skip
    modules = {}
    for name, flags in PRESETS.items():
        vmfb, record = Path(f"{stem}-{name}.vmfb"), Path(f"{stem}-{name}.json")
        if not record.exists():
            start = time.perf_counter()
            try:
                vmfb.write_bytes(ic.compile_file(str(mlir), input_type="onnx", extra_args=[*TARGET_FLAGS, *flags]))
                outcome = {"compile_s": round(time.perf_counter() - start, 1)}
            except ic.CompilerToolError as err:  # a preset IREE cannot compile this model with is left out
                outcome = {"error": next((line for line in str(err).splitlines() if "error:" in line), "failed")}
            record.write_text(json.dumps(outcome))
        modules[name] = {"vmfb": vmfb, **json.loads(record.read_text())}
    return modules


def prepared(onnx_path: str, work: Path, feeds: dict[str, np.ndarray], threads: int):
    """(call, outputs by name, info) of the fastest preset on `feeds`."""
    import iree.runtime as rt
    import onnx

    graph = onnx.load(onnx_path, load_external_data=False).graph
    inputs = [feeds[i.name] for i in graph.input if i.name in feeds]
    rt.flags.parse_flags(f"--task_topology_max_group_count={threads}")  # before the first Config
    config = rt.Config("local-task")
    trials, failed = {}, {}
    for name, module in compiled(onnx_path, work).items():
        if "error" in module:
            failed[name] = module["error"].strip()[:160]
            continue
        context = rt.SystemContext(config=config)
        context.add_vm_module(rt.VmModule.copy_buffer(context.instance, module["vmfb"].read_bytes()))
        entry = context.modules.module[graph.name]  # IREE names the entry after the ONNX graph
        entry(*inputs)
        times = []
        for _ in range(TRIAL_RUNS):
            start = time.perf_counter()
            entry(*inputs)
            times.append(time.perf_counter() - start)
        trials[name] = (float(np.median(times)), entry, module["compile_s"])
    if not trials:
        raise SystemExit(f"IREE compiled the model with no preset: {failed}")
    best = min(trials, key=lambda n: trials[n][0])
    _, entry, _ = trials[best]
    results = entry(*inputs)
    results = results if isinstance(results, (list, tuple)) else [results]
    outputs = {o.name: np.asarray(r.to_host() if hasattr(r, "to_host") else r) for o, r in zip(graph.output, results)}
    info = {"preset": best, "compile_s": {n: t[2] for n, t in trials.items()},
            "trial_ms": {n: round(t[0] * 1e3, 2) for n, t in trials.items()}, "failed_presets": failed}  # fmt: skip
    return (lambda: entry(*inputs)), outputs, info
