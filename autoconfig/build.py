"""The lowering pass (`autoconfig.compiler`, pass 4): it reads the simplified graph and
its fusion plan and writes the model's kernels, program and memory plan
(`BuiltModel`). Every group of the fusion plan becomes one generated kernel (or none,
for a view or a concatenation its producers write into), in dependency order:

- a group anchored by an operator is that operator's family's kernel (`FAMILIES`,
  gathered from `autoconfig.families`: convolution, matrix product, pooling, softmax,
  normalization, data movement), the elementwise ops after the anchor its epilogue
  (`builder.match_epilogue`);
- an attention core (two products and the softmax between them) is one
  `kernels.attention` kernel (`families.attention`);
- a group of elementwise ops alone is one `kernels.elementwise` kernel: the same
  epilogue on a tensor streamed from memory;
- Reshape, Flatten, Squeeze, Unsqueeze are views: the same buffer;
- anything else stops the build with one line naming the node and operator: nothing
  falls back to numpy.

The layout each tensor is held in is planned as its writer is lowered
(`autoconfig.layouts`); buffers are placed in one arena at the end (`Builder.place`).
"""

from __future__ import annotations

from graphlib import TopologicalSorter

from autoconfig.builder import (
    ELEMENTWISE_GROUP, VIRTUAL, Builder, BuiltModel, KernelGroup, Lowering, aligned, copy_call,
    elementwise_kernel, fail, match_epilogue, ops_of, plane_axis, reads_any_layout, streaming,
)  # fmt: skip
from autoconfig.errors import REFUSALS, AutoconfigError, reraised
from autoconfig.families import attention, conv, matmul, movement, normalization, pool, recurrent, softmax
from autoconfig.families.attention import ATTENTION
from autoconfig.fusion import addressing
from autoconfig.fusion import plan as fusion_plan
from autoconfig.fusion.classify import attention_cores, streamed_input
from autoconfig.fusion.planning import Plan
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Kernel, info
from autoconfig.layouts import kept_layout
from autoconfig.profile import HardwareProfile
from autoconfig.runtime import Call, Part, Ref
from kernels.cache import KernelCache
from kernels.target import Target

FAMILIES: dict[str, Lowering] = {**conv.LOWERINGS, **matmul.LOWERINGS, **pool.LOWERINGS, **softmax.LOWERINGS,
                                 **normalization.LOWERINGS, **movement.LOWERINGS, **attention.LOWERINGS,
                                 **recurrent.LOWERINGS,
                                 ELEMENTWISE_GROUP: Lowering(None, reads_any_layout, writes_blocks=True)}  # fmt: skip
"""The lowering registry: each family's operators, and the group of elementwise ops
alone (lowered by `_elementwise`, reading any layout)."""


def _group_order(graph: Graph, groups: list[list[int]]) -> list[list[int]]:
    """The groups in an order where each runs after the groups it reads from (ties in
    the order of their first node, so a build is reproducible)."""
    group_of = {v: g for g, members in enumerate(groups) for v in members}
    producer = {out: i for i, n in enumerate(graph.nodes) for out in n.outputs}
    order = TopologicalSorter()
    for g in sorted(range(len(groups)), key=lambda g: min(groups[g])):
        order.add(g, *sorted({group_of[producer[i]] for v in groups[g] for i in graph.nodes[v].inputs
                              if i in producer} - {g}))  # fmt: skip
    return [sorted(groups[g]) for g in order.static_order()]


def _lower_group(b: Builder, members: list[Node]) -> KernelGroup | None:
    """The kernel of one group (None: views and concatenations, which need none, and
    groups whose outputs are all empty)."""
    outputs = [out for n in members for out in n.outputs if out]
    if all(b.graph.types[out].elements == 0 for out in outputs):
        for out in outputs:
            b.write(out)
        return None
    absorbed = b.absorbed.get(members[0].name, set())
    group = _lower_computed(b, [n for n in members if n.name not in absorbed])  # the product addresses those
    if group is not None:
        if absorbed:
            group.ops = ops_of([n for n in members if n.name in absorbed]) + group.ops
        _check_escapes(b, members, group)
    return group


