"""The ``autoconfig`` command line.

Every user-facing error is an AutoconfigError: it is printed as one line on stderr
and the command exits with status 2. Anything else is a bug: one line too, naming
the exception, and the traceback with AUTOCONFIG_DEBUG=1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from autoconfig import __version__
from autoconfig.errors import AutoconfigError, reraised
from kernels.errors import KernelError

DESCRIPTION = """\
autoconfig generates fast CPU SIMD kernels for deep-learning operators without
search-based tuning: analytic models read a measured hardware profile and choose
each kernel's algorithm and parameters; an MLIR vector code generator emits the
kernels for AVX2, AVX-512, NEON or RVV.
"""

EPILOG = """\
Run 'autoconfig COMMAND --help' for a command's options. Errors are one line on
stderr with exit status 2; set AUTOCONFIG_DEBUG=1 to get the traceback of an
internal error instead."""

DEBUG_ENV = "AUTOCONFIG_DEBUG"


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The ONNX file, its shapes and the profile, as every whole-model command takes them."""
    parser.add_argument("model", type=Path, help="the .onnx file")
    _add_shape_option(parser)
    parser.add_argument("--profile", type=Path, default=None, help="hardware profile (default: this machine's)")


def _add_shape_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", default=[], type=shape_option, metavar="NAME=SIZE",
                        help="fix a dynamic dimension: a named one (--shape batch_size=1) or an input's whole shape "
                             "(--shape pixel_values=1x3x224x224); repeatable")  # fmt: skip


def shape_option(text: str) -> tuple[str, int | tuple[int, ...]]:
    """NAME=SIZE or NAME=AxBxC, as --shape takes it."""
    name, _, value = text.partition("=")
    sizes = value.split("x")
    if not name or not all(s.isdigit() and int(s) > 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=SIZE or NAME=AxBxC with sizes > 0")
    return name, int(value) if len(sizes) == 1 else tuple(map(int, sizes))


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vlen", type=int, default=None, metavar="BITS",
        help="RVV vector register length in bits (rvv only; default 256)",
    )  # fmt: skip


def _cmd_targets(args: argparse.Namespace) -> int:
    from autoconfig.probe.host import named_target, this_host
    from kernels.target import all_targets, host_target

    if args.check:
        from autoconfig.demo import run_targets_check

        if args.n < 0:
            raise AutoconfigError(f"--n must be >= 0, got {args.n}")
        names = args.target or [t.name for t in all_targets()]
        return 0 if run_targets_check([named_target(n, args.vlen if n == "rvv" else None) for n in names], args.n) else 1

    rows = [("target", "triple", "cpu / features", "f32 lanes", "vregs", "runs here")]
    for t in all_targets(args.vlen):
        lanes = f"{t.f32_lanes} (scalable)" if t.scalable else str(t.f32_lanes)
        cpu = t.cpu + (f" {t.features}" if t.features else "")
        execution = t.execution(this_host())
        runs = execution.mode if execution.mode != "unavailable" else f"no: {execution.reason}"
        if execution.mode == "emulated":
            runs = f"emulated ({execution.reason})"
        rows.append((t.name, t.triple, cpu, lanes, str(t.vector_registers), runs))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    try:
        print(f"host = {host_target(this_host()).name}")
    except KernelError as err:
        print(f"host = none ({err})")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from autoconfig.demo import run_model_demo

    if args.bench < 1:
        raise AutoconfigError(f"--bench must be >= 1, got {args.bench}")
    return 0 if run_model_demo(args.model, args.threads, args.bench) else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from autoconfig.bench import bench, check_peers

    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    check_peers(peers)
    if args.runs < 1:
        raise AutoconfigError(f"--runs must be >= 1, got {args.runs}")
    if not args.model.is_file():
        raise AutoconfigError(f"cannot read model {args.model}: no such file")
    return 0 if bench(args.model, args.threads, tuple(peers), args.runs, shapes=dict(args.shape)) else 1


