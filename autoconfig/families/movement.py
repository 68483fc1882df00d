"""The data-movement family's lowering: Concat (producers write straight into their
slices where they can), and Transpose, Slice, Split, Pad, nearest Resize and Upsample
as views or gathers (`autoconfig.movement`); a Transpose that swaps two groups of axes
after the ones it keeps ([n, a, b] to [n, b, a]: NCHW to NHWC and back, a matrix's
transpose) as squares transposed in registers (`kernels.nchwc.Reblock`).
"""

from __future__ import annotations

import math

import numpy as np

from autoconfig import movement
from autoconfig.builder import (
    VIRTUAL, Builder, KernelGroup, Lowering, copy_call, fail, ops_of, permuted, streaming,
)  # fmt: skip
from autoconfig.errors import REFUSALS
from autoconfig.graph.ir import Node
from autoconfig.graph.ops import transpose_perm
from autoconfig.layouts import concat_takes_blocks, passing_ns
from autoconfig.lowering import reblock_call
from autoconfig.models import conv as conv_model
from autoconfig.runtime import Call, Part, Ref, split
from kernels import conv as kc
from kernels import movement as mv
from kernels.emit import generate
from kernels.nchwc import Reblock

SQUARE_LANES = 4
"""The narrowest squares a swap is transposed in: narrower ones take more shuffles per
element than the gather takes loads."""


def _concat(b: Builder, node: Node) -> KernelGroup | None:
    """Concat: its inputs placed as slices of its output where they can be, others copied
    (in the output's layout: channel blocks when all inputs are held so). Along an axis
    with more than one slice per input, they are staged in a buffer of their own and
    gathered from there into the output (`_interleaved`)."""
    shape = b.graph.types[node.outputs[0]].shape
    axis = node.attrs.get("axis", 0) % len(shape)
    if math.prod(shape[:axis]) != 1:
        return _interleaved(b, node, shape, axis)
    layout: kc.Layout = "nchw"  # channel blocks where every input is held so (see blocked_layouts)
    if concat_takes_blocks(b, node) and all(b.layout(v) == "nchwc" for v in node.inputs):
        layout = "nchwc"
    out = b.write(node.outputs[0], layout)
    copies = _place_slices(b, node, out, layout)
    calls, modules = [], []
    for value, at, size in copies:
        call, copy_modules = copy_call(b, Ref(out.space, at), b.read(value, layout), size)
        calls, modules = calls + [call], modules + copy_modules
    if not calls:
        return None
    return streaming(b, node.name, ops_of([node]), "copy", calls, modules, 8 * math.prod(shape),
                      f"{len(copies)} input(s) copied into place")


def _interleaved(b: Builder, node: Node, shape: tuple[int, ...], axis: int) -> KernelGroup:
    """A Concat along an inner axis: inputs of one length along it placed one after
    another in a staging buffer (their producers writing there where they can), unequal
    ones each transposed there with the axis first (so every input has the output's
    strides along the other axes); then one gather into the output."""
    inputs = [v for v in node.inputs if b.graph.types[v].elements]
    equal = len({b.graph.types[v].shape[axis] for v in inputs}) == 1
    perm = tuple(range(len(shape))) if equal else (axis, *(a for a in range(len(shape)) if a != axis))
    staged = Ref(VIRTUAL + b._buffer(math.prod(shape)))
    starts = np.cumsum([0] + [b.graph.types[v].elements for v in inputs])
    copies = (_place_slices(b, node, staged, "nchw") if equal else
              [(v, int(at), None) for v, at in zip(inputs, starts)])  # fmt: skip
    calls, modules = [], []
    for value, at, _ in copies:
        _, copy, copy_modules = permuted(b, b.read(value), b.graph.types[value].shape, perm, into=Ref(staged.space, at))
        calls, modules = calls + copy, modules + copy_modules
    pieces = [at + np.arange(b.graph.types[v].elements, dtype=np.int64).reshape([b.graph.types[v].shape[a] for a in perm])
              for v, at in zip(inputs, starts)]  # each input as staged: its axes in `perm`'s order
    source = np.concatenate(pieces, axis=0 if not equal else axis).transpose(np.argsort(perm))
    _, gather, gather_modules = permuted(b, staged, source.shape, tuple(range(len(shape))),
                                         into=b.write(node.outputs[0]), source=source)  # fmt: skip
    return streaming(b, node.name, ops_of([node]), "copy", calls + gather, modules + gather_modules,
                      16 * math.prod(shape), f"{len(copies)} input(s) copied{'' if equal else ' transposed'}, "
                      f"then gathered")  # fmt: skip


