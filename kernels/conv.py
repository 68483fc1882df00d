"""f32 2-D convolution in NCHW (ONNX's Conv: any stride, padding, dilation, groups),
with an optional epilogue (bias, residual, activations; `kernels.epilogue`) applied
to each output vector before it is stored. The same layers on channel-blocked
activations, NCHW[c], are `kernels.nchwc`'s (and gemm1x1's with a blocked product);
`layout_of` and `input_layout_of` say which layouts a config reads and writes.

Every algorithm is a matrix product per image and group: output channels (rows) ×
output pixels (columns) = weights (rows × Cin/G·KH·KW) · the image's windows. They
differ in how the windows are read:

direct — straight from the transformed image (`kernels.layout`: padded, split by
stride phase), so that tap t of output pixels ow..ow+L is one vector load at a
constant offset; a register tile of mr output channels × nv vectors along an output
row, cache-blocked over input channels (Georganas et al., SC'18; Zhang et al.,
ICML'18, with output pixels in the lanes instead of channels)::

    for ng in images × groups:  for c0 in 0..Cin/G step kc:
      for (oh, ow0) in column tiles (nv·L pixels of one output row; the last one of
                                     a row is partial, stored masked):
        for co0 in row tiles (mr output channels):
          acc[mr][nv] = Σ_{c in block} Σ_taps W[co, c, tap] · Xt[c, tap + oh·Wq + ow0 + v·L]
          Y tile = acc (first block) or += acc; epilogue on the last block

im2col — the windows copied once into a matrix of Cin/G·KH·KW rows × OH·OW columns
(from the transformed image: each row is a shifted copy), then the matmul generator's
kernel on it (`kernels.matmul`, channels along its rows);

gemm1x1 — a 1×1 convolution without padding, whose image is already that matrix:
the matmul kernel on the image itself, no copy. Either output pixels in the lanes
(Y = W·X, W packed once; stride 1), or output channels in the lanes, for images too
small to fill the vectors (7×7 = 49 pixels in four 16-lane vectors wastes a quarter)
or read at a stride: Yᵀ = Xᵀ·Wᵀ (`MatmulConfig.transposed`: X read in place, every
stride-th pixel where the stride is larger, `MatmulConfig.subsample`; W packed once as
Bᵀ, each output vector scattered along a channel column of Y).

winograd — F(2×2 or 4×4, 3×3) for 3×3 stride-1 layers: `kernels.winograd`.

depthwise — one input and one output channel per group: a product of one row, where
a tile of output channels has nothing to share. Its register tile is mr output
rows × nv vectors of output pixels of one channel instead, all sharing each tap's
weight (one broadcast per tap for mr·nv independent FMAs, enough to cover the FMA
latency where a one-channel direct tile of a 7-pixel row has one accumulator). Each
plane is transformed just before it is read, into a per-thread scratch plane that
stays in L1 (a whole-input transform pass cost as much as the convolution)::

    for plane in images × channels:
      Xt = the plane, transformed                 # kernels.layout.copy_plane
      for (oh0, ow0) in tiles (mr rows × nv·L pixels):
        for kh:  for kw (unrolled):
          acc[r][v] += w[c, kh, kw] · Xt[tap(kh, kw) + (oh0 + r)·Wq + ow0 + v·L]
        Y tile = epilogue(acc)                     # edge rows and the row's last vector masked
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels import matmul as mm
from kernels.abi import KernelSignature, Param, Role
from kernels.conv_shape import ConvShape
from kernels.emit import KernelModule, check_lanes, f32_memref, f32_vector_type, index
from kernels.emit import config_symbol, outlined_nest, single_kernel, tail_mask
from kernels.gemm import KBlocks, OutputTile, micro_kernel, write_back
from kernels.layout import PhaseSplit, copy_plane, generate_phase_split, source_memref
from kernels.loops import for_blocks, for_carry, for_range, for_tiles, load, offset, store, when_else
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div
from kernels.target import Target
from kernels import nchwc
from kernels.winograd import WinogradConfig

ConvAlgorithm = Literal["direct", "im2col", "gemm1x1", "depthwise", "winograd"]
CONV_ALGORITHMS: tuple[ConvAlgorithm, ...] = ("direct", "im2col", "gemm1x1", "depthwise", "winograd")


@dataclass(frozen=True)
class DirectConfig:
    """The direct algorithm: mr output channels × nv vectors of `lanes` output pixels
    per register tile, input channels in blocks of kc (0: all)."""

    shape: ConvShape
    lanes: int
    mr: int = 1
    nv: int = 1
    kc: int = 0
    epilogue: ep.Epilogue = field(default=())

    algorithm: ConvAlgorithm = field(default="direct", init=False)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def tile(self) -> str:
        return f"{self.mr}x{self.nv}"

    @property
    def block(self) -> int:
        """Input channels per block, resolved."""
        return min(self.kc or self.shape.in_per_group, self.shape.in_per_group)

    def tiles_per_row(self) -> int:
        return ceil_div(self.shape.out_width, self.nr)

    def row_tiles(self) -> int:
        """Tiles of mr output channels per group."""
        return ceil_div(self.shape.out_per_group, self.mr)

    def col_tiles(self) -> int:
        """Tiles of nr output pixels: every output row cut into tiles_per_row."""
        return self.shape.out_height * self.tiles_per_row()

    def groups(self) -> int:
        """(image, group) pairs."""
        return self.shape.batch * self.shape.group

    def split(self) -> PhaseSplit:
        """The input transform: slack for the last tile's vectors reading past its row."""
        return self.shape.phase_split(self.lanes, self.nr)

    def registers_needed(self) -> tuple[int, str]:
        count = self.mr * self.nv
        return count + self.nv + 1, f"{count} accumulators + {self.nv} input vectors + 1 weight broadcast"

    def layouts(self) -> tuple[Layout, Layout]:
        """(what it reads, what it writes)."""
        return "nchw", "nchw"

    def modules(self, target: Target) -> list[KernelModule]:
        """The input transform, then the convolution."""
        return [generate_phase_split(self.split(), target),
                single_kernel(direct_signature(self), target, lambda args: _direct(self, target, args))]  # fmt: skip

    @property
    def symbol(self) -> str:
        return config_symbol("ac_conv_direct_f32", self)

    def validate(self, target: Target) -> None:
        """Reject a config the target cannot run, with the reason."""
        if self.kc < 0:
            raise KernelError(f"kc must be >= 0, got {self.kc}")
        _check_tile(self, target)


