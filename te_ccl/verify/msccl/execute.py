"""Symbolic execution of every rank and thread block of an MSCCL algorithm.

Each thread block runs its transmissions (:mod:`~te_ccl.verify.msccl.kernel`) in order.
A transmission starts when (1) every flag it waits on has reached the awaited step,
(2) a message is queued on its receive connection, if it receives, and (3) its send
connection has a free slot, if it sends. A connection ``(sending gpu, receiving gpu,
channel)`` is a FIFO of at most ``fifo_slots`` messages (default 8 = NCCL_STEPS, the
slots of an NCCL connection buffer); a message is one step's ``cnt`` chunks. Thread
blocks are scheduled round-robin (in file order, each as far as it can go) until none
can move; those left unfinished are a **deadlock**. A sweep visits only the blocks that
an event may have unblocked since their last try (a message for them, a freed slot, a
flag they wait on), which is the same order at a cost linear in the steps.

Buffers hold symbolic values (:mod:`.values`, :mod:`~te_ccl.verify.msccl.layout`).
Reading a chunk that holds no input and that no step wrote is an **uninitialized read**.
**Data races** (:mod:`.memory`, :mod:`.hb`): happens-before is program order within a
thread block, flag waits (a waiter is ordered after everything the publisher did up to
the *first* publication that satisfies it: the weakest guarantee), and send→receive of
the same message. FIFO back-pressure is deliberately not an ordering edge, so the race
check never relies on buffer sizes. Two accesses to one chunk of one GPU, at least one a
write, that are not ordered are a race; the check is sound for the accesses of the
executed interleaving and, since ordering edges do not depend on timing, for every
interleaving that reaches the same accesses. Messages left in a FIFO at the end are
**unreceived data**.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from te_ccl.verify.msccl.findings import Finding, finding
from te_ccl.verify.msccl.hb import HappensBefore
from te_ccl.verify.msccl.kernel import Transmission, transmissions
from te_ccl.verify.msccl.layout import Layout, Slot
from te_ccl.verify.msccl.memory import Memory
from te_ccl.verify.msccl.model import RECVS, SENDS, WRITES_DST, Algo, Threadblock
from te_ccl.verify.msccl.values import GARBAGE, Packed, add

__all__ = ["execute", "Execution", "StepRef", "FIFO_SLOTS"]

FIFO_SLOTS = 8          # NCCL_STEPS
_MAX_STUCK_REPORTED = 20

StepRef = tuple[int, int, int]  # (gpu, tb id, step position)
_Message = tuple[list[Packed], int, StepRef]  # values, sender's node, sender's step
_READ_ONLY = frozenset({"s", "cpy"})
_REDUCING = frozenset({"rrs", "rrc", "rrcs"})


class _Block:
    __slots__ = ("index", "gpu", "tb", "program", "pc", "flag", "mem", "tbs", "send_fifo",
                 "recv_fifo", "send_to", "recv_from", "sleepers")

    def __init__(self, index: int, gpu: int, tb: Threadblock) -> None:
        self.index, self.gpu, self.tb = index, gpu, tb
        self.program: list[Transmission] = transmissions(tb)
        self.pc, self.flag = 0, -1
        self.mem: Memory | None = None
        self.tbs: dict[int, _Block] = {}          # thread blocks of the GPU by id
        self.send_fifo: deque[_Message] | None = None
        self.recv_fifo: deque[_Message] | None = None
        self.send_to = self.recv_from = -1        # the blocks at the other ends
        self.sleepers: list[int] = []             # blocks stopped by this one's flag


@dataclass
class Execution:
    """Final state of every GPU's chunks (:meth:`value`, :meth:`writer`) and findings."""

    memories: dict[int, Memory]
    findings: list[Finding]
    completed: bool

    def value(self, gpu: int, slot: Slot) -> Packed | None:
        """The packed value chunk ``slot`` of ``gpu`` holds at the end."""
        mem = self.memories.get(gpu)
        return None if mem is None else mem.value(slot)

    def writer(self, gpu: int, slot: Slot) -> StepRef | None:
        """The step that last wrote chunk ``slot`` of ``gpu``."""
        mem = self.memories.get(gpu)
        return None if mem is None else mem.writer(slot)


