"""Running generated kernels on all cores: programs of kernel calls, each call's
parts (disjoint ranges of its work) run at once by a native thread pool.

The pool is C (`autoconfig/pool.c`, compiled with the system ``cc`` on first use
and kept for the process): a call hands each worker its part and returns when all
are done, with the GIL released and no Python in between (Python threads were too
slow: every futex and GIL hand-off wakes a halted vCPU). Each part gets its own scratch buffers (e.g. a matmul's packing
workspace), allocated once per compiled layer. Even one part goes through C: the
call passes the numpy arrays themselves and C reads their data pointers, half the
cost of converting them with ctypes. A built model runs the same program code
(`encode`) inside its own library, with no Python at all.
"""

from __future__ import annotations

import ctypes
import functools
import math
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autoconfig.errors import AutoconfigError
from kernels.library import KernelLibrary, run_tool

POOL_SOURCE = Path(__file__).with_name("pool.c")


def split(units: int, parts: int) -> list[tuple[int, int]]:
    """[begin, end) ranges cutting `units` into at most `parts` near-equal pieces."""
    parts = max(1, min(parts, units))
    base, extra = divmod(units, parts)
    ranges, begin = [], 0
    for i in range(parts):
        end = begin + base + (i < extra)
        ranges.append((begin, end))
        begin = end
    return ranges


CALL_ARRAYS = 6
"""Most numpy arrays a program takes per call (``ac_program_call``'s array parameters)."""


@dataclass(frozen=True)
class Ref:
    """A buffer argument of a kernel call: element `offset` of space `space` (a numpy
    array of a layer, or the arena, weights, an input or an output of a model)."""

    space: int
    offset: int = 0


