"""Build generated kernels into something that runs, and call them from Python.

On a target this host runs natively, the object is linked into a shared library
by the system linker and called through ctypes (which releases the GIL, so a thread
pool can use every core). ``ld -shared`` is called directly, with libm for the math
the kernels call: it links in a fraction of ``cc -shared``'s time, and libc, which
``cc`` also links, is in every process that loads the library. On a target it runs
only under emulation, the object is linked statically with a generated C driver
(`kernels.abi.c_driver`) by the cross gcc and run under qemu-user, buffers passing
through files. Both paths are behind one `Kernel` interface: ``kernel(*args)`` with
numpy arrays and ints in the order of the kernel's signature; written buffers are
updated in place.
"""

from __future__ import annotations

import ctypes
import functools
import math
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernels.errors import KernelError
from kernels.abi import KernelSignature, Role, c_driver, c_header, c_tasks
from kernels.emit import KernelModule
from kernels.cache import KernelCache, compile_modules, default_cache
from kernels.lower import ObjectFile
from kernels.target import HostCpu, Target


@dataclass
class KernelLibrary:
    """Compiled kernels for one target, ready to call."""

    target: Target
    signatures: tuple[KernelSignature, ...]
    objects: tuple[ObjectFile, ...]
    header: Path
    mode: str  # "native" or "emulated"
    binary: Path  # the shared library (native) or the static driver executable
    archive: Path | None  # the static library (emulated targets: for linking elsewhere)
    compiled: int  # kernel modules compiled by this build
    cached: int  # kernel modules taken from the cache instead
    _workdir: tempfile.TemporaryDirectory | None = field(default=None, repr=False)
    _cdll: ctypes.CDLL | None = field(default=None, repr=False)

    def kernel(self, symbol: str) -> Kernel:
        """The callable for `symbol`."""
        for sig in self.signatures:
            if sig.symbol == symbol:
                return Kernel(self, sig)
        known = ", ".join(s.symbol for s in self.signatures)
        raise KernelError(f"no kernel {symbol!r} in this library (it has {known})")


