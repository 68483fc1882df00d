"""Random small graphs (`tests.graph_strategies`) built with each fusion strategy and
thread count, run on inputs of both signs, compared with onnxruntime with its graph
optimizations off (`tests.test_build.onnxruntime_outputs`).
AUTOCONFIG_RANDOM_GRAPHS=N runs N examples from a fresh random seed instead of the
suite's fixed 200, printing a failure's replay blob."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import onnx
import onnxruntime as ort
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import autoconfig
from autoconfig.graph import zoo
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.graph_strategies import graphs
from tests.test_build import PROFILES, onnxruntime_outputs

LONG_RUN = int(os.environ.get("AUTOCONFIG_RANDOM_GRAPHS", "0"))

ROUNDING_FLOOR = 0.01
"""The least range an output is held to, as a share of its largest value's size: a
narrower range is within float32's rounding of the values themselves."""

ABSOLUTE_FLOOR = 1e-6
"""The least error bound: a mean or product of standard-normal values that cancel to
a small result carries float32 rounding of the terms' size (~1e-7 each), whatever the
order of the sum; a wrong answer is off by far more."""


def built_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], fusion: str, threads: int) -> list[np.ndarray]:
    with tempfile.TemporaryDirectory(prefix="autoconfig-random-") as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save(model, path)
        autoconfig.compile_model(path, Path(tmp) / "built", profile=PROFILES["avx2"], target="avx2", fusion=fusion,
                                 threads=threads)  # fmt: skip
        loaded = autoconfig.load(Path(tmp) / "built")
        return [loaded(feeds)[o.name] for o in model.graph.output]


def assert_close(ours: list[np.ndarray], expected: list[np.ndarray]) -> None:
    """Each output within 1e-4 of the reference's range, NaN exactly where it has NaN
    (a square root of a negative, say)."""
    for value, want in zip(ours, expected, strict=True):
        assert value.shape == want.shape
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(value), nan, err_msg="NaN where the reference has none, or none")
        value, want = value[~nan], want[~nan]
        if not want.size:
            continue
        spread = max(float(want.max() - want.min()), ROUNDING_FLOOR * float(np.abs(want).max()))
        error = float(np.abs(value - want).max())
        assert error <= max(1e-4 * spread, ABSOLUTE_FLOOR), f"max error {error:.3g} over a range of {spread:.3g}"


@pytest.mark.slow
@settings(max_examples=LONG_RUN or 200, deadline=None, derandomize=not LONG_RUN, database=None, print_blob=bool(LONG_RUN),
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(model=graphs(), fusion=st.sampled_from(["dp", "greedy", "none"]), threads=st.sampled_from([1, 2]))
def test_random_graphs_match_onnxruntime(model, fusion, threads):
    require_runnable(get_target("avx2"))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)  # both signs
    feeds = {"input": x}
    assert_close(built_outputs(model, feeds, fusion, threads), onnxruntime_outputs(model, feeds))


def test_pad_then_max_pool_keeps_the_zeros_on_negative_inputs():
    """A constant-0 Pad before a MaxPool: on all-negative inputs the padded border's
    zeros win at the edges (the spec: Pad writes 0, MaxPool takes the maximum).
    onnxruntime's default optimizations fold the Pad into the pool's own padding,
    which MaxPool fills with -inf, and answer negative values there; with its
    optimizations off it agrees with the spec, and so must we."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("pad_pool", 0)
    padded = b.op("Pad", ["input", b.const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    model = b.model("input", [1, 2, 5, 5], [(b.op("MaxPool", [padded], kernel_shape=[3, 3]), None)])
    x = -1 - np.random.default_rng(3).random((1, 2, 5, 5)).astype(np.float32)
    spec = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    spec = np.lib.stride_tricks.sliding_window_view(spec, (3, 3), axis=(2, 3)).max(axis=(4, 5))
    ours = built_outputs(model, {"input": x}, "dp", 1)[0]
    np.testing.assert_array_equal(ours, spec)
    np.testing.assert_array_equal(onnxruntime_outputs(model, {"input": x})[0], spec)
    optimized = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert not np.array_equal(optimized.run(None, {"input": x})[0], spec)  # the reference's own mistake