@dataclass(frozen=True)
class Part:
    """One thread's share of a kernel call: its buffers and sizes in signature order."""

    buffers: tuple[Ref, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Call:
    """One kernel run on its parts at once (part 0 on the calling thread)."""

    symbol: str
    parts: tuple[Part, ...]


def encode(calls: Sequence[Call], kernel_index: dict[str, int]) -> np.ndarray:
    """The int64 code pool.c's ``ac_program_run`` reads: per call the kernel's index,
    parts, buffers and sizes per part, every part's sizes, then every buffer as
    (space, byte offset)."""
    code: list[int] = []
    for call in calls:
        first = call.parts[0]
        code += [kernel_index[call.symbol], len(call.parts), len(first.buffers), len(first.sizes)]
        for part in call.parts:
            code += part.sizes
        for part in call.parts:
            for ref in part.buffers:
                code += [ref.space, ref.offset * 4]
    return np.array(code, np.int64)


def widest(calls: Sequence[Call]) -> int:
    """Buffer pointers the widest call resolves at once (parts x buffers)."""
    return max((len(c.parts) * len(c.parts[0].buffers) for c in calls), default=1)


class _Program(ctypes.Structure):
    """``ac_program`` in pool.c."""

    _fields_ = [("code", ctypes.c_void_p), ("steps", ctypes.c_int64), ("tasks", ctypes.c_void_p),
                ("bases", ctypes.c_void_p), ("pointers", ctypes.c_void_p), ("data_offset", ctypes.c_int64)]  # fmt: skip


@functools.cache
def array_data_offset() -> int:
    """Where an array object holds its data pointer: numpy's C ABI puts it right after
    the object header (what PyArray_DATA reads), checked here against numpy itself."""
    offset = object.__basicsize__
    probe = np.empty(1, np.float32)
    if ctypes.c_void_p.from_address(id(probe) + offset).value != probe.ctypes.data:
        raise AutoconfigError(f"numpy {np.__version__} keeps array data where autoconfig does not expect it")
    return offset


@functools.cache
def _program_call() -> ctypes._CFuncPtr:
    """``ac_program_call`` from the native pool, compiled once per process."""
    workdir = tempfile.TemporaryDirectory(prefix="autoconfig-pool-")
    library = Path(workdir.name) / "libacpool.so"
    run_tool(["cc", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(library), str(POOL_SOURCE)],
             "compiling the thread pool")  # fmt: skip
    cdll = ctypes.CDLL(str(library))
    cdll._workdir = workdir  # removed with the library at exit
    call = cdll.ac_program_call
    call.restype = ctypes.c_int64
    call.argtypes = [ctypes.c_void_p, ctypes.c_int64] + [ctypes.py_object] * CALL_ARRAYS
    return call


class Program:
    """Kernel calls of one library run in order on spaces: the first `call_spaces` are
    the numpy arrays given at each call, the others the `fixed` arrays (weights,
    scratch), all float32 and C-contiguous.

    Native kernels run in C (pool.c, ``ac_program_call``): each call's parts on the
    native pool, the array pointers read there too, so a call costs a few
    microseconds more than its kernels. Emulated ones run their parts one after
    another (emulation checks results, not speed). Calls from several Python threads
    take turns: the fixed scratch buffers are shared.
    """

    def __init__(self, library: KernelLibrary, calls: Sequence[Call], fixed: Sequence[np.ndarray] = (),
                 call_spaces: int = 1):  # fmt: skip
        self.library, self.calls = library, list(calls)
        self.fixed, self.call_spaces = list(fixed), call_spaces
        self._turn = threading.Lock()
        self._program = None
        if library.mode != "native":
            return
        if call_spaces > CALL_ARRAYS:
            raise AutoconfigError(f"{call_spaces} arrays per call, the native runtime takes at most {CALL_ARRAYS}")
        symbols = list(dict.fromkeys(c.symbol for c in self.calls))
        self._code = encode(self.calls, {s: i for i, s in enumerate(symbols)})
        self._tasks = np.array([library.kernel(s).task_address for s in symbols], np.uint64)
        self._bases = np.zeros(call_spaces + len(self.fixed), np.uint64)
        self._bases[call_spaces:] = [a.ctypes.data for a in self.fixed]
        self._pointers = np.zeros(widest(self.calls), np.uint64)
        self._program = _Program(self._code.ctypes.data, len(self.calls), self._tasks.ctypes.data,
                                 self._bases.ctypes.data, self._pointers.ctypes.data, array_data_offset())  # fmt: skip
        self._run = functools.partial(_program_call(), ctypes.addressof(self._program), call_spaces)
        self._padding = (None,) * (CALL_ARRAYS - call_spaces)

    def __call__(self, *arrays: np.ndarray) -> int:
        """Run every call on `arrays` (float32, C-contiguous, already checked by the
        caller); returns how many parts ran on worker threads."""
        if len(arrays) != self.call_spaces:
            raise TypeError(f"expected {self.call_spaces} arrays, got {len(arrays)}")
        with self._turn:
            if self._program is not None:
                return self._run(*arrays, *self._padding)
            spaces = [a.reshape(-1) for a in (*arrays, *self.fixed)]
            for call in self.calls:
                kernel = self.library.kernel(call.symbol)
                for part in call.parts:
                    kernel.call_unchecked(*(spaces[r.space][r.offset :] for r in part.buffers), *part.sizes)
            return 0


CACHE_LINE_ALIGNMENT = 64
"""Buffers start on a cache line: vector loads that split lines halve L1 bandwidth;
numpy only guarantees 16-byte alignment."""


def aligned_array(count: int, fill: float | None = None) -> np.ndarray:
    """A float32 array of `count` elements starting on a cache-line boundary."""
    pad = CACHE_LINE_ALIGNMENT // 4
    raw = np.empty(count + pad, np.float32)
    offset = (-raw.ctypes.data % CACHE_LINE_ALIGNMENT) // 4
    array = raw[offset : offset + count]
    if fill is not None:
        array[:] = fill
    return array


ALIGN_MIN_BYTES = 64 << 10
"""Arrays smaller than this are used as numpy places them: finding an array's address
and allocating or copying to a cache line costs a call more Python time than the
split loads of a small operand cost its kernel."""

STAGING_MIN_PASSES = 4
"""An operand is copied to a cache line only when the kernel reads it at least this
many times: the copy costs about two passes over it (a read and a write) and saves the
split loads of every pass the kernel makes, so it pays from about twice that."""


def aligned_empty(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised float32 array of `shape`, starting on a cache-line boundary when
    it is at least ALIGN_MIN_BYTES: the APIs' outputs, so that their vector stores do
    not split lines."""
    if math.prod(shape) * 4 < ALIGN_MIN_BYTES:
        return np.empty(shape, np.float32)
    return _on_a_line(shape)


def _on_a_line(shape: tuple[int, ...]) -> np.ndarray:
    return aligned_array(math.prod(shape)).reshape(shape)


class AlignedStaging:
    """A caller's array as a kernel reads it: itself when it starts on a cache line,
    else a copy in a cache-line-aligned buffer kept for the next call. For operands a
    kernel reads in place with vector loads, `passes` times: with numpy's 16-byte
    alignment every 64-byte load splits two lines. `AlignedStaging.of` says None where
    the copy would not pay."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self._buffer: np.ndarray | None = None

    @classmethod
    def of(cls, shape: tuple[int, ...], passes: int) -> AlignedStaging | None:
        """Staging for an operand of `shape` read `passes` times, or None when it is too
        small or read too few times for the copy to pay (ALIGN_MIN_BYTES, STAGING_MIN_PASSES)."""
        if math.prod(shape) * 4 < ALIGN_MIN_BYTES or passes < STAGING_MIN_PASSES:
            return None
        return cls(shape)

    def __call__(self, array: np.ndarray) -> np.ndarray:
        """`array`, or its aligned copy."""
        if array.ctypes.data % CACHE_LINE_ALIGNMENT == 0:
            return array
        if self._buffer is None:
            self._buffer = _on_a_line(self.shape)
        np.copyto(self._buffer, array)
        return self._buffer