def execute(algo: Algo, layout: Layout, *, fifo_slots: int = FIFO_SLOTS) -> Execution:
    """Run the algorithm symbolically; see the module docstring for what is reported."""
    return _Machine(algo, layout, fifo_slots).run()


class _Machine:
    def __init__(self, algo: Algo, layout: Layout, fifo_slots: int) -> None:
        self.slots = fifo_slots
        self.blocks: list[_Block] = []
        local, width, per_gpu = [], [], []
        for gpu in algo.gpus:
            tbs: dict[int, _Block] = {}
            mine = []
            for i, tb in enumerate(gpu.threadblocks):
                b = _Block(len(self.blocks), gpu.id, tb)
                b.tbs = tbs
                tbs.setdefault(tb.id, b)
                self.blocks.append(b)
                mine.append(b)
                local.append(i)
                width.append(len(gpu.threadblocks))
            per_gpu.append((gpu, mine))
        self.hb = HappensBefore(local, width, self._waits())
        self._connect()
        self.findings: list[Finding] = []
        self.reported: set[tuple[str, int, int]] = set()
        tb_ids = [b.tb.id for b in self.blocks]
        self.memories: dict[int, Memory] = {}
        for gpu, mine in per_gpu:
            mem = Memory(gpu, layout, [b.program for b in mine], self.hb, tb_ids, self._report)
            self.memories.setdefault(gpu.id, mem)
            for b in mine:
                b.mem = mem

    def _waits(self) -> list[dict[int, int]]:
        """Per block: flag value -> number of waits on it."""
        waits: list[dict[int, int]] = [{} for _ in self.blocks]
        for b in self.blocks:
            for t in b.program:
                for depid, deps in t.deps:
                    target = b.tbs.get(depid)
                    if target is not None:
                        waits[target.index][deps] = waits[target.index].get(deps, 0) + 1
        return waits

    def _connect(self) -> None:
        self.fifos: dict[tuple[int, int, int], deque[_Message]] = {}
        senders: dict[tuple[int, int, int], _Block] = {}
        receivers: dict[tuple[int, int, int], _Block] = {}
        for b in self.blocks:
            if b.tb.send >= 0:
                key = (b.gpu, b.tb.send, b.tb.chan)
                b.send_fifo = self.fifos.setdefault(key, deque())
                senders.setdefault(key, b)
            if b.tb.recv >= 0:
                key = (b.tb.recv, b.gpu, b.tb.chan)
                b.recv_fifo = self.fifos.setdefault(key, deque())
                receivers.setdefault(key, b)
        for key, b in senders.items():
            b.send_to = receivers[key].index if key in receivers else -1
        for key, b in receivers.items():
            b.recv_from = senders[key].index if key in senders else -1

    # --- scheduling -----------------------------------------------------------------
    def run(self) -> Execution:
        blocks = self.blocks
        self.sweep, self.later = list(range(len(blocks))), []  # heaps of block indices
        self.queued = bytearray([1]) * len(blocks)
        while self.sweep:
            while self.sweep:
                b = blocks[heapq.heappop(self.sweep)]
                self.at = b.index
                self.queued[b.index] = 0
                while b.pc < len(b.program) and self._ready(b):
                    self._fire(b)
            self.sweep, self.later, self.at = self.later, [], -1
        stuck = [b for b in blocks if b.pc < len(b.program)]
        for b in stuck[:_MAX_STUCK_REPORTED]:
            self._report_stuck(b)
        if len(stuck) > _MAX_STUCK_REPORTED:
            self.findings.append(finding("deadlock", f"{len(stuck) - _MAX_STUCK_REPORTED} more "
                                         "thread blocks are stuck"))
        if not stuck:
            self._report_unreceived()
        return Execution(self.memories, self.findings, not stuck)

    def _wake(self, i: int) -> None:
        """Block ``i`` may be able to move: visit it in this sweep or the next."""
        if i >= 0 and not self.queued[i]:
            self.queued[i] = 1
            heapq.heappush(self.sweep if i > self.at else self.later, i)

    def _ready(self, b: _Block) -> bool:
        t = b.program[b.pc]
        for depid, deps in t.deps:
            target = b.tbs.get(depid)
            if target is None or target.flag < deps:
                if target is not None:
                    target.sleepers.append(b.index)
                return False
        kind = t.steps[0].type
        if kind in RECVS and not b.recv_fifo:
            return False
        return not (kind in SENDS and (b.send_fifo is None or len(b.send_fifo) >= self.slots))

    def _report_stuck(self, b: _Block) -> None:
        t = b.program[b.pc]
        waits = []
        for depid, deps in t.deps:
            target = b.tbs.get(depid)
            if target is None or target.flag < deps:
                at = "missing" if target is None else f"its flag is {target.flag}"
                waits.append(f"tb {depid} to finish step {deps} ({at})")
        if t.first.receives and not b.recv_fifo:
            waits.append(f"data from gpu {b.tb.recv} on channel {b.tb.chan}")
        if t.first.sends and len(b.send_fifo or ()) >= self.slots:
            waits.append(f"a free slot towards gpu {b.tb.send} on channel {b.tb.chan} "
                         f"({self.slots} messages unreceived)")
        self.findings.append(finding(
            "deadlock", f"'{t.type}' waits forever for " + " and ".join(waits),
            gpu=b.gpu, tb=b.tb.id, step=t.first.position, line=t.first.line))

    def _report_unreceived(self) -> None:
        for (_src, dst, chan), fifo in sorted(self.fifos.items()):
            if fifo:
                g, tb, pos = fifo[0][2]
                self.findings.append(finding(
                    "unreceived-data", f"{len(fifo)} message(s) to gpu {dst} on channel {chan} "
                    "are never received", gpu=g, tb=tb, step=pos))

    def _report(self, b: int, pos: int, rule: str, detail: str) -> None:
        block = self.blocks[b]
        key = (rule, b, pos)
        if key not in self.reported:
            self.reported.add(key)
            self.findings.append(finding(rule, detail, gpu=block.gpu, tb=block.tb.id, step=pos))

    # --- one transmission -------------------------------------------------------------
    def _fire(self, b: _Block) -> None:
        t = b.program[b.pc]
        first = t.steps[0]
        kind = first.type
        received, msg_node = None, -1
        if kind in RECVS:
            received, msg_node, _ = b.recv_fifo.popleft()
            self._wake(b.recv_from)
        waits = [(b.tbs[depid].index, deps) for depid, deps in t.deps] if t.deps else []
        node = self.hb.fire(b.index, waits, msg_node)
        out = self._compute(b, t, received)
        if kind in SENDS:
            b.send_fifo.append((out, node, (b.gpu, b.tb.id, first.position)))
            self._wake(b.send_to)
        if t.hasdep:
            b.flag = t.flag
            self.hb.publish(b.index, t.flag, node)
            for w in b.sleepers:
                self._wake(w)
            b.sleepers.clear()
        b.pc += 1

    def _compute(self, b: _Block, t: Transmission, received: list[Packed] | None
                 ) -> list[Packed]:
        """Apply the transmission's data effect; returns the values it sends."""
        st, mem, blk = t.steps[0], b.mem, b.index
        kind, pos, offsets = st.type, st.position, mem.offsets
        src, dst = offsets[st.srcbuf] + st.srcoff, offsets[st.dstbuf] + st.dstoff
        if kind == "re":
            for i in range(t.cnt):
                acc = mem.read(blk, pos, dst + i)
                for sub in t.steps:
                    acc = add(acc, mem.read(blk, sub.position, offsets[st.srcbuf] + sub.srcoff + i))
                mem.write(blk, t.steps[-1].position, dst + i, acc)
            return []
        out = []
        writes = kind in WRITES_DST
        for i in range(t.cnt):
            if kind in _READ_ONLY:
                value = mem.read(blk, pos, src + i)
            else:
                got = received[i] if received is not None and i < len(received) else GARBAGE
                value = add(got, mem.read(blk, pos, src + i)) if kind in _REDUCING else got
            if writes:
                mem.write(blk, pos, dst + i, value)
            out.append(value)
        return out
