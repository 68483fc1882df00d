"""ONNX import, simplifications, the reference interpreter (vs onnxruntime on the
four zoo models), and one-line errors for bad models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from autoconfig.errors import AutoconfigError
from autoconfig.graph import zoo
from autoconfig.graph.interpret import run
from autoconfig.graph.onnx_import import import_model, load_onnx
from autoconfig.graph.ops import OPERATORS


def reference(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_interpreter_matches_onnxruntime_on_the_zoo(name):
    model = zoo.build(name)
    graph = import_model(model, name)
    x = np.random.default_rng(0).standard_normal(graph.types[graph.inputs[0]].shape).astype(np.float32)
    ours = run(graph, {graph.inputs[0]: x})
    for (out, value), expected in zip(ours.items(), reference(model, x)):
        scale = float(expected.max() - expected.min())
        assert value.shape == expected.shape
        assert float(np.max(np.abs(value - expected))) <= 1e-4 * scale, out
    # BatchNormalization is folded into the convolutions before it
    assert not any(n.op == "BatchNormalization" for n in graph.nodes)


def tiny(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "tiny", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def value(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_constant_folding_and_identity():
    shape = numpy_helper.from_array(np.array([2, 8], np.int64), "shape")
    nodes = [
        helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array(1.0, np.float32))),
        helper.make_node("Add", ["one", "one"], ["two"]),
        helper.make_node("Identity", ["x"], ["y"]),
        helper.make_node("Reshape", ["y", "shape"], ["r"]),
        helper.make_node("Mul", ["r", "two"], ["out"]),
    ]
    model = tiny(nodes, [value("x", [4, 4])], [value("out", [2, 8])], [shape])
    graph = import_model(model)
    assert [n.op for n in graph.nodes] == ["Reshape", "Mul"]
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    np.testing.assert_array_equal(run(graph, {"x": x})["out"], 2 * x.reshape(2, 8))


def const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array)))


def exported_shape_arithmetic() -> onnx.ModelProto:
    """A TorchScript exporter's way of writing static shapes: x (2,3,4,5) flattened to
    (2, 60) by a target computed from Shape, then scaled by a row of weights made at run
    time from that shape (Range, Mod, Equal, Where, Cast, ConstantOfShape, Expand): the
    second Shape reads the Reshape's output, static only once the first chain folds."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]), const("zero", np.int64(0)), const("axes", i64(0)),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0), helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        const("minus_one", i64(-1)), helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Shape", ["flat"], ["fs"], start=1), helper.make_node("Squeeze", ["fs", "axes"], ["cols"]),
        helper.make_node("ConstantOfShape", ["fs"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        const("start", np.int64(0)), const("step", np.int64(1)), const("two", np.int64(2)),
        helper.make_node("Range", ["start", "cols", "step"], ["r"]), helper.make_node("Mod", ["r", "two"], ["odd"]),
        helper.make_node("Equal", ["odd", "start"], ["even"]), helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
        helper.make_node("Where", ["even", "rf", "ones"], ["w"]),
        helper.make_node("Shape", ["flat"], ["full"]), helper.make_node("Expand", ["w", "full"], ["wide"]),
        helper.make_node("Mul", ["flat", "wide"], ["out"]),
    ]  # fmt: skip
    return tiny(nodes, [value("x", [2, 3, 4, 5])], [value("out", [2, 60])])


def test_shape_arithmetic_folds_at_import():
    """Every shape operator folds (onnx's reference computes it), leaving the data path;
    the result is onnxruntime's."""
    model = exported_shape_arithmetic()
    graph = import_model(model)
    assert [n.op for n in graph.nodes] == ["Reshape", "Mul"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(run(graph, {"x": x})["out"], reference(model, x)[0], rtol=1e-6)


def test_eye_like_of_a_static_shape_folds_whatever_its_input():
    """EyeLike reads its input only for its shape: a matrix computed at run time gives
    a constant (ones on the k-th diagonal), added to it as onnxruntime adds it."""
    nodes = [helper.make_node("EyeLike", ["x"], ["e"], k=1, name="eye"), helper.make_node("Add", ["x", "e"], ["y"])]
    model = tiny(nodes, [value("x", [5, 7])], [value("y", [5, 7])])
    graph = import_model(model)
    assert [n.op for n in graph.nodes] == ["Add"]
    x = np.random.default_rng(7).standard_normal((5, 7)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(graph, {"x": x})["y"], expected, rtol=1e-6)


def test_an_operator_defined_as_a_function_imports_as_its_body():
    # GroupNormalization (opset 21) and Celu are functions of operators the table has: their
    # bodies run (and match onnxruntime)
    x = np.random.default_rng(5).standard_normal((2, 6, 4, 4)).astype(np.float32)
    weights = [numpy_helper.from_array(np.linspace(0.5, 2, 6, dtype=np.float32), "scale"),
               numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32), "bias")]  # fmt: skip
    nodes = [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["g"], num_groups=3, name="norm"),
             helper.make_node("Celu", ["g"], ["y"], alpha=0.7, name="act")]  # fmt: skip
    model = tiny(nodes, [value("x", [2, 6, 4, 4])], [value("y", [2, 6, 4, 4])], weights, opset=21)
    graph = import_model(model)
    assert {"GroupNormalization", "Celu"}.isdisjoint(n.op for n in graph.nodes)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(graph, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def test_every_missing_operator_kind_is_named_in_one_line():
    """Three kinds missing: one line names each with its count and first node; an
    unnamed node is named after its operator and place in the file."""
    nodes = [helper.make_node("BitShift", ["x", "x"], ["a"], name="h1", direction="LEFT"),
             helper.make_node("Unique", ["a"], ["b"], name="n1"),
             helper.make_node("BitShift", ["b", "x"], ["c"], name="h2", direction="LEFT"),
             helper.make_node("Shrink", ["c"], ["y"])]  # fmt: skip
    with pytest.raises(AutoconfigError, match=r"^model: unsupported operators \(3 kinds\): BitShift x2 "
                                              r"\(first node 'h1'\), Unique x1 \(first node 'n1'\), "
                                              r"Shrink x1 \(first node 'Shrink_3'\)$"):  # fmt: skip
        import_model(tiny(nodes, [value("x", [2], TensorProto.UINT64)], [value("y", [2], TensorProto.UINT64)]))


def test_a_value_drawn_per_run_is_not_folded():
    """RandomUniform has no inputs, yet its output is new on every run: not a constant."""
    nodes = [helper.make_node("RandomUniform", [], ["r"], shape=[2], name="noise"), helper.make_node("Add", ["x", "r"], ["y"])]
    with pytest.raises(AutoconfigError, match="node 'noise': unsupported operator RandomUniform"):
        import_model(tiny(nodes, [value("x", [2])], [value("y", [2])]))


def test_unsupported_operator_names_node_and_type():
    model = tiny([helper.make_node("BitShift", ["x", "x"], ["y"], name="the_shift", direction="LEFT")],
                 [value("x", [2], TensorProto.UINT64)], [value("y", [2], TensorProto.UINT64)])  # fmt: skip
    with pytest.raises(AutoconfigError, match="node 'the_shift': unsupported operator BitShift"):
        import_model(model)


def test_dynamic_dimension_names_input_or_node_and_the_fix():
    """A dynamic input is refused before anything folds, saying which --shape fixes it;
    a value whose size the run decides (a Reshape to a shape given at run time), by its
    node."""
    model = tiny([helper.make_node("Relu", ["x"], ["y"], name="act")],
                 [value("x", ["batch", 3])], [value("y", ["batch", 3])])  # fmt: skip
    with pytest.raises(AutoconfigError, match=r"^model: input 'x' has a dynamic dimension 'batch': give its size with "
                                              r"--shape batch=SIZE$"):  # fmt: skip
        import_model(model)
    assert import_model(model, shapes={"batch": 4}).types["y"].shape == (4, 3)
    reshape = tiny([helper.make_node("Reshape", ["x", "to"], ["y"], name="r")],
                   [value("x", [2, 3]), helper.make_tensor_value_info("to", TensorProto.INT64, [2])],
                   [value("y", None)])  # fmt: skip
    with pytest.raises(AutoconfigError, match=r"node 'r' \(Reshape\): 'y' has (a dynamic dimension|an unknown rank)"):
        import_model(reshape)


def test_malformed_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not a protobuf model")
    with pytest.raises(AutoconfigError, match="bad.onnx is not a valid ONNX model"):
        load_onnx(bad)
    with pytest.raises(AutoconfigError, match="no such file"):
        load_onnx(tmp_path / "absent.onnx")


def test_opset_out_of_range():
    model = tiny([helper.make_node("Relu", ["x"], ["y"])], [value("x", [2])], [value("y", [2])], opset=29)
    with pytest.raises(AutoconfigError, match=r"^model: ONNX opset 29 is not supported \(11-28\)$"):
        import_model(model)


@pytest.mark.parametrize("op, attrs, extra", [
    ("LeakyRelu", {"alpha": 0.2}, []), ("HardSigmoid", {}, []), ("HardSwish", {}, []),
    ("Softplus", {}, []), ("Tanh", {}, []), ("Softmax", {"axis": 1}, []),
    ("Transpose", {"perm": [0, 2, 3, 1]}, []), ("Flatten", {"axis": 2}, []),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, []),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, []),
    ("ReduceMean", {"keepdims": 0, "axes": [2, 3]}, []),  # opset 17: axes is an attribute
    ("Clip", {}, [np.array(-0.5, np.float32), np.array(0.5, np.float32)]),
    ("Pad", {}, [np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)]),
    ("Slice", {}, [np.array([1, 0], np.int64), np.array([4, 7], np.int64), np.array([1, 3], np.int64),
                   np.array([2, 3], np.int64)]),
    ("Unsqueeze", {}, [np.array([0], np.int64)]),
    ("Resize", {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
     [None, np.array([1, 1, 2, 2], np.float32)]),
])  # fmt: skip
def test_single_ops_match_onnxruntime(op, attrs, extra):
    x = np.random.default_rng(1).standard_normal((1, 3, 5, 7)).astype(np.float32)
    names, inits = ["x"], []
    for i, array in enumerate(extra):
        if array is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(array, f"c{i}"))
        names.append(f"c{i}")
    node = helper.make_node(op, names, ["y"], **attrs)
    model = tiny([node], [value("x", [1, 3, 5, 7])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    graph = import_model(model)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], reference(model, x)[0], rtol=1e-5, atol=1e-6)


