"""The results page, docs/results.md, from the saved measurement files.

    python scripts/results.py            # writes docs/results.md and docs/results/*.png
    python scripts/results.py --prune    # also deletes the superseded files (git keeps them)
    python scripts/results.py --headline # also prints the README's table of headline results

Per host (profile) and benchmark, the latest run: the most recently committed file
named `<profile>.<date>.<benchmark>[.<commit>].json` (a file whose tag is more than a
commit, e.g. `.warm-caches`, is a special run the page does not take as the latest;
`bench_models_<set>` is a bench_models run on another set of models, shown beside the
zoo's, which alone makes the README's table).
Model benchmarks get a table and a plot per thread count (each peer's latency, ours
with dp fusion first), with the predicted total and the rank correlation of predicted
and measured kernel times (the models' fidelity), and greedy/dp round by round where
the run has it; the other benchmarks their summary lines. Needs matplotlib (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import harness

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "hwprofiles" / "measurements"
PAGE = ROOT / "docs" / "results.md"
NAME = re.compile(r"^(?P<profile>[^.]+)\.(?:(?P<date>\d{4}-\d\d-\d\d)\.)?(?P<benchmark>[a-z_]+)(?:\.(?P<tag>.+))?\.(json|txt)$")
COMMIT_TAG = re.compile(r"^[0-9a-f]{7}$")


@dataclass(frozen=True)
class Run:
    path: Path
    profile: str
    date: str
    benchmark: str
    special: bool  # tagged with more than a commit: a partial or special run
    committed: int  # when git last committed the file (its mtime outside a checkout)

    def data(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.suffix == ".json" else {"host": {}}


def commit_time(path: Path) -> int:
    done = subprocess.run(["git", "log", "-1", "--format=%ct", "--", path.name], cwd=path.parent,
                          capture_output=True, text=True, check=False)  # fmt: skip
    return int(done.stdout.strip() or path.stat().st_mtime)


def runs(directory: Path) -> list[Run]:
    found = []
    for path in sorted(directory.iterdir()):
        match = NAME.match(path.name)
        if match:
            tag = match["tag"] or ""
            found.append(Run(path, match["profile"], match["date"] or "", match["benchmark"],
                             bool(tag) and not COMMIT_TAG.match(tag), commit_time(path)))  # fmt: skip
    return found


def latest(all_runs: list[Run]) -> dict[tuple[str, str], Run]:
    """The latest run per (profile, benchmark), special runs only where nothing else is."""
    best: dict[tuple[str, str], Run] = {}
    for run in all_runs:
        key = (run.profile, run.benchmark)
        if key not in best or (not run.special, run.date, run.committed) > (
                not best[key].special, best[key].date, best[key].committed):  # fmt: skip
            best[key] = run
    return best


def model_table(table: dict) -> list[str]:
    """One bench_models table (one thread count) as markdown: ms per peer, the
    predicted total and Spearman's rank correlation of the kernels' times."""
    peers = list(dict.fromkeys(peer for row in table["rows"] for peer in row["ms"]))
    lines = ["| model | " + " | ".join(f"{p} ms" for p in peers) + " | predicted ms | kernel rank corr. |",
             "|---" * (len(peers) + 3) + "|"]  # fmt: skip
    for row in table["rows"]:
        cells = [f"{row['ms'][p]:.2f}" if row["ms"].get(p) is not None else "—" for p in peers]  # — : failed or absent
        predicted, spearman = row.get("predicted_ms"), row.get("spearman")
        lines.append(f"| {row['model']} | " + " | ".join(cells)
                     + f" | {predicted:.2f} | {spearman:.2f} |" if predicted and spearman is not None
                     else f"| {row['model']} | " + " | ".join(cells) + " | — | — |")  # fmt: skip
    lines.append("")
    for peer in (p for p in peers if not p.startswith("autoconfig")):
        ratios = {row["model"]: row["ms"][peer] / row["ms"]["autoconfig-dp"] for row in table["rows"]
                  if row["ms"].get(peer) and row["ms"].get("autoconfig-dp")}  # fmt: skip
        if ratios:
            lowest = min(ratios, key=ratios.get)
            lines.append(f"{peer} over ours (dp): geomean {harness.geomean(list(ratios.values())):.2f} over {len(ratios)} models, lowest "
                         f"{ratios[lowest]:.2f} ({lowest}).  ")  # fmt: skip
    lines += [f"{fusion}/dp round by round, {row['model']}: {harness.round_by_round(ratios)}.  "
              for row in table["rows"] for fusion, ratios in row.get("by_round", {}).items() if ratios]
    return lines


def plot(table: dict, title: str, out: Path) -> None:
    """A bar chart of each model's latency per peer, relative to onnxruntime's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table["rows"]
    peers = list(dict.fromkeys(peer for row in rows for peer in row["ms"]))
    width = 0.8 / len(peers)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for i, peer in enumerate(peers):
        ratios = [(row["ms"].get(peer) or float("nan")) / (row["ms"]["onnxruntime"] or float("nan")) for row in rows]
        ax.bar([x + i * width for x in range(len(rows))], ratios, width, label=peer)
    ax.set_xticks([x + width * (len(peers) - 1) / 2 for x in range(len(rows))], [row["model"] for row in rows])
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_ylabel("latency / onnxruntime's")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