def _place_slices(b: Builder, node: Node, out: Ref, layout: kc.Layout) -> list[tuple[str, int, int]]:
    """Each input of a Concat placed as the next slice of `out`'s buffer where it, with
    the inputs after it, is the whole of one buffer (`_whole_buffer`): its producer's
    own, which then writes it there, or an earlier Concat's (DenseNet's growing
    concatenations); the others' (value, offset, size), to be copied."""
    out_buffer = out.space - VIRTUAL
    offset, copies, i = 0, [], 0
    inputs = [v for v in node.inputs if b.graph.types[v].elements]
    while i < len(inputs):
        whole = _whole_buffer(b, node, inputs[i:], layout, out_buffer)
        if whole is None:
            size = b.graph.types[inputs[i]].elements
            copies.append((inputs[i], offset, size))
            b.copied[inputs[i]] = (out_buffer, offset, layout)
            offset, i = offset + size, i + 1
            continue
        inner, taken = whole
        b.buffers[inner].inside = (out_buffer, offset)
        outer = b.buffers[out_buffer]
        outer.first = min(outer.first, b.buffers[inner].first)
        outer.last = max(outer.last, b.buffers[inner].last)
        offset, i = offset + b.buffers[inner].size, i + taken
    return copies


def _whole_buffer(b: Builder, node: Node, inputs: list[str], layout: kc.Layout,
                  out_buffer: int) -> tuple[int, int] | None:  # fmt: skip
    """(buffer, inputs) where the first inputs lie, in order and in `layout`, over the
    whole of one buffer of the arena placed in no other: the first input's own buffer,
    or an earlier Concat's output, whose producers wrote their slices there or which
    copied them there (`Builder.copied`)."""

    def places(value: str) -> set[tuple[int, int]]:  # where the value lies in `layout`
        if b.graph.is_constant(value) or value not in b.where or node.inputs.count(value) != 1:
            return set()
        kept = [b.where[value]] if b.layout(value) == layout else []
        copy = b.copied.get(value)
        return {b._absolute(*at) for at in kept + ([copy[:2]] if copy and copy[2] == layout else [])}

    for root, at in places(inputs[0]):
        buffer, covered = b.buffers[root], 0
        if at != 0 or root == out_buffer or buffer.input_index is not None or buffer.inside is not None:
            continue
        for count, value in enumerate(inputs, 1):
            if (root, covered) not in places(value):
                break
            covered += b.graph.types[value].elements
            if covered == buffer.size:
                return root, count
    return None


def _movement(b: Builder, node: Node) -> KernelGroup | None:
    """Transpose, Slice, Gather(ND, Elements), Expand, Split, Pad, Resize, Upsample: each output a view of the input
    at an offset where it is one contiguous stretch of it, else a gather kernel."""
    data = node.inputs[0]
    if node.op == "Gather" and not b.graph.is_constant(node.inputs[1]):
        return _rows_by_ids(b, node)
    if b.graph.is_constant(data):
        raise fail(node, "data movement of a constant is folded at import; this one was not")
    if node.op == "Transpose" and (swap := _squares(b, node)) is not None:
        return _transposed(b, node, swap)
    try:
        maps = movement.source_maps(node, b.graph)
        fill = movement.fill_value(node, b.graph)
        moves = [(out, movement.plan(source, b.graph.types[data].elements, fill, b.target))
                 for out, source in zip(node.outputs, maps) if out and b.graph.types[out].elements]  # fmt: skip
    except REFUSALS as err:
        raise fail(node, str(err).removeprefix(f"node {node.name!r} ({node.op}): ")) from None
    calls, modules, moved = [], [], 0
    for out in node.outputs:
        if out and not b.graph.types[out].elements:
            b.write(out)
    for out, move in moves:
        if move.view_offset is not None:
            b.alias(out, data, move.view_offset)
            continue
        config = move.config
        x, tables = b.read(data), b.constant(move.tables.view(np.float32))
        y = b.write(out)
        threads = min(b.threads, config.rows)
        calls.append(Call(config.symbol, tuple(Part((y, x, tables), r) for r in split(config.rows, threads))))
        modules += b.modules(mv.generate, config)
        moved += 8 * math.prod(config.shape)
    if not calls:
        return None
    kinds = ", ".join(f"{'runs' if m.config.run else 'elements'} into {m.config.shape}" for _, m in moves if m.config)
    return streaming(b, node.name, ops_of([node]), "gather", calls, modules, moved, kinds)


