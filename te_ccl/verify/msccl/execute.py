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
A sweep visits only the blocks that an event may have unblocked since their last try: a
block records the one condition it stopped at (a flag below the value it needs, no call
to receive, a full connection, a message not yet complete), and only the event that can
meet that condition wakes it. The order is the same, at a cost linear in the calls.

The scheduler (:class:`_Machine`) fires the transmissions without their data; the data
and the race check (:class:`_Data`) follow the order it fires them in, which the same
confluence makes as good as any. From :data:`FORK_FROM` steps (:func:`judged`) they run in
a forked process beside the scheduler, which streams the order to it in batches
(:func:`te_ccl.background.streamed`): at 1024 GPUs they take twice what the scheduler
does.

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

from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import TypeVar

from te_ccl.background import streamed, workers
from te_ccl.deadline import check
from te_ccl.runtime_limits import MSCCL, RuntimeLimits
from te_ccl.verify.msccl.findings import Finding, finding
from te_ccl.verify.msccl.hb import HappensBefore
from te_ccl.verify.msccl.kernel import Transmission, transmissions
from te_ccl.verify.msccl.layout import Layout, Slot
from te_ccl.verify.msccl.memory import Memory, Report
from te_ccl.verify.msccl.model import (
    READS_SRC,
    RECVS,
    SENDS,
    STEP_TYPES,
    WRITES_DST,
    Algo,
    Gpu,
    Threadblock,
)
from te_ccl.verify.msccl.values import GARBAGE, Packed, add

__all__ = ["execute", "judged", "buffering", "Execution", "StepRef", "FORK_FROM", "CHECK_EVERY",
           "RUN_FROM"]

T = TypeVar("T")
FORK_FROM = 200_000  # steps: from here the data runs in a forked process (:func:`judged`)

_MAX_STUCK_REPORTED = 20

StepRef = tuple[int, int, int]  # (gpu, tb id, step position)
_Message = tuple[list[Packed], int]  # values, sender's node
CHECK_EVERY = 4096  # thread-block visits between two looks at the compile's deadline
_VERIFYING = "verifying the MSCCL XML"
_REDUCING = frozenset({"rrs", "rrc", "rrcs"})
_NO_DATA: list[Packed] = []  # what a step that sends nothing "sends" (never modified)
RUN_FROM = 4  # chunks from which a step's accesses are checked for findings as whole runs


# Why a block stopped: the one condition whose change can let it move again (others
# only ever move a condition towards "satisfied": flags grow, a connection's sender only
# adds calls and messages, its receiver only frees slots).
_GOING = 0      # queued, running, or finished
_FLAG = 1       # a flag it waits on is too low (it is among that block's sleepers)
_CALL = 2       # its receive connection has no call queued
_ROOM = 3       # its send connection is full
_MESSAGE = 4    # its calls are done but the sending step has not completed
_NEVER = 5      # it waits on a missing thread block or needs a connection it lacks


# step type -> (receives, sends, data flags): (reads src, receives, reduces, writes dst,
# sends), the last None for the fused reduction ``re``
_KINDS = {kind: (kind in RECVS, kind in SENDS,
                 (kind in READS_SRC, kind in RECVS, kind in _REDUCING, kind in WRITES_DST,
                  None if kind == "re" else kind in SENDS))
          for kind in STEP_TYPES}


class _Conn:
    """One connection: the calls sent and not yet received, the sending steps completed
    and not yet received, and the blocks at its two ends."""

    __slots__ = ("queued", "sent", "sender", "receiver")

    def __init__(self) -> None:
        self.queued = 0                   # calls holding slots
        self.sent = 0                     # messages: one per sending step, when it completes
        self.sender = self.receiver = -1  # block indices at the two ends


class _Block:
    __slots__ = ("index", "gpu", "tb", "program", "size", "ops", "pc", "call", "tbs",
                 "send", "recv")

    def __init__(self, index: int, gpu: int, tb: Threadblock) -> None:
        self.index, self.gpu, self.tb = index, gpu, tb
        self.program: list[Transmission] = transmissions(tb)  # until it is planned
        self.size = len(self.program)
        self.ops: list[_Op] = []                  # the program, planned (_Machine._plan)
        self.pc, self.call = 0, 0                 # transmission, calls of it done
        self.tbs: dict[int, int] = {}             # the GPU's blocks: tb id -> index
        self.send: _Conn | None = None
        self.recv: _Conn | None = None


