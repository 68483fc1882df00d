"""The elementwise family's operators of one input (activations and Clip), each
declared once, as the epilogue op it becomes: the operator table takes their rows from
`UNARY`, the builder their epilogue ops (`epilogue_op`), and the interpreter their
numpy meaning, which is the kernel's own
(`kernels.epilogue.KINDS`: the op's vector code and numpy reference side by side).
Adding an activation is one row here and one kind there.

The binary operators (`BINARY`: arithmetic, Max and Min, comparisons, Or and Xor) and
BatchNormalization become epilogue ops too, but which one depends on their operands'
shapes and order; the builder matches them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ir import Graph, Node
from kernels import epilogue as ep


@dataclass(frozen=True)
class Unary:
    """An ONNX operator of one tensor input as an epilogue op: `op(attrs, *parameters)`
    makes it from the node's attributes and its constant `parameters` inputs (None
    where omitted), raising ValueError for attributes it does not take."""

    op: Callable[..., ep.EpilogueOp]
    parameters: tuple[int, ...] = ()

    def check(self, attrs: dict) -> None:
        """Raise ValueError for attributes the operator does not take."""
        self.op(attrs, *[None] * len(self.parameters))

    def reference(self, attrs: dict, x: np.ndarray, *parameters: np.ndarray | None) -> np.ndarray:
        """The operator's numpy meaning: the epilogue op's, in float64, as x's type."""
        return ep.reference((self.op(attrs, *parameters),), x, [None]).astype(x.dtype)


def _clip(attrs: dict, low: np.ndarray | None = None, high: np.ndarray | None = None) -> ep.EpilogueOp:
    """Clip's bounds are inputs 1 and 2 (opset 11+), each optional."""
    return ep.clip(-math.inf if low is None else float(low), math.inf if high is None else float(high))


def _gelu(attrs: dict) -> ep.EpilogueOp:
    approximate = attrs.get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate={approximate!r} is not 'none' or 'tanh'")
    return ep.EpilogueOp("gelu_tanh" if approximate == "tanh" else "gelu")


def _pow(attrs: dict, exponent: np.ndarray | None = None) -> ep.EpilogueOp:
    """Pow by one constant exponent (its input 1); the import computes ½, -1 and the
    small positive integers as a square root, a reciprocal or products instead."""
    if exponent is not None and np.size(exponent) != 1:
        raise ValueError("only a constant scalar exponent is generated")
    return ep.EpilogueOp("power", alpha=1.0 if exponent is None else float(np.asarray(exponent).reshape(-1)[0]))


INTEGERS = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)
"""Integer types computed at run time, held as float32 (`graph.simplify._int64_inputs`)."""


def _cast(attrs: dict) -> ep.EpilogueOp:
    """A cast to bool tests for non-zero; one to float is none (floats and bools are
    held alike; the import drops such casts, and converts int64 inputs as they are read);
    one to an integer truncates toward zero (the integer held as float32)."""
    to = attrs.get("to")
    if to not in (onnx.TensorProto.BOOL, onnx.TensorProto.FLOAT, *INTEGERS):
        raise ValueError(f"a cast to {onnx.TensorProto.DataType.Name(to or 0)} is not generated")
    return ep.EpilogueOp({onnx.TensorProto.BOOL: "nonzero", onnx.TensorProto.FLOAT: "identity"}.get(to, "trunc"))


SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875
"""Selu's default attributes (the ONNX specification's, as float32)."""

