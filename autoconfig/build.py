"""From a graph to the kernels of a model: every group of the fusion plan becomes one
generated kernel (or none, for a view or a concatenation its producers write into),
its configuration chosen by the operator's model, its calls described as a program
over one arena.

- An anchor group (Conv, Gemm/MatMul with a constant right operand, a pooling, a
  spatial ReduceMean, Softmax) is its anchor's kernel; the elementwise ops after it are its epilogue
  (`match_epilogue`: unary ops, SiLU and Mish written out, bias/scale by constants
  or per-channel tensors, residual Add and elementwise Mul by tensors of the
  output's shape).
- A group of elementwise ops alone is one `kernels.elementwise` kernel: the same
  epilogue on a tensor streamed from memory.
- Reshape, Flatten, Squeeze, Unsqueeze are views: the same buffer.
- Concat along an axis with nothing in front of it (batch 1, channels): its inputs'
  producers write straight into their slices; an input that cannot be placed so
  (a graph input, a tensor placed already) is copied in by an elementwise kernel.
- Transpose, Slice, Split, Pad, nearest Resize, Upsample (`autoconfig.movement`): a
  view at an offset where an output is one stretch of the input, else a gather.
- Anything else stops the build with one line naming the node and operator: nothing
  falls back to numpy.

Layouts: a tensor between convolutions may be held channel-blocked, NCHW[c], or NHWC
(`kernels.nchwc`; NHWC also where its channels fill no block of the widest vectors,
when a measured width divides them), where all its readers take that layout
(convolutions, elementwise kernels, global average pools; a channel Concat of such
tensors, whose inputs' blocks are its output's, NCHW[c] only) and it has more than one
pixel. Each convolution's
plan, and so the layout it writes, is chosen by `autoconfig.models.conv.choose_layout`
counting the transform of its input from the layout it is held in and what its
readers then pay (`_Builder.reading_ns`); an elementwise kernel keeps its input's
layout unless its readers pay more than the transform back. A reader that needs the
other layout gets a layout-transform kernel, run just before it, once per tensor.
Graph inputs and outputs are NCHW.

Memory: every tensor between kernels, and every kernel's scratch, is a buffer with
a lifetime (the first and last kernel touching it); buffers are placed in one
arena, largest first, each at the lowest offset free for its whole lifetime.
Graph outputs live to the end and are copied out; graph inputs are read in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from graphlib import TopologicalSorter

import numpy as np

from autoconfig import movement
from autoconfig.conv import conv_shape, pool_config, pool_shape
from autoconfig.decisions import DecisionCache, ask
from autoconfig.errors import AutoconfigError
from autoconfig.fusion import plan as fusion_plan
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.ops import Kernel, info
from autoconfig.lowering import conv_calls, matmul_call, pool_calls, reblock_call
from autoconfig.machine import Machine
from autoconfig.models import conv as conv_model
from autoconfig.models import matmul as matmul_model
from autoconfig.profile import HardwareProfile
from autoconfig.runtime import Call, Part, Ref, split
from kernels import conv as kc
from kernels import elementwise as ew
from kernels import epilogue as ep
from kernels import matmul as mm
from kernels import movement as mv
from kernels import nchwc
from kernels import pool as pl
from kernels import softmax as sm
from kernels.cache import KernelCache, generated
from kernels.emit import KernelModule
from kernels.nchwc import Reblock
from kernels.runner import ARENA, FIRST_INPUT, WEIGHTS
from kernels.target import Target

ALIGN = 16
"""Floats per cache line: every buffer and constant starts on one (vector loads that
split lines halve L1 bandwidth)."""

ELEMENTWISE_VECTORS = 2
"""Vectors per step of an elementwise kernel: two independent chains hide a load's
latency behind the previous vector's ops on every profiled machine."""

ELEMENTWISE_GROUP = "elementwise"
"""What `_Builder.anchor_of` says of the nodes of a group of elementwise ops alone."""

_VIRTUAL = 1 << 20
"""Spaces from here on name buffers not placed yet (space - _VIRTUAL = buffer id)."""


@dataclass
class Buffer:
    """A tensor or scratch buffer: `size` floats used from kernel `first` to `last`;
    an input buffer is the caller's; one placed inside another (a concatenation's
    slice) lives at `inside` = (buffer, offset)."""

    size: int
    first: int
    last: int
    input_index: int | None = None
    inside: tuple[int, int] | None = None
    offset: int = 0  # in the arena, once placed


@dataclass
class KernelGroup:
    """One kernel of the model: the ops it computes, its calls, its modules and why."""

    name: str
    ops: list[str]  # "name (Op)"
    kind: str
    calls: list[Call]
    modules: list[KernelModule]
    predicted_ns: float
    explain: str
    summary: str  # the algorithm and parameters in a few words


@dataclass
class BuiltModel:
    """Everything a model's artifact is made of, before it is written."""

    graph: Graph
    profile: HardwareProfile
    target: Target
    fusion: str
    threads: int
    kernels: list[KernelGroup]
    weights: tuple[np.ndarray, ...]  # float32 pieces in file order (kept apart: VGG-16's are 553 MB)
    arena_floats: int
    intermediate_floats: int
    outputs: list[tuple[str, int]]  # graph output -> its offset in the arena (floats)

    @property
    def weights_bytes(self) -> int:
        return 4 * sum(int(w.size) for w in self.weights)


def _fail(node: Node, why: str) -> AutoconfigError:
    """A node the code generator cannot emit (yet): the build stops, naming it."""
    return AutoconfigError(f"node {node.name!r} ({node.op}): {why}")


