"""Winograd convolution F(m×m, 3×3) for 3×3, stride-1, undilated, ungrouped layers
(Lavin & Gray, CVPR'16), m = 2 or 4: each m×m output tile from a T×T input tile
(T = m + 2) with T² multiplies per channel pair instead of 9·m².

    U[ξν][k][c] = (G g[k][c] Gᵀ)[ξ][ν]                   filter transform, once, at build time
    V[ξν][c][p] = (Bᵀ d[c][p] B)[ξ][ν]                    input transform, generated
    M[ξν]       = U[ξν] · V[ξν]                           T² matrix products (`kernels.matmul`, batched)
    Y[k][tile p] = Aᵀ M[··][k][p] A                       output transform + epilogue, generated

The tiles p run over images × tile rows × tile columns, the tile rows (u = n·TH + ty)
in bands of R rows, each band b's V_b and M_b matrices of their own (R·TW columns). Both
generated transforms keep consecutive tile columns in the vector lanes: the input is
first split by stride-m phases (`kernels.layout`, stride m), so element (i, j) of the
input tiles at columns tx..tx+L is one whole-vector load at a constant offset; the
output tile's columns j of L tiles are interleaved by shuffles into contiguous output
rows, where the epilogue runs and the row's end is stored masked.

    input:   for n:  for c:  for ty (a call's channels and tile rows):  for tx0 step L:
                 d[i][j] = Xt[plane][tap(i, j) + ty·Wq + tx0]          (T² loads)
                 V_(u div R)[ξν][c][(u mod R)·TW + tx0] = (Bᵀ d B)[ξ][ν]    (T² stores)
    output:  for n:  for k:  for ty (likewise):  for tx0 step L:
                 o = Aᵀ M_(u div R)[··][k][(u mod R)·TW + tx0] A             (m×m vectors)
                 rows ty·m + i < OH:  Y row = epilogue(interleave(o[i][0..m)))

Fixed-width vectors only (the interleave is a shuffle); F(4,3)'s transforms amplify
rounding (its points 2 and −½; see `TRANSFORMS`), so results differ from a direct sum
by up to ~1e-5 of the output's range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels import matmul as mm
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, f32_memref, f32_splat, f32_vector_type, index, kernel_body
from kernels.emit import config_symbol, mask_type, new_module, splat, tail_mask, verify
from kernels.gemm import PREFETCH_LINE_FLOATS
from kernels.layout import PhaseSplit, generate_phase_split
from kernels.loops import Sized, for_image_rows, for_tile_trips, load, offset, prefix_mask, store, when, whole_or_masked
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div
from kernels.target import Target

if TYPE_CHECKING:
    from kernels.conv_shape import ConvShape

Matrix = tuple[tuple[float, ...], ...]

TRANSFORMS: dict[int, tuple[Matrix, Matrix, Matrix]] = {  # m: (Bᵀ, G, Aᵀ)
    2: (((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1))),
    4: (((1, 1.5, -2, -1.5, 1, 0), (0, -1, -2.5, -0.5, 1, 0), (0, 1, 0.5, -2.5, 1, 0),
         (0, -0.5, -1, 0.5, 1, 0), (0, 2, -1, -2, 1, 0), (0, 1, 1.5, -2, -1.5, 1)),
        ((1, 0, 0), (-1 / 3, -1 / 3, -1 / 3), (1 / 3, -1 / 3, 1 / 3),
         (1 / 15, 2 / 15, 4 / 15), (-16 / 15, 8 / 15, -4 / 15), (0, 0, 1)),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -0.5, 0), (0, 1, 1, 4, 0.25, 0), (0, 1, -1, 8, -0.125, 1))),
}  # fmt: skip
"""The interpolation points 0, ±1 (F(2,3), as in Lavin & Gray) and 0, ±1, 2, −½ (F(4,3)):
a point and the negated reciprocal of another instead of Lavin & Gray's ±2 (Barabasz et
al., "Error analysis and improving the accuracy of Winograd convolution", 2020). Its
float32 sums, against float64 direct ones on standard-normal data, round 3-5 times
less at 512-2048 channels, for 4 more vector ops in the input transform's 1-D pass."""

FILTER_BLOCK = 4096
"""Filters transformed per matrix product at build time: enough for one BLAS call to
run at speed, while the float64 intermediates stay 300 KB in and 1.2 MB out (a whole
layer at once made 38 MB in and 151 MB out for YOLO-V4's 512->1024 layers)."""


