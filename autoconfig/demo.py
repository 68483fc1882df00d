"""The demo jobs.

- `run_model_demo` (``autoconfig demo``, ``make demo``): this machine's profile (a
  quick probe, cached), a zoo model built with it, run, and compared with onnxruntime
  on the same input and thread count — build time, latency side by side, max error.
- `run_targets_check` (``autoconfig targets --run``): the FMA kernel generated, built
  and run on every target this machine can run (natively or under qemu-user),
  checked against numpy.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from autoconfig.accuracy import ERROR_BOUND, onnxruntime_session, output_error
from kernels import fma
from kernels.library import build_library
from kernels.target import Target


WARMUP_SECONDS = 0.5
"""Each peer runs the model this long before it is timed: a process' first calls run
slow (scripts/bench_models.py warms up alike), and the warm-up gives both peers the
same start."""


def warm_up(run: Callable[[], object]) -> None:
    """Call `run` for WARMUP_SECONDS (once at least)."""
    deadline = time.perf_counter() + WARMUP_SECONDS
    run()
    while time.perf_counter() < deadline:
        run()


def run_model_demo(model: str = "mobilenet_v1", threads: int | None = None, repeat: int = 20,
                   say: Callable[[str], None] = print) -> bool:  # fmt: skip
    """Build zoo `model` for this machine, run it next to onnxruntime, print the build
    time, both latencies (medians of `repeat` runs) and the max error; True when the
    outputs agree within ERROR_BOUND of their range."""
    from autoconfig.compiler import compile_model
    from autoconfig.loader import load
    from autoconfig.graph import zoo
    from autoconfig.probe import host_profile

    profile = host_profile()
    say(f"profile: {profile.name} ({int(profile.cores)} cores)")
    with tempfile.TemporaryDirectory(prefix="autoconfig-demo-") as tmp:
        path = Path(tmp) / f"{model}.onnx"
        zoo.write(model, path)
        start = time.perf_counter()
        manifest = compile_model(path, Path(tmp) / "built", profile=profile, threads=threads, progress=True)
        built_s = time.perf_counter() - start
        say(f"built {model}: {len(manifest['kernels'])} kernels for {manifest['target']} in {built_s:.1f} s "
            f"({manifest['kernel_objects']['cached']} from the kernel cache)")  # fmt: skip
        loaded = load(Path(tmp) / "built")
        name, shape = loaded.inputs[0]
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        warm_up(lambda: loaded.run({name: x}))  # as onnxruntime below
        ours, ours_ns, _ = loaded.run({name: x}, repeat)
        threads = manifest["threads"]
        try:
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as peer:
                theirs, theirs_ns = peer.submit(onnxruntime_run, str(path), {name: x}, threads, repeat).result()
        except ImportError:
            say(f"autoconfig {ours_ns / 1e6:.2f} ms; onnxruntime is not installed (pip install onnxruntime)")
            return True
    say(f"latency at {threads} thread(s), median of {repeat}: autoconfig {ours_ns / 1e6:.2f} ms, "
        f"onnxruntime {theirs_ns / 1e6:.2f} ms ({theirs_ns / ours_ns:.2f}x); predicted "
        f"{manifest['predicted_ns'] / 1e6:.2f} ms")  # fmt: skip
    ok = True
    for (output, value), expected in zip(ours.items(), theirs, strict=True):
        error, spread = output_error(value, expected)
        ok &= error <= ERROR_BOUND * spread
        say(f"{output}: max |error| {error:.2g} over a range of {spread:.2g} "
            f"({'ok' if error <= ERROR_BOUND * spread else 'WRONG'})")  # fmt: skip
    return ok


def onnxruntime_run(path: str, feeds: dict[str, np.ndarray], threads: int,
                    repeat: int) -> tuple[list[np.ndarray], float]:  # fmt: skip
    """onnxruntime's outputs and median latency (ns) on `feeds`, all graph
    optimizations on, `threads` intra-op threads; meant for its own process (thread
    pools sharing one process disturb each other's figures)."""
    session = onnxruntime_session(path, threads)
    outputs = session.run(None, feeds)
    warm_up(lambda: session.run(None, feeds))
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter_ns()
        session.run(None, feeds)
        times.append(time.perf_counter_ns() - start)
    return outputs, float(np.median(times))


def run_targets_check(targets: list[Target], n: int, say: Callable[[str], None] = print) -> bool:
    """Print one line per target; return True when every runnable target was correct."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    expected = a * b + c
    all_ok = True
    for target in targets:
        label = f"{target.name:<7} {target.vector_bits:>4}-bit"
        execution = target.execution()
        if execution.mode == "unavailable":
            say(f"{label}  skipped: {execution.reason}")
            continue
        start = time.perf_counter()
        config = fma.FmaConfig.widest(target)
        library = build_library(fma.generate(config, target))
        built = time.perf_counter() - start
        out = np.empty(n, np.float32)
        library.kernel(config.symbol)(out, a, b, c, n)
        error = float(np.max(np.abs(out - expected))) if n else 0.0
        ok = bool(np.allclose(out, expected, rtol=1e-6, atol=1e-6))
        all_ok &= ok
        say(
            f"{label}  {execution.mode:<8}  {config.lanes:>2} lanes  n={n}  "
            f"max|err|={error:.2g}  {'ok' if ok else 'WRONG'}  (built in {built:.1f} s)"
        )
    return all_ok
