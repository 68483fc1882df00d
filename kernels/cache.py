"""Compiling kernel modules to objects: in parallel, and at most once.

A module's object is fully determined by its MLIR text (which the generator derives
from a config and a target), the target's LLVM settings and the toolchain (the MLIR
bindings, llvmlite, the lowering pipeline). Their digest keys a cache of compiled
objects on disk, so an unchanged kernel is never compiled twice — across builds and
processes. Keying by the MLIR text rather than by the config also covers a changed
generator: new code, new text, new key.

MLIR is lowered to LLVM IR in this process (the bindings are not thread-safe), one
compile unit after another (a module's unit per function it defines, the others
declared: `kernels.lower.compile_units`); LLVM compiles each in a child process as
soon as it is lowered, two per core at once (`kernels.lower.BACKENDS_PER_CORE`). A
module's cache entry is its units' objects and then their count, written last.

Generating a module costs time too (YOLO-V4's 115 kernels: ~9 s of building and
printing MLIR), so the same cache also keeps each config's generated text and
signatures, keyed by the config, the target and the generators' source: a rebuild of
an unchanged model generates nothing, and parses a module back only to compile it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from kernels.emit import KernelModule
from kernels.files import write_atomically
from kernels.lower import GENERATED_PIPELINE, Compiling, ObjectFile, backend_count, compile_units, parse_mlir
from kernels.lower import start_backends, to_llvm_ir, wait_any
from kernels.target import Target

CACHE_ENV = "AUTOCONFIG_CACHE_DIR"


@functools.cache  # asked once per kernel; reading package metadata took 0.4 s of a warm YOLO-V4 build
def toolchain_version() -> str:
    """What besides the MLIR text decides the object: package versions, the pipeline,
    and the source of the lowering and LLVM steps."""
    versions = []
    for package in ("autoconfig", "llvmlite", "torch-mlir", "mlir"):
        try:
            versions.append(f"{package}={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    steps = b"".join(Path(__file__).with_name(name).read_bytes() for name in ("lower.py", "llvm_backend.py"))
    return ";".join(versions) + f";{GENERATED_PIPELINE};{hashlib.sha256(steps).hexdigest()[:16]}"


@functools.cache
def generators_version() -> str:
    """What besides a config and a target decides the generated MLIR: the generators'
    source (every module of this package) and the toolchain."""
    digest = hashlib.sha256(toolchain_version().encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def target_settings(target: Target) -> str:
    """What of a target decides its code (LLVM's settings and the vector length)."""
    return f"{target.triple}|{target.cpu}|{target.features}|{target.abi}|{target.vector_bits}"


@dataclass
class KernelCache:
    """Compiled objects on disk, by key; generated modules by config."""

    root: Path

    def key(self, module_text: str, target: Target) -> str:
        return hashlib.sha256(f"{toolchain_version()}\n{target_settings(target)}\n{module_text}".encode()).hexdigest()

    def modules(self, generate: Callable[[object, Target], KernelModule | list[KernelModule]], config: object,
                target: Target) -> list[KernelModule]:  # fmt: skip
        """`generate(config, target)` as a list of modules, read back from the cache when
        this config was generated before by the same generators. (A config is keyed by
        its pickle: equal configs pickled alike share an entry; any other difference only
        costs a miss.)"""
        generator = f"{generate.__module__}.{generate.__qualname__}"
        question = f"{generators_version()}\n{target_settings(target)}\n{generator}\n".encode()
        question += pickle.dumps(config, protocol=4)
        path = self.root / "modules" / f"{hashlib.sha256(question).hexdigest()}.pickle"
        try:
            with open(path, "rb") as saved:
                stored = pickle.load(saved)
            return [KernelModule(None, signatures, target, stored_text=text) for text, signatures in stored]
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
            pass  # not generated before (or by other code): generate
        made = generated(generate, config, target)
        write_atomically(path, pickle.dumps([(m.text, m.signatures) for m in made], protocol=4), make_parents=True)
        return made

    def get(self, key: str, out_dir: Path, target: Target) -> list[ObjectFile] | None:
        """The module's cached objects (one per compile unit) copied into `out_dir`, or
        None unless all are there."""
        try:
            count = int((self.root / f"{key}.units").read_text())
        except (OSError, ValueError):
            return None
        units = [self.root / f"{key}.{unit}.o" for unit in range(count)]
        if not all(obj.is_file() for obj in units):
            return None
        copies = []
        for unit, obj in enumerate(units):
            copies.append(ObjectFile(path=out_dir / f"{key[:16]}.{unit}.o", assembly=None, target=target))
            shutil.copyfile(obj, copies[-1].path)
        return copies

    def put(self, key: str, objects: Sequence[ObjectFile]) -> None:
        """Store a module's objects, then the count that makes them a hit."""
        for unit, obj in enumerate(objects):
            write_atomically(self.root / f"{key}.{unit}.o", obj.path.read_bytes(), make_parents=True)
        write_atomically(self.root / f"{key}.units", str(len(objects)).encode(), make_parents=True)


def generated(generate: Callable[[object, Target], KernelModule | list[KernelModule]], config: object,
              target: Target) -> list[KernelModule]:  # fmt: skip
    """`generate(config, target)` as a list (a one-kernel family returns its module alone)."""
    made = generate(config, target)
    return made if isinstance(made, list) else [made]


def default_cache() -> KernelCache:
    """``$AUTOCONFIG_CACHE_DIR``, else ``~/.cache/autoconfig/kernels``."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "autoconfig" / "kernels"
    return KernelCache(Path(root))


def compile_modules(modules: Sequence[KernelModule], out_dir: Path, cache: KernelCache,
                    progress: Callable[[int, int], None] | None = None) -> tuple[list[ObjectFile], int, int]:  # fmt: skip
    """The objects of every distinct module (identical modules share them; a module
    whose functions compile apart has one per unit, `compile_units`), in `out_dir`;
    returns them, how many modules had to be compiled and how many came from the
    cache. `progress(done, total)` is told of each module compiled."""
    if not modules:  # a model whose outputs are all empty or copies
        return [], 0, 0
    target = modules[0].target
    keyed: dict[str, KernelModule] = {}
    for module in modules:
        keyed.setdefault(cache.key(module.text, target), module)
    objects = {key: hit for key in keyed if (hit := cache.get(key, out_dir, target)) is not None}
    todo = {key: module for key, module in keyed.items() if key not in objects}
    # one LLVM child per compile unit at most: a module's unit per function it defines
    workers = max(1, min(sum(module.text.count("func.func @") for module in todo.values()), backend_count()))
    if todo:
        start_backends(workers)  # LLVM children start while the MLIR below is lowered
    pending: dict[str, list[Compiling]] = {}  # key -> its units, compiling while the next unit is lowered
    running: list[Compiling] = []
    try:
        # largest first: the last unit lowered is compiled while nothing else is left, so
        # the smallest goes last
        for key, module in sorted(todo.items(), key=lambda item: -len(item[1].text)):
            mlir = module.module if module.module is not None else parse_mlir(module.text, "the kernel cache")
            pending[key] = []
            for i, unit in enumerate(compile_units(mlir)):
                llvm_ir = to_llvm_ir(unit, GENERATED_PIPELINE)
                while len(running) >= workers:  # a child answered is free for the next unit
                    wait_any(running)
                    for answered in [c for c in running if c.done()]:
                        answered.result()
                        running.remove(answered)
                running.append(Compiling(llvm_ir, target, out_dir, f"{key[:16]}.{i}"))
                pending[key].append(running[-1])
        for count, (key, units) in enumerate(pending.items(), 1):
            objects[key] = [unit.result() for unit in units]
            cache.put(key, objects[key])
            if progress:
                progress(count, len(pending))
    finally:
        for units in pending.values():
            for unit in units:
                unit.abandon()
    return [obj for key in keyed for obj in objects[key]], len(pending), len(keyed) - len(pending)