class _Builder:
    def __init__(self, graph: Graph, profile: HardwareProfile, target: Target, threads: int,
                 cache: KernelCache | None):  # fmt: skip
        self.graph, self.profile, self.target, self.threads = graph, profile, target, threads
        self.cache = cache
        self.decisions = DecisionCache(cache.root / "decisions") if cache else None
        self.machine = Machine.of(profile)
        self.model_weights = sum(value.nbytes for value in graph.constants.values())  # do they outgrow the L3?
        self.buffers: list[Buffer] = []
        self.where: dict[str, tuple[int, int]] = {}  # value -> (buffer, offset)
        self.weights: list[np.ndarray] = []
        self.weight_floats = 0
        self.step = 0  # the kernel being lowered
        self.consumers = graph.consumers()
        self.producer = {out: n for n in graph.nodes for out in n.outputs}
        self.choices: dict[tuple, object] = {}
        self.layouts: dict[str, kc.Layout] = {}  # values held channel-blocked (the others: NCHW)
        self.anchor_of: dict[str, str] = {}  # node -> its group's anchor op, ELEMENTWISE_GROUP or "" (build_model)
        self.after_anchor: dict[str, list[Node]] = {}  # an anchor -> the ops of its group after it (build_model)
        self.pending: list[KernelGroup] = []  # layout transforms the kernel being lowered reads
        self.transforming = False  # lowering a transform: its buffers are not the kernel's (finish_step)
        self.touched: set[int] = set()  # buffers the kernel being lowered uses
        self.transform_buffers: set[int] = set()  # buffers its transforms use
        for i, name in enumerate(graph.inputs):
            self.where[name] = (self._buffer(graph.types[name].elements, input_index=i), 0)

    def choose(self, model: Callable, shape: object, epilogue: ep.Epilogue, **options: object):
        """`model.choose` for this build's profile, target and threads, once per distinct
        (shape, epilogue, options): a model's layers repeat (EfficientNet-B0's 82
        convolutions and matmuls are 47 distinct ones), and its choice depends on nothing
        else; with a decision cache, once across builds."""
        key = (model, shape, epilogue, *sorted(options.items()))
        if key not in self.choices:
            self.choices[key] = ask(self.decisions, model, shape, self.profile, self.target, self.threads, epilogue,
                                    **options)  # fmt: skip
        return self.choices[key]

    def modules(self, generate: Callable, config: object) -> list[KernelModule]:
        """`generate(config, target)` as a list, from the kernel cache when it has it."""
        if self.cache:
            return self.cache.modules(generate, config, self.target)
        return generated(generate, config, self.target)

    # ---------------------------------------------------------------- buffers

    def _buffer(self, size: int, input_index: int | None = None) -> int:
        self.buffers.append(Buffer(size, self.step, self.step, input_index))
        self._touch(len(self.buffers) - 1)
        return len(self.buffers) - 1

    def _touch(self, root: int) -> None:
        """Note a buffer the kernel being lowered (not a transform before it) uses."""
        (self.transform_buffers if self.transforming else self.touched).add(root)

    def finish_step(self) -> list[KernelGroup]:
        """After a kernel is lowered, the layout transforms it reads: they run at this
        step and the kernel at the next, so a tensor only a transform reads is free
        while the kernel runs (its buffer may hold the kernel's output or scratch)."""
        transforms, self.pending = self.pending, []
        if transforms:
            made = {i for i in self.transform_buffers if self.buffers[i].first == self.step}  # the transforms' outputs
            for i in self.touched:
                b = self.buffers[i]
                if b.first == self.step and i not in made:
                    b.first += 1
                b.last = max(b.last, self.step + 1)
            self.step += 1
        self.touched, self.transform_buffers = set(), set()
        return transforms

    def constant(self, array: np.ndarray) -> Ref:
        """`Buffers.constant`: appended to the weights, cache-line aligned."""
        flat = np.ascontiguousarray(array, np.float32).ravel()
        offset = self.weight_floats
        self.weights.append(flat)
        padding = -flat.size % ALIGN
        if padding:
            self.weights.append(np.zeros(padding, np.float32))
        self.weight_floats += flat.size + padding
        return Ref(WEIGHTS, offset)

    def scratch(self, count: int) -> Ref:
        """`Buffers.scratch`: a buffer for the current kernel only."""
        return Ref(_VIRTUAL + self._buffer(max(count, 1)))

    def read(self, value: str, layout: kc.Layout = "nchw") -> Ref:
        """Where the current kernel reads `value` in `layout` (a constant is added to the
        weights; a value held in the other layout is transformed first, once)."""
        if self.graph.is_constant(value):
            return self.constant(self.graph.constants[value])
        if self.layout(value) != layout:
            value = self._transformed(value, layout)
        buffer, offset = self.where[value]
        root = self._absolute(buffer, 0)[0]
        self.buffers[root].last = max(self.buffers[root].last, self.step)
        self._touch(root)
        return Ref(_VIRTUAL + buffer, offset)

    def write(self, value: str, layout: kc.Layout = "nchw") -> Ref:
        """A new buffer for `value`, written by the current kernel in `layout`."""
        self.where[value] = (self._buffer(self.graph.types[value].elements), 0)
        if layout != "nchw":
            self.layouts[value] = layout
        return Ref(_VIRTUAL + self.where[value][0])

    def layout(self, value: str) -> kc.Layout:
        return self.layouts.get(value, "nchw")

    def _transformed(self, value: str, layout: kc.Layout) -> str:
        """The name of `value` held in `layout`: a layout-transform kernel writes it, run
        before the kernel being lowered (and reused by later readers); from one blocked
        layout to the other, through NCHW."""
        name = f"{value} in {layout}"
        if name not in self.where:
            shape = self.graph.types[value].shape
            held = self.layout(value)
            if held != "nchw" and layout != "nchw":
                value, held = self._transformed(value, "nchw"), "nchw"
            config = Reblock.of(shape, self.target.f32_lanes, to_blocked=layout != "nchw",
                                layout=held if layout == "nchw" else layout)  # fmt: skip
            self.transforming = True
            x = self.read(value, held)
            self.where[name] = (self._buffer(self.graph.types[value].elements), 0)
            self.transforming = False
            self.layouts[name] = layout
            threads = min(self.threads, config.units())
            predicted, why = conv_model.reblock_ns(config, self.machine, threads)
            call = reblock_call(config, Ref(_VIRTUAL + self.where[name][0]), x, threads)
            self.pending.append(KernelGroup(f"{value}_to_{layout}", [f"{value} ({self.layout(value)} to {layout})"],
                                            "layout", [call], self.modules(nchwc.generate, config), predicted, why,
                                            f"{'x'.join(map(str, shape))} to {layout}, {threads} thread(s)"))  # fmt: skip
        return name

    def blocked_layouts(self, value: str) -> tuple[kc.Layout, ...]:
        """The blocked layouts `value` may be written in (`_blockable`), where it is read
        only by convolutions' kernels (their input, or their epilogue's residual),
        elementwise kernels, global average pools — any of them — and channel
        concatenations of such tensors (`concat_takes_blocks`: NCHW[c] only, where the
        inputs' blocks follow one another) — any other reader would need it
        transformed back."""
        layouts = self._blockable(value)
        readers = self.consumers.get(value, [])
        if not readers:
            return ()
        for n in readers:
            if self.concat_takes_blocks(n):
                layouts = tuple(layout for layout in layouts if layout == "nchwc")
            elif not (self.anchor_of.get(n.name) == "Conv" and (n.op != "Conv" or n.inputs[0] == value)
                      or self.anchor_of.get(n.name) == ELEMENTWISE_GROUP or n.op in BLOCKED_POOLS):  # fmt: skip
                return ()
        return layouts

    def _blockable(self, value: str) -> tuple[kc.Layout, ...]:
        """The blocked layout of a computed 4-D tensor of more than one pixel (with one,
        every layout is the same memory), not a graph output: NCHW[c] where its channels
        fill blocks of the widest vectors, else NHWC where a measured width divides them
        (its transforms run at that width; see `models.conv.choose` for why not both)."""
        shape = self.graph.types[value].shape
        if (self.target.scalable or self.graph.is_constant(value) or value in self.graph.inputs
                or value in self.graph.outputs or len(shape) != 4 or shape[2] * shape[3] <= 1):  # fmt: skip
            return ()
        lanes = self.target.f32_lanes
        if shape[1] % lanes == 0:
            return ("nchwc",)
        return ("nhwc",) if math.gcd(lanes, shape[1]) in self.machine.fma_by_lanes else ()

    def concat_takes_blocks(self, node: Node) -> bool:
        """A Concat along the channels of one image whose inputs are all blockable and
        written by convolutions' or elementwise kernels (which may write blocks): the
        blocks of its inputs, one after the other, are its output's blocks."""
        if node.op != "Concat" or self.graph.types[node.outputs[0]].shape[0] != 1:
            return False
        if node.attrs.get("axis", 0) % len(self.graph.types[node.outputs[0]].shape) != 1:
            return False
        return all("nchwc" in self._blockable(v)
                   and self.anchor_of.get(self.producer[v].name) in ("Conv", ELEMENTWISE_GROUP)
                   for v in node.inputs)  # fmt: skip

    def reading_ns(self, value: str, layout: kc.Layout) -> float:
        """What `value`'s readers pay if it is written in `layout` (beyond a common
        part): each convolution reading it as its input runs its best plan reading that
        layout, or the best reading another after a transform, whichever is faster,
        among the plans writing a layout its own readers take
        (the model's choice for it and its epilogue, the one its own kernel will use; a
        layer with no plan reading blocks pays the transform back); other readers take
        any layout at one cost (elementwise, global pools) or never see a blocked one."""
        total = 0.0
        for reader in self.consumers.get(value, []):
            if reader.op != "Conv" or reader.inputs[0] != value or self.anchor_of.get(reader.name) != "Conv":
                continue
            shape = _conv_layer(self, reader)[0]
            if not conv_model.reads_blocked(shape, self.machine, self.target):  # NCHW, after a transform if blocked
                total += self.transform_back_ns(shape.input_shape, layout)
                continue
            choice, chain = _conv_choice(self, reader, self.after_anchor[reader.name])  # its own, asked once
            writes = ("nchw", *self.blocked_layouts(chain.end))
            costs = []
            for source in ("nchw", "nchwc", "nhwc"):
                best = choice.best_in((source,), writes)
                if best is not None:
                    shift = conv_model.transform_ns(shape, best, self.machine, layout, source, self.target.f32_lanes)
                    costs.append(best.total_ns + shift)
            total += min(costs)
        return total

    def transform_back_ns(self, shape: tuple[int, ...], layout: kc.Layout) -> float:
        """The predicted time of a tensor of NCHW `shape` held in `layout` transformed
        back (none if NCHW)."""
        if layout == "nchw":
            return 0.0
        config = Reblock.of(shape, self.target.f32_lanes, False, layout)
        return conv_model.reblock_ns(config, self.machine, self.threads)[0]

    def output_layouts(self, value: str) -> dict[kc.Layout, float]:
        """The layouts `value` may be written in, each with what its readers then pay
        (`blocked_layouts`, `reading_ns`)."""
        return {layout: self.reading_ns(value, layout) for layout in ("nchw", *self.blocked_layouts(value))}

    def alias(self, value: str, source: str, offset: int = 0) -> None:
        """`value` is `source` seen in another shape, from element `offset` on (a view of
        a channel-blocked value is a view of its NCHW transform)."""
        if self.layout(source) != "nchw":
            source = self._transformed(source, "nchw")
        buffer, at = self.where[source]
        self.where[value] = (buffer, at + offset)
        self.read(source)

    def _absolute(self, buffer: int, offset: int) -> tuple[int, int]:
        while self.buffers[buffer].inside is not None:
            outer, at = self.buffers[buffer].inside
            buffer, offset = outer, offset + at
        return buffer, offset

    # ---------------------------------------------------------------- placement

    def place(self, outputs: list[str]) -> int:
        """Give every arena buffer its offset; returns the arena's size in floats."""
        for name in outputs:
            root = self._absolute(self.where[name][0], 0)[0]
            self.buffers[root].last = self.step  # copied out after the last kernel
        roots = [i for i, b in enumerate(self.buffers) if b.inside is None and b.input_index is None]
        placed: list[Buffer] = []
        for i in sorted(roots, key=lambda i: -self.buffers[i].size):
            b = self.buffers[i]
            busy = sorted((p.offset, p.offset + _aligned(p.size)) for p in placed
                          if p.first <= b.last and b.first <= p.last)  # fmt: skip
            offset = 0
            for start, end in busy:
                if offset + _aligned(b.size) <= start:
                    break
                offset = max(offset, end)
            b.offset = offset
            placed.append(b)
        return max((p.offset + _aligned(p.size) for p in placed), default=0)

    def resolve(self, ref: Ref) -> Ref:
        """A ref to a virtual buffer as a ref into the arena or an input."""
        if ref.space < _VIRTUAL:
            return ref
        buffer, offset = self._absolute(ref.space - _VIRTUAL, ref.offset)
        b = self.buffers[buffer]
        if b.input_index is not None:
            return Ref(FIRST_INPUT + b.input_index, offset)
        return Ref(ARENA, b.offset + offset)


