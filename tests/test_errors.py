"""Every bad input is one error line naming its cause, exit status 2, before any probe.

The cases are tables: a new command or operator adds rows. A property test mutates a
good profile at random: each mutation loads and predicts within the profile's peak,
or is refused with an AutoconfigError — never another exception.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import autoconfig.probe
from autoconfig import compile_matmul, plan_matmul
from autoconfig.cli import main
from autoconfig.errors import AutoconfigError
from autoconfig.machine import Machine
from autoconfig.profile import load_profile, profile_from_dict
from kernels import matmul as mm

PROFILES = Path(__file__).parent.parent / "hwprofiles"
GOOD = PROFILES / "amd-epyc.yaml"  # x86-64, 2 cores, AVX2
RISCV = PROFILES / "spacemit-k1-x60.yaml"
GOOD_MLIR = "func.func @f() {\n  return\n}\n"


@pytest.fixture(autouse=True)
def no_probe(monkeypatch):
    """Bad input must be refused before anything is measured."""

    def refuse(*args, **kwargs):
        raise AssertionError("a probe started")

    monkeypatch.setattr(autoconfig.probe, "probe", refuse)


def good_data() -> dict:
    return yaml.safe_load(GOOD.read_text())


def set_path(data: dict, path: str, value) -> dict:
    """A copy of `data` with the field at dotted `path` (list items as [i]) set to `value`."""
    data = copy.deepcopy(data)
    keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    node = data
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return data


def profile_file(tmp_path: Path, path: str, value) -> str:
    out = tmp_path / "profile.yaml"
    out.write_text(yaml.safe_dump(set_path(good_data(), path, value)))
    return str(out)


# (what is wrong, field path, bad value, message fragment)
BAD_PROFILES = [
    ("negative cores", "cores.value", -2, "field 'cores'"),
    ("zero cores", "cores.value", 0, "field 'cores'"),
    ("fractional cores", "cores.value", 1.5, "whole number"),
    ("zero cache ways", "caches[0].ways.value", 0, "field 'caches[0].ways'"),
    ("NaN latency", "fma[0].latency.value", float("nan"), "field 'fma[0].latency'"),
    ("zero FMA throughput", "fma[1].throughput.value", 0, "field 'fma[1].throughput'"),
    ("200-bit vectors", "vector.bits.value", 200, "no 200-bit vectors"),
    ("FMA wider than the registers", "fma[1].vector_bits", 512, "fma[1].vector_bits"),
    ("unknown bandwidth unit", "bandwidth.single_thread.levels.L1.unit", "MB/s", "expected 'GB/s'"),
    ("unknown knee unit", "bandwidth.all_threads.knees.L1.unit", "KiB", "expected 'B'"),
    ("L2 smaller than L1", "caches[2].size.value", 16384, "not larger"),
    ("fewer threads than cores", "threads.value", 1, "hardware threads for"),
    ("line not a power of two", "caches[0].line.value", 48, "not a power of two"),
    ("text where a name goes", "name", 17, "field 'name'"),
]


@pytest.mark.parametrize("path, value, fragment", [row[1:] for row in BAD_PROFILES],
                         ids=[row[0] for row in BAD_PROFILES])  # fmt: skip
def test_nonsense_profiles_are_refused_naming_the_field(tmp_path, capsys, path, value, fragment):
    bad = profile_file(tmp_path, path, value)
    assert main(["explain", "matmul", "64", "64", "64", "--profile", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err


def bytes_file(tmp_path: Path, name: str) -> str:
    out = tmp_path / name
    out.write_bytes(bytes(range(128, 256)) * 4)
    return str(out)


def text_file(tmp_path: Path, name: str, text: str) -> str:
    out = tmp_path / name
    out.write_text(text)
    return str(out)


# (what is wrong, argv builder given tmp_path, message fragment)
BAD_COMMANDS = [
    ("zero size", lambda t: ["explain", "matmul", "0", "5", "5", "--profile", str(GOOD)], "M=0"),
    ("size before a broken AUTOCONFIG_PROFILE", lambda t: ["explain", "matmul", "0", "5", "5"], "M=0"),
    ("threads beyond the cores", lambda t: ["explain", "matmul", "64", "64", "64", "--profile", str(GOOD),
                                            "--threads", "1000"], "threads=1000, but profile amd-epyc has 2 cores"),
    ("zero threads", lambda t: ["explain", "matmul", "64", "64", "64", "--profile", str(GOOD), "--threads", "0"],
     "threads=0"),
    ("unknown target before any probe", lambda t: ["explain", "matmul", "8", "8", "8", "--target", "avx1024"],
     "unknown target 'avx1024'"),
    ("RISC-V profile for AVX2 code", lambda t: ["explain", "matmul", "64", "64", "64", "--profile", str(RISCV),
                                                "--target", "avx2"], "describes riscv64 hardware"),
    ("datasheet profile for another ISA", lambda t: ["explain", "matmul", "64", "64", "64", "--profile", str(RISCV),
                                                     "--target", "neon"], "generates aarch64 code"),
    ("profile of random bytes", lambda t: ["explain", "matmul", "8", "8", "8", "--profile",
                                           bytes_file(t, "p.yaml")], "is not UTF-8 text"),
    ("profile that is a directory", lambda t: ["profile", "show", str(t)], "it is a directory"),
    ("missing profile", lambda t: ["profile", "show", str(t / "none.yaml")], "cannot read profile"),
    ("MLIR of random bytes", lambda t: ["lower", bytes_file(t, "k.mlir"), "--target", "avx2"], "is not UTF-8 text"),
    ("output is a directory", lambda t: ["lower", text_file(t, "k.mlir", GOOD_MLIR), "--target", "avx2", "-o", str(t)],
     "it is a directory"),
    ("output in a missing directory", lambda t: ["lower", text_file(t, "k.mlir", GOOD_MLIR), "--target", "avx2",
                                                 "-o", str(t / "no" / "k.s")], "does not exist"),
    ("zoo into a missing directory", lambda t: ["zoo", "mobilenet_v1", "--out", str(t / "no" / "m.onnx")],
     "does not exist"),
]  # fmt: skip


@pytest.mark.parametrize("argv, fragment", [row[1:] for row in BAD_COMMANDS], ids=[row[0] for row in BAD_COMMANDS])
def test_bad_commands_are_one_line_exit_2(tmp_path, capsys, monkeypatch, argv, fragment):
    monkeypatch.setenv("AUTOCONFIG_PROFILE", bytes_file(tmp_path, "broken.yaml"))
    assert main(argv(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err
    assert not list(tmp_path.glob("**/.*.tmp"))  # nothing half-written


def test_an_internal_error_is_one_line_with_the_way_to_its_traceback(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("autoconfig.matmul.choose", broken)
    assert main(["explain", "matmul", "8", "8", "8", "--profile", str(GOOD)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError" in err and "AUTOCONFIG_DEBUG=1" in err
    monkeypatch.setenv("AUTOCONFIG_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["explain", "matmul", "8", "8", "8", "--profile", str(GOOD)])


# (what is wrong, keyword arguments of plan_matmul/compile_matmul, message fragment)
BAD_API_CALLS = [
    ("float size", {"m": 4.0, "n": 5, "k": 6}, "M=4.0: must be a positive integer, not float"),
    ("bool size", {"m": 4, "n": True, "k": 6}, "N=True"),
    ("negative size", {"m": 4, "n": 5, "k": -6}, "K=-6: must be >= 1"),
    ("zero threads", {"m": 4, "n": 5, "k": 6, "threads": 0}, "threads=0"),
    ("negative threads", {"m": 4, "n": 5, "k": 6, "threads": -3}, "threads=-3"),
    ("threads beyond the cores", {"m": 4, "n": 5, "k": 6, "threads": 3}, "threads=3, but profile amd-epyc has 2"),
    ("another ISA's target", {"m": 4, "n": 5, "k": 6, "target": "neon"}, "describes x86_64 hardware"),
]


@pytest.mark.parametrize("call", [plan_matmul, compile_matmul], ids=["plan", "compile"])
@pytest.mark.parametrize("kwargs, fragment", [row[1:] for row in BAD_API_CALLS], ids=[row[0] for row in BAD_API_CALLS])
def test_bad_api_arguments_are_refused(call, kwargs, fragment):
    options = dict(kwargs)  # the table's row is shared by both calls
    sizes = [options.pop(d) for d in ("m", "n", "k")]
    with pytest.raises(AutoconfigError, match=fragment):
        call(*sizes, profile=GOOD, **options)


def test_numpy_integer_sizes_and_threads_are_sizes():
    f = compile_matmul(np.int64(4), np.int32(5), np.uint16(6), profile=GOOD, threads=np.int64(2))
    a, b = np.ones((4, 6), np.float32), np.ones((6, 5), np.float32)
    np.testing.assert_array_equal(f(a, b), np.full((4, 5), 6, np.float32))


def test_accumulating_into_an_input_is_refused():
    config = mm.MatmulConfig(mm.MatmulShape(8, 8, 8), "tiled", 8, mr=2, nv=1, accumulate=True)
    f = compile_matmul(8, 8, 8, profile=GOOD, config=config)
    a, b = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    with pytest.raises(AutoconfigError, match="C overlaps A"):
        f(a, b, a)
    with pytest.raises(AutoconfigError, match="C overlaps B"):
        f(a, b, b)
    c = np.zeros((8, 8), np.float32)
    f(a, b, c)
    np.testing.assert_array_equal(c, np.full((8, 8), 8, np.float32))


def test_a_matmul_writes_into_out_when_given():
    f = compile_matmul(8, 16, 8, profile=GOOD)
    a, b = np.ones((8, 8), np.float32), np.ones((8, 16), np.float32)
    c = np.zeros((8, 16), np.float32)
    assert f(a, b, out=c) is c
    np.testing.assert_array_equal(c, np.full((8, 16), 8, np.float32))
    for bad in (np.zeros((16, 8), np.float32), np.zeros((8, 16)), np.zeros((16, 8), np.float32).T):
        with pytest.raises(AutoconfigError, match="out must be a writeable C-contiguous float32 array"):
            f(a, b, out=bad)
    with pytest.raises(AutoconfigError, match="C overlaps B"):
        f(a, b, out=b[:, :16])
    config = mm.MatmulConfig(mm.MatmulShape(8, 8, 8), "tiled", 8, mr=2, nv=1, accumulate=True)
    with pytest.raises(AutoconfigError, match="no out="):
        compile_matmul(8, 8, 8, profile=GOOD, config=config)(a, a, c[:, :8].copy(), out=c)


SHAPES = [(1, 1, 1), (1, 1000, 1024), (64, 64, 64), (196, 512, 512), (1024, 1024, 1024), (12544, 64, 32)]


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.yaml")), ids=lambda p: p.stem)
def test_no_prediction_above_the_profiles_measured_peak(path):
    profile = load_profile(path)
    machine = Machine.of(profile)
    for threads in sorted({1, 2, int(profile.cores)} & set(range(1, int(profile.cores) + 1))):
        peak = machine.peak_gflops(threads)
        for m, n, k in SHAPES:
            best = plan_matmul(m, n, k, profile=profile, threads=threads).best
            assert best.gflops <= peak * (1 + 1e-9), (path.stem, threads, (m, n, k), best.gflops, peak)


def leaf_paths(data, prefix: str = "") -> list[str]:
    """Dotted paths of every scalar in `data`."""
    if isinstance(data, dict):
        return [p for k, v in data.items() for p in leaf_paths(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(data, list):
        return [p for i, v in enumerate(data) for p in leaf_paths(v, f"{prefix}[{i}]")]
    return [prefix]


GOOD_DATA = yaml.safe_load(GOOD.read_text())
LEAVES = leaf_paths(GOOD_DATA)
VALUES = st.one_of(  # plausible numbers often, so that many mutants load and reach the model
    st.integers(1, 64), st.floats(1e-3, 1e6), st.sampled_from([128, 256, 512, 64 << 10]),
    st.integers(-10, 10), st.integers(1, 1 << 40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "GB/s", "B", "count", "measured", "avx2", "data", "x86_64"]), st.none(),
    st.booleans(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(LEAVES), VALUES), min_size=1, max_size=3))
@example([("fma[0].throughput.value", 2.362967632106873e-92)])  # once overflowed the matmul model
@example([("fma[0].throughput.value", 1.441151880758559e17)])  # once divided by zero in it
def test_mutated_profiles_load_and_predict_or_are_refused(mutations):
    data = GOOD_DATA
    for path, value in mutations:
        data = set_path(data, path, value)
    try:
        profile = profile_from_dict(data)
        best = plan_matmul(48, 40, 24, profile=profile, target="avx2").best
    except AutoconfigError as err:
        assert "\n" not in str(err)
        return
    assert math.isfinite(best.total_ns) and best.total_ns > 0
    assert best.gflops <= Machine.of(profile).peak_gflops(best.plan.threads) * (1 + 1e-9)


def test_a_host_profile_of_another_machine_is_not_used(tmp_path, monkeypatch, capsys):
    """A profile found by the CPU's name is used only if ISA, features and cores agree;
    otherwise a one-line warning and a quick probe. $AUTOCONFIG_PROFILE: an error."""
    from dataclasses import replace

    profile = load_profile(GOOD)
    host = autoconfig.probe.StaticInfo(profile.model, profile.isa, profile.features, int(profile.cores),
                                       int(profile.threads), None, 256, 16, False, profile.caches)  # fmt: skip
    monkeypatch.setattr(autoconfig.probe, "read_host_static", lambda: host)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("AUTOCONFIG_PROFILE", raising=False)
    (tmp_path / "hwprofiles").mkdir()
    found = autoconfig.probe.default_profile_path(profile.model)
    found.write_text(GOOD.read_text())
    assert autoconfig.probe.host_profile(progress=False) == profile  # agrees: used as it is

    bigger = replace(host, cores=64, threads=64)
    monkeypatch.setattr(autoconfig.probe, "read_host_static", lambda: bigger)
    monkeypatch.setattr(autoconfig.probe, "probe", lambda quick, progress: profile)
    autoconfig.probe.host_profile(progress=False)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "2 cores, this machine 64" in err and "probing this one" in err
    assert (tmp_path / "cache" / "autoconfig" / found.name).exists()  # the fresh probe is cached

    monkeypatch.setenv("AUTOCONFIG_PROFILE", str(GOOD))
    with pytest.raises(AutoconfigError, match="does not describe this machine: 2 cores, this machine 64"):
        autoconfig.probe.host_profile(progress=False)
