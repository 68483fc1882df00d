"""The models' choices kept on disk between builds, beside the compiled kernels.

A choice is a pure function of the models' code, the profile, the target, the thread
budget, the problem and its fused epilogue. The digest of all of them keys a file
holding the choice (pickled, written to a temporary name and renamed), so rebuilding
an unchanged model on an unchanged profile asks no model again (EfficientNet-B0's
warm build, 46 distinct layers: 11.9 s before, 4.1 s after). The models' code
enters the key as the digest of their source files, and so does the code generators'
(which configurations are valid), so a changed model is asked anew.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autoconfig.profile import HardwareProfile, profile_to_dict
from kernels.cache import KernelCache, generators_version, target_settings
from kernels.files import write_atomically
from kernels.target import Target

PACKAGE = Path(__file__).parent
MODEL_SOURCES = (PACKAGE / "models", PACKAGE / "machine.py", PACKAGE / "profile.py")
"""What decides a choice besides its arguments: the models, the machine view they
read, and the profile's classes (a pickled choice holds its profile)."""


@functools.cache
def models_version() -> str:
    """Digest of the models' source files."""
    digest = hashlib.sha256()
    for source in MODEL_SOURCES:
        for path in sorted(source.rglob("*.py")) if source.is_dir() else [source]:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass
class DecisionCache:
    """Choices on disk, by the digest of everything they depend on."""

    root: Path

    def choose(self, model: Callable, problem: object, profile: HardwareProfile, target: Target,
               threads: int, epilogue: tuple, **options: object) -> object:  # fmt: skip
        """`model(problem, profile, target, threads, epilogue, **options)`, from the disk
        when an identical question was answered before."""
        path = self.root / f"{self.key(model, problem, profile, target, threads, epilogue, options)}.pickle"
        try:
            with open(path, "rb") as saved:
                return pickle.load(saved)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
            pass  # not there, or written by other code: ask the model
        choice = model(problem, profile, target, threads, epilogue, **options)
        try:
            write_atomically(path, pickle.dumps(choice, protocol=4), make_parents=True)
        except OSError:  # an unwritable cache only costs the next build the time
            pass
        return choice

    @staticmethod
    def key(model: Callable, problem: object, profile: HardwareProfile, target: Target, threads: int,
            epilogue: tuple, options: dict | None = None) -> str:  # fmt: skip
        question = "\n".join([models_version(), generators_version(), f"{model.__module__}.{model.__qualname__}",
                              repr(problem), json.dumps(profile_to_dict(profile), sort_keys=True),
                              target_settings(target), str(threads), repr(epilogue),
                              repr(sorted((options or {}).items()))])  # fmt: skip
        return hashlib.sha256(question.encode()).hexdigest()


def ask(decisions: DecisionCache | None, model: Callable, *question: object, **options: object) -> object:
    """`model(*question, **options)`: through `decisions` when there is a cache, else asked
    directly."""
    return decisions.choose(model, *question, **options) if decisions else model(*question, **options)


def decisions_of(cache: KernelCache | None) -> DecisionCache | None:
    """The decision cache kept beside `cache`'s kernels (None without a kernel cache)."""
    return DecisionCache(cache.root / "decisions") if cache else None
