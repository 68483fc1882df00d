"""The project's one user-facing exception type, and the seam where the code
generator's own error becomes it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from kernels.errors import KernelError

F = TypeVar("F", bound=Callable)


class AutoconfigError(Exception):
    """A problem the user can fix: bad input, an unusable target, a failed build.

    The CLI prints its message as one line and exits with status 2, so the message
    must name the cause (the field, the target, the file) on its own.
    """


REFUSALS = (AutoconfigError, KernelError)
"""What a step that calls into `kernels` catches to report a refusal as its own."""


def reraised(function: F) -> F:
    """`function` with a `KernelError` from the code generator re-raised as an
    AutoconfigError: every public entry point that reaches `kernels` wears it."""

    @functools.wraps(function)
    def entry(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except KernelError as err:
            raise AutoconfigError(str(err)) from None

    return entry  # type: ignore[return-value]


def fail(node, why: str) -> AutoconfigError:
    """A node the code generator cannot emit (yet): the build stops, naming it."""
    return AutoconfigError(f"node {node.name!r} ({node.op}): {why}")
