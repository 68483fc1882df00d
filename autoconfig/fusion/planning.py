"""Fusion plans: their cost, and the minimum-cost legal plan by dynamic programming.

A plan partitions the graph's nodes into groups; each group becomes one kernel. A
group is legal when it is weakly connected, convex (no path leaves it and comes
back, so groups form a DAG), holds at most one many-to-many "anchor" (one kernel of
an allowed shape: an anchor with an elementwise epilogue, or a chain of
one-to-one ops) — or a whole attention core (`classify.attention_cores`: two products
and the softmax between them, one `kernels.attention` kernel; `Analysis.core_fits`),
no edge inside it is "no" in the legality table (classify.LEGALITY) or one the code
generator cannot emit (classify.emittable), and
any ops before its anchor are a prologue the anchor computes as it reads its input
(`Analysis.prologue_fits`); a mean tail (`classify.mean_tail`) may end a group whose
anchor hosts it, reading the value the kernel writes (`Analysis.tail_fits`); a gate
tail (`classify.gate_tail`) may end the group computing its gates, one 1x1 convolution
of one pixel and the ops on its output (`Analysis.gate_fits`); data
movement shares a group only as runs of chains its product reads or writes through
(`Analysis.addressing_fits`, `addressing`).

Cost (ns) of a plan, from the machine view the operator models use, at the threads the
model will run on (`FusionCost`):
- compute: every op's own time (`compute_ns`): the matmul model's prediction for a
  matmul or Gemm (per product of a batch), the FMA peak for a convolution's
  multiply-adds, a softmax's vector ops, the elementwise rate for the rest — the same
  whatever the grouping but an attention core's (below), so it moves no decision, but a
  plan's cost is then the predicted time of the model, not only its overheads;
- launch: one kernel call per group (and its hand-off to the threads);
- traffic: a tensor is written once if any consumer is in another group (or it is
  a graph output), and read once by every consuming op in another group; bytes at
  the bandwidth of the level that holds a tensor of that size;
- recompute: a "cost" edge fused into a consumer that reads each producer element
  r > 1 times (a k×k convolution window, a nearest resize) recomputes the producer
  r−1 more times;
- tail: a channel mean summed by the kernel that stores its input adds a load and a
  store of the sums per stored vector (`models.conv.mean_ns`); a gate tail adds nothing
  (its tensor is read and written as by the Mul in a kernel of its own; the gates are
  the traffic saved, with a launch);
- attention: a core in one group adds the attention model's time less its ops' own
  compute (`Analysis.core_ns`; a batched product's compute is the matmul model's per
  product, a Softmax's its three passes' vector ops), charged on the edge into its
  last product; the score tensors it no longer writes are the traffic saved;
- prologue: per-channel ops fused into the 1x1 layer that reads their result add what
  the convolution model says the layer loses by computing them as it reads
  (`FusionCost.prologue_ns`: its product in NCHW against its best plan);
- register pressure: a group reading more external tensors than a quarter of the
  vector registers spills one load+store per element for each extra stream.

DP (`plan_dp`). Nodes are taken in topological order. State: the assignment of
groups to the *live* nodes (outputs still to be read), and per open group its
anchor count, external reads, largest tensor, and the live nodes outside it that it
reaches (a future node descending from one of those cannot join it; `_signature`
shows this is all the past that matters). A node either opens a group, or joins the merged groups of a non-empty
subset of its producers' open groups, if the result is legal. Merged groups never
have an edge between them (a node joins the groups of all its in-group producers
when it arrives), so every cost term is charged exactly once, when it becomes known:
reads and writes at the consuming node, launches per group opened (refunded on
merge), recompute at the fused edge, pressure when a group closes (no live member).
States with equal signatures are merged keeping the cheaper (exact); pruning keeps
the `BEAM` cheapest states per step (small graphs are searched exactly — the tests
compare with brute force; on the zoo the beam is reached only in YOLO-V4's PANet,
where several long skip connections are live at once).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autoconfig.conv import node_shape
from autoconfig.decisions import DecisionCache, ask
from autoconfig.errors import AutoconfigError
from autoconfig.fusion import addressing
from autoconfig.fusion.classify import (
    LEGALITY, AttentionCore, Legality, Mapping, attention_cores, emittable, gate_host, gate_tail, mapping, mean_host,
    mean_tail, prologue_op, streamed_input,
)  # fmt: skip
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Kernel, info
from autoconfig.machine import Machine
from autoconfig.models import attention as attention_model
from autoconfig.models.attention import AttentionShape
from autoconfig.models.cost import SOFTMAX_VECTOR_OPS, Prediction
from autoconfig.models import conv as conv_model
from autoconfig.models.matmul import choose
from autoconfig.profile import HardwareProfile
from autoconfig.resolve import target_for_profile
from kernels import epilogue as ep
from kernels.conv_shape import ConvShape
from kernels.matmul import MatmulShape

BEAM = 64
"""States kept per step: enough that keeping more finds no cheaper plan on the zoo's
widest frontier, few enough to plan it in about a second."""

PROLOGUE_PRICED = (ep.scale(), ep.bias(), ep.relu())
"""The prologue a fusion plan prices in a 1x1 layer, before it knows all its ops, unless
it is a scale alone (`Analysis.fused_ns`): the widest common one (a BatchNorm, then
ReLU); a narrower one costs at most two vector ops per input vector less."""

STREAM_SHARE = 4
"""A fused group may stream 1/STREAM_SHARE of the vector registers' worth of external
tensors; the rest hold the anchor's accumulators (matmul tiles use ~3/4 of them)."""


