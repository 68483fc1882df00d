"""Lowering: MLIR (scf, vector, memref, arith, math) → LLVM dialect → LLVM IR → object.

The MLIR part runs in-process with the bindings' pass manager. The LLVM part runs in
child processes with llvmlite (`kernels.llvm_backend`), because a fatal LLVM error
aborts its process: here it becomes an KernelError naming the target. The
children are kept for the next kernel (as many as have compiled at once) and end
with this process.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernels.errors import KernelError
from kernels.emit import first_diagnostic, shared_context
from kernels.mlir import MLIRError, func, ir, passmanager, translate_module_to_llvmir
from kernels.target import Target

GENERATED_PIPELINE = ",".join(
    [
        "cse",  # first: the generators repeat index arithmetic per access; fewer ops to lower
        "convert-scf-to-cf",
        "convert-vector-to-llvm{vector-contract-lowering=outerproduct}",
        "convert-to-llvm",  # math, memref, arith, cf, func and index in one conversion
        "reconcile-unrealized-casts",
    ]
)
"""The MLIR pass pipeline from what the generators emit (scf, vector, memref, arith,
math; no affine or vector transfer ops) to the LLVM dialect, checked on the bundled
bindings (LLVM 24 dev): common subexpressions merged, scf becomes cf, vector ops
become LLVM intrinsics, then the rest in one dialect conversion. The merge comes
first because the generators work out an address per access. One conversion for six
dialects, not a pass each, and no passes for ops the generators never emit: the same
LLVM IR in less lowering time."""

PIPELINE = ",".join(["lower-affine", "convert-vector-to-scf", GENERATED_PIPELINE])
"""The pipeline for MLIR from anywhere (``autoconfig lower``): affine and n-D vector
transfer ops lowered to scf first."""


@dataclass(frozen=True)
class ObjectFile:
    """A compiled object and, when asked for, its assembly listing (for inspection and
    tests; a build does not ask: printing it runs LLVM's code generation a second time)."""

    path: Path
    assembly: str | None
    target: Target


def parse_mlir(text: str, source: str = "<input>") -> ir.Module:
    """Parse and verify MLIR text (in this thread's context, `shared_context`); errors
    name the first diagnostic."""
    context = shared_context()
    try:
        with context, ir.Location.unknown():
            module = ir.Module.parse(text)
            module.operation.verify()
    except MLIRError as err:
        diagnostic = first_diagnostic(err)
        separator = ":" if diagnostic[:1].isdigit() else ": "  # "file:line:col: msg"
        raise KernelError(f"invalid MLIR in {source}{separator}{diagnostic}") from None
    return module


def compile_units(module: ir.Module) -> list[ir.Module | ir.OpView]:
    """`module` as modules compiled apart and linked together: one per function it
    defines, each a copy in which the other functions are only declared (a module of
    one function is its own unit). LLVM's time grows with the loop nests of a module
    and runs on one core per module, so a kernel whose packing is outlined
    (`kernels.emit.outlined`) compiles on two cores."""
    defined = [position for position, op in enumerate(_functions(module.operation)) if len(op.regions[0].blocks)]
    if len(defined) < 2:
        return [module]
    units = []
    with module.context, ir.Location.unknown():
        for keep in defined:
            unit = module.operation.clone()
            for position, op in enumerate(_functions(unit)):
                if position != keep and len(op.regions[0].blocks):
                    with ir.InsertionPoint(op):
                        func.FuncOp(ir.StringAttr(op.attributes["sym_name"]).value,
                                    ir.TypeAttr(op.attributes["function_type"]).value, visibility="private")  # fmt: skip
                    op.erase()
            units.append(unit)
    return units


def _functions(module: ir.Operation) -> list[ir.OpView]:
    """The ``func.func`` ops of a module, in order."""
    return [op for op in module.regions[0].blocks[0].operations if op.operation.name == "func.func"]


def to_llvm_ir(module: ir.Module | ir.OpView, pipeline: str = PIPELINE) -> str:
    """Lower a verified module (or a compile unit) to LLVM IR text with `pipeline` (a
    copy is lowered; `module` is kept)."""
    with module.context:
        try:
            lowered = module.operation.clone()
            passmanager.PassManager.parse(f"builtin.module({pipeline})").run(lowered.operation)
            return exact_float_literals(str(translate_module_to_llvmir(lowered.operation)))
        except MLIRError as err:
            raise KernelError(f"lowering to LLVM failed: {first_diagnostic(err)}") from None


_FLOAT_LITERAL = re.compile(r"(?<![\w.%@\"])(f0x[0-9A-Fa-f]{16}|f0x[0-9A-Fa-f]{8}|-?[0-9]+\.[0-9]+e[+-][0-9]+|[-+]?inf|[-+]?q?nan)(?!\w)")


def exact_float_literals(llvm_ir: str) -> str:
    """f32 constants in the hexadecimal form llvmlite's LLVM reads (the double with the
    same value). The bindings' newer LLVM prints them as short decimals
    (``1.000000e-01``, rejected unless exact in double precision) or as raw f32 bits
    (``f0xC2B0C0A5``, a syntax llvmlite's LLVM does not know), infinities as ``-inf`` and
    ``+inf`` (a max-pooling border, a clip with one bound) and NaN as ``+qnan`` (a row
    gathered by an id out of range), which it does not read either. Every decimal literal is
    taken as an f32: the few f64 constants (sin's argument reduction) are short decimals
    only where exact in f32, else raw f64 bits (``f0x`` and 16 digits: the same bits in
    the old form)."""

    def hexadecimal(match: re.Match) -> str:
        literal = match[1]
        if literal.startswith("f0x") and len(literal) == 19:
            return "0x" + literal[3:].upper()
        if literal.startswith("f0x"):
            value = struct.unpack("<f", int(literal[3:], 16).to_bytes(4, "little"))[0]
        else:
            value = struct.unpack("<f", struct.pack("<f", float(literal.replace("q", ""))))[0]  # rounded to f32
        return f"0x{struct.unpack('<Q', struct.pack('<d', value))[0]:016X}"

    lines = llvm_ir.split("\n")  # most hold no literal: a cheap test first (a kernel's IR in 4x less time)
    return "\n".join(_FLOAT_LITERAL.sub(hexadecimal, line) if _MAY_HOLD_LITERAL.search(line) else line
                     for line in lines)  # fmt: skip


_MAY_HOLD_LITERAL = re.compile(r"e[+-]|f0x|inf|nan")


def compile_object(llvm_ir: str, target: Target, out_dir: Path, stem: str = "kernels",
                   assembly: bool = False) -> ObjectFile:  # fmt: skip
    """Compile LLVM IR for `target` into ``out_dir/stem.o`` in an LLVM child process,
    and its assembly listing into ``out_dir/stem.s`` when `assembly` is asked for."""
    return Compiling(llvm_ir, target, out_dir, stem, assembly).result()


class Compiling:
    """One LLVM IR compilation sent to an LLVM child and answered later, so that the
    caller lowers the next unit meanwhile. No thread waits for the child, so a build
    starts none: a thread started while the children keep every core busy waits
    milliseconds to run, on the build's critical path."""

    def __init__(self, llvm_ir: str, target: Target, out_dir: Path, stem: str, assembly: bool = False) -> None:
        self.target = target
        self.obj_path = out_dir / f"{stem}.o"
        self.asm_path = out_dir / f"{stem}.s" if assembly else None
        ir_path = out_dir / f"{stem}.ll"
        ir_path.write_text(llvm_ir)
        self.error: str | None = None
        self.backend: _Backend | None = _Backends.take()  # None once answered or abandoned
        self.backend.send({"ir": str(ir_path), "triple": target.triple, "cpu": target.cpu, "features": target.features,
                           "abi": target.abi, "object": str(self.obj_path),
                           "assembly": self.asm_path and str(self.asm_path)})  # fmt: skip

    def done(self) -> bool:
        """Whether `result` would not wait: the child answered (or died)."""
        return self.backend is None or self.backend.readable()

    def result(self) -> ObjectFile:
        """The object, once the child has answered (then the child is free for another
        request); an KernelError if LLVM could not compile or died (a fatal LLVM
        error aborts its process)."""
        if self.backend is not None:
            backend, self.backend = self.backend, None
            answer = backend.receive()
            if answer is None:
                detail, code = backend.last_words()
                how = f"aborted ({signal.Signals(-code).name})" if code is not None and code < 0 else "could not compile"
                self.error = f"LLVM {how} compiling for {self.target.name}: {detail}"
            else:
                _Backends.give_back(backend)
                if "error" in answer:
                    self.error = f"LLVM could not compile for {self.target.name}: {answer['error']}"
        if self.error:
            raise KernelError(self.error)
        return ObjectFile(path=self.obj_path, assembly=self.asm_path and self.asm_path.read_text(), target=self.target)

    def abandon(self) -> None:
        """Stop waiting for an unanswered compilation: its child is ended, not kept (its
        answer would be read as the next request's)."""
        if self.backend is not None:
            backend, self.backend = self.backend, None
            backend.process.kill()
            backend.close()


def wait_any(compilations: Sequence[Compiling]) -> None:
    """Wait until at least one of `compilations` is answered."""
    if compilations and not any(c.done() for c in compilations):
        select.select([c.backend.process.stdout for c in compilations], [], [])


BACKENDS_PER_CORE = 2
"""LLVM children compiling at once, per core. More than one: a kernel's units differ
in LLVM time, and with one child per core the last ones ran on one core while the
other idled; sharing the cores, they end together."""


def backend_count() -> int:
    """How many LLVM children a build keeps compiling at once (`BACKENDS_PER_CORE`)."""
    return BACKENDS_PER_CORE * (os.cpu_count() or 1)


def start_backends(count: int = 1) -> None:
    """Start up to `count` LLVM children ahead of need (without waiting for them): their
    start-up then overlaps the caller's decision and MLIR lowering."""
    _Backends.start(count)


class _Backend:
    """One ``python -m kernels.llvm_backend`` child, answering a JSON line per request;
    its stderr goes to a temporary file, read when it dies."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, "-m", "kernels.llvm_backend"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, text=True)  # fmt: skip

    def send(self, request: dict) -> None:
        """Send one request (to a dead child: its answer, `receive`, is then None)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass

    def readable(self) -> bool:
        """Whether the answer (or end of output) is there to read without waiting. The
        child writes one line per request, so nothing is ever left buffered."""
        return bool(select.select([self.process.stdout], [], [], 0)[0])

    def receive(self) -> dict | None:
        """The answer to the request sent, or None if the child died."""
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def last_words(self) -> tuple[str, int | None]:
        """A dead child's last stderr line and exit status."""
        code = self.process.wait()
        self.stderr.seek(0)
        lines = self.stderr.read().strip().splitlines()
        return (lines[-1] if lines else "no message"), code

    def close(self) -> None:
        """End the child: it exits when its stdin closes."""
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
        self.stderr.close()


class _Backends:
    """The idle LLVM children of this process, shared by the threads that compile."""

    idle: list[_Backend] = []
    lock = threading.Lock()

    @classmethod
    def take(cls) -> _Backend:
        """An idle child, or a new one when none is idle."""
        with cls.lock:
            if cls.idle:
                return cls.idle.pop()
        return _Backend()

    @classmethod
    def give_back(cls, backend: _Backend) -> None:
        """Keep a child that answered for the next request."""
        with cls.lock:
            cls.idle.append(backend)

    @classmethod
    def start(cls, count: int) -> None:
        """Start children until `count` are idle."""
        with cls.lock:
            cls.idle += [_Backend() for _ in range(count - len(cls.idle))]

    @classmethod
    def close_all(cls) -> None:
        """End every idle child (at exit)."""
        with cls.lock:
            backends, cls.idle = cls.idle, []
        for backend in backends:
            backend.close()

    @classmethod
    def forget(cls) -> None:
        """In a forked child: the parent's children are the parent's."""
        cls.idle, cls.lock = [], threading.Lock()


atexit.register(_Backends.close_all)
os.register_at_fork(after_in_child=_Backends.forget)