def _check_tile(config: DirectConfig | DepthwiseConfig, target: Target) -> None:
    """Reject lanes the target cannot hold, empty tiles, and tiles needing more vector
    registers than it has."""
    check_lanes(target, config.lanes)
    for name in ("mr", "nv"):
        if getattr(config, name) < 1:
            raise KernelError(f"{name} must be >= 1, got {getattr(config, name)}")
    registers, held = config.registers_needed()
    if registers > target.vector_registers:
        raise KernelError(f"{config.algorithm} {config.tile} needs {held} = {registers} vector registers; "
                              f"{target.name} has {target.vector_registers}")  # fmt: skip


@dataclass(frozen=True)
class GemmConvConfig:
    """im2col or gemm1x1: the matmul kernel `gemm` on each image and group's matrix
    (its shape is the convolution's `gemm_shape`, its channels along its rows), or for
    gemm1x1 on its transpose (`gemm.transposed`: channels along its columns)."""

    shape: ConvShape
    algorithm: ConvAlgorithm
    gemm: mm.MatmulConfig

    @property
    def lanes(self) -> int:
        return self.gemm.lanes

    @property
    def epilogue(self) -> ep.Epilogue:
        return self.gemm.epilogue

    @property
    def prologue(self) -> ep.Epilogue:
        return self.gemm.prologue

    @property
    def tile(self) -> str:
        return f"{self.gemm.algorithm} {self.gemm.tile}{' channels in lanes' if self.gemm.transposed else ''}"

    def split(self) -> PhaseSplit:
        """im2col's input transform (slack: a row copy's last vector reads past it)."""
        return self.shape.phase_split(self.gemm.lanes, self.gemm.lanes)

    def im2col(self) -> Im2col:
        return Im2col(self.shape, self.gemm.lanes)

    def layouts(self) -> tuple[Layout, Layout]:
        """(what it reads, what it writes): a blocked product reads and writes NCHW[c] or
        NHWC, each side its own."""
        if not self.gemm.blocked:
            return "nchw", "nchw"
        return ("nhwc" if self.gemm.a_nhwc else "nchwc"), ("nhwc" if self.gemm.c_nhwc else "nchwc")

    def modules(self, target: Target) -> list[KernelModule]:
        """gemm1x1: the product on the image itself; im2col: the input transform, the
        window copy, the product."""
        if self.algorithm == "gemm1x1":
            return [mm.generate(self.gemm, target)]
        im2col = self.im2col()
        return [generate_phase_split(self.split(), target),
                single_kernel(im2col.signature(), target, lambda args: _im2col(im2col, target, args)),
                mm.generate(self.gemm, target)]  # fmt: skip

    def validate(self, target: Target) -> None:
        if self.algorithm not in ("im2col", "gemm1x1"):
            raise KernelError(f"{self.algorithm} is not a matrix-product convolution")
        if self.gemm.prologue and (self.algorithm != "gemm1x1" or self.shape.group > 1):
            raise KernelError("a prologue is applied by an ungrouped gemm1x1 product")
        in_place = self.shape.pointwise or self.shape.unpadded_1x1 and self.gemm.transposed
        if self.algorithm == "gemm1x1" and not in_place:
            raise KernelError("gemm1x1 needs a 1x1 convolution without padding, of stride 1 unless its product is "
                              "transposed, got " + self.shape.describe())  # fmt: skip
        if self.gemm.subsample != (self.shape.subsample() if self.algorithm == "gemm1x1" else (0, 0, 1, 1)):
            raise KernelError(f"the product of {self.shape.describe()} reads the pixels "
                              f"{self.shape.subsample()} (height, width, strides), not {self.gemm.subsample}")
        if self.gemm.transposed:
            product = self.shape.gemm_shape()
            if self.algorithm != "gemm1x1" or self.gemm.shape != transposed_shape(product) or \
                    self.gemm.channel_axis != "columns":
                raise KernelError(f"a transposed GEMM of {self.shape.describe()} is a gemm1x1 of "
                                      f"{transposed_shape(product)} with channels along its columns")  # fmt: skip
        elif self.gemm.shape != self.shape.gemm_shape() or self.gemm.channel_axis != "rows":
            raise KernelError(f"the GEMM of {self.shape.describe()} is {self.shape.gemm_shape()} with "
                                  "channels along its rows")  # fmt: skip
        if self.gemm.accumulate:
            raise KernelError("a convolution's GEMM overwrites its output (accumulate=False)")
        self.gemm.validate(target)


