"""Epilogues: elementwise ops applied to each output value of an anchor kernel (matmul
now, convolution and pooling later) while it is still in a register, before it is
stored — so that an anchor and the elementwise ops after it are one kernel.

An epilogue is a tuple of `EpilogueOp`, applied in order. Some ops read a second
tensor (their operand), which becomes a kernel argument:

- ``bias``      y + b[channel]            operand: one value per output column/channel
- ``residual``  y + r[same position]      operand: a tensor of the output's shape
- ``relu``      max(y, 0)
- ``clip``      min(max(y, low), high)    (Relu6 is clip(0, 6))
- ``leaky_relu``  y if y >= 0 else alpha·y
- ``sigmoid``   1 / (1 + exp(-y))         exp by a degree-6 polynomial (below)

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
from kernels.mlir import arith, ir, math, vector

EpilogueKind = Literal["bias", "residual", "relu", "clip", "leaky_relu", "sigmoid"]
Operand = Literal["channel", "output"]

OPERANDS: dict[str, Operand] = {"bias": "channel", "residual": "output"}
"""Ops that read a second tensor, and its shape: per channel, or the output's."""

VECTOR_OPS: dict[str, int] = {
    "bias": 1, "residual": 1, "relu": 1, "clip": 2, "leaky_relu": 3, "sigmoid": 20,
}  # fmt: skip
"""Vector instructions one op emits per output vector (loads of operands not counted):
what the models charge for it. Sigmoid: exp's clamp, range reduction, degree-6
polynomial and exponent assembly (17), negation, add, divide."""


@dataclass(frozen=True)
class EpilogueOp:
    """One elementwise op of an epilogue; `low`/`high` for clip, `alpha` for leaky_relu."""

    kind: EpilogueKind
    low: float = 0.0
    high: float = 0.0
    alpha: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in VECTOR_OPS:
            raise AutoconfigError(f"unknown epilogue op {self.kind!r}: {', '.join(VECTOR_OPS)}")
        if self.kind == "clip" and not self.low <= self.high:
            raise AutoconfigError(f"clip needs low <= high, got low={self.low} high={self.high}")

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


def relu() -> EpilogueOp:
    return EpilogueOp("relu")


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
        extra = {"clip": f"({op.low:g},{op.high:g})", "leaky_relu": f"({op.alpha:g})"}.get(op.kind, "")
        parts.append(op.kind + extra)
    return "+".join(parts) or "none"


def apply(epilogue: Epilogue, value: ir.Value, operand: Callable[[int], ir.Value]) -> ir.Value:
    """Emit the epilogue on `value` (a vector or a scalar f32); `operand(i)` loads op i's
    tensor at the current output position, shaped like `value`."""
    for i, op in enumerate(epilogue):
        if op.operand:
            value = arith.addf(value, operand(i))
        elif op.kind == "relu":
            value = arith.maximumf(value, _const(value, 0.0))
        elif op.kind == "clip":
            value = arith.minimumf(arith.maximumf(value, _const(value, op.low)), _const(value, op.high))
        elif op.kind == "leaky_relu":
            negative = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0))
            value = arith.select(negative, arith.mulf(value, _const(value, op.alpha)), value)
        else:  # sigmoid
            one = _const(value, 1.0)
            value = arith.divf(one, arith.addf(one, exp(arith.negf(value))))
    return value


EXP_RANGE = 88.3762626647949
"""|x| beyond which expf over/underflows f32; inputs are clamped there."""

EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                  1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
"""Cephes expf: exp(r) ≈ 1 + r + r²·P(r) on |r| <= ln2/2, within 2 ulp of expf."""


def exp(x: ir.Value) -> ir.Value:
    """e^x on a vector or scalar f32 without a library call (LLVM turns math.exp on a
    vector into one expf call per lane): x = n·ln2 + r, e^r by the polynomial, 2^n
    assembled in the exponent bits."""
    x = arith.minimumf(arith.maximumf(x, _const(x, -EXP_RANGE)), _const(x, EXP_RANGE))
    n = math.floor(arith.addf(arith.mulf(x, _const(x, 1.44269504088896341)), _const(x, 0.5)))
    r = arith.subf(x, arith.mulf(n, _const(x, 0.693359375)))  # ln2 split in two parts so
    r = arith.subf(r, arith.mulf(n, _const(x, -2.12194440e-4)))  # n·ln2 rounds exactly
    p = _const(x, EXP_POLYNOMIAL[0])
    for c in EXP_POLYNOMIAL[1:]:
        p = arith.addf(arith.mulf(p, r), _const(x, c))
    y = arith.addf(arith.addf(arith.mulf(p, arith.mulf(r, r)), r), _const(x, 1.0))
    i32 = _like(x, ir.IntegerType.get_signless(32))
    biased = arith.addi(arith.fptosi(i32, n), _int_const(i32, 127))
    scale = arith.bitcast(x.type, arith.shli(biased, _int_const(i32, 23)))
    return arith.mulf(y, scale)


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
    scalar = arith.constant(i32, number)
    return vector.broadcast(kind, scalar) if isinstance(kind, ir.VectorType) else scalar


def reference(epilogue: Epilogue, y: np.ndarray, operands: Sequence[np.ndarray | None],
              channel_axis: int = -1) -> np.ndarray:  # fmt: skip
    """The numpy meaning of `epilogue` on output `y`; operands[i] is op i's tensor (None
    for ops without one); a channel operand is broadcast along `channel_axis`."""
    y = y.astype(np.float64)
    for op, x in zip(epilogue, operands, strict=True):
        if op.kind == "bias":
            shape = [1] * y.ndim
            shape[channel_axis] = -1
            y = y + np.asarray(x, np.float64).reshape(shape)
        elif op.kind == "residual":
            y = y + x
        elif op.kind == "relu":
            y = np.maximum(y, 0)
        elif op.kind == "clip":
            y = np.clip(y, op.low, op.high)
        elif op.kind == "leaky_relu":
            y = np.where(y >= 0, y, op.alpha * y)
        else:
            y = 1 / (1 + np.exp(-y))
    return y