def _cmd_lower(args: argparse.Namespace) -> int:
    from autoconfig.fileio import check_output, read_text, write_atomically
    from kernels.lower import compile_object, parse_mlir, to_llvm_ir
    from autoconfig.probe.host import named_target

    target = named_target(args.target, args.vlen)
    if args.output is not None:
        check_output(args.output)
    text = read_text(args.input, "MLIR file")
    llvm_ir = to_llvm_ir(parse_mlir(text, str(args.input)))
    if args.emit == "llvm":
        result: bytes | str = llvm_ir
    else:
        with tempfile.TemporaryDirectory(prefix="autoconfig-lower-") as tmp:
            obj = compile_object(llvm_ir, target, Path(tmp), assembly=args.emit == "asm")
            result = obj.assembly if args.emit == "asm" else obj.path.read_bytes()
    if args.output is None:
        if isinstance(result, bytes):
            raise AutoconfigError("--emit obj needs -o FILE (an object file is binary)")
        sys.stdout.write(result)
    else:
        write_atomically(args.output, result)
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    from autoconfig.fileio import check_output
    from autoconfig.probe import default_profile_path, probe, read_host_static
    from autoconfig.profile import save_profile, summary

    out = args.out or default_profile_path(read_host_static().model)
    check_output(out)  # before measuring for a minute
    profile = probe(quick=args.quick, progress=not args.no_progress)
    save_profile(profile, out)
    print(summary(profile))
    print(f"wrote {out}")
    return 0


def _cmd_profile_show(args: argparse.Namespace) -> int:
    from autoconfig.probe import implausible_scaling
    from autoconfig.profile import load_profile, summary

    profile = load_profile(args.path)
    print(summary(profile))
    figures = [(f.vector_bits, float(f.throughput), float(f.throughput_all)) for f in profile.fma]
    for why in implausible_scaling(figures).values():
        print(f"  warning: {why}: the all-thread figure looks disturbed; probe again")
    return 0


def _cmd_explain_matmul(args: argparse.Namespace) -> int:
    from autoconfig.matmul import plan_matmul

    choice = plan_matmul(args.m, args.n, args.k, profile=args.profile, target=args.target,
                         threads=args.threads)  # fmt: skip
    print(choice.explain())
    return 0


def _dims(text: str, count: int, what: str) -> list[int]:
    """'1x64x56x56' -> [1, 64, 56, 56], or an error naming `what`."""
    parts = text.lower().split("x")
    if len(parts) != count or not all(p.isdigit() for p in parts):
        raise AutoconfigError(f"{what} must be {count} sizes joined by 'x' (e.g. {'x'.join(['3'] * count)}), got {text!r}")
    return [int(p) for p in parts]


def _pair_or_one(values: list[int] | None, name: str) -> tuple[int, int] | None:
    if values is None:
        return None
    if len(values) not in (1, 2):
        raise AutoconfigError(f"--{name} takes one value or two (height width), got {len(values)}")
    return (values[0], values[-1])


def _cmd_explain_conv(args: argparse.Namespace) -> int:
    from autoconfig.conv import plan_conv2d

    pads = args.pad
    if pads is not None and len(pads) not in (1, 2, 4):
        raise AutoconfigError(f"--pad takes 1, 2 (height width) or 4 (top left bottom right) values, got {len(pads)}")
    if pads is not None:
        pads = pads * 4 if len(pads) == 1 else pads * 2 if len(pads) == 2 else pads
    choice = plan_conv2d(_dims(args.input, 4, "the input shape (NxCxHxW)"),
                         _dims(args.weight, 4, "the weight shape (CoutxCin/groupxKHxKW)"),
                         strides=_pair_or_one(args.stride, "stride"), pads=pads,
                         dilations=_pair_or_one(args.dilation, "dilation"), group=args.group,
                         profile=args.profile, target=args.target, threads=args.threads)  # fmt: skip
    print(choice.explain())
    return 0


def _cmd_zoo(args: argparse.Namespace) -> int:
    from autoconfig.graph import zoo

    zoo.write(args.name, args.out)
    print(f"wrote {args.out}")
    return 0


