"""The elementwise family (`autoconfig.families.elementwise`): every operator it
declares, alone and as the epilogue of a convolution, built and run against
onnxruntime on inputs of both signs; its attribute checks refuse at import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from autoconfig.build import build_model
from autoconfig.errors import AutoconfigError
from autoconfig.families.elementwise import BINARY, UNARY
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from autoconfig.graph.ops import OPERATORS
from autoconfig.profile import load_profile
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import PROFILES, onnxruntime_outputs
from tests.test_random_graphs import assert_close, built_outputs

OPSET = 20  # Gelu's first opset
ATTRIBUTES = {"LeakyRelu": {"alpha": 0.2}, "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Gelu": {"approximate": "tanh"},
              "Elu": {"alpha": 0.5}, "Selu": {"alpha": 1.5, "gamma": 1.2}, "ThresholdedRelu": {"alpha": 0.3},
              "IsInf": {"detect_positive": 0}}


BOOL_VALUED = {"Cast": ("Relu",), "IsNaN": ("Sqrt",), "Not": ("Relu",), "IsInf": ("Relu", "Log")}
"""Operators of bool outputs, each after ops that make their input interesting (NaN
where a square root's argument is negative, zero where Relu clips, −inf its log) and
cast back to float (Not: of that cast to bool)."""


def applied(b: zoo.Builder, op: str, x: str, attrs: dict) -> str:
    """`op` on `x`, with its constant inputs, or wrapped as BOOL_VALUED says."""
    extra = {"Clip": lambda: [b.const("low", np.float32(-0.5)), b.const("high", np.float32(1.5))],
             "Pow": lambda: [b.const("exponent", np.float32(5))]}.get(op, list)()  # 5: e^(5·ln|x|), x's sign
    if op not in BOOL_VALUED:
        return b.op(op, [x, *extra], **attrs)
    for before in BOOL_VALUED[op]:
        x = b.op(before, [x])
    x = b.op("Cast", [x], to=onnx.TensorProto.BOOL) if op == "Not" else x
    y = b.op(op, [x], **({"to": onnx.TensorProto.BOOL} if op == "Cast" else attrs))
    return b.op("Cast", [y], to=onnx.TensorProto.FLOAT)


def alone_and_after_a_conv(op: str, attrs: dict) -> onnx.ModelProto:
    """input -> op, and input -> Conv -> op: two outputs."""
    b = zoo.Builder(f"family_{op}", 5)
    alone = applied(b, op, "input", attrs)
    fused = applied(b, op, b.conv("input", 4, 8, 3), attrs)
    model = b.model("input", [1, 4, 9, 9], [(alone, [1, 4, 9, 9]), (fused, [1, 8, 9, 9])])
    model.opset_import[0].version = OPSET
    return model


@pytest.mark.slow
@pytest.mark.parametrize("attrs", [{}, "given"], ids=["defaults", "attributes"])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_each_operator_alone_and_as_an_epilogue_matches_onnxruntime(op, attrs):
    require_runnable(get_target("avx2"))
    attrs = ATTRIBUTES.get(op, {}) if attrs == "given" else attrs
    model = alone_and_after_a_conv(op, attrs)
    x = 3 * np.random.default_rng(2).standard_normal((1, 4, 9, 9)).astype(np.float32)  # both signs
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))
    built = build_model(import_model(model), load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", 1)
    fused = [k.ops for k in built.kernels if any("(Conv)" in o for o in k.ops)]
    assert len(fused) == 1 and any(o.endswith(f"({op})") for o in fused[0])


def test_an_attribute_value_the_operator_does_not_take_is_refused_at_import():
    model = alone_and_after_a_conv("Gelu", {"approximate": "cubic"})
    with pytest.raises(AutoconfigError, match=r"node 'gelu_\d+' \(Gelu\): approximate='cubic' is not 'none' or 'tanh'"):
        import_model(model)


COMPARED = {"Or": "Relu", "Xor": "Relu", "Equal": "Relu", "LessOrEqual": "Relu", "GreaterOrEqual": "Relu"}
"""Binary operators whose inputs go through Relu first (zeros on both sides: ties and
false values), the others through Tanh (both signs)."""


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(set(BINARY) - {"Add", "Sub", "Mul", "Div"}))
def test_each_binary_operator_either_way_round_matches_onnxruntime(op):
    """op(x, conv(x)) and op(conv(x), x), each a chain after the convolution or the
    activation; comparisons and logic ops give bools, cast back to float."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder(f"binary_{op}", 5)
    before = COMPARED.get(op, "Tanh")
    x, conv = b.op(before, ["input"]), b.op(before, [b.conv("input", 4, 4, 3)])
    if op in ("Or", "Xor"):
        x, conv = (b.op("Cast", [v], to=onnx.TensorProto.BOOL) for v in (x, conv))
    outputs = [b.op(op, pair) for pair in ([x, conv], [conv, x])]
    if op not in ("Max", "Min"):
        outputs = [b.op("Cast", [v], to=onnx.TensorProto.FLOAT) for v in outputs]
    model = b.model("input", [1, 4, 9, 9], [(v, [1, 4, 9, 9]) for v in outputs])
    model.opset_import[0].version = OPSET
    x = np.round(3 * np.random.default_rng(2).standard_normal((1, 4, 9, 9)), 1).astype(np.float32)
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))


