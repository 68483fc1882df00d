"""The matrix-product family's lowering: Gemm (alpha, beta, transposes, any bias) and
MatMul of any ranks, its right operand a constant or computed (a batch of products),
with the epilogue ops after it.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from autoconfig.builder import Builder, KernelGroup, Lowering, fail, match_epilogue, ops_of, per_channel, permuted
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.products import A, B, C, Products, operand_shapes, products
from autoconfig.lowering import matmul_call
from autoconfig.machine import PROGRAM_STEP_NS
from autoconfig.models import matmul as matmul_model
from autoconfig.runtime import Call, Ref
from kernels import epilogue as ep
from kernels import matmul as mm
from kernels.emit import KernelModule



def _gemm(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    """Gemm (alpha, beta, transA, transB, any C broadcast to the output) and MatMul (any
    ranks), B a constant or computed: one matrix kernel, called once per product."""
    g, gemm = b.graph, node.op == "Gemm"
    trans_a, trans_b = gemm and node.attrs.get("transA", 0), gemm and node.attrs.get("transB", 0)
    alpha = float(node.attrs.get("alpha", 1.0)) if gemm else 1.0
    values, product = addressed_products(b, node)
    a, calls, modules = b.read(values[A] or node.inputs[0]), [], []
    if trans_a:
        a, calls, modules = permuted(b, a, g.types[node.inputs[0]].shape, (1, 0))
    constant_b = g.is_constant(node.inputs[1])
    a_shape, b_shape = operand_shapes(node, g)
    # One row times a constant transposed B, a·Wᵀ, is computed as (W·aᵀ)ᵀ: W read in its own
    # layout (a transpose of a large fc layer's weights costs the build seconds); the output,
    # a row, is the same memory as the column W·aᵀ, whose channels run along its rows.
    as_column = trans_b and constant_b and product.m == 1
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=-1)
    ops, operands = list(chain.ops), chain.refs(b)
    first_ops, first_operands = _gemm_operands(b, node, product, alpha if not constant_b else 1.0)
    ops, operands = first_ops + ops, first_operands + operands
    shape = mm.MatmulShape(product.n, 1, product.k) if as_column else mm.MatmulShape(product.m, product.n, product.k)
    one_b = constant_b and not as_column and len(b_shape) == 2  # one constant B for every product: packed once
    count = len(product.offsets)
    local = _preferred_split(b, shape, constant_b, g.is_constant(node.inputs[0]))
    constant_a = _one_constant(g, node.inputs[0])
    bands = {"b_band": _column_spans(g.constants[node.inputs[1]], trans_b) if one_b else (),
             "a_band": _column_spans(g.constants[node.inputs[0]], not trans_a) if constant_a else ()}
    choice, at_once = _side_by_side(b, shape, tuple(ops), count, b_constant=one_b, a_constant=as_column,
                                    local=None if as_column else local, **product.options(),
                                    **({"model_bytes": b.model_bytes} if one_b else {}),
                                    **{name: rows for name, rows in bands.items() if rows})  # fmt: skip
    plan = choice.best.plan
    if as_column:
        plan = replace(plan, config=replace(plan.config, channel_axis="rows"))
    plan.config.validate(b.target)
    w = _right_operand(b, values[B] or node.inputs[1], trans_b and not as_column, alpha if constant_b else 1.0,
                       calls, modules, plan.config)  # fmt: skip
    y = b.write(values[C] or chain.end)
    each = []
    for a_at, b_at, c_at in product.offsets:
        moved = [Ref(r.space, r.offset + c_at) if op.operand == "output" else r
                 for op, r in zip([o for o in ops if o.operand], operands)]  # fmt: skip
        left, right = Ref(a.space, a.offset + a_at), Ref(w.space, w.offset + b_at)
        out = Ref(y.space, y.offset + c_at)
        each.append(matmul_call(plan, out, right, left, moved, b) if as_column else
                    matmul_call(plan, out, left, right, moved, b))  # fmt: skip
    calls += [Call(plan.config.symbol, tuple(p for call in each[i:i + at_once] for p in call.parts))
              for i in range(0, count, at_once)]  # fmt: skip
    threads = f"{at_once} at once on 1 thread each" if at_once > 1 else f"{plan.threads} thread(s)"
    return KernelGroup(node.name, ops_of([node, *after]), "matmul", calls, modules + b.modules(mm.generate, plan.config),
                       _batch_ns(b, choice.best.total_ns, math.ceil(count / at_once)), choice.explain(),
                       f"{plan.config.algorithm} {plan.config.tile}{f' x{count}' if count > 1 else ''}"
                       f"{f' band {plan.config.band[0]}' if plan.config.band[0] else ''}"
                       f"{_in_place(product)}, {threads}", shape.flops * count)  # fmt: skip


def _one_constant(g: Graph, name: str) -> bool:
    """Whether `name` is one constant matrix (2-D)."""
    return g.is_constant(name) and len(g.types[name].shape) == 2


def _column_spans(weight: np.ndarray, transposed: bool) -> tuple[tuple[int, int], ...]:
    """A constant B's (first, last) nonzero row per column where every column's span
    is narrow (`models.matmul.narrow`: a resize's weights, a few taps per output), else none:
    the model then also scores products that multiply each column tile's band alone.
    Of Aᵀ (`transposed` for an A given as is): A's nonzero columns per row."""
    b = np.asarray(weight).T if transposed else np.asarray(weight)
    k = b.shape[0]
    for columns in (b[:, :: max(1, b.shape[1] // 4)], b):  # a few columns first: they refuse a dense B
        first, last = _first_and_last(columns != 0)
        if not matmul_model.narrow(int((last - first + 1).max(initial=0)), k):
            return ()
    return tuple(zip(first.tolist(), last.tolist(), strict=True))


def _first_and_last(nonzero: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's first and last nonzero row (K and -1 where it has none)."""
    k, used = nonzero.shape[0], nonzero.any(axis=0)
    return np.where(used, nonzero.argmax(axis=0), k), np.where(used, k - 1 - nonzero[::-1].argmax(axis=0), -1)


def _preferred_split(b: Builder, shape: mm.MatmulShape, constant_b: bool, constant_a: bool) -> str | None:
    """The split the matmul model takes among tied plans (`models.matmul.preference`):
    the computed operand's tokens, each thread reading the rows it wrote — unless the
    inference outgrows the L3, its weights stream from memory on every run, and this
    product's weights outweigh its computed operand; then the weights' side, each thread
    fetching its share of them instead of all (a resize's small constant matrix keeps
    each thread on its own rows of a large output)."""
    streamed = b.machine.in_model(b.model_bytes).constants_level == "DRAM"
    if constant_b:
        return "columns" if streamed and shape.n > shape.m else "rows"
    if constant_a:
        return "rows" if streamed and shape.m > shape.n else "columns"
    return None


def addressed_products(b: Builder, node: Node) -> tuple[list[str | None], Products]:
    """The values a MatMul or Gemm reads and writes through the data movement it
    addresses (`fusion.addressing`; None: its own operand), and where each product's
    matrices lie in them."""
    values, maps = b.addressed.get(node.name, ((None, None, None), (None, None, None)))
    found = products(node, *operand_shapes(node, b.graph), maps)
    if found is None:
        raise fail(node, "its operands, as the plan reads them, are not strided matrices")
    return values, found


def _side_by_side(b: Builder, shape: mm.MatmulShape, ops: ep.Epilogue, count: int, **options: object):
    """The matmul model's choice for `count` products, and how many run at once: one per
    thread, each on one thread, where that is predicted faster than each split across
    the threads (a batch of attention heads), else one at a time."""
    choice = b.choose(matmul_model.choose, shape, ops, **options)
    if count > 1 and b.threads > 1:
        alone = b.choose(matmul_model.choose, shape, ops, threads=1, **options)
        if alone.best.total_ns * math.ceil(count / b.threads) < choice.best.total_ns * count:
            return alone, b.threads
    return choice, 1


def _batch_ns(b: Builder, ns: float, calls: int) -> float:
    """`calls` runs of a product's kernel predicted `ns` each, one program step apiece:
    the prediction's call once, every further run a step of the program instead (its
    dispatch to threads, if any, each time)."""
    return ns * calls - (calls - 1) * (b.machine.call_ns - PROGRAM_STEP_NS)


def _in_place(product: Products) -> str:
    """The operands a product reads or writes in place, for the report."""
    strided = [f"{side} rows {stride} apart" for side, stride in zip("ABC", product.leading) if stride]
    if product.b_transposed:
        strided.append("B read transposed")
    return f" ({', '.join(strided)})" if strided else ""


def _right_operand(b: Builder, name: str, transpose: bool, alpha: float, calls: list[Call],
                   modules: list[KernelModule], config: mm.MatmulConfig) -> Ref:  # fmt: skip
    """Where the products read B, the value `name`: a constant (scaled by `alpha`,
    transposed in numpy; packed where the config reads it packed: as B, or as the A of
    a product computed as a column), or a computed tensor (transposed by a gather whose
    calls and modules are appended)."""
    if b.graph.is_constant(name):
        weight = np.asarray(b.graph.constants[name], np.float32)
        weight = weight * np.float32(alpha) if alpha != 1.0 else weight
        weight = np.swapaxes(weight, -1, -2) if transpose else weight
        packed = config.pack_b(weight.T) if config.b_packed else config.pack_a(weight) if config.a_packed else None
        return b.constant(weight if packed is None else packed)
    w = b.read(name)
    if not transpose:
        return w
    shape = b.graph.types[name].shape
    w, more_calls, more_modules = permuted(b, w, shape, (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2))
    calls += more_calls
    modules += more_modules
    return w


def _gemm_operands(b: Builder, node: Node, product: Products,
                   alpha: float) -> tuple[list[ep.EpilogueOp], list[Ref]]:  # fmt: skip
    """The epilogue ops a Gemm adds before its chain's: alpha as a scale (where B is
    computed; a constant B is scaled instead), then beta·C — per column as a bias, else
    broadcast to the output as a residual."""
    ops, operands = [], []
    m, n = product.m, product.n
    if alpha != 1.0:
        ops.append(ep.scale())
        operands.append(b.constant(np.full(n, alpha, np.float32)))
    c = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else None
    if c is None:
        return ops, operands
    beta = float(node.attrs.get("beta", 1.0))
    if b.graph.is_constant(c):
        values = np.asarray(b.graph.constants[c], np.float32) * np.float32(beta)
        column = per_channel(values, (m, n), -1)
        if column is not None:
            return ops + [ep.bias()], operands + [b.constant(np.broadcast_to(column, (n,)))]
        b.graph.constants[f"{c} times {beta}"] = values
        b.graph.types[f"{c} times {beta}"] = TensorType(values.shape, "float32")
        c = f"{c} times {beta}"
    elif beta != 1.0:
        raise fail(node, "a computed C with beta other than 1 is not generated")
    if tuple(b.graph.types[c].shape) != (m, n):
        c = b.broadcast(c, (m, n))
    return ops + [ep.residual()], operands + [b.read(c)]


LOWERINGS = {"Gemm": Lowering(_gemm), "MatMul": Lowering(_gemm)}
"""The matrix-product family's operators."""