def _cmd_fuse(args: argparse.Namespace) -> int:
    import json

    from autoconfig import checks
    from autoconfig.resolve import resolve_profile
    from autoconfig.fusion import plan
    from autoconfig.fusion.classify import mapping
    from autoconfig.graph.onnx_import import load_onnx

    graph = load_onnx(args.model, dict(args.shape))
    profile = resolve_profile(args.profile)
    threads = checks.threads_on(checks.threads(args.threads), profile)
    result = plan(graph, profile, args.strategy, threads=threads)
    kernels = [
        {"kernel": i, "ops": [graph.nodes[v].op for v in group],
         "nodes": [graph.nodes[v].name for v in group],
         "mapping": [mapping(graph.nodes[v], graph).value for v in group]}
        for i, group in enumerate(sorted(result.groups, key=min))
    ]  # fmt: skip
    summary = {
        "model": str(args.model), "strategy": result.strategy, "operators": len(graph.nodes),
        "kernels": len(result.groups), "fusion_ratio": round(result.ratio(graph), 3),
        "traffic_bytes": result.traffic_bytes, "cost_us": round(result.cost_ns / 1e3, 1),
        "search_seconds": round(result.search_seconds, 3),
    }  # fmt: skip
    if args.json:
        print(json.dumps({**summary, "groups": kernels}, indent=1))
        return 0
    for k in kernels:
        print(f"kernel {k['kernel']:>3}: {' + '.join(k['ops'])}")
    print(f"{summary['operators']} operators -> {summary['kernels']} kernels, fusion ratio "
          f"{summary['fusion_ratio']:.2f}; predicted traffic {result.traffic_bytes / 1e6:.1f} MB, "
          f"cost {summary['cost_us']:.0f} µs (compute included); search {summary['search_seconds']:.2f} s ({result.strategy})")  # fmt: skip
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    import time

    from autoconfig.compiler import compile_model
    from autoconfig.probe.host import named_target

    start = time.perf_counter()
    target = named_target(args.target, args.vlen) if args.vlen is not None else args.target
    manifest = compile_model(args.model, args.out, profile=args.profile, target=target, fusion=args.fusion,
                     threads=args.threads, progress=not args.no_progress, fast_winograd=args.fast_winograd,
                     shapes=dict(args.shape))  # fmt: skip
    objects = manifest["kernel_objects"]
    print(f"built {args.out}: {len(manifest['kernels'])} kernels for {manifest['target']} "
          f"({objects['compiled']} compiled, {objects['cached']} from the cache) in "
          f"{time.perf_counter() - start:.1f} s; predicted {manifest['predicted_ns'] / 1e3:.0f} µs; "
          f"arena {manifest['arena_bytes'] / 1e6:.1f} MB; see {args.out / 'report.md'}")  # fmt: skip
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import io

    import numpy as np

    from autoconfig.accuracy import sample_inputs
    from autoconfig.fileio import check_output, write_atomically
    from autoconfig.loader import load

    model = load(args.dir)
    if args.output is not None:
        check_output(args.output)
    inputs = {}
    for item in args.input or []:
        name, sep, path = item.partition("=")
        if not sep:
            raise AutoconfigError(f"--input takes NAME=FILE.npy, got {item!r}")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise AutoconfigError(f"cannot read input {name!r} from {path}: {err}") from None
    sampled = sample_inputs(model.manifest["inputs"])
    for name, shape in model.inputs:  # the inputs not given: random, to time the model
        if name not in inputs and (args.bench or not args.input):
            inputs[name] = sampled[name]
    outputs, median_ns, _ = model.run(inputs, repeat=max(1, args.bench or 1))
    if args.output is not None:
        buffer = io.BytesIO()
        np.savez(buffer, **outputs)
        write_atomically(args.output, buffer.getvalue())
        print(f"wrote {args.output}")
    for name, value in outputs.items():
        kind = "" if value.dtype == np.float32 else f"{value.dtype} "
        print(f"{name}: {kind}shape {value.shape}, min {value.min():.4g}, max {value.max():.4g}")
    if args.bench:
        print(f"median of {args.bench} runs: {median_ns / 1e6:.3f} ms "
              f"(predicted {model.manifest['predicted_ns'] / 1e6:.3f} ms)")  # fmt: skip
        placement = model.placement()
        if placement:
            print(placement)
    if args.per_kernel:
        runs = max(1, args.bench)
        kernel_ns = model.kernel_medians(inputs, runs)
        print(f"{'kernel':<28} {'choice':<44} {'measured µs':>12} {'predicted µs':>13}   (median of {runs} run(s))")
        for k, measured in zip(model.manifest["kernels"], kernel_ns):
            print(f"{k['name'][:28]:<28} {k['choice'][:44]:<44} {measured / 1e3:>12.1f} {k['predicted_ns'] / 1e3:>13.1f}")
        print(model.products_share(kernel_ns))
        print(model.prediction_accuracy(kernel_ns, median_ns))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``autoconfig`` command and its subcommands."""
    parser = argparse.ArgumentParser(
        prog="autoconfig",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"autoconfig {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_targets(sub)
    _add_demo(sub)
    _add_bench(sub)
    _add_lower(sub)
    _add_probe(sub)
    _add_profile(sub)
    _add_explain(sub)
    _add_zoo(sub)
    _add_fuse(sub)
    _add_build(sub)
    _add_run(sub)
    return parser


def _add_targets(sub: argparse._SubParsersAction) -> None:
    """`autoconfig targets`: the targets and how this host runs each."""
    from autoconfig.probe.host import TARGET_NAMES

    targets = sub.add_parser(
        "targets",
        help="list the targets and how this host runs each",
        description="List the code-generation targets: LLVM triple, CPU and features, "
        "f32 lanes per vector register, vector registers, and whether this host runs "
        "the code natively, under qemu-user, or not at all (with the reason). With --run, "
        "generate, build and run the FMA kernel on each target and check it against numpy "
        "(one line per target; exit status 1 if any result is wrong).",
    )
    _add_target_options(targets)
    targets.set_defaults(run=_cmd_targets)

    targets.add_argument("--run", action="store_true", dest="check",
                         help="also generate, build and run the FMA kernel on each target and check it against numpy")
    targets.add_argument(
        "--target", action="append", default=[], choices=TARGET_NAMES,
        metavar="T", help=f"with --run: only this target (repeatable; one of {', '.join(TARGET_NAMES)})",
    )  # fmt: skip
    targets.add_argument("--n", type=int, default=4097, help="with --run: array length (default 4097)")


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """`autoconfig bench`: a user's model built and run next to the peers."""
    bench = sub.add_parser(
        "bench", help="build an ONNX model for this machine and time it next to onnxruntime and OpenVINO",
        description="Build MODEL for this machine (reusing the kernel cache), run it on random inputs of both "
        "signs, and print the build time, its median latency next to each peer's (each in its own process, "
        "same inputs and thread count; a peer not installed says so), and every output's max error against "
        "onnxruntime's. Exit status 1 if our outputs disagree with onnxruntime's.",
    )  # fmt: skip
    bench.add_argument("model", type=Path, metavar="MODEL.onnx", help="the model (float32)")
    _add_shape_option(bench)
    bench.add_argument("--threads", type=int, default=None, help="most threads (default: all cores)")
    bench.add_argument("--peers", default="onnxruntime,openvino", metavar="P[,P]",
                       help="runtimes to run next to ours (default onnxruntime,openvino)")  # fmt: skip
    bench.add_argument("--runs", type=int, default=20, metavar="N", help="runs per latency median (default 20)")
    bench.set_defaults(run=_cmd_bench)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    """`autoconfig demo`: the main job on a zoo model."""
    demo = sub.add_parser(
        "demo",
        help="the main job: build a zoo model for this machine and run it next to onnxruntime",
        description="Take this machine's profile (probed quickly and cached the first time), build the "
        "zoo model (MobileNet-V1 by default) with it, run it, and print the build time, its latency next "
        "to onnxruntime's on the same input and thread count (each in its own process), and the max "
        "error against onnxruntime. Exit status 1 if the outputs disagree.",
    )
    demo.add_argument("--model", choices=("vgg16", "mobilenet_v1", "efficientnet_b0", "yolov4"),
                      default="mobilenet_v1", help="the zoo model (default mobilenet_v1)")
    demo.add_argument("--threads", type=int, default=None, help="most threads (default: all cores)")
    demo.add_argument("--bench", type=int, default=20, metavar="N", help="runs per latency median (default 20)")
    demo.set_defaults(run=_cmd_demo)


