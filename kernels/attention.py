"""Attention of one head in one kernel: each block of query rows computes its scores
against the keys, the scores' epilogue (a mask, a bias), their softmax and their
product with V, holding only the block's score rows in the part's scratch — no
[queries, keys] tensor is written or read back. All keys at once::

    Kᵀ → work[0 : width·keys']                       # once per part, keys' = keys padded
    for each block of `tiles` x `rows` query rows in [row_begin, row_end):
        S = Q[block] · Kᵀ                              # per tile of keys, each register tile
        S = epilogue(S);  m = max of each row          # the masked lanes past `keys`: −inf
        S = e^(S − m);    s = Σ of each row
        S = cleanup(S / s)                             # ops without operands (a NaN cleanup)
        O[block] = S · V                               # per tile of V's columns, each register tile
                                                       # (without a cleanup: (S · V) / s instead)

or, with a `key_block`, the keys streamed in chunks through an online softmax (score
rows of one chunk; the block's output rows, running maxima and sums in scratch)::

        for each chunk of keys [k0, k0 + key_block):
            S = epilogue(Q[block] · Kᵀ[:, chunk]);  m' = max(m, max of each row of S)
            S = e^(S − m');  a = e^(m − m');  s = s·a + Σ of each row;  m = m'
            U[block] = U[block]·a + S · V[chunk]       # the last chunk writes O = U / s

The softmax (or its online step) takes the block's score rows `together` at a time,
their passes side by side: a short row's max, sum and division are nearly all one
chain of dependent steps, which the other rows' overlap. A tile of Kᵀ or V is read
from L1 by every register tile of the block. The rows past the last full block run one
register tile at a time, then a tile of the queries' remainder rows (all the rows left
where a part runs every query), then one row at a time (a row alone waits on its few
accumulators' FMA latency). Q, K, V and O are strided matrices (one head of a
[tokens, heads x width] tensor, read and written in place).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.errors import KernelError
from kernels.gemm import micro_kernel
from kernels.loops import fold_row_vectors, for_range, for_row_blocks, load, maximum, offset, store, transpose_square
from kernels.mlir import arith, ir, memref, vector
from kernels.target import Target


ONLINE_STATES = ("max", "sum", "scale")
"""Per query row of a streamed block: the running max, the running sum of exponents,
and the factor the latest chunk rescaled both by."""

WHOLE, FIRST, MIDDLE, LAST = "whole", "first", "middle", "last"
"""Which keys a chunk of scores covers: all of them, or the first, a middle or the last
chunk of a streamed softmax."""


@dataclass(frozen=True)
class AttentionConfig:
    """softmax(epilogue(Q·Kᵀ))·V for `queries` x `width` Q, `keys` x `width` K (or its
    transpose) and `keys` x `v_width` V; `strides`: the row strides of Q, K (as given),
    V and O (0: dense); register tiles of `rows` query rows x `vectors` vectors."""

    queries: int
    keys: int
    width: int
    v_width: int
    lanes: int
    rows: int = 4
    vectors: int = 3
    tiles: int = 4  # register tiles of rows per block, which share each tile of Kᵀ and V read
    strides: tuple[int, int, int, int] = (0, 0, 0, 0)
    epilogue: ep.Epilogue = field(default=())  # on the scores; operands [queries, keys] or one per key
    cleanup: ep.Epilogue = field(default=())  # ops without operands on the probabilities
    k_transposed: bool = False  # K given as Kᵀ, width x keys
    key_block: int = 0  # keys per chunk of the online softmax (whole register tiles); 0: all keys at once
    together: int = 1  # score rows whose softmax runs side by side

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_attention_f32_{self.queries}x{self.keys}x{self.width}", self)

    @property
    def padded_keys(self) -> int:
        """Keys rounded up to whole register tiles: the score rows' and Kᵀ's length."""
        step = self.lanes * self.vectors
        return -(-self.keys // step) * step

    @property
    def span(self) -> int:
        """A score row's length in scratch: the keys padded, or one chunk's."""
        return self.key_block or self.padded_keys

    @property
    def block_rows(self) -> int:
        return self.rows * self.tiles

    @property
    def chunks(self) -> int:
        return -(-self.keys // self.span)

    def workspace(self) -> int:
        """Floats of one part's scratch: Kᵀ, the block's score rows, then their sums'
        inverses; or, streaming, the block's output rows and their running states."""
        if not self.key_block:
            return (self.width + self.block_rows) * self.padded_keys + self.block_rows
        return self.width * self.padded_keys + self.block_rows * (self.span + self.v_span + len(ONLINE_STATES))

    @property
    def v_span(self) -> int:
        """An output row's length in scratch: V's columns padded to whole vectors."""
        return -(-self.v_width // self.lanes) * self.lanes

    def row_lengths(self) -> tuple[int, int, int, int]:
        """The rows' lengths of Q, K (as given), V and O."""
        return self.width, self.keys if self.k_transposed else self.width, self.v_width, self.v_width

    def row_stride(self, matrix: int) -> int:
        """The row stride of Q, K, V or O (0..3), dense where not given."""
        return self.strides[matrix] or self.row_lengths()[matrix]

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.queries, self.keys, self.width, self.v_width, self.rows, self.vectors, self.tiles,
               self.together) < 1:
            raise KernelError(f"attention needs every size >= 1, got {self}")
        if any(stride and stride < length for stride, length in zip(self.strides, self.row_lengths())):
            raise KernelError(f"attention row strides {self.strides} are shorter than the rows")
        if any(op.operand for op in self.cleanup):
            raise KernelError("an attention's cleanup takes no operand")
        if self.key_block and (self.key_block % (self.lanes * self.vectors) or self.key_block >= self.keys):
            raise KernelError(f"attention key blocks of {self.key_block} are not whole register tiles of fewer "
                              f"than the {self.keys} keys")
        if self.key_block and self.cleanup:
            raise KernelError("a streamed attention takes no cleanup (its probabilities are never whole)")

    def signature(self) -> KernelSignature:
        """``SYMBOL(o, q, k, v[, epilogue operands], work, row_begin, row_end)``."""

        def extent(rows: int, matrix: int, length: int) -> tuple[int]:
            return ((rows - 1) * self.row_stride(matrix) + length,)

        key_rows = self.width if self.k_transposed else self.keys
        params = [Param("o", Role.OUT, extent=extent(self.queries, 3, self.v_width)),
                  Param("q", Role.IN, extent=extent(self.queries, 0, self.width)),
                  Param("k", Role.IN, extent=extent(key_rows, 1, self.row_lengths()[1])),
                  Param("v", Role.IN, extent=extent(self.keys, 2, self.v_width))]  # fmt: skip
        params += [Param(name, Role.IN, extent=(self.keys if kind == "channel" else self.queries * self.keys,))
                   for _, name, kind in ep.operand_names(self.epilogue)]  # fmt: skip
        params += [Param("work", Role.OUT, extent=(self.workspace(),)), Param("row_begin", Role.SIZE),
                   Param("row_end", Role.SIZE)]  # fmt: skip
        return KernelSignature(self.symbol, tuple(params),
                               f"O[{self.queries}x{self.v_width}] = softmax({ep.describe(self.epilogue)}"
                               f"(Q[{self.queries}x{self.width}] . K[{self.keys}x{self.width}]^T)), then "
                               f"{ep.describe(self.cleanup)}, . V[{self.keys}x{self.v_width}] on query rows "
                               "[row_begin, row_end).")  # fmt: skip


