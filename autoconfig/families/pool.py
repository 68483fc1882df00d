"""The pooling family's lowering: MaxPool and AveragePool in 1-D, 2-D and 3-D (3-D as
two 2-D pools), GlobalAveragePool and GlobalMaxPool, and ReduceMean and ReduceMax over
any axes; global pools read channel-blocked tensors in place, 2-D windowed ones read
them and write their own output in the same layout where its readers gain by it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autoconfig.builder import Builder, KernelGroup, Lowering, fail, ops_of, permuted, streaming
from autoconfig.conv import pool_config, pool_shape
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.windows import window_pads, window_strides
from autoconfig.graph.ops import reduced_axes
from autoconfig.layouts import kept_layout, passing_ns
from autoconfig.lowering import pool_calls
from autoconfig.models import conv as conv_model
from kernels import pool as pl

POOL_KINDS = {"MaxPool": "max", "AveragePool": "average", "GlobalAveragePool": "global_average",
              "GlobalMaxPool": "global_max"}  # fmt: skip

REDUCTIONS = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}
"""Reductions over any axes, each the global pool it is over a plane's elements."""

BLOCKED_POOLS = ("GlobalAveragePool", "GlobalMaxPool", *REDUCTIONS)
"""Poolings that read a channel-blocked input (a spatial reduction is one; any other
fails the build whatever its input's layout)."""


