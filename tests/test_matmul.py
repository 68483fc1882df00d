"""Matmul: every algorithm correct on awkward shapes on every target, the API's
checks, and the model's choices differing between machines (nothing timed)."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autoconfig import compile_matmul, plan_matmul
from autoconfig.errors import AutoconfigError
from autoconfig.machine import PROGRAM_STEP_NS, Machine
from autoconfig.models.cost import C_PASSES_TERM, RESOLUTION, Term
from autoconfig.models.cost import Group, best_of, tie_bound
from autoconfig.models.matmul import PREFERRED_STREAMS, STREAMED_B_BLOCK_L2_SHARE, MatmulPlan, block_sizes, blockings
from autoconfig.models.matmul import preference
from autoconfig.models.matmul import (
    UNROLL, candidates, choose, fixed_terms_ns, floor_ns, full_edges, k_unroll, plan_groups, predict,
)  # fmt: skip
from autoconfig.profile import load_profile
from kernels import matmul as mm
from kernels.errors import KernelError
from autoconfig.probe.host import this_host
from kernels.library import build_library
from kernels.lower import compile_object, compile_units, to_llvm_ir
from tests.conftest import require_runnable, target_for

PROFILES = Path(__file__).parent.parent / "hwprofiles"
HOST_PROFILE = PROFILES / "amd-epyc.yaml"  # an AVX2 profile: its code runs on any x86-64-v3


def reference(a, b, c=None):
    out = a.astype(np.float64) @ b.astype(np.float64)
    return out if c is None else out + c


ANY = mm.MatmulShape(1, 1, 1)  # the shape of config templates; set where they are used


def at(config: mm.MatmulConfig, dims) -> mm.MatmulConfig:
    return replace(config, shape=mm.MatmulShape(*dims))


def build(config, target):
    return build_library(mm.generate(config, target), this_host()).kernel(config.symbol)


def check(kernel_call, config, seed=0):
    shape = config.shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((shape.m, shape.k), dtype=np.float32)
    b = rng.standard_normal((shape.k, shape.n), dtype=np.float32)
    c = rng.standard_normal((shape.m, shape.n), dtype=np.float32)
    before = c.copy()
    if config.transposed:  # Cᵀ, Aᵀ and Bᵀ packed; C read back through its transpose
        c_t = np.ascontiguousarray(c.T)
        args, c = [c_t, np.ascontiguousarray(a.T), config.pack_b(b.T)], c_t.T
    else:
        args = [c, config.pack_a(a) if config.a_packed else a, config.pack_b(b.T) if config.b_packed else b]
    if config.workspace():
        args.append(np.full(config.workspace(), np.nan, np.float32))
    rows, cols = config.row_tiles(), config.col_tiles()
    for row_range in ((0, rows // 2), (rows // 2, rows)):  # disjoint blocks, as threads do
        for col_range in ((0, cols // 2), (cols // 2, cols)):
            kernel_call(*args, *row_range, *col_range)
    expected = reference(a, b, before if config.accumulate else None)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4 * np.sqrt(shape.k))


def configs_for(lanes: int) -> list[mm.MatmulConfig]:
    return [
        mm.MatmulConfig(ANY, "broadcast", lanes),
        mm.MatmulConfig(ANY, "broadcast", lanes, unroll=4),
        mm.MatmulConfig(ANY, "tiled", lanes, mr=3, nv=2, kc=8, mc=6, nc=2 * 2 * lanes, unroll=3),
        mm.MatmulConfig(ANY, "packed", lanes, mr=4, nv=2, kc=5, mc=8, nc=2 * lanes, unroll=2),
        mm.MatmulConfig(ANY, "packed", lanes, mr=2, nv=1, accumulate=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=3, nv=2, kc=4, mc=6, nc=2 * lanes, unroll=3, a_packed=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=3, nv=2, kc=4, mc=6, nc=2 * lanes, unroll=3, b_packed=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=4, nv=2, kc=5, mc=8, nc=2 * lanes, unroll=2, b_packed=True,
                        full_row_edge=True, full_column_edge=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=3, nv=2, mc=6, nc=2 * lanes, unroll=3, b_packed=True,
                        a_in_place=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=4, nv=2, mc=8, unroll=2, b_packed=True, a_in_place=True,
                        full_row_edge=True, full_column_edge=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=3, nv=2, kc=5, mc=6, nc=2 * lanes, unroll=2, transposed=True),
        mm.MatmulConfig(ANY, "tiled", lanes, mr=3, nv=2, kc=8, mc=6, unroll=2, full_row_edge=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=4, nv=2, kc=5, mc=8, nc=2 * lanes, unroll=2, full_row_edge=True,
                        full_column_edge=True),
        mm.MatmulConfig(ANY, "packed", lanes, mr=3, nv=2, kc=5, mc=6, nc=2 * lanes, unroll=2, transposed=True,
                        full_row_edge=True, full_column_edge=True),
    ]


def config_id(c: mm.MatmulConfig) -> str:
    return (f"{c.algorithm}-{c.mr}x{c.nv}{'-a-packed' if c.a_packed else ''}{'-b-packed' if c.b_packed else ''}"
            f"{'-a-in-place' if c.a_in_place else ''}"
            f"{'-transposed' if c.transposed else ''}"
            f"{'-full-edges' if c.full_row_edge else ''}")


HOST_SHAPES = [(1, 1, 1), (13, 17, 19), (9, 33, 7), (64, 48, 40), (2, 100, 3), (31, 1, 29),
               (301, 401, 9)]


@pytest.mark.parametrize("config", configs_for(8), ids=config_id)
@pytest.mark.parametrize("dims", HOST_SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_host_correct(config, dims):
    target = target_for("avx2")
    require_runnable(target)
    config = at(config, dims)
    check(build(config, target), config)


def test_edge_tiles_within_the_waste_bound_share_the_full_tiles_micro_kernel():
    """M 301 and N 801 leave a 1-row and a 1-column edge (each a 1% waste as full
    tiles: 3 rows, one 8-lane vector): the model computes both as full tiles, so there
    is one micro-kernel of 4x2 vectors, unrolled 4 times, with no loop for a K rest (blocks of 8 over K 24); 13 rows
    leave a 23% waste, so that edge keeps its own; tiled, B is read in place, so its
    column edge keeps its own too (one masked vector)."""
    target = target_for("avx2")
    shape = mm.MatmulShape(301, 801, 24)
    assert full_edges(shape, 4, 2, 8, True) == {"full_row_edge": True, "full_column_edge": True}
    assert full_edges(mm.MatmulShape(301, 401, 24), 4, 2, 8, True)["full_column_edge"] is False  # 2%
    assert full_edges(mm.MatmulShape(13, 801, 24), 4, 2, 8, True)["full_row_edge"] is False
    assert full_edges(shape, 4, 2, 8, False)["full_column_edge"] is False
    separate = mm.MatmulConfig(shape, "packed", 8, mr=4, nv=2, kc=8, unroll=4)
    assert mm.generate(separate, target).text.count("vector.fma") == (4 + 1) * (2 + 1) * 4
    config = replace(separate, full_row_edge=True, full_column_edge=True)
    assert mm.generate(config, target).text.count("vector.fma") == 4 * 2 * 4
    tiled = replace(separate, algorithm="tiled", full_row_edge=True)
    assert mm.generate(tiled, target).text.count("vector.fma") == (2 + 1) * 4 * 4
    with pytest.raises(KernelError, match="full_column_edge needs B in zero-padded panels"):
        replace(tiled, full_column_edge=True).validate(target)
    require_runnable(target)
    for shaped in (config, tiled, replace(config, accumulate=True), replace(config, a_packed=True)):
        check(build(shaped, target), shaped)


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["avx512", "neon", "rvv128", "rvv256"])
def test_other_targets_correct(case_id):
    target = target_for(case_id)
    require_runnable(target)
    lanes = target.f32_lanes
    for config in configs_for(lanes):
        for dims in [(1, 1, 1), (7, 13, 5), (11, 2 * lanes + 3, 9)]:
            shaped = at(config, dims)
            check(build(shaped, target), shaped)


@pytest.mark.parametrize("case_id, pattern, absent", [
    ("avx2", r"vfmadd\w+ps\s+.*ymm", "zmm"),
    ("avx512", r"vfmadd\w+ps\s+.*zmm", None),
    ("neon", r"fmla\s+v\d+\.4s", None),
    ("rvv256", r"vfmacc\.v[vf]|vfmadd\.v[vf]", None),
])  # fmt: skip
def test_generated_instructions(tmp_path, case_id, pattern, absent):
    target = target_for(case_id)
    config = mm.MatmulConfig(mm.MatmulShape(20, 40, 30), "packed", target.f32_lanes, mr=4, nv=2, kc=16, unroll=2)
    asm = compile_object(to_llvm_ir(mm.generate(config, target).module), target, tmp_path, assembly=True).assembly
    assert re.search(pattern, asm)
    assert absent is None or absent not in asm


def test_packing_a_carries_loop_hints_llvm_reads():
    """Packing A (a strided copy, a read per row of the tile) is neither vectorized nor
    unrolled by LLVM: vectorized, it took half of its unit's LLVM time. The hints must be
    ones llvmlite's LLVM reads (vectorize.width 1; llvm.loop.vectorize.disable it ignores)."""
    target = target_for("avx512")
    config = mm.MatmulConfig(mm.MatmulShape(20, 40, 30), "packed", target.f32_lanes, mr=4, nv=2, kc=16, unroll=2)
    lowered = [to_llvm_ir(unit) for unit in compile_units(mm.generate(config, target).module)]
    (pack_a,) = [llvm_ir for llvm_ir in lowered if re.search(r"define void @\w+_pack_a\(", llvm_ir)]
    assert '!{!"llvm.loop.vectorize.width", i32 1}' in pack_a and '!{!"llvm.loop.unroll.disable"}' in pack_a
    assert "llvm.loop.vectorize.disable" not in pack_a


