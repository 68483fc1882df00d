"""f32 matmul ``C = A·B`` (or ``C += A·B``), row-major, generated for one static shape,
with an optional epilogue applied to C as it is stored (see `kernels.epilogue`).

Four algorithms, chosen and parameterized by `MatmulConfig`:

broadcast (Buddy Compiler's matmul vectorization: one row, C streamed through memory)::

    for i in rows:  for k0 in 0..K step u:                 # u = unroll, then the rest
        for j in cols step L:  C[i, j:j+L] (+)= sum over k in k0..k0+u of A[i,k] * B[k, j:j+L]
                                                                # last vector masked
        [epilogue: one more pass over the row's vectors]

tiled (register-tiled outer products, cache-blocked, no packing) and packed (the same
loop nest around packed, padded copies of the A and B blocks, BLIS/Goto; the
micro-kernel and packing are `kernels.gemm`'s; with `a_packed`, A arrives already in
its packed layout, `MatmulConfig.pack_a`: a layer's weights, packed once at build time;
with `b_packed`, B likewise, in `pack_b`'s layout (and with `a_in_place` as well, one
K block, A's rows are read where they lie);
with `transposed`, A arrives as Aᵀ and is read in place, B as Bᵀ packed once at build
time by `pack_b`, and C leaves as Cᵀ, each tile's vectors scattered — a 1×1
convolution with its output channels in the lanes (with `subsample`, of a stride above
1: Aᵀ's rows every stride-th pixel of its image); with `blocked` as well, Aᵀ and Cᵀ
are channel-blocked images, NCHW[c] (`kernels.nchwc`), and each vector is stored whole)::

    for jc in cols step nc:  for pc in 0..K step kc:      [packed: B[pc:,jc:] -> Bp, unless b_packed]
      for ic in rows step mc:                              [packed: A[ic:,pc:] -> Ap, if packs_a]
        for jr in jc..jc+nc step nr:  for ir in ic..ic+mc step mr:
          acc[mr][nv] = micro-kernel over k in pc..pc+kc
          C tile = acc on the first K block unless accumulating, else C tile += acc;
          the epilogue on the last K block                 # nr = nv*L

dot (matrix times vector, N = 1 only: C's one column, vectorized along K instead)::

    for ir in rows step mr:  acc[mr][u] = 0
        for k in 0..K step u*L:  acc[r][c] += A[ir+r, k+c*L : +L] * B[k+c*L : +L, 0]
                                                           # then whole vectors, last one masked
        C[ir+r, 0] = epilogue((C +) sum of acc[r][*] and of its lanes)

    with `a_packed` (a constant A), each row tile's rows arrive interleaved vector by
    vector along K (`MatmulConfig.pack_a`): the tile reads one stream through memory,
    not mr rows apart.

Edges: the last row tile has M mod mr rows, the last column tile N mod nr columns
(its last vector masked); K blocks end at K. With `full_row_edge` / `full_column_edge`,
an edge tile is computed as a full one and only stored as an edge, so that its own
micro-kernel is not generated: rows past M read A's last row again (in place or
packed; zeros in an A packed once), columns past N zero-padded panels. Otherwise an
edge tile's micro-kernel is a function of its own, as packing is (LLVM compiles a
module's functions in parallel, `kernels.lower.compile_units`).

The kernel computes the row tiles ``[row_begin, row_end)`` of the column tiles
``[col_begin, col_end)`` (mr rows, nr columns; one row and one vector for
broadcast), so that threads can call it on disjoint blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_blocked, check_lanes, f32_memref, f32_vector_type, index, kernel_body
from kernels.emit import config_symbol, new_module, offset_pointer, outlined_nest, tail_mask, verify
from kernels.gemm import BlockedTile, KBlocks, OutputTile, PackedA, PackedB, TransposedTile, chain_steps, in_chains
from kernels.gemm import micro_kernel, write_back
from kernels.loops import Sized, for_blocks, for_carry, for_range, for_tile_trips, for_tiles, for_unrolled, lane_sum
from kernels.loops import less, load, offset, sized_tile, store, strided_load, when
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div, round_up
from kernels.target import Target

Algorithm = Literal["broadcast", "tiled", "packed", "dot"]
ChannelAxis = Literal["columns", "rows"]
ALGORITHMS: tuple[Algorithm, ...] = ("broadcast", "tiled", "packed", "dot")


@dataclass(frozen=True)
class MatmulShape:
    """C[M,N] = A[M,K] · B[K,N]."""

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise KernelError(f"matmul sizes must be >= 1, got M={self.m} N={self.n} K={self.k}")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class MatmulConfig:
    """Everything that decides the generated matmul code: with a target, the code."""

    shape: MatmulShape
    algorithm: Algorithm
    lanes: int  # f32 per vector (may be narrower than the ISA's widest)
    mr: int = 1  # rows of the register tile (1 for broadcast; rows per tile for dot)
    nv: int = 1  # vectors per row of the register tile (tile width nr = nv·lanes)
    kc: int = 0  # K block (0: all of K)
    mc: int = 0  # rows per M block (0: all rows), a multiple of mr
    nc: int = 0  # columns per N block (0: all of N), a multiple of nr
    unroll: int = 1  # copies of the K-loop body per trip (dot: partial sums per row)
    accumulate: bool = False  # C += A·B instead of C = A·B
    epilogue: ep.Epilogue = field(default=())  # ops applied to C as it is stored
    channel_axis: ChannelAxis = "columns"  # where a channel operand (bias) varies: along C's
    # columns (a matmul's output features), or its rows (a convolution computed as a GEMM
    # whose rows are output channels and columns output pixels)
    batch: int = 1  # independent products C[q] = A[q]·B[q], each operand stacked q-major
    # (a Winograd convolution's one product per transform position); the tile ranges
    # apply within each product
    product_strides: tuple[int, int] = (0, 0)  # floats from one product's B to the next's
    # and from one C (and residual) to the next; 0: back to back (K·N, M·N)
    a_packed: bool = False  # packed and dot: A arrives in the layout `pack_a` makes (a
    # constant A, a layer's weights, packed once when the layer is built, not per call)
    b_packed: bool = False  # packed only: B arrives in the layout `pack_b` makes from Bᵀ
    # (a constant B, a layer's weights, packed once when built), read as a transposed
    # product reads its B
    a_in_place: bool = False  # packed with b_packed, one K block: A's rows read where they
    # lie (each a contiguous run of K floats), not copied into panels on every call
    transposed: bool = False  # packed only: every operand stored transposed — `a` holds
    # Aᵀ (K×M, read in place), `b` Bᵀ (N×K, a constant) packed once by `pack_b`, `c`
    # receives Cᵀ (N×M, each vector scattered). A 1×1 convolution Y = W·X computed as
    # Yᵀ = Xᵀ·Wᵀ: its output channels in the lanes, its pixels along the tile's rows
    blocked: bool = False  # transposed only: Aᵀ and Cᵀ in blocks of `lanes` channels — an
    # NCHW[c] image (c = lanes): Aᵀ[k, m] at (k div L)·M·L + m·L + k mod L, Cᵀ[n, m] likewise,
    # so each output vector is one contiguous store instead of a scatter
    a_nhwc: bool = False  # blocked only: Aᵀ an NHWC image instead, one block of all K
    # channels — Aᵀ[k, m] at m·K + k (A row-major): any K
    c_nhwc: bool = False  # blocked only: Cᵀ an NHWC image, Cᵀ[n, m] at m·N + n (C
    # row-major): any N, a pixel's last vector masked
    subsample: tuple[int, int, int, int] = (0, 0, 1, 1)  # transposed only: (H, W, sh, sw) where
    # Aᵀ is an H×W image of which the product reads every sh-th row and sw-th column — a 1×1
    # convolution of stride (sh, sw) on its input in place: row m reads pixel
    # (m div OW)·sh·W + (m mod OW)·sw, OW = (W − 1) div sw + 1; (0, 0, 1, 1): row m, pixel m
    full_row_edge: bool = False  # tiled and packed: the last row tile, if partial, is
    # computed as a full one (rows past M read A's last row again, or zeros packed once)
    # and only stored as an edge: it has no micro-kernel of its own
    full_column_edge: bool = False  # packed only: the same for the last column tile
    # (columns past N read the zero-padded B panels)
    leading: tuple[int, int, int] = (0, 0, 0)  # the row strides (floats) of A, B and C as
    # stored; 0: dense (K, N, N — K for a b_transposed B). A strided view of a wider
    # matrix (one attention head of a [tokens, heads·width] tensor) read or written in
    # place instead of copied out or in by a transpose kernel
    b_transposed: bool = False  # packed only: B stored as Bᵀ (N×K, read in place), each
    # call's B panels gathered from it (a product with Kᵀ, K as its producer wrote it)
    band: tuple[int, int, int, int] = (0, 0, 0, 0)  # packed, B packed at build, A in place:
    # (depth, num, den, offset) — column tile t multiplies only B's `depth` rows from
    # k_t = clamp((t·nr·num) div den + offset, 0, K − depth), its other rows being zero
    # (a resize's weights: two or four taps per output); depth 0: all of K
    band_rows: bool = False  # tiled, one K block: the band is row tile t's instead, A's
    # columns from k_t with t·mr for t·nr (a constant A: a resize along an outer axis)
    prologue: ep.Epilogue = field(default=())  # ops applied to each element of B as it
    # is read, their operands one value per row of B (`prologue_names`): a producer's
    # per-channel ops computed by a 1×1 convolution instead of in a pass of its own —
    # tiled and packed, B (the image) read in place: any such ops, on its loads or as it
    # is packed; transposed, B (the weights) packed at build time: a scale alone, on each
    # call's copy of the weights (Bᵀ's columns scaled: the same product)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def tile(self) -> str:
        """The register tile in a few characters, for tables: '6x2' (rows x vectors),
        'u8' (broadcast: rows of B per pass), '8x1 sums' (dot: rows x partial sums)."""
        return {"broadcast": f"u{self.unroll}", "dot": f"{self.mr}x{self.unroll} sums"}.get(
            self.algorithm, f"{self.mr}x{self.nv}")  # fmt: skip

    @property
    def symbol(self) -> str:
        """A C symbol unique to this config: shape plus a digest of every field."""
        s = self.shape
        return config_symbol(f"ac_matmul_f32_{s.m}x{s.n}x{s.k}", self)

    def row_tiles(self) -> int:
        return ceil_div(self.shape.m, self.mr)

    def col_tiles(self) -> int:
        return ceil_div(self.shape.n, self.nr)

    def blocks(self) -> tuple[int, int, int]:
        """(kc, mc, nc) with 0 resolved to the whole dimension."""
        s = self.shape
        return self.kc or s.k, self.mc or round_up(s.m, self.mr), self.nc or round_up(s.n, self.nr)

    def packed_blocks(self) -> tuple[int, int, int]:
        """(kc, mc, nc) clipped to the (tile-rounded) matrix: the packed panels' sizes."""
        kc, mc, nc = self.blocks()
        s = self.shape
        return min(kc, s.k), min(mc, round_up(s.m, self.mr)), min(nc, round_up(s.n, self.nr))

    @property
    def packs_a(self) -> bool:
        """Whether each call copies A's blocks into panels: packed, unless A arrives
        packed (`a_packed`) or is read in place (`a_in_place`, `transposed`)."""
        return self.algorithm == "packed" and not (self.transposed or self.a_packed or self.a_in_place)

    def workspace(self) -> int:
        """f32 elements of packing workspace one call needs (0 unless packed): the B
        block (kc×nc) followed by the A block (mc×kc) where a call packs A (none when
        transposed: B arrives packed, A is read in place)."""
        if self.algorithm != "packed":
            return 0
        if self.transposed:
            return self.b_size() if self.prologue else 0  # the scaled copy of B
        kc, mc, _ = self.packed_blocks()
        return self.a_block_offset() + (mc * kc if self.packs_a else 0)

    def a_block_offset(self) -> int:
        """Where a call's packed A block starts in the workspace: after its B block,
        unless B arrives packed."""
        kc, _, nc = self.packed_blocks()
        return 0 if self.b_packed else kc * nc

    def rows_apart(self) -> tuple[int, int, int]:
        """The row strides of A, B (of Bᵀ when `b_transposed`) and C in floats."""
        s, (a, b, c) = self.shape, self.leading
        return a or s.k, b or (s.k if self.b_transposed else s.n), c or s.n

    def a_pixels(self) -> int:
        """Pixels of the image a transposed product's Aᵀ holds: M, or the subsampled
        image's H·W (`subsample`)."""
        height, width, _, _ = self.subsample
        return height * width if height else self.shape.m

    def a_size(self) -> int:
        """f32 elements of one product's A as the kernel reads it: M×K (its last row
        ends the span when strided; a subsampled Aᵀ's whole image), or packed (every row
        tile a full mr high, zeros past the last row; dot's rows padded to whole vectors too)."""
        s = self.shape
        if self.transposed:
            return self.a_pixels() * s.k
        if self.a_packed:
            depth = ceil_div(s.k, self.lanes) * self.lanes if self.algorithm == "dot" else s.k
            return depth * self.row_tiles() * self.mr
        return (s.m - 1) * self.rows_apart()[0] + s.k

    def b_size(self) -> int:
        """f32 elements of one product's B as the kernel reads it: K×N (N×K when
        `b_transposed`; the last row ends the span when strided), or packed when
        transposed (every column tile a full nr wide, zeros past the last column)."""
        s = self.shape
        if self.transposed or self.b_packed:
            return s.k * self.col_tiles() * self.nr
        rows, width = (s.n, s.k) if self.b_transposed else (s.k, s.n)
        return (rows - 1) * self.rows_apart()[1] + width

    def pack_a(self, a: np.ndarray) -> np.ndarray:
        """A (M×K, or `batch` of them stacked) in the layout an `a_packed` kernel reads,
        flat: for packed, Ap[k block][row tile][k in the block][row in the tile] — the
        layout the packed algorithm gives each A block per call (`kernels.gemm.PackedA`),
        for all of A at once; for dot, `_dot_panels`."""
        matrices = np.asarray(a, np.float32).reshape(self.batch, self.shape.m, self.shape.k)
        if self.algorithm == "dot":
            return _dot_panels(matrices, self.mr, self.lanes)
        return _panels(matrices, self.mr, self.packed_blocks()[0])

    def pack_b(self, b_t: np.ndarray) -> np.ndarray:
        """Bᵀ (N×K: a 1×1 convolution's weights, output channels × input channels; a
        matmul's constant B transposed) in the layout a `transposed` or `b_packed`
        kernel reads, flat: Bp[k block][column tile][k in the
        block][column in the tile] — `kernels.gemm.PackedB`'s panels for all of B."""
        return _panels(np.asarray(b_t, np.float32).reshape(1, self.shape.n, self.shape.k), self.nr,
                       self.packed_blocks()[0])  # fmt: skip

    def registers_needed(self) -> tuple[int, str]:
        """Vector registers the inner loop keeps live, and what they hold."""
        if self.algorithm == "broadcast":
            return self.unroll + 2, f"{self.unroll} A broadcasts + C + B"
        if self.algorithm == "dot":
            return self.mr * self.unroll + 2, f"{self.mr}x{self.unroll} partial sums + A + B"
        held = f"{self.mr * self.nv} accumulators + {self.nv} B vectors + 1 A broadcast"
        return tile_registers(self.mr, self.nv), held

    def validate(self, target: Target) -> None:
        """Reject a config that the target cannot run, with the reason."""
        if self.algorithm not in ALGORITHMS:
            raise KernelError(f"unknown matmul algorithm {self.algorithm!r}: {', '.join(ALGORITHMS)}")
        check_lanes(target, self.lanes)
        for name in ("mr", "nv", "unroll", "kc", "mc", "nc"):
            least = 1 if name in ("mr", "nv", "unroll") else 0
            if getattr(self, name) < least:
                raise KernelError(f"{name} must be >= {least}, got {getattr(self, name)}")
        if self.algorithm == "broadcast" and (self.mr, self.nv) != (1, 1):
            raise KernelError("broadcast matmul works on one row and one vector: mr=nv=1")
        if self.algorithm == "dot" and (self.shape.n, self.nv) != (1, 1):
            raise KernelError(f"dot matmul is for N=1 (matrix times vector) with nv=1, "
                                  f"got N={self.shape.n} nv={self.nv}")  # fmt: skip
        registers, held = self.registers_needed()
        if registers > target.vector_registers:
            raise KernelError(f"{self.algorithm} {self.tile} needs {held} = {registers} vector "
                                  f"registers; {target.name} has {target.vector_registers}")  # fmt: skip
        if self.mc % self.mr:
            raise KernelError(f"mc={self.mc} must be a multiple of mr={self.mr}")
        if self.nc % self.nr:
            raise KernelError(f"nc={self.nc} must be a multiple of nr={self.nr} (nv x lanes)")
        if self.batch < 1:
            raise KernelError(f"batch must be >= 1, got {self.batch}")
        if self.b_stride() < self.shape.k * self.shape.n or self.c_stride() < self.shape.m * self.shape.n:
            raise KernelError(f"product strides {self.product_strides} are shorter than B ({self.shape.k}x"
                                  f"{self.shape.n}) or C ({self.shape.m}x{self.shape.n})")  # fmt: skip
        if self.channel_axis not in ("columns", "rows"):
            raise KernelError(f"channel_axis must be 'columns' or 'rows', got {self.channel_axis!r}")
        if self.a_packed and self.algorithm not in ("packed", "dot"):
            raise KernelError(f"a_packed (A arriving packed) is for the packed and dot algorithms, not "
                              f"{self.algorithm}")
        if self.b_packed and (self.algorithm != "packed" or self.transposed or self.prologue or self.batch > 1):
            raise KernelError("b_packed (B arriving packed) is for one packed product without a prologue, "
                              "not transposed")  # fmt: skip
        if self.a_in_place and not (self.b_packed and self.blocks()[0] >= self.shape.k and not self.a_packed):
            raise KernelError("a_in_place (A read where it lies) is for a packed product with B packed at build "
                              "and one K block")  # fmt: skip
        if self.transposed and (self.algorithm != "packed" or self.a_packed or self.accumulate or self.batch > 1):
            raise KernelError("transposed operands are for one packed product (B packed at build) with A "
                                  "read in place, overwriting C: not with a_packed, accumulate or batch")  # fmt: skip
        if self.full_row_edge and self.algorithm not in ("tiled", "packed"):
            raise KernelError(f"full_row_edge is for the tiled and packed algorithms, not {self.algorithm}")
        if self.full_column_edge and self.algorithm != "packed":
            raise KernelError(f"full_column_edge needs B in zero-padded panels (packed), not {self.algorithm}")
        if (self.a_nhwc or self.c_nhwc) and not self.blocked:
            raise KernelError("NHWC operands are channel-blocked ones with one block (set blocked too)")
        self._validate_prologue()
        self._validate_subsample()
        self._validate_strides()
        self._validate_band()
        if self.blocked:
            if not self.transposed:
                raise KernelError("channel-blocked operands are for a transposed product (a 1x1 convolution)")
            channels = {**({} if self.c_nhwc else {"N (output channels)": self.shape.n}),
                        **({} if self.a_nhwc else {"K (input channels)": self.shape.k})}  # fmt: skip
            check_blocked(target, self.lanes, channels)

    def _validate_prologue(self) -> None:
        if not self.prologue:
            return
        if self.algorithm not in ("tiled", "packed") or self.batch > 1:
            raise KernelError(f"a prologue is applied by one tiled or packed product, not {self.algorithm}")
        if self.transposed and [op.kind for op in self.prologue] != ["scale"]:
            raise KernelError(f"a transposed product scales its weights' rows: its prologue is one scale, "
                              f"not {ep.describe(self.prologue)}")  # fmt: skip
        if any(op.operand == "output" for op in self.prologue):
            raise KernelError(f"a prologue's operands hold one value per row of B, not {ep.describe(self.prologue)}")

    def _validate_subsample(self) -> None:
        height, width, sh, sw = self.subsample
        if self.subsample == (0, 0, 1, 1):
            return
        if not self.transposed:
            raise KernelError("a subsampled A is a transposed product's Aᵀ (a strided 1x1 convolution)")
        if min(height, width, sh, sw) < 1 or self.shape.m != ((height - 1) // sh + 1) * ((width - 1) // sw + 1):
            raise KernelError(f"subsample {self.subsample} (height, width, strides) must be positive and pick "
                              f"M={self.shape.m} pixels")  # fmt: skip

    def _validate_band(self) -> None:
        depth, _, den, _ = self.band
        if self.band == (0, 0, 0, 0):
            if self.band_rows:
                raise KernelError("band_rows places a band: give one")
            return
        if self.band_rows and not (self.algorithm == "tiled" and self.blocks()[0] >= self.shape.k):
            raise KernelError("a band of A's columns is for a tiled product in one K block")
        if not self.band_rows and not (self.a_in_place and self.batch == 1 and not self.leading[0]):
            raise KernelError("a band of B's rows is for one packed product with B packed at build and A's rows "
                              "read in place, dense")  # fmt: skip
        if not 0 < depth <= self.shape.k or den < 1:
            raise KernelError(f"a band needs 0 < depth <= K={self.shape.k} and a positive denominator, "
                              f"got {self.band}")  # fmt: skip

    def _validate_strides(self) -> None:
        if self.leading == (0, 0, 0) and not self.b_transposed:
            return
        if self.transposed or self.blocked or self.batch > 1:
            raise KernelError("strided or transposed-in-place operands are for one product read and written in "
                              "place: not transposed, blocked or batched")
        if (self.a_packed and self.leading[0]) or (self.b_packed and (self.leading[1] or self.b_transposed)):
            raise KernelError("an operand packed when built is not read in place: it has no row stride")
        if self.b_transposed and self.prologue:
            raise KernelError("a B stored transposed is gathered without a prologue")
        if self.b_transposed and self.algorithm != "packed":
            raise KernelError(f"a B stored transposed is gathered as it is packed: the packed algorithm, "
                              f"not {self.algorithm}")  # fmt: skip
        if self.algorithm == "dot" and self.leading[1]:
            raise KernelError("dot reads B's one column contiguous: no B row stride")
        s = self.shape
        widths = (s.k, s.k if self.b_transposed else s.n, s.n)
        if any(0 < stride < width for stride, width in zip(self.leading, widths, strict=True)):
            raise KernelError(f"row strides {self.leading} are shorter than the rows ({widths})")

    def c_shape(self) -> list[int]:
        """C (and an output-shaped operand) as the kernel addresses it: M×N, or Cᵀ flat."""
        s = self.shape
        return [s.n * s.m] if self.transposed else [s.m, s.n]

    def b_stride(self) -> int:
        """Floats from one product's B to the next."""
        return self.product_strides[0] or self.shape.k * self.shape.n

    def c_stride(self) -> int:
        """Floats from one product's C (or residual) to the next: its span."""
        return self.product_strides[1] or (self.shape.m - 1) * self.rows_apart()[2] + self.shape.n

    def channel_count(self) -> int:
        """Values a channel operand (bias) holds: one per column, or one per row."""
        return self.shape.n if self.channel_axis == "columns" else self.shape.m


SIZES = ("row_begin", "row_end", "col_begin", "col_end")


def signature(config: MatmulConfig) -> KernelSignature:
    """``SYMBOL(C, A, B[, epilogue operands][, work], row_begin, row_end, col_begin, col_end)``."""
    q = config.batch
    params = [
        Param("c", Role.INOUT if config.accumulate else Role.OUT, extent=(q * config.c_stride(),)),
        Param("a", Role.IN, extent=(q * config.a_size(),)),
        Param("b", Role.IN, extent=(q * (config.b_stride() if q > 1 else config.b_size()),)),
    ]
    for _, name, operand in ep.operand_names(config.epilogue):
        params.append(Param(name, Role.IN, extent=(config.channel_count() if operand == "channel"
                                                   else q * config.c_stride(),)))  # fmt: skip
    params += [Param(name, Role.IN, extent=(config.shape.k,)) for _, name in prologue_names(config.prologue)]
    if config.workspace():
        params.append(Param("work", Role.OUT, extent=(config.workspace(),)))
    params += [Param(name, Role.SIZE) for name in SIZES]
    op = "+=" if config.accumulate else "="
    return KernelSignature(
        symbol=config.symbol,
        params=tuple(params),
        doc=f"{f'{q} products ' if q > 1 else ''}{_operands(config, op)}"
        f"{f' (B read through {ep.describe(config.prologue)})' if config.prologue else ''}, then "
        f"{ep.describe(config.epilogue)}, on row "
        f"tiles [row_begin, row_end) of {config.mr} rows x column tiles [col_begin, col_end) of "
        f"{config.nr} ({config.algorithm}).",
    )


def prologue_names(prologue: ep.Epilogue) -> list[tuple[int, str]]:
    """(op position, kernel argument name) of the prologue ops that read a row operand."""
    return [(i, f"pre_{name}") for i, name, _ in ep.operand_names(prologue)]


def _operands(config: MatmulConfig, op: str) -> str:
    """'C[MxN] = A[MxK] . B[KxN]' with how each operand is stored."""
    m, n, k = config.shape.m, config.shape.n, config.shape.k
    if config.transposed:
        return f"C[{m}x{n}] stored as its transpose {op} A (given as its transpose) . B (given packed)"
    return f"C[{m}x{n}] {op} A[{m}x{k}{' packed' if config.a_packed else ''}] . B[{k}x{n}]"


def tile_registers(mr: int, nv: int) -> int:
    """Vector registers an mr x nv register tile keeps live: its accumulators, a row of B
    vectors and an A broadcast."""
    return mr * nv + nv + 1


def _dot_panels(matrices: np.ndarray, height: int, lanes: int) -> np.ndarray:
    """Stacked matrices (q × rows × K) as the dot kernel reads them, flat:
    [q][tile of `height` rows][vector of `lanes` along K][row in the tile][lane], zero
    past the last row and past K. Each element is copied once, straight into its place
    (a fully connected layer's weights can be hundreds of MB)."""
    q, rows, k = matrices.shape
    tiles, vectors, whole = ceil_div(rows, height), ceil_div(k, lanes), k // lanes
    out = np.zeros(q * tiles * vectors * height * lanes, np.float32)
    view = out.reshape(q, tiles, vectors, height, lanes)
    full = rows // height
    for first, count, filled in ((0, full, height), (full, 1, rows - full * height)):  # whole tiles, the last rows
        if not count or not filled:
            continue
        source = matrices[:, first * height:first * height + count * filled]
        view[:, first:first + count, :whole, :filled] = (
            source[:, :, :whole * lanes].reshape(q, count, filled, whole, lanes).transpose(0, 1, 3, 2, 4))
        if k % lanes:
            view[:, first:first + count, whole, :filled, :k % lanes] = source[:, :, whole * lanes:].reshape(
                q, count, filled, k % lanes)
    return out


def _panels(matrices: np.ndarray, height: int, kc: int) -> np.ndarray:
    """Stacked matrices (q × rows × K) as the micro-kernel's panels, flat:
    [q][k block][tile of `height` rows][k in the block][row in the tile], zero past the
    last row (A's row tiles for `pack_a`, Bᵀ's column tiles for `pack_b`). The last K
    block is only as deep as what is left of K: padding it to kc made YOLO-V4's weights
    629 MB instead of 518. Each element is copied once, straight into its place (a padded
    copy and a transposed one first made YOLO-V4's panels take 1.9 s of a warm build)."""
    q, rows, k = matrices.shape
    tiles = ceil_div(rows, height)
    whole = k // kc * kc  # the full K blocks, then what is left
    out = np.zeros((q, tiles * height * k), np.float32)
    blocks = out[:, :tiles * height * whole].reshape(q, whole // kc, tiles, kc, height)
    rest = out[:, tiles * height * whole:].reshape(q, tiles, k - whole, height)
    full = rows // height
    for first, count, filled in ((0, full, height), (full, 1, rows - full * height)):  # whole tiles, the last rows
        if not count or not filled:
            continue
        source = matrices[:, first * height:first * height + count * filled]
        blocks[:, :, first:first + count, :, :filled] = \
            source[..., :whole].reshape(q, count, filled, whole // kc, kc).transpose(0, 3, 1, 4, 2)
        rest[:, first:first + count, :, :filled] = \
            source[..., whole:].reshape(q, count, filled, k - whole).transpose(0, 1, 3, 2)
    return out.ravel()


def generate(config: MatmulConfig, target: Target) -> KernelModule:
    """The matmul kernel of `config` on `target`."""
    config.validate(target)
    sig = signature(config)
    body = {"broadcast": _broadcast, "dot": _dot, "tiled": _blocked, "packed": _blocked}[config.algorithm]
    with new_module() as module:
        with kernel_body(module, sig) as args:
            if config.batch == 1:
                body(_Kernel.of(config, target, args))
            else:
                for_range(0, config.batch, 1, lambda q: body(_Kernel.of(config, target, _product(config, args, q))))
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)


def _product(config: MatmulConfig, args: dict, q: ir.Value) -> dict:
    """The kernel arguments of product q of a batch: C, A, B and a residual advanced to
    their q-th matrix; channel operands, workspace and ranges shared."""
    sizes = {"c": config.c_stride(), "a": config.a_size(), "b": config.b_stride()}
    sizes |= {name: config.c_stride() for _, name, kind in ep.operand_names(config.epilogue) if kind == "output"}
    return {name: offset_pointer(value, arith.muli(q, index(sizes[name]))) if name in sizes else value
            for name, value in args.items()}  # fmt: skip


@dataclass(frozen=True)
class _Kernel:
    """What every algorithm's loop nest works with: the config, the vector type, the
    buffers as memrefs and the tile ranges asked for (and the arguments they were made
    from, for a function outlined from the kernel)."""

    config: MatmulConfig
    target: Target
    vec: ir.VectorType
    c: ir.Value
    a: ir.Value
    b: ir.Value
    b_flat: ir.Value  # B as one row of floats (dot reads its column as vectors; packed when transposed)
    operands: dict[int, ir.Value]  # epilogue op position -> its tensor
    row_operands: dict[int, ir.Value]  # prologue op position -> its tensor, one value per row of B
    work: ir.Value | None
    rows: tuple[ir.Value, ir.Value]  # row tiles [begin, end)
    cols: tuple[ir.Value, ir.Value]  # column tiles [begin, end)
    args: dict[str, ir.Value]

    @classmethod
    def of(cls, config: MatmulConfig, target: Target, args: dict) -> _Kernel:
        s = config.shape
        operands = {i: f32_memref(args[name], [config.channel_count()]) if kind == "channel" else
                    f32_memref(args[name], config.c_shape(), config.leading[2])
                    for i, name, kind in ep.operand_names(config.epilogue)}  # fmt: skip
        work = f32_memref(args["work"], [config.workspace()]) if "work" in args else None
        a_shape = ([config.a_size()] if config.a_packed or config.blocked else
                   [s.k, config.a_pixels()] if config.transposed else [s.m, s.k])  # fmt: skip
        a_rows, b_rows, c_rows = config.leading
        return cls(config, target, f32_vector_type(target, config.lanes),
                   f32_memref(args["c"], config.c_shape(), c_rows), f32_memref(args["a"], a_shape, a_rows),
                   f32_memref(args["b"], [s.n, s.k] if config.b_transposed else [s.k, s.n], b_rows),
                   f32_memref(args["b"], [config.b_size()]), operands,
                   {i: f32_memref(args[name], [s.k]) for i, name in prologue_names(config.prologue)}, work,
                   (index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(config.row_tiles()))),
                   (index(args["col_begin"]), arith.minsi(index(args["col_end"]), index(config.col_tiles()))),
                   args)  # fmt: skip

    @property
    def lanes(self) -> int:
        return self.config.lanes

    def pixels(self, rows: list[ir.Value]) -> list[ir.Value]:
        """The pixels of a transposed product's Aᵀ that its `rows` read (`MatmulConfig.subsample`)."""
        height, width, sh, sw = self.config.subsample
        if not height:
            return rows
        out_width = index((width - 1) // sw + 1)
        return [arith.addi(arith.muli(arith.divsi(row, out_width), index(sh * width)),
                           arith.muli(arith.remsi(row, out_width), index(sw))) for row in rows]  # fmt: skip

    def mask(self, count: int) -> ir.Value | None:
        """The mask of a vector holding `count` valid lanes (None when full)."""
        return tail_mask(self.target, self.lanes, count)

    def vector_masks(self, columns: int) -> list[ir.Value | None]:
        """Per vector covering `columns` columns: its mask (only the last may be partial)."""
        vectors = ceil_div(columns, self.lanes)
        return [self.mask(columns - v * self.lanes) for v in range(vectors)]

    def read_b(self, k: ir.Value, col: ir.Value, mask: ir.Value | None) -> ir.Value:
        """B's vector at (k, col) as the product reads it: through the prologue, whose
        operands hold one value for the whole row k; a B stored transposed gathered."""
        if self.config.b_transposed:
            stride = self.config.rows_apart()[1]
            return strided_load(self.vec, self.b_flat, [arith.addi(arith.muli(col, index(stride)), k)], stride, mask)
        value = load(self.vec, self.b, [k, col], mask)
        if not self.config.prologue:
            return value
        return ep.apply(self.config.prologue, value,
                        lambda i: vector.broadcast(self.vec, memref.load(self.row_operands[i], [k])))

    def read_b_row(self, n: ir.Value, k: ir.Value) -> ir.Value:
        """A B stored transposed: a vector of its row n (B's column n) from k on."""
        return load(self.vec, self.b_flat, [arith.addi(arith.muli(n, index(self.config.rows_apart()[1])), k)])

    def finish(self, value: ir.Value, row: ir.Value, col: ir.Value, mask: ir.Value | None,
               read_output: Callable[[ir.Value], ir.Value] | None = None) -> ir.Value:  # fmt: skip
        """`value` (C at row, col: a vector, or a scalar for dot) with the epilogue; an
        output-shaped operand is read by `read_output(tensor)` where given (a tile that
        knows C's layout), else as a plain vector at (row, col)."""
        scalar = not isinstance(value.type, ir.VectorType)

        def operand(i: int) -> ir.Value:
            tensor = self.operands[i]
            if self.config.epilogue[i].operand == "output":
                if scalar:
                    return memref.load(tensor, [row, col])
                if read_output is not None:
                    return read_output(tensor)
                return load(self.vec, tensor, [row, col], mask)
            if self.config.channel_axis == "columns":
                return memref.load(tensor, [col]) if scalar else load(self.vec, tensor, [col], mask)
            channel = memref.load(tensor, [row])  # one value for the whole row
            return channel if scalar else vector.broadcast(self.vec, channel)

        return ep.apply(self.config.epilogue, value, operand)


# ---------------------------------------------------------------- broadcast


def _broadcast(kn: _Kernel) -> None:
    """Row-vectorized matmul: the C row streamed through memory once per `unroll` rows
    of B (a pass adds a[k]·B[k] for k in [k0, k0+unroll) to each C vector)."""
    cfg, lanes = kn.config, kn.lanes
    shape, u = cfg.shape, cfg.unroll
    zero = vector.broadcast(kn.vec, arith.constant(ir.F32Type.get(), 0.0))

    def row(i: ir.Value) -> None:
        def k_pass(k0: ir.Value, rows: int) -> None:
            ks = [offset(k0, r) for r in range(rows)]
            a = [vector.broadcast(kn.vec, memref.load(kn.a, [i, k])) for k in ks]
            fresh = None if cfg.accumulate else arith.cmpi(arith.CmpIPredicate.eq, k0, index(0))

            def column(j: ir.Value, count: int) -> None:
                mask = kn.mask(count)
                acc = load(kn.vec, kn.c, [i, j], mask)
                if fresh is not None:
                    acc = arith.select(fresh, zero, acc)
                for a_k, k in zip(a, ks, strict=True):
                    acc = vector.fma(a_k, load(kn.vec, kn.b, [k, j], mask), acc)
                store(acc, kn.c, [i, j], mask)

            for_tiles(*kn.cols, lanes, shape.n, column)

        full_k = shape.k // u * u
        if full_k:
            for_range(0, full_k, u, lambda k: k_pass(k, u))
        if full_k < shape.k:
            for_range(full_k, shape.k, 1, lambda k: k_pass(k, 1))
        if cfg.epilogue:
            def finish(j: ir.Value, count: int) -> None:
                mask = kn.mask(count)
                store(kn.finish(load(kn.vec, kn.c, [i, j], mask), i, j, mask), kn.c, [i, j], mask)

            for_tiles(*kn.cols, lanes, shape.n, finish)

    for_range(*kn.rows, 1, row)


# ---------------------------------------------------------------- dot (N = 1)


def _dot(kn: _Kernel) -> None:
    """Matrix times vector: each row of A against B's one column (contiguous), along K
    in vectors; `unroll` partial sums per row cover the FMA latency and are added up,
    lanes and all, at the end."""
    cfg, lanes = kn.config, kn.lanes
    k, u = cfg.shape.k, cfg.unroll
    column = kn.b_flat  # B's one column, contiguous
    vectors = k // lanes  # whole vectors along K; the rest is one masked vector
    zero = vector.broadcast(kn.vec, arith.constant(ir.F32Type.get(), 0.0))

    def tile(row0: ir.Value, rows: int) -> None:
        row = [offset(row0, r) for r in range(rows)]
        panel = arith.muli(row0, index(ceil_div(k, lanes) * lanes)) if cfg.a_packed else None  # the tile's rows

        def a_vector(r: int, kv: ir.Value, at: ir.Value, mask: ir.Value | None) -> ir.Value:
            if panel is None:
                return load(kn.vec, kn.a, [row[r], at], mask)
            return load(kn.vec, kn.a, [arith.addi(panel, offset(arith.muli(kv, index(cfg.mr * lanes)), r * lanes))])

        def step(kv: ir.Value, copy: int, acc: list[ir.Value], mask: ir.Value | None = None) -> list[ir.Value]:
            at = arith.muli(kv, index(lanes))
            b_k = load(kn.vec, column, [at], mask)
            out = list(acc)
            for r in range(rows):
                out[r * u + copy] = vector.fma(a_vector(r, kv, at, mask), b_k, out[r * u + copy])
            return out

        acc = for_unrolled(index(0), index(vectors), u, [zero] * (rows * u), step)
        if k % lanes:
            acc = step(index(vectors), 0, acc, kn.mask(k % lanes))
        for r in range(rows):
            value = lane_sum(acc[r * u : (r + 1) * u])
            if cfg.accumulate:
                value = arith.addf(memref.load(kn.c, [row[r], index(0)]), value)
            memref.store(kn.finish(value, row[r], index(0), None), kn.c, [row[r], index(0)])

    when(less(*kn.cols), lambda: for_tiles(*kn.rows, cfg.mr, cfg.shape.m, tile))  # the one column tile


# ---------------------------------------------------------------- tiled / packed


def _blocked(kn: _Kernel) -> None:
    """The BLIS loop nest around the register micro-kernel, packing optional. Packing
    and each edge tile's micro-kernel are functions of their own (`_outlined`): LLVM
    compiles each on a core of its own."""
    cfg = kn.config
    shape, packed = cfg.shape, cfg.algorithm == "packed"
    kc, mc, nc = cfg.blocks()
    pkc = cfg.packed_blocks()[0]

    def column_block(jt: ir.Value) -> None:
        jt_end = arith.minsi(offset(jt, nc // cfg.nr), kn.cols[1])

        def k_block(pc: ir.Value) -> None:
            pc_end = arith.minsi(offset(pc, kc), index(shape.k))
            if packed and not cfg.transposed and not cfg.b_packed:
                def pack_b(inner: _Kernel, extra: list[ir.Value]) -> None:
                    k0, k1, t0, t1 = extra
                    first_column = arith.muli(t0, index(cfg.nr))
                    panels = PackedB(inner.work, inner.vec, inner.lanes, cfg.nv, pkc, k0, k1, first_column)
                    if cfg.b_transposed and not inner.target.scalable:
                        panels.pack_transposed((t0, t1), shape.n, inner.read_b_row, inner.read_b, inner.mask)
                    else:
                        panels.pack((t0, t1), shape.n, inner.read_b, inner.mask)

                _outlined(kn, "pack_b", [pc, pc_end, jt, jt_end], pack_b)

            def row_block(it: ir.Value) -> None:
                it_end = arith.minsi(offset(it, mc // cfg.mr), kn.rows[1])
                if cfg.packs_a:
                    def pack_a(inner: _Kernel, extra: list[ir.Value]) -> None:
                        k0, k1, t0, t1 = extra
                        panels = PackedA(inner.work, index(cfg.a_block_offset()), cfg.mr, k0, k1, t0)
                        panels.pack((t0, t1), shape.m, lambda row, k: memref.load(inner.a, [row, k]))

                    _outlined(kn, "pack_a", [pc, pc_end, it, it_end], pack_a)
                _block_tiles(kn, _Block(jt, jt_end, pc, pc_end, it, it_end))

            for_blocks(*kn.rows, mc // cfg.mr, cfg.row_tiles(), row_block)

        for_blocks(0, shape.k, kc, shape.k, k_block)

    if cfg.transposed and cfg.prologue:
        _scaled_b(kn)
    for_blocks(*kn.cols, nc // cfg.nr, cfg.col_tiles(), column_block)


def _scaled_b(kn: _Kernel) -> None:
    """A transposed product's prologue: the call's column tiles of packed B copied into
    the workspace, in the same layout, with row k scaled by the prologue's operand at k."""
    cfg = kn.config
    kc = cfg.blocks()[0]

    def k_block(pc: ir.Value) -> None:
        pc_end = arith.minsi(offset(pc, kc), index(cfg.shape.k))
        panels = _transposed_panels(kn, kn.b_flat, pc, pc_end)

        def row(k: ir.Value) -> None:
            factor = vector.broadcast(kn.vec, memref.load(kn.row_operands[0], [k]))

            def panel(t: ir.Value) -> None:
                for v in range(cfg.nv):
                    at = panels.at(arith.muli(t, index(cfg.nr)), k, v)
                    store(arith.mulf(load(kn.vec, kn.b_flat, [at]), factor), kn.work, [at])

            for_range(*kn.cols, 1, panel)

        for_range(pc, pc_end, 1, row)

    for_blocks(0, cfg.shape.k, kc, cfg.shape.k, k_block)


def _transposed_panels(kn: _Kernel, memory: ir.Value, pc: ir.Value, pc_end: ir.Value) -> PackedB:
    """K block [pc, pc_end) of a transposed product's B, packed once: its panels of all
    column tiles, as `MatmulConfig.pack_b` laid them, in `memory`."""
    cfg = kn.config
    return PackedB(memory, kn.vec, kn.lanes, cfg.nv, cfg.packed_blocks()[0], pc, pc_end, index(0),
                   arith.muli(pc, index(cfg.col_tiles() * cfg.nr)))  # fmt: skip


@dataclass(frozen=True)
class _Block:
    """Where the tiles of one block are: column tiles [jt, jt_end) and row tiles [it,
    it_end) over the K block [pc, pc_end)."""

    jt: ir.Value
    jt_end: ir.Value
    pc: ir.Value
    pc_end: ir.Value
    it: ir.Value
    it_end: ir.Value

    def values(self) -> list[ir.Value]:
        return [self.jt, self.jt_end, self.pc, self.pc_end, self.it, self.it_end]


def _block_tiles(kn: _Kernel, block: _Block) -> None:
    """The micro-kernel on every tile of the block. A tile whose size differs from the
    full tile's (an edge the config does not compute as a full one) has a micro-kernel
    of its own: it goes to a function of its own, named by its size, which LLVM
    compiles on another core."""
    cfg = kn.config

    def column_tile(col0: ir.Value, columns: int, _sized: Sized) -> None:
        def tile(row0: ir.Value, rows: int, _sized: Sized) -> None:
            if (rows, columns) == (cfg.mr, cfg.nr):
                _block_tile(kn, block, col0, columns, row0, rows)
                return

            def edge(inner: _Kernel, extra: list[ir.Value]) -> None:
                _block_tile(inner, _Block(*extra[:6]), extra[6], columns, extra[7], rows)

            _outlined(kn, f"tile_{rows}x{columns}", [*block.values(), col0, row0], edge)

        for_tile_trips(block.it, block.it_end, cfg.mr, cfg.shape.m, cfg.full_row_edge, tile)

    for_tile_trips(block.jt, block.jt_end, cfg.nr, cfg.shape.n, cfg.full_column_edge, column_tile)


def _block_tile(kn: _Kernel, block: _Block, col0: ir.Value, columns: int, row0: ir.Value, rows: int) -> None:
    """The micro-kernel on the tile at (row0, col0) of rows × columns of the block,
    reading the block's packed panels (or A and B in place), and its write-back."""
    cfg = kn.config
    shape, packed = cfg.shape, cfg.algorithm == "packed"
    kc, mc, _ = cfg.blocks()
    pkc = cfg.packed_blocks()[0]
    pc, pc_end = block.pc, block.pc_end
    bp = ap = ahead = None
    if cfg.transposed or cfg.b_packed:  # B packed once (scaled: the call's copy in the workspace)
        bp = _transposed_panels(kn, kn.work if cfg.prologue else kn.b_flat, pc, pc_end)
        tile = arith.subi(arith.divsi(row0, index(cfg.mr)), block.it)  # the block's row tiles share
        ahead = bp.prefetcher(col0, tile, min(mc // cfg.mr, cfg.row_tiles()), cfg.unroll)  # the next B panel's lines
    elif packed:
        bp = PackedB(kn.work, kn.vec, kn.lanes, cfg.nv, pkc, pc, pc_end, arith.muli(block.jt, index(cfg.nr)))
    if cfg.a_packed:  # this K block's panels of all row tiles, as pack_a laid them
        ap = PackedA(kn.a, arith.muli(pc, index(cfg.row_tiles() * cfg.mr)), cfg.mr, pc, pc_end, index(0))
        ahead = ap.prefetcher(row0)
    elif cfg.packs_a:
        ap = PackedA(kn.work, index(cfg.a_block_offset()), cfg.mr, pc, pc_end, block.it)
    rows_in_place = ap is None or (cfg.blocked and not cfg.a_nhwc)
    last_row = shape.m - 1 if cfg.full_row_edge and rows_in_place and shape.m % cfg.mr else None
    sized_rows = sized_tile(row0, rows, cfg.mr, shape.m, cfg.full_row_edge)
    sized_columns = sized_tile(col0, columns, cfg.nr, shape.n, cfg.full_column_edge)
    k_range, blocks = (pc, pc_end), KBlocks(shape.k, kc, cfg.accumulate)
    if cfg.band[0]:  # its few rows of B, all of the tile's sum (and a small B, in cache: nothing to fetch)
        k_range = _band_range(cfg, row0 if cfg.band_rows else col0)
        blocks, ahead = KBlocks(cfg.band[0], cfg.band[0], cfg.accumulate), None
    _tile(kn, row0, rows, col0, columns, k_range, blocks, bp, ap, ahead,
          lambda store: sized_rows(lambda r: sized_columns(lambda c: store(r, c))), last_row)  # fmt: skip


def _band_range(cfg: MatmulConfig, origin: ir.Value) -> tuple[ir.Value, ir.Value]:
    """The range [k_t, k_t + depth) of K that the tile starting at column (or, with
    `band_rows`, row) `origin` multiplies (`MatmulConfig.band`)."""
    depth, num, den, shift = cfg.band
    nominal = arith.addi(arith.divsi(arith.muli(origin, index(num)), index(den)), index(shift))
    first = arith.maxsi(arith.minsi(nominal, index(cfg.shape.k - depth)), index(0))
    return first, offset(first, depth)


def _outlined(kn: _Kernel, name: str, extra: list[ir.Value], body: Callable[[_Kernel, list[ir.Value]], None]) -> None:
    """body(kernel, extra) as the function ``<symbol>_<name>`` of the kernel's arguments
    and `extra`, called here (`outlined_nest`)."""
    outlined_nest(f"{kn.config.symbol}_{name}", kn.args, extra,
                  lambda args, values: body(_Kernel.of(kn.config, kn.target, args), values))


def _by_channel_blocks(kn: _Kernel, pixels: list[ir.Value], vectors: int, k_range: tuple[ir.Value, ir.Value],
                       load_b: Callable[[int, ir.Value, int], ir.Value],
                       ahead: Callable[[ir.Value], None] | None) -> list[ir.Value]:  # fmt: skip
    """The micro-kernel over an NCHW[c] image Aᵀ of P pixels one channel block at a time,
    its rows at `pixels` of the image: in block b, the pixel p's channel k lies at
    b·P·L + p·L + (k − b·L), so an unrolled trip's broadcasts are
    constant offsets of one base. With the address worked out per k, LLVM hoisted a
    trip's broadcasts above their FMAs and spilled them."""
    lanes, image = kn.lanes, kn.config.a_pixels()
    lo, hi = k_range

    def block(b: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        start = arith.muli(b, index(lanes))
        plane = arith.subi(arith.muli(b, index(image * lanes)), start)  # + k: the block's plane at k − start

        def load_a(r: int, k: ir.Value, _tap: int) -> ir.Value:
            return memref.load(kn.a, [arith.addi(arith.addi(plane, arith.muli(pixels[r], index(lanes))), k)])

        return micro_kernel(kn.vec, len(pixels), vectors, arith.maxsi(lo, start),
                            arith.minsi(hi, offset(start, lanes)), kn.config.unroll, load_a, load_b,
                            ahead=ahead, acc=acc)  # fmt: skip

    def chain(b0: ir.Value, b1: ir.Value, zeros: list[ir.Value]) -> list[ir.Value]:
        return for_carry(b0, b1, 1, zeros, block)

    return in_chains(kn.vec, len(pixels) * vectors, arith.divsi(lo, index(lanes)),
                     arith.ceildivsi(hi, index(lanes)), chain_steps(lanes, 1), chain)  # fmt: skip


def _tile(kn: _Kernel, row0: ir.Value, rows: int, col0: ir.Value, columns: int,
          k_range: tuple[ir.Value, ir.Value], blocks: KBlocks, bp: PackedB | None, ap: PackedA | None,
          ahead: Callable[[ir.Value], None] | None,
          sized: Callable[[Callable[[int, int], None]], None], last_row: int | None) -> None:  # fmt: skip
    """One micro-kernel call on the tile at (row0, col0) of rows × columns, and its
    write-back; `ahead(k)` prefetches for a later tile. sized(store) emits store(rows,
    columns) for the tile's real size: on an edge tile computed as a full one, fewer
    than were computed. With `last_row`, rows past it read A's row `last_row` (an edge
    tile computed as a full one from an A read in place)."""
    cfg = kn.config
    masks = kn.vector_masks(columns)
    vectors = len(masks)
    cols = [offset(col0, v * kn.lanes) for v in range(vectors)]
    tile_rows = [offset(row0, r) for r in range(rows)]
    if last_row is not None:  # the first row of a tile is always within A
        tile_rows[1:] = [arith.minsi(row, index(last_row)) for row in tile_rows[1:]]
    _output_tile(kn, tile_rows, cols, masks).prefetch()
    a_rows = kn.pixels(tile_rows)

    def load_a(r: int, k: ir.Value, _tap: int) -> ir.Value:  # A in place (Aᵀ when transposed)
        if cfg.a_nhwc:  # Aᵀ[k, row] = A[row, k]: the rows K apart
            return memref.load(kn.a, [arith.addi(arith.muli(a_rows[r], index(cfg.shape.k)), k)])
        return memref.load(kn.a, [k, a_rows[r]] if cfg.transposed else [a_rows[r], k])

    def load_b(v: int, k: ir.Value, _tap: int) -> ir.Value:
        return kn.read_b(k, cols[v], masks[v])

    if ap is not None:
        load_a = ap.loader(row0)
    if bp is not None:
        load_b = bp.loader(col0)
    if cfg.blocked and not cfg.a_nhwc:
        accs = _by_channel_blocks(kn, a_rows, vectors, k_range, load_b, ahead)
    else:
        accs = micro_kernel(kn.vec, rows, vectors, *k_range, cfg.unroll, load_a, load_b, ahead=ahead,
                            whole_trips=blocks.whole_trips(cfg.unroll))  # fmt: skip

    def store(stored_rows: int, stored_columns: int) -> None:
        stored = kn.vector_masks(stored_columns)
        out = _output_tile(kn, tile_rows[:stored_rows], cols[:len(stored)], stored)
        finish = None
        if cfg.epilogue:
            def finish(value: ir.Value, r: int, v: int) -> ir.Value:
                return kn.finish(value, tile_rows[r], cols[v], stored[v],
                                 lambda tensor: replace(out, memory=tensor).load(r, v))  # fmt: skip
        kept = [accs[r * vectors + v] for r in range(stored_rows) for v in range(len(stored))]
        write_back(out, kept, *k_range, blocks, finish)

    sized(store)


def _output_tile(kn: _Kernel, rows: list[ir.Value], cols: list[ir.Value], masks: list[ir.Value | None]) -> OutputTile:
    """The tile of C at those rows and columns, in C's layout."""
    cfg = kn.config
    if cfg.blocked:
        return BlockedTile(kn.c, kn.vec, rows, cols, masks, cfg.shape.m, cfg.shape.n if cfg.c_nhwc else 0)
    if cfg.transposed:
        return TransposedTile(kn.c, kn.vec, rows, cols, masks, cfg.shape.m)
    return OutputTile(kn.c, kn.vec, rows, cols, masks)
