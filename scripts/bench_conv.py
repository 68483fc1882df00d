#!/usr/bin/env python3
"""Generated convolution and pooling vs torch CPU (oneDNN) vs onnxruntime, side by side.

Tasks: every distinct Conv, MaxPool, AveragePool and GlobalAveragePool layer of the
four zoo models (VGG-16, MobileNet-V1, EfficientNet-B0, YOLO-V4 at batch 1; shapes by
ONNX shape inference; depthwise layers included), each at 1 thread and at all cores.
Every peer is timed by the harness (scripts/harness.py): in its own fresh process per
round, thread count through its own control (torch.set_num_threads; onnxruntime's
intra-op threads of a one-node model), pinned alike. Each peer's output is checked
against onnxruntime's before timing; ours is compiled by the model (build time
reported, not timed) with the layer's bias.

Prints per layer GFLOP/s (pools: GB/s of input read) with the spread, our algorithm,
ours/torch and ours/onnxruntime; geomeans over the convolution layers, the depthwise
ones on their own, and the pools; writes JSON and a plot of the ratios.

Usage: python scripts/bench_conv.py [--profile P] [--threads 1 2] [--rounds 3] [--reps 5]
       [--models vgg16 ...] [--quick] [--json F] [--plot F] [--no-pin]
Needs: pip install -e '.[bench]' and torch==2.13.0 (optional: its column is left out).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import harness
from bench_matmul import describe

CONV_OPS = ("Conv",)
POOL_OPS = {"MaxPool": "max", "AveragePool": "average", "GlobalAveragePool": "global_average"}


def zoo_layers(models: list[str]) -> list[dict]:
    """The distinct Conv and pooling layers of `models`: input shape, weight shape and
    attributes (ONNX's defaults filled in), first model and count of occurrences."""
    import onnx
    from onnx import numpy_helper, shape_inference

    from autoconfig.graph import zoo

    layers: dict[tuple, dict] = {}
    for name in models:
        model = shape_inference.infer_shapes(zoo.build(name))
        shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}  # fmt: skip
        weights = {t.name: numpy_helper.to_array(t).shape for t in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type not in CONV_OPS and node.op_type not in POOL_OPS:
                continue
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            task = {"op": node.op_type, "input": shapes[node.input[0]],
                    "strides": list(attrs.get("strides", [1, 1])), "pads": list(attrs.get("pads", [0, 0, 0, 0]))}  # fmt: skip
            if node.op_type == "Conv":
                task |= {"weight": list(weights[node.input[1]]), "group": int(attrs.get("group", 1)),
                         "dilations": list(attrs.get("dilations", [1, 1])), "bias": len(node.input) > 2}  # fmt: skip
            elif node.op_type != "GlobalAveragePool":
                task |= {"kernel": list(attrs["kernel_shape"]), "ceil_mode": int(attrs.get("ceil_mode", 0)),
                         "count_include_pad": int(attrs.get("count_include_pad", 0))}  # fmt: skip
            key = repr(sorted(task.items()))
            if key in layers:
                layers[key]["count"] += 1
            else:
                layers[key] = task | {"model": name, "count": 1}
    return list(layers.values())


def label(task: dict) -> str:
    """'conv 3x3/1 64->64 56²', 'dw 3x3/2 96 112²', 'maxpool 2x2/2 64 224²'."""
    n, c, h, w = task["input"]
    size = f"{h}²" if h == w else f"{h}x{w}"
    if task["op"] == "Conv":
        cout, _, kh, kw = task["weight"]
        kind = "dw" if task["group"] == c and task["group"] > 1 else "conv"
        channels = str(c) if kind == "dw" else f"{c}->{cout}"
        return f"{kind} {kh}x{kw}/{task['strides'][0]} {channels} {size}"
    if task["op"] == "GlobalAveragePool":
        return f"gap {c} {size}"
    k = task["kernel"]
    return f"{POOL_OPS[task['op']]}pool {k[0]}x{k[1]}/{task['strides'][0]} {c} {size}"


def work(task: dict) -> float:
    """Flops of a convolution; bytes of input read by a pool."""
    n, c, h, w = task["input"]
    if task["op"] != "Conv":
        return 4.0 * n * c * h * w
    return float(shape_of(task).flops)


def shape_of(task: dict):
    from kernels.conv import ConvShape

    n, c, h, w = task["input"]
    cout, _, kh, kw = task["weight"]
    return ConvShape(n, c, h, w, cout, (kh, kw), tuple(task["strides"]), tuple(task["pads"]),
                     tuple(task["dilations"]), task["group"])  # fmt: skip


def layer_data(task: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal(task["input"], dtype=np.float32)}
    if task["op"] == "Conv":
        fan_in = int(np.prod(task["weight"][1:]))
        data["w"] = (rng.standard_normal(task["weight"]) / np.sqrt(fan_in)).astype(np.float32)
        if task["bias"]:
            data["b"] = rng.standard_normal(task["weight"][0], dtype=np.float32)
    return data


def onnx_session(task: dict, data: dict[str, np.ndarray], threads: int):
    """onnxruntime on a one-node model of the layer, with `threads` intra-op threads."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    attrs = {"strides": task["strides"], "pads": task["pads"]}
    if task["op"] == "Conv":
        attrs |= {"group": task["group"], "dilations": task["dilations"], "kernel_shape": task["weight"][2:]}
    elif task["op"] == "GlobalAveragePool":
        attrs = {}
    else:
        attrs |= {"kernel_shape": task["kernel"], "ceil_mode": task["ceil_mode"]}
        if task["op"] == "AveragePool":
            attrs["count_include_pad"] = task["count_include_pad"]
    constants = [k for k in ("w", "b") if k in data]
    node = helper.make_node(task["op"], ["x", *constants], ["y"], **attrs)
    graph = helper.make_graph([node], "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, task["input"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(data[k], k) for k in constants])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": data["x"]})[0]


def torch_call(task: dict, data: dict[str, np.ndarray], threads: int):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    x = torch.from_numpy(data["x"])
    top, left, bottom, right = task["pads"]
    symmetric = top == bottom and left == right
    if task["op"] == "Conv":
        w = torch.from_numpy(data["w"])
        b = torch.from_numpy(data["b"]) if "b" in data else None
        padding = (top, left) if symmetric else 0

        def conv():
            with torch.no_grad():
                source = x if symmetric else F.pad(x, (left, right, top, bottom))
                return F.conv2d(source, w, b, task["strides"], padding, task["dilations"], task["group"])

        return lambda: conv().numpy()
    if task["op"] == "GlobalAveragePool":
        return lambda: F.adaptive_avg_pool2d(x, 1).numpy()
    if not symmetric:
        raise SystemExit(f"{label(task)}: torch pools pad symmetrically only")
    if task["op"] == "MaxPool":
        return lambda: F.max_pool2d(x, task["kernel"], task["strides"], (top, left), 1, bool(task["ceil_mode"])).numpy()
    return lambda: F.avg_pool2d(x, task["kernel"], task["strides"], (top, left), bool(task["ceil_mode"]),
                                bool(task["count_include_pad"])).numpy()  # fmt: skip


def ours_call(task: dict, data: dict[str, np.ndarray], threads: int, out: np.ndarray | None = None):
    """Our compiled layer as a call on the task's input (writing into `out` when given,
    as a peer that preallocates its output does), and what to print about it."""
    import autoconfig

    profile = task["profile"]
    if task["op"] == "Conv":
        f = autoconfig.compile_conv2d(task["input"], data["w"], data.get("b"), strides=task["strides"],
                                      pads=task["pads"], dilations=task["dilations"], group=task["group"],
                                      profile=profile, threads=threads)  # fmt: skip
        info = {"config": describe(f.plan), "predicted_s": f.prediction.total_ns / 1e9}
    else:
        kind = POOL_OPS[task["op"]]
        f = autoconfig.compile_pool2d(task["input"], kind, task.get("kernel"), strides=task["strides"],
                                      pads=task["pads"], ceil_mode=bool(task.get("ceil_mode", 0)),
                                      count_include_pad=bool(task.get("count_include_pad", 0)),
                                      profile=profile, threads=threads)  # fmt: skip
        info = {"config": f"{kind} pool/{f.config.lanes}"}
    return (lambda: f(data["x"], out=out)), info


def prepare(peer: str, task: dict, threads: int) -> harness.Prepared:
    """The peer's call on the layer's data, its output checked against onnxruntime's."""
    data = layer_data(task)
    expected = onnx_session(task, data, 1)()
    start = time.perf_counter()
    info: dict = {}
    if peer == "ours":
        call, info = ours_call(task, data, threads)
        info["build_s"] = time.perf_counter() - start
    elif peer == "torch":
        call = torch_call(task, data, threads)
    else:
        call = onnx_session(task, data, threads)
    got = call()
    error = float(np.max(np.abs(got - expected)))
    if got.shape != expected.shape or error > 1e-3 * max(1.0, float(np.ptp(expected))):
        sys.exit(f"{label(task)}: {peer}'s output is wrong (max error {error:.3g}); not timing it")
    return harness.Prepared(call, info)


