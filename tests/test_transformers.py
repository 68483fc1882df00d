"""Transformer stand-ins built with onnx's helper: the operators and patterns the
transformers' exports carry (ViT, Swin, ConvNeXt; BERT, DistilBERT, GPT-2: int64 ids
and masks), each small enough for CI, held to onnxruntime like every model."""

from __future__ import annotations

import ctypes

import numpy as np
import onnx
import pytest

import autoconfig
from autoconfig.accuracy import ERROR_BOUND, output_error, sample_inputs
from autoconfig.loader import LIBRARY
from autoconfig.machine import PROGRAM_STEP_NS, Machine
from autoconfig.models import attention as attention_model
from autoconfig.models.attention import AttentionShape
from autoconfig.profile import load_profile
from autoconfig.build import build_model
from autoconfig.cli import main
from autoconfig.graph.onnx_import import import_model
from autoconfig.graph import zoo
from kernels.target import get_target
from autoconfig.probe.host import this_host
from kernels import attention as ak
from kernels import epilogue as ep
from kernels.library import build_library
from tests.conftest import require_runnable, target_for
from tests.test_build import HWPROFILES, PROFILES, build_and_compare, onnxruntime_outputs


def layer_norm(b: zoo.Builder, x: str, width: int, axis: int = -1, bias: bool = True) -> str:
    """LayerNormalization (opset 17) with random scale and bias over the last `width`."""
    scale = b.const("ln_scale", b.rng.standard_normal(width) + 1.0)
    return b.op("LayerNormalization", [x, scale, *([b.const("ln_bias", b.rng.standard_normal(width))] if bias else [])],
                axis=axis, epsilon=1e-5)  # fmt: skip


def linear(b: zoo.Builder, x: str, cin: int, cout: int) -> str:
    """x · W + bias over the last axis, as the exporters write nn.Linear on 3-D input."""
    w = b.const("w", b.rng.standard_normal((cin, cout)) / np.sqrt(cin))
    return b.op("Add", [b.op("MatMul", [x, w]), b.const("bias", b.rng.standard_normal(cout) * 0.1)])


def attention(b: zoo.Builder, x: str, tokens: int, width: int, heads: int) -> str:
    """Multi-head self-attention as torchvision's ViT exports it: one QKV product, the
    three picked by Gather from a stacked axis, Q·Kᵀ and scores·V batched over heads."""
    qkv = linear(b, x, width, 3 * width)
    size = width // heads
    shape = b.const("shape", np.array([tokens, 3, heads, size], np.int64))
    stacked = b.op("Transpose", [b.op("Reshape", [qkv, shape])], perm=[1, 2, 0, 3])  # 3 × heads × tokens × size
    q, k, v = (b.op("Gather", [stacked, b.const("which", np.array(i, np.int64))], axis=0) for i in range(3))
    scores = b.op("MatMul", [b.op("Mul", [q, b.const("scale", np.float32(size**-0.5))]),
                             b.op("Transpose", [k], perm=[0, 2, 1])])  # fmt: skip
    mixed = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])  # heads × tokens × size
    merged = b.op("Reshape", [b.op("Transpose", [mixed], perm=[1, 0, 2]),
                              b.const("shape", np.array([1, tokens, width], np.int64))])  # fmt: skip
    return linear(b, merged, width, width)


