"""f32 2-D pooling in NCHW: MaxPool and AveragePool (ONNX's attributes: pads, strides,
dilations, ceil_mode, count_include_pad) and GlobalAveragePool.

Windowed pools read each plane transformed (`kernels.layout`: bordered with −inf for
a max, 0 for an average, split by stride phase) into a thread's scratch plane just
before reading it, so every tap of `nv` vectors of output pixels along a row is a
whole-vector load at a constant offset, from a plane that stays in cache (a transform
of the whole input first, written out and read back, cost several times the pool's
own streaming)::

    for plane in [begin, end):
      Xt = the plane, transformed                 # kernels.layout.copy_plane
      for oh:  for ow0 in 0..OW step nv·L:
        acc[v] = max/sum over taps of Xt[tap + oh·Wq + ow0 + v·L]   # the taps dealt
                                                        # round-robin to independent chains
        average: acc[v] *= scale[oh, ow0 + v·L]       # 1/window count, per position
        Y[plane, oh, ow0 + v·L] = acc[v]              # the row's last vector masked

The average's divisor depends on the position where the window crosses the padding
(count_include_pad = 0) or the ceil-mode overhang past it; the reciprocals are a
table made with the layer (`average_scale`), read as vectors.

A windowed pool of a channel-blocked input (NCHW[c] or NHWC, `PoolConfig.layout`)
writes the same layout, each vector L channels of one pixel, so no transform is
needed: per output row, tiles of `nv` pixels over the taps inside the image (the
rows found at run time, the border columns apart; `kernels.nchwc.Columns`).

GlobalAveragePool sums each plane in `unroll` vector partial sums (the last vector
masked), then across lanes, times 1/(H·W); a global max keeps maxima the same way.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from kernels.errors import KernelError
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_blocked, check_lanes, f32_memref, f32_splat, f32_vector_type, index, kernel_body
from kernels.emit import config_symbol, mask_type, new_module, tail_mask, verify
from kernels.layout import PhaseSplit, copy_plane, source_memref
from kernels.loops import for_carry, for_range, for_tiles, for_unrolled, load, maximum, offset, prefix_mask, store
from kernels.mlir import arith, ir, memref, vector
from kernels.nchwc import Blocks, Columns, Layout, layout_name, pixel_tiles, row_taps, zero_pixels
from kernels.sizes import ceil_div
from kernels.target import Target

PoolKind = Literal["max", "average", "global_average", "global_max"]
POOL_KINDS: tuple[PoolKind, ...] = ("max", "average", "global_average", "global_max")
GLOBAL_KINDS = ("global_average", "global_max")
"""Pools over all of each plane: a sum scaled by its count, or a maximum (NaN from any
element), kept in vectors and combined across lanes at the end."""


@dataclass(frozen=True)
class PoolShape:
    """Y[N, C, OH, OW] = pool(X[N, C, H, W]); pads are (top, left, bottom, right)."""

    batch: int
    channels: int
    height: int
    width: int
    kind: PoolKind
    kernel: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = False

    def __post_init__(self) -> None:
        if self.kind not in POOL_KINDS:
            raise KernelError(f"unknown pooling {self.kind!r}: {', '.join(POOL_KINDS)}")
        for name, value in {"batch": self.batch, "channels": self.channels, "height": self.height,
                            "width": self.width, "kernel": min(self.kernel), "strides": min(self.strides),
                            "dilations": min(self.dilations)}.items():  # fmt: skip
            if value < 1:
                raise KernelError(f"pooling {name} must be >= 1, got {value}")
        if min(self.pads) < 0:
            raise KernelError(f"pooling pads must be >= 0, got {self.pads}")
        for axis in range(2):
            if max(self.pads[axis], self.pads[axis + 2]) >= self.span(axis):
                raise KernelError(f"pads {self.pads} must be smaller than the window "
                                      f"{self.kernel[0]}x{self.kernel[1]}")  # fmt: skip
        if self.out_height < 1 or self.out_width < 1:
            raise KernelError(f"a {self.kernel[0]}x{self.kernel[1]} window does not fit the padded "
                                  f"{self.height}x{self.width} input")  # fmt: skip

    @property
    def windowed(self) -> bool:
        return self.kind not in GLOBAL_KINDS

    def span(self, axis: int) -> int:
        return (self.kernel[axis] - 1) * self.dilations[axis] + 1

    def out_size(self, axis: int) -> int:
        """Outputs along axis 0 (rows) or 1 (columns), ceil mode included."""
        if not self.windowed:
            return 1
        size = (self.height, self.width)[axis] + self.pads[axis] + self.pads[axis + 2] - self.span(axis)
        out = (ceil_div(size, self.strides[axis]) if self.ceil_mode else size // self.strides[axis]) + 1
        if self.ceil_mode and (out - 1) * self.strides[axis] >= (self.height, self.width)[axis] + self.pads[axis]:
            out -= 1  # the last window would start in the end padding: ONNX Runtime and PyTorch drop it
        return out

    @property
    def out_height(self) -> int:
        return self.out_size(0)

    @property
    def out_width(self) -> int:
        return self.out_size(1)

    @property
    def planes(self) -> int:
        return self.batch * self.channels

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.height, self.width)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.channels, self.out_height, self.out_width)

    def overhang(self, axis: int) -> int:
        """Padding added past the end pad for the ceil-mode windows (0 without ceil_mode)."""
        extent = (self.height, self.width)[axis] + self.pads[axis] + self.pads[axis + 2]
        return max(0, (self.out_size(axis) - 1) * self.strides[axis] + self.span(axis) - extent)

    def describe(self) -> str:
        if not self.windowed:
            return f"GlobalAveragePool {'x'.join(map(str, self.input_shape))}"
        extras = (" ceil" if self.ceil_mode else "") + (" count_pad" if self.count_include_pad else "")
        return (f"{self.kind.capitalize()}Pool {'x'.join(map(str, self.input_shape))} k{self.kernel[0]}x"
                f"{self.kernel[1]} s{self.strides[0]}x{self.strides[1]} p{','.join(map(str, self.pads))}"
                f"{extras}")  # fmt: skip


@dataclass(frozen=True)
class PoolConfig:
    """`nv` vectors of `lanes` output pixels per step (global: `nv` partial sums;
    windowed on blocks: `nv` pixels, each a vector of `lanes` channels)."""

    shape: PoolShape
    lanes: int
    nv: int = 1
    chains: int = 1  # windowed NCHW: independent accumulators per step at least (its vectors,
    # each split into chains over the taps), so a max or add need not wait for the last
    # (on blocks, the nv pixels are the independent accumulators)
    layout: Layout = "nchw"  # the input NCHW[c] (c = lanes) or NHWC (`kernels.nchwc`),
    # read as whole vectors of L channels: a windowed pool writes that layout too; a
    # global one's output (one value per channel) is the same memory in every layout

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    def units(self) -> int:
        """What threads divide: planes, or vectors of `lanes` channels when blocked (a
        windowed pool's: each output row of them)."""
        if self.layout == "nchw":
            return self.shape.planes
        return self.shape.planes // self.lanes * (self.shape.out_height if self.shape.windowed else 1)

    def loads_per_unit(self) -> int:
        """Vector loads of one unit: a tap per output vector (windowed), or the plane's
        (or block's) vectors (global)."""
        s = self.shape
        if s.windowed:
            vectors = s.out_width if self.layout != "nchw" else s.out_height * ceil_div(s.out_width, self.lanes)
            return s.kernel[0] * s.kernel[1] * vectors
        return ceil_div(s.height * s.width * (self.lanes if self.layout != "nchw" else 1), self.lanes)

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_pool_{self.shape.kind}_f32", self)

    def split(self) -> PhaseSplit:
        """The input transform of a windowed pool, with the ceil-mode overhang as padding."""
        s = self.shape
        pads = (s.pads[0], s.pads[1], s.pads[2] + s.overhang(0), s.pads[3] + s.overhang(1))
        fill = -math.inf if s.kind == "max" else 0.0
        return PhaseSplit(s.planes, s.height, s.width, s.strides, pads, fill, self.lanes, self.nr)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if self.nv < 1:
            raise KernelError(f"nv must be >= 1, got {self.nv}")
        if self.layout != "nchw":
            check_blocked(target, self.lanes, {"the channels": self.shape.channels})
        if self.chains < 1:
            raise KernelError(f"chains must be >= 1, got {self.chains}")
        if self.nv + self.chains + 1 > target.vector_registers:
            raise KernelError(f"pooling with nv={self.nv}, chains={self.chains} needs {self.nv + self.chains + 1} "
                                  f"vector registers; {target.name} has {target.vector_registers}")  # fmt: skip

    def workspace(self) -> int:
        """f32 elements of one thread's scratch plane (its slack included); 0 for a
        global or blocked pool, which reads the image itself."""
        return self.split().scratch_plane if self.shape.windowed and self.layout == "nchw" else 0

    def signature(self) -> KernelSignature:
        """``SYMBOL(y, x[, scale][, work], plane_begin, plane_end)``: x is the input, work
        an NCHW windowed pool's per-thread scratch plane."""
        s = self.shape
        params = [Param("y", Role.OUT, extent=(s.planes * s.out_height * s.out_width,)),
                  Param("x", Role.IN, extent=(s.planes * s.height * s.width,))]  # fmt: skip
        if s.kind == "average":
            params.append(Param("scale", Role.IN, extent=(s.out_height * s.out_width,)))
        if self.workspace():
            params.append(Param("work", Role.INOUT, extent=(self.workspace(),)))
        params += [Param("plane_begin", Role.SIZE), Param("plane_end", Role.SIZE)]
        planes = "planes" if self.layout == "nchw" else f"{layout_name(self.layout, self.lanes)}: vectors of channels" + (
            " by output row" if s.windowed else "")
        return KernelSignature(self.symbol, tuple(params), f"{s.describe()}: {planes} [plane_begin, plane_end).")


def average_scale(shape: PoolShape) -> np.ndarray:
    """1/(elements averaged) per output position: the window's taps (rows × columns, with
    their dilations) inside the input, or inside the padded input with count_include_pad
    (never the ceil-mode overhang)."""

    def counts(axis: int) -> np.ndarray:
        size, begin = (shape.height, shape.width)[axis], shape.pads[axis]
        lo, hi = (-begin, size + shape.pads[axis + 2]) if shape.count_include_pad else (0, size)
        starts = np.arange(shape.out_size(axis)) * shape.strides[axis] - begin
        taps = starts[:, None] + np.arange(shape.kernel[axis]) * shape.dilations[axis]
        return ((taps >= lo) & (taps < hi)).sum(axis=1)

    return (1.0 / np.outer(counts(0), counts(1))).astype(np.float32).ravel()


def generate(config: PoolConfig, target: Target) -> list[KernelModule]:
    """The pooling kernel of `config` (one module; a list, as for the other families)."""
    config.validate(target)
    sig = config.signature()
    with new_module() as module:
        with kernel_body(module, sig) as args:
            blocked = config.layout != "nchw"
            if config.shape.windowed:
                body = _windowed_blocked if blocked else _windowed
            else:
                body = _global_blocked if blocked else _global
            body(config, target, args)
        verify(module)
    return [KernelModule(module=module, signatures=(sig,), target=target)]


def _windowed(cfg: PoolConfig, target: Target, args: dict) -> None:
    s, split, lanes = cfg.shape, cfg.split(), cfg.lanes
    vec = f32_vector_type(target, lanes)
    y = f32_memref(args["y"], [s.planes * s.out_height, s.out_width])
    x = source_memref(split, args["x"])
    xt = f32_memref(args["work"], [cfg.workspace()])
    scale = f32_memref(args["scale"], [s.out_height, s.out_width]) if "scale" in args else None
    taps = [split.tap_offset(kh * s.dilations[0], kw * s.dilations[1])
            for kh in range(s.kernel[0]) for kw in range(s.kernel[1])]  # fmt: skip
    combine = maximum if s.kind == "max" else arith.addf

    def plane(p: ir.Value) -> None:
        copy_plane(split, target, x, xt, p, index(0))

        def output_row(oh: ir.Value) -> None:
            window = arith.muli(oh, index(split.phase_cols))
            y_row = arith.addi(arith.muli(p, index(s.out_height)), oh)

            def step(ow0: ir.Value, count: int) -> None:
                vectors = ceil_div(count, lanes)
                chains = ceil_div(cfg.chains, vectors)
                # each chain starts at its first tap, not at the fill: a constant start lets LLVM
                # fold the first combine into a fix-up that turned NaN windows into -inf
                acc: list[list[ir.Value | None]] = [[None] * chains for _ in range(vectors)]
                for t, tap in enumerate(taps):  # whole vectors: junk lanes read the border or the slack
                    for v in range(vectors):
                        tapped = load(vec, xt, [offset(arith.addi(window, ow0), tap + v * lanes)])
                        held = acc[v][t % chains]
                        acc[v][t % chains] = tapped if held is None else combine(held, tapped)
                for v, a in enumerate(functools.reduce(combine, [c for c in partial if c is not None])
                                      for partial in acc):  # fmt: skip
                    left = count - v * lanes
                    mask = tail_mask(target, lanes, left)
                    col = offset(ow0, v * lanes)
                    if scale is not None:
                        a = arith.mulf(a, load(vec, scale, [oh, col], mask))
                    store(a, y, [y_row, col], mask)

            for_tiles(index(0), index(ceil_div(s.out_width, cfg.nr)), cfg.nr, s.out_width, step)

        for_range(0, s.out_height, 1, output_row)

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(s.planes)), 1, plane)


