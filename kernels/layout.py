"""Activation layout transforms: NCHW planes copied into the bordered, stride-phase-split
planes that the convolution and pooling kernels read with plain vector loads.

A convolution or pooling window at output (oh, ow) reads padded input rows
y = oh·sh + kh·dh and columns x = ow·sw + kw·dw. Splitting the padded plane by the
remainder of y mod sh and x mod sw (its stride phases)::

    Xt[plane][y mod sh][x mod sw][y div sh][x div sw] = padded X[plane][y][x]

makes tap (kh, kw) of consecutive outputs ow, ow+1, ... consecutive elements of one
phase row: phase ((kh·dh) mod sh, (kw·dw) mod sw), row oh + (kh·dh) div sh, column
ow + (kw·dw) div sw. So every stride and dilation is read as a stride-1 window with
whole-vector loads, and padding needs no test in the inner loop: the border holds
the fill value (0 for a convolution or an average, −inf for a max). With stride 1
there is one phase and Xt is the padded plane.

The transform is one pass over the input (the convolution reads it
taps × output channels times), split across threads by planes::

    for plane in [begin, end):  for (py, i) in (row phase, phase row):   # in one loop or sh
        y = i·sh + py − top
        for px in column phases:
            if 0 <= y < H:  Xt row = fill | X[plane, y, x(j)] for x(j) = j·sw + px − left in [0, W) | fill
            else:           Xt row = fill          # the middle as vectors (sw > 1: deinterleaved or gathered)
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, f32_memref, f32_splat, f32_vector_type, index, kernel_body
from kernels.emit import config_symbol, new_module, tail_mask, verify
from kernels.loops import for_range, for_tiles, load, offset, store, strided_load, when_else, whole_or_masked
from kernels.mlir import arith, ir, memref, vector
from kernels.sizes import ceil_div
from kernels.target import Target


@dataclass(frozen=True)
class PhaseSplit:
    """The transform of `planes` H×W planes with `pads` (top, left, bottom, right; the
    bottom and right may include a pooling's ceil-mode overhang) and `strides`."""

    planes: int
    height: int
    width: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    fill: float
    lanes: int
    slack: int  # floats after the last plane that kernels may read into junk lanes

    @property
    def phase_rows(self) -> int:
        return ceil_div(self.height + self.pads[0] + self.pads[2], self.strides[0])

    @property
    def phase_cols(self) -> int:
        return ceil_div(self.width + self.pads[1] + self.pads[3], self.strides[1])

    @property
    def phase_size(self) -> int:
        return self.phase_rows * self.phase_cols

    @property
    def plane_size(self) -> int:
        return self.strides[0] * self.strides[1] * self.phase_size

    @property
    def size(self) -> int:
        """f32 elements of the transformed buffer, slack included."""
        return self.planes * self.plane_size + self.slack

    @property
    def scratch_plane(self) -> int:
        """f32 elements of one plane's scratch (`copy_plane` into a kernel's own buffer),
        slack included."""
        return self.plane_size + self.slack

    def inside_columns(self, px: int) -> tuple[int, int]:
        """For column phase px: the phase columns [first, end) whose source column lies
        in the row (the rest hold the fill)."""
        sw, left = self.strides[1], self.pads[1]
        return max(0, ceil_div(left - px, sw)), min(self.phase_cols, ceil_div(self.width + left - px, sw))

    def gathered_lanes(self, scalable: bool) -> int:
        """Lanes the transform loads by gathers, masked ones included (a gather issues a
        load per lane): on scalable vectors, whose deinterleave is not a fixed shuffle,
        every inside column of every source row and column phase, in vectors. None with
        stride 1 across or fixed-width vectors."""
        if self.strides[1] == 1 or not scalable:
            return 0
        per_row = 0
        for px in range(self.strides[1]):
            first, end = self.inside_columns(px)
            per_row += ceil_div(max(0, end - first), self.lanes) * self.lanes
        return self.planes * self.height * per_row  # each source row lies in one row phase

    def tap_offset(self, dy: int, dx: int) -> int:
        """Where padded input (oh·sh + dy, ow·sw + dx) lies in a plane, less oh·phase_cols + ow:
        the constant offset of a window tap (dy, dx) = (kh·dh, kw·dw)."""
        sh, sw = self.strides
        phase = (dy % sh) * sw + dx % sw
        return phase * self.phase_size + (dy // sh) * self.phase_cols + dx // sw

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_phase_split_f32_{self.planes}x{self.height}x{self.width}", self)

    def signature(self) -> KernelSignature:
        """``SYMBOL(xt, x, plane_begin, plane_end)``."""
        return KernelSignature(
            symbol=self.symbol,
            params=(Param("xt", Role.INOUT, extent=(self.size,)),
                    Param("x", Role.IN, extent=(self.planes * self.height * self.width,)),
                    Param("plane_begin", Role.SIZE), Param("plane_end", Role.SIZE)),  # fmt: skip
            doc=f"{self.planes} planes {self.height}x{self.width} padded by {self.pads} (fill "
            f"{self.fill:g}) and split by stride {self.strides} phases, planes [plane_begin, plane_end).",
        )


def generate_phase_split(split: PhaseSplit, target: Target) -> KernelModule:
    """The transform kernel of `split` on `target` (its slack is never written)."""
    check_lanes(target, split.lanes)
    sig = split.signature()
    with new_module() as module:
        with kernel_body(module, sig) as args:
            _phase_split(split, target, args)
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)


def deinterleave(pieces: list[ir.Value], stride: int, first: int = 0) -> ir.Value:
    """Lane i = element i·stride + first (first < stride) of the concatenated vectors
    `pieces` (stride of them): one shuffle of the first two, then one more per further
    vector (fixed-width only)."""
    lanes = ir.VectorType(pieces[0].type).shape[0]
    take = [i * stride + first for i in range(lanes)]
    value = vector.shuffle(pieces[0], pieces[-1] if stride == 1 else pieces[1],
                           [t if t < 2 * lanes else 0 for t in take])  # fmt: skip
    for k in range(2, stride):
        value = vector.shuffle(value, pieces[k], [lanes + t - k * lanes if t // lanes == k else i
                                                  for i, t in enumerate(take)])  # fmt: skip
    return value


def _phase_split(s: PhaseSplit, target: Target, args: dict) -> None:
    x = f32_memref(args["x"], [s.planes * s.height, s.width])
    xt = f32_memref(args["xt"], [s.size])

    def plane(p: ir.Value) -> None:
        copy_plane(s, target, x, xt, p, arith.muli(p, index(s.plane_size)), one_nest=True)

    for_range(index(args["plane_begin"]), arith.minsi(index(args["plane_end"]), index(s.planes)), 1, plane)


def source_memref(s: PhaseSplit, pointer: ir.Value) -> ir.Value:
    """The NCHW input as the 2-D memref `copy_plane` reads: rows (plane, y), columns x."""
    return f32_memref(pointer, [s.planes * s.height, s.width])


def copy_plane(s: PhaseSplit, target: Target, x: ir.Value, xt: ir.Value, p: ir.Value, first: ir.Value,
               one_nest: bool = False) -> None:  # fmt: skip
    """Emit the transform of plane `p` of `x` (`source_memref`) into the flat `xt` from
    element `first`: the whole buffer's planes, or one plane's scratch of a kernel that
    transforms each plane just before reading it (depthwise, pooling). The rows of all
    row phases in `one_nest` loop (less LLVM IR, for the transform kernel), else one
    loop per row phase (faster inside a kernel). Each source row is read once for all
    its column phases: a load of sw·L columns deinterleaved sw ways."""
    copy = _PlaneCopy(s, target, x, xt, p, first)
    sh = s.strides[0]
    if one_nest:  # padded row r: phase row r div sh of row phase r mod sh
        for_range(0, sh * s.phase_rows, 1, lambda r: copy.row(arith.divui(r, index(sh)), arith.remui(r, index(sh))))
    else:
        for py in range(sh):
            for_range(0, s.phase_rows, 1, lambda i, py=py: copy.row(i, index(py)))


class _PlaneCopy:
    """The emit helpers of `copy_plane` for one plane: a phase row is the source row's
    columns of each column phase between fills, or all fill outside the source."""

    def __init__(self, s: PhaseSplit, target: Target, x: ir.Value, xt: ir.Value, p: ir.Value, first: ir.Value):
        self.s, self.target, self.x, self.xt, self.p, self.first = s, target, x, xt, p, first
        self.vec, self.lanes = f32_vector_type(target, s.lanes), s.lanes
        self.fill_vec = f32_splat(target, s.lanes, s.fill)
        self.fill = arith.constant(ir.F32Type.get(), s.fill)

    def mask(self, count: int) -> ir.Value | None:
        return tail_mask(self.target, self.lanes, count)

    def fill_row(self, start: ir.Value, end: ir.Value) -> None:
        def piece(j: ir.Value, count: int) -> None:
            self.put(self.fill_vec, arith.addi(start, j), count, end)

        for_tiles(index(0), index(ceil_div(self.s.phase_cols, self.lanes)), self.lanes, self.s.phase_cols, piece)

    def put(self, value: ir.Value, at: ir.Value, count: int, end: ir.Value) -> None:
        """Store `count` lanes of `value` at `at`: the whole vector where it stays before
        `end`, its phase's end — its lanes past the row land on the phase's later rows,
        which are written after."""
        whole = arith.cmpi(arith.CmpIPredicate.sle, offset(at, self.lanes), end)
        whole_or_masked(whole, self.mask(count), lambda mask: store(value, self.xt, [at], mask))

    def row(self, i: ir.Value, py: ir.Value) -> None:
        """Phase row i of the row phase py, every column phase."""
        s, sw = self.s, self.s.strides[1]
        region = arith.addi(self.first, arith.muli(py, index(sw * s.phase_size)))  # its column phases' rows
        phase0 = arith.addi(region, arith.muli(i, index(s.phase_cols)))
        starts = [offset(phase0, px * s.phase_size) for px in range(sw)]
        ends = [offset(region, (px + 1) * s.phase_size) for px in range(sw)]
        y = arith.subi(arith.addi(arith.muli(i, index(s.strides[0])), py), index(s.pads[0]))
        inside = arith.andi(arith.cmpi(arith.CmpIPredicate.sge, y, index(0)),
                            arith.cmpi(arith.CmpIPredicate.slt, y, index(s.height)))  # fmt: skip
        source_row = arith.addi(arith.muli(self.p, index(s.height)), y)
        when_else(inside, lambda: self.copy_row(starts, ends, source_row),
                  lambda: [self.fill_row(st, end) for st, end in zip(starts, ends)])  # fmt: skip

    def copy_row(self, starts: list[ir.Value], ends: list[ir.Value], source_row: ir.Value) -> None:
        """fill | the source row's columns of each phase | fill: the columns first (a
        whole last vector may pass into the fill on the right), then the fills."""
        s, sw, left = self.s, self.s.strides[1], self.s.pads[1]
        if sw == 1:
            def piece(col: ir.Value, count: int) -> None:
                value = load(self.vec, self.x, [source_row, col], self.mask(count))
                self.put(value, arith.addi(starts[0], arith.addi(col, index(left))), count, ends[0])

            for_tiles(index(0), index(ceil_div(s.width, self.lanes)), self.lanes, s.width, piece)
        elif self.target.scalable:  # the deinterleave is a fixed-width shuffle: gather each phase
            for px, start in enumerate(starts):
                self.gather_phase(start, source_row, px)
        else:
            self.deinterleave_row(starts, ends, source_row)
        for px, start in enumerate(starts):
            inside_from, inside_to = s.inside_columns(px)
            for j in [*range(min(inside_from, s.phase_cols)), *range(max(inside_to, inside_from), s.phase_cols)]:
                memref.store(self.fill, self.xt, [arith.addi(start, index(j))])

    def gather_phase(self, start: ir.Value, source_row: ir.Value, px: int) -> None:
        s, sw = self.s, self.s.strides[1]
        inside_from, inside_to = s.inside_columns(px)
        count = inside_to - inside_from
        first_column = inside_from * sw + px - s.pads[1]

        def gathered(j: ir.Value, size: int) -> None:
            m = self.mask(size)
            column = arith.addi(arith.muli(j, index(sw)), index(first_column))
            store(strided_load(self.vec, self.x, [source_row, column], sw, m), self.xt,
                  [arith.addi(start, arith.addi(j, index(inside_from)))], m)  # fmt: skip

        if count > 0:
            for_tiles(index(0), index(ceil_div(count, self.lanes)), self.lanes, count, gathered)

    def deinterleave_row(self, starts: list[ir.Value], ends: list[ir.Value], source_row: ir.Value) -> None:
        """Source columns col0 + rho + sw·l (rho < sw) go to phase px = (rho + left) mod
        sw, column col0/sw + l + (rho + left − px)/sw: chunks of sw·L columns, the last
        one masked."""
        s, sw, left, lanes = self.s, self.s.strides[1], self.s.pads[1], self.lanes
        chunk = sw * lanes

        def put(col0: ir.Value, valid: int) -> None:  # the chunk at col0 with `valid` source columns
            pieces = [self.fill_vec if valid <= k * lanes else
                      load(self.vec, self.x, [source_row, offset(col0, k * lanes)], self.mask(valid - k * lanes))
                      for k in range(sw)]  # fmt: skip
            for rho in range(min(sw, valid)):
                px = (rho + left) % sw
                column = arith.addi(arith.divsi(col0, index(sw)), index((rho + left - px) // sw))
                self.put(deinterleave(pieces, sw, rho), arith.addi(starts[px], column), ceil_div(valid - rho, sw),
                         ends[px])  # fmt: skip

        full = s.width // chunk
        if full:
            for_range(0, full, 1, lambda c: put(arith.muli(c, index(chunk)), chunk))
        if s.width % chunk:
            put(index(full * chunk), s.width % chunk)
