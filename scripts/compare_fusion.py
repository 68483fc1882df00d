#!/usr/bin/env python3
"""Fusion plans on the model zoo: DP vs TVM's greedy rules vs no fusion.

For VGG-16, MobileNet-V1, EfficientNet-B0 and YOLO-V4 (batch 1, built in memory):
operators, kernels, fusion ratio (operators / kernels), predicted memory traffic,
the plan's cost under the profile's cost model, and the search time. All plans are
costed by the same model and checked for legality. When the peers' environment exists
(`make peers`), real TVM's kernels per inference come too (rows ``tvm`` and
``tvm-tune``: its default and MetaSchedule pipelines, see scripts/compare_tvm.py),
the fusion ratio over the same operator count. TVM's figure counts calls after its
lowering (reshapes are views); ours counts plan groups, where a Flatten and a Concat
written in place are groups too (`autoconfig build` calls fewer kernels: the
built libraries' counts are in scripts/compare_tvm.py's table).

Usage: python scripts/compare_fusion.py [--profile P] [--models vgg16,yolov4] [--peers PYTHON]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from autoconfig.resolve import resolve_profile
from autoconfig.fusion import plan
from autoconfig.fusion.planning import is_legal
from autoconfig.graph import zoo
from autoconfig.graph.onnx_import import import_model
from compare_tvm import tvm_fusion
from harness import PEERS_PYTHON, peers_python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default=None, help="hardware profile (default: this machine's)")
    parser.add_argument("--models", default=",".join(zoo.MODELS), help="comma-separated zoo names")
    parser.add_argument("--peers", default=None, help=f"the peers' Python for the TVM rows (default {PEERS_PYTHON})")
    args = parser.parse_args()
    profile = resolve_profile(args.profile)
    with_tvm = peers_python(args.peers) is not None
    print(f"profile {profile.name}; cost = launches + traffic + recompute + pressure (µs)"
          + ("" if with_tvm else "; no TVM rows: `make peers` has not been run"))  # fmt: skip
    print(f"{'model':<16}{'strategy':<9}{'ops':>5}{'kernels':>8}{'ratio':>7}{'traffic MB':>12}"
          f"{'cost µs':>10}{'search s':>10}  legal")  # fmt: skip
    ratios: dict[str, list[float]] = {"dp": [], "greedy": []}
    for name in args.models.split(","):
        model = zoo.build(name)
        graph = import_model(model, name)
        if with_tvm:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / f"{name}.onnx"
                path.write_bytes(model.SerializeToString())
                tvm = tvm_fusion(path, Path(tmp) / "tvm.log")
            for row, pipeline in (("tvm", "default"), ("tvm-tune", "tuning")):
                kernels = tvm[pipeline]["kernels"]
                print(f"{name:<16}{row:<9}{len(graph.nodes):>5}{kernels:>8}{len(graph.nodes) / kernels:>7.2f}"
                      f"{'':>32}{tvm[pipeline]['seconds']:>10.2f}", flush=True)  # fmt: skip
        for strategy in ("none", "greedy", "dp"):
            p = plan(graph, profile, strategy)
            legal = is_legal(graph, p.groups)
            if strategy in ratios:
                ratios[strategy].append(p.ratio(graph))
            print(f"{name:<16}{strategy:<9}{len(graph.nodes):>5}{len(p.groups):>8}{p.ratio(graph):>7.2f}"
                  f"{p.traffic_bytes / 1e6:>12.1f}{p.cost_ns / 1e3:>10.0f}{p.search_seconds:>10.2f}  "
                  f"{'yes' if legal is None else legal}", flush=True)  # fmt: skip
    mean = {k: sum(v) / len(v) for k, v in ratios.items()}
    geo = math.exp(sum(math.log(d / g) for d, g in zip(ratios["dp"], ratios["greedy"])) / len(ratios["dp"]))
    print(f"\nfusion ratio, mean over models: dp {mean['dp']:.2f}, greedy {mean['greedy']:.2f} "
          f"(dp/greedy {mean['dp'] / mean['greedy']:.2f}x; geomean of per-model ratios {geo:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