def applies(shape: ConvShape, target: Target) -> bool:
    """Whether Winograd can compute `shape` on `target`: a 3x3, stride-1, undilated,
    ungrouped layer, and fixed-width vectors for the output interleave."""
    return (shape.kernel == (3, 3) and shape.strides == (1, 1) and shape.dilations == (1, 1) and shape.group == 1
            and not target.scalable)  # fmt: skip


def transform_ops(matrix: Matrix) -> int:
    """Vector operations one 1-D pass of `matrix` costs, as `_combine` emits it: per
    nonzero row, an add or FMA per nonzero beyond the first, and a multiply for the first
    unless the row has a +1 (F(4,3)'s input pass: 20; as a multiply and an add per
    coefficient other than ±1, 36). The models count a
    2-D transform as 2·T passes."""
    return sum(sum(1 for c in row if c) - (1 in row) for row in matrix if any(row))


def product_strides(shape: ConvShape, columns: int) -> tuple[int, int]:
    """Floats from one of the T² matrices of V (Cin × `columns` tiles) to the next, and
    of M (Cout × columns): the matrix rounded up to an odd number of cache lines, so
    that the T² vectors one tile vector writes to V (reads from M) fall in T² different
    L1 sets: back to back, 64 channels of 52² tiles put all 36 in one set (the matrices
    169 pages apart)."""
    return tuple((ceil_div(rows * columns, PREFETCH_LINE_FLOATS) | 1) * PREFETCH_LINE_FLOATS
                 for rows in (shape.channels, shape.out_channels))  # type: ignore[return-value]


def batched(gemm: mm.MatmulConfig, shape: ConvShape, m: int) -> mm.MatmulConfig:
    """One product's GEMM config as F(m×m, 3×3) runs it: T² of them, `product_strides`
    apart (its columns: one band's tiles)."""
    return replace(gemm, batch=(m + 2) ** 2, product_strides=product_strides(shape, gemm.shape.n))


