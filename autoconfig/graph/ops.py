"""The operator table: everything the project knows about an ONNX operator, in one place.

Per operator: that the importer accepts it, its input-output mapping type (DNNFusion,
PLDI'21, Table 3: the fusion legality reads it), TVM's registered pattern kind (the
greedy baseline reads it), how many times it reads each input element (the fusion
planner's recompute cost), its numpy reference implementation (the interpreter
and constant folding run it), and the kind of kernel it becomes (`Kernel`: what the
code generator can put in one kernel with it). An operator family declares its
operators' rows (`autoconfig.families`: the elementwise activations come from there).

Mapping types: one-to-one for elementwise ops (an operand may be broadcast: each
output element still depends on one element of the streamed input; Concat, Slice
and Split copy elements one to one); one-to-many for explicit expansion (Resize,
Upsample); many-to-many for the anchors (convolution, matmul, pooling, reductions,
Softmax); reorganize for reshapes and Pad; shuffle for Transpose.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, IntEnum

import numpy as np

from autoconfig.families.elementwise import BINARY_REFERENCE, UNARY
from autoconfig.graph import recurrent
from autoconfig.graph import reference as ref
from autoconfig.graph.ir import Graph, Node


class Mapping(Enum):
    ONE_TO_ONE = "one-to-one"
    ONE_TO_MANY = "one-to-many"
    MANY_TO_MANY = "many-to-many"
    REORGANIZE = "reorganize"
    SHUFFLE = "shuffle"


class Pattern(IntEnum):
    """TVM's OpPatternKind, in its order (a group's kind is its worst member's)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_EWISE_FUSABLE = 4
    OPAQUE = 8


class Kernel(Enum):
    """What kind of generated kernel an operator becomes, which decides what it may
    share a kernel with: an anchor that applies an epilogue to its outputs in registers
    (convolution, matmul), an anchor that does not (pooling, softmax, reductions), an
    elementwise op (a chain of them is one kernel, or an anchor's epilogue), a view (a
    new shape over the same buffer: no kernel at all), or data movement (its own kernel,
    or none where producers write straight into place)."""

    EPILOGUE_ANCHOR = "anchor with epilogue"
    ANCHOR = "anchor"
    ELEMENTWISE = "elementwise"
    VIEW = "view"
    MOVEMENT = "data movement"


def reads_once(node: Node, graph: Graph) -> float:
    """Each input element is read once."""
    return 1.0


def reduced_axes(node: Node, graph: Graph) -> tuple[int, ...] | None:
    """The axes a Reduce* node reduces (an attribute before opset 18, an input since),
    or None where they are computed at run time."""
    rank = len(graph.types[node.inputs[0]].shape)
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        if not graph.is_constant(node.inputs[1]):
            return None
        axes = graph.constants[node.inputs[1]].reshape(-1).tolist()
    if axes is None or len(axes) == 0:
        return tuple(range(rank)) if not node.attrs.get("noop_with_empty_axes", 0) else ()
    return tuple(sorted(int(a) % rank for a in axes))


def transpose_perm(node: Node, rank: int) -> list[int]:
    """A Transpose's permutation of its `rank` axes: its `perm`, or the axes reversed
    (ONNX's default)."""
    return [int(a) % rank for a in node.attrs.get("perm", range(rank - 1, -1, -1))]


def einsum_terms(equation: str, shapes: list[tuple[int, ...]] | None = None) -> tuple[list[str], str]:
    """Einsum's operands' and output's subscripts (the output implicit: an ellipsis's
    axes, then the letters used once, in order), an ellipsis replaced by letters of its
    own given the operands' `shapes` (without them, left in); or ValueError for what the
    build does not compute: an ellipsis broadcast, more than two operands (a letter twice
    in an operand's term is its diagonal; in the output's, refused)."""
    text = equation.replace(" ", "")
    inputs, _, output = text.partition("->")
    terms = inputs.split(",")
    if "->" not in text:
        output = "..." * ("..." in inputs) + "".join(sorted(c for c in set(inputs) - {",", "."}
                                                            if inputs.count(c) == 1))  # fmt: skip
    if shapes is not None and "..." in text:
        terms, output = _ellipsis_as_letters(equation, terms, output, shapes)
    plain = [t.replace("...", "") for t in (*terms, output)]
    if len(terms) > 2 or "." in "".join(plain) or len(set(plain[-1])) != len(plain[-1]):
        raise ValueError(f"equation {equation!r}: only one or two operands, each output letter once")
    if set(plain[-1]) - set("".join(plain[:-1])):
        raise ValueError(f"equation {equation!r}: an output letter no operand has")
    return terms, output


