"""Data movement a matrix product does by addressing: the Transposes, gathers, slices
and views between a MatMul and an operand it reads, or between a product (and its
elementwise epilogue) and the tensor it writes, where each product's matrix is then a
strided matrix of the tensor as stored — one attention head of a [tokens, heads x
width] tensor, Kᵀ of K as its producer wrote it. The product reads or writes it in place
(`kernels.matmul.MatmulConfig.leading`) instead of a kernel copying it first.

A `Chain` lists the nodes that could be so absorbed, nearest the product first, and
which leading runs of them the product can address (the index maps of
`families.matmul.products`); the planner fuses a run into the product's group where the
cost model says so (TVM's rules never fuse data movement into a product), and the
lowering reads the same maps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from autoconfig.graph.products import A, B, C, Maps, one_attention, operand_shapes, products
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Kernel, info
from autoconfig.movement import source_maps

READ_THROUGH = ("Transpose", "Slice", "Gather")
"""Data movement a product can read through (each output element one input element)."""

WRITE_THROUGH = ("Transpose",)
"""Data movement a product can write through (a permutation: every element written once)."""

@dataclass(frozen=True)
class Chain:
    """The address ops on one side of product `anchor`, nearest first; `through`: the
    elementwise epilogue ops (constant operands only) between the product and an output
    chain; `valid`: the lengths of the leading runs the product can address."""

    anchor: int
    side: int
    nodes: tuple[int, ...]
    through: tuple[int, ...]
    valid: frozenset[int]
    maps: tuple = field(default=(), compare=False, repr=False)  # by run length: (value, index map), or None
    readers: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)  # the graph's


def chains(graph: Graph) -> dict[int, list[Chain]]:
    """Every product's chains that it can address some of, by product."""
    producers, consumers = graph.producers(), graph.consumers()
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    readers = {i: tuple(index[r.name] for out in n.outputs for r in consumers.get(out, []))
               for i, n in enumerate(graph.nodes)}  # fmt: skip
    found: dict[int, list[Chain]] = {}
    for v, node in enumerate(graph.nodes):
        if node.op in ("MatMul", "Gemm"):
            mine = [replace(c, readers=readers) for c in _chains_of(graph, v, producers, consumers, index)
                    if len(c.valid) > 1]  # fmt: skip
            if mine:
                found[v] = mine
    return found


def _chains_of(graph: Graph, v: int, producers: dict[str, Node], consumers: dict[str, list[Node]],
               index: dict[str, int]) -> list[Chain]:  # fmt: skip
    node = graph.nodes[v]
    sides = [A, B] if node.op == "MatMul" else []
    found = []
    for side in sides:
        nodes, value = [], node.inputs[side]
        while (value in producers and sole_reader(graph, value, consumers) is (graph.nodes[nodes[-1]] if nodes else node)
               and _link(graph, producers[value], READ_THROUGH)):  # fmt: skip
            nodes.append(index[producers[value].name])
            value = producers[value].inputs[0]
        found.append(_chain(graph, v, side, tuple(nodes), ()))
    if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] and not graph.is_constant(node.inputs[2]):
        return found  # its computed C is read in the output's layout
    through, value = [], node.outputs[0]
    while (reader := sole_reader(graph, value, consumers)) is not None and _epilogue_op(graph, reader, value):
        through.append(index[reader.name])
        value = reader.outputs[0]
    nodes = []
    while (reader := sole_reader(graph, value, consumers)) is not None and _link(graph, reader, WRITE_THROUGH):
        nodes.append(index[reader.name])
        value = reader.outputs[0]
    found.append(_chain(graph, v, C, tuple(nodes), tuple(through)))
    return found


def _chain(graph: Graph, v: int, side: int, nodes: tuple[int, ...], through: tuple[int, ...]) -> Chain:
    maps = (None, *(_map(graph, side, [graph.nodes[u] for u in nodes[:n]]) for n in range(1, len(nodes) + 1)))
    valid = frozenset(n for n in range(len(nodes) + 1) if _layout(graph, graph.nodes[v], side, maps[n]) is not None)
    return Chain(v, side, nodes, through, valid | {0}, maps)


def sole_reader(graph: Graph, value: str, consumers: dict[str, list[Node]]) -> Node | None:
    """The one node reading `value`, once or more (None: several, none, or a graph output)."""
    readers = consumers.get(value, [])
    return readers[0] if len({r.name for r in readers}) == 1 and value not in graph.outputs else None


def _link(graph: Graph, node: Node, movers: tuple[str, ...]) -> bool:
    """A view, or data movement of `movers` whose other inputs are constants."""
    if len([o for o in node.outputs if o]) != 1:
        return False
    if info(node).kernel is Kernel.VIEW:
        return True
    return node.op in movers and all(graph.is_constant(i) for i in node.inputs[1:] if i)


def _epilogue_op(graph: Graph, node: Node, value: str) -> bool:
    """An elementwise op of `value` by constants alone, of its shape: it may run before
    the product's output is written through a chain."""
    return (info(node).kernel is Kernel.ELEMENTWISE and graph.types[node.outputs[0]].shape == graph.types[value].shape
            and all(i == value or graph.is_constant(i) for i in node.inputs if i))  # fmt: skip


def _layout(graph: Graph, anchor: Node, side: int, absorbed: tuple[str, np.ndarray] | None):
    """The anchor's products with one side read or written through the `absorbed`
    nodes' index map (`_map`; None: none absorbed), or None."""
    maps: list = [None, None, None]
    if absorbed is not None:
        maps[side] = absorbed[1]
    return products(anchor, *operand_shapes(anchor, graph), tuple(maps))


