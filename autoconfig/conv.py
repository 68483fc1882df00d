"""The convolution and pooling API: compile one layer, with its weights, for this
machine, and call it on NCHW float32 numpy arrays.

``compile_conv2d(input_shape, weight, ...)`` takes ONNX Conv's attributes; the
convolution model picks the algorithm and its parameters from the profile (or
`config=` forces a plan), the kernels are generated and built, and the weights are
kept in the layout the kernels read. ``compile_pool2d`` does the same for MaxPool,
AveragePool and GlobalAveragePool.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from autoconfig import checks
from autoconfig.errors import AutoconfigError
from autoconfig.machine import Machine
from autoconfig.models.conv import ConvChoice, ConvPlan, choose, predict, validate_plan
from autoconfig.models.matmul import Prediction
from autoconfig.resolve import resolve_profile, resolve_target
from autoconfig.runtime import SplitKernel, aligned_array, split
from kernels import epilogue as ep
from kernels import pool as pl
from kernels.conv import ConvShape, DepthwiseConfig, DirectConfig, WinogradConfig, generate
from kernels.library import build_library
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
    """``f(x[, residual]) -> y`` for one convolution layer: x of the compiled input shape
    (NCHW float32), a residual of the output's shape when the epilogue adds one."""

    def __init__(self, plan: ConvPlan, target: Target, prediction: Prediction | None, choice: ConvChoice | None,
                 weight: np.ndarray, channel_operands: dict[int, np.ndarray]):  # fmt: skip
        self.plan, self.config, self.shape, self.target = plan, plan.config, plan.config.shape, target
        self.prediction, self.choice = prediction, choice
        self.library = build_library(generate(self.config, target))
        c = self.config
        kept = c.filter_transform(weight) if isinstance(c, WinogradConfig) else weight  # U = G g Gᵀ, once
        self._weight = aligned_array(kept.size)  # on a cache line, as the kernels' own buffers
        self._weight[:] = kept.ravel()
        self._channel = channel_operands
        s = self.shape
        planes = split(s.batch * s.channels, plan.threads)
        if isinstance(c, DepthwiseConfig):  # each thread transforms its planes into its scratch
            work = [[aligned_array(c.workspace(), 0.0)] for _ in planes]
            self._kernel = SplitKernel(self.library.kernel(c.symbol), planes, work)
            return
        if c.algorithm != "gemm1x1":  # the others read the transformed input
            self._buffer = aligned_array(c.split().size, 0.0)  # the slack stays zero
            self._transform = SplitKernel(self.library.kernel(c.split().symbol), planes)
        if isinstance(c, DirectConfig):
            self._kernel = SplitKernel(self.library.kernel(c.symbol), _direct_parts(plan))
            return
        from autoconfig.matmul import split_kernel

        self._kernel = split_kernel(plan.gemm_plan(), self.library)
        if isinstance(c, WinogradConfig):  # then input transform, T² products, output transform
            self._v = aligned_array(c.transformed_size() * s.channels)
            self._m = aligned_array(c.transformed_size() * s.out_channels)
            self._input = SplitKernel(self.library.kernel(c.input_signature().symbol), planes)
            self._output = SplitKernel(self.library.kernel(c.output_signature().symbol),
                                       split(s.batch * s.out_channels, plan.threads))  # fmt: skip
        elif c.algorithm == "im2col":
            im2col = c.im2col()
            self._columns = aligned_array(im2col.size)
            rows = split(im2col.rows, plan.threads)
            self._im2col = [SplitKernel(self.library.kernel(im2col.symbol), [(ng, *r) for r in rows])
                            for ng in range(s.batch * s.group)]  # fmt: skip

    def __call__(self, x: np.ndarray, *residuals: np.ndarray) -> np.ndarray:
        s, c = self.shape, self.config
        x = checks.float32_array("x", x, s.input_shape)
        wanted = [i for i, _, kind in ep.operand_names(c.epilogue) if kind == "output"]
        if len(residuals) != len(wanted):
            raise AutoconfigError(f"this convolution takes {len(wanted)} residual tensor(s) of shape "
                                  f"{s.output_shape} after x, got {len(residuals)}")  # fmt: skip
        operands = dict(self._channel)
        for i, r in zip(wanted, residuals, strict=True):
            operands[i] = checks.float32_array("residual", r, s.output_shape)
        ordered = [operands[i] for i, _, _ in ep.operand_names(c.epilogue)]
        y = np.empty(s.output_shape, np.float32)
        if isinstance(c, DepthwiseConfig):
            self._kernel(y, x, self._weight, *ordered)
            return y
        if isinstance(c, DirectConfig):
            self._transform(self._buffer, x)
            self._kernel(y, self._buffer, self._weight, *ordered)
            return y
        if isinstance(c, WinogradConfig):
            self._transform(self._buffer, x)
            self._input(self._v, self._buffer)
            self._kernel(self._m, self._weight, self._v)
            self._output(y, self._m, *ordered)
            return y
        if c.algorithm == "im2col":
            self._transform(self._buffer, x)
        if s.batch * s.group == 1:  # one product: the arrays themselves, no views to make
            if c.algorithm == "im2col":
                self._im2col[0](self._columns, self._buffer)
            self._kernel(y, self._weight, self._columns if c.algorithm == "im2col" else x, *ordered)
            return y
        cout, cin = s.out_per_group, s.in_per_group
        weights = self._weight.reshape(s.group, cout, -1)  # a view: still aligned
        for n in range(s.batch):
            for g in range(s.group):
                out = y[n, g * cout : (g + 1) * cout]
                views = [v[g * cout : (g + 1) * cout] if v.ndim == 1 else v[n, g * cout : (g + 1) * cout]
                         for v in ordered]  # fmt: skip
                if c.algorithm == "im2col":
                    self._im2col[n * s.group + g](self._columns, self._buffer)
                    image = self._columns
                else:
                    image = x[n, g * cin : (g + 1) * cin]
                self._kernel(out, weights[g], image, *views)
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


