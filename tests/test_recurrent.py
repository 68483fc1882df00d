"""LSTM, GRU and RNN (`graph.recurrent`: projections, then a kernel call per step) against
onnxruntime: both directions, initial states or none, each output asked for or not,
long sequences, threads, and what is refused."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

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


@st.composite
def layers(draw) -> tuple[onnx.ModelProto, str, int]:
    """A random LSTM, GRU or RNN (its recurrence contractive: with a spectral radius
    above 1 the float64 reference itself drifts from onnxruntime over the steps), with
    the target and threads to build it for."""
    kind = draw(st.sampled_from(sorted(GATES)))
    hidden = draw(st.sampled_from([1, 3, 8, 15, 16, 17, 33, 48, 70]))
    attrs = {"linear_before_reset": draw(st.integers(0, 1))} if kind == "GRU" else {}
    if draw(st.booleans()):
        attrs["clip"] = draw(st.floats(0.2, 2.0))
    given = 3 if kind == "LSTM" else 2  # Y, Y_h (, Y_c)
    outputs = draw(st.lists(st.booleans(), min_size=given, max_size=given))
    model = recurrent(kind, draw(st.sampled_from(["forward", "reverse", "bidirectional"])), draw(st.booleans()),
                      (True, *outputs[1:]), seed=draw(st.integers(0, 99)), seq=draw(st.integers(1, 40)),
                      batch=draw(st.integers(1, 7)), width=draw(st.integers(1, 20)), hidden=hidden,
                      peepholes=kind == "LSTM" and draw(st.booleans()), **attrs)  # fmt: skip
    for tensor in model.graph.initializer:
        if tensor.name == "R":
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor) / np.float32(np.sqrt(hidden)), "R"))
    return model, draw(st.sampled_from(["avx2", "avx512"])), draw(st.sampled_from([1, 2]))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # fmt: skip
@given(layer=layers())
def test_random_recurrent_layers_match_onnxruntime(tmp_path_factory, layer):
    """Any cell, direction, length, batch, width and hidden size (whole vectors, a
    partial one, less than one), clip, peepholes, initial states and outputs asked for,
    on either target at 1 or 2 threads."""
    model, target, threads = layer
    built_matches_onnxruntime(tmp_path_factory.mktemp("layer"), model, target, threads)


@pytest.mark.parametrize(("kind", "threading"), [
    ("LSTM", (1, 1, False)), ("LSTM", (1, 1, True)), ("LSTM", (2, 1, True)), ("LSTM", (2, 1, False)),
    ("LSTM", (1, 2, False)), ("GRU", (2, 1, False)), ("GRU", (1, 2, False)),
])  # fmt: skip
def test_every_threading_of_the_steps_matches_onnxruntime(tmp_path, monkeypatch, kind, threading):
    """Directions one after the other or side by side, units whole or split, a call per
    step or one for all steps: whichever the model picks, the answer is onnxruntime's
    (a GRU without linear_before_reset: two kernels a step)."""
    from autoconfig.families import recurrent as family
    from autoconfig.models import recurrent as model

    together, splits, looped = threading
    chosen = model.choose

    def forced(shape, *args, **options):
        best = chosen(shape, *args, **options)
        return model.predict(model.RecurrentPlan(best.config, shape, together, splits, looped), args[0])

    monkeypatch.setattr(family.recurrent_model, "choose", forced)
    built_matches_onnxruntime(tmp_path, recurrent(kind, "bidirectional", True, (True, True, True)[: 3 if kind == "LSTM"
                                                                                                 else 2],
                                                  seed=4, seq=7, batch=3, width=5, hidden=37), "avx512", threads=2)
