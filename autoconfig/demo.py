"""The demo jobs.

- `run_model_demo` (``autoconfig demo``, ``make demo``): `autoconfig bench` on a zoo
  model against onnxruntime — this machine's profile (a quick probe, cached), the
  build time, the latencies side by side, the max error.
- `run_targets_check` (``autoconfig targets --run``): the FMA kernel generated, built
  and run on every target this machine can run (natively or under qemu-user),
  checked against numpy.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from autoconfig.probe.host import this_host
from kernels import fma
from kernels.library import build_library
from kernels.target import Target


def run_model_demo(model: str = "mobilenet_v1", threads: int | None = None, repeat: int = 20,
                   say: Callable[[str], None] = print) -> bool:  # fmt: skip
    """`autoconfig bench` on zoo `model` against onnxruntime: the build time, both
    latencies (medians of `repeat` runs) and the max errors; True when the outputs
    agree within ERROR_BOUND of their range."""
    from autoconfig.bench import bench
    from autoconfig.graph import zoo

    with tempfile.TemporaryDirectory(prefix="autoconfig-demo-") as tmp:
        path = Path(tmp) / f"{model}.onnx"
        zoo.write(model, path)
        return bench(path, threads, ("onnxruntime",), repeat, say)


def run_targets_check(targets: list[Target], n: int, say: Callable[[str], None] = print) -> bool:
    """Print one line per target; return True when every runnable target was correct."""
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    expected = a * b + c
    all_ok = True
    for target in targets:
        label = f"{target.name:<7} {target.vector_bits:>4}-bit"
        execution = target.execution(this_host())
        if execution.mode == "unavailable":
            say(f"{label}  skipped: {execution.reason}")
            continue
        start = time.perf_counter()
        config = fma.FmaConfig.widest(target)
        library = build_library(fma.generate(config, target), this_host())
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
