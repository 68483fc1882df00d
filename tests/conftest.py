"""Shared fixtures: a kernel cache of the session's own, targets by test id, skipping
with a one-line reason when this host cannot run a target's code."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from autoconfig.probe.host import this_host
from kernels.cache import CACHE_ENV
from kernels.target import Target, get_target


def pytest_configure(config: pytest.Config) -> None:
    """Builds in the tests use a temporary kernel cache, removed at the end, so no run
    depends on what earlier ones left in the user's cache; a cache named in
    $AUTOCONFIG_CACHE_DIR is used as given (to keep one across runs)."""
    if not os.environ.get(CACHE_ENV):
        os.environ[CACHE_ENV] = config._autoconfig_cache = tempfile.mkdtemp(prefix="autoconfig-test-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if getattr(config, "_autoconfig_cache", None):
        shutil.rmtree(config._autoconfig_cache, ignore_errors=True)

# (test id, target name, VLEN): the four ISAs, RVV at two register lengths.
TARGET_CASES = [
    ("avx2", "avx2", None),
    ("avx512", "avx512", None),
    ("neon", "neon", None),
    ("rvv128", "rvv", 128),
    ("rvv256", "rvv", 256),
]

CASE_IDS_ALL = [case[0] for case in TARGET_CASES]


def target_for(case_id: str) -> Target:
    """The Target of a TARGET_CASES id."""
    _, name, vlen = next(case for case in TARGET_CASES if case[0] == case_id)
    return get_target(name, vlen)


def require_runnable(target: Target) -> None:
    """Skip the calling test when this host can run `target` neither natively nor emulated."""
    execution = target.execution(this_host())
    if execution.mode == "unavailable":
        pytest.skip(f"{target.name}: {execution.reason}")