@dataclass(frozen=True)
class FusionCost:
    """What a plan's cost reads: the machine view the operator models use (capacities,
    bandwidth per level, FMA rate, kernel call cost), built from the profile once, and
    the threads the model will run on: every op, copy and launch is priced as the build
    runs it, each cut across them."""

    profile: HardwareProfile
    machine: Machine
    decisions: DecisionCache | None = None  # where the matmul model's answers are kept between builds
    model_bytes: int = 0  # bytes an inference passes over (`Graph.inference_bytes`): where a layer finds its weights
    threads: int = 1
    answers: dict = field(default_factory=dict, compare=False)  # the models' answers in this process

    @classmethod
    def of(cls, profile: HardwareProfile, decisions: DecisionCache | None = None, graph: Graph | None = None,
           threads: int = 1) -> FusionCost:  # fmt: skip
        if profile.bandwidth is None or "DRAM" not in profile.bandwidth.single_thread.levels:
            raise AutoconfigError(f"profile {profile.name} has no bandwidth figures: fusion costs need them")
        passed = graph.inference_bytes() if graph else 0
        return cls(profile, Machine.of(profile), decisions, passed, max(1, min(threads, int(profile.cores))))

    @property
    def view(self) -> Machine:
        """The machine as each of the threads sees it (its share of the bandwidth)."""
        return self.machine.at(self.machine.lanes, self.threads)

    def launch_ns(self) -> float:
        """One kernel's call, and with several threads the hand-off to them."""
        return self.machine.call_ns + (self.machine.dispatch_ns if self.threads > 1 else 0.0)

    def traffic_ns(self, size: float) -> float:
        """`size` bytes moved, each thread its share at its share of the bandwidth."""
        return self.view.traffic_ns(size / self.threads)

    def vector_ops_per_ns(self) -> float:
        """Vector operations (an FMA's slot) per ns, all the threads together."""
        return self.view.fma_per_ns() * self.threads

    def elementwise_per_ns(self) -> float:
        """f32 element operations per ns, all the threads together."""
        return self.vector_ops_per_ns() * self.machine.lanes

    def _ask(self, model: Callable, shape: object, **options: object) -> object:
        """`model`'s answer for `shape` at the plan's threads, asked once per process (a
        search asks the same layer's again and again) and kept in `decisions` between builds."""
        key = (model, shape, tuple(sorted(options.items())))
        if key not in self.answers:
            self.answers[key] = ask(self.decisions, model, shape, self.profile, target_for_profile(self.profile),
                                    self.threads, (), **options)  # fmt: skip
        return self.answers[key]

    def matmul(self, shape: MatmulShape) -> Prediction:
        """The matmul model's best plan for `shape` at the plan's threads."""
        return self._ask(choose, shape).best

    def prologue_ns(self, shape: ConvShape, prologue: ep.Epilogue) -> float:
        """What computing `prologue` inside a 1x1 layer of `shape` adds to the layer at the
        plan's threads, by the convolution model: its best plan computing it over its best
        plan without it. Where only plans reading NCHW compute it, the layout plan (made after
        fusion) must then hold the layer's input in NCHW: the prologue pays for that too.
        Both inside the model (`Machine.in_model`): a prologue that copies the weights
        reads them from wherever the rest of an inference leaves them. Only the fastest
        plans are asked for (`conv_model.choose`'s `fastest`)."""
        alone = self._ask(conv_model.choose, shape, model_bytes=self.model_bytes, fastest=True)
        inside = self._ask(conv_model.choose, shape, prologue=prologue, model_bytes=self.model_bytes,
                           fastest=True)  # fmt: skip
        return max(0.0, inside.best.total_ns - alone.best.total_ns)