def test_a_tile_of_24_sums_keeps_them_in_registers_across_chains(tmp_path):
    """K = 160 is two chains of sums (`kernels.gemm.SUM_CHAIN`); with a 4x6 tile the
    chain's 24 sums and the 24 totals outnumber AVX-512's 32 registers. The totals may
    be saved and reloaded once per chain (priced), no more: unrolled, LLVM peeled the
    first chain and spilled the second's sums around its FMAs (288 stack accesses)."""
    target = target_for("avx512")
    config = mm.MatmulConfig(mm.MatmulShape(196, 960, 160), "packed", 16, mr=4, nv=6, unroll=2, transposed=True,
                             blocked=True)  # a 1x1 layer's channels in the lanes, on channel blocks
    asm = compile_object(to_llvm_ir(mm.generate(config, target).module), target, tmp_path, assembly=True).assembly
    stack = re.findall(r"^\s+v\w+\s.*zmm.*\(%rsp\)|^\s+v\w+\s.*\(%rsp\).*zmm", asm, re.M)
    assert len(stack) <= 2 * config.mr * config.nv, len(stack)


def test_api_chooses_builds_and_runs_with_threads():
    f = compile_matmul(300, 200, 100, profile=HOST_PROFILE, threads=2)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((300, 100), dtype=np.float32), rng.standard_normal((100, 200), dtype=np.float32)
    np.testing.assert_allclose(f(a, b), reference(a, b), rtol=1e-4, atol=1e-3)
    assert f.plan.threads == 2 and "choice:" in f.explain()  # big enough to split


@pytest.mark.parametrize("dims, split", [((1, 4096, 1024), "columns"), ((4096, 64, 64), "rows")])
def test_threads_split_the_dimension_with_tiles_to_share(dims, split):
    choice = plan_matmul(*dims, profile=HOST_PROFILE, threads=2)
    assert (choice.best.plan.threads, choice.best.plan.split) == (2, split)
    assert "split into 2 blocks" in choice.explain()


@pytest.mark.parametrize("algorithm", ["broadcast", "tiled", "packed"])
def test_api_column_split_is_correct(algorithm):
    tile = (1, 1) if algorithm == "broadcast" else (3, 2)
    config = mm.MatmulConfig(mm.MatmulShape(7, 61, 20), algorithm, 8, *tile)
    six_cores = HOST_PROFILE.parent / "intel-core-i7-8700.yaml"  # 3 threads need 3 cores; AVX2 runs here
    f = compile_matmul(7, 61, 20, profile=six_cores, config=config, threads=3, split_by="columns")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((7, 20), dtype=np.float32), rng.standard_normal((20, 61), dtype=np.float32)
    np.testing.assert_allclose(f(a, b), reference(a, b), rtol=1e-4, atol=1e-4)


def test_small_problems_stay_on_one_thread():
    choice = plan_matmul(16, 16, 16, profile=HOST_PROFILE, threads=2)
    assert choice.best.plan.threads == 1  # dispatch would cost more than it saves


