"""Graph simplifications applied at import, after the fold pass (`graph.fold`).

- Max, Min, Sum and Mean of one input become an Identity, of more a chain of pairs (a
  Mean's sum scaled); PRelu a LeakyRelu or Relu(x) − slope·Relu(−x); an inference
  Dropout an Identity; DepthToSpace, SpaceToDepth and Tile views and a Transpose or an
  Expand (`_rearranged`); a Transpose that moves only axes of one a Reshape
  (`_view_transpose`); LRN its definition, the window's sum of squares a 1x1
  convolution (`_lrn_as_ops`); a Where whose branches are both tensors, two selections with
  one constant branch, added;
- ReduceSum, ReduceSumSquare, ReduceL1, ReduceL2 and ReduceLogSum become a ReduceMean
  times the count, with the ops before and after it, ReduceMin a ReduceMax between two
  negations (`_reductions_as_others`); ReduceLogSumExp and LogSoftmax through the
  maximum and the log of the sum of e^(x − max) (`_log_sum_exps`); an Einsum, a batched
  MatMul between transposes (`_einsum_as_products`);
- `Identity` nodes disappear (their outputs become aliases), and so does a node that
  computes what an earlier one did (the same operator, attributes and inputs);
- BatchNormalization after a Conv that nothing else reads is folded into the Conv:
  W' = W·γ/√(σ²+ε) per output channel, b' = (b − μ)·γ/√(σ²+ε) + β;
- a linear or cubic Resize with constant scales, sizes and roi becomes one matrix
  product per resized axis (`_resize_as_products`): interpolation is separable, and
  each axis' weights are a constant out × in matrix;
- a CumSum becomes one matrix product along its axis, by a constant triangle of ones
  (`_cumsum_as_product`);
- LSTM, GRU and RNN become their projections for every step at once and a Recurrence
  node per direction that runs the steps (`graph.recurrent`);
- a 1-D convolution becomes a 2-D one over rows of one pixel (`_conv1d_as_2d`), a
  3-D one a 2-D one over each output depth's input slices stacked as channels
  (`_conv3d_as_2d`);
- ConvTranspose becomes the convolution it is the transpose of (`_transposed_conv`):
  zeros inserted between the input's pixels, then a stride-1 convolution by the
  flipped filters (s² the multiply-adds of the scatter form at stride s); Col2Im a
  ConvTranspose by one-hot filters (`_col2im_as_transposed_conv`);
- a convolution's taps that read only padding at every output position (a dilated
  window wider than its input, as in DeepLab's atrous pyramid) are dropped, with the
  pads shortened to match (`_live_taps`): the same sums, fewer multiply-adds; and
  where most of the rest would still read padding, the outputs split into regions that
  read the same taps, each region an unpadded convolution of its own (`_tap_regions`);
- GELU written out (x · ½ · (1 + erf(x/√2)) as Div, Erf, Add and Muls, or its tanh
  approximation) becomes one Gelu node (`_gelu_as_one`), which a matrix product applies
  as its epilogue;
- a view read only by elementwise ops moves after them (`_views_after_elementwise`):
  a product flattened to 2-D and viewed back takes its residual add as its epilogue;
- CastLike becomes a Cast to its second input's type (`_cast_like`); Trilu a Where
  keeping x on one side of a constant triangle, 0 elsewhere (`_trilu_as_selection`);
- GatherND by indices computed at run time becomes a Gather of the data's rows by
  each index tuple's row (`_gather_nd_by_rows`);
- ScatterND and ScatterElements by constant indices become one Gather of the data and
  the updates by a constant index per element, with a reduction the data combined with
  such Gathers of the updates (`_scatter_as_gather`);
- InstanceNormalization, and LayerNormalization whose mean or inverse deviation is
  read (else it is one kernel of its own, as RMSNormalization is), become their
  definition
  (`_normalized_as_ops`): the mean and variance over the normalized axes (ReduceMean;
  the spatial axes per image and channel, or the axes from `axis` on), then
  elementwise ops, which the fusion planner groups like any others;
- a root-mean-square norm written out (x · 1/√(mean(x²) + ε), times a constant scale)
  becomes one RMSNormalization node (`_rms_norm_as_one`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import numpy as np
import onnx

from autoconfig import movement
from autoconfig.errors import AutoconfigError
from autoconfig.families.elementwise import INTEGERS
from autoconfig.graph import recurrent
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.ops import OPERATORS, Kernel, Pattern, einsum_terms, info, reduced_axes, transpose_perm
from autoconfig.graph.reference import resize_axis, resize_shape
from autoconfig.graph.windows import window_pads


def simplify(graph: Graph) -> Graph:
    """Fold BatchNormalization; drop Identity and repeated computations; keep
    topological order."""
    for rewrite in (_variadic_in_pairs, _prelu, _dropout, _rearranged, _view_transpose, _lrn_as_ops, _cast_like,
                    _trilu_as_selection, _lp_normalization, _lp_pool, _reduce_prod, _scatter_as_gather,
                    _gather_nd_by_rows, _affine_grid, _grid_sample, _one_hot, _reverse_sequence):
        _rewritten(graph, rewrite)
    _bools_as_floats(graph)
    for rewrite in (_selections_of_two, _einsum_as_products, _reductions_as_others, _log_sum_exps, _arg_extremes,
                    _hardmax, _top_k):
        _rewritten(graph, rewrite)
    _int64_inputs(graph)
    _rewritten(graph, _mod)  # on integers held as float32 too
    _gathers_before_transposes(graph)
    _concats_of_slices(graph)
    _scales_before_moves(graph)
    nodes: list[Node] = []
    alias: dict[str, str] = {}
    computed: dict[tuple, Node] = {}  # a node's operator, inputs and attributes -> the first node so
    for node in graph.nodes:
        node.inputs = [alias.get(i, i) for i in node.inputs]
        if node.op == "Identity" and node.outputs[0] not in graph.outputs:
            alias[node.outputs[0]] = node.inputs[0]
            continue
        first = computed.setdefault(_computation(graph, node), node)
        if first is not node and not set(node.outputs) & set(graph.outputs):  # computed already: the same values
            alias.update(zip(node.outputs, first.outputs))
            continue
        nodes.append(node)
    graph.nodes = _all_lowered(graph, nodes)
    graph.outputs = [alias.get(o, o) for o in graph.outputs]
    _fold_batchnorm(graph)
    graph.nodes = [region for node in graph.nodes for region in _tap_regions(graph, node)]
    _gelu_as_one(graph)
    _rms_norm_as_one(graph)
    _scales_after_products(graph)
    _views_after_elementwise(graph)
    _views_of_views(graph)
    _drop_unused_constants(graph)
    return graph


POWERS_AS_PRODUCTS = 4
"""Integer exponents up to this become repeated products (GPT-2's x³)."""


def _rewritten(graph: Graph, rewrite: Callable[[Graph, Node], list[Node] | None]) -> None:
    """Each node for which `rewrite` returns nodes replaced by them, in place."""
    made: list[Node] = []
    for node in graph.nodes:
        replaced = rewrite(graph, node)
        made += [node] if replaced is None else replaced
    graph.nodes = made


VARIADIC = {"Max": "Max", "Min": "Min", "Sum": "Add", "Mean": "Add"}
"""Operators of any number of inputs that the kernels compute two at a time, and the
operator of each pair (a Mean's sum is then scaled by 1/n)."""


def _variadic_in_pairs(graph: Graph, node: Node) -> list[Node] | None:
    """Max, Min, Sum or Mean of one input becomes an Identity, of more a chain of pairs
    (each pair's result broadcast to both); a Mean's sum is multiplied by 1/n."""
    pair = VARIADIC.get(node.op)
    if pair is None or (pair == node.op and len(node.inputs) == 2):
        return None
    if len(node.inputs) == 1:
        return [Node(node.name, "Identity", node.inputs, node.outputs, {})]
    value, out, m = node.inputs[0], node.outputs[0], _Made(graph, node.name)
    shape = graph.types[out].shape
    for i, other in enumerate(node.inputs[1:], 1):
        last = i == len(node.inputs) - 1 and node.op != "Mean"
        step = np.broadcast_shapes(graph.types[value].shape, graph.types[other].shape)
        value = m.op(pair, [value, other], shape if last else tuple(step), out=out if last else "")
    if node.op == "Mean":
        m.op("Mul", [value, m.constant("reciprocal", np.array(1 / len(node.inputs), np.float32))], shape, out=out)
    return m.nodes


def _view_transpose(graph: Graph, node: Node) -> list[Node] | None:
    """A Transpose that moves only axes of one (a batch of one between sequence and
    width) keeps every element where it was: a Reshape, which a neighbouring kernel reads
    or writes through."""
    if node.op != "Transpose":
        return None
    shape = graph.types[node.inputs[0]].shape
    moved = [a for a in transpose_perm(node, len(shape)) if shape[a] != 1]
    if moved != sorted(moved):
        return None
    target = _shape_constant(graph, node.outputs[0], graph.types[node.outputs[0]].shape)
    return [Node(node.name, "Reshape", [node.inputs[0], target], list(node.outputs), {})]


REARRANGED = ("DepthToSpace", "SpaceToDepth", "Tile")
"""Data movement computed as views and the movements the kernels have."""


def _rearranged(graph: Graph, node: Node) -> list[Node] | None:
    """DepthToSpace and SpaceToDepth become a Reshape, a Transpose and a Reshape (the
    spec's definition, DCR or CRD); Tile an Expand between Reshapes: each axis given a
    repeat axis before it, expanded to the repeats, merged back."""
    if node.op not in REARRANGED:
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape, wanted = graph.types[x].shape, graph.types[out].shape
    if node.op == "Tile":
        if not graph.is_constant(node.inputs[1]):
            raise AutoconfigError(f"node {node.name!r} (Tile): repeats computed at run time are not generated")
        repeats = np.asarray(graph.constants[node.inputs[1]]).reshape(-1)
        grown = tuple(int(d) for r, size in zip(repeats, shape) for d in (r, size))
        spread = m.reshape(x, tuple(d for size in shape for d in (1, size)))
        m.reshape(m.op("Expand", [spread, m.constant("grown", np.array(grown, np.int64))], grown), wanted, out=out)
    else:
        split, perm = _depth_space_axes(node, shape)
        moved = m.op("Transpose", [m.reshape(x, split)], tuple(split[p] for p in perm), perm=perm)
        m.reshape(moved, wanted, out=out)
    return m.nodes


def _depth_space_axes(node: Node, shape: tuple[int, ...]) -> tuple[tuple[int, ...], list[int]]:
    """The 6-D split of a DepthToSpace's or SpaceToDepth's input and the permutation of
    its axes (ONNX's definitions)."""
    (n, c, h, w), size, dcr = shape, node.attrs["blocksize"], node.attrs.get("mode", "DCR") == "DCR"
    if node.op == "SpaceToDepth":
        return (n, c, h // size, size, w // size, size), [0, 3, 5, 1, 2, 4] if dcr else [0, 1, 3, 5, 2, 4]
    if dcr:
        return (n, size, size, c // size**2, h, w), [0, 3, 4, 1, 5, 2]
    return (n, c // size**2, size, size, h, w), [0, 1, 4, 2, 5, 3]


def _lrn_as_ops(graph: Graph, node: Node) -> list[Node] | None:
    """LRN becomes its definition: x / (bias + alpha/size · Σ x² over the size channels
    around each one)^beta, the window sum a 1x1 convolution by a banded 0/1 matrix and
    the power exp(−beta · log(·)) times x."""
    if node.op != "LRN":
        return None
    m, (x,), out, a = _Made(graph, node.name), node.inputs, node.outputs[0], node.attrs
    shape, size, channels = graph.types[x].shape, a["size"], graph.types[x].shape[1]
    offsets = np.arange(channels)[None, :] - np.arange(channels)[:, None]  # [output, input]: input − output
    band = ((offsets >= -((size - 1) // 2)) & (offsets <= size // 2)).astype(np.float32)  # ⌊(size−1)/2⌋ before
    window = m.constant("window", band.reshape(channels, channels, *[1] * (len(shape) - 2)))
    sums = m.op("Conv", [m.op("Mul", [x, x], shape), window], shape)
    scaled = m.op("Mul", [sums, m.constant("alpha", np.array(a.get("alpha", 1e-4) / size, np.float32))], shape)
    base = m.op("Add", [scaled, m.constant("bias", np.array(a.get("bias", 1.0), np.float32))], shape)
    power = m.op("Mul", [m.op("Log", [base], shape), m.constant("beta", np.array(-a.get("beta", 0.75), np.float32))],
                 shape)  # fmt: skip
    m.op("Mul", [x, m.op("Exp", [power], shape)], shape, out=out)
    return m.nodes


def _prelu(graph: Graph, node: Node) -> list[Node] | None:
    """PRelu by a single slope becomes LeakyRelu; by a slope per channel (or any constant
    shape), Relu(x) − slope·Relu(−x), exact for slopes of any sign and size."""
    if node.op != "PRelu":
        return None
    (x, slope), out = node.inputs, node.outputs[0]
    if not graph.is_constant(slope):
        raise AutoconfigError(f"node {node.name!r} (PRelu): a slope computed at run time is not generated")
    values = np.asarray(graph.constants[slope], np.float32)
    if values.size == 1:
        return [Node(node.name, "LeakyRelu", [x], [out], {"alpha": float(values.reshape(-1)[0])})]
    m, shape = _Made(graph, node.name), graph.types[out].shape
    negative = m.op("Relu", [m.op("Neg", [x], shape)], shape)
    m.op("Sub", [m.op("Relu", [x], shape), m.op("Mul", [negative, slope], shape)], shape, out=out)
    return m.nodes


def _dropout(graph: Graph, node: Node) -> list[Node] | None:
    """An inference Dropout (no training_mode, or a constant false one) becomes an
    Identity; its mask is not generated."""
    if node.op != "Dropout":
        return None
    training = node.inputs[2] if len(node.inputs) > 2 else ""
    if training and not (graph.is_constant(training) and not np.asarray(graph.constants[training]).any()):
        raise AutoconfigError(f"node {node.name!r} (Dropout): training mode is not generated")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise AutoconfigError(f"node {node.name!r} (Dropout): its mask output is not generated")
    return [Node(node.name, "Identity", node.inputs[:1], node.outputs[:1], {})]


def _selections_of_two(graph: Graph, node: Node) -> list[Node] | None:
    """Where(c, x, y) whose branches are neither a single constant becomes
    Where(c, x, 0) + Where(c, 0, y): each a selection with one constant branch, which
    the kernels compute, and the sum exact (one side is zero; only a −0 comes out +0)."""
    if node.op != "Where" or any(graph.is_constant(v) and graph.constants[v].size == 1 for v in node.inputs[1:]):
        return None
    m, (condition, x, y), out = _Made(graph, node.name), node.inputs, node.outputs[0]
    zero = m.constant("zero", np.zeros((), np.float32))
    shape = graph.types[out].shape
    taken = m.op("Where", [condition, x, zero], shape)
    left = m.op("Where", [condition, zero, y], shape)
    return [*m.nodes, Node(node.name, "Add", [taken, left], [out], {})]


AS_OTHERS = {"ReduceSum": ("ReduceMean", "", ""), "ReduceSumSquare": ("ReduceMean", "Square", ""),
            "ReduceL1": ("ReduceMean", "Abs", ""), "ReduceL2": ("ReduceMean", "Square", "Sqrt"),
            "ReduceLogSum": ("ReduceMean", "", "Log"), "ReduceMin": ("ReduceMax", "Neg", "Neg")}  # fmt: skip
"""Reductions computed as another (a mean, times the count; a maximum): the op on each
element first (Square: a product of the value with itself), and the op on the result
after it."""


def _reductions_as_others(graph: Graph, node: Node) -> list[Node] | None:
    """ReduceSum and the other sums become ReduceMean (the same inputs and attributes)
    of the elements as `AS_OTHERS` says, times the count of reduced elements, then the
    op after the sum: the mean kernel sums and scales once, the elementwise ops fuse
    around it; ReduceMin, the negated ReduceMax of the negated elements (exact)."""
    axes = reduced_axes(node, graph) if node.op in AS_OTHERS else None
    if axes is None:
        return None
    m, (reduction, before, after), out = _Made(graph, node.name), AS_OTHERS[node.op], node.outputs[0]
    x, shape = node.inputs[0], graph.types[out].shape
    count = math.prod(graph.types[x].shape[a] for a in axes)  # not 0: an empty tensor is folded
    if before:
        x = m.op("Mul" if before == "Square" else before, [x, x] if before == "Square" else [x],
                 graph.types[x].shape)  # fmt: skip
    total = m.op(reduction, [x, *node.inputs[1:]], shape, **node.attrs)
    if reduction == "ReduceMean":
        total = m.op("Mul", [total, m.constant("count", np.array(count, np.float32))], shape,
                     out="" if after else out)  # fmt: skip
    if after:
        m.op(after, [total], shape, out=out)
    return m.nodes


def _reduce_prod(graph: Graph, node: Node) -> list[Node] | None:
    """ReduceProd as e^(Σ ln|x|) (a zero gives 0, an infinity inf, both NaN, as products
    do), negated where the count of negatives n is odd: times 1 − 2·(n − 2⌊n/2⌋); the two
    sums are ReduceSums with the node's axes and attributes."""
    if node.op != "ReduceProd":
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape, reduced = graph.types[x].shape, graph.types[out].shape
    logs = m.op("Log", [m.op("Abs", [x], shape)], shape)
    magnitude = m.op("Exp", [m.op("ReduceSum", [logs, *node.inputs[1:]], reduced, **node.attrs)], reduced)
    below = m.op("Less", [x, m.constant("zero", np.zeros((), np.float32))], shape)
    count = m.op("ReduceSum", [below, *node.inputs[1:]], reduced, **node.attrs)
    two = m.constant("two", np.array(2, np.float32))
    half = m.op("Floor", [m.op("Mul", [count, m.constant("half", np.array(0.5, np.float32))], reduced)], reduced)
    odd = m.op("Sub", [count, m.op("Mul", [half, two], reduced)], reduced)
    sign = m.op("Sub", [m.constant("one", np.ones((), np.float32)), m.op("Mul", [odd, two], reduced)], reduced)
    m.op("Mul", [magnitude, sign], reduced, out=out)
    return m.nodes


def _arg_extremes(graph: Graph, node: Node) -> list[Node] | None:
    """ArgMax (ArgMin: of the negated elements) as maxima: p = max x along the axis, then
    the first (or, select_last_index, the last) index where x_i = p or is NaN (as onnx's
    reference: a NaN is the largest), `_hit_index`."""
    if node.op not in ("ArgMax", "ArgMin"):
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape, floats = graph.types[x].shape, graph.types[x].dtype.startswith("float")
    axis = node.attrs.get("axis", 0) % len(shape)
    kept = _kept(shape, (axis,))
    if node.op == "ArgMin":
        x = m.op("Neg", [x], shape)
    peak = m.op("ReduceMax", [x, m.constant("axes", np.array([axis], np.int64))], kept, keepdims=1)
    hits = m.op("Equal", [x, peak], shape)
    if floats:  # integers (ids: CLIP's end token is the largest) have no NaN
        hits = m.op("Or", [hits, m.op("IsNaN", [x], shape)], shape)
    flat = node.attrs.get("keepdims", 1) == 0
    index = _hit_index(m, hits, axis, bool(node.attrs.get("select_last_index", 0)), "" if flat else out)
    if flat:
        m.reshape(index, graph.types[out].shape, out=out)
    return m.nodes


def _hardmax(graph: Graph, node: Node) -> list[Node] | None:
    """Hardmax as maxima: 1 where the index along the axis is ArgMax's (`_hit_index`),
    else 0; before opset 13 (`legacy_axis`) over the axes from it on, flattened."""
    if node.op != "Hardmax":
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape = graph.types[x].shape
    if "legacy_axis" in node.attrs:
        start = node.attrs["legacy_axis"] % max(1, len(shape))
        x = m.reshape(x, (math.prod(shape[:start]), math.prod(shape[start:])))
    work, axis = graph.types[x].shape, 1 if "legacy_axis" in node.attrs else node.attrs.get("axis", -1) % len(shape)
    peak = m.op("ReduceMax", [x, m.constant("axes", np.array([axis], np.int64))], _kept(work, (axis,)), keepdims=1)
    hits = m.op("Or", [m.op("Equal", [x, peak], work), m.op("IsNaN", [x], work)], work)
    index = _hit_index(m, hits, axis)
    flat = "legacy_axis" in node.attrs
    hot = m.op("Equal", [m.constant("positions", _positions(work, axis)), index], work, out="" if flat else out)
    if flat:
        m.reshape(hot, shape, out=out)
    return m.nodes


def _hit_index(m: _Made, hits: str, axis: int, last: bool = False, out: str = "") -> str:
    """The first index along `axis` where `hits` (1.0 or 0.0) holds a 1, as
    n − max(hit · (n − i)), or the last as max(hit · (i + 1)) − 1: exact, every value an
    integer below 2^24, held as float32 like the model's other integers."""
    shape = m.graph.types[hits].shape
    n, kept, at = shape[axis], _kept(shape, (axis,)), _positions(shape, axis)
    ranked = m.op("Mul", [hits, m.constant("ranks", at + 1 if last else n - at)], shape)
    best = m.op("ReduceMax", [ranked, m.constant("axes", np.array([axis], np.int64))], kept, keepdims=1)
    offset = m.constant("offset", np.array(1 if last else n, np.float32))
    return m.op("Sub", [best, offset] if last else [offset, best], kept, out=out)


def _kept(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` reduced over `axes` with keepdims: those axes 1."""
    return tuple(1 if a in axes else d for a, d in enumerate(shape))


def _positions(shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Each index along `axis` as float32, shaped to broadcast against `shape`."""
    return np.arange(shape[axis], dtype=np.float32).reshape([d if a == axis else 1 for a, d in enumerate(shape)])


TOP_K_ROUNDS = 16
"""TopK's largest K: the K rounds of maxima each pass over the whole tensor, and beyond a
few a sorting kernel would be the tool (refused in one line)."""


def _top_k(graph: Graph, node: Node) -> list[Node] | None:
    """TopK as K rounds of maxima (the order onnx's reference gives: equal values by
    index, a NaN the largest): each round's maximum of the elements not taken yet
    (`_top_round`), its values and indices concatenated along the axis."""
    if node.op != "TopK":
        return None
    m, x, (values, indices) = _Made(graph, node.name), node.inputs[0], node.outputs
    if not graph.is_constant(node.inputs[1]):
        raise AutoconfigError(f"node {node.name!r} (TopK): K computed at run time is not generated")
    k, shape = int(graph.constants[node.inputs[1]].reshape(-1)[0]), graph.types[x].shape
    if k > TOP_K_ROUNDS:
        raise AutoconfigError(f"node {node.name!r} (TopK): K={k} is more than the {TOP_K_ROUNDS} rounds of maxima "
                              f"it is computed as")  # fmt: skip
    axis, largest = node.attrs.get("axis", -1) % len(shape), node.attrs.get("largest", 1)
    kept = _kept(shape, (axis,))
    nan = m.op("IsNaN", [x], shape)
    inf = m.constant("inf", np.array(np.inf if largest else -np.inf, np.float32))
    key = m.op("Where", [nan, inf, x if largest else m.op("Neg", [x], shape)], shape)  # a NaN first, or last
    taken, rounds = None, []
    for _ in range(k):
        taken, value, index = _top_round(m, key, nan, taken, axis, kept, largest)
        rounds.append((value, index))
    out = tuple(k if a == axis else d for a, d in enumerate(shape))
    for j, result in enumerate((values, indices)):
        m.op("Concat", [r[j] for r in rounds], out, out=result, axis=axis)
    return m.nodes


def _top_round(m: _Made, key: str, nan: str, taken: str | None, axis: int, kept: tuple[int, ...],
               largest: int) -> tuple[str, str, str]:  # fmt: skip
    """One round of TopK: among the keys not `taken` (None: the first round), the first
    index of the largest, its value (a NaN where the element was one), and `taken` with
    it added."""
    shape, along = m.graph.types[key].shape, m.constant("axes", np.array([axis], np.int64))
    lowest = m.constant("lowest", np.array(-np.inf, np.float32))
    free = key if taken is None else m.op("Where", [taken, lowest, key], shape)
    peak = m.op("ReduceMax", [free, along], kept, keepdims=1)
    hits = m.op("Equal", [key, peak], shape)
    if taken is not None:  # a taken key equal to the peak (-inf) is not a hit
        hits = m.op("Mul", [hits, m.op("Sub", [m.constant("one", np.ones((), np.float32)), taken], shape)], shape)
    index = _hit_index(m, hits, axis)
    chosen = m.op("Equal", [m.constant("positions", _positions(shape, axis)), index], shape)
    was_nan = m.op("ReduceMax", [m.op("Mul", [chosen, nan], shape), along], kept, keepdims=1)
    value = m.op("Where", [was_nan, m.constant("nan", np.array(np.nan, np.float32)),
                           peak if largest else m.op("Neg", [peak], kept)], kept)  # fmt: skip
    return (chosen if taken is None else m.op("Add", [taken, chosen], shape)), value, index


def _einsum_as_products(graph: Graph, node: Node) -> list[Node] | None:
    """Einsum of two operands as one batched MatMul: each operand's letters only it has
    and the output lacks summed first, then each transposed to (batch, its own letters,
    the contracted ones) and reshaped to [batch..., rows, columns]; the product reshaped
    to its letters and transposed to the output's order. Of one operand: the sum of the
    letters the output lacks, then a transpose."""
    if node.op != "Einsum":
        return None
    m = _Made(graph, node.name)
    try:
        terms, output = einsum_terms(node.attrs["equation"], [graph.types[i].shape for i in node.inputs])
    except ValueError as err:  # an ellipsis broadcast: seen with the shapes
        raise AutoconfigError(f"node {node.name!r} (Einsum): {err}") from None
    diagonals = [_diagonal(m, graph, x, t) for x, t in zip(node.inputs, terms)]
    terms = [t for _, t in diagonals]
    others = ["".join(terms[1 - i]) if len(terms) == 2 else "" for i in range(len(terms))]
    operands = [_summed(m, graph, x, t, set(output) | set(o)) for (x, _), t, o in zip(diagonals, terms, others)]
    if len(terms) == 1:
        (x, letters), = operands
    else:
        x, letters = _product(m, graph, operands, output)
    _transposed(m, graph, x, letters, output, node.outputs[0])
    return m.nodes


def _diagonal(m: _Made, graph: Graph, x: str, letters: str) -> tuple[str, str]:
    """`x` (subscripts `letters`) with each letter it repeats taken once, on the diagonal
    (as numpy.diagonal: that axis last): the two axes moved last, flattened to n·n and
    sliced every n+1 elements."""
    while (c := next((c for c in letters if letters.count(c) > 1), None)) is not None:
        i = letters.index(c)
        j = letters.index(c, i + 1)
        rest = [a for a in range(len(letters)) if a not in (i, j)]
        shape, n = graph.types[x].shape, graph.types[x].shape[i]
        kept = tuple(shape[a] for a in rest)
        if graph.is_constant(x):
            x = m.constant("diagonal", np.ascontiguousarray(np.diagonal(graph.constants[x], axis1=i, axis2=j)))
        else:
            perm = [*rest, i, j]
            moved = x if perm == sorted(perm) else m.op("Transpose", [x], (*kept, n, n), perm=perm)
            square = m.reshape(moved, (*kept, n * n))
            x = m.slice(square, [0], [n * n], [len(kept)], (*kept, n), steps=[n + 1])
        letters = "".join(letters[a] for a in rest) + c
    return x, letters


def _summed(m: _Made, graph: Graph, x: str, letters: str, kept: set[str]) -> tuple[str, str]:
    """`x` (subscripts `letters`) summed over the letters not `kept`."""
    gone = [i for i, c in enumerate(letters) if c not in kept]
    if not gone:
        return x, letters
    shape = tuple(d for i, d in enumerate(graph.types[x].shape) if i not in gone)
    if graph.is_constant(x):
        y = m.constant("summed", graph.constants[x].sum(axis=tuple(gone), dtype=np.float64).astype(np.float32))
    else:
        y = m.op("ReduceSum", [x, m.constant("axes", np.array(gone, np.int64))], shape, keepdims=0)
    return y, "".join(c for c in letters if c in kept)


def _transposed(m: _Made, graph: Graph, x: str, letters: str, order: str, out: str = "") -> str:
    """`x` with its axes in `order` (the value itself where they are already)."""
    perm = [letters.index(c) for c in order]
    shape = tuple(graph.types[x].shape[p] for p in perm)
    if perm == sorted(perm) and not out:
        return x
    if graph.is_constant(x) and not out:  # constants are moved here, at import
        return m.constant("transposed", np.ascontiguousarray(graph.constants[x].transpose(perm)))
    return m.op("Transpose", [x], shape, out=out, perm=perm)


def _product(m: _Made, graph: Graph, operands: list[tuple[str, str]], output: str) -> tuple[str, str]:
    """The batched MatMul of two operands by their subscripts, and its result's."""
    (a, sa), (b, sb) = operands
    size = {c: d for x, s in operands for c, d in zip(s, graph.types[x].shape)}
    batch = [c for c in output if c in sa and c in sb]
    left, right = [c for c in sa if c not in sb], [c for c in sb if c not in sa]
    inner = [c for c in sa if c in sb and c not in batch]

    def matrix(x: str, letters: str, rows: list[str], columns: list[str]) -> str:
        x = _transposed(m, graph, x, letters, "".join(batch + rows + columns))
        shape = (*[size[c] for c in batch], math.prod(size[c] for c in rows), math.prod(size[c] for c in columns))
        if graph.is_constant(x):
            return m.constant("matrix", graph.constants[x].reshape(shape))
        return m.reshape(x, shape)

    dims = (*[size[c] for c in batch], math.prod(size[c] for c in left), math.prod(size[c] for c in right))
    y = m.op("MatMul", [matrix(a, sa, left, inner), matrix(b, sb, inner, right)], dims)
    shape = tuple(size[c] for c in batch + left + right)
    y = m.reshape(y, shape)
    return y, "".join(batch + left + right)


def _log_sum_exps(graph: Graph, node: Node) -> list[Node] | None:
    """ReduceLogSumExp as m + log(Σ e^(x − m)) and LogSoftmax as (x − m) − log(Σ e^(x − m)),
    m the maximum over the axes (LogSoftmax's: its axis, or before opset 13 the axes from
    `legacy_axis` on): no e^x overflows, as in onnxruntime's kernels."""
    rank = len(graph.types[node.inputs[0]].shape) if node.inputs else 0
    if node.op == "LogSoftmax":
        axes = tuple(range(node.attrs["legacy_axis"] % rank, rank)) if "legacy_axis" in node.attrs else \
            (node.attrs.get("axis", -1) % rank,)  # fmt: skip
    else:
        axes = reduced_axes(node, graph) if node.op == "ReduceLogSumExp" else None
    if axes is None:
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape = graph.types[x].shape
    kept = _kept(shape, axes)
    along = m.constant("axes", np.array(axes, np.int64))
    peak = m.op("ReduceMax", [x, along], kept, keepdims=1)
    shifted = m.op("Sub", [x, peak], shape)
    mean = m.op("ReduceMean", [m.op("Exp", [shifted], shape), along], kept, keepdims=1)
    count = m.constant("count", np.array(math.prod(shape[a] for a in axes), np.float32))
    logged = m.op("Log", [m.op("Mul", [mean, count], kept)], kept)
    if node.op == "LogSoftmax":
        m.op("Sub", [shifted, logged], shape, out=out)
    elif kept == graph.types[out].shape:
        m.op("Add", [logged, peak], kept, out=out)
    else:  # the reduced axes dropped
        m.reshape(m.op("Add", [logged, peak], kept), graph.types[out].shape, out=out)
    return m.nodes


def _lp_normalization(graph: Graph, node: Node) -> list[Node] | None:
    """LpNormalization as x / ‖x‖ along its axis (ReduceL1 or ReduceL2), a zero norm
    read as 1 so that its all-zero slice stays 0 (as onnxruntime gives it)."""
    if node.op != "LpNormalization":
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape = graph.types[x].shape
    axis = node.attrs.get("axis", -1) % len(shape)
    reduction = "ReduceL2" if node.attrs.get("p", 2) == 2 else "ReduceL1"
    kept = _kept(shape, (axis,))
    norm = m.op(reduction, [x, m.constant("axes", np.array([axis], np.int64))], kept, keepdims=1)
    zero = m.op("Equal", [norm, m.constant("zero", np.zeros((), np.float32))], kept)
    safe = m.op("Where", [zero, m.constant("one", np.ones((), np.float32)), norm], kept)
    m.op("Div", [x, safe], shape, out=out)
    return m.nodes


def _lp_pool(graph: Graph, node: Node) -> list[Node] | None:
    """LpPool and GlobalLpPool as (Σ |x|^p)^(1/p): the powers and the root are Pow nodes
    (products and a square root where p is 1 or 2), the sum a depthwise convolution by
    ones over each window (its pads zeros; ceil mode's last windows as more end pads),
    or a ReduceSum over the planes."""
    if node.op not in ("LpPool", "GlobalLpPool"):
        return None
    m, x, out = _Made(graph, node.name), node.inputs[0], node.outputs[0]
    shape, out_shape, p = graph.types[x].shape, graph.types[out].shape, node.attrs.get("p", 2)
    powered = m.op("Pow", [m.op("Abs", [x], shape), m.constant("p", np.array(p, np.float32))], shape)
    if node.op == "GlobalLpPool":
        planes = m.constant("axes", np.arange(2, len(shape), dtype=np.int64))
        total = m.op("ReduceSum", [powered, planes], out_shape, keepdims=1)
    else:
        kernel = node.attrs["kernel_shape"]
        strides = node.attrs.get("strides", [1] * len(kernel))
        dilations = node.attrs.get("dilations", [1] * len(kernel))
        pads = list(window_pads(node, graph, kernel, strides, dilations))
        for a, (k, s, d) in enumerate(zip(kernel, strides, dilations)):  # ceil mode: the last windows' end pads
            if (out_shape[2 + a] - 1) * s >= shape[2 + a] + pads[a]:  # as the pool family refuses it
                raise AutoconfigError(f"node {node.name!r} (LpPool): onnx's shape inference gives {out_shape}, but "
                                      "onnxruntime and PyTorch drop a ceil_mode window that starts in the padding")
            reach = (out_shape[2 + a] - 1) * s + (k - 1) * d + 1
            pads[len(kernel) + a] += max(0, reach - (shape[2 + a] + pads[a] + pads[len(kernel) + a]))
        ones = m.constant("ones", np.ones((shape[1], 1, *kernel), np.float32))
        total = m.op("Conv", [powered, ones], out_shape, group=shape[1], kernel_shape=list(kernel),
                     strides=list(strides), dilations=list(dilations), pads=pads)  # fmt: skip
    m.op("Pow", [total, m.constant("root", np.array(1 / p, np.float32))], out_shape, out=out)
    return m.nodes


def _bools_as_floats(graph: Graph) -> None:
    """Bool values and constants held as float32 1.0/0.0, so the float kernels compute
    with them: And becomes a product, casts between floats and bools an Identity (a
    cast to bool of a float stays: it tests for non-zero); Pow by a small integer
    becomes products, by ½ a square root."""
    for name, array in graph.constants.items():
        if array.dtype == np.bool_:
            graph.constants[name] = array.astype(np.float32)
    for name, kind in graph.types.items():
        if kind.dtype == "bool" and name not in graph.inputs:  # refused as such
            _hold_value(graph, name)
    made = []
    for node in graph.nodes:
        source = graph.types[node.inputs[0]].dtype if node.inputs and node.inputs[0] else ""
        if node.op == "And":
            node = Node(node.name, "Mul", node.inputs, node.outputs, {})
        elif node.op == "Cast" and source == "float32" and node.attrs.get("to") == onnx.TensorProto.FLOAT:
            node = Node(node.name, "Identity", node.inputs[:1], node.outputs, {})
        elif node.op == "Pow":
            made += _power(graph, node)
            continue
        made.append(node)
    graph.nodes = made


VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
"""Operators that give their input another shape, nothing more."""


INTEGER_ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Neg", "Abs", "Max", "Min", "Clip", "CumSum", "ReduceMax",
                                "Equal", "Not", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Where", "And",
                                "Or", "Mod"})  # fmt: skip
"""Operators that compute integers from int64 inputs (a position counter from an
attention mask, a padding mask from the ids, the place of the largest id: CLIP's end
token, positions clipped into a window: Longformer's chunks) on their float32
conversions: exact while every value stays within 2^24 (ids of vocabularies up to 16M,
positions, counts)."""

ONE_OPERAND = frozenset({"CumSum", "ReduceMax"})
"""Of those, the ones whose other inputs are their axes, kept as they are."""

INTEGER_CASTS = (onnx.TensorProto.FLOAT, *INTEGERS)
"""Casts of such an integer that keep its float32 conversion as it is."""

INTEGER_MOVES = frozenset({"Transpose", "Slice", "Concat", "Expand", "Tile", "Gather", "Pad"})
"""Data movement of such integers (a Gather of them by constant indices; XLNet's ids
transposed to time-major, LongT5's mask padded to whole blocks): the same moves of their
float32 conversions (a Pad's value too)."""


def _int64_inputs(graph: Graph) -> None:
    """An int64 input (token ids, an attention mask) is read as it is by a Gather of a
    constant table (the ids), and by everything else as its float32 conversion, which
    the runner writes as the model starts (`Graph.converted`); views keep it int64.
    Integers computed from it (`INTEGER_ARITHMETIC`, int casts, `INTEGER_MOVES`) are held
    as float32 values, which a Gather reads as ids checked in the kernel (`families.movement`); any
    other int64 value computed at run time is refused. `Graph.ids_below` gets the rows
    of the tables each input indexes."""
    made: list[Node] = []
    views: dict[str, Node] = {}  # an int64 view -> its node
    source = {name: name for name in graph.inputs}  # an int64 value -> the input it views

    def as_float(value: str) -> str:
        """The float32 conversion of an int64 input, of a view of one, or of an integer
        constant beside one; an integer already held as float32 itself."""
        if value not in integral:
            return _float_constant(graph, value) if graph.is_constant(value) else value
        name = f"{value}.as_float"
        if name not in graph.types:
            graph.types[name] = TensorType(graph.types[value].shape, "float32")
            if value in views:
                view = views[value]
                made.append(Node(name, view.op, [as_float(view.inputs[0]), *view.inputs[1:]], [name], view.attrs))
            else:
                graph.converted[name] = value
        return name

    integral = {name for name in graph.inputs if graph.types[name].dtype == "int64"}
    held: set[str] = set()  # integers computed at run time, held as float32
    for node in graph.nodes:
        if not any(i in integral or i in held for i in node.inputs):  # a cast of floats to integers, say
            made.append(node)
            _hold(graph, node, held)
        elif node.op in VIEWS and node.inputs[0] in integral:
            integral.add(node.outputs[0])
            views[node.outputs[0]] = node
            source[node.outputs[0]] = source[node.inputs[0]]
            made.append(node)
        elif node.op == "Gather" and node.inputs[1] in integral and node.inputs[0] not in integral | held:
            rows, ids = graph.types[node.inputs[0]].shape[node.attrs.get("axis", 0)], source[node.inputs[1]]
            graph.ids_below[ids] = min(graph.ids_below.get(ids, rows), rows)
            made.append(node)
        elif node.op == "Cast" and node.attrs.get("to") == onnx.TensorProto.BOOL:
            made.append(Node(node.name, "Cast", [as_float(node.inputs[0])], node.outputs, node.attrs))
        elif (operands := _integer_operands(graph, node, held)) is not None:
            inputs = [as_float(i) if i and at in operands else i for at, i in enumerate(node.inputs)]
            made.append(_held_as_float(graph, node, inputs, held))
        else:
            raise AutoconfigError(f"node {node.name!r} ({node.op}): int64 values computed at run time are not "
                                  f"generated (only int64 inputs, read as indices, cast, moved, or in "
                                  f"{', '.join(sorted(INTEGER_ARITHMETIC))})")  # fmt: skip
    graph.nodes = made


def _integer_operands(graph: Graph, node: Node, held: set[str]) -> tuple[int, ...] | None:
    """The inputs `node` reads as float32 conversions where it computes integers on
    them (arithmetic, a view, an integer cast, a Gather by held ids, a move), not its
    shapes, axes or indices; None where it does not."""
    if node.op in INTEGER_ARITHMETIC - ONE_OPERAND or node.op == "Concat":
        return tuple(range(len(node.inputs)))
    if node.op in INTEGER_MOVES and all(graph.is_constant(i) for i in node.inputs[1:] if i):
        return (0, 2) if node.op == "Pad" else (0,)  # a Pad's value too
    if node.op in VIEWS or node.op in ONE_OPERAND or node.op == "Cast" and node.attrs.get("to") in INTEGER_CASTS:
        return (0,)
    if node.op == "Gather" and node.inputs[1] in held:  # an integer table's values too (ids picked from ids)
        return (0, 1) if _integer_typed(graph, node.inputs[0]) else (1,)
    return None


def _held_as_float(graph: Graph, node: Node, inputs: list[str], held: set[str]) -> Node:
    """`node` on its inputs' float32 conversions (a Gather by computed ids: a float table
    as given); its integer outputs then held as float32 too (a cast to an integer, an Identity)."""
    if node.op == "Gather" and node.inputs[1] in held and not _integer_typed(graph, node.inputs[0]):
        return Node(node.name, "Gather", [node.inputs[0], inputs[1]], node.outputs, node.attrs)
    _hold(graph, node, held)
    op = "Identity" if node.op == "Cast" else node.op
    return Node(node.name, op, inputs[:1] if op == "Identity" else inputs, node.outputs,
                {} if op == "Identity" else node.attrs)  # fmt: skip


def _hold(graph: Graph, node: Node, held: set[str]) -> None:
    """`node`'s integer outputs held as float32 values."""
    for out in node.outputs:
        if out and _integer_typed(graph, out):
            _hold_value(graph, out)
            held.add(out)


def _integer_typed(graph: Graph, value: str) -> bool:
    """Whether `value` is typed as an integer the model computes with (int64 or int32)."""
    return graph.types[value].dtype in ("int64", "int32")


def _hold_value(graph: Graph, value: str) -> None:
    """`value` held as float32; a model output delivered in its own type as the run ends."""
    if value in graph.outputs:
        graph.delivered[value] = graph.types[value].dtype
    graph.types[value] = TensorType(graph.types[value].shape, "float32")


def _float_constant(graph: Graph, value: str) -> str:
    """An integer constant as float32 (beside integers held as float32), once."""
    name = f"{value}.as_float"
    if name not in graph.types:
        array = np.asarray(graph.constants[value])
        graph.constants[name] = array.astype(np.float32) if array.dtype.kind in "iub" else array
        graph.types[name] = TensorType(graph.types[value].shape, graph.constants[name].dtype.name)
    return name


MOVES = VIEWS | {"Transpose"}
"""Operators that only move elements: a scalar factor commutes with them."""


def _scalar_scale(graph: Graph, node: Node) -> str | None:
    """The scalar constant `node` multiplies its other input by (or divides it by), if it
    is such a scale."""
    scalar = [i for i in node.inputs if graph.is_constant(i) and graph.constants[i].size == 1]
    if node.op not in ("Mul", "Div") or len(node.inputs) != 2 or len(scalar) != 1 or \
            (node.op == "Div" and node.inputs[1] != scalar[0]):  # fmt: skip
        return None
    return scalar[0]


def _scales_before_moves(graph: Graph) -> None:
    """A Mul or Div by a scalar constant after reshapes and transposes (attention's
    query and key scaled after being split into heads) moves before them, onto the value
    they start from when nothing else reads it: the same products of the same elements,
    now right after their producer, which applies them as its epilogue."""
    producers, consumers = graph.producers(), graph.consumers()
    for node in list(graph.nodes):
        scalar = _scalar_scale(graph, node)
        if scalar is None:
            continue
        chain, at = [], next(i for i in node.inputs if i != scalar)
        while (move := producers.get(at)) is not None and move.op in MOVES and \
                _only_consumer(graph, consumers, at) is (chain[0] if chain else node):  # fmt: skip
            chain.insert(0, move)
            at = move.inputs[0]
        if not chain or _only_consumer(graph, consumers, at) is not chain[0] or at not in producers:
            continue
        scaled = f"{at}.scaled"
        graph.types[scaled] = graph.types[at]
        inputs = [at if i != scalar else i for i in node.inputs]
        graph.nodes.insert(graph.nodes.index(chain[0]), Node(node.name, node.op, inputs, [scaled], {}))
        chain[0].inputs[0] = scaled
        graph.nodes[graph.nodes.index(node)] = Node(f"{node.name}.moved", "Identity", [chain[-1].outputs[0]],
                                                    node.outputs, {})  # fmt: skip
        producers, consumers = graph.producers(), graph.consumers()  # as this move left them


def _gathers_before_transposes(graph: Graph) -> None:
    """A Transpose read only by Gathers of constant indices, two or more (the query, key
    and value picked from one stacked projection), becomes a Gather of its input then a
    Transpose of the picked part, for each reader: the same elements, and each pick is
    now a chain of its own that the product reading it can address (`fusion.addressing`
    follows a value with one reader), instead of a kernel copying the whole stack."""
    consumers = graph.consumers()

    def picks(value: str) -> list[Node] | None:  # its readers, two or more Gathers of constant indices
        readers = consumers.get(value, [])
        return readers if len(readers) > 1 and value not in graph.outputs and all(
            r.op == "Gather" and graph.is_constant(r.inputs[1]) and r.inputs[0] == value for r in readers) else None

    for node in list(graph.nodes):
        if node.op != "Transpose" or node.outputs[0] in graph.outputs:
            continue
        readers = picks(node.outputs[0])
        view = consumers.get(node.outputs[0], [None])[0]
        if readers is None and len(consumers.get(node.outputs[0], [])) == 1 and picks(view.outputs[0]):
            node = _unit_axes_first(graph, node, view)
            readers = picks(node.outputs[0]) if node.op == "Transpose" and node.outputs == view.outputs else None
        if readers is None:
            continue
        x = node.inputs[0]
        perm = transpose_perm(node, len(graph.types[x].shape))
        graph.nodes.remove(node)
        for reader in readers:
            at = graph.nodes.index(reader)
            graph.nodes[at:at + 1] = _picked_first(graph, reader, x, perm)


def _concats_of_slices(graph: Graph) -> None:
    """A Concat of Slices of one tensor along its axis, each read by it alone (a roll:
    Swin's shifted windows), or of such Slices negated (a rotary embedding's rotated
    half), becomes one Gather of that tensor by constant indices along the axis: one
    pass over it instead of a kernel per piece and then a copy; the negations a product
    by a constant sign along the axis, folded into the constant a Mul then applies."""
    producers, consumers = graph.producers(), graph.consumers()
    for node in [n for n in graph.nodes if n.op == "Concat"]:
        negated = [_negated_slice(graph, producers, consumers, v, node) for v in node.inputs]
        pieces = [producers.get(v if n is None else n.inputs[0]) for v, n in zip(node.inputs, negated)]
        if not all(_sole_slice(graph, consumers, p, n or node, pieces[0]) for p, n in zip(pieces, negated)):
            continue
        x = pieces[0].inputs[0]
        shape = graph.types[x].shape
        axis = node.attrs["axis"] % len(shape)
        taken = np.concatenate([movement.source_maps(p, graph)[0] for p in pieces], axis=axis)
        picks = np.moveaxis(np.unravel_index(taken, shape)[axis], axis, 0).reshape(taken.shape[axis], -1)[:, 0]
        if not np.array_equal(np.take(np.arange(math.prod(shape)).reshape(shape), picks, axis=axis), taken):
            continue
        m = _Made(graph, node.name)
        signs = np.concatenate([np.full(graph.types[p.outputs[0]].shape[axis], -1.0 if n else 1.0, np.float32)
                                for p, n in zip(pieces, negated)])  # fmt: skip
        gathered = node.outputs[0] if (signs > 0).all() else m.value("rolled", graph.types[node.outputs[0]].shape)
        m.nodes.append(Node(node.name, "Gather", [x, m.constant("picks", picks.astype(np.int64))], [gathered],
                            {"axis": axis}))
        if gathered != node.outputs[0]:
            _signed(graph, consumers, m, gathered, node.outputs[0], signs.reshape([-1] + [1] * (len(shape) - axis - 1)))
        at = graph.nodes.index(node)
        graph.nodes[at:at + 1] = m.nodes
        for piece, neg in zip(pieces, negated):
            graph.nodes.remove(piece)
            if neg is not None:
                graph.nodes.remove(neg)


def _sole_slice(graph: Graph, consumers: dict[str, list[Node]], piece: Node | None, reader: Node,
                first: Node | None) -> bool:  # fmt: skip
    """Whether `piece` is a Slice by constant bounds of `first`'s input, read by `reader`
    alone (not a graph output)."""
    return (piece is not None and first is not None and piece.op == "Slice" and piece.inputs[0] == first.inputs[0]
            and consumers[piece.outputs[0]] == [reader] and piece.outputs[0] not in graph.outputs
            and all(graph.is_constant(i) for i in piece.inputs[1:] if i))  # fmt: skip


def _negated_slice(graph: Graph, producers: dict[str, Node], consumers: dict[str, list[Node]], value: str,
                   concat: Node) -> Node | None:  # fmt: skip
    """The Neg computing `value` where it negates a Slice and only `concat` reads it."""
    neg = producers.get(value)
    if neg is None or neg.op != "Neg" or consumers[value] != [concat] or value in graph.outputs:
        return None
    return neg if producers.get(neg.inputs[0]) is not None and producers[neg.inputs[0]].op == "Slice" else None


def _signed(graph: Graph, consumers: dict[str, list[Node]], m: _Made, gathered: str, out: str,
            signs: np.ndarray) -> None:  # fmt: skip
    """`out` = `gathered` times `signs`: where only a Mul by a constant of its shape or
    fewer axes reads `out`, that constant takes the signs instead (a rotary embedding's
    sine), else a Mul is made."""
    readers = consumers.get(out, [])
    mul = readers[0] if len(readers) == 1 and out not in graph.outputs else None
    other = [i for i in mul.inputs if i != out] if mul is not None and mul.op == "Mul" else []
    shape = graph.types[out].shape
    if len(other) == 1 and graph.is_constant(other[0]) and graph.types[mul.outputs[0]].shape == shape:
        mul.inputs = [gathered, m.constant("signed", (graph.constants[other[0]] * signs).astype(np.float32))]
        graph.types.pop(out, None)
        return
    m.nodes.append(Node(f"{out}.signs", "Mul", [gathered, m.constant("signs", signs)], [out], {}))


def _unit_axes_first(graph: Graph, transpose: Node, view: Node) -> Node:
    """A Transpose read only by a view that just drops or adds axes of one (ViT's squeeze
    after stacking Q, K and V), as a Reshape of its input then one Transpose straight to
    the view's output, which it returns; else the Transpose, unchanged."""
    x, y, z = (graph.types[v].shape for v in (transpose.inputs[0], transpose.outputs[0], view.outputs[0]))
    if info(view).kernel is not Kernel.VIEW or [d for d in y if d != 1] != [d for d in z if d != 1]:
        return transpose
    perm = transpose_perm(transpose, len(x))
    kept = [a for a in range(len(x)) if x[a] != 1]  # x's axes of more than one, in order
    units = iter(range(len(kept), len(z) + len(kept)))  # the Reshape's trailing axes of one
    order = iter(kept.index(a) for a in perm if x[a] != 1)
    to = [next(order) if d != 1 else next(units) for d in z]
    reshaped, shape = f"{view.outputs[0]}.unit_axes", [x[a] for a in kept] + [1] * (len(to) - len(kept))
    graph.types[reshaped] = TensorType(tuple(int(d) for d in shape), graph.types[view.outputs[0]].dtype)
    at = graph.nodes.index(transpose)
    graph.nodes[at] = Node(transpose.name, "Reshape", [transpose.inputs[0], _shape_constant(graph, reshaped, shape)],
                           [reshaped], {})  # fmt: skip
    made = Node(view.name, "Transpose", [reshaped], list(view.outputs), {"perm": to})
    graph.nodes[graph.nodes.index(view)] = made
    return made


def _picked_first(graph: Graph, gather: Node, x: str, perm: list[int]) -> list[Node]:
    """`gather` of transpose(x, perm) as a Gather of x along the axis it picks from, then
    the Transpose that orders the rest as `gather` did (a Reshape where only axes of one
    move)."""
    axis = int(gather.attrs.get("axis", 0)) % len(perm)
    source, picked = perm[axis], len(graph.types[gather.inputs[1]].shape)
    shape = graph.types[x].shape
    before = f"{gather.outputs[0]}.picked"
    graph.types[before] = TensorType(shape[:source] + graph.types[gather.inputs[1]].shape + shape[source + 1:],
                                     graph.types[x].dtype)  # fmt: skip
    first = Node(f"{gather.name}.first", "Gather", [x, gather.inputs[1]], [before], {"axis": source})

    def position(a: int) -> int:  # where axis a of x lies in the Gather's output
        return a if a < source else a + picked - 1

    order = ([position(perm[j]) for j in range(axis)] + [source + t for t in range(picked)]
             + [position(perm[j]) for j in range(axis + 1, len(perm))])  # fmt: skip
    moved = [a for a in order if graph.types[before].shape[a] != 1]
    if moved != sorted(moved):
        return [first, Node(gather.name, "Transpose", [before], list(gather.outputs), {"perm": order})]
    shape = _shape_constant(graph, gather.outputs[0], graph.types[gather.outputs[0]].shape)  # a view
    return [first, Node(gather.name, "Reshape", [before, shape], list(gather.outputs), {})]


def _shape_constant(graph: Graph, stem: str, shape) -> str:
    """A new int64 constant holding `shape`, a Reshape's second input."""
    return _Made(graph, stem).constant("shape", np.array(shape, np.int64))


def _scales_after_products(graph: Graph) -> None:
    """A Mul or Div by a scalar constant that no epilogue or elementwise chain computes
    (its producer takes none: the query and key split from one product by gathers,
    then scaled) moves after the MatMul its value reaches through reshapes and
    transposes alone, each read only by the next: (s·A)·B = s·(A·B), A·(B/s) =
    (A·B)/s, now that product's epilogue. After GELU is matched: its own halving may
    precede a product directly."""
    producers, consumers = graph.producers(), graph.consumers()
    for node in list(graph.nodes):
        scalar = _scalar_scale(graph, node)
        if scalar is None:
            continue
        x = next(i for i in node.inputs if i != scalar)
        if x in producers and info(producers[x]).kernel in (Kernel.EPILOGUE_ANCHOR, Kernel.ELEMENTWISE):
            continue  # an epilogue, or a chain of elementwise ops, computes it already
        at, moves = node.outputs[0], 0
        while (reader := _only_consumer(graph, consumers, at)) is not None and reader.op in MOVES:
            at, moves = reader.outputs[0], moves + 1
        if not moves or reader is None or reader.op != "MatMul":
            continue
        out = reader.outputs[0]
        graph.types[f"{out}.unscaled"] = graph.types[out]
        reader.outputs[0] = f"{out}.unscaled"
        after = Node(f"{node.name}.after", node.op, [reader.outputs[0] if i == x else i for i in node.inputs], [out], {})
        graph.nodes.insert(graph.nodes.index(reader) + 1, after)
        consumers[node.outputs[0]][0].inputs = [x if i == node.outputs[0] else i
                                                for i in consumers[node.outputs[0]][0].inputs]  # fmt: skip
        graph.nodes.remove(node)
        producers, consumers = graph.producers(), graph.consumers()


def _views_after_elementwise(graph: Graph) -> None:
    """A view (Reshape, Flatten, Squeeze, Unsqueeze) read only by elementwise ops of its
    shape moves after them: they compute on its input's shape and a view of each result
    takes that result's name, so a product reshaped before its residual add or GELU
    (a 2-D Gemm in a 3-D model) takes them as its epilogue. Their other operands follow
    (`_operand_on`)."""
    made: set[str] = set()  # operand views made here: moving them would move the first back
    while True:
        consumers = graph.consumers()
        produced = graph.producers()
        view = next((n for n in graph.nodes if n.inputs and n.inputs[0] in produced
                     and _movable_view(graph, n, consumers, made)), None)  # fmt: skip
        if view is None:
            return
        x, y = view.inputs[0], view.outputs[0]
        for reader in {id(r): r for r in consumers[y]}.values():  # once, however often it reads y
            m = _Made(graph, reader.name)
            inputs = [_operand_on(graph, m, i, (x, y), produced, made) for i in reader.inputs]
            out = reader.outputs[0]
            inner = m.fresh("unviewed")
            graph.types[inner] = TensorType(graph.types[x].shape, graph.types[out].dtype)
            m.nodes.append(Node(reader.name, reader.op, inputs, [inner], reader.attrs))
            m.reshape(inner, graph.types[out].shape, out=out)
            if m.nodes[-1].name == reader.name:  # a made node is named after its output: one name per node
                m.nodes[-1].name = m.fresh("view")
            at = graph.nodes.index(reader)
            graph.nodes[at:at + 1] = m.nodes
        graph.nodes.remove(view)


def _views_of_views(graph: Graph) -> None:
    """A view read only by views is folded into them: each reshapes its input straight
    to its own shape (row-major views compose), or is that input where the shapes agree.
    A view there and back (Swin's windows viewed apart for their mask and back) then
    leaves the chain of a product's epilogue whole."""
    while True:
        consumers = graph.consumers()
        first = next((n for n in graph.nodes if info(n).kernel is Kernel.VIEW and n.outputs[0] not in graph.outputs
                      and consumers.get(n.outputs[0])
                      and all(info(r).kernel is Kernel.VIEW for r in consumers[n.outputs[0]])), None)  # fmt: skip
        if first is None:
            return
        x, shape = first.inputs[0], graph.types[first.inputs[0]].shape
        for view in consumers[first.outputs[0]]:
            y = view.outputs[0]
            if graph.types[y].shape == shape and y not in graph.outputs:
                _read_instead(graph, y, x)
                graph.nodes.remove(view)
            else:
                m = _Made(graph, view.name)
                m.reshape(x, graph.types[y].shape, out=y)
                at = graph.nodes.index(view)
                graph.nodes[at:at + 1] = m.nodes
        graph.nodes.remove(first)


def _read_instead(graph: Graph, value: str, instead: str) -> None:
    """Every reader of `value` reads `instead`."""
    for node in graph.nodes:
        node.inputs = [instead if i == value else i for i in node.inputs]


def _movable_view(graph: Graph, node: Node, consumers: dict[str, list[Node]], made: set[str]) -> bool:
    """Whether view `node` has readers, all elementwise ops (numpy's broadcasting, no
    axis of their own) of its output's shape whose other operands can follow it onto its
    input's shape."""
    y = node.outputs[0]
    if info(node).kernel is not Kernel.VIEW or y in made or y in graph.outputs or not consumers.get(y):
        return False
    x_shape, y_shape = graph.types[node.inputs[0]].shape, graph.types[y].shape
    return all(info(r).kernel is Kernel.ELEMENTWISE and info(r).pattern is Pattern.ELEMWISE and len(r.outputs) == 1
               and graph.types[r.outputs[0]].shape == y_shape
               and all(not i or i == y or graph.types[i].shape == y_shape
                       or _broadcast_alike(graph.types[i].shape, x_shape, y_shape) for i in r.inputs)
               for r in consumers[y])  # fmt: skip


def _broadcast_alike(shape: tuple[int, ...], x: tuple[int, ...], y: tuple[int, ...]) -> bool:
    """Whether an operand of `shape` broadcasts over x and over y (x's view) alike: its
    axes, leading ones aside, lie among the trailing axes the two shapes share."""
    k = len(_unit_led(shape))
    return k == 0 or (k <= min(len(x), len(y)) and tuple(x[-k:]) == tuple(y[-k:]))


def _unit_led(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` without its leading axes of one."""
    k = next((a for a, d in enumerate(shape) if d != 1), len(shape))
    return tuple(shape[k:])


def _operand_on(graph: Graph, m: _Made, value: str, view: tuple[str, str], producers: dict[str, Node],
                made: set[str]) -> str:  # fmt: skip
    """An elementwise op's operand `value` once its view input y moves back to x (`view`:
    x, y): x for y; as it is where it broadcasts alike within x's rank; else in x's shape
    (of y's) or without its leading ones: a constant reshaped, the source of a view of
    that shape, or a view made of it."""
    x, y = view
    x_shape, shape = graph.types[x].shape, graph.types[value].shape if value else ()
    alike = _broadcast_alike(shape, x_shape, graph.types[y].shape)
    if not value or value == y or (alike and len(shape) <= len(x_shape)):
        return x if value == y else value
    target = _unit_led(shape) if alike else x_shape
    if graph.is_constant(value):
        return m.constant("unviewed", np.asarray(graph.constants[value]).reshape(target))
    source = producers.get(value)
    if source is not None and info(source).kernel is Kernel.VIEW and graph.types[source.inputs[0]].shape == target:
        return source.inputs[0]
    reshaped = m.reshape(value, target)
    graph.types[reshaped] = TensorType(tuple(int(d) for d in target), graph.types[value].dtype)
    made.add(reshaped)
    return reshaped


def _power(graph: Graph, node: Node) -> list[Node]:
    """x to a constant power: 1 to POWERS_AS_PRODUCTS as products, ½ as Sqrt, −1 as
    Reciprocal (each exact to an ulp or two); any other stays Pow (e^(p·ln|x|))."""
    x, power = node.inputs
    if not graph.is_constant(power) or graph.constants[power].size != 1:
        return _power_of_tensor(graph, node)
    exponent = float(np.asarray(graph.constants[power]).reshape(-1)[0])
    if exponent in (0.5, -1):
        return [Node(node.name, "Sqrt" if exponent == 0.5 else "Reciprocal", [x], node.outputs, {})]
    if exponent != int(exponent) or not 1 <= exponent <= POWERS_AS_PRODUCTS:
        return [node]
    if exponent == 1:
        return [Node(node.name, "Identity", [x], node.outputs, {})]
    made, shape, current = _Made(graph, node.name), graph.types[node.outputs[0]].shape, x
    for _ in range(int(exponent) - 2):
        current = made.op("Mul", [current, x], shape)
    made.nodes.append(Node(node.name, "Mul", [current, x], node.outputs, {}))
    return made.nodes


def _power_of_tensor(graph: Graph, node: Node) -> list[Node]:
    """x to the power of a tensor y (computed, or a constant of several values), as pow
    gives it: e^(y·ln|x|), negated where x < 0 and y is an odd integer, NaN where a
    finite x < 0 meets a y that is not an integer, 1 where y = 0 or x = 1."""
    (x, y), out = node.inputs, node.outputs[0]
    m, shape, xs, ys = _Made(graph, node.name), graph.types[out].shape, graph.types[x].shape, graph.types[y].shape

    def number(value: float) -> str:
        return m.constant("number", np.float32(value))

    magnitude = m.op("Exp", [m.op("Mul", [y, m.op("Log", [m.op("Abs", [x], xs)], xs)], shape)], shape)
    whole = m.op("Equal", [m.op("Floor", [y], ys), y], ys)
    halves = m.op("Mul", [m.op("Floor", [m.op("Mul", [y, number(0.5)], ys)], ys), number(2)], ys)
    odd = m.op("Equal", [m.op("Sub", [y, halves], ys), number(1)], ys)
    signed = m.op("Where", [odd, m.op("Neg", [magnitude], shape), magnitude], shape)
    finite = m.op("Where", [m.op("IsInf", [x], xs), magnitude, number(np.nan)], shape)
    below = m.op("Where", [whole, signed, finite], shape)
    powered = m.op("Where", [m.op("Less", [x, number(0)], xs), below, magnitude], shape)
    one = m.op("Or", [m.op("Equal", [y, number(0)], ys), m.op("Equal", [x, number(1)], xs)], shape)
    m.op("Where", [one, number(1), powered], shape, out=out)
    return m.nodes


SHARED_CONSTANT_ELEMENTS = 64
"""Constants up to this size count as equal by value when two nodes are compared (each
layer's exported copy of 0 and -inf); larger ones by name."""


def _computation(graph: Graph, node: Node) -> tuple:
    """What `node` computes, as a key: equal keys, equal outputs (each exported layer's
    copy of the attention mask's arithmetic is computed once)."""
    inputs = tuple((a.dtype.str, a.shape, a.tobytes()) if (a := graph.constants.get(i)) is not None
                   and a.size <= SHARED_CONSTANT_ELEMENTS else i for i in node.inputs)  # fmt: skip
    return node.op, inputs, repr(sorted(node.attrs.items())), len(node.outputs)


def _fold_batchnorm(graph: Graph) -> None:
    producers, consumers = graph.producers(), graph.consumers()
    kept = []
    for node in graph.nodes:
        conv = producers.get(node.inputs[0]) if node.op == "BatchNormalization" else None
        foldable = (
            conv is not None
            and conv.op == "Conv"
            and len(consumers.get(conv.outputs[0], [])) == 1
            and conv.outputs[0] not in graph.outputs
            and all(graph.is_constant(i) for i in node.inputs[1:5])
            and all(graph.is_constant(i) for i in conv.inputs[1:] if i)
            and len(node.outputs) == 1
        )
        if not foldable:
            kept.append(node)
            continue
        scale, bias, mean, var = (graph.constants[i] for i in node.inputs[1:5])
        factor = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
        weight = graph.constants[conv.inputs[1]]
        old_bias = graph.constants[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
        w_name, b_name = f"{conv.name}.folded_weight", f"{conv.name}.folded_bias"
        graph.constants[w_name] = (weight * factor.reshape(-1, 1, 1, 1)).astype(np.float32)
        graph.constants[b_name] = ((old_bias - mean) * factor + bias).astype(np.float32)
        for name in (w_name, b_name):
            graph.types[name] = TensorType(graph.constants[name].shape, "float32")
        conv.inputs = [conv.inputs[0], w_name, b_name]
        conv.outputs = [node.outputs[0]]
    graph.nodes = kept


GELU_TOLERANCE = 1e-6
"""Relative slack on the constants 1/√2, 1 and 1/2 of a GELU written out: exporters
round them to float32 (or write √2 as 1.4142135)."""


def _gelu_as_one(graph: Graph) -> None:
    """x · ½ · (1 + erf(x/√2)), and x · ½ · (1 + tanh(√(2/π)·(x + 0.044715·x³))), written
    out by an exporter as Div (or Mul), Erf or Tanh, Add and Muls in any order, become
    one Gelu node (approximate "tanh" for the second: an epilogue the products can fuse)."""
    producers, consumers = graph.producers(), graph.consumers()
    dropped: set[int] = set()
    for inner in [n for n in graph.nodes if n.op in ("Erf", "Tanh")]:
        found = (_gelu_argument if inner.op == "Erf" else _gelu_tanh_argument)(graph, producers, consumers, inner)
        plus = _only_consumer(graph, consumers, inner.outputs[0])
        if found is None or plus is None or plus.op != "Add" or not _constant_operand(graph, plus, inner.outputs[0], 1.0):
            continue
        x, argument = found
        chain, factors, at = [*argument, inner, plus], [plus.outputs[0]], plus.outputs[0]
        for _ in range(2):  # the half and x, as one factor or two
            mul = _only_consumer(graph, consumers, at)
            if mul is None or mul.op != "Mul":
                break
            other = mul.inputs[1] if mul.inputs[0] == at else mul.inputs[0]
            half = producers.get(other)
            if half is not None and half.op == "Mul" and _only_consumer(graph, consumers, other) is mul \
                    and x in half.inputs and _constant_operand(graph, half, x, 0.5):  # fmt: skip
                chain.append(half)
                factors += [x, "½"]
            else:
                factors.append("½" if _constant_operand(graph, mul, at, 0.5) else other)
            chain.append(mul)
            at = mul.outputs[0]
            if sorted(factors[1:]) == sorted([x, "½"]):
                attrs = {"approximate": "tanh"} if inner.op == "Tanh" else {}
                graph.nodes[graph.nodes.index(mul)] = Node(mul.name, "Gelu", [x], mul.outputs, attrs)
                dropped |= {id(n) for n in chain[:-1]}
                break
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]


def _rms_norm_as_one(graph: Graph) -> None:
    """x · 1/√(mean(x²) + ε), times a constant scale or not, written out by an exporter as
    Mul(x, x), ReduceMean over trailing axes, Add, Sqrt and Reciprocal (or Div of 1, or x
    divided by the root) and Muls (Llama's, T5's and Gemma's norms), becomes one
    RMSNormalization node: one row kernel instead of five passes and a broadcast."""
    producers, consumers = graph.producers(), graph.consumers()
    dropped: set[int] = set()
    for mean in [n for n in graph.nodes if n.op == "ReduceMean"]:
        found = _rms_norm_chain(graph, producers, consumers, mean)
        if found is None:
            continue
        x, axis, epsilon, chain, scale = found
        last, rest = chain[-1], graph.types[x].shape[axis:]
        given = np.float32(1) if scale is None else graph.constants[scale]  # of one on the axes before `axis`
        weights = np.broadcast_to(given, (1,) * axis + rest).reshape(rest)
        inputs = [x, _Made(graph, last.name).constant("scale", np.array(weights, np.float32))]
        attrs = {"axis": axis, "epsilon": epsilon}
        graph.nodes[graph.nodes.index(last)] = Node(last.name, "RMSNormalization", inputs, last.outputs, attrs)
        dropped |= {id(n) for n in chain[:-1]}
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]


def _rms_norm_chain(graph: Graph, producers: dict[str, Node], consumers: dict[str, list[Node]],
                    mean: Node) -> tuple[str, int, float, list[Node], str | None] | None:  # fmt: skip
    """(x, the first normalized axis, ε, the nodes from x² to the normalized x or its
    scaled value, the scale or None) where `mean` is the mean of a square in a
    root-mean-square normalization, else None."""
    square = producers.get(mean.inputs[0])
    if square is None or square.op != "Mul" or square.inputs[0] != square.inputs[1] or \
            _only_consumer(graph, consumers, mean.inputs[0]) is not mean:  # fmt: skip
        return None
    x, axes = square.inputs[0], reduced_axes(mean, graph)
    rank = len(graph.types[x].shape)
    if not axes or axes != tuple(range(rank - len(axes), rank)) or not mean.attrs.get("keepdims", 1):
        return None
    chain, at = [square, mean], mean.outputs[0]
    for op in ("Add", "Sqrt"):
        node = _only_consumer(graph, consumers, at)
        if node is None or node.op != op:
            return None
        chain, at = chain + [node], node.outputs[0]
    epsilon = _scalar_operand(graph, chain[2], mean.outputs[0])  # checked below
    inverse = _only_consumer(graph, consumers, at)
    if inverse is not None and inverse.op == "Div" and inverse.inputs == [x, at]:
        chain.append(inverse)  # x / √(...)
    elif inverse is not None and (inverse.op == "Reciprocal" or inverse.op == "Div" and inverse.inputs[1] == at
                                  and _scalar_operand(graph, inverse, at) == 1.0):  # fmt: skip
        normed = _only_consumer(graph, consumers, inverse.outputs[0])
        if normed is None or normed.op != "Mul" or sorted(normed.inputs) != sorted([x, inverse.outputs[0]]):
            return None
        chain += [inverse, normed]
    else:
        return None
    if epsilon is None or not epsilon >= 0:
        return None
    normed = chain[-1].outputs[0]
    scaled = _only_consumer(graph, consumers, normed)
    scale = _scale_along(graph, scaled, normed, rank - len(axes)) if scaled is not None else None
    return x, rank - len(axes), epsilon, chain + ([scaled] if scale else []), scale


def _scalar_operand(graph: Graph, node: Node, value: str) -> float | None:
    """The value of `node`'s other operand than `value` where it is a one-element constant."""
    other = [i for i in node.inputs if i != value]
    constant = graph.constants.get(other[0]) if len(other) == 1 and len(node.inputs) == 2 else None
    return float(constant.reshape(-1)[0]) if constant is not None and constant.size == 1 else None


def _scale_along(graph: Graph, node: Node, value: str, axis: int) -> str | None:
    """The constant `node` multiplies `value` by where it is a Mul of the same shape by one
    that varies only along the axes from `axis` on, else None."""
    other = [i for i in node.inputs if i != value]
    shape = graph.types[value].shape
    if node.op != "Mul" or len(other) != 1 or not graph.is_constant(other[0]) or \
            graph.types[node.outputs[0]].shape != shape:  # fmt: skip
        return None
    given = graph.constants[other[0]].shape
    padded = (1,) * (len(shape) - len(given)) + tuple(given)
    return other[0] if len(given) <= len(shape) and all(d == 1 for d in padded[:axis]) else None


def _gelu_argument(graph: Graph, producers: dict[str, Node], consumers: dict[str, list[Node]],
                   erf: Node) -> tuple[str, list[Node]] | None:  # fmt: skip
    """x and the node computing x/√2 (a Div by √2 or a Mul by 1/√2) that only `erf`
    reads, else None."""
    scaled = producers.get(erf.inputs[0])
    if scaled is None or scaled.op not in ("Div", "Mul") or _only_consumer(graph, consumers, erf.inputs[0]) is not erf:
        return None
    factor = 2**0.5 if scaled.op == "Div" else 0.5**0.5
    return (scaled.inputs[0], [scaled]) if _constant_operand(graph, scaled, scaled.inputs[0], factor) else None


GELU_TANH_SCALE, GELU_TANH_CUBE = math.sqrt(2 / math.pi), 0.044715
"""The tanh approximation's constants: tanh(√(2/π)·(x + 0.044715·x³))."""


def _gelu_tanh_argument(graph: Graph, producers: dict[str, Node], consumers: dict[str, list[Node]],
                        tanh: Node) -> tuple[str, list[Node]] | None:  # fmt: skip
    """x and the nodes computing √(2/π)·(x + 0.044715·x³) that only `tanh` reads (x³ as
    x·x·x in either order), else None."""
    def sole(value: str, reader: Node, op: str) -> Node | None:  # value's producer, of op, read by reader alone
        node = producers.get(value)
        return node if node is not None and node.op == op and _only_consumer(graph, consumers, value) is reader else None

    scaled = sole(tanh.inputs[0], tanh, "Mul")
    total = next((sole(v, scaled, "Add") for v in scaled.inputs if _constant_operand(graph, scaled, v, GELU_TANH_SCALE)),
                 None) if scaled else None  # fmt: skip
    for x, v in [tuple(total.inputs), tuple(total.inputs[::-1])] if total else []:
        cubed = sole(v, total, "Mul")
        cube = next((sole(c, cubed, "Mul") for c in cubed.inputs if _constant_operand(graph, cubed, c, GELU_TANH_CUBE)),
                    None) if cubed else None  # fmt: skip
        square = next((sole(s, cube, "Mul") for s in cube.inputs if s != x), None) if cube and x in cube.inputs else None
        if square is not None and square.inputs == [x, x]:
            return x, [square, cube, cubed, total, scaled]
    return None


def _constant_operand(graph: Graph, node: Node, value: str, expected: float) -> bool:
    """Whether `node`'s operand other than `value` is a single constant near `expected`."""
    if len(node.inputs) != 2 or value not in node.inputs:
        return False
    other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
    constant = graph.constants.get(other)
    return constant is not None and constant.size == 1 and \
        abs(float(constant.reshape(-1)[0]) - expected) <= GELU_TOLERANCE * expected  # fmt: skip


def _only_consumer(graph: Graph, consumers: dict[str, list[Node]], value: str) -> Node | None:
    """The one node reading `value` (not a graph output), else None."""
    users = consumers.get(value, [])
    return users[0] if len(users) == 1 and value not in graph.outputs else None


def _drop_unused_constants(graph: Graph) -> None:
    used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
    for name in [c for c in graph.constants if c not in used]:
        del graph.constants[name]


def _lowered(graph: Graph, node: Node) -> list[Node]:
    """`node`, or the nodes computing it from operators the build generates."""
    interpolating = node.op == "Resize" and node.attrs.get("mode", "nearest") != "nearest"
    if interpolating and all(i == "" or graph.is_constant(i) for i in node.inputs[1:]):
        return _resize_as_products(graph, node)
    if node.op == "InstanceNormalization":
        return _instance_norm_as_ops(graph, node)
    if node.op == "CumSum":
        return _cumsum_as_product(graph, node)
    if node.op == "RMSNormalization" and not graph.is_constant(node.inputs[1]):
        raise AutoconfigError(f"node {node.name!r} (RMSNormalization): a computed scale is not generated")
    if node.op == "LayerNormalization" and (any(node.outputs[1:]) or not all(graph.is_constant(p) for p in
                                                                              node.inputs[1:] if p)):  # fmt: skip
        return _layer_norm_as_ops(graph, node)
    if node.op == "Conv" and len(graph.types[node.inputs[0]].shape) == 3 and graph.is_constant(node.inputs[1]):
        return _conv1d_as_2d(graph, node)
    if node.op == "Conv" and len(graph.types[node.inputs[0]].shape) == 5 and graph.is_constant(node.inputs[1]):
        return _all_lowered(graph, _conv3d_as_2d(graph, node))
    if node.op in recurrent.DEFAULTS:
        return _all_lowered(graph, recurrent.stepped(graph, node, _Made(graph, node.name)))
    if node.op == "Col2Im":
        return _all_lowered(graph, _col2im_as_transposed_conv(graph, node))
    if node.op == "ConvTranspose":
        return _all_lowered(graph, _transposed_conv(graph, node))
    if node.op == "Conv" and len(graph.types[node.inputs[0]].shape) == 4 and graph.is_constant(node.inputs[1]):
        _live_taps(graph, node)
    return [node]


def _all_lowered(graph: Graph, nodes: list[Node]) -> list[Node]:
    """Nodes one was rewritten into, each lowered in turn."""
    return [lowered for node in nodes for lowered in _lowered(graph, node)]


def _live_taps(graph: Graph, node: Node) -> None:
    """Crop `node`'s window, along each spatial axis, to the taps some output position
    reads inside the input (explicit pads only); a pad the crop would make negative
    leaves that axis whole."""
    a, weight = node.attrs, graph.constants[node.inputs[1]]
    if a.get("auto_pad", "NOTSET") != "NOTSET" or not np.isfinite(weight).all():  # 0·inf is no zero
        return
    sizes, outs = graph.types[node.inputs[0]].shape[2:], graph.types[node.outputs[0]].shape[2:]
    pads, dilations, strides = list(a.get("pads", [0] * 4)), a.get("dilations", [1, 1]), a.get("strides", [1, 1])
    crop = [slice(None)] * 4
    for axis in range(2):
        k, d, s, size = weight.shape[2 + axis], dilations[axis], strides[axis], sizes[axis]
        live = [i for i in range(k) if any(0 <= y * s - pads[axis] + i * d < size for y in range(outs[axis]))]
        if not live or (live[0], live[-1]) == (0, k - 1):
            continue
        begin, end = pads[axis] - live[0] * d, pads[axis + 2] - (k - 1 - live[-1]) * d
        if begin >= 0 and end >= 0:
            pads[axis], pads[axis + 2], crop[2 + axis] = begin, end, slice(live[0], live[-1] + 1)
    if crop == [slice(None)] * 4:
        return
    kept = _Made(graph, node.name).constant("live_taps", np.ascontiguousarray(weight[tuple(crop)]))
    node.inputs = [node.inputs[0], kept, *node.inputs[2:]]
    node.attrs = {**a, "pads": pads, "kernel_shape": list(graph.types[kept].shape[2:])}


REGION_WORK_SHARE = 0.5
"""A convolution splits into its regions of live taps (`_tap_regions`) only where they
hold at most this share of its multiply-adds: each region costs a kernel call, a slice
and a concatenation of its own."""


def _tap_runs(k: int, d: int, s: int, pad: int, size: int, out: int) -> list[tuple[int, int, int, int]]:
    """Along one axis: runs (y0, y1, t0, t1) of output positions [y0, y1) whose filter
    taps inside the input are [t0, t1) (a contiguous range: the position a tap reads
    grows with it)."""
    runs: list[tuple[int, int, int, int]] = []
    for y in range(out):
        live = [t for t in range(k) if 0 <= y * s - pad + t * d < size]
        taps = (live[0], live[-1] + 1) if live else (0, 0)
        if runs and runs[-1][2:] == taps:
            runs[-1] = (runs[-1][0], y + 1, *taps)
        else:
            runs.append((y, y + 1, *taps))
    return runs


def _tap_regions(graph: Graph, node: Node) -> list[Node]:
    """`node`, or (where most of its multiply-adds would read padding: a window dilated
    nearly past a small input, as DeepLab's atrous pyramid) one unpadded convolution per
    region of outputs that read the same taps inside the input, by those taps only, of
    the input's slice they read; the regions concatenated along the width, then the
    height. After BatchNormalization is folded, which the split would keep apart."""
    if node.op != "Conv" or len(graph.types[node.inputs[0]].shape) != 4 or not graph.is_constant(node.inputs[1]):
        return [node]
    a, weight = node.attrs, graph.constants[node.inputs[1]]
    if a.get("auto_pad", "NOTSET") != "NOTSET" or not np.isfinite(weight).all():
        return [node]
    x, out_shape = node.inputs[0], graph.types[node.outputs[0]].shape
    pads, dilations, strides = a.get("pads", [0] * 4), a.get("dilations", [1, 1]), a.get("strides", [1, 1])
    runs = [_tap_runs(weight.shape[2 + i], dilations[i], strides[i], pads[i], graph.types[x].shape[2 + i],
                      out_shape[2 + i]) for i in range(2)]  # fmt: skip
    work = math.prod(sum((y1 - y0) * (t1 - t0) for y0, y1, t0, t1 in axis) for axis in runs)
    if work > REGION_WORK_SHARE * math.prod(out_shape[2:]) * math.prod(weight.shape[2:]) or any(
            t0 == t1 for axis in runs for *_, t0, t1 in axis):  # fmt: skip
        return [node]
    made, slices, window = _Made(graph, node.name), {}, (strides, dilations, pads)
    one_band, one_column = len(runs[0]) == 1, len(runs[1]) == 1  # the last op made writes the node's output
    bands = []
    for r in runs[0]:
        into = node.outputs[0] if one_band else ""
        row = [_region(made, slices, node, (r, c), window, into if one_column else "") for c in runs[1]]
        bands.append(row[0] if one_column else
                     made.op("Concat", row, (*out_shape[:2], r[1] - r[0], out_shape[3]), out=into, axis=3))
    if not one_band:
        made.op("Concat", bands, out_shape, out=node.outputs[0], axis=2)
    return made.nodes


def _region(made: _Made, slices: dict, node: Node, runs: tuple, window: tuple, into: str) -> str:
    """The convolution of one region (a row run and a column run of `_tap_runs`): its
    taps' filters over the input's slice they read (made once per slice), unpadded,
    written to `into` (else a new value)."""
    graph, (x, weight), (strides, dilations, pads) = made.graph, node.inputs[:2], window
    shape = graph.types[x].shape
    begins = [y0 * s - p + t0 * d for (y0, _, t0, _), s, d, p in zip(runs, strides, dilations, pads)]
    ends = [(y1 - 1) * s - p + (t1 - 1) * d + 1 for (_, y1, _, t1), s, d, p in zip(runs, strides, dilations, pads)]
    if (begins, ends) != ([0, 0], list(shape[2:])):
        if (tuple(begins), tuple(ends)) not in slices:
            slices[tuple(begins), tuple(ends)] = made.slice(x, begins, ends, [2, 3],
                                                            (*shape[:2], *(e - b for b, e in zip(begins, ends))))
        x = slices[tuple(begins), tuple(ends)]
    (_, _, h0, h1), (_, _, w0, w1) = runs
    taps = made.constant("taps", np.ascontiguousarray(graph.constants[weight][:, :, h0:h1, w0:w1]))
    region = (shape[0], graph.types[node.outputs[0]].shape[1], runs[0][1] - runs[0][0], runs[1][1] - runs[1][0])
    return made.op("Conv", [x, taps, *node.inputs[2:]], region, out=into, kernel_shape=[h1 - h0, w1 - w0],
                   dilations=list(dilations), strides=list(strides), group=node.attrs.get("group", 1),
                   pads=[0, 0, 0, 0])  # fmt: skip


def _transposed_conv(graph: Graph, node: Node) -> list[Node]:
    """ConvTranspose as a convolution: the input with s−1 zeros after each pixel along
    each axis, cropped or padded to d·(k−1) less the transposed convolution's pads,
    convolved at stride 1 and dilation d by each group's filters flipped, their input
    and output channels swapped."""
    x, weight = node.inputs[:2]
    if not graph.is_constant(weight):
        raise AutoconfigError(f"node {node.name!r} (ConvTranspose): computed weights are not generated")
    shape, out_shape, w = graph.types[x].shape, graph.types[node.outputs[0]].shape, graph.constants[weight]
    rank, a, group = len(shape) - 2, node.attrs, node.attrs.get("group", 1)
    if rank not in (1, 2, 3):
        raise AutoconfigError(f"node {node.name!r} (ConvTranspose): only 1-D to 3-D ones are generated, not {rank}-D")
    strides, dilations, kernel = a.get("strides", [1] * rank), a.get("dilations", [1] * rank), w.shape[2:]
    made = _Made(graph, node.name)
    z, inserted = _with_zeros_between(made, x, shape, strides)
    reach = [d * (k - 1) for d, k in zip(dilations, kernel)]
    lo = [r - b for r, b in zip(reach, _transposed_begins(a, shape[2:], out_shape[2:], kernel, strides, dilations))]
    hi = [o - n - low + r for o, n, low, r in zip(out_shape[2:], inserted, lo, reach)]
    if min(lo + hi) < 0:  # pads wider than the filter's reach crop the input
        starts, ends = [max(0, -v) for v in lo], [n - max(0, -v) for n, v in zip(inserted, hi)]
        axes = list(range(2, rank + 2))
        z = made.slice(z, starts, ends, axes, (*shape[:2], *(e - b for b, e in zip(starts, ends))))
    groups_first = w.reshape(group, w.shape[0] // group, w.shape[1], *kernel).swapaxes(1, 2)
    flipped = np.flip(groups_first, axis=tuple(range(3, 3 + rank))).reshape(group * w.shape[1], -1, *kernel)
    filters = made.constant("filters", np.ascontiguousarray(flipped, np.float32))
    made.nodes.append(Node(node.name, "Conv", [z, filters, *node.inputs[2:]], node.outputs,
                           {"kernel_shape": list(kernel), "dilations": list(dilations), "group": group,
                            "pads": [max(0, v) for v in lo] + [max(0, v) for v in hi]}))  # fmt: skip
    return made.nodes


def _col2im_as_transposed_conv(graph: Graph, node: Node) -> list[Node]:
    """Col2Im (each column a block of the image, the blocks summed into it) as a
    ConvTranspose over the grid of block positions, one group per image channel, by
    one-hot filters: tap t of a channel's block adds into pixel t of its window."""
    x, image, block = node.inputs
    if not (graph.is_constant(image) and graph.is_constant(block)):
        raise AutoconfigError(f"node {node.name!r} (Col2Im): a computed image or block shape is not generated")
    (n, columns, _), sizes = graph.types[x].shape, graph.types[node.outputs[0]].shape[2:]
    kernel = [int(k) for k in graph.constants[block]]
    rank, taps, a = len(kernel), math.prod(kernel), node.attrs
    if rank > 3:
        raise AutoconfigError(f"node {node.name!r} (Col2Im): only 1-D to 3-D images are generated, not {rank}-D")
    strides, dilations = a.get("strides", [1] * rank), a.get("dilations", [1] * rank)
    pads = a.get("pads", [0] * 2 * rank)
    padded = [size + pads[i] + pads[i + rank] for i, size in enumerate(sizes)]
    reach = [d * (k - 1) + 1 for d, k in zip(dilations, kernel)]
    grid = [(p - r) // s + 1 for p, r, s in zip(padded, reach, strides)]
    one_hot = np.eye(taps, dtype=np.float32).reshape(taps, 1, *kernel)
    made = _Made(graph, node.name)
    blocks = made.reshape(x, (n, columns, *grid))
    filters = made.constant("filters", np.tile(one_hot, (columns // taps, 1, *(1,) * rank)))
    made.nodes.append(Node(node.name, "ConvTranspose", [blocks, filters], node.outputs, {
        "group": columns // taps, "kernel_shape": kernel, "strides": list(strides), "dilations": list(dilations),
        "pads": list(pads), "output_padding": [p - (g - 1) * s - r for p, g, s, r in zip(padded, grid, strides, reach)]}))
    return made.nodes


def _transposed_begins(a: dict, sizes, out_sizes, kernel, strides, dilations) -> list[int]:
    """A ConvTranspose's padding before each axis: its pads, or (auto_pad SAME_* or an
    output_shape) the spec's split of the total padding its output size implies."""
    auto = a.get("auto_pad", "NOTSET")
    if auto == "VALID":
        return [0] * len(sizes)
    if auto == "NOTSET" and "output_shape" not in a:
        return list(a.get("pads", [0] * 2 * len(sizes))[: len(sizes)])
    extra = a.get("output_padding", [0] * len(sizes))
    totals = [s * (n - 1) + e + (k - 1) * d + 1 - o
              for s, n, e, k, d, o in zip(strides, sizes, extra, kernel, dilations, out_sizes)]  # fmt: skip
    return [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in totals]


def _with_zeros_between(made: _Made, x: str, shape: tuple[int, ...], strides) -> tuple[str, list[int]]:
    """`x` with s−1 zeros after each pixel along each spatial axis (a Pad of a view with
    a unit axis after each spatial one), and its new spatial sizes."""
    sizes = [n * s for n, s in zip(shape[2:], strides)]
    if all(s == 1 for s in strides):
        return x, sizes
    spread = [*shape[:2], *(v for n in shape[2:] for v in (n, 1))]
    view = made.reshape(x, tuple(spread))
    pads = [0] * len(spread) + [0, 0, *(v for s in strides for v in (0, s - 1))]
    padded = made.op("Pad", [view, made.constant("pads", np.array(pads, np.int64))],
                     (*shape[:2], *(v for n, s in zip(shape[2:], strides) for v in (n, s))))  # fmt: skip
    full = (*shape[:2], *sizes)
    return made.reshape(padded, full), sizes


def _conv3d_as_2d(graph: Graph, node: Node) -> list[Node]:
    """A 3-D convolution (N, C, D, H, W) as a 2-D one over N·D' images (D' output
    depths): the input padded along the depth, each depth tap's strided slice stacked
    beside its channel (im2col along the depth alone), the filters' depth taps folded
    into their input channels; the output moved back to (N, Cout, D', H', W')."""
    x, weight = node.inputs[:2]
    shape, out_shape, w = graph.types[x].shape, graph.types[node.outputs[0]].shape, graph.constants[weight]
    (n, c, depth), a, taps = shape[:3], node.attrs, w.shape[2]
    strides, dilations = list(a.get("strides", [1, 1, 1])), list(a.get("dilations", [1, 1, 1]))
    pads = list(window_pads(node, graph, w.shape[2:], strides, dilations))
    made, outs = _Made(graph, node.name), out_shape[2]
    padded = depth + pads[0] + pads[3]
    if pads[0] or pads[3]:
        x = made.op("Pad", [x, made.constant("pads", np.array([0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0], np.int64))],
                    (n, c, padded, *shape[3:]))  # fmt: skip
    sliced = (n, c, 1, outs, *shape[3:])
    stacked = [made.reshape(made.slice(x, [t * dilations[0]], [t * dilations[0] + (outs - 1) * strides[0] + 1], [2],
                                       (n, c, outs, *shape[3:]), [strides[0]]), sliced) for t in range(taps)]  # fmt: skip
    columns = made.op("Concat", stacked, (n, c, taps, outs, *shape[3:]), axis=2) if taps > 1 else stacked[0]
    moved = made.op("Transpose", [columns], (n, outs, c, taps, *shape[3:]), perm=[0, 3, 1, 2, 4, 5])
    images = made.reshape(moved, (n * outs, c * taps, *shape[3:]))
    filters = made.constant("filters", np.ascontiguousarray(w.reshape(w.shape[0], -1, *w.shape[3:]), np.float32))
    y = made.op("Conv", [images, filters, *node.inputs[2:]], (n * outs, out_shape[1], *out_shape[3:]),
                kernel_shape=list(w.shape[3:]), strides=strides[1:], dilations=dilations[1:],
                pads=[pads[1], pads[2], pads[4], pads[5]], group=a.get("group", 1))  # fmt: skip
    y = made.reshape(y, (n, outs, *out_shape[1:2], *out_shape[3:]))
    made.nodes.append(Node(node.name, "Transpose", [y], node.outputs, {"perm": [0, 2, 1, 3, 4]}))
    return made.nodes


def _conv1d_as_2d(graph: Graph, node: Node) -> list[Node]:
    """A 1-D convolution (N, C, W) as a 2-D one on (N, C, 1, W): a window of one row,
    the attributes' single values along the width; views of the same memory around it."""
    x, weight = node.inputs[:2]
    (n, c, width), out_shape = graph.types[x].shape, graph.types[node.outputs[0]].shape
    a = node.attrs
    attrs = {"group": a.get("group", 1), "kernel_shape": [1, graph.constants[weight].shape[2]],
             "strides": [1, *a.get("strides", [1])], "dilations": [1, *a.get("dilations", [1])]}  # fmt: skip
    if a.get("auto_pad", "NOTSET") != "NOTSET":
        attrs["auto_pad"] = a["auto_pad"]
    else:
        begin, end = a.get("pads", [0, 0])
        attrs["pads"] = [0, begin, 0, end]
    made = _Made(graph, node.name)
    rows = made.reshape(x, (n, c, 1, width))
    kernel = made.constant("weight", graph.constants[weight][:, :, None, :])
    y = made.op("Conv", [rows, kernel, *node.inputs[2:]], (*out_shape[:2], 1, out_shape[2]), **attrs)
    made.nodes.append(Node(node.name, "Reshape", [y, made.constant("shape", np.array(out_shape, np.int64))],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


def _instance_norm_as_ops(graph: Graph, node: Node) -> list[Node]:
    """Normalized per image and channel over the spatial axes, then scaled and shifted
    per channel by constants."""
    x, scale, bias = node.inputs
    shape = graph.types[x].shape
    if not (graph.is_constant(scale) and graph.is_constant(bias)):
        raise AutoconfigError(f"node {node.name!r} (InstanceNormalization): computed scale and bias are not generated")
    per_channel = (shape[1], *(1,) * (len(shape) - 2))
    return _normalized_as_ops(graph, node, tuple(range(2, len(shape))), per_channel)


def _layer_norm_as_ops(graph: Graph, node: Node) -> list[Node]:
    """Normalized over the axes from `axis` on, then scaled and shifted by constants
    broadcast over those axes (opset 17), with the mean and inverse deviation outputs
    where asked for."""
    x, *params = node.inputs
    shape = graph.types[x].shape
    if not all(graph.is_constant(p) for p in params if p):
        raise AutoconfigError(f"node {node.name!r} (LayerNormalization): computed scale and bias are not generated")
    axis = node.attrs.get("axis", -1) % len(shape)
    return _normalized_as_ops(graph, node, tuple(range(axis, len(shape))), shape[axis:])


def _normalized_as_ops(graph: Graph, node: Node, axes: tuple[int, ...], params: tuple[int, ...]) -> list[Node]:
    """(x − mean) · (1 / √(variance + ε)) · scale + bias, the statistics over `axes`, scale
    and bias (the node's inputs 1 and 2, a bias optional) as constants of shape `params`;
    the node's outputs 2 and 3, where named, the mean and the inverse deviation."""
    x, scale, bias = [*node.inputs, ""][:3]
    y, mean_out, inverse_out = [*node.outputs, "", ""][:3]
    shape = graph.types[x].shape
    stats = _kept(shape, axes)
    made = _Made(graph, node.name)
    mean = made.op("ReduceMean", [x], stats, axes=list(axes), keepdims=1, out=mean_out)
    centred = made.op("Sub", [x, mean], shape)
    variance = made.op("ReduceMean", [made.op("Mul", [centred, centred], shape)], stats, axes=list(axes), keepdims=1)
    epsilon = made.constant("epsilon", np.array(node.attrs.get("epsilon", 1e-5), np.float32))
    deviation = made.op("Sqrt", [made.op("Add", [variance, epsilon], stats)], stats)
    inverse = made.op("Div", [made.constant("one", np.ones(stats, np.float32)), deviation], stats, out=inverse_out)
    normed = made.op("Mul", [centred, inverse], shape)
    scale = made.constant("scale", _shaped(graph.constants[scale], params))
    if bias:
        normed = made.op("Mul", [normed, scale], shape)
        scale = made.constant("bias", _shaped(graph.constants[bias], params))
    made.nodes.append(Node(node.name, "Add" if bias else "Mul", [normed, scale], [y], {}))
    return made.nodes


def _trilu_as_selection(graph: Graph, node: Node) -> list[Node] | None:
    """Trilu as Where(a constant triangle of its last two axes, x, 0): the elements on
    and above (upper) or below (lower) the k-th diagonal kept."""
    if node.op != "Trilu":
        return None
    x, k = [*node.inputs, ""][:2]
    if k and not graph.is_constant(k):
        raise AutoconfigError(f"node {node.name!r} (Trilu): a diagonal computed at run time is not generated")
    rows, columns = graph.types[x].shape[-2:]
    offset = int(np.asarray(graph.constants[k]).reshape(-1)[0]) if k else 0
    above = np.arange(columns)[None, :] - np.arange(rows)[:, None]  # column − row
    kept = above >= offset if node.attrs.get("upper", 1) else above <= offset
    made = _Made(graph, node.name)
    made.nodes.append(Node(node.name, "Where", [made.constant("kept", kept), x,
                                                made.constant("zero", np.zeros((), np.float32))], node.outputs, {}))
    return made.nodes


def _mod(graph: Graph, node: Node) -> list[Node] | None:
    """Mod as x - q·y for the quotient x/y rounded down (the rest takes y's sign), or
    toward zero with fmod (x's), then moved by a y into [0, |y|) times that sign where
    x/y rounded past a whole number. Exact for integers (held as
    float32) within 2^24; a float's rest within a rounding of the product q·y (C's fmod,
    onnxruntime's, is exact); a zero divisor gives NaN."""
    if node.op != "Mod":
        return None
    (x, y), out, toward_zero = node.inputs, node.outputs[0], node.attrs.get("fmod", 0)
    m, shape = _Made(graph, node.name), graph.types[out].shape
    quotient = m.op("Div", [x, y], shape)
    if toward_zero:
        whole = m.op("Mul", [m.op("Sign", [quotient], shape), m.op("Floor", [m.op("Abs", [quotient], shape)], shape)],
                     shape)  # fmt: skip
    else:
        whole = m.op("Floor", [quotient], shape)
    zero = m.constant("zero", np.float32(0))
    taken = m.op("Where", [m.op("Equal", [whole, zero], shape), zero, m.op("Mul", [whole, y], shape)], shape)
    rest = m.op("Sub", [x, taken], shape)  # x itself where no whole y fits (0·∞ is no NaN)
    sign = m.op("Sign", [x if toward_zero else y], graph.types[x if toward_zero else y].shape)
    size = m.op("Abs", [y], graph.types[y].shape)
    step = m.op("Mul", [sign, size], shape)  # |y| with the rest's sign
    past = m.op("GreaterOrEqual", [m.op("Mul", [rest, sign], shape), size], shape)  # 1 where a whole y is left
    rest = m.op("Sub", [rest, m.op("Where", [past, step, zero], shape)], shape)  # (0·∞ would be NaN)
    short = m.op("Less", [m.op("Mul", [rest, sign], shape), zero], shape)  # 1 where the rest has the wrong sign
    m.op("Add", [rest, m.op("Where", [short, step, zero], shape)], shape, out=out)  # an infinite y: x, or ±∞
    return m.nodes


def _reverse_sequence(graph: Graph, node: Node) -> list[Node] | None:
    """ReverseSequence by constant lengths as one Gather of the input flattened, by a
    constant index per element: each batch entry's first lengths[b] steps reversed
    along the time axis, the rest in place."""
    if node.op != "ReverseSequence":
        return None
    x, lengths = node.inputs
    if not graph.is_constant(lengths):
        raise AutoconfigError(f"node {node.name!r} (ReverseSequence): lengths computed at run time are not generated")
    shape = graph.types[x].shape
    time, batch = node.attrs.get("time_axis", 0), node.attrs.get("batch_axis", 1)
    source = np.arange(math.prod(shape)).reshape(shape)
    for b, length in enumerate(np.asarray(graph.constants[lengths]).reshape(-1)):
        steps = [slice(None)] * len(shape)
        steps[batch], steps[time] = b, slice(0, int(length))
        source[tuple(steps)] = np.flip(source[tuple(steps)], axis=time - (batch < time))
    m = _Made(graph, node.name)
    flat = m.reshaped(x, (math.prod(shape),))
    m.op("Gather", [flat, m.constant("source", source.astype(np.int64))], shape, out=node.outputs[0], axis=0)
    return m.nodes


def _one_hot(graph: Graph, node: Node) -> list[Node] | None:
    """OneHot as Where(the index (a negative one wrapped) equal to each class along the
    new axis, on, off): an index outside [-depth, depth), or a float one that is not an
    integer (as onnxruntime and onnx's reference compare them), hits no class. Its depth
    is a constant (it sets the output's shape)."""
    if node.op != "OneHot":
        return None
    indices, depth, values = node.inputs
    if not graph.is_constant(depth):
        raise AutoconfigError(f"node {node.name!r} (OneHot): a depth computed at run time is not generated")
    m, shape, out = _Made(graph, node.name), graph.types[indices].shape, node.outputs[0]
    out_shape, classes = graph.types[out].shape, int(np.asarray(graph.constants[depth]).reshape(-1)[0])
    axis = node.attrs.get("axis", -1) % len(out_shape)
    below = m.op("Less", [indices, m.constant("zero", np.float32(0))], shape)
    wrapped = m.op("Where", [below, m.op("Add", [indices, m.constant("depth", np.float32(classes))], shape), indices],
                   shape)  # fmt: skip
    hit = m.op("Equal", [m.reshape(wrapped, out_shape[:axis] + (1,) + out_shape[axis + 1:]),
                         m.constant("classes", np.arange(classes, dtype=np.float32).reshape(
                             [classes if a == axis else 1 for a in range(len(out_shape))]))], out_shape)  # fmt: skip
    off, on = (m.op("Gather", [values, m.constant("which", np.array(i, np.int64))], (), axis=0) for i in (0, 1))
    m.op("Where", [hit, on, off], out_shape, out=out)
    return m.nodes


SCATTER_FILL = {"add": ("Add", 0.0), "mul": ("Mul", 1.0), "max": ("Max", -math.inf), "min": ("Min", math.inf)}
"""A Scatter's reduction: the op combining the data with the updates, and its identity
(what an element no update lands on is combined with)."""

SCATTER_ROUNDS = 16
"""Most updates a reduction may land on one element: each is one more full-size Gather
and combining op."""


def _affine_grid(graph: Graph, node: Node) -> list[Node] | None:
    """AffineGrid of θ [N, 2, 3] over a constant 2-D size as the product of the grid's
    points [x, y, 1] (a constant [H·W, 3], each side's coordinates from -1 to 1: the
    outer pixels' centres with align_corners, else their edges) by each θᵀ. (ONNX's
    function body for it squeezes away a batch of one.)"""
    if node.op != "AffineGrid":
        return None
    theta, size = node.inputs
    if not graph.is_constant(size) or np.asarray(graph.constants[size]).size != 4:
        raise AutoconfigError(f"node {node.name!r} (AffineGrid): only a constant 2-D size is generated")
    n, _, h, w = (int(v) for v in np.asarray(graph.constants[size]))

    def along(count: int) -> np.ndarray:
        if node.attrs.get("align_corners", 0):
            return np.linspace(-1, 1, count)
        return (np.arange(count) * 2 + 1) / count - 1

    ys, xs = np.meshgrid(along(h), along(w), indexing="ij")
    m = _Made(graph, node.name)
    points = m.constant("points", np.stack([xs.ravel(), ys.ravel(), np.ones(h * w)], 1).astype(np.float32))
    mapped = m.op("MatMul", [points, m.op("Transpose", [theta], (n, 3, 2), perm=[0, 2, 1])], (n, h * w, 2))
    m.reshape(mapped, (n, h, w, 2), out=node.outputs[0])
    return m.nodes


def _grid_sample(graph: Graph, node: Node) -> list[Node] | None:
    """GridSample of an image [N, C, H, W] at the grid's points [N, Ho, Wo, 2] as rows
    gathered from the image held as [N·H·W, C] (pixels' channels), by each tap's pixel
    index computed from the grid (held as float32), each row times its tap's weight,
    summed: the bilinear or bicubic taps' weights (zero outside the image with zeros
    padding), or the nearest pixel's; border and reflection padding move the point, and
    then each tap, into the image first."""
    if node.op != "GridSample":
        return None
    x, grid = node.inputs
    if len(graph.types[x].shape) != 4:
        raise AutoconfigError(f"node {node.name!r} (GridSample): only 2-D sampling (a 4-D image) is generated")
    (n, c, h, w), (_, ho, wo, _) = graph.types[x].shape, graph.types[grid].shape
    m, points, attrs = _Made(graph, node.name), (n, ho, wo), node.attrs
    table = m.reshape(m.op("Transpose", [x], (n, h, w, c), perm=[0, 2, 3, 1]), (n * h * w, c))
    coordinates = [_grid_coordinate(m, grid, axis, size, attrs, points) for axis, size in ((0, w), (1, h))]
    taps = [_grid_taps(m, at, attrs.get("mode", "bilinear"), points) for at in coordinates]
    first = m.constant("first", (np.arange(n) * h * w).reshape(n, 1, 1).astype(np.float32))
    zeros = attrs.get("padding_mode", "zeros") == "zeros"
    terms = []
    for (column, across), (row, down) in itertools.product(*taps):
        weight = m.op("Mul", [across, down], points) if across else ""
        if zeros:
            inside = m.op("Mul", [_inside(m, column, w, points), _inside(m, row, h, points)], points)
            weight = m.op("Mul", [weight, inside], points) if weight else inside
        pixel = m.op("Add", [m.op("Mul", [_tap_pixel(m, row, h, attrs, points), m.constant("w", np.float32(w))], points),
                             _tap_pixel(m, column, w, attrs, points)], points)  # fmt: skip
        rows = m.op("Gather", [table, m.op("Add", [pixel, first], points)], (*points, c), axis=0)
        terms.append(m.op("Mul", [rows, m.reshape(weight, (*points, 1))], (*points, c)) if weight else rows)
    total = functools.reduce(lambda a, b: m.op("Add", [a, b], (*points, c)), terms)
    m.op("Transpose", [total], (n, c, ho, wo), out=node.outputs[0], perm=[0, 3, 1, 2])
    return m.nodes


def _grid_coordinate(m: _Made, grid: str, axis: int, size: int, attrs: dict, points: tuple[int, ...]) -> str:
    """The grid's `axis` (x: 0, y: 1) as a pixel coordinate along a side of `size`:
    -1 and 1 the outer pixels' centres (align_corners) or edges; rounded in nearest
    mode; then clipped into the image (border padding) or reflected into it
    (reflection), but in bicubic mode, where onnxruntime (as torch) pads only the taps."""
    normalized = m.op("Gather", [grid, m.constant("axis", np.array(axis, np.int64))], points, axis=3)
    half = (size - 1) / 2 if attrs.get("align_corners", 0) else size / 2
    at = m.op("Add", [m.op("Mul", [normalized, m.constant("half", np.float32(half))], points),
                      m.constant("centre", np.float32((size - 1) / 2))], points)  # fmt: skip
    if attrs.get("mode") == "nearest":
        at = m.op("Round", [at], points)  # half to even, as onnxruntime and the reference round
    if attrs.get("mode") in ("bicubic", "cubic"):
        return at
    padding = attrs.get("padding_mode", "zeros")
    if padding == "border":
        return _clipped(m, at, size, points)
    return _reflected(m, at, size, attrs, points) if padding == "reflection" else at


def _grid_taps(m: _Made, at: str, mode: str, points: tuple[int, ...]) -> list[tuple[str, str]]:
    """(pixel, weight) of each tap along one side: the nearest pixel (weight 1: ""); the
    two around the point, each weighted by the nearness of the other; or the four of
    Keys' cubic convolution (a = -0.75) around it."""
    if mode == "nearest":
        return [(at, "")]
    below = m.op("Floor", [at], points)
    beyond = m.op("Sub", [at, below], points)

    def pixel(step: int) -> str:
        return m.op("Add", [below, m.constant("step", np.float32(step))], points) if step else below

    def past(start: int) -> str:  # start - beyond
        return m.op("Sub", [m.constant("start", np.float32(start)), beyond], points)

    if mode in ("bilinear", "linear"):
        return [(below, past(1)), (pixel(1), beyond)]
    near, far = (1, 0, -(CUBIC_A + 3), CUBIC_A + 2), (-4 * CUBIC_A, 8 * CUBIC_A, -5 * CUBIC_A, CUBIC_A)
    distances = [(far, m.op("Add", [beyond, m.constant("one", np.float32(1))], points)), (near, beyond),
                 (near, past(1)), (far, past(2))]  # fmt: skip
    return [(pixel(step), _polynomial(m, at_distance, kernel, points))
            for step, (kernel, at_distance) in zip((-1, 0, 1, 2), distances)]  # fmt: skip


CUBIC_A = -0.75
"""The cubic convolution kernel's parameter that ONNX's GridSample and onnxruntime use."""


def _polynomial(m: _Made, u: str, coefficients: tuple[float, ...], points: tuple[int, ...]) -> str:
    """c0 + c1·u + c2·u² + c3·u³ by Horner's rule."""
    total = m.constant("c", np.float32(coefficients[-1]))
    for c in reversed(coefficients[:-1]):
        total = m.op("Add", [m.op("Mul", [total, u], points), m.constant("c", np.float32(c))], points)
    return total


def _tap_pixel(m: _Made, at: str, size: int, attrs: dict, points: tuple[int, ...]) -> str:
    """A tap's pixel inside the image: reflected into it first with reflection padding
    (a bicubic tap may lie two pixels out), then clipped (a tap outside weighs 0 with
    zeros padding; with border padding, only a tap of weight 0 lies outside)."""
    if attrs.get("padding_mode") == "reflection":
        at = _reflected(m, at, size, attrs, points)
    return _clipped(m, at, size, points)


def _reflected(m: _Made, at: str, size: int, attrs: dict, points: tuple[int, ...]) -> str:
    """`at` reflected at the image's bounds (the outer pixels' centres with
    align_corners, else their edges) until inside: lo + r - |((at - lo) mod 2r) - r|
    for the bounds' distance r."""
    low, high = (0.0, size - 1.0) if attrs.get("align_corners", 0) else (-0.5, size - 0.5)
    reach = high - low
    if not reach:  # one pixel, aligned: every point is its centre
        return _clipped(m, at, size, points)
    shifted = m.op("Sub", [at, m.constant("low", np.float32(low))], points)
    period = m.constant("period", np.float32(2 * reach))
    # the rest of a floor, not a Mod: a finite positive period needs none of `_mod`'s fix-ups (more kernels)
    turns = m.op("Floor", [m.op("Div", [shifted, period], points)], points)
    wrapped = m.op("Sub", [shifted, m.op("Mul", [turns, period], points)], points)
    off = m.op("Abs", [m.op("Sub", [wrapped, m.constant("reach", np.float32(reach))], points)], points)
    return m.op("Sub", [m.constant("middle", np.float32(low + reach)), off], points)


def _clipped(m: _Made, at: str, size: int, points: tuple[int, ...]) -> str:
    """`at` clipped into [0, size - 1]."""
    return m.op("Clip", [at, m.constant("low", np.float32(0)), m.constant("high", np.float32(size - 1))], points)


def _inside(m: _Made, at: str, size: int, points: tuple[int, ...]) -> str:
    """1 where the pixel `at` lies in [0, size - 1], else 0."""
    return m.op("Equal", [_clipped(m, at, size, points), at], points)


def _scatter_as_gather(graph: Graph, node: Node) -> list[Node] | None:
    """ScatterND and ScatterElements by constant indices as one Gather, by a constant
    index per output element, of the data and the updates flattened and concatenated:
    an element takes the last update landing on it (as onnxruntime applies them in
    order), or stays. With a reduction, the data combined with such a Gather of the
    updates and the reduction's identity, once per update an element gets (in their
    order, as onnxruntime combines them)."""
    if node.op not in ("ScatterND", "ScatterElements"):
        return None
    data, indices, updates = node.inputs
    if not graph.is_constant(indices):
        raise AutoconfigError(f"node {node.name!r} ({node.op}): indices computed at run time are not generated")
    shape, dtype = graph.types[data].shape, graph.types[data].dtype
    try:
        targets = _scatter_targets(node, shape, np.asarray(graph.constants[indices], np.int64))
    except IndexError as err:
        raise AutoconfigError(f"node {node.name!r} ({node.op}): {err}") from None
    size, count, output = math.prod(shape), targets.size, node.outputs[0]
    if not count:  # no updates: the data as it is
        return [Node(node.name, "Identity", [data], [output], {})]
    m = _Made(graph, node.name)

    def gathered(joined: str, source: np.ndarray, out: str = "") -> str:
        picked = m.op("Gather", [joined, m.constant("source", source)], (size,), axis=0)
        return m.reshape(_typed(graph, picked, dtype), shape, out=out)

    def flat(value: str) -> str:
        return m.reshaped(value, (graph.types[value].elements,))

    flat_updates = flat(updates)
    reduction = node.attrs.get("reduction", "none")
    if reduction == "none":
        last = count - 1 - np.unique(targets[::-1], return_index=True)[1]  # each target's last update
        source = np.arange(size, dtype=np.int64)
        source[targets[last]] = size + last
        gathered(_typed(graph, m.op("Concat", [flat(data), flat_updates], (size + count,), axis=0),
                        dtype), source, out=output)  # fmt: skip
        return m.nodes
    combine, identity = SCATTER_FILL[reduction]
    rounds = _occurrence(targets)
    if rounds.max(initial=0) >= SCATTER_ROUNDS:
        raise AutoconfigError(f"node {node.name!r} ({node.op}): {rounds.max() + 1} updates landing on one element "
                              f"(more than {SCATTER_ROUNDS}) are not generated")  # fmt: skip
    if np.dtype(dtype).kind in "iu":  # the integers' own extremes for max and min
        identity = np.clip(identity, np.iinfo(dtype).min, np.iinfo(dtype).max)
    joined = _typed(graph, m.op("Concat", [flat_updates, m.constant("identity", np.array([identity], dtype))],
                                (count + 1,), axis=0), dtype)  # fmt: skip
    result = data
    for number in range(rounds.max(initial=0) + 1):
        source = np.full(size, count, np.int64)
        source[targets[rounds == number]] = np.flatnonzero(rounds == number)
        final = number == rounds.max(initial=0)
        result = _typed(graph, m.op(combine, [result, gathered(joined, source)], shape, out=output if final else ""), dtype)
    return m.nodes


def _typed(graph: Graph, value: str, dtype: str) -> str:
    """`value` given the element type `dtype`."""
    graph.types[value] = TensorType(graph.types[value].shape, dtype)
    return value


def _occurrence(targets: np.ndarray) -> np.ndarray:
    """For each target, how many earlier ones are equal to it."""
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    firsts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[firsts, ordered.size])
    rounds = np.empty_like(targets)
    rounds[order] = np.arange(ordered.size) - np.repeat(firsts, counts)
    return rounds


def _scatter_targets(node: Node, shape: tuple[int, ...], indices: np.ndarray) -> np.ndarray:
    """The flat position in the data of each update element, in the updates' order
    (negative indices counted from the end; IndexError for one out of range)."""
    if node.op == "ScatterND":
        depth = indices.shape[-1]
        rows = indices.reshape(-1, depth)
        starts = np.ravel_multi_index(tuple(_in_range(rows[:, i], shape, i) for i in range(depth)), shape[:depth])
        inner = math.prod(shape[depth:])
        return (starts[:, None] * inner + np.arange(inner)[None, :]).reshape(-1)
    axis = node.attrs.get("axis", 0) % len(shape)
    where = list(np.indices(indices.shape))
    where[axis] = _in_range(indices, shape, axis)
    return np.ravel_multi_index(tuple(where), shape).reshape(-1)


def _in_range(indices: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """`indices` into `axis` of `shape`, the negative ones counted from its end."""
    size = shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise IndexError(f"the indices along axis {axis} ({indices.min()} .. {indices.max()}) reach outside its "
                         f"{size} elements")  # fmt: skip
    return np.where(indices < 0, indices + size, indices)


def _gather_nd_by_rows(graph: Graph, node: Node) -> list[Node] | None:
    """GatherND by indices computed at run time (CLIP's pooled token: the hidden state at
    each text's largest id) as a Gather of the data's rows, viewed as [rows, rest], by
    each index tuple's row: Σ index_k · stride_k (a negative index counted from its
    axis' end) plus its batch's first row; integers the model computes, so an index
    outside the data gives a row of NaN."""
    if node.op != "GatherND" or graph.is_constant(node.inputs[1]):
        return None
    data, indices = node.inputs
    shape, at = graph.types[data].shape, graph.types[indices].shape
    batch, depth = node.attrs.get("batch_dims", 0), at[-1]
    m, positions = _Made(graph, node.name), at[:-1]
    axes = shape[batch:batch + depth]

    def integer(op: str, inputs: list[str], **attrs: int) -> str:
        return _typed(graph, m.op(op, inputs, positions, **attrs), "int64")

    row = ""
    for k, size in enumerate(axes):
        index = integer("Gather", [indices, m.constant("k", np.array(k, np.int64))], axis=len(positions))
        negative = integer("Less", [index, m.constant("zero", np.array(0, np.int64))])
        index = integer("Where", [negative, integer("Add", [index, m.constant("size", np.array(size, np.int64))]),
                                  index])  # fmt: skip
        stride = math.prod(axes[k + 1:])
        term = integer("Mul", [index, m.constant("stride", np.array(stride, np.int64))]) if stride > 1 else index
        row = integer("Add", [row, term]) if row else term
    if batch:  # each index tuple's batch: its first row
        first = np.arange(math.prod(shape[:batch]), dtype=np.int64).reshape(shape[:batch]) * math.prod(axes)
        row = integer("Add", [row, m.constant("first", first.reshape(*shape[:batch], *[1] * (len(positions) - batch)))])
    rows = m.reshaped(data, (math.prod(shape[:batch + depth]), *shape[batch + depth:]))
    gathered = m.op("Gather", [rows, row], graph.types[node.outputs[0]].shape, out=node.outputs[0], axis=0)
    _typed(graph, gathered, graph.types[data].dtype)
    return m.nodes


def _cast_like(graph: Graph, node: Node) -> list[Node] | None:
    """CastLike as a Cast to its second input's type."""
    if node.op != "CastLike":
        return None
    dtype = graph.types[node.inputs[1]].dtype
    try:
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except TypeError:  # a type numpy does not know (bfloat16, float8 ...)
        raise AutoconfigError(f"node {node.name!r} (CastLike): a cast to {dtype} is not generated") from None
    return [Node(node.name, "Cast", node.inputs[:1], node.outputs, {"to": int(to)})]


def _shaped(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`values` in `shape`: reshaped where they are as many, else broadcast."""
    values = np.asarray(values, np.float32)
    return values.reshape(shape) if values.size == np.prod(shape) else np.broadcast_to(values, shape).copy()


CUMSUM_AXIS_LIMIT = 2048
"""The longest axis a CumSum runs along as a product: its triangle of weights holds the
axis' length squared (16 MB at 2048), and each output costs that many multiply-adds
(masks and position counters run along a few hundred tokens)."""


def _cumsum_as_product(graph: Graph, node: Node) -> list[Node]:
    """CumSum along its axis as Reshape → MatMul by a constant triangle of ones (each
    output the sum of the inputs at or before it: exclusive, strictly before; reverse,
    at or after) → Reshape."""
    shape = list(graph.types[node.inputs[0]].shape)
    if not graph.is_constant(node.inputs[1]):
        raise AutoconfigError(f"node {node.name!r} (CumSum): an axis computed at run time is not generated")
    axis = int(np.asarray(graph.constants[node.inputs[1]]).reshape(-1)[0]) % len(shape)
    if shape[axis] > CUMSUM_AXIS_LIMIT:
        raise AutoconfigError(f"node {node.name!r} (CumSum): along {shape[axis]} elements, more than the "
                              f"{CUMSUM_AXIS_LIMIT} generated (as a product with a triangle of ones)")  # fmt: skip
    before = np.tri(shape[axis], k=-1 if node.attrs.get("exclusive", 0) else 0)  # [out, in]: in <= out
    weights = before.T if node.attrs.get("reverse", 0) else before
    made = _Made(graph, node.name)
    summed = made.along_axis(node.inputs[0], shape, axis, weights, None)
    made.nodes.append(Node(node.name, "Reshape", [summed, made.constant("shape", np.array(shape, np.int64))],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


def _resize_as_products(graph: Graph, node: Node) -> list[Node]:
    """A linear or cubic Resize as, per resized axis in the order onnx's reference takes
    them, Reshape → MatMul by that axis' weights → Reshape (and an Add of the values
    outputs outside a tf_crop_and_resize roi take); the last value is the node's output."""
    x = node.inputs[0]
    shape = list(graph.types[x].shape)
    given = [*node.inputs[1:], "", "", ""][:3]
    roi, scales, sizes = (np.asarray(graph.constants[i]).reshape(-1) if i else None for i in given)
    out_shape, factors = resize_shape(node.attrs, tuple(shape), scales, sizes)
    axes = [int(v) % len(shape) for v in node.attrs.get("axes") or range(len(shape))]
    bounds = {}
    if roi is not None and roi.size:
        bounds = {ax: (float(roi[i]), float(roi[i + len(axes)])) for i, ax in enumerate(axes)}
    made = _Made(graph, node.name)
    current = x
    for axis in axes:
        window = bounds.get(axis)
        if out_shape[axis] == shape[axis] and np.isclose(factors[axis], 1.0) and window in (None, (0.0, 1.0)):
            continue
        weights, fill = resize_axis(node.attrs, shape[axis], out_shape[axis], factors[axis], window)
        current = made.along_axis(current, shape, axis, weights, fill)
        shape[axis] = out_shape[axis]
    made.nodes.append(Node(node.name, "Identity" if current == x else "Reshape",
                           [current, *([] if current == x else [made.constant("shape", np.array(shape, np.int64))])],
                           node.outputs, {}))  # fmt: skip
    return made.nodes


class _Made:
    """Nodes and values made in place of one node, named after it."""

    def __init__(self, graph: Graph, stem: str):
        self.graph, self.stem, self.nodes = graph, stem, []

    def fresh(self, what: str) -> str:
        """A value name not yet in the graph (nodes made in place of another's made nodes
        share the stem)."""
        name = f"{self.stem}.{what}"
        suffix = 0
        while f"{name}{suffix}" in self.graph.types:
            suffix += 1
        return f"{name}{suffix}"

    def value(self, what: str, shape: tuple[int, ...]) -> str:
        name = self.fresh(what)
        self.graph.types[name] = TensorType(tuple(int(d) for d in shape), "float32")
        return name

    def constant(self, what: str, array: np.ndarray) -> str:
        name = self.fresh(what)
        self.graph.constants[name] = array
        self.graph.types[name] = TensorType(tuple(array.shape), array.dtype.name)
        return name

    def op(self, op: str, inputs: list[str], shape: tuple[int, ...], out: str = "", **attrs) -> str:
        """A node of `op` made, its output `out` (an existing value's name) or a new value;
        a new value of constants only is computed now (import folded before the rewrites)."""
        if not out and inputs and all(self.graph.is_constant(i) for i in inputs if i):
            arrays = [np.asarray(self.graph.constants[i]) if i else None for i in inputs]
            return self.constant(op.lower(), np.asarray(OPERATORS[op].reference(attrs, *arrays)))
        out = out or self.value(op.lower(), shape)
        self.nodes.append(Node(out, op, inputs, [out], attrs))
        return out

    def reshape(self, x: str, shape: tuple[int, ...], out: str = "") -> str:
        """A Reshape of `x` to `shape` made (its shape a constant)."""
        return self.op("Reshape", [x, self.constant("shape", np.array(shape, np.int64))], tuple(shape), out=out)

    def reshaped(self, x: str, shape: tuple[int, ...]) -> str:
        """`x` in `shape`, in its own element type: a constant reshaped now (a view of a
        constant is no buffer's), else a Reshape made."""
        if self.graph.is_constant(x):
            return self.constant("reshaped", np.asarray(self.graph.constants[x]).reshape(shape))
        return _typed(self.graph, self.reshape(x, shape), self.graph.types[x].dtype)

    def slice(self, x: str, starts: list[int], ends: list[int], axes: list[int], shape: tuple[int, ...],
              steps: list[int] | None = None) -> str:  # fmt: skip
        """A Slice of `x` made (its bounds, axes and steps constants), of `shape`."""
        bounds = [("starts", starts), ("ends", ends), ("axes", axes), *([("steps", steps)] if steps else [])]
        return self.op("Slice", [x, *(self.constant(what, np.array(v, np.int64)) for what, v in bounds)], tuple(shape))

    def along_axis(self, x: str, shape: list[int], axis: int, weights: np.ndarray, fill: np.ndarray | None) -> str:
        """`x` (of `shape`) times `weights` (out × in) along `axis`, plus `fill` per output."""
        outer, size, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
        out = weights.shape[0]
        if inner == 1:  # rows of the axis' values: x · Wᵀ
            rows = self.reshape(x, (outer, size))
            y = self.op("MatMul", [rows, self.constant("weights", weights.T.astype(np.float32))], (outer, out))
            added = (out,)
        else:  # W · (each outer slice as size × inner)
            slices = self.reshape(x, (outer, size, inner))
            y = self.op("MatMul", [self.constant("weights", weights.astype(np.float32)), slices], (outer, out, inner))
            added = (out, 1)
        if fill is not None:
            y = self.op("Add", [y, self.constant("fill", fill.astype(np.float32).reshape(added))],
                        self.graph.types[y].shape)  # fmt: skip
        return y
