"""MLIR → LLVM IR → object: the toolchain contract and its error paths."""

from __future__ import annotations

import llvmlite.binding as llvm
import pytest

from kernels.errors import KernelError
from kernels import fma, lower
from kernels.lower import compile_object, parse_mlir, to_llvm_ir
from tests.conftest import CASE_IDS_ALL, target_for


@pytest.mark.parametrize("case_id", CASE_IDS_ALL)
def test_installed_llvmlite_parses_the_bindings_ir(case_id):
    target = target_for(case_id)
    config = fma.FmaConfig.widest(target)
    llvm_ir = to_llvm_ir(fma.generate(config, target).module)
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    assert module.get_function(config.symbol).name == config.symbol


def test_unverifiable_mlir_names_the_cause():
    text = """
    func.func @f(%a: f32, %b: i32) -> f32 {
      %c = arith.addf %a, %b : f32
      return %c : f32
    }"""
    with pytest.raises(KernelError) as err:
        parse_mlir(text, "bad.mlir")
    message = str(err.value)
    assert message.startswith("invalid MLIR in bad.mlir:3:") and "\n" not in message


def test_syntax_error_names_the_cause():
    with pytest.raises(KernelError, match="invalid MLIR in bad.mlir:1:"):
        parse_mlir("func.func @f( {", "bad.mlir")


SCALABLE = """
func.func @s(%m: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<?xf32>, vector<[4]xf32>
  %w = arith.addf %v, %v : vector<[4]xf32>
  vector.store %w, %m[%c0] : memref<?xf32>, vector<[4]xf32>
  return
}
"""


def test_scalable_vectors_compile_for_rvv(tmp_path):
    obj = compile_object(to_llvm_ir(parse_mlir(SCALABLE)), target_for("rvv256"), tmp_path, assembly=True)
    assert obj.path.stat().st_size > 0 and "vsetvli" in obj.assembly


def test_llvm_abort_in_the_child_becomes_an_error(tmp_path):
    # x86 has no scalable vectors: LLVM's backend aborts; the caller gets one clear line,
    # and the next kernel compiles in a fresh child.
    with pytest.raises(KernelError, match=r"^LLVM (aborted|could not compile).* for avx2"):
        compile_object(to_llvm_ir(parse_mlir(SCALABLE)), target_for("avx2"), tmp_path)
    target = target_for("avx2")
    assert compile_object(to_llvm_ir(fma.generate(fma.FmaConfig.widest(target), target).module), target,
                          tmp_path).path.stat().st_size > 0  # fmt: skip


def test_llvm_children_are_kept_for_the_next_kernel(tmp_path):
    target = target_for("avx2")
    llvm_ir = to_llvm_ir(fma.generate(fma.FmaConfig.widest(target), target).module)
    compile_object(llvm_ir, target, tmp_path, "first")
    children = {id(backend.process) for backend in lower._Backends.idle}
    compile_object(llvm_ir, target, tmp_path, "second")
    assert children and {id(backend.process) for backend in lower._Backends.idle} == children
    assert all(backend.process.poll() is None for backend in lower._Backends.idle)