def _aligned(size: int) -> int:
    return size + -size % ALIGN


# -------------------------------------------------------------------- epilogues


@dataclass
class Epilogue:
    """A matched chain: its ops, each op's operand (in op order: a constant's values, or
    the name of a value; `refs` places them), the value it ends on. Matching changes
    nothing in the build, so a chain can be matched ahead of its kernel."""

    ops: list[ep.EpilogueOp]
    operands: list[np.ndarray | str]
    end: str

    def refs(self, b: _Builder, layout: kc.Layout = "nchw") -> list[Ref]:
        """The operands' refs: constants added to the weights, tensors of the output's
        shape read in the output's `layout`, per-channel tensors (one value per channel:
        either layout) in NCHW."""
        reading = [op for op in self.ops if op.operand]
        return [b.read(o, layout if op.operand == "output" else "nchw") if isinstance(o, str) else b.constant(o)
                for op, o in zip(reading, self.operands, strict=True)]  # fmt: skip


UNARY: dict[str, Callable[[Node, Graph], ep.EpilogueOp]] = {
    "Relu": lambda n, g: ep.relu(),
    "Sigmoid": lambda n, g: ep.sigmoid(),
    "Tanh": lambda n, g: ep.tanh(),
    "Softplus": lambda n, g: ep.softplus(),
    "LeakyRelu": lambda n, g: ep.leaky_relu(n.attrs.get("alpha", 0.01)),
    "HardSigmoid": lambda n, g: ep.hard_sigmoid(n.attrs.get("alpha", 0.2), n.attrs.get("beta", 0.5)),
    "HardSwish": lambda n, g: ep.hard_swish(),
    "Clip": lambda n, g: ep.clip(*_clip_bounds(n, g)),
}
"""Elementwise ops of one input, as epilogue ops."""


