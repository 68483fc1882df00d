"""Epilogues: elementwise ops applied to each output value of an anchor kernel (matmul
now, convolution and pooling later) while it is still in a register, before it is
stored — so that an anchor and the elementwise ops after it are one kernel.

An epilogue is a tuple of `EpilogueOp`, applied in order. Some ops read a second
tensor (their operand), which becomes a kernel argument:

- ``bias``      y + b[channel]            operand: one value per output column/channel
- ``scale``     y · s[channel]            operand: likewise (with bias: a folded BatchNorm)
- ``residual``  y + r[same position]      operand: a tensor of the output's shape
- ``product``   y · r[same position]      operand: likewise
- ``difference``  y − r[same position]    operand: likewise
- ``quotient``  y / r[same position]      operand: likewise
- ``reverse_difference``  r − y           operand: likewise
- ``reverse_quotient``    r / y           operand: likewise
- ``relu``      max(y, 0)
- ``clip``      min(max(y, low), high)    (Relu6 is clip(0, 6); high where low > high, as ONNX says)
- ``leaky_relu``  y if y >= 0 else alpha·y
- ``sigmoid``   1 / (1 + exp(-y))         exp by a degree-6 polynomial (below)
- ``tanh``      2·sigmoid(2y) − 1
- ``softplus``  max(y, 0) + log(1 + exp(−|y|))   log by a polynomial (below)
- ``silu``      y · sigmoid(y)
- ``mish``      y · tanh(softplus(y)) = y · n(n+2) / (n(n+2) + 2), n = exp(y)
- ``hard_sigmoid``  max(0, min(1, alpha·y + beta))   (ONNX: alpha 0.2, beta 0.5)
- ``hard_swish``    y · hard_sigmoid(y) with alpha 1/6, beta 0.5

`apply` emits the ops on a value of any shape — a vector of the output row, or one
scalar (a matrix-times-vector result) — given a callback that loads an operand at
the current output position in the same shape. `reference` is the numpy meaning,
which the tests hold the generated code to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from autoconfig.errors import AutoconfigError
from kernels.loops import maximum, minimum
from kernels.mlir import arith, ir, math, vector

EpilogueKind = Literal["bias", "scale", "residual", "product", "difference", "quotient",
                       "reverse_difference", "reverse_quotient", "relu", "clip", "leaky_relu", "sigmoid", "tanh", "softplus",
                       "silu", "mish", "hard_sigmoid", "hard_swish"]
Operand = Literal["channel", "output"]

OPERANDS: dict[str, Operand] = {"bias": "channel", "scale": "channel", "residual": "output", "product": "output",
                                "difference": "output", "quotient": "output", "reverse_difference": "output",
                                "reverse_quotient": "output"}
"""Ops that read a second tensor, and its shape: per channel, or the output's."""

VECTOR_OPS: dict[str, int] = {
    "bias": 1, "scale": 1, "residual": 1, "product": 1, "difference": 1, "quotient": 1, "reverse_difference": 1,
    "reverse_quotient": 1, "relu": 1, "clip": 2, "leaky_relu": 3, "sigmoid": 20, "tanh": 23,
    "softplus": 40, "silu": 21, "mish": 25, "hard_sigmoid": 3, "hard_swish": 5,
}  # fmt: skip
"""Vector instructions one op emits per output vector (loads of operands not counted):
what the models charge for it. Sigmoid: exp's clamp, range reduction, degree-6
polynomial and exponent assembly (17), negation, add, divide; softplus: exp (17),
log's exponent split, branch-free select and degree-8 polynomial (19), the rest."""


@dataclass(frozen=True)
class EpilogueOp:
    """One elementwise op of an epilogue; `low`/`high` for clip, `alpha` for leaky_relu."""

    kind: EpilogueKind
    low: float = 0.0
    high: float = 0.0
    alpha: float = 0.0  # leaky_relu's slope, hard_sigmoid's alpha
    beta: float = 0.0  # hard_sigmoid's beta

    def __post_init__(self) -> None:
        if self.kind not in VECTOR_OPS:
            raise AutoconfigError(f"unknown epilogue op {self.kind!r}: {', '.join(VECTOR_OPS)}")

    @property
    def operand(self) -> Operand | None:
        """The shape of the tensor this op reads, if it reads one."""
        return OPERANDS.get(self.kind)


