"""How a layer's kernels are called: the calls of one matmul, convolution or pooling
layer, each split into its threads' parts, on buffers given as `Ref`s.

One description serves both uses: a layer compiled on its own (its buffers are
numpy arrays, `LayerBuffers`) and a layer inside a built model (its buffers are
places in the model's arena and weights). `Buffers` is what a lowering asks of
either: a place for a constant (weights in the layout the kernels read, transformed
once here) and a scratch buffer for the layer's own use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from autoconfig.models.conv import ConvPlan
from autoconfig.models.matmul import MatmulPlan
from autoconfig.runtime import Call, Part, Ref, aligned_array, split
from kernels import epilogue as ep
from kernels import pool as pl
from kernels.conv import DepthwiseConfig, DirectConfig, GemmConvConfig, WinogradConfig
from kernels.matmul import MatmulConfig
from kernels.nchwc import BlockedDepthwiseConfig, BlockedDirectConfig, Reblock


class Buffers(Protocol):
    """Where a lowering puts what it needs besides its inputs and outputs."""

    def constant(self, array: np.ndarray) -> Ref:
        """A float32 constant, cache-line aligned."""

    def scratch(self, count: int) -> Ref:
        """`count` floats, cache-line aligned, for this layer's calls only (contents
        undefined at each call)."""

    def private(self, count: int, part: int) -> Ref:
        """`count` floats, cache-line aligned, for part `part` of this layer's calls only,
        in memory that only that part of any call uses: the thread that runs it finds
        its scratch in its own caches, where memory other threads read or wrote costs
        it their copies' transfer or invalidation (docs/calibration.md)."""


class LayerBuffers:
    """`Buffers` as numpy arrays of one compiled layer: spaces from `first` on, in the
    order asked (scratch starts zeroed, so junk lanes never read NaNs)."""

    def __init__(self, first: int):
        self.first = first
        self.arrays: list[np.ndarray] = []

    def _add(self, array: np.ndarray) -> Ref:
        self.arrays.append(array)
        return Ref(self.first + len(self.arrays) - 1)

    def constant(self, array: np.ndarray) -> Ref:
        kept = aligned_array(array.size)
        kept[:] = array.ravel()
        return self._add(kept)

    def scratch(self, count: int) -> Ref:
        return self._add(aligned_array(max(count, 1), 0.0))

    def private(self, count: int, part: int) -> Ref:
        return self.scratch(count)


def at(ref: Ref, elements: int) -> Ref:
    """`ref` moved on by `elements` floats."""
    return Ref(ref.space, ref.offset + elements)


def part_blocks(plan: MatmulPlan) -> list[tuple[int, int, int, int]]:
    """Each thread's (row_begin, row_end, col_begin, col_end) in tiles: the tiles of
    the split dimension cut into at most `threads` near-equal ranges."""
    c = plan.config
    rows, cols = (0, c.row_tiles()), (0, c.col_tiles())
    if plan.split == "rows":
        return [(*r, *cols) for r in split(rows[1], plan.threads)]
    return [(*rows, *part) for part in split(cols[1], plan.threads)]


def matmul_call(plan: MatmulPlan, c: Ref, a: Ref, b: Ref, operands: list[Ref], buffers: Buffers,
                work: list[Ref] | None = None) -> Call:  # fmt: skip
    """``C = A·B`` then the epilogue (its operands in order) on each thread's block, each
    with its own packing workspace (`work`, one per part, or asked of `buffers`)."""
    blocks = part_blocks(plan)
    size = plan.config.workspace()
    if size and work is None:
        work = [buffers.private(size, i) for i in range(len(blocks))]
    parts = [Part((c, a, b, *operands, *([work[i]] if size else [])), block) for i, block in enumerate(blocks)]
    return Call(plan.config.symbol, tuple(parts))


def _planes_call(symbol: str, buffers: tuple[Ref, ...], planes: int, threads: int) -> Call:
    """A kernel over planes (or other units) [begin, end), cut across the threads."""
    return Call(symbol, tuple(Part(buffers, r) for r in split(planes, threads)))


def reblock_call(config: Reblock, y: Ref, x: Ref, threads: int) -> Call:
    """The layout transform of x into y, its channel blocks cut across the threads."""
    return _planes_call(config.symbol, (y, x), config.units(), threads)


def _planes_scratch_call(symbol: str, refs: tuple[Ref, ...], workspace: int, planes: int, threads: int,
                         buffers: Buffers) -> Call:  # fmt: skip
    """A kernel over planes [begin, end) that transforms each plane into its thread's own
    scratch plane (`workspace` floats, the last argument before the plane range)."""
    return Call(symbol, tuple(Part((*refs, buffers.private(workspace, i)), r)
                              for i, r in enumerate(split(planes, threads))))  # fmt: skip


