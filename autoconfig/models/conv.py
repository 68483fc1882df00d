"""The convolution model: from the hardware profile alone, each algorithm's parameters
and predicted time as named terms; the fastest prediction is the choice.

Every algorithm is a matrix product per image and group (`kernels.conv`), so the
terms are the matmul model's, counted on the convolution's loop nest:

- direct: register tiles of mr output channels × nv vectors of output pixels, every
  tile with mr·nv + nv + 1 ≤ vector registers scored (as for matmul); its k steps are
  the input channels × filter taps. Its input loads start at any float (a tap shifts
  the window by one pixel), so a vector crosses a cache line with probability
  (vector bytes − 4)/line, and such a load costs two (SPLIT_LOAD_COST). Output rows
  narrower than a multiple of the tile compute padded lanes (the last tile of every
  row). The input channels are blocked (kc) so that a column tile's input window
  stays in L1 while every row tile reads it, and the weights of one channel block
  stay in L2 while every column tile reads them. The input is first copied into its
  padded, phase-split layout (`transform`).
- depthwise (one channel in and out per group): tiles of mr output rows × nv vectors
  sharing each tap's weight broadcast, the same FMA, latency and load terms (mr·nv
  accumulators, mr·nv input loads and one broadcast per tap), the input and output
  once, and the transform. The direct kernel on such a layer has one output channel
  per tile: nv accumulators at most, so a narrow row waits on the FMA latency.
- gemm1x1 (1×1, stride 1, no padding): the matmul model's choice for the product
  Cout/G × OH·OW × Cin/G, once per image and group, or for its transpose OH·OW ×
  Cout/G × Cin/G (output channels in the lanes: no padded lanes on a 7×7 image; each
  output vector scattered).
- im2col: the same for Cout/G × OH·OW × Cin/G·KH·KW, after the transform and the copy
  of the windows into that matrix (written once, read by the matmul from where it lies).
- channel-blocked (NCHW[c], `kernels.nchwc`; the target's widest vectors, whole blocks
  of channels): depthwise tiles of output pixels × one vector of channels, each input
  vector of a filter row loaded once for every tap that reads it; direct tiles of
  output pixels × vectors of output channels with a broadcast per input value; gemm1x1
  the matmul model's blocked transposed product (each output vector stored whole; of
  an unpadded 1×1 layer at any stride, reading every stride-th pixel in place). The
  same FMA, latency and load terms, no transform (borders are skipped, not padded)
  and no line-crossing loads. Border pixels run one at a time, with their taps only.

The layout is a decision too. `choose` scores every layout; a layer on its own takes
and returns NCHW, so a channel-blocked plan there pays the transforms of its input and
output as well (`ConvChoice.at_nchw_boundary`); inside a model `choose_layout` takes the plan
whose time, plus the transform of its input from the layout it is held in
(`reblock_ns`), plus what the output's readers then pay, is least.

As for matmul, compute and the largest memory term overlap (soft maximum), copies
and calls add. Nothing is timed: the figures are the profile's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from autoconfig.errors import AutoconfigError
from autoconfig.machine import F32, PROGRAM_STEP_NS, Machine
from autoconfig.models.cost import (
    CROSS_CORE_LEVEL, CROSS_CORE_TERM, OUTPUT_TRANSFERS, SHARED_LINE_NS, STALL_TERM, Group, Prediction, Term,
    best_of, busiest_share, chain_ns, epilogue_term, fma_floor_ns, microkernel_ns, mid_line, output_passes,
    promising_predictions, tie_bound, total_ns, vector_widths,
)  # fmt: skip
from autoconfig.models.matmul import MAX_MR, MAX_NV, PAGE_BYTES, Choice, MatmulPlan, Split
from autoconfig.models.matmul import choose as choose_matmul
from autoconfig.models.matmul import predict as predict_matmul
from autoconfig.profile import HardwareProfile
from autoconfig.runtime import split
from kernels import epilogue as ep
from kernels.layout import PhaseSplit
from kernels.conv import ConvConfig, ConvShape, DepthwiseConfig, DirectConfig, GemmConvConfig, Layout, WinogradConfig
from kernels.conv import input_layout_of, layout_of, transposed_shape
from kernels.nchwc import BlockedConfig, BlockedDepthwiseConfig, BlockedDirectConfig, Columns, Reblock, layout_name
from kernels.sizes import ceil_div, round_up
from kernels.winograd import TRANSFORMS, applies, batched, transform_ops
from kernels.target import Target

ConvSplit = Literal["groups", "rows", "columns", "units", "bands"]
DIRECT_SPLITS: tuple[ConvSplit, ...] = ("groups", "rows", "columns")  # NCHW direct

SPLIT_LOAD_COST = 2.0
"""A vector load that crosses a cache line costs two: it reads both lines."""

DEPTHWISE_REGISTER_SHARE = 1 / 3
"""Depthwise tiles hold at most a third of the vector registers in accumulators: each
tap's input loads are independent of one another, and LLVM's scheduler issues them
ahead of their FMAs, holding a register each, so a tile needs about twice its
accumulators and the weight. A count of accumulators alone predicts every tile with
enough of them alike, and the tie went to the largest, which spilled."""

WINDOW_L1_SHARE = 0.5
"""Share of L1 a column tile's input window may take: the rest holds the weights
being streamed through it and the output tile's lines."""

WEIGHTS_L2_SHARE = 0.5
"""Share of the effective L2 one channel block's weights may take: the rest holds the
input planes the column tiles read."""


@dataclass(frozen=True)
class ConvPlan:
    """A convolution config with how the runtime runs it: on how many threads, dividing
    what. Direct divides (image, group) pairs, row tiles (output channels) or column
    tiles (output pixels); a GEMM algorithm divides its matmul's rows or columns (or,
    gemm1x1, its image-groups, each product whole on a thread); a
    channel-blocked kernel its (image, channel tile, output row) units, a depthwise one
    perhaps in bands of rows (`depthwise_bands`)."""

    config: ConvConfig
    threads: int = 1
    split: str = ""  # "" = the algorithm's first: image-groups, or a GEMM's rows

    def __post_init__(self) -> None:
        if not self.split:
            object.__setattr__(self, "split", ALGORITHMS[type(self.config)].splits[0])

    @property
    def shape(self) -> ConvShape:
        return self.config.shape

    def gemm_plan(self) -> MatmulPlan:
        """The matmul plan of a GEMM algorithm (Winograd's in bands: one band's, on its
        thread alone; a product split by image-groups: one image-group's, likewise)."""
        if self.split in ("bands", "groups"):
            return MatmulPlan(self.config.gemm, 1, "rows")
        return MatmulPlan(self.config.gemm, self.threads, self.split)

    def split_units(self) -> int:
        """How many parts the threads divide (`AlgorithmModel.units`)."""
        return ALGORITHMS[type(self.config)].units(self)

    def parts(self) -> int:
        return min(self.threads, self.split_units())

    def transform_planes(self) -> list[tuple[int, int]]:
        """Each thread's planes of the padded, phase-split input: under a direct image-
        groups split, the planes of its own image-groups (it then reads only what it
        wrote), else an even share."""
        s = self.shape
        if isinstance(self.config, DirectConfig) and self.split == "groups":
            return [(a * s.in_per_group, b * s.in_per_group) for a, b in split(self.config.groups(), self.threads)]
        return split(s.batch * s.channels, self.threads)


def window_bytes(shape: ConvShape, nr: int) -> int:
    """Bytes of one input channel that a column tile of nr output pixels reads: its taps'
    rows (one per filter row) in each column phase, nr columns plus the filter's reach."""
    columns = nr + (shape.kernel[1] - 1) * shape.dilations[1] // shape.strides[1]
    return shape.kernel[0] * shape.strides[1] * columns * F32


def channel_blocks(shape: ConvShape, mr: int, nr: int, m: Machine) -> tuple[int, ...]:
    """The input-channel blocks scored for a direct tile: `channel_block`'s and, when it
    splits the channels, all of them in one block, whose window streams from L2 but
    whose output is written once (`output_passes`)."""
    kc, _ = channel_block(shape, mr, nr, m)
    return (kc,) if kc == shape.in_per_group else (kc, shape.in_per_group)