Epilogue = tuple[EpilogueOp, ...]


def bias() -> EpilogueOp:
    """y + b[channel] (a kernel argument with one value per output column/channel)."""
    return EpilogueOp("bias")


def residual() -> EpilogueOp:
    """y + r (a kernel argument of the output's shape)."""
    return EpilogueOp("residual")


def product() -> EpilogueOp:
    """y · r (a kernel argument of the output's shape)."""
    return EpilogueOp("product")


def scale() -> EpilogueOp:
    """y · s[channel] (a kernel argument with one value per output column/channel)."""
    return EpilogueOp("scale")


def relu() -> EpilogueOp:
    return EpilogueOp("relu")


def tanh() -> EpilogueOp:
    return EpilogueOp("tanh")


def softplus() -> EpilogueOp:
    return EpilogueOp("softplus")


def silu() -> EpilogueOp:
    return EpilogueOp("silu")


def mish() -> EpilogueOp:
    return EpilogueOp("mish")


def hard_sigmoid(alpha: float = 0.2, beta: float = 0.5) -> EpilogueOp:
    return EpilogueOp("hard_sigmoid", alpha=float(alpha), beta=float(beta))


def hard_swish() -> EpilogueOp:
    return EpilogueOp("hard_swish")


def clip(low: float, high: float) -> EpilogueOp:
    return EpilogueOp("clip", low=float(low), high=float(high))


def leaky_relu(alpha: float = 0.01) -> EpilogueOp:
    return EpilogueOp("leaky_relu", alpha=float(alpha))


def sigmoid() -> EpilogueOp:
    return EpilogueOp("sigmoid")


def operand_names(epilogue: Epilogue) -> list[tuple[int, str, Operand]]:
    """(op position, kernel argument name, operand shape) of the ops that read a tensor;
    names are the op's kind and position, e.g. ``bias0``, ``residual2``."""
    return [(i, f"{op.kind}{i}", op.operand) for i, op in enumerate(epilogue) if op.operand]


def vector_ops(epilogue: Epilogue) -> int:
    """Vector instructions the epilogue costs per output vector."""
    return sum(VECTOR_OPS[op.kind] for op in epilogue)


def describe(epilogue: Epilogue) -> str:
    """'bias+relu', 'clip(0,6)', or 'none'."""
    parts = []
    for op in epilogue:
        extra = {"clip": f"({op.low:g},{op.high:g})", "leaky_relu": f"({op.alpha:g})",
                 "hard_sigmoid": f"({op.alpha:g},{op.beta:g})"}.get(op.kind, "")  # fmt: skip
        parts.append(op.kind + extra)
    return "+".join(parts) or "none"


