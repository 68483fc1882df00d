"""The code generator's one exception type."""


class KernelError(Exception):
    """A configuration, shape, target or call the code generator cannot serve. Its
    message names the cause on its own; autoconfig re-raises it as its user-facing
    error where it calls into `kernels`."""