def generate(config: AttentionConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _Head.of(config, target, args).run())


@dataclass(frozen=True)
class _Head:
    """The loop nest's memrefs and vector type."""

    cfg: AttentionConfig
    target: Target
    vec: ir.VectorType
    q: ir.Value
    k: ir.Value
    v: ir.Value
    o: ir.Value
    work: ir.Value  # Kᵀ (width x padded keys), then the block's score rows (rows x padded keys)
    operands: dict[int, ir.Value]  # epilogue op position -> its matrix or row
    begin: ir.Value
    end: ir.Value

    @classmethod
    def of(cls, cfg: AttentionConfig, target: Target, args: dict) -> _Head:
        w = cfg.width
        operands = {i: f32_memref(args[name], [cfg.keys] if kind == "channel" else [cfg.queries, cfg.keys])
                    for i, name, kind in ep.operand_names(cfg.epilogue)}  # fmt: skip
        return cls(cfg, target, f32_vector_type(target, cfg.lanes),
                   f32_memref(args["q"], [cfg.queries, w], cfg.strides[0]),
                   f32_memref(args["k"], [w, cfg.keys] if cfg.k_transposed else [cfg.keys, w], cfg.strides[1]),
                   f32_memref(args["v"], [cfg.keys, cfg.v_width], cfg.strides[2]),
                   f32_memref(args["o"], [cfg.queries, cfg.v_width], cfg.strides[3]),
                   f32_memref(args["work"], [cfg.workspace()]), operands, index(args["row_begin"]),
                   arith.minsi(index(args["row_end"]), index(cfg.queries)))  # fmt: skip

    def run(self) -> None:
        """Kᵀ packed; then blocks of `tiles` register tiles of query rows, one tile at a
        time for the rows left, tiles of the queries' remainder rows, and one row at a
        time for the rest."""
        cfg = self.cfg
        self.pack_keys()
        start = self.begin
        remainder = [(cfg.queries % cfg.rows,)] if cfg.queries % cfg.rows > 1 else []
        for heights in dict.fromkeys(((cfg.rows,) * cfg.tiles, (cfg.rows,), *remainder, (1,))):
            size = sum(heights)
            count = arith.divsi(arith.subi(self.end, start), index(size))
            first = start
            for_range(0, count, 1, lambda b: self.block(arith.addi(first, arith.muli(b, index(size))), heights))
            start = arith.addi(start, arith.muli(count, index(size)))

    def at_t(self, c: ir.Value, key: ir.Value) -> list[ir.Value]:
        """Kᵀ[c, key] in the flat scratch."""
        return [arith.addi(arith.muli(c, index(self.cfg.padded_keys)), key)]

    def at_s(self, r: int | ir.Value, key: ir.Value) -> list[ir.Value]:
        """Score row r's [key] (from its chunk's first) in the flat scratch, after Kᵀ."""
        return self.after_keys(r, key, 0, self.cfg.span)

    def at_u(self, r: int | ir.Value, column: ir.Value) -> list[ir.Value]:
        """A streamed block's output row r's [column], after the score rows."""
        return self.after_keys(r, column, self.cfg.block_rows * self.cfg.span, self.cfg.v_span)

    def at_state(self, name: str, r: ir.Value) -> list[ir.Value]:
        """Row r's sum's inverse (all keys at once), or its running state `name`."""
        cfg = self.cfg
        first = cfg.block_rows * (cfg.span + (cfg.v_span if cfg.key_block else 0))
        states = ONLINE_STATES if cfg.key_block else ("inverse",)
        return self.after_keys(0, r, first + states.index(name) * cfg.block_rows, 1)

    def after_keys(self, r: int | ir.Value, at: ir.Value, start: int, length: int) -> list[ir.Value]:
        """[r, at] of the rows of `length` floats from `start` on, after Kᵀ."""
        start += self.cfg.width * self.cfg.padded_keys
        if isinstance(r, int):
            return [offset(at, start + r * length)]
        return [arith.addi(at, offset(arith.muli(r, index(length)), start))]

    def pack_keys(self) -> None:
        """Kᵀ[c, j] = K[j, c] (a copy where K is given transposed): squares of L keys by L
        columns loaded as L vectors and transposed in registers where the vectors are of
        fixed length, the rest one element at a time; the padding keys are zero (their
        scores are never read)."""
        cfg, lanes = self.cfg, self.cfg.lanes
        squared = 0 if cfg.k_transposed or self.target.scalable else lanes
        keys_end, width_end = (cfg.keys // lanes * lanes, cfg.width // lanes * lanes) if squared else (0, 0)
        if keys_end and width_end:
            for_range(0, keys_end, lanes, lambda j: for_range(0, width_end, lanes, lambda c: self.square(j, c)))
        self.copy_keys(0, keys_end, width_end, cfg.width)
        self.copy_keys(keys_end, cfg.keys, 0, cfg.width)
        zero = arith.constant(ir.F32Type.get(), 0.0)
        if cfg.padded_keys > cfg.keys:
            for_range(0, cfg.width, 1, lambda c: for_range(cfg.keys, cfg.padded_keys, 1, lambda j: memref.store(
                zero, self.work, self.at_t(c, j))))  # fmt: skip

    def square(self, j: ir.Value, c: ir.Value) -> None:
        """Kᵀ[c : c+L, j : j+L] from K[j : j+L, c : c+L], transposed in registers."""
        lanes = self.cfg.lanes
        rows = transpose_square([load(self.vec, self.k, [offset(j, i), c]) for i in range(lanes)])
        for i, row in enumerate(rows):
            store(row, self.work, self.at_t(offset(c, i), j))

    def copy_keys(self, keys_begin: int, keys_end: int, width_begin: int, width_end: int) -> None:
        """Kᵀ[c, j] for keys [keys_begin, keys_end) and columns [width_begin, width_end),
        one element at a time."""
        if keys_begin >= keys_end or width_begin >= width_end:
            return
        transposed = self.cfg.k_transposed

        def copy(j: ir.Value, c: ir.Value) -> None:
            memref.store(memref.load(self.k, [c, j] if transposed else [j, c]), self.work, self.at_t(c, j))

        for_range(keys_begin, keys_end, 1, lambda j: for_range(width_begin, width_end, 1, lambda c: copy(j, c)))

    def block(self, row0: ir.Value, heights: tuple[int, ...]) -> None:
        """Scores, softmax and output of query rows [row0, row0 + Σ heights), in register
        tiles of those heights: all keys at once, or chunk by chunk."""
        cfg = self.cfg
        if not cfg.key_block:
            self.chunk(row0, heights, index(0), cfg.keys, WHOLE)
            return
        last = (cfg.chunks - 1) * cfg.key_block
        self.chunk(row0, heights, index(0), cfg.key_block, FIRST)
        for_range(1, cfg.chunks - 1, 1, lambda c: self.chunk(row0, heights, arith.muli(c, index(cfg.key_block)),
                                                             cfg.key_block, MIDDLE))  # fmt: skip
        self.chunk(row0, heights, index(last), cfg.keys - last, LAST)

    def chunk(self, row0: ir.Value, heights: tuple[int, ...], base: ir.Value, count: int, stage: str) -> None:
        """The block's scores against keys [base, base + count), their softmax (or its
        online step), and their product with those keys' rows of V."""
        self.scores_of(row0, heights, base, count)

        def rows(rs: list[ir.Value]) -> None:
            queries = [arith.addi(row0, r) for r in rs]
            if stage == WHOLE:
                self.softmax_rows(queries, rs)
            else:
                self.online_steps(queries, rs, base, count, stage)

        for_row_blocks(index(0), index(sum(heights)), self.cfg.together, rows)
        self.output_of(row0, heights, base, count, stage)

    def scores_of(self, row0: ir.Value, heights: tuple[int, ...], base: ir.Value, count: int) -> None:
        """S = Q·Kᵀ over keys [base, base + count): per tile of keys (its Kᵀ stays in L1),
        every register tile of rows."""
        cfg, lanes = self.cfg, self.cfg.lanes
        step = lanes * cfg.vectors

        def tile(t: ir.Value) -> None:
            key0 = arith.muli(t, index(step))
            first = arith.addi(base, key0)
            for top, rows in _tops(heights):
                acc = micro_kernel(self.vec, rows, cfg.vectors, index(0), index(cfg.width), 1,
                                   lambda r, c, _t: memref.load(self.q, [offset(row0, top + r), c]),
                                   lambda v, c, _t: load(self.vec, self.work, self.at_t(c, offset(first, v * lanes))))
                for r in range(rows):
                    for v in range(cfg.vectors):
                        store(acc[r * cfg.vectors + v], self.work, self.at_s(top + r, offset(key0, v * lanes)))

        for_range(0, -(-count // step), 1, tile)

    def softmax_rows(self, rows: list[ir.Value], rs: list[ir.Value]) -> None:
        """Score rows rs (queries `rows`) over all keys, side by side: the epilogue and
        each row's max, the exponents and their sum; then the probabilities and their
        cleanup, or, without a cleanup, each sum's inverse kept for the output to scale by."""
        cfg, f32 = self.cfg, ir.F32Type.get()
        peaks = [vector.broadcast(self.vec, peak) for peak in self.row_maxima(rows, rs, index(0), cfg.keys)]
        totals = self.exponents(rs, peaks, cfg.keys)
        inverses = [arith.divf(arith.constant(f32, 1.0), vector.reduction(f32, vector.CombiningKind.ADD, total))
                    for total in totals]  # fmt: skip
        if not cfg.cleanup:
            for r, inverse in zip(rs, inverses):
                memref.store(inverse, self.work, self.at_state("inverse", r))
            return
        scales = [vector.broadcast(self.vec, inverse) for inverse in inverses]

        def normalized(key: ir.Value) -> None:
            for r, scale in zip(rs, scales):
                value = arith.mulf(load(self.vec, self.work, self.at_s(r, key)), scale)
                store(ep.apply(cfg.cleanup, value, _no_operand), self.work, self.at_s(r, key))

        for_range(0, -(-cfg.keys // cfg.lanes), 1, lambda j: normalized(self.key(j)))

    def online_steps(self, rows: list[ir.Value], rs: list[ir.Value], base: ir.Value, count: int, stage: str) -> None:
        """Score rows rs' chunk (keys [base, base + count)), side by side: the epilogue,
        each running max m' (the exponents taken from 0 while it is −inf, so a row masked
        so far adds nothing), e^(s − m') and the running sum rescaled by a = e^(m − m')."""
        f32 = ir.F32Type.get()
        peaks = self.row_maxima(rows, rs, base, count)
        olds = [memref.load(self.work, self.at_state("max", r)) for r in rs] if stage != FIRST else []
        peaks = [maximum(peak, old) for peak, old in zip(peaks, olds)] if olds else peaks
        lowest, zero = arith.constant(f32, -math.inf), arith.constant(f32, 0.0)
        starts = [arith.select(arith.cmpf(arith.CmpFPredicate.OEQ, peak, lowest), zero, peak) for peak in peaks]
        totals = self.exponents(rs, [vector.broadcast(self.vec, start) for start in starts], count)
        for i, (r, peak, start) in enumerate(zip(rs, peaks, starts)):
            total = vector.reduction(f32, vector.CombiningKind.ADD, totals[i])
            if olds:
                scale = ep.exp(arith.subf(olds[i], start))
                total = arith.addf(arith.mulf(memref.load(self.work, self.at_state("sum", r)), scale), total)
                memref.store(scale, self.work, self.at_state("scale", r))
            memref.store(peak, self.work, self.at_state("max", r))
            memref.store(total, self.work, self.at_state("sum", r))

    def row_maxima(self, rows: list[ir.Value], rs: list[ir.Value], base: ir.Value, count: int) -> list[ir.Value]:
        """The epilogue applied to score rows rs' keys [base, base + count) (stored back
        where there is one), and each row's max (the lanes past them −inf)."""
        cfg = self.cfg
        lowest = f32_splat(self.target, cfg.lanes, -math.inf)

        def scored(i: int, key: ir.Value, lane_mask: ir.Value | None, top: ir.Value) -> ir.Value:
            value = load(self.vec, self.work, self.at_s(rs[i], key))
            if cfg.epilogue:
                at = arith.addi(base, key)
                value = ep.apply(cfg.epilogue, value, lambda op: self.operand(op, rows[i], at, lane_mask))
                store(value, self.work, self.at_s(rs[i], key))
            return maximum(top, value if lane_mask is None else arith.select(lane_mask, value, lowest))

        tops = fold_row_vectors(self.target, cfg.lanes, count, len(rs), lowest, scored)
        return [vector.reduction(ir.F32Type.get(), vector.CombiningKind.MAXIMUMF, top) for top in tops]

    def exponents(self, rs: list[ir.Value], peaks: list[ir.Value], count: int) -> list[ir.Value]:
        """Score rows rs' first `count` replaced by e^(s − peak); per row, the vector of
        their partial sums."""
        zero = f32_splat(self.target, self.cfg.lanes, 0.0)

        def exponent(i: int, key: ir.Value, lane_mask: ir.Value | None, total: ir.Value) -> ir.Value:
            e = ep.exp(arith.subf(load(self.vec, self.work, self.at_s(rs[i], key)), peaks[i]))
            store(e, self.work, self.at_s(rs[i], key))
            return arith.addf(total, e if lane_mask is None else arith.select(lane_mask, e, zero))

        return fold_row_vectors(self.target, self.cfg.lanes, count, len(rs), zero, exponent)

    def key(self, j: ir.Value) -> ir.Value:
        """The first key of vector j."""
        return arith.muli(j, index(self.cfg.lanes))

    def operand(self, i: int, row: ir.Value, key: ir.Value, lane_mask: ir.Value | None) -> ir.Value:
        """Epilogue op i's operand at (row, key): its matrix's, or its row's (per key)."""
        tensor = self.operands[i]
        at = [key] if self.cfg.epilogue[i].operand == "channel" else [row, key]
        return load(self.vec, tensor, at, lane_mask)

    def output_of(self, row0: ir.Value, heights: tuple[int, ...], base: ir.Value, count: int, stage: str) -> None:
        """S·V over keys [base, base + count): per tile of V's columns (`vectors`
        vectors), every register tile of rows; each row written (`write_row`)."""
        cfg, lanes = self.cfg, self.cfg.lanes
        for col0 in range(0, cfg.v_width, lanes * cfg.vectors):
            columns = min(lanes * cfg.vectors, cfg.v_width - col0)
            vectors = -(-columns // lanes)
            masks = [tail_mask(self.target, lanes, columns - v * lanes) for v in range(vectors)]
            for top, rows in _tops(heights):
                acc = micro_kernel(self.vec, rows, vectors, index(0), index(count), 1,
                                   lambda r, j, _t: memref.load(self.work, self.at_s(top + r, j)),
                                   lambda v, j, _t: load(self.vec, self.v, [arith.addi(base, j),
                                                                            index(col0 + v * lanes)], masks[v]))
                for r in range(rows):
                    self.write_row(acc[r * vectors:(r + 1) * vectors], offset(row0, top + r), index(top + r), col0,
                                   masks, stage)  # fmt: skip

    def write_row(self, values: list[ir.Value], row: ir.Value, r: ir.Value, col0: int, masks: list[ir.Value | None],
                  stage: str) -> None:  # fmt: skip
        """Row r's products with V from column col0 on: scaled by the row's sum's inverse
        (unless a cleanup did) into O; or, streaming, kept (the first chunk), added to
        the kept row rescaled (the middle ones), and divided by the sum into O (the last:
        NaN where every key was −inf, as their softmax is)."""
        f32, kept = ir.F32Type.get(), stage in (FIRST, MIDDLE)
        scale = None
        if stage in (MIDDLE, LAST):
            rescale = vector.broadcast(self.vec, memref.load(self.work, self.at_state("scale", r)))
            values = [vector.fma(load(self.vec, self.work, self.at_u(r, index(col0 + v * self.cfg.lanes)), masks[v]),
                               rescale, value) for v, value in enumerate(values)]  # fmt: skip
        if stage == WHOLE and not self.cfg.cleanup:
            scale = memref.load(self.work, self.at_state("inverse", r))
        elif stage == LAST:
            masked = arith.cmpf(arith.CmpFPredicate.OEQ, memref.load(self.work, self.at_state("max", r)),
                                arith.constant(f32, -math.inf))  # fmt: skip
            inverse = arith.divf(arith.constant(f32, 1.0), memref.load(self.work, self.at_state("sum", r)))
            scale = arith.select(masked, arith.constant(f32, math.nan), inverse)
        for v, value in enumerate(values):
            value = value if scale is None else arith.mulf(value, vector.broadcast(self.vec, scale))
            column = index(col0 + v * self.cfg.lanes)
            store(value, self.work if kept else self.o, self.at_u(r, column) if kept else [row, column], masks[v])


def _tops(heights: tuple[int, ...]) -> list[tuple[int, int]]:
    """Each register tile's first row in its block, and its height."""
    return [(sum(heights[:i]), h) for i, h in enumerate(heights)]


def _no_operand(i: int) -> ir.Value:
    raise KernelError(f"an attention's cleanup takes no operand (op {i} asks for one)")
