"""Data movement ops (Transpose, Slice, Split, Pad, nearest Resize, Upsample) as
gathers along axes (`kernels.movement`), or as no kernel at all.

What an op moves where is not re-derived here: the operator's own numpy reference
runs once on the input's element indices, which gives, for every output element, the
input element it takes (or -1 for Pad's fill value). That map is then factored into
one table per output axis; the factorization is checked against the whole map, so
an op whose map is not a sum of per-axis terms is refused instead of mis-compiled.
An output that is one contiguous stretch of its input (a Split along channels at
batch 1, a Slice of leading rows) needs no kernel: it is a view at an offset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoconfig.errors import AutoconfigError
from autoconfig.graph.interpret import evaluate
from autoconfig.graph.ir import Graph, Node
from kernels.movement import FILL, GatherConfig
from kernels.target import Target

GATHER_VECTORS = 2
"""Vectors per step of a run's copy: two loads in flight hide a load's latency."""


@dataclass(frozen=True)
class Movement:
    """One output of a data movement op: a view of its input at `view_offset`, or a
    gather by `config` reading `tables` (int64, one per axis, concatenated)."""

    view_offset: int | None
    config: GatherConfig | None = None
    tables: np.ndarray | None = None


def source_maps(node: Node, graph: Graph) -> list[np.ndarray]:
    """For each output of `node`, the flat input index each element takes (-1: the fill)."""
    data = node.inputs[0]
    shape = graph.types[data].shape
    indices = np.arange(1, int(np.prod(shape, dtype=np.int64)) + 1, dtype=np.int64).reshape(shape)
    args: list[np.ndarray | None] = [indices]
    for i, name in enumerate(node.inputs[1:], start=1):
        if name and not graph.is_constant(name):
            raise AutoconfigError(f"node {node.name!r} ({node.op}): input {i} computed at run time is not generated")
        args.append(np.asarray(graph.constants[name]) if name else None)
    if node.op == "Pad" and len(args) > 2:
        args[2] = None  # the fill marks itself as index 0
    return [np.asarray(out, np.int64) - 1 for out in evaluate(node, args)]


def fill_value(node: Node, graph: Graph) -> float:
    """The value Pad writes outside its input (0 unless given; no other op fills)."""
    if node.op != "Pad":
        return 0.0
    if len(node.inputs) > 2 and node.inputs[2]:
        return float(np.asarray(graph.constants[node.inputs[2]]).reshape(-1)[0])
    return float(node.attrs.get("value", 0.0))  # an attribute before opset 11


def plan(source: np.ndarray, source_size: int, fill: float, target: Target) -> Movement:
    """A view when `source` is one contiguous stretch of the input, else a gather."""
    flat = source.reshape(-1)
    if flat.size and flat[0] >= 0 and np.array_equal(flat, flat[0] + np.arange(flat.size)):
        return Movement(int(flat[0]))
    shape, tables = separable(source)
    last = tables[-1]
    kept = np.flatnonzero(last != FILL)
    run = None
    if kept.size and np.array_equal(last[kept], last[kept[0]] + np.arange(kept.size)) \
            and kept[-1] - kept[0] + 1 == kept.size:  # fmt: skip
        run = (int(kept[0]), int(kept[-1]) + 1)
    any_fill = bool((flat < 0).any())
    config = GatherConfig(tuple(int(d) for d in shape), source_size, run, fill if any_fill else None,
                          target.f32_lanes, GATHER_VECTORS)  # fmt: skip
    return Movement(None, config, np.concatenate(tables))


def separable(source: np.ndarray) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """The map as (shape, tables) over its own axes where it factors so (a transpose, a
    slice, a gather along axes), else over (rows, last axis) (rows picked in any order:
    constant ids into a table), else over its elements one by one (any map)."""
    shape = tuple(source.shape) or (1,)
    for axes in (shape, (math.prod(shape[:-1]), shape[-1])):
        tables = axis_tables(source.reshape(axes))
        if tables is not None:
            return axes, tables
    flat = source.reshape(-1)  # over one axis the map is its own table
    return (flat.size,), [np.where(flat >= 0, flat, FILL)]


def axis_tables(source: np.ndarray) -> list[np.ndarray] | None:
    """Tables T_k with source[i] = Σ_k T_k[i_k] (negative: the fill), checked on every
    element; None when the map does not factor so."""
    valid = source >= 0
    tables = [np.full(d, FILL, np.int64) for d in source.shape]
    if valid.any():
        corner = np.unravel_index(int(np.argmax(valid)), source.shape)
        base = int(source[corner])
        for axis in range(source.ndim):
            line = source[corner[:axis] + (slice(None),) + corner[axis + 1:]]
            tables[axis] = np.where(line >= 0, line - base, FILL)
        tables[0] = np.where(tables[0] == FILL, FILL, tables[0] + base)
    rebuilt = sum(t.reshape((-1,) + (1,) * (source.ndim - 1 - k)) for k, t in enumerate(tables))
    if not np.array_equal(np.where(rebuilt < 0, -1, rebuilt), source):
        return None
    return tables
