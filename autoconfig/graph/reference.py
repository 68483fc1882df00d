"""numpy reference implementations of the ONNX operators (opsets 11-28), one function
per operator taking the node's attributes and input arrays; the operator table
(`autoconfig.graph.ops`) names them.

They are the correctness reference for everything the project generates (constants
are folded at import by onnx's own reference, `graph.fold`). Where onnx's own
reference implementation serves (`onnx_reference`: windowed pools, linear and cubic
Resize, InstanceNormalization, ConvTranspose), it is used; the rest are written here because they
run on the index maps of data movement (`autoconfig.movement`), where onnx's
evaluator would build and check a model per call (milliseconds each), and
convolution and matrix products because onnx's are too slow for whole models (here sliding windows and einsum, one
matrix product per group, so whole models run in seconds). A new operator starts
from `onnx_reference`. Activations' meanings are their kernels' own
(`kernels.epilogue.KINDS`, through `autoconfig.families.elementwise`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from autoconfig.errors import AutoconfigError


def _f(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32, copy=False)


def conv(a: dict, x, w, b=None):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    group = a.get("group", 1)
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pads = _pads(a, x.shape[2:], (kh, kw), (sh, sw), (dh, dw))
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    ek, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    windows = sliding_window_view(xp, (ek, ew), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
    oh, ow = windows.shape[2], windows.shape[3]
    windows = windows.reshape(n, group, cg, oh, ow, kh, kw)
    wg = w.reshape(group, o // group, cg, kh, kw)
    y = np.einsum("ngchwij,gocij->ngohw", windows, wg, optimize=True).reshape(n, o, oh, ow)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return _f(y)


def _pads(a: dict, spatial, kernel, strides, dilations) -> list[int]:
    """[top, left, bottom, right] from pads or auto_pad."""
    auto = a.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = a.get("pads", [0] * 4) if auto == "NOTSET" else [0] * 4
        return [p[0], p[1], p[2], p[3]]
    out = []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        target = -(-size // s)
        total = max(0, (target - 1) * s + (k - 1) * d + 1 - size)
        out.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2))
    return [out[0][0], out[1][0], out[0][1], out[1][1]]


def onnx_node_outputs(node, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """An ONNX node's outputs by onnx's own reference implementation (`ReferenceEvaluator`)
    at `opset`, its inputs by name in `feeds`: a few milliseconds a call."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(node, opsets={"": opset}).run(None, feeds)


def onnx_reference(op: str, a: dict, *inputs: np.ndarray, opset: int = 22) -> list[np.ndarray]:
    """`op` with attributes `a` on `inputs` (None where omitted) by onnx's reference:
    for operators whose every variant (N-D windows, dilations, auto_pad, ceil mode) is
    not worth writing again; for the interpreter and tests only."""
    from onnx import helper

    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    feeds = {n: x for n, x in zip(names, inputs) if n}
    return onnx_node_outputs(helper.make_node(op, names, ["y"], **a), feeds, opset)


def onnx_op(op: str) -> Callable[..., np.ndarray]:
    """`op`'s first output by onnx's reference (the build computes it as other ops:
    `graph.simplify`)."""
    return lambda a, *inputs: onnx_reference(op, a, *inputs)[0]


def top_k(a: dict, x, k):
    """TopK's values and int64 indices by onnx's reference."""
    from onnx import helper

    return onnx_node_outputs(helper.make_node("TopK", ["x", "k"], ["values", "indices"], **a), {"x": x, "k": k}, 22)