def channel_block(shape: ConvShape, mr: int, nr: int, m: Machine, kc: int | None = None) -> tuple[int, str]:
    """kc: input channels per block, so that a column tile's input window (kc channels
    × the rows and columns its taps reach) stays in L1's share and the block's weights
    (Cout/G × kc × taps) in L2's; `kc` = all channels: the one-block option of
    `channel_blocks`."""
    if kc is not None and kc == shape.in_per_group != channel_block(shape, mr, nr, m)[0]:
        return kc, f"{kc} = all input channels in one block: the output written once, the window from L2"
    window_per_channel = window_bytes(shape, nr)
    l1 = m.l1_ways * m.l1_sets * m.line
    by_window = max(1, int(l1 * WINDOW_L1_SHARE // window_per_channel))
    l2 = m.l2_ways_effective * m.l2_sets * m.line
    by_weights = max(1, int(l2 * WEIGHTS_L2_SHARE // (shape.out_per_group * shape.taps * F32)))
    kc = min(shape.in_per_group, by_window, by_weights)
    if kc == shape.in_per_group:
        return kc, f"{kc} = all input channels of a group (window and weights fit)"
    limit = "the input window in L1" if by_window <= by_weights else "the block's weights in L2"
    return kc, (f"{kc}: {limit} (window {window_per_channel * kc / 1e3:.1f} kB of {l1 / 1e3:.0f} kB L1, "
                f"weights {shape.out_per_group * shape.taps * kc * F32 / 1e3:.0f} kB of {l2 / 1e3:.0f} kB L2)")


def predict(plan: ConvPlan, machine: Machine | HardwareProfile) -> Prediction:
    """Predicted time of `plan`, as named terms."""
    base = machine if isinstance(machine, Machine) else Machine.of(machine)
    return ALGORITHMS[type(plan.config)].predict(plan, base)


def _by_terms(terms_of: Callable) -> Callable[[ConvPlan, Machine], Prediction]:
    """A prediction from an algorithm's terms at its width and threads, for the busiest
    thread's share of the work."""

    def predict_plan(plan: ConvPlan, base: Machine) -> Prediction:
        m = base.at(plan.config.lanes, plan.threads)
        terms, params = terms_of(plan, m, busiest_share(plan.split_units(), plan.threads))
        return Prediction(plan, tuple(terms), total_ns(terms), tuple(params))

    return predict_plan


def _transform_term(split: PhaseSplit, m: Machine, share: float) -> Term:
    """The input copied into its padded, phase-split planes: read once, the planes
    written once; the columns a strided split gathers (scalable vectors only) cost a
    load slot per lane besides."""
    read, written = split.planes * split.height * split.width * F32, split.size * F32
    moved = read + written
    gathered = split.gathered_lanes(m.scalable)
    why = (f"the input copied into padded planes split by stride {split.strides[0]}x{split.strides[1]} "
           f"phases ({moved / 1e6:.2f} MB read and written"
           + (f"; {gathered / split.planes:.0f} lanes per plane gathered)" if gathered else ")"))  # fmt: skip
    # read where the input lies, written where the planes stay, each at its own level,
    # as packing is
    ns = m.traffic_ns(read) + m.traffic_ns(written) + m.first_touch_ns(written)
    return Term("transform", (ns + gathered / m.broadcast_loads_per_ns()) * share, why + _first_touch(written, m))


def _first_touch(written: float, m: Machine) -> str:
    """The note on scratch whose lines come from DRAM before they are written
    (`Machine.first_touch_ns`)."""
    return f"; its {written / 1e6:.2f} MB first fetched from {m.scratch_level}" if m.scratch_level and written else ""


def _call_term(calls: int, parts: int, m: Machine) -> Term:
    ns = m.call_ns + calls * (m.dispatch_ns if parts > 1 else 0.0)
    return Term("call", ns, f"one call, {calls} kernel(s)" + (" each dispatched to the threads" if parts > 1 else ""))


def _direct_terms(p: ConvPlan, m: Machine, share: float) -> tuple[list[Term], list[tuple[str, str]]]:
    c: DirectConfig = p.config
    s = c.shape
    lanes, nr = c.lanes, c.nr
    steps = s.in_per_group * s.taps
    images = c.groups() * s.out_height
    crossing = _line_crossings(lanes, m)
    # per step: an FMA per accumulator, a load per input vector, a broadcast per channel
    issue, latency, loads = _tiles_ns((s.out_per_group, c.mr), (s.out_width, c.nv, lanes), m,
                                      lambda rows, vectors: (vectors, rows))  # fmt: skip
    issue, latency, loads = (x * steps * images * share for x in (issue, latency, loads))
    kc = c.block
    blocks = ceil_div(s.in_per_group, kc)
    outputs = s.batch * s.out_channels * s.out_height * s.out_width
    padded_out = s.batch * s.out_channels * s.out_height * round_up(s.out_width, lanes)
    out_bytes = outputs * F32
    chains, per_output = chain_ns(padded_out, s.in_per_group, kc, m, s.taps)
    terms = [
        Term("fma", issue, f"{c.mr}x{c.nv} tiles of {lanes} lanes, {steps} steps (channels x taps) each, "
                           f"at {m.fma_per_ns():.2f} vector FMAs/ns per thread"
                           + (f"; each row's last tile computes {(-s.out_width) % lanes} padded lanes"
                              if s.out_width % lanes else "")),
        Term("latency", latency, f"tiles with fewer than {m.fma.in_flight:.1f} accumulators wait on FMA latency"),
        Term("loads", loads, f"{c.nv} input + {c.mr} weight loads per step beyond the FMA time; "
                             f"{crossing:.0%} of input loads cross a line"),
        Term("c tile", (2 * padded_out * blocks * F32 / m.bandwidth["L1"] + chains) * share,
             f"output tiles loaded and stored once per channel block ({blocks}); their sums saved and reloaded "
             f"once per chain ({per_output})"),
    ]  # fmt: skip
    if c.epilogue:
        terms.append(epilogue_term(c.epilogue, ceil_div(padded_out, lanes), outputs, m, share))
    # memory: weights per column tile, the window per row tile when it leaves L1, and
    # everything once (the output's passes per channel block are a stall, below)
    weights = s.out_channels * s.in_per_group * s.taps * F32
    split = c.split()
    traffic: dict[str, float] = {}
    w_level = m.holding_level(s.out_per_group * kc * s.taps * F32)
    if w_level != "L1":
        traffic[w_level] = weights * s.batch * c.col_tiles() * share
    window = kc * window_bytes(s, nr)
    if window > m.l1_ways * m.l1_sets * m.line * WINDOW_L1_SHARE and c.row_tiles() > 1:
        reread = (c.row_tiles() - 1) * images * s.in_per_group * window / kc
        traffic["L2"] = traffic.get("L2", 0.0) + reread * share
    once = split.size * F32 + weights + out_bytes
    once_level, constants_level = m.holding_level(once, whole_problem=True), m.constants_at(once)
    input_share, weights_share = _operand_shares(p, share)
    for level, size in ((once_level, split.size * F32 * input_share + OUTPUT_TRANSFERS * out_bytes * share),
                        (constants_level, weights * weights_share)):
        if level != "L1":
            traffic[level] = traffic.get(level, 0.0) + size
    for level, size in traffic.items():
        terms.append(Term(f"memory {level}", size / m.bandwidth[level],
                          f"{size / 1e6:.2f} MB: weights ({w_level}) per column tile, the window per row "
                          f"tile if it leaves L1, input once and the output in and out from {once_level}, "
                          f"weights once from {constants_level}"))  # fmt: skip
    output = out_bytes * share  # its passes per channel block, from where it lies
    terms.append(output_passes(blocks, "channel", output, m.holding_level(output, whole_problem=True), m))
    terms.append(_transform_term(split, m, busiest_share(s.batch * s.channels, p.threads)))
    if p.parts() > 1:
        terms.append(_direct_cross_core(p, m))
    terms.append(_call_term(2, p.parts(), m))
    registers, held = c.registers_needed()
    model_kc, kc_why = channel_block(s, c.mr, nr, m, c.kc)
    params = [
        ("algorithm", "direct: output channels x output pixels per register tile, windows read in place"),
        ("lanes", f"{lanes} f32 = {lanes * 32}-bit vectors of output pixels"),
        ("tile", f"{c.tile}: {held} = {registers} of {m.registers} registers; "
                 f"{m.fma.in_flight:.1f} FMAs in flight cover the latency"),
        ("kc", kc_why if c.kc == model_kc else f"{c.kc} (forced; the model derives {model_kc})"),
        ("epilogue", ep.describe(c.epilogue)),
        ("threads", _threads_reason(p)),
    ]  # fmt: skip
    return terms, params


def _direct_cross_core(p: ConvPlan, m: Machine) -> Term:
    """What the threads of a direct convolution pay for lines another thread holds: the
    split planes the input transform wrote on another thread (`ConvPlan.
    transform_planes`), and the output lines where two threads' parts meet mid-line,
    which both store into at about the same time."""
    c: DirectConfig = p.config
    s, line = c.shape, m.line // F32
    written = min(b - a for a, b in p.transform_planes())
    rows_read = {"groups": 0.0, "rows": 1.0, "columns": busiest_share(c.col_tiles(), p.threads)}[p.split]
    elsewhere = rows_read * (s.batch * s.channels - written) * c.split().plane_size * F32
    plane = s.out_height * s.out_width
    starts = [b for b, _ in split(p.split_units(), p.threads)][1:]
    if p.split == "columns":  # each plane cut where a thread's tiles start, and where planes meet
        planes = s.batch * s.out_channels
        at = [t // c.tiles_per_row() * s.out_width + t % c.tiles_per_row() * c.nr for t in starts]
        shared = sum(mid_line(planes, plane, a, line) for a in at) + mid_line(planes - 1, plane, plane, line)
    elif p.split == "rows":  # each image-group cut where a thread's channel tiles start, and where they meet
        group = s.out_per_group * plane
        shared = (sum(mid_line(c.groups(), group, t * c.mr * plane, line) for t in starts)
                  + mid_line(c.groups() - 1, group, group, line))  # fmt: skip
    else:
        shared = sum(mid_line(1, 0, g * s.out_per_group * plane, line) for g in starts)
    return Term(CROSS_CORE_TERM, elsewhere / m.bandwidth[CROSS_CORE_LEVEL] + shared * SHARED_LINE_NS,
                f"{elsewhere / 1e6:.2f} MB a thread of the split planes another thread wrote; "
                f"{shared} output lines stored by two threads")  # fmt: skip


def _operand_shares(p: ConvPlan, share: float) -> tuple[float, float]:
    """(input, weights): the shares of each that the busiest thread reads once. Threads
    dividing the output channels (rows) each read the whole input; dividing the output
    pixels (columns), all the weights; dividing image-groups, a share of both. (On one
    thread the share is 1 whatever the split.)"""
    return (1.0 if p.split == "rows" else share), (1.0 if p.split == "columns" else share)


def _tiles_ns(rows: tuple[int, int], columns: tuple[int, int, int], m: Machine,
              loads: Callable[[int, int], tuple[int, int]]) -> tuple[float, float, float]:  # fmt: skip
    """(FMA issue, latency wait, load wait) of one step of every register tile of a plane:
    `rows` = (rows, rows per tile), `columns` = (columns, vectors per tile, lanes), full
    and edge tiles alike; loads(rows, vectors) = (vector loads, broadcasts) per step,
    vector loads costing SPLIT_LOAD_COST where they cross a line."""
    (height, mr), (width, nv, lanes) = rows, columns
    full_rows, edge_rows = divmod(height, mr)
    full_cols, edge_cols = divmod(width, nv * lanes)
    edge_vectors = ceil_div(edge_cols, lanes)
    kinds = [(full_rows * full_cols, mr, nv), (full_rows, mr, edge_vectors),
             (full_cols, edge_rows, nv), (1, edge_rows, edge_vectors)]  # fmt: skip
    issue = latency = wait = 0.0
    for count, r, v in kinds:
        if count and r and v:
            vector_loads, broadcasts = loads(r, v)
            i, lat, ld = microkernel_ns(r * v, vector_loads * unaligned_load_cost(lanes, m), broadcasts, m)
            issue, latency, wait = issue + count * i, latency + count * lat, wait + count * ld
    return issue, latency, wait


def unaligned_load_cost(lanes: int, m: Machine) -> float:
    """What a vector load at an arbitrary float offset costs on average, in aligned
    loads: a line-crossing one costs SPLIT_LOAD_COST (pooling windows, read this way,
    use it too)."""
    return 1 + _line_crossings(lanes, m) * (SPLIT_LOAD_COST - 1)


def _line_crossings(lanes: int, m: Machine) -> float:
    """The share of load operations at an arbitrary float offset that cross a cache line:
    (operation bytes − 4)/line, an operation being the vector or, where the machine
    splits wide loads (`Machine.load_op_bytes`), its part: a 64-byte load issued as two
    32-byte operations crosses in one of them."""
    return max(0.0, (min(lanes * F32, m.load_op_bytes()) - F32) / m.line)


def _depthwise_terms(p: ConvPlan, m: Machine, share: float) -> tuple[list[Term], list[tuple[str, str]]]:
    c: DepthwiseConfig = p.config
    s = c.shape
    lanes = c.lanes
    crossing = _line_crossings(lanes, m)
    # per tap: an FMA per accumulator and a load per accumulator, one weight broadcast
    issue, latency, loads = _tiles_ns((s.out_height, c.mr), (s.out_width, c.nv, lanes), m,
                                      lambda rows, vectors: (rows * vectors, 1))  # fmt: skip
    steps = s.taps * c.planes() * share
    outputs = s.batch * s.out_channels * s.out_height * s.out_width
    padded_out = s.batch * s.out_channels * s.out_height * round_up(s.out_width, lanes)
    terms = [
        Term("fma", issue * steps, f"{c.mr} rows x {c.nv} vectors of {lanes} lanes per tile, {s.taps} taps, "
                                   f"at {m.fma_per_ns():.2f} vector FMAs/ns per thread"),
        Term("latency", latency * steps, f"tiles with fewer than {m.fma.in_flight:.1f} accumulators wait on "
                                         "FMA latency"),
        Term("loads", loads * steps, f"{c.mr * c.nv} input loads and a weight broadcast per tap beyond the "
                                     f"FMA time; {crossing:.0%} of input loads cross a line"),
        Term("c tile", padded_out * F32 / m.bandwidth["L1"] * share, "each output vector stored once"),
    ]  # fmt: skip
    if c.epilogue:
        terms.append(epilogue_term(c.epilogue, ceil_div(padded_out, lanes), outputs, m, share))
    once = c.split().size * F32 + outputs * F32
    once_level = m.holding_level(once, whole_problem=True)
    moved = once + (OUTPUT_TRANSFERS - 1) * outputs * F32
    if once_level != "L1":
        terms.append(Term(f"memory {once_level}", moved * share / m.bandwidth[once_level],
                          f"{moved / 1e6:.2f} MB: the transformed input once and the output in and out, "
                          f"from {once_level}"))
    terms.append(_transform_term(c.split(), m, share))
    terms.append(_call_term(2, p.parts(), m))
    registers, held = c.registers_needed()
    params = [
        ("algorithm", "depthwise: output rows x output pixels of one channel per register tile"),
        ("lanes", f"{lanes} f32 = {lanes * 32}-bit vectors of output pixels"),
        ("tile", f"{c.tile}: {held} = {registers} of {m.registers} registers, accumulators at most a third "
                 f"(each tap's loads are issued ahead of its FMAs); {m.fma.in_flight:.1f} FMAs in flight cover "
                 "the latency"),
        ("epilogue", ep.describe(c.epilogue)),
        ("threads", _threads_reason(p)),
    ]  # fmt: skip
    return terms, params


def depthwise_candidates(shape: ConvShape, machine: Machine, target: Target, threads: int,
                         epilogue: ep.Epilogue) -> list[ConvPlan]:  # fmt: skip
    """Every depthwise plan the model scores: widths × tiles of rows × vectors."""
    if not shape.depthwise:
        return []
    registers = min(machine.registers, target.vector_registers)
    plans = []
    for lanes in vector_widths(machine, target):
        for mr in range(1, min(MAX_MR, shape.out_height) + 1):
            for nv in range(1, min(MAX_NV, ceil_div(shape.out_width, lanes)) + 1):
                if mr * nv + 2 <= registers and mr * nv <= registers * DEPTHWISE_REGISTER_SHARE:
                    plan = ConvPlan(DepthwiseConfig(shape, lanes, mr, nv, epilogue), threads, "groups")
                    if threads == 1 or plan.split_units() > 1:
                        plans.append(plan)
    return plans


def _blocked_tiles(c: BlockedConfig) -> list[tuple[int, int, int]]:
    """(count per output row, pixels, taps) of a blocked kernel's tiles: the interior in
    tiles of nv pixels and one narrower rest, the border pixels alone with their taps."""
    s = c.shape
    columns = Columns.of(s.width, s.out_width, s.kernel[1], s.strides[1], s.dilations[1], s.pads[1])
    full, rest = divmod(columns.interior_end - columns.interior_begin, c.nv)
    kinds = [(full, c.nv, s.taps), (1 if rest else 0, rest, s.taps)]
    kinds += [(1, 1, s.kernel[0] * len(kws)) for _, kws in columns.border if kws]
    return [k for k in kinds if k[0] and k[1]]


def _blocked_once(c: BlockedConfig, m: Machine, share: float, weights: int,
                  streamed: tuple[str, float, str] | None = None) -> list[Term]:  # fmt: skip
    """The output stored once, the epilogue, and the input, weights and output brought in
    once from the level that holds them (the weights from where the model leaves its
    constants, `Machine.constants_at`), with what the kernel `streamed` besides (level,
    bytes, why) from its level; no input transform: the borders are skipped, not padded."""
    s = c.shape
    outputs = math.prod(s.output_shape)
    terms = [Term("c tile", outputs * F32 / m.bandwidth["L1"] * share, "each output vector stored once, whole")]
    if c.epilogue:
        terms.append(epilogue_term(c.epilogue, outputs // c.lanes, outputs, m, share))
    inputs, written = math.prod(s.input_shape) * F32 * share, outputs * F32 * share
    once = inputs + written + weights * F32  # each once: what the level is judged by
    data = inputs + OUTPUT_TRANSFERS * written
    level, w_level = m.holding_level(once, whole_problem=True), m.constants_at(once)
    traffic: dict[str, list[tuple[float, str]]] = {}
    for where, size, what in ((level, data, "the input once and the output in and out (this thread's share)"),
                              (w_level, weights * F32, "the weights once")):
        if where != "L1":
            traffic.setdefault(where, []).append((size, f"{size / 1e6:.2f} MB: {what} from {where}"))
    if streamed is not None and streamed[0] != "L1":
        traffic.setdefault(streamed[0], []).append(streamed[1:])
    for name, parts in traffic.items():
        terms.append(Term(f"memory {name}", sum(size for size, _ in parts) / m.bandwidth[name],
                          "; ".join(why for _, why in parts)))
    return terms


def _blocked_tile_ns(c: BlockedConfig, m: Machine, per_step: Callable[[int], tuple[float, float, float]],
                     overlapped: bool = False) -> tuple[float, float, float]:  # fmt: skip
    """(FMA issue, latency wait, load wait) of one output row's tiles, per step of the
    micro-kernel (a tap, or a channel and tap): per_step(pixels) = (accumulators,
    vector loads, broadcasts) of a tile of that many pixels; `overlapped` as
    `microkernel_ns`."""
    totals = [0.0, 0.0, 0.0]
    for count, pixels, taps in _blocked_tiles(c):
        for i, ns in enumerate(microkernel_ns(*per_step(pixels), m, overlapped)):
            totals[i] += count * taps * ns
    return totals[0], totals[1], totals[2]


def _blocked_params(p: ConvPlan, m: Machine, algorithm: str, layout: str) -> list[tuple[str, str]]:
    c: BlockedConfig = p.config
    registers, held = c.registers_needed()
    return [("algorithm", algorithm), ("layout", layout),
            ("tile", f"{c.tile}: {held} = {registers} of {m.registers} registers"),
            ("epilogue", ep.describe(c.epilogue)), ("threads", _threads_reason(p))]  # fmt: skip


def _blocked_depthwise_terms(p: ConvPlan, m: Machine, share: float) -> tuple[list[Term], list[tuple[str, str]]]:
    c: BlockedDepthwiseConfig = p.config
    s = c.shape

    def per_tap(pixels: int) -> tuple[float, float, float]:  # an FMA per pixel, its share of the row's loads
        reads = BlockedDepthwiseConfig(s, c.lanes, pixels).inputs_per_row()
        return pixels, (reads + s.kernel[1]) / s.kernel[1], 0

    issue, _, loads = _blocked_tile_ns(c, m, per_tap)
    # A tile's chain is its taps, a few dozen FMAs: the row's tiles, independent, run
    # together in the out-of-order window, so the row waits on latency only while its
    # longest chain outlasts the issue of all its FMAs (counted per tile instead, a small
    # image's one-accumulator border pixels made a layer look latency-bound).
    chain = max(taps for _, _, taps in _blocked_tiles(c)) * float(m.fma.latency)
    latency = max(0.0, chain - issue)
    units = c.rows() * share  # the busiest thread's rows (its share of the units: rows or planes)
    terms = [
        Term("fma", issue * units, f"tiles of {c.tile}, {s.taps} taps, at {m.fma_per_ns():.2f} vector FMAs/ns "
                                   "per thread; border pixels one at a time"),
        Term("latency", latency * units, f"a row's longest chain ({s.taps} dependent FMAs) beyond the issue of all "
                                         "its tiles' FMAs, which overlap"),
        Term("loads", loads * units, f"{c.inputs_per_row()} input vectors and {s.kernel[1]} weights per filter row "
                                     "beyond the FMA time, all aligned"),
        *_blocked_once(c, m, share, s.channels * s.taps),
        *([Term("mean", mean_ns(math.prod(s.output_shape), m) * share,
                "each output vector also added to its channels' sum, a load and a store in L1")] if c.mean else []),
        *([Term("band means", PROGRAM_STEP_NS + m.traffic_ns(c.bands * s.batch * s.channels * F32),
                f"one more kernel: the mean of the {c.bands} bands' means, on one thread")]
          if c.mean and c.bands > 1 else []),  # fmt: skip
        _call_term(1, p.parts(), m),
    ]  # fmt: skip
    held = layout_name(c.layout, c.lanes)
    return terms, _blocked_params(p, m, f"depthwise on {held}: output pixels x one vector of channels per register "
                                        "tile", f"{held}: every activation load and store one aligned vector")  # fmt: skip


def _blocked_direct_terms(p: ConvPlan, m: Machine, share: float) -> tuple[list[Term], list[tuple[str, str]]]:
    c: BlockedDirectConfig = p.config
    s = c.shape
    vectors = min(c.mv, s.out_per_group // c.lanes)
    kc = c.kc or s.in_per_group
    chain = kc * max(taps for _, _, taps in _blocked_tiles(c))
    overlapped = chain <= OVERLAPPED_CHAIN_STEPS
    # per (channel of the group, tap): an FMA per pixel and vector, mv weight loads, a
    # broadcast per pixel
    issue, latency, loads = _blocked_tile_ns(c, m, lambda pixels: (pixels * vectors, vectors, pixels), overlapped)
    units = c.rows() * share * s.in_per_group
    if overlapped:  # a pass's row waits only while its longest chain outlasts its issue
        latency = max(0.0, chain * float(m.fma.latency) - issue * kc) * c.k_blocks() / s.in_per_group
    weights = s.out_channels * s.in_per_group * s.taps
    # every pixel tile streams its channel tile's weights of the pass from the level that holds them
    tile_weights = s.in_per_group * s.taps * vectors * c.lanes * F32
    pass_weights = tile_weights * kc // s.in_per_group
    level = m.holding_level(pass_weights)
    tiles = c.rows() * share * sum(count for count, _, _ in _blocked_tiles(c))
    streamed = (level, tiles * tile_weights, f"{pass_weights / 1e3:.0f} kB of weights per channel tile and pass "
                                             f"for every pixel tile from {level}")  # fmt: skip
    outputs = s.batch * s.out_channels * s.out_height * s.out_width
    chains, per_output = chain_ns(outputs, s.in_per_group, kc, m, s.taps)
    plane = s.out_height * s.out_width * vectors * c.lanes * F32
    terms = [
        _input_again(c, m, share, pass_weights),
        output_passes(c.k_blocks(), "input-channel", outputs * F32 * share,
                      m.holding_level(plane + pass_weights), m),
        Term("fma", issue * units, f"tiles of {c.tile}, {s.in_per_group} channels x {s.taps} taps, at "
                                   f"{m.fma_per_ns():.2f} vector FMAs/ns per thread; border pixels one at a time"),
        Term("latency", latency * units, f"a pass's row waits while its longest chain ({chain} dependent FMAs) "
                                         "outlasts the issue of all its tiles' FMAs" if overlapped else
                                         f"tiles with fewer than {m.fma.in_flight:.1f} accumulators wait on FMA latency"),
        Term("loads", loads * units, f"{vectors} weight loads and a broadcast per pixel per step beyond the FMA time"),
        Term("c tile", chains * share, f"the tiles' sums saved and reloaded once per chain ({per_output})"),
        *_blocked_once(c, m, share, weights, streamed),
        _call_term(1, p.parts(), m),
    ]  # fmt: skip
    source, result = layout_name(c.layout if c.blocked_input else "nchw", c.lanes), layout_name(c.layout, c.lanes)
    params = _blocked_params(p, m, f"direct to {result}: output pixels x vectors of output channels per register "
                                   "tile", f"input {source}, output {result}")  # fmt: skip
    if c.kc:
        params.append(("passes", f"{c.k_blocks()} passes of {c.kc} input channels over each plane: a pass's weights "
                                 f"({pass_weights / 1e3:.0f} kB) fit {DIRECT_PASS_L1_SHARE:.0%} of L1, the tile's "
                                 f"{tile_weights / 1e3:.0f} kB do not"))  # fmt: skip
    return terms, params


def _input_again(c: BlockedDirectConfig, m: Machine, share: float, tile_weights: float) -> Term:
    """Every channel tile after a thread's first reads its group's input again, a run of
    each channel block's (or NCHW channel's) row at a time. Through a 1x1 window each
    line is read once per tile, and runs shorter than a page are fresh streams the
    prefetchers never get ahead of: a stall on the FMAs. Longer runs they follow, and a
    wider window reads each line for several taps: those re-reads overlap."""
    s = c.shape
    image = math.prod(s.input_shape) * F32
    run = s.width * F32 * (1 if not c.blocked_input else s.channels if c.layout == "nhwc" else c.lanes)
    stalls = run < PAGE_BYTES and s.kernel == (1, 1)
    again = max(0.0, c.group_tiles() - 1) * image * share if stalls else 0.0
    level = m.holding_level(image + tile_weights)
    head = f"the {image / 1e3:.0f} kB input read again by each more channel tile in runs of {run} B"
    return Term(STALL_TERM, again / m.bandwidth[level], f"{head}: {again / 1e6:.1f} MB from {level}" if again else
                f"{head}, overlapping the FMAs")  # fmt: skip


def mean_ns(outputs: int, m: Machine) -> float:
    """What a kernel pays to also sum its `outputs` (f32) per channel as it stores them:
    a vector of sums loaded and stored again per output vector, at L1's bandwidth."""
    return 2 * outputs * F32 / m.bandwidth["L1"]


OVERLAPPED_CHAIN_STEPS = 128
"""The longest chain of dependent FMAs (a tile's pass: its input channels x taps) that
the out-of-order window, a few hundred instructions, overlaps with the row's other
tiles, as a depthwise row's: a row then waits on latency only while its longest chain
outlasts the issue of all its tiles' FMAs, not tile by tile."""

DIRECT_PASS_L1_SHARE = 0.5
"""The share of L1's capacity a direct convolution's pass may fill with its channel
tile's weights (`BlockedDirectConfig.kc`): the rest holds the input rows its tiles read
and the output lines they add to."""


def direct_kc(shape: ConvShape, mv: int, lanes: int, m: Machine) -> int:
    """Input channels per pass over the output plane of a direct convolution's mv-vector
    channel tile: the most whose weights fit DIRECT_PASS_L1_SHARE of L1; 0 (one pass)
    when all of the group's do."""
    per_channel = shape.taps * min(mv, shape.out_per_group // lanes) * lanes * F32
    kc = max(1, int(dict(m.capacities())["L1"] * DIRECT_PASS_L1_SHARE) // per_channel)
    return kc if kc < shape.in_per_group else 0


MAX_PIXELS = 14
"""Most output pixels per blocked tile the model scores: wider tiles only shorten the
pixel loop further, and the registers run out first at 3x3 (14 + 16 inputs + 1)."""


def blocked_candidates(shape: ConvShape, machine: Machine, target: Target, threads: int,
                       epilogue: ep.Epilogue, mean: bool = False) -> list[ConvPlan]:  # fmt: skip
    """Every channel-blocked plan the model scores (`kernels.nchwc`), at the target's
    widest vectors, the block size of the whole model: depthwise tiles of pixels, direct
    tiles of pixels × channel vectors reading NCHW (`choose` adds the best one's twin
    reading NCHW[c], which costs the same: a broadcast per input value either way),
    each in one pass over its input channels and, where a tile's weights outgrow the L1
    share, in passes of `direct_kc` channels;
    with `mean`, the depthwise ones that also write the channel means."""
    lanes = target.f32_lanes
    if target.scalable or lanes not in machine.fma_by_lanes or shape.out_channels % lanes:
        return []
    registers = min(machine.registers, target.vector_registers)
    configs: list[BlockedConfig] = []
    split: ConvSplit = "units"
    if shape.depthwise:
        bands = depthwise_bands(shape, machine, threads)
        split = "bands" if bands > 1 else split
        configs = [BlockedDepthwiseConfig(shape, lanes, nv, epilogue, mean=mean, bands=bands)
                   for nv in range(1, MAX_PIXELS + 1)]  # fmt: skip
    elif shape.out_per_group % lanes == 0 and not shape.pointwise:  # a pointwise layer is gemm1x1's
        configs = [BlockedDirectConfig(shape, lanes, nv, mv, False, epilogue, kc=kc)
                   for mv in range(1, min(MAX_NV, shape.out_per_group // lanes) + 1)
                   for kc in dict.fromkeys((0, direct_kc(shape, mv, lanes, machine)))
                   for nv in range(1, MAX_PIXELS + 1)]  # fmt: skip
    plans = [ConvPlan(c, threads, split) for c in configs if c.registers_needed()[0] <= registers]
    return [p for p in plans if threads == 1 or p.split_units() > 1]


def depthwise_bands(shape: ConvShape, machine: Machine, threads: int) -> int:
    """A band of output rows per thread where the threads would divide an image's
    channel blocks (images not a multiple of the threads), its input outgrows a core's
    L2, and its rows divide evenly among the threads (channel means then summed per
    band, and averaged over the bands by one more small kernel).
    The layers around a depthwise one (pointwise products) split pixels: with bands
    each thread reads the rows it wrote, from its own L3, instead of half its channels'
    rows from the other core's; a smaller input stays in the L2s, where one long run of
    whole channel blocks per thread streams faster than each block's band apart."""
    fits = machine.holding_level(math.prod(shape.input_shape) * F32) in ("L1", "L2")
    divided = threads > 1 and shape.batch % threads != 0
    return threads if divided and not fits and shape.out_height % threads == 0 else 1


def _threads_reason(p: ConvPlan) -> str:
    if p.parts() == 1:
        return f"{p.threads}: one block (a second would cost more in dispatch than it saves)"
    if p.split == "bands" and isinstance(p.config, WinogradConfig):
        return f"{p.threads}: a band of {p.config.band_rows} tile rows each, its products on its thread alone"
    if p.split == "bands":
        return (f"{p.threads}: a band of {p.shape.out_height // p.config.bands} output rows each (every channel "
                "block's), the rows the pixel-split layers around it write and read on that thread")
    if p.split == "groups" and isinstance(p.config, GemmConvConfig):
        return f"{p.threads}: the {p.split_units()} image-groups' products, {p.parts()} side by side, each on a thread"
    return f"{p.threads}: the {p.split_units()} {p.split} split into {p.parts()} blocks"


def _gemm_prediction(p: ConvPlan, base: Machine) -> Prediction:
    """The matmul model's prediction of one image-group's product, times the image-groups
    (split by image-groups: times the busiest thread's, each call's dispatch added),
    plus the transform and window copy of im2col."""
    c: GemmConvConfig = p.config
    s = c.shape
    gemm = predict_matmul(p.gemm_plan(), base, p.threads)
    m = base.at(c.lanes, p.threads)
    count, each = s.batch * s.group, "image-groups"
    if p.split == "groups":
        count, each = math.ceil(count / p.threads), f"image-groups on the busiest thread, {p.parts()} side by side"
        gemm = replace(gemm, terms=tuple(replace(t, ns=t.ns + m.dispatch_ns, why=f"{t.why} + thread dispatch")
                                         if t.name == "call" else t for t in gemm.terms))  # fmt: skip
    terms = [replace(t, ns=t.ns * count, why=t.why + (f" (x{count} {each})" if count > 1 or p.split == "groups"
                                                        else "")) for t in gemm.terms]  # fmt: skip
    if c.algorithm == "im2col":
        im2col = c.im2col()
        share = busiest_share(im2col.rows, p.threads)
        written = im2col.size * F32 * count
        moved = 2 * written
        terms.append(_transform_term(c.split(), m, busiest_share(s.batch * s.channels, p.threads)))
        terms.append(Term("im2col", (m.traffic_ns(moved / count) * count + m.first_touch_ns(written)) * share,
                          f"the windows copied into a {im2col.rows}x{s.out_height * s.out_width} matrix "
                          f"({moved / 1e6:.2f} MB written and read){_first_touch(written, m)}"))  # fmt: skip
    product = (f"its transpose {c.gemm.shape} (output channels in the lanes)" if c.gemm.transposed
               else str(s.gemm_shape()))
    params = [("algorithm", f"{c.algorithm}: the matmul model's choice for {product} per image-group"),
              *[(name, _threads_reason(p) if name == "threads" and p.split == "groups" else why)
                for name, why in gemm.parameters if name != "algorithm"]]  # fmt: skip
    return Prediction(p, tuple(terms), total_ns(terms), tuple(params))


def _winograd_prediction(p: ConvPlan, base: Machine) -> Prediction:
    """The matmul model's prediction of one of the T² products, times T², plus the phase
    split and the two generated transforms: their vector ops at the FMA issue rate, their
    loads and stores at the L1 load rate, and V and M written and read back from where
    they lie."""
    c: WinogradConfig = p.config
    s = c.shape
    t2 = c.t**2
    product = p.gemm_plan()
    gemm = predict_matmul(MatmulPlan(replace(c.gemm, batch=1), product.threads, product.split), base)
    terms = [replace(t, ns=t.ns * t2, why=f"{t.why} (x{t2} products)") if t.name != "call" else t
             for t in gemm.terms]  # fmt: skip
    m = base.at(c.lanes, p.threads)
    terms += _winograd_passes(c, p, m)
    outputs = math.prod(s.output_shape)
    terms.append(_filters_term(c, p, m))
    terms.append(_transform_term(c.split(), m, busiest_share(s.batch * s.channels, p.threads)))
    if c.epilogue:
        terms.append(epilogue_term(c.epilogue, ceil_div(outputs, c.lanes), outputs, m, 1.0 / p.parts()))
    params = [("algorithm", f"winograd F({c.m}x{c.m},3x3): {t2} multiplies per {c.m * c.m} outputs and channel "
                            f"pair instead of {9 * c.m * c.m}; {t2} products of {c.gemm_shape()}"),
              *[(name, _threads_reason(p) if name == "threads" and c.bands > 1 else why)
                for name, why in gemm.parameters if name != "algorithm"]]  # fmt: skip
    return Prediction(p, tuple(terms), total_ns(terms), tuple(params))


def _winograd_passes(c: WinogradConfig, p: ConvPlan, m: Machine) -> list[Term]:
    """The two transform passes, for the busiest thread's share: of the channels (the
    products divided by rows) or of the tile rows (a band each:
    `lowering._winograd_ranges`); V and M between them and the products; and what each
    thread reads that another wrote."""
    s, t2, parts = c.shape, c.t**2, p.parts()
    b_t, _, a_t = TRANSFORMS[c.m]
    v_bytes, m_bytes, xt_bytes = c.v_size() * F32, c.m_size() * F32, c.split().size * F32
    in_bands = c.bands > 1
    passes = (("transform in", s.channels, 2 * c.t * transform_ops(b_t), xt_bytes + v_bytes, v_bytes, "input"),
              ("transform out", s.out_channels, (c.t + c.m) * transform_ops(a_t),
               m_bytes + math.prod(s.output_shape) * F32, 0, "output"))  # fmt: skip
    terms = []
    for name, channels, ops, moved, scratch, side in passes:
        vectors = s.batch * channels * c.tiles_h * ceil_div(c.tiles_w, c.lanes)
        share = c.band_rows / (s.batch * c.tiles_h) if in_bands else busiest_share(channels, p.threads)
        issue = vectors * (ops / m.fma_per_ns() + 2 * t2 / m.vector_loads_per_ns())
        terms.append(Term(name, (issue + m.traffic_ns(moved) + m.first_touch_ns(scratch)) * share,
                          f"{side} tiles: {ops} vector ops and {t2} loads and stores per {c.lanes} tiles; "
                          f"{moved / 1e6:.1f} MB read and written{_first_touch(scratch, m)}"))  # fmt: skip
    # the products' B (V) and C (M) come from and go to the transforms' passes, not warm;
    # divided by rows, each thread's products read all of V
    level = m.holding_level(v_bytes + m_bytes, whole_problem=True)
    read = (v_bytes + m_bytes) / parts if in_bands else v_bytes + m_bytes / parts
    terms.append(Term(STALL_TERM, read / m.bandwidth[level] + m.first_touch_ns(m_bytes / parts),
                      f"the products read V and write M ({read / 1e6:.1f} MB a thread) in {level}, "
                      f"between the transform passes{_first_touch(m_bytes / parts, m)}"))  # fmt: skip
    elsewhere = (parts - 1) / parts * (xt_bytes / parts if in_bands else v_bytes)
    terms.append(Term(CROSS_CORE_TERM, elsewhere / m.bandwidth[CROSS_CORE_LEVEL],
                      f"{elsewhere / 1e6:.2f} MB a thread of what other threads wrote: " +
                      ("the split input's planes, by the input transform" if in_bands else
                       "V, by the products, which the input transform writes again")))  # fmt: skip
    return terms


def _filters_term(c: WinogradConfig, p: ConvPlan, m: Machine) -> Term:
    """The transformed filters U (T² × Cout × Cin) fetched from the level that holds all
    T² of them, beyond what the products' prediction charged: it prices one product, whose
    filters (Cout × Cin) it takes from the level holding them alone. The products stream
    U once, a broadcast per FMA with few tile columns, and wait on it. Inside a model
    whose inference outgrows the L3, U comes from DRAM whatever its size
    (`Machine.in_model`)."""
    product = c.gemm_shape()
    one = product.m * product.k * F32
    whole = c.t**2 * one
    level_one, level_whole = m.holding_level(one, whole_problem=True), m.constants_at(whole)
    read = whole * (busiest_share(c.gemm.row_tiles(), p.threads) if p.split == "rows" else 1.0)
    extra = read * (1 / m.bandwidth[level_whole] - 1 / m.bandwidth[level_one])
    evicted = " (the inference outgrows the L3: the rest of it evicts them)" if m.constants_level else ""
    return Term("filters", max(0.0, extra), f"U ({whole / 1e6:.1f} MB) from {level_whole}{evicted}, where one "
                                            f"product's filters ({one / 1e6:.2f} MB) were taken from {level_one}")


WINOGRAD_ERROR = {2: 2.0, 4: 7.0}
"""Each Winograd tile's rounding error as a multiple of a direct sum's, on one layer
(relative rms against float64, 64-512 channels: docs/calibration.md): its products sum
transformed values whose output transform then cancels, amplifying their rounding."""

ACCURATE_ERROR = 3.0
"""The most rounding error, as a multiple of a direct sum's, that a layer may add by
default: deep networks amplify each layer's error by hundreds, and a segmentation
network's output (DeepLabV3-ResNet50) with F(4,3) layers left onnxruntime by more than
1e-4 of its range, where with F(2,3) alone it stayed within."""


def winograd_tiles(fast: bool) -> tuple[int, ...]:
    """Winograd's output tiles scored: those within ACCURATE_ERROR, or all when the build
    asks for speed over accuracy (`fast`)."""
    return tuple(m for m in TRANSFORMS if fast or WINOGRAD_ERROR[m] <= ACCURATE_ERROR)


def winograd_plans(shape: ConvShape, profile: HardwareProfile, target: Target, threads: int,
                   epilogue: ep.Epilogue = ()) -> list[ConvPlan]:  # fmt: skip
    """F(2,3) and F(4,3), each with the matmul model's choice for its product, where the
    layer and the target allow Winograd."""
    if not applies(shape, target):
        return []
    return [p for m in TRANSFORMS if (p := winograd_plan(shape, m, profile, target, threads, epilogue)) is not None]


def winograd_plan(shape: ConvShape, m: int, profile: HardwareProfile, target: Target, threads: int,
                  epilogue: ep.Epilogue = (), split: str = "rows") -> ConvPlan | None:  # fmt: skip
    """Winograd F(m,3) with the matmul model's choice for its product: divided by rows
    (output channels) among the threads, or, with `split` "bands", a band of tile rows
    per thread, each band's product on that thread alone (None where the layer has
    fewer tile rows than threads)."""
    bands = threads if split == "bands" else 1
    if bands > 1 and shape.batch * ceil_div(shape.out_height, m) < bands:
        return None
    gemm = choose_matmul(WinogradConfig(shape, m, 1, None, bands=bands).gemm_shape(), profile, target,
                         1 if bands > 1 else threads, a_constant=True, split="rows").best.plan
    config = WinogradConfig(shape, m, gemm.config.lanes, batched(gemm.config, shape, m), epilogue, bands)
    return ConvPlan(config, threads, split) if bands > 1 else ConvPlan(config, gemm.threads, gemm.split)


def winograd_multiply_adds(shape: ConvShape, m: int) -> int:
    """The multiply-adds of F(m,3)'s products: one per phase, (m+2)² of them."""
    product = WinogradConfig(shape, m, 1, None).gemm_shape()
    return (m + 2) ** 2 * product.m * product.n * product.k


def direct_candidates(shape: ConvShape, machine: Machine, target: Target, threads: int,
                      epilogue: ep.Epilogue) -> list[ConvPlan]:  # fmt: skip
    """Every direct plan the model scores: widths × register tiles × splits."""
    registers = min(machine.registers, target.vector_registers)
    plans = []
    for lanes in vector_widths(machine, target):
        m = machine.at(lanes, threads)
        for mr in range(1, min(MAX_MR, shape.out_per_group) + 1):
            for nv in range(1, min(MAX_NV, ceil_div(shape.out_width, lanes)) + 1):
                if mr * nv + nv + 1 > registers:
                    continue
                for kc in channel_blocks(shape, mr, nv * lanes, m):
                    config = DirectConfig(shape, lanes, mr, nv, kc, epilogue)
                    for way in DIRECT_SPLITS if threads > 1 else DIRECT_SPLITS[:1]:
                        plan = ConvPlan(config, threads, way)
                        if threads == 1 or plan.split_units() > 1:
                            plans.append(plan)
    return plans


def reblock_ns(config: Reblock, machine: Machine, threads: int) -> tuple[float, str]:
    """Predicted time of a layout transform between NCHW and NCHW[c] or NHWC, with why:
    the tensor read and written once from the level that holds it, and each L×L square
    transposed in registers, L·log2(L) shuffles at the FMA issue rate (a shuffle per
    FMA slot); the pixels past the last whole square gathered one load slot each; it
    runs as one more step of the program of the layer or model it serves
    (PROGRAM_STEP_NS, and the dispatch to threads), not a call from Python."""
    m = machine.at(config.lanes, threads)
    share = busiest_share(config.units(), threads)
    elements = config.batch * config.channels * config.pixels
    lanes = config.lanes
    squares, gathered = _reblock_work(config, threads)
    shuffles = squares * lanes * max(1, lanes.bit_length() - 1)
    moved = 2 * elements * F32
    step = PROGRAM_STEP_NS + (m.dispatch_ns if threads > 1 else 0.0)
    ns = m.traffic_ns(moved) * share + shuffles / m.fma_per_ns() + gathered / m.broadcast_loads_per_ns() + step
    way = f"to {layout_name(config.layout, lanes)}" if config.to_blocked else "back to NCHW"
    return ns, (f"layout transform {way}: predicted {ns / 1e3:.1f} µs = {moved / 1e6:.2f} MB read and written, "
                f"{squares} {lanes}x{lanes} squares transposed in registers, {gathered} elements gathered, "
                f"+ {step / 1e3:.3f} µs as a step of its program")


def _reblock_work(config: Reblock, threads: int) -> tuple[int, int]:
    """The busiest thread's squares and gathered elements in a layout transform: of its
    channel vectors, all their pixels; or `by_pixels`, of each channel vector, each run
    of its pixels in one image."""
    lanes, pixels, vectors = config.lanes, config.pixels, config.channels // config.lanes
    if not config.by_pixels:
        units = math.ceil(config.units() / max(1, min(threads, config.units())))
        return units * (pixels // lanes), units * (pixels % lanes) * lanes
    work = []
    for begin, end in split(config.units(), threads):
        runs = [min(end, (n + 1) * pixels) - max(begin, n * pixels) for n in range(begin // pixels, -(-end // pixels))]
        work.append((sum(r // lanes for r in runs) * vectors, sum(r % lanes for r in runs) * vectors * lanes))
    return max(work, key=lambda w: w[0] * lanes + w[1])


def transform_ns(shape: ConvShape, p: Prediction, machine: Machine, given: Layout, wanted: Layout,
                 lanes: int) -> float:  # fmt: skip
    """The transform of a layer's input from the `given` layout into the `wanted` one,
    on the plan's threads, through NCHW (back from one blocked layout, then into the
    other), `lanes` at a time (the target's widest vectors: every blocked plan's)."""
    if given == wanted:
        return 0.0
    steps = [(layout, to_blocked) for layout, to_blocked in ((given, False), (wanted, True)) if layout != "nchw"]
    return sum(reblock_ns(Reblock.of(shape.input_shape, lanes, to_blocked, layout), machine, p.plan.threads)[0]
               for layout, to_blocked in steps)  # fmt: skip


def choose_layout(choice: ConvChoice, given: Layout, outputs: dict[Layout, float],
                  machine: Machine) -> tuple[Prediction, str]:  # fmt: skip
    """The plan a layer inside a model runs: the fastest of the choice's algorithms
    counting the transform of its input when the input is held in another layout
    (`given`), and what the readers of its output then pay (`outputs`: the layouts it
    may write, each with its readers' time; a plan writing none of them, as the layers
    writing channel means all may, pays its output's transform back to NCHW); with the reason."""
    s = choice.best.shape

    def cost(p: Prediction) -> tuple[float, float]:
        wanted = input_layout_of(p.config)
        shift = transform_ns(s, p, machine, given, wanted, choice.target.f32_lanes)
        return p.total_ns + shift + written_ns(p, outputs, machine, choice.target.f32_lanes), shift

    options = [(cost(p), p) for p in choice.per_algorithm if layout_of(p.config) in outputs]
    options = options or [(cost(p), p) for p in choice.per_algorithm]
    bound = tie_bound(min(ns for (ns, _), _ in options))
    (_, shift), best = min(options, key=lambda o: (o[0][0] > bound, _reads_elsewhere_in_place(o[1].plan), o[0][0]))
    written = written_ns(best, outputs, machine, choice.target.f32_lanes)
    why = (f"layout: the input is held in {given}; the plan reads {input_layout_of(best.config)} and writes "
           f"{layout_of(best.config)}" + (f", +{shift / 1e3:.1f} µs to transform its input" if shift else "")
           + ("" if len(outputs) > 1 else "; NCHW output: a reader takes no channel blocks (or it has one pixel)")
           + (f"; its readers then take {written / 1e3:.1f} µs" if len(outputs) > 1 or not options else ""))
    return best, why


def written_ns(p: Prediction, outputs: dict[Layout, float], machine: Machine, lanes: int) -> float:
    """What the readers of a plan's output pay (`outputs`, by layout), with the output's
    transform back to NCHW first where they take none of the plan's layout."""
    written = layout_of(p.config)
    if written in outputs:
        return outputs[written]
    back = Reblock.of(p.shape.output_shape, lanes, False, written)
    return outputs["nchw"] + reblock_ns(back, machine, p.plan.threads)[0]


@dataclass(frozen=True)
class ConvChoice(Choice):
    """The model's pick for a layer, the best of each algorithm, and where each loses."""

    def heading(self) -> str:
        s = self.best.shape
        return f"conv {s.describe()} -> {'x'.join(map(str, s.output_shape))}"

    def rate_note(self) -> str:
        return " (the layer's direct flops over the time, also for Winograd, which does fewer)"

    def formula(self) -> str:
        return ("terms (ns; total = softmax(compute, largest memory) + transform + reblock + im2col + filters "
                "+ l1 misses + c passes + packing + call):")

    def runner_up(self, p: Prediction) -> str:
        return (f"  {p.config.algorithm:<8} {layouts_of(p.config):<12} lanes={p.config.lanes} {p.config.tile}: "
                f"{p.total_ns / 1e3:.1f} µs ({p.gflops:.1f} GFLOP/s){_why_not(p, self.best)}")  # fmt: skip

    def best_in(self, inputs: tuple[Layout, ...], outputs: tuple[Layout, ...]) -> Prediction | None:
        """The fastest prediction reading one of the `inputs` layouts and writing one of
        the `outputs` (None if no algorithm does)."""
        fitting = [p for p in self.per_algorithm if input_layout_of(p.config) in inputs and layout_of(p.config) in outputs]
        return _best(fitting) if fitting else None

    def at_nchw_boundary(self) -> ConvChoice:
        """The choice for a layer on its own, which takes and returns NCHW: every plan,
        a channel-blocked one with its input and output transforms (`nchw_boundary`)."""
        machine = Machine.of(self.profile)
        per_algorithm = tuple(nchw_boundary(p, machine, self.target.f32_lanes) for p in self.per_algorithm)
        return replace(self, best=_best(per_algorithm), per_algorithm=per_algorithm)


def nchw_boundary(p: Prediction, machine: Machine, lanes: int) -> Prediction:
    """`p` for a layer on its own: a plan that reads or writes NCHW[c] (blocks of the
    target's widest vectors, `lanes`) or NHWC also pays the transform of the NCHW input
    into that layout and of its output back to NCHW, as `compile_conv2d` runs it."""
    s, read, written = p.shape, input_layout_of(p.config), layout_of(p.config)
    extra = []
    if read != "nchw":
        extra.append(Term("reblock in", transform_ns(s, p, machine, "nchw", read, lanes),
                          f"the NCHW input transformed into {layout_name(read, lanes)} first"))
    if written != "nchw":
        ns, why = reblock_ns(Reblock.of(s.output_shape, lanes, to_blocked=False, layout=written), machine,
                             p.plan.threads)  # fmt: skip
        extra.append(Term("reblock out", ns, f"the output transformed back to NCHW: {why}"))
    if not extra:
        return p
    terms = (*p.terms, *extra)
    return Prediction(p.plan, terms, total_ns(list(terms)), p.parameters)


def layouts_of(config: ConvConfig) -> str:
    """'nchw', 'nchwc' or 'nchw>nchwc': the input's layout, then the output's if another."""
    source, result = input_layout_of(config), layout_of(config)
    return source if source == result else f"{source}>{result}"


def _why_not(p: Prediction, best: Prediction) -> str:
    """The term where a losing algorithm pays most beyond the choice."""
    if p is best:
        return ""
    mine = {t.name: t.ns for t in p.terms}
    theirs = {t.name: t.ns for t in best.terms}
    name = max(mine, key=lambda n: mine[n] - theirs.get(n, 0.0))
    return f"; most lost in {name} (+{(mine[name] - theirs.get(name, 0.0)) / 1e3:.1f} µs)"


def choose(shape: ConvShape, profile: HardwareProfile, target: Target, threads: int | None = None,
           epilogue: ep.Epilogue = (), model_bytes: int = 0, prologue: ep.Epilogue = (),
           mean: bool = False, fast_winograd: bool = False, fastest: bool = False,
           fresh_input: bool = False) -> ConvChoice:  # fmt: skip
    """The plan with the lowest predicted time using at most `threads` threads, for a layer
    on its own or inside a model passing over `model_bytes` bytes per inference; with a
    `prologue` (per-input-channel ops on its input), `_with_prologue`'s; with `mean`
    (each output channel's mean written too), `_with_mean`'s. Winograd's output tiles
    are `winograd_tiles(fast_winograd)`. With `fastest`, only the best plan is wanted,
    not each algorithm and layout's for the layout plan (fewer are scored); with
    `fresh_input`, the layer is the first to read its input since the threads of the
    kernel before it wrote it (`Machine.fresh_input`)."""
    machine = Machine.of(profile)
    budget = min(threads or machine.cores, machine.cores)
    machine = replace(machine.in_model(model_bytes, budget), fresh_input=fresh_input)
    if prologue:
        return _with_prologue(shape, profile, target, budget, epilogue, prologue, machine, fastest)
    if mean:
        return _with_mean(shape, profile, target, budget, epilogue, machine)
    plans = [p for t in sorted({1, budget})
             for candidates in (direct_candidates, depthwise_candidates, blocked_candidates)
             for p in candidates(shape, machine, target, t, epilogue)]  # fmt: skip
    groups = [Group.of(p, fma_floor_ns(shape.flops / 2, p.config.lanes, p.threads, machine), _kind(p.config))
              for p in plans]  # fmt: skip
    predictions = promising_predictions(groups, None if fastest else lambda p: _kind(p.config),
                                        lambda p: predict(p, machine))  # fmt: skip
    # A product in NCHW (Winograd's, or a GEMM's) is not scored where a plan in NCHW
    # already beats its floor, its multiply-adds at the fastest FMA rate: a matmul
    # decision took 8-15 ms, a third of a Winograd layer's. Safe inside a model too: the
    # plan that beats it reads and writes the same layouts, so both pay the same
    # transforms. F(4,3) first: fewer multiply-adds, so it is the one that prunes.
    unscored: list[str] = []

    def beaten(algorithm: str, multiply_adds: float) -> bool:
        in_nchw = [p.total_ns for p in predictions
                   if (input_layout_of(p.config), layout_of(p.config)) == ("nchw", "nchw")]  # fmt: skip
        floor = min(fma_floor_ns(multiply_adds, width, t, machine)
                    for width in vector_widths(machine, target) for t in {1, budget})  # fmt: skip
        if not in_nchw or floor <= tie_bound(min(in_nchw)):
            return False
        unscored.append(f"{algorithm:<8} nchw: not scored, at least {floor / 1e3:.1f} µs (its multiply-adds at the "
                        f"fastest FMA rate), more than the best NCHW plan's {min(in_nchw) / 1e3:.1f}")  # fmt: skip
        return True

    if applies(shape, target):
        for m in sorted(TRANSFORMS, reverse=True):
            if m not in winograd_tiles(fast_winograd):
                unscored.append(f"winograd F({m},3): not scored, its rounding error is {WINOGRAD_ERROR[m]:.0f}x a "
                                f"direct sum's (built with fast_winograd, it is)")  # fmt: skip
            elif not beaten(f"winograd F({m},3)", winograd_multiply_adds(shape, m)):
                plans = [winograd_plan(shape, m, profile, target, budget, epilogue, split)
                         for split in (WINOGRAD_SPLITS if budget > 1 else WINOGRAD_SPLITS[:1])]  # fmt: skip
                predictions += [predict(p, machine) for p in plans if p is not None]
    predictions += _products(shape, profile, target, budget, epilogue, machine, beaten, fastest=fastest)
    if not predictions:
        raise AutoconfigError(f"no convolution configuration of profile {profile.name} fits {target.name}")
    kinds = _by_kind(predictions)
    per_algorithm = [_best(mine) for mine in kinds.values()]
    plain_input = kinds.get(("direct", False, "nchw", "nchwc"))
    if plain_input and reads_blocked(shape, machine, target):
        twin = _best(plain_input).plan
        per_algorithm.append(predict(replace(twin, config=replace(twin.config, blocked_input=True)), machine))
    return ConvChoice(_best(per_algorithm), tuple(per_algorithm), profile, target, tuple(unscored))


def _with_prologue(shape: ConvShape, profile: HardwareProfile, target: Target, threads: int, epilogue: ep.Epilogue,
                  prologue: ep.Epilogue, machine: Machine, fastest: bool) -> ConvChoice:  # fmt: skip
    """A 1x1 convolution whose input arrives through `prologue`: its products in NCHW,
    which apply the ops to the image as they read it, and, for a scale alone, those
    with the output channels in the lanes, which scale each call's copy of the weights
    instead (`MatmulConfig.prologue`); `fastest` as in `choose`."""
    if not shape.pointwise or shape.group != 1:
        raise AutoconfigError(f"a prologue is computed by an ungrouped 1x1 convolution's product, not "
                              f"{shape.describe()}")  # fmt: skip
    products = _products(shape, profile, target, threads, epilogue, machine, lambda *_: False, prologue, fastest)
    per_algorithm = [_best(mine) for mine in _by_kind(products).values()]
    return ConvChoice(_best(per_algorithm), tuple(per_algorithm), profile, target, ())


def _with_mean(shape: ConvShape, profile: HardwareProfile, target: Target, threads: int, epilogue: ep.Epilogue,
               machine: Machine) -> ConvChoice:  # fmt: skip
    """A depthwise layer that also writes each channel's mean: the channel-blocked
    depthwise kernels, which sum each stored vector of channels (`mean_fits`)."""
    plans = [p for t in sorted({1, threads}) for p in blocked_candidates(shape, machine, target, t, epilogue, True)]
    if not mean_fits(shape, target) or not plans:
        raise AutoconfigError(f"the channel means are computed by a channel-blocked depthwise kernel, not "
                              f"{shape.describe()} on {target.name}")  # fmt: skip
    per_algorithm = [_best([predict(p, machine) for p in plans])]
    return ConvChoice(per_algorithm[0], tuple(per_algorithm), profile, target, ())


def mean_fits(shape: ConvShape, target: Target) -> bool:
    """Whether a layer can write its channel means as it stores its output: a depthwise
    one whose channels fill blocks of the target's (fixed-length) vectors."""
    return shape.depthwise and not target.scalable and shape.channels % target.f32_lanes == 0


def _products(shape: ConvShape, profile: HardwareProfile, target: Target, budget: int, epilogue: ep.Epilogue,
              machine: Machine, beaten: Callable[[str, float], bool],
              prologue: ep.Epilogue = (), fastest: bool = False) -> list[Prediction]:  # fmt: skip
    """The layer's matrix products, each the matmul model's choice (its `fastest` plan
    alone where that is all `choose` wants): gemm1x1 both ways (and channel-blocked or
    NHWC, channels in lanes), im2col; those `beaten` (by an NCHW plan already scored)
    left out; with a `prologue`, those that compute it."""
    predictions = []
    scale_only = [op.kind for op in prologue] == ["scale"]
    # A blocked transposed product differs from the scattered one in its C stores alone,
    # which cost the same for every tile of its one K block: the tile chosen for one is
    # the other's, at the widest vectors. Where the input's or output's channels fill no
    # block, that side is NHWC (one block of all its channels) and the other NCHW[c]:
    # where both fit, NHWC's terms would be NCHW[c]'s, but its kernels ran slower inside
    # a model, so it is not offered. Known limit: a product reading NHWC runs slower than
    # these terms say; one writing NHWC holds to them.
    lanes = target.f32_lanes
    blocks = reads_blocked(shape, machine, target) and shape.group == 1
    nhwc = not blocks and not target.scalable and shape.group == 1 and all(
        math.gcd(lanes, c) in machine.fma_by_lanes for c in (shape.channels, shape.out_channels))  # its transforms
    # A 1x1 layer of a larger stride is a transposed product reading every stride-th
    # pixel in place, offered on blocked operands only: each pixel's channels there are
    # whole lines, where in NCHW each line read would be used at one float in stride.
    strided = shape.unpadded_1x1 and not shape.pointwise and (blocks or nhwc)
    pixels = {"subsample": shape.subsample()}
    for algorithm, transposed in (("gemm1x1", False), ("gemm1x1", True), ("im2col", False)):
        if algorithm == "gemm1x1" and not (shape.pointwise or strided and transposed) or prologue and (
                algorithm == "im2col" or transposed and not scale_only):  # fmt: skip
            continue
        if not transposed and beaten(algorithm, shape.flops / 2):
            continue
        product = transposed_shape(shape.gemm_shape()) if transposed else shape.gemm_shape()
        gemm = choose_matmul(product, profile, target, budget, epilogue, a_constant=not transposed,
                             transposed=transposed, prologue=prologue, local=_local(shape, transposed),
                             fastest=fastest, fresh_input=machine.fresh_input).best.plan  # fmt: skip
        if not (transposed and strided):
            config = GemmConvConfig(shape, algorithm, gemm.config if transposed else
                                    replace(gemm.config, channel_axis="rows"))  # fmt: skip
            predictions.append(predict(ConvPlan(config, gemm.threads, gemm.split), machine))
        if transposed and blocks:  # the same product, channel-blocked
            if gemm.config.lanes != lanes:  # blocks are the widest vectors: that product's own choice
                gemm = choose_matmul(product, profile, target, budget, epilogue, transposed=True, blocked=True,
                                     prologue=prologue, local=_local(shape, True),
                                     fastest=fastest).best.plan  # fmt: skip
            blocked = GemmConvConfig(shape, algorithm, replace(gemm.config, blocked=True, **pixels))
            predictions.append(predict(ConvPlan(blocked, gemm.threads, gemm.split), machine))
        elif transposed and nhwc:  # any channel counts: a pixel's last vector masked
            sides = (shape.channels % lanes != 0, shape.out_channels % lanes != 0)
            gemm = choose_matmul(product, profile, target, budget, epilogue, transposed=True, blocked=True,
                                 nhwc=sides, prologue=prologue, local=_local(shape, True),
                                 fastest=fastest).best.plan  # fmt: skip
            predictions.append(predict(ConvPlan(GemmConvConfig(shape, algorithm, replace(gemm.config, **pixels)),
                                                gemm.threads, gemm.split), machine))  # fmt: skip
    if budget > 1 and shape.batch * shape.group > 1:  # each image-group's product whole on a thread
        predictions += [predict(ConvPlan(p.config, budget, "groups"), machine) for p in predictions
                        if p.config.algorithm == "gemm1x1"]  # fmt: skip
    return predictions


def _local(shape: ConvShape, transposed: bool) -> Split:
    """The split a convolution's product takes among tied plans (`models.matmul.preference`):
    its pixels (B's columns; Aᵀ's rows when transposed), each thread reading the
    pixels' input (im2col's columns of it) that it wrote as their producer, and all the
    weights; or, where the weights outweigh that input `WEIGHTS_OVER_INPUT` times, its
    output channels, each thread reading the other threads' share of the input but only
    its share of the weights."""
    pixels, channels = ("rows", "columns") if transposed else ("columns", "rows")
    product = shape.gemm_shape()  # per image and group: K x N, the input as the product reads it
    image = shape.batch * shape.group * product.k * product.n
    return channels if math.prod(shape.weight_shape) > WEIGHTS_OVER_INPUT * image else pixels


WEIGHTS_OVER_INPUT = 8
"""How many times its input a product's weights outweigh before each thread had better
read the other threads' part of the input than all the weights: a line read from
another core costs its transfer and its invalidation at the producer's next write,
far more when the cores are farther apart (docs/calibration.md)."""


def _by_kind(predictions: list[Prediction]) -> dict[tuple, list[Prediction]]:
    """The predictions by what `choose` keeps the best of (`_kind`)."""
    kinds: dict[tuple, list[Prediction]] = {}
    for p in predictions:
        kinds.setdefault(_kind(p.config), []).append(p)
    return kinds


def _kind(config: ConvConfig) -> tuple:
    """What `choose` keeps the best of: the algorithm, channels in lanes or not, the layouts."""
    return config.algorithm, _channels_in_lanes(config), input_layout_of(config), layout_of(config)


def reads_blocked(shape: ConvShape, machine: Machine, target: Target) -> bool:
    """Whether some plan of the layer reads channel blocks (`kernels.nchwc`): blocks of
    the target's widest vectors, fixed-length, measured by the profile, filled by the
    input and output channels, of a depthwise layer or one whose groups' output channels
    fill vectors."""
    lanes = target.f32_lanes
    return (not target.scalable and lanes in machine.fma_by_lanes and shape.channels % lanes == 0
            and shape.out_channels % lanes == 0 and (shape.depthwise or shape.out_per_group % lanes == 0))


def _best(predictions: list[Prediction]) -> Prediction:
    """`cost.best_of` with the convolution model's preference among ties: fewer threads,
    then more lanes times register tile (fewer instructions per multiply-add)."""
    return best_of(predictions, lambda p: (p.plan.threads, -p.config.lanes * _tile_area(p.config)))


def _reads_elsewhere_in_place(p: ConvPlan) -> bool:
    """Whether every thread reads all of an NCHW input in place, one line per input
    channel and strip of pixels: a transposed gemm1x1 dividing its output channels. The
    other threads' share of the input then comes from their caches a line at a time,
    where a product that packs its input streams it: a slower path that no term prices
    (docs/calibration.md), so among ties (`choose_layout`) another plan is taken."""
    c = p.config
    return (isinstance(c, GemmConvConfig) and c.gemm.transposed and input_layout_of(c) == "nchw"
            and p.parts() > 1 and p.split == "columns")  # fmt: skip


def _channels_in_lanes(config: ConvConfig) -> bool:
    """A gemm1x1 computing the transposed product (output channels in the lanes)."""
    return isinstance(config, GemmConvConfig) and config.gemm.transposed


def _tile_area(config: ConvConfig) -> int:
    return ALGORITHMS[type(config)].tile_area(config)


@dataclass(frozen=True)
class AlgorithmModel:
    """What the convolution model knows about one kind of config, declared once: how
    threads divide its work (its splits, the first the default, and how many parts
    a plan's split has), its predicted time, and its register tile's size (the
    tie-break's)."""

    splits: tuple[ConvSplit, ...]
    units: Callable[[ConvPlan], int]
    predict: Callable[[ConvPlan, Machine], Prediction]
    tile_area: Callable[[ConvConfig], int]


def _direct_units(p: ConvPlan) -> int:
    """(image, group) pairs, row tiles (output channels) or column tiles (pixels)."""
    return {"groups": p.config.groups(), "rows": p.config.row_tiles(), "columns": p.config.col_tiles()}[p.split]


def _product_units(p: ConvPlan) -> int:
    """(image, group) pairs, or the matmul's row or column tiles."""
    return p.config.shape.batch * p.config.shape.group if p.split == "groups" else p.gemm_plan().split_units()


def _winograd_units(p: ConvPlan) -> int:
    return p.config.bands if p.split == "bands" else _product_units(p)


WINOGRAD_SPLITS: tuple[ConvSplit, ...] = ("rows", "bands")
"""Winograd's ways to divide a layer among threads (`winograd_plan`); one thread: rows."""


def _product_tile(c: GemmConvConfig | WinogradConfig) -> int:
    return c.gemm.mr * c.gemm.nv


ALGORITHMS: dict[type, AlgorithmModel] = {
    DirectConfig: AlgorithmModel(DIRECT_SPLITS, _direct_units, _by_terms(_direct_terms), lambda c: c.mr * c.nv),
    DepthwiseConfig: AlgorithmModel(("groups",), lambda p: p.config.planes(), _by_terms(_depthwise_terms),
                                    lambda c: c.mr * c.nv),
    GemmConvConfig: AlgorithmModel(("rows", "columns", "groups"), _product_units, _gemm_prediction, _product_tile),
    WinogradConfig: AlgorithmModel(WINOGRAD_SPLITS, _winograd_units, _winograd_prediction, _product_tile),
    BlockedDepthwiseConfig: AlgorithmModel(("units", "bands"), lambda p: p.config.units(),
                                           _by_terms(_blocked_depthwise_terms), lambda c: c.nv),
    BlockedDirectConfig: AlgorithmModel(("units",), lambda p: p.config.units(), _by_terms(_blocked_direct_terms),
                                        lambda c: c.nv * c.mv),
}  # fmt: skip
"""Every convolution algorithm the model scores, by its config's type: a new algorithm
is a config in `kernels` (its layouts and modules) and a row here."""


def validate_plan(plan: ConvPlan, target: Target) -> None:
    """Reject a forced plan the runtime cannot run."""
    plan.config.validate(target)
    allowed = ALGORITHMS[type(plan.config)].splits
    if plan.split not in allowed:
        raise AutoconfigError(f"{plan.config.algorithm} splits threads by {' or '.join(allowed)}, not {plan.split!r}")
    if plan.config.algorithm == "im2col" and plan.split == "groups":
        raise AutoconfigError("im2col copies each image-group's windows into one matrix, which its threads share: "
                              "it splits threads by rows or columns")  # fmt: skip
    bands = getattr(plan.config, "bands", 1)
    if bands != (plan.threads if plan.split == "bands" else 1):
        raise AutoconfigError(f"{plan.config.algorithm} in bands runs one per thread, not {bands} band(s) on "
                              f"{plan.threads} thread(s)")  # fmt: skip
    if plan.threads < 1:
        raise AutoconfigError(f"threads must be >= 1, got {plan.threads}")