def _windowed_blocked(cfg: PoolConfig, target: Target, args: dict) -> None:
    """Y[u's row] of unit u (image, L channels, output row oh): per tile of pixels, the
    taps inside the image combined, times the average's scale at each position."""
    s, lanes = cfg.shape, cfg.lanes
    vec = f32_vector_type(target, lanes)
    source, result = Blocks.of(cfg.layout, s.input_shape, lanes), Blocks.of(cfg.layout, s.output_shape, lanes)
    x = f32_memref(args["x"], [math.prod(s.input_shape)])
    y = f32_memref(args["y"], [math.prod(s.output_shape)])
    scale = f32_memref(args["scale"], [s.out_height * s.out_width]) if "scale" in args else None
    (kw_count, sw, dw), dh = (s.kernel[1], s.strides[1], s.dilations[1]), s.dilations[0]
    combine, fill = (maximum, -math.inf) if s.kind == "max" else (arith.addf, 0.0)
    columns = Columns.of(s.width, s.out_width, kw_count, sw, dw, s.pads[1])

    def put(value: ir.Value, n: ir.Value, channel: ir.Value, oh: ir.Value, ow: ir.Value) -> None:
        if scale is not None:
            at = arith.addi(arith.muli(oh, index(s.out_width)), ow)
            value = arith.mulf(value, vector.broadcast(vec, memref.load(scale, [at])))
        store(value, y, [result.at(n, channel, oh, ow)])

    def unit(u: ir.Value) -> None:
        oh = arith.remsi(u, index(s.out_height))
        n, channel = result.vector_of(arith.divsi(u, index(s.out_height)), lanes)
        top, kh_begin, kh_end = row_taps(s, oh)

        def tile(ow0: ir.Value, pixels: int, kws: tuple[int, ...] | None) -> None:
            left = arith.subi(arith.muli(ow0, index(sw)), index(s.pads[1]))

            def window_row(kh: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                row = source.at(n, channel, arith.addi(top, arith.muli(kh, index(dh))), left)
                for kw in kws or range(kw_count):
                    for j in range(pixels):
                        acc[j] = combine(acc[j], load(vec, x, [offset(row, (j * sw + kw * dw) * source.step)]))
                return acc

            acc = for_carry(kh_begin, kh_end, 1, [f32_splat(target, lanes, fill)] * pixels, window_row)
            for j in range(pixels):
                put(acc[j], n, channel, oh, offset(ow0, j))

        pixel_tiles(columns, cfg.nv, tile)
        for ow in zero_pixels(columns):
            put(f32_splat(target, lanes, fill), n, channel, oh, index(ow))

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(cfg.units())), 1, unit)