def test_api_forced_config_and_accumulate():
    config = mm.MatmulConfig(mm.MatmulShape(5, 9, 11), "tiled", 8, mr=2, nv=1, kc=4, accumulate=True)
    f = compile_matmul(5, 9, 11, profile=HOST_PROFILE, config=config, threads=2)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((5, 11), dtype=np.float32), rng.standard_normal((11, 9), dtype=np.float32)
    c = np.ones((5, 9), np.float32)
    out = f(a, b, c)
    assert out is c
    np.testing.assert_allclose(c, reference(a, b) + 1, rtol=1e-4, atol=1e-4)
    explanation = f.explain()
    assert "forced tiled" in explanation and "4 (forced; the model derives" in explanation


def test_api_rejects_bad_input():
    f = compile_matmul(4, 5, 6, profile=HOST_PROFILE, threads=1)
    good_a, good_b = np.zeros((4, 6), np.float32), np.zeros((6, 5), np.float32)
    with pytest.raises(AutoconfigError, match="A must be float32, got float64"):
        f(good_a.astype(np.float64), good_b)
    with pytest.raises(AutoconfigError, match=r"B must have shape \(6, 5\), got \(5, 6\)"):
        f(good_a, good_b.T.copy())
    with pytest.raises(AutoconfigError, match="overwrites C"):
        f(good_a, good_b, np.zeros((4, 5), np.float32))
    with pytest.raises(AutoconfigError, match="M=0: must be >= 1"):
        compile_matmul(0, 5, 6, profile=HOST_PROFILE)


SQUARE16 = mm.MatmulShape(16, 16, 16)


@pytest.mark.parametrize("config, reason", [
    (mm.MatmulConfig(SQUARE16, "tiled", 8, mr=8, nv=3), "needs 24 accumulators .* = 28 vector registers; avx2 has 16"),
    (mm.MatmulConfig(SQUARE16, "packed", 16, mr=4, nv=1), "lanes=16 is invalid for avx2"),
    (mm.MatmulConfig(SQUARE16, "tiled", 8, mr=4, nv=2, mc=6), "mc=6 must be a multiple of mr=4"),
    (mm.MatmulConfig(SQUARE16, "broadcast", 8, mr=2), "broadcast matmul works on one row"),
    (mm.MatmulConfig(SQUARE16, "broadcast", 8, unroll=15), "u15 needs 15 A broadcasts .* = 17 vector registers"),
    (mm.MatmulConfig(SQUARE16, "dot", 8, mr=4), r"dot matmul is for N=1 \(matrix times vector\) with nv=1, got N=16"),
    (mm.MatmulConfig(mm.MatmulShape(16, 1, 16), "dot", 8, mr=4, unroll=4), "4x4 partial sums .* = 18 vector"),
    (mm.MatmulConfig(mm.MatmulShape(16, 8, 16), "tiled", 8), "forced config is for .* not M=16 N=16 K=16"),
    (mm.MatmulConfig(SQUARE16, "tiled", 8, mr=4, a_packed=True), "a_packed .* is for the packed and dot algorithms, "
                                                                  "not tiled"),
    (mm.MatmulConfig(SQUARE16, "tiled", 8, mr=4, b_packed=True), "b_packed .* is for one packed product"),
    (mm.MatmulConfig(SQUARE16, "packed", 8, mr=4, kc=8, b_packed=True, a_in_place=True),
     r"a_in_place \(A read where it lies\) is for .* one K block"),
])  # fmt: skip
def test_invalid_forced_config_rejected_with_reason(config, reason):
    with pytest.raises(AutoconfigError, match=reason):
        compile_matmul(16, config.shape.n if config.shape.n == 1 else 16, 16, profile=HOST_PROFILE, target="avx2",
                       config=config)  # fmt: skip


DOT_SHAPES = [(1, 1, 1), (7, 1, 13), (1, 1, 64), (13, 1, 3)]


@pytest.mark.slow
@pytest.mark.parametrize("case_id", ["avx2", "avx512", "neon", "rvv128", "rvv256"])
def test_dot_correct_on_every_target(case_id):
    # matrix times vector (N = 1), K in whole vectors, a masked rest, or less than a vector;
    # A as it is, or packed (each row tile's rows interleaved, zeros past M and K)
    target = target_for(case_id)
    require_runnable(target)
    lanes = target.f32_lanes
    configs = (mm.MatmulConfig(ANY, "dot", lanes, mr=3, unroll=2), mm.MatmulConfig(ANY, "dot", lanes, unroll=3, accumulate=True),
               mm.MatmulConfig(ANY, "dot", lanes, mr=3, unroll=2, a_packed=True))  # fmt: skip
    for config in configs:
        for dims in [*DOT_SHAPES, (5, 1, 2 * lanes + 3)]:
            shaped = at(config, dims)
            check(build(shaped, target), shaped)


def test_matrix_times_vector_picks_dot():
    # N = 1: vectorizing along N would use one lane of each vector
    for m, k in ((1000, 1000), (1, 100000)):
        assert plan_matmul(m, 1, k, profile=HOST_PROFILE, threads=1).best.config.algorithm == "dot"


def test_choice_differs_between_machines_and_says_why():
    picks = {}
    for name in ("intel-core-i7-8700", "intel-xeon-platinum-8380",
                 "aws-graviton2-neoverse-n1", "spacemit-k1-x60"):  # fmt: skip
        profile = load_profile(PROFILES / f"{name}.yaml")
        picks[name] = plan_matmul(256, 256, 256, profile=profile, threads=1)
    avx2, avx512 = picks["intel-core-i7-8700"], picks["intel-xeon-platinum-8380"]
    neon, rvv = picks["aws-graviton2-neoverse-n1"], picks["spacemit-k1-x60"]
    assert avx2.best.config != avx512.best.config and neon.best.config != rvv.best.config
    assert "256-bit vectors" in avx2.explain() and "512-bit vectors" in avx512.explain()
    assert "of 16 registers" in avx2.explain() and "of 32 registers" in avx512.explain()
    assert "128-bit vectors" in neon.explain() and "256-bit vectors" in rvv.explain()
    for choice in picks.values():
        fastest = min(p.total_ns for p in choice.per_algorithm)
        assert choice.best in choice.per_algorithm and choice.best.total_ns <= fastest * 1.02
        assert choice.best.config.validate(choice.target) is None


def test_prediction_terms_are_named_and_sum_up():
    profile = load_profile(HOST_PROFILE)
    for algorithm in mm.ALGORITHMS:
        shape = mm.MatmulShape(300, 1 if algorithm == "dot" else 200, 100)  # dot: matrix times vector
        config = next(c for c in [p.config for p in choose(shape, profile, target_for("avx2"), 1).per_algorithm]
                      if c.algorithm == algorithm)  # fmt: skip
        p = predict(MatmulPlan(config), profile)
        names = {t.name for t in p.terms}
        assert {"fma", "latency", "loads", "call"} <= names and any(n.startswith("memory") for n in names)
        assert all(t.ns >= 0 and t.why for t in p.terms)
        assert p.total_ns >= p.term("fma") and p.gflops > 0


