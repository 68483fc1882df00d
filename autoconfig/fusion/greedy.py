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


def plan_greedy(graph: Graph, cost: FusionCost) -> Plan:
    """TVM's greedy plan, costed by the same model as the DP's."""
    start = time.perf_counter()
    a = Analysis(graph, cost)
    n = len(a.nodes)
    kinds = [pattern(node, graph) for node in a.nodes]
    ipdom = _post_dominators(a)
    parent = list(range(n))
    group_kind = list(kinds)
    size = [1] * n

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def paths_ok(src: int, sink: int, ok) -> bool:
        """Every node on every path src -> sink (excluding src) satisfies ok(kind, is_sink)."""
        seen, todo = set(), list(a.consumers[src])
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v == sink:
                if not ok(group_kind[find(v)], True):
                    return False
                continue
            if not ok(group_kind[find(v)], False):
                return False
            todo.extend(a.consumers[v])
        return True

    def on_paths(src: int, sink: int) -> set[int]:
        """The groups (roots) that fusing src into sink merges."""
        roots, seen, todo = {find(sink)}, set(), [src]
        while todo:
            v = todo.pop()
            if v in seen or v == sink:
                continue
            seen.add(v)
            roots.add(find(v))
            todo.extend(a.consumers[v])
        return roots

    def emittable(src: int, sink: int) -> bool:
        """TVM's rules fuse whatever TVM can generate; ours generates less
        (classify.emittable): every edge inside the merged group must be emittable."""
        roots = on_paths(src, sink)
        return all(a.emittable[u][v] for u in range(n) if find(u) in roots
                   for v in a.consumers[u] if find(v) in roots)  # fmt: skip

    def fuse_path(src: int, sink: int) -> None:
        """Merge src's group and every group on the paths to sink into sink's group."""
        target = find(sink)
        seen, todo = set(), [src]
        while todo:
            v = todo.pop()
            if v in seen or v == sink:
                continue
            seen.add(v)
            root = find(v)
            if root != target:
                parent[root] = target
                size[target] += size[root]
                group_kind[target] = max(group_kind[target], group_kind[root])
            todo.extend(a.consumers[v])

    for phase in range(3):
        for v in range(n):
            dom = ipdom[v]
            if dom is None or find(v) == find(dom):
                continue
            kind, dom_kind = group_kind[find(v)], group_kind[find(dom)]
            if kind == Pattern.OPAQUE or size[find(v)] + size[find(dom)] > MAX_FUSE_DEPTH:
                continue
            if not emittable(v, dom):
                continue
            if kind == Pattern.OUT_EWISE_FUSABLE:
                if phase == 0 and dom_kind == Pattern.ELEMWISE and paths_ok(
                    v, dom, lambda k, sink: k <= Pattern.BROADCAST
                ):
                    fuse_path(v, dom)
            elif kind <= Pattern.BROADCAST:
                if phase <= 1 and (dom_kind <= Pattern.INJECTIVE or dom_kind == Pattern.OUT_EWISE_FUSABLE):
                    if paths_ok(v, dom, lambda k, sink: k <= Pattern.INJECTIVE if not sink else
                                k in (Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE,
                                      Pattern.COMM_REDUCE, Pattern.OUT_EWISE_FUSABLE)):  # fmt: skip
                        fuse_path(v, dom)
            elif kind in (Pattern.INJECTIVE, Pattern.COMM_REDUCE):
                if phase >= 1 and dom_kind <= Pattern.INJECTIVE and paths_ok(
                    v, dom, lambda k, sink: k <= Pattern.INJECTIVE
                ):
                    fuse_path(v, dom)
    groups: dict[int, list[int]] = {}
    for v in range(n):
        groups.setdefault(find(v), []).append(v)
    ordered = sorted(groups.values(), key=min)
    total, traffic = plan_cost(graph, ordered, cost)
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
