"""The convolution family's lowering: a Conv node (constant weights, any groups,
strides, dilations, pads) and the epilogue ops after it as one kernel, its plan and
the layout it writes chosen by the convolution model; and what a convolution pays to
read a tensor in each layout (the layout plan asks).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoconfig.builder import (
    Builder, Epilogue, KernelGroup, Lowering, fail, match_epilogue, ops_of, window_pads, window_strides,
)  # fmt: skip
from autoconfig.conv import conv_shape
from autoconfig.graph.ir import Node
from autoconfig.layouts import blocked_layouts, output_layouts, transform_back_ns
from autoconfig.lowering import conv_calls
from autoconfig.models import conv as conv_model
from kernels import conv as kc
from kernels import epilogue as ep
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
    strides = tuple(node.attrs.get("strides", (1, 1)))
    dilations = tuple(node.attrs.get("dilations", (1, 1)))
    pads = window_pads(node, g, weight.shape[2:], strides, dilations)
    strides = window_strides(node, g, strides, pads)
    shape = conv_shape(g.types[node.inputs[0]].shape, weight.shape, strides=strides, pads=pads,
                       dilations=dilations, group=node.attrs.get("group", 1))  # fmt: skip
    return shape, weight, bias


def conv_choice(b: Builder, node: Node, after: list[Node]) -> tuple[conv_model.ConvChoice, Epilogue]:
    """The model's choice for a Conv node and the epilogue ops `after` it (its bias
    first), and the matched chain."""
    shape, _, bias = conv_layer(b, node)
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=1)
    epilogue = tuple([ep.bias()] if bias else []) + tuple(chain.ops)
    return b.choose(conv_model.choose, shape, epilogue, model_weights=b.model_weights), chain


def _conv(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    g = b.graph
    shape, weight, bias = conv_layer(b, node)
    choice, chain = conv_choice(b, node, after)
    given = b.layout(node.inputs[0])
    best, why = conv_model.choose_layout(choice, given, output_layouts(b, chain.end), b.machine)
    plan = best.plan
    conv_model.validate_plan(plan, b.target)
    layout = kc.layout_of(plan.config)
    x = b.read(node.inputs[0], kc.input_layout_of(plan.config))
    operands = ([b.constant(g.constants[bias])] if bias else []) + chain.refs(b, layout)
    y = b.write(chain.end, layout)
    calls = conv_calls(plan, x, y, weight, operands, b)
    layouts = conv_model.layouts_of(plan.config)
    return KernelGroup(node.name, ops_of([node, *after]), "conv", calls, b.modules(generate, plan.config),
                       best.total_ns, f"{replace(choice, best=best).explain()}\n{why}",
                       f"{plan.config.algorithm} {plan.config.tile}{' ' + layouts if layouts != 'nchw' else ''}, "
                       f"{plan.threads} thread(s)")  # fmt: skip


def _reads_blocked(b: Builder, reader: Node, value: str) -> bool:
    """A convolution's kernel reads its input, or its epilogue's residual, in any layout."""
    return reader.op != "Conv" or reader.inputs[0] == value


def _reading_ns(b: Builder, reader: Node, value: str, layout: kc.Layout) -> float:
    """What a convolution reading `value` as its input pays if it is held in `layout`:
    its best plan reading that layout, or the best reading another after a transform,
    whichever is faster, among the plans writing a layout its own readers take (the
    model's choice for it and its epilogue, the one its own kernel will use; a layer
    with no plan reading blocks pays the transform back). An epilogue's residual reads
    any layout at one cost."""
    if reader.op != "Conv" or reader.inputs[0] != value:
        return 0.0
    shape = conv_layer(b, reader)[0]
    if not conv_model.reads_blocked(shape, b.machine, b.target):  # NCHW, after a transform if blocked
        return transform_back_ns(b, shape.input_shape, layout)
    choice, chain = conv_choice(b, reader, b.after_anchor[reader.name])  # its own, asked once
    writes = ("nchw", *blocked_layouts(b, chain.end))
    costs = []
    for source in ("nchw", "nchwc", "nhwc"):
        best = choice.best_in((source,), writes)
        if best is not None:
            shift = conv_model.transform_ns(shape, best, b.machine, layout, source, b.target.f32_lanes)
            costs.append(best.total_ns + shift)
    return min(costs)


LOWERINGS = {"Conv": Lowering(_conv, _reads_blocked, _reading_ns)}
"""The convolution family's operator."""
