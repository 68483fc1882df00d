"""A squeeze-excitation's excitation as one kernel: each image's gates from a small
product, g = ops(s·Wᵀ) (a 1×1 convolution of one pixel, with its bias and activation),
then the block's tensor scaled by them, y = x·g over each channel's pixels::

    for group in [begin, end):  c = group·nv·L        # nv vectors of L channels
        for n < N:
            acc[j] = Σ_k s[n, k] · Wt[k, c + j·L]           # j < nv, the last masked
            g[n, c + j·L] = ops(acc[j]; per-channel operands[c + j·L])
            for the group's channels' pixels:  y[n, ·, ·] = x[n, ·, ·] · g

A thread scales the channels whose gates it computed, so no thread waits for another
and the gates never leave its caches. x and y are NCHW (each channel's plane times its
gate), NCHW[c] (each pixel's vector of a block times the block's gates) or NHWC (each
pixel's vectors of the group's channels times the gates).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_blocked, check_lanes, config_symbol, f32_memref, f32_vector_type, index
from kernels.emit import single_kernel, splat, tail_mask
from kernels.errors import KernelError
from kernels.loops import for_carry, for_range, for_tiles, load, offset, store
from kernels.mlir import arith, ir, memref, vector
from kernels.nchwc import Layout
from kernels.sizes import ceil_div
from kernels.target import Target


@dataclass(frozen=True)
class ExciteConfig:
    """`batch` images of `channels` gates from `depth` squeezed values each, scaling
    `channels` planes of `pixels` (in `layout`); `nv` vectors of `lanes` gates per group."""

    batch: int
    channels: int
    depth: int
    pixels: int
    lanes: int
    nv: int = 1
    epilogue: ep.Epilogue = field(default=())  # on the gates: a bias, an activation
    layout: Layout = "nchw"

    @property
    def width(self) -> int:
        """Channels per group."""
        return self.nv * self.lanes

    @property
    def flops(self) -> int:
        """The gates' multiply-adds and the scaling's multiplies."""
        return self.batch * self.channels * (2 * self.depth + self.pixels)

    def groups(self) -> int:
        """What threads divide: groups of `width` channels (the last may be partial)."""
        return ceil_div(self.channels, self.width)

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_excite_f32_{self.channels}x{self.depth}x{self.pixels}", self)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.batch, self.channels, self.depth, self.pixels, self.nv) < 1:
            raise KernelError(f"an excitation needs images, channels, depth, pixels and nv >= 1: {self}")
        if self.layout == "nchwc":
            check_blocked(target, self.lanes, {"the channels": self.channels})
        if any(op.operand == "output" for op in self.epilogue):
            raise KernelError(f"the gates' ops take one value per channel, not {ep.describe(self.epilogue)}")

    def weights(self, weight: np.ndarray) -> np.ndarray:
        """The convolution's weights ([C, K, 1, 1]) as the kernel reads them: Wᵀ, K×C."""
        return np.ascontiguousarray(np.asarray(weight, np.float32).reshape(self.channels, self.depth).T)

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, g, x, s, w[, epilogue operands], group_begin, group_end)``."""
        size, gates = self.batch * self.channels * self.pixels, self.batch * self.channels
        params = [Param("y", Role.OUT, extent=(size,)), Param("g", Role.OUT, extent=(gates,)),
                  Param("x", Role.IN, extent=(size,)), Param("s", Role.IN, extent=(self.batch * self.depth,)),
                  Param("w", Role.IN, extent=(self.depth * self.channels,))]  # fmt: skip
        params += [Param(name, Role.IN, extent=(self.channels,)) for _, name, _ in ep.operand_names(self.epilogue)]
        params += [Param("group_begin", Role.SIZE), Param("group_end", Role.SIZE)]
        return KernelSignature(self.symbol, tuple(params),
                               f"g = {ep.describe(self.epilogue)} of s[{self.batch}x{self.depth}] . Wt"
                               f"[{self.depth}x{self.channels}], then y = x . g over {self.pixels} pixels "
                               f"({self.layout}), channel groups [group_begin, group_end) of {self.width}.")


def generate(config: ExciteConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _groups(_Excite.of(config, target, args), args))


@dataclass(frozen=True)
class _Excite:
    """The config, the vector type and the buffers as memrefs."""

    config: ExciteConfig
    target: Target
    vec: ir.VectorType
    y: ir.Value
    g: ir.Value
    x: ir.Value
    s: ir.Value
    w: ir.Value
    operands: dict[int, ir.Value]

    @classmethod
    def of(cls, c: ExciteConfig, target: Target, args: dict) -> _Excite:
        planes = {"nchw": [c.batch * c.channels, c.pixels], "nchwc": [c.batch * c.channels // c.lanes,
                  c.pixels * c.lanes], "nhwc": [c.batch * c.pixels, c.channels]}[c.layout]  # fmt: skip
        operands = {i: f32_memref(args[name], [c.channels]) for i, name, _ in ep.operand_names(c.epilogue)}
        return cls(c, target, f32_vector_type(target, c.lanes), f32_memref(args["y"], planes),
                   f32_memref(args["g"], [c.batch, c.channels]), f32_memref(args["x"], planes),
                   f32_memref(args["s"], [c.batch, c.depth]), f32_memref(args["w"], [c.depth, c.channels]), operands)


def _groups(e: _Excite, args: dict) -> None:
    c = e.config

    def group(first: ir.Value, count: int) -> None:
        masks = [tail_mask(e.target, c.lanes, count - j * c.lanes) for j in range(ceil_div(count, c.lanes))]
        for_range(0, c.batch, 1, lambda n: _scale(e, n, first, count, _gates(e, n, first, masks), masks))

    for_tiles(index(args["group_begin"]), index(args["group_end"]), c.width, c.channels, group)


def _gates(e: _Excite, n: ir.Value, first: ir.Value, masks: list) -> list[ir.Value]:
    """Image n's gates of the channels from `first`, one vector per mask, also stored in g."""
    lanes = e.config.lanes

    def step(k: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
        squeezed = vector.broadcast(e.vec, memref.load(e.s, [n, k]))
        return [vector.fma(load(e.vec, e.w, [k, offset(first, j * lanes)], mask), squeezed, acc)
                for j, (acc, mask) in enumerate(zip(sums, masks))]  # fmt: skip

    sums = for_carry(0, e.config.depth, 1, [splat(e.vec, 0.0)] * len(masks), step)
    gates = []
    for j, (acc, mask) in enumerate(zip(sums, masks)):
        at = offset(first, j * lanes)
        gate = ep.apply(e.config.epilogue, acc, lambda i, at=at, mask=mask: load(e.vec, e.operands[i], [at], mask))
        store(gate, e.g, [n, at], mask)
        gates.append(gate)
    return gates


def _scale(e: _Excite, n: ir.Value, first: ir.Value, count: int, gates: list[ir.Value], masks: list) -> None:
    """y = x·g over image n's pixels of the `count` channels from `first`."""
    c, lanes = e.config, e.config.lanes

    def times(gate: ir.Value, at: list[ir.Value], mask: ir.Value | None = None) -> None:
        store(arith.mulf(load(e.vec, e.x, at, mask), gate), e.y, at, mask)

    if c.layout == "nchwc":  # block b's pixel p: one vector at p·L
        block = arith.addi(arith.muli(n, index(c.channels // lanes)), arith.divui(first, index(lanes)))
        for_range(0, c.pixels * lanes, lanes, lambda p: [times(g, [offset(block, j), p]) for j, g in enumerate(gates)])
    elif c.layout == "nhwc":  # pixel p's vectors of the group's channels
        row = arith.muli(n, index(c.pixels))
        for_range(0, c.pixels, 1, lambda p: [times(g, [arith.addi(row, p), offset(first, j * lanes)], m)
                                             for j, (g, m) in enumerate(zip(gates, masks))])  # fmt: skip
    else:  # each channel's plane times its gate, read back as a scalar

        def plane(ch: ir.Value) -> None:
            gate = vector.broadcast(e.vec, memref.load(e.g, [n, ch]))
            row = arith.addi(arith.muli(n, index(c.channels)), ch)
            for_tiles(index(0), index(ceil_div(c.pixels, lanes)), lanes, c.pixels,
                      lambda i, size: times(gate, [row, i], tail_mask(e.target, lanes, size)))

        for_range(first, offset(first, count), 1, plane)
