"""The builder that the lowering pass (`autoconfig.build`) and the operator families
(`autoconfig.families`) share: each value's buffer and layout, constants and scratch,
layout transforms queued before the kernel that reads them, the arena plan
(`Builder.place`), epilogue matching (`match_epilogue`), and the helpers every
family's lowering uses (`streaming` kernels' predictions, `permuted` gathers, windows).

Memory: every tensor between kernels, and every kernel's scratch, is a buffer with
a lifetime (the first and last kernel touching it); buffers are placed in one
arena, largest first, each at the lowest offset free for its whole lifetime — and,
with more than one thread, for as long after it as the traffic takes to push its
lines out of the other cores' caches (`Builder.cooling`). Graph outputs live to the
end and are copied out; graph inputs are read in place.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from autoconfig import movement
from autoconfig.decisions import ask, decisions_of
from autoconfig.errors import fail
from autoconfig.families import elementwise
from autoconfig.fusion.classify import along_channels, gated
from autoconfig.graph.ir import Graph, Node, TensorType
from autoconfig.lowering import reblock_call
from autoconfig.machine import Machine
from autoconfig.models import conv as conv_model
from autoconfig.profile import HardwareProfile
from autoconfig.runtime import Call, Part, Ref, split
from kernels import conv as kc
from kernels import elementwise as ew
from kernels import epilogue as ep
from kernels import movement as mv
from kernels.cache import KernelCache, generated
from kernels.emit import KernelModule, generate
from kernels.nchwc import Reblock
from kernels.runner import ARENA, FIRST_INPUT, WEIGHTS
from kernels.sizes import ceil_div
from kernels.target import Target

ALIGN = 16
"""Floats per cache line: every buffer and constant starts on one (vector loads that
split lines halve L1 bandwidth)."""


ELEMENTWISE_VECTORS = 2
"""Vectors per step of an elementwise kernel: two independent chains hide a load's
latency behind the previous vector's ops on every profiled machine."""


ELEMENTWISE_GROUP = "elementwise"
"""What `Builder.anchor_of` says of the nodes of a group of elementwise ops alone."""


COOLED_ARENA_GROWTH = 8
"""The most memory an arena planned with cooling (`Builder.cooling`) may take, as a
multiple of the plan without it: the torchvision models at two threads need up to 7x,
a bound that keeps many threads or large batches from planning no reuse at all."""


VIRTUAL = 1 << 20
"""Spaces from here on name buffers not placed yet (space - VIRTUAL = buffer id)."""


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
    flops: int = 0  # a matrix product's multiply-adds x 2 (0: not a product kernel)


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
    cooling_floats: int  # traffic before memory is reused (`Builder.cooling`)
    outputs: list[tuple[str, int]]  # graph output -> its offset in the arena (floats)
    conversions: tuple[tuple[int, int, int], ...] = ()  # (int64 input, arena offset in floats, elements)
    index_limits: tuple[int, ...] = ()  # per input: ids must lie in [-limit, limit) (0: not ids)
    near: tuple[Call, ...] = ()  # the program with memory reused at once, for cores that share their caches
    near_arena_floats: int = 0  # its arena

    @property
    def weights_bytes(self) -> int:
        return 4 * sum(int(w.size) for w in self.weights)