def vit_block(seed: int = 11, patch: int = 4, image: int = 12, width: int = 32, heads: int = 4) -> onnx.ModelProto:
    """Patch embedding, a class token, one pre-norm encoder block (attention, an exact-GELU
    MLP, residuals), the class token's LayerNorm and a head: a two-token-wide ViT."""
    b = zoo.Builder("vit_block", seed)
    grid = (image + 2 * (patch // 2) - patch) // patch + 1  # Builder.conv pads by half the kernel
    tokens = grid * grid + 1
    patches = b.conv("input", 3, width, patch, stride=patch)
    flat = b.op("Transpose", [b.op("Reshape", [patches, b.const("shape", np.array([1, width, grid * grid], np.int64))])],
                perm=[0, 2, 1])  # fmt: skip
    x = b.op("Concat", [b.const("cls", b.rng.standard_normal((1, 1, width))), flat], axis=1)
    x = b.op("Add", [x, b.const("position", b.rng.standard_normal((1, tokens, width)))])
    x = b.op("Add", [x, attention(b, layer_norm(b, x, width), tokens, width, heads)])
    hidden = linear(b, layer_norm(b, x, width), width, 2 * width)
    gelu = b.op("Mul", [b.op("Mul", [hidden, b.op("Add", [b.op("Erf", [b.op("Div", [hidden, b.const("r2", np.float32(
        np.sqrt(2)))])]), b.const("one", np.float32(1))])]), b.const("half", np.float32(0.5))])  # fmt: skip
    x = b.op("Add", [x, linear(b, gelu, 2 * width, width)])
    first = b.op("Gather", [layer_norm(b, x, width), b.const("first", np.array(0, np.int64))], axis=1)
    head = b.op("Gemm", [first, b.const("head", b.rng.standard_normal((10, width))), b.const("hb", np.zeros(10))],
                transB=1)  # fmt: skip
    return b.model("input", [1, 3, image, image], [(head, None), (x, None)], opset=17)


def shifted_windows(seed: int = 12, size: int = 7, channels: int = 6, shift: int = 2) -> onnx.ModelProto:
    """Swin's cyclic shift (torch.roll as two Slices and a Concat of unequal pieces on
    each spatial axis), a LayerNorm over two axes without bias, and ConvNeXt's channels-
    last LayerNorm between two transposes."""
    b = zoo.Builder("shifted_windows", seed)
    x = b.op("Transpose", [b.conv("input", 3, channels, 3, stride=1)], perm=[0, 2, 3, 1])  # NHWC, size-2 square
    side = size - 2
    for axis in (1, 2):
        ends = [b.op("Slice", [x, b.const("s", np.array([a], np.int64)), b.const("e", np.array([z], np.int64)),
                               b.const("ax", np.array([axis], np.int64))]) for a, z in ((side - shift, side), (0, side - shift))]
        x = b.op("Concat", ends, axis=axis)  # fmt: skip
    rolled = b.op("Relu", [x])
    normed = b.op("LayerNormalization", [rolled, b.const("s2", b.rng.standard_normal((side, channels)))], axis=2)
    back = b.op("Transpose", [layer_norm(b, rolled, channels)], perm=[0, 3, 1, 2])
    return b.model("input", [1, 3, size, size], [(normed, None), (back, None)], opset=17)


@pytest.mark.parametrize("model", [vit_block, shifted_windows])
def test_transformer_patterns_match_onnxruntime(tmp_path, model):
    """Both match onnxruntime; each roll (a Concat of Slices of one tensor along their
    axis) is one Gather of the tensor by constant indices, no slice or copy kernel."""
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(model(), "avx2", tmp_path / "built")
    ops = [op.split(" ")[-1] for k in manifest["kernels"] for op in k["ops"]]
    if model is shifted_windows:
        assert ops.count("(Gather)") == 2 and not {"(Slice)", "(Concat)"} & set(ops), ops


def token_mlp(seed: int = 19, tokens: int = 50, width: int = 96) -> onnx.ModelProto:
    """A transformer's MLP on its tokens with the residual: x + W2·relu(W1·x + b1) + b2,
    both weights constants."""
    b = zoo.Builder("token_mlp", seed)
    hidden = b.op("Relu", [linear(b, "input", width, 4 * width)])
    return b.model("input", [1, tokens, width], [(b.op("Add", ["input", linear(b, hidden, 4 * width, width)]), None)],
                   opset=17)  # fmt: skip


def test_products_with_weights_packed_at_build_read_their_tokens_in_place(tmp_path):
    """Both products take all of K in one block, so each reads A's rows where they lie
    (`MatmulConfig.a_in_place`) instead of packing them per call, and match onnxruntime
    on inputs of both signs."""
    require_runnable(get_target("avx2"))
    build_and_compare(token_mlp(), "avx2", tmp_path / "built")
    assert (tmp_path / "built" / "report.md").read_text().count("A is read in place") == 2


def masked_softmax(seed: int = 13, rows: int = 6, width: int = 8) -> onnx.ModelProto:
    """The attention-mask code of the language models' exports on float inputs: a
    cast to bool, And with a constant bool mask, Expand, Where choosing between 0 and
    -inf, a masked Softmax whose fully masked rows give NaN, replaced by Where(IsNaN);
    Not, Pow by 3 and ½."""
    b = zoo.Builder("masked_softmax", seed)
    keep = b.op("Cast", [b.op("Relu", ["input"])], to=onnx.TensorProto.BOOL)  # [1, rows, width]
    allowed = np.ones((1, rows, 1), bool)
    allowed[0, rows // 2] = False  # one query row sees nothing: NaN after Softmax
    mask = b.op("Expand", [b.op("And", [keep, b.const("allowed", allowed)]),
                           b.const("shape", np.array([2, rows, width], np.int64))])  # fmt: skip
    bias = b.op("Where", [mask, b.const("zero", np.float32(0)), b.const("minus", np.float32(-np.inf))])
    scores = b.op("Softmax", [b.op("Add", ["input", bias])], axis=-1)
    cleaned = b.op("Where", [b.op("IsNaN", [scores]), b.const("zero", np.float32(0)), scores])
    cube = b.op("Pow", ["input", b.const("three", np.float32(3))])
    root = b.op("Pow", [b.op("Relu", [cube]), b.const("half", np.float32(0.5))])
    outside = b.op("Where", [b.op("Not", [mask]), "input", b.const("zero", np.float32(0))])
    return b.model("input", [1, rows, width], [(cleaned, None), (root, None), (outside, None)], opset=17)


def test_masks_and_bools_match_onnxruntime(tmp_path):
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(masked_softmax(), "avx2", tmp_path / "built")
    softmax = next(k for k in manifest["kernels"] if k["kind"] == "softmax")
    assert [op.split()[-1] for op in softmax["ops"]] == ["(Softmax)", "(IsNaN)", "(Where)"], softmax["ops"]


def softmax_tails(seed: int = 15) -> onnx.ModelProto:
    """A Softmax over a middle axis, then Sqrt (its epilogue, applied before the axis is
    moved back); one over the last axis times another tensor (an operand: not one)."""
    b = zoo.Builder("softmax_tails", seed)
    inner = b.op("Sqrt", [b.op("Softmax", ["input"], axis=1)])
    outer = b.op("Mul", [b.op("Softmax", ["input"], axis=-1), b.op("Relu", ["input"])])
    return b.model("input", [2, 5, 7], [(inner, None), (outer, None)], opset=17)


def test_a_softmax_runs_the_ops_after_it_that_take_no_operand(tmp_path):
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(softmax_tails(), "avx2", tmp_path / "built")
    groups = sorted([op.split()[-1] for op in k["ops"]] for k in manifest["kernels"] if k["kind"] == "softmax")
    assert groups == [["(Softmax)"], ["(Softmax)", "(Sqrt)"]], groups


def ids_model(b: zoo.Builder, inputs: dict[str, list[int]], outputs: list[str], integers: tuple[str, ...] = (),
              opset: int = 17) -> onnx.ModelProto:  # fmt: skip
    """The builder's nodes as a model of int64 `inputs` (name: shape) and float32
    `outputs`, but for the int64 `integers`."""
    value = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(
        b.nodes, b.name, [value(n, onnx.TensorProto.INT64, shape) for n, shape in inputs.items()],
        [value(y, onnx.TensorProto.INT64 if y in integers else onnx.TensorProto.FLOAT, None) for y in outputs],
        b.weights)  # fmt: skip
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    model.ir_version = zoo.IR_VERSION
    return model


def tiny_bert(seed: int = 14, tokens: int = 8, width: int = 16, heads: int = 2, vocab: int = 50) -> onnx.ModelProto:
    """A one-layer BERT as its exports run it: int64 ids through a word-embedding Gather,
    an int64 attention mask cast to bool and combined into an additive -inf mask (a
    padded query row sees no key: NaN after Softmax, replaced by Where(IsNaN)), batched
    Q·Kᵀ and scores·V of computed operands, LayerNorm, GELU."""
    b = zoo.Builder("tiny_bert", seed)
    x = b.op("Gather", [b.const("words", b.rng.standard_normal((vocab, width))), "input_ids"])
    x = layer_norm(b, b.op("Add", [x, b.const("positions", b.rng.standard_normal((1, tokens, width)))]), width)
    keep = b.op("Cast", ["attention_mask"], to=onnx.TensorProto.BOOL)  # [1, tokens]
    rows = b.op("Unsqueeze", [keep, b.const("axes", np.array([1, 3], np.int64))])  # [1, 1, tokens, 1]
    columns = b.op("Unsqueeze", [keep, b.const("axes", np.array([1, 2], np.int64))])  # [1, 1, 1, tokens]
    bias = b.op("Where", [b.op("And", [rows, columns]), b.const("zero", np.float32(0)),
                          b.const("minus", np.float32(-np.inf))])  # fmt: skip
    size = width // heads

    def heads_of(value: str, perm: list[int]) -> str:
        split = b.op("Reshape", [linear(b, value, width, width), b.const("s", np.array([1, tokens, heads, size], np.int64))])
        return b.op("Transpose", [split], perm=perm)

    q, k, v = heads_of(x, [0, 2, 1, 3]), heads_of(x, [0, 2, 3, 1]), heads_of(x, [0, 2, 1, 3])
    scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, k]), b.const("root", np.float32(np.sqrt(size)))]), bias])
    weights = b.op("Softmax", [scores], axis=-1)
    weights = b.op("Where", [b.op("IsNaN", [weights]), b.const("zero", np.float32(0)), weights])
    mixed = b.op("Reshape", [b.op("Transpose", [b.op("MatMul", [weights, v])], perm=[0, 2, 1, 3]),
                             b.const("s", np.array([1, tokens, width], np.int64))])  # fmt: skip
    x = layer_norm(b, b.op("Add", [x, linear(b, mixed, width, width)]), width)
    y = layer_norm(b, b.op("Add", [x, linear(b, b.op("Gelu", [linear(b, x, width, 2 * width)]), 2 * width, width)]),
                   width)  # fmt: skip
    return ids_model(b, {n: [1, tokens] for n in ("input_ids", "attention_mask")}, [y], opset=20)


def test_a_language_model_takes_ids_and_a_padded_mask(tmp_path):
    """Ids (negative ones count from the table's end) and a mask with padding give
    onnxruntime's answer; the manifest says which input holds ids and below what."""
    require_runnable(get_target("avx2"))
    onnx.save(tiny_bert(), tmp_path / "tiny_bert.onnx")
    manifest = autoconfig.compile_model(tmp_path / "tiny_bert.onnx", tmp_path / "built", profile=PROFILES["avx2"],
                                        target=get_target("avx2"))  # fmt: skip
    assert [(i["dtype"], i.get("ids_below")) for i in manifest["inputs"]] == [("int64", 50), ("int64", None)]
    feeds = sample_inputs(manifest["inputs"])
    assert feeds["attention_mask"][0, -1] == 0 and feeds["attention_mask"][0, 0] == 1
    assert [k["kind"] for k in manifest["kernels"]].count("attention") == 1  # the mask and NaN cleanup inside
    feeds["input_ids"][0, :2] = [-1, -50]
    (ours,) = autoconfig.load(tmp_path / "built")(feeds).values()
    expected = onnxruntime_outputs(tiny_bert(), feeds)[0]
    error, spread = output_error(ours, expected)
    assert error <= ERROR_BOUND * spread


