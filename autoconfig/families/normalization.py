"""The normalization family's lowering: LayerNormalization and RMSNormalization (an
exporter's written-out root mean square recognized as one at import) over their
trailing axes as one row-wise kernel (`kernels.layernorm`); where LayerNormalization's
mean or inverse deviation output is read, or its scale or bias is computed, the import
writes it as its definition's ops instead (`graph.simplify`).
"""

from __future__ import annotations

import math

import numpy as np

from autoconfig.builder import Builder, KernelGroup, Lowering, ops_of, streaming
from autoconfig.graph.ir import Node
from autoconfig.models.cost import ROWS_TOGETHER
from autoconfig.runtime import Call, Part, split
from kernels import layernorm as ln


def _layer_norm(b: Builder, node: Node, after: list[Node]) -> KernelGroup:
    """Rows of the axes before `axis`, each normalized over the axes from it on (less
    their mean for LayerNormalization, not for RMSNormalization, which has no bias)."""
    x, scale, bias = [*node.inputs, ""][:3] if node.op == "LayerNormalization" else [*node.inputs[:2], ""]
    shape = b.graph.types[x].shape
    axis = node.attrs.get("axis", -1) % len(shape)
    rows, length = math.prod(shape[:axis]), math.prod(shape[axis:])
    per_column = [np.broadcast_to(np.asarray(b.graph.constants[v], np.float32), shape[axis:]).reshape(-1)
                  if v else np.zeros(length, np.float32) for v in (scale, bias)]  # fmt: skip
    config = ln.LayerNormConfig(rows, length, b.target.f32_lanes, float(node.attrs.get("epsilon", 1e-5)),
                                min(ROWS_TOGETHER, rows), centred=node.op == "LayerNormalization")  # fmt: skip
    threads = min(b.threads, rows)
    operands = (b.read(x), b.constant(per_column[0]), b.constant(per_column[1]))
    y = b.write(node.outputs[0])
    call = Call(config.symbol, tuple(Part((y, *operands), r) for r in split(rows, threads)))
    return streaming(b, node.name, ops_of([node]), "layernorm", [call], b.modules(ln.generate, config),
                      8 * rows * length, f"{rows} rows of {length}{'' if config.centred else ' by root mean square'}, "
                      f"{threads} thread(s)")  # fmt: skip


LOWERINGS = {"LayerNormalization": Lowering(_layer_norm), "RMSNormalization": Lowering(_layer_norm)}
"""The normalization family's operators."""
