"""The products a MatMul or Gemm computes (NumPy's matmul rules), and where each
product's matrices lie in the tensors it reads and writes: dense, or strided views of
them that a chain of data movement makes (`autoconfig.fusion.addressing`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from autoconfig.errors import fail
from autoconfig.graph.ir import Graph, Node

A, B, C = 0, 1, 2  # a product's operands and its output


@dataclass(frozen=True)
class Products:
    """A Gemm or MatMul as `batch` products C[M,N] = A[M,K]·B[K,N] (NumPy's matmul rules:
    a 1-D A is a row, a 1-D B a column, batch axes broadcast), with each product's
    offset into A, B and C in elements, and the operands' row strides as stored
    (`MatmulConfig.leading`, 0: dense; B stored as Bᵀ where `b_transposed`)."""

    m: int
    n: int
    k: int
    offsets: tuple[tuple[int, int, int], ...]
    leading: tuple[int, int, int] = (0, 0, 0)
    b_transposed: bool = False


    def options(self) -> dict:
        """The matmul model's in-place options where they are not the default (a dense
        product is asked as before, its choice kept under the same key)."""
        return {**({"leading": self.leading} if any(self.leading) else {}),
                **({"b_transposed": True} if self.b_transposed else {})}


def operand_shapes(node: Node, graph: Graph) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A's and B's shapes as the products read them: a Gemm's transA and transB applied."""
    a_shape, b_shape = (graph.types[i].shape for i in node.inputs[:2])
    if node.op == "Gemm" and node.attrs.get("transA", 0):
        a_shape = a_shape[::-1]
    if node.op == "Gemm" and node.attrs.get("transB", 0):
        b_shape = (*b_shape[:-2], b_shape[-1], b_shape[-2])
    return a_shape, b_shape


Maps = tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]
"""Where each element of A, B and C lies in the tensor the product reads or writes (an
index array of the operand's shape; None: the operand itself, dense)."""


def products(node: Node, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
             maps: Maps = (None, None, None)) -> Products | None:  # fmt: skip
    """The products of a MatMul (or a 2-D Gemm, shapes transposed already), or None where
    an operand's `maps` place its matrices other than as strided rows: a batch of A over
    one matrix B is one product of all A's rows."""
    a_shape = (1, *a_shape) if len(a_shape) == 1 else a_shape
    b_shape = (*b_shape, 1) if len(b_shape) == 1 else b_shape
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2:
        raise fail(node, f"inner sizes differ: {a_shape} times {b_shape}")
    merged = len(b_shape) == 2
    batch = () if merged else np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    c_shape = (math.prod(a_shape[:-1]), n) if merged else (*batch, m, n)  # the output, 1-D operands' axes kept
    layouts = [_matrices(where, shape, batch, merged, side == 1)
               for side, (where, shape) in enumerate(zip(maps, (a_shape, b_shape, c_shape)))]  # fmt: skip
    if any(x is None for x in layouts):
        return None
    (a_at, a_rows, _), (b_at, b_rows, b_t), (c_at, c_rows, _) = layouts
    offsets = tuple((int(i), int(j), int(q)) for i, j, q in zip(a_at, b_at, c_at, strict=True))
    rows = math.prod(a_shape[:-1]) if merged else m
    return Products(rows, n, k, offsets, (a_rows, b_rows, c_rows), b_t)


def batch_offsets(shape: tuple[int, ...], batch: tuple[int, ...]) -> np.ndarray:
    """Each product's first element in a dense tensor of `shape` (matrices in its last
    two axes) broadcast over the products' `batch` axes, in the products' order."""
    firsts = np.arange(math.prod(shape[:-2])).reshape(shape[:-2]) * math.prod(shape[-2:])
    return np.broadcast_to(firsts, batch).reshape(-1)


def _matrices(where: np.ndarray | None, shape: tuple[int, ...], batch: tuple[int, ...], merged: bool,
              transposable: bool) -> tuple[np.ndarray, int, bool] | None:  # fmt: skip
    """An operand's matrices, one per product (`batch` broadcast; all its rows one matrix
    where `merged`), as `_strided` gives them; a dense operand without an index array."""
    if where is None:
        if merged:
            return np.zeros(1, np.int64), 0, False
        return batch_offsets(shape, batch), 0, False
    index = where.reshape(shape)
    if merged:
        return _strided(index.reshape(1, -1, shape[-1]), transposable)
    return _strided(np.broadcast_to(index, (*batch, *shape[-2:])).reshape(-1, *shape[-2:]), transposable)


def _strided(index: np.ndarray, transposable: bool = False) -> tuple[np.ndarray, int, bool] | None:
    """Matrices [P, R, C] of indices as each one's first index, its row stride (0: dense,
    R x C) and whether it is stored transposed (columns the stride apart, rows adjacent:
    only where `transposable`); None if they are not so."""
    rows, cols = index.shape[1:]
    first = index[:, 0, 0]
    down = int(index[0, 1, 0] - first[0]) if rows > 1 else cols
    across = int(index[0, 0, 1] - first[0]) if cols > 1 else 1
    if across == 1 and down >= cols:
        stride, transposed = (0 if down == cols else down), False
    elif transposable and down == 1 and across >= rows:
        stride, transposed = (0 if across == rows else across), True
    else:
        return None
    expected = first[:, None, None] + np.arange(rows)[:, None] * down + np.arange(cols) * across
    return (first, stride, transposed) if np.array_equal(index, expected) else None


def one_attention(scores: Products, mixed: Products) -> bool:
    """Whether the products of scores (Q·Kᵀ) and of probabilities by V are what one
    attention kernel reads (`kernels.attention`): as many of each, the scores dense and
    the probabilities read as written, V's rows strided (not stored transposed), the
    second product's rows and inner size the scores'."""
    return (not scores.leading[C] and not mixed.leading[A] and not mixed.b_transposed
            and len(scores.offsets) == len(mixed.offsets) and (mixed.m, mixed.k) == (scores.m, scores.n))
