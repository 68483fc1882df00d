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
- ``affine``    alpha·y + beta            (a recurrent layer's Affine activation)
- ``scaled_tanh``   alpha·tanh(beta·y)    (its ScaledTanh)
- ``sin``, ``cos``, ``tan``  reduced by π/2 in f64, then the Cephes polynomials
- ``asin``, ``acos``, ``atan``  through atan's Cephes polynomial
- ``sinh``, ``cosh``, ``asinh``, ``acosh``, ``atanh``  through exp and log (a series for small sinh)
- ``erf``       the error function        (1 − erfc: exp(−z²) times a polynomial; a series near 0)
- ``gelu``      y · (1 + erf(y/√2)) / 2   (erf by a rational function: a few ulps of y)
- ``gelu_tanh`` y · (1 + tanh(√(2/π)·(y + 0.044715·y³))) / 2
- ``sqrt``      √y
- ``power``     y^alpha as e^(alpha·ln|y|) with pow's signs (NaN for y < 0 unless alpha is an integer)
- ``identity``  y (a cast between values held alike)
- ``isinf``     1 where y is −inf (alpha ≠ 0) or +inf (beta ≠ 0), else 0
- ``nonzero``, ``is_zero``, ``isnan``   1 where y ≠ 0, y = 0, y is NaN, else 0 (bools
  are held as floats: 1 true, 0 false)
- ``replace_nan``  alpha where y is NaN, else y
- ``choose``    alpha where y is true, else beta
- ``replace_where``  alpha where r is true, else y    operand: a tensor of the output's shape
- ``keep_where``     y where r is true, else alpha    operand: likewise
- ``then_else``      r where y is true, else alpha    operand: likewise
- ``else_then``      alpha where y is true, else r    operand: likewise

Each kind is declared once, in `KINDS`: its operand, its cost in vector instructions,
its vector code and its numpy meaning side by side. `apply` emits the ops on a value
of any shape — a vector of the output row, or one scalar (a matrix-times-vector
result) — given a callback that loads an operand at the current output position in
the same shape. `reference` is the numpy meaning, which the tests hold the generated
code to and the graph interpreter runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from math import erf as scalar_erf
from math import erfc as scalar_erfc

import numpy as np

from kernels.errors import KernelError
from kernels.loops import maximum, minimum
from kernels.mlir import arith, ir, math, vector

Operand = Literal["channel", "output"]


@dataclass(frozen=True)
class EpilogueOp:
    """One elementwise op of an epilogue; `low`/`high` for clip, `alpha` for leaky_relu,
    hard_sigmoid and the selections, `beta` for hard_sigmoid and choose."""

    kind: str  # a key of KINDS
    low: float = 0.0
    high: float = 0.0
    alpha: float = 0.0  # leaky_relu's slope, hard_sigmoid's alpha, a selection's value
    beta: float = 0.0  # hard_sigmoid's beta, choose's value where false

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise KernelError(f"unknown epilogue op {self.kind!r}: {', '.join(KINDS)}")

    @property
    def operand(self) -> Operand | None:
        """The shape of the tensor this op reads, if it reads one."""
        return KINDS[self.kind].operand


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
    return sum(KINDS[op.kind].vector_ops for op in epilogue)


def describe(epilogue: Epilogue) -> str:
    """'bias+relu', 'clip(0,6)', or 'none'."""
    parts = []
    for op in epilogue:
        shown = KINDS[op.kind].shown
        parts.append(op.kind + (f"({','.join(f'{getattr(op, name):g}' for name in shown)})" if shown else ""))
    return "+".join(parts) or "none"


def apply(epilogue: Epilogue, value: ir.Value, operand: Callable[[int], ir.Value]) -> ir.Value:
    """Emit the epilogue on `value` (a vector or a scalar f32); `operand(i)` loads op i's
    tensor at the current output position, shaped like `value`."""
    for i, op in enumerate(epilogue):
        value = KINDS[op.kind].emit(op, value, operand(i) if op.operand else None)
    return value


def reference(epilogue: Epilogue, y: np.ndarray, operands: Sequence[np.ndarray | None],
              channel_axis: int = -1) -> np.ndarray:  # fmt: skip
    """The numpy meaning of `epilogue` on output `y` (in float64); operands[i] is op i's
    tensor (None for ops without one); a channel operand is broadcast along
    `channel_axis`."""
    y = y.astype(np.float64)
    for op, x in zip(epilogue, operands, strict=True):
        if op.operand == "channel":
            shape = [1] * y.ndim
            shape[channel_axis] = -1
            x = np.asarray(x, np.float64).reshape(shape)
        y = KINDS[op.kind].reference(op, y, x)
    return y


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

LN2 = 0.6931471805599453

SMALLEST_NORMAL = 1.1754943508222875e-38
"""The smallest normal f32: `log` reads its argument's exponent bits, which a subnormal
lacks."""

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


def _estrin(x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
    """`_horner`'s polynomial by Estrin's scheme: pairs c·x + d, then pairs of those by
    x², x⁴, ...: a chain of about log2(n) FMAs instead of n, for a polynomial whose
    latency, not its issue, bounds a kernel (a few more multiplies)."""
    terms = [_const(x, c) for c in coefficients[::-1]]  # lowest power first
    power = x
    while len(terms) > 1:
        terms = [math.fma(terms[i + 1], power, terms[i]) if i + 1 < len(terms) else terms[i]
                 for i in range(0, len(terms), 2)]  # fmt: skip
        power = arith.mulf(power, power) if len(terms) > 1 else power
    return terms[0]


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


# ---------------------------------------------------------------- the kinds


def _leaky_relu(op: EpilogueOp, value: ir.Value) -> ir.Value:
    negative = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0))
    return arith.select(negative, arith.mulf(value, _const(value, op.alpha)), value)


