"""The Python API: compile an operator for this machine and call it on numpy arrays.

``compile_matmul(M, N, K)`` asks the matmul model for a configuration (or takes a
forced one), generates and builds the kernel for the target, and returns a callable
that splits the row tiles across the chosen number of threads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.models.matmul import Choice, Prediction, choose, predict
from autoconfig.profile import HardwareProfile, load_profile
from autoconfig.runtime import SplitKernel, scratch, split
from kernels import matmul as mm
from kernels.library import KernelLibrary, build_library
from kernels.target import Target, get_target


def resolve_profile(profile: HardwareProfile | str | Path | None) -> HardwareProfile:
    """A profile object from an object, a path, or None (this machine's)."""
    if isinstance(profile, HardwareProfile):
        return profile
    if profile is None:
        from autoconfig.probe import host_profile

        return host_profile()
    return load_profile(profile)


def target_for_profile(profile: HardwareProfile) -> Target:
    """The code-generation target a profile describes (its widest vector unit)."""
    if profile.isa == "x86_64":
        return get_target("avx512" if int(profile.vector.bits) >= 512 else "avx2")
    if profile.isa == "aarch64":
        return get_target("neon")
    return get_target("rvv", int(profile.vector.bits))


def resolve_target(target: Target | str | None, profile: HardwareProfile) -> Target:
    if isinstance(target, Target):
        return target
    return target_for_profile(profile) if target is None else get_target(target)


class CompiledMatmul:
    """``f(A, B) -> C`` (or ``f(A, B, C)`` accumulating) for one shape, with its config."""

    def __init__(self, shape: mm.MatmulShape, config: mm.MatmulConfig, target: Target,
                 prediction: Prediction, choice: Choice | None, library: KernelLibrary):  # fmt: skip
        self.shape, self.config, self.target = shape, config, target
        self.prediction, self.choice, self.library = prediction, choice, library
        blocks = part_blocks(shape, config)
        work = config.workspace(shape)
        private = [[w] for w in scratch(work, len(blocks))] if work else None
        self._run = SplitKernel(library.kernel(mm.signature(shape, config).symbol), blocks, private)

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        s = self.shape
        a = _matrix("A", a, (s.m, s.k))
        b = _matrix("B", b, (s.k, s.n))
        if self.config.accumulate:
            if c is None:
                raise AutoconfigError("this matmul accumulates (C += A·B): pass C")
            out = c
            if not (isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == (s.m, s.n)
                    and c.flags.c_contiguous and c.flags.writeable):  # fmt: skip
                raise AutoconfigError(f"C must be a writeable C-contiguous float32 array of shape {(s.m, s.n)}")
        else:
            if c is not None:
                raise AutoconfigError("this matmul overwrites C (C = A·B): do not pass C")
            out = np.empty((s.m, s.n), np.float32)
        self._run(out, a, b)  # checked above
        return out

    def explain(self) -> str:
        """Why this configuration: the model's parameters and predicted cost terms."""
        if self.choice is not None:
            return self.choice.explain()
        return _explain_forced(self.prediction, self.target)


def part_blocks(shape: mm.MatmulShape, config: mm.MatmulConfig) -> list[tuple[int, int, int, int]]:
    """Each thread's (row_begin, row_end, col_begin, col_end) in tiles: the tiles of
    the split dimension cut into at most `threads` near-equal ranges."""
    rows, cols = (0, config.row_tiles(shape)), (0, config.col_tiles(shape))
    if config.split == "rows":
        return [(*r, *cols) for r in split(rows[1], config.threads)]
    return [(*rows, *c) for c in split(cols[1], config.threads)]


def _matrix(name: str, x: object, shape: tuple[int, int]) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise AutoconfigError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise AutoconfigError(f"{name} must be float32, got {x.dtype}")
    if x.shape != shape:
        raise AutoconfigError(f"{name} must have shape {shape}, got {x.shape}")
    return np.ascontiguousarray(x)


def _explain_forced(p: Prediction, target: Target) -> str:
    lines = [f"matmul M={p.shape.m} N={p.shape.n} K={p.shape.k} on {target.name}: forced "
             f"{p.config.algorithm}, predicted {p.total_ns / 1e3:.1f} µs = {p.gflops:.1f} GFLOP/s"]  # fmt: skip
    lines += [f"  {name:<10} {why}" for name, why in p.parameters]
    lines += [f"  {t.name:<12} {t.ns:>14,.0f}  {t.why}" for t in p.terms]
    return "\n".join(lines)


def plan_matmul(m: int, n: int, k: int, *, profile=None, target=None, threads=None) -> Choice:
    """The model's choice for a shape, without building anything."""
    prof = resolve_profile(profile)
    if threads is not None and threads < 1:
        raise AutoconfigError(f"threads must be >= 1, got {threads}")
    return choose(mm.MatmulShape(m, n, k), prof, resolve_target(target, prof), threads)


def compile_matmul(
    m: int, n: int, k: int, *, profile=None, target=None, threads: int | None = None,
    config: mm.MatmulConfig | None = None,
) -> CompiledMatmul:  # fmt: skip
    """Compile ``C = A·B`` for A of M×K and B of K×N (float32, row-major).

    The matmul model picks the algorithm and its parameters from the profile (the
    host's when None, probing quickly if there is none yet); `config` forces a
    configuration instead (validated for the target); `threads` caps the thread
    count the model may use (with a forced config, it sets it).
    """
    shape = mm.MatmulShape(m, n, k)
    prof = resolve_profile(profile)
    tgt = resolve_target(target, prof)
    choice = None
    if config is None:
        choice = choose(shape, prof, tgt, threads)
        config = choice.best.config
    elif threads is not None:
        from dataclasses import replace

        config = replace(config, threads=threads)
    config.validate(tgt, shape)
    prediction = choice.best if choice else predict(shape, config, prof)
    library = build_library(mm.generate(shape, config, tgt))
    return CompiledMatmul(shape, config, tgt, prediction, choice, library)
