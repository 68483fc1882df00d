"""ONNX (opsets 11-25) to the graph IR, with onnx's shape inference for static shapes.

Rejected with one line naming the node and operator: an unsupported operator, a
dynamic or unknown dimension, an opset outside 11-25, a malformed file. After import:
`Constant` nodes become constants, nodes whose inputs are all constant are folded by
the reference interpreter, and a BatchNormalization whose input is a Conv read by
nothing else is folded into that Conv's weights and bias.
"""

from __future__ import annotations

import math
from pathlib import Path

import onnx
from onnx import helper, numpy_helper, shape_inference

from autoconfig.errors import AutoconfigError
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.ops import OPERATORS

OPSETS = (11, 25)
SUPPORTED = frozenset(OPERATORS)
"""The operators of the operator table."""

SHAPE_TENSOR_ELEMENTS = 64
"""Initializers up to this many elements stay in the model shape inference reads (a
Reshape's target shape, a Resize's scales, a Pad's pads: their values decide shapes);
larger ones are weights, whose values never do, and go in as typed inputs."""


def load_onnx(path: Path | str) -> Graph:
    """Read, check and import an ONNX file; fold constants and BatchNormalization."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise AutoconfigError(f"cannot read {path}: no such file") from None
    except Exception as err:  # onnx raises DecodeError and others for malformed files
        raise AutoconfigError(f"{path} is not a valid ONNX model: {' '.join(str(err).split())}") from None
    return import_model(model, path.name)


def import_model(model: onnx.ModelProto, source: str = "model") -> Graph:
    """The graph IR of an in-memory ONNX model."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or not OPSETS[0] <= opset <= OPSETS[1]:
        raise AutoconfigError(f"{source}: ONNX opset {opset} is not supported ({OPSETS[0]}-{OPSETS[1]})")
    for node in model.graph.node:
        if node.op_type not in SUPPORTED or node.domain not in ("", "ai.onnx"):
            raise AutoconfigError(f"{source}: node {node.name or '?'!r}: unsupported operator {node.op_type}")
    try:
        inferred = shape_inference.infer_shapes(_without_weights(model), check_type=True, strict_mode=True)
    except Exception as err:
        raise AutoconfigError(f"{source}: shape inference failed: {' '.join(str(err).split())[:300]}") from None
    g = inferred.graph
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    types: dict[str, TensorType] = {}
    dynamic: dict[str, str] = {}  # value -> why it has no static type
    for info in [*g.input, *g.value_info, *g.output]:
        if info.name not in constants:
            kind = _tensor_type(info)
            if isinstance(kind, str):
                dynamic[info.name] = kind
            else:
                types[info.name] = kind
    for name, array in constants.items():
        types[name] = TensorType(tuple(array.shape), array.dtype.name)
    nodes = []
    for i, n in enumerate(g.node):
        attrs = {a.name: _attribute(a) for a in n.attribute}
        if n.op_type == "Softmax" and opset < 13:  # before 13: flatten at axis (default 1)
            attrs = {"legacy_axis": attrs.get("axis", 1)}
        if n.op_type == "Split" and "split" not in attrs and (len(n.input) < 2 or not n.input[1]):
            attrs.setdefault("num_outputs", len(n.output))  # an equal split into the outputs
        node = Node(n.name or f"{n.op_type}_{i}", n.op_type, list(n.input), list(n.output), attrs)
        try:
            OPERATORS[node.op].check(attrs)
        except ValueError as err:
            raise AutoconfigError(f"{source}: node {node.name!r} ({node.op}): {err}") from None
        for value in (*node.inputs, *node.outputs):
            if value in dynamic:
                raise AutoconfigError(f"{source}: node {node.name!r} ({node.op}): {value!r} {dynamic[value]}")
        for out in node.outputs:
            if out and out not in types:
                raise AutoconfigError(f"{source}: node {node.name!r} ({node.op}): output {out!r} has no inferred shape")
        nodes.append(node)
    inputs = [i.name for i in g.input if i.name not in constants]
    graph = Graph(nodes, types, constants, inputs, [o.name for o in g.output], g.name or source)
    from autoconfig.graph.simplify import simplify

    return simplify(graph)


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its weights replaced by typed graph inputs of the same names:
    onnx's shape inference serializes the model it is given, and VGG-16's 553 MB of
    weights made that 6 s of a 20 s build."""
    g = model.graph
    listed = {i.name for i in g.input}
    weights = [t for t in g.initializer if math.prod(t.dims) > SHAPE_TENSOR_ELEMENTS]
    inputs = [*g.input, *(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                          for t in weights if t.name not in listed)]  # fmt: skip
    heavy = {t.name for t in weights}
    small = [t for t in g.initializer if t.name not in heavy]
    graph = helper.make_graph(g.node, g.name, inputs, g.output, small, value_info=g.value_info)
    skeleton = helper.make_model(graph, opset_imports=model.opset_import, functions=model.functions)
    skeleton.ir_version = model.ir_version
    return skeleton


def _tensor_type(info: onnx.ValueInfoProto) -> TensorType | str:
    """The static type, or what keeps it from being one, as the end of a sentence."""
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        return f"is a {kind.removesuffix('_type') if kind else 'typeless'} value, not a tensor"
    tensor = info.type.tensor_type
    if not tensor.HasField("shape"):
        return f"has a dynamic dimension 'unknown rank'; {STATIC}"
    dims = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            return f"has a negative size ({d.dim_value}) in onnx's shape inference"
        if not d.HasField("dim_value"):
            return f"has a dynamic dimension {d.dim_param or '?'!r}; {STATIC}"
        dims.append(d.dim_value)
    return TensorType(tuple(dims), helper.tensor_dtype_to_np_dtype(tensor.elem_type).name)


STATIC = "autoconfig needs static shapes (fix batch and image size)"


def _attribute(a: onnx.AttributeProto):
    value = helper.get_attribute_value(a)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value