def _tanh(value: ir.Value) -> ir.Value:
    """2·sigmoid(2y) − 1."""
    return arith.subf(arith.mulf(_const(value, 2.0), _sigmoid(arith.addf(value, value))), _const(value, 1.0))


def _softplus(value: ir.Value) -> ir.Value:
    """max(y, 0) + log(1 + exp(−|y|)): no overflow either way."""
    tail = log(arith.addf(_const(value, 1.0), exp(arith.negf(math.absf(value)))))
    return arith.addf(maximum(_const(value, 0.0), value), tail)


def _mish(value: ir.Value) -> ir.Value:
    """y·n(n+2)/(n(n+2)+2), n = e^y; the ratio is 1 in f32 beyond MISH_SATURATION."""
    n = exp(minimum(_const(value, MISH_SATURATION), value))
    top = arith.mulf(n, arith.addf(n, _const(value, 2.0)))
    return arith.mulf(value, arith.divf(top, arith.addf(top, _const(value, 2.0))))


def _hard_sigmoid(value: ir.Value, alpha: float, beta: float) -> ir.Value:
    return _clamp(arith.addf(arith.mulf(value, _const(value, alpha)), _const(value, beta)), 0.0, 1.0)


ERF_SERIES_BELOW = 0.5
"""|x| under which erf is taken from its series: 1 − erfc would lose the relative
precision of a small erf."""

ERF_SERIES = (1.20553330e-04, -8.54832702e-04, 5.22397763e-03, -2.68661706e-02, 1.12837917e-01,
              -3.76126389e-01, 1.12837917)  # fmt: skip
"""Taylor coefficients of erf(x)/x in x² (2/√π·(−1)ⁿ/(n!(2n+1)), highest power first):
within 2e-7 of erf relative on |x| < ERF_SERIES_BELOW."""

ERFC_POLYNOMIAL = (-0.0592124807, 0.285243044, -0.488519474, 0.279508498, -0.0275759071, 0.203073333,
                   0.243009235, 0.282388002, 0.282085703)  # fmt: skip
"""erfc(z) ≈ exp(−z²)·t·Q(t), t = 1/(1 + z/2), z >= 0: Q fitted to exp(z²)·erfc(z)/t
(relative least squares reweighted toward the largest error, z in [0, 10.5], where
exp(−z²) leaves f32's range): within 5e-8 of erfc relative, 4.1e-7 evaluated in f32 by
Estrin's scheme."""


def _erf(value: ir.Value) -> ir.Value:
    """erf(|x|) by its series below ERF_SERIES_BELOW (its relative precision), else
    1 − erfc, erfc's exp(−z²) and polynomial in t (a divide, then Estrin's scheme) two
    chains side by side; the sign of x."""
    z = math.absf(value)
    t = arith.divf(_const(value, 1.0), math.fma(z, _const(value, 0.5), _const(value, 1.0)))
    erfc = arith.mulf(exp(arith.mulf(arith.negf(z), z)), arith.mulf(t, _estrin(t, ERFC_POLYNOMIAL)))
    negative = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0))
    series = arith.mulf(z, _horner(arith.mulf(z, z), ERF_SERIES))
    small = arith.cmpf(arith.CmpFPredicate.OLT, z, _const(value, ERF_SERIES_BELOW))
    size = arith.select(small, series, arith.subf(_const(value, 1.0), erfc))
    return arith.select(negative, arith.negf(size), size)


GELU_ERF_SATURATES = 3.92
"""|z| from which erf(z) rounds to ±1 in f32 (1 − erf(3.92) = 3.0e-8, under half an ulp)."""

GELU_ERF_NUMERATOR = (2.0347263216535794e-06, 0.000287479575490579, 0.0038683500606566668, 0.05306055024266243,
                      0.19276462495326996, 1.128378987312317)  # fmt: skip
GELU_ERF_DENOMINATOR = (3.8070560549385846e-05, 0.0011881199898198247, 0.015172340907156467, 0.11508484929800034,
                        0.5041648745536804, 1.0)  # fmt: skip
"""erf(z) ≈ z·P(z²)/Q(z²) on |z| < GELU_ERF_SATURATES (highest power first), fitted to
erf's absolute error by iteratively reweighted least squares: within 6e-8 with these
f32 coefficients, 4e-7 evaluated in f32 — about an ulp of 1, as GELU's 1 + erf needs."""


