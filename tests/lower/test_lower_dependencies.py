"""Passes 4-5 on one GPU: thread blocks and their dependencies, checked against the
hazards of the instruction list (reachability over the printed steps, no vector clocks)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.errors import RuntimeLimitError, TecclError
from te_ccl.lower.msccl.buffers import ResolvedSlots
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.dependencies import add_dependencies
from te_ccl.lower.msccl.instructions import Instr
from te_ccl.lower.msccl.ir import NO_PEER, Buf, Op, Slot, Threadblock
from te_ccl.lower.msccl.threadblocks import build_threadblocks

PEERS = 4
ELSEWHERE = Slot(Buf.OUTPUT, 99)  # the other end's slot of every edge


def _gpu0(moves: list[tuple[str, int, int, int, int, int]]) -> tuple[list[Instr], dict]:
    """GPU 0's instructions in time order, and the channel of each edge. A move is
    (kind, slot, other slot, peer, channel, via): a send, a receive, a receive fused into
    a send to the next peer, or a local copy."""
    instrs, chan = [], {}
    for i, (kind, a, b, peer, c, via) in enumerate(moves):
        sa, sb = Slot(Buf.OUTPUT, a), Slot(Buf.SCRATCH, b)
        into = Edge(i, i + 1, i, peer + 1, 0, 2 * i)
        out = Edge(i, i + 1, i, 0, (peer + 1) % PEERS + 1, 2 * i + 1, via=via)
        order = (i, 0, (i,))
        if kind == "s":
            ins = Instr(0, Op.SEND, i, order, src=sa, send=out, reads=(sa,))
        elif kind == "r":
            ins = Instr(0, Op.RECV, i, order, dst=sa, recv=into, writes=(sa,))
        elif kind == "rcs":
            ins = Instr(0, Op.RECV_COPY_SEND, i, order, src=sa, dst=sa, recv=into, send=out,
                        writes=(sa,))
        else:
            ins = Instr(0, Op.COPY, i, order, src=sa, dst=sb, reads=(sa,), writes=(sb,))
        for e in (ins.recv, ins.send):
            if e is not None:
                chan[id(e)] = c
        instrs.append(ins)
    return instrs, chan


def _hazards(instrs: list[Instr], link_order: bool) -> list[tuple[int, int]]:
    """Pairs (earlier, later) of instruction positions that must run in that order."""
    pairs = []
    for j, b in enumerate(instrs):
        for i, a in enumerate(instrs[:j]):
            if set(a.writes) & set(b.reads + b.writes) or set(a.reads) & set(b.writes) or (
                    link_order and a.send and b.send and a.send.link == b.send.link):
                pairs.append((i, j))
    return pairs


def _reaches(tbs: list[Threadblock]) -> set[tuple[tuple[int, int], tuple[int, int]]]:
    """Happens-before between steps: in-block order and depid/deps (steps 0..deps done)."""
    preds: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for tb in tbs:
        for step in tb.steps:
            p = {(tb.id, step.s - 1)} if step.s else set()
            if step.depid >= 0:
                p.add((step.depid, step.deps))
            preds[(tb.id, step.s)] = p
    done: dict[tuple[int, int], set[tuple[int, int]]] = {}

    def before(x: tuple[int, int]) -> set[tuple[int, int]]:
        if x not in done:
            done[x] = set()
            for p in preds[x]:
                done[x] |= {p} | before(p)
        return done[x]

    return {(a, x) for x in preds for a in before(x)}


MOVES = st.lists(st.tuples(st.sampled_from(["s", "r", "rcs", "cpy"]), st.integers(0, 3),
                           st.integers(0, 1), st.integers(0, PEERS - 1), st.integers(0, 1),
                           st.sampled_from([-1, 7])), max_size=40)


@settings(max_examples=150, deadline=None)
@given(moves=MOVES, link_order=st.booleans(), max_depid=st.sampled_from([1, 3, 127]))
def test_every_hazard_is_ordered_by_the_printed_dependencies(moves, link_order, max_depid):
    instrs, chan = _gpu0(moves)
    slots = ResolvedSlots({0: {}}, dict.fromkeys(chan, ELSEWHERE), dict.fromkeys(chan, ELSEWHERE))
    plans = build_threadblocks(instrs, chan, 1000)
    assert sorted(i for p in plans for i in p.at) == list(range(len(instrs)))
    for p in plans:
        assert list(p.at) == sorted(p.at) and p.instrs == tuple(instrs[i] for i in p.at)
    try:
        tbs = add_dependencies(0, plans, slots, link_order, waitable=max_depid + 1)
    except RuntimeLimitError:  # more thread blocks waited for than depid can name
        assert len(plans) > max_depid + 1
        return
    assert [tb.id for tb in tbs] == list(range(len(plans)))
    by_peers = {(p.send, p.recv, p.chan): p for p in plans}  # unique: one local block
    where: dict[int, tuple[int, int]] = {}  # instruction position -> (thread block, step)
    waited = {(x.depid, x.deps) for tb in tbs for x in tb.steps if x.depid >= 0}
    for tb in tbs:
        data = [x for x in tb.steps if x.op is not Op.NOP]
        plan = by_peers[(tb.send, tb.recv, tb.chan)]
        assert [x.op for x in data] == [i.op for i in plan.instrs]
        for i, x in zip(plan.at, data, strict=True):
            where[i] = (tb.id, x.s)
        for x in tb.steps:
            assert x.hasdep == ((tb.id, x.s) in waited)
            assert x.depid != tb.id and x.depid <= max_depid
        for x in data:  # the nops right before a step and the step wait for distinct blocks
            k = x.s
            while k and tb.steps[k - 1].op is Op.NOP:
                k -= 1
            ids = [y.depid for y in tb.steps[k:x.s + 1] if y.depid >= 0]
            assert len(ids) == len(set(ids))
    hb = _reaches(tbs)
    for i, j in _hazards(instrs, link_order):
        (ti, si), (tj, sj) = where[i], where[j]
        assert (si < sj) if ti == tj else ((ti, si), (tj, sj)) in hb
    _assert_waits_point_back(tbs, where)


def _assert_waits_point_back(tbs: list[Threadblock], where: dict[int, tuple[int, int]]) -> None:
    """Every wait (of a step or of the nops before it) names a step earlier in the GPU's
    time order: the waits and the blocks' own order cannot form a cycle."""
    pos = {at: i for i, at in where.items()}
    for tb in tbs:
        owner = None
        for x in reversed(tb.steps):
            if x.op is not Op.NOP:
                owner = pos[(tb.id, x.s)]
            if x.depid >= 0:
                assert pos[(x.depid, x.deps)] < owner


