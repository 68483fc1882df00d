"""The benchmark harness (scripts/harness.py) and the validation script's saved
measurements: each peer in its own process with its own thread settings and CPUs,
statistics, JSON round trips. Nothing here is timed: only where and how runs happen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bench"
sys.path.insert(0, str(SCRIPTS))

import harness  # noqa: E402
import validate_matmul_model as validate  # noqa: E402

from autoconfig.profile import load_profile  # noqa: E402
from autoconfig.resolve import target_for_profile  # noqa: E402
from kernels import matmul as mm  # noqa: E402

PROFILES = Path(__file__).resolve().parent.parent / "hwprofiles"


@pytest.fixture
def fixture_module(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES))
    monkeypatch.syspath_prepend(str(FIXTURES))
    return "peer_report"


def test_each_peer_runs_in_its_own_fresh_process_per_round(fixture_module: str) -> None:
    tasks = [{"name": "a"}, {"name": "b"}]
    timed = harness.measure(fixture_module, ["first", "second"], tasks, 1, rounds=2, reps=2, pin=False,
                            progress=False)  # fmt: skip
    first, second = ([row["info"] for row in timed[p]] for p in ("first", "second"))
    assert first[0]["pid"] == first[1]["pid"]  # one process times all of a round's tasks
    assert first[0]["pid"] != second[0]["pid"] != os.getpid()
    assert timed["first"][0]["timing"]["samples"] == 4  # two rounds of two samples, pooled
    assert len(timed["first"][0]["rounds"]) == 2  # and each round's median kept apart
    assert timed["second"][0]["versions"] == {"peer": "second"}


def test_thread_count_goes_through_each_peers_own_control(fixture_module: str) -> None:
    timed = harness.measure(fixture_module, ["first", "second"], [{"name": "a"}], 2, rounds=1, reps=1, pin=False,
                            progress=False)  # fmt: skip
    first, second = timed["first"][0]["info"], timed["second"][0]["info"]
    assert (first["omp"], first["openblas"]) == ("2", "1")  # numpy's OpenBLAS only helps: one thread
    assert (second["omp"], second["openblas"]) == ("2", "2")  # the module's own override


def test_pinning_gives_every_peer_the_same_first_cpus(fixture_module: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    timed = harness.measure(fixture_module, ["first", "second"], [{"name": "a"}], 1, rounds=1, reps=1, pin=True,
                            progress=False)  # fmt: skip
    assert timed["first"][0]["info"]["cpus"] == timed["second"][0]["info"]["cpus"] == cpus[:1]
    assert harness.worker_cpus(1, pin=False) is None


def test_a_peer_can_run_under_its_own_interpreter(fixture_module: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    other = tmp_path / "other-python"
    other.symlink_to(sys.executable)
    monkeypatch.setenv("PEER_PYTHON", str(other))
    timed = harness.measure(fixture_module, ["first", "second"], [{"name": "a"}], 1, rounds=1, reps=1, pin=False,
                            progress=False)  # fmt: skip
    assert timed["second"][0]["info"]["python"] == str(other)
    assert timed["first"][0]["info"]["python"] != str(other)


def test_summary_statistics() -> None:
    timing = harness.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (timing.median, timing.q1, timing.q3, timing.samples) == (3.0, 2.0, 4.0, 5)
    assert timing.spread == pytest.approx(1 / 3)
    assert harness.summarize([2.0]).median == 2.0


def test_report_json_is_written_whole(tmp_path: Path) -> None:
    report = harness.Report("bench_x", "some-profile", settings={"rounds": 1})
    report.tables.append({"threads": 1, "rows": [{"name": "a", "gflops": {"ours": 1.5}}]})
    path = tmp_path / "out.json"
    report.save(path)
    data = json.loads(path.read_text())
    assert data["profile"] == "some-profile" and data["host"]["cpus"] >= 1
    assert data["tables"][0]["rows"][0]["gflops"]["ours"] == 1.5
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_heading_keeps_versions_and_names_a_forced_blas_kernel(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:  # fmt: skip
    """A variable forcing OpenBLAS's kernel is recorded and said in the heading; without
    one the heading says nothing of it. The versions a heading names reach the JSON."""
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    forced = harness.Report("bench_x", "p")
    assert "OPENBLAS_CORETYPE=Haswell" in forced.heading(2, {"openblas": {"openblas": "0.3 (Haswell)"}})
    forced.save(tmp_path / "forced.json")
    data = json.loads((tmp_path / "forced.json").read_text())
    assert data["host"]["overrides"] == {"OPENBLAS_CORETYPE": "Haswell"}
    assert data["versions"] == {"2": {"openblas": {"openblas": "0.3 (Haswell)"}}}
    assert "forces" not in forced.heading(1, {"onnxruntime": {"onnxruntime": "1.31"}})  # no OpenBLAS peer
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert "forces" not in harness.Report("bench_x", "p").heading(1, {"openblas": {"openblas": "0.3"}})


def test_saved_measurements_round_trip_and_rescore(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Saved times come back as the same configurations; scoring names the model's pick
    and its regret against the saved best, or a stand-in when the pick was not saved."""
    profile = load_profile(PROFILES / "intel-xeon-platinum-8380.yaml")
    target = target_for_profile(profile)
    shape = mm.MatmulShape(96, 80, 64)
    configs = validate.grid(shape, profile, target)[:6]
    times = {c: 1e-5 * (i + 1) for i, c in enumerate(configs)}
    args = type("Args", (), {"processes": 1, "passes": 1, "reps": 1})()
    path = tmp_path / "measured.json"
    validate.save(str(path), {"one": (shape, times)}, profile, target, args)
    measured, data = validate.load(str(path))
    assert measured == {"one": (shape, times)}
    assert data["target"] == target.name and data["host"]["model_name"] is not None
    validate.score(measured, profile, target, list_all=False)
    out = capsys.readouterr().out
    assert "regret" in out and "one" in out
    pick = validate.choose(shape, profile, target, threads=1).best.config
    assert (pick in times) != ("not among the saved" in out)


