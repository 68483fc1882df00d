"""f32 matmul ``C = A·B`` (or ``C += A·B``), row-major, generated for one static shape.

Four algorithms, chosen and parameterized by `MatmulConfig`:

broadcast (Buddy Compiler's matmul vectorization: one row, C streamed through memory)::

    for i in rows:  for k0 in 0..K step u:                 # u = unroll, then the rest
        for j in cols step L:  C[i, j:j+L] (+)= sum over k in k0..k0+u of A[i,k] * B[k, j:j+L]
                                                                # last vector masked

tiled (register-tiled outer products, cache-blocked, no packing) and packed (the same
loop nest around packed, zero-padded copies of the A and B blocks, BLIS/Goto)::

    for jc in cols step nc:  for pc in 0..K step kc:      [packed: B[pc:,jc:] -> Bp]
      for ic in rows step mc:                              [packed: A[ic:,pc:] -> Ap]
        for jr in jc..jc+nc step nr:  for ir in ic..ic+mc step mr:
          acc[mr][nv] = 0;  prefetch the C tile
          for k in pc..pc+kc:  b[v] = B[k, jr+v*L];  acc[r][v] += A[ir+r, k] * b[v]
          C tile = acc on the first K block unless accumulating, else C tile += acc
                                                           # nr = nv*L

dot (matrix times vector, N = 1 only: C's one column, vectorized along K instead)::

    for ir in rows step mr:  acc[mr][u] = 0
        for k in 0..K step u*L:  acc[r][c] += A[ir+r, k+c*L : +L] * B[k+c*L : +L, 0]
                                                           # then whole vectors, last one masked
        C[ir+r, 0] (+)= sum of acc[r][*] and of its lanes    # u = unroll partial sums per row

Edges: the last row tile has M mod mr rows (its own micro-kernel variant); the last
column tile has the needed vectors only, its last one masked; K blocks end at K.

Rows are split into tiles of mr rows (1 for broadcast), columns into tiles of nr
columns (one vector for broadcast). The kernel computes the row tiles
``[row_begin, row_end)`` of the column tiles ``[col_begin, col_end)``, so that
threads can call it on disjoint blocks: split by rows, each packs all of B; split
by columns, each packs only its columns (and all of A).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from autoconfig.errors import AutoconfigError
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import (
    KernelModule,
    check_lanes,
    f32_memref,
    f32_splat,
    f32_vector_type,
    index,
    kernel_body,
    mask_type,
    new_module,
    verify,
)
from kernels.mlir import arith, ir, memref, scf, vector
from kernels.target import Target

Algorithm = Literal["broadcast", "tiled", "packed", "dot"]
ALGORITHMS: tuple[Algorithm, ...] = ("broadcast", "tiled", "packed", "dot")
Split = Literal["rows", "columns"]
SPLITS: tuple[Split, ...] = ("rows", "columns")


@dataclass(frozen=True)
class MatmulShape:
    """C[M,N] = A[M,K] · B[K,N]."""

    m: int
    n: int
    k: int

    def __post_init__(self) -> None:
        if min(self.m, self.n, self.k) < 1:
            raise AutoconfigError(f"matmul sizes must be >= 1, got M={self.m} N={self.n} K={self.k}")

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


@dataclass(frozen=True)
class MatmulConfig:
    """Everything that decides the generated matmul code, with the thread count."""

    algorithm: Algorithm
    lanes: int  # f32 per vector (may be narrower than the ISA's widest)
    mr: int = 1  # rows of the register tile (1 for broadcast; rows per tile for dot)
    nv: int = 1  # vectors per row of the register tile (tile width nr = nv·lanes)
    kc: int = 0  # K block (0: all of K)
    mc: int = 0  # rows per M block (0: all rows), a multiple of mr
    nc: int = 0  # columns per N block (0: all of N), a multiple of nr
    unroll: int = 1  # copies of the K-loop body per trip (dot: partial sums per row)
    accumulate: bool = False  # C += A·B instead of C = A·B
    threads: int = 1  # blocks run concurrently (runtime, not codegen)
    split: Split = "rows"  # which tiles the threads divide (runtime, not codegen)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def tile(self) -> str:
        """The register tile in a few characters, for tables: '6x2' (rows x vectors),
        'u8' (broadcast: rows of B per pass), '8x1 sums' (dot: rows x partial sums)."""
        return {"broadcast": f"u{self.unroll}", "dot": f"{self.mr}x{self.unroll} sums"}.get(
            self.algorithm, f"{self.mr}x{self.nv}")  # fmt: skip

    def col_tiles(self, shape: MatmulShape) -> int:
        return -(-shape.n // self.nr)

    def split_units(self, shape: MatmulShape) -> int:
        """How many tiles the threads divide: row tiles or column tiles."""
        return self.row_tiles(shape) if self.split == "rows" else self.col_tiles(shape)

    def blocks(self, shape: MatmulShape) -> tuple[int, int, int]:
        """(kc, mc, nc) with 0 resolved to the whole dimension."""
        return (
            self.kc or shape.k,
            self.mc or round_up(shape.m, self.mr),
            self.nc or round_up(shape.n, self.nr),
        )

    def row_tiles(self, shape: MatmulShape) -> int:
        return -(-shape.m // self.mr)

    def packed_blocks(self, shape: MatmulShape) -> tuple[int, int, int]:
        """(kc, mc, nc) clipped to the (tile-rounded) matrix: the packed panels' sizes."""
        kc, mc, nc = self.blocks(shape)
        return min(kc, shape.k), min(mc, round_up(shape.m, self.mr)), min(nc, round_up(shape.n, self.nr))

    def workspace(self, shape: MatmulShape) -> int:
        """f32 elements of packing workspace one call needs (0 unless packed): the B
        block (kc×nc) followed by the A block (mc×kc)."""
        if self.algorithm != "packed":
            return 0
        kc, mc, nc = self.packed_blocks(shape)
        return kc * nc + mc * kc

    def validate(self, target: Target, shape: MatmulShape) -> None:
        """Reject a config that the target cannot run, with the reason."""
        if self.algorithm not in ALGORITHMS:
            raise AutoconfigError(f"unknown matmul algorithm {self.algorithm!r}: {', '.join(ALGORITHMS)}")
        check_lanes(target, self.lanes)
        if self.split not in SPLITS:
            raise AutoconfigError(f"unknown split {self.split!r}: {', '.join(SPLITS)}")
        for name in ("mr", "nv", "unroll", "threads"):
            if getattr(self, name) < 1:
                raise AutoconfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("kc", "mc", "nc"):
            if getattr(self, name) < 0:
                raise AutoconfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.algorithm == "broadcast" and (self.mr, self.nv) != (1, 1):
            raise AutoconfigError("broadcast matmul works on one row and one vector: mr=nv=1")
        if self.algorithm == "dot" and (shape.n, self.nv) != (1, 1):
            raise AutoconfigError(f"dot matmul is for N=1 (matrix times vector) with nv=1, got N={shape.n} nv={self.nv}")
        if self.algorithm == "broadcast":
            registers = self.unroll + 2
            needs = f"broadcast with unroll={self.unroll} needs {self.unroll} A broadcasts + C + B"
        elif self.algorithm == "dot":
            registers = self.mr * self.unroll + 2
            needs = f"dot with {self.mr} rows x {self.unroll} partial sums needs {self.mr * self.unroll} accumulators + A + B"
        else:
            registers = self.mr * self.nv + self.nv + 1
            needs = (f"register tile {self.mr}x{self.nv} needs {self.mr * self.nv} accumulators + "
                     f"{self.nv} B vectors + 1 broadcast")  # fmt: skip
        if registers > target.vector_registers:
            raise AutoconfigError(
                f"{needs} = {registers} vector registers; {target.name} has {target.vector_registers}"
            )
        if self.mc % self.mr:
            raise AutoconfigError(f"mc={self.mc} must be a multiple of mr={self.mr}")
        if self.nc % self.nr:
            raise AutoconfigError(f"nc={self.nc} must be a multiple of nr={self.nr} (nv x lanes)")


