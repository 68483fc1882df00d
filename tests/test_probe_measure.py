"""The probe's generated micro-benchmark kernels compute what they claim (on every
target), plateau detection finds levels in a curve, and the probe command writes a
valid profile atomically. Nothing here asserts a speed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from kernels.errors import KernelError
from autoconfig.probe.bench import working_sets
from autoconfig.runtime import aligned_array
from autoconfig.probe.curve import find_plateaus
from autoconfig.profile import load_profile
from kernels import microbench as mb
from autoconfig.probe.host import this_host
from kernels.library import build_library
from tests.conftest import CASE_IDS_ALL, require_runnable, target_for


def fma_chain_reference(chains, unroll, lanes, iters, x, y):
    acc = np.float32(0)
    for _ in range(iters * unroll):
        acc = np.float32(acc * np.float32(x) + np.float32(y))
    return chains * lanes * acc


@pytest.mark.parametrize("case_id", CASE_IDS_ALL)
def test_fma_chain_kernel_computes_the_chains(case_id):
    target = target_for(case_id)
    require_runnable(target)
    config = mb.FmaChainConfig(lanes=target.f32_lanes, chains=3, unroll=2)
    kernel = build_library(mb.generate_fma_chain(config, target), this_host()).kernel(config.symbol)
    out = np.zeros(1, np.float32)
    kernel(out, np.array([0.5, 1.0], np.float32), 5)
    expected = fma_chain_reference(3, 2, target.f32_lanes, 5, 0.5, 1.0)
    assert out[0] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("case_id", CASE_IDS_ALL)
def test_stream_kernel_sums_whole_blocks(case_id):
    target = target_for(case_id)
    require_runnable(target)
    config = mb.StreamConfig(lanes=target.f32_lanes, accumulators=3)
    kernel = build_library(mb.generate_stream(config, target), this_host()).kernel(config.symbol)
    data = np.arange(1000, dtype=np.float32) % 7
    out = np.zeros(1, np.float32)
    kernel(out, data, 1000, 2)
    full = 1000 - 1000 % config.block  # a whole number of blocks at the planned VLEN
    assert out[0] == 2 * data[:full].sum()


@pytest.mark.parametrize("case_id", CASE_IDS_ALL)
def test_broadcast_stream_fmas_every_element_into_all_lanes(case_id):
    target = target_for(case_id)
    require_runnable(target)
    config = mb.StreamConfig(lanes=target.f32_lanes, accumulators=3, broadcast=True)
    kernel = build_library(mb.generate_stream(config, target), this_host()).kernel(config.symbol)
    data = (np.arange(1000, dtype=np.float32) % 7) + 2  # data[0] = 2 scales every product
    out = np.zeros(1, np.float32)
    kernel(out, data, 1000, 2)
    full = 1000 - 1000 % config.block
    assert out[0] == 2 * 2 * target.f32_lanes * data[:full].sum()


def test_fma_chains_must_fit_the_registers():
    with pytest.raises(KernelError, match="exceed avx2's 16 vector registers"):
        mb.generate_fma_chain(mb.FmaChainConfig(8, 15), target_for("avx2"))


def test_aligned_array_starts_on_a_cache_line():
    for count in (1, 17, 1000):
        a = aligned_array(count, 2.0)
        assert a.ctypes.data % 64 == 0 and a.size == count and np.all(a == 2.0)


def test_working_sets_are_geometric_whole_blocks():
    sizes = working_sets(4096, 1 << 20, 2, 256)
    assert sizes[0] == 4096 and sizes[-1] == 1 << 20 and len(sizes) == 17
    assert all(s % 256 == 0 for s in sizes) and sizes == sorted(set(sizes))


def synthetic_curve(levels, sizes_kib, noise, seed=0):
    """Bandwidth falling in steps at the given sizes, with multiplicative noise."""
    rng = np.random.default_rng(seed)
    xs = [4096 * 2 ** (i / 3) for i in range(49)]  # 4 KiB to 256 MiB
    ys = []
    for x in xs:
        level = sum(x > s * 1024 for s in sizes_kib)
        ys.append(levels[level] * (1 + noise * rng.standard_normal()))
    return xs, ys


def test_plateaus_and_knees_of_a_clean_staircase():
    xs, ys = synthetic_curve([160, 80, 60, 25], [32, 1024, 32768], noise=0.0)
    found = find_plateaus(xs, ys, 4)
    assert found.bandwidths == pytest.approx([160, 80, 60, 25])
    for knee, size in zip(found.knees, [32, 1024, 32768]):
        assert size * 1024 / 1.3 <= knee <= size * 1024 * 1.3


def test_close_levels_and_a_ramp_survive_noise():
    # L2 and L3 only 15% apart, a gradual ramp to DRAM, 3% noise: still four levels.
    xs, ys = synthetic_curve([160, 80, 68, 50, 38, 28], [32, 1024, 16384, 24576, 32768], 0.03)
    found = find_plateaus(xs, ys, 4)
    assert found.bandwidths[0] == pytest.approx(160, rel=0.1)
    assert found.bandwidths[1] == pytest.approx(80, rel=0.1)
    assert found.bandwidths[2] == pytest.approx(68, rel=0.1)
    assert found.bandwidths[3] == pytest.approx(28, rel=0.1)
    assert 16 * 1024 <= found.knees[0] <= 64 * 1024
    assert 512 * 1024 <= found.knees[1] <= 2048 * 1024


def test_too_few_points_for_the_levels():
    with pytest.raises(ValueError):
        find_plateaus([1, 2, 3], [3, 2, 1], 2)


def _default_sigint() -> None:
    """Give the child SIGINT's default action: a shell's background job (e.g. `make test &`)
    starts with SIGINT ignored, which the child would inherit and Python would respect."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args):
    return subprocess.Popen(
        [sys.executable, "-m", "autoconfig.cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint,
    )  # fmt: skip


@pytest.mark.slow
def test_quick_probe_writes_a_valid_profile(tmp_path):
    missing = run_cli("probe", "--quick", "--no-progress", "--out", str(tmp_path / "no" / "host.yaml"))
    _, stderr = missing.communicate(timeout=30)  # refused before measuring anything
    assert missing.returncode == 2 and "directory" in stderr and "does not exist" in stderr
    (tmp_path / "profiles").mkdir()
    out = tmp_path / "profiles" / "host.yaml"
    done = run_cli("probe", "--quick", "--no-progress", "--out", str(out))
    stdout, stderr = done.communicate(timeout=120)
    assert done.returncode == 0, stderr
    profile = load_profile(out)
    assert profile.bandwidth is not None and len(profile.bandwidth.single_thread.curve) >= 8
    assert {"L1", "DRAM"} <= set(profile.bandwidth.single_thread.levels)
    assert all(f.throughput.source == "measured" for f in profile.fma)
    assert "GFLOP/s per core" in stdout and f"wrote {out}" in stdout
    assert [p.name for p in out.parent.iterdir()] == ["host.yaml"]


@pytest.mark.slow
def test_interrupted_probe_leaves_no_file(tmp_path):
    out = tmp_path / "host.yaml"
    proc = run_cli("probe", "--no-progress", "--out", str(out))
    time.sleep(4)  # well inside the measurements
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr
    assert list(tmp_path.iterdir()) == []
