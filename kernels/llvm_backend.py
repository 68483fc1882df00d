"""LLVM IR text to an object file and assembly with llvmlite, run as a child process.

A fatal LLVM error aborts the whole process, so `kernels.lower` runs this module in
children (``python -m kernels.llvm_backend``), kept for many requests, and turns a
crash into a clear error. It imports only llvmlite, so it starts quickly.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path


OPTIONS = ("-unswitch-threshold=1",)
"""LLVM's own options, for every compilation in this process. Non-trivial loop
unswitching off (a threshold of 0 trips an assertion): at O3 it copied loop nests of
the matmul kernels around loop-invariant conditions, costing LLVM time for nothing at
run time."""


@functools.cache
def _llvm():
    """llvmlite's binding with every target and assembly printer initialized, and
    LLVM's `OPTIONS` set."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    for option in OPTIONS:
        llvm.set_option("", option)
    return llvm


def compile_ir(
    llvm_ir: str, triple: str, cpu: str, features: str, abi: str, assembly: bool
) -> tuple[bytes, str | None]:
    """Optimize `llvm_ir` at O3 for the given target; return the object's bytes and,
    if asked for, its assembly (a second code generation: 15-20% of the LLVM time).
    O3, not O2: O2 builds a little faster, but its kernels ran slower."""
    llvm = _llvm()
    module = llvm.parse_assembly(llvm_ir)
    module.verify()
    machine = llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=3, reloc="pic", codemodel="default", abiname=abi
    )
    module.triple = triple
    module.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_object(module), machine.emit_assembly(module) if assembly else None


def serve() -> int:
    """Answer compile requests until stdin closes: each a JSON line naming the IR file,
    the target (triple, cpu, features, abi), the object file to write and the
    assembly file to write (or null for none); each answered with a JSON line, ``{}``
    or ``{"error": message}``. The process is kept for many kernels: a fresh
    interpreter with llvmlite initialized took 60-70 ms of a 0.3 s single-kernel build."""
    _llvm()  # before the first request: a child started ahead is ready when it comes
    for line in sys.stdin:
        request = json.loads(line)
        try:
            obj, asm = compile_ir(Path(request["ir"]).read_text(), request["triple"], request["cpu"],
                                  request["features"], request["abi"], request["assembly"] is not None)  # fmt: skip
        except RuntimeError as err:  # llvmlite reports parse and verifier errors this way
            answer = {"error": str(err).strip().replace("\n", " ")}
        else:
            Path(request["object"]).write_bytes(obj)
            if asm is not None:
                Path(request["assembly"]).write_text(asm)
            answer = {}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
