"""LLVM IR text to an object file and assembly with llvmlite, run as a child process.

A fatal LLVM error aborts the whole process, so `kernels.lower` runs this module in
a child (``python -m kernels.llvm_backend``) and turns a crash into a clear error.
It imports only llvmlite, so it starts quickly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def compile_ir(
    llvm_ir: str, triple: str, cpu: str, features: str, abi: str
) -> tuple[bytes, str]:
    """Optimize `llvm_ir` at O3 for the given target; return (object bytes, assembly)."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default", abiname=abi
    )
    module.triple = triple
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_object(module), machine.emit_assembly(module)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of the child: read IR from a file, write .o and .s files."""
    parser = argparse.ArgumentParser(prog="python -m kernels.llvm_backend")
    parser.add_argument("ir", type=Path)
    parser.add_argument("--triple", required=True)
    parser.add_argument("--cpu", required=True)
    parser.add_argument("--features", default="")
    parser.add_argument("--abi", default="")
    parser.add_argument("--object", type=Path, required=True)
    parser.add_argument("--assembly", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        obj, asm = compile_ir(args.ir.read_text(), args.triple, args.cpu, args.features, args.abi)
    except RuntimeError as err:  # llvmlite reports parse and verifier errors this way
        print(str(err).strip().replace("\n", " "), file=sys.stderr)
        return 1
    args.object.write_bytes(obj)
    args.assembly.write_text(asm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
