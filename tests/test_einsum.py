"""Einsum, computed as batched matrix products (`graph.simplify`), against onnxruntime:
an attention's two contractions, letters summed in one operand alone, transposed
outputs, an outer product, an implicit output, one operand alone, ellipses and
diagonals; and its one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from autoconfig.errors import AutoconfigError
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import onnxruntime_outputs
from tests.test_random_graphs import assert_close, built_outputs

CASES = [  # equation, the computed operand's shape, the constant's (None: one operand)
    ("b g h i d, b g h j d -> b g h i j", (1, 2, 3, 5, 4), (1, 2, 3, 6, 4)),
    ("bhij,bhjd->bhid", (2, 3, 5, 6), (2, 3, 6, 4)),
    ("ijk,jkl->li", (3, 4, 5), (4, 5, 2)),
    ("ij,kj->jik", (3, 4), (5, 4)),
    ("ijz,jk->ik", (3, 4, 2), (4, 6)),
    ("i,j->ij", (5,), (3,)),
    ("ij,jk", (3, 4), (4, 2)),
    ("ijk->kj", (2, 3, 4), None),
    ("...qhd,...khd->...hqk", (2, 3, 5, 2, 4), (2, 3, 6, 2, 4)),  # LongT5's local attention
    ("...ij,...jk", (2, 3, 4), (2, 4, 5)),  # implicit: the ellipsis's axes first
    ("b...d,bd->b...", (2, 3, 4, 5), (2, 5)),
    ("...ij,jk->...ik", (2, 3, 4), (4, 5)),  # an ellipsis of no axes in the second
    ("ii->i", (4, 4), None),  # diagonals: a letter repeated in an operand's term
    ("ii", (5, 5), None),  # the trace
    ("...ii->...i", (2, 3, 3), None),
    ("iji->j", (3, 4, 3), None),
    ("iii->i", (3, 3, 3), None),
    ("iij,jk->ik", (3, 3, 4), (4, 2)),
    ("ij,jj->ij", (3, 4), (4, 4)),  # the constant's diagonal
]


@pytest.mark.parametrize("equation, shape, other", CASES, ids=[c[0].replace(" ", "") for c in CASES])
def test_an_einsum_matches_onnxruntime(equation, shape, other):
    require_runnable(get_target("avx2"))
    rng = np.random.default_rng(7)
    b = zoo.Builder("einsum", 5)
    inputs = [b.op("Tanh", ["input"])] + ([b.const("w", rng.standard_normal(other))] if other else [])
    y = b.op("Einsum", inputs, equation=equation)
    expected = np.einsum(equation.replace(" ", ""), np.zeros(shape), *([np.zeros(other)] if other else []))
    model = b.model("input", list(shape), [(y, list(expected.shape))])
    x = (2 * rng.standard_normal(shape)).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))


@pytest.mark.parametrize("equation, why", [("ij->ii", "each output letter once"),
                                           ("...ij,...jk->...ik", "an ellipsis broadcast is not generated")])
def test_an_einsum_the_build_does_not_compute_is_refused_in_one_line(equation, why):
    b = zoo.Builder("einsum", 5)
    shaped = [b.op("Reshape", ["input", b.const("s", np.array(s))]) for s in ([2, 2, 4], [1, 4, 4])]  # 2 over 1
    y = b.op("Einsum", shaped if "," in equation else ["input"], equation=equation)
    model = b.model("input", [4, 4], [(y, None)])
    with pytest.raises(AutoconfigError, match=rf"node 'einsum_\d+' \(Einsum\): equation .*{why}"):
        import_model(model)
