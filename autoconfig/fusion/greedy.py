"""TVM's fusion rules (Relax FuseOps / Relay FuseOps), kept as the comparison baseline.

Each op gets an OpPatternKind — ElemWise < Broadcast < Injective < CommReduce <
OutEWiseFusable < Opaque — and groups grow greedily along the post-dominator tree,
with no cost model, in TVM's three phases:
0. an OutEWiseFusable op (conv, dense, pooling) absorbs its immediate post-dominator
   when that is ElemWise and every path to it is at most Broadcast;
1. an op of at most Broadcast joins its post-dominator when every path to it is at
   most Injective (and the sink may also be CommReduce/OutEWiseFusable... as TVM's
   `fcond`); Injective ops join an Injective post-dominator;
2. as phase 1, for groups that are still Injective or CommReduce.
A group's kind is its worst member's; groups are capped at MAX_FUSE_DEPTH ops.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autoconfig.fusion.planning import Analysis, FusionCost, Plan, plan_cost
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Pattern, info

MAX_FUSE_DEPTH = 256  # TVM's default max_fuse_depth


def pattern(node: Node, graph: Graph) -> Pattern:
    """TVM's registered pattern for the op (operator table), with its rule for
    elementwise ops: Broadcast when an operand is broadcast (inputs of different
    shapes, or a constant of more than one element)."""
    kind = info(node).pattern
    if kind != Pattern.ELEMWISE:
        return kind
    shapes = {graph.types[i].shape for i in node.inputs if i and not graph.is_constant(i)}
    if len(shapes) > 1 or any(graph.is_constant(i) and graph.types[i].elements > 1 for i in node.inputs[1:] if i):
        return Pattern.BROADCAST
    return Pattern.ELEMWISE


class _Groups:
    """The greedy pass's groups: a union-find over the nodes, each group with its
    pattern kind (the largest of its members') and size."""

    def __init__(self, a: Analysis, kinds: list[Pattern]):
        self.a, self.parent, self.kind, self.size = a, list(range(len(kinds))), list(kinds), [1] * len(kinds)

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def paths_ok(self, src: int, sink: int, ok: Callable[[Pattern, bool], bool]) -> bool:
        """Every node on every path src -> sink (excluding src) satisfies ok(kind, is_sink)."""
        seen, todo = set(), list(self.a.consumers[src])
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if not ok(self.kind[self.find(v)], v == sink):
                return False
            if v != sink:
                todo.extend(self.a.consumers[v])
        return True

    def between(self, src: int, sink: int) -> set[int]:
        """The nodes on the paths from src to sink, src included, sink not."""
        seen, todo = set(), [src]
        while todo:
            v = todo.pop()
            if v in seen or v == sink:
                continue
            seen.add(v)
            todo.extend(self.a.consumers[v])
        return seen

    def emittable(self, src: int, sink: int) -> bool:
        """TVM's rules fuse whatever TVM can generate; ours generates less
        (classify.emittable): every edge inside the merged group must be emittable."""
        roots = {self.find(sink)} | {self.find(v) for v in self.between(src, sink)}
        return all(self.a.emittable[u][v] for u in range(len(self.parent)) if self.find(u) in roots
                   for v in self.a.consumers[u] if self.find(v) in roots)  # fmt: skip

    def fuse_path(self, src: int, sink: int) -> None:
        """Merge src's group and every group on the paths to sink into sink's group."""
        target = self.find(sink)
        for v in self.between(src, sink):
            root = self.find(v)
            if root != target:
                self.parent[root] = target
                self.size[target] += self.size[root]
                self.kind[target] = max(self.kind[target], self.kind[root])

    def members(self) -> list[list[int]]:
        groups: dict[int, list[int]] = {}
        for v in range(len(self.parent)):
            groups.setdefault(self.find(v), []).append(v)
        return sorted(groups.values(), key=min)


def _path_rule(kind: Pattern, dom_kind: Pattern, phase: int) -> Callable[[Pattern, bool], bool] | None:
    """TVM's rule for fusing a group of `kind` into its post-dominator's group of
    `dom_kind` in `phase` (0-2): what every node on the paths between must be, or None
    where the pair is not fused in this phase."""
    if kind == Pattern.OUT_EWISE_FUSABLE:
        if phase == 0 and dom_kind == Pattern.ELEMWISE:
            return lambda k, sink: k <= Pattern.BROADCAST
    elif kind <= Pattern.BROADCAST:
        if phase <= 1 and (dom_kind <= Pattern.INJECTIVE or dom_kind == Pattern.OUT_EWISE_FUSABLE):
            return lambda k, sink: (k <= Pattern.INJECTIVE if not sink else
                                    k in (Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE,
                                          Pattern.COMM_REDUCE, Pattern.OUT_EWISE_FUSABLE))  # fmt: skip
    elif kind in (Pattern.INJECTIVE, Pattern.COMM_REDUCE):
        if phase >= 1 and dom_kind <= Pattern.INJECTIVE:
            return lambda k, sink: k <= Pattern.INJECTIVE
    return None


def plan_greedy(graph: Graph, cost: FusionCost) -> Plan:
    """TVM's greedy plan, costed by the same model as the DP's."""
    start = time.perf_counter()
    a = Analysis(graph, cost)
    ipdom = _post_dominators(a)
    g = _Groups(a, [pattern(node, graph) for node in a.nodes])
    for phase in range(3):
        for v in range(len(a.nodes)):
            dom = ipdom[v]
            if dom is None or g.find(v) == g.find(dom):
                continue
            kind = g.kind[g.find(v)]
            if kind == Pattern.OPAQUE or g.size[g.find(v)] + g.size[g.find(dom)] > MAX_FUSE_DEPTH:
                continue
            rule = _path_rule(kind, g.kind[g.find(dom)], phase)
            if rule is not None and g.emittable(v, dom) and g.paths_ok(v, dom, rule):
                g.fuse_path(v, dom)
    ordered = g.members()
    total, traffic = plan_cost(graph, ordered, cost, a)
    return Plan(ordered, total, traffic, time.perf_counter() - start, "greedy")


def _post_dominators(a: Analysis) -> list[int | None]:
    """Immediate post-dominator of every node (None: the virtual exit), by the
    Cooper-Harvey-Kennedy iteration on the reversed DAG (nodes are topological)."""
    n = len(a.nodes)
    exit_ = n
    ipdom: list[int | None] = [None] * n
    order = list(range(n - 1, -1, -1))  # reverse topological: successors first
    rank = {v: i for i, v in enumerate(order)}
    rank[exit_] = -1

    def succs(v: int) -> list[int]:
        out = list(a.consumers[v])
        return out + [exit_] if a.is_graph_output[v] or not out else out

    doms: dict[int, int] = {exit_: exit_}

    def intersect(x: int, y: int) -> int:
        while x != y:
            while rank[x] > rank[y]:
                x = doms[x]
            while rank[y] > rank[x]:
                y = doms[y]
        return x

    for v in order:  # one pass suffices on a DAG in reverse topological order
        nxt = succs(v)
        d = nxt[0]
        for s in nxt[1:]:
            d = intersect(d, s)
        doms[v] = d
    for v in range(n):
        ipdom[v] = None if doms[v] == exit_ else doms[v]
    return ipdom
