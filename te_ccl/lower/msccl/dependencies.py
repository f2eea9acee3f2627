"""Pass 5: cross-thread-block dependencies, ``nop`` steps and step numbering.

Steps of one thread block run in order; steps of different thread blocks on one GPU
synchronise only through ``depid``/``deps``. Walking a GPU's instructions in time order,
a step that reads a slot waits for the last step writing it (read after write), and a
step that writes a slot waits for the last write and for every read since (write after
read). With ``link_order``, a send also waits for the previous send to the same peer
(on another channel, so in another thread block): the link then carries the sends in
the schedule's order, which thread blocks running freely would not keep (a chunk ready
early would overtake one the schedule sends first). Only the latest step per other
thread block is kept (a flag set by step ``k`` means steps ``0..k`` are done). The first extra dependencies become ``nop`` steps right
before the step, the last one stays on the step; targets get ``hasdep="1"``.
"""

from __future__ import annotations

from collections import defaultdict

from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl.buffers import ResolvedSlots
from te_ccl.lower.msccl.ir import Op, Slot, Step, Threadblock
from te_ccl.lower.msccl.threadblocks import TbPlan
from te_ccl.runtime_limits import MSCCL

__all__ = ["add_dependencies"]

Ref = tuple[int, int]  # (thread block id, instruction index in it)


def _dependencies(plans: list[TbPlan], link_order: bool) -> dict[Ref, list[Ref]]:
    """For every instruction, the instructions of other thread blocks it must wait for."""
    where = {ins.order: (tb, k) for tb, p in enumerate(plans) for k, ins in enumerate(p.instrs)}
    ordered = sorted((ins for p in plans for ins in p.instrs), key=lambda i: i.order)
    last_write: dict[Slot, Ref] = {}
    reads: dict[Slot, list[Ref]] = defaultdict(list)
    deps: dict[Ref, list[Ref]] = {}
    known: dict[Ref, dict[int, int]] = {}
    last_send: dict[int, Ref] = {}
    for ins in ordered:
        me = where[ins.order]
        wait = [last_write[s] for s in ins.reads + ins.writes if s in last_write]
        wait += [r for s in ins.writes for r in reads[s]]
        if link_order and ins.send is not None:
            peer = ins.send.dst
            if peer in last_send:
                wait.append(last_send[peer])
            last_send[peer] = me
        deps[me] = _prune(me, wait, known)
        for s in ins.reads:
            reads[s].append(me)
        for s in ins.writes:
            last_write[s] = me
            reads[s] = []
    return deps


def _prune(me: Ref, wait: list[Ref], known: dict[Ref, dict[int, int]]) -> list[Ref]:
    """Drop waits already implied on this GPU, and record what ``me`` implies (vector clock).

    ``known[ref][tb] = k``: when ``ref`` runs, steps ``0..k`` of thread block ``tb`` (other
    than ``ref``'s own, which is implicit) are done, through its own thread block's earlier
    steps and their dependencies. A step that adds nothing shares its predecessor's clock
    (copying a clock of ~100 thread blocks per step made this pass O(steps × tbs)).
    """
    tb_me, k_me = me
    clock = known.get((tb_me, k_me - 1), _NOTHING)
    kept: list[Ref] = []
    for tb, k in sorted(set(wait), key=lambda r: (-r[1], r[0])):
        if tb == tb_me or clock.get(tb, -1) >= k:
            continue
        if not kept:
            clock = dict(clock)
        kept.append((tb, k))
        for other, done in known[(tb, k)].items():
            if clock.get(other, -1) < done:
                clock[other] = done
        clock[tb] = k
    known[me] = clock
    return sorted(kept)


_NOTHING: dict[int, int] = {}  # shared, never written: copied before the first change


def add_dependencies(gpu: int, plans: list[TbPlan], slots: ResolvedSlots,
                     link_order: bool) -> list[Threadblock]:
    """The final thread blocks of one GPU (ids = positions in ``plans``, but thread blocks
    that others wait for come first when there are more than ``MSCCL.max_depid + 1``)."""
    deps = _dependencies(plans, link_order)
    if len(plans) > MSCCL.max_depid + 1:  # renumber: waited-for thread blocks first
        waited = {tb for waits in deps.values() for tb, _ in waits}
        perm = sorted(range(len(plans)), key=lambda i: (i not in waited, i))
        new = {old: i for i, old in enumerate(perm)}
        plans = [plans[i] for i in perm]
        deps = {(new[tb], k): sorted((new[t], j) for t, j in waits)
                for (tb, k), waits in deps.items()}
    position: dict[Ref, int] = {}
    for tb, p in enumerate(plans):
        at = 0
        for k in range(len(p.instrs)):
            at += max(0, len(deps[(tb, k)]) - 1)
            position[(tb, k)] = at
            at += 1
    targets = {(tb, position[(tb, k)]) for waits in deps.values() for tb, k in waits}
    if any(tb > MSCCL.max_depid for tb, _ in targets):
        raise RuntimeLimitError(f"rank position {gpu} needs a dependency on thread block "
                                f"> {MSCCL.max_depid} (depid has 8 bits): too many thread blocks "
                                "on one GPU")
    out = []
    for tb, p in enumerate(plans):
        steps: list[Step] = []
        for k, ins in enumerate(p.instrs):
            waits = [(t, position[(t, j)]) for t, j in deps[(tb, k)]]
            for t, s in waits[:-1]:
                steps.append(Step(len(steps), Op.NOP, None, None, 0, t, s))
            src, dst = slots.printed(gpu, ins)
            depid, dep_s = waits[-1] if waits else (-1, -1)
            steps.append(Step(len(steps), ins.op, src, dst, 1, depid, dep_s,
                              (tb, len(steps)) in targets))
        out.append(Threadblock(tb, p.send, p.recv, p.chan, tuple(steps)))
    return out

