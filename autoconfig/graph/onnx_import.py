"""ONNX (opsets 11-28) to the graph IR, with onnx's shape inference for static shapes.

First every node computable before the model runs folds into a constant
(`autoconfig.graph.fold`: constants and shape arithmetic, whatever its operators); what
is left must be in the operator table. Rejected with one line: the unsupported operator
kinds left (all of them, each with its first node), a dynamic or unknown dimension, an
opset after 28, a malformed file; a model of an opset before 11 is first converted to
11 by onnx's version converter. Then `simplify` (Identity, BatchNormalization
into a Conv, interpolating Resize as products).
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper, version_converter

from autoconfig.errors import AutoconfigError
from autoconfig.graph.fold import fold
from autoconfig.graph.functions import expand_functions
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.ops import OPERATORS, Kernel

OPSETS = (11, 28)
SUPPORTED = frozenset(op for op, row in OPERATORS.items() if not row.made)
"""The operators of the operator table."""


Shapes = dict[str, "int | tuple[int, ...]"]
"""Sizes given for a model's dynamic dimensions: an input's name with its whole shape,
or a named dimension (an ONNX dim_param such as 'batch_size') with its size."""


def load_onnx(path: Path | str, shapes: Shapes | None = None) -> Graph:
    """Read, check and import an ONNX file, with `shapes` fixing its dynamic dimensions;
    fold constants and BatchNormalization."""
    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError:
        raise AutoconfigError(f"cannot read {path}: no such file") from None
    except Exception as err:  # onnx raises DecodeError and others for malformed files
        raise AutoconfigError(f"{path} is not a valid ONNX model: {' '.join(str(err).split())}") from None
    return import_model(model, path.name, shapes)


def import_model(model: onnx.ModelProto, source: str = "model", shapes: Shapes | None = None) -> Graph:
    """The graph IR of an in-memory ONNX model, `shapes` fixing its dynamic dimensions."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < OPSETS[0]:
        model, opset = _raised(model, opset, source), OPSETS[0]
    if opset is None or not OPSETS[0] <= opset <= OPSETS[1]:
        raise AutoconfigError(f"{source}: ONNX opset {opset} is not supported ({OPSETS[0]}-{OPSETS[1]})")
    if shapes:
        model = with_shapes(model, shapes, source)
    for info in model.graph.input:  # before folding: shape arithmetic folds only on static shapes
        kind = _tensor_type(info)
        if isinstance(kind, str) and info.name not in {t.name for t in model.graph.initializer}:
            raise AutoconfigError(f"{source}: input {info.name!r} {kind}")
    folded = fold(model, expand_functions(model, _named(model.graph.node), opset, SUPPORTED), opset, source)
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


def _raised(model: onnx.ModelProto, opset: int, source: str) -> onnx.ModelProto:
    """A model of an opset before the first supported one, converted to it by onnx's
    version converter (each operator's changes between opsets are its adapters); an
    operator ONNX does not define (which it cannot convert) is named as unsupported."""
    _check_supported([n for n in _named(model.graph.node) if not onnx.defs.has(n.op_type, n.domain)], source)
    try:
        return version_converter.convert_version(model, OPSETS[0])
    except Exception as err:  # the converter raises RuntimeError and others for operators it cannot move
        why = " ".join(str(err).split())
        raise AutoconfigError(f"{source}: ONNX opset {opset} is below {OPSETS[0]}, and onnx's version converter "
                              f"could not raise it: {why}") from None


def with_shapes(model: onnx.ModelProto, shapes: Shapes, source: str) -> onnx.ModelProto:
    """A copy of `model` whose inputs have the `shapes` given (an input by name, or a
    named dimension wherever it appears), its other values' shapes left to inference."""
    fixed = onnx.ModelProto.FromString(model.SerializeToString())
    g = fixed.graph
    inputs = {i.name: i for i in g.input if i.name not in {t.name for t in g.initializer}}
    named = {d.dim_param for v in [*g.input, *g.output] for d in v.type.tensor_type.shape.dim if d.dim_param}
    for name, size in shapes.items():
        if name not in inputs and name not in named:
            raise AutoconfigError(f"{source}: --shape {name}: neither an input ({', '.join(inputs)}) nor a named "
                                  f"dimension ({', '.join(sorted(named)) or 'none'}) of the model")  # fmt: skip
        if name in inputs:
            dims = inputs[name].type.tensor_type.shape.dim
            given = (size,) if isinstance(size, int) else tuple(size)
            if len(given) != len(dims):
                raise AutoconfigError(f"{source}: --shape {name}: {len(given)} sizes for an input of rank {len(dims)}")
            for d, value in zip(dims, given):
                d.Clear()
                d.dim_value = value
    for value in [*g.input, *g.output]:
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param in shapes and not isinstance(shapes[d.dim_param], tuple):
                d.dim_value = int(shapes[d.dim_param])
    del g.value_info[:]  # inferred again from the shapes given
    return fixed


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
    if n.op_type in ("Softmax", "LogSoftmax", "Hardmax") and opset < 13:  # before 13: flatten at axis (default 1)
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
        return f"has an unknown rank: {WHOLE_SHAPE}"
    dims = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            return f"has a negative size ({d.dim_value}) in onnx's shape inference"
        if not d.HasField("dim_value"):
            how = f"give its size with --shape {d.dim_param}=SIZE" if d.dim_param else WHOLE_SHAPE
            return f"has a dynamic dimension {d.dim_param or '?'!r}: {how}"
        dims.append(d.dim_value)
    return TensorType(tuple(dims), helper.tensor_dtype_to_np_dtype(tensor.elem_type).name)


WHOLE_SHAPE = "give the input's whole shape with --shape INPUT=1x3x224x224 (autoconfig builds static shapes)"


def _attribute(a: onnx.AttributeProto):
    value = helper.get_attribute_value(a)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode() for v in value]
    return value
