"""An ONNX backend (`onnx.backend.base.Backend`) that runs models the way a user does:
`prepare` builds the model with `autoconfig build` (generated kernels, never the numpy
interpreter) and the rep runs the built library.

A deployed model holds its weights, shapes, axes, scales and bounds as constants, while
ONNX's node tests often pass them as graph inputs. With `bind_parameters` (the
default), a graph input read only where its operators take such parameters (the
operator table's `parameters`) is bound as a constant at build time, from the values
of the first run; the model is built again if later runs give other values. Data
inputs stay run-time inputs. `onnx.backend.test.BackendTest(AutoconfigBackend)` drives
it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ops import OPERATORS

IR_VERSION = 10
"""The IR version a built model is saved with: onnx writes newer ones than the
runtimes read, and the build reads none of what later versions added."""


def parameter_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs that every node reading them reads as a parameter (a weight, a
    shape, axes, scales, bounds: the operator table's `parameters`), in graph order."""
    initialized = {t.name for t in model.graph.initializer}
    positions: dict[str, set[bool]] = {}
    for node in model.graph.node:
        info = OPERATORS.get(node.op_type)
        for index, name in enumerate(node.input):
            positions.setdefault(name, set()).add(info is not None and index in info.parameters)
    outputs = {o.name for o in model.graph.output}
    return [i.name for i in model.graph.input
            if i.name not in initialized and i.name not in outputs and positions.get(i.name) == {True}]  # fmt: skip


class AutoconfigRep(BackendRep):
    """A model prepared by `AutoconfigBackend`: built once per set of bound parameter
    values (at the first run when any are bound, else at once), run natively."""

    def __init__(self, model: onnx.ModelProto, options: dict[str, Any], bind_parameters: bool):
        self.model, self.options = model, options
        self.inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        self.outputs = [o.name for o in model.graph.output]
        self.parameters = parameter_inputs(model) if bind_parameters else []
        self._workdir = tempfile.TemporaryDirectory(prefix="autoconfig-backend-")
        self._built: dict[bytes, Any] = {}
        if not self.parameters:
            self._loaded({})

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        """The model's outputs, in graph order, for inputs in graph order (a sequence)
        or by name (a mapping)."""
        feeds = dict(inputs) if isinstance(inputs, Mapping) else dict(zip(self.inputs, _sequence(inputs)))
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise AutoconfigError(f"missing input {missing[0]!r}: the model's inputs are {', '.join(self.inputs)}")
        loaded = self._loaded({n: np.asarray(feeds[n]) for n in self.parameters})
        data = {n: feeds[n] for n in self.inputs if n not in self.parameters}
        results = loaded(data)
        return tuple(results[name] for name in self.outputs)

    def _loaded(self, bound: dict[str, np.ndarray]):
        """The built model with `bound` as constants (built on first use)."""
        key = b"".join(name.encode() + v.dtype.str.encode() + repr(v.shape).encode() + v.tobytes()
                       for name, v in bound.items())  # fmt: skip
        if key not in self._built:
            from autoconfig.compiler import compile_model
            from autoconfig.loader import load

            root = Path(self._workdir.name) / str(len(self._built))
            root.mkdir()
            onnx.save(bind(self.model, bound), root / "model.onnx")
            compile_model(root / "model.onnx", root / "built", **self.options)
            self._built[key] = load(root / "built")
        return self._built[key]


def _sequence(inputs: Any) -> Sequence:
    return [inputs] if isinstance(inputs, np.ndarray) else list(inputs)


def bind(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs named in `values` are initializers of those
    values, saved at IR_VERSION."""
    bound = onnx.ModelProto()
    bound.CopyFrom(model)
    graph = bound.graph
    kept = [i for i in graph.input if i.name not in values]
    del graph.input[:]
    graph.input.extend(kept)
    graph.initializer.extend(onnx.numpy_helper.from_array(v, name) for name, v in values.items())
    bound.ir_version = min(bound.ir_version, IR_VERSION)
    return bound


class AutoconfigBackend(Backend):
    """`prepare(model, device="CPU", *, profile=None, target=None, fusion="dp",
    threads=None, bind_parameters=True)`: the options are `autoconfig.compile_model`'s
    (profile None: this machine's)."""

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> AutoconfigRep:
        if not cls.supports_device(device):
            raise AutoconfigError(f"device {device!r} is not supported: autoconfig builds for the CPU")
        bind_parameters = bool(kwargs.pop("bind_parameters", True))
        unknown = sorted(set(kwargs) - {"profile", "target", "fusion", "threads"})
        if unknown:
            raise AutoconfigError(f"unknown backend option {unknown[0]!r}")
        return AutoconfigRep(model, kwargs, bind_parameters)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = AutoconfigBackend.prepare
run_model = AutoconfigBackend.run_model
supports_device = AutoconfigBackend.supports_device
