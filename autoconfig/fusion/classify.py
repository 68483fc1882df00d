"""Operators by input-output mapping type (DNNFusion, PLDI'21, Table 3; the types are
in the operator table, `autoconfig.graph.ops`) and the legality of fusing a producer
into its consumer: anything may fuse into a one-to-one consumer; two many-to-many ops
(or an expansion into one) never share a kernel; the other pairs are decided by the
cost model (recomputing the producer per read against the traffic saved).

The table is the theory; `emittable` is what the code generator can make of an edge
inside one kernel (`autoconfig.graph.ops.Kernel`), and a plan obeys both: an
anchor's epilogue (elementwise ops on an output of the anchor's shape, for anchors
that have epilogues), chains of elementwise ops of one shape, views at either end of
a group, and data movement alone; and a prologue: per-channel elementwise ops (a scale,
a shift, a BatchNorm, an activation) on the input of an ungrouped 1x1 convolution,
applied by its product as it reads the input (`prologue_edge`, `prologue_op`); and a
tail: the mean over each channel's plane of what a depthwise convolution's kernel
stores (a squeeze-excitation's squeeze), summed as it stores it (`mean_tail`,
`mean_host`); a gate tail: a tensor scaled by the gates a 1x1 convolution of one pixel
computes (a squeeze-excitation's excitation), each thread scaling the channels whose
gates it computed (`gate_tail`, `gate_host`; `kernels.excite`); and an attention core
(`attention_cores`): the scores' product, the ops on the scores, their softmax and its
cleanup, and the product with V, in one kernel (`kernels.attention`) — the one group
holding more than one many-to-many op."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from autoconfig.graph.ir import Graph, Node
from autoconfig.families.elementwise import UNARY
from autoconfig.fusion import addressing
from autoconfig.graph.ops import Kernel, Mapping, info, reduced_axes
from kernels import epilogue as ep

__all__ = ["LEGALITY", "AttentionCore", "Legality", "Mapping", "along_channels", "attention_cores", "emittable",
           "emittable_groups", "gate_host", "gate_tail", "gated", "mapping", "mean_host", "mean_tail", "prologue_edge",
           "prologue_op", "streamed_input"]


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
    if mean_tail(graph, consumer):  # the group's anchor is checked by `_cut` and the planners
        return made is Kernel.ELEMENTWISE or mean_host(graph, producer)
    if gate_tail(graph, consumer) == producer.outputs[0]:  # the group's anchor is checked by the planners
        return made is Kernel.ELEMENTWISE or gate_host(graph, producer)
    if used in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR):
        return prologue_edge(graph, producer, consumer)
    if made is Kernel.ANCHOR:
        return False  # no epilogue on pooling, reductions
    if producer.op == "Softmax" and not _reads_alone(graph, producer.outputs[0], consumer):
        return False  # a softmax's epilogue takes no operand
    shape = graph.types[producer.outputs[0]].shape
    return all(graph.types[out].shape == shape for out in consumer.outputs if out)


def _reads_alone(graph: Graph, value: str, consumer: Node) -> bool:
    """Whether `consumer` computes from `value` alone: its other inputs scalar constants
    or a test of `value` (IsNaN, Not), as a masked softmax's cleanup is."""
    producers = graph.producers()
    return all(i == value or (graph.is_constant(i) and graph.constants[i].size == 1)
               or (i in producers and producers[i].op in ("IsNaN", "Not") and producers[i].inputs == [value])
               for i in consumer.inputs if i)  # fmt: skip


