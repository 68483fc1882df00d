"""Small MLIR emit helpers shared by the operator-family generators.

They hide three details so that a generator reads like the loop nest it produces:
the C ABI (raw pointers and int64 sizes turned into memrefs), constants, and the
target's vector shape (fixed-length ``vector<8xf32>`` on x86 and NEON, scalable
``vector<[2]xf32>`` on RVV, whose step is a multiple of ``vector.vscale``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kernels.errors import KernelError
from kernels.abi import KernelSignature
from kernels.mlir import MLIRError, arith, func, ir, llvm, vector
from kernels.target import Target


@dataclass
class KernelModule:
    """A verified MLIR module holding kernels with the C ABI, for one target: generated
    (`module`), or read back from the kernel cache as its text (`stored_text`, parsed
    only if it has to be compiled)."""

    module: ir.Module | None
    signatures: tuple[KernelSignature, ...]
    target: Target
    stored_text: str | None = None

    @functools.cached_property
    def text(self) -> str:
        """The module printed, once: the kernel cache's key and the artifact's .mlir file
        both need it, and printing a large module takes milliseconds (without checking
        it again: generators verify what they make, `verify`)."""
        return self.stored_text if self.module is None else self.module.operation.get_asm(assume_verified=True)


_THREAD = threading.local()


def shared_context() -> ir.Context:
    """This thread's MLIR context, made once and shared by every module it generates or
    parses: making one registers every dialect the bindings bundle, milliseconds each,
    and modules need no context of their own. One per thread, as a context is not
    thread-safe."""
    if not hasattr(_THREAD, "context"):
        _THREAD.context = ir.Context()
    return _THREAD.context


@contextmanager
def new_module() -> Iterator[ir.Module]:
    """An empty module in this thread's context; ops built inside get unknown locations."""
    with shared_context(), ir.Location.unknown():
        yield ir.Module.create()


def verify(module: ir.Module) -> None:
    """Raise KernelError naming the first diagnostic if `module` is invalid."""
    try:
        module.operation.verify()
    except MLIRError as err:
        raise KernelError(f"generated MLIR failed verification: {first_diagnostic(err)}") from None


def first_diagnostic(err: MLIRError) -> str:
    """The first error diagnostic of an MLIR exception on one line, led by its
    ``line:column`` when it has one (e.g. ``3:12: 'arith.addf' op ...``)."""
    diags = getattr(err, "error_diagnostics", None)
    if not diags:
        return " ".join(str(err).split()) or type(err).__name__
    place = re.fullmatch(r'loc\(".*":(\d+):(\d+)\)', str(diags[0].location))
    message = " ".join(diags[0].message.split())
    return f"{place[1]}:{place[2]}: {message}" if place else message


@contextmanager
def kernel_body(module: ir.Module, sig: KernelSignature) -> Iterator[dict[str, ir.Value]]:
    """Add ``func.func @symbol`` with the C ABI of `sig` and build its body.

    Yields the arguments by name (buffers are ``!llvm.ptr``, sizes ``i64``) with the
    insertion point in the entry block; the function is closed with `func.return`.
    """
    ptr = llvm.PointerType.get()
    i64 = ir.IntegerType.get_signless(64)
    types = [ptr if p.role.is_buffer else i64 for p in sig.params]
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(sig.symbol, ir.FunctionType.get(types, []))
    entry = fn.add_entry_block()
    with ir.InsertionPoint(entry):
        yield {p.name: arg for p, arg in zip(sig.params, entry.arguments, strict=True)}
        func.return_([])


def single_kernel(sig: KernelSignature, target: Target, body: Callable[[dict[str, ir.Value]], None]) -> KernelModule:
    """A module of one kernel: `sig`'s function with `body(args)` emitted inside, verified."""
    with new_module() as module:
        with kernel_body(module, sig) as args:
            body(args)
        verify(module)
    return KernelModule(module=module, signatures=(sig,), target=target)


