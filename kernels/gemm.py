"""GEMM building blocks for every algorithm that is a matrix product — matmul's tiled
and packed algorithms now, im2col and 1×1 convolutions later: the register
micro-kernel, the write-back of its output tile (K blocks and epilogue), and the
packing of A and B into the panels the micro-kernel reads.

The micro-kernel (mr rows × nv vectors of L lanes, nr = nv·L columns)::

    total[mr][nv] = -0
    for chain in k_lo..k_hi, step chain_steps:                   # SUM_CHAIN products each
        acc[mr][nv] = 0
        for k in chain:                                          # `unroll` copies
            for t in 0..taps:  b[v] = B(v, k, t);  acc[r][v] += A(r, k, t) * b[v]
        total += acc

where A(r, k, t) and B(v, k, t) are callbacks: plain loads from row-major A and B,
loads from packed panels, or (for a convolution) loads straight from the image, k an
input channel and t a filter tap (a matrix product has one tap).

Packed layouts, in one workspace per thread (Bp, then Ap after it):
    Bp[panel][k][0..nr)   panel = (column − first column)/nr; zero past the last column
    Ap[tile][k][0..mr)    tile = row tile − first row tile;   the last row again past it
An A packed once (a constant: a layer's weights) holds every K block's Ap for all row
tiles, one after the other (`kernels.matmul.MatmulConfig.pack_a`); a B packed once
every K block's Bp for all column tiles (`MatmulConfig.pack_b`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernels.emit import index
from kernels.loops import Sized, equal, for_carry, for_range, for_tile_trips, for_tiles, for_unrolled, load, offset, store
from kernels.loops import if_values, strided_load, strided_store, transpose_square
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div

LoadA = Callable[[int, ir.Value, int], ir.Value]  # (row in the tile, k, tap) -> the A scalar
LoadB = Callable[[int, ir.Value, int], ir.Value]  # (vector in the tile, k, tap) -> the B vector
Finish = Callable[[ir.Value, int, int], ir.Value]  # (value, row, vector) -> with the epilogue

PACK_B_ROWS = 8
"""Rows of B packed together, panel by panel: a whole panel at a time reads every row
from another page when N is large, a whole row at a time writes to every panel;
bands of 8 rows keep both within the TLB and the prefetchers' streams (measured:
docs/calibration.md)."""


PREFETCH_LOCALITY = 3
"""How a tile asks for the next tile's panel of an A packed once (a layer's weights,
which a whole model's other layers evict to L3 between calls): one prefetch into L1
(locality 3) per unrolled trip, at the same k one panel ahead, so each 4 KB page of
the panels is on its way before the hardware prefetchers, which stop at page
boundaries, would start it. The blocked direct convolution asks for its next input
rows into L1 with it too (`kernels.nchwc`)."""


PREFETCH_LINE_FLOATS = 16
"""Floats per prefetched line: 64-byte lines (x86, most Arm cores); on a core with
128-byte lines every other prefetch asks for a line already on its way."""


B_PREFETCH_LOCALITY = 2
"""A packed-once B panel is prefetched into L2 (locality 2), a whole column tile ahead:
into L1 it would evict the panel being read long before its own turn."""


SUM_CHAIN = 128
"""Products summed in one register chain before that chain's sum joins the tile's
running total: a float32 sum's rounding error grows with the length of the chain it
is accumulated in, and chains of about a hundred products keep a convolution's or
product's error at the level of K-blocked BLAS kernels (docs/calibration.md)."""