def _gelu(value: ir.Value) -> ir.Value:
    """h + h·erf(y/√2), h = y/2, erf by a rational function (a divide and eleven FMAs,
    where erfc's exponential costs twice that): as onnxruntime's, its error is a few
    ulps of h, not relative in the negative tail (1 + erf cancels there)."""
    z = arith.mulf(value, _const(value, 0.7071067811865476))
    s = arith.mulf(z, z)
    ratio = arith.divf(arith.mulf(z, _horner(s, GELU_ERF_NUMERATOR)), _horner(s, GELU_ERF_DENOMINATOR))
    saturated = arith.cmpf(arith.CmpFPredicate.OGE, math.absf(z), _const(value, GELU_ERF_SATURATES))
    erf = arith.select(saturated, math.copysign(_const(value, 1.0), z), ratio)
    half = arith.mulf(value, _const(value, 0.5))
    return math.fma(half, erf, half)


def _gelu_tanh(value: ir.Value) -> ir.Value:
    """y·(1 + tanh(u))/2 = y·sigmoid(2u), u = √(2/π)·(y + 0.044715·y³): one exponential
    and a divide, with no 1 + tanh to cancel in the negative tail."""
    cube = arith.mulf(arith.mulf(value, value), value)
    twice_inner = arith.mulf(math.fma(cube, _const(value, 0.044715), value), _const(value, 2 * 0.7978845608028654))
    return arith.mulf(value, _sigmoid(twice_inner))


def _exp_op(value: ir.Value) -> ir.Value:
    """ONNX Exp over all of f32: `exp` clamps its argument to ±EXP_RANGE (its 2ⁿ must
    stay a normal float), so e^y near the top of the range is e^(y − ln2)·2 (beyond it,
    +inf as the product overflows), and 0 below −EXP_RANGE (true values there are
    smaller than 4e-39)."""
    high = arith.cmpf(arith.CmpFPredicate.OGT, value, _const(value, EXP_RANGE - 1.0))
    shifted = exp(arith.select(high, arith.subf(value, _const(value, LN2)), value))
    y = arith.select(high, arith.mulf(shifted, _const(value, 2.0)), shifted)
    return arith.select(arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, -EXP_RANGE)), _const(value, 0.0), y)


def _log_op(value: ir.Value) -> ir.Value:
    """ONNX Log over all of f32: `log` of a positive normal float, a subnormal scaled by
    2²³ first; 0 gives −inf, +inf itself, a negative or NaN argument NaN."""
    subnormal = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, SMALLEST_NORMAL))
    y = log(arith.select(subnormal, arith.mulf(value, _const(value, 2.0**23)), value))
    y = arith.select(subnormal, arith.subf(y, _const(value, 23 * LN2)), y)
    y = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, value, _const(value, np.inf)), value, y)
    y = arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, value, _const(value, 0.0)), _const(value, -np.inf), y)
    return arith.select(arith.cmpf(arith.CmpFPredicate.ULT, value, _const(value, 0.0)), _const(value, np.nan), y)


def _elu(op: EpilogueOp, value: ir.Value) -> ir.Value:
    """y above 0, else alpha·(e^y − 1), all times `beta` (Selu's gamma; 1 for Elu)."""
    positive = arith.cmpf(arith.CmpFPredicate.OGT, value, _const(value, 0.0))
    below = arith.mulf(arith.subf(exp(value), _const(value, 1.0)), _const(value, op.alpha))
    return arith.mulf(arith.select(positive, value, below), _const(value, op.beta))


def _power(op: EpilogueOp, value: ir.Value) -> ir.Value:
    """|y|^alpha as e^(alpha·ln|y|) (the ONNX Exp and Log above: zeros, infinities and
    subnormals as pow gives them), then the sign: an odd integer power keeps y's, an
    even one none, any other power of a finite negative y is NaN; y^0 is 1, NaN too."""
    if op.alpha == 0:
        return _const(value, 1.0)
    magnitude = _exp_op(arith.mulf(_const(value, float(op.alpha)), _log_op(math.absf(value))))
    if op.alpha == int(op.alpha):
        return math.copysign(magnitude, value) if int(op.alpha) % 2 else magnitude
    negative = arith.andi(arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0)),
                          arith.cmpf(arith.CmpFPredicate.ONE, value, _const(value, -np.inf)))  # fmt: skip
    return arith.select(negative, _const(value, np.nan), magnitude)


def _sign(value: ir.Value) -> ir.Value:
    """1 above 0, −1 below, the value itself otherwise (±0, NaN)."""
    above = arith.cmpf(arith.CmpFPredicate.OGT, value, _const(value, 0.0))
    below = arith.cmpf(arith.CmpFPredicate.OLT, value, _const(value, 0.0))
    return arith.select(above, _const(value, 1.0), arith.select(below, _const(value, -1.0), value))


