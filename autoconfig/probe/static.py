"""Static machine information: ISA, features, vector unit, cores, clock, caches.

Read from a Linux root directory (``/`` for this machine, a saved fixture tree in
tests): ``proc/cpuinfo`` for the ISA's feature flags and the model name, and
``sys/devices/system/cpu`` for topology and cache geometry (``cpu0/cache/index*``).
On the live machine py-cpuinfo supplies the brand and advertised clock, which it
reads more robustly than procfs on some kernels. Works for x86_64, aarch64 and
riscv64 cpuinfo layouts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoconfig.errors import AutoconfigError
from autoconfig.profile import Cache, Figure

# Linux feature flag (any ISA) -> profile feature name.
_FLAG_FEATURES = {
    "avx2": "avx2",
    "fma": "fma",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512vl": "avx512vl",
    "avx512_bf16": "avx512_bf16",
    "avx512_vnni": "avx512_vnni",
    "asimd": "asimd",
    "sve": "sve",
}

# Architectural vector units: (register bits, register count) per widest feature.
_X86_VECTORS = (("avx512f", 512, 32), ("avx2", 256, 16))
_SVE_DEFAULT_BITS = 128  # SVE's architectural minimum, when the kernel does not say


@dataclass(frozen=True)
class StaticInfo:
    """What the OS tells about the machine without running anything."""

    model: str
    isa: str
    features: tuple[str, ...]
    cores: int
    threads: int
    frequency_ghz: float | None
    vector_bits: int | None  # None: not knowable statically (RVV's VLEN)
    vector_registers: int
    scalable: bool
    caches: tuple[Cache, ...]


def read_static(root: Path = Path("/"), cpuinfo: dict[str, Any] | None = None) -> StaticInfo:
    """Static information of the machine whose procfs and sysfs are under `root`.

    `cpuinfo` is py-cpuinfo's dictionary for the live machine (None for fixtures).
    """
    try:
        text = (root / "proc/cpuinfo").read_text()
    except OSError as err:
        raise AutoconfigError(f"cannot read {root / 'proc/cpuinfo'}: {err.strerror}") from None
    first = _first_block(text)
    isa = _isa(first)
    features = _features(isa, first)
    threads, cores = _topology(root / "sys/devices/system/cpu")
    model = (cpuinfo or {}).get("brand_raw") or _model_name(isa, first)
    bits, registers, scalable = _vector_unit(isa, features, root)
    return StaticInfo(
        model=model,
        isa=isa,
        features=features,
        cores=cores,
        threads=threads,
        frequency_ghz=_frequency(first, cpuinfo),
        vector_bits=bits,
        vector_registers=registers,
        scalable=scalable,
        caches=_caches(root / "sys/devices/system/cpu/cpu0/cache", threads // cores),
    )


def _first_block(text: str) -> dict[str, str]:
    """The key/value pairs of the first processor entry (plus global lines)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if ":" not in line:
            if fields.get("processor") is not None and not line.strip():
                break
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        fields.setdefault(key, value)
    return fields


def _isa(fields: dict[str, str]) -> str:
    if "isa" in fields and fields["isa"].startswith("rv64"):
        return "riscv64"
    if "Features" in fields and ("CPU architecture" in fields or "CPU implementer" in fields):
        return "aarch64"
    if "flags" in fields and "vendor_id" in fields:
        return "x86_64"
    raise AutoconfigError("cpuinfo: cannot tell the ISA (expected x86_64, aarch64 or riscv64)")


def _features(isa: str, fields: dict[str, str]) -> tuple[str, ...]:
    if isa == "riscv64":
        base = re.match(r"rv64([a-z]*)", fields["isa"])
        return ("rvv",) if base and "v" in base.group(1) else ()
    flags = fields["flags" if isa == "x86_64" else "Features"].split()
    return tuple(sorted({_FLAG_FEATURES[f] for f in flags if f in _FLAG_FEATURES}))


def _model_name(isa: str, fields: dict[str, str]) -> str:
    if isa == "x86_64":
        return fields.get("model name", "unknown x86_64")
    if isa == "riscv64":
        return fields.get("uarch", "unknown riscv64")
    implementer, part = fields.get("CPU implementer", "?"), fields.get("CPU part", "?")
    return _ARM_PARTS.get((implementer, part), f"Arm implementer {implementer} part {part}")


