"""A step that receives and sends forwards call by call, as the executor's loop over a
step's calls runs it; a receive followed by a separate send stores and forwards."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from te_ccl.backends.scale import grid_alltoall
from te_ccl.backends.scale.grid_alltoall import METHOD, solve_grid_alltoall
from te_ccl.bounds import lower_bound
from te_ccl.collective.model import Collective, CollectiveKind
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.model.problem import build_problem
from te_ccl.runtime_limits import MSCCL
from te_ccl.schedule import Schedule, SolveInfo
from te_ccl.simulate.cosim import Member, cosimulate
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.topology import Link, Node, Topology
from te_ccl.topology.generators import mesh, torus
from te_ccl.verify.msccl.reader import read_msccl

ALPHA, BW, CNT = 10e-6, 1e9, 8
HEADER = ('<algo name="t" proto="{proto}" nchannels="1" nchunksperloop="{n}" ngpus="3" '
          'coll="custom" inplace="0" outofplace="1" minBytes="0" maxBytes="0">\n')


def chain() -> Topology:
    """g0 → g1 → g2, one link each way."""
    links = [Link(a, b, BW, ALPHA) for a, b in (("g0", "g1"), ("g1", "g2"))]
    return Topology.build("chain", [Node(f"g{i}") for i in range(3)], links)


def step(s: int, kind: str) -> str:
    return (f'      <step s="{s}" type="{kind}" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" '
            f'cnt="{CNT}" depid="-1" deps="-1" hasdep="0"/>\n')


def relay(proto: str, middle: list[tuple[int, int, str]]) -> str:
    """Rank 0 sends CNT chunks to rank 1, which passes them to rank 2 with the thread
    blocks ``middle`` (send peer, receive peer, step kinds)."""
    gpus = [[(1, -1, "s")], middle, [(-1, 1, "r")]]
    out = [HEADER.format(proto=proto, n=CNT)]
    for g, tbs in enumerate(gpus):
        out.append(f'  <gpu id="{g}" i_chunks="{CNT}" o_chunks="{CNT}" s_chunks="0">\n')
        for t, (send, recv, kinds) in enumerate(tbs):
            steps = "".join(step(s, k) for s, k in enumerate(kinds.split()))
            out.append(f'    <tb id="{t}" send="{send}" recv="{recv}" chan="0">\n{steps}'
                       "    </tb>\n")
        out.append("  </gpu>\n")
    return "".join(out) + "</algo>\n"


def chunk_time(size: int) -> float:
    return size / CNT / BW


@pytest.mark.parametrize("kind", ["rcs", "rrcs", "rrs"])
def test_fused_relay_at_large_size_streams_one_call_behind(kind: str) -> None:
    size = CNT << 22  # 4 MiB chunks: one chunk a call
    assert MSCCL.max_allowed_count("Simple", size, CNT) == 1
    res = simulate_msccl(relay("Simple", [(2, 0, kind)]), chain(), size)
    assert res.finish_time_s == pytest.approx((CNT + 1) * chunk_time(size) + 2 * ALPHA)


def test_receive_then_separate_send_stores_and_forwards() -> None:
    size = CNT << 22
    t = chunk_time(size)
    one_tb = simulate_msccl(relay("Simple", [(2, 0, "r s")]), chain(), size)
    assert one_tb.finish_time_s == pytest.approx(2 * CNT * t + 2 * ALPHA)
    # the send in its own thread block after the receive (a dependency) waits as long
    text = relay("Simple", [(-1, 0, "r"), (2, -1, "s")]).replace(
        'cnt="8" depid="-1" deps="-1" hasdep="0"/>\n    </tb>\n    <tb id="1"',
        'cnt="8" depid="-1" deps="-1" hasdep="1"/>\n    </tb>\n    <tb id="1"')
    text = text.replace('type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="8" '
                        'depid="-1" deps="-1" hasdep="0"/>\n    </tb>\n  </gpu>\n  <gpu id="2"',
                        'type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="8" '
                        'depid="0" deps="0" hasdep="0"/>\n    </tb>\n  </gpu>\n  <gpu id="2"')
    assert 'depid="0"' in text
    two_tb = simulate_msccl(text, chain(), size)
    assert two_tb.finish_time_s == pytest.approx(2 * CNT * t + 2 * ALPHA)


@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
@pytest.mark.parametrize("chunk", [1 << 10, 16 << 10, 4 << 20])
def test_calls_follow_max_allowed_count(proto: str, chunk: int) -> None:
    """At small sizes a call carries several chunks: the relay is one call behind."""
    size = CNT * chunk
    calls = MSCCL.max_allowed_count(proto, size, CNT)
    lag = min(calls, CNT)  # one call of every chunk: the whole message
    res = simulate_msccl(relay(proto, [(2, 0, "rcs")]), chain(), size)
    assert res.finish_time_s == pytest.approx((CNT + lag) * chunk_time(size) + 2 * ALPHA)


@pytest.mark.parametrize("slow", [0, 1])
def test_relay_runs_at_its_slower_link(slow: int) -> None:
    """One link at half the rate: the message crosses it in 2·CNT chunk times and the
    other link in one call more, whichever comes first: (2·CNT + 1) chunk times + 2α."""
    rates = [BW, BW]
    rates[slow] = BW / 2
    topo = Topology.build("chain", [Node(f"g{i}") for i in range(3)],
                          [Link("g0", "g1", rates[0], ALPHA), Link("g1", "g2", rates[1], ALPHA)])
    size = CNT << 22
    t = chunk_time(size)
    res = simulate_msccl(relay("Simple", [(2, 0, "rcs")]), topo, size)
    assert res.finish_time_s == pytest.approx((2 * CNT + 1) * t + 2 * ALPHA)


@pytest.mark.parametrize(("make", "dims"), [(mesh, (4, 5)), (torus, (4, 4))])
def test_row_alltoall_relays_stay_above_the_bound(monkeypatch, request, make, dims) -> None:
    """Whole blocks relayed by multi-call rcs steps at 256 MB: no file below its bound.
    The grid AlltoAll's groups are refused, so the plan is the row AlltoAll's."""
    monkeypatch.setattr(grid_alltoall, "_plan", lambda *a: "groups refused")
    grid_alltoall._either.cache_clear()
    request.addfinalizer(grid_alltoall._either.cache_clear)
    topo = make(list(dims), 50e9, 5e-7)
    coll = Collective(CollectiveKind.ALLTOALL, 1 << 28, tuple(range(topo.ngpus)))
    problem = build_problem(topo, coll)
    moves, notes = solve_grid_alltoall(problem, min_hops=0)
    info = SolveInfo(backend="scale", status=f"scale/{METHOD}: feasible", notes=notes)
    xml = lower_to_msccl(Schedule(topo, coll, problem.epoch_s, tuple(moves.transfers()),
                                  info)).decode()
    most = max(int(c) for c in re.findall(r'type="rcs"[^>]* cnt="(\d+)"', xml))
    loop = int(re.search(r'nchunksperloop="(\d+)"', xml).group(1))
    assert most > MSCCL.max_allowed_count("Simple", coll.size_bytes, loop)
    replayed = simulate_msccl(xml, topo, coll.size_bytes).finish_time_s
    assert replayed >= lower_bound(topo, coll).seconds * (1 - 1e-9)


def test_a_short_last_call_behind_a_slower_link_in_waits_for_the_call_before_it() -> None:
    """9 chunks in calls of 4, 4 and 1, coming in at half the rate of the link out: the
    second call arrives at 16 chunk times and leaves in 4 more, ahead of the last call's
    one, so the relay is done at 21 chunk times, not one after the last arrival (19)."""
    topo = Topology.build("chain", [Node(f"g{i}") for i in range(3)],
                          [Link("g0", "g1", BW / 2, ALPHA), Link("g1", "g2", BW, ALPHA)])
    chunk, n = 512 << 10, CNT + 1
    assert MSCCL.max_allowed_count("Simple", n * chunk, n) == 4
    text = relay("Simple", [(2, 0, "rcs")]).replace(f'"{CNT}"', f'"{n}"')
    res = simulate_msccl(text, topo, n * chunk)
    assert res.finish_time_s == pytest.approx(21 * chunk / BW + 2 * ALPHA)


def test_co_simulated_relays_keep_their_own_call_size() -> None:
    """A member that shares no link with another finishes as it does alone, though the
    other's calls are smaller (its relays would otherwise start before their first call
    has come in)."""
    links = [Link(f"g{a}", f"g{a + 1}", BW, ALPHA) for a in (0, 1, 3, 4)]
    topo = Topology.build("two chains", [Node(f"g{i}") for i in range(6)], links)
    algo = read_msccl(relay("Simple", [(2, 0, "rcs")]))
    big = Member("big", algo, (0, 1, 2), CNT << 19)    # calls of 4 chunks, 2 MiB
    small = Member("small", algo, (3, 4, 5), CNT << 10)  # one call of 8 KiB
    alone = cosimulate(topo, [big]).finish_s["big"]
    assert cosimulate(topo, [big, small]).finish_s["big"] == pytest.approx(alone)
    # and never below the relay that streams call by call, as simulate_msccl replays it
    assert alone >= simulate_msccl(algo, topo, CNT << 19, ranks=(0, 1, 2)).finish_time_s


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 20), st.integers(1, 8), st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.0]))
def test_a_relay_replays_as_its_calls_forwarded_one_by_one(n: int, per_call: int,
                                                          rate_in: float) -> None:
    """Any cnt, call size and ratio of the links' rates: the replay finishes when call j,
    in once its chunks have crossed the link in, leaves after call j - 1 has."""
    topo = Topology.build("chain", [Node(f"g{i}") for i in range(3)],
                          [Link("g0", "g1", BW * rate_in, ALPHA), Link("g1", "g2", BW, ALPHA)])
    chunk = (2 << 20) // per_call
    assert MSCCL.max_allowed_count("Simple", n * chunk, n) == per_call
    into, out = chunk / (BW * rate_in), chunk / BW
    end = 0.0
    for first in range(0, n, per_call):
        calls = min(per_call, n - first)
        end = max(end, (first + calls) * into + ALPHA) + calls * out
    text = relay("Simple", [(2, 0, "rcs")]).replace(f'"{CNT}"', f'"{n}"')
    res = simulate_msccl(text, topo, n * chunk)
    assert res.finish_time_s == pytest.approx(end + ALPHA)