def _lower_computed(b: Builder, members: list[Node]) -> KernelGroup | None:
    """`_lower_group` of the nodes that are not the data movement a product addresses."""
    kinds = [info(n).kernel for n in members]
    views = [n for n, k in zip(members, kinds) if k is Kernel.VIEW]
    anchors = [n for n, k in zip(members, kinds) if k in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)]
    moving = [n for n, k in zip(members, kinds) if k is Kernel.MOVEMENT]
    if moving:
        if len(members) > 1:
            raise fail(moving[0], f"{moving[0].op} shares its group with other ops; data movement is its own kernel")
        return FAMILIES[moving[0].op].lower(b, moving[0], [])
    head = [n for n in views if anchors and members.index(n) < members.index(anchors[0])]
    for v in head:  # the anchor reads its input in another shape
        b.alias(v.outputs[0], v.inputs[0])
    compute = [n for n in members if n not in views]
    if not compute:
        for v in views:
            b.alias(v.outputs[0], v.inputs[0])
        return None
    if not anchors:
        group = _elementwise(b, compute)
    elif b.anchor_of[anchors[0].name] == ATTENTION:  # `fusion.classify.attention_cores`
        group = FAMILIES[ATTENTION].lower(b, anchors[0], [n for n in compute if n is not anchors[0]])
    else:
        group = _anchor(b, anchors[0], [n for n in compute if n is not anchors[0]])
    for v in views:
        if v not in head:  # the kernel's output in another shape
            b.alias(v.outputs[0], v.inputs[0])
    return group


def _lower_named(b: Builder, members: list[Node]) -> KernelGroup | None:
    """`_lower_group`, its errors naming a node (the group's anchor, else its first) where
    the check that failed did not."""
    try:
        return _lower_group(b, members)
    except REFUSALS as err:
        if str(err).startswith("node '"):
            raise
        kinds = (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)
        raise fail(next((n for n in members if info(n).kernel in kinds), members[0]), str(err)) from None


def _check_escapes(b: Builder, members: list[Node], group: KernelGroup) -> None:
    """A value computed inside a kernel and read outside it would need a second output."""
    inside = {n.name for n in members}
    written = set(b.where)
    for n in members:
        for out in n.outputs:
            readers = [c for c in b.consumers.get(out, []) if c.name not in inside]
            if (readers or out in b.graph.outputs) and out not in written:
                raise fail(n, f"its output {out!r} is read outside kernel {group.name}, which does not write it")


def _anchor(b: Builder, anchor: Node, after: list[Node]) -> KernelGroup:
    if after and info(anchor).kernel is not Kernel.EPILOGUE_ANCHOR:
        raise fail(after[0], f"{anchor.op} kernels have no epilogue")
    family = FAMILIES.get(anchor.op)
    if family is None:
        raise fail(anchor, f"no generated kernel for {anchor.op} yet")
    return family.lower(b, anchor, after)


def _elementwise(b: Builder, nodes: list[Node]) -> KernelGroup:
    """A chain of elementwise ops alone: the epilogue on a tensor streamed from memory,
    in the layout that tensor is held in where its readers can take it (NCHW else)."""
    first = nodes[0]
    out_shape = b.graph.types[first.outputs[0]].shape
    start = streamed_input(b.graph, first)
    if start is None:
        raise fail(first, "every input is a constant; it should have been folded")
    chain = match_epilogue(b, start, nodes, plane_axis(out_shape), out_shape)
    if b.graph.types[start].shape != out_shape:  # every computed input is broadcast
        start = b.broadcast(start, out_shape)
    layout = kept_layout(b, b.layout(start), chain.end, out_shape)
    x = b.read(start, layout)
    operands = chain.refs(b, layout)
    y = b.write(chain.end, layout)
    return elementwise_kernel(b, first.name, ops_of(nodes), x, y, out_shape, tuple(chain.ops), operands, layout)


def _output_copy(b: Builder, name: str) -> KernelGroup | None:
    """A graph output the arena does not hold (a constant, a graph input, a view of
    one) copied into it, as onnxruntime returns a copy; an empty one needs nothing. One
    held in channel blocks (a layer writing channel means writes no other layout) is
    transformed back to NCHW (queued for `Builder.finish_step`)."""
    size = b.graph.types[name].elements
    if b.layout(name) != "nchw":
        b.where[name] = b.where[b._transformed(name, "nchw")]
        del b.layouts[name]
        return None
    held = name in b.where and b.buffers[b._absolute(b.where[name][0], 0)[0]].input_index is None
    if held and not b.graph.is_constant(name):
        return None
    source = b.read(name)
    out = b.write(name)
    if size == 0:
        return None
    call, modules = copy_call(b, out, source, size)
    return streaming(b, f"{name}_copy", [f"{name} (output copy)"], "copy", [call], modules,
                      8 * size, "the output copied out of the input or the weights")


