"""Elementwise chains on their own: y = ops(x) over a tensor seen as planes, the ops
an epilogue (`kernels.epilogue`), so a chain of elementwise ops with no anchor to
ride on (a squeeze-excitation's scale, a residual Add whose operands are both
computed elsewhere) is still one kernel and one pass over memory::

    for plane in [begin, end):  for i in 0..P step nv·L:
        v = X[plane, i + j·L]                                  # j < nv, the last masked
        v = ops(v; per-channel operand[plane mod C], tensor operands[plane, i + j·L])
        Y[plane, i + j·L] = v

A per-channel operand holds one value per plane modulo `channels` (NCHW: one per
channel, broadcast over the image), a tensor operand the output's shape. On a
channel-blocked tensor (NCHW[c], `kernels.nchwc`) a plane is a block of L channels'
pixels and its per-channel values are one vector, L channels apart in the lanes; on an
NHWC one a plane is a pixel's C channels, and the per-channel values are read at the
same offsets as the plane's vectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernels.errors import KernelError
from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_blocked, check_lanes, config_symbol, f32_memref, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.loops import for_range, for_tiles, load, offset, store
from kernels.mlir import arith, ir, memref, vector
from kernels.nchwc import Layout
from kernels.sizes import ceil_div
from kernels.target import Target


@dataclass(frozen=True)
class ElementwiseConfig:
    """`planes` planes of `plane_size` floats, `nv` vectors of `lanes` per step; a
    per-channel operand cycles through `channels` values, one per plane."""

    planes: int
    plane_size: int
    channels: int
    lanes: int
    nv: int = 1
    epilogue: ep.Epilogue = field(default=())
    layout: Layout = "nchw"  # NCHW[c]: planes are blocks of `lanes` channels (plane_size =
    # pixels·lanes); NHWC: planes are pixels, each its `channels` values (plane_size = channels)

    @property
    def blocks(self) -> int:
        """Per-channel values or vectors the planes cycle through: channels, channel
        blocks, or (NHWC) one whole plane's."""
        return {"nchw": self.channels, "nchwc": self.channels // self.lanes, "nhwc": 1}[self.layout]

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_elementwise_f32_{self.planes}x{self.plane_size}", self)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if min(self.planes, self.plane_size, self.channels, self.nv) < 1:
            raise KernelError(f"an elementwise kernel needs planes, plane size, channels and nv >= 1: {self}")
        if self.layout == "nchwc":
            check_blocked(target, self.lanes, {"the channels": self.channels})
        if self.layout == "nhwc" and self.plane_size != self.channels:
            raise KernelError(f"an NHWC elementwise kernel's planes are pixels of all {self.channels} channels, "
                                  f"not {self.plane_size} floats")  # fmt: skip
        if self.planes % self.blocks:
            raise KernelError(f"{self.planes} planes do not cycle through {self.blocks} channels or blocks")

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x[, epilogue operands], plane_begin, plane_end)``."""
        size = self.planes * self.plane_size
        params = [Param("y", Role.OUT, extent=(size,)), Param("x", Role.IN, extent=(size,))]
        for _, name, operand in ep.operand_names(self.epilogue):
            params.append(Param(name, Role.IN, extent=(self.channels if operand == "channel" else size,)))
        params += [Param("plane_begin", Role.SIZE), Param("plane_end", Role.SIZE)]
        return KernelSignature(self.symbol, tuple(params),
                               f"{ep.describe(self.epilogue)} on {self.planes} planes of {self.plane_size}, "
                               "planes [plane_begin, plane_end).")  # fmt: skip


def generate(config: ElementwiseConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _planes(config, target, args))


def _planes(cfg: ElementwiseConfig, target: Target, args: dict) -> None:
    lanes, size = cfg.lanes, cfg.plane_size
    vec = f32_vector_type(target, lanes)
    x = f32_memref(args["x"], [cfg.planes, size])
    y = f32_memref(args["y"], [cfg.planes, size])
    operands = {i: f32_memref(args[name], [cfg.channels] if kind == "channel" else [cfg.planes, size])
                for i, name, kind in ep.operand_names(cfg.epilogue)}  # fmt: skip
    step = cfg.nv * lanes

    def plane(p: ir.Value) -> None:
        channel = arith.remui(p, index(cfg.blocks))
        if cfg.layout == "nhwc":  # read with each vector of the pixel (`operand`)
            per_channel = {}
        elif cfg.layout == "nchwc":  # the block's L channels, one per lane
            first = arith.muli(channel, index(lanes))
            per_channel = {i: load(vec, m, [first]) for i, m in operands.items() if cfg.epilogue[i].operand == "channel"}
        else:
            per_channel = {i: vector.broadcast(vec, memref.load(m, [channel]))
                           for i, m in operands.items() if cfg.epilogue[i].operand == "channel"}  # fmt: skip

        def piece(i0: ir.Value, count: int) -> None:
            for j in range(ceil_div(count, lanes)):
                mask = tail_mask(target, lanes, count - j * lanes)
                at = [p, offset(i0, j * lanes)]

                def operand(i: int, at: list = at, mask=mask) -> ir.Value:
                    if i in per_channel:
                        return per_channel[i]
                    # NHWC per-channel values: at the pixel's channel offsets
                    by_channel = cfg.layout == "nhwc" and cfg.epilogue[i].operand == "channel"
                    return load(vec, operands[i], at[1:] if by_channel else at, mask)

                store(ep.apply(cfg.epilogue, load(vec, x, at, mask), operand), y, at, mask)

        for_tiles(index(0), index(ceil_div(size, step)), step, size, piece)

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(cfg.planes)), 1, plane)