@pytest.mark.slow
def test_validation_takes_each_configuration_over_fresh_processes(tmp_path: Path) -> None:
    """--processes 2: two runs of the script, each timing the grid in its own process;
    the saved file has every configuration of the grid (and the model's pick) with a
    time, and says how it was measured."""
    path = tmp_path / "measured.json"
    done = subprocess.run([sys.executable, str(SCRIPTS / "validate_matmul_model.py"), "--profile",
                           str(PROFILES / "amd-epyc.yaml"), "--shape", "3", "5", "7", "--processes", "2",
                           "--reps", "1", "--save", str(path)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("timed") == 2 and "median over 2 processes" in done.stdout
    measured, data = validate.load(str(path))
    (shape, times), = measured.values()
    profile = load_profile(PROFILES / "amd-epyc.yaml")
    target = target_for_profile(profile)
    assert set(validate.grid(shape, profile, target)) <= set(times) and all(t > 0 for t in times.values())
    assert data["settings"]["processes"] == 2


def test_load_rejects_a_file_of_another_format(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(SystemExit, match="expected .autoconfig-matmul-validation/1"):
        validate.load(str(path))


def test_two_builds_are_compared_block_by_block(tmp_path: Path) -> None:
    """compare_builds.py alternates blocks of calls of a dp and a greedy build of one
    model and reports the ratio of every block pair; builds of different inputs are
    refused."""
    import autoconfig
    from autoconfig.graph import zoo

    b = zoo.Builder("tiny", 3)
    model = b.model("input", [1, 8, 6, 6], [(b.cba(b.cba("input", 8, 8, 3), 8, 8, 1), [1, 8, 6, 6])])
    path = tmp_path / "tiny.onnx"
    path.write_bytes(model.SerializeToString())
    for fusion in ("dp", "greedy"):
        autoconfig.compile_model(path, tmp_path / fusion, profile=PROFILES / "amd-epyc.yaml", target="avx2",
                                 fusion=fusion)  # fmt: skip
    script = [sys.executable, str(SCRIPTS / "compare_builds.py")]
    done = subprocess.run([*script, str(tmp_path / "dp"), str(tmp_path / "greedy"), "--blocks", "3", "--block-ms",
                           "1"], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "3 blocks of" in done.stdout and "A faster in" in done.stdout and "of 3," in done.stdout
    small = zoo.Builder("small", 3)
    other = small.model("input", [1, 8, 5, 5], [(small.op("Relu", ["input"]), [1, 8, 5, 5])])
    (tmp_path / "other.onnx").write_bytes(other.SerializeToString())
    autoconfig.compile_model(tmp_path / "other.onnx", tmp_path / "other", profile=PROFILES / "amd-epyc.yaml",
                             target="avx2")  # fmt: skip
    refused = subprocess.run([*script, str(tmp_path / "dp"), str(tmp_path / "other")], capture_output=True, text=True)
    assert refused.returncode == 1 and "different inputs" in refused.stderr
