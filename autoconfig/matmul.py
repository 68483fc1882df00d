"""The matmul API: compile ``C = A·B`` for this machine and call it on numpy arrays.

``compile_matmul(M, N, K)`` asks the matmul model for a plan (or takes a forced
configuration), generates and builds the kernel for the target, and returns a
callable that splits the tiles across the plan's threads.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autoconfig import checks
from autoconfig.errors import AutoconfigError, reraised
from autoconfig.models.cost import Prediction
from autoconfig.models.matmul import Choice, MatmulPlan, Split, choose, predict
from autoconfig.resolve import resolve
from autoconfig.lowering import LayerBuffers, matmul_call
from autoconfig.runtime import AlignedStaging, Program, Ref, aligned_empty
from kernels import epilogue as ep
from kernels import matmul as mm
from autoconfig.probe.host import this_host
from kernels.library import KernelLibrary, build_library
from kernels.lower import start_backends
from kernels.target import Target


class CompiledMatmul:
    """``f(A, B[, operands][, out=C]) -> C`` (or ``f(A, B, C[, operands])`` accumulating)
    for one shape, with its plan. `operands` are the epilogue's tensors in its order: a
    bias of N values, a residual of C's shape; `out` a C to write instead of a new one."""

    def __init__(self, plan: MatmulPlan, target: Target, prediction: Prediction,
                 choice: Choice | None, library: KernelLibrary):  # fmt: skip
        self.plan, self.config, self.shape, self.target = plan, plan.config, plan.shape, target
        self.prediction, self.choice, self.library = prediction, choice, library
        self._run = matmul_program(plan, library)
        self._stage_b = b_staging(self.config, (self.shape.k, self.shape.n))

    def __call__(self, a: np.ndarray, b: np.ndarray, *rest: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """C = A·B (C += A·B, C passed after B, when the config accumulates), then the
        epilogue with its operands after that; into `out` when given (no allocation)."""
        s, cfg = self.shape, self.config
        a = checks.float32_array("A", a, (s.m, s.k))
        b = checks.float32_array("B", b, (s.k, s.n))
        operands = ep.operand_names(cfg.epilogue)
        if cfg.accumulate:
            if not rest:
                raise AutoconfigError("this matmul accumulates (C += A·B): pass C")
            if out is not None:
                raise AutoconfigError("this matmul accumulates into the C passed after B: no out=")
            out, rest = rest[0], rest[1:]
        given = out is not None
        if given:
            out = checks.output_array("C" if cfg.accumulate else "out", out, (s.m, s.n), {})
        else:
            out = aligned_empty((s.m, s.n))
        if len(rest) != len(operands):
            names = ", ".join(name for _, name, _ in operands) or "none"
            writes = "accumulates into C" if cfg.accumulate else "overwrites C (do not pass C)"
            raise AutoconfigError(f"this matmul {writes} and takes {len(operands)} epilogue operand(s) "
                                  f"({names}), got {len(rest)}")  # fmt: skip
        tensors = [checks.float32_array(name, x, (cfg.channel_count(),) if kind == "channel" else (s.m, s.n))
                   for (_, name, kind), x in zip(operands, rest, strict=True)]  # fmt: skip
        if given:
            checks.no_overlap({"C": out}, {"A": a, "B": b, **{name: x for (_, name, _), x in zip(operands, tensors)}})
        if self._stage_b is not None:
            b = self._stage_b(b)
        self._run(out, a, b, *tensors)  # checked above
        return out

    def explain(self) -> str:
        """Why this configuration: the model's parameters and predicted cost terms."""
        if self.choice is not None:
            return self.choice.explain()
        return _explain_forced(self.prediction, self.target)


def b_staging(config: mm.MatmulConfig, shape: tuple[int, ...]) -> AlignedStaging | None:
    """Staging for the B operand (of `shape`) of a kernel with `config`: a tiled kernel
    reads B in place with vector loads, once per row tile; a packed one copies it into
    panels and needs none."""
    return AlignedStaging.of(shape, config.row_tiles()) if config.algorithm == "tiled" else None


def matmul_program(plan: MatmulPlan, library: KernelLibrary) -> Program:
    """The plan's kernel from `library` on arrays (C, A, B, epilogue operands), run on
    each thread's block with its own packing workspace."""
    operands = len(ep.operand_names(plan.config.epilogue))
    buffers = LayerBuffers(3 + operands)
    call = matmul_call(plan, Ref(0), Ref(1), Ref(2), [Ref(3 + i) for i in range(operands)], buffers)
    return Program(library, [call], buffers.arrays, 3 + operands)


def _explain_forced(p: Prediction, target: Target) -> str:
    return "\n".join([f"matmul M={p.shape.m} N={p.shape.n} K={p.shape.k} on {target.name}: forced "
                      f"{p.config.algorithm}, predicted {p.total_ns / 1e3:.1f} µs = {p.gflops:.1f} GFLOP/s",
                      *p.lines()])  # fmt: skip


@reraised
def plan_matmul(m: int, n: int, k: int, *, profile=None, target=None, threads=None,
                epilogue: ep.Epilogue = ()) -> Choice:  # fmt: skip
    """The model's choice for a shape, without building anything."""
    shape, threads = _shape(m, n, k), checks.threads(threads)
    prof, tgt = resolve(profile, target)
    return choose(shape, prof, tgt, checks.threads_within(threads, prof), tuple(epilogue))


def _shape(m: object, n: object, k: object) -> mm.MatmulShape:
    return mm.MatmulShape(checks.size("M", m), checks.size("N", n), checks.size("K", k))


@reraised
def compile_matmul(
    m: int, n: int, k: int, *, profile=None, target=None, threads: int | None = None,
    config: mm.MatmulConfig | None = None, split_by: Split = "rows", epilogue: ep.Epilogue = (),
) -> CompiledMatmul:  # fmt: skip
    """Compile ``C = A·B`` for A of M×K and B of K×N (float32, row-major), then the
    `epilogue` ops (`kernels.epilogue`: bias, residual, relu, clip, leaky_relu,
    sigmoid) on C as it is stored.

    The matmul model picks the algorithm and its parameters from the profile (the
    host's when None, probing quickly if there is none yet); `config` forces a
    configuration instead (validated for the target; its shape must be M×N×K and its
    epilogue is used); `threads` caps the thread count the model may use (with a
    forced config, it sets it, dividing the tiles `split_by` rows or columns).
    """
    shape, threads = _shape(m, n, k), checks.threads(threads)
    prof, tgt = resolve(profile, target)
    threads = checks.threads_within(threads, prof)
    choice = None
    start_backends()  # an LLVM child starts while the model decides (a cached kernel leaves it idle)
    if config is None:
        choice = choose(shape, prof, tgt, threads, tuple(epilogue))
        plan = choice.best.plan
    else:
        if config.shape != shape:
            raise AutoconfigError(f"the forced config is for {config.shape}, not M={m} N={n} K={k}")
        plan = MatmulPlan(replace(config, epilogue=tuple(epilogue) or config.epilogue), threads or 1, split_by)
    plan.config.validate(tgt)
    prediction = choice.best if choice else predict(plan, prof)
    library = build_library(mm.generate(plan.config, tgt), this_host())
    return CompiledMatmul(plan, tgt, prediction, choice, library)