# One transmission, planned for the scheduler: its flag waits as (block index, value),
# its calls (-1: it can never run), receive and send connections, and the flag it
# publishes (-1: none).
_Op = tuple[tuple[tuple[int, int], ...], int, "_Conn | None", "_Conn | None", int]

# One transmission, planned for its data: the publications it joins and the one it
# makes (-1: none; see _Data._plan), its step's position, the data effect (see
# _Data._compute): the step type's flags, src and dst chunk indices, cnt; and the
# message queues it takes from and adds to.
_DataOp = tuple[tuple[int, ...], int, int, tuple, "int | tuple", int, int,
                "deque | None", "deque | None"]


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

    def holds(self, gpu: int, buf: str, first: int, want: list[Packed]) -> bool:
        """Whether ``gpu``'s chunks of ``buf`` from ``first`` on hold ``want`` at the end
        (False also where :meth:`value` must tell chunk by chunk)."""
        mem = self.memories.get(gpu)
        return mem is not None and mem.holds(buf, first, want)

    def writer(self, gpu: int, slot: Slot) -> StepRef | None:
        """The step that last wrote chunk ``slot`` of ``gpu``."""
        mem = self.memories.get(gpu)
        return None if mem is None else mem.writer(slot)


def execute(algo: Algo, layout: Layout, *, slots: int | None = None) -> Execution:
    """Run the algorithm symbolically with connections of ``slots`` slots (default
    ``NCCL_STEPS``); see the module docstring for what is reported."""
    return judged(algo, layout, _same, slots=slots, fork=False)


def judged(algo: Algo, layout: Layout, then: Callable[[Execution], T], *,
           slots: int | None = None, fork: bool | None = None,
           limits: RuntimeLimits = MSCCL) -> T:
    """``then(execute(algo, layout, slots=slots))``. With ``fork`` (by default from
    :data:`FORK_FROM` steps, where there is a second core) the data and the race check
    run in a forked process beside the scheduler, on the order it fires the
    transmissions in, and ``then`` runs there too: the memories stay there, and only
    what ``then`` returns comes back. ``limits``: the runtime whose buffers decide the
    chunks per call (the MSCCL executor's, or RCCL's smaller LL and LL128 buffers)."""
    machine = _Machine(algo, limits.nccl_steps if slots is None else slots, limits)
    if fork is None:
        fork = workers() > 1 and sum(b.size for b in machine.blocks) >= FORK_FROM
    if not fork:  # the data follows the scheduler batch by batch
        here = _Data(machine, layout)
        completed = machine.run(here.feed)
        return then(here.finish(completed, machine.findings))

    def schedule(put: Callable[[object], None]) -> None:
        put((machine.run(put), machine.findings))  # the last item

    def data(items: Iterator) -> T:
        run = _Data(machine, layout)
        completed, found = False, []
        for item in items:
            if isinstance(item, array):
                run.feed(item)
            else:
                completed, found = item
        return then(run.finish(completed, found))

    return streamed(schedule, data)[1]


def buffering(algo: Algo, *, slots: int | None = None) -> list[Finding]:
    """Only the waits, calls and flags of :func:`execute`, without data: its deadlock
    and unreceived-data findings, at a fraction of the cost (for bulk checks)."""
    machine = _Machine(algo, MSCCL.nccl_steps if slots is None else slots)
    machine.run(None)
    return machine.findings


def _same(run: Execution) -> Execution:
    return run


def _reporter(gpus: list[int], tb_ids: list[int], findings: list[Finding]) -> Report:
    """What the memories call with a finding: added to ``findings`` once per rule and
    step. It holds no reference to the machine, so that nothing of the machine is kept
    alive by a reference cycle (freed only by a garbage collection) once it is done."""
    reported: set[tuple[str, int, int]] = set()

    def report(b: int, pos: int, rule: str, detail: str) -> None:
        key = (rule, b, pos)
        if key not in reported:
            reported.add(key)
            findings.append(finding(rule, detail, gpu=gpus[b], tb=tb_ids[b], step=pos))
    return report


def _current(b: _Block) -> Transmission:
    """The transmission a stuck block stopped at (rebuilt: plans replace the programs)."""
    return transmissions(b.tb)[b.pc]