def transposed_shape(product: mm.MatmulShape) -> mm.MatmulShape:
    """The product computed as its transpose: Cᵀ[N, M] = Bᵀ[N, K] · Aᵀ[K, M]."""
    return mm.MatmulShape(product.n, product.m, product.k)


@dataclass(frozen=True)
class DepthwiseConfig:
    """The depthwise algorithm: mr output rows × nv vectors of `lanes` output pixels of
    one channel per register tile."""

    shape: ConvShape
    lanes: int
    mr: int = 1
    nv: int = 1
    epilogue: ep.Epilogue = field(default=())

    algorithm: ConvAlgorithm = field(default="depthwise", init=False)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def tile(self) -> str:
        return f"{self.mr}x{self.nv} rows"

    def planes(self) -> int:
        return self.shape.batch * self.shape.channels

    def split(self) -> PhaseSplit:
        return self.shape.phase_split(self.lanes, self.nr)

    def registers_needed(self) -> tuple[int, str]:
        count = self.mr * self.nv
        return count + 2, f"{count} accumulators + 1 input vector + 1 weight broadcast"

    def layouts(self) -> tuple[Layout, Layout]:
        """(what it reads, what it writes)."""
        return "nchw", "nchw"

    def modules(self, target: Target) -> list[KernelModule]:
        """One kernel: each plane transformed into a scratch plane, then convolved."""
        return [single_kernel(self.signature(), target, lambda args: _depthwise(self, target, args))]

    @property
    def symbol(self) -> str:
        return config_symbol("ac_conv_depthwise_f32", self)

    def validate(self, target: Target) -> None:
        if not self.shape.depthwise:
            raise KernelError(f"depthwise needs one input and one output channel per group, got "
                                  f"{self.shape.describe()}")  # fmt: skip
        _check_tile(self, target)

    def workspace(self) -> int:
        """f32 elements of one thread's scratch plane (its slack included)."""
        return self.split().scratch_plane

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, w[, epilogue operands], work, plane_begin, plane_end)``: x is the
        NCHW input, work a thread's scratch plane."""
        s = self.shape
        outputs = s.batch * s.out_channels * s.out_height * s.out_width
        params = [Param("y", Role.OUT, extent=(outputs,)), Param("x", Role.IN, extent=(math.prod(s.input_shape),)),
                  Param("w", Role.IN, extent=(s.out_channels * s.taps,))]  # fmt: skip
        for _, name, operand in ep.operand_names(self.epilogue):
            params.append(Param(name, Role.IN, extent=(s.out_channels if operand == "channel" else outputs,)))
        params += [Param("work", Role.INOUT, extent=(self.workspace(),)),
                   Param("plane_begin", Role.SIZE), Param("plane_end", Role.SIZE)]  # fmt: skip
        return KernelSignature(self.symbol, tuple(params),
                               f"depthwise convolution {s.describe()}, then {ep.describe(self.epilogue)}: "
                               f"tiles of {self.mr} output rows x {self.nr} pixels, planes [plane_begin, plane_end).")