@dataclass(frozen=True)
class WinogradConfig:
    """F(m×m, 3×3) with `lanes` tile columns per vector; `gemm` is the batched product
    of one band (Cout × its tiles × Cin, batch T²). The tile rows, numbered across the
    images, fall into `bands` bands of `band_rows` each, whose V and M are matrices of
    their own: a thread that takes a band writes and reads memory no other thread
    touches (two threads writing the halves of every row of one V took twice as long
    as each writing its own: docs/calibration.md). A call of a transform covers tile
    rows of one band, whose V and M it is given."""

    shape: ConvShape
    m: int
    lanes: int
    gemm: mm.MatmulConfig
    epilogue: ep.Epilogue = field(default=())
    bands: int = 1

    algorithm: str = field(default="winograd", init=False)

    @property
    def t(self) -> int:
        return self.m + 2

    @property
    def tile(self) -> str:
        return f"F({self.m},3) {self.gemm.algorithm} {self.gemm.tile}"

    @property
    def tiles_h(self) -> int:
        return ceil_div(self.shape.out_height, self.m)

    @property
    def tiles_w(self) -> int:
        return ceil_div(self.shape.out_width, self.m)

    @property
    def tiles(self) -> int:
        """Tiles of one image."""
        return self.tiles_h * self.tiles_w

    @property
    def band_rows(self) -> int:
        """Tile rows of each band (the last one's past the images are never stored)."""
        return ceil_div(self.shape.batch * self.tiles_h, self.bands)

    def gemm_shape(self) -> mm.MatmulShape:
        s = self.shape
        return mm.MatmulShape(s.out_channels, self.band_rows * self.tiles_w, s.channels)

    def split(self) -> PhaseSplit:
        """The input padded (with zero rows and columns for the last tiles) and split by
        stride-m phases."""
        s = self.shape
        bottom = self.tiles_h * self.m + 2 - s.height - s.pads[0]
        right = self.tiles_w * self.m + 2 - s.width - s.pads[1]
        return PhaseSplit(s.batch * s.channels, s.height, s.width, (self.m, self.m),
                          (s.pads[0], s.pads[1], max(bottom, s.pads[2]), max(right, s.pads[3])), 0.0,
                          self.lanes, 2 * self.lanes)  # fmt: skip

    def product_strides(self) -> tuple[int, int]:
        """`product_strides` of this layer's bands."""
        return product_strides(self.shape, self.gemm_shape().n)

    def v_size(self) -> int:
        """f32 elements of one band's V, its T² transformed input matrices."""
        return self.t**2 * self.product_strides()[0]

    def m_size(self) -> int:
        """f32 elements of one band's M, its T² products, and a vector's worth after them:
        the output transform reads a row's last vector whole (its lanes past the row are
        never stored), so that its code has no masked variant."""
        return self.t**2 * self.product_strides()[1] + self.lanes

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_winograd{self.m}_f32", self)

    def layouts(self) -> tuple[str, str]:
        """(what it reads, what it writes)."""
        return "nchw", "nchw"

    def modules(self, target: Target) -> list[KernelModule]:
        """The kernels in the order they run: the phase split, the input transform, the
        batched product, the output transform."""
        modules = [generate_phase_split(self.split(), target)]
        for sig, body in ((self.input_signature(), _input_transform), (self.output_signature(), _output_transform)):
            with new_module() as module:
                with kernel_body(module, sig) as args:
                    body(self, target, args)
                verify(module)
            modules.append(KernelModule(module=module, signatures=(sig,), target=target))
        return [modules[0], modules[1], mm.generate(self.gemm, target), modules[2]]

    def validate(self, target: Target) -> None:
        s = self.shape
        if target.scalable:
            raise KernelError(f"winograd's output interleave needs fixed-width vectors; {target.name} has "
                                  "scalable ones")  # fmt: skip
        if not applies(s, target):
            raise KernelError(f"winograd needs a 3x3, stride-1, undilated, ungrouped layer, got {s.describe()}")
        if self.m not in TRANSFORMS:
            raise KernelError(f"winograd output tiles are 2 or 4, got {self.m}")
        if not 1 <= self.bands <= s.batch * self.tiles_h:
            raise KernelError(f"winograd's {s.batch * self.tiles_h} tile rows fall into 1 to that many bands, "
                              f"not {self.bands}")  # fmt: skip
        check_lanes(target, self.lanes)
        g = self.gemm
        if (g.shape != self.gemm_shape() or g.batch != self.t**2 or g.epilogue or g.accumulate
                or g.product_strides != self.product_strides()):
            raise KernelError(f"winograd's product is {self.gemm_shape()} x {self.t**2}, strides "
                                  f"{self.product_strides()}, without epilogue (see batched)")  # fmt: skip
        g.validate(target)

    def filter_transform(self, weight: np.ndarray) -> np.ndarray:
        """U[ξν][k][c] = G g Gᵀ (in float64, once, at build time), stacked as the
        product's A matrices. Computed as matrix products, (G⊗G)·vec(g) for a block of
        filters at a time (an einsum over the filters took 0.1-0.2 s per 512x512 layer;
        blocks keep the float64 intermediates in cache)."""
        gg = np.kron(*[np.asarray(TRANSFORMS[self.m][1], np.float64)] * 2)  # [t·ξ + ν][3·i + j]
        filters = weight.reshape(-1, 9)  # [k·c][3·i + j]
        u = np.empty((self.t**2, len(filters)), np.float32)
        for start in range(0, len(filters), FILTER_BLOCK):
            block = filters[start:start + FILTER_BLOCK].astype(np.float64)
            u[:, start:start + FILTER_BLOCK] = gg @ block.T
        return u.reshape(self.t**2, self.shape.out_channels, self.shape.channels)

    def input_signature(self) -> KernelSignature:
        s = self.shape
        return KernelSignature(
            self.symbol + "_in",
            (Param("v", Role.OUT, extent=(self.v_size(),)),
             Param("xt", Role.IN, extent=(self.split().size,)),
             *_RANGES),
            f"Winograd F({self.m},3) input transform of {s.describe()}, {_RANGES_DESCRIBED}.",
        )  # fmt: skip

    def output_signature(self) -> KernelSignature:
        s = self.shape
        outputs = math.prod(s.output_shape)
        params = [Param("y", Role.OUT, extent=(outputs,)),
                  Param("mm", Role.IN, extent=(self.m_size(),))]  # fmt: skip
        for _, name, operand in ep.operand_names(self.epilogue):
            params.append(Param(name, Role.IN, extent=(s.out_channels if operand == "channel" else outputs,)))
        params += _RANGES
        return KernelSignature(self.symbol + "_out", tuple(params),
                               f"Winograd F({self.m},3) output transform of {s.describe()}, then "
                               f"{ep.describe(self.epilogue)}, {_RANGES_DESCRIBED}.")  # fmt: skip