class _Machine:
    """The scheduler: which transmissions fire, in which order, and where it deadlocks."""

    def __init__(self, algo: Algo, slots: int, limits: RuntimeLimits = MSCCL) -> None:
        self.depth = slots // limits.call_slots(algo.proto)  # calls a connection holds
        # chunks per call at the largest message the file accepts (1: no maxBytes)
        self.per_call = 1
        if (algo.max_bytes or 0) > 0:
            self.per_call = limits.max_allowed_count(algo.proto, algo.max_bytes,
                                                     algo.nchunksperloop)
        self.blocks: list[_Block] = []
        self.local: list[int] = []      # each block's index among its GPU's blocks
        self.width: list[int] = []      # the number of blocks of its GPU
        self.gpus: list[tuple[Gpu, list[_Block]]] = []  # each <gpu> and its blocks
        for gpu in algo.gpus:
            check(_VERIFYING)
            tbs: dict[int, int] = {}
            mine = []
            for i, tb in enumerate(gpu.threadblocks):
                b = _Block(len(self.blocks), gpu.id, tb)
                b.tbs = tbs
                tbs.setdefault(tb.id, b.index)
                self.blocks.append(b)
                mine.append(b)
                self.local.append(i)
                self.width.append(len(gpu.threadblocks))
            self.gpus.append((gpu, mine))
        self._connect()
        self.findings: list[Finding] = []

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

    def _plan(self, b: _Block) -> list[_Op]:
        """Everything the scheduler needs of each transmission, looked up once. A
        transmission waiting on a missing thread block, or needing a connection the
        thread block does not have, can never run (calls -1, no waits)."""
        ops = []
        tbs, per_call, calls_of = b.tbs, self.per_call, {}
        for steps, deps, hasdep, flag, _ in b.program:  # unpacked: faster than by name
            receives, sends, _ = _KINDS[steps[0][1]]  # [1]: the type
            recv = b.recv if receives else None
            send = b.send if sends else None
            never = (receives and recv is None) or (sends and send is None)
            waits: tuple[tuple[int, int], ...] = ()
            for depid, value in deps:
                target = tbs.get(depid)
                if target is None:
                    never = True
                    break
                waits += ((target, value),)
            if never:
                ops.append(((), -1, None, None, -1))
                continue
            calls = 0
            if receives or sends:
                cnt = steps[-1].cnt
                calls = calls_of.get(cnt, -1)
                if calls < 0:
                    calls = calls_of[cnt] = MSCCL.step_calls(cnt, per_call)
            ops.append((waits, calls, recv, send, flag if hasdep else -1))
        return ops

    # --- scheduling -----------------------------------------------------------------
    def run(self, fired: Callable[[array], None] | None) -> bool:
        """Sweep the blocks in index order, each as far as it can go, until none can
        move; whether every block finished (the findings: the deadlock if not, else the
        messages never received). The index of the block of each transmission
        that completes goes to ``fired``, in order, in batches (after every
        :data:`CHECK_EVERY` visits and at the end).

        The hot loop of the verifier, so written out in one piece. A block stops at the
        first condition it finds unmet and records it (``wait``); an event wakes a block
        (queues it for this sweep if its index is ahead, else for the next) only when it
        may meet the condition that block recorded. Waking it on any other event would
        only add visits that move nothing, so the blocks run in the same order as if
        every event woke every block concerned."""
        blocks, depth = self.blocks, self.depth
        for b in blocks:   # the plans replace the programs, which take more memory
            b.ops = self._plan(b)
            b.program = []
        n = len(blocks)
        flags = [-1] * n                  # each block's published flag
        # why each block stopped (a _GOING .. _NEVER code); one spare entry at the end,
        # which index -1 (a connection end without a block) reads, stays _GOING
        wait = bytearray(n + 1)
        # per block, the blocks stopped by its flag: (flag value they need, block)
        sleepers: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.flags = flags
        order = array("i")
        fire = order.append
        sweep: list[int] = list(range(n))  # heaps of block indices
        later: list[int] = []
        visits = 0
        while sweep:
            while sweep:
                visits += 1
                if visits % CHECK_EVERY == 0:
                    check(_VERIFYING)
                    if fired is not None:
                        fired(order)
                    order = array("i")
                    fire = order.append
                at = heappop(sweep)
                b = blocks[at]
                ops, pc, call = b.ops, b.pc, b.call
                while pc < len(ops):
                    waits, calls, recv, send, flag = ops[pc]
                    if not call:
                        for target, value in waits:
                            if flags[target] < value:
                                sleepers[target].append((value, at))
                                wait[at] = _FLAG
                                break
                        if wait[at]:
                            break
                    if calls < 0:
                        wait[at] = _NEVER
                        break
                    if call < calls:
                        # as many calls at once as one at a time would make before
                        # stopping: no other block moves meanwhile
                        k = calls - call
                        if recv is None:
                            if depth - send.queued < k:
                                k = depth - send.queued
                        elif send is recv:  # a connection to itself: each call frees
                            if not 0 < recv.queued < depth:  # the slot it takes
                                k = 0
                        else:
                            if recv.queued < k:
                                k = recv.queued
                            if send is not None and depth - send.queued < k:
                                k = depth - send.queued
                        if k > 0:
                            if recv is not None:
                                recv.queued -= k
                                other = recv.sender
                                if wait[other] == _ROOM:
                                    wait[other] = _GOING
                                    heappush(sweep if other > at else later, other)
                            if send is not None:
                                send.queued += k
                                other = send.receiver
                                if wait[other] == _CALL:
                                    wait[other] = _GOING
                                    heappush(sweep if other > at else later, other)
                            call += k
                        if call < calls:
                            wait[at] = _CALL if recv is not None and not recv.queued else _ROOM
                            break
                    # the calls are done: the step completes, takes its message and
                    # publishes its flag
                    if recv is not None:
                        if not recv.sent:  # only when the cnt sequences differ
                            wait[at] = _MESSAGE
                            break
                        recv.sent -= 1
                    fire(at)
                    if send is not None:
                        send.sent += 1
                        other = send.receiver
                        if wait[other] == _MESSAGE:
                            wait[other] = _GOING
                            heappush(sweep if other > at else later, other)
                    if flag >= 0:
                        flags[at] = flag
                        if sleepers[at]:
                            asleep = []
                            for value, w in sleepers[at]:
                                if value > flag:
                                    asleep.append((value, w))
                                else:
                                    wait[w] = _GOING
                                    heappush(sweep if w > at else later, w)
                            sleepers[at] = asleep
                    pc += 1
                    call = 0
                b.pc, b.call = pc, call
                if pc == len(ops):
                    b.ops = []  # finished: its plan is not needed again
            sweep, later = later, []
        if fired is not None:
            fired(order)
        stuck = [b for b in blocks if b.pc < b.size]
        if stuck:
            self._report_deadlock(stuck)
        else:
            self._report_unreceived()
        return not stuck

    def _report_unreceived(self) -> None:
        """One finding per connection with messages never received, at the step that
        sent the first of them."""
        for (_src, dst, chan), conn in sorted(self.conns.items()):
            if conn.sent:
                b = self.blocks[conn.sender]
                sends = [t for t in transmissions(b.tb)[:b.pc] if t.type in SENDS]
                first = sends[len(sends) - conn.sent].first.position
                self.findings.append(finding(
                    "unreceived-data", f"{conn.sent} message(s) to gpu {dst} on "
                    f"channel {chan} are never received", gpu=b.gpu, tb=b.tb.id, step=first))

    # --- deadlock -----------------------------------------------------------------------
    def _blockers(self, b: _Block) -> list[tuple[str, int]]:
        """Why the stuck block ``b`` waits: (reason, the block it waits for or -1)."""
        t = _current(b)
        if b.call == 0:
            flags = self.flags
            waits = [(f"waits for tb {depid} to finish step {deps} "
                      f"({'missing' if target is None else f'its flag is {flags[target]}'})",
                      -1 if target is None else target)
                     for depid, deps in t.deps
                     if (target := b.tbs.get(depid)) is None or flags[target] < deps]
            if waits:
                return waits
        kind, tb = t.type, b.tb
        where = f"r{{}} on channel {tb.chan}"
        calling = b.call < MSCCL.step_calls(t.cnt, self.per_call)
        waits = []
        if kind in RECVS and (b.recv is None or not (b.recv.queued if calling
                                                     else b.recv.sent)):
            waits.append((f"waits for data from {where.format(tb.recv)} (connection empty)",
                          b.recv.sender if b.recv else -1))
        if kind in SENDS and (b.send is None or calling and b.send.queued >= self.depth):
            waits.append((f"waits to send to {where.format(tb.send)} (connection full: "
                          f"{self.depth} call(s) unreceived)", b.send.receiver if b.send else -1))
        return waits

    def _party(self, b: _Block) -> str:
        t = _current(b)
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
            t = _current(b)
            self._stuck(b, f"'{t.type}' " + "; ".join(r for r, _ in waiting[b.index]) + " forever")
        if len(others) > _MAX_STUCK_REPORTED:
            self.findings.append(finding("deadlock", f"{len(others) - _MAX_STUCK_REPORTED} "
                                         "more thread blocks are stuck"))

    def _stuck(self, b: _Block, message: str) -> None:
        t = _current(b)
        self.findings.append(finding("deadlock", message, gpu=b.gpu,
                                     tb=b.tb.id, step=t.first.position, line=t.first.line))



