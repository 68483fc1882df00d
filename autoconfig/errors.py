"""The project's one user-facing exception type."""


class AutoconfigError(Exception):
    """A problem the user can fix: bad input, an unusable target, a failed build.

    The CLI prints its message as one line and exits with status 2, so the message
    must name the cause (the field, the target, the file) on its own.
    """
