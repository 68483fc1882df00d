"""The lowering pass (`autoconfig.compiler`, pass 4): it reads the simplified graph and
its fusion plan and writes the model's kernels, program and memory plan
(`BuiltModel`). Every group of the fusion plan becomes one
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
from autoconfig.decisions import ask, decisions_of
from autoconfig.families import elementwise
from autoconfig.errors import REFUSALS, AutoconfigError, reraised
from autoconfig.fusion import plan as fusion_plan
from autoconfig.fusion.planning import Plan
from autoconfig.fusion.classify import gated, streamed_input
from autoconfig.graph.ir import Graph, Node, TensorType
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
from kernels import pool as pl
from kernels import softmax as sm
from kernels.cache import KernelCache, generated
from kernels.emit import KernelModule, generate
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
        self.decisions = decisions_of(cache)
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
            return self.constant(_in_layout(self.graph.constants[value], layout, self.target.f32_lanes))
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
                                            "layout", [call], self.modules(generate, config), predicted, why,
                                            f"{'x'.join(map(str, shape))} to {layout}, {threads} thread(s)"))  # fmt: skip
        return name

    def broadcast(self, value: str, shape: tuple[int, ...]) -> str:
        """The name of `value` broadcast to `shape` (ONNX's multidirectional rule): a
        constant's values repeated, a computed tensor gathered by a kernel run before
        the kernel being lowered (once per tensor and shape), or a view of it where the
        broadcast only adds axes of one."""
        name = f"{value} broadcast to {'x'.join(map(str, shape))}"
        if name in self.where or self.graph.is_constant(name):
            return name
        self.graph.types[name] = TensorType(tuple(shape), "float32")
        if self.graph.is_constant(value):
            array = np.asarray(self.graph.constants[value], np.float32)
            self.graph.constants[name] = np.ascontiguousarray(np.broadcast_to(array, shape))
            return name
        size = self.graph.types[value].elements
        source = np.broadcast_to(np.arange(size, dtype=np.int64).reshape(self.graph.types[value].shape), shape)
        move = movement.plan(source, size, 0.0, self.target)
        if move.view_offset is not None:
            self.alias(name, value, move.view_offset)
            return name
        self.transforming = True
        x, tables = self.read(value), self.constant(move.tables.view(np.float32))
        self.where[name] = (self._buffer(math.prod(shape)), 0)
        self.transforming = False
        threads = min(self.threads, move.config.rows)
        y = Ref(_VIRTUAL + self.where[name][0])
        call = Call(move.config.symbol, tuple(Part((y, x, tables), r) for r in split(move.config.rows, threads)))
        self.pending.append(_streaming(self, f"{value}_broadcast", [f"{value} (broadcast to {shape})"], "gather",
                                       [call], self.modules(mv.generate, move.config), 8 * math.prod(shape),
                                       f"broadcast to {'x'.join(map(str, shape))}"))  # fmt: skip
        return name

    def blocked_layouts(self, value: str) -> tuple[kc.Layout, ...]:
        """The blocked layouts `value` may be written in (`_blockable`), where it is read
        only by convolutions' kernels (their input, or their epilogue's residual),
        elementwise kernels, global average pools — any of them, but never by a view —
        and channel
        concatenations of such tensors (`concat_takes_blocks`: NCHW[c] only, where the
        inputs' blocks follow one another) — any other reader would need it
        transformed back."""
        layouts = self._blockable(value)
        readers = self.consumers.get(value, [])
        if not readers:
            return ()
        for n in readers:
            if info(n).kernel is Kernel.VIEW:  # a view in the writer's own group reads NCHW too, after it
                return ()
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


def _in_layout(array: np.ndarray, layout: kc.Layout, lanes: int) -> np.ndarray:
    """A constant NCHW tensor's values in `layout` (NCHW[c] in blocks of `lanes`
    channels, or NHWC); anything else as it is."""
    if layout == "nchw" or array.ndim != 4:
        return array
    if layout == "nhwc":
        return array.transpose(0, 2, 3, 1)
    n, c, h, w = array.shape
    return array.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2)


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


def match_epilogue(b: _Builder, start: str, nodes: list[Node], channel_axis: int,
                   out_shape: tuple[int, ...] | None = None) -> Epilogue:  # fmt: skip
    """`nodes` (a group's elementwise ops, in order) as an epilogue on `start` (seen as
    broadcast to `out_shape` if given): each op takes the chain's current value and at
    most one operand."""
    out_shape = b.graph.types[start].shape if out_shape is None else tuple(out_shape)
    remaining = list(nodes)
    ops: list[ep.EpilogueOp] = []
    operands: list[np.ndarray | str] = []
    current = start
    while remaining:
        users = [n for n in remaining if current in n.inputs]
        if not users:
            raise _fail(remaining[0], f"not on the chain of elementwise ops after {current!r}")
        gates = {u.op for u in users}
        gate = gated(b.graph, current, users)
        if gate is not None and all(n in remaining for n in gate[0]):
            used, kind = gate
            ops.append(ep.EpilogueOp(kind))
        elif len(users) == 1 and users[0].op == "BatchNormalization":
            used = [users[0]]
            for op, values in zip((ep.scale(), ep.bias()), _batchnorm_affine(b, users[0], out_shape, channel_axis)):
                ops.append(op)
                operands.append(values)
        elif len(users) == 1 and users[0].op in elementwise.UNARY:
            used = [users[0]]
            ops.append(elementwise.epilogue_op(users[0], b.graph))
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


def _batchnorm_affine(b: _Builder, node: Node, out_shape: tuple[int, ...],
                      channel_axis: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """An inference BatchNormalization as a per-channel scale, then a bias."""
    g = b.graph
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise _fail(node, "BatchNormalization in training mode is not generated")
    if not all(g.is_constant(i) for i in node.inputs[1:5]) or len(out_shape) < 2:
        raise _fail(node, "BatchNormalization needs constant statistics and a channel axis")
    scale, bias, mean, var = (np.asarray(g.constants[i], np.float64) for i in node.inputs[1:5])
    factor = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
    shape = [1] * len(out_shape)
    shape[1] = -1
    pieces = []
    for values in (factor, bias - mean * factor):
        per_channel = _per_channel(values.astype(np.float32).reshape(shape), out_shape, channel_axis)
        if per_channel is None:
            raise _fail(node, f"its channels (axis 1 of {out_shape}) are not the planes of the kernel it joins")
        pieces.append(per_channel)
    return pieces[0], pieces[1]


def _binary(b: _Builder, node: Node, current: str, out_shape: tuple[int, ...],
            channel_axis: int) -> tuple[ep.EpilogueOp, np.ndarray | str]:  # fmt: skip
    """Add/Sub/Mul/Div of the chain's value and one other operand, as an epilogue op:
    a constant per channel as its values; anything else of the output's shape (broadcast
    to it first where it is not: `_Builder.broadcast`) as the tensor's name."""
    others = [i for i in node.inputs if i != current]
    if len(others) != 1:
        raise _fail(node, f"{node.op} of a value with itself is not generated")
    other, first = others[0], node.inputs.index(current) == 0
    shape = b.graph.types[other].shape
    channels = out_shape[channel_axis] if out_shape else 1
    if b.graph.is_constant(other) and (first or node.op in ("Add", "Mul")):
        values = _per_channel(np.asarray(b.graph.constants[other], np.float32), out_shape, channel_axis)
        if values is not None:
            values = -values if node.op == "Sub" else 1 / values if node.op == "Div" else values
            kind = "bias" if node.op in ("Add", "Sub") else "scale"
            return ep.EpilogueOp(kind), np.broadcast_to(values, (channels,))
    if tuple(shape) != tuple(out_shape) and not b.graph.is_constant(other) and node.op in ("Add", "Mul") \
            and _along_channels(shape, out_shape, channel_axis):  # fmt: skip
        return ep.EpilogueOp("bias" if node.op == "Add" else "scale"), other
    if tuple(shape) != tuple(out_shape):
        other = b.broadcast(other, out_shape)
    kinds = {"Add": "residual", "Mul": "product"} | ({"Sub": "difference", "Div": "quotient"} if first else
                                                      {"Sub": "reverse_difference", "Div": "reverse_quotient"})
    return ep.EpilogueOp(kinds[node.op]), other


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
    """The kernel of one group (None: views and concatenations, which need none, and
    groups whose outputs are all empty)."""
    outputs = [out for n in members for out in n.outputs if out]
    if all(b.graph.types[out].elements == 0 for out in outputs):
        for out in outputs:
            b.write(out)
        return None
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