class _Data:
    """The chunks' values and the race check, along the order in which the scheduler
    (:class:`_Machine`) fires the transmissions: a step's data moves as one message, the
    k-th receive on a connection taking the k-th send's."""

    def __init__(self, machine: _Machine, layout: Layout) -> None:
        blocks = machine.blocks
        # the programs, unless the scheduler has planned them already (a child that
        # left no result: this is computed again where the scheduler ran)
        programs = [b.program if len(b.program) == b.size else transmissions(b.tb)
                    for b in blocks]
        self.findings: list[Finding] = []
        self.memories: dict[int, Memory] = {}
        flags, first, waits = self._publications(programs)
        self.hb = HappensBefore(machine.local, machine.width, waits)
        tb_ids = [b.tb.id for b in blocks]
        report = _reporter([b.gpu for b in blocks], tb_ids, self.findings)
        self.mems: list[Memory] = []    # each block's GPU's
        for gpu, mine in machine.gpus:
            check(_VERIFYING)
            mem = Memory(gpu, layout, [programs[b.index] for b in mine], self.hb, tb_ids,
                         report)
            self.memories.setdefault(gpu.id, mem)
            self.mems += [mem] * len(mine)
        queues: dict[int, deque[_Message]] = {}
        # each block's planned transmissions, taken one by one as it fires them
        self.next_op = [iter(self._plan(b, programs[b.index], self.mems[b.index], queues,
                                        (flags, first, waits))).__next__ for b in blocks]

    @staticmethod
    def _publications(programs: list[list[Transmission]]
                      ) -> tuple[list[list[int]], list[int], array]:
        """The publications (:class:`~.hb.HappensBefore`), one per transmission that
        publishes a flag, numbered block by block: per block the flags its publications
        publish (ascending) and the number of its first, and each one's waits (none yet:
        :meth:`_plan` counts them)."""
        flags: list[list[int]] = []
        first: list[int] = []
        total = 0
        for program in programs:
            mine = [flag for _, _, hasdep, flag, _ in program if hasdep]
            flags.append(mine)
            first.append(total)
            total += len(mine)
        return flags, first, array("i", [0]) * total

    @staticmethod
    def _plan(b: _Block, program: list[Transmission], mem: Memory,
              queues: dict[int, deque[_Message]],
              publications: tuple[list[list[int]], list[int], array]) -> list[_DataOp]:
        """The data of each transmission that can fire, looked up once, with the
        publications (:meth:`_publications`) it joins, counted as their waits, and the
        one it makes. A wait for ``value`` on a block takes the first of its
        publications of a flag ``>= value`` (its flags only grow); a wait that no flag
        of its block meets joins none (it never fires)."""
        flags, first, waits = publications
        offsets, ops, tbs = mem.offsets, [], b.tbs
        recv = None if b.recv is None else queues.setdefault(id(b.recv), deque())
        send = None if b.send is None else queues.setdefault(id(b.send), deque())
        pub = first[b.index]   # the number of its next publication
        for steps, deps, hasdep, _, _ in program:  # unpacked: faster than by name
            _, step_type, srcbuf, srcoff, dstbuf, dstoff, _, _, _, _, position, _ = steps[0]
            receives, sends, kind = _KINDS[step_type]
            fires = not ((receives and recv is None) or (sends and send is None))
            joins: tuple[int, ...] = ()
            for depid, value in deps:
                target = tbs.get(depid)
                if target is None:  # it waits on a thread block the GPU lacks
                    fires = False
                    break
                mine = flags[target]
                k = bisect_left(mine, value)
                if k < len(mine):
                    joins += (first[target] + k,)
            if not fires:
                break  # it never fires, nor does anything after it in its block
            for p in joins:   # counted once it is known to fire
                waits[p] += 1
            src: int | tuple[tuple[int, int], ...] = \
                offsets[srcbuf] + srcoff if kind[0] else -1
            dst = offsets[dstbuf] + dstoff if kind[3] else -1
            if kind[4] is None:  # a fused reduction: (position, src) of each step
                src = tuple([(sub.position, offsets[srcbuf] + sub.srcoff) for sub in steps])
            ops.append((joins, pub if hasdep else -1, position, kind, src, dst,
                        steps[-1].cnt, recv if receives else None, send if sends else None))
            pub += hasdep
        return ops

    def feed(self, order: array) -> None:
        """Fire the transmissions of the blocks in ``order``, each its block's next."""
        check(_VERIFYING)
        next_op, fire, compute = self.next_op, self.hb.fire, self._compute
        for at in order:
            joins, pub, pos, kind, src, dst, cnt, recv, send = next_op[at]()
            if recv is not None:
                received, msg_node = recv.popleft()
            else:
                received, msg_node = None, -1
            node = fire(at, joins, msg_node, pub)
            out = compute(at, pos, kind, src, dst, cnt, received)
            if send is not None:
                send.append((out, node))

    def finish(self, completed: bool, findings: list[Finding]) -> Execution:
        """The execution, with the scheduler's ``findings`` after the data's."""
        return Execution(self.memories, self.findings + findings, completed)

    def _compute(self, blk: int, pos: int, kind: tuple, src: int | tuple, dst: int, cnt: int,
                 received: list[Packed] | None) -> list[Packed]:
        """Apply the data effect of block ``blk``'s transmission at step ``pos``; the
        values it sends. ``kind`` holds the flags of :data:`_KINDS`, ``src`` and ``dst``
        are chunk indices; a fused reduction has ``src`` ``(position, src)`` per fused
        step."""
        mem = self.mems[blk]
        if kind[4] is None:  # a fused reduction
            for i in range(cnt):
                acc = mem.read(blk, pos, dst + i)
                for sub, first in src:
                    acc = add(acc, mem.read(blk, sub, first + i))
                mem.write(blk, src[-1][0], dst + i, acc)
            return _NO_DATA
        _, receives, reduces, writes, sends = kind
        if cnt == 1:  # most steps at scale: the loop below for one chunk, written out
            if receives:
                value = received[0] if received else GARBAGE
                if reduces:
                    value = add(value, mem.read(blk, pos, src))
            else:
                value = mem.read(blk, pos, src)
            if writes:
                mem.write(blk, pos, dst, value)
            return [value] if sends else _NO_DATA
        reads = reduces or not receives
        if cnt >= RUN_FROM and (not reads or not writes or src == dst or src + cnt <= dst
                            or dst + cnt <= src) and (not reads or mem.readable(blk, src, cnt)):
            # no read can report anything, and each chunk is read (if at all) before it
            # is written: the same as chunk by chunk, in a few slices
            if receives:
                values = received[:cnt]
                if len(values) < cnt:
                    values += [GARBAGE] * (cnt - len(values))
                if reduces:
                    values = list(map(add, values, mem.read_run(blk, pos, src, cnt)))
            else:
                values = mem.read_run(blk, pos, src, cnt)
            if writes:
                if mem.writable(blk, dst, cnt):
                    mem.write_run(blk, pos, dst, values)
                else:
                    for i, value in enumerate(values):
                        mem.write(blk, pos, dst + i, value)
            return values if sends else _NO_DATA
        out = []
        for i in range(cnt):
            if receives:
                value = received[i] if i < len(received) else GARBAGE
                if reduces:
                    value = add(value, mem.read(blk, pos, src + i))
            else:
                value = mem.read(blk, pos, src + i)
            if writes:
                mem.write(blk, pos, dst + i, value)
            if sends:
                out.append(value)
        return out if sends else _NO_DATA
