"""The convolution and pooling API: compile one layer, with its weights, for this
machine, and call it on NCHW float32 numpy arrays.

``compile_conv2d(input_shape, weight, ...)`` takes ONNX Conv's attributes; the
convolution model picks the algorithm and its parameters from the profile (or
`config=` forces a plan), the kernels are generated and built, and the weights are
kept in the layout the kernels read. ``compile_pool2d`` does the same for MaxPool,
AveragePool, GlobalAveragePool and GlobalMaxPool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autoconfig import checks
from autoconfig.errors import AutoconfigError, reraised
from autoconfig.graph.ir import Graph, Node
from autoconfig.graph.windows import window_pads, window_strides
from autoconfig.machine import Machine
from autoconfig.models.conv import ConvChoice, ConvPlan, choose, predict, validate_plan
from autoconfig.models.cost import Prediction
from autoconfig.resolve import resolve
from autoconfig.lowering import LayerBuffers, conv_calls, pool_calls, reblock_call
from autoconfig.matmul import b_staging
from autoconfig.runtime import Call, Program, Ref, aligned_empty
from kernels import epilogue as ep
from kernels import pool as pl
from kernels.conv import ConvShape, input_layout_of, layout_of
from kernels.emit import KernelModule, generate
from kernels.nchwc import Reblock
from autoconfig.probe.host import this_host
from kernels.library import build_library
from kernels.lower import start_backends
from kernels.target import Target


def _pair(name: str, value: object, default: int) -> tuple[int, int]:
    value = (default, default) if value is None else value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise AutoconfigError(f"{name} must be two integers (height, width), got {value!r}")
    return (checks.size(f"{name}[0]", value[0]), checks.size(f"{name}[1]", value[1]))


def _pads(value: object) -> tuple[int, int, int, int]:
    value = (0, 0, 0, 0) if value is None else value
    if not isinstance(value, (tuple, list)) or len(value) != 4:
        raise AutoconfigError(f"pads must be four integers (top, left, bottom, right), got {value!r}")
    for p in value:
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0:
            raise AutoconfigError(f"pads must be integers >= 0, got {value!r}")
    return tuple(int(p) for p in value)


def _input_shape(value: object) -> tuple[int, int, int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 4:
        raise AutoconfigError(f"input_shape must be (N, C, H, W), got {value!r}")
    return tuple(checks.size(name, v) for name, v in zip("NCHW", value))


class CompiledConv:
    """``f(x[, residual][, out=y]) -> y`` for one convolution layer: x of the compiled
    input shape (NCHW float32), a residual of the output's shape when the epilogue adds
    one, `out` a y to write instead of a new one."""

    def __init__(self, plan: ConvPlan, target: Target, prediction: Prediction | None, choice: ConvChoice | None,
                 weight: np.ndarray, channel_operands: dict[int, np.ndarray]):  # fmt: skip
        self.plan, self.config, self.shape, self.target = plan, plan.config, plan.config.shape, target
        self.prediction, self.choice = prediction, choice
        operands = ep.operand_names(self.config.epilogue)
        self._residuals = [i for i, _, kind in operands if kind == "output"]
        call_spaces = 2 + len(self._residuals)  # x, y, residuals
        buffers = LayerBuffers(call_spaces)
        boundary = _NchwBoundary(plan, buffers)
        x = boundary.convert(Ref(0), self.shape.input_shape, input_layout_of(self.config))
        y = boundary.convert(Ref(1), self.shape.output_shape, layout_of(self.config), output=True)
        residual_space = {i: boundary.convert(Ref(2 + k), self.shape.output_shape, layout_of(self.config))
                          for k, i in enumerate(self._residuals)}  # fmt: skip
        refs = [residual_space[i] if kind == "output" else buffers.constant(channel_operands[i])
                for i, _, kind in operands]  # fmt: skip
        calls = boundary.before + conv_calls(plan, x, y, weight, refs, buffers) + boundary.after
        self.library = build_library(generate(self.config, target) + boundary.modules(target), this_host())
        self._program = Program(self.library, calls, buffers.arrays, call_spaces)
        # a 1x1 product reads the image in place as its B
        pointwise = self.config.algorithm == "gemm1x1"
        self._stage_x = b_staging(self.config.gemm, self.shape.input_shape) if pointwise else None

    def __call__(self, x: np.ndarray, *residuals: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The layer on x (then its residual tensors), into `out` when given."""
        s = self.shape
        x = checks.float32_array("x", x, s.input_shape)
        if len(residuals) != len(self._residuals):
            raise AutoconfigError(f"this convolution takes {len(self._residuals)} residual tensor(s) of shape "
                                  f"{s.output_shape} after x, got {len(residuals)}")  # fmt: skip
        residuals = [checks.float32_array("residual", r, s.output_shape) for r in residuals]
        y = _output(out, s.output_shape, {"x": x, **{f"residual {i}": r for i, r in enumerate(residuals)}})
        if self._stage_x is not None:
            x = self._stage_x(x)
        self._program(x, y, *residuals)
        return y

    def explain(self) -> str:
        """Why this configuration: the model's parameters and predicted cost terms."""
        if self.choice is not None:
            return self.choice.explain()
        p = self.prediction
        head = f"conv {self.shape.describe()} on {self.target.name}: forced {self.config.algorithm}"
        if p is None:
            return f"{head}, no prediction: the profile has no {self.config.lanes * 32}-bit FMA figures"
        return "\n".join([f"{head}, predicted {p.total_ns / 1e3:.1f} µs = {p.gflops:.1f} GFLOP/s", *p.lines()])


