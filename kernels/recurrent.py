"""Steps of a recurrent layer (LSTM, GRU, RNN) over a range of its hidden units: per
step, the previous hidden state times the recurrence weights of the step's gates, added
to the step's input projections (computed for every step at once beforehand, biases
in), then the cell's arithmetic, each unit's gates held in registers::

    for each step s in [first, first + count), t = s (or seq − 1 − s going backward):
        for each tile of `units` vectors of hidden units in [unit_begin, unit_end):
            for each block of `rows` batch rows:
                G[g] = P[t, row, g] + Σ_k x[row, k] · Rᵀ[k, g]     # every gate g of the tile's units
                LSTM:  i = f(G[i] + Pi·c'),  f = f(G[f] + Pf·c')   (input_forget: f = 1 − i)
                       c = f·c' + i·g(G[c]);  o = f(G[o] + Po·c);  h = o·h(c)
                GRU:   z = f(G[z]),  r = f(G[r]);  n = g(P[t, row, h] + r·(G[h] − P[t, row, h] + Rbh))
                       h = n + z·(h' − n)
                RNN:   h = f(G[i])
                Y[t, row] = h

x is the previous hidden state h' (Y at the step before, h0 at the first; c': the cell
state, kept in place, c0 at the first), or, in the second of a GRU's two stages without
`linear_before_reset`, r·h' from the first stage (which computes z and r for every unit
before any candidate can: n reads (r·h')·Rhᵀ). Each gate's input is clipped to
±`clip` where given (not the cell state, as onnxruntime). A part that holds all the
units runs all the steps in one call; threads that split the units run one step a call
(each call orders the steps, and they see each other's hidden state at the next).
P and Y hold every direction of the layer (P's rows `directions` x gates x hidden
long, Y [seq, directions, batch, hidden]): a part's buffers start at its direction's.
Rᵀ is packed per vector of units, [unit vector][k][gate][lane] (`pack`): a tile reads
each of its vectors' weights as one stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.errors import KernelError
from kernels.gemm import micro_kernel
from kernels.loops import equal, for_range, for_row_blocks, less, load, maximum, minimum, store, when, when_else
from kernels.mlir import arith, ir, memref
from kernels.target import Target

CELLS = {"LSTM": "iofc", "GRU": "zrh", "RNN": "i"}
"""Each cell's gates, in the order ONNX stacks their weights (and the projections)."""

STAGES = {"LSTM": "iofc", "GRU": "zrh", "RNN": "i", "GRU.reset": "zr", "GRU.update": "h"}
"""The gates whose recurrent products each kind of step computes: a whole cell, or one of
the two stages of a GRU without `linear_before_reset`."""

ACTIVATIONS = {"LSTM": 3, "GRU": 2, "RNN": 1}
"""How many activations each cell takes (f, g, h)."""

UNROLL = 2
"""k steps per trip of the products' loop: hides the loop's own instructions."""


