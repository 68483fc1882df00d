"""Which profile and which target: shared by the Python API and the CLI."""

from __future__ import annotations

from pathlib import Path

from autoconfig.checks import target_for
from autoconfig.profile import HardwareProfile, load_profile
from autoconfig.probe.host import named_target
from kernels.target import Target, get_target


def resolve_profile(profile: HardwareProfile | str | Path | None) -> HardwareProfile:
    """A profile object from an object, a path, or None (this machine's)."""
    if isinstance(profile, HardwareProfile):
        return profile
    if profile is None:
        from autoconfig.probe import host_profile

        return host_profile()
    return load_profile(profile)


def target_for_profile(profile: HardwareProfile) -> Target:
    """The code-generation target a profile describes (its widest vector unit)."""
    if profile.isa == "x86_64":
        return get_target("avx512" if int(profile.vector.bits) >= 512 else "avx2")
    if profile.isa == "aarch64":
        return get_target("neon")
    return get_target("rvv", int(profile.vector.bits))


def resolve_target(target: Target | str | None, profile: HardwareProfile) -> Target:
    """A target object from an object, a name, or None (the profile's)."""
    if isinstance(target, Target):
        return target
    return target_for_profile(profile) if target is None else named_target(target)


def resolve(profile: HardwareProfile | str | Path | None, target: Target | str | None) -> tuple[HardwareProfile, Target]:
    """The profile and the target of an API call: a target's name is checked before any
    profile is loaded or this machine probed (a probe takes seconds), and the target must
    generate code for the profile's ISA."""
    named = named_target(target) if isinstance(target, str) else target
    prof = resolve_profile(profile)
    return prof, target_for(resolve_target(named, prof), prof)