ConvConfig = DirectConfig | GemmConvConfig | DepthwiseConfig | WinogradConfig | nchwc.BlockedConfig
Layout = nchwc.Layout


def layout_of(config: ConvConfig) -> Layout:
    """The layout a config writes its output in: NCHW, channel-blocked NCHW[c] with
    c = its lanes, or NHWC (`kernels.nchwc`)."""
    return config.layouts()[1]


def input_layout_of(config: ConvConfig) -> Layout:
    """The layout a config reads its input in (a blocked direct layer may read NCHW, a
    blocked 1x1 product NHWC into NCHW[c] or the other way)."""
    return config.layouts()[0]


@dataclass(frozen=True)
class Im2col:
    """The copy of one image and group's windows from the transformed input into the
    matrix col[(c, tap), (oh, ow)] (Cin/G·KH·KW × OH·OW)."""

    shape: ConvShape
    lanes: int

    @property
    def rows(self) -> int:
        return self.shape.in_per_group * self.shape.taps

    @property
    def size(self) -> int:
        return self.rows * self.shape.out_height * self.shape.out_width

    @property
    def symbol(self) -> str:
        return config_symbol("ac_im2col_f32", self)

    def signature(self) -> KernelSignature:
        """``SYMBOL(col, xt, ng, row_begin, row_end)``: rows [row_begin, row_end) of the
        matrix of image-and-group ng."""
        split = self.shape.phase_split(self.lanes, self.lanes)
        return KernelSignature(
            symbol=self.symbol,
            params=(Param("col", Role.INOUT, extent=(self.size,)), Param("xt", Role.IN, extent=(split.size,)),
                    Param("ng", Role.SIZE), Param("row_begin", Role.SIZE), Param("row_end", Role.SIZE)),  # fmt: skip
            doc=f"im2col of {self.shape.describe()}: rows [row_begin, row_end) of image-group ng's "
            f"{self.rows}x{self.shape.out_height * self.shape.out_width} window matrix.",
        )


DIRECT_SIZES = ("ng_begin", "ng_end", "row_begin", "row_end", "col_begin", "col_end")


def direct_signature(config: DirectConfig) -> KernelSignature:
    """``SYMBOL(y, xt, w[, epilogue operands], ng_begin, ng_end, row_begin, row_end,
    col_begin, col_end)``: image-groups × row tiles × column tiles in those ranges."""
    s = config.shape
    outputs = s.batch * s.out_channels * s.out_height * s.out_width
    params = [Param("y", Role.OUT, extent=(outputs,)),
              Param("xt", Role.IN, extent=(config.split().size,)),
              Param("w", Role.IN, extent=(s.out_channels * s.in_per_group * s.taps,))]  # fmt: skip
    for _, name, operand in ep.operand_names(config.epilogue):
        params.append(Param(name, Role.IN, extent=(s.out_channels if operand == "channel" else outputs,)))
    params += [Param(name, Role.SIZE) for name in DIRECT_SIZES]
    return KernelSignature(
        symbol=config.symbol, params=tuple(params),
        doc=f"direct convolution {s.describe()}, then {ep.describe(config.epilogue)}: register tiles of "
        f"{config.mr} output channels x {config.nr} output pixels, input channels in blocks of {config.block}.",
    )  # fmt: skip


