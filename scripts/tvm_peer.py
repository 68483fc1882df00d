#!/usr/bin/env python3
"""TVM's side of the comparison scripts: runs under the peers' environment (`make peers`:
apache-tvm 0.27 with MetaSchedule), never under the project's, which does not depend on TVM.

A job comes as JSON on stdin and the answer goes as JSON to stdout:

- ``{"job": "fusion", "onnx": PATH}``: kernels per inference of TVM's Relax pipelines on
  the model — ``default``, what ``tvm.compile`` does for a CPU target (LegalizeOps,
  AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR, then RewriteDataflowReshape,
  which makes reshapes views), and ``tuning``, the same after DecomposeOpsForInference
  as ``relax.pipeline.static_shape_tuning_pipeline`` (the MetaSchedule flow) runs it
  first: batch normalization becomes elementwise ops that fuse into the convolution.
  A kernel is a call of a generated function in the model's main function.
- ``{"job": "tune", "task": T, "trials": N, "threads": P, "out": LIB}``: the operator T
  (a matmul or a convolution as scripts/compare_tvm.py describes it) written in TE,
  tuned by MetaSchedule with N trials for a P-core target, compiled with the best
  schedule found and exported to LIB; answers the tuning time.
- ``{"job": "model", "onnx": PATH, "trials": N, "threads": P, "out": LIB}``: the whole
  model imported by Relax's ONNX frontend and compiled to LIB, untuned when N is 0,
  else tuned as ``static_shape_tuning_pipeline`` does with at most N trials per task.
- `prepared`: bench_models.py's TVM column, the untuned model run in its worker.

Tuning costs: MetaSchedule's builder is the TVMScript parser, which calls
``inspect.stack()`` for every ``@T.prim_func`` it builds; that walks every frame and,
for each, scans every loaded module for its source file — 18 s of a 30 s 16-trial run
of a 256³ matmul here, once in the tuning process and again in each builder worker.
`cheap_stack` replaces it with the frames alone (the parser only reads their globals
and locals), in both; the same 64-trial run then takes 28 s instead of about 50.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

COST_MODEL = "xgb"
"""MetaSchedule's default cost model (XGBoost, from the xgboost-cpu wheel: the plain
xgboost wheel pulls a GPU library of several hundred MB)."""

BUILDER_TIMEOUT_S = 120.0
"""The builder's per-candidate limit (default 30 s): a worker's first build imports
TVM's intrinsics, which took longer than 30 s before `cheap_stack`."""


def cheap_stack() -> None:
    """Make ``inspect.stack`` return the frames without their source context (see the
    module docstring); runs in the tuning process and in each builder worker."""
    import inspect
    import sys

    def stack(context: int = 1) -> list:
        frame, frames = sys._getframe(1), []
        while frame is not None:
            frames.append(inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno,
                                            frame.f_code.co_name, None, None))  # fmt: skip
            frame = frame.f_back
        return frames

    inspect.stack = stack


def target(threads: int):
    """The host as an LLVM target with `threads` cores, LLVM's name for this CPU."""
    import tvm

    return tvm.target.Target({"kind": "llvm", "mcpu": tvm.target.codegen.llvm_get_system_cpu(),
                              "num-cores": threads})  # fmt: skip


# ---------------------------------------------------------------- fusion


def _kernel_calls(mod) -> tuple[int, dict[str, int]]:
    """Calls of generated functions in `mod`'s main function, and how many of each."""
    import tvm
    from tvm import relax

    names: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not isinstance(call, relax.Call):
                continue
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.call_tir":
                name = call.args[0].name_hint
            elif isinstance(call.op, relax.GlobalVar):
                name = call.op.name_hint
            else:
                continue  # a builtin: a reshape made a view, a tuple access
            names[name] = names.get(name, 0) + 1
    return sum(names.values()), names


