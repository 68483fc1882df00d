"""The matmul model: from the hardware profile alone, each algorithm's parameters and
predicted time as named terms; the fastest prediction is the choice.

Parameters (the BLIS analytic model, Low et al., ACM TOMS 2016, with corrections):
- register tile mr×nv: every tile with mr·nv + nv + 1 ≤ vector registers is scored;
  fewer than latency×throughput (FMAs in flight, from the profile) accumulators
  leave the FMA units idle, and just that many still lose some (LATENCY_OVERLAP);
  edge tiles compute padded lanes and rows;
- kc: the B micro-panel (kc×nr) stays in L1, taking its share nr/(mr+nr) of the
  ways left after one for the rest: ⌊(W−1)/(1+mr/nr)⌋ ways (the paper's form
  ⌊(W−1)/(1+nr/mr)⌋ gave K blocks that measured far slower). Packed plans are also scored
  with longer K blocks whose B micro-panels stream from L2, all of K among them
  (`kc_options`), since every K block after the first passes over C again;
- mc: the A block (mc×kc) fills the L2 ways left after two B micro-panels, counted
  on the L2's effective capacity — the probe's bandwidth knee, not its sysfs size
  (random 4 KiB page placement conflicts in a physically indexed L2 before it is
  full);
- nc: the B block (kc×nc) in the L3 ways left after the A block, per core sharing it;
- dot (N = 1 only): every mr rows × u partial sums with mr·u + 2 ≤ registers is scored,
  with the same FMA/latency/load terms per step (mr·u FMAs, (mr+1)·u loads), the
  lane reductions, and A streamed once.

Time terms (ns): the micro-kernel's FMA issue, its latency floor and its loads
(L1 bandwidth); masked edge loads; data traffic per memory level against that
level's bandwidth (the largest is the memory term); packing; C tile load/store; C's
passes per K block; call and thread dispatch. Inputs are taken as warm, as in a model run where each layer's
operands were just produced or are reused: the whole problem is read once from the
innermost level that holds it (charging DRAM instead tied every configuration).
Compute and memory overlap, so the total is their soft maximum (an OVERLAP-norm:
the larger, plus a little of the smaller) plus the rest —
except when an unpacked B micro-panel cannot stay in L1: then its loads miss on the
FMA chain's critical path and the L2 term adds instead of overlapping.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from autoconfig.errors import AutoconfigError
from autoconfig.profile import HardwareProfile
from autoconfig.machine import F32, THREAD_DISPATCH_NS, Machine
from autoconfig.models.cost import (
    CROSS_CORE_TERM, OUTPUT_TRANSFERS, OVERLAP, SCALED_TERM, STALL_TERM, Group, Prediction, Term, best_of,
    busiest_share, call_term,
    chain_ns, compute_and_memory_ns, epilogue_term, every_plan, fma_floor_ns, microkernel_ns, output_passes,
    promising_predictions, total_ns, vector_widths,
)  # fmt: skip
from kernels import epilogue as ep
from kernels.matmul import ALGORITHMS, Algorithm, MatmulConfig, MatmulShape, tile_registers
from kernels.sizes import ceil_div, round_up
from kernels.target import Target

UNROLL = 4
"""K-loop copies per trip at most (K blocks are multiples of it): hides the loop's own
instructions."""

TRIP_FMAS = 48
"""FMAs worth one K-loop trip: the 4 copies of a 6x2 tile. A larger tile needs fewer
copies to run as fast, and compiles faster with fewer."""


def k_unroll(mr: int, nv: int) -> int:
    """K-loop copies per trip for an mr x nv tile: the fewest (a power of two, at most
    UNROLL) that give a trip TRIP_FMAS FMAs."""
    copies = 1
    while copies < UNROLL and copies * mr * nv < TRIP_FMAS:
        copies *= 2
    return copies

STORE_FORWARD_FACTOR = 1.5
"""Broadcast's C vector goes store→load every k: store forwarding adds about half an
FMA latency to the dependent chain (x86 forwarding ≈ 5-7 cycles vs FMA 4)."""


MASKED_LOAD_COST = 3.0
"""A masked vector load costs about three plain ones (vmaskmovps on AVX2: 3+ µops on
AMD Zen; NEON has none and LLVM scalarizes it): the unpacked edge column pays it on
every k step, the packed one never (its panels are zero-padded)."""


BROADCAST_ROWS = 8
"""Rows of B that broadcast adds per pass over the C row (its unroll), as OpenBLAS's
gemv kernels do: C traffic drops by that factor and B streams from as many rows at
once, which keeps more misses in flight from DRAM."""

Split = Literal["rows", "columns"]
SPLITS: tuple[Split, ...] = ("rows", "columns")

SCATTER_ELEMENT_COST = 3.0
"""A scattered (or gathered) C element of a transposed product costs three scalar
loads at the profile's broadcast-load rate: vscatterdps on AVX-512 and the
extract-and-store sequence LLVM emits elsewhere write one element at a time, and
more slowly than a load."""

MAX_MR = 8  # rows beyond 8 only add broadcast loads per k with no register to spare
MAX_NV = 8  # wide tiles (1 x 7) give a one-row problem independent accumulators
MAX_SUMS = 8  # dot's partial sums per row: FMAs in flight are 6-8 on the profiled machines


# ---------------------------------------------------------------- parameters


def _l1_kc(nr: int, mr: int, m: Machine) -> tuple[int, int]:
    """(kc, ways): the longest K block whose B micro-panel (kc x nr) fits its share of
    L1's ways, the one left for the rest split between A and B by their widths."""
    b_ways = max(1, math.floor((m.l1_ways - 1) / (1 + mr / nr)))
    return max(UNROLL, b_ways * m.l1_sets * m.line // (nr * F32) // UNROLL * UNROLL), b_ways


def kc_options(shape: MatmulShape, mr: int, nr: int, m: Machine) -> tuple[int, ...]:
    """The K blocks scored for an mr x nr tile: the one whose B micro-panel stays in L1
    and, when K is longer, packed-only ones whose micro-panels stream from L2 instead
    (STREAMED_B_BLOCK_L2_SHARE): equal blocks whose B block fits there, and all of K
    where two of its micro-panels do (each K block beyond the first passes over C
    again, C_PASSES_TERM; the model weighs that against the A block it leaves room
    for). Unpacked (tiled) panels are N floats a row apart, and longer ones are not
    streamed (B rows a page apart)."""
    kc, _ = _l1_kc(nr, mr, m)
    if kc >= shape.k:
        return (shape.k,)
    l2 = dict(m.capacities()).get("L2", 0)
    longest = int(l2 * STREAMED_B_BLOCK_L2_SHARE) // (round_up(shape.n, nr) * F32) // UNROLL * UNROLL
    longer = set()
    if longest > kc:  # equal blocks, each B block within the share
        longer.add(min(shape.k, round_up(ceil_div(shape.k, ceil_div(shape.k, longest)), UNROLL)))
    if 2 * shape.k * nr * F32 <= l2 * STREAMED_B_BLOCK_L2_SHARE:  # this micro-panel and the next
        longer.add(shape.k)
    return (kc, *sorted(b for b in longer if b > kc))


def blockings(shape: MatmulShape, mr: int, nr: int, m: Machine) -> list[tuple[int, tuple[Algorithm, ...]]]:
    """(kc, the blocked algorithms scored with it): tiled and packed with the L1 rule's
    kc, packed alone with a streamed one."""
    first, *streamed = kc_options(shape, mr, nr, m)
    return [(first, ("tiled", "packed"))] + [(kc, ("packed",)) for kc in streamed]


STREAMED_B_BLOCK_L2_SHARE = 0.5
"""A streamed K block keeps its whole packed B block (kc x N), or with all of K the
micro-panel in use and the next, in this much of the L2's effective capacity, so that
every row tile after the first reads its micro-panel from L2 (the A block's panels
pass through the rest)."""


def block_sizes(shape: MatmulShape, mr: int, nr: int, m: Machine,
                kc: int | None = None) -> tuple[int, int, int, Callable[[], list[tuple[str, str]]]]:  # fmt: skip
    """(kc, mc, nc, why) from the cache geometry, `kc` one of `kc_options` (default: the
    first, the L1 rule's); why() gives the reason for each, worded only when asked (a
    decision asks for the sizes of every candidate tile)."""
    l1_kc, b_ways = _l1_kc(nr, mr, m)
    streamed = kc is not None and kc > l1_kc
    if not streamed:
        kc = min(l1_kc, shape.k)
    l2_way = m.l2_sets * m.line
    b_in_l2 = math.ceil(2 * kc * nr * F32 / l2_way)
    a_ways = max(1, m.l2_ways_effective - 1 - b_in_l2)
    mc = min(max(mr, a_ways * l2_way // (kc * F32) // mr * mr), round_up(shape.m, mr))
    if m.l3 is not None:
        ways, sets, sharing = m.l3
        own_ways = ways // max(1, min(m.threads, sharing))  # each thread packs its own B block
        l3_way = sets * m.line
        a_in_l3 = math.ceil(2 * kc * mc * F32 / l3_way)
        b_ways_l3 = max(1, own_ways - 1 - a_in_l3)
        nc = max(nr, b_ways_l3 * l3_way // (kc * F32) // nr * nr)
    all_n = m.l3 is None or nc >= shape.n
    if all_n:
        nc = round_up(shape.n, nr)

    def why() -> list[tuple[str, str]]:
        if streamed:
            block = kc * round_up(shape.n, nr) * F32 <= dict(m.capacities()).get("L2", 0) * STREAMED_B_BLOCK_L2_SHARE
            kept = "its B block" if block else "it and the next"
            kc_why = (f"{kc}{' = K' if kc == shape.k else ''}: B micro-panel {kc}x{nr}x{F32} B streamed from L2 "
                      f"({kept} in {STREAMED_B_BLOCK_L2_SHARE:.0%} of L2), {math.ceil(shape.k / kc)} K block(s) "
                      f"instead of {math.ceil(shape.k / l1_kc)}")  # fmt: skip
        elif kc < shape.k:
            kc_why = f"{kc}: B micro-panel {kc}x{nr}x{F32} B fills {b_ways} of {m.l1_ways} L1 ways"
        else:
            kc_why = f"{shape.k} = K: all of K fits B's L1 share ({b_ways} of {m.l1_ways} ways)"
        mc_why = (f"{mc}: A block {mc}x{kc}x{F32} B in {a_ways} of {m.l2_ways_effective} effective "
                  f"L2 ways (2 B micro-panels take {b_in_l2})")  # fmt: skip
        if m.l3 is None:
            nc_why = "N: no L3 to block for"
        elif all_n:
            nc_why = f"{nc}: all of N fits the L3 share"
        else:
            nc_why = f"{nc}: B block {kc}x{nc}x{F32} B in {b_ways_l3} of the {own_ways} L3 ways per thread"
        return [("kc", kc_why), ("mc", mc_why), ("nc", nc_why)]

    return kc, mc, nc, why


# ---------------------------------------------------------------- prediction


@dataclass(frozen=True)
class MatmulPlan:
    """A config with how the runtime runs it: on how many threads, dividing which tiles
    (split by rows: each thread packs all of B; by columns: only its columns, and all
    of A). Runtime choices, not code: the kernel takes its tile ranges as arguments."""

    config: MatmulConfig
    threads: int = 1
    split: Split = "rows"
    b_weights: bool = False  # B is a layer's weights: read once per inference from where
    # the model leaves its constants (`Machine.in_model`)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise AutoconfigError(f"unknown split {self.split!r}: {', '.join(SPLITS)}")
        if self.threads < 1:
            raise AutoconfigError(f"threads must be >= 1, got {self.threads}")

    @property
    def shape(self) -> MatmulShape:
        return self.config.shape

    def split_units(self) -> int:
        """How many tiles the threads divide: row tiles or column tiles."""
        return self.config.row_tiles() if self.split == "rows" else self.config.col_tiles()

    def parts(self) -> int:
        """Blocks that actually run at once."""
        return min(self.threads, self.split_units())

    def busiest_share(self) -> float:
        """The busiest thread's fraction of the split dimension's rows or columns: its
        whole tiles, where the last tile, which another thread takes, may be partial (N=112
        in 64-column tiles on two threads: 64 of the 112 columns, not one of two tiles)."""
        c = self.config
        extent, size = (c.shape.m, c.mr) if self.split == "rows" else (c.shape.n, c.nr)
        return busiest_share(self.split_units(), self.threads, size, extent)


def predict(plan: MatmulPlan, machine: Machine | HardwareProfile, running: int = 0) -> Prediction:
    """Predicted time of `plan` on the machine, as named terms (a banded plan's: the
    dense product of its depth, `as_dense`); with `running` threads at once, more than
    the plan's own (other products beside it), each at the rates that many share."""
    dense = as_dense(plan)
    if dense is not plan:
        p = predict(dense, machine, running)
        depth, k = plan.config.band[0], plan.shape.k
        if plan.config.band_rows:
            own = (("band", f"{depth} of K={k} columns of A per row tile, the rest zero: priced as the product "
                            f"with K={depth}"),)  # fmt: skip
            return Prediction(plan, p.terms, p.total_ns, (*p.parameters, *own))
        own = (("band", f"{depth} of K={k} rows of B per column tile, the rest zero: priced as the product with "
                        f"K={depth}"),
               ("blocks", f"one row tile of {plan.config.mr} rows, along all of N, per row block: its rows of A "
                          f"stay in L1, and every tile's band of B ({depth}x{plan.shape.n}) with them"))  # fmt: skip
        kept = tuple(line for line in p.parameters if line[0] not in ("kc", "mc", "nc"))
        return Prediction(plan, p.terms, p.total_ns, (*kept, *own))
    base = machine if isinstance(machine, Machine) else Machine.of(machine)
    config = plan.config
    m = base.at(config.lanes, max(plan.threads, running))
    share = plan.busiest_share()
    terms_of = {"broadcast": _broadcast_terms, "dot": _dot_terms}.get(config.algorithm, _blocked_terms)
    terms, params = terms_of(plan, m, share)
    if config.epilogue:
        s = plan.shape
        terms.append(epilogue_term(config.epilogue, s.m * ceil_div(s.n, config.lanes), s.m * s.n, m, share))
    if config.prologue:
        terms.append(_prologue_term(plan, m, share, sum(t.ns for t in terms if t.name == "packing")))
    terms.append(call_term(plan.parts(), m))
    return Prediction(plan, tuple(terms), total_ns(terms), tuple(params))


PAGE_BYTES = 4096
"""The base page on x86-64, AArch64 and RISC-V Linux. Hardware prefetchers follow a
stride only within a page, so an unpacked B micro-panel evicted by set conflicts (it
would fit L1's capacity) whose rows are closer than a page is fetched back from L2
alongside the FMAs (its re-reads are L2 traffic that overlaps). Rows a page or more
apart stall, and so does a panel larger than L1."""

L1_TLB_PAGES = 64
"""Pages the first-level data TLB maps (64 on most current x86 and Arm cores, a few
more on some): an unpacked B micro-panel whose kc rows each lie on their own page,
more of them than this, misses it on every row, as if evicted from L1."""

TLB_MISS_LINES = 3.0
"""An L1 TLB miss that hits the second-level TLB stalls 7-8 cycles on current x86 and
Arm cores, about the time L2 streams three lines in: its price here, at the profile's
L2 bandwidth."""

SEGMENT_START_LINES = 1.0
"""Extra line transfers per B row segment that an unpacked (tiled) kernel streams in
from beyond L2: it reads B as kc row segments of one column tile's width, and the
stream prefetcher only catches up after a segment has begun, so each segment's start
costs about one more line than its length. Packed kernels read B along whole rows
while packing, broadcast along whole rows."""


BAND_LIMIT = 0.5
"""The largest share of K a band may cover and still be scored (`plan_groups`): a resize's
bands cover a few of K's rows; one over half of K saves less than half the work, which
the dense plans' K blocking and B prefetch (a banded tile has neither) can make up."""


def narrow(depth: int, k: int) -> bool:
    """Whether a band `depth` deep (or a column's span of nonzeros) is within
    BAND_LIMIT of K."""
    return depth <= BAND_LIMIT * k


def as_dense(plan: MatmulPlan) -> MatmulPlan:
    """A banded plan (`MatmulConfig.band`) as the dense product whose work it does: each
    column tile multiplies `depth` rows of B, so K = depth; other plans as they are."""
    c = plan.config
    if not c.band[0]:
        return plan
    shape = MatmulShape(c.shape.m, c.shape.n, c.band[0])
    return replace(plan, config=replace(c, shape=shape, band=(0, 0, 0, 0), band_rows=False, kc=shape.k))


def _banded(config: MatmulConfig, spans: tuple[tuple[int, int], ...], m: Machine) -> MatmulConfig:
    """`config` multiplying each tile's band alone. Packed (A in place, one K block):
    column tiles' bands of B's rows, in row blocks of one row tile — a row tile's A rows
    stay in L1 while it passes along all of N, reading every tile's few rows of B
    (depth·N floats: in L1 too), so A is read once and C written once. Tiled: row
    tiles' bands of A's columns, in one K block."""
    if config.algorithm == "tiled":
        found, s = band(spans, config.shape.k, config.mr), config.shape
        _, mc, nc, _ = block_sizes(MatmulShape(s.m, s.n, found[0]), config.mr, config.nr, m)
        return replace(config, band=found, band_rows=True, kc=0, mc=mc, nc=nc)
    return replace(config, band=band(spans, config.shape.k, config.nr), mc=config.mr, nc=0)


def band(rows: tuple[tuple[int, int], ...], k: int, nr: int) -> tuple[int, int, int, int]:
    """The narrowest `MatmulConfig.band` for tiles `nr` wide that covers B's nonzero
    rows, rows[j] = (first, last) of column j (first > last: none), or A's nonzero
    columns per row: each tile's start (t·nr·K) div N (or M) shifted by the least
    such start any tile needs."""
    n = len(rows)
    spans = [(min(f for f, _ in rows[j:j + nr]), max(last for _, last in rows[j:j + nr])) for j in range(0, n, nr)]
    used = [(j * k // n, first, last) for j, (first, last) in zip(range(0, n, nr), spans) if first <= last]
    if not used:
        return (1, k, n, 0)
    shift = min(first - nominal for nominal, first, _ in used)
    depth = max(last + 1 - max(0, nominal + shift) for nominal, _, last in used)
    return (depth, k, n, shift)


def _prologue_term(p: MatmulPlan, m: Machine, share: float, packing_ns: float) -> Term:
    """The prologue's vector ops on B's vectors at the FMA issue rate: a tiled product
    applies it on every read, once per row tile; a packed one once, as it packs B (each
    thread all of B when split by rows, its columns when split by columns), where they
    add only what they take beyond the copy (`packing_ns`); a transposed one before its
    product, as it copies its share of the packed weights, scaled, into its workspace
    (the copy's traffic too, its reads from where the model leaves its weights: a pass
    of its own, `SCALED_TERM`, which no FMA overlaps)."""
    c = p.config
    rows_share, columns_share = _row_and_column_shares(p, share)
    vectors = c.shape.k * ceil_div(c.shape.n, c.lanes) * columns_share
    reads = c.row_tiles() * rows_share if c.algorithm == "tiled" else 1
    ops = ep.vector_ops(c.prologue)
    ops_ns = vectors * reads * ops / m.fma_per_ns()
    if c.transposed:
        copied = c.b_size() * columns_share * F32
        where = f"the model's {m.inference_bytes / 1e6:.1f} MB" if m.inference_bytes else "where they fit"
        return Term(SCALED_TERM, ops_ns + m.constants_read_ns(copied) + m.traffic_ns(copied),
                    f"the weights scaled by row into the workspace: {copied / 1e6:.2f} MB read (from among {where}) "
                    f"and written, a pass of its own")
    if c.algorithm == "tiled":
        return Term("prologue", ops_ns, f"{ep.describe(c.prologue)} on B: {ops} vector ops per vector, read "
                                        f"{c.row_tiles()} times (once per row tile)")  # fmt: skip
    return Term("prologue", max(0.0, ops_ns - packing_ns), f"{ep.describe(c.prologue)} on B as it is packed: "
                f"{ops} vector ops per vector, {ops_ns / 1e3:.1f} µs beside the copy's {packing_ns / 1e3:.1f}")


def _row_and_column_shares(p: MatmulPlan, share: float) -> tuple[float, float]:
    """The busiest thread's fractions of the rows (A) and of the columns (B) it works
    on: the split dimension is shared out, the other is whole."""
    return (share, 1.0) if p.split == "rows" else (1.0, share)


def _first_touch_bytes(p: MatmulPlan, share: float, c_passes: int, b_segment_lines: int = 0) -> float:
    """Bytes the busiest thread brings in once (C `c_passes` times): split by rows, its
    rows of A and C and all of B; by columns, all of A and its columns of B and C.
    B read in row segments of `b_segment_lines` lines pays each segment's start
    (SEGMENT_START_LINES); 0 = along whole rows."""
    a_share, b_share = _row_and_column_shares(p, share)
    shape = p.shape
    a, b, out = shape.m * shape.k, shape.k * shape.n, shape.m * shape.n
    if b_segment_lines:
        b *= 1 + SEGMENT_START_LINES / b_segment_lines
    return (a * a_share + b * b_share + c_passes * out * share) * F32


def _first_touch_why(p: MatmulPlan) -> str:
    if p.threads == 1:
        return "one thread"
    return "each thread: all of B, its rows of A" if p.split == "rows" else "each thread: all of A, its columns of B"


def _tile_kinds(c: MatmulConfig) -> list[tuple[int, int, int]]:
    """(count, rows, vectors) of full, row-edge, column-edge and corner tiles, as
    computed (an edge computed as a full tile counts as one)."""
    shape = c.shape
    full_rows, edge_rows = divmod(shape.m, c.mr)
    full_cols, rest = divmod(shape.n, c.nr)
    edge_vectors = ceil_div(rest, c.lanes)
    if c.full_row_edge and edge_rows:
        edge_rows = c.mr
    if c.full_column_edge and edge_vectors:
        edge_vectors = c.nv
    kinds = [
        (full_rows * full_cols, c.mr, c.nv),
        (full_rows, c.mr, edge_vectors),
        (full_cols, edge_rows, c.nv),
        (1, edge_rows, edge_vectors),
    ]
    return [(n, r, v) for n, r, v in kinds if n and r and v]


def _b_panel_in_l1(shape: MatmulShape, kc: int, nr: int, m: Machine) -> tuple[str, str]:
    """Whether an unpacked B micro-panel (kc rows, N floats apart) stays in L1: 'kept'
    (a way of its sets to spare for A and C), 'crowded' (it fills every way of some of
    L1's sets, leaving the others to A and C), 'conflicts' (evicted by set conflicts
    alone: it would fit L1's capacity spread over all sets) or 'overflows' (larger
    than L1), with the reason.

    Crowded is not a stall: only the lines A and C push out come back from L2, and
    they come back alongside the FMAs.

    Its lines land in sets spaced by the row stride: a stride that is a multiple of
    the set span folds all kc rows into few sets, which cannot hold them. A stride
    that is not a multiple of the line starts rows mid-line, so a row's nr floats
    straddle two lines on most rows (N=255, 6x2: 1.94 lines per row, not 1).
    """
    stride = shape.n * F32
    if stride >= PAGE_BYTES and kc > L1_TLB_PAGES:
        return "conflicts", f"row stride {stride} B puts its {kc} rows on {kc} pages, more than L1's TLB holds"
    lines = _panel_lines(stride, nr * F32, kc, m.line)
    sets = m.l1_sets
    if stride % m.line == 0:
        sets = min(m.l1_sets, m.l1_sets // math.gcd(m.l1_sets, stride // m.line) * math.ceil(nr * F32 / m.line))
    why = f"row stride {stride} B puts its {lines} lines in {sets} L1 sets"
    if lines <= sets * (m.l1_ways - 1):
        return "kept", why
    if sets < m.l1_sets and lines <= sets * m.l1_ways:
        return "crowded", why
    return ("conflicts" if lines <= m.l1_sets * (m.l1_ways - 1) else "overflows"), why


@functools.cache  # a pure function of four ints, asked for the same panels by every candidate
def _panel_lines(stride: int, width: int, rows: int, line: int) -> int:
    """Distinct cache lines of a micro-panel: `rows` rows of `width` bytes, `stride`
    bytes apart, the first starting a line (rows closer than a line share lines)."""
    return len({i for r in range(rows) for i in range(r * stride // line, (r * stride + width - 1) // line + 1)})


def _blocked_terms(p: MatmulPlan, m: Machine, share: float):
    """A tiled or packed plan's terms and parameters: its micro-kernels, the blocks'
    traffic, C brought back per K block, and its packing."""
    c = p.config
    k_blocks = math.ceil(p.shape.k / c.blocks()[0])
    memory, stall = _blocked_memory_terms(p, m, share)
    terms = [*_tile_terms(p, m, share, k_blocks), *memory]
    if c.algorithm == "tiled" or c.transposed:
        terms.append(stall)
    if remote := _remote_segments(p, m):
        terms.append(remote)
    terms.append(_c_passes(p, m, share, k_blocks))
    terms += _packing_terms(p, m, share)
    return terms, _blocked_parameters(p, m)


def _remote_segments(p: MatmulPlan, m: Machine) -> Term | None:
    """A tiled plan divided by rows on several threads, the first to read its computed B
    since its producer's threads wrote it (`Machine.fresh_input`): each thread reads all
    of B in place, in row segments of one column tile, most of them from lines the other
    threads wrote (threads dividing the columns read the pixels they wrote). The first
    row tile of each of its row blocks waits on each such segment (`REMOTE_SEGMENT_NS`);
    a packed plan's copy streams whole rows instead, and a later reader finds the lines
    shared in its own caches."""
    c = p.config
    if not m.fresh_input or c.algorithm != "tiled" or p.b_weights or p.split != "rows" or p.parts() < 2:
        return None
    rows = math.ceil(c.row_tiles() / p.parts()) * c.mr
    segments = math.ceil(rows / c.blocks()[1]) * c.col_tiles() * p.shape.k * (p.parts() - 1) / p.parts()
    return Term(CROSS_CORE_TERM, segments * REMOTE_SEGMENT_NS,
                f"{segments:.0f} row segments of B read in place from lines other threads wrote")


REMOTE_SEGMENT_NS = 14.0
"""What a row segment of B that another core wrote costs a tiled product reading it in
place: its lines cross between the cores at about a ping-pong's latency (SHARED_LINE_NS),
with a few segments in flight as the micro-kernel's k steps run ahead; 14 ns measured
on GoogLeNet's 14x14 layers (docs/calibration.md)."""


def _packing_terms(p: MatmulPlan, m: Machine, share: float) -> list[Term]:
    """A tiled or packed plan's packing: none for tiled ones, nothing to copy for a
    transposed one (B packed when built, A read in place), else `_packing_term`."""
    if p.config.transposed:
        return [Term("packing", 0.0, "none: B was packed when built, A is read in place")]
    return [_packing_term(p, m, share)] if p.config.algorithm == "packed" else []


def _tile_terms(p: MatmulPlan, m: Machine, share: float, k_blocks: int) -> list[Term]:
    """The micro-kernels' FMA issue, latency and load waits, their masked edges and C
    tiles, for the busiest thread."""
    shape, c, lanes = p.shape, p.config, p.config.lanes
    issue = latency = loads = 0.0
    for count, rows, vectors in _tile_kinds(c):
        i, l, ld = microkernel_ns(rows * vectors, vectors, rows, m)
        issue += count * i * shape.k
        latency += count * l * shape.k
        loads += count * ld * shape.k
    c_tile = _c_tile_term(p, m, share, k_blocks)
    edge_loads = 0.0
    if c.algorithm == "tiled" and shape.n % lanes:  # one masked B load per k per edge tile
        edge_loads = math.ceil(shape.m / c.mr) * shape.k * (MASKED_LOAD_COST - 1)
    masked_c = 2 * shape.m * k_blocks * (MASKED_LOAD_COST - 1) * (shape.n % lanes > 0) * (not c.transposed)
    edges = (edge_loads + masked_c) / m.vector_loads_per_ns()
    return [
        Term("fma", issue * share, f"{c.mr}x{c.nv} tiles of {lanes} lanes at "
                                   f"{m.fma_per_ns():.2f} vector FMAs/ns per thread"),
        Term("latency", latency * share, f"tiles with fewer than {m.fma.in_flight:.1f} "
                                         "accumulators wait on FMA latency"),
        Term("loads", loads * share, f"{c.nv} B + {c.mr} A loads per k beyond the FMA time "
                                     "(L1 bandwidth)"),
        Term("edges", edges * share, f"masked loads where N={shape.n} is not a multiple of "
                                     f"{lanes} lanes ({'B every k, ' if edge_loads else ''}C per K block)"),
        c_tile,
    ]  # fmt: skip


def _c_tile_term(p: MatmulPlan, m: Machine, share: float, k_blocks: int) -> Term:
    """C tiles loaded and stored per K block (or scattered, or stored once, whole, into
    a channel-blocked Cᵀ), and the tiles' sums saved per chain, for the busiest thread."""
    shape, c, lanes = p.shape, p.config, p.config.lanes
    chains, per_output = chain_ns(shape.m * round_up(shape.n, lanes), shape.k, c.blocks()[0], m, 1, c.unroll)
    sums = f"; their sums saved and reloaded once per chain ({per_output})"
    if c.blocked:  # each output vector stored once, whole, where it belongs
        return Term("c tile", (shape.m * shape.n * F32 / m.bandwidth["L1"] + chains) * share,
                    "C tiles stored once as whole vectors of a channel-blocked Cᵀ" + sums)
    if c.transposed:  # stored once per K block, gathered back for every later one
        elements = shape.m * round_up(shape.n, lanes) * (2 * k_blocks - 1)
        return Term("c tile", (elements * SCATTER_ELEMENT_COST / m.broadcast_loads_per_ns() + chains) * share,
                    f"C tiles scattered into Cᵀ one element at a time ({k_blocks} K block(s))" + sums)  # fmt: skip
    c_bytes = 2 * shape.m * round_up(shape.n, lanes) * F32 * k_blocks
    return Term("c tile", (c_bytes / m.bandwidth["L1"] + chains) * share,
                f"C tiles loaded and stored once per K block ({k_blocks})" + sums)


def _block_levels(p: MatmulPlan, m: Machine) -> tuple[str, str]:
    """Where the A block and the B block stay while they are re-read."""
    kc, mc, nc = p.config.blocks()
    return m.holding_level(mc * kc * F32), m.holding_level(kc * min(nc, round_up(p.shape.n, p.config.nr)) * F32)


def _tiled_b_rereads(p: MatmulPlan, m: Machine, share: float, per_level: dict[str, float]) -> tuple[float, str]:
    """A tiled plan's B re-read from L2 for every row tile but the first (which brings
    it in): alongside the FMAs where prefetched (added to `per_level`), else a stall;
    returns the stall and why."""
    shape, c = p.shape, p.config
    panel, b_why = _b_panel_in_l1(shape, c.blocks()[0], c.nr, m)
    reread = (math.ceil(shape.m / c.mr) - 1) * shape.k * shape.n * F32
    if panel == "crowded" or (panel == "conflicts" and shape.n * F32 < PAGE_BYTES):
        per_level["L2"] = reread * share
        b_why += (f"; evicted, but rows {shape.n * F32} B apart are prefetched back from L2" if panel == "conflicts"
                  else "; every way of those sets: lines A and C evict come back from L2 alongside the FMAs")
        return 0.0, b_why
    if panel != "kept":  # every micro-kernel re-reads its B micro-panel from L2, stalling
        return reread / m.bandwidth["L2"], b_why
    return 0.0, b_why


def _a_strip_pages(p: MatmulPlan, m: Machine) -> tuple[float, str]:
    """A transposed product's stall on the pages of its A strips, read in place (a strip:
    mr pixels over K channels of an NCHW or NCHW[c] image): when a strip's K rows lie on
    more pages than L1's TLB maps, every micro-kernel misses it at each page it crosses,
    for every column tile (NHWC rows are contiguous: none)."""
    shape, c = p.shape, p.config
    if not c.transposed or c.a_nhwc:
        return 0.0, ""
    image = c.a_pixels() * F32
    steps, stride = (math.ceil(shape.k / c.lanes), image * c.lanes) if c.blocked else (shape.k, image)
    crossings = steps * min(1.0, stride / PAGE_BYTES)
    if crossings <= L1_TLB_PAGES:
        return 0.0, ""
    misses = math.ceil(shape.m / c.mr) * math.ceil(shape.n / c.nr) * crossings
    return (misses * TLB_MISS_LINES * m.line / m.bandwidth["L2"],
            f"; A strips read in place cross {crossings:.0f} pages each, more than L1's TLB maps, per column tile")


def _blocked_memory_terms(p: MatmulPlan, m: Machine, share: float) -> tuple[list[Term], Term]:
    """The blocks' traffic per memory level (A re-read per column tile, B per row block,
    everything once from where the whole problem lies) and a tiled plan's B stall."""
    shape, c = p.shape, p.config
    kc, mc, nc = c.blocks()
    a_level, b_level = _block_levels(p, m)
    a_bytes = shape.m * shape.k * F32 * math.ceil(shape.n / c.nr)  # A block re-read per column tile
    b_bytes = shape.k * shape.n * F32 * math.ceil(shape.m / mc)  # B block re-read per row block
    per_level: dict[str, float] = {}
    stall, b_why = 0.0, "B micro-panels stay in L1"
    if c.algorithm == "tiled":
        stall, b_why = _tiled_b_rereads(p, m, share, per_level)
    elif c.algorithm == "packed" and kc > _l1_kc(c.nr, c.mr, m)[0]:  # a streamed K block (kc_options)
        per_level["L2"] = (math.ceil(shape.m / c.mr) - 1) * shape.k * shape.n * F32 * share
        b_why = "B micro-panels re-read from L2 for every row tile, contiguous, alongside the FMAs"
    once_level = m.holding_level(_first_touch_bytes(p, 1.0, OUTPUT_TRANSFERS), whole_problem=True)
    for level, size, once in ((a_level, a_bytes, shape.m * shape.k * F32), (b_level, b_bytes, shape.k * shape.n * F32)):
        if level == once_level:  # the first of these reads is the first touch, counted once below
            size -= once
        if level != "L1":
            per_level[level] = per_level.get(level, 0.0) + size * share
    segment_lines = 0  # B read along whole rows (by packing)
    if c.algorithm == "tiled" and once_level not in ("L1", "L2"):
        segment_lines = math.ceil(min(c.nr, shape.n) * F32 / m.line)
    if once_level != "L1":
        per_level[once_level] = per_level.get(once_level, 0.0) + _first_touch_bytes(p, share, OUTPUT_TRANSFERS,
                                                                                     segment_lines)  # fmt: skip
    terms = [Term(f"memory {level}", size / m.bandwidth[level],
                  f"{size / 1e6:.1f} MB: A block in {a_level} re-read per column tile, "
                  f"B in {b_level} per row block; A, B, C once from {once_level} ({_first_touch_why(p)})"
                  + (f"; B in row segments of {segment_lines} lines, each start a line more"
                     if segment_lines and level == once_level else ""))
             for level, size in per_level.items()]  # fmt: skip
    pages, a_why = _a_strip_pages(p, m)
    weights, w_why = _weights_in_segments(p, m, share)
    return terms, Term(STALL_TERM, (stall + pages) * share + weights,
                       f"B micro-panel {'evicted' if stall else 'not stalling'}: {b_why}{a_why}{w_why}")


def _weights_in_segments(p: MatmulPlan, m: Machine, share: float) -> tuple[float, str]:
    """A tiled plan's weights read in place from DRAM (the inference outgrows the
    L3): the first row tile of each K block reads B in row segments of one column tile,
    a row apart, which the prefetchers do not run ahead of, so its fetch from memory
    waits instead of overlapping the FMAs (packed weights stream contiguously)."""
    c = p.config
    if not (p.b_weights and c.algorithm == "tiled" and m.constants_level == "DRAM"):
        return 0.0, ""
    lines = math.ceil(min(c.nr, p.shape.n) * F32 / m.line)
    b = p.shape.k * p.shape.n * F32 * (1 + SEGMENT_START_LINES / lines) * _row_and_column_shares(p, share)[1]
    return b / m.bandwidth["DRAM"], f"; the weights ({b / 1e6:.1f} MB) from DRAM in row segments of {lines} lines"


def _packing_term(p: MatmulPlan, m: Machine, share: float) -> Term:
    """Each thread packs the B columns and A rows of its block (split by rows: all of B
    and its share of A once per column block; by columns: its share of B and all of A
    once per column block of its own), reading each operand where it lies and writing
    the panels where its block stays; A one scalar at a time (a load slot per element,
    or its bytes if longer)."""
    shape, c = p.shape, p.config
    nc, nr = c.blocks()[2], c.nr
    a_level, b_level = _block_levels(p, m)
    row_share, col_share = _row_and_column_shares(p, share)
    columns = round_up(shape.n, nr) * col_share
    b_pack = 0 if c.b_packed else shape.k * columns
    a_pack = round_up(shape.m, c.mr) * row_share * shape.k * math.ceil(columns / nc) if c.packs_a else 0
    b_held = m.holding_level(shape.k * shape.n * F32, whole_problem=True)
    a_held = m.holding_level(shape.m * shape.k * F32, whole_problem=True)
    b_ns = b_pack * F32 * (1 / m.bandwidth_one[b_held] + 1 / m.bandwidth_one[b_level])
    if c.b_transposed:  # from Bᵀ by squares transposed in registers: log2 L shuffles per L elements
        b_ns += b_pack * math.log2(c.lanes) / m.elementwise_per_ns()
    a_ns = max(a_pack * F32 * (1 / m.bandwidth_one[a_held] + 1 / m.bandwidth_one[a_level]),
               a_pack / m.broadcast_loads_per_ns())
    b_whose = {"rows": "all of B", "columns": "its columns of B"}[p.split]
    a_whose = {"rows": "its rows of A", "columns": "all of A"}[p.split]
    whose = (f"{b_whose} (A was packed when built)" if c.a_packed
             else "nothing (B was packed when built, A is read in place)" if c.a_in_place
             else f"{a_whose} (B was packed when built)" if c.b_packed
             else f"{b_whose} and {a_whose} (A once per column block)")
    return Term("packing", b_ns + a_ns, f"each thread packs {whose} into zero-padded panels")  # fmt: skip


def _blocked_parameters(p: MatmulPlan, m: Machine) -> list[tuple[str, str]]:
    """The tile, block sizes (forced ones marked) and unroll, each with its reason."""
    shape, c = p.shape, p.config
    kc = c.blocks()[0]
    *derived, reasons = block_sizes(shape, c.mr, c.nr, m, kc if kc in kc_options(shape, c.mr, c.nr, m) else None)
    blocks = [
        (name, why if value == model else f"{value} (forced; the model derives {model})")
        for (name, why), value, model in zip(reasons(), (c.kc, c.mc, c.nc), derived)
    ]
    if c.transposed:  # plan_groups gives it one K block (`_transposed`)
        blocks[0] = ("kc", f"{shape.k} = K: one block, since every further one gathers and scatters all of C again")
    return _parameters(p, ("tile", _register_budget(c, m)), *blocks,
                       ("unroll", f"{c.unroll} copies of the k step per loop trip"))  # fmt: skip


def _c_passes(p: MatmulPlan, m: Machine, share: float, k_blocks: int) -> Term:
    """C's passes per K block (`output_passes`), from the level holding what a thread
    touches between two visits of a C tile: its C column block, the A block and B block
    of one K block."""
    shape, c = p.shape, p.config
    kc, _, nc = c.blocks()
    row_share, col_share = _row_and_column_shares(p, share)
    rows, columns = shape.m * row_share, min(nc, round_up(shape.n, c.nr) * col_share)
    level = m.holding_level((rows * columns + rows * kc + kc * columns) * F32)
    return output_passes(k_blocks, "K", shape.m * shape.n * F32 * share, level, m)


def _parameters(p: MatmulPlan, *own: tuple[str, str], along: str = "") -> list[tuple[str, str]]:
    """(parameter, reason) pairs: the algorithm, its vector width, its own parameters,
    the threads."""
    c = p.config
    return [("algorithm", c.algorithm), ("lanes", f"{c.lanes} f32 = {c.lanes * 32}-bit vectors{along}"), *own,
            ("epilogue", ep.describe(c.epilogue)), ("threads", _threads_reason(p))]  # fmt: skip


def _broadcast_terms(p: MatmulPlan, m: Machine, share: float):
    shape, c = p.shape, p.config
    lanes, u = c.lanes, c.unroll
    vectors = math.ceil(shape.n / lanes)
    steps = shape.m * shape.k  # (row, k) pairs; a pass over the C row covers u of them
    fma = vectors / m.fma_per_ns()
    busy = vectors * max(1 / m.fma_per_ns(), (1 + 1 / u) / m.vector_loads_per_ns())  # B, C/u
    chain = float(m.fma.latency) * (u + STORE_FORWARD_FACTOR) / u  # per k: u FMAs per C round trip
    b_level = m.holding_level(shape.k * shape.n * F32, whole_problem=True)
    terms = [
        Term("fma", steps * fma * share, "one FMA per vector of the C row per (row, k)"),
        Term("loads", steps * (busy - fma) * share, f"a B load per FMA and a C load per {u} "
                                                    "(L1 bandwidth)"),
        Term("latency", steps * max(0.0, chain - busy) * share,
             f"a C row of {vectors} vectors goes store→load→{u} FMAs every {u} k"),
        Term("c tile", 0.0, "C is streamed through L1, not kept in registers"),
    ]  # fmt: skip
    if shape.n % lanes:  # the last vector of each C row: masked B and C loads and C store
        terms.append(Term("edges", steps * 3 * (MASKED_LOAD_COST - 1) / m.vector_loads_per_ns() * share,
                          f"masked B/C accesses where N={shape.n} is not a multiple of {lanes}"))
    traffic: dict[str, tuple[float, str]] = {}  # level: (bytes, why)
    once_level = m.holding_level(_first_touch_bytes(p, 1.0, OUTPUT_TRANSFERS), whole_problem=True)
    if once_level != "L1":
        traffic[once_level] = (_first_touch_bytes(p, share, OUTPUT_TRANSFERS),
                               f"A, B, C once from {once_level} ({_first_touch_why(p)}), C in and out")  # fmt: skip
    if b_level != "L1":  # B from b_level for every row: its first read is one of them
        first_b = shape.k * shape.n * F32 * _row_and_column_shares(p, share)[1]
        size, why = traffic.get(b_level, (first_b, ""))
        traffic[b_level] = (size - first_b + steps * shape.n * F32 * share,
                            f"B ({shape.k * shape.n * F32 / 1e6:.2f} MB, in {b_level}) read per row"
                            + (f"; {why}" if why else ""))  # fmt: skip
    for level, (size, why) in traffic.items():
        terms.append(Term(f"memory {level}", size / m.bandwidth[level], why))
    return terms, _parameters(p, ("unroll", f"{u} rows of B per pass over the C row: {_register_budget(c, m)}"))


def _dot_terms(p: MatmulPlan, m: Machine, share: float):
    """Matrix times vector (N = 1): A streamed once (packed when built: one stream), a
    vector of K per FMA, B's column re-read per row tile; each row's partial sums are
    reduced across lanes at the end."""
    shape, c = p.shape, p.config
    lanes, u = c.lanes, c.unroll
    vectors = math.ceil(shape.k / lanes)
    issue = latency = loads = 0.0
    full_tiles, edge_rows = divmod(shape.m, c.mr)
    for count, rows in ((full_tiles, c.mr), (1 if edge_rows else 0, edge_rows)):
        i, l, ld = microkernel_ns(rows * u, (rows + 1) * u, 0, m)  # u vectors of K per step
        steps = count * vectors / u
        issue, latency, loads = issue + steps * i, latency + steps * l, loads + steps * ld
    tiles = math.ceil(shape.m / c.mr)
    reduce = tiles * (u - 1 + math.log2(lanes)) * float(m.fma.latency)  # a tile's rows reduce side by side
    masked = (shape.m + tiles) * (MASKED_LOAD_COST - 1) / m.vector_loads_per_ns() * (shape.k % lanes > 0)
    terms = [
        Term("fma", issue * share, f"{c.mr} rows x {u} partial sums along K, {lanes} lanes at "
                                   f"{m.fma_per_ns():.2f} vector FMAs/ns per thread"),
        Term("latency", latency * share, f"fewer than {m.fma.in_flight:.1f} partial sums wait on FMA latency"),
        Term("loads", loads * share, f"{c.mr} A + 1 B loads per {c.mr} FMAs beyond the FMA time (L1 bandwidth)"),
        Term("edges", (reduce + masked) * share, "each tile's partial sums added across lanes"
                                                 + (f"; masked loads where K={shape.k} is not a multiple of "
                                                    f"{lanes}" if masked else "")),
    ]  # fmt: skip
    once_level = m.holding_level(_first_touch_bytes(p, 1.0, OUTPUT_TRANSFERS), whole_problem=True)
    b_bytes = shape.k * F32
    b_level = m.holding_level(b_bytes, whole_problem=True)
    traffic: dict[str, float] = {}
    if once_level != "L1":
        traffic[once_level] = _first_touch_bytes(p, share, OUTPUT_TRANSFERS)
    if b_level != "L1":  # B's column again for every further row tile
        traffic[b_level] = traffic.get(b_level, 0.0) + (tiles * share - 1) * b_bytes
    for level, size in traffic.items():
        terms.append(Term(f"memory {level}", max(0.0, size) / m.bandwidth[level],
                          f"A once{' (packed when built)' if c.a_packed else ''}, B's column "
                          f"({b_bytes / 1e3:.1f} kB, in {b_level}) per row tile; "
                          f"A, B, C once from {once_level} ({_first_touch_why(p)})"))  # fmt: skip
    return terms, _parameters(p, ("tile", _register_budget(c, m)), along=" along K")


def _register_budget(c: MatmulConfig, m: Machine) -> str:
    """The tile's registers (the config's own count) and whether they cover the latency."""
    count, held = c.registers_needed()
    covers = "" if c.algorithm == "broadcast" else f"; {m.fma.in_flight:.1f} FMAs in flight cover the latency"
    return f"{c.tile}: {held} = {count} of {m.registers} registers{covers}"


def _threads_reason(p: MatmulPlan) -> str:
    parts, c = p.parts(), p.config
    if parts == 1:
        return f"{p.threads}: one block (a second would cost more in dispatch than it saves)"
    size = "rows" if p.split == "rows" else "columns"
    return (f"{p.threads}: the {p.split_units()} {p.split[:-1]} tiles ({c.mr if p.split == 'rows' else c.nr} "
            f"{size} each) split into {parts} blocks (dispatch costs {THREAD_DISPATCH_NS / 1e3:.1f} µs)")


# ---------------------------------------------------------------- choice


def candidates(*question: object, **options: object) -> list[MatmulPlan]:
    """Every plan the model scores for `plan_groups`' question, built."""
    return every_plan(plan_groups(*question, **options))


def plan_groups(shape: MatmulShape, machine: Machine, target: Target, threads: int,
                epilogue: ep.Epilogue = (), a_constant: bool = False, transposed: bool = False,
                blocked: bool = False, nhwc: tuple[bool, bool] = (False, False),
                prologue: ep.Epilogue = (), b_constant: bool = False, leading: tuple[int, int, int] = (0, 0, 0),
                b_transposed: bool = False, b_band: tuple[tuple[int, int], ...] = (),
                a_band: tuple[tuple[int, int], ...] = (),
                split: Split | None = None) -> list[Group[MatmulPlan]]:  # fmt: skip
    """Every plan the model scores: algorithms × widths × register tiles × splits, built
    only when asked: broadcast and dot plans bounded by `fma_floor_ns`, and for each width
    a group so bounded of a group per tile and split (`_tile_groups`). With `a_constant`
    (A is a layer's weights), the packed algorithm reads A packed once at
    build time instead of packing it on every call, and dot reads each row tile's rows
    interleaved, one stream instead of mr; with `b_constant`, B likewise packed. With `transposed` (operands stored
    transposed, B a constant: `MatmulConfig.transposed`), only packed plans, in one K
    block: every further block would gather and scatter all of C again; `blocked` too,
    its operands channel-blocked at the target's widest vectors (`MatmulConfig.blocked`),
    or, where `nhwc` says so for Aᵀ and for Cᵀ, in one block of all channels; with both
    so, at any width. With a `prologue` (ops on B as it is read), only tiled and packed
    plans (transposed: a scale of the weights' rows). `leading` and `b_transposed`: operands
    read and written in place (`MatmulConfig.leading`): a B stored transposed only packed,
    a strided B not by dot. `b_band`: a constant B's nonzero rows per column (see
    `band`): packed plans reading A in place also multiply only their column tiles'
    bands, where a band is `narrow`; `a_band`: a constant A's nonzero columns
    per row, tiled plans in one K block their row tiles' bands likewise. With `split`,
    plans on several threads divide only that way."""
    registers = min(machine.registers, target.vector_registers)
    in_place = {"leading": leading, "b_transposed": b_transposed}
    splits = SPLITS[:1] if threads == 1 else (split,) if split else SPLITS
    kinds: tuple[Algorithm, ...] = ("packed",) if transposed or b_transposed else ("tiled", "packed")

    def simple(lanes: int) -> list[MatmulConfig]:  # broadcast and dot: their floor is the FMA one
        configs = []
        if not transposed and not prologue and not b_transposed:
            configs.append(MatmulConfig(shape, "broadcast", lanes, unroll=min(BROADCAST_ROWS, registers - 2),
                                        epilogue=epilogue, **in_place))  # fmt: skip
        if not transposed and shape.n == 1 and not prologue and not (b_transposed or leading[1]):
            configs += [MatmulConfig(shape, "dot", lanes, mr=mr, unroll=u, epilogue=epilogue,
                                     a_packed=a_constant and not leading[0], **in_place)
                        for mr in range(1, MAX_MR + 1) for u in range(1, MAX_SUMS + 1)]  # fmt: skip
        return [c for c in configs if c.registers_needed()[0] <= registers]

    def tiles(lanes: int) -> list[Group[MatmulPlan]]:
        m, groups = machine.at(lanes, threads), []
        for mr, nv in itertools.product(range(1, MAX_MR + 1), range(1, MAX_NV + 1)):
            if tile_registers(mr, nv) <= registers:
                groups += _tile_groups(
                    MatmulConfig(shape, "tiled", lanes, mr, nv, **full_edges(shape, mr, nv, lanes, False)), threads,
                    splits, b_constant, kinds, machine, bool(b_band or a_band),
                    _once(lambda mr=mr, nv=nv: [_transposed(shape, mr, nv, m, epilogue, prologue, blocked, nhwc)]
                          if transposed else _blocked_configs(shape, mr, nv, m, epilogue, a_constant, prologue,
                                                              b_constant, in_place, b_band, a_band)))  # fmt: skip
        return groups

    groups = []
    for lanes in vector_widths(machine, target):
        if transposed and blocked and not all(nhwc) and lanes != target.f32_lanes:
            continue
        fma = fma_floor_ns(shape.m * shape.n * shape.k, lanes, threads, machine)
        groups += [Group.of(plan, fma, plan.config.algorithm) for plan in _plans(simple(lanes), threads, splits,
                                                                                 b_constant)]  # fmt: skip
        groups.append(Group(fma, kinds, functools.partial(tiles, lanes)))
    return groups


def _tile_groups(tile: MatmulConfig, threads: int, splits: tuple[Split, ...], b_weights: bool,
                 kinds: tuple[Algorithm, ...], machine: Machine, banded: bool,
                 built: Callable[[], list[MatmulConfig]]) -> list[Group[MatmulPlan]]:  # fmt: skip
    """One tile's configs (`built` when a group is opened) in a group per split, bounded
    by `tile`'s floor (a tiled config's: it computes no edge a packed one does not), and
    those multiplying bands, fewer than the floor counts, in one bounded by nothing."""
    groups = []
    for bound in _plans([tile], threads, splits, b_weights):
        groups.append(Group(floor_ns(bound, machine), kinds,
                            functools.partial(_plans_of, built, threads, bound.split, b_weights, False)))
        if banded:
            groups.append(Group(0.0, kinds, functools.partial(_plans_of, built, threads, bound.split, b_weights, True)))
    return groups


def _once(build: Callable[[], list[MatmulConfig]]) -> Callable[[], list[MatmulConfig]]:
    """`build`, called at most once (the splits of a tile share its configs); not
    functools.cache, whose wrapper costs more to make than most tiles, never opened, need."""
    kept: list[list[MatmulConfig]] = []

    def once() -> list[MatmulConfig]:
        if not kept:
            kept.append(build())
        return kept[0]

    return once


def _plans(configs: list[MatmulConfig], threads: int, splits: tuple[Split, ...], b_weights: bool) -> list[MatmulPlan]:
    """`configs` on `threads` threads divided each of `splits` way, where that divides
    them (on one thread, any split)."""
    plans = [MatmulPlan(c, threads, split, b_weights) for c in configs for split in splits]
    return [p for p in plans if p.threads == 1 or p.split_units() > 1]


def _plans_of(built: Callable[[], list[MatmulConfig]], threads: int, split: Split, b_weights: bool,
              banded: bool) -> list[MatmulPlan]:  # fmt: skip
    """The plans of one tile's configs `built` (those multiplying bands, or the others)."""
    return _plans([c for c in built() if bool(c.band[0]) == banded], threads, (split,), b_weights)


def _transposed(shape: MatmulShape, mr: int, nv: int, m: Machine, epilogue: ep.Epilogue, prologue: ep.Epilogue,
                blocked: bool, nhwc: tuple[bool, bool]) -> MatmulConfig:  # fmt: skip
    """A transposed product's packed config of an mr x nv tile, in one K block."""
    return MatmulConfig(shape, "packed", m.lanes, mr, nv, 0, *block_sizes(shape, mr, nv * m.lanes, m)[1:3],
                        k_unroll(mr, nv), epilogue=epilogue, prologue=prologue, transposed=True, blocked=blocked,
                        a_nhwc=nhwc[0], c_nhwc=nhwc[1], **full_edges(shape, mr, nv, m.lanes, True))  # fmt: skip


def _blocked_configs(shape: MatmulShape, mr: int, nv: int, m: Machine, epilogue: ep.Epilogue, a_constant: bool,
                     prologue: ep.Epilogue, b_constant: bool, in_place: dict[str, object],
                     b_band: tuple[tuple[int, int], ...],
                     a_band: tuple[tuple[int, int], ...]) -> list[MatmulConfig]:  # fmt: skip
    """An mr x nv tile's tiled and packed configs: each K block of `blockings`, A read
    in place where B is packed and K in one block, and the banded ones (see `plan_groups`)."""
    configs = []
    for kc, kinds in blockings(shape, mr, nv * m.lanes, m):
        _, mc, nc, _ = block_sizes(shape, mr, nv * m.lanes, m, kc)
        dense = [MatmulConfig(shape, kind, m.lanes, mr, nv, kc, mc, nc, k_unroll(mr, nv),
                              epilogue=epilogue, a_packed=a_constant and kind == "packed",
                              b_packed=b_constant and kind == "packed" and not prologue,
                              prologue=prologue, **in_place,
                              **full_edges(shape, mr, nv, m.lanes, kind == "packed"))
                 for kind in kinds if kind == "packed" or not in_place["b_transposed"]]  # fmt: skip
        in_place_a = [replace(c, a_in_place=True) for c in dense  # A's rows whole runs
                      if c.b_packed and not c.a_packed and kc >= shape.k]  # fmt: skip
        banded = [_banded(c, b_band, m) for c in in_place_a if b_band]
        banded += [_banded(c, a_band, m) for c in dense if a_band and c.algorithm == "tiled"]
        configs += dense + in_place_a + [c for c in dict.fromkeys(banded) if narrow(c.band[0], shape.k)]
    return configs


EDGE_WASTE = 0.01
"""The most work, as a share of the dimension, that computing an edge tile as a full
one may add (`MatmulConfig.full_row_edge`, `full_column_edge`): that tile's own
micro-kernel is a quarter to a half of a packed kernel's code and LLVM time, but the
waste costs its share of every run, so only a little is spent."""


def full_edges(shape: MatmulShape, mr: int, nv: int, lanes: int, packed_b: bool) -> dict[str, bool]:
    """Which partial tiles a tiled or packed config computes as full ones: those whose
    wasted work (in whole vectors, for columns) is at most EDGE_WASTE of the dimension;
    columns only where B is read from zero-padded panels (`packed_b`)."""

    def cheap(extent: int, size: int, granule: int) -> bool:
        rest = extent % size
        return rest == 0 or size - round_up(rest, granule) <= EDGE_WASTE * extent

    return {"full_row_edge": cheap(shape.m, mr, 1), "full_column_edge": packed_b and cheap(shape.n, nv * lanes, lanes)}


@dataclass(frozen=True)
class Choice:
    """The model's pick, the best of each algorithm, and why (a matmul's; the convolution
    model's choice names its layer and runners-up its own way)."""

    best: Prediction
    per_algorithm: tuple[Prediction, ...]
    profile: HardwareProfile
    target: Target
    unscored: tuple[str, ...] = ()  # algorithms not scored, each with why (its floor)

    def explain(self) -> str:
        """A human explanation: the choice, each parameter and each term with its reason,
        the best of each algorithm."""
        b = self.best
        lines = [f"{self.heading()} on {self.target.name} (profile {self.profile.name}, {b.plan.threads} thread(s))",
                 f"choice: {b.config.algorithm}, predicted {b.total_ns / 1e3:.1f} µs = {b.gflops:.1f} GFLOP/s"
                 + self.rate_note(), "parameters:", *b.parameter_lines(), self.formula(), *b.term_lines(),
                 "best of each algorithm:"]  # fmt: skip
        lines += [self.runner_up(p) for p in sorted(self.per_algorithm, key=lambda p: p.total_ns)]
        lines += [f"  {why}" for why in self.unscored]
        return "\n".join(lines)

    def heading(self) -> str:
        s = self.best.shape
        return f"matmul M={s.m} N={s.n} K={s.k}"

    def rate_note(self) -> str:
        return ""

    def formula(self) -> str:
        return (f"terms (ns; total = softmax{OVERLAP:g}(fma+latency+loads+edges+c tile+epilogue, largest "
                "memory) + l1 misses + c passes + packing + call):")

    def runner_up(self, p: Prediction) -> str:
        """One algorithm's best: its configuration and predicted time."""
        c = p.config
        blocks = f" kc={c.kc} mc={c.mc} nc={c.nc}" if c.algorithm in ("tiled", "packed") else ""
        return f"  {c.algorithm:<9} lanes={c.lanes} {c.tile}{blocks}: {p.total_ns / 1e3:.1f} µs ({p.gflops:.1f} GFLOP/s)"


def choose(shape: MatmulShape, profile: HardwareProfile, target: Target, threads: int | None = None,
           epilogue: ep.Epilogue = (), a_constant: bool = False, transposed: bool = False,
           blocked: bool = False, nhwc: tuple[bool, bool] = (False, False),
           prologue: ep.Epilogue = (), b_constant: bool = False, leading: tuple[int, int, int] = (0, 0, 0),
           b_transposed: bool = False, local: Split | None = None, model_bytes: int = 0,
           split: Split | None = None, b_band: tuple[tuple[int, int], ...] = (),
           a_band: tuple[tuple[int, int], ...] = (), fastest: bool = False,
           fresh_input: bool = False) -> Choice:  # fmt: skip
    """The plan with the lowest predicted time using at most `threads` threads (the
    profile's cores if None): a small problem may be faster on fewer threads than the
    dispatch to more costs. `a_constant`: A is known when the kernel is built (a layer's
    weights), so packed plans read it packed once, `b_constant` likewise for B;
    `transposed`, `blocked`, `nhwc`:
    operands stored transposed, channel-blocked, Aᵀ and Cᵀ NHWC; `prologue`: ops on B
    as it is read; `leading`, `b_transposed`: operands in place (see `plan_groups`);
    `local`: the split that keeps each thread on what it wrote (see `preference`);
    `model_bytes`: the bytes an inference of the model holding the product passes over,
    which decide where its constant B waits between inferences (`Machine.in_model`);
    `split`: only plans on several threads divided this way (a caller that prices what
    each way reads from other cores itself); `b_band`, `a_band`: see `plan_groups`;
    `fastest`: only the best plan is wanted, not each algorithm's (fewer are scored);
    `fresh_input`: the product is the first to read its computed operand since the
    threads before it wrote it (`Machine.fresh_input`)."""
    machine = replace(Machine.of(profile).in_model(model_bytes), fresh_input=fresh_input)
    budget = min(threads or machine.cores, machine.cores)  # more threads would time-share cores
    groups = [group for t in sorted({1, budget})
              for group in plan_groups(shape, machine, target, t, epilogue, a_constant, transposed, blocked, nhwc,
                                       prologue, b_constant, leading, b_transposed, b_band, a_band, split)]  # fmt: skip
    predictions = promising_predictions(groups, None if fastest else lambda p: p.config.algorithm,
                                        lambda p: predict(p, machine),
                                        lambda p: floor_ns(p, machine) + fixed_terms_ns(p, machine))
    if not predictions:
        raise AutoconfigError(f"no matmul configuration of profile {profile.name} fits {target.name}")
    prefer = functools.partial(preference, local=local)
    per_algorithm = tuple(
        best_of(mine, prefer) for a in ALGORITHMS if (mine := [p for p in predictions if p.config.algorithm == a])
    )
    return Choice(best_of(per_algorithm, prefer), per_algorithm, profile, target)


def fixed_terms_ns(plan: MatmulPlan, machine: Machine) -> float:
    """What a tiled or packed plan's total adds to its `floor_ns` whatever its caches
    hold: its C tiles per K block, its passes over C and its packing (none for the
    others), at a fraction of `predict`'s cost; with the floor, a tighter lower bound
    where plans of one tile differ in their blocks."""
    plan = as_dense(plan)
    c = plan.config
    if c.algorithm not in ("tiled", "packed"):
        return 0.0
    m = machine.at(c.lanes, plan.threads)
    share = plan.busiest_share()
    k_blocks = math.ceil(plan.shape.k / c.blocks()[0])
    fixed = [_c_tile_term(plan, m, share, k_blocks), _c_passes(plan, m, share, k_blocks),
             *_packing_terms(plan, m, share)]  # fmt: skip
    return sum(t.ns for t in fixed)


def floor_ns(plan: MatmulPlan, machine: Machine) -> float:
    """A lower bound of `predict(plan).total_ns`, at a fraction of its cost: for tiled and
    packed plans, their compute terms before the cache model (the tiles' FMA issue,
    latency and load waits, for the busiest thread) and the call, which the total adds
    to at least those; for the others, `fma_floor_ns`. Counting the edge tiles and the
    busiest thread's share, it prunes more than the FMA floor alone."""
    plan = as_dense(plan)
    c, s = plan.config, plan.shape
    if c.algorithm not in ("tiled", "packed"):
        return fma_floor_ns(s.m * s.n * s.k, c.lanes, plan.threads, machine)
    m = machine.at(c.lanes, plan.threads)
    per_k = sum(count * sum(microkernel_ns(rows * vectors, vectors, rows, m)) for count, rows, vectors in _tile_kinds(c))
    return per_k * s.k * plan.busiest_share() + call_term(plan.parts(), m).ns


def instructions_per_flop(config: MatmulConfig) -> float:
    """Vector FMAs and loads issued per f32 multiply-add on this shape, averaged over
    the tiles that actually run (with M=4, a 6x2 tile runs as 4x2): a tile's FMAs, B
    loads and A broadcasts per k over its rows·vectors·lanes multiply-adds; broadcast
    issues a B load per FMA and a C load and store per `unroll`; dot an A load per FMA
    and a B load per row. Per flop, not per FMA, and counting FMAs as well as loads:
    each instruction takes an issue slot whatever its width."""
    if config.algorithm == "broadcast":
        return (2 + 2 / config.unroll) / config.lanes
    if config.algorithm == "dot":
        return (2 + 1 / min(config.mr, config.shape.m)) / config.lanes
    kinds = _tile_kinds(config)
    issued = sum(count * (rows * vectors + rows + vectors) for count, rows, vectors in kinds)
    return issued / sum(count * rows * vectors * config.lanes for count, rows, vectors in kinds)


def micro_kernels(config: MatmulConfig) -> int:
    """The micro-kernels a config's code holds: one per tile size that runs (each edge
    tile not computed as a full one is a function of its own, `kernels.matmul`)."""
    if config.algorithm not in ("tiled", "packed"):
        return 1
    return len({(rows, vectors) for _, rows, vectors in _tile_kinds(config)})


def rows_streamed(config: MatmulConfig) -> int:
    """Rows of an operand a matrix-vector kernel reads at once, each its own stream through
    memory: broadcast's B rows per pass over the C row, dot's A rows per step (one stream
    when packed: the rows interleaved); a blocked kernel reads one B row (segment or
    packed panel) per k step."""
    if config.algorithm == "broadcast":
        return min(config.unroll, config.shape.k)
    if config.algorithm == "dot":
        return 1 if config.a_packed else min(config.mr, config.shape.m)
    return 1


def memory_bound(prediction: Prediction) -> bool:
    """Whether the prediction's largest memory term exceeds its compute terms: then the
    instructions a plan issues wait under memory, and do not separate it from another."""
    kernel, memory = compute_and_memory_ns(prediction.terms)
    return memory > kernel


PREFERRED_STREAMS = 4
"""Rows a kernel bound by memory best reads at once: each is a stream the hardware
prefetchers follow within its page; one alone leaves the bandwidth of the level past L2
idle, and many contend for the prefetchers' trackers."""


def preference(p: Prediction, local: Split | None = None) -> tuple:
    """How the matmul model breaks a tie (`cost.best_of`): on several threads, the split
    `local` names, then the fewest micro-kernels, then (where memory bounds the time) rows
    streamed at once nearest PREFERRED_STREAMS, then the fewest instructions per flop,
    then a split by rows.

    `local`: the dimension along which the computed operand's producer divided it among
    the threads (a convolution's pixels, a sequence's tokens): split the same way, each
    thread reads what it wrote itself, where another split reads most of the operand
    from the other cores' caches, a slower path that no term prices. (Or the constant
    operand's side, where weights stream from memory: `families.matmul`.) Micro-kernels: an
    edge tile's costs build time, and ties without one mostly ran faster too.
    Instructions per flop: the FMA-bound terms hide that advantage. A split by rows:
    each thread's rows of A and C are its own contiguous block, where a split by columns
    has every thread read all of A."""
    elsewhere = local is not None and p.plan.parts() > 1 and p.plan.split != local
    return (elsewhere, micro_kernels(p.config),
            abs(rows_streamed(p.config) - PREFERRED_STREAMS) if memory_bound(p) else 0,
            instructions_per_flop(p.config), p.plan.split != "rows")  # fmt: skip
