"""How well predictions rank what was measured: the figure the models are held to
(per layer against the configurations timed, per model against its kernels' times)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