class _NchwBoundary:
    """A layer on its own takes and returns NCHW: a plan reading or writing channel
    blocks (`kernels.nchwc`) gets its operands transformed into scratch buffers before
    it runs, and its output transformed back after."""

    def __init__(self, plan: ConvPlan, buffers: LayerBuffers):
        self.plan, self.buffers = plan, buffers
        self.before: list[Call] = []
        self.after: list[Call] = []
        self.configs: dict[str, Reblock] = {}

    def convert(self, ref: Ref, shape: tuple[int, ...], layout: str, output: bool = False) -> Ref:
        """Where the kernel reads the NCHW tensor at `ref` in `layout` (or, for its
        `output`, writes what is then transformed into `ref`)."""
        if layout == "nchw":
            return ref
        blocked = self.buffers.scratch(math.prod(shape))
        config = Reblock.of(shape, self.plan.config.lanes, to_blocked=not output, layout=layout)
        self.configs[config.symbol] = config
        if output:
            self.after.append(reblock_call(config, ref, blocked, self.plan.threads))
        else:
            self.before.append(reblock_call(config, blocked, ref, self.plan.threads))
        return blocked

    def modules(self, target: Target) -> list[KernelModule]:
        """The transforms' kernels."""
        return [m for config in self.configs.values() for m in generate(config, target)]


def conv_shape(input_shape: Sequence[int], weight_shape: Sequence[int], *, strides=None, pads=None,
               dilations=None, group: int = 1) -> ConvShape:  # fmt: skip
    """The layer's shape from ONNX-style arguments, checked."""
    n, c, h, w = _input_shape(input_shape)
    if not isinstance(weight_shape, (tuple, list)) or len(weight_shape) != 4:
        raise AutoconfigError(f"the weight must be 4-D (Cout, C/group, KH, KW), got shape {tuple(weight_shape)}")
    cout, cin_g, kh, kw = (checks.size(name, v) for name, v in zip(("Cout", "C/group", "KH", "KW"), weight_shape))
    group = checks.size("group", group)
    if c % group or cin_g * group != c:
        raise AutoconfigError(f"the weight's {cin_g} input channels per group x group={group} must equal "
                              f"the input's {c} channels")  # fmt: skip
    return ConvShape(n, c, h, w, cout, (kh, kw), _pair("strides", strides, 1), _pads(pads),
                     _pair("dilations", dilations, 1), group)  # fmt: skip


