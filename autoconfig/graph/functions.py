"""Operators the table lacks whose ONNX schema defines them as a function of other
operators (Attention, GroupNormalization, RotaryEmbedding, MeanVarianceNormalization,
Swish, Celu, Shrink, ...): expanded at import into that function's body, so they build
from the operators the table has, their constants folding as any others do. The body
is onnx's own (the schema's function at the model's opset, a context-dependent one
made for the node's input types), expanded by onnx's helper that writes the node tests'
`_expanded` variants."""

from __future__ import annotations

import onnx
from onnx.backend.test.case.node import function_expand_helper

CONTROL_FLOW = frozenset({"Loop", "Scan"})
"""A body holding one of these is not expanded: the operator stays whole (Range folds
as a whole; one computed at run time is refused by its own name). An If in a body
stays an If, replaced by the branch it takes where its condition folds (`fold`)."""


def expand_functions(model: onnx.ModelProto, nodes: list[onnx.NodeProto], opset: int,
                     table: frozenset[str]) -> list[onnx.NodeProto]:  # fmt: skip
    """`nodes` with every node whose operator is not in `table` but is a function of
    others replaced by its body (named after the node: `node/Op_i`), bodies within
    bodies too. Rounds until none is left: shape inference may stop at an operator it
    cannot type (GroupNormalization), the types past it known once it is expanded."""
    while True:
        wanted = [n for n in nodes if n.op_type not in table and n.domain in ("", "ai.onnx")]
        types = _value_types(model, nodes) if wanted else {}
        bodies = {id(n): body for n in wanted if (body := _body(n, opset, types)) is not None}
        if not bodies:
            return nodes
        nodes = [m for n in nodes for m in bodies.get(id(n), [n])]


def _value_types(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> dict[str, onnx.TypeProto]:
    """Every value's type as onnx's shape inference finds it (a context-dependent
    function is made for its inputs' types)."""
    inputs = {i.name for i in model.graph.input}
    weights = [onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in model.graph.initializer
               if t.name not in inputs]  # their types, not their bytes  # fmt: skip
    graph = onnx.helper.make_graph(nodes, model.graph.name, [*model.graph.input, *weights], model.graph.output)
    inferred = onnx.shape_inference.infer_shapes(onnx.helper.make_model(
        graph, opset_imports=model.opset_import, ir_version=model.ir_version)).graph  # fmt: skip
    return {v.name: v.type for v in [*inferred.input, *inferred.value_info, *inferred.output]}


def _body(node: onnx.NodeProto, opset: int, types: dict[str, onnx.TypeProto]) -> list[onnx.NodeProto] | None:
    """The nodes of `node`'s function body at `opset`, or None where its schema defines
    none there, a context-dependent one lacks an input's type, or the body branches or
    loops."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
    except onnx.defs.SchemaError:
        return None
    plain = [v for v in schema.function_opset_versions if v <= opset]
    contextual = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    if not plain and not contextual:
        return None
    given = onnx.NodeProto.FromString(node.SerializeToString())
    given.attribute.extend(a.default_value for name, a in schema.attributes.items()
                           if a.default_value.name and name not in {g.name for g in node.attribute})  # fmt: skip
    if contextual and (not plain or max(contextual) >= max(plain)):
        if any(name and name not in types for name in node.input):
            return None
        made = schema.get_context_dependent_function_with_opset_version(max(contextual), given.SerializeToString(), [
            (types[i] if i else onnx.TypeProto()).SerializeToString() for i in node.input])
    else:
        made = schema.get_function_with_opset_version(max(plain))
    function = onnx.FunctionProto.FromString(made)
    if any(n.op_type in CONTROL_FLOW for n in function.node):
        return None
    body = function_expand_helper(given, function, f"{node.name}/")
    for i, n in enumerate(body):
        n.name = f"{node.name}/{n.op_type}_{i}"
    return body
