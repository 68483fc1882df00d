"""The attention model: one fused attention kernel (`kernels.attention`) per head,
priced term by term from the profile, its register tile, block and threads chosen;
the fusion plan weighs it against the two batched products and the softmax run apart
(`fusion.planning`), and the lowering reports it.

Terms (ns, the busiest thread's heads): the register tiles' FMA issue, latency and
loads (`models.cost.microkernel_ns`) for the scores (Q·Kᵀ over the keys padded to whole
tiles) and the output (probabilities·V); the softmax and the scores' epilogue as vector
ops per score vector; Kᵀ packed per head (squares transposed in registers, or one
element at a time); Kᵀ and V read again per block of query rows (`tiles` register
tiles) from the level holding them, Q, O and the epilogue's operands once; the block's
score rows written and read back by each pass, a stall where they outgrow the L1 (all
keys at once: a block's rows over every key); streamed in chunks of keys, the online
softmax's rescaling of each row's output and state per chunk; a call (and a dispatch)
per call of the kernel. Compute and memory overlap as in every model
(`models.cost.total_ns`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from autoconfig.machine import F32, PROGRAM_STEP_NS, Machine
from autoconfig.models.cost import (
    ROWS_TOGETHER, SCALING_PASS_OPS, SOFTMAX_VECTOR_OPS, STALL_TERM, Prediction, Term, best_of, busiest_share,
    microkernel_ns, total_ns,
)  # fmt: skip
from kernels import epilogue as ep
from kernels.attention import AttentionConfig

TILES = ((4, 3), (6, 2))
"""(query rows, vectors) of the register tiles scored: the two that fill 16 registers
with 12 accumulators (more rows broadcast more; more vectors pad more keys)."""

BLOCK_TILES = (1, 2, 4)
"""Register tiles of query rows per block scored: more share each tile of Kᵀ and V read
into L1, and hold more score rows (the memory terms weigh both)."""


KEY_TILES = (0, 4, 16)
"""Register tiles of keys per streamed chunk (0: all keys at once): a chunk's score
rows stay in L1 with any block; longer chunks rescale less often."""

SCORE_TRANSFERS = 5
"""Times a score crosses between the core and the level holding its row: written by the
product, read by the max pass, read and written by the exponent pass, read by the
product with V (one more where an epilogue writes it back)."""

RESCALE_VECTOR_OPS = 3
"""Per output vector of a row and chunk of a streamed softmax: the kept row's load, the
fused multiply-add of its rescaling, the store."""

RESCALE_ROW_OPS = 20
"""Per row and chunk of a streamed softmax: the running max, its exponent (range
reduction and polynomial), the sum's update, the states' loads and stores."""


@dataclass(frozen=True)
class AttentionShape:
    """`heads` products softmax(Q·Kᵀ)·V of `queries` x `width` Q, `keys` x `width` K and
    `keys` x `v_width` V."""

    heads: int
    queries: int
    keys: int
    width: int
    v_width: int

    @property
    def flops(self) -> int:
        return 2 * self.heads * self.queries * self.keys * (self.width + self.v_width)


@dataclass(frozen=True)
class AttentionPlan:
    """A config for every head, run `threads` heads at once (or one head's rows split
    across the threads when there are fewer heads)."""

    config: AttentionConfig
    shape: AttentionShape
    threads: int


def predict(plan: AttentionPlan, machine: Machine) -> Prediction:
    """The plan's time as named terms (see the module docstring)."""
    c, s = plan.config, plan.shape
    m = machine.at(c.lanes, plan.threads)
    heads = busiest_share(s.heads, plan.threads) * s.heads if s.heads >= plan.threads else 1.0
    rows = s.queries if s.heads >= plan.threads else math.ceil(s.queries / plan.threads)
    tiles = math.ceil(rows / c.rows)
    blocks = math.ceil(rows / (c.rows * c.tiles))
    key_tiles = c.padded_keys // (c.lanes * c.vectors)
    column_tiles = math.ceil(s.v_width / (c.lanes * c.vectors))
    steps = tiles * (key_tiles * s.width + column_tiles * s.keys)
    issue, latency, loads = microkernel_ns(c.rows * c.vectors, c.vectors, c.rows, m)
    vectors = rows * math.ceil(s.keys / c.lanes)
    ops = SOFTMAX_VECTOR_OPS - (0 if c.cleanup else SCALING_PASS_OPS) + ep.vector_ops(c.epilogue + c.cleanup)
    reread = blocks * (s.width * c.padded_keys + s.keys * s.v_width) * F32
    once = (rows * (s.width + s.v_width) + sum(rows * s.keys for op in c.epilogue if op.operand == "output")) * F32
    calls = math.ceil(s.heads / plan.threads) if s.heads >= plan.threads else s.heads
    held = m.holding_level((c.workspace() + s.keys * s.v_width) * F32)  # the part's scratch (with Kᵀ), and V
    terms = [
        Term("fma", steps * issue * heads, f"{c.rows}x{c.vectors} tiles of {c.lanes} lanes at "
             f"{m.fma_per_ns():.2f} vector FMAs/ns: scores over {c.padded_keys} keys (padded), then the output"),
        Term("latency", steps * latency * heads, "tiles with too few accumulators wait on FMA latency"),
        Term("loads", steps * loads * heads, f"{c.vectors} vector + {c.rows} broadcast loads per step"),
        Term("epilogue", vectors * ops / m.fma_per_ns() * heads,
             f"softmax and {ep.describe(c.epilogue)}, then {ep.describe(c.cleanup)}: {ops} vector ops per score "
             "vector"),
        Term("memory reread", reread / m.bandwidth[held] * heads,
             f"Kᵀ and V ({reread / blocks / 1e3:.0f} kB) read from {held} again per block of "
             f"{c.rows * c.tiles} query rows"),
        Term("memory once", m.traffic_ns(once * heads), "Q, O and the scores' operands once"),
        *_score_terms(c, s, m, rows, heads),
        _packing_term(c, s, m, heads),
        Term("call", m.call_ns + (calls - 1) * PROGRAM_STEP_NS + calls * (m.dispatch_ns if plan.threads > 1 else 0.0),
             f"{calls} kernel call(s), each after the first a step of the program"
             + (", and thread dispatches" if plan.threads > 1 else "")),
    ]
    streamed = f"in {c.chunks} chunks of {c.key_block}, an online softmax" if c.key_block else "all at once"
    parameters = (("tile", f"{c.rows} query rows x {c.vectors} vectors: {c.rows * c.vectors} accumulators"),
                  ("keys", f"{streamed}: score rows of {c.span} keys"),
                  ("block", f"{c.tiles} tiles of rows: each tile of Kᵀ and V is read from L1 by all of them"),
                  ("threads", f"{plan.threads}: " + (f"{plan.threads} heads at once, one per thread"
                                                     if s.heads >= plan.threads else "each head's rows split")))
    return Prediction(plan, tuple(terms), total_ns(terms), parameters)


