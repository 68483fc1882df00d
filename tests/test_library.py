"""Libraries of many kernels: unique symbols, one library holding kernels of several
families and shapes, compiled once (a second build takes every object from the cache)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.errors import KernelError
from kernels import fma
from kernels import matmul as mm
from kernels.cache import KernelCache
from autoconfig.probe.host import this_host
from kernels.library import build_library
from kernels.lower import compile_units
from tests.conftest import require_runnable, target_for

MATMULS = [
    mm.MatmulConfig(mm.MatmulShape(9, 20, 7), "tiled", 4, mr=3, nv=2),
    mm.MatmulConfig(mm.MatmulShape(33, 17, 12), "packed", 4, mr=4, nv=1, kc=5),
]


def modules(target):
    return [*(mm.generate(c, target) for c in MATMULS), fma.generate(fma.FmaConfig(4), target)]


@pytest.mark.parametrize("case_id", ["avx2", "neon"])
def test_one_library_holds_two_matmuls_and_an_fma(tmp_path, case_id):
    target = target_for(case_id)
    require_runnable(target)
    library = build_library(modules(target), this_host(), cache=KernelCache(tmp_path / "cache"))
    assert len({s.symbol for s in library.signatures}) == 3
    rng = np.random.default_rng(0)
    for config in MATMULS:
        s = config.shape
        a, b = rng.standard_normal((s.m, s.k), dtype=np.float32), rng.standard_normal((s.k, s.n), dtype=np.float32)
        c = np.empty((s.m, s.n), np.float32)
        work = [np.empty(config.workspace(), np.float32)] if config.workspace() else []
        library.kernel(config.symbol)(c, a, b, *work, 0, config.row_tiles(), 0, config.col_tiles())
        np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    x = rng.standard_normal(19, dtype=np.float32)
    out = np.empty(19, np.float32)
    library.kernel("ac_fma_f32_l4")(out, x, x, x, 19)
    np.testing.assert_allclose(out, x * x + x, rtol=1e-6)
    if library.mode == "emulated":
        assert library.archive is not None and library.archive.stat().st_size > 0


def test_second_build_compiles_nothing(tmp_path):
    target = target_for("avx2")
    require_runnable(target)
    cache = KernelCache(tmp_path / "cache")
    first = build_library(modules(target), this_host(), cache=cache)
    assert (first.compiled, first.cached) == (3, 0)
    # a build prints no assembly listing (a second code generation) and caches objects only
    assert all(o.assembly is None for o in first.objects) and not list((tmp_path / "cache").glob("*.s"))
    second = build_library(modules(target), this_host(), cache=cache)  # generated anew: same text, same keys
    assert (second.compiled, second.cached) == (0, 3)
    # the packed matmul's outlined functions compiled apart: more objects than modules, all cached
    assert len(second.objects) == len(first.objects) > 3
    config = MATMULS[0]
    s = config.shape
    a, b = np.ones((s.m, s.k), np.float32), np.ones((s.k, s.n), np.float32)
    c = np.zeros((s.m, s.n), np.float32)
    second.kernel(config.symbol)(c, a, b, 0, config.row_tiles(), 0, config.col_tiles())
    assert (c == s.k).all()  # the cached object is the working kernel


def test_a_module_compiles_as_one_unit_per_function():
    module = mm.generate(MATMULS[1], target_for("avx2")).module  # packing and edge tiles outlined
    functions = sorted(str(op.attributes["sym_name"]) for op in module.body.operations)
    units = compile_units(module)
    assert len(units) == len(functions) >= 4
    defined = []
    for unit in units:
        ops = list(unit.regions[0].blocks[0].operations)
        assert sorted(str(op.attributes["sym_name"]) for op in ops) == functions  # the others declared
        bodies = [op for op in ops if len(op.regions[0].blocks)]
        assert len(bodies) == 1
        defined.append(str(bodies[0].attributes["sym_name"]))
        assert all(str(op.attributes["sym_visibility"]) == '"private"' for op in ops if op not in bodies)
    assert sorted(defined) == functions
    single = fma.generate(fma.FmaConfig(4), target_for("avx2")).module
    assert compile_units(single) == [single]  # one function: the module itself


def test_symbols_are_unique_per_config():
    a, b = MATMULS
    assert a.symbol != b.symbol and a.symbol.startswith("ac_matmul_f32_9x20x7_")
    assert mm.MatmulConfig(a.shape, "tiled", 4, mr=3, nv=2, kc=4).symbol != a.symbol


def test_mixed_targets_rejected():
    with pytest.raises(KernelError, match="share one target"):
        build_library([mm.generate(MATMULS[0], target_for("avx2")), fma.generate(fma.FmaConfig(4), target_for("neon"))], this_host())
