"""The attention family's lowering: a group the fusion plan made of one attention core
(`fusion.classify.attention_cores`: the scores' MatMul, the ops on the scores, the
Softmax, its NaN cleanup, the MatMul by V) becomes one `kernels.attention` kernel per
head, its Q, K, V and output read and written in place through the data movement the
products address (`fusion.addressing`), as the separate products would.
"""

from __future__ import annotations

import numpy as np

from autoconfig.builder import Builder, KernelGroup, Lowering, fail, match_epilogue, ops_of
from autoconfig.families.matmul import addressed_products
from autoconfig.graph.ir import Node
from autoconfig.graph.products import A, B, C, Products, batch_offsets, one_attention
from autoconfig.lowering import at
from autoconfig.models import attention as attention_model
from autoconfig.models.attention import AttentionShape
from autoconfig.runtime import Call, Part, Ref, split
from kernels import attention as ak

ATTENTION = "Attention"
"""The registry's key for an attention core's group (it holds several operators)."""


def _attention(b: Builder, scores_node: Node, after: list[Node]) -> KernelGroup:
    """One kernel for the core whose scores `scores_node` computes (`after`: the rest of
    its ops, in order, the product by V last)."""
    output_node = after[-1]
    at_softmax = next(i for i, n in enumerate(after) if n.op == "Softmax")
    between, cleanup = after[:at_softmax], after[at_softmax + 1:-1]
    reads, scores = addressed_products(b, scores_node)
    writes, mixed = addressed_products(b, output_node)
    if not one_attention(scores, mixed):  # the plan checked it (`fusion.addressing.addresses_attention`)
        raise fail(scores_node, "its attention's operands are not the strided matrices one kernel reads")
    chain = match_epilogue(b, scores_node.outputs[0], between, channel_axis=-1, per_batch=True)
    tidy = match_epilogue(b, after[at_softmax].outputs[0], cleanup, channel_axis=-1)
    q, k = b.read(reads[A] or scores_node.inputs[0]), b.read(reads[B] or scores_node.inputs[1])
    v, operands = b.read(writes[B] or output_node.inputs[1]), chain.refs(b)
    o = b.write(writes[C] or output_node.outputs[0])
    shape = AttentionShape(len(scores.offsets), scores.m, scores.n, scores.k, mixed.n)
    strides = (scores.leading[A], scores.leading[B], mixed.leading[B], mixed.leading[C])
    best = attention_model.choose(shape, b.machine, b.target.f32_lanes, b.threads, strides, tuple(chain.ops),
                                  tuple(tidy.ops), k_transposed=not scores.b_transposed)  # fmt: skip
    config = best.config
    config.validate(b.target)
    batch = b.graph.types[scores_node.outputs[0]].shape[:-2]
    heads = [batch_offsets(b.graph.types[value].shape, batch) if op.operand == "output" else None
             for op, value in zip([op for op in chain.ops if op.operand], chain.operands, strict=True)]  # fmt: skip
    calls = _calls(b, config, best.plan.threads, scores, mixed, (o, q, k, v), operands, heads)
    apart = [f"{name} rows {stride} apart" for name, stride in zip(("Q", "K", "V", "O"), strides) if stride]
    given = ["K read transposed" if scores.b_transposed else "K given as Kᵀ"]
    streamed = f", keys streamed in {config.chunks} chunks of {config.key_block}" if config.key_block else ""
    summary = (f"fused {config.rows}x{config.vectors}, {config.tiles} per block{streamed}, x{shape.heads} "
               f"({', '.join(apart + given)}), {best.plan.threads} thread(s)")
    return KernelGroup(scores_node.name, ops_of([scores_node, *after]), "attention", calls,
                       b.modules(ak.generate, config), best.total_ns,
                       attention_model.explain(best, b.profile.name, b.target.name), summary, shape.flops)  # fmt: skip


def _calls(b: Builder, config: ak.AttentionConfig, threads: int, scores: Products, mixed: Products,
           matrices: tuple[Ref, Ref, Ref, Ref], operands: list[Ref],
           heads_at: list[np.ndarray | None]) -> list[Call]:  # fmt: skip
    """One part per head, `threads` heads at once, each thread with its scratch and its
    own run of consecutive heads (their columns of Q, K and V lie together, as a
    projection split by columns wrote them); or each head's rows split across the
    threads where there are fewer heads than threads. An
    operand of the scores' matrices is read at each head's matrix (`heads_at`); one per
    key, whole."""
    work = [b.private(config.workspace(), slot) for slot in range(threads)]
    o, q, k, v = matrices

    def part(head: int, slot: int, rows: tuple[int, int]) -> Part:
        q_at, k_at, _ = scores.offsets[head]
        _, v_at, o_at = mixed.offsets[head]
        moved = [r if firsts is None else at(r, int(firsts[head]))
                 for r, firsts in zip(operands, heads_at, strict=True)]  # fmt: skip
        refs = (at(o, o_at), at(q, q_at), at(k, k_at), at(v, v_at), *moved, work[slot])
        return Part(refs, rows)

    heads = len(scores.offsets)
    if heads >= threads:
        each = -(-heads // threads)
        return [Call(config.symbol, tuple(part(slot * each + i, slot, (0, config.queries)) for slot in range(threads)
                                          if slot * each + i < heads))
                for i in range(each)]  # fmt: skip
    return [Call(config.symbol, tuple(part(h, slot, rows) for slot, rows in enumerate(split(config.queries, threads))))
            for h in range(heads)]  # fmt: skip


LOWERINGS = {ATTENTION: Lowering(_attention)}
"""The attention family: one key for the several operators of its group."""
