"""Epilogues: every op applied to the output of every matmul algorithm equals numpy's
matmul followed by the op, on every target (qemu for NEON and RVV); the API passes
the operands; the model charges the epilogue."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autoconfig import compile_matmul, plan_matmul
from autoconfig.errors import AutoconfigError
from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels import matmul as mm
from autoconfig.probe.host import this_host
from kernels.library import build_library
from tests.conftest import require_runnable, target_for

HOST_PROFILE = Path(__file__).parent.parent / "hwprofiles" / "amd-epyc.yaml"

# Chains that between them show every op: values reach ±5, so the leaky slope,
# both clip bounds and relu's zeros all change the result.
CHAINS = {
    "bias+leaky+clip": (ep.bias(), ep.leaky_relu(0.1), ep.clip(-0.3, 2.0)),
    "residual+product+relu+sigmoid": (ep.residual(), ep.product(), ep.relu(), ep.sigmoid()),
    "scale+mish+tanh+hard_sigmoid": (ep.scale(), ep.mish(), ep.tanh(), ep.hard_sigmoid(0.3, 0.4)),
    "softplus+silu+hard_swish": (ep.softplus(), ep.silu(), ep.hard_swish()),
    # selections on relu's zeros and the operands' (a third of them 0): every branch
    "relu+selections+nonzero+choose": (ep.relu(), ep.EpilogueOp("else_then", alpha=0.0),
                                       ep.EpilogueOp("then_else", alpha=0.5), ep.EpilogueOp("keep_where", alpha=7.0),
                                       ep.EpilogueOp("replace_where", alpha=-2.0), ep.EpilogueOp("nonzero"),
                                       ep.EpilogueOp("choose", alpha=2.0, beta=-1.0)),
    # sin's reduction in f64 vectors (twice the f32 lanes' registers) on every target
    "bias+atan+sin+cos+sinh+asinh": (ep.bias(), *[ep.EpilogueOp(k) for k in ("atan", "sin", "cos", "sinh", "asinh")]),
    # pow by an odd integer (the sign kept) then a non-integer (NaN below 0): e^(p·ln|y|)
    "power3+power0.7": (ep.EpilogueOp("power", alpha=3.0), ep.EpilogueOp("power", alpha=0.7)),
}


def algorithm_configs(lanes: int, epilogue: ep.Epilogue) -> list[mm.MatmulConfig]:
    """One config per algorithm on a shape with edges in every dimension; K in several
    blocks where the algorithm blocks K, so the epilogue must wait for the last one."""
    n = 2 * lanes + 3
    return [
        mm.MatmulConfig(mm.MatmulShape(5, n, 9), "broadcast", lanes, unroll=2, epilogue=epilogue),
        mm.MatmulConfig(mm.MatmulShape(7, n, 9), "tiled", lanes, mr=3, nv=2, kc=4, unroll=2, epilogue=epilogue),
        mm.MatmulConfig(mm.MatmulShape(7, n, 9), "packed", lanes, mr=4, nv=2, kc=4, accumulate=True,
                        epilogue=epilogue),
        mm.MatmulConfig(mm.MatmulShape(6, 1, lanes + 3), "dot", lanes, mr=4, unroll=2, epilogue=epilogue),
    ]  # fmt: skip


def run_and_compare(config: mm.MatmulConfig, kernel) -> None:
    s = config.shape
    rng = np.random.default_rng(7)
    a = rng.standard_normal((s.m, s.k), dtype=np.float32)
    b = rng.standard_normal((s.k, s.n), dtype=np.float32)
    c = rng.standard_normal((s.m, s.n), dtype=np.float32)
    operands = [rng.standard_normal(dims := s.n if op.operand == "channel" else (s.m, s.n), dtype=np.float32)
                * (rng.random(dims) > 1 / 3) if op.operand else None for op in config.epilogue]  # a third 0: false  # fmt: skip
    y = a.astype(np.float64) @ b + (c if config.accumulate else 0)
    expected = ep.reference(config.epilogue, y, operands)
    args = [c, a, b, *(x for x in operands if x is not None)]
    if config.algorithm == "packed":
        args.append(np.full(config.workspace(), np.nan, np.float32))
    kernel(*args, 0, config.row_tiles(), 0, config.col_tiles())
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5, err_msg=f"{config.algorithm}")


@pytest.mark.slow
@pytest.mark.parametrize("chain", CHAINS, ids=str)
@pytest.mark.parametrize("case_id", ["avx2", "avx512", "neon", "rvv128", "rvv256"])
def test_every_op_on_every_algorithm_and_target(case_id, chain):
    target = target_for(case_id)
    require_runnable(target)
    configs = algorithm_configs(target.f32_lanes, CHAINS[chain])
    library = build_library([mm.generate(c, target) for c in configs], this_host())  # one library for all four
    for config in configs:
        run_and_compare(config, library.kernel(config.symbol))


def applied_alone(op: ep.EpilogueOp, x: np.ndarray) -> np.ndarray:
    """`op` on each value of the 1-D `x`, as the epilogue of a generated AVX2 product of
    the row x by 1 (a broadcast 1xN matmul)."""
    target = target_for("avx2")
    require_runnable(target)
    n = x.size
    config = mm.MatmulConfig(mm.MatmulShape(1, n, 1), "broadcast", 8, epilogue=(op,))
    kernel = build_library(mm.generate(config, target), this_host()).kernel(config.symbol)
    out = np.empty((1, n), np.float32)
    kernel(out, np.ones((1, 1), np.float32), x.astype(np.float32).reshape(1, n), 0, 1, 0, config.col_tiles())
    return out[0]


@pytest.mark.parametrize("op", [ep.tanh(), ep.softplus(), ep.silu(), ep.mish(), ep.hard_sigmoid(), ep.hard_swish(),
                                ep.EpilogueOp("erf"), ep.EpilogueOp("gelu"), ep.EpilogueOp("gelu_tanh"),
                                ep.EpilogueOp("sqrt"), ep.EpilogueOp("square"), ep.EpilogueOp("nonzero"),
                                ep.EpilogueOp("is_zero"), ep.EpilogueOp("identity"),
                                ep.EpilogueOp("isinf", alpha=1.0, beta=0.0),
                                ep.EpilogueOp("choose", alpha=2.0, beta=-1.0), *[ep.EpilogueOp(kind) for kind in (
                                    "exp", "log", "negate", "abs", "reciprocal", "floor", "ceil", "round", "sign",
                                    "softsign", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
                                    "asinh", "acosh", "atanh")],
                                ep.EpilogueOp("elu", alpha=0.7, beta=1.2), ep.EpilogueOp("thresholded_relu", alpha=1.5),
                                ep.EpilogueOp("affine", alpha=0.7, beta=-0.2),
                                ep.EpilogueOp("scaled_tanh", alpha=1.5, beta=0.3),
                                *[ep.EpilogueOp("power", alpha=p) for p in (2.5, -0.75, 5, -2)]],
                         ids=lambda op: f"{op.kind}{op.alpha:g}" if op.kind == "power" else op.kind)  # fmt: skip
def test_each_activation_over_a_wide_range(op):
    # each activation alone on inputs -60..60: tails, zero and the bends (sqrt: NaN below 0)
    x = np.linspace(-60, 60, 2401, dtype=np.float32)
    expected = ep.reference((op,), x, [None])
    np.testing.assert_allclose(applied_alone(op, x), expected, rtol=1e-5, atol=1e-6, err_msg=op.kind)


def test_erf_keeps_its_relative_precision_near_zero_and_in_the_tails():
    # small arguments (a series, not 1 - erfc) and the tails (erfc)
    size = np.geomspace(1e-6, 12, 1200)
    x = np.concatenate([-size[::-1], size]).astype(np.float32)
    op = ep.EpilogueOp("erf")
    np.testing.assert_allclose(applied_alone(op, x), ep.reference((op,), x, [None]), rtol=2e-6)


def test_gelu_is_within_a_few_ulps_of_its_input_everywhere():
    # erf by a rational function: the error scales with |y| (1 + erf cancels in the negative
    # tail, as in onnxruntime); exactly y and 0 where erf rounds to +-1
    size = np.geomspace(1e-6, 80, 2400)
    y = np.concatenate([-size[::-1], [0.0], size]).astype(np.float32)
    op = ep.EpilogueOp("gelu")
    out = applied_alone(op, y)
    expected = ep.reference((op,), y, [None])
    assert np.all(np.abs(out - expected) <= 1.5e-7 * np.abs(y))
    positive = y > 0
    np.testing.assert_allclose(out[positive], expected[positive], rtol=1.5e-7)
    far = np.abs(y) >= 3.92 * np.sqrt(2)
    assert np.array_equal(out[far], np.where(y[far] > 0, y[far], 0))


@pytest.mark.parametrize("kind", ["sin", "cos", "tan"])
def test_trigonometry_keeps_its_precision_up_to_large_arguments(kind):
    # the argument reduced by pi/2 in f64: near 1 ulp from 1e-9 to 4e15 (where n stays exact),
    # near multiples of pi too; special values as numpy gives them
    rng = np.random.default_rng(3)
    size = np.exp(rng.uniform(np.log(1e-9), np.log(4e15), 4000)) * rng.choice([-1, 1], 4000)
    special = [0.0, -0.0, np.pi, -np.pi, 2 * np.pi, 100 * np.pi, np.inf, -np.inf, np.nan]
    x = np.concatenate([size, special]).astype(np.float32)
    op = ep.EpilogueOp(kind)
    np.testing.assert_allclose(applied_alone(op, x), ep.reference((op,), x, [None]), rtol=5e-7, atol=0)


def test_exp_is_accurate_over_the_f32_range():
    # sigmoid's exp is a polynomial: checked through sigmoid on inputs -100..100
    x = np.linspace(-100, 100, 4001, dtype=np.float32)
    np.testing.assert_allclose(applied_alone(ep.sigmoid(), x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=2e-6,
                               atol=1e-30)  # fmt: skip


@pytest.mark.parametrize("kind", ["exp", "log"])
def test_exp_and_log_take_all_of_f32(kind):
    # ONNX Exp and Log on zeros, subnormals, the edges of exp's range, infinities and NaN
    x = np.array([-np.inf, -1e30, -104, -88.5, -87.5, -10, -1e-30, -0.0, 0.0, 1e-45, 1e-40, 1.1754942e-38, 1e-20,
                  0.5, 1, 88.3, 88.5, 88.72, 88.73, 89, 1e30, np.inf, np.nan], np.float32)  # fmt: skip
    out = applied_alone(ep.EpilogueOp(kind), x)
    with np.errstate(all="ignore"):
        expected = (np.exp if kind == "exp" else np.log)(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=2e-6, atol=1e-37, err_msg=kind)


@pytest.mark.parametrize("power", [3, -3, 2, -2, 1.5, -1.5, 0.3, 0])
def test_power_takes_pows_special_values(power):
    # zero, subnormals, infinities and NaN as pow gives them; NaN for a finite negative base
    # unless the power is an integer (no -0.0: the product this runs after adds it to +0)
    x = np.array([-np.inf, -1e30, -2, -1, -1e-40, 0.0, 1e-45, 1e-40, 1e-20, 0.5, 1, 2, 1e30, np.inf, np.nan],
                 np.float32)  # fmt: skip
    op = ep.EpilogueOp("power", alpha=power)
    with np.errstate(all="ignore"):
        expected = np.power(x.astype(np.float64), power).astype(np.float32)
    out = applied_alone(op, x)
    np.testing.assert_allclose(out, expected, rtol=4e-6, atol=1e-37, err_msg=str(power))
    number = ~np.isnan(expected)
    assert np.array_equal(np.signbit(out[number]), np.signbit(expected[number])), power


def test_api_bias_relu_and_its_cost():
    f = compile_matmul(300, 200, 100, profile=HOST_PROFILE, threads=2, epilogue=(ep.bias(), ep.relu()))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((300, 100), dtype=np.float32), rng.standard_normal((100, 200), dtype=np.float32)
    bias = rng.standard_normal(200, dtype=np.float32)
    np.testing.assert_allclose(f(a, b, bias), np.maximum(a.astype(np.float64) @ b + bias, 0), rtol=1e-4, atol=1e-4)
    with pytest.raises(AutoconfigError, match=r"takes 1 epilogue operand\(s\) \(bias0\), got 0"):
        f(a, b)
    with pytest.raises(AutoconfigError, match=r"bias0 must have shape \(200,\)"):
        f(a, b, np.zeros(300, np.float32))
    terms = {t.name: t for t in f.prediction.terms}
    assert terms["epilogue"].ns > 0 and "bias+relu" in terms["epilogue"].why
    bare = plan_matmul(300, 200, 100, profile=HOST_PROFILE, threads=2).best
    assert f.prediction.total_ns > bare.total_ns  # the same plan costs more with an epilogue


def test_epilogue_ops_are_validated():
    with pytest.raises(KernelError, match="unknown epilogue op 'cosine'"):
        ep.EpilogueOp("cosine")
    y = np.array([-3.0, 1.5, 4.0])
    np.testing.assert_array_equal(ep.reference((ep.clip(2, 1),), y, [None]), [1, 1, 1])  # ONNX: high wins


@pytest.mark.parametrize("case_id", ["avx2", "neon", "rvv128"])
def test_a_prologue_applies_to_b_as_the_product_reads_it(case_id):
    # relu(B·s + t) row by row (a BatchNorm then ReLU on a 1x1 convolution's input), in
    # place (tiled) and while packing (packed), edges in every dimension, K in blocks
    target = target_for(case_id)
    require_runnable(target)
    lanes = target.f32_lanes
    prologue = (ep.scale(), ep.bias(), ep.relu())
    shape = mm.MatmulShape(7, 2 * lanes + 3, 9)
    configs = [mm.MatmulConfig(shape, "tiled", lanes, mr=3, nv=2, kc=4, unroll=2, prologue=prologue,
                               epilogue=(ep.bias(),), channel_axis="rows"),
               mm.MatmulConfig(shape, "packed", lanes, mr=4, nv=2, kc=4, prologue=prologue,
                               epilogue=(ep.bias(),), channel_axis="rows")]  # fmt: skip
    library = build_library([mm.generate(c, target) for c in configs], this_host())
    rng = np.random.default_rng(3)
    a = rng.standard_normal((shape.m, shape.k), dtype=np.float32)
    b = rng.standard_normal((shape.k, shape.n), dtype=np.float32)
    bias = rng.standard_normal(shape.m, dtype=np.float32)
    s, t = rng.standard_normal((2, shape.k), dtype=np.float32)
    expected = a.astype(np.float64) @ np.maximum(b * s[:, None] + t[:, None], 0) + bias[:, None]
    for config in configs:
        c = np.full((shape.m, shape.n), np.nan, np.float32)
        work = [np.full(config.workspace(), np.nan, np.float32)] if config.workspace() else []
        library.kernel(config.symbol)(c, a, b, bias, s, t, *work, 0, config.row_tiles(), 0, config.col_tiles())
        np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5, err_msg=config.algorithm)
    # transposed (a 1x1 layer's channels in the lanes): B, the weights, scaled by row
    config = mm.MatmulConfig(shape, "packed", lanes, mr=3, nv=2, kc=4, transposed=True, prologue=(ep.scale(),),
                             full_row_edge=True, full_column_edge=True)  # fmt: skip
    library = build_library([mm.generate(config, target)], this_host())
    c_t = np.full((shape.n, shape.m), np.nan, np.float32)
    work = np.full(config.workspace(), np.nan, np.float32)
    library.kernel(config.symbol)(c_t, np.ascontiguousarray(a.T), config.pack_b(b.T), s, work, 0,
                                  config.row_tiles(), 0, config.col_tiles())  # fmt: skip
    np.testing.assert_allclose(c_t.T, a.astype(np.float64) @ (b * s[:, None]), rtol=1e-5, atol=1e-5)


def test_a_prologue_needs_a_tiled_or_packed_product_and_row_operands():
    shape = mm.MatmulShape(4, 8, 8)
    with pytest.raises(KernelError, match="prologue"):
        mm.MatmulConfig(shape, "broadcast", 8, prologue=(ep.relu(),)).validate(target_for("avx2"))
    with pytest.raises(KernelError, match="prologue"):
        mm.MatmulConfig(shape, "tiled", 8, mr=2, prologue=(ep.residual(),)).validate(target_for("avx2"))
    with pytest.raises(KernelError, match="its prologue is one scale"):
        mm.MatmulConfig(shape, "packed", 8, mr=2, transposed=True, prologue=(ep.relu(),)).validate(target_for("avx2"))