UNARY: dict[str, Unary] = {
    "Relu": Unary(lambda a: ep.relu()),
    "Sigmoid": Unary(lambda a: ep.sigmoid()),
    "Tanh": Unary(lambda a: ep.tanh()),
    "Softplus": Unary(lambda a: ep.softplus()),
    "LeakyRelu": Unary(lambda a: ep.leaky_relu(a.get("alpha", 0.01))),
    "HardSigmoid": Unary(lambda a: ep.hard_sigmoid(a.get("alpha", 0.2), a.get("beta", 0.5))),
    "HardSwish": Unary(lambda a: ep.hard_swish()),
    "Clip": Unary(_clip, parameters=(1, 2)),
    "Pow": Unary(_pow, parameters=(1,)),
    "Erf": Unary(lambda a: ep.EpilogueOp("erf")),
    "Sqrt": Unary(lambda a: ep.EpilogueOp("sqrt")),
    "Gelu": Unary(_gelu),
    "IsNaN": Unary(lambda a: ep.EpilogueOp("isnan")),
    "IsInf": Unary(lambda a: ep.EpilogueOp("isinf", alpha=a.get("detect_negative", 1),
                                           beta=a.get("detect_positive", 1))),
    "Not": Unary(lambda a: ep.EpilogueOp("is_zero")),
    "Cast": Unary(_cast),
    "Exp": Unary(lambda a: ep.EpilogueOp("exp")),
    "Log": Unary(lambda a: ep.EpilogueOp("log")),
    "Neg": Unary(lambda a: ep.EpilogueOp("negate")),
    "Abs": Unary(lambda a: ep.EpilogueOp("abs")),
    "Reciprocal": Unary(lambda a: ep.EpilogueOp("reciprocal")),
    "Floor": Unary(lambda a: ep.EpilogueOp("floor")),
    "Ceil": Unary(lambda a: ep.EpilogueOp("ceil")),
    "Round": Unary(lambda a: ep.EpilogueOp("round")),
    "Sign": Unary(lambda a: ep.EpilogueOp("sign")),
    "Elu": Unary(lambda a: ep.EpilogueOp("elu", alpha=a.get("alpha", 1.0), beta=1.0)),
    "Selu": Unary(lambda a: ep.EpilogueOp("elu", alpha=a.get("alpha", SELU_ALPHA), beta=a.get("gamma", SELU_GAMMA))),
    "Softsign": Unary(lambda a: ep.EpilogueOp("softsign")),
    "ThresholdedRelu": Unary(lambda a: ep.EpilogueOp("thresholded_relu", alpha=a.get("alpha", 1.0))),
    "Mish": Unary(lambda a: ep.mish()),
    **{name: Unary(lambda a, kind=name.lower(): ep.EpilogueOp(kind))
       for name in ("Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh")},
}
"""Every elementwise operator of one input the compiler accepts."""


BINARY: dict[str, tuple[str, str]] = {
    "Add": ("residual", "residual"), "Sub": ("difference", "reverse_difference"), "Mul": ("product", "product"),
    "Div": ("quotient", "reverse_quotient"), "Max": ("maximum", "maximum"), "Min": ("minimum", "minimum"),
    "Equal": ("equal", "equal"), "Less": ("less", "greater"), "Greater": ("greater", "less"),
    "LessOrEqual": ("less_equal", "greater_equal"), "GreaterOrEqual": ("greater_equal", "less_equal"),
    "Or": ("either", "either"), "Xor": ("differ", "differ"),
}  # fmt: skip
"""Every elementwise operator of two inputs as the epilogue op on the chain's value and
a tensor of the output's shape: the kind where the chain's value is the first input,
and where it is the second (a comparison turned around). Add, Sub, Mul and Div by a
constant per channel become bias and scale instead (`builder`)."""

BINARY_REFERENCE = {"Max": np.maximum, "Min": np.minimum, "Equal": np.equal, "Less": np.less, "Greater": np.greater,
                    "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "Or": np.logical_or,
                    "Xor": np.logical_xor}  # fmt: skip
"""The numpy meaning of the binary operators beyond the arithmetic ones (a bool result
held as 0/1 floats where its inputs are floats)."""


def epilogue_op(node: Node, graph: Graph) -> ep.EpilogueOp:
    """`node`'s epilogue op; its parameter inputs must be constants."""
    unary, given = UNARY[node.op], []
    for i in unary.parameters:
        name = node.inputs[i] if len(node.inputs) > i else ""
        if name and not graph.is_constant(name):
            raise AutoconfigError(f"node {node.name!r} ({node.op}): input {i} computed at run time is not generated")
        given.append(graph.constants[name] if name else None)
    try:
        return unary.op(node.attrs, *given)
    except ValueError as err:
        raise AutoconfigError(f"node {node.name!r} ({node.op}): {err}") from None
