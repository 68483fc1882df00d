"""Operators by input-output mapping type (DNNFusion, PLDI'21, Table 3) and the
legality of fusing a producer into its consumer (DESIGN §4)."""

from __future__ import annotations

from enum import Enum

from autoconfig.graph.ir import Graph, Node


class Mapping(Enum):
    ONE_TO_ONE = "one-to-one"
    ONE_TO_MANY = "one-to-many"
    MANY_TO_MANY = "many-to-many"
    REORGANIZE = "reorganize"
    SHUFFLE = "shuffle"


ELEMENTWISE = frozenset(
    "Add Sub Mul Div Relu Clip Sigmoid Tanh Softplus LeakyRelu HardSigmoid HardSwish "
    "BatchNormalization Identity Concat Slice Split".split()
)
MANY_TO_MANY = frozenset("Conv Gemm MatMul MaxPool AveragePool GlobalAveragePool Softmax ReduceMean".split())
REORGANIZE = frozenset("Reshape Flatten Squeeze Unsqueeze Pad".split())
SHUFFLE = frozenset({"Transpose"})
ONE_TO_MANY = frozenset({"Resize", "Upsample"})


def mapping(node: Node, graph: Graph) -> Mapping:
    """The mapping type of one node. Elementwise ops are one-to-one even when an operand
    is broadcast (DESIGN §4 lists Add and Mul there): each output element depends on
    one element of the streamed input; "broadcast" in the one-to-many row means an
    explicit broadcast op such as Expand."""
    if node.op in MANY_TO_MANY:
        return Mapping.MANY_TO_MANY
    if node.op in REORGANIZE:
        return Mapping.REORGANIZE
    if node.op in SHUFFLE:
        return Mapping.SHUFFLE
    if node.op in ONE_TO_MANY:
        return Mapping.ONE_TO_MANY
    if node.op in ELEMENTWISE:
        return Mapping.ONE_TO_ONE
    raise ValueError(f"no mapping type for {node.op}")


class Legality(Enum):
    FUSE = "fuse"
    COST = "cost"  # decided by the cost model
    NO = "no"


_T = Mapping
_F, _C, _N = Legality.FUSE, Legality.COST, Legality.NO
_COLUMNS = (_T.ONE_TO_ONE, _T.ONE_TO_MANY, _T.MANY_TO_MANY, _T.REORGANIZE, _T.SHUFFLE)
_ROWS = {
    _T.ONE_TO_ONE: (_F, _F, _F, _F, _F),
    _T.ONE_TO_MANY: (_F, _C, _N, _C, _C),
    _T.MANY_TO_MANY: (_F, _C, _N, _C, _C),
    _T.REORGANIZE: (_F, _C, _C, _F, _F),
    _T.SHUFFLE: (_F, _C, _C, _F, _F),
}
LEGALITY = {(p, c): _ROWS[p][i] for p in _ROWS for i, c in enumerate(_COLUMNS)}
"""(producer mapping, consumer mapping) -> legality; rows producer, columns consumer."""
