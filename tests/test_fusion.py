"""Fusion: mapping types, legality, and plans — DP equal to a brute-force optimum on
small random DAGs, every plan legal, DP never costlier than TVM's greedy rules."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from autoconfig.fusion import plan
from autoconfig.fusion.classify import LEGALITY, Legality, Mapping, mapping
from autoconfig.fusion.greedy import plan_greedy
from autoconfig.fusion.planning import FusionCost, is_legal, plan_cost, plan_dp
from autoconfig.graph import zoo
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.graph.onnx_import import import_model
from autoconfig.profile import load_profile

PROFILE = load_profile(Path(__file__).parent.parent / "hwprofiles" / "amd-epyc.yaml")
COST = FusionCost.of(PROFILE)


def test_legality_table_matches_design():
    assert LEGALITY[(Mapping.ONE_TO_ONE, Mapping.MANY_TO_MANY)] is Legality.FUSE
    assert LEGALITY[(Mapping.MANY_TO_MANY, Mapping.MANY_TO_MANY)] is Legality.NO
    assert LEGALITY[(Mapping.ONE_TO_MANY, Mapping.MANY_TO_MANY)] is Legality.NO
    assert LEGALITY[(Mapping.MANY_TO_MANY, Mapping.ONE_TO_MANY)] is Legality.COST
    assert LEGALITY[(Mapping.SHUFFLE, Mapping.REORGANIZE)] is Legality.FUSE
    assert len(LEGALITY) == 25


OPS = ["Relu", "Add", "Conv", "Sigmoid", "Reshape", "Transpose", "MaxPool", "Mul", "Conv1x1"]


def random_graph(seed: int, size: int) -> Graph:
    """A random DAG of small 1x4x8x8 tensors; every op keeps the shape."""
    rng = np.random.default_rng(seed)
    t = TensorType((1, 4, 8, 8), "float32")
    types = {"x": t}
    constants = {}
    nodes = []
    values = ["x"]
    for i in range(size):
        op = OPS[rng.integers(len(OPS))]
        first = values[rng.integers(len(values))]
        inputs = [first]
        attrs = {}
        if op in ("Add", "Mul"):
            inputs.append(values[rng.integers(len(values))])
        if op.startswith("Conv"):  # 3x3, or 1x1 (which takes a prologue)
            w, size = f"w{i}", 3 if op == "Conv" else 1
            constants[w] = np.zeros((4, 4, size, size), np.float32)
            types[w] = TensorType((4, 4, size, size), "float32")
            inputs.append(w)
            attrs = {"kernel_shape": [size, size], "pads": [size // 2] * 4}
            op = "Conv"
        if op == "MaxPool":
            attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
        if op == "Reshape":
            shape = f"s{i}"
            constants[shape] = np.array([1, 4, 8, 8], np.int64)
            types[shape] = TensorType((4,), "int64")
            inputs.append(shape)
        if op == "Transpose":
            attrs = {"perm": [0, 1, 3, 2]}
        out = f"v{i}"
        types[out] = t
        nodes.append(Node(f"n{i}", op, inputs, [out], attrs))
        values.append(out)
    used = {i for n in nodes for i in n.inputs}
    outputs = [v for v in values[1:] if v not in used] or [values[-1]]
    return Graph(nodes, types, constants, ["x"], outputs)


def partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for smaller in partitions(rest):
        for i in range(len(smaller)):
            yield smaller[:i] + [[first, *smaller[i]]] + smaller[i + 1 :]
        yield [[first], *smaller]


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force_on_small_dags(seed):
    graph = random_graph(seed, size=6 + seed % 2)
    best = min(
        plan_cost(graph, [sorted(g) for g in p], COST)[0]
        for p in partitions(list(range(len(graph.nodes))))
        if is_legal(graph, [sorted(g) for g in p]) is None
    )
    found = plan_dp(graph, COST)
    assert is_legal(graph, found.groups) is None
    assert found.cost_ns == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("seed", range(12, 24))
def test_greedy_plans_are_legal_and_no_cheaper_than_dp(seed):
    graph = random_graph(seed, size=9)
    dp, greedy = plan_dp(graph, COST), plan_greedy(graph, COST)
    assert is_legal(graph, greedy.groups) is None and is_legal(graph, dp.groups) is None
    assert dp.cost_ns <= greedy.cost_ns * (1 + 1e-9)
    assert sorted(v for g in dp.groups for v in g) == list(range(len(graph.nodes)))


def test_illegal_plans_are_named():
    graph = random_graph(3, size=6)
    everything = [list(range(len(graph.nodes)))]
    reason = is_legal(graph, everything)
    anchors = sum(mapping(n, graph) is Mapping.MANY_TO_MANY for n in graph.nodes)
    assert reason is not None or anchors <= 1


def test_no_fusion_is_one_kernel_per_op():
    graph = random_graph(5, size=7)
    none = plan(graph, PROFILE, "none")
    assert len(none.groups) == len(graph.nodes) and none.ratio(graph) == 1.0


def test_cost_model_needs_bandwidth_figures():
    import dataclasses

    from autoconfig.errors import AutoconfigError

    with pytest.raises(AutoconfigError, match="has no bandwidth figures"):
        FusionCost.of(dataclasses.replace(PROFILE, bandwidth=None))


def dense_block(layers: int) -> Graph:
    """DenseNet's block: each layer BatchNorm → ReLU → 1x1 → BatchNorm → ReLU → 3x3 over
    the concatenation of every earlier layer's output."""

    b = zoo.Builder("dense_block", 3)
    features, width = [b.conv("input", 3, 8, 3)], 8
    for _ in range(layers):
        x = b.op("Concat", features, axis=1) if len(features) > 1 else features[0]
        y = b.conv(b.act(b.bn(x, width), "relu"), width, 16, 1)
        features.append(b.conv(b.act(b.bn(y, 16), "relu"), 16, 4, 3))
        width += 4
    return import_model(b.model("input", [1, 3, 8, 8], [(b.op("Concat", features, axis=1), [1, width, 8, 8])]))


