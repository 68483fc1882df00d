"""A built model written to disk (`autoconfig.loader` reads and runs it).

``autoconfig build`` writes a directory:

- ``manifest.json``: inputs, outputs, kernels (ops, algorithm, predicted time, the
  program steps each owns), arena and weight sizes, profile, target, versions, and
  the SHA-256 of every other file (checked when the directory is loaded);
- ``weights.bin``: every constant in the layout its kernel reads (float32);
- ``libautoconfig_model.so`` (a host target) or ``libautoconfig_model.a`` plus
  ``model_driver`` (a cross target, run under qemu-user): the generated kernels, the
  thread pool and the program that calls them in order, behind one C entry point;
- ``autoconfig_model.h``: that entry point;
- ``mlir/``: each kernel's MLIR; ``report.md``: the fusion plan and why each choice.

The C API (``autoconfig_model.h``)::

    ac_model *ac_model_load(const char *weights_path);      /* NULL on failure */
    int ac_model_run(ac_model *, const float *const *inputs, float *const *outputs);
    int ac_model_run_timed(ac_model *, const float *const *inputs, float *const *outputs,
                           double *step_ns);                  /* per program step */
    void ac_model_free(ac_model *);

Inputs and outputs are dense float32 arrays in the manifest's order and shapes; the
runner's C comes from `kernels.runner`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import numpy as np

from autoconfig.builder import BuiltModel
from autoconfig.errors import AutoconfigError, reraised
from autoconfig.graph.ir import Graph
from autoconfig.loader import ARCHIVE, DRIVER, FORMAT, LIBRARY, sha256_file
from autoconfig.machine import Machine
from autoconfig.probe.host import this_host
from autoconfig.runtime import POOL_SOURCE, encode, widest
from kernels.abi import c_header, c_tasks
from kernels.cache import KernelCache, compile_modules, default_cache
from kernels.library import unique_signatures, run_tool
from kernels.runner import DELIVERED, HEADER, MODEL_HEADER, RunnerConfig, driver_source, model_source

def _write_weights(pieces: tuple[np.ndarray, ...], path: Path) -> str:
    """Write the float32 pieces one after another (little-endian) and return the file's
    SHA-256, computed on the way rather than by reading the file back, in a thread of its
    own while the pieces are written (both release the GIL: hashing YOLO-V4's 518 MB took
    0.7 s of a warm build, writing them 1.5 s)."""
    digest = hashlib.sha256()
    with open(path, "wb") as f, ThreadPoolExecutor(max_workers=1) as hasher:  # one worker: pieces in order
        for piece in pieces:
            data = memoryview(np.ascontiguousarray(piece, "<f4")).cast("B")
            hasher.submit(digest.update, data)
            f.write(data)
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    found = {}
    for package in ("autoconfig", "mlir", "llvmlite", "onnx", "numpy"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return found


@reraised
def write_artifact(model: BuiltModel, out: Path, cache: KernelCache | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict:  # fmt: skip
    """Compile and link `model` into directory `out` (see the module docstring): built in
    a temporary directory beside it and renamed into place, so a failure leaves no
    `out`; an existing `out` is replaced. Returns the manifest."""
    out = Path(out)
    if not out.parent.is_dir():
        raise AutoconfigError(f"cannot write {out}: directory {out.parent} does not exist")
    if out.exists() and not (out / "manifest.json").is_file():
        raise AutoconfigError(f"{out} exists and is not a built model: refusing to replace it")
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        manifest = _write(model, work, cache or default_cache(), progress)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "model")
            shutil.rmtree(old)
        os.replace(work, out)
        return manifest
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _write(model: BuiltModel, work: Path, cache: KernelCache, progress) -> dict:
    target = model.target
    native = target.arch == this_host().arch  # a shared library, run here only where the CPU has the ISA
    if not native and not target.cross_cc:
        raise AutoconfigError(f"cannot link {target.name} code here: {target.execution(this_host()).reason}")
    modules = [m for k in model.kernels for m in k.modules]
    objects_dir = work / "objects"
    objects_dir.mkdir()
    objects, compiled, cached = compile_modules(modules, objects_dir, cache, progress)
    signatures = unique_signatures(modules)
    runner = runner_config(model)
    sources = work / "src"
    sources.mkdir()
    (sources / "kernels.h").write_text(c_header(signatures))
    (sources / "tasks.c").write_text(c_tasks(signatures))
    (sources / "model.c").write_text(model_source(runner))
    (work / HEADER).write_text(MODEL_HEADER)
    shutil.copyfile(work / HEADER, sources / HEADER)
    shutil.copyfile(POOL_SOURCE, sources / "pool.c")
    c_files = [str(sources / name) for name in ("model.c", "tasks.c", "pool.c")]
    object_paths = [str(o.path) for o in objects]
    if native:
        run_tool(["cc", "-shared", "-fPIC", "-O2", "-pthread", f"-I{sources}", "-o", str(work / LIBRARY),
                  *c_files, *object_paths], "linking the model")  # fmt: skip
    else:
        c_objects = []
        for c_file in c_files:
            obj = str(Path(c_file).with_suffix(".o"))
            run_tool([target.cross_cc, "-O2", "-pthread", f"-I{sources}", "-c", c_file, "-o", obj], "compiling the runner")
            c_objects.append(obj)
        run_tool([target.cross_ar, "rcsD", str(work / ARCHIVE), *c_objects, *object_paths], "archiving the model")
        (sources / "model_driver.c").write_text(driver_source(runner))
        run_tool([target.cross_cc, "-static", "-O2", "-pthread", f"-I{sources}", "-o", str(work / DRIVER),
                  str(sources / "model_driver.c"), str(work / ARCHIVE), "-lm"], "linking the model driver")  # fmt: skip
    weights_digest = _write_weights(model.weights, work / "weights.bin")
    mlir = work / "mlir"
    mlir.mkdir()
    for k in model.kernels:
        for module in k.modules:
            for sig in module.signatures:
                (mlir / f"{sig.symbol}.mlir").write_text(module.text)
    shutil.rmtree(objects_dir)
    shutil.rmtree(sources)
    manifest = _manifest(model, native, compiled, cached)
    (work / "report.md").write_text(report(model, manifest))
    manifest["files"] = {name: weights_digest if name == "weights.bin" else sha256_file(work / name)
                         for name in sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())}
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def runner_config(model: BuiltModel) -> RunnerConfig:
    """The C runner of `model`: its kernels' calls encoded in order (and as placed for
    cores that share their caches, where that differs), sizes in bytes."""
    calls = [c for k in model.kernels for c in k.calls]
    symbols = tuple(dict.fromkeys(c.symbol for c in calls))
    index = {s: i for i, s in enumerate(symbols)}
    g = model.graph
    return RunnerConfig(tuple(int(v) for v in encode(calls, index)), len(calls),
                        symbols, tuple(g.types[n].bytes for n in g.inputs),
                        tuple(g.types[n].elements * DELIVERED[_delivered(g, n)] for n, _ in model.outputs),
                        tuple(4 * offset for _, offset in model.outputs),
                        4 * max(model.arena_floats, model.near_arena_floats), model.weights_bytes, widest(calls),
                        tuple((i, 4 * offset, n) for i, offset, n in model.conversions), model.index_limits,
                        tuple(_delivered(g, n) for n, _ in model.outputs),
                        tuple(int(v) for v in encode(model.near, index)) if model.near else ())  # fmt: skip


def _delivered(graph: Graph, output: str) -> str:
    """The type `output` reaches the caller in: float32, or the model's integers or bools."""
    return graph.delivered.get(output, "float32")