class Builder:
    """What every family's lowering reads and writes while a model is lowered: the
    graph, profile, target and threads; each value's buffer and layout; constants,
    scratch and the kernels that transform layouts; the models' choices, asked once;
    the lowering registry (`families`)."""

    def __init__(self, graph: Graph, profile: HardwareProfile, target: Target, threads: int,
                 cache: KernelCache | None, families: dict[str, Lowering] | None = None,
                 fast_winograd: bool = False):  # fmt: skip
        self.graph, self.profile, self.target, self.threads = graph, profile, target, threads
        self.fast_winograd = fast_winograd  # Winograd F(4,3) too (`models.conv.winograd_tiles`)
        self.cache = cache
        self.decisions = decisions_of(cache)
        self.machine = Machine.of(profile)
        self.model_bytes = graph.inference_bytes()  # does an inference outgrow the L3?
        self.buffers: list[Buffer] = []
        self.where: dict[str, tuple[int, int]] = {}  # value -> (buffer, offset)
        self.copied: dict[str, tuple[int, int, str]] = {}  # value -> (buffer, offset, layout) of a Concat's copy
        self.weights: list[np.ndarray] = []
        self.weight_floats = 0
        self.weights_at: dict[int, int] = {}  # step -> floats of constants its kernel reads
        self.step = 0  # the kernel being lowered
        self.read_roots: set[int] = set()  # buffers some kernel has read (`unread`)
        self.cooled = 0  # the cooling the arena plan used (`place`)
        self.consumers = graph.consumers()
        self.producer = {out: n for n in graph.nodes for out in n.outputs}
        self.choices: dict[tuple, object] = {}
        self.layouts: dict[str, kc.Layout] = {}  # values held channel-blocked (the others: NCHW)
        self.anchor_of: dict[str, str] = {}  # node -> its group's anchor op, ELEMENTWISE_GROUP or "" (build_model)
        self.group_ops: dict[str, list[Node]] = {}  # an anchor -> the other ops of its group (build_model)
        self.prologue_of: dict[str, Node] = {}  # an op of an anchor's prologue (before it in its group) -> the anchor
        self.absorbed: dict[str, set[str]] = {}  # a group's first node -> the nodes its product addresses
        self.addressed: dict[str, tuple] = {}  # a product -> the values it reads and writes through data
        # movement in its group, and their index maps (`fusion.addressing.maps_of`; build_model)
        self.pending: list[KernelGroup] = []  # layout transforms the kernel being lowered reads
        self.private_buffers: dict[int, int] = {}  # part -> its buffer (`private`)
        self.private_used: dict[int, int] = {}  # part -> floats of its buffer the kernel being lowered took
        self.transforming = False  # lowering a transform: its buffers are not the kernel's (finish_step)
        self.touched: set[int] = set()  # buffers the kernel being lowered uses
        self.transform_buffers: set[int] = set()  # buffers its transforms use
        self.families = families or {}  # op (or ELEMENTWISE_GROUP) -> its family's Lowering
        for i, name in enumerate(graph.inputs):
            self.where[name] = (self._buffer(graph.types[name].elements, input_index=i), 0)
        for name in graph.converted:  # written by the runner before the first kernel
            self.where[name] = (self._buffer(graph.types[name].elements), 0)

    def choose(self, model: Callable, shape: object, epilogue: ep.Epilogue, threads: int | None = None,
               **options: object):  # fmt: skip
        """`model.choose` for this build's profile, target and threads (or fewer), once per
        distinct (shape, epilogue, threads, options): a model's layers repeat
        (EfficientNet-B0's 82 convolutions and matmuls are 47 distinct ones), and its
        choice depends on nothing else; with a decision cache, once across builds."""
        threads = threads or self.threads
        key = (model, shape, epilogue, threads, *sorted(options.items()))
        if key not in self.choices:
            self.choices[key] = ask(self.decisions, model, shape, self.profile, self.target, threads, epilogue,
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
        self.touched, self.transform_buffers, self.private_used = set(), set(), {}
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
        self.weights_at[self.step] = self.weights_at.get(self.step, 0) + flat.size
        return Ref(WEIGHTS, offset)

    def scratch(self, count: int) -> Ref:
        """`Buffers.scratch`: a buffer for the current kernel only."""
        return Ref(VIRTUAL + self._buffer(max(count, 1)))

    def private(self, count: int, part: int) -> Ref:
        """`Buffers.private`: the next `count` floats of part `part`'s buffer, which lives
        through the whole run and holds nothing but that part's scratch, the same memory
        in every kernel."""
        if part not in self.private_buffers:
            self.buffers.append(Buffer(0, 0, 0))
            self.private_buffers[part] = len(self.buffers) - 1
        buffer, offset = self.buffers[self.private_buffers[part]], self.private_used.get(part, 0)
        self.private_used[part] = offset + aligned(max(count, 1))
        buffer.size = max(buffer.size, self.private_used[part])
        buffer.last = max(buffer.last, self.step + 1)
        return Ref(VIRTUAL + self.private_buffers[part], offset)

    def read(self, value: str, layout: kc.Layout = "nchw") -> Ref:
        """Where the current kernel reads `value` in `layout` (a constant is added to the
        weights; a value held in the other layout is transformed first, once)."""
        if self.graph.is_constant(value):
            return self.constant(in_layout(self.graph.constants[value], layout, self.target.f32_lanes))
        if self.layout(value) != layout:
            value = self._transformed(value, layout)
        buffer, offset = self.where[value]
        root = self._absolute(buffer, 0)[0]
        self.buffers[root].last = max(self.buffers[root].last, self.step)
        self.read_roots.add(root)
        self._touch(root)
        return Ref(VIRTUAL + buffer, offset)

    def unread(self, value: str) -> bool:
        """Whether no kernel has read `value` since the kernels that wrote it, or it is
        yet to be written (a later reader finds its lines shared, in its own caches)."""
        return value not in self.where or self._absolute(self.where[value][0], 0)[0] not in self.read_roots

    def write(self, value: str, layout: kc.Layout = "nchw") -> Ref:
        """A new buffer for `value`, written by the current kernel in `layout`."""
        self.where[value] = (self._buffer(self.graph.types[value].elements), 0)
        if layout != "nchw":
            self.layouts[value] = layout
        return Ref(VIRTUAL + self.where[value][0])

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
            call = reblock_call(config, Ref(VIRTUAL + self.where[name][0]), x, threads)
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
        y = Ref(VIRTUAL + self.where[name][0])
        call = Call(move.config.symbol, tuple(Part((y, x, tables), r) for r in split(move.config.rows, threads)))
        self.pending.append(streaming(self, f"{value}_broadcast", [f"{value} (broadcast to {shape})"], "gather",
                                       [call], self.modules(mv.generate, move.config), 8 * math.prod(shape),
                                       f"broadcast to {'x'.join(map(str, shape))}"))  # fmt: skip
        return name

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

    def place(self, outputs: list[str], pinned: list[str], cool: bool = True) -> int:
        """Give every arena buffer its offset; returns the arena's size in floats. The
        buffers of `pinned` values (those the runner reads or writes: outputs, converted
        inputs) come first, never sharing memory, so that they lie at the same offsets
        in every placement. `cool`: with the cooling (`cooling`), halved while it would
        take more than COOLED_ARENA_GROWTH times the memory of a plan without it
        (`cooled` is what the plan used); else none, memory reused at once."""
        for name in outputs:
            root = self._absolute(self.where[name][0], 0)[0]
            self.buffers[root].last = self.step  # copied out after the last kernel
        fixed = {self._absolute(self.where[name][0], 0)[0] for name in pinned}
        roots = [i for i, b in enumerate(self.buffers) if b.inside is None and b.input_index is None]
        tight, self.cooled = self._placed(roots, fixed, 0), self.cooling() if cool else 0
        while self.cooled and self._placed(roots, fixed, self.cooled) > COOLED_ARENA_GROWTH * tight:
            self.cooled //= 2
        return self._placed(roots, fixed, self.cooled)

    def _placed(self, roots: list[int], fixed: set[int], cooling: int) -> int:
        """Place the buffers `roots`, those of `fixed` first, then largest first, each
        at the lowest offset where it is `_apart` from every buffer placed (the fixed
        ones from each other never); the arena's size in floats."""
        apart = self._apart(roots, cooling)
        placed: list[tuple[int, Buffer]] = []
        for i in sorted(roots, key=lambda i: (i not in fixed, -self.buffers[i].size)):
            b = self.buffers[i]
            busy = sorted((p.offset, p.offset + aligned(p.size)) for j, p in placed
                          if not apart(p, b) or (i in fixed and j in fixed))  # fmt: skip
            offset = 0
            for start, end in busy:
                if offset + aligned(b.size) <= start:
                    break
                offset = max(offset, end)
            b.offset = offset
            placed.append((i, b))
        return max((p.offset + aligned(p.size) for _, p in placed), default=0)

    def cooling(self) -> int:
        """Floats of traffic after a buffer's last use before another may take its
        memory: none at one thread; with more, the last-level cache for each thread. A
        line that another core still holds (it read the tensor) costs its writer an
        invalidation; writes over such lines, back to back, run many times slower than
        over the writer's own (docs/calibration.md), and a core's lines leave its caches
        only when its own traffic, a thread's share, has filled them."""
        levels = [c for c in self.profile.caches if c.kind != "instruction"]
        return 0 if self.threads == 1 or not levels else int(max(c.size.value for c in levels)) // 4 * self.threads

    def _apart(self, roots: list[int], cooling: int) -> Callable[[Buffer, Buffer], bool]:
        """Whether two buffers may share memory: their lifetimes do not overlap, and the
        traffic between them — either way round, through the next run — is at least
        `cooling` floats. A kernel's traffic: the buffers it writes first or reads last, and
        the constants it reads."""
        steps = self.step + 1
        traffic = [float(self.weights_at.get(s, 0)) for s in range(steps)]
        for i in roots:
            b = self.buffers[i]
            for s in {b.first, b.last}:
                traffic[s] += b.size
        clock = [0.0, *np.cumsum(traffic)]  # clock[s]: traffic before step s

        def apart(p: Buffer, b: Buffer) -> bool:
            if p.first <= b.last and b.first <= p.last:
                return False
            early, late = (p, b) if p.last < b.first else (b, p)
            between = clock[late.first] - clock[early.last + 1]
            around = clock[steps] - clock[late.last + 1] + clock[early.first]
            return min(between, around) >= cooling

        return apart

    def resolve(self, ref: Ref) -> Ref:
        """A ref to a virtual buffer as a ref into the arena or an input."""
        if ref.space < VIRTUAL:
            return ref
        buffer, offset = self._absolute(ref.space - VIRTUAL, ref.offset)
        b = self.buffers[buffer]
        if b.input_index is not None:
            return Ref(FIRST_INPUT + b.input_index, offset)
        return Ref(ARENA, b.offset + offset)


def in_layout(array: np.ndarray, layout: kc.Layout, lanes: int) -> np.ndarray:
    """A constant NCHW tensor's values in `layout` (NCHW[c] in blocks of `lanes`
    channels, or NHWC); anything else as it is."""
    if layout == "nchw" or array.ndim != 4:
        return array
    if layout == "nhwc":
        return array.transpose(0, 2, 3, 1)
    n, c, h, w = array.shape
    return array.reshape(n, c // lanes, lanes, h, w).transpose(0, 1, 3, 4, 2)


def aligned(size: int) -> int:
    return size + -size % ALIGN


def ops_of(nodes: list[Node]) -> list[str]:
    return [f"{n.name} ({n.op})" for n in nodes]


def streaming(b: Builder, name: str, ops: list[str], kind: str, calls: list[Call], modules: list[KernelModule],
               moved: int, summary: str, loads: int = 0, vector_ops: int = 0) -> KernelGroup:  # fmt: skip
    """A kernel the models do not plan (pooling, softmax, elementwise, copies): it
    streams its bytes once, so its prediction is their traffic time at the bandwidth
    of the level that holds them, plus the call — or, where it reads cached data many
    times over (a pooling window's taps: `loads` vector loads per thread, a
    line-crossing one counted as two), those loads at the profile's L1 load rate if
    they take longer (bandwidth alone misses a wide window's loads by far), or its
    `vector_ops` per thread (a softmax's exponents) at the FMA issue rate if those do."""
    rate = b.machine.vector_loads_per_ns()
    traffic, reading, computing = b.machine.traffic_ns(moved), loads / rate, vector_ops / b.machine.fma_per_ns()
    predicted = max(traffic, reading, computing) + b.machine.call_ns
    if computing > max(traffic, reading):
        bound = (f"compute-bound, predicted {predicted / 1e3:.1f} µs = {vector_ops} vector ops per thread at "
                 f"{b.machine.fma_per_ns():.2f}/ns")  # fmt: skip
    elif reading > traffic:
        bound = (f"load-bound, predicted {predicted / 1e3:.1f} µs = {loads} vector loads per thread "
                 f"(line-crossing ones counted twice) at {rate:.2f}/ns")  # fmt: skip
    else:
        bound = (f"bandwidth-bound, predicted {predicted / 1e3:.1f} µs = {moved / 1e3:.1f} kB moved at the "
                 "bandwidth of the level holding them")  # fmt: skip
    why = f"{kind} {summary}: {bound} + {b.machine.call_ns / 1e3:.1f} µs call"
    return KernelGroup(name, ops, kind, calls, modules, predicted, why, summary)


def elementwise_kernel(b: Builder, name: str, ops: list[str], x: Ref, y: Ref, shape: tuple[int, ...],
                        epilogue: ep.Epilogue, operands: list[Ref], layout: kc.Layout = "nchw") -> KernelGroup:  # fmt: skip
    """One `kernels.elementwise` kernel over planes (`plane_axis`; channel blocks of an
    NCHW[c] tensor, pixels of an NHWC one)."""
    lanes = b.target.f32_lanes
    if len(shape) == 4:
        n, channels, h, w = shape
        planes = {"nchw": n * channels, "nchwc": n * channels // lanes, "nhwc": n * h * w}[layout]
    else:
        planes = channels = shape[0] if shape else 1
    plane_size = math.prod(shape) // planes
    if layout == "nchw" and channels == 1 and planes < b.threads:  # one per-channel value for all: any cut
        pieces = _pieces(plane_size, lanes, ceil_div(b.threads, planes))
        planes, plane_size = planes * pieces, plane_size // pieces
    config = ew.ElementwiseConfig(planes, plane_size, channels, lanes, ELEMENTWISE_VECTORS, epilogue, layout)
    threads = min(b.threads, planes)
    call = Call(config.symbol, tuple(Part((y, x, *operands), r) for r in split(planes, threads)))
    moved = 4 * planes * plane_size * (2 + sum(op.operand == "output" for op in epilogue))
    vector_ops = ceil_div(planes, threads) * ceil_div(plane_size, lanes) * ep.vector_ops(epilogue)
    return streaming(b, name, ops, "elementwise", [call], b.modules(ew.generate, config), moved,
                      f"{ep.describe(epilogue)} on {planes} planes of {plane_size}, {threads} thread(s)",
                      vector_ops=vector_ops)


def copy_call(b: Builder, out: Ref, x: Ref, size: int) -> tuple[Call, list[KernelModule]]:
    """`size` floats copied from `x` to `out`, in equal pieces for every thread
    (`_pieces`), with the modules it runs."""
    pieces = _pieces(size, b.target.f32_lanes, b.threads)
    config = ew.ElementwiseConfig(pieces, size // pieces, 1, b.target.f32_lanes, ELEMENTWISE_VECTORS)
    threads = min(b.threads, pieces)
    return Call(config.symbol, tuple(Part((out, x), r) for r in split(pieces, threads))), b.modules(ew.generate, config)


def _pieces(size: int, lanes: int, wanted: int) -> int:
    """How many equal pieces to cut a plane of `size` floats into so the threads share it:
    the fewest from `wanted` to `wanted` x `lanes`, each a whole number of vectors where
    that can be, and at least one vector; 1 if none."""
    fits = [d for d in range(wanted, wanted * lanes + 1) if size % d == 0 and size // d >= lanes]
    return next((d for d in fits if size // d % lanes == 0), fits[0] if fits else 1)


def plane_axis(shape: tuple[int, ...]) -> int:
    """The axis an elementwise kernel's per-channel operand varies along: NCHW's
    channels, else the first axis (its planes are then the first axis' slices)."""
    return 1 if len(shape) == 4 else 0


def permuted(b: Builder, x: Ref, shape: tuple[int, ...], perm: tuple[int, ...], into: Ref | None = None,
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
    if move.view_offset is not None:
        call, modules = copy_call(b, out, x, size)
        return out, [call], modules
    tables = b.constant(move.tables.view(np.float32))
    threads = min(b.threads, move.config.rows)
    call = Call(move.config.symbol, tuple(Part((out, x, tables), r) for r in split(move.config.rows, threads)))
    return out, [call], b.modules(mv.generate, move.config)


@dataclass
class Epilogue:
    """A matched chain: its ops, each op's operand (in op order: a constant's values, or
    the name of a value; `refs` places them), the value it ends on. Matching changes
    nothing in the build, so a chain can be matched ahead of its kernel."""

    ops: list[ep.EpilogueOp]
    operands: list[np.ndarray | str]
    end: str

    def refs(self, b: Builder, layout: kc.Layout = "nchw") -> list[Ref]:
        """The operands' refs: constants added to the weights, tensors of the output's
        shape read in the output's `layout`, per-channel tensors (one value per channel:
        either layout) in NCHW."""
        reading = [op for op in self.ops if op.operand]
        return [b.read(o, layout if op.operand == "output" else "nchw") if isinstance(o, str) else b.constant(o)
                for op, o in zip(reading, self.operands, strict=True)]  # fmt: skip


def match_epilogue(b: Builder, start: str, nodes: list[Node], channel_axis: int,
                   out_shape: tuple[int, ...] | None = None, per_batch: bool = False) -> Epilogue:  # fmt: skip
    """`nodes` (a group's elementwise ops, in order) as an epilogue on `start` (seen as
    broadcast to `out_shape` if given): each op takes the chain's current value and at
    most one operand. With `per_batch` (a kernel per matrix of a batch of products), an
    operand of the output's matrices broadcast over the batch axes is kept as it is
    (`_operand_of`)."""
    out_shape = b.graph.types[start].shape if out_shape is None else tuple(out_shape)
    remaining = list(nodes)
    ops: list[ep.EpilogueOp] = []
    operands: list[np.ndarray | str] = []
    current = start
    while remaining:
        users = [n for n in remaining if current in n.inputs]
        if not users:
            raise fail(remaining[0], f"not on the chain of elementwise ops after {current!r}")
        gates = {u.op for u in users}
        gate = gated(b.graph, current, users)
        if gate is not None and all(n in remaining for n in gate[0]):
            used, op = gate
            ops.append(op)
        elif len(users) == 1 and users[0].op == "BatchNormalization":
            used = [users[0]]
            for op, values in _batchnorm_affine(b, users[0], out_shape, channel_axis):
                ops.append(op)
                operands.append(values)
        elif len(users) == 1 and users[0].op in elementwise.UNARY:
            used = [users[0]]
            ops.append(elementwise.epilogue_op(users[0], b.graph))
        elif len(users) == 1 and users[0].op == "Mul" and users[0].inputs == [current, current]:
            used = [users[0]]
            ops.append(ep.EpilogueOp("square"))
        elif len(users) == 1 and users[0].op in elementwise.BINARY:
            used = [users[0]]
            op, operand = _binary(b, users[0], current, out_shape, channel_axis, per_batch)
            ops.append(op)
            if op.operand:
                operands.append(operand)
        elif len(users) == 1 and users[0].op == "Where":
            used = [users[0]]
            op, operand = _selection(b, users[0], current, out_shape, per_batch)
            ops.append(op)
            if op.operand:
                operands.append(operand)
        else:
            raise fail(users[0], f"{' and '.join(sorted(gates))} on one value is not an epilogue the "
                                  "code generator emits")  # fmt: skip
        for n in used:
            remaining.remove(n)
        current = used[-1].outputs[0]
        if b.graph.types[current].shape != out_shape:
            raise fail(used[-1], f"changes the shape {out_shape} of the chain")
    return Epilogue(ops, operands, current)


def _batchnorm_affine(b: Builder, node: Node, out_shape: tuple[int, ...],
                      channel_axis: int) -> list[tuple[ep.EpilogueOp, np.ndarray | str]]:  # fmt: skip
    """An inference BatchNormalization as a per-channel scale, then a bias; where its
    channels (axis 1) are not the kernel's (a BatchNorm1d over the columns of rows of
    tokens, in an elementwise kernel over rows), as the product and sum with those
    constants broadcast to the output."""
    g = b.graph
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise fail(node, "BatchNormalization in training mode is not generated")
    if not all(g.is_constant(i) for i in node.inputs[1:5]) or len(out_shape) < 2:
        raise fail(node, "BatchNormalization needs constant statistics and a channel axis")
    scale, bias, mean, var = (np.asarray(g.constants[i], np.float64) for i in node.inputs[1:5])
    factor = scale / np.sqrt(var + node.attrs.get("epsilon", 1e-5))
    shape = [1] * len(out_shape)
    shape[1] = -1
    pieces = [values.astype(np.float32).reshape(shape) for values in (factor, bias - mean * factor)]
    along = [per_channel(values, out_shape, channel_axis) for values in pieces]
    if all(values is not None for values in along):
        return [(ep.scale(), along[0]), (ep.bias(), along[1])]
    names = []
    for what, values in zip(("scale", "shift"), pieces):
        name = f"{node.name}.{what}"
        g.constants[name], g.types[name] = values, TensorType(values.shape, "float32")
        names.append(b.broadcast(name, out_shape))
    return [(ep.EpilogueOp("product"), names[0]), (ep.EpilogueOp("residual"), names[1])]


def _binary(b: Builder, node: Node, current: str, out_shape: tuple[int, ...], channel_axis: int,
            per_batch: bool) -> tuple[ep.EpilogueOp, np.ndarray | str | None]:  # fmt: skip
    """A binary op (`elementwise.BINARY`) of the chain's value and one other operand, as
    an epilogue op: by one constant value, an affine op (`_scalar_affine`); Add/Sub/Mul/Div
    by a constant per channel, its values; anything else, the name of a tensor of the
    output's shape (or, per batch, of its matrices: `_operand_of`)."""
    others = [i for i in node.inputs if i != current]
    if len(node.inputs) != 2:
        raise fail(node, f"{node.op} of {len(node.inputs)} inputs is not generated (two only)")
    if len(others) != 1:
        raise fail(node, f"{node.op} of a value with itself is not generated")
    other, first = others[0], node.inputs.index(current) == 0
    shape = b.graph.types[other].shape
    channels = out_shape[channel_axis] if out_shape else 1
    if (affine := _scalar_affine(b, node, other, first)) is not None:
        return affine, None
    if b.graph.is_constant(other) and (first or node.op in ("Add", "Mul")) and node.op in ("Add", "Sub", "Mul", "Div"):
        values = per_channel(np.asarray(b.graph.constants[other], np.float32), out_shape, channel_axis)
        if values is not None:
            values = -values if node.op == "Sub" else 1 / values if node.op == "Div" else values
            kind = "bias" if node.op in ("Add", "Sub") else "scale"
            return ep.EpilogueOp(kind), np.broadcast_to(values, (channels,))
    if tuple(shape) != tuple(out_shape) and not b.graph.is_constant(other) and node.op in ("Add", "Mul") \
            and along_channels(shape, out_shape, channel_axis):  # fmt: skip
        return ep.EpilogueOp("bias" if node.op == "Add" else "scale"), other
    return ep.EpilogueOp(elementwise.BINARY[node.op][0 if first else 1]), _operand_of(b, other, out_shape, per_batch)


def _scalar_affine(b: Builder, node: Node, other: str, first: bool) -> ep.EpilogueOp | None:
    """Add, Sub or Mul by one constant value (Div by one, the chain's value first) as
    alpha·y + beta: no operand to read, so a kernel whose epilogue takes none (softmax)
    takes it too."""
    if not b.graph.is_constant(other) or b.graph.constants[other].size != 1:
        return None
    c = float(np.asarray(b.graph.constants[other], np.float32).reshape(-1)[0])
    if node.op == "Add":
        return ep.EpilogueOp("affine", alpha=1.0, beta=c)
    if node.op == "Sub":
        return ep.EpilogueOp("affine", alpha=1.0, beta=-c) if first else ep.EpilogueOp("affine", alpha=-1.0, beta=c)
    if node.op == "Mul" or (node.op == "Div" and first):
        return ep.EpilogueOp("affine", alpha=c if node.op == "Mul" else float(np.float32(1) / np.float32(c)), beta=0.0)
    return None


def _selection(b: Builder, node: Node, current: str, out_shape: tuple[int, ...],
               per_batch: bool) -> tuple[ep.EpilogueOp, str | None]:  # fmt: skip
    """Where(condition, x, y) with one branch a single constant, as an epilogue op on
    the chain's value (the condition or a branch); the other computed input is read as
    a tensor of the output's shape (`_operand_of`)."""
    condition, x, y = node.inputs
    scalar = {v: float(np.asarray(b.graph.constants[v]).reshape(-1)[0]) for v in (x, y)
              if b.graph.is_constant(v) and b.graph.constants[v].size == 1}  # fmt: skip
    if len(scalar) == 2 and current == condition:
        return ep.EpilogueOp("choose", alpha=scalar[x], beta=scalar[y]), None
    if len(scalar) != 1 or len({condition, x, y}) != 3:
        raise fail(node, "a Where without a single constant for one branch is not generated")
    (constant, value), = scalar.items()
    tensor = next(v for v in (condition, x, y) if v not in (current, constant))
    kind = {(condition, y): "then_else", (condition, x): "else_then", (x, y): "keep_where",
            (y, x): "replace_where"}[current, constant]  # fmt: skip
    return ep.EpilogueOp(kind, alpha=value), _operand_of(b, tensor, out_shape, per_batch)


def _operand_of(b: Builder, value: str, out_shape: tuple[int, ...], per_batch: bool) -> str:
    """An epilogue's operand `value` as the kernel reads it: broadcast to `out_shape`
    where it is not of it; with `per_batch`, one of the output's matrices broadcast
    over the batch axes (a mask per window, a bias per head) as it is, each matrix of
    the batch reading its own (`products.batch_offsets`)."""
    shape = tuple(b.graph.types[value].shape)
    if shape == tuple(out_shape) or (per_batch and _batched_matrices(shape, out_shape)):
        return value
    return b.broadcast(value, out_shape)


def _batched_matrices(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a tensor of `shape` holds matrices of `out_shape`'s last two axes that
    broadcast over its axes before them."""
    return (2 <= len(shape) <= len(out_shape) and tuple(shape[-2:]) == tuple(out_shape[-2:])
            and all(d in (1, o) for d, o in zip(shape[::-1], out_shape[::-1])))


def per_channel(array: np.ndarray, out_shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A constant's values per channel (a scalar: one value), or None when it varies
    along another axis."""
    if array.size == 1 or along_channels(array.shape, out_shape, axis):
        return array.reshape(-1)
    return None


def reads_no_blocks(b: Builder, reader: Node, value: str) -> bool:
    """A family whose kernels read NCHW only: a blocked tensor is transformed back first."""
    return False


def reads_any_layout(b: Builder, reader: Node, value: str) -> bool:
    """A family whose kernels read NCHW, NCHW[c] and NHWC alike (elementwise, global pools)."""
    return True


@dataclass(frozen=True)
class Lowering:
    """One operator's kernel as its family declares it: `lower(b, node, after)` makes the
    kernel of the group the node anchors (`after`: the group's epilogue ops; empty for
    data movement; None where the group rule lowers it, as for elementwise groups), and
    the layout plan (`autoconfig.layouts`) asks how the family's kernels read a tensor
    held channel-blocked: whether they can (`reads_blocked(b, reader, value)`), at
    what cost (`reading_ns(b, reader, value, layout)`; None: at one cost), and whether
    they may write one (`writes_blocks`: a Concat of their outputs then takes blocks)."""

    lower: Callable[[Builder, Node, list[Node]], KernelGroup | None] | None
    reads_blocked: Callable[[Builder, Node, str], bool] = reads_no_blocks
    reading_ns: Callable[[Builder, Node, str, str], float] | None = None
    writes_blocks: bool = False