def test_dp_plans_a_concat_of_many_convolutions():
    """The last Concat reads 25 groups, each holding a convolution: the DP weighs only
    the merges that can be legal (at most one anchor), not every subset of them."""
    graph = dense_block(24)
    dp, greedy = plan_dp(graph, COST), plan_greedy(graph, COST)
    assert is_legal(graph, dp.groups) is None
    assert dp.cost_ns <= greedy.cost_ns * (1 + 1e-9)


def test_the_search_asks_the_convolution_model_each_question_once(monkeypatch):
    """Pricing each 1x1 layer's prologue asks the convolution model for the layer alone
    and with the prologue; the search prices the same layer in many states, and without
    a decision cache (`autoconfig fuse`) every question was asked again each time."""
    from autoconfig.fusion import planning

    asked, choose = [], planning.conv_model.choose

    def counted(shape, *question, **options):
        asked.append((shape, tuple(sorted(options.items()))))
        return choose(shape, *question, **options)

    monkeypatch.setattr(planning.conv_model, "choose", counted)
    plan_dp(dense_block(12), FusionCost.of(PROFILE))
    assert asked and len(asked) == len(set(asked))


def prologue_net(shared: bool = False, kernel: int = 1, batch: int = 1) -> Graph:
    from tests.random_models import prologue_model

    return import_model(prologue_model(shared, kernel, batch=batch))


def prologues(graph: Graph, groups: list[list[int]]) -> list[list[str]]:
    """The ops before the convolution of each group that has some."""
    found = []
    for members in groups:
        ops = [graph.nodes[v].op for v in members]
        if "Conv" in ops and ops.index("Conv") > 0:
            found.append(ops[:ops.index("Conv")])
    return found


def test_dp_runs_per_channel_ops_as_the_prologue_of_a_1x1_convolution():
    graph = prologue_net()
    dp = plan_dp(graph, COST)
    assert prologues(graph, dp.groups) == [["BatchNormalization", "Relu"], ["Mul"]]
    best = min(plan_cost(graph, [sorted(g) for g in p], COST)[0] for p in partitions(list(range(len(graph.nodes))))
               if is_legal(graph, [sorted(g) for g in p]) is None)  # fmt: skip
    assert dp.cost_ns == pytest.approx(best, rel=1e-9)
    assert is_legal(graph, [sorted(v for g in dp.groups for v in g)]) is not None