def _clip_bounds(node: Node, graph: Graph) -> tuple[float, float]:
    """Clip's bounds: inputs 2 and 3 (opset 11+), constant, else ±inf."""
    bounds = []
    for i, default in ((1, -math.inf), (2, math.inf)):
        name = node.inputs[i] if len(node.inputs) > i else ""
        if name and not graph.is_constant(name):
            raise _fail(node, "Clip bounds computed at run time are not generated")
        bounds.append(float(graph.constants[name]) if name else default)
    return bounds[0], bounds[1]


def match_epilogue(b: _Builder, start: str, nodes: list[Node], channel_axis: int) -> Epilogue:
    """`nodes` (a group's elementwise ops, in order) as an epilogue on `start`: each op
    takes the chain's current value and at most one operand."""
    out_shape = b.graph.types[start].shape
    remaining = list(nodes)
    ops: list[ep.EpilogueOp] = []
    operands: list[np.ndarray | str] = []
    current = start
    while remaining:
        users = [n for n in remaining if current in n.inputs]
        if not users:
            raise _fail(remaining[0], f"not on the chain of elementwise ops after {current!r}")
        gates = {u.op for u in users}
        if len(users) == 2 and gates in ({"Sigmoid", "Mul"}, {"Softplus", "Mul"}):
            used, kind = _gated(b.graph, current, users, remaining)
            ops.append(ep.EpilogueOp(kind))
        elif len(users) == 1 and users[0].op in UNARY:
            used = [users[0]]
            ops.append(UNARY[users[0].op](users[0], b.graph))
        elif len(users) == 1 and users[0].op in ("Add", "Sub", "Mul", "Div"):
            used = [users[0]]
            op, operand = _binary(b, users[0], current, out_shape, channel_axis)
            ops.append(op)
            operands.append(operand)
        else:
            raise _fail(users[0], f"{' and '.join(sorted(gates))} on one value is not an epilogue the "
                                  "code generator emits")  # fmt: skip
        for n in used:
            remaining.remove(n)
        current = used[-1].outputs[0]
        if b.graph.types[current].shape != out_shape:
            raise _fail(used[-1], f"changes the shape {out_shape} of the chain")
    return Epilogue(ops, operands, current)


def _gated(graph: Graph, current: str, users: list[Node], remaining: list[Node]) -> tuple[list[Node], str]:
    """x·Sigmoid(x) (SiLU) or x·Tanh(Softplus(x)) (Mish) as written by exporters."""
    mul = next(u for u in users if u.op == "Mul")
    gate = next(u for u in users if u.op != "Mul")
    chain = [gate]
    if gate.op == "Softplus":
        tanh = [n for n in remaining if gate.outputs[0] in n.inputs]
        if len(tanh) != 1 or tanh[0].op != "Tanh":
            raise _fail(gate, "Softplus not followed by Tanh and Mul (Mish) is not a generated epilogue")
        chain.append(tanh[0])
    if sorted(mul.inputs) != sorted([current, chain[-1].outputs[0]]):
        raise _fail(mul, "not x times its own gate")
    return [*chain, mul], "silu" if gate.op == "Sigmoid" else "mish"


def _binary(b: _Builder, node: Node, current: str, out_shape: tuple[int, ...],
            channel_axis: int) -> tuple[ep.EpilogueOp, np.ndarray | str]:  # fmt: skip
    """Add/Sub/Mul/Div of the chain's value and one other operand, as an epilogue op
    (the operand: a constant's values per channel, or the tensor's name)."""
    others = [i for i in node.inputs if i != current]
    if len(others) != 1 or node.inputs.index(current) != 0 and node.op in ("Sub", "Div"):
        raise _fail(node, "only chain - operand and chain / operand are generated")
    other = others[0]
    shape = b.graph.types[other].shape
    channels = out_shape[channel_axis] if out_shape else 1
    if b.graph.is_constant(other):
        values = _per_channel(np.asarray(b.graph.constants[other], np.float32), out_shape, channel_axis)
        if values is None:
            raise _fail(node, f"a constant of shape {shape} broadcast to {out_shape} is not per channel")
        if node.op == "Sub":
            values = -values
        elif node.op == "Div":
            values = 1 / values
        kind = "bias" if node.op in ("Add", "Sub") else "scale"
        return ep.EpilogueOp(kind), np.broadcast_to(values, (channels,))
    if node.op in ("Sub", "Div"):
        raise _fail(node, f"{node.op} by a tensor computed at run time is not generated")
    if tuple(shape) == tuple(out_shape):
        return ep.EpilogueOp("residual" if node.op == "Add" else "product"), other
    if _along_channels(shape, out_shape, channel_axis):
        return ep.EpilogueOp("bias" if node.op == "Add" else "scale"), other
    raise _fail(node, f"an operand of shape {shape} broadcast to {out_shape} is neither per channel nor "
                      "of the output's shape")  # fmt: skip


