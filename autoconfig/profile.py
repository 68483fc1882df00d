"""The hardware profile: the whole interface between a machine and every decision.

A profile is YAML with a schema version. Every number in it is a `Figure`: a value
with its unit and its source — ``static`` (read from the OS), ``measured`` (by the
probe's generated micro-benchmarks) or ``datasheet`` (from a public document, cited
in the profile's ``references``). Loading validates every field and rejects a
missing field, a wrong type, a wrong unit, an unknown ISA or feature, or an unknown
schema version with one line naming the field.

Schema version 1::

    schema_version: 1
    name, model: str                  # slug and marketing name of the CPU
    isa: x86_64 | aarch64 | riscv64
    features: [avx2, fma, ...]         # from FEATURES
    cores, threads: Figure(count)      # physical cores, hardware threads
    frequency: Figure(GHz) | null      # nominal clock where known
    vector: {bits: Figure(bit), registers: Figure(count), scalable: bool}
    caches: [{level, kind, size: B, line: B, ways, sets, shared_by: count}]
    fma: [{vector_bits, latency: ns, throughput, throughput_all: vfma/ns,
           loads: vload/ns (optional: L1 loads of this width per ns, one thread),
           broadcasts: bload/ns (optional: L1 scalars broadcast to this width and FMA'd per ns)}]
    bandwidth: {single_thread, all_threads} each
        {threads, curve: [{working_set: B, bandwidth: GB/s}],
         levels: {L1.., DRAM: GB/s}, knees: {L1..: B}}   # levels from LEVELS
    references: [str]                  # public sources of datasheet figures
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from autoconfig.errors import AutoconfigError
from autoconfig.fileio import read_text, write_atomically

SCHEMA_VERSION = 1
ISAS = ("x86_64", "aarch64", "riscv64")
FEATURES = (
    "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni",
    "asimd", "sve", "rvv",
)  # fmt: skip
SOURCES = ("static", "measured", "datasheet")
LEVELS = ("L1", "L2", "L3", "L4", "DRAM")


def unit(expected: str, optional: bool = False) -> Any:
    """Dataclass field metadata: this Figure must carry `expected` as its unit; an
    optional one may be absent (None)."""
    return field(default=None, metadata={"unit": expected}) if optional else field(metadata={"unit": expected})


@dataclass(frozen=True)
class Figure:
    """A number with its unit and where it came from."""

    value: float
    unit: str
    source: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}")

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)


@dataclass(frozen=True)
class Cache:
    """One cache level as seen from one core."""

    level: int
    kind: str  # data, instruction or unified
    size: Figure = unit("B")
    line: Figure = unit("B")
    ways: Figure = unit("count")
    sets: Figure = unit("count")
    shared_by: Figure = unit("count")  # cores sharing one instance


@dataclass(frozen=True)
class VectorUnit:
    bits: Figure = unit("bit")  # register width; VLEN on RVV
    registers: Figure = unit("count")
    scalable: bool


@dataclass(frozen=True)
class FmaFigures:
    """One core's f32 vector FMA at one vector width."""

    vector_bits: int
    latency: Figure = unit("ns")  # of one dependent vector FMA
    throughput: Figure = unit("vfma/ns")  # independent vector FMAs completed per ns
    throughput_all: Figure = unit("vfma/ns")  # the same, all hardware threads together
    # L1 vector loads of this width per ns, one thread (measured; absent in datasheets)
    loads: Figure | None = unit("vload/ns", optional=True)
    # scalar loads broadcast to this width and FMA'd, per ns, one thread, from L1 (measured)
    broadcasts: Figure | None = unit("bload/ns", optional=True)

    @property
    def lanes(self) -> int:
        return self.vector_bits // 32

    @property
    def in_flight(self) -> float:
        """FMAs in flight to saturate the units: latency × throughput (BLIS L·N)."""
        return float(self.latency) * float(self.throughput)

    @property
    def peak_gflops(self) -> float:
        """f32 GFLOP/s of one core: vector FMAs/ns × lanes × 2 flops."""
        return float(self.throughput) * self.lanes * 2

    @property
    def peak_gflops_all(self) -> float:
        """f32 GFLOP/s of all cores together."""
        return float(self.throughput_all) * self.lanes * 2


@dataclass(frozen=True)
class BandwidthPoint:
    working_set: Figure = unit("B")
    bandwidth: Figure = unit("GB/s")


