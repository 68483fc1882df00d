"""Checks of the arguments every entry point takes, run before anything is loaded,
probed or compiled, each failing with one AutoconfigError naming the argument."""

from __future__ import annotations

import numbers
from collections.abc import Mapping

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.profile import HardwareProfile
from kernels.target import Target


def size(name: str, value: object) -> int:
    """`value` as a positive int: Python and numpy integers pass, bools, floats and
    anything else are refused (a float size would reach the code generator)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise AutoconfigError(f"{name}={value!r}: must be a positive integer, not {type(value).__name__}")
    if value < 1:
        raise AutoconfigError(f"{name}={value}: must be >= 1")
    return int(value)


def threads(value: object) -> int | None:
    """A thread count (None: the profile's cores): a positive integer."""
    return None if value is None else size("threads", value)


def threads_within(count: int | None, profile: HardwareProfile) -> int | None:
    """`count` if the profile's machine has that many cores: more threads than cores
    only time-share them, and the profile has no figure for that."""
    cores = int(profile.cores)
    if count is not None and count > cores:
        raise AutoconfigError(f"threads={count}, but profile {profile.name} has {cores} cores")
    return count


def threads_on(count: int | None, profile: HardwareProfile) -> int:
    """`count` threads within the profile's cores (`threads_within`), or all of them."""
    return threads_within(count, profile) or int(profile.cores)


def target_for(target: Target, profile: HardwareProfile) -> Target:
    """`target` if it is code for the profile's ISA: a model reads the profile's
    figures as the figures of the machine the code runs on."""
    if target.arch != profile.isa:
        raise AutoconfigError(f"target {target.name} generates {target.arch} code, but profile "
                              f"{profile.name} describes {profile.isa} hardware")  # fmt: skip
    return target


def no_overlap(outputs: Mapping[str, np.ndarray], inputs: Mapping[str, np.ndarray]) -> None:
    """Refuse an output sharing memory with an input (or another output): a kernel
    reads its inputs while it writes, so overlap gives wrong results silently."""
    names = list(outputs)
    for i, name in enumerate(names):
        others = {**{n: outputs[n] for n in names[i + 1 :]}, **inputs}
        for other, array in others.items():
            if np.shares_memory(outputs[name], array):
                raise AutoconfigError(f"{name} overlaps {other} in memory; pass a separate array")


def output_array(name: str, out: object, shape: tuple[int, ...], inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """`out`, a caller's array a kernel writes into: a writeable C-contiguous float32
    array of `shape` sharing no memory with the inputs; else one error line."""
    if not (isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == shape
            and out.flags.c_contiguous and out.flags.writeable):  # fmt: skip
        raise AutoconfigError(f"{name} must be a writeable C-contiguous float32 array of shape {shape}")
    no_overlap({name: out}, inputs)
    return out


def float32_array(name: str, x: object, shape: tuple[int, ...]) -> np.ndarray:
    """`x` as a C-contiguous float32 array of `shape`, or one error line naming `name`."""
    if not isinstance(x, np.ndarray):
        raise AutoconfigError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.dtype != np.float32:
        raise AutoconfigError(f"{name} must be float32, got {x.dtype}")
    if x.shape != shape:
        raise AutoconfigError(f"{name} must have shape {shape}, got {x.shape}")
    return np.ascontiguousarray(x)
