"""Elementwise fused multiply-add over f32 arrays: ``out[i] = a[i] * b[i] + c[i]``.

The first kernel family; it proves the path from generated MLIR to code running on
every target. The loop nest::

    for i in 0 .. n - n % step, step:          # full vectors
        out[i:i+step] = fma(a[i:i+step], b[i:i+step], c[i:i+step])
    tail = n % step                             # 0 .. step-1 elements, one masked vector
    out[n-tail:n] = fma(masked a, masked b, masked c)

where step is the config's lane count (times vscale/planned-vscale on RVV, so the
same code is correct at any VLEN).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.abi import KernelSignature, Param, Role
from kernels.emit import (
    KernelModule,
    check_lanes,
    f32_memref,
    f32_vector_type,
    index,
    kernel_body,
    lane_step,
    mask_type,
    new_module,
    verify,
)
from kernels.loops import for_range, load, prefix_mask, store
from kernels.mlir import arith, ir, vector
from kernels.target import Target

@dataclass(frozen=True)
class FmaConfig:
    """Vector width of the elementwise FMA kernel, in f32 lanes."""

    lanes: int

    @classmethod
    def widest(cls, target: Target) -> FmaConfig:
        """One full vector register per step: the natural width on `target`."""
        return cls(lanes=target.f32_lanes)

    @property
    def symbol(self) -> str:
        return f"ac_fma_f32_l{self.lanes}"


def signature(config: FmaConfig) -> KernelSignature:
    """``SYMBOL(out, a, b, c, n)``."""
    return KernelSignature(
        symbol=config.symbol,
        params=(
            Param("out", Role.OUT, extent=("n",)),
            Param("a", Role.IN, extent=("n",)),
            Param("b", Role.IN, extent=("n",)),
            Param("c", Role.IN, extent=("n",)),
            Param("n", Role.SIZE),
        ),
        doc="out[i] = a[i] * b[i] + c[i] for 0 <= i < n; out may alias none of a, b, c.",
    )


def generate(config: FmaConfig, target: Target) -> KernelModule:
    """The FMA kernel for `target` with the C ABI of `signature(config)`."""
    check_lanes(target, config.lanes)
    sig = signature(config)
    with new_module() as module:
        vec = f32_vector_type(target, config.lanes)
        with kernel_body(module, sig) as args:
            n = args["n"]
            out, a, b, c = (f32_memref(args[name], [n]) for name in ("out", "a", "b", "c"))
            count = index(n)
            step = lane_step(target, config.lanes)
            full = arith.subi(count, arith.remui(count, step))

            def fma_at(i: ir.Value, mask: ir.Value | None = None) -> None:
                store(vector.fma(*(load(vec, src, [i], mask) for src in (a, b, c))), out, [i], mask)

            for_range(0, full, step, fma_at)
            fma_at(full, prefix_mask(mask_type(target, config.lanes), arith.subi(count, full)))
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)
