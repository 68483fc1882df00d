"""The profile schema: round trip, the shipped profiles, and one-line rejections."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from autoconfig.cli import main
from autoconfig.errors import AutoconfigError
from autoconfig.profile import load_profile, profile_from_dict, profile_to_dict, summary

HWPROFILES = sorted((Path(__file__).parent.parent / "hwprofiles").glob("*.yaml"))
DATASHEET = Path(__file__).parent.parent / "hwprofiles" / "intel-core-i7-8700.yaml"


@pytest.fixture()
def good() -> dict:
    return yaml.safe_load(DATASHEET.read_text())


def test_shipped_profiles_cover_the_four_isas():
    profiles = [load_profile(p) for p in HWPROFILES]
    by_isa = {(p.isa, int(p.vector.bits)) for p in profiles}
    assert {("x86_64", 256), ("x86_64", 512), ("aarch64", 128), ("riscv64", 256)} <= by_isa
    for p in profiles:
        if p.fma[0].latency.source == "datasheet":
            assert p.references, f"{p.name}: datasheet figures need their public sources"


@pytest.mark.parametrize("path", HWPROFILES, ids=lambda p: p.stem)
def test_profiles_round_trip_and_summarize(path):
    profile = load_profile(path)
    assert profile_from_dict(profile_to_dict(profile)) == profile
    text = summary(profile)
    assert "GFLOP/s per core" in text and "load GB/s" in text


def _without(data: dict, dotted: str) -> dict:
    data = copy.deepcopy(data)
    *parents, leaf = dotted.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    del node[leaf]
    return data


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: _without(d, "caches.0.ways"), "field 'caches[0].ways' is missing"),
        (lambda d: {**d, "cores": "six"}, "field 'cores': expected {value, unit, source}"),
        (lambda d: {**d, "isa": "mips64"}, "field 'isa': unknown ISA 'mips64'"),
        (lambda d: {**d, "schema_version": 99}, "field 'schema_version': unknown schema version 99"),
        (lambda d: {**d, "features": ["avx2", "3dnow"]}, "field 'features[1]': unknown feature"),
        (lambda d: {**d, "frequency": {"value": 3.2, "unit": "MHz", "source": "datasheet"}},
         "field 'frequency.unit': expected 'GHz'"),
        (lambda d: {**d, "threads": {"value": True, "unit": "count", "source": "static"}},
         "field 'threads.value': expected a number"),
        (lambda d: {**d, "turbo": 1}, "field 'turbo': not part of the schema"),
    ],
)  # fmt: skip
def test_bad_profiles_are_rejected_naming_the_field(good, change, message):
    with pytest.raises(AutoconfigError) as err:
        profile_from_dict(change(good))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_rejects_a_bad_profile_in_one_line(good, tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**good, "isa": "sparc"}))
    assert main(["profile", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown ISA 'sparc'" in err and str(path) in err


def test_cli_shows_a_profile(capsys):
    assert main(["profile", "show", str(DATASHEET)]) == 0
    assert "Intel Core i7-8700" in capsys.readouterr().out
