"""The layout plan: which layout each tensor between kernels is held in. A tensor between
convolutions may be held channel-blocked, NCHW[c], or NHWC (`kernels.nchwc`; NHWC
where its channels fill no block of the widest vectors, when a measured width
divides them), where every reader's family reads that layout (`Lowering.reads_blocked`)
and it has more than one pixel. Each convolution's plan, and so the layout it writes,
is chosen by `autoconfig.models.conv.choose_layout` counting what its readers then pay
(`reading_ns`); an elementwise kernel keeps its input's layout unless its readers pay
more than the transform back. A reader that needs another layout gets a transform
kernel, run just before it, once per tensor. Graph inputs and outputs are NCHW.
"""

from __future__ import annotations

import math

from autoconfig.builder import Builder, Lowering
from autoconfig.graph.ir import Node
from autoconfig.graph.ops import Kernel, info
from autoconfig.models import conv as conv_model
from kernels import conv as kc
from kernels.nchwc import Reblock


def blocked_layouts(b: Builder, value: str) -> tuple[kc.Layout, ...]:
    """The blocked layouts `value` may be written in (`blockable`), where every reader's
    family reads it so (`Lowering.reads_blocked`: convolutions' kernels, as their input
    or their epilogue's residual, elementwise kernels, global average pools), never a
    view, and channel concatenations of such tensors (`concat_takes_blocks`: NCHW[c]
    only, where the inputs' blocks follow one another) — any other reader would need it
    transformed back."""
    layouts = blockable(b, value)
    readers = b.consumers.get(value, [])
    if not readers:
        return ()
    for n in readers:
        if info(n).kernel is Kernel.VIEW:  # a view in the writer's own group reads NCHW too, after it
            return ()
        if concat_takes_blocks(b, n):
            layouts = tuple(layout for layout in layouts if layout == "nchwc")
        elif not _reads_blocked(b, n, value):
            return ()
    return layouts


def _family(b: Builder, reader: Node) -> Lowering | None:
    """The family of the kernel `reader` is lowered into (its group's anchor, or the
    elementwise group; None for views and data movement)."""
    return b.families.get(b.anchor_of.get(reader.name, ""))


def _reads_blocked(b: Builder, reader: Node, value: str) -> bool:
    family = _family(b, reader)
    return family is not None and family.reads_blocked(b, reader, value)


def blockable(b: Builder, value: str) -> tuple[kc.Layout, ...]:
    """The blocked layout of a computed 4-D tensor of more than one pixel (with one,
    every layout is the same memory), not a graph output: NCHW[c] where its channels
    fill blocks of the widest vectors, else NHWC where a measured width divides them
    (its transforms run at that width; see `models.conv.choose` for why not both)."""
    shape = b.graph.types[value].shape
    if (b.target.scalable or b.graph.is_constant(value) or value in b.graph.inputs
            or value in b.graph.outputs or len(shape) != 4 or shape[2] * shape[3] <= 1):  # fmt: skip
        return ()
    lanes = b.target.f32_lanes
    if shape[1] % lanes == 0:
        return ("nchwc",)
    return ("nhwc",) if math.gcd(lanes, shape[1]) in b.machine.fma_by_lanes else ()


def concat_takes_blocks(b: Builder, node: Node) -> bool:
    """A Concat along the channels of one image whose inputs are all blockable and
    written by kernels that may write blocks (`Lowering.writes_blocks`): the blocks of
    its inputs, one after the other, are its output's blocks."""
    if node.op != "Concat" or b.graph.types[node.outputs[0]].shape[0] != 1:
        return False
    if node.attrs.get("axis", 0) % len(b.graph.types[node.outputs[0]].shape) != 1:
        return False
    return all("nchwc" in blockable(b, v)
               and _writes_blocks(b, b.producer[v])
               for v in node.inputs)  # fmt: skip


def _writes_blocks(b: Builder, writer: Node) -> bool:
    family = _family(b, writer)
    return family is not None and family.writes_blocks


def reading_ns(b: Builder, value: str, layout: kc.Layout) -> float:
    """What `value`'s readers pay if it is written in `layout` (beyond a common part):
    each reader's family says (`Lowering.reading_ns`; a family without one reads any
    layout at one cost, or never sees a blocked one)."""
    total = 0.0
    for reader in b.consumers.get(value, []):
        family = _family(b, reader)
        if family is not None and family.reading_ns is not None:
            total += family.reading_ns(b, reader, value, layout)
    return total


def transform_back_ns(b: Builder, shape: tuple[int, ...], layout: kc.Layout) -> float:
    """The predicted time of a tensor of NCHW `shape` held in `layout` transformed
    back (none if NCHW)."""
    if layout == "nchw":
        return 0.0
    config = Reblock.of(shape, b.target.f32_lanes, False, layout)
    return conv_model.reblock_ns(config, b.machine, b.threads)[0]


def kept_layout(b: Builder, held: kc.Layout, value: str, input_shape: tuple[int, ...]) -> kc.Layout:
    """The layout of a kernel that writes `value` in its input's layout (elementwise ops,
    windowed pools), its input held in `held`: that one, unless `value`'s readers pay
    more for it than the input's transform back to NCHW saves."""
    return _passing(b, held, value, input_shape)[0]


def passing_ns(b: Builder, value: str, input_shape: tuple[int, ...], layout: kc.Layout) -> float:
    """What the readers of `value`, written by such a kernel, pay (with the kernel's
    transform back, if it takes one) when the kernel's input is held in `layout`."""
    return _passing(b, layout, value, input_shape)[1]


def _passing(b: Builder, held: kc.Layout, value: str, input_shape: tuple[int, ...]) -> tuple[kc.Layout, float]:
    """(`kept_layout`, `passing_ns`): the cheaper of keeping `held` and going back to NCHW."""
    options = output_layouts(b, value)
    back = options["nchw"] + transform_back_ns(b, input_shape, held)
    if held != "nchw" and held in options and options[held] <= back:
        return held, options[held]
    return "nchw", back


def output_layouts(b: Builder, value: str) -> dict[kc.Layout, float]:
    """The layouts `value` may be written in, each with what its readers then pay
    (`blocked_layouts`, `reading_ns`)."""
    return {layout: reading_ns(b, value, layout) for layout in ("nchw", *blocked_layouts(b, value))}