def _lower_named(b: _Builder, members: list[Node]) -> KernelGroup | None:
    """`_lower_group`, its errors naming a node (the group's anchor, else its first) where
    the check that failed did not."""
    try:
        return _lower_group(b, members)
    except REFUSALS as err:
        if str(err).startswith("node '"):
            raise
        kinds = (Kernel.EPILOGUE_ANCHOR, Kernel.ANCHOR)
        raise _fail(next((n for n in members if info(n).kernel in kinds), members[0]), str(err)) from None


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


def _window_pads(node: Node, graph: Graph, kernel, strides, dilations) -> tuple[int, ...]:
    """ONNX's pads (begins, then ends) of a convolution or pooling over the input's
    spatial axes, or those auto_pad implies (SAME_UPPER puts the odd one at the end)."""
    size = graph.types[node.inputs[0]].shape[2:]
    auto = node.attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        return tuple(node.attrs.get("pads", (0,) * (2 * len(size))))
    if auto == "VALID":
        return (0,) * (2 * len(size))
    totals = []
    for axis in range(len(size)):
        out = -(-size[axis] // strides[axis])
        reach = (kernel[axis] - 1) * dilations[axis] + 1
        totals.append(max(0, (out - 1) * strides[axis] + reach - size[axis]))
    first = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in totals]
    return (*first, *(t - f for t, f in zip(totals, first)))


