"""autoconfig: fast CPU SIMD kernels for deep-learning models, chosen by analytic
models from a measured hardware profile instead of by search."""

from autoconfig.errors import AutoconfigError

__version__ = "0.1.0"

__all__ = ["AutoconfigError", "__version__"]
