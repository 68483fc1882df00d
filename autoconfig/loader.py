"""A built model directory read back and run: checked against its manifest (every
file's SHA-256), then called natively through its library's C entry point, or under
qemu-user for a cross target. Kept apart from `autoconfig.artifact`, which writes the
directory, so that running a model never imports the compiler: with it (the MLIR
bindings, the generators, the models), a process running MobileNet-V1 peaked at 113 MB
of resident memory, without it at 56."""

from __future__ import annotations

import ctypes
import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from autoconfig.accuracy import spearman
from autoconfig.errors import AutoconfigError, reraised
from kernels.target import Execution, Target, get_target

FORMAT = 1
LIBRARY, ARCHIVE, DRIVER = "libautoconfig_model.so", "libautoconfig_model.a", "model_driver"


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MB blocks (weights run to hundreds of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _open_library(path: Path) -> ctypes.CDLL:
    """The shared library at `path`, opened under a name of its own: the dynamic loader
    hands back a library already open under the same name, so a model rebuilt in place
    and loaded again in one process would run the old build's code (on the new
    weights). A fresh link to the file is opened and removed (the mapping stays); the
    loader still shares a file it has open, by its device and inode, so reloading an
    unchanged model opens nothing twice."""
    with tempfile.TemporaryDirectory(prefix="autoconfig-lib-") as scratch:
        link = Path(scratch) / path.name
        link.symlink_to(path.resolve())
        return ctypes.CDLL(str(link))


def _execution(manifest: dict) -> tuple[Target, Execution]:
    """The target a model was built for, and how this machine runs it."""
    from autoconfig.probe.host import this_host

    name = manifest["target"]
    target = get_target(name, manifest["vector_bits"] if name == "rvv" else None)
    return target, target.execution(this_host())


def _check_runs_here(manifest: dict, directory: Path) -> None:
    """A model built as a shared library runs only where the CPU has its ISA: refused
    here, not crashed on its first call with an illegal instruction."""
    target, execution = _execution(manifest)
    if execution.mode != "native":
        raise AutoconfigError(f"{directory}: built for {target.name}, which this machine cannot run: {execution.reason}")


RUN_STATUS = {1: "a NULL argument", 2: "no working memory", 3: "an id outside its table",
              4: "an int64 input beyond +-2^24, which the model's float32 arithmetic would not keep exact"}
"""What ``ac_model_run``'s non-zero statuses mean (autoconfig_model.h)."""


class LoadedModel:
    """A built model, checked against its manifest: call it with numpy arrays by input
    name; it returns the outputs by name."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)
        path = self.directory / "manifest.json"
        try:
            self.manifest = json.loads(path.read_text())
        except FileNotFoundError:
            raise AutoconfigError(f"{self.directory} is not a built model: no manifest.json") from None
        except (OSError, ValueError) as err:
            raise AutoconfigError(f"cannot read {path}: {err}") from None
        if self.manifest.get("format") != FORMAT:
            raise AutoconfigError(f"{path}: format {self.manifest.get('format')!r}, this autoconfig reads {FORMAT}")
        for name, digest in self.manifest["files"].items():
            file = self.directory / name
            if not file.is_file():
                raise AutoconfigError(f"{self.directory}: {name} is missing")
            if sha256_file(file) != digest:
                raise AutoconfigError(f"{self.directory}: {name} was changed since the build (its SHA-256 differs)")
        self.inputs = [(i["name"], tuple(i["shape"])) for i in self.manifest["inputs"]]
        self.input_types = {i["name"]: (np.dtype(i.get("dtype", "float32")), i.get("ids_below", 0))
                            for i in self.manifest["inputs"]}  # fmt: skip
        self.outputs = [(o["name"], tuple(o["shape"])) for o in self.manifest["outputs"]]
        self.output_types = [np.dtype(o.get("dtype", "float32")) for o in self.manifest["outputs"]]
        self._model = None
        if self.manifest["native"]:
            _check_runs_here(self.manifest, self.directory)
            lib = _open_library(self.directory / LIBRARY)
            lib.ac_model_load.restype = ctypes.c_void_p
            lib.ac_model_load.argtypes = [ctypes.c_char_p]
            lib.ac_model_run_timed.argtypes = [ctypes.c_void_p] * 4
            lib.ac_model_run_timed.restype = ctypes.c_int
            lib.ac_model_free.argtypes = [ctypes.c_void_p]
            self._lib = lib
            self._model = lib.ac_model_load(str(self.directory / "weights.bin").encode())
            if not self._model:
                raise AutoconfigError(f"{self.directory}: the model library could not load its weights")

    def __del__(self):
        if getattr(self, "_model", None):
            self._lib.ac_model_free(self._model)
            self._model = None

    def check(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The inputs in order, each a C-contiguous array of its type (float32, or int64
        where the manifest says so: ids within their table's rows) and shape."""
        names = [n for n, _ in self.inputs]
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise AutoconfigError(f"unknown input {unknown[0]!r}: the model's inputs are {', '.join(names)}")
        arrays = []
        for name, shape in self.inputs:
            if name not in inputs:
                raise AutoconfigError(f"missing input {name!r} of shape {shape}")
            x = inputs[name]
            x = np.asarray(x) if isinstance(x, np.generic) else x  # a numpy scalar: a 0-d input's value
            dtype, rows = self.input_types[name]
            if not isinstance(x, np.ndarray) or x.dtype != dtype:
                got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
                raise AutoconfigError(f"input {name!r} must be a {dtype} array, got {got}")
            if x.shape != shape:
                raise AutoconfigError(f"input {name!r} must have shape {shape}, got {x.shape}")
            outside = x[(x < -rows) | (x >= rows)] if rows else np.empty(0)
            if outside.size:
                raise AutoconfigError(f"input {name!r}: id {int(outside.reshape(-1)[0])} is outside the table's "
                                      f"{rows} rows")  # fmt: skip
            arrays.append(np.ascontiguousarray(x))
        return arrays

    def run(self, inputs: dict[str, np.ndarray], repeat: int = 1) -> tuple[dict[str, np.ndarray], float, list[float]]:
        """(outputs by name, median time of `repeat` runs in ns, each step's ns in the last run)."""
        arrays = self.check(inputs)
        outputs = [np.empty(shape, dtype) for (_, shape), dtype in zip(self.outputs, self.output_types)]
        if self._model is None:
            return self._run_emulated(arrays, outputs, repeat)
        pointers_in = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        pointers_out = (ctypes.c_void_p * max(1, len(outputs)))(*[o.ctypes.data for o in outputs])
        steps = np.zeros(max(1, self.manifest["steps"]), np.float64)
        times = []
        for _ in range(max(1, repeat)):
            start = time.perf_counter_ns()
            status = self._lib.ac_model_run_timed(self._model, pointers_in, pointers_out, steps.ctypes.data)
            if status:
                raise AutoconfigError(f"{self.directory}: the model's run stopped with status {status} "
                                      f"({RUN_STATUS.get(status, 'unknown')})")  # fmt: skip
            times.append(time.perf_counter_ns() - start)
        names = [n for n, _ in self.outputs]
        return dict(zip(names, outputs)), float(np.median(times)), steps.tolist()

    def _run_emulated(self, arrays: list[np.ndarray], outputs: list[np.ndarray],
                      repeat: int) -> tuple[dict[str, np.ndarray], float, list[float]]:  # fmt: skip
        target, execution = _execution(self.manifest)
        if execution.mode == "unavailable":
            raise AutoconfigError(f"cannot run {target.name} code here: {execution.reason}")
        with tempfile.TemporaryDirectory(prefix="autoconfig-run-") as tmp:
            ins = [Path(tmp) / f"in{i}.bin" for i in range(len(arrays))]
            outs = [Path(tmp) / f"out{i}.bin" for i in range(len(outputs))]
            for a, path in zip(arrays, ins):
                a.astype(a.dtype.newbyteorder("<")).tofile(path)
            command = [*target.emulator, str(self.directory / DRIVER), str(self.directory / "weights.bin"),
                       str(max(1, repeat)), *map(str, ins), *map(str, outs)]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise AutoconfigError(f"the model failed under {target.emulator[0]}: {last}")
            figures = [float(v) for v in done.stdout.split()]
            for o, path in zip(outputs, outs):
                o[...] = np.fromfile(path, o.dtype.newbyteorder("<")).reshape(o.shape)
        names = [n for n, _ in self.outputs]
        return dict(zip(names, outputs)), figures[0], figures[1:]

    def __call__(self, inputs: dict[str, np.ndarray] | None = None, **named: np.ndarray) -> dict[str, np.ndarray]:
        """Outputs by name for inputs by name (a dict, or keyword arguments)."""
        return self.run({**(inputs or {}), **named})[0]

    def kernel_times(self, steps_ns: list[float]) -> list[float]:
        """Each kernel's time: the sum of its program steps' times."""
        return [sum(steps_ns[a:b]) for a, b in (k["steps"] for k in self.manifest["kernels"])]

    def kernel_medians(self, inputs: dict[str, np.ndarray], runs: int) -> list[float]:
        """Each kernel's median time (ns) over `runs` runs: one run's figures move by
        tens of percent for the shortest kernels."""
        return np.median([self.kernel_times(self.run(inputs)[2]) for _ in range(max(1, runs))], axis=0).tolist()

    def placement(self) -> str | None:
        """Which of a several-thread model's two programs its calls now run (see README):
        memory reused at once where the cores pass cache lines quickly, else only after
        their caches cool; None for a model with one program or one run elsewhere."""
        if "near_arena_bytes" not in self.manifest or not self._model:
            return None
        near = self._lib.ac_pool_cores_near()
        return ("memory reused at once (the cores share their caches)" if near else
                "memory reused only after the other cores' caches cool (they share none)")

    def products_share(self, kernel_ns: list[float]) -> str:
        """The matrix products' share of the kernels' time and their rate against the
        profile's peak at the model's threads, in one line."""
        kernels = self.manifest["kernels"]
        timed = [(k["flops"], ns) for k, ns in zip(kernels, kernel_ns) if k.get("flops")]
        if not timed:
            return "matrix products: none"
        flops, ns = sum(f for f, _ in timed), sum(t for _, t in timed)
        peak = self.manifest["peak_gflops"]
        return (f"matrix products: {len(timed)} kernels, {ns / sum(kernel_ns):.1%} of the kernels' time, "
                f"{flops / ns:.1f} GFLOP/s = {flops / ns / peak:.2f}x the profile's {self.manifest['threads']}-thread "
                f"peak ({peak:.1f} GFLOP/s)")  # fmt: skip

    def prediction_accuracy(self, kernel_ns: list[float], total_ns: float) -> str:
        """The models' accuracy on this model in one line: Spearman's rank correlation
        of predicted and measured kernel times, and the predicted total over the measured."""
        predicted = [k["predicted_ns"] for k in self.manifest["kernels"]]
        return (f"prediction: Spearman {spearman(predicted, kernel_ns):.2f} over {len(predicted)} kernels; "
                f"predicted total {self.manifest['predicted_ns'] / 1e6:.3f} ms = "
                f"{self.manifest['predicted_ns'] / total_ns:.2f}x the measured {total_ns / 1e6:.3f} ms")  # fmt: skip


@reraised
def load(directory: Path | str) -> LoadedModel:
    """A built model directory, checked against its manifest, ready to call."""
    return LoadedModel(directory)