def _global(cfg: PoolConfig, target: Target, args: dict) -> None:
    s, lanes = cfg.shape, cfg.lanes
    size = s.height * s.width
    vec = f32_vector_type(target, lanes)
    x = f32_memref(args["x"], [s.planes, size])
    y = f32_memref(args["y"], [s.planes])
    whole = size // lanes

    combine, start, kind = _combining(s.kind)

    def plane(p: ir.Value) -> None:
        sums = _partial_sums(cfg, target, x, lambda v: [p, arith.muli(v, index(lanes))], whole)
        if size % lanes:
            mask = prefix_mask(mask_type(target, lanes), size % lanes)
            tail = arith.select(mask, load(vec, x, [p, index(whole * lanes)], mask), f32_splat(target, lanes, start))
            sums[0] = combine(sums[0], tail)
        total = vector.reduction(ir.F32Type.get(), kind, functools.reduce(combine, sums))
        memref.store(_scaled(total, s.kind, 1.0 / size), y, [p])

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(s.planes)), 1, plane)


def _global_blocked(cfg: PoolConfig, target: Target, args: dict) -> None:
    """y[u·L : +L] = the mean of the pixel vectors of unit u, (image, L channels) (nv
    partial sums), found through the input's layout (`nchwc.Blocks`)."""
    s, lanes = cfg.shape, cfg.lanes
    size = s.height * s.width
    blocks = Blocks.of(cfg.layout, (s.batch, s.channels, 1, size), lanes)
    x = f32_memref(args["x"], [s.planes * size])
    y = f32_memref(args["y"], [s.planes])

    def block(b: ir.Value) -> None:
        first = blocks.at(*blocks.vector_of(b, lanes), index(0), index(0))
        sums = _partial_sums(cfg, target, x, lambda v: [arith.addi(first, arith.muli(v, index(blocks.step)))], size)
        total = functools.reduce(_combining(s.kind)[0], sums)
        store(_scaled(total, s.kind, 1.0 / size), y, [arith.muli(b, index(lanes))])

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(cfg.units())), 1, block)


