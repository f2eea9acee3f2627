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
thread block is kept (a flag set by step ``k`` means steps ``0..k`` are done). The first extra dependencies become ``nop`` steps right
before the step, the last one stays on the step; targets get ``hasdep="1"``.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl.buffers import ResolvedSlots
from te_ccl.lower.msccl.ir import Op, Slot, Step, Threadblock
from te_ccl.lower.msccl.threadblocks import TbPlan
from te_ccl.runtime_limits import MSCCL

__all__ = ["add_dependencies"]

Ref = tuple[int, int]  # (thread block id, instruction index in it)
Deps = list[list[list[Ref]]]  # per thread block, per instruction: the waits kept


def _dependencies(plans: list[TbPlan], link_order: bool) -> Deps:
    """For every instruction, the instructions of other thread blocks it must wait for.

    Vector clocks: ``clocks[tb][k][t] = j`` when step ``k`` of thread block ``tb`` runs,
    steps ``0..j`` of thread block ``t`` are done (other than ``tb``'s own, which is
    implicit), through its own thread block's earlier steps and their dependencies. A
    step that keeps no wait shares its predecessor's clock; a kept wait merges the
    waited step's clock with one ``numpy.maximum`` (O(thread blocks) per kept wait, in C).
    """
    ordered = sorted((ins.order, tb, k) for tb, p in enumerate(plans)
                     for k, ins in enumerate(p.instrs))
    last_write: dict[Slot, Ref] = {}
    reads: dict[Slot, list[Ref]] = defaultdict(list)
    deps: Deps = [[] for _ in plans]
    clocks: list[list[np.ndarray]] = [[] for _ in plans]
    start = np.full(len(plans), -1, dtype=np.int32)  # nothing done
    last_send: dict[int, Ref] = {}
    maximum = np.maximum
    for _, tb, k in ordered:
        ins = plans[tb].instrs[k]
        me = (tb, k)
        wait = [last_write[s] for s in ins.reads + ins.writes if s in last_write]
        for s in ins.writes:
            wait += reads[s]
        if link_order and ins.send is not None:
            link = ins.send.link
            if link in last_send:
                wait.append(last_send[link])
            last_send[link] = me
        mine = clocks[tb]
        clock = mine[-1] if k else start  # steps of a thread block come in order
        kept: list[Ref] = []
        if len(wait) > 1:  # the latest first: it implies most of the others
            wait = sorted(set(wait), key=_latest_first)
        for t, j in wait:  # drop waits already implied on this GPU
            if t == tb or clock.item(t) >= j:
                continue
            kept.append((t, j))
            clock = maximum(clock, clocks[t][j])
            clock[t] = j
        mine.append(clock)
        if len(kept) > 1:
            kept.sort()
        deps[tb].append(kept)
        for s in ins.reads:
            reads[s].append(me)
        for s in ins.writes:
            last_write[s] = me
            reads[s] = []
    return deps


def _latest_first(r: Ref) -> tuple[int, int]:
    return -r[1], r[0]


def add_dependencies(gpu: int, plans: list[TbPlan], slots: ResolvedSlots,
                     link_order: bool) -> list[Threadblock]:
    """The final thread blocks of one GPU (ids = positions in ``plans``, but thread blocks
    that others wait for come first when there are more than ``MSCCL.max_depid + 1``)."""
    deps = _dependencies(plans, link_order)
    if len(plans) > MSCCL.max_depid + 1:  # renumber: waited-for thread blocks first
        waited = {tb for per_tb in deps for waits in per_tb for tb, _ in waits}
        perm = sorted(range(len(plans)), key=lambda i: (i not in waited, i))
        new = {old: i for i, old in enumerate(perm)}
        plans = [plans[i] for i in perm]
        deps = [[sorted((new[t], j) for t, j in waits) for waits in deps[old]]
                for old in perm]
    position: list[list[int]] = []
    for per_tb in deps:
        at, mine = 0, []
        for waits in per_tb:
            if len(waits) > 1:
                at += len(waits) - 1
            mine.append(at)
            at += 1
        position.append(mine)
    targets: list[set[int]] = [set() for _ in plans]  # per thread block: steps waited for
    for per_tb in deps:
        for waits in per_tb:
            for tb, k in waits:
                targets[tb].add(position[tb][k])
    if any(targets[MSCCL.max_depid + 1:]):
        raise RuntimeLimitError(f"rank position {gpu} needs a dependency on thread block "
                                f"> {MSCCL.max_depid} (depid has 8 bits): too many thread blocks "
                                "on one GPU")
    out = []
    nop, printed = Op.NOP, slots.printed
    for tb, p in enumerate(plans):
        steps: list[Step] = []
        hit = targets[tb]
        for ins, mine in zip(p.instrs, deps[tb], strict=True):
            depid = dep_s = -1
            if mine:
                for t, j in mine[:-1]:
                    steps.append(Step(len(steps), nop, None, None, 0, t, position[t][j]))
                depid, j = mine[-1]
                dep_s = position[depid][j]
            src, dst = printed(gpu, ins)
            n = len(steps)
            steps.append(Step(n, ins.op, src, dst, ins.cnt, depid, dep_s, n in hit))
        out.append(Threadblock(tb, p.send, p.recv, p.chan, tuple(steps)))
    return out
