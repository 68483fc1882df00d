"""The only importer of the MLIR Python bindings.

A real upstream ``mlir`` package is preferred when one is installed; otherwise the
copy of the upstream bindings bundled in the ``torch-mlir`` wheel is used (it needs
only numpy, not torch). Every other module imports the bindings from here, so
nothing else names either package.
"""

try:  # a real upstream `mlir` package (the PyPI placeholder of that name has no `ir`)
    from mlir import ir, passmanager
    from mlir.dialects import arith, func, llvm, math, memref, scf, vector
except ImportError:
    from torch_mlir import ir, passmanager
    from torch_mlir.dialects import arith, func, llvm, math, memref, scf, vector

translate_module_to_llvmir = llvm.translate_module_to_llvmir
MLIRError = ir.MLIRError

__all__ = [
    "MLIRError",
    "arith",
    "func",
    "ir",
    "llvm",
    "math",
    "memref",
    "passmanager",
    "scf",
    "translate_module_to_llvmir",
    "vector",
]