def build_library(modules: KernelModule | Sequence[KernelModule], host: HostCpu, out_dir: Path | None = None,
                  cache: KernelCache | None = None) -> KernelLibrary:  # fmt: skip
    """Lower, compile and link kernel modules (one target) into one library that runs
    on `host`, natively or emulated.

    Modules are compiled in parallel (LLVM in child processes, two per core,
    `kernels.lower.backend_count`); a module whose compiled object is in `cache`
    (default: the user's, `default_cache()`) is not compiled again. Files go to
    `out_dir`, or to a temporary directory removed with the library.
    """
    modules = [modules] if isinstance(modules, KernelModule) else list(modules)
    if not modules:
        raise KernelError("a kernel library needs at least one kernel module")
    target = modules[0].target
    if any(m.target != target for m in modules):
        raise KernelError("the kernel modules of one library must share one target")
    execution = target.execution(host)
    if execution.mode == "unavailable":
        raise KernelError(f"cannot run {target.name} code here: {execution.reason}")
    workdir = None
    if out_dir is None:
        workdir = tempfile.TemporaryDirectory(prefix=f"autoconfig-{target.name}-")
        out_dir = Path(workdir.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = default_cache() if cache is None else cache
    signatures = unique_signatures(modules)
    header = out_dir / "kernels.h"
    header.write_text(c_header(signatures))
    archive, cdll, tasks = None, None, None
    if execution.mode == "native":  # the trampolines compile while LLVM compiles the kernels
        (out_dir / "tasks.c").write_text(c_tasks(signatures))
        tasks = start_tool(["cc", "-c", "-fPIC", "-O2", f"-I{out_dir}", "-o", str(out_dir / "tasks.o"),
                            str(out_dir / "tasks.c")])  # fmt: skip
    try:
        objects, compiled, cached = compile_modules(modules, out_dir, cache)
    except BaseException:
        if tasks is not None:  # no child left running when the kernels fail to compile
            tasks.kill()
            tasks.communicate()
        raise
    paths = [str(o.path) for o in objects]
    if tasks is not None:
        finish_tool(tasks, "compiling the task trampolines")
        binary = out_dir / "libkernels.so"
        run_tool(["ld", "-shared", "-o", str(binary), str(out_dir / "tasks.o"), *paths, "-lm"], "linking")
        cdll = ctypes.CDLL(str(binary))
    else:
        archive = out_dir / "libkernels.a"
        archive.unlink(missing_ok=True)
        run_tool([target.cross_ar, "rcs", str(archive), *paths], "archiving")
        driver = out_dir / "driver.c"
        driver.write_text(c_driver(signatures))
        binary = out_dir / "driver"
        command = [target.cross_cc, "-static", "-O2", f"-I{out_dir}", "-o", str(binary)]
        run_tool([*command, str(driver), str(archive), "-lm"], "linking the driver")
    return KernelLibrary(target, tuple(signatures), tuple(objects), header, execution.mode, binary,
                         archive, compiled, cached, workdir, cdll)  # fmt: skip


def unique_signatures(modules: Sequence[KernelModule]) -> list[KernelSignature]:
    """Every module's signatures once; two different kernels with one symbol are an error."""
    seen: dict[str, KernelSignature] = {}
    for module in modules:
        for sig in module.signatures:
            if seen.setdefault(sig.symbol, sig) != sig:
                raise KernelError(f"two different kernels are named {sig.symbol}")
    return list(seen.values())


@dataclass
class Kernel:
    """One kernel of a library; call it with arguments in signature order."""

    library: KernelLibrary
    signature: KernelSignature

    def __call__(self, *args: np.ndarray | int, emulator: Sequence[str] | None = None) -> None:
        """Run the kernel; `emulator` overrides the qemu command line (emulated only)."""
        self._check(args)
        if self.library.mode == "native":
            self.call_unchecked(*args)
        else:
            self._run_emulated(args, tuple(emulator or self.library.target.emulator))

    def call_unchecked(self, *args: np.ndarray | int) -> None:
        """Run without checking the arguments: for callers that validated them already
        (the checks cost more than a small kernel)."""
        if self.library.mode != "native":
            self._run_emulated(args, self.library.target.emulator)
            return
        self.native_function(*(a.ctypes.data if isinstance(a, np.ndarray) else a for a in args))

    @functools.cached_property
    def task_address(self) -> int:
        """Address of this kernel's task trampoline (kernels/abi.py), for the native
        thread pool; native libraries only."""
        if self.library.mode != "native":
            raise KernelError(f"{self.signature.symbol}: emulated kernels have no task entry")
        task = getattr(self.library._cdll, f"{self.signature.symbol}_task")
        return ctypes.cast(task, ctypes.c_void_p).value

    @functools.cached_property
    def native_function(self) -> ctypes._CFuncPtr:
        """The ctypes function of a native kernel: buffer addresses and ints in
        signature order, nothing checked."""
        fn = getattr(self.library._cdll, self.signature.symbol)
        fn.restype = None
        fn.argtypes = [
            ctypes.c_void_p if p.role.is_buffer else ctypes.c_int64 for p in self.signature.params
        ]
        return fn

    def _check(self, args: Sequence[np.ndarray | int]) -> None:
        sig = self.signature
        if len(args) != len(sig.params):
            raise KernelError(
                f"{sig.symbol} takes {len(sig.params)} arguments "
                f"({', '.join(p.name for p in sig.params)}), got {len(args)}"
            )
        sizes = {}
        for p, a in zip(sig.params, args, strict=True):
            if p.role is Role.SIZE:
                if not isinstance(a, (int, np.integer)) or a < 0:
                    raise KernelError(f"{sig.symbol}: {p.name} must be an int >= 0, got {a!r}")
                sizes[p.name] = int(a)
        for p, a in zip(sig.params, args, strict=True):
            if not p.role.is_buffer:
                continue
            if not isinstance(a, np.ndarray) or a.dtype != np.float32:
                got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
                raise KernelError(f"{sig.symbol}: {p.name} must be a float32 array, got {got}")
            if not a.flags.c_contiguous or (p.role.is_written and not a.flags.writeable):
                raise KernelError(f"{sig.symbol}: {p.name} must be C-contiguous and writeable")
            needed = math.prod(sizes[e] if isinstance(e, str) else e for e in p.extent)
            if a.size < needed:
                raise KernelError(
                    f"{sig.symbol}: {p.name} has {a.size} elements, needs {needed}"
                )

    def _run_emulated(self, args: Sequence[np.ndarray | int], emulator: tuple[str, ...]) -> None:
        sig = self.signature
        with tempfile.TemporaryDirectory(prefix="autoconfig-run-") as tmp:
            argv = [*emulator, str(self.library.binary), sig.symbol]
            for p, a in zip(sig.params, args, strict=True):
                if p.role is Role.SIZE:
                    argv.append(str(int(a)))
                    continue
                path = Path(tmp) / f"{p.name}.bin"
                a.tofile(path)
                argv.append(f"{path}:{a.size}")
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                raise KernelError(
                    f"{sig.symbol} failed under {emulator[0]}: {_exit_reason(done)}"
                )
            for p, a in zip(sig.params, args, strict=True):
                if p.role.is_buffer and p.role.is_written:
                    a[...] = np.fromfile(Path(tmp) / f"{p.name}.bin", np.float32).reshape(a.shape)


def _exit_reason(done: subprocess.CompletedProcess) -> str:
    """'killed by SIGILL' or 'exit status N: last stderr line'."""
    code = done.returncode
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"killed by {signal.Signals(code - 128).name}"
    last = (done.stderr.strip().splitlines() or ["no message"])[-1]
    return f"exit status {code}: {last}"


def run_tool(command: list[str], what: str) -> None:
    """Run a compiler or linker; a failure becomes one KernelError line."""
    finish_tool(start_tool(command), what)


def start_tool(command: list[str]) -> subprocess.Popen:
    """Start a compiler or linker without waiting for it (`finish_tool` waits)."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_tool(process: subprocess.Popen, what: str) -> None:
    """Wait for a tool `start_tool` started; a failure becomes one KernelError line."""
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        raise KernelError(f"{what} failed ({process.args[0]}): {_exit_reason(done)}")