def test_a_prologue_pays_for_the_layout_it_forces():
    """MobileNet-V1's ReLUs after its depthwise layers stay their epilogues: the 1x1
    layers' plans computing a ReLU as they read read NCHW only, slower than their best
    plans, on channel blocks (priced within NCHW alone, the prologue looked free, and
    the DP took two, with a layout transform around each)."""
    graph = import_model(zoo.MODELS["mobilenet_v1"]())
    assert prologues(graph, plan_dp(graph, COST).groups) == []


@pytest.mark.parametrize("case", ["shared", "3x3", "batch 2"])
def test_no_prologue_where_the_kernel_cannot_compute_it(case):
    # a value also read elsewhere must be written; a 3x3 window reads padding the ops
    # never saw; a gate per image is not one value per channel of the shared weights
    graph = prologue_net(shared=case == "shared", kernel=3 if case == "3x3" else 1, batch=2 if case == "batch 2" else 1)
    found = prologues(graph, plan(graph, PROFILE, "dp").groups)
    expected = {"shared": [["Mul"]], "3x3": [["Mul"]], "batch 2": [["BatchNormalization", "Relu"]]}
    assert found == expected[case]


def squeeze_net(channels: int, activated: bool = True) -> Graph:
    """A depthwise layer (with SiLU, or without: then a Relu after the squeeze's input),
    its squeeze-excitation and the projection reading the scaled tensor: 8 or 9 ops."""

    b = zoo.Builder("squeeze", 3)
    d = b.conv("input", channels, channels, 3, group=channels)
    d = b.act(d, "silu") if activated else d
    pooled = b.op("GlobalAveragePool", [d])
    d = d if activated else b.op("Relu", [d])
    scale = b.op("Sigmoid", [b.conv(pooled, channels, channels, 1, bias=True)])
    y = b.conv(b.op("Mul", [d, scale]), channels, 8, 1)
    return import_model(b.model("input", [1, channels, 12, 12], [(y, [1, 8, 12, 12])]))


def test_dp_sums_a_squeeze_in_the_depthwise_kernel_that_stores_its_input():
    """The squeeze joins the depthwise layer's group, as its last member, reading the
    value the kernel writes: the DP finds it (and is still the brute-force optimum among
    legal plans); TVM's rules do not fuse a reduction after a convolution; a channel
    count that fills no 8-lane block keeps it apart; a squeeze of a value the kernel
    does not write is no legal group."""
    graph = squeeze_net(16)
    dp = plan_dp(graph, COST)
    ops = [[graph.nodes[v].op for v in g] for g in dp.groups]
    assert ["Conv", "Sigmoid", "Mul", "GlobalAveragePool"] in ops, ops
    assert ["GlobalAveragePool"] in [[graph.nodes[v].op for v in g] for g in plan_greedy(graph, COST).groups]
    best = min(plan_cost(graph, [sorted(g) for g in p], COST)[0] for p in partitions(list(range(len(graph.nodes))))
               if is_legal(graph, [sorted(g) for g in p]) is None)  # fmt: skip
    assert dp.cost_ns == pytest.approx(best, rel=1e-9)
    narrow = squeeze_net(12)
    assert ["GlobalAveragePool"] in [[narrow.nodes[v].op for v in g] for g in plan(narrow, PROFILE, "dp").groups]
    raw = squeeze_net(16, activated=False)  # the squeeze reads the convolution, a Relu the rest reads
    conv, pool, relu = (next(v for v, n in enumerate(raw.nodes) if n.op == op) for op in ("Conv", "GlobalAveragePool",
                                                                                         "Relu"))  # fmt: skip
    rest = [[v] for v in range(len(raw.nodes)) if v not in (conv, pool, relu)]
    assert is_legal(raw, [[conv, pool], [relu], *rest]) is None
    assert "mean tail" in is_legal(raw, [sorted([conv, relu, pool]), *rest])