def test_operator_table_is_complete():
    # every operator the importer accepts (the table's but those the import makes) has a
    # mapping type, a TVM pattern kind, a read count and a reference implementation
    from autoconfig.graph.ops import OPERATORS, Mapping, Pattern
    from autoconfig.graph.onnx_import import SUPPORTED

    assert SUPPORTED == {op for op, row in OPERATORS.items() if not row.made} and len(SUPPORTED) >= 30
    assert SUPPORTED < frozenset(OPERATORS)
    for name, row in OPERATORS.items():
        assert isinstance(row.mapping, Mapping) and isinstance(row.pattern, Pattern), name
        assert callable(row.reference) and callable(row.reads), name


def test_the_readme_lists_the_operators_the_table_accepts():
    """The README's operator list, by kind, is the operator table's (Constant, folded at
    import, aside)."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## What is supported", 1)[1].split("\n\n")[2]  # the list after its lead-in
    listed = {}
    for item in section.replace("\n  ", " ").splitlines():
        kind, names = item.removeprefix("- ").split(": ", 1)
        listed[kind] = set(names.split(", "))
    table = {}
    for name, row in OPERATORS.items():
        if not row.made:
            table.setdefault(row.kernel, set()).add(name)
    assert sorted(map(sorted, listed.values())) == sorted(map(sorted, table.values()))


def test_a_computation_repeated_is_computed_once():
    """Each exported layer's copy of the same arithmetic (here: Where on one mask with
    constants of equal values but their own names, then Relu) is one node; the graph
    still gives onnxruntime's answer."""
    b = zoo.Builder("repeated", 3)
    test = b.op("Cast", [b.op("Relu", ["input"])], to=TensorProto.BOOL)
    copies = [b.op("Relu", [b.op("Where", [test, b.const("zero", np.float32(0)), b.const("low", np.float32(-3))])])
              for _ in range(3)]  # fmt: skip
    y = b.op("Add", [b.op("Add", copies[:2]), copies[2]])
    model = b.model("input", [1, 4, 5], [(y, None)], opset=17)
    graph = import_model(model)
    assert sorted(n.op for n in graph.nodes) == ["Add", "Add", "Cast", "Relu", "Relu", "Where"]
    x = np.random.default_rng(0).standard_normal((1, 4, 5)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(run(graph, {"input": x})[y], expected, rtol=1e-6)


def test_an_inference_passes_over_its_constants_and_its_most_live_activations():
    """`Graph.inference_bytes`: every constant once, plus the activations live at once at
    the busiest point: a branch's input stays live until the Add that joins it reads it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    w = numpy_helper.from_array(np.ones((4, 4, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Conv", ["b", "w"], ["c"]), helper.make_node("Add", ["c", "x"], ["y"])]
    graph = import_model(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w])))
    tensor, weights = 4 * 8 * 8 * 4, 4 * 4 * 4
    # the second Conv: x (read by the Add), b and c live together
    assert graph.constant_bytes() == weights
    assert graph.inference_bytes() == weights + 3 * tensor