@dataclass(frozen=True)
class Bandwidth:
    """Load bandwidth over working-set sizes, with per-level plateaus and knees."""

    threads: int
    curve: tuple[BandwidthPoint, ...]
    levels: dict[str, Figure] = unit("GB/s")  # plateau bandwidth per level
    knees: dict[str, Figure] = unit("B")  # working set where the level's plateau ends


@dataclass(frozen=True)
class BandwidthFigures:
    single_thread: Bandwidth
    all_threads: Bandwidth


@dataclass(frozen=True)
class HardwareProfile:
    schema_version: int
    name: str
    model: str
    isa: str
    features: tuple[str, ...]
    cores: Figure = unit("count")
    threads: Figure = unit("count")
    frequency: Figure | None = unit("GHz")
    vector: VectorUnit
    caches: tuple[Cache, ...]
    fma: tuple[FmaFigures, ...]
    bandwidth: BandwidthFigures | None
    references: tuple[str, ...]

    def cache(self, level: int) -> Cache | None:
        """The data or unified cache at `level` (1 = L1), if the machine has one."""
        return next((c for c in self.caches if c.level == level and c.kind != "instruction"), None)

    def widest_fma(self) -> FmaFigures:
        return max(self.fma, key=lambda f: f.vector_bits)


# ---------------------------------------------------------------- decoding

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader over libyaml where the wheel has it: the pure-Python one took
0.12 s of a 0.5 s single-kernel build to read a profile."""


def load_profile(path: Path | str) -> HardwareProfile:
    """Read and validate a profile file, parsed once per process while the file is
    unchanged: every `compile_*`/`plan_*` call given a path reads it, and parsing took
    20-40 ms of a 0.3 s single-kernel build."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        return _parse_profile(path)  # read_text names the problem
    return _parse_profile_of_version(path.resolve(), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=16)
def _parse_profile_of_version(path: Path, mtime_ns: int, size: int) -> HardwareProfile:
    """`_parse_profile` memoized on the file's identity and version (a rewritten file
    has another modification time or size)."""
    return _parse_profile(path)


def _parse_profile(path: Path) -> HardwareProfile:
    try:
        data = yaml.load(read_text(path, "profile"), Loader=SAFE_LOADER)
    except yaml.YAMLError as err:
        raise AutoconfigError(f"profile {path} is not valid YAML: {' '.join(str(err).split())}") from None
    try:
        return profile_from_dict(data)
    except AutoconfigError as err:
        raise AutoconfigError(f"profile {path}: {err}") from None


def profile_from_dict(data: Any) -> HardwareProfile:
    """Validate plain data (as parsed from YAML) into a HardwareProfile."""
    if not isinstance(data, dict):
        raise AutoconfigError("a profile must be a mapping of fields")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise AutoconfigError(
            f"field 'schema_version': unknown schema version {version!r} "
            f"(this autoconfig reads version {SCHEMA_VERSION})"
        )
    profile = _decode(HardwareProfile, data, "")
    if profile.isa not in ISAS:
        raise AutoconfigError(f"field 'isa': unknown ISA {profile.isa!r}; known: {', '.join(ISAS)}")
    for i, feature in enumerate(profile.features):
        if feature not in FEATURES:
            raise AutoconfigError(f"field 'features[{i}]': unknown feature {feature!r}")
    if profile.bandwidth is not None:
        for kind in ("single_thread", "all_threads"):
            bw = getattr(profile.bandwidth, kind)
            for key in (*bw.levels, *bw.knees):
                if key not in LEVELS:
                    raise AutoconfigError(f"field 'bandwidth.{kind}': unknown level {key!r}")
    if not profile.fma:
        raise AutoconfigError("field 'fma': at least one vector width is required")
    _check_ranges(profile, "")
    _check_meaning(profile)
    return profile


WHOLE_UNITS = ("count", "B", "bit")
"""Units of figures that count things: a fraction of a core or a byte is nonsense."""

VECTOR_BITS = {"x86_64": (128, 256, 512), "aarch64": (128,), "riscv64": (128, 256, 512, 1024, 2048, 4096)}
"""Register widths each ISA has: SSE/AVX/AVX-512; NEON (SVE adds 256-2048); RVV VLEN
from the V extension's minimum of 128."""

SVE_BITS = (128, 256, 512, 1024, 2048)

CACHE_KINDS = ("data", "instruction", "unified")

