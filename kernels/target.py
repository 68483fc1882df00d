"""The code-generation targets: avx2, avx512, neon, rvv (VLEN a parameter).

A target says how to ask LLVM for code (triple, CPU, features, ABI), what the vector
unit looks like to the generators (register width and count, scalable or not), and
how a given host (`HostCpu`, detected by the probe) can run the result: natively when
its CPU has the required features, under qemu-user when a cross compiler and
emulator are installed.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Literal

from kernels.errors import KernelError

DEFAULT_RVV_VLEN = 256
"""VLEN assumed for RVV when none is given: the width of common RVV 1.0 cores."""

RVV_VLEN_RANGE = (128, 1024)
"""RVV 1.0 application processors have VLEN >= 128; qemu-user emulates up to 1024."""

ExecutionMode = Literal["native", "emulated", "unavailable"]


@dataclass(frozen=True)
class Execution:
    """How this host can run a target's code, and why."""

    mode: ExecutionMode
    reason: str


@dataclass(frozen=True)
class HostCpu:
    """The machine code runs on, as far as running a target's code goes: its ISA (Linux
    machine name) and CPU flags (py-cpuinfo's names). The probe detects it."""

    arch: str
    flags: frozenset[str]


@dataclass(frozen=True)
class Target:
    """A code-generation target: everything codegen and lowering need to know."""

    name: str
    arch: str  # Linux machine name of the ISA: x86_64, aarch64, riscv64
    triple: str
    cpu: str
    features: str
    vector_bits: int  # register width; VLEN for RVV
    vector_registers: int
    scalable: bool  # vectors are vscale-scaled (RVV); fixed-length otherwise
    host_flags: frozenset[str]  # py-cpuinfo flags a CPU needs to run this code natively
    abi: str = ""
    cross_cc: str = ""  # gcc that links static executables for this ISA on another host
    emulator: tuple[str, ...] = ()  # qemu-user command line, without the program

    @property
    def f32_lanes(self) -> int:
        """f32 lanes in one full vector register."""
        return self.vector_bits // 32

    @property
    def cross_ar(self) -> str:
        """The archiver of the cross toolchain (binutils beside `cross_cc`)."""
        return self.cross_cc.removesuffix("gcc") + "ar"

    @property
    def vscale(self) -> int:
        """LLVM's vscale on this target: VLEN/64 for RVV, 1 for fixed-length ISAs."""
        return self.vector_bits // 64 if self.scalable else 1

    def execution(self, host: HostCpu) -> Execution:
        """Whether `host` runs the target's code natively, emulated, or not at all."""
        if host.arch == self.arch:
            missing = sorted(self.host_flags - host.flags)
            if not missing:
                return Execution("native", f"host CPU has {', '.join(sorted(self.host_flags))}")
            if not self.emulator:
                return Execution("unavailable", f"host CPU lacks {', '.join(missing)}")
        if not self.emulator:
            return Execution("unavailable", f"{self.arch} code cannot run on a {host.arch} host")
        tools = [self.emulator[0], self.cross_cc]
        absent = [tool for tool in tools if shutil.which(tool) is None]
        if absent:
            return Execution(
                "unavailable", f"{' and '.join(absent)} not installed (see README: make test)"
            )
        return Execution("emulated", " ".join(self.emulator))


_X86_64_V3_FLAGS = frozenset({"avx", "avx2", "fma", "bmi1", "bmi2", "f16c", "movbe"})
_X86_64_V4_FLAGS = _X86_64_V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def _x86(name: str, level: str, bits: int, registers: int, flags: frozenset[str]) -> Target:
    """An x86-64 target at a microarchitecture level (v3: AVX2+FMA, v4: AVX-512)."""
    return Target(name=name, arch="x86_64", triple="x86_64-unknown-linux-gnu", cpu=f"x86-64-{level}",
                  features="", vector_bits=bits, vector_registers=registers, scalable=False,
                  host_flags=flags)  # fmt: skip


def _avx2() -> Target:
    return _x86("avx2", "v3", 256, 16, _X86_64_V3_FLAGS)


def _avx512() -> Target:
    return _x86("avx512", "v4", 512, 32, _X86_64_V4_FLAGS)


def _neon() -> Target:
    return Target(
        name="neon",
        arch="aarch64",
        triple="aarch64-unknown-linux-gnu",
        cpu="generic",
        features="+neon",
        vector_bits=128,
        vector_registers=32,
        scalable=False,
        host_flags=frozenset({"asimd"}),
        cross_cc="aarch64-linux-gnu-gcc",
        emulator=("qemu-aarch64",),
    )


def _rvv(vlen: int) -> Target:
    if not (RVV_VLEN_RANGE[0] <= vlen <= RVV_VLEN_RANGE[1]) or vlen & (vlen - 1):
        raise KernelError(
            f"invalid RVV VLEN {vlen}: must be a power of two from "
            f"{RVV_VLEN_RANGE[0]} to {RVV_VLEN_RANGE[1]}"
        )
    return Target(
        name="rvv",
        arch="riscv64",
        triple="riscv64-unknown-linux-gnu",
        cpu="generic-rv64",
        features="+m,+a,+f,+d,+c,+v",
        vector_bits=vlen,
        vector_registers=32,
        scalable=True,
        host_flags=frozenset({"v"}),
        abi="lp64d",
        cross_cc="riscv64-linux-gnu-gcc",
        emulator=("qemu-riscv64", "-cpu", f"rv64,v=true,vlen={vlen},vext_spec=v1.0"),
    )


ISA_NAMES = ("avx2", "avx512", "neon", "rvv")


def get_target(name: str, vlen: int | None = None) -> Target:
    """The target called `name`; `vlen` sets RVV's VLEN (only valid for rvv)."""
    if vlen is not None and name != "rvv":
        raise KernelError(f"--vlen applies only to the rvv target, not {name!r}")
    factories = {"avx2": _avx2, "avx512": _avx512, "neon": _neon}
    if name == "rvv":
        return _rvv(DEFAULT_RVV_VLEN if vlen is None else vlen)
    if name not in factories:
        raise KernelError(
            f"unknown target {name!r}; known targets: {', '.join(ISA_NAMES)}"
        )
    return factories[name]()


def all_targets(vlen: int | None = None) -> list[Target]:
    """The four ISA targets."""
    return [get_target(n, vlen if n == "rvv" else None) for n in ISA_NAMES]


def host_target(host: HostCpu) -> Target:
    """The widest target `host` runs natively (avx512 where it has AVX-512, else avx2, ...)."""
    for candidate in (_avx512(), _avx2(), _neon(), _rvv(DEFAULT_RVV_VLEN)):
        if candidate.execution(host).mode == "native":
            return candidate
    raise KernelError(f"this {host.arch} CPU supports none of the targets {', '.join(ISA_NAMES)}")
