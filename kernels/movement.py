"""Data movement as a gather along axes: Transpose, Slice, Split, Pad and nearest
Resize all take each output element from one input element, or a fill value, and the
input element is a sum of one term per output axis::

    offset(i_0, ..., i_r) = T_0[i_0] + T_1[i_1] + ... + T_r[i_r]    (< 0: the fill value)

with one int64 table per axis, computed at build time (`autoconfig.movement`). The
kernel walks the output as rows along its last axis::

    for row in [begin, end):
        o = Σ_k<r T_k[row's index along k]                       # by div/mod of the row
        run:    Y[row, :b] = Y[row, e:] = fill;  Y[row, b:e] = X[o + T_r[b] + 0..e-b]   # vectors
        gather: Y[row, j] = X[o + T_r[j]]   (fill where the sum is negative)        # scalars

where a run is a contiguous stretch [b, e) of the last axis (Slice, Split, Pad, a
Transpose that keeps the last axis) and everything else is gathered element by
element (a Transpose moving the last axis, Resize).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kernels.errors import KernelError
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import (
    KernelModule,
    check_lanes,
    config_symbol,
    f32_memref,
    f32_splat,
    f32_vector_type,
    i64_memref,
    index,
    single_kernel,
    tail_mask,
)
from kernels.loops import for_range, for_tiles, less, load, store, when_else
from kernels.mlir import arith, ir, memref
from kernels.sizes import ceil_div
from kernels.target import Target

FILL = -(1 << 50)
"""A table entry taking the fill value: any sum holding one is negative, since the
sum of every other table is a real offset (>= 0, below 2**40)."""


@dataclass(frozen=True)
class GatherConfig:
    """A gather into an output of `shape` from a source of `source` floats; the last
    axis a contiguous `run` [begin, end) (the rest of it filled), or None to gather it
    element by element; `fill` None when no element takes it."""

    shape: tuple[int, ...]
    source: int
    run: tuple[int, int] | None
    fill: float | None
    lanes: int
    nv: int = 2
    indexed: int = 0  # > 0: the first axis' offsets are ids read at run time (wrapped below 0 by this many) times its table's entries
    float_ids: bool = False  # the ids float32 (integers computed at run time), each checked here: a row whose
    # id lies outside [-indexed, indexed) takes the fill value

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_gather_f32_{'x'.join(map(str, self.shape))}", self)

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1])

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if not self.shape or min(self.shape) < 1 or self.source < 1 or self.nv < 1:
            raise KernelError(f"a gather needs a non-empty output and source: {self}")
        if self.run is not None and not 0 <= self.run[0] < self.run[1] <= self.shape[-1]:
            raise KernelError(f"run {self.run} is not inside the last axis of {self.shape}")
        if self.float_ids and not (self.indexed and self.fill is not None):
            raise KernelError("float ids are checked in the kernel: they need a table (indexed) and a fill value")

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, tables, [ids,] row_begin, row_end)``; `tables` holds the axes'
        int64 tables one after another (two floats per entry); `ids`, where indexed,
        the ids along the first axis: int64 (checked in range by the runner) or float32."""
        ids = (Param("ids", Role.IN, extent=((1 if self.float_ids else 2) * self.shape[0],)),) if self.indexed else ()
        return KernelSignature(self.symbol, (
            Param("y", Role.OUT, extent=(math.prod(self.shape),)), Param("x", Role.IN, extent=(self.source,)),
            Param("tables", Role.IN, extent=(2 * sum(self.shape),)), *ids,
            Param("row_begin", Role.SIZE), Param("row_end", Role.SIZE)),
            f"gather into {self.shape} ({'runs' if self.run else 'elements'}), rows [row_begin, row_end).")  # fmt: skip


def generate(config: GatherConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _rows(config, target, args))


