"""Layer normalization of a tensor seen as rows, in three passes over each row (a
transformer's row of hidden features is a few KiB: it stays in L1 between them), a
block of `together` rows at a time, their passes side by side::

    for rows in [begin, end) by `together` (then one at a time):
        m = Σ x / n                                   # vectors, the last masked to 0
        d = 1 / √(Σ (x − m)² / n + ε)                 # two passes: no cancellation
        Y[row] = (x − m) · d · scale + bias           # scale and bias: one value per column

Not `centred` (RMSNormalization: x over its root mean square), m is 0 and its pass
is not made.

One row's sums, horizontal adds, division and square root are a chain of dependent
steps; a short row (Swin-T's 96 features: six vectors) is nearly all chain, which the
rows of a block overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.errors import KernelError
from kernels.loops import fold_row_vectors, for_range, for_row_blocks, load, store
from kernels.mlir import arith, ir, math, vector
from kernels.target import Target


@dataclass(frozen=True)
class LayerNormConfig:
    """Normalization of `rows` rows of `length` floats, vectors of `lanes`, `together`
    rows at a time."""

    rows: int
    length: int
    lanes: int
    epsilon: float
    together: int = 1
    centred: bool = True  # the mean subtracted (LayerNormalization), or not (RMSNormalization)

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_layernorm_f32_{self.rows}x{self.length}", self)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.rows, self.length, self.together) < 1 or not self.epsilon >= 0:
            raise KernelError(f"layer normalization needs rows, length, together >= 1 and epsilon >= 0: {self}")

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x, scale, bias, row_begin, row_end)``."""
        size = self.rows * self.length
        return KernelSignature(self.symbol, (
            Param("y", Role.OUT, extent=(size,)), Param("x", Role.IN, extent=(size,)),
            Param("scale", Role.IN, extent=(self.length,)), Param("bias", Role.IN, extent=(self.length,)),
            Param("row_begin", Role.SIZE), Param("row_end", Role.SIZE)),
            f"{'layer' if self.centred else 'root-mean-square'} normalization of {self.rows} rows of {self.length}, "
            "rows [row_begin, row_end).")  # fmt: skip


def generate(config: LayerNormConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _rows(config, target, args))


def _rows(cfg: LayerNormConfig, target: Target, args: dict) -> None:
    lanes, length = cfg.lanes, cfg.length
    vec, f32 = f32_vector_type(target, lanes), ir.F32Type.get()
    x, y = (f32_memref(args[name], [cfg.rows, length]) for name in ("x", "y"))
    scale, bias = (f32_memref(args[name], [length]) for name in ("scale", "bias"))
    whole, tail = length // lanes, length % lanes
    mask = tail_mask(target, lanes, tail) if tail else None
    zero = f32_splat(target, lanes, 0.0)

    def at(v: ir.Value | int) -> ir.Value:
        return index(v * lanes) if isinstance(v, int) else arith.muli(v, index(lanes))

    def block(rows: list[ir.Value]) -> None:
        def row_sums(term) -> list[ir.Value]:
            """Σ term(x, row) over each row, the tail's lanes past the row counted as 0."""
            def add(i: int, first: ir.Value, lane_mask: ir.Value | None, total: ir.Value) -> ir.Value:
                value = term(load(vec, x, [rows[i], first], lane_mask), i)
                return arith.addf(total, value if lane_mask is None else arith.select(lane_mask, value, zero))

            totals = fold_row_vectors(target, lanes, length, len(rows), zero, add)
            count = arith.constant(f32, float(length))
            return [arith.divf(vector.reduction(f32, vector.CombiningKind.ADD, total), count) for total in totals]

        means = [vector.broadcast(vec, m) for m in row_sums(lambda v, i: v)] if cfg.centred else [zero] * len(rows)
        variances = row_sums(lambda v, i: arith.mulf(arith.subf(v, means[i]), arith.subf(v, means[i])))
        inverses = [vector.broadcast(vec, arith.divf(arith.constant(f32, 1.0), math.sqrt(
            arith.addf(variance, arith.constant(f32, cfg.epsilon))))) for variance in variances]  # fmt: skip

        def normalized(column: ir.Value, lane_mask: ir.Value | None) -> None:
            weight, shift = load(vec, scale, [column], lane_mask), load(vec, bias, [column], lane_mask)
            for r, mean, inverse in zip(rows, means, inverses):
                value = arith.mulf(arith.subf(load(vec, x, [r, column], lane_mask), mean), inverse)
                store(math.fma(value, weight, shift), y, [r, column], lane_mask)

        for_range(0, whole, 1, lambda v: normalized(at(v), None))
        if tail:
            normalized(at(whole), mask)

    for_row_blocks(index(args["row_begin"]), arith.minsi(index(args["row_end"]), index(cfg.rows)), cfg.together, block)