# ---------------------------------------------------------------- direct


def _direct_buffers(cfg: DirectConfig, target: Target, args: dict) -> tuple:
    """(vector type, y, xt, w, epilogue operands by position) made from the kernel's
    arguments: Y's rows are (n, co, oh)."""
    s = cfg.shape
    rows = [s.batch * s.out_channels * s.out_height, s.out_width]
    operands = {i: f32_memref(args[name], [s.out_channels] if kind == "channel" else rows)
                for i, name, kind in ep.operand_names(cfg.epilogue)}  # fmt: skip
    return (f32_vector_type(target, cfg.lanes), f32_memref(args["y"], rows),
            f32_memref(args["xt"], [cfg.split().size]),
            f32_memref(args["w"], [s.out_channels * s.in_per_group * s.taps]), operands)  # fmt: skip


def _direct(cfg: DirectConfig, target: Target, args: dict) -> None:
    s, split = cfg.shape, cfg.split()
    lanes, nr = cfg.lanes, cfg.nr
    ow_ = s.out_width
    buffers = _direct_buffers(cfg, target, args)
    taps = s.tap_offsets(split)
    blocks = KBlocks(s.in_per_group, cfg.block, accumulate=False)
    full_per_row, edge_columns = divmod(ow_, nr)
    per_row = cfg.tiles_per_row()

    def mask(count: int) -> ir.Value | None:
        return tail_mask(target, lanes, count)

    def image_group(ng: ir.Value) -> None:
        n = arith.divsi(ng, index(s.group))
        g = arith.remsi(ng, index(s.group))
        first_plane = arith.addi(arith.muli(n, index(s.channels)), arith.muli(g, index(s.in_per_group)))
        first_channel = arith.muli(g, index(s.out_per_group))

        def channel_block(c0: ir.Value) -> None:
            c_end = arith.minsi(offset(c0, cfg.block), index(s.in_per_group))

            def column_tile(ct: ir.Value) -> None:
                oh = arith.divsi(ct, index(per_row))
                ow0 = arith.muli(arith.remsi(ct, index(per_row)), index(nr))
                window = arith.addi(arith.muli(first_plane, index(split.plane_size)),
                                    arith.addi(arith.muli(oh, index(split.phase_cols)), ow0))  # fmt: skip

                def tiles(columns: int) -> None:
                    def row_tile(co0: ir.Value, rows: int) -> None:
                        place = [c0, c_end, window, n, first_channel, co0, oh, ow0]
                        if (rows, columns) == (cfg.mr, nr):
                            _direct_tile(cfg, buffers, taps, blocks, place, rows, columns, mask)
                            return

                        def edge(inner: dict, values: list[ir.Value]) -> None:  # its own micro-kernel
                            _direct_tile(cfg, _direct_buffers(cfg, target, inner), taps, blocks, values, rows,
                                         columns, mask)  # fmt: skip

                        outlined_nest(f"{cfg.symbol}_tile_{rows}x{columns}", args, place, edge)

                    for_tiles(*rows_range, cfg.mr, s.out_per_group, row_tile)

                if edge_columns and full_per_row:
                    is_edge = arith.cmpi(arith.CmpIPredicate.eq, arith.remsi(ct, index(per_row)), index(full_per_row))
                    when_else(is_edge, lambda: tiles(edge_columns), lambda: tiles(nr))
                else:
                    tiles(edge_columns or nr)

            for_range(*cols_range, 1, column_tile)

        for_blocks(0, s.in_per_group, cfg.block, s.in_per_group, channel_block)

    rows_range = (index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(cfg.row_tiles())))
    cols_range = (index(args["col_begin"]), arith.minsi(index(args["col_end"]), index(cfg.col_tiles())))
    for_blocks(index(args["ng_begin"]), arith.minsi(index(args["ng_end"]), index(cfg.groups())), 1, cfg.groups(),
               image_group)  # fmt: skip


