"""Transformer stand-ins built with onnx's helper: the operators and patterns the vision
transformers' exports carry (ViT, Swin, ConvNeXt), each small enough for CI, held to
onnxruntime like every model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from autoconfig.graph import zoo
from kernels.target import get_target
from tests.conftest import require_runnable
from tests.test_build import build_and_compare


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
    require_runnable(get_target("avx2"))
    build_and_compare(model(), "avx2", tmp_path / "built")
