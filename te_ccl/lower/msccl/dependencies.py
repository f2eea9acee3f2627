"""Pass 5: cross-thread-block dependencies, ``nop`` steps and step numbering.

Steps of one thread block run in order; steps of different thread blocks on one GPU
synchronise only through ``depid``/``deps``. Walking a GPU's instructions in time order,
a step that reads a slot waits for the last step writing it (read after write), and a
step that writes a slot waits for the last write and for every read since (write after
read). With ``link_order``, a send also waits for the previous send on the same out-link
of its GPU (``Edge.link``: to the same peer on another channel, or through the same
switch to any peer, so in another thread block): the link then carries the sends in
the schedule's order, which thread blocks running freely would not keep (a chunk ready
early would overtake one the schedule sends first). Only the latest step per other
thread block is kept (a flag set by step ``k`` means steps ``0..k`` are done). Of several
waits, the one done last in the schedule stays on the step; the others move onto steps
that wait for nothing and start after the waited step is done anyway (:func:`_hoist`):
an earlier step of its own thread block, or one of the thread block it keeps waiting
for, up to the step it waits for (or further down that step's own waits). A send that
waits for the receive of its value and for the link's previous send thus makes the
receive wait for that send. The rest become ``nop`` steps right before the step (each
an element of the runtime reader's limit). Targets get ``hasdep="1"``.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import itemgetter

import numpy as np

from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl.buffers import ResolvedSlots
from te_ccl.lower.msccl.instructions import Instr
from te_ccl.lower.msccl.ir import Op, Slot, Step, Threadblock
from te_ccl.lower.msccl.threadblocks import TbPlan
from te_ccl.runtime_limits import MSCCL

__all__ = ["add_dependencies"]

Ref = tuple[int, int]  # (thread block id, instruction index in it)
# per thread block, per instruction: the waits kept, as (thread block, step number)
Deps = list[list[list[Ref]]]
_index = itemgetter(1)
# how far down the waits a moved wait may go: fewer nops, against a longer search
MOVED_WAIT_DEPTH = 8


def _dependencies(plans: list[TbPlan], link_order: bool) -> tuple[Deps, list[set[int]]]:
    """For every instruction, the steps of other thread blocks it must wait for, and per
    thread block, its steps that others wait for.

    Vector clocks: ``clocks[tb][k][t] = j`` when instruction ``k`` of thread block ``tb``
    runs, instructions ``0..j`` of thread block ``t`` are done (other than ``tb``'s own,
    which is implicit), through its own thread block's earlier steps and their
    dependencies. A step that keeps no wait shares its predecessor's clock; a kept wait
    merges the waited step's clock with one ``numpy.maximum`` (O(thread blocks) per kept
    wait, in C). Step numbers are known on the way: an instruction with ``n`` waits
    follows its ``n - 1`` nops.
    """
    walk: list[tuple[int, int, Instr]] = [None] * sum(len(p.at) for p in plans)  # type: ignore
    for tb, p in enumerate(plans):  # the GPU's time order, without sorting
        for k, (i, ins) in enumerate(zip(p.at, p.instrs, strict=True)):
            walk[i] = (tb, k, ins)
    last_write: dict[Slot, Ref] = {}
    reads: dict[Slot, list[Ref]] = {}  # since the slot's last write
    deps: Deps = [[] for _ in plans]
    step: list[list[int]] = [[] for _ in plans]  # per instruction: its step number
    targets: list[set[int]] = [set() for _ in plans]
    clocks: list[list[np.ndarray]] = [[] for _ in plans]
    start = np.full(len(plans), -1, dtype=np.int32)  # nothing done
    last_send: dict[int, Ref] = {}
    free: list[list[int]] = [[] for _ in plans]  # per thread block: instructions without a wait
    maximum = np.maximum
    for tb, k, ins in walk:
        me = (tb, k)
        wait = []
        for s in ins.reads:
            if s in last_write:
                wait.append(last_write[s])
        for s in ins.writes:
            if s in last_write:
                wait.append(last_write[s])
            if s in reads:
                wait += reads[s]
        if link_order and ins.send is not None:
            link = ins.send.link
            if link in last_send:
                wait.append(last_send[link])
            last_send[link] = me
        mine = clocks[tb]
        clock = mine[-1] if k else start  # steps of a thread block come in order
        kept: list[Ref] = []
        waited: list[Ref] = []  # the kept waits as (thread block, instruction)
        if len(wait) > 1:  # the latest first (it implies most of the others), ties by
            wait = sorted(set(wait))  # thread block: a stable sort by step, reversed
            wait.sort(key=_index, reverse=True)
        for t, j in wait:  # drop waits already implied on this GPU
            if t == tb or clock.item(t) >= j:
                continue
            at = step[t][j]
            kept.append((t, at))
            waited.append((t, j))
            targets[t].add(at)
            clock = maximum(clock, clocks[t][j])
            clock[t] = j
        mine.append(clock)
        number = step[tb][-1] + 1 if k else 0
        if len(kept) > 1:
            kept = _hoist(plans, tb, kept, waited, free, deps, clocks, step)
            number += len(kept) - 1
            kept.sort()
        elif not kept:
            free[tb].append(k)
        step[tb].append(number)
        deps[tb].append(kept)
        for s in ins.reads:
            if s in reads:
                reads[s].append(me)
            else:
                reads[s] = [me]
        for s in ins.writes:
            last_write[s] = me
            reads.pop(s, None)
    return deps, targets


def _hoist(plans: list[TbPlan], tb: int, kept: list[Ref], waited: list[Ref],
           free: list[list[int]], deps: Deps, clocks: list[list[np.ndarray]],
           step: list[list[int]]) -> list[Ref]:
    """The waits of one instruction that stay on it: the one done last in the schedule,
    and those :func:`_move` cannot move elsewhere. Each wait moved is a ``nop`` step
    fewer: an element of the runtime's reader limit."""
    by_done = sorted(zip(kept, waited, strict=True), key=lambda x: _rank(plans, x[1]),
                     reverse=True)
    host = by_done[0][1]
    stay = [by_done[0][0]]
    for ref, w in by_done[1:]:  # the latest done first: it needs the latest free step
        if not _move(plans, tb, host, ref, w, free, deps, clocks, step):
            stay.append(ref)
    return stay