_RANGES = tuple(Param(name, Role.SIZE) for name in ("channel_begin", "channel_end", "row_begin", "row_end"))
"""What one call of a transform covers: a thread's channels, or its tile rows, so that
it reads and writes what the product's split gives that thread (`for_image_rows`)."""
_RANGES_DESCRIBED = "channels [channel_begin, channel_end) of tile rows [row_begin, row_end) across the images"


def _combine(coefficients: tuple[float, ...], values: list[ir.Value], zero: ir.Value) -> ir.Value:
    """Σ coefficient·value with zeros skipped: a +1 term first (it costs nothing), ±1
    terms as adds and subtracts, the others as FMAs; `transform_ops` counts these."""
    terms = sorted(((c, v) for c, v in zip(coefficients, values, strict=True) if c), key=lambda term: term[0] != 1)
    if not terms:
        return zero
    (first, total), rest = terms[0], terms[1:]
    if first != 1:
        total = arith.mulf(total, splat(total.type, first))
    for c, v in rest:
        if abs(c) == 1:
            total = arith.addf(total, v) if c > 0 else arith.subf(total, v)
        else:
            total = vector.fma(v, splat(v.type, c), total)
    return total


def _two_sided(left: Matrix, d: list[list[ir.Value]], zero: ir.Value) -> list[list[ir.Value]]:
    """left · d · leftᵀ for a square grid `d` of vectors."""
    size = len(d)
    rows = [[_combine(left[i], [d[k][j] for k in range(size)], zero) for j in range(size)] for i in range(len(left))]
    return [[_combine(left[j], row, zero) for j in range(len(left))] for row in rows]


def _input_transform(cfg: WinogradConfig, target: Target, args: dict) -> None:
    s, split, lanes, t = cfg.shape, cfg.split(), cfg.lanes, cfg.t
    vec = f32_vector_type(target, lanes)
    xt = f32_memref(args["xt"], [split.size])
    v = f32_memref(args["v"], [cfg.v_size()])  # matrix ξν (product_strides apart), row c
    stride = cfg.product_strides()[0]
    taps = [[split.tap_offset(i, j) for j in range(t)] for i in range(t)]
    zero = f32_splat(target, lanes, 0.0)
    b_t = TRANSFORMS[cfg.m][0]

    def tile_row(n: ir.Value, c: ir.Value, ty: ir.Value, rows_end: ir.Value) -> None:
        p = arith.addi(arith.muli(n, index(s.channels)), c)
        window = arith.addi(arith.muli(p, index(split.plane_size)), arith.muli(ty, index(split.phase_cols)))
        first = _band_row_start(cfg, n, ty, c)

        def step(tx0: ir.Value, _count: int, sized: Sized) -> None:  # the last step's junk lanes read the
            start = arith.addi(window, tx0)  # padding; stored into the next tile row, which this thread
            # writes after (masked where they would leave its rows of the plane)
            d = [[load(vec, xt, [offset(start, taps[i][j])]) for j in range(t)] for i in range(t)]
            transformed = _two_sided(b_t, d, zero)
            at = arith.addi(first, tx0)

            def put(mask: ir.Value | None) -> None:
                for xi in range(t):
                    for nu in range(t):
                        store(transformed[xi][nu], v, [offset(at, (xi * t + nu) * stride)], mask)

            def stores(count: int) -> None:  # a row's last vector whole while its lanes stay in the rows
                end = offset(arith.addi(arith.muli(ty, index(cfg.tiles_w)), tx0), lanes)
                inside = arith.cmpi(arith.CmpIPredicate.sle, end, arith.muli(rows_end, index(cfg.tiles_w)))
                whole_or_masked(inside, tail_mask(target, lanes, count), put)

            sized(stores)

        for_tile_trips(index(0), index(ceil_div(cfg.tiles_w, lanes)), lanes, cfg.tiles_w, True, step)

    for_image_rows(s.batch, s.channels, cfg.tiles_h, [args[p.name] for p in _RANGES], tile_row)