def test_the_busiest_thread_takes_the_whole_tiles_of_a_split():
    """Two threads dividing 112 columns in 32-column tiles compute 64 and 48 of them: the
    busier does 4/7 of the work, not half (its FMA term says so), as 196 rows in 6-row
    tiles give it 17 tiles, 102 rows."""
    machine = Machine.of(load_profile(HOST_PROFILE))
    config = mm.MatmulConfig(mm.MatmulShape(196, 112, 480), "packed", 8, mr=6, nv=4, transposed=True)
    one, columns, rows = (MatmulPlan(config, t, split) for t, split in ((1, "rows"), (2, "columns"), (2, "rows")))
    assert (columns.busiest_share(), rows.busiest_share()) == (64 / 112, 102 / 196)
    per_thread = machine.at(8, 2).fma_per_ns() / machine.at(8, 1).fma_per_ns()
    fma = predict(columns, machine).term("fma") * per_thread / predict(one, machine).term("fma")
    assert fma == pytest.approx(64 / 112)


def test_small_shapes_prefer_no_packing():
    # Packing costs more than it saves when the whole problem sits in L1.
    choice = plan_matmul(8, 8, 8, profile=HOST_PROFILE, threads=1)
    assert choice.best.config.algorithm != "packed"


def test_unpacked_b_rows_that_start_mid_line_count_both_lines():
    # N=255: rows 1020 B apart start mid-line, so a 6x2 tile's 64 B of B touch two
    # lines on most rows; the tiled panel (256 rows) then overflows L1, and packing wins
    # (measured 5-15% faster than tiled on this shape)
    profile, config = load_profile(HOST_PROFILE), mm.MatmulConfig(ANY, "tiled", 8, 6, 2, kc=256)

    def l1_misses(n: int) -> tuple[float, str]:
        p = predict(MatmulPlan(at(config, (2704, n, 256))), profile)
        return next((t.ns, t.why) for t in p.terms if t.name == "l1 misses")

    assert l1_misses(272)[0] == 0 and "256 lines" in l1_misses(272)[1]  # 17 lines apart: aligned
    assert l1_misses(255)[0] > 0 and "496 lines" in l1_misses(255)[1]
    assert plan_matmul(2704, 255, 256, profile=HOST_PROFILE, threads=1).best.config.algorithm == "packed"


def test_panels_evicted_by_set_conflicts_within_a_page_are_l2_traffic_not_a_stall():
    # N=128 and N=512 rows fold a tiled panel into 8 and 2 L1 sets; prefetchers bring
    # rows closer than a page back from L2 alongside the FMAs (measured as fast as a
    # panel that fits); 4 KiB rows (N=1024) stall
    profile, config = load_profile(HOST_PROFILE), mm.MatmulConfig(ANY, "tiled", 8, 6, 2, kc=256)

    def terms(n: int) -> dict[str, float]:
        return {t.name: t.ns for t in predict(MatmulPlan(at(config, (512, n, 512))), profile).terms}

    for n in (128, 512):
        assert terms(n)["l1 misses"] == 0 and terms(n)["memory L2"] > 0
    assert terms(1024)["l1 misses"] > 0


def test_a_panel_filling_every_way_of_its_sets_is_l2_traffic_not_a_stall():
    # A 1x1 convolution on 112x112 (N=12544: rows 50176 B apart, more than a page): 32
    # rows of 2 lines fill every way of their 8 L1 sets, and only what A and C push out
    # comes back from L2, alongside the FMAs (tiled measured faster than packed on Zen
    # 4); 64 rows overflow those sets and stall
    profile, config = load_profile(HOST_PROFILE), mm.MatmulConfig(ANY, "tiled", 8, 8, 3)

    def terms(k: int) -> dict[str, float]:
        plan = MatmulPlan(replace(at(config, (64, 12544, k)), kc=k))
        return {t.name: t.ns for t in predict(plan, profile).terms}

    assert terms(32)["l1 misses"] == 0 and terms(32)["memory L2"] > 0
    assert terms(64)["l1 misses"] > 0


def test_transposed_strips_on_more_pages_than_the_tlb_maps_stall():
    # A 1x1 convolution 288->64 on 35x35 with its output channels in the lanes: read in
    # place from NCHW, each of a strip's 288 channel rows is 4900 B from the next, a page
    # each (measured inside Inception-V3: 2.0-2.5 ms against 0.53 predicted without the
    # stall); from NCHW[c] one page per block of 8 channels (36 pages), from NHWC none;
    # at 32 channels (32 pages) the strip stays mapped
    profile = load_profile(HOST_PROFILE)
    config = mm.MatmulConfig(ANY, "packed", 8, 6, 2, transposed=True)

    def stall(k: int, **layout) -> float:
        plan = MatmulPlan(replace(at(config, (1225, 64, k)), **layout))
        return next(t.ns for t in predict(plan, profile).terms if t.name == "l1 misses")

    assert stall(288) > 0
    assert stall(288, blocked=True) == stall(288, blocked=True, a_nhwc=True) == stall(32) == 0


