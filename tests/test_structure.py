"""The code's shape, checked: the import graph of `autoconfig/` and `kernels/` has no
cycle and no arrow from `kernels/` to `autoconfig/` (the code generator stands alone;
decisions read it), no function is longer than a reader can hold, and no docstring or
comment is a lab notebook: measured evidence (which host, before and after) belongs
in docs/calibration.md."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGES = ("autoconfig", "kernels")
LONGEST_FUNCTION = 80
HOST = re.compile(r"Zen ?\d|Xeon|Graviton|EPYC|Neoverse|SpacemiT|\bX60\b|\bVM\b|development machine")
UNIT = r"(?:µs|us|ms|ns|s|GFLOP/s|GB/s|%|KB|MB)"
TIMING = re.compile(rf"\d[\d.]*\s*{UNIT}?\s*(?:→|->)\s*\d[\d.]*\s*{UNIT}(?![A-Za-z])")
"""A host named, or a before -> after figure with its unit (a shape such as 3->32
channels is not one)."""


def modules() -> dict[str, Path]:
    """Every module of the two packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports anywhere in its text (a lazy import inside a
    function and one for type checking only count too: each is still a dependency)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as the modules along it, or [] when there is none."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node], path[len(path):] = "open", [node]
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    assert cycle(import_graph()) == []


def test_kernels_import_nothing_from_autoconfig():
    graph = import_graph()
    arrows = sorted(f"{m} -> {t}" for m, targets in graph.items() if m.startswith("kernels")
                    for t in targets if t.startswith("autoconfig"))  # fmt: skip
    assert arrows == []


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LONGEST_FUNCTION:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring in `path`."""
    text = path.read_text()
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline)
             if t.type == tokenize.COMMENT]  # fmt: skip
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            found.append((node.lineno, node.value.value))
    return found


def diary_entries(path: Path) -> list[str]:
    """'line: match' for each comment or docstring naming a host or quoting a timing."""
    return [f"{line}: {match.group(0)!r}" for line, text in prose(path)
            for match in (HOST.search(text), TIMING.search(text)) if match]  # fmt: skip


def test_the_diary_check_finds_hosts_and_timings(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('"""Measured on the Zen 5 VM."""\n# build 102 -> 90 ms\nx = 1  # 3->32 channels\n')
    assert sorted(diary_entries(sample)) == ["1: 'Zen 5'", "2: '102 -> 90 ms'"]


def test_no_docstring_or_comment_names_a_host_or_quotes_a_timing():
    entries = [f"{path.relative_to(ROOT)}:{entry}" for path in modules().values() for entry in diary_entries(path)]
    assert entries == []
