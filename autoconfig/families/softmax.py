"""The softmax family's lowering: Softmax on any axis (a gather moves the axis last
where it is not), and the ops after it that take no other operand (a masked softmax's
NaN cleanup) as its epilogue; predicted by its traffic or its vector ops, the longer.
"""

from __future__ import annotations

import math

import numpy as np

from autoconfig.builder import (
    Builder, KernelGroup, Lowering, fail, match_epilogue, ops_of, permuted, streaming,
)  # fmt: skip
from autoconfig.graph.ir import Node
from autoconfig.models.cost import ROWS_TOGETHER, SOFTMAX_VECTOR_OPS
from autoconfig.runtime import Call, Part, split
from kernels import epilogue as ep
from kernels import softmax as sm


def _softmax(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    """Softmax along one axis (opset 13 on; before, over the axes flattened from it): the
    axis transposed last and back where it is not last already."""
    shape = b.graph.types[node.inputs[0]].shape
    if "legacy_axis" in node.attrs:
        axis = node.attrs["legacy_axis"] % len(shape)
        rows, length = math.prod(shape[:axis]), math.prod(shape[axis:])
        perm = tuple(range(len(shape)))
    else:
        axis = node.attrs.get("axis", -1) % len(shape)
        perm = (*(a for a in range(len(shape)) if a != axis), axis)
        rows, length = math.prod(shape) // shape[axis], shape[axis]
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=len(shape) - 1)
    if chain.operands:  # (the planner proposes none: classify.emittable)
        raise fail(after[0], "an op after a softmax with another operand is not its epilogue")
    config = sm.SoftmaxConfig(rows, length, b.target.f32_lanes, tuple(chain.ops), min(ROWS_TOGETHER, rows))
    threads = min(b.threads, rows)
    x = b.read(node.inputs[0])
    y = b.write(chain.end)
    source, calls, modules = permuted(b, x, shape, perm)
    last = perm == tuple(range(len(shape)))
    result = y if last else b.scratch(rows * length)
    calls.append(Call(config.symbol, tuple(Part((result, source), r) for r in split(rows, threads))))
    modules += b.modules(sm.generate, config)
    if not last:
        moved = tuple(shape[a] for a in perm)
        _, back, back_modules = permuted(b, result, moved, tuple(int(i) for i in np.argsort(perm)), into=y)
        calls, modules = calls + back, modules + back_modules
    vectors = math.ceil(rows / threads) * math.ceil(length / config.lanes)
    return streaming(b, node.name, ops_of([node, *after]), "softmax", calls, modules,
                      8 * rows * length * (1 if last else 3),
                      f"{rows} rows of {length}{', then ' + ep.describe(config.epilogue) if after else ''}, "
                      f"{threads} thread(s)",
                      vector_ops=vectors * (SOFTMAX_VECTOR_OPS + ep.vector_ops(config.epilogue)))  # fmt: skip


LOWERINGS = {"Softmax": Lowering(_softmax)}
"""The softmax family's operator."""