def apply(epilogue: Epilogue, value: ir.Value, operand: Callable[[int], ir.Value]) -> ir.Value:
    """Emit the epilogue on `value` (a vector or a scalar f32); `operand(i)` loads op i's
    tensor at the current output position, shaped like `value`."""
    for i, op in enumerate(epilogue):
        if op.kind in ("scale", "product"):
            value = arith.mulf(value, operand(i))
        elif op.kind == "difference":
            value = arith.subf(value, operand(i))
        elif op.kind == "quotient":
            value = arith.divf(value, operand(i))
        elif op.kind == "reverse_difference":
            value = arith.subf(operand(i), value)
        elif op.kind == "reverse_quotient":
            value = arith.divf(operand(i), value)
        elif op.operand:
            value = arith.addf(value, operand(i))
        elif op.kind == "relu":
            value = maximum(_const(value, 0.0), value)
        elif op.kind == "clip":
            value = _clamp(value, op.low, op.high)
        elif op.kind == "leaky_relu":
            negative = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0))
            value = arith.select(negative, arith.mulf(value, _const(value, op.alpha)), value)
        elif op.kind == "sigmoid":
            value = _sigmoid(value)
        elif op.kind == "silu":
            value = arith.mulf(value, _sigmoid(value))
        elif op.kind == "tanh":  # 2·sigmoid(2y) − 1
            value = arith.subf(arith.mulf(_const(value, 2.0), _sigmoid(arith.addf(value, value))), _const(value, 1.0))
        elif op.kind == "softplus":  # max(y, 0) + log(1 + exp(−|y|)): no overflow either way
            tail = log(arith.addf(_const(value, 1.0), exp(arith.negf(math.absf(value)))))
            value = arith.addf(maximum(_const(value, 0.0), value), tail)
        elif op.kind == "mish":  # y·n(n+2)/(n(n+2)+2), n = e^y; the ratio is 1 in f32 beyond y = 20
            n = exp(minimum(_const(value, MISH_SATURATION), value))
            top = arith.mulf(n, arith.addf(n, _const(value, 2.0)))
            value = arith.mulf(value, arith.divf(top, arith.addf(top, _const(value, 2.0))))
        elif op.kind == "hard_sigmoid":
            value = _clamp(arith.addf(arith.mulf(value, _const(value, op.alpha)), _const(value, op.beta)), 0.0, 1.0)
        else:  # hard_swish
            gate = _clamp(arith.addf(arith.mulf(value, _const(value, 1 / 6)), _const(value, 0.5)), 0.0, 1.0)
            value = arith.mulf(value, gate)
    return value


MISH_SATURATION = 20.0
"""Beyond y = 20, n(n+2)/(n(n+2)+2) rounds to 1 in f32 (2/e^40 ≈ 1e-17); clamping there
keeps n² finite."""


def _clamp(value: ir.Value, low: float, high: float) -> ir.Value:
    return minimum(_const(value, high), maximum(_const(value, low), value))


def _sigmoid(value: ir.Value) -> ir.Value:
    one = _const(value, 1.0)
    return arith.divf(one, arith.addf(one, exp(arith.negf(value))))


EXP_RANGE = 88.3762626647949
"""|x| beyond which expf over/underflows f32; inputs are clamped there."""

EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                  1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
"""Cephes expf: exp(r) ≈ 1 + r + r²·P(r) on |r| <= ln2/2, within 2 ulp of expf."""


def exp(x: ir.Value) -> ir.Value:
    """e^x on a vector or scalar f32 without a library call (LLVM turns math.exp on a
    vector into one expf call per lane): x = n·ln2 + r, e^r by the polynomial, 2^n
    assembled in the exponent bits."""
    x = minimum(_const(x, EXP_RANGE), maximum(_const(x, -EXP_RANGE), x))
    n = math.floor(math.fma(x, _const(x, 1.44269504088896341), _const(x, 0.5)))
    r = math.fma(n, _const(x, -0.693359375), x)  # ln2 split in two parts so
    r = math.fma(n, _const(x, 2.12194440e-4), r)  # n·ln2 rounds exactly
    p = _horner(r, EXP_POLYNOMIAL)
    y = arith.addf(math.fma(p, arith.mulf(r, r), r), _const(x, 1.0))
    i32 = _like(x, ir.IntegerType.get_signless(32))
    biased = arith.addi(arith.fptosi(i32, n), _int_const(i32, 127))
    scale = arith.bitcast(x.type, arith.shli(biased, _int_const(i32, 23)))
    return arith.mulf(y, scale)


LOG_POLYNOMIAL = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
                  -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)  # fmt: skip
"""Cephes logf: log(1+m) ≈ m − m²/2 + m³·P(m) on √½−1 <= m < √2−1, within 2 ulp of logf."""