def _rank(plans: list[TbPlan], w: Ref) -> tuple[int, bool]:
    """When instruction ``w`` is done in the schedule; of a receive and a send done at
    once, the receive counts as later (a send's thread block cannot take the receive's
    wait: it starts before the receive is done)."""
    ins = plans[w[0]].instrs[w[1]]
    return _done(ins), ins.send is None


def _move(plans: list[TbPlan], tb: int, host: Ref, ref: Ref, w: Ref, free: list[list[int]],
          deps: Deps, clocks: list[list[np.ndarray]], step: list[list[int]]) -> bool:
    """Move the wait ``ref`` (on instruction ``w``) of the next instruction of ``tb`` onto
    one that waits for nothing (``free``), where that costs no time: the latest such
    instruction of ``tb`` itself, or else of the thread block of ``host`` up to ``host``
    (the instruction that the waiting one keeps waiting for: a send waiting for the
    receive of its value and for the link's previous send makes the receive wait for
    that send instead), or else, where ``host`` has one wait, the same down that wait,
    :data:`MOVED_WAIT_DEPTH` times at most. The instruction must start after ``w`` is done in the
    schedule, and come after it in the GPU's time order, so no cycle can form."""
    if _take(plans, tb, len(deps[tb]), ref, w, free, deps, clocks):
        return True
    for _ in range(MOVED_WAIT_DEPTH):
        h_tb, h = host
        if h_tb == w[0]:
            return False
        if _take(plans, h_tb, h + 1, ref, w, free, deps, clocks):
            return True
        if len(deps[h_tb][h]) != 1:
            return False
        y_tb, y_step = deps[h_tb][h][0]
        host = (y_tb, bisect_left(step[y_tb], y_step))
    return False


def _take(plans: list[TbPlan], owner: int, before: int, ref: Ref, w: Ref,
          free: list[list[int]], deps: Deps, clocks: list[list[np.ndarray]]) -> bool:
    """Give the wait ``ref`` to the latest instruction of thread block ``owner`` before
    index ``before`` that waits for nothing, if it starts after ``w``."""
    mine = free[owner]
    i = bisect_left(mine, before) - 1
    if i < 0 or not _starts_after(plans, owner, mine[i], w):
        return False
    k = mine[i]
    deps[owner][k] = [ref]
    del mine[i]
    _learn(clocks, owner, k, w)
    return True


def _starts_after(plans: list[TbPlan], tb: int, k: int, w: Ref) -> bool:
    """Does instruction ``k`` of ``tb`` start once ``w`` is done in the schedule, and come
    after it in the GPU's time order?"""
    t, j = w
    plan = plans[tb]
    return plan.instrs[k].order[0] >= _done(plans[t].instrs[j]) and plan.at[k] > plans[t].at[j]


def _learn(clocks: list[list[np.ndarray]], tb: int, k: int, w: Ref) -> None:
    """Instruction ``k`` of ``tb`` now waits for ``w``: its clock knows (the later steps
    of ``tb`` keep theirs, they only know less)."""
    t, j = w
    clock = np.maximum(clocks[tb][k], clocks[t][j])
    clock[t] = max(clock.item(t), j)
    clocks[tb][k] = clock


def _done(ins: Instr) -> int:
    """When a step is done in the schedule: a send once it has left its first link, a
    receive on arrival, a local copy at its place in the order."""
    if ins.send is not None:
        return ins.send.start + ins.send.busy
    return ins.recv.arrive if ins.recv is not None else ins.order[0]


def add_dependencies(gpu: int, plans: list[TbPlan], slots: ResolvedSlots,
                     link_order: bool, waitable: int = MSCCL.waitable) -> list[Threadblock]:
    """The final thread blocks of one GPU (ids = positions in ``plans``, but thread blocks
    that others wait for come first when there are more than the ``waitable`` ones a
    ``depid`` can name)."""
    deps, targets = _dependencies(plans, link_order)
    if len(plans) > waitable:  # renumber: waited-for thread blocks first
        perm = sorted(range(len(plans)), key=lambda i: (not targets[i], i))
        new = {old: i for i, old in enumerate(perm)}
        plans = [plans[i] for i in perm]
        targets = [targets[i] for i in perm]
        deps = [[sorted((new[t], s) for t, s in waits) for waits in deps[old]]
                for old in perm]
    if any(targets[waitable:]):
        raise RuntimeLimitError(f"rank position {gpu} needs a dependency on thread block "
                                f"> {waitable - 1} (depid has 8 bits): too many thread blocks "
                                "on one GPU")
    out = []
    nop, printed = Op.NOP, slots.printed
    for tb, p in enumerate(plans):
        steps: list[Step] = []
        hit = targets[tb]
        for ins, waits in zip(p.instrs, deps[tb], strict=True):
            depid = dep_s = -1
            if waits:
                for t, s in waits[:-1]:
                    steps.append(Step(len(steps), nop, None, None, 0, t, s))
                depid, dep_s = waits[-1]
            src, dst = printed(gpu, ins)
            n = len(steps)
            steps.append(Step(n, ins.op, src, dst, ins.cnt, depid, dep_s, n in hit))
        out.append(Threadblock(tb, p.send, p.recv, p.chan, tuple(steps)))
    return out
