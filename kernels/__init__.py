"""Configurable code generation: one module per operator family, the target
descriptions, and lowering of MLIR to machine code.

Everything here takes a fully specified config and a target and emits code; no
module here makes a performance decision (those live in ``autoconfig``).
This package import is kept free of MLIR and LLVM so that the LLVM child process
(`kernels.llvm_backend`) starts quickly.
"""