def outlined(name: str, captures: Sequence[ir.Value], body: Callable[[list[ir.Value]], None]) -> None:
    """Call ``func.func @name(captures)`` here, whose body is `body(arguments)`, adding
    it to the enclosing module the first time. The body sees only its arguments (a
    function is isolated from the values around it: the verifier rejects any other).

    A module's functions are compiled in parallel (`kernels.lower.compile_units`), so
    outlining a loop nest that LLVM takes long to optimize (a matmul's packing) lets
    it compile beside the rest, at the cost of a call where the nest was. `name` must
    be unique in the library: derive it from the kernel's symbol."""
    owner = ir.InsertionPoint.current.block.owner.operation
    while owner.name != "builtin.module":
        owner = owner.parent
    if name not in ir.SymbolTable(owner):
        with ir.InsertionPoint(owner.regions[0].blocks[0]):
            fn = func.FuncOp(name, ir.FunctionType.get([value.type for value in captures], []))
        entry = fn.add_entry_block()
        with ir.InsertionPoint(entry):
            body(list(entry.arguments))
            func.return_([])
    func.call([], name, list(captures))


def outlined_nest(name: str, args: dict[str, ir.Value], extra: Sequence[ir.Value],
                  body: Callable[[dict[str, ir.Value], list[ir.Value]], None]) -> None:
    """`outlined` for a loop nest of a kernel: the function takes the kernel's
    arguments (raw buffers and sizes) and the `extra` values it depends on, and
    body(arguments by name, extra values) makes its buffers from them again as the
    kernel did: with their static shapes, so LLVM folds their strides as in the kernel
    (memrefs passed in would arrive with dynamic ones)."""
    names = list(args)

    def inner(values: list[ir.Value]) -> None:
        body(dict(zip(names, values[: len(names)], strict=True)), values[len(names):])

    outlined(name, [*args.values(), *extra], inner)


def index(value: int | ir.Value) -> ir.Value:
    """An ``index`` value from a Python int or an i64 value."""
    idx = ir.IndexType.get()
    if isinstance(value, int):
        return arith.constant(idx, value)
    return arith.index_cast(idx, value)


def f32_memref(pointer: ir.Value, dims: Sequence[ir.Value | int], row_stride: int = 0) -> ir.Value:
    """A row-major ``memref<?x...xf32>`` over `pointer` with sizes `dims` (i64 values or
    constants); with `row_stride`, a 2-D one whose rows lie that many floats apart (a
    strided view of a wider matrix: one head of a [tokens, heads x width] tensor)."""
    return typed_memref(pointer, dims, ir.F32Type.get(), row_stride)


def i64_memref(pointer: ir.Value, dims: Sequence[ir.Value | int]) -> ir.Value:
    """`f32_memref` of int64 elements (index tables a kernel reads)."""
    return typed_memref(pointer, dims, ir.IntegerType.get_signless(64))


def typed_memref(pointer: ir.Value, dims: Sequence[ir.Value | int], element: ir.Type,
                 row_stride: int = 0) -> ir.Value:  # fmt: skip
    """A row-major ``memref<?x...x element>`` over `pointer` with sizes `dims`, dense
    unless a 2-D memref's rows are `row_stride` apart (its type then strided).

    Builds the memref descriptor (allocated and aligned pointer, offset 0, sizes,
    row-major strides) in the LLVM dialect and casts it to the memref type; the
    cast disappears when the memref is lowered to the same descriptor.
    """
    i64 = ir.IntegerType.get_signless(64)

    def value(x: ir.Value | int) -> ir.Value:
        return llvm.mlir_constant(ir.IntegerAttr.get(i64, x)) if isinstance(x, int) else x

    strides: list[ir.Value | int] = [1]
    for dim in reversed(dims[1:]):  # row-major; constant-folded when the sizes are static
        inner = strides[0]
        if isinstance(dim, int) and isinstance(inner, int):
            strides.insert(0, dim * inner)
        else:
            no_wrap = ir.Attribute.parse("#llvm.overflow<none>")
            strides.insert(0, llvm.mul(value(inner), value(dim), no_wrap))
    if row_stride:
        if len(dims) != 2:
            raise KernelError(f"a row stride is for a 2-D memref, not {len(dims)}-D")
        strides[0] = row_stride
    rank = len(dims)
    desc_type = ir.Type.parse(
        f"!llvm.struct<(ptr, ptr, i64, array<{rank} x i64>, array<{rank} x i64>)>"
    )
    desc = llvm.mlir_poison(desc_type)
    desc = llvm.insertvalue(desc, pointer, [0])
    desc = llvm.insertvalue(desc, pointer, [1])
    desc = llvm.insertvalue(desc, value(0), [2])
    for axis, (dim, stride) in enumerate(zip(dims, strides, strict=True)):
        desc = llvm.insertvalue(desc, value(dim), [3, axis])
        desc = llvm.insertvalue(desc, value(stride), [4, axis])
    dynamic = ir.ShapedType.get_dynamic_size()
    layout = ir.StridedLayoutAttr.get(0, [dynamic, 1]) if row_stride else None
    memref_type = ir.MemRefType.get([dynamic] * rank, element, layout=layout)
    cast = ir.Operation.create(
        "builtin.unrealized_conversion_cast", results=[memref_type], operands=[desc]
    )
    return cast.result


