#!/usr/bin/env python3
"""Does each ONNX model build, and does it give onnxruntime's answer? One line per model.

Each model is built for this machine (or --profile/--target) in a fresh process (a
crash is that model's line, not the end of the run), run on a standard-normal input
(both signs), and every output held to onnxruntime's within ERROR_BOUND of its range.
A model that does not build shows the compiler's one-line error. Int64 inputs are token
ids within their table or an attention mask with padding (`accuracy.sample_input`). Nothing is timed but
the build.

Usage: python scripts/check_models.py MODEL.onnx ... [--profile P] [--target T]
       [--fusion dp] [--threads N] [--json F] [--shape NAME=SIZE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from autoconfig.cli import shape_option


def check(path: str, profile: str | None, target: str | None, fusion: str, threads: int | None,
          shapes: dict | None = None) -> dict:  # fmt: skip
    """Build, run and compare one model (in the calling process), `shapes` fixing its
    dynamic dimensions."""
    import autoconfig
    from autoconfig.accuracy import ERROR_BOUND, onnxruntime_session, output_error, sample_inputs
    from autoconfig.errors import AutoconfigError

    with tempfile.TemporaryDirectory(prefix="autoconfig-check-") as tmp:
        start = time.perf_counter()
        try:
            manifest = autoconfig.compile_model(path, Path(tmp) / "built", profile=profile, target=target,
                                                fusion=fusion, threads=threads, shapes=shapes)  # fmt: skip
        except AutoconfigError as err:
            return {"model": path, "status": "refused", "why": str(err), "build_s": time.perf_counter() - start}
        build_s = time.perf_counter() - start
        loaded = autoconfig.load(Path(tmp) / "built")
        feeds = sample_inputs(manifest["inputs"])
        ours = loaded(feeds)
    expected = onnxruntime_session(path, 1).run(None, feeds)
    errors = [output_error(value, want) for value, want in zip(ours.values(), expected, strict=True)]
    worst = max(error / spread for error, spread in errors)
    return {"model": path, "status": "ok" if worst <= ERROR_BOUND else "WRONG", "relative_error": worst,
            "kernels": len(manifest["kernels"]), "build_s": build_s}  # fmt: skip


def line(result: dict) -> str:
    name = Path(result["model"]).stem
    if result["status"] in ("ok", "WRONG"):
        return (f"{name:<44} {result['status']:<7} max error {result['relative_error']:.1e} of the range, "
                f"{result['kernels']} kernels, built in {result['build_s']:.1f} s")  # fmt: skip
    return f"{name:<44} {result['status']:<7} {result['why']}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", help="ONNX files")
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--target", default=None, help="target (default: the profile's widest)")
    parser.add_argument("--fusion", default="dp", choices=("dp", "greedy", "none"))
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    parser.add_argument("--shape", action="append", default=[], type=shape_option, metavar="NAME=SIZE",
                        help="fix a dynamic dimension of every model, as autoconfig build --shape")  # fmt: skip
    args = parser.parse_args(argv)
    results = []
    for path in args.models:
        try:
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                result = pool.submit(check, path, args.profile, args.target, args.fusion, args.threads,
                                     dict(args.shape)).result()  # fmt: skip
        except Exception as err:  # a crash of the build or the run is this model's result
            result = {"model": path, "status": "crashed", "why": f"{type(err).__name__}: {err}"}
        results.append(result)
        print(line(result), flush=True)
    good = sum(r["status"] == "ok" for r in results)
    print(f"{good} of {len(results)} build and match onnxruntime")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if good == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