def prologue_edge(graph: Graph, producer: Node, consumer: Node) -> bool:
    """Whether `producer` can run as a prologue of `consumer`: a per-channel op
    (`prologue_op`) whose output only an ungrouped 1x1, stride-1, unpadded convolution
    with constant weights reads, as its input."""
    out = producer.outputs[0]
    if consumer.op != "Conv" or consumer.inputs[0] != out or out in graph.outputs or not prologue_op(graph, producer):
        return False
    if len(graph.consumers().get(out, [])) != 1 or not all(graph.is_constant(i) for i in consumer.inputs[1:] if i):
        return False
    weight, attrs = graph.types[consumer.inputs[1]].shape, consumer.attrs
    return (len(weight) == 4 and tuple(weight[2:]) == (1, 1) and attrs.get("group", 1) == 1
            and all(x == 1 for x in attrs.get("strides", [1])) and not any(attrs.get("pads", [0]))
            and attrs.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"))  # fmt: skip


def mean_tail(graph: Graph, node: Node) -> bool:
    """A mean over the height and width of a 4-D tensor (GlobalAveragePool, or ReduceMean
    over axes 2 and 3): a kernel that stores the tensor can sum it too."""
    shape = graph.types[node.inputs[0]].shape
    if len(shape) != 4 or node.op not in ("GlobalAveragePool", "ReduceMean"):
        return False
    return node.op == "GlobalAveragePool" or reduced_axes(node, graph) == (2, 3)


def mean_host(graph: Graph, node: Node) -> bool:
    """A convolution whose kernel can write a mean tail: a depthwise one with constant
    weights (on a target whose vectors its channels fill: `models.conv.mean_fits`)."""
    if node.op != "Conv" or len(graph.types[node.inputs[0]].shape) != 4:
        return False
    weight, channels = graph.types[node.inputs[1]].shape, graph.types[node.inputs[0]].shape[1]
    return (all(graph.is_constant(i) for i in node.inputs[1:] if i) and node.attrs.get("group", 1) == channels
            and weight[:2] == (channels, 1))  # fmt: skip


def gate_tail(graph: Graph, node: Node) -> str | None:
    """The gates a Mul scales a computed 4-D tensor of several pixels by, one computed value
    per image and channel ([N, C, 1, 1] times [N, C, H, W]: a squeeze-excitation's
    scale); else None."""
    shape = graph.types[node.outputs[0]].shape
    if node.op != "Mul" or len(set(node.inputs)) != 2 or len(shape) != 4 or shape[2] * shape[3] == 1:
        return None
    if any(graph.is_constant(i) for i in node.inputs):
        return None
    tensor, gates = node.inputs if graph.types[node.inputs[0]].shape == shape else node.inputs[::-1]
    return gates if graph.types[tensor].shape == shape and graph.types[gates].shape == (*shape[:2], 1, 1) else None


def gate_host(graph: Graph, node: Node) -> bool:
    """A convolution whose kernel can compute a gate tail's gates: 1x1, ungrouped, of
    constant weights and bias, from one pixel to one pixel."""
    if node.op != "Conv" or not all(graph.is_constant(i) for i in node.inputs[1:] if i):
        return False
    x, weight = graph.types[node.inputs[0]].shape, graph.types[node.inputs[1]].shape
    out = graph.types[node.outputs[0]].shape
    return (len(x) == 4 and x[2:] == (1, 1) and out[2:] == (1, 1) and tuple(weight[2:]) == (1, 1)
            and node.attrs.get("group", 1) == 1)  # fmt: skip


def prologue_op(graph: Graph, node: Node) -> bool:
    """An elementwise op that maps each element of one streamed 4-D tensor with at most
    one value per channel: an activation, an inference BatchNormalization, or Add, Sub,
    Mul, Div by a constant per channel (or, Add and Mul, by a computed [1, C, 1, 1])."""
    shape = graph.types[node.outputs[0]].shape
    if len(shape) != 4 or info(node).kernel is not Kernel.ELEMENTWISE:
        return False
    if node.op in UNARY:
        return True
    if node.op == "BatchNormalization":
        return all(graph.is_constant(i) for i in node.inputs[1:5]) and not node.attrs.get("training_mode", 0)
    if node.op not in ("Add", "Sub", "Mul", "Div") or len(set(node.inputs)) != 2:
        return False
    streamed = streamed_input(graph, node)
    other = next(i for i in node.inputs if i != streamed)
    channel = along_channels(graph.types[other].shape, shape, 1)
    if graph.is_constant(other):  # a scalar too; subtracted from or dividing the stream
        ordered = node.inputs[0] == streamed or node.op in ("Add", "Mul")
        return (channel or graph.types[other].elements == 1) and ordered
    return channel and node.op in ("Add", "Mul")


def along_channels(shape: tuple[int, ...], out_shape: tuple[int, ...], axis: int) -> bool:
    """Whether an operand of `shape` broadcast to `out_shape` holds one value per
    channel (along `axis` of the output) and varies along no other axis."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    if len(padded) != len(out_shape):
        return False
    axis %= len(out_shape)
    return padded[axis] == out_shape[axis] and all(d == 1 for i, d in enumerate(padded) if i != axis)


def gated(graph: Graph, value: str, readers: list[Node]) -> tuple[list[Node], ep.EpilogueOp] | None:
    """Where `value`'s two `readers` are one epilogue op — a gate and the Mul of `value`
    by it (SiLU: Sigmoid; Mish: Softplus then Tanh; HardSwish: HardSigmoid with slope 1/6
    and offset 1/2), or IsNaN and the Where replacing NaNs by a constant (a masked
    softmax's cleanup) — their nodes in order and the op; else None."""
    ops = sorted(r.op for r in readers)
    if ops == ["IsNaN", "Where"]:
        return _nan_replaced(graph, value, readers)
    if len(readers) != 2 or ops[0] != "Mul" and ops[1] != "Mul":
        return None
    mul = next(r for r in readers if r.op == "Mul")
    gate = next(r for r in readers if r is not mul)
    chain = [gate]
    if gate.op == "Softplus":
        tanh = graph.consumers().get(gate.outputs[0], [])
        if len(tanh) != 1 or tanh[0].op != "Tanh":
            return None
        chain.append(tanh[0])
    elif gate.op == "HardSigmoid":
        if not (math.isclose(gate.attrs.get("alpha", 0.2), 1 / 6, rel_tol=1e-6) and gate.attrs.get("beta", 0.5) == 0.5):
            return None
    elif gate.op != "Sigmoid":
        return None
    if sorted(mul.inputs) != sorted([value, chain[-1].outputs[0]]):
        return None
    return [*chain, mul], ep.EpilogueOp({"Sigmoid": "silu", "Softplus": "mish", "HardSigmoid": "hard_swish"}[gate.op])


def _nan_replaced(graph: Graph, value: str, readers: list[Node]) -> tuple[list[Node], ep.EpilogueOp] | None:
    """Where(IsNaN(value), k, value) for a scalar constant k, the test read only there."""
    test, where = sorted(readers, key=lambda r: r.op)
    condition, k, kept = where.inputs
    single = graph.consumers().get(test.outputs[0], []) == [where] and test.outputs[0] not in graph.outputs
    if condition != test.outputs[0] or kept != value or not single or not (graph.is_constant(k) and
                                                                           graph.constants[k].size == 1):  # fmt: skip
        return None
    return [test, where], ep.EpilogueOp("replace_nan", alpha=float(graph.constants[k].reshape(-1)[0]))


@dataclass(frozen=True)
class AttentionCore:
    """Node indices of an attention block one kernel can compute: the scores' product,
    the elementwise ops on the scores (`between`), the softmax over the keys, the ops
    without operands on the probabilities (`cleanup`), and their product with V."""

    scores: int
    between: tuple[int, ...]
    softmax: int
    cleanup: tuple[int, ...]
    output: int

    @property
    def nodes(self) -> tuple[int, ...]:
        return (self.scores, *self.between, self.softmax, *self.cleanup, self.output)


def attention_cores(graph: Graph) -> list[AttentionCore]:
    """Every MatMul of two computed operands, then epilogue ops of its shape, a Softmax
    over the last axis, a NaN cleanup or none, and a MatMul reading the probabilities
    as its left operand (V computed), each value in between read by the next op alone."""
    consumers = graph.consumers()
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    cores = []
    for q, node in enumerate(graph.nodes):
        if node.op != "MatMul" or any(graph.is_constant(i) for i in node.inputs):
            continue
        between, value, previous = [], node.outputs[0], node
        while (reader := addressing.sole_reader(graph, value, consumers)) is not None and reader.op != "Softmax":
            if info(reader).kernel is not Kernel.ELEMENTWISE or not emittable(graph, previous, reader):
                break
            between.append(index[reader.name])
            value, previous = reader.outputs[0], reader
        if reader is None or reader.op != "Softmax" or not _over_last_axis(graph, reader):
            continue
        softmax, value = reader, reader.outputs[0]
        cleanup: list[Node] = []
        readers = consumers.get(value, [])
        if len(readers) == 2 and value not in graph.outputs and (nan := gated(graph, value, readers)):
            if nan[1].kind == "replace_nan":
                cleanup, value = nan[0], nan[0][-1].outputs[0]
        output = addressing.sole_reader(graph, value, consumers)
        if (output is None or output.op != "MatMul" or output.inputs[0] != value or output.inputs[1] == value
                or graph.is_constant(output.inputs[1])):  # fmt: skip
            continue
        cores.append(AttentionCore(q, tuple(between), index[softmax.name], tuple(index[n.name] for n in cleanup),
                                   index[output.name]))  # fmt: skip
    return cores


def _over_last_axis(graph: Graph, softmax: Node) -> bool:
    """A Softmax (opset 13 on) over its input's last axis."""
    rank = len(graph.types[softmax.inputs[0]].shape)
    return "legacy_axis" not in softmax.attrs and rank >= 2 and softmax.attrs.get("axis", -1) % rank == rank - 1


def emittable_groups(graph: Graph, groups: list[list[int]]) -> list[list[int]]:
    """`groups` with each group the code generator cannot emit as one kernel cut in two
    at its first break (`_cut`), until none is left."""
    consumers, chains = graph.consumers(), addressing.chains(graph)
    result, todo = [], [sorted(g) for g in groups]
    while todo:
        members = todo.pop()
        runs = addressing.absorbed(graph, members, chains)
        if runs is None:  # data movement no product addresses: on its own
            moving = next(i for i, v in enumerate(members) if info(graph.nodes[v]).kernel is Kernel.MOVEMENT)
            todo += [part for part in (members[:moving], [members[moving]], members[moving + 1:]) if part]
            continue
        passive = {graph.nodes[u].name for u in addressing.run_members(runs)}
        cut = _cut(graph, [graph.nodes[v] for v in members], consumers, passive)
        if cut is None:
            result.append(members)
        else:
            todo += [members[:cut], members[cut:]]
    return sorted(result, key=min)


def streamed_input(graph: Graph, node: Node) -> str | None:
    """The input an elementwise kernel starting at `node` streams: its first computed
    input of the output's shape, else its first computed input (broadcast)."""
    computed = [i for i in node.inputs if i and not graph.is_constant(i)]
    shape = graph.types[node.outputs[0]].shape
    return next((i for i in computed if graph.types[i].shape == shape), computed[0] if computed else None)


def _cut(graph: Graph, nodes: list[Node], consumers: dict[str, list[Node]], passive: set[str]) -> int | None:
    """Where a group must be cut (the length of its first part), or None. A kernel
    computes one chain of values (the anchor's output, or the streamed input, then each
    op's) and writes only the last: a chain value read by two ops of the group (but a
    gate and the Mul by it: `gated`) starts a new kernel at the second, so does an op
    after the anchor reading nothing the group computed (a second chain, as in a rotary
    embedding's two products added), and one read outside the group (or a graph
    output) ends the kernel. A mean tail
    last reads the value written, of a mean host's kernel. Views, and the `passive`
    data movement the group's product addresses, compute nothing."""
    if len(nodes) > 1 and mean_tail(graph, nodes[-1]):
        head = nodes[:-1]
        hosted = mean_host(graph, head[0]) and nodes[-1].inputs[0] == head[-1].outputs[0]
        return _cut(graph, head, consumers, passive) if hosted else len(head)
    inside = {n.name for n in nodes}

    def computes(n: Node) -> bool:
        return info(n).kernel is not Kernel.VIEW and n.name not in passive

    anchor = next((i for i, n in enumerate(nodes) if info(n).kernel in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)), 0)
    before = [n for n in nodes[:anchor] if computes(n)]
    leading = {n.name for n in before} | {nodes[anchor].name}
    if before and not all(prologue_op(graph, n) and all(c.name in leading for c in consumers.get(n.outputs[0], []))
                          for n in before):  # fmt: skip
        return anchor  # ops before the anchor that are not its prologue
    first = next((n for n in nodes if computes(n)), None)
    chain = {streamed_input(graph, first)} if first is not None and info(first).kernel is Kernel.ELEMENTWISE else set()
    readers: dict[str, list[Node]] = {}
    produced: set[str] = set()
    for i, node in enumerate(nodes):
        if i > anchor and computes(node) and not produced & set(node.inputs):
            return i
        produced.update(node.outputs)
        for value in set(node.inputs) & chain:
            seen = readers.setdefault(value, [])
            seen.append(node)
            if len(seen) > 1 and gated(graph, value, seen) is None:
                return i
        if not computes(node) or i == len(nodes) - 1:
            continue
        for out in node.outputs:
            if out in graph.outputs or any(r.name not in inside for r in consumers.get(out, [])):
                return i + 1
        chain.update(o for o in node.outputs if o)
    return None