def node_shape(graph: Graph, node: Node) -> ConvShape:
    """A 2-D Conv node's shape, from its input's and weight's shapes and its attributes."""
    weight = graph.types[node.inputs[1]].shape
    strides = tuple(node.attrs.get("strides", (1, 1)))
    dilations = tuple(node.attrs.get("dilations", (1, 1)))
    pads = window_pads(node, graph, weight[2:], strides, dilations)
    return conv_shape(graph.types[node.inputs[0]].shape, weight, strides=window_strides(node, graph, strides, pads),
                      pads=pads, dilations=dilations, group=node.attrs.get("group", 1))  # fmt: skip


@reraised
def plan_conv2d(input_shape, weight_shape, *, strides=None, pads=None, dilations=None, group=1,
                epilogue: ep.Epilogue = (), profile=None, target=None, threads=None) -> ConvChoice:  # fmt: skip
    """The model's choice for a layer, without building anything, among plans in every
    layout (`.at_nchw_boundary()`: with the transforms a channel-blocked plan needs to
    take and return NCHW, what `compile_conv2d` runs for a layer on its own)."""
    shape = conv_shape(input_shape, weight_shape, strides=strides, pads=pads, dilations=dilations, group=group)
    threads = checks.threads(threads)
    prof, tgt = resolve(profile, target)
    return choose(shape, prof, tgt, checks.threads_within(threads, prof), tuple(epilogue))


@reraised
def compile_conv2d(input_shape, weight: np.ndarray, bias: np.ndarray | None = None, *, strides=None, pads=None,
                   dilations=None, group: int = 1, epilogue: ep.Epilogue = (),
                   channel_values: Sequence[np.ndarray] = (), profile=None, target=None,
                   threads: int | None = None, config: ConvPlan | None = None) -> CompiledConv:  # fmt: skip
    """Compile one ONNX Conv layer with its weights: x[N, C, H, W] → y[N, Cout, OH, OW].

    `pads` are (top, left, bottom, right); `bias` (Cout values) is added first, then the
    `epilogue` ops (`kernels.epilogue`): a per-channel op (bias, scale: e.g. a folded
    BatchNorm) takes its Cout values from `channel_values`, in order; a residual op
    takes its tensor at call time.
    The convolution model picks the algorithm and its parameters from the profile
    (the host's when None); `config` forces a plan instead (a `ConvPlan`, validated for
    the target); `threads` caps the threads the model may use.
    """
    if not isinstance(weight, np.ndarray) or weight.dtype != np.float32:
        raise AutoconfigError(f"weight must be a float32 numpy array, got "
                              f"{weight.dtype if isinstance(weight, np.ndarray) else type(weight).__name__}")
    shape = conv_shape(input_shape, weight.shape, strides=strides, pads=pads, dilations=dilations, group=group)
    epilogue = ((ep.bias(),) if bias is not None else ()) + tuple(epilogue)
    values = ([bias] if bias is not None else []) + list(channel_values)
    wanted = [(i, name) for i, name, kind in ep.operand_names(epilogue) if kind == "channel"]
    if len(values) != len(wanted):
        raise AutoconfigError(f"the epilogue has {len(wanted) - (bias is not None)} per-channel op(s) "
                              f"({', '.join(op.kind for op in epilogue if op.operand == 'channel') or 'none'} "
                              f"beyond bias=) but {len(channel_values)} channel_values were given")  # fmt: skip
    channel = {i: checks.float32_array(name, v, (shape.out_channels,)) for (i, name), v in zip(wanted, values)}
    threads = checks.threads(threads)
    prof, tgt = resolve(profile, target)
    threads = checks.threads_within(threads, prof)
    choice = None
    start_backends()  # an LLVM child starts while the model decides (a cached kernel leaves it idle)
    if config is None:  # a layer on its own reads and writes NCHW: blocked plans pay the transforms
        choice = choose(shape, prof, tgt, threads, epilogue).at_nchw_boundary()
        plan = choice.best.plan
    else:
        if not isinstance(config, ConvPlan):
            raise AutoconfigError(f"config must be a ConvPlan, got {type(config).__name__}")
        if config.shape != shape:
            raise AutoconfigError(f"the forced config is for {config.shape.describe()}, not {shape.describe()}")
        if config.config.epilogue != epilogue:
            raise AutoconfigError(f"the forced config's epilogue is {ep.describe(config.config.epilogue)}, "
                                  f"the layer's {ep.describe(epilogue)}")  # fmt: skip
        plan = config
    validate_plan(plan, tgt)
    prediction = choice.best if choice else None
    if choice is None and plan.config.lanes in Machine.of(prof).fma_by_lanes:
        prediction = predict(plan, prof)  # a forced width the profile never measured has none
    return CompiledConv(plan, tgt, prediction, choice, weight, channel)


