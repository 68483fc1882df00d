"""Softmax along the last axis of a tensor seen as rows, in three passes over each row
(a row of a classifier's scores is a few KiB: it stays in L1 between them)::

    for row in [begin, end):
        m = max over the row                        # vectors, the last masked to −inf
        s = Σ e^(x − m);  Y[row] = e^(x − m)        # exp by the epilogue's polynomial
        Y[row] = epilogue(Y[row] · 1/s)             # ops without operands (a NaN cleanup)

Subtracting the maximum keeps every exponent <= 0, so nothing overflows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.loops import for_carry, for_range, load, maximum, store
from kernels.mlir import arith, ir, vector
from kernels.target import Target


@dataclass(frozen=True)
class SoftmaxConfig:
    """Softmax over `rows` rows of `length` floats, vectors of `lanes`."""

    rows: int
    length: int
    lanes: int
    epilogue: ep.Epilogue = field(default=())  # ops without operands on each value stored

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_softmax_f32_{self.rows}x{self.length}", self)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.rows, self.length) < 1:
            raise KernelError(f"softmax needs rows and length >= 1, got {self.rows}x{self.length}")

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, row_begin, row_end)``."""
        size = self.rows * self.length
        return KernelSignature(self.symbol, (Param("y", Role.OUT, extent=(size,)), Param("x", Role.IN, extent=(size,)),
                                             Param("row_begin", Role.SIZE), Param("row_end", Role.SIZE)),
                               f"softmax of {self.rows} rows of {self.length}, then {ep.describe(self.epilogue)}, "
                               "rows [row_begin, row_end).")  # fmt: skip


def _no_operand(i: int) -> ir.Value:
    raise KernelError(f"a softmax's epilogue takes no operand (op {i} asks for one)")


def generate(config: SoftmaxConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _rows(config, target, args))


def _rows(cfg: SoftmaxConfig, target: Target, args: dict) -> None:
    lanes, length = cfg.lanes, cfg.length
    vec = f32_vector_type(target, lanes)
    x = f32_memref(args["x"], [cfg.rows, length])
    y = f32_memref(args["y"], [cfg.rows, length])
    whole, tail = length // lanes, length % lanes
    tail_at = index(whole * lanes)
    mask = tail_mask(target, lanes, tail) if tail else None
    lowest = f32_splat(target, lanes, -math.inf)
    zero = f32_splat(target, lanes, 0.0)

    def row(r: ir.Value) -> None:
        def column(v: ir.Value) -> list[ir.Value]:
            return [r, arith.muli(v, index(lanes))]

        def tail_of(memory: ir.Value, fill: ir.Value) -> ir.Value:
            return arith.select(mask, load(vec, memory, [r, tail_at], mask), fill)

        top = for_carry(0, whole, 1, [lowest], lambda v, acc: [maximum(acc[0], load(vec, x, column(v)))])[0]
        if tail:
            top = maximum(top, tail_of(x, lowest))
        peak = vector.broadcast(vec, vector.reduction(ir.F32Type.get(), vector.CombiningKind.MAXIMUMF, top))

        def exponent(v: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            e = ep.exp(arith.subf(load(vec, x, column(v)), peak))
            store(e, y, column(v))
            return [arith.addf(acc[0], e)]

        total = for_carry(0, whole, 1, [zero], exponent)[0]
        if tail:
            e = arith.select(mask, ep.exp(arith.subf(tail_of(x, peak), peak)), zero)
            store(e, y, [r, tail_at], mask)
            total = arith.addf(total, e)
        one = arith.constant(ir.F32Type.get(), 1.0)
        inverse = vector.broadcast(vec, arith.divf(one, vector.reduction(ir.F32Type.get(), vector.CombiningKind.ADD,
                                                                         total)))  # fmt: skip
        def normalized(at: list[ir.Value], lane_mask: ir.Value | None) -> None:
            value = ep.apply(cfg.epilogue, arith.mulf(load(vec, y, at, lane_mask), inverse), _no_operand)
            store(value, y, at, lane_mask)

        for_range(0, whole, 1, lambda v: normalized(column(v), None))
        if tail:
            normalized([r, tail_at], mask)

    for_range(index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(cfg.rows)), 1, row)