PI_OVER_2 = (1.5707963267948966, 6.123233995736766e-17)
"""π/2 as the f64 nearest it and the f64 nearest the rest: x − n·π/2 by two FMAs keeps
f32's precision in the reduced argument while n is exact, |x| < 2⁵² (4.5e15; beyond,
where f32 values are multiples of 2²⁹, n itself is rounded and sin, cos and tan are
not computed: sin and cos are held to [−1, 1])."""

SIN_POLYNOMIAL = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
"""Cephes sinf: sin r ≈ r + r³·P(r²) on |r| <= π/4."""

COS_POLYNOMIAL = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
"""Cephes cosf: cos r ≈ 1 − r²/2 + r⁴·P(r²) on |r| <= π/4."""


def _const64(like: ir.Value, number: float) -> ir.Value:
    scalar = arith.constant(ir.F64Type.get(), number)
    return vector.broadcast(like.type, scalar) if isinstance(like.type, ir.VectorType) else scalar


def _quadrant(x: ir.Value, shift: int) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(r, odd, negative) with x + shift·π/2 = q·π/2 + r, |r| <= π/4, odd and negative
    where q mod 4 is odd and is 2 or 3: the reduction in f64, where x is exact."""
    wide = arith.extf(_like(x, ir.F64Type.get()), x)
    n = math.floor(math.fma(wide, _const64(wide, 2 / np.pi), _const64(wide, 0.5)))
    r = math.fma(n, _const64(wide, -PI_OVER_2[1]), math.fma(n, _const64(wide, -PI_OVER_2[0]), wide))
    for step in (1.0, -1.0):  # n one quadrant off where x·2/π rounded across a half
        beyond = arith.cmpf(arith.CmpFPredicate.OGT, arith.mulf(r, _const64(wide, step)), _const64(wide, np.pi / 4))
        n = arith.select(beyond, arith.addf(n, _const64(wide, step)), n)
        r = arith.select(beyond, arith.subf(r, _const64(wide, step * PI_OVER_2[0])), r)
    q = arith.addf(n, _const64(wide, float(shift)))
    half = math.floor(arith.mulf(q, _const64(wide, 0.5)))
    odd = arith.cmpf(arith.CmpFPredicate.ONE, q, arith.addf(half, half))
    quarter = math.floor(arith.mulf(q, _const64(wide, 0.25)))
    negative = arith.cmpf(arith.CmpFPredicate.OGE, arith.subf(q, arith.mulf(quarter, _const64(wide, 4.0))),
                          _const64(wide, 2.0))  # fmt: skip
    return arith.truncf(x.type, r), odd, negative


def _sin_and_cos(r: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(sin r, cos r) for |r| <= π/4 by the Cephes polynomials."""
    z = arith.mulf(r, r)
    sin = math.fma(arith.mulf(r, z), _horner(z, SIN_POLYNOMIAL), r)
    cos = math.fma(arith.mulf(z, z), _horner(z, COS_POLYNOMIAL), math.fma(z, _const(r, -0.5), _const(r, 1.0)))
    return sin, cos


def _sine(value: ir.Value, shift: int) -> ir.Value:
    """sin(y + shift·π/2): sin for shift 0, cos for 1; held to [−1, 1] where |y| >= 2⁵²
    leaves the quadrant rounded."""
    r, odd, negative = _quadrant(value, shift)
    sin, cos = _sin_and_cos(r)
    y = arith.select(odd, cos, sin)
    return _clamp(arith.select(negative, arith.negf(y), y), -1.0, 1.0)


def _tan(value: ir.Value) -> ir.Value:
    """tan r in even quadrants, −cot r = −cos r / sin r in odd ones."""
    r, odd, _ = _quadrant(value, 0)
    sin, cos = _sin_and_cos(r)
    return arith.select(odd, arith.divf(arith.negf(cos), sin), arith.divf(sin, cos))


ATAN_POLYNOMIAL = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)
"""Cephes atanf: atan t ≈ t + t³·P(t²) on |t| <= tan(π/8)."""

TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950
"""tan(3π/8) and tan(π/8): where Cephes atanf's argument reductions begin."""


def _atan(value: ir.Value) -> ir.Value:
    """Cephes atanf: |y| above tan(3π/8) as π/2 + atan(−1/|y|), above tan(π/8) as
    π/4 + atan((|y| − 1)/(|y| + 1)), the polynomial on what remains; the sign restored."""
    a = math.absf(value)
    big = arith.cmpf(arith.CmpFPredicate.OGT, a, _const(a, TAN_3PI_8))
    mid = arith.cmpf(arith.CmpFPredicate.OGT, a, _const(a, TAN_PI_8))
    top = arith.select(big, _const(a, -1.0), arith.select(mid, arith.subf(a, _const(a, 1.0)), a))
    bottom = arith.select(big, a, arith.select(mid, arith.addf(a, _const(a, 1.0)), _const(a, 1.0)))
    t = arith.divf(top, bottom)
    z = arith.mulf(t, t)
    y = math.fma(arith.mulf(t, z), _horner(z, ATAN_POLYNOMIAL), t)
    y = arith.addf(y, arith.select(big, _const(a, np.pi / 2), arith.select(mid, _const(a, np.pi / 4), _const(a, 0.0))))
    return math.copysign(y, value)


