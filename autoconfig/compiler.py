"""The compiler: an ONNX file to a built model directory, as named passes over the
graph, run in order by `compile_model` (the Python API's `autoconfig.compile_model`
and `autoconfig build` both call it). Each pass, what it reads and what it writes:

1. fold (`graph.fold`, run by the import): every node computable before the model runs
   (constants, shape arithmetic) computed by onnx's reference implementation, with
   onnx's shape inference in between, until nothing more folds.
2. import (`graph.onnx_import`): what is left to the graph IR with static shapes;
   unsupported input refused in one line naming the nodes.
   Then simplify (`graph.simplify`): no-ops dropped, BatchNormalization into its Conv,
   linear and cubic Resize as matrix products.
3. fusion plan (`fusion`): the graph's nodes grouped into kernels (dp: the cheapest
   legal plan under the cost model; greedy: TVM's rules; none), each group one the
   code generator can emit (`fusion.classify.emittable_groups`).
4. lowering (`build`): per group in dependency order, the layout each tensor is held
   in (NCHW, NCHW[c], NHWC), the operator model's choice of algorithm and parameters
   (`models`), the kernel's generated MLIR (`kernels`), and the program of calls; then
   the memory plan: every buffer placed in one arena by its lifetime.
5. link (`artifact.write_artifact`): each distinct module compiled to an object (in
   parallel, through the kernel cache), linked with the runner into one library.
6. artifact (`artifact`): the weights, the C header, the manifest and report.md,
   written in a temporary directory and renamed into place.
"""

from __future__ import annotations

from pathlib import Path

from autoconfig import checks
from autoconfig.errors import AutoconfigError, reraised


@reraised
def compile_model(model: Path | str, out: Path | str, *, profile=None, target=None, fusion: str = "dp",
                  threads: int | None = None, progress: bool = False, fast_winograd: bool = False,
                  shapes: dict | None = None) -> dict:  # fmt: skip
    """`autoconfig build`: run the passes on the ONNX file `model` into directory `out`;
    returns the manifest. `progress` shows a bar while kernels compile (on stderr);
    `fast_winograd` lets 3x3 layers use Winograd F(4,3), faster but less accurate;
    `shapes` fixes dynamic dimensions (`graph.onnx_import.Shapes`)."""
    from tqdm import tqdm

    from autoconfig.artifact import write_artifact
    from autoconfig.build import build_model
    from autoconfig.decisions import decisions_of
    from autoconfig.fusion import STRATEGIES, plan
    from autoconfig.graph.onnx_import import load_onnx
    from autoconfig.resolve import resolve
    from kernels.cache import default_cache

    if fusion not in STRATEGIES:
        raise AutoconfigError(f"unknown fusion strategy {fusion!r}: {', '.join(STRATEGIES)}")
    out = Path(out)
    if not out.parent.is_dir():  # before the slow work, not after
        raise AutoconfigError(f"cannot write {out}: directory {out.parent} does not exist")
    threads = checks.threads(threads)
    prof, tgt = resolve(profile, target)
    cache = default_cache()
    try:
        graph = load_onnx(model, shapes)  # 1-2: import, simplify
        threads = checks.threads_on(threads, prof)
        fusion_plan = plan(graph, prof, fusion, decisions_of(cache), threads)  # 3
        built = build_model(graph, prof, tgt, fusion, threads, cache, fusion_plan, fast_winograd)  # 4
    except AutoconfigError as err:  # the file (unless the message names it), then the node and operator
        name = Path(model).name
        raise AutoconfigError(str(err) if name in str(err) else f"{name}: {err}") from None
    # (delay: a warm build, done in well under a second, shows no empty bar)
    with tqdm(desc="compiling kernels", unit="kernel", disable=not progress, leave=False, delay=0.5) as bar:
        def tick(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return write_artifact(built, out, cache, progress=tick)  # 5-6: link, artifact