def _manifest(model: BuiltModel, native: bool, compiled: int, cached: int) -> dict:
    g = model.graph
    kernels, step = [], 0
    for k in model.kernels:
        kernels.append({"name": k.name, "kind": k.kind, "ops": k.ops, "choice": k.summary,
                        "predicted_ns": round(k.predicted_ns, 1), "steps": [step, step + len(k.calls)],
                        **({"flops": k.flops} if k.flops else {})})  # fmt: skip
        step += len(k.calls)
    return {
        "format": FORMAT,
        "model": g.name,
        "inputs": [{"name": n, "shape": list(g.types[n].shape), "dtype": g.types[n].dtype,
                    **({"ids_below": limit} if limit else {})}
                   for n, limit in zip(g.inputs, model.index_limits or [0] * len(g.inputs))],
        "outputs": [{"name": n, "shape": list(g.types[n].shape), "dtype": _delivered(g, n)} for n, _ in model.outputs],
        "kernels": kernels,
        "steps": step,
        "arena_bytes": 4 * model.arena_floats,
        **({"near_arena_bytes": 4 * model.near_arena_floats} if model.near else {}),
        "intermediate_bytes": 4 * model.intermediate_floats,
        "weights_bytes": model.weights_bytes,
        "predicted_ns": round(sum(k.predicted_ns for k in model.kernels), 1),
        "profile": model.profile.name,
        "peak_gflops": round(Machine.of(model.profile).peak_gflops(model.threads), 1),  # the products' yardstick
        "target": model.target.name,
        "vector_bits": model.target.vector_bits,
        "native": native,
        "library": LIBRARY if native else ARCHIVE,
        "fusion": model.fusion,
        "threads": model.threads,
        "versions": _versions(),
        "kernel_objects": {"compiled": compiled, "cached": cached},
    }


def report(model: BuiltModel, manifest: dict) -> str:
    """report.md: the plan, each kernel's choice and reasons, the predicted total."""
    lines = [f"# {model.graph.name}: {len(model.kernels)} kernels for {model.target.name}",
             "", f"Profile {model.profile.name}; fusion {model.fusion}; up to {model.threads} thread(s).",
             f"Predicted total: {manifest['predicted_ns'] / 1e3:.1f} µs.",
             f"Arena: {manifest['arena_bytes'] / 1e6:.2f} MB at its peak, for "
             f"{manifest['intermediate_bytes'] / 1e6:.2f} MB of intermediate tensors and scratch"
             + (f" (memory reused only after {4 * model.cooling_floats / 1e6:.1f} MB of traffic, up to the last-level "
                "cache for each thread: a line another thread still holds is slow to write; where the cores pass "
                f"lines to each other quickly, measured as it runs, a program reusing it at once runs in "
                f"{manifest['near_arena_bytes'] / 1e6:.2f} MB)" if model.near else "")
             + f"; weights {manifest['weights_bytes'] / 1e6:.2f} MB.", "",
             "## Fusion plan", "", "| # | kernel | ops | choice | predicted µs |", "|---|---|---|---|---|"]  # fmt: skip
    for i, k in enumerate(model.kernels):
        lines.append(f"| {i} | {k.name} | {', '.join(k.ops)} | {k.summary} | {k.predicted_ns / 1e3:.1f} |")
    lines += ["", "## Why", ""]
    for i, k in enumerate(model.kernels):
        lines += [f"### {i}. {k.name} ({k.kind})", "", "```", k.explain, "```", ""]
    return "\n".join(lines)
