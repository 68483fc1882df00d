"""This machine: py-cpuinfo's description of its CPU, kept for the boot, and the
targets it runs. Every other module asks here, never py-cpuinfo or procfs itself."""

from __future__ import annotations

import functools
import json
import os
import platform
from pathlib import Path

from autoconfig.errors import AutoconfigError
from kernels.files import write_atomically
from kernels.target import ISA_NAMES, HostCpu, Target, get_target, host_target

TARGET_NAMES = (*ISA_NAMES, "host")
"""The names a user can give a target: the four ISAs, or this machine's widest."""

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""Linux's identifier of the running boot: a machine's CPU does not change within one."""


@functools.cache
def host_cpu_info() -> dict:
    """py-cpuinfo's description of this machine: target checks and the profile's static
    part share it. py-cpuinfo takes ~1.2 s (it spawns helper processes), a quarter of a
    warm model build, so on Linux the answer is kept in the user cache for the boot."""
    import cpuinfo  # py-cpuinfo; imported lazily because it spawns helper processes

    boot = BOOT_ID.read_text().strip() if BOOT_ID.is_file() else None
    kept = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autoconfig" / "host-cpu.json"
    if boot is not None:
        try:
            saved = json.loads(kept.read_text())
            if saved.get("boot_id") == boot:
                return saved["info"]
        except (OSError, ValueError, KeyError, AttributeError):
            pass
    info = cpuinfo.get_cpu_info()
    if boot is not None:
        try:
            write_atomically(kept, json.dumps({"boot_id": boot, "info": info}), make_parents=True)
        except OSError:  # a read-only home only costs the next process the 1.2 s again
            pass
    return info


@functools.cache
def this_host() -> HostCpu:
    """This machine's ISA and CPU flags."""
    arch = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    return HostCpu(arch=arch, flags=frozenset(host_cpu_info().get("flags", [])))


def named_target(name: str, vlen: int | None = None) -> Target:
    """The target a user names: one of the ISAs, or "host" (this machine's widest)."""
    if name == "host":
        if vlen is not None:
            raise AutoconfigError("--vlen applies only to the rvv target, not 'host'")
        return host_target(this_host())
    return get_target(name, vlen)