def _nops(moves: list[tuple[str, int, int, int, int, int]]
          ) -> tuple[list[Threadblock], list, int]:
    """GPU 0's thread blocks with their dependencies, their plans, and the nops among
    their steps."""
    instrs, chan = _gpu0(moves)
    slots = ResolvedSlots({0: {}}, dict.fromkeys(chan, ELSEWHERE), dict.fromkeys(chan, ELSEWHERE))
    plans = build_threadblocks(instrs, chan, 1000)
    tbs = add_dependencies(0, plans, slots, True)
    return tbs, plans, len([x for tb in tbs for x in tb.steps if x.op is Op.NOP])


def test_a_second_wait_moves_onto_an_earlier_idle_step_instead_of_a_nop():
    """Send 5 waits for its value (receive 1) and the link's previous send (4, another
    channel). Send 3 of its thread block waits for nothing and starts after receive 1 is
    in, so it takes that wait: no ``nop``, and no step starts later than scheduled."""
    moves = [("s", 1, 0, 0, 0, -1), ("r", 0, 0, 1, 0, -1), ("s", 3, 0, 0, 1, -1),
             ("s", 3, 0, 0, 1, -1), ("s", 1, 0, 0, 0, -1), ("s", 0, 0, 0, 1, -1)]
    tbs, plans, nops = _nops(moves)
    assert not nops
    sender = next(tb for tb, p in zip(tbs, plans, strict=True) if p.at == (2, 3, 5))
    receiver = next(tb for tb, p in zip(tbs, plans, strict=True) if p.at == (1,))
    assert (sender.steps[1].depid, sender.steps[1].deps) == (receiver.id, 0)


def test_a_second_wait_moves_onto_the_thread_block_of_the_wait_that_stays():
    """Send 3 now shares send 4's channel, so send 5's thread block has no idle step after
    receive 1 (send 2 waits for the link's send 0). Send 4, which send 5 keeps waiting
    for, waits for nothing and starts after receive 1 is in: it takes that wait. Where
    send 5's link predecessor (now send 3) waits itself and its thread block's idle step
    comes before receive 1, a ``nop`` stays."""
    moves = [("s", 1, 0, 0, 0, -1), ("r", 0, 0, 1, 0, -1), ("s", 3, 0, 0, 1, -1),
             ("s", 3, 0, 0, 0, -1), ("s", 1, 0, 0, 0, -1), ("s", 0, 0, 0, 1, -1)]
    tbs, plans, nops = _nops(moves)
    assert not nops
    link = next(tb for tb, p in zip(tbs, plans, strict=True) if p.at == (0, 3, 4))
    receiver = next(tb for tb, p in zip(tbs, plans, strict=True) if p.at == (1,))
    assert (link.steps[2].depid, link.steps[2].deps) == (receiver.id, 0)
    moves[4] = ("s", 1, 0, 1, 0, -1)  # to another peer: send 3 is the link's previous send
    assert _nops(moves)[2] == 1


def test_a_receive_fused_twice_to_different_peers_is_refused():
    instrs, chan = _gpu0([("rcs", 0, 0, 0, 0, -1), ("r", 1, 0, 0, 0, -1)])
    other = instrs[0]._replace(send=instrs[0].send._replace(dst=3, seq=9), order=(2, 0, (2,)))
    chan[id(other.send)] = 0
    with pytest.raises(TecclError, match="send peers"):
        build_threadblocks([*instrs, other], chan, 1000)


def test_local_copies_fill_thread_blocks_of_at_most_the_cap():
    instrs, chan = _gpu0([("cpy", k % 4, 0, 0, 0, -1) for k in range(5)])
    plans = build_threadblocks(instrs, chan, 2)
    assert [(p.send, p.recv, p.at) for p in plans] == [(NO_PEER, NO_PEER, (0, 1)),
                                                       (NO_PEER, NO_PEER, (2, 3)),
                                                       (NO_PEER, NO_PEER, (4,))]
