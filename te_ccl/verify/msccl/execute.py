"""Symbolic execution of every rank and thread block of an MSCCL algorithm.

Each thread block runs its transmissions (:mod:`~te_ccl.verify.msccl.kernel`) in order.
A transmission first waits until every flag it waits on has reached the awaited step.
Then it runs its primitive calls one after the other, as the kernel does: a step of
``cnt`` chunks is ``cnt`` calls for large messages, fewer when the file's ``maxBytes``
lets the runtime put several chunks in a call
(:meth:`~te_ccl.runtime_limits.RuntimeLimits.max_allowed_count`). A call that receives
needs a call queued on its receive
connection; a call that sends needs room on its send connection. A connection
``(sending gpu, receiving gpu, channel)`` is a FIFO of ``slots`` slots (``NCCL_STEPS``
unless overridden), each call taking ``call_slots(proto)`` of them (4 under Simple, 1
under LL/LL128): the file's ``proto`` decides how many sends a connection holds (2 or 8).

Thread blocks are scheduled round-robin (in file order, each as far as it can go) until
none can move; those left unfinished are a **deadlock**. The order does not matter: a
connection has one sending and one receiving thread block (rule ``connection-unique``)
and flags only grow, so a call that can go stays able to go until it goes; one run
deadlocks exactly when every run does. The deadlock finding names the cycle of waiting
parties: ``r0/tb1/s3 waits to send to r1 (connection full) <- r1/tb0/s2 waits for ...``.
A sweep visits only the blocks that an event may have unblocked since their last try (a
call for them, a freed slot, a flag they wait on), which is the same order at a cost
linear in the calls.

Buffers hold symbolic values (:mod:`.values`, :mod:`~te_ccl.verify.msccl.layout`).
A step's data moves as one message when its last call is sent. Reading a chunk that
holds no input and that no step wrote is an **uninitialized read**.
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

from te_ccl.deadline import check
from te_ccl.runtime_limits import MSCCL
from te_ccl.verify.msccl.findings import Finding, finding
from te_ccl.verify.msccl.hb import HappensBefore
from te_ccl.verify.msccl.kernel import Transmission, transmissions
from te_ccl.verify.msccl.layout import Layout, Slot
from te_ccl.verify.msccl.memory import Memory
from te_ccl.verify.msccl.model import RECVS, SENDS, WRITES_DST, Algo, Threadblock
from te_ccl.verify.msccl.values import GARBAGE, Packed, add

__all__ = ["execute", "buffering", "Execution", "StepRef"]

_MAX_STUCK_REPORTED = 20

StepRef = tuple[int, int, int]  # (gpu, tb id, step position)
_Message = tuple[list[Packed], int, StepRef]  # values, sender's node, sender's step
_CHECK_EVERY = 4096  # thread-block visits between two looks at the compile's deadline
_VERIFYING = "verifying the MSCCL XML"
_READ_ONLY = frozenset({"s", "cpy"})
_REDUCING = frozenset({"rrs", "rrc", "rrcs"})


class _Conn:
    """One connection: the calls sent and not yet received, and the steps' data."""

    __slots__ = ("queued", "messages", "sender", "receiver")

    def __init__(self) -> None:
        self.queued = 0                          # calls holding slots
        self.messages: deque[_Message] = deque()  # one per sending step, when it completes
        self.sender = self.receiver = -1          # block indices at the two ends


class _Block:
    __slots__ = ("index", "gpu", "tb", "program", "plan", "pc", "call", "flag", "mem", "tbs",
                 "send", "recv", "sleepers")

    def __init__(self, index: int, gpu: int, tb: Threadblock) -> None:
        self.index, self.gpu, self.tb = index, gpu, tb
        self.program: list[Transmission] = transmissions(tb)
        self.plan: list[tuple[int, _Conn | None, _Conn | None]] | None = None  # when it runs
        self.pc, self.call, self.flag = 0, 0, -1  # transmission, calls of it done, flag
        self.mem: Memory | None = None
        self.tbs: dict[int, _Block] = {}          # thread blocks of the GPU by id
        self.send: _Conn | None = None
        self.recv: _Conn | None = None
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


def execute(algo: Algo, layout: Layout, *, slots: int | None = None) -> Execution:
    """Run the algorithm symbolically with connections of ``slots`` slots (default
    ``NCCL_STEPS``); see the module docstring for what is reported."""
    return _Machine(algo, layout, MSCCL.nccl_steps if slots is None else slots).run()


def buffering(algo: Algo, *, slots: int | None = None) -> list[Finding]:
    """Only the waits, calls and flags of :func:`execute`, without data: its deadlock
    and unreceived-data findings, at a fraction of the cost (for bulk checks)."""
    return _Machine(algo, None, MSCCL.nccl_steps if slots is None else slots).run().findings


