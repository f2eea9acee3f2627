"""Pass 4: thread blocks — one per (channel, send peer) / (channel, recv peer) on each GPU.

A fused step joins the thread block that sends to its send peer with the one that
receives from its recv peer (the channel pass keeps that pairing unique). Local steps
(``cpy``) get thread blocks without peers. Steps run in time ``order``, and thread
block ids follow msccl-tools' deterministic sort by (send, recv, chan).
"""

from __future__ import annotations

from dataclasses import dataclass

from te_ccl.errors import TecclError
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import Instr
from te_ccl.lower.msccl.ir import NO_PEER

__all__ = ["TbPlan", "build_threadblocks"]


@dataclass(frozen=True)
class TbPlan:
    """A thread block before dependencies: its peers, channel and ordered instructions."""

    send: int
    recv: int
    chan: int
    instrs: tuple[Instr, ...]


def _keys(ins: Instr, chan: dict[Edge, int]) -> list[tuple]:
    keys = []
    if ins.send is not None:
        keys.append(("s", chan[ins.send], ins.send.dst))
    if ins.recv is not None:
        keys.append(("r", chan[ins.recv], ins.recv.src))
    return keys


def build_threadblocks(instrs: list[Instr], chan: dict[Edge, int], local_cap: int
                       ) -> list[TbPlan]:
    """Group one GPU's instructions into thread blocks, numbered by position in the list."""
    parent: dict[tuple, tuple] = {}

    def find(k: tuple) -> tuple:
        while parent.setdefault(k, k) != k:
            k = parent[k]
        return k

    keyed = [(ins, _keys(ins, chan)) for ins in instrs]
    for _, keys in keyed:
        for k in keys[1:]:
            parent[find(k)] = find(keys[0])
    groups: dict[tuple, list[Instr]] = {}
    local = [ins for ins, keys in keyed if not keys]
    for ins, keys in keyed:
        if keys:
            groups.setdefault(find(keys[0]), []).append(ins)
    plans = [_plan(members, chan) for members in groups.values()]
    for i in range(0, len(local), local_cap):
        plans.append(TbPlan(NO_PEER, NO_PEER, 0, tuple(local[i:i + local_cap])))
    return sorted(plans, key=lambda p: (p.send, p.recv, p.chan, p.instrs[0].order))


def _plan(members: list[Instr], chan: dict[Edge, int]) -> TbPlan:
    sends = {i.send.dst for i in members if i.send is not None}
    recvs = {i.recv.src for i in members if i.recv is not None}
    chans = {k[1] for i in members for k in _keys(i, chan)}
    if len(sends) > 1 or len(recvs) > 1 or len(chans) != 1:
        raise TecclError(f"internal: thread block with send peers {sorted(sends)}, recv peers "
                         f"{sorted(recvs)}, channels {sorted(chans)}")
    return TbPlan(next(iter(sends), NO_PEER), next(iter(recvs), NO_PEER), chans.pop(),
                  tuple(sorted(members, key=lambda i: i.order)))