def _window_strides(node: Node, graph: Graph, strides, pads) -> tuple[int, ...]:
    """The strides, each at most its padded input's extent: a larger one gives the same
    single window along that axis (ceil mode included), and would cost the build its
    stride² input phases."""
    size = graph.types[node.inputs[0]].shape[2:]
    return tuple(min(int(s), n + pads[i] + pads[i + len(size)]) for i, (s, n) in enumerate(zip(strides, size)))


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
    pads = _window_pads(node, g, weight.shape[2:], strides, dilations)
    strides = _window_strides(node, g, strides, pads)
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
    return KernelGroup(node.name, _ops([node, *after]), "conv", calls, b.modules(generate, plan.config),
                       best.total_ns, f"{replace(choice, best=best).explain()}\n{why}",
                       f"{plan.config.algorithm} {plan.config.tile}{' ' + layouts if layouts != 'nchw' else ''}, "
                       f"{plan.threads} thread(s)")  # fmt: skip


@dataclass(frozen=True)
class _Product:
    """A Gemm or MatMul as `batch` products C[M,N] = A[M,K]·B[K,N] (NumPy's matmul rules:
    a 1-D A is a row, a 1-D B a column, batch axes broadcast), with each product's
    offset into A, B and C in elements."""

    m: int
    n: int
    k: int
    offsets: tuple[tuple[int, int, int], ...]