class CompiledPool:
    """``f(x[, out=y]) -> y`` for one pooling layer on NCHW float32 arrays (into `out`
    when given)."""

    def __init__(self, config: pl.PoolConfig, target: Target, threads: int):
        self.config, self.shape, self.target = config, config.shape, target
        self.library = build_library(pl.generate(config, target), this_host())
        buffers = LayerBuffers(2)
        calls = pool_calls(config, threads, Ref(0), Ref(1), buffers)
        self._program = Program(self.library, calls, buffers.arrays, 2)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The pooling of x, into `out` when given."""
        s = self.shape
        x = checks.float32_array("x", x, s.input_shape)
        y = _output(out, s.output_shape, {"x": x})
        self._program(x, y)
        return y


def _output(out: np.ndarray | None, shape: tuple[int, ...], inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The caller's output array, checked, or a new one."""
    return aligned_empty(shape) if out is None else checks.output_array("out", out, shape, inputs)


POOL_VECTORS = 4
"""Output vectors (or partial sums) per pooling step: pools are load-bound, and 4
independent chains cover the latency of a max or an add on every profiled machine."""

POOL_CHAINS = 4
"""Independent accumulators per windowed step at least, for the same reason where a
row is fewer than POOL_VECTORS vectors (wide windows on narrow rows)."""


def pool_shape(input_shape, kind: str, kernel_shape=None, *, strides=None, pads=None, dilations=None,
               ceil_mode: bool = False, count_include_pad: bool = False) -> pl.PoolShape:  # fmt: skip
    """The pooling layer's shape from ONNX-style arguments, checked."""
    n, c, h, w = _input_shape(input_shape)
    if kind not in pl.POOL_KINDS:
        raise AutoconfigError(f"unknown pooling {kind!r}: {', '.join(pl.POOL_KINDS)}")
    windowed = kind not in pl.GLOBAL_KINDS
    if windowed and kernel_shape is None:
        raise AutoconfigError(f"{kind} pooling needs kernel_shape")
    return pl.PoolShape(n, c, h, w, kind, _pair("kernel_shape", kernel_shape, 1) if windowed else (1, 1),
                        _pair("strides", strides, 1), _pads(pads), _pair("dilations", dilations, 1),
                        bool(ceil_mode), bool(count_include_pad))  # fmt: skip


def pool_config(shape: pl.PoolShape, target: Target, lanes: int | None = None) -> pl.PoolConfig:
    """The pooling kernel's configuration: the target's widest vectors (or `lanes`),
    POOL_VECTORS of them per step, at least POOL_CHAINS independent accumulators."""
    config = pl.PoolConfig(shape, lanes or target.f32_lanes, POOL_VECTORS, POOL_CHAINS)
    config.validate(target)
    return config


@reraised
def compile_pool2d(input_shape, kind: str, kernel_shape=None, *, strides=None, pads=None, dilations=None,
                   ceil_mode: bool = False, count_include_pad: bool = False, profile=None, target=None,
                   threads: int | None = None, lanes: int | None = None) -> CompiledPool:  # fmt: skip
    """Compile one ONNX pooling layer: kind 'max', 'average', 'global_average' or
    'global_max' (no kernel_shape), with ONNX's attributes."""
    shape = pool_shape(input_shape, kind, kernel_shape, strides=strides, pads=pads, dilations=dilations,
                       ceil_mode=ceil_mode, count_include_pad=count_include_pad)  # fmt: skip
    threads = checks.threads(threads)
    prof, tgt = resolve(profile, target)
    threads = checks.threads_on(threads, prof)
    start_backends()  # an LLVM child starts while the model decides (a cached kernel leaves it idle)
    return CompiledPool(pool_config(shape, tgt, lanes), tgt, threads)
