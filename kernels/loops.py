"""Control flow and vector access helpers every generator builds its loop nests from.

Each helper emits one recognisable piece of a loop nest at the current insertion
point, so that a generator reads like the nest it produces:

- `for_range` / `for_carry`: ``scf.for`` without and with loop-carried values;
- `for_unrolled`: a carried loop with `unroll` copies of its body per trip, then the
  rest one per trip;
- `for_tiles`: the full tiles of a range in a loop, then the one partial tile (its
  size known at generation time) under a condition;
- `for_tile_trips`: like `for_tiles`, or, where the partial tile can be computed as
  a full one, every tile in one loop that branches only where its size matters;
- `for_image_rows`: a thread's channels of its rows, numbered across the images;
- `for_row_blocks`: blocks of rows side by side, then the rows left one at a time;
- `fold_row_vectors`: a value carried along each of several rows' vectors at once,
  the whole ones in a loop, then the last one masked;
- `when` / `when_else`: ``scf.if`` blocks;
- `load` / `store`: plain or masked vector accesses (a masked lane is neither read
  nor written); `strided_load` / `strided_store`: lanes `stride` elements apart (a
  gather / a scatter);
  `prefix_mask`: the lanes below a bound;
- `lane_sum`: several vectors added up, then across their lanes;
- `maximum` / `minimum`: f32 max and min as one compare-and-select (x86's MAXPS).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

from kernels.emit import index, tail_mask
from kernels.mlir import arith, ir, scf, vector
from kernels.target import Target

Body = Callable[[ir.Value], None]
CarriedBody = Callable[[ir.Value, list[ir.Value]], list[ir.Value]]
RowStep = Callable[[int, ir.Value, ir.Value | None, ir.Value], ir.Value]  # (row, first element, lane mask, value)


def for_range(lo: ir.Value | int, hi: ir.Value | int, step: ir.Value | int, body: Body,
              llvm_unrolls: bool = True, llvm_vectorizes: bool = True) -> None:  # fmt: skip
    """``for i in [lo, hi) step step: body(i)`` (the step may be a run-time value, e.g.
    a scalable vector's length). Without `llvm_unrolls`, the loop carries LLVM's
    ``unroll.disable``: for a short loop of many accesses, which LLVM would otherwise
    unroll to its bound, making its enclosing loop one whose dependence analysis
    (LoopLoadElimination's) grows with the square of its accesses. Without
    `llvm_vectorizes`, a vectorization width of 1: for a scalar loop not worth LLVM's
    vectorizing (its checks and the vector loop it adds)."""
    loop = scf.ForOp(_as_index(lo), _as_index(hi), _as_index(step))
    with ir.InsertionPoint(loop.body):
        body(loop.induction_variable)
        scf.yield_([])
    _hint(loop, llvm_unrolls, llvm_vectorizes)


def _hint(loop: scf.ForOp, llvm_unrolls: bool, llvm_vectorizes: bool = True) -> None:
    """The loop's LLVM metadata (`for_range`)."""
    hints = ([] if llvm_unrolls else [_NO_UNROLL]) + ([] if llvm_vectorizes else [_NO_VECTORIZE])
    if hints:
        loop.operation.attributes["loop_annotation"] = ir.Attribute.parse(f"#llvm.loop_annotation<{', '.join(hints)}>")


def for_blocks(lo: ir.Value | int, hi: ir.Value | int, step: int, extent: int, body: Body) -> None:
    """``for i in [lo, hi) step step: body(i)`` for a range within [0, extent): where one
    step covers the extent, the range holds one block at most, emitted as ``if lo < hi:
    body(lo)`` — no loop for LLVM to analyze (its loop passes cost milliseconds per
    loop: a 512³ matmul's block loops alone took 30 ms of its LLVM time)."""
    if step < extent:
        for_range(lo, hi, step, body)
    elif isinstance(lo, int) and isinstance(hi, int):
        if lo < hi:
            body(index(lo))
    else:
        when(less(lo, hi), lambda: body(_as_index(lo)))


_NO_VECTORIZE = "vectorize = #llvm.loop_vectorize<width = 1 : i32>"
_NO_UNROLL = "unroll = #llvm.loop_unroll<disable = true>"
"""Loop metadata MLIR's scf-to-cf lowering carries to the loop's back edge (checked on
the bundled bindings: a ``loop_annotation`` attribute on scf.for becomes !llvm.loop).
Width 1, not ``disable = true``: the bindings print that as
``llvm.loop.vectorize.disable``, which llvmlite's LLVM 22 ignores."""


def for_carry(lo: ir.Value | int, hi: ir.Value | int, step: ir.Value | int, init: Sequence[ir.Value],
              body: CarriedBody, llvm_unrolls: bool = True) -> list[ir.Value]:  # fmt: skip
    """``values = init; for i in [lo, hi) step step: values = body(i, values)``; returns
    the final values (`llvm_unrolls` as `for_range`)."""
    loop = scf.ForOp(_as_index(lo), _as_index(hi), _as_index(step), list(init))
    with ir.InsertionPoint(loop.body):
        scf.yield_(body(loop.induction_variable, list(loop.inner_iter_args)))
    _hint(loop, llvm_unrolls)
    return list(loop.results)


def for_unrolled(lo: ir.Value, hi: ir.Value, unroll: int, init: Sequence[ir.Value],
                 step: Callable[[ir.Value, int, list[ir.Value]], list[ir.Value]],
                 whole_trips: bool = False) -> list[ir.Value]:  # fmt: skip
    """values = step(i, copy, values) for i in [lo, hi): `unroll` copies per trip (copy =
    0..unroll-1, i = trip start + copy), then the rest one per trip (copy 0). The
    copies hide the loop's own instructions; `copy` lets a step rotate partial sums.
    `whole_trips`: the caller knows hi - lo is always a multiple of `unroll`, so no
    loop for a rest is emitted (a rest loop that never runs still costs LLVM its time)."""

    def trips(lo_: ir.Value, hi_: ir.Value, copies: int, values: list[ir.Value]) -> list[ir.Value]:
        def body(i: ir.Value, carried: list[ir.Value]) -> list[ir.Value]:
            for copy in range(copies):
                carried = step(arith.addi(i, index(copy)) if copy else i, copy, carried)
            return carried

        return for_carry(lo_, hi_, copies, values, body)

    if unroll == 1 or whole_trips:
        return trips(lo, hi, unroll, list(init))
    mid = arith.addi(lo, arith.muli(arith.divsi(arith.subi(hi, lo), index(unroll)), index(unroll)))
    return trips(mid, hi, 1, trips(lo, mid, unroll, list(init)))


def for_tiles(lo: ir.Value, hi: ir.Value, size: int, extent: int,
              body: Callable[[ir.Value, int], None], llvm_unrolls: bool = True) -> None:  # fmt: skip
    """body(first, count) for the tiles [lo, hi) of `size` elements over [0, extent): the
    full tiles in a loop (first = tile·size, count = size; `llvm_unrolls` as `for_range`),
    then the partial tile of extent mod size elements if the range holds it."""
    full_tiles = extent // size
    for_range(lo, arith.minsi(hi, index(full_tiles)), 1, lambda t: body(arith.muli(t, index(size)), size), llvm_unrolls)
    if extent % size:
        has_edge = arith.andi(_compare("sle", lo, index(full_tiles)), _compare("sgt", hi, index(full_tiles)))
        when(has_edge, lambda: body(index(full_tiles * size), extent % size))


Sized = Callable[[Callable[[int], None]], None]  # sized(part): part(the tile's size), emitted once per size
TileBody = Callable[[ir.Value, int, Sized], None]


def for_tile_trips(lo: ir.Value, hi: ir.Value, size: int, extent: int, edge_as_full: bool, body: TileBody) -> None:
    """body(first, count, sized) for the tiles [lo, hi) of `size` elements over [0,
    extent). Without `edge_as_full`, as `for_tiles`: count is the tile's size and
    sized(part) emits part(count). With it (the caller can compute a partial tile as a
    full one: what it reads past the extent is zero padding, or read again from within
    it): every tile is a trip of one loop, count is `size`, and sized(part) emits
    part(the tile's size), branching on the partial tile at run time — only the code
    that depends on the size (an output tile's stores) is emitted twice, not the whole
    body. Where the extent has no partial tile, both are the same loop."""
    if not edge_as_full or extent % size == 0:
        for_tiles(lo, hi, size, extent,
                  lambda first, count: body(first, count, sized_tile(first, count, size, extent, False)))
        return

    def trip(tile: ir.Value) -> None:
        first = arith.muli(tile, index(size))
        body(first, size, sized_tile(first, size, size, extent, True))

    for_range(lo, hi, 1, trip)


def sized_tile(first: ir.Value, count: int, size: int, extent: int, edge_as_full: bool) -> Sized:
    """sized(part) of `for_tile_trips` for the tile at `first` of `count` elements:
    part(count); for a tile computed as a full one (`edge_as_full`), part(its size),
    branching at run time on the partial tile when the extent has one."""
    rest = extent % size
    if not (edge_as_full and rest):
        return lambda part: part(count)
    return lambda part: when_else(equal(first, index(extent - rest)), lambda: part(rest), lambda: part(size))


RowBody = Callable[[ir.Value, ir.Value, ir.Value, ir.Value], None]


def for_image_rows(images: int, channels: int, rows: int, ranges: Sequence[ir.Value], body: RowBody) -> None:
    """body(n, c, r, rows_end) for the channels [c0, c1) of the rows [r0, r1) numbered
    across the images (`rows` per image; `ranges` = c0, c1, r0, r1), image by image, then
    channel by channel; rows_end: where those rows of image n end (a row's stores may
    pass into the next row only before it)."""
    c0, c1, r0, r1 = (index(v) for v in ranges)
    begin, end, last = r0, arith.minsi(r1, index(images * rows)), arith.minsi(c1, index(channels))

    def image(n: ir.Value) -> None:
        first = arith.muli(n, index(rows))
        low = arith.maxsi(arith.subi(begin, first), index(0))
        high = arith.minsi(arith.subi(end, first), index(rows))
        for_range(c0, last, 1, lambda c: for_range(low, high, 1, lambda r: body(n, c, r, high)))

    for_range(arith.divsi(begin, index(rows)), arith.divsi(arith.addi(end, index(rows - 1)), index(rows)), 1, image)


def for_row_blocks(begin: ir.Value, end: ir.Value, together: int, body: Callable[[list[ir.Value]], None]) -> None:
    """body(rows) over the rows [begin, end): blocks of `together` consecutive rows (a
    row-wise kernel interleaves their passes, whose dependent steps then overlap), then
    the rows left one at a time; a range that ends before it begins runs nothing."""
    end = arith.maxsi(begin, end)
    blocked_end = arith.addi(begin, arith.muli(arith.divsi(arith.subi(end, begin), index(together)), index(together)))
    for_range(begin, blocked_end, together, lambda r: body([offset(r, i) for i in range(together)]))
    if together > 1:
        for_range(blocked_end, end, 1, lambda r: body([r]))


def fold_row_vectors(target: Target, lanes: int, length: int, rows: int, initial: ir.Value,
                     step: RowStep) -> list[ir.Value]:  # fmt: skip
    """Per row i of `rows` side by side, ``value = step(i, first, lane_mask, value)`` from
    `initial` over the vectors of a row of `length` floats (`first`: a vector's first
    element): the whole vectors in a loop (lane_mask None), then the last one masked to
    the lanes in the row."""
    whole, tail = divmod(length, lanes)
    values = for_carry(0, whole, 1, [initial] * rows, lambda v, acc: [
        step(i, arith.muli(v, index(lanes)), None, value) for i, value in enumerate(acc)])
    if tail:
        mask = tail_mask(target, lanes, tail)
        values = [step(i, index(whole * lanes), mask, value) for i, value in enumerate(values)]
    return values


def when(condition: ir.Value, then: Callable[[], None]) -> None:
    """``if condition: then()``."""
    branch = scf.IfOp(condition)
    with ir.InsertionPoint(branch.then_block):
        then()
        scf.yield_([])


def if_values(condition: ir.Value, types: Sequence[ir.Type], then: Callable[[], list[ir.Value]],
              otherwise: Callable[[], list[ir.Value]]) -> list[ir.Value]:  # fmt: skip
    """``then() if condition else otherwise()``, values of `types` either way: only the
    branch taken is computed (a load on one side reads nothing on the other)."""
    branch = scf.IfOp(condition, list(types), has_else=True)
    for block, build in ((branch.then_block, then), (branch.else_block, otherwise)):
        with ir.InsertionPoint(block):
            scf.yield_(build())
    return list(branch.results)


def when_else(condition: ir.Value, then: Callable[[], None], otherwise: Callable[[], None]) -> None:
    """``if condition: then() else: otherwise()``."""
    branch = scf.IfOp(condition, has_else=True)
    for block, build in ((branch.then_block, then), (branch.else_block, otherwise)):
        with ir.InsertionPoint(block):
            build()
            scf.yield_([])


def equal(x: ir.Value | int, y: ir.Value | int) -> ir.Value:
    """i1 ``x == y`` on indices."""
    return _compare("eq", _as_index(x), _as_index(y))


def less(x: ir.Value | int, y: ir.Value | int) -> ir.Value:
    """i1 ``x < y`` on indices."""
    return _compare("slt", _as_index(x), _as_index(y))


def maximum(x: ir.Value, y: ir.Value) -> ir.Value:
    """``x > y ? x : y`` on f32 vectors or scalars: y when either is NaN (so a NaN in y,
    the value being bounded, propagates). One MAXPS on x86, where arith.maximumf's
    IEEE rules (NaN from either side, −0 < +0) lower to six dependent instructions."""
    return arith.select(arith.cmpf(arith.CmpFPredicate.OGT, x, y), x, y)


def minimum(x: ir.Value, y: ir.Value) -> ir.Value:
    """``x < y ? x : y``: `maximum`'s mirror (y when either is NaN; MINPS on x86)."""
    return arith.select(arith.cmpf(arith.CmpFPredicate.OLT, x, y), x, y)


def offset(base: ir.Value, delta: int) -> ir.Value:
    """``base + delta`` as an index (no op when delta is 0)."""
    return arith.addi(base, index(delta)) if delta else base


def load(vec: ir.VectorType, memory: ir.Value, indices: Sequence[ir.Value],
         mask: ir.Value | None = None) -> ir.Value:  # fmt: skip
    """A vector from `memory` at `indices`; with a mask, the lanes outside it are 0 and
    never read (so a masked vector may run past the end of the buffer)."""
    if mask is None:
        return vector.load(vec, memory, list(indices))
    zero = vector.broadcast(vec, arith.constant(vec.element_type, 0.0))
    return vector.maskedload(vec, memory, list(indices), mask, zero)


def store(value: ir.Value, memory: ir.Value, indices: Sequence[ir.Value], mask: ir.Value | None = None) -> None:
    """Store a vector at `indices`; with a mask, only the lanes inside it."""
    if mask is None:
        vector.store(value, memory, list(indices))
    else:
        vector.maskedstore(memory, list(indices), mask, value)


def whole_or_masked(whole: ir.Value, mask: ir.Value | None, stores: Callable[[ir.Value | None], None]) -> None:
    """stores(None) where `whole` holds (the lanes past `mask`'s land where they are
    rewritten later, or inside the row), else stores(mask): a masked store costs several
    plain ones on some cores."""
    if mask is None:
        stores(None)
    else:
        when_else(whole, lambda: stores(None), lambda: stores(mask))


def strided_load(vec: ir.VectorType, memory: ir.Value, indices: Sequence[ir.Value], stride: int,
                 mask: ir.Value | None = None) -> ir.Value:  # fmt: skip
    """Lane i from `memory` at `indices` with the last index advanced by i·stride (a
    gather: vgatherdps on x86, indexed loads on RVV); masked lanes are 0, never read."""
    offsets, mask = _lanes_apart(vec, stride, mask)
    zero = vector.broadcast(vec, arith.constant(ir.VectorType(vec).element_type, 0.0))
    return vector.gather(vec, memory, list(indices), offsets, mask, zero)


def strided_store(value: ir.Value, memory: ir.Value, indices: Sequence[ir.Value], stride: int,
                  mask: ir.Value | None = None) -> None:  # fmt: skip
    """Store lane i of `value` at `indices` with the last index advanced by i·stride (a
    scatter: vscatterdps on AVX-512, indexed stores on RVV, one store per lane
    elsewhere); masked lanes are not written."""
    offsets, mask = _lanes_apart(value.type, stride, mask)
    vector.scatter(None, memory, list(indices), offsets, mask, value)  # no result: a memref


def _lanes_apart(vec: ir.VectorType, stride: int, mask: ir.Value | None) -> tuple[ir.Value, ir.Value]:
    """A gather's or scatter's i32 lane offsets (i·stride) and its mask (all lanes when
    None: a bound no vector length reaches, since scalable ones grow with vscale)."""
    t = ir.VectorType(vec)
    like = lambda element: ir.VectorType.get(t.shape, element, scalable=t.scalable_dims)  # noqa: E731
    lanes = vector.step(like(ir.IndexType.get()))
    offsets = arith.muli(lanes, vector.broadcast(like(ir.IndexType.get()), index(stride)))
    offsets = arith.index_cast(like(ir.IntegerType.get_signless(32)), offsets)
    if mask is None:
        mask = vector.create_mask(like(ir.IntegerType.get_signless(1)), [index(t.shape[0] * 1024)])
    return offsets, mask


def prefix_mask(mask_type: ir.VectorType, remaining: ir.Value | int) -> ir.Value:
    """The mask of the first `remaining` lanes (all of them when remaining >= lanes)."""
    return vector.create_mask(mask_type, [_as_index(remaining)])


def lane_sum(vectors: Sequence[ir.Value]) -> ir.Value:
    """The f32 sum of every lane of every vector in `vectors`."""
    return vector.reduction(ir.F32Type.get(), vector.CombiningKind.ADD, reduce(arith.addf, vectors))


def _as_index(value: ir.Value | int) -> ir.Value:
    return index(value) if isinstance(value, int) else value


def _compare(predicate: str, x: ir.Value, y: ir.Value) -> ir.Value:
    return arith.cmpi(getattr(arith.CmpIPredicate, predicate), x, y)


def transpose_square(rows: list[ir.Value]) -> list[ir.Value]:
    """The L×L matrix held as L vectors of L lanes, transposed in registers: for each bit
    h of the lane index, rows i and i + h (bit h clear in i) swap their off-diagonal
    h-wide blocks, two two-source shuffles per pair (vpermt2ps on AVX-512): L·log2 L
    shuffles for L² floats, where gathering one element at a time costs a load slot each."""
    lanes = len(rows)
    rows = list(rows)
    h = lanes // 2
    while h:
        for i in range(lanes):
            if i & h:
                continue
            a, b = rows[i], rows[i + h]
            rows[i] = vector.shuffle(a, b, [lane if not lane & h else lanes + lane - h for lane in range(lanes)])
            rows[i + h] = vector.shuffle(a, b, [lane + h if not lane & h else lanes + lane for lane in range(lanes)])
        h //= 2
    return rows