def _score_terms(c: AttentionConfig, s: AttentionShape, m: Machine, rows: int, heads: float) -> list[Term]:
    """The block's score rows passed over (SCORE_TRANSFERS), a stall beyond the L1; the
    online softmax's rescaling per row and chunk where the keys are streamed."""
    level = m.holding_level(c.block_rows * c.span * F32)
    moved = rows * s.keys * F32 * (SCORE_TRANSFERS + (1 if c.epilogue else 0))
    stall = Term(STALL_TERM, 0.0 if level == "L1" else moved / m.bandwidth[level] * heads,
                 f"the block's score rows ({c.block_rows * c.span * F32 / 1e3:.0f} kB) passed over in {level}")
    ops = rows * c.chunks * (-(-s.v_width // c.lanes) * RESCALE_VECTOR_OPS + RESCALE_ROW_OPS) if c.key_block else 0
    return [stall, Term("rescale", ops / m.fma_per_ns() * heads,
                        f"each row's output and state rescaled per chunk of keys ({c.chunks})")]


def _packing_term(c: AttentionConfig, s: AttentionShape, m: Machine, heads: float) -> Term:
    """Kᵀ packed per head: squares of L keys x L columns loaded, transposed in registers
    (log2 L shuffles per vector) and stored, where the kernel does (fixed-length
    vectors, K not given transposed), the rest one element at a time."""
    squared = 0 if c.k_transposed or m.scalable else (s.keys // c.lanes) * (s.width // c.lanes) * c.lanes ** 2
    vector_ops = squared / c.lanes * (2 + math.log2(c.lanes))
    ns = vector_ops / m.fma_per_ns() + (s.keys * s.width - squared) / m.broadcast_loads_per_ns()
    how = "squares transposed in registers" if squared else "one element at a time"
    return Term("packing", ns * heads, f"Kᵀ packed per head, {how}")


def choose(shape: AttentionShape, machine: Machine, lanes: int, threads: int, strides: tuple[int, int, int, int],
           epilogue: ep.Epilogue, cleanup: ep.Epilogue, k_transposed: bool = False) -> Prediction:  # fmt: skip
    """The fastest predicted register tile, block, keys per chunk and thread count for
    `shape` (K given as Kᵀ where `k_transposed`), on at most `threads` threads: one, a
    head each, or all (ties: fewer threads, all keys at once, the first of TILES, larger
    blocks). A cleanup on the probabilities needs all keys at once."""
    predictions = []
    for count in sorted({1, min(threads, shape.heads), threads}):
        for (rows, vectors), tiles, key_tiles in itertools.product(TILES, BLOCK_TILES, KEY_TILES):
            key_block = key_tiles * lanes * vectors
            if key_block >= shape.keys or (key_block and cleanup):  # one chunk; or probabilities never whole
                continue
            config = AttentionConfig(shape.queries, shape.keys, shape.width, shape.v_width, lanes, rows=rows,
                                     vectors=vectors, tiles=tiles, strides=strides, epilogue=epilogue,
                                     cleanup=cleanup, k_transposed=k_transposed, key_block=key_block,
                                     together=ROWS_TOGETHER)  # fmt: skip
            predictions.append(predict(AttentionPlan(config, shape, count), machine))
    return best_of(predictions, lambda p: (p.plan.threads, p.config.key_block,
                                           TILES.index((p.config.rows, p.config.vectors)), -p.config.tiles))


def explain(best: Prediction, profile_name: str, target_name: str) -> str:
    """The report's lines for a fused attention: shape, choice, parameters, terms."""
    s = best.shape
    return best.report(f"attention of {s.heads} heads: Q {s.queries}x{s.width}, K {s.keys}x{s.width}, "
                       f"V {s.keys}x{s.v_width}", target_name, profile_name, "fused, ",
                       "terms (ns; total = softmax4(fma+latency+loads+epilogue+rescale, largest memory) + l1 misses "
                       "+ packing + call):")  # fmt: skip