def conv_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
               buffers: Buffers, pre: list[Ref] | None = None) -> list[Call]:  # fmt: skip
    """The calls of one convolution: x → y, then the epilogue (`operands` in its order:
    per-channel values, residual tensors), x, y and residuals in the layouts the config
    reads and writes (`kernels.conv.layout_of`); the weights are kept in the layout the
    algorithm reads (Winograd's filter transform happens here, once). Each algorithm's
    calls are its own function in `CONV_CALLS`; a product with a prologue (a gemm1x1)
    reads its per-input-channel operands `pre`."""
    if pre:
        return _product_calls(plan, x, y, weight, operands, buffers, pre)
    return CONV_CALLS[type(plan.config)](plan, x, y, weight, operands, buffers)


def _blocked_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
                   buffers: Buffers) -> list[Call]:  # fmt: skip
    """One kernel; x and y (and residuals) in the layouts the config names."""
    c = plan.config
    return [_planes_call(c.symbol, (y, x, buffers.constant(c.pack_weights(weight)), *operands), c.units(),
                         plan.threads)]  # fmt: skip


def _depthwise_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
                     buffers: Buffers) -> list[Call]:  # fmt: skip
    """One kernel; each thread transforms its planes into its scratch."""
    c, s = plan.config, plan.config.shape
    return [_planes_scratch_call(c.symbol, (y, x, buffers.constant(weight), *operands), c.workspace(),
                                 s.batch * s.channels, plan.threads, buffers)]  # fmt: skip


def _transformed_input(plan: ConvPlan, x: Ref, buffers: Buffers) -> tuple[Ref, Call]:
    """The padded, phase-split input the direct, im2col and Winograd kernels read, and
    the call that writes it."""
    xt = buffers.scratch(plan.config.split().size)
    return xt, Call(plan.config.split().symbol, tuple(Part((xt, x), r) for r in plan.transform_planes()))


def _direct_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
                  buffers: Buffers) -> list[Call]:  # fmt: skip
    xt, transform = _transformed_input(plan, x, buffers)
    w = buffers.constant(weight)
    parts = [Part((y, xt, w, *operands), sizes) for sizes in _direct_parts(plan)]
    return [transform, Call(plan.config.symbol, tuple(parts))]


def _winograd_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
                    buffers: Buffers) -> list[Call]:  # fmt: skip
    """The input's phase split and transform, the T² products, the output transform,
    each thread's transforms on what its share of the products reads and writes
    (`_winograd_ranges`): in bands, each thread's band in its own memory."""
    c, gemm = plan.config, plan.gemm_plan()
    xt, transform = _transformed_input(plan, x, buffers)
    u = buffers.constant(_gemm_weights(c.gemm, c.filter_transform(weight), 1))  # U = G g Gᵀ, once
    inputs, outputs = _winograd_ranges(plan)
    if c.bands == 1:
        v, m = buffers.scratch(c.v_size()), buffers.scratch(c.m_size())
        spaces = [(v, m)] * max(len(inputs), len(outputs))
        products = matmul_call(gemm, m, u, v, [], buffers)
    else:
        size = gemm.config.workspace()
        spaces = [(buffers.private(c.v_size(), b), buffers.private(c.m_size(), b)) for b in range(c.bands)]
        work = [[buffers.private(size, b)] if size else [] for b in range(c.bands)]
        (whole,) = part_blocks(gemm)
        products = Call(gemm.config.symbol, tuple(Part((m, u, v, *w), whole) for (v, m), w in zip(spaces, work)))
    return [transform, Call(c.input_signature().symbol, tuple(Part((v, xt), r) for (v, _), r in zip(spaces, inputs))),
            products,
            Call(c.output_signature().symbol, tuple(Part((y, m, *operands), r) for (_, m), r in zip(spaces, outputs)))]


def _winograd_ranges(plan: ConvPlan) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:
    """Each thread's (channel_begin, channel_end, row_begin, row_end) in the input and
    the output transform: in bands, its band's tile rows of every channel; else an even
    share of the input channels, and the output channels of its products."""
    c, s = plan.config, plan.config.shape
    rows = s.batch * c.tiles_h
    if c.bands > 1:
        bands = [(b * c.band_rows, min(rows, (b + 1) * c.band_rows)) for b in range(c.bands)]
        return [(0, s.channels, *r) for r in bands], [(0, s.out_channels, *r) for r in bands]
    blocks = part_blocks(plan.gemm_plan())  # by rows: output channels
    inputs = [(*r, 0, rows) for r in split(s.channels, len(blocks))]
    return inputs, [(b[0] * c.gemm.mr, min(s.out_channels, b[1] * c.gemm.mr), 0, rows) for b in blocks]


