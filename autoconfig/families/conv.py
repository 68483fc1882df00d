"""The convolution family's lowering: a Conv node (constant weights, any groups,
strides, dilations, pads) and the epilogue ops after it as one kernel (and a depthwise
layer's mean tail, its second output), its plan and the layout it writes chosen by the
convolution model; a 1x1 convolution of one pixel whose group ends in a gate tail, as
one excitation kernel (`kernels.excite`, planned by `models.excite`); and what a
convolution pays to read a tensor in each layout (the layout plan asks).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoconfig.builder import Builder, Epilogue, KernelGroup, Lowering, fail, match_epilogue, ops_of
from autoconfig.conv import node_shape, pool_config
from autoconfig.fusion.classify import gate_tail, mean_tail, streamed_input
from autoconfig.graph.ir import Node
from autoconfig.layouts import blocked_layouts, kept_layout, output_layouts, transform_back_ns
from autoconfig.lowering import conv_calls, pool_calls
from autoconfig.models import conv as conv_model
from autoconfig.models import excite as excite_model
from autoconfig.runtime import Call, Part, Ref
from kernels import conv as kc
from kernels import epilogue as ep
from kernels import excite as ex
from kernels import pool as pl
from kernels.emit import generate


def conv_layer(b: Builder, node: Node) -> tuple[kc.ConvShape, np.ndarray, str | None]:
    """A Conv node's shape, weights and bias (a constant's name, or None), checked."""
    g = b.graph
    if len(g.types[node.inputs[0]].shape) != 4 or not g.is_constant(node.inputs[1]):
        raise fail(node, "only 2-D convolutions with constant weights are generated")
    weight = np.asarray(g.constants[node.inputs[1]], np.float32)
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias and not g.is_constant(bias):
        raise fail(node, "a bias computed at run time is not generated")
    return node_shape(g, node), weight, bias


def conv_choice(b: Builder, node: Node, others: list[Node]) -> tuple[conv_model.ConvChoice, Epilogue, Epilogue | None]:
    """The model's choice for a Conv node with the other ops of its group: the epilogue
    ops after it (its bias first), the prologue before it and the mean tail last (which
    `classify.emittable_groups` has checked reads the epilogue's end); the matched
    chains."""
    shape, _, bias = conv_layer(b, node)
    before, tail = _before(b, node, others), _tail(b, others)
    chain = match_epilogue(b, node.outputs[0], [n for n in others if n not in before and n is not tail],
                           channel_axis=1)  # fmt: skip
    prologue = _prologue(b, node, before) if before else None
    epilogue = tuple([ep.bias()] if bias else []) + tuple(chain.ops)
    source = streamed_input(b.graph, before[0]) if before else node.inputs[0]
    # the first reader of its input since the threads before wrote it (an NCHW plan on a
    # blocked input reads the transform's output, written just before, too)
    fresh = b.threads > 1 and (b.unread(source) or b.layout(source) != "nchw")
    choice = b.choose(conv_model.choose, shape, epilogue, model_bytes=b.model_bytes,
                      prologue=tuple(prologue.ops) if prologue else (), mean=tail is not None,
                      fast_winograd=b.fast_winograd, fresh_input=fresh)  # fmt: skip
    return choice, chain, prologue


def _tail(b: Builder, others: list[Node]) -> Node | None:
    """The group's mean tail, if it has one."""
    return others[-1] if others and mean_tail(b.graph, others[-1]) else None


def _before(b: Builder, node: Node, others: list[Node]) -> list[Node]:
    """The ops of `others` that are `node`'s prologue."""
    return [n for n in others if b.prologue_of.get(n.name) is node]


def _prologue(b: Builder, node: Node, before: list[Node]) -> Epilogue:
    """The ops `before` a convolution, from the value they stream to its input, as ops on
    each input element with one operand value per input channel."""
    chain = match_epilogue(b, streamed_input(b.graph, before[0]), before, channel_axis=1)
    if chain.end != node.inputs[0] or any(op.operand == "output" for op in chain.ops):
        raise fail(before[0], f"is not a per-channel prologue of convolution {node.name!r}")
    return chain


def _gate(b: Builder, node: Node, others: list[Node]) -> Node | None:
    """The group's gate tail, if it has one: its last op, scaling by gates the group
    computes (a Mul by gates computed elsewhere is an epilogue op)."""
    last = others[-1] if others else None
    computed = {out for n in [node, *others] for out in n.outputs}
    return last if last is not None and gate_tail(b.graph, last) in computed else None


def _excite(b: Builder, node: Node, others: list[Node], tail: Node) -> KernelGroup:
    """The convolution of one pixel, the ops on its output and the tensor they scale (the
    gate tail's other input), as one excitation kernel."""
    g = b.graph
    shape, weight, bias = conv_layer(b, node)
    gates = gate_tail(g, tail)
    chain = match_epilogue(b, node.outputs[0], others, channel_axis=1)
    if chain.end != gates or any(op.operand == "output" for op in chain.ops):
        raise fail(tail, f"scales by a value the ops after convolution {node.name!r} do not end on")
    tensor, out = next(i for i in tail.inputs if i != gates), tail.outputs[0]
    n, c, h, w = g.types[out].shape
    layout = kept_layout(b, b.layout(tensor), out, (n, c, h, w))
    epilogue = ((ep.bias(),) if bias else ()) + tuple(chain.ops)
    best = b.choose(excite_model.choose, excite_model.ExciteShape(n, c, shape.channels, h * w), epilogue,
                    layout=layout, model_bytes=b.model_bytes)  # fmt: skip
    config, threads = best.plan.config, best.plan.threads
    x = b.read(tensor, layout)
    squeezed = b.read(node.inputs[0], b.layout(node.inputs[0]))  # one pixel: every layout is one order
    operands = ([b.constant(g.constants[bias])] if bias else []) + chain.refs(b)
    buffers = (b.write(out, layout), b.scratch(n * c), x, squeezed, b.constant(config.weights(weight)), *operands)
    call = Call(config.symbol, tuple(Part(buffers, r) for r in best.plan.ranges()))
    return KernelGroup(node.name, ops_of([node, *others, tail]), "conv", [call], b.modules(ex.generate, config),
                       best.total_ns, best.report(f"excitation of {n}x{c}x{h}x{w} by {shape.channels} values",
                                                  b.target.name, b.profile.name, "", "terms (ns):"),
                       f"excitation nv={config.nv}{' ' + layout if layout != 'nchw' else ''}, {threads} thread(s)")


def _conv(b: Builder, node: Node, others: list[Node]) -> KernelGroup:
    g = b.graph
    tail = _gate(b, node, others)
    if tail is not None:
        return _excite(b, node, others[:-1], tail)
    shape, weight, bias = conv_layer(b, node)
    choice, chain, prologue = conv_choice(b, node, others)
    before = _before(b, node, others)
    source = streamed_input(g, before[0]) if before else node.inputs[0]
    best, why = conv_model.choose_layout(choice, b.layout(source), output_layouts(b, chain.end), b.machine)
    plan = best.plan
    conv_model.validate_plan(plan, b.target)
    layout = kc.layout_of(plan.config)
    x = b.read(source, kc.input_layout_of(plan.config))
    operands = ([b.constant(g.constants[bias])] if bias else []) + chain.refs(b, layout)
    y = b.write(chain.end, layout)
    tail = _tail(b, others)
    written = b.write(tail.outputs[0]) if tail is not None else None  # the kernel's second output: [N, C] means
    means, combine = _band_means(b, plan, written) if written else (None, None)
    calls = conv_calls(plan, x, y, weight, operands + ([means] if means else []), b,
                       prologue.refs(b) if prologue else None)  # fmt: skip
    modules = b.modules(generate, plan.config)
    if combine is not None:  # each channel's mean over the bands' means
        calls += pool_calls(combine, 1, means, written, b)
        modules += b.modules(pl.generate, combine)
    layouts = conv_model.layouts_of(plan.config)
    return KernelGroup(node.name, ops_of([*before, node, *(n for n in others if n not in before)]), "conv", calls,
                       modules, best.total_ns, f"{replace(choice, best=best).explain()}\n{why}",
                       f"{plan.config.algorithm} {plan.config.tile}{' ' + layouts if layouts != 'nchw' else ''}"
                       f"{', prologue ' + ep.describe(prologue.ops) if prologue else ''}"
                       f"{', channel means' if tail is not None else ''}, {plan.threads} thread(s)")  # fmt: skip


def _band_means(b: Builder, plan: conv_model.ConvPlan, means: Ref) -> tuple[Ref, pl.PoolConfig | None]:
    """Where a kernel writing channel means puts them: `means` itself, or with bands of
    rows (each thread its own band) a scratch of each band's means, and the global
    average over the bands that then writes `means` (on one thread: a few vectors)."""
    c = plan.config
    if c.bands == 1:
        return means, None
    band_means = pl.PoolShape(c.shape.batch, c.shape.channels, 1, c.bands, "global_average")
    return b.scratch(c.bands * c.shape.batch * c.shape.channels), replace(pool_config(band_means, b.target, c.lanes),
                                                                          layout=c.layout)  # fmt: skip


def _reads_blocked(b: Builder, reader: Node, value: str) -> bool:
    """A convolution's kernel reads its input, or its epilogue's residual, in any layout;
    a prologue reads for its convolution, which may read NCHW only."""
    conv = b.prologue_of.get(reader.name)
    if conv is not None:
        choice = _own_choice(b, conv)[0]
        return any(kc.input_layout_of(p.config) != "nchw" for p in choice.per_algorithm)
    return reader.op != "Conv" or reader.inputs[0] == value


def _own_choice(b: Builder, conv: Node) -> tuple[conv_model.ConvChoice, Epilogue, Epilogue | None]:
    """The model's choice for a Conv node with its own group's prologue and epilogue."""
    return conv_choice(b, conv, b.group_ops[conv.name])


def _reading_ns(b: Builder, reader: Node, value: str, layout: kc.Layout) -> float:
    """What a convolution reading `value` as its input (itself, or through its prologue)
    pays if it is held in `layout`: its best plan reading that layout, or the best
    reading another after a transform, whichever is faster, among the plans writing a
    layout its own readers take (the model's choice for it, its prologue and epilogue,
    the one its own kernel will use; a layer with no plan reading blocks pays the
    transform back, one with no plan writing a layout its readers take pays its
    output's). An epilogue's residual reads any layout at one cost."""
    conv = b.prologue_of.get(reader.name)
    if conv is None and (reader.op != "Conv" or reader.inputs[0] != value):
        return 0.0
    reader = conv or reader
    if _gate(b, reader, b.group_ops[reader.name]) is not None:
        return 0.0  # an excitation reads one pixel, in every layout the same order
    shape = conv_layer(b, reader)[0]
    if not conv_model.reads_blocked(shape, b.machine, b.target):  # NCHW, after a transform if blocked
        return transform_back_ns(b, shape.input_shape, layout)
    choice, chain, _ = _own_choice(b, reader)  # asked once
    writes = dict.fromkeys(("nchw", *blocked_layouts(b, chain.end)), 0.0)
    allowed = tuple(writes) if any(kc.layout_of(p.config) in writes for p in choice.per_algorithm) else \
        ("nchw", "nchwc", "nhwc")  # as `choose_layout`: none writes those, so any, then transformed back
    costs = []
    for source in ("nchw", "nchwc", "nhwc"):
        best = choice.best_in((source,), allowed)
        if best is not None:
            shift = conv_model.transform_ns(shape, best, b.machine, layout, source, b.target.f32_lanes)
            costs.append(best.total_ns + shift + conv_model.written_ns(best, writes, b.machine, b.target.f32_lanes))
    return min(costs)


LOWERINGS = {"Conv": Lowering(_conv, _reads_blocked, _reading_ns, writes_blocks=True)}
"""The convolution family's operator."""
