"""autoconfig: fast CPU SIMD kernels for deep-learning models, chosen by analytic
models from a measured hardware profile instead of by search."""

from autoconfig.errors import AutoconfigError

__version__ = "0.1.0"

__all__ = ["AutoconfigError", "__version__", "compile_conv2d", "compile_matmul", "compile_model",
           "compile_pool2d", "load", "plan_conv2d", "plan_matmul"]


def __getattr__(name: str):
    """Lazy API: importing the package stays cheap (no MLIR, no LLVM) until used."""
    if name in ("compile_matmul", "plan_matmul"):
        from autoconfig import matmul as api

        return getattr(api, name)
    if name in ("compile_conv2d", "compile_pool2d", "plan_conv2d"):
        from autoconfig import conv as api

        return getattr(api, name)
    if name == "compile_model":
        from autoconfig import compiler as api

        return getattr(api, name)
    if name == "load":
        from autoconfig import loader as api

        return getattr(api, name)
    raise AttributeError(f"module 'autoconfig' has no attribute {name!r}")
