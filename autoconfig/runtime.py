"""Running generated kernels on all cores: one kernel called on disjoint ranges at
once by a native thread pool.

The pool is C (`autoconfig/pool.c`, compiled with the system ``cc`` on first use
and kept for the process): a call hands each worker its part and returns when all
are done, with the GIL released and no Python in between. Python threads were
measured too slow for this (every futex and GIL hand-off wakes a halted vCPU:
0.79x OpenBLAS at 2 threads on 256-2048 squares, sub-millisecond calls not
scaling at all). Each part gets its own scratch buffers (e.g. a matmul's packing
workspace), allocated once per compiled kernel. Even one part goes through C: the
call passes the numpy arrays themselves and C reads their data pointers, half the
cost of converting them with ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autoconfig.errors import AutoconfigError
from kernels.library import Kernel, run_tool

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


JOB_ARRAYS = 6
"""Most numpy arrays a prepared call takes (``ac_job_run``'s array parameters)."""


class _Job(ctypes.Structure):
    """``ac_job`` in pool.c: a kernel's parts, their buffers and sizes."""

    _fields_ = [("task", ctypes.c_void_p), ("parts", ctypes.c_int64), ("buffers", ctypes.c_void_p),
                ("nbuf", ctypes.c_int64), ("sizes", ctypes.c_void_p), ("nsize", ctypes.c_int64),
                ("nshared", ctypes.c_int64), ("data_offset", ctypes.c_int64)]  # fmt: skip


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
def _job_run() -> ctypes._CFuncPtr:
    """``ac_job_run`` from the native pool, compiled once per process."""
    workdir = tempfile.TemporaryDirectory(prefix="autoconfig-pool-")
    library = Path(workdir.name) / "libacpool.so"
    run_tool(["cc", "-O2", "-shared", "-fPIC", "-pthread", "-o", str(library), str(POOL_SOURCE)],
             "compiling the thread pool")  # fmt: skip
    cdll = ctypes.CDLL(str(library))
    cdll._workdir = workdir  # removed with the library at exit
    run = cdll.ac_job_run
    run.restype = ctypes.c_int
    run.argtypes = [ctypes.c_void_p] + [ctypes.py_object] * JOB_ARRAYS
    return run


class SplitKernel:
    """A kernel called on several parts at once, part i with arguments
    ``(*shared, *private[i], *sizes[i])``: `shared` buffers change per call, the
    private buffers and sizes of each part are fixed when it is built.

    Native kernels run in C (pool.c, ``ac_job_run``): one part on the calling thread,
    several on the native pool (part 0 on the calling thread); the array pointers are
    read there too, which makes a call a few microseconds cheaper than ctypes
    conversions. Emulated ones run their parts one after another (emulation checks
    results, not speed). Calls from several Python threads take turns: the private
    buffers are reused.
    """

    def __init__(self, kernel: Kernel, sizes: Sequence[Sequence[int]],
                 private: Sequence[Sequence[np.ndarray]] | None = None):  # fmt: skip
        self.kernel = kernel
        self.sizes = [tuple(s) for s in sizes]
        self.private = [tuple(p) for p in private] if private else [()] * len(self.sizes)
        n_private = len(self.private[0])
        self._shared = len(kernel.signature.buffers) - n_private
        self._turn = threading.Lock()
        self._job = None
        if kernel.library.mode != "native":
            return
        if self._shared > JOB_ARRAYS:
            raise AutoconfigError(f"{kernel.signature.symbol}: {self._shared} arrays per call, "
                                  f"the native runtime takes at most {JOB_ARRAYS}")  # fmt: skip
        self._pointers = np.zeros((len(self.sizes), self._shared + n_private), np.uint64)
        for i, buffers in enumerate(self.private):
            self._pointers[i, self._shared :] = [b.ctypes.data for b in buffers]
        self._size_array = np.array(self.sizes, np.int64).reshape(len(self.sizes), -1)
        self._job = _Job(kernel.task_address, len(self.sizes), self._pointers.ctypes.data,
                         self._pointers.shape[1], self._size_array.ctypes.data,
                         self._size_array.shape[1], self._shared, array_data_offset())  # fmt: skip
        self._run = functools.partial(_job_run(), ctypes.addressof(self._job))
        self._padding = (None,) * (JOB_ARRAYS - self._shared)

    def __call__(self, *shared: np.ndarray) -> int:
        """Run every part on `shared` (numpy arrays, already checked by the caller);
        returns how many parts ran on worker threads (the others ran on the calling
        thread)."""
        if len(shared) != self._shared:
            raise TypeError(f"expected {self._shared} shared buffers, got {len(shared)}")
        with self._turn:
            if self._job is not None:
                return self._run(*shared, *self._padding)
            for private, sizes in zip(self.private, self.sizes, strict=True):
                self.kernel.call_unchecked(*shared, *private, *sizes)
            return 0


CACHE_LINE_ALIGNMENT = 64
"""Buffers start on a cache line: vector loads that split lines halve L1 bandwidth
(measured 88 vs 165 GB/s at 16 KiB on the development machine); numpy only
guarantees 16-byte alignment."""


def aligned_array(count: int, fill: float | None = None) -> np.ndarray:
    """A float32 array of `count` elements starting on a cache-line boundary."""
    pad = CACHE_LINE_ALIGNMENT // 4
    raw = np.empty(count + pad, np.float32)
    offset = (-raw.ctypes.data % CACHE_LINE_ALIGNMENT) // 4
    array = raw[offset : offset + count]
    if fill is not None:
        array[:] = fill
    return array


def scratch(count: int, parts: int) -> Sequence[np.ndarray]:
    """One cache-line-aligned float32 scratch buffer of `count` elements per thread."""
    return [aligned_array(max(count, 1)) for _ in range(parts)]
