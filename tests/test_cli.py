"""The command line: help, version, targets, demo, lower, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoconfig import __version__
from autoconfig.cli import main
from autoconfig.probe.host import named_target

GOOD_MLIR = """
func.func @scale(%m: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %v = vector.load %m[%c0] : memref<16xf32>, vector<16xf32>
  %w = arith.mulf %v, %v : vector<16xf32>
  vector.store %w, %m[%c0] : memref<16xf32>, vector<16xf32>
  return
}
"""


def autoconfig(*args: str) -> subprocess.CompletedProcess:
    """Run the CLI as a user would, in a fresh interpreter."""
    command = [sys.executable, "-m", "autoconfig.cli", *args]
    return subprocess.run(command, capture_output=True, text=True)


def test_version_and_help():
    assert autoconfig("--version").stdout.strip() == f"autoconfig {__version__}"
    help_text = autoconfig("--help").stdout
    for command in ("targets", "demo", "lower"):
        assert command in help_text


def test_targets_lists_every_isa_and_how_it_runs():
    done = autoconfig("targets")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    for name in ("avx2", "avx512", "neon", "rvv"):
        row = next(line for line in lines if line.startswith(name + " "))
        assert any(word in row for word in ("native", "emulated", "no:"))
    assert lines[-1].startswith("host = ")


def test_unknown_target_is_one_line_exit_2(tmp_path):
    source = tmp_path / "k.mlir"
    source.write_text(GOOD_MLIR)
    done = autoconfig("lower", str(source), "--target", "sse9")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "unknown target 'sse9'" in done.stderr
    assert "Traceback" not in done.stderr


def test_invalid_mlir_is_one_line_exit_2(tmp_path):
    source = tmp_path / "bad.mlir"
    source.write_text(GOOD_MLIR.replace("arith.mulf %v, %v", "arith.mulf %v, %c0"))
    done = autoconfig("lower", str(source), "--target", "avx2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "invalid MLIR in " in done.stderr and "bad.mlir:" in done.stderr


@pytest.mark.parametrize("args, says", [(["--peers", "onnxruntime,tvm"], "unknown peer 'tvm'; known: onnxruntime, "
                                                                        "openvino"),
                                        (["--runs", "0"], "--runs must be >= 1"), ([], "no such file")])
def test_bench_refuses_bad_arguments_before_building(tmp_path, args, says):
    done = autoconfig("bench", str(tmp_path / "absent.onnx"), *args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr


def test_missing_input_file_is_one_line_exit_2(tmp_path):
    done = autoconfig("lower", str(tmp_path / "absent.mlir"), "--target", "avx2")
    assert done.returncode == 2 and "cannot read" in done.stderr


def test_lower_writes_the_object_and_nothing_else(tmp_path):
    source = tmp_path / "k.mlir"
    source.write_text(GOOD_MLIR)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "k.o"
    assert main(["lower", str(source), "--target", "avx512", "--emit", "obj", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert sorted(p.name for p in out.parent.iterdir()) == ["k.o"]
    assert out.stat().st_mode & 0o777 == 0o666 & ~current_umask()  # as a shell redirection makes it


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_lower_prints_assembly(tmp_path, capsys):
    source = tmp_path / "k.mlir"
    source.write_text(GOOD_MLIR)
    assert main(["lower", str(source), "--target", "avx512"]) == 0
    assert "zmm" in capsys.readouterr().out


def test_targets_run_checks_the_host_target():
    host = named_target("host")
    done = autoconfig("targets", "--run", "--target", host.name, "--n", "100")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(host.name) and done.stdout.rstrip().endswith(")")
    assert " ok " in done.stdout


@pytest.mark.parametrize("args", [["targets", "--run", "--n", "-1"], ["targets", "--vlen", "96"], ["demo", "--bench", "0"]])
def test_bad_numbers_are_one_line_exit_2(args):
    done = autoconfig(*args)
    assert done.returncode == 2 and done.stderr.count("\n") == 1


@pytest.mark.slow
def test_zoo_and_fuse(tmp_path):
    out = tmp_path / "mobilenet.onnx"
    done = autoconfig("zoo", "mobilenet_v1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 1_000_000 and [p.name for p in tmp_path.iterdir()] == ["mobilenet.onnx"]
    profile = str(Path(__file__).parent.parent / "hwprofiles" / "amd-epyc.yaml")
    done = autoconfig("fuse", str(out), "--profile", profile, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["operators"] == 58 and result["kernels"] < result["operators"]
    assert sum(len(g["ops"]) for g in result["groups"]) == result["operators"]
    text = autoconfig("fuse", str(out), "--profile", profile, "--strategy", "greedy").stdout
    assert "fusion ratio" in text and "kernel   0:" in text
    one = json.loads(autoconfig("fuse", str(out), "--profile", profile, "--json", "--threads", "1").stdout)
    assert one["cost_us"] > result["cost_us"]  # the default plans for both cores
    done = autoconfig("fuse", str(out), "--profile", profile, "--threads", "3")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "has 2 cores" in done.stderr


@pytest.mark.slow
def test_fuse_bad_model_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"junk")
    done = autoconfig("fuse", str(bad))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a valid ONNX model" in done.stderr
    done = autoconfig("zoo", "resnet", "--out", str(tmp_path / "r.onnx"))
    assert done.returncode == 2 and "unknown zoo model 'resnet'" in done.stderr