def test_pow_of_a_tensor_exponent_matches_onnxruntime():
    """x to a computed exponent (halves and integers from -3 to 3, after a convolution)
    and to a constant per-channel one (-2, 0, 3, ½): odd integer powers keep x's sign,
    even ones drop it, a half power of a negative x is NaN, a 0th power 1."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("powers", 5)
    exponent = b.op("Div", [b.op("Round", [b.op("Mul", [b.op("Tanh", [b.conv("input", 4, 4, 3)]),
                                                        b.const("six", np.float32(6))])]), b.const("two", np.float32(2))])
    per_channel = b.const("per_channel", np.array([-2, 0, 3, 0.5], np.float32).reshape(1, 4, 1, 1))
    outputs = [b.op("Pow", ["input", exponent]), b.op("Pow", ["input", per_channel])]
    model = b.model("input", [1, 4, 9, 9], [(v, [1, 4, 9, 9]) for v in outputs])
    x = 3 * np.random.default_rng(4).standard_normal((1, 4, 9, 9)).astype(np.float32)  # both signs
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))


def test_fmod_of_floats_matches_onnxruntime():
    """Mod with fmod=1 (C's fmod: the rest takes x's sign) of x by a computed divisor of
    either sign (|y| in [0.5, 2.5], after a convolution), and of x in halves by a
    constant per-channel one (1.5, -2, 0.5, 3), whose exact multiples leave rests of 0."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("fmods", 5)
    conv = b.op("Tanh", [b.conv("input", 4, 4, 3)])
    divisor = b.op("Add", [b.op("Mul", [conv, b.const("two", np.float32(2))]),
                           b.op("Mul", [b.op("Sign", [conv]), b.const("half", np.float32(0.5))])])  # fmt: skip
    halves = b.op("Div", [b.op("Round", [b.op("Mul", ["input", b.const("two_", np.float32(2))])]),
                          b.const("two__", np.float32(2))])  # fmt: skip
    per_channel = b.const("per_channel", np.array([1.5, -2, 0.5, 3], np.float32).reshape(1, 4, 1, 1))
    outputs = [b.op("Mod", ["input", divisor], fmod=1), b.op("Mod", [halves, per_channel], fmod=1)]
    model = b.model("input", [1, 4, 9, 9], [(v, [1, 4, 9, 9]) for v in outputs])
    x = 3 * np.random.default_rng(8).standard_normal((1, 4, 9, 9)).astype(np.float32)  # both signs
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))