def versions(peer: str) -> dict:
    if peer == "torch":
        import torch

        return {"torch": torch.__version__}
    if peer == "onnxruntime":
        import onnxruntime

        return {"onnxruntime": onnxruntime.__version__}
    import autoconfig

    return {"autoconfig": autoconfig.__version__}


def available_peers() -> list[str]:
    try:
        import torch  # noqa: F401

        return ["ours", "torch", "onnxruntime"]
    except ImportError:
        print("torch is not installed: its column is left out", file=sys.stderr)
        return ["ours", "onnxruntime"]


def results(tasks: list[dict], timed: dict[str, list[dict]]) -> list[dict]:
    rows = []
    for i, task in enumerate(tasks):
        amount = work(task)
        rows.append({"name": label(task), "task": {k: v for k, v in task.items() if k != "profile"},
                     "config": timed["ours"][i]["info"]["config"], "build_s": timed["ours"][i]["info"]["build_s"],
                     "rate": {p: amount / t[i]["timing"]["median"] / 1e9 for p, t in timed.items()},
                     "spread": {p: harness.Timing(**t[i]["timing"]).spread for p, t in timed.items()},
                     "timing": {p: t[i]["timing"] for p, t in timed.items()}})  # fmt: skip
    return rows


def table(rows: list[dict], peers: list[str]) -> list[str]:
    others = [p for p in peers if p != "ours"]
    head = [f"{'layer':<28}", f"{'our config':<24}"] + [f"{p:>13}" for p in peers]
    head += [f"{'vs ' + p:>14}" for p in others] + [f"{'build':>6}"]
    lines = [" ".join(head)]
    for r in rows:
        cells = [f"{r['name']:<28}", f"{r['config']:<24}"]
        cells += [f"{r['rate'][p]:>8.1f}±{r['spread'][p] * 100:2.0f}%" for p in peers]
        cells += [f"{r['rate']['ours'] / r['rate'][p]:>13.2f}x" for p in others]
        cells.append(f"{r['build_s']:>5.1f}s")
        lines.append(" ".join(cells))
    return lines


