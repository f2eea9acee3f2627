"""The lowering follows the schedule's replay, not its epochs (``retime``), and splits a
thread block whose sends would hold up its own receives (``holding_pairings``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from te_ccl.baselines import build_baseline
from te_ccl.collective import Collective, CollectiveKind
from te_ccl.compiler import Timer, forward_only
from te_ccl.lower.msccl import lower_to_msccl
from te_ccl.lower.msccl.collapse_switches import Edge, collapse_switches
from te_ccl.lower.msccl.instructions import Fusion, Instr
from te_ccl.lower.msccl.ir import Op
from te_ccl.lower.msccl.retime import replay_timed
from te_ccl.lower.msccl.threadblocks import holding_pairings
from te_ccl.schedule import Schedule, Transfer
from te_ccl.simulate import simulate_schedule
from te_ccl.simulate.msccl import simulate_msccl
from te_ccl.spec.topology import load_topology
from te_ccl.topology import Link, Node, Topology

DATA = Path(__file__).parent / "data"


def _far_pair() -> Schedule:
    """Two GPUs 10 us apart; each sends its 4 chunks (1 us on the link) one epoch apart,
    an epoch (20 us) covering a whole hop: in epochs a chunk has arrived before the one
    two places later is sent, in the replay all four are in flight at once."""
    topo = Topology.build("far", [Node("g0"), Node("g1")],
                          [Link("g0", "g1", 1e9, 10e-6), Link("g1", "g0", 1e9, 10e-6)])
    coll = Collective(CollectiveKind.ALLGATHER, 8000, (0, 1), chunks_per_rank=4)
    tr = tuple(Transfer(c.id, f"g{c.sources[0]}", f"g{1 - c.sources[0]}", c.in_index,
                        c.in_index + 1) for c in coll.chunks())
    return Schedule(topo, coll, 20e-6, tr)


def test_edges_carry_the_replays_picoseconds_and_keep_their_epochs():
    schedule = _far_pair()
    edges = replay_timed(collapse_switches(schedule), schedule)
    g0 = [e for e in edges if e.src == 0]
    assert [e.start for e in g0] == [0, 1_000_000, 2_000_000, 3_000_000]
    assert [e.arrive - e.start for e in g0] == [11_000_000] * 4
    assert [e.busy for e in g0] == [1_000_000] * 4
    assert [e.epoch for e in g0] == [0, 1, 2, 3]


def test_partials_arriving_in_one_epoch_keep_their_own_arrival():
    """Two partials reach the root in the same epoch over links 1 and 5 us long."""
    topo = Topology.build("tri", [Node(f"g{i}") for i in range(3)],
                          [Link("g1", "g0", 1e9, 1e-6), Link("g2", "g0", 1e9, 5e-6)])
    coll = Collective(CollectiveKind.REDUCE, 1000, (0, 1, 2), root=0)
    tr = (Transfer(0, "g1", "g0", 0, 1, "reduce"), Transfer(0, "g2", "g0", 0, 1, "reduce"))
    schedule = Schedule(topo, coll, 10e-6, tr)
    edges = replay_timed(collapse_switches(schedule), schedule)
    assert sorted((e.src, e.arrive - e.start) for e in edges) == [(1, 2_000_000),
                                                                  (2, 6_000_000)]


def test_a_link_with_more_chunks_in_flight_than_slots_gets_more_channels(kit):
    schedule = _far_pair()
    xml = lower_to_msccl(schedule)
    kit.assert_verifies(xml)
    # a connection holds 2 sends under Simple: four in flight need two channels
    assert etree.fromstring(xml).get("nchannels") == "2"
    lowered = simulate_msccl(xml.decode(), schedule.topology, schedule.collective.size_bytes)
    assert lowered.finish_time_s == pytest.approx(simulate_schedule(schedule).finish_time_s)


def _edge(start: int, arrive: int, chunk: int, src: int, dst: int, seq: int, *,
          busy: int = 1, final: bool = False) -> Edge:
    return Edge(start, arrive, chunk, src, dst, seq, busy=busy, final=final)


def _joined(plain_arrives: int) -> tuple[tuple[Edge, ...], list[Fusion]]:
    """GPU 1 sends its own chunk 1 to 2 over 0..10, forwards chunk 0 from 0 to 2 (fused)
    over 15..25 and takes chunk 2 from 0 (a delivery) at ``plain_arrives``."""
    into, out = _edge(0, 3, 0, 0, 1, 0), _edge(15, 30, 0, 1, 2, 1, busy=10)
    own = _edge(0, 12, 1, 1, 2, 2, busy=10)
    plain = _edge(1, plain_arrives, 2, 0, 1, 3, final=True)
    fusion = Fusion(Instr(1, Op.RECV, 0, (3, 0, into), recv=into),
                    Instr(1, Op.SEND, 0, (15, 1, out), send=out), Op.RECV_COPY_SEND)
    return (into, out, own, plain), [fusion]


def test_a_receive_arriving_while_its_thread_blocks_send_is_on_the_link_splits_it():
    edges, fusions = _joined(plain_arrives=5)
    chan = {id(e): 0 for e in edges}
    assert holding_pairings(edges, chan, fusions, 128, 64) == {(1, 0, 0, 2)}
    # kept where the split would exceed the thread blocks or the sending one's steps
    assert holding_pairings(edges, chan, fusions, 1, 64) == set()
    assert holding_pairings(edges, chan, fusions, 128, 2) == set()


def test_a_pairing_whose_receives_would_leave_their_send_order_is_kept():
    # the fused receive is sent first but arrives after the delivery (epochs allow it)
    edges, fusions = _joined(plain_arrives=2)
    assert holding_pairings(edges, {id(e): 0 for e in edges}, fusions, 128, 64) == set()


def test_a_receive_after_the_send_has_left_keeps_the_pairing():
    edges, fusions = _joined(plain_arrives=10)
    assert holding_pairings(edges, {id(e): 0 for e in edges}, fusions, 128, 64) == set()


def _ratio(schedule: Schedule) -> float:
    timing = Timer().file_timing(schedule)
    return timing.xml_s / timing.schedule_s


@pytest.mark.parametrize("topology, kind, size, baseline", [
    ("ndv2x2", "allgather", 1000, "ring"),
    ("ndv2x2", "allgather", 1_000_000, "hierarchical"),
    ("ndv2x2", "alltoall", 1000, "direct"),
    ("ring8", "alltoall", 10 ** 9, "direct"),
])
def test_templates_lower_at_their_schedules_time(topology, kind, size, baseline):
    """Rows of the benchmark that lost 3-25% in the lowering."""
    topo = load_topology(topology)
    coll = Collective(CollectiveKind(kind), size, tuple(range(topo.ngpus)))
    assert _ratio(build_baseline(baseline, forward_only(topo), coll)) == pytest.approx(1.0)


def test_a_latency_bound_flow_schedule_lowers_at_its_time():
    """A mesh4x4 ReduceScatter of 1 kB solved by the flow model (saved: solves vary)."""
    text = (DATA / "mesh4x4_reducescatter_1000B_milp.json").read_text()
    assert _ratio(Schedule.from_json(text, load_topology("mesh4x4"))) == pytest.approx(1.0)
