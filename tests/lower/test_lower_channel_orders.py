"""The channel pass compares packed int orders, checks a connection's FIFO depth by
index arithmetic and writes out the checks of a chain's next hop; each must decide
exactly as the order tuples, a check of the whole connection and the general checks
would."""

from __future__ import annotations

from collections import Counter
from contextlib import suppress
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import te_ccl.lower.msccl.parallel as parallel
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import SolveParams, solve
from te_ccl.errors import RuntimeLimitError
from te_ccl.lower.msccl import build_program, channels
from te_ccl.lower.msccl.channels import (
    _Conn,
    _conn_fits,
    _free_channels,
    _order_keys,
    _pairs_open,
    _steps_fit,
)
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import packed_order, recv_order, send_order
from te_ccl.spec.topology import load_topology


@st.composite
def _edges(draw) -> tuple[Edge, ...]:
    n = draw(st.integers(1, 12))
    out = []
    for seq in range(n):
        start = draw(st.integers(0, 4))
        src, dst = draw(st.sampled_from([(0, 1), (1, 0), (1, 2), (2, 1)]))
        out.append(Edge(start, start + draw(st.integers(1, 3)), draw(st.integers(0, 2)), src,
                        dst, seq, busy=draw(st.integers(1, 2)), final=draw(st.booleans())))
    return tuple(out)


@given(_edges())
def test_packed_orders_compare_as_the_order_tuples(edges):
    ends, _ = _order_keys(edges, set())
    n = len(edges)
    index = {e: i for i, e in enumerate(sorted(edges))}
    orders = [(o, k) for e in edges for o, k in ((send_order(e), ends[id(e)][0]),
                                                  (recv_order(e), ends[id(e)][1]))]
    for o, k in orders:
        assert k == packed_order(o, index[o[2]], n)
        for p, q in orders:
            assert (o < p) == (k < q) and (o == p) == (k == q)


def _fits_whole(sends: list[int], recvs: list[int], hold: dict, depth: int) -> bool:
    """The connection's rules checked on all of it: FIFO order, a message ``depth`` places
    earlier freed before each send, no plain receive held up by the fused step before it."""
    freed = [hold[r][0] if r in hold else r for r in recvs]
    return recvs == sorted(recvs) \
        and all(freed[k - depth] < sends[k] for k in range(depth, len(sends))) \
        and not any(a in hold and b not in hold and b < hold[a][1]
                    for a, b in zip(recvs, recvs[1:], strict=False))


@st.composite
def _connection(draw):
    """A connection that keeps its rules, a fused-step ``hold`` and an edge to add (sends
    at even orders, each received an odd number of places later)."""
    depth = draw(st.sampled_from([2, 3, 8]))
    sends = draw(st.lists(st.integers(0, 40), min_size=2, max_size=30, unique=True))
    pairs = [(2 * t, 2 * (t + draw(st.integers(0, 12))) + 1) for t in sends]
    rcvs = [r for _, r in pairs]
    hold = {r: (r + 2 * draw(st.integers(0, 10)) + 1, r + draw(st.integers(0, 20)))
            for r in draw(st.lists(st.sampled_from(rcvs), max_size=8))}
    conn = _Conn(hold=hold)
    for snd, rcv in pairs[:-1]:  # keep the edges that fit, as the pass would
        sends, recvs = sorted([*conn.snd, snd]), conn.rcv[:]
        recvs.insert(sends.index(snd), rcv)
        if len(set(recvs)) == len(recvs) and _fits_whole(sends, recvs, hold, depth):
            conn.snd, conn.rcv = sends, recvs
    return conn, pairs[-1], depth


@settings(max_examples=300)
@given(_connection())
def test_connection_check_decides_as_the_whole_connection(case):
    conn, (snd, rcv), depth = case
    if rcv in conn.rcv:
        return
    sends = sorted([*conn.snd, snd])
    recvs = conn.rcv[:]
    recvs.insert(sends.index(snd), rcv)
    assert _conn_fits(conn, snd, rcv, depth) == _fits_whole(sends, recvs, conn.hold, depth)


@settings(max_examples=300)
@given(st.sampled_from([2, 3, 8]), st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12)),
                                           min_size=2, max_size=40, unique_by=lambda x: x[0]),
       st.lists(st.tuples(st.integers(0, 10), st.integers(0, 20)), max_size=12))
def test_connection_check_decides_as_the_whole_connection_as_it_fills(depth, offers, holds):
    """Edges offered one after another, each placed where it fits: the gaps the
    connection remembers as closed for good stay closed, so every answer is still the
    whole connection's."""
    pairs = [(2 * t, 2 * (t + d) + 1) for t, d in offers]
    hold = {r: (r + 2 * a + 1, r + b) for (_, r), (a, b) in zip(pairs, holds, strict=False)}
    conn = _Conn(hold=hold)
    for snd, rcv in pairs:
        if rcv in conn.rcv:
            continue
        sends = sorted([*conn.snd, snd])
        i = sends.index(snd)
        recvs = conn.rcv[:i] + [rcv] + conn.rcv[i:]
        fits = _fits_whole(sends, recvs, hold, depth)
        assert _conn_fits(conn, snd, rcv, depth) == fits
        if fits:
            conn.snd, conn.rcv = sends, recvs


def _extends_in_general(last: Edge, nxt: Edge, c: int, state) -> bool:
    """The hop check of the channel pass built from the general checks, as :func:`_fits`
    would make it of what the hop changes."""
    snd, _, lane = state.ends[id(last)]
    out, rcv, next_lane = state.ends[id(nxt)]
    pairing = [(last.dst, last.src, nxt.dst)]
    return (not lane[c].snd or _conn_fits(lane[c], snd, out, state.depth)) \
        and bool(_free_channels(pairing, state) >> c & 1) \
        and (not next_lane[c].snd or _conn_fits(next_lane[c], out, rcv, state.depth)) \
        and _pairs_open(pairing, c, state) \
        and _steps_fit([(nxt.dst, nxt.src, None), *pairing], pairing, c, state)


@pytest.mark.parametrize("waitable", [None, 6])
@pytest.mark.parametrize(("topo", "kind"), [("mesh4x4", "allreduce"), ("mesh4x4", "allgather"),
                                            ("torus4x4", "allgather"), ("dgx1", "allreduce")])
def test_the_written_out_hop_check_decides_as_the_general_checks(monkeypatch, topo, kind,
                                                                 waitable):
    """:func:`extends` writes out the free-channel, open-pairing and step checks of its one
    pairing; on every hop of these lowerings (reductions and copies, hot GPUs on a mesh,
    none on a torus, and with few thread blocks a GPU may have waited for) it must decide
    as they do."""
    topology = load_topology(topo)
    coll = Collective(CollectiveKind(kind), 1 << 30, tuple(range(topology.ngpus)))
    schedule = solve(topology, coll, SolveParams(backend="scale", time_limit_s=600))  # ends in ~1 s
    fast, seen = channels.extends, Counter()

    def both(last, nxt, c, state):
        decided = fast(last, nxt, c, state)
        assert decided == _extends_in_general(last, nxt, c, state)
        seen[decided] += 1
        return decided

    monkeypatch.setattr(channels, "extends", both)
    if waitable is not None:
        monkeypatch.setattr(parallel, "assign_channels",
                            partial(channels.assign_channels, waitable=waitable))
    with suppress(RuntimeLimitError):  # so few may not fit: the hops checked still count
        build_program(schedule)
    assert seen[True] and seen[False]