def geomeans(rows: list[dict], peers: list[str]) -> list[str]:
    groups = {"convolutions": [r for r in rows if r["task"]["op"] == "Conv"],
              "depthwise convolutions": [r for r in rows if r["name"].startswith("dw")],
              "pools": [r for r in rows if r["task"]["op"] != "Conv"]}  # fmt: skip
    lines = []
    for group, members in groups.items():
        if members:
            ratios = [f"ours/{p} {harness.geomean([r['rate']['ours'] / r['rate'][p] for r in members]):.2f}x"
                      for p in peers if p != "ours"]  # fmt: skip
            lines.append(f"geomean over {len(members)} {group}: " + ", ".join(ratios))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_run_options(parser, "bench-conv")
    parser.add_argument("--models", nargs="+", default=None, help="zoo models (default: all four)")
    parser.add_argument("--quick", action="store_true", help="every third layer")
    args = parser.parse_args()

    from autoconfig.graph import zoo

    profile, profile_path, report = harness.start(args, "bench_conv")
    layers = zoo_layers(args.models or list(zoo.MODELS))[:: 3 if args.quick else 1]
    tasks = [layer | {"profile": profile_path} for layer in layers]
    peers = available_peers()
    print(f"{len(tasks)} distinct layers", file=sys.stderr)
    by_threads: dict[int, list[dict]] = {}
    for threads in args.threads or sorted({1, int(profile.cores)}):
        timed = harness.measure("bench_conv", peers, tasks, threads, rounds=args.rounds, reps=args.reps,
                                pin=not args.no_pin)  # fmt: skip
        rows = by_threads[threads] = results(tasks, timed)
        print("\n" + report.heading(threads, {p: timed[p][0]["versions"] for p in peers}))
        print(f"convolutions in GFLOP/s, pools in GB/s of input, ± half the interquartile range; median of "
              f"{args.rounds} processes x {args.reps} samples per peer")  # fmt: skip
        lines = table(rows, peers) + geomeans(rows, peers)
        print("\n".join(lines), flush=True)
        report.tables.append({"threads": threads, "rows": rows})
        report.summary += [f"{threads} thread(s): {line}" for line in geomeans(rows, peers)]
    report.save(args.json)
    plot(by_threads, peers, args.plot)
    print(f"\nwrote {args.json} and {args.plot}")
    return 0


def plot(by_threads: dict[int, list[dict]], peers: list[str], path: str) -> None:
    """Ours over each peer per layer, one panel per thread count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [p for p in peers if p != "ours"]
    fig, axes = plt.subplots(len(by_threads), 1, figsize=(16, 4.5 * len(by_threads)), squeeze=False)
    for ax, (threads, rows) in zip(axes[:, 0], by_threads.items()):
        x = np.arange(len(rows))
        width = 0.8 / max(1, len(others))
        for i, p in enumerate(others):
            ax.bar(x + i * width, [r["rate"]["ours"] / r["rate"][p] for r in rows], width, label=f"ours / {p}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")  # pools run 0.2-18x: a linear axis flattens the convolutions near 1
        ax.set_xticks(x + width * (len(others) - 1) / 2, [r["name"] for r in rows], rotation=90, fontsize=6)
        ax.set_ylabel("speed ratio")
        ax.set_title(f"{threads} thread(s)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
