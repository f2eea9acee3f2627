"""Pass 4: thread blocks — one per (channel, send peer) / (channel, recv peer) on each GPU.

A fused step joins the thread block that sends to its send peer with the one that
receives from its recv peer (the channel pass keeps that pairing unique). Local steps
(``cpy``) get thread blocks without peers. Steps run in time ``order``, and thread
block ids follow msccl-tools' deterministic sort by (send, recv, chan).

A joined thread block runs its sends and its plain receives in one sequence, and a
send step is done only once its message has left the link: a receive arriving while an
earlier send of the thread block is still on the link is taken late, and so is every
step waiting for its value or for its connection's slot. :func:`holding_pairings` finds
the pairings that do this, so that their fusions are given up (the two thread blocks
then run apart).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass

from te_ccl.deadline import checked
from te_ccl.errors import TecclError
from te_ccl.lower.msccl.channels import EdgeChannels
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import (
    Fusion,
    Instr,
    first_receipts,
    forwards,
    recv_order,
    send_order,
)
from te_ccl.lower.msccl.ir import LOWERING, NO_PEER

__all__ = ["TbPlan", "build_threadblocks", "holding_pairings"]

Pairing = tuple[int, int, int, int]  # (GPU, channel, recv peer, send peer)


@dataclass(frozen=True)
class TbPlan:
    """A thread block before dependencies: its peers, channel and instructions in time
    order, with their positions ``at`` in the GPU's time-ordered list."""

    send: int
    recv: int
    chan: int
    instrs: tuple[Instr, ...]
    at: tuple[int, ...]


def build_threadblocks(instrs: list[Instr], chan: EdgeChannels, local_cap: int
                       ) -> list[TbPlan]:
    """Group one GPU's instructions, in time order (as :mod:`instructions` lists them),
    into thread blocks, numbered by position in the list.

    A thread block is keyed by its send connection ``("s", channel, peer)`` or its
    receive connection ``("r", channel, peer)``; a fused step joins its two keys
    (union-find over the keys, not the instructions). An instruction's channels are
    looked up once: hashing an edge hashes all its fields.
    """
    by_key: dict[tuple, list[int]] = defaultdict(list)  # positions of the instructions
    joins: dict[tuple[tuple, tuple], None] = {}  # (recv key, send key) of fused steps
    local: list[int] = []
    for i, ins in enumerate(instrs):
        send, recv = ins.send, ins.recv
        if send is not None:
            key = ("s", chan[id(send)], send.dst)
            if recv is not None:
                joins[(("r", chan[id(recv)], recv.src), key)] = None
        elif recv is not None:
            key = ("r", chan[id(recv)], recv.src)
        else:
            local.append(i)
            continue
        by_key[key].append(i)
    parent = {k: k for k in by_key}

    def find(k: tuple) -> tuple:
        while (up := parent[k]) != k:
            k = up
        return k

    for rkey, skey in joins:
        parent.setdefault(rkey, rkey)
        parent[find(rkey)] = find(skey)
    keys: dict[tuple, list[tuple]] = {}  # the connection keys of each thread block
    for k in parent:
        keys.setdefault(find(k), []).append(k)
    plans = [_plan(ks, [by_key[k] for k in ks if k in by_key], instrs)
             for ks in keys.values()]
    for j in range(0, len(local), local_cap):
        at = local[j:j + local_cap]
        plans.append(TbPlan(NO_PEER, NO_PEER, 0, tuple(map(instrs.__getitem__, at)),
                            tuple(at)))
    return sorted(plans, key=lambda p: (p.send, p.recv, p.chan, p.instrs[0].order))


