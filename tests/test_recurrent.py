"""LSTM, GRU and RNN, unrolled over their sequence at import (`graph.recurrent`), against
onnxruntime: both directions, initial states or none, each output asked for or not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import autoconfig
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def recurrent(kind: str, direction: str, initial: bool, outputs: tuple[bool, ...], seed: int,
              seq: int = 5, batch: int = 2, width: int = 3, hidden: int = 4, **attrs) -> onnx.ModelProto:  # fmt: skip
    """One `kind` node on x [seq, batch, width] (and h0, c0 inputs if `initial`), each
    output it gives (`outputs`: Y, Y_h, Y_c) followed by a ReLU."""
    rng, dirs = np.random.default_rng(seed), 2 if direction == "bidirectional" else 1
    weights = {"W": (dirs, GATES[kind] * hidden, width), "R": (dirs, GATES[kind] * hidden, hidden),
               "B": (dirs, 2 * GATES[kind] * hidden)}  # fmt: skip
    tensors = [helper.make_tensor(n, TensorProto.FLOAT, s, (rng.standard_normal(s) / 2).ravel())
               for n, s in weights.items()]  # fmt: skip
    states = ["h0", "c0"][: (2 if kind == "LSTM" else 1) if initial else 0]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, width])]
    inputs += [helper.make_tensor_value_info(s, TensorProto.FLOAT, [dirs, batch, hidden]) for s in states]
    names = [n if asked else "" for n, asked in zip(("Y", "Y_h", "Y_c"), outputs)]
    node = helper.make_node(kind, ["x", "W", "R", "B", "", *states], names, hidden_size=hidden, direction=direction,
                            **attrs)  # fmt: skip
    relus = [helper.make_node("Relu", [n], [f"{n}_relu"]) for n in names if n]
    graph = helper.make_graph([node, *relus], kind.lower(), inputs,
                              [helper.make_tensor_value_info(f"{n}_relu", TensorProto.FLOAT, None) for n in names if n],
                              tensors)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(("kind", "direction", "initial", "outputs", "attrs"), [
    ("LSTM", "bidirectional", True, (True, True, True), {}),
    ("LSTM", "reverse", False, (False, True, True), {}),
    ("GRU", "forward", True, (True, True), {"linear_before_reset": 1}),
    ("GRU", "bidirectional", False, (True, False), {}),
    ("RNN", "reverse", True, (True, True), {}),
])  # fmt: skip
def test_a_recurrent_layer_matches_onnxruntime(tmp_path, kind, direction, initial, outputs, attrs):
    require_runnable(get_target("avx2"))
    model = recurrent(kind, direction, initial, outputs, seed=len(kind) + len(direction), **attrs)
    onnx.save(model, tmp_path / "model.onnx")
    autoconfig.compile_model(tmp_path / "model.onnx", tmp_path / "built", profile=PROFILES["avx2"],
                             target=get_target("avx2"))  # fmt: skip
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}  # fmt: skip
    ours = autoconfig.load(tmp_path / "built")(feeds)
    for got, expected in zip(ours.values(), onnxruntime_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_long_sequence_is_refused_in_one_line(tmp_path, capsys):
    from autoconfig.cli import main

    onnx.save(recurrent("LSTM", "bidirectional", False, (True,), seed=2, seq=17), tmp_path / "long.onnx")
    assert main(["build", str(tmp_path / "long.onnx"), "--out", str(tmp_path / "built"), "--profile",
                 str(PROFILES["avx2"])]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "long.onnx: node" in err, err  # the file, though refused at import
    assert "(LSTM): 34 steps (sequence × directions) are more than the 32 unrolled" in err, err
