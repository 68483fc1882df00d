"""Random small graphs (`tests.graph_strategies`) built with each fusion strategy and
thread count, run on inputs of both signs, compared with onnxruntime with its graph
optimizations off (its optimizers rewrite some graphs wrongly: see test_pad_then_max_pool).
AUTOCONFIG_RANDOM_GRAPHS=N runs N examples from a fresh random seed instead of the
suite's fixed 200."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autoconfig
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.graph_strategies import graphs
from tests.test_build import PROFILES

LONG_RUN = int(os.environ.get("AUTOCONFIG_RANDOM_GRAPHS", "0"))


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs with every graph optimization off: the spec's answer."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def built_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], fusion: str, threads: int) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory(prefix="autoconfig-random-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        autoconfig.compile_model(path, Path(tmp) / "built", profile=PROFILES["avx2"], target="avx2", fusion=fusion,
                                 threads=threads)  # fmt: skip
        loaded = autoconfig.load(Path(tmp) / "built")
        return [loaded(feeds)[o.name] for o in model.graph.output]


def assert_close(ours: list[np.ndarray], expected: list[np.ndarray]) -> None:
    for value, want in zip(ours, expected, strict=True):
        assert value.shape == want.shape
        spread = float(want.max() - want.min()) if want.size else 0.0
        error = float(np.abs(value - want).max()) if want.size else 0.0
        assert error <= 1e-4 * max(spread, 1.0), f"max error {error:.3g} over a range of {spread:.3g}"


@settings(max_examples=LONG_RUN or 200, deadline=None, derandomize=not LONG_RUN, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(model=graphs(), fusion=st.sampled_from(["dp", "greedy", "none"]), threads=st.sampled_from([1, 2]))
def test_random_graphs_match_onnxruntime(model, fusion, threads):
    require_runnable(get_target("avx2"))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)  # both signs
    feeds = {"input": x}
    assert_close(built_outputs(model, feeds, fusion, threads), reference(model, feeds))
