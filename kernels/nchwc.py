"""f32 convolutions on channel-blocked activations, NCHW[c]: a tensor [N, C, H, W] kept
as [N, C/L, H, W, L], L = the vector's lanes, so that one vector holds L channels of
one pixel (the layout of oneDNN's and onnxruntime's CPU convolutions).

Why: with channels in the lanes, every load and store of an activation is one whole,
aligned vector — no lanes wasted on a 7×7 or 14×14 image, no window crossing a cache
line, no stride-phase split of the input, and a 1×1 convolution's output vectors are
stored in place instead of scattered (`kernels.gemm.BlockedTile`; the 1×1 itself is
the matmul kernel with `MatmulConfig.blocked`). Padding needs no copy either: for an
output row, the filter rows that fall inside the image are a run-time range, and the
columns split statically into interior pixels, whose taps are all inside, and the few
border pixels, each with its own static list of taps.

depthwise (one channel in and out per group): a register tile of nv output pixels of
one row × one vector of L channels; per filter row, each input pixel the tile's taps
reach is loaded once and serves every tap that reads it (stride 1, 3×3: nv + 2 loads
for 3·nv FMAs)::

    for (n, channel block, oh) in units:            # threads divide the units
      for ow0 in pixel tiles (interior: nv pixels; border pixels: one each, their taps):
        for kh in the filter rows inside the image (run-time range):
          for kw (unrolled):  acc[j] += X[n, cb, ih, ow0 + j·sw + kw·dw − left, :] · W[cb, kh, kw, :]
        Y[n, cb, oh, ow0 + j, :] = epilogue(acc[j])

direct (dense, or grouped where each group's output channels fill vectors: a tile lies
in one group and reads its input channels only): a register tile of nv output pixels
of one row × mv vectors of output channels; each input channel's value is broadcast
and multiplies a vector
of weights (the channels-in-lanes structure of oneDNN's direct kernels; Georganas et
al., SC'18). The input may be plain NCHW (a model's first layer: 3 channels do not
fill a block) or blocked; the output is blocked::

    for (n, output-channel tile, oh) in units:
      for ow0 in pixel tiles:
        for c in the tile's group's input channels:  for kh in the rows inside:  for kw (unrolled):
          acc[j][v] += X[n, c, ih, iw(j, kw)] · W[c, kh, kw, co0 + v·L : +L]
        Y[n, co0/L + v, oh, ow0 + j, :] = epilogue(acc[j][v])

In passes (`kc`): where a channel tile's weights outgrow L1 (512 channels of 3x3: over
a MB per tile), every pixel tile above streams them again from L2, and from memory the
first time, with only that tile's FMAs to hide it. Summed kc input channels per pass
over the tile's whole output plane instead, each pass's weights stay in L1 for all of
the plane's pixel tiles, and each row asks for its share of the next pass's::

    for (n, output-channel tile) in units:
      for c0 in 0, kc, 2·kc, ...:  for oh:  for ow0 in pixel tiles:
        acc[j][v] = Y[...] (0 in the first pass) + Σ over c in [c0, c0 + kc) as above
        Y[...] = acc[j][v], through the epilogue in the last pass

NHWC: the same kernels on a tensor held [N, H, W, C] — NCHW[c] with one block of all C
channels (`Blocks`: NCHW is b = 1, NCHW[c] b = L, NHWC b = C). A pixel's channels are
then one contiguous run whatever the vectors' width, so the layout does not tie a
tensor's producer and readers to one lane count, nor need its channels to fill blocks
(`layout`). The convolution model offers it only where they do not
(`autoconfig.models.conv.choose`): where they do, these kernels ran slower on NHWC
than on NCHW[c].

reblock: the layout transform between NCHW and NCHW[c] or NHWC, either way: squares of
L pixels × L channels transposed in registers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_blocked, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, splat
from kernels.gemm import B_PREFETCH_LOCALITY, PREFETCH_LINE_FLOATS, PREFETCH_LOCALITY, chain_steps, in_chains
from kernels.loops import for_carry, for_range, load, offset, store, strided_load, strided_store, transpose_square
from kernels.loops import equal, when_else
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div
from kernels.target import Target

if TYPE_CHECKING:
    from kernels.conv_shape import ConvShape


Layout = Literal["nchw", "nchwc", "nhwc"]
BlockedLayout = Literal["nchwc", "nhwc"]


class Window(Protocol):
    """A sliding window over an image's rows and columns: a convolution's or a pool's."""

    height: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, int, int, int]


def layout_name(layout: str, lanes: int) -> str:
    """'NCHW', 'NCHW[16c]' or 'NHWC', for signatures and reports."""
    return {"nchw": "NCHW", "nchwc": f"NCHW[{lanes}c]", "nhwc": "NHWC"}[layout]