def _direct_tile(cfg: DirectConfig, buffers: tuple, taps: list[int], blocks: KBlocks, place: list[ir.Value],
                 rows: int, columns: int, mask) -> None:  # fmt: skip
    """One register tile: at place = (c0, c_end, window, n, first_channel, co0, oh,
    ow0), `rows` output channels of image n from first_channel + co0 × `columns` output
    pixels from (oh, ow0), over the input channels [c0, c_end). An edge tile's is a
    function of its own (`outlined_nest`), which LLVM compiles on another core."""
    vec, y, xt, w, operands = buffers
    c0, c_end, window, n, first_channel, co0, oh, ow0 = place
    c_range = (c0, c_end)
    s, lanes = cfg.shape, cfg.lanes
    split_plane = cfg.split().plane_size
    k_row = s.in_per_group * s.taps
    vectors = ceil_div(columns, lanes)
    masks = [mask(columns - v * lanes) for v in range(vectors)]
    channels = [arith.addi(first_channel, offset(co0, r)) for r in range(rows)]
    image = arith.muli(n, index(s.out_channels))
    out_rows = [arith.addi(arith.muli(arith.addi(image, c), index(s.out_height)), oh) for c in channels]
    cols = [offset(ow0, v * lanes) for v in range(vectors)]
    out = OutputTile(y, vec, out_rows, cols, masks)
    out.prefetch()
    weight_rows = [arith.muli(c, index(k_row)) for c in channels]

    def load_a(r: int, c: ir.Value, t: int) -> ir.Value:
        return memref.load(w, [arith.addi(weight_rows[r], offset(arith.muli(c, index(s.taps)), t))])

    def load_b(v: int, c: ir.Value, t: int) -> ir.Value:  # unmasked: junk lanes read the border or slack
        at = arith.addi(window, arith.muli(c, index(split_plane)))
        return load(vec, xt, [offset(at, taps[t] + v * lanes)])

    accs = micro_kernel(vec, rows, vectors, *c_range, 1, load_a, load_b, taps=s.taps)

    def finish(value: ir.Value, r: int, v: int) -> ir.Value:
        def operand(i: int) -> ir.Value:
            if cfg.epilogue[i].operand == "channel":
                return vector.broadcast(vec, memref.load(operands[i], [channels[r]]))
            return load(vec, operands[i], [out_rows[r], cols[v]], masks[v])

        return ep.apply(cfg.epilogue, value, operand)

    write_back(out, accs, *c_range, blocks, finish if cfg.epilogue else None)


# ---------------------------------------------------------------- depthwise