def _ellipsis_as_letters(equation: str, terms: list[str], output: str,
                         shapes: list[tuple[int, ...]]) -> tuple[list[str], str]:  # fmt: skip
    """The terms and output with each ellipsis as letters no term uses, one per axis it
    stands for (aligned at the right, as numpy broadcasts), the same sizes in each."""
    free = [c for c in string.ascii_letters if c not in equation]
    spans = [len(shape) - len(t.replace("...", "")) if "..." in t else 0 for t, shape in zip(terms, shapes)]
    letters = "".join(free[: max(spans)])
    sizes: dict[str, int] = {}
    for t, shape, span in zip(terms, shapes, spans):
        if "..." in t:
            at = t.index("...")
            for c, n in zip(letters[len(letters) - span :], shape[at : at + span]):
                if sizes.setdefault(c, n) != n:
                    raise ValueError(f"equation {equation!r}: an ellipsis broadcast is not generated")
    return ([t.replace("...", letters[len(letters) - span :]) for t, span in zip(terms, spans)],
            output.replace("...", letters))  # fmt: skip


def window_reads(node: Node, graph: Graph) -> float:
    """A sliding window reads each input element (window taps / stride product) times."""
    kernel = node.attrs.get("kernel_shape") or graph.types[node.inputs[1]].shape[2:]
    strides = node.attrs.get("strides") or [1] * len(kernel)
    return max(1.0, math.prod(kernel) / math.prod(strides))


def expansion_reads(node: Node, graph: Graph) -> float:
    """An expansion reads each input element (output / input elements) times."""
    return graph.types[node.outputs[0]].elements / max(1, graph.types[node.inputs[0]].elements)


def _depth_space_mode(attrs: dict) -> None:
    if attrs.get("mode", "DCR") not in ("DCR", "CRD"):
        raise ValueError(f"mode {attrs['mode']!r} is not DCR or CRD")


def _lp_order(attrs: dict) -> None:
    if attrs.get("p", 2) not in (1, 2):
        raise ValueError(f"p={attrs['p']} is not 1 or 2")


def _grid_sampling(attrs: dict) -> None:
    if attrs.get("mode", "bilinear") not in ("bilinear", "linear", "nearest", "bicubic", "cubic"):
        raise ValueError(f"GridSample mode {attrs['mode']!r} is not one of ONNX's")
    if attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        raise ValueError(f"GridSample padding_mode {attrs['padding_mode']!r} is not one of ONNX's")


def _scatter_reduction(attrs: dict) -> None:
    if attrs.get("reduction", "none") not in ("none", "add", "mul", "max", "min"):
        raise ValueError(f"reduction {attrs['reduction']!r} is not one of none, add, mul, max, min")


@dataclass(frozen=True)
class OpInfo:
    """One ONNX operator as every part of the project sees it."""

    mapping: Mapping
    pattern: Pattern  # elementwise ops with a broadcast operand become Broadcast (greedy.pattern)
    reference: Callable[..., np.ndarray | list[np.ndarray]]  # (attrs, *inputs) -> output(s)
    reads: Callable[[Node, Graph], float] = reads_once  # times each input element is read
    kernel: Kernel = Kernel.ELEMENTWISE
    parameters: tuple[int, ...] = ()  # inputs a deployed model holds as constants (weights, shapes, axes)
    check: Callable[[dict], None] = lambda attrs: None  # raises ValueError for attributes not taken
    made: bool = False  # made by the import from other operators, never imported


_1, _M, _MM = Mapping.ONE_TO_ONE, Mapping.ONE_TO_MANY, Mapping.MANY_TO_MANY
_R, _S = Mapping.REORGANIZE, Mapping.SHUFFLE
_EW, _BC, _INJ = Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE
_RED, _OUT = Pattern.COMM_REDUCE, Pattern.OUT_EWISE_FUSABLE
_EA, _A, _V, _MV = Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR, Kernel.VIEW, Kernel.MOVEMENT

