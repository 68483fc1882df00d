"""Lowering: MLIR (scf, vector, memref, arith, math) → LLVM dialect → LLVM IR → object.

The MLIR part runs in-process with the bindings' pass manager. The LLVM part runs in
a child process with llvmlite (`kernels.llvm_backend`), because a fatal LLVM error
aborts its process: here it becomes an AutoconfigError naming the target.
"""

from __future__ import annotations

import re
import signal
import struct
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
"""The MLIR pass pipeline to the LLVM dialect, checked on the bundled bindings (LLVM 24 dev):
vector ops become scf loops or LLVM intrinsics, scf becomes cf, then everything LLVM."""


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
    """Lower a verified module to LLVM IR text (a copy is lowered; `module` is kept)."""
    with module.context:
        try:
            lowered = module.operation.clone()
            passmanager.PassManager.parse(f"builtin.module({PIPELINE})").run(lowered.operation)
            return exact_float_literals(str(translate_module_to_llvmir(lowered.operation)))
        except MLIRError as err:
            raise AutoconfigError(f"lowering to LLVM failed: {first_diagnostic(err)}") from None


_FLOAT_LITERAL = re.compile(r"(?<![\w.%@\"])(f0x[0-9A-Fa-f]{8}|-?[0-9]+\.[0-9]+e[+-][0-9]+|-?inf|nan)(?!\w)")


def exact_float_literals(llvm_ir: str) -> str:
    """f32 constants in the hexadecimal form llvmlite's LLVM reads (the double with the
    same value). The bindings' newer LLVM prints them as short decimals
    (``1.000000e-01``, rejected unless exact in double precision) or as raw f32 bits
    (``f0xC2B0C0A5``, a syntax llvmlite's LLVM does not know), infinities as ``-inf``
    (a max-pooling border), which it does not read either. Every decimal literal is
    taken as an f32: generated kernels hold no f64 values."""

    def hexadecimal(match: re.Match) -> str:
        literal = match[1]
        if literal.startswith("f0x"):
            value = struct.unpack("<f", int(literal[3:], 16).to_bytes(4, "little"))[0]
        else:
            value = struct.unpack("<f", struct.pack("<f", float(literal)))[0]  # rounded to f32
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"

    return _FLOAT_LITERAL.sub(hexadecimal, llvm_ir)


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
