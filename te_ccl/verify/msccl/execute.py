"""Symbolic execution of every rank and thread block of an MSCCL algorithm.

Each thread block runs its transmissions (:mod:`~te_ccl.verify.msccl.kernel`) in order.
A transmission starts when (1) every flag it waits on has reached the awaited step,
(2) a message is queued on its receive connection, if it receives, and (3) its send
connection has a free slot, if it sends. A connection ``(sending gpu, receiving gpu,
channel)`` is a FIFO of at most ``fifo_slots`` messages (default 8 = NCCL_STEPS, the
slots of an NCCL connection buffer); a message is one step's ``cnt`` chunks. Thread
blocks are scheduled round-robin until none can move; those left unfinished are a
**deadlock**.

Buffers hold symbolic values (:mod:`~te_ccl.verify.msccl.layout`). Reading a chunk that
holds no input and that no step wrote is an **uninitialized read**. **Data races** are
found with vector clocks (FastTrack-style epochs): happens-before is program order
within a thread block, flag waits (a waiter is ordered after everything the publisher
did up to the *first* publication that satisfies it: the weakest guarantee), and
send→receive of the same message. FIFO back-pressure is deliberately not an ordering
edge, so the race check never relies on buffer sizes. Two accesses to one chunk of one
GPU, at least one a write, that are not ordered are a race; the check is sound for the
accesses of the executed interleaving and, since ordering edges do not depend on timing,
for every interleaving that reaches the same accesses. Messages left in a FIFO at the
end are **unreceived data**.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from te_ccl.verify.msccl.findings import Finding, finding
from te_ccl.verify.msccl.kernel import Transmission, transmissions
from te_ccl.verify.msccl.layout import GARBAGE, Layout, Slot, Value
from te_ccl.verify.msccl.model import Algo, Gpu, Threadblock

__all__ = ["execute", "Execution", "StepRef", "FIFO_SLOTS"]

FIFO_SLOTS = 8          # NCCL_STEPS
_MAX_STUCK_REPORTED = 20

StepRef = tuple[int, int, int]  # (gpu, tb id, step position)


@dataclass
class _Chunk:
    value: Value | None
    writer: tuple[int, int, StepRef] | None = None      # (tb index, epoch, step)
    readers: dict[int, tuple[int, StepRef]] = field(default_factory=dict)


@dataclass
class _Message:
    values: list[Value]
    clock: np.ndarray
    origin: StepRef


@dataclass
class _Block:
    index: int
    gpu: Gpu
    tb: Threadblock
    program: list[Transmission]
    clock: np.ndarray
    pc: int = 0
    flag: int = -1
    published: list[tuple[int, np.ndarray]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.pc >= len(self.program)


@dataclass
class Execution:
    """Final memory per GPU (chunk -> value), the last writer of each chunk, findings."""

    memory: dict[int, dict[Slot, Value | None]]
    writers: dict[int, dict[Slot, StepRef]]
    findings: list[Finding]
    completed: bool


def execute(algo: Algo, layout: Layout, *, fifo_slots: int = FIFO_SLOTS) -> Execution:
    """Run the algorithm symbolically; see the module docstring for what is reported."""
    return _Machine(algo, layout, fifo_slots).run()


class _Machine:
    def __init__(self, algo: Algo, layout: Layout, fifo_slots: int) -> None:
        self.layout = layout
        self.slots = fifo_slots
        total = algo.nthreadblocks
        self.blocks: list[_Block] = []
        self.by_id: dict[tuple[int, int], _Block] = {}
        for gpu in algo.gpus:
            for tb in gpu.threadblocks:
                b = _Block(len(self.blocks), gpu, tb, transmissions(tb), np.zeros(total, np.int64))
                self.blocks.append(b)
                self.by_id[(gpu.id, tb.id)] = b
        self.memory = {g.id: {s: _Chunk(v) for s, v in layout.initial(g.id).items()}
                       for g in algo.gpus}
        self.fifos: dict[tuple[int, int, int], deque[_Message]] = {}
        self.findings: list[Finding] = []
        self.reported: set[tuple] = set()

    # --- scheduling -----------------------------------------------------------------
    def run(self) -> Execution:
        moved = True
        while moved:
            moved = False
            for b in self.blocks:
                while not b.done and self._ready(b):
                    self._fire(b)
                    moved = True
        stuck = [b for b in self.blocks if not b.done]
        for b in stuck[:_MAX_STUCK_REPORTED]:
            self._report_stuck(b)
        if len(stuck) > _MAX_STUCK_REPORTED:
            self.findings.append(finding("deadlock", f"{len(stuck) - _MAX_STUCK_REPORTED} more "
                                         "thread blocks are stuck"))
        if not stuck:
            self._report_unreceived()
        memory = {g: {s: c.value for s, c in mem.items()} for g, mem in self.memory.items()}
        writers = {g: {s: c.writer[2] for s, c in mem.items() if c.writer}
                   for g, mem in self.memory.items()}
        return Execution(memory, writers, self.findings, not stuck)

    def _send_key(self, b: _Block) -> tuple[int, int, int]:
        return (b.gpu.id, b.tb.send, b.tb.chan)

    def _recv_key(self, b: _Block) -> tuple[int, int, int]:
        return (b.tb.recv, b.gpu.id, b.tb.chan)

    def _ready(self, b: _Block) -> bool:
        t = b.program[b.pc]
        for depid, deps in t.deps:
            target = self.by_id.get((b.gpu.id, depid))
            if target is None or target.flag < deps:
                return False
        first = t.first
        if first.receives and not self.fifos.get(self._recv_key(b)):
            return False
        return not (first.sends and len(self.fifos.get(self._send_key(b), ())) >= self.slots)

    def _report_stuck(self, b: _Block) -> None:
        t = b.program[b.pc]
        waits = []
        for depid, deps in t.deps:
            target = self.by_id.get((b.gpu.id, depid))
            if target is None or target.flag < deps:
                at = "missing" if target is None else f"its flag is {target.flag}"
                waits.append(f"tb {depid} to finish step {deps} ({at})")
        if t.first.receives and not self.fifos.get(self._recv_key(b)):
            waits.append(f"data from gpu {b.tb.recv} on channel {b.tb.chan}")
        if t.first.sends and len(self.fifos.get(self._send_key(b), ())) >= self.slots:
            waits.append(f"a free slot towards gpu {b.tb.send} on channel {b.tb.chan} "
                         f"({self.slots} messages unreceived)")
        self.findings.append(finding(
            "deadlock", f"'{t.type}' waits forever for " + " and ".join(waits),
            gpu=b.gpu.id, tb=b.tb.id, step=t.first.position, line=t.first.line))

    def _report_unreceived(self) -> None:
        for (_src, dst, chan), fifo in sorted(self.fifos.items()):
            if fifo:
                g, tb, pos = fifo[0].origin
                self.findings.append(finding(
                    "unreceived-data", f"{len(fifo)} message(s) to gpu {dst} on channel {chan} "
                    "are never received", gpu=g, tb=tb, step=pos))

    # --- one transmission -------------------------------------------------------------
    def _fire(self, b: _Block) -> None:
        t = b.program[b.pc]
        for depid, deps in t.deps:
            pub = next((c for f, c in self.by_id[(b.gpu.id, depid)].published if f >= deps),
                       None)
            if pub is not None:
                np.maximum(b.clock, pub, out=b.clock)
        b.clock[b.index] += 1
        received = None
        if t.first.receives:
            msg = self.fifos[self._recv_key(b)].popleft()
            np.maximum(b.clock, msg.clock, out=b.clock)
            received = msg.values
        out = self._compute(b, t, received)
        if t.first.sends:
            self.fifos.setdefault(self._send_key(b), deque()).append(
                _Message(out, b.clock.copy(), (b.gpu.id, b.tb.id, t.first.position)))
        if t.hasdep:
            b.flag = t.flag
            b.published.append((t.flag, b.clock.copy()))
        b.pc += 1

    def _compute(self, b: _Block, t: Transmission, received: list[Value] | None) -> list[Value]:
        """Apply the transmission's data effect; returns the values it sends."""
        st, kind, out = t.first, t.type, []
        for i in range(t.cnt):
            src = self.layout.slot(b.gpu.id, st.srcbuf, st.srcoff + i)
            dst = self.layout.slot(b.gpu.id, st.dstbuf, st.dstoff + i)
            got = received[i] if received is not None and i < len(received) else GARBAGE
            if kind == "re":
                acc = self._read(b, dst, st.position)
                for sub in t.steps:
                    part = self.layout.slot(b.gpu.id, st.srcbuf, sub.srcoff + i)
                    acc = _add(acc, self._read(b, part, sub.position))
                self._write(b, dst, acc, t.steps[-1].position)
                continue
            if kind in ("s", "cpy"):
                value = self._read(b, src, st.position)
            elif kind in ("rrs", "rrc", "rrcs"):
                value = _add(got, self._read(b, src, st.position))
            else:  # r, rcs
                value = got
            if kind in ("r", "rcs", "rrc", "rrcs", "cpy"):
                self._write(b, dst, value, st.position)
            out.append(value)
        return out

    # --- memory with race detection ------------------------------------------------------
    def _ordered(self, b: _Block, other: int, epoch: int) -> bool:
        return other == b.index or b.clock[other] >= epoch

    def _read(self, b: _Block, slot: Slot, pos: int) -> Value:
        mem = self.memory[b.gpu.id]
        chunk = mem.get(slot)
        if chunk is None or chunk.value is None:
            self._once("uninitialized-read", b, pos, f"reads {_name(slot)}, which holds no data")
            chunk = mem.setdefault(slot, _Chunk(None))
        w = chunk.writer
        if w is not None and not self._ordered(b, w[0], w[1]):
            self._race(b, pos, slot, "read", w[2])
        chunk.readers[b.index] = (int(b.clock[b.index]), (b.gpu.id, b.tb.id, pos))
        return chunk.value if chunk.value is not None else GARBAGE

    def _write(self, b: _Block, slot: Slot, value: Value, pos: int) -> None:
        chunk = self.memory[b.gpu.id].setdefault(slot, _Chunk(None))
        w = chunk.writer
        if w is not None and not self._ordered(b, w[0], w[1]):
            self._race(b, pos, slot, "write", w[2])
        for reader, (epoch, ref) in chunk.readers.items():
            if not self._ordered(b, reader, epoch):
                self._race(b, pos, slot, "write", ref, "read")
        chunk.value = value
        chunk.writer = (b.index, int(b.clock[b.index]), (b.gpu.id, b.tb.id, pos))
        chunk.readers = {}

    def _race(self, b: _Block, pos: int, slot: Slot, access: str, other: StepRef,
              other_access: str = "wrote") -> None:
        key = ("data-race", b.gpu.id, slot)
        if key in self.reported:
            return
        self.reported.add(key)
        self.findings.append(finding(
            "data-race", f"{access} of {_name(slot)} is unordered with tb {other[1]} step "
            f"{other[2]}, which {other_access} it", gpu=b.gpu.id, tb=b.tb.id, step=pos))

    def _once(self, rule: str, b: _Block, pos: int, detail: str) -> None:
        key = (rule, b.gpu.id, b.tb.id, pos)
        if key not in self.reported:
            self.reported.add(key)
            self.findings.append(finding(rule, detail, gpu=b.gpu.id, tb=b.tb.id, step=pos))


def _add(a: Value, b: Value) -> Value:
    return tuple(sorted(a + b))


def _name(slot: Slot) -> str:
    return f"{slot[0]}[{slot[1]}]"
