"""The native thread pool (autoconfig/pool.c) behind multi-threaded kernels: every
part runs exactly once, with its own arguments, whatever the pool's state — workers
spinning, asleep, busy with another caller, or lost in a forked child."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from autoconfig import compile_matmul
from autoconfig.lowering import part_blocks
from autoconfig.models.matmul import MatmulPlan
from autoconfig.runtime import ALIGN_MIN_BYTES, STAGING_MIN_PASSES, AlignedStaging, Call, Part, Program, Ref, aligned_array, split
from kernels import matmul as mm
from autoconfig.probe.host import this_host
from kernels.library import Kernel, build_library
from kernels.target import get_target
from tests.test_matmul import HOST_PROFILE, reference

SLEEP_AFTER_SECONDS = 0.1  # longer than the pool's spin (SPIN_NS = 20 ms): workers sleep


def split_program(kernel: Kernel, sizes: Sequence[Sequence[int]],
                  private: Sequence[Sequence[np.ndarray]] | None = None) -> Program:  # fmt: skip
    """One kernel called on several parts at once, part i with arguments
    ``(*shared, *private[i], *sizes[i])``: the shared arrays are given at each call,
    each part's private buffers (e.g. a packing workspace) are fixed."""
    private = [list(p) for p in private] if private else [[] for _ in sizes]
    shared = len(kernel.signature.buffers) - len(private[0])
    fixed = [buffer for buffers in private for buffer in buffers]
    parts, space = [], shared
    for own, part_sizes in zip(private, sizes, strict=True):
        refs = [Ref(i) for i in range(shared)] + [Ref(space + j) for j in range(len(own))]
        space += len(own)
        parts.append(Part(tuple(refs), tuple(part_sizes)))
    return Program(kernel.library, [Call(kernel.signature.symbol, tuple(parts))], fixed, shared)


@pytest.fixture(scope="module")
def avx2():
    """The AVX2 target of HOST_PROFILE; the pool serves native code only."""
    target = get_target("avx2")
    if target.execution(this_host()).mode != "native":
        pytest.skip(f"avx2 does not run natively here ({target.execution(this_host()).mode})")
    return target


