"""The fold pass, first at import: every node computable before the model runs becomes a
constant, whatever its operator.

Reads an ONNX model; writes the nodes left to run, the constants (the initializers and
every folded value) and onnx's shape inference of what is left. A node folds when all
its inputs are constants (or empty: a tensor of no elements has one value), or when it
reads one only for its shape or type (Shape, Size, CastLike's target, EyeLike) and that is
static, or picks elements of a constant holding one value (Gather, GatherElements): so
the shape arithmetic exporters write (Shape → Gather → Concat → Reshape,
ConstantOfShape, Range, Expand, Equal/Where/Cast on int64 ...) and the constants of
ONNX's function bodies (CastLike of a Constant to the input's type) fold whatever
operators they use. Values are computed by onnx's own reference implementation
(`onnx.reference`) at the model's opset, not by a copy written here. Folding and shape
inference alternate until nothing more folds: a folded Reshape target makes the next
shapes static.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from autoconfig.errors import AutoconfigError
from autoconfig.graph.reference import gather_elements, onnx_node_outputs

SHAPE_READS = {"Shape": 0, "Size": 0, "CastLike": 1, "EyeLike": 0}
"""Operators with an input read only for its shape or type, not its values (CastLike's
target, the matrix EyeLike copies the shape of): they fold once that type and shape
are static."""

SELECTORS = frozenset({"Gather", "GatherElements"})
"""Operators that pick elements of their first input by the indices of their second:
from a constant holding one value throughout (a buffer of zero token types), what they
pick is known whatever the indices (assumed in range, as everywhere)."""

DRAWN = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                   "Bernoulli"})  # fmt: skip
"""Operators whose output is drawn anew on every run: never constants."""

OWN_FOLDS = {"GatherElements": lambda node, data, index: [gather_elements(
    {a.name: a.i for a in node.attribute}, data, index)]}
"""Operators folded by numpy here: onnx's reference fails on GatherElements whose index
is smaller than its data along another axis (BERT's token type ids)."""

SHAPE_TENSOR_ELEMENTS = 64
"""Constants up to this many elements stay in the model shape inference reads (a
Reshape's target shape, a Resize's scales, a Pad's pads: their values decide shapes);
larger ones are weights, whose values never do, and go in as typed inputs."""


@dataclass
class Folded:
    """What the fold pass leaves: the nodes still to run, every constant, and onnx's
    shape inference of the model made of them."""

    nodes: list[onnx.NodeProto]
    constants: dict[str, np.ndarray]
    inferred: onnx.GraphProto


def fold(model: onnx.ModelProto, nodes: list[onnx.NodeProto], opset: int, source: str) -> Folded:
    """Fold every node of `nodes` (the model's, named) computable from constants and
    static shapes (see the module)."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes: dict[str, tuple] = {}
    inferred = None
    while True:  # fold what the constants alone give before inferring (an If's untaken branch may not infer)
        nodes, changed = _folded_once(nodes, constants, shapes, opset, source)
        if changed:
            inferred = None
        elif inferred is not None:
            return Folded(nodes, constants, inferred)
        else:
            inferred = _inferred(model, nodes, constants, source)
            shapes = _static_shapes(inferred)


def _folded_once(nodes: list[onnx.NodeProto], constants: dict[str, np.ndarray], shapes: dict[str, tuple],
                 opset: int, source: str) -> tuple[list[onnx.NodeProto], bool]:  # fmt: skip
    """One pass over `nodes` folding those computable now (into `constants`) and
    inlining each If on a constant condition; the nodes left, and whether any was."""
    left, changed = [], False
    for node in nodes:
        if node.op_type == "If" and node.input[0] in constants:
            left += _taken_branch(node, bool(constants[node.input[0]].reshape(-1)[0]), constants)
            changed = True
        elif _foldable(node, constants, shapes):
            constants.update(_evaluate(node, constants, shapes, opset, source))
            changed = True
        else:
            left.append(node)
    return left, changed


def _taken_branch(node: onnx.NodeProto, condition: bool, constants: dict[str, np.ndarray]) -> list[onnx.NodeProto]:
    """An If whose condition is a constant as the nodes of the branch it takes, their
    values renamed under the If's name (the branch's own names may repeat the
    enclosing graph's), its initializers constants, and Identity nodes from the
    branch's outputs to the If's."""
    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if condition else "else_branch"))
    renamed = {v: f"{node.name}/{v}" for n in branch.node for v in n.output if v}
    renamed |= {t.name: f"{node.name}/{t.name}" for t in branch.initializer}
    constants.update({renamed[t.name]: numpy_helper.to_array(t) for t in branch.initializer})
    nodes = [onnx.NodeProto.FromString(n.SerializeToString()) for n in branch.node]
    for n in nodes:
        _rename(n, renamed)
        n.name = f"{node.name}/{n.name or n.op_type}"
    return nodes + [helper.make_node("Identity", [renamed.get(o.name, o.name)], [out], name=f"{node.name}/{out}")
                    for o, out in zip(branch.output, node.output)]  # fmt: skip


def _rename(node: onnx.NodeProto, renamed: dict[str, str]) -> None:
    """`node`'s inputs and outputs renamed, and the inputs of the nodes of its own
    subgraphs (which may read the branch's values)."""
    node.input[:] = [renamed.get(v, v) for v in node.input]
    node.output[:] = [renamed.get(v, v) for v in node.output]
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
            for inner in graph.node:
                inner.input[:] = [renamed.get(v, v) for v in inner.input]


def _foldable(node: onnx.NodeProto, constants: dict[str, np.ndarray], shapes: dict[str, tuple]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type in DRAWN:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False  # If, Loop, Scan: their bodies read values of the enclosing graph
    if node.op_type in SELECTORS and _uniform(constants.get(node.input[0])):
        return node.input[1] in constants or node.input[1] in shapes
    shape_read = SHAPE_READS.get(node.op_type)
    return all(not name or name in constants or _empty(name, shapes) or (i == shape_read and name in shapes)
               for i, name in enumerate(node.input))  # fmt: skip


def _uniform(array: np.ndarray | None) -> bool:
    """Whether `array` is a constant of one value throughout (and of some elements)."""
    if array is None or array.size == 0:
        return False
    flat = array.reshape(-1)
    return bool(flat[-1] == flat[0]) and bool((flat == flat[0]).all())  # a table's last entry rules most out


def _empty(name: str, shapes: dict[str, tuple]) -> bool:
    """Whether a value has no elements, so its value is known (`_evaluate` feeds it)."""
    return name in shapes and math.prod(shapes[name][1]) == 0


def _evaluate(node: onnx.NodeProto, constants: dict[str, np.ndarray], shapes: dict[str, tuple],
              opset: int, source: str) -> dict[str, np.ndarray]:  # fmt: skip
    """The node's outputs by onnx's reference implementation; an input read for its shape,
    or a selector's indices into a constant of one value, is a zero-strided array of
    zeros of the right shape (no memory: only its shape matters)."""
    feeds = {}
    for name in node.input:
        if name in constants:
            feeds[name] = constants[name]
        elif name:
            dtype, shape = shapes[name]
            feeds[name] = np.broadcast_to(np.zeros((), dtype), shape)
    try:
        own = OWN_FOLDS.get(node.op_type)
        outputs = own(node, *(feeds[i] for i in node.input)) if own else onnx_node_outputs(node, feeds, opset)
    except Exception as err:  # onnx's reference raises whatever its numpy code meets
        raise AutoconfigError(f"{source}: node {node.name!r} ({node.op_type}): cannot fold its constant "
                              f"inputs: {' '.join(str(err).split())[:200]}") from None  # fmt: skip
    return {name: np.asarray(value) for name, value in zip(node.output, outputs) if name}


def _inferred(model: onnx.ModelProto, nodes: list[onnx.NodeProto], constants: dict[str, np.ndarray],
              source: str) -> onnx.GraphProto:  # fmt: skip
    """onnx's shape inference of `nodes` over `constants`, strict, with shape values
    propagated (data_prop): a Reshape whose target is computed gets its shape."""
    try:
        return shape_inference.infer_shapes(_skeleton(model, nodes, constants), check_type=True, strict_mode=True,
                                            data_prop=True).graph  # fmt: skip
    except Exception as err:
        raise AutoconfigError(f"{source}: shape inference failed: {' '.join(str(err).split())[:300]}") from None


def _skeleton(model: onnx.ModelProto, nodes: list[onnx.NodeProto], constants: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The model of `nodes`, its small constants as initializers and its large ones
    (weights) as typed graph inputs of the same names: onnx's shape inference serializes
    the model it is given, and VGG-16's 553 MB of weights made that 6 s of a 20 s build."""
    g = model.graph
    read = {i for n in nodes for i in n.input} | {o.name for o in g.output}
    listed = {i.name for i in g.input}
    small = [numpy_helper.from_array(np.asarray(a), name) for name, a in constants.items()
             if name in read and math.prod(a.shape) <= SHAPE_TENSOR_ELEMENTS]  # fmt: skip
    heavy = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
             for name, a in constants.items()
             if name in read and name not in listed and math.prod(a.shape) > SHAPE_TENSOR_ELEMENTS]  # fmt: skip
    inputs = [i for i in g.input if i.name not in constants or math.prod(constants[i.name].shape) > SHAPE_TENSOR_ELEMENTS]
    graph = helper.make_graph(nodes, g.name, [*inputs, *heavy], g.output, small, value_info=g.value_info)
    skeleton = helper.make_model(graph, opset_imports=model.opset_import, functions=model.functions)
    skeleton.ir_version = model.ir_version
    return skeleton


def _static_shapes(graph: onnx.GraphProto) -> dict[str, tuple]:
    """(numpy dtype, shape) of every value whose inferred shape is static."""
    shapes = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        if info.type.HasField("tensor_type") and tensor.HasField("shape") and all(
                d.HasField("dim_value") and d.dim_value >= 0 for d in tensor.shape.dim):  # fmt: skip
            shapes[info.name] = (helper.tensor_dtype_to_np_dtype(tensor.elem_type),
                                 tuple(d.dim_value for d in tensor.shape.dim))  # fmt: skip
    return shapes