OPERATORS: dict[str, OpInfo] = {
    "Conv": OpInfo(_MM, _OUT, ref.conv, window_reads, _EA, (1, 2)),
    "Gemm": OpInfo(_MM, _OUT, ref.gemm, kernel=_EA, parameters=(1, 2)),
    "MatMul": OpInfo(_MM, _OUT, ref.matmul, kernel=_EA, parameters=(1,)),
    "MaxPool": OpInfo(_MM, _OUT, ref.max_pool, window_reads, _A),
    "AveragePool": OpInfo(_MM, _OUT, ref.average_pool, window_reads, _A),
    "GlobalAveragePool": OpInfo(_MM, _OUT, ref.global_pool(np.mean), kernel=_A),
    "GlobalMaxPool": OpInfo(_MM, _OUT, ref.global_pool(np.max), kernel=_A),
    "Softmax": OpInfo(_MM, _OUT, ref.softmax, kernel=_EA),
    "Einsum": OpInfo(_MM, _OUT, lambda a, *xs: np.einsum(a["equation"].replace(" ", ""), *xs), kernel=_A,
                     check=lambda a: einsum_terms(a["equation"])),  # as products (graph.simplify)
    "LogSoftmax": OpInfo(_MM, _OUT, ref.log_softmax, kernel=_A),  # as its ops (graph.simplify)
    "Hardmax": OpInfo(_MM, _OUT, ref.hardmax, kernel=_A),  # as maxima (graph.simplify)
    "LpNormalization": OpInfo(_MM, _OUT, ref.onnx_op("LpNormalization"), kernel=_A,
                              check=_lp_order),  # as a reduction and a quotient (graph.simplify)
    "LpPool": OpInfo(_MM, _OUT, ref.onnx_op("LpPool"), window_reads, _A),  # as powers, a depthwise sum, a root
    "GlobalLpPool": OpInfo(_MM, _OUT, ref.global_lp_pool, kernel=_A),  # as powers, a sum, a root
    **{op: OpInfo(_MM, _RED, ref.onnx_op(op), kernel=_A) for op in ("ArgMax", "ArgMin")},  # as maxima (graph.simplify)
    "TopK": OpInfo(_MM, _RED, ref.top_k, kernel=_A, parameters=(1,)),  # as K rounds of maxima (graph.simplify)
    **{op: OpInfo(_MM, _RED, ref.reduction(op), kernel=_A, parameters=(1,)) for op in ref.REDUCTIONS},  # as means
    "Add": OpInfo(_1, _EW, ref.binary(np.add)),
    "Sub": OpInfo(_1, _EW, ref.binary(np.subtract)),
    "Mul": OpInfo(_1, _EW, ref.binary(np.multiply)),
    "Div": OpInfo(_1, _EW, ref.div),
    "And": OpInfo(_1, _EW, ref.binary(np.logical_and)),  # bools held as 0/1 floats: a product
    "Where": OpInfo(_1, _EW, ref.where),  # a selection with one constant branch
    **{name: OpInfo(_1, _EW, ref.binary(function)) for name, function in BINARY_REFERENCE.items()},
    "Sum": OpInfo(_1, _EW, ref.onnx_op("Sum")),  # as pairs of Adds (graph.simplify)
    "Mean": OpInfo(_1, _EW, ref.onnx_op("Mean")),  # as pairs of Adds, scaled
    "PRelu": OpInfo(_1, _EW, ref.onnx_op("PRelu"), parameters=(1,)),  # as LeakyRelu, or Relus and a scale
    "Dropout": OpInfo(_1, _INJ, ref.onnx_op("Dropout"), kernel=_V),  # inference: an Identity
    **{name: OpInfo(_1, _EW, u.reference, parameters=u.parameters, check=u.check) for name, u in UNARY.items()},
    "BatchNormalization": OpInfo(_1, _BC, ref.batchnorm, parameters=(1, 2, 3, 4)),  # per-channel operands: Broadcast
    "Concat": OpInfo(_1, _INJ, ref.concat, kernel=_MV),
    "Split": OpInfo(_1, _INJ, ref.split, kernel=_MV, parameters=(1,)),
    "Slice": OpInfo(_1, _INJ, ref.slice_, kernel=_MV, parameters=(1, 2, 3, 4)),
    "Gather": OpInfo(_1, _INJ, ref.gather, kernel=_MV, parameters=(1,)),
    "GatherND": OpInfo(_1, _INJ, ref.gather_nd, kernel=_MV, parameters=(1,)),
    "GatherElements": OpInfo(_1, _INJ, ref.gather_elements, kernel=_MV, parameters=(1,)),
    **{op: OpInfo(_1, _INJ, ref.onnx_op(op), kernel=_MV, parameters=(1,), check=_scatter_reduction)
       for op in ("ScatterND", "ScatterElements")},  # as a Gather by constant indices (graph.simplify)
    "Expand": OpInfo(_M, _BC, ref.expand, expansion_reads, _MV, (1,)),
    "Identity": OpInfo(_1, _INJ, ref.identity, kernel=_V),
    "Reshape": OpInfo(_R, _INJ, ref.reshape, kernel=_V, parameters=(1,)),
    "Flatten": OpInfo(_R, _INJ, ref.flatten, kernel=_V),
    "Squeeze": OpInfo(_R, _INJ, ref.squeeze, kernel=_V, parameters=(1,)),
    "Unsqueeze": OpInfo(_R, _INJ, ref.unsqueeze, kernel=_V, parameters=(1,)),
    "Pad": OpInfo(_R, _INJ, ref.pad, kernel=_MV, parameters=(1, 2, 3)),
    "Transpose": OpInfo(_S, _INJ, ref.transpose, kernel=_MV),
    **{op: OpInfo(_S, _INJ, ref.onnx_op(op), kernel=_MV, check=_depth_space_mode)
       for op in ("DepthToSpace", "SpaceToDepth")},  # as views and a Transpose (graph.simplify)
    "Tile": OpInfo(_M, _BC, ref.onnx_op("Tile"), expansion_reads, _MV, (1,)),  # as views and an Expand
    "Resize": OpInfo(_M, _INJ, ref.resize, expansion_reads, _MV, (1, 2, 3)),
    "Upsample": OpInfo(_M, _INJ, ref.upsample, expansion_reads, _MV, (1,)),
    "ConvTranspose": OpInfo(_MM, _OUT, ref.onnx_op("ConvTranspose"), window_reads, _EA, (1, 2)),  # as a Conv
    **{op: OpInfo(_MM, _OUT, ref.onnx_op(op), kernel=_A, parameters=(1, 2, 3, 4, 7))
       for op in ("LSTM", "GRU", "RNN")},  # as projections and a Recurrence per direction (graph.recurrent)
    recurrent.RECURRENCE: OpInfo(_MM, Pattern.OPAQUE, recurrent.reference, kernel=_A, parameters=(1, 4, 5), made=True),
    "Col2Im": OpInfo(_MM, _OUT, ref.onnx_op("Col2Im"), kernel=_A, parameters=(1, 2)),  # as a ConvTranspose
    "InstanceNormalization": OpInfo(_MM, _OUT, ref.onnx_op("InstanceNormalization"), kernel=_A,
                                    parameters=(1, 2)),  # as its ops
    "LRN": OpInfo(_MM, _OUT, ref.lrn, kernel=_A),  # as its ops (graph.simplify)
    "CumSum": OpInfo(_MM, _OUT, ref.onnx_op("CumSum"), kernel=_A, parameters=(1,)),  # a triangle's product (simplify)
    "RMSNormalization": OpInfo(_MM, _OUT, ref.onnx_op("RMSNormalization"), kernel=_A,
                               parameters=(1,)),  # one row kernel (families.normalization)
    "AffineGrid": OpInfo(_MM, _OUT, ref.onnx_op("AffineGrid"), kernel=_A,
                         parameters=(1,)),  # as a product of the grid's points by θᵀ (graph.simplify)
    "GridSample": OpInfo(_MM, _OUT, ref.onnx_op("GridSample"), kernel=_A,
                         check=_grid_sampling),  # as gathers of pixels' rows, weighted (graph.simplify)
    "OneHot": OpInfo(_M, _INJ, ref.onnx_op("OneHot"), kernel=_A,
                     parameters=(1, 2)),  # a Where by each index's equality to the classes (graph.simplify)
    "ReverseSequence": OpInfo(_R, _INJ, ref.onnx_op("ReverseSequence"), kernel=_MV,
                              parameters=(1,)),  # a Gather by a constant index per element (graph.simplify)
    "Mod": OpInfo(_1, _EW, ref.onnx_op("Mod")),  # as the rest of a rounded quotient (graph.simplify)
    "Trilu": OpInfo(_1, _EW, ref.onnx_op("Trilu"), parameters=(1,)),  # a Where by a constant triangle (simplify)
    "CastLike": OpInfo(_1, _EW, ref.onnx_op("CastLike")),  # as a Cast to its second input's type (graph.simplify)
    "LayerNormalization": OpInfo(_MM, _OUT, ref.onnx_op("LayerNormalization"), kernel=_A,
                                 parameters=(1, 2)),  # as its ops (or one kernel)
}
"""Every operator the importer accepts, with all it needs (a test checks each row)."""


def info(node: Node) -> OpInfo:
    """The table row of `node`'s operator (the importer lets no other operator in)."""
    try:
        return OPERATORS[node.op]
    except KeyError:
        raise ValueError(f"operator {node.op} is not in the operator table") from None