def _asin(value: ir.Value) -> ir.Value:
    """atan(y / √((1 − y)(1 + y))): ±π/2 at ±1 (a divide by zero), NaN beyond."""
    one = _const(value, 1.0)
    return _atan(arith.divf(value, math.sqrt(arith.mulf(arith.subf(one, value), arith.addf(one, value)))))


def _acos(value: ir.Value) -> ir.Value:
    """2·atan(√((1 − y)/(1 + y))): no cancellation near 1, π at −1, NaN beyond ±1."""
    one = _const(value, 1.0)
    ratio = math.sqrt(arith.divf(arith.subf(one, value), arith.addf(one, value)))
    return arith.mulf(_const(value, 2.0), _atan(ratio))


SINH_SERIES = (1 / 5040, 1 / 120, 1 / 6, 1.0)
"""sinh y / y = 1 + y²/6 + y⁴/120 + y⁶/5040 + …: within 3e-9 relative on |y| < SINH_SERIES_BELOW."""

SINH_SERIES_BELOW = 0.5
"""|y| under which sinh is its series: e^y − e^−y would lose a small sinh's relative precision."""


def _half_exp(value: ir.Value) -> ir.Value:
    """e^|y| / 2, finite wherever cosh is: e^(|y| − ln2) near the top of exp's range
    (elsewhere the rounded difference would cost precision)."""
    a = math.absf(value)
    top = arith.cmpf(arith.CmpFPredicate.OGT, a, _const(a, EXP_RANGE - 1.0))
    return arith.select(top, _exp_op(arith.subf(a, _const(a, LN2))), arith.mulf(_exp_op(a), _const(a, 0.5)))


def _sinh(value: ir.Value) -> ir.Value:
    h = _half_exp(value)
    large = math.copysign(arith.subf(h, arith.divf(_const(value, 0.25), h)), value)
    series = arith.mulf(value, _horner(arith.mulf(value, value), SINH_SERIES))
    small = arith.cmpf(arith.CmpFPredicate.OLT, math.absf(value), _const(value, SINH_SERIES_BELOW))
    return arith.select(small, series, large)


def _cosh(value: ir.Value) -> ir.Value:
    h = _half_exp(value)
    return arith.addf(h, arith.divf(_const(value, 0.25), h))


def _log1p(value: ir.Value) -> ir.Value:
    """log(1 + u) to u's relative precision: log(w)·u/(w − 1), w = 1 + u rounded, whose
    rounding the ratio undoes (u itself where w is 1)."""
    w = arith.addf(_const(value, 1.0), value)
    lost = arith.subf(w, _const(value, 1.0))
    scaled = arith.mulf(_log_op(w), arith.divf(value, lost))
    exact = arith.cmpf(arith.CmpFPredicate.OEQ, lost, _const(value, 0.0))
    infinite = arith.cmpf(arith.CmpFPredicate.OEQ, w, _const(value, np.inf))
    return arith.select(exact, value, arith.select(infinite, w, scaled))


HUGE = 2.0**64
"""Beyond it asinh and acosh take log y + ln2 (their squares would overflow)."""


def _asinh(value: ir.Value) -> ir.Value:
    """sign(y)·log1p(|y| + y²/(1 + √(1 + y²)))."""
    a = math.absf(value)
    root = math.sqrt(math.fma(a, a, _const(a, 1.0)))
    near = _log1p(arith.addf(a, arith.divf(arith.mulf(a, a), arith.addf(_const(a, 1.0), root))))
    huge = arith.cmpf(arith.CmpFPredicate.OGT, a, _const(a, HUGE))
    return math.copysign(arith.select(huge, arith.addf(_log_op(a), _const(a, LN2)), near), value)


def _acosh(value: ir.Value) -> ir.Value:
    """log1p(t + √(t·(t + 2))), t = y − 1 (exact near 1); NaN below 1 (where t·(t + 2)
    is positive again past −1)."""
    t = arith.subf(value, _const(value, 1.0))
    near = _log1p(arith.addf(t, math.sqrt(arith.mulf(t, arith.addf(t, _const(value, 2.0))))))
    huge = arith.cmpf(arith.CmpFPredicate.OGT, value, _const(value, HUGE))
    below = arith.cmpf(arith.CmpFPredicate.ULT, value, _const(value, 1.0))
    return arith.select(below, _const(value, np.nan), arith.select(huge, arith.addf(_log_op(value), _const(value, LN2)), near))


def _atanh(value: ir.Value) -> ir.Value:
    """(log1p(y) − log1p(−y)) / 2: each log1p exact near ±1, where 1 − y is; ±inf at ±1,
    NaN beyond."""
    return arith.mulf(_const(value, 0.5), arith.subf(_log1p(value), _log1p(arith.negf(value))))