def log(x: ir.Value) -> ir.Value:
    """The natural log of a positive normal vector or scalar f32 without a library call:
    x = 2^e · (1+m) with 1+m in [√½, √2), log(1+m) by the polynomial, plus e·ln2."""
    i32 = _like(x, ir.IntegerType.get_signless(32))
    bits = arith.bitcast(i32, x)
    e = arith.subi(arith.shrui(bits, _int_const(i32, 23)), _int_const(i32, 126))
    mantissa = arith.bitcast(x.type, arith.ori(arith.andi(bits, _int_const(i32, 0x807FFFFF)),
                                               _int_const(i32, 0x3F000000)))  # in [0.5, 1)  # fmt: skip
    small = arith.cmpf(arith.CmpFPredicate.OLT, mantissa, _const(x, 0.707106781186547524))
    exponent = arith.sitofp(x.type, e)
    exponent = arith.select(small, arith.subf(exponent, _const(x, 1.0)), exponent)
    m = arith.subf(arith.select(small, arith.addf(mantissa, mantissa), mantissa), _const(x, 1.0))
    z = arith.mulf(m, m)
    y = arith.mulf(arith.mulf(_horner(m, LOG_POLYNOMIAL), m), z)
    y = math.fma(exponent, _const(x, -2.12194440e-4), y)
    y = math.fma(z, _const(x, -0.5), y)
    return math.fma(exponent, _const(x, 0.693359375), arith.addf(m, y))


def _horner(x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
    """The polynomial with `coefficients` (highest power first) at x, one fused
    multiply-add per coefficient: MLIR's mulf/addf pairs are not contracted into FMAs,
    and an unfused pair costs two vector ops."""
    p = _const(x, coefficients[0])
    for c in coefficients[1:]:
        p = math.fma(p, x, _const(x, c))
    return p


def _like(value: ir.Value, element: ir.Type) -> ir.Type:
    """The type of `value` with another element type (a vector keeps its shape)."""
    if isinstance(value.type, ir.VectorType):
        t = ir.VectorType(value.type)
        return ir.VectorType.get(t.shape, element, scalable=t.scalable_dims)
    return element


def _const(like: ir.Value, number: float) -> ir.Value:
    """An f32 constant shaped like `like` (splat for vectors)."""
    scalar = arith.constant(ir.F32Type.get(), number)
    return vector.broadcast(like.type, scalar) if isinstance(like.type, ir.VectorType) else scalar


def _int_const(kind: ir.Type, number: int) -> ir.Value:
    i32 = ir.IntegerType.get_signless(32)
    scalar = arith.constant(i32, number - (1 << 32) if number >= 1 << 31 else number)  # the same bits
    return vector.broadcast(kind, scalar) if isinstance(kind, ir.VectorType) else scalar


def reference(epilogue: Epilogue, y: np.ndarray, operands: Sequence[np.ndarray | None],
              channel_axis: int = -1) -> np.ndarray:  # fmt: skip
    """The numpy meaning of `epilogue` on output `y`; operands[i] is op i's tensor (None
    for ops without one); a channel operand is broadcast along `channel_axis`."""
    y = y.astype(np.float64)
    for op, x in zip(epilogue, operands, strict=True):
        if op.kind in ("bias", "scale"):
            shape = [1] * y.ndim
            shape[channel_axis] = -1
            channel = np.asarray(x, np.float64).reshape(shape)
            y = y + channel if op.kind == "bias" else y * channel
        elif op.kind == "residual":
            y = y + x
        elif op.kind == "product":
            y = y * x
        elif op.kind == "difference":
            y = y - x
        elif op.kind == "quotient":
            y = y / x
        elif op.kind == "reverse_difference":
            y = x - y
        elif op.kind == "reverse_quotient":
            y = x / y
        elif op.kind == "relu":
            y = np.maximum(y, 0)
        elif op.kind == "clip":
            y = np.clip(y, op.low, op.high)
        elif op.kind == "leaky_relu":
            y = np.where(y >= 0, y, op.alpha * y)
        elif op.kind == "sigmoid":
            y = 1 / (1 + np.exp(-y))
        elif op.kind == "silu":
            y = y / (1 + np.exp(-y))
        elif op.kind == "tanh":
            y = np.tanh(y)
        elif op.kind == "softplus":
            y = np.logaddexp(0, y)
        elif op.kind == "mish":
            y = y * np.tanh(np.logaddexp(0, y))
        elif op.kind == "hard_sigmoid":
            y = np.clip(op.alpha * y + op.beta, 0, 1)
        else:
            y = y * np.clip(y / 6 + 0.5, 0, 1)
    return y
