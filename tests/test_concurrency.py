"""One loaded model called from several threads at once: every call has its own
working memory, so every answer is the one the model gives alone, and onnxruntime's."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest

import autoconfig
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs, small_cnn

THREADS = 4
CALLS = 120
FIXTURES = Path(__file__).parent / "fixtures"


def built_cnn(tmp_path: Path, threads: int) -> tuple[onnx.ModelProto, Path]:
    require_runnable(get_target("avx2"))
    model = small_cnn()
    onnx.save(model, tmp_path / "cnn.onnx")
    out = tmp_path / f"cnn{threads}"
    autoconfig.compile_model(tmp_path / "cnn.onnx", out, profile=PROFILES["avx2"], target="avx2", threads=threads)
    return model, out


def distinct_inputs(loaded, count: int = 8) -> tuple[str, list[np.ndarray]]:
    """The model's input name and `count` inputs of both signs for it."""
    name, shape = loaded.inputs[0]
    rng = np.random.default_rng(11)
    return name, [rng.standard_normal(shape, dtype=np.float32) for _ in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_one_model_called_from_four_python_threads_answers_right(tmp_path, threads):
    model, out = built_cnn(tmp_path, threads)
    loaded = autoconfig.load(out)
    name, xs = distinct_inputs(loaded)
    expected = [onnxruntime_outputs(model, {name: x})[0] for x in xs]
    wrong: list[int] = []

    def work(t: int) -> None:
        for i in range(CALLS):
            k = (i + t) % len(xs)
            y = next(iter(loaded({name: xs[k]}).values()))
            if not np.allclose(y, expected[k], atol=1e-4 * float(np.ptp(expected[k]))):
                wrong.append(k)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not wrong, f"{len(wrong)} of {THREADS * CALLS} calls answered wrong"


@pytest.mark.parametrize("threads", [1, 2])
def test_one_model_called_from_four_c_threads_answers_right(tmp_path, threads):
    model, out = built_cnn(tmp_path, threads)
    loaded = autoconfig.load(out)
    name, xs = distinct_inputs(loaded)
    out_shape = loaded.outputs[0][1]
    np.stack(xs).tofile(tmp_path / "inputs.bin")
    app = tmp_path / "concurrent_runs"
    subprocess.run(["cc", "-O1", "-pthread", str(FIXTURES / "concurrent_runs.c"), f"-I{out}",
                    str(out / "libautoconfig_model.so"), f"-Wl,-rpath,{out}", "-o", str(app)], check=True)  # fmt: skip
    done = subprocess.run([str(app), str(out / "weights.bin"), str(tmp_path / "inputs.bin"), str(len(xs)),
                           str(xs[0].size), str(int(np.prod(out_shape))), str(CALLS), str(tmp_path / "alone.bin")],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == f"0 wrong of {THREADS * CALLS}"
    alone = np.fromfile(tmp_path / "alone.bin", np.float32).reshape(len(xs), *out_shape)
    for x, y in zip(xs, alone):
        expected = onnxruntime_outputs(model, {name: x})[0]
        np.testing.assert_allclose(y, expected, atol=1e-4 * float(np.ptp(expected)))