def _np_quiet(function: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """`function` without numpy's warnings for NaN or infinite results (the kernels give them too)."""
    def quiet(y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return function(y)
    return quiet


def _np_log(y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(y)


def _np_exp(y: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.exp(y)


def _np_divide(x: float, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return x / y


def _true(value: ir.Value) -> ir.Value:
    """Where a truth value (a bool held as a float: any non-zero is true) holds."""
    return arith.cmpf(arith.CmpFPredicate.UNE, value, _const(value, 0.0))


def _infinite(value: ir.Value, op: EpilogueOp) -> ir.Value:
    """Where y is −inf (if alpha, IsInf's detect_negative) or +inf (if beta, its detect_positive)."""
    tests = [arith.cmpf(arith.CmpFPredicate.OEQ, value, _const(value, bound))
             for bound, wanted in ((-np.inf, op.alpha), (np.inf, op.beta)) if wanted]  # fmt: skip
    if not tests:
        return arith.cmpf(arith.CmpFPredicate.FALSE, value, value)
    return tests[0] if len(tests) == 1 else arith.ori(*tests)


def _truth(condition: ir.Value, like: ir.Value) -> ir.Value:
    """1.0 where `condition` holds, else 0.0: a bool as the kernels hold it."""
    return arith.select(condition, _const(like, 1.0), _const(like, 0.0))


def _np_sqrt(y: np.ndarray) -> np.ndarray:
    """√y, NaN below zero as the vector code gives it, without numpy's warning."""
    with np.errstate(invalid="ignore"):
        return np.sqrt(y)


def _np_erf(y: np.ndarray) -> np.ndarray:
    return np.vectorize(scalar_erf, otypes=[np.float64])(y)


def _np_gelu(y: np.ndarray) -> np.ndarray:
    """y·erfc(−y/√2)/2: 1 + erf(y/√2) without its cancellation for negative y."""
    return y * np.vectorize(scalar_erfc, otypes=[np.float64])(-y / np.sqrt(2)) / 2


@dataclass(frozen=True)
class Kind:
    """One kind of epilogue op, declared once: the tensor it reads (if any), its vector
    instructions per output vector (what the models charge; operand loads not counted),
    its vector code ``emit(op, y, operand)`` and its numpy meaning
    ``reference(op, y, operand)`` in float64, and the parameters `describe` shows."""

    emit: Callable[[EpilogueOp, ir.Value, ir.Value | None], ir.Value]
    reference: Callable[[EpilogueOp, np.ndarray, np.ndarray | None], np.ndarray]
    vector_ops: int
    operand: Operand | None = None
    shown: tuple[str, ...] = ()


KINDS: dict[str, Kind] = {
    "bias": Kind(lambda op, y, r: arith.addf(y, r), lambda op, y, r: y + r, 1, "channel"),
    "scale": Kind(lambda op, y, r: arith.mulf(y, r), lambda op, y, r: y * r, 1, "channel"),
    "residual": Kind(lambda op, y, r: arith.addf(y, r), lambda op, y, r: y + r, 1, "output"),
    "product": Kind(lambda op, y, r: arith.mulf(y, r), lambda op, y, r: y * r, 1, "output"),
    "difference": Kind(lambda op, y, r: arith.subf(y, r), lambda op, y, r: y - r, 1, "output"),
    "quotient": Kind(lambda op, y, r: arith.divf(y, r), lambda op, y, r: y / r, 1, "output"),
    "reverse_difference": Kind(lambda op, y, r: arith.subf(r, y), lambda op, y, r: r - y, 1, "output"),
    "reverse_quotient": Kind(lambda op, y, r: arith.divf(r, y), lambda op, y, r: r / y, 1, "output"),
    # the larger or smaller of two (NaN from either: IEEE maximum and minimum, a few
    # instructions on x86); comparisons and the logic of two truth values, as bools held:
    # a compare (or two and a logic op) and a select
    "maximum": Kind(lambda op, y, r: arith.maximumf(y, r), lambda op, y, r: np.maximum(y, r), 4, "output"),
    "minimum": Kind(lambda op, y, r: arith.minimumf(y, r), lambda op, y, r: np.minimum(y, r), 4, "output"),
    **{kind: Kind(lambda op, y, r, p=predicate: _truth(arith.cmpf(p, y, r), y),
                  lambda op, y, r, f=function: f(y, r).astype(np.float64), 2, "output")
       for kind, predicate, function in (("equal", arith.CmpFPredicate.OEQ, np.equal),
                                         ("less", arith.CmpFPredicate.OLT, np.less),
                                         ("greater", arith.CmpFPredicate.OGT, np.greater),
                                         ("less_equal", arith.CmpFPredicate.OLE, np.less_equal),
                                         ("greater_equal", arith.CmpFPredicate.OGE, np.greater_equal))},
    "either": Kind(lambda op, y, r: _truth(arith.ori(_true(y), _true(r)), y),
                   lambda op, y, r: np.logical_or(y != 0, r != 0).astype(np.float64), 4, "output"),
    "differ": Kind(lambda op, y, r: _truth(arith.xori(_true(y), _true(r)), y),
                   lambda op, y, r: np.logical_xor(y != 0, r != 0).astype(np.float64), 4, "output"),
    "relu": Kind(lambda op, y, r: maximum(_const(y, 0.0), y), lambda op, y, r: np.maximum(y, 0), 1),
    "square": Kind(lambda op, y, r: arith.mulf(y, y), lambda op, y, r: y * y, 1),
    "clip": Kind(lambda op, y, r: _clamp(y, op.low, op.high), lambda op, y, r: np.clip(y, op.low, op.high), 2,
                 shown=("low", "high")),
    "leaky_relu": Kind(lambda op, y, r: _leaky_relu(op, y), lambda op, y, r: np.where(y >= 0, y, op.alpha * y), 3,
                       shown=("alpha",)),
    # sigmoid: exp's clamp, range reduction, degree-6 polynomial and exponent assembly
    # (17), negation, add, divide; softplus: exp (17), log's exponent split, select and
    # degree-8 polynomial (19), the rest
    "sigmoid": Kind(lambda op, y, r: _sigmoid(y), lambda op, y, r: 1 / (1 + np.exp(-y)), 20),
    "tanh": Kind(lambda op, y, r: _tanh(y), lambda op, y, r: np.tanh(y), 23),
    "softplus": Kind(lambda op, y, r: _softplus(y), lambda op, y, r: np.logaddexp(0, y), 40),
    "silu": Kind(lambda op, y, r: arith.mulf(y, _sigmoid(y)), lambda op, y, r: y / (1 + np.exp(-y)), 21),
    "mish": Kind(lambda op, y, r: _mish(y), lambda op, y, r: y * np.tanh(np.logaddexp(0, y)), 25),
    "hard_sigmoid": Kind(lambda op, y, r: _hard_sigmoid(y, op.alpha, op.beta),
                         lambda op, y, r: np.clip(op.alpha * y + op.beta, 0, 1), 3, shown=("alpha", "beta")),
    "affine": Kind(lambda op, y, r: math.fma(y, _const(y, op.alpha), _const(y, op.beta)),
                   lambda op, y, r: op.alpha * y + op.beta, 1, shown=("alpha", "beta")),
    "scaled_tanh": Kind(lambda op, y, r: arith.mulf(_const(y, op.alpha), _tanh(arith.mulf(y, _const(y, op.beta)))),
                        lambda op, y, r: op.alpha * np.tanh(op.beta * y), 25, shown=("alpha", "beta")),
    "hard_swish": Kind(lambda op, y, r: arith.mulf(y, _hard_sigmoid(y, 1 / 6, 0.5)),
                       lambda op, y, r: y * np.clip(y / 6 + 0.5, 0, 1), 5),
    # erfc of the size (36: exp 17, the polynomial in t by Estrin's scheme 11, the
    # size, t (an FMA and a divide), the negated square (2), the products by t and by
    # exp, the sign's compare); erf: that, the series and its product (7),
    # its compare, 1 − erfc, two selects and a negation (5); gelu: the scale to y/√2,
    # erfc of its size, 2 − erfc, a select, the half, the product (5); gelu_tanh: tanh
    # (23), the cube, the FMA and scale of its argument (4), 1 +, the half, the product (3)
    # sqrt: one vector square root (LLVM's intrinsic: vsqrtps, fsqrt, vfsqrt), whose
    # throughput is about an eighth of an add's
    "sqrt": Kind(lambda op, y, r: math.sqrt(y), lambda op, y, r: _np_sqrt(y), 8),
    # bools are held as floats, 1.0 true and 0.0 false: a compare and a select each;
    # a cast between values held alike is no instruction at all
    "identity": Kind(lambda op, y, r: y, lambda op, y, r: y, 0),
    "nonzero": Kind(lambda op, y, r: _truth(_true(y), y), lambda op, y, r: (y != 0).astype(np.float64), 2),
    "is_zero": Kind(lambda op, y, r: _truth(arith.cmpf(arith.CmpFPredicate.OEQ, y, _const(y, 0.0)), y),
                    lambda op, y, r: (y == 0).astype(np.float64), 2),
    "isnan": Kind(lambda op, y, r: _truth(arith.cmpf(arith.CmpFPredicate.UNO, y, y), y),
                  lambda op, y, r: np.isnan(y).astype(np.float64), 2),
    "isinf": Kind(lambda op, y, r: _truth(_infinite(y, op), y),
                  lambda op, y, r: ((op.alpha != 0) & (y == -np.inf) | (op.beta != 0) & (y == np.inf)).astype(np.float64),
                  3, shown=("alpha", "beta")),
    "replace_nan": Kind(lambda op, y, r: arith.select(arith.cmpf(arith.CmpFPredicate.UNO, y, y), _const(y, op.alpha), y),
                        lambda op, y, r: np.where(np.isnan(y), op.alpha, y), 2, shown=("alpha",)),
    "choose": Kind(lambda op, y, r: arith.select(_true(y), _const(y, op.alpha), _const(y, op.beta)),
                   lambda op, y, r: np.where(y != 0, op.alpha, op.beta), 2, shown=("alpha", "beta")),
    "replace_where": Kind(lambda op, y, r: arith.select(_true(r), _const(y, op.alpha), y),
                          lambda op, y, r: np.where(r != 0, op.alpha, y), 2, "output", shown=("alpha",)),
    "keep_where": Kind(lambda op, y, r: arith.select(_true(r), y, _const(y, op.alpha)),
                       lambda op, y, r: np.where(r != 0, y, op.alpha), 2, "output", shown=("alpha",)),
    "then_else": Kind(lambda op, y, r: arith.select(_true(y), r, _const(y, op.alpha)),
                      lambda op, y, r: np.where(y != 0, r, op.alpha), 2, "output", shown=("alpha",)),
    "else_then": Kind(lambda op, y, r: arith.select(_true(y), _const(y, op.alpha), r),
                      lambda op, y, r: np.where(y != 0, op.alpha, r), 2, "output", shown=("alpha",)),
    # exp 17 and log 20 (the polynomials, the exponent's bits), each with the compares and
    # selects that take it over all of f32 (4 and 8); elu: exp, its subtraction, the
    # scales, a compare and a select (21); a divide (reciprocal, softsign) costs about
    # what a square root does
    "exp": Kind(lambda op, y, r: _exp_op(y), lambda op, y, r: _np_exp(y), 21),
    "log": Kind(lambda op, y, r: _log_op(y), lambda op, y, r: _np_log(y), 28),
    "power": Kind(lambda op, y, r: _power(op, y), lambda op, y, r: _np_quiet(lambda v: np.power(v, op.alpha))(y),
                  55, shown=("alpha",)),  # log's 28, exp's 21, the product and the sign
    "negate": Kind(lambda op, y, r: arith.negf(y), lambda op, y, r: -y, 1),
    "abs": Kind(lambda op, y, r: math.absf(y), lambda op, y, r: np.abs(y), 1),
    "reciprocal": Kind(lambda op, y, r: arith.divf(_const(y, 1.0), y), lambda op, y, r: _np_divide(1.0, y), 8),
    "floor": Kind(lambda op, y, r: math.floor(y), lambda op, y, r: np.floor(y), 1),
    "ceil": Kind(lambda op, y, r: math.ceil(y), lambda op, y, r: np.ceil(y), 1),
    "round": Kind(lambda op, y, r: math.roundeven(y), lambda op, y, r: np.round(y), 1),
    "trunc": Kind(lambda op, y, r: math.trunc(y), lambda op, y, r: np.trunc(y), 1),
    "sign": Kind(lambda op, y, r: _sign(y), lambda op, y, r: np.sign(y), 4),
    "elu": Kind(lambda op, y, r: _elu(op, y), lambda op, y, r: op.beta * np.where(y > 0, y, op.alpha * np.expm1(y)),
                21, shown=("alpha", "beta")),
    "softsign": Kind(lambda op, y, r: arith.divf(y, arith.addf(_const(y, 1.0), math.absf(y))),
                     lambda op, y, r: y / (1 + np.abs(y)), 10),
    "thresholded_relu": Kind(lambda op, y, r: arith.select(arith.cmpf(arith.CmpFPredicate.OGT, y, _const(y, op.alpha)),
                                                           y, _const(y, 0.0)),
                             lambda op, y, r: np.where(y > op.alpha, y, 0.0), 2, shown=("alpha",)),
    # sin and cos: the reduction in f64 (widening, a multiply, a rounding, two FMAs, the
    # quadrant's floors and compares: each twice, at half the lanes; 20), the two
    # polynomials (10), selects and the clamp (4); tan a divide for the clamp; atan: the
    # argument's selects and divide (14), the polynomial (6), the rest (4); asin and
    # acos add a square root and a divide (16); sinh and cosh: exp (21), a divide, the
    # series (5) and selects; the inverse hyperbolics: log (28), a square root and a few
    **{kind: Kind(lambda op, y, r, f=emit: f(y), lambda op, y, r, f=function: _np_quiet(f)(y), cost)
       for kind, emit, function, cost in (
           ("sin", lambda y: _sine(y, 0), np.sin, 34), ("cos", lambda y: _sine(y, 1), np.cos, 34),
           ("tan", _tan, np.tan, 40), ("atan", _atan, np.arctan, 24), ("asin", _asin, np.arcsin, 40),
           ("acos", _acos, np.arccos, 40), ("sinh", _sinh, np.sinh, 34), ("cosh", _cosh, np.cosh, 30),
           ("asinh", _asinh, np.arcsinh, 46), ("acosh", _acosh, np.arccosh, 46),
           ("atanh", _atanh, np.arctanh, 40))},
    "erf": Kind(lambda op, y, r: _erf(y), lambda op, y, r: _np_erf(y), 48),
    "gelu": Kind(lambda op, y, r: _gelu(y), lambda op, y, r: _np_gelu(y), 18),
    "gelu_tanh": Kind(lambda op, y, r: _gelu_tanh(y),
                      lambda op, y, r: y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3))) / 2, 25),
}  # fmt: skip
"""Every epilogue op kind: what `EpilogueOp`, `apply`, `reference`, `vector_ops` and
`describe` read."""
