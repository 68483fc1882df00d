"""Softmax along the last axis of a tensor seen as rows, in three passes over each row
(a row of a classifier's scores is a few KiB: it stays in L1 between them), a block of
`together` rows at a time, their passes side by side (a short row's max, sum and
division are nearly all one chain of dependent steps, which the block's rows overlap)::

    for rows in [begin, end) by `together` (then one at a time):
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
from kernels.loops import fold_row_vectors, for_range, for_row_blocks, load, maximum, store
from kernels.mlir import arith, ir, vector
from kernels.target import Target


@dataclass(frozen=True)
class SoftmaxConfig:
    """Softmax over `rows` rows of `length` floats, vectors of `lanes`, `together` rows
    at a time."""

    rows: int
    length: int
    lanes: int
    epilogue: ep.Epilogue = field(default=())  # ops without operands on each value stored
    together: int = 1

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_softmax_f32_{self.rows}x{self.length}", self)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.rows, self.length, self.together) < 1:
            raise KernelError(f"softmax needs rows, length and together >= 1, got {self.rows}x{self.length}, "
                              f"{self.together}")

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
    vec, f32 = f32_vector_type(target, lanes), ir.F32Type.get()
    x = f32_memref(args["x"], [cfg.rows, length])
    y = f32_memref(args["y"], [cfg.rows, length])
    whole, tail = length // lanes, length % lanes
    mask = tail_mask(target, lanes, tail) if tail else None
    lowest = f32_splat(target, lanes, -math.inf)
    zero = f32_splat(target, lanes, 0.0)

    def read(r: ir.Value, first: ir.Value, lane_mask: ir.Value | None, fill: ir.Value) -> ir.Value:
        """x[r, first:], the lanes past the row `fill`."""
        value = load(vec, x, [r, first], lane_mask)
        return value if lane_mask is None else arith.select(lane_mask, value, fill)

    def block(rows: list[ir.Value]) -> None:
        tops = fold_row_vectors(target, lanes, length, len(rows), lowest, lambda i, first, lane_mask, top: maximum(
            top, read(rows[i], first, lane_mask, lowest)))
        peaks = [vector.broadcast(vec, vector.reduction(f32, vector.CombiningKind.MAXIMUMF, top)) for top in tops]

        def exponent(i: int, first: ir.Value, lane_mask: ir.Value | None, total: ir.Value) -> ir.Value:
            e = ep.exp(arith.subf(read(rows[i], first, lane_mask, peaks[i]), peaks[i]))
            store(e, y, [rows[i], first], lane_mask)
            return arith.addf(total, e if lane_mask is None else arith.select(lane_mask, e, zero))

        totals = fold_row_vectors(target, lanes, length, len(rows), zero, exponent)
        inverses = [vector.broadcast(vec, arith.divf(arith.constant(f32, 1.0), vector.reduction(
            f32, vector.CombiningKind.ADD, total))) for total in totals]  # fmt: skip

        def normalized(first: ir.Value, lane_mask: ir.Value | None) -> None:
            for r, inverse in zip(rows, inverses):
                value = ep.apply(cfg.epilogue, arith.mulf(load(vec, y, [r, first], lane_mask), inverse), _no_operand)
                store(value, y, [r, first], lane_mask)

        for_range(0, whole, 1, lambda v: normalized(arith.muli(v, index(lanes)), None))
        if tail:
            normalized(index(whole * lanes), mask)

    for_row_blocks(index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(cfg.rows)), cfg.together, block)