_ARM_PARTS = {
    ("0x41", "0xd0c"): "Arm Neoverse N1",
    ("0x41", "0xd40"): "Arm Neoverse V1",
    ("0x41", "0xd49"): "Arm Neoverse N2",
    ("0x41", "0xd4f"): "Arm Neoverse V2",
    ("0x41", "0xd0b"): "Arm Cortex-A76",
    ("0x41", "0xd08"): "Arm Cortex-A72",
}


def _frequency(fields: dict[str, str], cpuinfo: dict[str, Any] | None) -> float | None:
    """Nominal clock in GHz: py-cpuinfo's advertised Hz, else procfs 'cpu MHz'."""
    hz = (cpuinfo or {}).get("hz_advertised")
    if hz and hz[0] > 0:
        return round(hz[0] * 10.0 ** (-9 + hz[1]) if hz[1] else hz[0] / 1e9, 3)
    if "cpu MHz" in fields:
        return round(float(fields["cpu MHz"]) / 1000, 3)
    return None


def _vector_unit(isa: str, features: tuple[str, ...], root: Path) -> tuple[int | None, int, bool]:
    """(register bits, register count, scalable) of the widest vector unit."""
    if isa == "x86_64":
        for feature, bits, registers in _X86_VECTORS:
            if feature in features:
                return bits, registers, False
        return 128, 16, False  # SSE
    if isa == "aarch64":
        if "sve" in features:
            length = root / "proc/sys/abi/sve_default_vector_length"
            bits = int(length.read_text()) * 8 if length.exists() else _SVE_DEFAULT_BITS
            return bits, 32, True
        return 128, 32, False
    return None, 32, True  # RVV: VLEN is not in procfs or sysfs


def _static(value: int, unit: str) -> Figure:
    return Figure(value, unit, "static")


def _cpu_list_size(spec: str) -> int:
    """Number of CPUs in a sysfs list such as '0-3,8'."""
    count = 0
    for part in spec.strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def _topology(cpu_dir: Path) -> tuple[int, int]:
    """(hardware threads, physical cores) from sysfs topology."""
    cpus = sorted(p for p in cpu_dir.glob("cpu[0-9]*") if p.name[3:].isdigit())
    if not cpus:
        raise AutoconfigError(f"no CPUs under {cpu_dir}")
    cores = set()
    for cpu in cpus:
        topo = cpu / "topology"
        package = (topo / "physical_package_id").read_text().strip() if topo.exists() else "0"
        core = (topo / "core_id").read_text().strip() if topo.exists() else cpu.name
        cores.add((package, core))
    return len(cpus), len(cores)


def _caches(cache_dir: Path, threads_per_core: int) -> tuple[Cache, ...]:
    """cpu0's cache levels from sysfs; sets or ways are derived when one is missing."""
    caches = []
    for index in sorted(cache_dir.glob("index[0-9]*")):
        def read(name: str) -> str | None:
            path = index / name
            return path.read_text().strip() if path.exists() else None

        size = _size_bytes(read("size") or "0")
        line = int(read("coherency_line_size") or 0)
        ways = int(read("ways_of_associativity") or 0)
        sets = int(read("number_of_sets") or 0)
        if line and size and sets and not ways:
            ways = size // (line * sets)
        if line and size and ways and not sets:
            sets = size // (line * ways)
        if not (size and line and ways and sets):
            raise AutoconfigError(
                f"{index}: incomplete cache geometry (size, line, ways, sets); "
                "use a datasheet profile for this machine"
            )
        shared_threads = _cpu_list_size(read("shared_cpu_list") or "0")
        caches.append(
            Cache(
                level=int(read("level") or 0),
                kind=(read("type") or "unified").lower(),
                size=_static(size, "B"),
                line=_static(line, "B"),
                ways=_static(ways, "count"),
                sets=_static(sets, "count"),
                shared_by=_static(max(1, shared_threads // threads_per_core), "count"),
            )
        )
    if not caches:
        raise AutoconfigError(f"no cache information under {cache_dir}")
    return tuple(caches)


def _size_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)\s*([KMG]?)", text.strip())
    if not match:
        raise AutoconfigError(f"unreadable cache size {text!r}")
    return int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2]]