def _rows(cfg: GatherConfig, target: Target, args: dict) -> None:
    n = cfg.shape[-1]
    x = f32_memref(args["x"], [cfg.source])
    y = f32_memref(args["y"], [cfg.rows, n])
    tables = i64_memref(args["tables"], [sum(cfg.shape)])
    starts = [sum(cfg.shape[:k]) for k in range(len(cfg.shape))]

    def entry(axis: int, i: ir.Value) -> ir.Value:
        value = index(memref.load(tables, [arith.addi(index(starts[axis]), i)]))
        if axis == 0 and cfg.indexed:  # an id, made non-negative, times the stride its table holds
            given, inside = _id(cfg, args["ids"], i)
            value = arith.muli(arith.select(less(given, 0), arith.addi(given, index(cfg.indexed)), given), value)
            value = value if inside is None else arith.select(inside, value, index(-1))  # -1: the fill
        return value

    def row(r: ir.Value) -> None:
        offset, rest = index(0), r
        for axis in reversed(range(len(cfg.shape) - 1)):
            offset = arith.addi(offset, entry(axis, arith.remui(rest, index(cfg.shape[axis]))))
            rest = arith.divui(rest, index(cfg.shape[axis]))
        if cfg.run is None:
            last = len(cfg.shape) - 1
            for_range(0, n, 1, lambda j: _gather_element(cfg, x, y, r, j, arith.addi(offset, entry(last, j))))
            return
        begin, end = cfg.run
        _fill(cfg, target, y, r, 0, begin)
        _fill(cfg, target, y, r, end, n)
        first = arith.addi(offset, entry(len(cfg.shape) - 1, index(begin)))
        if cfg.fill is None:
            _copy_run(cfg, target, x, y, r, first)
        else:
            when_else(less(offset, 0), lambda: _fill(cfg, target, y, r, begin, end),
                      lambda: _copy_run(cfg, target, x, y, r, first))  # fmt: skip

    for_range(index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(cfg.rows)), 1, row)


def _id(cfg: GatherConfig, ids: ir.Value, i: ir.Value) -> tuple[ir.Value, ir.Value | None]:
    """The i-th id as an index, and for float ids whether it lies in [-indexed,
    indexed) (false for NaN; an id outside reads row 0 instead)."""
    if not cfg.float_ids:
        return index(memref.load(i64_memref(ids, [cfg.shape[0]]), [i])), None
    f32 = ir.F32Type.get()
    given = memref.load(f32_memref(ids, [cfg.shape[0]]), [i])
    inside = arith.andi(arith.cmpf(arith.CmpFPredicate.OGE, given, arith.constant(f32, -float(cfg.indexed))),
                        arith.cmpf(arith.CmpFPredicate.OLT, given, arith.constant(f32, float(cfg.indexed))))
    safe = arith.select(inside, given, arith.constant(f32, 0.0))
    return index(arith.fptosi(ir.IntegerType.get_signless(64), safe)), inside


def _gather_element(cfg: GatherConfig, x: ir.Value, y: ir.Value, r: ir.Value, j: ir.Value, at: ir.Value) -> None:
    """Y[r, j] = X[at], or the fill value where `at` is negative."""
    if cfg.fill is None:
        memref.store(memref.load(x, [at]), y, [r, j])
        return
    filled = less(at, 0)
    value = memref.load(x, [arith.select(filled, index(0), at)])
    memref.store(arith.select(filled, arith.constant(ir.F32Type.get(), cfg.fill), value), y, [r, j])


def _copy_run(cfg: GatherConfig, target: Target, x: ir.Value, y: ir.Value, r: ir.Value, first: ir.Value) -> None:
    """Y[r, begin:end] = X[first : first + end - begin], `nv` vectors per step."""
    begin, end = cfg.run
    vec = f32_vector_type(target, cfg.lanes)

    def piece(i0: ir.Value, count: int) -> None:
        for j in range(ceil_div(count, cfg.lanes)):
            mask = tail_mask(target, cfg.lanes, count - j * cfg.lanes)
            at = arith.addi(i0, index(j * cfg.lanes))
            store(load(vec, x, [arith.addi(first, at)], mask), y, [r, arith.addi(at, index(begin))], mask)

    step = cfg.nv * cfg.lanes
    for_tiles(index(0), index(ceil_div(end - begin, step)), step, end - begin, piece)


def _fill(cfg: GatherConfig, target: Target, y: ir.Value, r: ir.Value, begin: int, end: int) -> None:
    """Y[r, begin:end] = the fill value (nothing when the stretch is empty; a config
    without a fill has a run over the whole axis, so it fills nothing)."""
    if end <= begin:
        return
    value = f32_splat(target, cfg.lanes, cfg.fill)

    def piece(i0: ir.Value, count: int) -> None:
        store(value, y, [r, arith.addi(i0, index(begin))], tail_mask(target, cfg.lanes, count))

    for_tiles(index(0), index(ceil_div(end - begin, cfg.lanes)), cfg.lanes, end - begin, piece)
