"""Lowering: MLIR (scf, vector, memref, arith, math) → LLVM dialect → LLVM IR → object.

The MLIR part runs in-process with the bindings' pass manager. The LLVM part runs in
a child process with llvmlite (`kernels.llvm_backend`), because a fatal LLVM error
aborts its process: here it becomes an AutoconfigError naming the target.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autoconfig.errors import AutoconfigError
from kernels.emit import first_diagnostic
from kernels.mlir import MLIRError, ir, passmanager, translate_module_to_llvmir
from kernels.target import Target

PIPELINE = ",".join(
    [
        "lower-affine",
        "convert-vector-to-scf",
        "convert-scf-to-cf",
        "convert-vector-to-llvm{vector-contract-lowering=outerproduct}",
        "convert-math-to-llvm",
        "finalize-memref-to-llvm",
        "convert-arith-to-llvm",
        "convert-cf-to-llvm",
        "convert-func-to-llvm",
        "convert-index-to-llvm",
        "reconcile-unrealized-casts",
    ]
)
"""The MLIR pass pipeline to the LLVM dialect (checked on this toolchain, DESIGN §3)."""


@dataclass(frozen=True)
class ObjectFile:
    """A compiled object and its assembly listing (kept for inspection and tests)."""

    path: Path
    assembly: str
    target: Target


def parse_mlir(text: str, source: str = "<input>") -> ir.Module:
    """Parse and verify MLIR text in a fresh context; errors name the first diagnostic."""
    context = ir.Context()
    try:
        with context, ir.Location.unknown():
            module = ir.Module.parse(text)
            module.operation.verify()
    except MLIRError as err:
        diagnostic = first_diagnostic(err)
        separator = ":" if diagnostic[:1].isdigit() else ": "  # "file:line:col: msg"
        raise AutoconfigError(f"invalid MLIR in {source}{separator}{diagnostic}") from None
    return module


def to_llvm_ir(module: ir.Module) -> str:
    """Lower a verified module to LLVM IR text (the module is lowered in place)."""
    with module.context:
        try:
            passmanager.PassManager.parse(f"builtin.module({PIPELINE})").run(module.operation)
            return str(translate_module_to_llvmir(module.operation))
        except MLIRError as err:
            raise AutoconfigError(f"lowering to LLVM failed: {first_diagnostic(err)}") from None


def compile_object(llvm_ir: str, target: Target, out_dir: Path, stem: str = "kernels") -> ObjectFile:
    """Compile LLVM IR for `target` into ``out_dir/stem.o`` in a child process."""
    ir_path = out_dir / f"{stem}.ll"
    obj_path = out_dir / f"{stem}.o"
    asm_path = out_dir / f"{stem}.s"
    ir_path.write_text(llvm_ir)
    command = [
        sys.executable, "-m", "kernels.llvm_backend", str(ir_path),
        "--triple", target.triple, "--cpu", target.cpu,
        "--features", target.features, "--abi", target.abi,
        "--object", str(obj_path), "--assembly", str(asm_path),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if done.returncode < 0:
            name = signal.Signals(-done.returncode).name
            raise AutoconfigError(f"LLVM aborted ({name}) compiling for {target.name}: {detail}")
        raise AutoconfigError(f"LLVM could not compile for {target.name}: {detail}")
    return ObjectFile(path=obj_path, assembly=asm_path.read_text(), target=target)