def lrn(a: dict, x):
    """The spec's LRN (onnx's reference sums over the first `batch` channels only): each
    channel over the ⌊(size−1)/2⌋ before it and ⌈(size−1)/2⌉ after it."""
    size, channels = a["size"], x.shape[1]
    squares = np.stack([np.sum(x[:, max(0, c - (size - 1) // 2): c + size // 2 + 1] ** 2, axis=1)
                        for c in range(channels)], axis=1)  # fmt: skip
    return (x / (a.get("bias", 1.0) + a.get("alpha", 1e-4) / size * squares) ** a.get("beta", 0.75)).astype(x.dtype)


def gather(a: dict, x, indices):
    """Elements along `axis` at `indices` (negative ones counting from the end)."""
    axis = a.get("axis", 0) % x.ndim
    return np.take(x, np.where(indices < 0, indices + x.shape[axis], indices), axis=axis)


def gather_elements(a: dict, x, indices):
    """x's elements at `indices` along `axis` (negative ones counting from the end), the
    other axes as they are: indices may be shorter than x along any axis."""
    axis = a.get("axis", 0) % x.ndim
    return np.take_along_axis(x, np.where(indices < 0, indices + x.shape[axis], indices), axis=axis)


def gemm(a: dict, x, w, c=None):
    x = x.T if a.get("transA", 0) else x
    w = w.T if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    if c is not None:
        y = y + a.get("beta", 1.0) * c
    return _f(y)


def batchnorm(a: dict, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + a.get("epsilon", 1e-5))
    return _f((x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape))


def split(a: dict, x, sizes=None):
    axis = a.get("axis", 0)
    if sizes is None:
        sizes = a.get("split")
    if sizes is None or len(sizes) == 0:  # num_outputs parts (the importer sets it for an equal split)
        parts = a["num_outputs"]
        size = -(-x.shape[axis] // parts)
        sizes = [max(0, min(size, x.shape[axis] - i * size)) for i in range(parts)]
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def slice_(a: dict, x, starts=None, ends=None, axes=None, steps=None):
    starts = a["starts"] if starts is None else starts
    ends = a["ends"] if ends is None else ends
    axes = a.get("axes", range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[int(ax)] = slice(int(s), int(max(min(e, 2**62), -(2**62))), int(st))
    return x[tuple(index)]


def reshape(a: dict, x, shape):
    shape = [int(d) for d in shape]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return x.reshape(shape)


def resize(a: dict, x, roi=None, scales=None, sizes=None):
    """Resize: nearest with ONNX's coordinate transformations and rounding, each axis
    resized on its own (nearest is separable); linear and cubic by onnx's reference."""
    if a.get("mode", "nearest") != "nearest":
        inputs = [np.asarray(v) if v is not None and np.size(v) else None for v in (roi, scales, sizes)]
        return onnx_reference("Resize", a, np.asarray(x, np.float32), *inputs)[0]
    out_shape, scales = resize_shape(a, x.shape, scales, sizes)
    y = x
    for axis, (d_in, d_out, scale) in enumerate(zip(x.shape, out_shape, scales)):
        if d_in != d_out or scale != 1:
            y = np.take(y, nearest_source(a, d_in, d_out, scale), axis=axis)
    return y


def resize_shape(a: dict, shape: tuple[int, ...], scales=None, sizes=None) -> tuple[list[int], list[float]]:
    """A Resize's output shape and per-axis scales over every axis of `shape`: `scales`
    or `sizes` name the `axes` attribute's axes (all, without it), and a
    keep_aspect_ratio_policy other than stretch scales those axes by one factor."""
    rank = len(shape)
    axes = [int(v) % rank for v in a.get("axes") or range(rank)]
    out_shape, factors = list(shape), [1.0] * rank
    if sizes is not None and len(sizes):
        wanted = [int(v) for v in sizes]
        policy = a.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(w / shape[ax] for w, ax in zip(wanted, axes))
            wanted = [int(np.floor(common * shape[ax] + 0.5)) for ax in axes]
            for ax in axes:
                factors[ax] = common
        for w, ax in zip(wanted, axes):
            out_shape[ax] = w
            if policy == "stretch":
                factors[ax] = w / shape[ax]
    else:
        for factor, ax in zip(scales, axes):
            factors[ax] = float(factor)
            out_shape[ax] = int(np.floor(shape[ax] * float(factor)))
    return out_shape, factors


def resize_axis(a: dict, size: int, out: int, scale: float,
                roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """One axis of a linear or cubic Resize as an affine map: out × size weights W and,
    where some outputs fall outside a tf_crop_and_resize roi, the values those take
    (their rows of W are zero). The weights are onnx's reference resizing the identity,
    so every mode, antialias and exclude_outside is the reference's own — but for one
    rule: align_corners and tf_crop_and_resize divide by the output's length less one,
    its integer length as the spec says (and onnxruntime does), where onnx's reference
    takes scale × input length unrounded (the two differ where that is fractional)."""
    from onnx.reference.ops import op_resize as ref_resize

    mode, antialias, cubic_a = a.get("mode"), a.get("antialias", 0), a.get("cubic_coeff_a", -0.75)
    if a.get("coordinate_transformation_mode") in ("align_corners", "tf_crop_and_resize") and not antialias:
        scale = out / size  # the scale's only other use is an antialiasing filter's width
    if mode == "cubic":
        coefficients = ref_resize._cubic_coeffs_antialias if antialias else ref_resize._cubic_coeffs

        def coeffs(ratio, factor):
            return coefficients(ratio, factor, A=cubic_a)
    else:
        coeffs = ref_resize._linear_coeffs_antialias if antialias else ref_resize._linear_coeffs
    resized = ref_resize._interpolate_1d_along_axis(
        np.eye(size), 1, scale, out, coeffs, roi=roi, extrapolation_value=np.nan,
        coordinate_transformation_mode=a.get("coordinate_transformation_mode", "half_pixel"),
        exclude_outside=bool(a.get("exclude_outside", 0)))  # fmt: skip
    weights = resized.T
    outside = np.isnan(weights).any(axis=1)
    if not outside.any():
        return weights, None
    weights[outside] = 0.0
    return weights, np.where(outside, float(a.get("extrapolation_value", 0.0)), 0.0)


def nearest_source(a: dict, d_in: int, d_out: int, scale: float) -> np.ndarray:
    """The input index each of `d_out` outputs takes along one axis of a nearest Resize."""
    i = np.arange(d_out, dtype=np.float64)
    mode = a.get("coordinate_transformation_mode", "half_pixel")
    if mode == "asymmetric":
        x = i / scale
    elif mode == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if d_out > 1 else np.zeros_like(i)
    elif mode == "tf_half_pixel_for_nearest":
        x = (i + 0.5) / scale
    elif mode == "align_corners":
        x = i * (d_in - 1) / (d_out - 1) if d_out > 1 else np.zeros_like(i)
    elif mode == "half_pixel_symmetric":
        adjustment = d_out / (scale * d_in)
        x = d_in / 2 * (1 - adjustment) + (i + 0.5) / scale - 0.5
    else:
        raise AutoconfigError(f"Resize coordinate_transformation_mode {mode!r} is not supported")
    rounding = a.get("nearest_mode", "round_prefer_floor")
    if rounding == "floor":
        source = np.floor(x)
    elif rounding == "ceil":
        source = np.ceil(x)
    elif rounding == "round_prefer_floor":
        source = np.where(x == np.floor(x) + 0.5, np.floor(x), np.round(x))
    elif rounding == "round_prefer_ceil":
        source = np.where(x == np.floor(x) + 0.5, np.ceil(x), np.round(x))
    else:
        raise AutoconfigError(f"Resize nearest_mode {rounding!r} is not supported")
    return np.clip(source, 0, d_in - 1).astype(np.int64)


PAD_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "wrap": "wrap"}
"""ONNX Pad modes by numpy.pad's names for them."""


def pad(a: dict, x, pads=None, value=None, axes=None):
    pads = list(a.get("pads", [])) if pads is None else [int(p) for p in pads]
    mode = a.get("mode", "constant")
    if mode not in PAD_MODES:
        raise AutoconfigError(f"Pad mode {mode!r} is not supported")
    axes = list(range(x.ndim)) if axes is None else [int(v) % x.ndim for v in axes]
    width = [(0, 0)] * x.ndim
    for i, ax in enumerate(axes):
        width[ax] = (pads[i], pads[i + len(axes)])
    if min(min(w) for w in width) < 0:
        return pad(a, x[tuple(slice(-lo if lo < 0 else None, hi if hi < 0 else None) for lo, hi in width)],
                   [max(lo, 0) for lo, _ in width] + [max(hi, 0) for _, hi in width], value)  # fmt: skip
    if mode != "constant":
        return np.pad(x, width, mode=PAD_MODES[mode])
    fill = 0.0 if value is None or value.size == 0 else value.item()
    return np.pad(x, width, constant_values=fill)


def _along_axis(function: Callable) -> Callable:
    """A Softmax-like operator: `function(x, axis)` along `axis`, or, before opset 13
    (`legacy_axis`), along the trailing axes from it flattened into one."""

    def apply(a: dict, x):
        if "legacy_axis" in a:
            flat = x.reshape(int(np.prod(x.shape[: a["legacy_axis"]])), -1)
            return _f(function(flat, 1).reshape(x.shape))
        return _f(function(x, a.get("axis", -1)))

    return apply


def _softmax(x, axis: int):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis: int):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _hardmax(x, axis: int):
    """1 at the first maximum along `axis` (a NaN counts as the largest, as in argmax), 0 elsewhere."""
    y = np.zeros_like(x)
    np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
    return y


softmax, log_softmax, hardmax = _along_axis(_softmax), _along_axis(_log_softmax), _along_axis(_hardmax)


REDUCTIONS = {
    "ReduceMean": lambda x, axes: x.mean(axis=axes), "ReduceSum": lambda x, axes: x.sum(axis=axes),
    "ReduceSumSquare": lambda x, axes: (x * x).sum(axis=axes), "ReduceL1": lambda x, axes: np.abs(x).sum(axis=axes),
    "ReduceL2": lambda x, axes: np.sqrt((x * x).sum(axis=axes)), "ReduceLogSum": lambda x, axes: np.log(x.sum(axis=axes)),
    "ReduceMax": lambda x, axes: x.max(axis=axes), "ReduceMin": lambda x, axes: x.min(axis=axes),
    "ReduceLogSumExp": lambda x, axes: np.log(np.exp(x).sum(axis=axes)),
    "ReduceProd": lambda x, axes: x.prod(axis=axes),
}  # fmt: skip
"""The Reduce operators the build computes, each over a tuple of axes (in float64)."""


def reduction(op: str) -> Callable:
    """The reference of Reduce operator `op`: its axes an attribute or an input (none or
    empty: all, unless noop_with_empty_axes), the reduced axes kept or not."""

    def reduce(a: dict, x, axes=None):
        axes = a.get("axes") if axes is None else axes
        if axes is None or len(axes) == 0:
            if a.get("noop_with_empty_axes", 0):
                return x
            axes = range(x.ndim)
        axes = tuple(int(v) % x.ndim for v in axes)
        y = REDUCTIONS[op](x.astype(np.float64), axes)
        return _f(np.expand_dims(y, axes) if a.get("keepdims", 1) else y)

    return reduce


def _axes(a: dict, axes) -> tuple[int, ...]:
    return tuple(int(v) for v in (a.get("axes") if axes is None else axes))


def unsqueeze(a: dict, x, axes=None):
    out = x
    rank = x.ndim + len(_axes(a, axes))
    for ax in sorted(v % rank for v in _axes(a, axes)):
        out = np.expand_dims(out, ax)
    return out


def squeeze(a: dict, x, axes=None):
    if axes is None and "axes" not in a:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(v % x.ndim for v in _axes(a, axes)))


def matmul(a: dict, x, y):
    return _f(np.matmul(x, y))


def binary(numpy_op):
    """An elementwise binary op in the operands' common type."""
    return lambda a, x, y: numpy_op(x, y).astype(np.result_type(x, y))


def div(a: dict, x, y):
    return (x / y).astype(x.dtype) if x.dtype.kind == "f" else x // y


def where(a: dict, condition, x, y):
    return np.where(condition, x, y).astype(np.result_type(x, y))


def expand(a: dict, x, shape):
    return np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(int(d) for d in shape))).copy()


def gather_nd(a: dict, x, indices):
    """onnx's: the build gathers by the element map it computes."""
    return onnx_reference("GatherND", a, x, indices)[0]


def max_pool(a: dict, x):
    return _f(onnx_reference("MaxPool", a, x)[0])


def average_pool(a: dict, x):
    return _f(onnx_reference("AveragePool", a, x)[0])


def global_lp_pool(a: dict, x):
    """(Σ |x|^p)^(1/p) over every axis after the channels (onnx's reference has no GlobalLpPool)."""
    p = a.get("p", 2)
    return _f(np.sum(np.abs(x.astype(np.float64)) ** p, axis=tuple(range(2, x.ndim)), keepdims=True) ** (1 / p))


def global_pool(numpy_op: Callable) -> Callable:
    """GlobalAveragePool or GlobalMaxPool: `numpy_op` over every axis after the channels."""
    return lambda a, x: _f(numpy_op(x, axis=tuple(range(2, x.ndim)), keepdims=True))


def concat(a: dict, *xs):
    return np.concatenate(xs, axis=a["axis"])


def flatten(a: dict, x):
    return x.reshape(int(np.prod(x.shape[: a.get("axis", 1)])), -1)


def transpose(a: dict, x):
    return np.transpose(x, a.get("perm"))


def upsample(a: dict, x, scales=None):
    """Upsample (opsets 7-9): a Resize whose source index is floor(output index / scale)."""
    return resize({"mode": a.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric",
                   "nearest_mode": "floor"}, x, None, a.get("scales") if scales is None else scales)


def identity(a: dict, x):
    return x
