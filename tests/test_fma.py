"""The FMA kernel family on every target: results, generated instructions, and
what happens when the code runs on a CPU without the vector extension."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kernels.errors import KernelError
from kernels import fma
from kernels.lower import compile_object, to_llvm_ir
from autoconfig.probe.host import this_host
from kernels.library import build_library
from tests.conftest import CASE_IDS_ALL, require_runnable, target_for

LENGTHS = [0, 1, 7, 8, 15, 16, 17, 1000, 4097]
CASE_IDS = CASE_IDS_ALL


def reference(a, b, c):
    """Fused a*b+c rounded once: f32 products are exact in f64."""
    return (a.astype(np.float64) * b + c).astype(np.float32)


@pytest.fixture(scope="module", params=CASE_IDS)
def library(request):
    target = target_for(request.param)
    require_runnable(target)
    return build_library(fma.generate(fma.FmaConfig.widest(target), target), this_host())


@pytest.fixture(scope="module")
def assembly(tmp_path_factory):
    """Assembly of the widest FMA kernel per target; compiling needs no CPU support."""
    listings = {}
    for case_id in CASE_IDS:
        target = target_for(case_id)
        module = fma.generate(fma.FmaConfig.widest(target), target).module
        out = tmp_path_factory.mktemp(case_id)
        listings[case_id] = compile_object(to_llvm_ir(module), target, out, assembly=True).assembly
    return listings


def run(kernel, n, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    out = np.full(n, np.nan, np.float32)
    kernel(out, a, b, c, n)
    return out, reference(a, b, c)


def test_matches_numpy_for_every_length(library):
    kernel = library.kernel(library.signatures[0].symbol)
    for n in LENGTHS:
        out, expected = run(kernel, n, seed=n)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6, err_msg=f"n={n}")


def test_does_not_write_past_n(library):
    kernel = library.kernel(library.signatures[0].symbol)
    n = 13
    a, b, c = (np.ones(32, np.float32) for _ in range(3))
    out = np.full(32, -7.0, np.float32)
    kernel(out, a, b, c, n)
    assert np.all(out[:n] == 2.0) and np.all(out[n:] == -7.0)


def test_avx2_stays_in_ymm(assembly):
    assert target_for("avx2").cpu == "x86-64-v3"
    assert "ymm" in assembly["avx2"] and "zmm" not in assembly["avx2"]
    assert re.search(r"vfmadd\w*ps\s+.*ymm", assembly["avx2"])


def test_avx512_uses_zmm(assembly):
    assert re.search(r"vfmadd\w*ps\s+.*zmm", assembly["avx512"])


def test_neon_uses_fmla_on_4s(assembly):
    assert re.search(r"fmla\s+v\d+\.4s", assembly["neon"])


@pytest.mark.parametrize("case_id", ["rvv128", "rvv256"])
def test_rvv_uses_vector_instructions(assembly, case_id):
    assert "vsetvli" in assembly[case_id]
    assert re.search(r"vfmacc\.vv|vfmadd\.vv", assembly[case_id])


def test_rvv_binary_needs_the_vector_extension():
    target = target_for("rvv256")
    require_runnable(target)
    library = build_library(fma.generate(fma.FmaConfig.widest(target), target), this_host())
    kernel = library.kernel(library.signatures[0].symbol)
    a = np.ones(40, np.float32)
    out = np.zeros(40, np.float32)
    kernel(out, a, a, a, 40)  # runs with V enabled
    assert np.all(out == 2.0)
    with pytest.raises(KernelError, match="SIGILL"):
        kernel(out, a, a, a, 40, emulator=("qemu-riscv64", "-cpu", "rv64"))


@pytest.mark.parametrize("lanes", [1, 4])
def test_narrower_vectors_on_the_host(lanes):
    target = target_for("avx2")
    require_runnable(target)
    kernel = build_library(fma.generate(fma.FmaConfig(lanes), target), this_host()).kernel(f"ac_fma_f32_l{lanes}")
    for n in (0, 3, 4, 9):
        out, expected = run(kernel, n)
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("lanes", [0, 3, 16])
def test_invalid_lanes_rejected_with_reason(lanes):
    with pytest.raises(KernelError, match=f"lanes={lanes} is invalid for avx2"):
        fma.generate(fma.FmaConfig(lanes), target_for("avx2"))


def test_rvv_lanes_must_fill_whole_vscale_units():
    with pytest.raises(KernelError, match="vscale"):
        fma.generate(fma.FmaConfig(2), target_for("rvv256"))


def test_bad_arguments_are_rejected_before_the_call(library):
    kernel = library.kernel(library.signatures[0].symbol)
    f32 = np.zeros(8, np.float32)
    with pytest.raises(KernelError, match="float32"):
        kernel(f32, f32.astype(np.float64), f32, f32, 8)
    with pytest.raises(KernelError, match="has 8 elements, needs 9"):
        kernel(f32, f32, f32, f32, 9)
    with pytest.raises(KernelError, match="takes 5 arguments"):
        kernel(f32, f32, 8)
    with pytest.raises(KernelError, match="C-contiguous"):
        kernel(np.zeros(16, np.float32)[::2], f32, f32, f32, 8)