def _band_row_start(cfg: WinogradConfig, n: ir.Value, ty: ir.Value, row: ir.Value) -> ir.Value:
    """Where tile row ty of image n begins in row `row` (a channel) of the first of its
    band's matrices."""
    local = arith.remsi(arith.addi(arith.muli(n, index(cfg.tiles_h)), ty), index(cfg.band_rows))
    return arith.addi(arith.muli(row, index(cfg.gemm_shape().n)), arith.muli(local, index(cfg.tiles_w)))


def interleave(pieces: list[ir.Value]) -> list[ir.Value]:
    """The lanes of len(pieces) = 2 or 4 vectors interleaved (lane l of piece j to place
    l·len + j), as that many vectors: pairs of shuffles, twice for four."""
    lanes = ir.VectorType(pieces[0].type).shape[0]

    def pair(a: ir.Value, b: ir.Value) -> list[ir.Value]:
        order = [x for lane in range(lanes) for x in (lane, lanes + lane)]
        return [vector.shuffle(a, b, order[:lanes]), vector.shuffle(a, b, order[lanes:])]

    if len(pieces) == 2:
        return pair(*pieces)
    low, high = pair(pieces[0], pieces[2]), pair(pieces[1], pieces[3])
    return [w for k in range(2) for w in pair(low[k], high[k])]


def _output_transform(cfg: WinogradConfig, target: Target, args: dict) -> None:
    s, lanes, t, m = cfg.shape, cfg.lanes, cfg.t, cfg.m
    vec = f32_vector_type(target, lanes)
    products = f32_memref(args["mm"], [cfg.m_size()])  # matrix ξν (product_strides apart), row k
    stride = cfg.product_strides()[1]
    oh_, ow_ = s.out_height, s.out_width
    y = f32_memref(args["y"], [s.batch * s.out_channels * oh_, ow_])
    operands = {i: f32_memref(args[name], [s.out_channels] if kind == "channel" else [s.batch * s.out_channels * oh_, ow_])
                for i, name, kind in ep.operand_names(cfg.epilogue)}  # fmt: skip
    zero = f32_splat(target, lanes, 0.0)
    a_t = TRANSFORMS[m][2]

    def tile_row(n: ir.Value, k: ir.Value, ty: ir.Value, _rows_end: ir.Value) -> None:
        p = arith.addi(arith.muli(n, index(s.out_channels)), k)
        row_start = _band_row_start(cfg, n, ty, k)

        def step(tx0: ir.Value, _count: int, _sized: Sized) -> None:  # the last step's junk lanes read
            first = arith.addi(row_start, tx0)  # what follows the row in M (see m_size); never stored
            grid = [[load(vec, products, [offset(first, (xi * t + nu) * stride)]) for nu in range(t)]
                    for xi in range(t)]  # fmt: skip
            out = _two_sided(a_t, grid, zero)
            x0 = arith.muli(tx0, index(m))
            for i in range(m):
                oh = arith.addi(arith.muli(ty, index(m)), index(i))
                row = arith.addi(arith.muli(p, index(oh_)), oh)

                def store_row(i: int = i, row: ir.Value = row) -> None:
                    for w, value in enumerate(interleave(out[i])):
                        x = offset(x0, w * lanes)
                        left = prefix_mask(mask_type(target, lanes), arith.subi(index(ow_), x))

                        def operand(j: int, x: ir.Value = x, left: ir.Value = left) -> ir.Value:
                            if cfg.epilogue[j].operand == "channel":
                                return vector.broadcast(vec, memref.load(operands[j], [k]))
                            return load(vec, operands[j], [row, x], left)

                        result = ep.apply(cfg.epilogue, value, operand)
                        inside = arith.cmpi(arith.CmpIPredicate.sle, offset(x, lanes), index(ow_))
                        whole_or_masked(inside, left, lambda mask, r=result, x=x: store(r, y, [row, x], mask))

                if oh_ % m and i >= oh_ % m:  # beyond OH on the last tile row
                    when(arith.cmpi(arith.CmpIPredicate.slt, oh, index(oh_)), store_row)
                else:
                    store_row()

        for_tile_trips(index(0), index(ceil_div(cfg.tiles_w, lanes)), lanes, cfg.tiles_w, True, step)

    for_image_rows(s.batch, s.out_channels, cfg.tiles_h, [args[p.name] for p in _RANGES], tile_row)
