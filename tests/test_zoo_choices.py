"""The four zoo models' choices (each kernel's ops, kind, summary and kernel symbols
without their configuration hash) at 1 and 2 threads on a fixed profile, compared with
those recorded in `tests/fixtures/zoo_choices.json`: a refactoring that means to change
nothing must change none of them. `python -m tests.test_zoo_choices` records them anew,
for a change that means to change a choice (the diff then shows which)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autoconfig.build import build_model
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from autoconfig.profile import load_profile
from kernels.target import get_target
from tests.test_build import PROFILES

RECORDED = Path(__file__).parent / "fixtures" / "zoo_choices.json"
CASES = [(name, threads) for name in zoo.MODELS for threads in (1, 2)]


def choices(name: str, threads: int) -> list[list]:
    """Each kernel of zoo model `name` built for avx2 on the EPYC profile with dp fusion."""
    graph = import_model(zoo.build(name))
    built = build_model(graph, load_profile(PROFILES["avx2"]), get_target("avx2"), "dp", threads, None)
    return [[k.kind, k.ops, k.summary, sorted({re.sub(r"_[0-9a-f]{10}(_in|_out)?$", r"\1", c.symbol) for c in k.calls})]
            for k in built.kernels]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("name,threads", CASES)
def test_zoo_choices_are_unchanged(name, threads):
    recorded = json.loads(RECORDED.read_text())[f"{name}/{threads}"]
    assert choices(name, threads) == recorded


if __name__ == "__main__":
    RECORDED.write_text(json.dumps({f"{n}/{t}": choices(n, t) for n, t in CASES}, indent=1) + "\n")