@reraised
def build_model(graph: Graph, profile: HardwareProfile, target: Target, fusion: str = "dp",
                threads: int | None = None, cache: KernelCache | None = None,
                plan: Plan | None = None, fast_winograd: bool = False) -> BuiltModel:  # fmt: skip
    """The kernels, program and memory plan of `graph` (see the module docstring) for
    the fusion `plan` (planned by `fusion` when not given); with a kernel cache, the
    models' choices and generated modules it holds are reused; `fast_winograd` lets
    3x3 layers use Winograd F(4,3) (`models.conv.winograd_tiles`)."""
    for name in graph.inputs + graph.outputs:
        if graph.types[name].dtype != "float32" and not (name in graph.inputs and graph.types[name].dtype == "int64"):
            kind = "input" if name in graph.inputs else "output"
            raise AutoconfigError(f"{kind} {name!r} is {graph.types[name].dtype}; only float32 models (and int64 "
                                  f"inputs, and int64 or bool outputs computed by the model) are built")  # fmt: skip
    threads = min(threads or int(profile.cores), int(profile.cores))
    b = Builder(graph, profile, target, threads, cache, FAMILIES, fast_winograd)
    plan = plan or fusion_plan(graph, profile, fusion, b.decisions, threads)
    chains, cores = addressing.chains(graph), attention_cores(graph)
    for members in plan.groups:
        runs = addressing.absorbed(graph, members, chains)
        if runs:
            absorbed = {graph.nodes[u].name for u in addressing.run_members(runs)}
            b.absorbed[graph.nodes[min(members)].name] = absorbed
            b.addressed |= {graph.nodes[v].name: maps for v, maps in addressing.maps_of(runs).items()}
            members = [v for v in members if graph.nodes[v].name not in absorbed]
        nodes = [graph.nodes[v] for v in members]
        kinds = {info(n).kernel for n in nodes}
        anchor = ATTENTION if any(set(core.nodes) <= set(members) for core in cores) else next(
            (n.op for n in nodes if info(n).kernel in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)),
            ELEMENTWISE_GROUP if kinds == {Kernel.ELEMENTWISE} else "")  # fmt: skip
        b.anchor_of |= {n.name: anchor for n in nodes}
        compute = [n for n in nodes if info(n).kernel is not Kernel.VIEW]
        for i, n in enumerate(compute):
            if n.op == anchor:
                b.group_ops[n.name] = [m for m in compute if m is not n]
                b.prologue_of |= {m.name: n for m in compute[:i]}
    kernels = []
    for members in _group_order(graph, plan.groups):
        group = _lower_named(b, [graph.nodes[v] for v in members])
        kernels += b.finish_step()  # layout transforms it reads, one step before it
        if group is not None:
            kernels.append(group)
            b.step += 1
    for name in dict.fromkeys(graph.outputs):
        group = _output_copy(b, name)
        kernels += b.finish_step()
        if group is not None:
            kernels.append(group)
            b.step += 1
    pinned = [*graph.outputs, *graph.converted]
    near, near_arena = (), 0
    if b.cooling():  # the program for cores that share their caches: memory reused at once
        near_arena = b.place(graph.outputs, pinned, cool=False)
        near, near_ends = tuple(c for k in kernels for c in _resolved(b, k.calls)), _ends(b, graph)
    arena = b.place(graph.outputs, pinned)
    for k in kernels:
        k.calls = _resolved(b, k.calls)
    outputs, conversions = _ends(b, graph)
    near = near if b.cooled else ()  # the cooling halved to none: one program
    assert not near or near_ends == (outputs, conversions), "pinned buffers moved between placements"
    intermediate = sum(aligned(buf.size) for buf in b.buffers if buf.inside is None and buf.input_index is None)
    return BuiltModel(graph, profile, target, plan.strategy, threads, kernels, tuple(b.weights), arena, intermediate,
                      b.cooled, outputs, conversions, tuple(graph.ids_below.get(n, 0) for n in graph.inputs),
                      near, near_arena)  # fmt: skip


def _ends(b: Builder, graph: Graph) -> tuple[list[tuple[str, int]], tuple[tuple[int, int, int], ...]]:
    """Where the runner finds each output, and writes each converted int64 input, in the
    arena as `b` has placed it."""
    outputs = [(name, b.resolve(Ref(VIRTUAL + b.where[name][0], b.where[name][1])).offset) for name in graph.outputs]
    conversions = tuple((graph.inputs.index(source), b.resolve(Ref(VIRTUAL + b.where[name][0])).offset,
                         graph.types[name].elements) for name, source in graph.converted.items())  # fmt: skip
    return outputs, conversions


def _resolved(b: Builder, calls: list[Call]) -> list[Call]:
    """`calls` with every buffer at its place in the arena as `b` has placed it."""
    return [Call(c.symbol, tuple(Part(tuple(b.resolve(r) for r in p.buffers), p.sizes) for p in c.parts))
            for c in calls]  # fmt: skip