VECTOR_OPS_PER_NS = (1e-3, 64.0)
"""Vector FMAs or loads one hardware thread completes per ns: above one per µs (slower
than any emulator), at most 16 pipes at 4 GHz (more than any core has). The models
divide by these rates and raise them to powers: outside this range a mistyped
figure overflowed them instead of being refused."""

FMA_LATENCY_NS = (1e-2, 1e3)
"""A dependent vector FMA's latency: from a cycle at 100 GHz to 1 µs."""


def _check_ranges(x: Any, path: str) -> None:
    """Every figure anywhere in the profile is a finite positive number (each is a size,
    a count, a rate or a time), whole where it counts things."""
    if isinstance(x, Figure):
        value = float(x.value)
        if not math.isfinite(value) or value <= 0:
            raise AutoconfigError(f"field '{path}': must be a finite positive number, got {x.value!r}")
        if x.unit in WHOLE_UNITS and value != int(value):
            raise AutoconfigError(f"field '{path}': must be a whole number of {x.unit}, got {x.value!r}")
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            _check_ranges(getattr(x, f.name), _join(path, f.name))
    elif isinstance(x, tuple):
        for i, item in enumerate(x):
            _check_ranges(item, f"{path}[{i}]")
    elif isinstance(x, dict):
        for key, item in x.items():
            _check_ranges(item, _join(path, key))


def _check_meaning(profile: HardwareProfile) -> None:
    """What a machine can be: as many hardware threads as cores at least, vector widths
    the ISA has, FMA figures for widths the registers hold, a cache line of a power of
    two bytes, data caches growing level by level."""
    cores, threads = int(profile.cores), int(profile.threads)
    if threads < cores:
        raise AutoconfigError(f"field 'threads': {threads} hardware threads for {cores} cores")
    allowed = VECTOR_BITS[profile.isa] + (SVE_BITS if "sve" in profile.features else ())
    bits = int(profile.vector.bits)
    if bits not in allowed:
        raise AutoconfigError(f"field 'vector.bits': {profile.isa} has no {bits}-bit vectors "
                              f"({', '.join(map(str, sorted(set(allowed))))})")  # fmt: skip
    widths = [f.vector_bits for f in profile.fma]
    for i, width in enumerate(widths):
        if width < 128 or width > bits or width & (width - 1):
            raise AutoconfigError(f"field 'fma[{i}].vector_bits': {width} is not a power-of-two width "
                                  f"from 128 to the registers' {bits} bits")  # fmt: skip
        if width in widths[:i]:
            raise AutoconfigError(f"field 'fma[{i}].vector_bits': {width} bits appears twice")
    for i, fma in enumerate(profile.fma):
        for name, low, high in (("latency", *FMA_LATENCY_NS), ("throughput", *VECTOR_OPS_PER_NS),
                                ("throughput_all", VECTOR_OPS_PER_NS[0], VECTOR_OPS_PER_NS[1] * threads),
                                ("loads", *VECTOR_OPS_PER_NS), ("broadcasts", *VECTOR_OPS_PER_NS)):  # fmt: skip
            figure = getattr(fma, name)
            if figure is not None and not low <= float(figure) <= high:
                raise AutoconfigError(f"field 'fma[{i}].{name}': {float(figure):g} {figure.unit} is not a figure "
                                      f"a machine has (from {low:g} to {high:g})")  # fmt: skip
    if profile.bandwidth is not None:
        for kind in ("single_thread", "all_threads"):
            if getattr(profile.bandwidth, kind).threads < 1:
                raise AutoconfigError(f"field 'bandwidth.{kind}.threads': must be >= 1")
    for i, cache in enumerate(profile.caches):
        if cache.level < 1:
            raise AutoconfigError(f"field 'caches[{i}].level': must be >= 1, got {cache.level}")
        line = int(cache.line)
        if line & (line - 1):
            raise AutoconfigError(f"field 'caches[{i}].line': {line} B is not a power of two")
        if cache.kind not in CACHE_KINDS:
            raise AutoconfigError(f"field 'caches[{i}].kind': expected one of {', '.join(CACHE_KINDS)}, "
                                  f"got {cache.kind!r}")  # fmt: skip
    data = sorted((c.level, int(c.size), i) for i, c in enumerate(profile.caches) if c.kind != "instruction")
    previous = 0
    for level, size, i in data:
        if size <= previous:
            raise AutoconfigError(f"field 'caches[{i}].size': L{level} of {size} B is not larger than "
                                  f"the level below it ({previous} B)")  # fmt: skip
        previous = size



