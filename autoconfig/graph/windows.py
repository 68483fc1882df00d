"""The windows of a convolution or pooling node over its input's spatial axes: its
pads (explicit, or those auto_pad implies) and strides."""

from __future__ import annotations

from autoconfig.graph.ir import Graph, Node


def window_pads(node: Node, graph: Graph, kernel, strides, dilations) -> tuple[int, ...]:
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


def window_strides(node: Node, graph: Graph, strides, pads) -> tuple[int, ...]:
    """The strides, each at most its padded input's extent: a larger one gives the same
    single window along that axis (ceil mode included), and would cost the build its
    stride² input phases."""
    size = graph.types[node.inputs[0]].shape[2:]
    return tuple(min(int(s), n + pads[i] + pads[i + len(size)]) for i, (s, n) in enumerate(zip(strides, size)))
