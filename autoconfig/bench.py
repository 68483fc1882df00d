"""`autoconfig bench`: a model built for this machine and run next to the runtimes a
user would otherwise pick (onnxruntime, OpenVINO where installed), each peer in a
process of its own, on the same inputs (standard normal: both signs) and thread
count: build time, median latencies, and every output's max error against
onnxruntime's. `autoconfig demo` is this on a zoo model.

The build reuses what the kernel cache holds (compiled kernels and the models'
decisions), so benchmarking a model again costs little more than reading it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from autoconfig.accuracy import ERROR_BOUND, onnxruntime_session, output_error, sample_inputs
from autoconfig.errors import AutoconfigError

WARMUP_SECONDS = 0.5
"""Each peer runs the model this long before it is timed: a process' first calls run
slow, and the warm-up gives every peer the same start."""


def warm_up(run: Callable[[], object]) -> None:
    """Call `run` for WARMUP_SECONDS (once at least)."""
    deadline = time.perf_counter() + WARMUP_SECONDS
    run()
    while time.perf_counter() < deadline:
        run()


def median_ns(run: Callable[[], object], repeat: int) -> float:
    """`run` warmed up, then timed `repeat` times: the median in ns."""
    warm_up(run)
    times = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter_ns()
        run()
        times.append(time.perf_counter_ns() - start)
    return float(np.median(times))


def onnxruntime_run(path: str, feeds: dict[str, np.ndarray], threads: int,
                    repeat: int) -> tuple[list[np.ndarray], float, str]:  # fmt: skip
    """onnxruntime's outputs, median latency (ns) and settings: all graph optimizations
    on, `threads` intra-op threads."""
    session = onnxruntime_session(path, threads)
    outputs = session.run(None, feeds)
    return outputs, median_ns(lambda: session.run(None, feeds), repeat), "all graph optimizations"


def openvino_request(path: str, threads: int):
    """OpenVINO as a peer is run: CPU, float32 inference asked for (its default on a CPU
    with bf16 units is bf16), the latency hint, `threads` inference threads. Returns an
    infer request, the compiled model and the precision it reports (e.g. f32)."""
    import openvino as ov

    compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                                                     "INFERENCE_NUM_THREADS": threads})  # fmt: skip
    precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
    return compiled.create_infer_request(), compiled, precision


def openvino_run(path: str, feeds: dict[str, np.ndarray], threads: int,
                 repeat: int) -> tuple[list[np.ndarray], float, str]:  # fmt: skip
    """OpenVINO's outputs, median latency (ns) and precision (`openvino_request`)."""
    request, compiled, precision = openvino_request(path, threads)
    result = request.infer(feeds)
    outputs = [np.array(result[port]) for port in compiled.outputs]
    return outputs, median_ns(lambda: request.infer(feeds), repeat), f"{precision} inference"


PEERS: dict[str, Callable[[str, dict, int, int], tuple[list[np.ndarray], float, str]]] = {
    "onnxruntime": onnxruntime_run,
    "openvino": openvino_run,
}
"""The peers `autoconfig bench` can run, each in a process of its own."""


@dataclass
class PeerResult:
    """One peer's outputs, median latency and settings, or why it did not run."""

    name: str
    outputs: list[np.ndarray] | None = None
    ns: float = 0.0
    settings: str = ""
    why: str = ""


def run_peer(name: str, path: Path, feeds: dict[str, np.ndarray], threads: int, repeat: int) -> PeerResult:
    """`name` run in a fresh process (thread pools sharing one process disturb each
    other's figures); a peer not installed, or failing on the model, says why."""
    try:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            outputs, ns, settings = pool.submit(PEERS[name], str(path), feeds, threads, repeat).result()
    except ImportError as err:
        return PeerResult(name, why=f"not installed (pip install {err.name or name})")
    except Exception as err:  # a peer that cannot run the model is a result, not a crash
        return PeerResult(name, why=f"failed: {type(err).__name__}: {' '.join(str(err).split())[:160]}")
    return PeerResult(name, outputs, ns, settings)