@dataclass(frozen=True)
class RecurrentConfig:
    """A step of `stage` over `batch` rows of `hidden` units; `activations` are the
    cell's f, g and (LSTM) h; register tiles of `rows` batch rows x `units` vectors of
    units (each vector one accumulator per gate)."""

    stage: str
    batch: int
    hidden: int
    lanes: int
    activations: tuple[ep.EpilogueOp, ...]  # every direction's f, g(, h), in turn
    clip: float = 0.0  # pre-activations clamped to ±clip; 0: not
    peephole: bool = False  # an LSTM's Pi, Po, Pf on the cell state
    input_forget: bool = False  # an LSTM's f = 1 − i
    rows: int = 1
    units: int = 1
    steps: int = 1  # the layer's sequence
    directions: int = 1  # the layer's, which P and Y hold

    @property
    def symbol(self) -> str:
        stem = f"ac_{self.stage.lower().replace('.', '_')}_steps_f32_{self.steps}x{self.batch}x{self.hidden}"
        return config_symbol(stem, self)

    @property
    def p_row(self) -> int:
        """P's row length: every direction's gates' projections."""
        return self.directions * len(CELLS[self.cell]) * self.hidden

    @property
    def y_step(self) -> int:
        """Floats between two steps' rows of Y."""
        return self.directions * self.batch * self.hidden

    @property
    def cell(self) -> str:
        return self.stage.split(".")[0]

    @property
    def gates(self) -> str:
        return STAGES[self.stage]

    @property
    def vectors(self) -> int:
        """Vectors of units (the last one partial where `hidden` is not whole vectors)."""
        return -(-self.hidden // self.lanes)

    def validate(self, target: Target) -> None:
        check_lanes(target, self.lanes)
        if self.stage not in STAGES:
            raise KernelError(f"unknown recurrent step {self.stage!r}: {', '.join(STAGES)}")
        if min(self.batch, self.hidden, self.rows, self.units, self.steps, self.directions) < 1 or self.clip < 0:
            raise KernelError(f"recurrent steps need every size >= 1 and clip >= 0: {self}")
        if len(self.activations) != ACTIVATIONS[self.cell] * self.directions:
            raise KernelError(f"{self.cell} takes {ACTIVATIONS[self.cell]} activations per direction, got "
                              f"{len(self.activations)} for {self.directions}")
        if any(op.operand for op in self.activations):
            raise KernelError("a recurrent cell's activations take no operand")
        if (self.peephole or self.input_forget) and self.cell != "LSTM":
            raise KernelError("peepholes and input_forget are an LSTM's")

    def params(self) -> list[tuple[str, Role, int]]:
        """(name, role, floats) of each buffer, in signature order."""
        state, h, g = self.batch * self.hidden, self.hidden, len(CELLS[self.cell])
        outputs = {"GRU.reset": ["rh", "z"], "LSTM": ["y", "c"]}.get(self.stage, ["y"])
        inputs = (["y"] if self.stage == "GRU.reset" else []) + ["p", "h_first"] + \
            (["c_first"] if self.cell == "LSTM" else []) + (["rh", "z"] if self.stage == "GRU.update" else []) + \
            ["r"] + (["peephole"] if self.peephole else [])  # fmt: skip
        inputs += ["reset_bias"] if self.stage == "GRU" else []
        sizes = {"y": (self.steps - 1) * self.y_step + state, "p": (self.steps * self.batch - 1) * self.p_row + g * h,
                 "r": self.vectors * h * len(self.gates) * self.lanes, "peephole": 3 * h, "reset_bias": h}  # fmt: skip
        return [(n, Role.OUT, sizes.get(n, state)) for n in outputs] + \
            [(n, Role.IN, sizes.get(n, state)) for n in inputs]  # fmt: skip

    def signature(self) -> KernelSignature:
        """``SYMBOL(outputs..., inputs..., first, count, backward, unit_begin, unit_end)``,
        units in vectors."""
        params = [Param(name, role, extent=(size,)) for name, role, size in self.params()]
        params += [Param(name, Role.SIZE) for name in ("first", "count", "backward", "unit_begin", "unit_end")]
        return KernelSignature(self.symbol, tuple(params),
                               f"{self.stage} steps [first, first + count) of {self.steps} (backward: from the "
                               f"last), {self.batch} rows of {self.hidden} units, gates {self.gates}, on unit "
                               "vectors [unit_begin, unit_end).")  # fmt: skip


def pack(r: np.ndarray, config: RecurrentConfig) -> np.ndarray:
    """The stage's recurrence weights `r` (its gates' rows stacked as ONNX stacks them,
    [gates x hidden, hidden]) as the kernel reads them: [unit vector][k][gate][lane],
    the lanes past `hidden` zero."""
    h, lanes, gates = config.hidden, config.lanes, len(config.gates)
    padded = np.zeros((gates, config.vectors * lanes, h), np.float32)
    padded[:, :h] = np.asarray(r, np.float32).reshape(gates, h, h)
    return np.ascontiguousarray(padded.reshape(gates, config.vectors, lanes, h).transpose(1, 3, 0, 2)).ravel()


def generate(config: RecurrentConfig, target: Target) -> KernelModule:
    """The kernel of `config` on `target`."""
    config.validate(target)
    return single_kernel(config.signature(), target, lambda args: _Step.of(config, target, args).run(args))


@dataclass(frozen=True)
class _At:
    """Where one step reads and writes: its row of Y and of P (offsets of the step's
    first batch row), and the buffer and offset of the previous hidden state and the
    buffer of the previous cell state."""

    y: ir.Value
    p: ir.Value
    h_prev: tuple[str, ir.Value]
    c_prev: str


@dataclass(frozen=True)
class _Step:
    """The steps' buffers as flat memrefs, their range of unit vectors, and the
    activations of the direction they run."""

    cfg: RecurrentConfig
    target: Target
    vec: ir.VectorType
    buffers: dict[str, ir.Value]  # flat memrefs by name
    begin: ir.Value
    end: ir.Value
    functions: tuple[ep.EpilogueOp, ...]

    @classmethod
    def of(cls, cfg: RecurrentConfig, target: Target, args: dict) -> _Step:
        buffers = {name: f32_memref(args[name], [size]) for name, _, size in cfg.params()}
        return cls(cfg, target, f32_vector_type(target, cfg.lanes), buffers, index(args["unit_begin"]),
                   arith.minsi(index(args["unit_end"]), index(cfg.vectors)),
                   cfg.activations[:ACTIVATIONS[cfg.cell]])  # fmt: skip

    def run(self, args: dict) -> None:
        """The first step from h0 and c0 (if the range holds it), then the rest from the
        step before."""
        first, count, backward = (index(args[name]) for name in ("first", "count", "backward"))
        going_back = arith.cmpi(arith.CmpIPredicate.ne, backward, index(0))
        when(equal(first, 0), lambda: self.step(index(0), going_back, True))
        for_range(arith.maxsi(first, index(1)), arith.addi(first, count), 1,
                  lambda s: self.step(s, going_back, False))  # fmt: skip

    def step(self, s: ir.Value, going_back: ir.Value, initial: bool) -> None:
        """Step s: time t = s, or seq − 1 − s going backward."""
        cfg = self.cfg
        last = index(cfg.steps - 1)
        t = arith.select(going_back, arith.subi(last, s), s)
        previous = arith.select(going_back, arith.addi(t, index(1)), arith.subi(t, index(1)))
        at = _At(arith.muli(t, index(cfg.y_step)), arith.muli(t, index(cfg.batch * cfg.p_row)),
                 ("h_first", index(0)) if initial else ("y", arith.muli(previous, index(cfg.y_step))),
                 "c_first" if initial else "c")  # fmt: skip
        backward = cfg.activations[ACTIVATIONS[cfg.cell]:]
        if backward and backward != self.functions:  # a bidirectional layer's second direction runs backward
            when_else(going_back, lambda: replace(self, functions=backward).units(at), lambda: self.units(at))
        else:
            self.units(at)

    def units(self, at: _At) -> None:
        """Tiles of `units` whole vectors, the whole vectors left one at a time, then the
        partial last vector (masked) if the range holds it."""
        cfg = self.cfg
        whole = cfg.hidden // cfg.lanes
        end = arith.minsi(self.end, index(whole))
        count = arith.divsi(arith.maxsi(arith.subi(end, self.begin), index(0)), index(cfg.units))
        first = self.begin
        for_range(0, count, 1, lambda t: self.tile(at, arith.addi(first, arith.muli(t, index(cfg.units))), cfg.units))
        for_range(arith.addi(first, arith.muli(count, index(cfg.units))), end, 1, lambda j: self.tile(at, j, 1))
        if whole < cfg.vectors:
            last = index(whole)
            when(arith.andi(less(last, self.end), arith.cmpi(arith.CmpIPredicate.sge, last, self.begin)),
                 lambda: self.tile(at, last, 1, tail_mask(self.target, cfg.lanes, cfg.hidden % cfg.lanes)))

    def tile(self, at: _At, j0: ir.Value, units: int, mask: ir.Value | None = None) -> None:
        """Unit vectors [j0, j0 + units) for every batch row, `rows` rows at a time."""
        for_row_blocks(index(0), index(self.cfg.batch), self.cfg.rows, lambda rs: self.rows(at, rs, j0, units, mask))

    def rows(self, at: _At, rs: list[ir.Value], j0: ir.Value, units: int, mask: ir.Value | None) -> None:
        """The products of batch rows rs for the gates of unit vectors [j0, j0 + units),
        then each unit vector's cell."""
        cfg, lanes, gates = self.cfg, self.cfg.lanes, len(self.cfg.gates)
        h = cfg.hidden
        x, x_at = ("rh", index(0)) if cfg.stage == "GRU.update" else at.h_prev
        stream = h * gates * lanes  # one unit vector's packed weights
        base = arith.muli(j0, index(stream))

        def weights(v: int, k: ir.Value, _t: int) -> ir.Value:
            first = index(v // gates * stream + v % gates * lanes)  # vector v: its unit vector's gate
            return load(self.vec, self.buffers["r"], [arith.addi(base, arith.addi(arith.muli(k, index(gates * lanes)),
                                                                                  first))])  # fmt: skip

        def state(r: int, k: ir.Value, _t: int) -> ir.Value:
            return memref.load(self.buffers[x], [arith.addi(x_at, arith.addi(arith.muli(rs[r], index(h)), k))])

        acc = micro_kernel(self.vec, len(rs), units * gates, index(0), index(h), UNROLL, state, weights)
        for r, row in enumerate(rs):
            for u in range(units):
                products = dict(zip(cfg.gates, acc[(r * units + u) * gates:(r * units + u + 1) * gates]))
                self.cell(at, row, arith.addi(arith.muli(j0, index(lanes)), index(u * lanes)), products, mask)

    def cell(self, at: _At, row: ir.Value, unit: ir.Value, products: dict[str, ir.Value],
             mask: ir.Value | None) -> None:  # fmt: skip
        """The stage's arithmetic on one vector of units from `unit` on, of batch row
        `row`, given its gates' recurrent products."""
        cfg, h, gates = self.cfg, self.cfg.hidden, CELLS[self.cfg.cell]
        here = arith.addi(arith.muli(row, index(h)), unit)  # in a [batch, hidden] state

        def read(name: str, offset: ir.Value | None = None) -> ir.Value:
            return load(self.vec, self.buffers[name], [here if offset is None else arith.addi(offset, here)], mask)

        def projection(gate: str) -> ir.Value:
            column = arith.addi(arith.muli(row, index(cfg.p_row)), arith.addi(unit, index(gates.index(gate) * h)))
            return load(self.vec, self.buffers["p"], [arith.addi(at.p, column)], mask)

        def gate(name: str, which: int = 0, extra: ir.Value | None = None) -> ir.Value:
            value = arith.addf(products[name], projection(name))
            return self.activated(which, value if extra is None else arith.addf(value, extra))

        def write(name: str, value: ir.Value) -> None:
            store(value, self.buffers[name], [arith.addi(at.y, here) if name == "y" else here], mask)

        if cfg.cell == "RNN":
            write("y", gate("i"))
        elif cfg.cell == "LSTM":
            peep = self.peepholes(unit, mask)
            previous = read(at.c_prev)
            i = gate("i", extra=peep("i", previous))
            f = arith.subf(f32_splat(self.target, cfg.lanes, 1.0), i) if cfg.input_forget else \
                gate("f", extra=peep("f", previous))  # fmt: skip
            c = arith.addf(arith.mulf(f, previous), arith.mulf(i, gate("c", 1)))
            write("c", c)
            write("y", arith.mulf(gate("o", extra=peep("o", c)), self.activated(2, c, clipped=False)))
        elif cfg.stage == "GRU.reset":
            write("z", gate("z"))
            write("rh", arith.mulf(gate("r"), read(*at.h_prev)))
        else:
            if cfg.stage == "GRU":
                bias = self.per_unit("reset_bias", unit, mask)
                z, reset = gate("z"), arith.mulf(gate("r"), arith.addf(products["h"], bias))
            else:
                z, reset = read("z"), products["h"]
            candidate = self.activated(1, arith.addf(projection("h"), reset))
            write("y", arith.addf(candidate, arith.mulf(z, arith.subf(read(*at.h_prev), candidate))))

    def activated(self, which: int, value: ir.Value, clipped: bool = True) -> ir.Value:
        """Activation `which` (f, g, h) of `value`, clipped to ±clip first where given
        (a gate's input; not the cell state, as onnxruntime)."""
        cfg = self.cfg
        if cfg.clip and clipped:
            value = minimum(f32_splat(self.target, cfg.lanes, cfg.clip),
                            maximum(f32_splat(self.target, cfg.lanes, -cfg.clip), value))  # fmt: skip
        return ep.apply((self.functions[which],), value, _no_operand)

    def peepholes(self, unit: ir.Value, mask: ir.Value | None):
        """peep(gate, c): the peephole product P[gate]·c (Pi, Po, Pf stacked), or None."""

        def peep(gate: str, c: ir.Value) -> ir.Value | None:
            if not self.cfg.peephole:
                return None
            return arith.mulf(self.per_unit("peephole", unit, mask, "iof".index(gate) * self.cfg.hidden), c)

        return peep

    def per_unit(self, name: str, unit: ir.Value, mask: ir.Value | None, first: int = 0) -> ir.Value:
        """The vector of units from `unit` on of a per-unit operand (a peephole, Rbh)
        whose values start at `first`."""
        return load(self.vec, self.buffers[name], [arith.addi(unit, index(first))], mask)


def _no_operand(i: int) -> ir.Value:
    raise KernelError(f"a recurrent cell's activation takes no operand (op {i} asks for one)")