def _decode(tp: Any, data: Any, path: str, expected_unit: str | None = None) -> Any:
    """Decode `data` as type `tp` (dataclass, Figure, scalar, tuple, dict, optional)."""
    def where(sub: str = "") -> str:
        full = f"{path}.{sub}" if path and sub else path or sub
        return f"field '{full}'" if full else "profile"

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if data is None else _decode(options[0], data, path, expected_unit)
    if tp is Figure:
        if not isinstance(data, dict) or set(data) != {"value", "unit", "source"}:
            raise AutoconfigError(f"{where()}: expected {{value, unit, source}}, got {data!r}")
        value = data["value"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise AutoconfigError(f"{where('value')}: expected a number, got {value!r}")
        if expected_unit is not None and data["unit"] != expected_unit:
            raise AutoconfigError(f"{where('unit')}: expected {expected_unit!r}, got {data['unit']!r}")
        if data["source"] not in SOURCES:
            raise AutoconfigError(
                f"{where('source')}: expected one of {', '.join(SOURCES)}, got {data['source']!r}"
            )
        return Figure(value, data["unit"], data["source"])
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise AutoconfigError(f"{where()}: expected a mapping, got {type(data).__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp)}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise AutoconfigError(f"field '{_join(path, unknown[0])}': not part of the schema")
        values = {}
        for name, f in fields.items():
            if name not in data:
                if f.default is not dataclasses.MISSING:  # an optional field
                    continue
                raise AutoconfigError(f"field '{_join(path, name)}' is missing")
            values[name] = _decode(hints[name], data[name], _join(path, name), f.metadata.get("unit"))
        return tp(**values)
    if origin is tuple:
        if not isinstance(data, list):
            raise AutoconfigError(f"{where()}: expected a list, got {type(data).__name__}")
        item = typing.get_args(tp)[0]
        return tuple(_decode(item, x, f"{path}[{i}]") for i, x in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise AutoconfigError(f"{where()}: expected a mapping, got {type(data).__name__}")
        _, item = typing.get_args(tp)
        return {str(k): _decode(item, v, _join(path, str(k)), expected_unit) for k, v in data.items()}
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
        raise AutoconfigError(f"{where()}: expected {tp.__name__}, got {data!r}")
    return data


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---------------------------------------------------------------- encoding


def profile_to_dict(profile: HardwareProfile) -> dict[str, Any]:
    """Plain data for YAML: tuples become lists, figures become mappings."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (tuple, list)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    return plain(profile)


def save_profile(profile: HardwareProfile, path: Path | str, make_parents: bool = False) -> None:
    """Write the profile as YAML, atomically (see fileio for the directory rule)."""
    text = yaml.safe_dump(profile_to_dict(profile), sort_keys=False, width=100)
    write_atomically(Path(path), f"# autoconfig hardware profile, schema {SCHEMA_VERSION}\n{text}", make_parents)


# ---------------------------------------------------------------- summary


def summary(profile: HardwareProfile) -> str:
    """A short human summary: peak GFLOP/s per core and total, bandwidth per level."""
    cores = int(profile.cores)
    freq = f", {float(profile.frequency):.2f} GHz" if profile.frequency else ""
    lines = [
        f"{profile.model} ({profile.isa}, {cores} cores{freq}, "
        f"{int(profile.vector.bits)}-bit vectors x {int(profile.vector.registers)})",
    ]
    caches = ", ".join(
        f"L{c.level} {_bytes(int(c.size))} {int(c.ways)}-way"
        for c in profile.caches
        if c.kind != "instruction"
    )
    lines.append(f"  caches: {caches}")
    for f in sorted(profile.fma, key=lambda f: f.vector_bits):
        lines.append(
            f"  f32 FMA {f.vector_bits:>3}-bit: peak {f.peak_gflops:6.1f} GFLOP/s per core, "
            f"{f.peak_gflops_all:6.1f} total; latency {float(f.latency):.2f} ns, "
            f"{f.in_flight:.1f} FMAs in flight  [{f.throughput.source}]"
        )
    if profile.bandwidth is not None:
        for kind in ("single_thread", "all_threads"):
            bw = getattr(profile.bandwidth, kind)
            levels = "  ".join(f"{k} {float(v):.1f}" for k, v in bw.levels.items())
            lines.append(f"  load GB/s, {bw.threads} thread{'s' * (bw.threads > 1)}: {levels}")
    return "\n".join(lines)


def _bytes(n: int) -> str:
    for suffix, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {suffix}"
    return f"{n} B"