def excitation_net(batch: int) -> Graph:
    """A depthwise layer, its squeeze, its gates (a 1x1 convolution of one pixel, then a
    Sigmoid), the scale by them and the projection reading the scaled tensor: 6 ops."""
    b = zoo.Builder("excitation", 5)
    d = b.conv("input", 16, 16, 3, group=16)
    gates = b.op("Sigmoid", [b.conv(b.op("GlobalAveragePool", [d]), 16, 16, 1, bias=True)])
    y = b.conv(b.op("Mul", [d, gates]), 16, 8, 1)
    return import_model(b.model("input", [batch, 16, 12, 12], [(y, [batch, 8, 12, 12])]))


def test_dp_ends_the_kernel_of_the_gates_with_the_scale_by_them():
    """Two images' gates (no prologue of the projection's shared weights): the scale
    joins the group of the convolution computing its gates, as its last member (one
    excitation kernel); the DP finds it and is still the brute-force optimum among legal
    plans; TVM's rules run it apart. A scale by gates whose convolution is not in its
    group is no legal group."""
    graph = excitation_net(2)
    ops = [[graph.nodes[v].op for v in g] for g in plan_dp(graph, COST).groups]
    assert ["Conv", "Sigmoid", "Mul"] in ops, ops
    assert ["Mul"] in [[graph.nodes[v].op for v in g] for g in plan_greedy(graph, COST).groups]
    best = min(plan_cost(graph, [sorted(g) for g in p], COST)[0] for p in partitions(list(range(len(graph.nodes))))
               if is_legal(graph, [sorted(g) for g in p]) is None)  # fmt: skip
    assert plan_dp(graph, COST).cost_ns == pytest.approx(best, rel=1e-9)
    sigmoid, mul = (next(v for v, n in enumerate(graph.nodes) if n.op == op) for op in ("Sigmoid", "Mul"))
    rest = [[v] for v in range(len(graph.nodes)) if v not in (sigmoid, mul)]
    assert is_legal(graph, [[sigmoid], [mul], *rest]) is None
    assert "gate tail" in is_legal(graph, [[sigmoid, mul], *rest])


def excited_projection() -> Graph:
    """A depthwise layer of 480 channels on 14x14, its squeeze-excitation, and the 1x1
    projection to 112 channels reading the scaled tensor (MobileNet-V3-Large's 12th
    block)."""
    b = zoo.Builder("excited", 3)
    d = b.act(b.conv("input", 480, 480, 3, group=480), "relu")
    scale = b.op("Sigmoid", [b.conv(b.op("GlobalAveragePool", [d]), 480, 480, 1, bias=True)])
    y = b.conv(b.op("Mul", [d, scale]), 480, 112, 1)
    return import_model(b.model("input", [1, 480, 14, 14], [(y, [1, 112, 14, 14])]))


@pytest.mark.parametrize("threads, weights, excited", [(1, 0, False), (2, 0, True), (1, 21_600_000, False),
                                                        (2, 21_600_000, True)])  # fmt: skip
def test_a_plan_is_priced_at_the_threads_the_model_runs_on(threads, weights, excited):
    """The excitation's scale is either the projection's prologue, which copies the
    projection's weights, scaled, before its product (each thread all of them), or the
    excitation's tail, each thread scaling the channels whose gates it computed: on one
    thread the copy is cheaper than writing and reading the scaled tensor, on two (the
    tensor's passes shared, each thread still copying all the weights) the tail. The plan
    asks the models at the threads the build runs on."""
    graph = excited_projection()
    cost = dataclasses.replace(FusionCost.of(PROFILE, graph=graph, threads=threads), model_bytes=weights)
    groups = [[graph.nodes[v].op for v in g] for g in plan_dp(graph, cost).groups]
    assert (["Conv", "Sigmoid", "Mul"] in groups) is excited, groups
    assert (["Mul", "Conv"] in groups) is not excited, groups


