"""ONNX's backend node tests run through `autoconfig.backend`: which of them the
operator table covers, and each one's outcome (passed, failed, or refused with its
one-line reason). The tests come from onnx's own loader, which makes them in memory
(onnx no longer ships their data directory)."""

from __future__ import annotations

import collections
import functools
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from autoconfig.backend import AutoconfigBackend, bind, parameter_inputs
from autoconfig.errors import AutoconfigError
from autoconfig.graph.fold import fold
from autoconfig.graph.functions import expand_functions
from autoconfig.graph.onnx_import import SUPPORTED


@dataclass(frozen=True)
class NodeTest:
    """One node test: its model, its data sets (inputs, expected outputs) and the
    tolerances onnx's runner compares with."""

    name: str
    model: onnx.ModelProto
    data_sets: tuple[tuple[list[np.ndarray], list[np.ndarray]], ...]
    rtol: float
    atol: float

    @property
    def operators(self) -> set[str]:
        return {n.op_type for n in self.model.graph.node}

    @functools.cached_property
    def generated(self) -> set[str]:
        """The operators left to generate once the import has folded what it can (the
        parameters bound to the first data set's values): an operator that is a function
        of others expands, a function body's Constant and CastLike nodes, a Shape of a
        static shape, fold."""
        inputs = dict(zip((i.name for i in self.model.graph.input), self.data_sets[0][0] if self.data_sets else []))
        model = bind(self.model, {name: inputs[name] for name in parameter_inputs(self.model) if name in inputs})
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        try:
            nodes = expand_functions(model, model.graph.node, opset, SUPPORTED)
            return {n.op_type for n in fold(model, nodes, opset, self.name).nodes}
        except AutoconfigError:  # the build gives the same one-line reason
            return self.operators

    def float32(self) -> bool:
        """Whether every data input and every output is float32 (parameters, bound at
        build time, may be of any type)."""
        parameters = set(parameter_inputs(self.model))
        values = [*(i for i in self.model.graph.input if i.name not in parameters), *self.model.graph.output]
        return all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in values)


@dataclass(frozen=True)
class Outcome:
    status: str  # "passed", "failed" (a wrong answer) or "refused" (AutoconfigError)
    detail: str = ""


def node_tests() -> list[NodeTest]:
    """Every node test of the installed onnx, with its data."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():  # the generators compute some expected outputs with inf and nan
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    return [NodeTest(c.name, *_model_and_data(c), c.rtol, c.atol) for c in cases]


def _model_and_data(case) -> tuple[onnx.ModelProto, tuple]:
    if case.model is not None:
        return case.model, tuple((list(i), list(o)) for i, o in case.data_sets)
    model = onnx.load(str(Path(case.model_dir) / "model.onnx"))
    sets = []
    for directory in sorted(Path(case.model_dir).glob("test_data_set_*")):
        sets.append(tuple([_tensor(p) for p in sorted(directory.glob(f"{kind}_*.pb"), key=_index)]
                          for kind in ("input", "output")))  # fmt: skip
    return model, tuple(sets)


def _index(path: Path) -> int:
    return int(path.stem.split("_")[-1])


def _tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def in_table(test: NodeTest) -> bool:
    """Whether every operator the test leaves to generate is in the operator table."""
    return test.generated <= SUPPORTED


def run(test: NodeTest, bind_parameters: bool = True, **options) -> Outcome:
    """Build and run one node test on every data set, compared as onnx's runner does."""
    try:
        rep = AutoconfigBackend.prepare(test.model, bind_parameters=bind_parameters, **options)
        for inputs, expected in test.data_sets:
            outputs = rep.run(inputs)
            for name, want, got in zip(rep.outputs, expected, outputs, strict=True):
                if want.shape != got.shape or want.dtype != got.dtype or not np.allclose(
                        got, want, rtol=test.rtol, atol=test.atol, equal_nan=True):  # fmt: skip
                    return Outcome("failed", f"{name}: {_difference(want, got)}")
    except AutoconfigError as err:
        return Outcome("refused", str(err).splitlines()[0])
    return Outcome("passed")


def _difference(want: np.ndarray, got: np.ndarray) -> str:
    if want.shape != got.shape or want.dtype != got.dtype:
        return f"{got.dtype} of shape {got.shape}, expected {want.dtype} of {want.shape}"
    error = np.abs(got.astype(np.float64) - want)
    return f"max error {float(np.nanmax(error)):.3g} where the expected values reach {float(np.abs(want).max()):.3g}"


def reason(detail: str) -> str:
    """A refusal's reason without the file, node and value names (so equal reasons count
    together)."""
    detail = detail.split("): ", 1)[-1] if "): " in detail else detail.split(": ", 1)[-1]
    return re.sub(r"'[^']*' is u?int\d+", "'…' is an integer", re.sub(r"'[^']*'", "'…'", detail))


SPEC_OVER_REFERENCE: dict[str, str] = {
    "test_resize_downsample_scales_linear_align_corners": "align_corners divides by the output's integer length",
    "test_resize_downsample_scales_cubic_align_corners": "align_corners divides by the output's integer length",
}
"""Node tests whose expected outputs come from onnx's reference where it departs from
the spec (Resize's align_corners: the spec's length_resized is the output's length, 2
here; the reference divides by scale × input length, 2.4), and onnxruntime follows the
spec: these are held to onnxruntime's answer instead."""


def operators_outside(tests: list[NodeTest]) -> list[tuple[str, int]]:
    """The operators outside the table, ranked by how many tests need them."""
    counts = collections.Counter(op for t in tests for op in t.generated - SUPPORTED)
    return counts.most_common()