def operands(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_each_part_runs_once_with_its_own_arguments(avx2, parts):
    # accumulating C += A·B: a part run twice or not at all changes the result
    config = mm.MatmulConfig(mm.MatmulShape(41, 24, 13), "packed", 8, mr=2, nv=1, kc=8, accumulate=True)
    kernel = build_library(mm.generate(config, avx2), this_host()).kernel(config.symbol)
    ranges = [(b, e, 0, config.col_tiles()) for b, e in split(config.row_tiles(), parts)]
    assert len(ranges) == parts
    work = [[np.empty(config.workspace(), np.float32)] for _ in ranges]
    run = split_program(kernel, ranges, work)
    a, b = operands(41, 24, 13, parts)
    c = np.ones((41, 24), np.float32)
    run(c, a, b)
    np.testing.assert_allclose(c, reference(a, b) + 1, rtol=1e-4, atol=1e-4)


def two_part_matmul(target, m: int, n: int, k: int) -> Program:
    """C = A·B (tiled, unpacked) split into two row blocks."""
    config = mm.MatmulConfig(mm.MatmulShape(m, n, k), "tiled", 8, mr=4, nv=2)
    kernel = build_library(mm.generate(config, target), this_host()).kernel(config.symbol)
    return split_program(kernel, part_blocks(MatmulPlan(config, threads=2)))


def a_worker_helps(run: Program, a: np.ndarray, b: np.ndarray, seconds: float = 5.0) -> bool:
    """Call until a part runs on a worker (asserting each result), for at most `seconds`:
    a worker that was asleep may take a while to be scheduled on a busy machine."""
    expected, deadline = reference(a, b), time.monotonic() + seconds
    while time.monotonic() < deadline:
        c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
        parts_on_workers = run(c, a, b)
        np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
        if parts_on_workers:
            return True
    return False


def test_sleeping_workers_wake_up(avx2):
    run = two_part_matmul(avx2, 96, 64, 32)
    a, b = operands(96, 64, 32, 0)
    assert a_worker_helps(run, a, b)
    time.sleep(SLEEP_AFTER_SECONDS)
    assert a_worker_helps(run, a, b)  # a lost wake-up would leave every part to the caller


def test_concurrent_callers_each_get_their_result(avx2):
    # six Python threads, two per compiled matmul: the pool and each packing workspace
    # are shared between callers
    shapes = [(60, 40, 30), (37, 72, 19), (90, 16, 64)]
    compiled = [compile_matmul(m, n, k, profile=HOST_PROFILE, threads=2,
                               config=mm.MatmulConfig(mm.MatmulShape(m, n, k), "packed", 8, 4, 2))
                for m, n, k in shapes]  # fmt: skip
    failures: list[str] = []

    def hammer(caller: int) -> None:
        index = caller % len(shapes)
        a, b = operands(*shapes[index], seed=caller)
        expected = reference(a, b)
        for _ in range(200):
            if not np.allclose(compiled[index](a, b), expected, rtol=1e-4, atol=1e-4):
                failures.append(f"caller {caller}, shape {shapes[index]}: wrong result")
                return

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2 * len(shapes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_starts_its_own_workers(avx2):
    run = two_part_matmul(avx2, 64, 48, 40)
    a, b = operands(64, 48, 40, 5)
    assert a_worker_helps(run, a, b)  # the parent's workers exist
    pid = os.fork()
    if pid == 0:  # child: the parent's workers are gone; without new ones no part goes to one
        try:
            code = 0 if a_worker_helps(run, a, b) else 1
        except BaseException:
            code = 2
        os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0, "child: 1 = no worker ran, 2 = wrong result"
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung calling a 2-part kernel")


@pytest.mark.parametrize("parts", [1, 2])
def test_arrays_are_read_where_numpy_keeps_them(avx2, parts):
    # views into larger arrays start past their base's data: the native runtime must
    # read each view's own data pointer, on one part and on several
    m, n, k = 20, 24, 12
    base_a, base_b = operands(m + 3, n, 2 * k, parts)
    a, b = np.ascontiguousarray(base_a[:, :k])[1 : m + 1], base_b[k:]
    assert a.base is not None and b.base is not None and b.flags.c_contiguous
    c_base = np.full((m + 2, n), 7.0, np.float32)
    c = c_base[1 : m + 1]
    config = mm.MatmulConfig(mm.MatmulShape(m, n, k), "packed", 8, 4, 2, accumulate=True)
    compile_matmul(m, n, k, profile=HOST_PROFILE, config=config, threads=parts)(a, b, c)
    np.testing.assert_allclose(c, reference(a, b) + 7, rtol=1e-4, atol=1e-4)
    assert (c_base[0] == 7).all() and (c_base[-1] == 7).all()  # nothing written outside the view


def _at_offset(array: np.ndarray, floats: int) -> np.ndarray:
    """A copy of `array` starting `floats` floats past a cache line."""
    placed = aligned_array(array.size + floats)[floats:].reshape(array.shape)
    placed[...] = array
    return placed


@pytest.mark.parametrize("offset", [0, 1, 4, 8, 15])
def test_operands_off_a_cache_line_give_the_same_product(avx2, offset):
    # a tiled kernel reads B in place with vector loads: off a cache line, the call
    # reads it from an aligned copy (B and C large enough for that to pay, B read by 32
    # row tiles); the result must not depend on where B lies, and the output the call
    # allocates starts on a cache line
    m, n, k = 128, 136, 128
    a, b = operands(m, n, k, offset)
    config = mm.MatmulConfig(mm.MatmulShape(m, n, k), "tiled", 8, 4, 2)
    f = compile_matmul(m, n, k, profile=HOST_PROFILE, config=config)
    placed = _at_offset(b, offset)
    assert (placed.ctypes.data % 64 == 0) == (offset == 0)
    for _ in range(2):  # the second call reuses the aligned copy
        c = f(a, placed)
        np.testing.assert_allclose(c, reference(a, b), rtol=1e-4, atol=1e-4)
        assert c.ctypes.data % 64 == 0
    placed[0, 0] += 1.0  # a changed B is copied again, not read stale
    np.testing.assert_allclose(f(a, placed), reference(a, placed), rtol=1e-4, atol=1e-4)


def test_staging_copies_only_what_is_off_a_line_large_and_reread():
    shape = (64, ALIGN_MIN_BYTES // 4 // 64)  # exactly ALIGN_MIN_BYTES
    assert AlignedStaging.of((shape[0] - 1, shape[1]), STAGING_MIN_PASSES) is None  # too small to pay
    assert AlignedStaging.of(shape, STAGING_MIN_PASSES - 1) is None  # read too few times
    staging = AlignedStaging.of(shape, STAGING_MIN_PASSES)
    values = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    aligned = _at_offset(values, 0)
    assert staging(aligned) is aligned  # on a line: read where it is
    off = _at_offset(values, 4)
    staged = staging(off)
    assert staged is not off and staged.ctypes.data % 64 == 0 and np.array_equal(staged, values)