class _Machine:
    def __init__(self, algo: Algo, layout: Layout | None, slots: int) -> None:
        self.depth = slots // MSCCL.call_slots(algo.proto)  # calls a connection holds
        # chunks per call at the largest message the file accepts (1: no maxBytes)
        self.per_call = 1
        if (algo.max_bytes or 0) > 0:
            self.per_call = MSCCL.max_allowed_count(algo.proto, algo.max_bytes,
                                                    algo.nchunksperloop)
        self.blocks: list[_Block] = []
        local, width, per_gpu = [], [], []
        for gpu in algo.gpus:
            check(_VERIFYING)
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
        self._connect()
        self.findings: list[Finding] = []
        self.reported: set[tuple[str, int, int]] = set()
        self.memories: dict[int, Memory] = {}
        self.hb = None if layout is None else HappensBefore(local, width, self._waits())
        if layout is None:
            return
        tb_ids = [b.tb.id for b in self.blocks]
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
        self.conns: dict[tuple[int, int, int], _Conn] = {}
        for b in self.blocks:
            if b.tb.send >= 0:
                b.send = self.conns.setdefault((b.gpu, b.tb.send, b.tb.chan), _Conn())
                if b.send.sender < 0:
                    b.send.sender = b.index
            if b.tb.recv >= 0:
                b.recv = self.conns.setdefault((b.tb.recv, b.gpu, b.tb.chan), _Conn())
                if b.recv.receiver < 0:
                    b.recv.receiver = b.index

    # --- scheduling -----------------------------------------------------------------
    def run(self) -> Execution:
        blocks = self.blocks
        self.sweep, self.later = list(range(len(blocks))), []  # heaps of block indices
        self.queued = bytearray([1]) * len(blocks)
        visits = 0
        while self.sweep:
            while self.sweep:
                visits += 1
                if visits % _CHECK_EVERY == 0:
                    check(_VERIFYING)
                b = blocks[heapq.heappop(self.sweep)]
                self.at = b.index
                self.queued[b.index] = 0
                self._advance(b)
            self.sweep, self.later, self.at = self.later, [], -1
        stuck = [b for b in blocks if b.pc < len(b.program)]
        if stuck:
            self._report_deadlock(stuck)
        else:
            self._report_unreceived()
        return Execution(self.memories, self.findings, not stuck)

    def _wake(self, i: int) -> None:
        """Block ``i`` may be able to move: visit it in this sweep or the next."""
        if i >= 0 and not self.queued[i]:
            self.queued[i] = 1
            heapq.heappush(self.sweep if i > self.at else self.later, i)

    def _plan(self, b: _Block) -> list[tuple[int, _Conn | None, _Conn | None]]:
        """Per transmission: its calls and the connections it receives and sends on
        (calls -1: it needs a connection the thread block does not have)."""
        plan = []
        for t in b.program:
            kind = t.steps[0].type
            recv = b.recv if kind in RECVS else None
            send = b.send if kind in SENDS else None
            if (recv is None and kind in RECVS) or (send is None and kind in SENDS):
                plan.append((-1, None, None))
            else:
                calls = MSCCL.step_calls(t.cnt, self.per_call) if recv or send else 0
                plan.append((calls, recv, send))
        return plan

    def _advance(self, b: _Block) -> None:
        """Run ``b`` as far as it can go: waits, then calls, then the step's data."""
        program, depth, wake = b.program, self.depth, self._wake
        if b.plan is None:
            b.plan = self._plan(b)
        while b.pc < len(program):
            calls, recv, send = b.plan[b.pc]
            if b.call == 0:
                for depid, deps in program[b.pc].deps:
                    target = b.tbs.get(depid)
                    if target is None or target.flag < deps:
                        if target is not None:
                            target.sleepers.append(b.index)
                        return
            if calls < 0:
                return
            while b.call < calls:
                if (recv and not recv.queued) or (send and send.queued >= depth):
                    return
                if recv:
                    recv.queued -= 1
                    wake(recv.sender)
                if send:
                    send.queued += 1
                    wake(send.receiver)
                b.call += 1
            if recv and not recv.messages:  # only when the cnt sequences differ
                return
            self._fire(b)

    # --- deadlock -----------------------------------------------------------------------
    def _blockers(self, b: _Block) -> list[tuple[str, int]]:
        """Why the stuck block ``b`` waits: (reason, the block it waits for or -1)."""
        t = b.program[b.pc]
        if b.call == 0:
            waits = [(f"waits for tb {depid} to finish step {deps} "
                      f"({'missing' if target is None else f'its flag is {target.flag}'})",
                      -1 if target is None else target.index)
                     for depid, deps in t.deps
                     if (target := b.tbs.get(depid)) is None or target.flag < deps]
            if waits:
                return waits
        kind, tb = t.type, b.tb
        where = f"r{{}} on channel {tb.chan}"
        calling = b.call < MSCCL.step_calls(t.cnt, self.per_call)
        waits = []
        if kind in RECVS and (b.recv is None or not (b.recv.queued if calling
                                                     else b.recv.messages)):
            waits.append((f"waits for data from {where.format(tb.recv)} (connection empty)",
                          b.recv.sender if b.recv else -1))
        if kind in SENDS and (b.send is None or calling and b.send.queued >= self.depth):
            waits.append((f"waits to send to {where.format(tb.send)} (connection full: "
                          f"{self.depth} call(s) unreceived)", b.send.receiver if b.send else -1))
        return waits

    def _party(self, b: _Block) -> str:
        t = b.program[b.pc]
        calls = MSCCL.step_calls(t.cnt, self.per_call)
        call = f" call {b.call + 1}/{calls}" if calls > 1 and b.call else ""
        return f"r{b.gpu}/tb{b.tb.id}/s{t.first.position}{call}"

    def _report_deadlock(self, stuck: list[_Block]) -> None:
        """One finding naming a cycle of waiting parties, then one per other stuck block."""
        waiting = {b.index: self._blockers(b) for b in stuck}
        path, seen, i = [], {}, stuck[0].index
        while i in waiting and i not in seen:
            seen[i] = len(path)
            path.append(i)
            nxt = [j for _, j in waiting[i] if j in waiting]
            i = nxt[0] if nxt else -1
        cycle = path[seen[i]:] if i in seen else path
        links = []
        for k in cycle:
            b = self.blocks[k]
            after = cycle[(cycle.index(k) + 1) % len(cycle)] if i in seen else -1
            reason = next((r for r, j in waiting[k] if j == after), waiting[k][0][0])
            links.append(f"{self._party(b)} {reason}")
        tail = f" <- {self._party(self.blocks[cycle[0]])}" if i in seen else \
            " (which never comes)"
        head = self.blocks[cycle[0]]
        self._stuck(head, " <- ".join(links) + tail)
        others = [b for b in stuck if b is not head]
        for b in others[:_MAX_STUCK_REPORTED]:
            t = b.program[b.pc]
            self._stuck(b, f"'{t.type}' " + "; ".join(r for r, _ in waiting[b.index]) + " forever")
        if len(others) > _MAX_STUCK_REPORTED:
            self.findings.append(finding("deadlock", f"{len(others) - _MAX_STUCK_REPORTED} "
                                         "more thread blocks are stuck"))

    def _stuck(self, b: _Block, message: str) -> None:
        t = b.program[b.pc]
        self.findings.append(finding("deadlock", message, gpu=b.gpu,
                                     tb=b.tb.id, step=t.first.position, line=t.first.line))

    def _report_unreceived(self) -> None:
        for (_src, dst, chan), conn in sorted(self.conns.items()):
            if conn.messages:
                g, tb, pos = conn.messages[0][2]
                self.findings.append(finding(
                    "unreceived-data", f"{len(conn.messages)} message(s) to gpu {dst} on "
                    f"channel {chan} are never received", gpu=g, tb=tb, step=pos))

    def _report(self, b: int, pos: int, rule: str, detail: str) -> None:
        block = self.blocks[b]
        key = (rule, b, pos)
        if key not in self.reported:
            self.reported.add(key)
            self.findings.append(finding(rule, detail, gpu=block.gpu, tb=block.tb.id, step=pos))

    # --- one transmission -------------------------------------------------------------
    def _fire(self, b: _Block) -> None:
        """The transmission's calls are done: move its data, publish its flag."""
        t = b.program[b.pc]
        first = t.steps[0]
        kind = first.type
        received, msg_node = None, -1
        if kind in RECVS:
            received, msg_node, _ = b.recv.messages.popleft()
        out, node = [], -1
        if self.hb is not None:
            waits = [(b.tbs[depid].index, deps) for depid, deps in t.deps] if t.deps else []
            node = self.hb.fire(b.index, waits, msg_node)
            out = self._compute(b, t, received)
        if kind in SENDS:
            b.send.messages.append((out, node, (b.gpu, b.tb.id, first.position)))
            self._wake(b.send.receiver)
        if t.hasdep:
            b.flag = t.flag
            if self.hb is not None:
                self.hb.publish(b.index, t.flag, node)
            for w in b.sleepers:
                self._wake(w)
            b.sleepers.clear()
        b.pc += 1
        b.call = 0

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