def _map(graph: Graph, side: int, nodes: list[Node]) -> tuple[str, np.ndarray]:
    """`write_map` for the output's chain, `read_map` for an operand's."""
    return (write_map if side == C else read_map)(graph, nodes)


def read_map(graph: Graph, nodes: list[Node]) -> tuple[str, np.ndarray]:
    """The tensor a product reads through `nodes` (nearest first), and where each
    element of the operand lies in it."""
    source = nodes[-1].inputs[0]
    where = np.arange(graph.types[source].elements).reshape(graph.types[source].shape)
    for node in reversed(nodes):
        where = _through(graph, node, where)
    return source, where


def write_map(graph: Graph, nodes: list[Node]) -> tuple[str, np.ndarray]:
    """The tensor a product writes through `nodes` (in order), and where each element of
    the value they start from lands in it."""
    start = nodes[0].inputs[0]
    moved = np.arange(graph.types[start].elements).reshape(graph.types[start].shape)
    for node in nodes:
        moved = _through(graph, node, moved)
    where = np.empty(moved.size, np.int64)
    where[moved.reshape(-1)] = np.arange(moved.size)
    return nodes[-1].outputs[0], where.reshape(graph.types[start].shape)


def _through(graph: Graph, node: Node, where: np.ndarray) -> np.ndarray:
    """`where` (of `node`'s input's shape) as `node` moves it: of its output's shape."""
    if info(node).kernel is Kernel.VIEW:
        return where.reshape(graph.types[node.outputs[0]].shape)
    return where.reshape(-1)[source_maps(node, graph)[0]]


def absorbed(graph: Graph, members: list[int], found: dict[int, list[Chain]],
             final: bool = True) -> list[tuple[Chain, int]] | None:  # fmt: skip
    """The runs of chains (`chains`) a group's product absorbs, as (chain, length); None
    if the group holds data movement it cannot absorb (alone, a movement kernel is
    fine: an empty list). A group still growing (not `final`) may also be a run of an
    operand's chain whose farthest node starts a valid run, its product yet to join, or
    an output chain not yet at a valid length."""
    inside = set(members)
    movers = {u for u in members if info(graph.nodes[u]).kernel is Kernel.MOVEMENT}
    anchors = [v for v in members if info(graph.nodes[v]).kernel in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)]
    if not movers or len(members) == 1:
        return []
    if not anchors:
        return [] if not final and any(_run_of(c, inside) for cs in found.values() for c in cs) else None
    products = [v for v in anchors if v in found]
    if not products:
        return None
    runs, covered = [], set()
    for product in products:  # one, or an attention core's two
        mine = []
        for chain in found[product]:
            run = [u for u in chain.nodes if u in inside]
            growing = not final and chain.side == C and len(run) <= max(chain.valid)
            if run != list(chain.nodes[:len(run)]) or not (growing or len(run) in chain.valid):
                return None
            if run:
                mine.append((chain, len(run)))
                covered |= set(run)
        if not _writes_last(product, inside, mine):
            return None
        runs += mine
    return None if movers - covered else runs


def _run_of(chain: Chain, inside: set[int]) -> bool:
    """Whether `inside` is a run of an operand's chain that its product can take whole
    once it reaches it: its farthest node starts a valid run."""
    if chain.side == C or not inside <= set(chain.nodes):
        return False
    return max(chain.nodes.index(u) for u in inside) + 1 in chain.valid


def _writes_last(v: int, inside: set[int], runs: list[tuple[Chain, int]]) -> bool:
    """With an output chain, nothing else of the group reads what the product computes."""
    written = next((c for c, _ in runs if c.side == C), None)
    if written is None:
        return True
    allowed = set(written.through) | set(written.nodes)
    todo, seen = [v], set()
    while todo:
        for u in written.readers[todo.pop()]:
            if u in inside and u not in seen:
                if u not in allowed:
                    return False
                seen.add(u)
                todo.append(u)
    return True


def maps_of(runs: list[tuple[Chain, int]]) -> dict[int, tuple[list[str | None], Maps]]:
    """By product: the values it reads (A, B) and writes (C) through its absorbed runs
    (None: its own input or epilogue's end), with their index maps."""
    found: dict[int, tuple[list[str | None], list]] = {}
    for chain, length in runs:
        values, maps = found.setdefault(chain.anchor, ([None, None, None], [None, None, None]))
        values[chain.side], maps[chain.side] = chain.maps[length]
    return {v: (values, tuple(maps)) for v, (values, maps) in found.items()}


def run_members(runs: list[tuple[Chain, int]]) -> set[int]:
    """The nodes of a group's absorbed runs: its product's addressing, no kernel of their own."""
    return {u for chain, length in runs for u in chain.nodes[:length]}


def addresses_attention(graph: Graph, members: list[int], found: dict[int, list[Chain]], scores: int,
                        output: int) -> bool:  # fmt: skip
    """Whether a group holding an attention core (its products `scores` and `output`)
    reads and writes the core's operands, through the runs it absorbs, as one attention
    kernel can (`products.one_attention`)."""
    runs = absorbed(graph, members, found)
    if runs is None:
        return False
    maps = maps_of(runs)
    pair = [products(graph.nodes[v], *operand_shapes(graph.nodes[v], graph), maps.get(v, (None, (None,) * 3))[1])
            for v in (scores, output)]  # fmt: skip
    return None not in pair and one_attention(*pair)