def _add_lower(sub: argparse._SubParsersAction) -> None:
    """`autoconfig lower`: an MLIR file compiled for a target."""
    from autoconfig.probe.host import TARGET_NAMES

    lower = sub.add_parser(
        "lower",
        help="compile an MLIR file for a target",
        description="Lower an MLIR module written with the func, scf, vector, memref, "
        "arith, math and affine dialects to LLVM IR, assembly or an object file for "
        "the target. The module is verified first; errors name the first diagnostic.",
    )
    lower.add_argument("input", type=Path, help="the .mlir file")
    lower.add_argument("--target", required=True, metavar="T", help=", ".join(TARGET_NAMES))
    lower.add_argument(
        "--emit", choices=("llvm", "asm", "obj"), default="asm",
        help="what to produce (default asm)",
    )  # fmt: skip
    lower.add_argument(
        "-o", "--output", type=Path, default=None,
        help="output file, written atomically (default: stdout for llvm and asm)",
    )  # fmt: skip
    _add_target_options(lower)
    lower.set_defaults(run=_cmd_lower)


def _add_probe(sub: argparse._SubParsersAction) -> None:
    """`autoconfig probe`: this machine's hardware profile."""
    probe = sub.add_parser(
        "probe",
        help="measure this machine and write its hardware profile",
        description="Write this machine's hardware profile (YAML): ISA, features, vector "
        "unit, cores, clock and cache geometry from py-cpuinfo, procfs and sysfs; FMA "
        "latency and throughput per vector width and the load-bandwidth curve (1 thread "
        "and all threads) measured by generated micro-benchmarks. About 20 s; --quick "
        "about 10 s. The file is written atomically: an interrupted probe leaves none.",
    )
    probe.add_argument("--quick", action="store_true", help="fewer, shorter measurements")
    probe.add_argument(
        "--out", type=Path, default=None,
        help="profile path (default hwprofiles/<cpu-model-slug>.yaml)",
    )  # fmt: skip
    probe.add_argument("--no-progress", action="store_true", help="no progress bar")
    probe.set_defaults(run=_cmd_probe)