@dataclass(frozen=True)
class Blocks:
    """Where element (n, c, h, w) of an [N, C, H, W] tensor lies when it is held as
    [N, C/b, H, W, b]: b = 1 is NCHW, b = the lanes NCHW[c], b = C NHWC."""

    channels: int
    height: int
    width: int
    block: int

    @classmethod
    def of(cls, layout: str, shape: tuple[int, ...], lanes: int) -> Blocks:
        """The addressing of a tensor of NCHW `shape` held in `layout`."""
        _, c, h, w = shape
        return cls(c, h, w, {"nchw": 1, "nchwc": lanes, "nhwc": c}[layout])

    @property
    def step(self) -> int:
        """Floats between horizontally adjacent pixels of one channel."""
        return self.block

    def vector_of(self, unit: ir.Value, lanes: int) -> tuple[ir.Value, ir.Value]:
        """(image, first channel) of `unit`, the images' vectors of `lanes` channels
        counted in order."""
        vectors = self.channels // lanes
        return arith.divsi(unit, index(vectors)), arith.muli(arith.remsi(unit, index(vectors)), index(lanes))

    def at(self, n: ir.Value, c: ir.Value, h: ir.Value, w: ir.Value) -> ir.Value:
        """The flat index of (n, c, h, w)."""
        b, pixel = self.block, arith.addi(arith.muli(h, index(self.width)), w)
        if b == self.channels:  # NHWC: one block
            image = arith.addi(arith.muli(n, index(self.height * self.width)), pixel)
            return arith.addi(arith.muli(image, index(b)), c)
        block = arith.addi(arith.muli(n, index(self.channels // b)), c if b == 1 else arith.divsi(c, index(b)))
        spot = arith.addi(arith.muli(block, index(self.height * self.width)), pixel)
        return spot if b == 1 else arith.addi(arith.muli(spot, index(b)), arith.remsi(c, index(b)))


# ---------------------------------------------------------------- the shape's windows


@dataclass(frozen=True)
class Columns:
    """How an output row's pixels split: [interior_begin, interior_end) read every tap
    inside the image; each border pixel (ow, kws) only the filter columns kws."""

    interior_begin: int
    interior_end: int
    border: tuple[tuple[int, tuple[int, ...]], ...]  # (ow, the kw that fall inside)

    @classmethod
    def of(cls, width: int, out_width: int, kernel: int, stride: int, dilation: int, left: int) -> Columns:
        def inside(ow: int, kw: int) -> bool:
            return 0 <= ow * stride - left + kw * dilation < width

        begin = min(out_width, ceil_div(left, stride))
        end = max(begin, min(out_width, (width - 1 - (kernel - 1) * dilation + left) // stride + 1))
        border = tuple((ow, tuple(kw for kw in range(kernel) if inside(ow, kw)))
                       for ow in [*range(begin), *range(end, out_width)])  # fmt: skip
        return cls(begin, end, border)


def row_taps(shape: Window, oh: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(top, kh_begin, kh_end) of output row oh: the input row of filter row 0 (may be
    negative) and the filter (or window) rows that fall inside the image."""
    sh, dh, (kh_count, _) = shape.strides[0], shape.dilations[0], shape.kernel
    top = arith.subi(arith.muli(oh, index(sh)), index(shape.pads[0]))
    first = arith.maxsi(index(0), arith.ceildivsi(arith.subi(index(0), top), index(dh)))
    last = arith.addi(arith.floordivsi(arith.subi(index(shape.height - 1), top), index(dh)), index(1))
    return top, first, arith.minsi(index(kh_count), last)


def pixel_tiles(columns: Columns, nv: int, tile: Callable[[ir.Value, int, tuple[int, ...] | None], None]) -> None:
    """tile(ow0, pixels, kws) over one output row: the interior in tiles of nv pixels
    (all taps: kws None), its remainder as one narrower tile, each border pixel alone."""
    full, rest = divmod(columns.interior_end - columns.interior_begin, nv)
    if full:
        for_range(columns.interior_begin, columns.interior_begin + full * nv, nv, lambda ow0: tile(ow0, nv, None))
    if rest:
        tile(index(columns.interior_begin + full * nv), rest, None)
    for ow, kws in columns.border:
        if kws:
            tile(index(ow), 1, kws)


def zero_pixels(columns: Columns) -> list[int]:
    """Border pixels no tap reaches (a padding wider than the filter): their sum is 0."""
    return [ow for ow, kws in columns.border if not kws]


# ---------------------------------------------------------------- depthwise


@dataclass(frozen=True)
class BlockedDepthwiseConfig:
    """Depthwise on NCHW[c] (or NHWC, `layout`, input and output alike): tiles of nv
    output pixels × one vector of `lanes` channels. With `mean`, the kernel also writes
    each channel's mean over its output plane (of the epilogue's results: a following
    GlobalAveragePool, a squeeze-excitation's squeeze) to a second output m[N, C]; a
    unit is then a whole plane, so that each sum is one thread's."""

    shape: ConvShape
    lanes: int
    nv: int = 1
    epilogue: ep.Epilogue = field(default=())
    layout: BlockedLayout = "nchwc"
    mean: bool = False
    bands: int = 1  # bands of output rows, one unit per (image, band, channel block, row of the band)

    algorithm: str = field(default="depthwise", init=False)

    @property
    def tile(self) -> str:
        return f"{self.nv} pixels x {self.lanes} channels"

    def units(self) -> int:
        """(image, band, channel block, output row of the band) quadruples, or with
        `mean` (image, band, channel block) triples: what threads divide. A band per
        thread gives each thread whole rows of every channel block (the rows a
        neighbour split by pixels wrote, or will read), each block's rows in turn (its
        input rows reused from L1)."""
        return self.rows() // (self.shape.out_height // self.bands if self.mean else 1)

    def means(self) -> Blocks:
        """With `mean`, where each band's channel means go: an [N, C, 1, bands] tensor in
        the kernel's layout, whose mean over the bands is each channel's (with one band,
        the [N, C] means themselves)."""
        return Blocks.of(self.layout, (self.shape.batch, self.shape.channels, 1, self.bands), self.lanes)

    def rows(self) -> int:
        """(image, channel block, output row) triples: the rows of tiles the kernel runs."""
        s = self.shape
        return s.batch * (s.channels // self.lanes) * s.out_height

    def inputs_per_row(self) -> int:
        """Distinct input vectors a tile's taps read in one filter row."""
        s = self.shape
        return min(self.nv * s.kernel[1], (self.nv - 1) * s.strides[1] + (s.kernel[1] - 1) * s.dilations[1] + 1)

    def registers_needed(self) -> tuple[int, str]:
        reads = self.inputs_per_row()
        return self.nv + reads + 1, f"{self.nv} accumulators + {reads} input vectors + 1 weight vector"

    @property
    def symbol(self) -> str:
        return config_symbol("ac_conv_depthwise_nchwc_f32", self)

    def layouts(self) -> tuple[Layout, Layout]:
        """(what it reads, what it writes): its own layout both."""
        return self.layout, self.layout

    def modules(self, target: Target) -> list[KernelModule]:
        return [single_kernel(self.signature(), target, lambda args: _depthwise(self, target, args))]

    def validate(self, target: Target) -> None:
        s = self.shape
        if not s.depthwise:
            raise KernelError(f"depthwise needs one input and one output channel per group, got {s.describe()}")
        check_blocked(target, self.lanes, {"the channels": s.channels})
        _check_registers(self, target)
        if self.bands < 1 or s.out_height % self.bands:
            raise KernelError(f"{self.bands} bands do not divide the {s.out_height} output rows")

    def pack_weights(self, weight: np.ndarray) -> np.ndarray:
        """W[C, 1, KH, KW] as the kernel reads it: [C/L, KH, KW, L]."""
        s = self.shape
        return np.ascontiguousarray(weight.reshape(s.channels // self.lanes, self.lanes, s.taps).transpose(0, 2, 1))

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, w[, epilogue operands], unit_begin, unit_end)``."""
        held = layout_name(self.layout, self.lanes)
        s = self.shape
        means = (Param("m", Role.OUT, extent=(self.bands * s.batch * s.channels,)),) if self.mean else ()
        return _signature(self, f"depthwise convolution {s.describe()} on {held}"
                                f"{', and each channel mean of each band into m' if self.mean else ''}",
                          s.channels * s.taps, means, "(image, band of output rows, channel tile)" if self.mean else
                          "(image, band of output rows, channel tile, row of the band)")  # fmt: skip


def _check_registers(config: BlockedConfig, target: Target) -> None:
    """Reject an empty tile, or one needing more vector registers than the target has."""
    if config.nv < 1 or getattr(config, "mv", 1) < 1:
        raise KernelError(f"a tile needs at least one pixel and one vector, got {config.tile}")
    registers, held = config.registers_needed()
    if registers > target.vector_registers:
        raise KernelError(f"{config.algorithm} {config.tile} needs {held} = {registers} vector registers; "
                              f"{target.name} has {target.vector_registers}")  # fmt: skip


def _signature(config: BlockedConfig, what: str, weights: int, more: tuple[Param, ...] = (),
               unit: str = "(image, channel tile, output row)") -> KernelSignature:  # fmt: skip
    """The kernels' common signature: output, input, weights, epilogue operands, `more`
    outputs, units (each `unit`)."""
    s = config.shape
    outputs = math.prod(s.output_shape)
    params = [Param("y", Role.OUT, extent=(outputs,)), Param("x", Role.IN, extent=(math.prod(s.input_shape),)),
              Param("w", Role.IN, extent=(weights,))]  # fmt: skip
    for _, name, operand in ep.operand_names(config.epilogue):
        params.append(Param(name, Role.IN, extent=(s.out_channels if operand == "channel" else outputs,)))
    params += [*more, Param("unit_begin", Role.SIZE), Param("unit_end", Role.SIZE)]
    return KernelSignature(config.symbol, tuple(params),
                           f"{what}, then {ep.describe(config.epilogue)}: tiles of {config.tile}, "
                           f"units [unit_begin, unit_end) of {unit}.")  # fmt: skip


@dataclass(frozen=True)
class _Output:
    """Where a blocked kernel stores: y and its epilogue operands as flat memrefs."""

    config: BlockedConfig
    vec: ir.VectorType
    y: ir.Value
    operands: dict[int, ir.Value]

    @classmethod
    def of(cls, config: BlockedConfig, target: Target, args: dict) -> _Output:
        s = config.shape
        outputs = math.prod(s.output_shape)
        operands = {i: f32_memref(args[name], [s.out_channels if kind == "channel" else outputs])
                    for i, name, kind in ep.operand_names(config.epilogue)}  # fmt: skip
        return cls(config, f32_vector_type(target, config.lanes), f32_memref(args["y"], [outputs]), operands)

    def store(self, value: ir.Value, at: ir.Value, channel: ir.Value) -> ir.Value:
        """The epilogue on `value`, stored at `at` (its first channel: `channel`); the
        value stored."""

        def operand(i: int) -> ir.Value:
            kind = self.config.epilogue[i].operand
            return load(self.vec, self.operands[i], [channel if kind == "channel" else at])

        result = ep.apply(self.config.epilogue, value, operand)
        store(result, self.y, [at])
        return result


def _add_to_sums(values: list[ir.Value], sums: tuple[ir.Value, ir.Value] | None) -> None:
    """The vectors `values` added to the vector of sums `sums` = (memref, index), if
    given: one load and store of the sums per tile, not a chain through memory per
    vector; added in order, so each value is dead once added (a tree kept them all
    live: spills)."""
    if sums is None or not values:
        return
    memory, at = sums
    total = load(values[0].type, memory, [at])
    for value in values:
        total = arith.addf(total, value)
    store(total, memory, [at])


def _depthwise(cfg: BlockedDepthwiseConfig, target: Target, args: dict) -> None:
    s, lanes = cfg.shape, cfg.lanes
    out = _Output.of(cfg, target, args)
    vec = out.vec
    x = f32_memref(args["x"], [math.prod(s.input_shape)])
    w = f32_memref(args["w"], [s.channels * s.taps])
    (_, kw_count), (sw, dw) = s.kernel, (s.strides[1], s.dilations[1])
    columns = Columns.of(s.width, s.out_width, kw_count, sw, dw, s.pads[1])
    source, result = Blocks.of(cfg.layout, s.input_shape, lanes), Blocks.of(cfg.layout, s.output_shape, lanes)

    def row(n: ir.Value, channel: ir.Value, oh: ir.Value, sums: tuple[ir.Value, ir.Value] | None) -> None:
        top, kh_begin, kh_end = row_taps(s, oh)
        out_row = result.at(n, channel, oh, index(0))
        weights = arith.muli(channel, index(s.taps))  # the block's [KH, KW, L] weights

        def tile(ow0: ir.Value, pixels: int, kws: tuple[int, ...] | None) -> None:
            left = arith.subi(arith.muli(ow0, index(sw)), index(s.pads[1]))

            def filter_row(kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                ih = arith.addi(top, arith.muli(kh, index(s.dilations[0])))
                row = source.at(n, channel, ih, left)
                row_weights = arith.addi(weights, arith.muli(kh, index(kw_count * lanes)))
                inputs: dict[int, ir.Value] = {}
                for kw in kws or range(kw_count):
                    weight = load(vec, w, [offset(row_weights, kw * lanes)])
                    for j in range(pixels):
                        column = j * sw + kw * dw
                        if column not in inputs:
                            inputs[column] = load(vec, x, [offset(row, column * source.step)])
                        acc[j] = vector.fma(inputs[column], weight, acc[j])
                return acc

            acc = for_carry(kh_begin, kh_end, 1, [f32_splat(target, lanes, 0.0)] * pixels, filter_row)
            _add_to_sums([out.store(acc[j], arith.addi(out_row, arith.muli(offset(ow0, j), index(result.step))),
                                    channel) for j in range(pixels)], sums)  # fmt: skip

        pixel_tiles(columns, cfg.nv, tile)
        for ow in zero_pixels(columns):
            _add_to_sums([out.store(f32_splat(target, lanes, 0.0), offset(out_row, ow * result.step), channel)], sums)

    def unit(u: ir.Value, sums: tuple[ir.Value, ir.Value] | None = None) -> None:  # row u of all the rows
        band_rows = s.out_height // cfg.bands
        image_band, channel = result.vector_of(arith.divsi(u, index(band_rows)), lanes)  # (n·bands + band, c)
        band = arith.remsi(image_band, index(cfg.bands))
        oh = arith.addi(arith.muli(band, index(band_rows)), arith.remsi(u, index(band_rows)))
        row(arith.divsi(image_band, index(cfg.bands)), channel, oh, sums)

    def band(u: ir.Value) -> None:  # with the mean: m[n, channel .., band] = Σ the band's rows / its pixels
        band_rows = s.out_height // cfg.bands
        image_band, channel = result.vector_of(u, lanes)
        m = f32_memref(args["m"], [cfg.bands * s.batch * s.channels])
        at = cfg.means().at(arith.divsi(image_band, index(cfg.bands)), channel, index(0),
                            arith.remsi(image_band, index(cfg.bands)))  # fmt: skip
        store(f32_splat(target, lanes, 0.0), m, [at])
        first = arith.muli(u, index(band_rows))  # its rows, each placed as a unit is (not hoisted as one band's)
        for_range(first, arith.addi(first, index(band_rows)), 1, lambda r: unit(r, (m, at)))
        store(arith.mulf(load(vec, m, [at]), f32_splat(target, lanes, 1.0 / (band_rows * s.out_width))), m, [at])

    for_range(index(args["unit_begin"]), arith.minsi(index(args["unit_end"]), index(cfg.units())), 1,
              band if cfg.mean else unit)  # fmt: skip


# ---------------------------------------------------------------- direct


@dataclass(frozen=True)
class BlockedDirectConfig:
    """Direct convolution writing NCHW[c] (or NHWC, `layout`): tiles of nv output pixels
    × mv vectors of `lanes` output channels of one group (a group's output channels
    fill whole vectors); the input plain NCHW or in the output's layout."""

    shape: ConvShape
    lanes: int
    nv: int = 1
    mv: int = 1
    blocked_input: bool = True
    epilogue: ep.Epilogue = field(default=())
    layout: BlockedLayout = "nchwc"
    kc: int = 0  # input channels of the group per pass over the output plane (0: all in one)

    algorithm: str = field(default="direct", init=False)

    @property
    def tile(self) -> str:
        passes = f", {self.kc} input channels per pass" if self.kc else ""
        return f"{self.nv} pixels x {self.mv * self.lanes} channels{passes}"

    def k_blocks(self) -> int:
        """Passes over the output plane: one per `kc` input channels of the group."""
        return ceil_div(self.shape.in_per_group, self.kc) if self.kc else 1

    def group_tiles(self) -> int:
        """Channel tiles per group: its vectors mv at a time, the last may hold fewer."""
        return ceil_div(self.shape.out_per_group // self.lanes, self.mv)

    def channel_tiles(self) -> int:
        return self.shape.group * self.group_tiles()

    def tile_channels(self) -> list[tuple[int, int]]:
        """Each channel tile's output channels [begin, end), group by group."""
        s, width = self.shape, self.mv * self.lanes
        return [(g * s.out_per_group + t, g * s.out_per_group + min(t + width, s.out_per_group))
                for g in range(s.group) for t in range(0, s.out_per_group, width)]  # fmt: skip

    def rows(self) -> int:
        """(image, output-channel tile, output row) triples: the rows of tiles the kernel runs."""
        s = self.shape
        return s.batch * self.channel_tiles() * s.out_height

    def units(self) -> int:
        """What threads divide: the rows, or with K blocks (image, output-channel tile)
        pairs, each a plane whose rows every pass visits in turn."""
        return self.rows() // (self.shape.out_height if self.kc else 1)

    def registers_needed(self) -> tuple[int, str]:
        """Accumulators, a tap's weight vectors and its input broadcasts: LLVM's scheduler
        issues all of a tap's broadcasts ahead of their FMAs, so each holds a register
        (counting one broadcast, tiles that spilled were taken to fit)."""
        count = self.nv * self.mv
        return count + self.mv + self.nv, f"{count} accumulators + {self.mv} weight vectors + {self.nv} input broadcasts"

    @property
    def symbol(self) -> str:
        return config_symbol("ac_conv_direct_nchwc_f32", self)

    def layouts(self) -> tuple[Layout, Layout]:
        """(what it reads, what it writes): a first layer reads NCHW."""
        return (self.layout if self.blocked_input else "nchw"), self.layout

    def modules(self, target: Target) -> list[KernelModule]:
        return [single_kernel(self.signature(), target, lambda args: _direct(self, target, args))]

    def validate(self, target: Target) -> None:
        s = self.shape
        if s.group > 1 and s.out_per_group % self.lanes:
            raise KernelError(f"the channel-blocked direct convolution needs each group's output channels to fill "
                              f"vectors of {self.lanes}, got {s.describe()}")  # fmt: skip
        # each input value is broadcast: an NHWC input may hold any number of channels
        check_blocked(target, self.lanes, {"the output channels": s.out_channels,
                                           **({"the input channels": s.channels}
                                              if self.blocked_input and self.layout == "nchwc" else {})})
        _check_registers(self, target)
        if self.kc < 0 or self.kc >= s.in_per_group:
            raise KernelError(f"a pass over {self.kc} input channels needs 0 < kc < {s.in_per_group} (0: one pass)")

    def pack_weights(self, weight: np.ndarray) -> np.ndarray:
        """W[Cout, C, KH, KW] as the kernel reads it: per channel tile of mv vectors (the
        last may hold fewer), [C, KH, KW, its channels], one tile after another, so a
        pixel tile streams its weights from one contiguous run. Read as [C, KH, KW, Cout]
        instead, a step's vectors sat Cout floats apart: 1024 output channels put every
        step in one L1 set and a new 4 KiB page, out of the prefetchers' reach. (C: a
        group's input channels; a tile lies in one group.)"""
        return np.concatenate([weight[begin:end].transpose(1, 2, 3, 0).ravel() for begin, end in self.tile_channels()])

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, w[, epilogue operands], unit_begin, unit_end)``."""
        s = self.shape
        source = layout_name(self.layout if self.blocked_input else "nchw", self.lanes)
        result = layout_name(self.layout, self.lanes)
        return _signature(self, f"direct convolution {s.describe()}, {source} to {result}",
                          s.out_channels * s.in_per_group * s.taps,
                          unit="(image, channel tile)" if self.kc else "(image, channel tile, output row)")  # fmt: skip


def _direct(cfg: BlockedDirectConfig, target: Target, args: dict) -> None:
    s, kernel = cfg.shape, _Direct.of(cfg, target, args)
    tiles = cfg.channel_tiles()

    def unit(u: ir.Value) -> None:
        if not cfg.kc:  # (image, channel tile, output row)
            n = arith.divsi(u, index(tiles * s.out_height))
            tile = arith.remsi(arith.divsi(u, index(s.out_height)), index(tiles))
            kernel.row(n, tile, arith.remsi(u, index(s.out_height)), None)
            return
        n, tile = arith.divsi(u, index(tiles)), arith.remsi(u, index(tiles))  # (image, channel tile): its plane

        def one_pass(c0: ir.Value) -> None:
            channels = (c0, arith.minsi(offset(c0, cfg.kc), index(s.in_per_group)))
            for_range(0, s.out_height, 1, lambda oh: kernel.row(n, tile, oh, channels))

        for_range(0, s.in_per_group, cfg.kc, one_pass)

    for_range(index(args["unit_begin"]), arith.minsi(index(args["unit_end"]), index(cfg.units())), 1, unit)


@dataclass(frozen=True)
class _Row:
    """Where one output row's tiles read: image n, the row's first input row `top` and
    filter rows [kh_begin, kh_end) inside the image, the tile's group's first input
    channel, where its weights start, and the input channels summed, [c0, c1) of the
    group's (all of them, or one pass's)."""

    n: ir.Value
    top: ir.Value
    kh_begin: ir.Value
    kh_end: ir.Value
    first_channel: ir.Value
    weights: ir.Value
    channels: tuple[ir.Value, ir.Value]


@dataclass(frozen=True)
class _Direct:
    """A direct kernel's output, input and weights, and how its rows split and address."""

    cfg: BlockedDirectConfig
    target: Target
    out: _Output
    x: ir.Value
    w: ir.Value
    columns: Columns
    source: Blocks
    result: Blocks

    @classmethod
    def of(cls, cfg: BlockedDirectConfig, target: Target, args: dict) -> _Direct:
        s = cfg.shape
        columns = Columns.of(s.width, s.out_width, s.kernel[1], s.strides[1], s.dilations[1], s.pads[1])
        return cls(cfg, target, _Output.of(cfg, target, args), f32_memref(args["x"], [math.prod(s.input_shape)]),
                   f32_memref(args["w"], [s.out_channels * s.in_per_group * s.taps]), columns,
                   Blocks.of(cfg.layout if cfg.blocked_input else "nchw", s.input_shape, cfg.lanes),
                   Blocks.of(cfg.layout, s.output_shape, cfg.lanes))  # fmt: skip

    def row(self, n: ir.Value, tile: ir.Value, oh: ir.Value, channels: tuple[ir.Value, ir.Value] | None) -> None:
        """Output row oh of channel tile `tile`: its sums over the group's input
        channels, or over those of one pass, `channels` = [c0, c1), added to the sums
        the earlier passes stored."""
        cfg, s, lanes = self.cfg, self.cfg.shape, self.cfg.lanes
        per_group, blocks = cfg.group_tiles(), s.out_per_group // lanes
        group, in_group = _group_of(tile, s.group, per_group)  # the tile's group, its tile within it
        co0 = arith.muli(arith.addi(arith.muli(group, index(blocks)), arith.muli(in_group, index(cfg.mv))),
                         index(lanes))  # fmt: skip
        top, kh_begin, kh_end = row_taps(s, oh)
        at = _Row(n, top, kh_begin, kh_end, arith.muli(group, index(s.in_per_group)),
                  arith.muli(co0, index(s.in_per_group * s.taps)),  # each tile before: its width of filters
                  channels or (index(0), index(s.in_per_group)))  # fmt: skip
        if not cfg.blocked_input:
            _prefetch_next_rows(cfg, self.x, n, at.first_channel, top, at.channels)

        def output_at(v: int, ow: ir.Value) -> tuple[ir.Value, ir.Value]:
            """Where Y[n, its vector v's channels, oh, ow] starts, and its first channel."""
            return self.result.at(n, offset(co0, v * lanes), oh, ow), offset(co0, v * lanes)

        def with_vectors(count: int) -> None:
            if channels is not None:
                ahead = arith.addi(at.weights, arith.muli(channels[1], index(s.taps * count * lanes)))
                _prefetch_next_pass(cfg, self.w, count, ahead, oh)

            def tile(ow0: ir.Value, pixels: int, kws: tuple[int, ...] | None) -> None:
                sums = self.sums(at, count, ow0, pixels, kws)
                _store_sums(self.out, sums, [output_at(v, offset(ow0, j)) for j in range(pixels) for v in range(count)],
                            channels, s.in_per_group)  # fmt: skip

            pixel_tiles(self.columns, cfg.nv, tile)
            for ow in zero_pixels(self.columns):
                for v in range(count):
                    self.out.store(f32_splat(self.target, lanes, 0.0), *output_at(v, index(ow)))

        vectors, last = min(cfg.mv, blocks), blocks - (per_group - 1) * cfg.mv  # a group's last tile may hold fewer
        if last == vectors:
            with_vectors(vectors)
        else:
            is_last = arith.cmpi(arith.CmpIPredicate.eq, in_group, index(per_group - 1))
            when_else(is_last, lambda: with_vectors(last), lambda: with_vectors(vectors))

    def sums(self, at: _Row, count: int, ow0: ir.Value, pixels: int, kws: tuple[int, ...] | None) -> list[ir.Value]:
        """The tile of `pixels` from ow0 x `count` vectors: its sums over the row's input
        channels, in chains (`in_chains`), through the filter rows inside the image and
        the taps `kws` (None: all)."""
        s, lanes, x, w = self.cfg.shape, self.cfg.lanes, self.x, self.w
        (_, kw_count), (sw, dw), step = s.kernel, (s.strides[1], s.dilations[1]), self.source.step
        left = arith.subi(arith.muli(ow0, index(sw)), index(s.pads[1]))

        def channel(c: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:  # c: within the group
            def filter_row(kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                ih = arith.addi(at.top, arith.muli(kh, index(s.dilations[0])))
                start = self.source.at(at.n, arith.addi(at.first_channel, c), ih, left)
                taps = arith.muli(arith.addi(arith.muli(c, index(s.kernel[0])), kh), index(kw_count))

                def tap(kw: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                    weights = arith.addi(arith.muli(arith.addi(taps, kw), index(count * lanes)), at.weights)
                    column = arith.addi(start, arith.muli(kw, index(dw * step)))
                    return _tap_products(self.out.vec, x, w, acc, (column, sw * step, pixels), (weights, count))

                return _row_of_taps(kw_count, kws, acc, tap)

            return for_carry(at.kh_begin, at.kh_end, 1, acc, filter_row)

        return in_chains(self.out.vec, pixels * count, *at.channels, chain_steps(s.taps, 1),
                         lambda c0, c1, zeros: for_carry(c0, c1, 1, zeros, channel))  # fmt: skip


def _prefetch_next_pass(cfg: BlockedDirectConfig, w: ir.Value, count: int, ahead: ir.Value, oh: ir.Value) -> None:
    """Ask for output row oh's share of the next pass's weights, which start at `ahead`
    (the tile's next kc input channels, or after its last pass the next tile's first),
    into L2: a model's other layers evict them between calls, and a pass's first tile,
    reading them first, would otherwise wait on memory with little work to overlap."""
    s = cfg.shape
    per_row = ceil_div(ceil_div(cfg.kc * s.taps * count * cfg.lanes, PREFETCH_LINE_FLOATS), s.out_height)
    first = arith.addi(ahead, arith.muli(oh, index(per_row * PREFETCH_LINE_FLOATS)))
    end = index(s.out_channels * s.in_per_group * s.taps - 1)
    for_range(0, per_row, 1, lambda i: memref.prefetch(
        w, [arith.minsi(arith.addi(first, arith.muli(i, index(PREFETCH_LINE_FLOATS))), end)], False,
        B_PREFETCH_LOCALITY, True))


def _store_sums(out: _Output, sums: list[ir.Value], places: list[tuple[ir.Value, ir.Value]],
                channels: tuple[ir.Value, ir.Value] | None, total: int) -> None:  # fmt: skip
    """A tile's sums stored at `places` (index, first channel): through the epilogue when
    whole; in a pass over `channels` = [c0, c1) of `total`, added to what the earlier
    passes stored (nothing before the first), and through the epilogue after the last
    (raw before it, for the next pass to add to)."""
    if channels is not None:
        first, zero = equal(channels[0], 0), splat(out.vec, 0.0)
        sums = [arith.addf(value, arith.select(first, zero, load(out.vec, out.y, [at])))
                for value, (at, _) in zip(sums, places, strict=True)]  # fmt: skip

    def whole() -> None:
        for value, (at, channel) in zip(sums, places, strict=True):
            out.store(value, at, channel)

    def partial() -> None:
        for value, (at, _) in zip(sums, places, strict=True):
            store(value, out.y, [at])

    if channels is None:
        whole()
    else:
        when_else(equal(channels[1], total), whole, partial)


def _tap_products(vec: ir.VectorType, x: ir.Value, w: ir.Value, acc: list[ir.Value],
                  pixels: tuple[ir.Value, int, int], vectors: tuple[ir.Value, int]) -> list[ir.Value]:  # fmt: skip
    """One filter tap's products: acc[j·count + v] += x[column + j·step] (broadcast) ·
    w[at + v·L .. + L], `pixels` = (column, step, pixel count), `vectors` = (at, count)."""
    (column, step, count_j), (at, count), lanes = pixels, vectors, vec.shape[0]
    acc = list(acc)
    weights = [load(vec, w, [offset(at, v * lanes)]) for v in range(count)]
    for j in range(count_j):
        value = vector.broadcast(vec, memref.load(x, [offset(column, j * step)]))
        for v in range(count):
            acc[j * count + v] = vector.fma(value, weights[v], acc[j * count + v])
    return acc


def _row_of_taps(kw_count: int, kws: tuple[int, ...] | None, acc: list[ir.Value],
                 tap: Callable[[ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:  # fmt: skip
    """A filter row's taps: every column in a loop where all fall inside (unrolled, LLVM
    keeps the input values neighbouring taps share live, and spills), else the border
    pixel's columns `kws` unrolled."""
    if kws is None and kw_count > 1:
        return for_carry(0, kw_count, 1, acc, tap)
    for kw in kws or range(kw_count):
        acc = tap(index(kw), acc)
    return acc


def _group_of(tile: ir.Value, groups: int, per_group: int) -> tuple[ir.Value, ir.Value]:
    """(group, tile within it) of a channel tile; ungrouped, (0, the tile)."""
    if groups == 1:
        return index(0), tile
    return arith.divsi(tile, index(per_group)), arith.remsi(tile, index(per_group))


PREFETCH_ROWS_AHEAD = 2
"""How many output rows ahead the input rows are asked for: the fastest of 1, 2 and 4
measured (`_prefetch_next_rows`)."""


def _prefetch_next_rows(cfg: BlockedDirectConfig, x: ir.Value, n: ir.Value, first: ir.Value, top: ir.Value,
                        channels: tuple[ir.Value, ir.Value]) -> None:  # fmt: skip
    """Ask for the plain NCHW input rows the next output row reads (the `channels` of the
    group from `first` that the row sums over, one prefetch per line): a model's first
    layer reads its input from memory, a few channels' rows at once, which the hardware
    prefetchers do not follow."""
    s = cfg.shape
    lines = ceil_div(s.width, PREFETCH_LINE_FLOATS)
    plane = s.height * s.width

    def channel(c: ir.Value) -> None:
        image_plane = arith.muli(arith.addi(arith.muli(n, index(s.channels)), arith.addi(first, c)), index(plane))
        for kh in range(s.kernel[0]):
            ih = arith.addi(top, index(PREFETCH_ROWS_AHEAD * s.strides[0] + kh * s.dilations[0]))
            row = arith.addi(image_plane, arith.muli(ih, index(s.width)))
            for_range(0, lines, 1, lambda i: memref.prefetch(
                x, [arith.addi(row, arith.muli(i, index(PREFETCH_LINE_FLOATS)))], False, PREFETCH_LOCALITY, True))

    for_range(*channels, 1, channel)


# ---------------------------------------------------------------- layout transform


@dataclass(frozen=True)
class Reblock:
    """The layout transform of an [N, C, H, W] tensor between NCHW and NCHW[c] or NHWC
    (`layout`; `to_blocked`: which way), L×L squares at a time."""

    batch: int
    channels: int
    pixels: int  # H·W
    lanes: int
    to_blocked: bool
    layout: BlockedLayout = "nchwc"

    @classmethod
    def of(cls, shape: tuple[int, ...], lanes: int, to_blocked: bool, layout: BlockedLayout = "nchwc") -> Reblock:
        """The transform of a tensor of NCHW `shape`, `lanes` channels at a time (NHWC:
        the widest vectors of at most `lanes` that divide its channels, which any
        number of its readers' lanes may then read)."""
        n, c, h, w = shape
        return cls(n, c, h * w, math.gcd(lanes, c) if layout == "nhwc" else lanes, to_blocked, layout)

    @property
    def blocks(self) -> Blocks:
        """The blocked side's addressing (its pixels as one row)."""
        return Blocks.of(self.layout, (self.batch, self.channels, 1, self.pixels), self.lanes)

    @property
    def by_pixels(self) -> bool:
        """Whether threads divide pixels rather than channel vectors: into NHWC, where
        dividing channels would have both threads store into every pixel's row."""
        return self.to_blocked and self.layout == "nhwc"

    def units(self) -> int:
        """What threads divide: (image, pixel) pairs `by_pixels`, else (image, channel
        vector) pairs."""
        return self.batch * (self.pixels if self.by_pixels else self.channels // self.lanes)

    @property
    def symbol(self) -> str:
        return config_symbol("ac_reblock_f32", self)

    def modules(self, target: Target) -> list[KernelModule]:
        return [single_kernel(self.signature(), target, lambda args: _reblock(self, target, args))]

    def validate(self, target: Target) -> None:
        check_blocked(target, self.lanes, {"the channels": self.channels})

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, unit_begin, unit_end)``."""
        size = self.batch * self.channels * self.pixels
        blocked = layout_name(self.layout, self.lanes)
        way = f"NCHW to {blocked}" if self.to_blocked else f"{blocked} to NCHW"
        return KernelSignature(self.symbol, (Param("y", Role.OUT, extent=(size,)), Param("x", Role.IN, extent=(size,)),
                                             Param("unit_begin", Role.SIZE), Param("unit_end", Role.SIZE)),
                               f"{self.batch}x{self.channels}x{self.pixels} from {way}: "
                               f"(image, {'pixel' if self.by_pixels else f'{self.lanes} channels'}) "
                               "[unit_begin, unit_end).")  # fmt: skip


def _reblock(cfg: Reblock, target: Target, args: dict) -> None:
    """y[n][block][p][l] = x[n][block·L + l][p] (NCHW[c]; NHWC: y[n][p][block·L + l]), or
    back: squares of L pixels × L channels read as L vectors, transposed in registers,
    stored as L vectors; the pixels past the last whole square of a run one vector at a
    time, gathered (or scattered) `pixels` apart. A thread's units are channel vectors
    (all their pixels), or `by_pixels` a run of pixels of each channel vector."""
    begin, end = index(args["unit_begin"]), arith.minsi(index(args["unit_end"]), index(cfg.units()))
    run = _ReblockRun(cfg, target, args)
    if not cfg.by_pixels:
        for_range(begin, end, 1, lambda u: run.pixels(u, index(0), index(cfg.pixels), cfg.pixels // cfg.lanes))
        return
    pixels, vectors = index(cfg.pixels), cfg.channels // cfg.lanes

    def image(n: ir.Value) -> None:  # its pixels in [begin, end), of every channel vector
        first = arith.muli(n, pixels)
        lo = arith.maxsi(arith.subi(begin, first), index(0))
        hi = arith.minsi(arith.subi(end, first), pixels)
        for_range(0, vectors, 1, lambda v: run.pixels(arith.addi(arith.muli(n, index(vectors)), v), lo, hi))

    for_range(arith.divsi(begin, pixels), arith.ceildivsi(end, pixels), 1, image)


class _ReblockRun:
    """The emit helpers of `_reblock`: one channel vector's pixels [lo, hi)."""

    def __init__(self, cfg: Reblock, target: Target, args: dict):
        self.cfg, self.lanes, self.vec = cfg, cfg.lanes, f32_vector_type(target, cfg.lanes)
        size = cfg.batch * cfg.channels * cfg.pixels
        self.y, self.x = f32_memref(args["y"], [size]), f32_memref(args["x"], [size])

    def pixels(self, u: ir.Value, lo: ir.Value, hi: ir.Value, squares: int | None = None) -> None:
        """Unit u's pixels [lo, hi): whole squares from lo (`squares` of them where known
        when emitting), then the rest one at a time."""
        lanes = self.lanes
        whole = (index(squares * lanes) if squares is not None else
                 arith.addi(lo, arith.muli(arith.divsi(arith.subi(hi, lo), index(lanes)), index(lanes))))
        start = arith.muli(u, index(lanes * self.cfg.pixels))
        base = self.cfg.blocks.at(*self.cfg.blocks.vector_of(u, lanes), index(0), index(0))
        if squares != 0:
            for_range(lo, whole, lanes, lambda p: self.square(start, base, p))
        if squares is None or squares * lanes < self.cfg.pixels:
            for_range(whole, hi, 1, lambda p: self.one(start, base, p))

    def at(self, start: ir.Value, base: ir.Value, p: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Pixel p of the unit: its place in the NCHW tensor and in the blocked one."""
        return arith.addi(start, p), arith.addi(base, arith.muli(p, index(self.cfg.blocks.step)))

    def square(self, start: ir.Value, base: ir.Value, p0: ir.Value) -> None:
        cfg, lanes = self.cfg, self.lanes
        plain_step, packed_step = cfg.pixels, cfg.blocks.step  # between rows of a square: NCHW channels, blocked pixels
        plain, packed = self.at(start, base, p0)
        source, source_step, target_at, target_step = ((plain, plain_step, packed, packed_step) if cfg.to_blocked
                                                       else (packed, packed_step, plain, plain_step))  # fmt: skip
        rows = transpose_square([load(self.vec, self.x, [offset(source, r * source_step)]) for r in range(lanes)])
        for r, row in enumerate(rows):
            store(row, self.y, [offset(target_at, r * target_step)])

    def one(self, start: ir.Value, base: ir.Value, p: ir.Value) -> None:
        cfg = self.cfg
        plain, packed = self.at(start, base, p)
        if cfg.to_blocked:
            store(strided_load(self.vec, self.x, [plain], cfg.pixels), self.y, [packed])
        else:
            strided_store(load(self.vec, self.x, [packed]), self.y, [plain], cfg.pixels)


BlockedConfig = BlockedDepthwiseConfig | BlockedDirectConfig