def _along_channels(shape: tuple[int, ...], out_shape: tuple[int, ...], axis: int) -> bool:
    """Whether an operand of `shape` broadcast to `out_shape` holds one value per
    channel (along `axis` of the output) and varies along no other axis."""
    padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
    if len(padded) != len(out_shape):
        return False
    axis %= len(out_shape)
    return padded[axis] == out_shape[axis] and all(d == 1 for i, d in enumerate(padded) if i != axis)


def _per_channel(array: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A constant's values per channel (a scalar: one value), or None when it varies
    along another axis."""
    if array.size == 1 or _along_channels(array.shape, out_shape, axis):
        return array.reshape(-1)
    return None


# -------------------------------------------------------------------- groups


def _group_order(graph: Graph, groups: list[list[int]]) -> list[list[int]]:
    """The groups in an order where each runs after the groups it reads from (ties in
    the order of their first node, so a build is reproducible)."""
    group_of = {v: g for g, members in enumerate(groups) for v in members}
    producer = {out: i for i, n in enumerate(graph.nodes) for out in n.outputs}
    order = TopologicalSorter()
    for g in sorted(range(len(groups)), key=lambda g: min(groups[g])):
        order.add(g, *sorted({group_of[producer[i]] for v in groups[g] for i in graph.nodes[v].inputs
                              if i in producer} - {g}))  # fmt: skip
    return [sorted(groups[g]) for g in order.static_order()]


def _lower_group(b: _Builder, members: list[Node]) -> KernelGroup | None:
    """The kernel of one group (None: views and concatenations, which need none)."""
    kinds = [info(n).kernel for n in members]
    views = [n for n, k in zip(members, kinds) if k is Kernel.VIEW]
    anchors = [n for n, k in zip(members, kinds) if k in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)]
    moving = [n for n, k in zip(members, kinds) if k is Kernel.MOVEMENT]
    if moving:
        if len(members) > 1:
            raise _fail(moving[0], f"{moving[0].op} shares its group with other ops; data movement is its own kernel")
        return _concat(b, moving[0]) if moving[0].op == "Concat" else _movement(b, moving[0])
    head = [n for n in views if anchors and members.index(n) < members.index(anchors[0])]
    for v in head:  # the anchor reads its input in another shape
        b.alias(v.outputs[0], v.inputs[0])
    compute = [n for n in members if n not in views]
    if not compute:
        for v in views:
            b.alias(v.outputs[0], v.inputs[0])
        return None
    group = _anchor(b, anchors[0], [n for n in compute if n is not anchors[0]]) if anchors else _elementwise(b, compute)
    for v in views:
        if v not in head:  # the kernel's output in another shape
            b.alias(v.outputs[0], v.inputs[0])
    _check_escapes(b, members, group)
    return group


def _check_escapes(b: _Builder, members: list[Node], group: KernelGroup) -> None:
    """A value computed inside a kernel and read outside it would need a second output."""
    inside = {n.name for n in members}
    written = set(b.where)
    for n in members:
        for out in n.outputs:
            readers = [c for c in b.consumers.get(out, []) if c.name not in inside]
            if (readers or out in b.graph.outputs) and out not in written:
                raise _fail(n, f"its output {out!r} is read outside kernel {group.name}, which does not write it")


def _anchor(b: _Builder, anchor: Node, after: list[Node]) -> KernelGroup:
    if after and info(anchor).kernel is not Kernel.EPILOGUE_ANCHOR:
        raise _fail(after[0], f"{anchor.op} kernels have no epilogue")
    lower = {"Conv": _conv, "Gemm": _gemm, "MatMul": _gemm, "MaxPool": _pool, "AveragePool": _pool,
             "GlobalAveragePool": _pool, "ReduceMean": _pool, "Softmax": _softmax}.get(anchor.op)  # fmt: skip
    if lower is None:
        raise _fail(anchor, f"no generated kernel for {anchor.op} yet")
    return lower(b, anchor, after)


def _ops(nodes: list[Node]) -> list[str]:
    return [f"{n.name} ({n.op})" for n in nodes]


def _conv_pads(node: Node, graph: Graph, kernel: tuple[int, int], strides, dilations) -> tuple[int, ...]:
    """ONNX's pads, or those auto_pad implies (SAME_UPPER puts the odd one at the end)."""
    auto = node.attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return tuple(node.attrs.get("pads", (0, 0, 0, 0)))
    if auto == "VALID":
        return (0, 0, 0, 0)
    size = graph.types[node.inputs[0]].shape[2:]
    totals = []
    for axis in range(2):
        out = -(-size[axis] // strides[axis])
        reach = (kernel[axis] - 1) * dilations[axis] + 1
        totals.append(max(0, (out - 1) * strides[axis] + reach - size[axis]))
    first = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in totals]
    return (first[0], first[1], totals[0] - first[0], totals[1] - first[1])


def _conv_layer(b: _Builder, node: Node) -> tuple[kc.ConvShape, np.ndarray, str | None]:
    """A Conv node's shape, weights and bias (a constant's name, or None), checked."""
    g = b.graph
    if len(g.types[node.inputs[0]].shape) != 4 or not g.is_constant(node.inputs[1]):
        raise _fail(node, "only 2-D convolutions with constant weights are generated")
    weight = np.asarray(g.constants[node.inputs[1]], np.float32)
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if bias and not g.is_constant(bias):
        raise _fail(node, "a bias computed at run time is not generated")
    strides = tuple(node.attrs.get("strides", (1, 1)))
    dilations = tuple(node.attrs.get("dilations", (1, 1)))
    pads = _conv_pads(node, g, weight.shape[2:], strides, dilations)
    shape = conv_shape(g.types[node.inputs[0]].shape, weight.shape, strides=strides, pads=pads,
                       dilations=dilations, group=node.attrs.get("group", 1))  # fmt: skip
    return shape, weight, bias


def _conv_choice(b: _Builder, node: Node, after: list[Node]) -> tuple[conv_model.ConvChoice, Epilogue]:
    """The model's choice for a Conv node and the epilogue ops `after` it (its bias
    first), and the matched chain."""
    shape, _, bias = _conv_layer(b, node)
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=1)
    epilogue = tuple([ep.bias()] if bias else []) + tuple(chain.ops)
    return b.choose(conv_model.choose, shape, epilogue, model_weights=b.model_weights), chain


