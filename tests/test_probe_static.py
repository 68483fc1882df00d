"""Static detection on saved procfs/sysfs trees of an x86_64, an aarch64 and a
riscv64 machine, and on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoconfig.errors import AutoconfigError
from autoconfig.probe import read_host_static, slug
from autoconfig.probe.static import read_static

FIXTURES = Path(__file__).parent / "fixtures" / "static"


def _caches(info):
    return {(c.level, c.kind): (int(c.size), int(c.ways), int(c.sets), int(c.shared_by))
            for c in info.caches}  # fmt: skip


def test_x86_64_zen4_vm():
    info = read_static(FIXTURES / "x86_64-amd-epyc-zen4")
    assert (info.isa, info.model, info.cores, info.threads) == ("x86_64", "AMD EPYC", 2, 2)
    assert info.features == ("avx2", "fma")  # AVX-512 masked off by the hypervisor
    assert (info.vector_bits, info.vector_registers, info.scalable) == (256, 16, False)
    assert info.frequency_ghz == pytest.approx(2.596)
    assert _caches(info) == {
        (1, "data"): (32 << 10, 8, 64, 1),
        (1, "instruction"): (32 << 10, 8, 64, 1),
        (2, "unified"): (1 << 20, 8, 2048, 1),
        (3, "unified"): (32 << 20, 16, 32768, 2),
    }


def test_aarch64_neoverse_n1():
    info = read_static(FIXTURES / "aarch64-graviton2-neoverse-n1")
    assert (info.isa, info.model, info.cores) == ("aarch64", "Arm Neoverse N1", 4)
    assert info.features == ("asimd",)
    assert (info.vector_bits, info.vector_registers) == (128, 32)
    assert info.frequency_ghz is None
    assert _caches(info)[(1, "data")] == (64 << 10, 4, 256, 1)
    assert _caches(info)[(3, "unified")] == (32 << 20, 16, 32768, 4)


def test_riscv64_spacemit_k1():
    info = read_static(FIXTURES / "riscv64-spacemit-k1")
    assert (info.isa, info.model, info.cores) == ("riscv64", "spacemit,x60", 4)
    assert info.features == ("rvv",) and info.scalable
    assert info.vector_bits is None  # VLEN is not in procfs
    assert _caches(info)[(2, "unified")] == (512 << 10, 16, 512, 4)
    assert (3, "unified") not in _caches(info)


def test_incomplete_cache_geometry_is_one_clear_error(tmp_path):
    import shutil

    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "aarch64-graviton2-neoverse-n1", root)
    for name in ("ways_of_associativity", "number_of_sets"):
        (root / "sys/devices/system/cpu/cpu0/cache/index2" / name).unlink()
    with pytest.raises(AutoconfigError, match="index2: incomplete cache geometry"):
        read_static(root)


def test_missing_cpuinfo_is_one_clear_error(tmp_path):
    with pytest.raises(AutoconfigError, match="cannot read .*proc/cpuinfo"):
        read_static(tmp_path)


def test_this_machine():
    info = read_host_static()
    assert info.cores >= 1 and info.threads >= info.cores
    assert any(c.level == 1 and c.kind == "data" for c in info.caches)


def test_slug():
    assert slug("AMD EPYC 9654 96-Core Processor") == "amd-epyc-9654-96-core-processor"