def chain_steps(taps: int, unroll: int) -> int:
    """k steps per chain: SUM_CHAIN products of `taps` taps each, a whole number of
    unrolled trips (at least one)."""
    return max(unroll, SUM_CHAIN // taps // unroll * unroll)


def in_chains(vec: ir.VectorType, count: int, lo: ir.Value, hi: ir.Value, steps: int,
              chain: Callable[[ir.Value, ir.Value, list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:  # fmt: skip
    """`count` sums over [lo, hi) cut into chains of `steps`: chain(c, c_end, zeros) for
    each, added to the totals (from −0.0, which adds exactly). The chains stay a loop:
    unrolled (two or three trips), LLVM kept the totals in registers beside a chain's
    sums and, for a tile of more than half the registers, spilled those sums at every
    FMA instead."""
    zero = vector.broadcast(vec, arith.constant(ir.F32Type.get(), 0.0))
    minus_zero = vector.broadcast(vec, arith.constant(ir.F32Type.get(), -0.0))

    def one(c: ir.Value, totals: list[ir.Value]) -> list[ir.Value]:
        part = chain(c, arith.minsi(offset(c, steps), hi), [zero] * count)
        return [arith.addf(t, p) for t, p in zip(totals, part, strict=True)]

    return for_carry(lo, hi, steps, [minus_zero] * count, one, llvm_unrolls=False)


def micro_kernel(vec: ir.VectorType, rows: int, vectors: int, k_lo: ir.Value, k_hi: ir.Value,
                 unroll: int, load_a: LoadA, load_b: LoadB, taps: int = 1,
                 ahead: Callable[[ir.Value], None] | None = None,
                 acc: list[ir.Value] | None = None, whole_trips: bool = False) -> list[ir.Value]:  # fmt: skip
    """The accumulators acc[r·vectors + v] = Σ_k Σ_t A(r, k, t)·B(v, k, t) over k in
    [k_lo, k_hi) and the `taps` taps t, unrolled (their offsets are constants), in
    chains of `chain_steps` k steps (`in_chains`); given `acc`, added onto it in one
    chain (the caller cuts the chains). `ahead(k)`, once per trip, asks for what a
    later tile will read; `whole_trips`: k_hi - k_lo is always a multiple of `unroll`
    (`for_unrolled`)."""

    def step(k: ir.Value, copy: int, acc: list[ir.Value]) -> list[ir.Value]:
        if ahead is not None and copy == 0:
            ahead(k)
        for t in range(taps):
            b = [load_b(v, k, t) for v in range(vectors)]
            out = []
            for r in range(rows):
                a = vector.broadcast(vec, load_a(r, k, t))
                out += [vector.fma(a, b[v], acc[r * vectors + v]) for v in range(vectors)]
            acc = out
        return acc

    def chain(lo: ir.Value, hi: ir.Value, init: list[ir.Value]) -> list[ir.Value]:
        return for_unrolled(lo, hi, unroll, init, step, whole_trips)

    if acc is not None:
        return chain(k_lo, k_hi, acc)
    return in_chains(vec, rows * vectors, k_lo, k_hi, chain_steps(taps, unroll), chain)


@dataclass(frozen=True)
class OutputTile:
    """rows × vectors of a 2-D output memref: each row's index, each vector's first
    column and mask (None: all lanes)."""

    memory: ir.Value
    vec: ir.VectorType
    rows: list[ir.Value]
    cols: list[ir.Value]
    masks: list[ir.Value | None]

    def prefetch(self) -> None:
        """Ask for the tile's lines before the k loop, so their misses overlap the FMAs
        (a prefetch never faults, even past the end of the output)."""
        for row in self.rows:
            for col in self.cols:
                memref.prefetch(self.memory, [row, col], False, 3, True)

    def load(self, r: int, v: int) -> ir.Value:
        return load(self.vec, self.memory, [self.rows[r], self.cols[v]], self.masks[v])

    def store(self, r: int, v: int, value: ir.Value) -> None:
        store(value, self.memory, [self.rows[r], self.cols[v]], self.masks[v])


@dataclass(frozen=True)
class TransposedTile(OutputTile):
    """The same tile of a C stored transposed (Cᵀ in a flat memref, `stride` = C's
    row count apart): a vector's lanes, consecutive columns of C, are `stride` floats
    apart, stored by a scatter and read back by a gather."""

    stride: int

    def at(self, r: int, v: int) -> ir.Value:
        """Where lane 0 of vector v of row r lies: Cᵀ[cols[v], rows[r]]."""
        return arith.addi(arith.muli(self.cols[v], index(self.stride)), self.rows[r])

    def prefetch(self) -> None:
        """Ask for each column's run of the tile's rows (one line or two per column)."""
        lanes = ir.VectorType(self.vec).shape[0]
        for v in range(len(self.cols)):
            for lane in range(lanes):
                memref.prefetch(self.memory, [offset(self.at(0, v), lane * self.stride)], True, 3, True)

    def load(self, r: int, v: int) -> ir.Value:
        return strided_load(self.vec, self.memory, [self.at(r, v)], self.stride, self.masks[v])

    def store(self, r: int, v: int, value: ir.Value) -> None:
        strided_store(value, self.memory, [self.at(r, v)], self.stride, self.masks[v])


@dataclass(frozen=True)
class BlockedTile(OutputTile):
    """The same tile of a C stored transposed in blocks of L columns (Cᵀ as an NCHW[c]
    image with c = L lanes, in a flat memref, `stride` = C's row count): vector v of row
    r, columns cols[v] .. +L of one block, is the contiguous Cᵀ[cols[v] div L][rows[r]][·]
    at cols[v]·stride + rows[r]·L (the columns of a vector start a block). With
    `row_length` N, one block holds every column (NHWC): C row-major, rows[r]·N + cols[v]."""

    stride: int
    row_length: int = 0

    def at(self, r: int, v: int) -> ir.Value:
        if self.row_length:
            return arith.addi(arith.muli(self.rows[r], index(self.row_length)), self.cols[v])
        lanes = ir.VectorType(self.vec).shape[0]
        return arith.addi(arith.muli(self.cols[v], index(self.stride)), arith.muli(self.rows[r], index(lanes)))

    def prefetch(self) -> None:
        for r in range(len(self.rows)):
            for v in range(len(self.cols)):
                memref.prefetch(self.memory, [self.at(r, v)], True, 3, True)

    def load(self, r: int, v: int) -> ir.Value:
        return load(self.vec, self.memory, [self.at(r, v)], self.masks[v])

    def store(self, r: int, v: int, value: ir.Value) -> None:
        store(value, self.memory, [self.at(r, v)], self.masks[v])


@dataclass(frozen=True)
class KBlocks:
    """How K is cut: blocks of `kc` over [0, k); `accumulate` adds to the output's old
    values instead of overwriting them."""

    k: int
    kc: int
    accumulate: bool

    @property
    def single(self) -> bool:
        return self.kc >= self.k

    def whole_trips(self, unroll: int) -> bool:
        """Whether every block's depth (kc, and what is left of K after the full
        blocks) is a multiple of `unroll`."""
        return all(depth % unroll == 0 for depth in (min(self.kc, self.k), self.k % self.kc))


def write_back(tile: OutputTile, accs: list[ir.Value], k_lo: ir.Value, k_hi: ir.Value,
               blocks: KBlocks, finish: Finish | None) -> None:  # fmt: skip
    """Store the accumulators of the K block [k_lo, k_hi): over the output on the first
    block (unless accumulating), added to it on the others; `finish` (the epilogue)
    only on the last block, when the sum is complete. With several blocks, only what
    differs between them branches — the output read back (or zeros on the first
    block) and the finished values — and the stores are emitted once: emitting the
    whole write-back per case had made LLVM compile each tile's stores three times."""
    vectors = len(tile.cols)
    places = [(r, v) for r in range(len(tile.rows)) for v in range(vectors)]
    types = [acc.type for acc in accs]
    if blocks.single:
        values = [arith.addf(tile.load(r, v), acc) if blocks.accumulate else acc
                  for (r, v), acc in zip(places, accs, strict=True)]  # fmt: skip
        if finish is not None:
            values = [finish(value, r, v) for (r, v), value in zip(places, values, strict=True)]
    else:
        def read() -> list[ir.Value]:
            return [tile.load(r, v) for r, v in places]

        if blocks.accumulate:
            old = read()
        else:  # nothing to add on the first block
            zero = vector.broadcast(tile.vec, arith.constant(ir.F32Type.get(), 0.0))
            old = if_values(equal(k_lo, 0), types, lambda: [zero] * len(places), read)
        values = [arith.addf(c, acc) for c, acc in zip(old, accs, strict=True)]
        if finish is not None:
            sums = values
            values = if_values(equal(k_hi, blocks.k), types,
                               lambda: [finish(value, r, v) for (r, v), value in zip(places, sums, strict=True)],
                               lambda: sums)  # fmt: skip
    for (r, v), value in zip(places, values, strict=True):
        tile.store(r, v, value)


@dataclass(frozen=True)
class PackedB:
    """B's column panels for one (column block, K block) in the workspace."""

    work: ir.Value
    vec: ir.VectorType
    lanes: int
    vectors: int  # per panel: nr = vectors·lanes
    kc: int  # K rows per panel at most (the block size; the prefetch plan's)
    k0: ir.Value  # first k of the block
    k_hi: ir.Value  # past its last k: a panel holds k_hi - k0 rows (no zeros past K)
    col0: ir.Value  # first column of the block
    base: ir.Value | None = None  # where these panels start in `work` (None: at 0; in a B
    # packed once, the K block's panels of all column tiles, `MatmulConfig.pack_b`)

    @property
    def nr(self) -> int:
        return self.vectors * self.lanes

    def at(self, col: ir.Value, k: ir.Value, v: int) -> ir.Value:
        """The workspace index of vector v of row k of the panel starting at `col`."""
        depth = arith.subi(self.k_hi, self.k0)
        panel = arith.muli(arith.divsi(arith.subi(col, self.col0), index(self.nr)), arith.muli(depth, index(self.nr)))
        if self.base is not None:
            panel = arith.addi(self.base, panel)
        return offset(arith.addi(panel, arith.muli(arith.subi(k, self.k0), index(self.nr))), v * self.lanes)

    def loader(self, col: ir.Value) -> LoadB:
        """B(v, k) from the panel starting at `col`."""
        return lambda v, k, _tap: load(self.vec, self.work, [self.at(col, k, v)])

    def prefetcher(self, col: ir.Value, tile: ir.Value, tiles: int, unroll: int) -> Callable[[ir.Value], None]:
        """ahead(k) for row tile `tile` of the `tiles` that read the panel at `col` (a B
        packed once, a layer's weights, arriving from L3 or memory): its share of the
        next panel's lines, spread evenly over the tiles and their k trips. The first
        tile to read a panel would otherwise stream it from memory at the FMAs' pace
        (five lines per k at nr = 80), which no memory delivers; spread over all the
        tiles, the next panel arrives while this one is computed."""
        lines = ceil_div(self.kc * self.nr, PREFETCH_LINE_FLOATS)
        trips = ceil_div(self.kc, unroll)
        per_trip = ceil_div(lines, tiles * trips)
        next_panel = self.at(offset(col, self.nr), self.k0, 0)

        def ahead(k: ir.Value) -> None:
            trip = arith.divsi(arith.subi(k, self.k0), index(unroll))
            first = arith.muli(arith.addi(arith.muli(tile, index(trips)), trip), index(per_trip * PREFETCH_LINE_FLOATS))
            for p in range(per_trip):
                at = arith.addi(next_panel, offset(first, p * PREFETCH_LINE_FLOATS))
                memref.prefetch(self.work, [at], False, B_PREFETCH_LOCALITY, True)

        return ahead

    def pack(self, tiles: tuple[ir.Value, ir.Value], columns: int,
             read: Callable[[ir.Value, ir.Value, ir.Value | None], ir.Value],
             mask: Callable[[int], ir.Value]) -> None:  # fmt: skip
        """Fill the panels of column tiles [tiles) (of nr over `columns`) with rows
        [k0, k_hi): read(k, column, mask) gives B's vector there; lanes past the last
        column are zero (`mask(n)`: the first n lanes). In bands of PACK_B_ROWS rows."""

        def band(k_band: ir.Value) -> None:
            def panel(col: ir.Value, count: int) -> None:
                # not unrolled to its 8 rows: that made the panel loop LLVM's slowest to compile
                for_range(k_band, arith.minsi(offset(k_band, PACK_B_ROWS), self.k_hi), 1,
                          lambda k: self._pack_row(col, count, k, read, mask), llvm_unrolls=False)  # fmt: skip

            # nor the panels: unrolled, they cost LLVM time and ran no faster
            for_tiles(*tiles, self.nr, columns, panel, llvm_unrolls=False)

        for_range(self.k0, self.k_hi, PACK_B_ROWS, band)

    def _pack_row(self, col: ir.Value, count: int, k: ir.Value,
                  read: Callable[[ir.Value, ir.Value, ir.Value | None], ir.Value],
                  mask: Callable[[int], ir.Value]) -> None:  # fmt: skip
        """Row k of the panel at `col` of `count` columns, as `pack` fills it."""
        for v in range(ceil_div(count, self.lanes)):
            left = count - v * self.lanes
            edge = mask(left) if left < self.lanes else None
            store(read(k, offset(col, v * self.lanes), edge), self.work, [self.at(col, k, v)])

    def pack_transposed(self, tiles: tuple[ir.Value, ir.Value], columns: int,
                        row: Callable[[ir.Value, ir.Value], ir.Value],
                        read: Callable[[ir.Value, ir.Value, ir.Value | None], ir.Value],
                        mask: Callable[[int], ir.Value]) -> None:  # fmt: skip
        """`pack` from Bᵀ as stored (B's columns its rows, along k): squares of L columns
        by L k's, loaded as L vectors (`row(n, k)`: Bᵀ[n, k .. k + L)), transposed in
        registers and stored as L rows of the panel — L·log2 L shuffles where gathering
        takes a load slot per element; the k's past the last whole square by `read`, as
        `pack` reads them."""
        lanes, zero = self.lanes, vector.broadcast(self.vec, arith.constant(ir.F32Type.get(), 0.0))
        squares_end = arith.subi(self.k_hi, arith.remsi(arith.subi(self.k_hi, self.k0), index(lanes)))

        def panel(col: ir.Value, count: int) -> None:
            def square(k: ir.Value) -> None:
                for v in range(ceil_div(count, lanes)):
                    rows = [row(offset(col, v * lanes + i), k) if v * lanes + i < count else zero for i in range(lanes)]
                    for j, value in enumerate(transpose_square(rows)):
                        store(value, self.work, [self.at(col, offset(k, j), v)])

            for_range(self.k0, squares_end, lanes, square, llvm_unrolls=False)
            for_range(squares_end, self.k_hi, 1, lambda k: self._pack_row(col, count, k, read, mask),
                      llvm_unrolls=False)  # fmt: skip

        for_tiles(*tiles, self.nr, columns, panel, llvm_unrolls=False)


@dataclass(frozen=True)
class PackedA:
    """A's row-tile panels for one K block: packed per call for one row block into the
    workspace after Bp, or read from an A packed once for all row tiles
    (`MatmulConfig.pack_a`)."""

    work: ir.Value
    base: ir.Value  # where these panels start in `work` (after Bp; or in a packed A)
    mr: int
    k0: ir.Value  # first k of the block
    k_hi: ir.Value  # past its last k: a panel holds k_hi - k0 rows (no zeros past K)
    tile0: ir.Value  # first row tile of the block

    def at(self, row0: ir.Value, k: ir.Value, r: int) -> ir.Value:
        """The workspace index of row r of the tile starting at `row0`, at k."""
        tile = arith.subi(arith.divsi(row0, index(self.mr)), self.tile0)
        start = arith.addi(self.base, arith.muli(tile, arith.muli(arith.subi(self.k_hi, self.k0), index(self.mr))))
        return offset(arith.addi(start, arith.muli(arith.subi(k, self.k0), index(self.mr))), r)

    def loader(self, row0: ir.Value) -> LoadA:
        """A(r, k) from the tile starting at `row0`."""
        return lambda r, k, _tap: memref.load(self.work, [self.at(row0, k, r)])

    def prefetcher(self, row0: ir.Value) -> Callable[[ir.Value], None]:
        """ahead(k) for the tile at `row0`: ask for the next tile's panel at the same k."""
        return lambda k: memref.prefetch(self.work, [self.at(offset(row0, self.mr), k, 0)], False, PREFETCH_LOCALITY, True)

    def pack(self, tiles: tuple[ir.Value, ir.Value], rows: int, read: Callable[[ir.Value, ir.Value], ir.Value]) -> None:
        """Fill the tiles [tiles) (of mr rows over `rows`) with columns [k0, k_hi):
        read(row, k) gives A's scalar there. A last, partial tile's rows past the last
        row hold that row again: a micro-kernel computes rows independently and its
        write-back drops those, so one loop nest packs every tile (a zero-filling
        variant for the last tile took a third of the packing's LLVM time)."""

        def tile(row0: ir.Value, _count: int, _sized: Sized) -> None:
            sources = [offset(row0, r) for r in range(self.mr)]
            if rows % self.mr:  # the first row of a tile is always within A
                sources[1:] = [arith.minsi(row, index(rows - 1)) for row in sources[1:]]

            def column(k: ir.Value) -> None:
                for r, row in enumerate(sources):
                    memref.store(read(row, k), self.work, [self.at(row0, k, r)])

            for_range(self.k0, self.k_hi, 1, column, llvm_unrolls=False, llvm_vectorizes=False)

        for_tile_trips(*tiles, self.mr, rows, True, tile)