def _product_calls(plan: ConvPlan, x: Ref, y: Ref, weight: np.ndarray, operands: list[Ref],
                   buffers: Buffers, pre: list[Ref] | None = None) -> list[Call]:  # fmt: skip
    """gemm1x1 and im2col: one product per image and group, on views of the tensors
    (im2col's on the windows copied into a matrix first), each divided among the threads,
    or, a gemm1x1 split by image-groups, each on one thread (`_side_by_side`); a
    prologue's operands `pre` (one value per input channel, ungrouped) are the same for
    every image."""
    c, s, threads = plan.config, plan.config.shape, plan.threads
    calls, xt = [], None
    if c.algorithm == "im2col":
        xt, transform = _transformed_input(plan, x, buffers)
        calls.append(transform)
    gemm = plan.gemm_plan()
    w = buffers.constant(_gemm_weights(gemm.config, weight, s.group))
    workers = plan.parts() if plan.split == "groups" else len(part_blocks(gemm))
    work = [buffers.private(gemm.config.workspace(), i) for i in range(workers)] if gemm.config.workspace() else None
    im2col = c.im2col() if c.algorithm == "im2col" else None
    columns = buffers.scratch(im2col.size) if im2col else None
    kinds = [kind for _, _, kind in ep.operand_names(c.epilogue)]
    cout, cin, pixels = s.out_per_group, s.in_per_group, s.out_height * s.out_width
    products = []
    for n in range(s.batch):
        for g in range(s.group):
            out = (n * s.out_channels + g * cout) * pixels
            views = [at(r, g * cout) if kind == "channel" else at(r, out)
                     for r, kind in zip(operands, kinds, strict=True)]  # fmt: skip
            if im2col is None:
                image = at(x, (n * s.channels + g * cin) * s.height * s.width)
            else:
                image = columns
                rows = split(im2col.rows, threads)
                calls.append(Call(im2col.symbol, tuple(Part((columns, xt), (n * s.group + g, *r)) for r in rows)))
            if gemm.config.transposed:  # Yᵀ = Xᵀ·Wᵀ: the image is Aᵀ, the weights B
                a, b = image, at(w, g * gemm.config.b_size())
            else:
                a, b = at(w, g * gemm.config.a_size()), image
            products.append((at(y, out), a, b, views + list(pre or ())))
            if plan.split != "groups":
                calls.append(matmul_call(gemm, *products[-1], buffers, work))
    return calls + (_side_by_side(gemm, products, work, workers) if plan.split == "groups" else [])


def _side_by_side(gemm: MatmulPlan, products: list[tuple[Ref, Ref, Ref, list[Ref]]], work: list[Ref] | None,
                  workers: int) -> list[Call]:  # fmt: skip
    """The image-groups' products (each its C, A, B and epilogue operands), `workers` at
    a time, each whole on a thread of its own with its own packing workspace."""
    (whole,) = part_blocks(gemm)
    return [Call(gemm.config.symbol, tuple(Part((c, a, b, *operands, *([work[t]] if work else [])), whole)
                                           for t, (c, a, b, operands) in enumerate(products[first:first + workers])))
            for first in range(0, len(products), workers)]  # fmt: skip


def _gemm_weights(gemm: MatmulConfig, weight: np.ndarray, groups: int) -> np.ndarray:
    """A convolution's weights as its GEMM reads them, each group's after the other: as
    they are, or packed into the micro-kernel's panels once, here (A's with `a_packed`,
    Bᵀ's with `transposed`)."""
    if not (gemm.a_packed or gemm.transposed):
        return weight
    pack = gemm.pack_b if gemm.transposed else gemm.pack_a
    packed = [pack(g) for g in weight.reshape(groups, -1)]
    return packed[0] if groups == 1 else np.concatenate(packed)


def _direct_parts(plan: ConvPlan) -> list[tuple[int, ...]]:
    """Each thread's (ng, row tile, column tile) ranges: the split one cut in near-equal
    pieces, the others whole."""
    c: DirectConfig = plan.config
    whole = {"groups": (0, c.groups()), "rows": (0, c.row_tiles()), "columns": (0, c.col_tiles())}
    parts = []
    for piece in split(whole[plan.split][1], plan.threads):
        ranges = dict(whole, **{plan.split: piece})
        parts.append((*ranges["groups"], *ranges["rows"], *ranges["columns"]))
    return parts


def pool_calls(config: pl.PoolConfig, threads: int, x: Ref, y: Ref, buffers: Buffers) -> list[Call]:
    """The call of one pooling layer: x → y in the config's layout; an NCHW windowed pool
    transforms each plane (borders filled) into its thread's scratch plane; an average
    one reads its per-position scale."""
    s = config.shape
    scale = (buffers.constant(pl.average_scale(s)),) if s.kind == "average" and s.windowed else ()
    if not config.workspace():
        return [_planes_call(config.symbol, (y, x, *scale), config.units(), threads)]
    return [_planes_scratch_call(config.symbol, (y, x, *scale), config.workspace(), s.planes, threads, buffers)]


CONV_CALLS: dict[type, Callable[..., list[Call]]] = {
    DirectConfig: _direct_calls, DepthwiseConfig: _depthwise_calls, WinogradConfig: _winograd_calls,
    GemmConvConfig: _product_calls, BlockedDepthwiseConfig: _blocked_calls, BlockedDirectConfig: _blocked_calls,
}
"""Each convolution algorithm's calls, by its config's type."""