def _add_profile(sub: argparse._SubParsersAction) -> None:
    """`autoconfig profile show`: a profile checked and summarized."""
    profile = sub.add_parser(
        "profile", help="inspect hardware profiles", description="Inspect hardware profiles."
    )
    profile_sub = profile.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    show = profile_sub.add_parser(
        "show",
        help="validate a profile and print its summary",
        description="Validate a hardware profile and print peak GFLOP/s per core and in "
        "total, and load bandwidth per memory level.",
    )
    show.add_argument("path", type=Path, help="the profile (.yaml)")
    show.set_defaults(run=_cmd_profile_show)


def _add_explain(sub: argparse._SubParsersAction) -> None:
    """`autoconfig explain matmul|conv`: a model's choice for one operator."""
    explain = sub.add_parser(
        "explain", help="show the model's choice for an operator and why",
        description="Print the algorithm and parameters the analytic model chooses for an "
        "operator, the predicted GFLOP/s, and every parameter and cost term with its "
        "reason. Nothing is built or timed.",
    )  # fmt: skip
    explain_sub = explain.add_subparsers(dest="operator", metavar="OPERATOR", required=True)
    matmul = explain_sub.add_parser(
        "matmul", help="C[MxN] = A[MxK] . B[KxN]", description="Explain the matmul choice."
    )
    for dim in ("m", "n", "k"):
        matmul.add_argument(dim, type=int, metavar=dim.upper())
    matmul.set_defaults(run=_cmd_explain_matmul)
    conv = explain_sub.add_parser(
        "conv", help="2-D convolution (ONNX Conv) of one layer",
        description="Explain the convolution choice for a layer given by its input shape "
        "NxCxHxW and weight shape CoutxCin/groupxKHxKW, e.g. "
        "'autoconfig explain conv 1x64x56x56 64x64x3x3 --stride 1 --pad 1'.",
    )  # fmt: skip
    conv.add_argument("input", metavar="INPUT", help="input shape NxCxHxW")
    conv.add_argument("weight", metavar="WEIGHT", help="weight shape CoutxCin/groupxKHxKW")
    conv.add_argument("--stride", type=int, nargs="+", default=None, metavar="S", help="1 or 2 values (default 1)")
    conv.add_argument("--pad", type=int, nargs="+", default=None, metavar="P",
                      help="1, 2 (height width) or 4 (top left bottom right) values (default 0)")  # fmt: skip
    conv.add_argument("--dilation", type=int, nargs="+", default=None, metavar="D", help="1 or 2 values (default 1)")
    conv.add_argument("--group", type=int, default=1, help="groups (default 1; C for depthwise)")
    conv.set_defaults(run=_cmd_explain_conv)
    for operator in (matmul, conv):
        operator.add_argument("--profile", type=Path, default=None,
                            help="hardware profile (default: this machine's)")  # fmt: skip
        operator.add_argument("--target", default=None, metavar="T",
                              help="code-generation target (default: the profile's)")  # fmt: skip
        operator.add_argument("--threads", type=int, default=None,
                              help="most threads to use (default: all cores; the model may use fewer)")  # fmt: skip


def _add_zoo(sub: argparse._SubParsersAction) -> None:
    """`autoconfig zoo`: a zoo network written as ONNX."""
    zoo_cmd = sub.add_parser(
        "zoo", help="write a model-zoo network as ONNX",
        description="Write VGG-16, MobileNet-V1, EfficientNet-B0 or YOLO-V4 (architectures "
        "as published, deterministic random weights, batch 1) as an ONNX file.",
    )  # fmt: skip
    zoo_cmd.add_argument("name", metavar="NAME", help="vgg16, mobilenet_v1, efficientnet_b0 or yolov4")
    zoo_cmd.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    zoo_cmd.set_defaults(run=_cmd_zoo)