NO_SUMMARY = {"validate_matmul_model": "Measurements only: `python scripts/validate_matmul_model.py --measured "
                                        "FILE` scores the current model on them (regret and rank correlation per shape)."}


def summary_lines(run: Run, data: dict) -> list[str]:
    """A JSON run's summary lines, or a text run's last paragraph (its totals)."""
    if run.path.suffix == ".txt":
        return run.path.read_text().rstrip().split("\n\n")[-1].splitlines()
    return [line.rstrip() for line in data.get("summary", []) if line.strip()]


def section(run: Run, images: Path) -> list[str]:
    data = run.data()
    host = data.get("host", {})
    where = (f"`lscpu` model name \"{host['model_name']}\", {host.get('cpus', '?')} CPUs, commit {host.get('commit')}, "
             if host else "")  # a text run names its host in the file, its commit in the name
    head = [f"### {run.benchmark}", "", f"`{run.path.relative_to(ROOT)}`: {where}{run.date or 'undated'}.", ""]
    if not run.benchmark.startswith("bench_models"):  # bench_models_<set>: a run on another set of models
        summary = summary_lines(run, data)
        return head + (["```", *summary, "```", ""] if summary else [NO_SUMMARY.get(run.benchmark, "(no summary)"), ""])
    for table in data["tables"]:
        png = images / f"{run.profile}.{run.benchmark}.{table['threads']}t.png"
        plot(table, f"{run.profile}, {table['threads']} thread(s)", png)
        head += [f"{table['threads']} thread(s), median ms:", "", *model_table(table), "",
                 f"![{run.profile} at {table['threads']} thread(s)](results/{png.name})", ""]  # fmt: skip
    return head


def headline(chosen: dict[tuple[str, str], Run]) -> list[str]:
    """The README's table: per host's latest model run and thread count, onnxruntime's
    latency over ours (dp fusion) per model, with the run's date and commit."""
    lines = []
    for (profile, benchmark), run in sorted(chosen.items()):
        if benchmark != "bench_models":
            continue
        data = run.data()
        for table in data["tables"]:
            if not lines:
                lines = ["| host (`lscpu`, profile) | threads | " + " | ".join(r["model"] for r in table["rows"])
                         + " | date, commit |", "|---" * (len(table["rows"]) + 3) + "|"]  # fmt: skip
            ratios = [f"{r['ms']['onnxruntime'] / r['ms']['autoconfig-dp']:.2f}x" if r["ms"]["onnxruntime"] else "—"
                      for r in table["rows"]]  # fmt: skip
            lines.append(f"| {data['host']['model_name']}, {profile} | {table['threads']} | " + " | ".join(ratios)
                         + f" | {run.date}, {data['host']['commit']} |")  # fmt: skip
    return lines


def page(chosen: dict[tuple[str, str], Run], images: Path) -> str:
    lines = ["# Results", "",
             "The latest saved run per host and benchmark, generated by `python scripts/results.py` from",
             "`hwprofiles/measurements/` (git keeps the earlier runs). Each run names the host as `lscpu`",
             "does and the commit it measured. Benchmarks and their protocol: the scripts in `scripts/`.", ""]  # fmt: skip
    for profile in sorted({p for p, _ in chosen}):
        lines += [f"## {profile}", ""]
        for (p, _), run in sorted(chosen.items()):
            if p == profile:
                lines += section(run, images)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prune", action="store_true", help="delete the runs the page does not show")
    parser.add_argument("--headline", action="store_true", help="also print the README's headline table")
    args = parser.parse_args()
    all_runs = runs(MEASUREMENTS)
    chosen = latest(all_runs)
    images = PAGE.parent / "results"
    images.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page(chosen, images))
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(chosen)} runs) and {images.relative_to(ROOT)}/")
    if args.headline:
        print("\n".join(headline(chosen)))
    if args.prune:
        kept = {run.path for run in chosen.values()}
        for run in all_runs:
            if run.path not in kept:
                run.path.unlink()
                print(f"deleted {run.path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