def _partial_sums(cfg: PoolConfig, target: Target, x: ir.Value, at: Callable[[ir.Value], list[ir.Value]],
                  vectors: int) -> list[ir.Value]:  # fmt: skip
    """cfg.nv partial sums (maxima, for a global max) of the `vectors` whole vectors of x
    at `at(v)`, v < vectors."""
    vec = f32_vector_type(target, cfg.lanes)
    combine, start, _ = _combining(cfg.shape.kind)

    def add(v: ir.Value, copy: int, sums: list[ir.Value]) -> list[ir.Value]:
        out = list(sums)
        out[copy] = combine(out[copy], load(vec, x, at(v)))
        return out

    return for_unrolled(index(0), index(vectors), cfg.nv, [f32_splat(target, cfg.lanes, start)] * cfg.nv, add)


def _combining(kind: PoolKind) -> tuple[Callable[[ir.Value, ir.Value], ir.Value], float, object]:
    """A global pool's combine, its start value and the same across a vector's lanes."""
    if kind == "global_max":
        return arith.maximumf, -math.inf, vector.CombiningKind.MAXIMUMF
    return arith.addf, 0.0, vector.CombiningKind.ADD


def _scaled(total: ir.Value, kind: PoolKind, scale: float) -> ir.Value:
    """A global average's sum times 1/count (a scalar or a vector); a maximum as it is."""
    if kind != "global_average":
        return total
    factor = arith.constant(ir.F32Type.get(), scale)
    return arith.mulf(total, vector.broadcast(total.type, factor) if isinstance(total.type, ir.VectorType) else factor)
