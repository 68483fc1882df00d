"""Operators by input-output mapping type (DNNFusion, PLDI'21, Table 3; the types are
in the operator table, `autoconfig.graph.ops`) and the legality of fusing a producer
into its consumer: anything may fuse into a one-to-one consumer; two many-to-many ops
(or an expansion into one) never share a kernel; the other pairs are decided by the
cost model (recomputing the producer per read against the traffic saved)."""

from __future__ import annotations

from enum import Enum

from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Mapping, info

__all__ = ["LEGALITY", "Legality", "Mapping", "mapping"]


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