def check_peers(peers: list[str]) -> None:
    unknown = [p for p in peers if p not in PEERS]
    if unknown:
        raise AutoconfigError(f"unknown peer {unknown[0]!r}; known: {', '.join(PEERS)}")


def bench(path: Path | str, threads: int | None = None, peers: tuple[str, ...] = ("onnxruntime",),
          repeat: int = 20, say: Callable[[str], None] = print, shapes: dict | None = None) -> bool:  # fmt: skip
    """Build the ONNX model at `path` for this machine (`shapes` fixing its dynamic
    dimensions), run it and each of `peers`, say the build, the latencies and the
    errors; True when our outputs agree with onnxruntime's within ERROR_BOUND of their
    range (or onnxruntime did not run)."""
    from autoconfig.compiler import compile_model
    from autoconfig.loader import load
    from autoconfig.probe import host_profile

    check_peers(list(peers))
    path = Path(path)
    profile = host_profile()
    say(f"profile: {profile.name} ({int(profile.cores)} cores)")
    with tempfile.TemporaryDirectory(prefix="autoconfig-bench-") as tmp:
        start = time.perf_counter()
        manifest = compile_model(path, Path(tmp) / "built", profile=profile, threads=threads, progress=True,
                                 shapes=shapes)  # fmt: skip
        say(f"built {path.stem}: {len(manifest['kernels'])} kernels for {manifest['target']} in "
            f"{time.perf_counter() - start:.1f} s ({manifest['kernel_objects']['cached']} from the kernel cache)")
        loaded = load(Path(tmp) / "built")
        feeds = sample_inputs(manifest["inputs"])
        ours = loaded(feeds)
        ours_ns = median_ns(lambda: loaded(feeds), repeat)
    threads = manifest["threads"]
    results = [run_peer(name, path, feeds, threads, repeat) for name in peers]
    say(latency_line(threads, repeat, ours_ns, results, manifest["predicted_ns"]))
    return errors_agree(ours, results, say)


def latency_line(threads: int, repeat: int, ours_ns: float, results: list[PeerResult], predicted_ns: float) -> str:
    """'latency at T thread(s), median of R: autoconfig X ms, peer Y ms (Y/X x), ...'."""
    cells = [f"autoconfig {ours_ns / 1e6:.2f} ms"]
    for r in results:
        cells.append(f"{r.name} {r.ns / 1e6:.2f} ms ({r.ns / ours_ns:.2f}x, {r.settings})" if r.outputs is not None
                     else f"{r.name}: {r.why}")  # fmt: skip
    return (f"latency at {threads} thread(s), median of {repeat}: {', '.join(cells)}; "
            f"predicted {predicted_ns / 1e6:.2f} ms")  # fmt: skip


def errors_agree(ours: dict[str, np.ndarray], results: list[PeerResult], say: Callable[[str], None]) -> bool:
    """Each output's max error against onnxruntime's (and each other peer's against it);
    True when ours are within ERROR_BOUND of the range, or onnxruntime did not run."""
    reference = next((r for r in results if r.name == "onnxruntime" and r.outputs is not None), None)
    if reference is None:
        say("no onnxruntime outputs to compare with")
        return True
    ok = True
    for i, (output, value) in enumerate(ours.items()):
        for name, got in [("autoconfig", value), *((r.name, r.outputs[i]) for r in results
                                                   if r.outputs is not None and r is not reference)]:  # fmt: skip
            error, spread = output_error(got, reference.outputs[i])
            good = error <= ERROR_BOUND * spread
            ok &= good or name != "autoconfig"
            say(f"{output}: {name} max |error| {error:.2g} over a range of {spread:.2g} ({'ok' if good else 'WRONG'})")
    return ok