@pytest.mark.parametrize("bad", [50, -51])
def test_an_id_outside_its_table_is_an_error_not_a_wild_read(tmp_path, capsys, bad):
    require_runnable(get_target("avx2"))
    onnx.save(tiny_bert(), tmp_path / "tiny_bert.onnx")
    autoconfig.compile_model(tmp_path / "tiny_bert.onnx", tmp_path / "built", profile=PROFILES["avx2"],
                             target=get_target("avx2"))  # fmt: skip
    feeds = sample_inputs(autoconfig.load(tmp_path / "built").manifest["inputs"])
    feeds["input_ids"][0, 3] = bad
    np.save(tmp_path / "ids.npy", feeds["input_ids"])
    np.save(tmp_path / "mask.npy", feeds["attention_mask"])
    assert main(["run", str(tmp_path / "built"), "--input", f"input_ids={tmp_path / 'ids.npy'}",
                 "--input", f"attention_mask={tmp_path / 'mask.npy'}"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"id {bad} is outside the table's 50 rows" in err
    library = ctypes.CDLL(str(tmp_path / "built" / LIBRARY))  # the C entry point checks too
    library.ac_model_load.restype = ctypes.c_void_p
    model = library.ac_model_load(str(tmp_path / "built" / "weights.bin").encode())
    out = np.empty(4096, np.float32)
    pointers = (ctypes.c_void_p * 2)(feeds["input_ids"].ctypes.data, feeds["attention_mask"].ctypes.data)
    status = library.ac_model_run(ctypes.c_void_p(model), pointers, (ctypes.c_void_p * 1)(out.ctypes.data))
    library.ac_model_free(ctypes.c_void_p(model))
    assert status == 3


def test_a_scale_after_the_heads_split_runs_in_their_product(tmp_path):
    """Mul and Div by a scalar after Reshape and Transpose move before them (the same
    products of the same elements): the product before applies them as its epilogue."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("scaled_heads", 15)
    heads = b.op("Transpose", [b.op("Reshape", [linear(b, "input", 16, 16), b.const("s", np.array([1, 8, 2, 8], np.int64))])],
                 perm=[0, 2, 1, 3])  # fmt: skip
    y = b.op("Div", [b.op("Mul", [b.const("c", np.float32(0.35)), heads]), b.const("d", np.float32(1.7))])
    manifest = build_and_compare(b.model("input", [1, 8, 16], [(y, None)]), "avx2", tmp_path / "built")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul", "gather"]
    assert "(Mul)" in " ".join(manifest["kernels"][0]["ops"]) and "(Div)" in " ".join(manifest["kernels"][0]["ops"])


def flat_linear(b: zoo.Builder, x: str, tokens: int, cin: int, cout: int) -> str:
    """nn.Linear as GPT-2's Conv1D and torch's attention output exports it: the tokens
    flattened to a matrix, a Gemm, the result viewed back as [1, tokens, cout]."""
    flat = b.op("Reshape", [x, b.const("s", np.array([tokens, cin], np.int64))])
    y = b.op("Gemm", [flat, b.const("w", b.rng.standard_normal((cin, cout)) / np.sqrt(cin)),
                      b.const("bias", b.rng.standard_normal(cout) * 0.1)])  # fmt: skip
    return b.op("Reshape", [y, b.const("s", np.array([1, tokens, cout], np.int64))])


def test_ops_after_a_reshaped_product_run_as_its_epilogue(tmp_path):
    """A 2-D product viewed back to 3-D (through a Transpose that moves only an axis of
    one) before its residual add, and a tanh GELU written out (x·½·(1 + tanh(√(2/π)·(x +
    0.044715·x³)))): the view moves after the elementwise ops, the GELU becomes one op,
    and each product's kernel computes them."""
    require_runnable(get_target("avx2"))
    b, tokens, width = zoo.Builder("viewed_products", 16), 6, 16
    out = b.op("Reshape", [b.op("Gemm", [b.op("Reshape", ["input", b.const("s", np.array([tokens, width], np.int64))]),
                                         b.const("w", b.rng.standard_normal((width, width)) / 4), b.const("c", np.ones(width))]),
                           b.const("s", np.array([tokens, 1, width], np.int64))])  # fmt: skip
    x = b.op("Add", [b.op("Transpose", [out], perm=[1, 0, 2]), "input"])
    h = flat_linear(b, x, tokens, width, 2 * width)
    cube = b.op("Mul", [b.op("Mul", [h, h]), h])
    inner = b.op("Mul", [b.const("k", np.float32(np.sqrt(2 / np.pi))),
                         b.op("Add", [h, b.op("Mul", [cube, b.const("c", np.float32(0.044715))])])])  # fmt: skip
    gelu = b.op("Mul", [b.op("Mul", [b.const("half", np.float32(0.5)), h]),
                        b.op("Add", [b.const("one", np.float32(1)), b.op("Tanh", [inner])])])  # fmt: skip
    y = b.op("Add", [x, flat_linear(b, gelu, tokens, 2 * width, width)])
    manifest = build_and_compare(b.model("input", [1, tokens, width], [(y, None)], opset=17), "avx2", tmp_path / "built")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul"] * 3
    ops = [" ".join(k["ops"]) for k in manifest["kernels"]]
    assert "(Add)" in ops[0] and "(Gelu)" in ops[1] and "(Add)" in ops[2]


def test_a_scale_on_a_split_query_runs_in_the_product_it_feeds(tmp_path):
    """The query and key split from one product by gathers, each scaled (ViT's exports),
    then split into heads: the gathers take no epilogue, so the scales move after Q·Kᵀ
    (s·Q·(t·K)ᵀ = s·t·Q·Kᵀ), its epilogue: no kernel of their own."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("split_query", 16)
    packed = b.op("Reshape", [linear(b, "input", 16, 48), b.const("s", np.array([1, 8, 3, 16], np.int64))])
    q, k = (b.op("Mul", [b.op("Gather", [packed, b.const("i", np.array(i, np.int64))], axis=2),
                         b.const("c", np.float32(0.5))]) for i in (0, 1))  # fmt: skip

    def heads(value: str, perm: list[int]) -> str:
        return b.op("Transpose", [b.op("Reshape", [value, b.const("h", np.array([1, 8, 2, 8], np.int64))])], perm=perm)

    y = b.op("Softmax", [b.op("MatMul", [heads(q, [0, 2, 1, 3]), heads(k, [0, 2, 3, 1])])], axis=-1)
    manifest = build_and_compare(b.model("input", [1, 8, 16], [(y, None)]), "avx2", tmp_path / "built")
    scaled = [k for k in manifest["kernels"] if "(Mul)" in " ".join(k["ops"])]
    assert [k["kind"] for k in scaled] == ["matmul"] and " ".join(scaled[0]["ops"]).count("(Mul)") == 2, scaled


def picked_from_a_stack(squeezed: bool, seed: int = 18, tokens: int = 9, width: int = 24, heads: int = 3):
    """Q, K and V picked by Gathers from one projection's output stacked by a Transpose:
    as torchvision's Swin (one transpose, 3 × heads × tokens × size) or ViT (the stack
    [tokens, 1, 3, width] unsqueezed, its axes of 3 and 1 swapped, then squeezed)."""
    b = zoo.Builder("picked", seed)
    qkv, size = linear(b, "input", width, 3 * width), width // heads
    if squeezed:
        stacked = b.op("Reshape", [qkv, b.const("s", np.array([tokens, 1, 3, width], np.int64))])
        stacked = b.op("Transpose", [b.op("Unsqueeze", [stacked, b.const("a", np.array([0], np.int64))])],
                       perm=[3, 1, 2, 0, 4])  # fmt: skip
        stacked = b.op("Squeeze", [stacked, b.const("a", np.array([-2], np.int64))])  # 3 × tokens × 1 × width
        q, k, v = (b.op("Transpose", [b.op("Reshape", [b.op("Gather", [stacked, b.const("i", np.array(i, np.int64))],
                                                              axis=0), b.const("s", np.array([tokens, heads, size], np.int64))])],
                        perm=[1, 0, 2]) for i in range(3))  # fmt: skip
    else:
        stacked = b.op("Transpose", [b.op("Reshape", [qkv, b.const("s", np.array([tokens, 3, heads, size], np.int64))])],
                       perm=[1, 2, 0, 3])  # fmt: skip
        q, k, v = (b.op("Gather", [stacked, b.const("i", np.array(i, np.int64))], axis=0) for i in range(3))
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 2, 1])])
    mixed = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    return b.model("input", [tokens, width], [(mixed, None)])


@pytest.mark.parametrize("squeezed", [False, True])
def test_picks_from_a_transposed_stack_are_read_where_the_projection_wrote_them(tmp_path, squeezed):
    """The Gathers picking Q, K and V from a transposed stack move before its Transpose
    (through a squeeze of axes of one): each pick is then read in place by the attention
    — no kernel copies the stack — and the answers stay onnxruntime's."""
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(picked_from_a_stack(squeezed), "avx2", tmp_path / "built")
    assert [k["kind"] for k in manifest["kernels"]] == ["matmul", "attention"], manifest["kernels"]


@pytest.mark.parametrize("perm, axis, picks", [
    ([1, 2, 0, 3], 0, [0, 2]),  # scalar picks along the stack's axis
    ([2, 0, 3, 1], -2, [np.array([1, 0]), np.array(-1)]),  # a vector of picks, negative axis and index
    ([3, 1, 0, 2], 3, [np.array([[0], [2]]), 1, 0]),  # a matrix of picks
], ids=["scalars", "vector-negative", "matrix"])  # fmt: skip
def test_gathers_moved_before_a_transpose_give_the_same_elements(tmp_path, perm, axis, picks):
    """Gathers of any constant indices (scalars, vectors, matrices, negative ones), on any
    axis of a Transpose they alone read, move before it and still pick onnxruntime's
    elements, each then read by an elementwise op or a graph output."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("picks", 19)
    stacked = b.op("Transpose", [b.op("Tanh", ["input"])], perm=perm)  # values of both signs
    outputs = [b.op("Gather", [stacked, b.const("i", np.asarray(i, np.int64))], axis=axis) for i in picks]
    outputs[0] = b.op("Tanh", [outputs[0]])  # a pick read by an elementwise op, the others graph outputs
    manifest = build_and_compare(b.model("input", [2, 3, 4, 5], [(o, None) for o in outputs]), "avx2",
                                 tmp_path / "built")  # fmt: skip
    ops = " ".join(op for k in manifest["kernels"] for op in k["ops"])
    assert ops.count(".first (Gather)") == len(picks) and "(Transpose)" in ops, ops


def split_heads(seed: int = 17, tokens: int = 7, width: int = 12, heads: int = 3) -> onnx.ModelProto:
    """Self-attention with the heads split and merged by Reshape and Transpose as the two
    exporters write it: Q and V [0, 2, 1, 3]; K either straight to Kᵀ ([0, 2, 3, 1]) or
    through a [heads, tokens, size] reshape and a last-two-axes transpose; the context
    transposed back and merged. Odd sizes: masked vectors on every side."""
    b = zoo.Builder("split_heads", seed)
    size = width // heads

    def split(value: str) -> str:
        return b.op("Reshape", [linear(b, value, width, width), b.const("s", np.array([1, tokens, heads, size], np.int64))])

    q, q_too = (b.op("Transpose", [split("input")], perm=[0, 2, 1, 3]) for _ in range(2))
    k = b.op("Transpose", [split("input")], perm=[0, 2, 3, 1])
    k_flat = b.op("Reshape", [b.op("Transpose", [split("input")], perm=[0, 2, 1, 3]),
                              b.const("s", np.array([heads, tokens, size], np.int64))])  # fmt: skip
    k_too = b.op("Reshape", [b.op("Transpose", [k_flat], perm=[0, 2, 1]),
                             b.const("s", np.array([1, heads, size, tokens], np.int64))])  # fmt: skip
    v = b.op("Transpose", [split("input")], perm=[0, 2, 1, 3])
    scores = b.op("Add", [b.op("MatMul", [q, k]), b.op("MatMul", [q_too, k_too])])
    mixed = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    merged = b.op("Reshape", [b.op("Transpose", [mixed], perm=[0, 2, 1, 3]),
                              b.const("s", np.array([1, tokens, width], np.int64))])  # fmt: skip
    return b.model("input", [1, tokens, width], [(linear(b, merged, width, width), None)])


def test_a_batch_of_products_is_priced_as_one_call_and_a_program_step_per_product(tmp_path):
    """A batch of products (attention heads, Swin's windows) runs as one program step per
    product: predicted as the batch's products, less a call from Python for every one
    but the first (each a step instead)."""
    predicted = {}
    for batch in (1, 6):
        b = zoo.Builder(f"batch{batch}", 20)
        x = b.op("Tanh", ["input"])
        y = b.op("MatMul", [x, b.op("Transpose", [b.op("Sigmoid", [x])], perm=[0, 2, 1])])
        path = tmp_path / f"batch{batch}.onnx"
        onnx.save(b.model("input", [batch, 9, 8], [(y, None)]), path)
        manifest = autoconfig.compile_model(path, tmp_path / f"built{batch}", profile=PROFILES["avx2"],
                                            target=get_target("avx2"), fusion="none", threads=1)  # fmt: skip
        predicted[batch] = [k for k in manifest["kernels"] if k["kind"] == "matmul"]
    (one,), (six,) = predicted[1], predicted[6]
    machine = Machine.of(load_profile(PROFILES["avx2"]))
    assert " x6" in six["choice"] and six["choice"].split(" x6")[0] == one["choice"].split(",")[0]
    steps_for_calls = 5 * (machine.call_ns - PROGRAM_STEP_NS)  # the manifest rounds to 0.1 ns
    assert six["predicted_ns"] == pytest.approx(6 * one["predicted_ns"] - steps_for_calls, abs=1)


@pytest.mark.parametrize("fusion", ["dp", "greedy"])
def test_the_heads_transposes_are_the_products_addressing(tmp_path, fusion):
    """The DP reads each head's Q, K (as Kᵀ) and V where the projections wrote them and
    writes each head's context into its columns of the merged tensor — in its products'
    kernels or in the fused attention's — no transpose kernel is left. TVM's rules
    (greedy) never fuse data movement into a product. The heads' products, too small to
    split, run side by side, one per thread (the last call of an odd count on one)."""
    require_runnable(get_target("avx2"))
    manifest = build_and_compare(split_heads(), "avx2", tmp_path / "built", fusion)
    moved = [k for k in manifest["kernels"] if "(Transpose)" in " ".join(k["ops"])]
    assert manifest["threads"] == 2 and any("x3" in k["choice"] and "2 at once" in k["choice"]
                                            for k in manifest["kernels"])  # fmt: skip
    if fusion == "greedy":
        assert {k["kind"] for k in moved} == {"gather"} and len(moved) == 7
    else:
        assert {k["kind"] for k in moved} <= {"matmul", "attention"} and sum(" ".join(k["ops"]).count("(Transpose)")
                                                                            for k in moved) == 7  # fmt: skip


def _attention_reference(q, k, v, epilogue, operands, cleanup):
    """softmax(epilogue(Q·Kᵀ))·V in float64, the cleanup on the probabilities."""
    scores = ep.reference(epilogue, q.astype(np.float64) @ k.T.astype(np.float64), operands)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        p = ep.reference(cleanup, e / e.sum(axis=1, keepdims=True), [None] * len(cleanup))
    return p @ v.astype(np.float64)


ATTENTION_CASES = {
    "odd sizes, dense, a tile of the 3 rows left": dict(shape=(15, 11, 5, 7), strides=(0, 0, 0, 0)),
    "strided, masked rows, a row range, 3 rows together": dict(shape=(37, 29, 20, 24), strides=(40, 21, 30, 50),
                                                               rows=(5, 31), epilogue=(ep.residual(),),
                                                               cleanup=(ep.EpilogueOp("replace_nan"),), together=3),
    "K given transposed, per-key operands, 6x2 tiles, 4 rows together": dict(shape=(34, 50, 12, 64),
                                                                             strides=(0, 60, 64, 70), k_transposed=True,
                                                                             epilogue=(ep.scale(), ep.bias()),
                                                                             tile=(6, 2, 3), together=4),
    "streamed keys, masked rows, a row range, 4 rows together": dict(shape=(37, 130, 20, 24),
                                                                     strides=(40, 21, 30, 50), rows=(2, 31),
                                                                     epilogue=(ep.residual(),), key_tiles=1, together=4),
    "streamed Kᵀ, per-key operands, 6x2 tiles": dict(shape=(30, 150, 12, 64), strides=(0, 160, 64, 70),
                                                     k_transposed=True, epilogue=(ep.scale(), ep.bias()),
                                                     tile=(6, 2, 3), key_tiles=1),
}


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_the_attention_kernel_matches_numpy(target, case):
    """One head's fused attention on odd sizes (masked key and column vectors), strided
    Q, K, V and O, K given either way, operands per score or per key, a fully masked
    row (NaN, or 0 with the NaN cleanup) and one masked over its first keys, a range of
    rows (the rows outside it are not written); all keys at once or streamed in chunks
    of `key_tiles` register tiles of keys (the last one partial); one score row's
    softmax at a time, or several side by side."""
    t = target_for(target)
    require_runnable(t)
    spec = ATTENTION_CASES[case]
    (queries, keys, width, v_width), strides = spec["shape"], spec["strides"]
    rows, vectors, tiles = spec.get("tile", (4, 3, 2))
    config = ak.AttentionConfig(queries, keys, width, v_width, t.f32_lanes, rows, vectors, tiles, strides,
                                spec.get("epilogue", ()), spec.get("cleanup", ()), spec.get("k_transposed", False),
                                spec.get("key_tiles", 0) * t.f32_lanes * vectors, spec.get("together", 1))  # fmt: skip
    assert config.chunks >= 3 if "key_tiles" in spec else config.chunks == 1
    kernel = build_library(ak.generate(config, t), this_host()).kernel(config.symbol)
    rng = np.random.default_rng(21)
    q_rows, k_rows, v_rows, o_rows = (config.row_stride(i) for i in range(4))
    q = rng.standard_normal((queries, q_rows), dtype=np.float32)
    k = rng.standard_normal((width if config.k_transposed else keys, k_rows), dtype=np.float32)
    v = rng.standard_normal((keys, v_rows), dtype=np.float32)
    out = np.full((queries, o_rows), 7.0, np.float32)
    operands = []
    for op in config.epilogue:
        if op.operand == "channel":
            operands.append(rng.standard_normal(keys, dtype=np.float32))
        else:
            mask = np.where(rng.random((queries, keys)) < 0.3, -np.inf, 0.0).astype(np.float32)
            mask[9] = -np.inf  # a query that sees no key
            mask[3, :keys // 2] = -np.inf  # one that sees none of the first chunk's
            operands.append(mask)
    begin, end = spec.get("rows", (0, queries))
    kernel(out, q, k, v, *operands, np.empty(config.workspace(), np.float32), begin, end)
    keys_matrix = k[:, :keys].T if config.k_transposed else k[:, :width]
    expected = _attention_reference(q[:, :width], keys_matrix, v[:, :v_width], config.epilogue, operands,
                                    config.cleanup)  # fmt: skip
    np.testing.assert_allclose(out[begin:end, :v_width], expected[begin:end], rtol=1e-4, atol=1e-5)
    written = np.zeros_like(out, bool)
    written[begin:end, :v_width] = True
    assert (out[~written] == 7.0).all()
    if config.cleanup:
        assert (out[9, :v_width] == 0).all()


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("length, together", [(37, 4), (96, 3), (8, 1)])
def test_the_layer_norm_kernel_matches_numpy(target, length, together):
    """Rows normalized `together` at a time, then the rest one at a time, in two ranges
    as two threads run them (the second starting inside a block), rows of whole vectors,
    a masked tail or less than a vector; rows outside the ranges are not written."""
    from kernels import layernorm as ln

    t = target_for(target)
    require_runnable(t)
    config = ln.LayerNormConfig(13, length, t.f32_lanes, 1e-5, together)
    kernel = build_library(ln.generate(config, t), this_host()).kernel(config.symbol)
    rng = np.random.default_rng(5)
    x = (3 * rng.standard_normal((13, length)) + rng.standard_normal((13, 1)) * 5).astype(np.float32)
    scale, bias = rng.standard_normal(length, dtype=np.float32), rng.standard_normal(length, dtype=np.float32)
    y = np.full((13, length), 7.0, np.float32)
    for begin, end in ((1, 6), (6, 12)):
        kernel(y, x, scale, bias, begin, end)
    mean, variance = x.mean(1, keepdims=True, dtype=np.float64), x.var(1, keepdims=True, dtype=np.float64)
    expected = (x - mean) / np.sqrt(variance + 1e-5) * scale + bias
    np.testing.assert_allclose(y[1:12], expected[1:12], rtol=1e-4, atol=1e-4)
    assert (y[[0, 12]] == 7.0).all()


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("length, together", [(49, 4), (96, 3), (8, 1)])
def test_the_softmax_kernel_matches_numpy(target, length, together):
    """Rows `together` at a time, then the rest, in two ranges as two threads run them,
    rows of whole vectors, a masked tail or less than a vector, with and without an
    epilogue on every probability (a clip); rows outside the ranges are not written."""
    from kernels import softmax as sm

    t = target_for(target)
    require_runnable(t)
    clipped = together > 1
    config = sm.SoftmaxConfig(13, length, t.f32_lanes, (ep.clip(0.0, 0.05),) if clipped else (), together)
    kernel = build_library(sm.generate(config, t), this_host()).kernel(config.symbol)
    x = (4 * np.random.default_rng(6).standard_normal((13, length))).astype(np.float32)
    y = np.full((13, length), 7.0, np.float32)
    for begin, end in ((1, 6), (6, 12)):
        kernel(y, x, begin, end)
    e = np.exp(x - x.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    expected = np.clip(expected, 0.0, 0.05) if clipped else expected
    np.testing.assert_allclose(y[1:12], expected[1:12], rtol=1e-5, atol=1e-6)
    assert (y[[0, 12]] == 7.0).all()


@pytest.mark.parametrize("target, heads", [("avx2", 1), ("avx2", 4),
                                           pytest.param("neon", 4, marks=pytest.mark.slow),
                                           pytest.param("rvv128", 4, marks=pytest.mark.slow)])  # fmt: skip
def test_the_dp_runs_an_attention_core_as_one_kernel(tmp_path, target, heads):
    """Q·Kᵀ, the Add on the scores, the Softmax and the product by V are one kernel in the
    DP's plan (the attention model's price against the three kernels and the score
    tensors between them), reading Q, K and V and writing the context through the heads'
    transposes; TVM's rules (greedy) never fuse two many-to-many ops. Both match
    onnxruntime; two threads take a head each, or split a single head's rows."""
    t = target_for(target)
    require_runnable(t)
    model = split_heads(tokens=97, width=64, heads=heads)
    vlen = t.vector_bits if t.scalable else None
    dp = build_and_compare(model, t.name, tmp_path / "dp", vlen=vlen)
    greedy = build_and_compare(model, t.name, tmp_path / "greedy", "greedy", vlen=vlen)
    (fused,) = [k for k in dp["kernels"] if k["kind"] == "attention"]
    ops = [op.split(" ")[-1] for op in fused["ops"]]
    assert ops.count("(MatMul)") == 2 and {"(Add)", "(Softmax)", "(Transpose)"} <= set(ops), ops
    assert f"x{heads}" in fused["choice"] and (target != "avx2" or "2 thread(s)" in fused["choice"])
    assert "attention" not in {k["kind"] for k in greedy["kernels"]} and len(dp["kernels"]) < len(greedy["kernels"])


def windowed_attention(seed: int = 19, windows: int = 4, heads: int = 2, tokens: int = 9,
                       size: int = 8) -> onnx.ModelProto:  # fmt: skip
    """Swin's shifted-window attention: scores per window and head, a bias per head and
    a mask per window added through a view of the windows apart and back (the view
    there and back is one view: the chain from the product to the softmax stays whole)."""
    b = zoo.Builder("windowed_attention", seed)
    batch = [windows, heads, tokens, size]
    q, k, v = (b.op("Reshape", ["input", b.const("s", np.array(batch, np.int64))]) for _ in range(3))
    k = b.op("Transpose", [b.op("Mul", [k, b.const("k", b.rng.standard_normal(size).astype(np.float32))])],
             perm=[0, 1, 3, 2])  # fmt: skip
    scores = b.op("Add", [b.op("MatMul", [q, k]), b.const("bias", b.rng.standard_normal((heads, tokens, tokens)))])
    apart = b.op("Reshape", [scores, b.const("s", np.array([1, windows, heads, tokens, tokens], np.int64))])
    mask = np.where(b.rng.random((1, windows, 1, tokens, tokens)) < 0.3, -100.0, 0.0)
    masked = b.op("Add", [apart, b.const("mask", mask)])
    back = b.op("Reshape", [masked, b.const("s", np.array([windows, heads, tokens, tokens], np.int64))])
    mixed = b.op("MatMul", [b.op("Softmax", [back], axis=-1), v])
    return b.model("input", [windows * heads, tokens, size], [(mixed, None)])


def test_shifted_windows_attention_is_one_kernel(tmp_path):
    """Q·Kᵀ, both Adds, the Softmax and the product by V are one attention kernel that
    matches onnxruntime (the mask's views there and back no longer cut the chain); the
    bias per head and the mask per window are read as they are, each head at its own
    matrix, not broadcast to every window and head first."""
    require_runnable(get_target("avx2"))
    windows, heads, tokens = 4, 2, 9
    manifest = build_and_compare(windowed_attention(windows=windows, heads=heads, tokens=tokens), "avx2",
                                 tmp_path / "built")  # fmt: skip
    (fused,) = [k for k in manifest["kernels"] if k["kind"] == "attention"]
    ops = [op.split(" ")[-1] for op in fused["ops"]]
    assert ops.count("(MatMul)") == 2 and ops.count("(Add)") == 2 and "(Softmax)" in ops, ops
    assert manifest["weights_bytes"] < 2 * windows * heads * tokens * tokens * 4  # less than the two broadcasts


@pytest.mark.parametrize("target, tokens", [("avx2", 4096), pytest.param("rvv128", 1024, marks=pytest.mark.slow)])
def test_long_sequences_stream_the_keys_through_an_online_softmax(tmp_path, target, tokens):
    """At thousands of tokens a block's score rows over every key outgrow the L1: the
    attention model streams the keys in chunks (the online softmax; from about 4096 keys
    on the x86 profiles, 1024 on the K1's), and the result matches onnxruntime. On one
    core: on all eight of the K1's the plan prices the products apart."""
    t = target_for(target)
    require_runnable(t)
    b = zoo.Builder("long_attention", 5)
    model = b.model("input", [1, tokens, 64], [(attention(b, "input", tokens, 64, 1), None)])
    manifest = build_and_compare(model, t.name, tmp_path / "long", vlen=t.vector_bits if t.scalable else None,
                                 threads=1)  # fmt: skip
    (fused,) = [k for k in manifest["kernels"] if k["kind"] == "attention"]
    assert "keys streamed in" in fused["choice"], fused["choice"]


@pytest.mark.parametrize("profile", sorted(p.name for p in HWPROFILES.glob("*.yaml")))
def test_the_attention_model_streams_keys_only_where_score_rows_outgrow_the_l1(profile):
    """On every profile: at 128 keys all keys at once (a block's score rows sit in L1, and
    streaming only adds rescaling); at 16384 keys in chunks; never with a cleanup on the
    probabilities, which needs them whole."""
    machine = Machine.of(load_profile(HWPROFILES / profile))
    lanes = max(machine.fma_by_lanes)

    def key_block(keys: int, cleanup: ep.Epilogue = ()) -> int:
        shape = AttentionShape(1, 256, keys, 64, 64)
        return attention_model.choose(shape, machine, lanes, 1, (0, 0, 0, 0), (), cleanup).config.key_block

    assert key_block(128) == 0 and key_block(16384) > 0
    assert key_block(16384, (ep.EpilogueOp("replace_nan"),)) == 0


def test_the_attention_model_prices_its_heads_as_steps_of_one_call():
    """The fused attention's heads, each a call of one program: one call from Python, and
    a program step for every further head (a thread dispatch each on two threads)."""
    machine = Machine.of(load_profile(HWPROFILES / "amd-epyc-zen4-avx512.yaml"))
    for threads in (1, 2):
        best = attention_model.choose(AttentionShape(12, 128, 128, 64, 64), machine, 16, threads, (0, 0, 0, 0), (), ())
        calls = 12 // best.plan.threads
        dispatch = calls * machine.dispatch_ns if best.plan.threads > 1 else 0.0
        assert best.term("call") == pytest.approx(machine.call_ns + (calls - 1) * PROGRAM_STEP_NS + dispatch)


def position_counters(seed: int = 23, tokens: int = 9, width: int = 8, vocab: int = 30) -> onnx.ModelProto:
    """The position ids language models compute from their int64 inputs: OPT's (the
    mask's running count, zero where masked, less one, plus the table's offset of two)
    and RoBERTa's (the running count of non-padding ids, int32, plus the padding id;
    its token types picked from a buffer of zeros by those positions), each a Gather
    of a position table; and floats of both signs cast to int64 and back (truncation
    toward zero)."""
    b = zoo.Builder("position_counters", seed)
    mask, axis = "attention_mask", b.const("axis", np.array(1, np.int64))
    counted = b.op("Mul", [b.op("CumSum", [mask, axis]), mask])
    opt = b.op("Add", [b.op("Sub", [counted, b.const("one", np.array(1, np.int64))]), b.const("two", np.array(2, np.int64))])
    kept = b.op("Cast", [b.op("Not", [b.op("Equal", ["input_ids", b.const("pad", np.array(1, np.int64))])])],
                to=onnx.TensorProto.INT32)  # fmt: skip
    roberta = b.op("Add", [b.op("Cast", [b.op("Mul", [b.op("CumSum", [kept, axis]), kept])], to=onnx.TensorProto.INT64),
                           b.const("pad", np.array(1, np.int64))])  # fmt: skip
    types = b.op("GatherElements", [b.const("buffer", np.zeros((1, tokens), np.int64)), roberta], axis=1)
    table = b.const("positions", b.rng.standard_normal((tokens + 2, width)))
    y = b.op("Add", [b.op("Gather", [table, opt]), b.op("Gather", [table, roberta])])
    y = b.op("Add", [y, b.op("Gather", [b.const("types", b.rng.standard_normal((1, width))), types])])
    y = b.op("Add", [y, b.op("Gather", [b.const("words", b.rng.standard_normal((vocab, width))), "input_ids"])])
    counts = b.op("Cast", [b.op("Unsqueeze", [counted, b.const("at", np.array([2], np.int64))])], to=onnx.TensorProto.FLOAT)
    scaled = b.op("Add", [b.op("Mul", [counts, b.const("c", np.float32(0.7))]), b.const("d", np.float32(-2.5))])
    truncated = b.op("Cast", [b.op("Cast", [scaled], to=onnx.TensorProto.INT64)], to=onnx.TensorProto.FLOAT)
    return ids_model(b, {n: [1, tokens] for n in ("input_ids", mask)}, [y, b.op("Add", [y, truncated])])


def test_integers_computed_from_int64_inputs_are_held_as_floats(tmp_path):
    """Position ids counted from the mask and from the ids (CumSum, comparisons and
    arithmetic on int64 and int32 values) index their tables; a gather from a buffer of
    one value folds; a float cast to int64 truncates toward zero. A computed id outside
    its table (a mask holding 9) fills its row with NaN: never a wild read."""
    require_runnable(get_target("avx2"))
    onnx.save(position_counters(), tmp_path / "counters.onnx")
    manifest = autoconfig.compile_model(tmp_path / "counters.onnx", tmp_path / "built", profile=PROFILES["avx2"],
                                        target=get_target("avx2"))  # fmt: skip
    assert not any("GatherElements" in " ".join(k["ops"]) for k in manifest["kernels"])
    model = autoconfig.load(tmp_path / "built")
    feeds = sample_inputs(manifest["inputs"])
    feeds["input_ids"][0, [2, 5]] = 1  # padding ids
    for ours, expected in zip(model(feeds).values(), onnxruntime_outputs(position_counters(), feeds), strict=True):
        error, spread = output_error(ours, expected)
        assert error <= ERROR_BOUND * spread
    feeds["attention_mask"][0, 4] = 9  # counts past the table from there on, where not masked
    (rows, _) = model(feeds).values()
    outside = np.cumsum(feeds["attention_mask"][0]) * feeds["attention_mask"][0] + 1 >= 9 + 2
    assert outside[4] and not outside[:4].any() and (np.isnan(rows[0]).all(axis=1) == outside).all()


def assert_exact(tmp_path, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    """`model` built for AVX2 gives onnxruntime's outputs exactly, in their types."""
    require_runnable(get_target("avx2"))
    onnx.save(model, tmp_path / "model.onnx")
    autoconfig.compile_model(tmp_path / "model.onnx", tmp_path / "built", profile=PROFILES["avx2"],
                             target=get_target("avx2"))  # fmt: skip
    ours = list(autoconfig.load(tmp_path / "built")(feeds).values())
    for got, want in zip(ours, onnxruntime_outputs(model, feeds), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def moved_ids(seed: int = 37, vocab: int = 30) -> onnx.ModelProto:
    """Token ids [2, 5] moved before their embedding: transposed time-major (XLNet's),
    the first four steps sliced, a step of constant ids concatenated, a step of 7s padded
    on, one column gathered by a constant index and tiled back to two."""
    b = zoo.Builder("moved_ids", seed)
    bounds = [b.const(k, np.array([v], np.int64)) for k, v in (("start", 0), ("end", 4), ("axis", 0))]
    steps = b.op("Slice", [b.op("Transpose", ["input_ids"], perm=[1, 0]), *bounds])
    ids = b.op("Concat", [steps, b.const("start", np.array([[3, 4]], np.int64))], axis=0)
    ids = b.op("Pad", [ids, b.const("pads", np.array([0, 0, 1, 0], np.int64)), b.const("value", np.array(7, np.int64))])
    column = b.op("Gather", [ids, b.const("col", np.array([1], np.int64))], axis=1)
    ids = b.op("Add", [ids, b.op("Tile", [column, b.const("reps", np.array([1, 2], np.int64))])])
    y = b.op("Gather", [b.const("words", b.rng.standard_normal((2 * vocab, 8))), ids])
    return ids_model(b, {"input_ids": [2, 5]}, [y])


def test_int64_ids_moved_before_their_gather(tmp_path):
    """Transpose, Slice, Concat, Pad, Gather by constant indices and Tile of int64 ids
    run on their float32 conversions; the sums index the table as ids checked in the kernel."""
    assert_exact(tmp_path, moved_ids(), {"input_ids": np.random.default_rng(3).integers(0, 30, (2, 5))})


def shifted_ids(seed: int = 41, vocab: int = 30) -> onnx.ModelProto:
    """BART's decoder ids: the ids [2, 5] shifted right one step into a constant of zeros
    (a ScatterND of computed int64 updates), a start id 2 written at each row's first
    step (of constant updates), then their embeddings."""
    b = zoo.Builder("shifted_ids", seed)
    bounds = [b.const(k, np.array([v], np.int64)) for k, v in (("start", 0), ("end", 4), ("axis", 1))]
    steps = np.stack(np.meshgrid([0, 1], [1, 2, 3, 4], indexing="ij"), -1)  # [2, 4, 2]: each row's steps 1..4
    ids = b.op("ScatterND", [b.const("zeros", np.zeros((2, 5), np.int64)), b.const("steps", steps),
                             b.op("Slice", ["input_ids", *bounds])])  # fmt: skip
    ids = b.op("ScatterND", [ids, b.const("firsts", np.array([[0, 0], [1, 0]], np.int64)),
                             b.const("start_id", np.array([2, 2], np.int64))])  # fmt: skip
    y = b.op("Gather", [b.const("words", b.rng.standard_normal((vocab, 8))), ids])
    return ids_model(b, {"input_ids": [2, 5]}, [y, ids], integers=(ids,))


def test_int64_ids_scattered_by_constant_indices(tmp_path):
    """Both scatters are gathers of the ids' float32 conversions; the shifted ids come
    out as int64, and their embeddings match onnxruntime's."""
    assert_exact(tmp_path, shifted_ids(), {"input_ids": np.random.default_rng(5).integers(0, 30, (2, 5))})


def pooled_at_largest_id(seed: int = 43, vocab: int = 30) -> onnx.ModelProto:
    """CLIP's pooled text: the embedding of each row's largest id (ArgMax of the int64 ids)
    picked by GatherND with batch_dims 1, with batch_dims 0 beside a constant batch
    index, with the index counted from the end (negative), and from the constant table."""
    b = zoo.Builder("pooled", seed)
    table = b.const("words", b.rng.standard_normal((vocab, 4)))
    hidden = b.op("Gather", [table, "input_ids"])  # [2, 6, 4], computed from the ids
    last = b.op("ArgMax", ["input_ids"], axis=1, keepdims=1)  # [2, 1]
    pairs = b.op("Concat", [b.const("batch", np.array([[0], [1]], np.int64)), last], axis=1)
    ids = b.op("GatherND", ["input_ids", pairs])  # the largest ids themselves, [2]
    outputs = [b.op("GatherND", [hidden, last], batch_dims=1), b.op("GatherND", [hidden, pairs]),
               b.op("GatherND", [hidden, b.op("Sub", [last, b.const("six", np.array(6, np.int64))])], batch_dims=1),
               b.op("GatherND", [table, b.op("Unsqueeze", [ids, b.const("axis", np.array([1], np.int64))])])]
    return ids_model(b, {"input_ids": [2, 6]}, outputs)


def test_gather_nd_by_indices_computed_from_the_ids(tmp_path):
    """Each GatherND is a Gather of rows by the ids' float32 conversions: the same
    vectors as onnxruntime's."""
    ids = np.random.default_rng(7).permutation(30)[:12].reshape(2, 6)  # one largest id a row
    assert_exact(tmp_path, pooled_at_largest_id(), {"input_ids": ids})


def clipped_windows(seed: int = 47, vocab: int = 20) -> onnx.ModelProto:
    """Longformer's chunking: positions computed from the int64 ids clipped into a
    window (both bounds, and the upper alone), their embeddings, then a constant band
    mask choosing, per token, a constant row or the embedding (a Where whose condition
    and one branch are constants, the other branch computed)."""
    b = zoo.Builder("clipped", seed)
    shifted = b.op("Sub", ["input_ids", b.const("three", np.array(3, np.int64))])
    both = b.op("Clip", [shifted, b.const("low", np.array(0, np.int64)), b.const("high", np.array(9, np.int64))])
    upper = b.op("Clip", [b.op("Abs", [shifted]), "", b.const("top", np.array(vocab - 1, np.int64))])
    table = b.const("words", b.rng.standard_normal((vocab, 4)))
    rows = b.op("Add", [b.op("Gather", [table, both]), b.op("Gather", [table, upper])])  # [2, 6, 4]
    band = b.const("band", np.triu(np.ones((6, 4), bool), 1)[None])
    y = b.op("Where", [band, b.const("fill", b.rng.standard_normal((1, 6, 4))), rows])
    return ids_model(b, {"input_ids": [2, 6]}, [y, both], integers=(both,))


def test_int64_positions_clipped_into_a_window(tmp_path):
    """Clip of integers computed from the ids runs on their float32 conversions (the
    clipped positions come out as int64); the selection's all-constant half is computed
    at build: the same values as onnxruntime's."""
    assert_exact(tmp_path, clipped_windows(), {"input_ids": np.random.default_rng(9).integers(0, 20, (2, 6))})


@pytest.mark.parametrize("axis", [-1, 1])
def test_one_hot_rows_of_ids_wrap_negatives_and_skip_outsiders(tmp_path, axis):
    """OneHot of int64 ids in [-7, 7] over 5 classes (negatives wrapped, those outside
    all off), along the last or a middle axis, times a constant per class."""
    b = zoo.Builder("one_hot", 41)
    rows = b.op("OneHot", ["input_ids", b.const("depth", np.array(5, np.float32)),
                           b.const("values", np.array([-0.5, 2.0], np.float32))], axis=axis)  # fmt: skip
    y = b.op("Mul", [rows, b.const("scale", np.linspace(-1, 1, 5, dtype=np.float32).reshape(
        [5 if a == axis % 3 else 1 for a in range(3)]))])  # fmt: skip
    ids = np.random.default_rng(11).integers(-7, 8, (3, 4))
    assert_exact(tmp_path, ids_model(b, {"input_ids": [3, 4]}, [y]), {"input_ids": ids})


def test_int64_mods_of_ids_are_exact(tmp_path):
    """Mod of int64 ids (offset to both signs) by a constant and by other ids, integer
    style (the rest takes the divisor's sign) and fmod (the dividend's): onnxruntime's
    int64 values exactly."""
    b = zoo.Builder("int_mods", 43)
    shifted = b.op("Sub", ["input_ids", b.const("middle", np.array(40, np.int64))])
    divisor = b.op("Sub", [b.op("Mod", ["input_ids", b.const("seven", np.array(7, np.int64))]),
                           b.const("three", np.array(3, np.int64))])  # in [-3, 3]
    nonzero = b.op("Where", [b.op("Equal", [divisor, b.const("zero", np.array(0, np.int64))]),
                             b.const("five", np.array(-5, np.int64)), divisor])  # fmt: skip
    outputs = [b.op("Mod", [shifted, nonzero]), b.op("Mod", [shifted, nonzero], fmod=1),
               b.op("Mod", [shifted, b.const("minus", np.array(-6, np.int64))])]  # fmt: skip
    ids = np.random.default_rng(12).integers(0, 80, (2, 9))
    assert_exact(tmp_path, ids_model(b, {"input_ids": [2, 9]}, outputs, integers=tuple(outputs)), {"input_ids": ids})


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_a_cumsum_is_a_product_by_a_triangle(tmp_path, exclusive, reverse):
    """CumSum along a middle and a last axis, each direction, inclusive or not."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("cumsums", 29)
    middle = b.op("CumSum", ["input", b.const("axis", np.array(-2, np.int64))], exclusive=exclusive, reverse=reverse)
    last = b.op("CumSum", ["input", b.const("axis", np.array(2, np.int32))], exclusive=exclusive, reverse=reverse)
    manifest = build_and_compare(b.model("input", [2, 7, 13], [(middle, None), (last, None)], opset=17), "avx2",
                                 tmp_path / "built")  # fmt: skip
    assert {k["kind"] for k in manifest["kernels"]} <= {"matmul", "transform", "view"}, manifest["kernels"]


def test_a_cumsum_along_too_long_an_axis_is_refused_in_one_line(tmp_path, capsys):
    b = zoo.Builder("long_cumsum", 31)
    y = b.op("CumSum", ["input", b.const("axis", np.array(1, np.int64))])
    onnx.save(b.model("input", [1, 5000], [(y, None)], opset=17), tmp_path / "long.onnx")
    assert main(["build", str(tmp_path / "long.onnx"), "--out", str(tmp_path / "built"), "--profile",
                 str(PROFILES["avx2"])]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(CumSum): along 5000 elements, more than the 2048 generated" in err, err


@pytest.mark.parametrize("upper, k", [(1, 0), (1, 2), (0, -1), (0, 9), (1, -7)])
def test_trilu_keeps_one_side_of_a_diagonal(tmp_path, upper, k):
    """Trilu (a causal mask's triangle) on the last two axes of a batched tensor, the
    diagonal shifted either way, past the matrix too."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("trilu", 37)
    y = b.op("Trilu", ["input", b.const("k", np.array(k, np.int64))], upper=upper)
    build_and_compare(b.model("input", [2, 5, 7], [(y, None)], opset=17), "avx2", tmp_path / "built")


def written_out_rms_norm(b: zoo.Builder, x: str, form: str, axes: list[int], scale: np.ndarray | None) -> str:
    """x over its root mean square as exporters write it: x·Reciprocal(√(mean(x²) + ε))
    (torch.rsqrt, Llama), x·(1 / √...) (T5), or x / √...; then times `scale`, if given.
    The mean's axes an input (opset 18) for the reciprocal form, an attribute else."""
    square = b.op("Mul", [x, x])
    mean = (b.op("ReduceMean", [square, b.const("axes", np.array(axes, np.int64))], keepdims=1) if form == "reciprocal"
            else b.op("ReduceMean", [square], axes=axes, keepdims=1))  # fmt: skip
    root = b.op("Sqrt", [b.op("Add", [mean, b.const("eps", np.float32(1e-6))])])
    if form == "divided":
        normed = b.op("Div", [x, root])
    else:
        if form == "reciprocal":
            inverse = b.op("Reciprocal", [root])
        else:
            inverse = b.op("Div", [b.const("one", np.float32(1)), root])
        normed = b.op("Mul", [inverse, x])
    return normed if scale is None else b.op("Mul", [b.const("g", scale), normed])


@pytest.mark.parametrize(("form", "axes", "scale_shape"), [("reciprocal", [-1], (16,)), ("one_over", [2], (16,)),
                                                           ("divided", [-1], None), ("reciprocal", [1, 2], (5, 16)),
                                                           ("one_over", [1, 2], (1, 5, 1))])
def test_a_written_out_rms_norm_is_one_row_kernel(tmp_path, form, axes, scale_shape):
    """The root-mean-square norms of Llama, T5 and others, written out as ops by the
    exporter, run as one RMSNormalization row kernel (over the last axis or the last
    two, a constant scale folded in, of as many axes as x too: a group norm's) and match
    onnxruntime; a square read elsewhere too keeps the ops."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder(f"rms_{form}", 43)
    x = linear(b, "input", 12, 16)
    scale = None if scale_shape is None else (b.rng.standard_normal(scale_shape) + 1.0).astype(np.float32)
    y = written_out_rms_norm(b, x, form, axes, scale)
    opset = 18 if form == "reciprocal" else 17
    model = b.model("input", [2, 5, 12], [(y, None)], opset=opset)
    build_and_compare(model, "avx2", tmp_path / "built")
    built = build_model(import_model(model), load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", 1)
    assert [k.kind for k in built.kernels].count("layernorm") == 1
    assert not any("ReduceMean" in o for k in built.kernels for o in k.ops)
    shared = zoo.Builder("rms_shared", 43)
    x = linear(shared, "input", 12, 16)
    y = written_out_rms_norm(shared, x, form, axes, scale)
    square = next(n.output[0] for n in shared.nodes if n.op_type == "Mul" and n.input[0] == n.input[1])
    model = shared.model("input", [2, 5, 12], [(y, None), (square, None)], opset=opset)
    build_and_compare(model, "avx2", tmp_path / "shared")
    assert "layernorm" not in [k.kind for k in build_model(import_model(model), load_profile(PROFILES["avx2"]),
                                                            get_target("avx2"), "dp", 1).kernels]  # fmt: skip


@pytest.mark.parametrize("by_constant", [True, False], ids=["times_sine", "added"])
def test_a_rotated_half_is_one_gather(tmp_path, by_constant):
    """A rotary embedding's rotate_half (the last axis' halves swapped, the first
    negated: Concat of a negated Slice and a Slice) is one Gather; its signs go into the
    sine it is multiplied by, or a product of their own where something else reads it."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("rotary", 47)
    x = linear(b, "input", 12, 16)
    def half(start: int, end: int) -> str:
        bounds = [b.const(name, np.array([v], np.int64)) for name, v in (("start", start), ("end", end), ("axis", 2))]
        return b.op("Slice", [x, *bounds])
    rotated = b.op("Concat", [b.op("Neg", [half(8, 16)]), half(0, 8)], axis=-1)
    cos, sin = (b.const(name, b.rng.standard_normal((5, 16)).astype(np.float32)) for name in ("cos", "sin"))
    other = b.op("Mul", [rotated, sin]) if by_constant else b.op("Add", [rotated, x])
    y = b.op("Add", [b.op("Mul", [x, cos]), other])
    model = b.model("input", [2, 5, 12], [(y, None)], opset=17)
    build_and_compare(model, "avx2", tmp_path / "built")
    graph = import_model(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("Gather") == 1 and not {"Neg", "Concat", "Slice"} & set(ops)
    assert ops.count("Mul") == 2  # x·cos, and the gather times the signed sine (or the signs)


def test_rms_normalization_and_castlike_match_onnxruntime(tmp_path):
    """RMSNormalization (opset 23) over the last axis and over the last two, after a
    product (Llama's norms), and a CastLike to the product's own type."""
    require_runnable(get_target("avx2"))
    b = zoo.Builder("rms_norms", 41)
    x = linear(b, "input", 12, 16)
    last = b.op("RMSNormalization", [x, b.const("g", b.rng.standard_normal(16) + 1.0)], axis=-1, epsilon=1e-5)
    both = b.op("RMSNormalization", [x, b.const("g2", b.rng.standard_normal((5, 16)))], axis=-2, epsilon=1e-3)
    same = b.op("CastLike", [b.op("Relu", [x]), x])
    build_and_compare(b.model("input", [2, 5, 12], [(last, None), (both, None), (same, None)], opset=23), "avx2",
                      tmp_path / "built")  # fmt: skip