def _add_fuse(sub: argparse._SubParsersAction) -> None:
    """`autoconfig fuse`: a model's fusion plan."""
    fuse = sub.add_parser(
        "fuse", help="plan operator fusion for an ONNX model",
        description="Import an ONNX model, classify its operators by mapping type and plan "
        "which to fuse: dp (minimum-cost legal plan), greedy (TVM's rules) or none. Prints "
        "the kernels, the fusion ratio (operators / kernels), predicted memory traffic and "
        "the plan's cost under the profile's cost model.",
    )  # fmt: skip
    _add_model_arguments(fuse)
    fuse.add_argument("--strategy", choices=("dp", "greedy", "none"), default="dp")
    fuse.add_argument("--threads", type=int, default=None,
                      help="the threads the plan prices its kernels on, as a build would run them (default: all cores)")
    fuse.add_argument("--json", action="store_true", help="machine-readable output")
    fuse.set_defaults(run=_cmd_fuse)


def _add_build(sub: argparse._SubParsersAction) -> None:
    """`autoconfig build`: a model compiled into a directory."""
    from autoconfig.probe.host import TARGET_NAMES

    build = sub.add_parser(
        "build", help="compile an ONNX model into a library of fused kernels",
        description="Import an ONNX model, plan its fusion, let the analytic models choose every "
        "kernel's algorithm and parameters from the profile, generate and compile the kernels, "
        "and write DIR: a library with one entry point that runs the whole model, its C header, "
        "the weights, manifest.json, each kernel's MLIR, and report.md (the plan and the reason "
        "for every choice). A failed build leaves no DIR behind.",
    )  # fmt: skip
    _add_model_arguments(build)
    build.add_argument("--out", type=Path, required=True, metavar="DIR", help="the directory to write (replaced)")
    build.add_argument("--target", choices=TARGET_NAMES, default=None, help="default: the profile's widest ISA")
    _add_target_options(build)
    build.add_argument("--fusion", choices=("dp", "greedy", "none"), default="dp",
                       help="dp: minimum-cost plan; greedy: TVM's rules; none: one kernel per operator")  # fmt: skip
    build.add_argument("--threads", type=int, default=None, help="most threads (default: all cores)")
    build.add_argument("--fast-winograd", action="store_true",
                       help="let 3x3 layers use Winograd F(4,3): fewer multiplies than F(2,3), but about 7x a "
                            "direct sum's rounding error, which deep networks amplify (default: F(2,3) at most)")
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    build.set_defaults(run=_cmd_build)


def _add_run(sub: argparse._SubParsersAction) -> None:
    """`autoconfig run`: a built model run."""
    run = sub.add_parser(
        "run", help="run a built model",
        description="Load a directory written by 'autoconfig build' (checked against its manifest), "
        "run the model and print its outputs' shapes and ranges. Inputs not given are random "
        "(for timing: floats of both signs, int64 ids below their table's rows, int64 masks 1 "
        "then 0 over the last eighth). A cross-target model runs under qemu-user.",
    )  # fmt: skip
    run.add_argument("dir", type=Path, metavar="DIR", help="the built model")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                     help="an input (repeatable): float32, or int64 where the manifest says so")
    run.add_argument("--output", type=Path, default=None, metavar="FILE.npz", help="write the outputs here")
    run.add_argument("--bench", type=int, default=0, metavar="N",
                     help="run N times and print the median time (and, for a model built for several "
                     "threads, which of its two memory placements the calls ran: see README)")
    run.add_argument("--per-kernel", action="store_true",
                     help="each kernel's measured time (median of the runs) next to its predicted time, "
                     "their rank correlation and the totals' ratio, and the matrix products' share of "
                     "the time and GFLOP/s against the profile's peak")  # fmt: skip
    run.set_defaults(run=_cmd_run)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``autoconfig`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return reraised(args.run)(args)
    except AutoconfigError as err:
        print(f"autoconfig: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("autoconfig: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `autoconfig explain ... | head`
        sys.stderr.close()
        return 0
    except Exception as err:  # a bug: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        detail = " ".join(str(err).split())[:200]
        print(f"autoconfig: internal error: {type(err).__name__}: {detail} "
              f"(run with {DEBUG_ENV}=1 for the traceback)", file=sys.stderr)  # fmt: skip
        return 2


if __name__ == "__main__":
    sys.exit(main())