def _direct_parts(plan: ConvPlan) -> list[tuple[int, ...]]:
    """Each thread's (ng, row tile, column tile) ranges: the split one cut in near-equal
    pieces, the others whole."""
    c: DirectConfig = plan.config
    whole = {"groups": (0, c.groups()), "rows": (0, c.row_tiles()), "columns": (0, c.col_tiles())}
    parts = []
    for piece in split(whole[plan.split][1], plan.threads):
        ranges = dict(whole, **{plan.split: piece})
        parts.append((*ranges["groups"], *ranges["rows"], *ranges["columns"]))
    return parts


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


def plan_conv2d(input_shape, weight_shape, *, strides=None, pads=None, dilations=None, group=1,
                epilogue: ep.Epilogue = (), profile=None, target=None, threads=None) -> ConvChoice:  # fmt: skip
    """The model's choice for a layer, without building anything."""
    shape = conv_shape(input_shape, weight_shape, strides=strides, pads=pads, dilations=dilations, group=group)
    threads = checks.threads(threads)
    prof = resolve_profile(profile)
    tgt = checks.target_for(resolve_target(target, prof), prof)
    return choose(shape, prof, tgt, checks.threads_within(threads, prof), tuple(epilogue))


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
    prof = resolve_profile(profile)
    tgt = checks.target_for(resolve_target(target, prof), prof)
    threads = checks.threads_within(threads, prof)
    choice = None
    if config is None:
        choice = choose(shape, prof, tgt, threads, epilogue)
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
    """``f(x) -> y`` for one pooling layer on NCHW float32 arrays."""

    def __init__(self, config: pl.PoolConfig, target: Target, threads: int):
        self.config, self.shape, self.target = config, config.shape, target
        self.library = build_library(pl.generate(config, target))
        s = self.shape
        planes = split(s.planes, threads)
        self._pool = SplitKernel(self.library.kernel(config.symbol), planes)
        self._scale = pl.average_scale(s) if s.kind == "average" else None
        self._transform = None
        if s.windowed:
            self._buffer = aligned_array(config.split().size, 0.0)
            self._transform = SplitKernel(self.library.kernel(config.split().symbol), planes)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        s = self.shape
        x = checks.float32_array("x", x, s.input_shape)
        y = np.empty(s.output_shape, np.float32)
        if self._transform is None:
            self._pool(y, x)
            return y
        self._transform(self._buffer, x)
        self._pool(y, self._buffer, *([self._scale] if self._scale is not None else []))
        return y


POOL_VECTORS = 4
"""Output vectors (or partial sums) per pooling step: pools are load-bound, and 4
independent chains cover the latency of a max or an add on every profiled machine."""


def compile_pool2d(input_shape, kind: str, kernel_shape=None, *, strides=None, pads=None, dilations=None,
                   ceil_mode: bool = False, count_include_pad: bool = False, profile=None, target=None,
                   threads: int | None = None, lanes: int | None = None) -> CompiledPool:  # fmt: skip
    """Compile one ONNX pooling layer: kind 'max', 'average' or 'global_average'
    (no kernel_shape), with ONNX's attributes."""
    n, c, h, w = _input_shape(input_shape)
    if kind not in pl.POOL_KINDS:
        raise AutoconfigError(f"unknown pooling {kind!r}: {', '.join(pl.POOL_KINDS)}")
    windowed = kind != "global_average"
    if windowed and kernel_shape is None:
        raise AutoconfigError(f"{kind} pooling needs kernel_shape")
    shape = pl.PoolShape(n, c, h, w, kind, _pair("kernel_shape", kernel_shape, 1) if windowed else (1, 1),
                         _pair("strides", strides, 1), _pads(pads), _pair("dilations", dilations, 1),
                         bool(ceil_mode), bool(count_include_pad))  # fmt: skip
    threads = checks.threads(threads)
    prof = resolve_profile(profile)
    tgt = checks.target_for(resolve_target(target, prof), prof)
    threads = checks.threads_within(threads, prof) or int(prof.cores)
    config = pl.PoolConfig(shape, lanes or tgt.f32_lanes, POOL_VECTORS)
    config.validate(tgt)
    return CompiledPool(config, tgt, threads)