def _pool(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    """A pooling: 1-D and 2-D as one 2-D pooling kernel; 3-D as two on views of the same
    memory, over (height, width) of every depth slice, then over depth (a box window's
    maximum, and its average with per-axis tap counts, are separable)."""
    g = b.graph
    if node.op in REDUCTIONS:
        axes, shape = _reduced_axes(node, g), g.types[node.inputs[0]].shape
        if axes != (2, 3) or len(shape) != 4:
            return _reduce(b, node, axes)
        node = Node(node.name, REDUCTIONS[node.op], node.inputs[:1], node.outputs, {})
    input_shape = g.types[node.inputs[0]].shape
    if len(input_shape) not in (3, 4, 5):
        raise fail(node, f"only 1-D, 2-D and 3-D pooling is generated, not {len(input_shape) - 2}-D")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise fail(node, "the Indices output of MaxPool is not generated")
    shapes = _pool_passes(node, g)
    declared = g.types[node.outputs[0]].shape
    if math.prod(shapes[-1].output_shape) != math.prod(declared):  # ReduceMean may drop the 1×1
        raise fail(node, f"onnx's shape inference gives {declared}, but onnxruntime and PyTorch drop a ceil_mode "
                          f"window that starts in the padding: {tuple(shapes[-1].output_shape)}; not built")  # fmt: skip
    configs = [pool_config(shape, b.target) for shape in shapes]
    layout = _layout(b, node)
    if layout != "nchw":  # vectors of the input's channels, at a width dividing them
        lanes = math.gcd(configs[0].lanes, shapes[0].channels)  # (NHWC's may fill no block of the widest)
        configs = [replace(pool_config(shapes[0], b.target, lanes), layout=layout)]
    threads = min(b.threads, max(c.units() for c in configs))
    x = b.read(node.inputs[0], layout)
    y = b.write(node.outputs[0], layout if node.op in WINDOWED else "nchw")
    middle = [b.scratch(math.prod(c.shape.output_shape)) for c in configs[:-1]]
    calls = [call for c, source, dest in zip(configs, [x, *middle], [*middle, y])
             for call in pool_calls(c, threads, source, dest, b)]  # fmt: skip
    moved = sum(4 * (math.prod(c.shape.input_shape) + math.prod(c.shape.output_shape)) for c in configs)
    loads = round(sum(c.loads_per_unit() * math.ceil(c.units() / threads) for c in configs)
                  * conv_model.unaligned_load_cost(configs[0].lanes, b.machine))  # in aligned loads
    modules = [m for c in configs for m in b.modules(pl.generate, c)]
    return streaming(b, node.name, ops_of([node]), "pool", calls, modules, moved,
                      f"{' then '.join(c.shape.describe() for c in configs)}"
                      f"{'' if configs[0].layout == 'nchw' else ' ' + configs[0].layout}, "
                      f"{configs[0].nv} vectors of {configs[0].lanes}, {threads} thread(s)", loads)


def _layout(b: Builder, node: Node) -> str:
    """The layout a pooling reads: its input's, for a global one (its output is the same
    memory in every layout); for a 2-D windowed one, which writes the layout it reads,
    its input's unless its readers pay more than the transform back saves."""
    held = b.layout(node.inputs[0])
    if node.op in BLOCKED_POOLS:
        return held
    if not _reads_blocked(b, node, node.inputs[0]):
        return "nchw"
    return kept_layout(b, held, node.outputs[0], b.graph.types[node.inputs[0]].shape)


def _reads_blocked(b: Builder, reader: Node, value: str) -> bool:
    """Global pools read any layout; windowed ones a 2-D pooling's input."""
    return reader.op in BLOCKED_POOLS or len(b.graph.types[value].shape) == 4


def _reading_ns(b: Builder, reader: Node, value: str, layout: str) -> float:
    """What a windowed pool's readers pay (with its transform back, if it takes one)
    when its input is held in `layout`; a global pool reads any layout at one cost."""
    if reader.op in BLOCKED_POOLS:
        return 0.0
    return passing_ns(b, reader.outputs[0], b.graph.types[value].shape, layout)


def _pool_passes(node: Node, graph: Graph) -> list[pl.PoolShape]:
    """The 2-D poolings a pooling node is computed as, in order: one for 1-D (rows of one
    pixel) and 2-D, two for 3-D (height and width per depth slice, then depth over
    columns of every output pixel)."""
    shape = graph.types[node.inputs[0]].shape
    window = _pool_window(node, graph)
    kind, a = POOL_KINDS[node.op], node.attrs
    options = {"ceil_mode": a.get("ceil_mode", 0), "count_include_pad": a.get("count_include_pad", 0)}
    if window["kernel_shape"] is None:  # global: one plane per channel, whatever its rank
        return [pool_shape((*shape[:2], 1, math.prod(shape[2:])) if len(shape) != 4 else shape, kind)]
    if len(shape) == 3:
        return [pool_shape((*shape[:2], 1, shape[2]), kind, **_lifted(window, 1), **options)]
    if len(shape) == 4:
        return [pool_shape(shape, kind, **window, **options)]
    n, c, d, h, w = shape
    plane = pool_shape((n, c * d, h, w), kind, **{k: v[1:] if k != "pads" else (*v[1:3], *v[4:6])
                                                   for k, v in window.items()}, **options)  # fmt: skip
    depth = {k: v[:1] if k != "pads" else (v[0], v[3]) for k, v in window.items()}
    pixels = plane.out_height * plane.out_width
    return [plane, pool_shape((n, c, d, pixels), kind, **_lifted(depth, 0), **options)]


def _lifted(window: dict, axis: int) -> dict:
    """A 1-D window as a 2-D one along rows (`axis` 0: a column of one pixel wide) or
    along columns (`axis` 1: a row of one pixel high)."""
    kernel, strides, dilations, (begin, end) = (window[k] for k in ("kernel_shape", "strides", "dilations", "pads"))

    def two(v: tuple, unit: int) -> tuple:
        return (v[0], unit) if axis == 0 else (unit, v[0])
    pads = (begin, 0, end, 0) if axis == 0 else (0, begin, 0, end)
    return {"kernel_shape": two(kernel, 1), "strides": two(strides, 1), "dilations": two(dilations, 1), "pads": pads}


def _pool_window(node: Node, graph: Graph) -> dict[str, tuple[int, ...] | None]:
    """A pooling's kernel_shape, strides, pads (auto_pad resolved) and dilations, one
    value per spatial axis (pads: begins, then ends)."""
    if POOL_KINDS[node.op] in pl.GLOBAL_KINDS:
        return {"kernel_shape": None}
    a = node.attrs
    kernel = tuple(a["kernel_shape"])
    strides, dilations = tuple(a.get("strides", (1,) * len(kernel))), tuple(a.get("dilations", (1,) * len(kernel)))
    pads = window_pads(node, graph, kernel, strides, dilations)
    strides = window_strides(node, graph, strides, pads)
    return {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations}


def _reduced_axes(node: Node, graph: Graph) -> tuple[int, ...]:
    """The axes a reduction reduces (`ops.reduced_axes`), constant ones only."""
    axes = reduced_axes(node, graph)
    if axes is None:
        raise fail(node, "axes computed at run time are not generated")
    return axes


def _reduce(b: Builder, node: Node, axes: tuple[int, ...]) -> KernelGroup:
    """A mean or maximum over any axes: the reduced axes transposed last (a gather,
    unless they are last already), then its global pool over rows of their elements."""
    shape = b.graph.types[node.inputs[0]].shape
    kept = [a for a in range(len(shape)) if a not in axes]
    rows, length = math.prod(shape[a] for a in kept), math.prod(shape[a] for a in axes)
    x, y = b.read(node.inputs[0]), b.write(node.outputs[0])
    source, calls, modules = permuted(b, x, shape, (*kept, *axes))
    kind = POOL_KINDS[REDUCTIONS[node.op]]
    config = pool_config(pool_shape((1, rows, 1, length), kind), b.target)
    threads = min(b.threads, config.units())
    calls += pool_calls(config, threads, source, y, b)
    modules += b.modules(pl.generate, config)
    return streaming(b, node.name, ops_of([node]), "pool", calls, modules, 4 * (2 * rows * length + rows),
                      f"{'mean' if kind == 'global_average' else 'maximum'} over axes {list(axes)}: {rows} rows of "
                      f"{length}, {threads} thread(s)")  # fmt: skip


WINDOWED = ("MaxPool", "AveragePool")

LOWERINGS = {op: Lowering(_pool, _reads_blocked, _reading_ns, writes_blocks=op in WINDOWED)
             for op in (*WINDOWED, *BLOCKED_POOLS)}  # fmt: skip
"""The pooling family's operators; the global ones read any layout, the windowed ones
a 2-D pooling's input in any layout and write their output in it."""