PACK_B_ROWS = 8
"""Rows of B packed together, panel by panel: a whole panel at a time reads every row
from another page when N is large, a whole row at a time writes to every panel;
bands of 8 rows keep both within the TLB and the prefetchers' streams. Measured
(C, AVX2, B 256x1024 into 16-wide panels): panel by panel 20 GB/s of B, row by
row 17, 8-row bands 34 (4: 29-33, 16: 31, 32: 25); the same 42 GB/s for all
orders when B fits L2."""


def round_up(x: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= x."""
    return -(-x // multiple) * multiple


def signature(shape: MatmulShape, config: MatmulConfig) -> KernelSignature:
    """``ac_matmul_f32(C, A, B[, work], row_begin, row_end, col_begin, col_end)``."""
    m, n, k = shape.m, shape.n, shape.k
    params = [
        Param("c", Role.INOUT if config.accumulate else Role.OUT, extent=(m * n,)),
        Param("a", Role.IN, extent=(m * k,)),
        Param("b", Role.IN, extent=(k * n,)),
    ]
    if config.algorithm == "packed":
        params.append(Param("work", Role.OUT, extent=(config.workspace(shape),)))
    params += [Param(name, Role.SIZE) for name in ("row_begin", "row_end", "col_begin", "col_end")]
    op = "+=" if config.accumulate else "="
    return KernelSignature(
        symbol="ac_matmul_f32",
        params=tuple(params),
        doc=f"C[{m}x{n}] {op} A[{m}x{k}] . B[{k}x{n}] on row tiles [row_begin, row_end) of "
        f"{config.mr} rows x column tiles [col_begin, col_end) of {config.nr} ({config.algorithm}).",
    )


def generate(shape: MatmulShape, config: MatmulConfig, target: Target) -> KernelModule:
    """The matmul kernel for `shape` with `config` on `target`."""
    config.validate(target, shape)
    sig = signature(shape, config)
    with new_module() as module:
        with kernel_body(module, sig) as args:
            emitter = _Emitter(shape, config, target, args)
            if config.algorithm == "broadcast":
                emitter.broadcast()
            elif config.algorithm == "dot":
                emitter.dot(f32_memref(args["b"], [shape.k]))
            else:
                emitter.blocked(packed=config.algorithm == "packed")
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)


# A callback that loads the A scalar of (row offset, k) or the B vector of (vector, k).
LoadA = Callable[[int, ir.Value], ir.Value]
LoadB = Callable[[int, ir.Value], ir.Value]


class _Emitter:
    """Emits one matmul kernel body; methods mirror the loop nests in the module doc."""

    def __init__(self, shape: MatmulShape, config: MatmulConfig, target: Target, args: dict):
        self.shape, self.config, self.target = shape, config, target
        self.lanes = config.lanes
        self.vec = f32_vector_type(target, self.lanes)
        self.c = f32_memref(args["c"], [shape.m, shape.n])
        self.a = f32_memref(args["a"], [shape.m, shape.k])
        self.b = f32_memref(args["b"], [shape.k, shape.n])
        self.work = f32_memref(args["work"], [config.workspace(shape)]) if "work" in args else None
        self.tile_begin = index(args["row_begin"])
        self.tile_end = arith.minsi(index(args["row_end"]), index(config.row_tiles(shape)))
        # the columns [col_lo, col_hi) of the column tiles asked for
        self.col_lo = arith.muli(index(args["col_begin"]), index(config.nr))
        self.col_hi = arith.minsi(arith.muli(index(args["col_end"]), index(config.nr)), index(shape.n))
        self.zero = f32_splat(target, self.lanes, 0.0)

    # ------------------------------------------------------------ helpers

    def column_tiles(self) -> tuple[int, int]:
        """(columns in full nr-wide tiles, vectors in the edge tile)."""
        nr = self.config.nr
        full = self.shape.n // nr * nr
        return full, -(-(self.shape.n - full) // self.lanes)

    def edge_mask(self, start: ir.Value | int, end: int | None = None) -> ir.Value:
        """Mask of the lanes of the vector starting at `start` that lie below `end`
        (N: the vector's columns inside the matrix)."""
        end = self.shape.n if end is None else end
        remaining = arith.subi(index(end), index(start) if isinstance(start, int) else start)
        return vector.create_mask(mask_type(self.target, self.lanes), [remaining])

    def for_range(self, lo: ir.Value, hi: ir.Value, step: int, body: Callable[[ir.Value], None]) -> None:
        """scf.for i in [lo, hi) step `step`: body(i)."""
        loop = scf.ForOp(lo, hi, index(step))
        with ir.InsertionPoint(loop.body):
            body(loop.induction_variable)
            scf.yield_([])

    def for_row_tiles(self, lo: ir.Value, hi: ir.Value, body: Callable[[ir.Value, int], None]) -> None:
        """Call body(first_row, rows) for tiles [lo, hi): full tiles, then the edge tile."""
        mr, full_tiles = self.config.mr, self.shape.m // self.config.mr
        full_hi = arith.minsi(hi, index(full_tiles))
        self.for_range(lo, full_hi, 1, lambda t: body(arith.muli(t, index(mr)), mr))
        edge_rows = self.shape.m % mr
        if edge_rows:
            has_edge = arith.andi(
                arith.cmpi(arith.CmpIPredicate.sle, lo, index(full_tiles)),
                arith.cmpi(arith.CmpIPredicate.sgt, hi, index(full_tiles)),
            )
            branch = scf.IfOp(has_edge)
            with ir.InsertionPoint(branch.then_block):
                body(index(full_tiles * mr), edge_rows)
                scf.yield_([])

    def k_loop(self, lo: ir.Value, hi: ir.Value, accs: list[ir.Value], step: Callable) -> list[ir.Value]:
        """acc = step(k, copy, acc) for k in [lo, hi): `unroll` copies per trip (copy =
        0..unroll-1), then the rest one per trip (copy 0)."""
        u = self.config.unroll
        if u == 1:
            return self._k_trips(lo, hi, 1, accs, step)
        mid = arith.addi(lo, arith.muli(arith.divsi(arith.subi(hi, lo), index(u)), index(u)))
        return self._k_trips(mid, hi, 1, self._k_trips(lo, mid, u, accs, step), step)

    def _k_trips(self, lo, hi, copies: int, accs: list[ir.Value], step: Callable) -> list[ir.Value]:
        loop = scf.ForOp(lo, hi, index(copies), accs)
        with ir.InsertionPoint(loop.body):
            values = list(loop.inner_iter_args)
            for copy in range(copies):
                k = loop.induction_variable
                values = step(arith.addi(k, index(copy)) if copy else k, copy, values)
            scf.yield_(values)
        return list(loop.results)

    def first_k_block(self, pc: ir.Value) -> ir.Value | None:
        """i1 'this K block starts at 0 and C is overwritten' (None when accumulating)."""
        if self.config.accumulate:
            return None
        return arith.cmpi(arith.CmpIPredicate.eq, pc, index(0))

    def load(self, memory: ir.Value, indices: list[ir.Value], mask: ir.Value | None = None) -> ir.Value:
        """A vector from `memory` at `indices`; with a mask, the lanes outside it are 0
        and never read."""
        if mask is None:
            return vector.load(self.vec, memory, indices)
        return vector.maskedload(self.vec, memory, indices, mask, self.zero)

    def load_c(self, row: ir.Value, col: ir.Value, mask: ir.Value | None, fresh: ir.Value | None) -> ir.Value:
        """C[row, col:col+L], or zeros when `fresh` (first K block, not accumulating)."""
        loaded = self.load(self.c, [row, col], mask)
        return loaded if fresh is None else arith.select(fresh, self.zero, loaded)

    def store_c(self, value: ir.Value, row: ir.Value, col: ir.Value, mask: ir.Value | None) -> None:
        if mask is not None:
            vector.maskedstore(self.c, [row, col], mask, value)
        else:
            vector.store(value, self.c, [row, col])

    # ------------------------------------------------------------ broadcast

    def broadcast(self) -> None:
        """Row-vectorized matmul: the C row streamed through memory once per `unroll`
        rows of B (a pass adds a[k]·B[k] for k in [k0, k0+unroll) to each C vector)."""
        lanes, n, u = self.lanes, self.shape.n, self.config.unroll
        full = n // lanes * lanes

        def row(i: ir.Value) -> None:
            def k_pass(k0: ir.Value, rows: int) -> None:
                ks = [arith.addi(k0, index(r)) if r else k0 for r in range(rows)]
                a = [vector.broadcast(self.vec, memref.load(self.a, [i, k])) for k in ks]
                fresh = self.first_k_block(k0)

                def column(j: ir.Value, mask: ir.Value | None) -> None:
                    acc = self.load_c(i, j, mask, fresh)
                    for a_k, k in zip(a, ks, strict=True):
                        acc = vector.fma(a_k, self.load(self.b, [k, j], mask), acc)
                    self.store_c(acc, i, j, mask)

                self.for_range(self.col_lo, arith.minsi(self.col_hi, index(full)), lanes,
                               lambda j: column(j, None))  # fmt: skip
                if full < n:
                    branch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.sgt, self.col_hi, index(full)))
                    with ir.InsertionPoint(branch.then_block):
                        column(index(full), self.edge_mask(full))
                        scf.yield_([])

            full_k = self.shape.k // u * u
            if full_k:
                self.for_range(index(0), index(full_k), u, lambda k: k_pass(k, u))
            if full_k < self.shape.k:
                self.for_range(index(full_k), index(self.shape.k), 1, lambda k: k_pass(k, 1))

        self.for_range(self.tile_begin, self.tile_end, 1, row)

    # ------------------------------------------------------------ dot (N = 1)

    def dot(self, b: ir.Value) -> None:
        """Matrix times vector: each row of A against `b` (B's one column, contiguous),
        along K in vectors; `unroll` partial sums per row cover the FMA latency and are
        added up, lanes and all, at the end."""
        lanes, u, k = self.lanes, self.config.unroll, self.shape.k
        vectors = k // lanes  # whole vectors along K; the rest is one masked vector

        def tile(row0: ir.Value, rows: int) -> None:
            row = [arith.addi(row0, index(r)) if r else row0 for r in range(rows)]

            def step(kv: ir.Value, copy: int, acc: list[ir.Value], mask: ir.Value | None = None) -> list[ir.Value]:
                at = arith.muli(kv, index(lanes))
                b_k = self.load(b, [at], mask)
                out = list(acc)
                for r in range(rows):
                    out[r * u + copy] = vector.fma(self.load(self.a, [row[r], at], mask), b_k, out[r * u + copy])
                return out

            acc = self.k_loop(index(0), index(vectors), [self.zero] * (rows * u), step)
            if k % lanes:
                acc = step(index(vectors), 0, acc, self.edge_mask(vectors * lanes, end=k))
            for r in range(rows):
                total = acc[r * u]
                for partial in acc[r * u + 1 : (r + 1) * u]:
                    total = arith.addf(total, partial)
                value = vector.reduction(ir.F32Type.get(), vector.CombiningKind.ADD, total)
                if self.config.accumulate:
                    value = arith.addf(memref.load(self.c, [row[r], index(0)]), value)
                memref.store(value, self.c, [row[r], index(0)])

        asked = scf.IfOp(arith.cmpi(arith.CmpIPredicate.slt, self.col_lo, self.col_hi))  # the one column tile
        with ir.InsertionPoint(asked.then_block):
            self.for_row_tiles(self.tile_begin, self.tile_end, tile)
            scf.yield_([])

    # ------------------------------------------------------------ tiled / packed

    def blocked(self, packed: bool) -> None:
        """The BLIS loop nest around the register micro-kernel (packing optional)."""
        shape, cfg = self.shape, self.config
        kc, mc, nc = cfg.blocks(shape)
        tiles_per_mc = mc // cfg.mr

        def jc_block(jc: ir.Value) -> None:
            jc_end = arith.minsi(arith.addi(jc, index(nc)), self.col_hi)

            def pc_block(pc: ir.Value) -> None:
                pc_end = arith.minsi(arith.addi(pc, index(kc)), index(shape.k))
                if packed:
                    self.pack_b(jc, jc_end, pc, pc_end)

                def ic_block(ic_tile: ir.Value) -> None:
                    ic_tile_end = arith.minsi(arith.addi(ic_tile, index(tiles_per_mc)), self.tile_end)
                    if packed:
                        self.pack_a(ic_tile, ic_tile_end, pc, pc_end)
                    self.column_tiles_in(jc, jc_end, pc, pc_end, ic_tile, ic_tile_end, packed)

                self.for_range(self.tile_begin, self.tile_end, tiles_per_mc, ic_block)

            self.for_range(index(0), index(shape.k), kc, pc_block)

        self.for_range(self.col_lo, self.col_hi, nc, jc_block)

    def column_tiles_in(self, jc, jc_end, pc, pc_end, ic_tile, ic_tile_end, packed: bool) -> None:
        """Micro-kernels over the column tiles of [jc, jc_end) and the row tiles given."""
        cfg = self.config
        full, edge_vectors = self.column_tiles()
        full_end = arith.minsi(jc_end, index(full))

        def rows_for(jr: ir.Value, vectors: int, last_mask: ir.Value | None) -> None:
            def tile(row0: ir.Value, rows: int) -> None:
                load_a, load_b = self.loaders(packed, jc, pc, ic_tile, row0, jr, vectors, last_mask)
                self.micro_kernel(row0, rows, jr, vectors, last_mask, pc, pc_end, load_a, load_b)

            self.for_row_tiles(ic_tile, ic_tile_end, tile)

        self.for_range(jc, full_end, cfg.nr, lambda jr: rows_for(jr, cfg.nv, None))
        if edge_vectors:
            in_block = arith.cmpi(arith.CmpIPredicate.sgt, jc_end, index(full))
            branch = scf.IfOp(in_block)
            with ir.InsertionPoint(branch.then_block):
                last = full + (edge_vectors - 1) * self.lanes
                rows_for(index(full), edge_vectors, self.edge_mask(last))
                scf.yield_([])

    def micro_kernel(self, row0, rows, col0, vectors, last_mask, k_lo, k_hi, load_a: LoadA, load_b: LoadB) -> None:
        """acc[rows][vectors] = A·B over k in [k_lo, k_hi) from zero, then added to C
        (stored over it on the first K block unless accumulating). C's lines are
        prefetched before the k loop and read after it, so their misses overlap the
        FMAs instead of stalling the tile's start."""
        fresh = self.first_k_block(k_lo)
        cols = [arith.addi(col0, index(v * self.lanes)) for v in range(vectors)]
        row_index = [arith.addi(row0, index(r)) for r in range(rows)]
        masks = [last_mask if v == vectors - 1 else None for v in range(vectors)]
        for r in range(rows):
            for v in range(vectors):  # a prefetch never faults, even past the end of C
                memref.prefetch(self.c, [row_index[r], cols[v]], False, 3, True)

        def step(k: ir.Value, _copy: int, acc: list[ir.Value]) -> list[ir.Value]:
            b = [load_b(v, k) for v in range(vectors)]
            out = []
            for r in range(rows):
                a = vector.broadcast(self.vec, load_a(r, k))
                out += [vector.fma(a, b[v], acc[r * vectors + v]) for v in range(vectors)]
            return out

        accs = self.k_loop(k_lo, k_hi, [self.zero] * (rows * vectors), step)

        def write_back(add_to_c: bool) -> None:
            for r in range(rows):
                for v in range(vectors):
                    value = accs[r * vectors + v]
                    if add_to_c:
                        value = arith.addf(self.load_c(row_index[r], cols[v], masks[v], None), value)
                    self.store_c(value, row_index[r], cols[v], masks[v])

        if fresh is None:
            write_back(add_to_c=True)
            return
        branch = scf.IfOp(fresh, has_else=True)
        for block, add_to_c in ((branch.then_block, False), (branch.else_block, True)):
            with ir.InsertionPoint(block):
                write_back(add_to_c)
                scf.yield_([])

    def loaders(self, packed, jc, pc, ic_tile, row0, jr, vectors, last_mask) -> tuple[LoadA, LoadB]:
        """A-scalar and B-vector loads: from A and B, or from the packed panels."""
        lanes, cfg = self.lanes, self.config
        if not packed:
            def load_b(v: int, k: ir.Value) -> ir.Value:
                return self.load(self.b, [k, arith.addi(jr, index(v * lanes))], last_mask if v == vectors - 1 else None)

            return (lambda r, k: memref.load(self.a, [arith.addi(row0, index(r)), k])), load_b
        kc = self.packed_kc()
        a_base = self.a_offset()
        # Bp[(jr-jc)/nr][k-pc][0..nr): panel-major, k rows of nr contiguous floats.
        b_panel = arith.muli(arith.divsi(arith.subi(jr, jc), index(cfg.nr)), index(kc * cfg.nr))
        # Ap[(row0-ic*mr)/mr][k-pc][0..mr): tile-major, k rows of mr contiguous floats.
        a_tile = arith.muli(
            arith.subi(arith.divsi(row0, index(cfg.mr)), ic_tile), index(kc * cfg.mr)
        )

        def load_b_packed(v: int, k: ir.Value) -> ir.Value:
            at = arith.addi(b_panel, arith.addi(arith.muli(arith.subi(k, pc), index(cfg.nr)), index(v * lanes)))
            return self.load(self.work, [at])

        def load_a_packed(r: int, k: ir.Value) -> ir.Value:
            at = arith.addi(a_base, arith.addi(a_tile, arith.addi(arith.muli(arith.subi(k, pc), index(cfg.mr)), index(r))))
            return memref.load(self.work, [at])

        return load_a_packed, load_b_packed

    # ------------------------------------------------------------ packing

    def packed_kc(self) -> int:
        return self.config.packed_blocks(self.shape)[0]

    def a_offset(self) -> ir.Value:
        """Ap starts after Bp in the workspace."""
        kc, _, nc = self.config.packed_blocks(self.shape)
        return index(kc * nc)

    def pack_b(self, jc, jc_end, pc, pc_end) -> None:
        """Bp[panel][k][0..nr) = B[pc+k, jc+panel*nr ...]; the edge panel is zero past N.

        In bands of PACK_B_ROWS rows of B, panel by panel within a band (see there).
        """
        cfg, lanes = self.config, self.lanes
        kc = self.packed_kc()
        full, edge_vectors = self.column_tiles()

        def band(k0: ir.Value) -> None:
            k_end = arith.minsi(arith.addi(k0, index(PACK_B_ROWS)), pc_end)

            def panel(jr: ir.Value, masked: bool) -> None:
                base = arith.muli(arith.divsi(arith.subi(jr, jc), index(cfg.nr)), index(kc * cfg.nr))

                def row(k: ir.Value) -> None:
                    dst_row = arith.addi(base, arith.muli(arith.subi(k, pc), index(cfg.nr)))
                    for v in range(cfg.nv):
                        col = arith.addi(jr, index(v * lanes))
                        value = self.load(self.b, [k, col], self.edge_mask(col) if masked else None)
                        vector.store(value, self.work, [arith.addi(dst_row, index(v * lanes))])

                self.for_range(k0, k_end, 1, row)

            self.for_range(jc, arith.minsi(jc_end, index(full)), cfg.nr, lambda jr: panel(jr, False))
            if edge_vectors:
                branch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.sgt, jc_end, index(full)))
                with ir.InsertionPoint(branch.then_block):
                    panel(index(full), True)
                    scf.yield_([])

        self.for_range(pc, pc_end, PACK_B_ROWS, band)

    def pack_a(self, ic_tile, ic_tile_end, pc, pc_end) -> None:
        """Ap[tile][k][0..mr) = A[tile row r, pc+k]; the edge tile's missing rows are 0."""
        cfg = self.config
        kc = self.packed_kc()
        zero = arith.constant(ir.F32Type.get(), 0.0)

        def tile(row0: ir.Value, rows: int) -> None:
            t = arith.divsi(row0, index(cfg.mr))
            base = arith.addi(self.a_offset(), arith.muli(arith.subi(t, ic_tile), index(kc * cfg.mr)))

            def column(k: ir.Value) -> None:
                dst = arith.addi(base, arith.muli(arith.subi(k, pc), index(cfg.mr)))
                for r in range(cfg.mr):
                    value = memref.load(self.a, [arith.addi(row0, index(r)), k]) if r < rows else zero
                    memref.store(value, self.work, [arith.addi(dst, index(r))])

            self.for_range(pc, pc_end, 1, column)

        self.for_row_tiles(ic_tile, ic_tile_end, tile)