@pytest.mark.slow
def test_arithmetic_by_one_constant_value_matches_onnxruntime_after_a_conv_and_a_softmax():
    """Add, Sub and Mul by one constant either way round, and Div with the value first,
    become affine ops without an operand (after a convolution and after a softmax, whose
    epilogue takes none); Div with the value second stays a quotient."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("scalars", 5)
    outputs = []
    for start in (b.conv("input", 4, 4, 3), b.op("Softmax", ["input"], axis=-1)):
        v = b.op("Add", [start, b.const("a", np.float32(0.75))])
        v = b.op("Sub", [b.const("s", np.float32(-1.5)), v])
        v = b.op("Mul", [v, b.const("m", np.float32(-2.5))])
        v = b.op("Sub", [v, b.const("t", np.float32(0.5))])
        outputs.append(b.op("Div", [v, b.const("d", np.float32(-3.0))]))
    outputs.append(b.op("Div", [b.const("n", np.float32(2.0)), b.op("Tanh", [outputs[0]])]))
    model = b.model("input", [1, 4, 9, 9], [(v, [1, 4, 9, 9]) for v in outputs])
    model.opset_import[0].version = OPSET
    x = 3 * np.random.default_rng(6).standard_normal((1, 4, 9, 9)).astype(np.float32)  # both signs
    assert_close(built_outputs(model, {"input": x}, "dp", 1), onnxruntime_outputs(model, {"input": x}))
    built = build_model(import_model(model), load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", 1)
    softmax = next(k for k in built.kernels if any("(Softmax)" in o for o in k.ops))
    assert sum(o.endswith(("(Add)", "(Sub)", "(Mul)", "(Div)")) for o in softmax.ops) == 5


def _sums_prelus_dropouts() -> onnx.ModelProto:
    """Sum of three values, Mean of two, PRelu by one slope and by a slope per channel
    (of both signs, some above 1), and an inference Dropout, on one input."""
    h, rng = onnx.helper, np.random.default_rng(4)
    slopes = np.array([-0.5, 0.0, 0.25, 1.0, 3.0, -2.0], np.float32).reshape(6, 1, 1)
    inits = [onnx.numpy_helper.from_array(slopes, "slopes"), onnx.numpy_helper.from_array(np.array([0.1], np.float32), "one"),
             onnx.numpy_helper.from_array(rng.standard_normal((6, 5, 7)).astype(np.float32), "c")]  # fmt: skip
    nodes = [h.make_node("Sigmoid", ["x"], ["s"]), h.make_node("Sum", ["x", "s", "c"], ["sum"]),
             h.make_node("Mean", ["sum", "x"], ["mean"]), h.make_node("PRelu", ["mean", "slopes"], ["p"]),
             h.make_node("PRelu", ["p", "one"], ["q"]), h.make_node("Dropout", ["q"], ["y"], name="drop")]  # fmt: skip
    graph = h.make_graph(nodes, "sums", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6, 5, 7])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 6, 5, 7])], inits)  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], ir_version=8)


def test_sums_prelus_and_dropouts_match_onnxruntime():
    """Sum and Mean as pairs of Adds, PRelu as LeakyRelu or two Relus and a scale (exact
    for any slope), Dropout as nothing, against onnxruntime on both signs; a Dropout
    in training mode is refused in one line."""
    require_runnable(get_target("avx2"))
    model = _sums_prelus_dropouts()
    x = np.random.default_rng(2).standard_normal((2, 6, 5, 7)).astype(np.float32)
    for fusion in ("dp", "none"):
        assert_close(built_outputs(model, {"x": x}, fusion, 1), onnxruntime_outputs(model, {"x": x}))
    model.graph.node[-1].input.extend(["", "train"])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.array(True), "train"))
    with pytest.raises(AutoconfigError, match="node 'drop' \\(Dropout\\): training mode is not generated"):
        import_model(model)


@pytest.mark.parametrize("op, attrs", [("DepthToSpace", {"blocksize": 2, "mode": "DCR"}),
                                       ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}),
                                       ("SpaceToDepth", {"blocksize": 2}), ("Tile", {})])  # fmt: skip
def test_rearrangements_match_onnxruntime(op, attrs):
    """DepthToSpace (both modes) and SpaceToDepth as views around a Transpose, Tile as
    views around an Expand, after a Neg so that they read a computed tensor of both signs."""
    require_runnable(get_target("avx2"))
    h = onnx.helper
    inits = [onnx.numpy_helper.from_array(np.array([1, 2, 1, 3], np.int64), "repeats")] if op == "Tile" else []
    nodes = [h.make_node("Neg", ["x"], ["r"]), h.make_node(op, ["r", *(["repeats"] if inits else [])], ["y"], **attrs)]
    graph = h.make_graph(nodes, op.lower(), [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 8, 4, 6])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], ir_version=8)
    x = np.random.default_rng(6).standard_normal((2, 8, 4, 6)).astype(np.float32)
    np.testing.assert_array_equal(built_outputs(model, {"x": x}, "dp", 1)[0], onnxruntime_outputs(model, {"x": x})[0])


@pytest.mark.parametrize("size", [2, 5])
def test_lrn_matches_onnxruntime(size):
    """LRN as its definition (the window's sum of squares a 1x1 convolution by a band, an
    even window one channel longer after than before), against onnxruntime (which
    refuses an even size: the table's reference there, the spec's sum)."""
    require_runnable(get_target("avx2"))
    h = onnx.helper
    node = h.make_node("LRN", ["x"], ["y"], size=size, alpha=0.02, beta=0.75, bias=2.0)
    graph = h.make_graph([node], "lrn", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 7, 5, 6])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 7, 5, 6])])  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)], ir_version=8)
    x = 3 * np.random.default_rng(8).standard_normal((1, 7, 5, 6)).astype(np.float32)
    attrs = {a.name: h.get_attribute_value(a) for a in node.attribute}
    expected = onnxruntime_outputs(model, {"x": x}) if size % 2 else [OPERATORS["LRN"].reference(attrs, x)]
    assert_close(built_outputs(model, {"x": x}, "dp", 1), expected)


@pytest.mark.parametrize(("shape", "threads"), [((1, 37, 48), 2), ((1, 250), 2), ((1, 7, 5), 1)],
                         ids=["rows", "odd", "tiny"])
def test_a_chain_on_one_plane_is_cut_for_every_thread(shape, threads):
    # [1, tokens, width]: one plane along the first axis; its pieces go to both threads
    # (whole vectors where the size allows, masked tails else; under a vector each, not
    # cut), and the values stay right
    b = zoo.Builder("one_plane", 5)
    x = b.op("Add", [b.op("Gelu", ["input"]), b.const("bias", np.float32(0.25))])
    model = b.model("input", list(shape), [(x, list(shape))])
    model.opset_import[0].version = OPSET
    feeds = {"input": 3 * np.random.default_rng(7).standard_normal(shape).astype(np.float32)}
    assert_close(built_outputs(model, feeds, "dp", 2), onnxruntime_outputs(model, feeds))
    built = build_model(import_model(model), load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", 2)
    (kernel,) = built.kernels
    assert kernel.summary.endswith(f"{threads} thread(s)")


def test_a_copy_into_a_concat_is_cut_for_every_thread():
    # a graph input concatenated with a computed value is copied into place: at two
    # threads, in two pieces (one part each), and the values stay right (both signs)
    b = zoo.Builder("copied", 5)
    y = b.op("Concat", ["input", b.op("Relu", ["input"])], axis=1)
    model = b.model("input", [1, 3, 20, 24], [(y, [1, 6, 20, 24])])
    model.opset_import[0].version = OPSET
    feeds = {"input": 3 * np.random.default_rng(8).standard_normal((1, 3, 20, 24)).astype(np.float32)}
    assert_close(built_outputs(model, feeds, "dp", 2), onnxruntime_outputs(model, feeds))
    built = build_model(import_model(model), load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", 2)
    (copy,) = [k for k in built.kernels if k.kind == "copy"]
    assert [len(call.parts) for call in copy.calls] == [2]
