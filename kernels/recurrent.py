"""One step of a recurrent layer (LSTM, GRU, RNN) over a range of its hidden units: the
previous hidden state times the recurrence weights of the step's gates, added to the
step's input projections (computed for every step at once beforehand, biases in),
then the cell's arithmetic, each unit's gates held in registers::

    for each tile of `units` vectors of hidden units in [unit_begin, unit_end):
        for each block of `rows` batch rows:
            G[g] = P[row, g] + Σ_k x[row, k] · Rᵀ[k, g]     # every gate g of the tile's units
            LSTM:  i = f(G[i] + Pi·c'),  f = f(G[f] + Pf·c')   (input_forget: f = 1 − i)
                   c = f·c' + i·g(G[c]);  o = f(G[o] + Po·c);  h = o·h(c)
            GRU:   z = f(G[z]),  r = f(G[r]);  n = g(P[h] + r·(G[h] − P[h] + Rbh))
                   h = n + z·(h' − n)
            RNN:   h = f(G[i])

x is the previous hidden state h' (c': the previous cell state), or, in the second of a
GRU's two stages without `linear_before_reset`, r·h' from the first stage (which
computes z and r for every unit before any candidate can: n reads (r·h')·Rhᵀ). Each
gate's input is clipped to ±`clip` where given (not the cell state, as onnxruntime).
A layer is one call per step (the calls order the steps; threads that split a step's
units see each other's hidden state at the next call). Rᵀ is packed per vector of units, [unit vector][k][gate][lane]
(`pack`): a tile reads each of its vectors' weights as one stream.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels import epilogue as ep
from kernels.abi import KernelSignature, Param, Role
from kernels.emit import KernelModule, check_lanes, config_symbol, f32_memref, f32_splat, f32_vector_type, index
from kernels.emit import single_kernel, tail_mask
from kernels.errors import KernelError
from kernels.gemm import micro_kernel
from kernels.loops import for_range, for_row_blocks, less, load, maximum, minimum, store, when
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
    activations: tuple[ep.EpilogueOp, ...]
    clip: float = 0.0  # pre-activations clamped to ±clip; 0: not
    peephole: bool = False  # an LSTM's Pi, Po, Pf on the cell state
    input_forget: bool = False  # an LSTM's f = 1 − i
    rows: int = 1
    units: int = 1

    @property
    def symbol(self) -> str:
        return config_symbol(f"ac_{self.stage.lower().replace('.', '_')}_step_f32_{self.batch}x{self.hidden}", self)

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
        if min(self.batch, self.hidden, self.rows, self.units) < 1 or self.clip < 0:
            raise KernelError(f"a recurrent step needs batch, hidden, rows, units >= 1 and clip >= 0: {self}")
        if len(self.activations) != ACTIVATIONS[self.cell]:
            raise KernelError(f"{self.cell} takes {ACTIVATIONS[self.cell]} activations, got {len(self.activations)}")
        if any(op.operand for op in self.activations):
            raise KernelError("a recurrent cell's activations take no operand")
        if (self.peephole or self.input_forget) and self.cell != "LSTM":
            raise KernelError("peepholes and input_forget are an LSTM's")

    def params(self) -> list[tuple[str, Role, int]]:
        """(name, role, floats) of each buffer, in signature order."""
        state, h, g = self.batch * self.hidden, self.hidden, len(CELLS[self.cell])
        outputs = {"GRU.reset": ("rh", "z"), "LSTM": ("h", "c")}.get(self.stage, ("h",))
        inputs = ["p", "h_prev"] + (["c_prev"] if self.cell == "LSTM" else []) + \
            (["rh", "z"] if self.stage == "GRU.update" else []) + ["r"]  # fmt: skip
        inputs += (["peephole"] if self.peephole else []) + (["reset_bias"] if self.stage == "GRU" else [])
        sizes = {"p": state * g, "r": self.vectors * h * len(self.gates) * self.lanes, "peephole": 3 * h,
                 "reset_bias": h}  # fmt: skip
        return [(n, Role.OUT, state) for n in outputs] + [(n, Role.IN, sizes.get(n, state)) for n in inputs]

    def signature(self) -> KernelSignature:
        """``SYMBOL(outputs..., inputs..., unit_begin, unit_end)``, units in vectors."""
        params = [Param(name, role, extent=(size,)) for name, role, size in self.params()]
        params += [Param("unit_begin", Role.SIZE), Param("unit_end", Role.SIZE)]
        return KernelSignature(self.symbol, tuple(params),
                               f"one {self.stage} step of {self.batch} rows of {self.hidden} units, gates "
                               f"{self.gates}, on unit vectors [unit_begin, unit_end).")  # fmt: skip


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
    return single_kernel(config.signature(), target, lambda args: _Step.of(config, target, args).run())


@dataclass(frozen=True)
class _Step:
    """A step's buffers as flat memrefs, and its range of unit vectors."""

    cfg: RecurrentConfig
    target: Target
    vec: ir.VectorType
    buffers: dict[str, ir.Value]  # flat memrefs by name
    begin: ir.Value
    end: ir.Value

    @classmethod
    def of(cls, cfg: RecurrentConfig, target: Target, args: dict) -> _Step:
        buffers = {name: f32_memref(args[name], [size]) for name, _, size in cfg.params()}
        return cls(cfg, target, f32_vector_type(target, cfg.lanes), buffers, index(args["unit_begin"]),
                   arith.minsi(index(args["unit_end"]), index(cfg.vectors)))  # fmt: skip

    def run(self) -> None:
        """Tiles of `units` whole vectors, the whole vectors left one at a time, then the
        partial last vector (masked) if the range holds it."""
        cfg = self.cfg
        whole = cfg.hidden // cfg.lanes
        end = arith.minsi(self.end, index(whole))
        count = arith.divsi(arith.maxsi(arith.subi(end, self.begin), index(0)), index(cfg.units))
        first = self.begin
        for_range(0, count, 1, lambda t: self.tile(arith.addi(first, arith.muli(t, index(cfg.units))), cfg.units))
        for_range(arith.addi(first, arith.muli(count, index(cfg.units))), end, 1, lambda j: self.tile(j, 1))
        if whole < cfg.vectors:
            last = index(whole)
            when(arith.andi(less(last, self.end), arith.cmpi(arith.CmpIPredicate.sge, last, self.begin)),
                 lambda: self.tile(last, 1, tail_mask(self.target, cfg.lanes, cfg.hidden % cfg.lanes)))

    def tile(self, j0: ir.Value, units: int, mask: ir.Value | None = None) -> None:
        """Unit vectors [j0, j0 + units) for every batch row, `rows` rows at a time."""
        for_row_blocks(index(0), index(self.cfg.batch), self.cfg.rows, lambda rs: self.rows(rs, j0, units, mask))

    def rows(self, rs: list[ir.Value], j0: ir.Value, units: int, mask: ir.Value | None) -> None:
        """The products of batch rows rs for the gates of unit vectors [j0, j0 + units),
        then each unit vector's cell."""
        cfg, lanes, gates = self.cfg, self.cfg.lanes, len(self.cfg.gates)
        h, x = cfg.hidden, self.buffers["rh" if cfg.stage == "GRU.update" else "h_prev"]
        stream = h * gates * lanes  # one unit vector's packed weights
        base = arith.muli(j0, index(stream))

        def weights(v: int, k: ir.Value, _t: int) -> ir.Value:
            first = index(v // gates * stream + v % gates * lanes)  # vector v: its unit vector's gate
            at = arith.addi(base, arith.addi(arith.muli(k, index(gates * lanes)), first))
            return load(self.vec, self.buffers["r"], [at])

        acc = micro_kernel(self.vec, len(rs), units * gates, index(0), index(h), UNROLL,
                           lambda r, k, _t: memref.load(x, [arith.addi(arith.muli(rs[r], index(h)), k)]), weights)
        for r, row in enumerate(rs):
            for u in range(units):
                products = dict(zip(cfg.gates, acc[(r * units + u) * gates:(r * units + u + 1) * gates]))
                self.cell(row, arith.addi(arith.muli(j0, index(lanes)), index(u * lanes)), products, mask)

    def cell(self, row: ir.Value, unit: ir.Value, products: dict[str, ir.Value], mask: ir.Value | None) -> None:
        """The stage's arithmetic on one vector of units from `unit` on, of batch row
        `row`, given its gates' recurrent products."""
        cfg, h, gates = self.cfg, self.cfg.hidden, CELLS[self.cfg.cell]
        at = arith.addi(arith.muli(row, index(h)), unit)

        def read(name: str) -> ir.Value:
            return load(self.vec, self.buffers[name], [at], mask)

        def projection(gate: str) -> ir.Value:
            column = arith.addi(arith.addi(arith.muli(row, index(len(gates) * h)), unit), index(gates.index(gate) * h))
            return load(self.vec, self.buffers["p"], [column], mask)

        def gate(name: str, which: int = 0, extra: ir.Value | None = None) -> ir.Value:
            value = arith.addf(products[name], projection(name))
            return self.activated(which, value if extra is None else arith.addf(value, extra))

        def write(name: str, value: ir.Value) -> None:
            store(value, self.buffers[name], [at], mask)

        if cfg.cell == "RNN":
            write("h", gate("i"))
        elif cfg.cell == "LSTM":
            peep = self.peepholes(unit, mask)
            previous = read("c_prev")
            i = gate("i", extra=peep("i", previous))
            f = arith.subf(f32_splat(self.target, cfg.lanes, 1.0), i) if cfg.input_forget else \
                gate("f", extra=peep("f", previous))  # fmt: skip
            c = arith.addf(arith.mulf(f, previous), arith.mulf(i, gate("c", 1)))
            write("c", c)
            write("h", arith.mulf(gate("o", extra=peep("o", c)), self.activated(2, c, clipped=False)))
        elif cfg.stage == "GRU.reset":
            write("z", gate("z"))
            write("rh", arith.mulf(gate("r"), read("h_prev")))
        else:
            if cfg.stage == "GRU":
                bias = self.per_unit("reset_bias", unit, mask)
                z, reset = gate("z"), arith.mulf(gate("r"), arith.addf(products["h"], bias))
            else:
                z, reset = read("z"), products["h"]
            candidate = self.activated(1, arith.addf(projection("h"), reset))
            write("h", arith.addf(candidate, arith.mulf(z, arith.subf(read("h_prev"), candidate))))

    def activated(self, which: int, value: ir.Value, clipped: bool = True) -> ir.Value:
        """Activation `which` (f, g, h) of `value`, clipped to ±clip first where given
        (a gate's input; not the cell state, as onnxruntime)."""
        cfg = self.cfg
        if cfg.clip and clipped:
            value = minimum(f32_splat(self.target, cfg.lanes, cfg.clip),
                            maximum(f32_splat(self.target, cfg.lanes, -cfg.clip), value))  # fmt: skip
        return ep.apply((cfg.activations[which],), value, _no_operand)

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