def _conv(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    g = b.graph
    shape, weight, bias = _conv_layer(b, node)
    choice, chain = _conv_choice(b, node, after)
    given = b.layout(node.inputs[0])
    best, why = conv_model.choose_layout(choice, given, b.output_layouts(chain.end), b.machine)
    plan = best.plan
    conv_model.validate_plan(plan, b.target)
    layout = kc.layout_of(plan.config)
    x = b.read(node.inputs[0], kc.input_layout_of(plan.config))
    operands = ([b.constant(g.constants[bias])] if bias else []) + chain.refs(b, layout)
    y = b.write(chain.end, layout)
    calls = conv_calls(plan, x, y, weight, operands, b)
    layouts = conv_model.layouts_of(plan.config)
    return KernelGroup(node.name, _ops([node, *after]), "conv", calls, b.modules(kc.generate, plan.config),
                       best.total_ns, f"{replace(choice, best=best).explain()}\n{why}",
                       f"{plan.config.algorithm} {plan.config.tile}{' ' + layouts if layouts != 'nchw' else ''}, "
                       f"{plan.threads} thread(s)")  # fmt: skip


def _gemm(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    g = b.graph
    a_shape = g.types[node.inputs[0]].shape
    if len(a_shape) != 2 or not g.is_constant(node.inputs[1]) or node.attrs.get("transA", 0):
        raise _fail(node, "only A[M,K]·B[K,N] with a constant B (transB allowed) is generated")
    weight = np.asarray(g.constants[node.inputs[1]], np.float32)
    if node.attrs.get("alpha", 1.0) != 1.0:  # (a copy of VGG-16's 411 MB fc6 weights otherwise)
        weight = weight * np.float32(node.attrs["alpha"])
    trans_b = bool(node.attrs.get("transB", 0))
    (m, k), n = a_shape, weight.shape[0 if trans_b else 1]
    # One row times a transposed B, a·Wᵀ, is computed as (W·aᵀ)ᵀ: W read in its own layout
    # (transposing VGG-16's 411 MB fc6 took 2 s of its build); the output, a row, is the
    # same memory as the column W·aᵀ, whose channels run along its rows.
    as_column = trans_b and m == 1
    if trans_b and not as_column:
        weight = weight.T
    a = b.read(node.inputs[0])
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=-1)
    ops, operands = list(chain.ops), chain.refs(b)
    bias = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else None
    if bias:
        values = _per_channel(np.asarray(g.constants[bias], np.float32), (m, n), -1) if g.is_constant(bias) else None
        if values is None:
            raise _fail(node, "a Gemm C operand that is not a constant per column is not generated")
        ops.insert(0, ep.bias())
        operands.insert(0, b.constant(np.broadcast_to(values * node.attrs.get("beta", 1.0), (n,))))
    shape = mm.MatmulShape(n, 1, k) if as_column else mm.MatmulShape(m, n, k)
    choice = b.choose(matmul_model.choose, shape, tuple(ops))
    plan = choice.best.plan
    if as_column:
        plan = replace(plan, config=replace(plan.config, channel_axis="rows"))
    plan.config.validate(b.target)
    w = b.constant(weight)
    y = b.write(chain.end)
    call = matmul_call(plan, y, w, a, operands, b) if as_column else matmul_call(plan, y, a, w, operands, b)
    return KernelGroup(node.name, _ops([node, *after]), "matmul", [call], b.modules(mm.generate, plan.config),
                       choice.best.total_ns, choice.explain(),
                       f"{plan.config.algorithm} {plan.config.tile}, {plan.threads} thread(s)")  # fmt: skip


POOL_KINDS = {"MaxPool": "max", "AveragePool": "average", "GlobalAveragePool": "global_average"}
BLOCKED_POOLS = ("GlobalAveragePool", "ReduceMean")
"""Poolings that read a channel-blocked input (a spatial ReduceMean is one; any other
fails the build whatever its input's layout)."""


def _pool(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    g, a = b.graph, node.attrs
    if node.op == "ReduceMean":
        if _reduced_axes(node, g) != (2, 3):
            raise _fail(node, "only a mean over the spatial axes of NCHW (a global average pool) is generated")
        node = Node(node.name, "GlobalAveragePool", node.inputs[:1], node.outputs, {})
    if len(g.types[node.inputs[0]].shape) != 4 or len(node.outputs) > 1 and node.outputs[1]:
        raise _fail(node, "only 2-D pooling without indices is generated")
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", "") or a.get("storage_order", 0):
        raise _fail(node, "auto_pad and storage_order are not generated for pooling")
    shape = pool_shape(g.types[node.inputs[0]].shape, POOL_KINDS[node.op], a.get("kernel_shape"),
                       strides=a.get("strides"), pads=a.get("pads"), dilations=a.get("dilations"),
                       ceil_mode=a.get("ceil_mode", 0), count_include_pad=a.get("count_include_pad", 0))  # fmt: skip
    declared = g.types[node.outputs[0]].shape
    if math.prod(shape.output_shape) != math.prod(declared):  # ReduceMean may drop the 1×1
        raise _fail(node, f"onnx's shape inference gives {declared}, but onnxruntime and PyTorch drop a ceil_mode "
                          f"window that starts in the padding: {tuple(shape.output_shape)}; not built")  # fmt: skip
    config = pool_config(shape, b.target)
    if node.op in BLOCKED_POOLS:  # in the layout its input is held in
        config = replace(config, layout=b.layout(node.inputs[0]))
    threads = min(b.threads, config.units())
    x = b.read(node.inputs[0], config.layout)
    y = b.write(node.outputs[0])
    calls = pool_calls(config, threads, x, y, b)
    moved = 4 * (math.prod(shape.input_shape) + math.prod(shape.output_shape))  # each plane transformed in cache
    loads = round(config.loads_per_unit() * math.ceil(config.units() / threads)
                  * conv_model.unaligned_load_cost(config.lanes, b.machine))  # in aligned loads
    return _streaming(b, node.name, _ops([node]), "pool", calls, b.modules(pl.generate, config), moved,
                      f"{shape.describe()}{'' if config.layout == 'nchw' else ' ' + config.layout}, "
                      f"{config.nv} vectors of {config.lanes}, "
                      f"{threads} thread(s)", loads)


def _reduced_axes(node: Node, graph: Graph) -> tuple[int, ...]:
    """The axes ReduceMean averages over (an attribute before opset 18, an input since)."""
    rank = len(graph.types[node.inputs[0]].shape)
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        if not graph.is_constant(node.inputs[1]):
            raise _fail(node, "axes computed at run time are not generated")
        axes = graph.constants[node.inputs[1]].reshape(-1).tolist()
    if axes is None or len(axes) == 0:
        return tuple(range(rank)) if not node.attrs.get("noop_with_empty_axes", 0) else ()
    return tuple(sorted(int(a) % rank for a in axes))


def _softmax(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    shape = b.graph.types[node.inputs[0]].shape
    if "legacy_axis" in node.attrs:
        axis = node.attrs["legacy_axis"] % len(shape)
        rows, length = math.prod(shape[:axis]), math.prod(shape[axis:])
    else:
        if node.attrs.get("axis", -1) % len(shape) != len(shape) - 1:
            raise _fail(node, "softmax along an axis other than the last is not generated")
        rows, length = math.prod(shape[:-1]), shape[-1]
    config = sm.SoftmaxConfig(rows, length, b.target.f32_lanes)
    threads = min(b.threads, rows)
    x = b.read(node.inputs[0])
    y = b.write(node.outputs[0])
    call = Call(config.symbol, tuple(Part((y, x), r) for r in split(rows, threads)))
    return _streaming(b, node.name, _ops([node]), "softmax", [call], b.modules(sm.generate, config),
                      8 * rows * length, f"{rows} rows of {length}, {threads} thread(s)")


def _elementwise(b: _Builder, nodes: list[Node]) -> KernelGroup:
    """A chain of elementwise ops alone: the epilogue on a tensor streamed from memory,
    in the layout that tensor is held in where its readers can take it (NCHW else)."""
    first = nodes[0]
    out_shape = b.graph.types[first.outputs[0]].shape
    streamed = [i for i in first.inputs if i and not b.graph.is_constant(i) and b.graph.types[i].shape == out_shape]
    if not streamed:
        raise _fail(first, f"no input of the output's shape {out_shape} to stream")
    start = streamed[0]
    chain = match_epilogue(b, start, nodes, channel_axis=_plane_axis(out_shape))
    layout, held = "nchw", b.layout(start)
    if held != "nchw":  # stay blocked unless its readers pay more than the transform back
        options = b.output_layouts(chain.end)
        if held in options and options[held] <= options["nchw"] + b.transform_back_ns(out_shape, held):
            layout = held
    x = b.read(start, layout)
    operands = chain.refs(b, layout)
    y = b.write(chain.end, layout)
    return _elementwise_kernel(b, first.name, _ops(nodes), x, y, out_shape, tuple(chain.ops), operands, layout)


def _plane_axis(shape: tuple[int, ...]) -> int:
    """The axis an elementwise kernel's per-channel operand varies along: NCHW's
    channels, else the first axis (its planes are then the first axis' slices)."""
    return 1 if len(shape) == 4 else 0


def _elementwise_kernel(b: _Builder, name: str, ops: list[str], x: Ref, y: Ref, shape: tuple[int, ...],
                        epilogue: ep.Epilogue, operands: list[Ref], layout: kc.Layout = "nchw") -> KernelGroup:  # fmt: skip
    """One `kernels.elementwise` kernel over planes (`_plane_axis`; channel blocks of an
    NCHW[c] tensor, pixels of an NHWC one)."""
    lanes = b.target.f32_lanes
    if len(shape) == 4:
        n, channels, h, w = shape
        planes = {"nchw": n * channels, "nchwc": n * channels // lanes, "nhwc": n * h * w}[layout]
    else:
        planes = channels = shape[0] if shape else 1
    plane_size = math.prod(shape) // planes
    config = ew.ElementwiseConfig(planes, plane_size, channels, lanes, ELEMENTWISE_VECTORS, epilogue, layout)
    threads = min(b.threads, planes)
    call = Call(config.symbol, tuple(Part((y, x, *operands), r) for r in split(planes, threads)))
    moved = 4 * planes * plane_size * (2 + sum(op.operand == "output" for op in epilogue))
    return _streaming(b, name, ops, "elementwise", [call], b.modules(ew.generate, config), moved,
                      f"{ep.describe(epilogue)} on {planes} planes of {plane_size}, {threads} thread(s)")


def _streaming(b: _Builder, name: str, ops: list[str], kind: str, calls: list[Call], modules: list[KernelModule],
               moved: int, summary: str, loads: int = 0) -> KernelGroup:  # fmt: skip
    """A kernel the models do not plan (pooling, softmax, elementwise, copies): it
    streams its bytes once, so its prediction is their traffic time at the bandwidth
    of the level that holds them, plus the call — or, where it reads cached data many
    times over (a pooling window's taps: `loads` vector loads per thread, a
    line-crossing one counted as two), those loads at the profile's L1 load rate if
    they take longer. Bandwidth alone predicted 6.7 µs for YOLO-V4's 13x13 max pool of
    512x13², which issues 1.1 M loads (273 µs measured)."""
    rate = b.machine.vector_loads_per_ns()
    traffic, reading = b.machine.traffic_ns(moved), loads / rate
    predicted = max(traffic, reading) + b.machine.call_ns
    if reading > traffic:
        bound = (f"load-bound, predicted {predicted / 1e3:.1f} µs = {loads} vector loads per thread "
                 f"(line-crossing ones counted twice) at {rate:.2f}/ns")  # fmt: skip
    else:
        bound = (f"bandwidth-bound, predicted {predicted / 1e3:.1f} µs = {moved / 1e3:.1f} kB moved at the "
                 "bandwidth of the level holding them")  # fmt: skip
    why = f"{kind} {summary}: {bound} + {b.machine.call_ns / 1e3:.1f} µs call"
    return KernelGroup(name, ops, kind, calls, modules, predicted, why, summary)


def _concat(b: _Builder, node: Node) -> KernelGroup | None:
    """Concat: its inputs placed as slices of its output where they can be, others copied
    (in the output's layout: channel blocks when all inputs are held so)."""
    shape = b.graph.types[node.outputs[0]].shape
    axis = node.attrs.get("axis", 0) % len(shape)
    if math.prod(shape[:axis]) != 1:
        raise _fail(node, "Concat along an axis with more than one slice per input is not generated")
    layout: kc.Layout = "nchw"  # channel blocks where every input is held so (see blocked_layouts)
    if b.concat_takes_blocks(node) and all(b.layout(v) == "nchwc" for v in node.inputs):
        layout = "nchwc"
    out = b.write(node.outputs[0], layout)
    out_buffer = out.space - _VIRTUAL
    offset, copies = 0, []
    for value in node.inputs:
        size = b.graph.types[value].elements
        movable = (not b.graph.is_constant(value) and value not in b.graph.inputs and b.layout(value) == layout
                   and b.where[value][1] == 0 and b.buffers[b.where[value][0]].inside is None
                   and b.buffers[b.where[value][0]].input_index is None
                   and b.buffers[b.where[value][0]].size == size
                   and node.inputs.count(value) == 1)  # fmt: skip
        if movable:
            inner = b.where[value][0]
            b.buffers[inner].inside = (out_buffer, offset)
            outer = b.buffers[out_buffer]
            outer.first = min(outer.first, b.buffers[inner].first)
            outer.last = max(outer.last, b.buffers[inner].last)
        else:
            copies.append((value, offset, size))
        offset += size
    if not copies:
        return None
    calls, modules = [], []
    for value, at, size in copies:
        config = ew.ElementwiseConfig(1, size, 1, b.target.f32_lanes, ELEMENTWISE_VECTORS)
        calls.append(Call(config.symbol, (Part((Ref(out.space, at), b.read(value, layout)), (0, 1)),)))
        modules += b.modules(ew.generate, config)
    return _streaming(b, node.name, _ops([node]), "copy", calls, modules,
                      8 * sum(size for _, _, size in copies), f"{len(copies)} input(s) copied into place")


def _movement(b: _Builder, node: Node) -> KernelGroup | None:
    """Transpose, Slice, Split, Pad, Resize, Upsample: each output a view of the input
    at an offset where it is one contiguous stretch of it, else a gather kernel."""
    data = node.inputs[0]
    if b.graph.is_constant(data):
        raise _fail(node, "data movement of a constant is folded at import; this one was not")
    try:
        maps = movement.source_maps(node, b.graph)
        fill = movement.fill_value(node, b.graph)
        moves = [(out, movement.plan(source, b.graph.types[data].elements, fill, b.target))
                 for out, source in zip(node.outputs, maps) if out]  # fmt: skip
    except AutoconfigError as err:
        raise _fail(node, str(err).removeprefix(f"node {node.name!r} ({node.op}): ")) from None
    calls, modules, moved = [], [], 0
    for out, move in moves:
        if move.view_offset is not None:
            b.alias(out, data, move.view_offset)
            continue
        config = move.config
        x, tables = b.read(data), b.constant(move.tables.view(np.float32))
        y = b.write(out)
        threads = min(b.threads, config.rows)
        calls.append(Call(config.symbol, tuple(Part((y, x, tables), r) for r in split(config.rows, threads))))
        modules += b.modules(mv.generate, config)
        moved += 8 * math.prod(config.shape)
    if not calls:
        return None
    kinds = ", ".join(f"{'runs' if m.config.run else 'elements'} into {m.config.shape}" for _, m in moves if m.config)
    return _streaming(b, node.name, _ops([node]), "gather", calls, modules, moved, kinds)


# -------------------------------------------------------------------- the model


def build_model(graph: Graph, profile: HardwareProfile, target: Target, fusion: str = "dp",
                threads: int | None = None, cache: KernelCache | None = None) -> BuiltModel:  # fmt: skip
    """The kernels, program and memory plan of `graph` (see the module docstring); with
    a kernel cache, the models' choices and generated modules it holds are reused."""
    for name in graph.inputs + graph.outputs:
        if graph.types[name].dtype != "float32":
            raise AutoconfigError(f"{graph.name}: {name!r} is {graph.types[name].dtype}; only float32 models are built")
    for name in graph.outputs:
        if graph.is_constant(name) or name in graph.inputs:
            raise AutoconfigError(f"{graph.name}: output {name!r} is computed by no node")
    threads = min(threads or int(profile.cores), int(profile.cores))
    b = _Builder(graph, profile, target, threads, cache)
    plan = fusion_plan(graph, profile, fusion, b.decisions)
    for members in plan.groups:
        nodes = [graph.nodes[v] for v in members]
        kinds = {info(n).kernel for n in nodes}
        anchor = next((n.op for n in nodes if info(n).kernel in (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)),
                      ELEMENTWISE_GROUP if kinds == {Kernel.ELEMENTWISE} else "")  # fmt: skip
        b.anchor_of |= {n.name: anchor for n in nodes}
        compute = [n for n in nodes if info(n).kernel is not Kernel.VIEW]
        b.after_anchor |= {n.name: [m for m in compute if m is not n] for n in compute if n.op == anchor}
    kernels = []
    for members in _group_order(graph, plan.groups):
        group = _lower_group(b, [graph.nodes[v] for v in members])
        kernels += b.finish_step()  # layout transforms it reads, one step before it
        if group is not None:
            kernels.append(group)
            b.step += 1
    arena = b.place(graph.outputs)
    for k in kernels:
        k.calls = [Call(c.symbol, tuple(Part(tuple(b.resolve(r) for r in p.buffers), p.sizes) for p in c.parts))
                   for c in k.calls]  # fmt: skip
    intermediate = sum(_aligned(buf.size) for buf in b.buffers if buf.inside is None and buf.input_index is None)
    outputs = []
    for name in graph.outputs:
        ref = b.resolve(Ref(_VIRTUAL + b.where[name][0], b.where[name][1]))
        if ref.space != ARENA:
            raise AutoconfigError(f"{graph.name}: output {name!r} is an input seen in another shape; nothing to build")
        outputs.append((name, ref.offset))
    return BuiltModel(graph, profile, target, fusion, threads, kernels, tuple(b.weights), arena, intermediate, outputs)