def two_heads() -> Graph:
    """Q and K projected, split into two heads by Reshape and Transpose (K straight to
    Kᵀ), Q·Kᵀ per head, the scores transposed to [tokens, heads, tokens]: 8 ops."""

    b = zoo.Builder("two_heads", 4)

    def heads(perm: list[int]) -> str:
        w = b.const("w", b.rng.standard_normal((8, 8)))
        return b.op("Transpose", [b.op("Reshape", [b.op("MatMul", ["input", w]),
                                                   b.const("s", np.array([1, 6, 2, 4], np.int64))])], perm=perm)

    scores = b.op("MatMul", [heads([0, 2, 1, 3]), heads([0, 2, 3, 1])])
    y = b.op("Transpose", [scores], perm=[0, 2, 1, 3])
    return import_model(b.model("input", [1, 6, 8], [(y, [1, 6, 2, 6])]))


def test_dp_reads_and_writes_the_heads_through_the_products_addressing():
    """The heads' transposes join Q·Kᵀ's group (read as strided rows, Kᵀ in place; the
    scores written into their columns): the DP finds it and is the brute-force optimum
    among legal plans; TVM's rules keep every transpose apart; data movement in a group
    whose product does not address it is no legal group."""
    graph = two_heads()
    dp = plan_dp(graph, COST)
    ops = [[graph.nodes[v].op for v in g] for g in dp.groups]
    assert any(o.count("MatMul") == 1 and o.count("Transpose") == 3 for o in ops), ops
    greedy = plan_greedy(graph, COST)
    assert all(len(g) == 1 for g in greedy.groups if any(graph.nodes[v].op == "Transpose" for v in g))
    best = min(plan_cost(graph, [sorted(g) for g in p], COST)[0] for p in partitions(list(range(len(graph.nodes))))
               if is_legal(graph, [sorted(g) for g in p]) is None)  # fmt: skip
    assert dp.cost_ns == pytest.approx(best, rel=1e-9)
    split = next(v for v, n in enumerate(graph.nodes) if n.op == "Reshape")
    moved = next(v for v, n in enumerate(graph.nodes) if n.inputs[0] == graph.nodes[split].outputs[0])
    rest = [[v] for v in range(len(graph.nodes)) if v not in (split, moved)]
    assert "does not address" in is_legal(graph, [[split, moved], *rest])


def test_products_of_one_dimensional_operands_keep_their_axes():
    """A 1-D A is one row per product, a 1-D B one column: each product's C is its row
    (or column) of the output, the batch of A over one B is one product of all rows."""
    from autoconfig.graph.products import products

    node = Node("mm", "MatMul", ["a", "b"], ["c"])
    row = products(node, (4,), (3, 4, 5))
    assert (row.m, row.n, row.k) == (1, 5, 4) and row.offsets == ((0, 0, 0), (0, 20, 5), (0, 40, 10))
    column = products(node, (2, 3, 4), (4,))
    assert (column.m, column.n, column.k) == (6, 1, 4) and column.offsets == ((0, 0, 0),)
    batched = products(node, (2, 1, 3, 4), (5, 4, 6))
    assert len(batched.offsets) == 10 and batched.offsets[6] == (12, 24, 108)


def test_an_attention_cores_scale_is_no_prologue_of_its_softmax():
    """Q·Kᵀ, a scale, Softmax, ·V is one attention core: its scale may join the softmax
    only inside the whole core (the softmax kernel computes nothing before it)."""

    b = zoo.Builder("core", 5)
    q, k, v = (b.op("MatMul", ["input", b.const("w", b.rng.standard_normal((8, 8)))]) for _ in range(3))
    scores = b.op("Mul", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]), b.const("s", np.array(0.3))])
    y = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])
    graph = import_model(b.model("input", [1, 2, 6, 8], [(y, [1, 2, 6, 8])]))
    scale, softmax = (next(i for i, n in enumerate(graph.nodes) if n.op == op) for op in ("Mul", "Softmax"))
    rest = [[i] for i in range(len(graph.nodes)) if i not in (scale, softmax)]
    assert "not its prologue" in is_legal(graph, [[scale, softmax], *rest])
    assert is_legal(graph, [[scale], [softmax], *rest]) is None
