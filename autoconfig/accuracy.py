"""How close figures are: predictions ranked against measurements (the figure the
models are held to, per layer against the configurations timed, per model against its
kernels' times), and our outputs against a reference runtime's."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ERROR_BOUND = 1e-4
"""Max output error allowed against a reference runtime, relative to the output's
range: float32 sums in another order differ by a few ulps per term, far below this."""


MASK_PADDING = 8
"""A mask input's last 1/MASK_PADDING positions are padding (0), the others 1."""


def sample_input(shape: tuple[int, ...], dtype: str = "float32", ids_below: int = 0,
                 rng: np.random.Generator | None = None) -> np.ndarray:  # fmt: skip
    """An input as a user gives one: float32 standard normal (both signs); int64 ids
    drawn below their table's rows; any other int64 input an attention mask, 1 then 0
    over the last eighth of its last axis (padding)."""
    rng = rng or np.random.default_rng(0)
    if dtype == "float32":
        return rng.standard_normal(shape, dtype=np.float32)
    if ids_below:
        return rng.integers(0, ids_below, shape, dtype=np.int64)
    mask = np.ones(shape, np.int64)
    if shape:
        mask[..., shape[-1] - shape[-1] // MASK_PADDING :] = 0
    return mask


def sample_inputs(inputs: list[dict], seed: int = 0) -> dict[str, np.ndarray]:
    """`sample_input` for each of a manifest's inputs (name, shape, dtype, ids_below)."""
    rng = np.random.default_rng(seed)
    return {i["name"]: sample_input(tuple(i["shape"]), i.get("dtype", "float32"), i.get("ids_below", 0), rng)
            for i in inputs}  # fmt: skip


def output_error(value: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(max |value - expected|, expected's range (1 if constant)): within bounds when
    the first is at most ERROR_BOUND times the second. Integers and bools compare as
    numbers."""
    value, expected = np.asarray(value, np.float64), np.asarray(expected, np.float64)
    spread = float(expected.max() - expected.min()) or 1.0
    return float(np.abs(value - expected).max()), spread


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation of `x` and `y` (average ranks for ties; nan for
    fewer than three values, which always rank perfectly, or a constant side)."""
    if len(x) <= 2:
        return float("nan")
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: Sequence[float]) -> np.ndarray:
    v = np.asarray(values, np.float64)
    order = np.argsort(v, kind="stable")
    r = np.empty(len(v))
    r[order] = np.arange(len(v))
    for value in np.unique(v):
        same = v == value
        r[same] = r[same].mean()
    return r


def onnxruntime_session(path: str, threads: int):
    """onnxruntime as a peer is run: CPU, all graph optimizations, `threads` intra-op
    threads and one inter-op thread."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