def _depthwise(cfg: DepthwiseConfig, target: Target, args: dict) -> None:
    s, split, lanes = cfg.shape, cfg.split(), cfg.lanes
    vec = f32_vector_type(target, lanes)
    oh_, ow_ = s.out_height, s.out_width
    y = f32_memref(args["y"], [cfg.planes() * oh_, ow_])  # rows: (plane, oh)
    x = source_memref(split, args["x"])
    xt = f32_memref(args["work"], [cfg.workspace()])
    w = f32_memref(args["w"], [s.out_channels * s.taps])
    operands = {i: f32_memref(args[name], [s.out_channels] if kind == "channel" else [cfg.planes() * oh_, ow_])
                for i, name, kind in ep.operand_names(cfg.epilogue)}  # fmt: skip
    zero = vector.broadcast(vec, arith.constant(ir.F32Type.get(), 0.0))

    def plane(p: ir.Value) -> None:
        channel = arith.remsi(p, index(s.channels))
        first_weight = arith.muli(channel, index(s.taps))
        plane_start = index(0)
        copy_plane(split, target, x, xt, p, plane_start)

        def row_tile(oh0: ir.Value, rows: int) -> None:
            def column_tile(ow0: ir.Value, columns: int) -> None:
                vectors = ceil_div(columns, lanes)
                masks = [tail_mask(target, lanes, columns - v * lanes) for v in range(vectors)]
                starts = [arith.addi(plane_start, arith.addi(arith.muli(offset(oh0, r), index(split.phase_cols)), ow0))
                          for r in range(rows)]  # fmt: skip
                def filter_row(kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                    # a loop over filter rows, the columns unrolled: LLVM's scheduler hoisted
                    # the loads of every unrolled tap and spilled tiles of 12-16 accumulators
                    dy = arith.muli(kh, index(s.dilations[0]))
                    phase_row = arith.remsi(dy, index(s.strides[0]))
                    row_offset = arith.addi(arith.muli(phase_row, index(s.strides[1] * split.phase_size)),
                                            arith.muli(arith.divsi(dy, index(s.strides[0])), index(split.phase_cols)))  # fmt: skip
                    weights = arith.addi(first_weight, arith.muli(kh, index(s.kernel[1])))
                    for kw in range(s.kernel[1]):
                        tap = split.tap_offset(0, kw * s.dilations[1])  # the column part of the offset
                        weight = vector.broadcast(vec, memref.load(w, [offset(weights, kw)]))
                        acc = [vector.fma(weight, load(vec, xt, [offset(arith.addi(starts[r], row_offset), tap + v * lanes)]),
                                          acc[r * vectors + v]) for r in range(rows) for v in range(vectors)]  # fmt: skip
                    return acc

                acc = for_carry(0, s.kernel[0], 1, [zero] * (rows * vectors), filter_row)
                out_rows = [arith.addi(arith.muli(p, index(oh_)), offset(oh0, r)) for r in range(rows)]
                cols = [offset(ow0, v * lanes) for v in range(vectors)]
                for r in range(rows):
                    for v in range(vectors):
                        def operand(i: int, r: int = r, v: int = v) -> ir.Value:
                            if cfg.epilogue[i].operand == "channel":
                                return vector.broadcast(vec, memref.load(operands[i], [channel]))
                            return load(vec, operands[i], [out_rows[r], cols[v]], masks[v])

                        value = ep.apply(cfg.epilogue, acc[r * vectors + v], operand)
                        store(value, y, [out_rows[r], cols[v]], masks[v])

            for_tiles(index(0), index(ceil_div(ow_, cfg.nr)), cfg.nr, ow_, column_tile)

        for_tiles(index(0), index(ceil_div(oh_, cfg.mr)), cfg.mr, oh_, row_tile)

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(cfg.planes())), 1, plane)


# ---------------------------------------------------------------- im2col


def _im2col(copy: Im2col, target: Target, args: dict) -> None:
    """col[c·T + t, oh·OW + ow] = Xt[plane of c][tap t + oh·Wq + ow], row by output row:
    whole vectors read (the transformed planes have slack), the last one stored masked."""
    s, lanes = copy.shape, copy.lanes
    split = s.phase_split(lanes, lanes)
    vec = f32_vector_type(target, lanes)
    ow_ = s.out_width
    col = f32_memref(args["col"], [copy.rows * s.out_height, ow_])  # rows: ((c, t), oh)
    xt = f32_memref(args["xt"], [split.size])
    taps = s.tap_offsets(split)
    ng = index(args["ng"])
    n, g = arith.divsi(ng, index(s.group)), arith.remsi(ng, index(s.group))
    first_plane = arith.addi(arith.muli(n, index(s.channels)), arith.muli(g, index(s.in_per_group)))

    def matrix_row(row: ir.Value) -> None:
        c, t = arith.divsi(row, index(s.taps)), arith.remsi(row, index(s.taps))
        plane_start = arith.muli(arith.addi(first_plane, c), index(split.plane_size))
        tap = index(0)
        for i, value in enumerate(taps):  # the tap's offset: a select chain over the constants
            tap = arith.select(arith.cmpi(arith.CmpIPredicate.eq, t, index(i)), index(value), tap)
        source = arith.addi(plane_start, tap)

        def output_row(oh: ir.Value) -> None:
            start = arith.addi(source, arith.muli(oh, index(split.phase_cols)))
            col_row = arith.addi(arith.muli(row, index(s.out_height)), oh)

            def piece(ow: ir.Value, count: int) -> None:
                m = tail_mask(target, lanes, count)
                store(load(vec, xt, [arith.addi(start, ow)]), col, [col_row, ow], m)

            for_tiles(index(0), index(ceil_div(ow_, lanes)), lanes, ow_, piece)

        for_range(0, s.out_height, 1, output_row)

    for_range(index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(copy.rows)), 1, matrix_row)