def offset_pointer(pointer: ir.Value, elements: ir.Value) -> ir.Value:
    """`pointer` advanced by `elements` f32 (an index value): a view of a buffer's tail,
    e.g. one product of a stack of matrices."""
    dynamic = -(2**31)  # the GEP's marker of a dynamic index
    count = arith.index_cast(ir.IntegerType.get_signless(64), elements)
    return llvm.getelementptr(llvm.PointerType.get(), pointer, [count], [dynamic], ir.F32Type.get(), 0)


def config_symbol(stem: str, config: object) -> str:
    """A C symbol unique to a frozen config: `stem`, then a digest of every field (the
    repr of a config names them all, so two configs share a symbol only if equal)."""
    return f"{stem}_{hashlib.sha256(repr(config).encode()).hexdigest()[:10]}"


def check_lanes(target: Target, lanes: int) -> None:
    """Reject a lane count the target cannot hold in one vector register."""
    if lanes < 1 or lanes & (lanes - 1) or lanes > target.f32_lanes:
        raise KernelError(
            f"lanes={lanes} is invalid for {target.name}: use a power of two from 1 "
            f"to {target.f32_lanes} (its {target.vector_bits}-bit registers hold "
            f"{target.f32_lanes} f32)"
        )
    if target.scalable and lanes % target.vscale:
        raise KernelError(
            f"lanes={lanes} is invalid for {target.name} at VLEN {target.vector_bits}: "
            f"scalable vectors hold a multiple of vscale={target.vscale} lanes"
        )


def check_blocked(target: Target, lanes: int, channels: dict[str, int]) -> None:
    """Reject a blocked layout the target or the tensors cannot have: blocks need a
    fixed vector length (a scalable vector's lanes are known only at run time), and
    whole blocks of channels."""
    check_lanes(target, lanes)
    if target.scalable:
        raise KernelError(f"channel-blocked layouts need fixed-length vectors; {target.name}'s are scalable")
    for name, count in channels.items():
        if count % lanes:
            raise KernelError(f"a channel-blocked layout needs {name} ({count}) to be a multiple of the "
                                  f"{lanes} lanes")  # fmt: skip



def f32_vector_type(target: Target, lanes: int) -> ir.VectorType:
    """The vector type of `lanes` f32 on `target` (scalable on RVV, at its VLEN)."""
    return _vector_type(target, lanes, ir.F32Type.get())


def mask_type(target: Target, lanes: int) -> ir.VectorType:
    """The i1 mask type matching `f32_vector_type(target, lanes)`."""
    return _vector_type(target, lanes, ir.IntegerType.get_signless(1))


def _vector_type(target: Target, lanes: int, element: ir.Type) -> ir.VectorType:
    if target.scalable:
        return ir.VectorType.get([lanes // target.vscale], element, scalable=[True])
    return ir.VectorType.get([lanes], element)


def lane_step(target: Target, lanes: int) -> ir.Value:
    """Elements one vector covers at run time: `lanes`, or (lanes/vscale)·vscale on RVV.

    The scalable form keeps RVV code correct on any VLEN, not only the planned one.
    """
    if target.scalable:
        return arith.muli(index(lanes // target.vscale), vector.vscale())
    return index(lanes)


def tail_mask(target: Target, lanes: int, count: int) -> ir.Value | None:
    """The mask of a vector of `lanes` holding `count` valid lanes (a row's last vector);
    None when it is whole."""
    return None if count >= lanes else vector.create_mask(mask_type(target, lanes), [index(count)])


def f32_splat(target: Target, lanes: int, value: float) -> ir.Value:
    """A vector of `lanes` copies of `value`."""
    return splat(f32_vector_type(target, lanes), value)


def splat(vector_type: ir.Type, value: float) -> ir.Value:
    """`value` in every lane of an f32 vector of `vector_type`."""
    return vector.broadcast(vector_type, arith.constant(ir.F32Type.get(), float(value)))


def generate(config, target: Target) -> list[KernelModule]:
    """The kernels of any kernel family's `config` on `target`, in the order they run:
    the config checked against the target (`validate`), then its own `modules`."""
    config.validate(target)
    return config.modules(target)
