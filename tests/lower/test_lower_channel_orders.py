"""The channel pass compares packed int orders and checks a connection's FIFO depth by
index arithmetic; both must decide exactly as the order tuples and a check of the whole
connection would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.lower.msccl.channels import _Conn, _conn_fits, _order_keys
from te_ccl.lower.msccl.collapse_switches import Edge
from te_ccl.lower.msccl.instructions import packed_order, recv_order, send_order


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