def _squares(b: Builder, node: Node) -> Reblock | None:
    """A Transpose of [n, a, b] to [n, b, a] (a kept prefix of axes, then two groups of
    axes swapped) as a layout transform: NCHW to NHWC with C = a, or NHWC to NCHW with
    C = b, whichever has the wider squares (the widest vectors dividing C); None for
    any other permutation, squares narrower than SQUARE_LANES, or a group of one."""
    shape = b.graph.types[node.inputs[0]].shape
    rank = len(shape)
    perm = transpose_perm(node, rank)
    kept = next((i for i, p in enumerate(perm) if p != i), rank)
    if kept == rank or perm[kept:] != [*range(perm[kept], rank), *range(kept, perm[kept])]:
        return None
    n, a, c = math.prod(shape[:kept]), math.prod(shape[kept:perm[kept]]), math.prod(shape[perm[kept]:])
    lanes, to_nhwc = max((math.gcd(b.target.f32_lanes, a), True), (math.gcd(b.target.f32_lanes, c), False))
    if lanes < SQUARE_LANES or b.target.scalable or 1 in (a, c):  # a group of one: the same order, a view
        return None
    return Reblock(n, a, c, lanes, True, "nhwc") if to_nhwc else Reblock(n, c, a, lanes, False, "nhwc")


def _transposed(b: Builder, node: Node, config: Reblock) -> KernelGroup:
    """The Transpose `_squares` takes: one layout transform."""
    threads = min(b.threads, config.units())
    predicted, why = conv_model.reblock_ns(config, b.machine, threads)
    x = b.read(node.inputs[0])
    call = reblock_call(config, b.write(node.outputs[0]), x, threads)
    return KernelGroup(node.name, ops_of([node]), "gather", [call], b.modules(generate, config), predicted, why,
                       f"{config.batch}x{config.channels}x{config.pixels} transposed in {config.lanes}x{config.lanes} "
                       f"squares, {threads} thread(s)")  # fmt: skip


def _rows_by_ids(b: Builder, node: Node) -> KernelGroup:
    """Gather of a table's rows (an embedding's constant one, or one computed: a rotary
    embedding's cos and sin caches) by ids known at run time: each output row copied
    from the row its id names. The runner checks the ids of an int64 input against the
    table's rows; ids computed at run time (held as float32) are checked by the kernel,
    a row whose id is out of range filled with NaN."""
    table, ids = node.inputs
    shape = b.graph.types[table].shape
    if node.attrs.get("axis", 0) % len(shape) != 0:
        raise fail(node, "a Gather by ids given at run time is generated along the first axis of its table")
    count, width = b.graph.types[ids].elements, math.prod(shape[1:])
    computed = b.graph.types[ids].dtype == "float32"
    config = mv.GatherConfig((count, width), math.prod(shape), (0, width), math.nan if computed else None,
                             b.target.f32_lanes, movement.GATHER_VECTORS, indexed=shape[0], float_ids=computed)
    strides = np.concatenate([np.full(count, width), np.arange(width)]).astype(np.int64)
    x, tables, at = b.read(table), b.constant(strides.view(np.float32)), b.read(ids)
    y = b.write(node.outputs[0])
    threads = min(b.threads, count)
    call = Call(config.symbol, tuple(Part((y, x, tables, at), r) for r in split(count, threads)))
    return streaming(b, node.name, ops_of([node]), "gather", [call], b.modules(mv.generate, config),
                      8 * count * width, f"{count} rows of {width} by id")


def _concat_reading_ns(b: Builder, reader: Node, value: str, layout: kc.Layout) -> float:
    """What a Concat's readers pay when `value`, one of its inputs, is held in `layout`
    (with its transform back, where the output is not held so; the other inputs
    assumed held alike)."""
    return passing_ns(b, reader.outputs[0], b.graph.types[value].shape, layout)


LOWERINGS = {"Concat": Lowering(lambda b, node, after: _concat(b, node), reading_ns=_concat_reading_ns),
             **{op: Lowering(lambda b, node, after: _movement(b, node))
                for op in ("Transpose", "Slice", "Gather", "GatherND", "GatherElements", "Expand", "Split", "Pad", "Resize",
                           "Upsample")}}  # fmt: skip
"""The data-movement family's operators."""
