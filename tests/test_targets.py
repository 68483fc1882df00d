"""The target table, name lookup and host detection."""

import pytest

from kernels.errors import KernelError
from autoconfig.probe.host import named_target, this_host
from kernels.target import ISA_NAMES, HostCpu, all_targets, get_target, host_target


def test_table_matches_design():
    table = {t.name: t for t in all_targets()}
    assert set(table) == {"avx2", "avx512", "neon", "rvv"}
    assert (table["avx2"].cpu, table["avx2"].f32_lanes, table["avx2"].vector_registers) == (
        "x86-64-v3", 8, 16)
    assert (table["avx512"].cpu, table["avx512"].f32_lanes, table["avx512"].vector_registers) == (
        "x86-64-v4", 16, 32)
    assert table["neon"].triple.startswith("aarch64") and table["neon"].f32_lanes == 4
    rvv = table["rvv"]
    assert rvv.scalable and rvv.vector_bits == 256 and rvv.abi == "lp64d" and "+v" in rvv.features
    assert not any(t.scalable for t in (table["avx2"], table["avx512"], table["neon"]))


def test_rvv_vlen_is_a_parameter():
    rvv = get_target("rvv", vlen=128)
    assert (rvv.vector_bits, rvv.f32_lanes, rvv.vscale) == (128, 4, 2)
    assert "vlen=128" in " ".join(rvv.emulator)


@pytest.mark.parametrize("vlen", [64, 100, 2048])
def test_bad_vlen_rejected(vlen):
    with pytest.raises(KernelError, match="VLEN"):
        get_target("rvv", vlen=vlen)


def test_unknown_target_names_the_known_ones():
    with pytest.raises(KernelError, match=r"unknown target 'sse9'.*avx2, avx512, neon, rvv"):
        get_target("sse9")


def test_vlen_only_for_rvv():
    with pytest.raises(KernelError, match="only to the rvv"):
        get_target("avx2", vlen=256)


def test_host_is_a_natively_running_target():
    host = host_target(this_host())
    assert host.name in ISA_NAMES
    assert host.execution(this_host()).mode == "native"
    assert named_target("host") == host
    # An x86 host that runs avx512 code runs avx2 code too.
    if host.name == "avx512":
        assert get_target("avx2").execution(this_host()).mode == "native"


def test_a_target_runs_where_the_host_has_its_flags():
    """Whether code runs is a function of the host described, not of this machine."""
    avx512, neon = get_target("avx512"), get_target("neon")
    assert avx512.execution(HostCpu("x86_64", frozenset({"avx2", "fma"}))).mode == "unavailable"
    assert "avx512f" in avx512.execution(HostCpu("x86_64", frozenset({"avx2", "fma"}))).reason
    assert avx512.execution(HostCpu("x86_64", avx512.host_flags)).mode == "native"
    assert neon.execution(HostCpu("aarch64", frozenset({"asimd"}))).mode == "native"
    assert neon.execution(HostCpu("x86_64", frozenset())).mode in ("emulated", "unavailable")