@dataclass
class Plan:
    """Groups of node indices (into graph.nodes), each one kernel, with its cost."""

    groups: list[list[int]]
    cost_ns: float
    traffic_bytes: int
    search_seconds: float
    strategy: str

    def ratio(self, graph: Graph) -> float:
        """Fusion ratio: operators before / kernels after."""
        return len(graph.nodes) / max(1, len(self.groups))


class Analysis:
    """Per-node facts the cost and the search share: mappings, edges, sizes, reach,
    and (with a cost) each node's own compute time."""

    def __init__(self, graph: Graph, cost: FusionCost | None):
        self.graph, self.cost = graph, cost
        self.nodes = graph.nodes
        self.answers: dict[tuple[object, int], bool] = {}  # `_settled`: group checks by question and members
        n = len(self.nodes)
        index_of_output = {out: i for i, node in enumerate(self.nodes) for out in node.outputs}
        self.kind = [mapping(node, graph) for node in self.nodes]
        self.tail = [mean_tail(graph, node) for node in self.nodes]  # joins an anchor's group, not one itself
        self.anchor = [k is Mapping.MANY_TO_MANY and not t for k, t in zip(self.kind, self.tail)]
        # in_edges[v]: (u, tensor) for each non-constant input of v produced by u
        self.in_edges: list[list[tuple[int, str]]] = [
            [(index_of_output[i], i) for i in node.inputs if i in index_of_output] for node in self.nodes
        ]
        self.graph_inputs_read = [
            [i for i in node.inputs if i and i in graph.inputs] for node in self.nodes
        ]
        self.consumers: list[set[int]] = [set() for _ in range(n)]
        for v, edges in enumerate(self.in_edges):
            for u, _ in edges:
                self.consumers[u].add(v)
        self.last_use = [max(self.consumers[u], default=u) for u in range(n)]
        self.output_bytes = [sum(graph.types[o].bytes for o in node.outputs if o) for node in self.nodes]
        self.is_graph_output = [any(o in graph.outputs for o in node.outputs) for node in self.nodes]
        self.elements = [max(graph.types[o].elements for o in node.outputs if o) for node in self.nodes]
        self.desc = [0] * n  # bitset of strict descendants
        for u in range(n - 1, -1, -1):
            for v in self.consumers[u]:
                self.desc[u] |= (1 << v) | self.desc[v]
        self.anc = [0] * n  # bitset of strict ancestors
        for v in range(n):
            for u, _ in self.in_edges[v]:
                self.anc[v] |= (1 << u) | self.anc[u]
        self.amplification = [info(node).reads(node, graph) for node in self.nodes]
        self.emittable = [{v: emittable(graph, self.nodes[u], self.nodes[v]) for v in self.consumers[u]}
                          for u in range(n)]  # fmt: skip
        self.prologue_ops = sum(1 << v for v, node in enumerate(self.nodes) if prologue_op(graph, node))
        self.views = sum(1 << v for v, node in enumerate(self.nodes) if info(node).kernel is Kernel.VIEW)
        self.anchors = sum(1 << v for v in range(n) if self.anchor[v])
        self.tails = sum(1 << v for v in range(n) if self.tail[v])
        self.gate_of = [index_of_output.get(gate_tail(graph, node) or "", -1) for node in self.nodes]  # its producer
        self.gate_hosts = sum(1 << v for v, node in enumerate(self.nodes) if gate_host(graph, node))
        target = target_for_profile(cost.profile) if cost else None
        self.hosts = sum(1 << v for v, node in enumerate(self.nodes) if mean_host(graph, node) and (
            target is None or conv_model.mean_fits(node_shape(graph, node), target)))  # fmt: skip
        self.chains = addressing.chains(graph)
        self.chain_edges: set[tuple[int, int]] = set()  # producer -> consumer along a run a product may address
        self.chain_nodes = 0
        for chain in (c for found in self.chains.values() for c in found):
            run = chain.nodes[:max(chain.valid)]
            path = [chain.anchor, *chain.through, *run] if chain.side == addressing.C else [*run[::-1], chain.anchor]
            self.chain_edges |= set(zip(path, path[1:]))
            self.chain_nodes |= _or(1 << u for u in run)
        self.chain_movers = self.chain_nodes & _or(1 << v for v, node in enumerate(self.nodes)
                                                   if info(node).kernel is Kernel.MOVEMENT)  # fmt: skip
        self.consumer_mask = [sum(1 << v for v in self.consumers[u]) for u in range(n)]
        self.cores = attention_cores(graph)
        self.core_masks = [_or(1 << v for v in core.nodes) for core in self.cores]
        self.core_of = {v: c for c, core in enumerate(self.cores) for v in core.nodes}
        self.core_edges = {(u, v) for core in self.cores for v in core.nodes for u, _ in self.in_edges[v]
                           if self.core_of.get(u) == self.core_of[v]}  # fmt: skip
        self.core_cache: dict[int, float] = {}
        self.prologue_cache: dict[int, float] = {}
        self.compute_ns = [compute_ns(node, graph, cost) for node in self.nodes] if cost else [0.0] * n

    def prologue_fits(self, members: int) -> bool:
        """Whether a group's (`members`, a bitset) ops before its anchor, views aside, are
        a prologue the anchor's kernel computes: per-channel ops on the anchor's input
        path, read by nothing outside the group (`classify.prologue_op`), before a
        convolution (an attention core's scale before its softmax is no prologue)."""
        anchored = members & self.anchors
        if not anchored:
            return True
        if anchored & (anchored - 1):
            return self.core_fits(members, final=False)
        anchor = anchored.bit_length() - 1
        before = members & ((1 << anchor) - 1) & ~self.views & ~self.chain_nodes  # chains: `addressing_fits`
        if before & ~(self.prologue_ops & self.anc[anchor]) or (before and self.nodes[anchor].op != "Conv"):
            return False
        while before:
            u = before.bit_length() - 1
            if self.consumer_mask[u] & ~members:
                return False
            before &= ~(1 << u)
        return True

    def core_fits(self, members: int, final: bool = True) -> bool:
        """Whether a group of several anchors (`members`, a bitset) is (or, not `final`,
        can still become) one attention core and the data movement its products address:
        its anchors in one core, its other computing ops the core's, all of it once final."""
        cores = {self.core_of.get(v) for v in range(members.bit_length()) if self.anchors >> v & 1 and members >> v & 1}
        if len(cores) != 1 or None in cores:
            return False
        c = cores.pop()
        if members & ~self.views & ~self.chain_nodes & ~self.core_masks[c]:
            return False
        if not final:
            return True
        if self.core_masks[c] & ~members:
            return False
        return self._settled("core", members, lambda inside: addressing.addresses_attention(
            self.graph, inside, self.chains, self.cores[c].scores, self.cores[c].output))  # fmt: skip

    def extends_core(self, members: int, v: int) -> bool:
        """Whether anchor v may join a group holding an anchor (`members`): both of one
        attention core."""
        c = self.core_of.get(v)
        return c is not None and members & self.anchors & ~self.core_masks[c] == 0

    def kernel_fits(self, members: int) -> bool:
        """A closed group's checks beyond its edges: its movement addressed, and several
        anchors only as a whole attention core."""
        anchored = members & self.anchors
        return self.addressing_fits(members) and (not anchored & (anchored - 1) or self.core_fits(members))

    def addressing_fits(self, members: int, final: bool = True) -> bool:
        """Whether the data movement in a group (`members`, a bitset) is runs of chains its
        product addresses, or a movement kernel alone; a group still growing (not
        `final`), whether it can become so (`addressing.absorbed`)."""
        if not members & self.chain_movers:
            return True
        return self._settled(("addressing", final), members,
                             lambda inside: addressing.absorbed(self.graph, inside, self.chains, final) is not None)

    def _settled(self, question: object, members: int, check: Callable[[list[int]], bool]) -> bool:
        """`check` of a group's `members` (a bitset; check gets their node indices), the
        answer to `question` kept per group: the search meets the same group in many states."""
        if (question, members) not in self.answers:
            self.answers[question, members] = check([v for v in range(members.bit_length()) if members >> v & 1])
        return self.answers[question, members]

    def hosts_tail(self, members: int) -> bool:
        """Whether a group's (`members`, a bitset, no tail yet) kernel can also write a
        mean of its last member's output: its one anchor is a host."""
        anchored = members & self.anchors
        return bool(anchored) and anchored & (anchored - 1) == 0 and bool(anchored & self.hosts)

    def tail_fits(self, members: int) -> bool:
        """Whether a group's tail, if any, is legal: one, alone with views (its own
        kernel), or the group's last member, reading the output of the member before it
        in a group that `hosts_tail`."""
        tails = members & self.tails
        if not tails or members & ~self.views == tails:
            return tails & (tails - 1) == 0
        t = tails.bit_length() - 1
        head, edges = members & ~tails, self.in_edges[t]
        if tails != 1 << t or members >> t != 1 or not edges:
            return False
        return edges[0][0] == head.bit_length() - 1 and self.hosts_tail(head)

    def gates_inside(self, members: int, v: int) -> bool:
        """Whether gate tail v (if it is one) shares a group (`members`) with its gates."""
        return self.gate_of[v] >= 0 and bool(members >> self.gate_of[v] & 1)

    def gate_fits(self, members: int) -> bool:
        """Whether each gate tail in a group (`members`, a bitset) with its gates ends an
        excitation kernel (`kernels.excite`): the tail last, reading the member before it,
        the rest one anchor that hosts it (`classify.gate_host`) and ops after it reading
        nothing computed but the one before (the gates' ops take constants alone)."""
        for t in (t for t in range(members.bit_length()) if members >> t & 1 and self.gates_inside(members, t)):
            head = members & ~(1 << t)
            anchored = head & self.anchors
            if members >> t != 1 or head.bit_length() - 1 != self.gate_of[t] or not anchored & self.gate_hosts:
                return False
            if anchored & (anchored - 1) or head & ~(anchored | self.desc[anchored.bit_length() - 1]):
                return False
            after = [u for u in range(head.bit_length()) if head >> u & 1 and not anchored >> u & 1]
            if any(len(self.in_edges[u]) != 1 or self.graph_inputs_read[u] for u in after):
                return False
        return True

    def _scale_alone(self, u: int) -> bool:
        """Whether prologue op u is a per-channel Mul or Div whose streamed input no
        prologue op before it can compute (its producer is none, or is read elsewhere
        too): then the prologue is that scale alone."""
        node = self.nodes[u]
        if node.op not in ("Mul", "Div"):
            return False
        streamed = streamed_input(self.graph, node)
        before = [w for w, t in self.in_edges[u] if t == streamed]
        return not any(self.prologue_ops >> w & 1 and self.consumers[w] == {u} for w in before)

    def legality(self, u: int, v: int) -> Legality:
        """The table's verdict on edge u -> v, NO where the code generator cannot emit it;
        data movement a product addresses fuses, recomputing nothing."""
        if (u, v) in self.chain_edges:
            return Legality.FUSE
        if (u, v) in self.core_edges:  # one attention kernel, priced against running it apart
            return Legality.COST
        if not self.emittable[u][v]:
            return Legality.NO
        if self.tail[v]:  # a reduction the kernel computes as it stores, not a second anchor
            return Legality.COST
        return LEGALITY[(self.kind[u], self.kind[v])]

    def read_ns(self, tensor: str) -> float:
        return self.cost.traffic_ns(self.graph.types[tensor].bytes)

    def fused_ns(self, u: int, v: int) -> float:
        """What fusing edge u -> v adds: a prologue's price in its anchor (once per
        anchor, charged on its input edge), a tail's sums, a "cost" edge's
        recomputation."""
        if self.tail[v]:
            return conv_model.mean_ns(self.elements[u] / self.cost.threads, self.cost.view)
        if (u, v) in self.core_edges:  # the core's price, once, on the edge into its last product
            core = self.core_of[v]
            return self.core_ns(core) if self.cores[core].output == v else 0.0
        if self.anchor[v] and self.prologue_ops >> u & 1:
            if v not in self.prologue_cache:
                priced = (ep.scale(),) if self._scale_alone(u) else PROLOGUE_PRICED
                self.prologue_cache[v] = self.cost.prologue_ns(node_shape(self.graph, self.nodes[v]), priced)
            return self.prologue_cache[v]
        if self.legality(u, v) is not Legality.COST:
            return 0.0
        extra = self.amplification[v] - 1
        return self.elements[u] * extra / self.cost.elementwise_per_ns() if extra > 0 else 0.0

    def core_ns(self, core: int) -> float:
        """What running attention core `core` as one kernel adds to its ops' own compute:
        the attention model's time less theirs (negative where it is faster;
        the score tensors it never writes are the traffic the plan then saves)."""
        if core not in self.core_cache:
            fused = attention_ns(self.graph, self.cores[core], self.cost)
            self.core_cache[core] = fused - sum(self.compute_ns[v] for v in self.cores[core].nodes)
        return self.core_cache[core]

    def pressure_ns(self, reads: int, elements: int) -> float:
        excess = reads - max(1, self.cost.machine.registers // STREAM_SHARE)
        return max(0, excess) * elements * 2 / self.cost.elementwise_per_ns()


def plan_cost(graph: Graph, groups: list[list[int]], cost: FusionCost,
              analysis: Analysis | None = None) -> tuple[float, int]:  # fmt: skip
    """(cost ns, traffic bytes) of a plan; the one definition every strategy is judged by
    (`analysis`: the graph's under `cost`, where the caller made it already)."""
    a = analysis or Analysis(graph, cost)
    group_of = {v: g for g, members in enumerate(groups) for v in members}
    total, traffic = len(groups) * cost.launch_ns() + sum(a.compute_ns), 0
    for g, members in enumerate(groups):
        reads, largest = 0, 0
        for v in members:
            largest = max(largest, a.elements[v])
            for u, tensor in a.in_edges[v]:
                if group_of[u] == g:
                    total += a.fused_ns(u, v)
                else:
                    total += a.read_ns(tensor)
                    traffic += graph.types[tensor].bytes
                    reads += 1
            for tensor in a.graph_inputs_read[v]:
                total += a.read_ns(tensor)
                traffic += graph.types[tensor].bytes
                reads += 1
        total += a.pressure_ns(reads, largest)
    for u in range(len(a.nodes)):
        if a.is_graph_output[u] or any(group_of[v] != group_of[u] for v in a.consumers[u]):
            total += cost.traffic_ns(a.output_bytes[u])
            traffic += a.output_bytes[u]
    return total, traffic


def compute_ns(node: Node, graph: Graph, cost: FusionCost) -> float:
    """The node's own compute time at the plan's threads (see the module docstring)."""
    out = graph.types[node.outputs[0]]
    if node.op in ("MatMul", "Gemm") and len(out.shape) >= 2:  # a batch of products: each priced alone
        a_shape = graph.types[node.inputs[0]].shape
        k = a_shape[0] if node.attrs.get("transA", 0) else a_shape[-1]
        best = cost.matmul(MatmulShape(out.shape[-2], out.shape[-1], k))
        return (best.total_ns - best.term("call")) * math.prod(out.shape[:-2])  # the launch is charged per group
    if node.op == "Conv":
        weight = graph.types[node.inputs[1]].shape
        flops = 2 * out.elements * math.prod(weight[1:])  # any spatial rank
        return flops / (2 * cost.machine.lanes * cost.vector_ops_per_ns())
    if node.op == "Softmax":  # three passes and an exponent per vector, not one op
        return out.elements / cost.machine.lanes * SOFTMAX_VECTOR_OPS / cost.vector_ops_per_ns()
    reads = sum(graph.types[i].elements for i in node.inputs if i and not graph.is_constant(i))
    return max(reads, out.elements) / cost.elementwise_per_ns()


def attention_ns(graph: Graph, core: AttentionCore, cost: FusionCost) -> float:
    """The attention model's time for `core` as one kernel at the plan's threads, its operands
    dense (the plan does not yet know their strides), each op on the scores priced as a
    residual where it reads a computed tensor and as a scale where it reads constants."""
    nodes = graph.nodes
    scores = graph.types[nodes[core.scores].outputs[0]].shape
    width = graph.types[nodes[core.scores].inputs[0]].shape[-1]
    out = graph.types[nodes[core.output].outputs[0]].shape
    shape = AttentionShape(math.prod(out[:-2]), scores[-2], scores[-1], width, out[-1])
    epilogue = tuple(ep.residual() if any(i and not graph.is_constant(i) for i in nodes[v].inputs[1:]) else ep.scale()
                     for v in core.between)  # fmt: skip
    cleanup = (ep.EpilogueOp("replace_nan"),) if core.cleanup else ()
    lanes = cost.machine.lanes
    best = attention_model.choose(shape, cost.machine, lanes, cost.threads, (0, 0, 0, 0), epilogue, cleanup)
    return best.total_ns - best.term("call")  # the launch is charged per group


def is_legal(graph: Graph, groups: list[list[int]]) -> str | None:
    """None if every group is a legal kernel and groups form a DAG, else the reason."""
    a = Analysis(graph, None)
    for members in groups:
        mask = sum(1 << v for v in members)
        if sum(a.anchor[v] for v in members) > 1 and not a.core_fits(mask):
            return f"group {members} has more than one many-to-many op and is no attention core"
        if not a.prologue_fits(mask):
            return f"group {members} has ops before its anchor that are not its prologue"
        if not a.tail_fits(mask):
            return f"group {members} has a mean tail its kernel does not write"
        if not a.gate_fits(mask):
            return f"group {members} has a gate tail its kernel does not compute"
        if not a.addressing_fits(mask):
            return f"group {members} holds data movement its product does not address"
        for v in members:
            for u, _ in a.in_edges[v]:
                if mask >> u & 1 and a.legality(u, v) is Legality.NO:
                    return f"edge {a.nodes[u].op}->{a.nodes[v].op} may not be fused"
        escape = 0
        for v in members:
            escape |= a.desc[v]
        ancestors = 0
        for v in members:
            ancestors |= a.anc[v]
        if escape & ancestors & ~mask:
            return f"group {members} is not convex"
        if not _connected(a, members):
            return f"group {members} is not connected"
    return None


def _connected(a: Analysis, members: list[int]) -> bool:
    inside, seen, todo = set(members), {members[0]}, [members[0]]
    while todo:
        v = todo.pop()
        neighbours = {u for u, _ in a.in_edges[v]} | a.consumers[v]
        for w in neighbours & inside - seen:
            seen.add(w)
            todo.append(w)
    return seen == inside


# ---------------------------------------------------------------- dynamic programming


@dataclass(frozen=True)
class _Group:
    members: int  # bitset of nodes
    anchors: int
    reads: int  # external tensor reads so far
    largest: int  # largest output (elements) of a member
    reach: int  # bitset: strict descendants of the members
    ancestors: int  # bitset: strict ancestors of the members
    tail_reads: int  # the node whose output a tail may read (the last member of a host's group), else -1
    sealed: bool  # a tail joined: the kernel is complete


@dataclass
class _State:
    cost: float
    groups: dict[int, _Group]  # open groups by id
    group_of: dict[int, int]  # live node -> open group id
    written: frozenset[int]  # live nodes whose output already crosses groups
    history: tuple | None  # (earlier history, (node, group, merged groups)): shared, not copied
    next_id: int


def plan_dp(graph: Graph, cost: FusionCost) -> Plan:
    """The minimum-cost legal plan (see the module docstring)."""
    start = time.perf_counter()
    a = Analysis(graph, cost)
    states = [_State(0.0, {}, {}, frozenset(), None, 0)]
    for v in range(len(a.nodes)):
        candidates: dict[tuple, _State] = {}
        for state in states:
            for new in _extend(a, state, v):
                key = _signature(a, new)
                if key not in candidates or new.cost < candidates[key].cost:
                    candidates[key] = new
        states = sorted(candidates.values(), key=lambda s: s.cost)[:BEAM]
    best = min(states, key=lambda s: s.cost)
    groups = _groups_from_history(best.history)
    total, traffic = plan_cost(graph, groups, cost, a)
    return Plan(groups, total, traffic, time.perf_counter() - start, "dp")


def _merges(a: Analysis, state: _State, v: int) -> list[tuple[int, ...]]:
    """The sets of v's producer groups v may join: any of those without an anchor or a
    tail, with at most one with (none if v is an anchor, but the attention core's group
    it continues); none that is sealed, none whose edges to v may not fuse; for a tail,
    the group whose last member it reads, if that group hosts it. Enumerating only
    these keeps a Concat of many convolutions' outputs (DenseNet's), or of many
    elementwise chains' (an unrolled scan's steps), linear, not exponential."""
    producer_groups = sorted({state.group_of[u] for u, _ in a.in_edges[v] if a.legality(u, v) is not Legality.NO} - {
        g for g, grp in state.groups.items() if grp.sealed})  # fmt: skip
    if a.tail[v]:  # a host's group it completes, or views it reads through
        return [(), *((g,) for g in producer_groups if state.groups[g].tail_reads == a.in_edges[v][0][0]
                      or not state.groups[g].members & ~a.views)]  # fmt: skip
    held = {g for g in producer_groups if state.groups[g].anchors or state.groups[g].members & a.tails}
    free = [g for g in producer_groups if g not in held]  # a tail's group is one kernel, as an anchor's
    anchored = [(g,) for g in producer_groups if g in held
                and (not a.anchor[v] or a.extends_core(state.groups[g].members, v))]  # fmt: skip
    plain = [c for size in range(len(free) + 1) for c in itertools.combinations(free, size)]
    merges = [tuple(sorted(c + one)) for c in plain for one in [(), *anchored]]
    return sorted(merges, key=lambda m: (len(m), m))  # smaller first: among equal costs, the first kept


def _extend(a: Analysis, state: _State, v: int):
    """Every legal way to place node v: a new group, or merged with producer groups."""
    processed = (1 << (v + 1)) - 1
    for merge in _merges(a, state, v):
        merged = [state.groups[g] for g in merge]
        members = (1 << v) | _or(g.members for g in merged)
        anchors = a.anchor[v] + sum(g.anchors for g in merged)
        if any(g.reach & h.members for g in merged for h in merged if g is not h):
            continue  # one reaches the other (an edge or a path): never merged afterwards
        if len(merged) + a.anchor[v] > 1 and not a.prologue_fits(members):
            continue  # ops before the group's anchor that its kernel cannot compute first
        inside = [(u, t) for u, t in a.in_edges[v] if members >> u & 1]
        if any(a.legality(u, v) is Legality.NO for u, _ in inside) or not a.addressing_fits(members, final=False):
            continue
        if a.gates_inside(members, v) and not a.gate_fits(members):
            continue
        reach = a.desc[v] | _or(g.reach for g in merged)
        ancestors = a.anc[v] | _or(g.ancestors for g in merged)
        if reach & ancestors & processed & ~members:
            continue  # a path leaves the group and comes back: not convex
        outside = [(u, t) for u, t in a.in_edges[v] if not members >> u & 1]
        written = set(state.written)
        extra = a.cost.launch_ns() * (1 - len(merge)) + a.compute_ns[v]
        extra += sum(a.read_ns(t) for t in a.graph_inputs_read[v])
        extra += sum(a.read_ns(t) for _, t in outside)
        extra += sum(a.fused_ns(u, v) for u, _ in inside)
        for u, _ in outside:  # u's output crosses groups: written once
            if u not in written and not a.is_graph_output[u]:
                extra += a.cost.traffic_ns(a.output_bytes[u])
                written.add(u)
        gid = merge[0] if merge else state.next_id
        groups = {g: grp for g, grp in state.groups.items() if g not in merge}
        groups[gid] = _Group(
            members, anchors,
            sum(g.reads for g in merged) + len(outside) + len(a.graph_inputs_read[v]),
            max([a.elements[v], *(g.largest for g in merged)]),
            reach, ancestors, v if not a.tail[v] and a.hosts_tail(members) else -1,
            a.tail[v] and any(g.tail_reads >= 0 for g in merged) or a.gates_inside(members, v),  # a tail completes it
        )  # fmt: skip
        group_of = {node: (gid if g in merge else g) for node, g in state.group_of.items()}
        group_of[v] = gid
        new = _State(state.cost + extra, groups, group_of, frozenset(written),
                     (state.history, (v, gid, merge)), state.next_id + (not merge))  # fmt: skip
        if _retire(a, new, v):
            yield new


def _or(values) -> int:
    out = 0
    for x in values:
        out |= x
    return out


def _retire(a: Analysis, state: _State, v: int) -> bool:
    """Charge v's write if it is a graph output; drop nodes no later node reads; close
    the groups left without a live member, charging their register pressure. False
    if a group closed holding data movement its product does not address."""
    if a.is_graph_output[v]:
        state.cost += a.cost.traffic_ns(a.output_bytes[v])
    for node in [n for n in state.group_of if a.last_use[n] <= v and not (n == v and a.consumers[v])]:
        del state.group_of[node]
    state.written = frozenset(n for n in state.written if n in state.group_of)
    live = set(state.group_of.values())
    for gid in [g for g in state.groups if g not in live]:
        closed = state.groups.pop(gid)
        state.cost += a.pressure_ns(closed.reads, closed.largest)
        if not a.kernel_fits(closed.members):
            return False
    return True


def _signature(a: Analysis, state: _State) -> tuple:
    """What the future depends on, and nothing more (so equivalent states merge):
    the live nodes' groups and written flags; per open group its counters, the live
    nodes outside it that it reaches, the live member a tail may read and whether a
    tail sealed it; which open groups reach each other.

    Exactness: a future node z may not join group G iff G reaches an outside node
    that reaches z; the last processed node on that path feeds a future node, so it
    is live, and it lies outside G (G is convex). Open groups that reach each other
    may never merge; two groups held by an anchor or a tail never merge anyway (a
    node joins one such group at most, `_merges`), so whether they reach each other
    is left out: the pairs among a hundred open steps of an unrolled recurrence are
    most of the work otherwise. Nothing else about the past constrains the future.
    """
    relabel: dict[int, int] = {}
    live = tuple(sorted((n, relabel.setdefault(g, len(relabel)), n in state.written)
                        for n, g in state.group_of.items()))  # fmt: skip
    live_mask = _or(1 << n for n in state.group_of)
    groups = tuple(sorted(
        (relabel[g], grp.anchors, grp.reads, grp.largest, grp.reach & live_mask & ~grp.members,
         grp.tail_reads if grp.tail_reads in state.group_of else -1, grp.sealed, grp.members & a.chain_nodes)
        for g, grp in state.groups.items()
    ))  # fmt: skip
    members = _or(grp.members for grp in state.groups.values())
    free = [(h, grp.members) for h, grp in state.groups.items() if not (grp.anchors or grp.members & a.tails)]
    every = [(h, grp.members) for h, grp in state.groups.items()]
    reaching = tuple(sorted((relabel[g], relabel[h]) for g, grp in state.groups.items()
                            if grp.reach & members & ~grp.members
                            for h, held in (free if grp.anchors or grp.members & a.tails else every)
                            if g != h and grp.reach & held))  # fmt: skip
    return live, groups, reaching


def _groups_from_history(history: tuple | None) -> list[list[int]]:
    """The final groups: union every merge into the group the merging node took."""
    steps = []
    while history is not None:
        history, step = history
        steps.append(step)
    steps.reverse()
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for _, gid, merged in steps:
        for g in merged:
            if find(g) != find(gid):
                parent[find(g)] = find(gid)
    groups: dict[int, list[int]] = {}
    for node, gid, _ in steps:
        groups.setdefault(find(gid), []).append(node)
    return [sorted(m) for m in groups.values()]