def _plan(keys: list[tuple], runs: list[list[int]], instrs: list[Instr]) -> TbPlan:
    """The thread block with connection ``keys`` and the instructions at ``runs``
    (positions, each run ascending): at most one send peer, at most one recv peer, one
    channel."""
    sends = {peer for kind, _, peer in keys if kind == "s"}
    recvs = {peer for kind, _, peer in keys if kind == "r"}
    chans = {c for _, c, _ in keys}
    if len(sends) > 1 or len(recvs) > 1 or len(chans) != 1:
        raise TecclError(f"internal: thread block with send peers {sorted(sends)}, recv peers "
                         f"{sorted(recvs)}, channels {sorted(chans)}")
    at = runs[0] if len(runs) == 1 else sorted(i for run in runs for i in run)
    return TbPlan(next(iter(sends), NO_PEER), next(iter(recvs), NO_PEER), chans.pop(),
                  tuple(map(instrs.__getitem__, at)), tuple(at))


def holding_pairings(edges: tuple[Edge, ...], chan: EdgeChannels, fusions: list[Fusion],
                     max_tbs: int, budget: int,
                     first: dict[tuple[int, int], Edge] | None = None) -> set[Pairing]:
    """The pairings made by ``fusions`` whose joined thread block would take a plain
    receive late: it arrives while an earlier send of the thread block is on the link.
    A pairing is kept anyway where splitting it would give its GPU more than
    ``max_tbs`` thread blocks (ones other thread blocks can wait for), or its sending
    thread block more than ``budget`` steps counting a ``nop`` for each send that passes
    a received value on (it waits for its value and for the link's previous send), or
    where its receives, no longer fused, would leave their connection's send order.
    ``first``: :func:`~te_ccl.lower.msccl.instructions.first_receipts` of the edges, if
    the caller has it."""
    pairs: dict[Pairing, None] = {}  # in the fusions' order
    fused_in = set()  # by identity: hashing an edge reads all its fields
    for f in fusions:
        e = f.recv.recv
        pairs[(f.recv.gpu, chan[id(e)], e.src, f.send.send.dst)] = None
        fused_in.add(id(e))
    if not pairs:
        return set()
    first = first_receipts(edges) if first is None else first
    # each connection's edges, by (sender, channel, receiver) and (receiver, channel, sender)
    sends: dict[tuple[int, int, int], list[Edge]] = defaultdict(list)
    into: dict[tuple[int, int, int], list[Edge]] = defaultdict(list)
    for e in checked(edges, LOWERING):
        c = chan[id(e)]
        sends[(e.src, c, e.dst)].append(e)
        into[(e.dst, c, e.src)].append(e)
    tbs: dict[int, int] = defaultdict(int)  # per GPU: its thread blocks, none joined
    for g, _, _ in sends:
        tbs[g] += 1
    for g, _, _ in into:
        tbs[g] += 1
    joined: dict[int, int] = defaultdict(int)
    for g, _, _, _ in pairs:
        joined[g] += 1
    held = set()
    for (g, c, a, b) in pairs:
        out = sends[(g, c, b)]
        steps = len(out) + sum(forwards(e, first) for e in out)
        if tbs[g] - joined[g] + 1 > max_tbs or steps > budget \
                or not _in_order(into[(g, c, a)]):
            continue
        if _holds(sorted(out, key=send_order),
                  [e for e in into[(g, c, a)] if id(e) not in fused_in]):
            held.add((g, c, a, b))
            joined[g] -= 1
    return held


def _in_order(recvs: list[Edge]) -> bool:
    """Would a connection's receives, none fused, be taken in its send order (the k-th
    receive takes the k-th send)? Unfused, a receive sits at its arrival."""
    orders = [recv_order(e) for e in sorted(recvs, key=send_order)]
    return all(a < b for a, b in zip(orders, orders[1:], strict=False))


def _holds(sends: list[Edge], recvs: list[Edge]) -> bool:
    """Does a receive of ``recvs`` arrive while a send of ``sends`` (in send order) that
    its thread block runs first is still on the link?"""
    if not sends or not recvs:
        return False
    orders = [send_order(s) for s in sends]
    ends, last = [], -1
    for s in sends:
        last = max(last, s.start + s.busy)
        ends.append(last)
    for r in recvs:
        i = bisect_right(orders, recv_order(r))
        if i and ends[i - 1] > r.arrive:
            return True
    return False
