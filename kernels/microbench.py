"""Micro-benchmark kernels for `autoconfig probe`, generated like every other kernel.

Two families, each a loop nest whose work is known exactly so that a timing turns
into a rate:

FMA chains (latency with one chain, throughput with enough independent chains)::

    acc[0..chains) = 0
    for it in 0 .. iters:                       # `unroll` copies of the body
        for j in 0 .. chains: acc[j] = fma(acc[j], x, y)
    out[0] = sum over chains and lanes of acc

Streaming loads (bandwidth of the level holding `data`)::

    acc[0..accumulators) = 0
    for r in 0 .. reps:
        for i in 0 .. n - n % block, block:     # block = step * accumulators
            for j in 0 .. accumulators: acc[j] += data[i + j*step : ... + step]
    out[0] = sum over accumulators and lanes of acc   # data past the last block is not read

or, with `broadcast`, each element broadcast to a vector and multiplied into its
accumulator by an FMA, as a register tile uses A's elements (block = accumulators)::

            for j in 0 .. accumulators: acc[j] = fma(broadcast(data[i + j]), data[0], acc[j])

`step` is the run-time vector length (lanes, or a multiple of vscale on RVV) and the
result is one scalar, so both kernels are correct on any VLEN.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernels.errors import KernelError
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import (
    KernelModule,
    check_lanes,
    f32_memref,
    f32_splat,
    f32_vector_type,
    index,
    kernel_body,
    lane_step,
    new_module,
    verify,
)
from kernels.loops import for_carry, lane_sum, load
from kernels.mlir import arith, ir, memref, vector
from kernels.target import Target


@dataclass(frozen=True)
class FmaChainConfig:
    """`chains` independent dependent-FMA chains of `lanes`-wide vectors."""

    lanes: int
    chains: int
    unroll: int = 4  # copies of the body per loop trip, to hide the loop's own cost

    @property
    def symbol(self) -> str:
        return f"ac_fmachain_f32_l{self.lanes}c{self.chains}u{self.unroll}"

    @property
    def fmas_per_iteration(self) -> int:
        """Vector FMAs one loop trip (one unit of `iters`) performs."""
        return self.chains * self.unroll


@dataclass(frozen=True)
class StreamConfig:
    """Sum `data` with `accumulators` independent vector adds of `lanes` f32, or (with
    `broadcast`) FMAs of each element broadcast to `lanes`."""

    lanes: int
    accumulators: int
    broadcast: bool = False

    @property
    def symbol(self) -> str:
        return f"ac_stream_f32_l{self.lanes}a{self.accumulators}{'b' if self.broadcast else ''}"

    @property
    def block(self) -> int:
        """Elements read per inner-loop trip."""
        return self.accumulators if self.broadcast else self.lanes * self.accumulators


def fma_chain_signature(config: FmaChainConfig) -> KernelSignature:
    return KernelSignature(
        symbol=config.symbol,
        params=(
            Param("out", Role.OUT, extent=(1,)),
            Param("xy", Role.IN, extent=(2,)),
            Param("iters", Role.SIZE),
        ),
        doc=f"{config.chains} chains x {config.unroll} of acc = fma(acc, xy[0], xy[1]) "
        f"per iteration on {config.lanes} lanes; out[0] = sum of all lanes of all chains.",
    )


def stream_signature(config: StreamConfig) -> KernelSignature:
    return KernelSignature(
        symbol=config.symbol,
        params=(
            Param("out", Role.OUT, extent=(1,)),
            Param("data", Role.IN, extent=("n",)),
            Param("n", Role.SIZE),
            Param("reps", Role.SIZE),
        ),
        doc=f"out[0] = sum of data[0 : n - n % block] over reps passes, block = "
        f"{config.accumulators} vectors of {config.lanes} lanes.",
    )


def _check_counts(**counts: int) -> None:
    for name, count in counts.items():
        if count < 1:
            raise KernelError(f"{name} must be >= 1, got {count}")




def generate_fma_chain(config: FmaChainConfig, target: Target) -> KernelModule:
    """The FMA chain kernel: latency with chains=1, throughput with many chains."""
    check_lanes(target, config.lanes)
    _check_counts(chains=config.chains, unroll=config.unroll)
    if config.chains + 2 > target.vector_registers:
        raise KernelError(
            f"{config.chains} chains + 2 operands exceed {target.name}'s "
            f"{target.vector_registers} vector registers"
        )
    sig = fma_chain_signature(config)
    with new_module() as module:
        with kernel_body(module, sig) as args:
            out = f32_memref(args["out"], [1])
            xy = f32_memref(args["xy"], [2])
            vec = f32_vector_type(target, config.lanes)
            x, y = (vector.broadcast(vec, memref.load(xy, [index(k)])) for k in (0, 1))
            zero = f32_splat(target, config.lanes, 0.0)
            def iteration(_: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                for _ in range(config.unroll):
                    acc = [vector.fma(a, x, y) for a in acc]
                return acc

            chains = for_carry(0, index(args["iters"]), 1, [zero] * config.chains, iteration)
            memref.store(lane_sum(chains), out, [index(0)])
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)


def generate_stream(config: StreamConfig, target: Target) -> KernelModule:
    """The streaming-load kernel whose rate is the bandwidth of the level holding data."""
    check_lanes(target, config.lanes)
    _check_counts(accumulators=config.accumulators)
    sig = stream_signature(config)
    with new_module() as module:
        vec = f32_vector_type(target, config.lanes)
        with kernel_body(module, sig) as args:
            out = f32_memref(args["out"], [1])
            data = f32_memref(args["data"], [args["n"]])
            count = index(args["n"])
            step = index(1) if config.broadcast else lane_step(target, config.lanes)
            block = arith.muli(step, index(config.accumulators))
            full = arith.subi(count, arith.remui(count, block))
            zero = f32_splat(target, config.lanes, 0.0)
            scale = vector.broadcast(vec, memref.load(data, [index(0)]))  # a run-time value: no fma(x, 1) folding

            def sweep(i: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                at = [arith.addi(i, arith.muli(step, index(j))) for j in range(len(acc))]
                if config.broadcast:
                    return [vector.fma(vector.broadcast(vec, memref.load(data, [k])), scale, a) for k, a in zip(at, acc)]
                return [arith.addf(a, load(vec, data, [k])) for k, a in zip(at, acc)]

            def one_pass(_: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
                return for_carry(0, full, block, acc, sweep)

            sums = for_carry(0, index(args["reps"]), 1, [zero] * config.accumulators, one_pass)
            memref.store(lane_sum(sums), out, [index(0)])
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)