def fusion(onnx_path: str) -> dict:
    """Kernels per inference under TVM's default and tuning pipelines (module docstring)."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    mod = from_onnx(onnx.load(onnx_path), keep_params_in_input=False)
    t = relax.transform
    lowering = [t.LegalizeOps(), t.AnnotateTIROpPattern(), t.FoldConstant(), t.FuseOps(), t.FuseTIR(),
                t.RewriteDataflowReshape()]  # fmt: skip
    answer = {}
    for name, first in (("default", []), ("tuning", [t.DecomposeOpsForInference(), t.CanonicalizeBindings()])):
        start = time.perf_counter()
        kernels, names = _kernel_calls(tvm.transform.Sequential(first + lowering)(mod))
        answer[name] = {"kernels": kernels, "functions": names, "seconds": time.perf_counter() - start}
    return answer


# ---------------------------------------------------------------- operators


def operator(task: dict):
    """The task as a TE PrimFunc: C = A·B for a matmul; for a convolution NCHW conv2d
    (depthwise and grouped through TOPI's own) plus the bias per channel when it has one."""
    from tvm import te, topi

    if task["kind"] == "matmul":
        m, n, k = task["m"], task["n"], task["k"]
        a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
        r = te.reduce_axis((0, k), name="r")
        c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
        return te.create_prim_func([a, b, c])
    x = te.placeholder(tuple(task["input"]), name="x")
    w = te.placeholder(tuple(task["weight"]), name="w")
    channels, group = task["input"][1], task["group"]
    args = (task["strides"], task["pads"], task["dilations"])
    if group == 1:
        y = topi.nn.conv2d_nchw(x, w, *args)
    elif group == channels and task["weight"][0] == channels:
        y = topi.nn.depthwise_conv2d_nchw(x, w, *args)
    else:
        y = topi.nn.group_conv2d_nchw(x, w, *args, group)
    if not task["bias"]:
        return te.create_prim_func([x, w, y])
    bias = te.placeholder((task["weight"][0],), name="bias")
    out = te.compute(y.shape, lambda i, c, h, v: y[i, c, h, v] + bias[c], name="out")
    return te.create_prim_func([x, w, bias, out])


def tune(task: dict, trials: int, threads: int, out: str) -> dict:
    """Tune the operator with MetaSchedule and export the best schedule found."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    cheap_stack()
    mod = tvm.IRModule({"main": operator(task)})
    host = target(threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tvm-tune-") as work:
        database = ms.tir_integration.tune_tir(
            mod, host, work, max_trials_global=trials, num_trials_per_iter=min(64, trials),
            builder=ms.builder.LocalBuilder(timeout_sec=BUILDER_TIMEOUT_S, initializer=cheap_stack),
            cost_model=COST_MODEL)  # fmt: skip
        schedule = ms.tir_integration.compile_tir(database, mod, host)
    if schedule is None:
        raise SystemExit(f"MetaSchedule found no valid schedule for {task['name']} in {trials} trials")
    seconds = time.perf_counter() - start
    tvm.compile(schedule.mod, target=host).export_library(out)
    return {"tuning_s": seconds}


def model(onnx_path: str, trials: int, threads: int, out: str) -> dict:
    """The whole model compiled by Relax; when `trials` > 0, first tuned as
    ``relax.pipeline.static_shape_tuning_pipeline`` does it (DecomposeOpsForInference,
    the zero pipeline, MetaSchedule on every fused function with at most `trials`
    trials each, the best schedules applied), with `cheap_stack`'s builder."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    cheap_stack()
    host = target(threads)
    start = time.perf_counter()
    mod = from_onnx(onnx.load(onnx_path), keep_params_in_input=False)
    tasks = None
    if trials:
        with host, tempfile.TemporaryDirectory(prefix="tvm-tune-model-") as work:
            t = relax.transform
            mod = tvm.transform.Sequential([t.DecomposeOpsForInference(), t.CanonicalizeBindings(),
                                            relax.pipeline.zero_pipeline()])(mod)  # fmt: skip
            functions = sum(isinstance(f, tvm.tirx.PrimFunc) for f in mod.functions.values())
            ms.relax_integration.tune_relax(
                mod, params={}, target=host, work_dir=work, max_trials_global=trials * functions,
                max_trials_per_task=trials, num_trials_per_iter=min(64, trials),
                builder=ms.builder.LocalBuilder(timeout_sec=BUILDER_TIMEOUT_S, initializer=cheap_stack),
                cost_model=COST_MODEL)  # fmt: skip
            mod = t.MetaScheduleApplyDatabase(work)(mod)
            with open(f"{work}/database_workload.json") as workloads:
                tasks = sum(1 for _ in workloads)
    executable = tvm.compile(mod, target=host)
    seconds = time.perf_counter() - start
    executable.export_library(out)
    return {"build_s": seconds, "tasks": tasks}


def prepared(onnx_path: str, work: Path, feeds: dict, threads: int):
    """(call, outputs by name, info) of the whole model as Relax compiles it untuned
    (`model` with no trials; compiled once per run and thread count, kept in `work`),
    run by Relax's virtual machine (bench_models.py's TVM column)."""
    import numpy as np
    import onnx
    import tvm
    from tvm import relax

    library = work / f"{Path(onnx_path).stem}.tvm{threads}.so"
    record = library.with_suffix(".json")
    if not library.exists():
        record.write_text(json.dumps(model(onnx_path, 0, threads, str(library))))
    device = tvm.cpu()
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(library)), device)
    graph = onnx.load(onnx_path, load_external_data=False).graph
    args = [tvm.runtime.tensor(feeds[i.name], device) for i in graph.input if i.name in feeds]
    result = vm["main"](*args)
    results = list(result) if isinstance(result, (list, tuple, tvm.ir.Array)) else [result]
    outputs = {o.name: np.asarray(r.numpy()) for o, r in zip(graph.output, results)}
    return (lambda: vm["main"](*args)), outputs, {"build_s": round(json.loads(record.read_text())["build_s"], 1)}


def main() -> int:
    job = json.loads(sys.stdin.read())
    if job["job"] == "fusion":
        answer = fusion(job["onnx"])
    elif job["job"] == "tune":
        answer = tune(job["task"], job["trials"], job["threads"], job["out"])
    elif job["job"] == "model":
        answer = model(job["onnx"], job["trials"], job["threads"], job["out"])
    else:
        raise SystemExit(f"unknown job {job['job']!r}")
    print(json.dumps(answer))  # the last line of stdout: TVM's own logging may precede it
    return 0


if __name__ == "__main__":
    sys.exit(main())
