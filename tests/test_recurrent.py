"""LSTM, GRU and RNN (`graph.recurrent`: projections, then a kernel call per step) against
onnxruntime: both directions, initial states or none, each output asked for or not,
long sequences, threads, and what is refused."""

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
              seq: int = 5, batch: int = 2, width: int = 3, hidden: int = 4, peepholes: bool = False,
              **attrs) -> onnx.ModelProto:  # fmt: skip
    """One `kind` node on x [seq, batch, width] (and h0, c0 inputs if `initial`; an
    LSTM's peephole weights if `peepholes`), each output it gives (`outputs`: Y, Y_h,
    Y_c) followed by a ReLU."""
    rng, dirs = np.random.default_rng(seed), 2 if direction == "bidirectional" else 1
    weights = {"W": (dirs, GATES[kind] * hidden, width), "R": (dirs, GATES[kind] * hidden, hidden),
               "B": (dirs, 2 * GATES[kind] * hidden), **({"P": (dirs, 3 * hidden)} if peepholes else {})}  # fmt: skip
    tensors = [helper.make_tensor(n, TensorProto.FLOAT, s, (rng.standard_normal(s) / 2).ravel())
               for n, s in weights.items()]  # fmt: skip
    states = ["h0", "c0"][: (2 if kind == "LSTM" else 1) if initial else 0]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, width])]
    inputs += [helper.make_tensor_value_info(s, TensorProto.FLOAT, [dirs, batch, hidden]) for s in states]
    names = [n if asked else "" for n, asked in zip(("Y", "Y_h", "Y_c"), outputs)]
    given = ["x", "W", "R", "B", "", *(states + ["", ""])[:2], "P" if peepholes else ""]
    node = helper.make_node(kind, " ".join(given).rstrip().split(" "), names, hidden_size=hidden, direction=direction,
                            **attrs)  # fmt: skip
    relus = [helper.make_node("Relu", [n], [f"{n}_relu"]) for n in names if n]
    graph = helper.make_graph([node, *relus], kind.lower(), inputs,
                              [helper.make_tensor_value_info(f"{n}_relu", TensorProto.FLOAT, None) for n in names if n],
                              tensors)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


def built_matches_onnxruntime(tmp_path, model: onnx.ModelProto, target: str = "avx2", threads: int = 1) -> dict:
    """Build `model` for `target` at `threads`, run it on inputs of both signs and hold
    every output to onnxruntime's; the manifest."""
    t = get_target(target)
    require_runnable(t)
    onnx.save(model, tmp_path / "model.onnx")
    manifest = autoconfig.compile_model(tmp_path / "model.onnx", tmp_path / "built", profile=PROFILES[target],
                                        target=t, threads=threads)  # fmt: skip
    rng = np.random.default_rng(1)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input}  # fmt: skip
    ours = autoconfig.load(tmp_path / "built")(feeds)
    for got, expected in zip(ours.values(), onnxruntime_outputs(model, feeds), strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5)
    return manifest


@pytest.mark.parametrize(("kind", "direction", "initial", "outputs", "attrs"), [
    ("LSTM", "bidirectional", True, (True, True, True), {}),
    ("LSTM", "reverse", False, (False, True, True), {}),
    ("GRU", "forward", True, (True, True), {"linear_before_reset": 1}),
    ("GRU", "bidirectional", False, (True, False), {}),
    ("RNN", "reverse", True, (True, True), {}),
])  # fmt: skip
def test_a_recurrent_layer_matches_onnxruntime(tmp_path, kind, direction, initial, outputs, attrs):
    built_matches_onnxruntime(tmp_path, recurrent(kind, direction, initial, outputs, seed=len(kind) + len(direction),
                                                  **attrs))  # fmt: skip


@pytest.mark.parametrize(("kind", "target", "threads", "sizes", "attrs"), [
    ("LSTM", "avx512", 2, {"seq": 70, "batch": 3, "hidden": 37}, {"clip": 0.7}),
    ("LSTM", "avx2", 2, {"seq": 40, "batch": 1, "hidden": 20, "peepholes": True}, {"input_forget": 1}),
    ("GRU", "avx512", 2, {"seq": 50, "batch": 5, "hidden": 33}, {}),
    ("GRU", "avx2", 1, {"seq": 9, "batch": 2, "hidden": 8},
     {"activations": ["HardSigmoid", "LeakyRelu"] * 2, "activation_alpha": [0.3, 0.2, 0.1], "activation_beta": [0.4],
      "linear_before_reset": 1}),
    ("RNN", "avx512", 2, {"seq": 100, "batch": 2, "hidden": 50}, {"activations": ["Relu", "Softsign"]}),
    ("RNN", "avx2", 1, {"seq": 6, "batch": 2, "hidden": 9},
     {"activations": ["ScaledTanh", "Affine"], "activation_alpha": [0.7, 0.5], "activation_beta": [1.3, 0.2]}),
])  # fmt: skip
def test_long_wide_and_unusual_layers_match_onnxruntime(tmp_path, kind, target, threads, sizes, attrs):
    """Sequences of any length (each step one call), hidden sizes of partial vectors split
    across threads, several batch rows, clip, peepholes, input_forget and the activations
    beyond the defaults with their alphas and betas, both directions."""
    model = recurrent(kind, "bidirectional", True, (True, True, True)[: 3 if kind == "LSTM" else 2],
                      seed=sizes["seq"], width=6, **sizes, **attrs)  # fmt: skip
    manifest = built_matches_onnxruntime(tmp_path, model, target, threads)
    assert len(manifest["kernels"]) < 20, len(manifest["kernels"])  # the steps are calls, not kernels


def test_an_activation_without_its_parameters_is_refused_in_one_line(tmp_path, capsys):
    from autoconfig.cli import main

    model = recurrent("RNN", "forward", False, (True,), seed=2, activations=["Affine"], activation_alpha=[0.5])
    onnx.save(model, tmp_path / "affine.onnx")
    assert main(["build", str(tmp_path / "affine.onnx"), "--out", str(tmp_path / "built"), "--profile",
                 str(PROFILES["avx2"])]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "affine.onnx: node" in err, err
    assert "(RNN): the Affine activation needs its alpha and beta given" in err, err
