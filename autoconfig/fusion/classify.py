"""Operators by input-output mapping type (DNNFusion, PLDI'21, Table 3; the types are
in the operator table, `autoconfig.graph.ops`) and the legality of fusing a producer
into its consumer: anything may fuse into a one-to-one consumer; two many-to-many ops
(or an expansion into one) never share a kernel; the other pairs are decided by the
cost model (recomputing the producer per read against the traffic saved).

The table is the theory; `emittable` is what the code generator can make of an edge
inside one kernel (`autoconfig.graph.ops.Kernel`), and a plan obeys both: an
anchor's epilogue (elementwise ops on an output of the anchor's shape, for anchors
that have epilogues), chains of elementwise ops of one shape, views at either end of
a group, and data movement alone. Prologues (an elementwise op recomputed inside an
anchor's loads) are not generated, so the planner does not propose them."""

from __future__ import annotations

from enum import Enum

from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Kernel, Mapping, info

__all__ = ["LEGALITY", "Legality", "Mapping", "emittable", "mapping"]


def mapping(node: Node, graph: Graph) -> Mapping:
    """The mapping type of one node, from the operator table."""
    return info(node).mapping


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


def emittable(graph: Graph, producer: Node, consumer: Node) -> bool:
    """Whether the code generator can compute `consumer` in the same kernel as its
    input `producer` (see the module docstring)."""
    made, used = info(producer).kernel, info(consumer).kernel
    if Kernel.MOVEMENT in (made, used):
        return False
    if used is Kernel.VIEW:  # the group's output, seen in another shape
        return made in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR, Kernel.VIEW)
    if made is Kernel.VIEW:  # an anchor's input, seen in another shape
        return used in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)
    if used in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR):
        return False  # a prologue
    if made is Kernel.ANCHOR:
        return False  # no epilogue on pooling, softmax, reductions
    shape = graph.types[producer.outputs[0]].shape
    return all(graph.types[out].shape == shape for out in consumer.outputs if out)