def _product(node: Node, graph: Graph, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> _Product:
    """The products of a MatMul (or a 2-D Gemm, shapes transposed already): a batch of A
    over one matrix B is one product of all A's rows."""
    a_shape = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b_shape = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2:
        raise _fail(node, f"inner sizes differ: {a_shape} times {b_shape}")
    if len(b_shape) == 2:
        return _Product(math.prod(a_shape[:-1]), n, k, ((0, 0, 0),))
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    a_index = np.broadcast_to(np.arange(math.prod(a_shape[:-2])).reshape(a_shape[:-2]), batch).reshape(-1)
    b_index = np.broadcast_to(np.arange(math.prod(b_shape[:-2])).reshape(b_shape[:-2]), batch).reshape(-1)
    return _Product(m, n, k, tuple((int(i) * m * k, int(j) * k * n, c * m * n)
                                   for c, (i, j) in enumerate(zip(a_index, b_index))))  # fmt: skip


def _gemm(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    """Gemm (alpha, beta, transA, transB, any C broadcast to the output) and MatMul (any
    ranks), B a constant or computed: one matrix kernel, called once per product."""
    g, gemm = b.graph, node.op == "Gemm"
    a_shape, b_shape = g.types[node.inputs[0]].shape, g.types[node.inputs[1]].shape
    trans_a, trans_b = gemm and node.attrs.get("transA", 0), gemm and node.attrs.get("transB", 0)
    alpha = float(node.attrs.get("alpha", 1.0)) if gemm else 1.0
    a, calls, modules = b.read(node.inputs[0]), [], []
    if trans_a:
        a, calls, modules = _permuted(b, a, a_shape, (1, 0))
        a_shape = a_shape[::-1]
    constant_b = g.is_constant(node.inputs[1])
    if trans_b:
        b_shape = (*b_shape[:-2], b_shape[-1], b_shape[-2])
    product = _product(node, g, a_shape, b_shape)
    # One row times a constant transposed B, a·Wᵀ, is computed as (W·aᵀ)ᵀ: W read in its own
    # layout (a transpose of a large fc layer's weights costs the build seconds); the output,
    # a row, is the same memory as the column W·aᵀ, whose channels run along its rows.
    as_column = trans_b and constant_b and product.m == 1
    chain = match_epilogue(b, node.outputs[0], after, channel_axis=-1)
    ops, operands = list(chain.ops), chain.refs(b)
    first_ops, first_operands = _gemm_operands(b, node, product, alpha if not constant_b else 1.0)
    ops, operands = first_ops + ops, first_operands + operands
    shape = mm.MatmulShape(product.n, 1, product.k) if as_column else mm.MatmulShape(product.m, product.n, product.k)
    choice = b.choose(matmul_model.choose, shape, tuple(ops))
    plan = choice.best.plan
    if as_column:
        plan = replace(plan, config=replace(plan.config, channel_axis="rows"))
    plan.config.validate(b.target)
    w = _right_operand(b, node, trans_b and not as_column, alpha if constant_b else 1.0, calls, modules)
    y = b.write(chain.end)
    for a_at, b_at, c_at in product.offsets:
        moved = [Ref(r.space, r.offset + c_at) if op.operand == "output" else r
                 for op, r in zip([o for o in ops if o.operand], operands)]  # fmt: skip
        left, right = Ref(a.space, a.offset + a_at), Ref(w.space, w.offset + b_at)
        out = Ref(y.space, y.offset + c_at)
        calls.append(matmul_call(plan, out, right, left, moved, b) if as_column else
                     matmul_call(plan, out, left, right, moved, b))  # fmt: skip
    return KernelGroup(node.name, _ops([node, *after]), "matmul", calls, modules + b.modules(mm.generate, plan.config),
                       choice.best.total_ns * len(product.offsets), choice.explain(),
                       f"{plan.config.algorithm} {plan.config.tile}"
                       f"{f' x{len(product.offsets)}' if len(product.offsets) > 1 else ''}, "
                       f"{plan.threads} thread(s)")  # fmt: skip


def _right_operand(b: _Builder, node: Node, transpose: bool, alpha: float, calls: list[Call],
                   modules: list[KernelModule]) -> Ref:  # fmt: skip
    """Where the products read B: a constant (scaled by `alpha`, transposed in numpy), or
    a computed tensor (transposed by a gather whose calls and modules are appended)."""
    name = node.inputs[1]
    if b.graph.is_constant(name):
        weight = np.asarray(b.graph.constants[name], np.float32)
        weight = weight * np.float32(alpha) if alpha != 1.0 else weight
        return b.constant(np.swapaxes(weight, -1, -2) if transpose else weight)
    w = b.read(name)
    if not transpose:
        return w
    shape = b.graph.types[name].shape
    w, more_calls, more_modules = _permuted(b, w, shape, (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2))
    calls += more_calls
    modules += more_modules
    return w


def _gemm_operands(b: _Builder, node: Node, product: _Product,
                   alpha: float) -> tuple[list[ep.EpilogueOp], list[Ref]]:  # fmt: skip
    """The epilogue ops a Gemm adds before its chain's: alpha as a scale (where B is
    computed; a constant B is scaled instead), then beta·C — per column as a bias, else
    broadcast to the output as a residual."""
    ops, operands = [], []
    m, n = product.m, product.n
    if alpha != 1.0:
        ops.append(ep.scale())
        operands.append(b.constant(np.full(n, alpha, np.float32)))
    c = node.inputs[2] if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else None
    if c is None:
        return ops, operands
    beta = float(node.attrs.get("beta", 1.0))
    if b.graph.is_constant(c):
        values = np.asarray(b.graph.constants[c], np.float32) * np.float32(beta)
        column = _per_channel(values, (m, n), -1)
        if column is not None:
            return ops + [ep.bias()], operands + [b.constant(np.broadcast_to(column, (n,)))]
        b.graph.constants[f"{c} times {beta}"] = values
        b.graph.types[f"{c} times {beta}"] = TensorType(values.shape, "float32")
        c = f"{c} times {beta}"
    elif beta != 1.0:
        raise _fail(node, "a computed C with beta other than 1 is not generated")
    if tuple(b.graph.types[c].shape) != (m, n):
        c = b.broadcast(c, (m, n))
    return ops + [ep.residual()], operands + [b.read(c)]


POOL_KINDS = {"MaxPool": "max", "AveragePool": "average", "GlobalAveragePool": "global_average"}
BLOCKED_POOLS = ("GlobalAveragePool", "ReduceMean")
"""Poolings that read a channel-blocked input (a spatial ReduceMean is one; any other
fails the build whatever its input's layout)."""


def _pool(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    """A pooling: 1-D and 2-D as one 2-D pooling kernel; 3-D as two on views of the same
    memory, over (height, width) of every depth slice, then over depth (a box window's
    maximum, and its average with per-axis tap counts, are separable)."""
    g = b.graph
    if node.op == "ReduceMean":
        axes, shape = _reduced_axes(node, g), g.types[node.inputs[0]].shape
        if axes != (2, 3) or len(shape) != 4:
            return _reduce_mean(b, node, axes)
        node = Node(node.name, "GlobalAveragePool", node.inputs[:1], node.outputs, {})
    input_shape = g.types[node.inputs[0]].shape
    if len(input_shape) not in (3, 4, 5):
        raise _fail(node, f"only 1-D, 2-D and 3-D pooling is generated, not {len(input_shape) - 2}-D")
    if len(node.outputs) > 1 and node.outputs[1]:
        raise _fail(node, "the Indices output of MaxPool is not generated")
    shapes = _pool_passes(node, g)
    declared = g.types[node.outputs[0]].shape
    if math.prod(shapes[-1].output_shape) != math.prod(declared):  # ReduceMean may drop the 1×1
        raise _fail(node, f"onnx's shape inference gives {declared}, but onnxruntime and PyTorch drop a ceil_mode "
                          f"window that starts in the padding: {tuple(shapes[-1].output_shape)}; not built")  # fmt: skip
    configs = [pool_config(shape, b.target) for shape in shapes]
    if node.op in BLOCKED_POOLS:  # in the layout its input is held in
        configs = [replace(configs[0], layout=b.layout(node.inputs[0]))]
    threads = min(b.threads, max(c.units() for c in configs))
    x = b.read(node.inputs[0], configs[0].layout)
    y = b.write(node.outputs[0])
    middle = [b.scratch(math.prod(c.shape.output_shape)) for c in configs[:-1]]
    calls = [call for c, source, dest in zip(configs, [x, *middle], [*middle, y])
             for call in pool_calls(c, threads, source, dest, b)]  # fmt: skip
    moved = sum(4 * (math.prod(c.shape.input_shape) + math.prod(c.shape.output_shape)) for c in configs)
    loads = round(sum(c.loads_per_unit() * math.ceil(c.units() / threads) for c in configs)
                  * conv_model.unaligned_load_cost(configs[0].lanes, b.machine))  # in aligned loads
    modules = [m for c in configs for m in b.modules(pl.generate, c)]
    return _streaming(b, node.name, _ops([node]), "pool", calls, modules, moved,
                      f"{' then '.join(c.shape.describe() for c in configs)}"
                      f"{'' if configs[0].layout == 'nchw' else ' ' + configs[0].layout}, "
                      f"{configs[0].nv} vectors of {configs[0].lanes}, {threads} thread(s)", loads)


def _pool_passes(node: Node, graph: Graph) -> list[pl.PoolShape]:
    """The 2-D poolings a pooling node is computed as, in order: one for 1-D (rows of one
    pixel) and 2-D, two for 3-D (height and width per depth slice, then depth over
    columns of every output pixel)."""
    shape = graph.types[node.inputs[0]].shape
    window = _pool_window(node, graph)
    kind, a = POOL_KINDS[node.op], node.attrs
    options = {"ceil_mode": a.get("ceil_mode", 0), "count_include_pad": a.get("count_include_pad", 0)}
    if window["kernel_shape"] is None:  # global: one plane per channel, whatever its rank
        return [pool_shape((*shape[:2], 1, math.prod(shape[2:])) if len(shape) != 4 else shape, kind)]
    if len(shape) == 3:
        return [pool_shape((*shape[:2], 1, shape[2]), kind, **_lifted(window, 1), **options)]
    if len(shape) == 4:
        return [pool_shape(shape, kind, **window, **options)]
    n, c, d, h, w = shape
    plane = pool_shape((n, c * d, h, w), kind, **{k: v[1:] if k != "pads" else (*v[1:3], *v[4:6])
                                                   for k, v in window.items()}, **options)  # fmt: skip
    depth = {k: v[:1] if k != "pads" else (v[0], v[3]) for k, v in window.items()}
    pixels = plane.out_height * plane.out_width
    return [plane, pool_shape((n, c, d, pixels), kind, **_lifted(depth, 0), **options)]


def _lifted(window: dict, axis: int) -> dict:
    """A 1-D window as a 2-D one along rows (`axis` 0: a column of one pixel wide) or
    along columns (`axis` 1: a row of one pixel high)."""
    kernel, strides, dilations, (begin, end) = (window[k] for k in ("kernel_shape", "strides", "dilations", "pads"))

    def two(v: tuple, unit: int) -> tuple:
        return (v[0], unit) if axis == 0 else (unit, v[0])
    pads = (begin, 0, end, 0) if axis == 0 else (0, begin, 0, end)
    return {"kernel_shape": two(kernel, 1), "strides": two(strides, 1), "dilations": two(dilations, 1), "pads": pads}


def _pool_window(node: Node, graph: Graph) -> dict[str, tuple[int, ...] | None]:
    """A pooling's kernel_shape, strides, pads (auto_pad resolved) and dilations, one
    value per spatial axis (pads: begins, then ends)."""
    if node.op == "GlobalAveragePool":
        return {"kernel_shape": None}
    a = node.attrs
    kernel = tuple(a["kernel_shape"])
    strides, dilations = tuple(a.get("strides", (1,) * len(kernel))), tuple(a.get("dilations", (1,) * len(kernel)))
    pads = _window_pads(node, graph, kernel, strides, dilations)
    strides = _window_strides(node, graph, strides, pads)
    return {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations}


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


def _reduce_mean(b: _Builder, node: Node, axes: tuple[int, ...]) -> KernelGroup:
    """A mean over any axes: the reduced axes transposed last (a gather, unless they are
    last already), then a global average pool over rows of their elements."""
    shape = b.graph.types[node.inputs[0]].shape
    kept = [a for a in range(len(shape)) if a not in axes]
    rows, length = math.prod(shape[a] for a in kept), math.prod(shape[a] for a in axes)
    x, y = b.read(node.inputs[0]), b.write(node.outputs[0])
    source, calls, modules = _permuted(b, x, shape, (*kept, *axes))
    config = pool_config(pool_shape((1, rows, 1, length), "global_average"), b.target)
    threads = min(b.threads, config.units())
    calls += pool_calls(config, threads, source, y, b)
    modules += b.modules(pl.generate, config)
    return _streaming(b, node.name, _ops([node]), "pool", calls, modules, 4 * (2 * rows * length + rows),
                      f"mean over axes {list(axes)}: {rows} rows of {length}, {threads} thread(s)")


def _permuted(b: _Builder, x: Ref, shape: tuple[int, ...], perm: tuple[int, ...], into: Ref | None = None,
              source: np.ndarray | None = None) -> tuple[Ref, list[Call], list[KernelModule]]:  # fmt: skip
    """`x` (of `shape`) transposed by `perm` (or gathered by the flat indices of
    `source`), by a gather into `into` (a scratch buffer if None), with its calls and
    modules; `x` itself, and no call, where that moves nothing and no destination is
    asked for."""
    size = math.prod(shape)
    if source is None:
        source = np.arange(size, dtype=np.int64).reshape(shape).transpose(perm)
    move = movement.plan(source, size, 0.0, b.target)
    if move.view_offset is not None and into is None:
        return x, [], []
    out = into if into is not None else b.scratch(size)
    if move.view_offset is not None:  # a copy
        config = ew.ElementwiseConfig(1, size, 1, b.target.f32_lanes, ELEMENTWISE_VECTORS)
        return out, [Call(config.symbol, (Part((out, x), (0, 1)),))], b.modules(ew.generate, config)
    tables = b.constant(move.tables.view(np.float32))
    threads = min(b.threads, move.config.rows)
    call = Call(move.config.symbol, tuple(Part((out, x, tables), r) for r in split(move.config.rows, threads)))
    return out, [call], b.modules(mv.generate, move.config)


def _softmax(b: _Builder, node: Node, after: list[Node]) -> KernelGroup:
    """Softmax along one axis (opset 13 on; before, over the axes flattened from it): the
    axis transposed last and back where it is not last already."""
    shape = b.graph.types[node.inputs[0]].shape
    if "legacy_axis" in node.attrs:
        axis = node.attrs["legacy_axis"] % len(shape)
        rows, length = math.prod(shape[:axis]), math.prod(shape[axis:])
        perm = tuple(range(len(shape)))
    else:
        axis = node.attrs.get("axis", -1) % len(shape)
        perm = (*(a for a in range(len(shape)) if a != axis), axis)
        rows, length = math.prod(shape) // shape[axis], shape[axis]
    config = sm.SoftmaxConfig(rows, length, b.target.f32_lanes)
    threads = min(b.threads, rows)
    x = b.read(node.inputs[0])
    y = b.write(node.outputs[0])
    source, calls, modules = _permuted(b, x, shape, perm)
    last = perm == tuple(range(len(shape)))
    result = y if last else b.scratch(rows * length)
    calls.append(Call(config.symbol, tuple(Part((result, source), r) for r in split(rows, threads))))
    modules += b.modules(sm.generate, config)
    if not last:
        moved = tuple(shape[a] for a in perm)
        _, back, back_modules = _permuted(b, result, moved, tuple(int(i) for i in np.argsort(perm)), into=y)
        calls, modules = calls + back, modules + back_modules
    return _streaming(b, node.name, _ops([node]), "softmax", calls, modules,
                      8 * rows * length * (1 if last else 3), f"{rows} rows of {length}, {threads} thread(s)")


def _elementwise(b: _Builder, nodes: list[Node]) -> KernelGroup:
    """A chain of elementwise ops alone: the epilogue on a tensor streamed from memory,
    in the layout that tensor is held in where its readers can take it (NCHW else)."""
    first = nodes[0]
    out_shape = b.graph.types[first.outputs[0]].shape
    start = streamed_input(b.graph, first)
    if start is None:
        raise _fail(first, "every input is a constant; it should have been folded")
    chain = match_epilogue(b, start, nodes, _plane_axis(out_shape), out_shape)
    if b.graph.types[start].shape != out_shape:  # every computed input is broadcast
        start = b.broadcast(start, out_shape)
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
    they take longer (bandwidth alone misses a wide window's loads by far)."""
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
    (in the output's layout: channel blocks when all inputs are held so). Along an axis
    with more than one slice per input, they are placed one after another in a buffer
    of their own and gathered from there into the output."""
    shape = b.graph.types[node.outputs[0]].shape
    axis = node.attrs.get("axis", 0) % len(shape)
    interleaved = math.prod(shape[:axis]) != 1
    layout: kc.Layout = "nchw"  # channel blocks where every input is held so (see blocked_layouts)
    if not interleaved and b.concat_takes_blocks(node) and all(b.layout(v) == "nchwc" for v in node.inputs):
        layout = "nchwc"
    out = Ref(_VIRTUAL + b._buffer(math.prod(shape))) if interleaved else b.write(node.outputs[0], layout)
    copies = _place_slices(b, node, out, layout)
    calls, modules = [], []
    for value, at, size in copies:
        config = ew.ElementwiseConfig(1, size, 1, b.target.f32_lanes, ELEMENTWISE_VECTORS)
        calls.append(Call(config.symbol, (Part((Ref(out.space, at), b.read(value, layout)), (0, 1)),)))
        modules += b.modules(ew.generate, config)
    if interleaved:
        pieces, at = [], 0
        for value in node.inputs:
            part = b.graph.types[value]
            pieces.append(at + np.arange(part.elements, dtype=np.int64).reshape(part.shape))
            at += part.elements
        source = np.concatenate(pieces, axis=axis)
        _, gather, gather_modules = _permuted(b, out, source.shape, tuple(range(len(shape))), into=b.write(node.outputs[0]),
                                              source=source)  # fmt: skip
        calls, modules = calls + gather, modules + gather_modules
    if not calls:
        return None
    return _streaming(b, node.name, _ops([node]), "copy", calls, modules, 8 * math.prod(shape) * (1 + interleaved),
                      f"{len(copies)} input(s) copied into place{', then gathered' if interleaved else ''}")


def _place_slices(b: _Builder, node: Node, out: Ref, layout: kc.Layout) -> list[tuple[str, int, int]]:
    """Each input of a Concat placed as the next slice of `out`'s buffer, where its
    producer can write it there; the others' (value, offset, size), to be copied."""
    out_buffer = out.space - _VIRTUAL
    offset, copies = 0, []
    for value in node.inputs:
        size = b.graph.types[value].elements
        if size == 0:
            continue
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
    return copies


def _output_copy(b: _Builder, name: str) -> KernelGroup | None:
    """A graph output the arena does not hold (a constant, a graph input, a view of
    one) copied into it, as onnxruntime returns a copy; an empty one needs nothing."""
    size = b.graph.types[name].elements
    held = name in b.where and b.buffers[b._absolute(b.where[name][0], 0)[0]].input_index is None
    if held and not b.graph.is_constant(name):
        return None
    source = b.read(name)
    out = b.write(name)
    if size == 0:
        return None
    config = ew.ElementwiseConfig(1, size, 1, b.target.f32_lanes, ELEMENTWISE_VECTORS)
    call = Call(config.symbol, (Part((out, source), (0, 1)),))
    return _streaming(b, f"{name}_copy", [f"{name} (output copy)"], "copy", [call], b.modules(ew.generate, config),
                      8 * size, "the output copied out of the input or the weights")


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
                 for out, source in zip(node.outputs, maps) if out and b.graph.types[out].elements]  # fmt: skip
    except REFUSALS as err:
        raise _fail(node, str(err).removeprefix(f"node {node.name!r} ({node.op}): ")) from None
    calls, modules, moved = [], [], 0
    for out in node.outputs:
        if out and not b.graph.types[out].elements:
            b.write(out)
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


@reraised
def build_model(graph: Graph, profile: HardwareProfile, target: Target, fusion: str = "dp",
                threads: int | None = None, cache: KernelCache | None = None,
                plan: Plan | None = None) -> BuiltModel:  # fmt: skip
    """The kernels, program and memory plan of `graph` (see the module docstring) for
    the fusion `plan` (planned by `fusion` when not given); with a kernel cache, the
    models' choices and generated modules it holds are reused."""
    for name in graph.inputs + graph.outputs:
        if graph.types[name].dtype != "float32":
            kind = "input" if name in graph.inputs else "output"
            raise AutoconfigError(f"{kind} {name!r} is {graph.types[name].dtype}; only float32 models are built")
    threads = min(threads or int(profile.cores), int(profile.cores))
    b = _Builder(graph, profile, target, threads, cache)
    plan = plan or fusion_plan(graph, profile, fusion, b.decisions)
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
        group = _lower_named(b, [graph.nodes[v] for v in members])
        kernels += b.finish_step()  # layout transforms it reads, one step before it
        if group is not None:
            kernels.append(group)
            b.step += 1
    for name in dict.fromkeys(graph.outputs):
        group = _output_copy(b, name)
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
        outputs.append((name, b.resolve(Ref(_VIRTUAL + b.where[name][0], b.where[name][1])).offset))
    return BuiltModel(graph, profile, target, plan.strategy, threads, kernels, tuple(b.weights), arena, intermediate,
                      outputs)  # fmt: skip