@pytest.mark.slow
def test_cli_explain():
    done = subprocess.run(
        [sys.executable, "-m", "autoconfig.cli", "explain", "matmul", "128", "64", "32",
         "--profile", str(HOST_PROFILE), "--threads", "1"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "choice:" in done.stdout and "kc" in done.stdout and "GFLOP/s" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "autoconfig.cli", "explain", "matmul", "0", "64", "32",
         "--profile", str(HOST_PROFILE)], capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "M=0" in bad.stderr


def test_unknown_split_rejected():
    with pytest.raises(AutoconfigError, match="unknown split 'diagonal': rows, columns"):
        compile_matmul(16, 16, 16, profile=HOST_PROFILE, config=mm.MatmulConfig(SQUARE16, "tiled", 8),
                       split_by="diagonal")  # fmt: skip


@pytest.mark.parametrize("mnk", [(512, 16, 512), (1, 1000, 1024), (196, 672, 112), (3, 5, 7)])
def test_the_choice_skips_only_plans_that_cannot_win(mnk):
    """choose() leaves out groups of plans whose bound (a group of a width's tiles: their
    FMA floor; a tile's: its `floor_ns`) exceeds the best so far, and plans whose floor
    with the terms fixed by the blocks (`fixed_terms_ns`) does: each algorithm's best
    must be what scoring every candidate gives, no group's bound may exceed the bounds
    within it, and no plan's bound its predicted time."""
    profile = load_profile(Path(__file__).parent.parent / "hwprofiles" / "intel-xeon-model167-avx512.yaml")
    target, machine, shape = target_for("avx512"), Machine.of(profile), mm.MatmulShape(*mnk)
    every = [predict(p, machine) for t in (1, 2) for p in candidates(shape, machine, target, t)]
    assert all(floor_ns(p.plan, machine) + fixed_terms_ns(p.plan, machine) <= p.total_ns for p in every)

    def bounded(items: list, low: float) -> int:
        assert all(low <= (i.bound if isinstance(i, Group) else floor_ns(i, machine)) for i in items)
        return sum(bounded(i.members(), i.bound) if isinstance(i, Group) else 1 for i in items)

    assert sum(bounded(plan_groups(shape, machine, target, t), 0.0) for t in (1, 2)) == len(every)
    chosen = choose(shape, profile, target, 2)
    for best in chosen.per_algorithm:
        same = [p for p in every if p.config.algorithm == best.config.algorithm]
        assert best.plan == best_of(same, preference).plan
    assert len(chosen.per_algorithm) == len({p.config.algorithm for p in every})
    fastest = choose(shape, profile, target, 2, fastest=True).best  # each algorithm's best not wanted
    fastest_of_all = min(p.total_ns for p in every)
    assert fastest.total_ns <= tie_bound(fastest_of_all) and chosen.best.total_ns <= tie_bound(fastest.total_ns)


def tied(predictions: list) -> list:
    """The plans the model's documentation calls tied with the fastest: within RESOLUTION
    of it, or within PROGRAM_STEP_NS, once the fastest's call is left out (written out
    here from that rule, not taken from the model's code)."""
    first = min(predictions, key=lambda p: p.total_ns)
    call = first.term("call")
    fastest = first.total_ns - call
    return [p for p in predictions
            if p.total_ns - call <= max(fastest * (1 + RESOLUTION), fastest + PROGRAM_STEP_NS)]  # fmt: skip


def micro_kernels_in_code(config: mm.MatmulConfig, target) -> int:
    """The micro-kernels a config's generated code holds: its main tile and each edge
    tile outlined as a function of its own."""
    return 1 + len(re.findall(rf"func\.func @{config.symbol}_tile_", mm.generate(config, target).text))


@pytest.mark.parametrize("mnk", [(512, 512, 512), (196, 672, 112), (128, 128, 8192), (49, 1024, 1024)])
def test_a_tie_goes_to_the_fewest_micro_kernels(mnk):
    """Among an algorithm's plans predicted tied with its best, none generates fewer
    micro-kernels than the chosen one (counted in the generated code)."""
    profile = load_profile(Path(__file__).parent.parent / "hwprofiles" / "amd-epyc-zen5-avx512.yaml")
    target, machine, shape = target_for("avx512"), Machine.of(profile), mm.MatmulShape(*mnk)
    every = [predict(p, machine) for t in (1, 2) for p in candidates(shape, machine, target, t)]
    for best in choose(shape, profile, target, 2).per_algorithm:
        near = tied([p for p in every if p.config.algorithm == best.config.algorithm])
        counts = {p.config: micro_kernels_in_code(p.config, target) for p in near}
        assert micro_kernels_in_code(best.config, target) == min(counts.values())


def test_a_tie_is_judged_without_the_call():
    """On a tiny shape the 3.5 µs call dwarfs what the plans differ in: the choice is
    within RESOLUTION of the fastest kernel time, not of the fastest call (3x5x7:
    broadcast's 36 ns against tiled 8x1's 10 ns once tied)."""
    profile = load_profile(PROFILES / "amd-epyc-zen5-avx512.yaml")
    target, machine, shape = target_for("avx512"), Machine.of(profile), mm.MatmulShape(3, 5, 7)
    every = [predict(p, machine) for p in candidates(shape, machine, target, 1)]
    best = choose(shape, profile, target, 1).best
    assert best.config.algorithm != "broadcast"
    own = {p.plan: p.total_ns - p.term("call") for p in every}  # the kernel's own time
    assert own[best.plan] <= max(min(own.values()) * (1 + RESOLUTION), min(own.values()) + PROGRAM_STEP_NS)


def test_differences_under_a_program_step_are_ties():
    """At 1x1x1 every plan's kernel is predicted within a few ns: packed, fastest by
    0.05 ns for its zero-padded edge, is tied with plans a few ns slower (its packing pass measured
    0.1 µs slower), and the tie-break picks."""
    profile = load_profile(PROFILES / "amd-epyc-zen5-avx512.yaml")
    target, machine, shape = target_for("avx512"), Machine.of(profile), mm.MatmulShape(1, 1, 1)
    every = [predict(p, machine) for p in candidates(shape, machine, target, 1)]
    assert min(every, key=lambda p: p.total_ns).config.algorithm == "packed"
    assert choose(shape, profile, target, 1).best.config.algorithm != "packed"


@pytest.mark.parametrize("mnk", [(1000, 1, 1000), (1024, 1, 1024), (4000, 1, 1000)])
def test_a_memory_bound_tie_goes_to_the_preferred_rows_streamed(mnk):
    """Where memory bounds the tied plans, the choice reads the rows at once nearest the
    preferred streams: among the tied dot plans, whose largest memory term exceeds their
    compute terms, the chosen one's rows of A per step (its mr) are nearest."""
    profile = load_profile(PROFILES / "amd-epyc-zen5-avx512.yaml")
    target, machine, shape = target_for("avx512"), Machine.of(profile), mm.MatmulShape(*mnk)
    every = [predict(p, machine) for p in candidates(shape, machine, target, 1)]
    best = choose(shape, profile, target, 1).best

    def memory_over_compute(p) -> bool:
        memory = max(t.ns for t in p.terms if t.name.startswith("memory"))
        return memory > sum(t.ns for t in p.terms if t.name in ("fma", "latency", "loads", "edges", "c tile", "epilogue"))

    near = [p for p in tied(every) if p.config.algorithm == "dot" and memory_over_compute(p)]
    assert best.config.algorithm == "dot" and memory_over_compute(best) and len({p.config.mr for p in near}) > 1
    assert abs(best.config.mr - PREFERRED_STREAMS) == min(abs(p.config.mr - PREFERRED_STREAMS) for p in near)


@pytest.mark.parametrize("algorithm", ["tiled", "packed"])
def test_a_full_edge_without_a_partial_tile_is_the_plain_code(algorithm):
    """M a multiple of mr (N of nr) leaves no partial tile: a config that would compute
    one as a full tile emits the same code as one that would not (the tiled kernel once
    clamped every A row to the last there, 8-11% slower at 4096x16x64)."""
    target = target_for("avx512")
    plain = mm.MatmulConfig(mm.MatmulShape(64, 32, 16), algorithm, 16, mr=8, nv=1, kc=16, mc=64, nc=32, unroll=1)
    full = replace(plain, full_row_edge=True, full_column_edge=algorithm == "packed")
    assert mm.generate(full, target).text.replace(full.symbol, "K") == mm.generate(plain, target).text.replace(
        plain.symbol, "K")


def test_a_range_of_one_block_is_no_loop():
    """Blocks holding all the column tiles, all the row tiles or all of K are one trip
    at most: an `if`, not a loop (left are the column tiles, row tiles, k's chains and
    k); the K blocks stay a loop when there are several, as do the row and column
    blocks."""
    target = target_for("avx2")
    whole = mm.MatmulConfig(mm.MatmulShape(24, 32, 16), "tiled", 8, mr=3, nv=2, unroll=2)
    loops = {kw: mm.generate(replace(whole, **dict(kw)), target).text.count("scf.for")
             for kw in ((), (("kc", 8),), (("mc", 6), ("nc", 16)))}  # fmt: skip
    assert list(loops.values()) == [4, 5, 6]
    require_runnable(target)
    for kw in ((), (("kc", 8),), (("mc", 6), ("nc", 16))):
        check(build(replace(whole, **dict(kw)), target), replace(whole, **dict(kw)))


def test_k_loop_copies_give_a_trip_enough_fmas():
    """A trip holds TRIP_FMAS FMAs: 4 copies of AVX2's 6x2 tile (the measured case), 2
    of AVX-512's 8x3 or 6x4, one of a tile that big alone; never more than UNROLL. The
    candidates' register tiles are unrolled so."""
    assert (k_unroll(6, 2), k_unroll(8, 3), k_unroll(6, 4), k_unroll(12, 4)) == (4, 2, 2, 1)
    assert k_unroll(1, 1) == UNROLL and all(48 <= k_unroll(r, v) * r * v or k_unroll(r, v) == UNROLL
                                            for r in range(1, 13) for v in range(1, 7))  # fmt: skip
    profile = load_profile(Path(__file__).parent.parent / "hwprofiles" / "intel-xeon-model167-avx512.yaml")
    plans = candidates(mm.MatmulShape(300, 200, 100), Machine.of(profile), target_for("avx512"), 1)
    tiled = [p.config for p in plans if p.config.algorithm in ("tiled", "packed")]
    assert tiled and all(c.unroll == k_unroll(c.mr, c.nv) for c in tiled)


@pytest.mark.parametrize("name, lanes", [("intel-xeon-model167-avx512", 16), ("amd-epyc-zen4-avx512", 16),
                                         ("amd-epyc", 8)])  # fmt: skip
def test_streamed_k_blocks_are_packed_and_cut_the_c_passes(name, lanes):
    """A longer K block is offered to packed plans only and keeps its B block in half
    the L2; so does all of K where two of its B micro-panels fit there (the N-wide B
    block need not); each K block after the first is charged a pass over C, one block
    none."""
    machine = Machine.of(load_profile(PROFILES / f"{name}.yaml")).at(lanes, 1)
    shape, nr = mm.MatmulShape(1024, 256, 2048), 4 * lanes
    (l1_kc, both), *streamed = blockings(shape, 6, nr, machine)
    assert both == ("tiled", "packed") and l1_kc < shape.k
    assert streamed and all(kinds == ("packed",) and kc > l1_kc for kc, kinds in streamed)
    l2 = dict(machine.capacities())["L2"]
    assert all(kc * shape.n * 4 <= l2 * STREAMED_B_BLOCK_L2_SHARE for kc, _ in streamed)
    whole_k = int(l2 * STREAMED_B_BLOCK_L2_SHARE) // (2 * nr * 4) // UNROLL * UNROLL  # panels fit
    wide = mm.MatmulShape(197, 8 * whole_k, whole_k)  # its B block 8 times what fits
    assert [kc for kc, _ in blockings(wide, 6, nr, machine)][-1] == whole_k
    longer = mm.MatmulShape(197, 8 * whole_k, whole_k + 2 * UNROLL)
    assert whole_k + 2 * UNROLL not in [kc for kc, _ in blockings(longer, 6, nr, machine)]

    def c_passes(kc: int) -> Term:
        _, mc, nc, _ = block_sizes(shape, 6, nr, machine, kc)
        config = mm.MatmulConfig(shape, "packed", lanes, 6, 4, kc, mc, nc, 4)
        return next(t for t in predict(MatmulPlan(config), machine).terms if t.name == C_PASSES_TERM)

    assert c_passes(shape.k).ns == 0
    for kc in (shape.k // 2, streamed[0][0], l1_kc):
        assert c_passes(kc).ns > 0 and c_passes(kc).why.startswith(f"{-(-shape.k // kc) - 1} more K block(s)")


IN_PLACE = [
    mm.MatmulConfig(ANY, "broadcast", 8, unroll=4, leading=(23, 41, 37)),
    mm.MatmulConfig(ANY, "tiled", 8, mr=3, nv=2, kc=8, mc=6, unroll=2, leading=(23, 41, 37)),
    mm.MatmulConfig(ANY, "packed", 8, mr=4, nv=2, kc=5, mc=8, unroll=2, leading=(0, 41, 37),
                    full_row_edge=True, full_column_edge=True),
    mm.MatmulConfig(ANY, "packed", 8, mr=4, nv=2, kc=11, mc=8, unroll=2, leading=(23, 29, 37), b_transposed=True),
    mm.MatmulConfig(ANY, "packed", 8, mr=3, nv=1, b_transposed=True),
]


@pytest.mark.parametrize("case_id", ["avx2", pytest.param("neon", marks=pytest.mark.slow),
                                     pytest.param("rvv128", marks=pytest.mark.slow)])  # fmt: skip
@pytest.mark.parametrize("config", IN_PLACE, ids=lambda c: f"{c.algorithm}-{c.leading}-{c.b_transposed}")
@pytest.mark.parametrize("dims", [(13, 17, 19), (9, 33, 7), (1, 1, 1)], ids=lambda d: "x".join(map(str, d)))
def test_operands_read_and_written_in_place_through_row_strides(case_id, config, dims):
    """A, B (or Bᵀ: packed by squares transposed in registers, the k's past the last
    square by gathers) and C as strided views of wider matrices (one attention head of
    a [tokens, heads x width] tensor): the product lands in C's columns, the rest of
    each row is untouched."""
    target = target_for(case_id)
    require_runnable(target)
    config = at(replace(config, lanes=target.f32_lanes), dims)
    m, n, k = dims
    rows = config.rows_apart()
    rng = np.random.default_rng(1)
    a_wide = rng.standard_normal((m, rows[0]), dtype=np.float32)
    b_wide = rng.standard_normal((n, rows[1]) if config.b_transposed else (k, rows[1]), dtype=np.float32)
    c_wide = rng.standard_normal((m, rows[2]), dtype=np.float32)
    b = b_wide[:, :k].T if config.b_transposed else b_wide[:, :n]
    expected = c_wide.copy()
    expected[:, :n] = reference(a_wide[:, :k], b)
    args = [c_wide.reshape(-1), a_wide.reshape(-1), b_wide.reshape(-1)]
    if config.workspace():
        args.append(np.full(config.workspace(), np.nan, np.float32))
    kernel = build(config, target)
    for row_range in ((0, config.row_tiles() // 2), (config.row_tiles() // 2, config.row_tiles())):
        kernel(*args, *row_range, 0, config.col_tiles())
    np.testing.assert_allclose(c_wide, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("local", ["rows", "columns"])
@pytest.mark.parametrize("mnk", [(256, 3136, 64), (512, 768, 128)])
def test_a_tie_on_threads_goes_to_the_split_that_keeps_each_thread_on_what_it_wrote(mnk, local):
    """A 1x1 convolution's product on 2 threads whose best row and column splits tie: the
    choice splits along `local` (the dimension the computed operand's producer divided),
    whichever it is."""
    profile = load_profile(HOST_PROFILE)
    target, machine, shape = target_for("avx2"), Machine.of(profile), mm.MatmulShape(*mnk)
    every = [predict(p, machine) for t in (1, 2) for p in candidates(shape, machine, target, t, a_constant=True)]
    assert {p.plan.split for p in tied(every) if p.plan.threads == 2} == {"rows", "columns"}
    best = choose(shape, profile, target, 2, a_constant=True, local=local).best
    assert (best.plan.threads, best.plan.split) == (2, local)


@pytest.mark.parametrize("name, case_id", [("amd-epyc-zen4-avx512", "avx512"), ("amd-epyc", "avx2")])
def test_weights_from_memory_stall_a_tiled_product_read_in_segments(name, case_id):
    """Inside a model whose weights outgrow the L3, a tiled product's constant B comes
    from DRAM in row segments the prefetchers do not run ahead of: its first touch is a
    stall, B's bytes (plus a line per segment) at DRAM bandwidth; a packed plan's
    weights stream and add no stall; alone, or with weights that fit, neither does."""
    profile = load_profile(PROFILES / f"{name}.yaml")
    shape = mm.MatmulShape(128, 768, 3072)
    plans = {p.config.algorithm: p for p in candidates(shape, Machine.of(profile), target_for(case_id), 1,
                                                        b_constant=True) if p.config.algorithm in ("tiled", "packed")}
    assert set(plans) == {"tiled", "packed"} and all(p.b_weights for p in plans.values())
    big = Machine.of(profile).in_model(10**9)
    assert big.constants_level == "DRAM" and Machine.of(profile).in_model(10**6).constants_level is None

    def stall(plan: MatmulPlan, machine: Machine) -> float:
        return next(t.ns for t in predict(plan, machine).terms if t.name == "l1 misses")

    tiled = plans["tiled"]
    lines = -(-tiled.config.nr * 4 // big.line)
    segments = shape.k * shape.n * 4 * (1 + 1 / lines) / big.at(tiled.config.lanes, 1).bandwidth["DRAM"]
    assert stall(tiled, big) - stall(tiled, Machine.of(profile)) == pytest.approx(segments)
    assert stall(replace(tiled, b_weights=False), big) == stall(tiled, Machine.of(profile))
    assert predict(plans["packed"], big).total_ns == predict(plans["packed"], Machine.of(profile)).total_ns
    assert choose(shape, profile, target_for(case_id), 1, b_constant=True,
                  model_bytes=10**9).best.config.algorithm == "packed"


def resize_weights(size: int, out: int, mode: str = "linear", transform: str = "half_pixel") -> np.ndarray:
    """Bᵀ's transpose for resizing an axis of `size` to `out` (K×N): each output column a
    few taps of the input rows (onnx's reference weights)."""
    from autoconfig.graph.reference import resize_axis

    weights, _ = resize_axis({"mode": mode, "coordinate_transformation_mode": transform}, size, out, out / size, None)
    return np.ascontiguousarray(weights.T, np.float32)


def nonzero_rows(b: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Each column's first and last nonzero row (first > last: none)."""
    rows = [np.nonzero(b[:, j])[0] for j in range(b.shape[1])]
    return tuple((int(r[0]), int(r[-1])) if len(r) else (b.shape[0], -1) for r in rows)


BANDED = [resize_weights(28, 224), resize_weights(7, 100, "cubic"), resize_weights(33, 520, "linear", "align_corners"),
          resize_weights(40, 17)]  # fmt: skip


@pytest.mark.parametrize("tile", [(3, 2, False), (4, 1, True), (8, 1, False)])  # rows, vectors, full edges
@pytest.mark.parametrize("which", range(len(BANDED)))
def test_a_banded_product_multiplies_each_column_tiles_band_alone(tile, which):
    """B a resize's weights: each column tile multiplies only the rows `band` gives it.
    Rows outside every tile's band are filled with values the kernel must not read: a
    kernel that multiplied all of K would add them."""
    from autoconfig.models.matmul import band

    target = target_for("avx2")
    require_runnable(target)
    mr, nv, edges = tile
    b = BANDED[which]
    k, n = b.shape
    found = band(nonzero_rows(b), k, nv * 8)
    config = mm.MatmulConfig(mm.MatmulShape(37, n, k), "packed", 8, mr, nv, unroll=2, b_packed=True, a_in_place=True,
                             band=found, mc=mr if edges else 0,  # in row blocks of one tile, as the model picks
                             **({"full_row_edge": True, "full_column_edge": True} if edges else {}))
    starts = [max(0, min(j * found[1] // found[2] + found[3], k - found[0])) for j in range(0, n, nv * 8)]
    outside = np.ones_like(b, dtype=bool)
    for t, start in enumerate(starts):
        outside[start:start + found[0], t * nv * 8:(t + 1) * nv * 8] = False
    assert not (outside & (b != 0)).any()  # the band covers every weight
    given = np.where(outside, np.float32(1e3), b)
    a = np.random.default_rng(4).standard_normal((37, k), dtype=np.float32)
    c = np.full((37, n), np.nan, np.float32)
    kernel = build(config, target)
    for rows in ((0, config.row_tiles() // 2), (config.row_tiles() // 2, config.row_tiles())):
        kernel(c, a, config.pack_b(given.T), *rows, 0, config.col_tiles())
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mr, nv", [(3, 2), (8, 1)])
@pytest.mark.parametrize("which", range(len(BANDED)))
def test_a_tiled_product_multiplies_each_row_tiles_band_of_a_alone(mr, nv, which):
    """A a resize's weights along an outer axis (each row a few taps): each row tile
    multiplies only its band of A's columns (B's rows); A's entries outside every
    band are poisoned, as above."""
    from autoconfig.models.matmul import band

    target = target_for("avx2")
    require_runnable(target)
    a = np.ascontiguousarray(BANDED[which].T)  # M outputs x K inputs
    m, k = a.shape
    found = band(nonzero_rows(a.T), k, mr)
    config = mm.MatmulConfig(mm.MatmulShape(m, 21, k), "tiled", 8, mr, nv, unroll=2, band=found, band_rows=True)
    starts = [max(0, min(i * found[1] // found[2] + found[3], k - found[0])) for i in range(0, m, mr)]
    outside = np.ones_like(a, dtype=bool)
    for t, start in enumerate(starts):
        outside[t * mr:(t + 1) * mr, start:start + found[0]] = False
    assert not (outside & (a != 0)).any()
    b = np.random.default_rng(5).standard_normal((k, 21), dtype=np.float32)
    c = np.full((m, 21), np.nan, np.float32)
    kernel = build(config, target)
    for rows in ((0, config.row_tiles() // 2), (config.row_tiles() // 2, config.row_tiles())):
        kernel(c, np.where(outside, np.float32(1e3), a), b, *rows, 0, config.col_tiles())
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-5)


def test_only_a_constant_with_narrow_columns_is_offered_bands():
    """The family passes a constant's per-column spans to the model only where every
    column's nonzeros lie within `models.matmul.BAND_LIMIT` of K: a resize's weights, not
    a layer's dense ones nor a matrix with one wide column among narrow ones."""
    from autoconfig.families.matmul import _column_spans

    weights = resize_weights(28, 224)
    assert _column_spans(weights, False) == nonzero_rows(weights)
    assert _column_spans(np.ascontiguousarray(weights.T), True) == nonzero_rows(weights)
    assert _column_spans(np.random.default_rng(0).standard_normal((64, 40)), False) == ()
    wide = weights.copy()
    wide[[0, 27], 101] = 1.0  # one column among 224 spans all of K
    assert _column_spans(wide, False) == ()


def test_the_band_of_an_upsampling_is_its_taps_per_tile():
    """Bilinear 8x: a tile of 16 outputs spans 2 input rows and one more tap; cubic: 3
    more; a dense B's band is all of K."""
    from autoconfig.models.matmul import band

    assert band(nonzero_rows(resize_weights(28, 224)), 28, 16)[0] == 4
    assert band(nonzero_rows(resize_weights(28, 224, "cubic")), 28, 16)[0] == 6
    dense = np.ones((20, 30), np.float32)
    assert band(nonzero_rows(dense), 20, 16)[0] == 20


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("side", ["b", "a"])
def test_a_resize_product_is_chosen_banded_and_its_bound_holds(threads, side):
    """Along the width, B is the resize's weights (21x224 rows of 28 inputs times 28x224);
    along the height, A (224x28 times each channel's 28x28 image)."""
    from autoconfig.models.matmul import band

    profile = load_profile(PROFILES / "intel-xeon-model167-avx512.yaml")
    target, machine = target_for("avx512"), Machine.of(profile)
    spans = nonzero_rows(resize_weights(28, 224))  # per column of B, or per row of A = column of Aᵀ
    shape, options = ((mm.MatmulShape(4704, 224, 28), {"b_constant": True, "b_band": spans}) if side == "b"
                      else (mm.MatmulShape(224, 28, 28), {"a_band": spans}))  # fmt: skip
    every = [predict(p, machine) for p in candidates(shape, machine, target, threads, **options)]
    assert any(p.config.band[0] for p in every)
    assert all(floor_ns(p.plan, machine) + fixed_terms_ns(p.plan, machine) <= p.total_ns for p in every)
    best = choose(shape, profile, target, threads, **options).best
    tile = best.config.mr if best.config.band_rows else best.config.nr
    assert best.config.band[0] == band(spans, 28, tile)[0] and best.config.band_rows == (side == "a")
    assert "band" in dict(best.parameters)


def test_a_band_needs_a_in_place_a_and_b_packed():
    with pytest.raises(KernelError, match="a band of B's rows is for one packed product"):
        mm.MatmulConfig(mm.MatmulShape(8, 16, 8), "packed", 8, 2, 1, b_packed=True, band=(2, 8, 16, 0)).validate(
            target_for("avx2"))


def test_a_tiled_product_first_to_read_its_input_waits_on_the_other_cores_lines():
    """GoogLeNet's 14x14 512 -> 64 layer as a tiled product divided by rows on two
    threads, the first to read the tensor the threads before it wrote: each thread reads
    all of B in place, in row segments of one column tile, half of them from the other
    core's lines — priced per segment. Divided by columns (each thread the pixels it
    wrote), read again by a later kernel, or on one thread: no such term."""
    from autoconfig.models.cost import CROSS_CORE_TERM
    from autoconfig.models.matmul import REMOTE_SEGMENT_NS

    machine = Machine.of(load_profile(PROFILES / "intel-xeon-emerald-rapids-avx512.yaml"))
    config = mm.MatmulConfig(mm.MatmulShape(64, 196, 512), "tiled", 16, 8, 2, 256, 64, 0, 4, channel_axis="rows")
    fresh = replace(machine, fresh_input=True)
    term = predict(MatmulPlan(config, 2, "rows"), fresh).term(CROSS_CORE_TERM)
    assert term == pytest.approx(config.col_tiles() * 512 / 2 * REMOTE_SEGMENT_NS)  # one row block a thread
    for plan, at in ((MatmulPlan(config, 2, "columns"), fresh), (MatmulPlan(config, 2, "rows"), machine),
                     (MatmulPlan(config, 1, "rows"), fresh)):  # fmt: skip
        assert CROSS_CORE_TERM not in {t.name for t in predict(plan, at).terms}
