"""ONNX (opsets 11-28) to the graph IR, with onnx's shape inference for static shapes.

First every node computable before the model runs folds into a constant
(`autoconfig.graph.fold`: constants and shape arithmetic, whatever its operators); what
is left must be in the operator table. Rejected with one line: the unsupported operator
kinds left (all of them, each with its first node), a dynamic or unknown dimension, an
opset outside 11-28, a malformed file. Then `simplify` (Identity, BatchNormalization
into a Conv, interpolating Resize as products).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from autoconfig.errors import AutoconfigError
from autoconfig.graph.fold import fold
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.ops import OPERATORS, Kernel

OPSETS = (11, 28)
SUPPORTED = frozenset(OPERATORS)
"""The operators of the operator table."""


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
    folded = fold(model, _named(model.graph.node), opset, source)
    _check_supported(folded.nodes, source)
    g, constants = folded.inferred, folded.constants
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
    nodes = [_node(n, opset, types, dynamic, source) for n in g.node]
    inputs = [i.name for i in model.graph.input if i.name not in constants]
    graph = Graph(nodes, types, constants, inputs, [o.name for o in g.output], g.name or source)
    from autoconfig.graph.simplify import simplify

    return simplify(graph)


def _named(nodes) -> list[onnx.NodeProto]:
    """The nodes, each unnamed one a copy named after its operator and place in the file
    (`Conv_12`): one name for every message, the report and the kernels."""
    named = []
    for i, n in enumerate(nodes):
        if not n.name:
            n = onnx.NodeProto.FromString(n.SerializeToString())  # the caller's model stays as it was
            n.name = f"{n.op_type}_{i}"
        named.append(n)
    return named


def _check_supported(nodes: list[onnx.NodeProto], source: str) -> None:
    """One line naming every operator kind left that the table lacks, each with its first node."""
    missing: dict[str, list[str]] = {}
    for node in nodes:
        if node.op_type not in SUPPORTED or node.domain not in ("", "ai.onnx"):
            missing.setdefault(node.op_type, []).append(node.name)
    if not missing:
        return
    if len(missing) == 1:
        (op, names), = missing.items()
        more = f" ({len(names)} nodes)" if len(names) > 1 else ""
        raise AutoconfigError(f"{source}: node {names[0]!r}: unsupported operator {op}{more}")
    kinds = [f"{op} x{len(names)} (first node {names[0]!r})" for op, names in missing.items()]
    raise AutoconfigError(f"{source}: unsupported operators ({len(kinds)} kinds): {', '.join(kinds)}")


def _node(n: onnx.NodeProto, opset: int, types: dict[str, TensorType], dynamic: dict[str, str],
          source: str) -> Node:  # fmt: skip
    """The IR node of an ONNX node left after folding, its attributes checked."""
    attrs = {a.name: _attribute(a) for a in n.attribute}
    if n.op_type in ("Softmax", "LogSoftmax") and opset < 13:  # before 13: flatten at axis (default 1)
        attrs = {"legacy_axis": attrs.get("axis", 1)}
    if n.op_type == "Split" and "split" not in attrs and (len(n.input) < 2 or not n.input[1]):
        attrs.setdefault("num_outputs", len(n.output))  # an equal split into the outputs
    node = Node(n.name, n.op_type, list(n.input), list(n.output), attrs)
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
    if OPERATORS[node.op].kernel is Kernel.VIEW and types[node.inputs[0]].elements != types[node.outputs[0]].elements:
        x, y = types[node.inputs[0]].shape, types[node.outputs[0]].shape
        raise AutoconfigError(f"{source}: node {node.name!r} ({node.op}): {list(x)} and {list(y)} differ in size")
    return node


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
